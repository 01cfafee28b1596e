//! Raw PSM 1.x ABI for psmrail, loaded at run time from `libpsm_infinipath.so.1`.
//!
//! * [`ffi`]: the hand-written C ABI (`psm.h`, `psm_mq.h`, the AM interface
//!   of both builds): `#[repr(C)]` types, every error code, flags, and the
//!   function-pointer types.
//! * [`PsmLibrary`]: the function table, loaded with `libloading` (so this
//!   crate builds and runs without PSM installed), the detected
//!   [`PsmBuild`] (TrueScale or psm2 compat), `psm_init` and the safe
//!   `psm_finalize` policy.
//! * [`device`]: the preflight that refuses to open an endpoint where PSM
//!   would crash (compat build without `/dev/hfi1_*` and without a
//!   hardware-free `PSM2_DEVICES`) or stall.
//! * [`Endpoint`], [`Mq`], [`am`]: thin safe wrappers (open, connect, poll,
//!   tagged MQ, AM handlers as Rust closures behind per-build trampolines,
//!   graceful or forced close, one `psm_ep_close` either way). Raw access
//!   stays available ([`PsmLibrary::api`], `as_raw` everywhere).
//!
//! PSM is process-global and not thread safe per endpoint: the caller
//! serializes calls on an endpoint ([`Endpoint`] is `Send`, not `Sync`).
//!
//! See psmrail's `docs/native-engine.md` for what the libraries do on these
//! machines; the module docs of [`library`] and [`device`] record the
//! experiments behind the shutdown policy and the preflight.
//!
//! # Build differences handled here (all measured on Debian 12)
//! | | TrueScale `libpsm-infinipath1` | psm2 compat `libpsm2-2-compat` |
//! | --- | --- | --- |
//! | detection | no `psm2_*` symbol reachable | `psm2_init` reachable via the handle |
//! | AM handler | `(token, epaddr, args, nargs, src, len)` | `(token, args, nargs, src, len)` + `psm2_am_get_source` |
//! | AM limits (self / self,shm) | 256 handlers, 8 args, 2048 B | 256, 10, 8128 B (`self` alone: `INT_MAX` everywhere) |
//! | `psm_init` without hardware | 0 | 8 (`PSM_INTERNAL_ERR`), endpoints still work |
//! | `psm_finalize` | fine | segfaults after that `psm_init` result: skipped |
//! | device list variable | `PSM_DEVICES`; only `self` works here | `PSM2_DEVICES`; unset without `/dev/hfi1_*` segfaults |
//! | AM to the own endpoint | crashes (no AM in the `self` device): refused | works |
//! | endpoints per process | one per process lifetime | one, or several with `PSM2_MULTI_EP=1` (same epid without HFI: refused) |
//! | sender in MQ statuses | not reported | reported ([`MqStatus::peer`], libpsm2's `*2` calls) |
//! | connect to a closed epid, or a newer epid format | (self device only here) | segfault / abort in libpsm2: refused before the call |
//! | `psm_ep_close` | called once | called once: libpsm2 frees the endpoint whatever it returns |
//! | `psm_ep_query` element | `psm_epinfo_t` (96 B) | `psm2_epinfo_t` (104 B) |
//!
//! # Tests
//! `CARGO_TARGET_DIR=... cargo test -p psm-sys` runs unit tests, the layout
//! check against the C headers (`tests/layout.rs`) and the scenarios against
//! both real libraries (`tests/native.rs`, each in a child process). Missing
//! libraries or headers skip with a printed reason unless
//! `PSMRAIL_REQUIRE_NATIVE=1`. The ping-pong floor:
//! `PSM2_DEVICES=self,shm cargo run --release -p psm-sys --example raw_pingpong`.
#![deny(missing_docs)]
#![deny(unsafe_op_in_unsafe_fn)]

pub mod am;
pub mod device;
pub mod endpoint;
pub mod env;
pub mod error;
pub mod ffi;
pub mod library;
pub mod mq;

pub use am::{AmArg, AmFlags, AmHandler, AmToken, HandlerIndex};
pub use device::{Device, DeviceConfig};
pub use endpoint::{Affinity, AmParameters, Endpoint, EpAddr, Epid, OpenOptions, DEFAULT_UUID};
pub use env::EnvError;
pub use error::{Error, ErrorCode, LoadError, NoDeviceError, PsmError, Result};
pub use library::{Detection, FinalizeOutcome, InitStatus, PsmApi, PsmBuild, PsmLibrary};
pub use mq::{Mq, MqRequest, MqStatus};
