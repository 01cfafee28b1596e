//! [`MrailFabric`]: the multi-rail fabric (`fi_fabric` of `ofi_mrail`),
//! one psm fabric per rail underneath.

use super::domain::MrailDomain;
use crate::fabric::{Fabric, Info};
use crate::{Error, ErrorKind, Result};

/// A multi-rail fabric: opened from an info whose provider is
/// [`Provider::Mrail`](crate::fabric::Provider::Mrail); a cheap `Clone` handle.
///
/// ```
/// use psmrail::config::{MrailConfig, PsmConfig, RailAddr};
/// use psmrail::fabric::{getinfo, EngineChoice, Hints, Provider};
/// use psmrail::mrail::MrailFabric;
///
/// let psm = PsmConfig::builder_from_env().unwrap().name_server(false)
///     .delay(std::time::Duration::ZERO).build().unwrap();
/// let rails = MrailConfig::builder()
///     .rails(RailAddr::parse_list("127.0.0.1,127.0.0.1").unwrap())
///     .build();
/// let hints = Hints::new()
///     .provider(Provider::Mrail)
///     .engine(EngineChoice::Soft)
///     .config(psm)
///     .mrail_config(rails);
/// let info = getinfo(Some(&hints))?.remove(0);
/// assert_eq!(info.fabric_attr.prov_name, "ofi_mrail");
/// assert_eq!(info.mrail().unwrap().rails.len(), 2);
/// let fabric = MrailFabric::open(&info)?;
/// let domain = fabric.domain(&info)?;
/// assert_eq!(domain.rails(), 2);
/// # Ok::<(), psmrail::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct MrailFabric {
    info: Info,
    rails: Vec<Fabric>,
}

impl MrailFabric {
    /// Opens the fabric (`fi_fabric`): one psm fabric per rail, without a
    /// name server (mrail peers exchange addresses out of band, as in C).
    ///
    /// # Errors
    /// `Inval` when `info` does not describe the multi-rail provider.
    pub fn open(info: &Info) -> Result<MrailFabric> {
        let attr = mrail_attr(info)?;
        let rails = (0..attr.rails.len())
            .map(|i| rail_info(info, i).map(|ri| Fabric::open_unnamed(&ri)))
            .collect::<Result<Vec<_>>>()?;
        Ok(MrailFabric {
            info: info.clone(),
            rails,
        })
    }

    /// Opens a domain (`fi_domain`): one psm domain per rail, all
    /// progressed by one reactor.
    ///
    /// # Errors
    /// `Inval` for an info that is not multi-rail; the rails' domain
    /// errors (a rail address that cannot be bound, `Busy` on the native
    /// engine when the process already has its endpoint).
    pub fn domain(&self, info: &Info) -> Result<MrailDomain> {
        mrail_attr(info)?;
        MrailDomain::open(self, info)
    }

    /// The info the fabric was opened with.
    pub fn info(&self) -> &Info {
        &self.info
    }

    /// The rails' psm fabrics.
    pub(crate) fn rail_fabrics(&self) -> &[Fabric] {
        &self.rails
    }
}

/// The multi-rail part of `info`, or `Inval`.
pub(crate) fn mrail_attr(info: &Info) -> Result<&crate::fabric::MrailAttr> {
    info.mrail().ok_or_else(|| {
        Error::new(
            ErrorKind::Inval,
            format!(
                "this info describes the {} provider, not ofi_mrail: ask getinfo for \
                 Provider::Mrail (prov_name \"ofi_mrail\")",
                info.provider()
            ),
        )
    })
}

/// Rail `i`'s psm info.
pub(crate) fn rail_info(info: &Info, i: usize) -> Result<Info> {
    info.rail_info(i).ok_or_else(|| {
        Error::new(
            ErrorKind::Inval,
            format!("ofi_mrail: the info has no rail {i}"),
        )
    })
}
