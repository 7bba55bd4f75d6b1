//! What the stand-in knows of kernels: the names in an image, the signatures of the builtin
//! kernels (from `kernels.cu`, written out here independently of the backend, so that a
//! mistake in the backend's table shows), and the builtin kernels themselves, run on the CPU
//! by the threads a launch starts, as the CUDA source says. Any other kernel is "not supported
//! by the stand-in", except two test fixtures: `add_one` (`tests/fixtures/add_one.ptx`), whose
//! threads each touch one element, so that a launch's shape shows in its result, and
//! `illegal_store` (`tests/fixtures/illegal_store.ptx`), which faults (an illegal address) so
//! that tests can inject a fault into one session: on a GPU the same PTX faults for real.

/// A launch's grid and block, as `cuLaunchKernel` was given them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    /// Blocks in x, y, z.
    pub grid: [u32; 3],
    /// Threads of a block in x, y, z.
    pub block: [u32; 3],
}

impl Shape {
    /// Threads launched.
    pub fn threads(&self) -> u64 {
        self.grid.iter().chain(&self.block).map(|&d| d as u64).product()
    }

    /// The elements below `n` that a grid-stride loop over the whole launch visits (the loops
    /// of `kernels.cu`: thread `t` of `T` visits `t, t + T, ...`): all of them when any thread
    /// runs, none otherwise.
    fn grid_stride(&self, n: usize) -> std::ops::Range<usize> {
        if self.threads() == 0 {
            0..0
        } else {
            0..n
        }
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

/// Parameter sizes of the kernels the stand-in can run, as `kernels.cu` declares them.
pub fn signature(name: &str) -> Option<&'static [usize]> {
    Some(match name {
        "fill" => &[8, 4, 8],
        "vector_add" => &[8, 8, 8, 8],
        "saxpy" => &[4, 8, 8, 8],
        "sgemm" => &[4, 4, 4, 4, 8, 8, 4, 8],
        "reduce_sum" => &[8, 8, 8],
        ADD_ONE_KERNEL => &[8, 4],
        FAULT_KERNEL => &[8],
        _ => return None,
    })
}

/// The kernel names of an image: a cubin's `.text.<name>` sections, or PTX's `.entry <name>`.
/// `None` for what the stand-in cannot read (fatbins, anything else).
pub fn names(image: &[u8]) -> Option<Vec<String>> {
    if image.starts_with(b"\x7fELF") {
        return elf_kernels(image);
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

/// Where an ELF image's section and program header tables end, from its first 64 bytes.
pub fn elf_table_end(header: &[u8]) -> Option<usize> {
    let u16_at = |at: usize| Some(u16::from_le_bytes(header.get(at..at + 2)?.try_into().ok()?) as usize);
    let u64_at = |at: usize| Some(u64::from_le_bytes(header.get(at..at + 8)?.try_into().ok()?) as usize);
    let (shoff, shentsize, shnum) = (u64_at(0x28)?, u16_at(0x3A)?, u16_at(0x3C)?);
    let (phoff, phentsize, phnum) = (u64_at(0x20)?, u16_at(0x36)?, u16_at(0x38)?);
    let sections = shoff.checked_add(shentsize.checked_mul(shnum)?)?;
    let programs = phoff.checked_add(phentsize.checked_mul(phnum)?)?;
    Some(sections.max(programs).max(64))
}

/// The bytes an ELF image spans (the driver is given no length): its header tables and every
/// section, read from `start`, which holds at least [`elf_table_end`] bytes.
pub fn elf_len(start: &[u8]) -> Option<usize> {
    let u16_at = |at: usize| Some(u16::from_le_bytes(start.get(at..at + 2)?.try_into().ok()?) as usize);
    let u32_at = |at: usize| Some(u32::from_le_bytes(start.get(at..at + 4)?.try_into().ok()?));
    let u64_at = |at: usize| Some(u64::from_le_bytes(start.get(at..at + 8)?.try_into().ok()?) as usize);
    let (shoff, shentsize, shnum) = (u64_at(0x28)?, u16_at(0x3A)?, u16_at(0x3C)?);
    let mut end = elf_table_end(start)?;
    for i in 0..shnum {
        let at = shoff + i * shentsize;
        if u32_at(at + 4)? != 8 {
            end = end.max(u64_at(at + 0x18)?.checked_add(u64_at(at + 0x20)?)?);
        }
    }
    Some(end)
}

fn elf_kernels(image: &[u8]) -> Option<Vec<String>> {
    let u16_at = |at: usize| Some(u16::from_le_bytes(image.get(at..at + 2)?.try_into().ok()?) as usize);
    let u32_at = |at: usize| Some(u32::from_le_bytes(image.get(at..at + 4)?.try_into().ok()?) as usize);
    let u64_at = |at: usize| Some(u64::from_le_bytes(image.get(at..at + 8)?.try_into().ok()?) as usize);
    let (shoff, shentsize, shnum, shstrndx) = (u64_at(0x28)?, u16_at(0x3A)?, u16_at(0x3C)?, u16_at(0x3E)?);
    let strings_header = shoff + shstrndx * shentsize;
    let strings_at = u64_at(strings_header + 0x18)?;
    let mut names = Vec::new();
    for i in 0..shnum {
        let name_at = strings_at + u32_at(shoff + i * shentsize)?;
        let name = image.get(name_at..)?;
        let name = std::str::from_utf8(&name[..name.iter().position(|&b| b == 0)?]).ok()?;
        if let Some(kernel) = name.strip_prefix(".text.") {
            names.push(kernel.to_string());
        }
    }
    Some(names)
}

/// Device memory as a kernel sees it: an access outside the context's allocations faults.
pub trait Memory {
    /// `n` floats at `address`.
    fn load(&mut self, address: u64, n: usize) -> Option<Vec<f32>>;
    /// Stores floats at `address`.
    fn store(&mut self, address: u64, values: &[f32]) -> Option<()>;
}

fn u64_arg(arg: &[u8]) -> u64 {
    let mut b = [0u8; 8];
    b[..arg.len().min(8)].copy_from_slice(&arg[..arg.len().min(8)]);
    u64::from_ne_bytes(b)
}

fn f32_arg(arg: &[u8]) -> f32 {
    f32::from_ne_bytes(arg[..4].try_into().expect("4-byte parameter"))
}

fn u32_arg(arg: &[u8]) -> usize {
    u32::from_ne_bytes(arg[..4].try_into().expect("4-byte parameter")) as usize
}

/// Runs kernel `name` (whose arguments were checked against [`signature`]) with the threads
/// of `shape`; `None`: it faulted.
pub fn run(name: &str, args: &[Vec<u8>], shape: Shape, memory: &mut dyn Memory) -> Option<()> {
    match name {
        "fill" => {
            let n = shape.grid_stride(u64_arg(&args[2]) as usize).len();
            memory.store(u64_arg(&args[0]), &vec![f32_arg(&args[1]); n])
        }
        ADD_ONE_KERNEL => {
            let (x, n) = (u64_arg(&args[0]), u32_arg(&args[1]) as u64);
            for i in shape.x_indices().filter(|&i| i < n) {
                let at = x.checked_add(i * 4)?;
                let v = memory.load(at, 1)?[0];
                memory.store(at, &[v + 1.0])?;
            }
            Some(())
        }
        "vector_add" => {
            let n = shape.grid_stride(u64_arg(&args[3]) as usize).len();
            let (a, b) = (memory.load(u64_arg(&args[0]), n)?, memory.load(u64_arg(&args[1]), n)?);
            let c: Vec<f32> = a.iter().zip(&b).map(|(x, y)| x + y).collect();
            memory.store(u64_arg(&args[2]), &c)
        }
        "saxpy" => {
            let (a, n) = (f32_arg(&args[0]), shape.grid_stride(u64_arg(&args[3]) as usize).len());
            let x = memory.load(u64_arg(&args[1]), n)?;
            let mut y = memory.load(u64_arg(&args[2]), n)?;
            for (yi, xi) in y.iter_mut().zip(&x) {
                *yi += a * xi;
            }
            memory.store(u64_arg(&args[2]), &y)
        }
        "sgemm" => {
            let (m, n, k) = (u32_arg(&args[0]), u32_arg(&args[1]), u32_arg(&args[2]));
            if shape.grid_stride(m * n).is_empty() {
                return Some(());
            }
            let (alpha, beta) = (f32_arg(&args[3]), f32_arg(&args[6]));
            let a = memory.load(u64_arg(&args[4]), m * k)?;
            let b = memory.load(u64_arg(&args[5]), k * n)?;
            let mut c = memory.load(u64_arg(&args[7]), m * n)?;
            for row in 0..m {
                for col in 0..n {
                    let acc: f32 = (0..k).map(|p| a[row * k + p] * b[p * n + col]).sum();
                    c[row * n + col] = alpha * acc + beta * c[row * n + col];
                }
            }
            memory.store(u64_arg(&args[7]), &c)
        }
        "reduce_sum" => {
            let n = shape.grid_stride(u64_arg(&args[2]) as usize).len();
            let sum: f64 = memory.load(u64_arg(&args[0]), n)?.iter().map(|&v| v as f64).sum();
            let out = memory.load(u64_arg(&args[1]), 1)?[0];
            memory.store(u64_arg(&args[1]), &[out + sum as f32])
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
        assert_eq!(elf_len(cubin), Some(cubin.len()));
        assert!(elf_table_end(cubin).unwrap() <= cubin.len());
        assert!(names(b"garbage").is_none());
        assert_eq!(signature("saxpy"), Some(&[4usize, 8, 8, 8][..]));
        assert!(signature("vector_sub").is_none(), "user kernels are not run");
    }

    #[test]
    fn add_one_runs_only_the_threads_launched() {
        struct Flat(Vec<f32>);
        impl Memory for Flat {
            fn load(&mut self, address: u64, n: usize) -> Option<Vec<f32>> {
                self.0.get(address as usize / 4..address as usize / 4 + n).map(<[f32]>::to_vec)
            }
            fn store(&mut self, address: u64, values: &[f32]) -> Option<()> {
                self.0.get_mut(address as usize / 4..address as usize / 4 + values.len())?.copy_from_slice(values);
                Some(())
            }
        }
        let args = |n: u32| vec![0u64.to_ne_bytes().to_vec(), n.to_ne_bytes().to_vec()];
        let mut memory = Flat(vec![0.0; 100]);
        let short = Shape { grid: [3, 1, 1], block: [32, 1, 1] };
        run(ADD_ONE_KERNEL, &args(100), short, &mut memory).unwrap();
        assert!(memory.0[..96].iter().all(|&v| v == 1.0) && memory.0[96..].iter().all(|&v| v == 0.0));
        let whole = Shape { grid: [4, 1, 1], block: [32, 1, 1] };
        run(ADD_ONE_KERNEL, &args(100), whole, &mut memory).unwrap();
        assert!(memory.0[..96].iter().all(|&v| v == 2.0) && memory.0[96..].iter().all(|&v| v == 1.0));
        let twice_in_y = Shape { grid: [1, 2, 1], block: [10, 1, 1] };
        run(ADD_ONE_KERNEL, &args(100), twice_in_y, &mut memory).unwrap();
        assert_eq!(memory.0[0], 4.0, "both rows of blocks ran");
    }
}
