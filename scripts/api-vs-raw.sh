#!/usr/bin/env bash
# The public API's 8 B tagged ping-pong against the raw psm-sys floor, on
# this noisy VM: runs the raw floor (engine_pingpong --phases raw) and the
# API (pingpong --engine native --tagged; its half round trip is taken from
# the MB/sec column, which has more digits) in turn, N times each, and
# prints every pair, then the median API/raw ratio per VM state (a pair counts only
# when both runs saw the same state: raw under 0.2 µs and API under 0.3 µs
# is the fast state, both above is the slow one).
#
#   cargo build --release --example engine_pingpong --example pingpong
#   scripts/api-vs-raw.sh 8 [target/release/examples]
#
# Never run it next to another benchmark or a test run: both sides spin.
set -euo pipefail
if [ $# -lt 1 ]; then
  echo "usage: $0 N [DIR_WITH_EXAMPLES]" >&2
  exit 2
fi
export PSM2_DEVICES="${PSM2_DEVICES:-self,shm}"
n=$1
dir=${2:-target/release/examples}
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for _ in $(seq "$n"); do
  raw=$("$dir/engine_pingpong" --sizes 8 --rounds 1 --phases raw 2>&1 | awk '$1 == "8" {print $2; exit}')
  api=$("$dir/pingpong" --spawn --engine native --tagged -S 8 -I 300000 2>/dev/null | awk '$1 == "8" {printf "%.4f", 8 / $6; exit}')
  if [ -z "$raw" ] || [ -z "$api" ]; then
    echo "a run printed no 8 B figure (raw '$raw', API '$api'): run it alone to see why" >&2
    exit 1
  fi
  echo "raw $raw api $api" | tee -a "$out"
done
for state in fast slow; do
  awk -v st="$state" '
    (st == "fast" && $2 < 0.2 && $4 < 0.3) || (st == "slow" && $2 >= 0.2 && $4 >= 0.3) {print $4 / $2, $2, $4}
  ' "$out" | sort -n | awk -v st="$state" '{r[NR] = $1; raw[NR] = $2; api[NR] = $3} END {
    if (NR > 0) {
      m = int((NR + 1) / 2)
      printf "%s state: median API/raw %.3f over %d pairs (ratios:", st, r[m], NR
      for (i = 1; i <= NR; i++) printf " %.3f", r[i]
      printf ")\n"
    }
  }'
done
