#!/bin/bash
# How does a racecheck pass use the cores it is given?
set -u
R=$PWD; W=/tmp/pin; mkdir -p $W; cd $W
N=$(nproc); echo "cpus $N"
nvcc -std=c++17 -O3 -lineinfo -arch=sm_90 -o d14l $R/lessons/day14-syncthreads/syncthreads.cu &
nvcc -std=c++17 -O3 -lineinfo -arch=sm_90 -o d16l $R/lessons/day16-tiled-matmul/tiled_matmul.cu &
nvcc -std=c++17 -O3 -lineinfo -arch=sm_90 -o d71l $R/lessons/day71-matmul-fp16/matmul_fp16.cu &
wait
export CUDA_VISIBLE_DEVICES=0
for c in 1 2 4 8 all; do
  if [ $c = all ]; then P=""; else P="taskset -c 0-$((c-1))"; fi
  /usr/bin/time -f "racecheck d14l cores=$c: %e s wall, %U user, %S sys" $P compute-sanitizer --tool racecheck ./d14l > /dev/null
  /usr/bin/time -f "memcheck d71l cores=$c: %e s wall, %U user, %S sys" $P compute-sanitizer --tool memcheck ./d71l > /dev/null
done
ps -o nlwp= -p $$ >/dev/null
( compute-sanitizer --tool racecheck ./d14l > /dev/null & p=$!; sleep 3; echo "threads of racecheck: $(ls /proc/$p/task | wc -l) (sanitizer); children: $(pgrep -P $p | xargs -r -I{} sh -c 'ls /proc/{}/task | wc -l' | tr '\n' ' ')"; wait $p )
for k in 6 8; do
  s=$(date +%s%N)
  for j in $(seq $k); do compute-sanitizer --tool racecheck ./d14l > /dev/null & done; wait
  echo "$k racechecks at once, unpinned: $(( ($(date +%s%N) - s) / 1000000 )) ms"
  per=$((N / k)); s=$(date +%s%N)
  for j in $(seq $k); do lo=$(( (j-1)*per )); taskset -c $lo-$((lo+per-1)) compute-sanitizer --tool racecheck ./d14l > /dev/null & done; wait
  echo "$k racechecks at once, each on its own $per cores: $(( ($(date +%s%N) - s) / 1000000 )) ms"
done
