#!/bin/bash
# Two GPUs' timed runs at once: how much slower is each, and does binding each
# lesson's process to its GPU's local CPUs (or to half of the cores) help?
set -u
R=$PWD; W=/tmp/numa; mkdir -p $W; cd $W
echo "== lscpu"; lscpu | grep -i -E "^cpu\(s\)|numa|socket|model name|thread|core|mhz"
echo "== topo"; nvidia-smi topo -m
declare -a LOCAL
i=0
for b in $(nvidia-smi --query-gpu=pci.bus_id --format=csv,noheader); do
  d="0000:$(echo ${b:9} | tr A-Z a-z)"
  LOCAL[$i]=$(cat /sys/bus/pci/devices/$d/local_cpulist 2>/dev/null || echo "?")
  echo "GPU $i $b $d local_cpulist=${LOCAL[$i]} numa_node=$(cat /sys/bus/pci/devices/$d/numa_node 2>/dev/null)"
  i=$((i+1))
done
for l in day13-shared-memory/shared_memory day14-syncthreads/syncthreads day16-tiled-matmul/tiled_matmul day71-matmul-fp16/matmul_fp16; do
  nvcc -std=c++17 -O3 -arch=sm_90 -o $(basename $l) $R/lessons/$l.cu &
done; wait
ms() { echo $(( ($(date +%s%N) - $1) / 1000000 )); }
series() {  # GPU, prefix...: the four lessons twice, one after another; prints each run's ms
  local g=$1; shift; local out=""
  for k in 1 2 3; do for p in shared_memory syncthreads tiled_matmul matmul_fp16; do
    s=$(date +%s%N); CUDA_VISIBLE_DEVICES=$g "$@" ./$p > /dev/null 2>&1; out="$out $p=$(ms $s)"
  done; done; echo "$out"
}
for round in 1 2; do
  echo "== round $round"
  s=$(date +%s%N); a=$(series 0); echo "alone GPU0: $(ms $s) ms:$a"
  s=$(date +%s%N); a=$(series 1); echo "alone GPU1: $(ms $s) ms:$a"
  s=$(date +%s%N); series 0 > o0 & series 1 > o1 & wait; echo "both, unbound: $(ms $s) ms"; echo " 0:$(cat o0)"; echo " 1:$(cat o1)"
  if [ "${LOCAL[0]}" != "?" ]; then
    s=$(date +%s%N); series 0 taskset -c ${LOCAL[0]} > o0 & series 1 taskset -c ${LOCAL[1]} > o1 & wait
    echo "both, each on its GPU's local CPUs: $(ms $s) ms"; echo " 0:$(cat o0)"; echo " 1:$(cat o1)"
  fi
  n=$(nproc); h=$((n/2))
  s=$(date +%s%N); series 0 taskset -c 0-$((h-1)) > o0 & series 1 taskset -c $h-$((n-1)) > o1 & wait
  echo "both, halves of the cores: $(ms $s) ms"; echo " 0:$(cat o0)"; echo " 1:$(cat o1)"
done
