//! The sans-IO core of the multi-rail provider: plain data structures with
//! no sockets, threads or clocks.
//!
//! The provider objects drive these pieces with what happens on the rails:
//!
//! * [`header`]: the control frame header every rail message starts with
//!   ([`Frame`], [`decode`](header::decode)) and the rail tag layout
//!   ([`CTRL_TAG`](header::CTRL_TAG), [`data_tag`](header::data_tag));
//! * [`local_rank`](mod@local_rank) (from [`config`](crate::config)):
//!   the process's local rank from the launcher's environment, which picks
//!   the fixed rail;
//! * [`rail_choice`]: which rails a message goes out on, by size class
//!   and rail liveness ([`RailChooser`]);
//! * [`rail_health`]: which rails are in service, the back-off before a
//!   rail whose link came back rejoins, and the events that report it
//!   ([`RailHealth`]);
//! * [`stripe`]: how a large message is split over its rails
//!   ([`StripePlan`]), equally or by weight;
//! * [`rma_plan`]: how an RMA operation's stripes are laid over its
//!   remote ranges, one rail operation per overlap ([`RmaPiece`]);
//! * [`rail_rates`]: each rail's rate, configured or learned, and the
//!   stripe weights that follow ([`RailRates`]);
//! * [`rail_load`]: the striped parts on each rail and their service
//!   times, the samples rates are learned from ([`RailLoad`]);
//! * [`rail_queue`]: the sender's parts waiting for their rails, a few in
//!   flight per rail at a time ([`PartQueue`](rail_queue::PartQueue));
//! * `send_wait`: how long a send waits for a rail to its peer
//!   (`SendWait`);
//! * [`sequence`]: per-peer sequence numbers ([`TxSequence`]) and the
//!   receive-side reorder buffer ([`Reorder`]) that undoes the reordering
//!   between rails;
//! * [`matcher`]: matching the application's receives against the
//!   reordered messages ([`Matcher`]).
//!
//! A send picks its rails, numbers the message and either sends it whole in
//! an [`Eager`](Frame::Eager) frame or announces it with an
//! [`Rts`](Frame::Rts); the receiver reorders, matches, and answers a
//! request with a [`Cts`](Frame::Cts) naming its receive id, after which
//! both sides stripe the data with the same [`StripePlan`].
//!
//! Every decoder and buffer here takes hostile input without panicking;
//! the fuzz targets in `fuzz/` exercise the header decoder and the reorder
//! buffer.

pub mod header;
pub use crate::config::local_rank;
pub mod matcher;
pub mod rail_choice;
pub mod rail_health;
pub mod rail_load;
pub mod rail_queue;
pub mod rail_rates;
pub mod rma_plan;
pub(crate) mod send_wait;
pub mod sequence;
pub mod stripe;

pub use header::{Frame, HeaderError, MsgClass, NackReason};
pub use local_rank::{local_rank, LocalRank};
pub use matcher::{ArrivalSpec, Matcher, RecvSpec};
pub use rail_choice::{RailChoice, RailChooser, RailCountError};
pub use rail_health::{RailEvent, RailHealth, RailReason, RailState};
pub use rail_load::{RailLoad, RailStint};
pub use rail_rates::RailRates;
pub use rma_plan::{RmaPiece, RmaPlanError};
pub use sequence::{Reorder, ReorderError, TxSequence};
pub use stripe::{Stripe, StripePlan};
