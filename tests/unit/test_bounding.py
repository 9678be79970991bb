"""Contribution bounding (docs/privacy.md P15): keyed user ids, the first k records per user."""

from __future__ import annotations

import numpy as np
import pytest

from dpsynth.bounding import (
    MAX_ID_BYTES,
    ContributionBounds,
    UserCounts,
    UserHasher,
    canonical_id,
    canonical_ids,
)
from dpsynth.bounding.ids import siphash24
from dpsynth.errors import ConfigError
from dpsynth.noise import KeyedNoise

# SipHash-2-4 reference vectors (Aumasson-Bernstein, the reference implementation's table):
# key 00 01 .. 0f, message 00 01 .. (n-1), for n = 0, 1, 2, 7, 8, 9, 15, 16, 63.
SIPHASH_VECTORS = {
    0: 0x726FDB47DD0E0E31, 1: 0x74F839C593DC67FD, 2: 0x0D6C8009D9A94F5A,
    7: 0xAB0200F58B01D137, 8: 0x93F5F5799A932462, 9: 0x9E0082DF0BA9E4B0,
    15: 0xA129CA6149BE45E5, 16: 0x3F2ACC7F57C29BDB, 63: 0x958A324CEB064572,
}


@pytest.mark.parametrize("n", sorted(SIPHASH_VECTORS))
def test_siphash_matches_the_reference_vectors(n: int) -> None:
    assert siphash24(bytes(range(n)), bytes(range(16))) == SIPHASH_VECTORS[n]


def test_canonical_ids_unify_text_integers_and_bytes() -> None:
    assert canonical_id("42") == canonical_id(42) == canonical_id(b"42") == b"42"
    assert canonical_id(np.int64(42)) == b"42"
    assert canonical_id("café") == "café".encode()
    for bad in (True, 1.0, None, [1], {"a": 1}, "\ud800", "x" * (MAX_ID_BYTES + 1)):
        assert canonical_id(bad) is None
    with pytest.raises(ValueError, match="user id 1 must be a string or an integer"):
        canonical_ids(["a", 2.5])


def test_hashes_are_keyed_and_equal_for_equal_ids() -> None:
    a = UserHasher(KeyedNoise(bytes(32))).hash([b"u1", b"u2", b"u1", b""])
    b = UserHasher(KeyedNoise(bytes(32))).hash([b"u1"])
    other = UserHasher(KeyedNoise(bytes(range(32)))).hash([b"u1"])
    assert a.dtype == np.uint64 and a.shape == (4, 2)
    assert (a[0] == a[2]).all() and (a[0] == b[0]).all()
    assert not (a[0] == a[1]).any() and not (a[0] == other[0]).any()
    assert "key" in repr(UserHasher(KeyedNoise(bytes(32)))) and "00" not in repr(a)


def keys_of(users: np.ndarray) -> np.ndarray:
    """Distinct 128-bit keys per user number (stand-ins for hashes)."""
    users = np.asarray(users, np.uint64)
    return np.stack([users * np.uint64(0x9E3779B97F4A7C15), users + np.uint64(17)], axis=1)


def reference_admit(users: list[int], steps: list[int], k: int, c: int | None) -> list[bool]:
    """The rule written plainly: a record counts iff its user has < k counted records (and
    < c in its step)."""
    total: dict[int, int] = {}
    per_step: dict[tuple[int, int], int] = {}
    out = []
    for user, step in zip(users, steps, strict=True):
        ok = total.get(user, 0) < k and (c is None or per_step.get((user, step), 0) < c)
        if ok:
            total[user] = total.get(user, 0) + 1
            per_step[user, step] = per_step.get((user, step), 0) + 1
        out.append(ok)
    return out


@pytest.mark.parametrize("k,c", [(1, None), (3, None), (16, None), (4, 1), (5, 2)])
def test_P15_the_first_k_records_of_each_user_count(k: int, c: int | None) -> None:
    rng = np.random.default_rng(k)
    users = rng.zipf(1.5, 6000) % 700  # a heavy head and a long tail
    steps = np.repeat(np.arange(12), 500)
    bounds = ContributionBounds(k, c)
    got = np.concatenate([bounds.admit(keys_of(users[s * 500:(s + 1) * 500]), s)
                          for s in range(12)])
    assert got.tolist() == reference_admit(users.tolist(), steps.tolist(), k, c)
    assert bounds.dropped == int((~got).sum()) and bounds.users == len(np.unique(users))


def test_P15_removing_a_user_changes_no_other_records_fate() -> None:
    """Stability: bounding maps a user-level neighbour to a stream that differs only in that
    user's records (the premise of P15's group-privacy argument)."""
    rng = np.random.default_rng(3)
    users = rng.zipf(1.3, 5000) % 300
    heaviest = np.bincount(users).argmax()
    full = ContributionBounds(8, 2).admit(keys_of(users), step=0)
    keep = users != heaviest
    without = ContributionBounds(8, 2).admit(keys_of(users[keep]), step=0)
    np.testing.assert_array_equal(full[keep], without)
    assert full[~keep].sum() == 2  # the per-step cap, all in one step


def test_growth_snapshot_and_restore_keep_every_count() -> None:
    rng = np.random.default_rng(5)
    users = rng.integers(0, 50_000, 200_000)
    bounds = ContributionBounds(3, 2)
    first = bounds.admit(keys_of(users[:100_000]), step=1)
    again = ContributionBounds(3, 2)
    again.load_state(bounds.state())
    assert again.users == bounds.users and again.dropped == bounds.dropped
    np.testing.assert_array_equal(again.admit(keys_of(users[100_000:]), 1),
                                  bounds.admit(keys_of(users[100_000:]), 1))
    assert first.sum() <= 2 * len(np.unique(users[:100_000]))
    state = bounds.state()
    assert list(state) == ["keys", "counts", "dropped", "steps", "step_counts"]
    order = np.lexsort((state["keys"][:, 1], state["keys"][:, 0]))
    np.testing.assert_array_equal(order, np.arange(len(order)))  # canonical: sorted by key


def test_a_store_behind_the_table_gives_the_same_decisions() -> None:
    """The worker's layout: counts written out at each commit (take_changes), the table
    evicted, and missing users read back through the resolver."""
    rng = np.random.default_rng(9)
    users = rng.integers(0, 3000, 40_000)
    store: dict[bytes, tuple[int, int, int]] = {}

    calls = []

    def resolver(keys: np.ndarray) -> UserCounts:
        calls.append(len(keys))
        rows = [store.get(key.tobytes(), (0, -1, 0)) for key in keys]
        return UserCounts(keys, np.array([r[0] for r in rows], np.uint16),
                          np.array([r[1] for r in rows], np.int64),
                          np.array([r[2] for r in rows], np.uint16))

    backed = ContributionBounds(5, 2)
    backed.resolver = resolver
    plain = ContributionBounds(5, 2)
    for start in range(0, len(users), 4000):
        batch = keys_of(users[start:start + 4000])
        step = start // 8000
        np.testing.assert_array_equal(backed.admit(batch, step), plain.admit(batch, step))
        changes = backed.take_changes()
        assert len(changes) <= len(np.unique(users[start:start + 4000]))
        for key, n, s, sc in zip(changes.keys, changes.counts, changes.steps,
                                 changes.step_counts, strict=True):
            store[key.tobytes()] = (int(n), int(s), int(sc))
        assert len(backed.take_changes()) == 0  # clean after a take
        backed.evict()
        assert backed.users == 0 and not backed.complete
    assert backed.dropped == plain.dropped
    assert len(calls) == len(users) // 4000 - 1  # not before the first eviction: all were new


def test_evict_refuses_uncommitted_counts() -> None:
    bounds = ContributionBounds(2)
    bounds.admit(keys_of(np.array([1, 2])), 0)
    with pytest.raises(RuntimeError, match="take_changes"):
        bounds.evict()


@pytest.mark.parametrize("k,c", [(0, None), (65_536, None), (True, None), (4, 5), (4, 0)])
def test_bad_bounds_are_refused(k: object, c: object) -> None:
    with pytest.raises(ConfigError, match="max_contributions"):
        ContributionBounds(k, c)  # type: ignore[arg-type]
