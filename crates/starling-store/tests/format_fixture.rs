//! A data directory written by this format (`fixtures/format-N`, N = [`STORE_FORMAT`], made by
//! `examples/write-format-fixture.rs` from the sample network) opens, and reads the same as a
//! fresh store the same events are applied to now. A change of layout that forgets to bump the
//! format fails here; a bump without a new fixture fails too. A format 1 directory (before
//! private state), a format 2 one (before the time-ordered lists) and a format 3 one (before
//! notification keys kept their subject) open too, are upgraded to the current format, and read
//! like the fresh store (format 1 without private state, formats 1 and 2 without comparing
//! notifications, whose rules grew since). From format 3 on, deleting half the records in both
//! stores leaves the same notifications, unread counts and lists: the older keys (without a
//! notification's subject or an actor's record's target) go with their records.

#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

use std::collections::BTreeSet;
use std::path::Path;

use starling_core::jetstream::{self, Body};
use starling_core::sample::{delete_every_second, events};
use starling_core::syntax::RecordUri;
use starling_store::{
    ACTOR_LISTED_COLLECTIONS, Batch, BsyncStream, EmbeddedStore, GraphChange, ListEntry, ListOf,
    NotificationReason, STORE_FORMAT, Store,
};

mod fixture_contents;

use fixture_contents::{PARAMS, PRIVATE_NOW_US, private_ops};

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

fn edges<S: Store>(store: &S) -> BTreeSet<GraphChange> {
    let mut res = BTreeSet::new();
    store
        .for_each_edge(&mut |change| _ = res.insert(change))
        .unwrap();
    res
}

#[test]
fn the_current_format_fixture_reads_like_a_fresh_store() {
    fixture_reads_like_a_fresh_store(STORE_FORMAT);
}

#[test]
fn a_format_1_fixture_is_upgraded_and_reads_like_a_fresh_store() {
    fixture_reads_like_a_fresh_store(1);
}

#[test]
fn a_format_2_fixture_is_upgraded_and_reads_like_a_fresh_store() {
    fixture_reads_like_a_fresh_store(2);
}

#[test]
fn a_format_3_fixture_is_upgraded_and_reads_like_a_fresh_store() {
    fixture_reads_like_a_fresh_store(3);
}

/// A notification as served, without its cursor (its bytes differ between formats).
type Shown = (String, NotificationReason, Option<String>, i64);

/// Every notification of `did`, newest first, and its unread count.
fn notifications_of(store: &EmbeddedStore, did: &str) -> (Vec<Shown>, u32) {
    let Some(recipient) = store.actor_id(did) else {
        return (Vec::new(), 0);
    };
    let mut res = Vec::new();
    store
        .notifications(recipient, None, usize::MAX, &mut |n| {
            res.push((n.uri, n.reason, n.reason_subject, n.sort_at_us));
            true
        })
        .unwrap();
    let unread = store
        .unread_notifications(recipient, None, u32::MAX)
        .unwrap();
    (res, unread)
}

/// Checks that both stores show every account the same notifications and unread counts;
/// returns how many notifications they show.
fn check_notifications(
    old: &EmbeddedStore,
    fresh: &EmbeddedStore,
    dids: &BTreeSet<String>,
) -> usize {
    let mut n_shown = 0;
    for did in dids {
        let want = notifications_of(fresh, did);
        assert_eq!(notifications_of(old, did), want, "{did}");
        n_shown += want.0.len();
    }
    n_shown
}

/// Deletes every second record the sample's commits left live, in both stores.
fn delete_half(old: &EmbeddedStore, fresh: &EmbeddedStore, lines: &[String]) {
    let deletes = delete_every_second(lines, |did, collection, rkey| {
        fresh.record(did, collection, rkey).unwrap().is_some()
    });
    for store in [old, fresh] {
        let mut batch = store.batch();
        for line in &deletes {
            batch.apply(&jetstream::decode_str(line).unwrap()).unwrap();
        }
        batch.commit().unwrap();
        store.sync().unwrap();
    }
}

/// Every entry of a list, newest first, paging two at a time (so cursors are read too),
/// without the targets that entries of format 4 on keep (`apply_model` checks those).
fn whole_list<S: Store>(store: &S, list: &ListOf<'_>) -> Vec<ListEntry> {
    let mut res = Vec::new();
    let mut after: Option<Vec<u8>> = None;
    loop {
        let page = store.list_page(list, after.as_deref(), 2).unwrap();
        res.extend(page.entries.into_iter().map(|entry| ListEntry {
            target: None,
            ..entry
        }));
        match page.cursor {
            Some(cursor) => after = Some(cursor),
            None => return res,
        }
    }
}

/// The time-ordered lists format 3 added read the same in both stores; returns how many
/// entries they hold, so the caller can check the sample exercises them.
fn check_lists(old: &EmbeddedStore, fresh: &EmbeddedStore, did: &str, lists: &[String]) -> usize {
    let mut n_entries = 0;
    for collection in ACTOR_LISTED_COLLECTIONS {
        let list = ListOf::ActorRecords { did, collection };
        let entries = whole_list(fresh, &list);
        assert_eq!(whole_list(old, &list), entries, "{did} {collection}");
        n_entries += entries.len();
    }
    for uri in lists {
        let uri = RecordUri::parse(uri).unwrap();
        let list = match uri.collection {
            "app.bsky.graph.list" => ListOf::ListItems {
                list: uri,
                owner: fresh.actor_id(uri.did).unwrap(),
            },
            _ => {
                let joins = fresh.starter_pack_joins(&uri).unwrap();
                assert_eq!(old.starter_pack_joins(&uri).unwrap(), joins);
                ListOf::Joins(uri)
            }
        };
        let entries = whole_list(fresh, &list);
        assert_eq!(whole_list(old, &list), entries, "{uri:?}");
        n_entries += entries.len();
    }
    n_entries
}

/// [`check_lists`] for every DID of `dids`: the number of entries in all.
fn all_lists(
    old: &EmbeddedStore,
    fresh: &EmbeddedStore,
    dids: &BTreeSet<String>,
    lists: &[String],
) -> usize {
    dids.iter()
        .map(|did| check_lists(old, fresh, did, lists))
        .sum()
}

/// Opens the fixture of `format` and compares it with a fresh store given the same input:
/// events, and private state from format 2 on.
fn fixture_reads_like_a_fresh_store(format: u32) {
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(format!("format-{format}"));
    assert!(fixture.is_dir(), "no fixture for format {format}");
    let tmp = tempfile::tempdir().unwrap();
    copy_dir(&fixture, &tmp.path().join("old"));
    let old = EmbeddedStore::open(&tmp.path().join("old")).unwrap();
    let marker = std::fs::read_to_string(tmp.path().join("old/FORMAT")).unwrap();
    assert_eq!(
        marker.trim_end(),
        format!("starling store format {STORE_FORMAT}")
    );
    let fresh = EmbeddedStore::open(&tmp.path().join("fresh")).unwrap();
    if format >= 2 {
        fresh
            .apply_private(
                &private_ops(),
                PRIVATE_NOW_US,
                Some((BsyncStream::Mutes, "7")),
            )
            .unwrap();
    }
    check_private(&old, &fresh, format >= 2);
    let lines = events(&PARAMS);
    let mut batch = fresh.batch();
    for line in &lines {
        batch
            .apply(&jetstream::decode(line.as_bytes()).unwrap())
            .unwrap();
    }
    batch.commit().unwrap();
    fresh.sync().unwrap();

    assert_eq!(old.stats().unwrap(), fresh.stats().unwrap());
    assert!(fresh.stats().unwrap().posts > 0, "the sample has posts");
    assert_eq!(edges(&old), edges(&fresh));
    let mut dids = BTreeSet::new();
    let mut lists = Vec::new();
    for line in &lines {
        let event = jetstream::decode(line.as_bytes()).unwrap();
        dids.insert(event.did.to_string());
        let Body::Commit(commit) = &event.body else {
            continue;
        };
        let (did, collection, rkey) = (&*event.did, &*commit.collection, &*commit.rkey);
        let record = fresh.record(did, collection, rkey).unwrap();
        assert_eq!(old.record(did, collection, rkey).unwrap(), record);
        let uri = format!("at://{did}/{collection}/{rkey}");
        if ["app.bsky.graph.list", "app.bsky.graph.starterpack"].contains(&collection) {
            lists.push(uri.clone());
        }
        let uri = RecordUri::parse(&uri).unwrap();
        assert_eq!(
            old.record_counts(&uri).unwrap(),
            fresh.record_counts(&uri).unwrap()
        );
    }
    let mut n_list_entries = 0;
    for did in &dids {
        n_list_entries += check_lists(&old, &fresh, did, &lists);
        let info = fresh.actor(did).unwrap().unwrap();
        assert_eq!(old.actor(did).unwrap(), Some(info.clone()));
        assert_eq!(
            old.actor_counts(info.id).unwrap(),
            fresh.actor_counts(info.id).unwrap()
        );
        let feed = |store: &EmbeddedStore| {
            let mut items = Vec::new();
            store
                .author_feed(info.id, None, &mut |item| {
                    items.push(item);
                    true
                })
                .unwrap();
            items
        };
        assert_eq!(feed(&old), feed(&fresh));
    }
    assert!(n_list_entries > 0, "the sample has likes, lists and blocks");
    if format >= 3 {
        let n_before = check_notifications(&old, &fresh, &dids);
        assert!(n_before > 0, "the sample has notifications");
        let n_lists_before = all_lists(&old, &fresh, &dids, &lists);
        delete_half(&old, &fresh, &lines);
        let n_after = check_notifications(&old, &fresh, &dids);
        assert!(
            n_after < n_before,
            "{n_after} of {n_before} notifications left"
        );
        let n_lists_after = all_lists(&old, &fresh, &dids, &lists);
        assert!(
            n_lists_after < n_lists_before,
            "{n_lists_after} of {n_lists_before} list entries left"
        );
    }
}

/// The private state of the fixture's operations reads the same in both stores (and exists
/// when `expect_some`).
fn check_private(old: &EmbeddedStore, fresh: &EmbeddedStore, expect_some: bool) {
    let alice = "did:plc:alice";
    let post = "at://did:plc:bob/app.bsky.feed.post/3kaaaaaaaaaa2";
    let both = |read: &dyn Fn(&EmbeddedStore) -> String| {
        let res = read(fresh);
        assert_eq!(read(old), res);
        res
    };
    let reads: [&dyn Fn(&EmbeddedStore) -> String; 7] = [
        &|s| format!("{:?}", s.draft_count(alice).unwrap()),
        &|s| format!("{:?}", s.mute(alice, "did:plc:bob").unwrap()),
        &|s| format!("{:?}", s.thread_muted(alice, post).unwrap()),
        &|s| format!("{:?}", s.notification_state(alice).unwrap()),
        &|s| format!("{:?}", s.bookmarks(alice, None, 10).unwrap()),
        &|s| format!("{:?}", s.drafts(alice, None, 10).unwrap()),
        &|s| format!("{:?}", s.bsync_cursor(BsyncStream::Mutes).unwrap()),
    ];
    for read in reads {
        both(read);
    }
    assert_eq!(fresh.bookmark_count(post).unwrap(), u64::from(expect_some));
    assert_eq!(old.bookmark_count(post).unwrap(), u64::from(expect_some));
}

// Notifications are an index added without a new format: a format-1 directory has none for
// the records it already holds, and opens and works as before. Checks, on the fixture and on
// a fresh store given the same events, that a new like of an old post notifies its author
// alike, and that deleting an old reply and an old like (which made no notifications on the
// old side) keeps both stores' counts equal and leaves the new notification in place.
#[test]
fn a_format_1_directory_takes_notifications_for_new_records() {
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/format-1");
    let tmp = tempfile::tempdir().unwrap();
    copy_dir(&fixture, &tmp.path().join("old"));
    let old = EmbeddedStore::open(&tmp.path().join("old")).unwrap();
    let fresh = EmbeddedStore::open(&tmp.path().join("fresh")).unwrap();
    let lines = events(&PARAMS);
    let apply = |store: &EmbeddedStore, lines: &[String]| {
        let mut batch = store.batch();
        for line in lines {
            batch.apply(&jetstream::decode_str(line).unwrap()).unwrap();
        }
        batch.commit().unwrap();
        store.sync().unwrap();
    };
    apply(&fresh, &lines);
    let decoded: Vec<_> = lines
        .iter()
        .map(|l| jetstream::decode_str(l).unwrap())
        .collect();
    let find = |collection: &str, reply: bool| {
        decoded
            .iter()
            .find_map(|event| {
                let Body::Commit(commit) = &event.body else {
                    return None;
                };
                let record = commit.record.as_ref()?;
                let is_reply = record.json.contains("\"reply\"");
                let live = fresh
                    .record(&event.did, &commit.collection, &commit.rkey)
                    .unwrap();
                (commit.collection == collection && is_reply == reply && live.is_some())
                    .then(|| (event.did.to_string(), commit.rkey.to_string()))
            })
            .unwrap()
    };
    let (author, post) = find("app.bsky.feed.post", false);
    let (reply_author, reply) = find("app.bsky.feed.post", true);
    let (liker, like) = find("app.bsky.feed.like", false);
    let fan = "did:plc:fanfanfanfanfanfanfanfanf";
    let time_us = 1_900_000_000_000_000u64;
    let rev = starling_core::sample::tid(time_us, 0);
    let new_like = format!(
        r#"{{"did":"{fan}","time_us":{time_us},"kind":"commit","commit":{{"rev":"{rev}","operation":"create","collection":"app.bsky.feed.like","rkey":"{rev}","record":{{"subject":{{"uri":"at://{author}/app.bsky.feed.post/{post}","cid":"bafyreiaaaa"}},"createdAt":"2030-01-01T00:00:00Z"}},"cid":"bafyreiaaaa"}}}}"#
    );
    let delete = |did: &str, collection: &str, rkey: &str| {
        format!(
            r#"{{"did":"{did}","time_us":{time_us},"kind":"commit","commit":{{"rev":"{rev}","operation":"delete","collection":"{collection}","rkey":"{rkey}"}}}}"#
        )
    };
    let more = [
        new_like,
        delete(&reply_author, "app.bsky.feed.post", &reply),
        delete(&liker, "app.bsky.feed.like", &like),
    ];
    apply(&old, &more);
    apply(&fresh, &more);
    assert_eq!(old.stats().unwrap(), fresh.stats().unwrap());
    let newest = |store: &EmbeddedStore| {
        let recipient = store.actor_id(&author).unwrap();
        let mut res = Vec::new();
        store
            .notifications(recipient, None, usize::MAX, &mut |n| {
                res.push((n.uri, n.reason));
                false
            })
            .unwrap();
        res
    };
    let want = vec![(
        format!("at://{fan}/app.bsky.feed.like/{rev}"),
        starling_store::NotificationReason::Like,
    )];
    assert_eq!(newest(&old), want);
    assert_eq!(newest(&fresh), want);
}
