//! Dependency rules from `cargo metadata`: which workspace crates may depend on which, and
//! which crates may name a third-party library that belongs to one part of the system.

use std::path::Path;
use std::process::Command;

/// Allowed dependencies of each workspace crate on the others. Anything else is an error.
const ALLOWED_EDGES: &[(&str, &[&str])] = &[
    ("starling-core", &[]),
    ("starling-store", &["starling-core"]),
    ("starling-graph", &["starling-core"]),
    ("starling-timeline", &["starling-core", "starling-graph"]),
    ("starling-identity", &["starling-core"]),
    ("starling-gen", &["starling-core", "starling-graph"]),
    ("starling-repo", &["starling-core"]),
    ("starling-search", &["starling-core"]),
    (
        "starling-ingest",
        &[
            "starling-core",
            "starling-store",
            "starling-graph",
            "starling-timeline",
            "starling-repo",
            "starling-identity",
            "starling-search",
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
            "starling-search",
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
            "starling-repo",
            "starling-search",
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
            "starling-repo",
            "starling-identity",
            "starling-gen",
            "starling-search",
        ],
    ),
    ("xtask", &[]),
];

/// Third-party libraries that belong to one part of the system, and the crates that may
/// depend on them (normal, dev or build dependency). A library name also covers its family:
/// `tonic` covers `tonic-prost` and `tonic-prost-build`.
const OWNED_LIBRARIES: &[Owned] = &[
    Owned {
        libraries: &["tonic", "prost", "protox", "axum"],
        crates: &["starling-api"],
        why: "only the API speaks gRPC, protobuf and HTTP",
    },
    Owned {
        libraries: &[
            "clap",
            "anyhow",
            "tracing-subscriber",
            "metrics-exporter-prometheus",
        ],
        crates: &["starling"],
        why: "flags, untyped errors, the log format and the metrics exporter are the binary's; \
              libraries return typed errors",
    },
    Owned {
        libraries: &["tantivy"],
        crates: &["starling-search"],
        why: "only the search crate names the full-text engine",
    },
    Owned {
        libraries: &["fjall", "redb", "scylla"],
        crates: &["starling-store"],
        why: "only the store names a storage engine or a CQL driver",
    },
    Owned {
        libraries: &["serde_ipld_dagcbor", "ipld-core", "k256", "p256", "sha2"],
        crates: &["starling-repo"],
        why: "only the repository crate decodes DAG-CBOR and checks signatures",
    },
];

/// Crates that may depend on a library [`OWNED_LIBRARIES`] gives to another, and why. No
/// other: xtask, starling-bench and starling-gen use neither clap nor anyhow, and
/// starling-bench drives the gRPC API through an external load generator, not tonic.
const EXCEPTIONS: &[Exception] = &[
    Exception {
        krate: "starling-ingest",
        library: "k256",
        why: "its labeler test signs labels as a labeler does (a dev-dependency only)",
    },
    Exception {
        krate: "starling-bench",
        library: "sha2",
        why: "grpc-load compares each answer under load with its checked answer's SHA-256",
    },
];

/// Libraries only some crates may depend on.
struct Owned {
    libraries: &'static [&'static str],
    crates: &'static [&'static str],
    why: &'static str,
}

/// One crate allowed one owned library anyway.
struct Exception {
    krate: &'static str,
    library: &'static str,
    #[allow(dead_code)] // Read by people: the reason is the point of the entry.
    why: &'static str,
}

/// The workspace's packages, from `cargo metadata`.
pub fn packages(root: &Path) -> Result<Vec<serde_json::Value>, String> {
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
    metadata["packages"]
        .as_array()
        .cloned()
        .ok_or_else(|| "cargo metadata has no packages".to_owned())
}

/// Dependencies between workspace crates that [`ALLOWED_EDGES`] does not list.
pub fn check_edges(packages: &[serde_json::Value]) -> Vec<String> {
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
    problems
}

/// Dependencies on a library of [`OWNED_LIBRARIES`] from a crate it does not belong to.
pub fn check_libraries(packages: &[serde_json::Value]) -> Vec<String> {
    let mut problems = Vec::new();
    for package in packages {
        let name = package["name"].as_str().unwrap_or_default();
        for dep in package["dependencies"].as_array().into_iter().flatten() {
            let dep_name = dep["name"].as_str().unwrap_or_default();
            if let Some(problem) = library_problem(name, dep_name) {
                problems.push(problem);
            }
        }
    }
    problems
}

/// Why `krate` must not depend on `library`, if it must not.
fn library_problem(krate: &str, library: &str) -> Option<String> {
    let (owned, family) = OWNED_LIBRARIES.iter().find_map(|owned| {
        let family = owned
            .libraries
            .iter()
            .find(|family| in_family(library, family))?;
        Some((owned, *family))
    })?;
    let excepted = EXCEPTIONS
        .iter()
        .any(|exception| exception.krate == krate && in_family(library, exception.library));
    if owned.crates.contains(&krate) || excepted {
        return None;
    }
    Some(format!(
        "`{krate}` must not depend on `{library}`: only {} may use {family} ({}); add an \
         exception with a reason to xtask's EXCEPTIONS if it must",
        owned.crates.join(", "),
        owned.why
    ))
}

/// Whether `library` is `family` or one of its crates (`family-…`).
fn in_family(library: &str, family: &str) -> bool {
    library
        .strip_prefix(family)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('-'))
}

#[cfg(test)]
mod tests {
    use super::*;

    // Checks the library rules on names: families match by prefix and dash only, owners pass,
    // other crates fail with a message naming the owner.
    #[test]
    fn owned_libraries_stay_with_their_crates() {
        assert!(library_problem("starling-api", "tonic-prost-build").is_none());
        assert!(library_problem("starling", "anyhow").is_none());
        assert!(library_problem("starling-ingest", "tokio").is_none());
        // `prost` owns `prost-types`, not a crate that merely starts with the same letters.
        assert!(library_problem("starling-ingest", "prosty").is_none());
        let problem = library_problem("starling-ingest", "prost-types").unwrap();
        assert!(
            problem.contains("only starling-api may use prost"),
            "{problem}"
        );
        assert!(library_problem("starling-bench", "clap").is_some());
        assert!(library_problem("starling-api", "scylla").is_some());
    }
}
