//! What discovery says about a multi-rail (`ofi_mrail`) answer: the
//! provider choice ([`Provider`]) and the rails ([`MrailAttr`]).
//!
//! The objects themselves live in [`crate::mrail`]; discovery only decides
//! what they will be: the rails from `FI_OFI_MRAIL_ADDR` (or the hints'
//! [`MrailConfig`]) resolved to addresses, the size policy table and the
//! fixed rail of this process (`local rank mod N`).

use std::fmt;
use std::net::Ipv4Addr;
use std::str::FromStr;

use crate::config::{MrailConfig, RailPolicyTable};
use crate::{Error, ErrorKind};

/// Which provider an info describes (libfabric's `prov_name`).
///
/// ```
/// use psmrail::fabric::Provider;
/// assert_eq!("ofi_mrail".parse::<Provider>().unwrap(), Provider::Mrail);
/// assert_eq!(Provider::Psm.name(), "psm");
/// assert!("verbs".parse::<Provider>().is_err());
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Provider {
    /// The psm provider (one PSM endpoint per domain).
    #[default]
    Psm,
    /// The multi-rail utility provider (`ofi_mrail`, fi_mrail(7)): one
    /// endpoint over several psm rails.
    Mrail,
}

impl Provider {
    /// libfabric's name: `psm` or `ofi_mrail`.
    pub const fn name(self) -> &'static str {
        match self {
            Provider::Psm => "psm",
            Provider::Mrail => "ofi_mrail",
        }
    }
}

impl fmt::Display for Provider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Provider {
    type Err = Error;

    /// `psm` or `ofi_mrail` (case-insensitive; `mrail` is accepted too).
    fn from_str(s: &str) -> Result<Self, Error> {
        match s.to_ascii_lowercase().as_str() {
            "psm" => Ok(Provider::Psm),
            "ofi_mrail" | "mrail" => Ok(Provider::Mrail),
            _ => Err(Error::new(
                ErrorKind::NoData,
                format!("no provider named {s:?}: psmrail offers \"psm\" and \"ofi_mrail\""),
            )),
        }
    }
}

/// One rail of a multi-rail info: the `FI_OFI_MRAIL_ADDR` item and what it
/// resolved to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RailAttr {
    /// The item as the user wrote it (`eth1`, `198.18.1.1`,
    /// `fi_sockaddr_in://198.18.1.1:7000`, ...).
    pub name: String,
    /// The IPv4 address the rail's soft-engine endpoint listens on and
    /// dials from; `None` on the native engine, whose rail is a PSM device.
    pub ip: Option<Ipv4Addr>,
    /// A fixed TCP port for the rail, when the item gave one.
    pub port: Option<u16>,
}

impl fmt::Display for RailAttr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name)?;
        match (self.ip, self.port) {
            (Some(ip), Some(port)) => write!(f, " ({ip}:{port})"),
            (Some(ip), None) => write!(f, " ({ip})"),
            _ => Ok(()),
        }
    }
}

/// The multi-rail part of an [`Info`](super::Info) whose provider is
/// [`Provider::Mrail`].
#[derive(Clone, Debug)]
pub struct MrailAttr {
    /// The rails, in rail order (an mrail address lists the rails' addresses
    /// in this order).
    pub rails: Vec<RailAttr>,
    /// This process's local rank (`MPI_LOCALRANKID`, `SLURM_LOCALID`, ...;
    /// 0 when no launcher says).
    pub local_rank: u32,
    /// The rail the fixed policy uses: `local_rank mod rails`.
    pub fixed_rail: usize,
    pub(crate) config: MrailConfig,
}

impl MrailAttr {
    /// The `FI_OFI_MRAIL_*` configuration in force.
    pub fn config(&self) -> &MrailConfig {
        &self.config
    }

    /// The size policy table (`FI_OFI_MRAIL_CONFIG`).
    pub fn policy_table(&self) -> &RailPolicyTable {
        self.config.policy_table()
    }
}

impl super::Info {
    /// The psm info that opens rail `i` of this multi-rail info: the same
    /// engine, progress and `FI_PSM_*` configuration, tagged messages only
    /// (the mrail provider's own traffic), and on the soft engine a
    /// listener on the rail's address that also dials from it, over TCP
    /// only, so the rail's traffic stays on the rail's link.
    pub(crate) fn rail_info(&self, i: usize) -> Option<super::Info> {
        let rail = self.mrail.as_ref()?.rails.get(i)?.clone();
        let mut info = self.clone();
        info.mrail = None;
        // The rails carry tagged messages, and the RMA the mrail endpoint
        // stripes over them (whose long transfers take tag bit 62).
        let rma = self
            .caps
            .intersection(super::mrail_discovery::MRAIL_RMA_CAPS);
        info.caps = crate::fabric::Caps::TAGGED | rma;
        info.tx_attr.caps = info.caps;
        info.rx_attr.caps = info.caps;
        info.inject_size = super::attr::INJECT_SIZE;
        let reserved = if rma.is_empty() {
            0
        } else {
            crate::fabric::RMA_BIT
        };
        info.mem_tag_format = crate::fabric::mem_tag_format(reserved);
        info.domain_attr.mr_key_size = crate::fabric::RAW_KEY_SIZE;
        info.domain_attr.cq_data_size = 4;
        info.ep_attr.protocol = "FI_PROTO_PSMX";
        info.fabric_attr.prov_name = Provider::Psm.name();
        info.fabric_attr.name = Provider::Psm.name();
        info.domain_attr.name = Provider::Psm.name();
        if let Some(ip) = rail.ip {
            info.soft.bind = ip;
            info.soft.port = rail.port.unwrap_or(0);
            info.soft.unix_sockets = false;
            info.soft.dial_from_bind = true;
        }
        Some(info)
    }
}
