//! Tests of the Cassandra backend against a real node (`STARLING_TEST_CASSANDRA`).

use super::schema::qualify;
use super::*;
use crate::Batch;
use starling_core::jetstream;
use std::collections::BTreeSet;

mod lists_upgrade;
mod version_3_keys;

/// Sets the schema version row of `ks` back to `version`, as an older Starling left it: the
/// table emptied and refilled, since the version's write timestamp is the version.
fn set_schema_version(cql: &RawCql, ks: &str, version: u64) {
    type Meta = (String, String, Vec<u8>, i64);
    let meta: Vec<Meta> = cql.rows(format!("SELECT part, name, v, WRITETIME(v) FROM {ks}.meta"));
    cql.run(format!("TRUNCATE {ks}.meta"));
    for (part, name, value, ts) in meta {
        let (value, ts) = match (part.as_str(), name.as_str()) {
            ("schema", "version") => (version.to_be_bytes().to_vec(), version as i64),
            _ => (value, ts),
        };
        cql.run(format!(
            "INSERT INTO {ks}.meta (part, name, v) VALUES ('{part}', '{name}', 0x{}) USING TIMESTAMP {ts}",
            hex(&value)
        ));
    }
}

fn apply(store: &CassandraStore, lines: &[String]) -> Result<Committed, StoreError> {
    let mut batch = store.batch();
    for line in lines {
        batch.apply(&jetstream::decode(line.as_bytes()).unwrap())?;
    }
    batch.commit()
}

fn commit(
    did: &str,
    time_us: u64,
    rev: &str,
    op: &str,
    collection: &str,
    rkey: &str,
    record: &str,
) -> String {
    let record = if op == "delete" {
        String::new()
    } else {
        format!(r#","record":{record},"cid":"bafyreiaaaaaaaa{time_us}""#)
    };
    format!(
        r#"{{"did":"{did}","time_us":{time_us},"kind":"commit","commit":{{"rev":"{rev}","operation":"{op}","collection":"{collection}","rkey":"{rkey}"{record}}}}}"#
    )
}

/// Options for a keyspace of its own for test `name` on the node `STARLING_TEST_CASSANDRA`
/// names; `None` (and a line saying it is skipped) when that is unset: the workspace-wide
/// `cargo test` runs without a node, and `scripts/test.sh` runs these again with one.
fn test_keyspace(name: &str) -> Option<CassandraOptions> {
    let Ok(nodes) = std::env::var("STARLING_TEST_CASSANDRA") else {
        eprintln!(
            "skipping {name} on cassandra: STARLING_TEST_CASSANDRA is unset \
             (scripts/test.sh starts a node and sets it)"
        );
        return None;
    };
    let mut options = CassandraOptions::new(
        nodes
            .split(',')
            .map(|node| node.trim().to_owned())
            .collect(),
    );
    options.keyspace = format!("starling_test_{name}_{}", std::process::id());
    Some(options)
}

/// A session of its own on the test node, for the CQL the store never sends: setting a
/// keyspace up as an older Starling left it.
struct RawCql {
    rt: tokio::runtime::Runtime,
    session: Session,
}

impl RawCql {
    fn connect(options: &CassandraOptions) -> RawCql {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let builder = SessionBuilder::new().known_nodes(&options.nodes);
        let session = rt.block_on(builder.build()).unwrap();
        RawCql { rt, session }
    }

    fn run(&self, cql: String) {
        self.rt
            .block_on(self.session.query_unpaged(cql, ()))
            .unwrap();
    }

    fn rows<T>(&self, cql: String) -> Vec<T>
    where
        T: for<'f, 'm> scylla::deserialize::row::DeserializeRow<'f, 'm>,
    {
        let res = self
            .rt
            .block_on(self.session.query_unpaged(cql, ()))
            .unwrap();
        let rows = res.into_rows_result().unwrap();
        rows.rows::<T>().unwrap().map(Result::unwrap).collect()
    }
}

/// `bytes` as a CQL blob literal's hex digits.
fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

const POST_RKEY: &str = "3l3qo2vutsw2b";
const REV1: &str = "3l3qo2vuaaa2b";
const REV2: &str = "3l3qo2vubbb2b";
const CREATED: &str = "2024-09-01T00:00:00.000Z";

fn post_event(did: &str, time_us: u64, rkey: &str) -> String {
    let record = format!(r#"{{"text":"hi","createdAt":"{CREATED}"}}"#);
    commit(
        did,
        time_us,
        REV1,
        "create",
        "app.bsky.feed.post",
        rkey,
        &record,
    )
}

fn like_event(did: &str, time_us: u64, rev: &str, op: &str, subject: &str) -> String {
    let record = format!(
        r#"{{"subject":{{"uri":"{subject}","cid":"bafyreiaaaaaaaa"}},"createdAt":"{CREATED}"}}"#
    );
    commit(
        did,
        time_us,
        rev,
        op,
        "app.bsky.feed.like",
        "3l3qo2vuowo2b",
        &record,
    )
}

fn follow_event(did: &str, time_us: u64, rev: &str, op: &str, subject: &str) -> String {
    let record = format!(r#"{{"subject":"{subject}","createdAt":"{CREATED}"}}"#);
    commit(
        did,
        time_us,
        rev,
        op,
        "app.bsky.graph.follow",
        "3l3qo2vuppp2b",
        &record,
    )
}

/// A DID for actor number `n`.
fn did(n: u32) -> String {
    let letters: String = n
        .to_string()
        .bytes()
        .map(|d| (d - b'0' + b'a') as char)
        .collect();
    format!("did:plc:{letters:a>24}")
}

/// Applies `batches` in order to an embedded store: the expected state, worked out by the
/// other backend.
fn model(batches: &[&[String]]) -> (tempfile::TempDir, crate::EmbeddedStore) {
    let dir = tempfile::tempdir().unwrap();
    let store = crate::EmbeddedStore::open(dir.path()).unwrap();
    for lines in batches {
        let mut batch = store.batch();
        for line in *lines {
            batch
                .apply(&jetstream::decode(line.as_bytes()).unwrap())
                .unwrap();
        }
        batch.commit().unwrap();
    }
    store.sync().unwrap();
    (dir, store)
}

/// Asserts that `store` holds what `expected` does: counts, the post's counts, the graph.
fn assert_same(store: &CassandraStore, expected: &crate::EmbeddedStore, post: &str) {
    assert_eq!(store.stats().unwrap(), expected.stats().unwrap(), "stats");
    let uri = RecordUri::parse(post).unwrap();
    assert_eq!(
        store.record_counts(&uri).unwrap(),
        expected.record_counts(&uri).unwrap(),
        "counts of {post}"
    );
    // Ids differ between the stores: compare DIDs.
    assert_eq!(edge_dids(store), edge_dids(expected), "edges");
}

/// Every follow and block edge of `store`, by DID.
fn edge_dids<S: Store>(store: &S) -> BTreeSet<(&'static str, Option<String>, Option<String>)> {
    let mut edges = BTreeSet::new();
    store
        .for_each_edge(&mut |change| {
            edges.insert(match change {
                GraphChange::Follow(a, b) => ("follow", store.did(a), store.did(b)),
                GraphChange::Block(a, b) => ("block", store.did(a), store.did(b)),
                other => panic!("not an edge: {other:?}"),
            });
        })
        .unwrap();
    assert!(edges.iter().all(|(_, a, b)| a.is_some() && b.is_some()));
    edges
}

/// The lease of a writer that is to stall: long enough for its first batch on a loaded
/// machine, short enough to wait out.
const STALLING_LEASE: Duration = Duration::from_secs(3);
/// The lease of the writer that takes over: nobody takes it from it.
const TAKEOVER_LEASE: Duration = Duration::from_secs(60);

/// Takes the writer lease for `owner`, polling until the previous holder's has expired,
/// and recovers.
fn take_lease_when_free(store: &CassandraStore, owner: &str, ttl: Duration) {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !store.try_lease(owner, ttl).unwrap() {
        assert!(
            std::time::Instant::now() < deadline,
            "{owner} never got the lease"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    store.recover().unwrap();
}

// Checks fencing against a writer that stalls with a batch ready: A holds the lease and
// commits a batch, builds a second one (a like, a post, a follow by an actor nobody else
// names), and stops renewing; its lease runs out, B polls until it takes the lease,
// recovers and commits its own batch; A then commits. A's commit must be refused as
// `Fenced` and nothing of its batch may show: the store must equal an embedded store that
// applied A's first batch and B's batch only. A is refused from then on.
#[test]
fn a_stalled_writer_is_fenced_after_a_takeover() {
    let Some(options) = test_keyspace("fenced") else {
        return;
    };
    let (a_did, b_did, c_did, d_did) = (did(1), did(2), did(3), did(4));
    let post = format!("at://{a_did}/app.bsky.feed.post/{POST_RKEY}");
    let first = [
        post_event(&a_did, 1_000, POST_RKEY),
        like_event(&b_did, 1_001, REV1, "create", &post),
    ];
    let stalled_lines = [
        like_event(&c_did, 1_002, REV1, "create", &post),
        post_event(&c_did, 1_003, "3l3qo2vuqqq2b"),
        follow_event(&c_did, 1_004, REV1, "create", &a_did),
    ];
    let takeover = [
        like_event(&d_did, 1_005, REV1, "create", &post),
        follow_event(&b_did, 1_006, REV1, "create", &a_did),
    ];
    let a = CassandraStore::open(&options).unwrap();
    take_lease_when_free(&a, "a", STALLING_LEASE);
    apply(&a, &first).unwrap();
    let mut stalled = a.batch();
    for line in &stalled_lines {
        stalled
            .apply(&jetstream::decode(line.as_bytes()).unwrap())
            .unwrap();
    }
    let b = CassandraStore::open(&options).unwrap();
    take_lease_when_free(&b, "b", TAKEOVER_LEASE);
    apply(&b, &takeover).unwrap();
    let refused = stalled.commit();
    assert!(
        matches!(refused, Err(StoreError::Fenced { .. })),
        "the stalled writer's commit: {refused:?}"
    );
    let reader = CassandraStore::open(&options).unwrap();
    let (_dir, expected) = model(&[&first, &takeover]);
    assert_same(&reader, &expected, &post);
    assert!(
        reader.actor(&c_did).unwrap().is_none(),
        "{c_did} never stored"
    );
    assert!(
        reader
            .record(&c_did, "app.bsky.feed.post", "3l3qo2vuqqq2b")
            .unwrap()
            .is_none()
    );
    let mut logged = Vec::new();
    reader
        .changes_since(0, &mut |seq, committed| {
            logged.push((seq, committed.clone()))
        })
        .unwrap();
    assert_eq!(logged.len(), 2, "A's first batch and B's: {logged:?}");
    // A lost the lease for good, and every later batch of its is refused.
    assert!(!a.try_lease("a", STALLING_LEASE).unwrap());
    assert!(matches!(
        apply(&a, &stalled_lines),
        Err(StoreError::Fenced { .. })
    ));
    drop((a, b));
    reader.drop_keyspace(&options.keyspace).unwrap();
}

// Checks the window between a commit and its data writes: A commits a batch (a like and
// a follow by C) and stalls before sending its data writes; its lease runs out, B takes
// over, recovers (so applies A's batch from the log), then deletes that like and follow
// and adds two likes. A's data writes then land, late. B's newer writes must win, whatever
// order the writes arrived in: the store equals an embedded store that applied the three
// batches in order. A's next commit is refused.
#[test]
fn late_writes_of_a_committed_batch_lose_to_the_next_writer() {
    let Some(options) = test_keyspace("late") else {
        return;
    };
    let (a_did, b_did, c_did, d_did, e_did) = (did(1), did(2), did(3), did(4), did(5));
    let post = format!("at://{a_did}/app.bsky.feed.post/{POST_RKEY}");
    let first = [
        post_event(&a_did, 1_000, POST_RKEY),
        like_event(&b_did, 1_001, REV1, "create", &post),
    ];
    let second = [
        like_event(&c_did, 1_002, REV1, "create", &post),
        follow_event(&c_did, 1_003, REV1, "create", &a_did),
    ];
    let third = [
        like_event(&c_did, 1_004, REV2, "delete", &post),
        follow_event(&c_did, 1_005, REV2, "delete", &a_did),
        like_event(&d_did, 1_006, REV1, "create", &post),
        like_event(&e_did, 1_007, REV1, "create", &post),
    ];
    let a = CassandraStore::open(&options).unwrap();
    take_lease_when_free(&a, "a", STALLING_LEASE);
    apply(&a, &first).unwrap();
    let (reached_tx, reached) = std::sync::mpsc::channel();
    let (resume, resume_rx) = tokio::sync::oneshot::channel();
    *lock(&a.stall_after_commit) = Some((reached_tx, resume_rx));
    std::thread::scope(|scope| {
        let stalled = scope.spawn(|| apply(&a, &second));
        reached.recv().unwrap();
        let b = CassandraStore::open(&options).unwrap();
        take_lease_when_free(&b, "b", TAKEOVER_LEASE);
        let uri = RecordUri::parse(&post).unwrap();
        assert_eq!(
            b.record_counts(&uri).unwrap().likes,
            2,
            "B applied A's committed batch"
        );
        apply(&b, &third).unwrap();
        resume.send(()).unwrap();
        stalled.join().unwrap().unwrap();
    });
    let reader = CassandraStore::open(&options).unwrap();
    let (_dir, expected) = model(&[&first, &second, &third]);
    assert_same(&reader, &expected, &post);
    assert_eq!(reader.stats().unwrap().likes, 3);
    assert!(
        reader
            .record(&c_did, "app.bsky.feed.like", "3l3qo2vuowo2b")
            .unwrap()
            .is_none(),
        "B's delete stands"
    );
    assert!(matches!(apply(&a, &first), Err(StoreError::Fenced { .. })));
    drop(a);
    reader.drop_keyspace(&options.keyspace).unwrap();
}

// Checks that pruning keeps what a live but slow reader has not read. F reads the change
// log up to N and then stops reading, alive, for over twice its row's TTL, while the
// writer W commits batches (a post and a follow each) and prunes after each as far as it
// may. F then reads from N and must get every entry W committed after N, exactly as W's
// commits returned them; pruning still worked (a reader from 0 is told entries are gone),
// and once F is closed W prunes to its newest entry, as it does once a dead reader's row
// expires.
#[test]
fn a_slow_reader_keeps_its_change_log_entries() {
    let Some(options) = test_keyspace("readers") else {
        return;
    };
    let short = readers::ReaderTiming {
        ttl: Duration::from_secs(2),
        refresh: Duration::from_millis(500),
    };
    let writer = CassandraStore::open(&options).unwrap();
    let subject = did(1);
    let mut n_batches = 0u32;
    let mut commit_next = |writer: &CassandraStore| {
        n_batches += 1;
        let author = did(100 + n_batches);
        let time_us = 10_000 + u64::from(n_batches) * 10;
        let committed = apply(
            writer,
            &[
                post_event(&author, time_us, POST_RKEY),
                follow_event(&author, time_us + 1, REV1, "create", &subject),
            ],
        )
        .unwrap();
        assert_eq!(committed.graph.len(), 1);
        assert_eq!(committed.feed.len(), 1);
        (writer.graph_log_seq(), committed)
    };
    for _ in 0..3 {
        commit_next(&writer);
    }
    let follower = CassandraStore::open_with(&options, short).unwrap();
    let read_upto = follower.changes_since(0, &mut |_, _| {}).unwrap();
    assert_eq!(read_upto, 3);
    assert_eq!(
        follower.changes_since(read_upto, &mut |_, _| {}).unwrap(),
        3
    );
    let mut expected = Vec::new();
    let quiet_until = std::time::Instant::now() + short.ttl * 2 + short.refresh;
    while std::time::Instant::now() < quiet_until || expected.len() < 5 {
        expected.push(commit_next(&writer));
        writer.prune_graph_log(writer.graph_log_seq()).unwrap();
    }
    let mut read = Vec::new();
    let last = follower
        .changes_since(read_upto, &mut |seq, committed| {
            read.push((seq, committed.clone()));
        })
        .unwrap();
    // What the log keeps of a commit: its graph and feed changes and its cursor (not the
    // identities, nor the searchable records: a follower's search index is rebuilt at start).
    let expected: Vec<(u64, Committed)> = expected
        .into_iter()
        .map(|(seq, committed)| {
            (
                seq,
                Committed {
                    identities: Vec::new(),
                    searchable: Vec::new(),
                    ..committed
                },
            )
        })
        .collect();
    assert_eq!(read, expected);
    assert_eq!(last, writer.graph_log_seq());
    let pruned = |after: u64| {
        let probe = CassandraStore::open(&options).unwrap();
        probe.changes_since(after, &mut |_, _| {})
    };
    assert!(
        matches!(
            pruned(0),
            Err(StoreError::Pruned {
                after: 0,
                pruned_upto: 3
            })
        ),
        "pruned up to the slow reader's position, and no further"
    );
    drop(follower);
    let newest = writer.graph_log_seq();
    writer.prune_graph_log(newest).unwrap();
    assert!(matches!(
        pruned(read_upto),
        Err(StoreError::Pruned { pruned_upto, .. }) if pruned_upto == newest
    ));
    writer.drop_keyspace(&options.keyspace).unwrap();
}

// Checks the upgrade of a keyspace at schema version 1 (before fencing), built here as
// that version left it (its markers in `meta`, a `lease` table, no `writer` row): opening
// it is refused while an older replica holds the old lease, and while the old batch log
// has a batch not applied, each with a message naming it; then it is upgraded in place,
// and the next batch follows the old sequence.
#[test]
fn a_version_1_keyspace_is_upgraded_in_place() {
    let Some(options) = test_keyspace("upgrade") else {
        return;
    };
    let ks = &options.keyspace;
    let cql = RawCql::connect(&options);
    let run = |text: String| cql.run(text);
    let ts = 1_700_000_000_000_000u64;
    let meta = |name: &str, value: &[u8], write_ts: u64| {
        run(format!(
            "INSERT INTO {ks}.meta (part, name, v) VALUES ('{}', '{}', 0x{}) \
             USING TIMESTAMP {write_ts}",
            name.split('/').next().unwrap(),
            name.split('/').nth(1).unwrap(),
            hex(value),
        ));
    };
    let marker = |seq: u64| {
        [
            &seq.to_be_bytes()[..],
            &ts.to_be_bytes(),
            &1u32.to_be_bytes(),
        ]
        .concat()
    };
    run(format!(
        "CREATE KEYSPACE {ks} WITH replication = {{'class': 'SimpleStrategy', 'replication_factor': 1}}"
    ));
    run(format!(
        "CREATE TABLE {ks}.meta (part text, name text, v blob, PRIMARY KEY (part, name))"
    ));
    run(format!(
        "CREATE TABLE {ks}.lease (name text PRIMARY KEY, owner text)"
    ));
    meta("schema/version", &1u64.to_be_bytes(), 1);
    meta("batch/applied", &5u64.to_be_bytes(), ts);
    meta("batch/ts", &ts.to_be_bytes(), ts);
    meta("batch/pending", &marker(6), ts);
    meta("graph/pruned", &2u64.to_be_bytes(), ts);
    run(format!(
        "INSERT INTO {ks}.lease (name, owner) VALUES ('writer', 'old') USING TTL 600"
    ));
    let refused = |needle: &str| match CassandraStore::open(&options) {
        Err(StoreError::Cluster { what }) => assert!(what.contains(needle), "{what}"),
        Err(err) => panic!("opening version 1: {err}"),
        Ok(_) => panic!("opening version 1 should be refused ({needle})"),
    };
    refused("`old`, a replica of an older Starling, holds its writer lease");
    run(format!("DELETE FROM {ks}.lease WHERE name = 'writer'"));
    refused("holds batch 6, logged by an older Starling and not applied");
    meta("batch/pending", &marker(5), ts + 1);
    let store = CassandraStore::open(&options).unwrap();
    let row = store.block(lease::read_row(&store)).unwrap();
    assert_eq!((row.epoch, row.head.seq, row.head.ts), (0, 5, ts as i64));
    assert_eq!(store.pruned_upto.load(Ordering::Acquire), 2);
    apply(&store, &[post_event(&did(1), 1_000, POST_RKEY)]).unwrap();
    let row = store.block(lease::read_row(&store)).unwrap();
    assert_eq!((row.epoch, row.head.seq), (1, 6));
    assert!(row.head.ts > ts as i64);
    drop(store);
    let store = CassandraStore::open(&options).unwrap();
    assert_eq!(store.stats().unwrap().posts, 1);
    store.drop_keyspace(ks).unwrap();
}

// Checks the batch log: a batch that crashed after it was logged and before it was
// applied is applied by the next open, so its deletes, counts and graph changes are not
// lost, and nothing of it showed before. How: a post, two likes and a follow, committed;
// then a batch deleting one like and the follow and adding a third like "crashes" after
// logging; the counts still show the first batch; a reopen shows the second.
// Checks that every statement's table gets the keyspace, and nothing else changes.
#[test]
fn statements_name_qualified_tables() {
    assert_eq!(
        qualify("SELECT k, n FROM pairs", "ks"),
        "SELECT k, n FROM ks.pairs"
    );
    assert_eq!(
        qualify("INSERT INTO actor_ids (did, id) VALUES (?, ?)", "ks"),
        "INSERT INTO ks.actor_ids (did, id) VALUES (?, ?)"
    );
    assert_eq!(
        qualify("UPDATE lease USING TTL ? SET owner = ?", "ks"),
        "UPDATE ks.lease USING TTL ? SET owner = ?"
    );
}

#[test]
fn a_logged_batch_is_applied_by_the_next_open() {
    let Ok(nodes) = std::env::var("STARLING_TEST_CASSANDRA") else {
        eprintln!("skipping the batch log test on cassandra: STARLING_TEST_CASSANDRA is unset");
        return;
    };
    let mut options = CassandraOptions::new(nodes.split(',').map(str::to_owned).collect());
    options.keyspace = format!("starling_test_log_{}", std::process::id());
    let (a, b, c) = (
        "did:plc:aaaaaaaaaaaaaaaaaaaaaaaa",
        "did:plc:bbbbbbbbbbbbbbbbbbbbbbbb",
        "did:plc:cccccccccccccccccccccccc",
    );
    let post = format!("at://{a}/app.bsky.feed.post/3l3qo2vutsw2b");
    let like = format!(
        r#"{{"subject":{{"uri":"{post}","cid":"bafyreiaaaaaaaa"}},"createdAt":"2024-09-01T00:00:00.000Z"}}"#
    );
    let follow = format!(r#"{{"subject":"{a}","createdAt":"2024-09-01T00:00:00.000Z"}}"#);
    let rev1 = "3l3qo2vuaaa2b";
    let rev2 = "3l3qo2vubbb2b";
    let store = CassandraStore::open(&options).unwrap();
    let first = apply(
        &store,
        &[
            commit(
                a,
                1_000,
                rev1,
                "create",
                "app.bsky.feed.post",
                "3l3qo2vutsw2b",
                r#"{"text":"hi","createdAt":"2024-09-01T00:00:00.000Z"}"#,
            ),
            commit(
                b,
                1_001,
                rev1,
                "create",
                "app.bsky.feed.like",
                "3l3qo2vuowo2b",
                &like,
            ),
            commit(
                c,
                1_002,
                rev1,
                "create",
                "app.bsky.feed.like",
                "3l3qo2vuowo2b",
                &like,
            ),
            commit(
                b,
                1_003,
                rev1,
                "create",
                "app.bsky.graph.follow",
                "3l3qo2vuppp2b",
                &follow,
            ),
        ],
    )
    .unwrap();
    assert_eq!(first.graph.len(), 1);
    let uri = RecordUri::parse(&post).unwrap();
    assert_eq!(store.record_counts(&uri).unwrap().likes, 2);
    store.crash_after_log.store(true, Ordering::Release);
    let crashed = apply(
        &store,
        &[
            commit(
                b,
                1_004,
                rev2,
                "delete",
                "app.bsky.feed.like",
                "3l3qo2vuowo2b",
                "",
            ),
            commit(
                c,
                1_005,
                rev2,
                "delete",
                "app.bsky.feed.like",
                "3l3qo2vuowo2b",
                "",
            ),
            commit(
                a,
                1_006,
                rev2,
                "create",
                "app.bsky.feed.like",
                "3l3qo2vuqqq2b",
                &like,
            ),
            commit(
                b,
                1_007,
                rev2,
                "delete",
                "app.bsky.graph.follow",
                "3l3qo2vuppp2b",
                "",
            ),
        ],
    );
    assert!(crashed.is_err(), "the batch should have crashed");
    assert_eq!(
        store.record_counts(&uri).unwrap().likes,
        2,
        "applied before the crash"
    );
    drop(store);
    let store = CassandraStore::open(&options).unwrap();
    assert_eq!(
        store.record_counts(&uri).unwrap().likes,
        1,
        "after recovery"
    );
    assert!(
        store
            .record(b, "app.bsky.feed.like", "3l3qo2vuowo2b")
            .unwrap()
            .is_none()
    );
    assert!(
        store
            .record(a, "app.bsky.feed.like", "3l3qo2vuqqq2b")
            .unwrap()
            .is_some()
    );
    let stats = store.stats().unwrap();
    assert_eq!((stats.likes, stats.follows, stats.posts), (1, 0, 1));
    let mut edges = Vec::new();
    store
        .for_each_edge(&mut |change| edges.push(change))
        .unwrap();
    assert!(edges.is_empty(), "the follow is gone: {edges:?}");
    let mut logged = Vec::new();
    store
        .graph_log_since(0, &mut |change| logged.push(change))
        .unwrap();
    assert_eq!(logged.len(), 2, "follow then unfollow: {logged:?}");
    // Applying the recovered batch again changes nothing.
    store.recover().unwrap();
    assert_eq!(store.stats().unwrap(), stats);
    store.drop_keyspace(&options.keyspace).unwrap();
}

// Checks that the progress of many sources, added to one batch, is durable with it on both
// backends (a backfill marks every repository a batch completes), that it never moves the
// live cursor, and that a source nobody marked reads as absent, as in a store from before.
#[test]
fn source_progress_is_durable_with_its_batch_on_both_backends() {
    let dir = tempfile::tempdir().unwrap();
    check_source_progress(&crate::EmbeddedStore::open(dir.path()).unwrap());
    let reopened = crate::EmbeddedStore::open(dir.path()).unwrap();
    assert_source_progress(&reopened);
    let Some(options) = test_keyspace("sources") else {
        return;
    };
    let store = CassandraStore::open(&options).unwrap();
    check_source_progress(&store);
    drop(store);
    let reopened = CassandraStore::open(&options).unwrap();
    assert_source_progress(&reopened);
    reopened.drop_keyspace(&options.keyspace).unwrap();
}

fn check_source_progress<S: Store>(store: &S) {
    assert_eq!(store.progress(Some("backfill did:plc:a")).unwrap(), None);
    let mut batch = store.batch();
    let line = post_event(&did(1), 1_000, POST_RKEY);
    batch
        .apply(&jetstream::decode(line.as_bytes()).unwrap())
        .unwrap();
    batch.add_source_progress("backfill did:plc:a".to_owned(), 7);
    batch.add_source_progress("backfill did:plc:b".to_owned(), 9);
    batch.commit().unwrap();
    store.sync().unwrap();
    assert_source_progress(store);
}

fn assert_source_progress<S: Store>(store: &S) {
    for (source, offset) in [("backfill did:plc:a", 7), ("backfill did:plc:b", 9)] {
        let expected = Progress::File {
            source: source.to_owned(),
            offset,
            cursor: None,
        };
        assert_eq!(store.progress(Some(source)).unwrap(), Some(expected));
    }
    assert_eq!(store.progress(Some("backfill did:plc:c")).unwrap(), None);
    assert_eq!(store.progress(None).unwrap(), None);
    assert_eq!(store.stats().unwrap().posts, 1);
}
