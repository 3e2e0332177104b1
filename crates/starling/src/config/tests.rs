// Tests may panic on unexpected values; that is how they fail.
#![allow(clippy::unwrap_used)]

use super::*;

fn check_err(toml_text: &str, overrides: Overrides, expected: &str) {
    let raw: Result<RawConfig, _> = toml::from_str(toml_text);
    let message = match raw {
        Err(err) => err.message().to_owned(),
        Ok(raw) => match resolve(raw, overrides) {
            Err(err) => format!("{err:#}"),
            Ok(config) => panic!("expected an error containing `{expected}`, got {config:?}"),
        },
    };
    assert!(
        message.contains(expected),
        "`{message}` does not contain `{expected}`"
    );
}

fn with_dir() -> Overrides {
    Overrides {
        data_dir: Some("/tmp/x".into()),
        ..Overrides::default()
    }
}

// The bsync settings come from the file, a flag overrides the file's URL, and a bad URL or
// a key without a URL is an error naming it.
#[test]
fn bsync_settings_resolve_and_bad_ones_are_named() {
    let file = "[bsync]\nurl = 'http://10.0.0.5:2585'\napi_key = 'k'";
    let config = resolve(toml::from_str(file).unwrap(), with_dir()).unwrap();
    let bsync = config.bsync.unwrap();
    assert_eq!(
        (bsync.url.as_str(), bsync.api_key.as_deref()),
        ("http://10.0.0.5:2585", Some("k"))
    );
    let flag = Overrides {
        bsync_url: Some("http://127.0.0.1:1".into()),
        ..with_dir()
    };
    let config = resolve(toml::from_str(file).unwrap(), flag).unwrap();
    assert_eq!(config.bsync.unwrap().url, "http://127.0.0.1:1");
    assert!(
        resolve(RawConfig::default(), with_dir())
            .unwrap()
            .bsync
            .is_none()
    );
    check_err(
        "[bsync]\nurl = 'https://b'",
        with_dir(),
        "bsync url `https://b`",
    );
    check_err("[bsync]\napi_key = 'k'", with_dir(), "without a bsync URL");
    check_err("[bsync]\nurll = 'x'", with_dir(), "urll");
}

// Checks that each kind of bad configuration is an error that names the bad key or value.
// Trusted verifiers come from the file unless a flag or the variable names some, and a
// value that is not a DID is refused, named.
#[test]
fn trusted_verifiers_resolve_and_bad_ones_are_named() {
    let file = r#"trusted_verifiers = ["did:plc:aaaaaaaaaaaaaaaaaaaaaaaa"]"#;
    let config = resolve(toml::from_str(file).unwrap(), with_dir()).unwrap();
    assert_eq!(
        config.trusted_verifiers,
        ["did:plc:aaaaaaaaaaaaaaaaaaaaaaaa"]
    );
    let flag = Overrides {
        trusted_verifiers: vec!["did:web:example.com".into()],
        ..with_dir()
    };
    let config = resolve(toml::from_str(file).unwrap(), flag).unwrap();
    assert_eq!(config.trusted_verifiers, ["did:web:example.com"]);
    let none = resolve(RawConfig::default(), with_dir()).unwrap();
    assert!(none.trusted_verifiers.is_empty());
    let bad = Overrides {
        trusted_verifiers: vec!["example.com".into()],
        ..with_dir()
    };
    check_err("", bad, "trusted verifier `example.com` is not a DID");
}

#[test]
fn bad_config_names_the_problem() {
    check_err("data_dirr = 'x'", with_dir(), "data_dirr");
    check_err("[ingest]\nbatch_size = 3", with_dir(), "batch_size");
    check_err("", Overrides::default(), "no data directory");
    check_err(
        "http_addr = 'localhost'",
        with_dir(),
        "`localhost` is not IP:PORT",
    );
    check_err(
        "[ingest]\nbatch_events_max = 0",
        with_dir(),
        "batch_events_max is 0",
    );
    check_err(
        "[jetstream]\nurls = ['http://x']",
        with_dir(),
        "ws:// or wss://",
    );
    check_err("[relay]\nurl = 'http://x'", with_dir(), "ws:// or wss://");
    check_err("[relay]\nulr = 'ws://x'", with_dir(), "ulr");
    check_err(
        "backfill_relay = 'ws://x'",
        with_dir(),
        "must start with http://",
    );
    check_err(
        "[relay]\nurl = 'ws://x'\n[jetstream]\nurls = ['ws://y']",
        with_dir(),
        "both a relay and Jetstream URLs are set",
    );
    check_err("[timeline]\nlength = 0", with_dir(), "timeline.length is 0");
    check_err("[timeline]\nlenght = 5", with_dir(), "lenght");
    check_err(
        "[timeline]\nrefresh_interval_secs = 0",
        with_dir(),
        "timeline.refresh_interval_secs is 0",
    );
    check_err(
        "[store]\nbackend = 'postgres'",
        with_dir(),
        "store backend `postgres`",
    );
    check_err(
        "[store]\nbackend = 'cassandra'",
        with_dir(),
        "no nodes are given",
    );
    check_err(
        "[store]\nbackend = 'cassandra'\n[store.cassandra]\nnodes = ['127.0.0.1']",
        with_dir(),
        "node `127.0.0.1` is not HOST:PORT",
    );
    check_err(
        "[store]\nbackend = 'cassandra'\n[store.cassandra]\nnodes = ['a:9042']\nconsistency = 'most'",
        with_dir(),
        "consistency `most`",
    );
    check_err(
        "[store]\nbackend = 'cassandra'\n[store.cassandra]\nnodes = ['a:9042']\nkeyspace = 'Bad-Name'",
        with_dir(),
        "keyspace `Bad-Name`",
    );
    check_err("[store.cassandra]\nnode = ['a:1']", with_dir(), "node");
}

// Checks the store settings: embedded by default, Cassandra with QUORUM by default, and a
// flag's nodes beating the file's.
#[test]
fn store_settings_resolve() {
    let config = resolve(RawConfig::default(), with_dir()).unwrap();
    assert_eq!(config.store, StoreChoice::Embedded);
    let raw: RawConfig = toml::from_str(
        "[store]\nbackend = 'cassandra'\n[store.cassandra]\nnodes = ['f:1']\nreplication_factor = 3",
    )
    .unwrap();
    let overrides = Overrides {
        cassandra_nodes: vec!["127.0.0.2:9042".into()],
        cassandra_keyspace: Some("sky".into()),
        ..with_dir()
    };
    let StoreChoice::Cassandra(options) = resolve(raw, overrides).unwrap().store else {
        panic!("expected cassandra");
    };
    assert_eq!(options.nodes, vec!["127.0.0.2:9042".to_owned()]);
    assert_eq!(options.keyspace, "sky");
    assert_eq!(options.replication_factor, 3);
    assert_eq!(options.consistency, CqlConsistency::Quorum);
}

// Checks the precedence: a flag or variable beats the file, the file beats the default.
#[test]
fn overrides_beat_the_file_and_the_file_beats_defaults() {
    let raw: RawConfig =
        toml::from_str("data_dir = '/from/file'\n[ingest]\nbatch_events_max = 7").unwrap();
    let config = resolve(raw, with_dir()).unwrap();
    assert_eq!(config.data_dir, PathBuf::from("/tmp/x"));
    assert_eq!(config.limits.events_max, 7);
    assert_eq!(config.http_addr.to_string(), DEFAULT_HTTP_ADDR);
}

// Checks the HTTP guard's settings: no token is asked for on loopback; off loopback it is,
// from the variable before the file; an empty token counts as none; bad bounds are errors.
#[test]
fn http_token_is_required_off_loopback() {
    let config = resolve(RawConfig::default(), with_dir()).unwrap();
    assert!(!config.http_guard.token_required);
    assert_eq!(config.http_guard.token, None);
    let raw: RawConfig = toml::from_str("[http]\ntoken = 'from-file'").unwrap();
    let overrides = Overrides {
        http_addr: Some("0.0.0.0:6010".into()),
        http_token: Some("from-env".into()),
        ..with_dir()
    };
    let guard = resolve(raw, overrides).unwrap().http_guard;
    assert!(guard.token_required);
    assert_eq!(guard.token.as_deref(), Some("from-env"));
    let overrides = Overrides {
        http_addr: Some("[::]:6010".into()),
        http_token: Some(String::new()),
        ..with_dir()
    };
    let guard = resolve(RawConfig::default(), overrides).unwrap().http_guard;
    assert!(guard.token_required);
    assert_eq!(guard.token, None);
    check_err(
        "[http]\nexpensive_queries_max = 0",
        with_dir(),
        "http.expensive_queries_max is 0",
    );
    check_err(
        "[http]\nquery_deadline_ms = 0",
        with_dir(),
        "http.query_deadline_ms is 0",
    );
    check_err("[http]\ntokn = 'x'", with_dir(), "unknown field `tokn`");
}

// The author feed cache's size comes from the file (0 turns it off) and defaults otherwise;
// the other timeline settings keep theirs.
#[test]
fn author_feed_cache_size_resolves() {
    let default = resolve(RawConfig::default(), with_dir()).unwrap().timeline;
    assert_eq!(default, TimelineConfig::default());
    for (text, want) in [("0", 0), ("5000", 5000)] {
        let file = format!("[timeline]\nauthor_heads_items = {text}");
        let timeline = resolve(toml::from_str(&file).unwrap(), with_dir())
            .unwrap()
            .timeline;
        let expected = TimelineConfig {
            author_heads_items: want,
            ..TimelineConfig::default()
        };
        assert_eq!(timeline, expected);
    }
}
