#!/usr/bin/env bash
# Alternates the 8 B ping-pong of a plain psm endpoint on one rail and of
# an mrail endpoint (fixed policy) over RAILS rails, ROUNDS times, in the
# namespace rig of examples/mrail_pingpong (root), and prints each round's
# half round trips and their ratio, then the median ratio.
# Usage: scripts/mrail-vs-psm.sh [ROUNDS] [RAILS] [ITERATIONS]
set -euo pipefail
rounds=${1:-9}; rails=${2:-2}; iters=${3:-10000}
cd "$(dirname "$0")/.."
cargo build --release --quiet --example mrail_pingpong
bin=target/release/examples/mrail_pingpong
usec() { "$bin" --rig "$rails" --provider "$1" -S 8 -I "$iters" | awk '$1 == "8" { print $7 }'; }
ratios=()
for r in $(seq "$rounds"); do
  p=$(usec psm); m=$(usec mrail)
  ratio=$(awk -v m="$m" -v p="$p" 'BEGIN { printf "%.3f", m / p }')
  ratios+=("$ratio")
  echo "round $r: psm $p us, mrail $m us, mrail/psm $ratio"
done
printf '%s\n' "${ratios[@]}" | sort -n | awk '{ a[NR] = $1 } END { print "median mrail/psm:", a[int((NR + 1) / 2)] }'
