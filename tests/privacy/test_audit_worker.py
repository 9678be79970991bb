"""The neighbour audit of the worker through a real broker (issue 13 item 5, P14).

20 samples per notion: 5 worker runs (5 distinct keys), each reading one input topic whose
partitions hold D and every neighbour D′ four times (a sample is a (key, partition) pair; the
partition enters every noise context, docs/privacy.md P14 argues why that is as good as a
distinct key). Steps are tick markers of the run written into the input, so they are public
time and the same on every run. False alarm of a deterministic difference (ε = 1, 20 samples):
≤ 3.6e-6 per field.
"""

from __future__ import annotations

import pytest

from dpsynth.audit.runner import audit_entry, audit_keys
from dpsynth.audit.worker import worker_entry

pytestmark = [pytest.mark.kafka, pytest.mark.privacy]

SAMPLES = 20


@pytest.mark.parametrize("notion", ["replace", "add_remove"])
def test_P14_worker_passes_the_neighbour_audit(kafka_bootstrap: str, notion: str) -> None:
    report = audit_entry(worker_entry(notion, lambda: kafka_bootstrap), audit_keys(SAMPLES))
    assert report.passed, "\n".join(report.lines())
