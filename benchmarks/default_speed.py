"""End-to-end speed of the default mechanism: ingest plus a release every 500 records, 10⁵
records, d = 2, ε = 1. Prints records/s. Compare two versions of the code by running it under
each one's PYTHONPATH, alternately (docs/benchmarks.md §13):

    PYTHONPATH=<checkout>/operators python -m benchmarks.default_speed gowalla add_remove
"""

from __future__ import annotations

import sys
import time

import numpy as np

from dpsynth.datasets import load_gowalla
from dpsynth.online.synthesizer import OnlineSynthesizer


def records_per_second(data: str, notion: str, n: int = 100_000, every: int = 500) -> float:
    """One run of the default (``mechanism="auto"``) over ``n`` records of ``data``."""
    x = load_gowalla()[:n] if data == "gowalla" else np.random.default_rng(0).random((n, 2))
    synth = OnlineSynthesizer(2, 1.0, bytes(32), every, neighbours=notion)
    start = time.perf_counter()
    if notion == "replace":
        synth.extend(x)
    else:  # public time: a step after every batch
        for lo in range(0, len(x), every):
            synth.add(x[lo:lo + every])
            synth.step()
    return len(x) / (time.perf_counter() - start)


if __name__ == "__main__":
    print(f"{records_per_second(sys.argv[1], sys.argv[2]):.0f}")
