"""The typed fields of the settings models, generated from the declarations.

Layer: core (standard library only). :mod:`dpsynth.settings` holds two blocks of field lines
(between ``# -- generated: ...`` and ``# -- end generated``) written by
``python -m dpsynth.params --write`` from :data:`~dpsynth.params.PARAMS`, so mypy and an IDE see
every setting as a typed attribute while each parameter is still declared once;
``tests/unit/test_params.py`` fails when a block differs from :func:`settings_fields`.
"""

from __future__ import annotations

import re
from pathlib import Path

from dpsynth.params.core import Param

#: The Python annotation of each kind (``choice``: the plain string, as release bytes hold it).
ANNOTATIONS = {"int": "int", "float": "float", "bool": "bool", "text": "str", "choice": "str",
               "custom": "Any", "path": "Path", "secret": "SecretStr"}
#: The longest line (ruff's line-length).
LINE = 100
#: The two models' blocks: (marker, the class whose fields it holds).
BLOCKS = ("synthesis", "worker")
_BLOCK = re.compile(r"(    # -- generated: (\w+) .*?\n)(.*?)(    # -- end generated\n)", re.S)


def field_line(param: Param, *, by_engine: bool = False) -> str:
    """One field: ``name: Annotated[type, rule("name")] = declared("name")``; ``by_engine``:
    unset (None) until the engine's default fills it."""
    engine = by_engine and bool(param.engines)
    default = None if engine else param.default
    python = ANNOTATIONS[param.kind]
    if param.kind == "secret" or param.optional or default is None:
        python += " | None"
    args = f'"{param.name}"' + (", by_engine=True" if engine else "")
    if param.kind == "secret":  # no rule: the key is read by dpsynth.keys, never echoed
        return f"    {param.name}: {python} = declared({args})\n"
    ignore = "  # type: ignore[assignment]" if engine else ""  # None until the engine's
    line = f"    {param.name}: Annotated[{python}, rule({args})] = declared({args})"
    if len(line) <= LINE:
        return line + ignore + "\n"
    return (f"    {param.name}: Annotated[{python}, rule({args})] = (\n"
            f"        declared({args})){ignore}\n")


def settings_fields(block: str) -> str:
    """The field lines of ``block`` (``synthesis``: the parameters ``dpsynth run`` and the
    worker share; ``worker``: the others, and the shared ones whose default is the engine's)."""
    from dpsynth.params import shared_params, worker_params

    if block == "synthesis":
        return "".join(field_line(p) for p in shared_params())
    return "".join([*(field_line(p, by_engine=True) for p in shared_params() if p.engines),
                    *(field_line(p) for p in worker_params())])


def write_fields(path: Path) -> bool:
    """Rewrite the generated blocks of ``path`` (dpsynth/settings.py); True if it changed."""
    text = path.read_text(encoding="utf-8")
    new = _BLOCK.sub(lambda m: m[1] + settings_fields(m[2]) + m[4], text)
    if new != text:
        path.write_text(new, encoding="utf-8")
    return new != text


def generated_blocks(text: str) -> dict[str, str]:
    """The generated blocks of a module's ``text`` by name."""
    return {m[2]: m[3] for m in _BLOCK.finditer(text)}
