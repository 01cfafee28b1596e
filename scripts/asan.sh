#!/usr/bin/env bash
# The tests that drop, forget and cancel operation futures, and the engines'
# own tests, under AddressSanitizer (nightly toolchain; the native engine on
# the real libpsm2 over shared memory):
#
#   scripts/asan.sh                  # lib unit tests, engine_native, ops_drop, ops_remote
#   scripts/asan.sh --test ops_remote drops   # or any cargo test arguments
#
# Leak reports are off: `mem::forget` of a future leaks its buffer by design.
# AddressSanitizer sees libpsm2's writes through its `memcpy`, so a buffer
# freed while PSM still writes into it is reported (heap-use-after-free in
# libpsm2), in the `native_drops_fragments*` scenarios of ops_remote, where
# large messages move in fragments. With the default cross-memory attach
# the kernel writes instead, unseen; those scenarios' canary catches it.
# Not in CI: about 5 minutes here. Never next to a benchmark (both sides spin).
set -euo pipefail
cd "$(dirname "$0")/.."
export RUSTFLAGS="-Zsanitizer=address"
export RUSTDOCFLAGS="-Zsanitizer=address"
export ASAN_OPTIONS="detect_leaks=0${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
export PSM2_DEVICES="${PSM2_DEVICES:-self,shm}"
export PSMRAIL_REQUIRE_NATIVE="${PSMRAIL_REQUIRE_NATIVE:-1}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-target/asan}"
# --target keeps build scripts and proc macros uninstrumented.
target=x86_64-unknown-linux-gnu
if [ $# -eq 0 ]; then
  set -- -p psmrail --lib --test engine_native --test ops_drop --test ops_remote
fi
exec cargo +nightly test --target "$target" "$@"
