#!/usr/bin/env bash
# Everything a maintainer runs on a GPU machine, in one go, with its output
# kept under OUTDIR: doctor; a cold and a warm verify (--strict, with JSON and
# JUnit reports); the upgrade day (record --dry-run with its drift report,
# record with its report, verify after it); verify --repeat 3; one racecheck
# pass on its own; two coursectl processes sharing one GPU; the GPU tests
# (planted bugs, a kernel that never ends, a faulting kernel). The benchmark
# is bench/bench.py (and bench/gpus.py on several GPUs), run on its own.
#
#   bench/gpu-acceptance.sh OUTDIR
set -u
out=${1:?usage: bench/gpu-acceptance.sh OUTDIR}
mkdir -p "$out"
export COLUMNS=200 PYTHONUNBUFFERED=1
step() { echo; echo "== $*"; }
timed() { /usr/bin/time -f "[exit %x, %e s wall]" "$@"; }
{
  step doctor; timed coursectl doctor
  step verify, cold caches; rm -rf .coursectl
  timed coursectl verify --all --strict --json "$out/verify.json" --junit "$out/verify.xml"
  step verify, warm caches, nothing changed; timed coursectl verify --all --strict
  step record --dry-run: what would be written, what moved
  timed coursectl record --all --dry-run --report "$out/drift-dry-run.md"
  step record; timed coursectl record --all --report "$out/drift.md"
  step verify after record; timed coursectl verify --all --strict --report "$out/verify-drift.md"
  step verify --repeat 3; timed coursectl verify --all --repeat 3 --no-sanitize --json "$out/repeat.json"
  step racecheck on its own; timed coursectl sanitize day14-syncthreads --tool racecheck
  step two processes on one GPU
  (coursectl verify day71-matmul-fp16 --no-sanitize -v > "$out/first.txt" 2>&1 &
   sleep 1; coursectl verify day16-tiled-matmul --no-sanitize -v > "$out/second.txt" 2>&1; wait)
  cat "$out/first.txt" "$out/second.txt"
} > "$out/log.txt" 2>&1
tar czf "$out/evidence.tgz" evidence lessons/*/README.md README.md lessons/*/*.cu
python3 -m pytest -q -m gpu -p no:cacheprovider -s tests/test_bugs.py tests/test_gpu.py tests/test_deeper.py \
  > "$out/gpu-tests.txt" 2>&1
echo done
