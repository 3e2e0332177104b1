//! The binary's error paths: bad flags, environment variables and config files give a one-line
//! error naming the problem and a non-zero exit, and leave no data directory behind.

// Test code: a panic is the failure report.
#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

mod util;

use std::ffi::OsString;
use std::path::Path;
use std::time::Duration;

use util::{Proc, check_error};

fn write(dir: &Path, name: &str, text: &str) -> std::path::PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

// Checks that each bad flag, environment variable and config file value makes `serve` exit 1
// with one line naming the bad value, before it creates the data directory. How: one run of
// the binary per case, through `check_error`, then a check that the directory does not exist.
#[test]
fn bad_serve_configuration_is_a_one_line_error() {
    let dir = util::test_dir();
    let data = dir.path().join("data");
    let unknown_key = write(dir.path(), "unknown.toml", "http_adr = '127.0.0.1:1'\n");
    let unknown_nested = write(dir.path(), "nested.toml", "[ingest]\nbatch_size = 3\n");
    let bad_syntax = write(dir.path(), "syntax.toml", "[ingest\n");
    let missing = dir.path().join("missing.toml");
    let d = &data;

    check_error(
        &[&"serve", &"--data-dir", d, &"--jetstream", &"http://x"],
        &[],
        &["jetstream URL `http://x`", "ws://"],
    );
    check_error(
        &[&"serve", &"--data-dir", d, &"--jetstream", &"ws://"],
        &[],
        &["`ws://`", "no host"],
    );
    check_error(
        &[&"serve", &"--data-dir", d, &"--http-addr", &"nonsense"],
        &[],
        &["http address `nonsense`", "IP:PORT"],
    );
    check_error(
        &[&"serve", &"--data-dir", d],
        &[("STARLING_HTTP_ADDR", "nonsense")],
        &["http address `nonsense`"],
    );
    check_error(
        &[&"serve", &"--data-dir", d, &"--batch-events-max", &"0"],
        &[],
        &["batch_events_max is 0"],
    );
    check_error(
        &[
            &"serve",
            &"--data-dir",
            d,
            &"--zstd-dictionary",
            &dir.path().join("no.zdict"),
        ],
        &[],
        &["zstd dictionary", "no.zdict"],
    );
    check_error(
        &[
            &"serve",
            &"--data-dir",
            d,
            &"--wanted-collection",
            &"not an nsid",
        ],
        &[],
        &["wanted collection `not an nsid`"],
    );
    check_error(
        &[&"serve", &"--data-dir", d, &"--config", &unknown_key],
        &[],
        &["unknown.toml", "unknown field `http_adr`"],
    );
    check_error(
        &[&"serve", &"--data-dir", d, &"--config", &unknown_nested],
        &[],
        &["nested.toml", "unknown field `batch_size`"],
    );
    check_error(
        &[&"serve", &"--data-dir", d],
        &[("STARLING_CONFIG", missing.to_str().unwrap())],
        &["reading config file", "missing.toml"],
    );
    check_error(
        &[&"serve", &"--data-dir", d, &"--config", &bad_syntax],
        &[],
        &["syntax.toml"],
    );
    check_error(&[&"serve"], &[], &["no data directory", "--data-dir"]);

    let garbage = write(dir.path(), "garbage.pem", "not a certificate\n");
    let g = &"127.0.0.1:0";
    check_error(
        &[
            &"serve",
            &"--data-dir",
            d,
            &"--grpc-addr",
            g,
            &"--grpc-tls-cert",
            &garbage,
        ],
        &[],
        &["grpc_tls_cert is set without grpc_tls_key"],
    );
    check_error(
        &[
            &"serve",
            &"--data-dir",
            d,
            &"--grpc-tls-cert",
            &garbage,
            &"--grpc-tls-key",
            &garbage,
        ],
        &[],
        &["gRPC is off", "grpc_addr"],
    );
    check_error(
        &[
            &"serve",
            &"--data-dir",
            d,
            &"--grpc-addr",
            g,
            &"--grpc-tls-cert",
            &missing,
            &"--grpc-tls-key",
            &garbage,
        ],
        &[],
        &["reading the gRPC TLS certificate", "missing.toml"],
    );
    check_error(
        &[&"serve", &"--data-dir", d, &"--grpc-addr", g],
        &[
            ("STARLING_GRPC_TLS_CERT", garbage.to_str().unwrap()),
            ("STARLING_GRPC_TLS_KEY", garbage.to_str().unwrap()),
        ],
        &["gRPC TLS certificate or key", "garbage.pem"],
    );
    assert!(!data.exists(), "a failed start created the data directory");
}

// Checks that a config value of the wrong type is reported with the key it belongs to, as the
// issue asks ("a one-line error naming the problem"). How: `http_addr = 5` in a config file;
// the error must name `http_addr` (a file with many keys is otherwise a guessing game).
#[test]
fn config_type_error_names_the_key() {
    let dir = util::test_dir();
    let config = write(dir.path(), "typed.toml", "data_dir = 'x'\nhttp_addr = 5\n");
    check_error(
        &[&"stats", &"--config", &config],
        &[],
        &["typed.toml", "http_addr"],
    );
}

// Checks that `stats` and `replay` on things that do not exist fail with one line naming them,
// and that `stats` does not create the missing directory. How: one run per case.
#[test]
fn missing_paths_are_one_line_errors() {
    let dir = util::test_dir();
    let missing = dir.path().join("no-such-dir");
    check_error(
        &[&"stats", &"--data-dir", &missing, &"--json"],
        &[],
        &["data directory", "no-such-dir", "does not exist"],
    );
    assert!(
        !missing.exists(),
        "`stats` created the directory it was asked to read"
    );
    check_error(&[&"stats", &"--json"], &[], &["no data directory"]);
    let data = dir.path().join("data");
    check_error(
        &[
            &"replay",
            &dir.path().join("no-such-file.jsonl"),
            &"--data-dir",
            &data,
        ],
        &[],
        &["no-such-file.jsonl"],
    );
}

// Checks that flags clap rejects exit 2 with an `error:` first line naming the flag. How: an
// unknown flag and a non-number where a number belongs.
#[test]
fn bad_flags_name_the_flag() {
    let dir = util::test_dir();
    let data = dir.path().join("data");
    let cases: [(&[&dyn AsRef<std::ffi::OsStr>], &str); 2] = [
        (
            &[&"serve", &"--data-dir", &data, &"--no-such-flag"],
            "--no-such-flag",
        ),
        (
            &[
                &"replay",
                &"x.jsonl",
                &"--data-dir",
                &data,
                &"--batch-events-max",
                &"many",
            ],
            "--batch-events-max",
        ),
    ];
    for (args, flag) in cases {
        let args: Vec<OsString> = args.iter().map(|arg| arg.as_ref().to_owned()).collect();
        let out = util::run(util::starling(&args));
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", out.stderr);
        assert_eq!(out.stderr.lines().count(), 1, "{args:?}: {}", out.stderr);
        let first = out.stderr.lines().next().unwrap_or_default();
        assert!(
            first.starts_with("starling: error: ") && first.contains(flag),
            "{args:?}: {}",
            out.stderr
        );
    }
    assert!(!data.exists());
}

// Checks the errors of a second process on resources the first one holds: `stats` on a data
// directory that a running `serve` has open, and a second `serve` on the first one's HTTP port.
// How: start `serve`, wait for its "listening" line, run the second command, and check that it
// exits 1 with a last stderr line naming the problem; then stop the first with SIGTERM and
// check that it exits 0.
#[test]
fn busy_data_dir_and_port_are_errors() {
    let dir = util::test_dir();
    let data = dir.path().join("data");
    let mut serve = Proc::spawn(
        util::starling([
            "serve".as_ref(),
            "--data-dir".as_ref(),
            data.as_os_str(),
            "--http-addr".as_ref(),
            "127.0.0.1:0".as_ref(),
        ]),
        "serve",
    );
    let addr = serve.wait_for_stdout("starling: http listening on ", Duration::from_secs(30));

    check_error(
        &[&"stats", &"--data-dir", &data, &"--json"],
        &[],
        &["opening the store", "another starling"],
    );

    let other = dir.path().join("other");
    let out = util::run(util::starling([
        "serve".as_ref(),
        "--data-dir".as_ref(),
        other.as_os_str(),
        "--http-addr".as_ref(),
        addr.as_ref() as &std::ffi::OsStr,
    ]));
    assert_eq!(out.status.code(), Some(1), "{}", out.stderr);
    let last = out.stderr.lines().last().unwrap_or_default();
    assert!(
        last.starts_with("starling: error: ")
            && last.contains("binding the HTTP API")
            && last.contains(&addr),
        "{}",
        out.stderr
    );
    assert_eq!(
        out.stderr.matches("starling: error:").count(),
        1,
        "{}",
        out.stderr
    );

    serve.terminate();
    let status = serve.wait_exit(Duration::from_secs(30));
    assert!(
        status.success(),
        "serve exited with {status}\n{}",
        serve.output_so_far()
    );
}

/// The table files of the embedded store under `data`, each with its length.
fn table_files(data: &Path) -> Vec<(std::path::PathBuf, u64)> {
    let mut res = Vec::new();
    for keyspace in std::fs::read_dir(data.join("fjall/keyspaces")).unwrap() {
        let tables = keyspace.unwrap().path().join("tables");
        for table in std::fs::read_dir(tables).into_iter().flatten() {
            let path = table.unwrap().path();
            let len = std::fs::metadata(&path).unwrap().len();
            res.push((path, len));
        }
    }
    res
}

// Checks that a store whose files are damaged fails to open with an error naming the directory
// of the damaged files and the cause (a checksum), not the old guess that another starling holds
// it. How: replay a sample, flip 16 bytes in the middle of every table file, and run `stats`.
#[test]
fn damaged_store_files_are_named_errors() {
    let dir = util::test_dir();
    let events = dir.path().join("sample.jsonl");
    util::sample(&events, 100, 7);
    let data = dir.path().join("data");
    util::replay(&events, &data);
    let tables = table_files(&data);
    assert!(
        !tables.is_empty(),
        "no table files under {}",
        data.display()
    );
    for (path, len) in &tables {
        let mut bytes = std::fs::read(path).unwrap();
        let middle = (*len / 2) as usize;
        for byte in bytes.iter_mut().skip(middle).take(16) {
            *byte ^= 0xff;
        }
        std::fs::write(path, bytes).unwrap();
    }
    let out = util::run(util::starling([
        "stats".as_ref(),
        "--data-dir".as_ref(),
        data.as_os_str(),
        "--json".as_ref() as &std::ffi::OsStr,
    ]));
    assert_eq!(out.status.code(), Some(1), "{}", out.stderr);
    let last = out.stderr.lines().last().unwrap_or_default();
    assert!(
        last.starts_with("starling: error: opening the store"),
        "{last}"
    );
    // The engine names no file of its own: the directory of the files it was opening or
    // reading (the engine's, or a keyspace's) is named.
    let engine_dir = format!("{}`", data.join("fjall").display());
    let keyspace_dir = format!("{}", data.join("fjall/keyspaces/").display());
    assert!(
        last.contains(&engine_dir) || last.contains(&keyspace_dir),
        "names no directory: {last}"
    );
    assert!(last.contains("checksum"), "names no cause: {last}");
    assert!(!last.contains("another starling"), "{last}");
}

// `--version` names the commit the binary was built from, as git gives it for this checkout
// (or `unknown` outside one, or `STARLING_COMMIT` when a packager's build and test set it).
#[test]
fn version_names_the_commit_built() {
    let out = util::starling(["--version"]).output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let shown = String::from_utf8(out.stdout).unwrap();
    let git = std::process::Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()
        .filter(|out| out.status.success())
        .map(|out| String::from_utf8(out.stdout).unwrap().trim().to_owned());
    let expected = std::env::var("STARLING_COMMIT")
        .ok()
        .filter(|commit| !commit.is_empty())
        .or(git)
        .unwrap_or_else(|| "unknown".to_owned());
    let version = env!("CARGO_PKG_VERSION");
    assert_eq!(
        shown.trim(),
        format!("starling {version} (commit {expected})")
    );
}
