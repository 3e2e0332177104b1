#!/usr/bin/env bash
# Installs what the reference-dataplane harness in compare/ needs, next to the stock AppView of
# scripts/setup-appview.sh (which it runs first: the reference dataplane is @atproto/bsky's own):
#   - PostgreSQL server binaries (initdb, pg_ctl, postgres) and psql, from Debian's packages,
#     when they are missing; no cluster is created or started (compare/ makes its own);
#   - zstd, from Debian, when missing (compare/ reads .jsonl.zst through `zstd -dc`);
#   - compare/'s npm dependencies (pinned by compare/package-lock.json) into a cache directory.
# Idempotent and quiet: a second run only checks and prints the summary lines.
#
# Usage: scripts/setup-reference.sh          (as root on a fresh machine: it runs apt-get)
# Env:   STARLING_COMPARE_DIR   where compare/'s npm dependencies go (default $HOME/.cache/starling/compare)
#        STARLING_APPVIEW_DIR   passed through to scripts/setup-appview.sh
#        NPM                    npm client to run (default: npm on PATH)
# Prints at the end: the PostgreSQL bin directory and version, and the compare/ install.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dir=${STARLING_COMPARE_DIR:-$HOME/.cache/starling/compare}
npm=${NPM:-npm}

"$root/scripts/setup-appview.sh" >&2

mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
if command -v flock >/dev/null 2>&1; then
  exec 9>"$dir/.starling-lock"
  flock 9
fi

# The newest installed PostgreSQL server, in Debian's layout /usr/lib/postgresql/<major>/bin.
pg_bindir() {
  local found
  found=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
  [[ -n "$found" && -x "$found/initdb" && -x "$found/postgres" && -x "$found/pg_ctl" ]] && echo "$found"
}

apt_updated=
apt_install() {
  export DEBIAN_FRONTEND=noninteractive
  if [[ -z "$apt_updated" ]]; then
    apt-get update -qq >/dev/null
    apt_updated=1
  fi
  apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

if [[ -z "$(pg_bindir || true)" ]] || ! command -v psql >/dev/null 2>&1; then
  [[ $(id -u) -eq 0 ]] || { echo "setup-reference: PostgreSQL is missing; run this as root to apt-get install it" >&2; exit 1; }
  echo "setup-reference: installing PostgreSQL from Debian's packages" >&2
  # Debian's package would create and start a cluster `main` on port 5432; compare/ runs its
  # own throwaway clusters, so tell postgresql-common not to.
  apt_install postgresql-common
  sed -i 's/^#\?\s*create_main_cluster\s*=.*/create_main_cluster = false/' /etc/postgresql-common/createcluster.conf
  apt_install postgresql postgresql-client
fi
bindir=$(pg_bindir) || { echo "setup-reference: no PostgreSQL server under /usr/lib/postgresql/*/bin after install" >&2; exit 1; }

if ! command -v zstd >/dev/null 2>&1; then
  [[ $(id -u) -eq 0 ]] || { echo "setup-reference: zstd is missing; run this as root to apt-get install it" >&2; exit 1; }
  echo "setup-reference: installing zstd from Debian's packages" >&2
  apt_install zstd
fi

# PostgreSQL refuses to run as root; compare/pg.mjs then runs it as this user.
if [[ $(id -u) -eq 0 ]] && ! id postgres >/dev/null 2>&1; then
  useradd --system --home-dir /var/lib/postgresql --shell /bin/bash postgres
fi

stamp="$dir/.starling-installed"
want=$(cat "$root/compare/package.json" "$root/compare/package-lock.json" | sha256sum | cut -d' ' -f1)
if [[ ! -f "$stamp" || "$(cat "$stamp")" != "$want" || ! -d "$dir/node_modules/pg-copy-streams" ]]; then
  rm -f "$stamp"
  cp "$root/compare/package.json" "$root/compare/package-lock.json" "$dir/"
  (cd "$dir" && "$npm" ci --ignore-scripts --no-audit --no-fund --loglevel=error >&2)
  echo "$want" >"$stamp"
fi

echo "reference: postgres $bindir ($("$bindir/postgres" --version))"
echo "reference: compare deps in $dir"
