//! The content-checked sets of notifications: GetNotifications and GetUnreadNotificationCount,
//! each request with the answer the reference's `notification` table gives for the file.
//!
//! The rows are made as the reference's indexing plugins make them (`like`, `repost`,
//! `follow`, `post` of `data-plane/server/indexing/plugins/`, through `processor.ts`'s
//! `handleNotifs`), at the time each record is indexed, from what is indexed then:
//! - a like (repost) notifies the author of its subject (`like`, `repost`, reason subject the
//!   subject's URI) and, when it names the repost it came `via`, that repost's author
//!   (`like-via-repost`, `repost-via-repost`, reason subject the repost), unless the liker is
//!   that author; nothing at all when the liker is the subject's author;
//! - a follow notifies its subject (`follow`, no reason subject), with no self check;
//! - a post notifies, each account at most once and never its own author, in this order: the
//!   DIDs its mention facets name (`mention`, no reason subject), the author of the post it
//!   quotes (`quote`, the quoted URI), and the authors of its ancestors found in the `post`
//!   table when it is indexed, walking up `replyParent` from the parent (height 1) while the
//!   height is below `REPLY_NOTIF_DEPTH` = 5 (`reply`, the ancestor's URI: the nearest one of an
//!   author who wrote several, as the recursive query yields them level by level; it has no
//!   `order by`, and the smoke runs agree);
//! - every row takes the `sortAt` of the record that made it (`least(createdAt, indexedAt)`);
//! - deleting a record deletes the rows it made (`toDelete: [uri]`); an update of a like,
//!   repost or follow keeps them, and an update of a post makes them again.
//!
//! What the routes read (`data-plane/server/routes/notifs.ts`):
//! - GetNotifications: the recipient's rows whose reason subject is null or a record still in
//!   the `record` table, with `priority` only those whose author the recipient follows, newest
//!   `sortAt` first (the only key: rows of one millisecond come in any order), one page of
//!   `limit`; each with `priority` set when the recipient follows its author. Checked like the
//!   likes pages: `expect.page` holds `[record URI, "REASON SUBJECT PRIORITY MS", sortAtMs]`,
//!   the reason subject `-` when there is none.
//! - GetUnreadNotificationCount: the recipient's rows newer than the seen time, joined to the
//!   recipient's `actor` row and to the `record` row of the record that made them (not to the
//!   reason subject: a like of a deleted post counts as unread, though no page shows it). The
//!   comparison never sets a seen time (no UpdateNotificationSeen, no bsync), so every row
//!   counts. Expected exactly (`expect.count`).
//!
//! What the generated files hold bounds what is modelled: likes, reposts, follows, replies
//! (chains of any depth) and quotes, and deletes of likes, reposts, follows and posts (never
//! of a post with replies, nor of a reply's ancestors). They hold no mentions, no `via`, no
//! self-follows, no duplicate like, repost or follow of one pair, no updates of those records,
//! no thread mutes, threadgates or postgates, and no reply before its parent. Mentions, `via`
//! and self-follows are modelled anyway (they cost a line each). Not modelled: duplicates
//! (the reference keeps the first record's rows when a duplicate is promoted), thread mutes
//! and gates (they hold rows back), and a reply indexed before its parent (the reference then
//! notifies the parent's thread when the parent comes: `replies_before_parent` counts them, 0
//! in generated files).
//!
//! Starling bounds its unread count at 10,000 (a count at the bound means "at least this
//! many") and scans at most 10,000 entries for a filtered page, on purpose; the reference
//! counts everything. Recipients with more rows than that are not drawn
//! (`notification_recipients_over_bound` counts them).

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::error::Error;
use std::path::Path;

use rand::Rng;
use rand::seq::IndexedRandom;
use serde_json::json;
use starling_core::jetstream::{Record, Refs, nsid};
use starling_core::syntax::RecordUri;

use super::{Content, ContentSet, Row, sort_at_ms, uri_string};
use crate::requests::Request;

/// The reference's `REPLY_NOTIF_DEPTH`: ancestors below this height (the reply itself is
/// height 0) are notified.
const REPLY_NOTIF_DEPTH: u32 = 5;

/// The most rows a drawn recipient has: Starling's unread bound (`UNREAD_COUNT_MAX`) and
/// filtered-page scan (`NOTIFICATION_SCAN_MAX`), both 10,000.
const RECIPIENT_ROWS_MAX: usize = 10_000;

/// One request in this many asks for priority notifications only.
const PRIORITY_EVERY: usize = 4;

/// A row of the reference's `notification` table, kept under the URI of the record that made
/// it.
pub(super) struct Notification {
    pub(super) recipient: String,
    author: String,
    pub(super) reason: &'static str,
    pub(super) reason_subject: Option<String>,
    sort_at_ms: i64,
}

/// The reference's `notification` rows by the record that made them.
#[derive(Default)]
pub(super) struct Notifications {
    pub(super) by_record: HashMap<String, Vec<Notification>>,
    /// Replies indexed when their parent was not (see the module doc).
    replies_before_parent: u64,
}

impl Notifications {
    /// Deletes the rows a record made, as the reference does when the record is deleted.
    pub(super) fn remove(&mut self, uri: &str) {
        self.by_record.remove(uri);
    }
}

/// Who a record notifies, before the author and time are added: (recipient, reason, reason
/// subject).
type Notified = (String, &'static str, Option<String>);

/// A like's or repost's notifications (`like.ts`, `repost.ts`: `notifsForInsert`).
fn interaction_notified(
    collection: &str,
    creator: &str,
    subject: &RecordUri<'_>,
    via: Option<&RecordUri<'_>>,
) -> Vec<Notified> {
    let (reason, via_reason) = if collection == nsid::LIKE {
        ("like", "like-via-repost")
    } else {
        ("repost", "repost-via-repost")
    };
    if subject.did == creator {
        return Vec::new();
    }
    let mut res = vec![(subject.did.to_owned(), reason, Some(uri_string(subject)))];
    if let Some(via) = via.filter(|via| via.did != creator) {
        res.push((via.did.to_owned(), via_reason, Some(uri_string(via))));
    }
    res
}

impl Content {
    /// Makes the rows a created or updated record makes, as the reference's plugins do, from
    /// what is indexed now (the record itself not yet stored).
    pub(super) fn put_notifications(
        &mut self,
        creator: &str,
        uri: &str,
        collection: &str,
        record: &Record<'_>,
        time_us: u64,
    ) {
        let notified = match (collection, &record.refs) {
            // An update of a like, repost or follow keeps the rows of its first version
            // (`notifsForDelete` with a replacement deletes and makes none).
            (nsid::LIKE, _) if self.likes.contains_key(uri) => return,
            (nsid::REPOST, _) if self.reposts.contains_key(uri) => return,
            (nsid::FOLLOW, _) if self.follows.contains_key(uri) => return,
            (nsid::LIKE | nsid::REPOST, Refs::Subject { subject, via }) => {
                interaction_notified(collection, creator, subject, via.as_ref())
            }
            (nsid::FOLLOW, Refs::Actor { subject }) => {
                vec![(subject.to_string(), "follow", None)]
            }
            (
                nsid::POST,
                Refs::Post {
                    reply,
                    quote,
                    mentions,
                    ..
                },
            ) => {
                let parent = reply.as_ref().map(|reply| uri_string(&reply.parent));
                self.post_notified(creator, mentions, quote.as_ref(), parent)
            }
            _ => return,
        };
        let sort_at_ms = sort_at_ms(record.created_at_us, time_us);
        let rows: Vec<Notification> = (notified.into_iter())
            .filter(|(recipient, ..)| self.tracked(recipient))
            .map(|(recipient, reason, reason_subject)| Notification {
                recipient,
                author: creator.to_owned(),
                reason,
                reason_subject,
                sort_at_ms,
            })
            .collect();
        // An updated post's rows are made again (`notifsForDelete` with a replacement).
        if rows.is_empty() {
            self.notifications.by_record.remove(uri);
        } else {
            self.notifications.by_record.insert(uri.to_owned(), rows);
        }
    }

    /// A post's notifications (`post.ts`: `notifsForInsert`), each account once, never the
    /// author: mentions, the quoted author, then the ancestors in the `post` table.
    fn post_notified(
        &mut self,
        creator: &str,
        mentions: &[Cow<'_, str>],
        quote: Option<&RecordUri<'_>>,
        parent: Option<String>,
    ) -> Vec<Notified> {
        let mut notified: HashSet<String> = HashSet::from([creator.to_owned()]);
        let mut res = Vec::new();
        let mut notify = |recipient: &str, reason, subject| {
            if notified.insert(recipient.to_owned()) {
                res.push((recipient.to_owned(), reason, subject));
            }
        };
        for mention in mentions {
            notify(mention, "mention", None);
        }
        if let Some(quote) = quote.filter(|quote| quote.collection == nsid::POST) {
            notify(quote.did, "quote", Some(uri_string(quote)));
        }
        if parent
            .as_ref()
            .is_some_and(|parent| !self.posts.contains_key(parent))
        {
            self.notifications.replies_before_parent += 1;
        }
        let mut ancestor = parent;
        for _height in 1..REPLY_NOTIF_DEPTH {
            let Some(post) = ancestor.as_ref().and_then(|uri| self.posts.get(uri)) else {
                break;
            };
            notify(&post.creator, "reply", ancestor.clone());
            ancestor = post.reply_parent.clone();
        }
        res
    }

    /// Whether the reference's `record` table holds `uri`: of the records the rows name
    /// (posts, likes, reposts, follows), the live ones.
    fn record_live(&self, uri: &str) -> bool {
        self.posts.contains_key(uri)
            || self.likes.contains_key(uri)
            || self.reposts.contains_key(uri)
            || self.follows.contains_key(uri)
    }

    /// Writes the notifications and unread-count sets, `n_requests` each, into `out`; returns
    /// a `key: value` line per fact about the draw.
    pub fn write_notification_sets<R: Rng>(
        &self,
        out: &Path,
        rng: &mut R,
        n_requests: usize,
        limit: u32,
    ) -> Result<Vec<String>, Box<dyn Error>> {
        let mut by_recipient: HashMap<&str, Vec<(&str, &Notification)>> = HashMap::new();
        for (record_uri, rows) in &self.notifications.by_record {
            for row in rows {
                let rows = by_recipient.entry(row.recipient.as_str()).or_default();
                rows.push((record_uri.as_str(), row));
            }
        }
        let follows = self.follow_pairs();
        let pages = Pages {
            content: self,
            follows: &follows,
        };
        // Recipients with a page to show and no more rows than Starling's bounds.
        let mut recipients: Vec<&str> = (by_recipient.iter())
            .filter(|(_, rows)| rows.len() <= RECIPIENT_ROWS_MAX)
            .filter(|(recipient, rows)| !pages.rows(recipient, rows, false).is_empty())
            .map(|(&recipient, _)| recipient)
            .collect();
        recipients.sort_unstable();
        let n_over = (by_recipient.values())
            .filter(|rows| rows.len() > RECIPIENT_ROWS_MAX)
            .count();
        let mut pages_set = ContentSet::messages();
        let mut unread_set = ContentSet::scalars();
        for idx in 0..n_requests {
            let recipient = *recipients.choose(rng).ok_or("nobody has notifications")?;
            let rows = by_recipient.get(recipient).map(Vec::as_slice);
            let rows = rows.unwrap_or_default();
            let priority = idx % PRIORITY_EVERY == PRIORITY_EVERY - 1;
            let page = pages.rows(recipient, rows, priority);
            let page: Vec<&Row> = page.iter().collect();
            let request = if priority {
                json!({ "actorDid": recipient, "limit": limit, "priority": true })
            } else {
                json!({ "actorDid": recipient, "limit": limit })
            };
            let message = Request::notifications(recipient, limit, priority);
            pages_set.push_page(message, "getNotifications", request, &page, limit);
            let recipient = *recipients.choose(rng).ok_or("nobody has notifications")?;
            let rows = by_recipient.get(recipient).map(Vec::as_slice);
            let expect = json!({ "count": self.unread(recipient, rows.unwrap_or_default()) });
            let request = json!({ "actorDid": recipient });
            let message = Request::actor(recipient);
            unread_set.push(message, "getUnreadNotificationCount", request, expect, 1);
        }
        pages_set.write(out, "notifications")?;
        unread_set.write(out, "unread-count")?;
        Ok(self.notification_facts(&by_recipient, recipients.len(), n_over))
    }

    /// The unread count of `recipient` never having seen any: its rows whose record is live,
    /// when it has an `actor` row.
    fn unread(&self, recipient: &str, rows: &[(&str, &Notification)]) -> usize {
        if !self.actors.contains(recipient) {
            return 0;
        }
        (rows.iter())
            .filter(|(record_uri, _)| self.record_live(record_uri))
            .count()
    }

    fn notification_facts(
        &self,
        by_recipient: &HashMap<&str, Vec<(&str, &Notification)>>,
        n_drawn_from: usize,
        n_over: usize,
    ) -> Vec<String> {
        let mut by_reason: HashMap<&str, usize> = HashMap::new();
        for (_, row) in by_recipient.values().flatten() {
            *by_reason.entry(row.reason).or_default() += 1;
        }
        let mut reasons: Vec<String> = (by_reason.iter())
            .map(|(reason, n)| format!("{reason} {n}"))
            .collect();
        reasons.sort_unstable();
        vec![
            format!("notifications: {}", reasons.join(", ")),
            format!(
                "notification_recipients: {}, drawn from: {n_drawn_from}, \
                 notification_recipients_over_bound: {n_over}, replies_before_parent: {}",
                by_recipient.len(),
                self.notifications.replies_before_parent
            ),
        ]
    }
}

/// What GetNotifications reads: the rows, the records still indexed, the follows.
struct Pages<'a> {
    content: &'a Content,
    /// Live (follower, followed) pairs.
    follows: &'a HashSet<(&'a str, &'a str)>,
}

impl Pages<'_> {
    /// The rows a page of `recipient` shows (with `priority`, only those of followed
    /// authors), each as a page row: the record URI, and its reason, reason subject, priority
    /// and timestamp in ms as one string.
    fn rows(&self, recipient: &str, rows: &[(&str, &Notification)], priority: bool) -> Vec<Row> {
        let mut res = Vec::new();
        for &(record_uri, row) in rows {
            let subject_live = (row.reason_subject.as_deref())
                .is_none_or(|subject| self.content.record_live(subject));
            let followed = self.follows.contains(&(recipient, row.author.as_str()));
            if !subject_live || (priority && !followed) {
                continue;
            }
            let subject = row.reason_subject.as_deref().unwrap_or("-");
            res.push(Row {
                uri: record_uri.to_owned(),
                subject: format!("{} {subject} {followed} {}", row.reason, row.sort_at_ms),
                sort_at_ms: row.sort_at_ms,
                // The reference orders by `sortAt` alone.
                cid: String::new(),
            });
        }
        res
    }
}

#[cfg(test)]
mod tests {
    use starling_core::jetstream;

    use super::*;

    const ALICE: &str = "did:plc:aaaaaaaaaaaaaaaaaaaaaaaa";
    const BOB: &str = "did:plc:bbbbbbbbbbbbbbbbbbbbbbbb";
    const CAROL: &str = "did:plc:cccccccccccccccccccccccc";
    const CID: &str = "bafyreie5737gdxlw5i64vzichcalba3z2v5n6icifvx5xytvske7mr3hpm";
    const T0: u64 = 1_735_689_600_000_000;

    fn apply(
        content: &mut Content,
        did: &str,
        time_us: u64,
        rkey_collection: (&str, &str),
        record: &str,
    ) {
        let (collection, rkey) = rkey_collection;
        let (operation, tail) = if record.is_empty() {
            ("delete", String::new())
        } else {
            ("create", format!(r#","record":{record},"cid":"{CID}""#))
        };
        let line = format!(
            r#"{{"did":"{did}","time_us":{time_us},"kind":"commit","commit":{{"rev":"3l3qo2vutsw2b","operation":"{operation}","collection":"{collection}","rkey":"{rkey}"{tail}}}}}"#
        );
        content.apply(&jetstream::decode_str(&line).unwrap());
    }

    fn post_uri(did: &str, rkey: &str) -> String {
        format!("at://{did}/app.bsky.feed.post/{rkey}")
    }

    fn strong_ref(uri: &str) -> String {
        format!(r#"{{"uri":"{uri}","cid":"{CID}"}}"#)
    }

    fn post(reply: Option<(&str, &str)>, quote: Option<&str>) -> String {
        let mut res = String::from(
            r#"{"$type":"app.bsky.feed.post","text":"t","createdAt":"2025-01-01T00:00:00.000Z""#,
        );
        if let Some((parent, root)) = reply {
            let (parent, root) = (strong_ref(parent), strong_ref(root));
            res.push_str(&format!(r#","reply":{{"parent":{parent},"root":{root}}}"#));
        }
        if let Some(quoted) = quote {
            let quoted = strong_ref(quoted);
            res.push_str(&format!(
                r#","embed":{{"$type":"app.bsky.embed.record","record":{quoted}}}"#
            ));
        }
        res.push('}');
        res
    }

    const POST: &str = "app.bsky.feed.post";

    /// The rows `recipient` has, with the URIs of the records that made them.
    fn rows_of<'a>(content: &'a Content, recipient: &str) -> Vec<(&'a str, &'a Notification)> {
        (content.notifications.by_record.iter())
            .flat_map(|(uri, rows)| rows.iter().map(move |row| (uri.as_str(), row)))
            .filter(|(_, row)| row.recipient == recipient)
            .collect()
    }

    fn reasons(content: &Content, recipient: &str) -> Vec<(String, &'static str, Option<String>)> {
        let mut res: Vec<_> = (rows_of(content, recipient).into_iter())
            .map(|(uri, row)| (uri.to_owned(), row.reason, row.reason_subject.clone()))
            .collect();
        res.sort();
        res
    }

    /// A store holding one post by Alice, and the post's URI.
    fn alice_post() -> (Content, String) {
        let mut content = Content::default();
        let record = post(None, None);
        apply(&mut content, ALICE, T0, (POST, "3l3qo2vuowo2a"), &record);
        (content, post_uri(ALICE, "3l3qo2vuowo2a"))
    }

    // Checks the post rules on a thread worked out by hand: Bob replies to Alice's post, Alice
    // replies to Bob's reply, and Carol replies to Alice's reply and quotes Alice's post. Carol
    // notifies Alice once (a quote comes before replies, so not for the reply) and Bob for his
    // reply (height 2); Alice's reply notifies Bob only (never its own author); deleting
    // Carol's reply takes its rows away.
    #[test]
    fn replies_notify_each_ancestor_author_once_and_go_with_the_reply() {
        let (mut content, root) = alice_post();
        let bob_reply = post_uri(BOB, "3l3qo2vuowo2b");
        let record = post(Some((&root, &root)), None);
        apply(&mut content, BOB, T0 + 1, (POST, "3l3qo2vuowo2b"), &record);
        let alice_reply = post_uri(ALICE, "3l3qo2vuowo2c");
        let record = post(Some((&bob_reply, &root)), None);
        apply(
            &mut content,
            ALICE,
            T0 + 2,
            (POST, "3l3qo2vuowo2c"),
            &record,
        );
        let carol_reply = post_uri(CAROL, "3l3qo2vuowo2d");
        let record = post(Some((&alice_reply, &root)), Some(&root));
        apply(
            &mut content,
            CAROL,
            T0 + 3,
            (POST, "3l3qo2vuowo2d"),
            &record,
        );
        assert_eq!(
            reasons(&content, ALICE),
            vec![
                (bob_reply.clone(), "reply", Some(root.clone())),
                (carol_reply.clone(), "quote", Some(root.clone())),
            ]
        );
        assert_eq!(
            reasons(&content, BOB),
            vec![
                (alice_reply.clone(), "reply", Some(bob_reply.clone())),
                (carol_reply.clone(), "reply", Some(bob_reply.clone())),
            ]
        );
        apply(&mut content, CAROL, T0 + 4, (POST, "3l3qo2vuowo2d"), "");
        assert_eq!(reasons(&content, BOB).len(), 1);
        assert_eq!(reasons(&content, ALICE).len(), 1);
        assert_eq!(content.notifications.replies_before_parent, 0);
    }

    // Checks the reads on likes worked out by hand: Bob and Carol like Alice's post, Alice
    // likes her own (nothing), Alice follows Bob (a follow row for Bob, and Bob's like is
    // priority for Alice). Deleting the post hides the likes from Alice's page but not from
    // her unread count, which joins the like records, not the post.
    #[test]
    fn a_deleted_subject_hides_the_row_but_it_still_counts_as_unread() {
        let (mut content, root) = alice_post();
        let like = format!(
            r#"{{"$type":"app.bsky.feed.like","subject":{},"createdAt":"2025-01-01T00:00:00.000Z"}}"#,
            strong_ref(&root)
        );
        for (idx, did) in [BOB, CAROL, ALICE].into_iter().enumerate() {
            let time_us = T0 + 1 + idx as u64;
            apply(
                &mut content,
                did,
                time_us,
                ("app.bsky.feed.like", "3l3qo2vuowo3a"),
                &like,
            );
        }
        let follow = format!(
            r#"{{"$type":"app.bsky.graph.follow","subject":"{BOB}","createdAt":"2025-01-01T00:00:00.000Z"}}"#
        );
        apply(
            &mut content,
            ALICE,
            T0 + 5,
            ("app.bsky.graph.follow", "3l3qo2vuowo4a"),
            &follow,
        );
        let follows: HashSet<(&str, &str)> = HashSet::from([(ALICE, BOB)]);
        {
            let pages = Pages {
                content: &content,
                follows: &follows,
            };
            let alice = rows_of(&content, ALICE);
            assert_eq!(pages.rows(ALICE, &alice, false).len(), 2);
            let priority = pages.rows(ALICE, &alice, true);
            assert_eq!(priority.len(), 1);
            let want = format!("like {root} true ");
            assert!(
                priority[0].subject.starts_with(&want),
                "{}",
                priority[0].subject
            );
            assert_eq!(content.unread(ALICE, &alice), 2);
            let bob = pages.rows(BOB, &rows_of(&content, BOB), false);
            assert!(
                bob[0].subject.starts_with("follow - false "),
                "{}",
                bob[0].subject
            );
        }
        apply(&mut content, ALICE, T0 + 6, (POST, "3l3qo2vuowo2a"), "");
        let pages = Pages {
            content: &content,
            follows: &follows,
        };
        let alice = rows_of(&content, ALICE);
        assert!(pages.rows(ALICE, &alice, false).is_empty());
        assert_eq!(content.unread(ALICE, &alice), 2);
    }
}
