//! Device code as a GPU's driver reads it, checked before it does. The driver trusts the headers
//! inside a cubin, a fat binary, a host object or a library for lengths and offsets, so a cut
//! or hostile one could make it read past the bytes it was given; and an input must be the kind
//! it is declared as, or the driver's refusal names nothing useful. The CUDA shim checks an
//! input where the driver would (`cuLinkAddData`); the backend checks again, trusting no client.
//!
//! - a cubin or a host object: a 64-bit little-endian ELF image whose header tables and
//!   sections lie inside it;
//! - a fat binary: magic `0xBA55ED50` and a 16-byte header whose last field, the size of what
//!   follows, lies inside it;
//! - a library: an `ar` archive whose members lie inside it, each ELF member checked as an
//!   object is (the symbol table and long-name members are not ELF);
//! - PTX: text, up to its first NUL (where the driver stops reading), with a `.version`
//!   directive;
//! - NVVM IR for link-time optimization is not checked: its forms vary (bitcode, wrapped or
//!   not, or held in a fat binary) and the driver reads no more than its given length.

use super::LinkInputKind;

/// The first bytes of an ELF image.
pub const ELF_MAGIC: &[u8; 4] = b"\x7fELF";
/// The first four bytes of a fat binary, little-endian.
pub const FATBIN_MAGIC: u32 = 0xBA55_ED50;
/// The first bytes of an `ar` archive (a thin archive, `!<thin>\n`, holds no members' bytes).
pub const ARCHIVE_MAGIC: &[u8; 8] = b"!<arch>\n";

/// `sh_type` of a section that occupies no bytes of the file.
const SHT_NOBITS: u32 = 8;
/// Bytes of an ELF64 header.
const ELF_HEADER: usize = 64;
/// Bytes of an archive member's header.
const MEMBER_HEADER: usize = 60;

/// Checks that `bytes` are what an input of `kind` must be, lying inside themselves; the error
/// says what is wrong, naming the kind.
pub fn check_input(kind: LinkInputKind, bytes: &[u8]) -> Result<(), String> {
    match kind {
        LinkInputKind::Ptx => check_ptx(bytes),
        LinkInputKind::Cubin | LinkInputKind::Fatbinary => check_image(bytes).map_err(|why| {
            if bytes.starts_with(ELF_MAGIC) || u32_at(bytes, 0) == Some(FATBIN_MAGIC) {
                why
            } else {
                format!("a {kind:?} input that is neither an ELF image nor a fat binary")
            }
        }),
        LinkInputKind::Object if !bytes.starts_with(ELF_MAGIC) => {
            Err("an Object input that is not an ELF host object".to_string())
        }
        LinkInputKind::Object => check_elf(bytes).ok_or_else(|| "truncated or malformed ELF object".to_string()),
        LinkInputKind::Library => check_archive(bytes),
        LinkInputKind::Nvvm => Ok(()),
    }
}

/// The PTX a driver reads of `bytes`: up to their first NUL.
pub fn ptx_until_nul(bytes: &[u8]) -> &[u8] {
    &bytes[..bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len())]
}

/// Checks that PTX `bytes` are PTX where the driver reads them.
fn check_ptx(bytes: &[u8]) -> Result<(), String> {
    match ptx_until_nul(bytes).windows(8).any(|w| w == b".version") {
        true => Ok(()),
        false => Err("a Ptx input with no `.version` directive before its first NUL".to_string()),
    }
}

/// Checks that a cubin (64-bit little-endian ELF) or fat binary lies inside `image`.
pub fn check_image(image: &[u8]) -> Result<(), String> {
    if image.starts_with(ELF_MAGIC) {
        return check_elf(image).ok_or_else(|| "truncated or malformed cubin (ELF) image".to_string());
    }
    if u32_at(image, 0) == Some(FATBIN_MAGIC) {
        let header = u16_at(image, 6).ok_or("truncated fatbin header")?;
        let body = u64_at(image, 8).ok_or("truncated fatbin header")?;
        return match header.checked_add(body) {
            Some(end) if header >= 16 && end <= image.len() as u64 => Ok(()),
            _ => Err(format!("fatbin declares {header}+{body} bytes, {} received", image.len())),
        };
    }
    Err("not a cubin or fatbin image (send PTX as `Ptx` and CUDA C as `CudaC`)".to_string())
}

/// `Some` if `image` is a 64-bit little-endian ELF image whose header tables and sections lie
/// inside it.
pub fn check_elf(image: &[u8]) -> Option<()> {
    // 64-bit, little-endian: what every cubin and every x86-64 or aarch64 host object is.
    if !image.starts_with(ELF_MAGIC) || image.get(4) != Some(&2) || image.get(5) != Some(&1) {
        return None;
    }
    if image.len() < ELF_HEADER {
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

/// Checks that an `ar` archive's members lie inside it, and its ELF members as objects.
pub fn check_archive(archive: &[u8]) -> Result<(), String> {
    if !archive.starts_with(ARCHIVE_MAGIC) {
        return Err("a Library input that is not an ar archive (`!<arch>`)".to_string());
    }
    let mut at = ARCHIVE_MAGIC.len();
    while at < archive.len() {
        let (name, data) = archive_member(archive, at)?;
        if data.starts_with(ELF_MAGIC) && check_elf(data).is_none() {
            return Err(format!("the library's member {name:?} is a truncated or malformed ELF object"));
        }
        // Members start on even offsets: an odd one is followed by a newline.
        at = at + MEMBER_HEADER + data.len() + data.len() % 2;
    }
    Ok(())
}

/// The name field and bytes of the archive member whose header starts at `at`.
fn archive_member(archive: &[u8], at: usize) -> Result<(String, &[u8]), String> {
    let header = archive.get(at..at + MEMBER_HEADER).ok_or(format!("an archive member's header cut at byte {at}"))?;
    let name = String::from_utf8_lossy(&header[..16]).trim_end().to_string();
    if &header[58..60] != b"`\n" {
        return Err(format!("the archive member at byte {at} has no header terminator"));
    }
    let size = std::str::from_utf8(&header[48..58]).ok().and_then(|s| s.trim_end().parse::<u64>().ok());
    let size = size.ok_or(format!("the archive member {name:?} has no decimal size"))?;
    let start = at + MEMBER_HEADER;
    match usize::try_from(size).ok().and_then(|size| archive.get(start..start.checked_add(size)?)) {
        Some(data) => Ok((name, data)),
        None => Err(format!("the archive member {name:?} declares {size} bytes, {} left", archive.len() - start)),
    }
}

/// Whether `count` entries of `size` bytes from `offset` fit in `len` bytes.
fn table_fits(offset: u64, count: u64, size: u64, len: usize) -> bool {
    count.checked_mul(size).and_then(|bytes| bytes.checked_add(offset)).is_some_and(|end| end <= len as u64)
}

fn u16_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u16::from_le_bytes(b.get(at..at.checked_add(2)?)?.try_into().ok()?) as u64)
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at.checked_add(4)?)?.try_into().ok()?))
}

fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(at..at.checked_add(8)?)?.try_into().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A minimal ELF64 with one section of `data_len` bytes at offset 64, claiming `claimed`.
    pub(crate) fn elf(data_len: u64, claimed: u64) -> Vec<u8> {
        let mut b = vec![0u8; 64];
        b[..4].copy_from_slice(ELF_MAGIC);
        b[4] = 2;
        b[5] = 1;
        b[0x28..0x30].copy_from_slice(&(64 + data_len).to_le_bytes());
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

    /// An archive of `members` (name, bytes), each header declaring its size plus `extra`.
    fn archive(members: &[(&str, &[u8])], extra: u64) -> Vec<u8> {
        let mut a = ARCHIVE_MAGIC.to_vec();
        for (name, data) in members {
            let size = data.len() as u64 + extra;
            a.extend(format!("{name:<16}{:<12}{:<6}{:<6}{:<8}{size:<10}`\n", 0, 0, 0, 644).as_bytes());
            a.extend(*data);
            if data.len() % 2 == 1 {
                a.push(b'\n');
            }
        }
        a
    }

    #[test]
    fn cubins_and_objects_must_lie_inside_their_bytes() {
        assert!(check_image(&elf(32, 32)).is_ok());
        assert!(check_image(&elf(32, 4096)).is_err(), "a section past the end");
        let whole = elf(32, 32);
        assert!(check_image(&whole[..whole.len() - 1]).is_err(), "a truncated section table");
        assert!(check_image(b"\x7fELF").is_err());
        assert!(check_input(LinkInputKind::Object, &whole).is_ok());
        let cut = check_input(LinkInputKind::Object, &elf(32, 4096)).unwrap_err();
        assert_eq!(cut, "truncated or malformed ELF object");
    }

    #[test]
    fn fatbins_must_hold_their_declared_size() {
        let mut f = vec![0u8; 16];
        f[..4].copy_from_slice(&FATBIN_MAGIC.to_le_bytes());
        f[6..8].copy_from_slice(&16u16.to_le_bytes());
        f[8..16].copy_from_slice(&8u64.to_le_bytes());
        assert_eq!(check_image(&f).unwrap_err(), "fatbin declares 16+8 bytes, 16 received");
        f.extend([0; 8]);
        assert!(check_image(&f).is_ok());
        assert!(check_input(LinkInputKind::Cubin, &f).is_ok(), "a device image either way, as the driver takes it");
        assert!(check_image(b"garbage!").is_err());
    }

    #[test]
    fn an_input_must_be_the_kind_it_is_declared_as() {
        let ptx = b".version 8.0\n.target sm_90\n";
        let cubin = elf(8, 8);
        let library = archive(&[("a.o/", &cubin)], 0);
        for (kind, bytes) in [(LinkInputKind::Object, &ptx[..]), (LinkInputKind::Library, &cubin)] {
            assert!(
                check_input(kind, bytes).unwrap_err().contains(&format!(" {kind:?} input that is not")),
                "{kind:?}"
            );
        }
        for kind in [LinkInputKind::Cubin, LinkInputKind::Fatbinary] {
            let why = check_input(kind, ptx).unwrap_err();
            assert_eq!(why, format!("a {kind:?} input that is neither an ELF image nor a fat binary"));
        }
        assert!(check_input(LinkInputKind::Ptx, &cubin).is_err(), "no .version");
        assert!(check_input(LinkInputKind::Ptx, &library).is_err());
        assert!(check_input(LinkInputKind::Library, &library).is_ok());
        assert!(check_input(LinkInputKind::Nvvm, b"BC\xC0\xDE").is_ok(), "not checked");
    }

    #[test]
    fn ptx_is_read_up_to_its_first_nul() {
        assert!(check_input(LinkInputKind::Ptx, b".version 8.0\0garbage").is_ok());
        assert!(check_input(LinkInputKind::Ptx, b"// a comment\0.version 8.0").is_err(), "after the NUL");
        assert_eq!(ptx_until_nul(b"ab\0cd"), b"ab");
        assert_eq!(ptx_until_nul(b"abcd"), b"abcd");
    }

    #[test]
    fn a_librarys_members_must_lie_inside_it() {
        let object = elf(8, 8);
        let symbols: &[u8] = b"\0\0\0\0odd";
        assert!(check_archive(&archive(&[("/", symbols), ("a.o/", &object), ("b.o/", &object)], 0)).is_ok());
        let over = check_archive(&archive(&[("a.o/", &object)], 1)).unwrap_err();
        assert_eq!(
            over,
            format!("the archive member \"a.o/\" declares {} bytes, {} left", object.len() + 1, object.len())
        );
        let bad = check_archive(&archive(&[("/", symbols), ("bad.o/", &elf(8, 4096))], 0)).unwrap_err();
        assert_eq!(bad, "the library's member \"bad.o/\" is a truncated or malformed ELF object");
        let whole = archive(&[("a.o/", &object)], 0);
        assert!(check_archive(&whole[..ARCHIVE_MAGIC.len() + 30]).unwrap_err().contains("header cut at byte 8"));
        let mut unterminated = whole.clone();
        unterminated[ARCHIVE_MAGIC.len() + 58] = b'x';
        assert!(check_archive(&unterminated).unwrap_err().contains("no header terminator"));
        let mut no_size = whole;
        no_size[ARCHIVE_MAGIC.len() + 48] = b'x';
        assert!(check_archive(&no_size).unwrap_err().contains("no decimal size"));
        assert!(check_archive(ARCHIVE_MAGIC).is_ok(), "an empty archive");
    }
}
