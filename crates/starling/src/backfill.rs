//! `starling backfill`: every repository of a relay's listing, or of a directory of CAR
//! files, verified and applied (`starling_ingest::backfill`), with a progress bar on a
//! terminal and a log line every few seconds otherwise.

use std::io::IsTerminal;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::Context;
use starling_ingest::{BackfillOptions, BackfillProgress, BackfillSource};
use starling_store::Committed;
use tracing::info;

use crate::cli::BackfillArgs;
use crate::config::Overrides;
use crate::{Backend, StoreTask, load_config, open_any};

pub fn run(args: BackfillArgs) -> anyhow::Result<()> {
    let overrides = Overrides {
        batch_events_max: args.batch_events_max,
        plc_url: args.plc_url.clone(),
        ..Overrides::default()
    };
    let config = load_config(&args.common, overrides)?;
    let source = match (&args.relay, &args.car) {
        (Some(relay), _) => {
            if !relay.starts_with("http://") && !relay.starts_with("https://") {
                anyhow::bail!("relay `{relay}` must start with http:// or https://");
            }
            BackfillSource::Relay(relay.clone())
        }
        (None, Some(dir)) => {
            if !dir.is_dir() {
                anyhow::bail!(
                    "CAR directory `{}` does not exist or is not a directory",
                    dir.display()
                );
            }
            BackfillSource::CarDir(dir.clone())
        }
        (None, None) => anyhow::bail!("give --relay URL or --car DIR"),
    };
    for (name, value) in [
        ("--repos-concurrent-max", args.repos_concurrent_max),
        ("--repos-per-host-max", args.repos_per_host_max),
        ("--repo-mib-max", args.repo_mib_max),
    ] {
        if value == 0 {
            anyhow::bail!("{name} is 0; it must be at least 1");
        }
    }
    let resolver = starling_identity::Resolver::new(config.identity.clone())
        .context("configuring DID resolution")?;
    let mut options = BackfillOptions::new(source, resolver);
    options.repos_concurrent_max = args.repos_concurrent_max;
    options.repos_per_host_max = args.repos_per_host_max;
    options.repo_timeout = Duration::from_secs(args.repo_timeout_secs.max(1));
    options.repo_bytes_max = args.repo_mib_max.saturating_mul(1024 * 1024);
    options.attempts_max = args.attempts_max.max(1);
    options.limits = config.limits;
    open_any(&config)?.run(Backfill { options })
}

struct Backfill {
    options: BackfillOptions,
}

impl StoreTask for Backfill {
    type Output = ();

    fn run<S: Backend>(self, store: S) -> anyhow::Result<()> {
        let store = Arc::new(store);
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .context("starting the async runtime")?;
        let progress = Arc::new(BackfillProgress::default());
        let (_shutdown_tx, shutdown_rx) = tokio::sync::watch::channel(false);
        let started = Instant::now();
        let reporter = Reporter::start(progress.clone());
        let sink = Box::new(|committed: &Committed| {
            metrics::counter!("starling_ingest_graph_changes_total")
                .increment(committed.graph.len() as u64);
        });
        let res = runtime.block_on(starling_ingest::run_backfill(
            store.clone(),
            self.options,
            sink,
            progress.clone(),
            shutdown_rx,
        ));
        reporter.stop();
        res.context("backfill stopped")?;
        store.finish()?;
        let secs = started.elapsed().as_secs_f64();
        let records = progress.records.load(Ordering::Relaxed);
        info!(
            repos_done = progress.repos_done.load(Ordering::Relaxed),
            repos_skipped = progress.repos_skipped.load(Ordering::Relaxed),
            repos_failed = progress.repos_failed.load(Ordering::Relaxed),
            records,
            seconds = format!("{secs:.1}"),
            "backfill finished"
        );
        println!(
            "starling: backfill finished: {} repositories applied, {} skipped, {} failed {:?}; {records} records, {} bytes in {secs:.1} s ({:.0} records/s); stage seconds: fetch {:.2}, verify {:.2}, apply {:.2}",
            progress.repos_done.load(Ordering::Relaxed),
            progress.repos_skipped.load(Ordering::Relaxed),
            progress.repos_failed.load(Ordering::Relaxed),
            progress.failures(),
            progress.bytes.load(Ordering::Relaxed),
            records as f64 / secs.max(1e-9),
            progress.fetch_ns.load(Ordering::Relaxed) as f64 / 1e9,
            progress.verify_ns.load(Ordering::Relaxed) as f64 / 1e9,
            progress.apply_ns.load(Ordering::Relaxed) as f64 / 1e9,
        );
        Ok(())
    }
}

/// Reports progress from its own thread until stopped.
struct Reporter {
    stop: std::sync::mpsc::Sender<()>,
    thread: std::thread::JoinHandle<()>,
}

impl Reporter {
    fn start(progress: Arc<BackfillProgress>) -> Reporter {
        let (stop, stopped) = std::sync::mpsc::channel();
        let thread = std::thread::spawn(move || report(&progress, &stopped));
        Reporter { stop, thread }
    }

    fn stop(self) {
        let _ = self.stop.send(());
        let _ = self.thread.join();
    }
}

fn report(progress: &BackfillProgress, stopped: &std::sync::mpsc::Receiver<()>) {
    let started = Instant::now();
    let bar = std::io::stderr().is_terminal().then(|| {
        let bar = indicatif::ProgressBar::new(0);
        bar.set_style(
            indicatif::ProgressStyle::with_template(
                "{elapsed_precise} [{bar:30}] {pos}/{len} repositories (ETA {eta}) {msg}",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        bar
    });
    let interval = if bar.is_some() {
        Duration::from_millis(200)
    } else {
        Duration::from_secs(5)
    };
    while stopped
        .recv_timeout(interval)
        .is_err_and(|err| err == std::sync::mpsc::RecvTimeoutError::Timeout)
    {
        let listed = progress.repos_listed.load(Ordering::Relaxed);
        let finished = progress.repos_done.load(Ordering::Relaxed)
            + progress.repos_skipped.load(Ordering::Relaxed)
            + progress.repos_failed.load(Ordering::Relaxed);
        let records = progress.records.load(Ordering::Relaxed);
        let bytes = progress.bytes.load(Ordering::Relaxed);
        let rate = records as f64 / started.elapsed().as_secs_f64().max(1e-9);
        match &bar {
            Some(bar) => {
                bar.set_length(listed);
                bar.set_position(finished);
                bar.set_message(format!(
                    "{records} records, {} MiB, {rate:.0} records/s, {} failed",
                    bytes / (1024 * 1024),
                    progress.repos_failed.load(Ordering::Relaxed)
                ));
            }
            None => info!(
                listed,
                finished,
                records,
                bytes,
                records_per_second = rate as u64,
                "backfill progress"
            ),
        }
    }
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
}
