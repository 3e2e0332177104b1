//! `notification-bench`: what notifications cost at ingest, and reading them for a recipient
//! with a million.
//!
//! ```text
//! notification-bench fan-in --dir DIR [--actors N] [--seed N] [--rounds N]
//! notification-bench read   --dir DIR [--notifications N] [--reads N] [--seed N]
//! ```
//!
//! `fan-in` applies the sample network's events (`starling_core::sample`, `--actors` actors:
//! follows, posts, replies, quotes, likes, reposts, blocks, deletes) to fresh embedded stores in
//! batches of 20,000 events, with notifications on and off (`EmbeddedStore::set_notifications`)
//! alternately in the same process, `--rounds` times each, the order swapped every round.
//! Prints events/s per run, the median of each mode, and the notifications the "on" store holds
//! (counted by reading every recipient's, so the runs are known to have made them).
//!
//! `read` writes one post and `--notifications` likes of it by as many accounts (so the post's
//! author has that many notifications), then times `Store::notifications` pages of 50 (what
//! GetNotifications reads): the first page, and pages from random cursors anywhere in the list;
//! and `Store::unread_notifications` (GetUnreadNotificationCount's count) never seen and seen at
//! random points. Every answer is checked against the likes as written (the k-th newest
//! notification is the like written k-th from the end). Prints p50, p99 and max of each.

use std::error::Error;
use std::path::PathBuf;
use std::time::Instant;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use starling_bench::cli::number;
use starling_core::jetstream;
use starling_core::sample::{self, SampleParams, datetime, did, tid};
use starling_store::{Batch, EmbeddedStore, Store};

type Res<T> = Result<T, Box<dyn Error>>;

const USAGE: &str = "usage: notification-bench fan-in|read --dir DIR [--actors N] [--seed N] \
                     [--rounds N] [--notifications N] [--reads N]";
const BATCH_EVENTS: usize = 20_000;
const PAGE: usize = 50;
const UNREAD_MAX: u32 = 10_000;
const START_US: u64 = 1_700_000_000_000_000;

struct Args {
    command: String,
    dir: PathBuf,
    actors: u32,
    seed: u64,
    rounds: usize,
    notifications: u32,
    reads: usize,
}

fn parse_args() -> Res<Args> {
    let mut args = Args {
        command: String::new(),
        dir: PathBuf::new(),
        actors: 3_000,
        seed: 7,
        rounds: 3,
        notifications: 1_000_000,
        reads: 2_000,
    };
    let mut it = std::env::args().skip(1);
    args.command = it.next().ok_or(USAGE)?;
    while let Some(flag) = it.next() {
        let value = it.next().ok_or(USAGE)?;
        match flag.as_str() {
            "--dir" => args.dir = PathBuf::from(value),
            "--actors" => args.actors = number(&flag, &value)?,
            "--seed" => args.seed = number(&flag, &value)?,
            "--rounds" => args.rounds = number(&flag, &value)?,
            "--notifications" => args.notifications = number(&flag, &value)?,
            "--reads" => args.reads = number(&flag, &value)?,
            _ => return Err(USAGE.into()),
        }
    }
    if args.dir.as_os_str().is_empty() {
        return Err(USAGE.into());
    }
    Ok(args)
}

/// Applies `lines` to `store` in batches; returns the seconds it took, the last write synced.
fn apply(store: &EmbeddedStore, lines: &[String]) -> Res<f64> {
    let started = Instant::now();
    for chunk in lines.chunks(BATCH_EVENTS) {
        let mut batch = store.batch();
        for line in chunk {
            match jetstream::decode_str(line) {
                Ok(event) => {
                    batch.apply(&event)?;
                }
                Err(err) => batch.drop_event(err.reason),
            }
        }
        batch.commit()?;
    }
    store.sync()?;
    Ok(started.elapsed().as_secs_f64())
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or(0.0)
}

fn fan_in(args: &Args) -> Res<()> {
    let lines = sample::events(&SampleParams {
        n_actors: args.actors,
        seed: args.seed,
    });
    println!("events: {}", lines.len());
    let (mut on, mut off) = (Vec::new(), Vec::new());
    let mut n_notifications = 0;
    for round in 0..args.rounds {
        let order = if round % 2 == 0 {
            [true, false]
        } else {
            [false, true]
        };
        for notifications in order {
            let dir = args.dir.join(format!("fan-in-{round}-{notifications}"));
            let _ = std::fs::remove_dir_all(&dir);
            let store = EmbeddedStore::open(&dir)?;
            store.set_notifications(notifications);
            let seconds = apply(&store, &lines)?;
            let events_per_s = lines.len() as f64 / seconds;
            let mode = if notifications { "on" } else { "off" };
            println!(
                "round {round} notifications {mode}: {seconds:.3} s, {events_per_s:.0} events/s"
            );
            if notifications {
                on.push(events_per_s);
                n_notifications = count_all(&store, args.actors)?;
            } else {
                off.push(events_per_s);
                if count_all(&store, args.actors)? != 0 {
                    return Err("a store with notifications off holds some".into());
                }
            }
            drop(store);
            std::fs::remove_dir_all(&dir)?;
        }
    }
    if n_notifications == 0 {
        return Err("the events made no notifications".into());
    }
    let (on, off) = (median(&mut on), median(&mut off));
    println!("notifications made: {n_notifications}");
    println!(
        "median events/s: on {on:.0}, off {off:.0}, on/off {:.3}",
        on / off
    );
    Ok(())
}

/// Every sample actor's notifications (entries, read whole).
fn count_all(store: &EmbeddedStore, n_actors: u32) -> Res<u64> {
    let mut res = 0u64;
    for idx in 0..n_actors {
        let Some(actor) = store.actor_id(&did(idx)) else {
            continue;
        };
        res += u64::from(store.unread_notifications(actor, None, u32::MAX)?);
    }
    Ok(res)
}

/// The like by liker `idx` (0 = oldest) of the recipient's post, as a Jetstream line.
fn like_line(idx: u32, post_uri: &str) -> String {
    let time_us = START_US + 1_000 + u64::from(idx) * 1_000;
    let liker = did(idx + 1);
    format!(
        r#"{{"did":"{liker}","time_us":{time_us},"kind":"commit","commit":{{"rev":"{}","operation":"create","collection":"app.bsky.feed.like","rkey":"{}","record":{{"$type":"app.bsky.feed.like","subject":{{"uri":"{post_uri}","cid":"bafyreiaaaaaaaaaa"}},"createdAt":"{}"}},"cid":"bafyreiaaaaaaaaaa"}}}}"#,
        tid(time_us, 0),
        tid(time_us, 1),
        datetime(time_us)
    )
}

fn like_uri(idx: u32) -> String {
    let time_us = START_US + 1_000 + u64::from(idx) * 1_000;
    format!(
        "at://{}/app.bsky.feed.like/{}",
        did(idx + 1),
        tid(time_us, 1)
    )
}

fn percentiles(name: &str, micros: &mut [f64]) {
    micros.sort_by(f64::total_cmp);
    let at = |q: f64| {
        let idx = ((micros.len() as f64 - 1.0) * q).round() as usize;
        micros.get(idx).copied().unwrap_or(0.0)
    };
    println!(
        "{name}: n {} p50 {:.1} us p99 {:.1} us max {:.1} us",
        micros.len(),
        at(0.5),
        at(0.99),
        at(1.0)
    );
}

fn read(args: &Args) -> Res<()> {
    let n = args.notifications;
    let dir = args.dir.join("read");
    let _ = std::fs::remove_dir_all(&dir);
    let store = EmbeddedStore::open(&dir)?;
    let author = did(0);
    let rkey = tid(START_US, 0);
    let post_uri = format!("at://{author}/app.bsky.feed.post/{rkey}");
    let mut lines = vec![format!(
        r#"{{"did":"{author}","time_us":{START_US},"kind":"commit","commit":{{"rev":"{rkey}","operation":"create","collection":"app.bsky.feed.post","rkey":"{rkey}","record":{{"$type":"app.bsky.feed.post","text":"hello","createdAt":"{}"}},"cid":"bafyreiaaaaaaaaaa"}}}}"#,
        datetime(START_US)
    )];
    lines.extend((0..n).map(|idx| like_line(idx, &post_uri)));
    let seconds = apply(&store, &lines)?;
    println!("wrote {} events in {seconds:.1} s", lines.len());
    let recipient = store.actor_id(&author).ok_or("no recipient")?;
    // The k-th newest notification is the like of liker n - 1 - k.
    let expected = |k: u32| like_uri(n - 1 - k);
    let page_at = |below: Option<&[u8]>| -> Res<Vec<starling_store::Notification>> {
        let mut page = Vec::with_capacity(PAGE);
        store.notifications(recipient, below, 10_000, &mut |notification| {
            page.push(notification);
            page.len() < PAGE
        })?;
        Ok(page)
    };
    // Cursors at random depths: walk once, keeping each sampled position's cursor.
    let mut rng = ChaCha8Rng::seed_from_u64(args.seed);
    let mut depths: Vec<u32> = (0..args.reads)
        .map(|_| rng.random_range(0..n - 1))
        .collect();
    depths.sort_unstable();
    let mut cursors = Vec::with_capacity(depths.len());
    let mut next = depths.iter().peekable();
    let mut k = 0u32;
    store.notifications(recipient, None, usize::MAX, &mut |notification| {
        while next.peek() == Some(&&k) {
            cursors.push((k, notification.cursor.clone()));
            next.next();
        }
        k += 1;
        next.peek().is_some()
    })?;
    let check = |page: &[starling_store::Notification], first: u32| -> Res<()> {
        let want = (PAGE as u32).min(n - first);
        if page.len() != want as usize {
            return Err(format!(
                "page from {first}: {} notifications, want {want}",
                page.len()
            )
            .into());
        }
        for (offset, notification) in page.iter().enumerate() {
            if notification.uri != expected(first + offset as u32) {
                return Err(format!(
                    "notification {}: {}",
                    first + offset as u32,
                    notification.uri
                )
                .into());
            }
        }
        Ok(())
    };
    let (mut first_page, mut deep_page) = (Vec::new(), Vec::new());
    for (k, cursor) in &cursors {
        let started = Instant::now();
        let page = page_at(None)?;
        first_page.push(started.elapsed().as_secs_f64() * 1e6);
        check(&page, 0)?;
        let started = Instant::now();
        let page = page_at(Some(cursor))?;
        deep_page.push(started.elapsed().as_secs_f64() * 1e6);
        check(&page, k + 1)?;
    }
    let (mut never_seen, mut seen) = time_unread(&store, recipient, n, &cursors)?;
    println!("recipient notifications: {n}");
    percentiles("first page of 50", &mut first_page);
    percentiles("page of 50 from a random cursor", &mut deep_page);
    percentiles("unread count, never seen (bound 10,000)", &mut never_seen);
    percentiles("unread count, seen at a random point", &mut seen);
    drop(store);
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}

/// Times the unread count never seen and seen at each sampled depth, checking each count.
fn time_unread(
    store: &EmbeddedStore,
    recipient: starling_core::ActorId,
    n: u32,
    cursors: &[(u32, Vec<u8>)],
) -> Res<(Vec<f64>, Vec<f64>)> {
    let (mut never_seen, mut seen) = (Vec::new(), Vec::new());
    for (k, _) in cursors {
        let started = Instant::now();
        let count = store.unread_notifications(recipient, None, UNREAD_MAX)?;
        never_seen.push(started.elapsed().as_secs_f64() * 1e6);
        if count != UNREAD_MAX.min(n) {
            return Err(format!("unread never seen: {count}").into());
        }
        // Seen at the time of the k-th newest: k newer than it.
        let seen_us = (START_US + 1_000 + u64::from(n - 1 - k) * 1_000) as i64;
        let started = Instant::now();
        let count = store.unread_notifications(recipient, Some(seen_us), UNREAD_MAX)?;
        seen.push(started.elapsed().as_secs_f64() * 1e6);
        if count != UNREAD_MAX.min(*k) {
            return Err(format!("unread after {k}: {count}").into());
        }
    }
    Ok((never_seen, seen))
}

fn main() {
    let res = parse_args().and_then(|args| match args.command.as_str() {
        "fan-in" => fan_in(&args),
        "read" => read(&args),
        _ => Err(USAGE.into()),
    });
    if let Err(err) = res {
        eprintln!("notification-bench: {err}");
        std::process::exit(1);
    }
}
