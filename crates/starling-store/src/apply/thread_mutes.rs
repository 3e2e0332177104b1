//! Notifications a thread mute holds back. As the reference's indexer does, a notification whose
//! reason subject is a post in a thread its recipient has muted (private state from bsync) is
//! not made. It is decided when the record is indexed: muting a thread later leaves the
//! notifications already made, and unmuting brings none back. Unindexing removes every target
//! the rules give, made or not; removing an entry that was never made changes nothing.

use starling_core::jetstream::{self, Refs, nsid};
use starling_core::syntax::RecordUri;

use super::{IndexedRecord, Rules, StoredState};
use crate::keys;
use crate::locks::read;
use crate::notify::Target;
use crate::private::{PrivateQueries, StoreReads};
use crate::value::{self, StoredValue};
use crate::{NotificationReason, StoreError};

impl Rules<'_> {
    /// `targets` of a record being indexed, less those its recipients' thread mutes hold back.
    pub(super) fn without_muted_threads(
        &mut self,
        state: &mut impl StoredState,
        record: &IndexedRecord<'_>,
        targets: Vec<Target>,
    ) -> Result<Vec<Target>, StoreError> {
        let mut res = Vec::with_capacity(targets.len());
        for target in targets {
            if !self.held_back(state, record, &target)? {
                res.push(target);
            }
        }
        Ok(res)
    }

    /// Whether `target`'s recipient mutes the thread of the notification's subject post.
    fn held_back(
        &mut self,
        state: &mut impl StoredState,
        record: &IndexedRecord<'_>,
        target: &Target,
    ) -> Result<bool, StoreError> {
        let Some(root) = root_hint(record, target) else {
            return Ok(false);
        };
        let Some(recipient) = read(self.catalog().actors)
            .did(target.recipient)
            .map(String::from)
        else {
            return Ok(false);
        };
        let mut private = PrivateQueries(&mut StoreReads(state.private()));
        // Most accounts mute no thread: one read settles it before the subject is looked up.
        if !private.has_thread_mutes(&recipient)? {
            return Ok(false);
        }
        let root = match root {
            RootHint::Root(root) => Some(root),
            RootHint::Of(post) => self.thread_root(state, &post)?,
        };
        match root {
            Some(root) => {
                PrivateQueries(&mut StoreReads(state.private())).thread_muted(&recipient, &root)
            }
            None => Ok(false),
        }
    }

    /// The root of the thread of the stored post `uri` (itself when it is no reply); `None`
    /// when it is not stored, which mutes nothing, as in the reference.
    fn thread_root(
        &mut self,
        state: &mut impl StoredState,
        uri: &str,
    ) -> Result<Option<String>, StoreError> {
        let Some(post) = RecordUri::parse(uri) else {
            return Ok(None);
        };
        let actor = self.intern_actor(post.did);
        let collection = self.intern_collection(nsid::POST);
        let key = keys::record_key(actor, collection, post.rkey);
        let Some(bytes) = self.read_record(state, &key)? else {
            return Ok(None);
        };
        let StoredValue::Live(live) = value::decode(&bytes)? else {
            return Ok(None);
        };
        Ok(Some(
            match jetstream::record_fields(nsid::POST, live.json) {
                Ok((
                    _,
                    Refs::Post {
                        reply: Some(reply), ..
                    },
                )) => reply.root.to_uri(),
                _ => uri.to_owned(),
            },
        ))
    }
}

/// Where the thread of a notification's subject post is found.
enum RootHint {
    /// The root itself: a reply names its thread's root.
    Root(String),
    /// The subject post, whose stored record names the root.
    Of(String),
}

/// How to find the thread a notification is about: likes and reposts of a post and quotes
/// are about the subject post's thread, replies about their own; other reasons have no
/// subject post.
fn root_hint(record: &IndexedRecord<'_>, target: &Target) -> Option<RootHint> {
    match (target.reason, record.refs) {
        (NotificationReason::Like | NotificationReason::Repost, Refs::Subject { subject, .. })
            if subject.collection == nsid::POST =>
        {
            Some(RootHint::Of(subject.to_uri()))
        }
        (
            NotificationReason::Quote,
            Refs::Post {
                quote: Some(quote), ..
            },
        ) => Some(RootHint::Of(quote.to_uri())),
        (
            NotificationReason::Reply,
            Refs::Post {
                reply: Some(reply), ..
            },
        ) => Some(RootHint::Root(reply.root.to_uri())),
        _ => None,
    }
}
