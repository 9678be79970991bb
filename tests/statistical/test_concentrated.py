"""Issue 31: on concentrated and spread streams the default has no release-mean bias whose sign
is the same for (almost) every key, and its error does not grow with t beyond key noise.

Streams: two held-out concentrated streams of ``benchmarks.concentrated_streams`` (Gowalla NYC
in the contiguous-US box, the multi-scale mixture of seed 100) and two spread ones (uniform,
Gowalla NYC in its own box); d = 2, both notions, a release every 500 records. Keys are
fixed, so each test is deterministic; the false-alarm rates below are over the choice of keys.

* **Bias sign** (per stream, notion, t ∈ {4000, 2·10⁴} and coordinate, 16 keys): under "no
  bias" the release-mean error is symmetric about 0, so the number S of keys with a positive
  error is Binomial(16, ½); the two-sided sign test rejects when S ≤ 1 or S ≥ 15, P =
  34/65,536 = 5.2·10⁻⁴ per test. 4 streams × 2 notions × 2 t × 2 coordinates = 32 tests:
  family false-alarm rate ≤ 1.7 % (Bonferroni). Distribution-free: no normality of the errors
  is assumed.
* **Error non-increasing in t** (the two concentrated streams, both notions, ε = 1 and 10,
  t = 4000, 6000, 8000, 10⁴, 1.4·10⁴, 2·10⁴, 10 keys): per adjacent pair of t the paired
  log-ratio r_k = log W1_k(t') − log W1_k(t) per key, and a one-sided t-test of mean(r) >
  log 1.1 (a rise of more than 10 %, the "key noise" tolerance) at α = 0.01/40 per pair
  (5 pairs × 2 streams × 2 notions × 2 ε); family false-alarm rate ≤ 1 % when the log-ratios
  are normal (their per-key sd, docs/lab/concentrated-streams.md). Its power: a mean rise of
  about a third is caught when the per-key sd of r is 0.1.
* **The known failures against the references** (:data:`KNOWN`, the same 16 keys): our per-key
  offset on the failing coordinate must not lie significantly further out, in the bias's
  direction, than offline PMM's or PHDStream's (``benchmarks.phdstream``): one-sided paired
  t-test at α = 0.01 per comparison, family false-alarm rate ≤ 4 % for normal differences.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import binom, ttest_1samp

from benchmarks.concentrated import Job, releases
from benchmarks.concentrated_streams import city_in_country, multiscale
from dpsynth.datasets import gowalla_path, load_gowalla, uniform_stream
from dpsynth.eval import w1_tree_upper
from dpsynth.online.synthesizer import OnlineSynthesizer

STEP = 500
BIAS_KEYS, BIAS_T, BIAS_REJECT = 16, (4000, 20000), 1  # reject when S ≤ 1 or S ≥ 15
BIAS_TESTS, BIAS_FAMILY = 32, 0.02
TREND_KEYS, TREND_T, TOLERANCE = 10, (4000, 6000, 8000, 10000, 14000, 20000), math.log(1.1)
FAMILY = 0.01
TREND_TESTS = 40
#: The known failures against the references on the same keys: the one-sided paired t-test of
#: our per-key offset lying further out, in the direction of the bias, than the reference's;
#: α = 0.01 per comparison, 2 cases × 2 references: family false-alarm rate ≤ 4 % when the
#: differences are normal.
REFERENCE_ALPHA = 0.01


#: Known failures (docs/lab/concentrated-streams.md); strict, so a fix shows as XPASS and fails.
KNOWN = {
    ("city_in_country", "replace", 20000): "x -0.0009, 0 of 16 keys: phantom mass far out in the "
                                           "empty country and the coarse cells left of the "
                                           "city's edge (§20); PHDStream -0.0011 (1 of 16) and "
                                           "offline PMM -0.0025 on these keys (§21)",
    ("city_in_country", "add_remove", 20000): "x -0.0005, 0 of 16 keys: as under replacement; "
                                              "PHDStream -0.0010, PMM -0.0020 (0 of 16, §21)",
}
# No longer rejected since the dropped leaves' mass is placed locally (§20): multiscale-100
# under replacement at t = 4000 (x −0.0060 → −0.0054, 1 → 4 of 16 keys positive; y +0.0039 →
# +0.0024, 14 → 13: the far clusters the floors drop), and Gowalla under add/remove at 2·10⁴
# on the count of keys only (y −0.0010 before and after, 1 → 3 of 16: phantom leaves, §4a).
# Since the tilted coarse cells (§19): city_in_country add/remove at t = 4000,
# x −0.0005, 2 of 16 keys positive (was −0.0008, 0 of 16: records across the city's dyadic edge
# sat at coarse cells' centres); at 2·10⁴ it is still rejected (above). Since the two EM steps
# (§15): city_in_country replacement, y +0.0003,
# 14 of 16 keys (was +0.0008, 15 of 16). Since the history-guided step partitions
# (docs/lab/concentrated-streams.md §11): the multiscale-100 add/remove ε = 1 rise at
# t = 8000 → 10⁴ (+25 % → +11 %). Since the whole squares (§12): Gowalla add/remove, y −0.0024
# with 2 of 16 keys positive (was −0.0027, 1 of 16: phantom leaves, §4a) — at the test's edge,
# not fixed.


def _cases(*axes: list[object]) -> list[object]:
    """The product of ``axes`` as pytest params, the :data:`KNOWN` ones strict xfails."""
    import itertools

    return [pytest.param(*case, marks=pytest.mark.xfail(strict=True, reason=KNOWN[case]))
            if case in KNOWN else pytest.param(*case) for case in itertools.product(*axes)]


def _streams() -> dict[str, object]:
    out = {"multiscale-100": lambda n: multiscale(n, 100),
           "uniform": lambda n: uniform_stream(n, 2, 1031)}
    if gowalla_path().exists():
        out["city_in_country"] = city_in_country
        out["gowalla"] = lambda n: load_gowalla()[:n]
    return out


def _releases(x: np.ndarray, neighbours: str, key: int, sizes: tuple[int, ...],
              epsilon: float = 1.0) -> dict[int, np.ndarray]:
    synth = OnlineSynthesizer(2, epsilon, (31_000 + key).to_bytes(32, "big"), STEP,
                              neighbours=neighbours)
    out = {}
    for start in range(0, len(x), STEP):
        if neighbours == "add_remove":
            synth.add(x[start:start + STEP])
            release = synth.step()
        else:
            release = synth.extend(x[start:start + STEP])[-1]
        if start + STEP in sizes:
            out[start + STEP] = release.points
    return out


def _offsets(x: np.ndarray, neighbours: str, t: int) -> np.ndarray:
    """Release mean − prefix mean at t, per bias key (rows) and coordinate."""
    return np.array([_releases(x, neighbours, k, (t,))[t].mean(axis=0) - x.mean(axis=0)
                     for k in range(BIAS_KEYS)])


def test_the_sign_test_has_the_stated_false_alarm_rate() -> None:
    per_test = 2 * binom.cdf(BIAS_REJECT, BIAS_KEYS, 0.5)
    assert per_test == pytest.approx(34 / 65536)
    assert BIAS_TESTS * per_test <= BIAS_FAMILY
    assert BIAS_TESTS == 4 * 2 * len(BIAS_T) * 2  # streams × notions × t × coordinates


@pytest.mark.parametrize(("stream", "neighbours", "t"),
                         _cases(sorted(_streams()), ["replace", "add_remove"], list(BIAS_T)))
def test_no_release_mean_bias_of_one_sign_across_keys(stream: str, neighbours: str,
                                                      t: int) -> None:
    x = _streams()[stream](t)  # type: ignore[operator]
    errors = _offsets(x, neighbours, t)
    positive = (errors > 0).sum(axis=0)
    assert ((positive > BIAS_REJECT) & (positive < BIAS_KEYS - BIAS_REJECT)).all(), (
        stream, neighbours, t, positive.tolist(), errors.mean(axis=0).tolist())


@pytest.mark.parametrize(("stream", "neighbours", "t"), sorted(KNOWN))
def test_where_the_sign_test_fails_the_offset_is_no_larger_than_the_references(
        stream: str, neighbours: str, t: int) -> None:
    """The known failures' offsets against offline PMM and PHDStream (benchmarks.phdstream)
    on the same keys: both references have an offset of the same sign there, larger
    (docs/lab/concentrated-streams.md §21); ours must not be significantly further out."""
    if stream not in _streams():
        pytest.skip("the Gowalla data set is not in DPSYNTH_DATA_DIR")
    x = _streams()[stream](t)  # type: ignore[operator]
    ours = _offsets(x, neighbours, t)
    axis = int(np.argmax(np.abs(ours.mean(axis=0))))  # the failing coordinate
    sign = np.sign(ours[:, axis].mean())
    for name in ("phdstream", "pmm"):
        theirs = np.array([releases(x, Job(stream, name, 1.0, neighbours, 31_000 + k, (t,)))[t][
            :, axis].mean() for k in range(BIAS_KEYS)]) - x[:, axis].mean()
        further = sign * (ours[:, axis] - theirs)  # > 0: ours further out than theirs
        p = ttest_1samp(further, 0.0, alternative="greater").pvalue
        assert p >= REFERENCE_ALPHA, (name, stream, neighbours, t, float(further.mean()))
        assert sign * theirs.mean() > 0  # the same sign: a real reference


@pytest.mark.parametrize(("stream", "neighbours", "epsilon"),
                         _cases(["city_in_country", "multiscale-100"], ["replace", "add_remove"],
                                [1.0, 10.0]))
def test_error_does_not_grow_with_t_beyond_key_noise(stream: str, neighbours: str,
                                                     epsilon: float) -> None:
    if stream not in _streams():
        pytest.skip("the Gowalla data set is not in DPSYNTH_DATA_DIR")
    x = _streams()[stream](TREND_T[-1])  # type: ignore[operator]
    w1 = np.array([[w1_tree_upper(x[:t], y, depth=20) for t, y in sorted(
        _releases(x, neighbours, k, TREND_T, epsilon).items())] for k in range(TREND_KEYS)])
    alpha = FAMILY / TREND_TESTS
    for i in range(len(TREND_T) - 1):
        ratios = np.log(w1[:, i + 1]) - np.log(w1[:, i])
        p = ttest_1samp(ratios, TOLERANCE, alternative="greater").pvalue
        assert p >= alpha, (stream, neighbours, epsilon, TREND_T[i:i + 2],
                            float(np.exp(ratios.mean())))
