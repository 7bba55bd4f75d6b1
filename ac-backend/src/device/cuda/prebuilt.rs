//! The `builtin` kernels compiled ahead of time, shipped inside the backend: a cubin for each
//! GPU generation from Volta (`sm_70`) to Blackwell (`sm_120`), and PTX (`compute_70`) that
//! the driver compiles for anything newer. A GPU then has its builtin kernels without NVRTC,
//! whatever name NVRTC has on the host (finding 2 of issue 24).
//!
//! The images are made by NVRTC from `kernels.cu` ([`write_all`], run by the ignored test
//! `regenerate_prebuilt_builtin_kernels` in `tests/nvrtc.rs`) and committed with the SHA-256 of
//! the source they were made from: a test fails when `kernels.cu` changed and the images were
//! not made again, and another checks every image's kernels and parameter sizes against the
//! `builtin` table.

use std::path::Path;

use super::nvrtc::{self, Target};
use super::BUILTIN_SOURCE;
use crate::device::DeviceResult;

/// Architectures with a cubin, and its file.
pub const CUBINS: &[((u32, u32), &[u8])] = &[
    ((7, 0), include_bytes!("prebuilt/builtin.sm_70.cubin")),
    ((7, 5), include_bytes!("prebuilt/builtin.sm_75.cubin")),
    ((8, 0), include_bytes!("prebuilt/builtin.sm_80.cubin")),
    ((8, 6), include_bytes!("prebuilt/builtin.sm_86.cubin")),
    ((8, 9), include_bytes!("prebuilt/builtin.sm_89.cubin")),
    ((9, 0), include_bytes!("prebuilt/builtin.sm_90.cubin")),
    ((10, 0), include_bytes!("prebuilt/builtin.sm_100.cubin")),
    ((12, 0), include_bytes!("prebuilt/builtin.sm_120.cubin")),
];

/// The virtual architecture of the PTX.
pub const PTX_ARCH: (u32, u32) = (7, 0);

/// The PTX, NUL-terminated.
pub const PTX: &[u8] = include_bytes!("prebuilt/builtin.compute_70.ptx");

/// SHA-256 (hex) of the `kernels.cu` the images were made from.
pub const SOURCE_SHA256: &str = include_str!("prebuilt/kernels.cu.sha256");

/// A prebuilt image for a device of compute capability `capability`: the cubin of the same
/// major version with the highest minor version not above the device's (a cubin runs on later
/// minor versions of its major), else `None` (then NVRTC, or the PTX).
pub fn cubin_for(capability: (u32, u32)) -> Option<&'static [u8]> {
    CUBINS
        .iter()
        .filter(|((major, minor), _)| *major == capability.0 && *minor <= capability.1)
        .max_by_key(|((_, minor), _)| *minor)
        .map(|(_, image)| *image)
}

/// SHA-256 (hex) of `text`.
pub fn sha256_hex(text: &str) -> String {
    ring::digest::digest(&ring::digest::SHA256, text.as_bytes()).as_ref().iter().map(|b| format!("{b:02x}")).collect()
}

/// Compiles `kernels.cu` into every prebuilt image and writes them, with the source's hash,
/// into `dir` (needs NVRTC).
pub fn write_all(dir: &Path) -> DeviceResult<()> {
    let write = |name: String, bytes: &[u8]| {
        std::fs::write(dir.join(&name), bytes).map_err(|e| {
            ac_proto::backend::WireError::new(ac_proto::backend::ErrorKind::Internal, format!("{name}: {e}"))
        })
    };
    for ((major, minor), _) in CUBINS {
        let cubin = nvrtc::compile_to(BUILTIN_SOURCE, &[], Target::Cubin((*major, *minor)))?;
        write(format!("builtin.sm_{major}{minor}.cubin"), &cubin)?;
    }
    let ptx = nvrtc::compile_to(BUILTIN_SOURCE, &[], Target::Ptx(PTX_ARCH))?;
    write(format!("builtin.compute_{}{}.ptx", PTX_ARCH.0, PTX_ARCH.1), &ptx)?;
    write("kernels.cu.sha256".into(), format!("{}\n", sha256_hex(BUILTIN_SOURCE)).as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::builtin::KERNELS;
    use crate::device::cuda::{args, image, signature};

    #[test]
    fn the_images_were_made_from_this_kernels_cu() {
        assert_eq!(
            SOURCE_SHA256.trim(),
            sha256_hex(BUILTIN_SOURCE),
            "kernels.cu changed: make the prebuilt images again \
             (cargo test -p ac-backend --test nvrtc -- --ignored regenerate, with NVRTC)"
        );
    }

    #[test]
    fn every_image_has_every_builtin_kernel_with_its_parameter_sizes() {
        let want = |params: &[ac_proto::backend::ParamKind]| -> Vec<usize> {
            params.iter().map(|&p| args::kind_width(p)).collect()
        };
        for ((major, minor), cubin) in CUBINS {
            image::check_binary(cubin).unwrap_or_else(|e| panic!("sm_{major}{minor}: {e}"));
            let found = signature::from_cubin(cubin);
            for (name, params) in KERNELS {
                assert_eq!(found.get(*name), Some(&want(params)), "sm_{major}{minor}: `{name}`");
            }
        }
        assert_eq!(PTX.last(), Some(&0), "the PTX is NUL-terminated");
        let found = signature::from_ptx(image::ptx_text(PTX).unwrap().as_slice());
        for (name, params) in KERNELS {
            assert_eq!(found.get(*name), Some(&want(params)), "PTX: `{name}`");
        }
    }

    #[test]
    fn a_device_gets_the_cubin_of_its_generation() {
        let arch_of = |capability| CUBINS.iter().find(|(_, c)| Some(*c) == cubin_for(capability)).map(|(a, _)| *a);
        assert_eq!(arch_of((8, 6)), Some((8, 6)));
        assert_eq!(arch_of((8, 7)), Some((8, 6)), "a later minor version runs the earlier cubin");
        assert_eq!(arch_of((9, 0)), Some((9, 0)));
        assert_eq!(arch_of((7, 2)), Some((7, 0)));
        assert_eq!(arch_of((6, 1)), None, "older than Volta: none");
        assert_eq!(arch_of((13, 0)), None, "a newer generation: the PTX");
    }
}
