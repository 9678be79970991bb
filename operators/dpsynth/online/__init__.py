"""Online (continual) synthesis: HVZ Alg 1 and the step-block engines, behind one protocol.

Layer: core. :class:`OnlineSynthesizer` (time, ticks or public steps, releases, snapshots) drives
one *mechanism* chosen by name: ``paper`` (HVZ Alg 1 verbatim), ``accurate`` (per-level GLS),
``adaptive`` / ``blocks`` (doubling blocks of public steps with PrivTree or PMM histograms).
"""

from __future__ import annotations

from dpsynth.online.synthesizer import OnlineSynthesizer

__all__ = ["OnlineSynthesizer"]
