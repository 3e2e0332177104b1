#!/usr/bin/env bash
# Installs Chromium from Debian's packages when no Chromium is on PATH: the status page test
# (crates/starling/tests/status_page.rs) opens the page in it, headless. Idempotent.
#
# Usage: scripts/install-chromium.sh
# Prints `tools: chromium PATH (VERSION)` at the end.
set -euo pipefail
find_chromium() { command -v chromium || command -v chromium-browser || true; }
bin=$(find_chromium)
if [[ -z "$bin" ]]; then
  if [[ $(id -u) -ne 0 ]] && ! command -v sudo >/dev/null 2>&1; then
    echo "install-chromium: not root and no sudo; install the Debian package 'chromium' by hand" >&2
    exit 1
  fi
  as_root=()
  [[ $(id -u) -ne 0 ]] && as_root=(sudo)
  echo "install-chromium: installing the Debian package 'chromium'" >&2
  # One apt at a time on a shared machine.
  "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 update -qq >&2
  "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends chromium fonts-dejavu-core >&2
  bin=$(find_chromium)
  [[ -n "$bin" ]] || { echo "install-chromium: chromium missing after apt-get install" >&2; exit 1; }
fi
echo "tools: chromium $bin ($("$bin" --version 2>/dev/null | head -1))"
