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
import time

import numpy as np
import pytest

import ac
from pool import BIN, Pool


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


def queued_gets(pool) -> int:
    """How many AC_Get requests wait at the manager."""
    return int(pool.armctl_json("status")["queue"]["waiting_requests"])


def wait_for(condition, seconds: float = 30.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return False


def wait_for_queued_get(pool) -> None:
    assert wait_for(lambda: queued_gets(pool) == 1), pool.armctl("status")


def run_script(pool, body: str, *, until: str, then_signal: bool = True, before_signal=None) -> subprocess.CompletedProcess:
    """Runs ``body`` in a child Python with the pool's environment; once it prints ``until``
    (and ``before_signal()`` returned), sends it SIGINT. Returns what it printed."""
    script = "import numpy as np, ac, sys, time\n" + textwrap.dedent(body)
    env = {**os.environ, **pool.env, **pool.session_env(), "AC_TEST_ARMCTL": str(BIN / "armctl")}
    child = subprocess.Popen([sys.executable, "-c", script], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = []
    assert child.stdout is not None
    for line in child.stdout:
        lines.append(line)
        if until in line:
            break
    if then_signal:
        if before_signal is not None:
            before_signal()
        child.send_signal(signal.SIGINT)
    rest, _ = child.communicate(timeout=60)
    return subprocess.CompletedProcess(child.args, child.returncode, "".join(lines) + rest, "")


def test_ctrl_c_interrupts_a_long_wait_and_the_session_goes_on(pool):
    # The pool has 2 accelerators, the job holds 1: a get of 2 waiting 60 s cannot be granted.
    # SIGINT goes once the manager shows the request waiting: the program is in the wait. The
    # program then sees (armctl) that its abandoned request was withdrawn, before it finalizes.
    done = run_script(
        pool,
        """
        import json, os, subprocess
        def waiting():
            out = subprocess.run([os.environ["AC_TEST_ARMCTL"], "--json", "status"], capture_output=True, text=True)
            return json.loads(out.stdout)["queue"]["waiting_requests"]
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
        print("session goes on", flush=True)
        for _ in range(300):
            if waiting() == 0:
                print("withdrawn at the manager", flush=True)
                break
            time.sleep(0.1)
        s.finalize()
        """,
        until="waiting",
        before_signal=lambda: wait_for_queued_get(pool),
    )
    assert done.returncode == 0, done.stdout
    assert "interrupted after" in done.stdout and "session goes on" in done.stdout, done.stdout
    waited = float(done.stdout.split("interrupted after ")[1].split(" s")[0])
    assert waited < 50, done.stdout  # not the 60 s the get would have waited
    assert "withdrawn at the manager" in done.stdout, done.stdout


def test_ctrl_c_during_copies_leaves_the_connection_whole(pool):
    # 4 MiB copies go on QUIC streams (lanes carry 8 MiB and more), so SIGINT may drop one
    # halfway: the next copies must still be whole.
    done = run_script(
        pool,
        """
        s = ac.init()
        acc = s.accelerators[0]
        big = np.ones(1 << 19, np.float64)  # 4 MiB
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


def test_a_forked_child_is_refused_and_the_parent_goes_on(pool):
    # The child ends as a program does: its interpreter exits and drops everything it has of
    # the parent's (session, sets, accelerators, buffers, streams, modules).
    done = run_script(
        pool,
        """
        import os
        s = ac.init()
        acc = s.accelerators[0]
        more = s.get(1)
        dev = acc.to_device(np.arange(6))
        stream = acc.create_stream()
        saxpy = acc.builtin().get_function("saxpy")
        pid = os.fork()
        if pid == 0:
            for call in (dev.get, acc.ping, lambda: s.get(1), s.finalize, lambda: more[0].ping()):
                try:
                    call()
                    print("child: a call went through", flush=True)
                except ac.ForkError as e:
                    assert "forked" in str(e)
            print("child: every call refused", flush=True)
            sys.exit(0)  # a normal exit: the objects are dropped
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert dev.get().tolist() == [0, 1, 2, 3, 4, 5]
        x, y = acc.to_device(np.ones(6, np.float32)), acc.zeros(6, np.float32)
        saxpy(1, 8, (2.0, x, y, 6))
        assert y.get().tolist() == [2.0] * 6
        stream.synchronize()
        more[0].ping()
        s.free(more)
        s.finalize()
        print("parent goes on", flush=True)
        """,
        until="",
        then_signal=False,
    )
    assert done.returncode == 0, done.stdout
    assert "child: every call refused" in done.stdout and "went through" not in done.stdout, done.stdout
    assert "parent goes on" in done.stdout, done.stdout


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


def test_telemetry_of_a_cpu_device_reads_no_sensors_and_counts_the_sessions_memory(session):
    acc = session.accelerators[0]
    before = acc.telemetry()
    held = acc.empty(3 << 20, np.uint8)
    now = acc.telemetry()
    assert now["session_memory"] == before["session_memory"] + (3 << 20)
    # A CPU device has no sensors: every reading is None, each clock domain's too.
    readings = {k: v for k, v in now.items() if k != "session_memory"}
    assert len(readings) == 10 and all(v is None for k, v in readings.items() if "clocks" not in k), readings
    assert now["clocks_mhz"] == now["max_clocks_mhz"] == {"graphics": None, "sm": None, "memory": None, "video": None}
    del held
    gc.collect()
    acc.synchronize()
    assert acc.telemetry()["session_memory"] == before["session_memory"]


def test_streams_order_their_work_and_events_wait_for_it(session):
    acc = session.accelerators[0]
    stream = acc.create_stream()
    n = 4096
    x = acc.empty(n, np.float32)
    y = acc.empty(n, np.float32)
    y.fill(0, stream=stream)  # on the stream: CUDA runs other streams' work concurrently
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


def test_direct_mode_is_one_backend_without_a_manager(monkeypatch):
    with Pool(backends=0) as p:
        addr = p.add_backend("solo", 64, register=False)
        monkeypatch.delenv("ARM_ADDR", raising=False)
        monkeypatch.setenv("AC_BACKEND_ADDR", addr)
        monkeypatch.setenv("AC_CA_CERT", str(p.dir / "solo" / "ca.pem"))
        with ac.init() as s:
            assert [a.id for a in s.accelerators] == [f"{addr}/0"]
            assert s.accelerators[0].to_device(np.arange(3)).get().tolist() == [0, 1, 2]
            assert s.get(1) is None and "direct mode" in (s.rejection or "")
        assert s.finalized
