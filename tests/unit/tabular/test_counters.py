"""Tabular counters: Alg 4 schedule, clock semantics, determinism, exact sums, state."""

from __future__ import annotations

import numpy as np
import pytest

from dpsynth.errors import ConfigError, StateCorruptError
from dpsynth.noise import KeyedNoise
from dpsynth.tabular.counters import Counter

KEY = bytes(range(32))


def _counter(kind: str, dim: int = 3, eps: float = 1.0, **kw) -> Counter:
    return Counter(kind, dim, eps, KeyedNoise(KEY), ("test", kind), **kw)


def test_unbounded_block_schedule_matches_spec():
    ends = _counter("unbounded_block").block_ends(60)
    # partitions of length 4, 9, 16, 25 with block sizes 2, 3, 4, 5 (spec §2.9)
    assert ends == [2, 4, 7, 10, 13, 17, 21, 25, 29, 34, 39, 44, 49, 54, 60]
    # the partition with block size B ends at B(B+1)(2B+1)/6 − 1
    for b in range(2, 9):
        assert b * (b + 1) * (2 * b + 1) // 6 - 1 in _counter("unbounded_block").block_ends(300)


def test_block_schedule_and_variance_formula():
    c = _counter("block", block_size=3)
    assert c.block_ends(10) == [3, 6, 9]
    v = c.error_variance(1) / 1  # one noisy item
    assert c.error_variance(8) == pytest.approx(v * (2 + 2))  # two blocks + two items
    assert c.error_variance(9) == pytest.approx(v * 3)
    s = _counter("simple")
    assert s.error_variance(5) == pytest.approx(5 * s.error_variance(1))
    assert s.scale == 1.0 and c.scale == 2.0


def test_unbounded_block_reproduces_alg4_by_hand():
    """Outputs equal Alg 4 recomputed from the same noise addresses."""
    noise = KeyedNoise(KEY)
    c = Counter("unbounded_block", 2, 0.5, noise, ("hand",))
    x = np.arange(1, 31).reshape(15, 2) % 4
    ends = set(c.block_ends(15))
    closed, noisy = np.zeros(2, np.int64), np.zeros(2, np.int64)
    true_in = np.zeros(2, np.int64)
    streams = np.arange(2, dtype=np.uint64)
    for tau in range(1, 16):
        out = c.feed(x[tau - 1])
        true_in += x[tau - 1]
        if tau in ends:
            lap = noise.discrete_laplace_at(4.0, ("hand",), streams, np.full(2, 2 * tau + 1,
                                                                             np.uint64))
            closed, true_in, noisy = closed + true_in + lap, true_in * 0, noisy * 0
            expected = closed
        else:
            lap = noise.discrete_laplace_at(4.0, ("hand",), streams, np.full(2, 2 * tau,
                                                                             np.uint64))
            noisy = noisy + x[tau - 1] + lap
            expected = closed + noisy
        assert out.tolist() == expected.tolist()


@pytest.mark.parametrize("kind", ["simple", "block", "unbounded_block"])
def test_clock_advances_only_when_fed_and_is_deterministic(kind):
    a, b = _counter(kind), _counter(kind)
    xs = [np.array([1, 0, 2]), np.array([0, 0, 0]), np.array([5, 1, 1])]
    outs_a = [a.feed(x).tolist() for x in xs]
    outs_b = [b.feed(x).tolist() for x in xs]
    assert outs_a == outs_b and a.clock == 3
    other = Counter(kind, 3, 1.0, KeyedNoise(KEY), ("test", kind, "other"))
    assert [other.feed(x).tolist() for x in xs] != outs_a


@pytest.mark.parametrize("kind", ["simple", "block", "unbounded_block"])
def test_state_round_trip_continues_identically(kind):
    a = _counter(kind, block_size=2)
    for _ in range(5):
        a.feed(np.array([1, 2, 3]))
    b = _counter(kind, block_size=2)
    b.load_state(a.state())
    assert [a.feed(np.array([2, 2, 2])).tolist() for _ in range(6)] == \
        [b.feed(np.array([2, 2, 2])).tolist() for _ in range(6)]


def test_bad_inputs():
    with pytest.raises(ConfigError):
        _counter("tree")
    with pytest.raises(ConfigError):
        _counter("simple", eps=0.0)
    with pytest.raises(ConfigError):
        _counter("simple").feed(np.array([1.5, 0, 0]))
    with pytest.raises(StateCorruptError):
        _counter("simple").load_state({"clock": 1})
