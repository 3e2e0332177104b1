//! The rules of private-state operations; see the parent module.

use rustc_hash::FxHashMap;

use super::*;

/// What the rules read of stored private state.
pub(crate) trait PrivateReads {
    /// A row's value, if stored.
    fn get(&mut self, key: &PrivateKey) -> Result<Option<Vec<u8>>, StoreError>;

    /// Up to `limit` rows of a partition, clustering keys descending, below `below` if given.
    fn scan(
        &mut self,
        partition: &[u8],
        below: Option<&[u8]>,
        limit: usize,
    ) -> Result<PrivateRows, StoreError>;
}

/// Rows to write (`Some`) or remove (`None`), in one atomic step.
pub(crate) type PrivateWrites = Vec<(PrivateKey, Option<Vec<u8>>)>;

/// A batch of private operations' decisions: rows written so far, over the stored state.
pub(crate) struct PrivateRules<'r, R: PrivateReads> {
    reads: &'r mut R,
    now_us: i64,
    rows: FxHashMap<PrivateKey, Option<Vec<u8>>>,
    order: Vec<PrivateKey>,
}

impl<'r, R: PrivateReads> PrivateRules<'r, R> {
    /// Starts a batch: `now_us` is the processing time the rules record as creation times.
    pub(crate) fn new(reads: &'r mut R, now_us: i64) -> PrivateRules<'r, R> {
        PrivateRules {
            reads,
            now_us,
            rows: FxHashMap::default(),
            order: Vec::new(),
        }
    }

    /// The rows decided, and the cursor `cursor` reached by `stream`, if given.
    pub(crate) fn finish(mut self, cursor: Option<(BsyncStream, &str)>) -> PrivateWrites {
        if let Some((stream, cursor)) = cursor {
            self.put(stream.cursor_key(), cursor.as_bytes().to_vec());
        }
        let mut rows = self.rows;
        self.order
            .into_iter()
            .filter_map(|key| rows.remove_entry(&key))
            .collect()
    }

    fn get(&mut self, key: &PrivateKey) -> Result<Option<Vec<u8>>, StoreError> {
        match self.rows.get(key) {
            Some(value) => Ok(value.clone()),
            None => self.reads.get(key),
        }
    }

    fn set(&mut self, key: PrivateKey, value: Option<Vec<u8>>) {
        if self.rows.insert(key.clone(), value).is_none() {
            self.order.push(key);
        }
    }

    fn put(&mut self, key: PrivateKey, value: Vec<u8>) {
        self.set(key, Some(value));
    }

    fn remove(&mut self, key: PrivateKey) {
        self.set(key, None);
    }

    /// Applies one operation.
    pub(crate) fn apply(&mut self, op: &PrivateOp) -> Result<(), StoreError> {
        match op {
            PrivateOp::MuteActor {
                actor,
                subject,
                only_reposts,
                only_quoteposts,
            } => {
                let flags = u8::from(*only_reposts) | u8::from(*only_quoteposts) << 1;
                self.mute_actor(actor, subject, Some(flags))
            }
            PrivateOp::UnmuteActor { actor, subject } => self.mute_actor(actor, subject, None),
            PrivateOp::MuteList { actor, list } => self.mute_list(actor, list, true),
            PrivateOp::UnmuteList { actor, list } => self.mute_list(actor, list, false),
            PrivateOp::MuteThread { actor, root } => {
                self.put(
                    key(tag::THREAD_MUTE, actor, root.as_bytes().to_vec()),
                    Vec::new(),
                );
                Ok(())
            }
            PrivateOp::UnmuteThread { actor, root } => {
                self.remove(key(tag::THREAD_MUTE, actor, root.as_bytes().to_vec()));
                Ok(())
            }
            PrivateOp::ClearMutes { actor } => self.clear_mutes(actor),
            PrivateOp::NotificationSeen { actor, seen_us } => {
                self.notification_state(actor, Some(*seen_us), None)
            }
            PrivateOp::NotificationPriority { actor, priority } => {
                self.notification_state(actor, None, Some(*priority))
            }
            PrivateOp::PutPreferences { actor, json } => {
                self.put(
                    key(tag::PREFERENCES, actor, Vec::new()),
                    json.as_bytes().to_vec(),
                );
                Ok(())
            }
            PrivateOp::DeletePreferences { actor } => {
                self.remove(key(tag::PREFERENCES, actor, Vec::new()));
                Ok(())
            }
            PrivateOp::PutBookmark {
                actor,
                key: bookmark_key,
                subject_uri,
                subject_cid,
            } => self.put_bookmark(actor, bookmark_key, subject_uri, subject_cid),
            PrivateOp::DeleteBookmark { actor, key } => self.delete_bookmark(actor, key),
            PrivateOp::PutActivitySubscription {
                actor,
                key,
                subject,
                post,
                reply,
                update,
            } => self.put_activity(actor, key, subject, *post, *reply, *update),
            PrivateOp::DeleteActivitySubscription { actor, key } => {
                self.delete_activity(actor, key)
            }
            PrivateOp::PutDraft {
                actor,
                key,
                json,
                update,
            } => self.put_draft(actor, key, json, *update),
            PrivateOp::DeleteDraft { actor, key } => self.delete_draft(actor, key),
            moderation => {
                self.moderation(moderation);
                Ok(())
            }
        }
    }

    /// The operator's moderation state (`moderation.rs`): each operation sets or removes one
    /// row, whatever is stored, so replays end in the same rows.
    fn moderation(&mut self, op: &PrivateOp) {
        match op {
            PrivateOp::Takedown { subject, reference } => {
                self.put(subject.key(), moderation::takedown_value(reference));
            }
            PrivateOp::Untakedown { subject } => self.remove(subject.key()),
            PrivateOp::SetUpstreamStatus {
                actor,
                status,
                account_seq,
            } => self.put(
                moderation::upstream_key(actor),
                moderation::encode_upstream(status, *account_seq),
            ),
            PrivateOp::Label(label) if label.neg => self.remove(label.key()),
            PrivateOp::Label(label) => self.put(label.key(), label.encode()),
            PrivateOp::LabelerCursor { labeler, seq } => self.put(
                moderation::labeler_cursor_key(labeler),
                (*seq as u64).to_be_bytes().to_vec(),
            ),
            _ => unreachable!("not a moderation operation: {op:?}"),
        }
    }

    /// Upserts (`Some(flags)`) or removes a mute of `subject` by `actor`.
    fn mute_actor(
        &mut self,
        actor: &str,
        subject: &str,
        flags: Option<u8>,
    ) -> Result<(), StoreError> {
        let point = key(tag::MUTE, actor, subject.as_bytes().to_vec());
        let stored = match self.get(&point)? {
            Some(value) => Some(time_of(&value, &point)?.0),
            None => None,
        };
        if let Some(time_us) = stored {
            self.remove(key(
                tag::MUTE_BY_TIME,
                actor,
                timed(time_us, subject.as_bytes()),
            ));
        }
        match flags {
            Some(flags) => {
                let time_us = stored.unwrap_or(self.now_us);
                self.put(point, timed(time_us, &[flags]));
                let by_time = key(tag::MUTE_BY_TIME, actor, timed(time_us, subject.as_bytes()));
                self.put(by_time, vec![flags]);
            }
            None => self.remove(point),
        }
        Ok(())
    }

    fn mute_list(&mut self, actor: &str, list: &str, mute: bool) -> Result<(), StoreError> {
        let point = key(tag::LIST_MUTE, actor, list.as_bytes().to_vec());
        let stored = match self.get(&point)? {
            Some(value) => Some(time_of(&value, &point)?.0),
            None => None,
        };
        match (stored, mute) {
            (Some(_), true) | (None, false) => {}
            (None, true) => {
                self.put(point, timed(self.now_us, &[]));
                let by_time = key(
                    tag::LIST_MUTE_BY_TIME,
                    actor,
                    timed(self.now_us, list.as_bytes()),
                );
                self.put(by_time, Vec::new());
            }
            (Some(time_us), false) => {
                self.remove(point);
                self.remove(key(
                    tag::LIST_MUTE_BY_TIME,
                    actor,
                    timed(time_us, list.as_bytes()),
                ));
            }
        }
        Ok(())
    }

    /// The clustering keys of a partition, stored and written by this batch, minus removals.
    fn partition_keys(&mut self, partition: &[u8]) -> Result<Vec<Vec<u8>>, StoreError> {
        let mut keys: Vec<Vec<u8>> = self
            .reads
            .scan(partition, None, CLEAR_ROWS_MAX)?
            .into_iter()
            .map(|(clustering, _)| clustering)
            .collect();
        for (row, value) in &self.rows {
            if row.partition == partition && value.is_some() {
                keys.push(row.clustering.clone());
            }
        }
        keys.sort_unstable();
        keys.dedup();
        keys.retain(|clustering| {
            let row = PrivateKey {
                partition: partition.to_vec(),
                clustering: clustering.clone(),
            };
            !matches!(self.rows.get(&row), Some(None))
        });
        Ok(keys)
    }

    fn clear_mutes(&mut self, actor: &str) -> Result<(), StoreError> {
        for subject in self.partition_keys(&partition(tag::MUTE, actor))? {
            let subject = text(&subject, &key(tag::MUTE, actor, subject.clone()))?;
            self.mute_actor(actor, &subject, None)?;
        }
        for list in self.partition_keys(&partition(tag::LIST_MUTE, actor))? {
            let list = text(&list, &key(tag::LIST_MUTE, actor, list.clone()))?;
            self.mute_list(actor, &list, false)?;
        }
        Ok(())
    }

    fn notification_state(
        &mut self,
        actor: &str,
        seen_us: Option<i64>,
        priority: Option<bool>,
    ) -> Result<(), StoreError> {
        let row = key(tag::NOTIFICATION_STATE, actor, Vec::new());
        let stored = match self.get(&row)? {
            Some(value) => Some(decode_notification_state(&value, &row)?),
            None => None,
        };
        let state = match stored {
            Some(mut state) => {
                if let Some(seen_us) = seen_us {
                    state.seen_us = Some(state.seen_us.map_or(seen_us, |old| old.max(seen_us)));
                }
                if let Some(priority) = priority {
                    state.priority = priority;
                }
                state
            }
            None => NotificationState {
                seen_us: Some(seen_us.unwrap_or(self.now_us)),
                priority: priority.unwrap_or(false),
            },
        };
        self.put(row, encode_notification_state(&state));
        Ok(())
    }

    fn put_bookmark(
        &mut self,
        actor: &str,
        bookmark_key: &str,
        subject_uri: &str,
        subject_cid: &str,
    ) -> Result<(), StoreError> {
        self.delete_bookmark(actor, bookmark_key)?;
        // One bookmark per subject: a second key for the same post replaces the first.
        let by_subject = key(
            tag::BOOKMARK_BY_SUBJECT,
            actor,
            subject_uri.as_bytes().to_vec(),
        );
        if let Some(old_key) = self.get(&by_subject)? {
            let old_key = text(&old_key, &by_subject)?;
            self.delete_bookmark(actor, &old_key)?;
        }
        let mut value = timed(self.now_us, &(subject_cid.len() as u16).to_be_bytes());
        value.extend_from_slice(subject_cid.as_bytes());
        value.extend_from_slice(subject_uri.as_bytes());
        self.put(
            key(tag::BOOKMARK, actor, bookmark_key.as_bytes().to_vec()),
            value,
        );
        self.put(by_subject, bookmark_key.as_bytes().to_vec());
        self.move_bookmark_count(subject_uri, 1)
    }

    fn delete_bookmark(&mut self, actor: &str, bookmark_key: &str) -> Result<(), StoreError> {
        let row = key(tag::BOOKMARK, actor, bookmark_key.as_bytes().to_vec());
        let Some(value) = self.get(&row)? else {
            return Ok(());
        };
        let bookmark = decode_bookmark(bookmark_key, &value, &row)?;
        self.remove(row);
        self.remove(key(
            tag::BOOKMARK_BY_SUBJECT,
            actor,
            bookmark.subject_uri.as_bytes().to_vec(),
        ));
        self.move_bookmark_count(&bookmark.subject_uri, -1)
    }

    fn move_bookmark_count(&mut self, subject_uri: &str, delta: i64) -> Result<(), StoreError> {
        self.move_count(bookmark_count_key(subject_uri), delta)
    }

    /// Moves the count in `row` by `delta`; a count below zero is corruption, never clamped.
    fn move_count(&mut self, row: PrivateKey, delta: i64) -> Result<(), StoreError> {
        let stored = match self.get(&row)? {
            Some(value) => u64_of(&value, &row)?,
            None => 0,
        };
        let count = stored
            .checked_add_signed(delta)
            .ok_or_else(|| corrupt("a count would go below zero", &row))?;
        if count == 0 {
            self.remove(row);
        } else {
            self.put(row, count.to_be_bytes().to_vec());
        }
        Ok(())
    }

    fn put_activity(
        &mut self,
        actor: &str,
        activity_key: &str,
        subject: &str,
        post: bool,
        reply: bool,
        update: bool,
    ) -> Result<(), StoreError> {
        let row = key(tag::ACTIVITY, actor, activity_key.as_bytes().to_vec());
        let stored = match self.get(&row)? {
            Some(value) => Some(decode_activity(activity_key, &value, &row)?),
            None => None,
        };
        // An update keeps the stored subject; one of an unknown key changes nothing, as in the
        // reference's UPDATE statement.
        let subject = match (&stored, update) {
            (Some(stored), true) => stored.subject.clone(),
            (None, true) => return Ok(()),
            (_, false) => subject.to_owned(),
        };
        if let Some(stored) = &stored {
            self.unlink_activity(actor, activity_key, &stored.subject)?;
        }
        let flags = u8::from(post) | u8::from(reply) << 1;
        self.put(row, [&[flags][..], subject.as_bytes()].concat());
        let by_subject = key(tag::ACTIVITY_BY_SUBJECT, actor, subject.as_bytes().to_vec());
        self.put(by_subject, [&[flags][..], activity_key.as_bytes()].concat());
        self.put(subscriber_key(&subject, actor), vec![flags]);
        Ok(())
    }

    fn delete_activity(&mut self, actor: &str, activity_key: &str) -> Result<(), StoreError> {
        let row = key(tag::ACTIVITY, actor, activity_key.as_bytes().to_vec());
        let Some(value) = self.get(&row)? else {
            return Ok(());
        };
        let stored = decode_activity(activity_key, &value, &row)?;
        self.remove(row);
        self.unlink_activity(actor, activity_key, &stored.subject)
    }

    /// Removes the by-subject row of `subject` if it still points at `activity_key` (a later
    /// subscription to the same account may have replaced it).
    fn unlink_activity(
        &mut self,
        actor: &str,
        activity_key: &str,
        subject: &str,
    ) -> Result<(), StoreError> {
        let by_subject = key(tag::ACTIVITY_BY_SUBJECT, actor, subject.as_bytes().to_vec());
        if let Some(value) = self.get(&by_subject)?
            && value.get(1..) == Some(activity_key.as_bytes())
        {
            self.remove(by_subject);
            self.remove(subscriber_key(subject, actor));
        }
        Ok(())
    }

    fn put_draft(
        &mut self,
        actor: &str,
        draft_key: &str,
        json: &str,
        update: bool,
    ) -> Result<(), StoreError> {
        let row = key(tag::DRAFT, actor, draft_key.as_bytes().to_vec());
        let stored = match self.get(&row)? {
            Some(value) => Some(decode_draft(draft_key, &value, &row)?),
            None => None,
        };
        if update && stored.is_none() {
            return Ok(());
        }
        if stored.is_none() {
            self.move_count(key(tag::DRAFT_COUNT, actor, Vec::new()), 1)?;
        }
        let created_us = stored
            .as_ref()
            .map_or(self.now_us, |draft| draft.created_us);
        if let Some(stored) = &stored {
            let by_time = timed(stored.updated_us, draft_key.as_bytes());
            self.remove(key(tag::DRAFT_BY_TIME, actor, by_time));
        }
        let mut value = timed(created_us, &[]);
        value.extend_from_slice(&timed(self.now_us, json.as_bytes()));
        self.put(row, value);
        let by_time = timed(self.now_us, draft_key.as_bytes());
        self.put(key(tag::DRAFT_BY_TIME, actor, by_time), Vec::new());
        Ok(())
    }

    fn delete_draft(&mut self, actor: &str, draft_key: &str) -> Result<(), StoreError> {
        let row = key(tag::DRAFT, actor, draft_key.as_bytes().to_vec());
        let Some(value) = self.get(&row)? else {
            return Ok(());
        };
        let stored = decode_draft(draft_key, &value, &row)?;
        self.remove(row);
        self.move_count(key(tag::DRAFT_COUNT, actor, Vec::new()), -1)?;
        let by_time = timed(stored.updated_us, draft_key.as_bytes());
        self.remove(key(tag::DRAFT_BY_TIME, actor, by_time));
        Ok(())
    }
}

/// The row naming `owner` among the subscribers of `subject`.
pub(super) fn subscriber_key(subject: &str, owner: &str) -> PrivateKey {
    key(tag::SUBSCRIBER, subject, owner.as_bytes().to_vec())
}
