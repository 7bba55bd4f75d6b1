"""Modules and kernels: launches in CuPy's form, ``f(grid, block, args)``, and Numba's,
``f[grid, block](*args)`` (``ac.Function`` is the extension's own type: a launch crosses no
Python frame of ours)."""

from __future__ import annotations

from ac import _ac

Function = _ac.Function


class Module:
    """A loaded module."""

    __slots__ = ("_raw",)

    def __init__(self, raw: _ac.Module) -> None:
        self._raw = raw

    def get_function(self, name: str) -> Function:
        """The kernel ``name``. Arguments: device arrays (a pointer to their first element),
        numpy scalars (at their own width), and Python numbers where the parameter types are
        known (``params``)."""
        return self._raw.get_function(name)
