//! `cublasLtMatmul` and `cublasLtMatmulAlgoGetHeuristic`: `D = alpha op(A) op(B) + beta C` on
//! column-major matrices of the types `cublasGemmEx` serves (`f32`, `f64`, binary16 or bfloat16
//! computed in `f32`: [`ex_types`]), batched by the layouts' counts and offsets, one launch of
//! the builtin gemm, then the epilogue the descriptor names ([`super::epilogue`]: a bias,
//! ReLU or GELU, the auxiliary matrices and gradients of training, bias gradients). What it
//! cannot run (another order or type) the heuristic answers with no algorithm, which callers
//! such as PyTorch take as "use cuBLAS instead". `cublasLtMatmulAlgoCheck` checks an algorithm
//! a program configured ([`super::algo`]) against a matmul, as `cublasLtMatmul` does before it
//! runs.

use std::collections::HashSet;
use std::ffi::{c_int, c_void};
use std::sync::{Mutex, OnceLock};

use super::super::gemm::{launch, scalar_value, GemmCall, Operand, Scalar};
use super::super::{guard, handle, Target};
use super::algo::{served_types, Algo, ALGO_BYTES};
use super::epilogue::{self, Planned, Product};
use super::{not_served, read, write, Layout, MatmulDesc};
use crate::error::{code, CuResult, Error};
use crate::state::put;

/// A matmul as the builtin gemm runs it, from its descriptor and layouts.
#[derive(Debug, Clone, Copy)]
struct Plan {
    /// The product, as the gemm and the epilogue read it.
    product: Product,
    pointer_mode: c_int,
    /// The epilogue after it.
    epilogue: Planned,
    /// C's leading dimension, for checking it against D's.
    ldc: i64,
}

/// `value` as a `c_int` dimension, or why not.
fn dimension(what: &str, value: i64) -> CuResult<c_int> {
    c_int::try_from(value).map_err(|_| Error::said(code::INVALID_VALUE, format!("{what} = {value}")))
}

/// Plans a matmul: what it computes, refused where cuBLASLt refuses it (`INVALID_VALUE`) or
/// where the builtin gemm cannot run it (`NOT_SUPPORTED`).
fn plan(desc: &MatmulDesc, [a, b, c, d]: [&Layout; 4]) -> CuResult<Plan> {
    if [a, b, c, d].iter().any(|l| l.order != 0 || l.plane_offset != 0) {
        return not_served("matrices other than column-major (CUBLASLT_ORDER_COL) are not served".into());
    }
    let ex = served_types(desc.compute_type, desc.scale_type, [a, b, c, d].map(|l| l.data_type))?;
    if !(0..=1).contains(&desc.pointer_mode) {
        return not_served(format!("pointer mode {} (vectors of alpha)", desc.pointer_mode));
    }
    if desc.trans.iter().any(|t| !(0..=2).contains(t)) {
        return Err(Error::said(code::INVALID_VALUE, format!("operations {:?}", desc.trans)));
    }
    let (m, k) = if desc.trans[0] == 0 { (a.rows, a.cols) } else { (a.cols, a.rows) };
    let (k_b, n) = if desc.trans[1] == 0 { (b.rows, b.cols) } else { (b.cols, b.rows) };
    if k != k_b || (d.rows, d.cols) != (m, n) || (c.rows, c.cols) != (m, n) {
        let why = format!(
            "op(A) {m} x {k}, op(B) {k_b} x {n}, C {} x {}, D {} x {}: the shapes do not match",
            c.rows, c.cols, d.rows, d.cols
        );
        return Err(Error::said(code::INVALID_VALUE, why));
    }
    let batch = d.batch_count;
    if [a, b, c].iter().any(|l| l.batch_count != batch) || batch < 1 {
        let counts = [a, b, c, d].map(|l| l.batch_count);
        return Err(Error::said(code::INVALID_VALUE, format!("batch counts {counts:?}")));
    }
    let mnk = [dimension("m", m as i64)?, dimension("n", n as i64)?, dimension("k", k as i64)?];
    let ld = [dimension("lda", a.ld)?, dimension("ldb", b.ld)?, dimension("ldd", d.ld)?];
    let offsets = [a, b, c, d].map(|l| l.batch_offset);
    let product = Product { types: ex, trans: desc.trans, mnk, ld, offsets, batch };
    let epilogue = epilogue::plan(desc, d, &product)?;
    Ok(Plan { product, pointer_mode: desc.pointer_mode, epilogue, ldc: c.ld })
}

/// A matmul's descriptor and layouts (A, B, C, D), as read from the caller's records.
struct Described {
    desc: MatmulDesc,
    layouts: [Layout; 4],
}

impl Described {
    /// Reads a descriptor and four layouts.
    unsafe fn read(desc: *const c_void, layouts: [*const c_void; 4]) -> CuResult<Described> {
        let layouts = [read(layouts[0])?, read(layouts[1])?, read(layouts[2])?, read(layouts[3])?];
        Ok(Described { desc: read(desc)?, layouts })
    }

    fn layouts(&self) -> [&Layout; 4] {
        let [a, b, c, d] = &self.layouts;
        [a, b, c, d]
    }

    /// Plans the matmul.
    fn plan(&self) -> CuResult<Plan> {
        plan(&self.desc, self.layouts())
    }

    /// Plans the matmul with algorithm `algo` (none: the builtin gemm's).
    unsafe fn plan_with(&self, algo: *const c_void) -> CuResult<Plan> {
        let plan = self.plan()?;
        if !algo.is_null() {
            read::<Algo>(algo)?.check(&self.desc, self.layouts())?;
        }
        Ok(plan)
    }
}

/// Writes a heuristic result's fields after its algorithm: no workspace, success, one wave.
fn write_heuristic_fields(result: &mut [u8]) {
    result[ALGO_BYTES..].fill(0);
    result[76..80].copy_from_slice(&1.0f32.to_le_bytes());
}

/// Says once per reason why the heuristic found no algorithm.
fn say_no_algorithm(why: &str) {
    static SAID: OnceLock<Mutex<HashSet<String>>> = OnceLock::new();
    if SAID.get_or_init(Mutex::default).lock().unwrap_or_else(|p| p.into_inner()).insert(why.to_string()) {
        eprintln!("ac-cuda: cublasLtMatmulAlgoGetHeuristic: no algorithm: {why}");
    }
}

/// Bytes of a `cublasLtMatmulHeuristicResult_t`: the algorithm (64), its workspace size (8),
/// its state (4), its waves count (4), four reserved `int`s.
const HEURISTIC_RESULT_BYTES: usize = 96;

#[no_mangle]
#[allow(clippy::too_many_arguments)] // cuBLASLt's signature
pub unsafe extern "C" fn cublasLtMatmulAlgoGetHeuristic(
    h: usize,
    desc: *const c_void,
    a: *const c_void,
    b: *const c_void,
    c: *const c_void,
    d: *const c_void,
    _preference: *const c_void,
    requested: c_int,
    results: *mut u8,
    count: *mut c_int,
) -> u32 {
    guard("cublasLtMatmulAlgoGetHeuristic", || {
        handle(h)?;
        if requested < 1 || results.is_null() || count.is_null() {
            return Err(Error::said(code::INVALID_VALUE, format!("{requested} results asked for")));
        }
        let described = Described::read(desc, [a, b, c, d])?;
        match described.plan() {
            Ok(_) => {
                let result = std::slice::from_raw_parts_mut(results, HEURISTIC_RESULT_BYTES);
                result[..ALGO_BYTES].fill(0);
                write(results.cast(), Algo::of(&described.desc, described.layouts()));
                write_heuristic_fields(result);
                put(count, 1)
            }
            Err(Error::Said { code: code::NOT_SUPPORTED, message }) => {
                say_no_algorithm(&message);
                put(count, 0)
            }
            Err(e) => Err(e),
        }
    })
}

#[no_mangle]
#[allow(clippy::too_many_arguments)] // cuBLASLt's signature
pub unsafe extern "C" fn cublasLtMatmulAlgoCheck(
    h: usize,
    desc: *const c_void,
    a: *const c_void,
    b: *const c_void,
    c: *const c_void,
    d: *const c_void,
    algo: *const c_void,
    result: *mut u8,
) -> u32 {
    guard("cublasLtMatmulAlgoCheck", || {
        handle(h)?;
        if algo.is_null() || result.is_null() {
            return Err(Error::said(code::INVALID_VALUE, "a null algorithm or result"));
        }
        Described::read(desc, [a, b, c, d])?.plan_with(algo)?;
        // The result's algorithm is left as it is (`algo` may point to it).
        write_heuristic_fields(std::slice::from_raw_parts_mut(result, HEURISTIC_RESULT_BYTES));
        Ok(())
    })
}

#[no_mangle]
#[allow(clippy::too_many_arguments)] // cuBLASLt's signature
pub unsafe extern "C" fn cublasLtMatmul(
    h: usize,
    desc: *const c_void,
    alpha: *const c_void,
    a: u64,
    a_layout: *const c_void,
    b: u64,
    b_layout: *const c_void,
    beta: *const c_void,
    c: u64,
    c_layout: *const c_void,
    d: u64,
    d_layout: *const c_void,
    algo: *const c_void,
    _workspace: *mut c_void,
    _workspace_bytes: usize,
    stream: usize,
) -> u32 {
    guard("cublasLtMatmul", || {
        let device = handle(h)?.device;
        let plan = Described::read(desc, [a_layout, b_layout, c_layout, d_layout])?.plan_with(algo)?;
        let target = super::on_stream(device, stream, plan.pointer_mode)?;
        matmul(target, &plan, [Scalar::At(alpha), Scalar::At(beta)], [a, b, c, d])
    })
}

/// Runs a planned matmul: the product into D (C read in place, D being C), then its epilogue.
unsafe fn matmul(target: Target, plan: &Plan, [alpha, beta]: [Scalar; 2], [a, b, c, d]: [u64; 4]) -> CuResult<()> {
    let p = &plan.product;
    let in_place = c == d && plan.ldc == i64::from(p.ld[2]) && p.offsets[2] == p.offsets[3];
    let beta = if in_place { beta } else { Scalar::Value(scalar_value(target, p.types.precision, beta)?) };
    if !in_place && !matches!(beta, Scalar::Value(v) if v == 0.0) {
        return not_served("C apart from D with beta not 0 (D must be C, as cuBLAS's gemm computes in place)".into());
    }
    let [m, n, k] = p.mnk;
    let product = GemmCall {
        types: p.types,
        trans: p.trans,
        m,
        n,
        k,
        alpha,
        matrices: [Operand::Memory(a), Operand::Memory(b), Operand::Memory(d)],
        ld: p.ld,
        stride: [p.offsets[0], p.offsets[1], p.offsets[3]],
        beta,
        batch: p.batch,
    };
    launch(target, product)?;
    epilogue::run(target, p, &plan.epilogue, [a, b, d])
}

#[cfg(test)]
mod tests {
    use super::super::epilogue::BiasUse;
    use super::super::{layout, matmul_desc};
    use super::*;
    use ac_proto::backend::builtin::GemmElement;

    fn layouts(trans: [i32; 2]) -> [Layout; 4] {
        // op(A) 4 x 3, op(B) 3 x 2, C = D 4 x 2.
        let a = if trans[0] == 0 { layout(0, 4, 3, 4) } else { layout(0, 3, 4, 3) };
        let b = if trans[1] == 0 { layout(0, 3, 2, 3) } else { layout(0, 2, 3, 2) };
        [a, b, layout(0, 4, 2, 4), layout(0, 4, 2, 4)]
    }

    fn planned(desc: &MatmulDesc, l: &[Layout; 4]) -> CuResult<Plan> {
        plan(desc, [&l[0], &l[1], &l[2], &l[3]])
    }

    #[test]
    fn shapes_come_from_the_layouts_and_operations() {
        let mut desc = matmul_desc(68, 0);
        for trans in [[0, 0], [1, 0], [0, 1], [1, 1]] {
            desc.trans = trans;
            let p = planned(&desc, &layouts(trans)).unwrap();
            assert_eq!(p.product.mnk, [4, 2, 3], "{trans:?}");
        }
        // A's layout read untransposed against op(A) transposed: refused.
        desc.trans = [1, 0];
        assert_eq!(planned(&desc, &layouts([0, 0])).unwrap_err().code(), code::INVALID_VALUE);
    }

    #[test]
    fn what_the_builtin_gemm_cannot_run_is_not_supported() {
        let desc = matmul_desc(68, 0);
        let mut row = layouts([0, 0]);
        row[1].order = 1;
        assert_eq!(planned(&desc, &row).unwrap_err().code(), code::NOT_SUPPORTED);
        let unknown = MatmulDesc { epilogue: 3, ..desc };
        assert_eq!(planned(&unknown, &layouts([0, 0])).unwrap_err().code(), code::NOT_SUPPORTED);
        let complex = [4u32; 4].map(|t| Layout { data_type: t, ..layout(0, 4, 4, 4) });
        let complex_desc = MatmulDesc { scale_type: 4, ..desc };
        assert_eq!(planned(&complex_desc, &complex).unwrap_err().code(), code::NOT_SUPPORTED);
        // bfloat16 matrices computed in f32 with f32 scalars (PyTorch's), not with bfloat16 ones.
        let bf16 = [14u32; 4].map(|t| Layout { data_type: t, ..layout(0, 4, 4, 4) });
        assert_eq!(planned(&desc, &bf16).unwrap().product.types.elements, Some([GemmElement::Bf16; 3]));
        let bf16_scale = MatmulDesc { scale_type: 14, ..desc };
        assert_eq!(planned(&bf16_scale, &bf16).unwrap_err().code(), code::NOT_SUPPORTED);
        // A bias pointer is required; a bias of D's type is served.
        let no_bias = MatmulDesc { epilogue: 4, ..desc };
        assert_eq!(planned(&no_bias, &layouts([0, 0])).unwrap_err().code(), code::INVALID_VALUE);
        let bias = MatmulDesc { bias: 0x1000, ..no_bias };
        assert_eq!(planned(&bias, &layouts([0, 0])).unwrap().epilogue.bias, Some((BiasUse::Add, 0x1000, 0)));
    }
}
