"""dpsynth view without a browser: the state document, the folder follower, the read-only
server on 127.0.0.1 (the page itself: tests/integration/test_view_browser.py)."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from dpsynth.cli import main
from dpsynth.online.synthesizer import OnlineSynthesizer
from dpsynth.release import Release, ReleaseKey, encode_release, write_release_file
from dpsynth.schema import Schema
from dpsynth.view import FolderFollower, ViewServer, ViewState

ROOT = Path(__file__).resolve().parents[2]
LATLON = Schema.from_json_file(ROOT / "schemas" / "example-schema.json")


def _centre(cells: dict[int, int], depth: int, sequence: int) -> Release:
    counts = np.zeros(1 << depth, np.int64)
    for cell, count in cells.items():
        counts[cell] = count
    return Release(t=int(counts.sum()), depth=depth, leaf_counts=counts,
                   metadata={"d": 2, "sequence": sequence, "placement": "centre",
                             "epsilon": 0.5, "neighbours": "add_remove",
                             "schedule": "adaptive", "key_fingerprint": "ab" * 8})


def test_heat_maps_count_points_on_the_schema_bounds():
    state = ViewState("test", schema=LATLON, bins=2)
    # depth 2, d 2: cell 0 is (x low, y low), cell 3 (x high, y high); x = lat, y = lon
    state.add(ReleaseKey("r", 0, 1), _centre({0: 3, 3: 1}, 2, 1))
    state.add(ReleaseKey("r", 1, 4), _centre({1: 2}, 2, 4))
    state.add(ReleaseKey("r", 1, 2), _centre({3: 9}, 2, 2))  # older: history only
    doc = json.loads(state.to_json())
    assert [c["name"] for c in doc["columns"]] == ["lat", "lon"] and doc["axes"] == [0, 1]
    by_partition = {p["partition"]: p for p in doc["partitions"]}
    assert by_partition[0]["heat"] == [3, 0, 0, 1]  # rows from the lowest lon: [lat bins]
    # Morton cell 1: first bit x (lat) low, second bit y (lon) high
    assert by_partition[1]["sequence"] == 4 and by_partition[1]["heat"] == [0, 0, 2, 0]
    assert doc["merged"] == {"t": 6, "partitions": 2, "heat": [3, 0, 2, 1]}
    assert [(h["partition"], h["sequence"], h["t"]) for h in doc["history"]] == [
        (0, 1, 4), (1, 4, 2), (1, 2, 9)]
    assert by_partition[1]["privacy"] == {
        "epsilon": 0.5, "neighbours": "add_remove", "privacy_unit": "record",
        "mechanism": "adaptive", "key_fingerprint": "ab" * 8, "max_contributions": None,
        "worst_case_loss": None}


def test_without_a_schema_the_axes_are_unit_coordinates():
    state = ViewState("test", bins=4, axes=("x1", "x0"))
    state.add(ReleaseKey("r", 0, 1), _centre({1: 5}, 2, 1))
    doc = json.loads(state.to_json())
    assert doc["units"] is False and doc["axes"] == [1, 0]
    assert doc["columns"] == [{"name": "x0", "lower": 0.0, "upper": 1.0},
                              {"name": "x1", "lower": 0.0, "upper": 1.0}]
    assert sum(doc["partitions"][0]["heat"]) == 5


def _write_run(folder: Path, n: int, release_every: int, start: int = 0) -> list[Release]:
    synth = OnlineSynthesizer(d=2, epsilon=1.0, key=bytes(32), release_every=release_every)
    out = []
    for release in synth.extend(np.random.default_rng(0).random((n, 2))):
        if release.sequence > start:
            write_release_file(folder / f"release-{release.sequence:06d}.bin", encode_release(
                release, run_id="run-v", partition=0, sequence=release.sequence))
            out.append(release)
    return out


def _get(url: str, **headers: str) -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(url, headers=headers)  # noqa: S310 - 127.0.0.1 only
    try:
        with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as e:
        with e:
            return e.code, dict(e.headers), e.read()


def _wait(predicate, what: str, timeout_s: float = 30.0):
    deadline = time.monotonic() + timeout_s  # a hang guard, not a timing assertion
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"{what} within {timeout_s} s")


def test_the_server_follows_a_folder_and_only_reads(tmp_path):
    releases = tmp_path / "releases"
    releases.mkdir()
    _write_run(releases, 3000, 1000)
    state = ViewState("folder", schema=LATLON, bins=16, poll_ms=200)
    follower = FolderFollower(state, releases, interval_s=0.05)
    server = ViewServer(state).start()
    follower.start()
    try:
        assert server.url.startswith("http://127.0.0.1:")
        doc = _wait(lambda: (d := json.loads(_get(server.url + "api/state")[2]))["partitions"]
                    and d["partitions"][0]["sequence"] == 3 and d, "release 3 not served")
        assert doc["partitions"][0]["t"] == 3000 == sum(doc["partitions"][0]["heat"])
        _write_run(releases, 5000, 1000, start=3)  # the run goes on: releases 4 and 5
        _wait(lambda: json.loads(_get(server.url + "api/state")[2])["partitions"][0]["sequence"]
              == 5, "release 5 not served")
        status, headers, page = _get(server.url)
        assert status == 200 and b'src="view.js"' in page
        assert headers["Cache-Control"] == "no-store" and "default-src 'self'" in headers[
            "Content-Security-Policy"]
        assert _get(server.url + "view.js")[0] == 200
        assert _get(server.url + "../schema.json")[0] == 404
        assert _get(server.url + "api/state", Host="attacker.example:80")[0] == 421
        request = urllib.request.Request(server.url + "api/state", data=b"{}",  # noqa: S310
                                         method="POST")
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=10)  # noqa: S310
        refused.value.close()
        assert refused.value.code == 405
    finally:
        follower.stop()
        server.close()


def test_the_command_binds_loopback_by_default_and_checks_its_options(tmp_path):
    options = {o.name: o for o in main.get_command(None, "view").params}
    assert options["bind"].default == "127.0.0.1"
    runner = CliRunner()
    assert "give --topic" in runner.invoke(main, ["view"]).output
    result = runner.invoke(main, ["view", "--folder", str(tmp_path), "--schema",
                                  str(ROOT / "schemas" / "example-schema.json"),
                                  "--axes", "lat,altitude"])
    assert result.exit_code == 2 and "name one or two columns" in result.output
