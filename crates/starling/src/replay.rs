//! `starling replay` and `starling import-follows`: a file into the store, with a progress bar
//! on a terminal and a log line every few seconds otherwise.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use starling_ingest::graph_sync;
use starling_ingest::replay::ReplayProgress;
use starling_ingest::{ReplayOptions, replay_file, replay_stdin};
use starling_store::{Committed, Store};
use tracing::info;

use crate::cli::{ImportFollowsArgs, ReplayArgs};
use crate::config::Overrides;
use crate::{Backend, StoreTask, load_config, open_any};

pub fn replay(args: ReplayArgs) -> anyhow::Result<()> {
    let overrides = Overrides {
        batch_events_max: args.batch_events_max,
        ..Overrides::default()
    };
    let config = load_config(&args.common, overrides)?;
    // Check every file before creating or opening anything.
    if args.files.iter().filter(|file| is_stdin(file)).count() > 1 {
        anyhow::bail!("`-` (standard input) can be replayed only once");
    }
    for file in args.files.iter().filter(|file| !is_stdin(file)) {
        if !file.is_file() {
            anyhow::bail!(
                "event file `{}` does not exist or is not a file",
                file.display()
            );
        }
    }
    let options = ReplayOptions {
        limits: config.limits,
        from_start: args.from_start,
    };
    // The search index does not follow a replay: the next `serve` rebuilds it from the store.
    starling_ingest::search_sync::invalidate(&config.data_dir)?;
    open_any(&config)?.run(ReplayFiles {
        files: &args.files,
        options: &options,
    })
}

/// Replays files in order, then leaves the store quick to open.
struct ReplayFiles<'a> {
    files: &'a [PathBuf],
    options: &'a ReplayOptions,
}

impl StoreTask for ReplayFiles<'_> {
    type Output = ();

    fn run<S: Backend>(self, store: S) -> anyhow::Result<()> {
        for file in self.files {
            replay_one(&store, file, self.options)?;
        }
        store.finish()
    }
}

/// Whether `file` names standard input.
fn is_stdin(file: &Path) -> bool {
    file.as_os_str() == "-"
}

/// Replays one file (`-`: standard input), reporting progress, and logs how it went.
pub fn replay_one<S: Store>(store: &S, file: &Path, options: &ReplayOptions) -> anyhow::Result<()> {
    let total = if is_stdin(file) {
        None
    } else {
        let meta =
            std::fs::metadata(file).with_context(|| format!("reading `{}`", file.display()))?;
        Some(meta.len())
    };
    let progress = Arc::new(ReplayProgress::default());
    let started = Instant::now();
    let graph = &mut count_graph_changes;
    let report = with_progress(file, total, &progress, || match total {
        None => replay_stdin(store, options, graph, progress.clone()),
        Some(_) => replay_file(store, file, options, graph, progress.clone()),
    })?;
    let secs = started.elapsed().as_secs_f64();
    info!(
        file = %file.display(),
        events = report.events,
        resumed_from = report.resumed_from,
        seconds = format!("{secs:.1}"),
        events_per_second = (report.events as f64 / secs.max(1e-9)) as u64,
        "replay finished"
    );
    Ok(())
}

/// The graph sink until the in-memory graph exists: counts graph changes for metrics.
fn count_graph_changes(committed: &Committed) {
    let changes = &committed.graph;
    metrics::counter!("starling_ingest_graph_changes_total").increment(changes.len() as u64);
}

pub fn import_follows(args: ImportFollowsArgs) -> anyhow::Result<()> {
    let config = load_config(&args.common, Overrides::default())?;
    if !args.file.is_file() {
        anyhow::bail!(
            "adjacency file `{}` does not exist or is not a file",
            args.file.display()
        );
    }
    open_any(&config)?.run(ImportFollows {
        file: &args.file,
        data_dir: &config.data_dir,
    })
}

/// Bulk-loads an adjacency list into the store and the graph, and snapshots the graph.
struct ImportFollows<'a> {
    file: &'a Path,
    data_dir: &'a Path,
}

impl StoreTask for ImportFollows<'_> {
    type Output = ();

    fn run<S: Backend>(self, store: S) -> anyhow::Result<()> {
        let (graph, _) = graph_sync::load_graph(&store, self.data_dir)?;
        // An empty graph is built anew in bulk, far faster than adding edges one by one.
        let existing = (graph.n_follows() + graph.n_blocks() > 0).then_some(graph);
        let total = std::fs::metadata(self.file)
            .with_context(|| format!("reading `{}`", self.file.display()))?
            .len();
        let progress = Arc::new(ReplayProgress::default());
        let started = Instant::now();
        let (graph, report) = with_progress(self.file, Some(total), &progress, || {
            starling_ingest::import::import_follows(&store, self.file, existing, progress.clone())
        })?;
        graph_sync::write_snapshot(&store, &graph, store.graph_log_seq(), self.data_dir)?;
        store.finish()?;
        info!(
            file = %self.file.display(),
            follows = report.follows,
            bad_lines = report.bad_lines,
            first_bad_lines = ?report.first_bad_lines,
            graph_follows = graph.n_follows(),
            seconds = format!("{:.1}", started.elapsed().as_secs_f64()),
            "import finished"
        );
        let first_bad = if report.first_bad_lines.is_empty() {
            String::new()
        } else {
            format!(" (first at lines {:?})", report.first_bad_lines)
        };
        println!(
            "imported {} follows; {} bad lines{first_bad}",
            report.follows, report.bad_lines
        );
        Ok(())
    }
}

/// Runs `work` while a thread reports `progress` through `file` (`total` bytes, unknown for
/// standard input).
fn with_progress<T>(
    file: &Path,
    total: Option<u64>,
    progress: &ReplayProgress,
    work: impl FnOnce() -> T,
) -> T {
    let done = AtomicBool::new(false);
    std::thread::scope(|scope| {
        let reporter = scope.spawn(|| report_progress(file, total, progress, &done));
        let res = work();
        done.store(true, Ordering::Relaxed);
        reporter.thread().unpark();
        let _ = reporter.join();
        res
    })
}

/// A progress bar on a terminal; a plain log line every few seconds otherwise.
fn report_progress(file: &Path, total: Option<u64>, progress: &ReplayProgress, done: &AtomicBool) {
    let started = Instant::now();
    let bar = std::io::stderr().is_terminal().then(|| progress_bar(total));
    let interval = if bar.is_some() {
        Duration::from_millis(200)
    } else {
        Duration::from_secs(5)
    };
    while !done.load(Ordering::Relaxed) {
        std::thread::park_timeout(interval);
        let read = progress.file_bytes_read.load(Ordering::Relaxed);
        let events = progress.events.load(Ordering::Relaxed);
        let rate = events as f64 / started.elapsed().as_secs_f64().max(1e-9);
        match &bar {
            Some(bar) => {
                bar.set_position(read);
                bar.set_message(format!("{events} events, {rate:.0} events/s"));
            }
            None if !done.load(Ordering::Relaxed) => {
                let Some(total) = total else {
                    info!(file = %file.display(), events, events_per_second = rate as u64, "progress");
                    continue;
                };
                let percent = if total == 0 {
                    100.0
                } else {
                    read as f64 * 100.0 / total as f64
                };
                let eta = if read == 0 {
                    f64::NAN
                } else {
                    started.elapsed().as_secs_f64() * (total.saturating_sub(read)) as f64
                        / read as f64
                };
                info!(file = %file.display(), events, events_per_second = rate as u64, percent = format!("{percent:.1}"), eta_seconds = format!("{eta:.0}"), "progress");
            }
            None => {}
        }
    }
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
}

fn progress_bar(total: Option<u64>) -> indicatif::ProgressBar {
    let Some(total) = total else {
        // A stream of unknown length: events and rate only.
        let bar = indicatif::ProgressBar::new_spinner();
        bar.set_style(
            indicatif::ProgressStyle::with_template("{spinner} {msg} {bytes} read")
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_spinner()),
        );
        return bar;
    };
    let bar = indicatif::ProgressBar::new(total);
    let style = indicatif::ProgressStyle::with_template(
        "{spinner} {msg} [{bar:30}] {bytes}/{total_bytes} ETA {eta}",
    )
    .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar());
    bar.set_style(style);
    bar
}
