"""Online (continual) synthesis: HVZ Alg 1 and the step-block engines, behind one protocol.

Layer: core. :class:`OnlineSynthesizer` (time, ticks or public steps, releases, snapshots) drives
one *mechanism* chosen by name: ``guided`` (doubling blocks of public steps with octal time
nodes and partitions from released summaries), ``adaptive`` (the same blocks with PrivTree
histograms), ``paper`` (HVZ Alg 1 verbatim).
"""

from __future__ import annotations

from dpsynth.online.synthesizer import OnlineSynthesizer

__all__ = ["OnlineSynthesizer"]
