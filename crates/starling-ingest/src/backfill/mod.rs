//! Backfill: every repository of the network (or of a directory of CAR files), fetched,
//! verified and applied through the Jetstream path, so the store holds what Jetstream never
//! replays.
//!
//! - Listing: `com.atproto.sync.listRepos` from a relay, paged; inactive accounts are skipped.
//!   Or every `*.car` file of a directory.
//! - Per repository: its DID document (the identity resolver) gives the PDS and the `#atproto`
//!   key; `com.atproto.sync.getRepo` gives the CAR, under a timeout and a size cap; the CAR is
//!   parsed, its MST checked and its commit's signature verified (`starling-repo`); each
//!   record becomes a Jetstream `create` event at the commit's revision. The store's
//!   revision rule then keeps whatever live ingest applied at a later revision: an update or a
//!   delete that came in live is never undone by an older repository.
//! - Durable progress: the batch that holds a repository's last record also stores
//!   `backfill <did>` → the commit's revision, so a rerun after a crash skips exactly the
//!   repositories that are complete, and a repository is never half-marked.
//! - Bounds: repositories in flight overall (`repos_concurrent_max`) and per PDS host
//!   (`repos_per_host_max`); attempts per repository with exponential backoff, `429` waiting
//!   `Retry-After` (capped); one bounded queue of verified repositories to the applying thread.
//! - Bad input is data: a failure is counted per reason in [`BackfillProgress`] and
//!   `starling_backfill_repos_total{outcome}`, logged at `debug`, and the repository is left
//!   unmarked (the next run tries it again); it never stops the backfill.

mod http;

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use starling_identity::Resolver;
use starling_repo::events::{self, Action, CommitOp};
use starling_repo::{PublicKey, RepoError, Repository};
use starling_store::{Progress, Store};
use tokio::sync::{Semaphore, mpsc, watch};
use tracing::{debug, info, warn};

use crate::IngestError;
use crate::applier::{Applier, BatchLimits, CommitSink, next_until_due, now_us};
use http::{GetError, HttpClient};

/// Where repositories come from.
#[derive(Clone, Debug)]
pub enum BackfillSource {
    /// A relay's `listRepos` (`http://` or `https://`), then each repository's PDS.
    Relay(String),
    /// Every `*.car` file of a directory (each a `getRepo` export).
    CarDir(PathBuf),
}

/// How a backfill runs.
#[derive(Clone)]
pub struct BackfillOptions {
    /// Where repositories come from.
    pub source: BackfillSource,
    /// Resolves each DID's document (PDS and signing key).
    pub resolver: Resolver,
    /// Repositories fetched and verified at once, over all hosts.
    pub repos_concurrent_max: usize,
    /// Repositories fetched at once from one PDS host.
    pub repos_per_host_max: usize,
    /// Time allowed for one `getRepo` answer, body included.
    pub repo_timeout: Duration,
    /// The largest repository accepted, in CAR bytes.
    pub repo_bytes_max: usize,
    /// Tries per repository before it is counted as failed.
    pub attempts_max: u32,
    /// First retry delay; doubles per failure up to `backoff_max`.
    pub backoff_min: Duration,
    /// Longest retry delay, and the longest `Retry-After` honoured.
    pub backoff_max: Duration,
    /// Repositories per `listRepos` page.
    pub list_page_max: u32,
    /// Store batches: events per batch and the longest wait.
    pub limits: BatchLimits,
}

impl std::fmt::Debug for BackfillOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BackfillOptions")
            .field("source", &self.source)
            .field("repos_concurrent_max", &self.repos_concurrent_max)
            .field("repos_per_host_max", &self.repos_per_host_max)
            .finish_non_exhaustive()
    }
}

impl BackfillOptions {
    /// Options with the default bounds: 32 repositories at once, 4 per host, 120 s and
    /// 512 MiB per repository, 5 attempts backing off from 500 ms to 60 s, pages of 1,000.
    pub fn new(source: BackfillSource, resolver: Resolver) -> BackfillOptions {
        BackfillOptions {
            source,
            resolver,
            repos_concurrent_max: 32,
            repos_per_host_max: 4,
            repo_timeout: Duration::from_secs(120),
            repo_bytes_max: 512 * 1024 * 1024,
            attempts_max: 5,
            backoff_min: Duration::from_millis(500),
            backoff_max: Duration::from_secs(60),
            list_page_max: 1_000,
            limits: BatchLimits::default(),
        }
    }
}

/// Counts of a running backfill, readable from another thread (a progress bar, metrics).
#[derive(Debug, Default)]
pub struct BackfillProgress {
    /// Repositories listed so far.
    pub repos_listed: AtomicU64,
    /// Repositories applied and marked complete by this run.
    pub repos_done: AtomicU64,
    /// Repositories skipped: complete from an earlier run, or inactive.
    pub repos_skipped: AtomicU64,
    /// Repositories that failed (see `failures`).
    pub repos_failed: AtomicU64,
    /// Records applied.
    pub records: AtomicU64,
    /// CAR bytes fetched and verified.
    pub bytes: AtomicU64,
    /// Nanoseconds spent fetching, verifying and decoding, and applying.
    pub fetch_ns: AtomicU64,
    /// See `fetch_ns`.
    pub verify_ns: AtomicU64,
    /// See `fetch_ns`.
    pub apply_ns: AtomicU64,
    failures: Mutex<BTreeMap<&'static str, u64>>,
}

impl BackfillProgress {
    /// Failed repositories per reason.
    pub fn failures(&self) -> BTreeMap<&'static str, u64> {
        self.failures
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn fail(&self, reason: &'static str, did: &str, detail: &str) {
        debug!(did, reason, detail, "backfill: repository failed");
        self.repos_failed.fetch_add(1, Ordering::Relaxed);
        *self
            .failures
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(reason)
            .or_default() += 1;
        metrics::counter!("starling_backfill_repos_total", "outcome" => reason).increment(1);
    }
}

/// The stored progress name of a repository.
pub fn repo_source(did: &str) -> String {
    format!("backfill {did}")
}

/// A repository to fetch: its DID, or its CAR file; or a repository to fetch again whatever
/// was done before, deleting the stored records it no longer holds (a resync).
enum Job {
    Did(String),
    Car(PathBuf),
    Resync(String),
}

/// A verified repository on its way to the store.
struct Verified {
    did: String,
    /// The commit's revision.
    rev: u64,
    rev_text: String,
    /// A Jetstream `create` event per record.
    lines: Vec<String>,
    /// The collection and record key of each record.
    keys: Vec<(String, String)>,
}

impl Verified {
    /// Adds a `delete` at the commit's revision of each of `stored` (the repository's live
    /// records in the store) that the repository no longer holds. The store's revision rule
    /// keeps any that live ingest wrote at a later revision.
    fn delete_absent(&mut self, stored: Vec<(String, String)>) {
        let held: std::collections::HashSet<&(String, String)> = self.keys.iter().collect();
        let time_us = now_us();
        for (collection, rkey) in stored.iter().filter(|key| !held.contains(key)) {
            let mut line = String::with_capacity(200);
            events::write_commit(
                &CommitOp {
                    did: &self.did,
                    time_us,
                    rev: &self.rev_text,
                    action: Action::Delete,
                    collection,
                    rkey,
                    record: None,
                },
                &mut line,
            );
            self.lines.push(line);
        }
    }
}

/// Runs a backfill to the end of the listing (or until `shutdown`); returns once every
/// verified repository is durable.
pub async fn run_backfill<S: Store + 'static>(
    store: Arc<S>,
    options: BackfillOptions,
    sink: Box<dyn CommitSink + Send>,
    progress: Arc<BackfillProgress>,
    shutdown: watch::Receiver<bool>,
) -> Result<(), IngestError> {
    let client = http_client()?;
    let (job_tx, job_rx) = mpsc::channel::<Job>(options.repos_concurrent_max.max(1) * 4);
    let lister = tokio::spawn(list(
        options.clone(),
        client.clone(),
        job_tx,
        progress.clone(),
        shutdown.clone(),
    ));
    run_jobs(store, options, client, sink, progress, job_rx, shutdown).await?;
    lister.await.map_err(|err| IngestError::Task {
        what: "backfill lister",
        reason: err.to_string(),
    })?
}

/// Resyncs each repository whose DID arrives on `dids` until the channel closes: fetched and
/// verified as in a backfill, even if a backfill completed it, then applied at its commit's
/// revision together with a `delete` of every stored record it no longer holds, so that
/// after a break in its commit chain the store holds what the repository holds (and whatever
/// live ingest wrote at later revisions).
pub async fn run_resync<S: Store + 'static>(
    store: Arc<S>,
    options: BackfillOptions,
    sink: Box<dyn CommitSink + Send>,
    progress: Arc<BackfillProgress>,
    mut dids: mpsc::Receiver<String>,
    shutdown: watch::Receiver<bool>,
) -> Result<(), IngestError> {
    let client = http_client()?;
    let (job_tx, job_rx) = mpsc::channel::<Job>(options.repos_concurrent_max.max(1));
    let feeder = tokio::spawn(async move {
        while let Some(did) = dids.recv().await {
            if job_tx.send(Job::Resync(did)).await.is_err() {
                break;
            }
        }
    });
    let res = run_jobs(store, options, client, sink, progress, job_rx, shutdown).await;
    feeder.abort();
    res
}

fn http_client() -> Result<HttpClient, IngestError> {
    HttpClient::new().map_err(|err| IngestError::Task {
        what: "backfill HTTP client",
        reason: err.to_string(),
    })
}

/// Fetches, verifies and applies the repositories of `jobs` until the channel closes (or
/// `shutdown`); returns once every verified repository is durable.
async fn run_jobs<S: Store + 'static>(
    store: Arc<S>,
    options: BackfillOptions,
    client: HttpClient,
    mut sink: Box<dyn CommitSink + Send>,
    progress: Arc<BackfillProgress>,
    job_rx: mpsc::Receiver<Job>,
    shutdown: watch::Receiver<bool>,
) -> Result<(), IngestError> {
    let (verified_tx, verified_rx) = mpsc::channel::<Verified>(options.repos_concurrent_max.max(1));
    let apply_store = store.clone();
    let apply_progress = progress.clone();
    let limits = options.limits;
    let handle = tokio::runtime::Handle::current();
    let applier = std::thread::Builder::new()
        .name("backfill-applier".to_owned())
        .spawn(move || {
            apply_loop(
                &*apply_store,
                limits,
                &mut *sink,
                &apply_progress,
                verified_rx,
                &handle,
            )
        })
        .map_err(|err| IngestError::Task {
            what: "backfill applier thread",
            reason: err.to_string(),
        })?;
    let workers = Workers {
        store,
        options: Arc::new(options),
        client,
        progress,
        hosts: Arc::new(Mutex::new(HashMap::new())),
    };
    let worked = workers.run(job_rx, verified_tx, shutdown).await;
    let applied = match tokio::task::spawn_blocking(move || applier.join()).await {
        Ok(Ok(res)) => res,
        Ok(Err(_)) | Err(_) => Err(IngestError::ApplierPanicked),
    };
    worked?;
    applied
}

/// The `listRepos` answer, as far as it is read.
#[derive(serde::Deserialize)]
struct ListPage {
    cursor: Option<String>,
    #[serde(default)]
    repos: Vec<ListedRepo>,
}

#[derive(serde::Deserialize)]
struct ListedRepo {
    did: String,
    #[serde(default = "active_default")]
    active: bool,
}

fn active_default() -> bool {
    true
}

/// The largest `listRepos` page body accepted.
const LIST_PAGE_BYTES_MAX: usize = 16 * 1024 * 1024;

/// Lists the repositories into `jobs`, then closes it.
async fn list(
    options: BackfillOptions,
    client: HttpClient,
    jobs: mpsc::Sender<Job>,
    progress: Arc<BackfillProgress>,
    shutdown: watch::Receiver<bool>,
) -> Result<(), IngestError> {
    let relay = match &options.source {
        BackfillSource::CarDir(dir) => return list_cars(dir, &jobs, &progress).await,
        BackfillSource::Relay(relay) => relay.trim_end_matches('/').to_owned(),
    };
    let mut cursor: Option<String> = None;
    loop {
        if *shutdown.borrow() {
            return Ok(());
        }
        let mut url = format!(
            "{relay}/xrpc/com.atproto.sync.listRepos?limit={}",
            options.list_page_max
        );
        if let Some(cursor) = &cursor {
            url.push_str("&cursor=");
            url.push_str(&percent_encode(cursor));
        }
        let body = get_with_retries(&client, &url, &options, LIST_PAGE_BYTES_MAX)
            .await
            .map_err(|reason| IngestError::Task {
                what: "listing repositories",
                reason: format!("{url}: {reason}"),
            })?;
        let page: ListPage = serde_json::from_slice(&body).map_err(|err| IngestError::Task {
            what: "listing repositories",
            reason: format!("{url}: the answer is not a listRepos page: {err}"),
        })?;
        let n_repos = page.repos.len();
        for repo in page.repos {
            progress.repos_listed.fetch_add(1, Ordering::Relaxed);
            if !repo.active {
                progress.repos_skipped.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            if jobs.send(Job::Did(repo.did)).await.is_err() {
                return Ok(());
            }
        }
        match page.cursor {
            Some(next) if n_repos > 0 && cursor.as_ref() != Some(&next) => cursor = Some(next),
            _ => return Ok(()),
        }
    }
}

/// Escapes what a cursor may hold that a query string must not.
fn percent_encode(text: &str) -> String {
    let mut res = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~:".contains(&byte) {
            res.push(char::from(byte));
        } else {
            res.push_str(&format!("%{byte:02X}"));
        }
    }
    res
}

async fn list_cars(
    dir: &std::path::Path,
    jobs: &mpsc::Sender<Job>,
    progress: &BackfillProgress,
) -> Result<(), IngestError> {
    let file_error = |source| IngestError::File {
        path: dir.display().to_string(),
        source,
    };
    let mut paths = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(file_error)? {
        let path = entry.map_err(file_error)?.path();
        if path.extension().is_some_and(|ext| ext == "car") {
            paths.push(path);
        }
    }
    paths.sort();
    for path in paths {
        progress.repos_listed.fetch_add(1, Ordering::Relaxed);
        if jobs.send(Job::Car(path)).await.is_err() {
            return Ok(());
        }
    }
    Ok(())
}

/// Why a fetch gave up, as a failure label.
fn get_failure(err: &GetError) -> &'static str {
    match err {
        GetError::BadUrl(_) => "bad_pds",
        GetError::Timeout => "timeout",
        GetError::TooLarge => "too_large",
        GetError::Failed(_) => "unavailable",
    }
}

/// GETs `url` until it answers 200, at most `attempts_max` times: 429 waits `Retry-After`
/// (capped by `backoff_max`), a 5xx, a timeout or a failed connection back off
/// exponentially; any other status, or a body over the cap, fails at once.
async fn get_with_retries(
    client: &HttpClient,
    url: &str,
    options: &BackfillOptions,
    body_bytes_max: usize,
) -> Result<hyper::body::Bytes, &'static str> {
    let mut backoff = options.backoff_min;
    let mut last = "unavailable";
    for attempt in 1..=options.attempts_max.max(1) {
        let wait = match client.get(url, options.repo_timeout, body_bytes_max).await {
            Ok(answer) if answer.status == 200 => return Ok(answer.body),
            Ok(answer) if answer.status == 429 => {
                metrics::counter!("starling_backfill_rate_limited_total").increment(1);
                last = "rate_limited";
                answer
                    .retry_after
                    .unwrap_or(backoff)
                    .min(options.backoff_max)
            }
            Ok(answer) if answer.status >= 500 => {
                last = "unavailable";
                backoff
            }
            Ok(answer) if answer.status == 404 || answer.status == 400 => return Err("not_found"),
            Ok(_) => return Err("http_status"),
            Err(GetError::TooLarge) => return Err("too_large"),
            Err(err @ GetError::BadUrl(_)) => return Err(get_failure(&err)),
            Err(err) => {
                debug!(url, attempt, error = %err, "backfill: fetch failed");
                last = get_failure(&err);
                backoff
            }
        };
        if attempt < options.attempts_max {
            tokio::time::sleep(wait).await;
            backoff = (backoff * 2).min(options.backoff_max);
        }
    }
    Err(last)
}

/// Fetches and verifies repositories, bounded overall and per host.
struct Workers<S: Store> {
    store: Arc<S>,
    options: Arc<BackfillOptions>,
    client: HttpClient,
    progress: Arc<BackfillProgress>,
    /// One semaphore per PDS host (`host:port`).
    hosts: Arc<Mutex<HashMap<String, Arc<Semaphore>>>>,
}

impl<S: Store> Clone for Workers<S> {
    fn clone(&self) -> Self {
        Workers {
            store: self.store.clone(),
            options: self.options.clone(),
            client: self.client.clone(),
            progress: self.progress.clone(),
            hosts: self.hosts.clone(),
        }
    }
}

impl<S: Store + 'static> Workers<S> {
    async fn run(
        &self,
        mut jobs: mpsc::Receiver<Job>,
        verified: mpsc::Sender<Verified>,
        shutdown: watch::Receiver<bool>,
    ) -> Result<(), IngestError> {
        let slots = Arc::new(Semaphore::new(self.options.repos_concurrent_max.max(1)));
        let mut tasks = tokio::task::JoinSet::new();
        while let Some(job) = jobs.recv().await {
            if *shutdown.borrow() {
                break;
            }
            let Ok(slot) = slots.clone().acquire_owned().await else {
                break;
            };
            let workers = self.clone();
            let verified = verified.clone();
            tasks.spawn(async move {
                let _slot = slot;
                workers.process(job, &verified).await
            });
            // Reap finished tasks as we go, so that a store error surfaces early.
            while let Some(done) = tasks.try_join_next() {
                flatten(done)?;
            }
        }
        while let Some(done) = tasks.join_next().await {
            flatten(done)?;
        }
        Ok(())
    }

    async fn process(
        &self,
        job: Job,
        verified: &mpsc::Sender<Verified>,
    ) -> Result<(), IngestError> {
        let repo = match job {
            Job::Did(did) => {
                if self.is_done(&did).await? {
                    self.progress.repos_skipped.fetch_add(1, Ordering::Relaxed);
                    metrics::counter!("starling_backfill_repos_total", "outcome" => "skipped")
                        .increment(1);
                    return Ok(());
                }
                self.fetch_and_verify(did).await
            }
            Job::Car(path) => self.read_and_verify(path).await?,
            Job::Resync(did) => {
                let store = self.store.clone();
                let owner = did.clone();
                let stored = tokio::task::spawn_blocking(move || store.live_record_keys(&owner))
                    .await
                    .map_err(|err| IngestError::Task {
                        what: "resync record listing",
                        reason: err.to_string(),
                    })??;
                let mut repo = self.fetch_and_verify(did).await;
                if let Some(repo) = &mut repo {
                    repo.delete_absent(stored);
                }
                repo
            }
        };
        if let Some(repo) = repo {
            // The applier stopped only on a store error, which its own result reports.
            let _ = verified.send(repo).await;
        }
        Ok(())
    }

    async fn is_done(&self, did: &str) -> Result<bool, IngestError> {
        let store = self.store.clone();
        let source = repo_source(did);
        let res = tokio::task::spawn_blocking(move || store.progress(Some(&source)))
            .await
            .map_err(|err| IngestError::Task {
                what: "backfill progress read",
                reason: err.to_string(),
            })??;
        Ok(matches!(res, Some(Progress::File { .. })))
    }

    /// The PDS endpoint and signing key of `did`, or the failure already counted.
    async fn identity(&self, did: &str) -> Option<(Option<String>, PublicKey)> {
        let identity = match self.options.resolver.resolve(did).await {
            Ok(Some(identity)) => identity,
            Ok(None) => {
                self.progress.fail("no_identity", did, "no DID document");
                return None;
            }
            Err(err) => {
                self.progress.fail("no_identity", did, &err.to_string());
                return None;
            }
        };
        let Some(multibase) = identity.signing_key() else {
            self.progress.fail("bad_key", did, "no #atproto key");
            return None;
        };
        match PublicKey::from_multikey(&multibase) {
            Ok(key) => Some((identity.pds_endpoint(), key)),
            Err(err) => {
                self.progress.fail(err.reason(), did, &err.to_string());
                None
            }
        }
    }

    async fn fetch_and_verify(&self, did: String) -> Option<Verified> {
        let (pds, key) = self.identity(&did).await?;
        let Some(pds) = pds else {
            self.progress
                .fail("no_pds", &did, "no #atproto_pds service");
            return None;
        };
        let host = pds
            .split("://")
            .nth(1)
            .unwrap_or(&pds)
            .split('/')
            .next()
            .unwrap_or_default()
            .to_owned();
        let host_slots = {
            let mut hosts = self.hosts.lock().unwrap_or_else(PoisonError::into_inner);
            hosts
                .entry(host)
                .or_insert_with(|| Arc::new(Semaphore::new(self.options.repos_per_host_max.max(1))))
                .clone()
        };
        let url = format!(
            "{}/xrpc/com.atproto.sync.getRepo?did={did}",
            pds.trim_end_matches('/')
        );
        let started = Instant::now();
        let body = {
            let _host_slot = host_slots.acquire_owned().await.ok()?;
            get_with_retries(
                &self.client,
                &url,
                &self.options,
                self.options.repo_bytes_max,
            )
            .await
        };
        self.progress
            .fetch_ns
            .fetch_add(started.elapsed().as_nanos() as u64, Ordering::Relaxed);
        let body = match body {
            Ok(body) => body,
            Err(reason) => {
                self.progress.fail(reason, &did, &url);
                return None;
            }
        };
        self.verify(body.to_vec(), Some(did), Some(key)).await
    }

    async fn read_and_verify(&self, path: PathBuf) -> Result<Option<Verified>, IngestError> {
        let bytes = std::fs::read(&path).map_err(|source| IngestError::File {
            path: path.display().to_string(),
            source,
        })?;
        if bytes.len() > self.options.repo_bytes_max {
            self.progress.fail(
                "too_large",
                &path.display().to_string(),
                "over the size cap",
            );
            return Ok(None);
        }
        // The DID comes from the commit; the key from its document; the signature is then
        // checked as for a fetched repository.
        let did = match Repository::parse(&bytes) {
            Ok(repo) => repo.commit().did.clone(),
            Err(err) => {
                self.progress
                    .fail(err.reason(), &path.display().to_string(), &err.to_string());
                return Ok(None);
            }
        };
        if self.is_done(&did).await? {
            self.progress.repos_skipped.fetch_add(1, Ordering::Relaxed);
            return Ok(None);
        }
        let Some((_, key)) = self.identity(&did).await else {
            return Ok(None);
        };
        Ok(self.verify(bytes, Some(did), Some(key)).await)
    }

    /// Parses, checks and converts a CAR on a blocking thread.
    async fn verify(
        &self,
        bytes: Vec<u8>,
        did: Option<String>,
        key: Option<PublicKey>,
    ) -> Option<Verified> {
        let (did, key) = (did?, key?);
        let progress = self.progress.clone();
        let started = Instant::now();
        let n_bytes = bytes.len() as u64;
        let res = tokio::task::spawn_blocking(move || {
            let res = verified_events(&bytes, &did, &key);
            (did, res)
        })
        .await;
        progress
            .verify_ns
            .fetch_add(started.elapsed().as_nanos() as u64, Ordering::Relaxed);
        match res {
            Ok((did, Ok(repo))) => {
                progress.bytes.fetch_add(n_bytes, Ordering::Relaxed);
                Some(Verified {
                    did,
                    rev: repo.rev,
                    rev_text: repo.rev_text,
                    lines: repo.lines,
                    keys: repo.keys,
                })
            }
            Ok((did, Err(err))) => {
                progress.fail(err.reason(), &did, &err.to_string());
                None
            }
            Err(err) => {
                warn!(error = %err, "backfill: a verification task failed");
                None
            }
        }
    }
}

fn flatten(
    done: Result<Result<(), IngestError>, tokio::task::JoinError>,
) -> Result<(), IngestError> {
    done.map_err(|err| IngestError::Task {
        what: "backfill worker",
        reason: err.to_string(),
    })?
}

/// A repository export, checked and converted.
#[derive(Debug)]
pub struct RepoEvents {
    /// The commit's revision: its value and its text.
    pub rev: u64,
    /// See `rev`.
    pub rev_text: String,
    /// A Jetstream `create` event per record, at the commit's revision.
    pub lines: Vec<String>,
    /// The collection and record key of each record, in the order of `lines`.
    pub keys: Vec<(String, String)>,
}

/// Checks a repository export against `did` and `key` and writes every record as a Jetstream
/// `create` event at the commit's revision; any bad record refuses the whole repository.
pub fn verified_events(bytes: &[u8], did: &str, key: &PublicKey) -> Result<RepoEvents, RepoError> {
    let repo = Repository::parse(bytes)?;
    repo.verify(did, key)?;
    let commit = repo.commit();
    let time_us = now_us();
    let mut lines = Vec::with_capacity(repo.leaves().len());
    let mut keys = Vec::with_capacity(repo.leaves().len());
    let mut json = String::new();
    for leaf in repo.leaves() {
        json.clear();
        repo.record_json(leaf, &mut json)?;
        let (collection, rkey) = leaf.split();
        let cid = leaf.cid.to_string();
        let mut line = String::with_capacity(json.len() + 200);
        events::write_commit(
            &CommitOp {
                did,
                time_us,
                rev: &commit.rev,
                action: Action::Create,
                collection,
                rkey,
                record: Some((&cid, &json)),
            },
            &mut line,
        );
        lines.push(line);
        keys.push((collection.to_owned(), rkey.to_owned()));
    }
    Ok(RepoEvents {
        rev: commit.rev_value,
        rev_text: commit.rev.clone(),
        lines,
        keys,
    })
}

/// Applies verified repositories in batches: a batch commits when it is full or
/// `limits.wait_max` after its first repository, not each time the queue runs dry, so that the
/// durable write (an fsync) is paid per batch of many repositories rather than per repository
/// when fetching is slower than applying.
fn apply_loop<S: Store>(
    store: &S,
    limits: BatchLimits,
    sink: &mut dyn CommitSink,
    progress: &BackfillProgress,
    mut rx: mpsc::Receiver<Verified>,
    handle: &tokio::runtime::Handle,
) -> Result<(), IngestError> {
    let mut applier = Applier::new(store, sink, limits)?;
    let mut pending = Pending::default();
    loop {
        let next = next_until_due(applier.due_at(), &mut rx, handle);
        match next {
            Some(Some(repo)) => {
                let started = Instant::now();
                for line in &repo.lines {
                    applier.push(line.as_bytes())?;
                }
                applier.add_source_progress(repo_source(&repo.did), repo.rev);
                pending.n_repos += 1;
                pending.n_records += repo.lines.len() as u64;
                progress
                    .apply_ns
                    .fetch_add(started.elapsed().as_nanos() as u64, Ordering::Relaxed);
            }
            Some(None) => break,
            None => {}
        }
        if applier.is_full() || applier.is_due(Instant::now()) {
            commit(&mut applier, progress, &mut pending)?;
        }
    }
    if pending.n_repos > 0 {
        commit(&mut applier, progress, &mut pending)?;
    }
    store.sync()?;
    info!("backfill: applied");
    Ok(())
}

/// What the open batch holds.
#[derive(Default)]
struct Pending {
    n_repos: u64,
    n_records: u64,
}

/// Commits the open batch and counts what it made durable.
fn commit<S: Store>(
    applier: &mut Applier<'_, '_, S>,
    progress: &BackfillProgress,
    pending: &mut Pending,
) -> Result<(), IngestError> {
    let started = Instant::now();
    applier.commit(None)?;
    progress
        .apply_ns
        .fetch_add(started.elapsed().as_nanos() as u64, Ordering::Relaxed);
    info!(
        repos = pending.n_repos,
        records = pending.n_records,
        "backfill: batch committed"
    );
    progress
        .repos_done
        .fetch_add(pending.n_repos, Ordering::Relaxed);
    progress
        .records
        .fetch_add(pending.n_records, Ordering::Relaxed);
    metrics::counter!("starling_backfill_repos_total", "outcome" => "done")
        .increment(pending.n_repos);
    metrics::counter!("starling_backfill_records_total").increment(pending.n_records);
    *pending = Pending::default();
    Ok(())
}
