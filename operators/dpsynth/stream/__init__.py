"""The Kafka operator: a Faust worker that turns raw events into a stream of DP releases.

Layer: adapter. The only package that imports Faust, rocksdict and confluent-kafka (the core
never imports it, enforced by import-linter). One module per concern, declarations first:

===================  =========================================================================
module               owns
===================  =========================================================================
``settings``         :class:`WorkerConfig` (pydantic-settings) from ``DPSYNTH_*`` variables and
                     a JSON/TOML file
``codecs``           raw-event decoding (msgpack), dead-letter records, release record keys
``store``            :class:`PartitionStore`: one RocksDB per input partition, chunked snapshot +
                     watermark committed in one ``WriteBatch``
``processor``        :class:`PartitionProcessor`: skip ≤ watermark, decode, feed, produce, commit
``engines``          :class:`SynthesizerEngine`: any synthesizer of the contract (points or
                     tables, ``DPSYNTH_ENGINE``) as the processor drives it
``output``           a partition's pending output: one Kafka transaction per publish (releases,
                     latest view, dead letters, input offset)
``sink``             the confluent-kafka producers: one transactional per input partition,
                     one idempotent for tick markers
``topics``           the latest view's compacted topic (created when missing)
``points``           ``DPSYNTH_POINTS_FORMAT``: each release's points (Arrow IPC) beside it
``replay``           the replay reader of an input partition (state rebuilt without local state)
``metrics``          Prometheus text exposition of the operator's counters
``crash``            ``DPSYNTH_CRASH_AT``: deterministic self-SIGKILL points for crash tests
``ticks``            tick markers: public time written into each input partition (P11)
``ticker``           the tick marker writer: its own thread, producer and clock, every period
``phases``           the start-up phase lines of the log, with seconds since the process start
``runcheck``         the key check at start: one run id, one noise key (P13)
``app``              the Faust app: topics, the agent (concurrency 1), rebalance hooks, /metrics,
                     the tick-marker timer's life cycle
===================  =========================================================================

The commands (``dpsynth worker``, ``produce``, ``consume``) are in :mod:`dpsynth.cli`, the
consumer library in :mod:`dpsynth.client`, the test broker and helpers in :mod:`dpsynth.testing`.

Why the design is what it is (Faust tables not used; Kafka transactions of our own for the
output and the input offset, the RocksDB state committed after them and repaired by replay;
the latest view): ``docs/operator.md``.
"""

from __future__ import annotations
