"""The default mechanism's pipeline (dpsynth.online.guided.pipeline): the stages it declares are
the stages ``guided`` runs, in that order; each switchable stage, off, changes a release only
where it acts; with none off, the releases are the goldens (issue 45)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
import pytest

from dpsynth.errors import ConfigError
from dpsynth.online import steps
from dpsynth.online.guided import GuidedMechanism, pipeline
from dpsynth.online.guided.pipeline import (
    CLOSED_BLOCK_STAGES,
    RELEASE_STAGES,
    STAGES,
    SUMMARY_STAGES,
)
from dpsynth.online.synthesizer import OnlineSynthesizer
from dpsynth.release import encode_release
from tests.regression.test_golden_releases import ONLINE, _golden

KEY = bytes(range(32))

#: The function each stage's function calls, by which a run shows that the stage ran.
CALLS = {"partition": (pipeline, "guided_partition"),
         "refinement": (pipeline, "refined_partition"),
         "counts": (pipeline, "noisy_leaf_counts"),
         "node_reuse": (pipeline, "combined_counts"),
         "floors": (pipeline, "floored_counts"),
         "local_mass": (pipeline, "locally_placed"),
         "sum": (pipeline, "pooled_parts"),
         "em": (pipeline, "em_steps"),
         "tilt": (pipeline, "tilted_density"),
         "rounding": (steps, "round_density")}


def _points(n: int, d: int, seed: int = 0) -> np.ndarray:
    """Two blobs, one drifting (public test data)."""
    rng = np.random.default_rng(seed)
    centre = np.full((n, d), 0.3)
    centre[::2, 0] = np.linspace(0.2, 0.8, n)[::2]
    return np.clip(centre + rng.normal(0.0, 0.05, (n, d)), 0.0, 1.0)


def _run(d: int, epsilon: float, neighbours: str, disabled: Iterable[str] = (),
         n: int = 1200, steps_: int = 20) -> list[bytes]:
    """The encoded releases of a guided run with ``disabled`` stages off."""
    synth = OnlineSynthesizer(d, epsilon, KEY, 400, neighbours=neighbours, mechanism="guided")
    mech = synth._mechanism
    assert isinstance(mech, GuidedMechanism)
    mech.disable(disabled)
    x = _points(n, d)
    out = []
    for chunk in np.array_split(x, steps_):
        synth.add(chunk)
        release = synth.step()
        out += encode_release(release, run_id="t", partition=0,
                              sequence=int(release.metadata["sequence"]))
    return out


def test_every_stage_is_declared_once_with_its_privacy_argument() -> None:
    names = [s.name for s in (*SUMMARY_STAGES, *CLOSED_BLOCK_STAGES, *RELEASE_STAGES)]
    assert len(names) == len(set(names)) == len(STAGES) == len(CALLS)
    for stage in STAGES.values():
        assert stage.claim and stage.buys
        assert stage.privacy.startswith("post-processing") or "budget" in stage.privacy
    # what spends budget: the counts (never switchable) and the refinement (its share goes back
    # to the counts when it is off: the summary's ε, and the accounting, unchanged)
    spending = {s.name for s in STAGES.values() if "budget" in s.privacy}
    assert spending == {"refinement", "counts"}
    assert not STAGES["counts"].switchable
    assert set(pipeline.switchable_stages()) == {"refinement", "node_reuse", "floors",
                                                 "local_mass", "em", "tilt"}


def test_only_switchable_stages_can_be_switched_off() -> None:
    for name in ("counts", "partition", "sum", "rounding", "no_such"):
        with pytest.raises(ConfigError, match="cannot be switched off"):
            pipeline.checked_disabled([name])


@pytest.mark.parametrize(("d", "epsilon", "neighbours"), [(2, 1.0, "add_remove"),
                                                          (2, 200.0, "replace")])
def test_the_mechanism_runs_the_stages_in_the_declared_order(
        d: int, epsilon: float, neighbours: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Real runs, each stage's function noted on the way: every summary runs the summary stages
    in their order, every release the release stages in theirs, and every stage runs."""
    seen: list[str] = []

    def spy(name: str, real: Callable[..., Any]) -> Callable[..., Any]:
        def noted(*args: Any, **kwargs: Any) -> Any:
            seen.append(name)
            return real(*args, **kwargs)
        return noted

    for name, (module, attribute) in CALLS.items():
        monkeypatch.setattr(module, attribute, spy(name, getattr(module, attribute)))
    _run(d, epsilon, neighbours)
    assert set(seen) == set(STAGES)
    # closed blocks are read lazily (a release, or a step's history guide): set them aside
    closed = [s.name for s in CLOSED_BLOCK_STAGES]
    order = [name for name in seen if name not in closed]
    summaries = [s.name for s in SUMMARY_STAGES]
    releases = [s.name for s in RELEASE_STAGES]
    runs: list[list[str]] = []
    for name in order:  # each run starts with its pipeline's first stage
        if name in (summaries[0], releases[0]):
            runs.append([])
        runs[-1].append(name)
    for run in runs:
        declared = summaries if run[0] == summaries[0] else releases
        optional = {"node_reuse"}  # only where children measured the records too
        assert run == [s for s in declared if s in run], run
        assert set(declared) - set(run) <= optional, run


#: (d, ε, notion) → the switchable stages that change this run's releases when off. Never the
#: refinement below a summary ε of 32, nor local mass at d = 1 (they do not run there); the
#: others where this stream gives them something to do (these runs: observed, then pinned).
ACTS = {(1, 0.3, "add_remove"): {"node_reuse", "floors", "em", "tilt"},
        (2, 1.0, "add_remove"): {"node_reuse", "floors", "local_mass", "em", "tilt"},
        (2, 200.0, "replace"): {"refinement", "em", "tilt"}}


def test_every_switchable_stage_acts_in_a_case() -> None:
    assert set().union(*ACTS.values()) == set(pipeline.switchable_stages())


@pytest.mark.parametrize("case", sorted(ACTS))
def test_a_stage_switched_off_changes_the_releases_only_where_it_acts(
        case: tuple[int, float, str]) -> None:
    d, epsilon, neighbours = case
    default = _run(d, epsilon, neighbours)
    assert _run(d, epsilon, neighbours, disabled=()) == default
    for name in pipeline.switchable_stages():
        off = _run(d, epsilon, neighbours, disabled=[name])
        assert len(off) == len(default)
        changed = off != default
        assert changed == (name in ACTS[case]), (name, changed)


@pytest.mark.parametrize("name", ["online/d2/guided/add_remove",
                                  "online/d2/guided/add_remove/eps10",
                                  "online/d2/guided/replace/eps200"])
def test_with_every_stage_on_the_releases_are_the_goldens(name: str) -> None:
    assert ONLINE[name]() == _golden()[name]
