"""Linear algebra whose bytes do not depend on the CPU: covariance, symmetric eigenpairs, products.

Layer: core (helpers of :mod:`dpsynth.offline.lowdim`). NumPy's ``@``, ``np.cov`` and
``np.linalg.eigh`` call BLAS/LAPACK, whose kernels are chosen per CPU (OpenBLAS picks a
Haswell, SkylakeX or Zen kernel at start-up) and sum in a different order on each: the same
key and input gave low-dimensional releases that differed in the last bits between two
machines (measured: three different digests of one release under three ``OPENBLAS_CORETYPE``
values). docs/design.md D5 promises byte-identical releases for a replay with the same key, so the
few products Alg 5–7 need are written out here as plain loops in a fixed order, compiled by
numba without ``fastmath`` (LLVM then neither reorders nor fuses floating-point operations),
and give the same bits on every x86-64 CPU. The matrices are d × d with d the data dimension,
so the O(d³) cost is negligible next to PMM or PSMM.
"""

from __future__ import annotations

import numpy as np
from numba import njit

#: Jacobi sweeps are stopped when every off-diagonal entry is below this times the matrix norm.
JACOBI_TOLERANCE = 1e-15
#: A symmetric d × d matrix converges in O(log d) sweeps; this cap only guards against a bug.
JACOBI_MAX_SWEEPS = 64


@njit(cache=True)
def covariance(x: np.ndarray) -> np.ndarray:
    """(1/(n−1)) Σ (x_i − x̄)(x_i − x̄)^T, summed in record order (diss. (4.1), ``ddof=1``)."""
    n, d = x.shape
    mean = np.zeros(d)
    for i in range(n):
        for a in range(d):
            mean[a] += x[i, a]
    for a in range(d):
        mean[a] /= n
    cov = np.zeros((d, d))
    for i in range(n):
        for a in range(d):
            da = x[i, a] - mean[a]
            for b in range(a, d):
                cov[a, b] += da * (x[i, b] - mean[b])
    for a in range(d):
        for b in range(a, d):
            cov[a, b] /= n - 1
            cov[b, a] = cov[a, b]
    return cov


@njit(cache=True)
def matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a @ b with every inner sum taken left to right."""
    n, k = a.shape
    m = b.shape[1]
    out = np.zeros((n, m))
    for i in range(n):
        for j in range(m):
            s = 0.0
            for p in range(k):
                s += a[i, p] * b[p, j]
            out[i, j] = s
    return out


@njit(cache=True)
def _rotate(m: np.ndarray, v: np.ndarray, p: int, q: int) -> None:
    """One Jacobi rotation zeroing m[p, q] (Golub–Van Loan, symmetric Schur decomposition)."""
    if m[p, q] == 0.0:
        return
    tau = (m[q, q] - m[p, p]) / (2.0 * m[p, q])
    t = (1.0 if tau >= 0 else -1.0) / (abs(tau) + np.sqrt(1.0 + tau * tau))
    c = 1.0 / np.sqrt(1.0 + t * t)
    s = t * c
    d = m.shape[0]
    for k in range(d):  # columns p, q of m
        mkp, mkq = m[k, p], m[k, q]
        m[k, p] = c * mkp - s * mkq
        m[k, q] = s * mkp + c * mkq
    for k in range(d):  # rows p, q of m
        mpk, mqk = m[p, k], m[q, k]
        m[p, k] = c * mpk - s * mqk
        m[q, k] = s * mpk + c * mqk
    for k in range(d):
        vkp, vkq = v[k, p], v[k, q]
        v[k, p] = c * vkp - s * vkq
        v[k, q] = s * vkp + c * vkq


@njit(cache=True)
def _jacobi(matrix: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    m = matrix.copy()
    d = m.shape[0]
    v = np.eye(d)
    scale = 0.0
    for a in range(d):
        for b in range(d):
            scale += m[a, b] * m[a, b]
    threshold = JACOBI_TOLERANCE * np.sqrt(scale)
    for _ in range(JACOBI_MAX_SWEEPS):
        largest = 0.0
        for p in range(d - 1):
            for q in range(p + 1, d):
                largest = max(largest, abs(m[p, q]))
        if largest <= threshold:
            break
        for p in range(d - 1):
            for q in range(p + 1, d):
                _rotate(m, v, p, q)
    values = np.empty(d)
    for a in range(d):
        values[a] = m[a, a]
    return values, v


def symmetric_eigh(matrix: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Eigenvalues in ascending order and unit eigenvectors as columns (like ``np.linalg.eigh``).

    Cyclic Jacobi; each eigenvector's sign is fixed so that its largest entry in absolute value
    (the first, on ties) is positive, so the basis is a function of the matrix alone.
    """
    m = np.ascontiguousarray(matrix, dtype=np.float64)
    if m.ndim != 2 or m.shape[0] != m.shape[1] or not np.array_equal(m, m.T):
        raise ValueError("symmetric_eigh needs a symmetric square matrix")
    values, vectors = _jacobi(m)
    order = np.argsort(values, kind="stable")
    values, vectors = values[order], vectors[:, order]
    lead = np.argmax(np.abs(vectors), axis=0)
    signs = np.where(vectors[lead, np.arange(vectors.shape[1])] < 0, -1.0, 1.0)
    return values, vectors * signs
