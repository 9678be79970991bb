"""Step blocks, add/remove neighbours and the adaptive schedule (issue 8)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from dpsynth.errors import ConfigError
from dpsynth.noise import discrete_laplace_variance
from dpsynth.online.block_budget import block_budget
from dpsynth.online.blocks import AdaptiveMechanism
from dpsynth.online.steps import _dyadic_nodes, block_of
from dpsynth.online.synthesizer import OnlineSynthesizer

KEY = bytes(range(32))


def _points(n: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.clip(rng.normal(0.4, 0.15, (n, 2)), 0, 1)


def _feed(synth: OnlineSynthesizer, x: np.ndarray, per_step: int) -> list:
    """Steps of ``per_step`` records: extend() under replace, add() + step() under add/remove
    (the test plays the public clock; the library never counts records into steps then)."""
    if synth.neighbours == "replace":
        return synth.extend(x)
    releases = []
    for start in range(0, len(x), per_step):
        synth.add(x[start:start + per_step])
        if len(x) - start >= per_step:
            releases.append(synth.step())
    return releases


# -- accounting -------------------------------------------------------------------------------

@pytest.mark.parametrize("epsilon", [0.3, 1.0, 4.0])
def test_P9_budget_spends_exactly_epsilon_under_each_notion(epsilon: float) -> None:
    mechanism = AdaptiveMechanism
    add = mechanism.budget_for(epsilon, "add_remove", "last")
    assert add.size + add.structure + add.counts == pytest.approx(epsilon)
    assert add.worst_case_loss == pytest.approx(epsilon)
    rep = mechanism.budget_for(epsilon, "replace", "last")
    assert rep.size == 0.0  # sizes are public under replacement
    assert 2 * (rep.structure + rep.counts) == pytest.approx(epsilon)  # one block, ±1 record
    assert rep.worst_case_loss == pytest.approx(epsilon)


def test_budget_refuses_bad_settings() -> None:
    with pytest.raises(ConfigError, match="neighbours"):
        block_budget(1.0, "user", structure_share=0.5)
    with pytest.raises(ConfigError, match="size_share"):
        block_budget(1.0, "add_remove", structure_share=0.5, size_share=1.0)
    with pytest.raises(ConfigError, match="structure_share"):
        block_budget(1.0, "add_remove", structure_share=1.0)
    with pytest.raises(ConfigError, match="epsilon"):
        block_budget(-1.0, "add_remove", structure_share=0.5)


def test_P9_add_remove_needs_a_step_schedule() -> None:
    with pytest.raises(ConfigError, match="mechanism='guided' or 'adaptive'"):
        OnlineSynthesizer(2, 1.0, KEY, 100, mechanism="paper", neighbours="add_remove")


def test_blocks_double_over_steps() -> None:
    assert [block_of(s) for s in range(1, 17)] == [0, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3, 4]


@pytest.mark.parametrize("k", range(0, 64))
def test_binary_mechanism_nodes_cover_the_prefix_once(k: int) -> None:
    covered = []
    for height, index in _dyadic_nodes(k, 6):
        covered.extend(range(index << height, (index + 1) << height))
    assert covered == list(range(k))
    assert len(_dyadic_nodes(k, 6)) == bin(k).count("1")


# -- the engine through the synthesizer --------------------------------------------------------

def test_blocks_close_at_the_last_step_of_each_block() -> None:
    synth = OnlineSynthesizer(2, 1.0, KEY, 50, mechanism="adaptive", neighbours="add_remove")
    closed = []
    for _ in range(15):
        synth.add(_points(50))
        synth.step()
        closed.append(len(synth._mechanism.blocks))  # type: ignore[union-attr]
    # steps 1, 3, 7, 15 end blocks 0..3
    assert closed == [1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3, 4]


def test_open_block_size_noise_has_the_binary_mechanism_variance() -> None:
    """Across 400 keys, the open-block size error after 5 of 8 steps: popcount(5) = 2 nodes."""
    errors = []
    for seed in range(400):
        synth = OnlineSynthesizer(2, 1.0, seed.to_bytes(32, "big"), 10, mechanism="adaptive",
                                  neighbours="add_remove")
        engine = synth._mechanism
        assert engine is not None
        engine.step = 7  # block 3 (steps 8..15) is open
        engine._step_counts = [10] * 5
        estimate, var = engine._open_size(3, 5)
        errors.append(estimate - 50)
    scale = 4 / (0.1 * 1.0)  # L = 4 heights, ε_n = 0.1 ε
    assert var == pytest.approx(2 * discrete_laplace_variance(scale))
    errors_arr = np.array(errors)
    assert abs(errors_arr.mean()) < 4 * math.sqrt(var / errors_arr.size)
    assert errors_arr.var() == pytest.approx(var, rel=0.25)


@pytest.mark.parametrize("neighbours", ["add_remove", "replace"])
@pytest.mark.parametrize("schedule", ["adaptive", "guided"])
def test_release_is_consistent_and_names_the_notion(neighbours: str, schedule: str) -> None:
    synth = OnlineSynthesizer(2, 1.0, KEY, 200, mechanism=schedule, neighbours=neighbours)
    releases = _feed(synth, _points(2000), 200)
    assert len(releases) == 10
    for release in releases:
        assert release.leaf_counts.min() >= 0
        assert int(release.leaf_counts.sum()) == release.t == release.metadata["t"]
        assert release.leaf_counts.size == 1 << release.depth
        assert release.metadata["neighbours"] == neighbours
        assert release.metadata["schedule"] == schedule
        assert release.metadata["worst_case_loss"] <= 1.0 + 1e-12
    if neighbours == "replace":
        assert [r.t for r in releases] == list(range(200, 2001, 200))
    else:  # the size is a noisy estimate: close to, but not, the record count
        sizes = np.array([r.t for r in releases])
        # a few Lap_Z(L/0.1) nodes: sd ≤ 120 here, so 5 sd bounds every error
        assert np.all(np.abs(sizes - np.arange(200, 2001, 200)) < 600)
        assert np.any(sizes != np.arange(200, 2001, 200))


def test_P9_same_key_same_releases_and_different_key_different() -> None:
    def run(key: bytes) -> list[np.ndarray]:
        synth = OnlineSynthesizer(2, 1.0, key, 300, mechanism="adaptive", neighbours="add_remove")
        return [r.leaf_counts for r in _feed(synth, _points(3000), 300)]

    a, b, c = run(KEY), run(KEY), run(bytes(32))
    assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
    assert not all(np.array_equal(x, y) for x, y in zip(a, c, strict=True))


@pytest.mark.parametrize("schedule", ["adaptive", "guided"])
def test_snapshot_mid_step_continues_identically(schedule: str) -> None:
    x = _points(4100, seed=2)
    whole = OnlineSynthesizer(2, 1.0, KEY, 250, mechanism=schedule, neighbours="add_remove")
    expected = _feed(whole, x, 250)
    first = OnlineSynthesizer(2, 1.0, KEY, 250, mechanism=schedule, neighbours="add_remove")
    got = _feed(first, x[:1750], 250)
    first.add(x[1750:1830])  # mid-step, mid-block
    resumed = OnlineSynthesizer.restore(first.snapshot(), KEY)
    resumed.add(x[1830:2000])
    got.append(resumed.step())
    got += _feed(resumed, x[2000:], 250)
    assert got == expected


def test_step_marker_ends_a_step_early() -> None:
    synth = OnlineSynthesizer(2, 1.0, KEY, 1000, mechanism="adaptive", neighbours="replace")
    assert synth.extend(_points(300)) == []
    release = synth.step()
    assert release.metadata["step"] == 1
    assert synth.extend(_points(999)) == []  # the next step counts from the marker
    assert len(synth.extend(_points(1))) == 1
    with pytest.raises(ConfigError, match="step"):
        OnlineSynthesizer(2, 1.0, KEY, 100, mechanism="paper").step()
    with pytest.raises(ConfigError, match="extend"):
        OnlineSynthesizer(2, 1.0, KEY, 100, mechanism="paper").add(_points(3))


@pytest.mark.parametrize("schedule", ["adaptive", "guided"])
def test_P9_add_remove_refuses_steps_counted_in_records(schedule: str) -> None:
    """Under add/remove only a public clock may end a step: extend() (a step every
    release_every records) is refused, and add() never ends one however many records arrive."""
    synth = OnlineSynthesizer(2, 1.0, KEY, 10, mechanism=schedule, neighbours="add_remove")
    with pytest.raises(ConfigError, match=r"add\(points\).*step\(\)"):
        synth.extend(_points(20))
    assert synth.t == 0  # refused before anything was counted
    synth.add(_points(25))
    assert synth.release().t == 0 and synth._mechanism.step == 0  # type: ignore[union-attr]
    assert synth.step().metadata["step"] == 1


def test_P9_a_record_added_to_one_step_changes_only_its_block() -> None:
    """Parallel composition in practice: with derived noise, adding one record in step 5
    (block 2) leaves every other block's private histogram bit-identical."""
    steps = [_points(100, seed=s) for s in range(12)]
    neighbour = [s.copy() for s in steps]
    neighbour[4] = np.vstack([neighbour[4], [[0.9, 0.1]]])

    def blocks(data: list[np.ndarray]) -> list[dict]:
        synth = OnlineSynthesizer(2, 1.0, KEY, 10**6, mechanism="adaptive",
                                  neighbours="add_remove")
        for batch in data:
            synth.add(batch)
            synth.step()
        return synth._mechanism.blocks  # type: ignore[union-attr]

    a, b = blocks(steps), blocks(neighbour)
    assert len(a) == len(b) == 3  # blocks 0, 1, 2 closed after 12 steps (block 3 open)
    for i in (0, 1):
        for field in ("depths", "prefixes", "counts"):
            assert np.array_equal(getattr(a[i], field), getattr(b[i], field))
    assert not np.array_equal(a[2].counts, b[2].counts) or not np.array_equal(
        a[2].prefixes, b[2].prefixes) or a[2].size != b[2].size


def test_P9_run_command_refuses_add_remove(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without a declared time column dpsynth run cuts steps every --release-every records:
    refused under add/remove, before anything is read or written (its releases would carry
    the private record count); the error names the fix (P11, tests/unit/test_cli_timesteps)."""
    from click.testing import CliRunner

    from dpsynth.cli import KEY_ENV, KEY_FILE_ENV, main

    monkeypatch.delenv(KEY_ENV, raising=False)
    monkeypatch.delenv(KEY_FILE_ENV, raising=False)
    out = tmp_path / "out"
    for schedule in ("adaptive", "guided", "paper", "auto"):
        refused = CliRunner().invoke(main, [
            "run", "--points", "600", "--release-every", "100", "--mechanism", schedule,
            "--neighbours", "add_remove", "--out", str(out)])
        assert refused.exit_code == 2, refused.output
        assert "reveal the private record count" in refused.output
        assert "--time-column" in refused.output
        assert not out.exists()


def test_leaf_floor_removes_phantom_mass_from_empty_regions() -> None:
    """All records in the corner [0, 0.25]²: with the floor, far less released mass lies outside
    it than with plain clipping (empty PrivTree leaves carry clipped noise)."""
    import dpsynth.online.blocks as blocks_module

    x = 0.25 * np.random.default_rng(8).random((6000, 2))
    outside = {}
    for floor in (0.0, blocks_module.LEAF_FLOOR_SCALES):
        shares = []
        for seed in range(3):
            blocks_module.LEAF_FLOOR_SCALES, saved = floor, blocks_module.LEAF_FLOOR_SCALES
            try:
                synth = OnlineSynthesizer(2, 1.0, seed.to_bytes(32, "big"), 500,
                                          mechanism="adaptive", neighbours="add_remove")
                points = _feed(synth, x, 500)[-1].points
            finally:
                blocks_module.LEAF_FLOOR_SCALES = saved
            shares.append(float((points.max(axis=1) > 0.25).mean()))
        outside[floor] = float(np.mean(shares))
    assert blocks_module.LEAF_FLOOR_SCALES > 0
    assert outside[blocks_module.LEAF_FLOOR_SCALES] < 0.5 * outside[0.0]
