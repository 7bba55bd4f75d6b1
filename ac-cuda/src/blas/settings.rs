//! A cuBLAS handle's settings, each kept and answered: the math mode, the multiprocessor target,
//! the pointer mode (where scalars and results are: the only one the calls follow), the atomics
//! mode, the emulation strategy and the fixed-point emulation's controls (CUDA 13); a workspace
//! is taken and not kept (the builtin kernels need none). The builtin kernels compute every product in full precision, in a fixed order,
//! with no atomics and no emulation: what the math, atomics and emulation settings allow
//! cuBLAS (tensor cores, reordered sums, FP64 emulated on integer units) they never need, and
//! not taking a permission is within each setting's meaning. The emulation's mantissa-bit-count
//! pointer is kept as given: no emulated computation writes it.

use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicI32, AtomicUsize, Ordering};

use super::{guard, handle};
use crate::error::{code, Error};
use crate::state::put;

/// `CUBLAS_POINTER_MODE_HOST`: `alpha` and `beta` are host pointers.
pub(super) const POINTER_MODE_HOST: c_int = 0;

/// `CUDA_EMULATION_SPECIAL_VALUES_SUPPORT_DEFAULT`: signed infinities and NaNs.
const SPECIAL_VALUES_DEFAULT: c_int = 0xFFFF;

/// A handle's settings, as last set (each starts as cuBLAS's default).
#[derive(Debug)]
pub(super) struct Settings {
    /// `cublasMath_t`.
    pub math_mode: AtomicI32,
    /// `cublasSetSmCountTarget`'s value (0: all of the device's).
    pub sm_count_target: AtomicI32,
    /// `cublasPointerMode_t`.
    pub pointer_mode: AtomicI32,
    /// `cublasAtomicsMode_t`.
    pub atomics_mode: AtomicI32,
    /// `cublasEmulationStrategy_t`.
    pub emulation_strategy: AtomicI32,
    /// `cudaEmulationSpecialValuesSupport`, a mask.
    pub special_values: AtomicI32,
    /// `cudaEmulationMantissaControl`.
    pub mantissa_control: AtomicI32,
    /// The most mantissa bits fixed-point emulation may keep (0: the library's default).
    pub max_mantissa_bits: AtomicI32,
    /// Mantissa bits added to (or taken from) what dynamic control computes.
    pub mantissa_bit_offset: AtomicI32,
    /// Device memory where an emulated computation would write the bits it kept (0: none).
    pub mantissa_bit_count_pointer: AtomicUsize,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            math_mode: AtomicI32::new(0),
            sm_count_target: AtomicI32::new(0),
            pointer_mode: AtomicI32::new(POINTER_MODE_HOST),
            atomics_mode: AtomicI32::new(0),
            emulation_strategy: AtomicI32::new(0),
            special_values: AtomicI32::new(SPECIAL_VALUES_DEFAULT),
            mantissa_control: AtomicI32::new(0),
            max_mantissa_bits: AtomicI32::new(0),
            mantissa_bit_offset: AtomicI32::new(0),
            mantissa_bit_count_pointer: AtomicUsize::new(0),
        }
    }
}

/// Defines a setting's setter `$set` and getter `$get`: `$field` of the handle's settings,
/// `$valid` the values the setter takes (others are `CUBLAS_STATUS_INVALID_VALUE`, after the
/// handle is looked up, as cuBLAS checks them).
macro_rules! setting {
    ($set:ident, $get:ident, $field:ident, $valid:expr) => {
        #[no_mangle]
        pub extern "C" fn $set(h: usize, value: c_int) -> u32 {
            guard(stringify!($set), || {
                let handle = handle(h)?;
                let valid: fn(c_int) -> bool = $valid;
                if !valid(value) {
                    return Err(Error::said(code::INVALID_VALUE, format!("{} {value}", stringify!($field))));
                }
                handle.settings.$field.store(value, Ordering::Relaxed);
                Ok(())
            })
        }

        #[no_mangle]
        pub unsafe extern "C" fn $get(h: usize, value: *mut c_int) -> u32 {
            guard(stringify!($get), || put(value, handle(h)?.settings.$field.load(Ordering::Relaxed)))
        }
    };
}

setting!(cublasSetMathMode, cublasGetMathMode, math_mode, |_| true);
// A hint of how many multiprocessors to leave to other work (PyTorch sets it to overlap
// communication); the builtin kernels' grids do not follow it.
setting!(cublasSetSmCountTarget, cublasGetSmCountTarget, sm_count_target, |count| count >= 0);
setting!(cublasSetPointerMode_v2, cublasGetPointerMode_v2, pointer_mode, |mode| (0..=1).contains(&mode));
setting!(cublasSetAtomicsMode, cublasGetAtomicsMode, atomics_mode, |mode| (0..=1).contains(&mode));
setting!(cublasSetEmulationStrategy, cublasGetEmulationStrategy, emulation_strategy, |s| (0..=2).contains(&s));
setting!(cublasSetEmulationSpecialValuesSupport, cublasGetEmulationSpecialValuesSupport, special_values, |_| true);
setting!(
    cublasSetFixedPointEmulationMantissaControl,
    cublasGetFixedPointEmulationMantissaControl,
    mantissa_control,
    |control| (0..=1).contains(&control)
);
setting!(
    cublasSetFixedPointEmulationMaxMantissaBitCount,
    cublasGetFixedPointEmulationMaxMantissaBitCount,
    max_mantissa_bits,
    |bits| bits >= 0
);
setting!(
    cublasSetFixedPointEmulationMantissaBitOffset,
    cublasGetFixedPointEmulationMantissaBitOffset,
    mantissa_bit_offset,
    |_| true
);

#[no_mangle]
pub extern "C" fn cublasSetFixedPointEmulationMantissaBitCountPointer(h: usize, bits: *mut c_int) -> u32 {
    guard("cublasSetFixedPointEmulationMantissaBitCountPointer", || {
        handle(h)?.settings.mantissa_bit_count_pointer.store(bits as usize, Ordering::Relaxed);
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cublasGetFixedPointEmulationMantissaBitCountPointer(h: usize, bits: *mut *mut c_int) -> u32 {
    guard("cublasGetFixedPointEmulationMantissaBitCountPointer", || {
        let pointer = handle(h)?.settings.mantissa_bit_count_pointer.load(Ordering::Relaxed);
        put(bits, pointer as *mut c_int)
    })
}

#[no_mangle]
pub extern "C" fn cublasSetWorkspace_v2(h: usize, _workspace: *mut c_void, _bytes: usize) -> u32 {
    // The builtin kernels need no workspace.
    guard("cublasSetWorkspace", || handle(h).map(drop))
}
