"""Arrays: every dtype round-trips exactly, any buffer goes zero-copy, views are offsets."""

from __future__ import annotations

import array

import numpy as np
import pytest

import ac

DTYPES = [
    np.bool_, np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32, np.int64, np.uint64,
    np.float16, np.float32, np.float64, np.longdouble, np.complex64, np.complex128,
]


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_every_dtype_round_trips_exactly(session, dtype):
    acc = session.accelerators[0]
    rng = np.random.default_rng(7)
    raw = rng.integers(0, 256, size=(37, 5) + (np.dtype(dtype).itemsize,), dtype=np.uint8)
    host = raw.view(dtype).reshape(37, 5)  # every bit pattern, NaNs and denormals included
    dev = acc.to_device(host)
    assert (dev.shape, dev.dtype, dev.nbytes) == (host.shape, host.dtype, host.nbytes)
    back = dev.get()
    assert back.dtype == host.dtype and back.shape == host.shape
    assert back.tobytes() == host.tobytes()


def test_any_buffer_protocol_object_goes_to_the_device(session):
    acc = session.accelerators[0]
    assert acc.to_device(b"\x01\x02\x03").get().tolist() == [1, 2, 3]
    assert acc.to_device(bytearray(b"xyz")).get().tobytes() == b"xyz"
    assert acc.to_device(array.array("i", [5, -6])).get().tolist() == [5, -6]
    assert acc.to_device(memoryview(np.arange(4.0))).get().tolist() == [0.0, 1.0, 2.0, 3.0]
    # A non-contiguous input is made contiguous first.
    strided = np.arange(20, dtype=np.int32)[::3]
    assert acc.to_device(strided).get().tolist() == strided.tolist()


def test_get_into_out_and_empty_arrays(session):
    acc = session.accelerators[0]
    dev = acc.to_device(np.arange(12, dtype=np.int64).reshape(3, 4))
    out = np.full((3, 4), -1, dtype=np.int64)
    assert dev.get(out=out) is out
    assert out.ravel().tolist() == list(range(12))
    empty = acc.empty((0, 4), np.float32)
    assert empty.get().shape == (0, 4) and empty.nbytes == 0


def test_views_are_offsets_into_one_buffer(session):
    acc = session.accelerators[0]
    host = np.arange(24, dtype=np.float32).reshape(6, 4)
    dev = acc.to_device(host)
    assert dev[2].get().tolist() == host[2].tolist()
    assert dev[1:4].get().tolist() == host[1:4].tolist()
    assert dev[-1].get().tolist() == host[-1].tolist()
    assert dev[5, 1:3].get().tolist() == host[5, 1:3].tolist()
    assert dev[2:, ...].shape == (4, 4)
    assert float(dev[3, 2].get()) == host[3, 2]
    assert dev[2:5].offset == 2 * 4 * 4 and dev[2:5].buffer is dev.buffer
    # Writing through a view changes only its range.
    dev[1:3].set(np.zeros((2, 4), np.float32))
    expect = host.copy()
    expect[1:3] = 0
    assert dev.get().tolist() == expect.tolist()
    assert dev.reshape(4, 6).get().tolist() == expect.reshape(4, 6).tolist()


def test_a_view_is_a_kernel_pointer(session):
    acc = session.accelerators[0]
    n = 1000
    x = acc.to_device(np.ones(n, np.float32))
    y = acc.zeros(n, np.float32)
    saxpy = acc.builtin().get_function("saxpy")
    # y[100:200] += 3 * x[500:600]
    saxpy(1, 128, (np.float32(3.0), x[500:600], y[100:200], np.uint64(100)))
    got = y.get()
    assert got[100:200].tolist() == [3.0] * 100
    assert got[:100].tolist() == [0.0] * 100 and got[200:].tolist() == [0.0] * 800


def test_views_that_would_not_be_contiguous_are_refused(session):
    acc = session.accelerators[0]
    dev = acc.zeros((4, 4), np.int32)
    with pytest.raises(ac.InvalidArgumentError, match="contiguous"):
        dev[::2]
    with pytest.raises(ValueError, match="contiguous"):
        dev[1:3, 1:3]
    with pytest.raises(IndexError):
        dev[4]


def test_numpy_never_converts_a_device_array_implicitly(session):
    dev = session.accelerators[0].zeros(3)
    with pytest.raises(TypeError, match=r"\.get\(\)"):
        np.asarray(dev)
    with pytest.raises(TypeError):
        np.add(dev, 1)


def test_copy_and_fill_run_on_the_device(session):
    acc = session.accelerators[0]
    a = acc.to_device(np.arange(8, dtype=np.uint16))
    b = a.copy()
    a.fill(0)
    assert b.get().tolist() == list(range(8))
    assert a.get().tolist() == [0] * 8
