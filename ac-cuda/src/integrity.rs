//! The runtime's check that it talks to a real driver: it asks the driver for a keyed digest
//! (HMAC over MD2, RFC 1319 and RFC 2104, with a fixed key) of the process and thread ids,
//! the driver version, two of the driver's tables and the devices' identities, computes the
//! same, and refuses to run ("software validity not established") if they differ.

/// The key of the digest (the same in every driver).
const KEY: [u8; 16] = [0x14, 0x6A, 0xDD, 0xAE, 0x53, 0xA9, 0xA7, 0x52, 0xAA, 0x08, 0x41, 0x36, 0x0B, 0xF5, 0x5A, 0x9F];

/// MD2's substitution table, from the digits of pi (RFC 1319, section 3.2).
const PI_SUBST: [u8; 256] = [
    41, 46, 67, 201, 162, 216, 124, 1, 61, 54, 84, 161, 236, 240, 6, 19, 98, 167, 5, 243, 192, 199, 115, 140, 152, 147,
    43, 217, 188, 76, 130, 202, 30, 155, 87, 60, 253, 212, 224, 22, 103, 66, 111, 24, 138, 23, 229, 18, 190, 78, 196,
    214, 218, 158, 222, 73, 160, 251, 245, 142, 187, 47, 238, 122, 169, 104, 121, 145, 21, 178, 7, 63, 148, 194, 16,
    137, 11, 34, 95, 33, 128, 127, 93, 154, 90, 144, 50, 39, 53, 62, 204, 231, 191, 247, 151, 3, 255, 25, 48, 179, 72,
    165, 181, 209, 215, 94, 146, 42, 172, 86, 170, 198, 79, 184, 56, 210, 150, 164, 125, 182, 118, 252, 107, 226, 156,
    116, 4, 241, 69, 157, 112, 89, 100, 113, 135, 32, 134, 91, 207, 101, 230, 45, 168, 2, 27, 96, 37, 173, 174, 176,
    185, 246, 28, 70, 97, 105, 52, 64, 126, 15, 85, 71, 163, 35, 221, 81, 175, 58, 195, 92, 249, 206, 186, 197, 234,
    38, 44, 83, 13, 110, 133, 40, 132, 9, 211, 223, 205, 244, 65, 129, 77, 82, 106, 220, 55, 200, 108, 193, 171, 250,
    36, 225, 123, 8, 12, 189, 177, 74, 120, 136, 149, 139, 227, 99, 232, 109, 233, 203, 213, 254, 59, 0, 29, 57, 242,
    239, 183, 14, 102, 88, 208, 228, 166, 119, 114, 248, 235, 117, 75, 10, 49, 68, 80, 180, 143, 237, 31, 26, 219, 153,
    141, 51, 159, 17, 131, 20,
];

/// MD2 of `message` (RFC 1319).
pub fn md2(message: &[u8]) -> [u8; 16] {
    let pad = 16 - message.len() % 16;
    let mut padded = message.to_vec();
    padded.extend(std::iter::repeat_n(pad as u8, pad));
    // The checksum of the padded message, appended as a last block.
    let mut checksum = [0u8; 16];
    let mut last = 0u8;
    for block in padded.chunks(16) {
        for (c, &m) in checksum.iter_mut().zip(block) {
            *c ^= PI_SUBST[(m ^ last) as usize];
            last = *c;
        }
    }
    padded.extend_from_slice(&checksum);
    let mut x = [0u8; 48];
    for block in padded.chunks(16) {
        for j in 0..16 {
            x[16 + j] = block[j];
            x[32 + j] = x[16 + j] ^ x[j];
        }
        let mut t = 0u8;
        for round in 0..18u8 {
            for byte in x.iter_mut() {
                *byte ^= PI_SUBST[t as usize];
                t = *byte;
            }
            t = t.wrapping_add(round);
        }
    }
    x[..16].try_into().expect("16 bytes")
}

/// HMAC-MD2 of `message` under the fixed key.
pub fn digest(message: &[u8]) -> [u8; 16] {
    let keyed = |pad: u8| KEY.iter().map(|k| k ^ pad).collect::<Vec<u8>>();
    let mut inner = keyed(0x36);
    inner.extend_from_slice(message);
    let mut outer = keyed(0x5c);
    outer.extend_from_slice(&md2(&inner));
    md2(&outer)
}

/// What the check covers, in the order and layout the runtime hashes it.
#[derive(Debug, Clone)]
pub struct Subject {
    /// `cuDriverGetVersion`'s answer.
    pub driver_version: u32,
    /// The runtime's version, as it asked.
    pub runtime_version: u32,
    /// The process id.
    pub process: u32,
    /// The calling thread (`pthread_self`, truncated).
    pub thread: u32,
    /// Where the CUDART_INTERFACE table lies.
    pub cudart_table: usize,
    /// Where the INTEGRITY_CHECK table lies.
    pub integrity_table: usize,
    /// The check function's address (the table's slot 1).
    pub function: usize,
    /// The time the runtime passed.
    pub unix_seconds: u64,
    /// Each device's UUID and PCI domain, bus and device numbers.
    pub devices: Vec<([u8; 16], i32, i32, i32)>,
}

/// The check's answer for `subject`.
pub fn check(subject: &Subject) -> [u64; 2] {
    // Two versions answer constants.
    match subject.runtime_version % 10 {
        0 => return [0x3341_181C_03CB_675C, 0x8ED3_83AA_1F4C_D1E8],
        1 => return [0x1841_181C_03CB_675C, 0x8ED3_83AA_1F4C_D1E8],
        _ => {}
    }
    let mut message = Vec::with_capacity(40 + 28 * subject.devices.len());
    for word in [subject.driver_version, subject.runtime_version, subject.process, subject.thread] {
        message.extend_from_slice(&word.to_ne_bytes());
    }
    for address in [subject.cudart_table, subject.integrity_table, subject.function] {
        message.extend_from_slice(&(address as u64).to_ne_bytes());
    }
    message.extend_from_slice(&subject.unix_seconds.to_ne_bytes());
    for (uuid, domain, bus, device) in &subject.devices {
        message.extend_from_slice(uuid);
        for n in [domain, bus, device] {
            message.extend_from_slice(&n.to_ne_bytes());
        }
    }
    let d = digest(&message);
    [u64::from_ne_bytes(d[..8].try_into().expect("8")), u64::from_ne_bytes(d[8..].try_into().expect("8"))]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    #[test]
    fn md2_matches_rfc_1319() {
        assert_eq!(hex(&md2(b"")), "8350e5a3e24c153df2275c9f80692773");
        assert_eq!(hex(&md2(b"abc")), "da853b0d3f88d99b30283a69e6ded6bb");
        assert_eq!(
            hex(&md2(b"12345678901234567890123456789012345678901234567890123456789012345678901234567890")),
            "d5976f79d83d3a0dc9806c3c66f3efd8"
        );
    }
}
