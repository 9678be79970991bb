"""Mutation check of the privacy core (issue 13 item 6): ``python -m benchmarks mutation``.

Each mutant overspends one component, one at a time: a noise scale × 0.25, or the budget a
component is *given* × 4 where the accounting does not see it (so the worst-case check still
passes and only the noise gives the overspend away). The runner copies ``operators/`` and
``tests/`` to a temporary directory once, applies each mutant textually (the snippet must occur
exactly once), runs the component's tests — and, where named, ``dpsynth audit`` on the entry
points that reach it — from the copy (``PYTHONPATH`` first, so the copy is what is imported),
then restores the file. A mutant is *caught* when a test fails or the audit fails. The golden
hashes (tests/regression) are never run: a test that pins bytes catches every change and shows
nothing about privacy. A baseline run of every test selection on the unmutated copy must pass
first, or the check means nothing.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: Test selections per component, the tests aimed at it first (so the table names them).
OVERSPEND = "tests/statistical/test_overspend.py::"
NOISE = ("tests/unit/test_noise.py", "tests/statistical/test_noise_distribution.py")
COUNTERS = ("tests/unit/test_counters.py", "tests/conformance/test_counters.py",
            "tests/statistical/test_counters_distribution.py")
BLOCKS = (OVERSPEND + "test_P9_block_noise_scales_fit_the_documented_shares",
          OVERSPEND + "test_P10_one_split_decision_costs_at_most_the_decision_share",
          "tests/unit/test_blocks.py", "tests/unit/test_privtree.py")
OFFLINE = (OVERSPEND + "test_P7_pmm_draws_spend_at_most_epsilon", "tests/unit/test_offline.py",
           "tests/unit/test_psmm.py", "tests/unit/test_lowdim.py",
           "tests/statistical/test_offline_psmm.py", "tests/statistical/test_offline_lowdim.py")
TABULAR = (OVERSPEND + "test_P12_tabular_measurements_and_size_fit_the_split",
           OVERSPEND + "test_em_frequencies_fit_exp_eps_u_over_two_delta_computed_here",
           "tests/unit/tabular", "tests/statistical/test_tabular_counters.py",
           "tests/statistical/test_tabular_selection.py",
           "tests/statistical/test_tabular_shares.py")
ACCURATE = (OVERSPEND + "test_P8_accurate_cells_spend_their_scheduled_epsilon",
            "tests/unit/test_accurate.py")

@dataclass(frozen=True)
class Mutant:
    """One textual mutant: ``old`` (exactly once in ``path``) becomes ``new``."""

    name: str
    component: str
    path: str
    old: str
    new: str
    tests: tuple[str, ...]
    audit: tuple[str, ...] = ()


def _scale(name: str, component: str, path: str, old: str, new: str,
           tests: tuple[str, ...], audit: tuple[str, ...] = ()) -> Mutant:
    return Mutant(name, component, path, old, new, tests, audit)


MUTANTS = (
    # -- the sampler every component draws from -----------------------------------------------
    _scale("discrete Laplace sampler scale × 0.25 (every draw)", "noise: exact sampler",
           "operators/dpsynth/noise/samplers.py",
           "return _rounded_up(float(scale))", "return _rounded_up(float(scale) / 4)", NOISE),
    # -- continual counters --------------------------------------------------------------
    _scale("Binary Mechanism node noise × 0.25", "counters: Binary Mechanism",
           "operators/dpsynth/counters/binary.py",
           "self.scale = self.levels / epsilon  # privacy: P4",
           "self.scale = 0.25 * self.levels / epsilon  # privacy: P4", COUNTERS),
    _scale("Sparse Counting threshold/check noise × 0.25", "counters: Sparse (Alg 2)",
           "operators/dpsynth/counters/sparse.py",
           "self.scale = 2.0 / self.epsilon  # Lap_Z(2/ε)",
           "self.scale = 0.5 / self.epsilon  # Lap_Z(2/ε)", COUNTERS),
    _scale("Sparse Counting inner Binary Mechanism budget × 4", "counters: Sparse (Alg 2)",
           "operators/dpsynth/counters/sparse.py",
           "BinaryMechanism(self.epsilon / 2, self.horizon",
           "BinaryMechanism(self.epsilon * 2, self.horizon", COUNTERS),
    _scale("level end (S̃) noise × 0.25", "counters: Inhomogeneous / level",
           "operators/dpsynth/counters/inhomogeneous.py",
           "return 2.0 / level_epsilon", "return 0.5 / level_epsilon", COUNTERS),
    _scale("level Sparse budget × 4 (threshold, checks, Binary Mechanism)",
           "counters: Inhomogeneous / level", "operators/dpsynth/counters/level.py",
           "sparse_epsilon = eps_r / 2", "sparse_epsilon = eps_r * 2", COUNTERS),
    _scale("level threshold/check noise × 0.25", "counters: Inhomogeneous / level",
           "operators/dpsynth/counters/level.py",
           "self.scale = 2.0 / sparse_epsilon", "self.scale = 0.5 / sparse_epsilon", COUNTERS),
    _scale("level Binary Mechanism noise × 0.25", "counters: Inhomogeneous / level",
           "operators/dpsynth/counters/level.py",
           "self.bm_scale = self.bm_levels / (sparse_epsilon / 2)",
           "self.bm_scale = 0.25 * self.bm_levels / (sparse_epsilon / 2)", COUNTERS),
    # -- accurate mode -----------------------------------------------------------------------
    _scale("accurate level counts noise × 0.25", "accurate: level histograms",
           "operators/dpsynth/online/accurate.py",
           "return 1.0 / ((1.0 - self.fresh) * self.schedule.level_epsilon(j, r))",
           "return 0.25 / ((1.0 - self.fresh) * self.schedule.level_epsilon(j, r))", ACCURATE),
    _scale("accurate fresh Binary Mechanism noise × 0.25", "accurate: fresh counter",
           "operators/dpsynth/online/accurate.py",
           "scale = levels / (self.fresh * self.schedule.level_epsilon(j, r))",
           "scale = 0.25 * levels / (self.fresh * self.schedule.level_epsilon(j, r))", ACCURATE),
    # -- PrivTree and step blocks --------------------------------------------------------
    _scale("PrivTree decision noise × 0.25", "PrivTree decisions",
           "operators/dpsynth/online/privtree.py",
           "sigma = effective_scale(params.scale_units)  # privacy: P2a",
           "sigma = effective_scale(params.scale_units / 4)  # privacy: P2a", BLOCKS,
           ("library:adaptive:*",)),
    _scale("PrivTree decision budget × 4 (block summaries)", "PrivTree decisions",
           "operators/dpsynth/online/blocks.py",
           "cells, weights, self.budget.structure, self.budget.counts, self._noise, context,",
           "cells, weights, 4 * self.budget.structure, self.budget.counts, self._noise, context,",
           BLOCKS, ("library:adaptive:*",)),
    _scale("PrivTree leaf count noise × 0.25", "PrivTree counts",
           "operators/dpsynth/online/privtree.py",
           "return true + noise.discrete_laplace_at(1.0 / epsilon,",
           "return true + noise.discrete_laplace_at(0.25 / epsilon,", BLOCKS,
           ("library:adaptive:*",)),
    _scale("PrivTree leaf count budget × 4 (block summaries)", "PrivTree counts",
           "operators/dpsynth/online/blocks.py",
           "cells, weights, self.budget.structure, self.budget.counts, self._noise, context,",
           "cells, weights, self.budget.structure, 4 * self.budget.counts, self._noise, context,",
           BLOCKS, ("library:adaptive:*",)),
    _scale("step summary decision budget × 4", "PrivTree decisions (step summaries)",
           "operators/dpsynth/online/blocks.py",
           "cells, weights, structure, counts_eps, self._noise,",
           "cells, weights, 4 * structure, counts_eps, self._noise,", BLOCKS,
           ("library:adaptive:*",)),
    _scale("step summary count budget × 4", "PrivTree counts (step summaries)",
           "operators/dpsynth/online/blocks.py",
           "counts_eps = self.budget.steps - structure",
           "counts_eps = 4 * (self.budget.steps - structure)", BLOCKS, ("library:adaptive:*",)),
    _scale("open-block size noise × 0.25", "block sizes",
           "operators/dpsynth/online/blocks.py",
           "scale = heights / self.budget.size", "scale = 0.25 * heights / self.budget.size",
           BLOCKS, ("library:adaptive:add_remove", "library:blocks:add_remove")),
    _scale("blocks' PMM budget × 4", "block PMM levels", "operators/dpsynth/online/blocks.py",
           "eps = self.budget.counts\n", "eps = 4 * self.budget.counts\n", BLOCKS,
           ("library:blocks:*",)),
    # -- offline -------------------------------------------------------------------------
    _scale("PMM level noise × 0.25", "PMM levels", "operators/dpsynth/offline/pmm.py",
           "lam = noise.discrete_laplace_at(float(scales[j]),",
           "lam = noise.discrete_laplace_at(0.25 * float(scales[j]),", OFFLINE,
           ("library:pmm:*",)),
    _scale("PMM budget × 4 under replacement", "PMM levels", "operators/dpsynth/offline/pmm.py",
           "eps = epsilon / 2 if neighbours == \"replace\" else epsilon",
           "eps = epsilon * 2 if neighbours == \"replace\" else epsilon", OFFLINE,
           ("library:pmm:replace",)),
    _scale("PMM resolution size noise × 0.25", "PMM size (add/remove)",
           "operators/dpsynth/offline/pmm.py",
           "lap = noise.discrete_laplace_at(1.0 / spent,",
           "lap = noise.discrete_laplace_at(0.25 / spent,", OFFLINE, ("library:pmm:add_remove",)),
    _scale("PSMM cell noise × 0.25", "PSMM cells", "operators/dpsynth/offline/psmm.py",
           "lam = KeyedNoise(key).discrete_laplace_at(scale,",
           "lam = KeyedNoise(key).discrete_laplace_at(0.25 * scale,", OFFLINE,
           ("library:psmm:*",)),
    _scale("lowdim covariance and mean noise × 0.25", "lowdim (Alg 6–7)",
           "operators/dpsynth/offline/lowdim.py",
           "z = noise.discrete_laplace_at(float(c * w),",
           "z = noise.discrete_laplace_at(0.25 * float(c * w),", OFFLINE,
           ("library:lowdim:*",)),
    # -- tabular -------------------------------------------------------------------------
    _scale("exponential mechanism budget × 4", "tabular: exponential mechanism",
           "operators/dpsynth/tabular/selection.py",
           "logits = epsilon * (u - u.max()) / (2.0 * sensitivity)",
           "logits = 4 * epsilon * (u - u.max()) / (2.0 * sensitivity)", TABULAR,
           ("library:tabular:*",)),
    _scale("exponential mechanism sensitivity × 0.25 (selection)",
           "tabular: exponential mechanism", "operators/dpsynth/tabular/synthesizer.py",
           "self.em_sensitivity = self.s / (", "self.em_sensitivity = 0.25 * self.s / (",
           TABULAR, ("library:tabular:*",)),
    _scale("measurement counter noise × 0.25", "tabular: measurements",
           "operators/dpsynth/tabular/counters.py",
           "self.scale = self.sensitivity / self.epsilon * (1 if kind == \"simple\" else 2)",
           "self.scale = 0.25 * self.sensitivity / self.epsilon * (1 if kind == \"simple\" "
           "else 2)", TABULAR, ("library:tabular:*",)),
    _scale("baseline measurement noise × 0.25", "tabular: measurements (StreamingMWEM)",
           "operators/dpsynth/tabular/synthesizer.py",
           "scale = self.s / self.eps_measure", "scale = 0.25 * self.s / self.eps_measure",
           TABULAR),
    _scale("size counter budget × 4", "tabular: size counter",
           "operators/dpsynth/tabular/size.py",
           "Counter(SIZE_COUNTER, 1, self.epsilon, noise, context)",
           "Counter(SIZE_COUNTER, 1, 4 * self.epsilon, noise, context)", TABULAR,
           ("library:tabular:add_remove",)),
)


@dataclass
class Outcome:
    """What one mutant did."""

    mutant: Mutant
    caught_by: list[str]
    audit_failed: bool | None
    seconds: float

    @property
    def caught(self) -> bool:
        """A test or the audit failed."""
        return bool(self.caught_by) or bool(self.audit_failed)


def copy_tree(destination: Path) -> Path:
    """``operators/``, ``tests/``, ``schemas/`` and ``pyproject.toml`` of this checkout."""
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".pytest_cache")
    for name in ("operators", "tests", "schemas"):
        shutil.copytree(ROOT / name, destination / name, ignore=ignore)
    shutil.copy2(ROOT / "pyproject.toml", destination / "pyproject.toml")
    return destination


def _environment(root: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(root / "operators"), str(root)])
    env.pop("KAFKA_BOOTSTRAP_SERVERS", None)  # the audit of library entry points only
    return env


_FAILED = re.compile(r"^(?:FAILED|ERROR) (\S+)", re.MULTILINE)


def run_tests(root: Path, tests: tuple[str, ...]) -> tuple[int, list[str]]:
    """pytest on ``tests`` in the copy: (exit code, failing test ids)."""
    proc = subprocess.run(  # noqa: S603 - our interpreter, our tests
        [sys.executable, "-m", "pytest", "-q", "-rfE", "-p", "no:cacheprovider",
         "--no-header", "-o", "addopts=", "-W", "error", *tests],
        cwd=root, env=_environment(root), capture_output=True, text=True, check=False)
    return proc.returncode, _FAILED.findall(proc.stdout)


def run_audit(root: Path, patterns: tuple[str, ...], keys: int) -> bool:
    """``dpsynth audit PATTERNS`` in the copy: True when it fails (a leak found)."""
    proc = subprocess.run(  # noqa: S603 - our interpreter, our package
        [sys.executable, "-m", "dpsynth", "audit", *patterns, "--keys", str(keys)],
        cwd=root, env=_environment(root), capture_output=True, text=True, check=False)
    return proc.returncode != 0


def apply(root: Path, mutant: Mutant) -> str:
    """Write the mutant into the copy; returns the original text (to restore)."""
    path = root / mutant.path
    text = path.read_text()
    if text.count(mutant.old) != 1:
        raise SystemExit(f"mutant {mutant.name!r}: its snippet occurs {text.count(mutant.old)} "
                         f"times in {mutant.path} (must be once): update benchmarks/mutation.py")
    path.write_text(text.replace(mutant.old, mutant.new))
    return text


def check_mutants(mutants: tuple[Mutant, ...], *, audit_keys: int | None,
                  log: callable = print) -> list[Outcome]:  # type: ignore[valid-type]
    """Baseline, then every mutant; returns their outcomes."""
    outcomes = []
    with tempfile.TemporaryDirectory(prefix="dpsynth-mutation-") as tmp:
        root = copy_tree(Path(tmp))
        selections = sorted({t for m in mutants for t in m.tests})
        code, failed = run_tests(root, tuple(selections))
        if code != 0:
            raise SystemExit(f"baseline: the unmutated tests fail ({failed[:5]}); fix them first")
        log(f"baseline: {len(selections)} test selections pass unmutated")
        for mutant in mutants:
            started = time.monotonic()
            original = apply(root, mutant)
            try:
                _, failed = run_tests(root, mutant.tests)
                audit = (run_audit(root, mutant.audit, audit_keys)
                         if audit_keys and mutant.audit else None)
            finally:
                (root / mutant.path).write_text(original)
            outcome = Outcome(mutant, failed, audit, time.monotonic() - started)
            outcomes.append(outcome)
            verdict = "caught" if outcome.caught else "SURVIVED"
            log(f"{verdict:8} {mutant.name} ({mutant.component}): "
                f"{', '.join(failed[:3]) or '-'}; audit "
                f"{'-' if audit is None else 'FAIL' if audit else 'pass'} "
                f"({outcome.seconds:.0f} s)")
    return outcomes


def markdown(outcomes: list[Outcome]) -> str:
    """The table of docs/privacy.md."""
    rows = ["| mutant | component | caught by |", "|---|---|---|"]
    for o in outcomes:
        tests = [t.split("::", 1)[-1].split("[")[0] for t in o.caught_by]
        names = sorted(set(tests), key=tests.index)
        by = ", ".join(f"`{n}`" for n in names[:3]) + (" …" if len(names) > 3 else "")
        if o.audit_failed:
            by += ("; " if by else "") + "the audit (" + ", ".join(o.mutant.audit) + ")"
        rows.append(f"| {o.mutant.name} | {o.mutant.component} | {by or '**not caught**'} |")
    return "\n".join(rows)
