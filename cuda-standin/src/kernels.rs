//! What the stand-in knows of kernels: the names in an image (a cubin, PTX, or the one a fat
//! binary holds for the device), the signatures of the kernels it runs (the builtins' as g++
//! compiled `kernels.cu`, independently of the backend's table, so that a mistake in that table
//! shows; the builtins themselves run from that source: [`crate::host`]), and the test
//! fixtures, run on the CPU by the threads a launch starts. Any other kernel is "not supported
//! by the stand-in". The fixtures: `add_one` (`tests/fixtures/add_one.ptx`), whose threads each touch one element, so
//! that a launch's shape shows in its result; `illegal_store` (`tests/fixtures/illegal_store.ptx`),
//! which faults (an illegal address) so that tests can inject a fault into one session: on a GPU
//! the same PTX faults for real; and the kernels of `tests/fixtures/shim_kernels.cu` (`vadd`,
//! `scale`, `iota`, by their mangled names, as a program compiled by nvcc asks for them), one
//! element a thread as `add_one`, for the tests of unmodified CUDA programs.

use crate::elf::{u16_at, u32_at, u64_at};
use crate::{code, host};

/// A launch's grid and block, as `cuLaunchKernel` was given them, and its clusters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    /// Blocks in x, y, z.
    pub grid: [u32; 3],
    /// Threads of a block in x, y, z.
    pub block: [u32; 3],
    /// Blocks of a cluster in x, y, z (`cuLaunchKernelEx`'s cluster dimension; 1, 1, 1 without).
    pub cluster: [u32; 3],
}

impl Shape {
    /// A launch of `grid` blocks of `block` threads, without clusters.
    pub fn of(grid: [u32; 3], block: [u32; 3]) -> Self {
        Shape { grid, block, cluster: [1, 1, 1] }
    }

    /// Threads launched.
    pub fn threads(&self) -> u64 {
        self.grid.iter().chain(&self.block).map(|&d| d as u64).product()
    }

    /// For each thread launched, `blockIdx.x * blockDim.x + threadIdx.x` (the index of
    /// `add_one`), in launch order: threads that differ only in y or z repeat it.
    fn x_indices(&self) -> impl Iterator<Item = u64> + '_ {
        let replicas = self.threads() / (self.grid[0] as u64 * self.block[0] as u64).max(1);
        let x = (0..self.grid[0] as u64)
            .flat_map(move |b| (0..self.block[0] as u64).map(move |t| b * self.block[0] as u64 + t));
        (0..replicas).flat_map(move |_| x.clone())
    }
}

/// The kernel of `tests/fixtures/add_one.ptx`: `x[i] += 1` for `i < n`, one element a thread,
/// no loop, so that a launch with too few threads leaves elements as they were.
pub const ADD_ONE_KERNEL: &str = "add_one";

/// The kernel that faults when it runs: `illegal_store(u64* p)`.
pub const FAULT_KERNEL: &str = "illegal_store";

/// `vadd(const float* a, const float* b, float* c, int n)` of `tests/fixtures/shim_kernels.cu`:
/// `c[i] = a[i] + b[i]` for `i < n`, one element a thread.
pub const VADD_KERNEL: &str = "_Z4vaddPKfS0_Pfi";

/// `scale(float* x, float a, int n)` of `tests/fixtures/shim_kernels.cu`: `x[i] *= a` for
/// `i < n`, one element a thread.
pub const SCALE_KERNEL: &str = "_Z5scalePffi";

/// `iota(unsigned* x, unsigned n)` of `tests/fixtures/shim_kernels.cu`: `x[i] = i` for `i < n`,
/// one element a thread.
pub const IOTA_KERNEL: &str = "_Z4iotaPjj";

/// `polynomial(float* x, int n)` of `tests/cuda/variables.cu`: for `i < n`, one element a
/// thread, `x[i] = c0 + c1 x + c2 x^2 + c3 x^3 + offsets[i % 4]` with the module's variables
/// `__constant__ float coefficients[4]` and `__device__ int offsets[4]`, and `counted += 1`
/// (its `__device__ unsigned`).
pub const POLYNOMIAL_KERNEL: &str = "_Z10polynomialPfi";

/// `affine(float* x, Affine p)` of `tests/cuda/struct_param.cu`, with
/// `struct Affine { float a; float b; int n; }` passed by value (12 bytes):
/// `x[i] = p.a * x[i] + p.b` for `i < p.n`, one element a thread.
pub const AFFINE_KERNEL: &str = "_Z6affinePf6Affine";

/// `reverse_blocks(float* x, int chunk)` of `tests/cuda/shared_memory.cu`: block `b` reverses
/// `x[b * chunk, (b + 1) * chunk)` (staged in `chunk` floats of dynamic shared memory on a GPU).
pub const REVERSE_BLOCKS_KERNEL: &str = "_Z14reverse_blocksPfi";

/// `mirror(float* x, float* y, int n)` of `tests/cuda/cooperative.cu`: `x[i] = 2i` for every
/// `i < n` (grid-stride), then, past a barrier of the whole grid, `y[i] = x[n - 1 - i]`.
pub const MIRROR_KERNEL: &str = "_Z6mirrorPfS_i";

/// `greet(int tag)` of `tests/cuda/printf.cu`: every thread prints
/// `kernel <tag>: block <b> thread <t>` (device-side `printf`; one-dimensional launches).
pub const GREET_KERNEL: &str = "_Z5greeti";

/// Parameter sizes of the kernels the stand-in can run: the builtins' as g++ compiled
/// `kernels.cu` ([`host::signature`]), the test fixtures' as their sources declare them.
pub fn signature(name: &str) -> Option<Vec<usize>> {
    host::signature(name).or_else(|| fixture_signature(name).map(<[usize]>::to_vec))
}

fn fixture_signature(name: &str) -> Option<&'static [usize]> {
    Some(match name {
        ADD_ONE_KERNEL => &[8, 4],
        FAULT_KERNEL => &[8],
        VADD_KERNEL => &[8, 8, 8, 4],
        SCALE_KERNEL => &[8, 4, 4],
        IOTA_KERNEL => &[8, 4],
        AFFINE_KERNEL => &[8, 12],
        POLYNOMIAL_KERNEL => &[8, 4],
        REVERSE_BLOCKS_KERNEL => &[8, 4],
        MIRROR_KERNEL => &[8, 8, 4],
        GREET_KERNEL => &[4],
        _ => return None,
    })
}

/// The kernel names of an image: a cubin's `.text.<name>` sections, or PTX's `.entry <name>`.
/// `None` for what the stand-in cannot read (fatbins: see [`fatbin_image`]; anything else).
pub fn names(image: &[u8]) -> Option<Vec<String>> {
    if image.starts_with(b"\x7fELF") {
        return crate::elf::kernels(image);
    }
    let text = std::str::from_utf8(image).ok()?;
    if !text.contains(".version") {
        return None;
    }
    let mut names = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find(".entry") {
        rest = &rest[at + ".entry".len()..];
        let name: String =
            rest.trim_start().chars().take_while(|c| c.is_alphanumeric() || *c == '_' || *c == '$').collect();
        if !name.is_empty() {
            names.push(name);
        }
    }
    Some(names)
}

/// The magic number that opens a fat binary, as nvcc embeds it (`.nv_fatbin`).
pub const FATBIN_MAGIC: u32 = 0xBA55_ED50;

/// A fatbin's header: magic, version, header size, then the bytes of entries that follow.
const FATBIN_HEADER: usize = 16;
/// The smallest entry header holding every field read here (64 for a cubin, 80 for PTX seen).
const ENTRY_HEADER: usize = 64;
/// Entry kinds.
const ENTRY_PTX: u16 = 1;
const ENTRY_ELF: u16 = 2;
/// Entry flags of a compressed payload: LZ4 (0x2000), and the compression CUDA 13 applies to
/// PTX by default (0x8000, zstd). The stand-in decompresses neither.
const ENTRY_COMPRESSED: u64 = 0x2000 | 0x8000;

/// The bytes a fat binary spans (the driver is given no length), from its first 16 bytes:
/// the header and the entries its `fat_size` counts. `None`: not a fatbin header.
pub fn fatbin_len(header: &[u8]) -> Option<usize> {
    if u32_at(header, 0)? != FATBIN_MAGIC || usize::from(u16_at(header, 6)?) != FATBIN_HEADER {
        return None;
    }
    usize::try_from(u64_at(header, 8)?).ok()?.checked_add(FATBIN_HEADER)
}

/// One fatbin entry's header fields: kind, header size, padded payload size, architecture, flags.
struct Entry {
    kind: u16,
    header: usize,
    padded: usize,
    arch: u32,
    flags: u64,
}

impl Entry {
    /// The header at the start of `entry`; `None` where it is cut short or too small.
    fn read(entry: &[u8]) -> Option<Self> {
        let header = u32_at(entry, 4)? as usize;
        if header < ENTRY_HEADER {
            return None;
        }
        Some(Entry {
            kind: u16_at(entry, 0)?,
            header,
            padded: usize::try_from(u64_at(entry, 8)?).ok()?,
            arch: u32_at(entry, 28)?,
            flags: u64_at(entry, 40)?,
        })
    }
}

/// The image a fat binary (`fatbin`, at least [`fatbin_len`] bytes) holds for a device of
/// architecture `arch` (`major * 10 + minor`), as the driver picks it: an uncompressed cubin
/// built for that architecture, else uncompressed PTX for it or an older one (which the driver
/// would compile). A PTX payload ends at its first NUL (entries are padded). The error is the
/// load's `CUresult`: `CUDA_ERROR_INVALID_IMAGE` for inconsistent headers,
/// `CUDA_ERROR_NOT_SUPPORTED` when the image for the device is there but only compressed (a
/// legal image the stand-in cannot read, not a violation), `CUDA_ERROR_NO_BINARY_FOR_GPU`
/// when there is none, as the driver answers.
pub fn fatbin_image(fatbin: &[u8], arch: u32) -> Result<&[u8], u32> {
    let end = fatbin_len(fatbin).filter(|&end| end <= fatbin.len()).ok_or(code::INVALID_IMAGE)?;
    let (mut cubin, mut ptx, mut compressed) = (None, None, false);
    let mut at = FATBIN_HEADER;
    while at < end {
        let entry = &fatbin[at..end];
        let e = Entry::read(entry).ok_or(code::INVALID_IMAGE)?;
        let payload = e.header.checked_add(e.padded).and_then(|stop| entry.get(e.header..stop));
        let payload = payload.ok_or(code::INVALID_IMAGE)?;
        let runs = match e.kind {
            ENTRY_ELF => e.arch == arch,
            ENTRY_PTX => e.arch <= arch,
            _ => false,
        };
        if runs && e.flags & ENTRY_COMPRESSED != 0 {
            compressed = true;
        } else if runs && e.kind == ENTRY_ELF {
            cubin.get_or_insert(payload);
        } else if runs {
            ptx.get_or_insert(&payload[..payload.iter().position(|&b| b == 0).unwrap_or(payload.len())]);
        }
        at += e.header + e.padded;
    }
    match cubin.or(ptx) {
        Some(image) => Ok(image),
        None if compressed => Err(code::NOT_SUPPORTED),
        None => Err(code::NO_BINARY_FOR_GPU),
    }
}

/// Device memory as a kernel sees it: an access outside the context's allocations faults.
pub trait Memory {
    /// The address of the kernel's module's variable `name`.
    fn variable(&self, _name: &str) -> Option<u64> {
        None
    }
    /// `n` floats at `address`.
    fn load(&mut self, address: u64, n: usize) -> Option<Vec<f32>>;
    /// Stores floats at `address`.
    fn store(&mut self, address: u64, values: &[f32]) -> Option<()>;
    /// Stores 32-bit unsigned integers at `address`.
    fn store_u32(&mut self, address: u64, values: &[u32]) -> Option<()>;
    /// A device-side `printf`: the text goes into the context's printf buffer, which the driver
    /// writes out at the next synchronization.
    fn print(&mut self, text: &str);
    /// The texture or surface object `value` of the kernel's context.
    fn object(&self, _value: u64) -> Option<crate::textures::Object> {
        None
    }
}

pub(crate) fn u64_arg(arg: &[u8]) -> u64 {
    let mut b = [0u8; 8];
    b[..arg.len().min(8)].copy_from_slice(&arg[..arg.len().min(8)]);
    u64::from_ne_bytes(b)
}

pub(crate) fn f32_arg(arg: &[u8]) -> f32 {
    f32::from_ne_bytes(arg[..4].try_into().expect("4-byte parameter"))
}

fn u32_arg(arg: &[u8]) -> usize {
    u32::from_ne_bytes(arg[..4].try_into().expect("4-byte parameter")) as usize
}

pub(crate) fn i32_arg(arg: &[u8]) -> i32 {
    i32::from_ne_bytes(arg[..4].try_into().expect("4-byte parameter"))
}

/// The address of 4-byte element `index` (possibly negative, as a kernel's `int` index) of the
/// array at `base`; `None` (a fault) where it leaves the address space.
pub(crate) fn element(base: u64, index: i64) -> Option<u64> {
    base.checked_add_signed(index.checked_mul(4)?)
}

/// A thread's `int i = blockIdx.x * blockDim.x + threadIdx.x`: computed in 32 bits as in
/// CUDA, so that a thread past `2^31` gets a negative index, reads below the array and faults,
/// as it would on a GPU.
pub(crate) fn int_index(x: u64) -> i64 {
    i64::from(x as u32 as i32)
}

/// The elements `int i = ...; if (i < n)` selects, one a thread, in launch order.
pub(crate) fn int_elements(shape: &Shape, n: i32) -> impl Iterator<Item = i64> + '_ {
    shape.x_indices().map(int_index).filter(move |&i| i < i64::from(n))
}

/// Runs test fixture `name` (whose arguments were checked against [`signature`]) with the
/// threads of `shape`; `None`: it faulted (or it is no fixture).
pub fn run(name: &str, args: &[Vec<u8>], shape: Shape, memory: &mut dyn Memory) -> Option<()> {
    match name {
        ADD_ONE_KERNEL => {
            let (x, n) = (u64_arg(&args[0]), u32_arg(&args[1]) as u64);
            for i in shape.x_indices().filter(|&i| i < n) {
                let at = x.checked_add(i * 4)?;
                let v = memory.load(at, 1)?[0];
                memory.store(at, &[v + 1.0])?;
            }
            Some(())
        }
        VADD_KERNEL => {
            let (a, b, c) = (u64_arg(&args[0]), u64_arg(&args[1]), u64_arg(&args[2]));
            for i in int_elements(&shape, i32_arg(&args[3])) {
                let sum = memory.load(element(a, i)?, 1)?[0] + memory.load(element(b, i)?, 1)?[0];
                memory.store(element(c, i)?, &[sum])?;
            }
            Some(())
        }
        SCALE_KERNEL => {
            let (x, a) = (u64_arg(&args[0]), f32_arg(&args[1]));
            for i in int_elements(&shape, i32_arg(&args[2])) {
                let at = element(x, i)?;
                let v = memory.load(at, 1)?[0];
                memory.store(at, &[v * a])?;
            }
            Some(())
        }
        AFFINE_KERNEL => {
            let (x, p) = (u64_arg(&args[0]), &args[1]);
            let (a, b, n) = (f32_arg(&p[0..4]), f32_arg(&p[4..8]), i32_arg(&p[8..12]));
            for i in int_elements(&shape, n) {
                let at = element(x, i)?;
                let v = memory.load(at, 1)?[0];
                memory.store(at, &[a * v + b])?;
            }
            Some(())
        }
        POLYNOMIAL_KERNEL => {
            let (x, n) = (u64_arg(&args[0]), i32_arg(&args[1]));
            let c = memory.load(memory.variable("coefficients")?, 4)?;
            let (offsets, counted) = (memory.variable("offsets")?, memory.variable("counted")?);
            for i in int_elements(&shape, n) {
                let at = element(x, i)?;
                let v = memory.load(at, 1)?[0];
                let offset = memory.load(element(offsets, i % 4)?, 1)?[0].to_bits() as i32 as f32;
                memory.store(at, &[((c[3] * v + c[2]) * v + c[1]) * v + c[0] + offset])?;
                let count = memory.load(counted, 1)?[0].to_bits();
                memory.store_u32(counted, &[count.wrapping_add(1)])?;
            }
            Some(())
        }
        REVERSE_BLOCKS_KERNEL => {
            let (x, chunk) = (u64_arg(&args[0]), u32_arg(&args[1]));
            // Written for one-dimensional launches: another shape would reverse some chunks
            // more than once.
            if shape.grid[1..] != [1, 1] || shape.block[1..] != [1, 1] {
                return None;
            }
            for b in 0..shape.grid[0] as u64 {
                let at = element(x, i64::try_from(b * chunk as u64).ok()?)?;
                let mut values = memory.load(at, chunk)?;
                values.reverse();
                memory.store(at, &values)?;
            }
            Some(())
        }
        MIRROR_KERNEL => {
            let (x, y, n) = (u64_arg(&args[0]), u64_arg(&args[1]), i32_arg(&args[2]));
            // Grid-stride loops: every element, whatever the shape.
            for i in 0..i64::from(n.max(0)) {
                memory.store(element(x, i)?, &[2.0 * i as f32])?;
            }
            for i in 0..i64::from(n.max(0)) {
                let v = memory.load(element(x, i64::from(n) - 1 - i)?, 1)?[0];
                memory.store(element(y, i)?, &[v])?;
            }
            Some(())
        }
        GREET_KERNEL => {
            let tag = i32_arg(&args[0]);
            for b in 0..shape.grid[0] {
                for t in 0..shape.block[0] {
                    memory.print(&format!("kernel {tag}: block {b} thread {t}\n"));
                }
            }
            Some(())
        }
        IOTA_KERNEL => {
            // `unsigned i = ...; if (i < n)`: the index wraps to 32 bits and never goes negative.
            let (x, n) = (u64_arg(&args[0]), u32_arg(&args[1]) as u64);
            for i in shape.x_indices().map(|i| i as u32).filter(|&i| u64::from(i) < n) {
                memory.store_u32(element(x, i.into())?, &[i])?;
            }
            Some(())
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_names_come_from_ptx_and_cubins() {
        let ptx = b".version 7.0\n.visible .entry add_one(\n.param .u64 x\n)\n{ ret; }\n.entry illegal_store()\n{}\n";
        assert_eq!(names(ptx).unwrap(), vec!["add_one", "illegal_store"]);
        let cubin = include_bytes!("../../tests/fixtures/add_one.sm_90.cubin");
        assert_eq!(names(cubin).unwrap(), vec!["add_one"]);
        assert_eq!(crate::elf::len(cubin), Some(cubin.len()));
        assert!(crate::elf::table_end(cubin).unwrap() <= cubin.len());
        assert!(names(b"garbage").is_none());
        assert_eq!(signature("saxpy"), Some(vec![4, 8, 8, 8]), "as g++ laid out kernels.cu");
        assert!(signature("vector_sub").is_none(), "user kernels are not run");
    }

    /// Device memory as one array of 4-byte words from address 0, for kernels run directly.
    struct Flat(Vec<f32>);

    impl Memory for Flat {
        fn load(&mut self, address: u64, n: usize) -> Option<Vec<f32>> {
            self.0.get(address as usize / 4..address as usize / 4 + n).map(<[f32]>::to_vec)
        }
        fn store(&mut self, address: u64, values: &[f32]) -> Option<()> {
            self.0.get_mut(address as usize / 4..address as usize / 4 + values.len())?.copy_from_slice(values);
            Some(())
        }
        fn store_u32(&mut self, address: u64, values: &[u32]) -> Option<()> {
            let floats: Vec<f32> = values.iter().map(|&v| f32::from_bits(v)).collect();
            self.store(address, &floats)
        }
        fn print(&mut self, text: &str) {
            unreachable!("the fixtures run here print nothing, yet one printed {text:?}")
        }
    }

    #[test]
    fn add_one_runs_only_the_threads_launched() {
        let args = |n: u32| vec![0u64.to_ne_bytes().to_vec(), n.to_ne_bytes().to_vec()];
        let mut memory = Flat(vec![0.0; 100]);
        let short = Shape::of([3, 1, 1], [32, 1, 1]);
        run(ADD_ONE_KERNEL, &args(100), short, &mut memory).unwrap();
        assert!(memory.0[..96].iter().all(|&v| v == 1.0) && memory.0[96..].iter().all(|&v| v == 0.0));
        let whole = Shape::of([4, 1, 1], [32, 1, 1]);
        run(ADD_ONE_KERNEL, &args(100), whole, &mut memory).unwrap();
        assert!(memory.0[..96].iter().all(|&v| v == 2.0) && memory.0[96..].iter().all(|&v| v == 1.0));
        let twice_in_y = Shape::of([1, 2, 1], [10, 1, 1]);
        run(ADD_ONE_KERNEL, &args(100), twice_in_y, &mut memory).unwrap();
        assert_eq!(memory.0[0], 4.0, "both rows of blocks ran");
    }

    const SM_90: &[u8] = include_bytes!("../../tests/fixtures/shim_kernels.sm_90.fatbin");
    const PTX_COMPRESSED: &[u8] = include_bytes!("../../tests/fixtures/shim_kernels.compute_90.fatbin");
    const PTX: &[u8] = include_bytes!("../../tests/fixtures/shim_kernels.compute_90.no-compress.fatbin");
    const PROGRAM: &[u8] = include_bytes!("../../tests/fixtures/vadd_program.nv_fatbin");
    /// The kernels of `shim_kernels.cu`, sorted.
    const SHIM_KERNELS: [&str; 3] = [IOTA_KERNEL, VADD_KERNEL, SCALE_KERNEL];

    /// The kernel names of `image`, sorted (a cubin lists them in reverse).
    fn sorted_names(image: &[u8]) -> Vec<String> {
        let mut names = names(image).unwrap();
        names.sort();
        names
    }

    /// The entries of a one-fatbin image, each with its header and padded payload.
    fn entries(fatbin: &[u8]) -> Vec<Vec<u8>> {
        let (mut at, end, mut out) = (FATBIN_HEADER, fatbin_len(fatbin).unwrap(), Vec::new());
        while at < end {
            let e = Entry::read(&fatbin[at..]).unwrap();
            out.push(fatbin[at..at + e.header + e.padded].to_vec());
            at += e.header + e.padded;
        }
        out
    }

    /// A fatbin of `entries`, as nvcc lays one out.
    fn fatbin(entries: &[Vec<u8>]) -> Vec<u8> {
        let size: usize = entries.iter().map(Vec::len).sum();
        let mut out = FATBIN_MAGIC.to_le_bytes().to_vec();
        out.extend(1u16.to_le_bytes().into_iter().chain(16u16.to_le_bytes()).chain((size as u64).to_le_bytes()));
        entries.iter().for_each(|e| out.extend(e));
        out
    }

    /// `entry` claiming architecture `arch`.
    fn for_arch(mut entry: Vec<u8>, arch: u32) -> Vec<u8> {
        entry[28..32].copy_from_slice(&arch.to_le_bytes());
        entry
    }

    #[test]
    fn a_fatbin_yields_the_cubin_for_sm_90_else_uncompressed_ptx() {
        let cubin = fatbin_image(SM_90, 90).unwrap();
        assert!(cubin.starts_with(b"\x7fELF"), "the sm_90 cubin, not the compressed PTX beside it");
        assert_eq!(sorted_names(cubin), SHIM_KERNELS);
        let ptx = fatbin_image(PTX, 90).unwrap();
        assert!(ptx.starts_with(b"\n") && !ptx.contains(&0), "PTX text, cut at its NUL");
        assert_eq!(sorted_names(ptx), SHIM_KERNELS);
        assert_eq!(fatbin_image(PTX, 80), Err(code::NO_BINARY_FOR_GPU), "compute_90 PTX does not run on sm_80");

        let (elf, ptx_entry) = (entries(SM_90).remove(0), entries(PTX).remove(0));
        let ptx_first = fatbin(&[ptx_entry.clone(), elf.clone()]);
        assert!(fatbin_image(&ptx_first, 90).unwrap().starts_with(b"\x7fELF"), "a cubin is preferred to PTX");
        let other_cubin = fatbin(&[for_arch(elf.clone(), 80), ptx_entry]);
        assert!(!fatbin_image(&other_cubin, 90).unwrap().starts_with(b"\x7fELF"), "an sm_80 cubin is skipped");
        assert_eq!(fatbin_image(&fatbin(&[for_arch(elf.clone(), 80)]), 90), Err(code::NO_BINARY_FOR_GPU));
        assert_eq!(fatbin_len(&ptx_first), Some(ptx_first.len()));
    }

    #[test]
    fn a_fatbin_whose_image_for_the_device_is_compressed_is_not_supported() {
        assert_eq!(fatbin_image(PTX_COMPRESSED, 90), Err(code::NOT_SUPPORTED));
        let compressed_ptx = entries(SM_90).remove(1);
        let elf = entries(SM_90).remove(0);
        let with_foreign_cubin = fatbin(&[for_arch(elf, 100), compressed_ptx]);
        assert_eq!(fatbin_image(&with_foreign_cubin, 90), Err(code::NOT_SUPPORTED));
    }

    #[test]
    fn a_fatbin_with_inconsistent_headers_is_invalid() {
        let cut = &SM_90[..SM_90.len() - 1];
        assert_eq!(fatbin_image(cut, 90), Err(code::INVALID_IMAGE), "shorter than its fat_size");
        let mut overrun = entries(SM_90).remove(0);
        overrun[8..16].copy_from_slice(&(1u64 << 40).to_le_bytes());
        assert_eq!(fatbin_image(&fatbin(&[overrun]), 90), Err(code::INVALID_IMAGE), "an entry past the end");
        let mut tiny = entries(SM_90).remove(0);
        tiny[4..8].copy_from_slice(&0u32.to_le_bytes());
        assert_eq!(fatbin_image(&fatbin(&[tiny]), 90), Err(code::INVALID_IMAGE), "a header of 0 bytes");
        assert_eq!(fatbin_len(b"\x50\xed\x55\xba\x01\x00\x20\x00"), None, "cut short");
    }

    #[test]
    fn a_real_programs_section_holds_two_fatbins() {
        let first = fatbin_len(PROGRAM).unwrap();
        assert_eq!(names(fatbin_image(PROGRAM, 90).unwrap()).unwrap(), Vec::<String>::new(), "nvlink's module");
        let second = &PROGRAM[first..];
        assert_eq!(fatbin_len(second), Some(second.len()));
        assert_eq!(names(fatbin_image(second, 90).unwrap()).unwrap(), [VADD_KERNEL]);
    }

    /// The argument bytes of a launch, as `cuLaunchKernel` copies them.
    fn args(values: &[&[u8]]) -> Vec<Vec<u8>> {
        values.iter().map(|v| v.to_vec()).collect()
    }

    #[test]
    fn the_shim_kernels_touch_one_element_a_thread() {
        let (a, b, c) = (0u64, 400u64, 800u64); // three arrays of 100 floats
        let mut memory = Flat((0..300).map(|i| i as f32).collect());
        let vadd = |n: i32| args(&[&a.to_ne_bytes(), &b.to_ne_bytes(), &c.to_ne_bytes(), &n.to_ne_bytes()]);
        let short = Shape::of([3, 1, 1], [32, 1, 1]);
        run(VADD_KERNEL, &vadd(100), short, &mut memory).unwrap();
        assert!((0..96).all(|i| memory.0[200 + i] == (i + 100 + i) as f32));
        assert!((96..100).all(|i| memory.0[200 + i] == (200 + i) as f32), "no thread for 96..100");
        let scale = |n: i32| args(&[&a.to_ne_bytes(), &2.5f32.to_ne_bytes(), &n.to_ne_bytes()]);
        run(SCALE_KERNEL, &scale(50), Shape::of([4, 1, 1], [32, 1, 1]), &mut memory).unwrap();
        assert!((0..100).all(|i| memory.0[i] == if i < 50 { i as f32 * 2.5 } else { i as f32 }));
        let iota = |n: u32| args(&[&b.to_ne_bytes(), &n.to_ne_bytes()]);
        run(IOTA_KERNEL, &iota(70), Shape::of([1, 1, 1], [64, 1, 1]), &mut memory).unwrap();
        assert!((0..64).all(|i| memory.0[100 + i].to_bits() == i as u32));
        assert!((64..100).all(|i| memory.0[100 + i] == (100 + i) as f32));
        assert!(run(VADD_KERNEL, &vadd(301), Shape::of([1, 1, 1], [1024, 1, 1]), &mut memory).is_none());
        assert_eq!(signature(VADD_KERNEL), Some(vec![8, 8, 8, 4]));
        assert_eq!(signature(SCALE_KERNEL), Some(vec![8, 4, 4]));
        assert_eq!(signature(IOTA_KERNEL), Some(vec![8, 4]));
    }

    #[test]
    fn a_thread_index_past_2_31_wraps_negative_as_in_cuda() {
        assert_eq!(int_index((1 << 31) - 1), i32::MAX.into());
        assert_eq!(int_index(1 << 31), i32::MIN.into());
        assert_eq!(int_index(1 << 32), 0);
        assert_eq!(element(0x1000, -1), Some(0x0ffc));
        assert_eq!(element(0, -1), None, "below address 0: a fault");
    }
}
