//! Runs every AT Protocol syntax interop vector in `../shared/data/atproto-syntax` (the copy in
//! `bluesky-social/atproto` and the canonical `atproto-interop-tests` set) through the checks in
//! `starling_core::syntax`.

// Tests may panic: a failed assertion or a missing file is a failed test.
#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

use std::path::{Path, PathBuf};

use starling_core::syntax;

/// The shared data directory, `<workspace>/../shared/data`, or `None` (after saying so) if it is
/// absent. On CI (`CI=true`) an absent directory fails the test instead, so that the vectors can
/// never be skipped silently there.
fn shared_data_dir() -> Option<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/data");
    if dir.is_dir() {
        return Some(dir);
    }
    let message = format!(
        "this test needs ../shared/data (looked in {})",
        dir.display()
    );
    assert!(std::env::var("CI").as_deref() != Ok("true"), "{message}");
    println!("skipping: {message}");
    None
}

/// Which of the two vector sets a file comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Set {
    /// `data/atproto-syntax/*.txt`, copied from `bluesky-social/atproto`.
    Atproto,
    /// `data/atproto-syntax/canonical-interop-tests/*.txt`.
    Canonical,
}

/// What every vector in a file must do.
#[derive(Clone, Copy, Debug)]
enum Expect {
    Valid,
    Invalid,
}

/// A check from `syntax`, as a plain function.
type Check = fn(&str) -> bool;

fn datetime_parses(s: &str) -> bool {
    syntax::parse_datetime_micros(s).is_some()
}

fn tid_valid_and_decodes(s: &str) -> bool {
    // The two TID entry points must agree on every vector.
    let valid = syntax::is_valid_tid(s);
    assert_eq!(
        valid,
        syntax::parse_tid(s).is_some(),
        "is_valid_tid and parse_tid disagree on {s:?}"
    );
    valid
}

fn at_uri_valid(s: &str) -> bool {
    let valid = syntax::is_valid_at_uri(s);
    // Every record URI is an AT-URI, and its borrowed parts put back together are the input.
    if let Some(record) = syntax::RecordUri::parse(s) {
        assert!(
            valid,
            "RecordUri::parse accepts {s:?} but is_valid_at_uri does not"
        );
        let rebuilt = format!("at://{}/{}/{}", record.did, record.collection, record.rkey);
        assert_eq!(rebuilt, s);
    }
    valid
}

/// Every vector file and the check its lines go through. Files missing here fail the test, so
/// a new upstream file cannot go unchecked.
const FILES: &[(&str, Expect, Check)] = &[
    (
        "atidentifier_syntax_valid.txt",
        Expect::Valid,
        syntax::is_valid_at_identifier,
    ),
    (
        "atidentifier_syntax_invalid.txt",
        Expect::Invalid,
        syntax::is_valid_at_identifier,
    ),
    ("aturi_syntax_valid.txt", Expect::Valid, at_uri_valid),
    ("aturi_syntax_invalid.txt", Expect::Invalid, at_uri_valid),
    ("cid_syntax_valid.txt", Expect::Valid, syntax::is_valid_cid),
    (
        "cid_syntax_invalid.txt",
        Expect::Invalid,
        syntax::is_valid_cid,
    ),
    ("datetime_syntax_valid.txt", Expect::Valid, datetime_parses),
    (
        "datetime_syntax_invalid.txt",
        Expect::Invalid,
        datetime_parses,
    ),
    (
        "datetime_parse_invalid.txt",
        Expect::Invalid,
        datetime_parses,
    ),
    ("did_syntax_valid.txt", Expect::Valid, syntax::is_valid_did),
    (
        "did_syntax_invalid.txt",
        Expect::Invalid,
        syntax::is_valid_did,
    ),
    (
        "handle_syntax_valid.txt",
        Expect::Valid,
        syntax::is_valid_handle,
    ),
    (
        "handle_syntax_invalid.txt",
        Expect::Invalid,
        syntax::is_valid_handle,
    ),
    (
        "language_syntax_valid.txt",
        Expect::Valid,
        syntax::is_valid_language,
    ),
    (
        "language_syntax_invalid.txt",
        Expect::Invalid,
        syntax::is_valid_language,
    ),
    (
        "language_parse_invalid.txt",
        Expect::Invalid,
        syntax::is_valid_language_strict,
    ),
    (
        "nsid_syntax_valid.txt",
        Expect::Valid,
        syntax::is_valid_nsid,
    ),
    (
        "nsid_syntax_invalid.txt",
        Expect::Invalid,
        syntax::is_valid_nsid,
    ),
    (
        "recordkey_syntax_valid.txt",
        Expect::Valid,
        syntax::is_valid_record_key,
    ),
    (
        "recordkey_syntax_invalid.txt",
        Expect::Invalid,
        syntax::is_valid_record_key,
    ),
    ("tid_syntax_valid.txt", Expect::Valid, tid_valid_and_decodes),
    (
        "tid_syntax_invalid.txt",
        Expect::Invalid,
        tid_valid_and_decodes,
    ),
    ("uri_syntax_valid.txt", Expect::Valid, syntax::is_valid_uri),
    (
        "uri_syntax_invalid.txt",
        Expect::Invalid,
        syntax::is_valid_uri,
    ),
];

/// Lines where the two sets disagree and `syntax` follows the other set (see the `syntax`
/// module docs). The canonical set calls these language tags syntax-invalid; the atproto copy
/// calls them well-formed and rejects them only in strict parsing, which `syntax` follows.
const DISPUTED: &[(Set, &str, &str)] = &[
    (Set::Canonical, "language_syntax_invalid.txt", "JA"),
    (Set::Canonical, "language_syntax_invalid.txt", "jaja"),
];

/// The vectors of one file: every line that is neither blank nor a `#` comment, untrimmed.
fn read_vectors(path: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(path).unwrap();
    text.split('\n')
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
        .map(str::to_owned)
        .collect()
}

/// Runs every file of one set and returns the failures, so that one run reports them all.
fn check_set(set: Set, dir: &Path) -> Vec<String> {
    let mut failures = Vec::new();
    let mut n_vectors_total = 0usize;
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|ext| ext != "txt") {
            continue;
        }
        let name = path.file_name().unwrap().to_str().unwrap().to_owned();
        let Some(&(_, expect, check)) = FILES.iter().find(|(file, _, _)| *file == name) else {
            failures.push(format!(
                "{set:?} {name}: no check is registered for this file"
            ));
            continue;
        };
        let vectors = read_vectors(&path);
        assert!(!vectors.is_empty(), "{set:?} {name}: no vectors read");
        n_vectors_total += vectors.len();
        for vector in &vectors {
            if DISPUTED.contains(&(set, name.as_str(), vector.as_str())) {
                println!("skipping disputed vector {set:?} {name}: {vector:?}");
                continue;
            }
            let valid = check(vector);
            match expect {
                Expect::Valid if !valid => {
                    failures.push(format!("{set:?} {name}: rejected {vector:?}"))
                }
                Expect::Invalid if valid => {
                    failures.push(format!("{set:?} {name}: accepted {vector:?}"))
                }
                _ => {}
            }
        }
    }
    println!("{set:?}: {n_vectors_total} vectors checked");
    assert!(
        n_vectors_total > 0,
        "{set:?}: no vector files in {}",
        dir.display()
    );
    failures
}

// Checks every vector of the atproto copy: valid lines must pass and invalid ones fail. A file
// without a registered check also fails, so no vector file is silently ignored.
#[test]
fn atproto_copy_vectors() {
    let Some(data) = shared_data_dir() else {
        return;
    };
    let failures = check_set(Set::Atproto, &data.join("atproto-syntax"));
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

// Checks every vector of the canonical interop set the same way, skipping only the lines listed
// in `DISPUTED`.
#[test]
fn canonical_vectors() {
    let Some(data) = shared_data_dir() else {
        return;
    };
    let failures = check_set(
        Set::Canonical,
        &data.join("atproto-syntax/canonical-interop-tests"),
    );
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

// Checks that each disputed line really is in the file it names, so the skip list cannot go
// stale and hide nothing (or hide a typo).
#[test]
fn disputed_lines_exist() {
    let Some(data) = shared_data_dir() else {
        return;
    };
    for &(set, file, line) in DISPUTED {
        let dir = match set {
            Set::Atproto => data.join("atproto-syntax"),
            Set::Canonical => data.join("atproto-syntax/canonical-interop-tests"),
        };
        let vectors = read_vectors(&dir.join(file));
        assert!(
            vectors.iter().any(|vector| vector == line),
            "{set:?} {file} has no line {line:?}"
        );
    }
}
