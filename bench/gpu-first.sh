#!/usr/bin/env bash
# One GPU session: doctor, record every lesson, verify, record again (drift), planted bugs.
# Results under $1 (a folder).
set -u
out=${1:?usage: bench/gpu-first.sh OUTDIR}
mkdir -p "$out"
export COLUMNS=200 PYTHONUNBUFFERED=1
{
  echo "== doctor"; coursectl doctor
  echo "== record (cold cache)"; /usr/bin/time -f "record wall %e s" coursectl record --all --verbose
  echo "== verify"; /usr/bin/time -f "verify wall %e s" coursectl verify --all --json "$out/verify.json" --junit "$out/junit.xml"
  echo "== record again"; /usr/bin/time -f "record2 wall %e s" coursectl record --all
} > "$out/log.txt" 2>&1
tar czf "$out/evidence.tgz" evidence
python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_bugs.py -s > "$out/bugs.txt" 2>&1
echo done
