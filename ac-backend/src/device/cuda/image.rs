//! Checks on module images before the driver sees them. `cuModuleLoadData` takes a bare
//! pointer and trusts the image's own headers for its length, so a truncated or hostile image
//! could make the driver read past the received bytes. Text must end in NUL; a cubin's ELF
//! headers and sections, and a fatbin's declared size, must lie inside the payload, as a link's
//! inputs must (the checks are `ac_proto::backend::device_code`'s, which the CUDA shim runs too).

use ac_proto::backend::{device_code, ErrorKind, LinkInputKind, WireError};

use crate::device::DeviceResult;

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

/// Checks that a cubin (64-bit little-endian ELF) or fatbin image lies inside its payload.
pub fn check_binary(image: &[u8]) -> DeviceResult<()> {
    device_code::check_image(image).map_err(bad)
}

/// Checks that a link's input is what its kind says and lies inside its bytes.
pub fn check_link_input(kind: LinkInputKind, bytes: &[u8]) -> DeviceResult<()> {
    device_code::check_input(kind, bytes).map_err(bad)
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

    #[test]
    fn a_cut_image_is_a_failed_load() {
        let refused = check_binary(b"\x7fELF").unwrap_err();
        assert_eq!(
            (refused.kind, refused.message.as_str()),
            (ErrorKind::ModuleLoad, "truncated or malformed cubin (ELF) image")
        );
        let refused = check_link_input(LinkInputKind::Library, b"\x7fELF").unwrap_err();
        assert_eq!(refused.kind, ErrorKind::ModuleLoad);
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
