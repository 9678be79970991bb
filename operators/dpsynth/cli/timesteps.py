"""Steps of ``dpsynth run`` from a declared time column: public time for files (issue 13).

Layer: adapter. Under add/remove neighbours the record count is private, so a step may not end
after N records (docs/privacy.md P11). A file has no clock, but its records may carry a time:
``--time-column`` names it, ``--time-origin`` and ``--time-period`` declare the grid, and step
k holds the records with origin + k·period ≤ time < origin + (k+1)·period. The grid is declared,
not taken from the data, so one record more or less never moves a boundary, and the number of
steps, ⌈(end − origin)/period⌉, comes from ``--time-end`` (required under add/remove: the time
of the latest record is private too; under replacement it defaults to the step after it).
A record whose time does not parse, or lies outside [origin, end), is rejected (dead-lettered
with the rule, never the value).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import click
import numpy as np


def parse_time(value: Any) -> float | None:
    """Seconds (or the column's own unit) of a number or an ISO 8601 time (naive = UTC).

    >>> parse_time(12.5), parse_time("1970-01-01T00:01:00"), parse_time("soon")
    (12.5, 60.0, None)
    """
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value) if math.isfinite(value) else None
    if isinstance(value, str):
        try:
            return parse_time(float(value))
        except ValueError:
            pass
        try:
            when = datetime.fromisoformat(value.strip())
        except ValueError:
            return None
        return (when if when.tzinfo else when.replace(tzinfo=UTC)).timestamp()
    return None


@dataclass(frozen=True)
class TimeSteps:
    """The declared grid: step k is [origin + k·period, origin + (k+1)·period)."""

    column: str
    origin: float
    period: float
    end: float | None

    def buckets(self, records: Sequence[Any]) -> tuple[np.ndarray, list[tuple[int, str]]]:
        """The step of every record (−1 when rejected) and the rejects (index, reason)."""
        steps = np.full(len(records), -1, np.int64)
        rejects: list[tuple[int, str]] = []
        end = math.inf if self.end is None else self.end
        for i, record in enumerate(records):
            when = parse_time(record.get(self.column)) if isinstance(record, dict) else None
            if when is None:
                rejects.append((i, f"time column {self.column!r} must be a number or an "
                                   "ISO 8601 time"))
            elif not self.origin <= when < end:
                rejects.append((i, f"time column {self.column!r} outside the declared "
                                   "[--time-origin, --time-end)"))
            else:
                steps[i] = int((when - self.origin) // self.period)
        return steps, rejects

    def n_steps(self, steps: np.ndarray) -> int:
        """⌈(end − origin)/period⌉ (declared), or through the latest record's step."""
        if self.end is not None:  # privacy: P11 (the number of steps is declared)
            return max(math.ceil((self.end - self.origin) / self.period), 0)
        return int(steps.max()) + 1 if steps.size and steps.max() >= 0 else 0


def time_steps(column: str | None, origin: str | None, period: float | None,
               end: str | None, neighbours: str, *,
               library: str = "OnlineSynthesizer") -> TimeSteps | None:
    """The declared grid of the options, or None; UsageError naming the missing option.

    ``library`` names the class whose add/step the error suggests.
    """
    if column is None:
        if neighbours == "add_remove":  # privacy: P11 (a step may end only on a public clock)
            raise click.UsageError(
                "--neighbours add_remove: steps of --release-every records would reveal the "
                "private record count; declare public time instead: --time-column COLUMN "
                "--time-origin T0 --time-period P --time-end T1 (or use --neighbours replace, "
                f"where the count is public, or feed steps with the library: {library}.add "
                "and .step)")
        if origin is not None or period is not None or end is not None:
            raise click.UsageError("--time-origin, --time-period and --time-end need "
                                   "--time-column")
        return None
    if origin is None or period is None:
        raise click.UsageError("--time-column needs --time-origin and --time-period (the grid "
                               "is declared, never taken from the data)")
    if end is None and neighbours == "add_remove":
        raise click.UsageError(
            "--neighbours add_remove needs --time-end: the number of steps must not depend on "
            "the latest record's time (a private value)")
    values: dict[str, float] = {}
    for name, text in (("--time-origin", origin), ("--time-end", end)):
        if text is not None:
            value = parse_time(text)
            if value is None:
                raise click.UsageError(f"{name} must be a number or an ISO 8601 time")
            values[name] = value
    if not (math.isfinite(period) and period > 0):
        raise click.UsageError("--time-period must be a number > 0 (in the column's unit; "
                               "seconds for ISO 8601 times)")
    if end is not None and values["--time-end"] <= values["--time-origin"]:
        raise click.UsageError("--time-end must come after --time-origin (the declared grid "
                               "would hold no step)")
    return TimeSteps(column, values["--time-origin"], float(period), values.get("--time-end"))


def time_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``--time-column``, ``--time-origin``, ``--time-period``, ``--time-end``."""
    options = [
        click.option("--time-column", help="Column of the input holding each record's time: "
                     "steps come from it (public time), not from --release-every."),
        click.option("--time-origin", help="Start of step 0 (a number in the column's unit, or "
                     "an ISO 8601 time)."),
        click.option("--time-period", type=float,
                     help="Length of a step, in the column's unit (seconds for ISO times)."),
        click.option("--time-end", help="End of the last step (exclusive): the number of steps "
                     "is (end − origin)/period. Required under --neighbours add_remove."),
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn
