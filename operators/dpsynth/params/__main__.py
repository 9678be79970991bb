"""``python -m dpsynth.params``: print docs/settings.md."""

from __future__ import annotations

from dpsynth.params import settings_table

print(settings_table(), end="")
