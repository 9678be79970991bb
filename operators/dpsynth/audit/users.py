"""The audit of the privacy unit "user": D with users, and user-level neighbours (P15).

Layer: audit. D is the audit's blob (:func:`~dpsynth.audit.inputs.point_input`), each record a
user of its own, plus one **heavy user** at the outlier corner no other record comes near:
:data:`HEAVY_FIRST` records in the first step and :data:`HEAVY_PER_STEP` in every later one
(122 records, of which the first :data:`AUDIT_K` count). The neighbours change every record
of the heavy user at once:

* add/remove: **every record of the heaviest user removed** (from every step);
* replace: every record of the heaviest user moved from the corner into the blob (same ids and
  positions, other values).

The statistics aim at the corner in the first step (where the heavy user's counted records
lie). A synthesizer that bounded the user to k passes at user-level ε; one that counted all of its
records at ε/k each fails (tests/privacy/test_audit_users.py shows it).
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
from dpsynth.audit.inputs import PER_STEP, AuditInput, Neighbour, outlier_of, point_input
from dpsynth.audit.measures import release_statistics
from dpsynth.online.synthesizer import OnlineSynthesizer

#: Records counted per user in the audited runs (k), and the heavy user's records in the
#: first step and in each later one.
AUDIT_K = 4
HEAVY_FIRST, HEAVY_PER_STEP = 100, 2
HEAVY = "heavy-user"


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
    return AuditInput(tuple(steps), tuple(users))


def user_neighbours(data: AuditInput, notion: str) -> list[Neighbour]:
    """The user-level neighbours of D under ``notion`` (module docstring)."""
    assert data.users is not None
    heavy = data.users[0][0]
    corner = data.steps[0][0]
    inside = data.steps[0][HEAVY_FIRST]  # a blob record
    steps, users = [], []
    for step, ids in zip(data.steps, data.users, strict=True):
        mine = np.array([u == heavy for u in ids])
        if notion == "add_remove":
            steps.append(step[~mine])
            users.append(tuple(u for u in ids if u != heavy))
        else:
            moved = step.copy()
            moved[mine] = inside
            steps.append(moved)
            users.append(ids)
    name = ("every record of the heaviest user removed" if notion == "add_remove" else
            "every record of the heaviest user moved into the blob")
    return [Neighbour(name, AuditInput(tuple(steps), tuple(users)), corner, 1)]


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
        ("adaptive", "replace"), ("accurate", "replace"), ("adaptive", "add_remove"),
        ("blocks", "add_remove"), ("guided", "add_remove"))) -> list[EntryPoint]:
    """The library's user-level entry points audited (sound mechanism × notion pairs)."""
    return [online_user_entry(m, n) for m, n in mechanisms]
