#!/usr/bin/env python3
"""PyTorch, unmodified, through the CUDA shim (issue 48): what of PyTorch can run on the driver
stand-in, which runs the backend's builtin kernels but none of PyTorch's own: copies, and the
matmuls and FFTs PyTorch hands to cuBLAS, cuBLASLt and cuFFT (the shim's, LD_PRELOADed ahead of
the NVIDIA libraries PyTorch's RPATH names). Each operation on the device is compared with the
same one on the CPU (framework_check.py: its lines, its exit status). On a GPU, scripts/gpu-shim/torch_check.py runs the rest (conv2d, training, and what
PyTorch does with its own kernels around a library call: a complex-to-real FFT's copy of its
input, an addmm's scaling of its bias).
"""
import os
from functools import partial

import torch

import framework_check
from framework_check import finish

torch.backends.cuda.matmul.allow_tf32 = False
DEV = "cuda"
check = partial(framework_check.check, to_host=lambda t: t.cpu())


def rand(seed, *shape, dtype=torch.float32):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


print(f"devices {torch.cuda.device_count()}: {torch.cuda.get_device_name(0)}, capability {torch.cuda.get_device_capability(0)}")
# PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync: stream-ordered allocation from the driver's
# memory pool, and graph memory nodes in a capture; native: PyTorch's own caching allocator.
print(f"allocator {torch.cuda.get_allocator_backend()}")
a, b, bias = rand(1, 64, 48), rand(2, 48, 32), rand(3, 32)
at = rand(4, 48, 64)  # used transposed: cuBLAS's transpose flags, no copy
batch_a, batch_b = rand(5, 4, 16, 48), rand(6, 4, 48, 8)
v, w = rand(7, 48), rand(8, 48)
weight = rand(12, 32, 48)
a64, b64 = a.double(), b.double()  # converted here: a conversion on the device is PyTorch's kernel
F32, F64 = 1e-5, 1e-12
inputs = dict(a=a, b=b, bias=bias, at=at, ba=batch_a, bb=batch_b, v=v, w=w, weight=weight, a64=a64, b64=b64)
d = {name: t.to(DEV) for name, t in inputs.items()}
# PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True: segments grow by mapping physical memory
# into a reserved range (cuMemAddressReserve, cuMemCreate, cuMemMap), which PyTorch sets up
# only after asking NVML for the device by its PCI bus id.
if torch.cuda.get_allocator_backend() == "native":  # cudaMallocAsync's blocks are the driver's
    segments = torch.cuda.memory._snapshot()["segments"]
    print(f"segments {len(segments)}, expandable {sum(bool(s.get('is_expandable')) for s in segments)}")
if os.environ.get("PYTORCH_NVML_BASED_CUDA_CHECK") == "1":
    # Counted and named through NVML (libnvidia-ml.so.1), as the driver API counts and names them.
    uuids = torch.cuda._raw_device_uuid_nvml()
    same = [u.removeprefix("GPU-") for u in uuids] == [str(torch.cuda.get_device_properties(i).uuid) for i in range(torch.cuda.device_count())]
    print(f"nvml devices {torch.cuda._device_count_nvml()}, uuids {'as the driver says' if same else f'differ: {uuids}'}")

check("mm", lambda: d["a"] @ d["b"], lambda: a @ b, F32)
check("mm transposed", lambda: d["at"].t() @ d["b"], lambda: at.t() @ b, F32)
check("mm both transposed", lambda: d["at"].t() @ d["weight"].t(), lambda: at.t() @ weight.t(), F32)
check("mm of slices", lambda: d["a"][8:40, :40] @ d["b"][:40], lambda: a[8:40, :40] @ b[:40], F32)  # lda 48 > 40
check("mm f64", lambda: d["a64"] @ d["b64"], lambda: a64 @ b64, F64)
check("addmm", lambda: torch.addmm(d["bias"], d["a"], d["b"]), lambda: torch.addmm(bias, a, b), F32)
check("addmm scaled", lambda: torch.addmm(d["bias"], d["a"], d["b"], alpha=2.0), lambda: torch.addmm(bias, a, b, alpha=2.0), F32)
# torch._addmm_activation (what fused linear + ReLU / GELU layers call): cuBLASLt's RELU_BIAS and
# GELU_BIAS epilogues (GELU's tanh approximation).
check("addmm relu", lambda: torch._addmm_activation(d["bias"], d["a"], d["b"]), lambda: torch.relu(torch.addmm(bias, a, b)), F32)
check("addmm gelu", lambda: torch._addmm_activation(d["bias"], d["a"], d["b"], use_gelu=True), lambda: torch.nn.functional.gelu(torch.addmm(bias, a, b), approximate="tanh"), F32)
check("linear", lambda: torch.nn.functional.linear(d["a"], d["weight"], d["bias"]), lambda: torch.nn.functional.linear(a, weight, bias), F32)
check("bmm", lambda: torch.bmm(d["ba"], d["bb"]), lambda: torch.bmm(batch_a, batch_b), F32)
# One matrix for every batch: a batch stride of 0.
check("bmm broadcast", lambda: torch.bmm(d["ba"], d["b"].expand(4, 48, 32)), lambda: torch.bmm(batch_a, b.expand(4, 48, 32)), F32)
check("matmul broadcast", lambda: d["ba"] @ d["b"], lambda: batch_a @ b, F32)
check("mv", lambda: d["a"] @ d["v"], lambda: a @ v, F32)
check("dot", lambda: torch.dot(d["v"], d["w"]).reshape(1), lambda: torch.dot(v, w).reshape(1), F32)

# Half precision (cublasGemmEx, cublasGemmStridedBatchedEx and cuBLASLt on binary16 and bfloat16
# matrices, computed in f32 and rounded once): against the CPU's f32 product of the same
# half-precision inputs, within about one rounding of the result (binary16 keeps 11 bits,
# bfloat16 8).
F16, BF16 = 1e-3, 8e-3
for dtype, bound, tag in [(torch.float16, F16, "f16"), (torch.bfloat16, BF16, "bf16")]:
    h = {name: t.to(dtype) for name, t in inputs.items() if name in ("a", "b", "bias", "at", "ba", "bb", "weight")}
    dh = {name: t.to(DEV) for name, t in h.items()}
    f = {name: t.float() for name, t in h.items()}
    check(f"mm {tag}", lambda: dh["a"] @ dh["b"], lambda: f["a"] @ f["b"], bound)
    check(f"mm transposed {tag}", lambda: dh["at"].t() @ dh["b"], lambda: f["at"].t() @ f["b"], bound)
    check(f"bmm {tag}", lambda: torch.bmm(dh["ba"], dh["bb"]), lambda: torch.bmm(f["ba"], f["bb"]), bound)
    check(f"linear {tag}", lambda: torch.nn.functional.linear(dh["a"], dh["weight"], dh["bias"]), lambda: torch.nn.functional.linear(f["a"], f["weight"], f["bias"]), bound)
    check(f"addmm {tag}", lambda: torch.addmm(dh["bias"], dh["a"], dh["b"], alpha=2.0), lambda: torch.addmm(f["bias"], f["a"], f["b"], alpha=2.0), bound)
    # f32 results of half-precision inputs: nothing rounded but the f32 sums.
    check(f"mm {tag} to f32", lambda: torch.mm(dh["a"], dh["b"], out_dtype=torch.float32), lambda: f["a"] @ f["b"], F32)
    # cublasDotEx, executed in f32 and rounded once.
    vh, wh = v.to(dtype), w.to(dtype)
    check(f"dot {tag}", lambda: torch.dot(vh.to(DEV), wh.to(DEV)).reshape(1), lambda: torch.dot(vh.float(), wh.float()).reshape(1), bound)

# Complex products (cublasCgemm, cublasZgemm and their strided batches), one operand read
# conjugate-transposed (CUBLAS_OP_C: PyTorch's conjugate views cost no copy).
ca, cb, cat = (torch.complex(rand(s, *shape), rand(s + 1, *shape)) for s, shape in [(20, (64, 48)), (22, (48, 32)), (24, (48, 64))])
cba, cbb = torch.complex(rand(26, 4, 16, 48), rand(27, 4, 16, 48)), torch.complex(rand(28, 4, 48, 8), rand(29, 4, 48, 8))
for dtype, bound, tag in [(torch.complex64, F32, "c64"), (torch.complex128, F64, "c128")]:
    c = {name: t.to(dtype) for name, t in dict(a=ca, b=cb, at=cat, ba=cba, bb=cbb).items()}
    dc = {name: t.to(DEV) for name, t in c.items()}
    check(f"mm {tag}", lambda: dc["a"] @ dc["b"], lambda: c["a"] @ c["b"], bound)
    check(f"mm conjugate-transposed {tag}", lambda: dc["at"].mH @ dc["b"], lambda: c["at"].mH @ c["b"], bound)
    check(f"bmm {tag}", lambda: torch.bmm(dc["ba"], dc["bb"]), lambda: torch.bmm(c["ba"], c["bb"]), bound)
    # Level 1 and 2 (cublasCgemv, cublasCdotu, cublasCdotc and their double forms).
    cv, cw = (torch.complex(rand(s, 48), rand(s + 1, 48)).to(dtype) for s in (30, 32))
    check(f"mv {tag}", lambda: dc["a"] @ cv.to(DEV), lambda: c["a"] @ cv, bound)
    check(f"mv transposed {tag}", lambda: dc["at"].t() @ cv.to(DEV), lambda: c["at"].t() @ cv, bound)
    check(f"dot {tag}", lambda: torch.dot(cv.to(DEV), cw.to(DEV)).reshape(1), lambda: torch.dot(cv, cw).reshape(1), bound)
    check(f"vdot {tag}", lambda: torch.vdot(cv.to(DEV), cw.to(DEV)).reshape(1), lambda: torch.vdot(cv, cw).reshape(1), bound)

side = torch.cuda.Stream()
with torch.cuda.stream(side):
    on_side = d["a"] @ d["b"]
side.synchronize()
check("mm on a side stream", lambda: on_side, lambda: a @ b, F32)


def mm_in_a_graph():
    """A product captured in a CUDA graph (torch.cuda.graph: a side stream's capture, the shim's
    cuBLAS launches recorded), replayed after its input changed: the replay reads it."""
    x, out = d["a"].clone(), torch.empty(64, 32, device=DEV)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        torch.mm(x, d["b"], out=out)
    x.copy_(a * 2)
    graph.replay()
    return out


check("mm in a CUDA graph", mm_in_a_graph, lambda: (a * 2) @ b, F32)


def mm_allocating_in_a_graph():
    """A product whose output is allocated in the capture (with cudaMallocAsync, a graph
    allocation node: the same address at each replay), replayed twice with new input."""
    x = d["a"].clone()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = torch.mm(x, d["b"])
    results = []
    for factor in (3, 5):
        x.copy_(a * factor)
        graph.replay()
        results.append(out.cpu())
    return torch.cat(results)  # on the host: a concatenation on the device is PyTorch's kernel


check("mm allocating in a CUDA graph", mm_allocating_in_a_graph, lambda: torch.cat([(a * 3) @ b, (a * 5) @ b]), F32)

signal, image = rand(9, 4096), rand(10, 64, 64)
check("fft", lambda: torch.fft.fft(signal.to(torch.complex64).to(DEV)), lambda: torch.fft.fft(signal.to(torch.complex64)), F32)
check("fft f64", lambda: torch.fft.fft(signal.to(torch.complex128).to(DEV)), lambda: torch.fft.fft(signal.to(torch.complex128)), F64)
check("rfft", lambda: torch.fft.rfft(signal.to(DEV)), lambda: torch.fft.rfft(signal), F32)
check("rfft2", lambda: torch.fft.rfft2(image.to(DEV)), lambda: torch.fft.rfft2(image), F32)
complex_image = image.to(torch.complex64)
check("ifft2 unscaled", lambda: torch.fft.ifft2(complex_image.to(DEV), norm="forward"), lambda: torch.fft.ifft2(complex_image, norm="forward"), F32)
planes = rand(11, 3, 32, 32).to(torch.complex64)
check("fft2 batched", lambda: torch.fft.fft2(planes.to(DEV)), lambda: torch.fft.fft2(planes), F32)
# Half-precision FFTs (cufftXtMakePlanMany on CUDA_R_16F and CUDA_C_16F; PyTorch takes powers of
# two only): against the CPU's f32 transform of the same binary16 inputs, within one rounding of
# the result to binary16. Copied back as complex32 and widened on the CPU.
half_signal = signal[:1024].half()
half_complex = torch.complex(half_signal, half_signal.flip(0))
widened = dict(to_host=lambda t: t.cpu().to(torch.complex64))
check("rfft f16", lambda: torch.fft.rfft(half_signal.to(DEV)), lambda: torch.fft.rfft(half_signal.float()), F16, **widened)
check("fft f16", lambda: torch.fft.fft(half_complex.to(DEV)), lambda: torch.fft.fft(half_complex.to(torch.complex64)), F16, **widened)
check("ifft f16 unscaled", lambda: torch.fft.ifft(half_complex.to(DEV), norm="forward"), lambda: torch.fft.ifft(half_complex.to(torch.complex64), norm="forward"), F16, **widened)

torch.cuda.synchronize()
# A tensor larger than the session may hold (its quota): PyTorch's OutOfMemoryError, whose
# message asks NVML what the processes on the device hold, and the device goes on.
try:
    torch.empty(1 << 40, dtype=torch.uint8, device=DEV)
    print("out of memory: a 1 TiB tensor was allocated")
except torch.cuda.OutOfMemoryError as e:
    print(f"out of memory: {e}")
check("mm after running out of memory", lambda: d["a"] @ d["b"], lambda: a @ b, F32)
finish()
