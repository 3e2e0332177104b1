#!/usr/bin/env bash
# Installs the load generators the benchmarks use into a cache directory:
#   - ghz (github.com/bojand/ghz), the gRPC load generator, built with `go install` (~30 s cold);
#   - grpc-load, the lean gRPC load generator of starling-bench (`cargo build`, into the
#     workspace's target directory);
#   - wrk, the HTTP load generator, from the Debian package when it is not on PATH.
# Idempotent: a second run finds them all and only prints their paths.
#
# Usage: scripts/install-tools.sh
# Env:   STARLING_TOOLS_DIR   where ghz goes (default $HOME/.cache/starling/tools)
#        CARGO_TARGET_DIR     where cargo builds grpc-load (default target), as for cargo itself
#        GHZ_VERSION          the module version (default v0.121.0; `@latest` resolves to the
#                             much older v0.93.0 on the Go proxy, so the version is pinned)
#        GO                   the Go toolchain (default: go on PATH, then /usr/local/go/bin/go)
# Prints one line per tool at the end: `tools: NAME PATH (VERSION)`.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dir=${STARLING_TOOLS_DIR:-$HOME/.cache/starling/tools}
ghz_version=${GHZ_VERSION:-v0.121.0}
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
ghz="$dir/ghz"
stamp="$dir/.ghz-version"

# One installer at a time per directory (parallel benchmark scripts on one machine).
if command -v flock >/dev/null 2>&1; then
  exec 9>"$dir/.starling-lock"
  flock 9
fi

if [[ -x "$ghz" && -f "$stamp" && "$(cat "$stamp")" == "$ghz_version" ]] && "$ghz" --version >/dev/null 2>&1; then
  : # warm: already installed at this version
else
  go=${GO:-$(command -v go || echo /usr/local/go/bin/go)}
  [[ -x "$go" ]] || { echo "install-tools: no Go toolchain (set GO=/path/to/go); ghz needs Go >= 1.21 to build" >&2; exit 1; }
  echo "install-tools: building ghz@$ghz_version with $("$go" version | cut -d' ' -f3)" >&2
  GOBIN="$dir" GOFLAGS=-mod=mod "$go" install "github.com/bojand/ghz/cmd/ghz@$ghz_version" >&2
  [[ -x "$ghz" ]] || { echo "install-tools: $ghz missing after go install" >&2; exit 1; }
  echo "$ghz_version" >"$stamp"
fi

target_dir=${CARGO_TARGET_DIR:-$root/target}
load="$target_dir/release/grpc-load"
cargo build -q --release --locked -p starling-bench --bin grpc-load --bin grpc-answers \
  --manifest-path "$root/Cargo.toml" >&2

wrk=$(command -v wrk || true)
if [[ -z "$wrk" ]]; then
  echo "install-tools: installing wrk (Debian package \`wrk\`)" >&2
  if ! apt-get install -y wrk >/dev/null 2>&1; then
    apt-get update >/dev/null && apt-get install -y wrk >/dev/null
  fi
  wrk=$(command -v wrk)
fi

# `go install` builds ghz without its release ldflags, so `ghz --version` says `dev`.
echo "tools: ghz $ghz (ghz $(cat "$stamp"))"
echo "tools: grpc-load $load (starling-bench $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown))"
echo "tools: wrk $wrk ($( (wrk --version 2>&1 || true) | head -n 1 | cut -d' ' -f1-2))"
