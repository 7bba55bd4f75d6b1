//! Executing a plan: its input and output found in the program's allocations (the whole span
//! of each layout), its scratch made at the first execution, then one launch of the builtin
//! `dft_f32`, `dft_f64` or `dft_ex` per pass on the plan's stream, without waiting. A
//! half-precision plan's passes read and write the program's buffers in its type and the
//! scratch in `f32` (`dft_ex`'s types), so that only the program's data is rounded to it.

use std::ffi::c_int;
use std::sync::atomic::Ordering;

use ac_frontend::{KernelArg, LaunchDims};
use ac_proto::backend::builtin::GemmElement;

use super::transform::{Buffer, Domain, Pass, Precision, Transform, View};
use super::{guard, plan, Plan};
use crate::builtins::{builtins, dims_for};
use crate::error::{code, CuResult, Error};
use crate::graph::{self, NodeKind};
use crate::managed::{self, Reach};
use crate::state;
use crate::stream::stream_of;

/// Threads of a launch's block.
const BLOCK: u32 = 256;

/// `CUFFT_FORWARD` and `CUFFT_INVERSE`.
const FORWARD: c_int = -1;
const INVERSE: c_int = 1;

/// The plan's two scratch buffers, made now if they are not yet.
fn scratch(plan: &Plan, transform: &Transform) -> CuResult<[KernelArg; 2]> {
    let mut scratch = plan.scratch.lock().unwrap_or_else(|p| p.into_inner());
    if scratch.is_none() {
        let scalar = transform.precision.scratch_bytes();
        let bytes = transform.scratch_elements().checked_mul(2 * scalar).and_then(|b| usize::try_from(b).ok());
        let bytes = bytes.ok_or_else(|| Error::said(code::INVALID_VALUE, "a transform beyond memory"))?;
        let shim = state::shim()?;
        let acc = &shim.devices[plan.device].acc;
        let made = shim.block_on(async {
            Ok::<_, ac_frontend::Error>([acc.alloc::<u8>(bytes).await?, acc.alloc::<u8>(bytes).await?])
        })?;
        *scratch = Some(made);
    }
    let [a, b] = scratch.as_ref().expect("made above");
    Ok([a.at(0), b.at(0)])
}

/// The program's buffer at `address` holding `view` (of complex or real elements).
fn program_buffer(plan: &Plan, address: u64, view: &View, complex: bool, precision: Precision) -> CuResult<KernelArg> {
    let scalar = precision.scalar_bytes();
    let bytes = view.span().checked_mul(if complex { 2 * scalar } else { scalar });
    let bytes = bytes.ok_or_else(|| Error::said(code::INVALID_VALUE, "a layout beyond memory"))?;
    let (alloc, offset) = state::shim()?.find(plan.device, address, bytes)?;
    Ok(alloc.buffer.at(offset as usize))
}

/// The arguments of a pass's launch; `half`: the program's element type, for `dft_ex`.
fn arguments(pass: &Pass, [from, to]: [KernelArg; 2], half: Option<GemmElement>) -> Vec<KernelArg> {
    let (d, u, l) = (&pass.dft, |v: u64| KernelArg::U32(v as u32), KernelArg::U64);
    let (i, o) = (d.input, d.output);
    let mut args = vec![
        u(d.kind.code().into()),
        u(d.inverse.into()),
        u(d.n),
        u(d.lines[0]),
        u(d.lines[1]),
        u(d.lines[2]),
        from,
        l(i.step),
        l(i.line[0]),
        l(i.line[1]),
        l(i.line[2]),
        to,
        l(o.step),
        l(o.line[0]),
        l(o.line[1]),
        l(o.line[2]),
    ];
    if let Some(half) = half {
        // The program's buffers in its type, the scratch in f32.
        let type_of = |program: bool| if program { half } else { GemmElement::F32 };
        let types = [type_of(pass.from == Buffer::Input), type_of(pass.to == Buffer::Output)];
        args.push(KernelArg::U32(GemmElement::encode(types)));
    }
    args
}

/// Executes plan `h` from `input` to `output` (the same address: in place); `expected`: the
/// domain and precision the entry point names (`None` for `cufftXtExec`).
fn execute(h: c_int, input: u64, output: u64, direction: c_int, expected: Option<(Domain, Precision)>) -> CuResult<()> {
    let plan = plan(h)?;
    let transform = plan.transform.lock().unwrap_or_else(|p| p.into_inner()).clone();
    let transform = transform.ok_or_else(|| Error::said(code::INVALID_HANDLE, format!("plan {h} was not made")))?;
    if let Some(expected) = expected {
        if (transform.domain, transform.precision) != expected {
            let why = format!("a plan of {:?} in {:?} executed as {expected:?}", transform.domain, transform.precision);
            return Err(Error::said(code::INVALID_VALUE, why));
        }
    }
    let inverse = match (transform.domain, direction) {
        (Domain::ComplexToComplex, FORWARD) => false,
        (Domain::ComplexToComplex, INVERSE) => true,
        (Domain::ComplexToComplex, other) => {
            return Err(Error::said(code::INVALID_VALUE, format!("direction {other} (FORWARD -1, INVERSE 1)")))
        }
        // A real transform's direction is its type's.
        _ => false,
    };
    if input == 0 || output == 0 {
        return Err(Error::said(code::INVALID_VALUE, "a null input or output"));
    }
    let in_place = input == output;
    let [input_view, output_view] = transform.views(in_place);
    let [complex_in, complex_out] = transform.complex();
    let from = program_buffer(&plan, input, &input_view, complex_in, transform.precision)?;
    let to = program_buffer(&plan, output, &output_view, complex_out, transform.precision)?;
    let passes = transform.passes(inverse, in_place);
    let [a, b] = if passes.len() > 1 { scratch(&plan, &transform)? } else { [from, to] };
    let buffer = |which: Buffer| match which {
        Buffer::Input => from,
        Buffer::Output => to,
        Buffer::ScratchA => a,
        Buffer::ScratchB => b,
    };
    let function = builtins(plan.device)?.function(transform.precision.kernel())?;
    let half = transform.precision.half();
    let launches: Vec<(LaunchDims, Vec<KernelArg>)> = passes
        .iter()
        .filter(|pass| !pass.dft.is_empty())
        .map(|pass| {
            let threads = pass.dft.lines.iter().product::<u64>().saturating_mul(pass.dft.lengths()[1]);
            (dims_for(threads, BLOCK), arguments(pass, [buffer(pass.from), buffer(pass.to)], half))
        })
        .collect();
    let device = plan.device;
    // Sent now, or recorded if the plan's stream is capturing.
    graph::or_record(plan.stream.load(Ordering::Relaxed), NodeKind::Kernel, move |handle| {
        let stream = stream_of(handle, device)?;
        let shim = state::shim()?;
        managed::device_work(&[Reach::Kernel(device, handle)], || {
            launches.iter().try_for_each(|(dims, args)| Ok(shim.block_on(function.launch_on(&stream, *dims, args))?))
        })
    })
}

/// Defines a `cufftExec*` entry point of a transform of one direction.
macro_rules! exec_entry_points {
    ($($name:ident: $domain:expr, $precision:expr, $direction:expr;)*) => {
        $(
            #[no_mangle]
            pub extern "C" fn $name(h: c_int, input: u64, output: u64) -> u32 {
                guard(stringify!($name), || execute(h, input, output, $direction, Some(($domain, $precision))))
            }
        )*
    };
}

exec_entry_points! {
    cufftExecR2C: Domain::RealToComplex, Precision::Single, FORWARD;
    cufftExecC2R: Domain::ComplexToReal, Precision::Single, INVERSE;
    cufftExecD2Z: Domain::RealToComplex, Precision::Double, FORWARD;
    cufftExecZ2D: Domain::ComplexToReal, Precision::Double, INVERSE;
}

#[no_mangle]
pub extern "C" fn cufftExecC2C(h: c_int, input: u64, output: u64, direction: c_int) -> u32 {
    guard("cufftExecC2C", || execute(h, input, output, direction, Some((Domain::ComplexToComplex, Precision::Single))))
}

#[no_mangle]
pub extern "C" fn cufftExecZ2Z(h: c_int, input: u64, output: u64, direction: c_int) -> u32 {
    guard("cufftExecZ2Z", || execute(h, input, output, direction, Some((Domain::ComplexToComplex, Precision::Double))))
}

#[no_mangle]
pub extern "C" fn cufftXtExec(h: c_int, input: u64, output: u64, direction: c_int) -> u32 {
    guard("cufftXtExec", || execute(h, input, output, direction, None))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fft::transform::Layout;

    /// A half-precision plan's passes: the program's buffers in its type, the scratch in f32;
    /// a single-precision plan's launches carry no types.
    #[test]
    fn half_precision_passes_type_the_program_buffers_and_keep_the_scratch_in_f32() {
        let plan = |precision| Transform {
            precision,
            domain: Domain::RealToComplex,
            n: vec![4, 6, 8],
            batch: 1,
            input: Layout::basic(),
            output: Layout::basic(),
        };
        let pointers = [KernelArg::U64(1), KernelArg::U64(2)];
        let types = |precision: Precision| -> Vec<Option<u32>> {
            let transform = plan(precision);
            let passes = transform.passes(false, false);
            let args = passes.iter().map(|pass| arguments(pass, pointers, precision.half()));
            args.map(|args| match args[..] {
                [.., KernelArg::U32(types)] if args.len() == 17 => Some(types),
                _ => None,
            })
            .collect()
        };
        use GemmElement::{Bf16, F16, F32};
        let f16 = [[F16, F32], [F32, F32], [F32, F16]].map(|t| Some(GemmElement::encode(t)));
        assert_eq!(types(Precision::Half), f16, "in, through the scratch, out");
        assert_eq!(types(Precision::Bfloat16)[2], Some(GemmElement::encode([F32, Bf16])));
        assert_eq!(types(Precision::Single), [None; 3], "dft_f32's sixteen arguments");
        assert_eq!(
            (Precision::Half.kernel(), Precision::Half.scalar_bytes(), Precision::Half.scratch_bytes()),
            ("dft_ex", 2, 4)
        );
    }
}
