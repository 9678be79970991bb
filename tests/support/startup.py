"""The worker's start-up phase lines in its log (our own kit; dpsynth.stream.phases)."""

from __future__ import annotations

import re

from dpsynth.stream.phases import PHASES

_LINE = re.compile(r"start-up \[(\d+\.\d) s\] ([a-z ]+?(?: \d+)?)(?::|$)", re.MULTILINE)

#: The phases of one start whose partition 0 loads, in order.
ONE_PARTITION = [p if p != "restoring partition" else "restoring partition 0" for p in PHASES]


def startup_phases(log_text: str) -> list[tuple[str, float]]:
    """(phase, seconds since the process started) of every start-up line, in log order."""
    return [(m.group(2), float(m.group(1))) for m in _LINE.finditer(log_text)]
