//! A device's UUID: derived from its accelerator's id (the remote GPU's own is its host's, and
//! the program must see the same UUID for the same accelerator in every process of its job),
//! and written as NVML and `CUDA_VISIBLE_DEVICES` write one.

/// A UUID derived from the accelerator's id (FNV-1a, twice, over the id): the same
/// accelerator always gets the same UUID, in every process of the job.
pub fn of(id: &str) -> [u8; 16] {
    let fnv = |seed: u64| id.bytes().fold(seed, |h, b| (h ^ b as u64).wrapping_mul(0x0100_0000_01b3));
    let mut uuid = [0u8; 16];
    uuid[..8].copy_from_slice(&fnv(0xcbf2_9ce4_8422_2325).to_le_bytes());
    uuid[8..].copy_from_slice(&fnv(0x8422_2325_cbf2_9ce4).to_le_bytes());
    uuid
}

/// The text of a device UUID, as NVML and `CUDA_VISIBLE_DEVICES` write it: `GPU-` and the 16
/// bytes as a UUID is written.
pub fn text(uuid: &[u8; 16]) -> String {
    let hex: Vec<String> = uuid.iter().map(|b| format!("{b:02x}")).collect();
    let group = |r: std::ops::Range<usize>| hex[r].concat();
    format!("GPU-{}-{}-{}-{}-{}", group(0..4), group(4..6), group(6..8), group(8..10), group(10..16))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_uuid_is_written_as_nvml_writes_it() {
        let uuid = [0x12, 0x34, 0x56, 0x78, 0x9a, 0xbc, 0xde, 0xf0, 1, 2, 3, 4, 5, 6, 7, 8];
        assert_eq!(text(&uuid), "GPU-12345678-9abc-def0-0102-030405060708");
    }

    #[test]
    fn an_accelerator_keeps_its_uuid_and_two_differ() {
        assert_eq!(of("gpu1/0"), of("gpu1/0"));
        assert_ne!(of("gpu1/0"), of("gpu1/1"));
    }
}
