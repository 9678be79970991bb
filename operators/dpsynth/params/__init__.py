"""Every parameter of dpsynth, declared once (name, type, default, bounds, help, privacy note).

Layer: core (standard library only). The library's checks, the commands' options
(:mod:`dpsynth.cli.options`), the worker's settings model (:mod:`dpsynth.settings`) and the
table of docs/settings.md (:func:`settings_table`) are all derived from :data:`PARAMS`;
``tests/unit/test_params.py`` fails when one of them drifts from it.
"""

from __future__ import annotations

from dpsynth.params.choices import (
    CurrentShape,
    Engine,
    Estimator,
    Fit,
    LogLevel,
    MechanismName,
    Neighbours,
    OfflineMechanism,
    Placement,
    PointsFormat,
    PrivacyUnit,
    Selection,
    TabularCounter,
    TabularMechanism,
)
from dpsynth.params.core import PREFIX, REQUIRED, SCOPES, Param
from dpsynth.params.synthesis import DEFAULT_MAX_DEPTH, MAX_CONTRIBUTIONS, SYNTHESIS
from dpsynth.params.worker import CRASH_POINTS, WORKER

#: Every parameter by name.
PARAMS: dict[str, Param] = {p.name: p for p in (*SYNTHESIS, *WORKER)}
if len(PARAMS) != len(SYNTHESIS) + len(WORKER):  # pragma: no cover - a declaration error
    raise RuntimeError("a parameter is declared twice")

__all__ = [
    "CRASH_POINTS", "DEFAULT_MAX_DEPTH", "MAX_CONTRIBUTIONS", "PARAMS", "PREFIX", "REQUIRED",
    "SCOPES", "CurrentShape", "Engine", "Estimator", "Fit", "LogLevel", "MechanismName",
    "Neighbours", "OfflineMechanism", "Param", "Placement", "PointsFormat", "PrivacyUnit",
    "Selection", "TabularCounter", "TabularMechanism", "check_library", "in_scope",
    "settings_table", "shared_params", "worker_params",
]


def check_library(names: dict[str, str], **values: object) -> None:
    """The library's check of its arguments against their declarations: ``values`` by the
    library's keyword, ``names`` maps a keyword to its parameter where they differ;
    :class:`~dpsynth.errors.ConfigError` naming the first argument that breaks its rule."""
    for keyword, value in values.items():
        PARAMS[names.get(keyword, keyword)].check(value, keyword)


def shared_params() -> list[Param]:
    """The synthesis parameters ``dpsynth run`` and the worker share (``SynthesisSettings``)."""
    return [p for p in PARAMS.values() if {"run", "worker"} <= p.scopes
            and p.group == "synthesis"]


def worker_params() -> list[Param]:
    """Every other worker setting (``WorkerSettings`` adds them)."""
    shared = shared_params()
    return [p for p in PARAMS.values() if "worker" in p.scopes and p not in shared]


def in_scope(scope: str) -> list[Param]:
    """The parameters ``scope`` takes (one of :data:`SCOPES`), in declaration order."""
    return [p for p in PARAMS.values() if scope in p.scopes]


def _cell(value: object) -> str:
    if value is REQUIRED:
        return "required"
    if value is None or value == "":
        return "unset"
    return f"`{value}`"


def settings_table() -> str:
    """docs/settings.md: every parameter, where it is taken, its default and rule."""
    lines = [
        "# Settings",
        "",
        "Every parameter of dpsynth, generated from its one declaration in `dpsynth.params`",
        "(`python -m dpsynth.params > docs/settings.md`; a test fails when this page, a",
        "command's options or the worker's settings drift from it). The worker reads",
        "`DPSYNTH_` + the name in upper case; the commands take `--` + the name with dashes.",
        "",
        "## Adding a setting",
        "",
        "Declare it once, as a `Param` in `dpsynth/params/synthesis.py` (a synthesis",
        "parameter) or `dpsynth/params/worker.py` (a worker setting): name, kind, default,",
        "bounds or choices (a `StrEnum` in `dpsynth/params/choices.py`), scopes (who takes",
        "it), help and, if it touches privacy, its note. Then run",
        "`python -m dpsynth.params --write > docs/settings.md`: it regenerates this page and",
        "the typed fields of the settings models (`dpsynth/settings.py`). What follows from the",
        "declaration alone: the commands' option (`--name`, its type, default and rule), the",
        "worker's variable (`DPSYNTH_` + the name), its check and its error message. A synthesis",
        "parameter the library takes is also a field of `OnlineConfig`",
        "(`dpsynth/online/config.py`), checked once in `OnlineConfig.resolve` and read from",
        "there by the synthesizer and its mechanisms: add the field and its check there. A",
        "tabular one is a field of `TabularConfig` (`dpsynth/tabular/config.py`), checked once",
        "in `TabularConfig.resolve`, likewise.",
        "`tests/unit/test_params.py` fails until every part agrees with the declaration.",
        "",
    ]
    titles = {"synthesis": "Synthesis", "tabular": "Tabular streams",
              "offline": "Offline copies", "worker": "Worker", "tuning": "Worker tuning"}
    for group, title in titles.items():
        lines += [f"## {title}", "",
                  "| parameter | variable / option | default | rule | taken by | what |",
                  "|---|---|---|---|---|---|"]
        for p in PARAMS.values():
            if p.group != group:
                continue
            default = _cell(p.default)
            if p.cli_default is not REQUIRED:
                default += f" (commands: {_cell(p.cli_default)})"
            for engine, value in p.engines.items():
                default += f" ({engine}: {_cell(value)})"
            where = ", ".join(s for s in SCOPES if s in p.scopes)
            names = [f"`{p.env}`"] if "worker" in p.scopes else []
            if p.scopes & {"run", "tabular", "offline"}:
                names.append(f"`{p.option_name}`")
            what = p.help + (f" Privacy: {p.privacy}" if p.privacy else "")
            rule = p.rule or (p.kind if p.kind in ("text", "path", "secret", "custom")
                              else p.describe())
            lines.append(f"| `{p.name}` | {' '.join(names) or '(library)'} | {default} | "
                         f"{rule} | {where} | {what} |")
        lines.append("")
    return "\n".join(lines)
