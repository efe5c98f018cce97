#!/bin/bash
# Day 71's memcheck pass (as coursectl runs it: --check-only): alone, two on one GPU,
# one on each of two GPUs, two on each. Bash's time: wall, user and system CPU seconds.
set -u
W=/tmp/mh; mkdir -p $W
nvcc -std=c++17 -O3 -lineinfo -arch=sm_90 -o $W/m71 lessons/day71-matmul-fp16/matmul_fp16.cu || exit 1
TIMEFORMAT="%R s wall, %U s user, %S s sys"
one() { ( time CUDA_VISIBLE_DEVICES=$1 compute-sanitizer --tool memcheck --log-file /dev/null --error-exitcode 99 $W/m71 --check-only > /dev/null ) 2>&1 | sed "s/^/  GPU $1: /"; }
for r in 1 2; do echo "== alone, round $r"; one 0; done
echo "== two at once on GPU 0"; one 0 & one 0 & wait
for r in 1 2; do echo "== one on each GPU at once, round $r"; one 0 & one 1 & wait; done
echo "== two on each GPU at once"; one 0 & one 0 & one 1 & one 1 & wait
echo "== alone again"; one 1
