"""One decorator shared by every ``dpsynth`` command: dpsynth's own errors as clean CLI errors.

Layer: adapter.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import click

from dpsynth.errors import DpsynthError


def fail_on_dpsynth_error(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Turn dpsynth's own errors (bad parameters, schemas, releases) into clean CLI errors."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except DpsynthError as e:
            raise click.ClickException(str(e)) from None

    return wrapper
