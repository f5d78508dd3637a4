//! Byte sizes as people write them: `4096`, `100MB`, `512MiB`, `1.5GiB`.

pub(crate) const KIB: u64 = 1 << 10;
pub(crate) const MIB: u64 = 1 << 20;
pub(crate) const GIB: u64 = 1 << 30;

const UNITS: &[(&str, u64)] = &[
    ("b", 1),
    ("k", 1_000),
    ("kb", 1_000),
    ("kib", KIB),
    ("m", 1_000_000),
    ("mb", 1_000_000),
    ("mib", MIB),
    ("g", 1_000_000_000),
    ("gb", 1_000_000_000),
    ("gib", GIB),
    ("t", 1_000_000_000_000),
    ("tb", 1_000_000_000_000),
    ("tib", 1 << 40),
];

const HINT: &str = "write a size like `4096`, `100MB`, `512MiB` or `1.5GiB` \
                    (units B, KB, MB, GB, TB = powers of 1000; KiB, MiB, GiB, TiB = powers of 1024)";

/// A size [`parse_size`] cannot read; the text says what is valid.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SizeError {
    #[error("invalid size `{input}`: {HINT}")]
    Invalid { input: String },
    #[error("invalid size `{input}`: unknown unit `{unit}`; {HINT}")]
    UnknownUnit { input: String, unit: String },
    #[error("invalid size `{input}`: not a whole number of bytes; {HINT}")]
    Fraction { input: String },
    #[error("invalid size `{input}`: larger than {} bytes", u64::MAX)]
    TooLarge { input: String },
}

/// Parses a size in bytes. Units are case-insensitive; a space before the unit is allowed; a
/// fraction must come out to a whole number of bytes (`1.5GiB` does, `1.3B` does not).
pub fn parse_size(s: &str) -> Result<u64, SizeError> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let unit = unit.trim_start();
    let bad = || SizeError::Invalid {
        input: s.to_owned(),
    };

    let multiplier = if unit.is_empty() {
        1
    } else {
        let lower = unit.to_ascii_lowercase();
        UNITS
            .iter()
            .find(|(name, _)| *name == lower)
            .map(|(_, m)| *m)
            .ok_or_else(|| SizeError::UnknownUnit {
                input: s.to_owned(),
                unit: unit.to_owned(),
            })?
    };

    let (whole, frac) = match number.split_once('.') {
        Some((w, f)) => (w, f),
        None => (number, ""),
    };
    if whole.is_empty() || frac.contains('.') || (number.contains('.') && frac.is_empty()) {
        return Err(bad());
    }
    // Exact integer arithmetic: no float rounding in sizes. At most 18 fraction digits keep
    // fraction * multiplier inside u128.
    if frac.len() > 18 {
        return Err(bad());
    }
    let too_big = || SizeError::TooLarge {
        input: s.to_owned(),
    };
    let whole: u128 = whole.parse().map_err(|_| too_big())?;
    let frac_value: u128 = if frac.is_empty() {
        0
    } else {
        frac.parse().map_err(|_| bad())?
    };
    let scale = 10u128.pow(u32::try_from(frac.len()).map_err(|_| bad())?);
    let m = u128::from(multiplier);
    let frac_bytes = frac_value * m;
    if !frac_bytes.is_multiple_of(scale) {
        return Err(SizeError::Fraction {
            input: s.to_owned(),
        });
    }
    let total = whole
        .checked_mul(m)
        .and_then(|w| w.checked_add(frac_bytes / scale))
        .ok_or_else(too_big)?;
    u64::try_from(total).map_err(|_| too_big())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        for (input, want) in [
            ("4096", Some(4096)),
            ("0", Some(0)),
            ("100MB", Some(100_000_000)),
            ("512MiB", Some(512 * MIB)),
            ("20GiB", Some(20 * GIB)),
            ("1.5GiB", Some(3 * GIB / 2)),
            ("1.5 GiB", Some(3 * GIB / 2)),
            ("2kib", Some(2048)),
            ("10K", Some(10_000)),
            ("7B", Some(7)),
            (" 1TiB ", Some(1 << 40)),
            ("0.5KiB", Some(512)),
            ("18446744073709551615", Some(u64::MAX)),
            ("18446744073709551616", None),
            ("99999999999999999999999999999999999999999999", None),
            ("17179869184GiB", None),
            ("1.3B", None),
            ("", None),
            ("MiB", None),
            (".5MiB", None),
            ("5.MiB", None),
            ("1.2.3MiB", None),
            ("-1", None),
            ("12 parsecs", None),
            ("1e9", None),
            ("1.0000000000000000000000001GiB", None),
        ] {
            assert_eq!(parse_size(input).ok(), want, "{input:?}");
        }
    }

    #[test]
    fn errors_say_what_is_valid() {
        let e = parse_size("12 parsecs").unwrap_err().to_string();
        assert!(e.contains("unknown unit `parsecs`"), "{e}");
        assert!(e.contains("512MiB"), "{e}");
        let e = parse_size("1.3B").unwrap_err().to_string();
        assert!(e.contains("whole number of bytes"), "{e}");
    }
}
