//! The multi-rail provider (`ofi_mrail`, fi_mrail(7)): one logical RDM
//! endpoint over several rails, each rail an endpoint of the psm provider
//! bound to one address.
//!
//! # Objects
//!
//! Discovery ([`getinfo`](crate::fabric::getinfo) with
//! [`Provider::Mrail`](crate::fabric::Provider) or `prov_name("ofi_mrail")`)
//! reads the rails from `FI_OFI_MRAIL_ADDR` (or the hints'
//! [`MrailConfig`](crate::config::MrailConfig)) and the size policies from
//! `FI_OFI_MRAIL_CONFIG`. The objects then read like the psm ones:
//! [`MrailFabric`] → [`MrailDomain`] (one psm domain per rail, one reactor
//! for all) → [`MrailAv`], [`CompletionQueue`](crate::fabric::CompletionQueue),
//! [`Counter`](crate::fabric::Counter) → [`MrailEndpoint`], whose
//! operations have the psm endpoint's names, arguments and outputs. Both
//! endpoints implement [`MessageEndpoint`](crate::ops::MessageEndpoint),
//! so code can be generic over the two:
//!
//! ```
//! use psmrail::config::{MrailConfig, PsmConfig, RailAddr};
//! use psmrail::fabric::{getinfo, AvAttr, EngineChoice, Hints, Provider};
//! use psmrail::mrail::MrailFabric;
//! use psmrail::ops::MessageEndpoint;
//!
//! async fn echo_once<E: MessageEndpoint>(ep: &E, peer: psmrail::fabric::FiAddr) -> psmrail::Result<usize> {
//!     let reply = ep.trecv(vec![0u8; 100_000], 7, 0);
//!     let (sent, _) = ep.tsend(peer, 7, vec![42u8; 100_000]).await;
//!     sent?;
//!     let (got, _) = reply.await;
//!     Ok(got?.len)
//! }
//!
//! let psm = PsmConfig::builder_from_env().unwrap().name_server(false)
//!     .delay(std::time::Duration::ZERO).build().unwrap();
//! let rails = MrailConfig::builder()
//!     .rails(RailAddr::parse_list("127.0.0.1,127.0.0.1").unwrap())
//!     .build();
//! let hints = Hints::new().provider(Provider::Mrail).engine(EngineChoice::Soft)
//!     .config(psm).mrail_config(rails);
//! let info = getinfo(Some(&hints))?.remove(0);
//! let domain = MrailFabric::open(&info)?.domain(&info)?;
//! let av = domain.av(AvAttr::new())?;
//! let ep = domain.endpoint(&info).bind_av(&av).enable()?;
//! // The endpoint talks to itself: a 100 kB message striped over 2 rails.
//! let me = av.insert(&[ep.getname()]).remove(0)?;
//! let n = domain.reactor().block_on(echo_once(&ep, me))?;
//! assert_eq!(n, 100_000);
//! assert_eq!(ep.stats().rails.iter().filter(|r| r.stripes > 0).count(), 2);
//! # Ok::<(), psmrail::Error>(())
//! ```
//!
//! # How it works
//!
//! * Rails: on the soft engine each rail's endpoint listens on, and dials
//!   from, its rail's address over TCP only — never a Unix socket or a
//!   loopback shortcut — so between hosts its traffic stays on its link.
//!   The native engine opens one PSM endpoint per process on these
//!   machines, so it serves one rail.
//! * Policies ([`core::rail_choice`]): by message size, the fixed rail
//!   (`local rank mod N`), one rail per message in turn, or striping over
//!   every rail; default `16384:fixed,ULONG_MAX:striping`.
//! * Weighted striping ([`core::rail_rates`]): parts in proportion to the
//!   rails' rates, configured (`PSMRAIL_MRAIL_RATES`) or learned from the
//!   bytes each rail moves over the time it is busy with striped parts
//!   ([`core::rail_load`]); the weights travel in the request to send, so
//!   both sides cut the message alike.
//! * The wire protocol, ordering and progress: the `driver` module's docs. In
//!   short: eager messages are one rail message with a small header; large
//!   and striped ones announce themselves (RTS), and once matched the
//!   receiver posts one rail receive per part directly into its window of
//!   the user's buffer and answers (CTS); the parts then travel as the
//!   rails' own tagged messages, joined on both sides by the mrail
//!   combinator (`stripe_join`). Sequence numbers per (endpoint, peer)
//!   put matching back in send order across rails.
//! * RMA ([`rma`]): regions registered on every rail with raw keys (each
//!   rail's key in rail order, [`MrailDomain::map_raw`]); reads and writes
//!   striped like messages, any length; a write that goes out as several
//!   rail operations first checks key, range and rights on every rail, so
//!   a refused write changes nothing; `writedata`'s CQ entry appears at
//!   the target after the last stripe landed.
//! * Failover (the `driver` module's docs): a rail whose link goes down,
//!   that the application disables ([`MrailEndpoint::disable_rail`]) or on
//!   which a peer is lost, is left; the frames and parts in flight on it
//!   go again on the other rails, receivers dropping what they already
//!   had; the rail rejoins after a back-off when its link comes back. The
//!   endpoint reports it: [`MrailEndpoint::rail_states`], the domain's
//!   [`rail_events`](MrailDomain::rail_events), per-rail `errors` and
//!   `retransmits` in [`MrailStats`]. Operations fail (`FI_EIO`, naming
//!   the rails) only when no rail is left; once a rail serves again the
//!   two sides resynchronise and talk again over the same addresses, a
//!   rail that lost a peer (or never connected to it: a peer is inserted
//!   with the rails that connect) connecting to it while in service.
//! * The sans-IO core ([`core`]): header codec, stripe plans, rail choice,
//!   rail health, sequence numbers and reorder buffer, matching — plain
//!   data structures, unit- and property-tested, fuzzed.
//!
//! # Cancel safety
//!
//! See [`ops`]: every future may be dropped at any point; rails keep what
//! they still touch.
//!
//! # Per-peer state, and going to many peers
//!
//! What a peer costs here, measured in the four-host test
//! (`tests/mrail_scale.rs`, [`MrailStats::peer_state_bytes`]):
//!
//! * an address-vector entry: its mrail address and one engine handle per
//!   rail, about 100 bytes for 2 rails;
//! * protocol state, made with the first frame to or from the peer: 176
//!   bytes (sequence counters, an empty reorder buffer, an empty resend
//!   log), growing while traffic is in flight by the control frames the
//!   peer has not acknowledged yet (acknowledged every 32 frames or within
//!   1 ms; 0.4 to 1.6 KiB per peer were seen with 4 MiB messages in
//!   flight, their payloads never copied) and by frames held out of order
//!   (none unless rails deliver out of order, then at most 2^16 frames and
//!   64 MiB of eager payload);
//! * on each rail, the rail endpoint's connection to the peer (on the
//!   soft engine a TCP connection per rail, made when the peer is
//!   inserted, or at its first use with `AvAttr::lazy_connect`), which is
//!   what costs most: kernel socket buffers.
//!
//! The pools of control receives are per rail, not per peer (32 each), and
//! a striped transfer's state lives only while it is in flight. So at
//! 1,000 peers the mrail layer's own state is about 176 KB at rest and its
//! resend logs stay bounded by the acknowledgement rule; what costs is the
//! rails' connections. An address vector that connects at first use
//! (`AvAttr::lazy_connect`) makes them only for the peers actually talked
//! to; closing them when a peer has been idle is not done.

mod addr;
mod av;
mod claim;
pub mod core;
mod domain;
mod driver;
mod endpoint;
mod fabric;
#[cfg(any(test, feature = "hooks"))]
pub(crate) mod fuzzing;
mod link_watch;
mod memory_region;
pub mod ops;
mod rail_events;
mod region;
pub use crate::config::rail_resolve as resolve;
pub mod rma;
mod stripe_join;

pub use addr::{MrailAddr, MRAIL_SCHEME};
pub use av::MrailAv;
pub use claim::MrailClaimed;
pub use core::rail_health::{RailEvent, RailReason, RailState};
pub use domain::MrailDomain;
pub use endpoint::{MrailEndpoint, MrailEndpointBuilder, MrailStats, RailTraffic};
pub use fabric::MrailFabric;
pub use memory_region::MrailMemoryRegion;
pub use ops::{MrailPosted, MrailRecvOp, MrailSendOp};
pub use rail_events::RailEvents;
pub use rma::MrailRmaOp;
