#!/usr/bin/env bash
# Programs of several files on a GPU: verify with no evidence, record, verify; then an edit of each file of
# each multi-file lesson, and of a header each includes, each followed by verify alone, which must rebuild
# and name the file. Every command and what it printed is shown.
#
#   tools/acceptance/sources.sh COURSE [COURSECTL]
#
# COURSE: a copy of tests/fixtures/sources (it is edited); COURSECTL: default `coursectl` on PATH.
# Add --offline to OFFLINE=--offline to walk the same steps without a GPU (record is then left out).
set -u
. "$(dirname "$0")/common.sh"
course=${1:?give a copy of tests/fixtures/sources}
coursectl=${2:-coursectl}
offline=${OFFLINE:-}
cd "$course" || exit 2
export COURSECTL_CACHE=${COURSECTL_CACHE:-$PWD/.coursectl/cache}

step "$coursectl" verify --all $offline -v
if [ -z "$offline" ]; then
    step "$coursectl" record --all
fi
step "$coursectl" verify --all $offline -v

# Each file of each lesson of several files, then the headers they include.
files=$(python3 - <<'PY'
import yaml
data = yaml.safe_load(open("lessons.yaml"))
for lesson in data["lessons"]:
    for unit in lesson.get("sources") or []:
        print(unit)
PY
)
for file in $files lessons/day01-split/scale.cuh lessons/day02-mixed/reference.h common/check.cuh; do
    [ -f "$file" ] || continue
    echo
    echo "# edit $file"
    printf '\n// edited by the acceptance walk\n' >> "$file"
    step "$coursectl" verify --all $offline -v
done
