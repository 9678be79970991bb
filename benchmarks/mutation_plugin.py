"""pytest plugin of the mutation check: applies one mutant in the test process (issue 25).

Layer: adapter (benchmark). Loaded only by the runner (``pytest -p benchmarks.mutation_plugin``,
:mod:`benchmarks.mutation`), never by the suite. ``-p`` plugins are imported before conftest
files, entry-point plugins and test modules, so the mutant named by ``DPSYNTH_MUTANT`` is in
place before any test imports the product. At the end the plugin writes what it did to
``DPSYNTH_MUTANT_REPORT`` (JSON: the mutant and how many values its seam changed); no report
means the mutant could not be applied, and the runner stops.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from benchmarks import seams
from benchmarks.mutants import BY_NAME

MUTANT = os.environ.get("DPSYNTH_MUTANT", "")
REPORT = os.environ.get("DPSYNTH_MUTANT_REPORT", "")

if MUTANT:
    if MUTANT not in BY_NAME:
        raise seams.SeamError(f"no mutant named {MUTANT!r} in benchmarks/mutants.py")
    BY_NAME[MUTANT].seam.apply()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Record the mutant and its seam's hits for the runner."""
    if REPORT:
        Path(REPORT).write_text(json.dumps({"mutant": MUTANT, "hits": seams.HITS[0],
                                            "exitstatus": int(exitstatus)}))
