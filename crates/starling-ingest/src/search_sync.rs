//! Keeping the search index in step with the store.
//!
//! Every committed batch names the searchable records it indexed or unindexed
//! (`Committed::searchable`) and the actors whose identity changed; [`SearchUpdater`] reads
//! each one back from the store and puts or removes its document, so the index follows the
//! store's state whatever the order of events. Changes are committed to the index in batches:
//! when [`COMMIT_DOCS_MAX`] documents are pending, or by [`start_commits`] every
//! [`COMMIT_INTERVAL`]. Each index commit records the Jetstream cursor of the last store batch
//! it holds; at start, [`open`] rebuilds the index from the store ([`Store::for_each_searchable`])
//! when it is absent, was never committed, or does not cover exactly the store's live cursor (a
//! crash between a store batch and the next index commit, a `starling replay`, which removes
//! the index, or a replica following a shared store it did not write). A store with no live
//! cursor (replayed from files, imported, backfilled) is current instead when a clean exit
//! marked the index with the store's [`Store::write_seq`] and the store has not moved since
//! ([`mark_current`]).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use rustc_hash::{FxHashMap, FxHashSet};
use starling_core::ActorId;
use starling_core::jetstream::{AccountStatus, nsid};
use starling_search::{ActorDoc, PostDoc, RecordDoc, RecordKind, SearchError, SearchIndex};
use starling_store::{Committed, Progress, Store, StoreError, TouchedRecord};
use tracing::{info, warn};

use crate::IngestError;
use crate::applier::CommitSink;
use crate::periodic::Periodic;

/// The index's directory in the data directory.
pub const SEARCH_DIR: &str = "search";
/// How often pending changes are committed to the index (and become searchable), at most.
pub const COMMIT_INTERVAL: Duration = Duration::from_secs(1);
/// Pending documents that make a batch commit the index at once.
pub const COMMIT_DOCS_MAX: usize = 100_000;

/// How the index was opened.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SearchSource {
    /// It covered the store's cursor: used as it was.
    Current,
    /// Rebuilt from the store, with this many documents.
    Rebuilt {
        /// Documents indexed.
        n_docs: u64,
    },
}

/// The index and what its next commit records.
pub struct SearchSync {
    index: Arc<SearchIndex>,
    state: Mutex<SyncState>,
}

struct SyncState {
    /// The cursor of the last store batch whose changes were put in the index.
    cursor: Option<u64>,
    /// A change could not be applied: commits record no cursor, so the next start rebuilds.
    failed: bool,
    last_commit: Instant,
}

impl SearchSync {
    /// The index searches read.
    pub fn index(&self) -> &Arc<SearchIndex> {
        &self.index
    }

    fn state(&self) -> MutexGuard<'_, SyncState> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Commits what is pending, if anything is.
    pub fn commit_pending(&self) -> Result<(), SearchError> {
        if self.index.pending() == 0 {
            return Ok(());
        }
        self.commit()
    }

    /// Marks the index as covering `store` as it stands, for the next [`open`]: at a clean
    /// exit, once the index's last commit and the store's last write are done. Nothing is
    /// marked when an update failed, changes are pending, or the store has no
    /// [`Store::write_seq`].
    pub fn mark_current<S: Store>(&self, store: &S, data_dir: &Path) -> Result<(), IngestError> {
        let Some(seq) = store.write_seq() else {
            return Ok(());
        };
        if self.state().failed || self.index.pending() > 0 {
            return Ok(());
        }
        let mark = search_dir(data_dir).join(CURRENT_MARK);
        let tmp = search_dir(data_dir).join(format!("{CURRENT_MARK}.tmp"));
        std::fs::write(&tmp, seq.to_string()).map_err(|err| file_error(&tmp, err))?;
        std::fs::rename(&tmp, &mark).map_err(|err| file_error(&mark, err))
    }

    fn commit(&self) -> Result<(), SearchError> {
        let mut state = self.state();
        let cursor = if state.failed { None } else { state.cursor };
        self.index.commit(cursor)?;
        state.last_commit = Instant::now();
        Ok(())
    }
}

/// The file in the index's directory (which the index's engine leaves alone) naming the
/// store's write sequence the index covered at the last clean exit; see [`mark_current`].
const CURRENT_MARK: &str = "starling-current";

/// The path of the index in `data_dir`.
pub fn search_dir(data_dir: &Path) -> PathBuf {
    data_dir.join(SEARCH_DIR)
}

/// Removes the index from `data_dir`, so that the next [`open`] rebuilds it: for commands that
/// write the store without keeping the index (`starling replay`).
pub fn invalidate(data_dir: &Path) -> Result<(), IngestError> {
    let dir = search_dir(data_dir);
    match std::fs::remove_dir_all(&dir) {
        Ok(()) => Ok(()),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(source) => Err(file_error(&dir, source)),
    }
}

/// Whether the last clean exit marked the index as covering `store` as it stands now.
fn marked_current<S: Store>(store: &S, data_dir: &Path) -> bool {
    let marked = std::fs::read_to_string(search_dir(data_dir).join(CURRENT_MARK)).ok();
    let marked = marked.and_then(|text| text.trim().parse::<u64>().ok());
    marked.is_some() && marked == store.write_seq()
}

fn file_error(path: &Path, source: std::io::Error) -> IngestError {
    IngestError::File {
        path: path.display().to_string(),
        source,
    }
}

fn search_error(err: SearchError) -> IngestError {
    IngestError::Search(err.to_string())
}

/// Opens the index in `data_dir`, rebuilt from `store` unless it covers the store's cursor.
pub fn open<S: Store>(
    store: &S,
    data_dir: &Path,
) -> Result<(Arc<SearchSync>, SearchSource), IngestError> {
    let (index, covered) = SearchIndex::open(&search_dir(data_dir)).map_err(search_error)?;
    let store_cursor = match store.progress(None)? {
        Some(Progress::Live(cursor)) => Some(cursor.0),
        _ => None,
    };
    let sync = Arc::new(SearchSync {
        index: Arc::new(index),
        state: Mutex::new(SyncState {
            cursor: store_cursor,
            failed: false,
            last_commit: Instant::now(),
        }),
    });
    let current = match store_cursor {
        Some(_) => covered == store_cursor,
        None => covered.is_none() && marked_current(store, data_dir),
    };
    if current {
        return Ok((sync, SearchSource::Current));
    }
    let started = Instant::now();
    let n_docs = rebuild(store, &sync.index)?;
    sync.commit().map_err(search_error)?;
    info!(n_docs, elapsed = ?started.elapsed(), "rebuilt the search index from the store");
    Ok((sync, SearchSource::Rebuilt { n_docs }))
}

/// Puts every searchable record and actor of `store` in `index`, emptied first; returns the
/// number of documents.
pub fn rebuild<S: Store>(store: &S, index: &SearchIndex) -> Result<u64, IngestError> {
    index.clear().map_err(search_error)?;
    let mut profiles: FxHashMap<ActorId, String> = FxHashMap::default();
    let mut n_docs = 0u64;
    let mut failed = None;
    store.for_each_searchable(&mut |actor, collection, record| {
        if collection == nsid::PROFILE {
            profiles.insert(actor, record.json);
            return;
        }
        let Some(did) = store.did(actor) else {
            return;
        };
        if let Err(err) = put_record(index, &did, collection, &record) {
            failed.get_or_insert(err);
        }
        n_docs += 1;
    })?;
    if let Some(err) = failed {
        return Err(search_error(err));
    }
    let mut actor_idx = 0u32;
    while let Some(did) = store.did(ActorId(actor_idx)) {
        let doc = actor_doc(
            store,
            &did,
            profiles.get(&ActorId(actor_idx)).map(String::as_str),
        )?;
        if let Some(doc) = doc.filter(ActorDoc::is_searchable) {
            index.put_actor(&doc).map_err(search_error)?;
            n_docs += 1;
        }
        actor_idx += 1;
    }
    Ok(n_docs)
}

/// The document of an actor from its identity and profile, or `None` when its account is gone.
fn actor_doc<S: Store>(
    store: &S,
    did: &str,
    profile_json: Option<&str>,
) -> Result<Option<ActorDoc>, StoreError> {
    let Some(info) = store.actor(did)? else {
        return Ok(None);
    };
    if info.status == AccountStatus::Deleted {
        return Ok(None);
    }
    Ok(Some(ActorDoc::new(
        did,
        info.handle.as_deref(),
        profile_json,
    )))
}

fn put_record(
    index: &SearchIndex,
    did: &str,
    collection: &str,
    record: &starling_store::StoredRecord,
) -> Result<(), SearchError> {
    match collection {
        nsid::POST => index.put_post(&PostDoc::new(
            &record.uri,
            did,
            &record.json,
            record.sort_at_us,
        )),
        nsid::STARTERPACK => index.put_record(&RecordDoc::new(
            RecordKind::StarterPack,
            &record.uri,
            &record.json,
            record.sort_at_us,
        )),
        nsid::GENERATOR => index.put_record(&RecordDoc::new(
            RecordKind::FeedGenerator,
            &record.uri,
            &record.json,
            record.sort_at_us,
        )),
        _ => Ok(()),
    }
}

/// Feeds each committed batch's searchable changes to the index.
pub struct SearchUpdater<S> {
    store: Arc<S>,
    sync: Arc<SearchSync>,
}

impl<S: Store> SearchUpdater<S> {
    /// An updater of `sync`'s index from `store`.
    pub fn new(store: Arc<S>, sync: Arc<SearchSync>) -> Self {
        SearchUpdater { store, sync }
    }

    fn apply_changes(&self, committed: &Committed) -> Result<(), IngestError> {
        let mut seen: FxHashSet<&TouchedRecord> = FxHashSet::default();
        let mut actors: FxHashSet<ActorId> = committed.identities.iter().copied().collect();
        for touched in &committed.searchable {
            if !seen.insert(touched) {
                continue;
            }
            if touched.collection == nsid::PROFILE {
                actors.insert(touched.actor);
                continue;
            }
            let Some(did) = self.store.did(touched.actor) else {
                continue;
            };
            match self.store.record(&did, touched.collection, &touched.rkey)? {
                Some(record) => put_record(self.sync.index(), &did, touched.collection, &record)
                    .map_err(search_error)?,
                None => self.sync.index().delete(&format!(
                    "at://{did}/{}/{}",
                    touched.collection, touched.rkey
                )),
            }
        }
        for actor in actors {
            let Some(did) = self.store.did(actor) else {
                continue;
            };
            let profile = self.store.record(&did, nsid::PROFILE, "self")?;
            let doc = actor_doc(
                &*self.store,
                &did,
                profile.as_ref().map(|p| p.json.as_str()),
            )?;
            match doc {
                Some(doc) => self.sync.index().put_actor(&doc).map_err(search_error)?,
                None => self.sync.index().delete(&did),
            }
        }
        Ok(())
    }
}

impl<S: Store> CommitSink for SearchUpdater<S> {
    fn apply(&mut self, committed: &Committed) {
        let res = self.apply_changes(committed);
        let commit_now = {
            let mut state = self.sync.state();
            if let Err(err) = &res {
                warn!(error = %err, "updating the search index: it is rebuilt at the next start");
                metrics::counter!("starling_search_update_failures_total").increment(1);
                state.failed = true;
            }
            if let Some(cursor) = committed.cursor {
                state.cursor = Some(cursor.0);
            }
            self.sync.index.pending() >= COMMIT_DOCS_MAX
                || state.last_commit.elapsed() >= COMMIT_INTERVAL
        };
        if commit_now && let Err(err) = self.sync.commit_pending() {
            warn!(error = %err, "committing the search index");
            metrics::counter!("starling_search_update_failures_total").increment(1);
            self.sync.state().failed = true;
        }
    }
}

/// Commits the index's pending changes every [`COMMIT_INTERVAL`] on a thread of its own, and
/// once more when stopped.
pub fn start_commits(sync: Arc<SearchSync>) -> Result<Periodic, IngestError> {
    Periodic::start("search-commit", COMMIT_INTERVAL, move || {
        sync.commit_pending().map_err(search_error)?;
        metrics::gauge!("starling_search_documents").set(sync.index.n_docs() as f64);
        Ok(())
    })
}
