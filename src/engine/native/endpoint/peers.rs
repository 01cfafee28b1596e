//! The table of peers an endpoint connected and verified, looked up by
//! PSM address on the hot path (a binary search).

use super::*;

/// Peers this endpoint connected (and verified), refusals, and sources.
#[derive(Default)]
pub(super) struct Peers {
    /// Verified peers: (address value, address, epid), sorted by value.
    pub(super) by_addr: Vec<(u64, EpAddr, Epid)>,
    /// Verified peers by epid.
    pub(super) by_epid: HashMap<Epid, u64>,
    /// Epids refused by the handshake, with why.
    pub(super) refused: HashMap<Epid, (ErrorKind, String)>,
    /// Addresses messages came from that were never connected here.
    pub(super) seen: Vec<EpAddr>,
    /// The last source noted (skips the search for a steady sender).
    pub(super) last_source: u64,
}

impl Peers {
    #[inline]
    pub(super) fn addr(&self, peer: PeerAddr) -> Option<EpAddr> {
        self.by_addr
            .binary_search_by_key(&peer.0, |e| e.0)
            .ok()
            .map(|i| self.by_addr[i].1)
    }

    pub(super) fn epid_of(&self, peer: PeerAddr) -> Option<Epid> {
        self.lookup(peer).map(|(_, epid)| epid)
    }

    /// The address and epid of a verified peer.
    #[inline]
    pub(super) fn lookup(&self, peer: PeerAddr) -> Option<(EpAddr, Epid)> {
        self.by_addr
            .binary_search_by_key(&peer.0, |e| e.0)
            .ok()
            .map(|i| (self.by_addr[i].1, self.by_addr[i].2))
    }

    pub(super) fn insert(&mut self, epid: Epid, addr: EpAddr) -> PeerAddr {
        let value = addr_value(addr);
        if let Err(i) = self.by_addr.binary_search_by_key(&value, |e| e.0) {
            self.by_addr.insert(i, (value, addr, epid));
        }
        self.by_epid.insert(epid, value);
        self.seen.retain(|a| addr_value(*a) != value);
        PeerAddr(value)
    }

    /// Remembers a message source (so `peer_epid` can resolve it).
    #[inline]
    pub(super) fn note_source(&mut self, addr: EpAddr) {
        let value = addr_value(addr);
        if value == self.last_source {
            return;
        }
        self.last_source = value;
        if self.addr(PeerAddr(value)).is_none() && !self.seen.contains(&addr) {
            self.seen.push(addr);
        }
    }
}

/// The [`PeerAddr`] of a PSM address: the `psm_epaddr_t` pointer value.
#[inline]
pub(super) fn addr_value(addr: EpAddr) -> u64 {
    addr.as_raw() as usize as u64
}
