//! [`Timelines`]: the heads of active readers, fan-out, fan-in and reads.

use std::cmp::Reverse;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};

use rustc_hash::{FxHashMap, FxHashSet};
use starling_core::ActorId;
use starling_core::feed::{FeedChange, FeedItem, FeedKey};
use starling_graph::{EdgeChange, Graph};

use crate::active::ActiveSet;
use crate::author_heads::AuthorHeads;
use crate::fan_in::{Next, fan_in, merge};
use crate::head::Head;
use crate::lossy;
use crate::own_cap::{Gather, cap_own_items};
use crate::{FeedSource, PAGE_ITEMS_MAX, SourceError, TimelineConfig, TimelineError};

/// Shards of the head map: fan-out locks one shard per follower, readers lock one per read.
const SHARDS: usize = 64;

/// One page of a home timeline.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Page {
    /// Newest first.
    pub items: Vec<FeedItem>,
    /// Where the next page starts; `None` when there is no next page.
    pub cursor: Option<FeedKey>,
}

/// Counts for metrics and `/v1/stats`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct TimelineStats {
    /// Readers with a head in memory.
    pub active_readers: u64,
    /// Items in those heads.
    pub items: u64,
    /// Bytes of item storage in heads and celebrity feeds.
    pub item_bytes: u64,
    /// Authors treated as celebrities.
    pub celebrities: u64,
    /// Readers whose timelines are lossy.
    pub lossy_readers: u64,
    /// Items inserted into heads by fan-out and backfill, since start.
    pub inserts: u64,
    /// Heads built by fan-in, since start.
    pub builds: u64,
    /// Heads dropped to stay within `active_readers_max`, since start.
    pub evictions: u64,
    /// Authors whose newest items the author feed cache holds.
    pub author_heads: u64,
    /// Items in those heads.
    pub author_head_items: u64,
    /// Author heads read from the store, since start.
    pub author_head_fills: u64,
    /// Refreshes of the celebrity and lossy caches, since start.
    pub refreshes: u64,
    /// The newest Jetstream cursor whose batch the timelines have applied: reads reflect every
    /// event up to it.
    pub applied_cursor: Option<u64>,
}

/// What the periodic refresh derives from the graph.
#[derive(Default)]
struct Derived {
    /// Authors above the celebrity threshold, ascending.
    celebrities: Vec<ActorId>,
    celebrity_set: FxHashSet<ActorId>,
    /// Loss factors of readers following more than `reasonable_limit` accounts.
    loss: FxHashMap<ActorId, f32>,
}

impl Derived {
    fn factor(&self, reader: ActorId) -> f32 {
        self.loss.get(&reader).copied().unwrap_or(1.0)
    }

    fn is_celebrity(&self, author: ActorId) -> bool {
        self.celebrity_set.contains(&author)
    }
}

#[derive(Default)]
struct Counters {
    inserts: AtomicU64,
    builds: AtomicU64,
    evictions: AtomicU64,
    refreshes: AtomicU64,
    /// 0 until a batch with a cursor is applied.
    applied_cursor: AtomicU64,
}

/// Home timelines of every reader; share one `Arc<Timelines>` between the ingest thread
/// ([`Timelines::apply`]) and readers ([`Timelines::read`]).
///
/// Consistency: `apply` runs after the store committed a batch and the graph took its changes,
/// and holds `apply_lock` exclusively; a head is built under the shared lock. So a head is
/// either built before a batch's `apply` (which then updates it) or after (and then reads the
/// batch from the store): it never misses a change.
pub struct Timelines {
    config: TimelineConfig,
    graph: Arc<Graph>,
    source: Arc<dyn FeedSource>,
    shards: Box<[Mutex<FxHashMap<ActorId, Head>>; SHARDS]>,
    /// The readers with a head, mirrored for fan-out; changed with the head under its shard.
    active: ActiveSet,
    /// Heads in memory, for `active_readers_max`.
    n_heads: AtomicUsize,
    /// The newest items of each celebrity's own feed.
    celebrity_feeds: RwLock<FxHashMap<ActorId, Head>>,
    /// The newest items of recently read author feeds, for author feed pages; `None` when
    /// `author_heads_items` is 0.
    author_heads: Option<AuthorHeads>,
    derived: RwLock<Derived>,
    apply_lock: RwLock<()>,
    clock: AtomicU64,
    counters: Counters,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

fn read<T>(lock: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    lock.read().unwrap_or_else(|e| e.into_inner())
}

fn write<T>(lock: &RwLock<T>) -> RwLockWriteGuard<'_, T> {
    lock.write().unwrap_or_else(|e| e.into_inner())
}

/// Every shard's guard, held by `apply` for a whole batch.
struct Shards<'a>(Vec<MutexGuard<'a, FxHashMap<ActorId, Head>>>);

impl Shards<'_> {
    fn get_mut(&mut self, reader: ActorId) -> Option<&mut Head> {
        self.0.get_mut(reader.0 as usize % SHARDS)?.get_mut(&reader)
    }
}

/// Newest first, one item per key.
fn sort_newest_first(items: &mut Vec<FeedItem>) {
    items.sort_unstable_by_key(|item| Reverse(item.key));
    items.dedup_by_key(|item| item.key);
}

/// Keeps the newest `want` distinct items of `items`, newest first. A page gathers up to
/// `want` items from the head and from each celebrity followed, so most are dropped: selecting
/// the newest and sorting only those is much cheaper than sorting them all.
fn newest_first(items: &mut Vec<FeedItem>, want: usize) {
    if want > 0 && items.len() > want {
        items.select_nth_unstable_by_key(want - 1, |item| Reverse(item.key));
        let newest = items.get_mut(..want).unwrap_or_default();
        newest.sort_unstable_by_key(|item| Reverse(item.key));
        // The same item from two sources (the head and a celebrity's feed, while a celebrity
        // is promoted) is rare; when it happens the plain way counts the rest right.
        if newest
            .windows(2)
            .all(|pair| pair.first().map(|item| item.key) != pair.get(1).map(|item| item.key))
        {
            items.truncate(want);
            return;
        }
    }
    sort_newest_first(items);
    items.truncate(want);
}

impl Timelines {
    /// Timelines over `graph` and the author feeds of `source`. Call [`Timelines::refresh`]
    /// once the graph is loaded, and then periodically.
    pub fn new(config: TimelineConfig, graph: Arc<Graph>, source: Arc<dyn FeedSource>) -> Self {
        Timelines {
            config,
            graph,
            source,
            shards: Box::new(std::array::from_fn(|_| Mutex::default())),
            active: ActiveSet::default(),
            n_heads: AtomicUsize::new(0),
            celebrity_feeds: RwLock::default(),
            author_heads: (config.author_heads_items > 0)
                .then(|| AuthorHeads::new(config.author_head_length, config.author_heads_items)),
            derived: RwLock::default(),
            apply_lock: RwLock::default(),
            clock: AtomicU64::new(1),
            counters: Counters::default(),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &TimelineConfig {
        &self.config
    }

    /// Author feeds, for author feed pages: read through the author feed cache.
    pub fn source(&self) -> AuthorFeeds<'_> {
        AuthorFeeds(self)
    }

    // The index is reduced modulo the array's length.
    #[allow(clippy::indexing_slicing)]
    fn shard(&self, reader: ActorId) -> &Mutex<FxHashMap<ActorId, Head>> {
        &self.shards[reader.0 as usize % SHARDS]
    }

    /// A page of `reader`'s home timeline: up to `limit` items (at most [`PAGE_ITEMS_MAX`])
    /// older than `cursor`, newest first, with at most as many of the reader's own items as
    /// the AppView's cap allows (see the crate's documentation).
    pub fn read(
        &self,
        reader: ActorId,
        limit: usize,
        cursor: Option<FeedKey>,
    ) -> Result<Page, TimelineError> {
        let _applying = read(&self.apply_lock);
        Ok(self
            .read_locked(reader, limit, cursor, false)?
            .unwrap_or_default())
    }

    /// [`Timelines::read`] if it can be answered from memory right away: the reader has a head
    /// that covers the page, and no batch is being applied. `None` means "call `read`" (on a
    /// thread that may block). Never blocks and never reads the store, so async handlers can
    /// call it directly.
    pub fn read_from_memory(
        &self,
        reader: ActorId,
        limit: usize,
        cursor: Option<FeedKey>,
    ) -> Option<Page> {
        let _applying = self.apply_lock.try_read().ok()?;
        self.read_locked(reader, limit, cursor, true).ok().flatten()
    }

    /// A read under the shared `apply_lock`; with `memory_only`, `None` where the store would
    /// be needed.
    ///
    /// Every source (the head and the author feeds below it, each celebrity's feed) gives the
    /// items a page can need (see [`Gather`]); their merge is then paged with the cap on the
    /// reader's own items ([`cap_own_items`]).
    fn read_locked(
        &self,
        reader: ActorId,
        limit: usize,
        cursor: Option<FeedKey>,
        memory_only: bool,
    ) -> Result<Option<Page>, TimelineError> {
        let limit = limit.clamp(1, PAGE_ITEMS_MAX);
        // One more than asked says whether a next page exists.
        let want = limit + 1;
        let derived = read(&self.derived);
        let factor = derived.factor(reader);
        let keep =
            |item: &FeedItem| item.key.author == reader || lossy::keeps(&item.key, reader, factor);
        let now = self.clock.fetch_add(1, Ordering::Relaxed);
        let mut items = Vec::with_capacity(2 * want);
        let mut gather = Gather::new(reader, limit);
        let state = self.page_from_head(reader, now, cursor, &mut gather, &mut items);
        let (ran_out, floor, celebrities) = match state {
            Some(state) => state,
            None if memory_only => return Ok(None),
            None => {
                let head = self.build(reader, &derived, factor)?;
                let mut shard = lock(self.shard(reader));
                if !shard.contains_key(&reader) {
                    self.make_room(&mut shard);
                    self.n_heads.fetch_add(1, Ordering::Relaxed);
                    self.active.insert(reader);
                }
                let head = shard.entry(reader).or_insert(head);
                head.last_read = now;
                let ran_out =
                    head.page(cursor, |item| gather.offer(item, &mut items) != Next::Done);
                (ran_out, head.floor(), head.celebrities.clone())
            }
        };
        // Below the head: fan-in from the author feeds of the non-celebrities followed.
        if ran_out && let Some(floor) = floor {
            if memory_only {
                return Ok(None);
            }
            let below = cursor.map_or(floor, |cursor| cursor.min(floor));
            let authors = self.fanned_out_authors(reader, &derived);
            merge(
                &*self.source,
                &authors,
                Some(below),
                gather.n_missing(),
                |item| {
                    if keep(item) {
                        gather.offer(item, &mut items)
                    } else {
                        Next::More
                    }
                },
            )?;
        }
        // Celebrities are never fanned out: merge their newest items.
        for celebrity in celebrities {
            if !self.celebrity_page(celebrity, cursor, want, &keep, memory_only, &mut items)? {
                return Ok(None);
            }
        }
        // The items the page rule looks at (up to where `Gather` stops) are at most `want`
        // followed ones and `want` own ones: all among the newest `2 * want`.
        newest_first(&mut items, 2 * want);
        let cursor = cap_own_items(reader, limit, &mut items);
        Ok(Some(Page { items, cursor }))
    }

    /// Pages from `reader`'s head if it has one: whether the head ran out, its floor and the
    /// celebrities the reader follows.
    fn page_from_head(
        &self,
        reader: ActorId,
        now: u64,
        cursor: Option<FeedKey>,
        gather: &mut Gather,
        items: &mut Vec<FeedItem>,
    ) -> Option<(bool, Option<FeedKey>, Vec<ActorId>)> {
        let mut shard = lock(self.shard(reader));
        let head = shard.get_mut(&reader)?;
        head.last_read = now;
        let ran_out = head.page(cursor, |item| gather.offer(item, items) != Next::Done);
        Some((ran_out, head.floor(), head.celebrities.clone()))
    }

    /// Drops the least recently read head of this shard while the heads are at
    /// `active_readers_max`. (An empty shard drops nothing, so the total may pass the limit by
    /// at most one head per shard.)
    fn make_room(&self, shard: &mut FxHashMap<ActorId, Head>) {
        while self.n_heads.load(Ordering::Relaxed) >= self.config.active_readers_max {
            let Some(oldest) = shard
                .iter()
                .min_by_key(|(_, head)| head.last_read)
                .map(|(&reader, _)| reader)
            else {
                break;
            };
            shard.remove(&oldest);
            self.active.remove(oldest);
            self.n_heads.fetch_sub(1, Ordering::Relaxed);
            self.counters.evictions.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The authors whose items are fanned out to `reader`: the non-celebrities followed, and
    /// the reader.
    fn fanned_out_authors(&self, reader: ActorId, derived: &Derived) -> Vec<ActorId> {
        let mut authors = self.graph.following(reader).into_vec();
        authors.retain(|author| !derived.is_celebrity(*author));
        authors.push(reader);
        authors
    }

    /// Builds `reader`'s head by fan-in.
    fn build(
        &self,
        reader: ActorId,
        derived: &Derived,
        factor: f32,
    ) -> Result<Head, TimelineError> {
        let authors = self.fanned_out_authors(reader, derived);
        let length = self.config.length;
        let mut items = Vec::with_capacity(length);
        let keep =
            |item: &FeedItem| item.key.author == reader || lossy::keeps(&item.key, reader, factor);
        fan_in(&*self.source, &authors, None, length, keep, &mut items)?;
        let complete = items.len() < length;
        let mut head = Head::from_newest_first(items, complete, length);
        head.celebrities = self.followed_celebrities(reader, derived);
        self.counters.builds.fetch_add(1, Ordering::Relaxed);
        Ok(head)
    }

    fn followed_celebrities(&self, reader: ActorId, derived: &Derived) -> Vec<ActorId> {
        derived
            .celebrities
            .iter()
            .copied()
            .filter(|&celebrity| celebrity != reader && self.graph.does_follow(reader, celebrity))
            .collect()
    }

    /// Appends a celebrity's items older than `cursor` that `keep` accepts, up to `want`.
    /// Returns `false` when `memory_only` and the page needs the store.
    fn celebrity_page(
        &self,
        celebrity: ActorId,
        cursor: Option<FeedKey>,
        want: usize,
        keep: &impl Fn(&FeedItem) -> bool,
        memory_only: bool,
        items: &mut Vec<FeedItem>,
    ) -> Result<bool, TimelineError> {
        let start = items.len();
        let floor = {
            let feeds = read(&self.celebrity_feeds);
            let Some(feed) = feeds.get(&celebrity) else {
                return Ok(true);
            };
            let ran_out = feed.page(cursor, |item| {
                if keep(item) {
                    items.push(*item);
                }
                items.len() - start < want
            });
            if !ran_out {
                return Ok(true);
            }
            feed.floor()
        };
        if let Some(floor) = floor {
            if memory_only {
                return Ok(false);
            }
            let below = cursor.map_or(floor, |cursor| cursor.min(floor));
            let missing = want - (items.len() - start);
            fan_in(
                &*self.source,
                &[celebrity],
                Some(below),
                missing,
                keep,
                items,
            )?;
        }
        Ok(true)
    }

    /// Applies what a committed batch changed, after the graph took its edge changes.
    pub fn apply(&self, edges: &[EdgeChange], feed: &[FeedChange]) -> Result<(), TimelineError> {
        let _applying = write(&self.apply_lock);
        let derived = read(&self.derived);
        // Readers are shut out by `apply_lock`: take every shard once for the whole batch
        // rather than once per follower (each release is a fence that waits for the insert).
        let mut shards = Shards(self.shards.iter().map(lock).collect());
        for edge in edges {
            match *edge {
                EdgeChange::Follow { actor, subject } => {
                    self.on_follow(&mut shards, actor, subject, &derived)?
                }
                EdgeChange::Unfollow { actor, subject } if actor != subject => {
                    if let Some(head) = shards.get_mut(actor) {
                        head.remove_author(subject);
                        head.celebrities.retain(|&c| c != subject);
                    }
                }
                _ => {}
            }
        }
        for change in feed {
            if let Some(heads) = &self.author_heads {
                heads.apply(change);
            }
            match *change {
                FeedChange::Add(item) => self.fan_out(&mut shards, &item, &derived, true),
                FeedChange::Remove(item) => self.fan_out(&mut shards, &item, &derived, false),
            }
        }
        Ok(())
    }

    /// `reader` now follows `author`: an active reader gets the author's recent items.
    fn on_follow(
        &self,
        shards: &mut Shards<'_>,
        reader: ActorId,
        author: ActorId,
        derived: &Derived,
    ) -> Result<(), TimelineError> {
        if reader == author {
            return Ok(());
        }
        let floor = match shards.get_mut(reader) {
            None => return Ok(()),
            Some(head) if derived.is_celebrity(author) => {
                if let Err(idx) = head.celebrities.binary_search(&author) {
                    head.celebrities.insert(idx, author);
                }
                return Ok(());
            }
            Some(head) => head.floor(),
        };
        let length = self.config.length;
        let mut recent = Vec::new();
        self.source.author_feed(author, None, &mut |item| {
            let wanted = floor.is_none_or(|floor| item.key >= floor);
            if wanted {
                recent.push(item);
            }
            wanted && recent.len() < length
        })?;
        let factor = derived.factor(reader);
        if let Some(head) = shards.get_mut(reader) {
            // The author's older items were left out: the head is exact only down to here.
            if recent.len() == length
                && let Some(oldest) = recent.last()
            {
                head.raise_floor(oldest.key);
            }
            for item in recent {
                if lossy::keeps(&item.key, reader, factor) && head.insert(item, length) {
                    self.counters.inserts.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        Ok(())
    }

    /// Adds (`add`) or removes an item in the heads of its author's followers and the author's
    /// own head, or in the celebrity feed of a celebrity author.
    fn fan_out(&self, shards: &mut Shards<'_>, item: &FeedItem, derived: &Derived, add: bool) {
        let author = item.key.author;
        let length = self.config.length;
        let mut inserts = 0u64;
        let mut update = |head: &mut Head| {
            if add {
                inserts += u64::from(head.insert(*item, length));
            } else {
                head.remove(&item.key);
            }
        };
        if let Some(head) = shards.get_mut(author) {
            update(head);
        }
        if derived.is_celebrity(author) {
            if let Some(feed) = write(&self.celebrity_feeds).get_mut(&author) {
                update(feed);
            }
        } else {
            let followers = self.graph.followers(author);
            let active = self.active.view();
            for &follower in followers.as_slice() {
                if !active.contains(follower)
                    || add && !lossy::keeps(&item.key, follower, derived.factor(follower))
                {
                    continue;
                }
                if let Some(head) = shards.get_mut(follower) {
                    update(head);
                }
            }
        }
        self.counters.inserts.fetch_add(inserts, Ordering::Relaxed);
    }

    /// Recomputes the celebrities and the lossy readers from the graph, and brings the heads
    /// in line: a head whose loss factor changed, or that follows an author who stopped being
    /// a celebrity (whose recent items were never fanned out), is dropped and rebuilt on its
    /// next read; the items of new celebrities leave the heads.
    pub fn refresh(&self) -> Result<(), TimelineError> {
        let threshold = self
            .config
            .celebrity_threshold
            .map_or(usize::MAX, |t| t as usize);
        let limit = self.config.reasonable_limit;
        let high = self
            .graph
            .high_degree(threshold, limit.map_or(usize::MAX, |l| l as usize));
        let mut next = Derived {
            celebrities: high.followed.iter().map(|&(id, _)| id).collect(),
            ..Derived::default()
        };
        next.celebrity_set = next.celebrities.iter().copied().collect();
        if let Some(limit) = limit {
            next.loss = high
                .following
                .iter()
                .map(|&(id, n)| (id, lossy::loss_factor(limit, n)))
                .collect();
        }
        let _applying = write(&self.apply_lock);
        let mut derived = write(&self.derived);
        let demoted: Vec<ActorId> = derived
            .celebrities
            .iter()
            .copied()
            .filter(|c| !next.is_celebrity(*c))
            .collect();
        let promoted: Vec<ActorId> = next
            .celebrities
            .iter()
            .copied()
            .filter(|c| !derived.is_celebrity(*c))
            .collect();
        {
            let mut feeds = write(&self.celebrity_feeds);
            for celebrity in &demoted {
                feeds.remove(celebrity);
            }
            for &celebrity in &promoted {
                let mut items = Vec::new();
                let length = self.config.length;
                fan_in(
                    &*self.source,
                    &[celebrity],
                    None,
                    length,
                    |_| true,
                    &mut items,
                )?;
                let complete = items.len() < length;
                feeds.insert(celebrity, Head::from_newest_first(items, complete, length));
            }
        }
        let celebrities_changed = !demoted.is_empty() || !promoted.is_empty();
        for shard in self.shards.iter() {
            let mut shard = lock(shard);
            shard.retain(|&reader, head| {
                let factor_changed = derived.factor(reader) != next.factor(reader);
                let follows_demoted = demoted
                    .iter()
                    .any(|&celebrity| self.graph.does_follow(reader, celebrity));
                if factor_changed || follows_demoted {
                    self.active.remove(reader);
                    self.n_heads.fetch_sub(1, Ordering::Relaxed);
                    return false;
                }
                if celebrities_changed {
                    head.celebrities = self.followed_celebrities(reader, &next);
                    // A new celebrity's items come from its celebrity feed from now on (which
                    // also takes its deletes); the copies fanned out earlier must go.
                    for &celebrity in &promoted {
                        if celebrity != reader {
                            head.remove_author(celebrity);
                        }
                    }
                }
                true
            });
        }
        *derived = next;
        self.counters.refreshes.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Records that every batch up to Jetstream cursor `cursor` has been applied.
    pub fn mark_applied(&self, cursor: u64) {
        self.counters
            .applied_cursor
            .fetch_max(cursor, Ordering::AcqRel);
    }

    /// Drops every head, author heads too (for tests and benchmarks of cold reads, and after
    /// a batch that could not be applied).
    pub fn drop_heads(&self) {
        if let Some(heads) = &self.author_heads {
            heads.clear();
        }
        for shard in self.shards.iter() {
            let mut shard = lock(shard);
            self.n_heads.fetch_sub(shard.len(), Ordering::Relaxed);
            for reader in shard.keys() {
                self.active.remove(*reader);
            }
            shard.clear();
        }
    }

    /// Counts for metrics.
    pub fn stats(&self) -> TimelineStats {
        let mut stats = TimelineStats::default();
        for shard in self.shards.iter() {
            let shard = lock(shard);
            stats.active_readers += shard.len() as u64;
            for head in shard.values() {
                stats.items += head.len() as u64;
                stats.item_bytes += head.bytes() as u64;
            }
        }
        for feed in read(&self.celebrity_feeds).values() {
            stats.item_bytes += feed.bytes() as u64;
        }
        let derived = read(&self.derived);
        stats.celebrities = derived.celebrities.len() as u64;
        stats.lossy_readers = derived.loss.len() as u64;
        stats.inserts = self.counters.inserts.load(Ordering::Relaxed);
        stats.builds = self.counters.builds.load(Ordering::Relaxed);
        stats.evictions = self.counters.evictions.load(Ordering::Relaxed);
        if let Some(heads) = &self.author_heads {
            (
                stats.author_heads,
                stats.author_head_items,
                stats.author_head_fills,
            ) = heads.stats();
        }
        stats.refreshes = self.counters.refreshes.load(Ordering::Relaxed);
        let applied = self.counters.applied_cursor.load(Ordering::Acquire);
        stats.applied_cursor = (applied > 0).then_some(applied);
        stats
    }
}

/// Author feeds as [`Timelines::source`] gives them: through the author feed cache while no
/// batch is being applied, else (and when the cache is off) straight from the store, so a read
/// never waits for a batch.
pub struct AuthorFeeds<'t>(&'t Timelines);

impl FeedSource for AuthorFeeds<'_> {
    fn author_feed(
        &self,
        author: ActorId,
        below: Option<FeedKey>,
        visit: &mut dyn FnMut(FeedItem) -> bool,
    ) -> Result<(), SourceError> {
        let timelines = self.0;
        let source = &*timelines.source;
        match (&timelines.author_heads, timelines.apply_lock.try_read()) {
            (Some(heads), Ok(_applying)) => heads.author_feed(source, author, below, visit),
            _ => source.author_feed(author, below, visit),
        }
    }

    fn shows_live_post(&self, item: &FeedItem) -> Result<bool, SourceError> {
        self.0.source.shows_live_post(item)
    }
}
