//! Project chores. `cargo xtask tidy` turns the rules of the style guide into a failing check:
//! dependency edges between crates, `//!` docs on every crate root, no `#[should_panic]` or
//! `#[ignore]`, and no storage-engine calls outside `starling-store`.

// Indexing a `serde_json::Value` by key yields `Null` for a missing key; it never panics.
#![allow(clippy::indexing_slicing)]

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

/// Allowed dependencies of each workspace crate on the others. Anything else is an error.
const ALLOWED_EDGES: &[(&str, &[&str])] = &[
    ("starling-core", &[]),
    ("starling-store", &["starling-core"]),
    ("starling-graph", &["starling-core"]),
    ("starling-timeline", &["starling-core", "starling-graph"]),
    ("starling-identity", &["starling-core"]),
    ("starling-gen", &["starling-core", "starling-graph"]),
    (
        "starling-ingest",
        &[
            "starling-core",
            "starling-store",
            "starling-graph",
            "starling-timeline",
        ],
    ),
    (
        "starling-api",
        &[
            "starling-core",
            "starling-store",
            "starling-graph",
            "starling-timeline",
            "starling-identity",
        ],
    ),
    (
        "starling",
        &[
            "starling-core",
            "starling-store",
            "starling-graph",
            "starling-timeline",
            "starling-ingest",
            "starling-api",
            "starling-identity",
            "starling-gen",
        ],
    ),
    (
        "starling-bench",
        &[
            "starling-core",
            "starling-store",
            "starling-graph",
            "starling-timeline",
            "starling-ingest",
        ],
    ),
    ("xtask", &[]),
];

/// Names that mark a storage-engine call; they may appear only in `starling-store`.
const ENGINE_NAMES: &[&str] = &["fjall::", "redb::", "scylla::"];

fn main() -> ExitCode {
    let task = std::env::args().nth(1);
    match task.as_deref() {
        Some("tidy") => match tidy() {
            Ok(0) => {
                println!("tidy: ok");
                ExitCode::SUCCESS
            }
            Ok(n) => {
                eprintln!("tidy: {n} problem(s)");
                ExitCode::FAILURE
            }
            Err(err) => {
                eprintln!("tidy: error: {err}");
                ExitCode::FAILURE
            }
        },
        _ => {
            eprintln!("usage: cargo xtask tidy");
            ExitCode::FAILURE
        }
    }
}

fn tidy() -> Result<usize, String> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .ok_or("xtask has no parent directory")?;
    let mut problems = check_edges(&root)?;
    problems.extend(check_sources(&root)?);
    for problem in &problems {
        eprintln!("tidy: {problem}");
    }
    Ok(problems.len())
}

fn check_edges(root: &Path) -> Result<Vec<String>, String> {
    let output = Command::new(env!("CARGO"))
        .args(["metadata", "--format-version", "1", "--no-deps"])
        .current_dir(root)
        .output()
        .map_err(|err| format!("running cargo metadata: {err}"))?;
    if !output.status.success() {
        return Err(format!(
            "cargo metadata failed: {}",
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    let metadata: serde_json::Value = serde_json::from_slice(&output.stdout)
        .map_err(|err| format!("cargo metadata output: {err}"))?;
    let packages = metadata["packages"]
        .as_array()
        .ok_or("cargo metadata has no packages")?;
    let mut problems = Vec::new();
    for package in packages {
        let name = package["name"].as_str().unwrap_or_default();
        let Some((_, allowed)) = ALLOWED_EDGES
            .iter()
            .find(|(crate_name, _)| *crate_name == name)
        else {
            problems.push(format!(
                "crate `{name}` is not in xtask's ALLOWED_EDGES table"
            ));
            continue;
        };
        for dep in package["dependencies"].as_array().into_iter().flatten() {
            let dep_name = dep["name"].as_str().unwrap_or_default();
            let is_dev = dep["kind"].as_str() == Some("dev");
            let is_workspace = dep_name.starts_with("starling");
            if is_workspace && !is_dev && !allowed.contains(&dep_name) {
                problems.push(format!("`{name}` must not depend on `{dep_name}`"));
            }
        }
    }
    Ok(problems)
}

fn check_sources(root: &Path) -> Result<Vec<String>, String> {
    let mut problems = Vec::new();
    let mut files = Vec::new();
    for dir in ["crates", "xtask"] {
        collect_rust_files(&root.join(dir), &mut files)?;
    }
    for file in files {
        let text = std::fs::read_to_string(&file)
            .map_err(|err| format!("reading {}: {err}", file.display()))?;
        let shown = file
            .strip_prefix(root)
            .unwrap_or(&file)
            .display()
            .to_string();
        let is_crate_root = file.ends_with("src/lib.rs") || file.ends_with("src/main.rs");
        if is_crate_root && !text.trim_start().starts_with("//!") {
            problems.push(format!("{shown}: crate root has no `//!` doc"));
        }
        let is_tidy = shown.starts_with("xtask");
        let in_store = shown.starts_with("crates/starling-store/");
        for (line_idx, line) in text.lines().enumerate() {
            let at = || format!("{shown}:{}", line_idx + 1);
            let code = line.split("//").next().unwrap_or_default();
            if !is_tidy && (code.contains("#[should_panic") || code.contains("#[ignore")) {
                problems.push(format!(
                    "{}: no #[should_panic] or #[ignore]; assert the Err",
                    at()
                ));
            }
            if !is_tidy && !in_store && ENGINE_NAMES.iter().any(|name| code.contains(name)) {
                problems.push(format!(
                    "{}: storage engine call outside starling-store",
                    at()
                ));
            }
        }
    }
    Ok(problems)
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
