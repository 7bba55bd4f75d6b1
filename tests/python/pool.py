"""A throw-away pool for the Python SDK's tests: a real arm-server and real CPU-device backends
on loopback, registered with armctl, in a temporary state directory; stopped by ``close()``."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Optional

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(os.environ.get("AC_BIN_DIR", ROOT / "target" / "release"))


def _wait_for(path: Path, what: str, proc: subprocess.Popen) -> str:
    for _ in range(300):
        if path.exists() and path.read_text().strip():
            return path.read_text().strip()
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode}")
        time.sleep(0.05)
    raise RuntimeError(f"{what} did not start")


class Pool:
    """arm-server and ``backends`` CPU-device backends of ``memory_mib`` each."""

    def __init__(self, backends: int = 1, memory_mib: int = 64, grace_s: int = 10) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="ac-pytest-"))
        config = self.dir / "arm.toml"
        config.write_text(f"preemption_grace_s = {grace_s}\n")
        self.procs: List[subprocess.Popen] = []
        self.backends: Dict[str, subprocess.Popen] = {}
        quiet = {**os.environ, "RUST_LOG": "warn"}
        arm = subprocess.Popen(
            [BIN / "arm-server", "--config", config, "--listen", "127.0.0.1:0", "--state-dir", self.dir / "arm",
             "--addr-file", self.dir / "arm.addr"],
            env=quiet,
        )
        self.procs.append(arm)
        self.addr = _wait_for(self.dir / "arm.addr", "arm-server", arm)
        self.env = {
            "ARM_ADDR": self.addr,
            "ARM_CA_CERT": str(self.dir / "arm" / "ca.pem"),
            "ARMCTL_CERT": str(self.dir / "arm" / "admin.pem"),
            "ARMCTL_KEY": str(self.dir / "arm" / "admin.key"),
        }
        for i in range(backends):
            self.add_backend(f"h{i}", memory_mib)

    def add_backend(self, name: str, memory_mib: int, register: bool = True) -> str:
        """Starts a backend; registers it with the manager unless told not to (a backend no
        manager registered serves anyone: a GPU host's check). Returns its address."""
        state = self.dir / name
        proc = subprocess.Popen(
            [BIN / "ac-backend", "--listen", "127.0.0.1:0", "--state-dir", state, "--memory-mib", str(memory_mib),
             "--addr-file", self.dir / f"{name}.addr"],
            env={**os.environ, "RUST_LOG": "warn"},
        )
        self.procs.append(proc)
        self.backends[name] = proc
        addr = _wait_for(self.dir / f"{name}.addr", f"ac-backend {name}", proc)
        if register:
            self.armctl("host", "add", addr, "--backend-ca", str(state / "ca.pem"), "--name", name)
        return addr

    def armctl(self, *args: str) -> str:
        done = subprocess.run(
            [BIN / "armctl", *args], env={**os.environ, **self.env}, capture_output=True, text=True, timeout=60
        )
        if done.returncode != 0:
            raise RuntimeError(f"armctl {' '.join(args)} failed: {done.stderr}")
        return done.stdout

    def armctl_json(self, *args: str) -> object:
        return json.loads(self.armctl("--json", *args))

    def submit(self, job: str, node: str, acpn: int, user: str, peak: int = 0, walltime: int = 0) -> Dict[str, str]:
        """A batch job's environment (``armctl job submit``): its id, credential and node."""
        args = ["job", "submit", "--job", job, "--nodes", node, "--acpn", str(acpn), "--user", user]
        if peak:
            args += ["--peak", str(peak)]
        if walltime:
            args += ["--walltime", str(walltime)]
        out = self.armctl(*args)
        env = dict(line.split("=", 1) for line in out.splitlines() if line.startswith("ARM_"))
        return {"ARM_ADDR": self.addr, "ARM_CA_CERT": self.env["ARM_CA_CERT"], "ARM_NODE": node, **env}

    def kill_backend(self, name: str) -> None:
        self.backends[name].send_signal(signal.SIGKILL)
        self.backends[name].wait()

    def session_env(self, acpn: int = 1, node: str = "pynode") -> Dict[str, str]:
        """What a program of an ad-hoc job with ``acpn`` accelerators needs."""
        return {"ARM_ADDR": self.addr, "ARM_CA_CERT": self.env["ARM_CA_CERT"], "ARM_ACPN": str(acpn), "ARM_NODE": node}

    def close(self) -> None:
        for proc in reversed(self.procs):
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        subprocess.run(["rm", "-rf", str(self.dir)], check=False)

    def __enter__(self) -> "Pool":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def optional_env(name: str) -> Optional[str]:
    return os.environ.get(name) or None
