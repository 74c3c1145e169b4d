//! Matrix products on strided f32 views through the `gemm` crate. Large products are split by
//! output rows across the rayon pool; every output element is computed by exactly one thread
//! in a fixed order, so results do not depend on scheduling.

use gemm::{gemm, Parallelism};
use rayon::prelude::*;

use super::bf16::{self, Bf16Path, PackedB, Precision};

/// A strided matrix inside a flat buffer: element (r, c) is at `offset + r * rs + c * cs`.
#[derive(Debug, Clone, Copy)]
pub struct View {
    /// Index of element (0, 0).
    pub offset: usize,
    /// Number of rows.
    pub rows: usize,
    /// Number of columns.
    pub cols: usize,
    /// Distance between rows.
    pub rs: usize,
    /// Distance between columns.
    pub cs: usize,
}

impl View {
    /// Row-major `rows x cols` with row stride `rs` starting at `offset`.
    pub fn rows(offset: usize, rows: usize, cols: usize, rs: usize) -> Self {
        Self {
            offset,
            rows,
            cols,
            rs,
            cs: 1,
        }
    }

    /// A contiguous row-major `rows x cols` matrix at `offset`.
    pub fn dense(offset: usize, rows: usize, cols: usize) -> Self {
        Self::rows(offset, rows, cols, cols)
    }

    /// The transpose (no copy).
    pub fn t(self) -> Self {
        Self {
            offset: self.offset,
            rows: self.cols,
            cols: self.rows,
            rs: self.cs,
            cs: self.rs,
        }
    }

    /// One past the largest index the view touches.
    pub(super) fn end(&self) -> usize {
        if self.rows == 0 || self.cols == 0 {
            return self.offset;
        }
        self.offset + (self.rows - 1) * self.rs + (self.cols - 1) * self.cs + 1
    }

    /// The buffer range of a contiguous (dense) view.
    pub fn range(&self) -> std::ops::Range<usize> {
        debug_assert!(self.cs == 1 && (self.rows <= 1 || self.rs == self.cols));
        self.offset..self.offset + self.rows * self.cols
    }

    /// Rows `start .. start + n`.
    fn row_range(self, start: usize, n: usize) -> Self {
        Self {
            offset: self.offset + start * self.rs,
            rows: n,
            ..self
        }
    }
}

/// Products below this many multiply-adds run on one thread.
const PARALLEL_MIN_MACS: usize = 1 << 18;

/// `dst = a @ b`, or `dst += a @ b` when `accumulate`, in f32. Panics if the shapes disagree
/// or a view leaves its buffer (internal invariants of the kernel).
pub fn matmul(
    dst: &mut [f32],
    d: View,
    a: &[f32],
    av: View,
    b: &[f32],
    bv: View,
    accumulate: bool,
) {
    matmul_in(Precision::F32, dst, d, a, av, b, bv, accumulate);
}

/// [`matmul`] in `precision` (bf16 on this machine's fastest [`Bf16Path`]).
#[allow(clippy::too_many_arguments)]
pub fn matmul_in(
    precision: Precision,
    dst: &mut [f32],
    d: View,
    a: &[f32],
    av: View,
    b: &[f32],
    bv: View,
    accumulate: bool,
) {
    let (a, b) = (Mat { data: a, view: av }, Mat { data: b, view: bv });
    product(dst, d, a, b, accumulate, true, bf16_path(precision));
}

/// The bf16 path a product in `precision` runs on (`None`: f32).
fn bf16_path(precision: Precision) -> Option<Bf16Path> {
    (precision == Precision::Bf16).then(Bf16Path::detect)
}

/// [`matmul`] with bf16 operands on a given `path` (tests and benchmarks compare paths; the
/// caller checks [`Bf16Path::available`]).
#[allow(clippy::too_many_arguments)]
pub fn matmul_bf16_on(
    path: Bf16Path,
    dst: &mut [f32],
    d: View,
    a: &[f32],
    av: View,
    b: &[f32],
    bv: View,
    accumulate: bool,
) {
    assert!(
        path.available().is_ok(),
        "bf16 path {} is not available",
        path.name()
    );
    let (a, b) = (Mat { data: a, view: av }, Mat { data: b, view: bv });
    product(dst, d, a, b, accumulate, true, Some(path));
}

/// `dst = a @ b` (or `+=` with `accumulate`) with `b` rounded to bf16 and packed beforehand
/// ([`PackedB`]), on the path it was packed for; `a` is rounded per call. Panics if the shapes
/// disagree or a view leaves its buffer.
pub fn matmul_packed(dst: &mut [f32], d: View, a: &[f32], av: View, b: &PackedB, accumulate: bool) {
    assert!(
        d.rows == av.rows && d.cols == b.cols() && av.cols == b.rows(),
        "matmul shapes {}x{} = {}x{} @ {}x{} (packed)",
        d.rows,
        d.cols,
        av.rows,
        av.cols,
        b.rows(),
        b.cols()
    );
    assert!(d.end() <= dst.len() && av.end() <= a.len());
    if d.rows == 0 || d.cols == 0 {
        return;
    }
    if av.cols == 0 {
        empty_sum(dst, d, accumulate);
        return;
    }
    bf16::product_packed(dst, d, a, av, b, accumulate, true);
}

/// [`matmul_in`] on the calling thread only (for small products inside work that is already
/// spread over the pool, such as one batch row's attention).
#[allow(clippy::too_many_arguments)]
pub fn matmul_serial(
    precision: Precision,
    dst: &mut [f32],
    d: View,
    a: &[f32],
    av: View,
    b: &[f32],
    bv: View,
    accumulate: bool,
) {
    let (a, b) = (Mat { data: a, view: av }, Mat { data: b, view: bv });
    product(dst, d, a, b, accumulate, false, bf16_path(precision));
}

/// An operand of a product: a view and the buffer it reads.
#[derive(Clone, Copy)]
struct Mat<'a> {
    data: &'a [f32],
    view: View,
}

fn product(
    dst: &mut [f32],
    d: View,
    a: Mat,
    b: Mat,
    accumulate: bool,
    parallel: bool,
    bf16_path: Option<Bf16Path>,
) {
    let (av, bv) = (a.view, b.view);
    let (a, b) = (a.data, b.data);
    assert!(
        d.rows == av.rows && d.cols == bv.cols && av.cols == bv.rows,
        "matmul shapes {}x{} = {}x{} @ {}x{}",
        d.rows,
        d.cols,
        av.rows,
        av.cols,
        bv.rows,
        bv.cols
    );
    assert!(d.end() <= dst.len() && av.end() <= a.len() && bv.end() <= b.len());
    if d.rows == 0 || d.cols == 0 {
        return;
    }
    if av.cols == 0 {
        empty_sum(dst, d, accumulate);
        return;
    }
    if let Some(path) = bf16_path {
        bf16::product(dst, d, a, av, b, bv, accumulate, parallel, path);
        return;
    }
    let macs = d.rows * d.cols * av.cols;
    let dst_ptr = dst.as_mut_ptr() as usize;
    let (a_ptr, b_ptr) = (a.as_ptr() as usize, b.as_ptr() as usize);
    let run = |start: usize, n: usize| {
        let (dc, ac) = (d.row_range(start, n), av.row_range(start, n));
        // SAFETY: the views were checked to lie inside their buffers above, and the row
        // ranges of different chunks are disjoint, so no two threads write one element.
        unsafe {
            gemm(
                dc.rows,
                dc.cols,
                ac.cols,
                (dst_ptr as *mut f32).add(dc.offset),
                dc.cs as isize,
                dc.rs as isize,
                accumulate,
                (a_ptr as *const f32).add(ac.offset),
                ac.cs as isize,
                ac.rs as isize,
                (b_ptr as *const f32).add(bv.offset),
                bv.cs as isize,
                bv.rs as isize,
                1.0,
                1.0,
                false,
                false,
                false,
                Parallelism::None,
            );
        }
    };
    split_rows(d.rows, macs, parallel, 1, run);
}

/// A product of depth 0: `dst[d]` becomes 0, or stays as it is when accumulating.
fn empty_sum(dst: &mut [f32], d: View, accumulate: bool) {
    if !accumulate {
        for r in 0..d.rows {
            for c in 0..d.cols {
                dst[d.offset + r * d.rs + c * d.cs] = 0.0;
            }
        }
    }
}

/// Runs `run(start, n)` over row ranges covering `rows`: one range below [`PARALLEL_MIN_MACS`]
/// multiply-adds or when not `parallel`, else one per pool thread, each starting at a multiple
/// of `align` rows. The ranges are disjoint, so every output row is written by one thread.
pub(super) fn split_rows(
    rows: usize,
    macs: usize,
    parallel: bool,
    align: usize,
    run: impl Fn(usize, usize) + Sync,
) {
    let threads = rayon::current_num_threads().max(1);
    let chunks = if macs < PARALLEL_MIN_MACS || !parallel {
        1
    } else {
        threads.min(rows.div_ceil(align))
    };
    if chunks == 1 {
        run(0, rows);
        return;
    }
    let per = rows.div_ceil(chunks).div_ceil(align) * align;
    (0..chunks).into_par_iter().for_each(|c| {
        let start = c * per;
        if start < rows {
            run(start, per.min(rows - start));
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The product against a triple loop, for plain, transposed and strided views.
    #[test]
    fn matches_the_triple_loop() {
        let (m, n, k) = (70, 33, 129);
        let a: Vec<f32> = (0..m * k).map(|i| ((i * 7) % 13) as f32 - 6.0).collect();
        let b: Vec<f32> = (0..k * n)
            .map(|i| ((i * 5) % 11) as f32 * 0.5 - 2.0)
            .collect();
        let mut want = vec![0f32; m * n];
        for r in 0..m {
            for c in 0..n {
                want[r * n + c] = (0..k).map(|i| a[r * k + i] * b[i * n + c]).sum();
            }
        }
        // Plain, and with b given as its transpose stored row-major.
        let mut got = vec![1f32; m * n];
        matmul(
            &mut got,
            View::dense(0, m, n),
            &a,
            View::dense(0, m, k),
            &b,
            View::dense(0, k, n),
            false,
        );
        assert_eq!(got, want);
        let bt: Vec<f32> = (0..n * k).map(|i| b[(i % k) * n + i / k]).collect();
        let mut got2 = vec![0f32; m * n];
        matmul(
            &mut got2,
            View::dense(0, m, n),
            &a,
            View::dense(0, m, k),
            &bt,
            View::dense(0, n, k).t(),
            false,
        );
        assert_eq!(got2, want);
        // Accumulate into every other row of a wider buffer.
        let mut wide = vec![1f32; 2 * m * (n + 3)];
        matmul(
            &mut wide,
            View::rows(n + 3, m, n, 2 * (n + 3)),
            &a,
            View::dense(0, m, k),
            &b,
            View::dense(0, k, n),
            true,
        );
        for r in 0..m {
            for c in 0..n {
                assert_eq!(wide[(2 * r + 1) * (n + 3) + c], want[r * n + c] + 1.0);
                assert_eq!(wide[2 * r * (n + 3) + c], 1.0);
            }
        }
    }
}
