"""The audit of the privacy unit "user": D with users, and user-level neighbours (P15).

Layer: audit. D is the audit's blob (:func:`~dpsynth.audit.inputs.point_input`), each record a
user of its own, plus one **heavy user** at the outlier corner no other record comes near:
:data:`HEAVY_FIRST` records in the first step and :data:`HEAVY_PER_STEP` in every later one
(122 records, of which the first :data:`AUDIT_K` count), and one **lone user**: the only user of
a last, 13th step, :data:`LONE_RECORDS` records at the opposite corner. The neighbours change
every record of one user at once:

* add/remove: **every record of the heaviest user removed** (from every step), and **the lone
  user removed** — its step is then empty, an ordinary step that must release like any other
  (issue 25: it once crashed, so the number of releases told whether the user took part);
* replace: every record of the heaviest user moved from the corner into the blob (same ids and
  positions, other values). The lone user is not a replacement neighbour of its own: under
  replacement a step is ``release_every`` counted records, so no user is alone in one.

The statistics aim at the changed user's corner in its first step. A synthesizer that bounded
the user to k passes at user-level ε; one that counted all of its records at ε/k each fails
(tests/privacy/test_audit_users.py shows it).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from dpsynth.audit.entries import (
    AUDIT_EPSILON,
    AUDIT_MAX_DEPTH,
    EntryPoint,
    Output,
    drive,
    point_releases_output,
)
from dpsynth.audit.inputs import (
    OUTLIER,
    PER_STEP,
    AuditInput,
    Neighbour,
    outlier_of,
    point_input,
)
from dpsynth.audit.measures import release_statistics
from dpsynth.online.synthesizer import OnlineSynthesizer

#: Records counted per user in the audited runs (k), and the heavy user's records in the
#: first step and in each later one.
AUDIT_K = 4
HEAVY_FIRST, HEAVY_PER_STEP = 100, 2
HEAVY = "heavy-user"
#: The lone user of the last step: its records (all counted, ≤ k), at the corner 1 − OUTLIER.
LONE_RECORDS = 2
LONE = "lone-user"


def user_input(d: int = 2, id_of: Callable[[str], str] = str) -> AuditInput:
    """D with users: the blob's records (one user each) and the heavy user's corner records.

    ``id_of`` maps the audit's user names to the ids used (the worker needs ids that its
    partitioner sends to a chosen partition)."""
    base = point_input(d)
    corner = outlier_of(base)
    steps, users = [], []
    for s, step in enumerate(base.steps):
        heavy = HEAVY_FIRST if s == 0 else HEAVY_PER_STEP
        steps.append(np.concatenate([np.repeat(corner, heavy, axis=0), step]))
        users.append(tuple([id_of(HEAVY)] * heavy +
                           [id_of(f"user-{s}-{i}") for i in range(len(step))]))
    steps.append(np.full((LONE_RECORDS, d), 1.0 - OUTLIER))  # the lone user's step
    users.append(tuple([id_of(LONE)] * LONE_RECORDS))
    return AuditInput(tuple(steps), tuple(users))


def user_neighbours(data: AuditInput, notion: str) -> list[Neighbour]:
    """The user-level neighbours of D under ``notion`` (module docstring)."""
    assert data.users is not None
    heavy, lone = data.users[0][0], data.users[-1][0]
    if notion == "add_remove":
        return [Neighbour("every record of the heaviest user removed",
                          _without(data, heavy), data.steps[0][0], 1),
                Neighbour("the lone user of the last step removed (an empty step)",
                          _without(data, lone), data.steps[-1][0], len(data.steps))]
    inside = data.steps[0][HEAVY_FIRST]  # a blob record
    steps = []
    for step, ids in zip(data.steps, data.users, strict=True):
        moved = step.copy()
        moved[np.array([u == heavy for u in ids])] = inside
        steps.append(moved)
    return [Neighbour("every record of the heaviest user moved into the blob",
                      AuditInput(tuple(steps), data.users), data.steps[0][0], 1)]


def _without(data: AuditInput, user: str) -> AuditInput:
    """D without every record of ``user`` (its steps stay: steps are public time, P11)."""
    assert data.users is not None
    steps, users = [], []
    for step, ids in zip(data.steps, data.users, strict=True):
        mine = np.array([u == user for u in ids], bool)
        steps.append(step[~mine])
        users.append(tuple(u for u in ids if u != user))
    return AuditInput(tuple(steps), tuple(users))


def online_user_entry(mechanism: str, notion: str, d: int = 2) -> EntryPoint:
    """``OnlineSynthesizer(privacy_unit="user", max_contributions=AUDIT_K)`` at user-level ε:
    add + step per step (add/remove), ``extend`` with a release every step's size
    (replacement)."""

    def run(data: AuditInput, key: bytes) -> Output:
        assert data.users is not None
        synth = OnlineSynthesizer(d, AUDIT_EPSILON, key, PER_STEP, mechanism,
                                  AUDIT_MAX_DEPTH, neighbours=notion, privacy_unit="user",
                                  max_contributions=AUDIT_K)
        return point_releases_output(drive(synth, data), key)

    return EntryPoint(f"library:{mechanism}:{notion}:user", notion, user_input, run,
                      release_statistics, pairs=lambda data: user_neighbours(data, notion))


def user_entries(mechanisms: Sequence[tuple[str, str]] = (
        ("adaptive", "replace"), ("paper", "replace"), ("adaptive", "add_remove"),
        ("guided", "add_remove"), ("guided", "replace"))
        ) -> list[EntryPoint]:
    """The library's user-level entry points audited (sound mechanism × notion pairs)."""
    return [online_user_entry(m, n) for m, n in mechanisms]
