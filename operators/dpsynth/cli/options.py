"""Command-line options derived from the declared parameters (:mod:`dpsynth.params`).

Layer: adapter. :func:`declared_option` turns one :class:`~dpsynth.params.Param` into a click
option — its name, type and rule, default (the engine's, or the commands'), help — so no
command re-declares a parameter. A value that breaks the rule is a usage error (exit status 2)
naming the option and the rule.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from dpsynth.params import PARAMS, REQUIRED, Param

_METAVARS = {"int": "INTEGER", "float": "NUMBER", "bool": "BOOLEAN", "text": "TEXT",
             "path": "PATH", "secret": "SECRET", "custom": "VALUE"}


class DeclaredType(click.ParamType):
    """A click type that reads a value by its parameter's :meth:`~dpsynth.params.Param.parse`."""

    def __init__(self, param: Param) -> None:
        self.param = param
        self.name = param.kind

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> Any:
        try:
            return self.param.parse(value)
        except ValueError as e:
            self.fail(f"{value!r} {e}", param, ctx)

    def get_metavar(self, param: click.Parameter, ctx: click.Context | None = None) -> str:
        if self.param.values:
            return "[" + "|".join(self.param.values) + "]"
        return _METAVARS[self.param.kind]

    def shell_complete(self, ctx: click.Context, param: click.Parameter,
                       incomplete: str) -> list[Any]:
        from click.shell_completion import CompletionItem

        return [CompletionItem(v) for v in self.param.values if v.startswith(incomplete)]


def declared_option(name: str, *, engine: str = "points",
                    help: str | None = None) -> Callable[[Any], Any]:
    """The option of parameter ``name`` for a command of ``engine`` (its default there)."""
    param = PARAMS[name]
    if not param.scopes & {"run", "tabular", "offline"}:
        raise ValueError(f"{name} is not a command-line parameter")
    default = param.default_for(engine, cli=True)
    return click.option(
        param.option_name, param.name, type=DeclaredType(param),
        default=None if default is REQUIRED else default,
        show_default=default not in (None, "", REQUIRED), help=help or param.help)


def declared_options(*names: str, engine: str = "points") -> Callable[[Any], Any]:
    """:func:`declared_option` for each of ``names``, in that order in ``--help``."""
    def apply(fn: Any) -> Any:
        for name in reversed(names):
            fn = declared_option(name, engine=engine)(fn)
        return fn
    return apply
