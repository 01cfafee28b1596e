//! One endpoint per domain per role: the psm overlap rule as a plain data
//! structure (ARCHITECTURE.md, "Kept as in C"; fi_psm(7), "no two
//! endpoints can have overlapping receive or RMA target capabilities"; C:
//! `psmx_domain_check_features` in `prov/psm/src/psmx_domain.c`).
//!
//! A domain has one tagged queue and one set of AM handlers, so incoming
//! tagged messages, untagged messages, RMA and atomics each have exactly one
//! endpoint to go to. An endpoint open calls [`DomainSlots::claim`] with its
//! caps and the domain's; the returned [`SlotClaim`] is handed back with
//! [`DomainSlots::release`] when the endpoint closes. Sending-only
//! endpoints take no role, so any number of them coexist.

use std::fmt;
use std::sync::{Mutex, PoisonError};

use super::caps::{Caps, DIRECTION_BITS};
use crate::proto::target_slots::{TargetRole, TargetSlots};
use crate::{Error, ErrorKind, Result};

/// A receive or target role of an endpoint in its domain.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Role {
    /// Receives tagged messages ([`Caps::receives_tagged`]).
    TaggedRecv,
    /// Receives untagged messages ([`Caps::receives_msg`]).
    MsgRecv,
    /// Target of remote RMA ([`Caps::rma_target`]).
    RmaTarget,
    /// Target of remote atomics ([`Caps::atomic_target`]).
    AtomicTarget,
}

impl Role {
    const ALL: [Role; 4] = [
        Role::TaggedRecv,
        Role::MsgRecv,
        Role::RmaTarget,
        Role::AtomicTarget,
    ];

    const fn index(self) -> usize {
        match self {
            Role::TaggedRecv => 0,
            Role::MsgRecv => 1,
            Role::RmaTarget => 2,
            Role::AtomicTarget => 3,
        }
    }

    const fn bit(self) -> u8 {
        1 << self.index()
    }

    /// Whether an endpoint with `caps` takes this role.
    pub(crate) fn wanted_by(self, caps: Caps) -> bool {
        match self {
            Role::TaggedRecv => caps.receives_tagged(),
            Role::MsgRecv => caps.receives_msg(),
            Role::RmaTarget => caps.rma_target(),
            Role::AtomicTarget => caps.atomic_target(),
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Role::TaggedRecv => "tagged receive (FI_TAGGED with receive allowed)",
            Role::MsgRecv => "message receive (FI_MSG with receive allowed)",
            Role::RmaTarget => "RMA target (FI_RMA with remote access allowed)",
            Role::AtomicTarget => "atomic target (FI_ATOMIC with remote access allowed)",
        })
    }
}

/// The roles one endpoint holds; give it back with [`DomainSlots::release`].
///
/// Not `Clone`: one claim, one release.
#[derive(Debug, PartialEq, Eq)]
#[must_use = "a claim not released keeps its roles taken"]
pub(crate) struct SlotClaim {
    roles: u8,
}

#[allow(dead_code)] // endpoint.rs and tests use these
impl SlotClaim {
    /// Whether this claim holds `role`.
    pub(crate) fn holds(&self, role: Role) -> bool {
        self.roles & role.bit() != 0
    }

    /// The roles held.
    pub(crate) fn roles(&self) -> impl Iterator<Item = Role> + '_ {
        Role::ALL.into_iter().filter(|r| self.holds(*r))
    }
}

/// Which roles of a domain are taken.
#[derive(Debug, Default)]
pub(crate) struct DomainSlots {
    taken: u8,
}

#[allow(dead_code)] // domain.rs and endpoint.rs use these
impl DomainSlots {
    /// Every role free.
    pub(crate) fn new() -> Self {
        DomainSlots::default()
    }

    /// Whether `role` is taken.
    pub(crate) fn is_taken(&self, role: Role) -> bool {
        self.taken & role.bit() != 0
    }

    /// Claims the roles an endpoint with `caps` needs in a domain opened
    /// with `domain_caps`. All or nothing: on error no role is taken.
    ///
    /// # Errors
    /// * `OpNotSupp` when `caps` has a capability the domain lacks; the six
    ///   direction bits (`FI_SEND`, `FI_RECV`, `FI_READ`, `FI_WRITE`,
    ///   `FI_REMOTE_READ`, `FI_REMOTE_WRITE`) are not compared. The message
    ///   names the missing caps.
    /// * `Busy` when another endpoint of the domain holds a role these caps
    ///   need; the message names the role(s).
    pub(crate) fn claim(&mut self, caps: Caps, domain_caps: Caps) -> Result<SlotClaim> {
        let missing = (caps - DIRECTION_BITS) - (domain_caps - DIRECTION_BITS);
        if !missing.is_empty() {
            return Err(Error::new(
                ErrorKind::OpNotSupp,
                format!(
                    "endpoint caps {caps} include {missing}, which the domain was not opened \
                     with (domain caps: {domain_caps})"
                ),
            ));
        }
        let wanted = Role::ALL
            .into_iter()
            .filter(|r| r.wanted_by(caps))
            .fold(0u8, |acc, r| acc | r.bit());
        let clash = wanted & self.taken;
        if clash != 0 {
            let names: Vec<String> = Role::ALL
                .into_iter()
                .filter(|r| clash & r.bit() != 0)
                .map(|r| r.to_string())
                .collect();
            return Err(Error::new(
                ErrorKind::Busy,
                format!(
                    "endpoint caps {caps}: the domain already has an endpoint for {} \
                     (one endpoint per domain per role)",
                    names.join(" and ")
                ),
            ));
        }
        self.taken |= wanted;
        Ok(SlotClaim { roles: wanted })
    }

    /// Frees the roles of `claim`.
    pub(crate) fn release(&mut self, claim: SlotClaim) {
        self.taken &= !claim.roles;
    }
}

/// The RMA transport (`proto/`) asks the domain's slots, shared with it,
/// whether to serve peers' RMA and atomics.
impl TargetSlots for Mutex<DomainSlots> {
    fn is_taken(&self, role: TargetRole) -> bool {
        let role = match role {
            TargetRole::Rma => Role::RmaTarget,
            TargetRole::Atomic => Role::AtomicTarget,
        };
        // Every update is a single step; a panic leaves the slots
        // consistent.
        self.lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_taken(role)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const DOMAIN: Caps = Caps::MSG
        .union(Caps::TAGGED)
        .union(Caps::RMA)
        .union(Caps::ATOMIC)
        .union(Caps::MULTI_RECV)
        .union(Caps::TRIGGER)
        .union(Caps::RMA_EVENT);

    #[test]
    fn target_slots_follow_claims() {
        let slots = Mutex::new(DomainSlots::new());
        let asked = |role| TargetSlots::is_taken(&slots, role);
        assert!(!asked(TargetRole::Rma) && !asked(TargetRole::Atomic));
        let claim = slots.lock().unwrap().claim(Caps::RMA, DOMAIN).unwrap();
        assert!(asked(TargetRole::Rma) && !asked(TargetRole::Atomic));
        let atomic = slots.lock().unwrap().claim(Caps::ATOMIC, DOMAIN).unwrap();
        assert!(asked(TargetRole::Atomic));
        slots.lock().unwrap().release(claim);
        assert!(!asked(TargetRole::Rma) && asked(TargetRole::Atomic));
        slots.lock().unwrap().release(atomic);
    }

    #[test]
    fn man_page_allowed_example() {
        // fi_psm(7): "two endpoints with FI_TAGGED | FI_SEND, one endpoint
        // with FI_TAGGED | FI_RECV, one endpoint with FI_MSG, one endpoint
        // with FI_RMA | FI_ATOMICS" is fine.
        let mut s = DomainSlots::new();
        let a = s.claim(Caps::TAGGED | Caps::SEND, DOMAIN).unwrap();
        let b = s.claim(Caps::TAGGED | Caps::SEND, DOMAIN).unwrap();
        assert_eq!(a.roles().count() + b.roles().count(), 0);
        let c = s.claim(Caps::TAGGED | Caps::RECV, DOMAIN).unwrap();
        assert!(c.holds(Role::TaggedRecv));
        let d = s.claim(Caps::MSG, DOMAIN).unwrap();
        assert_eq!(d.roles().collect::<Vec<_>>(), [Role::MsgRecv]);
        let e = s.claim(Caps::RMA | Caps::ATOMIC, DOMAIN).unwrap();
        assert_eq!(
            e.roles().collect::<Vec<_>>(),
            [Role::RmaTarget, Role::AtomicTarget]
        );
        for r in Role::ALL {
            assert!(s.is_taken(r), "{r}");
        }
    }

    #[test]
    fn two_tagged_is_busy() {
        let mut s = DomainSlots::new();
        let _a = s.claim(Caps::TAGGED, DOMAIN).unwrap();
        let e = s.claim(Caps::TAGGED, DOMAIN).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Busy);
        assert!(e.to_string().contains("tagged receive"), "{e}");
    }

    #[test]
    fn two_rma_is_busy() {
        let mut s = DomainSlots::new();
        let _a = s.claim(Caps::RMA, DOMAIN).unwrap();
        let e = s
            .claim(Caps::RMA | Caps::REMOTE_WRITE | Caps::TAGGED, DOMAIN)
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Busy);
        assert!(e.to_string().contains("RMA target"), "{e}");
        // All or nothing: the failed claim did not take the tagged role.
        assert!(!s.is_taken(Role::TaggedRecv));
        // An initiator-only RMA endpoint is fine.
        let _b = s
            .claim(Caps::RMA | Caps::READ | Caps::WRITE, DOMAIN)
            .unwrap();
    }

    #[test]
    fn busy_names_every_clashing_role() {
        let mut s = DomainSlots::new();
        let _a = s.claim(Caps::MSG | Caps::ATOMIC, DOMAIN).unwrap();
        let e = s.claim(Caps::MSG | Caps::ATOMIC, DOMAIN).unwrap_err();
        let text = e.to_string();
        assert!(
            text.contains("message receive") && text.contains("atomic target"),
            "{text}"
        );
    }

    #[test]
    fn release_then_claim_again() {
        let mut s = DomainSlots::new();
        let a = s.claim(Caps::TAGGED | Caps::RMA, DOMAIN).unwrap();
        assert!(s.claim(Caps::TAGGED, DOMAIN).is_err());
        s.release(a);
        assert!(!s.is_taken(Role::TaggedRecv) && !s.is_taken(Role::RmaTarget));
        let b = s.claim(Caps::TAGGED, DOMAIN).unwrap();
        let c = s.claim(Caps::RMA, DOMAIN).unwrap();
        s.release(b);
        assert!(s.is_taken(Role::RmaTarget), "releasing b keeps c's role");
        s.release(c);
    }

    #[test]
    fn caps_outside_the_domain_are_not_supported() {
        let mut s = DomainSlots::new();
        let e = s.claim(Caps::TAGGED | Caps::RMA, Caps::TAGGED).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::OpNotSupp);
        assert!(e.to_string().contains("include FI_RMA,"), "{e}");
        assert!(!s.is_taken(Role::TaggedRecv));
        // Direction bits are ignored both ways.
        let _a = s
            .claim(Caps::TAGGED | Caps::SEND | Caps::RECV, Caps::TAGGED)
            .unwrap();
        let _b = s
            .claim(Caps::RMA | Caps::READ, DOMAIN | Caps::WRITE)
            .unwrap();
    }

    /// A model: a list of live endpoints' caps; a claim succeeds iff the
    /// caps are within the domain and no live endpoint shares a role.
    #[derive(Clone, Debug)]
    enum Op {
        Claim(u64),
        Release(usize),
    }

    fn caps_strategy() -> impl Strategy<Value = u64> {
        let pool = [
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
            Caps::MULTI_RECV,
            Caps::DIRECTED_RECV,
        ];
        proptest::bits::u16::between(0, pool.len()).prop_map(move |n| {
            pool.iter()
                .enumerate()
                .filter(|(i, _)| n & (1 << i) != 0)
                .fold(0, |a, (_, c)| a | c.bits())
        })
    }

    fn op_strategy() -> impl Strategy<Value = Op> {
        prop_oneof![
            caps_strategy().prop_map(Op::Claim),
            (0usize..8).prop_map(Op::Release),
        ]
    }

    proptest! {
        #[test]
        fn matches_model(ops in proptest::collection::vec(op_strategy(), 0..40)) {
            let mut slots = DomainSlots::new();
            let mut live: Vec<(Caps, SlotClaim)> = Vec::new();
            for op in ops {
                match op {
                    Op::Claim(bits) => {
                        let caps = Caps::from_bits_retain(bits);
                        let outside = caps.contains(Caps::DIRECTED_RECV);
                        let clash = Role::ALL.iter().any(|r| {
                            r.wanted_by(caps) && live.iter().any(|(c, _)| r.wanted_by(*c))
                        });
                        match slots.claim(caps, DOMAIN) {
                            Ok(claim) => {
                                prop_assert!(!outside && !clash, "{caps} accepted");
                                for r in Role::ALL {
                                    prop_assert_eq!(claim.holds(r), r.wanted_by(caps));
                                }
                                live.push((caps, claim));
                            }
                            Err(e) => {
                                let kind = if outside { ErrorKind::OpNotSupp } else { ErrorKind::Busy };
                                prop_assert!(outside || clash, "{caps} refused: {e}");
                                prop_assert_eq!(e.kind(), kind);
                            }
                        }
                    }
                    Op::Release(i) => {
                        if !live.is_empty() {
                            let (_, claim) = live.remove(i % live.len());
                            slots.release(claim);
                        }
                    }
                }
                for r in Role::ALL {
                    let model = live.iter().any(|(c, _)| r.wanted_by(*c));
                    prop_assert_eq!(slots.is_taken(r), model);
                }
            }
        }
    }
}
