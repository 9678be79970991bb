"""The part of numba that dpsynth uses, typed for mypy (mypy_path in pyproject.toml).

numba's own ``njit`` is unannotated, so every compiled function would be ``Any`` to mypy and
its body unchecked. Here a compiled function keeps the signature of the Python function it
compiles (a dispatcher is called like that function); ``prange`` is ``range`` to the checker.
Not shipped: users' mypy sees numba's own annotations.
"""

from collections.abc import Callable
from typing import Any, Literal, TypeVar, overload

_F = TypeVar("_F", bound=Callable[..., Any])

__version__: str

@overload
def njit(function: _F, /) -> _F: ...
@overload
def njit(
    *,
    cache: bool = ...,
    parallel: bool = ...,
    inline: Literal["always", "never"] = ...,
    fastmath: bool = ...,
    nogil: bool = ...,
    boundscheck: bool = ...,
) -> Callable[[_F], _F]: ...

prange = range

def __getattr__(name: str) -> Any: ...
