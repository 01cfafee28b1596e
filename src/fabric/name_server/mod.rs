//! The psm provider's built-in name server (`FI_PSM_NAME_SERVER`): how a
//! client that knows only a host name finds a server's endpoint id.
//!
//! fi_psm(7): "The main purpose of this name server is to allow simple
//! client-server type applications (such as those in fabtest) to be written
//! purely with libfabric, without using any out-of-band communication
//! mechanism." Each endpoint registers `(service, epid)` with its node's
//! server ([`NameServer::register`]); a client's `fi_getinfo(node,
//! service)` asks the server on `node` ([`query`]) and gets the epid to put
//! in `dest_addr`. A service number is a name in this table, **not** a TCP
//! port.
//!
//! # Compatibility with the C provider
//!
//! * **Port**: [`port_for`] derives the TCP port from the job UUID as C
//!   does (64331 for the default UUID), so a C client and a psmrail server
//!   (or the reverse) meet on the same port.
//! * **Wire format**: [`wire`] is C's `util_ns` format byte for byte on
//!   little-endian hosts (x86), including its one big-endian field.
//! * **Rules**: duplicate ADD refused, DEL only with the matching epid,
//!   service 0 a query wildcard answered with a real entry
//!   (`registry.rs` lists the two deliberate differences), and ADD and DEL
//!   only from the node itself (below).
//!
//! # One server per node per UUID
//!
//! [`NameServer::start`] binds the UUID's port on loopback. The first
//! process of a job on a node gets it and serves; the others find it in use
//! and register with that server over loopback. fi_psm(7): "The name server
//! won't work properly if there are more than one processes from the same
//! job (i.e. with the same UUID) running on the same node and acting as
//! servers. For such scenario it is recommended to have each process
//! getting local transport address with fi_getname and exchanging the
//! addresses with out-of-band mechanism." Registrations also disappear
//! when the serving process exits.
//!
//! # Who may use it
//!
//! The serving process also binds the port on each address configured on
//! the host's interfaces (each on its own, never the wildcard `0.0.0.0`),
//! so that clients on other nodes can query it by the node's name or
//! address. Anyone who reaches it may QUERY; only the node itself may ADD
//! or DEL: a registration whose peer address is neither loopback nor one of
//! the host's own is refused, changes nothing, and is answered with an ACK
//! of status [`wire::STATUS_NOT_LOCAL`] (C's server would have carried it
//! out, letting any host redirect a service). `access.rs` has the rules.
//!
//! # When it runs
//!
//! [`PsmConfig::name_server`](crate::config::PsmConfig::name_server)
//! decides: on by default, off when an MPI launcher is detected
//! (`OMPI_COMM_WORLD_RANK`, `PMI_RANK`, `PMIX_RANK`), an explicit
//! `FI_PSM_NAME_SERVER` wins. The fabric starts the server and registers
//! endpoints when it is on; this module does not read the configuration.
//!
//! # Layout
//!
//! `wire` (frames, pure), `port` ([`port_for`]), `access` (where to listen,
//! who may register; pure), `registry` (the table, pure), `session` (one
//! server connection, pure), `server`
//! ([`NameServer`], the mio thread), `client` ([`query`] and the remote
//! ADD/DEL, blocking sockets with a deadline).

mod access;
mod client;
#[cfg(any(test, feature = "hooks"))]
pub(crate) mod fuzzing;
mod port;
mod registry;
mod server;
mod service;
mod session;
pub mod wire;

pub use client::query;
pub use port::port_for;
pub use server::{NameServer, Registration, CONNECTION_TIMEOUT, MAX_CONNECTIONS, UPDATE_TIMEOUT};
pub use service::Service;
