//! Connecting: the hello an endpoint sends a new peer, `psm_ep_connect`
//! with its refusals, and waiting for the handshakes that verify who
//! answered.

use super::*;

impl NativeEndpoint {
    /// Sends the job handshake to `addr`; the cookie to wait for.
    pub(super) fn send_hello(&self, ep: &psm_sys::Endpoint, addr: EpAddr) -> Result<u64> {
        let cookie = self.am.cookie();
        self.am.await_answer(cookie);
        let args = am::am_args(&[HELLO_MAGIC, cookie]);
        if let Err(e) = ep.am_request(
            addr,
            self.hello_request,
            &args[..2],
            &[],
            AmFlags::default(),
        ) {
            self.am.forget(cookie);
            return Err(map_psm_error(e, "sending the job handshake"));
        }
        Ok(cookie)
    }

    /// Runs `psm_ep_connect` for `epids` (none connected yet); returns the
    /// handshakes to wait for and records failures.
    pub(super) fn psm_connect(
        &self,
        epids: &[Epid],
        timeout: Duration,
        failures: &mut HashMap<Epid, Error>,
    ) -> Vec<(Epid, EpAddr, u64)> {
        let mut handshakes = Vec::new();
        let mut g = match self.lock_open() {
            Ok(g) => g,
            Err(e) => {
                for epid in epids {
                    failures.insert(*epid, Error::new(e.kind(), e.message().to_owned()));
                }
                return handshakes;
            }
        };
        let inner = &mut *g;
        self.post_unposted(inner);
        let Some(ep) = inner.ep.as_ref() else {
            return handshakes;
        };
        let raw: Vec<psm_sys::Epid> = epids.iter().map(|e| psm_sys::Epid(e.0)).collect();
        let outcome = ep.connect(&raw, Some(timeout));
        let results = match outcome {
            Ok(r) => r,
            Err(e) => {
                let e = map_psm_error(e, "psm_ep_connect");
                for epid in epids {
                    failures.insert(*epid, Error::new(e.kind(), e.message().to_owned()));
                }
                return handshakes;
            }
        };
        for (epid, result) in epids.iter().zip(results) {
            match result {
                Ok(addr) if *epid == self.epid => {
                    inner.peers.insert(*epid, addr);
                }
                Ok(addr) => match self.send_hello(ep, addr) {
                    Ok(cookie) => handshakes.push((*epid, addr, cookie)),
                    Err(e) => {
                        failures.insert(
                            *epid,
                            Error::new(
                                e.kind(),
                                format!("native engine: connecting to {epid}: {}", e.message()),
                            ),
                        );
                    }
                },
                Err(psm) => {
                    let kind = code_kind(psm.code);
                    let why = if kind == ErrorKind::TimedOut {
                        format!("no answer within {timeout:?} (PSM waits at least 2 s): {psm}")
                    } else if matches!(
                        psm.code.0,
                        ffi::PSM_EPID_INVALID_UUID_KEY | ffi::PSM_EP_INVALID_UUID_KEY
                    ) {
                        format!("it belongs to another job (UUID): {psm}")
                    } else {
                        psm.to_string()
                    };
                    failures.insert(
                        *epid,
                        Error::with_source(
                            kind,
                            format!("native engine: connecting to {epid}: {why}"),
                            psm,
                        ),
                    );
                }
            }
        }
        handshakes
    }

    /// Waits for the handshake answers until `deadline`, progressing.
    pub(super) fn await_handshakes(
        &self,
        mut pending: Vec<(Epid, EpAddr, u64)>,
        deadline: Option<Instant>,
        timeout: Duration,
        failures: &mut HashMap<Epid, Error>,
    ) {
        while !pending.is_empty() {
            let made = {
                let mut g = match self.lock() {
                    Ok(g) => g,
                    Err(e) => {
                        for (epid, _, cookie) in pending.drain(..) {
                            self.am.forget(cookie);
                            failures.insert(epid, Error::new(e.kind(), e.message().to_owned()));
                        }
                        return;
                    }
                };
                if g.ep.is_none() {
                    for (epid, _, cookie) in pending.drain(..) {
                        self.am.forget(cookie);
                        failures.insert(epid, closed_error());
                    }
                    return;
                }
                let made = self.step(&mut g);
                pending.retain(|(epid, addr, cookie)| {
                    let Some((proof, magic)) = self.am.answer(*cookie) else {
                        return true;
                    };
                    self.am.forget(*cookie);
                    if magic != HELLO_MAGIC {
                        let why = format!(
                            "native engine: connecting to {epid}: the peer speaks another \
                             psmrail handshake ({magic:#018x}, ours {HELLO_MAGIC:#018x}): refused"
                        );
                        g.peers
                            .refused
                            .insert(*epid, (ErrorKind::ConnRefused, why.clone()));
                        failures.insert(*epid, Error::new(ErrorKind::ConnRefused, why));
                    } else if proof != am::hello_proof(&self.uuid, *cookie) {
                        let why = format!(
                            "native engine: connecting to {epid}: it belongs to another job: it \
                             cannot prove our job UUID {} (and its own is never sent); refused",
                            hex(&self.uuid)
                        );
                        g.peers
                            .refused
                            .insert(*epid, (ErrorKind::ConnRefused, why.clone()));
                        failures.insert(*epid, Error::new(ErrorKind::ConnRefused, why));
                    } else {
                        g.peers.insert(*epid, *addr);
                    }
                    false
                });
                made
            };
            if pending.is_empty() {
                return;
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                for (epid, _, cookie) in pending.drain(..) {
                    self.am.forget(cookie);
                    failures.insert(
                        epid,
                        Error::new(
                            ErrorKind::TimedOut,
                            format!(
                                "native engine: connecting to {epid}: PSM connected, but the peer \
                                 did not answer the job handshake within {timeout:?} (is it \
                                 progressing?)"
                            ),
                        ),
                    );
                }
                return;
            }
            if !made {
                std::thread::sleep(IDLE_WAIT);
            }
        }
    }
}
