#!/usr/bin/env python3
"""PyTorch, unmodified, through the CUDA shim: `torch.cuda.device_count()` asks NVML, which
starts no CUDA ("will NOT poison fork if NVML discovery succeeds", its docs say), so a program
may fork workers after it that use CUDA, as servers and data loaders do. Two children forked
after the count each copy a tensor there and back and multiply two matrices on the device (the
shim's cuBLAS, LD_PRELOADed); then the parent does. Lines and exit status as framework_check.py's.
tests/tests/e2e/cuda_frameworks.rs runs it.
"""
import os
import sys
from functools import partial

import torch

import framework_check
from framework_check import finish

check = partial(framework_check.check, to_host=lambda t: t.cpu())
count = torch.cuda.device_count()
print(f"counted {count}; CUDA started before the fork: {torch.cuda.is_initialized()}", flush=True)
x = torch.arange(4096, dtype=torch.float32)
a = torch.randn(32, 24, generator=torch.Generator().manual_seed(1))
b = torch.randn(24, 16, generator=torch.Generator().manual_seed(2))


def compute(who):
    check(f"{who} copy", lambda: x.to("cuda"), lambda: x, 0)
    check(f"{who} mm", lambda: a.to("cuda") @ b.to("cuda"), lambda: a @ b, 1e-5)


children = []
for k in range(2):
    child = os.fork()
    if child == 0:
        compute(f"child {k}")
        sys.stdout.flush()
        # Through exit(): the shim's exit handler gives the child's session back.
        sys.exit(1 if framework_check.failures else 0)
    children.append(child)
for k, child in enumerate(children):
    _, status = os.waitpid(child, 0)
    code = os.waitstatus_to_exitcode(status)
    print(f"child {k} exited with {code}", flush=True)
    if code != 0:
        framework_check.failures.append(f"child {k}")
print(f"devices {torch.cuda.device_count()}: {torch.cuda.get_device_name(0)}")
compute("parent")
finish()
