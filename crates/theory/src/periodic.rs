//! Periodic RoPE and bounded look-back (the "expressivity of RoPE" paper).
//!
//! - A component-periodic schedule rotates plane d at position i by a lookup-table angle
//!   T_d(i mod m_d), so its realised rotations repeat exactly at every length.
//! - MOD_m^r: one head over a periodic plane (period m) and an unrotated plane outputs exactly
//!   [i = r mod m] at every position i, in a finite-precision format, when
//!   C >= 2 f_large / delta_m (f_large: the smallest x with exp(-x) rounding to 0).
//! - A fixed-offset head on a conventional rotation g (irrational in 2 pi) scores
//!   C cos(g (i - k - j)); its certified range (every query up to L picks j = i - k by at least
//!   f_large) is finite: some distance eventually turns by almost a full circle.

use serde::Serialize;

use crate::format::NumberFormat;
use crate::{invalid, Result};

/// A component-periodic schedule: plane d turns by `tables[d][i mod periods[d]]` at position i.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PeriodicSchedule {
    /// Period m_d of each plane.
    pub periods: Vec<usize>,
    /// Angle of each residue, per plane.
    pub tables: Vec<Vec<f64>>,
}

impl PeriodicSchedule {
    /// Planes with the uniform tables T_m(s) = 2 pi s / m.
    pub fn uniform(periods: &[usize]) -> Result<Self> {
        if let Some(&m) = periods.iter().find(|&&m| m < 2) {
            return invalid(format!("a period m must be at least 2, got {m}"));
        }
        Ok(Self {
            periods: periods.to_vec(),
            tables: periods
                .iter()
                .map(|&m| {
                    (0..m)
                        .map(|s| 2.0 * std::f64::consts::PI * s as f64 / m as f64)
                        .collect()
                })
                .collect(),
        })
    }

    /// The rotation angle of plane `d` at position `i`.
    pub fn angle(&self, d: usize, i: usize) -> f64 {
        self.tables[d][i % self.periods[d]]
    }
}

/// The smallest x (to 1e-9) with exp(-x) rounding to 0 in `format`.
pub fn f_large(format: NumberFormat) -> f64 {
    let (mut lo, mut hi) = (0.0f64, 2000.0f64);
    while hi - lo > 1e-9 {
        let mid = 0.5 * (lo + hi);
        if format.round((-mid).exp()) == 0.0 {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    hi
}

/// delta_m = min_{1 <= s < m} (1 - cos 2 pi s / m) = 1 - cos(2 pi / m).
pub fn delta(m: usize) -> f64 {
    1.0 - (2.0 * std::f64::consts::PI / m as f64).cos()
}

/// Outcome of checking MOD_m^r at every position 1..=len.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct ModCheck {
    /// Period.
    pub m: usize,
    /// Residue.
    pub r: usize,
    /// Format the scores and softmax are rounded to.
    #[serde(serialize_with = "name")]
    pub format: NumberFormat,
    /// Score scale used.
    #[serde(serialize_with = "ropelab_io::csv_rows::display")]
    pub c: f64,
    /// Positions checked.
    pub len: usize,
    /// First position whose output is not exactly [i = r mod m] (None: all exact).
    pub first_failure: Option<usize>,
}

fn name<S: serde::Serializer>(f: &NumberFormat, s: S) -> std::result::Result<S::Ok, S::Error> {
    s.serialize_str(f.name())
}

/// The MOD_m^r head with scale C in a format: realised scores precomputed per residue.
#[derive(Debug, Clone)]
pub struct ModHead {
    m: usize,
    r: usize,
    format: NumberFormat,
    /// Realised BOS score per residue (i - r) mod m.
    bos: Vec<f64>,
    /// Realised score of every other key, C b_m.
    other: f64,
}

impl ModHead {
    /// The head for period m (>= 2), residue r and scale c, rounded to `format`.
    pub fn new(m: usize, r: usize, c: f64, format: NumberFormat) -> Result<Self> {
        let table = PeriodicSchedule::uniform(&[m])?;
        let b_m = 1.0 - delta(m) / 2.0;
        Ok(Self {
            m,
            r: r % m,
            format,
            bos: (0..m)
                .map(|s| format.round(c * format.round(table.angle(0, s).cos())))
                .collect(),
            other: format.round(c * format.round(b_m)),
        })
    }

    /// The attention weight on BOS (the head's output, value 1 at BOS) at query position i
    /// >= 1, keys BOS and i others, every intermediate rounded to the format.
    pub fn output(&self, i: usize) -> f64 {
        let f = self.format;
        let s_bos = self.bos[(i + self.m - self.r) % self.m];
        let top = s_bos.max(self.other);
        let e_bos = f.round(f.round(s_bos - top).exp());
        let e_other = f.round(f.round(self.other - top).exp());
        if e_bos == 0.0 {
            return 0.0;
        }
        let denominator = f.round(e_bos + f.round(i as f64 * e_other));
        f.round(e_bos / denominator)
    }
}

/// Slack on C: the realised scores are rounded (up to a relative 2^-8 in bf16 for each of the
/// two competing scores), so C = 2 f_large / delta_m exactly sits on the edge; 2% more is safe.
pub const C_SLACK: f64 = 1.02;

/// Checks MOD_m^r with C = 1.02 * 2 f_large / delta_m at every position 1..=len.
pub fn check_mod(m: usize, r: usize, format: NumberFormat, len: usize) -> Result<ModCheck> {
    if m < 2 {
        return invalid(format!("the period m must be at least 2, got {m}"));
    }
    if len < 1 {
        return invalid("check at least one position");
    }
    let c = C_SLACK * 2.0 * f_large(format) / delta(m);
    let head = ModHead::new(m, r, c, format)?;
    let first_failure = (1..=len).find(|&i| {
        let want = if i % m == r % m { 1.0 } else { 0.0 };
        head.output(i) != want
    });
    Ok(ModCheck {
        m,
        r,
        format,
        c,
        len,
        first_failure,
    })
}

/// Certified range of the fixed-offset head C cos(g (i - k - j)) in `format`: the largest L
/// (up to `cap`) such that for every query i in k..=L the realised score of key i - k beats
/// every other key j <= i by at least f_large. `None` means no failure up to `cap`.
pub fn offset_range(
    g: f64,
    c: f64,
    k: usize,
    format: NumberFormat,
    cap: usize,
) -> Result<Option<usize>> {
    // Past one turn a rotation is another's (g and g - 2 pi turn alike), and its angles
    // g t leave f64's precision long before the search ends.
    if !(g.is_finite() && g > 0.0 && g <= std::f64::consts::TAU) {
        return invalid(format!(
            "the rotation g must lie in (0, 2 pi] radians per position, got {}",
            ropelab_model::number_text(g)
        ));
    }
    if !(c.is_finite() && c > 0.0) {
        return invalid(format!("the scale C must be positive, got {c}"));
    }
    // A scale the format cannot hold makes every score infinite: nothing is certified.
    if !format.round(c).is_finite() {
        return invalid(format!(
            "the scale C = {c:.1} overflows {format}: its scores would be infinite; choose a \
             smaller scale"
        ));
    }
    let fl = f_large(format);
    let score = |t: i64| format.round(c * format.round((g * t as f64).cos()));
    let winner = score(0);
    // Rivals at t = i - k - j: t in [-k, -1] for every query, and t in [1, i - k] as i grows.
    let mut best_rival = (1..=k as i64)
        .map(|t| score(-t))
        .fold(f64::NEG_INFINITY, f64::max);
    for i in k..=cap {
        let t = (i - k) as i64;
        if t >= 1 {
            best_rival = best_rival.max(score(t));
        }
        if winner - best_rival < fl {
            return Ok(Some(i.saturating_sub(1)));
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn f_large_per_format() {
        // f32 and bf16 underflow below about 2^-149 / 2^-133; f16 below 2^-24.
        let f32_large = f_large(NumberFormat::F32);
        assert!((103.0..104.5).contains(&f32_large), "{f32_large}");
        let f16_large = f_large(NumberFormat::F16);
        assert!((16.5..17.5).contains(&f16_large), "{f16_large}");
        let bf = f_large(NumberFormat::Bf16);
        assert!((91.0..94.0).contains(&bf), "{bf}");
    }

    #[test]
    fn mod_construction_is_exact_for_every_position() {
        for format in [NumberFormat::F32, NumberFormat::Bf16] {
            for (m, r) in [(2, 0), (2, 1), (3, 2), (5, 1), (7, 0)] {
                let check = check_mod(m, r, format, 1_000_000).unwrap();
                assert_eq!(check.first_failure, None, "{check:?}");
            }
        }
    }

    #[test]
    fn without_slack_rounding_can_break_the_edge_case() {
        // At C = 2 f_large / delta_m exactly, the rival's exp(-f_large) may not round to 0.
        let c = 2.0 * f_large(NumberFormat::F32) / delta(2);
        let want = |i: usize| f64::from(u8::from(i.is_multiple_of(2)));
        let edge = ModHead::new(2, 0, c, NumberFormat::F32).unwrap();
        let slack = ModHead::new(2, 0, C_SLACK * c, NumberFormat::F32).unwrap();
        let exact = (1..=10).all(|i| edge.output(i) == want(i));
        let with_slack = (1..=10).all(|i| slack.output(i) == want(i));
        assert!(with_slack);
        assert!(
            !exact,
            "the edge case held exactly; the slack would be unnecessary"
        );
    }

    #[test]
    fn periodic_tables_repeat() {
        let s = PeriodicSchedule::uniform(&[3, 5]).unwrap();
        for i in 0..50 {
            assert_eq!(s.angle(0, i), s.angle(0, i + 3));
            assert_eq!(s.angle(1, i), s.angle(1, i + 5 * 7));
        }
        assert!(PeriodicSchedule::uniform(&[1]).is_err());
    }

    #[test]
    fn conventional_rotation_has_a_finite_certified_range() {
        // g = 1 rad: 1 - cos(g t) gets small at t = 6, 44, 355, ... (2 pi t approximations).
        let c = 2.0 * f_large(NumberFormat::F32) / (1.0 - 1f64.cos());
        let range = offset_range(1.0, c, 4, NumberFormat::F32, 1_000_000).unwrap();
        let l = range.expect("finite");
        assert!((4..1_000_000).contains(&l), "{l}");
        // A larger C certifies a longer (still finite) range.
        let longer = offset_range(1.0, 10.0 * c, 4, NumberFormat::F32, 1_000_000).unwrap();
        assert!(longer.is_none_or(|x| x >= l), "{longer:?} vs {l}");
        assert!(offset_range(0.0, 1.0, 1, NumberFormat::F32, 10).is_err());
        assert!(offset_range(1.0, -1.0, 1, NumberFormat::F32, 10).is_err());
    }
}

/// Largest period m of [`mod_table`]: a table has m rows, each a head with an m-entry
/// rotation table.
pub const MAX_PERIOD: usize = 1 << 12;

/// Most positions [`mod_table`] checks per head.
pub const MAX_POSITIONS: usize = 1 << 24;

/// [`check_mod`] for every format, period m and residue r in 0..m (one CSV row each).
pub fn mod_table(periods: &[usize], formats: &[NumberFormat], len: usize) -> Result<Vec<ModCheck>> {
    if let Some(m) = periods.iter().find(|&&m| m > MAX_PERIOD) {
        return invalid(format!(
            "the period m must be at most {MAX_PERIOD} (one row per residue), got {m}"
        ));
    }
    if len > MAX_POSITIONS {
        return invalid(format!(
            "check at most {MAX_POSITIONS} positions per head, got {len}"
        ));
    }
    let mut rows = vec![];
    for &format in formats {
        for &m in periods {
            for r in 0..m.max(1) {
                rows.push(check_mod(m, r, format, len)?);
            }
        }
    }
    Ok(rows)
}

/// The certified look-back range of one fixed-offset head (one CSV row).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct OffsetRangeRow {
    /// Rotation per position (radians).
    #[serde(serialize_with = "ropelab_io::csv_rows::display")]
    pub g: f64,
    /// The offset looked back.
    pub k: usize,
    /// Score scale C.
    #[serde(serialize_with = "ropelab_io::csv_rows::display")]
    pub c: f64,
    /// Number format.
    #[serde(serialize_with = "name")]
    pub format: NumberFormat,
    /// Certified range (None: no failure up to the cap). Below k it certifies no query: the
    /// head fails at its first, i = k (see `certifies`).
    pub certified_range: Option<usize>,
    /// Whether the range certifies any query (false: it fails at i = k already), so the table
    /// read alone cannot pass a vacuous range for a length (twenty-third pass, N4).
    pub certifies: bool,
}

/// [`offset_range`] for every rotation g and every multiple `scale` of the minimal scale
/// C_min = 2 f_large / (1 - cos g) (below it the realised scores cannot separate neighbours).
pub fn offset_table(
    rotations: &[f64],
    k: usize,
    scales: &[f64],
    format: NumberFormat,
    cap: usize,
) -> Result<Vec<OffsetRangeRow>> {
    if k == 0 {
        return invalid("the offset k must be at least 1 (k = 0 is the query's own position)");
    }
    if cap <= k {
        return invalid(format!(
            "the longest range searched (cap {cap}) must exceed the offset k = {k}: no query \
             position would be checked"
        ));
    }
    // A multiple is checked as given, before it scales the minimal C (a negative multiple is
    // named as such, not as the product; eighth pass, X080, X081).
    if let Some(s) = scales
        .iter()
        .find(|s| !(s.is_finite() && **s > 0.0 && **s <= 1e12))
    {
        return invalid(format!(
            "a scale multiple must lie in (0, 1e12], got {}",
            ropelab_model::number_text(*s)
        ));
    }
    // A rotation of whole turns per position leaves every position's score equal: the minimal
    // scale 2 f_large / (1 - cos g) does not exist.
    if let Some(g) = rotations
        .iter()
        .find(|g| g.is_finite() && **g > 0.0 && 1.0 - g.cos() <= f64::EPSILON)
    {
        // A tiny g is no whole turn: say which (ninth pass, U-b).
        let why = if *g < 1.0 {
            "is too small a turn: 1 - cos g rounds to 0 in f64"
        } else {
            "turns a whole number of times per position (1 - cos g = 0)"
        };
        return invalid(format!(
            "the rotation g = {} {why}: no offset can be told apart",
            ropelab_model::number_text(*g)
        ));
    }
    let fl = f_large(format);
    let mut rows = vec![];
    for &g in rotations {
        for &scale in scales {
            let c = scale * 2.0 * fl / (1.0 - g.cos());
            let certified_range = offset_range(g, c, k, format, cap)?;
            rows.push(OffsetRangeRow {
                g,
                k,
                c,
                format,
                certified_range,
                certifies: certified_range.is_none_or(|l| l >= k),
            });
        }
    }
    Ok(rows)
}

/// Defaults of the periodic-RoPE check ([`mod_table`]).
pub mod mod_defaults {
    use crate::format::NumberFormat;
    /// Periods checked.
    pub const PERIODS: [usize; 3] = [2, 3, 5];
    /// Formats checked.
    pub const FORMATS: [NumberFormat; 2] = [NumberFormat::F32, NumberFormat::Bf16];
    /// Positions checked, 1..=LEN.
    pub const LEN: usize = 1_000_000;
}

/// Defaults of the fixed-offset range search ([`offset_table`]).
pub mod offset_defaults {
    use crate::format::NumberFormat;
    /// Rotations g (radians per position).
    pub const ROTATIONS: [f64; 3] = [1.0, 0.5, 0.1];
    /// The offset looked back.
    pub const K: usize = 4;
    /// Multiples of the minimal scale.
    pub const SCALES: [f64; 3] = [1.0, 10.0, 100.0];
    /// Number format.
    pub const FORMAT: NumberFormat = NumberFormat::F32;
    /// Longest range searched.
    pub const CAP: usize = 10_000_000;
}
