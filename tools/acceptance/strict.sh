#!/usr/bin/env bash
# Green means the evidence still describes the course, on a GPU. In a copy of the course: record a lesson
# (its evidence keeps the rules it was judged under); edit a comment of its source (offline: STALE; on the
# GPU: built, run, judged, PASS); widen a tolerance (verify --strict fails naming the rule, before and
# after); record again (green). Every command and what it printed is shown.
#
#   tools/acceptance/strict.sh COPY [LESSON]
#
# COPY: a folder the course is copied into (it is edited there, never here); LESSON: default
# day13-shared-memory, whose kernels.ms rule is the `x-ms` anchor. coursectl is the one on PATH.
set -u
. "$(dirname "$0")/common.sh"
copy=${1:?give a folder to copy the course into}
lesson=${2:-day13-shared-memory}
copy_course "$copy"

source=$(python3 - "$lesson" <<'PY'
import sys, yaml
for item in yaml.safe_load(open("lessons.yaml"))["lessons"]:
    if isinstance(item, dict) and (item.get("id") == sys.argv[1] or sys.argv[1] in item):
        print(item.get("source") or f"lessons/{sys.argv[1]}/{sys.argv[1]}.cu")
PY
)
[ -f "$source" ] || source=$(ls lessons/"$lesson"/*.cu | head -1)

echo "# the evidence recorded here, with the rules it is judged under"
step coursectl record "$lesson"
step coursectl verify "$lesson" --strict
step coursectl verify "$lesson" --offline --strict

echo
echo "# a comment edited in $source"
printf '\n// A comment added after the evidence was recorded.\n' >> "$source"
step coursectl verify "$lesson" --offline --strict
step coursectl verify "$lesson" --strict
step coursectl record "$lesson"

echo
echo "# a tolerance widened: x-ms rel 0.25 -> 10"
sed -i 's/^x-ms: &ms {type: float, compare: tolerance, rel: 0.25,/x-ms: \&ms {type: float, compare: tolerance, rel: 10.0,/' lessons.yaml
grep -n '^x-ms' lessons.yaml
step coursectl verify "$lesson" --strict
step coursectl verify "$lesson" --offline --strict
step coursectl verify "$lesson" --no-sanitize --strict

echo
echo "# recorded again under the wider rule"
step coursectl record "$lesson"
step coursectl verify "$lesson" --strict
