"""What the embedded commands write besides releases: the output directory and diagnostics.

Layer: adapter. An ``--out`` directory is either new, or holds only an earlier run's outputs of
the same command, which are all removed before anything is written (no stale summary beside
new releases); a directory holding anything else is refused (exit status 2). Operator
diagnostics — the true counts of the raw input, rejection reasons, clipping — go to standard
error, labelled as not private: they are a function of the data, like ``dead-letter.ndjson``,
and under add/remove neighbours nothing on standard output or in the exit status may be
(docs/privacy.md P11, P14).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import click
from rich.console import Console
from rich.markup import escape

from dpsynth.clipping import ClipReport

#: Reasons listed by name in the diagnostics; the rest are summed.
SHOWN_REASONS = 5
DIAGNOSTICS_LABEL = ("operator diagnostics (true counts of the raw input: NOT private, do not "
                     "publish)")


def prepare_out_dir(out: Path, owned: Sequence[str], option: str = "--out") -> None:
    """Create ``out``, or empty it of an earlier run's outputs (``owned``: glob patterns).

    A file in ``out`` that no pattern matches is not ours: refused (click.UsageError), nothing
    deleted.
    """
    if out.is_dir():
        ours = {p for pattern in owned for p in out.glob(pattern) if p.is_file()}
        foreign = sorted(str(p.relative_to(out)) for p in out.rglob("*")
                         if not p.is_dir() and p not in ours)
        if foreign:
            shown = ", ".join(foreign[:5]) + (", …" if len(foreign) > 5 else "")
            raise click.UsageError(
                f"{option} {out} holds files this command did not write ({shown}); give a new "
                "or empty directory (an earlier run's outputs alone are replaced whole)")
        for path in ours:
            path.unlink()
    out.mkdir(parents=True, exist_ok=True)


@dataclass
class Diagnostics:
    """True counts of one run's input (operator view, not private)."""

    read: int = 0
    accepted: int = 0
    reasons: Counter[str] = field(default_factory=Counter)
    clips: ClipReport | None = None
    dropped: int | None = None  # records over their user's bound (privacy unit "user")
    dead_letter: Path | None = None

    def reject(self, reasons: Iterable[str]) -> None:
        """Count rejected records by reason (the rule broken, never the value)."""
        self.reasons.update(reasons)

    def clip(self, report: ClipReport | None) -> None:
        """Add a batch's clip report."""
        if report is not None:
            self.clips = report if self.clips is None else self.clips + report

    @property
    def rejected(self) -> int:
        """Records rejected (dead-lettered)."""
        return sum(self.reasons.values())

    def lines(self) -> list[str]:
        """The diagnostics as plain lines."""
        where = f" ({self.dead_letter})" if self.dead_letter else ""
        out = [f"records: {self.read:,} read, {self.accepted:,} accepted, "
               f"{self.rejected:,} rejected{where}"
               + ("" if self.dropped is None else f", {self.dropped:,} over their user's bound")]
        for reason, n in self.reasons.most_common(SHOWN_REASONS):
            out.append(f"  {n:,} × {reason}")
        rest = self.rejected - sum(n for _, n in self.reasons.most_common(SHOWN_REASONS))
        if rest:
            out.append(f"  {rest:,} for {len(self.reasons) - SHOWN_REASONS} other reasons")
        if self.clips is not None and self.clips.total:
            per = ", ".join(f"{c} {n:,}" for c, n in self.clips.per_column.items() if n)
            out.append(f"clipped to the schema's bounds: {self.clips.total:,} values ({per})")
        return out

    def print(self, console: Console) -> None:
        """Print the diagnostics, labelled, to ``console`` (standard error)."""
        console.print(f"[bold]{DIAGNOSTICS_LABEL}[/]", highlight=False)
        for line in self.lines():
            console.print(escape(line), highlight=False)
