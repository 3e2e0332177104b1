//! `starling gen`: a seeded generator of a synthetic Bluesky network and its activity, written
//! as Jetstream v1 JSON lines so the same file feeds any dataplane.
//!
//! This crate owns the shape of the generated stream (which events, in which order, with which
//! references), the CID strings of generated records, and the writing of the `.jsonl.zst` file
//! and its summary. The follow graph comes from `starling_graph::synthetic`; the small helpers
//! (TIDs, DIDs, datetimes, the splitmix64 generator) from `starling_core::sample`.
//!
//! # The stream
//!
//! 1. **Actors**: for each actor an `identity` event with its handle (`user{N}.gen.test`) and an
//!    `app.bsky.actor.profile` record (rkey `self`) with a display name and a description.
//! 2. **The follow graph**: the Bluesky-shaped graph of `--follows` edges from
//!    `starling_graph::synthetic`, as `app.bsky.graph.follow` creates. The graph generator
//!    yields edges actor by actor; they are shuffled in windows of [`FOLLOW_WINDOW_MAX`] edges
//!    so an actor's follows are spread over time rather than written in one burst.
//! 3. **Activity**, interleaved: every kind of [`Mix`] drawn with probability proportional to
//!    how many of it are left, so each kind is spread evenly over the phase and the counts are
//!    exact.
//! 4. **Lists**: one per [`ACTORS_PER_LIST`] actors, each an `app.bsky.graph.list` (a curation
//!    list, or one in five a moderation list) by an owner drawn by activity, then one
//!    `app.bsky.graph.listitem` per member (distinct actors other than the owner, uniformly
//!    drawn), then the deletes of 5% of those items (rounded per list). Sizes follow a Pareto
//!    law, `P(size >= s) = 1.5 / s`, capped at [`LIST_MEMBERS_MAX`] and at the network: half
//!    of the lists hold 1 to 3 members, one in a hundred 150 or more, one in a thousand 1,500
//!    or more. The phase has a random stream of its own, so the events before it are what
//!    they were before lists were generated (files of the same flags differ only by the
//!    appended phase).
//!
//! # The mix
//!
//! Per 1,000 activity events (a sample of the real Jetstream firehose is about 67% likes, 12%
//! posts, 10% reposts and 6% follows):
//!
//! | events | kind |
//! |---:|---|
//! | 670 | like |
//! | 120 | post: 54% top-level, 40% replies, 6% quotes (`app.bsky.embed.record`) |
//! | 100 | repost |
//! | 50 | follow (edges of the same synthetic graph, held back from phase 2) |
//! | 12 | unfollow (delete of a live follow) |
//! | 10 | block |
//! | 15 | like delete |
//! | 8 | post delete |
//! | 7 | repost delete |
//! | 8 | profile update |
//!
//! Lists come after the mix, outside it (phase 4):
//!
//! | per 1,000 actors | kind |
//! |---:|---|
//! | 100 | list create (80% curation, 20% moderation) |
//! | ~1,350 | list item create (mean list size ~13.5 at 2,000 actors and more) |
//! | ~60 | list item delete |
//!
//! Everything is derived from the number of posts (`--posts`); `--likes` and `--reposts`
//! override their counts.
//!
//! # Who does what
//!
//! - Actors act with a power law: an actor's activity rank (a seeded permutation) is drawn from
//!   a Zipf law `1 / (rank + 10)`, three times in four, else uniformly. Authors of posts are
//!   drawn half that way and half by follower count (a uniform sample of the graph's follow
//!   subjects), so followed accounts post more.
//! - Likes, reposts, quotes and replies target the [`RECENT_POSTS_MAX`] most recent posts: half
//!   of the time the latest post of an author drawn by follower count, else a recent post with
//!   a skew toward the newest. A reply's root is its parent's root.
//! - An actor likes (or reposts) a post at most once, and blocks an actor at most once; follows
//!   never repeat (they are edges of one graph), so every dataplane counts the same.
//!
//! # References
//!
//! Every reference (like and repost subjects, reply root and parent, quotes, deletes) names a
//! record written earlier in the file and not deleted since, with the CID it was written with.
//! Posts with replies are never deleted, so a thread's root is always live. Records are created
//! with rkey and rev TIDs taken from the event's `time_us`, which increases strictly through the
//! file, so revisions increase per repository.
//!
//! # Time, keys and CIDs
//!
//! `time_us` starts at 2025-01-01T00:00:00Z and grows by 1 to 1,999 µs an event (about 1,000
//! events a second). A record's `createdAt` is up to 250 ms before its event; profiles say
//! their accounts were created before the stream. A record's key is a TID of its event's time,
//! its revision another TID of the same time (another clock id), and its CID is made from a
//! seeded hash of that time (see `cid.rs`): a reference can be rebuilt from (author, time), so
//! no record has to be kept to be referenced later.
//!
//! Same parameters, same bytes (on the same platform: the Zipf draws here and in the graph
//! generator use `f64` `exp`/`ln`, whose last bits may differ between C libraries).
//!
//! # Memory and speed
//!
//! Constant apart from the graph and the lists: the graph generator's per-actor arrays (~16
//! bytes an actor), every list's size (8 bytes a list) and the members of the list being
//! written (at most [`LIST_MEMBERS_MAX`]),
//! the held-back follows (8 bytes each), a window of [`FOLLOW_WINDOW_MAX`] edges, bounded pools
//! of recent posts, likes, reposts and follows, the like and repost pairs of the last two
//! rounds of [`RECENT_POSTS_MAX`] posts, and the set of blocks (8 bytes each).
//!
//! Measured on 2 shared cores (other builds and tests running, load average 4-6): 10,000
//! actors, 300,000 follows, 100,000 posts (1.15M events, 542 MB of JSON, 121 MB zstd) in 3.9 s,
//! 86 MB peak RSS; 100,000 actors, 3M follows, 1M posts (11.5M events, 5.4 GB of JSON, 1.26 GB
//! zstd) in 43.7 s, 92 MB peak RSS. Generation costs ~0.9 µs of CPU an event and compression
//! (zstd level 1, on a second thread) ~0.6 µs.

mod cid;
mod draw;
mod file;
mod generator;

pub use cid::{CID_HEADER, CID_STRING_LEN, decode_base32_lower};
pub use file::{Progress, Report, WriteError, summary_path, write_file, write_to};
pub use generator::lists::{ACTORS_PER_LIST, LIST_MEMBERS_MAX};
pub use generator::{FOLLOW_WINDOW_MAX, Generator, RECENT_POSTS_MAX};

use std::collections::BTreeMap;

use serde::Serialize;

/// What to generate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GenParams {
    /// Actors, each with an identity event and a profile.
    pub n_actors: u32,
    /// Follow edges of the graph phase.
    pub n_follows: u64,
    /// Posts of the activity phase (top-level posts, replies and quotes); every other activity
    /// count is derived from it by the mix.
    pub n_posts: u64,
    /// Likes, instead of the mix's share.
    pub n_likes: Option<u64>,
    /// Reposts, instead of the mix's share.
    pub n_reposts: Option<u64>,
    /// The seed of every random draw.
    pub seed: u64,
}

impl GenParams {
    /// Parameters with the mix's likes and reposts.
    pub fn new(n_actors: u32, n_follows: u64, n_posts: u64, seed: u64) -> GenParams {
        GenParams {
            n_actors,
            n_follows,
            n_posts,
            n_likes: None,
            n_reposts: None,
            seed,
        }
    }

    /// The most follow edges `n_actors` can make: the graph generator caps each actor's
    /// follows at an eighth of the network (and at 200,000).
    pub fn follows_max(&self) -> u64 {
        let params = starling_graph::synthetic::SyntheticParams::new(self.n_actors, 0, self.seed);
        let cap = params
            .out_degree_max
            .min(self.n_actors / 8)
            .max(u32::from(self.n_actors > 1));
        u64::from(self.n_actors) * u64::from(cap)
    }

    /// Checks the parameters; the error names the `starling gen` flag at fault.
    pub fn validate(&self) -> Result<(), ParamsError> {
        if self.n_actors < 2 {
            return Err(ParamsError::TooFewActors(self.n_actors));
        }
        let follows_max = self.follows_max();
        if self.n_follows > follows_max {
            return Err(ParamsError::TooManyFollows {
                follows: self.n_follows,
                actors: self.n_actors,
                follows_max,
            });
        }
        if self.n_posts == 0 {
            for (flag, count) in [("--likes", self.n_likes), ("--reposts", self.n_reposts)] {
                if let Some(count) = count.filter(|&count| count > 0) {
                    return Err(ParamsError::NothingToReference { flag, count });
                }
            }
        }
        Ok(())
    }

    /// How many activity events of each kind to make.
    pub fn plan(&self) -> Mix {
        // Posts are 120 of every 1,000 activity events.
        let share = |per_mille: u64| ratio(self.n_posts, per_mille, 120);
        let replies = ratio(self.n_posts, 40, 100);
        let quotes = ratio(self.n_posts, 6, 100);
        // Follows in the activity phase are edges held back from the graph; never more than
        // the graph can still hold.
        let follows = share(50).min(self.follows_max().saturating_sub(self.n_follows));
        let has_follows = self.n_follows + follows > 0;
        Mix {
            posts: self.n_posts - replies - quotes,
            replies,
            quotes,
            likes: self.n_likes.unwrap_or_else(|| share(670)),
            reposts: self.n_reposts.unwrap_or_else(|| share(100)),
            follows,
            unfollows: if has_follows { share(12) } else { 0 },
            blocks: share(10),
            like_deletes: share(15),
            post_deletes: share(8),
            repost_deletes: share(7),
            profile_updates: share(8),
        }
    }
}

/// `n * num / den`, rounded to nearest, in integers so the plan is the same on every platform.
fn ratio(n: u64, num: u64, den: u64) -> u64 {
    let exact = (u128::from(n) * u128::from(num) + u128::from(den / 2)) / u128::from(den.max(1));
    u64::try_from(exact).unwrap_or(u64::MAX)
}

/// Counts of activity events by kind: the plan, or what was written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Mix {
    /// Top-level posts.
    pub posts: u64,
    /// Posts that reply to another.
    pub replies: u64,
    /// Posts that quote another.
    pub quotes: u64,
    /// Like creates.
    pub likes: u64,
    /// Repost creates.
    pub reposts: u64,
    /// Follow creates.
    pub follows: u64,
    /// Follow deletes.
    pub unfollows: u64,
    /// Block creates.
    pub blocks: u64,
    /// Like deletes.
    pub like_deletes: u64,
    /// Post deletes.
    pub post_deletes: u64,
    /// Repost deletes.
    pub repost_deletes: u64,
    /// Profile updates.
    pub profile_updates: u64,
}

impl Mix {
    /// All activity events.
    pub fn total(&self) -> u64 {
        self.as_array().iter().sum()
    }

    pub(crate) fn from_array(counts: [u64; 12]) -> Mix {
        let [
            posts,
            replies,
            quotes,
            likes,
            reposts,
            follows,
            unfollows,
            blocks,
            like_deletes,
            post_deletes,
            repost_deletes,
            profile_updates,
        ] = counts;
        Mix {
            posts,
            replies,
            quotes,
            likes,
            reposts,
            follows,
            unfollows,
            blocks,
            like_deletes,
            post_deletes,
            repost_deletes,
            profile_updates,
        }
    }

    pub(crate) fn as_array(&self) -> [u64; 12] {
        [
            self.posts,
            self.replies,
            self.quotes,
            self.likes,
            self.reposts,
            self.follows,
            self.unfollows,
            self.blocks,
            self.like_deletes,
            self.post_deletes,
            self.repost_deletes,
            self.profile_updates,
        ]
    }
}

/// Bad generator parameters, named as `starling gen`'s flags.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParamsError {
    /// Fewer than two actors: nobody to follow.
    #[error("`--actors {0}` is too few: a network needs at least 2 actors")]
    TooFewActors(u32),
    /// More follows than the graph generator can make.
    #[error(
        "`--follows {follows}` is more than {actors} actors can make: at most {follows_max} \
         (each actor follows at most an eighth of the network, and at most 200,000 accounts)"
    )]
    TooManyFollows {
        /// The requested follows.
        follows: u64,
        /// The actors.
        actors: u32,
        /// The most follows possible.
        follows_max: u64,
    },
    /// Likes or reposts with no posts to point at.
    #[error("`{flag} {count}` needs posts to point at, but `--posts` is 0")]
    NothingToReference {
        /// The flag.
        flag: &'static str,
        /// Its value.
        count: u64,
    },
}

/// What a generated file holds, written next to it as `FILE.summary.json` so a harness can check
/// a dataplane's counts against it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Summary {
    /// The seed.
    pub seed: u64,
    /// Actors (each has one identity event and one profile).
    pub actors: u32,
    /// Events in the file.
    pub events: u64,
    /// Bytes of JSON in the file, uncompressed.
    pub bytes: u64,
    /// Bytes of the file on disk, when it is zstd-compressed.
    pub compressed_bytes: Option<u64>,
    /// `identity` events.
    pub identity_events: u64,
    /// Commit events by collection, then by operation (`create`, `update`, `delete`).
    pub commits: BTreeMap<String, BTreeMap<String, u64>>,
    /// Follows written in the graph phase.
    pub graph_follows: u64,
    /// What the activity phase wrote, by kind.
    pub activity: Mix,
    /// Activity events planned but not written because nothing could be referenced (for
    /// example more likes than actors × recent posts allows); normally 0.
    pub activity_skipped: u64,
    /// Records alive at the end of the file, by collection.
    pub live: BTreeMap<String, u64>,
}
