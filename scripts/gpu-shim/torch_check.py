#!/usr/bin/env python3
"""An unmodified PyTorch program for the CUDA shim's GPU check (issue 48): device properties,
a 2048x2048 matmul, a conv2d, FFTs, the CUDA random generator, 50 steps of training a small
MLP with a fixed seed, binary16, bfloat16 and complex products, triangular solves, and batched
QR and least squares. scripts/gpu-check runs it twice, with the machine's own libcuda.so.1 and
through ac-cuda's, and compares the two result files (compare.py): the program itself knows
nothing of the shim.

Inputs are drawn on the CPU from fixed seeds, so both runs compute on the same numbers; TF32 is
off, so both runs' results differ by rounding at most. Each section is summarized (sum, sum of
absolute values, norm, a few values, shape) into a JSON file. A section that raises is recorded
with its error, the others still run, and the exit status is 1.

Usage: torch_check.py OUT.json [--device cpu]   (cpu: a dry run of the script, without a GPU)
"""
import json
import os
import sys
import traceback

# cuBLAS's deterministic workspace: both runs pick the same reduction order.
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

import torch  # noqa: E402 (after the environment it reads)
import torch.nn.functional as F  # noqa: E402

from mapped import print_mapped  # noqa: E402


def summary(t):
    """A tensor's sum, sum of absolute values, norm, first and last values, and shape; of a
    complex one, its magnitudes' (parts that are zero but for rounding have no relative error)."""
    t = t.detach()
    if t.is_complex():
        t = t.abs()
    flat = t.to("cpu", torch.float64).flatten()
    return {
        "shape": list(t.shape),
        "sum": flat.sum().item(),
        "abs_sum": flat.abs().sum().item(),
        "norm": flat.norm().item(),
        "first": flat[:4].tolist(),
        "last": flat[-4:].tolist(),
    }


def cpu_randn(seed, *shape):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g)


def properties(dev):
    if dev.type != "cuda":
        return {"device_count": 0, "name": "cpu"}
    p = torch.cuda.get_device_properties(dev)
    fields = ["name", "major", "minor", "multi_processor_count", "total_memory", "warp_size"]
    fields += ["max_threads_per_multi_processor", "L2_cache_size"]
    out = {f: getattr(p, f, None) for f in fields}
    out["device_count"] = torch.cuda.device_count()
    out["capability"] = list(torch.cuda.get_device_capability(dev))
    return out


def matmul(dev):
    a = cpu_randn(1, 2048, 2048).to(dev)
    b = cpu_randn(2, 2048, 2048).to(dev)
    return summary(a @ b)


def conv2d(dev):
    x = cpu_randn(3, 8, 3, 64, 64).to(dev)
    w = cpu_randn(4, 16, 3, 3, 3).to(dev)
    bias = cpu_randn(5, 16).to(dev)
    y = F.conv2d(x, w, bias, padding=1)
    return {"conv": summary(y), "relu_pool": summary(F.max_pool2d(F.relu(y), 2))}


def fft(dev):
    x = cpu_randn(6, 4096).to(dev)
    img = cpu_randn(7, 256, 256).to(dev)
    spectrum = torch.fft.fft(x)
    return {
        "fft": summary(spectrum),
        "fft_phase_sum": torch.angle(spectrum[1:64]).abs().sum().item(),
        "rfft2": summary(torch.fft.rfft2(img)),
        "round_trip": summary(torch.fft.ifft(spectrum).real),
        # cuFFT in binary16 (the shim: dft_ex, computed in f32 and rounded once).
        "rfft2_f16": magnitudes(torch.fft.rfft2(img[:64, :64].half()).to(torch.complex64)),
    }


def rng(dev):
    # The device's own generator (Philox kernels): the same seed gives the same numbers.
    g = torch.Generator(device=dev).manual_seed(8)
    return summary(torch.rand(1 << 20, device=dev, generator=g))


def training(dev):
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10)
    ).to(dev)
    x = cpu_randn(9, 512, 64).to(dev)
    y = torch.randint(0, 10, (512,), generator=torch.Generator().manual_seed(10)).to(dev)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    losses = []
    for _ in range(50):
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return {
        "losses_every_10": losses[::10] + [losses[-1]],
        "first_loss": losses[0],
        "last_loss": losses[-1],
        "weights": {name: summary(p)["norm"] for name, p in model.named_parameters()},
    }


def magnitudes(t):
    """A result's shape, norm, sum of absolute values and a sum of them weighted by position
    (1 to 7, cycling: a result transposed or misplaced changes it), taken on the CPU in f64:
    aggregates that one rounding more or less per element (a half-precision result's, cuBLAS's
    tensor cores against the shim's f32 sums) moves far less than the 1e-3 the comparison
    allows."""
    flat = t.detach().to("cpu").abs().to(torch.float64).flatten()
    weights = torch.arange(flat.numel(), dtype=torch.float64) % 7 + 1
    return {"shape": list(t.shape), "norm": flat.norm().item(), "abs_sum": flat.sum().item(), "weighted": (flat * weights).sum().item()}


def reduced_and_complex(dev):
    # binary16 and bfloat16 products (cublasGemmEx, cuBLASLt with a bias), complex ones
    # (cublasCgemm, cublasZgemm; a conjugate transpose read as CUBLAS_OP_C).
    a, b, bias = cpu_randn(11, 512, 256), cpu_randn(12, 256, 384), cpu_randn(13, 384)
    out = {}
    for dtype, tag in [(torch.float16, "f16"), (torch.bfloat16, "bf16")]:
        x, y, z = (t.to(dtype).to(dev) for t in (a, b, bias))
        out[f"mm_{tag}"] = magnitudes(x @ y)
        out[f"linear_{tag}"] = magnitudes(F.linear(x, y.t(), z))
    ca = torch.complex(cpu_randn(14, 128, 96), cpu_randn(15, 128, 96))
    cb = torch.complex(cpu_randn(16, 96, 64), cpu_randn(17, 96, 64))
    for dtype, tag in [(torch.complex64, "c64"), (torch.complex128, "c128")]:
        x, y = ca.to(dtype).to(dev), cb.to(dtype).to(dev)
        out[f"mm_{tag}"] = magnitudes(x @ y)
        out[f"gram_{tag}"] = magnitudes(x.mH @ x)
    return out


def triangular_solves(dev):
    # torch.linalg.solve_triangular (cuBLAS's trsm; PyTorch's own kernels copy around it, which
    # is why the stand-in's torch_math.py cannot run it): lower and upper, left and right, a unit
    # diagonal, real and complex, a batch (trsmBatched).
    tri = torch.tril(cpu_randn(18, 256, 256)) + 16 * torch.eye(256)
    rhs, row = cpu_randn(19, 256, 32), cpu_randn(20, 32, 256)
    out = {}
    for dtype, tag in [(torch.float32, "f32"), (torch.float64, "f64"), (torch.complex64, "c64")]:
        a = (tri if not dtype.is_complex else torch.complex(tri, torch.tril(cpu_randn(21, 256, 256), -1))).to(dtype).to(dev)
        b, r = rhs.to(dtype).to(dev), row.to(dtype).to(dev)
        out[f"lower_{tag}"] = magnitudes(torch.linalg.solve_triangular(a, b, upper=False))
        out[f"upper_right_unit_{tag}"] = magnitudes(torch.linalg.solve_triangular(a.mH, r, upper=True, left=False, unitriangular=True))
    batch = torch.stack([tri[:64, :64] + i * torch.eye(64) for i in range(4)]).to(dev)
    out["batched_f32"] = magnitudes(torch.linalg.solve_triangular(batch, cpu_randn(22, 4, 64, 8).to(dev), upper=False))
    return out


def householder(dev):
    # torch.geqrf and torch.linalg.lstsq of small matrices in a batch: PyTorch takes cuBLAS's
    # geqrfBatched and gelsBatched (the shim's blas_<t>geqrf and blas_<t>gels) for m <= 256 and
    # a batch of at least max(2, m / 16); R, the taus and the solutions follow LAPACK's sign
    # conventions on both runs, so they compare directly.
    a, b = cpu_randn(23, 64, 16, 8), cpu_randn(24, 64, 16, 2)
    out = {}
    for dtype, tag in [(torch.float32, "f32"), (torch.float64, "f64"), (torch.complex64, "c64")]:
        x = (a if not dtype.is_complex else torch.complex(a, cpu_randn(25, 64, 16, 8))).to(dtype).to(dev)
        y = (b if not dtype.is_complex else torch.complex(b, cpu_randn(26, 64, 16, 2))).to(dtype).to(dev)
        qr, tau = torch.geqrf(x)
        out[f"geqrf_r_{tag}"] = magnitudes(torch.triu(qr))
        out[f"geqrf_tau_{tag}"] = magnitudes(tau)
        out[f"lstsq_{tag}"] = magnitudes(torch.linalg.lstsq(x, y).solution)
    return out


SECTIONS = [properties, matmul, conv2d, fft, rng, training, reduced_and_complex, triangular_solves, householder]


def main(argv):
    if len(argv) < 2:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    path = argv[1]
    dev = torch.device(argv[argv.index("--device") + 1] if "--device" in argv else "cuda")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.deterministic = True
    results = {"info": {"torch": torch.__version__, "cuda": torch.version.cuda}}
    failed = []
    for section in SECTIONS:
        name = section.__name__
        try:
            results[name] = section(dev)
            if dev.type == "cuda":
                torch.cuda.synchronize(dev)
            print(f"section {name}: ok", flush=True)
        except Exception as e:  # noqa: BLE001: every failure is recorded, by section
            failed.append(name)
            results[name] = {"error": f"{type(e).__name__}: {e}"}
            print(f"section {name}: FAILED: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}", flush=True)
            traceback.print_exc()
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
