"""OnlineSynthesizer (HVZ Alg 1): releases, structure, determinism, snapshots, bad input."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from dpsynth.accounting import paper_schedule
from dpsynth.clock import level_of, level_start
from dpsynth.consistency import make_consistent
from dpsynth.errors import BudgetExceededError, ConfigError, SchemaError, StateCorruptError
from dpsynth.online.synthesizer import OnlineSynthesizer
from dpsynth.release import Release
from dpsynth.tree import route

KEY = bytes(range(32))


def blobs(n: int, d: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centres = rng.random((3, d))
    x = centres[rng.integers(0, 3, n)] + rng.normal(0, 0.05, (n, d))
    return np.clip(x, 0, 1)


SCHEDULES = ["paper"]  # the mechanism whose time levels count records (the others: steps)


@pytest.mark.parametrize("schedule", SCHEDULES)
@pytest.mark.parametrize("d,epsilon", [(1, 1.0), (2, 1.0), (3, 0.5), (2, 4.0), (2, 0.1)])
def test_every_release_has_exactly_t_points_in_bounds(
    d: int, epsilon: float, schedule: str
) -> None:
    synth = OnlineSynthesizer(d=d, epsilon=epsilon, key=KEY, release_every=97, mechanism=schedule)
    releases = synth.extend(blobs(3000, d, 0))
    assert [r.t for r in releases] == list(range(97, 3001, 97))
    for release in releases:
        counts = release.leaf_counts
        assert counts.dtype == np.int64 and counts.min() >= 0
        assert counts.size == 2**release.depth and counts.sum() == release.t
        points = release.points
        assert points.shape == (release.t, d)
        assert ((points >= 0) & (points <= 1)).all()
        assert release.depth == max(min(level_of(release.t, epsilon), synth.max_depth), 0)


def test_leaf_counts_sum_up_the_tree() -> None:
    synth = OnlineSynthesizer(d=2, epsilon=1.0, key=KEY, release_every=500, mechanism="paper")
    synth.extend(blobs(4000, 2, 1))
    depth = synth.depth
    noisy = [synth._mechanism.levels[j - 1].values() for j in range(1, depth + 1)]
    levels = make_consistent(synth.t, noisy)
    np.testing.assert_array_equal(levels[-1], synth.release().leaf_counts)
    parent = np.array([synth.t])
    for level in levels:
        assert level.min() >= 0
        np.testing.assert_array_equal(level.reshape(-1, 2).sum(axis=1), parent)
        parent = level


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_P6_release_structure_does_not_depend_on_the_data(schedule: str) -> None:
    a = OnlineSynthesizer(d=2, epsilon=1.0, key=KEY, release_every=250, mechanism=schedule)
    b = OnlineSynthesizer(d=2, epsilon=1.0, key=KEY, release_every=250, mechanism=schedule)
    ra = a.extend(blobs(3000, 2, 2))
    rb = b.extend(np.random.default_rng(3).random((3000, 2)))
    assert [(r.t, r.depth, r.leaf_counts.size, r.metadata) for r in ra] == [
        (r.t, r.depth, r.leaf_counts.size, r.metadata) for r in rb
    ]
    pairs = zip(ra, rb, strict=True)
    assert any(not np.array_equal(x.leaf_counts, y.leaf_counts) for x, y in pairs)


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_P2_same_key_same_input_gives_identical_releases(schedule: str) -> None:
    x = blobs(2500, 2, 4)
    runs = []
    for _ in range(2):
        synth = OnlineSynthesizer(d=2, epsilon=1.0, key=KEY, release_every=300, mechanism=schedule)
        runs.append(synth.extend(x[:1000]) + synth.extend(x[1000:]))  # batching is irrelevant
    assert runs[0] == runs[1]
    assert all(np.array_equal(p.points, q.points) for p, q in zip(*runs, strict=True))
    one_by_one = OnlineSynthesizer(
        d=2, epsilon=1.0, key=KEY, release_every=300, mechanism=schedule
    )
    singles = [r for row in x for r in one_by_one.extend(row[None, :])]
    assert singles == runs[0]
    other = OnlineSynthesizer(
        d=2, epsilon=1.0, key=bytes(32), release_every=300, mechanism=schedule
    ).extend(x)
    pairs = zip(other, runs[0], strict=True)
    assert any(not np.array_equal(p.leaf_counts, q.leaf_counts) for p, q in pairs)


@pytest.mark.parametrize("schedule", SCHEDULES)
@pytest.mark.parametrize("d", [1, 2])
def test_snapshot_at_any_point_continues_byte_identically(d: int, schedule: str) -> None:
    x = blobs(1500, d, 5)
    reference = OnlineSynthesizer(d=d, epsilon=2.0, key=KEY, release_every=64, mechanism=schedule)
    expected = reference.extend(x)
    for cut in [0, 1, 63, 64, 65, 200, 511, 512, 700, 1023, 1499]:  # ticks, mid-tick, levels
        first = OnlineSynthesizer(
            d=d, epsilon=2.0, key=KEY, release_every=64, mechanism=schedule
        )
        before = first.extend(x[:cut])
        restored = OnlineSynthesizer.restore(first.snapshot(), KEY)
        assert restored.release() == first.release()
        after = restored.extend(x[cut:])
        assert before + after == expected, cut


def test_snapshot_refuses_another_key_and_damage() -> None:
    synth = OnlineSynthesizer(d=2, epsilon=1.0, key=KEY, release_every=10)
    synth.extend(blobs(100, 2, 6))
    blob = synth.snapshot()
    assert KEY not in blob and KEY.hex().encode() not in blob
    with pytest.raises(StateCorruptError, match="different noise key"):
        OnlineSynthesizer.restore(blob, bytes(32))
    with pytest.raises(StateCorruptError, match="checksum"):
        OnlineSynthesizer.restore(blob[:-1], KEY)
    with pytest.raises(StateCorruptError):
        OnlineSynthesizer.restore(b"garbage", KEY)


def test_bad_points_are_refused_and_out_of_bounds_clipped() -> None:
    synth = OnlineSynthesizer(d=2, epsilon=1.0, key=KEY, release_every=10)
    for bad in (np.array([[0.1, np.nan]]), np.array([[np.inf, 0.2]])):
        with pytest.raises(SchemaError, match="NaN or infinity"):
            synth.extend(bad)
    with pytest.raises(SchemaError, match=r"shape \(n, 2\)"):
        synth.extend(np.zeros((3, 3)))
    assert synth.t == 0  # nothing was counted
    synth.extend(np.array([[1.5, 0.2], [0.3, -0.1], [0.5, 0.5]]))
    assert synth.t == 3 and synth.clipped == 2


def test_over_budget_configurations_are_refused() -> None:
    base = paper_schedule(2, 1.0)
    inflated = dataclasses.replace(
        base, name="inflated", level_epsilon=lambda j, r: 1.1 * base.level_epsilon(j, r)
    )
    with pytest.raises(BudgetExceededError, match="above epsilon=1"):
        OnlineSynthesizer(d=2, epsilon=1.0, key=KEY, release_every=10, schedule=inflated)
    with pytest.raises(ConfigError, match="epsilon"):
        OnlineSynthesizer(d=2, epsilon=0.0, key=KEY, release_every=10)
    with pytest.raises(ConfigError, match="mechanism"):
        OnlineSynthesizer(d=2, epsilon=1.0, key=KEY, release_every=10, mechanism="magic")
    with pytest.raises(ConfigError, match="mechanism="):  # an algorithm is not an ε allocation
        OnlineSynthesizer(d=2, epsilon=1.0, key=KEY, release_every=10, schedule="adaptive")
    with pytest.raises(ConfigError, match="release_every"):
        OnlineSynthesizer(d=2, epsilon=1.0, key=KEY, release_every=0)
    with pytest.raises(ConfigError, match="at least 16 bytes"):
        OnlineSynthesizer(d=2, epsilon=1.0, key=b"short", release_every=10)


def test_cells_of_depth_j_exist_from_t_j_and_max_depth_caps_the_tree() -> None:
    synth = OnlineSynthesizer(
        d=2, epsilon=1.0, key=KEY, release_every=1, max_depth=6, mechanism="paper"
    )
    for t in range(1, 200):
        synth.extend(np.full((1, 2), 0.5))
        created = len(synth._mechanism.levels)
        # levels exist exactly for t_j ≤ t + 1 (the next record's level included), capped
        assert created == min(max(j for j in range(10) if level_start(j, 1.0) <= t + 1), 6)
    assert synth.release().depth == 6 and synth.release().leaf_counts.size == 64


def test_d2_cells_ignore_history_but_d1_cells_replay_it() -> None:
    # all early records in the top half; a level created later sees them only for d = 1
    for d, replays in [(1, True), (2, False)]:
        synth = OnlineSynthesizer(
            d=d, epsilon=10.0, key=KEY, release_every=1_000_000, mechanism="paper"
        )
        synth.extend(np.full((20_000, d), 0.9))  # ε = 10: levels start early
        j = len(synth._mechanism.levels)
        synth.extend(np.full((level_start(j + 1, 10.0) - synth.t, d), 0.1))
        newest = synth._mechanism.levels[j]  # created after the 0.9 records
        cell = int(route(np.full((1, d), 0.9), depth=j + 1)[0])
        top = int(newest.values()[cell])
        assert (top > 10_000) == replays, (d, top)


def test_epsilon_below_one_releases_uniform_root_before_t0() -> None:
    synth = OnlineSynthesizer(d=2, epsilon=0.01, key=KEY, release_every=20,
                              mechanism="paper")  # time levels: t_0 = 100
    early = synth.extend(blobs(99, 2, 7))
    assert all(r.depth == 0 and r.leaf_counts.tolist() == [r.t] for r in early)
    assert isinstance(early[0], Release)


def test_P2_replay_gives_byte_identical_encoded_releases() -> None:
    from dpsynth.release import decode_release, encode_release

    x = blobs(1200, 2, 8)
    encoded = []
    for _ in range(2):
        synth = OnlineSynthesizer(d=2, epsilon=1.0, key=KEY, release_every=400)
        encoded.append([
            encode_release(r, run_id="run", partition=0, sequence=r.metadata["sequence"])
            for r in synth.extend(x)
        ])
    assert encoded[0] == encoded[1] and len(encoded[0]) == 3
    first = OnlineSynthesizer(d=2, epsilon=1.0, key=KEY, release_every=400).extend(x)[0]
    assert decode_release(encoded[0][0]) == first  # a release read back equals the one written


# -- issue 13: public tick markers (docs/privacy.md P11) --------------------------------------


def test_P11_a_tick_always_ends_a_step_under_add_remove() -> None:
    synth = OnlineSynthesizer(2, 1.0, bytes(32), 100, mechanism="adaptive",
                              neighbours="add_remove")
    first = synth.tick()  # no record at all: still a release (emptiness is private)
    synth.add(np.full((37, 2), 0.3))
    second = synth.tick()
    assert [first.metadata["step"], second.metadata["step"]] == [1, 2]
    assert [first.metadata["sequence"], second.metadata["sequence"]] == [1, 2]
    assert second.metadata["release_every"] is None  # no records-per-step in a release
    assert second.t == int(second.leaf_counts.sum())  # the noisy size, not 37


@pytest.mark.parametrize("mechanism", ["adaptive", "paper"])
def test_P11_under_replace_a_tick_releases_what_is_new_and_keeps_the_grid(mechanism) -> None:
    x = np.random.default_rng(5).random((300, 2))  # public test data
    ticked = OnlineSynthesizer(2, 1.0, bytes(32), 100, mechanism=mechanism)
    assert ticked.tick() is None  # nothing yet: no release
    releases = ticked.extend(x[:150])
    marker = ticked.tick()
    assert ticked.tick() is None  # nothing new since the marker
    assert marker.t == 150 == int(marker.leaf_counts.sum())
    releases += [marker, *ticked.extend(x[150:])]
    plain = OnlineSynthesizer(2, 1.0, bytes(32), 100, mechanism=mechanism).extend(x)
    if mechanism == "adaptive":  # a step mechanism: the marker ended a step
        assert [r.t for r in releases] == [100, 150, 250]
    else:  # record-count mechanisms keep their tick grid; later releases are unchanged
        assert [r.t for r in releases] == [100, 150, 200, 300]
        later = [r for r in releases if r.t in (200, 300)]
        for a, b in zip(later, plain[1:], strict=True):
            assert np.array_equal(a.leaf_counts, b.leaf_counts) and a.depth == b.depth


@pytest.mark.parametrize("mechanism", ["guided", "adaptive"])
def test_release_growth_releases_on_the_grown_grid_whatever_the_chunks(mechanism: str) -> None:
    """Steps of N·2^k records (:func:`~dpsynth.clock.step_records`): releases at the grid's
    ends, byte-identical however ``extend`` is called and across a snapshot mid-step; the
    growth is in the metadata and the stored configuration (P11: a function of t only)."""
    from dpsynth.clock import step_records

    x = blobs(3000, 2, 9)
    ends, t = [], 0
    while t + step_records(t, 50, 0.25) <= len(x):
        t += step_records(t, 50, 0.25)
        ends.append(t)
    assert len(ends) < len(x) // 50 // 2  # it grew

    def synth() -> OnlineSynthesizer:
        return OnlineSynthesizer(d=2, epsilon=1.0, key=KEY, release_every=50,
                                 mechanism=mechanism, release_growth=0.25)

    whole = synth().extend(x)
    assert [r.t for r in whole] == ends
    assert {r.metadata["release_growth"] for r in whole} == {0.25}
    rng = np.random.default_rng(3)
    cuts = np.sort(rng.choice(np.arange(1, len(x)), 40, replace=False))
    pieces, first = [], synth()
    for lo, hi in zip([0, *cuts[:20]], cuts[:21], strict=True):
        pieces += first.extend(x[lo:hi])
    restored = OnlineSynthesizer.restore(first.snapshot(), KEY)
    assert restored.records_until_step() == first.records_until_step()
    for lo, hi in zip(cuts[20:], [*cuts[21:], len(x)], strict=True):
        pieces += restored.extend(x[lo:hi])
    assert pieces == whole


def test_release_growth_is_refused_where_it_cannot_apply() -> None:
    with pytest.raises(ConfigError, match="release_growth needs a step mechanism"):
        OnlineSynthesizer(d=2, epsilon=1.0, key=KEY, release_every=50, mechanism="paper",
                          release_growth=0.1)
    with pytest.raises(ConfigError, match="release_growth"):
        OnlineSynthesizer(d=2, epsilon=1.0, key=KEY, release_every=50, release_growth=-1.0)
    with pytest.raises(ConfigError, match="neighbours='add_remove' the count is private"):
        OnlineSynthesizer(d=2, epsilon=1.0, key=KEY, release_every=50, release_growth=0.1,
                          neighbours="add_remove")
    fixed = OnlineSynthesizer(d=2, epsilon=1.0, key=KEY, release_every=50)
    assert "release_growth" not in fixed.extend(blobs(50, 2, 1))[0].metadata  # bytes as before


def test_release_growth_goes_on_after_a_tick_ends_a_step_early() -> None:
    """A tick marker (the worker's timer) ends a grown step early; the next steps are sized from
    their own start, so the growth goes on (P11: t public under replacement)."""
    from dpsynth.clock import step_records

    synth = OnlineSynthesizer(d=2, epsilon=1.0, key=KEY, release_every=50,
                              mechanism="guided", release_growth=0.25)
    x = blobs(6000, 2, 4)
    synth.extend(x[:1234])
    assert synth.tick() is not None and synth.open_records == 0
    ends, t = [], 1234
    while t + step_records(t, 50, 0.25) <= len(x):
        t += step_records(t, 50, 0.25)
        ends.append(t)
    assert [r.t for r in synth.extend(x[1234:])] == ends
    assert ends[-1] - ends[-2] >= 800  # grown past the 50 records of a step
