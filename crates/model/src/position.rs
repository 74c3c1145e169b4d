//! Position encodings (docs/model.md#position-encodings): one enum for every scheme a layer or
//! the embeddings can use, and [`Rotation`], the one description of what a rotary encoding does
//! to q and k (a turn and a gain per plane) that the composed path, the fused kernel and the
//! analyses all read.

use serde::{Deserialize, Serialize};

use crate::{ModelError, Result};

/// Which dimensions of a head a rotary plane pairs up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RopeLayout {
    /// GPT-J: plane k is dims (2k, 2k + 1).
    Interleaved,
    /// NeoX / Llama: plane k is dims (k, k + rotary_dim / 2).
    HalfSplit,
}

/// How a layer encodes positions. Rotary kinds act on q and k inside attention; the absolute
/// kinds (`sinusoidal`, `periodic_sinusoidal`, `learned`) are added to the token embeddings once
/// and are only valid as the model-wide `position` (their layers then rotate nothing).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum PositionEncoding {
    /// No position encoding (NoPE): logits depend on content only.
    None,
    /// Rotary: plane k of the first `rotary_dim` dims of q and k is rotated by
    /// `pos * base^(-2k / rotary_dim)`; the other dims pass through.
    Rope {
        /// Frequency base (10,000 in GPT-J); any positive finite value (1e-12 .. 1e12 tested).
        base: f64,
        /// Number of rotated dims (even, at most d_head).
        rotary_dim: usize,
        /// Which dims form a plane.
        layout: RopeLayout,
        /// Which planes rotate, stay unrotated or are zeroed (empty: all rotate).
        #[serde(default, skip_serializing_if = "PlaneMask::is_empty")]
        planes: PlaneMask,
    },
    /// Rotary with explicit plane frequencies: plane k of the first `2 * thetas.len()` dims
    /// turns by `pos * thetas[k]` (e.g. the single-angle heads of the theory).
    Angles {
        /// Radians per position, one per plane.
        thetas: Vec<f64>,
        /// Which dims form a plane.
        layout: RopeLayout,
        /// Which planes rotate, stay unrotated or are zeroed (empty: all rotate).
        #[serde(default, skip_serializing_if = "PlaneMask::is_empty")]
        planes: PlaneMask,
    },
    /// Periodic rotary (the expressivity paper): plane d of the first `2 * periods.len()` dims
    /// turns by `T_d(pos mod m_d)`, a lookup table per plane, so its rotations repeat exactly.
    Periodic {
        /// Period m_d of each plane (at least 1).
        periods: Vec<usize>,
        /// The tables T_d: a name (`uniform`: T_m(s) = 2 pi s / m, the MOD_m construction's) or
        /// one list of m_d angles per plane.
        #[serde(default)]
        tables: PeriodicTables,
        /// Which dims form a plane.
        layout: RopeLayout,
        /// Which planes rotate, stay unrotated or are zeroed (empty: all rotate).
        #[serde(default, skip_serializing_if = "PlaneMask::is_empty")]
        planes: PlaneMask,
    },
    /// Sinusoidal absolute encoding (SiPE, Vaswani et al.) added to the embeddings: dims
    /// (2k, 2k + 1) of position `pos` are (sin, cos) of `pos * base^(-2k / d_model)`.
    Sinusoidal {
        /// Frequency base (10,000 in the original Transformer).
        base: f64,
    },
    /// Periodic sinusoidal absolute encoding: dims (2d, 2d + 1) are (sin, cos) of
    /// `T_d(pos mod m_d)`; the dims after `2 * periods.len()` are 0.
    PeriodicSinusoidal {
        /// Period m_d of each plane (at least 1).
        periods: Vec<usize>,
        /// The tables T_d (as for `periodic`).
        #[serde(default)]
        tables: PeriodicTables,
    },
    /// Learned absolute encoding (APE, GPT-2's `wpe`): one trained vector per position below
    /// `max_len`, added to the embeddings.
    Learned {
        /// Positions with a trained vector (the longest training input).
        max_len: usize,
        /// What a position at or beyond `max_len` gets.
        #[serde(default)]
        beyond: Beyond,
    },
}

/// What a learned absolute encoding does at a position it has no vector for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Beyond {
    /// Refuse the input with an error naming the position and `max_len`.
    #[default]
    Error,
    /// Reuse the last trained vector (position `max_len - 1`).
    Clamp,
}

// Inside the internally tagged `PositionEncoding`, TOML errors lose the key, so these two
// say it themselves.
impl<'de> Deserialize<'de> for Beyond {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        match String::deserialize(d)?.as_str() {
            "error" => Ok(Beyond::Error),
            "clamp" => Ok(Beyond::Clamp),
            other => Err(serde::de::Error::custom(format!(
                "beyond = {other:?}: expected \"error\" or \"clamp\""
            ))),
        }
    }
}

impl<'de> Deserialize<'de> for PeriodicTables {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Either {
            Named(String),
            Explicit(Vec<Vec<f64>>),
        }
        match Either::deserialize(d) {
            Ok(Either::Named(n)) => Ok(PeriodicTables::Named(n)),
            Ok(Either::Explicit(t)) => Ok(PeriodicTables::Explicit(t)),
            Err(_) => Err(serde::de::Error::custom(format!(
                "tables: expected a table name ({}) or one list of angles per plane",
                PeriodicTables::NAMES.join(", ")
            ))),
        }
    }
}

/// The lookup tables of a periodic encoding: by name or explicit.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum PeriodicTables {
    /// A named family (see [`PeriodicTables::NAMES`]).
    Named(String),
    /// One list of angles (radians) per plane, `periods[d]` entries for plane d.
    Explicit(Vec<Vec<f64>>),
}

impl Default for PeriodicTables {
    fn default() -> Self {
        PeriodicTables::Named("uniform".into())
    }
}

impl PeriodicTables {
    /// The named tables: `uniform`, T_m(s) = 2 pi s / m (spec of the MOD_m construction).
    pub const NAMES: [&'static str; 1] = ["uniform"];

    /// How each plane of `periods` turns (checked first by [`PositionEncoding::check`]): a
    /// named table is computed per position ([`Turn::Uniform`]), an explicit one is held.
    pub fn turns(&self, periods: &[usize]) -> Vec<Turn> {
        match self {
            PeriodicTables::Named(_) => periods.iter().map(|&m| Turn::Uniform(m)).collect(),
            PeriodicTables::Explicit(t) => t.iter().cloned().map(Turn::Table).collect(),
        }
    }

    fn check(&self, periods: &[usize], key: &str) -> Result<()> {
        match self {
            PeriodicTables::Named(name) if !Self::NAMES.contains(&name.as_str()) => bad(format!(
                "{key}.tables: unknown table {name:?} (known: {})",
                Self::NAMES.join(", ")
            )),
            PeriodicTables::Named(_) => Ok(()),
            PeriodicTables::Explicit(tables) => {
                if tables.len() != periods.len() {
                    return bad(format!(
                        "{key}.tables has {} tables for {} periods",
                        tables.len(),
                        periods.len()
                    ));
                }
                for (d, (t, &m)) in tables.iter().zip(periods).enumerate() {
                    if t.len() != m {
                        return bad(format!(
                            "{key}.tables[{d}] has {} entries, its period is {m}",
                            t.len()
                        ));
                    }
                    if let Some(a) = t.iter().find(|a| !a.is_finite()) {
                        return bad(format!("{key}.tables[{d}] holds a non-finite angle {a}"));
                    }
                }
                Ok(())
            }
        }
    }
}

/// What a rotary plane does in the frequency masking of the canonical-task paper.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlaneMode {
    /// Turns with position (`R`).
    Rotate,
    /// Passes through unrotated (`K`).
    Keep,
    /// Is zeroed in q and k (`Z`): the plane adds nothing to the logits.
    Zero,
}

impl PlaneMode {
    fn letter(self) -> char {
        match self {
            PlaneMode::Rotate => 'R',
            PlaneMode::Keep => 'K',
            PlaneMode::Zero => 'Z',
        }
    }
}

/// The per-plane modes of a rotary encoding, written as one letter per plane from plane 0
/// (`R` rotate, `K` keep unrotated, `Z` zero; case-insensitive), e.g. `"RRRRZZZZ"`. Planes past
/// the end of the mask rotate. Usable at training and at evaluation (a config or a checkpoint's
/// config edited before `eval`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PlaneMask(Vec<PlaneMode>);

impl PlaneMask {
    /// The mode of every plane listed.
    pub fn modes(&self) -> &[PlaneMode] {
        &self.0
    }

    /// Number of planes listed.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether the mask lists no plane (every plane rotates).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The mode of plane `p` (planes past the end rotate).
    pub fn mode(&self, p: usize) -> PlaneMode {
        self.0.get(p).copied().unwrap_or(PlaneMode::Rotate)
    }
}

impl std::str::FromStr for PlaneMask {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        s.chars()
            .map(|c| match c.to_ascii_uppercase() {
                'R' => Ok(PlaneMode::Rotate),
                'K' => Ok(PlaneMode::Keep),
                'Z' => Ok(PlaneMode::Zero),
                other => Err(format!(
                    "plane mask {s:?}: {other:?} is not R (rotate), K (keep) or Z (zero)"
                )),
            })
            .collect::<std::result::Result<Vec<_>, _>>()
            .map(PlaneMask)
    }
}

impl std::fmt::Display for PlaneMask {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.iter().try_for_each(|m| write!(f, "{}", m.letter()))
    }
}

impl Serialize for PlaneMask {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for PlaneMask {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// How one rotary plane turns with position.
#[derive(Debug, Clone, PartialEq)]
pub enum Turn {
    /// `pos * rate` radians (conventional RoPE; relative: R(i)^T R(j) = R(j - i)).
    Rate(f64),
    /// `table[pos mod table.len()]` radians (periodic RoPE).
    Table(Vec<f64>),
    /// `2 pi (pos mod m) / m` radians: the `uniform` table of period m, computed per position
    /// rather than held (a period of 1e12 is a valid encoding but no table; twentieth pass,
    /// P1). Bit for bit the table's entries.
    Uniform(usize),
}

impl Turn {
    /// The angle at `pos`, in f64. A rate's angle is the f64 product `pos * rate` (its sine and
    /// cosine are then taken in f64, which reduces any magnitude mod 2 pi exactly; only the
    /// result is rounded to f32).
    pub fn angle(&self, pos: usize) -> f64 {
        match self {
            Turn::Rate(g) => pos as f64 * g,
            Turn::Table(t) => t[pos % t.len()],
            Turn::Uniform(m) => uniform_angle(pos % m, *m),
        }
    }
}

/// What a rotary encoding does to q and k: plane p (dims `pairs()[p]`) is turned by
/// `turns[p].angle(pos)` and scaled by `gains[p]` (1, or 0 for a zeroed plane), i.e. multiplied
/// by `gain * [[cos, -sin], [sin, cos]]`. Dims outside the planes pass through.
#[derive(Debug, Clone, PartialEq)]
pub struct Rotation {
    /// How each plane turns.
    pub turns: Vec<Turn>,
    /// The scale of each plane (0 or 1).
    pub gains: Vec<f64>,
    /// Number of dims in planes (2 per plane).
    pub rotary_dim: usize,
    /// Which dims form a plane.
    pub layout: RopeLayout,
}

impl Rotation {
    fn new(turns: Vec<Turn>, layout: RopeLayout, mask: &PlaneMask) -> Self {
        let (turns, gains) = turns
            .into_iter()
            .enumerate()
            .map(|(p, turn)| match mask.mode(p) {
                PlaneMode::Rotate => (turn, 1.0),
                PlaneMode::Keep => (Turn::Rate(0.0), 1.0),
                PlaneMode::Zero => (Turn::Rate(0.0), 0.0),
            })
            .unzip::<_, _, Vec<_>, Vec<_>>();
        Self {
            rotary_dim: 2 * turns.len(),
            turns,
            gains,
            layout,
        }
    }

    /// Number of planes.
    pub fn planes(&self) -> usize {
        self.turns.len()
    }

    /// The dims (i, j) of every plane, in plane order.
    pub fn pairs(&self) -> Vec<(usize, usize)> {
        (0..self.planes())
            .map(|p| crate::rope::plane_dims(self.layout, self.rotary_dim, p))
            .collect()
    }

    /// `gain * cos` and `gain * sin` of every plane's angle at `pos`, in f64.
    pub fn cos_sin_at(&self, pos: usize) -> (Vec<f64>, Vec<f64>) {
        self.turns
            .iter()
            .zip(&self.gains)
            .map(|(turn, &gain)| {
                let (s, c) = turn.angle(pos).sin_cos();
                (gain * c, gain * s)
            })
            .unzip()
    }

    /// `gain * cos` and `gain * sin` for each position (rows) and plane (columns), computed in
    /// f64 for any position (no table length) and rounded once to f32: flat [positions, planes].
    /// The one angle table of the crate (the candle path and the fused kernel both use it).
    pub fn table(&self, positions: impl IntoIterator<Item = usize>) -> (Vec<f32>, Vec<f32>) {
        let (mut cos, mut sin) = (Vec::new(), Vec::new());
        for pos in positions {
            let (c, s) = self.cos_sin_at(pos);
            cos.extend(c.into_iter().map(|v| v as f32));
            sin.extend(s.into_iter().map(|v| v as f32));
        }
        (cos, sin)
    }

    /// The plane rates when every plane turns at a constant rate with gain 1 (plain RoPE), the
    /// case the relative-position analyses assume; `None` otherwise.
    pub fn rates(&self) -> Option<Vec<f64>> {
        self.turns
            .iter()
            .zip(&self.gains)
            .map(|(t, &g)| match t {
                Turn::Rate(r) if g == 1.0 => Some(*r),
                _ => None,
            })
            .collect()
    }
}

fn bad<T>(message: String) -> Result<T> {
    Err(ModelError::Config(message))
}

/// Entry `s` of the `uniform` table of period `m`: 2 pi s / m.
fn uniform_angle(s: usize, m: usize) -> f64 {
    std::f64::consts::TAU * s as f64 / m as f64
}

/// Checks periods: at least one, each at least 1.
fn check_periods(periods: &[usize], key: &str) -> Result<()> {
    if periods.is_empty() {
        return bad(format!("{key}.periods must list at least one period"));
    }
    if let Some(d) = periods.iter().position(|&m| m == 0) {
        return bad(format!(
            "{key}.periods[{d}] is 0; a period must be at least 1"
        ));
    }
    Ok(())
}

/// `x` as a message prints it: plainly, or in exponent form when very large or small (never
/// 300 digits).
pub fn number_text(x: f64) -> String {
    let a = x.abs();
    if a.is_finite() && a != 0.0 && !(1e-4..1e6).contains(&a) {
        format!("{x:e}")
    } else {
        format!("{x}")
    }
}

/// The bases a position encoding accepts: 1e-12 to 1e12, the range the tests cover (beyond it
/// `base^(-2k/d)` leaves f64's precision for the rotations the lens computes).
pub const BASE_RANGE: (f64, f64) = (1e-12, 1e12);

fn check_base(base: f64, key: &str) -> Result<()> {
    let (lo, hi) = BASE_RANGE;
    if !(base.is_finite() && (lo..=hi).contains(&base)) {
        return bad(format!(
            "{key}.base must lie in [{lo:e}, {hi:e}], got {}",
            number_text(base)
        ));
    }
    Ok(())
}

impl PositionEncoding {
    /// GPT-J's default: base 10,000, interleaved, `rotary_dim` dims, every plane rotating.
    pub fn gptj(rotary_dim: usize) -> Self {
        Self::rope(
            crate::rope::DEFAULT_BASE,
            rotary_dim,
            RopeLayout::Interleaved,
        )
    }

    /// RoPE with `base`, `rotary_dim` and `layout`, every plane rotating.
    pub fn rope(base: f64, rotary_dim: usize, layout: RopeLayout) -> Self {
        PositionEncoding::Rope {
            base,
            rotary_dim,
            layout,
            planes: PlaneMask::default(),
        }
    }

    /// Explicit plane angles with `layout`, every plane rotating.
    pub fn angles(thetas: Vec<f64>, layout: RopeLayout) -> Self {
        PositionEncoding::Angles {
            thetas,
            layout,
            planes: PlaneMask::default(),
        }
    }

    /// The config's name of this kind (`rope`, `learned`, ...).
    pub fn kind(&self) -> &'static str {
        match self {
            PositionEncoding::None => "none",
            PositionEncoding::Rope { .. } => "rope",
            PositionEncoding::Angles { .. } => "angles",
            PositionEncoding::Periodic { .. } => "periodic",
            PositionEncoding::Sinusoidal { .. } => "sinusoidal",
            PositionEncoding::PeriodicSinusoidal { .. } => "periodic_sinusoidal",
            PositionEncoding::Learned { .. } => "learned",
        }
    }

    /// Whether this encoding is added to the embeddings (not applied inside attention).
    pub fn is_absolute(&self) -> bool {
        matches!(
            self,
            PositionEncoding::Sinusoidal { .. }
                | PositionEncoding::PeriodicSinusoidal { .. }
                | PositionEncoding::Learned { .. }
        )
    }

    /// The rotation applied to q and k, or `None` for encodings that rotate nothing.
    pub fn rotation(&self) -> Option<Rotation> {
        match self {
            PositionEncoding::Rope {
                base,
                rotary_dim,
                layout,
                planes,
            } => Some(Rotation::new(
                crate::rope::frequencies(*base, *rotary_dim)
                    .into_iter()
                    .map(Turn::Rate)
                    .collect(),
                *layout,
                planes,
            )),
            PositionEncoding::Angles {
                thetas,
                layout,
                planes,
            } => Some(Rotation::new(
                thetas.iter().copied().map(Turn::Rate).collect(),
                *layout,
                planes,
            )),
            PositionEncoding::Periodic {
                periods,
                tables,
                layout,
                planes,
            } => Some(Rotation::new(tables.turns(periods), *layout, planes)),
            _ => None,
        }
    }

    /// The two dims of plane `plane` (rotated planes follow the layout; the remaining dims pair
    /// up consecutively).
    pub fn plane_dims(&self, plane: usize) -> (usize, usize) {
        match self.rotation() {
            Some(r) => crate::rope::plane_dims(r.layout, r.rotary_dim, plane),
            None => (2 * plane, 2 * plane + 1),
        }
    }

    /// The added vectors of a sinusoidal encoding at `positions`, flat [positions, d_model]
    /// (computed in f64, rounded once); `None` for every other kind.
    pub fn sinusoid_table(
        &self,
        d_model: usize,
        positions: impl IntoIterator<Item = usize>,
    ) -> Option<Vec<f32>> {
        let turns: Vec<Turn> = match self {
            PositionEncoding::Sinusoidal { base } => crate::rope::frequencies(*base, d_model)
                .into_iter()
                .map(Turn::Rate)
                .collect(),
            PositionEncoding::PeriodicSinusoidal { periods, tables } => tables.turns(periods),
            _ => return None,
        };
        let mut out = Vec::new();
        for pos in positions {
            let start = out.len();
            for turn in &turns {
                let (s, c) = turn.angle(pos).sin_cos();
                out.extend([s as f32, c as f32]);
            }
            out.resize(start + d_model, 0.0);
        }
        Some(out)
    }

    /// The row of a learned encoding's table that position `pos` reads (`None` for other
    /// kinds); an error beyond `max_len` unless the encoding clamps.
    pub fn learned_row(&self, pos: usize) -> Result<Option<usize>> {
        let PositionEncoding::Learned { max_len, beyond } = *self else {
            return Ok(None);
        };
        if pos < max_len {
            return Ok(Some(pos));
        }
        match beyond {
            Beyond::Clamp => Ok(Some(max_len - 1)),
            Beyond::Error => bad(format!(
                "position {pos} is beyond the learned position encoding's max_len {max_len} \
                 (set beyond = \"clamp\" in the model's position table to reuse the last vector)"
            )),
        }
    }

    /// Checks every value for a model with `d_model` and `d_head`; `key` names the encoding in
    /// the config (`position`, `layer_positions[2]`) so the error names the offending key.
    pub fn check(&self, d_model: usize, d_head: usize, key: &str) -> Result<()> {
        let mask_fits = |planes: &PlaneMask, n: usize| {
            if planes.len() > n {
                return bad(format!(
                    "{key}.planes lists {} planes, but the head has {n} rotary planes",
                    planes.len()
                ));
            }
            Ok(())
        };
        let fits_head = |n_planes: usize, what: &str| {
            if 2 * n_planes > d_head {
                return bad(format!(
                    "{key}: {n_planes} {what} rotate {} dims, more than d_head {d_head}",
                    2 * n_planes
                ));
            }
            Ok(())
        };
        match self {
            PositionEncoding::None => Ok(()),
            PositionEncoding::Rope {
                base,
                rotary_dim,
                planes,
                ..
            } => {
                check_base(*base, key)?;
                if *rotary_dim == 0 || rotary_dim % 2 != 0 {
                    return bad(format!(
                        "{key}.rotary_dim must be even and at least 2, got {rotary_dim}"
                    ));
                }
                if *rotary_dim > d_head {
                    return bad(format!(
                        "{key}.rotary_dim {rotary_dim} is larger than d_head {d_head}"
                    ));
                }
                mask_fits(planes, rotary_dim / 2)
            }
            PositionEncoding::Angles { thetas, planes, .. } => {
                if thetas.is_empty() {
                    return bad(format!("{key}.thetas must list at least one angle"));
                }
                // Past a turn an angle is another's, and its rotations leave f64's precision.
                let turn = std::f64::consts::TAU;
                if let Some(k) = thetas.iter().position(|t| !(-turn..=turn).contains(t)) {
                    return bad(format!(
                        "{key}.thetas[{k}] is {}: every angle must lie in [-2 pi, 2 pi] radians \
                         per position",
                        number_text(thetas[k])
                    ));
                }
                fits_head(thetas.len(), "angles")?;
                mask_fits(planes, thetas.len())
            }
            PositionEncoding::Periodic {
                periods,
                tables,
                planes,
                ..
            } => {
                check_periods(periods, key)?;
                tables.check(periods, key)?;
                fits_head(periods.len(), "periodic planes")?;
                mask_fits(planes, periods.len())
            }
            PositionEncoding::Sinusoidal { base } => check_base(*base, key),
            PositionEncoding::PeriodicSinusoidal { periods, tables } => {
                check_periods(periods, key)?;
                tables.check(periods, key)?;
                if 2 * periods.len() > d_model {
                    return bad(format!(
                        "{key}: {} periodic planes need {} dims, more than d_model {d_model}",
                        periods.len(),
                        2 * periods.len()
                    ));
                }
                Ok(())
            }
            PositionEncoding::Learned { max_len, .. } => {
                if *max_len == 0 {
                    return bad(format!("{key}.max_len must be at least 1"));
                }
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn from_toml(text: &str) -> std::result::Result<PositionEncoding, String> {
        #[derive(Deserialize)]
        struct Wrap {
            position: PositionEncoding,
        }
        toml::from_str::<Wrap>(text)
            .map(|w| w.position)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn every_kind_round_trips_through_toml() {
        let kinds = [
            PositionEncoding::None,
            PositionEncoding::gptj(8),
            PositionEncoding::Rope {
                base: 1e-12,
                rotary_dim: 8,
                layout: RopeLayout::HalfSplit,
                planes: "RKZ".parse().unwrap(),
            },
            PositionEncoding::angles(vec![0.5, 2.0], RopeLayout::Interleaved),
            PositionEncoding::Periodic {
                periods: vec![2, 3],
                tables: PeriodicTables::default(),
                layout: RopeLayout::Interleaved,
                planes: PlaneMask::default(),
            },
            PositionEncoding::Periodic {
                periods: vec![2],
                tables: PeriodicTables::Explicit(vec![vec![0.0, 1.5]]),
                layout: RopeLayout::HalfSplit,
                planes: "z".parse().unwrap(),
            },
            PositionEncoding::Sinusoidal { base: 1e12 },
            PositionEncoding::PeriodicSinusoidal {
                periods: vec![4, 5],
                tables: PeriodicTables::default(),
            },
            PositionEncoding::Learned {
                max_len: 40,
                beyond: Beyond::Clamp,
            },
        ];
        #[derive(Serialize, Deserialize)]
        struct Wrap {
            position: PositionEncoding,
        }
        for p in kinds {
            let text = toml::to_string(&Wrap {
                position: p.clone(),
            })
            .unwrap();
            assert_eq!(from_toml(&text).unwrap(), p, "{text}");
            p.check(16, 8, "position").unwrap();
        }
    }

    #[test]
    fn a_mask_keeps_and_zeroes_planes() {
        let p = from_toml(
            "[position]\nkind = \"rope\"\nbase = 100.0\nrotary_dim = 8\nlayout = \"interleaved\"\n\
             planes = \"rkZ\"",
        )
        .unwrap();
        let r = p.rotation().unwrap();
        assert_eq!(r.gains, vec![1.0, 1.0, 0.0, 1.0]);
        let (cos, sin) = r.cos_sin_at(5);
        assert!((cos[0] - 5f64.cos()).abs() < 1e-15 && (sin[0] - 5f64.sin()).abs() < 1e-15);
        assert_eq!((cos[1], sin[1]), (1.0, 0.0), "kept: unrotated");
        assert_eq!((cos[2], sin[2]), (0.0, 0.0), "zeroed");
        let g3 = 100f64.powf(-6.0 / 8.0);
        assert!(
            (sin[3] - (5.0 * g3).sin()).abs() < 1e-15,
            "past the mask: rotates"
        );
        assert_eq!(r.rates(), None, "a masked rotation is not plain RoPE");
        assert!(from_toml("[position]\nkind = \"rope\"\nbase = 1.0\nrotary_dim = 2\nlayout = \"interleaved\"\nplanes = \"RX\"")
            .unwrap_err()
            .contains("is not R (rotate)"));
    }

    #[test]
    fn periodic_tables_repeat_with_their_period() {
        let p = PositionEncoding::Periodic {
            periods: vec![3, 1],
            tables: PeriodicTables::default(),
            layout: RopeLayout::Interleaved,
            planes: PlaneMask::default(),
        };
        let r = p.rotation().unwrap();
        for pos in 0..20 {
            let (c, s) = r.cos_sin_at(pos);
            let want = std::f64::consts::TAU * (pos % 3) as f64 / 3.0;
            assert!((c[0] - want.cos()).abs() < 1e-15 && (s[0] - want.sin()).abs() < 1e-15);
            assert_eq!((c[1], s[1]), (1.0, 0.0), "period 1, uniform: angle 0");
        }
    }

    /// A named table of any period is computed per position, equal bit for bit to the
    /// explicit table it names; a period of 1e12 holds no table (twentieth pass, P1: it
    /// allocated 8 TB and aborted).
    #[test]
    fn a_uniform_period_is_its_table_and_needs_no_memory() {
        let explicit: Vec<f64> = (0..7)
            .map(|s| std::f64::consts::TAU * s as f64 / 7.0)
            .collect();
        let named = Turn::Uniform(7);
        let table = Turn::Table(explicit);
        for pos in 0..30 {
            assert_eq!(named.angle(pos).to_bits(), table.angle(pos).to_bits());
        }
        let huge = PositionEncoding::Periodic {
            periods: vec![2, 1_000_000_000_000],
            tables: PeriodicTables::default(),
            layout: RopeLayout::Interleaved,
            planes: PlaneMask::default(),
        };
        let r = huge.rotation().unwrap();
        assert_eq!(r.turns[1], Turn::Uniform(1_000_000_000_000));
        let (c, _) = r.cos_sin_at(5);
        assert!(c.iter().all(|v| v.is_finite()));
        let sinusoid = PositionEncoding::PeriodicSinusoidal {
            periods: vec![1_000_000_000_000],
            tables: PeriodicTables::default(),
        };
        assert_eq!(sinusoid.sinusoid_table(2, [3]).unwrap().len(), 2);
    }

    #[test]
    fn sinusoids_follow_vaswani() {
        let p = PositionEncoding::Sinusoidal { base: 10_000.0 };
        let t = p.sinusoid_table(6, [0, 7]).unwrap();
        assert_eq!(&t[..6], &[0.0, 1.0, 0.0, 1.0, 0.0, 1.0]);
        for k in 0..3 {
            let a = 7.0 * 10_000f64.powf(-2.0 * k as f64 / 6.0);
            assert!((t[6 + 2 * k] as f64 - a.sin()).abs() < 1e-7);
            assert!((t[7 + 2 * k] as f64 - a.cos()).abs() < 1e-7);
        }
        let p = PositionEncoding::PeriodicSinusoidal {
            periods: vec![4],
            tables: PeriodicTables::default(),
        };
        let t = p.sinusoid_table(4, [5]).unwrap();
        assert!(
            (t[0] - 1.0).abs() < 1e-7 && t[1].abs() < 1e-7,
            "5 mod 4 = 1: a quarter turn"
        );
        assert_eq!(&t[2..], &[0.0, 0.0]);
    }

    #[test]
    fn learned_positions_beyond_max_len_error_or_clamp() {
        let mut p = PositionEncoding::Learned {
            max_len: 4,
            beyond: Beyond::Error,
        };
        assert_eq!(p.learned_row(3).unwrap(), Some(3));
        let err = p.learned_row(4).unwrap_err().to_string();
        assert!(
            err.contains("position 4") && err.contains("max_len 4"),
            "{err}"
        );
        p = PositionEncoding::Learned {
            max_len: 4,
            beyond: Beyond::Clamp,
        };
        assert_eq!(p.learned_row(1000).unwrap(), Some(3));
    }

    #[test]
    fn bad_values_name_the_key() {
        let err = |text: &str| {
            from_toml(text)
                .unwrap()
                .check(16, 8, "layer_positions[1]")
                .unwrap_err()
                .to_string()
        };
        let rope = "[position]\nkind = \"rope\"\nlayout = \"interleaved\"\nrotary_dim = 4\n";
        assert!(err(&format!("{rope}base = 100.0\nplanes = \"RRR\""))
            .contains("layer_positions[1].planes lists 3 planes, but the head has 2"));
        assert!(err(&format!("{rope}base = 0.0")).contains("layer_positions[1].base"));
        assert!(err(&format!("{rope}base = -1.0")).contains("must lie in [1e-12, 1e12]"));
        assert!(err(&format!("{rope}base = inf")).contains("must lie in"));
        assert!(err(&format!("{rope}base = 1e300")).contains("must lie in"));
        let periodic = "[position]\nkind = \"periodic\"\nlayout = \"interleaved\"\n";
        assert!(err(&format!("{periodic}periods = [2, 0]"))
            .contains("layer_positions[1].periods[1] is 0"));
        assert!(err(&format!(
            "{periodic}periods = [2, 3]\ntables = [[0.0, 1.0]]"
        ))
        .contains("1 tables for 2 periods"));
        assert!(err(&format!("{periodic}periods = [2]\ntables = [[0.0]]"))
            .contains("tables[0] has 1 entries, its period is 2"));
        assert!(
            err(&format!("{periodic}periods = [2]\ntables = \"spiral\""))
                .contains("unknown table \"spiral\"")
        );
        assert!(err(&format!("{periodic}periods = [2, 2, 2, 2, 2]")).contains("more than d_head 8"));
        assert!(err("[position]\nkind = \"learned\"\nmax_len = 0").contains("max_len"));
        assert!(err("[position]\nkind = \"sinusoidal\"\nbase = nan").contains("base"));
        assert!(
            from_toml("[position]\nkind = \"learned\"\nmax_len = 4\nbeyond = \"wrap\"").is_err()
        );
    }
}
