#!/bin/bash
# Experiment: compute-sanitizer on cores of its own. PIN_SLOTS slots of
# nproc/PIN_SLOTS cores each; a pass takes the first free slot (an flock held
# by the pass's process for its lifetime) and runs pinned to its cores; with
# no slot free it runs unpinned. --version and the like go straight through.
real=${REAL_SANITIZER:-/usr/local/cuda/bin/compute-sanitizer}
case "${1:-}" in --version|-v|--help|-h|"") exec "$real" "$@";; esac
slots=${PIN_SLOTS:-12}; n=$(nproc); size=$(( n / slots )); [ "$size" -ge 1 ] || size=1
for k in $(seq 0 $(( slots - 1 ))); do
    exec {fd}>"/tmp/pin-slot-$k"
    if flock -n "$fd"; then
        first=$(( k * size )); last=$(( first + size - 1 ))
        echo "$(date +%s.%N) slot $k cores $first-$last $*" >> /tmp/pin-log
        exec taskset -c "$first-$last" "$real" "$@"
    fi
    exec {fd}>&-
done
echo "$(date +%s.%N) unpinned $*" >> /tmp/pin-log
exec "$real" "$@"
