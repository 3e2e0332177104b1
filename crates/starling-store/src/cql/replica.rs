//! The Cassandra store as replicas share it: [`SharedStore`] over the lease ([`super::lease`]),
//! recovery and the change log of [`CassandraStore`].

use std::time::Duration;

use super::{CassandraStore, lease};
use crate::{Committed, SharedStore, StoreError};

impl CassandraStore {
    /// Takes the writer lease or renews it; see [`lease`].
    pub fn try_lease(&self, owner: &str, ttl: Duration) -> Result<bool, StoreError> {
        self.block(lease::try_acquire(self, owner, ttl))
    }

    /// Gives the writer lease up, if `owner` holds it.
    pub fn release_lease(&self, owner: &str) -> Result<(), StoreError> {
        self.block(lease::release(self, owner))
    }
}

// Each method names the inherent one, which takes precedence over the trait's: no recursion.
impl SharedStore for CassandraStore {
    fn try_lease(&self, owner: &str, ttl: Duration) -> Result<bool, StoreError> {
        CassandraStore::try_lease(self, owner, ttl)
    }

    fn release_lease(&self, owner: &str) -> Result<(), StoreError> {
        CassandraStore::release_lease(self, owner)
    }

    fn recover(&self) -> Result<(), StoreError> {
        CassandraStore::recover(self)
    }

    fn changes_since(
        &self,
        after: u64,
        visit: &mut dyn FnMut(u64, &Committed),
    ) -> Result<u64, StoreError> {
        CassandraStore::changes_since(self, after, visit)
    }
}
