//! Property tests that `jetstream::decode` never panics: on random bytes, on mutated real events
//! from `../shared/data/jetstream`, and on JSON built from Jetstream's own field names and
//! values. Also checks that every real event decodes, that generated well-formed events decode
//! to what was generated, and that handmade bad events are dropped for the right reason.

// Tests may panic: a failed assertion or a missing file is a failed test.
#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

use std::path::{Path, PathBuf};
use std::sync::LazyLock;

use proptest::collection::vec;
use proptest::prelude::*;
use proptest::sample::{Index, select};
use proptest::test_runner::{Config, RngSeed};
use serde_json::{Map, Value, json};
use starling_core::jetstream::{self, Body, DropReason, EVENT_BYTES_MAX, Event, Operation, Refs};
use starling_core::syntax;

/// The shared data directory, `<workspace>/../shared/data`, or `None` (after saying so) if it is
/// absent. On CI (`CI=true`) an absent directory fails the test instead, so that the real events
/// can never be skipped silently there.
fn shared_data_dir() -> Option<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/data");
    if dir.is_dir() {
        return Some(dir);
    }
    let message = format!(
        "this test needs ../shared/data (looked in {})",
        dir.display()
    );
    assert!(std::env::var("CI").as_deref() != Ok("true"), "{message}");
    println!("skipping: {message}");
    None
}

/// The two files of real Jetstream v1 events; every line of both is a valid event.
const REAL_EVENT_FILES: [&str; 2] = ["expected_v1.jsonl", "golden_v1.jsonl"];

/// The lines of one real-event file, without their newlines.
fn read_events(dir: &Path, file: &str) -> Vec<Vec<u8>> {
    let bytes = std::fs::read(dir.join("jetstream").join(file)).unwrap();
    let events: Vec<Vec<u8>> = bytes
        .split(|&byte| byte == b'\n')
        .filter(|line| !line.is_empty())
        .map(<[u8]>::to_vec)
        .collect();
    assert!(!events.is_empty(), "{file}: no events read");
    events
}

/// Every real event of both files, or none if the data directory is absent.
static REAL_EVENTS: LazyLock<Vec<Vec<u8>>> = LazyLock::new(|| match shared_data_dir() {
    Some(dir) => REAL_EVENT_FILES
        .iter()
        .flat_map(|file| read_events(&dir, file))
        .collect(),
    None => Vec::new(),
});

/// The seed used when `STARLING_TEST_SEED` is unset, so that runs repeat by default.
const SEED_DEFAULT: u64 = 0x5354_4152_4c49_4e47;

/// A proptest config with `n_cases` cases and a fixed, printed seed.
fn config(n_cases: u32) -> Config {
    let seed = std::env::var("STARLING_TEST_SEED")
        .ok()
        .and_then(|text| text.parse().ok())
        .unwrap_or(SEED_DEFAULT);
    println!("proptest seed {seed} (set STARLING_TEST_SEED to change it)");
    Config {
        cases: n_cases,
        rng_seed: RngSeed::Fixed(seed),
        ..Config::default()
    }
}

/// Checks what `decode` promises about any event it accepts: every identifier in it is valid
/// and the record text is a JSON object lying inside the input.
fn check_decoded(bytes: &[u8], event: &Event<'_>) {
    assert!(
        syntax::is_valid_did(&event.did),
        "accepted DID {:?}",
        event.did
    );
    let Body::Commit(commit) = &event.body else {
        return;
    };
    assert!(
        syntax::is_valid_nsid(&commit.collection),
        "accepted NSID {:?}",
        commit.collection
    );
    assert!(
        syntax::is_valid_record_key(&commit.rkey),
        "accepted rkey {:?}",
        commit.rkey
    );
    assert_eq!(
        commit.record.is_none(),
        commit.operation == Operation::Delete
    );
    if let Some(record) = &commit.record {
        assert!(
            syntax::is_valid_cid(&record.cid),
            "accepted CID {:?}",
            record.cid
        );
        assert!(record.json.starts_with('{'));
        let input = bytes.as_ptr_range();
        let json = record.json.as_bytes().as_ptr_range();
        assert!(
            input.start <= json.start && json.end <= input.end,
            "record not borrowed from input"
        );
    }
}

/// Decodes `bytes`; if that succeeds, checks the result with [`check_decoded`].
fn decode_and_check(bytes: &[u8]) {
    if let Ok(event) = jetstream::decode(bytes) {
        check_decoded(bytes, &event);
    }
}

// Checks that every line of both real-event files decodes, and passes the same checks as
// fuzzed input, because all of them are valid events captured from Jetstream.
#[test]
fn real_events_decode() {
    let Some(dir) = shared_data_dir() else { return };
    for file in REAL_EVENT_FILES {
        let events = read_events(&dir, file);
        for (line_idx, bytes) in events.iter().enumerate() {
            match jetstream::decode(bytes) {
                Ok(event) => check_decoded(bytes, &event),
                Err(err) => panic!("{file}:{}: {err}", line_idx + 1),
            }
        }
        println!("{file}: {} events decoded", events.len());
    }
}

/// One edit to an event's bytes.
#[derive(Clone, Debug)]
enum Mutation {
    FlipBit {
        at: Index,
        bit: u8,
    },
    Insert {
        at: Index,
        byte: u8,
    },
    Delete {
        at: Index,
    },
    Truncate {
        at: Index,
    },
    /// Copies up to `len` bytes from one place to another, to repeat keys and brackets.
    Splice {
        from: Index,
        to: Index,
        len: u8,
    },
}

/// Bytes that mean something to a JSON parser are more likely to reach deep code paths.
fn interesting_byte() -> impl Strategy<Value = u8> {
    prop_oneof![
        any::<u8>(),
        select(b"{}[]\":,\\/ 0123456789-+.eEtrufalsn#%\x00\x7f\xff".to_vec())
    ]
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<Index>(), 0..8u8).prop_map(|(at, bit)| Mutation::FlipBit { at, bit }),
        (any::<Index>(), interesting_byte()).prop_map(|(at, byte)| Mutation::Insert { at, byte }),
        any::<Index>().prop_map(|at| Mutation::Delete { at }),
        any::<Index>().prop_map(|at| Mutation::Truncate { at }),
        (any::<Index>(), any::<Index>(), 1..32u8).prop_map(|(from, to, len)| Mutation::Splice {
            from,
            to,
            len
        }),
    ]
}

fn apply(bytes: &mut Vec<u8>, mutation: &Mutation) {
    if bytes.is_empty() {
        if let Mutation::Insert { byte, .. } = mutation {
            bytes.push(*byte);
        }
        return;
    }
    let len = bytes.len();
    match mutation {
        Mutation::FlipBit { at, bit } => bytes[at.index(len)] ^= 1 << bit,
        Mutation::Insert { at, byte } => bytes.insert(at.index(bytes.len() + 1), *byte),
        Mutation::Delete { at } => {
            bytes.remove(at.index(bytes.len()));
        }
        Mutation::Truncate { at } => bytes.truncate(at.index(bytes.len())),
        Mutation::Splice { from, to, len } => {
            let from_idx = from.index(bytes.len());
            let end_idx = (from_idx + usize::from(*len)).min(bytes.len());
            let piece = bytes[from_idx..end_idx].to_vec();
            let to_idx = to.index(bytes.len() + 1);
            bytes.splice(to_idx..to_idx, piece);
        }
    }
}

/// Field names that Jetstream events and the indexed records use.
const FIELD_NAMES: &[&str] = &[
    "did",
    "time_us",
    "kind",
    "commit",
    "identity",
    "account",
    "rev",
    "operation",
    "collection",
    "rkey",
    "record",
    "cid",
    "seq",
    "handle",
    "active",
    "status",
    "time",
    "$type",
    "createdAt",
    "subject",
    "uri",
    "reply",
    "root",
    "parent",
    "embed",
    "media",
    "list",
    "post",
    "text",
    "langs",
    "via",
    "$link",
    "cursor",
];

/// String values, valid and not, that those fields take.
const STRING_VALUES: &[&str] = &[
    "commit",
    "identity",
    "account",
    "create",
    "update",
    "delete",
    "foo",
    "did:plc:mcc5yghbk7tixqryac2yxku7",
    "did:web:example.com",
    "notadid",
    "did:",
    "app.bsky.feed.post",
    "app.bsky.feed.like",
    "app.bsky.feed.repost",
    "app.bsky.graph.follow",
    "app.bsky.graph.block",
    "app.bsky.graph.listitem",
    "app.bsky.graph.listblock",
    "app.bsky.graph.starterpack",
    "app.bsky.feed.threadgate",
    "app.bsky.feed.postgate",
    "app.bsky.actor.profile",
    "fm.teal.alpha.actor.status",
    "app.bsky.embed.images",
    "app.bsky.embed.video",
    "app.bsky.embed.external",
    "app.bsky.embed.record",
    "app.bsky.embed.recordWithMedia",
    "3mmoojp7vgo2g",
    "2222222222222",
    "kzzzzzzzzzzzz",
    "self",
    "..",
    "bafyreidqpc7si3dbimffi64lz3xsx2qt45ip7rpna2qpslcddp23itjjzm",
    "QmbWqxBEKC3P8tqsKc98xmWNzrzDtRLMiMPL8wBuTGsMnR",
    "2026-05-25T14:23:28.778Z",
    "2026-05-25T14:23:28+01:00",
    "0000-01-01T00:00:00+01:00",
    "yesterday",
    "at://did:plc:vfnmgxg2yscfliemmcxzyfyh/app.bsky.feed.post/3mmoodizfwc2j",
    "at://did:plc:vfnmgxg2yscfliemmcxzyfyh/app.bsky.graph.list/3mmoodizfwc2j",
    "at://alice.bsky.social/app.bsky.feed.post/3mmoodizfwc2j",
    "at://did:plc:vfnmgxg2yscfliemmcxzyfyh",
    "https://x",
    "alice.bsky.social",
    "takendown",
    "deleted",
    "",
];

fn string() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => select(STRING_VALUES).prop_map(str::to_owned),
        1 => any::<String>(),
        1 => "[a-z0-9:./\\\\\"é]{0,16}",
    ]
}

fn scalar() -> impl Strategy<Value = Value> {
    prop_oneof![
        1 => Just(Value::Null),
        1 => any::<bool>().prop_map(Value::Bool),
        1 => any::<u64>().prop_map(Value::from),
        1 => any::<i64>().prop_map(Value::from),
        1 => any::<f64>().prop_map(Value::from),
        4 => string().prop_map(Value::String),
    ]
}

fn key() -> impl Strategy<Value = String> {
    prop_oneof![4 => select(FIELD_NAMES).prop_map(str::to_owned), 1 => string()]
}

/// Any JSON value, with keys and strings drawn mostly from Jetstream's vocabulary.
fn json() -> BoxedStrategy<Value> {
    scalar()
        .prop_recursive(4, 64, 6, |inner| {
            prop_oneof![
                vec(inner.clone(), 0..4).prop_map(Value::Array),
                vec((key(), inner), 0..6)
                    .prop_map(|entries| Value::Object(entries.into_iter().collect())),
            ]
        })
        .boxed()
}

/// Almost always `good`, rarely any JSON value at all: each event has about twenty fields,
/// so a higher rate would make nearly every event fail at its first mistyped field.
fn plausible(good: BoxedStrategy<Value>) -> BoxedStrategy<Value> {
    prop_oneof![24 => good, 1 => json()].boxed()
}

fn string_from(values: &'static [&'static str]) -> BoxedStrategy<Value> {
    plausible(select(values).prop_map(Value::from).boxed())
}

/// An object where each named field is present most of the time, plus an occasional stray key.
fn object_of(fields: Vec<(&'static str, BoxedStrategy<Value>)>) -> BoxedStrategy<Value> {
    let entries: Vec<BoxedStrategy<Option<(String, Value)>>> = fields
        .into_iter()
        .map(|(name, value)| {
            proptest::option::weighted(0.9, value)
                .prop_map(move |value| value.map(|value| (name.to_owned(), value)))
                .boxed()
        })
        .collect();
    (entries, proptest::option::weighted(0.2, (key(), json())))
        .prop_map(|(fields, extra)| {
            let mut object: Map<String, Value> = extra.into_iter().collect();
            object.extend(fields.into_iter().flatten());
            Value::Object(object)
        })
        .boxed()
}

fn uri_value() -> BoxedStrategy<Value> {
    string_from(&[
        "at://did:plc:vfnmgxg2yscfliemmcxzyfyh/app.bsky.feed.post/3mmoodizfwc2j",
        "at://did:plc:vfnmgxg2yscfliemmcxzyfyh/app.bsky.graph.list/3mmoodizfwc2j",
        "at://alice.bsky.social/app.bsky.feed.post/3mmoodizfwc2j",
        "https://x",
    ])
}

fn strong_ref() -> BoxedStrategy<Value> {
    plausible(object_of(vec![
        ("uri", uri_value()),
        ("cid", string_from(STRING_VALUES)),
    ]))
}

fn record() -> BoxedStrategy<Value> {
    let subject = prop_oneof![
        string_from(&["did:plc:mcc5yghbk7tixqryac2yxku7", "notadid"]),
        uri_value(),
        strong_ref(),
    ]
    .boxed();
    let reply = plausible(object_of(vec![
        ("root", strong_ref()),
        ("parent", strong_ref()),
    ]));
    let embed_record = prop_oneof![strong_ref(), object_of(vec![("record", strong_ref())])].boxed();
    let media = object_of(vec![("$type", string_from(STRING_VALUES))]);
    let embed = plausible(object_of(vec![
        ("$type", string_from(STRING_VALUES)),
        ("record", embed_record),
        ("media", media),
    ]));
    plausible(object_of(vec![
        ("$type", string_from(STRING_VALUES)),
        (
            "createdAt",
            string_from(&[
                "2026-05-25T14:23:28.778Z",
                "1985-04-12T23:20:50.123-07:00",
                "yesterday",
            ]),
        ),
        ("subject", subject),
        ("reply", reply),
        ("embed", embed),
        ("list", uri_value()),
        ("post", uri_value()),
        ("text", plausible(string().prop_map(Value::String).boxed())),
    ]))
}

fn number() -> BoxedStrategy<Value> {
    plausible(
        prop_oneof![
            any::<u64>().prop_map(Value::from),
            (0..10u64).prop_map(Value::from)
        ]
        .boxed(),
    )
}

/// A JSON object shaped like a Jetstream event, every part of which may be missing or wrong.
fn event_json() -> BoxedStrategy<Value> {
    let commit = object_of(vec![
        (
            "rev",
            string_from(&["3mmoojp7vgo2g", "2222222222222", "kzzzzzzzzzzzz", "xyz"]),
        ),
        (
            "operation",
            string_from(&["create", "update", "delete", "move"]),
        ),
        ("collection", string_from(STRING_VALUES)),
        ("rkey", string_from(&["3mmoojp7etg2g", "self", "..", "a/b"])),
        ("record", record()),
        (
            "cid",
            string_from(&[
                "bafyreidqpc7si3dbimffi64lz3xsx2qt45ip7rpna2qpslcddp23itjjzm",
                "xyz",
            ]),
        ),
    ]);
    let identity = object_of(vec![
        ("seq", number()),
        (
            "handle",
            string_from(&["alice.bsky.social", "handle.invalid", "bad handle"]),
        ),
    ]);
    let account = object_of(vec![
        ("seq", number()),
        (
            "active",
            plausible(any::<bool>().prop_map(Value::Bool).boxed()),
        ),
        (
            "status",
            string_from(&[
                "takendown",
                "suspended",
                "deleted",
                "deactivated",
                "throttled",
            ]),
        ),
    ]);
    // Each event carries the body its kind names; a stray key (see `object_of`) sometimes adds
    // another, and `plausible` sometimes breaks the kind.
    let bodies = [
        ("commit", commit),
        ("identity", identity),
        ("account", account),
    ];
    let events: Vec<BoxedStrategy<Value>> = bodies
        .into_iter()
        .map(|(kind, body)| {
            object_of(vec![
                (
                    "did",
                    string_from(&[
                        "did:plc:mcc5yghbk7tixqryac2yxku7",
                        "did:web:example.com",
                        "notadid",
                    ]),
                ),
                ("time_us", number()),
                (
                    "kind",
                    plausible(
                        prop_oneof![8 => Just(Value::from(kind)), 1 => Just(Value::from("foo"))]
                            .boxed(),
                    ),
                ),
                (kind, plausible(body)),
            ])
        })
        .collect();
    proptest::strategy::Union::new(events).boxed()
}

/// How a generated value is written out: compact, pretty, or with every `/` escaped as `\/`
/// (valid JSON that defeats borrowing).
fn render(value: &Value, style: u8) -> String {
    match style % 3 {
        0 => serde_json::to_string(value).unwrap(),
        1 => serde_json::to_string_pretty(value).unwrap(),
        _ => serde_json::to_string(value).unwrap().replace('/', "\\/"),
    }
}

proptest! {
    #![proptest_config(config(512))]

    // Checks that arbitrary bytes never make `decode` panic, and that whatever it accepts
    // passes `check_decoded`.
    #[test]
    fn arbitrary_bytes_never_panic(bytes in vec(any::<u8>(), 0..512)) {
        decode_and_check(&bytes);
    }

    // Checks that real events with a few random edits (bit flips, inserted, deleted and copied
    // bytes, truncation) never make `decode` panic, and that what it accepts is still sound.
    #[test]
    fn mutated_real_events_never_panic(pick in any::<Index>(), mutations in vec(mutation(), 1..8)) {
        let events = &*REAL_EVENTS;
        if events.is_empty() {
            return Ok(());
        }
        let mut bytes = events[pick.index(events.len())].clone();
        for mutation in &mutations {
            apply(&mut bytes, mutation);
        }
        decode_and_check(&bytes);
    }

    // Checks that JSON built from Jetstream's field names and values, nested and mistyped at
    // random, never makes `decode` panic, and that what it accepts is sound.
    #[test]
    fn jetstream_shaped_json_never_panics(value in event_json(), style in any::<u8>()) {
        decode_and_check(render(&value, style).as_bytes());
    }

    // Checks that any JSON value at all, with Jetstream's vocabulary, never makes `decode`
    // panic.
    #[test]
    fn any_json_never_panics(value in json(), style in any::<u8>()) {
        decode_and_check(render(&value, style).as_bytes());
    }
}

/// The base32-sortable alphabet of TIDs, to decode them independently of `syntax::parse_tid`.
const TID_ALPHABET: &[u8; 32] = b"234567abcdefghijklmnopqrstuvwxyz";

fn tid_value(tid: &str) -> u64 {
    tid.bytes().fold(0, |value, byte| {
        let digit = TID_ALPHABET
            .iter()
            .position(|&letter| letter == byte)
            .unwrap();
        (value << 5) | digit as u64
    })
}

/// `year-month-day hour:minute:second.millis` UTC in microseconds since 1970, counted day by
/// day rather than with the closed form the decoder uses. Years from 1970 on.
fn naive_epoch_micros(parts: (i64, i64, i64, i64, i64, i64, i64)) -> i64 {
    let (year, month, day, hour, minute, second, millis) = parts;
    let is_leap = |year: i64| year % 4 == 0 && (year % 100 != 0 || year % 400 == 0);
    let mut days = 0;
    for earlier_year in 1970..year {
        days += if is_leap(earlier_year) { 366 } else { 365 };
    }
    let month_days = [
        31,
        if is_leap(year) { 29 } else { 28 },
        31,
        30,
        31,
        30,
        31,
        31,
        30,
        31,
        30,
        31,
    ];
    days += month_days[..(month - 1) as usize].iter().sum::<i64>();
    days += day - 1;
    ((days * 24 + hour) * 60 + minute) * 60 * 1_000_000 + second * 1_000_000 + millis * 1000
}

/// What a generated well-formed commit refers to.
#[derive(Clone, Debug)]
enum Target {
    Post(String),
    Actor(String),
    Unindexed,
}

/// A well-formed like, follow or third-party record create.
#[derive(Clone, Debug)]
struct GoodCommit {
    did: String,
    time_us: u64,
    rev: String,
    rkey: String,
    cid: String,
    created_at: (i64, i64, i64, i64, i64, i64, i64),
    target: Target,
}

fn good_commit() -> impl Strategy<Value = GoodCommit> {
    let tid = "[2-7a-j][2-7a-z]{12}";
    let did = "did:plc:[a-z2-7]{24}";
    let created_at = (
        1970..2100i64,
        1..=12i64,
        1..=28i64,
        0..24i64,
        0..60i64,
        0..60i64,
        0..1000i64,
    );
    let target = prop_oneof![
        (did, tid)
            .prop_map(|(did, rkey)| Target::Post(format!("at://{did}/app.bsky.feed.post/{rkey}"))),
        did.prop_map(Target::Actor),
        Just(Target::Unindexed),
    ];
    (
        did,
        any::<u64>(),
        tid,
        tid,
        "bafyrei[a-z2-7]{52}",
        created_at,
        target,
    )
        .prop_map(
            |(did, time_us, rev, rkey, cid, created_at, target)| GoodCommit {
                did,
                time_us,
                rev,
                rkey,
                cid,
                created_at,
                target,
            },
        )
}

fn good_commit_json(commit: &GoodCommit) -> String {
    let (year, month, day, hour, minute, second, millis) = commit.created_at;
    let created_at =
        format!("{year:04}-{month:02}-{day:02}T{hour:02}:{minute:02}:{second:02}.{millis:03}Z");
    let (collection, record) = match &commit.target {
        Target::Post(uri) => (
            "app.bsky.feed.like",
            json!({"$type": "app.bsky.feed.like", "createdAt": created_at, "subject": {"cid": commit.cid, "uri": uri}}),
        ),
        Target::Actor(did) => (
            "app.bsky.graph.follow",
            json!({"$type": "app.bsky.graph.follow", "createdAt": created_at, "subject": did}),
        ),
        Target::Unindexed => (
            "fm.teal.alpha.actor.status",
            json!({"createdAt": created_at, "x": [1, null]}),
        ),
    };
    json!({
        "did": commit.did,
        "time_us": commit.time_us,
        "kind": "commit",
        "commit": {
            "rev": commit.rev,
            "operation": "create",
            "collection": collection,
            "rkey": commit.rkey,
            "record": record,
            "cid": commit.cid,
        },
    })
    .to_string()
}

proptest! {
    #![proptest_config(config(256))]

    // Checks generated well-formed creates against the values they were built from: each must
    // decode, with the revision and `createdAt` equal to values computed independently.
    #[test]
    fn well_formed_commits_decode_to_their_fields(commit in good_commit()) {
        let text = good_commit_json(&commit);
        let event = jetstream::decode(text.as_bytes()).unwrap();
        check_decoded(text.as_bytes(), &event);
        prop_assert_eq!(&*event.did, commit.did.as_str());
        prop_assert_eq!(event.time_us, commit.time_us);
        let Body::Commit(decoded) = event.body else { panic!("not a commit: {text}") };
        prop_assert_eq!(decoded.rev, tid_value(&commit.rev));
        prop_assert_eq!(&*decoded.rkey, commit.rkey.as_str());
        let record = decoded.record.unwrap();
        prop_assert_eq!(&*record.cid, commit.cid.as_str());
        let created_at_us = record.created_at_us;
        match (&commit.target, record.refs) {
            (Target::Post(uri), Refs::Subject { subject, .. }) => {
                prop_assert_eq!(created_at_us, Some(naive_epoch_micros(commit.created_at)));
                let rebuilt = format!("at://{}/{}/{}", subject.did, subject.collection, subject.rkey);
                prop_assert_eq!(&rebuilt, uri);
            }
            (Target::Actor(did), Refs::Actor { subject }) => {
                prop_assert_eq!(created_at_us, Some(naive_epoch_micros(commit.created_at)));
                prop_assert_eq!(&*subject, did.as_str());
            }
            (Target::Unindexed, Refs::None) => prop_assert_eq!(created_at_us, None),
            (target, refs) => panic!("{target:?} decoded to {refs:?}"),
        }
    }
}

const LIKE: &str = r#"{"did":"did:plc:mcc5yghbk7tixqryac2yxku7","time_us":1779719009132431,"kind":"commit","commit":{"rev":"3mmoojp7vgo2g","operation":"create","collection":"app.bsky.feed.like","rkey":"3mmoojp7etg2g","record":{"$type":"app.bsky.feed.like","createdAt":"2026-05-25T14:23:28.778Z","subject":{"cid":"bafyreiaxf7tgbfydx3465sckitq6v564thxe2wwydbi7cwxbxvgssje3em","uri":"at://did:plc:vfnmgxg2yscfliemmcxzyfyh/app.bsky.feed.post/3mmoodizfwc2j"}},"cid":"bafyreidqpc7si3dbimffi64lz3xsx2qt45ip7rpna2qpslcddp23itjjzm"}}"#;

const POST: &str = r#"{"did":"did:plc:q235v55g5unth4zjjdpacfdr","time_us":1779719009157119,"kind":"commit","commit":{"rev":"3mmoojpaqkn2z","operation":"create","collection":"app.bsky.feed.post","rkey":"3mmoojp4cd223","record":{"$type":"app.bsky.feed.post","createdAt":"2026-05-25T14:23:28.757Z","langs":["en"],"text":"hello"},"cid":"bafyreicl7rzkxdrm4zz2ehbx52kuk3mvfow6p3gzfys72r5grvskxoswy4"}}"#;

const LISTBLOCK: &str = r#"{"did":"did:plc:q235v55g5unth4zjjdpacfdr","time_us":1,"kind":"commit","commit":{"rev":"3mmoojpaqkn2z","operation":"create","collection":"app.bsky.graph.listblock","rkey":"3mmoojp4cd223","record":{"createdAt":"2026-05-25T14:23:28.757Z","subject":"at://did:plc:vfnmgxg2yscfliemmcxzyfyh/app.bsky.graph.list/3mmoodizfwc2j"},"cid":"bafyreicl7rzkxdrm4zz2ehbx52kuk3mvfow6p3gzfys72r5grvskxoswy4"}}"#;

const IDENTITY: &str = r#"{"did":"did:plc:hqvhxrowqbemo5e4wjnj6zao","time_us":1783175888384849,"kind":"identity","identity":{"did":"did:plc:hqvhxrowqbemo5e4wjnj6zao","seq":31527015470,"time":"2026-07-04T14:38:07.877Z","handle":"alice.bsky.social"}}"#;

/// `base` with `from` replaced by `to`; fails if `from` is absent, so no case tests the base
/// event by mistake.
fn edited(base: &str, from: &str, to: &str) -> Vec<u8> {
    assert!(base.contains(from), "{from:?} not in base event");
    base.replacen(from, to, 1).into_bytes()
}

/// Checks that `bytes` is dropped for `expected`.
fn check_dropped(case: &str, bytes: &[u8], expected: DropReason) {
    match jetstream::decode(bytes) {
        Ok(event) => panic!("{case}: decoded {event:?}, expected {expected}"),
        Err(err) => assert_eq!(err.reason, expected, "{case}: {err}"),
    }
}

// Checks that the handmade base events decode, so that each bad variant below differs from a
// good event only by its one edit.
#[test]
fn base_events_decode() {
    for base in [LIKE, POST, LISTBLOCK, IDENTITY] {
        let event = jetstream::decode(base.as_bytes()).unwrap();
        check_decoded(base.as_bytes(), &event);
    }
    let Body::Commit(commit) = jetstream::decode(LISTBLOCK.as_bytes()).unwrap().body else {
        panic!("listblock is not a commit");
    };
    let Some(Refs::Target { target }) = commit.record.map(|record| record.refs) else {
        panic!("listblock has no target");
    };
    assert_eq!(target.collection, "app.bsky.graph.list");
}

// Checks each drop reason on a good event with one field broken, asserting the exact reason.
#[test]
fn bad_events_give_their_drop_reason() {
    let mut not_utf8 = LIKE.as_bytes().to_vec();
    let text_idx = not_utf8.len() - 10;
    not_utf8[text_idx] = 0xff;
    let huge_text = "x".repeat(2 * 1024 * 1024);
    let huge = edited(POST, "\"hello\"", &format!("\"{huge_text}\""));
    assert!(huge.len() > EVENT_BYTES_MAX);
    let missing_commit =
        br#"{"did":"did:plc:mcc5yghbk7tixqryac2yxku7","time_us":1779719009132431,"kind":"commit"}"#;
    let cases: Vec<(&str, Vec<u8>, DropReason)> = vec![
        (
            "did",
            edited(LIKE, "did:plc:mcc5yghbk7tixqryac2yxku7", "notadid"),
            DropReason::BadDid,
        ),
        (
            "kind",
            edited(LIKE, r#""kind":"commit""#, r#""kind":"foo""#),
            DropReason::UnknownKind,
        ),
        (
            "rev",
            edited(LIKE, "3mmoojp7vgo2g", "xyz"),
            DropReason::BadRev,
        ),
        (
            "subject uri",
            edited(
                LIKE,
                "at://did:plc:vfnmgxg2yscfliemmcxzyfyh/app.bsky.feed.post/3mmoodizfwc2j",
                "https://x",
            ),
            DropReason::BadUri,
        ),
        (
            "escaped uri",
            edited(LIKE, "at://", "at:\\/\\/"),
            DropReason::BadUri,
        ),
        (
            "createdAt",
            edited(POST, "2026-05-25T14:23:28.757Z", "yesterday"),
            DropReason::BadDatetime,
        ),
        ("not utf-8", not_utf8, DropReason::NotUtf8),
        ("2 MiB", huge, DropReason::TooLarge),
        (
            "no commit",
            missing_commit.to_vec(),
            DropReason::MissingField,
        ),
        (
            "no createdAt",
            edited(POST, r#""createdAt":"2026-05-25T14:23:28.757Z","#, ""),
            DropReason::MissingField,
        ),
        (
            "operation",
            edited(LIKE, r#""create""#, r#""move""#),
            DropReason::UnknownOperation,
        ),
        (
            "collection",
            edited(
                LIKE,
                r#""collection":"app.bsky.feed.like""#,
                r#""collection":"like""#,
            ),
            DropReason::BadNsid,
        ),
        (
            "rkey",
            edited(LIKE, "3mmoojp7etg2g", ".."),
            DropReason::BadRkey,
        ),
        (
            "cid",
            edited(
                LIKE,
                "bafyreidqpc7si3dbimffi64lz3xsx2qt45ip7rpna2qpslcddp23itjjzm",
                "xyz",
            ),
            DropReason::BadCid,
        ),
        (
            "handle",
            edited(IDENTITY, "alice.bsky.social", "not a handle"),
            DropReason::BadHandle,
        ),
        ("json", edited(LIKE, "{", "["), DropReason::BadJson),
    ];
    for (case, bytes, expected) in &cases {
        check_dropped(case, bytes, *expected);
    }
}

/// A like with `depth` levels of arrays added in an unknown record field, so the whole event
/// nests `depth + 3` deep (the envelope, the commit and the record are three levels).
fn nested_like(depth: usize) -> Vec<u8> {
    let nested = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
    edited(
        LIKE,
        r#""subject":"#,
        &format!(r#""x":{nested},"subject":"#),
    )
}

// Checks that deep nesting is a counted drop, not a stack overflow: events nested 13,000 and
// 64,000 deep (what once overflowed the live and the replay thread's stacks) are dropped as
// too deep, the deepest event the bound allows still decodes, and brackets inside strings do
// not count as nesting.
#[test]
fn deep_nesting_is_dropped_not_a_stack_overflow() {
    for depth in [13_000, 64_000] {
        check_dropped("deep", &nested_like(depth), DropReason::TooDeep);
    }
    let deepest = nested_like(jetstream::NESTING_DEPTH_MAX - 3);
    let event = jetstream::decode(&deepest).unwrap();
    check_decoded(&deepest, &event);
    check_dropped(
        "one too deep",
        &nested_like(jetstream::NESTING_DEPTH_MAX - 2),
        DropReason::TooDeep,
    );
    let in_string = format!("\"{}\\\"{}\"", "[".repeat(1000), "{".repeat(1000));
    let quoted = edited(
        LIKE,
        r#""subject":"#,
        &format!(r#""x":{in_string},"subject":"#),
    );
    let event = jetstream::decode(&quoted).unwrap();
    check_decoded(&quoted, &event);
    let deep_record = format!("{{\"a\":{}1{}}}", "[".repeat(100), "]".repeat(100));
    let err = jetstream::record_fields("app.bsky.feed.like", &deep_record).unwrap_err();
    assert_eq!(err.reason, DropReason::TooDeep);
}
