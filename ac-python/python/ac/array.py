"""``DeviceArray``: an n-dimensional array in an accelerator's memory.

A device array is C-contiguous, with a numpy dtype and a shape, over a range of one device
buffer; slices along the first axis (and reshapes) are views over the same memory, usable as
kernel pointers. Copies are explicit: ``get()`` to the host, ``set()`` from it; numpy never
converts one implicitly (``np.asarray(a)`` raises ``TypeError``), so no network copy hides in
an expression.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Iterator, Optional, Sequence, Tuple, Union

import numpy as np
import numpy.typing as npt

from ac import _ac
from ac.errors import InvalidArgumentError

if TYPE_CHECKING:
    from ac.device import Accelerator

ShapeLike = Union[int, Sequence[int]]


def as_host_array(x: Any) -> npt.NDArray[Any]:
    """``x`` as a numpy array without copying: numpy arrays as they are, other buffer-protocol
    objects through their buffer (``bytes`` is bytes, not a string scalar), anything else (a
    list) through ``np.asarray``."""
    if isinstance(x, np.ndarray):
        return x
    try:
        view = memoryview(x)
    except TypeError:
        return np.asarray(x)
    return np.asarray(view)


def normalize_shape(shape: ShapeLike) -> Tuple[int, ...]:
    """A shape as a tuple of sizes >= 0."""
    dims = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
    out = tuple(int(d) for d in dims)
    if any(d < 0 for d in out):
        raise InvalidArgumentError(f"negative size in shape {out}", 2)
    return out


class DeviceArray:
    """An array in an accelerator's memory (C-contiguous)."""

    __slots__ = ("_ac_buffer", "_ac_offset", "_shape", "_dtype", "_accelerator", "__weakref__")

    def __init__(
        self,
        accelerator: "Accelerator",
        buffer: _ac.Buffer,
        offset: int,
        shape: Tuple[int, ...],
        dtype: np.dtype[Any],
    ) -> None:
        self._accelerator = accelerator
        self._ac_buffer = buffer
        self._ac_offset = offset
        self._shape = shape
        self._dtype = dtype

    # -- what it is ---------------------------------------------------------------------------

    @property
    def shape(self) -> Tuple[int, ...]:
        return self._shape

    @property
    def dtype(self) -> np.dtype[Any]:
        return self._dtype

    @property
    def ndim(self) -> int:
        return len(self._shape)

    @property
    def size(self) -> int:
        return math.prod(self._shape)

    @property
    def itemsize(self) -> int:
        return self._dtype.itemsize

    @property
    def nbytes(self) -> int:
        return self.size * self._dtype.itemsize

    @property
    def strides(self) -> Tuple[int, ...]:
        strides = []
        step = self._dtype.itemsize
        for dim in reversed(self._shape):
            strides.append(step)
            step *= dim
        return tuple(reversed(strides))

    @property
    def offset(self) -> int:
        """Where the array starts in its buffer, bytes."""
        return self._ac_offset

    @property
    def c_contiguous(self) -> bool:
        return True

    @property
    def accelerator(self) -> "Accelerator":
        return self._accelerator

    @property
    def buffer(self) -> _ac.Buffer:
        """The device buffer underneath (shared by every view of it)."""
        return self._ac_buffer

    def __len__(self) -> int:
        if not self._shape:
            raise TypeError("len() of a 0-d device array")
        return self._shape[0]

    def __repr__(self) -> str:
        return f"<ac.DeviceArray shape={self._shape} dtype={self._dtype} on {self._accelerator.id}>"

    # -- copies -------------------------------------------------------------------------------

    def get(self, out: Optional[npt.NDArray[Any]] = None, stream: Optional[_ac.Stream] = None) -> npt.NDArray[Any]:
        """Copies the array to the host: into ``out`` (a C-contiguous array of the same shape
        and dtype) or a new numpy array. It returns when the bytes have arrived and sees every
        earlier call's results, on every stream (``stream`` is accepted for CuPy's signature)."""
        del stream
        if out is None:
            out = np.empty(self._shape, self._dtype)
        else:
            self._check_host(out, "out")
            if not out.flags.c_contiguous or not out.flags.writeable:
                # reshape(-1) below would copy a strided `out`, and the bytes would land there.
                raise InvalidArgumentError("out must be a writable C-contiguous array", 2)
        if self.nbytes:
            self._ac_buffer.read(self._ac_offset, out.reshape(-1))  # a 0-d buffer has no shape
        return out

    def set(self, x: Any, stream: Optional[_ac.Stream] = None) -> None:
        """Copies a host array (anything numpy reads through the buffer protocol, zero-copy) of
        the same shape and dtype into this one: synchronous, or queued on ``stream`` (``x`` may
        be reused once this returns)."""
        host = as_host_array(x)
        self._check_host(host, "x")
        if not host.flags.c_contiguous:
            host = np.ascontiguousarray(host)
        if self.nbytes:
            self._ac_buffer.write(self._ac_offset, host.reshape(-1), stream)

    def _check_host(self, host: npt.NDArray[Any], name: str) -> None:
        if host.dtype != self._dtype:
            raise InvalidArgumentError(f"{name} is {host.dtype}, the device array {self._dtype}", 2)
        if host.shape != self._shape:
            raise InvalidArgumentError(f"{name} has shape {host.shape}, the device array {self._shape}", 2)

    def fill(self, byte: int, stream: Optional[_ac.Stream] = None) -> None:
        """Sets every byte to ``byte`` (``fill(0)`` zeroes any dtype)."""
        self._ac_buffer.memset(self._ac_offset, self.nbytes, byte, stream)

    def copy(self, stream: Optional[_ac.Stream] = None) -> "DeviceArray":
        """A new device array with the same contents, copied on the device."""
        other = self._accelerator.empty(self._shape, self._dtype)
        if self.nbytes:
            other._ac_buffer.copy_from(other._ac_offset, self._ac_buffer, self._ac_offset, self.nbytes, stream)
        return other

    def free(self) -> None:
        """Frees the whole buffer underneath now (every view of it too)."""
        self._ac_buffer.free()

    # -- views --------------------------------------------------------------------------------

    def reshape(self, *shape: Any) -> "DeviceArray":
        """The same memory with another shape (one size may be -1)."""
        given = shape[0] if len(shape) == 1 and not isinstance(shape[0], (int, np.integer)) else shape
        dims = [int(d) for d in given]
        if dims.count(-1) > 1 or any(d < -1 for d in dims):
            raise InvalidArgumentError(f"bad shape {tuple(dims)}: sizes >= 0, and at most one -1", 2)
        if -1 in dims:
            known = math.prod(d for d in dims if d != -1)
            dims[dims.index(-1)] = self.size // known if known else 0
        if math.prod(dims) != self.size:
            raise InvalidArgumentError(f"cannot reshape {self._shape} to {tuple(dims)}", 2)
        return DeviceArray(self._accelerator, self._ac_buffer, self._ac_offset, tuple(dims), self._dtype)

    def ravel(self) -> "DeviceArray":
        return self.reshape(-1)

    def __getitem__(self, key: Any) -> "DeviceArray":
        """Views: integers and a step-1 slice along the leading axes, then whole axes
        (``a[3]``, ``a[2:10]``, ``a[1, 4:8]``, ``a[5:, ...]``). A view that would not be
        contiguous raises ``InvalidArgumentError``."""
        keys = key if isinstance(key, tuple) else (key,)
        if keys.count(Ellipsis) > 1:
            raise InvalidArgumentError("at most one ... in an index", 2)
        if Ellipsis in keys:
            at = keys.index(Ellipsis)
            fill = len(self._shape) - (len(keys) - 1)
            keys = keys[:at] + (slice(None),) * fill + keys[at + 1 :]
        if len(keys) > len(self._shape):
            raise IndexError(f"too many indices for a {len(self._shape)}-d device array")
        offset = self._ac_offset
        strides = self.strides
        shape = list(self._shape)
        axis = 0
        out_shape: list[int] = []
        sliced = False
        for k in keys:
            if sliced:
                if not (isinstance(k, slice) and k == slice(None)):
                    raise InvalidArgumentError("device array views are contiguous: after a slice, take whole axes", 2)
                out_shape.append(shape[axis])
            elif isinstance(k, (int, np.integer)):
                i = int(k)
                n = shape[axis]
                if i < -n or i >= n:
                    raise IndexError(f"index {i} is out of bounds for axis {axis} with size {n}")
                offset += (i % n) * strides[axis]
            elif isinstance(k, slice):
                start, stop, step = k.indices(shape[axis])
                if step != 1:
                    raise InvalidArgumentError("device array views are contiguous: slices take step 1", 2)
                offset += start * strides[axis]
                out_shape.append(max(0, stop - start))
                sliced = True
            else:
                raise TypeError(f"device arrays are indexed by ints and slices, not {type(k).__name__}")
            axis += 1
        out_shape.extend(shape[axis:])
        return DeviceArray(self._accelerator, self._ac_buffer, offset, tuple(out_shape), self._dtype)

    def __iter__(self) -> Iterator["DeviceArray"]:
        for i in range(len(self)):
            yield self[i]

    # -- no implicit host copies (as CuPy) ----------------------------------------------------

    def __array__(self, dtype: Any = None, copy: Any = None) -> Any:
        raise TypeError(
            "Implicit conversion of an ac.DeviceArray to a NumPy array is not allowed: "
            "use .get() to copy it to the host explicitly"
        )

    __array_priority__ = -1000000.0
