//! Kernel arguments as `cuLaunchKernel` takes them: an array of pointers, one to each
//! argument's value, checked against the kernel's parameter sizes. Values are laid out here, one 8-byte slot each, with no driver involved, so
//! the layout is tested on any machine.

use ac_proto::backend::{ErrorKind, KernelArg, WireError};

use crate::device::{DeviceArg, DeviceResult};

pub use crate::device::param_width as kind_width;

/// The width in bytes a kernel parameter of this argument's type has.
pub fn width(arg: &DeviceArg) -> usize {
    match arg {
        DeviceArg::Scalar(scalar) => kind_width(scalar.kind()),
        DeviceArg::Mem { .. } => 8,
    }
}

/// Arguments laid out for `cuLaunchKernel`: 8-byte slots, and where each parameter starts.
#[derive(Debug)]
pub struct Packed {
    /// The values, each in the first bytes of its slot (native order, as the kernel reads them).
    pub slots: Vec<u64>,
    /// The slot each parameter starts at (`kernelParams[i]` points there).
    pub starts: Vec<usize>,
}

/// How many arguments a parameter of `size` bytes takes: one for 4 and 8 bytes (a scalar or a
/// pointer of that width), else its bytes in order as 8-byte pieces (a struct passed by value,
/// a 1- or 2-byte scalar): `ceil(size / 8)` 8-byte arguments, laid in consecutive slots, of
/// which the driver reads `size` bytes.
pub fn pieces(size: usize) -> usize {
    match size {
        4 | 8 => 1,
        other => other.div_ceil(8).max(1),
    }
}

/// Lays the arguments out, one slot each (value in the slot's first bytes). Device pointers
/// become `mem + offset` (on CUDA a [`DeviceMem`] is the allocation's device address). The
/// count and each width must match the kernel's parameter sizes ([`pieces`]); with no sizes
/// known the launch is refused: `cuLaunchKernel` reads one `kernelParams` entry per parameter
/// of the kernel, so a blind launch with too few arguments would make the driver read past the
/// array (issue 24, finding 1).
///
/// [`DeviceMem`]: crate::device::DeviceMem
pub fn pack(kernel: &str, args: &[DeviceArg], sizes: Option<&[usize]>) -> DeviceResult<Packed> {
    let Some(sizes) = sizes else {
        return Err(WireError::new(
            ErrorKind::InvalidArgument,
            format!(
                "kernel `{kernel}`: its parameters are unknown (this driver predates CUDA 12.4's \
                 cuFuncGetParamInfo and the image declares none readable, e.g. a fatbin), so it is \
                 not launched; load it as PTX or cubin, or update the driver"
            ),
        ));
    };
    let needed: usize = sizes.iter().map(|&s| pieces(s)).sum();
    if needed != args.len() {
        let pieces = if needed == sizes.len() { String::new() } else { format!(" ({needed} with its 8-byte pieces)") };
        return Err(WireError::new(
            ErrorKind::InvalidArgument,
            format!("kernel `{kernel}` takes {} arguments{pieces}, got {}", sizes.len(), args.len()),
        ));
    }
    let mut starts = Vec::with_capacity(sizes.len());
    let mut at = 0;
    for (i, &size) in sizes.iter().enumerate() {
        starts.push(at);
        let (count, width) = if pieces(size) == 1 && (size == 4 || size == 8) { (1, size) } else { (pieces(size), 8) };
        for arg in &args[at..at + count] {
            if self::width(arg) != width {
                let what = if width == size {
                    format!("{size} bytes wide")
                } else {
                    format!("{size} bytes wide, given as 8-byte pieces")
                };
                return Err(WireError::new(
                    ErrorKind::InvalidArgument,
                    format!("kernel `{kernel}` argument {i} is {what}, got a {}-byte {arg:?}", self::width(arg)),
                ));
            }
        }
        at += count;
    }
    Ok(Packed { slots: args.iter().map(slot).collect(), starts })
}

fn slot(arg: &DeviceArg) -> u64 {
    let mut bytes = [0u8; 8];
    match *arg {
        DeviceArg::Mem { mem, offset, .. } => bytes = (mem.0 + offset).to_ne_bytes(),
        DeviceArg::Scalar(scalar) => match scalar {
            KernelArg::U32(v) => bytes[..4].copy_from_slice(&v.to_ne_bytes()),
            KernelArg::I32(v) => bytes[..4].copy_from_slice(&v.to_ne_bytes()),
            KernelArg::F32(v) => bytes[..4].copy_from_slice(&v.to_ne_bytes()),
            KernelArg::U64(v) => bytes = v.to_ne_bytes(),
            KernelArg::I64(v) => bytes = v.to_ne_bytes(),
            KernelArg::F64(v) => bytes = v.to_ne_bytes(),
            // Resolved to `DeviceArg::Mem` by the session before it gets here.
            KernelArg::Ptr(_) => {}
        },
    }
    u64::from_ne_bytes(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::DeviceMem;

    fn first_bytes(slot: u64, n: usize) -> Vec<u8> {
        slot.to_ne_bytes()[..n].to_vec()
    }

    #[test]
    fn values_sit_at_the_start_of_their_slots() {
        let args = [
            DeviceArg::Scalar(KernelArg::F32(2.5)),
            DeviceArg::Mem { mem: DeviceMem(0x7f00_0000_1000), offset: 64, len: 256 },
            DeviceArg::Scalar(KernelArg::I32(-3)),
            DeviceArg::Scalar(KernelArg::U64(1 << 40)),
            DeviceArg::Scalar(KernelArg::F64(0.5)),
        ];
        let slots = pack("k", &args, Some(&[4, 8, 4, 8, 8])).unwrap().slots;
        assert_eq!(first_bytes(slots[0], 4), 2.5f32.to_ne_bytes());
        assert_eq!(slots[1], 0x7f00_0000_1040);
        assert_eq!(first_bytes(slots[2], 4), (-3i32).to_ne_bytes());
        assert_eq!(slots[3], 1 << 40);
        assert_eq!(f64::from_ne_bytes(slots[4].to_ne_bytes()), 0.5);
    }

    #[test]
    fn count_and_widths_are_checked_and_unknown_signatures_refused() {
        let args = [DeviceArg::Scalar(KernelArg::U32(1)), DeviceArg::Scalar(KernelArg::U64(2))];
        assert!(pack("k", &args, Some(&[4, 8])).is_ok());
        let e = pack("k", &args, None).unwrap_err();
        assert_eq!(e.kind, ErrorKind::InvalidArgument);
        assert!(e.message.contains("parameters are unknown"), "{}", e.message);
        let e = pack("k", &args, Some(&[4])).unwrap_err();
        assert_eq!(e.kind, ErrorKind::InvalidArgument);
        assert!(e.message.contains("takes 1 arguments, got 2"), "{}", e.message);
        let e = pack("k", &args, Some(&[4, 4])).unwrap_err();
        assert!(e.message.contains("argument 1 is 4 bytes wide"), "{}", e.message);
    }

    #[test]
    fn other_widths_travel_as_consecutive_8_byte_pieces() {
        // (int, struct of 12 bytes, char, pointer)
        let args = [
            DeviceArg::Scalar(KernelArg::I32(7)),
            DeviceArg::Scalar(KernelArg::U64(0x0807_0605_0403_0201)),
            DeviceArg::Scalar(KernelArg::U64(0x0c0b_0a09)),
            DeviceArg::Scalar(KernelArg::U64(b'x' as u64)),
            DeviceArg::Scalar(KernelArg::U64(0x7f00_0000_2000)),
        ];
        let packed = pack("k", &args, Some(&[4, 12, 1, 8])).unwrap();
        assert_eq!(packed.starts, [0, 1, 3, 4]);
        let bytes: Vec<u8> = packed.slots[1..3].iter().flat_map(|s| s.to_ne_bytes()).collect();
        assert_eq!(bytes[..12], [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12], "the struct's bytes lie in order");
        assert_eq!(first_bytes(packed.slots[3], 1), [b'x']);
        let e = pack("k", &args[..4], Some(&[4, 12, 1, 8])).unwrap_err();
        assert!(e.message.contains("takes 4 arguments (5 with its 8-byte pieces), got 4"), "{}", e.message);
        let narrow = [DeviceArg::Scalar(KernelArg::U32(1)), DeviceArg::Scalar(KernelArg::U32(2))];
        let e = pack("k", &narrow, Some(&[16])).unwrap_err();
        assert!(e.message.contains("16 bytes wide, given as 8-byte pieces"), "{}", e.message);
    }
}
