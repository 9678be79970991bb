"""Derived noise: every random draw of dpsynth is a function of (secret key, context, address).

Layer: core, the only source of randomness in the DP core (docs/design.md D5; docs/privacy.md P2).
:mod:`~dpsynth.noise.keyed` holds :class:`KeyedNoise` (HMAC-SHA256 subkeys, ChaCha20 streams,
the samplers addressed by (context, stream, event), the public placement seed);
:mod:`~dpsynth.noise.samplers` the key-free arithmetic (effective scales, tails, variances);
:mod:`~dpsynth.noise._kernels` the compiled ChaCha20 and exact integer samplers, of which
:func:`discrete_laplace_draw` is public for compiled callers (a PrivTree descent), as are
:func:`rare_draws_into` and :func:`tail_rate_bounds` (:mod:`~dpsynth.noise._sparse`'s kernel of
:func:`~dpsynth.noise.sparse.tail_positions`).
"""

from __future__ import annotations

from dpsynth.noise._kernels import discrete_laplace_draw
from dpsynth.noise._sparse import rare_draws as rare_draws_into
from dpsynth.noise._sparse import tail_rate_bounds
from dpsynth.noise.keyed import MAX_EVENT, Context, KeyedNoise, encode_context, warm_up
from dpsynth.noise.samplers import (
    SCALE_DENOMINATOR,
    discrete_laplace_mean_abs,
    discrete_laplace_variance,
    effective_scale,
    geometric_from_uniform,
    laplace_tail,
)

__all__ = [
    "MAX_EVENT", "SCALE_DENOMINATOR", "Context", "KeyedNoise", "discrete_laplace_draw",
    "discrete_laplace_mean_abs", "discrete_laplace_variance", "effective_scale",
    "encode_context", "geometric_from_uniform", "laplace_tail", "rare_draws_into",
    "tail_rate_bounds", "warm_up",
]
