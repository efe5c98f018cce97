#!/usr/bin/env bash
# What the browser check needs on a fresh Debian machine: Chromium from Debian's
# packages (Playwright's own browser downloads are never used) and the npm
# packages pinned in package-lock.json. Safe to run again: it installs only
# what is missing.
set -euo pipefail
cd "$(dirname "$0")"

as_root=()
if [ "$(id -u)" -ne 0 ]; then as_root=(sudo); fi
missing=()
[ -x "${CHROMIUM:-/usr/bin/chromium}" ] || missing+=(chromium fonts-dejavu-core)
command -v npm >/dev/null || missing+=(nodejs npm)
# cmark-gfm, GitHub's Markdown parser, is built from source by npm ci (node-gyp).
for tool in make g++ python3; do command -v "$tool" >/dev/null || missing+=("$tool"); done
if [ ${#missing[@]} -gt 0 ]; then
    export DEBIAN_FRONTEND=noninteractive
    "${as_root[@]}" apt-get update -q
    "${as_root[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

if ! npm ls --depth=0 >/dev/null 2>&1; then
    npm ci --no-audit --no-fund
fi
