//! The share of callers a rollout sends to its canary, in basis points,
//! and how operators write it (a percentage).

use super::BUCKETS;
use std::fmt;

/// The share of callers a rollout sends to its canary, in basis points
/// (hundredths of a percent: 5 % is 500).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct Share(u32);

/// A share that cannot be one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "percent {0:?} is not a share of callers: give a number from 0 to 100 with at most two decimals, e.g. 5 or 0.25"
)]
pub struct BadShare(pub String);

impl Share {
    /// All callers.
    pub const ALL: Share = Share(BUCKETS);

    /// A share of `basis_points` (at most [`BUCKETS`]).
    pub fn from_basis_points(basis_points: u32) -> Result<Share, BadShare> {
        if basis_points <= BUCKETS {
            Ok(Share(basis_points))
        } else {
            Err(BadShare(format!("{}", f64::from(basis_points) / 100.0)))
        }
    }

    /// Parses a percentage as operators write it: `5`, `0.25`, `100`.
    pub fn parse_percent(text: &str) -> Result<Share, BadShare> {
        let bad = || BadShare(text.to_owned());
        let (whole, fraction) = text.trim().split_once('.').unwrap_or((text.trim(), ""));
        let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
        if !digits(whole) || fraction.len() > 2 || (!fraction.is_empty() && !digits(fraction)) {
            return Err(bad());
        }
        let whole: u32 = whole.parse().map_err(|_| bad())?;
        let hundredths: u32 = format!("{fraction:0<2}").parse().map_err(|_| bad())?;
        let basis_points = whole
            .checked_mul(100)
            .and_then(|w| w.checked_add(hundredths))
            .ok_or_else(bad)?;
        Share::from_basis_points(basis_points).map_err(|_| bad())
    }

    /// The share in basis points.
    pub fn basis_points(self) -> u32 {
        self.0
    }

    /// The percentage as text without the sign: `5`, `0.25`, `12.5`.
    pub fn percent(self) -> String {
        let (whole, hundredths) = (self.0 / 100, self.0 % 100);
        match hundredths {
            0 => format!("{whole}"),
            h if h % 10 == 0 => format!("{whole}.{}", h / 10),
            h => format!("{whole}.{h:02}"),
        }
    }

    /// The percentage as a number (for JSON).
    pub fn percent_number(self) -> f64 {
        f64::from(self.0) / 100.0
    }
}

impl fmt::Display for Share {
    /// `5%`, `0.25%`, `100%`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}%", self.percent())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Percentages parse to basis points and print back; nonsense is refused
    /// with how to write one.
    #[test]
    fn shares() {
        for (text, bp, shown) in [
            ("5", 500, "5%"),
            ("0.25", 25, "0.25%"),
            ("12.5", 1250, "12.5%"),
            ("100", 10_000, "100%"),
            ("0", 0, "0%"),
        ] {
            let share = Share::parse_percent(text).unwrap();
            assert_eq!(share.basis_points(), bp, "{text}");
            assert_eq!(share.to_string(), shown);
        }
        for bad in ["101", "-1", "5%", "0.125", "", "x", ".5", "1e2"] {
            let err = Share::parse_percent(bad).unwrap_err().to_string();
            assert!(err.contains("from 0 to 100"), "{bad}: {err}");
        }
        assert!(Share::from_basis_points(10_001).is_err());
    }
}
