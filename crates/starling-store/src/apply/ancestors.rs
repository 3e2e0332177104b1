//! The ancestors a reply notifies: found by walking the stored thread when the reply is
//! indexed, and kept beside it so that unindexing it removes exactly those notifications.

use starling_core::ActorId;
use starling_core::jetstream::{self, Refs, nsid};
use starling_core::syntax::RecordUri;

use super::{IndexedRecord, Rules, StoredState};
use crate::StoreError;
use crate::keys;
use crate::notify;
use crate::value::{self, StoredValue};

impl Rules<'_> {
    /// The authors of a new reply's stored ancestors, parent first, at most
    /// [`notify::REPLY_ANCESTORS_MAX`]; the walk stops at the first that is not stored. They are
    /// recorded beside the reply, so that its delete removes exactly what it notified.
    pub(super) fn find_ancestors(
        &mut self,
        state: &mut impl StoredState,
        record: &IndexedRecord<'_>,
        parent: &RecordUri<'_>,
    ) -> Result<Vec<ActorId>, StoreError> {
        let post_collection = self.intern_collection(nsid::POST);
        let reply_key = self.post_key(record);
        let mut res = Vec::new();
        let mut next = Some(format!(
            "at://{}/{}/{}",
            parent.did, parent.collection, parent.rkey
        ));
        while let Some(uri) = next.take()
            && res.len() < usize::from(notify::REPLY_ANCESTORS_MAX)
        {
            let Some(ancestor) = RecordUri::parse(&uri).filter(|u| u.collection == nsid::POST)
            else {
                break;
            };
            let actor = self.intern_actor(ancestor.did);
            let key = keys::record_key(actor, post_collection, ancestor.rkey);
            // A post that names itself among its ancestors ends the walk.
            if key == reply_key {
                break;
            }
            let Some(bytes) = self.read_record(state, &key)? else {
                break;
            };
            let StoredValue::Live(live) = value::decode(&bytes)? else {
                break;
            };
            res.push(actor);
            if let Ok((
                _,
                Refs::Post {
                    reply: Some(up), ..
                },
            )) = jetstream::record_fields(nsid::POST, live.json)
            {
                next = Some(up.parent.to_uri());
            }
        }
        // Only the ancestors found: an absent height reads as none, and the reply's earlier
        // version, if any, was unindexed first, which removed what it kept.
        for (height, author) in (1..).zip(&res) {
            self.kept_recipients.insert(
                notify::ancestor_key(&reply_key, height),
                u64::from(author.0) + 1,
            );
        }
        Ok(res)
    }

    /// The ancestors a reply being unindexed notified when it was indexed, and forgets them.
    pub(super) fn notified_ancestors(
        &mut self,
        state: &mut impl StoredState,
        record: &IndexedRecord<'_>,
    ) -> Result<Vec<ActorId>, StoreError> {
        let reply_key = self.post_key(record);
        let wanted: Vec<Vec<u8>> = (1..=notify::REPLY_ANCESTORS_MAX)
            .map(|height| notify::ancestor_key(&reply_key, height))
            .collect();
        let values = self.take_kept(state, &wanted)?;
        values
            .into_iter()
            .take_while(|&value| value != 0)
            .map(|value| {
                u32::try_from(value - 1)
                    .map(ActorId)
                    .map_err(|_| StoreError::corrupt("reply ancestor over u32::MAX", &reply_key))
            })
            .collect()
    }
}
