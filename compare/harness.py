"""Starling against the reference dataplane, side by side, on the same generated data.

Run it through compare/run.sh, which installs and builds what it needs. One run, at one scale:

1. `starling gen` writes the network and its activity as Jetstream JSON (cached by its flags and
   a hash of the generator's sources);
   `compare-requests` draws the request sets from that file, with each answer's expected size
   and content (GetTimeline, GetFollowsFollowing, GetAuthorFeed, GetFollowers,
   GetInteractionCounts, GetCountsForUsers, GetActorLikes, GetListMembers, SearchActors,
   GetNotifications and GetUnreadNotificationCount).
2. Ingest: `starling replay` loads the file into Starling's embedded store; the reference
   (compare/reference.mjs: @atproto/bsky's dataplane on PostgreSQL) loads it through its own
   indexer (`--reference-load indexer`, timed: the ingest comparison) or in bulk (COPY,
   `--reference-load bulk`); each scale has a default.
3. Content: every request of the content-checked sets (compare/content.mjs) is sent to both
   and compared with the expectation; a wrong answer fails the run. The notification sets go
   to the reference only when its load kept the file's order (see NOTIFICATION_SETS), and then
   every recipient's whole notification lists are compared between the two systems too
   (compare/notifications.mjs).
4. Each server is left until its processes are idle (under 5% of a core for 5 s, at most 15
   minutes): Starling's engine compacts what the replay wrote when the store opens, and
   PostgreSQL may vacuum after a load, so the runs measure serving alone; the wait is reported.
   Both servers run side by side; for each RPC the same load generator (grpc-load) sends the same
   requests at the same concurrency: gRPC over h2c to Starling, the Connect protocol over
   HTTP/1.1 to the reference (the only HTTP version its server speaks). Every answer's size is
   checked, and every answer of a content-checked set is compared byte for byte (its SHA-256)
   with that system's answer to the same request in step 3, kept only when it was right
   (SET.SYSTEM.answers); a wrong size or answer counts as an error. CPU of each process is read
   from /proc during each run; a run against each server's Ping shows what the load generator
   itself can do.
5. The stock AppView's getTimeline, once on each dataplane, under wrk.
6. A table (stdout, RESULTS_DIR/compare-SCALE.md, and BENCHMARKS.md between markers with
   --write-benchmarks), the raw results as JSON, and PNG charts.

Exit status 1 if either system answered any request with an error, a wrong size or (in the
content checks) wrong content.
"""

import argparse
import datetime
import hashlib
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# name, gen flags, reference load path, requests per set, page limit
SCALES = {
    "smoke": dict(actors=80, follows=600, posts=150, load="indexer", requests=100, limit=10),
    "indexer": dict(actors=10_000, follows=300_000, posts=100_000, load="indexer", requests=2_000, limit=50),
    "bulk": dict(actors=100_000, follows=3_000_000, posts=1_000_000, load="bulk", requests=2_000, limit=50),
}

# RPC name, request set (compare-requests), what the set asks
RPCS = [
    ("GetTimeline", "timeline", "a viewer's home timeline, a full page (content checked)"),
    ("GetFollowsFollowing", "follows-following", "a viewer and one of the 500 most-followed (content checked)"),
    ("GetAuthorFeed", "author-feed", "an author's posts and reposts (content checked)"),
    ("GetInteractionCounts", "interaction-counts", "like/repost/reply/quote counts of 25 posts (content checked)"),
    ("GetCountsForUsers", "counts-for-users", "profile counts of 25 actors (content checked)"),
    ("GetFollowers", "followers", "an account's followers, one page (content checked)"),
    ("GetNotifications", "notifications", "a recipient's newest notifications, one page (content checked)"),
    ("GetUnreadNotificationCount", "unread-count", "a recipient's unread count, never seen (content checked)"),
    ("GetActorLikes", "actor-likes", "an actor's likes, one page (content checked)"),
    ("GetListMembers", "list-members", "a list's members, one page (content checked)"),
    ("SearchActors", "search-actors", "a handle or its first label, one page (content checked)"),
]

# The request sets compare-requests writes with each answer's expected content
# (NAME.content.jsonl), checked on both systems by compare/content.mjs before the load runs.
CONTENT_SETS = ["timeline", "follows-following", "author-feed", "actor-likes", "list-members",
                "followers", "search-actors", "interaction-counts", "counts-for-users"]

# The content-checked sets of notifications. The reference makes a reply's notifications from
# the posts it has indexed when the reply comes: only when its load keeps the file's order (one
# event at a time, or the bulk loader) are they the file's, so otherwise these sets are checked
# and run on Starling alone.
NOTIFICATION_SETS = ["notifications", "unread-count"]

START_TIMEOUT_S = 600
CLK_TCK = os.sysconf("SC_CLK_TCK")
PAGE_BYTES = os.sysconf("SC_PAGE_SIZE")


def log(msg):
    print(f"compare: {msg}", file=sys.stderr, flush=True)


def fail(msg):
    log(f"error: {msg}")
    sys.exit(1)


# ----- Processes -----


class Server:
    """A child process that prints a line when it is ready; stopped with SIGTERM."""

    def __init__(self, name, argv, ready, env=None, cwd=ROOT):
        self.name = name
        self.log_path = Path(tempfile.mkstemp(prefix=f"compare-{name}-", suffix=".log")[1])
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen(
            argv, cwd=cwd, env={**os.environ, **(env or {})},
            stdout=subprocess.PIPE, stderr=self.log, text=True, start_new_session=True)
        deadline = time.time() + START_TIMEOUT_S
        self.lines = []
        while True:
            line = self.proc.stdout.readline()
            if not line:
                self.log.flush()
                fail(f"{name} exited before it was ready; its log:\n{self.log_path.read_text()[-3000:]}")
            self.lines.append(line.rstrip("\n"))
            match = ready(line)
            if match:
                self.ready = match
                break
            if time.time() > deadline:
                self.stop()
                fail(f"{name} was not ready within {START_TIMEOUT_S} s")

    @property
    def pid(self):
        return self.proc.pid

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.log.close()


def descendants(pid):
    """`pid` and every process below it."""
    children = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            children.setdefault(ppid, []).append(int(entry.name))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children.get(p, []))
    return out


def cpu_ticks(pids):
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
        except (OSError, IndexError, ValueError):
            pass
    return total


def memory_mib(pids, key):
    """Sum of `key` (Rss, Pss, VmHWM) over `pids`, in MiB."""
    total = 0
    for pid in pids:
        path = f"/proc/{pid}/status" if key == "VmHWM" else f"/proc/{pid}/smaps_rollup"
        try:
            for line in Path(path).read_text().splitlines():
                if line.startswith(key + ":"):
                    total += int(line.split()[1])
        except OSError:
            pass
    return round(total / 1024, 1)


def timed(argv, env=None):
    """Runs `argv` to completion under GNU time; returns (stdout, seconds, peak RSS MiB, CPU
    seconds), and passes its stderr on."""
    with tempfile.NamedTemporaryFile("r", suffix=".time") as tfile:
        cmd = ["/usr/bin/time", "-f", "%e %M %U %S", "-o", tfile.name, *map(str, argv)]
        res = subprocess.run(cmd, cwd=ROOT, env={**os.environ, **(env or {})},
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        if res.returncode != 0:
            fail(f"`{' '.join(map(str, argv))}` failed ({res.returncode}):\n{res.stderr[-3000:]}")
        seconds, rss_kib, user, system = tfile.read().split()[-4:]
    sys.stderr.write(res.stderr)
    return res.stdout, float(seconds), round(int(rss_kib) / 1024, 1), float(user) + float(system)


# ----- Steps -----


# The sources that decide what `starling gen` writes: the cached file's name carries a hash of
# them, so a file written by an older generator (before lists, say) is never reused.
GENERATOR_SOURCES = ["crates/starling-gen/src", "crates/starling-graph/src/synthetic.rs",
                     "crates/starling-core/src/sample.rs"]


def generator_hash():
    digest = hashlib.sha256()
    for root in GENERATOR_SOURCES:
        path = ROOT / root
        for file in sorted(path.rglob("*.rs")) if path.is_dir() else [path]:
            digest.update(str(file.relative_to(ROOT)).encode() + b"\0" + file.read_bytes())
    return digest.hexdigest()[:10]


def generate(args, scale):
    name = (f"gen-a{scale['actors']}-f{scale['follows']}-p{scale['posts']}-s{args.seed}"
            f"-g{generator_hash()}")
    events = args.data_dir / f"{name}.jsonl.zst"
    if not events.exists():
        log(f"generating {events.name}")
        subprocess.run([args.starling, "gen", "--actors", str(scale["actors"]),
                        "--follows", str(scale["follows"]), "--posts", str(scale["posts"]),
                        "--seed", str(args.seed), "--out", str(events)], check=True)
    summary = json.loads(events.with_name(f"{name}.summary.json").read_text())
    requests = args.work / "requests"
    out = subprocess.run([args.compare_requests, "--events", str(events), "--out", str(requests),
                          "--requests", str(scale["requests"]), "--limit", str(scale["limit"]),
                          "--seed", str(args.seed)],
                         check=True, stdout=subprocess.PIPE, text=True).stdout
    log("request sets: " + "; ".join(out.strip().splitlines()))
    return events, summary, requests


def ingest_starling(args, events, n_events):
    data = args.work / "starling"
    load = round(os.getloadavg()[0], 2)
    _, seconds, rss, _ = timed([args.starling, "replay", events, "--data-dir", data])
    return dict(system="starling", path="replay", events=n_events, seconds=seconds,
                events_per_s=round(n_events / seconds), peak_rss_mib=rss, load_before=load), data


def ingest_reference(args, scale, events, reference):
    # The bulk loader keeps every row in memory until it writes them (~1 KiB each): at the bulk
    # scale that is far over Node's default heap limit.
    heap = [f"--max-old-space-size={16 * 1024}"] if args.reference_load == "bulk" else []
    cmd = [args.node, *heap, "compare/reference.mjs", f"load-{args.reference_load}", events,
           "--db", reference.ready["db"], "--schema", reference.ready["schema"]]
    if args.reference_load == "indexer":
        cmd += ["--in-flight", str(args.reference_in_flight)]
    load = round(os.getloadavg()[0], 2)
    stdout, _, rss, _ = timed(cmd)
    summary = json.loads(stdout.strip().splitlines()[-1])
    if summary.get("failed"):
        log(f"reference: {summary['failed']} events failed to load; first: {summary.get('firstFailures', [])[:3]}")
    return dict(system="reference", path=args.reference_load, events=summary["events"],
                seconds=summary["seconds"], events_per_s=round(summary["events"] / summary["seconds"]),
                failed=summary.get("failed", 0), loader_peak_rss_mib=rss, load_before=load)


def start_starling(args, data):
    def ready(line):
        m = re.match(r"starling: grpc listening on (\S+)", line)
        return m.group(1) if m else None
    return Server("starling", [args.starling, "serve", "--data-dir", data,
                               "--http-addr", "127.0.0.1:0", "--grpc-addr", "127.0.0.1:0",
                               "--plc-url", "http://127.0.0.1:9"], ready,
                  env={"RUST_LOG": "warn"})


# Written into a kept reference directory once its load has finished without a failed event:
# the load's figures, and when and by which commit's run it was made.
REFERENCE_LOADED = "loaded.json"


def kept_reference(args, events):
    """With --reference-data: the directory that keeps the reference's database for `events`,
    and the figures of the load it holds (None when it holds none yet; a directory left by a
    load that did not finish is emptied). Without it: (None, None), a throwaway database."""
    if not args.reference_data:
        return None, None
    name = events.name.removesuffix(".jsonl.zst")
    path = args.reference_data / f"{name}-{args.reference_load}"
    marker = path / REFERENCE_LOADED
    if marker.exists():
        return path, json.loads(marker.read_text())
    if path.exists():
        log(f"reference: {path} holds no finished load: starting it again")
        shutil.rmtree(path)
    path.mkdir(parents=True)
    # PostgreSQL runs as its own user when this is root, and must reach pgdata/ inside.
    path.chmod(0o755)
    return path, None


def keep_reference(path, ingest, commit):
    """Marks the reference's database in `path` as loaded, when it is kept and whole."""
    if path is None:
        return
    if ingest.get("failed"):
        log(f"reference: the load had {ingest['failed']} failed events: {path} is not kept for another run")
        return
    loaded = f"loaded {datetime.date.today().isoformat()} in a run at {commit}"
    (path / REFERENCE_LOADED).write_text(json.dumps(dict(ingest, loaded=loaded)))


def start_reference(args, data_dir=None):
    def ready(line):
        try:
            return json.loads(line) if line.startswith("{") else None
        except json.JSONDecodeError:
            return None
    kept = ["--data", str(data_dir)] if data_dir else []
    return Server("reference", [args.node, "compare/reference.mjs", "start",
                                "--plc", "http://127.0.0.1:9", *kept], ready)


# Recipients whose whole notification lists are compared: every actor up to this many, else
# an even sample of them (the bulk scale has 100,000 actors and millions of notifications).
NOTIFICATION_RECIPIENTS_MAX = 2_000


def check_notifications(args, events, reference, starling):
    """Every actor's (or an even sample's) whole notification lists on both systems, every page,
    compared with each other (compare/notifications.mjs); the content sets check first pages and
    unread counts against the data."""
    dids = set()
    with subprocess.Popen(["zstd", "-dc", str(events)], stdout=subprocess.PIPE, text=True) as zstd:
        for line in zstd.stdout:
            if '"kind":"identity"' in line:
                dids.add(json.loads(line)["did"])
    if zstd.returncode != 0:
        fail(f"zstd -dc {events} failed (exit {zstd.returncode})")
    dids = sorted(dids)
    step = -(-len(dids) // NOTIFICATION_RECIPIENTS_MAX)
    dids = dids[::step]
    out = subprocess.run([args.node, "compare/notifications.mjs",
                          "--reference", f"http://{reference_addr(reference)}",
                          "--starling", starling.ready],
                         input=json.dumps(dids), stdout=subprocess.PIPE, text=True, cwd=ROOT)
    if out.returncode != 0:
        fail(f"notifications differ between starling and the reference (exit {out.returncode})")
    log(f"notifications: same content on both: {out.stdout.strip()}")


def check_content(args, requests, sets, reference, starling):
    """Every request of the content-checked `sets`, once to each system (Starling alone when
    `reference` is None), compared with the answer the generated file says it must get
    (compare/content.mjs). Returns one dict per set: requests, and wrong answers per system
    (the reference's None when it was not asked); the mismatches go to the log."""
    cmd = [args.node, "compare/content.mjs", "--starling", starling.ready, "--dir", str(requests),
           "--sets", ",".join(sets)]
    if reference:
        cmd += ["--reference", f"http://{reference_addr(reference)}"]
    out = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, cwd=ROOT)
    results = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    if out.returncode not in (0, 1) or len(results) != len(sets):
        fail(f"the content check did not run to the end (exit {out.returncode})")
    for res in results:
        res.setdefault("reference", None)
        on = "on both" if reference else "on starling (the reference not asked)"
        verdict = f"same content as expected {on}" if not (res["starling"] or res["reference"]) \
            else f"WRONG: starling {res['starling']}, reference {res['reference']}"
        log(f"content: {res['set']}: {res['requests']} requests: {verdict}")
    return results


def reference_addr(reference):
    return f"127.0.0.1:{reference.ready['dataplanePort']}"


def server_pids(server):
    return descendants(server.pid)


def load_run(args, addr, method, data, expect, http1, duration, concurrency, pids, percentiles=None,
             answers=None):
    """One grpc-load run; returns its key=value summary plus CPU shares."""
    cmd = [args.grpc_load, "-addr", addr, "-method", f"/bsky.Service/{method}", "-data", str(data),
           "-c", str(concurrency), "-duration", duration]
    if expect:
        cmd += ["-expect", str(expect)]
    if answers:
        cmd += ["-answers", str(answers)]
    if percentiles:
        cmd += ["-percentiles", str(percentiles)]
    if http1:
        cmd.append("-http1")
    load = os.getloadavg()[0]
    server_before = cpu_ticks(pids)
    stdout, wall, _, generator_cpu = timed(cmd)
    server_cpu = (cpu_ticks(pids) - server_before) / CLK_TCK
    line = next(l for l in stdout.splitlines() if l.startswith("grpc_load:"))
    res = dict(kv.split("=", 1) for kv in line.split()[1:])
    out = {k: float(res[k]) for k in ("rps", "p50_ms", "p90_ms", "p99_ms", "p999_ms", "max_ms")}
    codes = dict(c.split(":") for c in res["codes"].split(",") if c)
    out.update(requests=int(res["requests"]), errors=int(res["errors"]), codes=res["codes"],
               answers_checked=int(res.get("answers_checked", 0)),
               wrong_answers=int(codes.get("WrongAnswer", 0)),
               server_cores=round(server_cpu / wall, 2), generator_cores=round(generator_cpu / wall, 2),
               load_before=round(load, 2))
    return out


def run_rpcs(args, scale, requests, systems, skip):
    """The load runs of every RPC on each system, but the (system name, set) pairs in `skip`."""
    results = []
    for method, set_name, _ in RPCS:
        for system in systems:
            if (system["name"], set_name) in skip:
                continue
            data = requests / f"{set_name}.bin"
            expect = requests / f"{set_name}.expect"
            expect = expect if expect.exists() else None
            # The digests of this system's answers checked right (check_content).
            answers = requests / f"{set_name}.{system['name']}.answers"
            answers = answers if answers.exists() else None
            # Warm-up: caches, timelines built on first read, PostgreSQL's buffers.
            load_run(args, system["addr"], method, data, expect, system["http1"], args.warmup,
                     args.concurrency, system["pids"](), answers=answers)
            pct = args.work / f"pct-{system['name']}-{set_name}.txt"
            res = load_run(args, system["addr"], method, data, expect, system["http1"], args.duration,
                           args.concurrency, system["pids"](), pct, answers)
            res.update(system=system["name"], rpc=method, wire=system["wire"],
                       concurrency=args.concurrency,
                       percentiles=[tuple(map(float, l.split())) for l in pct.read_text().splitlines()])
            checked = (f"answers checked {res['answers_checked']}, wrong {res['wrong_answers']}"
                       if answers else "sizes only")
            log(f"{system['name']:9} {method:22} {res['rps']:>9.0f} req/s  p50 {res['p50_ms']:.2f} ms  "
                f"p99 {res['p99_ms']:.2f} ms  errors {res['errors']} ({res['codes']}; {checked})")
            results.append(res)
    return results


# A server is idle once its processes use under this share of a core for `IDLE_QUIET_S`
# seconds in a row; it is waited for at most `IDLE_WAIT_MAX_S`.
IDLE_CORES = 0.05
IDLE_QUIET_S = 5
IDLE_WAIT_MAX_S = 900


def wait_idle(systems):
    """Waits until each server has finished the work its start left (Starling's engine
    compacting what a replay wrote, PostgreSQL's autovacuum after a load), so that the load runs
    measure serving alone; returns, per system, the seconds waited and whether it went idle."""
    tick = os.sysconf("SC_CLK_TCK")
    out = {}
    for system in systems:
        started = time.monotonic()
        quiet = 0
        last = cpu_ticks(system["pids"]())
        while quiet < IDLE_QUIET_S and time.monotonic() - started < IDLE_WAIT_MAX_S:
            time.sleep(1)
            now = cpu_ticks(system["pids"]())
            quiet = quiet + 1 if (now - last) / tick < IDLE_CORES else 0
            last = now
        waited = round(time.monotonic() - started, 1)
        out[system["name"]] = dict(waited_s=waited, idle=quiet >= IDLE_QUIET_S)
        state = "idle" if quiet >= IDLE_QUIET_S else "still busy, measured anyway"
        log(f"{system['name']}: {state} after {waited} s")
    return out


def ping_runs(args, systems):
    """Each server's Ping: what the load generator can drive when the server does nothing."""
    empty = args.work / "ping.bin"
    empty.write_bytes(b"\0\0\0\0")
    out = []
    for system in systems:
        res = load_run(args, system["addr"], "Ping", empty, None, system["http1"], args.warmup,
                       args.concurrency, system["pids"]())
        res.update(system=system["name"], rpc="Ping", wire=system["wire"])
        log(f"{system['name']:9} Ping                   {res['rps']:>9.0f} req/s  p99 {res['p99_ms']:.2f} ms")
        out.append(res)
    return out


def appview_runs(args, requests, systems):
    readers = args.work / "readers.txt"
    dids = [json.loads(l.rstrip(","))["actor_did"]
            for l in (requests / "timeline.json").read_text().splitlines()
            if l.startswith("{")]
    readers.write_text("\n".join(sorted(set(dids))[:200]) + "\n")
    out = []
    for system in systems:
        env = {"NODE_ENV": "production"}
        if system["http1"]:
            env["BSKY_DATAPLANE_HTTP_VERSION"] = "1.1"
        appview = Server(f"appview-{system['name']}",
                         [args.node, "appview/start.mjs", "--dataplane", f"http://{system['addr']}"],
                         lambda line: (re.search(r"listening on (http://\S+)", line) or [None, None])[1],
                         env=env)
        try:
            url = appview.ready
            pids = {"appview": lambda: server_pids(appview), "dataplane": system["pids"]}
            wrk = ["wrk", "-t2", f"-c{args.appview_concurrency}", "-d", args.warmup, "--latency",
                   "-s", "crates/starling-bench/wrk-appview.lua", url, "--", str(readers),
                   "starling-admin", str(args.limit)]
            subprocess.run(wrk, cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
            before = {k: cpu_ticks(f()) for k, f in pids.items()}
            t0 = time.time()
            wrk[4] = args.appview_duration
            stdout = subprocess.run(wrk, cwd=ROOT, check=True, stdout=subprocess.PIPE, text=True).stdout
            wall = time.time() - t0
            cores = {k: round((cpu_ticks(f()) - before[k]) / CLK_TCK / wall, 2) for k, f in pids.items()}
            line = next(l for l in stdout.splitlines() if l.startswith("wrk_result:"))
            res = dict(kv.split("=", 1) for kv in line.split()[1:])
            row = dict(system=system["name"], rpc="AppView getTimeline", rps=float(res["rps"]),
                       p50_ms=float(res["p50_us"]) / 1000, p99_ms=float(res["p99_us"]) / 1000,
                       errors=int(res.get("errors", 0)) + int(res.get("non2xx", 0)),
                       appview_cores=cores["appview"], dataplane_cores=cores["dataplane"])
            log(f"{system['name']:9} AppView getTimeline    {row['rps']:>9.1f} req/s  p99 {row['p99_ms']:.1f} ms  "
                f"node {cores['appview']} cores, dataplane {cores['dataplane']} cores")
            out.append(row)
        finally:
            appview.stop()
    return out


# ----- Report -----


def ratio(a, b):
    return f"{a / b:,.1f}x" if b else "n/a"


def table(meta, ingest, rpcs, pings, appview, memory, content, idle):
    by = {(r["system"], r["rpc"]): r for r in rpcs + pings + appview}
    lines = [
        f"Scale **{meta['scale']}**: {meta['actors']:,} actors, {meta['graph_follows']:,} follows in the graph, "
        f"{meta['events']:,} events (`starling gen --actors {meta['actors']} --follows {meta['follows']} "
        f"--posts {meta['posts']} --seed {meta['seed']}`). {meta['date']}, commit {meta['commit']}, "
        f"{meta['machine']}. Concurrency {meta['concurrency']}, {meta['duration']} per run after a "
        f"{meta['warmup']} warm-up. Wires: Starling gRPC over h2c; reference Connect over HTTP/1.1.",
        "",
        "| RPC | Starling req/s | p50 | p99 | errors | Reference req/s | p50 | p99 | errors | throughput | p99 |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for method, _, _ in RPCS + [("Ping", None, None), ("AppView getTimeline", None, None)]:
        s, r = by.get(("starling", method)), by.get(("reference", method))
        if not s or not r:
            continue
        lines.append(
            f"| {method} | {s['rps']:,.0f} | {s['p50_ms']:.2f} ms | {s['p99_ms']:.2f} ms | {s['errors']} "
            f"| {r['rps']:,.0f} | {r['p50_ms']:.2f} ms | {r['p99_ms']:.2f} ms | {r['errors']} "
            f"| **{ratio(s['rps'], r['rps'])}** | **1/{r['p99_ms'] / s['p99_ms']:,.1f}** |")
    s_in, r_in = ingest
    if content:
        checked = "; ".join(f"{c['set']} {c['requests']:,} requests, wrong: Starling {c['starling']}, "
                            f"reference {'not asked' if c['reference'] is None else c['reference']}"
                            for c in content)
        lines += ["", f"Content checked before the load runs (every request once to each, against "
                  f"the answer the generated file gives): {checked}."]
    under_load = [r for r in rpcs if r["answers_checked"]]
    if under_load:
        compared = "; ".join(f"{r['system']} {r['rpc']} {r['answers_checked']:,} of {r['requests']:,}, "
                             f"wrong {r['wrong_answers']}" for r in under_load)
        lines += ["", f"Answers compared under load with the checked answer's bytes (SHA-256): {compared}."]
    lines += [
        "",
        f"Ingest of the same file: Starling `replay` {s_in['events_per_s']:,} events/s "
        f"({s_in['seconds']:.1f} s, peak RSS {s_in['peak_rss_mib']:,} MiB); reference "
        f"{r_in['path']} path {r_in['events_per_s']:,} events/s ({r_in['seconds']:.1f} s, "
        f"{r_in.get('failed', 0)} failed{'; ' + r_in['loaded'] if 'loaded' in r_in else ''}): "
        f"**{ratio(s_in['events_per_s'], r_in['events_per_s'])}**.",
        "",
        f"Memory while serving: Starling peak RSS {memory['starling_peak_rss_mib']:,} MiB; reference "
        f"Node + PostgreSQL RSS {memory['reference_rss_mib']:,} MiB, PSS {memory['reference_pss_mib']:,} MiB.",
    ]
    cores = [f"{r['system']} {r['rpc']} {r['server_cores']}/{r['generator_cores']}" for r in rpcs + pings]
    lines += ["", "CPU during each run, in cores, server/load generator: " + ", ".join(cores) + "."]
    loads = [r["load_before"] for r in rpcs + pings]
    lines += ["", f"1-minute load average before the runs: {min(loads)}-{max(loads)} (2 cores; other "
              f"processes on the machine count too); during ingest: {ingest[0]['load_before']} "
              f"(Starling), {ingest[1]['load_before']} (reference)."]
    waits = [f"{name} {w['waited_s']} s" + ("" if w["idle"] else " (still busy)") for name, w in idle.items()]
    lines += ["", f"Before the runs, each server was left until it used under {IDLE_CORES} of a core for "
              f"{IDLE_QUIET_S} s in a row (the work its start left, such as compactions): " + ", ".join(waits) + "."]
    return "\n".join(lines)


def charts(args, rpcs, out_prefix):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log("matplotlib is missing: no charts (compare/run.sh installs it)")
        return []
    colors = {"starling": "#1f77b4", "reference": "#d62728"}
    names = [m for m, _, _ in RPCS]
    fig, ax = plt.subplots(figsize=(13, 4.5))
    width = 0.38
    for i, system in enumerate(("starling", "reference")):
        values = [next((r["rps"] for r in rpcs if r["system"] == system and r["rpc"] == m), 0) for m in names]
        bars = ax.bar([x + (i - 0.5) * width for x in range(len(names))], values, width,
                      label=system, color=colors[system])
        ax.bar_label(bars, labels=[f"{v:,.0f}" for v in values], fontsize=7)
    ax.set_yscale("log")
    ax.set_xticks(range(len(names)), names, rotation=25, fontsize=7)
    ax.set_ylabel("requests/s (log scale)")
    ax.set_title(f"Throughput at concurrency {args.concurrency}, same requests")
    ax.legend()
    fig.tight_layout()
    throughput = Path(f"{out_prefix}-throughput.png")
    fig.savefig(throughput, dpi=110)
    plt.close(fig)

    n_cols = 4
    n_rows = -(-len(names) // n_cols)
    fig, axes = plt.subplots(n_rows, n_cols, figsize=(14, 3.2 * n_rows), sharey=False)
    for ax, name in zip(axes.flat, names):
        for system in ("starling", "reference"):
            run = next((r for r in rpcs if r["system"] == system and r["rpc"] == name), None)
            if not run:
                continue
            qs = [q for q, _ in run["percentiles"]]
            ms = [max(v, 0.001) for _, v in run["percentiles"]]
            # x: the percentile on a log scale of 1/(1-q), so the tail gets room.
            ax.plot([1 / (1 - q) if q < 1 else 1e4 for q in qs], ms, label=system, color=colors[system])
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xticks([1, 2, 10, 100, 1000, 10000], ["0", "50", "90", "99", "99.9", "100"], fontsize=7)
        ax.set_title(name, fontsize=9)
        ax.set_xlabel("percentile", fontsize=7)
        ax.set_ylabel("latency, ms (log)", fontsize=7)
        ax.legend(fontsize=7)
    fig.suptitle(f"Latency distribution at concurrency {args.concurrency}")
    fig.tight_layout()
    latency = Path(f"{out_prefix}-latency.png")
    fig.savefig(latency, dpi=110)
    plt.close(fig)
    return [throughput, latency]


def write_benchmarks(scale, text, charts_paths):
    path = ROOT / "BENCHMARKS.md"
    begin, end = f"<!-- compare:{scale}:begin -->", f"<!-- compare:{scale}:end -->"
    links = "".join(f"\n\n![{p.stem}]({p.relative_to(ROOT)})" for p in charts_paths)
    block = f"{begin}\n{text}{links}\n{end}"
    doc = path.read_text()
    if begin in doc:
        doc = re.sub(re.escape(begin) + ".*?" + re.escape(end), lambda _: block, doc, flags=re.S)
    else:
        doc = doc.rstrip() + "\n\n" + block + "\n"
    path.write_text(doc)


def machine():
    cpu = next((l.split(":", 1)[1].strip() for l in Path("/proc/cpuinfo").read_text().splitlines()
                if l.startswith("model name")), platform.processor())
    mem = int(next(l.split()[1] for l in Path("/proc/meminfo").read_text().splitlines()
                   if l.startswith("MemTotal"))) / 1024 / 1024
    return f"{os.cpu_count()} cores ({cpu}), {mem:.0f} GiB, {platform.system()} {platform.release()}"


def main():
    # Stopping the harness stops its servers (and PostgreSQL) through the `finally` below.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scale", choices=SCALES, default="smoke")
    parser.add_argument("--starling", required=True)
    parser.add_argument("--compare-requests", required=True)
    parser.add_argument("--grpc-load", required=True)
    parser.add_argument("--node", required=True)
    parser.add_argument("--data-dir", type=Path, default=ROOT / "target/bench-cache/compare")
    parser.add_argument("--results-dir", type=Path, default=ROOT / "crates/starling-bench/results")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--duration", default=None, help="per run (default 20s, smoke 1s)")
    parser.add_argument("--warmup", default=None, help="per warm-up run (default 5s, smoke 300ms)")
    parser.add_argument("--reference-load", choices=["indexer", "bulk"], default=None,
                        help="how the reference loads the file: its own indexer (timed, the ingest "
                             "comparison; ~50 min at the indexer scale) or in bulk (COPY, minutes); "
                             "default: the scale's")
    parser.add_argument("--reference-in-flight", type=int, default=None,
                        help="events the reference indexes at once (default 16; smoke 1, so that "
                             "replies follow their parents as they do in the file, which the "
                             "notification sets need to be checked on the reference)")
    parser.add_argument("--appview", action=argparse.BooleanOptionalAction, default=None,
                        help="also run the AppView's getTimeline on each (default: on, off for smoke)")
    parser.add_argument("--appview-concurrency", type=int, default=8)
    parser.add_argument("--appview-duration", default="20s")
    parser.add_argument("--charts", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--reference-data", type=Path, default=None,
                        help="keep the reference's loaded database in a directory under this one, "
                             "and use it again in later runs on the same file and load path instead "
                             "of loading it again (the bulk load takes ~46 minutes); the ingest "
                             "figures are then those of the run that loaded it")
    parser.add_argument("--keep", action="store_true",
                        help="keep the work directory: Starling's store, the requests, and a smoke "
                             "run's table, results and charts")
    parser.add_argument("--write-benchmarks", action="store_true",
                        help="put the table and charts into BENCHMARKS.md")
    args = parser.parse_args()
    scale = SCALES[args.scale]
    smoke = args.scale == "smoke"
    args.duration = args.duration or ("1s" if smoke else "20s")
    args.warmup = args.warmup or ("300ms" if smoke else "5s")
    args.appview = (not smoke) if args.appview is None else args.appview
    args.reference_in_flight = args.reference_in_flight or (1 if smoke else 16)
    args.reference_load = args.reference_load or scale["load"]
    args.limit = scale["limit"]
    args.data_dir.mkdir(parents=True, exist_ok=True)
    args.results_dir.mkdir(parents=True, exist_ok=True)
    args.work = Path(tempfile.mkdtemp(prefix="compare-"))
    # The commit Starling was built from: run.sh builds it just before this starts.
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                            stdout=subprocess.PIPE, text=True).stdout.strip()
    servers = []
    try:
        events, summary, requests = generate(args, scale)
        log(f"ingest: starling replay of {summary['events']:,} events")
        starling_ingest, starling_data = ingest_starling(args, events, summary["events"])
        log(f"starling: {starling_ingest['events_per_s']:,} events/s")
        reference_dir, reference_ingest = kept_reference(args, events)
        reference = start_reference(args, reference_dir)
        servers.append(reference)
        if reference_ingest:
            log(f"ingest: reference: the load kept in {reference_dir} ({reference_ingest['loaded']}) "
                "is used again")
        else:
            log(f"ingest: reference {args.reference_load} path")
            reference_ingest = ingest_reference(args, scale, events, reference)
            keep_reference(reference_dir, reference_ingest, commit)
        log(f"reference: {reference_ingest['events_per_s']:,} events/s")
        starling = start_starling(args, starling_data)
        servers.append(starling)
        systems = [
            dict(name="starling", addr=starling.ready, http1=False, wire="gRPC, h2c",
                 pids=lambda: server_pids(starling)),
            dict(name="reference", addr=reference_addr(reference), http1=True,
                 wire="Connect, HTTP/1.1", pids=lambda: server_pids(reference)),
        ]
        # The reference derives reply notifications from what it has indexed: only when it
        # indexes one event at a time (smoke), or when the bulk loader replays the file in
        # order, do they follow the file's order, as Starling's do.
        in_order = args.reference_load == "bulk" or args.reference_in_flight == 1
        if in_order:
            check_notifications(args, events, reference, starling)
            content = check_content(args, requests, CONTENT_SETS + NOTIFICATION_SETS, reference, starling)
            skip = set()
        else:
            content = check_content(args, requests, CONTENT_SETS, reference, starling)
            content += check_content(args, requests, NOTIFICATION_SETS, None, starling)
            skip = {("reference", set_name) for set_name in NOTIFICATION_SETS}
        idle = wait_idle(systems)
        pings = ping_runs(args, systems)
        rpcs = run_rpcs(args, scale, requests, systems, skip)
        appview = appview_runs(args, requests, systems) if args.appview else []
        ref_pids = server_pids(reference)
        memory = dict(starling_peak_rss_mib=memory_mib([starling.pid], "VmHWM"),
                      reference_rss_mib=memory_mib(ref_pids, "Rss"),
                      reference_pss_mib=memory_mib(ref_pids, "Pss"))
    finally:
        for server in reversed(servers):
            server.stop()
    meta = dict(scale=args.scale, **{k: scale[k] for k in ("actors", "follows", "posts")},
                graph_follows=summary.get("graph_follows", scale["follows"]), events=summary["events"],
                seed=args.seed, date=datetime.date.today().isoformat(), commit=commit,
                machine=machine(), concurrency=args.concurrency, duration=args.duration,
                warmup=args.warmup)
    text = table(meta, (starling_ingest, reference_ingest), rpcs, pings, appview, memory, content, idle)
    print(text)
    prefix = (args.work if smoke else args.results_dir) / f"compare-{args.scale}"
    raw = dict(meta=meta, ingest=[starling_ingest, reference_ingest], rpcs=rpcs, pings=pings,
               appview=appview, memory=memory, content=content, idle=idle)
    Path(f"{prefix}.json").write_text(json.dumps(raw, indent=1))
    Path(f"{prefix}.md").write_text(text + "\n")
    made = charts(args, rpcs, prefix) if args.charts else []
    for path in made:
        log(f"chart: {path}")
    if args.write_benchmarks and not smoke:
        write_benchmarks(args.scale, text, made)
    bad = [r for r in rpcs + pings + appview if r["errors"]]
    for c in content:
        for system in ("starling", "reference"):
            if c[system]:
                bad.append(dict(system=system, rpc=f"content of {c['set']}", errors=c[system],
                                codes="wrong answers"))
    if reference_ingest.get("failed") and smoke:
        bad.append(dict(system="reference", rpc="ingest", errors=reference_ingest["failed"], codes="failed events"))
    # The work directory holds Starling's replayed store and the requests (over 4 GB at the
    # bulk scale); what a run reports is written out above. It goes whether the run passed or
    # not: bulk runs exit 1 on the reference's deadline misses, and each used to leave it.
    if not args.keep:
        shutil.rmtree(args.work, ignore_errors=True)
    if bad:
        for r in bad:
            log(f"FAILED: {r['system']} {r['rpc']}: {r['errors']} errors ({r.get('codes', '')})")
        sys.exit(1)


if __name__ == "__main__":
    main()
