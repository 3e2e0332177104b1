//! The status page at `/`, opened in a real headless Chromium (Debian's package, installed by
//! `scripts/install-chromium.sh`) against a `serve` ingesting from a stand-in Jetstream.

// Test code: a panic is the failure report.
#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

mod util;

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use util::{FakeJetstream, Proc};

/// How long the service gets to reach a state before the test fails.
const DEADLINE: Duration = Duration::from_secs(60);

/// Chromium on PATH, if installed.
fn chromium() -> Option<PathBuf> {
    ["chromium", "chromium-browser"].iter().find_map(|name| {
        let out = Command::new("sh")
            .args(["-c", &format!("command -v {name}")])
            .output()
            .ok()?;
        let path = String::from_utf8(out.stdout).ok()?;
        (out.status.success() && !path.trim().is_empty()).then(|| PathBuf::from(path.trim()))
    })
}

/// Runs the page in headless Chromium for 20 s of virtual time; its output holds the DOM left.
fn open_headless(
    chromium: &std::path::Path,
    dir: &std::path::Path,
    addr: &str,
) -> std::process::Output {
    let profile = dir.join("chromium-profile");
    Command::new(chromium)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--virtual-time-budget=20000",
            "--dump-dom",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg(format!("http://{addr}/"))
        .output()
        .unwrap()
}

/// The text of the element with `id` in a dumped DOM.
fn text_of<'a>(dom: &'a str, id: &str) -> &'a str {
    let open = format!("id=\"{id}\"");
    let start = dom
        .find(&open)
        .unwrap_or_else(|| panic!("no #{id} in\n{dom}"));
    let after = &dom[start..];
    let text = &after[after.find('>').unwrap() + 1..];
    &text[..text.find('<').unwrap()]
}

/// A number as the page shows it (`7,536`).
fn shown_number(text: &str) -> u64 {
    text.replace(',', "")
        .parse()
        .unwrap_or_else(|_| panic!("`{text}` is not a number"))
}

// Checks the page as a browser runs it: Chromium loads `/` (its CSP allows nothing but this
// origin and the page's own inline code), runs its script for 20 s of virtual time while the
// test's `serve` answers for real, and the DOM it leaves shows the page drew its charts from
// several samples, readiness "ready", Jetstream connected, and the store's and graph's counts
// equal to what `/v1/stats` and `/metrics` say when the test asks them itself.
#[test]
fn status_page_draws_live_data_in_headless_chromium() {
    let Some(chromium) = chromium() else {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "no chromium on PATH: run scripts/install-chromium.sh"
        );
        eprintln!("status page test skipped: no chromium on PATH (scripts/install-chromium.sh)");
        return;
    };
    let dir = util::test_dir();
    let lines = util::sample(&dir.path().join("sample.jsonl"), 120, 7);
    let mut events = util::events_of(lines);
    events.sort_by_key(|event| event.time_us);
    let newest = events.last().unwrap().time_us;
    let jetstream = FakeJetstream::start(events, None, None);
    let mut args: Vec<OsString> = ["serve", "--data-dir"].map(OsString::from).to_vec();
    args.push(dir.path().join("data").into_os_string());
    for arg in [
        "--http-addr",
        "127.0.0.1:0",
        "--jetstream",
        &jetstream.url(),
    ] {
        args.push(arg.into());
    }
    let mut serve = Proc::spawn(util::starling(&args), "serve");
    let addr = serve.wait_for_stdout("starling: http listening on ", DEADLINE);
    let stats = util::poll_until(DEADLINE, "every event to be applied", || {
        serve.assert_healthy();
        let stats = util::http_json(&addr, "/v1/stats")?;
        (stats["timelines"]["applied_cursor"] == newest)
            .then_some(stats.clone())
            .ok_or_else(|| stats.to_string())
    });

    let out = open_headless(&chromium, dir.path(), &addr);
    let dom = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && !dom.is_empty(),
        "chromium: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );

    let samples: usize = dom
        .split("data-samples=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .unwrap()
        .parse()
        .unwrap();
    assert!(samples >= 3, "only {samples} samples drawn\n{dom}");
    let rss_points = dom
        .split("id=\"c-rss\"")
        .nth(1)
        .and_then(|rest| rest.split("points=\"").nth(1))
        .and_then(|rest| rest.split('"').next())
        .unwrap();
    assert_eq!(
        rss_points.split_whitespace().count(),
        samples,
        "{rss_points}"
    );
    assert_eq!(text_of(&dom, "ready"), "ready", "{dom}");
    assert_eq!(text_of(&dom, "i-connected"), "connected");
    for key in ["actors", "follows", "posts", "likes"] {
        assert!(stats[key].as_u64().unwrap() > 0, "{stats}");
        assert_eq!(
            shown_number(text_of(&dom, &format!("s-{key}"))),
            stats[key].as_u64().unwrap(),
            "{key}"
        );
    }
    let metrics = util::http_get(&addr, "/metrics").unwrap().1;
    let graph_follows: u64 = metrics
        .lines()
        .find_map(|line| line.strip_prefix("starling_graph_follows "))
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(shown_number(text_of(&dom, "g-follows")), graph_follows);
    assert!(
        text_of(&dom, "build").starts_with(env!("CARGO_PKG_VERSION")),
        "{dom}"
    );
    serve.terminate();
    assert!(
        serve.wait_exit(DEADLINE).success(),
        "{}",
        serve.output_so_far()
    );
}
