"""``dpsynth topics``: the commands that manage and copy topics.

Layer: adapter. ``export`` and ``import`` (:mod:`dpsynth.cli.topics_io`) copy a topic to a
recording and back.
"""

from __future__ import annotations

import click

from dpsynth.cli.topics_io import export, import_


@click.group()
def topics() -> None:
    """Topics: export a topic to a recording, import a recording into a topic."""


topics.add_command(export)
topics.add_command(import_)
