"""The mutants of the mutation check and the tests aimed at them (issue 25; docs/privacy.md P14).

Layer: adapter (benchmark). One mutant per draw and per budget share of every shipped mechanism:
a noise scale × ¼, or the share handed to a component × 4 at its point of use, where the
accounting does not see it (its ``worst_case_loss`` is unchanged, so only the noise gives the
overspend away). A share that pays for exactly one kind of draw, with nothing else derived from
it, has one mutant: its budget × 4 *is* its scale × ¼ (1/(4ε) = ¼ · 1/ε); such pairs are named
once, "noise × ¼ (≡ budget × 4)".

Each mutant names its seam (:mod:`benchmarks.seams`: a named function, method or noise address,
never source text) and the tests aimed at that draw; the runner runs exactly those and the
mutant is caught when one of them fails. :data:`FALSE_ALARM` states, for every aimed test, how
often it fails the unmutated code over random keys (the tests use fixed keys, so at HEAD each
either passes or not; the rate is what choosing the keys cost).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from benchmarks.seams import After, Argument, Budget, Draws, Result, Seam, times

OVERSPEND = "tests/statistical/test_overspend.py::"
COUNTERS = "tests/unit/test_counters.py::"
CONFORMANCE = "tests/conformance/test_counters.py::test_level_form_equals_scalar_counters"
PAPER = OVERSPEND + "test_P5_paper_level_counters_spend_their_scheduled_epsilon"
P9 = OVERSPEND + "test_P9_block_noise_scales_fit_the_documented_shares"
P10 = OVERSPEND + "test_P10_one_split_decision_costs_at_most_the_decision_share"
P10_SCALE = OVERSPEND + "test_P10_decision_noise_of_every_tree_fits_its_share"
P12 = OVERSPEND + "test_P12_tabular_measurements_and_size_fit_the_split"
GUIDED = "tests/statistical/test_overspend_guided.py::"
P16 = GUIDED + "test_P16_guided_noise_scales_fit_the_documented_shares"
P16_REFINED = GUIDED + "test_P16_refined_summaries_spend_their_epsilon_on_decisions_and_counts"
P16_LEAF = GUIDED + "test_P16_guided_leaf_noise_is_as_frequent_as_its_scale"
P16_SPARSE = GUIDED + "test_P16_sparse_leaf_noise_is_as_frequent_as_its_scale"
SPARSE = "tests/statistical/test_noise_sparse.py::"
LOWDIM = OVERSPEND + "test_P7b_lowdim_draws_spend_at_most_epsilon"

#: False-alarm rate of each aimed test (over random keys; the tests fix theirs).
FALSE_ALARM = {
    "test_P2a_discrete_laplace_goodness_of_fit": "1e-4 (chi-square) per scale",
    "test_binary_mechanism_error_is_the_sum_of_its_covering_nodes": "0 (exact)",
    "test_P5_per_level_noise_scales_and_budget_are_as_specified": "0 (scales read)",
    "test_P3_one_record_per_tick_is_alg2_verbatim": "0 (exact)",
    "test_level_form_equals_scalar_counters": "0 (exact)",
    "test_P5_paper_level_counters_spend_their_scheduled_epsilon": "0 (scales drawn)",
    "test_P8_level_end_noise_has_the_scheduled_scale": "0 (scales drawn)",
    "test_P9_block_noise_scales_fit_the_documented_shares": "0 (scales drawn)",
    "test_P10_one_split_decision_costs_at_most_the_decision_share": "2e-6 per case (CP)",
    "test_P10_decision_noise_of_every_tree_fits_its_share": "0 (scales drawn)",
    "test_P16_guided_noise_scales_fit_the_documented_shares": "0 (scales drawn)",
    "test_P16_refined_summaries_spend_their_epsilon_on_decisions_and_counts":
        "0 (scales drawn)",
    "test_P16_guided_leaf_noise_is_as_frequent_as_its_scale": "1e-6 per case (binomial)",
    "test_P16_sparse_leaf_noise_is_as_frequent_as_its_scale": "1e-6 per kind (binomial)",
    "test_P2c_sparse_values_have_the_dense_law": "1e-4 (chi-square) per scale",
    "test_P2c_rare_decisions_split_with_the_decision_probability": "1e-4 (binomial) per case",
    "test_P2c_sparse_gaps_are_geometric": "1e-4 (chi-square) per scale",
    "test_P15_records_over_the_bound_never_reach_a_release": "0 (exact)",
    "test_P15_the_first_k_records_of_each_user_count": "0 (exact)",
    "test_P12_tabular_measurements_and_size_fit_the_split": "0 (scales drawn)",
    "test_em_frequencies_fit_exp_eps_u_over_two_delta_computed_here": "1e-6 (chi-square)",
    "test_cyclic_measurements_carry_the_configured_noise": "≈2e-9 per case (6 s.e.)",
    "test_P7_pmm_draws_spend_at_most_epsilon": "0 (scales drawn)",
    "test_P7b_psmm_draws_spend_at_most_epsilon": "0 (scales drawn)",
    "test_P7b_lowdim_draws_spend_at_most_epsilon": "0 (scales drawn)",
    "test_noisy_total_has_the_calibrated_variance": "≈1e-4 per case (±35 %, 3.9 s.e.)",
    "test_covariance_noise_has_the_paper_scale": "≈2e-3 (±35 %, ≥ 3.1 s.e.)",
    "test_mean_noise_has_the_paper_scale": "≈5e-4 (±35 %, 3.5 s.e.)",
}


@dataclass(frozen=True)
class Mutant:
    """One overspend: ``seam`` applied, ``tests`` (pytest node ids) must fail."""

    name: str
    component: str
    seam: Seam
    tests: tuple[str, ...]


def _quarter_decisions(params: Any) -> Any:
    """PrivTree parameters with the decision noise λ × ¼ (δ kept)."""
    return replace(params, scale_units=params.scale_units / 4)


def _rare_descent(params: Any) -> bool:
    """Whether a PrivTree with these parameters draws its decisions as rare outcomes (the
    product's public rule, a function of λ only: docs/privacy.md P10)."""
    from dpsynth.noise import effective_scale
    from dpsynth.online.privtree import RARE_MAX_SCALE

    return bool(effective_scale(params.scale_units) <= RARE_MAX_SCALE)


#: ``Argument.only`` predicates: the decisions of one descent (P10's dense or rare path).
DENSE_DESCENT = (lambda params: not _rare_descent(params), "λ > 1 record (dense descent)")
RARE_DESCENT = (_rare_descent, "λ ≤ 1 record (rare-outcome descent)")


def _counts_times_four(result: tuple[Any, Any, float], arguments: dict[str, Any]) -> Any:
    """A refined summary's count budget × 4 (None: not refined, nothing changed)."""
    depths, prefixes, counts_eps = result
    return (depths, prefixes, 4 * counts_eps) if counts_eps < arguments["epsilon"] else None


def _mutants() -> tuple[Mutant, ...]:
    quarter, four = times(0.25), times(4.0)
    guided, blocks = "dpsynth.online.guided.mechanism:GuidedMechanism", "dpsynth.online.blocks"
    privtree_counts = "dpsynth.online.privtree:_leaves_and_counts"
    m = Mutant
    return (
        # -- the sampler every draw goes through ---------------------------------------------
        m("sampler draws at ¼ of the scale asked for (every keyed Lap_Z draw)",
          "noise: exact sampler",
          Argument("dpsynth.noise.keyed:effective_scale", "scale", quarter, "× ¼"),
          ("tests/statistical/test_noise_distribution.py::"
           "test_P2a_discrete_laplace_goodness_of_fit",)),
        m("sparse sampler draws at ¼ of the scale asked for (every nonzero-only Lap_Z draw)",
          "noise: sparse sampler (P2c)",
          Argument("dpsynth.noise.keyed:nonzero_draws", "s", lambda s: 4 * s,
                   "s × 4 (scale t/s × ¼)"),
          (SPARSE + "test_P2c_sparse_values_have_the_dense_law",
           SPARSE + "test_P2c_sparse_gaps_are_geometric")),
        # -- counters: the paper mechanism's level counters and the scalar forms -------------
        m("Binary Mechanism node noise × ¼", "counters: Binary Mechanism",
          After("dpsynth.counters.binary:BinaryMechanism.__init__", {"scale": 0.25}),
          (COUNTERS + "test_binary_mechanism_error_is_the_sum_of_its_covering_nodes",)),
        m("Sparse Counting threshold/check noise × ¼", "counters: Sparse (Alg 2)",
          After("dpsynth.counters.sparse:SparseCounter.__init__", {"scale": 0.25}),
          (COUNTERS + "test_P5_per_level_noise_scales_and_budget_are_as_specified",
           COUNTERS + "test_P3_one_record_per_tick_is_alg2_verbatim")),
        m("Sparse Counting inner Binary Mechanism budget × 4", "counters: Sparse (Alg 2)",
          Argument("dpsynth.counters.sparse:BinaryMechanism", "epsilon", four, "× 4"),
          (COUNTERS + "test_P5_per_level_noise_scales_and_budget_are_as_specified",)),
        m("inhomogeneous level end (S̃) noise × ¼", "counters: Inhomogeneous",
          Result("dpsynth.counters.inhomogeneous:level_end_scale",
                 lambda scale, _: scale / 4, "× ¼"),
          (COUNTERS + "test_P5_per_level_noise_scales_and_budget_are_as_specified",)),
        m("paper level counters: end (S̃) noise × ¼", "paper: level counters",
          Result("dpsynth.counters.level:level_end_scale", lambda scale, _: scale / 4, "× ¼"),
          (PAPER, CONFORMANCE)),
        m("paper level counters: Sparse budget × 4 (threshold, checks, Binary Mechanism)",
          "paper: level counters",
          After("dpsynth.counters.level:LevelCounters._set_level_parameters",
                {"scale": 0.25, "bm_scale": 0.25, "threshold": 0.25}),
          (PAPER, CONFORMANCE)),
        m("paper level counters: threshold/check noise × ¼", "paper: level counters",
          After("dpsynth.counters.level:LevelCounters._set_level_parameters", {"scale": 0.25}),
          (PAPER, CONFORMANCE)),
        m("paper level counters: Binary Mechanism noise × ¼", "paper: level counters",
          After("dpsynth.counters.level:LevelCounters._set_level_parameters",
                {"bm_scale": 0.25}),
          (PAPER, CONFORMANCE)),
        m("paper: level ε handed to the counters × 4 (schedule accounted at 1×)",
          "paper: level counters",
          Result("dpsynth.online.paper:PaperMechanism._level_epsilon",
                 lambda level_epsilon, _: lambda r: 4 * level_epsilon(r), "× 4"),
          (PAPER,)),
        # -- adaptive: PrivTree blocks and step summaries ------------------------------------
        m("PrivTree decision noise × ¼ (adaptive, dense descent: λ > 1 record)",
          "adaptive: PrivTree decisions",
          Argument(privtree_counts, "params", _quarter_decisions, "λ × ¼", when=("adaptive",),
                   only=DENSE_DESCENT),
          (P10_SCALE, P10)),
        m("PrivTree decision noise × ¼ (adaptive, rare-outcome descent: λ ≤ 1 record)",
          "adaptive: PrivTree decisions",
          Argument(privtree_counts, "params", _quarter_decisions, "λ × ¼", when=("adaptive",),
                   only=RARE_DESCENT),
          (P10_SCALE,)),
        m("PrivTree rare-outcome decisions at ¼ of the decision scale (λ ≤ 1 record)",
          "PrivTree: nearly certain decisions (P2c)",
          Argument("dpsynth.online.privtree_descent:_run", "params", _quarter_decisions,
                   "λ × ¼"),
          ("tests/unit/test_privtree.py::"
           "test_P2c_rare_decisions_split_with_the_decision_probability",)),
        m("PrivTree decision budget × 4 (block summaries)", "adaptive: PrivTree decisions",
          Argument(f"{blocks}:privtree_histogram", "structure", four, "× 4",
                   when=("block",)),
          (P10_SCALE, P10 + "[block-add_remove]", P10 + "[block-replace]")),
        m("PrivTree leaf noise × ¼ (block summaries, dense form)", "adaptive: PrivTree counts",
          Draws(("adaptive", "block", "leaf"), form="dense"), (P9,)),
        m("PrivTree leaf noise × ¼ (block summaries, sparse form)", "adaptive: PrivTree counts",
          Draws(("adaptive", "block", "leaf"), form="sparse"), (P9,)),
        m("PrivTree leaf count budget × 4 (block summaries)", "adaptive: PrivTree counts",
          Argument(f"{blocks}:privtree_histogram", "counts", four, "× 4", when=("block",)),
          (P9,)),
        m("step summary decision budget × 4", "adaptive: step summaries",
          Argument(f"{blocks}:privtree_histogram", "structure", four, "× 4", when=("step",)),
          (P10_SCALE, P10 + "[step_summary-add_remove]", P10 + "[step_summary-replace]")),
        m("step summary count budget × 4", "adaptive: step summaries",
          Argument(f"{blocks}:privtree_histogram", "counts", four, "× 4", when=("step",)),
          (P9,)),
        m("step summary leaf noise × ¼ (dense form)", "adaptive: step summaries",
          Draws(("step", "leaf"), form="dense"), (P9,)),
        m("step summary leaf noise × ¼ (sparse form)", "adaptive: step summaries",
          Draws(("step", "leaf"), form="sparse"), (P9,)),
        m("adaptive open-block size noise × ¼", "adaptive: block sizes",
          Draws(("adaptive", "size")),
          (P9,)),
        m("adaptive open-block size budget × 4", "adaptive: block sizes",
          Budget(f"{blocks}:AdaptiveMechanism._open_size", "size"),
          (P9,)),
        # -- guided, the default ---------------------------------------------------------------
        m("guided block leaf noise × ¼ (dense form)", "guided: block histograms",
          Draws(("guided", "block", "leaf"), form="dense"), (P16, P16_LEAF)),
        m("guided block leaf noise × ¼ (sparse form)", "guided: block histograms",
          Draws(("guided", "block", "leaf"), form="sparse"), (P16, P16_SPARSE, P16_REFINED)),
        m("guided block budget (ε_top) × 4", "guided: block histograms",
          Budget(f"{guided}._summarise_block", "counts"), (P16, P16_LEAF)),
        m("guided node leaf noise × ¼ (dense form)", "guided: time-node histograms",
          Draws(("guided", "node", "leaf"), form="dense"), (P16, P16_LEAF)),
        m("guided node leaf noise × ¼ (sparse form)", "guided: time-node histograms",
          Draws(("guided", "node", "leaf"), form="sparse"), (P16, P16_SPARSE, P16_REFINED)),
        m("guided node budget (ε_o) × 4", "guided: time-node histograms",
          Budget(f"{guided}._summarise_node", "steps"), (P16, P16_LEAF)),
        m("guided open-block size noise × ¼", "guided: block sizes",
          Draws(("guided", "size")), (P16,)),
        m("guided open-block size budget (ε_n) × 4", "guided: block sizes",
          Budget(f"{guided}._open_size", "size"), (P16,)),
        m("guided refinement decision noise × ¼ (rare-outcome descent: λ ≤ 1 record)",
          "guided: paid refinement decisions",
          Argument(privtree_counts, "params", _quarter_decisions, "λ × ¼", when=("guided",),
                   only=RARE_DESCENT),
          (P16_REFINED,)),
        m("guided refinement decision budget (ε_s) × 4", "guided: paid refinement decisions",
          Argument("dpsynth.online.guided.refinement:privtree_params", "epsilon", four, "× 4"),
          (P16_REFINED,)),
        m("guided refinement count budget (ε − ε_s) × 4 (≡ its leaf noise × ¼)",
          "guided: paid refinement counts",
          Result("dpsynth.online.guided.pipeline:refined_partition", _counts_times_four,
                 "counts ε × 4 when refined"), (P16_REFINED,)),
        # -- the privacy unit "user" ---------------------------------------------------------
        m("user bound admits 4k (accounting sees k)", "user: contribution bound",
          Argument("dpsynth.online.users:ContributionBounds", "max_contributions",
                   lambda k: 4 * k, "× 4"),
          ("tests/unit/test_user_level.py::"
           "test_P15_records_over_the_bound_never_reach_a_release",)),
        m("bounding table counts 4k per user", "user: contribution bound",
          After("dpsynth.bounding.table:ContributionBounds.__init__",
                {"max_contributions": 4}),
          ("tests/unit/test_bounding.py::test_P15_the_first_k_records_of_each_user_count",)),
        # -- tabular ---------------------------------------------------------------------------
        m("measurement counter noise × ¼", "tabular: measurements",
          Draws(("tabular", "ctr")),
          (P12, "tests/statistical/test_tabular_shares.py::"
           "test_cyclic_measurements_carry_the_configured_noise")),
        m("measurement budget × 4 (handed to the counters)", "tabular: measurements",
          Argument("dpsynth.tabular.synthesizer:Counter", "epsilon", four, "× 4"), (P12,)),
        m("baseline measurement noise × ¼ (≡ its budget × 4)",
          "tabular: measurements (StreamingMWEM)", Draws(("tabular", "measure")), (P12,)),
        m("size counter noise × ¼", "tabular: size", Draws(("tabular", "size")), (P12,)),
        m("size counter budget × 4", "tabular: size",
          Argument("dpsynth.tabular.size:Counter", "epsilon", four, "× 4"), (P12,)),
        m("exponential mechanism budget × 4", "tabular: selection",
          Argument("dpsynth.tabular.selection:exponential_mechanism", "epsilon", four, "× 4",
                   everywhere=True),
          (OVERSPEND + "test_em_frequencies_fit_exp_eps_u_over_two_delta_computed_here",)),
        m("exponential mechanism sensitivity × ¼", "tabular: selection",
          After("dpsynth.tabular.synthesizer:TabularSynthesizer.__init__",
                {"em_sensitivity": 0.25}), (P12,)),
        # -- offline ---------------------------------------------------------------------------
        m("PMM level noise × ¼", "offline PMM: levels", Draws(("pmm", "level")),
          (OVERSPEND + "test_P7_pmm_draws_spend_at_most_epsilon",)),
        m("PMM level budget × 4", "offline PMM: levels",
          Argument("dpsynth.offline.pmm:pmm_scales", "epsilon", four, "× 4"),
          (OVERSPEND + "test_P7_pmm_draws_spend_at_most_epsilon",)),
        m("PMM size noise × ¼ (≡ its budget × 4)", "offline PMM: size (add/remove)",
          Draws(("pmm", "size")), (OVERSPEND + "test_P7_pmm_draws_spend_at_most_epsilon",)),
        m("PSMM cell noise × ¼ (≡ its budget × 4)", "offline PSMM: cells",
          Draws(("psmm", "cell")),
          (OVERSPEND + "test_P7b_psmm_draws_spend_at_most_epsilon",
           "tests/statistical/test_offline_psmm.py::"
           "test_noisy_total_has_the_calibrated_variance")),
        m("PSMM size noise × ¼ (≡ its budget × 4)", "offline PSMM: size (add/remove)",
          Draws(("psmm", "size")), (OVERSPEND + "test_P7b_psmm_draws_spend_at_most_epsilon",)),
        m("lowdim covariance noise × ¼ (≡ its budget × 4)", "offline lowdim: covariance",
          Draws(("lowdim", "cov")), (LOWDIM, "tests/statistical/test_offline_lowdim.py::"
                                    "test_covariance_noise_has_the_paper_scale")),
        m("lowdim mean noise × ¼ (≡ its budget × 4)", "offline lowdim: mean",
          Draws(("lowdim", "mean")), (LOWDIM, "tests/statistical/test_offline_lowdim.py::"
                                     "test_mean_noise_has_the_paper_scale")),
        m("lowdim synthesis (PMM on the projection) noise × ¼", "offline lowdim: synthesis",
          Draws(("lowdim", "pmm", "level")), (LOWDIM,)),
    )


MUTANTS = _mutants()
BY_NAME = {mutant.name: mutant for mutant in MUTANTS}
assert len(BY_NAME) == len(MUTANTS), "mutant names must be unique"
