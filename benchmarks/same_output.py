"""Byte-identity of the default mechanism's output against another checkout (speed work).

A speed-up of ``guided`` must not change a byte. This hashes every encoded release and two
state snapshots (midway, then restored and continued, and at the end) over a panel — uniform,
a moving blob, five clumps and Gowalla (d = 3: a uniform third coordinate) × d = 1, 2, 3 ×
ε = 0.5, 1, 10, 10⁴ × both neighbour notions (add/remove: uneven public steps, empty ones
included) — once with this checkout and once with ``--baseline``, each in a fresh process, and
prints the cases whose hashes differ (docs/benchmarks.md "Speed of the default"):

    python -m benchmarks.same_output --baseline <old checkout>/operators
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

KEY = bytes(range(32))
STREAMS = ("uniform", "blob", "clumps", "gowalla")


def _stream(kind: str, n: int, d: int) -> np.ndarray:
    rng = np.random.default_rng(7 + d)  # public test data, not privacy noise
    if kind == "uniform":
        return rng.random((n, d))
    if kind == "blob":
        centre = np.full((n, d), 0.4)
        centre[:, 0] = np.linspace(0.2, 0.8, n)
        return np.clip(centre + rng.normal(0, 0.05, (n, d)), 0, 1)
    if kind == "clumps":
        centres = rng.random((5, d))
        return np.clip(centres[rng.integers(0, 5, n)] + rng.normal(0, 0.01, (n, d)), 0, 1)
    from dpsynth.datasets import load_gowalla

    x = load_gowalla()[:n]
    return x[:, :d] if d <= 2 else np.column_stack([x, rng.random(len(x))])


def _digest(kind: str, d: int, epsilon: float, notion: str, mechanism: str) -> str:
    from dpsynth import OnlineSynthesizer
    from dpsynth.release import encode_release

    n, every = 20_000, 200
    x = _stream(kind, n, d)
    synth = OnlineSynthesizer(d, epsilon, KEY, every, mechanism=mechanism, neighbours=notion)
    h, steps, lo, step = hashlib.sha256(), np.random.default_rng(3), 0, 0
    while lo < n:
        size = every if notion == "replace" else int(steps.integers(0, 2 * every))
        if notion == "replace":
            releases = synth.extend(x[lo:lo + size])
        else:
            synth.add(x[lo:lo + size])
            releases = [synth.step()]
        for release in releases:
            for record in encode_release(release, run_id="same", partition=0,
                                         sequence=int(release.metadata["sequence"])):
                h.update(record)
        lo, step = lo + size, step + 1
        if step == 37:  # midway: snapshot, restore, continue
            blob = synth.snapshot()
            h.update(blob)
            synth = OnlineSynthesizer.restore(blob, KEY)
    h.update(synth.snapshot())
    return h.hexdigest()


def panel(mechanism: str) -> dict[str, str]:
    """Hash of every case of the panel with the code on the path."""
    return {f"{kind}/d{d}/eps{eps}/{notion}": _digest(kind, d, eps, notion, mechanism)
            for kind in STREAMS for d in (1, 2, 3) for eps in (0.5, 1.0, 10.0, 1e4)
            for notion in ("replace", "add_remove")}


def _hashes(operators: Path, mechanism: str) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": f"{operators}{os.pathsep}{Path(__file__).parents[1]}"}
    out = subprocess.run([sys.executable, "-m", "benchmarks.same_output", "--one", mechanism],
                         env=env, capture_output=True, text=True, check=True)
    return dict(json.loads(out.stdout))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--baseline", type=Path, help="the other checkout's operators/ folder")
    parser.add_argument("--mechanism", default="guided")
    parser.add_argument("--one", metavar="MECHANISM", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(panel(args.one)))
        return
    if args.baseline is None:
        parser.error("--baseline is required")
    current = Path(__file__).parents[1] / "operators"
    base, cur = (_hashes(p.resolve(), args.mechanism) for p in (args.baseline, current))
    differ = sorted(case for case in base if base[case] != cur.get(case))
    print(f"{len(base) - len(differ)} of {len(base)} cases byte-identical")
    for case in differ:
        print(f"differs: {case}")
    sys.exit(1 if differ else 0)


if __name__ == "__main__":
    main()
