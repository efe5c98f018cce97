#!/usr/bin/env bash
# Everything a maintainer runs on a new GPU machine, in one go, with its output
# kept under OUTDIR: doctor; record twice (the second shows what moved); a cold
# and a warm verify with reports; verify --repeat 5; the GPU tests (planted
# bugs, a kernel that never ends, a faulting kernel); two coursectl processes
# sharing one GPU; one racecheck pass on its own; the benchmark.
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
  step record, cold cache; rm -rf .coursectl; timed coursectl record --all
  step record again: what moved; timed coursectl record --all
  step verify, cold cache; rm -rf .coursectl
  timed coursectl verify --all --json "$out/verify.json" --junit "$out/verify.xml"
  step verify, warm cache; timed coursectl verify --all --verbose
  step verify --repeat 5; timed coursectl verify --all --repeat 5 --no-sanitize --json "$out/repeat.json"
  step racecheck on its own; timed coursectl sanitize day14-syncthreads --tool racecheck
  step two processes on one GPU
  (coursectl verify day71-matmul-fp16 --no-sanitize > "$out/first.txt" 2>&1 &
   sleep 1; coursectl verify day16-tiled-matmul --no-sanitize > "$out/second.txt" 2>&1; wait)
  cat "$out/first.txt" "$out/second.txt"
} > "$out/log.txt" 2>&1
tar czf "$out/evidence.tgz" evidence lessons/*/README.md
python3 -m pytest -q -m gpu -p no:cacheprovider -s tests/test_bugs.py tests/test_gpu.py tests/test_deeper.py > "$out/gpu-tests.txt" 2>&1
python3 bench/bench.py --out "$out/bench.json" > "$out/bench.txt" 2>&1
echo done
