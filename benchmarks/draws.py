"""Every keyed draw of the package, by path, with its scale test and its mutant (issue 44).

Layer: adapter (benchmark; docs/privacy.md P14 "Every draw, every path"). One row per (draw ×
path × mechanism): which noise address (P2's context, as labels in order), which path draws it
— the dense Lap_Z sampler (``discrete_laplace_at``), its sparse form (``discrete_laplace_nonzero``,
P2c), a PrivTree's dense or rare-outcome descent (P10), or the geometric and uniform draws of
the lazy threshold tests (P3) and of public post-processing — the aimed tests that check its
scale against the documented share, the ε at which those tests run it (``at``), and the mutant
of :mod:`benchmarks.mutants` that overspends exactly that path.

``tests/statistical/test_draw_coverage.py`` runs every mechanism at ε from 0.1 to 10⁴ and fails
when a draw it sees has no row (a new path cannot be added untested), when a row's tests do not
run it at the smallest and the largest ε of the grid at which it occurs, when a row's tests are
not parametrised at the ε the row claims, or when its mutant does not aim at its path.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from benchmarks.mutants import CONFORMANCE, LOWDIM, OVERSPEND, P9, P10_SCALE, P16, P16_REFINED

#: How a draw is made (what the spy of tests.support.spies saw).
FORMS = ("dense", "sparse", "descent: dense", "descent: rare", "geometric", "uniform")
PAPER = OVERSPEND + "test_P5_paper_level_counters_spend_their_scheduled_epsilon"
PMM = OVERSPEND + "test_P7_pmm_draws_spend_at_most_epsilon"
PSMM = OVERSPEND + "test_P7b_psmm_draws_spend_at_most_epsilon"
P12 = OVERSPEND + "test_P12_tabular_measurements_and_size_fit_the_split"
EM = OVERSPEND + "test_em_frequencies_fit_exp_eps_u_over_two_delta_computed_here"
P16_SPARSE = "tests/statistical/test_overspend_guided.py::" \
             "test_P16_sparse_leaf_noise_is_as_frequent_as_its_scale"
#: The ε of the drift-free grids: smallest, default, sparse onset, refinement, largest.
LOW, ONE, HIGH = 0.1, 1.0, 1e4


@dataclass(frozen=True)
class Draw:
    """One draw on one path: where (``labels``), how (``form``), checked by ``tests`` at the
    ε in ``at``, overspent by ``mutant`` (None: a public draw, ``argument`` says why)."""

    mechanism: str
    component: str
    labels: tuple[str, ...]
    form: str
    tests: tuple[str, ...] = ()
    at: tuple[float, ...] = ()
    mutant: str | None = None
    argument: str = ""


def _rows() -> tuple[Draw, ...]:
    d = Draw
    dense_grid, sparse_grid, every = (LOW, ONE, 8.0), (8.0, 100.0, HIGH), (LOW, ONE, 8.0, 100.0,
                                                                         HIGH)
    offline = (LOW, ONE, HIGH)
    refined = (100.0, HIGH)
    return (
        # -- adaptive: PrivTree blocks, step summaries, open-block sizes (P9, P10) ----------
        d("adaptive", "block leaf counts", ("adaptive", "block", "leaf"), "dense", (P9,),
          dense_grid, "PrivTree leaf noise × ¼ (block summaries, dense form)"),
        d("adaptive", "block leaf counts", ("adaptive", "block", "leaf"), "sparse", (P9,),
          sparse_grid, "PrivTree leaf noise × ¼ (block summaries, sparse form)"),
        d("adaptive", "step-summary leaf counts", ("adaptive", "step", "leaf"), "dense", (P9,),
          dense_grid, "step summary leaf noise × ¼ (dense form)"),
        d("adaptive", "step-summary leaf counts", ("adaptive", "step", "leaf"), "sparse", (P9,),
          sparse_grid, "step summary leaf noise × ¼ (sparse form)"),
        d("adaptive", "block split decisions", ("adaptive", "block", "split"), "descent: dense",
          (P10_SCALE,), dense_grid,
          "PrivTree decision noise × ¼ (adaptive, dense descent: λ > 1 record)"),
        d("adaptive", "block split decisions", ("adaptive", "block", "split"), "descent: rare",
          (P10_SCALE,), sparse_grid,
          "PrivTree decision noise × ¼ (adaptive, rare-outcome descent: λ ≤ 1 record)"),
        d("adaptive", "step-summary split decisions", ("adaptive", "step", "split"),
          "descent: dense", (P10_SCALE,), dense_grid,
          "PrivTree decision noise × ¼ (adaptive, dense descent: λ > 1 record)"),
        d("adaptive", "step-summary split decisions", ("adaptive", "step", "split"),
          "descent: rare", (P10_SCALE,), (100.0, HIGH),
          "PrivTree decision noise × ¼ (adaptive, rare-outcome descent: λ ≤ 1 record)"),
        d("adaptive", "open-block sizes (add/remove)", ("adaptive", "size"), "dense", (P9,),
          every, "adaptive open-block size noise × ¼"),
        # -- guided, the default (P16) --------------------------------------------------------
        d("guided", "block leaf counts", ("guided", "block", "leaf"), "dense", (P16,),
          dense_grid, "guided block leaf noise × ¼ (dense form)"),
        d("guided", "block leaf counts", ("guided", "block", "leaf"), "sparse",
          (P16, P16_SPARSE, P16_REFINED), (8.0, *refined),
          "guided block leaf noise × ¼ (sparse form)"),
        d("guided", "time-node leaf counts", ("guided", "node", "leaf"), "dense", (P16,),
          dense_grid, "guided node leaf noise × ¼ (dense form)"),
        d("guided", "time-node leaf counts", ("guided", "node", "leaf"), "sparse",
          (P16, P16_SPARSE, P16_REFINED), (8.0, *refined),
          "guided node leaf noise × ¼ (sparse form)"),
        d("guided", "refinement decisions (block)", ("guided", "block", "split"),
          "descent: rare", (P16_REFINED,), refined,
          "guided refinement decision noise × ¼ (rare-outcome descent: λ ≤ 1 record)"),
        d("guided", "refinement decisions (time node)", ("guided", "node", "split"),
          "descent: rare", (P16_REFINED,), refined,
          "guided refinement decision noise × ¼ (rare-outcome descent: λ ≤ 1 record)"),
        d("guided", "open-block sizes (add/remove)", ("guided", "size"), "dense",
          (P16, P16_REFINED), (*dense_grid, *refined), "guided open-block size noise × ¼"),
        # -- paper: HVZ Alg 1's level counters (P3-P5) ----------------------------------------
        d("paper", "threshold and check noise", ("cells", "level", "thr"), "dense",
          (PAPER, CONFORMANCE), (LOW, ONE, 10.0),
          "paper level counters: threshold/check noise × ¼"),
        d("paper", "Binary Mechanism nodes", ("cells", "level", "bm"), "dense",
          (PAPER, CONFORMANCE), (LOW, ONE, 10.0),
          "paper level counters: Binary Mechanism noise × ¼"),
        d("paper", "level-end counts (S̃)", ("cells", "level", "end"), "dense",
          (PAPER, CONFORMANCE), (LOW, ONE, 10.0), "paper level counters: end (S̃) noise × ¼"),
        d("paper", "lazy check times (thinning of the threshold tests, P3)",
          ("cells", "level", "fire"), "geometric", (PAPER, CONFORMANCE), (LOW, ONE, 10.0),
          "paper level counters: threshold/check noise × ¼"),
        d("paper", "lazy check times after a closure (P3)", ("cells", "level", "refire"),
          "geometric", (PAPER, CONFORMANCE), (ONE, 10.0),
          "paper level counters: threshold/check noise × ¼"),
        d("paper", "lazy check acceptance (P3)", ("cells", "level", "accept"), "uniform",
          (PAPER, CONFORMANCE), (LOW, ONE, 10.0),
          "paper level counters: threshold/check noise × ¼"),
        # -- offline (P7, P7b) ------------------------------------------------------------------
        d("pmm", "level counts", ("pmm", "level"), "dense", (PMM,), offline,
          "PMM level noise × ¼"),
        d("pmm", "size (add/remove)", ("pmm", "size"), "dense", (PMM,), offline,
          "PMM size noise × ¼ (≡ its budget × 4)"),
        d("psmm", "cell counts", ("psmm", "cell"), "dense", (PSMM,), offline,
          "PSMM cell noise × ¼ (≡ its budget × 4)"),
        d("psmm", "size (add/remove)", ("psmm", "size"), "dense", (PSMM,), offline,
          "PSMM size noise × ¼ (≡ its budget × 4)"),
        d("lowdim", "covariance", ("lowdim", "cov"), "dense", (LOWDIM,), offline,
          "lowdim covariance noise × ¼ (≡ its budget × 4)"),
        d("lowdim", "mean", ("lowdim", "mean"), "dense", (LOWDIM,), offline,
          "lowdim mean noise × ¼ (≡ its budget × 4)"),
        d("lowdim", "synthesis (PMM on the projection)", ("lowdim", "pmm", "level"), "dense",
          (LOWDIM,), offline, "lowdim synthesis (PMM on the projection) noise × ¼"),
        # -- tabular (P12) ----------------------------------------------------------------------
        d("tabular", "measurements (continual counters)", ("tabular", "ctr"), "dense", (P12,),
          offline, "measurement counter noise × ¼"),
        d("tabular", "measurements (StreamingMWEM baseline)", ("tabular", "measure"), "dense",
          (P12,), offline, "baseline measurement noise × ¼ (≡ its budget × 4)"),
        d("tabular", "size counter (add/remove)", ("tabular", "size"), "dense", (P12,),
          offline, "size counter noise × ¼"),
        d("tabular", "exponential-mechanism selection", ("tabular", "em"), "uniform",
          (P12, EM), offline, "exponential mechanism budget × 4"),
        # -- public draws: post-processing and public schedules ---------------------------------
        d("tabular", "cyclic schedule's order", ("tabular", "cyclic"), "uniform",
          argument="a public schedule: reads no record (docs/tabular.md T18)"),
        d("online", "systematic rounding's uniform", ("round",), "uniform",
          argument="post-processing with a public uniform from the placement seed (P9)"),
        d("all", "placement inside leaves", ("place",), "uniform",
          argument="post-processing from the public placement seed (P6)"),
    )


DRAWS = _rows()


def classify(form: str, context: Sequence[object]) -> list[Draw]:
    """The rows of a draw made in ``form`` at ``context``: those whose labels the context holds
    in order, the most specific (longest labels) only."""
    from benchmarks.seams import holds

    matches = [row for row in DRAWS if row.form == form and holds(context, row.labels)]
    longest = max((len(row.labels) for row in matches), default=0)
    return [row for row in matches if len(row.labels) == longest]


def markdown() -> str:
    """The table of docs/privacy.md P14 "Every draw, every path": draw × path × mechanism →
    its scale tests (at which ε) and its mutant."""
    rows = ["| mechanism | draw | noise address | path | scale tests (ε) | mutant |",
            "|---|---|---|---|---|---|"]
    for row in DRAWS:
        tests = "; ".join(f"`{t.split('::')[-1]}`" for t in row.tests) or row.argument
        at = f" ({', '.join(f'{e:g}' for e in row.at)})" if row.at else ""
        rows.append(f"| {row.mechanism} | {row.component} | `{'…'.join(row.labels)}` | "
                    f"{row.form} | {tests}{at} | {row.mutant or '— (public)'} |")
    return "\n".join(rows)
