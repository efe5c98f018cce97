#!/usr/bin/env bash
# The tool's tests stand on fixture courses of their own, not on this repository's course.
#
# In a scratch copy of the repository (a detached git worktree, with this working tree's
# uncommitted changes laid over it) this adds seven lessons with `coursectl new` and edits
# them, swaps the first two lessons of lessons.yaml, changes a default, renders the pages,
# and runs the suite: the tests marked slow and the others. Both must pass. The copy is
# removed afterwards (KEEP=1 keeps it). Usage: tools/seven-lessons.sh [SCRATCH-DIR]
set -euo pipefail

src=$(cd "$(dirname "$0")/.." && pwd)
scratch=${1:-$(mktemp -d /tmp/exp-seven.XXXXXX)}
python=${PYTHON:-$src/.venv/bin/python}
workers=${PYTEST_WORKERS:--n 2}

rmdir "$scratch" 2>/dev/null || true
git -C "$src" worktree add -q --detach "$scratch" HEAD
cleanup() { [ -n "${KEEP:-}" ] || git -C "$src" worktree remove --force "$scratch"; }
trap cleanup EXIT
# what is not committed yet: changed and new files (not ignored ones)
(cd "$src" && git ls-files -z -m -o --exclude-standard | tar --null -T - -cf -) | tar -xf - -C "$scratch"

cd "$scratch"
export PYTHONPATH=$scratch    # this copy's orchestrator, not the one the venv was installed from
ctl() { "$python" -m orchestrator "$@"; }

# seven lessons, in day order among the course's
n=0
for lesson in day17-saxpy day18-reduce day19-scan day20-histogram day21-streams day22-atomics day23-warp-shuffle; do
    ctl new "$lesson" --title "Lesson $lesson, added by an author" >/dev/null
    n=$((n + 1))
done
# edits: each new lesson's prose, one lesson's timeout, one lesson's prediction
for prose in lessons/day1[7-9]-*/prose.md lessons/day2[0-3]-*/prose.md; do
    printf '\nThis lesson was added to the course after the tool'"'"'s tests were written.\n' >> "$prose"
done
"$python" - <<'PY'
import re
from pathlib import Path

path = Path("lessons.yaml")
text = path.read_text()
# one new lesson gets a timeout of its own, another a stricter prediction
text = text.replace("  - day18-reduce: Lesson day18-reduce, added by an author\n",
                    "  - day18-reduce: Lesson day18-reduce, added by an author\n    timeout: 45\n", 1)
text = text.replace("expect: kernels['saxpy'].gbps > 100", "expect: kernels['saxpy'].gbps > 150", 1)
# swap the first two lessons
head, rest = text.split("\nlessons:\n", 1)
entries = re.split(r"(?m)^(?=  - day)", rest)
prefix, entries = entries[0], entries[1:]
entries[0], entries[1] = entries[1], entries[0]
for i, entry in enumerate(entries):
    entries[i] = entry.rstrip("\n") + "\n\n"
text = head + "\nlessons:\n" + prefix + "".join(entries).rstrip("\n") + "\n"
# a default changes: every lesson's timeout, where it sets none
text = text.replace("\ndefaults:", "\ndefaults:\n  timeout: 90", 1)
path.write_text(text)
PY
ctl render >/dev/null
ids=$(grep -E '^  - day[0-9]+' lessons.yaml | sed -E 's/^  - (day[0-9]+-[a-z0-9-]+):.*/\1/' | tr '\n' ' ')
echo "scratch copy: $scratch"
echo "lessons.yaml now lists: $ids"
echo "added $n lessons, swapped the first two, defaults.timeout: 90; $(wc -l < lessons.yaml) lines"
ctl verify --all --offline >/dev/null 2>&1 && echo "verify --all --offline: exit 0" || echo "verify --all --offline: exit $?"

# pytest with Ctrl-C's default action: a shell that starts this script in the background ignores SIGINT,
# and the tests of what Ctrl-C does need it delivered.
pytest() {
    "$python" -c 'import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL)
os.execv(sys.executable, [sys.executable, "-m", "pytest", *sys.argv[1:]])' "$@"
}
# The one test left out checks this course itself and cannot pass until a browser takes its pictures
# again: docs/screenshots must show the pages as they are (tools/browser-check/ci.sh, with Chromium).
screenshots=tests/test_browser.py::test_the_screenshots_are_of_the_pages_as_they_are_now
echo "left out: $screenshots (this course's screenshots; retaken by tools/browser-check/ci.sh)"
status=0
echo "not slow:"
pytest -q $workers -m "not slow" -p no:cacheprovider --deselect "$screenshots" 2>&1 \
    | grep -E "^(FAILED|ERROR) |[0-9]+ (passed|failed)" || status=1
echo "slow:"
pytest -q $workers -m slow -p no:cacheprovider 2>&1 | grep -E "^(FAILED|ERROR) |[0-9]+ (passed|failed)" || status=1
exit $status
