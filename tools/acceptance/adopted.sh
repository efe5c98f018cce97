#!/usr/bin/env bash
# The adopted course on a real GPU: record, verify, render, then the page's snippet section.
#
#   tools/acceptance/adopted.sh [COPY]
#
# COPY is a folder to copy tests/fixtures/adopted into (default: a new temporary one); the fixture itself is
# never written. coursectl is the one on PATH, or $COURSECTL. Exits with the first failing step's status.
set -euo pipefail

here=$(cd "$(dirname "$0")/../.." && pwd)
coursectl=${COURSECTL:-coursectl}
copy=${1:-$(mktemp -d)/adopted}
rm -rf "$copy"
mkdir -p "$(dirname "$copy")"
cp -R "$here/tests/fixtures/adopted" "$copy"
cd "$copy"
sums=$(sha256sum lessons/*/*.cu)

echo "== coursectl record --all (in $copy)"
"$coursectl" record --all
echo "== coursectl verify --all"
"$coursectl" verify --all
echo "== coursectl render"
"$coursectl" render
echo "== the sources are unedited"
echo "$sums" | sha256sum --check
for page in lessons/*/README.md; do
  echo "== $page: The code"
  sed -n '/^## The code/,/^## Expected output/p' "$page" | sed '$d'
done
