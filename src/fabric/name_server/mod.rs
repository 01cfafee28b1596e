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
//! * **Queries**: [`wire`]'s version 0 is C's `util_ns` format byte for
//!   byte on little-endian hosts (x86), including its one big-endian field:
//!   a C client queries a psmrail server and the reverse.
//! * **Registrations** are not C's: psmrail registers over an *owning
//!   session* (wire version 1), and refuses C's ADD and DEL, which name no
//!   owner (below). So a C process cannot register with a psmrail server,
//!   and a psmrail process cannot register with a C server (it says so:
//!   [`ErrorKind::OpNotSupp`](crate::ErrorKind::OpNotSupp)).
//! * **Rules**: duplicate ADD refused, DEL only with the matching epid,
//!   service 0 a query wildcard answered with a real entry
//!   (`registry.rs` lists the deliberate differences).
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
//! # What it trusts
//!
//! The serving process also binds the port on the addresses its fabric
//! asks for ([`NameServer::start_listening`]: the soft engine's address,
//! `PSMRAIL_NAME_SERVER_ADDR`) or, with [`NameServer::start`], on each
//! address configured on the host's interfaces (each on its own, never
//! the wildcard `0.0.0.0`), so that clients on other nodes can query it
//! by the node's name or address. Anyone who reaches it may QUERY. Only the node itself may
//! register: a registration whose peer address is neither loopback nor one
//! of the host's own is refused with status [`wire::STATUS_NOT_LOCAL`]
//! (`access.rs`).
//!
//! On the node, an entry changes only by its owner. The serving process
//! owns what it registers itself; every other process registers over one
//! connection it keeps open, its owning session (`session.rs`), and owns
//! what it adds there. Nobody else deletes an entry
//! ([`wire::STATUS_NOT_OWNER`]) or registers over it
//! ([`wire::STATUS_TAKEN`]) while it exists, and a session's entries go
//! when its connection closes, which the kernel does when the process
//! exits or is killed: a restarted server registers its service again at
//! once. C's one-shot ADD and DEL would let any local process delete and
//! replace any entry, so they are refused ([`wire::STATUS_NEEDS_SESSION`]).
//!
//! With a job secret ([`NameServer::start_with`]; the fabric passes
//! `PSMRAIL_JOB_SECRET`), every ADD and DEL must also carry an HMAC-SHA256
//! proof of the secret over the session's fresh nonce, the request's
//! number in the session and the request (`proof.rs`): a request without
//! it ([`wire::STATUS_NO_PROOF`]) or with a wrong one
//! ([`wire::STATUS_BAD_PROOF`]: another secret, or a request captured
//! from another session and replayed) changes nothing. Without a secret, a
//! local process outside the job can still register names nobody holds.

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
//! which peers are this host; pure), `registry` (the table and its owners,
//! pure), `proof` (the secret's proofs, pure), `session` (one server
//! connection, pure), `server` ([`NameServer`], the mio thread, and a
//! registering handle's session), `client` ([`query`] and the owning
//! session's client side, blocking sockets with a deadline).

mod access;
mod client;
#[cfg(any(test, feature = "hooks"))]
pub(crate) mod fuzzing;
mod port;
mod proof;
mod registry;
mod server;
mod service;
mod session;
pub mod wire;

pub use client::query;
pub use port::port_for;
pub use server::{
    NameServer, Registration, CONNECTION_TIMEOUT, MAX_CONNECTIONS, MAX_ENTRIES_PER_SESSION,
    MAX_SESSIONS, UPDATE_TIMEOUT,
};
pub use service::Service;
