//! Where the model tests' data comes from: fresh Cassandra keyspaces, and the real events
//! beside the project.

use std::path::PathBuf;
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

/// The real Jetstream events of `../shared/data`, if present.
pub fn shared_data() -> Option<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/data/jetstream");
    if dir.is_dir() {
        return Some(dir);
    }
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "CI=true but ../shared/data is missing"
    );
    eprintln!(
        "skipping: this test needs ../shared/data beside the project (real Jetstream events)"
    );
    None
}
