//! A consistent copy of a running embedded store: every keyspace read through one engine
//! snapshot, written into a new data directory.
//!
//! Each batch is one atomic engine write across keyspaces (records, indexes, counters, the
//! cursor), so a snapshot holds whole batches only: the copy is the store as it was between
//! two batches, cursor included, and ingest resumes from that cursor when the copy is served.
//! Copying the directory's files instead is not safe while the store runs: compaction deletes
//! the files a copy is still listing.

use fjall::{Database, KeyspaceCreateOptions, PersistMode, Readable};

use super::{EmbeddedStore, MEMTABLE_BYTES_MAX};
use crate::format;
use crate::{BackupReport, StoreError};

/// The engine's keyspaces as `EmbeddedStore::open` names them, in the order of [`keyspaces`].
const KEYSPACES: [&str; 5] = ["records", "index", "actors", "meta", "graph_log"];

/// The keyspaces named by [`KEYSPACES`], in its order.
fn keyspaces(store: &EmbeddedStore) -> [&fjall::Keyspace; 5] {
    [
        &store.records,
        &store.index,
        &store.actor_rows,
        &store.meta,
        &store.graph_log,
    ]
}

/// Bytes of keys and values per write batch of the copy: bounds its memory.
const COPY_BATCH_BYTES_MAX: usize = 16 * 1024 * 1024;

/// The longest backup name.
const NAME_BYTES_MAX: usize = 64;

/// Writes the copy into `backups/NAME` of the store's data directory.
pub(super) fn write_copy(store: &EmbeddedStore, name: &str) -> Result<BackupReport, StoreError> {
    let plain = !name.is_empty()
        && name.len() <= NAME_BYTES_MAX
        && name
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || byte == b'-' || byte == b'_');
    let target = store.dir.join("backups").join(name);
    let data_dir = |reason: String| StoreError::DataDir {
        path: target.display().to_string(),
        reason,
    };
    if !plain {
        return Err(data_dir(format!(
            "backup name `{name}` must be 1 to {NAME_BYTES_MAX} letters, digits, `-` or `_`"
        )));
    }
    if target.exists() {
        return Err(data_dir("already exists; choose another name".to_owned()));
    }
    std::fs::create_dir_all(&target).map_err(|err| data_dir(err.to_string()))?;
    format::check(&target)?;
    let copy = Database::builder(target.join(format::ENGINE_DIR))
        .manual_journal_persist(true)
        .open()?;
    let snapshot = store.db.snapshot();
    let mut res = BackupReport {
        path: target.display().to_string(),
        ..BackupReport::default()
    };
    for (name, source) in KEYSPACES.iter().zip(keyspaces(store)) {
        let options = || KeyspaceCreateOptions::default().max_memtable_size(MEMTABLE_BYTES_MAX);
        let destination = copy.keyspace(name, options)?;
        let mut batch = copy.batch();
        let mut batch_bytes = 0;
        for guard in snapshot.iter(source) {
            let (key, value) = guard.into_inner()?;
            batch_bytes += key.len() + value.len();
            res.n_keys += 1;
            res.n_bytes += (key.len() + value.len()) as u64;
            batch.insert(&destination, key, value);
            if batch_bytes >= COPY_BATCH_BYTES_MAX {
                std::mem::replace(&mut batch, copy.batch()).commit()?;
                batch_bytes = 0;
            }
        }
        batch.commit()?;
    }
    copy.persist(PersistMode::SyncAll)?;
    Ok(res)
}
