"""What ``release_growth`` costs in accuracy: W1 with steps that grow against a step every 500.

The default mechanism, d = 2, replacement, a release every 500 records (``release_every``) with
and without ``release_growth`` G, on uniform data and the held-out synthetic city
(``multiscale-100``, benchmarks/concentrated_streams.py). At each t of ``--t`` (release times of
both runs), the ratio W1(growth) ÷ W1(fixed) per key (ℓ∞ tree W1, the true prefix as reference),
printed with its mean over the keys (docs/benchmarks.md "Speed at every ε and t"):

    python -m benchmarks.growth [--growth 0.1] [--keys 5]

Half of the t are block boundaries of the fixed run (500·2^k: its open block empty, its best
phase), half three quarters through a block: the time structures differ, so the ratio depends
on where t falls.
"""

from __future__ import annotations

import argparse

import numpy as np

from benchmarks.concentrated_streams import multiscale
from dpsynth import OnlineSynthesizer
from dpsynth.datasets import uniform_stream
from dpsynth.eval import w1_tree_upper

STEP = 500
TIMES = (12_000, 16_000, 24_000, 48_000, 64_000, 96_000, 128_000)


def _errors(x: np.ndarray, epsilon: float, key: int, growth: float,
            times: tuple[int, ...]) -> dict[int, float]:
    """W1 of the release at each t of ``times`` (each a release time of this run)."""
    synth = OnlineSynthesizer(2, epsilon, (77_000 + key).to_bytes(32, "big"), STEP,
                              release_growth=growth)
    out = {}
    for start in range(0, max(times), 4000):
        for release in synth.extend(x[start:start + 4000]):
            if release.t in times:
                out[release.t] = w1_tree_upper(release.points, x[:release.t])
    missing = set(times) - set(out)
    if missing:
        raise SystemExit(f"t = {sorted(missing)} are not release times with growth {growth}")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--growth", type=float, default=0.1)
    parser.add_argument("--keys", type=int, default=5)
    parser.add_argument("--epsilons", type=float, nargs="+", default=(1.0, 10.0, 100.0))
    parser.add_argument("--t", type=int, nargs="+", default=TIMES)
    args = parser.parse_args()
    times = tuple(sorted(args.t))
    streams = {"uniform": uniform_stream(times[-1], 2, 1031),
               "multiscale-100": multiscale(times[-1], 100)}
    print(f"release_every {STEP}, release_growth {args.growth:g}, {args.keys} keys; "
          "W1(growth) ÷ W1(fixed): mean (min–max over keys)")
    print("| stream | ε | " + " | ".join(f"t = {t:,}" for t in times) + " |")
    print("|---|---:|" + "---:|" * len(times))
    for name, x in streams.items():
        for epsilon in args.epsilons:
            ratios = {t: [] for t in times}
            for key in range(args.keys):
                grown = _errors(x, epsilon, key, args.growth, times)
                fixed = _errors(x, epsilon, key, 0.0, times)
                for t in times:
                    ratios[t].append(grown[t] / fixed[t])
            cells = [f"{np.mean(r):.2f} ({min(r):.2f}–{max(r):.2f})" for r in ratios.values()]
            print(f"| {name} | {epsilon:g} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
