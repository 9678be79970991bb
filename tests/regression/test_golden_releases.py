"""Golden hashes: the same key and inputs give byte-identical outputs across refactors (issue 19).

Every configuration below is run on fixed public inputs with a fixed key; the SHA-256 of what a
consumer sees (the encoded release records, the offline synthetic points) and of the state
snapshot is compared with ``golden_releases.json``. A change of these bytes is a behaviour change:
it belongs in its own commit with a reason, after which the file is regenerated with
``DPSYNTH_UPDATE_GOLDEN=1 python -m pytest tests/regression/test_golden_releases.py``.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dpsynth.offline.lowdim import lowdim_synthesize
from dpsynth.offline.pmm import pmm_synthesize
from dpsynth.offline.psmm import psmm_synthesize
from dpsynth.online.synthesizer import OnlineSynthesizer
from dpsynth.release import encode_release
from dpsynth.tabular import Domain, TabularSynthesizer, encode_tabular_release
from tests.support.tabular import feed_steps

GOLDEN = Path(__file__).with_name("golden_releases.json")
KEY = bytes(range(32))


def _digest(parts: Iterable[bytes]) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(len(part).to_bytes(8, "little"))
        h.update(part)
    return h.hexdigest()


def _drifting(n: int, d: int, seed: int) -> np.ndarray:
    """A blob moving along the first axis, public test data (not privacy noise)."""
    rng = np.random.default_rng(seed)
    centre = np.full((n, d), 0.4)
    centre[:, 0] = np.linspace(0.2, 0.8, n)
    return np.clip(centre + rng.normal(0.0, 0.08, (n, d)), 0.0, 1.0)


def _online(d: int, epsilon: float, neighbours: str, **options: Any) -> str:
    x = _drifting(3000, d, seed=d)
    synth = OnlineSynthesizer(d, epsilon, KEY, 400, neighbours=neighbours, **options)
    releases = []
    if neighbours == "replace":
        releases += synth.extend(x[:1700])
        middle = synth.snapshot()
        releases += synth.extend(x[1700:])
    else:  # a public clock of uneven steps
        bounds = [0, 150, 700, 760, 1300, 1700, 2100, 2600, 3000]
        for i, (a, b) in enumerate(zip(bounds, bounds[1:], strict=False)):
            synth.add(x[a:b])
            if i == 4:
                middle = synth.snapshot()
            releases.append(synth.step())
    records = [rec for r in releases for rec in encode_release(
        r, run_id="golden", partition=0, sequence=int(r.metadata["sequence"]))]
    return _digest([*records, middle, synth.snapshot()])


ONLINE: dict[str, Callable[[], str]] = {}
for _d in (1, 2, 3):
    for _schedule in ("paper", "adaptive"):
        ONLINE[f"online/d{_d}/{_schedule}/replace"] = (
            lambda d=_d, s=_schedule: _online(d, 1.0, "replace", mechanism=s))
    for _schedule in ("adaptive", "guided"):
        ONLINE[f"online/d{_d}/{_schedule}/add_remove"] = (
            lambda d=_d, s=_schedule: _online(d, 1.0, "add_remove", mechanism=s))
    ONLINE[f"online/d{_d}/auto/replace"] = lambda d=_d: _online(d, 1.0, "replace")
ONLINE["online/d2/paper/replace/eps4"] = lambda: _online(2, 4.0, "replace", mechanism="paper")
# large ε: leaf noise in sparse form (docs/privacy.md P2c) — guided's histograms and refined
# summaries, adaptive's PrivTree counts
ONLINE["online/d2/guided/add_remove/eps10"] = lambda: _online(2, 10.0, "add_remove",
                                                              mechanism="guided")
ONLINE["online/d2/auto/replace/eps1e4"] = lambda: _online(2, 1e4, "replace")
ONLINE["online/d2/guided/replace/eps200"] = lambda: _online(2, 200.0, "replace",
                                                            mechanism="guided")
ONLINE["online/d2/adaptive/replace/centre-pooled"] = lambda: _online(
    2, 1.0, "replace", mechanism="adaptive", placement="centre", current_shape="pooled")
ONLINE["online/d2/paper/replace/depth6-partition3"] = lambda: _online(
    2, 1.0, "replace", mechanism="paper", max_depth=6, partition=3)


def _offline(method: str, neighbours: str, d: int) -> str:
    x = _drifting(1500, d, seed=10 + d)
    fn = {"pmm": pmm_synthesize, "psmm": psmm_synthesize, "lowdim": lowdim_synthesize}[method]
    points = np.ascontiguousarray(fn(x, 1.0, KEY, neighbours=neighbours), dtype="<f8")
    return _digest([points.tobytes(), str(points.shape).encode()])


OFFLINE: dict[str, Callable[[], str]] = {
    f"offline/{m}/{nb}/d{d}": (lambda m=m, nb=nb, d=d: _offline(m, nb, d))
    for m in ("pmm", "psmm", "lowdim") for nb in ("replace", "add_remove") for d in (2, 3)
    if not (m == "lowdim" and nb == "add_remove")
}

DOMAIN = Domain.from_dict({"version": 1, "attributes": [
    {"name": "sex", "categories": ["F", "M"]}, {"name": "age", "size": 6},
    {"name": "job", "size": 5}, {"name": "inc", "categories": ["lo", "hi"]}]})


def _tabular(**options: Any) -> str:
    rng = np.random.default_rng(4)  # public test data
    sex = rng.integers(0, 2, 600)
    age = np.minimum(rng.poisson(2 + sex), 5)
    codes = np.stack([sex, age, (age + rng.integers(0, 2, 600)) % 5, (age > 2).astype(int)], 1)
    synth = TabularSynthesizer(DOMAIN, 1.0, KEY, release_every=100, workloads_per_step=2,
                               **options)
    releases = feed_steps(synth, codes[:350])  # fixed batches: public steps (P11)
    middle = synth.snapshot()
    releases += feed_steps(synth, codes[350:])
    records = [rec for r in releases
               for rec in encode_tabular_release(r, run_id="golden", partition=0)]
    return _digest([*records, middle, synth.snapshot()])


TABULAR: dict[str, Callable[[], str]] = {
    "tabular/proposed/simple": lambda: _tabular(),
    "tabular/proposed/block": lambda: _tabular(counter="block", block_size=3),
    "tabular/proposed/unbounded_block": lambda: _tabular(counter="unbounded_block"),
    "tabular/baseline": lambda: _tabular(mechanism="baseline"),
    "tabular/proposed/replace": lambda: _tabular(neighbours="replace"),
    "tabular/proposed/as-printed": lambda: _tabular(selection="em", estimator="alg3"),
}



def _cli(tmp: Path, *args: str) -> str:
    from click.testing import CliRunner

    from dpsynth.cli import main

    env = {"DPSYNTH_NOISE_KEY": KEY.hex(), "DPSYNTH_NOISE_KEY_FILE": ""}
    result = CliRunner().invoke(main, list(args), env=env)
    assert result.exit_code == 0, result.output
    files = sorted(p for p in tmp.rglob("*") if p.suffix in (".bin", ".csv"))
    return _digest([f.read_bytes() for f in files])


def _cli_run(tmp: Path) -> str:
    return _cli(tmp, "run", "--points", "2500", "--release-every", "500", "--w1-points", "200",
                "--out", str(tmp))


def _cli_snapshot(tmp: Path) -> str:
    data = tmp / "in.csv"
    rows = _drifting(800, 2, seed=7)
    data.write_text("x,y\n" + "".join(f"{a!r},{b!r}\n" for a, b in rows.tolist()))
    return _cli(tmp / "out", "offline", "--input", str(data), "--mechanism", "pmm",
                "--out", str(tmp / "out" / "synthetic.csv"))


def _cli_run_time_steps(tmp: Path) -> str:
    data = tmp / "in.csv"
    rows = _drifting(900, 2, seed=8)
    times = np.linspace(0.0, 99.0, 900)[::-1]  # the file is not in time order
    data.write_text("ts,x,y\n" + "".join(f"{t!r},{a!r},{b!r}\n" for t, (a, b) in
                                         zip(times.tolist(), rows.tolist(), strict=True)))
    return _cli(tmp / "out", "run", "--input", str(data), "--neighbours", "add_remove",
                "--time-column", "ts", "--time-origin", "0", "--time-period", "10",
                "--time-end", "120", "--w1-points", "200", "--out", str(tmp / "out"))


COMMANDS: dict[str, Callable[[Path], str]] = {
    "cli/run": _cli_run, "cli/snapshot-pmm": _cli_snapshot,
    "cli/run-time-steps-add-remove": _cli_run_time_steps}
CASES: dict[str, Callable[..., str]] = {**ONLINE, **OFFLINE, **TABULAR, **COMMANDS}


def _golden() -> dict[str, str]:
    return json.loads(GOLDEN.read_text()) if GOLDEN.is_file() else {}


@pytest.mark.parametrize("name", sorted(CASES))
def test_output_bytes_are_unchanged(name: str, tmp_path: Path) -> None:
    got = COMMANDS[name](tmp_path) if name in COMMANDS else CASES[name]()
    if os.environ.get("DPSYNTH_UPDATE_GOLDEN") == "1":
        golden = _golden()
        golden[name] = got
        GOLDEN.write_text(json.dumps(dict(sorted(golden.items())), indent=1) + "\n")
        return
    expected = _golden().get(name)
    assert expected is not None, f"no golden hash for {name}; see the module docstring"
    assert got == expected, f"{name}: output bytes changed"


def test_every_golden_case_still_runs() -> None:
    """No golden hash is left without its case (a renamed case would silently stop checking)."""
    assert set(_golden()) == set(CASES)
