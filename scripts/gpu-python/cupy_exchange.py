"""scripts/gpu-check's Python stage: data made by CuPy on the local GPU goes to a remote
accelerator through a host array, is computed on there, and comes back to CuPy the same way.

    AC_BACKEND_ADDR=... AC_CA_CERT=... python cupy_exchange.py
"""

import cupy as cp
import numpy as np

import ac

N = 1 << 22

with ac.init() as session:
    acc = session.accelerators[0]
    made = cp.arange(N, dtype=cp.float32) * cp.float32(0.5)  # by CuPy, on this GPU
    x = acc.to_device(cp.asnumpy(made))  # a host array, then the remote accelerator
    y = acc.to_device(np.ones(N, np.float32))
    acc.builtin().get_function("saxpy")(N // 256, 256, (2.0, x, y, N))
    back = cp.asarray(y.get())  # the remote result, back to CuPy through a host array
    expect = made * cp.float32(2.0) + cp.float32(1.0)
    if not bool(cp.all(back == expect)):
        raise SystemExit(f"cupy exchange: {int(cp.count_nonzero(back != expect))} of {N} values differ")
    print(f"cupy exchange OK: {N} values from CuPy to {acc.id} ({acc.name}) and back, exact")
