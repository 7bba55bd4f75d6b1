"""The SDK's exceptions.

Each derives from :class:`Error` and, where one fits, from the matching builtin, so that
``except MemoryError`` or ``except ConnectionError`` catch them too. ``code`` is libac's
``acError`` code for the same failure (``ac.h``); ``message`` says what failed and what to do.
"""

from __future__ import annotations

import builtins

__all__ = [
    "Error",
    "OutOfMemoryError",
    "InvalidArgumentError",
    "InvalidHandleError",
    "TimeoutError",
    "DisconnectedError",
    "RevokedError",
    "JobEndedError",
    "KernelError",
    "KernelFaultError",
    "RejectedError",
    "DeviceRefusedError",
    "ManagerError",
    "MpiError",
    "ForkError",
]


class Error(Exception):
    """A call of the SDK failed."""

    code: int
    message: str

    def __init__(self, message: str, code: int = 0) -> None:
        # One argument only: OSError-derived classes would read two as (errno, strerror).
        super().__init__(message)
        self.message = message
        self.code = code

    def __str__(self) -> str:
        return self.message

    def __reduce__(self) -> "tuple[type, tuple[str, int]]":
        # Exceptions pickle their args only; the code must travel too (multiprocessing).
        return (type(self), (self.message, self.code))


class OutOfMemoryError(Error, MemoryError):
    """The accelerator has not that much free memory."""


class InvalidArgumentError(Error, ValueError):
    """An argument is out of its domain: a size, an offset past the end, a shape, a dtype."""


class InvalidHandleError(Error, ValueError):
    """The object was released already (a freed buffer or set, a finalized session)."""


class TimeoutError(Error, builtins.TimeoutError):
    """A wait took longer than allowed."""


class DisconnectedError(Error, ConnectionError):
    """The connection to an accelerator (or the resource manager) was lost."""


class RevokedError(Error):
    """The resource manager took the accelerator back (its set was freed, a preemptible loan's
    owner took it back, its host was removed): free its set and go on without it."""


class JobEndedError(RevokedError):
    """The job's allocation has ended: every accelerator is released already."""


class KernelError(Error):
    """A module or kernel could not be loaded (bad image, unknown kernel, compile error)."""


class KernelFaultError(Error):
    """A kernel faulted and the device context is lost: open a new session (``ac.init()``)."""


class RejectedError(Error):
    """The resource manager rejected the request."""


class DeviceRefusedError(Error):
    """The accelerator refuses a new session (session limit, exclusive mode, health)."""


class ManagerError(Error):
    """The resource manager refused the request (credentials, unknown job)."""


class MpiError(Error):
    """An MPI collective failed, or the collective call failed on another rank."""


class ForkError(Error):
    """A call in a process forked after ``ac.init()``: the connections belong to the parent."""
