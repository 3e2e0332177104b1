//! The notification entries a record makes or removes: who [`notify`]'s rules name, less what
//! gates and thread mutes hold back.

use starling_core::ActorId;
use starling_core::jetstream::{Refs, nsid};

use super::{IndexedRecord, Rules, StoredState};
use crate::notify;
use crate::{NotificationReason, StoreError};

impl Rules<'_> {
    /// The notification entries of one record ([`notify`] has the rules).
    pub(super) fn notification_keys(
        &mut self,
        state: &mut impl StoredState,
        record: &IndexedRecord<'_>,
        insert: bool,
    ) -> Result<Vec<Vec<u8>>, StoreError> {
        if !self.notifications {
            return Ok(Vec::new());
        }
        let targets = match (record.collection, record.refs) {
            (nsid::LIKE | nsid::REPOST, Refs::Subject { subject, via }) => {
                let subject_author = self.intern_actor(subject.did);
                let via_author = via.as_ref().map(|via| self.intern_actor(via.did));
                let repost = record.collection == nsid::REPOST;
                notify::interaction_targets(record.actor, subject_author, via_author, repost)
            }
            (nsid::FOLLOW, Refs::Actor { subject }) => {
                let subject = self.intern_actor(subject);
                notify::follow_targets(subject)
            }
            (nsid::VERIFICATION, Refs::Actor { subject }) => {
                self.verification_targets(record, subject)
            }
            (nsid::PROFILE, Refs::Profile { joined_via }) => {
                let author = self.intern_actor(joined_via.did);
                notify::single_target(record.actor, author, NotificationReason::StarterpackJoined)
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
                let mentions: Vec<ActorId> =
                    mentions.iter().map(|did| self.intern_actor(did)).collect();
                // A quote the quoted post's gate forbids, and a reply its thread's gate
                // forbids, notify nobody, as the reference decides when it indexes them (a
                // delete removes whatever the insert made).
                let mut quoted = quote
                    .as_ref()
                    .filter(|quote| quote.collection == nsid::POST);
                if insert
                    && let Some(quote) = quoted
                    && self.violates_embedding_rules(state, record.actor, quote)?
                {
                    quoted = None;
                }
                let quoted = quoted.map(|quote| self.intern_actor(quote.did));
                let ancestors = match reply {
                    Some(reply)
                        if insert
                            && self.violates_thread_gate(state, record.actor, &reply.root)? =>
                    {
                        self.forget_ancestors(record);
                        Vec::new()
                    }
                    Some(reply) if insert => self.find_ancestors(state, record, &reply.parent)?,
                    Some(_) => self.notified_ancestors(state, record)?,
                    None => Vec::new(),
                };
                let subscribers = if insert {
                    self.find_subscribers(state, record, reply.is_some())?
                } else {
                    self.notified_subscribers(state, record)?
                };
                let audience = notify::PostAudience {
                    mentions: &mentions,
                    quoted_author: quoted,
                    ancestors: &ancestors,
                    subscribers: &subscribers,
                };
                notify::post_targets(record.actor, &audience)
            }
            _ => return Ok(Vec::new()),
        };
        let targets = if insert {
            self.without_muted_threads(state, record, targets)?
        } else {
            targets
        };
        let mut keys = Vec::with_capacity(targets.len());
        for target in &targets {
            let key = notify::key(
                target,
                record.sort_at_us,
                record.actor,
                record.rkey,
                record.refs,
            );
            // The record may have been indexed before keys kept their subject.
            if !insert && let Some(older) = notify::without_subject(&key) {
                keys.push(older);
            }
            keys.push(key);
        }
        Ok(keys)
    }

    /// The `verified` notification of a verification of `subject`. When a commit takes the
    /// verification away, that entry stays (none to remove) and an `unverified` one is added at
    /// the commit's time, as the reference's `notifsForDelete` does.
    fn verification_targets(
        &mut self,
        record: &IndexedRecord<'_>,
        subject: &str,
    ) -> Vec<notify::Target> {
        let subject = self.intern_actor(subject);
        let targets = notify::single_target(record.actor, subject, NotificationReason::Verified);
        let Some(removed_at_us) = record.removed_at_us else {
            return targets;
        };
        for target in targets {
            let target = notify::Target {
                reason: NotificationReason::Unverified,
                ..target
            };
            let key = notify::key(
                &target,
                removed_at_us,
                record.actor,
                record.rkey,
                record.refs,
            );
            self.entries.push((key, true));
        }
        Vec::new()
    }
}
