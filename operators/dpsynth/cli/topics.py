"""``dpsynth topics``: the commands that manage and copy topics.

Layer: adapter. The group only; each sub-command lives in its own module: ``create``
(:mod:`dpsynth.cli.topics_create`) makes the worker's three topics, ``export`` and ``import``
(:mod:`dpsynth.cli.topics_io`) copy a topic to a recording and back, ``match-letter``
(:mod:`dpsynth.cli.topics_letters`) finds a message's dead letter with the run's key.
"""

from __future__ import annotations

import click

from dpsynth.cli.topics_create import create
from dpsynth.cli.topics_io import export, import_
from dpsynth.cli.topics_letters import match_letter


@click.group()
def topics() -> None:
    """Topics: create the worker's topics; export a topic to a recording, import one back;
    find a message's dead letter."""


topics.add_command(create)
topics.add_command(export)
topics.add_command(import_)
topics.add_command(match_letter)
