//! Operands for the every-op x datatype atomic tests (`atomic.rs`,
//! `rma_remote.rs`): small values that are exact in every datatype.

use psmrail::ops::atomic::AtomicDatatype as Dt;

/// Two elements of `dt` holding `vals` (integers, or floats with those
/// values; complex values get imaginary part 1).
pub fn encode(dt: Dt, vals: [u8; 2]) -> Vec<u8> {
    let mut out = Vec::new();
    for v in vals {
        match dt {
            Dt::Float => out.extend(f32::from(v).to_ne_bytes()),
            Dt::Double => out.extend(f64::from(v).to_ne_bytes()),
            Dt::FloatComplex => {
                out.extend(f32::from(v).to_ne_bytes());
                out.extend(1f32.to_ne_bytes());
            }
            Dt::DoubleComplex => {
                out.extend(f64::from(v).to_ne_bytes());
                out.extend(1f64.to_ne_bytes());
            }
            _ => {
                let mut b = vec![0u8; dt.size()];
                b[0] = v;
                out.extend(b);
            }
        }
    }
    out
}
