//! Linking on the device's JIT linker (protocol 21, [`super::Request::Link`]): what the CUDA
//! shim's `cuLinkCreate`, `cuLinkAddData` and `cuLinkComplete` send, so that relocatable device
//! code (`nvcc -rdc`, Numba's kernels, CuPy's `-rdc=true` modules) is linked by the driver of
//! the GPU it will run on, for that GPU's architecture.

use serde::{Deserialize, Serialize};

/// What one input of a link is (`CUjitInputType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum LinkInputKind {
    /// A cubin (`CU_JIT_INPUT_CUBIN`, 0).
    Cubin,
    /// PTX text (`CU_JIT_INPUT_PTX`, 1).
    Ptx,
    /// A fat binary (`CU_JIT_INPUT_FATBINARY`, 2).
    Fatbinary,
    /// A host object with embedded device code (`CU_JIT_INPUT_OBJECT`, 3).
    Object,
    /// An archive of host objects (`CU_JIT_INPUT_LIBRARY`, 4), such as `libcudadevrt.a`.
    Library,
    /// NVVM IR for link-time optimization (`CU_JIT_INPUT_NVVM`, 5).
    Nvvm,
}

impl LinkInputKind {
    /// The kind `CUjitInputType` `raw` names; `None` for a value `cuda.h` does not define.
    pub fn from_raw(raw: u32) -> Option<Self> {
        Some(match raw {
            0 => Self::Cubin,
            1 => Self::Ptx,
            2 => Self::Fatbinary,
            3 => Self::Object,
            4 => Self::Library,
            5 => Self::Nvvm,
            _ => return None,
        })
    }

    /// Its `CUjitInputType` value.
    pub fn raw(self) -> u32 {
        match self {
            Self::Cubin => 0,
            Self::Ptx => 1,
            Self::Fatbinary => 2,
            Self::Object => 3,
            Self::Library => 4,
            Self::Nvvm => 5,
        }
    }
}

/// One input of a link: its bytes follow in the request's payload, in the order of the inputs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LinkInput {
    /// What it is.
    pub kind: LinkInputKind,
    /// The name the linker's messages call it by.
    pub name: String,
    /// How many bytes of the payload are its.
    pub len: u64,
    /// Options for this input alone (`cuLinkAddData`'s), over the link's.
    pub options: Vec<JitOption>,
}

/// A JIT option whose value is a number (`CUjit_option` and the value the driver reads from its
/// `void*`): the ones [`is_forwarded`] names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct JitOption {
    /// The `CUjit_option`.
    pub option: u32,
    /// Its value, as the program passed it.
    pub value: u64,
}

/// The options the program's side handles itself and never sends: the log buffers and their
/// sizes (`CU_JIT_INFO_LOG_BUFFER` .. `CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES`), the wall time
/// written back (`CU_JIT_WALL_TIME`) and the context's target (`CU_JIT_TARGET_FROM_CUCONTEXT`:
/// the device's own context is the target anyway).
pub const HANDLED_BY_THE_CALLER: [u32; 6] = [2, 3, 4, 5, 6, 8];

/// Whether option `option` is a number the device's linker may be given as it is: the register
/// and thread limits, optimization level, target, debug and line information, verbosity, cache
/// mode, floating-point modes, unused variables, position-independent code and occupancy hints,
/// and the compiler's and loader's threads (`CUjit_option` 0, 1, 7, 9, 11-16, 20-24, 29-35).
/// `CU_JIT_THREADS_PER_BLOCK` (1) is an output too, which is not written back. Options carrying
/// pointers into the program (global symbol tables, referenced kernel names) are not, nor
/// `CU_JIT_FALLBACK_STRATEGY` (10), which `cuda.h` says cannot be used with `cuLink*`.
pub fn is_forwarded(option: u32) -> bool {
    matches!(option, 0 | 1 | 7 | 9 | 11..=16 | 20..=24 | 29..=35)
}

/// The most bytes one link's inputs may hold together, and its image: they travel inline on the
/// control stream, whose payloads the backend takes up to 64 MiB (`MAX_INLINE`), as the SDK's
/// reply reader does.
pub const MAX_BYTES: u64 = 64 << 20;

/// The most inputs one link takes: a framework links a handful; the bound keeps a request's
/// header small.
pub const MAX_INPUTS: usize = 256;

/// How many payload bytes `inputs` announce; `None` past `u64`.
pub fn payload_len(inputs: &[LinkInput]) -> Option<u64> {
    inputs.iter().try_fold(0u64, |sum, input| sum.checked_add(input.len))
}

/// The inputs as a request carries them: their headers, and their bytes joined in order
/// ([`with_bytes`] undoes it).
pub fn joined(inputs: &[(LinkInput, &[u8])]) -> (Vec<LinkInput>, Vec<u8>) {
    let headers = inputs.iter().map(|(input, _)| input.clone()).collect();
    (headers, inputs.iter().map(|(_, bytes)| *bytes).collect::<Vec<_>>().concat())
}

/// The inputs, each with its bytes cut from `payload` in order; `None` when their lengths do
/// not add up to the payload's.
pub fn with_bytes<'a>(inputs: &[LinkInput], payload: &'a [u8]) -> Option<Vec<(LinkInput, &'a [u8])>> {
    if payload_len(inputs)? != payload.len() as u64 {
        return None;
    }
    let mut rest = payload;
    let mut pairs = Vec::with_capacity(inputs.len());
    for input in inputs {
        let (bytes, after) = rest.split_at(input.len as usize);
        pairs.push((input.clone(), bytes));
        rest = after;
    }
    Some(pairs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn input_kinds_are_cudas_numbers_both_ways() {
        for raw in 0..6 {
            assert_eq!(LinkInputKind::from_raw(raw).map(LinkInputKind::raw), Some(raw));
        }
        assert_eq!(LinkInputKind::from_raw(6), None);
        assert_eq!(LinkInputKind::Library.raw(), 4);
    }

    fn input(len: u64) -> LinkInput {
        LinkInput { kind: LinkInputKind::Ptx, name: format!("{len} bytes"), len, options: Vec::new() }
    }

    #[test]
    fn inputs_take_their_bytes_in_order_and_must_cover_the_payload() {
        let payload = b"abcdefgh";
        let pairs = with_bytes(&[input(3), input(0), input(5)], payload).unwrap();
        let cut: Vec<&[u8]> = pairs.iter().map(|(_, b)| *b).collect();
        assert_eq!(cut, [&b"abc"[..], b"", b"defgh"]);
        assert_eq!(joined(&pairs), (vec![input(3), input(0), input(5)], payload.to_vec()));
        assert!(with_bytes(&[input(3), input(4)], payload).is_none(), "one byte left over");
        assert!(with_bytes(&[input(3), input(6)], payload).is_none(), "one byte short");
        assert!(with_bytes(&[input(u64::MAX), input(9)], payload).is_none(), "lengths past u64");
    }

    #[test]
    fn pointer_options_and_the_callers_own_are_not_forwarded() {
        // Global symbol names, addresses and count; referenced kernels and variables.
        for pointer in [10, 17, 18, 19, 25, 26, 27, 28] {
            assert!(!is_forwarded(pointer), "{pointer}");
        }
        for own in HANDLED_BY_THE_CALLER {
            assert!(!is_forwarded(own), "{own}");
        }
        for number in [0, 7, 9, 12, 21, 33, 35] {
            assert!(is_forwarded(number), "{number}");
        }
        assert!(!is_forwarded(36));
    }
}
