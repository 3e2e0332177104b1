//! `graph-memory`: splits the resident memory of a loaded data directory between the store (its
//! in-memory actor table, fjall's caches) and the follow graph, the two parts that `starling
//! serve` holds after it starts.
//!
//! ```text
//! graph-memory --data-dir DIR
//! ```
//!
//! Opens the store the way `starling serve` does (`EmbeddedStore::open`), then loads the graph
//! (`graph_sync::load_graph`: the snapshot plus the log after it), and prints `VmRSS` after
//! each step, the difference, and the graph's own accounting of its bytes. Run it only while no
//! `starling` holds DIR. It uses the system allocator, where `starling` uses mimalloc, so the
//! split is indicative: the graph's few large allocations weigh the same under both, the
//! actor table's millions of small strings do not.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use starling_ingest::graph_sync;
use starling_store::EmbeddedStore;

/// `VmRSS` of this process in MiB.
fn rss_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| {
            rest.trim()
                .trim_end_matches("kB")
                .trim()
                .parse::<f64>()
                .ok()
        })
        .map_or(f64::NAN, |kib| kib / 1024.0)
}

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let data_dir = match (args.next().as_deref(), args.next(), args.next()) {
        (Some("--data-dir"), Some(dir), None) => PathBuf::from(dir),
        _ => {
            eprintln!("usage: graph-memory --data-dir DIR");
            return ExitCode::FAILURE;
        }
    };
    match run(&data_dir) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("graph-memory: error: {err}");
            ExitCode::FAILURE
        }
    }
}

fn run(data_dir: &std::path::Path) -> Result<(), String> {
    let mib = |bytes: u64| bytes as f64 / 1048576.0;
    let start_rss = rss_mib();
    println!("start_rss_mib: {start_rss:.0}");
    let started = Instant::now();
    let store = EmbeddedStore::open(data_dir)
        .map_err(|err| format!("opening the store in `{}`: {err}", data_dir.display()))?;
    let store_rss = rss_mib();
    println!("store_open_s: {:.2}", started.elapsed().as_secs_f64());
    println!("store_open_rss_mib: {store_rss:.0}");
    println!("store_part_mib: {:.0}", store_rss - start_rss);

    let started = Instant::now();
    let (graph, source) =
        graph_sync::load_graph(&store, data_dir).map_err(|err| format!("loading: {err}"))?;
    let graph_rss = rss_mib();
    println!("graph_load_s: {:.2}", started.elapsed().as_secs_f64());
    println!("graph_source: {source:?}");
    println!("graph_loaded_rss_mib: {graph_rss:.0}");
    println!("graph_part_mib: {:.0}", graph_rss - store_rss);
    let stats = graph.stats();
    println!("graph_actors: {}", stats.n_actors);
    println!("graph_follows: {}", stats.n_follows);
    println!("graph_array_sets: {}", stats.n_array_sets);
    println!("graph_bitmap_sets: {}", stats.n_bitmap_sets);
    println!("graph_array_member_mib: {:.0}", mib(stats.array_bytes));
    println!("graph_bitmap_mib: {:.0}", mib(stats.bitmap_bytes));
    println!("graph_slot_mib: {:.0}", mib(stats.slot_bytes));
    println!("graph_garbage_mib: {:.0}", mib(stats.garbage_bytes));
    println!("graph_spare_mib: {:.0}", mib(stats.spare_bytes));
    println!(
        "graph_accounted_mib: {:.0}",
        mib(stats.array_bytes
            + stats.bitmap_bytes
            + stats.slot_bytes
            + stats.garbage_bytes
            + stats.spare_bytes)
    );
    // Exiting frees everything at once; dropping would free millions of sets one by one.
    std::mem::forget(graph);
    Ok(())
}
