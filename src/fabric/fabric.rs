//! The fabric (`fi_fabric`): the configuration every object below uses, and
//! the node's name server.
//!
//! Opening a fabric starts the name server when `FI_PSM_NAME_SERVER` is on (the
//! default, except under an MPI launcher: [`PsmConfig::name_server`]), with the
//! job secret (`PSMRAIL_JOB_SECRET`) if there is one, so that only the job's
//! processes register names on its node. If
//! another process of the job serves already, this one registers there (one
//! server per node per UUID, as libfabric's `prov/util/src/util_ns.c` does). A
//! server that cannot start for any other reason is a warning, not an error, as
//! in C: only name resolution is lost, and endpoints can still exchange
//! addresses out of band.
//!
//! Unlike C (one fabric and one domain per process), several fabrics and
//! domains may be open at once; the native engine itself allows one
//! endpoint per process, so a second native domain fails with `FI_EBUSY`.

use super::domain::{unsupported, Domain};
use super::endpoint::Endpoint;
use super::name_server::{port_for, NameServer};
use super::Info;
use crate::config::PsmConfig;
use crate::reactor::Reactor;
use crate::Result;
use std::fmt;
use std::sync::Arc;

/// The shared state of a [`Fabric`].
pub(crate) struct FabricCore {
    info: Info,
    name_server: Option<NameServer>,
    /// Where `insert_service` queries go by default.
    ns_port: u16,
}

impl fmt::Debug for FabricCore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FabricCore")
            .field("name_server", &self.name_server)
            .field("ns_port", &self.ns_port)
            .finish()
    }
}

impl FabricCore {
    /// The name server endpoints register with, if one runs (or is joined).
    pub(crate) fn name_server(&self) -> Option<&NameServer> {
        self.name_server.as_ref()
    }

    /// The port name-server queries go to.
    pub(crate) fn name_server_port(&self) -> u16 {
        self.ns_port
    }

    /// The configuration the fabric was opened with.
    pub(crate) fn config(&self) -> &PsmConfig {
        self.info.config()
    }
}

/// A fabric (`fid_fabric`): a cheap `Clone` handle. Domains hold it, so it
/// (and its name server) lives as long as any of them.
///
/// ```
/// use psmrail::config::PsmConfig;
/// use psmrail::fabric::{getinfo, Fabric, Hints};
/// // No name server for this example: it would take the job's port.
/// use psmrail::fabric::EngineChoice;
/// let config = PsmConfig::builder_from_env().unwrap()
///     .name_server(false)
///     .delay(std::time::Duration::ZERO)
///     .build()
///     .unwrap();
/// let hints = Hints::new().engine(EngineChoice::Soft).config(config);
/// let info = getinfo(Some(&hints))?.remove(0);
/// let fabric = Fabric::open(&info)?;
/// assert!(fabric.name_server_addr().is_none());
/// let domain = fabric.domain(&info)?;
/// # drop(domain);
/// # Ok::<(), psmrail::Error>(())
/// ```
#[derive(Clone)]
pub struct Fabric {
    pub(crate) core: Arc<FabricCore>,
}

impl fmt::Debug for Fabric {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.core.fmt(f)
    }
}

impl Fabric {
    /// Opens a fabric with `info`'s configuration, starting (or joining)
    /// the job's name server when `FI_PSM_NAME_SERVER` is on, listening
    /// where [`Info::name_server_listen`] says, with `info`'s
    /// job secret ([`SoftConfig::job_secret`](crate::engine::soft::SoftConfig::job_secret),
    /// whichever engine serves) if it has one.
    ///
    /// # Errors
    /// None today (a name server that cannot start is logged); the
    /// `Result` leaves room for checks of the info.
    pub fn open(info: &Info) -> Result<Fabric> {
        let config = info.config();
        let uuid = config.uuid();
        let port = port_for(&uuid);
        let name_server = if config.name_server() {
            let secret = info.soft_config().job_secret.clone();
            match NameServer::start_listening(&uuid, secret, info.name_server_listen()) {
                Ok(ns) => Some(ns),
                Err(e) => {
                    tracing::warn!(
                        "fabric: the name server did not start, names will not resolve: {e}"
                    );
                    None
                }
            }
        } else {
            None
        };
        Ok(Fabric::with_core(info, name_server, port))
    }

    /// Opens a fabric whose endpoints register with `name_server` (for
    /// example one started with [`NameServer::start_on`] on a chosen
    /// address), whatever `FI_PSM_NAME_SERVER` says; address vectors query
    /// its port.
    pub fn open_with_name_server(info: &Info, name_server: NameServer) -> Result<Fabric> {
        let port = name_server.local_addr().port();
        Ok(Fabric::with_core(info, Some(name_server), port))
    }

    /// A fabric with no name server at all (whatever `FI_PSM_NAME_SERVER`
    /// says): what an mrail domain opens its rails on.
    pub(crate) fn open_unnamed(info: &Info) -> Fabric {
        Fabric::with_core(info, None, 0)
    }

    /// Opens a domain progressed by `reactor` (see
    /// [`Domain::open_on`]).
    pub(crate) fn domain_on(&self, info: &Info, reactor: Option<&Reactor>) -> Result<Domain> {
        Domain::open_on(self.core.clone(), info, reactor)
    }

    fn with_core(info: &Info, name_server: Option<NameServer>, ns_port: u16) -> Fabric {
        Fabric {
            core: Arc::new(FabricCore {
                info: info.clone(),
                name_server,
                ns_port,
            }),
        }
    }

    /// Opens a domain (`fi_domain`): one engine endpoint with its reactor.
    ///
    /// # Errors
    /// The engine's open errors (`NoData` without a usable device, `Busy`
    /// when the native engine already has its endpoint in this process);
    /// `Inval` when an auto-progress thread cannot be pinned.
    pub fn domain(&self, info: &Info) -> Result<Domain> {
        Domain::open(self.core.clone(), info)
    }

    /// `fi_passive_ep`: not supported by the psm provider (no connection
    /// management).
    ///
    /// # Errors
    /// Always `NoSys`.
    pub fn passive_endpoint(&self, info: &Info) -> Result<Endpoint> {
        let _ = info;
        Err(unsupported("passive endpoints (fi_passive_ep)"))
    }

    /// The address of the name server this fabric registers with, if any.
    pub fn name_server_addr(&self) -> Option<std::net::SocketAddr> {
        self.core.name_server.as_ref().map(NameServer::local_addr)
    }

    /// The configuration the fabric was opened with.
    pub fn config(&self) -> &PsmConfig {
        self.core.config()
    }
}
