#!/bin/bash
# Does a timed lesson on GPU 0 keep its timings while sanitizer passes run on GPU 1?
set -u
R=$PWD; W=/tmp/interf; mkdir -p $W; cd $W
nproc; nvidia-smi --query-gpu=index,name,persistence_mode,clocks.sm,clocks.max.sm --format=csv
nvcc -std=c++17 -O3 -arch=sm_90 -o d71 $R/lessons/day71-matmul-fp16/matmul_fp16.cu &
nvcc -std=c++17 -O3 -arch=sm_90 -o d16 $R/lessons/day16-tiled-matmul/tiled_matmul.cu &
nvcc -std=c++17 -O3 -arch=sm_90 -o d13 $R/lessons/day13-shared-memory/shared_memory.cu &
nvcc -std=c++17 -O3 -lineinfo -arch=sm_90 -o d14l $R/lessons/day14-syncthreads/syncthreads.cu &
nvcc -std=c++17 -O3 -lineinfo -arch=sm_90 -o d16l $R/lessons/day16-tiled-matmul/tiled_matmul.cu &
wait
N=$(nproc)
timed() { # label, pin
  for i in 1 2 3 4 5; do
    s=$(date +%s.%N)
    CUDA_VISIBLE_DEVICES=0 $2 ./d71 > o71.txt 2>&1
    e=$(date +%s.%N)
    echo "$1 run $i wall $(echo "$e - $s" | bc) f32: $(grep matmulTiledF32 o71.txt | awk '{print $4}' | tr '\n' ' ') f16f32: $(grep matmulF16StoreF32Acc o71.txt | awk '{print $4}' | tr '\n' ' ')"
  done
  for i in 1 2 3; do
    CUDA_VISIBLE_DEVICES=0 $2 ./d13 > o13.txt 2>&1
    echo "$1 d13 $i: $(grep -iE 'ms|GB/s' o13.txt | head -8 | tr -s ' ' | tr '\n' '|')"
  done
}
load() { # how many, pin
  rm -f stop done.*; : > passes.log
  for j in $(seq $1); do
    ( while [ ! -e stop ]; do
        if [ $((j % 2)) = 0 ]; then t=racecheck; b=./d14l; else t=memcheck; b=./d16l; fi
        CUDA_VISIBLE_DEVICES=1 $2 compute-sanitizer --tool $t $b > /dev/null 2>&1; echo "$t $(date +%s.%N)" >> passes.log
      done ) &
  done
  sleep 4
}
unload() { touch stop; wait; echo "passes finished meanwhile: $(wc -l < passes.log)"; rm -f stop; }
echo "== A alone"; timed A ""
echo "== B 12 passes on GPU 1, no pinning"; load 12 ""; timed B ""; unload
echo "== D 12 passes on GPU 1, nice 19"; load 12 "nice -n 19"; timed D ""; unload
echo "== C 12 passes on GPU 1 pinned to cores 4-$((N-1)) nice 19; timed on 0-3"; load 12 "taskset -c 4-$((N-1)) nice -n 19"; timed C "taskset -c 0-3"; unload
echo "== C2 12 passes pinned to 2-$((N-1)); timed on 0-1 (no nice)"; load 12 "taskset -c 2-$((N-1))"; timed C2 "taskset -c 0-1"; unload
echo "== A2 alone again"; timed A2 ""
echo "== E concurrency of timed runs"
for i in 1 2 3; do /usr/bin/time -f "alone d16 gpu0 %e s" env CUDA_VISIBLE_DEVICES=0 ./d16 >/dev/null; done
for i in 1 2 3; do /usr/bin/time -f "alone d71 gpu1 %e s" env CUDA_VISIBLE_DEVICES=1 ./d71 >/dev/null; done
for i in 1 2 3; do
  /usr/bin/time -f "together d16 gpu0 %e s" env CUDA_VISIBLE_DEVICES=0 ./d16 >/dev/null &
  /usr/bin/time -f "together d71 gpu1 %e s" env CUDA_VISIBLE_DEVICES=1 ./d71 >/dev/null; wait
done
for i in 1 2 3; do
  /usr/bin/time -f "together-pinned d16 gpu0 %e s" env CUDA_VISIBLE_DEVICES=0 taskset -c 0-7 ./d16 >/dev/null &
  /usr/bin/time -f "together-pinned d71 gpu1 %e s" env CUDA_VISIBLE_DEVICES=1 taskset -c 8-15 ./d71 >/dev/null; wait
done
echo "== one pass alone"; /usr/bin/time -f "racecheck d14l alone %e s %U u %S s" env CUDA_VISIBLE_DEVICES=1 compute-sanitizer --tool racecheck ./d14l >/dev/null
/usr/bin/time -f "memcheck d16l alone %e s %U u %S s" env CUDA_VISIBLE_DEVICES=1 compute-sanitizer --tool memcheck ./d16l >/dev/null
