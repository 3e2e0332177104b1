//! The subscribers a post notifies: read from the author's activity subscribers (private state)
//! when the post is indexed, and kept beside it so that unindexing it removes exactly those
//! notifications, whatever the subscriptions have become since.

use starling_core::ActorId;
use starling_core::jetstream::nsid;

use super::{IndexedRecord, Rules, StoredState};
use crate::StoreError;
use crate::keys;
use crate::locks::read;
use crate::notify::{self, SUBSCRIBERS_MAX};
use crate::private::{PrivateQueries, StoreReads};

/// The index of the kept value that holds how many subscribers a post notified.
const COUNT_INDEX: u16 = u16::MAX;

impl Rules<'_> {
    /// The subscribers of a new post's author who asked for posts, or for replies when
    /// `is_reply`; recorded beside the post.
    pub(super) fn find_subscribers(
        &mut self,
        state: &mut impl StoredState,
        record: &IndexedRecord<'_>,
        is_reply: bool,
    ) -> Result<Vec<ActorId>, StoreError> {
        let author = read(self.catalog().actors)
            .did(record.actor)
            .map(String::from)
            .ok_or_else(|| {
                StoreError::corrupt("a post by an unknown actor", record.rkey.as_bytes())
            })?;
        let limit = usize::from(SUBSCRIBERS_MAX);
        let subscribers =
            PrivateQueries(&mut StoreReads(state.private())).subscribers(&author, limit)?;
        assert!(subscribers.len() <= usize::from(SUBSCRIBERS_MAX));
        let res: Vec<ActorId> = subscribers
            .iter()
            .filter(|s| if is_reply { s.reply } else { s.post })
            .map(|s| self.intern_actor(&s.did))
            .collect();
        let post_key = self.post_key(record);
        for (index, subscriber) in (0..).zip(&res) {
            self.kept_recipients.insert(
                notify::subscriber_key(&post_key, index),
                u64::from(subscriber.0) + 1,
            );
        }
        // None kept reads as zero: the post's earlier version, if any, was unindexed first,
        // which removed what it kept, so a zero written here would only add a tombstone.
        if !res.is_empty() {
            self.kept_recipients.insert(
                notify::subscriber_key(&post_key, COUNT_INDEX),
                res.len() as u64,
            );
        }
        Ok(res)
    }

    /// The subscribers a post being unindexed notified when it was indexed, and forgets them.
    pub(super) fn notified_subscribers(
        &mut self,
        state: &mut impl StoredState,
        record: &IndexedRecord<'_>,
    ) -> Result<Vec<ActorId>, StoreError> {
        let post_key = self.post_key(record);
        let count_key = notify::subscriber_key(&post_key, COUNT_INDEX);
        let n = match self.take_kept(state, &[count_key])?[..] {
            [n] => u16::try_from(n).ok().filter(|&n| n <= SUBSCRIBERS_MAX),
            _ => None,
        };
        let n = n.ok_or_else(|| StoreError::corrupt("subscribers notified", &post_key))?;
        let keys: Vec<Vec<u8>> = (0..n)
            .map(|index| notify::subscriber_key(&post_key, index))
            .collect();
        self.take_kept(state, &keys)?
            .into_iter()
            .map(|value| match value.checked_sub(1).map(u32::try_from) {
                Some(Ok(id)) => Ok(ActorId(id)),
                _ => Err(StoreError::corrupt("subscriber notified", &post_key)),
            })
            .collect()
    }

    /// The kept values of `keys` (this batch's if it wrote them, else the stored ones; 0 when
    /// absent), in order; removes them.
    pub(super) fn take_kept(
        &mut self,
        state: &mut impl StoredState,
        keys: &[Vec<u8>],
    ) -> Result<Vec<u64>, StoreError> {
        let unknown: Vec<Vec<u8>> = keys
            .iter()
            .filter(|key| !self.kept_recipients.contains_key(*key))
            .cloned()
            .collect();
        let mut stored = state.counts(&unknown)?.into_iter();
        let mut res = Vec::with_capacity(keys.len());
        for key in keys {
            let value = match self.kept_recipients.get(key) {
                Some(&value) => value,
                None => stored.next().unwrap_or(0),
            };
            res.push(value);
            self.kept_recipients.insert(key.clone(), 0);
        }
        Ok(res)
    }

    /// The record key of the post `record`.
    pub(super) fn post_key(&mut self, record: &IndexedRecord<'_>) -> Vec<u8> {
        let post_collection = self.intern_collection(nsid::POST);
        keys::record_key(record.actor, post_collection, record.rkey)
    }
}
