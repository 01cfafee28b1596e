//! The name server's TCP port, derived from the job UUID exactly as the C
//! psm provider derives it (ARCHITECTURE.md, "Kept as in C"), so a C client
//! and a psmrail server could meet.

use crate::config::JobUuid;

/// Ports below this are moved up by this much (C: `if (port < 4096) port
/// += 4096`), away from the well-known range.
const FLOOR: u16 = 4096;

/// The TCP port of the name server for the job `uuid`: the UUID's 16 bytes
/// read as eight little-endian u16 words, summed modulo 2^16, plus 4096 if
/// the sum is below 4096.
///
/// C reads the words in host order; psmrail fixes little-endian, the order
/// of the x86 hosts the C provider runs on.
///
/// ```
/// use psmrail::config::JobUuid;
/// use psmrail::fabric::name_server::port_for;
///
/// assert_eq!(port_for(&JobUuid::DEFAULT), 64331);
/// assert_eq!(port_for(&JobUuid::from_bytes([0; 16])), 4096);
/// ```
pub fn port_for(uuid: &JobUuid) -> u16 {
    let sum = uuid
        .as_bytes()
        .chunks_exact(2)
        .map(|w| u16::from_le_bytes([w[0], w[1]]))
        .fold(0u16, u16::wrapping_add);
    if sum < FLOOR {
        sum + FLOOR
    } else {
        sum
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_uuid_gives_64331() {
        let u: JobUuid = "0FFF0FFF-0000-0000-0000-0FFF0FFF0FFF".parse().unwrap();
        assert_eq!(port_for(&u), 64331);
        assert_eq!(port_for(&u), 0xFB4B);
    }

    #[test]
    fn words_are_little_endian() {
        let mut b = [0u8; 16];
        b[0] = 0x01; // word 0 = 0x0001 little-endian (0x0100 big-endian)
        b[3] = 0x20; // word 1 = 0x2000
        assert_eq!(port_for(&JobUuid::from_bytes(b)), 0x2001);
    }

    #[test]
    fn sum_wraps_then_floor_applies() {
        // 8 × 0x2000 = 0x10000, which wraps to 0 and then gets the floor.
        let b = [0x00, 0x20].repeat(8);
        let u = JobUuid::from_bytes(b.try_into().unwrap());
        assert_eq!(port_for(&u), 4096);
        // 4095 is below the floor; 4096 is not.
        let mut b = [0u8; 16];
        b[14..].copy_from_slice(&4095u16.to_le_bytes());
        assert_eq!(port_for(&JobUuid::from_bytes(b)), 8191);
        b[14..].copy_from_slice(&4096u16.to_le_bytes());
        assert_eq!(port_for(&JobUuid::from_bytes(b)), 4096);
    }
}
