"""``dpsynth view``: a local, read-only web page that follows a synthetic topic or a release folder.

Layer: adapter (standard library HTTP server; :mod:`dpsynth.client` to read). The page shows,
live, the latest release of each input partition and their merge as heat maps in the schema's
units (column names and bounds on the axes), the release size over time and the public privacy
metadata (ε, neighbour notion, unit, mechanism, key fingerprint). Modules:
:mod:`~dpsynth.view.state` (the model and its JSON), :mod:`~dpsynth.view.sources` (the topic and
folder followers), :mod:`~dpsynth.view.server` (the HTTP server), ``static/`` (the page).
"""

from __future__ import annotations

from dpsynth.view.server import ViewServer
from dpsynth.view.sources import FolderFollower, TopicFollower
from dpsynth.view.state import ViewState

__all__ = ["FolderFollower", "TopicFollower", "ViewServer", "ViewState"]
