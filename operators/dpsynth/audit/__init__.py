"""The neighbour audit: runs public entry points on neighbouring inputs under many keys (issue 13).

Layer: audit (above the worker: it drives every engine, the commands' code through
:mod:`dpsynth.cli.audit`, and the worker through a real broker; nothing below imports it).
"""

from __future__ import annotations
