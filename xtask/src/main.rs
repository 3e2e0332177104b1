//! Project chores. `cargo xtask tidy` turns the rules of the style guide into a failing check:
//! dependency edges between crates, third-party libraries kept to the crates that own them
//! (`deps.rs`), `//!` docs on every crate root, no `#[should_panic]` or `#[ignore]`, no
//! storage-engine calls outside `starling-store` (`sources.rs`), and no function over 100 lines
//! or file over 1,000 lines beyond an allow-list that may only shrink (`lengths.rs`,
//! `xtask/long-items.txt`). `cargo xtask tidy --print-long` prints today's long items in the
//! allow-list's format.

// Indexing a `serde_json::Value` by key yields `Null` for a missing key; it never panics.
#![allow(clippy::indexing_slicing)]
#![cfg_attr(test, allow(clippy::unwrap_used))]

mod deps;
mod lengths;
mod sources;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let res = match args.as_slice() {
        ["tidy"] => tidy(),
        ["tidy", "--print-long"] => print_long(),
        _ => {
            eprintln!("usage: cargo xtask tidy [--print-long]");
            return ExitCode::FAILURE;
        }
    };
    match res {
        Ok(0) => ExitCode::SUCCESS,
        Ok(n) => {
            eprintln!("tidy: {n} problem(s)");
            ExitCode::FAILURE
        }
        Err(err) => {
            eprintln!("tidy: error: {err}");
            ExitCode::FAILURE
        }
    }
}

/// Runs every check; the number of problems found, each printed.
fn tidy() -> Result<usize, String> {
    let root = workspace_root()?;
    let packages = deps::packages(&root)?;
    let mut problems = deps::check_edges(&packages);
    problems.extend(deps::check_libraries(&packages));
    let files = rust_files(&root)?;
    for (shown, text) in &files {
        problems.extend(sources::check(shown, text));
    }
    let allow_list = root.join(lengths::ALLOW_LIST);
    let allowed = std::fs::read_to_string(&allow_list)
        .map_err(|err| format!("reading {}: {err}", allow_list.display()))?;
    let allowed = lengths::parse_allow_list(&allowed)?;
    problems.extend(lengths::check(&lengths::long_items(&files), &allowed));
    for problem in &problems {
        eprintln!("tidy: {problem}");
    }
    if problems.is_empty() {
        println!("tidy: ok");
    }
    Ok(problems.len())
}

/// Prints the allow-list of today's long items.
fn print_long() -> Result<usize, String> {
    let root = workspace_root()?;
    let files = rust_files(&root)?;
    print!(
        "{}",
        lengths::render_allow_list(&lengths::long_items(&files))
    );
    Ok(0)
}

fn workspace_root() -> Result<PathBuf, String> {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .ok_or_else(|| "xtask has no parent directory".to_owned())
}

/// Every `.rs` file under `crates/` and `xtask/`, as (path from the root with `/`, contents),
/// sorted by path.
fn rust_files(root: &Path) -> Result<Vec<(String, String)>, String> {
    let mut paths = Vec::new();
    for dir in ["crates", "xtask"] {
        collect_rust_files(&root.join(dir), &mut paths)?;
    }
    let mut res = Vec::new();
    for path in paths {
        let text = std::fs::read_to_string(&path)
            .map_err(|err| format!("reading {}: {err}", path.display()))?;
        let shown = path.strip_prefix(root).unwrap_or(&path);
        let shown = shown
            .components()
            .map(|part| part.as_os_str().to_string_lossy())
            .collect::<Vec<_>>()
            .join("/");
        res.push((shown, text));
    }
    res.sort();
    Ok(res)
}

fn collect_rust_files(dir: &Path, out: &mut Vec<PathBuf>) -> Result<(), String> {
    let entries =
        std::fs::read_dir(dir).map_err(|err| format!("reading {}: {err}", dir.display()))?;
    for entry in entries {
        let path = entry.map_err(|err| err.to_string())?.path();
        let name = path
            .file_name()
            .and_then(|name| name.to_str())
            .unwrap_or_default();
        if path.is_dir() && name != "target" && !name.starts_with('.') {
            collect_rust_files(&path, out)?;
        } else if name.ends_with(".rs") {
            out.push(path);
        }
    }
    Ok(())
}
