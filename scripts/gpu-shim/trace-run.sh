#!/usr/bin/env bash
# Research on a GPU machine (not part of gpu-check): what the machine's own libcuda.so.1 answers
# for the private tables CUDA's math libraries use (export_tables.c), and a trace of their calls
# under a PyTorch matmul and FFT and a CuPy dot (trace_export_tables.c, written by gen-trace.py).
# Usage: scripts/gpu-shim/trace-run.sh OUT_DIR (python3 with PyTorch and CuPy, a C compiler).
set -u
out=${1:?usage: trace-run.sh OUT_DIR}
here=$(dirname "$0")
mkdir -p "$out"
cc -o "$out/export_tables" "$here/export_tables.c" -ldl && "$out/export_tables" >"$out/export-tables.txt" 2>&1
cc -shared -fPIC -o "$out/trace.so" "$here/trace_export_tables.c" -ldl || exit 3
LD_PRELOAD="$out/trace.so" timeout 120 python3 -c '
import torch
a = torch.randn(64, 64, device="cuda")
print("matmul", float((a @ a).sum()))
print("fft", float(torch.fft.fft(a).abs().sum()))
' >"$out/trace-torch.out" 2>"$out/trace-torch.err"
echo "torch: exit $?"
LD_PRELOAD="$out/trace.so" timeout 120 python3 -c '
import cupy as cp
a = cp.arange(16, dtype=cp.float32)
print("dot", float(a.dot(a)))
' >"$out/trace-cupy.out" 2>"$out/trace-cupy.err"
echo "cupy: exit $?"
rm -f "$out/trace.so" "$out/export_tables"
