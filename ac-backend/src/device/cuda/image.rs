//! Checks on module images before the driver sees them. `cuModuleLoadData` takes a bare
//! pointer and trusts the image's own headers for its length, so a truncated or hostile image
//! could make the driver read past the received bytes. Text must end in NUL; a cubin's ELF
//! headers and sections, and a fatbin's declared size, must lie inside the payload.

use ac_proto::backend::{ErrorKind, WireError};

use crate::device::DeviceResult;

const ELF_MAGIC: &[u8; 4] = b"\x7fELF";
const FATBIN_MAGIC: u32 = 0xBA55_ED50;
const SHT_NOBITS: u32 = 8;

fn bad(message: impl Into<String>) -> WireError {
    WireError::new(ErrorKind::ModuleLoad, message)
}

/// PTX text as the driver takes it: NUL-terminated, with no NUL inside.
pub fn ptx_text(payload: &[u8]) -> DeviceResult<Vec<u8>> {
    let text = payload.strip_suffix(b"\0").unwrap_or(payload);
    if text.contains(&0) {
        return Err(bad("PTX text contains a NUL byte"));
    }
    if !text.windows(8).any(|w| w == b".version") {
        return Err(bad("not PTX: no `.version` directive (send cubin or fatbin images as `Cubin`)"));
    }
    let mut owned = text.to_vec();
    owned.push(0);
    Ok(owned)
}

fn u16_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u16::from_le_bytes(b.get(at..at + 2)?.try_into().ok()?) as u64)
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

/// Whether `count` entries of `size` bytes from `offset` fit in `len` bytes.
fn table_fits(offset: u64, count: u64, size: u64, len: usize) -> bool {
    count.checked_mul(size).and_then(|bytes| bytes.checked_add(offset)).is_some_and(|end| end <= len as u64)
}

/// Checks that a cubin (64-bit little-endian ELF) or fatbin image lies inside its payload.
pub fn check_binary(image: &[u8]) -> DeviceResult<()> {
    if image.starts_with(ELF_MAGIC) {
        return check_elf(image).ok_or_else(|| bad("truncated or malformed cubin (ELF) image"));
    }
    if u32_at(image, 0) == Some(FATBIN_MAGIC) {
        let header = u16_at(image, 6).ok_or_else(|| bad("truncated fatbin header"))?;
        let body = u64_at(image, 8).ok_or_else(|| bad("truncated fatbin header"))?;
        return match header.checked_add(body) {
            Some(end) if header >= 16 && end <= image.len() as u64 => Ok(()),
            _ => Err(bad(format!("fatbin declares {header}+{body} bytes, {} received", image.len()))),
        };
    }
    Err(bad("not a cubin or fatbin image (send PTX as `Ptx` and CUDA C as `CudaC`)"))
}

fn check_elf(image: &[u8]) -> Option<()> {
    // 64-bit, little-endian: what every CUDA cubin is.
    if image.get(4) != Some(&2) || image.get(5) != Some(&1) || image.len() < 64 {
        return None;
    }
    let (phoff, phentsize, phnum) = (u64_at(image, 0x20)?, u16_at(image, 0x36)?, u16_at(image, 0x38)?);
    let (shoff, shentsize, shnum) = (u64_at(image, 0x28)?, u16_at(image, 0x3A)?, u16_at(image, 0x3C)?);
    if !table_fits(phoff, phnum, phentsize, image.len()) || !table_fits(shoff, shnum, shentsize, image.len()) {
        return None;
    }
    if shnum > 0 && shentsize < 64 {
        return None;
    }
    for i in 0..shnum {
        let at = (shoff + i * shentsize) as usize;
        let (kind, offset, size) = (u32_at(image, at + 4)?, u64_at(image, at + 0x18)?, u64_at(image, at + 0x20)?);
        if kind != SHT_NOBITS && !table_fits(offset, 1, size, image.len()) {
            return None;
        }
    }
    Some(())
}

/// `image` copied into 8-byte-aligned memory (zero-padded to whole words).
pub fn aligned_copy(image: &[u8]) -> Vec<u64> {
    let mut aligned = vec![0u64; image.len().div_ceil(8)];
    for (word, bytes) in aligned.iter_mut().zip(image.chunks(8)) {
        let mut padded = [0u8; 8];
        padded[..bytes.len()].copy_from_slice(bytes);
        *word = u64::from_ne_bytes(padded);
    }
    aligned
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A minimal ELF64 with one section of `data_len` bytes at offset 64.
    fn elf(data_len: u64, claimed: u64) -> Vec<u8> {
        let mut b = vec![0u8; 64];
        b[..4].copy_from_slice(ELF_MAGIC);
        b[4] = 2;
        b[5] = 1;
        let shoff = 64 + data_len;
        b[0x28..0x30].copy_from_slice(&shoff.to_le_bytes());
        b[0x3A..0x3C].copy_from_slice(&64u16.to_le_bytes());
        b[0x3C..0x3E].copy_from_slice(&1u16.to_le_bytes());
        b.extend(std::iter::repeat_n(0xAB, data_len as usize));
        let mut section = vec![0u8; 64];
        section[4..8].copy_from_slice(&1u32.to_le_bytes());
        section[0x18..0x20].copy_from_slice(&64u64.to_le_bytes());
        section[0x20..0x28].copy_from_slice(&claimed.to_le_bytes());
        b.extend(section);
        b
    }

    #[test]
    fn cubins_must_lie_inside_the_payload() {
        assert!(check_binary(&elf(32, 32)).is_ok());
        assert!(check_binary(&elf(32, 4096)).is_err(), "a section past the end");
        let whole = elf(32, 32);
        assert!(check_binary(&whole[..whole.len() - 1]).is_err(), "a truncated section table");
        assert!(check_binary(b"\x7fELF").is_err());
    }

    #[test]
    fn fatbins_must_hold_their_declared_size() {
        let mut f = vec![0u8; 16];
        f[..4].copy_from_slice(&FATBIN_MAGIC.to_le_bytes());
        f[6..8].copy_from_slice(&16u16.to_le_bytes());
        f[8..16].copy_from_slice(&8u64.to_le_bytes());
        assert!(check_binary(&f).is_err());
        f.extend([0; 8]);
        assert!(check_binary(&f).is_ok());
        assert!(check_binary(b"garbage!").is_err());
    }

    #[test]
    fn ptx_is_terminated_once_and_checked() {
        let ptx = ptx_text(b".version 8.0\n.target sm_90\n").unwrap();
        assert_eq!(ptx.last(), Some(&0));
        assert_eq!(ptx.iter().filter(|&&c| c == 0).count(), 1);
        assert_eq!(ptx_text(b".version 8.0\0").unwrap().iter().filter(|&&c| c == 0).count(), 1);
        assert!(ptx_text(b".version 8.0\0junk").is_err());
        assert!(ptx_text(b"int main() {}").is_err());
    }

    #[test]
    fn images_reach_the_driver_aligned_and_whole() {
        let frame: Vec<u8> = (0..=255u8).cycle().take(1001).collect();
        let image = &frame[3..1000]; // as cut out of a frame: at an odd address, odd length
        let aligned = aligned_copy(image);
        assert_eq!(aligned.as_ptr() as usize % 8, 0);
        let bytes: Vec<u8> = aligned.iter().flat_map(|w| w.to_ne_bytes()).collect();
        assert_eq!(&bytes[..image.len()], image);
        assert!(bytes[image.len()..].iter().all(|&b| b == 0));
    }
}
