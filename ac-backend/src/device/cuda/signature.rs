//! Kernel parameter sizes read from the module image itself, for drivers that cannot report
//! them (`cuFuncGetParamInfo` arrived with CUDA 12.4). `cuLaunchKernel` reads one
//! `kernelParams` entry per parameter the kernel has, whatever the caller passed, so a launch
//! whose parameter list is not known is never made (see `args::pack`).
//!
//! - PTX: the `.entry name(.param .u64 a, .param .align 8 .b8 s[16], ...)` declarations.
//! - cubin: the `.nv.info.<kernel>` section's `EIATTR_KPARAM_INFO` attributes (ordinal and
//!   size of each parameter), the same records `cuobjdump -elf` prints.
//! - fatbin: not parsed (its members may be compressed): no sizes.

use std::collections::HashMap;

/// Parameter sizes in bytes, in order, by kernel name.
pub type Signatures = HashMap<String, Vec<usize>>;

/// The kernels' parameter sizes declared in PTX text.
pub fn from_ptx(text: &[u8]) -> Signatures {
    let text = String::from_utf8_lossy(text);
    let code = super::nvrtc::strip_comments(&text);
    let mut found = Signatures::new();
    let mut rest = code.as_str();
    while let Some(at) = rest.find(".entry") {
        rest = &rest[at + ".entry".len()..];
        let Some(name) = rest.split(|c: char| c.is_whitespace() || c == '(' || c == '{').find(|s| !s.is_empty()) else {
            break;
        };
        let after_name = &rest[rest.find(name).map_or(0, |i| i + name.len())..];
        let trimmed = after_name.trim_start();
        let sizes = if let Some(list) = trimmed.strip_prefix('(') {
            let Some(end) = list.find(')') else { break };
            // The scan goes on after the list whatever it holds: a `.entry` inside it declares
            // no kernel, and scanning the rest of the list again from each one took quadratic
            // time (a 90 kB payload held a backend thread for minutes).
            rest = &list[end + 1..];
            match list[..end].split(',').filter(|p| !p.trim().is_empty()).map(ptx_param_size).collect() {
                Some(sizes) => sizes,
                None => continue,
            }
        } else {
            Vec::new()
        };
        found.insert(name.to_string(), sizes);
    }
    found
}

/// The size of one `.param` declaration: a scalar type, or `.b8 name[N]` (an aggregate).
fn ptx_param_size(declaration: &str) -> Option<usize> {
    let tokens: Vec<&str> = declaration.split_whitespace().collect();
    if tokens.first() != Some(&".param") {
        return None;
    }
    let last = *tokens.last()?;
    if let (Some(open), true) = (last.find('['), last.ends_with(']')) {
        let elements: usize = last[open + 1..last.len() - 1].parse().ok()?;
        let element = tokens.iter().find_map(|t| scalar_width(t))?;
        return elements.checked_mul(element);
    }
    tokens.iter().find_map(|t| scalar_width(t))
}

fn scalar_width(token: &str) -> Option<usize> {
    let width = match token {
        ".u8" | ".s8" | ".b8" => 1,
        ".u16" | ".s16" | ".b16" | ".f16" => 2,
        ".u32" | ".s32" | ".b32" | ".f32" => 4,
        ".u64" | ".s64" | ".b64" | ".f64" => 8,
        _ => return None,
    };
    Some(width)
}

const EIFMT_SVAL: u8 = 0x04;
const EIATTR_KPARAM_INFO: u8 = 0x17;

/// The kernels' parameter sizes recorded in a cubin (64-bit little-endian ELF, already checked
/// by `image::check_binary` to lie inside its buffer). Kernels whose records are incomplete
/// are left out.
pub fn from_cubin(image: &[u8]) -> Signatures {
    let mut found = Signatures::new();
    let Some(sections) = sections(image) else {
        return found;
    };
    for (name, data) in sections {
        let Some(kernel) = name.strip_prefix(".nv.info.") else { continue };
        if let Some(sizes) = kparam_sizes(data) {
            found.insert(kernel.to_string(), sizes);
        }
    }
    found
}

/// `(name, contents)` of every section.
fn sections(image: &[u8]) -> Option<Vec<(String, &[u8])>> {
    // Offsets come from the image: every sum is checked (a header near the end of the address
    // space overflowed, found by the `module_image` fuzz target).
    let bytes = |at: usize, n: usize| image.get(at..at.checked_add(n)?);
    let u16_at = |at: usize| Some(u16::from_le_bytes(bytes(at, 2)?.try_into().ok()?) as usize);
    let u32_at = |at: usize| Some(u32::from_le_bytes(bytes(at, 4)?.try_into().ok()?) as usize);
    let u64_at = |at: usize| Some(u64::from_le_bytes(bytes(at, 8)?.try_into().ok()?) as usize);
    let (shoff, shentsize, shnum, shstrndx) = (u64_at(0x28)?, u16_at(0x3A)?, u16_at(0x3C)?, u16_at(0x3E)?);
    let header = |i: usize| shoff.checked_add(i.checked_mul(shentsize)?);
    let contents = |at: usize| -> Option<&[u8]> {
        let (offset, size) = (u64_at(at.checked_add(0x18)?)?, u64_at(at.checked_add(0x20)?)?);
        image.get(offset..offset.checked_add(size)?)
    };
    let names = contents(header(shstrndx)?)?;
    let mut out = Vec::new();
    for i in 0..shnum {
        let at = header(i)?;
        let name_at = u32_at(at)?;
        let name = names.get(name_at..)?;
        let name = &name[..name.iter().position(|&b| b == 0)?];
        if u32_at(at.checked_add(4)?)? == 8 {
            continue; // SHT_NOBITS: no contents in the file
        }
        out.push((String::from_utf8_lossy(name).into_owned(), contents(at)?));
    }
    Some(out)
}

/// Parameter sizes from one kernel's `.nv.info.<kernel>` attributes: each is a 4-byte header
/// (format, attribute, a 16-bit value or payload size) and, for `EIFMT_SVAL`, the payload.
/// `EIATTR_KPARAM_INFO`'s payload: index (u32), ordinal (u16), offset (u16), and a u32 whose
/// top 14 bits are the size in bytes. Every ordinal from 0 must appear exactly once.
fn kparam_sizes(mut data: &[u8]) -> Option<Vec<usize>> {
    let mut by_ordinal: Vec<Option<usize>> = Vec::new();
    while data.len() >= 4 {
        let (format, attribute, value) = (data[0], data[1], u16::from_le_bytes([data[2], data[3]]) as usize);
        data = &data[4..];
        if format != EIFMT_SVAL {
            continue;
        }
        let payload = data.get(..value)?;
        data = &data[value..];
        if attribute != EIATTR_KPARAM_INFO || payload.len() < 12 {
            continue;
        }
        let ordinal = u16::from_le_bytes([payload[4], payload[5]]) as usize;
        let size = (u32::from_le_bytes(payload[8..12].try_into().ok()?) >> 18) as usize;
        if by_ordinal.len() <= ordinal {
            by_ordinal.resize(ordinal + 1, None);
        }
        if by_ordinal[ordinal].replace(size).is_some() {
            return None;
        }
    }
    by_ordinal.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ptx_entries_give_their_parameter_sizes() {
        let ptx = b"// .entry commented(.param .u64 x)\n.version 7.0\n.visible .entry add_one(\n\
            .param .u64 .ptr .global .align 4 add_one_param_0, // the buffer\n\
            .param .u32 add_one_param_1,\n .param .align 8 .b8 add_one_param_2[24]\n)\n{ ret; }\n\
            .entry none\n{ ret; }\n.visible .entry empty()\n{ ret; }\n";
        let found = from_ptx(ptx);
        assert_eq!(found["add_one"], vec![8, 4, 24]);
        assert_eq!(found["none"], Vec::<usize>::new());
        assert_eq!(found["empty"], Vec::<usize>::new());
        assert!(!found.contains_key("commented"));
        let fixture = include_bytes!("../../../../tests/fixtures/add_one.ptx");
        assert_eq!(from_ptx(fixture)["add_one"], vec![8, 4]);
    }

    #[test]
    fn an_entry_inside_a_parameter_list_is_no_kernel_and_the_scan_is_linear() {
        // Found by the `module_image` fuzz target: after a list that did not parse, the scan
        // resumed inside it, so each `.entry` in it rescanned the rest of the list.
        let ptx = b".version 7.0\n.entry a(.entry b(.param .u32 x)\n.entry c(.param .u64 y)\n";
        let found = from_ptx(ptx);
        assert!(!found.contains_key("b"), "declared inside `a`'s list: {found:?}");
        assert_eq!(found["c"], vec![8]);
        let mut hostile = b".version 7.0\n".to_vec();
        hostile.extend(b".entry a(".repeat(50_000));
        hostile.push(b')');
        assert!(from_ptx(&hostile).is_empty());
    }

    #[test]
    fn cubin_records_give_their_parameter_sizes() {
        // Assembled by ptxas 12.9 from tests/fixtures/add_one.ptx: (float* x, unsigned n).
        let cubin = include_bytes!("../../../../tests/fixtures/add_one.sm_90.cubin");
        assert_eq!(from_cubin(cubin)["add_one"], vec![8, 4]);
        assert!(from_cubin(b"\x7fELF").is_empty(), "a truncated image gives nothing");
    }

    #[test]
    fn section_headers_at_the_end_of_the_address_space_give_nothing() {
        // Found by the `module_image` fuzz target: a section header table at offset 2^64 - 8
        // made `at + 8` overflow (a panic with overflow checks, a wrapped read without).
        let mut image = vec![0u8; 64];
        image[..4].copy_from_slice(b"\x7fELF");
        image[0x28..0x30].copy_from_slice(&(u64::MAX - 7).to_le_bytes());
        image[0x3A..0x3C].copy_from_slice(&64u16.to_le_bytes());
        image[0x3C..0x3E].copy_from_slice(&1u16.to_le_bytes());
        assert!(from_cubin(&image).is_empty());
    }

    #[test]
    fn incomplete_cubin_records_give_no_signature() {
        let record = |ordinal: u16, size: u32| {
            let mut r = vec![EIFMT_SVAL, EIATTR_KPARAM_INFO, 12, 0, 0, 0, 0, 0];
            r.extend(ordinal.to_le_bytes());
            r.extend(0u16.to_le_bytes());
            r.extend((size << 18 | 0xf000).to_le_bytes());
            r
        };
        let mut both = record(1, 4);
        both.extend(record(0, 8));
        both.extend([0x03, 0x19, 12, 0]); // an inline value (EIFMT_HVAL) is skipped
        assert_eq!(kparam_sizes(&both), Some(vec![8, 4]));
        assert_eq!(kparam_sizes(&record(1, 4)), None, "ordinal 0 is missing");
        let mut twice = record(0, 4);
        twice.extend(record(0, 4));
        assert_eq!(kparam_sizes(&twice), None);
        assert_eq!(kparam_sizes(&both[..20]), None, "a cut payload");
    }
}
