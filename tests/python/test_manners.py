"""Manners: threads share an accelerator, Ctrl-C interrupts a wait and leaves the session whole,
a forked child is refused, the garbage collector frees remote memory, streams and events."""

from __future__ import annotations

import gc
import os
import signal
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest

import ac


def test_eight_threads_share_an_accelerator(session):
    acc = session.accelerators[0]
    saxpy = acc.builtin().get_function("saxpy")
    failures: list[str] = []

    def work(t: int) -> None:
        try:
            for i in range(25):
                n = 256 + t
                x = acc.to_device(np.full(n, t + 1, np.float32))
                y = acc.to_device(np.full(n, i, np.float32))
                saxpy((n + 127) // 128, 128, (np.float32(2.0), x, y, np.uint64(n)))
                got = y.get()  # this thread's order: after its own launch
                if not (got == 2.0 * (t + 1) + i).all():
                    failures.append(f"thread {t} round {i}: {got[:4]}")
        except Exception as e:  # noqa: BLE001 - reported below
            failures.append(f"thread {t}: {e!r}")

    threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []


def run_script(pool, body: str, *, until: str, then_signal: bool = True) -> subprocess.CompletedProcess:
    """Runs ``body`` in a child Python with the pool's environment; once it prints ``until``,
    sends it SIGINT. Returns what it printed."""
    script = "import numpy as np, ac, sys, time\n" + textwrap.dedent(body)
    env = {**os.environ, **pool.session_env()}
    child = subprocess.Popen([sys.executable, "-c", script], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = []
    assert child.stdout is not None
    for line in child.stdout:
        lines.append(line)
        if until in line:
            break
    if then_signal:
        child.send_signal(signal.SIGINT)
    rest, _ = child.communicate(timeout=60)
    return subprocess.CompletedProcess(child.args, child.returncode, "".join(lines) + rest, "")


def test_ctrl_c_interrupts_a_long_wait_and_the_session_goes_on(pool):
    # The pool has 2 accelerators, the job holds 1: a get of 2 waiting 60 s cannot be granted.
    done = run_script(
        pool,
        """
        s = ac.init()
        acc = s.accelerators[0]
        start = time.monotonic()
        try:
            print("waiting", flush=True)
            s.get(2, wait=60)
            print("not interrupted")
        except KeyboardInterrupt:
            print(f"interrupted after {time.monotonic() - start:.1f} s", flush=True)
        assert acc.to_device(np.arange(5)).get().tolist() == [0, 1, 2, 3, 4]
        print("session goes on")
        s.finalize()
        """,
        until="waiting",
    )
    assert done.returncode == 0, done.stdout
    assert "interrupted after" in done.stdout and "session goes on" in done.stdout, done.stdout
    waited = float(done.stdout.split("interrupted after ")[1].split(" s")[0])
    assert waited < 50, done.stdout  # not the 60 s the get would have waited


def test_ctrl_c_during_copies_leaves_no_half_done_copy(pool):
    done = run_script(
        pool,
        """
        s = ac.init()
        acc = s.accelerators[0]
        big = np.ones(6 << 20, np.float64)  # 48 MiB of a 64 MiB device
        dev = acc.empty(big.shape, big.dtype)
        try:
            print("copying", flush=True)
            while True:
                dev.set(big)
                dev.get(out=big)
        except KeyboardInterrupt:
            print("interrupted", flush=True)
        # Whatever the interrupted call was, the connection carries whole copies on.
        small = np.arange(1000, dtype=np.float64)
        dev[:1000].set(small)
        assert dev[:1000].get().tolist() == small.tolist()
        dev.set(np.full(big.shape, 7.0))
        assert (dev.get() == 7.0).all()
        print("copies whole", flush=True)
        s.finalize()
        """,
        until="copying",
    )
    assert done.returncode == 0, done.stdout
    assert "interrupted" in done.stdout and "copies whole" in done.stdout, done.stdout


def test_a_forked_child_is_refused_and_the_parent_goes_on(session):
    acc = session.accelerators[0]
    dev = acc.to_device(np.arange(6))
    pid = os.fork()
    if pid == 0:  # the child: every call refuses; dropping the objects touches nothing
        code = 1
        try:
            dev.get()
        except ac.ForkError as e:
            code = 0 if "forked" in str(e) else 2
        except BaseException:  # noqa: BLE001
            code = 3
        try:
            acc.ping()
            code = 4
        except ac.ForkError:
            pass
        del dev
        gc.collect()
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert dev.get().tolist() == [0, 1, 2, 3, 4, 5]
    acc.ping()


def test_the_garbage_collector_frees_remote_memory(session):
    acc = session.accelerators[0]
    free_before = acc.info()["memory_free"]
    for _ in range(5):
        # 48 MiB of the 64 MiB device: a second one fits only once the first is freed.
        a = acc.empty(48 << 20, np.uint8)
        assert acc.info()["memory_free"] <= free_before - (48 << 20)
        del a
        gc.collect()
    acc.ping()
    assert acc.info()["memory_free"] == free_before
    b = acc.empty(8, np.uint8)
    b.free()
    with pytest.raises(ac.InvalidHandleError):
        b.get()


def test_streams_order_their_work_and_events_wait_for_it(session):
    acc = session.accelerators[0]
    stream = acc.create_stream()
    n = 4096
    x = acc.empty(n, np.float32)
    y = acc.zeros(n, np.float32)
    host = np.arange(n, dtype=np.float32)
    x.set(host, stream=stream)
    saxpy = acc.builtin().get_function("saxpy")
    saxpy[(n + 255) // 256, 256, stream](np.float32(0.5), x, y, np.uint64(n))
    event = ac.Event()
    event.record(stream)
    event.synchronize()
    assert (y.get() == host * 0.5).all()
    stream.synchronize()
    assert stream.id != acc.default_stream.id


def test_a_launch_error_surfaces_at_the_next_synchronizing_call(session):
    acc = session.accelerators[0]
    x = acc.zeros(4, np.float32)
    saxpy = acc.builtin().get_function("saxpy")
    saxpy(1, 4, (np.float32(1.0), x, x, np.uint64(1 << 20)))  # past the end: returns at once
    with pytest.raises(ac.Error) as e:
        acc.synchronize()
    assert isinstance(e.value, ac.InvalidArgumentError), e.value
    acc.ping()


def test_the_context_managers_release_on_exit(pool):
    with ac.init() as s:
        with s.get(1) as more:
            assert len(more) == 1
        assert more.freed
    assert s.finalized
