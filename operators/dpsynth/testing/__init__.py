"""Test kit shipped with dpsynth (``pip install dpsynth[testing]``): a broker, recorded topics,
and the pytest plugin built on them.

Layer: adapter. :mod:`~dpsynth.testing.broker` starts a real single-node KRaft broker (an
existing one, a container, or Apache Kafka's jars fetched by Maven);
:mod:`~dpsynth.testing.recordings` fills a fresh topic from a recording (the bundled example of
a synthetic topic by default) and reads its merged synthetic dataset back through the consumer
library; :mod:`~dpsynth.testing.plugin` makes both pytest fixtures; :mod:`~dpsynth.testing.kafka`
creates topics, produces records, reads topics and runs a worker process.
"""

from __future__ import annotations
