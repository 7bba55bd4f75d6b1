//! Module images as programs hand them to the driver: a bare pointer, whose own headers give
//! the length. The shim sends the image to the backend, so it must know where it ends.
//!
//! - a fat binary wrapper (`__fatBinC_Wrapper_t`, what nvcc embeds and the runtime registers):
//!   magic `0x466243b1`, a version, a pointer to the fat binary;
//! - a fat binary: magic `0xBA55ED50`, a 16-byte header whose last field is the size of what
//!   follows;
//! - an ELF cubin: its section and program header tables and sections;
//! - PTX: NUL-terminated text.

use crate::error::{code, CuResult, Error};

/// The magic of a fat binary wrapper.
pub const WRAPPER_MAGIC: u32 = 0x466243b1;
/// The magic of a fat binary.
pub const FATBIN_MAGIC: u32 = 0xBA55_ED50;
/// The most bytes one image may span (a framework's fat binaries are large, but not this).
const MAX_IMAGE: usize = 4 << 30;

/// What an image is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A fat binary or cubin (sent as a binary image).
    Binary,
    /// PTX text (sent NUL-terminated).
    Ptx,
}

/// The image at `ptr`, copied: unwraps a fat binary wrapper, and reads the length from the
/// image's headers.
///
/// # Safety
/// `ptr` points to an image as the driver API takes it (a wrapper, fat binary, cubin or PTX).
pub unsafe fn read(ptr: *const u8) -> CuResult<(Kind, Vec<u8>)> {
    if ptr.is_null() {
        return Err(Error::Code(code::INVALID_VALUE));
    }
    let magic = u32::from_le_bytes(*(ptr as *const [u8; 4]));
    if magic == WRAPPER_MAGIC {
        // struct { int magic; int version; const unsigned long long* data; void* filename_or_fatbins; }
        let data = *(ptr.add(8) as *const *const u8);
        return read(data);
    }
    if magic == FATBIN_MAGIC {
        let header_size = u16::from_le_bytes(*(ptr.add(6) as *const [u8; 2])) as usize;
        let fat_size = u64::from_le_bytes(*(ptr.add(8) as *const [u8; 8])) as usize;
        let len = header_size.checked_add(fat_size).filter(|&l| l <= MAX_IMAGE).ok_or(bad_image("a fat binary"))?;
        return Ok((Kind::Binary, std::slice::from_raw_parts(ptr, len).to_vec()));
    }
    if magic == u32::from_le_bytes(*b"\x7fELF") {
        let len = elf_len(ptr)?;
        return Ok((Kind::Binary, std::slice::from_raw_parts(ptr, len).to_vec()));
    }
    let text = std::ffi::CStr::from_ptr(ptr as *const std::ffi::c_char);
    let bytes = text.to_bytes_with_nul().to_vec();
    if !bytes.windows(8).any(|w| w == b".version") {
        return Err(bad_image("an image that is neither a fat binary, a cubin nor PTX"));
    }
    Ok((Kind::Ptx, bytes))
}

fn bad_image(what: &str) -> Error {
    Error::said(code::INVALID_IMAGE, format!("cannot read {what}: its headers are inconsistent"))
}

/// The bytes a 64-bit ELF image spans: its header tables and every section with contents.
unsafe fn elf_len(ptr: *const u8) -> CuResult<usize> {
    let u16_at = |at: usize| u16::from_le_bytes(*(ptr.add(at) as *const [u8; 2])) as usize;
    let u32_at = |at: usize| u32::from_le_bytes(*(ptr.add(at) as *const [u8; 4]));
    let u64_at = |at: usize| u64::from_le_bytes(*(ptr.add(at) as *const [u8; 8])) as usize;
    if *ptr.add(4) != 2 {
        return Err(bad_image("a cubin that is not 64-bit ELF"));
    }
    let (phoff, shoff) = (u64_at(0x20), u64_at(0x28));
    let (phentsize, phnum, shentsize, shnum) = (u16_at(0x36), u16_at(0x38), u16_at(0x3A), u16_at(0x3C));
    let tables = [(phoff, phentsize, phnum), (shoff, shentsize, shnum)];
    let mut end = 64usize;
    for (offset, size, count) in tables {
        end = end.max(offset.checked_add(size * count).filter(|&e| e <= MAX_IMAGE).ok_or(bad_image("a cubin"))?);
    }
    for i in 0..shnum {
        let at = shoff + i * shentsize;
        const SHT_NOBITS: u32 = 8;
        if u32_at(at + 4) != SHT_NOBITS {
            let section_end = u64_at(at + 0x18).checked_add(u64_at(at + 0x20));
            end = end.max(section_end.filter(|&e| e <= MAX_IMAGE).ok_or(bad_image("a cubin"))?);
        }
    }
    Ok(end)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fat_binary_spans_its_header_and_declared_size() {
        let mut image = [0u8; 64];
        image[..4].copy_from_slice(&FATBIN_MAGIC.to_le_bytes());
        image[6..8].copy_from_slice(&16u16.to_le_bytes());
        image[8..16].copy_from_slice(&32u64.to_le_bytes());
        let (kind, bytes) = unsafe { read(image.as_ptr()) }.unwrap();
        assert_eq!((kind, bytes.len()), (Kind::Binary, 48));
    }

    #[test]
    fn a_wrapper_is_unwrapped() {
        let mut fatbin = [0u8; 32];
        fatbin[..4].copy_from_slice(&FATBIN_MAGIC.to_le_bytes());
        fatbin[6..8].copy_from_slice(&16u16.to_le_bytes());
        fatbin[8..16].copy_from_slice(&8u64.to_le_bytes());
        #[repr(C)]
        struct Wrapper(u32, u32, *const u8, *const u8);
        let wrapper = Wrapper(WRAPPER_MAGIC, 1, fatbin.as_ptr(), std::ptr::null());
        let (kind, bytes) = unsafe { read(&wrapper as *const Wrapper as *const u8) }.unwrap();
        assert_eq!((kind, bytes), (Kind::Binary, fatbin[..24].to_vec()));
    }

    #[test]
    fn ptx_keeps_its_nul_and_other_text_is_refused() {
        let ptx = b".version 8.0\n.target sm_90\0";
        let (kind, bytes) = unsafe { read(ptx.as_ptr()) }.unwrap();
        assert_eq!((kind, bytes.as_slice()), (Kind::Ptx, &ptx[..]));
        assert_eq!(unsafe { read(c"hello".as_ptr() as *const u8) }.unwrap_err().code(), code::INVALID_IMAGE);
    }
}
