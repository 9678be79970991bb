"""``python -m dpsynth.params``: print docs/settings.md; ``--write``: also rewrite the
generated field blocks of dpsynth/settings.py (after adding or changing a parameter)."""

from __future__ import annotations

import sys
from pathlib import Path

from dpsynth.params import settings_table
from dpsynth.params.fields import write_fields

if "--write" in sys.argv[1:]:
    settings = Path(__file__).resolve().parents[1] / "settings.py"
    print(f"{settings}: {'rewritten' if write_fields(settings) else 'unchanged'}",
          file=sys.stderr)
print(settings_table(), end="")
