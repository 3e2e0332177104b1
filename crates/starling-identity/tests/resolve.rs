//! `Resolver` against `PlcStandIn` on loopback: the 148 real plc.directory documents of
//! `../shared/data/jetstream/did_docs.json.zst` packed into `GetIdentityByDid` fields and
//! compared with what this file computes from the raw JSON; unknown, malformed, oversized and
//! misaddressed documents; the cache (hits, `invalidate`, TTL on a manual clock, eviction);
//! one fetch per DID at a time; the bound on concurrent fetches; timeouts; did:web over the
//! test-only loopback option; `verify_handle`.

// Tests may panic: a failed assertion or a missing file is a failed test.
#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use starling_identity::stand_in::{PlcStandIn, load_documents};
use starling_identity::{
    Clock, Identity, IdentityError, ManualClock, Resolver, ResolverConfig, ResolverStats,
};

/// `did_docs.json.zst`, or `None` (after saying so) if the shared data is absent. On CI
/// (`CI=true`) an absent file fails the test instead, so it can never be skipped silently there.
fn did_docs_path() -> Option<PathBuf> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/data/jetstream/did_docs.json.zst");
    if path.is_file() {
        return Some(path);
    }
    let message = format!(
        "this test needs ../shared/data/jetstream/did_docs.json.zst (looked in {})",
        path.display()
    );
    assert!(std::env::var("CI").as_deref() != Ok("true"), "{message}");
    println!("skipping: {message}");
    None
}

/// Whether an error is of the kind a case expects.
type IsExpected = fn(&IdentityError) -> bool;

fn config(stand_in: &PlcStandIn) -> ResolverConfig {
    ResolverConfig {
        plc_url: stand_in.url(),
        timeout: Duration::from_secs(10),
        ..ResolverConfig::default()
    }
}

/// A minimal current-format PLC document.
fn document(did: &str, handle: &str) -> Value {
    json!({
        "@context": ["https://www.w3.org/ns/did/v1"],
        "id": did,
        "alsoKnownAs": [format!("at://{handle}")],
        "verificationMethod": [{
            "id": format!("{did}#atproto"),
            "type": "Multikey",
            "controller": did,
            "publicKeyMultibase": "zQ3shrc8v5X6ZiANcZxA6JerfT2T4SskeCGxpmtDfMuHF9KRj",
        }],
        "service": [{
            "id": "#atproto_pds",
            "type": "AtprotoPersonalDataServer",
            "serviceEndpoint": "https://pds.example.com",
        }],
    })
}

/// A syntactically valid did:plc numbered `n`.
fn plc_did(n: usize) -> String {
    format!("did:plc:{n:0>24}")
}

/// Polls `condition` until it holds, failing the test after 10 s.
async fn wait_until(what: &str, condition: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !condition() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// The fragment after `#` of a verification method or service id.
fn fragment(id: &str) -> &str {
    &id[id.find('#').unwrap() + 1..]
}

/// `GetIdentityByDid`'s fields for a raw document, computed from the JSON without the crate.
fn expected(raw: &Value) -> (Option<String>, Value, Value) {
    let handle = raw["alsoKnownAs"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|alias| alias.as_str().unwrap().strip_prefix("at://"))
        .map(str::to_owned)
        .next();
    let mut keys = serde_json::Map::new();
    for method in raw["verificationMethod"].as_array().unwrap() {
        let key =
            json!({"Type": method["type"], "PublicKeyMultibase": method["publicKeyMultibase"]});
        keys.insert(fragment(method["id"].as_str().unwrap()).to_owned(), key);
    }
    let mut services = serde_json::Map::new();
    for service in raw["service"].as_array().unwrap() {
        let entry = json!({"Type": service["type"], "URL": service["serviceEndpoint"]});
        services.insert(fragment(service["id"].as_str().unwrap()).to_owned(), entry);
    }
    (handle, Value::Object(keys), Value::Object(services))
}

// Every real document resolves to the DID, handle, keys and services computed independently
// from its raw JSON; single-key documents pack byte for byte into the shape the AppView reads
// (`{"atproto":{"Type":"Multikey","PublicKeyMultibase":"z…"}}`). A second pass is all cache.
#[tokio::test]
async fn real_documents_resolve_to_independently_packed_fields() {
    let Some(path) = did_docs_path() else {
        return;
    };
    let documents = load_documents(&path).unwrap();
    assert_eq!(documents.len(), 148, "the README promises 148 documents");
    let stand_in = PlcStandIn::start(documents.clone()).await.unwrap();
    let resolver = Resolver::new(config(&stand_in)).unwrap();
    for (did, raw) in &documents {
        let identity = resolver.resolve(did).await.unwrap().unwrap();
        let (handle, keys, services) = expected(raw);
        assert_eq!(identity.did, *did);
        assert_eq!(identity.handle, handle, "{did}");
        assert!(
            identity.handle.is_some(),
            "{did}: every real document has a handle"
        );
        let keys_json: Value = serde_json::from_slice(&identity.keys_json).unwrap();
        let services_json: Value = serde_json::from_slice(&identity.services_json).unwrap();
        assert_eq!(keys_json, keys, "{did}");
        assert_eq!(services_json, services, "{did}");
        assert_eq!(keys_json["atproto"]["Type"], "Multikey", "{did}");
        let multikey = keys_json["atproto"]["PublicKeyMultibase"].as_str().unwrap();
        assert!(multikey.starts_with('z'), "{did}: {multikey}");
        let method = &raw["verificationMethod"][0];
        let exact = format!(
            r#"{{"atproto":{{"Type":"{}","PublicKeyMultibase":"{}"}}}}"#,
            method["type"].as_str().unwrap(),
            method["publicKeyMultibase"].as_str().unwrap()
        );
        assert_eq!(std::str::from_utf8(&identity.keys_json).unwrap(), exact);
    }
    assert_eq!(stand_in.requests_served(), 148);
    for did in documents.keys() {
        assert!(resolver.resolve(did).await.unwrap().is_some());
    }
    assert_eq!(
        stand_in.requests_served(),
        148,
        "the second pass must be cached"
    );
    assert_eq!(resolver.stats().cache_hits, 148);
}

// An unknown DID is `Ok(None)`, cached for `negative_ttl` (not `ttl`) on a manual clock.
#[tokio::test]
async fn unknown_did_is_none_and_cached_briefly() {
    let stand_in = PlcStandIn::start(HashMap::new()).await.unwrap();
    let clock = ManualClock::new();
    let config = ResolverConfig {
        negative_ttl: Duration::from_secs(60),
        ttl: Duration::from_secs(3600),
        ..config(&stand_in)
    };
    let resolver = Resolver::with_clock(config, Clock::Manual(clock.clone())).unwrap();
    let did = plc_did(1);
    assert_eq!(resolver.resolve(&did).await, Ok(None));
    assert_eq!(resolver.resolve(&did).await, Ok(None));
    assert_eq!(stand_in.requests_served(), 1);
    clock.advance(Duration::from_secs(59));
    assert_eq!(resolver.resolve(&did).await, Ok(None));
    assert_eq!(stand_in.requests_served(), 1);
    stand_in.insert(&did, document(&did, "new.example.com"));
    clock.advance(Duration::from_secs(1));
    let identity = resolver.resolve(&did).await.unwrap().unwrap();
    assert_eq!(identity.handle.as_deref(), Some("new.example.com"));
    assert_eq!(stand_in.requests_served(), 2);
}

// Malformed JSON, a document for another DID, a document missing a required field and one over
// `document_bytes_max` are errors that name the DID. Errors are not cached: once the document
// is fixed, the next lookup fetches it.
#[tokio::test]
async fn bad_documents_are_errors_naming_the_did() {
    let stand_in = PlcStandIn::start(HashMap::new()).await.unwrap();
    let config = ResolverConfig {
        document_bytes_max: 4096,
        ..config(&stand_in)
    };
    let resolver = Resolver::new(config).unwrap();
    let cases: Vec<(Vec<u8>, IsExpected)> = vec![
        (b"{\"id\": ".to_vec(), |err| {
            matches!(err, IdentityError::BadDocument { .. })
        }),
        (b"<html>".to_vec(), |err| {
            matches!(err, IdentityError::BadDocument { .. })
        }),
        (
            document(&plc_did(99), "x.example.com")
                .to_string()
                .into_bytes(),
            |err| matches!(err, IdentityError::WrongId { .. }),
        ),
        (
            json!({"id": plc_did(2), "verificationMethod": [{"id": "#atproto"}]})
                .to_string()
                .into_bytes(),
            |err| matches!(err, IdentityError::BadDocument { .. }),
        ),
        (vec![b' '; 5000], |err| {
            matches!(err, IdentityError::TooLarge { .. })
        }),
    ];
    assert!(!cases.is_empty());
    let did = plc_did(2);
    for (body, is_expected) in cases {
        stand_in.insert_raw(&did, body);
        let err = resolver.resolve(&did).await.unwrap_err();
        assert!(is_expected(&err), "{err:?}");
        assert!(err.to_string().contains(&did), "{err}");
        assert!(!err.is_transient(), "{err}");
    }
    stand_in.insert(&did, document(&did, "fixed.example.com"));
    let identity = resolver.resolve(&did).await.unwrap().unwrap();
    assert_eq!(identity.handle.as_deref(), Some("fixed.example.com"));
}

// Inputs that are not resolvable DIDs fail before any request is made.
#[tokio::test]
async fn bad_dids_make_no_request() {
    let stand_in = PlcStandIn::start(HashMap::new()).await.unwrap();
    let resolver = Resolver::new(config(&stand_in)).unwrap();
    let cases: &[(&str, IsExpected)] = &[
        ("", |err| matches!(err, IdentityError::BadDid { .. })),
        ("alice.example.com", |err| {
            matches!(err, IdentityError::BadDid { .. })
        }),
        ("did:plc:", |err| {
            matches!(err, IdentityError::BadDid { .. })
        }),
        ("did:plc:abc/../x", |err| {
            matches!(err, IdentityError::BadDid { .. })
        }),
        ("did:key:zQ3shrc8v5X6ZiANcZxA6Jer", |err| {
            matches!(err, IdentityError::UnsupportedMethod { .. })
        }),
        ("did:plc:ABCDEFGHIJKLMNOPQRSTUVWX", |err| {
            matches!(err, IdentityError::BadIdentifier { .. })
        }),
        ("did:plc:a%3Ab", |err| {
            matches!(err, IdentityError::BadIdentifier { .. })
        }),
        ("did:web:example.com:u:alice", |err| {
            matches!(err, IdentityError::BadIdentifier { .. })
        }),
        ("did:web:127.0.0.1%3A2582", |err| {
            matches!(err, IdentityError::BadIdentifier { .. })
        }),
    ];
    for (did, is_expected) in cases {
        let err = resolver.resolve(did).await.unwrap_err();
        assert!(is_expected(&err), "{did}: {err:?}");
        assert!(err.to_string().contains(did), "{err}");
    }
    assert_eq!(stand_in.requests_served(), 0);
    assert_eq!(resolver.stats().fetches, 0);
}

// A found document is served from the cache until `invalidate` or until `ttl` passes on the
// manual clock; each of those makes exactly one new request.
#[tokio::test]
async fn cache_hits_invalidate_and_ttl() {
    let did = plc_did(3);
    let documents = HashMap::from([(did.clone(), document(&did, "one.example.com"))]);
    let stand_in = PlcStandIn::start(documents).await.unwrap();
    let clock = ManualClock::new();
    let config = ResolverConfig {
        ttl: Duration::from_secs(3600),
        ..config(&stand_in)
    };
    let resolver = Resolver::with_clock(config, Clock::Manual(clock.clone())).unwrap();
    let handle = |identity: Option<Identity>| identity.unwrap().handle.unwrap();

    assert_eq!(
        handle(resolver.resolve(&did).await.unwrap()),
        "one.example.com"
    );
    stand_in.insert(&did, document(&did, "two.example.com"));
    assert_eq!(
        handle(resolver.resolve(&did).await.unwrap()),
        "one.example.com"
    );
    assert_eq!(stand_in.requests_served(), 1);

    resolver.invalidate(&did);
    assert_eq!(
        handle(resolver.resolve(&did).await.unwrap()),
        "two.example.com"
    );
    assert_eq!(stand_in.requests_served(), 2);

    stand_in.insert(&did, document(&did, "three.example.com"));
    clock.advance(Duration::from_secs(3599));
    assert_eq!(
        handle(resolver.resolve(&did).await.unwrap()),
        "two.example.com"
    );
    assert_eq!(stand_in.requests_served(), 2);
    clock.advance(Duration::from_secs(1));
    assert_eq!(
        handle(resolver.resolve(&did).await.unwrap()),
        "three.example.com"
    );
    assert_eq!(stand_in.requests_served(), 3);
    let stats = resolver.stats();
    assert_eq!(
        (stats.cache_hits, stats.cache_misses, stats.fetches),
        (2, 3, 3)
    );
}

// With `entries_max` 2, a third DID evicts the oldest insertion, whose next lookup fetches
// again, while the younger one is still cached.
#[tokio::test]
async fn the_oldest_entry_is_evicted_at_the_cap() {
    let dids: Vec<String> = (10..13).map(plc_did).collect();
    let documents = dids
        .iter()
        .map(|did| (did.clone(), document(did, "a.example.com")))
        .collect();
    let stand_in = PlcStandIn::start(documents).await.unwrap();
    let config = ResolverConfig {
        entries_max: 2,
        ..config(&stand_in)
    };
    let resolver = Resolver::new(config).unwrap();
    for did in &dids {
        resolver.resolve(did).await.unwrap().unwrap();
    }
    assert_eq!(stand_in.requests_served(), 3);
    assert_eq!(resolver.stats().cache_entries, 2);
    resolver.resolve(&dids[2]).await.unwrap().unwrap();
    assert_eq!(stand_in.requests_served(), 3);
    resolver.resolve(&dids[0]).await.unwrap().unwrap();
    assert_eq!(stand_in.requests_served(), 4);
}

// An `invalidate` that arrives while a fetch is running keeps that fetch's (possibly stale)
// answer out of the cache: the lookup after it fetches the new document.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalidate_during_a_fetch_is_not_cached() {
    let did = plc_did(4);
    let documents = HashMap::from([(did.clone(), document(&did, "old.example.com"))]);
    let stand_in = PlcStandIn::start(documents).await.unwrap();
    let resolver = Resolver::new(config(&stand_in)).unwrap();
    stand_in.hold();
    let first = tokio::spawn({
        let resolver = resolver.clone();
        let did = did.clone();
        async move { resolver.resolve(&did).await }
    });
    wait_until("the first fetch reaches the directory", || {
        stand_in.requests_in_flight() == 1
    })
    .await;
    resolver.invalidate(&did);
    stand_in.release();
    let first = first.await.unwrap().unwrap().unwrap();
    assert_eq!(first.handle.as_deref(), Some("old.example.com"));
    stand_in.insert(&did, document(&did, "new.example.com"));
    let second = resolver.resolve(&did).await.unwrap().unwrap();
    assert_eq!(second.handle.as_deref(), Some("new.example.com"));
    assert_eq!(stand_in.requests_served(), 2);
}

// A lookup cancelled mid-fetch (its gRPC call was abandoned) leaves no registered fetch
// behind, so abandoned lookups of distinct DIDs cannot pile up; the next lookup fetches anew.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_lookup_leaves_nothing_behind() {
    let did = plc_did(13);
    let documents = HashMap::from([(did.clone(), document(&did, "gone.example.com"))]);
    let stand_in = PlcStandIn::start(documents).await.unwrap();
    let resolver = Resolver::new(config(&stand_in)).unwrap();
    stand_in.hold();
    let lookup = tokio::spawn({
        let resolver = resolver.clone();
        let did = did.clone();
        async move { resolver.resolve(&did).await }
    });
    wait_until("the fetch reaches the directory", || {
        stand_in.requests_in_flight() == 1
    })
    .await;
    assert_eq!(resolver.stats().fetches_pending, 1);
    lookup.abort();
    assert!(lookup.await.unwrap_err().is_cancelled());
    let stats = resolver.stats();
    assert_eq!((stats.fetches_pending, stats.fetches_in_flight), (0, 0));
    stand_in.release();
    let identity = resolver.resolve(&did).await.unwrap().unwrap();
    assert_eq!(identity.handle.as_deref(), Some("gone.example.com"));
    assert_eq!(stand_in.requests_served(), 2);
}

// Ten concurrent lookups of one uncached DID make one request and get the same answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_lookups_of_one_did_share_a_fetch() {
    let did = plc_did(5);
    let documents = HashMap::from([(did.clone(), document(&did, "shared.example.com"))]);
    let stand_in = PlcStandIn::start(documents).await.unwrap();
    let resolver = Resolver::new(config(&stand_in)).unwrap();
    stand_in.hold();
    let mut lookups = tokio::task::JoinSet::new();
    for _ in 0..10 {
        let resolver = resolver.clone();
        let did = did.clone();
        lookups.spawn(async move { resolver.resolve(&did).await });
    }
    wait_until("all ten lookups joined the fetch", || {
        resolver.stats().cache_misses == 10 && stand_in.requests_in_flight() == 1
    })
    .await;
    stand_in.release();
    let mut n_answers = 0;
    while let Some(answer) = lookups.join_next().await {
        let identity = answer.unwrap().unwrap().unwrap();
        assert_eq!(identity.handle.as_deref(), Some("shared.example.com"));
        n_answers += 1;
    }
    assert_eq!(n_answers, 10);
    assert_eq!(stand_in.requests_served(), 1);
    assert_eq!(resolver.stats().fetches, 1);
}

// With three fetch slots, twelve lookups of distinct DIDs put three requests in flight and
// nine in the queue (without the semaphore, twelve would reach the directory and the wait
// would time out); once released, all succeed and no more than three ever ran at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outbound_fetches_are_bounded() {
    let dids: Vec<String> = (100..112).map(plc_did).collect();
    let documents = dids
        .iter()
        .map(|did| (did.clone(), document(did, "bounded.example.com")))
        .collect();
    let stand_in = PlcStandIn::start(documents).await.unwrap();
    let config = ResolverConfig {
        fetches_concurrent_max: 3,
        ..config(&stand_in)
    };
    let resolver = Resolver::new(config).unwrap();
    stand_in.hold();
    let mut lookups = tokio::task::JoinSet::new();
    for did in &dids {
        let resolver = resolver.clone();
        let did = did.clone();
        lookups.spawn(async move { resolver.resolve(&did).await });
    }
    wait_until("three fetches run and nine wait", || {
        let stats = resolver.stats();
        stand_in.requests_in_flight() == 3 && stats.fetches_waiting == 9
    })
    .await;
    let stats: ResolverStats = resolver.stats();
    assert_eq!((stats.fetches_in_flight, stats.fetch_slots), (3, 3));
    stand_in.release();
    let mut n_answers = 0;
    while let Some(answer) = lookups.join_next().await {
        assert!(answer.unwrap().unwrap().is_some());
        n_answers += 1;
    }
    assert_eq!(n_answers, 12);
    assert_eq!(stand_in.requests_served(), 12);
    assert_eq!(stand_in.requests_in_flight_max(), 3);
    assert_eq!(resolver.stats().fetches_waiting, 0);
}

// A directory that does not answer within `timeout` gives a transient `Timeout` naming the DID
// and the URL, and the failure is not cached.
#[tokio::test]
async fn a_slow_directory_times_out() {
    let did = plc_did(6);
    let documents = HashMap::from([(did.clone(), document(&did, "slow.example.com"))]);
    let stand_in = PlcStandIn::start(documents).await.unwrap();
    let config = ResolverConfig {
        timeout: Duration::from_millis(200),
        ..config(&stand_in)
    };
    let resolver = Resolver::new(config).unwrap();
    stand_in.hold();
    let err = resolver.resolve(&did).await.unwrap_err();
    assert!(matches!(err, IdentityError::Timeout { .. }), "{err:?}");
    assert!(err.is_transient());
    let message = err.to_string();
    assert!(message.contains(&did), "{message}");
    assert!(message.contains(&stand_in.url()), "{message}");
    stand_in.release();
    assert!(resolver.resolve(&did).await.unwrap().is_some());
    assert_eq!(stand_in.requests_served(), 2);
}

// A directory that refuses connections gives a transient `Fetch` error naming the DID.
#[tokio::test]
async fn an_unreachable_directory_is_a_transient_error() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    drop(listener);
    let config = ResolverConfig {
        plc_url: url,
        ..ResolverConfig::default()
    };
    let resolver = Resolver::new(config).unwrap();
    let did = plc_did(7);
    let err = resolver.resolve(&did).await.unwrap_err();
    assert!(matches!(err, IdentityError::Fetch { .. }), "{err:?}");
    assert!(err.is_transient());
    assert!(err.to_string().contains(&did), "{err}");
}

// did:web: `did:web:127.0.0.1%3A{port}` resolves over HTTP from the stand-in's
// `/.well-known/did.json` with `did_web_insecure_loopback`, and is refused without it.
#[tokio::test]
async fn did_web_through_the_loopback_option() {
    let stand_in = PlcStandIn::start(HashMap::new()).await.unwrap();
    let did = stand_in.did_web();
    stand_in.insert(&did, document(&did, "web.example.com"));
    let config = ResolverConfig {
        did_web_insecure_loopback: true,
        ..config(&stand_in)
    };
    let resolver = Resolver::new(config).unwrap();
    let identity = resolver.resolve(&did).await.unwrap().unwrap();
    assert_eq!(identity.did, did);
    assert_eq!(identity.handle.as_deref(), Some("web.example.com"));
    let services: Value = serde_json::from_slice(&identity.services_json).unwrap();
    assert_eq!(services["atproto_pds"]["URL"], "https://pds.example.com");
    assert_eq!(stand_in.requests_served(), 1);

    let other = format!("did:web:127.0.0.1%3A{}", stand_in.address().port());
    assert_eq!(other, did);
    stand_in.remove(&did);
    resolver.invalidate(&did);
    assert_eq!(resolver.resolve(&did).await, Ok(None));

    let strict = Resolver::new(ResolverConfig {
        did_web_insecure_loopback: false,
        ..config_for_url(&stand_in.url())
    })
    .unwrap();
    let err = strict.resolve(&did).await.unwrap_err();
    assert!(
        matches!(err, IdentityError::BadIdentifier { .. }),
        "{err:?}"
    );
    assert!(
        err.to_string().contains("did_web_insecure_loopback"),
        "{err}"
    );
    assert_eq!(stand_in.requests_served(), 2);
}

fn config_for_url(url: &str) -> ResolverConfig {
    ResolverConfig {
        plc_url: url.to_owned(),
        ..ResolverConfig::default()
    }
}

// `verify_handle` is true for the declared handle in any case, false for another handle, an
// invalid handle and an unknown DID; it answers from the cache like `resolve`.
#[tokio::test]
async fn verify_handle_checks_the_declared_handle() {
    let did = plc_did(8);
    let documents = HashMap::from([(did.clone(), document(&did, "alice.example.com"))]);
    let stand_in = PlcStandIn::start(documents).await.unwrap();
    let resolver = Resolver::new(config(&stand_in)).unwrap();
    assert_eq!(
        resolver.verify_handle("alice.example.com", &did).await,
        Ok(true)
    );
    assert_eq!(
        resolver.verify_handle("Alice.Example.COM", &did).await,
        Ok(true)
    );
    assert_eq!(
        resolver.verify_handle("bob.example.com", &did).await,
        Ok(false)
    );
    assert_eq!(
        resolver.verify_handle("not a handle", &did).await,
        Ok(false)
    );
    assert_eq!(
        resolver
            .verify_handle("alice.example.com", &plc_did(9))
            .await,
        Ok(false)
    );
    assert_eq!(stand_in.requests_served(), 2);
}
