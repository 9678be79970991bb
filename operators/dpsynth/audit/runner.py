"""Run an entry point on D and its neighbours under many keys; judge and tabulate (issue 13).

Layer: audit. :func:`audit_entry` runs D and every neighbour D′ of the entry's notion
(:mod:`dpsynth.audit.inputs`) under the same keys, then reports

(a) every **deterministic difference** (:mod:`dpsynth.audit.fields`): any fails, except in
    the fields an entry declares noisy outputs too exact at its ε to judge (reported);
(b) the **empirical ε lower bound** of every statistic on every pair
    (:mod:`dpsynth.audit.stats`, held-out thresholds, Clopper–Pearson, Bonferroni over the
    entry's tests): the entry fails if the largest exceeds the configured ε.

Keys are public and reproducible: key i = SHA-256("dpsynth-audit", seed, i). They are audit
keys, never a run's secret.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from dpsynth.audit.entries import EntryPoint
from dpsynth.audit.fields import (
    Difference,
    deterministic_differences,
    false_alarm_bound,
    field_kind,
)
from dpsynth.audit.inputs import neighbours
from dpsynth.audit.stats import ALPHA, Bound, held_out_bound, max_certifiable


def audit_keys(count: int, seed: int = 0) -> list[bytes]:
    """``count`` public, reproducible 32-byte audit keys.

    >>> [k.hex()[:8] for k in audit_keys(2)] == [k.hex()[:8] for k in audit_keys(2)]
    True
    """
    return [hashlib.sha256(b"dpsynth-audit\x00%d\x00%d" % (seed, i)).digest()
            for i in range(count)]


@dataclass
class EntryReport:
    """The audit of one entry point."""

    entry: str
    notion: str
    epsilon: float
    keys: int
    differences: list[Difference]
    bounds: list[Bound]
    seconds: float
    alpha: float = ALPHA
    pairs: list[str] = field(default_factory=list)
    broken: list[str] = field(default_factory=list)  # runs that failed (non-zero exit codes)
    #: Deterministic differences in fields declared noisy outputs (not judged at this ε).
    unjudged: list[Difference] = field(default_factory=list)

    @property
    def epsilon_lower(self) -> float:
        """The largest ε lower bound over the statistics and pairs."""
        return max((b.epsilon for b in self.bounds), default=0.0)

    @property
    def strongest(self) -> Bound | None:
        """The bound that reached :attr:`epsilon_lower`."""
        return max(self.bounds, key=lambda b: b.epsilon, default=None)

    @property
    def certifiable(self) -> float:
        """The largest ε lower bound these keys and tests can certify (their power)."""
        return max(max_certifiable(self.keys, max(len(self.bounds), 1), self.alpha), 0.0)

    @property
    def passed(self) -> bool:
        """Every run succeeded, no deterministic difference, every ε lower bound ≤ ε."""
        return not self.broken and not self.differences and self.epsilon_lower <= self.epsilon

    def lines(self) -> list[str]:
        """A readable report."""
        verdict = "PASS" if self.passed else "FAIL"
        out = [f"{verdict} {self.entry} (ε = {self.epsilon:g}, {self.keys} keys, "
               f"{self.seconds:.1f} s): {len(self.differences)} deterministic differences; "
               f"ε lower bound {self.epsilon_lower:.3f} (at most {self.certifiable:.2f} "
               f"certifiable, {1 - self.alpha:.0%} confidence)"]
        if self.unjudged:
            kinds = sorted({field_kind(d.field) for d in self.unjudged})
            out.append(f"  not judged at ε = {self.epsilon:g}: {len(self.unjudged)} "
                       f"deterministic differences in noisy outputs ({', '.join(kinds)})")
        out += [f"  broken: {b}" for b in self.broken[:5]]
        out += [f"  deterministic: {d.describe()}" for d in self.differences[:20]]
        if len(self.differences) > 20:
            out.append(f"  … and {len(self.differences) - 20} more")
        strongest = self.strongest
        if strongest is not None and strongest.epsilon > 0:
            out.append(f"  strongest test: {strongest.describe()}")
        return out


def audit_entry(entry: EntryPoint, keys: Sequence[bytes], *,
                alpha: float = ALPHA) -> EntryReport:
    """Run ``entry`` on D and its neighbours under ``keys``; see the module docstring."""
    if len(keys) < 4:
        raise ValueError("the audit needs at least 4 keys (half select, half judge)")
    started = time.monotonic()
    data = entry.input()
    pairs = entry.pairs(data) if entry.pairs is not None else neighbours(data, entry.notion)
    outputs = entry.outputs([data, *(p.data for p in pairs)], keys)
    on_d = outputs[0]
    broken = [f"{name}, key {j}: exit code {o.fields['exit_code']}"
              for name, outs in zip(("D", *(p.name for p in pairs)), outputs, strict=True)
              for j, o in enumerate(outs) if o.fields.get("exit_code", 0) != 0]
    differences: list[Difference] = []
    samples = []
    for pair, on_neighbour in zip(pairs, outputs[1:], strict=True):
        differences += deterministic_differences([o.fields for o in on_d],
                                                 [o.fields for o in on_neighbour], pair.name)
        stats_d = [entry.statistics(o.view, pair) for o in on_d]
        stats_n = [entry.statistics(o.view, pair) for o in on_neighbour]
        names = sorted({name for s in (*stats_d, *stats_n) for name in s})
        for name in names:
            samples.append((name, pair.name, np.array([s.get(name, 0.0) for s in stats_d]),
                            np.array([s.get(name, 0.0) for s in stats_n])))
    tests = max(len(samples), 1)
    bounds = [held_out_bound(name, pair, a, b, tests, alpha) for name, pair, a, b in samples]
    differences.sort(key=lambda d: (d.field.count("."), d.field))  # top-level fields first
    unjudged = [d for d in differences if field_kind(d.field) in entry.noisy_outputs]
    judged = [d for d in differences if field_kind(d.field) not in entry.noisy_outputs]
    return EntryReport(entry.name, entry.notion, entry.epsilon, len(keys), judged, bounds,
                       time.monotonic() - started, alpha, [p.name for p in pairs], broken,
                       unjudged)


def markdown_table(reports: Iterable[EntryReport]) -> str:
    """The audit table of docs/privacy.md: one row per entry point."""
    rows = ["| entry point | notion | keys | deterministic differences | ε lower bound "
            "(strongest test) | certifiable | ε | verdict |",
            "|---|---|---|---|---|---|---|---|"]
    for r in reports:
        strongest = r.strongest
        test = ("—" if strongest is None or strongest.epsilon == 0 else
                f"{strongest.statistic}, {strongest.pair}")
        rows.append(f"| `{r.entry}` | {r.notion} | {r.keys} | {len(r.differences)} | "
                    f"{r.epsilon_lower:.2f} ({test}) | {r.certifiable:.2f} | {r.epsilon:g} | "
                    f"{'pass' if r.passed else '**FAIL**'} |")
    return "\n".join(rows)


def false_alarm_note(epsilon: float, keys: int, alpha: float = ALPHA) -> str:
    """The false-alarm rates of the pass/fail decisions, for reports."""
    return (f"false alarms: a field of an ε-DP output is flagged with probability at most "
            f"{false_alarm_bound(epsilon, keys):.1e} ({keys} keys, ε = {epsilon:g}); the "
            f"ε lower bounds of one entry exceed the true loss with probability at most "
            f"{alpha:g}")
