//! The private-state reads: which rows answer each question.

use super::*;

/// The private-state reads, for [`crate::Store`]: answered from two backend calls.
pub(crate) struct PrivateQueries<'r, R: PrivateReads>(pub(crate) &'r mut R);

impl<R: PrivateReads> PrivateQueries<'_, R> {
    fn page<T>(
        &mut self,
        partition: &[u8],
        after: Option<&[u8]>,
        limit: usize,
        mut item: impl FnMut(&[u8], &[u8]) -> Result<T, StoreError>,
    ) -> Result<PrivatePage<T>, StoreError> {
        let rows = self.0.scan(partition, after, limit)?;
        let cursor = match rows.last() {
            Some((clustering, _)) if rows.len() == limit => Some(clustering.clone()),
            _ => None,
        };
        let items = rows
            .iter()
            .map(|(clustering, value)| item(clustering, value))
            .collect::<Result<_, _>>()?;
        Ok(PrivatePage { items, cursor })
    }

    /// The bsync cursor of `stream`.
    pub(crate) fn bsync_cursor(
        &mut self,
        stream: BsyncStream,
    ) -> Result<Option<String>, StoreError> {
        let row = stream.cursor_key();
        self.0
            .get(&row)?
            .map(|bytes| text(&bytes, &row))
            .transpose()
    }

    /// `actor`'s notification state (default: never seen, no priority).
    pub(crate) fn notification_state(
        &mut self,
        actor: &str,
    ) -> Result<NotificationState, StoreError> {
        let row = key(tag::NOTIFICATION_STATE, actor, Vec::new());
        match self.0.get(&row)? {
            Some(bytes) => decode_notification_state(&bytes, &row),
            None => Ok(NotificationState::default()),
        }
    }

    /// `actor`'s notification preferences JSON.
    pub(crate) fn preferences(&mut self, actor: &str) -> Result<Option<String>, StoreError> {
        let row = key(tag::PREFERENCES, actor, Vec::new());
        self.0
            .get(&row)?
            .map(|bytes| text(&bytes, &row))
            .transpose()
    }

    /// How `actor` mutes `subject`, if at all.
    pub(crate) fn mute(&mut self, actor: &str, subject: &str) -> Result<Option<Mute>, StoreError> {
        let row = key(tag::MUTE, actor, subject.as_bytes().to_vec());
        let Some(bytes) = self.0.get(&row)? else {
            return Ok(None);
        };
        let (created_us, rest) = time_of(&bytes, &row)?;
        let &[flags] = rest else {
            return Err(corrupt("mute flags", &row));
        };
        Ok(Some(Mute {
            subject: subject.to_owned(),
            created_us,
            only_reposts: flags & 1 != 0,
            only_quoteposts: flags & 2 != 0,
        }))
    }

    /// `actor`'s mutes, newest first.
    pub(crate) fn mutes(
        &mut self,
        actor: &str,
        after: Option<&[u8]>,
        limit: usize,
    ) -> Result<PrivatePage<Mute>, StoreError> {
        let part = partition(tag::MUTE_BY_TIME, actor);
        self.page(&part, after, limit, |clustering, value| {
            let row = key(tag::MUTE_BY_TIME, actor, clustering.to_vec());
            let (created_us, subject) = time_of(clustering, &row)?;
            let &[flags] = value else {
                return Err(corrupt("mute flags", &row));
            };
            Ok(Mute {
                subject: text(subject, &row)?,
                created_us,
                only_reposts: flags & 1 != 0,
                only_quoteposts: flags & 2 != 0,
            })
        })
    }

    /// Whether `actor` mutes the list `list`.
    pub(crate) fn list_muted(&mut self, actor: &str, list: &str) -> Result<bool, StoreError> {
        Ok(self
            .0
            .get(&key(tag::LIST_MUTE, actor, list.as_bytes().to_vec()))?
            .is_some())
    }

    /// The lists `actor` mutes, newest mute first.
    pub(crate) fn list_mutes(
        &mut self,
        actor: &str,
        after: Option<&[u8]>,
        limit: usize,
    ) -> Result<PrivatePage<String>, StoreError> {
        let part = partition(tag::LIST_MUTE_BY_TIME, actor);
        self.page(&part, after, limit, |clustering, _| {
            let row = key(tag::LIST_MUTE_BY_TIME, actor, clustering.to_vec());
            let (_, list) = time_of(clustering, &row)?;
            text(list, &row)
        })
    }

    /// Whether `actor` mutes the thread under `root`.
    pub(crate) fn thread_muted(&mut self, actor: &str, root: &str) -> Result<bool, StoreError> {
        Ok(self
            .0
            .get(&key(tag::THREAD_MUTE, actor, root.as_bytes().to_vec()))?
            .is_some())
    }

    /// Whether `actor` mutes any thread.
    pub(crate) fn has_thread_mutes(&mut self, actor: &str) -> Result<bool, StoreError> {
        let part = partition(tag::THREAD_MUTE, actor);
        Ok(!self.0.scan(&part, None, 1)?.is_empty())
    }

    /// `actor`'s bookmarks, newest key first.
    pub(crate) fn bookmarks(
        &mut self,
        actor: &str,
        after: Option<&[u8]>,
        limit: usize,
    ) -> Result<PrivatePage<Bookmark>, StoreError> {
        let part = partition(tag::BOOKMARK, actor);
        self.page(&part, after, limit, |clustering, value| {
            let row = key(tag::BOOKMARK, actor, clustering.to_vec());
            decode_bookmark(&text(clustering, &row)?, value, &row)
        })
    }

    /// `actor`'s bookmark of the post `subject_uri`, if any.
    pub(crate) fn bookmark(
        &mut self,
        actor: &str,
        subject_uri: &str,
    ) -> Result<Option<Bookmark>, StoreError> {
        let by_subject = key(
            tag::BOOKMARK_BY_SUBJECT,
            actor,
            subject_uri.as_bytes().to_vec(),
        );
        let Some(bookmark_key) = self.0.get(&by_subject)? else {
            return Ok(None);
        };
        let row = key(tag::BOOKMARK, actor, bookmark_key.clone());
        let Some(value) = self.0.get(&row)? else {
            return Err(corrupt(
                "a bookmark by subject names no bookmark",
                &by_subject,
            ));
        };
        decode_bookmark(&text(&bookmark_key, &row)?, &value, &row).map(Some)
    }

    /// Bookmarks of the post `subject_uri`.
    pub(crate) fn bookmark_count(&mut self, subject_uri: &str) -> Result<u64, StoreError> {
        let row = bookmark_count_key(subject_uri);
        match self.0.get(&row)? {
            Some(bytes) => u64_of(&bytes, &row),
            None => Ok(0),
        }
    }

    /// `actor`'s activity subscriptions, newest key first.
    pub(crate) fn activity_subscriptions(
        &mut self,
        actor: &str,
        after: Option<&[u8]>,
        limit: usize,
    ) -> Result<PrivatePage<ActivitySubscription>, StoreError> {
        let part = partition(tag::ACTIVITY, actor);
        self.page(&part, after, limit, |clustering, value| {
            let row = key(tag::ACTIVITY, actor, clustering.to_vec());
            decode_activity(&text(clustering, &row)?, value, &row)
        })
    }

    /// `actor`'s activity subscription to `subject`, if any.
    pub(crate) fn activity_subscription(
        &mut self,
        actor: &str,
        subject: &str,
    ) -> Result<Option<ActivitySubscription>, StoreError> {
        let row = key(tag::ACTIVITY_BY_SUBJECT, actor, subject.as_bytes().to_vec());
        let Some(value) = self.0.get(&row)? else {
            return Ok(None);
        };
        let (&flags, activity_key) = value
            .split_first()
            .ok_or_else(|| corrupt("activity subscription flags", &row))?;
        Ok(Some(ActivitySubscription {
            key: text(activity_key, &row)?,
            subject: subject.to_owned(),
            post: flags & 1 != 0,
            reply: flags & 2 != 0,
        }))
    }

    /// Up to `limit` accounts subscribed to `subject`'s activity, by DID descending.
    pub(crate) fn subscribers(
        &mut self,
        subject: &str,
        limit: usize,
    ) -> Result<Vec<Subscriber>, StoreError> {
        let part = partition(tag::SUBSCRIBER, subject);
        let page = self.page(&part, None, limit, |clustering, value| {
            let row = key(tag::SUBSCRIBER, subject, clustering.to_vec());
            let &[flags] = value else {
                return Err(corrupt("activity subscriber flags", &row));
            };
            Ok(Subscriber {
                did: text(clustering, &row)?,
                post: flags & 1 != 0,
                reply: flags & 2 != 0,
            })
        })?;
        Ok(page.items)
    }

    /// How many drafts `actor` has.
    pub(crate) fn draft_count(&mut self, actor: &str) -> Result<u64, StoreError> {
        let row = key(tag::DRAFT_COUNT, actor, Vec::new());
        match self.0.get(&row)? {
            Some(bytes) => u64_of(&bytes, &row),
            None => Ok(0),
        }
    }

    /// `actor`'s drafts, most recently updated first.
    pub(crate) fn drafts(
        &mut self,
        actor: &str,
        after: Option<&[u8]>,
        limit: usize,
    ) -> Result<PrivatePage<Draft>, StoreError> {
        let part = partition(tag::DRAFT_BY_TIME, actor);
        let page = self.page(&part, after, limit, |clustering, _| {
            let row = key(tag::DRAFT_BY_TIME, actor, clustering.to_vec());
            let (_, draft_key) = time_of(clustering, &row)?;
            text(draft_key, &row)
        })?;
        let mut items = Vec::with_capacity(page.items.len());
        for draft_key in page.items {
            let row = key(tag::DRAFT, actor, draft_key.as_bytes().to_vec());
            let value = self
                .0
                .get(&row)?
                .ok_or_else(|| corrupt("a draft by time names no draft", &row))?;
            items.push(decode_draft(&draft_key, &value, &row)?);
        }
        Ok(PrivatePage {
            items,
            cursor: page.cursor,
        })
    }
}
