#!/usr/bin/env bash
# A/B of engine_pingpong builds on this noisy VM: runs each binary in turn,
# N times, and prints the 8 B fast/raw ratio of every run, then the median
# per binary and VM state (a run whose raw 8 B took over 0.2 µs was in the
# slow state). Build each variant with
#   cargo build --release --example engine_pingpong && cp target/release/examples/engine_pingpong /tmp/epp_<name>
# then: scripts/ab-engine-pingpong.sh 4 /tmp/epp_a /tmp/epp_b
# PHASE=api (or poll, engine) compares that phase to raw instead of fast.
# Never run it next to another benchmark or a test run: both sides spin.
set -euo pipefail
if [ $# -lt 2 ]; then
  echo "usage: $0 N BINARY..." >&2
  exit 2
fi
export PSM2_DEVICES="${PSM2_DEVICES:-self,shm}"
phase="${PHASE:-fast}"
n=$1
shift
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for _ in $(seq "$n"); do
  for b in "$@"; do
    row=$("$b" --sizes 8 --rounds 3 --phases "raw,$phase" 2>&1 | grep -E '^ +8 ' | awk '{print $2, $3, $6}')
    echo "$b $row" | tee -a "$out"
  done
done
for b in "$@"; do
  for state in fast slow; do
    grep -F "$b " "$out" | awk -v st="$state" '(st == "fast" && $2 < 0.2) || (st == "slow" && $2 >= 0.2) {print $4}' |
      sort -n | awk -v b="$b" -v st="$state" -v ph="$phase" '{a[NR] = $1} END {
        if (NR > 0) {
          printf "%s %s state: median %s/raw %.3f over %d runs:", b, st, ph, a[int((NR + 1) / 2)], NR
          for (i = 1; i <= NR; i++) printf " %s", a[i]
          printf "\n"
        }
      }'
  done
done
