//! `starling takedown` and `starling untakedown`: in the store directly, then through a running
//! `serve`'s admin endpoint with the admin token.

// Test code: a panic is the failure report.
#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

mod util;

use std::ffi::OsString;
use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};
use util::{FakeJetstream, Proc};

const DEADLINE: Duration = Duration::from_secs(60);
const ADMIN_TOKEN: &str = "takedown-admin-token";
const URI: &str = "at://did:plc:aaaaaaaaaaaaaaaaaaaaaaaa/app.bsky.feed.post/3l3qo2vutsw2b";

fn cli(args: &[&str], data_dir: &Path, token: Option<&str>) -> util::Finished {
    let mut all: Vec<OsString> = args.iter().map(OsString::from).collect();
    all.push("--data-dir".into());
    all.push(data_dir.as_os_str().to_owned());
    let mut cmd = util::starling(&all);
    if let Some(token) = token {
        cmd.env("STARLING_ADMIN_TOKEN", token);
    }
    util::run(cmd)
}

fn answer(out: &util::Finished) -> Value {
    assert!(out.status.success(), "{}\n{}", out.status, out.stderr);
    serde_json::from_str(out.stdout.trim()).unwrap()
}

// Checks the command both ways: a takedown written in the store directly (no `serve`) is what
// the next `serve` reads back over HTTP (durable); through `--server` it needs the admin
// token (none or a wrong one is refused and changes nothing), and lifts the takedown; bad
// subjects are refused before anything is written.
#[test]
fn takedown_command_in_the_store_and_through_serve() {
    let dir = util::test_dir();
    let data_dir = dir.path().join("data");
    let path = dir.path().join("sample.jsonl");
    assert!(!util::sample(&path, 20, 3).is_empty());
    util::replay(&path, &data_dir);

    let out = cli(
        &["takedown", "record", URI, "--ref", "case 7"],
        &data_dir,
        None,
    );
    assert_eq!(
        answer(&out),
        json!({"taken_down": true, "takedown_ref": "case 7"})
    );
    let out = cli(&["takedown", "actor", "alice"], &data_dir, None);
    assert!(!out.status.success());
    assert!(
        out.stderr.contains("`alice` is not a DID"),
        "{}",
        out.stderr
    );

    let jetstream = FakeJetstream::start(Vec::new(), None, None);
    let mut args: Vec<OsString> = ["serve", "--data-dir"].map(OsString::from).to_vec();
    args.push(data_dir.as_os_str().to_owned());
    for arg in [
        "--http-addr",
        "127.0.0.1:0",
        "--jetstream",
        &jetstream.url(),
    ] {
        args.push(arg.into());
    }
    let mut cmd = util::starling(&args);
    cmd.env("STARLING_ADMIN_TOKEN", ADMIN_TOKEN);
    let mut serve = Proc::spawn(cmd, "serve");
    let addr = serve.wait_for_stdout("starling: http listening on ", DEADLINE);
    let state = format!("/v1/admin/takedown?kind=record&subject={URI}");
    assert_eq!(
        util::http_json(&addr, &state).unwrap(),
        json!({"taken_down": true, "takedown_ref": "case 7"})
    );

    let server = ["--server", &addr];
    for token in [None, Some("wrong")] {
        let out = cli(
            &[&["untakedown", "record", URI][..], &server[..]].concat(),
            &data_dir,
            token,
        );
        assert!(!out.status.success(), "{}", out.stdout);
        serve.assert_healthy();
    }
    assert_eq!(util::http_json(&addr, &state).unwrap()["taken_down"], true);
    let out = cli(
        &[&["untakedown", "record", URI][..], &server[..]].concat(),
        &data_dir,
        Some(ADMIN_TOKEN),
    );
    assert_eq!(
        answer(&out),
        json!({"taken_down": false, "takedown_ref": null})
    );
    assert_eq!(util::http_json(&addr, &state).unwrap()["taken_down"], false);
    let cid = "bafkreibme22gw2h7y2h7tg2fhqotaqjucnbc24deqo72b6mkl2egezxhvy";
    let out = cli(
        &[
            &["takedown", "blob", "did:plc:aaaaaaaaaaaaaaaaaaaaaaaa", cid][..],
            &server[..],
        ]
        .concat(),
        &data_dir,
        Some(ADMIN_TOKEN),
    );
    assert_eq!(
        answer(&out),
        json!({"taken_down": true, "takedown_ref": "TAKEDOWN"})
    );
    serve.assert_healthy();
}
