//! The `starling` binary: a thin shell that parses flags and config and calls the libraries.
//!
//! `cli.rs` has the flags, `config.rs` turns them and the config file into a `Config`, and each
//! command is a short function over the library crates: `serve.rs` (start the APIs and ingest,
//! wait for a signal, stop; `ops.rs` and `telemetry.rs` hold its probes, logs and metrics),
//! `replay.rs` (`replay` and `import-follows`, with their progress
//! reports), `gen.rs`; `stats` and `sample` are here.

mod backfill;
mod cli;
mod config;
mod r#gen;
mod moderation;
mod ops;
mod replay;
mod serve;
mod telemetry;

/// mimalloc instead of the system allocator: ingest allocates many small keys and values, and
/// the system allocator measured at 15-19% of the replay profile.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use clap::Parser;
use starling_store::{CassandraOptions, CassandraStore, EmbeddedStore, SharedStore, Store};

use crate::cli::{Cli, Command, CommonArgs, SampleArgs, StatsArgs};
use crate::config::{Config, Overrides, StoreChoice};

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(err) if !err.use_stderr() => err.exit(),
        Err(err) => {
            eprintln!(
                "starling: error: {} (see `starling --help`)",
                one_line(&err)
            );
            return ExitCode::from(2);
        }
    };
    if let Err(err) = telemetry::init_logging(cli.log_format) {
        eprintln!("starling: error: {err:#}");
        return ExitCode::FAILURE;
    }
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("starling: error: {err:#}");
            ExitCode::FAILURE
        }
    }
}

/// A flag error in one line that names the problem; `--help` has the rest.
fn one_line(err: &clap::Error) -> String {
    let rendered = err.render().to_string();
    let message = rendered
        .lines()
        .take_while(|line| !line.starts_with("Usage:") && !line.trim().starts_with("tip:"))
        .map(str::trim)
        .filter(|line| !line.is_empty())
        .collect::<Vec<_>>()
        .join(" ");
    match message.strip_prefix("error: ") {
        Some(rest) => rest.to_owned(),
        None => message,
    }
}

fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Serve(args) => serve::run(*args),
        Command::Replay(args) => replay::replay(args),
        Command::Stats(args) => stats(args),
        Command::Sample(args) => sample(args),
        Command::Gen(args) => r#gen::run(args),
        Command::ImportFollows(args) => replay::import_follows(args),
        Command::Backfill(args) => backfill::run(args),
        Command::Takedown(args) => moderation::run(args, true),
        Command::Untakedown(args) => moderation::run(args, false),
    }
}

fn load_config(common: &CommonArgs, overrides: Overrides) -> anyhow::Result<Config> {
    let raw = config::read_file(common.config.as_deref())?;
    config::resolve(
        raw,
        Overrides {
            data_dir: common.data_dir.clone(),
            store: common.store.clone(),
            cassandra_nodes: common.cassandra_nodes.clone(),
            cassandra_keyspace: common.cassandra_keyspace.clone(),
            cassandra_consistency: common.cassandra_consistency.clone(),
            cassandra_replication_factor: common.cassandra_replication_factor,
            ..overrides
        },
    )
}

/// What the binary needs of a store beyond [`Store`].
trait Backend: Store + Sized + 'static {
    /// Called at a clean exit: leaves the store quick to open next time.
    fn finish(&self) -> anyhow::Result<()>;

    /// The same store as replicas share it, if several `serve` processes may use it at once:
    /// then only the holder of the writer lease writes (`starling_ingest::replica`).
    fn shared(store: &Arc<Self>) -> Option<Arc<dyn SharedStore>>;
}

impl Backend for EmbeddedStore {
    fn finish(&self) -> anyhow::Result<()> {
        self.flush_to_tables().context("flushing the store")
    }

    fn shared(_: &Arc<Self>) -> Option<Arc<dyn SharedStore>> {
        // Never shared: one process per data directory, and it always writes.
        None
    }
}

impl Backend for CassandraStore {
    fn finish(&self) -> anyhow::Result<()> {
        // Every commit is acknowledged by the cluster before it returns: nothing to flush.
        Ok(())
    }

    fn shared(store: &Arc<Self>) -> Option<Arc<dyn SharedStore>> {
        Some(store.clone())
    }
}

/// A command's work on the opened store, written once for every backend: [`AnyStore::run`]
/// calls [`StoreTask::run`] with the concrete store.
trait StoreTask {
    /// What the work returns.
    type Output;

    /// Does the work on `store`.
    fn run<S: Backend>(self, store: S) -> anyhow::Result<Self::Output>;
}

/// The configured store, opened.
// One per process, moved at once into the task: its size does not matter.
#[allow(clippy::large_enum_variant)]
enum AnyStore {
    Embedded(EmbeddedStore),
    Cassandra(CassandraStore),
}

impl AnyStore {
    /// Runs `task` on the concrete store.
    fn run<T: StoreTask>(self, task: T) -> anyhow::Result<T::Output> {
        match self {
            AnyStore::Embedded(store) => task.run(store),
            AnyStore::Cassandra(store) => task.run(store),
        }
    }
}

fn open_any(config: &Config) -> anyhow::Result<AnyStore> {
    Ok(match &config.store {
        StoreChoice::Embedded => AnyStore::Embedded(open_embedded(&config.data_dir)?),
        StoreChoice::Cassandra(options) => {
            AnyStore::Cassandra(open_cassandra(&config.data_dir, options)?)
        }
    })
}

fn open_embedded(dir: &Path) -> anyhow::Result<EmbeddedStore> {
    EmbeddedStore::open(dir).with_context(|| format!("opening the store in `{}`", dir.display()))
}

fn open_cassandra(data_dir: &Path, options: &CassandraOptions) -> anyhow::Result<CassandraStore> {
    // The data directory still holds this replica's graph snapshot.
    std::fs::create_dir_all(data_dir)
        .with_context(|| format!("creating the data directory `{}`", data_dir.display()))?;
    CassandraStore::open(options)
        .with_context(|| format!("opening cassandra keyspace `{}`", options.keyspace))
}

/// `starling stats`: the store's counts.
struct Stats;

impl StoreTask for Stats {
    type Output = starling_store::Stats;

    fn run<S: Backend>(self, store: S) -> anyhow::Result<starling_store::Stats> {
        Ok(store.stats()?)
    }
}

/// `starling stats --usage`: the store's bytes by kind.
struct Usage;

impl StoreTask for Usage {
    type Output = starling_store::Usage;

    fn run<S: Backend>(self, store: S) -> anyhow::Result<starling_store::Usage> {
        Ok(store.usage()?)
    }
}

fn stats(args: StatsArgs) -> anyhow::Result<()> {
    let config = load_config(&args.common, Overrides::default())?;
    if config.store == StoreChoice::Embedded && !config.data_dir.exists() {
        anyhow::bail!(
            "data directory `{}` does not exist",
            config.data_dir.display()
        );
    }
    // JSON is the only format; `--json` is accepted so scripts can say what they expect.
    let _ = args.json;
    let mut out = std::io::stdout().lock();
    if args.usage {
        serde_json::to_writer(&mut out, &open_any(&config)?.run(Usage)?)?;
    } else {
        serde_json::to_writer(&mut out, &open_any(&config)?.run(Stats)?)?;
    }
    writeln!(out)?;
    Ok(())
}

fn sample(args: SampleArgs) -> anyhow::Result<()> {
    let lines = starling_core::sample::events(&starling_core::sample::SampleParams {
        n_actors: args.actors,
        seed: args.seed,
    });
    let text = lines.join("\n") + "\n";
    if args.out == Path::new("-") {
        match std::io::stdout().lock().write_all(text.as_bytes()) {
            // A reader that stops early (`| head`) is not an error.
            Err(err) if err.kind() == std::io::ErrorKind::BrokenPipe => {}
            res => res?,
        }
    } else {
        std::fs::write(&args.out, text)
            .with_context(|| format!("writing `{}`", args.out.display()))?;
    }
    Ok(())
}
