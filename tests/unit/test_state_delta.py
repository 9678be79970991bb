"""Snapshot deltas (dpsynth.state_delta): base + deltas rebuild every snapshot byte for byte.

Every mechanism of the point synthesizer, under both neighbour notions, and the tabular one:
snapshots after each step (and mid-step), each rebuilt from the first by applying the chain of
deltas; the deltas of late steps are much smaller than the state.
"""

from __future__ import annotations

import numpy as np
import pytest

from dpsynth.errors import StateCorruptError
from dpsynth.online.synthesizer import OnlineSynthesizer
from dpsynth.state import pack_state, unpack_state
from dpsynth.state_delta import apply_delta, check, diff, encode, snapshot_digest
from dpsynth.tabular.domain import Domain
from dpsynth.tabular.synthesizer import TabularSynthesizer
from tests.support.tabular import SMALL_DOMAIN

KEY = bytes(range(32))


def _chain(snapshots: list[bytes]) -> list[int]:
    """Rebuild every snapshot from the first through the deltas; return the delta sizes."""
    sizes = []
    state = unpack_state(snapshots[0])
    previous = unpack_state(snapshots[0])
    for old, new in zip(snapshots, snapshots[1:], strict=False):
        current = unpack_state(new)
        blob = encode(diff(previous, current), old, new)
        sizes.append(len(blob))
        state, digest = apply_delta(state, blob, snapshot_digest(old))
        assert digest == snapshot_digest(new)
        assert check(state, digest) == new  # byte for byte
        previous = current
    return sizes


def _steps(synth, points: np.ndarray, per_step: int, add_remove: bool) -> list[bytes]:
    out = [synth.snapshot()]
    for i in range(0, len(points), per_step):
        chunk = points[i:i + per_step]
        if add_remove:
            synth.add(chunk[: len(chunk) // 2])
            out.append(synth.snapshot())  # mid-step
            synth.add(chunk[len(chunk) // 2:])
            synth.step()
        else:
            synth.extend(chunk[: len(chunk) // 3])
            out.append(synth.snapshot())  # mid-tick
            synth.extend(chunk[len(chunk) // 3:])
        out.append(synth.snapshot())
    return out


@pytest.mark.parametrize("mechanism", ["auto", "guided", "paper", "adaptive"])
@pytest.mark.parametrize("neighbours", ["replace", "add_remove"])
def test_deltas_rebuild_every_snapshot_of_the_point_synthesizer(mechanism, neighbours):
    if neighbours == "add_remove" and mechanism == "paper":
        pytest.skip("paper runs under replacement only")
    points = np.random.default_rng(3).random((6000, 2)) ** 2
    synth = OnlineSynthesizer(2, 1.0, KEY, 500, max_depth=12, mechanism=mechanism,
                              neighbours=neighbours)
    snapshots = _steps(synth, points, 500, neighbours == "add_remove")
    sizes = _chain(snapshots)
    assert len(sizes) == len(snapshots) - 1


def test_deltas_rebuild_every_snapshot_of_the_tabular_synthesizer():
    domain = Domain.from_dict(SMALL_DOMAIN)
    rng = np.random.default_rng(4)
    codes = np.stack([rng.integers(0, s, 3000) for s in domain.sizes], axis=1)
    synth = TabularSynthesizer(domain, 1.0, KEY, release_every=300)
    _chain(_steps(synth, codes, 300, add_remove=True))


def test_late_deltas_are_a_small_part_of_the_state():
    points = np.random.default_rng(5).random((60_000, 2))
    synth = OnlineSynthesizer(2, 1.0, KEY, 1000, max_depth=20)
    snapshots = [synth.snapshot()]
    for i in range(0, len(points), 1000):
        synth.extend(points[i:i + 1000])
        snapshots.append(synth.snapshot())
    sizes = _chain(snapshots[-6:])
    assert max(sizes) < len(snapshots[-1]) / 4, (sizes, len(snapshots[-1]))


def test_a_delta_refuses_another_base_and_a_wrong_result():
    a = {"t": 1, "x": np.zeros(4, np.int64)}
    b = {"t": 2, "x": np.arange(4, dtype=np.int64)}
    c = {"t": 3, "x": np.arange(4, dtype=np.int64)}
    blob = encode(diff(a, b), pack_state(a), pack_state(b))
    with pytest.raises(StateCorruptError, match="does not start from"):
        apply_delta(unpack_state(pack_state(c)), blob, snapshot_digest(pack_state(c)))
    rebuilt, _ = apply_delta(unpack_state(pack_state(a)), blob, snapshot_digest(pack_state(a)))
    with pytest.raises(StateCorruptError, match="differs"):
        check(rebuilt, snapshot_digest(pack_state(c)))


def test_byte_changes_that_compare_equal_are_kept():
    a = {"v": np.array([0.0, 1.0]), "s": 1}
    b = {"v": np.array([-0.0, 1.0]), "s": 1.0}  # -0.0 == 0.0 and 1 == 1.0, but not as bytes
    blob = encode(diff(a, b), pack_state(a), pack_state(b))
    rebuilt, digest = apply_delta(unpack_state(pack_state(a)), blob,
                                  snapshot_digest(pack_state(a)))
    assert check(rebuilt, digest) == pack_state(b)
