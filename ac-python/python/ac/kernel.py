"""Modules and kernels: launches in CuPy's form, ``f(grid, block, args)``, and Numba's,
``f[grid, block](*args)``."""

from __future__ import annotations

from typing import Any, List, Optional, Sequence, Tuple, Union

from ac import _ac

Dims = Union[int, Tuple[int, ...]]


class Module:
    """A loaded module."""

    __slots__ = ("_raw",)

    def __init__(self, raw: _ac.Module) -> None:
        self._raw = raw

    def get_function(self, name: str) -> "Function":
        """The kernel ``name``."""
        return Function(self._raw.get_function(name))


class Function:
    """A kernel. Arguments: device arrays (a pointer to their first element), numpy scalars (at
    their own width), and Python numbers where the parameter types are known (``params``)."""

    __slots__ = ("_raw", "_launch")

    def __init__(self, raw: _ac.Function) -> None:
        self._raw = raw
        self._launch = raw.launch

    @property
    def name(self) -> str:
        return self._raw.name

    @property
    def params(self) -> Optional[List[str]]:
        """The parameter types as numpy names, when the module says them (PTX, builtin and
        compiled kernels); ``None`` for a cubin's."""
        return self._raw.params

    def __call__(
        self,
        grid: Dims,
        block: Dims,
        args: Sequence[Any],
        shared_mem: int = 0,
        stream: Optional[_ac.Stream] = None,
    ) -> None:
        """Launches (CuPy's ``RawKernel`` form); returns without waiting. Errors surface at the
        next synchronizing call."""
        self._launch(grid, block, args, shared_mem, stream)

    def __getitem__(self, config: Tuple[Any, ...]) -> "_Configured":
        """Numba's form: ``f[grid, block](*args)``, or ``f[grid, block, stream, shared_mem]``."""
        if not isinstance(config, tuple) or not 2 <= len(config) <= 4:
            raise TypeError("kernel[grid, block] or kernel[grid, block, stream, shared_mem]")
        grid, block = config[0], config[1]
        stream = config[2] if len(config) > 2 else None
        shared_mem = config[3] if len(config) > 3 else 0
        return _Configured(self._launch, grid, block, stream, shared_mem)

    def __repr__(self) -> str:
        return f"<ac.Function {self.name}>"


class _Configured:
    __slots__ = ("_launch", "_grid", "_block", "_stream", "_shared_mem")

    def __init__(self, launch: Any, grid: Dims, block: Dims, stream: Optional[_ac.Stream], shared_mem: int) -> None:
        self._launch = launch
        self._grid = grid
        self._block = block
        self._stream = stream
        self._shared_mem = shared_mem

    def __call__(self, *args: Any) -> None:
        self._launch(self._grid, self._block, args, self._shared_mem, self._stream)
