"""Mutation check of the privacy core (issues 13 and 25): ``python -m benchmarks mutation``.

Layer: adapter (benchmark). Every mutant of :mod:`benchmarks.mutants` overspends one draw or
one budget share of a shipped mechanism; for each, the runner starts pytest on the mutant's
aimed tests with :mod:`benchmarks.mutation_plugin`, which applies the mutant at a named seam
(:mod:`benchmarks.seams`) before any test module is imported. A mutant is *caught* when one of
its tests fails. First a baseline: every selected test, no mutant, must pass.

Loud, never a silent skip: a seam that no longer exists, a mutant whose tests never reach its
seam (0 values changed), or pytest ending other than pass/fail (collection or usage errors, a
test id that no longer exists) stops the command with exit status 2, naming the mutant and the
fix. A surviving mutant gives exit status 1. The golden hashes (tests/regression) are never
run: a test that pins bytes catches every change and shows nothing about privacy.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from benchmarks.mutants import FALSE_ALARM, MUTANTS, Mutant
from benchmarks.seams import SeamError, check

ROOT = Path(__file__).resolve().parents[1]
PLUGIN = "benchmarks.mutation_plugin"
#: "FAILED tests/x.py::test_y[case] - AssertionError: ..." (pytest -rfE, short summary)
_FAILED = re.compile(r"^(?:FAILED|ERROR) (\S+)(?: - (\w+))?", re.MULTILINE)


class MutationCheckError(SystemExit):
    """The check itself is broken (a seam moved, a test id vanished): exit status 2."""

    def __init__(self, message: str) -> None:
        print(f"mutation check broken: {message}", file=sys.stderr)
        super().__init__(2)


@dataclass
class Outcome:
    """What one mutant did: the failing tests (id, exception type), its seam's hits."""

    mutant: Mutant
    failed: list[tuple[str, str]]
    hits: int
    seconds: float

    @property
    def caught(self) -> bool:
        """One of the aimed tests failed."""
        return bool(self.failed)


def run_pytest(tests: tuple[str, ...], mutant: str = "") -> tuple[int, list[tuple[str, str]],
                                                                   dict | None, str]:
    """pytest on ``tests`` with the plugin (and ``mutant`` applied): (exit code, failures,
    the plugin's report or None, output tail)."""
    with tempfile.TemporaryDirectory(prefix="dpsynth-mutation-") as tmp:
        report = Path(tmp) / "report.json"
        env = dict(os.environ, DPSYNTH_MUTANT=mutant, DPSYNTH_MUTANT_REPORT=str(report),
                   COLUMNS="400")  # the short summary keeps each failure's exception type
        env.pop("KAFKA_BOOTSTRAP_SERVERS", None)  # no broker: unit and statistical tests only
        proc = subprocess.run(  # noqa: S603 - our interpreter, our tests
            [sys.executable, "-m", "pytest", "-q", "-rfE", "--no-header", "-p", PLUGIN,
             "-o", "addopts=", "-p", "no:cacheprovider", *tests],
            cwd=ROOT, env=env, capture_output=True, text=True, check=False)
        plugin = json.loads(report.read_text()) if report.exists() else None
    tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
    return proc.returncode, _FAILED.findall(proc.stdout), plugin, tail


def check_mutant(mutant: Mutant) -> Outcome:
    """Run one mutant's tests; raise :class:`MutationCheckError` unless it passed or failed
    with its seam exercised."""
    started = time.monotonic()
    code, failed, plugin, tail = run_pytest(mutant.tests, mutant.name)
    if plugin is None:
        raise MutationCheckError(f"{mutant.name!r} could not be applied (pytest exit {code}); "
                                 f"update benchmarks/mutants.py:\n{tail}")
    if code not in (0, 1):
        raise MutationCheckError(f"{mutant.name!r}: pytest exit {code} (not a verdict: a test id "
                                 f"or the collection is broken):\n{tail}")
    if plugin["hits"] == 0:
        raise MutationCheckError(f"{mutant.name!r} was never exercised: its tests did not reach "
                                 f"its seam ({mutant.seam.describe()}); the code moved — update "
                                 "the seam or the tests in benchmarks/mutants.py")
    return Outcome(mutant, failed, int(plugin["hits"]), time.monotonic() - started)


def check_mutants(mutants: tuple[Mutant, ...] = MUTANTS,
                  log: Callable[[str], None] = print) -> list[Outcome]:
    """The baseline, then every mutant; their outcomes."""
    for mutant in mutants:  # every seam exists before anything runs
        try:
            check(mutant.seam)
        except SeamError as e:
            raise MutationCheckError(f"{mutant.name!r}: {e}") from None
    selections = tuple(sorted({t for m in mutants for t in m.tests}))
    started = time.monotonic()
    code, failed, plugin, tail = run_pytest(selections)
    if code != 0 or plugin is None:
        raise MutationCheckError(f"baseline: the unmutated tests do not pass (exit {code}, "
                                 f"{failed[:5]}):\n{tail}")
    log(f"baseline: {len(selections)} aimed tests pass unmutated "
        f"({time.monotonic() - started:.0f} s)")
    outcomes = []
    for mutant in mutants:
        outcome = check_mutant(mutant)
        outcomes.append(outcome)
        caught = ", ".join(f"{_short(t)} ({_kind(e)})" for t, e in outcome.failed[:3])
        log(f"{'caught' if outcome.caught else 'SURVIVED':8} {mutant.name}: {caught or '-'} "
            f"[{outcome.hits} values changed, {outcome.seconds:.0f} s]")
    return outcomes


def _short(test_id: str) -> str:
    return test_id.split("::", 1)[-1]


def _kind(word: str) -> str:
    """The failure's kind from the short summary ("assert …" is a plain assertion)."""
    return "AssertionError" if word == "assert" else word or "failed"


def markdown(outcomes: list[Outcome]) -> str:
    """The table of docs/privacy.md P14: mutant → the aimed tests that caught it."""
    rows = ["| mutant | component | seam | caught by (false-alarm rate) |", "|---|---|---|---|"]
    for o in outcomes:
        names = list(dict.fromkeys(_short(t).split("[")[0] for t, _ in o.failed))
        caught = "; ".join(f"`{n}` ({FALSE_ALARM.get(n, '?')})" for n in names)
        rows.append(f"| {o.mutant.name} | {o.mutant.component} | {o.mutant.seam.describe()} | "
                    f"{caught or '**not caught**'} |")
    return "\n".join(rows)
