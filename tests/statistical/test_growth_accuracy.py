"""``release_growth``: with steps that grow, the error still falls with t and stays near that
of a step every N records (docs/benchmarks.md "Speed at every ε and t", ``benchmarks.growth``).

d = 2, replacement, the default mechanism, N = 500 and g = 0.1, on uniform data and the held-out
synthetic city (``multiscale-100``), ε = 1 and 10, 4 fixed keys (deterministic; the rates
below are over the choice of keys), at t = 12,000, 48,000 and 96,000 (release times of both):

* **Falls with t**: per key the log-ratio log W1(96,000) − log W1(12,000); a one-sided t-test
  of mean < 0 must reject at α = 0.01/4 per case (Bonferroni over the 4 cases). Measured:
  a fall of 2–4× per case, far beyond what 4 keys need.
* **Near the fixed step**: the geometric mean over keys of W1(growth) ÷ W1(fixed) at each t is
  at most 2 — the two time structures differ, so the ratio depends on where t falls (0.58–1.72
  measured, ε ≤ 100); a growth that lost the open block's records or rounded its size wrongly
  is far beyond.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import ttest_1samp

from benchmarks.concentrated_streams import multiscale
from dpsynth.datasets import uniform_stream
from dpsynth.eval import w1_tree_upper
from dpsynth.online.synthesizer import OnlineSynthesizer

pytestmark = pytest.mark.statistical

STEP, GROWTH, KEYS, TIMES = 500, 0.1, 4, (12_000, 48_000, 96_000)
STREAMS = {"uniform": lambda n: uniform_stream(n, 2, 1031),
           "multiscale-100": lambda n: multiscale(n, 100)}


def _errors(x: np.ndarray, epsilon: float, key: int, growth: float) -> dict[int, float]:
    synth = OnlineSynthesizer(2, epsilon, (41_000 + key).to_bytes(32, "big"), STEP,
                              release_growth=growth)
    out = {}
    for start in range(0, TIMES[-1], 8000):
        for release in synth.extend(x[start:start + 8000]):
            if release.t in TIMES:
                out[release.t] = w1_tree_upper(release.points, x[:release.t])
    assert set(out) == set(TIMES)  # release times of both runs
    return out


@pytest.mark.parametrize("epsilon", [1.0, 10.0])
@pytest.mark.parametrize("stream", sorted(STREAMS))
def test_grown_steps_keep_the_error_falling_and_near_the_fixed_step(stream: str,
                                                                    epsilon: float) -> None:
    x = STREAMS[stream](TIMES[-1])
    grown = [_errors(x, epsilon, key, GROWTH) for key in range(KEYS)]
    fixed = [_errors(x, epsilon, key, 0.0) for key in range(KEYS)]
    fall = [math.log(e[TIMES[-1]] / e[TIMES[0]]) for e in grown]
    assert ttest_1samp(fall, 0.0, alternative="less").pvalue < 0.01 / 4, fall
    for t in TIMES:
        ratio = math.exp(np.mean([math.log(g[t] / f[t]) for g, f in zip(grown, fixed,
                                                                          strict=True)]))
        assert ratio <= 2.0, (t, ratio)
