"""dpsynth view in a real headless Chromium (Debian's chromium and chromium-driver, driven by
selenium with the system chromedriver: no browser is downloaded).

For a synthetic topic on the test broker (2 input partitions) and for a release folder: the page
loads; each partition's latest release shows; a new release shows within ``POLLS`` polls of
the page after the server has it (else the page is stale); the heat maps' axes carry the
schema's column names and bounds (read from the DOM); every heat map is not blank (the pixel
spread of its screenshot). ``DPSYNTH_VIEW_SCREENSHOT=docs/img/dpsynth-view.png`` also saves the
page (``make view-screenshot``). Skipped, naming the packages, where Chromium is not installed;
``.ci/run`` installs it.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest

from dpsynth.datasets import drifting_blobs
from dpsynth.online.synthesizer import OnlineSynthesizer
from dpsynth.release import encode_release, write_release_file
from dpsynth.schema import Schema
from dpsynth.stream.codecs import release_record_key
from dpsynth.testing.kafka import TEST_KEY_HEX, create_topics, produce_messages, unique_topics
from dpsynth.view import FolderFollower, TopicFollower, ViewServer, ViewState

SCHEMA = Schema.from_dict({"version": 1, "columns": [
    {"name": "lon", "lower": -74.3, "upper": -73.7},
    {"name": "lat", "lower": 40.5, "upper": 40.95}]})
KEY = bytes.fromhex(TEST_KEY_HEX)
RELEASE_EVERY, FIRST = 2000, 4  # FIRST releases per partition before the page loads
POLLS = 3  # a release the server has shows within this many polls: the one in flight, the next
POLL_MS = 250
CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--no-first-run",
                  "--window-size=1280,1300")


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """Headless Chromium through the system chromedriver, with a fresh profile."""
    paths = {name: shutil.which(name) for name in ("chromium", "chromedriver")}
    if None in paths.values():
        pytest.skip("dpsynth view's browser test needs Debian's packages chromium "
                    "chromium-driver: apt-get install chromium chromium-driver (.ci/run does)")
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium (pip: dpsynth[dev])")
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = paths["chromium"]
    for flag in (*CHROMIUM_FLAGS, f"--user-data-dir={tmp_path_factory.mktemp('chromium')}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(paths["chromedriver"]), options=options)
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()


class Stream:
    """Releases of two input partitions (their points: drifting blobs, two seeds)."""

    def __init__(self) -> None:
        self.synths = {p: OnlineSynthesizer(d=2, epsilon=1.0, key=KEY, partition=p,
                                            release_every=RELEASE_EVERY) for p in (0, 1)}
        self.points = {p: drifting_blobs(RELEASE_EVERY * (FIRST + 1), 7 + p) for p in (0, 1)}

    def next_release(self, p: int) -> object:
        synth = self.synths[p]
        start = synth.t
        (release,) = synth.extend(self.points[p][start:start + RELEASE_EVERY])
        return release


def _wait(predicate: Callable[[], object], failure: str, timeout_s: float = 60.0) -> object:
    deadline = time.monotonic() + timeout_s  # a hang guard, never a timing assertion
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"{failure} (waited {timeout_s:g} s)")


def _served_sequence(url: str, partition: int) -> int:
    with urllib.request.urlopen(url + "api/state", timeout=10) as response:  # noqa: S310
        document = json.loads(response.read())
    return next((p["sequence"] for p in document["partitions"] if p["partition"] == partition), 0)


def _pixels(png: bytes) -> np.ndarray:
    from PIL import Image

    return np.asarray(Image.open(io.BytesIO(png)).convert("RGB"), dtype=np.float64)


def _check_page(driver: object, url: str, publish_next: Callable[[int], None]) -> None:
    """The page's content, then one live update (see the module docstring)."""
    driver.get(url)
    sequences = ("return [...document.querySelectorAll('#maps figure')].map("
                 "f => [f.dataset.partition, f.dataset.sequence || null])")
    _wait(lambda: sorted(map(tuple, driver.execute_script(sequences))) == [
        ("0", str(FIRST)), ("1", str(FIRST)), ("merged", None)],
        f"the page never showed sequence {FIRST} of partitions 0 and 1")
    figures = driver.find_elements("css selector", "#maps figure.heat")
    for figure in figures:  # axes from the DOM: the schema's names and bounds
        text = {cls: figure.find_element("css selector", "." + cls).text for cls in (
            "axis-x", "axis-y")}
        ticks = [span.text for span in figure.find_elements("css selector", ".ticks-x span")]
        ticks += [span.text for span in figure.find_elements("css selector", ".ticks-y span")]
        assert text == {"axis-x": "lon", "axis-y": "lat"}, text
        assert ticks == ["-74.3", "-73.7", "40.95", "40.5"], ticks
        pixels = _pixels(figure.find_element("css selector", "canvas").screenshot_as_png)
        pixels = pixels[3:-3, 3:-3]  # inside the canvas' border
        colours = len(np.unique(pixels.reshape(-1, 3), axis=0))
        assert pixels.std() > 10 and colours > 16, (
            f"heat map {figure.get_attribute('id')} is blank: pixel spread {pixels.std():.1f}, "
            f"{colours} colours")
    cells = driver.execute_script(  # one call: the table is redrawn with every poll
        "return [...document.querySelectorAll(\"#privacy tr[data-partition='0'] td\")]"
        ".map(td => td.textContent)")
    assert cells[3:5] == ["1", "replace"] and cells[7] == OnlineSynthesizer(
        d=2, epsilon=1.0, key=KEY, release_every=1).release().metadata["key_fingerprint"], cells

    publish_next(0)
    _wait(lambda: _served_sequence(url, 0) == FIRST + 1,
          f"the view's server never had sequence {FIRST + 1}: the view is stale")
    now = ("return [+document.body.dataset.polls, "
           "document.querySelector('#heat-p0').dataset.sequence]")
    polls_then = driver.execute_script(now)[0]
    polls, shown = _wait(lambda: (state := driver.execute_script(now)) and (
        state[1] == str(FIRST + 1) or state[0] > polls_then + POLLS) and state,
        "the page stopped polling")
    assert shown == str(FIRST + 1) and polls - polls_then <= POLLS, (
        f"stale: sequence {FIRST + 1} not shown within {POLLS} polls of its arrival "
        f"({polls - polls_then} polls later the page shows {shown})")
    releases = driver.find_element("css selector", "#size polyline[data-partition='0']")
    assert releases.get_attribute("data-releases") == str(FIRST + 1)
    if os.environ.get("DPSYNTH_VIEW_SCREENSHOT"):
        driver.save_screenshot(os.environ["DPSYNTH_VIEW_SCREENSHOT"])


@pytest.mark.kafka
def test_the_page_follows_a_topic(browser, kafka_bootstrap):
    topic = unique_topics("view").output
    create_topics(kafka_bootstrap, {topic: 2})
    stream = Stream()

    def records(p: int) -> list[tuple[None, bytes, bytes]]:
        release = stream.next_release(p)
        key = release_record_key("view-run", p, release.sequence)
        return [(None, r, key) for r in encode_release(
            release, run_id="view-run", partition=p, sequence=release.sequence)]

    def publish(p: int) -> None:
        produce_messages(kafka_bootstrap, topic, records(p))

    produce_messages(kafka_bootstrap, topic, [r for _ in range(FIRST) for p in (0, 1)
                                              for r in records(p)])
    state = ViewState(f"topic {topic}", schema=SCHEMA, poll_ms=POLL_MS)
    follower = TopicFollower(state, kafka_bootstrap, topic, interval_s=0.1)
    server = ViewServer(state).start()
    follower.start()
    try:
        _check_page(browser, server.url, publish)
    finally:
        server.close()
        follower.stop()


def test_the_page_follows_a_release_folder(browser, tmp_path: Path):
    stream = Stream()

    def publish(p: int) -> None:
        release = stream.next_release(p)
        path = tmp_path / f"release-p{p}-{release.sequence:06d}.bin"
        write_release_file(path, encode_release(release, run_id="view-run", partition=p,
                                                sequence=release.sequence))

    for _ in range(FIRST):
        publish(0)
        publish(1)
    state = ViewState(f"folder {tmp_path}", schema=SCHEMA, poll_ms=POLL_MS)
    follower = FolderFollower(state, tmp_path, interval_s=0.05)
    server = ViewServer(state).start()
    follower.start()
    try:
        _check_page(browser, server.url, publish)
    finally:
        server.close()
        follower.stop()
