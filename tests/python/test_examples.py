"""The examples run as programs: saxpy and reduce on a job's accelerator, and an MPI job under
mpirun whose collective get is rejected on every rank when the pool is short and granted on
every rank when it is not."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pool import ROOT, Pool

EXAMPLES = ROOT / "examples" / "python"


def run(args: list[str], env: dict[str, str], timeout: int = 120) -> str:
    done = subprocess.run(args, env={**os.environ, **env}, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


@pytest.mark.parametrize("example", ["saxpy.py", "reduce.py"])
def test_the_example_runs(pool, example):
    out = run([sys.executable, str(EXAMPLES / example)], pool.session_env())
    assert " OK: " in out, out


def test_an_mpi_job_is_granted_on_every_rank_or_on_none():
    if shutil.which("mpirun") is None:
        if os.environ.get("AC_MPI_REQUIRED"):
            pytest.fail("mpirun is missing (scripts/install-packages installs Open MPI)")
        pytest.skip("no mpirun")
    # 5 accelerators: the job's static one (shared by its 4 ranks on this node) and 4 free.
    with Pool(backends=5) as p:
        env = {**p.session_env(acpn=1, node="mpinode"), "OMPI_MCA_rmaps_base_oversubscribe": "1"}
        mpirun = ["mpirun", "-n", "4", sys.executable, str(EXAMPLES / "mpi_job.py")]
        short = run(mpirun + ["2"], env, timeout=240)  # 2 + 1 + 1 + 1 = 5 > 4 free
        assert short.count("rejected: ") == 4, short
        reasons = {line.split("rejected: ", 1)[1] for line in short.splitlines() if "rejected: " in line}
        assert len(reasons) == 1, short  # every rank is told the same
        enough = run(mpirun, env, timeout=240)
        assert enough.count(": True") == 4 and "granted 1" in enough, enough
        ids = {line.rsplit("computed on ", 1)[1].split(":")[0] for line in enough.splitlines() if "computed on" in line}
        assert len(ids) == 4, enough  # each rank its own accelerator
