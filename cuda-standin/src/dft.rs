//! The builtin transform kernels (`dft_f32`, `dft_f64`) as `kernels.cu` computes them, for the
//! stand-in: one output element at a time, in the order its threads would, through the
//! context's memory, so that an access outside its allocations faults as on a GPU. Written apart
//! from the backend's CPU implementation (`ac-backend/src/device/dft.rs`), so that a mistake in
//! one shows.

use crate::kernels::{u32_arg, u64_arg, Memory, Shape};

/// Reads and writes scalars of one width (`f32`, or `f64` as two 4-byte words).
struct Scalars {
    double: bool,
}

impl Scalars {
    fn width(&self) -> u64 {
        if self.double {
            8
        } else {
            4
        }
    }

    fn load(&self, memory: &mut dyn Memory, base: u64, index: u64) -> Option<f64> {
        let at = base.checked_add(index.checked_mul(self.width())?)?;
        let words = memory.load(at, self.width() as usize / 4)?;
        Some(if self.double {
            f64::from_bits(u64::from(words[0].to_bits()) | u64::from(words[1].to_bits()) << 32)
        } else {
            f64::from(words[0])
        })
    }

    fn store(&self, memory: &mut dyn Memory, base: u64, index: u64, value: f64) -> Option<()> {
        let at = base.checked_add(index.checked_mul(self.width())?)?;
        if self.double {
            let bits = value.to_bits();
            memory.store_u32(at, &[bits as u32, (bits >> 32) as u32])
        } else {
            memory.store(at, &[value as f32])
        }
    }
}

/// `kernels.cu`'s `dft<T>`: thread `e` computes output element `e % n_out` of line `e / n_out`,
/// lines numbered with the last dimension fastest.
pub(crate) fn dft(double: bool, args: &[Vec<u8>], shape: Shape, memory: &mut dyn Memory) -> Option<()> {
    let s = Scalars { double };
    let [kind, inverse, n, lines0, lines1, lines2] = [0, 1, 2, 3, 4, 5].map(|i| u32_arg(&args[i]) as u64);
    let (input, output) = (u64_arg(&args[6]), u64_arg(&args[11]));
    let [in_step, in0, in1, in2] = [7, 8, 9, 10].map(|i| u64_arg(&args[i]));
    let [out_step, out0, out1, out2] = [12, 13, 14, 15].map(|i| u64_arg(&args[i]));
    let half = n / 2 + 1;
    let (n_in, n_out) = (if kind == 2 { half } else { n }, if kind == 1 { half } else { n });
    let sign = if inverse != 0 { 1.0 } else { -1.0 };
    let total = lines0 * lines1 * lines2 * n_out;
    for e in shape.grid_stride(total as usize) {
        let e = e as u64;
        let (k, line) = (e % n_out, e / n_out);
        let (l2, l1, l0) = (line % lines2, (line / lines2) % lines1, line / (lines2 * lines1));
        let base = l0 * in0 + l1 * in1 + l2 * in2;
        let (mut re, mut im) = (0.0f64, 0.0f64);
        if kind == 3 {
            re = s.load(memory, input, 2 * (base + k * in_step))?;
            im = s.load(memory, input, 2 * (base + k * in_step) + 1)?;
        } else {
            let terms = if kind == 2 { n } else { n_in };
            for j in 0..terms {
                let (x, y) = match kind {
                    1 => (s.load(memory, input, base + j * in_step)?, 0.0),
                    2 if j >= n_in => {
                        let at = 2 * (base + (n - j) * in_step);
                        (s.load(memory, input, at)?, -s.load(memory, input, at + 1)?)
                    }
                    _ => {
                        let at = 2 * (base + j * in_step);
                        (s.load(memory, input, at)?, s.load(memory, input, at + 1)?)
                    }
                };
                // sincospi(sign * 2 (j k mod n) / n), as the kernel takes its twiddles.
                let turn = sign * 2.0 * ((j * k) % n) as f64 / n as f64;
                let (sin, cos) = (std::f64::consts::PI * turn).sin_cos();
                re += x * cos - y * sin;
                im += x * sin + y * cos;
            }
        }
        let at = l0 * out0 + l1 * out1 + l2 * out2 + k * out_step;
        if kind == 2 {
            s.store(memory, output, at, re)?;
        } else {
            s.store(memory, output, 2 * at, re)?;
            s.store(memory, output, 2 * at + 1, im)?;
        }
    }
    Some(())
}
