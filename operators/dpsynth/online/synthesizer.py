"""Online private synthetic data: HVZ Alg 1 (= dissertation Alg 12) and its successors, on ticks.

Layer: core. :class:`OnlineSynthesizer` owns what every algorithm shares — validation and
routing of points, time (records, ticks, public steps), releases with their public metadata and
placement seed, snapshots — and drives one *mechanism* (:mod:`dpsynth.online.mechanism`) that
owns the private state.

Snapshots (:meth:`OnlineSynthesizer.snapshot`, :meth:`~OnlineSynthesizer.restore`) hold the
constructor's public configuration, the key's fingerprint (never the key), the clock, the
mechanism's state and the latest release; restoring one with the same key continues exactly as
an uninterrupted run would (tested byte for byte). Under the privacy unit "user" the per-user
counts may be left out: the worker stores them apart, in the same atomic commit (P15).

Ticks (docs/design.md D3): a tick, and a release, every ``release_every`` records (ticks also end
where the mechanism's time levels end). Step mechanisms also take steps: ``add`` the records,
``step`` on a public clock — the only way under add/remove, where the count is private.
``max_depth`` caps the tree (privacy-neutral): accuracy plateaus at the leaf diameter.

Privacy: each mechanism's worst-case loss is checked ≤ ε at construction (P1, P8, P9); all that
is released is a function of the noisy counts and public parameters (P6).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dpsynth.accounting import Schedule
from dpsynth.clock import TickClock, step_records
from dpsynth.consistency import MAX_COUNT
from dpsynth.contract import refuse_count_steps, tick_ends_step
from dpsynth.errors import ConfigError, StateCorruptError
from dpsynth.noise import KeyedNoise
from dpsynth.online.config import OnlineConfig
from dpsynth.online.mechanism import AUTO, Mechanism, make_mechanism, step_mechanisms
from dpsynth.online.users import UserLevel, refuse_users
from dpsynth.params import DEFAULT_MAX_DEPTH
from dpsynth.release import RELEASE_SCHEMA_VERSION, Release
from dpsynth.state import pack_state, unpack_state
from dpsynth.tree import route, validate_points

#: The snapshot's entries for mechanism state, in their order on disk (absent ones are empty).
STATE_ENTRIES: dict[str, Any] = {
    "pending": lambda: np.zeros(0, np.uint64), "history": list, "levels": list,
    "blocks": lambda: None,
}


class OnlineSynthesizer:
    """Continual ε-DP synthetic data over [0,1]^d: HVZ Alg 1 (= dissertation Alg 12).

    Privacy: ε-DP for the whole (infinite) sequence of releases under the chosen neighbour
    notion; the mechanism's budget is checked at construction (P1, P8, P9); all noise is derived
    from ``key`` (P2), so the same key and input give byte-identical releases.

    Parameters
    ----------
    d, epsilon
        Dimension of the points; total privacy budget ε.
    key
        Secret noise key (≥ 16 bytes). Never stored in a snapshot or release.
    release_every
        N: a tick, and a release, every N records (:meth:`extend`).
    release_growth
        g ≥ 0 (default 0: every N records). With g > 0, :meth:`extend`'s steps grow with the
        stream to N·2^k ≤ max(N, g·t) records (:func:`~dpsynth.clock.step_records`): a release
        holds O(t) cells at large ε·t, so a fixed N makes the cost per record grow with t,
        while a growth keeps it bounded (docs/decisions/0015).
        Public (t is public under replacement); step mechanisms only.
    mechanism
        ``"auto"`` (default): ``"guided"`` below a per-record ε of 10³, ``"adaptive"`` from it
        on. ``"guided"``: octal time nodes and partitions from released summaries
        (:mod:`~dpsynth.online.guided`); ``"adaptive"``: PrivTree histograms of doubling step
        blocks (:mod:`~dpsynth.online.blocks`); ``"paper"``: HVZ Alg 1 with Sparse Counting per
        cell (a faithful reproduction; per-record ε ≤ 10).
    max_depth
        Deepest tree level ever created (default 20).
    placement
        ``"uniform"`` (keyed, public positions inside leaves) or ``"centre"``.
    partition
        Input partition served; enters every noise context so partitions never share noise.
    schedule
        ``mechanism="paper"`` only: the ε allocation ε_{j,r} (default HVZ eq. (5.3) for d ≥ 2,
        (5.12) for d = 1). Snapshots store only its name: pass it again to :meth:`restore`.
    neighbours
        ``"replace"`` (default; the papers' notion, t public) or ``"add_remove"`` (one record
        more or less in one step; releases carry a noisy size): a step mechanism, records by
        :meth:`add`, :meth:`step` on a public clock; :meth:`extend` is refused (P9).
    current_shape
        adaptive: the open block placed like its own steps' summaries (``"steps"``,
        default), like the latest block (``"last"``) or like all blocks (``"pooled"``).
    privacy_unit
        ``"record"`` (default) or ``"user"``: ε covers all of one user's records, each given
        with its user id (``users=``); only a user's first ``max_contributions`` records count
        (≤ ``max_contributions_per_step`` per step, if set), each at ε/k (P15).

    Examples
    --------
    >>> synth = OnlineSynthesizer(d=2, epsilon=1.0, key=bytes(32), release_every=100)
    >>> releases = synth.extend(np.full((250, 2), 0.3))
    >>> [r.t for r in releases], synth.release().points.shape
    ([100, 200], (200, 2))
    >>> int(synth.release().leaf_counts.sum())
    200
    """

    def __init__(
        self,
        d: int,
        epsilon: float,
        key: bytes,
        release_every: int,
        mechanism: str = AUTO,
        max_depth: int = DEFAULT_MAX_DEPTH,
        *,
        placement: str = "uniform",
        partition: int = 0,
        schedule: Schedule | None = None,
        neighbours: str = "replace",
        current_shape: str = "steps",
        release_growth: float = 0.0,
        privacy_unit: str = "record",
        max_contributions: int | None = None,
        max_contributions_per_step: int | None = None,
    ) -> None:
        self._setup(OnlineConfig.resolve(
            d, epsilon, release_every, mechanism, max_depth, placement=placement,
            partition=partition, schedule=schedule, neighbours=neighbours,
            current_shape=current_shape, release_growth=release_growth,
            privacy_unit=privacy_unit, max_contributions=max_contributions,
            max_contributions_per_step=max_contributions_per_step), key)

    @classmethod
    def from_config(cls, config: OnlineConfig, key: bytes) -> OnlineSynthesizer:
        """The synthesizer of a resolved :class:`~dpsynth.online.config.OnlineConfig` (what
        the commands and the worker build; the keyword constructor builds one too)."""
        self = cls.__new__(cls)
        self._setup(config, key)
        return self

    def _setup(self, config: OnlineConfig, key: bytes) -> None:
        """Build from ``config`` (checked once, by :meth:`OnlineConfig.resolve`)."""
        self.config = config
        self.d = config.d
        self.epsilon = config.epsilon
        self.release_every = config.release_every
        self.release_growth = config.release_growth
        self.max_depth = config.max_depth
        self.placement = config.placement
        self.partition = config.partition
        self.neighbours = config.neighbours
        self.current_shape = config.current_shape
        self.privacy_unit = config.privacy_unit
        self._noise = KeyedNoise(key)
        self.users: UserLevel | None = None
        if config.max_contributions is not None:  # privacy: P15 (the unit "user")
            self.users = UserLevel(config.epsilon, config.max_contributions,
                                   config.max_contributions_per_step, self._noise)
        self.clock = TickClock(epsilon=config.record_epsilon, release_every=self.release_every)
        self._mechanism: Mechanism = make_mechanism(config, self._noise, self.clock)
        self.mechanism = self._mechanism.name
        self.worst_case_loss = self._mechanism.worst_case_loss
        if self.users is not None:  # privacy: P15 (k × the per-record loss, ≤ ε)
            self.worst_case_loss = self.users.loss(self.worst_case_loss)
        self.schedule_params = dict(self._mechanism.params)
        self.placement_seed = self._noise.placement_seed()  # public: keys placement only
        self.t = self.sequence = self.clipped = 0
        self._open = 0  # records since the last release (the open step)
        self._last: Release | None = None

    @property
    def open_records(self) -> int:
        """Records since the latest step or tick end that released (the open step)."""
        return self._open

    def records_until_step(self) -> int:
        """Records until :meth:`extend` ends the open step (replacement's public count)."""
        start = self.t - self._open
        return start + step_records(start, self.release_every, self.release_growth) - self.t

    @property
    def records_fed(self) -> int:
        """t: valid records counted (the true count: never released under add/remove)."""
        return self.t

    def public_config(self) -> dict[str, Any]:
        """The public parameters a stored state is bound to (no key, no partition)."""
        config = self._config()
        del config["partition"]
        return config

    def _config(self) -> dict[str, Any]:
        """The constructor's arguments (no key): what a snapshot restores from."""
        return {
            "d": self.d, "epsilon": self.epsilon, "release_every": self.release_every,
            "schedule": self.mechanism, "max_depth": self.max_depth,
            "placement": self.placement, "partition": self.partition,
            "neighbours": self.neighbours,
            "current_shape": self.current_shape,
            # only when set: the stored bytes of every other state stay as they were
            **({"release_growth": self.release_growth} if self.release_growth else {}),
            **({} if self.users is None else self.users.config()),
        }

    @property
    def n_cells(self) -> int:
        """Cells created so far, over all depths."""
        return self._mechanism.n_cells

    @property
    def state_nbytes(self) -> int:
        """Bytes of per-cell state (excluding the open tick)."""
        return self._mechanism.nbytes

    @property
    def depth(self) -> int:
        """The depth of a release now: min(level(t), max_depth), or the latest release's."""
        depth = self._mechanism.depth(self.t)  # privacy: P6 (t and the configuration only)
        if depth is None:
            return self._last.depth if self._last is not None else 0
        return depth

    @property
    def dropped(self) -> int:
        """Records over their user's bound, not counted (an operator metric, never released)."""
        return 0 if self.users is None else self.users.bounds.dropped

    def _validate(self, points: Any) -> np.ndarray:
        pts, clipped = validate_points(points, self.d)  # clipped values are counted
        self.clipped += clipped
        return pts

    def _route(self, pts: np.ndarray) -> np.ndarray:
        if self.t + len(pts) > MAX_COUNT:
            raise ConfigError(f"t would exceed {MAX_COUNT} records; shard the input further")
        return route(pts, depth=self.max_depth)

    def extend(self, points: Any, users: Any = None) -> list[Release]:
        """Consume records (n×d in [0,1]); return the releases completed during the call.

        A tick (and a release) ends every ``release_every`` records: public time only when the
        count is public, so refused under add/remove (use :meth:`add` and :meth:`step`).
        ``users``: each record's user id (``privacy_unit="user"``); records beyond their
        user's bound are dropped, and ``release_every`` counts the others.
        """
        refuse_count_steps(self.neighbours, "add(points)")  # privacy: P9 (public time)
        pts = self._validate(points)
        releases: list[Release] = []
        for chunk in (refuse_users(pts, users) if self.users is None else
                      self.users.admitted_chunks(pts, users, self)):  # privacy: P15
            releases += self._extend_addresses(self._route(chunk))
        return releases

    def _extend_addresses(self, addresses: np.ndarray) -> list[Release]:
        releases = []
        start = 0
        while start < len(addresses):
            step_end = self.t + self.records_until_step()
            end_t = min(step_end, self._mechanism.tick_limit(self.t))
            take = min(end_t - self.t, len(addresses) - start)
            self._mechanism.add(addresses[start:start + take])
            start += take
            self.t += take
            self._open += take
            if self.t == end_t:
                self._mechanism.end_tick(self.t)
                if self.t == step_end:
                    releases.append(self._make_release())
        return releases

    def add(self, points: Any, users: Any = None) -> None:
        """Add records (n×d in [0,1]) to the open step; step mechanisms only.

        Nothing is released until :meth:`step` ends the step. Under add/remove this is the only
        way to feed records: how many arrive never decides when a step ends (P9). ``users``:
        as for :meth:`extend`.
        """
        if self._mechanism.counts_records:
            raise ConfigError(f"add() needs a step mechanism ({', '.join(step_mechanisms())}: "
                              "steps on a public clock); other mechanisms take records "
                              "through extend()")
        pts = self._validate(points)
        if self.users is None:
            pts, = refuse_users(pts, users)
        else:  # privacy: P15 (an empty or fully dropped call is an ordinary empty step)
            pts = self.users.admitted(pts, users, self.sequence)
        addresses = self._route(pts)
        self._mechanism.add(addresses)
        self.t += len(addresses)
        self._open += len(addresses)

    def step(self) -> Release:
        """End the open step now (a tick marker) and return its release; step mechanisms only.

        Under add/remove the step boundaries are public time: call this from a clock or a
        marker, not from anything that depends on the records (docs/privacy.md P9).
        """
        if self._mechanism.counts_records:
            raise ConfigError(f"step() needs a step mechanism ({', '.join(step_mechanisms())}); "
                              "others release every release_every records")
        self._mechanism.end_tick(self.t)
        return self._make_release()

    def tick(self) -> Release | None:
        """A public tick marker (the worker's timer, a file's time bucket): release if due.

        Under add/remove the open step always ends here, empty or not (whether it holds records
        is private). Under replacement (t public) nothing is released without a new record;
        else a step mechanism ends its step, and ``paper`` releases at the
        current t from its completed ticks, whose grid is unchanged (docs/privacy.md P11).
        """
        last = self._last.t if self._last is not None else 0
        if not tick_ends_step(self.neighbours, self.t != last):  # privacy: P11
            return None  # nothing new (t is public under replacement)
        if self.neighbours == "add_remove" or not self._mechanism.counts_records:
            return self.step()
        return self._make_release(end_step=False)  # privacy: P6 (t and released counts)

    def _make_release(self, *, end_step: bool = True) -> Release:
        counts = self._mechanism.release_counts(self.t, self.placement_seed)
        if end_step:
            self._open = 0
        self.sequence += 1
        self._last = Release(
            t=counts.size,  # under add/remove a noisy size (P9)
            depth=counts.depth,
            leaf_counts=counts.dense,
            metadata=self.metadata(counts.depth, counts.size),
            placement_seed=self.placement_seed,
            occupied=counts.occupied,
        )
        return self._last

    def metadata(self, depth: int | None = None, size: int | None = None) -> dict[str, Any]:
        """Public description of the releases (docs/design.md D9, D17).

        ``t`` is the released size: the record count under replacement, the noisy size under
        add/remove (the true count is never published then).
        """
        return {
            "release_schema": RELEASE_SCHEMA_VERSION,
            "sequence": self.sequence,
            "partition": self.partition,
            "t": (self.t if self.neighbours == "replace" else 0) if size is None else size,
            "d": self.d,
            "depth": self.depth if depth is None else depth,
            "epsilon": self.epsilon,
            "neighbours": self.neighbours,
            "worst_case_loss": self.worst_case_loss,
            "schedule": self.mechanism,
            "schedule_params": dict(self.schedule_params),
            # under add/remove steps end only at public ticks: no records-per-step (P9)
            "release_every": self.release_every if self.neighbours == "replace" else None,
            **({"release_growth": self.release_growth} if self.release_growth else {}),
            "max_depth": self.max_depth,
            "placement": self.placement,
            "key_fingerprint": self._noise.fingerprint(),
            **self._mechanism.extra_metadata(),
            **({} if self.users is None else self.users.metadata()),  # privacy: P15
        }

    def release(self) -> Release:
        """The most recent release (t = 0, one empty root before the first)."""
        if self._last is None:
            return Release(0, 0, np.zeros(1, np.int64), self.metadata(0), self.placement_seed)
        return self._last

    # -- snapshots ------------------------------------------------------------------------

    def snapshot(self, *, include_users: bool = True) -> bytes:
        """The whole state as bytes, valid at any point (also mid-tick). No key material.

        ``include_users=False`` leaves out the per-user counts (the worker keeps them in its
        store, written in the same atomic commit: P15).
        """
        entries = self._mechanism.state()
        users = ({} if self.users is None else  # privacy: P15 (stored apart by the worker)
                 {"users": self.users.bounds.state() if include_users else None})
        last = self._last
        state = {
            "config": self._config(),
            "key_fingerprint": self._noise.fingerprint(),
            "t": self.t,
            "sequence": self.sequence,
            "clipped": self.clipped,
            **{name: entries[name] if name in entries else empty()
               for name, empty in STATE_ENTRIES.items()},
            **users,
            "step_records": 0 if self._mechanism.counts_records else self._open,
            "last": None if last is None else {
                "t": last.t, "depth": last.depth,
                "leaf_counts": last.leaf_counts, "metadata": last.metadata,
            },
        }
        return pack_state(state)

    @classmethod
    def restore(
        cls, blob: bytes, key: bytes, schedule: Schedule | None = None
    ) -> OnlineSynthesizer:
        """Continue from :meth:`snapshot`; the next releases equal an uninterrupted run's.

        ``schedule`` must be given again when the synthesizer was built with a custom one.
        """
        state = unpack_state(blob)
        config = dict(state["config"])
        name = config.pop("schedule")
        if schedule is not None:
            if schedule.name != name:
                raise ConfigError(f"schedule '{schedule.name}' differs from the snapshot's "
                                  f"'{name}'; pass the schedule the snapshot was made with")
            name = "paper"
        self = cls(key=key, mechanism=name, schedule=schedule, **config)
        self._load_snapshot(state)
        return self

    def _load_snapshot(self, state: dict[str, Any]) -> None:
        """Load a snapshot's ``state`` into this synthesizer, freshly built from its
        configuration and key."""
        if self._noise.fingerprint() != state["key_fingerprint"]:
            raise StateCorruptError(
                "snapshot was written under a different noise key; restore it with that key "
                "(a new key must start from an empty state)"
            )
        self.t, self.sequence, self.clipped = state["t"], state["sequence"], state["clipped"]
        self._mechanism.load_state({name: state[name] for name in STATE_ENTRIES})
        if self.users is not None and state.get("users") is not None:
            self.users.bounds.load_state(state["users"])
        self._open = (self.t % self.release_every if self._mechanism.counts_records
                      else int(state["step_records"]))
        last = state["last"]
        if last is not None:
            self._last = Release(last["t"], last["depth"], last["leaf_counts"],
                                 last["metadata"], self.placement_seed)
