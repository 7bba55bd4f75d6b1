"""Sessions: ``ac.init()`` (``AC_Init``), ``get`` (``AC_Get``), ``free`` (``AC_Free``),
``finalize`` (``AC_Finalize``), preemption notices, and their collective forms over an
mpi4py communicator."""

from __future__ import annotations

import os
from types import TracebackType
from typing import Any, Iterator, List, NamedTuple, Optional, Type, Union

from ac import _ac
from ac.device import Accelerator, connect
from ac.errors import InvalidHandleError


class Preemption(NamedTuple):
    """A preemptible set is being taken back."""

    set: int
    accelerators: List[str]
    revoke_at: int


class Keep(NamedTuple):
    """``check``: go on with what the program holds."""


class Expand(NamedTuple):
    """``check``: run on this elastic set too (lent until a queued job needs it; a later
    check then says ``Shrink``). ``until``: unix time until which the manager's plan leaves it
    to the program (the planned start of the first queued job), or ``None``."""

    set: "AcceleratorSet"
    until: Optional[int] = None


class Shrink(NamedTuple):
    """``check``: give back these accelerators of set ``set`` (``Session.free_some``) by unix
    time ``by``; after it, calls on them fail with ``RevokedError``."""

    set: int
    accelerators: List[str]
    by: int


Reconfiguration = Union[Keep, Expand, Shrink]


class AcceleratorSet:
    """Accelerators granted together by one ``get``. As a context manager it frees itself on
    exit."""

    __slots__ = ("_raw", "_session", "_comm", "accelerators")

    def __init__(self, raw: _ac.Set, session: "Session", comm: Any) -> None:
        self._raw = raw
        self._session = session
        self._comm = comm
        self.accelerators = [Accelerator(a) for a in raw.accelerators]

    @property
    def id(self) -> int:
        return self._raw.id

    @property
    def freed(self) -> bool:
        return self._raw.freed

    @property
    def until(self) -> Optional[int]:
        """A lent set (``get(..., notice=...)``): unix time until which the manager's plan
        leaves it to the program (the planned start of the first queued job: its reclaim falls
        due by then at the latest, or sooner); ``None`` otherwise."""
        return self._raw.until

    def __len__(self) -> int:
        return len(self.accelerators)

    def __iter__(self) -> Iterator[Accelerator]:
        return iter(self.accelerators)

    def __getitem__(self, i: int) -> Accelerator:
        return self.accelerators[i]

    def __enter__(self) -> "AcceleratorSet":
        return self

    def __exit__(
        self, kind: Optional[Type[BaseException]], value: Optional[BaseException], tb: Optional[TracebackType]
    ) -> None:
        if not self.freed and not self._session.finalized:
            self._session.free(self)


class Session:
    """A program's session with the resource manager. As a context manager it finalizes on
    exit (releasing every set)."""

    __slots__ = ("_raw", "_comm", "_direct_open", "accelerators")

    def __init__(self, raw: Optional[_ac.Session], comm: Any = None, direct: Optional[Accelerator] = None) -> None:
        self._raw = raw
        self._comm = comm
        self._direct_open = direct is not None
        self.accelerators = [Accelerator(a) for a in raw.accelerators] if raw is not None else [direct]

    @property
    def job(self) -> str:
        return self._raw.job if self._raw is not None else ""

    @property
    def rejection(self) -> Optional[str]:
        """Why the last ``get`` returned ``None``."""
        return self._raw.rejection if self._raw is not None else DIRECT

    @property
    def finalized(self) -> bool:
        return self._raw.finalized if self._raw is not None else not self._direct_open

    def get(
        self,
        count: int,
        min: Optional[int] = None,
        wait: Optional[float] = None,
        preemptible: bool = False,
        comm: Any = None,
        notice: Optional[float] = None,
    ) -> Optional[AcceleratorSet]:
        """``AC_Get``: ``count`` more accelerators now (at least ``min``, waiting up to ``wait``
        seconds; ``preemptible``: borrowed, taken back with notice), or ``None`` when the manager
        rejects the request (``rejection`` says why). With ``comm`` (mpi4py), collective: every
        rank asks for its own count; all ranks are granted, or none. With ``notice`` (seconds),
        elastic: the accelerators are lent, and the manager may reclaim some for a queued job,
        telling the program (``next_preemption``) at least ``notice`` seconds before revoking
        them."""
        if self._raw is None:
            return None
        raw = self._raw.get(count, min, wait, preemptible, comm, notice)
        return None if raw is None else AcceleratorSet(raw, self, comm)

    def free(self, set: AcceleratorSet, comm: Any = None) -> None:
        """``AC_Free``: releases a set (collectively with the communicator it was got with)."""
        if self._raw is None:
            raise InvalidHandleError("a direct session has no sets", 1)
        self._raw.free(set._raw, comm if comm is not None else set._comm)

    def free_some(self, set: AcceleratorSet, accelerators: List[str]) -> None:
        """``AC_Free`` of some accelerators of a set, by id (as a ``Shrink`` names them): the
        others keep working; freeing the last frees the set."""
        if self._raw is None:
            raise InvalidHandleError("a direct session has no sets", 1)
        self._raw.free_some(set._raw, list(accelerators))
        set.accelerators = [a for a in set.accelerators if a.id not in accelerators]

    def check(
        self, held: int, min: int, max: int, preferred: int, notice: float = 30.0, every: float = 1.0
    ) -> Reconfiguration:
        """``AC_Check``, a reconfiguration point between two iterations of a program holding
        ``held`` accelerators that can run on ``min`` to ``max``, best on ``preferred``: a
        reclaim first (``Shrink``: give those back by then); else, below ``preferred``, an
        elastic ``get`` of what is idle, lent with ``notice`` seconds, at most once per ``every``
        seconds (``Expand``: the new set); else ``Keep``. From the first call on, notices come
        here (not to ``next_preemption``)."""
        if self._raw is None:
            return Keep()
        action, raw, set_id, accelerators, by = self._raw.check(held, min, max, preferred, notice, every)
        if action == "shrink" and set_id is not None:
            return Shrink(set_id, accelerators, by)
        if action == "expand" and raw is not None:
            return Expand(AcceleratorSet(raw, self, None), by or None)
        return Keep()

    def finalize(self, comm: Any = None) -> None:
        """``AC_Finalize``: releases every set and ends the session (collectively over the
        communicator given to ``ac.init``). A second call does nothing."""
        if self._raw is None:
            self._direct_open = False
            self.accelerators = []  # the connection closes when the last reference goes
            return
        self._raw.finalize(comm if comm is not None else self._comm)

    def next_preemption(self, timeout: float = 0.0) -> Optional[Preemption]:
        """The next notice that a preemptible set is being taken back, waiting up to
        ``timeout`` seconds (from the first call on, notices come here instead of stderr)."""
        if self._raw is None:
            return None
        notice = self._raw.next_preemption(timeout)
        return None if notice is None else Preemption(*notice)

    def __enter__(self) -> "Session":
        return self

    def __exit__(
        self, kind: Optional[Type[BaseException]], value: Optional[BaseException], tb: Optional[TracebackType]
    ) -> None:
        self.finalize()


def init(comm: Any = None) -> Session:
    """``AC_Init``: the session, and this node's accelerators allocated to the job before it
    started. The environment names the manager and the job, as for libac (``ARM_ADDR``,
    ``ARM_CA_CERT``; Slurm's or ``armctl job submit``'s credentials; ``ARM_ACPN`` for an ad-hoc
    job). With ``comm`` (an mpi4py communicator), collective over its ranks.

    Direct mode, for a GPU host's checks (as the CUDA shim's): with ``AC_BACKEND_ADDR`` and
    ``AC_CA_CERT`` set and no ``ARM_ADDR``, the session is that one backend's accelerator, with
    no manager (``get`` returns ``None``)."""
    env = os.environ
    if comm is None and "ARM_ADDR" not in env and env.get("AC_BACKEND_ADDR") and env.get("AC_CA_CERT"):
        return Session(None, direct=connect())
    return Session(_ac.Session.init(comm), comm)


DIRECT = "direct mode (AC_BACKEND_ADDR, no ARM_ADDR): there is no resource manager to ask"
