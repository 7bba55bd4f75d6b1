//! What the shim's cuBLAS and cuFFT need of each device, set up at its first use: the
//! backend's builtin kernels (looked up by name once), and buffers of the program's session
//! that no program address reaches: a small one holding the
//! constant one, `f32` or `f64`, real or complex (the second factor of an `axpy` or a `copy` done as a gemm),
//! and a slot for results that go back to the host (`cublasSdot` in host pointer mode); and
//! vectors of ones,
//! grown on demand (a bias added to every column of a product is a gemm by a row of ones).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use ac_frontend::{DeviceBuffer, Function, KernelArg, LaunchDims, Module};

use crate::error::{code, CuResult, Error};
use crate::state;

/// The most blocks a builtin launch asks for: its grid-stride loop covers the rest.
const MAX_BLOCKS: u64 = 1 << 16;

/// A one-dimensional launch of `threads` threads (fewer past [`MAX_BLOCKS`] blocks) in blocks
/// of `block`: every builtin kernel is a grid-stride loop, correct on any shape.
pub fn dims_for(threads: u64, block: u32) -> LaunchDims {
    let blocks = threads.div_ceil(u64::from(block)).clamp(1, MAX_BLOCKS) as u32;
    LaunchDims { grid: [blocks, 1, 1], block: [block, 1, 1], shared_mem: 0 }
}

/// Bytes of the scratch buffer: `1.0f32` and a zero (a complex `f32` one), padding, `1.0f64`
/// and a zero (a complex `f64` one), the result slot (room for a complex `f64`). Each at an
/// offset its kernels' loads allow (a complex `f64` is read 16 bytes at once).
const SCRATCH_BYTES: usize = 48;
/// Where the ones lie in the scratch buffer.
const ONE_F32: usize = 0;
const ONE_F64: usize = 16;
/// Where a result bound for the host is written.
const RESULT: usize = 32;

/// A row of ones on the device: its length in elements, its buffer.
type OnesRow = (usize, DeviceBuffer<u8>);

/// A device's builtin kernels, scratch buffer and rows of ones.
#[derive(Debug)]
pub(crate) struct Builtins {
    /// The device's ordinal.
    device: usize,
    module: Module,
    /// Kernels looked up so far, by name.
    functions: Mutex<HashMap<&'static str, Function>>,
    scratch: DeviceBuffer<u8>,
    /// Held from a launch that writes the result slot until the slot is read.
    result: Mutex<()>,
    /// Rows of ones, `f32` and `f64`, the longest last; earlier ones are kept, since a launch
    /// queued with one may not have run yet.
    ones: [Mutex<Vec<OnesRow>>; 2],
}

impl Builtins {
    /// Builtin kernel `name`, looked up once.
    pub fn function(&self, name: &'static str) -> CuResult<Function> {
        if let Some(found) = self.functions.lock().unwrap_or_else(|p| p.into_inner()).get(name) {
            return Ok(found.clone());
        }
        let found = state::shim()?.block_on(self.module.function(name)).map_err(|e| {
            Error::said(code::NOT_SUPPORTED, format!("the backend has no builtin `{name}` (upgrade ac-backend): {e}"))
        })?;
        self.functions.lock().unwrap_or_else(|p| p.into_inner()).insert(name, found.clone());
        Ok(found)
    }

    /// The constant one, as an `f32` (`double` false) or an `f64`, real or complex (its
    /// imaginary part 0).
    pub fn one(&self, double: bool) -> KernelArg {
        self.scratch.at(if double { ONE_F64 } else { ONE_F32 })
    }

    /// The result slot, and the lock that keeps it for one caller until it reads it back.
    pub fn result(&self) -> (KernelArg, MutexGuard<'_, ()>) {
        (self.scratch.at(RESULT), self.result.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// A row of at least `n` ones, as `f32` (`double` false) or `f64`, made or grown here.
    pub fn ones(&self, double: bool, n: usize) -> CuResult<KernelArg> {
        let mut rows = self.ones[usize::from(double)].lock().unwrap_or_else(|p| p.into_inner());
        if let Some((len, row)) = rows.last() {
            if *len >= n {
                return Ok(row.at(0));
            }
        }
        let len = n.max(rows.last().map_or(0, |(len, _)| 2 * len)).max(1024);
        let bytes: Vec<u8> = if double {
            std::iter::repeat_n(1.0f64.to_le_bytes(), len).flatten().collect()
        } else {
            std::iter::repeat_n(1.0f32.to_le_bytes(), len).flatten().collect()
        };
        let shim = state::shim()?;
        let acc = &shim.devices[self.device].acc;
        let row = shim.block_on(async {
            let row = acc.alloc::<u8>(bytes.len()).await?;
            row.copy_from_host(&bytes).await.map(|()| row)
        })?;
        let arg = row.at(0);
        rows.push((len, row));
        Ok(arg)
    }

    /// Runs `launch` with the result slot as its output and reads the slot's first
    /// `out.len()` bytes back after it (the slot kept for this caller meanwhile).
    pub fn through_result(&self, launch: impl FnOnce(KernelArg) -> CuResult<()>, out: &mut [u8]) -> CuResult<()> {
        let (slot, held) = self.result();
        launch(slot)?;
        self.read_result(&held, out)
    }

    /// Reads the result slot's first `out.len()` bytes, after every launch queued before.
    pub fn read_result(&self, _held: &MutexGuard<'_, ()>, out: &mut [u8]) -> CuResult<()> {
        let shim = state::shim()?;
        Ok(shim.block_on(self.scratch.copy_to_host_at(RESULT, out))?)
    }
}

/// `device`'s builtin kernels and scratch buffer, set up once.
pub(crate) fn builtins(device: usize) -> CuResult<Arc<Builtins>> {
    static LOADED: OnceLock<Mutex<HashMap<usize, Arc<Builtins>>>> = OnceLock::new();
    let loaded = LOADED.get_or_init(Mutex::default);
    if let Some(found) = loaded.lock().unwrap_or_else(|p| p.into_inner()).get(&device) {
        return Ok(found.clone());
    }
    let shim = state::shim()?;
    let acc = &shim.devices.get(device).ok_or(Error::Code(code::INVALID_DEVICE))?.acc;
    let module = shim.block_on(acc.builtin()).map_err(|e| {
        Error::said(code::NOT_SUPPORTED, format!("the backend has no builtin kernels (upgrade ac-backend): {e}"))
    })?;
    let scratch = shim.block_on(async {
        let scratch = acc.alloc::<u8>(SCRATCH_BYTES).await?;
        let mut constants = [0u8; SCRATCH_BYTES];
        constants[ONE_F32..ONE_F32 + 4].copy_from_slice(&1.0f32.to_le_bytes());
        constants[ONE_F64..ONE_F64 + 8].copy_from_slice(&1.0f64.to_le_bytes());
        scratch.copy_from_host(&constants).await.map(|()| scratch)
    })?;
    let found = Arc::new(Builtins {
        device,
        module,
        functions: Mutex::default(),
        scratch,
        result: Mutex::new(()),
        ones: [Mutex::default(), Mutex::default()],
    });
    Ok(loaded.lock().unwrap_or_else(|p| p.into_inner()).entry(device).or_insert(found).clone())
}
