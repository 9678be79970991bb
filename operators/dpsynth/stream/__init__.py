"""The Kafka operator: a Faust worker that turns raw events into a stream of DP releases.

Layer: adapter. The only package that imports Faust, rocksdict and confluent-kafka (the core
never imports it, enforced by import-linter). One module per concern, declarations first:

===================  =========================================================================
module               owns
===================  =========================================================================
``config``           :class:`WorkerConfig` from ``DPSYNTH_*`` variables and a JSON/TOML file
``codecs``           raw-event decoding (msgpack), dead-letter records, release record keys
``store``            :class:`PartitionStore`: one RocksDB per input partition, chunked snapshot +
                     watermark committed in one ``WriteBatch``
``processor``        :class:`PartitionProcessor`: skip ≤ watermark, decode, feed, produce, commit
``engine``           :class:`Engine`, what the processor needs of a synthesizer; the point engine
``tabular_engine``   ``DPSYNTH_ENGINE=tabular``: paper 003's synthesizer per partition, its settings
``sink``             the confluent-kafka producer of releases and dead letters, and the replay
                     reader of an input partition
``metrics``          Prometheus text exposition of the operator's counters
``crash``            ``DPSYNTH_CRASH_AT``: deterministic self-SIGKILL points for crash tests
``app``              the Faust app: topics, the agent (concurrency 1), rebalance hooks, /metrics
``commands``         the ``worker`` click command (``python -m dpsynth.stream worker``)
``commands_io``      ``dpsynth produce`` and ``dpsynth consume``
``broker``           a local single-node KRaft broker for tests and local use
``consumer``         the consumer library: reassembled, de-duplicated releases and their merge
``testing``          helpers for tests and benchmarks (topics, producing, the worker subprocess)
``testing_tabular``  the same for the tabular engine (domain file, embedded releases, checker)
===================  =========================================================================

Why the design is what it is (Faust tables not used, at-least-once + de-duplication instead of
Kafka transactions, replay on a partition without local state): ``docs/operator.md``.
"""

from __future__ import annotations
