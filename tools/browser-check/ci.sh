#!/usr/bin/env bash
# CI's browser check: set up, then render every page as GitHub would and check
# it in headless Chromium (Mermaid charts, links, images, console), writing the
# screenshots to docs/screenshots/. Exit 1 when a page fails.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
bash "$here/setup.sh"
node "$here/check.mjs" "$@"
