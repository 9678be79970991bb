"""End-to-end speed of the default mechanism: ingest plus a release every 500 records, 10⁵
records, d = 2, ε = 1. Prints records/s. Compare two versions of the code by running it under
each one's PYTHONPATH, alternately (docs/benchmarks.md §13):

    PYTHONPATH=<checkout>/operators python -m benchmarks.default_speed gowalla add_remove
"""

from __future__ import annotations

import sys

from benchmarks.drift import Case, online_release, stream_prefix


def records_per_second(data: str, notion: str, n: int = 100_000) -> float:
    """One run of the default (``mechanism="auto"``) over ``n`` records of ``data``."""
    case = Case(data, 2, n, "auto", 1.0, notion, seed=0)
    x = stream_prefix(case)
    return len(x) / online_release(case, x)[1]


if __name__ == "__main__":
    print(f"{records_per_second(sys.argv[1], sys.argv[2]):.0f}")
