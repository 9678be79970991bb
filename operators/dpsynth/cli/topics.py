"""``dpsynth topics``: the worker's Kafka topics (``create``; see :mod:`dpsynth.cli.topics_create`).

Layer: adapter. The group only; each sub-command lives in its own module.
"""

from __future__ import annotations

import click

from dpsynth.cli.topics_create import create


@click.group()
def topics() -> None:
    """The worker's topics: raw events in, releases and dead letters out."""


topics.add_command(create)
