#!/usr/bin/env bash
# Verify (or record) the course on a Slurm cluster: a job array of N tasks, one
# GPU each, each running `coursectl verify --all --shard $SLURM_ARRAY_TASK_ID/N`
# in this checkout (on a filesystem the nodes share), then a job that depends
# on the whole array and merges the shards' JSON reports with `coursectl report
# merge`: the merged report is complete, or the merge is refused (exit 2,
# naming the missing shards) when a task wrote none. With --record each task
# runs `coursectl record --all --shard K/N` instead, so that evidence is
# written on the node whose GPU it describes; its reports are merged the same
# way.
#
#   tools/slurm/submit.sh -n N [-o DIR] [--record] [--offline] [--wait] [-- COURSECTL-ARGS...]
#
#   -n N        tasks in the array (shards of the course)
#   -o DIR      where the reports and each task's log go (default: slurm-reports)
#   --record    record instead of verify (a GPU each; never with --offline)
#   --offline   verify --offline, with no GPU asked for (a CPU-only cluster, or a test)
#   --wait      wait for the merge job, and exit with its exit status
#
# Partition, account and time limit come from sbatch's own environment
# (SBATCH_PARTITION, SBATCH_ACCOUNT, SBATCH_TIMELIMIT); COURSECTL names the
# coursectl to run (default: .venv/bin/coursectl, else coursectl on PATH).
# Prints the array's and the merge job's ids.
set -euo pipefail
shards= out=slurm-reports mode=verify offline= wait=
while [ $# -gt 0 ]; do
  case $1 in
    -n) shards=${2:?-n needs a number}; shift 2 ;;
    -o) out=${2:?-o needs a folder}; shift 2 ;;
    --record) mode=record; shift ;;
    --offline) offline=--offline; shift ;;
    --wait) wait=--wait; shift ;;
    --) shift; break ;;
    *) echo "tools/slurm/submit.sh: unknown argument '$1' (see the comment at its top)" >&2; exit 2 ;;
  esac
done
case $shards in ''|*[!0-9]*|0) echo "tools/slurm/submit.sh: -n N: the number of tasks, at least 1" >&2; exit 2 ;; esac
if [ "$mode" = record ] && [ -n "$offline" ]; then
  echo "tools/slurm/submit.sh: --record runs the lessons on a GPU; not with --offline" >&2; exit 2
fi
[ -f lessons.yaml ] || { echo "tools/slurm/submit.sh: no lessons.yaml here: run it in the course's checkout" >&2; exit 2; }
command -v sbatch >/dev/null || { echo "tools/slurm/submit.sh: sbatch is not on PATH" >&2; exit 3; }
coursectl=${COURSECTL:-}
if [ -z "$coursectl" ]; then
  if [ -x .venv/bin/coursectl ]; then coursectl=$PWD/.venv/bin/coursectl; else coursectl=coursectl; fi
fi
mkdir -p "$out"
out=$(cd "$out" && pwd)
rm -f "$out"/report-*.json "$out"/merged.json
extra=$(printf ' %q' "$@")
gres=(--gres=gpu:1)
[ -n "$offline" ] && gres=()
# Each task writes its report, whatever its verdict; the merge job runs after every task has
# ended (afterany), failed or not, and its exit status is the merged run's.
array=$(sbatch --parsable --job-name=coursectl-$mode --array=1-"$shards" "${gres[@]}" --chdir="$PWD" \
  --output="$out/shard-%a.log" \
  --wrap="$(printf '%q' "$coursectl") $mode --all $offline --shard \$SLURM_ARRAY_TASK_ID/$shards --json $(printf '%q' "$out")/report-\$SLURM_ARRAY_TASK_ID.json$extra")
array=${array%%;*}
merge=$(sbatch --parsable $wait --job-name=coursectl-merge --dependency=afterany:"$array" --chdir="$PWD" \
  --output="$out/merge.log" \
  --wrap="set -- $(printf '%q' "$out")/report-*.json; $(printf '%q' "$coursectl") report merge \"\$@\" --json $(printf '%q' "$out")/merged.json") \
  && status=0 || status=$?
echo "array ${array}: $shards tasks; merge job ${merge%%;*}: $out/merged.json"
exit $status
