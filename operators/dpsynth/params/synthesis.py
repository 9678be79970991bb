"""The synthesis parameters: one declaration each (:class:`~dpsynth.params.core.Param`).

Layer: core (standard library only). Scopes say who takes a parameter: the library
(``OnlineSynthesizer``, ``TabularSynthesizer``), ``dpsynth run``, ``dpsynth tabular run``,
``dpsynth offline`` and the worker (``DPSYNTH_*``).
"""

from __future__ import annotations

from dpsynth.params.choices import (
    CurrentShape,
    Estimator,
    Fit,
    MechanismName,
    Neighbours,
    OfflineMechanism,
    Placement,
    PrivacyUnit,
    Selection,
    TabularCounter,
    TabularMechanism,
)
from dpsynth.params.core import Param

#: Deepest tree level ever created (privacy-neutral: accuracy plateaus at the leaf diameter).
DEFAULT_MAX_DEPTH = 20
#: The largest k of the privacy unit "user" (a user's counts are 16-bit).
MAX_CONTRIBUTIONS = 65_535

LIBRARY = frozenset({"library"})
ALL = frozenset({"library", "run", "tabular", "offline", "worker"})
ONLINE = frozenset({"library", "run", "worker"})
TABULAR = frozenset({"library", "tabular", "worker"})

SYNTHESIS = [
    Param("epsilon", "float", low=0.0, strict=True, cli_default=1.0, scopes=ALL,
          help="Total privacy budget ε for the whole stream (one record, or one user).",
          privacy="The guarantee: ε-DP under the neighbour notion, for the whole stream."),
    Param("release_every", "int", low=1, default=1000, scopes=ALL - {"offline"},
          engines={"tabular": 200},
          help="Replacement: a step, and a release, every N records (the tabular default is "
               "the paper's batches of 200 rows).",
          privacy="Public only because the count is: refused under add/remove (P11)."),
    Param("release_growth", "float", low=0.0, default=0.0, scopes=ONLINE,
          help="Replacement: steps grow with the stream to N·2^k ≤ max(N, g·t) records, so "
               "a release's cost (O(t) cells at large ε·t) stays bounded per record; 0: a "
               "step every N records. Step mechanisms only.",
          privacy="Public: a function of t, public under replacement (P11)."),
    Param("max_depth", "int", low=0, high=63, default=DEFAULT_MAX_DEPTH,
          scopes=frozenset({"library", "run", "offline", "worker"}),
          help="Deepest tree level (bounds memory; accuracy plateaus at the leaf size)."),
    Param("mechanism", "choice", choices=MechanismName, default="auto", scopes=ONLINE,
          help="auto: guided below a per-record ε of 10³, adaptive from it; guided: octal "
               "time nodes with partitions from released summaries; adaptive: PrivTree "
               "histograms of doubling step blocks; paper: HVZ Alg 1 verbatim (per-record "
               "ε ≤ 10)."),
    Param("neighbours", "choice", choices=Neighbours, default="replace",
          scopes=ALL, engines={"tabular": "add_remove"},
          help="replace: one record's values changed, the count public (the papers'); "
               "add_remove: one record more or less, the count private (steps from a public "
               "clock only).",
          privacy="What ε protects: a record's values (replace) or its existence (add_remove)."),
    Param("privacy_unit", "choice", choices=PrivacyUnit, default="record", scopes=ONLINE,
          help="record: ε per record. user: ε per user (all of one user's records); only "
               "the first max_contributions records of each user count.",
          privacy="user: the mechanism runs at ε/k per record, k × its loss checked ≤ ε (P15)."),
    Param("max_contributions", "int", low=1, high=MAX_CONTRIBUTIONS, default=None,
          optional=True, scopes=ONLINE,
          help="privacy_unit user: k, the records of one user counted over the whole stream "
               "(later ones are dropped)."),
    Param("max_contributions_per_step", "int", low=1, high=MAX_CONTRIBUTIONS, default=None,
          optional=True, scopes=ONLINE,
          help="privacy_unit user: also at most this many of a user's records per step."),
    Param("user_column", "text", default="", scopes=frozenset({"run", "worker"}),
          help="privacy_unit user: the field holding each record's user id (or the schema's "
               "user_column; the worker's default is the Kafka message key)."),
    Param("placement", "choice", choices=Placement, default="uniform", scopes=LIBRARY,
          help="Points inside their leaves: uniform (keyed, public positions) or at the "
               "centre."),
    Param("current_shape", "choice", choices=CurrentShape, default="steps", scopes=LIBRARY,
          help="adaptive: the open block placed like its own steps' summaries, like the "
               "latest block, or like all blocks."),
    Param("partition", "int", low=0, default=0, scopes=LIBRARY,
          help="The input partition served; enters every noise context."),
    # -- tabular ----------------------------------------------------------------------------
    Param("tabular_mechanism", "choice", choices=TabularMechanism, default="proposed",
          scopes=TABULAR, option="--mechanism", keyword="mechanism", group="tabular",
          help="proposed: select-measure-fit (paper 003 Alg 3); baseline: StreamingMWEM "
               "(Alg 2)."),
    Param("tabular_counter", "choice", choices=TabularCounter, default="simple",
          scopes=TABULAR, option="--counter", keyword="counter", group="tabular",
          help="The continual counter of each workload (Alg 4: unbounded_block)."),
    Param("tabular_workloads_per_step", "int", low=1, default=None, optional=True,
          scopes=TABULAR, option="--k", keyword="workloads_per_step", group="tabular",
          help="k, the workloads measured per step (unset: max(1, round(2ε)))."),
    Param("selection", "choice", choices=Selection, default="cyclic",
          scopes=frozenset({"library", "tabular"}), group="tabular",
          help="cyclic: a public schedule, no ε (docs/tabular.md T18); em: the exponential "
               "mechanism, as printed."),
    Param("estimator", "choice", choices=Estimator, default="sample",
          scopes=frozenset({"library", "tabular"}), group="tabular",
          help="sample: counter shares (T6); alg3: the paper's m and r."),
    Param("fit", "choice", choices=Fit, default="mw",
          scopes=frozenset({"library", "tabular"}), group="tabular",
          help="Model fit: multiplicative weights, or PGM (needs dpsynth[pgm] and estimator "
               "alg3)."),
    # -- offline ----------------------------------------------------------------------------
    Param("offline_mechanism", "choice", choices=OfflineMechanism, default="pmm",
          scopes=frozenset({"offline"}), option="--mechanism", group="offline",
          help="pmm: tree + consistency (linear time); psmm: noisy grid + d_BL LP (grids up "
               "to 2^14 cells); lowdim: private PCA, then PMM/PSMM."),
    Param("target_dim", "int", low=2, default=None, optional=True,
          scopes=frozenset({"offline"}), group="offline",
          help="lowdim: the subspace dimension d′ (unset: chosen privately)."),
]
