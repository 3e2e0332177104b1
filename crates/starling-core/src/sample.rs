//! A small deterministic sample network, written as Jetstream v1 JSON lines.
//!
//! It lets `starling serve --demo` and tests run without any recorded data: actors with handles
//! and profiles, follows with a skew toward a few popular accounts, posts, replies, quotes,
//! likes, reposts, blocks, and some deletes. The same parameters always give the same bytes.

use crate::hash::{GOLDEN_GAMMA, mix64};

/// What to generate.
#[derive(Clone, Copy, Debug)]
pub struct SampleParams {
    /// Actors in the network.
    pub n_actors: u32,
    /// The random seed.
    pub seed: u64,
}

/// The first `time_us` of the sample: 2024-09-01T00:00:00Z.
const START_TIME_US: u64 = 1_725_148_800_000_000;

/// A splitmix64 generator: tiny, fast, and good enough for test data.
pub struct SplitMix64(u64);

impl SplitMix64 {
    /// A generator seeded with `seed`.
    pub fn new(seed: u64) -> SplitMix64 {
        SplitMix64(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(GOLDEN_GAMMA);
        mix64(self.0)
    }

    /// A number in `0..n` (`n > 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        assert!(n > 0, "empty range");
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }

    /// A number in `0..n`, skewed toward small values: popular accounts have low indexes.
    pub fn skewed_below(&mut self, n: u64) -> u64 {
        let x = (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
        ((x * x * x) * n as f64) as u64 % n.max(1)
    }
}

/// Encodes a TID: 53 bits of microseconds and 10 bits of clock id, base32-sortable.
pub fn tid(micros: u64, clock_id: u16) -> String {
    crate::syntax::format_tid(((micros & ((1 << 53) - 1)) << 10) | u64::from(clock_id & 0x3ff))
}

/// A `did:plc` for actor number `idx`: 17 characters of hash, then `idx` in base32, so that
/// DIDs look random but never collide.
pub fn did(idx: u32) -> String {
    const ALPHABET: &[u8; 32] = b"abcdefghijklmnopqrstuvwxyz234567";
    let char_of =
        |value: u64| char::from(ALPHABET.get((value & 31) as usize).copied().unwrap_or(b'a'));
    let mut res = String::with_capacity(32);
    res.push_str("did:plc:");
    let mut hash = SplitMix64::new(u64::from(idx));
    let mut bits = hash.next_u64();
    for _ in 0..17 {
        res.push(char_of(bits));
        bits >>= 3;
    }
    for shift in (0..7).rev() {
        res.push(char_of(u64::from(idx) >> (shift * 5)));
    }
    res
}

/// Formats microseconds since the epoch as an atproto datetime (`2024-09-01T00:00:00.000000Z`).
pub fn datetime(micros: u64) -> String {
    let secs = micros / 1_000_000;
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Howard Hinnant's civil-from-days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:06}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        micros % 1_000_000
    )
}

fn cid(rng: &mut SplitMix64) -> String {
    let mut res = String::from("bafyrei");
    for _ in 0..52 {
        let digit = rng.below(32) as usize;
        res.push(char::from(
            b"abcdefghijklmnopqrstuvwxyz234567"
                .get(digit)
                .copied()
                .unwrap_or(b'a'),
        ));
    }
    res
}

struct Writer {
    rng: SplitMix64,
    time_us: u64,
    lines: Vec<String>,
    posts: Vec<(u32, String)>,
}

impl Writer {
    fn tick(&mut self) -> u64 {
        self.time_us += 1 + self.rng.below(2_000);
        self.time_us
    }

    fn commit(&mut self, actor: u32, collection: &str, rkey: &str, record: Option<&str>) {
        let time_us = self.tick();
        let rev = tid(time_us, (actor % 1024) as u16);
        let did = did(actor);
        let line = match record {
            Some(record) => {
                let cid = cid(&mut self.rng);
                create_line(&did, time_us, &rev, collection, rkey, record, &cid)
            }
            None => delete_line(&did, time_us, &rev, collection, rkey),
        };
        self.lines.push(line);
    }

    fn new_rkey(&mut self, actor: u32) -> String {
        tid(self.time_us + 1, (actor % 1024) as u16)
    }
}

/// The Jetstream line of a commit that creates `record` (its JSON).
pub fn create_line(
    did: &str,
    time_us: u64,
    rev: &str,
    collection: &str,
    rkey: &str,
    record: &str,
    cid: &str,
) -> String {
    format!(
        r#"{{"did":"{did}","time_us":{time_us},"kind":"commit","commit":{{"rev":"{rev}","operation":"create","collection":"{collection}","rkey":"{rkey}","record":{record},"cid":"{cid}"}}}}"#
    )
}

/// The Jetstream line of a commit that deletes a record.
fn delete_line(did: &str, time_us: u64, rev: &str, collection: &str, rkey: &str) -> String {
    format!(
        r#"{{"did":"{did}","time_us":{time_us},"kind":"commit","commit":{{"rev":"{rev}","operation":"delete","collection":"{collection}","rkey":"{rkey}"}}}}"#
    )
}

/// Deletes of every second record that the commits of `lines` name and `is_live` (did,
/// collection, rkey) says a store holds, in record order, each at a revision newer than any
/// sample event's: for tests that delete part of a store and compare it with another. A line
/// that does not decode names no record.
pub fn delete_every_second(
    lines: &[String],
    is_live: impl Fn(&str, &str, &str) -> bool,
) -> Vec<String> {
    let mut live = std::collections::BTreeSet::new();
    for line in lines {
        let Ok(event) = crate::jetstream::decode_str(line) else {
            continue;
        };
        if let crate::jetstream::Body::Commit(commit) = &event.body
            && is_live(&event.did, &commit.collection, &commit.rkey)
        {
            live.insert((
                event.did.to_string(),
                commit.collection.to_string(),
                commit.rkey.to_string(),
            ));
        }
    }
    let time_us = 1_900_000_000_000_000u64;
    live.iter()
        .step_by(2)
        .enumerate()
        .map(|(at, (did, collection, rkey))| {
            let rev = tid(time_us + at as u64, 0);
            delete_line(did, time_us, &rev, collection, rkey)
        })
        .collect()
}

/// Generates the sample events, one JSON object per string, in `time_us` order.
pub fn events(params: &SampleParams) -> Vec<String> {
    let n = params.n_actors.max(2);
    let mut w = Writer {
        rng: SplitMix64::new(params.seed),
        time_us: START_TIME_US,
        lines: Vec::new(),
        posts: Vec::new(),
    };
    for actor in 0..n {
        let time_us = w.tick();
        let did = did(actor);
        w.lines.push(format!(
            r#"{{"did":"{did}","time_us":{time_us},"kind":"identity","identity":{{"did":"{did}","handle":"user{actor}.sample.starling.test","seq":{time_us},"time":"{}"}}}}"#,
            datetime(time_us)
        ));
        let created = datetime(w.time_us);
        let record = format!(
            r#"{{"$type":"app.bsky.actor.profile","displayName":"Sample user {actor}","description":"A generated account","createdAt":"{created}"}}"#
        );
        w.commit(actor, "app.bsky.actor.profile", "self", Some(&record));
    }
    let mut follows = Vec::new();
    for actor in 0..n {
        let n_follows = 1 + w.rng.skewed_below(u64::from(n).min(60));
        for _ in 0..n_follows {
            let subject = w.rng.skewed_below(u64::from(n)) as u32;
            if subject == actor {
                continue;
            }
            let rkey = w.new_rkey(actor);
            let record = format!(
                r#"{{"$type":"app.bsky.graph.follow","subject":"{}","createdAt":"{}"}}"#,
                did(subject),
                datetime(w.time_us)
            );
            w.commit(actor, "app.bsky.graph.follow", &rkey, Some(&record));
            follows.push((actor, rkey));
        }
    }
    for round in 0..u64::from(n) * 6 {
        let actor = w.rng.below(u64::from(n)) as u32;
        match w.rng.below(20) {
            0..=5 => post(&mut w, actor, round),
            6..=15 => like_or_repost(&mut w, actor, "app.bsky.feed.like"),
            16..=17 => like_or_repost(&mut w, actor, "app.bsky.feed.repost"),
            18 => {
                let subject = w.rng.below(u64::from(n)) as u32;
                if subject != actor {
                    let rkey = w.new_rkey(actor);
                    let record = format!(
                        r#"{{"$type":"app.bsky.graph.block","subject":"{}","createdAt":"{}"}}"#,
                        did(subject),
                        datetime(w.time_us)
                    );
                    w.commit(actor, "app.bsky.graph.block", &rkey, Some(&record));
                }
            }
            _ => {
                // Unfollow one follow, or delete one post, chosen at random.
                if w.rng.below(2) == 0 && !follows.is_empty() {
                    let idx = w.rng.below(follows.len() as u64) as usize;
                    let (actor, rkey) = follows.swap_remove(idx);
                    w.commit(actor, "app.bsky.graph.follow", &rkey, None);
                } else if !w.posts.is_empty() {
                    let idx = w.rng.below(w.posts.len() as u64) as usize;
                    let (author, uri) = w.posts.swap_remove(idx);
                    let rkey = uri.rsplit('/').next().unwrap_or_default().to_owned();
                    w.commit(author, "app.bsky.feed.post", &rkey, None);
                }
            }
        }
    }
    w.lines
}

fn post(w: &mut Writer, actor: u32, round: u64) {
    let rkey = w.new_rkey(actor);
    let created = datetime(w.time_us);
    let mut extra = String::new();
    if !w.posts.is_empty() {
        match w.rng.below(4) {
            0 => {
                let idx = w.rng.below(w.posts.len() as u64) as usize;
                if let Some((_, parent)) = w.posts.get(idx) {
                    extra = format!(
                        r#","reply":{{"root":{{"uri":"{parent}","cid":"bafyreiaaaa"}},"parent":{{"uri":"{parent}","cid":"bafyreiaaaa"}}}}"#
                    );
                }
            }
            1 => {
                let idx = w.rng.below(w.posts.len() as u64) as usize;
                if let Some((_, quoted)) = w.posts.get(idx) {
                    extra = format!(
                        r#","embed":{{"$type":"app.bsky.embed.record","record":{{"uri":"{quoted}","cid":"bafyreiaaaa"}}}}"#
                    );
                }
            }
            _ => {}
        }
    }
    let record = format!(
        r#"{{"$type":"app.bsky.feed.post","text":"Sample post number {round}","langs":["en"],"createdAt":"{created}"{extra}}}"#
    );
    w.commit(actor, "app.bsky.feed.post", &rkey, Some(&record));
    w.posts.push((
        actor,
        format!("at://{}/app.bsky.feed.post/{rkey}", did(actor)),
    ));
}

fn like_or_repost(w: &mut Writer, actor: u32, collection: &str) {
    if w.posts.is_empty() {
        return;
    }
    let idx = w.rng.skewed_below(w.posts.len() as u64) as usize;
    let Some((_, uri)) = w.posts.get(idx).cloned() else {
        return;
    };
    let rkey = w.new_rkey(actor);
    let record = format!(
        r#"{{"$type":"{collection}","subject":{{"uri":"{uri}","cid":"bafyreiaaaa"}},"createdAt":"{}"}}"#,
        datetime(w.time_us)
    );
    w.commit(actor, collection, &rkey, Some(&record));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jetstream;

    // Checks that every generated event decodes (so the sample exercises the happy path) and
    // that the same seed gives the same events.
    #[test]
    fn sample_events_decode_and_are_deterministic() {
        let params = SampleParams {
            n_actors: 50,
            seed: 3,
        };
        let lines = events(&params);
        assert!(lines.len() > 100);
        for line in &lines {
            if let Err(err) = jetstream::decode(line.as_bytes()) {
                panic!("sample event does not decode: {err}: {line}");
            }
        }
        assert_eq!(lines, events(&params));
    }

    // Checks the datetime formatter on known instants, against values computed by hand.
    #[test]
    fn datetime_formats_known_instants() {
        assert_eq!(datetime(0), "1970-01-01T00:00:00.000000Z");
        assert_eq!(datetime(START_TIME_US), "2024-09-01T00:00:00.000000Z");
        assert_eq!(datetime(951_782_400_000_001), "2000-02-29T00:00:00.000001Z");
    }

    // Checks that TIDs sort like the times they encode and decode back to them.
    #[test]
    fn tids_sort_by_time_and_round_trip() {
        let a = tid(START_TIME_US, 1);
        let b = tid(START_TIME_US + 1, 0);
        assert!(a < b);
        assert_eq!(
            crate::syntax::parse_tid(&a),
            Some((START_TIME_US << 10) | 1)
        );
    }
}
