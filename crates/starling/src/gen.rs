//! `starling gen`: flags to [`starling_gen::GenParams`], a progress bar on a terminal, and the
//! summary line. The generator and the file writing are `starling_gen`'s.

use std::fmt::Write as _;
use std::io::IsTerminal;
use std::time::Instant;

use starling_gen::{GenParams, Progress, write_file, write_to};

use crate::cli::GenArgs;

/// Runs `starling gen`: validates the flags, writes the file, prints one summary line.
pub fn run(args: GenArgs) -> anyhow::Result<()> {
    let actors = u64::from(args.actors);
    let mut params = GenParams {
        n_actors: args.actors,
        n_follows: args.follows.unwrap_or(30 * actors),
        n_posts: args.posts.unwrap_or(10 * actors),
        n_likes: args.likes,
        n_reposts: args.reposts,
        seed: args.seed,
    };
    if args.follows.is_none() {
        // The default ratio exceeds what a network of under 240 actors can make.
        params.n_follows = params.n_follows.min(params.follows_max());
    }
    // Checked before the graph is built, so a typo fails at once even at full scale.
    params.validate()?;
    let bar = std::io::stderr().is_terminal().then(|| {
        let bar = indicatif::ProgressBar::new(0);
        let style = indicatif::ProgressStyle::with_template(
            "{spinner} {msg} [{bar:30}] {human_pos}/{human_len} events, ETA {eta}",
        )
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar());
        bar.set_style(style);
        // The graph's degrees and popularity come first, before any event.
        bar.set_message("preparing the graph");
        bar
    });
    let started = Instant::now();
    let mut on_progress = |progress: &Progress| {
        if let Some(bar) = &bar {
            bar.set_length(progress.events_planned);
            bar.set_position(progress.events);
            let rate = progress.events as f64 / started.elapsed().as_secs_f64().max(1e-9);
            bar.set_message(format!("{:<8} {:.0}k events/s", progress.phase, rate / 1e3));
        }
    };
    let to_stdout = args.out.as_os_str() == "-";
    let res = if to_stdout {
        if std::io::stdout().is_terminal() {
            anyhow::bail!(
                "`--out -` writes the events to standard output: pipe it, e.g. into `starling replay -`"
            );
        }
        write_to(&params, &mut std::io::stdout().lock(), &mut on_progress)
            .map(|summary| (summary, None))
    } else {
        write_file(&params, &args.out, &mut on_progress)
            .map(|report| (report.summary, Some(report.summary_path)))
    };
    if let Some(bar) = &bar {
        bar.finish_and_clear();
    }
    let (summary, summary_path) = res?;
    let seconds = started.elapsed().as_secs_f64();
    let mut kinds = format!("{} identity", summary.identity_events);
    for (collection, ops) in &summary.commits {
        let name = collection.rsplit('.').next().unwrap_or(collection);
        for (op, count) in ops {
            let _ = write!(kinds, ", {count} {name} {op}");
        }
    }
    let compressed = summary
        .compressed_bytes
        .map(|bytes| format!(", {:.1} MB zstd", bytes as f64 / 1e6))
        .unwrap_or_default();
    let line = format!(
        "wrote {} events to {} in {seconds:.1} s ({:.0} events/s): {kinds}; {:.1} MB JSON{compressed}",
        summary.events,
        args.out.display(),
        summary.events as f64 / seconds.max(1e-9),
        summary.bytes as f64 / 1e6,
    );
    // Standard output carries the events themselves when `--out -`.
    match summary_path {
        Some(path) => println!("{line}; summary in {}", path.display()),
        None => eprintln!("{line}"),
    }
    if summary.activity_skipped > 0 {
        eprintln!(
            "starling: note: {} planned activity events were skipped: nothing they could \
             reference was left (see `activity_skipped`)",
            summary.activity_skipped
        );
    }
    Ok(())
}
