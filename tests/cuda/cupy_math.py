#!/usr/bin/env python3
"""CuPy, unmodified, through the CUDA shim (issue 48), found by LD_LIBRARY_PATH alone: what of
CuPy can run on the driver stand-in, which runs the backend's builtin kernels but none of CuPy's
own (those it compiles with NVRTC): copies, and the products and FFTs CuPy hands to cuBLAS and
cuFFT (the shim's libcublas.so.13 and libcufft.so.12, which CuPy loads by those names). Each
operation on the device is compared with NumPy's on the CPU (framework_check.py: its lines, its
exit status). On a GPU, scripts/gpu-shim/cupy_check.py runs the rest (elementwise and raw
kernels, reductions, and CuPy's own kernels around a library call: a scaled inverse FFT's
scaling).
"""
from functools import partial

import cupy as cp
import numpy as np
from cupy import cublas

import framework_check
from framework_check import finish

check = partial(framework_check.check, to_host=cp.asnumpy)
rng = np.random.default_rng(1)


def rand(*shape, dtype=np.float32):
    return rng.standard_normal(shape).astype(dtype)


props = cp.cuda.runtime.getDeviceProperties(0)
print(f"devices {cp.cuda.runtime.getDeviceCount()}: {props['name'].decode()}, capability {props['major']}.{props['minor']}")
a, b, v = rand(64, 48), rand(48, 32), rand(48)
batch_a, batch_b = rand(4, 16, 48), rand(4, 48, 8)
a64, b64 = a.astype(np.float64), b.astype(np.float64)
F32, F64 = 1e-5, 1e-12
d = {name: cp.asarray(x) for name, x in dict(a=a, b=b, v=v, ba=batch_a, bb=batch_b, a64=a64, b64=b64).items()}

check("dot", lambda: cp.dot(d["a"], d["b"]), lambda: a @ b, F32)
check("dot transposed", lambda: cp.dot(d["b"].T, d["a"].T), lambda: b.T @ a.T, F32)
check("dot f64", lambda: cp.dot(d["a64"], d["b64"]), lambda: a64 @ b64, F64)
check("matrix-vector", lambda: cp.dot(d["a"], d["v"]), lambda: a @ v, F32)
check("matmul batched", lambda: cp.matmul(d["ba"], d["bb"]), lambda: batch_a @ batch_b, F32)
# A binary16 product (cuBLAS's gemm on binary16 matrices, computed in f32 and rounded once)
# against NumPy's f32 product of the same binary16 inputs. (CuPy's batched binary16 matmul
# compiles a kernel of its own first: left to a GPU.)
a16, b16 = a.astype(np.float16), b.astype(np.float16)
check("dot f16", lambda: cp.dot(cp.asarray(a16), cp.asarray(b16)), lambda: a16.astype(np.float32) @ b16.astype(np.float32), 1e-3)

def axpy_into(alpha, x, y):
    out = cp.asarray(y)
    cublas.axpy(alpha, cp.asarray(x), out)
    return out


def scal_of(alpha, x):
    out = cp.asarray(x)
    cublas.scal(alpha, out)
    return out


# Complex products (cuBLAS's cgemm and zgemm, or gemmEx on complex matrices).
ca, cb = rand(64, 48) + 1j * rand(64, 48), rand(48, 32) + 1j * rand(48, 32)
for dtype, bound, tag in [(np.complex64, F32, "c64"), (np.complex128, F64, "c128")]:
    x, y = ca.astype(dtype), cb.astype(dtype)
    check(f"dot {tag}", lambda: cp.dot(cp.asarray(x), cp.asarray(y)), lambda: x @ y, bound)
    # Level 1 and 2 on complex vectors: cgemv for a matrix-vector product, and cupy.cublas's
    # cdotu, cdotc, cscnrm2, caxpy and cscal (and their double forms); results and scalars in
    # device memory. (CuPy's own cp.dot and cp.vdot of two vectors compile a kernel of theirs:
    # left to a GPU.)
    u, z = ca[0].astype(dtype), cb[:, 0].astype(dtype)
    alpha = dtype(2 - 1j)
    check(f"matrix-vector {tag}", lambda: cp.dot(cp.asarray(x), cp.asarray(u)), lambda: x @ u, bound)
    check(f"cublas dotu {tag}", lambda: cublas.dotu(cp.asarray(u), cp.asarray(z)), lambda: np.array(u @ z), bound)
    check(f"cublas dotc {tag}", lambda: cublas.dotc(cp.asarray(u), cp.asarray(z)), lambda: np.array(np.vdot(u, z)), bound)
    check(f"cublas nrm2 {tag}", lambda: cublas.nrm2(cp.asarray(z)), lambda: np.array(np.linalg.norm(z)), bound)
    check(f"cublas axpy {tag}", lambda: axpy_into(alpha, u, z), lambda: alpha * u + z, bound)
    check(f"cublas scal {tag}", lambda: scal_of(alpha, u), lambda: alpha * u, bound)

# cuBLAS's level 1 and 2 as CuPy calls them (cupy.cublas): results and scalars in device memory.
w, m = rand(48), rand(32, 48)


def gemv():
    out = cp.zeros(32, np.float32)
    cublas.gemv("N", 1.0, cp.asarray(m), d["v"], 0.0, out)
    return out


def ger():
    out = cp.asarray(np.ones((32, 48), np.float32))  # copied: cp.ones would fill with a kernel of CuPy's
    cublas.ger(1.0, cp.asarray(w[:32].copy()), d["v"], out)
    return out


check("cublas dot", lambda: cublas.dot(d["v"], cp.asarray(w)), lambda: np.array(v @ w), F32)
check("cublas nrm2", lambda: cublas.nrm2(d["v"]), lambda: np.array(np.linalg.norm(v)), F32)
check("cublas axpy", lambda: axpy_into(2.0, v, w), lambda: 2.0 * v + w, F32)
check("cublas gemv", gemv, lambda: m @ v, F32)
check("cublas ger", ger, lambda: np.outer(w[:32], v) + 1, F32)

# Triangular solves (cupyx.scipy.linalg.solve_triangular: cublas<S|D|C|Z>trsm), their operands
# Fortran-ordered so that CuPy copies nothing with a kernel of its own (and each solution read
# back as its transpose, C-ordered, for the same reason); against NumPy's general solve of the
# same triangle.
from cupyx.scipy.linalg import solve_triangular

for dtype, bound, tag in [(np.float32, 1e-5, "f32"), (np.float64, F64, "f64"), (np.complex64, 1e-5, "c64"), (np.complex128, F64, "c128")]:
    tri = np.tril(rand(24, 24)) + 8 * np.eye(24)
    rhs = rand(24, 6)
    if np.dtype(dtype).kind == "c":
        tri, rhs = tri + 1j * np.tril(rand(24, 24), -1), rhs + 1j * rand(24, 6)
    tri, rhs = np.asfortranarray(tri.astype(dtype)), np.asfortranarray(rhs.astype(dtype))
    unit = np.tril(tri, -1) + np.eye(24, dtype=dtype)
    check(f"solve_triangular lower {tag}", lambda: solve_triangular(cp.asarray(tri), cp.asarray(rhs), lower=True, overwrite_b=True).T, lambda: np.linalg.solve(tri, rhs).T, bound)
    check(f"solve_triangular conjugate-transposed unit {tag}", lambda: solve_triangular(cp.asarray(tri), cp.asarray(rhs), trans="C", lower=True, unit_diagonal=True, overwrite_b=True).T, lambda: np.linalg.solve(unit.conj().T, rhs).T, bound)

signal, image = rand(4096).astype(np.complex64), rand(64, 64)
check("fft", lambda: cp.fft.fft(cp.asarray(signal)), lambda: np.fft.fft(signal), F32)
check("fft f64", lambda: cp.fft.fft(cp.asarray(signal.astype(np.complex128))), lambda: np.fft.fft(signal.astype(np.complex128)), F64)
check("rfft", lambda: cp.fft.rfft(cp.asarray(signal.real.copy())), lambda: np.fft.rfft(signal.real), F32)
check("rfft2", lambda: cp.fft.rfft2(cp.asarray(image)), lambda: np.fft.rfft2(image), F32)
check("ifft unscaled", lambda: cp.fft.ifft(cp.asarray(signal), norm="forward"), lambda: np.fft.ifft(signal, norm="forward"), F32)

# CuPy's stream-ordered allocator (cudaMallocFromPoolAsync and cudaFreeAsync on the device's
# current memory pool) in place of its own pool, on a stream of its own: products and an FFT
# again, round after round, each round's memory freed to the pool and handed out again.
cp.cuda.set_allocator(cp.cuda.MemoryAsyncPool().malloc)
with cp.cuda.Stream(non_blocking=True):
    for round in range(3):
        check(f"dot from the async pool, round {round}", lambda: cp.dot(cp.asarray(a), cp.asarray(b)), lambda: a @ b, F32)
    check("fft from the async pool", lambda: cp.fft.fft(cp.asarray(signal)), lambda: np.fft.fft(signal), F32)

cp.cuda.Device().synchronize()
finish()
