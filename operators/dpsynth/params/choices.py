"""The named choices of the parameters, as :class:`~enum.StrEnum` (a value is its string).

Layer: core (standard library only). Release metadata, stored state and error messages hold the
plain strings, so these enums change no byte of either.
"""

from __future__ import annotations

from enum import StrEnum


class Neighbours(StrEnum):
    """The neighbour notion: what one record's privacy covers (docs/privacy.md P9)."""

    REPLACE = "replace"  # one record's values changed; the count is public (the papers')
    ADD_REMOVE = "add_remove"  # one record more or less; the count is private


class PrivacyUnit(StrEnum):
    """Whose privacy ε covers: one record, or all of one user's records (P15)."""

    RECORD = "record"
    USER = "user"


class Engine(StrEnum):
    """The worker's engine: points in [0,1]^d, or tables over a finite domain."""

    POINTS = "points"
    TABULAR = "tabular"


class MechanismName(StrEnum):
    """The online point synthesizer's algorithm (:mod:`dpsynth.online.mechanism`)."""

    AUTO = "auto"
    GUIDED = "guided"
    ADAPTIVE = "adaptive"
    PAPER = "paper"


class Placement(StrEnum):
    """Where a release's points sit inside their leaves (public, data-independent)."""

    UNIFORM = "uniform"
    CENTRE = "centre"


class PointsFormat(StrEnum):
    """The materialised points published beside each release (schemas/README.md "Points")."""

    NONE = "none"  # only the compact releases (leaf counts and a placement seed)
    ARROW = "arrow"  # also every release's points, in units, as Arrow IPC streams


class CurrentShape(StrEnum):
    """adaptive: how the open block is placed."""

    STEPS = "steps"
    LAST = "last"
    POOLED = "pooled"


class TabularMechanism(StrEnum):
    """The tabular stream's method (paper 003)."""

    PROPOSED = "proposed"  # select-measure-fit, Alg 3
    BASELINE = "baseline"  # StreamingMWEM, Alg 2


class TabularCounter(StrEnum):
    """The continual counter of each workload (paper 003)."""

    SIMPLE = "simple"
    BLOCK = "block"
    UNBOUNDED_BLOCK = "unbounded_block"


class Selection(StrEnum):
    """How the tabular method picks its workloads."""

    CYCLIC = "cyclic"  # a public schedule, no ε (docs/tabular.md T18)
    EM = "em"  # the exponential mechanism, as printed


class Estimator(StrEnum):
    """How the tabular method turns its counters into a model."""

    SAMPLE = "sample"  # counter shares (docs/tabular.md T6)
    ALG3 = "alg3"  # the paper's m and r


class Fit(StrEnum):
    """The tabular model's fit."""

    MW = "mw"  # multiplicative weights
    PGM = "pgm"  # a graphical model (private-pgm, optional extra)


class OfflineMechanism(StrEnum):
    """``dpsynth offline``: the one-shot synthetic copy."""

    PMM = "pmm"
    PSMM = "psmm"
    LOWDIM = "lowdim"


class LogLevel(StrEnum):
    """The worker's log level."""

    CRIT = "crit"
    ERROR = "error"
    WARN = "warn"
    INFO = "info"
    DEBUG = "debug"
