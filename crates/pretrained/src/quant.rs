//! Weights kept in the GGUF file's own quantized blocks (Q4_1 and Q8_0, 32 weights per block)
//! and matrix-vector products straight from them, for decoding: one token's projections read
//! every weight once, so they are bound by memory traffic, and 4- and 8-bit blocks carry 5x and
//! 3.8x fewer bytes than f32. The weights are exactly the file's (Q4_1: `d q + m`, Q8_0: `d q`);
//! the activations stay f32, so a product differs from the dequantized f32 one only by the
//! order of the sums. AVX-512 and AVX2 kernels are chosen at run time; a scalar loop serves
//! other CPUs (and checks them in the tests).

use candle_core::quantized::GgmlDType;
use rayon::prelude::*;

/// Weights per block.
pub const BLOCK: usize = 32;

/// Output rows per parallel task of [`QuantMatrix::matvec`].
const ROWS_PER_TASK: usize = 64;

/// How a block stores its 32 weights.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QuantKind {
    /// `d * q + m`, q in 0..16 (two per byte: weights j and j + 16 share byte j).
    Q4_1,
    /// `d * q`, q in -128..128 (one per byte).
    Q8_0,
}

/// A weight matrix [rows, cols] (a Linear weight [out, in], as the file stores it) in its
/// quantized blocks: block b of row r covers columns 32 b .. 32 b + 32.
#[derive(Debug, Clone)]
pub struct QuantMatrix {
    kind: QuantKind,
    rows: usize,
    cols: usize,
    /// Scale d per block [rows, cols / 32].
    scales: Vec<f32>,
    /// Offset m per block [rows, cols / 32] (Q4_1; empty for Q8_0).
    mins: Vec<f32>,
    /// Packed weights per block (16 bytes for Q4_1, 32 for Q8_0), row-major.
    qs: Vec<u8>,
}

impl QuantMatrix {
    /// Reads GGUF blocks of `dtype` (`data`: the tensor's raw bytes) for a [rows, cols] matrix;
    /// `None` for a dtype other than Q4_1 and Q8_0, an error for columns that are not whole
    /// blocks or a byte count that does not match.
    pub fn from_gguf(
        dtype: GgmlDType,
        rows: usize,
        cols: usize,
        data: &[u8],
    ) -> Result<Option<Self>, String> {
        let (kind, block_bytes, q_bytes) = match dtype {
            GgmlDType::Q4_1 => (QuantKind::Q4_1, 20, BLOCK / 2),
            GgmlDType::Q8_0 => (QuantKind::Q8_0, 34, BLOCK),
            _ => return Ok(None),
        };
        if !cols.is_multiple_of(BLOCK) {
            return Err(format!("{cols} columns are not whole blocks of {BLOCK}"));
        }
        let blocks = rows * cols / BLOCK;
        if data.len() != blocks * block_bytes {
            return Err(format!(
                "{} bytes for {blocks} {dtype:?} blocks of {block_bytes} bytes",
                data.len()
            ));
        }
        let f16_at = |b: &[u8], at: usize| half::f16::from_le_bytes([b[at], b[at + 1]]).to_f32();
        let mut scales = Vec::with_capacity(blocks);
        let mut mins = Vec::with_capacity(if kind == QuantKind::Q4_1 { blocks } else { 0 });
        let mut qs = Vec::with_capacity(blocks * q_bytes);
        for block in data.chunks_exact(block_bytes) {
            scales.push(f16_at(block, 0));
            if kind == QuantKind::Q4_1 {
                mins.push(f16_at(block, 2));
            }
            qs.extend_from_slice(&block[block_bytes - q_bytes..]);
        }
        Ok(Some(Self {
            kind,
            rows,
            cols,
            scales,
            mins,
            qs,
        }))
    }

    /// The block format.
    pub fn kind(&self) -> QuantKind {
        self.kind
    }

    /// Rows (outputs).
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Columns (inputs).
    pub fn cols(&self) -> usize {
        self.cols
    }

    /// Bytes held.
    pub fn bytes(&self) -> usize {
        4 * (self.scales.len() + self.mins.len()) + self.qs.len()
    }

    /// Weight (r, c) as f32 (the file's value).
    pub fn get(&self, r: usize, c: usize) -> f32 {
        let (b, j) = (r * self.cols / BLOCK + c / BLOCK, c % BLOCK);
        match self.kind {
            QuantKind::Q4_1 => {
                let byte = self.qs[b * 16 + j % 16];
                let q = if j < 16 { byte & 0x0F } else { byte >> 4 };
                self.scales[b] * f32::from(q) + self.mins[b]
            }
            QuantKind::Q8_0 => self.scales[b] * f32::from(self.qs[b * 32 + j] as i8),
        }
    }

    /// `out = W x` (out: rows, x: cols), rows split over the rayon pool, with the fastest
    /// kernel this CPU has.
    pub fn matvec(&self, x: &[f32], out: &mut [f32]) {
        self.matvec_with(Kernel::detect(), x, out);
    }

    /// [`QuantMatrix::matvec`] with a chosen kernel (the tests run each one this CPU has).
    pub fn matvec_with(&self, kernel: Kernel, x: &[f32], out: &mut [f32]) {
        assert!(
            x.len() == self.cols && out.len() == self.rows,
            "matvec of a {}x{} matrix with {} inputs into {} outputs",
            self.rows,
            self.cols,
            x.len(),
            out.len()
        );
        let nb = self.cols / BLOCK;
        // Sum of x per block: the Q4_1 offsets contribute m * sum(x over the block).
        let xsum: Vec<f32> = x.chunks_exact(BLOCK).map(|c| c.iter().sum()).collect();
        out.par_chunks_mut(ROWS_PER_TASK)
            .enumerate()
            .for_each(|(task, chunk)| {
                for (i, o) in chunk.iter_mut().enumerate() {
                    let r = task * ROWS_PER_TASK + i;
                    let blocks = r * nb..(r + 1) * nb;
                    let scales = &self.scales[blocks.clone()];
                    *o = match self.kind {
                        QuantKind::Q4_1 => {
                            let qs = &self.qs[blocks.start * 16..blocks.end * 16];
                            let offset: f32 = self.mins[blocks]
                                .iter()
                                .zip(&xsum)
                                .map(|(m, s)| m * s)
                                .sum();
                            kernel.q4_1(qs, scales, x) + offset
                        }
                        QuantKind::Q8_0 => {
                            kernel.q8_0(&self.qs[blocks.start * 32..blocks.end * 32], scales, x)
                        }
                    };
                }
            });
    }
}

/// A dot-product kernel: the instruction set it uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kernel {
    /// Plain Rust (any CPU).
    Scalar,
    /// AVX2 and FMA, 8 lanes.
    Avx2,
    /// AVX-512F, 16 lanes.
    Avx512,
}

impl Kernel {
    /// The widest kernel this CPU runs.
    pub fn detect() -> Self {
        #[cfg(target_arch = "x86_64")]
        {
            if std::arch::is_x86_feature_detected!("avx512f") {
                return Kernel::Avx512;
            }
            if std::arch::is_x86_feature_detected!("avx2")
                && std::arch::is_x86_feature_detected!("fma")
            {
                return Kernel::Avx2;
            }
        }
        Kernel::Scalar
    }

    /// Every kernel this CPU runs (for tests and benchmarks).
    pub fn available() -> Vec<Self> {
        let best = Self::detect();
        [Kernel::Scalar, Kernel::Avx2, Kernel::Avx512]
            .into_iter()
            .filter(|k| *k as u8 <= best as u8)
            .collect()
    }

    /// sum over blocks b of d_b * sum_j q_bj x_bj for one Q4_1 row (the m terms are added by
    /// the caller).
    fn q4_1(self, qs: &[u8], scales: &[f32], x: &[f32]) -> f32 {
        debug_assert!(qs.len() == scales.len() * 16 && x.len() == scales.len() * BLOCK);
        match self {
            // SAFETY: `detect` chose these kernels only where the CPU has the features, and
            // the slices have the lengths the kernels read (checked above in debug builds,
            // guaranteed by `matvec_with`).
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx512 => unsafe { x86::q4_1_avx512(qs, scales, x) },
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx2 => unsafe { x86::q4_1_avx2(qs, scales, x) },
            _ => q4_1_scalar(qs, scales, x),
        }
    }

    /// sum over blocks b of d_b * sum_j q_bj x_bj for one Q8_0 row.
    fn q8_0(self, qs: &[u8], scales: &[f32], x: &[f32]) -> f32 {
        debug_assert!(qs.len() == scales.len() * BLOCK && x.len() == scales.len() * BLOCK);
        match self {
            // SAFETY: as in `q4_1`.
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx512 => unsafe { x86::q8_0_avx512(qs, scales, x) },
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx2 => unsafe { x86::q8_0_avx2(qs, scales, x) },
            _ => q8_0_scalar(qs, scales, x),
        }
    }
}

fn q4_1_scalar(qs: &[u8], scales: &[f32], x: &[f32]) -> f32 {
    let mut total = 0.0;
    for (b, d) in scales.iter().enumerate() {
        let (q, x) = (&qs[b * 16..b * 16 + 16], &x[b * BLOCK..b * BLOCK + BLOCK]);
        let mut s = 0.0;
        for j in 0..16 {
            s += f32::from(q[j] & 0x0F) * x[j] + f32::from(q[j] >> 4) * x[j + 16];
        }
        total += d * s;
    }
    total
}

fn q8_0_scalar(qs: &[u8], scales: &[f32], x: &[f32]) -> f32 {
    let mut total = 0.0;
    for (b, d) in scales.iter().enumerate() {
        let (q, x) = (
            &qs[b * BLOCK..b * BLOCK + BLOCK],
            &x[b * BLOCK..b * BLOCK + BLOCK],
        );
        let s: f32 = q.iter().zip(x).map(|(&q, x)| f32::from(q as i8) * x).sum();
        total += d * s;
    }
    total
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use super::BLOCK;

    /// Q4_1 row dot (without the m terms), 16 lanes: per block, the low nibbles (weights
    /// 0..16) and high nibbles (16..32) widened to f32, times x, scaled by d into one
    /// accumulator.
    #[target_feature(enable = "avx512f")]
    pub unsafe fn q4_1_avx512(qs: &[u8], scales: &[f32], x: &[f32]) -> f32 {
        let mut acc = _mm512_setzero_ps();
        let low = _mm_set1_epi8(0x0F);
        for (b, &d) in scales.iter().enumerate() {
            // SAFETY: block b's 16 bytes and 32 floats lie inside the slices (caller).
            let bytes = unsafe { _mm_loadu_si128(qs.as_ptr().add(b * 16) as *const __m128i) };
            let lo = _mm_and_si128(bytes, low);
            let hi = _mm_and_si128(_mm_srli_epi16(bytes, 4), low);
            let wlo = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(lo));
            let whi = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(hi));
            let (x0, x1) = unsafe {
                (
                    _mm512_loadu_ps(x.as_ptr().add(b * BLOCK)),
                    _mm512_loadu_ps(x.as_ptr().add(b * BLOCK + 16)),
                )
            };
            let s = _mm512_fmadd_ps(whi, x1, _mm512_mul_ps(wlo, x0));
            acc = _mm512_fmadd_ps(_mm512_set1_ps(d), s, acc);
        }
        _mm512_reduce_add_ps(acc)
    }

    /// Q8_0 row dot, 16 lanes: the block's 32 signed bytes widened to f32 in two halves.
    #[target_feature(enable = "avx512f")]
    pub unsafe fn q8_0_avx512(qs: &[u8], scales: &[f32], x: &[f32]) -> f32 {
        let mut acc = _mm512_setzero_ps();
        for (b, &d) in scales.iter().enumerate() {
            // SAFETY: block b's 32 bytes and 32 floats lie inside the slices (caller).
            let (q0, q1, x0, x1) = unsafe {
                let p = qs.as_ptr().add(b * BLOCK) as *const __m128i;
                (
                    _mm_loadu_si128(p),
                    _mm_loadu_si128(p.add(1)),
                    _mm512_loadu_ps(x.as_ptr().add(b * BLOCK)),
                    _mm512_loadu_ps(x.as_ptr().add(b * BLOCK + 16)),
                )
            };
            let w0 = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q0));
            let w1 = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q1));
            let s = _mm512_fmadd_ps(w1, x1, _mm512_mul_ps(w0, x0));
            acc = _mm512_fmadd_ps(_mm512_set1_ps(d), s, acc);
        }
        _mm512_reduce_add_ps(acc)
    }

    /// Horizontal sum of 8 lanes.
    #[target_feature(enable = "avx2")]
    unsafe fn sum8(v: __m256) -> f32 {
        let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        let s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
        _mm_cvtss_f32(s)
    }

    /// Q4_1 row dot (without the m terms), 8 lanes.
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn q4_1_avx2(qs: &[u8], scales: &[f32], x: &[f32]) -> f32 {
        let mut acc = _mm256_setzero_ps();
        let low = _mm_set1_epi8(0x0F);
        for (b, &d) in scales.iter().enumerate() {
            // SAFETY: block b's 16 bytes and 32 floats lie inside the slices (caller).
            let bytes = unsafe { _mm_loadu_si128(qs.as_ptr().add(b * 16) as *const __m128i) };
            let lo = _mm_and_si128(bytes, low); // weights 0..16
            let hi = _mm_and_si128(_mm_srli_epi16(bytes, 4), low); // weights 16..32
            let w = |v: __m128i| _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(v));
            let xs = |k: usize| unsafe { _mm256_loadu_ps(x.as_ptr().add(b * BLOCK + 8 * k)) };
            let mut s = _mm256_mul_ps(w(lo), xs(0));
            s = _mm256_fmadd_ps(w(_mm_srli_si128(lo, 8)), xs(1), s);
            s = _mm256_fmadd_ps(w(hi), xs(2), s);
            s = _mm256_fmadd_ps(w(_mm_srli_si128(hi, 8)), xs(3), s);
            acc = _mm256_fmadd_ps(_mm256_set1_ps(d), s, acc);
        }
        unsafe { sum8(acc) }
    }

    /// Q8_0 row dot, 8 lanes.
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn q8_0_avx2(qs: &[u8], scales: &[f32], x: &[f32]) -> f32 {
        let mut acc = _mm256_setzero_ps();
        for (b, &d) in scales.iter().enumerate() {
            let mut s = _mm256_setzero_ps();
            for k in 0..4 {
                // SAFETY: block b's 32 bytes and 32 floats lie inside the slices (caller).
                let (q, xv) = unsafe {
                    (
                        _mm_loadl_epi64(qs.as_ptr().add(b * BLOCK + 8 * k) as *const __m128i),
                        _mm256_loadu_ps(x.as_ptr().add(b * BLOCK + 8 * k)),
                    )
                };
                s = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)), xv, s);
            }
            acc = _mm256_fmadd_ps(_mm256_set1_ps(d), s, acc);
        }
        unsafe { sum8(acc) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    /// Random blocks in the file's byte layout.
    fn random_blocks(kind: QuantKind, rows: usize, cols: usize, seed: u64) -> Vec<u8> {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
        let blocks = rows * cols / BLOCK;
        let mut out = vec![];
        for _ in 0..blocks {
            out.extend(half::f16::from_f32(rng.random_range(0.001..0.1)).to_le_bytes());
            match kind {
                QuantKind::Q4_1 => {
                    out.extend(half::f16::from_f32(rng.random_range(-0.5..0.5)).to_le_bytes());
                    out.extend((0..16).map(|_| rng.random::<u8>()));
                }
                QuantKind::Q8_0 => out.extend((0..32).map(|_| rng.random::<u8>())),
            }
        }
        out
    }

    /// Every kernel against the f64 product of the weights `get` reads, and `get` against the
    /// block layout (low nibble: weight j, high nibble: weight j + 16).
    #[test]
    fn every_kernel_matches_the_dequantized_product() {
        let (rows, cols) = (130, 96);
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(9);
        let x: Vec<f32> = (0..cols).map(|_| rng.random_range(-1.0..1.0)).collect();
        for (kind, dtype) in [
            (QuantKind::Q4_1, GgmlDType::Q4_1),
            (QuantKind::Q8_0, GgmlDType::Q8_0),
        ] {
            let data = random_blocks(kind, rows, cols, 3);
            let m = QuantMatrix::from_gguf(dtype, rows, cols, &data)
                .unwrap()
                .unwrap();
            // Row 0, block 0 by hand.
            let (d, first) = (half::f16::from_le_bytes([data[0], data[1]]).to_f32(), 4);
            match kind {
                QuantKind::Q4_1 => {
                    let min = half::f16::from_le_bytes([data[2], data[3]]).to_f32();
                    assert_eq!(m.get(0, 0), d * f32::from(data[first] & 15) + min);
                    assert_eq!(m.get(0, 16), d * f32::from(data[first] >> 4) + min);
                }
                QuantKind::Q8_0 => assert_eq!(m.get(0, 1), d * f32::from(data[3] as i8)),
            }
            let want: Vec<f64> = (0..rows)
                .map(|r| {
                    (0..cols)
                        .map(|c| f64::from(m.get(r, c)) * f64::from(x[c]))
                        .sum()
                })
                .collect();
            for kernel in Kernel::available() {
                let mut out = vec![0f32; rows];
                m.matvec_with(kernel, &x, &mut out);
                for (r, (o, w)) in out.iter().zip(&want).enumerate() {
                    assert!(
                        (f64::from(*o) - w).abs() < 1e-4 * (1.0 + w.abs()),
                        "{kind:?} {kernel:?} row {r}: {o} vs {w}"
                    );
                }
            }
        }
    }

    #[test]
    fn bad_block_data_is_an_error_and_other_dtypes_are_none() {
        let data = random_blocks(QuantKind::Q4_1, 2, 64, 1);
        assert!(QuantMatrix::from_gguf(GgmlDType::Q4_1, 2, 64, &data[1..]).is_err());
        assert!(QuantMatrix::from_gguf(GgmlDType::Q4_1, 2, 48, &data).is_err());
        assert!(QuantMatrix::from_gguf(GgmlDType::F32, 2, 64, &data)
            .unwrap()
            .is_none());
    }
}
