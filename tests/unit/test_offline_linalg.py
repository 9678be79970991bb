"""The CPU-independent linear algebra of lowdim: equal to NumPy/LAPACK up to rounding, and the
same bytes whichever BLAS kernel the machine would pick (the bug it fixes)."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from dpsynth.offline._linalg import covariance, matmul, symmetric_eigh

ROOT = Path(__file__).resolve().parents[2]


def _symmetric(rng: np.random.Generator, d: int) -> np.ndarray:
    a = rng.normal(size=(d, d))
    return (a + a.T) / 2


@pytest.mark.parametrize("d", [1, 2, 3, 6, 17])
def test_eigh_matches_lapack(d: int) -> None:
    rng = np.random.default_rng(d)
    for m in (_symmetric(rng, d), np.cov(rng.random((50, d)), rowvar=False).reshape(d, d)):
        values, vectors = symmetric_eigh(m)
        expected = np.linalg.eigh(m)[0]
        assert np.allclose(values, expected, atol=1e-12 * max(1.0, np.abs(expected).max()))
        assert np.allclose(vectors.T @ vectors, np.eye(d), atol=1e-12)
        assert np.allclose(m @ vectors, vectors * values, atol=1e-11)
        lead = np.argmax(np.abs(vectors), axis=0)
        assert (vectors[lead, np.arange(d)] > 0).all()  # the sign convention


def test_eigh_degenerate_and_diagonal() -> None:
    values, vectors = symmetric_eigh(np.diag([3.0, -1.0, 3.0]))
    assert values.tolist() == [-1.0, 3.0, 3.0]
    assert np.array_equal(np.abs(vectors), np.eye(3)[:, [1, 0, 2]])
    values, _ = symmetric_eigh(np.zeros((4, 4)))
    assert values.tolist() == [0.0] * 4
    with pytest.raises(ValueError, match="symmetric"):
        symmetric_eigh(np.array([[1.0, 2.0], [0.0, 1.0]]))


def test_covariance_and_matmul_match_numpy() -> None:
    rng = np.random.default_rng(7)
    x = rng.random((300, 5))
    assert np.allclose(covariance(x), np.cov(x, rowvar=False), rtol=1e-13, atol=1e-16)
    b = rng.normal(size=(5, 3))
    assert np.allclose(matmul(x, b), x @ b, rtol=1e-13)
    assert np.allclose(matmul(x[:, ::2], b[::2]), x[:, ::2] @ b[::2], rtol=1e-13)


_DIGEST = """
import hashlib, numpy as np
from dpsynth.offline.lowdim import lowdim_synthesize
x = np.random.default_rng(3).random((400, 4)) ** 2
p = np.ascontiguousarray(lowdim_synthesize(x, 1.0, bytes(range(32))), dtype="<f8")
print(hashlib.sha256(p.tobytes()).hexdigest())
"""


@pytest.mark.slow
def test_lowdim_bytes_do_not_depend_on_the_blas_kernel() -> None:
    """Three OpenBLAS kernels gave three different digests of one release before the fix."""
    digests = set()
    for core in ("Prescott", "Haswell", "SkylakeX"):
        env = {**os.environ, "OPENBLAS_CORETYPE": core,
               "PYTHONPATH": os.pathsep.join([str(ROOT / "operators"), str(ROOT)])}
        out = subprocess.run([sys.executable, "-c", _DIGEST], env=env,  # noqa: S603
                             capture_output=True,
                             text=True, check=True, timeout=300)
        digests.add(out.stdout.strip())
    assert len(digests) == 1, digests
    assert len(hashlib.sha256().hexdigest()) == len(digests.pop())
