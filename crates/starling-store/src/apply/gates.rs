//! Thread gates and post gates at ingest, for notifications: a reply that breaks its thread
//! root's gate notifies no ancestor, and a quote of a post whose gate disables embedding does
//! not notify the quoted author, as the reference decides when it indexes the post
//! (`violatesThreadGate`, `validatePostEmbed`). The rules are the reference's: the root's
//! author may always reply, a gate without `allow` allows everyone and an empty one nobody,
//! else a mention in the root post, a follow of the root's author (`followerRule`), a follow
//! by it (`followingRule`) or an item in one of the listed lists (`listRule`) allows the
//! reply. A gate is the record of the post's author with the post's record key whose `post`
//! names the post.

use serde_json::Value;
use starling_core::ActorId;
use starling_core::jetstream::nsid;
use starling_core::syntax::RecordUri;

use super::{IndexedRecord, Rules, StoredState};
use crate::StoreError;
use crate::keys::{self, tag};
use crate::locks::read;
use crate::notify;
use crate::value::{self, StoredValue};

/// The list rules of one thread gate checked, at most.
const GATE_LISTS_MAX: usize = 100;

impl Rules<'_> {
    /// The stored live record `uri` names, parsed, if its actor and collection are known.
    fn stored_json(
        &mut self,
        state: &mut impl StoredState,
        uri: &RecordUri<'_>,
    ) -> Result<Option<Value>, StoreError> {
        let Some(&collection) = read(self.catalog.collections).by_name.get(uri.collection) else {
            return Ok(None);
        };
        let actor = self.intern_actor(uri.did);
        let key = keys::record_key(actor, collection, uri.rkey);
        let Some(bytes) = self.read_record(state, &key)? else {
            return Ok(None);
        };
        let StoredValue::Live(live) = value::decode(&bytes)? else {
            return Ok(None);
        };
        Ok(serde_json::from_str(live.json).ok())
    }

    /// The gate (`collection`) of the post `post`, if one is stored.
    fn gate(
        &mut self,
        state: &mut impl StoredState,
        collection: &'static str,
        post: &RecordUri<'_>,
    ) -> Result<Option<Value>, StoreError> {
        let uri = RecordUri {
            did: post.did,
            collection,
            rkey: post.rkey,
        };
        let gate = self.stored_json(state, &uri)?;
        Ok(gate.filter(|gate| {
            at(gate, "post")
                .as_str()
                .and_then(RecordUri::parse)
                .is_some_and(|named| named == *post)
        }))
    }

    /// Whether `author`'s quote of `quoted` breaks the quoted post's gate.
    pub(super) fn violates_embedding_rules(
        &mut self,
        state: &mut impl StoredState,
        author: ActorId,
        quoted: &RecordUri<'_>,
    ) -> Result<bool, StoreError> {
        if self.intern_actor(quoted.did) == author {
            return Ok(false);
        }
        let Some(gate) = self.gate(state, nsid::POSTGATE, quoted)? else {
            return Ok(false);
        };
        Ok(at(&gate, "embeddingRules").as_array().is_some_and(|rules| {
            rules
                .iter()
                .any(|rule| at(rule, "$type") == "app.bsky.feed.postgate#disableRule")
        }))
    }

    /// Whether `replier`'s reply in the thread of `root` breaks the root's thread gate.
    pub(super) fn violates_thread_gate(
        &mut self,
        state: &mut impl StoredState,
        replier: ActorId,
        root: &RecordUri<'_>,
    ) -> Result<bool, StoreError> {
        let owner = self.intern_actor(root.did);
        if owner == replier {
            return Ok(false);
        }
        let Some(gate) = self.gate(state, nsid::THREADGATE, root)? else {
            return Ok(false);
        };
        let Some(rules) = at(&gate, "allow").as_array() else {
            return Ok(false);
        };
        let has_rule = |kind: &str| rules.iter().any(|rule| at(rule, "$type") == kind);
        if has_rule("app.bsky.feed.threadgate#mentionRule") {
            let replier_did: Option<String> =
                read(self.catalog.actors).did(replier).map(String::from);
            let root_post = self.stored_json(state, root)?;
            if let (Some(did), Some(post)) = (replier_did, root_post)
                && mentions(&post, &did)
            {
                return Ok(false);
            }
        }
        if has_rule("app.bsky.feed.threadgate#followingRule")
            && self.follows(state, owner, replier)?
        {
            return Ok(false);
        }
        if has_rule("app.bsky.feed.threadgate#followerRule")
            && self.follows(state, replier, owner)?
        {
            return Ok(false);
        }
        let lists: Vec<String> = rules
            .iter()
            .filter(|rule| at(rule, "$type") == "app.bsky.feed.threadgate#listRule")
            .filter_map(|rule| at(rule, "list").as_str().map(str::to_owned))
            .take(GATE_LISTS_MAX)
            .collect();
        for list in &lists {
            if let Some(list) = RecordUri::parse(list)
                && self.in_list(state, &list, replier)?
            {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Whether `actor` follows `subject`: a live follow record, as of this batch.
    fn follows(
        &mut self,
        state: &mut impl StoredState,
        actor: ActorId,
        subject: ActorId,
    ) -> Result<bool, StoreError> {
        let pair = (tag::FOLLOW_PAIR, actor, subject);
        match self.pair_counts.get(&pair) {
            Some(&(_, now)) => Ok(now > 0),
            None => Ok(state.pair_count(pair)? > 0),
        }
    }

    /// Whether `subject` is an item of `list` (written by its owner), stored or added by this
    /// batch.
    fn in_list(
        &mut self,
        state: &mut impl StoredState,
        list: &RecordUri<'_>,
        subject: ActorId,
    ) -> Result<bool, StoreError> {
        let mut prefix = self.ref_key(tag::LISTITEM_BY_LIST, list);
        prefix.extend_from_slice(&subject.0.to_be_bytes());
        let in_batch = self
            .entries
            .iter()
            .rev()
            .find(|(key, _)| key.starts_with(&prefix));
        match in_batch {
            Some((_, insert)) => Ok(*insert),
            None => state.has_entry(&prefix),
        }
    }

    /// Records that a reply notified no ancestor, so that its delete removes none.
    pub(super) fn forget_ancestors(&mut self, record: &IndexedRecord<'_>) {
        let post_collection = self.intern_collection(nsid::POST);
        let reply_key = keys::record_key(record.actor, post_collection, record.rkey);
        for height in 1..=notify::REPLY_ANCESTORS_MAX {
            self.kept_recipients
                .insert(notify::ancestor_key(&reply_key, height), 0);
        }
    }
}

/// A JSON object's field, or null.
fn at<'v>(value: &'v Value, name: &str) -> &'v Value {
    value.get(name).unwrap_or(&Value::Null)
}

/// Whether a post's mention facets name `did`.
fn mentions(post: &Value, did: &str) -> bool {
    at(post, "facets").as_array().is_some_and(|facets| {
        facets.iter().any(|facet| {
            at(facet, "features").as_array().is_some_and(|features| {
                features.iter().any(|feature| {
                    at(feature, "$type") == "app.bsky.richtext.facet#mention"
                        && at(feature, "did") == did
                })
            })
        })
    })
}
