//! `Resolver`: cache, request coalescing and the bound on outbound fetches around `fetch` and
//! `document`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant, SystemTime};

use starling_core::syntax;
use tokio::sync::{OnceCell, Semaphore};

use crate::cache::Cache;
use crate::fetch::{Fetched, Fetcher};
use crate::locate::{PlcBase, Target, locate};
use crate::{ConfigError, IdentityError, document};

/// The public PLC directory.
pub const PLC_URL_DEFAULT: &str = "https://plc.directory";
/// Per fetch: connect, TLS, request and body together.
pub const TIMEOUT_DEFAULT: Duration = Duration::from_secs(3);
/// How long a resolved document is served from the cache. Jetstream `identity` events
/// invalidate entries sooner (`Resolver::invalidate`).
pub const TTL_DEFAULT: Duration = Duration::from_secs(60 * 60);
/// How long "no such DID" is served from the cache: short, so a new account is seen soon.
pub const NEGATIVE_TTL_DEFAULT: Duration = Duration::from_secs(60);
/// The longest accepted `ttl` and `negative_ttl`: a DID document older than this is too likely
/// to have missed a key rotation whose identity event was lost.
pub const TTL_MAX: Duration = Duration::from_secs(30 * 24 * 60 * 60);
/// Cached DIDs. An entry is about 500 bytes (DID twice, handle, packed keys and services), so
/// the default costs about 50 MiB when full.
pub const ENTRIES_MAX_DEFAULT: usize = 100_000;
/// Outbound document fetches running at once.
pub const FETCHES_CONCURRENT_MAX_DEFAULT: usize = 32;
/// Largest accepted document body. Real PLC documents are 500 to 1,000 bytes.
pub const DOCUMENT_BYTES_MAX_DEFAULT: usize = 64 * 1024;

/// What a `Resolver` does, with the defaults above. Every field is a plain value; `Resolver::new`
/// checks them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResolverConfig {
    /// Base URL of the PLC directory; `did:plc:x` is fetched from `{plc_url}/did:plc:x`.
    pub plc_url: String,
    /// Bound on each fetch, and separately on the wait for a fetch slot.
    pub timeout: Duration,
    /// Lifetime of a cached document, at most `TTL_MAX`.
    pub ttl: Duration,
    /// Lifetime of a cached "no document" (HTTP 404 or 410), at most `TTL_MAX`.
    pub negative_ttl: Duration,
    /// Cache capacity in DIDs; the oldest insertion is evicted first. At least 1.
    pub entries_max: usize,
    /// Outbound fetches at once; further misses wait (at most `timeout`) for a slot. At least 1.
    pub fetches_concurrent_max: usize,
    /// Largest document body accepted, in bytes. At least 1.
    pub document_bytes_max: usize,
    /// **Tests only.** Resolve `did:web:127.x.y.z%3APORT` over plain HTTP to that loopback
    /// address, so a local server can stand in for a did:web host. Off, did:web hosts must be
    /// DNS names served over HTTPS from public addresses.
    pub did_web_insecure_loopback: bool,
}

impl Default for ResolverConfig {
    fn default() -> ResolverConfig {
        ResolverConfig {
            plc_url: PLC_URL_DEFAULT.to_owned(),
            timeout: TIMEOUT_DEFAULT,
            ttl: TTL_DEFAULT,
            negative_ttl: NEGATIVE_TTL_DEFAULT,
            entries_max: ENTRIES_MAX_DEFAULT,
            fetches_concurrent_max: FETCHES_CONCURRENT_MAX_DEFAULT,
            document_bytes_max: DOCUMENT_BYTES_MAX_DEFAULT,
            did_web_insecure_loopback: false,
        }
    }
}

/// A resolved DID: the fields of `GetIdentityByDidResponse`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Identity {
    /// The DID (the document's `id`, equal to the DID asked for).
    pub did: String,
    /// The first valid `at://` handle in `alsoKnownAs`, lowercased. Not verified against DNS.
    pub handle: Option<String>,
    /// UTF-8 JSON `{"<fragment>": {"Type": …, "PublicKeyMultibase": …}}` of the verification
    /// methods; `{}` if none.
    pub keys_json: Vec<u8>,
    /// UTF-8 JSON `{"<fragment>": {"Type": …, "URL": …}}` of the services with a string
    /// endpoint; `{}` if none.
    pub services_json: Vec<u8>,
    /// When the document was fetched.
    pub updated: SystemTime,
}

impl Identity {
    /// The `publicKeyMultibase` of the `#atproto` verification method: the key that signs
    /// the account's repository commits.
    pub fn signing_key(&self) -> Option<String> {
        self.packed_field(&self.keys_json, "atproto", "PublicKeyMultibase")
    }

    /// The endpoint of the `#atproto_pds` service: the account's PDS.
    pub fn pds_endpoint(&self) -> Option<String> {
        self.packed_field(&self.services_json, "atproto_pds", "URL")
    }

    fn packed_field(&self, json: &[u8], fragment: &str, field: &str) -> Option<String> {
        let value: serde_json::Value = serde_json::from_slice(json).ok()?;
        let text = value.get(fragment)?.get(field)?.as_str()?;
        (!text.is_empty()).then(|| text.to_owned())
    }
}

/// Where the cache reads the time: the system's monotonic clock, or a clock tests move by hand.
#[derive(Clone, Debug, Default)]
pub enum Clock {
    /// `Instant::now()`.
    #[default]
    System,
    /// Time stands still until `ManualClock::advance`.
    Manual(ManualClock),
}

impl Clock {
    fn now(&self) -> Instant {
        match self {
            Clock::System => Instant::now(),
            Clock::Manual(clock) => clock.now(),
        }
    }
}

/// A clock for tests of expiry. Clones share the time.
#[derive(Clone, Debug)]
pub struct ManualClock {
    start: Instant,
    elapsed_ns: Arc<AtomicU64>,
}

impl ManualClock {
    /// A clock standing at the current instant.
    pub fn new() -> ManualClock {
        ManualClock {
            start: Instant::now(),
            elapsed_ns: Arc::new(AtomicU64::new(0)),
        }
    }

    /// Moves the clock forward by `by`.
    pub fn advance(&self, by: Duration) {
        let by_ns = u64::try_from(by.as_nanos()).unwrap_or(u64::MAX);
        self.elapsed_ns.fetch_add(by_ns, Ordering::SeqCst);
    }

    /// The clock's current instant.
    pub fn now(&self) -> Instant {
        self.start + Duration::from_nanos(self.elapsed_ns.load(Ordering::SeqCst))
    }
}

impl Default for ManualClock {
    fn default() -> ManualClock {
        ManualClock::new()
    }
}

/// Counters and gauges of a `Resolver`, for tests and `/v1/stats`. The same numbers go to
/// Prometheus as `starling_identity_*`.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ResolverStats {
    /// DIDs in the cache, found or not.
    pub cache_entries: usize,
    /// The cache's capacity.
    pub cache_entries_max: usize,
    /// Lookups answered from the cache.
    pub cache_hits: u64,
    /// Lookups that started or joined a fetch.
    pub cache_misses: u64,
    /// Fetches started (requests sent or attempted).
    pub fetches: u64,
    /// DIDs with a fetch registered (running, waiting for a slot, or about to start).
    pub fetches_pending: usize,
    /// Fetches running now.
    pub fetches_in_flight: usize,
    /// Lookups waiting for a fetch slot now: the depth of the fetch queue.
    pub fetches_waiting: usize,
    /// Fetch slots: `fetches_concurrent_max`, the capacity of the fetch queue.
    pub fetch_slots: usize,
}

/// The outcome of one fetch, shared by every lookup that joined it.
type Outcome = Result<Option<Identity>, IdentityError>;

/// A fetch in progress. Lookups of the same DID wait on the same cell; if the lookup running
/// the fetch is cancelled, `OnceCell` hands the fetch to one of the waiters.
type InFlight = Arc<OnceCell<Outcome>>;

/// Resolves DIDs to identities; see the crate doc. Cheap to clone: clones share the cache.
#[derive(Clone)]
pub struct Resolver {
    inner: Arc<Inner>,
}

struct Inner {
    plc: PlcBase,
    did_web_insecure_loopback: bool,
    timeout: Duration,
    ttl: Duration,
    negative_ttl: Duration,
    fetcher: Fetcher,
    fetch_slots: Semaphore,
    fetch_slots_max: usize,
    entries_max: usize,
    n_fetches_waiting: AtomicUsize,
    n_fetches: AtomicU64,
    clock: Clock,
    /// Held only for map operations, never across an `await`.
    state: Mutex<State>,
}

struct State {
    cache: Cache,
    /// At most one fetch per DID; removed when it finishes, is cancelled or is invalidated.
    in_flight: HashMap<Arc<str>, InFlight>,
    n_hits: u64,
    n_misses: u64,
}

/// What a lookup found under the lock.
enum Lookup {
    Cached(Option<Identity>),
    Fetch(InFlight),
}

impl Resolver {
    /// A resolver on the system clock.
    pub fn new(config: ResolverConfig) -> Result<Resolver, ConfigError> {
        Resolver::with_clock(config, Clock::System)
    }

    /// A resolver whose cache expiry reads `clock` (tests pass a `ManualClock`). Fetch
    /// timeouts always use real time.
    pub fn with_clock(config: ResolverConfig, clock: Clock) -> Result<Resolver, ConfigError> {
        let plc = PlcBase::parse(&config.plc_url)?;
        let positive = |key: &'static str, value: usize| {
            if value == 0 {
                return Err(ConfigError::BadLimit {
                    key,
                    value: 0,
                    reason: "must be at least 1",
                });
            }
            Ok(value)
        };
        let entries_max = positive("entries_max", config.entries_max)?;
        let document_bytes_max = positive("document_bytes_max", config.document_bytes_max)?;
        let fetch_slots_max = positive("fetches_concurrent_max", config.fetches_concurrent_max)?;
        if fetch_slots_max > Semaphore::MAX_PERMITS {
            return Err(ConfigError::BadLimit {
                key: "fetches_concurrent_max",
                value: u64::try_from(fetch_slots_max).unwrap_or(u64::MAX),
                reason: "too large for a semaphore",
            });
        }
        for (key, ttl) in [
            ("ttl_secs", config.ttl),
            ("negative_ttl_secs", config.negative_ttl),
        ] {
            if ttl > TTL_MAX {
                return Err(ConfigError::BadLimit {
                    key,
                    value: ttl.as_secs(),
                    reason: "must be at most 30 days (2592000 s)",
                });
            }
        }
        if config.timeout.is_zero() {
            return Err(ConfigError::BadLimit {
                key: "timeout_ms",
                value: 0,
                reason: "must be at least 1",
            });
        }
        let inner = Inner {
            plc,
            did_web_insecure_loopback: config.did_web_insecure_loopback,
            timeout: config.timeout,
            ttl: config.ttl,
            negative_ttl: config.negative_ttl,
            fetcher: Fetcher::new(config.timeout, document_bytes_max)?,
            fetch_slots: Semaphore::new(fetch_slots_max),
            fetch_slots_max,
            entries_max,
            n_fetches_waiting: AtomicUsize::new(0),
            n_fetches: AtomicU64::new(0),
            clock,
            state: Mutex::new(State {
                cache: Cache::new(entries_max),
                in_flight: HashMap::new(),
                n_hits: 0,
                n_misses: 0,
            }),
        };
        metrics::gauge!("starling_identity_cache_entries_capacity").set(entries_max as f64);
        metrics::gauge!("starling_identity_fetch_slots").set(fetch_slots_max as f64);
        Ok(Resolver {
            inner: Arc::new(inner),
        })
    }

    /// The identity of `did`, `Ok(None)` if the directory or host says it has no document
    /// (HTTP 404 or 410), or an error naming `did`. The DID's syntax is checked before any
    /// request. Answers come from the cache when fresh; concurrent lookups of one DID share a
    /// fetch.
    pub async fn resolve(&self, did: &str) -> Result<Option<Identity>, IdentityError> {
        if !syntax::is_valid_did(did) {
            return Err(IdentityError::BadDid { did: did.into() });
        }
        let target = locate(did, &self.inner.plc, self.inner.did_web_insecure_loopback)?;
        let cell = match self.inner.lookup(did) {
            Lookup::Cached(identity) => return Ok(identity),
            Lookup::Fetch(cell) => cell,
        };
        let outcome = cell
            .get_or_init(|| self.inner.fetch_and_store(did, &target, &cell))
            .await;
        outcome.clone()
    }

    /// Whether `did`'s document declares `handle` (compared case-insensitively) as its handle:
    /// its first valid `at://` alias, as the atproto identity spec defines it. `Ok(false)` for
    /// a syntactically invalid handle or a DID without a document. This is the DID-document
    /// half of the bidirectional handle check; the handle → DID half is the caller's (from
    /// identity events, DNS or `/.well-known/atproto-did`).
    pub async fn verify_handle(&self, handle: &str, did: &str) -> Result<bool, IdentityError> {
        if !syntax::is_valid_handle(handle) {
            return Ok(false);
        }
        let Some(identity) = self.resolve(did).await? else {
            return Ok(false);
        };
        let res = identity
            .handle
            .is_some_and(|declared| declared.eq_ignore_ascii_case(handle));
        Ok(res)
    }

    /// Forgets what is known about `did`: the cached answer and any fetch in progress (which
    /// then completes for the lookups already waiting on it, but is not cached). Call it when
    /// Jetstream delivers an `identity` event for `did`.
    pub fn invalidate(&self, did: &str) {
        let mut state = self.inner.lock();
        state.cache.remove(did);
        state.in_flight.remove(did);
        metrics::gauge!("starling_identity_cache_entries").set(state.cache.len() as f64);
    }

    /// Current counters and gauges.
    pub fn stats(&self) -> ResolverStats {
        let inner = &self.inner;
        let state = inner.lock();
        ResolverStats {
            cache_entries: state.cache.len(),
            cache_entries_max: inner.entries_max,
            cache_hits: state.n_hits,
            cache_misses: state.n_misses,
            fetches: inner.n_fetches.load(Ordering::SeqCst),
            fetches_pending: state.in_flight.len(),
            fetches_in_flight: inner
                .fetch_slots_max
                .saturating_sub(inner.fetch_slots.available_permits()),
            fetches_waiting: inner.n_fetches_waiting.load(Ordering::SeqCst),
            fetch_slots: inner.fetch_slots_max,
        }
    }
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock leaves maps that are still consistent (every update
        // is a single insert or remove), so a poisoned lock is used as is.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The cached answer, or the fetch to wait on (joined or newly registered).
    fn lookup(&self, did: &str) -> Lookup {
        let now = self.clock.now();
        let mut state = self.lock();
        if let Some(identity) = state.cache.get(did, now) {
            state.n_hits += 1;
            metrics::counter!("starling_identity_lookups_total", "result" => "hit").increment(1);
            return Lookup::Cached(identity);
        }
        state.n_misses += 1;
        metrics::counter!("starling_identity_lookups_total", "result" => "miss").increment(1);
        // The lookup may have dropped an expired entry.
        metrics::gauge!("starling_identity_cache_entries").set(state.cache.len() as f64);
        let cell = state
            .in_flight
            .entry(did.into())
            .or_insert_with(|| Arc::new(OnceCell::new()));
        Lookup::Fetch(Arc::clone(cell))
    }

    /// Runs the fetch of `cell` and, if `cell` is still the registered fetch for `did` (no
    /// `invalidate` came in between), caches a definite answer. Errors are not cached.
    async fn fetch_and_store(&self, did: &str, target: &Target, cell: &InFlight) -> Outcome {
        let mut registration = Registration {
            inner: self,
            did,
            cell,
            is_armed: true,
        };
        let outcome = self.fetch_identity(did, target).await;
        let outcome_label = match &outcome {
            Ok(Some(_)) => "found",
            Ok(None) => "not_found",
            Err(err) => {
                tracing::debug!(did, error = %err, "did resolution failed");
                "error"
            }
        };
        metrics::counter!("starling_identity_fetches_total", "outcome" => outcome_label)
            .increment(1);
        registration.is_armed = false;
        let now = self.clock.now();
        let mut state = self.lock();
        if !state.unregister(did, cell) {
            return outcome;
        }
        if let Ok(identity) = &outcome {
            let ttl = match identity {
                Some(_) => self.ttl,
                None => self.negative_ttl,
            };
            state.cache.insert(did, identity.clone(), now + ttl);
            metrics::gauge!("starling_identity_cache_entries").set(state.cache.len() as f64);
        }
        outcome
    }

    /// Waits for a fetch slot (at most `timeout`), fetches and parses.
    async fn fetch_identity(&self, did: &str, target: &Target) -> Outcome {
        let waiting = Waiting::new(&self.n_fetches_waiting);
        let permit = tokio::time::timeout(self.timeout, self.fetch_slots.acquire()).await;
        drop(waiting);
        let busy = || IdentityError::Busy {
            did: did.into(),
            timeout_ms: u64::try_from(self.timeout.as_millis()).unwrap_or(u64::MAX),
            slots: self.fetch_slots_max,
        };
        // The semaphore is never closed, so `Ok(Err(_))` cannot happen; it is mapped anyway.
        let Ok(Ok(_permit)) = permit else {
            return Err(busy());
        };
        self.n_fetches.fetch_add(1, Ordering::SeqCst);
        let res = match self.fetcher.fetch(did, target).await? {
            Fetched::NotFound => None,
            Fetched::Document(body) => {
                let packed = document::parse(did, &body)?;
                Some(Identity {
                    did: did.to_owned(),
                    handle: packed.handle,
                    keys_json: packed.keys_json,
                    services_json: packed.services_json,
                    updated: SystemTime::now(),
                })
            }
        };
        Ok(res)
    }
}

impl State {
    /// Removes `cell` as the fetch of `did`; `false` if another fetch (or none) is registered.
    fn unregister(&mut self, did: &str, cell: &InFlight) -> bool {
        let is_current = self
            .in_flight
            .get(did)
            .is_some_and(|current| Arc::ptr_eq(current, cell));
        if is_current {
            self.in_flight.remove(did);
        }
        is_current
    }
}

/// Unregisters a fetch whose future is dropped before it finishes (the lookup was cancelled),
/// so an abandoned fetch never stays in `in_flight`: otherwise lookups cancelled by their
/// callers, one per distinct DID, would grow the map without bound.
struct Registration<'a> {
    inner: &'a Inner,
    did: &'a str,
    cell: &'a InFlight,
    is_armed: bool,
}

impl Drop for Registration<'_> {
    fn drop(&mut self) {
        if self.is_armed {
            self.inner.lock().unregister(self.did, self.cell);
        }
    }
}

/// Counts a lookup waiting for a fetch slot, for as long as it is alive.
struct Waiting<'a>(&'a AtomicUsize);

impl<'a> Waiting<'a> {
    fn new(n_waiting: &'a AtomicUsize) -> Waiting<'a> {
        let depth = n_waiting.fetch_add(1, Ordering::SeqCst) + 1;
        metrics::gauge!("starling_identity_fetch_queue_depth").set(depth as f64);
        Waiting(n_waiting)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        let depth = self.0.fetch_sub(1, Ordering::SeqCst).saturating_sub(1);
        metrics::gauge!("starling_identity_fetch_queue_depth").set(depth as f64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // The defaults are valid, and every limit out of range is refused with an error naming
    // its key.
    #[test]
    fn config_is_checked() {
        assert!(Resolver::new(ResolverConfig::default()).is_ok());
        let bad = [
            (
                "plc_url",
                ResolverConfig {
                    plc_url: "plc.directory".into(),
                    ..Default::default()
                },
            ),
            (
                "entries_max",
                ResolverConfig {
                    entries_max: 0,
                    ..Default::default()
                },
            ),
            (
                "fetches_concurrent_max",
                ResolverConfig {
                    fetches_concurrent_max: 0,
                    ..Default::default()
                },
            ),
            (
                "document_bytes_max",
                ResolverConfig {
                    document_bytes_max: 0,
                    ..Default::default()
                },
            ),
            (
                "timeout_ms",
                ResolverConfig {
                    timeout: Duration::ZERO,
                    ..Default::default()
                },
            ),
            (
                "ttl_secs",
                ResolverConfig {
                    ttl: Duration::MAX,
                    ..Default::default()
                },
            ),
            (
                "negative_ttl_secs",
                ResolverConfig {
                    negative_ttl: TTL_MAX * 2,
                    ..Default::default()
                },
            ),
        ];
        for (key, config) in bad {
            let message = Resolver::new(config).err().unwrap().to_string();
            assert!(message.contains(key), "{key}: {message}");
        }
    }
}
