"""Each exception from a real failure: argument errors before anything is sent, out of memory,
a killed backend, a revoked borrow, a rejected get; the session goes on after each."""

from __future__ import annotations

import time

import numpy as np
import pytest

import ac
from pool import Pool


def test_argument_errors_name_what_is_wrong(session):
    acc = session.accelerators[0]
    dev = acc.zeros(4, np.float32)
    with pytest.raises(ac.InvalidArgumentError, match="float64") as e:
        dev.set(np.zeros(4))
    assert e.value.code == 2 and isinstance(e.value, ValueError)
    with pytest.raises(ac.InvalidArgumentError, match="shape"):
        dev.set(np.zeros(5, np.float32))
    with pytest.raises(ac.InvalidArgumentError, match="do not fit") as e:
        dev.buffer.write(8, np.zeros(4, np.float32))
    assert e.value.code == 4  # AC_ERROR_OUT_OF_RANGE
    readonly = np.zeros(4, np.float32)
    readonly.flags.writeable = False
    with pytest.raises(ac.InvalidArgumentError, match="writable"):
        dev.get(out=readonly)
    with pytest.raises(ac.InvalidArgumentError):
        acc.empty((-1, 2))
    acc.ping()


def test_kernel_arguments_are_checked_against_the_parameters(session):
    acc = session.accelerators[0]
    x = acc.zeros(4, np.float32)
    saxpy = acc.builtin().get_function("saxpy")
    assert saxpy.params == ["float32", "pointer (a device array)", "pointer (a device array)", "uint64"]
    with pytest.raises(TypeError, match="float32 parameter; got a float64"):
        saxpy(1, 4, (np.float64(1.0), x, x, np.uint64(4)))
    with pytest.raises(TypeError, match="numpy int8 cannot be a kernel argument"):
        saxpy(1, 4, (np.int8(1), x, x, np.uint64(4)))
    with pytest.raises(TypeError, match="a Python float given for a uint64 parameter"):
        saxpy(1, 4, (1.0, x, x, 4.0))
    with pytest.raises(TypeError, match="does not fit in uint64"):
        saxpy(1, 4, (1.0, x, x, -4))
    with pytest.raises(TypeError, match="takes 4 arguments"):
        saxpy(1, 4, (1.0, x, x))
    with pytest.raises(TypeError, match="bool"):
        saxpy(1, 4, (True, x, x, 4))
    with pytest.raises(TypeError, match="pointer"):
        saxpy(1, 4, (1.0, 7, x, 4))
    with pytest.raises(ac.InvalidArgumentError, match="grid"):
        saxpy((0,), 4, (1.0, x, x, 4))
    # Python numbers convert where the types are known; numpy scalars keep their width.
    saxpy(1, 4, (2.0, x, x, 4))
    saxpy[1, 4](np.float32(2.0), x, x, np.uint64(4))
    acc.synchronize()


def test_out_of_memory_is_a_memory_error_and_the_session_goes_on(session):
    acc = session.accelerators[0]
    with pytest.raises(ac.OutOfMemoryError) as e:
        acc.empty(100 << 20, np.uint8)
    assert isinstance(e.value, MemoryError) and e.value.code == 5
    assert acc.to_device(np.arange(3)).get().tolist() == [0, 1, 2]


def test_a_killed_backend_is_a_connection_error(pool, session):
    acc = session.accelerators[0]
    dev = acc.to_device(np.arange(4))
    pool.kill_backend(acc.id.split("/")[0])
    with pytest.raises(ac.DisconnectedError) as e:
        dev.get()
    assert isinstance(e.value, ConnectionError) and e.value.code == 11
    with pytest.raises(ac.DisconnectedError):
        acc.ping()


def test_a_rejected_get_returns_none_with_the_reason(session):
    more = session.get(5)
    assert more is None
    assert session.rejection and session.rejection.startswith("5 accelerator(s) asked, "), session.rejection
    granted = session.get(1)
    assert granted is not None and len(granted) == 1 and session.rejection is None
    granted[0].ping()
    session.free(granted)
    assert granted.freed
    with pytest.raises(ac.InvalidHandleError):
        session.free(granted)


def test_a_compile_on_a_cpu_device_is_a_kernel_error(session):
    with pytest.raises(ac.KernelError) as e:
        session.accelerators[0].compile('extern "C" __global__ void k() {}')
    assert e.value.code == 13  # AC_ERROR_NEEDS_CUDA


def test_a_borrower_that_keeps_a_preempted_accelerator_is_revoked(monkeypatch):
    # An owner with a pre-allocation (peak 3) holds 1 and leaves 2 idle; a borrower takes them
    # preemptibly; the owner grows; the borrower is told, ignores it, and is revoked.
    with Pool(backends=4, grace_s=1) as p:
        owner_env = p.submit("owner", "n1", 1, "olga", peak=3)
        borrower_env = p.submit("borrower", "n2", 1, "bert")
        for k, v in borrower_env.items():
            monkeypatch.setenv(k, v)
        borrower = ac.init()
        loan = borrower.get(2, preemptible=True)
        assert loan is not None and len(loan) == 2
        arrays = [a.to_device(np.arange(4)) for a in loan]
        for k, v in owner_env.items():
            monkeypatch.setenv(k, v)
        owner = ac.init()
        grown = owner.get(1)
        assert grown is not None
        notice = borrower.next_preemption(timeout=30)
        assert notice is not None and notice.set == loan.id and len(notice.accelerators) == 1
        taken = next(i for i, a in enumerate(loan) if a.id == notice.accelerators[0])
        with pytest.raises(ac.RevokedError) as e:
            for _ in range(600):  # the grace is 1 s; at most a minute
                arrays[taken].get()
                time.sleep(0.1)
        assert e.value.code == 22 and "taken back" in str(e.value)
        assert arrays[1 - taken].get().tolist() == [0, 1, 2, 3]  # the other goes on
        borrower.free(loan)
        borrower.finalize()
        owner.finalize()


def test_an_elastic_set_is_reclaimed_for_a_queued_job_and_revoked_if_kept(monkeypatch):
    # A lender holds 1 and borrows the 2 idle elastically (2 s of notice); a queued job of 2
    # could start with them: the lender is told, ignores it, and is revoked at the deadline.
    with Pool(backends=3) as p:
        for k, v in p.submit("lender", "n1", 1, "lena").items():
            monkeypatch.setenv(k, v)
        lender = ac.init()
        lent = lender.get(2, notice=2)
        assert lent is not None and len(lent) == 2
        arrays = [a.to_device(np.arange(4)) for a in lent]
        p.submit("queued", "n2", 2, "quinn")
        notice = lender.next_preemption(timeout=30)
        assert notice is not None and notice.set == lent.id
        assert sorted(notice.accelerators) == sorted(a.id for a in lent)
        assert arrays[0].get().tolist() == [0, 1, 2, 3]  # until the deadline it goes on
        with pytest.raises(ac.RevokedError) as e:
            for _ in range(600):  # at most a minute
                arrays[0].get()
                time.sleep(0.1)
        assert e.value.code == 22
        assert time.time() >= notice.revoke_at
        lender.finalize()


def saxpy_spread(accelerators, n: int, a: float) -> bool:
    """y = a*x + y over ``n`` elements spread across ``accelerators``; whether every one is right."""
    x = np.arange(n, dtype=np.float32)
    y = np.ones(n, dtype=np.float32)
    parts = np.array_split(np.arange(n), len(accelerators))
    got = np.empty(n, dtype=np.float32)
    for acc, part in zip(accelerators, parts):
        dx, dy = acc.to_device(x[part]), acc.to_device(y[part])
        acc.builtin().get_function("saxpy")((len(part) + 255) // 256, 256, (a, dx, dy, np.uint64(len(part))))
        got[part] = dy.get()
    return bool(np.array_equal(got, a * x + y))


def test_a_program_resizing_at_check_points_computes_right_across_resizes(monkeypatch):
    # One static accelerator in a pool of 4: the first check expands onto the 3 idle ones; a
    # queued job of 2 arrives, a later check says to give 2 back; the job starts on them. Every
    # iteration's saxpy is right at every size.
    with Pool(backends=4) as p:
        for k, v in p.submit("malleable", "n1", 1, "mal").items():
            monkeypatch.setenv(k, v)
        s = ac.init()
        held, sets, queued = list(s.accelerators), [], False
        sizes = [len(held)]
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            step = s.check(len(held), 1, 4, 4, notice=5, every=0.2)
            if isinstance(step, ac.Expand):
                sets.append(step.set)
                held += step.set.accelerators
            elif isinstance(step, ac.Shrink):
                owner = next(x for x in sets if x.id == step.set)
                s.free_some(owner, step.accelerators)
                assert all(a.id not in step.accelerators for a in owner.accelerators)
                held = [a for a in held if a.id not in step.accelerators]
                holders = p.armctl_json("status")["holders"]
                mine = [h for h in holders if h["job"] == "malleable"]
                assert len(mine[0]["accelerators"]) == len(held), f"the manager has them back at once: {holders}"
            else:
                assert isinstance(step, ac.Keep)
            assert saxpy_spread(held, 100_000, 2.0), f"wrong at {len(held)} accelerators"
            if sizes[-1] != len(held):
                sizes.append(len(held))
            if len(held) == 4 and not queued:
                p.submit("queued", "n2", 2, "quinn")
                queued = True
            jobs = {j["id"]: j for j in p.armctl_json("job", "list")["Jobs"]}
            if queued and jobs["queued"]["state"] == "running" and len(held) == 2:
                break
            time.sleep(0.05)
        assert sizes == [1, 4, 2], sizes
        assert jobs["queued"]["state"] == "running", jobs
        assert s.check(2, 1, 2, 2) == ac.Keep()  # at its preferred count: nothing asked
        s.finalize()


def test_a_lent_set_says_until_when_the_plan_leaves_it(monkeypatch):
    # Pool of 4: the lender holds 1, a job of 2 runs for 100 s, one is idle. Lent with nothing
    # queued: no end planned; with a job of 3 queued (it starts when the 100 s job ends): then.
    with Pool(backends=4) as p:
        for k, v in p.submit("lender", "n1", 1, "lena").items():
            monkeypatch.setenv(k, v)
        started = int(time.time())
        p.submit("long", "n2", 2, "lou", walltime=100)
        s = ac.init()
        alone = s.get(1, notice=10)
        assert alone is not None and alone.until is None
        s.free(alone)
        p.submit("big", "n3", 3, "bo", walltime=60)
        lent = s.get(1, notice=10)
        assert lent is not None and lent.until is not None
        jobs = {j["id"]: j for j in p.armctl_json("job", "list")["Jobs"]}
        assert lent.until == jobs["big"]["expected_start"]
        assert started + 99 <= lent.until <= int(time.time()) + 100
        s.finalize()
