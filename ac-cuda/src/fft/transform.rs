//! A planned transform and the passes that compute it: one launch of the builtin `dft_f32`,
//! `dft_f64` or (half precision) `dft_ex` per dimension (a multi-dimensional DFT is separable), reading the program's input,
//! writing its output, and in between two scratch buffers of the plan's, packed. Plain
//! functions over the plan: no I/O, tested here.

use ac_proto::backend::builtin::{Dft, DftKind, DftStrides, GemmElement};

/// What a plan transforms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Domain {
    /// Complex to complex (`C2C`, `Z2Z`).
    ComplexToComplex,
    /// Real to complex (`R2C`, `D2Z`): the last dimension's output is `n / 2 + 1` long.
    RealToComplex,
    /// Complex to real (`C2R`, `Z2D`).
    ComplexToReal,
}

/// The scalars of a plan's input and output, and so what it computes in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Precision {
    /// `f32` (`C2C`, `R2C`, `C2R`; `CUDA_C_32F`, `CUDA_R_32F`).
    Single,
    /// `f64` (`Z2Z`, `D2Z`, `Z2D`; `CUDA_C_64F`, `CUDA_R_64F`).
    Double,
    /// IEEE binary16 (`CUDA_C_16F`, `CUDA_R_16F`), computed as `f32`.
    Half,
    /// bfloat16 (`CUDA_C_16BF`, `CUDA_R_16BF`), computed as `f32`.
    Bfloat16,
}

impl Precision {
    /// Bytes of one of the program's scalars (a complex element is two).
    pub fn scalar_bytes(self) -> u64 {
        match self {
            Precision::Single => 4,
            Precision::Double => 8,
            Precision::Half | Precision::Bfloat16 => 2,
        }
    }

    /// The element type of the program's buffers for `dft_ex`, for a half-precision plan;
    /// `None`: the plan runs `dft_f32` or `dft_f64` on its own scalars.
    pub fn half(self) -> Option<GemmElement> {
        match self {
            Precision::Single | Precision::Double => None,
            Precision::Half => Some(GemmElement::F16),
            Precision::Bfloat16 => Some(GemmElement::Bf16),
        }
    }

    /// Bytes of a scalar of the plan's scratch: `f32` unless the plan is in `f64`.
    pub fn scratch_bytes(self) -> u64 {
        if self == Precision::Double {
            8
        } else {
            4
        }
    }

    /// The builtin kernel of each pass.
    pub fn kernel(self) -> &'static str {
        match self {
            Precision::Single => "dft_f32",
            Precision::Double => "dft_f64",
            Precision::Half | Precision::Bfloat16 => "dft_ex",
        }
    }
}

/// The data layout of the program's input or output (cuFFT's "advanced data layout"): element
/// `(x_0, ..., x_r-1)` of batch `b` at `b * dist + (x_0 embed_1 ... embed_r-1 + ... + x_r-1) *
/// stride`; `embed: None` is the basic, packed layout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    /// The storage dimensions (the first is not used), or `None`.
    pub embed: Option<Vec<u64>>,
    /// From one element to the next along the last dimension.
    pub stride: u64,
    /// From one batch to the next.
    pub dist: u64,
}

impl Layout {
    /// The basic layout.
    pub fn basic() -> Self {
        Layout { embed: None, stride: 1, dist: 0 }
    }
}

/// A planned transform.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transform {
    /// The program's scalars.
    pub precision: Precision,
    /// What it computes.
    pub domain: Domain,
    /// The transform's lengths, outermost first (1 to 3 of them).
    pub n: Vec<u64>,
    /// Transforms computed by one execution.
    pub batch: u64,
    /// The input's layout.
    pub input: Layout,
    /// The output's layout.
    pub output: Layout,
}

/// One of a pass's buffers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Buffer {
    /// The program's input.
    Input,
    /// The program's output.
    Output,
    /// The plan's first and second scratch buffers.
    ScratchA,
    ScratchB,
}

/// A buffer as a pass sees it: its dimensions (outermost first, in its own elements) and the
/// stride of each, and the stride from one batch to the next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct View {
    /// Elements along each dimension.
    pub dims: Vec<u64>,
    /// Elements from one index to the next, for each dimension.
    pub strides: Vec<u64>,
    /// Elements from one batch to the next.
    pub batch_stride: u64,
    /// Batches.
    pub batch: u64,
}

impl View {
    /// A view of `dims` laid out as `layout` says (`storage`: the basic layout's dimensions).
    fn of(dims: Vec<u64>, layout: &Layout, storage: &[u64], batch: u64) -> Self {
        let embed = layout.embed.clone().unwrap_or_else(|| storage.to_vec());
        let stride = if layout.embed.is_some() { layout.stride } else { 1 };
        let strides: Vec<u64> =
            (0..dims.len()).map(|i| embed[i + 1..].iter().fold(stride, |a, &e| a.saturating_mul(e))).collect();
        let packed = embed.iter().fold(1u64, |a, &e| a.saturating_mul(e));
        let batch_stride = if layout.embed.is_some() { layout.dist } else { packed };
        View { dims, strides, batch_stride, batch }
    }

    /// A packed view of `dims`.
    fn packed(dims: Vec<u64>, batch: u64) -> Self {
        let basic = Layout::basic();
        let storage = dims.clone();
        View::of(dims, &basic, &storage, batch)
    }

    /// Elements from the buffer's pointer to the last one the view holds, plus one.
    pub fn span(&self) -> u64 {
        if self.batch == 0 || self.dims.contains(&0) {
            return 0;
        }
        let mut end = (self.batch - 1).saturating_mul(self.batch_stride);
        for (d, s) in self.dims.iter().zip(&self.strides) {
            end = end.saturating_add((d - 1).saturating_mul(*s));
        }
        end.saturating_add(1)
    }

    /// The strides of a pass along `axis`: the step along it, and the lines over the batch and
    /// the other dimensions (three, padded with single lines).
    fn along(&self, axis: usize) -> ([u64; 3], DftStrides) {
        let mut lines = [1u64; 3];
        let mut strides = DftStrides { step: self.strides[axis], line: [0; 3] };
        (lines[0], strides.line[0]) = (self.batch, self.batch_stride);
        let others = (0..self.dims.len()).filter(|&i| i != axis);
        for (slot, i) in (1..3).zip(others) {
            (lines[slot], strides.line[slot]) = (self.dims[i], self.strides[i]);
        }
        (lines, strides)
    }
}

/// One launch: a transform (or a copy) from one buffer to another.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pass {
    /// The launch's shape.
    pub dft: Dft,
    /// Where it reads and writes.
    pub from: Buffer,
    /// Where it writes.
    pub to: Buffer,
}

impl Transform {
    /// The length of the last dimension's complex side: `n / 2 + 1` for real transforms.
    fn complex_dims(&self) -> Vec<u64> {
        let mut dims = self.n.clone();
        if self.domain != Domain::ComplexToComplex {
            let last = dims.len() - 1;
            dims[last] = dims[last] / 2 + 1;
        }
        dims
    }

    /// Whether the input and the output are complex.
    pub fn complex(&self) -> [bool; 2] {
        [self.domain != Domain::RealToComplex, self.domain != Domain::ComplexToReal]
    }

    /// The program's input and output as views; `in_place`: they are the same memory (whose
    /// basic layout then pads a real dimension to the complex one's size, as cuFFT's does).
    pub fn views(&self, in_place: bool) -> [View; 2] {
        let complex = self.complex_dims();
        let mut padded = complex.clone();
        let last = padded.len() - 1;
        padded[last] *= 2;
        let real_storage = if in_place { padded } else { self.n.clone() };
        let view = |complex_side: bool, layout: &Layout| {
            if complex_side {
                View::of(complex.clone(), layout, &complex, self.batch)
            } else {
                View::of(self.n.clone(), layout, &real_storage, self.batch)
            }
        };
        // A complex side's dimensions are the transform's own for a complex transform.
        let [complex_in, complex_out] = self.complex();
        [view(complex_in, &self.input), view(complex_out, &self.output)]
    }

    /// Complex elements of each scratch buffer.
    pub fn scratch_elements(&self) -> u64 {
        self.complex_dims().iter().fold(self.batch, |a, &d| a.saturating_mul(d))
    }

    /// The passes of one execution, in order; `inverse` is the direction of a complex
    /// transform (a real-to-complex one is forward, complex-to-real inverse).
    pub fn passes(&self, inverse: bool, in_place: bool) -> Vec<Pass> {
        let rank = self.n.len();
        let last = rank - 1;
        // (axis, kind) in order.
        let mut steps: Vec<(usize, DftKind)> = match self.domain {
            Domain::ComplexToComplex => (0..rank).rev().map(|a| (a, DftKind::ComplexToComplex)).collect(),
            Domain::RealToComplex => std::iter::once((last, DftKind::RealToComplex))
                .chain((0..last).rev().map(|a| (a, DftKind::ComplexToComplex)))
                .collect(),
            Domain::ComplexToReal => (0..last)
                .map(|a| (a, DftKind::ComplexToComplex))
                .chain(std::iter::once((last, DftKind::ComplexToReal)))
                .collect(),
        };
        // One pass in place cannot read what it overwrites: through a scratch buffer, the copy
        // before a complex-to-real pass (whose output is real), after any other.
        if rank == 1 && in_place {
            if self.domain == Domain::ComplexToReal {
                steps.insert(0, (last, DftKind::Copy));
            } else {
                steps.push((last, DftKind::Copy));
            }
        }
        let [input, output] = self.views(in_place);
        let complex = self.complex_dims();
        let scratch = View::packed(complex.clone(), self.batch);
        let inverse = match self.domain {
            Domain::ComplexToComplex => inverse,
            Domain::RealToComplex => false,
            Domain::ComplexToReal => true,
        };
        let count = steps.len();
        steps
            .into_iter()
            .enumerate()
            .map(|(i, (axis, kind))| {
                let from = match i {
                    0 => Buffer::Input,
                    _ if i % 2 == 1 => Buffer::ScratchA,
                    _ => Buffer::ScratchB,
                };
                let to = if i + 1 == count {
                    Buffer::Output
                } else if i % 2 == 0 {
                    Buffer::ScratchA
                } else {
                    Buffer::ScratchB
                };
                let view = |b: Buffer| match b {
                    Buffer::Input => &input,
                    Buffer::Output => &output,
                    Buffer::ScratchA | Buffer::ScratchB => &scratch,
                };
                let (lines, in_strides) = view(from).along(axis);
                let (_, out_strides) = view(to).along(axis);
                // A pass along the last axis of a real transform (or its copy) spans its full
                // length n; the complex side's h elements follow from the kind.
                let n = match kind {
                    DftKind::Copy => complex[axis],
                    _ => self.n[axis],
                };
                let dft = Dft { kind, inverse, n, lines, input: in_strides, output: out_strides };
                Pass { dft, from, to }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn transform(domain: Domain, n: &[u64], batch: u64) -> Transform {
        Transform {
            precision: Precision::Single,
            domain,
            n: n.to_vec(),
            batch,
            input: Layout::basic(),
            output: Layout::basic(),
        }
    }

    #[test]
    fn a_two_dimensional_real_transform_goes_rows_then_columns_through_scratch() {
        let t = transform(Domain::RealToComplex, &[4, 6], 2);
        let passes = t.passes(false, false);
        assert_eq!(passes.len(), 2);
        // Along the last axis: 6 reals in a row to 4 complex, 4 rows a batch, 2 batches.
        let first = &passes[0];
        assert_eq!(
            (first.from, first.to, first.dft.kind, first.dft.n),
            (Buffer::Input, Buffer::ScratchA, DftKind::RealToComplex, 6)
        );
        assert_eq!(first.dft.lines, [2, 4, 1]);
        assert_eq!((first.dft.input.step, first.dft.input.line), (1, [24, 6, 0]));
        assert_eq!((first.dft.output.step, first.dft.output.line), (1, [16, 4, 0]));
        // Then along the first: 4 complex a column, 4 columns (the complex side's), into the output.
        let second = &passes[1];
        assert_eq!(
            (second.from, second.to, second.dft.kind, second.dft.n),
            (Buffer::ScratchA, Buffer::Output, DftKind::ComplexToComplex, 4)
        );
        assert_eq!((second.dft.lines, second.dft.input.step, second.dft.output.step), ([2, 4, 1], 4, 4));
        assert_eq!(t.scratch_elements(), 2 * 4 * 4);
        assert_eq!(t.views(false).map(|v| v.span()), [48, 32]);
    }

    #[test]
    fn three_dimensions_alternate_scratch_buffers_and_a_complex_to_real_ends_real() {
        let c2c = transform(Domain::ComplexToComplex, &[2, 3, 5], 1);
        let order: Vec<_> = c2c.passes(true, false).iter().map(|p| (p.from, p.to, p.dft.n, p.dft.inverse)).collect();
        assert_eq!(
            order,
            [
                (Buffer::Input, Buffer::ScratchA, 5, true),
                (Buffer::ScratchA, Buffer::ScratchB, 3, true),
                (Buffer::ScratchB, Buffer::Output, 2, true)
            ]
        );
        let c2r = transform(Domain::ComplexToReal, &[3, 8], 1).passes(false, false);
        let kinds: Vec<_> = c2r.iter().map(|p| (p.dft.kind, p.dft.n, p.dft.inverse)).collect();
        assert_eq!(kinds, [(DftKind::ComplexToComplex, 3, true), (DftKind::ComplexToReal, 8, true)]);
        // The complex-to-real pass reads 5 complex a row and writes 8 reals a row.
        assert_eq!((c2r[1].dft.input.line[1], c2r[1].dft.output.line[1]), (5, 8));
    }

    #[test]
    fn one_dimension_in_place_goes_through_scratch_and_pads_real_rows() {
        let r2c = transform(Domain::RealToComplex, &[8], 3);
        let passes = r2c.passes(false, true);
        let route: Vec<_> = passes.iter().map(|p| (p.from, p.to, p.dft.kind)).collect();
        assert_eq!(
            route,
            [
                (Buffer::Input, Buffer::ScratchA, DftKind::RealToComplex),
                (Buffer::ScratchA, Buffer::Output, DftKind::Copy)
            ]
        );
        // In place, a row of 8 reals is stored in 10 (5 complex).
        assert_eq!(passes[0].dft.input.line[0], 10);
        assert_eq!(passes[1].dft.n, 5);
        let c2r = transform(Domain::ComplexToReal, &[8], 1).passes(false, true);
        assert_eq!(c2r.iter().map(|p| p.dft.kind).collect::<Vec<_>>(), [DftKind::Copy, DftKind::ComplexToReal]);
        let c2c = transform(Domain::ComplexToComplex, &[8], 1).passes(false, false);
        assert_eq!(c2c.iter().map(|p| (p.from, p.to)).collect::<Vec<_>>(), [(Buffer::Input, Buffer::Output)]);
    }

    #[test]
    fn an_advanced_layout_sets_the_strides() {
        // 2D 4 x 3 complex, stored in rows of 5, elements 2 apart, batches 50 apart.
        let layout = Layout { embed: Some(vec![4, 5]), stride: 2, dist: 50 };
        let t = Transform { input: layout.clone(), output: layout, ..transform(Domain::ComplexToComplex, &[4, 3], 2) };
        let [input, _] = t.views(false);
        assert_eq!((input.strides.clone(), input.batch_stride), (vec![10, 2], 50));
        assert_eq!(input.span(), 50 + 3 * 10 + 2 * 2 + 1);
    }
}
