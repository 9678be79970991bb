"""An :class:`~dpsynth.online.synthesizer.OnlineSynthesizer`'s whole state as bytes, and back.

Layer: core. The snapshot holds the constructor's public configuration, the key's fingerprint
(never the key), the clock, the mechanism's state and the latest release; restoring it with the
same key continues exactly as an uninterrupted run would (tested byte for byte). Under the
privacy unit "user" the per-user counts may be left out: the worker stores them apart, in the
same atomic commit (P15).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from dpsynth.errors import StateCorruptError
from dpsynth.release import Release
from dpsynth.state import pack_state, unpack_state

if TYPE_CHECKING:
    from dpsynth.online.synthesizer import OnlineSynthesizer

#: The snapshot's entries for mechanism state, in their order on disk (absent ones are empty).
STATE_ENTRIES: dict[str, Any] = {
    "pending": lambda: np.zeros(0, np.uint64), "history": list, "levels": list,
    "blocks": lambda: None,
}


def snapshot_bytes(synth: OnlineSynthesizer, include_users: bool) -> bytes:
    """:meth:`OnlineSynthesizer.snapshot`."""
    entries = synth._mechanism.state()
    users = ({} if synth.users is None else  # privacy: P15 (stored apart by the worker)
             {"users": synth.users.bounds.state() if include_users else None})
    last = synth._last
    state = {
        "config": synth._config(),
        "key_fingerprint": synth._noise.fingerprint(),
        "t": synth.t,
        "sequence": synth.sequence,
        "clipped": synth.clipped,
        **{name: entries[name] if name in entries else empty()
           for name, empty in STATE_ENTRIES.items()},
        **users,
        "step_records": 0 if synth._mechanism.counts_records else synth._open,
        "last": None if last is None else {
            "t": last.t, "depth": last.depth,
            "leaf_counts": last.leaf_counts, "metadata": last.metadata,
        },
    }
    return pack_state(state)


def read_snapshot(blob: bytes) -> tuple[dict[str, Any], str, dict[str, Any]]:
    """(state, mechanism name, constructor configuration without it) of a snapshot."""
    state = unpack_state(blob)
    config = dict(state["config"])
    name = config.pop("schedule")
    return state, name, config


def load_snapshot(synth: OnlineSynthesizer, state: dict[str, Any]) -> None:
    """Load ``state`` into ``synth``, freshly built from its configuration and key."""
    if synth._noise.fingerprint() != state["key_fingerprint"]:
        raise StateCorruptError(
            "snapshot was written under a different noise key; restore it with that key "
            "(a new key must start from an empty state)"
        )
    synth.t, synth.sequence, synth.clipped = state["t"], state["sequence"], state["clipped"]
    synth._mechanism.load_state({name: state[name] for name in STATE_ENTRIES})
    if synth.users is not None and state.get("users") is not None:
        synth.users.bounds.load_state(state["users"])
    synth._open = (synth.t % synth.release_every if synth._mechanism.counts_records
                   else int(state["step_records"]))
    last = state["last"]
    if last is not None:
        synth._last = Release(last["t"], last["depth"], last["leaf_counts"], last["metadata"],
                              synth.placement_seed)
