"""``Accelerator``: one remote accelerator of the session; streams and events."""

from __future__ import annotations

import math
from typing import Any, Dict, Optional, Sequence, Tuple

import numpy as np
import numpy.typing as npt

from ac import _ac
from ac.array import DeviceArray, ShapeLike, as_host_array, normalize_shape
from ac.kernel import Module

Stream = _ac.Stream


class Accelerator:
    """A remote accelerator (a connection to its backend). Threads may share one: each thread's
    calls take effect in the order it made them."""

    __slots__ = ("_raw", "__weakref__")

    def __init__(self, raw: _ac.Accelerator) -> None:
        self._raw = raw

    @property
    def id(self) -> str:
        """Its id at the resource manager (``host/device``)."""
        return self._raw.id

    @property
    def name(self) -> str:
        return self._raw.name

    @property
    def kind(self) -> str:
        """``"cuda"`` or ``"cpu"`` (the CPU-emulated device)."""
        return self._raw.kind

    @property
    def memory_total(self) -> int:
        return self._raw.memory_total

    @property
    def compute_capability(self) -> Optional[Tuple[int, int]]:
        return self._raw.compute_capability

    def info(self) -> Dict[str, Any]:
        """The device's state now (asks the backend): name, kind, memory total and free."""
        return self._raw.info()

    def telemetry(self) -> Dict[str, Any]:
        """What the device's sensors read now (asks the backend, protocol 15), as the GPU host's
        NVML reads them: ``utilization_gpu`` and ``utilization_memory`` (percent),
        ``temperature_c``, ``power_mw``, ``power_limit_mw``, ``power_management_limit_mw``,
        ``energy_mj``, ``clocks_mhz`` and ``max_clocks_mhz`` (``graphics``, ``sm``, ``memory``,
        ``video``) and ``performance_state``, each ``None`` where the device cannot say (a CPU
        device, a host without NVML); and ``session_memory``, the bytes this session holds."""
        return self._raw.telemetry()

    def ping(self) -> None:
        """A round trip to the backend."""
        self._raw.ping()

    def synchronize(self) -> None:
        """Waits for all work sent so far, on every stream; raises the first failure of it."""
        self._raw.synchronize()

    # -- memory -------------------------------------------------------------------------------

    def empty(self, shape: ShapeLike, dtype: npt.DTypeLike = np.float64) -> DeviceArray:
        """An uninitialized device array."""
        dims = normalize_shape(shape)
        dt = np.dtype(dtype)
        nbytes = math.prod(dims) * dt.itemsize
        # Devices allocate no empty buffers: an empty array holds one byte.
        return DeviceArray(self, self._raw.alloc(max(nbytes, 1)), 0, dims, dt)

    def zeros(self, shape: ShapeLike, dtype: npt.DTypeLike = np.float64) -> DeviceArray:
        """A device array of zeros (a memset on the device: no bytes cross the network)."""
        array = self.empty(shape, dtype)
        if array.nbytes:
            array.fill(0)
        return array

    def to_device(self, x: Any, stream: Optional[Stream] = None) -> DeviceArray:
        """A device array with the contents of ``x`` (a numpy array, or any buffer-protocol
        object: sent zero-copy, with the GIL released; a non-contiguous one is made contiguous
        first)."""
        host = np.ascontiguousarray(as_host_array(x))
        array = self.empty(host.shape, host.dtype)
        array.set(host, stream)
        return array

    # -- kernels ------------------------------------------------------------------------------

    def builtin(self) -> Module:
        """The backend's builtin kernels (``saxpy``, ``vadd``, ...)."""
        return Module(self._raw.builtin())

    def load_ptx(self, source: str) -> Module:
        return Module(self._raw.load_ptx(source))

    def load_cubin(self, image: bytes) -> Module:
        """A cubin or fatbin image (``nvcc -cubin`` / ``-fatbin``)."""
        return Module(self._raw.load_cubin(image))

    def compile(self, source: str, options: Sequence[str] = ()) -> Module:
        """CUDA C++ compiled by NVRTC on the backend (``extern "C" __global__`` kernels)."""
        return Module(self._raw.compile(source, list(options)))

    # -- streams ------------------------------------------------------------------------------

    def create_stream(self) -> Stream:
        """A new stream: its work runs in order, concurrently with other streams'."""
        return self._raw.create_stream()

    @property
    def default_stream(self) -> Stream:
        return self._raw.default_stream

    def __repr__(self) -> str:
        return repr(self._raw)


def connect(addr: Optional[str] = None, ca_cert: Optional[str] = None) -> Accelerator:
    """One backend, directly, without the resource manager (a GPU host's check, a benchmark):
    ``addr`` (``host:port``) and ``ca_cert`` (its CA's PEM file), or ``AC_BACKEND_ADDR`` and
    ``AC_CA_CERT``. Programs of a job use ``ac.init()`` instead."""
    return Accelerator(_ac.Accelerator.connect(addr, ca_cert))


class Event:
    """A point in a stream's work. ``synchronize()`` returns once the work recorded before it
    has run (it waits on the stream, so it may also wait for work queued after the record)."""

    __slots__ = ("_stream",)

    def __init__(self) -> None:
        self._stream: Optional[Stream] = None

    def record(self, stream: Stream) -> None:
        self._stream = stream

    def synchronize(self) -> None:
        if self._stream is None:
            raise RuntimeError("the event was never recorded")
        self._stream.synchronize()
