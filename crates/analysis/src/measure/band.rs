//! Frequency bands of a rotary head's planes (docs/canonical.md): which planes a head may use,
//! at training (`ropelab canonical`, a plane mask) or at evaluation (`ropelab mask`, a plane
//! restriction). Planes are numbered from the fastest (plane 0); a head's unrotated dims pair
//! up after its rotary planes with rate 0.

use std::fmt;
use std::str::FromStr;

use ropelab_model::PlaneMask;

use crate::{AnalysisError, Result};

/// A set of planes named by frequency.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Band {
    /// Every plane.
    All,
    /// The high-frequency planes: those turning by at least half a circle over the context
    /// (theta_k * len >= pi), so no fixed sign of their cosine spans it.
    High,
    /// The low-frequency planes: those turning by less than one radian over the context
    /// (theta_k * len < 1). Planes in between belong to neither.
    Low,
    /// Named planes.
    Planes(Vec<usize>),
    /// Every plane but those of the inner band (`no-high`: high frequencies removed).
    Except(Box<Band>),
}

fn bad<T>(message: String) -> Result<T> {
    Err(AnalysisError::Invalid(message))
}

impl Band {
    /// Planes in the band (ascending), given the plane rates (fastest first) and the context
    /// length; an error names a plane that does not exist or an empty band.
    pub fn planes(&self, rates: &[f64], len: usize) -> Result<Vec<usize>> {
        let (high, low) = split(rates, len);
        let out: Vec<usize> = match self {
            Band::All => (0..rates.len()).collect(),
            Band::High => (0..high).collect(),
            Band::Low => (low..rates.len()).collect(),
            Band::Planes(p) => {
                if let Some(bad_plane) = p.iter().find(|&&p| p >= rates.len()) {
                    return bad(format!(
                        "band planes={}: plane {bad_plane} does not exist (the head has planes 0-{})",
                        ranges(p),
                        rates.len().saturating_sub(1)
                    ));
                }
                p.clone()
            }
            Band::Except(inner) => {
                let drop = inner.planes(rates, len)?;
                (0..rates.len()).filter(|p| !drop.contains(p)).collect()
            }
        };
        if out.is_empty() {
            return bad(format!("band {self} holds no plane"));
        }
        Ok(out)
    }

    /// The plane mask of the band: R for its planes, Z for the others.
    pub fn mask(&self, rates: &[f64], len: usize) -> Result<PlaneMask> {
        let keep = self.planes(rates, len)?;
        let text: String = (0..rates.len())
            .map(|p| if keep.contains(&p) { 'R' } else { 'Z' })
            .collect();
        text.parse().map_err(AnalysisError::Invalid)
    }
}

/// The band edges for rates in decreasing order: (h, l) with planes 0..h turning by at least
/// pi over `len` positions (the high band) and planes l.. by less than 1 radian (the low band);
/// each band keeps at least one plane.
pub fn split(rates: &[f64], len: usize) -> (usize, usize) {
    let turn = |g: f64| g * len as f64;
    let n = rates.len();
    let high = rates
        .iter()
        .filter(|&&g| turn(g) >= std::f64::consts::PI)
        .count()
        .clamp(1, n.saturating_sub(1).max(1));
    let low = rates
        .iter()
        .position(|&g| turn(g) < 1.0)
        .unwrap_or(n.saturating_sub(1))
        .clamp(high, n.saturating_sub(1).max(high));
    (high, low)
}

/// The bands of a sweep: all, high, low, then windows of `width` consecutive planes sliding by
/// `width / 2` (at least 1).
pub fn sweep(planes: usize, width: usize) -> Vec<Band> {
    let mut out = vec![Band::All, Band::High, Band::Low];
    let width = width.clamp(1, planes.max(1));
    let stride = (width / 2).max(1);
    let mut start = 0;
    while start + width <= planes {
        out.push(Band::Planes((start..start + width).collect()));
        start += stride;
    }
    out
}

/// `p` (ascending) with runs written as ranges (`0-100,105`), for a message (tenth pass).
fn ranges(p: &[usize]) -> String {
    let mut parts: Vec<String> = vec![];
    let mut i = 0;
    while i < p.len() {
        let mut j = i;
        while j + 1 < p.len() && p[j + 1] == p[j] + 1 {
            j += 1;
        }
        parts.push(if j > i {
            format!("{}-{}", p[i], p[j])
        } else {
            p[i].to_string()
        });
        i = j + 1;
    }
    parts.join(",")
}

fn join(p: &[usize]) -> String {
    p.iter()
        .map(|x| x.to_string())
        .collect::<Vec<_>>()
        .join(",")
}

impl fmt::Display for Band {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Band::All => f.write_str("all"),
            Band::High => f.write_str("high"),
            Band::Low => f.write_str("low"),
            Band::Planes(p) => write!(f, "planes={}", join(p)),
            Band::Except(inner) => write!(f, "no-{inner}"),
        }
    }
}

impl FromStr for Band {
    type Err = AnalysisError;
    /// `all`, `high`, `low`, `planes=0,1,5` (also `planes=0-3`), or any of them after `no-`
    /// (every plane but those).
    fn from_str(s: &str) -> Result<Self> {
        let s = s.trim();
        if let Some(inner) = s.strip_prefix("no-") {
            return match inner.parse()? {
                Band::All => bad(format!("band {s:?} holds no plane")),
                Band::Except(_) => bad(format!("band {s:?}: write the planes to keep instead")),
                b => Ok(Band::Except(Box::new(b))),
            };
        }
        match s {
            "all" => Ok(Band::All),
            "high" => Ok(Band::High),
            "low" => Ok(Band::Low),
            other => {
                let Some(list) = other.strip_prefix("planes=") else {
                    return bad(format!(
                        "unknown band {other:?} (expected all, high, low, planes=LIST or no-BAND)"
                    ));
                };
                let mut planes = vec![];
                for part in list.split(',') {
                    // A negative plane reads as a range from nothing: named as itself
                    // (twenty-third pass, CB5).
                    if part.trim().starts_with('-') {
                        return bad(format!(
                            "band {other:?}: {:?} is not a plane number (planes count from 0)",
                            part.trim()
                        ));
                    }
                    let num = |t: &str| -> Result<usize> {
                        t.trim().parse().map_err(|_| {
                            AnalysisError::Invalid(format!(
                                "band {other:?}: {t:?} is not a plane number"
                            ))
                        })
                    };
                    match part.split_once('-') {
                        Some((a, b)) => {
                            let (a, b) = (num(a)?, num(b)?);
                            if a > b {
                                return bad(format!("band {other:?}: {part:?} runs backwards"));
                            }
                            planes.extend(a..=b);
                        }
                        None => planes.push(num(part)?),
                    }
                }
                planes.sort_unstable();
                if let Some(w) = planes.windows(2).find(|w| w[0] == w[1]) {
                    return bad(format!(
                        "band {other:?}: plane {} is given twice (a repeated value or \
                         overlapping ranges)",
                        w[0]
                    ));
                }
                Ok(Band::Planes(planes))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bands_parse_split_and_mask() {
        // 8 planes turning by 1, 0.316, 0.1, 0.0316, ... radians per position.
        let rates = ropelab_model::rope::frequencies(1e4, 16);
        // Over 16 positions: theta >= pi / 16 = 0.196 for 1 and 0.316 (high), theta < 1 / 16 =
        // 0.0625 from 0.0316 on (low); plane 2 (0.1) is in neither.
        assert_eq!(split(&rates, 16), (2, 3));
        assert_eq!(Band::High.planes(&rates, 16).unwrap(), vec![0, 1]);
        assert_eq!(
            Band::Low.planes(&rates, 16).unwrap(),
            (3..8).collect::<Vec<_>>()
        );
        let mask = Band::Low.mask(&rates, 16).unwrap();
        assert_eq!(mask.len(), 8);
        assert_eq!(mask, "ZZZRRRRR".parse().unwrap());
        assert_eq!(
            "planes=0-2,5".parse::<Band>().unwrap(),
            Band::Planes(vec![0, 1, 2, 5])
        );
        assert_eq!(Band::Planes(vec![0, 5]).to_string(), "planes=0,5");
        let err = Band::Planes(vec![9])
            .planes(&rates, 16)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("plane 9 does not exist (the head has planes 0-7)"),
            "{err}"
        );
        for bad in [
            "mid",
            "planes=",
            "planes=3-1",
            "planes=3,3",
            "planes=0-2,1",
            "planes=x",
            "no-all",
            "no-no-high",
        ] {
            assert!(bad.parse::<Band>().is_err(), "{bad}");
        }
        // A negative plane is quoted as written, not as "" (twenty-third pass, CB5).
        let err = "planes=-1".parse::<Band>().unwrap_err().to_string();
        assert!(err.contains("\"-1\" is not a plane number"), "{err}");
        let s = sweep(8, 4);
        assert_eq!(s.len(), 3 + 3);
        assert_eq!(s[3], Band::Planes(vec![0, 1, 2, 3]));
        assert_eq!(s[5], Band::Planes(vec![4, 5, 6, 7]));
    }

    #[test]
    fn removing_a_band_keeps_the_rest() {
        let rates = ropelab_model::rope::frequencies(1e4, 16);
        let no_high: Band = "no-high".parse().unwrap();
        assert_eq!(no_high.to_string(), "no-high");
        assert_eq!(
            no_high.planes(&rates, 16).unwrap(),
            (2..8).collect::<Vec<_>>()
        );
        let no_low: Band = "no-low".parse().unwrap();
        assert_eq!(no_low.planes(&rates, 16).unwrap(), vec![0, 1, 2]);
        let some: Band = "no-planes=0,7".parse().unwrap();
        assert_eq!(some.planes(&rates, 16).unwrap(), (1..7).collect::<Vec<_>>());
        assert!(Band::Except(Box::new(Band::Planes((0..8).collect())))
            .planes(&rates, 16)
            .is_err());
        // Unrotated planes (rate 0) fall into the low band.
        let mut partial = ropelab_model::rope::frequencies(1e4, 8);
        partial.extend([0.0, 0.0]);
        assert_eq!(Band::Low.planes(&partial, 16).unwrap(), vec![2, 3, 4, 5]);
    }
}
