"""Liveness and readiness verdicts of the worker (``/healthz``, ``/readyz``)."""

from __future__ import annotations

from dpsynth.stream.health import Health


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_loop_that_stops_polling_is_not_live():
    clock = Clock()
    h = Health(60.0, now=clock)
    clock.now = 59.0
    assert h.live()[0]  # starting counts as activity
    clock.now = 61.0
    live, reason = h.live()
    assert not live and "not polled" in reason


def test_an_idle_worker_without_lag_stays_live_and_a_stuck_one_with_lag_does_not():
    clock = Clock()
    h = Health(60.0, now=clock)
    for t in range(0, 600, 10):  # polls every 10 s, processes nothing, no lag
        clock.now = float(t)
        h.polled()
        h.lag(0)
        assert h.live() == (True, "ok")
    h.lag(3)  # input arrives and is never processed
    clock.now = 700.0
    h.polled()
    assert not h.live()[0]
    h.progressed()
    assert h.live()[0]


def test_ready_needs_an_assignment_and_liveness():
    clock = Clock()
    h = Health(60.0, now=clock)
    assert h.ready() == (False, "waiting for the consumer group to assign partitions")
    h.assigned(True)
    assert h.ready() == (True, "ok")
    clock.now = 100.0
    assert not h.ready()[0]
    h.assigned(False)
    h.polled()
    assert not h.ready()[0]
