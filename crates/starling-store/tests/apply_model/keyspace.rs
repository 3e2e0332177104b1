//! Fresh Cassandra keyspaces for the model tests.

use std::sync::atomic::{AtomicU32, Ordering};

use starling_store::{CassandraOptions, CassandraStore};

/// A fresh keyspace on the Cassandra node `STARLING_TEST_CASSANDRA` names, dropped when the
/// test passes (kept for inspection when it fails).
pub struct FreshKeyspace {
    options: CassandraOptions,
}

impl FreshKeyspace {
    /// `None` (and a line saying the Cassandra variant is skipped) when the variable is unset.
    pub fn new(test: &str) -> Option<FreshKeyspace> {
        let Ok(nodes) = std::env::var("STARLING_TEST_CASSANDRA") else {
            eprintln!(
                "skipping {test} on cassandra: STARLING_TEST_CASSANDRA is unset \
                 (scripts/test.sh starts a node and sets it)"
            );
            return None;
        };
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .subsec_nanos();
        let keyspace = format!(
            "starling_test_{}_{}_{nanos}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let mut options = CassandraOptions::new(
            nodes
                .split(',')
                .map(|node| node.trim().to_owned())
                .collect(),
        );
        options.keyspace = keyspace;
        Some(FreshKeyspace { options })
    }

    pub fn open(&self) -> CassandraStore {
        CassandraStore::open(&self.options).unwrap()
    }

    pub fn drop_keyspace(self) {
        self.open().drop_keyspace(&self.options.keyspace).unwrap();
    }
}
