"""The neighbour audit of the worker at the privacy unit "user" (issue 16, docs/privacy.md P15).

As tests/privacy/test_audit_worker.py (20 samples: 5 worker runs × 4 partitions per input), on
D with a heavy user and a lone user alone in the last step (docs: dpsynth.audit.users) and its
user-level neighbours — every record of the heaviest user removed, or the lone user removed so
that its step is empty (add/remove); the heavy user's records moved (replace). The worker runs with
DPSYNTH_PRIVACY_UNIT=user, k = 4, at user-level ε = 1; every message is keyed by its user with
an id that Kafka's default partitioner sends to the message's partition (the worker checks it).
False alarm of a deterministic difference (ε = 1, 20 samples): ≤ 3.6e-6 per field.
"""

from __future__ import annotations

import pytest

from dpsynth.audit.runner import audit_entry, audit_keys
from dpsynth.audit.worker import worker_entry

pytestmark = [pytest.mark.kafka, pytest.mark.privacy]

SAMPLES = 20


@pytest.mark.parametrize("notion", ["replace", "add_remove"])
def test_P15_worker_passes_the_user_level_neighbour_audit(kafka_bootstrap: str,
                                                          notion: str) -> None:
    report = audit_entry(worker_entry(notion, lambda: kafka_bootstrap, unit="user"),
                         audit_keys(SAMPLES))
    assert report.passed, "\n".join(report.lines())
    assert not report.broken and report.bounds


def test_P15_the_audited_worker_counts_the_heavy_user_k_times(kafka_bootstrap: str) -> None:
    """The audit above is not vacuous: the worker's releases on D are the embedded
    synthesizer's (same number, same sizes), so every keyed message was counted, the heavy
    user k times — none dead-lettered for its partition."""
    from dpsynth.audit.entries import AUDIT_EPSILON, AUDIT_MAX_DEPTH
    from dpsynth.audit.inputs import PER_STEP
    from dpsynth.audit.users import AUDIT_K, LONE_RECORDS, user_input
    from dpsynth.online.synthesizer import OnlineSynthesizer

    data = user_input()
    key = audit_keys(1)[0]
    (output,), = worker_entry("add_remove", lambda: kafka_bootstrap, replicates=1,
                              unit="user").outputs([data], [key])
    synth = OnlineSynthesizer(2, AUDIT_EPSILON, key, PER_STEP, "auto", AUDIT_MAX_DEPTH,
                              neighbours="add_remove", privacy_unit="user",
                              max_contributions=AUDIT_K)
    expected = []
    for step, users in zip(data.steps, data.users or (), strict=True):
        synth.add(step, users=list(users))
        expected.append(synth.step())
    # the light users' records, the heavy user's first k and the lone user's records
    assert synth.t == 120 + AUDIT_K + LONE_RECORDS
    assert [(r.t, r.leaf_counts.tolist()) for r in output.view] == \
        [(r.t, r.leaf_counts.tolist()) for r in expected]
    assert output.view[-1].metadata["max_contributions"] == AUDIT_K
