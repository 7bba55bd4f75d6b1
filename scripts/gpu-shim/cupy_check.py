#!/usr/bin/env python3
"""An unmodified CuPy program for the CUDA shim's GPU check (issue 48): device properties, an
ElementwiseKernel, cp.dot (cuBLAS), reductions, a RawKernel compiled by NVRTC, and batched LU
(det, inv and solve of stacks: cuBLAS's getrfBatched, getriBatched, getrsBatched), and
cupy.cublas's geam, dgmm, syrk and sbmv.
scripts/gpu-check runs it twice, with the machine's own libcuda.so.1 and through ac-cuda's, and
compares the two result files (compare.py): the program itself knows nothing of the shim.

Inputs are drawn on the host by NumPy from fixed seeds, so both runs compute on the same
numbers. Each section's arrays are summarized (sum, sum of absolute values, norm, a few values,
shape) into a JSON file. A section that raises is recorded with its error, the others still
run, and the exit status is 1. gpu-check gives each run a kernel cache of its own
(CUPY_CACHE_DIR), so each compiles its kernels with NVRTC and loads them through its driver.

Usage: cupy_check.py OUT.json
"""
import json
import sys
import traceback

import cupy as cp
import cupy.cublas
import numpy as np

from mapped import print_mapped


def summary(a):
    """An array's sum, sum of absolute values, norm, first and last values, and shape."""
    h = cp.asnumpy(a).astype(np.float64).ravel()
    return {
        "shape": list(a.shape),
        "sum": float(h.sum()),
        "abs_sum": float(np.abs(h).sum()),
        "norm": float(np.linalg.norm(h)),
        "first": h[:4].tolist(),
        "last": h[-4:].tolist(),
    }


def host_randn(seed, *shape):
    return np.random.default_rng(seed).standard_normal(shape, dtype=np.float32)


def properties():
    p = cp.cuda.runtime.getDeviceProperties(0)
    name = p["name"]
    return {
        "device_count": cp.cuda.runtime.getDeviceCount(),
        "name": name.decode() if isinstance(name, bytes) else name,
        "major": p["major"],
        "minor": p["minor"],
        "multiProcessorCount": p["multiProcessorCount"],
        "totalGlobalMem": p["totalGlobalMem"],
        "warpSize": p["warpSize"],
        "compute_capability": cp.cuda.Device(0).compute_capability,
    }


def elementwise():
    kernel = cp.ElementwiseKernel("float32 x, float32 y", "float32 z", "z = x * x + 2.0f * y", "gpu_shim_sq_add")
    x = cp.asarray(host_randn(1, 1 << 20))
    y = cp.asarray(host_randn(2, 1 << 20))
    return summary(kernel(x, y))


def dot():
    a = cp.asarray(host_randn(3, 1024, 1024))
    b = cp.asarray(host_randn(4, 1024, 1024))
    v = cp.asarray(host_randn(5, 1024))
    return {"matrix": summary(cp.dot(a, b)), "vector": summary(cp.dot(a, v)), "inner": float(cp.dot(v, v))}


def reductions():
    x = cp.asarray(host_randn(6, 1 << 20))
    return {"sum": float(x.sum()), "max": float(x.max()), "argmin": int(x.argmin()), "std": float(x.std())}


SAXPY = r"""
extern "C" __global__ void gpu_shim_saxpy(float a, const float* x, const float* y, float* out, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = a * x[i] + y[i];
}
"""


def raw_kernel():
    kernel = cp.RawKernel(SAXPY, "gpu_shim_saxpy")
    n = (1 << 20) + 3
    x = cp.asarray(host_randn(7, n))
    y = cp.asarray(host_randn(8, n))
    out = cp.empty_like(x)
    kernel(((n + 255) // 256,), (256,), (np.float32(2.5), x, y, out, np.uint32(n)))
    return {"saxpy": summary(out), "attributes": {"max_threads_per_block": kernel.max_threads_per_block}}


def parts(a):
    """A result's numbers on the host, a complex one's real and imaginary parts side by side."""
    h = cp.asnumpy(a)
    return h.view(h.real.dtype) if np.iscomplexobj(h) else h


def linalg():
    # CuPy's det (getrfBatched, for a stack or a small matrix), inv of a stack (getrfBatched,
    # getriBatched) and solve of a stack (getrfBatched, getrsBatched), each precision.
    rng = np.random.default_rng(9)
    stack = rng.standard_normal((16, 24, 24)) + 6 * np.eye(24)
    imaginary = rng.standard_normal((16, 24, 24))
    rhs = rng.standard_normal((16, 24, 3))
    out = {}
    for dtype, tag in [(np.float32, "f32"), (np.float64, "f64"), (np.complex64, "c64"), (np.complex128, "c128")]:
        a = (stack + 1j * imaginary if np.dtype(dtype).kind == "c" else stack).astype(dtype)
        d = cp.asarray(a)
        out[f"det_{tag}"] = summary(parts(cp.linalg.det(d)))
        out[f"det_one_{tag}"] = summary(parts(cp.linalg.det(d[3])))
        out[f"inv_{tag}"] = summary(parts(cp.linalg.inv(d)))
        out[f"solve_{tag}"] = summary(parts(cp.linalg.solve(d, cp.asarray(rhs.astype(dtype)))))
    return out


def blas_extensions():
    # cupy.cublas's geam (a sum with a transpose), dgmm (a diagonal on either side), syrk (one
    # triangle of a symmetric product), each precision, and sbmv (a symmetric band), real ones.
    rng = np.random.default_rng(11)
    out = {}
    for dtype, tag in [(np.float32, "f32"), (np.float64, "f64"), (np.complex64, "c64"), (np.complex128, "c128")]:
        def draw(*shape):
            h = rng.standard_normal(shape)
            return cp.asarray((h + 1j * rng.standard_normal(shape) if np.dtype(dtype).kind == "c" else h).astype(dtype))

        a, b, x = draw(20, 30), draw(30, 20), draw(30)
        out[f"geam_{tag}"] = summary(parts(cupy.cublas.geam("N", "T", 1.5, a, -0.5, b)))
        out[f"dgmm_right_{tag}"] = summary(parts(cupy.cublas.dgmm("R", a, x)))
        out[f"dgmm_left_{tag}"] = summary(parts(cupy.cublas.dgmm("L", a, x[:20])))
        out[f"syrk_lower_{tag}"] = summary(parts(cupy.cublas.syrk("N", a, lower=True)))
        out[f"syrk_upper_{tag}"] = summary(parts(cupy.cublas.syrk("T", a, alpha=2.0)))
        if np.dtype(dtype).kind != "c":
            # A symmetric band of 3 diagonals each side, stored as 4 rows of 30 (upper, lower).
            band, y = draw(4, 30), draw(30)
            out[f"sbmv_upper_{tag}"] = summary(cupy.cublas.sbmv(3, 0.5, band, x, 2.0, y.copy()))
            out[f"sbmv_lower_{tag}"] = summary(cupy.cublas.sbmv(3, 0.5, band, x, 2.0, y.copy(), lower=True))
    return out


SECTIONS = [properties, elementwise, dot, reductions, raw_kernel, linalg, blas_extensions]


def main(argv):
    if len(argv) < 2:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    path = argv[1]
    results = {"info": {"cupy": cp.__version__}}
    failed = []
    for section in SECTIONS:
        name = section.__name__
        try:
            results[name] = section()
            cp.cuda.Device(0).synchronize()
            print(f"section {name}: ok", flush=True)
        except Exception as e:  # noqa: BLE001: every failure is recorded, by section
            failed.append(name)
            results[name] = {"error": f"{type(e).__name__}: {e}"}
            first = str(e).splitlines()[0] if str(e) else ""
            print(f"section {name}: FAILED: {type(e).__name__}: {first}", flush=True)
            traceback.print_exc()
    try:
        results["info"]["runtime"] = cp.cuda.runtime.runtimeGetVersion()
        results["info"]["driver"] = cp.cuda.runtime.driverGetVersion()
    except Exception as e:  # noqa: BLE001: information only
        results["info"]["versions"] = f"{type(e).__name__}: {e}"
    print_mapped()
    with open(path, "w", encoding="utf-8") as f:
        json.dump(results, f, indent=1, sort_keys=True)
    if failed:
        print(f"failed sections: {' '.join(failed)}; results in {path}")
        return 1
    print(f"done: {len(SECTIONS)} sections ran, results in {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
