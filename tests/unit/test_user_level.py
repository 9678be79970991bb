"""The privacy unit "user" of OnlineSynthesizer (docs/privacy.md P15)."""

from __future__ import annotations

import numpy as np
import pytest

from dpsynth.errors import ConfigError, SchemaError
from dpsynth.online.synthesizer import OnlineSynthesizer

KEY = bytes(range(32))
USER_FIELDS = {"privacy_unit", "max_contributions", "max_contributions_per_step",
               "record_epsilon"}


def stream(n: int, n_users: int, seed: int, d: int = 2) -> tuple[np.ndarray, list[int]]:
    """Points and a heavy-tailed user per point."""
    rng = np.random.default_rng(seed)
    return rng.random((n, d)), (rng.zipf(1.4, n) % n_users).tolist()


def user_synth(**options: object) -> OnlineSynthesizer:
    defaults: dict[str, object] = {"d": 2, "epsilon": 1.0, "key": KEY, "release_every": 500,
                                   "privacy_unit": "user", "max_contributions": 4}
    return OnlineSynthesizer(**{**defaults, **options})  # type: ignore[arg-type]


SOUND = [("adaptive", "replace"), ("guided", "replace"), ("paper", "replace"),
         ("adaptive", "add_remove"), ("guided", "add_remove")]
#: (k, ε); paper runs up to a per-record ε of 10, so its cases end at ε/k = 4.
BUDGETS = [(1, 0.5), (4, 1.0), (16, 10.0), (64, 4.0), (64, 1e4)]


@pytest.mark.parametrize("mechanism,neighbours,k,epsilon", [
    (m, n, k, e) for m, n in SOUND for k, e in BUDGETS if m != "paper" or e / k <= 10])
def test_P15_user_loss_is_k_times_the_per_record_loss_and_at_most_epsilon(
        mechanism: str, neighbours: str, k: int, epsilon: float) -> None:
    synth = user_synth(mechanism=mechanism, neighbours=neighbours, max_contributions=k,
                       epsilon=epsilon)
    record = OnlineSynthesizer(2, epsilon / k, KEY, 500, mechanism, neighbours=neighbours)
    assert synth.worst_case_loss == pytest.approx(k * record.worst_case_loss, rel=1e-12)
    assert synth.worst_case_loss <= epsilon * (1 + 1e-12)
    assert synth.clock.epsilon == pytest.approx(epsilon / k)  # time levels at ε/k


@pytest.mark.parametrize("mechanism", ["paper"])
def test_P15_record_count_time_under_user_add_remove_is_refused_naming_what_works(
        mechanism: str) -> None:
    with pytest.raises(ConfigError, match="'guided' or 'adaptive' with either notion"):
        user_synth(mechanism=mechanism, neighbours="add_remove")


def test_P15_records_over_the_bound_never_reach_a_release() -> None:
    """A heavy user's records beyond the first k change nothing: byte-identical releases."""
    points, users = stream(6000, 300, 1)
    extra = np.random.default_rng(2).random((2000, 2))
    heavy = max(set(users), key=users.count)  # has far more than k = 4 records early on
    first_k = [i for i, u in enumerate(users) if u == heavy][3]
    at = first_k + 1  # insert 2000 more records of that user right after its 4th
    a, b = user_synth(), user_synth()
    ra = a.extend(points, users=users)
    rb = b.extend(np.concatenate([points[:at], extra, points[at:]]),
                  users=users[:at] + [heavy] * 2000 + users[at:])
    assert [r.leaf_counts.tobytes() for r in ra] == [r.leaf_counts.tobytes() for r in rb]
    assert [r.metadata for r in ra] == [r.metadata for r in rb]
    assert b.dropped == a.dropped + 2000 and a.t == b.t


def test_P15_metadata_names_the_unit_and_k_but_no_user_or_dropped_count() -> None:
    points, users = stream(3000, 200, 3)
    synth = user_synth(max_contributions=8, max_contributions_per_step=2, release_every=200)
    release = synth.extend(points, users=users)[-1]
    meta = release.metadata
    assert meta["privacy_unit"] == "user" and meta["max_contributions"] == 8
    assert meta["max_contributions_per_step"] == 2 and meta["record_epsilon"] == 1 / 8
    assert meta["epsilon"] == 1.0 and meta["worst_case_loss"] <= 1.0
    assert synth.dropped > 0
    assert str(synth.dropped) not in {str(v) for v in meta.values()}
    record = OnlineSynthesizer(2, 1.0, KEY, 500).extend(points)[-1].metadata
    assert not USER_FIELDS & set(record)  # record-level metadata unchanged (golden hashes)


def test_P15_add_remove_releases_carry_no_count_of_users_or_records() -> None:
    points, users = stream(4000, 100, 4)
    a = user_synth(neighbours="add_remove")
    a.add(points, users=users)
    release = a.step()
    assert release.metadata["t"] == release.t and release.t != a.t
    assert "users" not in release.metadata and "dropped" not in release.metadata


def test_per_step_cap_counts_each_users_records_per_release_period() -> None:
    points, users = stream(5000, 50, 5)
    synth = user_synth(mechanism="paper", max_contributions=40, max_contributions_per_step=3,
                       release_every=100)
    synth.extend(points, users=users)
    counted = synth.users.bounds.state()  # type: ignore[union-attr]
    assert counted["counts"].max() <= 40 and counted["step_counts"].max() <= 3
    # replay the rule by hand: a step is a release period of 100 counted records
    total: dict[int, int] = {}
    step_count: dict[tuple[int, int], int] = {}
    step, open_records, admitted = 0, 0, 0
    for u in users:
        if total.get(u, 0) < 40 and step_count.get((u, step), 0) < 3:
            total[u] = total.get(u, 0) + 1
            step_count[u, step] = step_count.get((u, step), 0) + 1
            admitted += 1
            open_records += 1
            if open_records == 100:
                step, open_records = step + 1, 0
    assert synth.t == admitted and synth.sequence == step


def test_snapshots_continue_identically_and_can_leave_the_users_out() -> None:
    points, users = stream(4000, 400, 6)
    synth = user_synth(max_contributions=3, max_contributions_per_step=2)
    synth.extend(points[:2500], users=users[:2500])
    restored = OnlineSynthesizer.restore(synth.snapshot(), KEY)
    a = synth.extend(points[2500:], users=users[2500:])
    b = restored.extend(points[2500:], users=users[2500:])
    assert [r.leaf_counts.tobytes() for r in a] == [r.leaf_counts.tobytes() for r in b]
    assert restored.snapshot() == synth.snapshot()
    light = OnlineSynthesizer.restore(synth.snapshot(include_users=False), KEY)
    assert light.users is not None and light.users.bounds.users == 0
    assert len(synth.snapshot(include_users=False)) < len(synth.snapshot())


def test_user_ids_of_any_declared_type_and_the_mistakes() -> None:
    points, users = stream(1200, 100, 7)
    a, b = user_synth(), user_synth()
    ra = a.extend(points, users=users)
    rb = b.extend(points, users=[str(u) for u in users])  # "42" and 42 are one user
    assert [r.leaf_counts.tobytes() for r in ra] == [r.leaf_counts.tobytes() for r in rb]
    with pytest.raises(ConfigError, match="needs the user id of every record"):
        user_synth().extend(points)
    with pytest.raises(SchemaError, match="one id per point"):
        user_synth().extend(points, users=users[:-1])
    with pytest.raises(SchemaError, match="user id 3 must be a string or an integer"):
        user_synth().extend(points[:5], users=[1, 2, 3, 4.5, 6])
    with pytest.raises(ConfigError, match="drop it"):
        OnlineSynthesizer(2, 1.0, KEY, 500).extend(points, users=users)
    with pytest.raises(ConfigError, match="needs privacy_unit='user'"):
        OnlineSynthesizer(2, 1.0, KEY, 500, max_contributions=4)
    with pytest.raises(ConfigError, match="needs max_contributions"):
        OnlineSynthesizer(2, 1.0, KEY, 500, privacy_unit="user")
    with pytest.raises(ConfigError, match="privacy_unit"):
        OnlineSynthesizer(2, 1.0, KEY, 500, privacy_unit="person")


STEP_MECHANISMS = [(m, n) for m in ("guided", "adaptive")
                   for n in ("replace", "add_remove")]


@pytest.mark.parametrize("mechanism,neighbours", STEP_MECHANISMS)
def test_P15_an_empty_step_and_a_user_alone_in_a_step_release_like_any_other(
        mechanism: str, neighbours: str) -> None:
    """Issue 25: a step with no admitted record (none given, or all over their bound) is an
    ordinary step — removing the only user of a step changes no public field and no count of
    releases (it used to raise ValueError, an ε = ∞ difference)."""
    points, users = stream(600, 40, 8)
    loner = 10_000  # a user whose records are the only ones of step 2
    steps = [(points[:300], users[:300]), (points[300:305], [loner] * 5),
             (points[:0], []), (points[305:], users[305:])]

    def run(without_loner: bool) -> list:
        synth = user_synth(mechanism=mechanism, neighbours=neighbours, max_contributions=2,
                           release_every=100)
        out = []
        for pts, ids in steps:
            if without_loner and ids and ids[0] == loner:
                pts, ids = pts[:0], []
            synth.add(pts, users=ids)
            out.append(synth.step())
        return out

    with_user, without = run(False), run(True)
    assert len(with_user) == len(without) == len(steps)
    for a, b in zip(with_user, without, strict=True):
        public = {k: v for k, v in a.metadata.items() if k not in ("t",)}
        assert public == {k: v for k, v in b.metadata.items() if k not in ("t",)}
        assert a.depth == b.depth and a.leaf_counts.shape == b.leaf_counts.shape
        assert int(a.leaf_counts.sum()) == a.t
    assert without[2].metadata["sequence"] == 3  # the empty step released too
