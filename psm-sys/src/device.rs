//! Device preflight: decide, before `psm_ep_open`, whether opening can work.
//!
//! Measured on this machine (no TrueScale or Omni-Path hardware):
//!
//! * compat build, `PSM2_DEVICES` unset or empty (the default list is
//!   `self,shm,hfi`), no `/dev/hfi1_*`: `psm_ep_open` **segfaults** inside
//!   `psm2_ep_num_devunits`. The compat build reads `PSM2_DEVICES` only;
//!   `PSM_DEVICES=self,shm` does not help.
//! * compat build, `PSM2_DEVICES=self,shm` (or `self`, or `shm`): opens.
//! * TrueScale build, `PSM_DEVICES` unset (default `self,shm,ipath`), no
//!   `/dev/ipath`: `psm_ep_open` waits 30 s for the device, then fails with 23.
//! * TrueScale build, `shm` enabled: `psm_ep_open` segfaults (a misaligned
//!   `movaps` store in that build's shared-memory setup); `PSM_DEVICES=self`
//!   opens.
//!
//! So an endpoint may be opened when the device list names no hardware device
//! (`self`, `shm`/`shmem`/`amsh` only), or when a hardware device node exists
//! (`/dev/hfi1_N` for the compat build, `/dev/ipath` or `/dev/ipathN` for
//! TrueScale, as the C provider checked). On TrueScale the `shm` device is
//! refused unless `PSMRAIL_TRUESCALE_SHM=1` (the variable takes `1` or `0`;
//! anything else is an error, see [`crate::env::truescale_shm`]).
//!
//! Device names are parsed as PSM parses them: runs of ASCII letters,
//! case-insensitive, anything else separates, at most the first three count.

use std::path::PathBuf;

use crate::error::{Error, NoDeviceError};
use crate::library::PsmBuild;

/// Device list variable read by the compat build (libpsm2).
pub const PSM2_DEVICES: &str = "PSM2_DEVICES";
/// Device list variable read by the TrueScale build.
pub const PSM_DEVICES: &str = "PSM_DEVICES";
/// Variable that lets the compat build open several endpoints per process.
pub const PSM2_MULTI_EP: &str = "PSM2_MULTI_EP";
/// Set to `1` to open TrueScale endpoints with the `shm` device anyway.
pub const PSMRAIL_TRUESCALE_SHM: &str = "PSMRAIL_TRUESCALE_SHM";
/// PSM uses at most this many devices from the list (`PTL_MAX_INIT`).
pub const MAX_DEVICES: usize = 3;

/// A PSM transport device ("PTL").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Device {
    /// Loopback to the own endpoint (`self`).
    SelfLoop,
    /// Shared memory between processes of one node (`shm`, `shmem`, `amsh`).
    Shm,
    /// The adapter (`hfi`, `ipath`, `ips`): needs hardware.
    Hardware,
}

impl Device {
    /// The device for a name from a device list, if PSM knows it.
    pub fn from_name(name: &str) -> Option<Device> {
        match name.to_ascii_lowercase().as_str() {
            "self" => Some(Device::SelfLoop),
            "shm" | "shmem" | "amsh" => Some(Device::Shm),
            "hfi" | "ipath" | "ips" => Some(Device::Hardware),
            _ => None,
        }
    }
}

/// Parses a device list the way PSM does. Returns the first unknown name as
/// the error.
pub fn parse_device_list(list: &str) -> Result<Vec<Device>, String> {
    let mut devices = Vec::new();
    for name in list
        .split(|c: char| !c.is_ascii_alphabetic())
        .filter(|n| !n.is_empty())
    {
        if devices.len() == MAX_DEVICES {
            break;
        }
        devices.push(Device::from_name(name).ok_or_else(|| name.to_string())?);
    }
    Ok(devices)
}

/// The device list variable a build reads.
pub fn device_variable(build: PsmBuild) -> &'static str {
    match build {
        PsmBuild::TrueScale => PSM_DEVICES,
        PsmBuild::Psm2Compat => PSM2_DEVICES,
    }
}

/// Hardware device nodes present for a build (`/dev/hfi1_N`, or `/dev/ipath`
/// and `/dev/ipathN`).
pub fn hardware_nodes(build: PsmBuild) -> Vec<PathBuf> {
    let Ok(dir) = std::fs::read_dir("/dev") else {
        return Vec::new();
    };
    let mut nodes: Vec<PathBuf> = dir
        .filter_map(|e| e.ok())
        .filter(|e| {
            e.file_name()
                .to_str()
                .is_some_and(|n| is_hardware_node(build, n))
        })
        .map(|e| e.path())
        .collect();
    nodes.sort();
    nodes
}

/// Whether `/dev/<name>` is a hardware node for `build`.
pub fn is_hardware_node(build: PsmBuild, name: &str) -> bool {
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    match build {
        PsmBuild::Psm2Compat => name.strip_prefix("hfi1_").is_some_and(digits),
        PsmBuild::TrueScale => name
            .strip_prefix("ipath")
            .is_some_and(|rest| rest.is_empty() || digits(rest)),
    }
}

/// The device configuration an endpoint would be opened with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceConfig {
    /// The build whose rules apply.
    pub build: PsmBuild,
    /// The variable holding the list.
    pub variable: &'static str,
    /// Its value, if set.
    pub value: Option<String>,
    /// The devices PSM will use (the default list when unset or empty).
    pub devices: Vec<Device>,
    /// Whether the list came from the environment.
    pub explicit: bool,
    /// Hardware device nodes found.
    pub hardware_nodes: Vec<PathBuf>,
}

impl DeviceConfig {
    /// Reads the environment and `/dev` for `build` and applies the rules.
    ///
    /// # Errors
    /// [`Error::Env`] when `PSMRAIL_TRUESCALE_SHM` is neither `1` nor `0`;
    /// [`Error::NoDevice`] when no device is usable.
    pub fn from_env(build: PsmBuild) -> Result<DeviceConfig, Error> {
        let variable = device_variable(build);
        let value = std::env::var(variable).ok();
        let allow_truescale_shm =
            crate::env::truescale_shm(std::env::var_os(PSMRAIL_TRUESCALE_SHM).as_deref())?;
        Ok(Self::evaluate(
            build,
            value,
            hardware_nodes(build),
            allow_truescale_shm,
        )?)
    }

    /// Applies the rules to explicit inputs (pure; used by the unit tests).
    pub fn evaluate(
        build: PsmBuild,
        value: Option<String>,
        hardware_nodes: Vec<PathBuf>,
        allow_truescale_shm: bool,
    ) -> Result<DeviceConfig, NoDeviceError> {
        let variable = device_variable(build);
        let refuse = |reason: String| NoDeviceError {
            build,
            variable,
            value: value.clone(),
            reason,
        };
        let set = value.as_deref().filter(|v| !v.trim().is_empty());
        let (devices, explicit) = match set {
            None => (vec![Device::SelfLoop, Device::Shm, Device::Hardware], false),
            Some(list) => {
                let devices = parse_device_list(list).map_err(|name| {
                    refuse(format!(
                        "unknown device {name:?} (PSM knows self, shm/shmem/amsh, hfi/ipath/ips)"
                    ))
                })?;
                if devices.is_empty() {
                    return Err(refuse("the list names no device".into()));
                }
                (devices, true)
            }
        };
        if devices.contains(&Device::Hardware) && hardware_nodes.is_empty() {
            let (list, node, consequence, fix) = match build {
                PsmBuild::Psm2Compat => (
                    "self,shm,hfi",
                    "/dev/hfi1_N",
                    "psm_ep_open would crash (segfault in psm2_ep_num_devunits)",
                    "for shared memory on one node set PSM2_DEVICES=self,shm",
                ),
                PsmBuild::TrueScale => (
                    "self,shm,ipath",
                    "/dev/ipath or /dev/ipathN",
                    "psm_ep_open would wait 30 s for the device and fail",
                    "for in-process loopback set PSM_DEVICES=self",
                ),
            };
            let which = if explicit {
                "the list includes the hardware device".to_string()
            } else {
                format!("unset, so the default list {list} includes the hardware device")
            };
            return Err(refuse(format!(
                "{which}, but no {node} exists; {consequence}; {fix}"
            )));
        }
        if build == PsmBuild::TrueScale && devices.contains(&Device::Shm) && !allow_truescale_shm {
            return Err(refuse(format!(
                "the TrueScale build crashes in psm_ep_open when the shm device is enabled \
                 (misaligned SSE store in that build); use PSM_DEVICES=self, or the compat build \
                 (libpsm2-2-compat) for shared memory, or set {PSMRAIL_TRUESCALE_SHM}=1 to try anyway"
            )));
        }
        Ok(DeviceConfig {
            build,
            variable,
            value,
            devices,
            explicit,
            hardware_nodes,
        })
    }

    /// Whether `device` will be used.
    pub fn has(&self, device: Device) -> bool {
        self.devices.contains(&device)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_like_psm() {
        use Device::*;
        assert_eq!(parse_device_list("self,shm"), Ok(vec![SelfLoop, Shm]));
        assert_eq!(parse_device_list(" SELF ; shmem "), Ok(vec![SelfLoop, Shm]));
        assert_eq!(parse_device_list("self1shm"), Ok(vec![SelfLoop, Shm]));
        assert_eq!(
            parse_device_list("self,shm,hfi,bogus"),
            Ok(vec![SelfLoop, Shm, Hardware])
        );
        assert_eq!(parse_device_list("ipath"), Ok(vec![Hardware]));
        assert_eq!(parse_device_list("self,tcp"), Err("tcp".to_string()));
        assert_eq!(parse_device_list(",,"), Ok(vec![]));
    }

    #[test]
    fn hardware_node_names() {
        assert!(is_hardware_node(PsmBuild::Psm2Compat, "hfi1_0"));
        assert!(is_hardware_node(PsmBuild::Psm2Compat, "hfi1_12"));
        assert!(!is_hardware_node(PsmBuild::Psm2Compat, "hfi1_"));
        assert!(!is_hardware_node(PsmBuild::Psm2Compat, "hfi1"));
        assert!(!is_hardware_node(PsmBuild::Psm2Compat, "ipath"));
        assert!(is_hardware_node(PsmBuild::TrueScale, "ipath"));
        assert!(is_hardware_node(PsmBuild::TrueScale, "ipath0"));
        assert!(!is_hardware_node(PsmBuild::TrueScale, "ipath_sma"));
    }

    fn eval(build: PsmBuild, v: Option<&str>, hw: bool) -> Result<DeviceConfig, NoDeviceError> {
        let nodes = if hw {
            vec![PathBuf::from("/dev/hfi1_0")]
        } else {
            vec![]
        };
        DeviceConfig::evaluate(build, v.map(str::to_string), nodes, false)
    }

    #[test]
    fn compat_rules() {
        let b = PsmBuild::Psm2Compat;
        let e = eval(b, None, false).unwrap_err();
        assert!(e.to_string().contains("no PSM device"), "{e}");
        assert!(e.to_string().contains("PSM2_DEVICES=self,shm"), "{e}");
        assert!(eval(b, Some(""), false).is_err());
        assert!(eval(b, Some("self,shm,hfi"), false).is_err());
        assert!(eval(b, Some(","), false).is_err());
        assert!(eval(b, Some("self,udp"), false).is_err());
        let ok = eval(b, Some("self,shm"), false).unwrap();
        assert!(ok.explicit && ok.has(Device::SelfLoop) && ok.has(Device::Shm));
        assert!(eval(b, Some("shm"), false).is_ok());
        let hw = eval(b, None, true).unwrap();
        assert!(!hw.explicit && hw.has(Device::Hardware));
    }

    #[test]
    fn truescale_rules() {
        let b = PsmBuild::TrueScale;
        assert!(eval(b, None, false)
            .unwrap_err()
            .to_string()
            .contains("PSM_DEVICES=self"));
        assert!(eval(b, Some("self"), false).is_ok());
        let shm = eval(b, Some("self,shm"), false).unwrap_err();
        assert!(shm.to_string().contains("PSMRAIL_TRUESCALE_SHM"), "{shm}");
        let allowed = DeviceConfig::evaluate(b, Some("self,shm".into()), vec![], true);
        assert!(allowed.is_ok());
    }
}
