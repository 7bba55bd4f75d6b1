#!/usr/bin/env python3
"""PyTorch, unmodified, through the CUDA shim: CUDA tensors shared between processes by
`torch.multiprocessing` (its `spawn` start method, as PyTorch requires for CUDA), which sends a
storage's CUDA IPC memory handle and an interprocess event's handle, and rebuilds the tensor in
the receiver (`cudaIpcOpenMemHandle`, `cudaIpcOpenEventHandle`, `cudaStreamWaitEvent`).

The parent copies a tensor to the device and sends it; the child (a process of the same job:
`ARM_JOB_ID` and its credential, inherited) reads it, writes into it, multiplies it on the
device (the shim's cuBLAS) and sends its own result back; the parent reads both. Lines and exit
status as framework_check.py's. tests/tests/e2e/cuda_frameworks.rs runs it.
"""
import os
import sys
from functools import partial

import torch
import torch.multiprocessing as mp

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import framework_check  # noqa: E402 (after the path it lies on)
from framework_check import finish  # noqa: E402

check = partial(framework_check.check, to_host=lambda t: t.cpu())
base = torch.arange(4096, dtype=torch.float32)
identity = 2 * torch.eye(64)


def child(inbox, outbox, done):
    """Reads the parent's tensor, doubles it in place, and sends back a product of its own."""
    shared = inbox.get()
    check("child reads the parent's tensor", lambda: shared, lambda: base, 0)
    shared.copy_(base * 2)
    product = shared.view(64, 64) @ identity.to("cuda")
    check("child multiplies it", lambda: product, lambda: (base * 2).view(64, 64) @ identity, 1e-6)
    outbox.put(product)
    # The parent opened the product by its handle: this process holds it until the parent is done.
    done.get()
    sys.stdout.flush()
    sys.exit(1 if framework_check.failures else 0)


def in_expandable_segment(tensor):
    """Whether the caching allocator placed `tensor` in an expandable segment (virtual memory
    management), as its memory snapshot says."""
    at = tensor.data_ptr()
    for segment in torch.cuda.memory_snapshot():
        if segment["address"] <= at < segment["address"] + segment["total_size"]:
            return segment.get("is_expandable", False)
    return False


def main():
    print(f"devices {torch.cuda.device_count()}: {torch.cuda.get_device_name(0)}", flush=True)
    context = mp.get_context("spawn")
    inbox, outbox, done = context.Queue(), context.Queue(), context.Queue()
    shared = base.to("cuda")
    if "expandable_segments:True" in os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""):
        expandable = lambda: torch.tensor([float(in_expandable_segment(shared))])  # noqa: E731
        check("tensor lies in an expandable segment", expandable, lambda: torch.tensor([1.0]), 0)
    worker = context.Process(target=child, args=(inbox, outbox, done))
    worker.start()
    inbox.put(shared)
    product = outbox.get(timeout=120)
    check("parent sees the child's writes", lambda: shared, lambda: base * 2, 0)
    check("parent reads the child's product", lambda: product, lambda: (base * 2).view(64, 64) @ identity, 1e-6)
    del product
    done.put(True)
    worker.join(timeout=120)
    print(f"child exited with {worker.exitcode}", flush=True)
    if worker.exitcode != 0:
        framework_check.failures.append("child")
    finish()


if __name__ == "__main__":
    main()
