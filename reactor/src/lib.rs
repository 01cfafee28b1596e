//! psmrail's progress reactor: progress sources, completion slots, and the
//! manual and auto progress modes (see `design.md`, principle 4).
#![deny(missing_docs)]
#![deny(unsafe_op_in_unsafe_fn)]

mod cpu_set;

pub use cpu_set::{current_thread_affinity, pin_current_thread, CpuSet, CpuTopology, MAX_CPUS};
