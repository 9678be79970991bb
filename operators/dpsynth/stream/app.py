"""The worker: the Faust app around the partitions' state.

Layer: adapter, kept thin: the protocol lives in :mod:`dpsynth.stream.processor`, the partitions'
state (:class:`~dpsynth.stream.partitions.Operator`) in :mod:`dpsynth.stream.partitions`, the
input in :mod:`dpsynth.stream.intake`. Settings that matter, and why (``docs/operator.md`` has
the long form):

- input from a confluent-kafka consumer in one thread (:class:`~dpsynth.stream.intake.InputLoop`,
  ``read_committed``, static membership, batches): that thread owns every
  :class:`~dpsynth.stream.processor.PartitionProcessor`, so a partition's state is sequential
  and rebalance callbacks never race a batch; input offsets are committed to the group only
  inside the partition's release transactions (:mod:`dpsynth.stream.output`);
- one transactional producer per owned input partition (:class:`~dpsynth.stream.sink.
  TransactionalSink`, ``transactional.id`` from the run and the partition), created when the
  partition is assigned (fencing its previous owner) and closed when it is revoked;
- the Faust app runs the web server (``/metrics``, ``/healthz``, ``/readyz``) and the life cycle
  (signals, graceful stop); its own Kafka consumer and producer are not started (no agent, no
  Faust tables, no changelog topics): state is our own RocksDB database per partition
  (:mod:`dpsynth.stream.store`);
- a thread of its own (:mod:`dpsynth.stream.ticker`, with its own idempotent producer) writes
  one tick marker per owned input partition and ``DPSYNTH_TICK_SECONDS`` period
  (:mod:`dpsynth.stream.ticks`) into that partition, every period, however long the input
  thread's batches take: public time that replays see too.
"""

from __future__ import annotations

import asyncio
from typing import Any

import faust
from faust.app.base import BootStrategy
from mode import Service

from dpsynth.stream.intake import EXIT_FATAL, InputLoop
from dpsynth.stream.partitions import Operator
from dpsynth.stream.settings import WorkerConfig

__all__ = ["EXIT_FATAL", "create_app"]


class InputService(Service):
    """Runs the input thread with the Faust app: started after the web server, stopped first."""

    def __init__(self, intake: InputLoop, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.intake = intake

    async def on_start(self) -> None:
        """Start the tick marker writer and the consumer thread."""
        ticker = self.intake.operator.ticker
        if ticker is not None:
            ticker.start()
        self.intake.start()

    async def on_stop(self) -> None:
        """Let the thread finish its batch, commit offsets and leave; stop the markers; then
        close the state."""
        await asyncio.get_running_loop().run_in_executor(None, self.intake.stop)
        ticker = self.intake.operator.ticker
        if ticker is not None:
            await asyncio.get_running_loop().run_in_executor(None, ticker.stop)
        self.intake.operator.close()


def create_app(config: WorkerConfig, *, latest_partitions: int = 1, state_partitions: int = 1,
               output_partitions: int = 1, points_partitions: int = 1
               ) -> tuple[faust.App, Operator]:
    """The Faust app (web server, life cycle) and its :class:`Operator`, from ``config``
    (``*_partitions``: the output topics' partition counts)."""
    web_host: dict[str, Any] = ({"web_host": "127.0.0.1"} if config.web_bind.startswith("127.")
                                else {})
    app = faust.App(
        config.app_id,
        broker=config.faust_broker(),
        autodiscover=False,
        datadir=str(config.data_dir / "faust"),
        store="memory://",
        topic_allow_declare=False,
        web_enabled=True,
        web_port=config.web_port,
        web_bind=config.web_bind,
        **web_host,
    )
    # the input is our own consumer (intake.py): Faust's consumer and producer stay off
    app.boot_strategy = BootStrategy(app, enable_kafka=False)
    operator = Operator(config, latest_partitions=latest_partitions,
                        state_partitions=state_partitions, output_partitions=output_partitions,
                        points_partitions=points_partitions)
    app.add_dependency(InputService(InputLoop(config, operator)))

    def probe(web: Any, verdict: tuple[bool, str]) -> Any:
        ok, reason = verdict
        return web.text(f"{reason}\n", status=200 if ok else 503)

    @app.page("/metrics")
    async def metrics(web: Any, request: Any) -> Any:
        return web.text(operator.metrics.render(), content_type="text/plain; version=0.0.4")

    @app.page("/healthz")
    async def healthz(web: Any, request: Any) -> Any:
        return probe(web, operator.health.live())

    @app.page("/readyz")
    async def readyz(web: Any, request: Any) -> Any:
        return probe(web, operator.health.ready())

    return app, operator
