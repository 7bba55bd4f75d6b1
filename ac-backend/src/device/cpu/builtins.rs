//! The CPU device's builtin kernels: each launch's arguments read and checked, its buffers
//! read into host vectors (converted where a gemm's matrices are of half precision), the
//! kernel run in Rust, and what it wrote stored back.

use ac_proto::backend::{ErrorKind, KernelArg, WireError};

use super::{check_range, Allocation, CpuContext};
use crate::device::abs_reduce;
use crate::device::builtin;
use crate::device::dft::{self, FromF64};
use crate::device::epilogue::{self, Aux, Epilogue, EpilogueElement, Kept, Real};
use crate::device::gemm::{self, Complex, Element, Gemm, GemmElement};
use crate::device::lu::{self, Pivot};
use crate::device::packed;
use crate::device::qr::{self, Reflect};
use crate::device::structured;
use crate::device::trsm::{self, Field};
use crate::device::vector_copy::{self, VectorCopy};
use crate::device::{DeviceArg, DeviceResult};

impl CpuContext {
    /// Reads `n` f32 values at a pointer argument.
    fn read_f32s(&self, arg: &DeviceArg, n: u64, what: &str) -> DeviceResult<Vec<f32>> {
        self.read_elements(arg, n, what)
    }

    /// Writes f32 values at a pointer argument.
    fn write_f32s(&self, arg: &DeviceArg, values: &[f32], what: &str) -> DeviceResult<()> {
        self.write_elements(arg, 0, values, what)
    }

    /// Reads `n` elements at a pointer argument.
    fn read_elements<T: Element>(&self, arg: &DeviceArg, n: u64, what: &str) -> DeviceResult<Vec<T>> {
        let (mem, range) = self.span(arg, 0, n, T::BYTES as u64, what)?;
        let values = mem.read(range).chunks_exact(T::BYTES).map(T::from_le).collect();
        Ok(values)
    }

    /// Writes elements at a pointer argument, `at` elements past it.
    fn write_elements<T: Element>(&self, arg: &DeviceArg, at: u64, values: &[T], what: &str) -> DeviceResult<()> {
        let (mem, range) = self.span(arg, at, values.len() as u64, T::BYTES as u64, what)?;
        for (dst, v) in mem.write(range).chunks_exact_mut(T::BYTES).zip(values) {
            v.write_le(dst);
        }
        Ok(())
    }

    /// Reads `n` elements of a gemm's matrix or a DFT's buffer as `T`: stored as `T`, or
    /// (`blas_gemm_ex`, `dft_ex`) as `element`, converted (exactly: `T` is `f32` there).
    fn read_matrix<T: Element + FromF64>(
        &self,
        arg: &DeviceArg,
        n: u64,
        element: Option<GemmElement>,
        what: &str,
    ) -> DeviceResult<Vec<T>> {
        let Some(element) = element else { return self.read_elements(arg, n, what) };
        let (mem, range) = self.span(arg, 0, n, element.bytes(), what)?;
        let values = mem
            .read(range)
            .chunks_exact(element.bytes() as usize)
            .map(|bytes| T::from_f64(element.load(bytes).into()))
            .collect();
        Ok(values)
    }

    /// Writes elements of a gemm's matrix or a DFT's buffer, `at` elements past its pointer: as
    /// `T`, or (`blas_gemm_ex`, `dft_ex`) rounded to `element`.
    fn write_matrix<T: Element + Into<f64>>(
        &self,
        arg: &DeviceArg,
        at: u64,
        values: &[T],
        element: Option<GemmElement>,
        what: &str,
    ) -> DeviceResult<()> {
        let Some(element) = element else { return self.write_elements(arg, at, values, what) };
        let (mem, range) = self.span(arg, at, values.len() as u64, element.bytes(), what)?;
        for (dst, &v) in mem.write(range).chunks_exact_mut(element.bytes() as usize).zip(values) {
            element.store(v.into() as f32, dst);
        }
        Ok(())
    }

    /// Resolves the bytes of elements `at..at + n` of a pointer argument, which must hold
    /// them and be aligned to an element.
    fn span(
        &self,
        arg: &DeviceArg,
        at: u64,
        n: u64,
        width: u64,
        what: &str,
    ) -> DeviceResult<(Allocation, std::ops::Range<usize>)> {
        let DeviceArg::Mem { mem, offset, len } = *arg else {
            return Err(WireError::new(ErrorKind::InvalidArgument, format!("{what}: expected a pointer")));
        };
        let (start, need) = match (at.checked_mul(width), at.checked_add(n).and_then(|end| end.checked_mul(width))) {
            (Some(start), Some(need)) => (start, need),
            _ => return Err(WireError::new(ErrorKind::OutOfBounds, format!("{what}: size overflows"))),
        };
        if need > len {
            return Err(WireError::new(
                ErrorKind::OutOfBounds,
                format!("{what}: kernel accesses {need} bytes but only {len} are allocated from the pointer"),
            ));
        }
        if offset % width != 0 {
            return Err(WireError::new(
                ErrorKind::InvalidArgument,
                format!("{what}: misaligned address (offset {offset})"),
            ));
        }
        let memory = self.memory(mem)?;
        let range = check_range(memory.len(), offset + start, need - start)?;
        Ok((memory, range))
    }

    /// Runs `blas_sgemm`, `blas_dgemm` or (`types` given) `blas_gemm_ex`: reads what the
    /// product touches, computes in `T`, writes back each column of `C` it computed (not the
    /// gaps a leading dimension leaves). A launch that computes no element touches nothing (its
    /// strides were never checked).
    fn gemm<T: Element + Into<f64> + FromF64>(
        &self,
        name: &str,
        args: &[DeviceArg],
        types: Option<[GemmElement; 3]>,
    ) -> DeviceResult<()> {
        let g = gemm::shape(name, args)?;
        if g.is_empty() {
            return Ok(());
        }
        let [ta, tb, tc] = types.map_or([None; 3], |t| t.map(Some));
        let [na, nb, nc] = g.footprints();
        let [a, b, c] = gemm::MATRICES;
        let (alpha, beta) = (T::of(&args[gemm::ALPHA])?, T::of(&args[gemm::BETA])?);
        let mut a = self.read_matrix::<T>(&args[a], na, ta, "gemm A")?;
        let mut b = self.read_matrix::<T>(&args[b], nb, tb, "gemm B")?;
        if let Some(structure) = structured::structure(name, args)? {
            structure.complete_operand(&g, [&mut a, &mut b]);
        }
        let mut out = self.read_matrix::<T>(&args[c], nc, tc, "gemm C")?;
        let (conjugated, fill) = (gemm::conjugated(name, args)?, gemm::fill(name, args)?);
        gemm::run_conjugated(&g, conjugated, fill, alpha, &a, &b, beta, &mut out);
        write_gemm_columns(&g, &out, |first, column| self.write_matrix(&args[c], first, column, tc, "gemm C"))
    }

    /// Runs `blas_cgemm` or `blas_zgemm`: [`Self::gemm`] on complex elements.
    fn complex_gemm<R: Element + std::ops::Neg<Output = R> + std::ops::Sub<Output = R>>(
        &self,
        name: &str,
        args: &[DeviceArg],
    ) -> DeviceResult<()> {
        let g = gemm::shape(name, args)?;
        if g.is_empty() {
            return Ok(());
        }
        let [na, nb, nc] = g.footprints();
        let [a, b, c] = gemm::MATRICES;
        let [alpha, beta] = gemm::complex_scalars::<R>(args)?;
        let mut a = self.read_elements::<Complex<R>>(&args[a], na, "gemm A")?;
        let mut b = self.read_elements::<Complex<R>>(&args[b], nb, "gemm B")?;
        if let Some(structure) = structured::structure(name, args)? {
            structure.complete_operand(&g, [&mut a, &mut b]);
        }
        let mut out = self.read_elements::<Complex<R>>(&args[c], nc, "gemm C")?;
        let (conjugated, fill) = (gemm::conjugated(name, args)?, gemm::fill(name, args)?);
        gemm::run_conjugated(&g, conjugated, fill, alpha, &a, &b, beta, &mut out);
        write_gemm_columns(&g, &out, |first, column| self.write_elements(&args[c], first, column, "gemm C"))
    }

    /// Runs `blas_strsm`, `blas_dtrsm`, `blas_ctrsm` or `blas_ztrsm`: reads what the solve
    /// touches, solves in `T` ([`trsm::Trsm`]'s order), writes back each column of `B` (not the
    /// gaps a leading dimension leaves). A launch that solves nothing touches nothing.
    fn trsm<T: Element + Field>(&self, name: &str, args: &[DeviceArg], alpha: T) -> DeviceResult<()> {
        let t = trsm::shape(name, args)?;
        if t.is_empty() {
            return Ok(());
        }
        let [na, nb] = t.footprints();
        let [a, b] = trsm::MATRICES;
        let a = self.read_elements::<T>(&args[a], na, "trsm A")?;
        let mut out = self.read_elements::<T>(&args[b], nb, "trsm B")?;
        trsm::solve(&t, alpha, &a, &mut out);
        let column = |batch: u64, j: u64| (batch * t.stride[1] + j * t.ld[1]) as usize;
        write_columns([t.batch, t.n, t.m], column, &out, |first, c| self.write_elements(&args[b], first, c, "trsm B"))
    }

    /// Runs a `blas_<t>getrf`: reads `A` (and `info`), factors in `T` ([`lu`]'s order), writes
    /// back each column of `A`, each batch's pivots (if pivoting) and `info`.
    fn getrf<T: Element + Pivot>(&self, name: &str, args: &[DeviceArg]) -> DeviceResult<()> {
        let g = lu::getrf_shape(name, args)?;
        if g.is_empty() {
            return Ok(());
        }
        let [na, np, ni] = g.footprints();
        let [a, p, i] = lu::GETRF_POINTERS.map(|i| &args[i]);
        let mut lu_a = self.read_elements::<T>(a, na, "getrf A")?;
        let (mut pivots, mut info) = (vec![0i32; np as usize], vec![0i32; ni as usize]);
        lu::factor(&g, &mut lu_a, &mut pivots, &mut info);
        let column = |batch: u64, j: u64| (batch * g.stride_a + j * g.lda) as usize;
        write_columns([g.batch, g.n, g.n], column, &lu_a, |first, c| self.write_elements(a, first, c, "getrf A"))?;
        if g.pivoting {
            let rows = |batch: u64, _| (batch * g.stride_p) as usize;
            write_columns([g.batch, 1, g.n], rows, &pivots, |first, c| {
                self.write_elements(p, first, c, "getrf pivots")
            })?;
        }
        self.write_elements(i, 0, &info, "getrf info")
    }

    /// Runs a `blas_<t>getrs`: reads the factors, the pivots (if applied) and `B` (unless it
    /// starts as the identity), solves in `T` ([`lu`]'s order), writes back each column of `B`
    /// and, for an inverse, `info`.
    fn getrs<T: Element + Pivot>(&self, name: &str, args: &[DeviceArg]) -> DeviceResult<()> {
        let s = lu::getrs_shape(name, args)?;
        if s.is_empty() {
            return Ok(());
        }
        let [na, np, nb, ni] = s.footprints();
        let [a, p, b, i] = lu::GETRS_POINTERS.map(|i| &args[i]);
        let factors = self.read_elements::<T>(a, na, "getrs A")?;
        let pivots = self.read_elements::<i32>(p, np, "getrs pivots")?;
        let mut out = if s.inverse { vec![T::ZERO; nb as usize] } else { self.read_elements::<T>(b, nb, "getrs B")? };
        let mut info = vec![0i32; ni as usize];
        lu::solve(&s, &factors, &pivots, &mut out, &mut info);
        let column = |batch: u64, j: u64| (batch * s.stride[1] + j * s.ld[1]) as usize;
        write_columns([s.batch, s.nrhs, s.n], column, &out, |first, c| self.write_elements(b, first, c, "getrs B"))?;
        self.write_elements(i, 0, &info, "getrs info")
    }

    /// Runs a `blas_<t>geqrf`: reads `A`, factors in `T` ([`qr`]'s order), writes back each
    /// column of `A` and each batch's `tau`s.
    fn geqrf<T: Element + Reflect>(&self, name: &str, args: &[DeviceArg]) -> DeviceResult<()> {
        let g = qr::geqrf_shape(name, args)?;
        if g.is_empty() {
            return Ok(());
        }
        let [na, nt] = g.footprints();
        let [a, t] = qr::GEQRF_POINTERS.map(|i| &args[i]);
        let mut factors = self.read_elements::<T>(a, na, "geqrf A")?;
        let mut tau = vec![T::ZERO; nt as usize];
        qr::factor(&g, &mut factors, &mut tau);
        let column = |batch: u64, j: u64| (batch * g.stride_a + j * g.lda) as usize;
        write_columns([g.batch, g.n, g.m], column, &factors, |first, c| self.write_elements(a, first, c, "geqrf A"))?;
        let taus = |batch: u64, _| (batch * g.stride_t) as usize;
        write_columns([g.batch, 1, g.reflectors()], taus, &tau, |first, c| {
            self.write_elements(t, first, c, "geqrf tau")
        })
    }

    /// Runs a `blas_<t>gels`: reads `A` and `C`, solves in `T` ([`qr`]'s order), writes back
    /// each column of `A` and `C` and, if asked, `info`.
    fn gels<T: Element + Reflect>(&self, name: &str, args: &[DeviceArg]) -> DeviceResult<()> {
        let s = qr::gels_shape(name, args)?;
        if s.is_empty() {
            return Ok(());
        }
        let [na, nc, ni] = s.footprints();
        let [a, c, i] = qr::GELS_POINTERS.map(|i| &args[i]);
        let mut factors = self.read_elements::<T>(a, na, "gels A")?;
        let mut out = self.read_elements::<T>(c, nc, "gels C")?;
        let mut info = vec![0i32; ni as usize];
        qr::solve(&s, &mut factors, &mut out, &mut info);
        let column = |batch: u64, j: u64| (batch * s.stride[0] + j * s.ld[0]) as usize;
        write_columns([s.batch, s.n, s.m], column, &factors, |first, v| self.write_elements(a, first, v, "gels A"))?;
        let column = |batch: u64, j: u64| (batch * s.stride[1] + j * s.ld[1]) as usize;
        write_columns([s.batch, s.nrhs, s.m], column, &out, |first, v| self.write_elements(c, first, v, "gels C"))?;
        self.write_elements(i, 0, &info, "gels info")
    }

    /// Runs a `blas_<t>abs_reduce` ([`abs_reduce`]'s order; a sum rounded to `R` at each
    /// step): reads `x`, writes the sum as `R` or the index as an `i32`.
    fn abs_reduce<T: Element + Pivot, R: Element + FromF64 + Into<f64>>(
        &self,
        name: &str,
        args: &[DeviceArg],
    ) -> DeviceResult<()> {
        let r = abs_reduce::shape(name, args)?;
        let [x, out] = abs_reduce::POINTERS.map(|i| &args[i]);
        let values = self.read_elements::<T>(x, r.span(), "abs_reduce x")?;
        let rounded = |acc: f64, v: f64| (R::from_f64(acc) + R::from_f64(v)).into();
        let result = abs_reduce::reduce(&r, &values, rounded);
        if r.op == abs_reduce::Reduction::Sum {
            self.write_elements(out, 0, &[R::from_f64(result)], "abs_reduce out")
        } else {
            self.write_elements(out, 0, &[result as i32], "abs_reduce out")
        }
    }

    /// Runs a `blas_<t>tpttr`: reads `AP` and `A`, moves the triangle, writes back what it
    /// moved into (`A`'s triangle column by column, not its other triangle; or all of `AP`).
    fn packing<T: Element>(&self, name: &str, args: &[DeviceArg]) -> DeviceResult<()> {
        let p = packed::shape(name, args)?;
        if p.n == 0 {
            return Ok(());
        }
        let [ap_arg, a_arg] = packed::POINTERS.map(|i| &args[i]);
        let mut ap = self.read_elements::<T>(ap_arg, p.packed_len(), "tpttr AP")?;
        let mut a = self.read_elements::<T>(a_arg, p.span(), "tpttr A")?;
        p.run(&mut ap, &mut a);
        if !p.unpack {
            return self.write_elements(ap_arg, 0, &ap, "trttp AP");
        }
        for j in 0..p.n {
            let (first, rows) = p.column(j);
            self.write_elements(a_arg, first, &a[first as usize..(first + rows) as usize], "tpttr A")?;
        }
        Ok(())
    }

    /// Runs `dft_f32`, `dft_f64` or (`types` given, `T` `f32`) `dft_ex`: reads each buffer's
    /// footprint, computes, writes back only the output's elements (not what lies between its
    /// lines).
    fn dft<T: Element + Into<f64> + FromF64>(
        &self,
        name: &str,
        args: &[DeviceArg],
        types: Option<[GemmElement; 2]>,
    ) -> DeviceResult<()> {
        let d = dft::shape(name, args)?;
        if d.is_empty() {
            return Ok(());
        }
        let [input, output] = dft::BUFFERS;
        let scalars = |n: u64, complex: bool| if complex { n.saturating_mul(2) } else { n };
        let [complex_in, complex_out] = d.complex();
        let [n_in, n_out] = d.footprints();
        let [in_type, out_type] = types.map_or([None; 2], |t| t.map(Some));
        let read = self.read_matrix::<T>(&args[input], scalars(n_in, complex_in), in_type, "dft in")?;
        let mut out = self.read_matrix::<T>(&args[output], scalars(n_out, complex_out), out_type, "dft out")?;
        dft::run(&d, &read, &mut out);
        let width = if complex_out { 2 } else { 1 };
        for l0 in 0..d.lines[0] {
            for l1 in 0..d.lines[1] {
                for l2 in 0..d.lines[2] {
                    for k in 0..d.lengths()[1] {
                        let first = d.output.at([l0, l1, l2], k) * width;
                        let element = &out[first as usize..(first + width) as usize];
                        self.write_matrix(&args[output], first, element, out_type, "dft out")?;
                    }
                }
            }
        }
        Ok(())
    }

    /// Runs `blas_activation` and `blas_epilogue`, in `f32` or, on `f64` matrices, in `f64`.
    fn epilogue(&self, name: &str, args: &[DeviceArg]) -> DeviceResult<()> {
        let e = epilogue::shape(name, args)?;
        if e.is_empty() {
            return Ok(());
        }
        match e.element {
            EpilogueElement::Single(element) => self.epilogue_in::<f32>(&e, args, Some(element)),
            EpilogueElement::Double => self.epilogue_in::<f64>(&e, args, None),
        }
    }

    /// Runs epilogue `e` computed in `T`, D's elements of `element` (none: `T` itself): D's
    /// span read, and the auxiliary matrix's where the op uses it; each column computed; D's
    /// columns written back (not what lies between them), and the auxiliary matrix's where the
    /// op writes it (a mask's bits past `m` in a column's last byte as they were).
    fn epilogue_in<T>(&self, e: &Epilogue, args: &[DeviceArg], element: Option<GemmElement>) -> DeviceResult<()>
    where
        T: Real + Element + FromF64 + Into<f64>,
    {
        let (d_arg, aux_arg) = (&args[epilogue::MATRIX], args.get(epilogue::AUX));
        let mut d = self.read_matrix::<T>(d_arg, e.span(), element, "D")?;
        let (mut mask, mut inputs) = (Vec::new(), Vec::new());
        match (e.op.aux(), aux_arg) {
            (Aux::Mask, Some(aux)) => {
                let (mem, range) = self.span(aux, 0, e.aux_span(), 1, "aux")?;
                mask = mem.read(range).to_vec();
            }
            (Aux::Input, Some(aux)) => inputs = self.read_matrix::<T>(aux, e.aux_span(), element, "aux")?,
            _ => {}
        }
        let m = e.m as usize;
        for [first, aux_first] in e.columns().map(|c| c.map(|at| at as usize)) {
            for i in 0..m {
                let kept = match e.op.aux() {
                    Aux::Input => Kept::Value(inputs[aux_first + i]),
                    Aux::Mask | Aux::Unused => {
                        let bit = aux_first + i;
                        Kept::Bit(mask.get(bit / 8).is_some_and(|byte| byte >> (bit % 8) & 1 == 1))
                    }
                };
                let (value, keep) = e.op.element(d[first + i], kept);
                d[first + i] = value;
                match keep {
                    Some(Kept::Value(x)) => inputs[aux_first + i] = x,
                    Some(Kept::Bit(set)) => {
                        let bit = aux_first + i;
                        mask[bit / 8] = mask[bit / 8] & !(1 << (bit % 8)) | u8::from(set) << (bit % 8);
                    }
                    None => {}
                }
            }
            self.write_matrix(d_arg, first as u64, &d[first..first + m], element, "D")?;
            match (e.op.aux(), e.op.is_gradient(), aux_arg) {
                (Aux::Input, false, Some(aux)) => {
                    self.write_matrix(aux, aux_first as u64, &inputs[aux_first..aux_first + m], element, "aux")?
                }
                (Aux::Mask, false, Some(aux)) => {
                    // The column's bytes (it starts on one), as the kernel's threads write them.
                    let bytes = aux_first / 8..(aux_first + m).div_ceil(8);
                    let (mem, range) = self.span(aux, bytes.start as u64, bytes.len() as u64, 1, "aux")?;
                    mem.write(range).copy_from_slice(&mask[bytes]);
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// Runs `blas_copy`: `x`'s span read, each element written to its place in `y` (what lies
    /// between them not touched).
    fn vector_copy(&self, name: &str, args: &[DeviceArg]) -> DeviceResult<()> {
        let copy = vector_copy::shape(name, args)?;
        let [x_span, y_span] = copy.spans();
        let [x, y] = vector_copy::VECTORS.map(|i| &args[i]);
        let (x_mem, x_range) = self.span(x, 0, x_span, copy.width, "x")?;
        let from = x_mem.read(x_range).to_vec();
        let (y_mem, y_range) = self.span(y, 0, y_span, copy.width, "y")?;
        let mut to = y_mem.write(y_range);
        let width = copy.width as usize;
        for i in 0..copy.n {
            let [src, dst] = [copy.incx, copy.incy].map(|inc| VectorCopy::index(copy.n, inc, i) as usize * width);
            to[dst..dst + width].copy_from_slice(&from[src..src + width]);
        }
        Ok(())
    }

    pub(super) fn run_builtin(&self, index: usize, args: &[DeviceArg]) -> DeviceResult<()> {
        let name = builtin::KERNELS[index].0;
        match name {
            "fill" => {
                let n = scalar_u64(&args[2])?;
                self.write_f32s(&args[0], &vec![scalar_f32(&args[1])?; n as usize], "fill out")
            }
            "vector_add" => {
                let n = scalar_u64(&args[3])?;
                let a = self.read_f32s(&args[0], n, "vector_add a")?;
                let b = self.read_f32s(&args[1], n, "vector_add b")?;
                let c: Vec<f32> = a.iter().zip(&b).map(|(x, y)| x + y).collect();
                self.write_f32s(&args[2], &c, "vector_add c")
            }
            "saxpy" => {
                let n = scalar_u64(&args[3])?;
                let a = scalar_f32(&args[0])?;
                let x = self.read_f32s(&args[1], n, "saxpy x")?;
                let mut y = self.read_f32s(&args[2], n, "saxpy y")?;
                for (yi, xi) in y.iter_mut().zip(&x) {
                    *yi += a * xi;
                }
                self.write_f32s(&args[2], &y, "saxpy y")
            }
            "sgemm" => {
                let (m, n, k) =
                    (scalar_u32(&args[0])? as u64, scalar_u32(&args[1])? as u64, scalar_u32(&args[2])? as u64);
                let a = self.read_f32s(&args[4], m * k, "sgemm A")?;
                let b = self.read_f32s(&args[5], k * n, "sgemm B")?;
                let mut c = self.read_f32s(&args[7], m * n, "sgemm C")?;
                builtin::sgemm(
                    m as usize,
                    n as usize,
                    k as usize,
                    scalar_f32(&args[3])?,
                    &a,
                    &b,
                    scalar_f32(&args[6])?,
                    &mut c,
                );
                self.write_f32s(&args[7], &c, "sgemm C")
            }
            "blas_sgemm" => self.gemm::<f32>(name, args, None),
            "blas_dgemm" => self.gemm::<f64>(name, args, None),
            "blas_gemm_ex" => self.gemm::<f32>(name, args, Some(gemm::element_types(name, args)?)),
            "blas_cgemm" => self.complex_gemm::<f32>(name, args),
            "blas_zgemm" => self.complex_gemm::<f64>(name, args),
            "blas_sgemmt" => self.gemm::<f32>(name, args, None),
            "blas_dgemmt" => self.gemm::<f64>(name, args, None),
            "blas_cgemmt" => self.complex_gemm::<f32>(name, args),
            "blas_zgemmt" => self.complex_gemm::<f64>(name, args),
            "blas_sgemm_tri" => self.gemm::<f32>(name, args, None),
            "blas_dgemm_tri" => self.gemm::<f64>(name, args, None),
            "blas_cgemm_tri" => self.complex_gemm::<f32>(name, args),
            "blas_zgemm_tri" => self.complex_gemm::<f64>(name, args),
            "blas_strsm" => self.trsm(name, args, f32::of(&args[trsm::ALPHA])?),
            "blas_dtrsm" => self.trsm(name, args, f64::of(&args[trsm::ALPHA])?),
            "blas_ctrsm" => self.trsm(name, args, trsm::complex_alpha::<f32>(args)?),
            "blas_ztrsm" => self.trsm(name, args, trsm::complex_alpha::<f64>(args)?),
            "blas_sgetrf" => self.getrf::<f32>(name, args),
            "blas_dgetrf" => self.getrf::<f64>(name, args),
            "blas_cgetrf" => self.getrf::<Complex<f32>>(name, args),
            "blas_zgetrf" => self.getrf::<Complex<f64>>(name, args),
            "blas_sgetrs" => self.getrs::<f32>(name, args),
            "blas_dgetrs" => self.getrs::<f64>(name, args),
            "blas_cgetrs" => self.getrs::<Complex<f32>>(name, args),
            "blas_zgetrs" => self.getrs::<Complex<f64>>(name, args),
            "blas_sgeqrf" => self.geqrf::<f32>(name, args),
            "blas_dgeqrf" => self.geqrf::<f64>(name, args),
            "blas_cgeqrf" => self.geqrf::<Complex<f32>>(name, args),
            "blas_zgeqrf" => self.geqrf::<Complex<f64>>(name, args),
            "blas_sgels" => self.gels::<f32>(name, args),
            "blas_dgels" => self.gels::<f64>(name, args),
            "blas_cgels" => self.gels::<Complex<f32>>(name, args),
            "blas_zgels" => self.gels::<Complex<f64>>(name, args),
            "blas_sabs_reduce" => self.abs_reduce::<f32, f32>(name, args),
            "blas_dabs_reduce" => self.abs_reduce::<f64, f64>(name, args),
            "blas_cabs_reduce" => self.abs_reduce::<Complex<f32>, f32>(name, args),
            "blas_zabs_reduce" => self.abs_reduce::<Complex<f64>, f64>(name, args),
            "blas_stpttr" => self.packing::<f32>(name, args),
            "blas_dtpttr" => self.packing::<f64>(name, args),
            "blas_ctpttr" => self.packing::<Complex<f32>>(name, args),
            "blas_ztpttr" => self.packing::<Complex<f64>>(name, args),
            "blas_activation" | "blas_epilogue" => self.epilogue(name, args),
            "blas_copy" => self.vector_copy(name, args),
            "dft_f32" => self.dft::<f32>(name, args, None),
            "dft_f64" => self.dft::<f64>(name, args, None),
            "dft_ex" => self.dft::<f32>(name, args, Some(dft::element_types(name, args)?)),
            "reduce_sum" => {
                let n = scalar_u64(&args[2])?;
                // Sum in f64 so that large reductions stay close to the exact value.
                let sum: f64 = self.read_f32s(&args[0], n, "reduce_sum in")?.iter().map(|&v| v as f64).sum();
                let out = self.read_f32s(&args[1], 1, "reduce_sum out")?[0];
                self.write_f32s(&args[1], &[(out as f64 + sum) as f32], "reduce_sum out")
            }
            other => Err(WireError::new(ErrorKind::Internal, format!("builtin `{other}` has no CPU implementation"))),
        }
    }
}

fn scalar_u64(arg: &DeviceArg) -> DeviceResult<u64> {
    match arg {
        DeviceArg::Scalar(KernelArg::U64(v)) => Ok(*v),
        other => Err(WireError::new(ErrorKind::InvalidArgument, format!("expected u64, got {other:?}"))),
    }
}

fn scalar_u32(arg: &DeviceArg) -> DeviceResult<u32> {
    match arg {
        DeviceArg::Scalar(KernelArg::U32(v)) => Ok(*v),
        other => Err(WireError::new(ErrorKind::InvalidArgument, format!("expected u32, got {other:?}"))),
    }
}

fn scalar_f32(arg: &DeviceArg) -> DeviceResult<f32> {
    match arg {
        DeviceArg::Scalar(KernelArg::F32(v)) => Ok(*v),
        other => Err(WireError::new(ErrorKind::InvalidArgument, format!("expected f32, got {other:?}"))),
    }
}

/// [`write_columns`] of a gemm's `C`.
fn write_gemm_columns<T>(g: &Gemm, out: &[T], write: impl Fn(u64, &[T]) -> DeviceResult<()>) -> DeviceResult<()> {
    write_columns([g.batch, g.n, g.m], |batch, j| g.c_index(batch, 0, j), out, write)
}

/// Writes back each column a kernel computed (not the gaps a leading dimension leaves):
/// `[batches, columns, rows]`, `at(batch, j)` where column `j` of `batch` starts in `out`, by
/// `write(first element, column)`.
fn write_columns<T>(
    [batches, columns, rows]: [u64; 3],
    at: impl Fn(u64, u64) -> usize,
    out: &[T],
    write: impl Fn(u64, &[T]) -> DeviceResult<()>,
) -> DeviceResult<()> {
    for batch in 0..batches {
        for j in 0..columns {
            let first = at(batch, j);
            write(first as u64, &out[first..first + rows as usize])?;
        }
    }
    Ok(())
}
