//! What the stand-in reads of a cubin (an ELF image, 64-bit little-endian): its length, its
//! kernels (`.text.<name>` sections) and its variables (object symbols of the sections that
//! hold a module's memory: `.nv.global` for `__device__` variables without an initializer,
//! `.nv.global.init` for those with one, `.nv.constant<bank>` for `__constant__` ones).
//! Every read is bounds-checked: a malformed image answers `None`, never a panic.

/// `sh_type` of a section that occupies no bytes of the file (its memory starts zeroed).
const SHT_NOBITS: u32 = 8;
/// `sh_type` of a symbol table.
const SHT_SYMTAB: u32 = 2;
/// `STT_OBJECT`: a symbol that names data.
const STT_OBJECT: u8 = 1;
/// Bytes of one symbol table entry (`Elf64_Sym`).
const SYMBOL_LEN: usize = 24;
/// The largest variable the stand-in allocates (its GPUs have 4 GiB).
const MAX_VARIABLE: usize = 1 << 30;
/// Bytes of one section header (`Elf64_Shdr`).
const SECTION_HEADER_LEN: usize = 64;
/// The `st_other` bit of a `__managed__` variable's symbol (`STO_CUDA_MANAGED`).
const STO_CUDA_MANAGED: u8 = 4;

/// A module variable as its image declares it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Variable {
    /// The symbol's name (a C++ name in a namespace is mangled).
    pub name: String,
    /// Its initial bytes: its size, all zeros when the image gives none.
    pub init: Vec<u8>,
    /// A `__managed__` variable: the driver places it in managed memory, whose address host code
    /// uses too.
    pub managed: bool,
}

/// The little-endian `u16` at `at` (fat binary and ELF headers alike).
pub fn u16_at(bytes: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(bytes.get(at..at.checked_add(2)?)?.try_into().ok()?))
}

/// The little-endian `u32` at `at`.
pub fn u32_at(bytes: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(bytes.get(at..at.checked_add(4)?)?.try_into().ok()?))
}

/// The little-endian `u64` at `at`.
pub fn u64_at(bytes: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(bytes.get(at..at.checked_add(8)?)?.try_into().ok()?))
}

/// A `u16` field as an index or count.
fn index_at(bytes: &[u8], at: usize) -> Option<usize> {
    u16_at(bytes, at).map(usize::from)
}

/// A `u64` field as an offset or size in this address space.
fn offset_at(bytes: &[u8], at: usize) -> Option<usize> {
    usize::try_from(u64_at(bytes, at)?).ok()
}

/// The NUL-terminated string at `at`.
fn str_at(bytes: &[u8], at: usize) -> Option<&str> {
    let rest = bytes.get(at..)?;
    std::str::from_utf8(&rest[..rest.iter().position(|&b| b == 0)?]).ok()
}

/// Where an ELF image's section and program header tables end, from its first 64 bytes.
pub fn table_end(header: &[u8]) -> Option<usize> {
    let (shoff, shentsize, shnum) = (offset_at(header, 0x28)?, index_at(header, 0x3A)?, index_at(header, 0x3C)?);
    let (phoff, phentsize, phnum) = (offset_at(header, 0x20)?, index_at(header, 0x36)?, index_at(header, 0x38)?);
    let sections = shoff.checked_add(shentsize.checked_mul(shnum)?)?;
    let programs = phoff.checked_add(phentsize.checked_mul(phnum)?)?;
    Some(sections.max(programs).max(64))
}

/// The bytes an ELF image spans (the driver is given no length): its header tables and every
/// section, read from `start`, which holds at least [`table_end`] bytes.
pub fn len(start: &[u8]) -> Option<usize> {
    let mut end = table_end(start)?;
    for section in Sections::of(start)?.all()? {
        if section.kind != SHT_NOBITS {
            end = end.max(section.offset.checked_add(section.size)?);
        }
    }
    Some(end)
}

/// The kernels of a cubin: the names of its `.text.<name>` sections.
pub fn kernels(image: &[u8]) -> Option<Vec<String>> {
    let sections = Sections::of(image)?;
    let mut names = Vec::new();
    for section in sections.all()? {
        if let Some(kernel) = sections.name(&section)?.strip_prefix(".text.") {
            names.push(kernel.to_string());
        }
    }
    Some(names)
}

/// The static shared memory of a cubin's kernels, bytes: the sizes of their `.nv.shared.<name>`
/// sections (a kernel without one has none).
pub fn static_shared(image: &[u8]) -> Option<Vec<(String, usize)>> {
    let sections = Sections::of(image)?;
    let mut sizes = Vec::new();
    for section in sections.all()? {
        if let Some(kernel) = sections.name(&section)?.strip_prefix(".nv.shared.") {
            sizes.push((kernel.to_string(), section.size));
        }
    }
    Some(sizes)
}

/// The variables of a cubin: its object symbols in `.nv.global*` and `.nv.constant<bank>`
/// sections (bank 0, each kernel's parameters, excepted), with their initial bytes.
pub fn variables(image: &[u8]) -> Option<Vec<Variable>> {
    let sections = Sections::of(image)?;
    let mut variables = Vec::new();
    for table in sections.all()?.into_iter().filter(|s| s.kind == SHT_SYMTAB) {
        let names = sections.get(table.link)?;
        for i in 0..table.size / SYMBOL_LEN {
            let at = table.offset.checked_add(i * SYMBOL_LEN)?;
            let symbol = image.get(at..at.checked_add(SYMBOL_LEN)?)?;
            let (info, other, index) = (symbol[4], symbol[5], index_at(symbol, 6)?);
            if info & 0xf != STT_OBJECT || index == 0 {
                continue;
            }
            let home = sections.get(index)?;
            let home_name = sections.name(&home)?;
            let holds_memory = home_name.starts_with(".nv.global")
                || (home_name.starts_with(".nv.constant") && !home_name.starts_with(".nv.constant0"));
            let (value, size) = (offset_at(symbol, 8)?, offset_at(symbol, 16)?);
            if !holds_memory || size == 0 {
                continue;
            }
            // A variable lies inside its section, and the stand-in's GPUs hold no larger one.
            if value.checked_add(size)? > home.size || size > MAX_VARIABLE {
                return None;
            }
            let init = if home.kind == SHT_NOBITS {
                vec![0; size]
            } else {
                let from = home.offset.checked_add(value)?;
                image.get(from..from.checked_add(size)?)?.to_vec()
            };
            let name = str_at(image, names.offset.checked_add(u32_at(symbol, 0)? as usize)?)?.to_string();
            variables.push(Variable { name, init, managed: other & STO_CUDA_MANAGED != 0 });
        }
    }
    Some(variables)
}

/// The device code a host object (`nvcc -c`, `-rdc=true` or not) carries: the bytes of its
/// `.nv_fatbin` or `__nv_relfatbin` section, empty if it has neither; `None` if its section
/// headers or those sections lie outside it.
pub fn embedded_device_code(object: &[u8]) -> Option<&[u8]> {
    let sections = Sections::of(object)?;
    for section in sections.all()? {
        if matches!(sections.name(&section)?, ".nv_fatbin" | "__nv_relfatbin") {
            return object.get(section.offset..section.offset.checked_add(section.size)?);
        }
    }
    Some(&[])
}

/// One section header's fields that the stand-in uses.
struct Section {
    name: usize,
    kind: u32,
    offset: usize,
    size: usize,
    link: usize,
}

/// An image's section header table.
struct Sections<'a> {
    image: &'a [u8],
    at: usize,
    entry: usize,
    count: usize,
    names: usize,
}

impl<'a> Sections<'a> {
    fn of(image: &'a [u8]) -> Option<Self> {
        let (at, entry, count) = (offset_at(image, 0x28)?, index_at(image, 0x3A)?, index_at(image, 0x3C)?);
        let mut sections = Sections { image, at, entry, count, names: 0 };
        sections.names = sections.get(index_at(image, 0x3E)?)?.offset;
        Some(sections)
    }

    fn get(&self, index: usize) -> Option<Section> {
        if index >= self.count {
            return None;
        }
        let at = self.at.checked_add(index.checked_mul(self.entry)?)?;
        let header = self.image.get(at..at.checked_add(SECTION_HEADER_LEN)?)?;
        Some(Section {
            name: u32_at(header, 0)? as usize,
            kind: u32_at(header, 4)?,
            offset: offset_at(header, 0x18)?,
            size: offset_at(header, 0x20)?,
            link: u32_at(header, 0x28)? as usize,
        })
    }

    /// Every section; `None` if a header lies outside the image.
    fn all(&self) -> Option<Vec<Section>> {
        (0..self.count).map(|i| self.get(i)).collect()
    }

    fn name(&self, section: &Section) -> Option<&'a str> {
        str_at(self.image, self.names.checked_add(section.name)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CUBIN: &[u8] = include_bytes!("../../tests/fixtures/variables.sm_90.cubin");

    #[test]
    fn a_cubins_variables_come_with_their_initial_bytes() {
        let mut found = variables(CUBIN).unwrap();
        found.sort_by(|a, b| a.name.cmp(&b.name));
        let offsets = [1i32, 2, 3, 4].iter().flat_map(|v| v.to_le_bytes()).collect();
        let want = vec![
            Variable { name: "coefficients".into(), init: vec![0; 16], managed: false },
            Variable { name: "counted".into(), init: vec![0; 4], managed: false },
            Variable { name: "offsets".into(), init: offsets, managed: false },
        ];
        assert_eq!(found, want);
        assert_eq!(kernels(CUBIN).unwrap(), vec!["_Z10polynomialPfi"]);
        assert_eq!(len(CUBIN), Some(CUBIN.len()));
    }

    #[test]
    fn managed_variables_are_told_from_the_others() {
        let cubin = include_bytes!("../../tests/fixtures/managed_variables.sm_90.cubin");
        let mut found = variables(cubin).unwrap();
        found.sort_by(|a, b| a.name.cmp(&b.name));
        let gain = 2.5f32.to_le_bytes().to_vec();
        let want = vec![
            Variable { name: "gain".into(), init: gain, managed: true },
            Variable { name: "histogram".into(), init: vec![0; 4096], managed: true },
            Variable { name: "totals".into(), init: vec![0; 16], managed: true },
        ];
        assert_eq!(found, want);
    }

    #[test]
    fn a_cut_or_corrupt_image_is_read_without_a_panic() {
        for cut in 0..CUBIN.len() {
            let part = &CUBIN[..cut];
            let _ = (variables(part), kernels(part), len(part), table_end(part));
        }
        assert!(variables(&CUBIN[..CUBIN.len() / 2]).is_none(), "the section headers are cut");
        let mut bytes = CUBIN.to_vec();
        for i in 0..bytes.len() {
            for flip in [0x01, 0x80, 0xff] {
                bytes[i] ^= flip;
                let _ = (variables(&bytes), kernels(&bytes));
                bytes[i] ^= flip;
            }
        }
    }
}
