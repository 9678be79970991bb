"""Where ``dpsynth view`` reads releases: a synthetic topic, or a folder of release files.

Layer: adapter. A follower is a daemon thread that hands every checked, first-seen release to a
:class:`~dpsynth.view.state.ViewState`: :class:`TopicFollower` reads the topic through
:class:`~dpsynth.client.ReleaseConsumer` (``read_committed``, checksums, duplicates dropped);
:class:`FolderFollower` reads the ``release-*.bin`` files that ``dpsynth run`` writes
(atomically, so a file is never seen half written) through the same
:class:`~dpsynth.client.ReleaseTracker`. Both only read.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any

from dpsynth.client import ReleaseConsumer, ReleaseTracker
from dpsynth.release import ReleaseIncompleteError, read_release_records
from dpsynth.view.state import ViewState

log = logging.getLogger(__name__)


class Follower(threading.Thread):
    """A daemon thread calling :meth:`step` until :meth:`stop`; errors are shown, not fatal."""

    def __init__(self, state: ViewState, interval_s: float) -> None:
        super().__init__(name=f"dpsynth-view-{type(self).__name__}", daemon=True)
        self.state = state
        self.interval_s = interval_s
        self._stop_event = threading.Event()

    def run(self) -> None:
        try:
            while not self._stop_event.is_set():
                try:
                    self.step()
                except Exception as e:  # noqa: BLE001 - shown on the page, retried
                    log.warning("dpsynth view: reading failed (%s); retrying", e)
                    self.state.set_counts(rejected=self.state.rejected, error=str(e))
                    self._stop_event.wait(max(self.interval_s, 1.0))
        finally:
            self.close()

    def step(self) -> None:
        """Read what is new (at most ``interval_s`` waiting)."""
        raise NotImplementedError

    def close(self) -> None:
        """Release what the follower holds."""

    def stop(self, timeout_s: float = 10.0) -> None:
        """Stop and wait for the thread."""
        self._stop_event.set()
        if self.is_alive():
            self.join(timeout_s)


class TopicFollower(Follower):
    """Releases of a synthetic topic, from its beginning, as they arrive."""

    def __init__(self, state: ViewState, bootstrap: str, topic: str, *,
                 run_id: str | None = None, interval_s: float = 0.25,
                 config: dict[str, Any] | None = None) -> None:
        super().__init__(state, interval_s)
        # fetch.wait.max.ms: a new release is handed over within a fraction of a page poll
        self.consumer = ReleaseConsumer(bootstrap, topic, run_id=run_id, config={
            "fetch.wait.max.ms": int(interval_s * 1000), **(config or {})})

    def step(self) -> None:
        for event in self.consumer.poll(self.interval_s):
            self.state.add(event.key, event.release)
        self.state.set_counts(rejected=self.consumer.rejected)

    def close(self) -> None:
        self.consumer.close()


class FolderFollower(Follower):
    """Release files ``release-*.bin`` of a folder (``dpsynth run``'s OUT/releases), rescanned
    every ``interval_s``; a file is read once."""

    def __init__(self, state: ViewState, folder: Path, *, run_id: str | None = None,
                 interval_s: float = 0.25) -> None:
        super().__init__(state, interval_s)
        self.folder = folder
        self.tracker = ReleaseTracker(run_id=run_id)
        self.read: set[str] = set()

    def step(self) -> None:
        for path in sorted(self.folder.glob("release-*.bin")):
            if path.name in self.read:
                continue
            self.read.add(path.name)
            try:
                records = read_release_records(path)
            except (OSError, ReleaseIncompleteError) as e:
                log.warning("dpsynth view: %s cannot be read (%s)", path.name, e)
                self.tracker.rejected += 1
                continue
            for record in records:
                event = self.tracker.add(None, record)
                if event is not None:
                    self.state.add(event.key, event.release)
        self.state.set_counts(rejected=self.tracker.rejected)
        self._stop_event.wait(self.interval_s)
