//! bf16 matrix products with f32 accumulation (docs/performance.md#bf16-products).
//!
//! Both operands are rounded to bf16 (round to nearest even) and packed once per product; the
//! products of bf16 pairs are exact in f32 and are summed in f32. Three paths compute the same
//! packed tiles, chosen at run time by [`Bf16Path::detect`]:
//! - [`Bf16Path::Amx`]: Intel AMX tiles (`tdpbf16ps`, 32 x 32 outputs per block), after Linux
//!   has granted the process the tile-data state;
//! - [`Bf16Path::Avx512`]: AVX512-BF16 dot products (`vdpbf16ps`, 8 x 32 outputs per tile);
//! - [`Bf16Path::Emulated`]: portable code over the same packed layout, so every machine runs
//!   (and tests) the rounding, packing and tiling logic.
//!
//! Packed layouts, in pairs (a u32 holding two bf16: the even k index in the low half):
//! - A `[rows, kp]` row-major, `kp` = k / 2 rounded up (to a multiple of 16 for AMX), zero
//!   padded: pair `p` of row r holds A[r, 2p] and A[r, 2p + 1];
//! - B in panels of 16 columns: `[panel][p][c]` holds B[2p, 16 panel + c] and B[2p + 1, ·],
//!   zero padded past k and n, the panel count rounded up to an even number. One pair-row of a
//!   panel is 64 bytes: one AVX-512 register, one row of an AMX B tile.

use std::cell::RefCell;
use std::sync::OnceLock;
use std::thread::LocalKey;

use serde::{Deserialize, Serialize};

use super::gemm::{split_rows, View};

/// The numeric precision of the fused kernel's matrix products.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Precision {
    /// f32 operands and accumulation (the `gemm` crate).
    #[default]
    F32,
    /// bf16 operands, f32 accumulation (this module); everything else stays f32.
    Bf16,
}

impl Precision {
    /// Whether this is f32 (used to leave the default out of serialized configs).
    pub fn is_f32(&self) -> bool {
        *self == Precision::F32
    }

    /// The name configs and flags use: `f32` or `bf16`.
    pub fn name(self) -> &'static str {
        match self {
            Precision::F32 => "f32",
            Precision::Bf16 => "bf16",
        }
    }
}

impl std::str::FromStr for Precision {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "f32" => Ok(Precision::F32),
            "bf16" => Ok(Precision::Bf16),
            other => Err(format!(
                "unknown precision {other:?} (expected f32 or bf16)"
            )),
        }
    }
}

impl std::fmt::Display for Precision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// How bf16 products are computed on this machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Bf16Path {
    /// Intel AMX tiles (AMX-BF16).
    Amx,
    /// AVX512-BF16 dot products.
    Avx512,
    /// Portable code (no bf16 unit): the same numbers within the bf16 bound, at a fraction of
    /// the speed.
    Emulated,
}

impl Bf16Path {
    /// Every path, fastest first.
    pub const ALL: [Bf16Path; 3] = [Bf16Path::Amx, Bf16Path::Avx512, Bf16Path::Emulated];

    /// The name `bench` prints and `--bf16-path` reads.
    pub fn name(self) -> &'static str {
        match self {
            Bf16Path::Amx => "amx",
            Bf16Path::Avx512 => "avx512-bf16",
            Bf16Path::Emulated => "emulated",
        }
    }

    /// `Ok` where this machine can run the path, else why not.
    pub fn available(self) -> Result<(), String> {
        match self {
            Bf16Path::Emulated => Ok(()),
            Bf16Path::Avx512 => avx512_bf16_reason(),
            Bf16Path::Amx => amx::available().clone(),
        }
    }

    /// The fastest path this machine has (detected once per process), unless
    /// [`Bf16Path::force`] chose one.
    pub fn detect() -> Self {
        *CHOSEN.get_or_init(|| {
            Self::ALL
                .into_iter()
                .find(|p| p.available().is_ok())
                .unwrap_or(Bf16Path::Emulated)
        })
    }

    /// Makes every later bf16 product of this process use `self` (benchmarks compare paths
    /// this way). Fails if the machine lacks the path or a product already chose one.
    pub fn force(self) -> Result<(), String> {
        self.available()?;
        CHOSEN.set(self).map_err(|_| {
            format!(
                "the bf16 path was already chosen ({}) before {} was asked for",
                Self::detect().name(),
                self.name()
            )
        })
    }
}

impl std::str::FromStr for Bf16Path {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|p| p.name() == s)
            .ok_or_else(|| {
                format!("unknown bf16 path {s:?} (expected amx, avx512-bf16 or emulated)")
            })
    }
}

static CHOSEN: OnceLock<Bf16Path> = OnceLock::new();

fn avx512_bf16_reason() -> Result<(), String> {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("avx512bf16")
        {
            return Ok(());
        }
        Err("the CPU lacks AVX512-BF16".into())
    }
    #[cfg(not(target_arch = "x86_64"))]
    Err("not an x86-64 CPU".into())
}

/// Rounds `x` to the nearest bf16 (ties to even), as its bit pattern. NaN stays NaN.
#[inline]
pub fn to_bf16(x: f32) -> u16 {
    (rounded_bits(x) >> 16) as u16
}

/// The f32 value of a bf16 bit pattern (exact).
#[inline]
pub fn from_bf16(h: u16) -> f32 {
    f32::from_bits((h as u32) << 16)
}

/// `x` rounded to bf16 (ties to even) in the top 16 bits of the result (the low 16 bits are
/// garbage): branch-free, so packing loops vectorise. NaN stays NaN.
#[inline(always)]
fn rounded_bits(x: f32) -> u32 {
    let bits = x.to_bits();
    let rounded = bits.wrapping_add(0x7fff + ((bits >> 16) & 1));
    if x.is_nan() {
        bits | 0x0040_0000
    } else {
        rounded
    }
}

/// Two f32 values as one packed bf16 pair: `lo` in the low half (the even k index).
#[inline(always)]
fn pair(lo: f32, hi: f32) -> u32 {
    (rounded_bits(hi) & 0xffff_0000) | (rounded_bits(lo) >> 16)
}

/// Columns of a B panel.
const NR: usize = 16;
/// Rows of an AVX-512 / emulated tile (two panels wide: 8 x 32 outputs, 16 accumulators).
const MR: usize = 8;
/// Rows and pairs of an AMX tile.
const AMX_ROWS: usize = 16;

/// The k pairs `path` packs for depth `k`: k / 2 rounded up, to a multiple of 16 for AMX.
fn padded_pairs(path: Bf16Path, k: usize) -> usize {
    match path {
        Bf16Path::Amx => k.div_ceil(2 * AMX_ROWS) * AMX_ROWS,
        _ => k.div_ceil(2),
    }
}

thread_local! {
    static PACKED_A: RefCell<Vec<u32>> = const { RefCell::new(Vec::new()) };
    static PACKED_B: RefCell<Vec<u32>> = const { RefCell::new(Vec::new()) };
}

/// Runs `f` on `len` scratch values of this thread, holding whatever an earlier product left
/// (the packing writes every value a product reads), or a fresh buffer if the scratch is in
/// use: a rayon thread can start another product while it waits.
fn with_scratch<R>(
    key: &'static LocalKey<RefCell<Vec<u32>>>,
    len: usize,
    f: impl FnOnce(&mut [u32]) -> R,
) -> R {
    key.with(|cell| match cell.try_borrow_mut() {
        Ok(mut v) => {
            if v.len() < len {
                v.resize(len, 0);
            }
            f(&mut v[..len])
        }
        Err(_) => f(&mut vec![0; len]),
    })
}

/// Packs rows `r0 .. r0 + rows` of `av` over `data` into `out` (`[rows_padded, kp]` pairs),
/// zero past k in every packed row; rows past the view are left as they are (they only feed
/// output rows that are never written). Vectorised for AVX-512 where the CPU has it.
fn pack_a(out: &mut [u32], data: &[f32], av: View, r0: usize, kp: usize) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx512f") {
        // SAFETY: the CPU has AVX-512F (checked above).
        return unsafe { pack_a_avx512(out, data, av, r0, kp) };
    }
    pack_a_body(out, data, av, r0, kp)
}

/// [`pack_a`] compiled for AVX-512.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn pack_a_avx512(out: &mut [u32], data: &[f32], av: View, r0: usize, kp: usize) {
    pack_a_body(out, data, av, r0, kp)
}

#[inline(always)]
fn pack_a_body(out: &mut [u32], data: &[f32], av: View, r0: usize, kp: usize) {
    let k = av.cols;
    let rows = av.rows.saturating_sub(r0).min(out.len() / kp);
    for i in 0..rows {
        out[i * kp + k.div_ceil(2)..(i + 1) * kp].fill(0);
    }
    if av.cs == 1 {
        // Rows contiguous over k.
        for i in 0..rows {
            let src = &data[av.offset + (r0 + i) * av.rs..][..k];
            let dst = &mut out[i * kp..][..kp];
            for (o, x) in dst.iter_mut().zip(src.chunks_exact(2)) {
                *o = pair(x[0], x[1]);
            }
            if k % 2 == 1 {
                dst[k / 2] = pair(src[k - 1], 0.0);
            }
        }
    } else if av.rs == 1 {
        // A transposed view: one source row per k index, contiguous over the rows of A.
        // Blocks of 16 rows x 16 pairs: pairs built along the source rows (vectorised), then
        // written transposed, 16 contiguous pairs per packed row.
        const BLOCK: usize = 16;
        let pairs = k.div_ceil(2);
        let mut tile = [[0u32; BLOCK]; BLOCK]; // [pair][row]
        for i0 in (0..rows).step_by(BLOCK) {
            let ib = BLOCK.min(rows - i0);
            for p0 in (0..pairs).step_by(BLOCK) {
                let pb = BLOCK.min(pairs - p0);
                for (pp, t) in tile.iter_mut().enumerate().take(pb) {
                    let p = p0 + pp;
                    let lo = &data[av.offset + 2 * p * av.cs + r0 + i0..][..ib];
                    if 2 * p + 1 < k {
                        let hi = &data[av.offset + (2 * p + 1) * av.cs + r0 + i0..][..ib];
                        for ((t, &l), &h) in t.iter_mut().zip(lo).zip(hi) {
                            *t = pair(l, h);
                        }
                    } else {
                        for (t, &l) in t.iter_mut().zip(lo) {
                            *t = pair(l, 0.0);
                        }
                    }
                }
                for ii in 0..ib {
                    let dst = &mut out[(i0 + ii) * kp + p0..][..pb];
                    for (pp, o) in dst.iter_mut().enumerate() {
                        *o = tile[pp][ii];
                    }
                }
            }
        }
    } else {
        for i in 0..rows {
            let at = |c: usize| data[av.offset + (r0 + i) * av.rs + c * av.cs];
            for p in 0..k.div_ceil(2) {
                let hi = if 2 * p + 1 < k { at(2 * p + 1) } else { 0.0 };
                out[i * kp + p] = pair(at(2 * p), hi);
            }
        }
    }
}

/// Operands with at least this many values are packed by every pool thread (a share of the
/// panels each) when the product is parallel.
const PARALLEL_PACK_MIN: usize = 1 << 16;

/// [`pack_b`], split by panel pairs over the pool when `parallel` and the operand is large.
fn pack_b_split(out: &mut [u32], data: &[f32], bv: View, kp: usize, parallel: bool) {
    let pairs = out.len() / (2 * kp * NR); // panel pairs: 32 columns each
    let threads = rayon::current_num_threads().max(1);
    if !parallel || threads == 1 || bv.rows * bv.cols < PARALLEL_PACK_MIN || pairs < 2 {
        return pack_b(out, data, bv, kp);
    }
    use rayon::prelude::*;
    let per = pairs.div_ceil(threads);
    out.par_chunks_mut(per * 2 * kp * NR)
        .enumerate()
        .for_each(|(i, o)| {
            let c0 = i * per * 2 * NR;
            let part = View {
                offset: bv.offset + c0 * bv.cs,
                cols: (per * 2 * NR).min(bv.cols - c0),
                ..bv
            };
            pack_b(o, data, part, kp);
        });
}

/// Packs `bv` over `data` into panels of 16 columns (`out`: `[panels, kp, 16]` pairs), zero
/// past k and past n; vectorised for AVX-512 where the CPU has it.
fn pack_b(out: &mut [u32], data: &[f32], bv: View, kp: usize) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx512f") {
        // SAFETY: the CPU has AVX-512F (checked above).
        return unsafe { pack_b_avx512(out, data, bv, kp) };
    }
    pack_b_body(out, data, bv, kp)
}

/// [`pack_b`] compiled for AVX-512.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn pack_b_avx512(out: &mut [u32], data: &[f32], bv: View, kp: usize) {
    pack_b_body(out, data, bv, kp)
}

#[inline(always)]
fn pack_b_body(out: &mut [u32], data: &[f32], bv: View, kp: usize) {
    let (k, n) = (bv.rows, bv.cols);
    let at = |p: usize, c: usize| (c / NR) * kp * NR + p * NR + c % NR;
    // Padding: pair-rows past k in every panel, columns past n in the last panels.
    for panel in out.chunks_exact_mut(kp * NR) {
        panel[k.div_ceil(2) * NR..].fill(0);
    }
    for c in n..out.len() / (kp * NR) * NR {
        for p in 0..k.div_ceil(2) {
            out[at(p, c)] = 0;
        }
    }
    if bv.cs == 1 {
        // Rows contiguous over n: interleave rows 2p and 2p + 1.
        for p in 0..k.div_ceil(2) {
            let lo = &data[bv.offset + 2 * p * bv.rs..][..n];
            let hi = (2 * p + 1 < k).then(|| &data[bv.offset + (2 * p + 1) * bv.rs..][..n]);
            for c0 in (0..n).step_by(NR) {
                let w = NR.min(n - c0);
                let dst = &mut out[at(p, c0)..][..w];
                match hi {
                    Some(hi) => {
                        for ((o, &l), &h) in
                            dst.iter_mut().zip(&lo[c0..c0 + w]).zip(&hi[c0..c0 + w])
                        {
                            *o = pair(l, h);
                        }
                    }
                    None => {
                        for (o, &l) in dst.iter_mut().zip(&lo[c0..c0 + w]) {
                            *o = pair(l, 0.0);
                        }
                    }
                }
            }
        }
    } else if bv.rs == 1 {
        // Columns contiguous over k (B = W^T of a row-major weight): a panel's 16 columns read
        // side by side, so that each packed pair-row is written whole.
        for c0 in (0..n).step_by(NR) {
            let w = NR.min(n - c0);
            let cols: Vec<&[f32]> = (c0..c0 + w)
                .map(|c| &data[bv.offset + c * bv.cs..][..k])
                .collect();
            for p in 0..k.div_ceil(2) {
                let dst = &mut out[at(p, c0)..][..w];
                if 2 * p + 1 < k {
                    for (o, src) in dst.iter_mut().zip(&cols) {
                        *o = pair(src[2 * p], src[2 * p + 1]);
                    }
                } else {
                    for (o, src) in dst.iter_mut().zip(&cols) {
                        *o = pair(src[2 * p], 0.0);
                    }
                }
            }
        }
    } else {
        for c in 0..n {
            let get = |r: usize| data[bv.offset + r * bv.rs + c * bv.cs];
            for p in 0..k.div_ceil(2) {
                let hi = if 2 * p + 1 < k { get(2 * p + 1) } else { 0.0 };
                out[at(p, c)] = pair(get(2 * p), hi);
            }
        }
    }
}

/// The panel count of `n` columns (even: tiles are two panels wide).
fn panels(n: usize) -> usize {
    n.div_ceil(2 * NR) * 2
}

/// `dst = a @ b` (or `+=` with `accumulate`) with bf16 operands on `path`; the shapes and
/// bounds were checked by the caller and `k > 0`.
#[allow(clippy::too_many_arguments)]
pub(super) fn product(
    dst: &mut [f32],
    d: View,
    a: &[f32],
    av: View,
    b: &[f32],
    bv: View,
    accumulate: bool,
    parallel: bool,
    path: Bf16Path,
) {
    let kp = padded_pairs(path, bv.rows);
    with_scratch(&PACKED_B, panels(bv.cols) * kp * NR, |pb| {
        pack_b_split(pb, b, bv, kp, parallel);
        product_with_panels(dst, d, a, av, pb, kp, accumulate, parallel, path);
    });
}

/// A right-hand operand `[k, n]` rounded to bf16 and packed once for a path, for products that
/// reuse it (a model's weights): `matmul_packed` skips the packing every other product does.
#[derive(Debug, Clone)]
pub struct PackedB {
    path: Bf16Path,
    k: usize,
    n: usize,
    kp: usize,
    /// `[panels, kp, 16]` bf16 pairs.
    panels: Vec<u32>,
}

impl PackedB {
    /// Packs `bv` over `data` for `path` (the caller checked [`Bf16Path::available`]).
    pub fn new(path: Bf16Path, data: &[f32], bv: View) -> Self {
        assert!(bv.end() <= data.len(), "packed operand outside its buffer");
        let kp = padded_pairs(path, bv.rows);
        let mut panels_buf = vec![0u32; panels(bv.cols) * kp * NR];
        pack_b(&mut panels_buf, data, bv, kp);
        Self {
            path,
            k: bv.rows,
            n: bv.cols,
            kp,
            panels: panels_buf,
        }
    }

    /// Rows (the depth of the product).
    pub fn rows(&self) -> usize {
        self.k
    }

    /// Columns.
    pub fn cols(&self) -> usize {
        self.n
    }

    /// The path the operand was packed for.
    pub fn path(&self) -> Bf16Path {
        self.path
    }

    /// Bytes held.
    pub fn bytes(&self) -> usize {
        self.panels.len() * 4
    }
}

/// [`product`] with a pre-packed right operand, on the path it was packed for.
pub(super) fn product_packed(
    dst: &mut [f32],
    d: View,
    a: &[f32],
    av: View,
    b: &PackedB,
    accumulate: bool,
    parallel: bool,
) {
    product_with_panels(dst, d, a, av, &b.panels, b.kp, accumulate, parallel, b.path);
}

/// The tiles of `a @ B` for B already in panels (`kp` pairs deep): rows split over threads,
/// each packing its rows of A once.
#[allow(clippy::too_many_arguments)]
fn product_with_panels(
    dst: &mut [f32],
    d: View,
    a: &[f32],
    av: View,
    pb: &[u32],
    kp: usize,
    accumulate: bool,
    parallel: bool,
    path: Bf16Path,
) {
    let (m, n, k) = (d.rows, d.cols, av.cols);
    let dst_ptr = dst.as_mut_ptr() as usize;
    let dst_len = dst.len();
    let run = |start: usize, rows: usize| {
        let strip = if path == Bf16Path::Amx {
            2 * AMX_ROWS
        } else {
            MR
        };
        let padded = rows.div_ceil(strip) * strip;
        with_scratch(&PACKED_A, padded * kp, |pa| {
            pack_a(pa, a, av, start, kp);
            let sink = Sink {
                dst: dst_ptr as *mut f32,
                len: dst_len,
                d,
                row0: start,
                rows,
                accumulate,
            };
            compute(path, pa, pb, kp, rows, n, sink);
        });
    };
    let strip = if path == Bf16Path::Amx {
        2 * AMX_ROWS
    } else {
        MR
    };
    split_rows(m, m * n * k, parallel, strip, run);
}

/// Where a thread's tiles go: rows `row0 .. row0 + rows` of `d` in `dst`.
struct Sink {
    /// The output buffer (`len` values): chunks of different threads own disjoint row ranges
    /// of `d`, which lies inside it (checked by the caller).
    dst: *mut f32,
    len: usize,
    d: View,
    row0: usize,
    rows: usize,
    accumulate: bool,
}

impl Sink {
    /// The address of output element (local row `r`, column `c`) when the whole `rows x cols`
    /// block from there lies inside the product with unit column stride (so tiles can be
    /// loaded from and stored to the output directly), with the row stride in elements.
    fn direct(&self, r: usize, c: usize, rows: usize, cols: usize) -> Option<(*mut f32, usize)> {
        if self.d.cs != 1 || r + rows > self.rows || c + cols > self.d.cols {
            return None;
        }
        let base = self.d.offset + (self.row0 + r) * self.d.rs + c;
        assert!(base + (rows - 1) * self.d.rs + cols <= self.len);
        // SAFETY: in bounds (above).
        Some((unsafe { self.dst.add(base) }, self.d.rs))
    }

    /// Writes `tile` (`[tile_rows, width]`, row stride `width`) at local row `r`, column `c`,
    /// clipped to the product.
    fn put(&mut self, tile: &[f32], width: usize, r: usize, c: usize) {
        let rows = (tile.len() / width).min(self.rows.saturating_sub(r));
        let cols = width.min(self.d.cols.saturating_sub(c));
        if rows == 0 || cols == 0 {
            return;
        }
        let cs = self.d.cs;
        for i in 0..rows {
            let base = self.d.offset + (self.row0 + r + i) * self.d.rs + c * cs;
            assert!(base + (cols - 1) * cs < self.len);
            let src = &tile[i * width..i * width + cols];
            // SAFETY: in bounds (above), and only this thread writes these rows.
            unsafe {
                let o = self.dst.add(base);
                if cs == 1 {
                    let out = std::slice::from_raw_parts_mut(o, cols);
                    if self.accumulate {
                        out.iter_mut().zip(src).for_each(|(o, v)| *o += v);
                    } else {
                        out.copy_from_slice(src);
                    }
                } else {
                    for (j, &v) in src.iter().enumerate() {
                        let o = o.add(j * cs);
                        *o = if self.accumulate { *o + v } else { v };
                    }
                }
            }
        }
    }
}

/// The tiles of one thread's rows on `path`.
fn compute(
    path: Bf16Path,
    pa: &[u32],
    pb: &[u32],
    kp: usize,
    rows: usize,
    n: usize,
    mut sink: Sink,
) {
    let panel = kp * NR;
    match path {
        Bf16Path::Amx => {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: the path is only chosen where `amx::available` succeeded; the packed
            // buffers have the padded sizes the blocks read.
            unsafe {
                amx::compute(pa, pb, kp, rows, n, &mut sink)
            }
        }
        Bf16Path::Avx512 | Bf16Path::Emulated => {
            let mut tile = [0f32; MR * 2 * NR];
            for c0 in (0..n).step_by(2 * NR) {
                let p0 = c0 / NR;
                let (b0, b1) = (&pb[p0 * panel..][..panel], &pb[(p0 + 1) * panel..][..panel]);
                for r0 in (0..rows).step_by(MR) {
                    let a = &pa[r0 * kp..(r0 + MR) * kp];
                    if path == Bf16Path::Avx512 {
                        #[cfg(target_arch = "x86_64")]
                        // SAFETY: chosen only where AVX512-BF16 was detected; the slices
                        // have the lengths the tile reads.
                        unsafe {
                            avx512::tile(a, b0, b1, kp, &mut tile)
                        };
                    } else {
                        emulated_tile(a, b0, b1, kp, &mut tile);
                    }
                    sink.put(&tile, 2 * NR, r0, c0);
                }
            }
        }
    }
}

/// The two f32 values of a packed pair (low half first).
#[inline(always)]
fn unpair(v: u32) -> (f32, f32) {
    (f32::from_bits(v << 16), f32::from_bits(v & 0xffff_0000))
}

/// An `MR x 32` tile in portable code: `a` `[MR, kp]` pairs, two panels, f32 sums of exact
/// products.
fn emulated_tile(a: &[u32], b0: &[u32], b1: &[u32], kp: usize, out: &mut [f32]) {
    let mut acc = [[0f32; 2 * NR]; MR];
    for p in 0..kp {
        let (w0, w1) = (&b0[p * NR..][..NR], &b1[p * NR..][..NR]);
        let mut b = [[0f32; 2 * NR]; 2];
        for c in 0..NR {
            (b[0][c], b[1][c]) = unpair(w0[c]);
            (b[0][NR + c], b[1][NR + c]) = unpair(w1[c]);
        }
        for (r, acc) in acc.iter_mut().enumerate() {
            let (a0, a1) = unpair(a[r * kp + p]);
            for c in 0..2 * NR {
                acc[c] += a0 * b[0][c];
                acc[c] += a1 * b[1][c];
            }
        }
    }
    for (r, acc) in acc.iter().enumerate() {
        out[r * 2 * NR..(r + 1) * 2 * NR].copy_from_slice(acc);
    }
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use std::arch::x86_64::*;

    use super::{MR, NR};

    /// An `MR x 32` tile with `vdpbf16ps`: `a` `[MR, kp]` pairs, two panels of `kp` pair-rows.
    ///
    /// # Safety
    /// The CPU must have AVX512F and AVX512-BF16.
    #[target_feature(enable = "avx512f,avx512bf16")]
    pub unsafe fn tile(a: &[u32], b0: &[u32], b1: &[u32], kp: usize, out: &mut [f32]) {
        assert!(a.len() >= MR * kp && b0.len() >= kp * NR && b1.len() >= kp * NR);
        assert!(out.len() >= MR * 2 * NR);
        let mut acc = [[_mm512_setzero_ps(); 2]; MR];
        let (pa, pb0, pb1) = (a.as_ptr(), b0.as_ptr(), b1.as_ptr());
        for p in 0..kp {
            // One pair-row of each panel: 16 columns x 2 halves. [32 bf16]
            let w0: __m512bh = std::mem::transmute(_mm512_loadu_si512(pb0.add(p * NR).cast()));
            let w1: __m512bh = std::mem::transmute(_mm512_loadu_si512(pb1.add(p * NR).cast()));
            for (r, acc) in acc.iter_mut().enumerate() {
                // Row r's pair p, broadcast to every lane.
                let x: __m512bh =
                    std::mem::transmute(_mm512_set1_epi32(*pa.add(r * kp + p) as i32));
                acc[0] = _mm512_dpbf16_ps(acc[0], x, w0);
                acc[1] = _mm512_dpbf16_ps(acc[1], x, w1);
            }
        }
        for (r, acc) in acc.iter().enumerate() {
            _mm512_storeu_ps(out.as_mut_ptr().add(r * 2 * NR), acc[0]);
            _mm512_storeu_ps(out.as_mut_ptr().add(r * 2 * NR + NR), acc[1]);
        }
    }
}

#[cfg(not(target_arch = "x86_64"))]
mod amx {
    pub fn available() -> &'static Result<(), String> {
        static NO: Result<(), String> = Err(String::new());
        &NO
    }
}

#[cfg(target_arch = "x86_64")]
mod amx {
    //! AMX through inline assembly: the Rust AMX intrinsics are unstable, and no maintained
    //! crate offers them, so the five instructions used (`ldtilecfg`, `tileloadd`,
    //! `tdpbf16ps`, `tilestored`, `tilerelease`) are written with `asm!`.

    use std::arch::asm;
    use std::sync::OnceLock;

    use super::{Sink, AMX_ROWS, NR};

    /// Whether the CPU has AMX-BF16 and Linux granted this process the tile data (asked once).
    pub fn available() -> &'static Result<(), String> {
        static AVAILABLE: OnceLock<Result<(), String>> = OnceLock::new();
        AVAILABLE.get_or_init(|| {
            // CPUID leaf 7: EDX bit 22 AMX-BF16, bit 24 AMX-TILE.
            let leaf = std::arch::x86_64::__cpuid_count(7, 0);
            if leaf.edx & (1 << 22) == 0 || leaf.edx & (1 << 24) == 0 {
                return Err("the CPU lacks AMX-BF16".into());
            }
            request_tile_data()
        })
    }

    #[cfg(target_os = "linux")]
    fn request_tile_data() -> Result<(), String> {
        const ARCH_REQ_XCOMP_PERM: libc::c_long = 0x1023;
        const XFEATURE_XTILEDATA: libc::c_long = 18;
        // SAFETY: arch_prctl with these arguments only changes the process's permitted state.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_arch_prctl,
                ARCH_REQ_XCOMP_PERM,
                XFEATURE_XTILEDATA,
            )
        };
        if rc == 0 {
            Ok(())
        } else {
            Err(format!(
                "Linux refused the AMX tile data: {}",
                std::io::Error::last_os_error()
            ))
        }
    }

    #[cfg(not(target_os = "linux"))]
    fn request_tile_data() -> Result<(), String> {
        Err("AMX is only enabled on Linux".into())
    }

    /// The tile configuration (palette 1): every tile 16 rows of 64 bytes.
    #[repr(C, align(64))]
    struct Config {
        palette: u8,
        start_row: u8,
        reserved: [u8; 14],
        colsb: [u16; 16],
        rows: [u8; 16],
    }

    const CONFIG: Config = Config {
        palette: 1,
        start_row: 0,
        reserved: [0; 14],
        colsb: [64, 64, 64, 64, 64, 64, 64, 64, 0, 0, 0, 0, 0, 0, 0, 0],
        rows: [16, 16, 16, 16, 16, 16, 16, 16, 0, 0, 0, 0, 0, 0, 0, 0],
    };

    /// Every 32 x 32 block of one thread's rows: C tiles tmm0..3, A tiles tmm4, tmm5, B tiles
    /// tmm6, tmm7.
    ///
    /// # Safety
    /// AMX must be [`available`]; `pa` is `[rows rounded up to 32, kp]` pairs with `kp` a
    /// multiple of 16, `pb` holds the (even) panels of `n` columns.
    pub unsafe fn compute(
        pa: &[u32],
        pb: &[u32],
        kp: usize,
        rows: usize,
        n: usize,
        sink: &mut Sink,
    ) {
        let panel = kp * NR;
        let blocks_r = rows.div_ceil(2 * AMX_ROWS);
        assert!(kp.is_multiple_of(AMX_ROWS) && pa.len() >= blocks_r * 2 * AMX_ROWS * kp);
        assert!(pb.len() >= n.div_ceil(2 * NR) * 2 * panel);
        let mut block = [0f32; 4 * AMX_ROWS * NR]; // [32, 32]
        let a_stride = kp * 4; // bytes per packed A row
        let b_stride = 64usize;
        asm!("ldtilecfg [{}]", in(reg) &CONFIG as *const Config, options(nostack, readonly));
        for c0 in (0..n).step_by(2 * NR) {
            let p0 = c0 / NR;
            let (b0, b1) = (
                pb.as_ptr().add(p0 * panel),
                pb.as_ptr().add((p0 + 1) * panel),
            );
            for br in 0..blocks_r {
                let a0 = pa.as_ptr().add(br * 2 * AMX_ROWS * kp);
                let a1 = a0.add(AMX_ROWS * kp);
                // A block inside the output goes straight to it (accumulating onto it when
                // asked); edge blocks go through `block`.
                let direct = sink.direct(br * 2 * AMX_ROWS, c0, 2 * AMX_ROWS, 2 * NR);
                match direct {
                    Some((out, rs)) if sink.accumulate => asm!(
                        "tileloadd tmm0, [{c0} + {sc}*1]",
                        "tileloadd tmm1, [{c1} + {sc}*1]",
                        "tileloadd tmm2, [{c2} + {sc}*1]",
                        "tileloadd tmm3, [{c3} + {sc}*1]",
                        c0 = in(reg) out,
                        c1 = in(reg) out.add(NR),
                        c2 = in(reg) out.add(AMX_ROWS * rs),
                        c3 = in(reg) out.add(AMX_ROWS * rs + NR),
                        sc = in(reg) rs * 4,
                        options(nostack, readonly)
                    ),
                    _ => asm!(
                        "tilezero tmm0",
                        "tilezero tmm1",
                        "tilezero tmm2",
                        "tilezero tmm3",
                        options(nostack, nomem)
                    ),
                }
                for kc in 0..kp / AMX_ROWS {
                    // 16 pairs of k per A tile row; 16 pair-rows per B tile.
                    let off_a = kc * AMX_ROWS;
                    let off_b = kc * AMX_ROWS * NR;
                    asm!(
                        "tileloadd tmm4, [{a0} + {sa}*1]",
                        "tileloadd tmm5, [{a1} + {sa}*1]",
                        "tileloadd tmm6, [{b0} + {sb}*1]",
                        "tileloadd tmm7, [{b1} + {sb}*1]",
                        "tdpbf16ps tmm0, tmm4, tmm6",
                        "tdpbf16ps tmm1, tmm4, tmm7",
                        "tdpbf16ps tmm2, tmm5, tmm6",
                        "tdpbf16ps tmm3, tmm5, tmm7",
                        a0 = in(reg) a0.add(off_a),
                        a1 = in(reg) a1.add(off_a),
                        b0 = in(reg) b0.add(off_b),
                        b1 = in(reg) b1.add(off_b),
                        sa = in(reg) a_stride,
                        sb = in(reg) b_stride,
                        options(nostack, readonly)
                    );
                }
                let (out, rs) = direct.unwrap_or((block.as_mut_ptr(), 2 * NR));
                asm!(
                    "tilestored [{c0} + {sc}*1], tmm0",
                    "tilestored [{c1} + {sc}*1], tmm1",
                    "tilestored [{c2} + {sc}*1], tmm2",
                    "tilestored [{c3} + {sc}*1], tmm3",
                    c0 = in(reg) out,
                    c1 = in(reg) out.add(NR),
                    c2 = in(reg) out.add(AMX_ROWS * rs),
                    c3 = in(reg) out.add(AMX_ROWS * rs + NR),
                    sc = in(reg) rs * 4,
                    options(nostack)
                );
                if direct.is_none() {
                    sink.put(&block, 2 * NR, br * 2 * AMX_ROWS, c0);
                }
            }
        }
        asm!("tilerelease", options(nostack, nomem));
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    use super::*;
    use crate::kernel::gemm::matmul_bf16_on;

    /// Round to nearest even on the worked cases, overflow and NaN.
    #[test]
    fn rounding_is_to_nearest_even() {
        let one = 1.0f32;
        let ulp = 2f32.powi(-7); // bf16's spacing at 1
        assert_eq!(from_bf16(to_bf16(one)), one);
        // Halfway between 1 and 1 + ulp: to the even mantissa, 1.
        assert_eq!(from_bf16(to_bf16(one + ulp / 2.0)), one);
        // Halfway between 1 + ulp (odd) and 1 + 2 ulp (even): up.
        assert_eq!(from_bf16(to_bf16(one + 1.5 * ulp)), one + 2.0 * ulp);
        // Just above halfway: up.
        assert_eq!(
            from_bf16(to_bf16(one + ulp / 2.0 + 2f32.powi(-20))),
            one + ulp
        );
        assert_eq!(from_bf16(to_bf16(-3.0)), -3.0);
        assert_eq!(from_bf16(to_bf16(f32::MAX)), f32::INFINITY);
        assert_eq!(from_bf16(to_bf16(f32::NEG_INFINITY)), f32::NEG_INFINITY);
        assert!(from_bf16(to_bf16(f32::NAN)).is_nan());
        // A NaN whose payload sits in the low bits only must not round to infinity.
        assert!(from_bf16(to_bf16(f32::from_bits(0x7f80_0001))).is_nan());
        let p = pair(1.0, -2.0);
        assert_eq!(unpair(p), (1.0, -2.0));
    }

    proptest! {
        /// The rounding equals the `half` crate's conversion (an independent implementation)
        /// on every non-NaN f32 bit pattern drawn.
        #[test]
        fn rounding_matches_the_half_crate(bits in any::<u32>()) {
            let x = f32::from_bits(bits);
            prop_assume!(!x.is_nan());
            prop_assert_eq!(to_bf16(x), half::bf16::from_f32(x).to_bits());
        }
    }

    /// `x` rounded to bf16, as f64.
    fn rounded(x: f32) -> f64 {
        half::bf16::from_f32(x).to_f64()
    }

    /// One product case: the views and the buffers they read.
    struct Case {
        m: usize,
        n: usize,
        k: usize,
        transpose_a: bool,
        transpose_b: bool,
    }

    /// Checks every element of a bf16 product on `path` against f64 sums: within f32
    /// accumulation error of the exact product of the rounded operands (so the operands really
    /// are rounded to bf16), and within the bf16 bound of the exact product of the f32 ones.
    fn check(path: Bf16Path, c: &Case, rng: &mut ChaCha8Rng) {
        let (m, n, k) = (c.m, c.n, c.k);
        let a: Vec<f32> = (0..m * k).map(|_| rng.random_range(-2.0..2.0)).collect();
        let b: Vec<f32> = (0..k * n).map(|_| rng.random_range(-2.0..2.0)).collect();
        // Logical A[r][i], B[i][c], stored transposed where asked.
        let av = if c.transpose_a {
            View::dense(0, k, m).t()
        } else {
            View::dense(0, m, k)
        };
        let bv = if c.transpose_b {
            View::dense(0, n, k).t()
        } else {
            View::dense(0, k, n)
        };
        let at = |r: usize, i: usize| a[av.offset + r * av.rs + i * av.cs];
        let bt = |i: usize, col: usize| b[bv.offset + i * bv.rs + col * bv.cs];
        // Output: every other row of a wider buffer, accumulated onto 1.
        let w = n + 3;
        let mut dst = vec![1f32; 2 * m * w];
        let dv = View::rows(w, m, n, 2 * w);
        matmul_bf16_on(path, &mut dst, dv, &a, av, &b, bv, true);
        let u = 2f64.powi(-8); // bf16's unit roundoff
        let eps32 = 2f64.powi(-24);
        for r in 0..m {
            for col in 0..n {
                let (mut exact, mut exact_rounded, mut size) = (0f64, 0f64, 0f64);
                for i in 0..k {
                    let (x, y) = (at(r, i), bt(i, col));
                    exact += x as f64 * y as f64;
                    exact_rounded += rounded(x) * rounded(y);
                    size += (x as f64 * y as f64).abs();
                }
                let got = dst[(2 * r + 1) * w + col] as f64 - 1.0;
                // f32 sums of k exact products, plus the final addition onto 1.
                let accumulation = (k as f64 + 2.0) * eps32 * (size * (1.0 + 3.0 * u) + 1.0);
                assert!(
                    (got - exact_rounded).abs() <= accumulation,
                    "{} {m}x{n}x{k} ({r}, {col}): {got} vs {exact_rounded} of the rounded operands",
                    path.name()
                );
                let bound = (2.0 * u + u * u) * size + accumulation;
                assert!(
                    (got - exact).abs() <= bound,
                    "{} {m}x{n}x{k} ({r}, {col}): {got} vs {exact}, bound {bound}",
                    path.name()
                );
                assert_eq!(
                    dst[2 * r * w + col],
                    1.0,
                    "a row outside the view was written"
                );
            }
        }
    }

    /// Every path the machine has, on shapes that exercise partial tiles, odd k, transposed
    /// operands, strided accumulated outputs and the threaded split; absent paths are skipped
    /// with the reason.
    #[test]
    fn products_match_f64_within_the_bf16_bound_on_every_path() {
        let cases = [
            (1, 1, 1, false, false),
            (7, 5, 3, false, true),
            (9, 17, 33, true, false),
            (70, 33, 129, true, true),
            (33, 70, 64, false, false),
            (130, 96, 40, false, true),
            (300, 200, 257, true, false),
        ];
        for path in Bf16Path::ALL {
            if let Err(why) = path.available() {
                eprintln!("skipping the {} bf16 path: {why}", path.name());
                continue;
            }
            let mut rng = ChaCha8Rng::seed_from_u64(7);
            for &(m, n, k, transpose_a, transpose_b) in &cases {
                let case = Case {
                    m,
                    n,
                    k,
                    transpose_a,
                    transpose_b,
                };
                check(path, &case, &mut rng);
            }
        }
    }

    /// The paths the machine has agree with the emulated one within f32 accumulation error
    /// (they multiply the same rounded operands).
    #[test]
    fn hardware_paths_agree_with_the_emulation() {
        let (m, n, k) = (45, 50, 300);
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        let a: Vec<f32> = (0..m * k).map(|_| rng.random_range(-1.0..1.0)).collect();
        let b: Vec<f32> = (0..k * n).map(|_| rng.random_range(-1.0..1.0)).collect();
        let run = |path| {
            let mut d = vec![0f32; m * n];
            let (av, bv) = (View::dense(0, m, k), View::dense(0, k, n));
            matmul_bf16_on(path, &mut d, View::dense(0, m, n), &a, av, &b, bv, false);
            d
        };
        let reference = run(Bf16Path::Emulated);
        for path in [Bf16Path::Amx, Bf16Path::Avx512] {
            if let Err(why) = path.available() {
                eprintln!("skipping the {} bf16 path: {why}", path.name());
                continue;
            }
            for (g, e) in run(path).iter().zip(&reference) {
                assert!(
                    (g - e).abs() <= 2.0 * k as f32 * f32::EPSILON,
                    "{}: {g} vs {e}",
                    path.name()
                );
            }
        }
    }

    /// A pre-packed right operand gives exactly the product that packs it per call, on every
    /// path the machine has, for a plain and a transposed (weight-like) operand.
    #[test]
    fn packed_operands_give_the_same_products() {
        use crate::kernel::gemm::matmul_packed;
        let (m, n, k) = (37, 70, 130);
        let mut rng = ChaCha8Rng::seed_from_u64(11);
        let a: Vec<f32> = (0..m * k).map(|_| rng.random_range(-1.0..1.0)).collect();
        let b: Vec<f32> = (0..k * n).map(|_| rng.random_range(-1.0..1.0)).collect();
        for path in Bf16Path::ALL {
            if let Err(why) = path.available() {
                eprintln!("skipping the {} bf16 path: {why}", path.name());
                continue;
            }
            for bv in [View::dense(0, k, n), View::dense(0, n, k).t()] {
                let av = View::dense(0, m, k);
                let mut want = vec![0.5f32; m * n];
                matmul_bf16_on(path, &mut want, View::dense(0, m, n), &a, av, &b, bv, true);
                let packed = PackedB::new(path, &b, bv);
                assert_eq!((packed.rows(), packed.cols(), packed.path()), (k, n, path));
                let mut got = vec![0.5f32; m * n];
                matmul_packed(&mut got, View::dense(0, m, n), &a, av, &packed, true);
                assert_eq!(got, want, "{}", path.name());
            }
        }
    }

    #[test]
    fn names_parse_back() {
        for p in Bf16Path::ALL {
            assert_eq!(p.name().parse::<Bf16Path>().unwrap(), p);
        }
        for p in [Precision::F32, Precision::Bf16] {
            assert_eq!(p.name().parse::<Precision>().unwrap(), p);
        }
        assert!("fp16"
            .parse::<Precision>()
            .unwrap_err()
            .contains("f32 or bf16"));
    }
}
