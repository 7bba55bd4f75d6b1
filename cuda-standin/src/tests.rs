//! The driver API as a program compiled by nvcc meets it: its fat binaries loaded, its own
//! kernels looked up, sized and launched on stand-in allocations. The stand-in's state is
//! the process's: these tests take turns, each in a context of its own.

use std::sync::{Mutex, MutexGuard};

use super::*;
use crate::kernels::{IOTA_KERNEL, SCALE_KERNEL, VADD_KERNEL};
use crate::streams::*;

static TURN: Mutex<()> = Mutex::new(());

/// Takes this test's turn with the stand-in, with a fresh context current on the thread;
/// returns the violations seen so far, which the test must not add to.
fn begin() -> (MutexGuard<'static, ()>, usize) {
    let turn = TURN.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    assert_eq!(cuInit(0), code::SUCCESS);
    let mut context = std::ptr::null_mut();
    // SAFETY: a valid out pointer.
    assert_eq!(unsafe { cuCtxCreate_v2(&mut context, 0, 0) }, code::SUCCESS);
    (turn, driver().violations.len())
}

/// `bytes` at an 8-byte-aligned address, as nvcc embeds an image (`+ skew` bytes in).
fn aligned(bytes: &[u8], skew: usize) -> Vec<u64> {
    let mut words = vec![0u64; (bytes.len() + skew).div_ceil(8) + 1];
    // SAFETY: `words` holds at least `skew + bytes.len()` bytes.
    unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), (words.as_mut_ptr() as *mut u8).add(skew), bytes.len()) };
    words
}

fn load(image: &[u8], skew: usize) -> Result<Handle, u32> {
    let words = aligned(image, skew);
    let mut module = std::ptr::null_mut();
    let at = words.as_ptr().cast::<u8>().wrapping_add(skew).cast::<c_void>();
    // SAFETY: the image lies at `at`, in `words`, which outlives the call; no options.
    match unsafe { cuModuleLoadDataEx(&mut module, at, 0, std::ptr::null_mut(), std::ptr::null_mut()) } {
        code::SUCCESS => Ok(module),
        error => Err(error),
    }
}

fn function(module: Handle, name: &str) -> Result<Handle, u32> {
    let (name, mut function) = (std::ffi::CString::new(name).unwrap(), std::ptr::null_mut());
    // SAFETY: a valid out pointer and a NUL-terminated name.
    match unsafe { cuModuleGetFunction(&mut function, module, name.as_ptr()) } {
        code::SUCCESS => Ok(function),
        error => Err(error),
    }
}

/// (offset, size) of every parameter, as `cuFuncGetParamInfo` answers until it refuses.
fn params(function: Handle) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    loop {
        let (mut offset, mut size) = (0, 0);
        // SAFETY: valid out pointers.
        match unsafe { cuFuncGetParamInfo(function, out.len(), &mut offset, &mut size) } {
            code::SUCCESS => out.push((offset, size)),
            error => {
                assert_eq!(error, code::INVALID_VALUE, "past the last parameter");
                return out;
            }
        }
    }
}

/// A device allocation holding `words`.
fn upload(words: &[u32]) -> u64 {
    let mut address = 0;
    // SAFETY: valid pointers; the host words live until the synchronize returns.
    unsafe {
        assert_eq!(memory::cuMemAlloc_v2(&mut address, words.len() * 4), code::SUCCESS);
        let copy = memory::cuMemcpyHtoDAsync_v2(address, words.as_ptr() as *const c_void, words.len() * 4, handle(0));
        assert_eq!(copy, code::SUCCESS);
    }
    assert_eq!(cuStreamSynchronize(handle(0)), code::SUCCESS);
    address
}

/// The `n` words at `address`, once the default stream's work ran.
fn download(address: u64, n: usize) -> Vec<u32> {
    assert_eq!(cuStreamSynchronize(handle(0)), code::SUCCESS);
    let mut words = vec![0u32; n];
    // Into pageable memory: complete when the call returns.
    let copy = memory::cuMemcpyDtoHAsync_v2(words.as_mut_ptr() as *mut c_void, address, n * 4, handle(0));
    assert_eq!(copy, code::SUCCESS);
    words
}

/// Launches `function` on the default stream with `grid` x `block` threads in x.
fn launch(function: Handle, grid: u32, block: u32, args: &[&[u8]]) -> u32 {
    let mut pointers: Vec<*mut c_void> = args.iter().map(|a| a.as_ptr() as *mut c_void).collect();
    // SAFETY: one pointer a parameter, each to the parameter's bytes, live for the call.
    unsafe {
        cuLaunchKernel(function, grid, 1, 1, block, 1, 1, 0, handle(0), pointers.as_mut_ptr(), std::ptr::null_mut())
    }
}

fn floats(values: impl IntoIterator<Item = f32>) -> Vec<u32> {
    values.into_iter().map(f32::to_bits).collect()
}

#[test]
fn an_nvcc_fatbin_loads_and_its_kernels_run() {
    let (_turn, violations) = begin();
    let module = load(include_bytes!("../../tests/fixtures/shim_kernels.sm_90.fatbin"), 0).unwrap();
    let (vadd, scale, iota) = (
        function(module, VADD_KERNEL).unwrap(),
        function(module, SCALE_KERNEL).unwrap(),
        function(module, IOTA_KERNEL).unwrap(),
    );
    assert_eq!(function(module, "vadd"), Err(code::NOT_FOUND), "looked up by mangled name");
    assert_eq!(params(vadd), [(0, 8), (8, 8), (16, 8), (24, 4)]);
    assert_eq!(params(scale), [(0, 8), (8, 4), (12, 4)]);
    assert_eq!(params(iota), [(0, 8), (8, 4)]);

    let n = 100usize;
    let (a, b) = (upload(&floats((0..n).map(|i| i as f32))), upload(&floats((0..n).map(|i| 0.5 * i as f32))));
    let c = upload(&vec![7; n]);
    let count = (n as i32).to_ne_bytes();
    // 96 threads for 100 elements: the last 4 stay as they were.
    assert_eq!(launch(vadd, 3, 32, &[&a.to_ne_bytes(), &b.to_ne_bytes(), &c.to_ne_bytes(), &count]), 0);
    let sums = download(c, n);
    assert_eq!(sums[..96], floats((0..96).map(|i| 1.5 * i as f32)));
    assert_eq!(sums[96..], [7; 4]);

    // 128 threads for 50 of the 100 elements: `if (i < n)` holds the rest back.
    let half = 50i32.to_ne_bytes();
    assert_eq!(launch(scale, 4, 32, &[&a.to_ne_bytes(), &(-2.0f32).to_ne_bytes(), &half]), 0);
    assert_eq!(download(a, n), floats((0..n).map(|i| if i < 50 { -2.0 * i as f32 } else { i as f32 })));

    // An allocation of exactly 70 words and more threads than words: no thread strays.
    let x = upload(&[u32::MAX; 70]);
    assert_eq!(launch(iota, 1, 64, &[&x.to_ne_bytes(), &70u32.to_ne_bytes()]), 0);
    assert_eq!(download(x, 70), (0..64).chain([u32::MAX; 6]).collect::<Vec<u32>>());
    assert_eq!(launch(iota, 3, 32, &[&x.to_ne_bytes(), &70u32.to_ne_bytes()]), 0);
    assert_eq!(download(x, 70), (0..70).collect::<Vec<u32>>());

    assert_eq!(cuModuleUnload(module), code::SUCCESS);
    assert_eq!(driver().violations.len(), violations, "no contract violation");
}

#[test]
fn a_fatbin_with_only_compressed_images_is_not_supported() {
    let (_turn, violations) = begin();
    let compressed = include_bytes!("../../tests/fixtures/shim_kernels.compute_90.fatbin");
    assert_eq!(load(compressed, 0), Err(code::NOT_SUPPORTED));
    assert_eq!(driver().violations.len(), violations, "a legal image: no violation");
    let ptx = load(include_bytes!("../../tests/fixtures/shim_kernels.compute_90.no-compress.fatbin"), 0).unwrap();
    assert!(function(ptx, SCALE_KERNEL).is_ok(), "uncompressed PTX is read");
}

#[test]
fn a_programs_fatbins_load_one_at_a_time() {
    let (_turn, violations) = begin();
    let section = include_bytes!("../../tests/fixtures/vadd_program.nv_fatbin");
    let first = kernels::fatbin_len(section).unwrap();
    let nvlink = load(section, 0).unwrap();
    assert_eq!(function(nvlink, VADD_KERNEL), Err(code::NOT_FOUND), "a module without kernels");
    let program = load(&section[first..], 0).unwrap();
    assert!(function(program, VADD_KERNEL).is_ok());
    assert_eq!(driver().violations.len(), violations);
}

#[test]
fn a_misaligned_fatbin_is_refused() {
    let (_turn, violations) = begin();
    let image = include_bytes!("../../tests/fixtures/shim_kernels.sm_90.fatbin");
    assert_eq!(load(image, 4), Err(code::INVALID_IMAGE));
    assert_eq!(driver().violations.len(), violations + 1, "recorded as a violation");
}

/// The backend's builtin module as PTX names its kernels (the stand-in runs them from
/// `kernels.cu`'s source, whatever the image's code).
fn builtins() -> Handle {
    let ptx =
        b".version 8.8\n.visible .entry fill(\n)\n.visible .entry reduce_sum(\n)\n.visible .entry blas_sgemm(\n)\n";
    load(ptx, 0).unwrap()
}

#[test]
fn the_builtins_run_from_their_cuda_source() {
    let (_turn, violations) = begin();
    let module = builtins();
    let reduce = function(module, "reduce_sum").unwrap();
    assert_eq!(params(reduce), [(0, 8), (8, 8), (16, 8)], "reduce_sum(const float*, float*, u64)");
    // Three blocks of 64 threads that meet at `__syncthreads` twice, for 1,000 values.
    let n = 1000u64;
    let (values, out) = (upload(&floats((0..n).map(|i| i as f32))), upload(&floats([0.5])));
    assert_eq!(launch(reduce, 3, 64, &[&values.to_ne_bytes(), &out.to_ne_bytes(), &n.to_ne_bytes()]), 0);
    assert_eq!(download(out, 1), floats([499_500.5]));

    // C = 2 A^T B + C, column-major: A is 3 x 2 (lda 3), B 3 x 2, C 2 x 2.
    let sgemm = function(module, "blas_sgemm").unwrap();
    let a = upload(&floats([1.0, 2.0, 3.0, 4.0, 5.0, 6.0]));
    let b = upload(&floats([1.0, 0.0, 1.0, 0.0, 1.0, 0.0]));
    let c = upload(&floats([1.0; 4]));
    let (one, two, three, none) = (1u32.to_ne_bytes(), 2u32.to_ne_bytes(), 3u32.to_ne_bytes(), 0u64.to_ne_bytes());
    let args: [&[u8]; 17] = [
        &one,
        &0u32.to_ne_bytes(),
        &two,
        &two,
        &three,
        &2.0f32.to_ne_bytes(),
        &a.to_ne_bytes(),
        &three,
        &none,
        &b.to_ne_bytes(),
        &three,
        &none,
        &1.0f32.to_ne_bytes(),
        &c.to_ne_bytes(),
        &two,
        &none,
        &one,
    ];
    assert_eq!(launch(sgemm, 2, 3, &args), 0);
    assert_eq!(download(c, 4), floats([9.0, 21.0, 5.0, 11.0]));
    assert_eq!(driver().violations.len(), violations, "no contract violation");
}

/// Launches `fill(x, 1.0, n)` with 32 threads in a context where faults stay confined;
/// returns what the stream's synchronize answers.
fn fill_faulting(x: u64, n: u64) -> u32 {
    driver().fault_confined = true;
    let fill = function(builtins(), "fill").unwrap();
    assert_eq!(launch(fill, 1, 32, &[&x.to_ne_bytes(), &1.0f32.to_ne_bytes(), &n.to_ne_bytes()]), 0, "queued");
    let synchronized = cuStreamSynchronize(handle(0));
    driver().fault_confined = false;
    synchronized
}

#[test]
fn a_builtin_that_writes_past_its_allocation_faults() {
    let (_turn, violations) = begin();
    let x = upload(&[0; 10]);
    assert_eq!(fill_faulting(x, 11), code::ILLEGAL_ADDRESS);
    assert_eq!(driver().violations[violations..], ["kernel `fill` wrote past the end of an allocation"]);
}

#[test]
fn a_builtin_given_a_pointer_into_no_allocation_faults() {
    let (_turn, violations) = begin();
    assert_eq!(fill_faulting(0x1000, 11), code::ILLEGAL_ADDRESS);
    assert_eq!(driver().violations.len(), violations, "a program's mistake, not the backend's");
}
