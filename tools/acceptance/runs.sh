#!/usr/bin/env bash
# One program run in two modes as one lesson (`runs:`) on a GPU: verify with no evidence, record, verify;
# then a claim across the runs made false by an edit of lessons.yaml, which verify must fail (exit 1) for
# every run, naming the claim; render shows both runs on one page. Every command and what it printed is shown.
#
#   tools/acceptance/runs.sh COURSE [COURSECTL]
#
# COURSE: a copy of tests/fixtures/runs (it is edited); COURSECTL: default `coursectl` on PATH.
set -u
. "$(dirname "$0")/common.sh"
course=${1:?give a copy of tests/fixtures/runs}
coursectl=${2:-coursectl}
cd "$course" || exit 2
export COURSECTL_CACHE=${COURSECTL_CACHE:-$PWD/.coursectl/cache}

step "$coursectl" verify --all -v
step "$coursectl" record --all
step "$coursectl" verify --all -v
step "$coursectl" verify -k 'day01-heat[shared]'
step "$coursectl" verify --all --offline
step "$coursectl" render
step grep -A6 '## The runs side by side' lessons/day01-heat/README.md

echo
echo "# a claim across the runs that is false: the two kernels giving different heat"
python3 - <<'PY'
import yaml
data = yaml.safe_load(open("lessons.yaml"))
data["lessons"][0]["claims"].append({"id": "results-differ", "gate": "runs.basic.heat != runs.shared.heat"})
open("lessons.yaml", "w").write(yaml.safe_dump(data, sort_keys=False))
PY
step "$coursectl" verify --all
step "$coursectl" verify --all --offline

echo
echo "# record under the false claim: no run of the lesson is recorded, its evidence untouched"
before=$(find evidence -type f | sort | xargs sha256sum | sha256sum)
step "$coursectl" record --all
after=$(find evidence -type f | sort | xargs sha256sum | sha256sum)
[ "$before" = "$after" ] && echo "evidence/: unchanged (${after%% *})" || echo "evidence/: CHANGED"
