"""``ac``: network-attached accelerators from Python.

    import numpy as np, ac
    with ac.init() as s:                      # AC_Init: the job's accelerators
        acc = s.accelerators[0]
        x = acc.to_device(np.arange(1 << 20, dtype=np.float32))
        y = acc.zeros(1 << 20, np.float32)
        saxpy = acc.builtin().get_function("saxpy")
        saxpy((4096,), (256,), (np.float32(2.0), x, y, np.uint64(1 << 20)))
        print(y.get()[:4])                    # waits for the launch, copies back

See the README's "Python" section: the ordering model, zero-copy rules, dtypes, threads, fork
and Ctrl-C.
"""

from ac._ac import Buffer, __version__
from ac.array import DeviceArray
from ac.device import Accelerator, Event, Stream, connect
from ac.errors import (
    DeviceRefusedError,
    DisconnectedError,
    Error,
    ForkError,
    InvalidArgumentError,
    InvalidHandleError,
    JobEndedError,
    KernelError,
    KernelFaultError,
    ManagerError,
    MpiError,
    OutOfMemoryError,
    RejectedError,
    RevokedError,
    TimeoutError,
)
from ac.kernel import Function, Module
from ac.session import AcceleratorSet, Expand, Keep, Preemption, Reconfiguration, Session, Shrink, init

__all__ = [
    "Accelerator",
    "AcceleratorSet",
    "Buffer",
    "DeviceArray",
    "DeviceRefusedError",
    "DisconnectedError",
    "Expand",
    "Error",
    "Event",
    "ForkError",
    "Function",
    "InvalidArgumentError",
    "InvalidHandleError",
    "JobEndedError",
    "Keep",
    "KernelError",
    "KernelFaultError",
    "ManagerError",
    "Module",
    "MpiError",
    "OutOfMemoryError",
    "Preemption",
    "Reconfiguration",
    "RejectedError",
    "RevokedError",
    "Session",
    "Shrink",
    "Stream",
    "TimeoutError",
    "__version__",
    "connect",
    "init",
]
