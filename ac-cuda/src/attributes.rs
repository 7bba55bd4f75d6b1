//! A kernel's attributes: what it uses (registers, static shared memory), as the backend's
//! device says (protocol 10), and the attributes a program sets (`cuFuncSetAttribute`,
//! `cuKernelSetAttribute`). Raising a kernel's dynamic shared memory limit past the default
//! 48 KiB is sent to the backend, which checks it against the device's opt-in limit and every
//! later launch against it; a launch over the kernel's limit is refused here, at once, as the
//! driver refuses it.

use std::collections::HashMap;
use std::ffi::c_int;
use std::sync::{Mutex, OnceLock};

use ac_frontend::{Function, KernelAttributes, KernelSetting};

use crate::error::{code, CuResult, Error};
use crate::state;

/// `CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES`.
const MAX_DYNAMIC_SHARED: c_int = 8;
/// `CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT`.
const CARVEOUT: c_int = 9;
/// `CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH` to
/// `CU_FUNC_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE`: kept and answered, not sent (a
/// launch's cluster shape travels with it), but for [`NON_PORTABLE`].
/// `CU_FUNC_ATTRIBUTE_CLUSTER_SIZE_MUST_BE_SET` (10) is read-only and answered 0.
const CLUSTER: std::ops::RangeInclusive<c_int> = 11..=15;
/// `CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED`: sent (backend protocol 13), since
/// the remote driver refuses a launch in clusters past 8 blocks without it.
const NON_PORTABLE: c_int = 14;
/// The most blocks of a cluster: CUDA's portable size, and what a kernel that allows
/// non-portable sizes may have on a compute capability 9.0 GPU.
const PORTABLE_CLUSTER_BLOCKS: u64 = 8;
const NON_PORTABLE_CLUSTER_BLOCKS: u64 = 16;
/// The dynamic shared memory a kernel's launches may ask for on a backend too old to say.
const DEFAULT_DYNAMIC_SHARED: u32 = 48 << 10;

/// What the shim knows of one kernel's attributes on one device.
#[derive(Debug, Default)]
pub struct Attributes {
    /// The backend's answer, asked the first time one is needed; `None` inside for a backend
    /// older than protocol 10, which cannot say.
    fetched: OnceLock<Option<KernelAttributes>>,
    /// What the program set, by attribute.
    set: Mutex<HashMap<c_int, c_int>>,
    /// The remote kernel allows non-portable cluster sizes (the program allowed them and the
    /// backend set it).
    non_portable: std::sync::atomic::AtomicBool,
}

impl Attributes {
    /// What the backend says of `function` (asked once).
    fn fetched(&self, function: &Function) -> CuResult<Option<KernelAttributes>> {
        if let Some(known) = self.fetched.get() {
            return Ok(*known);
        }
        let shim = state::shim()?;
        let answer = match shim.block_on(function.attributes()) {
            Ok(attributes) => Some(attributes),
            Err(ac_frontend::Error::VersionMismatch(_)) => None,
            Err(e) => return Err(e.into()),
        };
        Ok(*self.fetched.get_or_init(|| answer))
    }

    /// What the program set `attribute` to, if it did.
    fn set_value(&self, attribute: c_int) -> Option<c_int> {
        self.set.lock().unwrap_or_else(|p| p.into_inner()).get(&attribute).copied()
    }

    /// The cluster shape the program required of the kernel's launches
    /// (`CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH`, `_HEIGHT`, `_DEPTH`, all set and positive):
    /// a launch without a cluster dimension of its own runs in clusters of it, as CUDA's does.
    pub fn required_cluster(&self) -> Option<[u32; 3]> {
        let dims = [11, 12, 13].map(|a| self.set_value(a).and_then(|v| u32::try_from(v).ok()).unwrap_or(0));
        (!dims.contains(&0) && dims != [1, 1, 1]).then_some(dims)
    }

    /// The most blocks a cluster of the kernel's launches may have.
    pub fn most_cluster_blocks(&self) -> u64 {
        match self.non_portable.load(std::sync::atomic::Ordering::Acquire) {
            true => NON_PORTABLE_CLUSTER_BLOCKS,
            false => PORTABLE_CLUSTER_BLOCKS,
        }
    }

    /// The dynamic shared memory a launch of `function` may ask for.
    pub fn max_dynamic_shared(&self, function: &Function) -> CuResult<u32> {
        if let Some(bytes) = self.set_value(MAX_DYNAMIC_SHARED) {
            return Ok(bytes as u32);
        }
        Ok(self.fetched(function)?.map_or(DEFAULT_DYNAMIC_SHARED, |a| a.max_dynamic_shared))
    }

    /// Registers per thread and static shared memory, bytes, when the backend says.
    pub fn resources(&self, function: &Function) -> CuResult<Option<(u32, u32)>> {
        Ok(self.fetched(function)?.map(|a| (a.registers, a.static_shared)))
    }

    /// `attribute` as `cuFuncGetAttribute` answers it; `None`: the backend cannot say.
    pub fn get(&self, function: &Function, attribute: c_int) -> CuResult<Option<c_int>> {
        if let Some(value) = self.set_value(attribute) {
            return Ok(Some(value));
        }
        if attribute == 10 || CLUSTER.contains(&attribute) {
            return Ok(Some(0));
        }
        let Some(a) = self.fetched(function)? else { return Ok(None) };
        let count = |n: u32| c_int::try_from(n).unwrap_or(c_int::MAX);
        Ok(Some(match attribute {
            0 => count(a.max_threads_per_block),
            1 => count(a.static_shared),
            2 => count(a.constant),
            3 => count(a.local),
            4 => count(a.registers),
            5 => count(a.ptx_version),
            6 => count(a.binary_version),
            7 => 0, // cache mode
            MAX_DYNAMIC_SHARED => count(a.max_dynamic_shared),
            CARVEOUT => a.preferred_carveout,
            _ => return Err(Error::Code(code::INVALID_VALUE)),
        }))
    }

    /// Sets `attribute` to `value`: sent to the backend when it changes the kernel's dynamic
    /// shared memory limit, carveout or non-portable cluster sizes (a program may set the same
    /// value before every launch).
    /// The setting is held while it is sent, so that threads setting one kernel's attribute at
    /// once leave here the value they left on the backend.
    pub fn set(&self, function: &Function, attribute: c_int, value: c_int) -> CuResult<()> {
        let mut set = self.set.lock().unwrap_or_else(|p| p.into_inner());
        if set.get(&attribute) == Some(&value) {
            return Ok(());
        }
        let setting = match attribute {
            MAX_DYNAMIC_SHARED => {
                KernelSetting::MaxDynamicShared(u32::try_from(value).map_err(|_| Error::Code(code::INVALID_VALUE))?)
            }
            CARVEOUT => KernelSetting::PreferredCarveout(value),
            NON_PORTABLE => KernelSetting::NonPortableClusterSizeAllowed(value != 0),
            a if CLUSTER.contains(&a) => {
                set.insert(attribute, value);
                return Ok(());
            }
            _ => return Err(Error::Code(code::INVALID_VALUE)), // the read-only ones
        };
        let shim = state::shim()?;
        match shim.block_on(function.set_attribute(setting)) {
            Ok(()) => {
                if let KernelSetting::NonPortableClusterSizeAllowed(allowed) = setting {
                    self.non_portable.store(allowed, std::sync::atomic::Ordering::Release);
                }
            }
            // A backend older than protocol 10 keeps the default limit and carveout: a value
            // it already enforces is kept here (and launches checked against it here).
            Err(ac_frontend::Error::VersionMismatch(_)) => match setting {
                KernelSetting::MaxDynamicShared(bytes) if bytes <= DEFAULT_DYNAMIC_SHARED => {}
                KernelSetting::PreferredCarveout(percent) if (-1..=100).contains(&percent) => {}
                KernelSetting::PreferredCarveout(_) => return Err(Error::Code(code::INVALID_VALUE)),
                // Kept and answered; the kernel's clusters keep the portable limit.
                KernelSetting::NonPortableClusterSizeAllowed(_) => {}
                KernelSetting::MaxDynamicShared(_) => {
                    let why =
                        "more than 48 KiB of dynamic shared memory needs backend protocol 10 (upgrade ac-backend)";
                    return Err(Error::said(code::INVALID_VALUE, why));
                }
            },
            Err(e) => return Err(e.into()),
        }
        set.insert(attribute, value);
        Ok(())
    }
}

/// A kernel attribute without the backend's answer: the architecture's limits.
pub fn architecture_attribute(device: usize, attribute: c_int) -> CuResult<c_int> {
    let shim = state::shim()?;
    let d = shim.devices.get(device).ok_or(Error::Code(code::INVALID_DEVICE))?;
    let (major, minor) = crate::init::capability(d);
    Ok(match attribute {
        0 => 1024,                   // max threads per block
        1..=3 => 0,                  // static shared, constant, local bytes
        4 => 32,                     // registers per thread
        5 | 6 => major * 10 + minor, // PTX and binary versions
        MAX_DYNAMIC_SHARED => DEFAULT_DYNAMIC_SHARED as c_int,
        CARVEOUT => -1,
        _ => 0,
    })
}
