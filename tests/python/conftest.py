"""Fixtures: a throw-away pool per test (pool.py), and the SDK's environment set for it."""

from __future__ import annotations

import os
import sys
from typing import Iterator

import pytest

sys.path.insert(0, os.path.dirname(__file__))

from pool import Pool  # noqa: E402


@pytest.fixture
def pool(monkeypatch: pytest.MonkeyPatch) -> Iterator[Pool]:
    """Two 64 MiB CPU-device backends; this process is an ad-hoc job holding one (ARM_ACPN=1)."""
    with Pool(backends=2, memory_mib=64) as p:
        for k, v in p.session_env().items():
            monkeypatch.setenv(k, v)
        yield p


@pytest.fixture
def session(pool: Pool) -> Iterator[object]:
    import ac

    s = ac.init()
    yield s
    s.finalize()
