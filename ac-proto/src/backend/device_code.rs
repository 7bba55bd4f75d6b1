//! Device code as a GPU's driver reads it, checked before it does. The driver trusts the headers
//! inside a cubin, a fat binary, a host object or a library for lengths and offsets, so a cut
//! or hostile one could make it read past the bytes it was given; and an input must be the kind
//! it is declared as, or the driver's refusal names nothing useful. The CUDA shim checks an
//! input where the driver would (`cuLinkAddData`); the backend checks again, trusting no client.
//!
//! - a cubin or a host object: a 64-bit little-endian ELF image whose header tables, program
//!   segments and sections lie inside it, and the fat binaries a host object embeds
//!   (`.nv_fatbin`, `__nv_relfatbin`) inside their section;
//! - a fat binary: magic `0xBA55ED50` and a 16-byte header whose last field, the size of what
//!   follows, lies inside it, as each entry's header and payload lie inside that;
//! - a library: an `ar` archive whose members lie inside it, each ELF member checked as an
//!   object is; its symbol index (`/`, `/SYM64/`: a linker looks members up by it) pointing
//!   only at members' headers, with a name for each symbol, and each long member name (`/N`,
//!   `#1/N`) inside the table or member that holds it;
//! - PTX: text, up to its first NUL (where the driver stops reading), with a `.version`
//!   directive;
//! - NVVM IR for link-time optimization held in an ELF image or a fat binary is checked as
//!   those are; bare IR (bitcode, wrapped or not) is not: the driver is given its length.

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
/// Bytes of a fat binary entry's header that hold its kind and sizes.
const FATBIN_ENTRY_FIELDS: u64 = 16;
/// Bytes of an ELF64 program header.
const PROGRAM_HEADER: u64 = 56;

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
        LinkInputKind::Object => check_object(bytes, "ELF object"),
        LinkInputKind::Library => check_archive(bytes),
        // LTO-IR held in an image is checked as that image is; bare IR is read to its length.
        LinkInputKind::Nvvm if bytes.starts_with(ELF_MAGIC) || u32_at(bytes, 0) == Some(FATBIN_MAGIC) => {
            check_image(bytes)
        }
        LinkInputKind::Nvvm => Ok(()),
    }
}

/// Checks that a host object lies inside its bytes, and the fat binaries it embeds (its
/// `.nv_fatbin` or `__nv_relfatbin` section, one or more back to back) inside their sections.
fn check_object(object: &[u8], what: &str) -> Result<(), String> {
    check_elf(object).ok_or_else(|| format!("truncated or malformed {what}"))?;
    for section in sections_named(object, &[".nv_fatbin", "__nv_relfatbin"]) {
        let mut at = 0;
        while u32_at(section, at) == Some(FATBIN_MAGIC) {
            let len = check_fatbin(&section[at..]).map_err(|why| format!("{what}'s device code: {why}"))?;
            at += len.next_multiple_of(8);
        }
    }
    Ok(())
}

/// The bytes of the sections of ELF `image` (which [`check_elf`] passed) named one of `names`.
fn sections_named<'a>(image: &'a [u8], names: &[&str]) -> Vec<&'a [u8]> {
    let field = |at: usize, read: fn(&[u8], usize) -> Option<u64>| read(image, at).unwrap_or(0) as usize;
    let (shoff, shentsize, shnum) = (field(0x28, u64_at), field(0x3A, u16_at), field(0x3C, u16_at));
    // A section's name offset and file bytes (none for one that occupies none).
    let section = |i: usize| {
        let at = shoff + i * shentsize;
        let (offset, size) = (field(at + 0x18, u64_at), field(at + 0x20, u64_at));
        let bytes = image.get(offset..offset.checked_add(size)?).filter(|_| u32_at(image, at + 4) != Some(SHT_NOBITS));
        Some((u32_at(image, at)? as usize, bytes?))
    };
    let Some((_, strings)) = section(field(0x3E, u16_at)).filter(|_| shnum > 0) else { return Vec::new() };
    let name = |at: usize| strings.get(at..).map(|s| &s[..s.iter().position(|&b| b == 0).unwrap_or(s.len())]);
    let named = |at: usize| name(at).is_some_and(|n| names.iter().any(|w| w.as_bytes() == n));
    (0..shnum).filter_map(section).filter(|(at, _)| named(*at)).map(|(_, bytes)| bytes).collect()
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
        return check_fatbin(image).map(|_| ());
    }
    Err("not a cubin or fatbin image (send PTX as `Ptx` and CUDA C as `CudaC`)".to_string())
}

/// Checks that the fat binary at the start of `bytes` lies inside them, its entries inside it
/// (each entry's header and payload, as its header gives their sizes); its length.
fn check_fatbin(bytes: &[u8]) -> Result<usize, String> {
    let header = u16_at(bytes, 6).ok_or("truncated fatbin header")?;
    let body = u64_at(bytes, 8).ok_or("truncated fatbin header")?;
    let end = match header.checked_add(body) {
        Some(end) if header >= 16 && end <= bytes.len() as u64 => end as usize,
        _ => return Err(format!("fatbin declares {header}+{body} bytes, {} received", bytes.len())),
    };
    let mut at = header as usize;
    while at < end {
        let (entry_header, payload) = (u32_at(bytes, at + 4).map(u64::from), u64_at(bytes, at + 8));
        let entry_end = entry_header
            .zip(payload)
            .filter(|(h, _)| *h >= FATBIN_ENTRY_FIELDS)
            .and_then(|(h, p)| (at as u64).checked_add(h)?.checked_add(p))
            .filter(|&e| e <= end as u64);
        at = entry_end.ok_or(format!("the fatbin's entry at byte {at} runs past its {end} bytes"))? as usize;
    }
    Ok(end)
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
    // Section numbering past 0xff00 (a count of 0 with a table) and a name table outside the
    // table are refused: no cubin or host object with device code has them.
    let shstrndx = u16_at(image, 0x3E)?;
    if (shnum == 0 && shoff != 0) || (shnum > 0 && (shentsize < 64 || shstrndx >= shnum)) {
        return None;
    }
    if phnum > 0 && phentsize < PROGRAM_HEADER {
        return None;
    }
    for i in 0..phnum {
        let at = (phoff + i * phentsize) as usize;
        if !table_fits(u64_at(image, at + 8)?, 1, u64_at(image, at + 0x20)?, image.len()) {
            return None;
        }
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
    let (mut headers, mut index, mut long_names, mut named) = (Vec::new(), None, None, Vec::new());
    let mut at = ARCHIVE_MAGIC.len();
    while at < archive.len() {
        let (name, data) = archive_member(archive, at)?;
        headers.push(at);
        match name.as_str() {
            "/" => index = Some((data, 4)),
            "/SYM64/" => index = Some((data, 8)),
            "//" => long_names = Some(data),
            _ => named.push((name.clone(), data.len())),
        }
        if data.starts_with(ELF_MAGIC) {
            check_object(data, &format!("library member {name:?}"))?;
        }
        // Members start on even offsets: an odd one is followed by a newline.
        at = at + MEMBER_HEADER + data.len() + data.len() % 2;
    }
    if let Some((table, width)) = index {
        check_symbol_index(table, width, &headers)?;
    }
    named.iter().try_for_each(|(name, len)| check_long_name(name, *len, long_names))
}

/// An archive's symbol index: a big-endian count of `width` bytes, that many offsets of the
/// same width, each the start of a member's header (`headers`, in order), then a NUL-terminated
/// name for each.
fn check_symbol_index(table: &[u8], width: usize, headers: &[usize]) -> Result<(), String> {
    let word = |at: usize| table.get(at..at + width).map(|b| b.iter().fold(0u64, |v, &x| v << 8 | u64::from(x)));
    let count = word(0).ok_or("the archive's symbol index is cut short")?;
    if !table_fits(width as u64, count, width as u64, table.len()) {
        return Err(format!("the archive's symbol index declares {count} symbols in {} bytes", table.len()));
    }
    let count = count as usize; // fits: `count` words lie inside `table`
    for i in 0..count {
        let offset = word(width * (i + 1)).expect("inside the table");
        if usize::try_from(offset).map_or(true, |o| headers.binary_search(&o).is_err()) {
            return Err(format!("the archive's symbol {i} points at byte {offset}, where no member starts"));
        }
    }
    let names = table[width * (count + 1)..].iter().filter(|&&b| b == 0).count();
    if names < count {
        return Err(format!("the archive's symbol index names {names} of its {count} symbols"));
    }
    Ok(())
}

/// A member's name that refers elsewhere: GNU's `/N`, at byte N of the long-name table (`//`),
/// ending in `/\n` inside it; BSD's `#1/N`, the first N bytes of the member's own `len`.
fn check_long_name(name: &str, len: usize, long_names: Option<&[u8]>) -> Result<(), String> {
    if let Some(offset) = name.strip_prefix('/').and_then(|n| n.parse::<usize>().ok()) {
        let table = long_names.ok_or(format!("the archive member {name:?} names a long-name table it lacks"))?;
        // An entry begins the table or follows another's `\n`, and ends in `/\n`.
        let starts = offset == 0 || table.get(offset - 1) == Some(&b'\n');
        let ends = starts && table.get(offset..).is_some_and(|rest| rest.windows(2).any(|w| w == b"/\n"));
        if !ends {
            return Err(format!(
                "the archive member {name:?} names no whole entry of its {}-byte long-name table",
                table.len()
            ));
        }
    }
    if let Some(bytes) = name.strip_prefix("#1/").and_then(|n| n.parse::<usize>().ok()) {
        if bytes > len {
            return Err(format!("the archive member {name:?} has a {bytes}-byte name in its {len} bytes"));
        }
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
    fn an_elfs_program_headers_and_name_table_must_lie_inside_it() {
        let mut names_outside = elf(8, 8);
        names_outside[0x3E..0x40].copy_from_slice(&1u16.to_le_bytes());
        assert!(check_elf(&names_outside).is_none(), "the name table's index past the one section");
        let mut extended = elf(8, 8);
        extended[0x3C..0x3E].copy_from_slice(&0u16.to_le_bytes());
        assert!(check_elf(&extended).is_none(), "extended section numbering");
        let mut segment = elf(56, 8);
        segment[0x20..0x28].copy_from_slice(&64u64.to_le_bytes());
        segment[0x36..0x38].copy_from_slice(&56u16.to_le_bytes());
        segment[0x38..0x3A].copy_from_slice(&1u16.to_le_bytes());
        segment[64 + 8..64 + 16].copy_from_slice(&64u64.to_le_bytes());
        segment[64 + 0x20..64 + 0x28].copy_from_slice(&8u64.to_le_bytes());
        assert!(check_elf(&segment).is_some());
        segment[64 + 0x20..64 + 0x28].copy_from_slice(&4096u64.to_le_bytes());
        assert!(check_elf(&segment).is_none(), "a segment past the end");
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

    /// A fat binary of one entry whose 16-byte header announces `payload` bytes, `given` of them there.
    fn fatbin(payload: u64, given: usize) -> Vec<u8> {
        let mut f = FATBIN_MAGIC.to_le_bytes().to_vec();
        f.extend([1, 0, 16, 0]);
        f.extend((16 + payload).to_le_bytes());
        f.extend([2, 0, 0, 0, 16, 0, 0, 0]);
        f.extend(payload.to_le_bytes());
        f.resize(32 + given, 0xCD);
        f
    }

    /// A host object whose `__nv_relfatbin` section holds `code`.
    fn object(code: &[u8]) -> Vec<u8> {
        let names = b"\0.shstrtab\0__nv_relfatbin\0";
        let table = (64 + names.len() + code.len()).next_multiple_of(8);
        let mut b = elf(0, 0)[..64].to_vec();
        b[0x28..0x30].copy_from_slice(&(table as u64).to_le_bytes());
        b[0x3C..0x3E].copy_from_slice(&3u16.to_le_bytes());
        b[0x3E..0x40].copy_from_slice(&1u16.to_le_bytes());
        b.extend(names);
        b.extend(code);
        b.resize(table + 64, 0);
        for (name, kind, at, len) in [(1u32, 3u32, 64, names.len()), (11, 1, 64 + names.len(), code.len())] {
            let mut section = [0u8; 64];
            section[..4].copy_from_slice(&name.to_le_bytes());
            section[4..8].copy_from_slice(&kind.to_le_bytes());
            section[0x18..0x20].copy_from_slice(&(at as u64).to_le_bytes());
            section[0x20..0x28].copy_from_slice(&(len as u64).to_le_bytes());
            b.extend(section);
        }
        b
    }

    #[test]
    fn an_objects_device_code_must_lie_inside_its_section() {
        assert!(check_input(LinkInputKind::Object, &object(&fatbin(8, 8))).is_ok());
        let two = [fatbin(8, 8), fatbin(3, 3), vec![0; 5]].concat();
        assert!(check_input(LinkInputKind::Object, &object(&two)).is_ok(), "two back to back, padded to 8");
        let cut = check_input(LinkInputKind::Object, &object(&fatbin(4096, 8))).unwrap_err();
        assert_eq!(cut, "ELF object's device code: fatbin declares 16+4112 bytes, 40 received");
        let library = archive(&[("k.o/", &object(&[fatbin(8, 8), fatbin(4096, 8)].concat()))], 0);
        assert!(check_archive(&library)
            .unwrap_err()
            .starts_with("library member \"k.o/\"'s device code: fatbin declares"));
        let nvvm = check_input(LinkInputKind::Nvvm, &fatbin(4096, 8)).unwrap_err();
        assert!(nvvm.starts_with("fatbin declares"), "LTO-IR in a fat binary: {nvvm}");
    }

    #[test]
    fn fatbins_must_hold_their_declared_size_and_entries() {
        let f = fatbin(8, 8);
        assert!(check_image(&f).is_ok());
        assert_eq!(check_image(&f[..f.len() - 1]).unwrap_err(), "fatbin declares 16+24 bytes, 39 received");
        let mut past = f.clone();
        past[24..32].copy_from_slice(&9u64.to_le_bytes());
        assert_eq!(check_image(&past).unwrap_err(), "the fatbin's entry at byte 16 runs past its 40 bytes");
        let mut short_header = f.clone();
        short_header[20..24].copy_from_slice(&8u32.to_le_bytes());
        assert!(check_image(&short_header).is_err(), "an entry header too short to hold its sizes");
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
        assert_eq!(bad, "truncated or malformed library member \"bad.o/\"");
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

    /// A GNU symbol index of one symbol, `k`, at `offset`.
    fn index_at(offset: u32) -> Vec<u8> {
        [&1u32.to_be_bytes()[..], &offset.to_be_bytes(), b"k\0"].concat()
    }

    #[test]
    fn a_librarys_symbol_index_and_long_names_must_point_inside_it() {
        let object = elf(8, 8);
        // The member after the index: the magic, the index's header and its 10 bytes.
        let member = ARCHIVE_MAGIC.len() + MEMBER_HEADER + 10;
        assert!(check_archive(&archive(&[("/", &index_at(member as u32)), ("a.o/", &object)], 0)).is_ok());
        let inside = check_archive(&archive(&[("/", &index_at(member as u32 + 2)), ("a.o/", &object)], 0));
        assert_eq!(
            inside.unwrap_err(),
            format!("the archive's symbol 0 points at byte {}, where no member starts", member + 2)
        );
        let past = check_archive(&archive(&[("/", &index_at(1 << 30)), ("a.o/", &object)], 0)).unwrap_err();
        assert!(past.contains("points at byte 1073741824"), "{past}");
        let many = [&1000u32.to_be_bytes()[..], &(member as u32).to_be_bytes()].concat();
        let declared = check_archive(&archive(&[("/", &many), ("a.o/", &object)], 0)).unwrap_err();
        assert_eq!(declared, "the archive's symbol index declares 1000 symbols in 8 bytes");
        let unnamed = [&1u32.to_be_bytes()[..], &(member as u32).to_be_bytes(), b"kk"].concat();
        let names = check_archive(&archive(&[("/", &unnamed), ("a.o/", &object)], 0)).unwrap_err();
        assert_eq!(names, "the archive's symbol index names 0 of its 1 symbols");
        let wide = [&1u64.to_be_bytes()[..], &(member as u64 + 8).to_be_bytes(), b"k\0"].concat();
        assert!(check_archive(&archive(&[("/SYM64/", &wide), ("a.o/", &object)], 0)).is_ok(), "64-bit offsets");

        let table: &[u8] = b"a_long_member_name.o/\n";
        assert!(check_archive(&archive(&[("//", table), ("/0", &object)], 0)).is_ok());
        let beyond = check_archive(&archive(&[("//", table), ("/40", &object)], 0)).unwrap_err();
        assert_eq!(beyond, "the archive member \"/40\" names no whole entry of its 22-byte long-name table");
        assert!(check_archive(&archive(&[("/0", &object)], 0)).unwrap_err().contains("lacks"));
        let two: &[u8] = b"a_long_member_name.o/\nanother_long_name.o/\n";
        assert!(check_archive(&archive(&[("//", two), ("/22", &object)], 0)).is_ok(), "the second entry");
        let middle = check_archive(&archive(&[("//", two), ("/5", &object)], 0)).unwrap_err();
        assert!(middle.contains("names no whole entry"), "an offset inside the first entry: {middle}");
        let bsd = check_archive(&archive(&[("#1/100000", &object)], 0)).unwrap_err();
        assert_eq!(
            bsd,
            format!("the archive member \"#1/100000\" has a 100000-byte name in its {} bytes", object.len())
        );
        assert!(check_archive(&archive(&[("#1/8", &object)], 0)).is_ok(), "a BSD name inside its member");
    }
}
