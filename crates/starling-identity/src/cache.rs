//! The resolution cache: DID → identity (or "no document"), with an expiry per entry and a cap
//! on the number of entries, the oldest insertion evicted first. No I/O and no clock of its
//! own: callers pass `now`.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Instant;

use crate::Identity;

/// A cached answer.
struct Entry {
    /// Insertion sequence number, the key of this entry in `Cache::order`.
    seq: u64,
    expires_at: Instant,
    /// `None` caches "this DID has no document".
    identity: Option<Identity>,
}

/// See the module doc. The maps use std's SipHash, not Fx: the keys are DIDs taken from JWTs
/// anyone can send, so a hash an attacker can collide would turn lookups linear.
pub(crate) struct Cache {
    entries: HashMap<Arc<str>, Entry>,
    /// Live entries by insertion sequence, oldest first.
    order: BTreeMap<u64, Arc<str>>,
    seq_next: u64,
    entries_max: usize,
}

impl Cache {
    pub(crate) fn new(entries_max: usize) -> Cache {
        assert!(entries_max > 0);
        Cache {
            entries: HashMap::new(),
            order: BTreeMap::new(),
            seq_next: 0,
            entries_max,
        }
    }

    /// The cached answer for `did` if it has not expired at `now`: `Some(None)` is a cached
    /// "no document". An expired entry is removed.
    pub(crate) fn get(&mut self, did: &str, now: Instant) -> Option<Option<Identity>> {
        let entry = self.entries.get(did)?;
        if now < entry.expires_at {
            return Some(entry.identity.clone());
        }
        self.remove(did);
        None
    }

    /// Caches `identity` for `did` until `expires_at`, replacing any entry for it, and evicts
    /// the oldest entries beyond `entries_max`.
    pub(crate) fn insert(&mut self, did: &str, identity: Option<Identity>, expires_at: Instant) {
        self.remove(did);
        let did: Arc<str> = did.into();
        let seq = self.seq_next;
        self.seq_next += 1;
        self.order.insert(seq, Arc::clone(&did));
        let entry = Entry {
            seq,
            expires_at,
            identity,
        };
        self.entries.insert(did, entry);
        while self.entries.len() > self.entries_max {
            let Some((_, oldest)) = self.order.pop_first() else {
                break;
            };
            self.entries.remove(&oldest);
        }
        assert_eq!(self.entries.len(), self.order.len());
        assert!(self.entries.len() <= self.entries_max);
    }

    /// Drops the entry for `did`, if any.
    pub(crate) fn remove(&mut self, did: &str) {
        if let Some(entry) = self.entries.remove(did) {
            let removed = self.order.remove(&entry.seq);
            assert!(removed.is_some());
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, SystemTime};

    use super::*;

    fn identity(did: &str) -> Identity {
        Identity {
            did: did.to_owned(),
            handle: None,
            keys_json: b"{}".to_vec(),
            services_json: b"{}".to_vec(),
            updated: SystemTime::UNIX_EPOCH,
        }
    }

    // Entries expire at their own deadline, negative answers are cached as `Some(None)`, a
    // re-insert moves an entry to the young end, and the oldest insertion is evicted at the cap.
    #[test]
    fn expiry_and_eviction() {
        let now = Instant::now();
        let later = now + Duration::from_secs(10);
        let mut cache = Cache::new(2);
        cache.insert("did:plc:a", Some(identity("did:plc:a")), later);
        cache.insert("did:plc:b", None, now + Duration::from_secs(1));
        assert_eq!(
            cache.get("did:plc:a", now),
            Some(Some(identity("did:plc:a")))
        );
        assert_eq!(cache.get("did:plc:b", now), Some(None));
        assert_eq!(cache.get("did:plc:b", now + Duration::from_secs(1)), None);
        assert_eq!(cache.len(), 1);

        cache.insert("did:plc:b", None, later);
        cache.insert("did:plc:a", Some(identity("did:plc:a")), later);
        cache.insert("did:plc:c", None, later);
        assert_eq!(cache.len(), 2);
        assert_eq!(
            cache.get("did:plc:b", now),
            None,
            "b was the oldest insertion"
        );
        assert!(cache.get("did:plc:a", now).is_some());
        assert!(cache.get("did:plc:c", now).is_some());

        cache.remove("did:plc:a");
        cache.remove("did:plc:unknown");
        assert_eq!(cache.get("did:plc:a", now), None);
        assert_eq!(cache.len(), 1);
    }
}
