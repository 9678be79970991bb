"""The key check at start (docs/privacy.md P13): one run id, one key fingerprint."""

from __future__ import annotations

import msgpack
import numpy as np
import pytest

from dpsynth.errors import ConfigError
from dpsynth.online.synthesizer import OnlineSynthesizer
from dpsynth.release import encode_release
from dpsynth.stream import runcheck
from dpsynth.stream.runcheck import check_run_key, foreign_fingerprint


def _records(key: bytes, run_id: str) -> list[tuple[bytes, bytes]]:
    synth = OnlineSynthesizer(2, 1.0, key, 20)
    release = synth.extend(np.random.default_rng(0).random((20, 2)))[0]
    values = encode_release(release, run_id=run_id, partition=0, sequence=1)
    return [(f"{run_id}/0/1".encode(), v) for v in values]


def test_P13_another_fingerprint_under_the_same_run_id_is_found():
    mine, other = bytes(range(32)), bytes(32)
    fp_mine = OnlineSynthesizer(2, 1.0, mine, 20).metadata()["key_fingerprint"]
    fp_other = OnlineSynthesizer(2, 1.0, other, 20).metadata()["key_fingerprint"]
    topic = _records(mine, "run-a") + _records(other, "run-b") + [(b"run-a/0/2", b"\xc1")]
    assert foreign_fingerprint(topic, "run-a", fp_mine) is None  # run-b is another run
    assert foreign_fingerprint(topic, "run-b", fp_mine) == fp_other
    assert foreign_fingerprint([(None, None), (b"run-a/x", msgpack.packb([1]))], "run-a",
                               fp_mine) is None


def test_P13_the_check_names_the_fix_and_never_the_key(monkeypatch):
    other = bytes(32)
    monkeypatch.setattr(runcheck, "_tail", lambda *a: iter(_records(other, "run-a")))
    with pytest.raises(ConfigError) as error:
        check_run_key("unused:9", "out", "run-a", "f" * 16, records=100)
    text = str(error.value)
    assert "DPSYNTH_RUN_ID ('run-a')" in text and "new DPSYNTH_RUN_ID" in text
    assert "ε again" in text and other.hex() not in text
    check_run_key("unused:9", "out", "run-a", "f" * 16, records=0)  # disabled: no read
