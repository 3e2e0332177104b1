//! Author feeds against the model: live posts and reposts of posts, but reposts whose post
//! was deleted or replaced after them.

use std::collections::BTreeMap;

use serde_json::Value;
use starling_core::feed::FeedItem;
use starling_store::{EmbeddedStore, Store};

use super::keyspace::FreshKeyspace;
use super::{Model, Op, random_case};

impl Model {
    /// A live record leaving the index: if it is a post, its live reposts leave the feeds.
    pub(super) fn unfeed_reposts_of(&mut self, key: &(String, String, String)) {
        if key.1 != "app.bsky.feed.post" {
            return;
        }
        let uri = format!("at://{}/{}/{}", key.0, key.1, key.2);
        for (repost, slot) in &self.records {
            let Some(json) = slot
                .json
                .as_deref()
                .filter(|_| repost.1 == "app.bsky.feed.repost")
            else {
                continue;
            };
            let record: Value = serde_json::from_str(json).unwrap();
            if record["subject"]["uri"] == uri.as_str() {
                self.unfed.insert(repost.clone());
            }
        }
    }

    /// Every author's feed: (sort_at, item URI, shown post URI) of live posts and reposts of
    /// posts (but those whose post was deleted or replaced after them), newest first by
    /// sort_at (ties in any order).
    pub(super) fn author_feeds(&self) -> BTreeMap<String, Vec<(i64, String, String)>> {
        let mut res: BTreeMap<String, Vec<(i64, String, String)>> = BTreeMap::new();
        for (key, slot) in &self.records {
            let Some(json) = &slot.json else { continue };
            if self.unfed.contains(key) {
                continue;
            }
            let (did, collection, rkey) = key;
            let uri = format!("at://{did}/{collection}/{rkey}");
            let post = match collection.as_str() {
                "app.bsky.feed.post" => uri.clone(),
                "app.bsky.feed.repost" => {
                    let record: Value = serde_json::from_str(json).unwrap();
                    let subject = record["subject"]["uri"].as_str().unwrap().to_owned();
                    if !subject.contains("/app.bsky.feed.post/") {
                        continue;
                    }
                    subject
                }
                _ => continue,
            };
            res.entry(did.clone())
                .or_default()
                .push((slot.sort_at, uri, post));
        }
        for items in res.values_mut() {
            items.sort_by(|a, b| b.cmp(a));
        }
        res
    }
}

/// Reads every author feed whole and in pages of two, comparing with the model.
pub(super) fn check_author_feeds<S: Store>(store: &S, model: &Model) {
    let expected = model.author_feeds();
    for did in &model.authors {
        let Some(actor) = store.actor_id(did) else {
            continue;
        };
        let uri_of = |item: &FeedItem| {
            let collection = if item.is_repost() { "repost" } else { "post" };
            let post = format!(
                "at://{}/app.bsky.feed.post/{}",
                store.did(item.post.actor).unwrap(),
                item.post_rkey()
            );
            let uri = format!("at://{did}/app.bsky.feed.{collection}/{}", item.rkey());
            (item.key.sort_at_us, uri, post)
        };
        let mut whole = Vec::new();
        store
            .author_feed(actor, None, &mut |item| {
                whole.push(item);
                true
            })
            .unwrap();
        assert!(
            whole.windows(2).all(|w| w[0].key > w[1].key),
            "{did}: order"
        );
        let mut paged = Vec::new();
        loop {
            let mut page = Vec::new();
            store
                .author_feed(actor, paged.last().map(|i: &FeedItem| i.key), &mut |item| {
                    page.push(item);
                    page.len() < 2
                })
                .unwrap();
            if page.is_empty() {
                break;
            }
            // A store that gave an item twice would never end the walk: fail instead.
            assert!(
                paged.len() + page.len() <= whole.len(),
                "{did}: pages of two hold more items than the whole feed"
            );
            paged.extend(page);
        }
        assert_eq!(paged, whole, "{did}: pages of two");
        let mut actual: Vec<_> = whole.iter().map(uri_of).collect();
        let mut want = expected.get(did).cloned().unwrap_or_default();
        // Same sort_at sequence; within equal sort_at, compare as sets.
        assert_eq!(
            actual.iter().map(|x| x.0).collect::<Vec<_>>(),
            want.iter().map(|x| x.0).collect::<Vec<_>>(),
            "{did}: sort_at of the feed"
        );
        actual.sort();
        want.sort();
        assert_eq!(actual, want, "{did}: feed items");
    }
}

/// A post reposted twice (once in the batch of its deletion), then deleted; a second post
/// reposted, then replaced by an update; a third reposted after its deletion.
fn unfed_reposts_ops() -> Vec<Op> {
    let commit = |did, collection, rkey, rev, delete, target| Op::Commit {
        did,
        collection,
        rkey,
        rev,
        delete,
        target,
        shape: 0,
    };
    vec![
        commit(0, 0, 0, 0, false, 0),
        commit(1, 4, 0, 0, false, 0),
        commit(1, 0, 1, 0, false, 0),
        commit(2, 4, 0, 0, false, 1),
        commit(2, 4, 1, 0, false, 0),
        commit(1, 0, 1, 1, false, 0),
        commit(0, 0, 0, 1, true, 0),
        commit(3, 4, 0, 0, false, 0),
    ]
}

// Reposts leave the feeds when their post is deleted or replaced after them, in batches of
// every size (so across the batch still being written, too).
#[test]
fn reposts_leave_feeds_with_their_post() {
    for size in 1..=8 {
        let tmp = tempfile::tempdir().unwrap();
        let store = EmbeddedStore::open(tmp.path()).unwrap();
        random_case(&store, &unfed_reposts_ops(), &[size]).unwrap();
    }
}

// The same on Cassandra.
#[test]
fn cassandra_reposts_leave_feeds_with_their_post() {
    for size in [1, 3, 8] {
        let Some(keyspace) = FreshKeyspace::new("unfed reposts") else {
            return;
        };
        random_case(&keyspace.open(), &unfed_reposts_ops(), &[size]).unwrap();
        keyspace.drop_keyspace();
    }
}
