"""stream/sink.py without a broker: the bound on blocking client calls."""

from __future__ import annotations

import threading

import pytest

from dpsynth.stream.sink import DeliveryError, bounded_call


def test_a_call_that_does_not_return_gives_up_the_producer() -> None:
    """librdkafka#5456: send_offsets_to_transaction may block past its timeout; the worker
    must get a DeliveryError (rejoin with a new producer) instead of stalling."""
    release = threading.Event()
    try:
        with pytest.raises(DeliveryError, match="did not return"):
            bounded_call(lambda: release.wait(60), 0.2, "stuck call")
    finally:
        release.set()  # the helper thread ends


def test_a_call_that_returns_or_raises_is_transparent() -> None:
    seen: list[int] = []
    bounded_call(lambda: seen.append(1), 30, "quick call")
    assert seen == [1]

    def fails() -> None:
        raise KeyError("the call's own error")

    with pytest.raises(KeyError, match="own error"):
        bounded_call(fails, 30, "failing call")
