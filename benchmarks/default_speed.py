"""End-to-end speed of the default mechanism against another checkout, as ratios.

10⁵ records, d = 2, ε = 1, a release every 500 records (replacement: ``extend``; add/remove: a
public step after every 500 records, then a release), Gowalla and uniform data. Each
measurement is one process: a warm-up on 2,000 records (kernels compiled, caches filled), then
the median of three runs. The two versions of the code run alternately, ``--rounds`` times
each, on the same machine, so the ratio is taken under the same load (docs/benchmarks.md,
"Speed of the default"):

    python -m benchmarks.default_speed --baseline <old checkout>/operators --rounds 5

``--grid`` (issue 31): records/s of one mechanism (``auto`` by default) on one core
(``NUMBA_NUM_THREADS=1``) at every ε × t, d = 2, on uniform data and a concentrated stream
(``multiscale-100``, the held-out panel's synthetic city, benchmarks/concentrated_streams.py),
a release every 500 records (``extend``). One run per stream and ε feeds 10⁴, 10⁵, … records
and reads the clock at each t: records/s up to t, the marginal time per record over the last
decade (t/10, t] against the first 10⁴'s, and one offline PMM of the same prefix (replacement,
the same ε, warmed up at that ε) timed in the same process — the ratio online ÷ PMM. A run
skips the next t when 10× its seconds so far would exceed ``--budget`` (printed as not
measured):

    NUMBA_NUM_THREADS=1 python -m benchmarks.default_speed --grid [--max-t 10000000] [--growth G]

``--growth G`` sets ``release_growth``: steps grow to ≈ G·t records (a release every 500 records
at first).

Only the public API that every version since 0.2 has (``OnlineSynthesizer``, ``add``,
``step``, ``extend``, ``release``, ``dpsynth.datasets.load_gowalla``) is used, so an old
checkout runs it unchanged.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

CASES = (("gowalla", "add_remove"), ("uniform", "replace"), ("gowalla", "replace"),
         ("uniform", "add_remove"))
#: d = 1 (``--d1``): the same streams' first coordinate (Gowalla: latitude), where the default
#: mechanism differs from d ≥ 2.
CASES_D1 = (("gowalla-d1", "add_remove"), ("uniform-d1", "replace"), ("gowalla-d1", "replace"),
            ("uniform-d1", "add_remove"))
STEP = 500
RECORDS = 100_000


def _data(name: str) -> np.ndarray:
    base, _, d1 = name.partition("-")
    if base == "uniform":
        x = np.random.default_rng(1000).random((RECORDS, 2))
    else:
        from dpsynth.datasets import load_gowalla

        x = load_gowalla()[:RECORDS]
    return x[:, :1].copy() if d1 else x


def _seconds(x: np.ndarray, notion: str, key: bytes) -> float:
    from dpsynth import OnlineSynthesizer

    synth = OnlineSynthesizer(x.shape[1], 1.0, key, STEP, mechanism="auto", neighbours=notion)
    seconds = 0.0
    for lo in range(0, len(x), STEP):
        began = time.perf_counter()
        if notion == "replace":
            synth.extend(x[lo:lo + STEP])
        else:  # public time: one step per batch
            synth.add(x[lo:lo + STEP])
            synth.step()
            synth.release()
        seconds += time.perf_counter() - began
    return seconds


def records_per_second(data: str, notion: str) -> float:
    """Median records/s of three warm runs of the default in this process."""
    x = _data(data)
    _seconds(x[:2000], notion, bytes(32))
    runs = [_seconds(x, notion, (5000 + i).to_bytes(32, "big")) for i in range(3)]
    return len(x) / statistics.median(runs)


def _measure(operators: Path, data: str, notion: str) -> float:
    """records/s of ``data``/``notion`` with the package at ``operators`` (a fresh process)."""
    env = {**os.environ, "PYTHONPATH": f"{operators}{os.pathsep}{Path(__file__).parents[1]}"}
    out = subprocess.run([sys.executable, "-m", "benchmarks.default_speed", "--one", data, notion],
                         env=env, capture_output=True, text=True, check=True)
    return float(out.stdout.split()[-1])


def compare(baseline: Path, current: Path, rounds: int, cases: tuple = CASES) -> None:
    """Alternate the two versions ``rounds`` times per case; print medians and the ratio."""
    print(f"{'case':<22}{'baseline rec/s':>16}{'current rec/s':>16}{'ratio':>8}")
    for data, notion in cases:
        base, cur = [], []
        for _ in range(rounds):
            base.append(_measure(baseline, data, notion))
            cur.append(_measure(current, data, notion))
        b, c = statistics.median(base), statistics.median(cur)
        print(f"{data + ' ' + notion:<22}{b:>16,.0f}{c:>16,.0f}{c / b:>8.2f}", flush=True)


GRID_EPSILONS = (0.1, 1.0, 10.0, 100.0, 1e3, 1e4)
GRID_SIZES = (10_000, 100_000, 1_000_000, 10_000_000)


def _grid_stream(name: str, n: int) -> np.ndarray:
    if name == "uniform":
        return np.random.default_rng(1000).random((n, 2))
    from benchmarks.concentrated_streams import multiscale

    return multiscale(n, 100)


def _grid_run(x: np.ndarray, epsilon: float, mechanism: str, sizes: tuple[int, ...],
              budget: float, growth: float = 0.0) -> dict[int, tuple[float, int]]:
    """(seconds, releases) to each t of ``sizes`` (ascending) of one online run; stops past
    ``budget``. ``growth``: ``release_growth`` (passed only when set: old checkouts lack it)."""
    from dpsynth import OnlineSynthesizer

    options = {"mechanism": mechanism, **({"release_growth": growth} if growth else {})}
    OnlineSynthesizer(2, epsilon, bytes(32), STEP, **options).extend(x[:2000])  # warm
    synth = OnlineSynthesizer(2, epsilon, (5000).to_bytes(32, "big"), STEP, **options)
    out, done, seconds, releases = {}, 0, 0.0, 0
    for t in sizes:
        for lo in range(done, t, 100_000):
            began = time.perf_counter()
            releases += len(synth.extend(x[lo:min(t, lo + 100_000)]))
            seconds += time.perf_counter() - began
        done, out[t] = t, (seconds, releases)
        if 10 * seconds > budget:  # the next t costs at least 10× as much
            break
    return out


def _pmm_seconds(x: np.ndarray, epsilon: float) -> float:
    from dpsynth.offline.pmm import pmm_synthesize

    began = time.perf_counter()
    pmm_synthesize(x, epsilon, bytes(32), neighbours="replace")
    return time.perf_counter() - began


def speed_grid(mechanism: str = "auto", max_t: int = 10_000_000, budget: float = 600.0,
               epsilons: tuple[float, ...] = GRID_EPSILONS,
               streams: tuple[str, ...] = ("uniform", "multiscale-100"),
               growth: float = 0.0) -> None:
    """Print the ε × t grid (module docstring) as a markdown table, row by row."""
    from dpsynth.errors import ConfigError

    sizes = tuple(t for t in GRID_SIZES if t <= max_t)
    print(f"load {os.getloadavg()[0]:.1f} at start; NUMBA_NUM_THREADS="
          f"{os.environ.get('NUMBA_NUM_THREADS', 'unset')}; mechanism {mechanism}; "
          f"release_every {STEP}, release_growth {growth:g}")
    print("| stream | ε | t | records/s | marginal µs/record (last decade) | ÷ first 10⁴ "
          "| online ÷ one PMM | releases to t | load |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name in streams:
        x = _grid_stream(name, sizes[-1])
        for epsilon in epsilons:
            _pmm_seconds(x[:2000], epsilon)  # compiled, caches filled at this ε
            try:
                runs = _grid_run(x, epsilon, mechanism, sizes, budget, growth)
            except ConfigError as refused:  # e.g. paper above its per-record ε
                print(f"| {name} | {epsilon:g} | all | refused: {refused} | | | | | |",
                      flush=True)
                continue
            seconds = {t: run[0] for t, run in runs.items()}
            first = seconds[sizes[0]] / sizes[0]
            previous = (0, 0.0)
            for t in sizes:
                if t not in seconds:
                    print(f"| {name} | {epsilon:g} | {t:,} | not measured (budget) | | | | | |")
                    continue
                marginal = (seconds[t] - previous[1]) / (t - previous[0])
                pmm = _pmm_seconds(x[:t], epsilon)
                print(f"| {name} | {epsilon:g} | {t:,} | {t / seconds[t]:,.0f} | "
                      f"{marginal * 1e6:.2f} | {marginal / first:.2f} | "
                      f"{seconds[t] / pmm:.1f} | {runs[t][1]:,} | {os.getloadavg()[0]:.1f} |",
                      flush=True)
                previous = (t, seconds[t])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--baseline", type=Path, help="the other checkout's operators/ folder")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--d1", action="store_true", help="the d = 1 cases instead of d = 2")
    parser.add_argument("--grid", action="store_true", help="the ε × t grid (issue 31)")
    parser.add_argument("--mechanism", default="auto", help="--grid: the mechanism")
    parser.add_argument("--max-t", type=int, default=10_000_000, help="--grid: the largest t")
    parser.add_argument("--budget", type=float, default=600.0,
                        help="--grid: seconds per stream and ε before the larger t are skipped")
    parser.add_argument("--epsilons", type=float, nargs="+", default=GRID_EPSILONS)
    parser.add_argument("--streams", nargs="+", default=("uniform", "multiscale-100"))
    parser.add_argument("--growth", type=float, default=0.0,
                        help="--grid: release_growth (0: a release every 500 records)")
    parser.add_argument("--one", nargs=2, metavar=("DATA", "NOTION"),
                        help="measure one case with the code on PYTHONPATH (used internally)")
    args = parser.parse_args()
    if args.grid:
        speed_grid(args.mechanism, args.max_t, args.budget, tuple(args.epsilons),
                   tuple(args.streams), args.growth)
        return
    if args.one:
        print(f"{records_per_second(*args.one):.0f}")
        return
    current = Path(__file__).parents[1] / "operators"
    cases = CASES_D1 if args.d1 else CASES
    if args.baseline is None:
        for data, notion in cases:
            print(f"{data} {notion}: {records_per_second(data, notion):,.0f} records/s")
        return
    compare(args.baseline.resolve(), current, args.rounds, cases)


if __name__ == "__main__":
    main()
