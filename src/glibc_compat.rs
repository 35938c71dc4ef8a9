//! Keeps the binary loadable on glibc 2.34 (the wheel's manylinux_2_34 tag: Ubuntu 22.04 has 2.35, RHEL 9 2.34)
//! when it is built on a newer glibc.
//!
//! glibc 2.35 gave `hypotf` a new symbol version (GLIBC_2.35; the old GLIBC_2.2.5 one keeps the SVID error
//! handling), so linking against glibc >= 2.35 makes the binary require it. The only caller is plotters'
//! `DashedPathElement` (dashed lines in figures, through `f32::hypot`). Defining `hypotf` in the executable makes
//! the static linker resolve that reference here instead of in libm, so no GLIBC_2.35 symbol is referenced.
//! scripts/wheel checks the built binary's symbol versions, so a new one from another dependency is caught there.

/// hypot for f32 the way glibc >= 2.35 computes it: in f64, where neither square can overflow or lose bits (an
/// f32 mantissa squared fits in an f64 one), then rounded once to f32.
// SAFETY: exports the C symbol `hypotf` with libm's signature and results; nothing else in the program defines it.
#[unsafe(no_mangle)]
pub extern "C" fn hypotf(x: f32, y: f32) -> f32 {
    // IEEE 754: an infinite argument wins even over a NaN one (the f64 sum would give NaN).
    if x.is_infinite() || y.is_infinite() {
        return f32::INFINITY;
    }
    let (x, y) = (f64::from(x), f64::from(y));
    (x * x + y * y).sqrt() as f32
}

#[cfg(test)]
mod tests {
    use super::hypotf;

    #[test]
    fn matches_libm() {
        let cases = [
            (3.0f32, 4.0f32),
            (0.0, 0.0),
            (-5.0, 12.0),
            (1e-45, 1e-45),
            (f32::MAX, f32::MAX),
            (1e30, 1e-30),
            (0.1, 0.2),
            (f32::MIN_POSITIVE, 3.5),
        ];
        for (x, y) in cases {
            let want = f64::from(x).hypot(f64::from(y)) as f32;
            assert_eq!(hypotf(x, y).to_bits(), want.to_bits(), "hypotf({x}, {y})");
        }
        assert_eq!(hypotf(f32::INFINITY, f32::NAN), f32::INFINITY);
        assert_eq!(hypotf(f32::NAN, f32::NEG_INFINITY), f32::INFINITY);
        assert!(hypotf(f32::NAN, 1.0).is_nan());
    }
}
