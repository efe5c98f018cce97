#!/usr/bin/env bash
# What coursectl prints and writes, for comparing two trees: ~40 commands (every --help, build, offline
# verify with its JSON and JUnit reports, -v/-vv/-q, render --check, check of each lesson, both schemas,
# report merge, compare, doctor, bad --arch, -k, --shard, GitHub Actions mode, render), run with TREE's
# .venv/bin/coursectl on a copy of TREE's course, each command's output in OUTDIR/NN.txt with times
# masked, the reports beside them. Two trees' OUTDIRs compare with `diff -r`; what differs between
# two runs of one tree is the order parallel builds finish in, "cached" for "built" and the random
# ::stop-commands:: token.
#
#   tools/cli-snapshot.sh TREE OUTDIR
set -u
TREE=$(cd "${1:?usage: tools/cli-snapshot.sh TREE OUTDIR}" && pwd); OUT=${2:?usage: tools/cli-snapshot.sh TREE OUTDIR}; rm -rf "$OUT"; mkdir -p "$OUT"; OUT=$(cd "$OUT" && pwd)
W=$(mktemp -d); cp -r "$TREE"/lessons.yaml "$TREE"/lessons "$TREE"/evidence "$TREE"/templates "$TREE"/README.md "$W"/
C="$TREE/.venv/bin/coursectl"
export COLUMNS=120 NO_COLOR=1 COURSECTL_CACHE=${COURSECTL_CACHE:-$(mktemp -d)}
cd "$W"
n=0
run() { n=$((n+1)); f=$(printf "%s/%02d" "$OUT" $n); echo "\$ $*" > $f.txt; "$@" >>$f.txt 2>&1; echo "exit $?" >> $f.txt; }
norm() { sed -E 's/[0-9]+\.[0-9]+ ?s\b/T s/g; s/"(wall_s|seconds|started|finished|date|duration_s|elapsed_s|time)": [^,}]*/"\1": X/g; s/time="[^"]*"/time="X"/g; s/timestamp="[^"]*"/timestamp="X"/g' ; }
run $C --help
for c in doctor build run verify record compare sanitize render new check report schema; do run $C $c --help; done
run $C report merge --help
run $C build --all
run $C verify --all --offline --json v.json --junit v.xml
run $C verify --all --offline --strict -v
run $C verify --all --offline -q
run $C verify day13-shared-memory --offline -vv
run $C render --check
run $C check day13-shared-memory
run $C check day14-syncthreads
run $C check day16-tiled-matmul
run $C check day71-matmul-fp16
run $C schema report
run $C schema manifest
run $C report merge v.json --json m.json
run $C report merge v.json --allow-partial --strict
run $C verify --arch foo --offline --all
run $C check day13-shared-memory --arch foo
run $C build --arch foo --all
run $C compare nvidia-h200 nvidia-h200
run $C doctor
run $C verify -k day1 --offline --strict
run $C verify --shard 1/2 --offline --strict
run $C verify --offline nosuch
GITHUB_ACTIONS=true GITHUB_STEP_SUMMARY=$W/sum.md run $C verify --all --offline --strict
for f in v.json v.xml m.json sum.md; do [ -f $f ] && cp $f "$OUT"/; done
run $C render
run git diff --no-index --stat "$TREE"/lessons "$W"/lessons
for f in "$OUT"/*; do norm < "$f" > "$f.n" && mv "$f.n" "$f"; done
sed -i "s#$COURSECTL_CACHE#CACHE#g; s#$W#W#g; s#$TREE#TREE#g" "$OUT"/*
