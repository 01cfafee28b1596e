#!/usr/bin/env bash
# Runs the sans-IO parts' unit tests under miri (nightly toolchain with the
# miri component): the reactor's lock-free completion table, slab, source
# list and block_on, and psmrail's pure data structures (wire formats,
# matching, protocol state machines, tables, configuration parsers).
# Tests that reach PSM, sockets, the clock-driven watch or thread affinity
# (and process identities, which spawn children) are left out: miri cannot
# run foreign code or those system calls.
#
#   scripts/miri.sh            # all of the above (about 15-25 min here)
#   scripts/miri.sh reactor    # the reactor only
#
# Isolation is off only so that proptest can find its regression files;
# proptests run 8 cases each (PROPTEST_CASES) to keep the run short.
set -euo pipefail
export MIRIFLAGS="${MIRIFLAGS:--Zmiri-disable-isolation}"
export PROPTEST_CASES="${PROPTEST_CASES:-8}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-target/miri}"
what=${1:-all}

if [ "$what" = all ] || [ "$what" = reactor ]; then
  # cpu_set touches sched_{get,set}affinity, which miri does not model.
  cargo +nightly miri test -p psmrail-reactor --lib -- \
    completion:: slab:: source_list:: block_on::
fi

if [ "$what" = all ] || [ "$what" = psmrail ]; then
  cargo +nightly miri test -p psmrail --lib -- \
    config::number:: config::boolean:: config::uuid:: config::error:: \
    config::rail_addr:: config::rail_policy:: \
    engine::addr:: engine::buffer:: engine::native::inflight:: engine::native::lock:: \
    engine::soft::matcher:: engine::soft::wire:: engine::soft::epid:: engine::soft::optable:: \
    fabric::tag_layout:: fabric::caps:: fabric::av_entries:: fabric::slots:: fabric::wait_list:: \
    fabric::mr::table:: fabric::mr::access:: fabric::name_server::wire:: \
    fabric::peer_watch::wire:: \
    ops::gen_slab:: ops::trigger_list:: ops::atomic::tests:: ops::atomic_ops::wire:: \
    ops::am_msg::wire:: ops::am_msg::ids:: ops::am_msg::protocol:: \
    ops::rma::wire:: ops::rma::plan:: ops::rma::ids::
fi
