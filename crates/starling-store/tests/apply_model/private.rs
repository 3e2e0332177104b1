//! Each user's private state (the bsync operations) against a naive model kept in `BTreeMap`s,
//! on both backends: random operations in random batches, every read compared with the model
//! after the last batch and again after the store is reopened.
//!
//! The model is written from the rules in `private/mod.rs`'s documentation, not from the code:
//! an actor mute is upserted keeping its time, list and thread mutes are sets, a clear removes
//! actor and list mutes, the seen time only moves forward, a priority operation on an actor
//! with no state sets the seen time to the processing time, one bookmark per post and actor,
//! and updates of unknown keys change nothing.

use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;
use starling_store::{BsyncStream, EmbeddedStore, PrivateOp, Store};

use super::FreshKeyspace;

const ACTORS: [&str; 3] = ["did:plc:alice", "did:plc:bob", "did:web:carol.example"];
const LISTS: [&str; 2] = [
    "at://did:plc:bob/app.bsky.graph.list/3kaaaaaaaaaa2",
    "at://did:plc:dan/app.bsky.graph.list/3kaaaaaaaaab2",
];
const POSTS: [&str; 3] = [
    "at://did:plc:bob/app.bsky.feed.post/3kaaaaaaaaaa2",
    "at://did:plc:dan/app.bsky.feed.post/3kaaaaaaaaab2",
    "at://did:plc:dan/app.bsky.feed.post/3kaaaaaaaaac2",
];
const KEYS: [&str; 4] = [
    "3kaaaaaaaaaa2",
    "3kaaaaaaaaab2",
    "3kaaaaaaaaac2",
    "3kaaaaaaaaad2",
];

fn pick<T: Clone + std::fmt::Debug + 'static>(items: &'static [T]) -> impl Strategy<Value = T> {
    proptest::sample::select(items)
}

fn op() -> impl Strategy<Value = PrivateOp> {
    let actor = || pick(&ACTORS).prop_map(str::to_owned);
    let key = || pick(&KEYS).prop_map(str::to_owned);
    prop_oneof![
        (actor(), actor(), any::<bool>(), any::<bool>()).prop_map(|(actor, subject, r, q)| {
            PrivateOp::MuteActor {
                actor,
                subject,
                only_reposts: r,
                only_quoteposts: q,
            }
        }),
        (actor(), actor()).prop_map(|(actor, subject)| PrivateOp::UnmuteActor { actor, subject }),
        (actor(), pick(&LISTS)).prop_map(|(actor, list)| PrivateOp::MuteList {
            actor,
            list: list.to_owned()
        }),
        (actor(), pick(&LISTS)).prop_map(|(actor, list)| PrivateOp::UnmuteList {
            actor,
            list: list.to_owned()
        }),
        (actor(), pick(&POSTS)).prop_map(|(actor, root)| PrivateOp::MuteThread {
            actor,
            root: root.to_owned()
        }),
        (actor(), pick(&POSTS)).prop_map(|(actor, root)| PrivateOp::UnmuteThread {
            actor,
            root: root.to_owned()
        }),
        actor().prop_map(|actor| PrivateOp::ClearMutes { actor }),
        (actor(), 0..5_000i64)
            .prop_map(|(actor, seen_us)| PrivateOp::NotificationSeen { actor, seen_us }),
        (actor(), any::<bool>())
            .prop_map(|(actor, priority)| PrivateOp::NotificationPriority { actor, priority }),
        (actor(), 0..3u8).prop_map(|(actor, n)| PrivateOp::PutPreferences {
            actor,
            json: format!(r#"{{"n":{n}}}"#)
        }),
        actor().prop_map(|actor| PrivateOp::DeletePreferences { actor }),
        (actor(), key(), pick(&POSTS)).prop_map(|(actor, key, uri)| PrivateOp::PutBookmark {
            actor,
            key,
            subject_uri: uri.to_owned(),
            subject_cid: format!("bafy{}", uri.len()),
        }),
        (actor(), key()).prop_map(|(actor, key)| PrivateOp::DeleteBookmark { actor, key }),
        (
            actor(),
            key(),
            actor(),
            any::<bool>(),
            any::<bool>(),
            any::<bool>()
        )
            .prop_map(|(actor, key, subject, post, reply, update)| {
                PrivateOp::PutActivitySubscription {
                    actor,
                    key,
                    subject,
                    post,
                    reply,
                    update,
                }
            }),
        (actor(), key())
            .prop_map(|(actor, key)| PrivateOp::DeleteActivitySubscription { actor, key }),
        (actor(), key(), 0..3u8, any::<bool>()).prop_map(|(actor, key, n, update)| {
            PrivateOp::PutDraft {
                actor,
                key,
                json: format!(r#"{{"d":{n}}}"#),
                update,
            }
        }),
        (actor(), key()).prop_map(|(actor, key)| PrivateOp::DeleteDraft { actor, key }),
    ]
}

type Pair = (String, String);

/// The naive model: one map per kind of state.
#[derive(Default)]
pub struct Model {
    /// (actor, subject) -> (created, only reposts, only quote posts).
    mutes: BTreeMap<Pair, (i64, bool, bool)>,
    /// (actor, list) -> created.
    list_mutes: BTreeMap<Pair, i64>,
    thread_mutes: BTreeSet<Pair>,
    /// actor -> (seen, priority).
    notifications: BTreeMap<String, (Option<i64>, bool)>,
    preferences: BTreeMap<String, String>,
    /// (actor, key) -> (uri, cid, indexed).
    bookmarks: BTreeMap<Pair, (String, String, i64)>,
    /// (actor, key) -> (subject, post, reply).
    activity: BTreeMap<Pair, (String, bool, bool)>,
    /// (actor, subject) -> key: the newest subscription to the subject still there.
    activity_by_subject: BTreeMap<Pair, String>,
    /// (actor, key) -> (json, created, updated).
    drafts: BTreeMap<Pair, (String, i64, i64)>,
}

impl Model {
    pub fn apply(&mut self, op: &PrivateOp, now: i64) {
        let pair = |a: &str, b: &str| (a.to_owned(), b.to_owned());
        match op {
            PrivateOp::MuteActor {
                actor,
                subject,
                only_reposts,
                only_quoteposts,
            } => {
                let created = self.mutes.get(&pair(actor, subject)).map_or(now, |m| m.0);
                self.mutes.insert(
                    pair(actor, subject),
                    (created, *only_reposts, *only_quoteposts),
                );
            }
            PrivateOp::UnmuteActor { actor, subject } => {
                self.mutes.remove(&pair(actor, subject));
            }
            PrivateOp::MuteList { actor, list } => {
                self.list_mutes.entry(pair(actor, list)).or_insert(now);
            }
            PrivateOp::UnmuteList { actor, list } => {
                self.list_mutes.remove(&pair(actor, list));
            }
            PrivateOp::MuteThread { actor, root } => {
                self.thread_mutes.insert(pair(actor, root));
            }
            PrivateOp::UnmuteThread { actor, root } => {
                self.thread_mutes.remove(&pair(actor, root));
            }
            PrivateOp::ClearMutes { actor } => {
                self.mutes.retain(|(a, _), _| a != actor);
                self.list_mutes.retain(|(a, _), _| a != actor);
            }
            PrivateOp::NotificationSeen { actor, seen_us } => {
                let state = self
                    .notifications
                    .entry(actor.clone())
                    .or_insert((None, false));
                state.0 = Some(state.0.map_or(*seen_us, |old| old.max(*seen_us)));
            }
            PrivateOp::NotificationPriority { actor, priority } => {
                let state = self
                    .notifications
                    .entry(actor.clone())
                    .or_insert((Some(now), false));
                state.1 = *priority;
            }
            PrivateOp::PutPreferences { actor, json } => {
                self.preferences.insert(actor.clone(), json.clone());
            }
            PrivateOp::DeletePreferences { actor } => {
                self.preferences.remove(actor);
            }
            keyed => self.apply_keyed(keyed, now),
        }
    }

    /// Whether `actor` mutes the thread under `root`.
    pub fn thread_muted(&self, actor: &str, root: &str) -> bool {
        self.thread_mutes
            .contains(&(actor.to_owned(), root.to_owned()))
    }

    /// The accounts subscribed to `subject`'s activity: DID, posts, replies.
    pub fn subscribers(&self, subject: &str) -> Vec<(String, bool, bool)> {
        self.activity_by_subject
            .iter()
            .filter(|((_, s), _)| s == subject)
            .map(|((owner, _), key)| {
                let (_, post, reply) = self.activity[&(owner.clone(), key.clone())];
                (owner.clone(), post, reply)
            })
            .collect()
    }

    /// The operations on rows keyed by bsync key: bookmarks, activity subscriptions, drafts.
    fn apply_keyed(&mut self, op: &PrivateOp, now: i64) {
        let pair = |a: &str, b: &str| (a.to_owned(), b.to_owned());
        match op {
            PrivateOp::PutBookmark {
                actor,
                key,
                subject_uri,
                subject_cid,
            } => {
                self.bookmarks.remove(&pair(actor, key));
                self.bookmarks
                    .retain(|(a, _), (uri, _, _)| a != actor || uri != subject_uri);
                self.bookmarks.insert(
                    pair(actor, key),
                    (subject_uri.clone(), subject_cid.clone(), now),
                );
            }
            PrivateOp::DeleteBookmark { actor, key } => {
                self.bookmarks.remove(&pair(actor, key));
            }
            PrivateOp::PutActivitySubscription {
                actor,
                key,
                subject,
                post,
                reply,
                update,
            } => {
                let stored = self.activity.get(&pair(actor, key)).cloned();
                let subject = match (&stored, update) {
                    (Some(stored), true) => stored.0.clone(),
                    (None, true) => return,
                    (_, false) => subject.clone(),
                };
                if let Some(stored) = stored {
                    self.unlink_activity(actor, key, &stored.0);
                }
                self.activity
                    .insert(pair(actor, key), (subject.clone(), *post, *reply));
                self.activity_by_subject
                    .insert(pair(actor, &subject), key.clone());
            }
            PrivateOp::DeleteActivitySubscription { actor, key } => {
                if let Some(stored) = self.activity.remove(&pair(actor, key)) {
                    self.unlink_activity(actor, key, &stored.0);
                }
            }
            PrivateOp::PutDraft {
                actor,
                key,
                json,
                update,
            } => {
                let stored = self.drafts.get(&pair(actor, key)).cloned();
                if *update && stored.is_none() {
                    return;
                }
                let created = stored.map_or(now, |d| d.1);
                self.drafts
                    .insert(pair(actor, key), (json.clone(), created, now));
            }
            PrivateOp::DeleteDraft { actor, key } => {
                self.drafts.remove(&pair(actor, key));
            }
            _ => unreachable!("not an operation on keyed rows: {op:?}"),
        }
    }

    fn unlink_activity(&mut self, actor: &str, key: &str, subject: &str) {
        let by_subject = (actor.to_owned(), subject.to_owned());
        if self
            .activity_by_subject
            .get(&by_subject)
            .map(String::as_str)
            == Some(key)
        {
            self.activity_by_subject.remove(&by_subject);
        }
    }
}

/// Reads a whole list through pages of 2, checking that every page but the last is full.
fn all_pages<T>(mut page: impl FnMut(Option<&[u8]>) -> starling_store::PrivatePage<T>) -> Vec<T> {
    let mut items = Vec::new();
    let mut cursor: Option<Vec<u8>> = None;
    for _ in 0..100 {
        let next = page(cursor.as_deref());
        items.extend(next.items);
        match next.cursor {
            Some(next) => cursor = Some(next),
            None => return items,
        }
    }
    panic!("more than 100 pages of a list of a few items");
}

fn check<S: Store>(store: &S, model: &Model) {
    for actor in ACTORS {
        // Mutes, newest first (time, then subject, descending).
        let mut want: Vec<_> = model
            .mutes
            .iter()
            .filter(|((a, _), _)| a == actor)
            .map(|((_, s), m)| (m.0, s.clone(), m.1, m.2))
            .collect();
        want.sort_by(|x, y| y.cmp(x));
        let got: Vec<_> = all_pages(|after| store.mutes(actor, after, 2).unwrap())
            .into_iter()
            .map(|m| (m.created_us, m.subject, m.only_reposts, m.only_quoteposts))
            .collect();
        assert_eq!(got, want, "mutes of {actor}");
        for subject in ACTORS {
            let got = store
                .mute(actor, subject)
                .unwrap()
                .map(|m| (m.only_reposts, m.only_quoteposts));
            let want = model
                .mutes
                .get(&(actor.into(), subject.into()))
                .map(|m| (m.1, m.2));
            assert_eq!(got, want, "mute of {subject} by {actor}");
        }
        let mut want: Vec<_> = model
            .list_mutes
            .iter()
            .filter(|((a, _), _)| a == actor)
            .map(|((_, list), t)| (*t, list.clone()))
            .collect();
        want.sort_by(|x, y| y.cmp(x));
        let want: Vec<String> = want.into_iter().map(|(_, list)| list).collect();
        assert_eq!(
            all_pages(|after| store.list_mutes(actor, after, 2).unwrap()),
            want
        );
        for list in LISTS {
            let want = model.list_mutes.contains_key(&(actor.into(), list.into()));
            assert_eq!(store.list_muted(actor, list).unwrap(), want);
        }
        for root in POSTS {
            let want = model.thread_mutes.contains(&(actor.into(), root.into()));
            assert_eq!(
                store.thread_muted(actor, root).unwrap(),
                want,
                "{actor} mutes {root}"
            );
        }
        let state = store.notification_state(actor).unwrap();
        let want = model
            .notifications
            .get(actor)
            .copied()
            .unwrap_or((None, false));
        assert_eq!(
            (state.seen_us, state.priority),
            want,
            "notification state of {actor}"
        );
        assert_eq!(
            store.notification_preferences(actor).unwrap(),
            model.preferences.get(actor).cloned()
        );
        check_keyed(store, model, actor);
    }
    for uri in POSTS {
        let want = model.bookmarks.values().filter(|b| b.0 == uri).count() as u64;
        assert_eq!(
            store.bookmark_count(uri).unwrap(),
            want,
            "bookmarks of {uri}"
        );
    }
}

/// The lists keyed by bsync key: bookmarks, activity subscriptions, drafts.
fn check_keyed<S: Store>(store: &S, model: &Model, actor: &str) {
    let of_actor = |(a, _): &&Pair| a == actor;
    let want: Vec<_> = model
        .bookmarks
        .iter()
        .filter(|(k, _)| of_actor(k))
        .rev()
        .map(|((_, key), b)| (key.clone(), b.0.clone(), b.1.clone(), b.2))
        .collect();
    let got: Vec<_> = all_pages(|after| store.bookmarks(actor, after, 2).unwrap())
        .into_iter()
        .map(|b| (b.key, b.subject_uri, b.subject_cid, b.indexed_us))
        .collect();
    assert_eq!(got, want, "bookmarks of {actor}");
    for uri in POSTS {
        let want = want.iter().find(|b| b.1 == uri).map(|b| b.0.clone());
        assert_eq!(store.bookmark(actor, uri).unwrap().map(|b| b.key), want);
    }
    let want: Vec<_> = model
        .activity
        .iter()
        .filter(|(k, _)| of_actor(k))
        .rev()
        .map(|((_, key), s)| (key.clone(), s.0.clone(), s.1, s.2))
        .collect();
    let got: Vec<_> = all_pages(|after| store.activity_subscriptions(actor, after, 2).unwrap())
        .into_iter()
        .map(|s| (s.key, s.subject, s.post, s.reply))
        .collect();
    assert_eq!(got, want, "activity subscriptions of {actor}");
    for subject in ACTORS {
        let want = model
            .activity_by_subject
            .get(&(actor.into(), subject.into()))
            .map(|key| (key.clone(), model.activity[&(actor.into(), key.clone())].1));
        let got = store
            .activity_subscription(actor, subject)
            .unwrap()
            .map(|s| (s.key, s.post));
        assert_eq!(got, want, "subscription of {actor} to {subject}");
    }
    let mut want: Vec<_> = model
        .drafts
        .iter()
        .filter(|(k, _)| of_actor(k))
        .map(|((_, key), d)| (d.2, key.clone(), d.0.clone(), d.1))
        .collect();
    want.sort_by(|x, y| y.cmp(x));
    let got: Vec<_> = all_pages(|after| store.drafts(actor, after, 2).unwrap())
        .into_iter()
        .map(|d| (d.updated_us, d.key, d.json, d.created_us))
        .collect();
    assert_eq!(
        store.draft_count(actor).unwrap(),
        want.len() as u64,
        "draft count of {actor}"
    );
    assert_eq!(got, want, "drafts of {actor}");
}

/// Applies `ops` in batches of the given sizes (cycled), each with its processing time and a
/// cursor, and checks the store against the model and the last cursor.
fn private_case<S: Store>(store: &S, ops: &[PrivateOp], batch_sizes: &[usize]) -> Model {
    assert!(!ops.is_empty() && !batch_sizes.is_empty());
    let mut model = Model::default();
    let mut at = 0;
    let mut batch_idx = 0;
    while at < ops.len() {
        let size = batch_sizes[batch_idx % batch_sizes.len()];
        let batch = &ops[at..ops.len().min(at + size)];
        let now = 1_000 * (batch_idx as i64 + 1);
        for op in batch {
            model.apply(op, now);
        }
        let cursor = format!("{}", batch_idx + 1);
        store
            .apply_private(batch, now, Some((BsyncStream::Mutes, &cursor)))
            .unwrap();
        at += batch.len();
        batch_idx += 1;
    }
    check(store, &model);
    assert_eq!(
        store.bsync_cursor(BsyncStream::Mutes).unwrap(),
        Some(batch_idx.to_string())
    );
    assert_eq!(store.bsync_cursor(BsyncStream::Operations).unwrap(), None);
    model
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    // Random private operations in random batches: the store equals the model, and again
    // after reopening it.
    #[test]
    fn private_state_matches_the_model(
        ops in proptest::collection::vec(op(), 1..80),
        batch_sizes in proptest::collection::vec(1..8usize, 1..5),
    ) {
        let tmp = tempfile::tempdir().unwrap();
        let model = {
            let store = EmbeddedStore::open(tmp.path()).unwrap();
            private_case(&store, &ops, &batch_sizes)
        };
        check(&EmbeddedStore::open(tmp.path()).unwrap(), &model);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 3, ..ProptestConfig::default() })]

    // The same on Cassandra, each case in a fresh keyspace.
    #[test]
    fn cassandra_private_state_matches_the_model(
        ops in proptest::collection::vec(op(), 1..80),
        batch_sizes in proptest::collection::vec(1..8usize, 1..5),
    ) {
        let Some(keyspace) = FreshKeyspace::new("private state") else {
            return Ok(());
        };
        let model = private_case(&keyspace.open(), &ops, &batch_sizes);
        check(&keyspace.open(), &model);
        keyspace.drop_keyspace();
    }
}
