//! Opening the embedded store: the engine and its keyspaces, then the in-memory tables read
//! back from them; an engine failure names the directory it was reading and the cause.

use std::time::Instant;

use super::actor_snapshot::Snapshot;
use super::*;

impl EmbeddedStore {
    /// Opens (or creates) the store in `dir`, recovering from the journal after a crash.
    pub fn open(dir: &Path) -> Result<EmbeddedStore, StoreError> {
        std::fs::create_dir_all(dir).map_err(|err| StoreError::DataDir {
            path: dir.display().to_string(),
            reason: err.to_string(),
        })?;
        let found = format::check(dir)?;
        // The options that matter are spelled out rather than left to defaults: the journal is
        // synced by each batch commit (`PersistMode::SyncData`), never by a background timer.
        let engine_dir = dir.join(format::ENGINE_DIR);
        let at_engine = |err| opening(&engine_dir, StoreError::Engine(err));
        // The actor snapshot is read while the engine opens: the engine replays its journal
        // (up to 64 MB, a second or more, even after a clean exit left nothing unflushed), and
        // the two are most of an open's time.
        let (db, actor_snapshot) = std::thread::scope(|scope| {
            let snapshot = std::thread::Builder::new()
                .name("actor-load".to_owned())
                .spawn_scoped(scope, || actor_snapshot::read(dir));
            let db = Database::builder(&engine_dir)
                .cache_size(CACHE_BYTES)
                .manual_journal_persist(true)
                // Flushes and compactions get all cores but one: ingest keeps one to itself. On
                // two cores a second engine worker measured slower (it spins re-queueing
                // compactions).
                .worker_threads(engine_workers())
                .open();
            let snapshot = match snapshot {
                // A panic there was reported as it happened; the rows are read instead.
                Ok(thread) => thread.join().unwrap_or(None),
                Err(_) => actor_snapshot::read(dir),
            };
            (db, snapshot)
        });
        let db = db.map_err(at_engine)?;
        // Filters and block indexes are partitioned at every level, not only the deepest: a
        // whole-table filter (megabytes for a 64 MiB table of small index keys) falls out of
        // the block cache once the store outgrows it, and each point read then loaded and
        // checksummed all of it again (a replay after importing 160M follows fell to hundreds
        // of events/s). A partition is a few kilobytes, found through a small pinned index.
        // These options are fixed when a keyspace is created: older stores keep theirs.
        let options = || {
            KeyspaceCreateOptions::default()
                .max_memtable_size(MEMTABLE_BYTES_MAX)
                .filter_block_partitioning_policy(PartitioningPolicy::all(true))
                .index_block_partitioning_policy(PartitioningPolicy::all(true))
        };
        let records = db.keyspace("records", options).map_err(at_engine)?;
        let index = db.keyspace("index", options).map_err(at_engine)?;
        let actor_rows = db.keyspace("actors", options).map_err(at_engine)?;
        let meta = db.keyspace("meta", options).map_err(at_engine)?;
        let graph_log = db.keyspace("graph_log", options).map_err(at_engine)?;
        let private = db.keyspace("private", options).map_err(at_engine)?;
        let meta_seq = match meta.get(META_GRAPH_SEQ) {
            Ok(Some(bytes)) => u64_value(&bytes)?,
            Ok(None) => 0,
            Err(err) => return Err(opening(meta.path(), err.into())),
        };
        let log_seq = match graph_log.last_key_value() {
            Some(guard) => {
                let key = guard
                    .key()
                    .map_err(|err| opening(graph_log.path(), err.into()))?;
                graph_seq_of(&key)?
            }
            None => 0,
        };
        let graph_seq = meta_seq.max(log_seq);
        let empty = |keyspace: &Keyspace| {
            keyspace
                .is_empty()
                .map_err(|err| opening(keyspace.path(), err.into()))
        };
        let fresh = empty(&records)? && holds_only_imported_follows(&index)?;
        let fresh_keys = fresh.then(FreshKeys::new);
        let store = EmbeddedStore {
            dir: dir.to_owned(),
            db,
            records,
            index,
            actor_rows,
            meta,
            graph_log,
            private,
            graph_seq: AtomicU64::new(graph_seq),
            actors: RwLock::new(ActorTable::default()),
            collections: RwLock::new(Collections::default()),
            counters: Mutex::new(Counters::default()),
            count_cache: Arc::new(ValueCache::new(COUNT_CACHE_ENTRIES)),
            row_cache: Arc::new(ValueCache::new(cached::ROW_CACHE_ENTRIES)),
            live_cache: Arc::new(ValueCache::new(LIVE_CACHE_ENTRIES)),
            heads: super::heads::new_cache(),
            head_entries: AtomicUsize::new(super::heads::HEAD_ENTRIES),
            writer: Mutex::new(()),
            in_flight: Mutex::new(None),
            notifications: AtomicBool::new(true),
            fresh_keys,
        };
        store.load(actor_snapshot)?;
        store.upgrade(dir, found)?;
        Ok(store)
    }

    /// Every keyspace of the store.
    pub(super) fn keyspaces(&self) -> [&Keyspace; 6] {
        [
            &self.records,
            &self.index,
            &self.actor_rows,
            &self.meta,
            &self.graph_log,
            &self.private,
        ]
    }

    /// Reads the in-memory tables back from disk, the actor table from `actor_snapshot` (the
    /// snapshot file as read) when it is current; an engine error names the keyspace's
    /// directory.
    fn load(&self, actor_snapshot: Option<Snapshot>) -> Result<(), StoreError> {
        self.load_actors(actor_snapshot)
            .map_err(|err| opening(self.actor_rows.path(), err))?;
        self.load_meta()
            .map_err(|err| opening(self.meta.path(), err))
    }

    /// Sets the actor table: the snapshot of the last clean exit when nothing was written
    /// since (`actor_snapshot.rs`), else the `actors` keyspace read row by row.
    fn load_actors(&self, snapshot: Option<Snapshot>) -> Result<(), StoreError> {
        let seqno = self.actor_rows_seqno();
        let (source, seconds) = match snapshot.filter(|snapshot| snapshot.seqno == seqno) {
            Some(snapshot) => {
                *write(&self.actors) = snapshot.table;
                ("snapshot", snapshot.read_in)
            }
            None => {
                let started = Instant::now();
                self.load_actor_rows()?;
                ("rows", started.elapsed())
            }
        };
        tracing::info!(
            actors = read(&self.actors).len(),
            source,
            seconds = format!("{:.2}", seconds.as_secs_f64()),
            "actor table loaded"
        );
        Ok(())
    }

    /// Reads the actor table row by row from the `actors` keyspace.
    fn load_actor_rows(&self) -> Result<(), StoreError> {
        // Ids are dense, so the last row's id sizes the table: no regrowth while loading.
        let n_actors = match self.actor_rows.last_key_value() {
            Some(guard) => actor_row_id(&guard.key()?)?.0 as usize + 1,
            None => 0,
        };
        let mut rows = ActorRows::with_capacity(n_actors);
        for guard in self.actor_rows.prefix([ACTOR_ROW]) {
            let (key, row) = guard.into_inner()?;
            let (did, state) = decode_actor_row(&row)?;
            rows.push(actor_row_id(&key)?, did, state)?;
        }
        *write(&self.actors) = rows.into_table();
        Ok(())
    }

    /// Reads the interned collections and the counters back from the `meta` keyspace.
    fn load_meta(&self) -> Result<(), StoreError> {
        let mut collections = write(&self.collections);
        for guard in self.meta.prefix(META_COLLECTION) {
            let (key, name) = guard.into_inner()?;
            let name = std::str::from_utf8(&name)
                .map_err(|_| StoreError::corrupt("collection name", &key))?;
            let id = key
                .get(META_COLLECTION.len()..)
                .and_then(|bytes| bytes.try_into().ok())
                .map(u32::from_be_bytes);
            if !id.is_some_and(|id| collections.restore(id, name)) {
                return Err(StoreError::corrupt("collection ids not dense", &key));
            }
        }
        drop(collections);
        let mut counters = lock(&self.counters);
        if let Some(bytes) = self.meta.get(META_COUNT_ACTORS)? {
            counters.actors = u64_value(&bytes)?;
        }
        for guard in self.meta.prefix(META_COUNT_RECORDS) {
            let (key, count) = guard.into_inner()?;
            let id = key
                .get(META_COUNT_RECORDS.len()..)
                .and_then(|bytes| bytes.try_into().ok())
                .map(u32::from_be_bytes)
                .ok_or_else(|| StoreError::corrupt("record counter key", &key))?;
            counters
                .records
                .insert(keys::CollectionId(id), u64_value(&count)?);
        }
        for reason in DropReason::ALL {
            let key = format!("{META_COUNT_DROPPED}{reason}");
            if let Some(count) = self.meta.get(key.as_bytes())? {
                counters.dropped.insert(reason, u64_value(&count)?);
            }
        }
        Ok(())
    }
}

/// An engine error met while opening the files under `path`, as [`StoreError::Open`] naming
/// them and the cause; other errors as they are.
fn opening(path: &Path, err: StoreError) -> StoreError {
    let StoreError::Engine(err) = err else {
        return err;
    };
    let cause = match &err {
        fjall::Error::Locked => {
            "locked by another process (is another starling using it?)".to_owned()
        }
        fjall::Error::Io(io) => format!("I/O error: {io}"),
        // The engine's errors render as their Debug form; the checksum one is common enough
        // to deserve words, and names no file of its own.
        other if format!("{other:?}").contains("ChecksumMismatch") => format!(
            "a block fails its checksum: a file is damaged (restore the directory from a \
             backup, or rebuild it with `starling replay`) ({other})"
        ),
        other => other.to_string(),
    };
    StoreError::Open {
        path: path.display().to_string(),
        cause,
    }
}

/// Engine background threads: one per core beyond the first.
fn engine_workers() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get().saturating_sub(1).max(1))
}

/// Whether `index` holds nothing but imported follows (or nothing): a store that only
/// `import-follows` wrote has none of the keys the fresh-key filter answers for, so replaying
/// into it keeps the filter. Keys sort by their tag, so the first and the last key tell.
fn holds_only_imported_follows(index: &Keyspace) -> Result<bool, StoreError> {
    let tag_of = |guard: Option<fjall::Guard>| -> Result<Option<u8>, StoreError> {
        let Some(guard) = guard else { return Ok(None) };
        let key = guard
            .key()
            .map_err(|err| opening(index.path(), err.into()))?;
        Ok(key.first().copied())
    };
    let first = tag_of(index.first_key_value())?;
    let last = tag_of(index.last_key_value())?;
    Ok([first, last]
        .iter()
        .all(|tag| tag.is_none_or(|tag| tag == keys::tag::IMPORTED_FOLLOW)))
}

/// The id in an `actors` row's key.
fn actor_row_id(key: &[u8]) -> Result<ActorId, StoreError> {
    key.get(1..5)
        .and_then(|bytes| bytes.try_into().ok())
        .map(|bytes| ActorId(u32::from_be_bytes(bytes)))
        .ok_or_else(|| StoreError::corrupt("actor key", key))
}

#[cfg(test)]
mod tests {
    use super::*;

    // The fresh-key filter is kept by a store opened empty or holding only imported follows,
    // and dropped once the index holds anything else (here a pair count, whose tag sorts after
    // the imported follows') or a record is stored.
    #[test]
    fn only_imported_follows_keep_the_fresh_key_filter() {
        let dir = tempfile::tempdir().unwrap();
        let fresh = || {
            EmbeddedStore::open(dir.path())
                .unwrap()
                .fresh_keys
                .is_some()
        };
        assert!(fresh(), "an empty store");
        {
            let store = EmbeddedStore::open(dir.path()).unwrap();
            store.import_follows(&[(ActorId(1), ActorId(2))]).unwrap();
        }
        assert!(fresh(), "a store of imported follows");
        {
            let store = EmbeddedStore::open(dir.path()).unwrap();
            let key = edge_prefix(tag::FOLLOW_PAIR, ActorId(1), ActorId(3));
            assert!(key.first() > Some(&tag::IMPORTED_FOLLOW));
            store.index.insert(key, [1]).unwrap();
        }
        assert!(!fresh(), "a store with a pair count");
        let other = tempfile::tempdir().unwrap();
        {
            let store = EmbeddedStore::open(other.path()).unwrap();
            store.import_follows(&[(ActorId(1), ActorId(2))]).unwrap();
            store.records.insert(b"some record", b"{}").unwrap();
        }
        assert!(
            EmbeddedStore::open(other.path())
                .unwrap()
                .fresh_keys
                .is_none()
        );
    }
}
