//! Capability and mode bits, endpoint / progress / AV types, and the engine
//! choice: the vocabulary of discovery ([`getinfo`](super::getinfo)) and of
//! the capability rules checked when endpoints open ([`slots`](super::slots)).
//!
//! The bit values are libfabric's own (`include/rdma/fabric.h`), so a value
//! printed by a C program means the same thing here and
//! [`Caps::from_bits_retain`] accepts a C `uint64_t` as is.
//! [`Display`](std::fmt::Display) prints the `fi_tostr` style
//! (`FI_MSG | FI_TAGGED`); [`FromStr`] reads it back (also `msg,tagged`).

use std::fmt;
use std::str::FromStr;

use bitflags::bitflags;

use crate::{Error, ErrorKind, Result};

bitflags! {
    /// libfabric capability bits (`fi_info::caps`), with libfabric's values.
    ///
    /// ```
    /// use psmrail::fabric::Caps;
    /// let caps = Caps::TAGGED | Caps::SEND;
    /// assert_eq!(caps.bits(), (1 << 3) | (1 << 11));
    /// assert_eq!(caps.to_string(), "FI_TAGGED | FI_SEND");
    /// assert_eq!("fi_tagged|send".parse::<Caps>().unwrap(), caps);
    /// ```
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
    pub struct Caps: u64 {
        /// `FI_MSG`: untagged messages.
        const MSG = 1 << 1;
        /// `FI_RMA`: remote memory access.
        const RMA = 1 << 2;
        /// `FI_TAGGED`: tagged messages.
        const TAGGED = 1 << 3;
        /// `FI_ATOMIC` (`FI_ATOMICS`): remote atomics.
        const ATOMIC = 1 << 4;
        /// `FI_MULTICAST` (not supported by psm).
        const MULTICAST = 1 << 5;
        /// `FI_COLLECTIVE` (not supported by psm).
        const COLLECTIVE = 1 << 6;
        /// `FI_READ`: initiates RMA reads / fetching atomics.
        const READ = 1 << 8;
        /// `FI_WRITE`: initiates RMA writes / atomics.
        const WRITE = 1 << 9;
        /// `FI_RECV`: receives messages.
        const RECV = 1 << 10;
        /// `FI_SEND`: sends messages.
        const SEND = 1 << 11;
        /// `FI_REMOTE_READ`: target of remote reads.
        const REMOTE_READ = 1 << 12;
        /// `FI_REMOTE_WRITE`: target of remote writes.
        const REMOTE_WRITE = 1 << 13;
        /// `FI_MULTI_RECV`: one buffer for several untagged receives.
        const MULTI_RECV = 1 << 16;
        /// `FI_REMOTE_CQ_DATA` (not supported by psm).
        const REMOTE_CQ_DATA = 1 << 17;
        /// `FI_TRIGGER`: counter-triggered operations.
        const TRIGGER = 1 << 20;
        /// `FI_FENCE` (not supported by psm).
        const FENCE = 1 << 21;
        /// `FI_HMEM` (not supported by psm).
        const HMEM = 1 << 47;
        /// `FI_VARIABLE_MSG` (not supported by psm).
        const VARIABLE_MSG = 1 << 48;
        /// `FI_RMA_PMEM` (not supported by psm).
        const RMA_PMEM = 1 << 49;
        /// `FI_SOURCE_ERR` (not supported by psm).
        const SOURCE_ERR = 1 << 50;
        /// `FI_LOCAL_COMM`: talks to endpoints on the same node (a domain cap).
        const LOCAL_COMM = 1 << 51;
        /// `FI_REMOTE_COMM`: talks to endpoints on other nodes (a domain cap).
        const REMOTE_COMM = 1 << 52;
        /// `FI_SHARED_AV` (rejected by psm).
        const SHARED_AV = 1 << 53;
        /// `FI_RMA_EVENT`: RMA targets generate completion events.
        const RMA_EVENT = 1 << 56;
        /// `FI_SOURCE`: report the source of received messages.
        const SOURCE = 1 << 57;
        /// `FI_NAMED_RX_CTX` (not supported by psm).
        const NAMED_RX_CTX = 1 << 58;
        /// `FI_DIRECTED_RECV`: untagged receives from one source only.
        const DIRECTED_RECV = 1 << 59;
    }
}

/// The six direction bits that refine the primary capabilities; the
/// domain-subset check of an endpoint open ignores them, as C's
/// `psmx_domain_check_features` does.
pub(crate) const DIRECTION_BITS: Caps = Caps::READ
    .union(Caps::WRITE)
    .union(Caps::RECV)
    .union(Caps::SEND)
    .union(Caps::REMOTE_READ)
    .union(Caps::REMOTE_WRITE);

impl Caps {
    /// Whether an endpoint with these caps receives tagged messages: TAGGED
    /// with `FI_RECV`, or with neither `FI_SEND` nor `FI_RECV` (libfabric's
    /// `ofi_recv_allowed`, which the C provider uses).
    ///
    /// ```
    /// use psmrail::fabric::Caps;
    /// assert!(Caps::TAGGED.receives_tagged());
    /// assert!((Caps::TAGGED | Caps::RECV).receives_tagged());
    /// assert!(!(Caps::TAGGED | Caps::SEND).receives_tagged());
    /// assert!(!Caps::MSG.receives_tagged());
    /// ```
    pub fn receives_tagged(self) -> bool {
        self.contains(Caps::TAGGED) && self.receive_allowed()
    }

    /// Whether an endpoint with these caps receives untagged messages (MSG
    /// with receive allowed, as for [`receives_tagged`](Self::receives_tagged)).
    ///
    /// ```
    /// use psmrail::fabric::Caps;
    /// assert!((Caps::MSG | Caps::SEND | Caps::RECV).receives_msg());
    /// assert!(!(Caps::MSG | Caps::SEND).receives_msg());
    /// ```
    pub fn receives_msg(self) -> bool {
        self.contains(Caps::MSG) && self.receive_allowed()
    }

    /// Whether an endpoint with these caps is the target of remote RMA: RMA
    /// with `FI_REMOTE_READ` or `FI_REMOTE_WRITE`, or with none of the four
    /// RMA direction bits (libfabric's `ofi_rma_target_allowed`, which the C
    /// provider uses).
    ///
    /// ```
    /// use psmrail::fabric::Caps;
    /// assert!(Caps::RMA.rma_target());
    /// assert!((Caps::RMA | Caps::READ | Caps::REMOTE_WRITE).rma_target());
    /// assert!(!(Caps::RMA | Caps::READ | Caps::WRITE).rma_target());
    /// ```
    pub fn rma_target(self) -> bool {
        self.contains(Caps::RMA) && self.target_allowed()
    }

    /// Whether an endpoint with these caps is the target of remote atomics
    /// (ATOMIC with target allowed, as for [`rma_target`](Self::rma_target)).
    ///
    /// ```
    /// use psmrail::fabric::Caps;
    /// assert!((Caps::ATOMIC | Caps::REMOTE_READ).atomic_target());
    /// assert!(!(Caps::ATOMIC | Caps::WRITE).atomic_target());
    /// ```
    pub fn atomic_target(self) -> bool {
        self.contains(Caps::ATOMIC) && self.target_allowed()
    }

    /// Whether the endpoint may send messages (MSG or TAGGED, and `FI_SEND`
    /// or neither direction bit): libfabric's `ofi_send_allowed`.
    pub fn sends(self) -> bool {
        self.intersects(Caps::MSG | Caps::TAGGED)
            && (self.contains(Caps::SEND) || !self.contains(Caps::RECV))
    }

    /// Whether the endpoint may initiate RMA or atomics (`FI_READ` /
    /// `FI_WRITE`, or none of the four RMA direction bits).
    pub fn initiates_rma(self) -> bool {
        self.intersects(Caps::RMA | Caps::ATOMIC)
            && (self.intersects(Caps::READ | Caps::WRITE)
                || !self.intersects(Caps::REMOTE_READ | Caps::REMOTE_WRITE))
    }

    fn receive_allowed(self) -> bool {
        self.contains(Caps::RECV) || !self.contains(Caps::SEND)
    }

    fn target_allowed(self) -> bool {
        self.intersects(Caps::REMOTE_READ | Caps::REMOTE_WRITE)
            || !self.intersects(Caps::READ | Caps::WRITE)
    }
}

/// `FI_` names of the capability bits, in bit order.
const CAP_NAMES: [(Caps, &str); 28] = [
    (Caps::MSG, "FI_MSG"),
    (Caps::RMA, "FI_RMA"),
    (Caps::TAGGED, "FI_TAGGED"),
    (Caps::ATOMIC, "FI_ATOMIC"),
    (Caps::MULTICAST, "FI_MULTICAST"),
    (Caps::COLLECTIVE, "FI_COLLECTIVE"),
    (Caps::READ, "FI_READ"),
    (Caps::WRITE, "FI_WRITE"),
    (Caps::RECV, "FI_RECV"),
    (Caps::SEND, "FI_SEND"),
    (Caps::REMOTE_READ, "FI_REMOTE_READ"),
    (Caps::REMOTE_WRITE, "FI_REMOTE_WRITE"),
    (Caps::MULTI_RECV, "FI_MULTI_RECV"),
    (Caps::REMOTE_CQ_DATA, "FI_REMOTE_CQ_DATA"),
    (Caps::TRIGGER, "FI_TRIGGER"),
    (Caps::FENCE, "FI_FENCE"),
    (Caps::HMEM, "FI_HMEM"),
    (Caps::VARIABLE_MSG, "FI_VARIABLE_MSG"),
    (Caps::RMA_PMEM, "FI_RMA_PMEM"),
    (Caps::SOURCE_ERR, "FI_SOURCE_ERR"),
    (Caps::LOCAL_COMM, "FI_LOCAL_COMM"),
    (Caps::REMOTE_COMM, "FI_REMOTE_COMM"),
    (Caps::SHARED_AV, "FI_SHARED_AV"),
    (Caps::RMA_EVENT, "FI_RMA_EVENT"),
    (Caps::SOURCE, "FI_SOURCE"),
    (Caps::NAMED_RX_CTX, "FI_NAMED_RX_CTX"),
    (Caps::DIRECTED_RECV, "FI_DIRECTED_RECV"),
    // libfabric's alias, accepted when parsing; never printed (FI_ATOMIC
    // comes first in the table).
    (Caps::ATOMIC, "FI_ATOMICS"),
];

bitflags! {
    /// libfabric mode bits (`fi_info::mode`): requirements the provider puts
    /// on the application. psm asks only for `FI_CONTEXT`, and only when
    /// tagged or MQ-carried untagged messages are in use.
    ///
    /// ```
    /// use psmrail::fabric::Mode;
    /// assert_eq!(Mode::CONTEXT.bits(), 1 << 59);
    /// assert_eq!(Mode::CONTEXT.to_string(), "FI_CONTEXT");
    /// ```
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
    pub struct Mode: u64 {
        /// `FI_CONTEXT`: operations carry a `struct fi_context` the
        /// provider may use until completion.
        const CONTEXT = 1 << 59;
        /// `FI_MSG_PREFIX`.
        const MSG_PREFIX = 1 << 58;
        /// `FI_ASYNC_IOV`.
        const ASYNC_IOV = 1 << 57;
        /// `FI_RX_CQ_DATA`.
        const RX_CQ_DATA = 1 << 56;
        /// `FI_LOCAL_MR`.
        const LOCAL_MR = 1 << 55;
        /// `FI_NOTIFY_FLAGS_ONLY`.
        const NOTIFY_FLAGS_ONLY = 1 << 54;
        /// `FI_RESTRICTED_COMP`.
        const RESTRICTED_COMP = 1 << 53;
        /// `FI_CONTEXT2`.
        const CONTEXT2 = 1 << 52;
        /// `FI_BUFFERED_RECV`.
        const BUFFERED_RECV = 1 << 51;
    }
}

/// `FI_` names of the mode bits, in bit order.
const MODE_NAMES: [(Mode, &str); 9] = [
    (Mode::BUFFERED_RECV, "FI_BUFFERED_RECV"),
    (Mode::CONTEXT2, "FI_CONTEXT2"),
    (Mode::RESTRICTED_COMP, "FI_RESTRICTED_COMP"),
    (Mode::NOTIFY_FLAGS_ONLY, "FI_NOTIFY_FLAGS_ONLY"),
    (Mode::LOCAL_MR, "FI_LOCAL_MR"),
    (Mode::RX_CQ_DATA, "FI_RX_CQ_DATA"),
    (Mode::ASYNC_IOV, "FI_ASYNC_IOV"),
    (Mode::MSG_PREFIX, "FI_MSG_PREFIX"),
    (Mode::CONTEXT, "FI_CONTEXT"),
];

/// Writes the named bits of `bits` joined by `" | "`, then any unnamed
/// remainder in hex; `0` when nothing is set.
fn write_bits(f: &mut fmt::Formatter<'_>, bits: u64, names: &[(u64, &str)]) -> fmt::Result {
    let mut left = bits;
    let mut first = true;
    let mut sep = |f: &mut fmt::Formatter<'_>| {
        if first {
            first = false;
            Ok(())
        } else {
            f.write_str(" | ")
        }
    };
    for &(bit, name) in names {
        if left & bit != 0 {
            sep(f)?;
            f.write_str(name)?;
            left &= !bit;
        }
    }
    if left != 0 {
        sep(f)?;
        write!(f, "{left:#x}")?;
    }
    if bits == 0 {
        f.write_str("0")?;
    }
    Ok(())
}

/// Parses `FI_A | FI_B`, `a,b`, `A b` (names with or without `FI_`,
/// case-insensitive; `|`, `,` and whitespace separate; `0` is empty).
fn parse_bits(text: &str, names: &[(u64, &str)], what: &str) -> Result<u64> {
    let mut bits = 0;
    for item in text
        .split(|c: char| c == '|' || c == ',' || c.is_whitespace())
        .filter(|s| !s.is_empty())
    {
        if item == "0" {
            continue;
        }
        let bare = strip_fi(item);
        let bit = names
            .iter()
            .find(|(_, name)| strip_fi(name).eq_ignore_ascii_case(bare))
            .map(|&(bit, _)| bit)
            .ok_or_else(|| {
                Error::new(
                    ErrorKind::Inval,
                    format!("{item:?} in {text:?} is not a libfabric {what} name"),
                )
            })?;
        bits |= bit;
    }
    Ok(bits)
}

fn strip_fi(name: &str) -> &str {
    match name.get(..3) {
        Some(p) if p.eq_ignore_ascii_case("FI_") => &name[3..],
        _ => name,
    }
}

fn cap_table() -> [(u64, &'static str); 28] {
    CAP_NAMES.map(|(c, n)| (c.bits(), n))
}

fn mode_table() -> [(u64, &'static str); 9] {
    MODE_NAMES.map(|(m, n)| (m.bits(), n))
}

impl fmt::Display for Caps {
    /// `fi_tostr` style: `FI_MSG | FI_TAGGED`, `0` when empty.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_bits(f, self.bits(), &cap_table())
    }
}

impl FromStr for Caps {
    type Err = Error;

    /// Reads capability names (see [`Caps`]); an unknown name is `Inval`.
    fn from_str(text: &str) -> Result<Caps> {
        parse_bits(text, &cap_table(), "capability").map(Caps::from_bits_retain)
    }
}

impl fmt::Display for Mode {
    /// `fi_tostr` style: `FI_CONTEXT`, `0` when empty.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_bits(f, self.bits(), &mode_table())
    }
}

impl FromStr for Mode {
    type Err = Error;

    /// Reads mode names (see [`Mode`]); an unknown name is `Inval`.
    fn from_str(text: &str) -> Result<Mode> {
        parse_bits(text, &mode_table(), "mode").map(Mode::from_bits_retain)
    }
}

/// Defines a plain enum with its `FI_` names, `Display` and `FromStr`.
macro_rules! named_enum {
    (
        $(#[$meta:meta])*
        pub enum $name:ident ($what:literal) {
            $( $(#[$vmeta:meta])* $variant:ident = $fi:literal, )+
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
        pub enum $name {
            $( $(#[$vmeta])* $variant, )+
        }

        impl $name {
            /// Every value, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            /// The libfabric constant name.
            pub const fn fi_name(self) -> &'static str {
                match self { $($name::$variant => $fi,)+ }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.fi_name())
            }
        }

        impl FromStr for $name {
            type Err = Error;

            /// The libfabric name or its last word, case-insensitive
            /// (`FI_EP_RDM`, `rdm`); anything else is `Inval`.
            fn from_str(text: &str) -> Result<$name> {
                $name::ALL
                    .iter()
                    .copied()
                    .find(|v| {
                        let full = v.fi_name();
                        let short = full.rsplit('_').next().unwrap_or(full);
                        full.eq_ignore_ascii_case(text) || short.eq_ignore_ascii_case(text)
                    })
                    .ok_or_else(|| {
                        let names: Vec<&str> = $name::ALL.iter().map(|v| v.fi_name()).collect();
                        Error::new(
                            ErrorKind::Inval,
                            format!("{text:?} is not {}: expected one of {}", $what, names.join(", ")),
                        )
                    })
            }
        }
    };
}

named_enum! {
    /// Endpoint type (`fi_ep_attr::type`). psm accepts `Unspec`, `Rdm` and
    /// `Dgram`; a DGRAM endpoint is as reliable as an RDM one (ARCHITECTURE.md,
    /// "Kept as in C"; reliability is allowed by the DGRAM contract).
    ///
    /// ```
    /// use psmrail::fabric::EpType;
    /// assert_eq!("rdm".parse::<EpType>().unwrap(), EpType::Rdm);
    /// assert_eq!(EpType::Dgram.to_string(), "FI_EP_DGRAM");
    /// ```
    pub enum EpType ("an endpoint type") {
        /// `FI_EP_UNSPEC`: any type (psm answers RDM).
        #[default]
        Unspec = "FI_EP_UNSPEC",
        /// `FI_EP_RDM`: reliable datagrams.
        Rdm = "FI_EP_RDM",
        /// `FI_EP_DGRAM`: datagrams (reliable here).
        Dgram = "FI_EP_DGRAM",
        /// `FI_EP_MSG`: connected endpoints (not supported by psm).
        Msg = "FI_EP_MSG",
    }
}

named_enum! {
    /// Progress model (`fi_domain_attr::data_progress`). Manual is psm's
    /// default (fi_psm(7): "The psm provider requires manual progress");
    /// Auto runs a progress thread (`FI_PSM_PROG_*`).
    ///
    /// ```
    /// use psmrail::fabric::ProgressKind;
    /// assert_eq!("AUTO".parse::<ProgressKind>().unwrap(), ProgressKind::Auto);
    /// ```
    pub enum ProgressKind ("a progress model") {
        /// `FI_PROGRESS_UNSPEC`: the provider's default (manual).
        #[default]
        Unspec = "FI_PROGRESS_UNSPEC",
        /// `FI_PROGRESS_MANUAL`: progress happens inside the application's calls.
        Manual = "FI_PROGRESS_MANUAL",
        /// `FI_PROGRESS_AUTO`: a progress thread.
        Auto = "FI_PROGRESS_AUTO",
    }
}

named_enum! {
    /// Address vector type (`fi_domain_attr::av_type`).
    ///
    /// ```
    /// use psmrail::fabric::AvType;
    /// assert_eq!("table".parse::<AvType>().unwrap(), AvType::Table);
    /// ```
    pub enum AvType ("an address vector type") {
        /// `FI_AV_UNSPEC`: chosen when the AV opens (MAP).
        #[default]
        Unspec = "FI_AV_UNSPEC",
        /// `FI_AV_MAP`.
        Map = "FI_AV_MAP",
        /// `FI_AV_TABLE`.
        Table = "FI_AV_TABLE",
    }
}

named_enum! {
    /// Threading model (`fi_domain_attr::threading`). psm's default is
    /// `Completion`; `Safe` is rejected, as in C (`prov/psm/src/psmx_init.c`).
    pub enum Threading ("a threading model") {
        /// `FI_THREAD_UNSPEC`: the provider's default (COMPLETION).
        #[default]
        Unspec = "FI_THREAD_UNSPEC",
        /// `FI_THREAD_SAFE` (rejected by psm).
        Safe = "FI_THREAD_SAFE",
        /// `FI_THREAD_FID`.
        Fid = "FI_THREAD_FID",
        /// `FI_THREAD_DOMAIN`.
        Domain = "FI_THREAD_DOMAIN",
        /// `FI_THREAD_COMPLETION`.
        Completion = "FI_THREAD_COMPLETION",
        /// `FI_THREAD_ENDPOINT`.
        Endpoint = "FI_THREAD_ENDPOINT",
    }
}

/// Which engine carries the queues: real PSM or psmrail's soft engine.
///
/// When the hints do not choose, `getinfo` reads `PSMRAIL_ENGINE`
/// (`auto`, `native` or `soft`, case-insensitive); unset means `Auto`.
///
/// ```
/// use psmrail::fabric::EngineChoice;
/// assert_eq!("Native".parse::<EngineChoice>().unwrap(), EngineChoice::Native);
/// assert!("psm".parse::<EngineChoice>().is_err());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum EngineChoice {
    /// Native when libpsm loads and a device is usable, else soft.
    #[default]
    Auto,
    /// Real PSM only; `getinfo` fails (`NoData`, saying why) without it.
    Native,
    /// The soft engine only.
    Soft,
}

impl EngineChoice {
    /// The spelling `PSMRAIL_ENGINE` uses.
    pub const fn name(self) -> &'static str {
        match self {
            EngineChoice::Auto => "auto",
            EngineChoice::Native => "native",
            EngineChoice::Soft => "soft",
        }
    }
}

impl fmt::Display for EngineChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for EngineChoice {
    type Err = Error;

    /// `auto`, `native` or `soft`, case-insensitive; anything else
    /// (including surrounding spaces) is `Inval`.
    fn from_str(text: &str) -> Result<EngineChoice> {
        [EngineChoice::Auto, EngineChoice::Native, EngineChoice::Soft]
            .into_iter()
            .find(|c| c.name().eq_ignore_ascii_case(text))
            .ok_or_else(|| {
                Error::new(
                    ErrorKind::Inval,
                    format!("{text:?} is not an engine: expected auto, native or soft"),
                )
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bit_values_are_libfabrics() {
        // fabric.h, checked one by one.
        let expect: [(Caps, u32); 27] = [
            (Caps::MSG, 1),
            (Caps::RMA, 2),
            (Caps::TAGGED, 3),
            (Caps::ATOMIC, 4),
            (Caps::MULTICAST, 5),
            (Caps::COLLECTIVE, 6),
            (Caps::READ, 8),
            (Caps::WRITE, 9),
            (Caps::RECV, 10),
            (Caps::SEND, 11),
            (Caps::REMOTE_READ, 12),
            (Caps::REMOTE_WRITE, 13),
            (Caps::MULTI_RECV, 16),
            (Caps::REMOTE_CQ_DATA, 17),
            (Caps::TRIGGER, 20),
            (Caps::FENCE, 21),
            (Caps::HMEM, 47),
            (Caps::VARIABLE_MSG, 48),
            (Caps::RMA_PMEM, 49),
            (Caps::SOURCE_ERR, 50),
            (Caps::LOCAL_COMM, 51),
            (Caps::REMOTE_COMM, 52),
            (Caps::SHARED_AV, 53),
            (Caps::RMA_EVENT, 56),
            (Caps::SOURCE, 57),
            (Caps::NAMED_RX_CTX, 58),
            (Caps::DIRECTED_RECV, 59),
        ];
        for (cap, bit) in expect {
            assert_eq!(cap.bits(), 1u64 << bit, "{cap}");
        }
        assert_eq!(Mode::CONTEXT.bits(), 1 << 59);
        assert_eq!(Mode::CONTEXT2.bits(), 1 << 52);
        assert_eq!(Mode::LOCAL_MR.bits(), 1 << 55);
    }

    #[test]
    fn mr_access_rights_are_the_direction_caps() {
        // `MrAccess` (proto/mr) spells the same four bits out.
        use crate::proto::mr::MrAccess;
        let pairs = [
            (MrAccess::READ, Caps::READ),
            (MrAccess::WRITE, Caps::WRITE),
            (MrAccess::REMOTE_READ, Caps::REMOTE_READ),
            (MrAccess::REMOTE_WRITE, Caps::REMOTE_WRITE),
        ];
        for (access, cap) in pairs {
            assert_eq!(access.bits(), cap.bits(), "{access}");
        }
    }

    #[test]
    fn every_cap_has_one_name() {
        let all = CAP_NAMES.iter().fold(Caps::empty(), |a, (c, _)| a | *c);
        assert_eq!(all, Caps::all());
        for (cap, _) in CAP_NAMES {
            assert_eq!(cap.to_string().parse::<Caps>().unwrap(), cap);
        }
    }

    #[test]
    fn display_and_parse() {
        assert_eq!(Caps::empty().to_string(), "0");
        assert_eq!(
            (Caps::DIRECTED_RECV | Caps::MSG).to_string(),
            "FI_MSG | FI_DIRECTED_RECV"
        );
        let odd = Caps::from_bits_retain((1 << 40) | 2);
        assert_eq!(odd.to_string(), "FI_MSG | 0x10000000000");
        assert_eq!("FI_ATOMICS".parse::<Caps>().unwrap(), Caps::ATOMIC);
        assert_eq!(
            " msg, Tagged |fi_rma ".parse::<Caps>().unwrap(),
            Caps::MSG | Caps::TAGGED | Caps::RMA
        );
        assert_eq!("0".parse::<Caps>().unwrap(), Caps::empty());
        let e = "msg,bogus".parse::<Caps>().unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Inval);
        assert!(e.to_string().contains("\"bogus\""), "{e}");
        assert_eq!("context".parse::<Mode>().unwrap(), Mode::CONTEXT);
        assert_eq!(
            (Mode::CONTEXT | Mode::CONTEXT2).to_string(),
            "FI_CONTEXT2 | FI_CONTEXT"
        );
        assert!("FI".parse::<Mode>().is_err());
    }

    #[test]
    fn enums_parse_both_spellings() {
        for &t in EpType::ALL {
            assert_eq!(t.to_string().parse::<EpType>().unwrap(), t);
        }
        assert_eq!("dgram".parse::<EpType>().unwrap(), EpType::Dgram);
        assert_eq!(
            "fi_thread_safe".parse::<Threading>().unwrap(),
            Threading::Safe
        );
        assert_eq!(
            "manual".parse::<ProgressKind>().unwrap(),
            ProgressKind::Manual
        );
        let e = "stream".parse::<EpType>().unwrap_err();
        assert!(e.to_string().contains("FI_EP_RDM"), "{e}");
        assert!(" soft".parse::<EngineChoice>().is_err());
        assert_eq!("SOFT".parse::<EngineChoice>().unwrap(), EngineChoice::Soft);
    }

    #[test]
    fn receive_and_target_rules() {
        // The C definitions (`ofi_recv_allowed`, `ofi_rma_target_allowed`),
        // exhaustively over the bits that matter.
        let bits = [
            Caps::MSG,
            Caps::TAGGED,
            Caps::RMA,
            Caps::ATOMIC,
            Caps::READ,
            Caps::WRITE,
            Caps::RECV,
            Caps::SEND,
            Caps::REMOTE_READ,
            Caps::REMOTE_WRITE,
        ];
        for n in 0u32..(1 << bits.len()) {
            let caps = bits
                .iter()
                .enumerate()
                .filter(|(i, _)| n & (1 << i) != 0)
                .fold(Caps::empty(), |a, (_, b)| a | *b);
            let has = |c| caps.contains(c);
            let recv = has(Caps::RECV) || !(has(Caps::SEND) || has(Caps::RECV));
            let target = has(Caps::REMOTE_READ)
                || has(Caps::REMOTE_WRITE)
                || !(has(Caps::READ)
                    || has(Caps::WRITE)
                    || has(Caps::REMOTE_READ)
                    || has(Caps::REMOTE_WRITE));
            assert_eq!(caps.receives_tagged(), has(Caps::TAGGED) && recv, "{caps}");
            assert_eq!(caps.receives_msg(), has(Caps::MSG) && recv, "{caps}");
            assert_eq!(caps.rma_target(), has(Caps::RMA) && target, "{caps}");
            assert_eq!(caps.atomic_target(), has(Caps::ATOMIC) && target, "{caps}");
        }
        assert!((Caps::TAGGED | Caps::SEND).sends());
        assert!(!(Caps::TAGGED | Caps::RECV).sends());
        assert!((Caps::RMA | Caps::REMOTE_READ | Caps::WRITE).initiates_rma());
        assert!(!(Caps::RMA | Caps::REMOTE_READ).initiates_rma());
        assert_eq!(DIRECTION_BITS.bits().count_ones(), 6);
    }
}
