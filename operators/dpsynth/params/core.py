"""A parameter, declared once: its name, type, default, bounds, help and privacy note.

Layer: core (standard library only, so that the DP core may read its own defaults). Everything
that takes a parameter — the library's constructors, the ``dpsynth`` commands' options, the
worker's ``DPSYNTH_*`` settings and the settings table in docs/settings.md — is derived from a
:class:`Param`, and ``tests/unit/test_params.py`` fails when any of them drifts from it.

The choice types are :class:`~enum.StrEnum`: a value compares equal to its plain string, and
:meth:`Param.parse` returns the plain string, so release metadata and stored state keep their
exact bytes.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from dpsynth.errors import ConfigError

#: Prefix of every worker setting's environment variable.
PREFIX = "DPSYNTH_"


class Required:
    """The default of a parameter that must be given."""

    def __repr__(self) -> str:
        return "REQUIRED"


REQUIRED: Any = Required()
#: Where a parameter is taken: the library, the commands, the worker.
SCOPES = ("library", "run", "tabular", "offline", "worker")


@dataclass(frozen=True)
class Param:
    """One parameter (see the module docstring).

    ``kind`` is ``int``, ``float``, ``bool``, ``text``, ``choice``, ``path``, ``secret`` or
    ``custom`` (``parser`` reads it);
    ``low``/``high`` bound numbers (``strict``: low excluded); ``choices`` is the StrEnum of a
    choice; ``optional``: unset (None, or empty text) is allowed; ``pattern``/``rule``: a text's
    form; ``engines``: defaults per engine where they differ from ``default``; ``cli_default``:
    the commands' default where the worker requires the value; ``option``: the command-line
    option where it is not ``--`` + the name; ``keyword``: the library's argument name where it
    is not the name; ``variable``: the environment variable where it is not ``DPSYNTH_`` + the
    name in upper case.
    """

    name: str
    kind: str
    help: str
    default: Any = REQUIRED
    scopes: frozenset[str] = frozenset({"worker"})
    low: float | None = None
    high: float | None = None
    strict: bool = False
    choices: type[StrEnum] | None = None
    optional: bool = False
    pattern: str | None = None
    rule: str = ""
    privacy: str = ""
    engines: Mapping[str, Any] = field(default_factory=dict)
    cli_default: Any = REQUIRED
    option: str | None = None
    keyword: str | None = None
    group: str = "synthesis"
    variable: str | None = None
    parser: Callable[[Any], Any] | None = None

    @property
    def env(self) -> str:
        """The worker's environment variable: ``DPSYNTH_`` + the name in upper case."""
        return self.variable or PREFIX + self.name.upper()

    @property
    def option_name(self) -> str:
        """The commands' option: ``--release-every``."""
        return self.option or "--" + self.name.replace("_", "-")

    @property
    def library_name(self) -> str:
        """The library's keyword argument."""
        return self.keyword or self.name

    def default_for(self, engine: str = "points", *, cli: bool = False) -> Any:
        """The default of ``engine`` (the commands' default with ``cli``)."""
        if engine in self.engines:
            return self.engines[engine]
        if cli and self.cli_default is not REQUIRED:
            return self.cli_default
        return self.default

    @property
    def values(self) -> tuple[str, ...]:
        """The allowed values of a choice."""
        return tuple(str(c.value) for c in self.choices) if self.choices else ()

    def describe(self) -> str:
        """The rule a value must follow, as the error messages say it."""
        if self.rule:
            return self.rule
        if self.kind == "choice":
            return f"must be one of {self.values}"
        if self.kind == "bool":
            return "must be true or false"
        if self.kind == "int":
            if self.high is not None:
                return f"must be an integer in [{_num(self.low)}, {_num(self.high)}]"
            return f"must be an integer >= {_num(self.low)}"
        if self.kind == "float":
            if self.high is not None:
                return f"must be a finite number in [{_num(self.low)}, {_num(self.high)}]"
            return f"must be a finite number {'>' if self.strict else '>='} {_num(self.low)}"
        return "must be text"

    def parse(self, value: Any) -> Any:
        """The value from text (an environment variable, a file, an option) or from Python;
        ``ValueError`` with :meth:`describe` when it breaks the rule."""
        if self.optional and (value is None or (isinstance(value, str) and not value.strip())):
            return None
        if self.kind == "int":
            return self._bounded(_as_int(value))
        if self.kind == "float":
            return self._bounded(_as_float(value))
        if self.kind == "bool":
            return _as_bool(value)
        if self.kind == "choice":
            text = str(value.value if isinstance(value, StrEnum) else value).strip()
            if text not in self.values:
                raise ValueError(self.describe())
            return text
        if self.kind == "custom" and self.parser is not None:
            return self.parser(value)
        if self.kind == "text" and self.pattern is not None:
            text = str(value).strip()
            if not re.fullmatch(self.pattern, text):
                raise ValueError(self.describe())
            return text
        return value

    def check(self, value: Any, label: str | None = None) -> Any:
        """:meth:`parse` for the library: ``ConfigError`` naming ``label`` and the value."""
        if self.kind == "int" and isinstance(value, bool | float):
            value = math.nan  # 1.5 or True is not an integer, even where int() would take it
        try:
            return self.parse(value)
        except ValueError as e:
            raise ConfigError(f"{label or self.library_name} ({value!r}) {e}") from None

    def _bounded(self, number: float) -> Any:
        ok = not math.isnan(number) and (
            self.low is None or (number > self.low if self.strict else number >= self.low))
        if ok and self.high is not None:
            ok = number <= self.high
        if self.kind == "float":
            ok = ok and math.isfinite(number)
        if not ok:
            raise ValueError(self.describe())
        return int(number) if self.kind == "int" else float(number)


def _num(x: float | None) -> str:
    """A bound as the messages show it: 65535, 0, 0.5."""
    x = 0.0 if x is None else float(x)
    return str(int(x)) if x.is_integer() else f"{x:g}"


def _as_int(value: Any) -> float:
    if isinstance(value, bool):
        return math.nan
    if isinstance(value, int):
        return value
    try:
        return int(str(value).strip())
    except ValueError:
        return math.nan


def _as_float(value: Any) -> float:
    if isinstance(value, bool):
        return math.nan
    try:
        return float(str(value).strip()) if isinstance(value, str) else float(value)
    except (TypeError, ValueError):
        return math.nan


def _as_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise ValueError("must be true or false")
