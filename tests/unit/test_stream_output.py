"""A partition's output without a broker: one transaction per publish, and the latest view.

The sink is the test kit's in-memory broker with Kafka's transaction semantics
(tests/support/embedded.py). The latest view is checked as compaction leaves it: the newest
value of every key, tombstones dropped — what a late subscriber of the compacted topic reads.
"""

from __future__ import annotations

import numpy as np
import pytest

from dpsynth.release import ReleaseAssembler, decode_release
from dpsynth.stream.output import Output, Topics, latest_key
from dpsynth.stream.processor import InputMessage, PartitionProcessor
from dpsynth.stream.sink import TransactionAborted
from dpsynth.stream.store import PartitionStore
from dpsynth.testing.kafka import encode_records, records_of
from tests.support.embedded import MemorySink, embedded_release_records
from tests.support.processor import point_config

TOPICS = Topics("out", "dead", "out-latest", latest_partitions=2)


def _output(sink, *, interval=0.0, latest_records=0, partition=3):
    """An Output whose "releases" are lists of records (encode returns them as they are)."""
    return Output(run_id="r", partition=partition, topics=TOPICS, sink=sink,
                  encode=lambda release: (release[0], release[1]),
                  history_key=lambda s: f"r/{partition}/{s}".encode(), linger_s=0.0,
                  latest_interval_s=interval, latest_records=latest_records)


def compacted(sink: MemorySink, topic: str) -> dict[bytes, bytes]:
    """What compaction leaves of ``topic``: the newest value per key, without tombstones."""
    newest: dict[bytes, bytes | None] = {}
    for key, value in sink.delivered.get(topic, []):
        newest[key] = value
    return {k: v for k, v in newest.items() if v is not None}


def test_one_transaction_holds_releases_dead_letters_the_latest_view_and_the_offset():
    sink = MemorySink()
    out = _output(sink)
    out.add_release((1, [b"h1", b"c1", b"e1"]), 0.0, 0.0)
    out.add_release((2, [b"h2", b"c2", b"e2"]), 0.0, 0.0)
    out.add_dead_letter(b"raw/3/17", b"letter")
    assert out.publish(18)
    assert (sink.transactions, sink.group_offset) == (1, 18)
    assert sink.delivered["out"] == [(b"r/3/1", v) for v in (b"h1", b"c1", b"e1")] + [
        (b"r/3/2", v) for v in (b"h2", b"c2", b"e2")]
    assert sink.delivered["dead"] == [(b"raw/3/17", b"letter")]
    # only the newest release of the transaction, one key per record, partition 3 mod 2
    assert sink.delivered["out-latest"] == [(latest_key("r", 3, i), v)
                                            for i, v in enumerate((b"h2", b"c2", b"e2"))]
    assert set(sink.partitions["out-latest"]) == {1}
    assert not out.publish(None)  # nothing left: no empty transaction


def test_a_shorter_release_deletes_the_positions_beyond_it():
    sink = MemorySink()
    out = _output(sink)
    out.add_release((1, [b"h1", b"a", b"b", b"c", b"e1"]), 0.0, 0.0)
    out.publish(None)
    out.add_release((2, [b"h2", b"x", b"e2"]), 0.0, 0.0)
    out.publish(None)
    assert sink.delivered["out-latest"][-2:] == [(latest_key("r", 3, 3), None),
                                                 (latest_key("r", 3, 4), None)]
    view = compacted(sink, "out-latest")
    assert [view[latest_key("r", 3, i)] for i in range(3)] == [b"h2", b"x", b"e2"]
    assert len(view) == 3  # nothing of release 1 survives compaction
    out.add_release((3, [b"h3", b"y", b"z", b"e3"]), 0.0, 0.0)
    out.publish(None)  # longer again: no tombstone needed
    assert sink.delivered["out-latest"][-1] == (latest_key("r", 3, 3), b"e3")


def test_the_latest_view_waits_its_interval_then_gets_the_newest_release():
    sink = MemorySink()
    out = _output(sink, interval=3600.0)
    out.add_release((1, [b"h1", b"e1"]), 0.0, 0.0)
    out.publish(None)  # the first write is due at once
    out.add_release((2, [b"h2", b"e2"]), 0.0, 0.0)
    out.publish(None)
    out.add_release((3, [b"h3", b"e3"]), 0.0, 0.0)
    out.publish(None)
    assert [v for _, v in sink.delivered["out-latest"]] == [b"h1", b"e1"]
    assert out.latest_due(now=float("inf")) and not out.latest_due()
    out.publish(None, latest=True)  # when due: a transaction of its own
    assert [v for _, v in sink.delivered["out-latest"]][2:] == [b"h3", b"e3"]
    assert len(sink.delivered["out"]) == 6


def test_replayed_releases_are_dropped_but_counted_for_the_tombstones():
    sink = MemorySink()
    out = _output(sink, latest_records=2)  # the state knew a 2-record release
    out.add_release((5, [b"h5", b"a", b"b", b"c", b"e5"]), 0.0, 0.0)  # published before a crash
    out.add_release((6, [b"h6", b"a", b"e6"]), 0.0, 0.0)
    out.discard()
    assert sink.sent == [] and not out.pending
    assert out.latest_records == 5
    out.publish(None)  # the newest dropped release goes to the latest view again
    assert compacted(sink, "out-latest") == {latest_key("r", 3, i): v
                                             for i, v in enumerate((b"h6", b"a", b"e6"))}
    assert len(sink.delivered["out-latest"]) == 5  # 3 records, tombstones for positions 3, 4


class _AbortingSink(MemorySink):
    """Aborts the first ``n`` commits, as a broker that timed the transaction out."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.n = n

    def commit(self, offset: int | None) -> None:
        if self.n:
            self.n -= 1
            self.abort()
            raise TransactionAborted("the coordinator aborted it")
        super().commit(offset)


def test_an_aborted_transaction_is_sent_again_whole():
    sink = _AbortingSink(2)
    out = _output(sink)
    out.add_release((1, [b"h1", b"c1", b"e1"]), 0.0, 0.0)
    out.add_dead_letter(b"k", b"v")
    out.publish(4)
    assert (sink.aborted, sink.transactions, sink.group_offset) == (2, 1, 4)
    assert [v for _, v in sink.delivered["out"]] == [b"h1", b"c1", b"e1"]  # once
    assert len(sink.uncommitted("out")) == 9  # three attempts on the broker, two aborted
    assert out.metrics.get("transactions_aborted", 3) == 2


@pytest.mark.parametrize("max_chunk", [1024, 8192])
def test_the_processor_keeps_the_newest_release_whole_in_the_latest_view(tmp_path, max_chunk):
    """Releases growing from 1 to several chunks: compaction keeps exactly the last one."""
    config = point_config(tmp_path, DPSYNTH_RELEASE_EVERY="200", DPSYNTH_LATEST_INTERVAL_S="0",
                          DPSYNTH_RELEASE_MAX_RECORD_BYTES=str(max_chunk))
    points = np.random.default_rng(5).random((2000, 2))
    messages = [InputMessage(offset=k, value=encode_records(records_of(points[i:i + 100])))
                for k, i in enumerate(range(0, 2000, 100))]
    sink = MemorySink()
    store = PartitionStore(config.data_dir / "p0", partition=0, run_id="test-run", sync=False)
    proc = PartitionProcessor(config, 0, store=store, sink=sink)
    for i in range(0, len(messages), 2):
        proc.process(messages[i:i + 2])
    proc.commit()
    proc.close()
    view = compacted(sink, config.latest_topic_name)
    expected = embedded_release_records(points, epsilon=1.0, release_every=200, max_depth=10,
                                        run_id="test-run", partition=0, max_chunk_bytes=max_chunk)
    last = expected[max(expected)]
    assert [view[latest_key("test-run", 0, i)] for i in range(len(last))] == last
    assert len(view) == len(last)
    assembler = ReleaseAssembler()
    done = [assembler.add(v) for v in view.values()]
    assert done[-1] == decode_release(last) and done.count(None) == len(last) - 1


@pytest.mark.parametrize("partition", [4, 5])
def test_every_record_of_an_input_partition_goes_to_its_output_partition(tmp_path, partition):
    """Input partition p: its releases on synthetic partition p mod 3, their points on p mod 2,
    the latest view on p mod 4 — never placed by the key (issue 46): one partition each, so
    any consumer receives the releases in sequence order."""
    config = point_config(tmp_path, DPSYNTH_RELEASE_EVERY="300", DPSYNTH_LATEST_INTERVAL_S="0",
                          DPSYNTH_POINTS_FORMAT="arrow")
    points = np.random.default_rng(6).random((1500, 2))
    messages = [InputMessage(offset=k, value=encode_records(records_of(points[i:i + 100])))
                for k, i in enumerate(range(0, 1500, 100))]
    sink = MemorySink()
    store = PartitionStore(config.data_dir / "p", partition=partition, run_id="test-run",
                           sync=False)
    proc = PartitionProcessor(config, partition, store=store, sink=sink, latest_partitions=4,
                              output_partitions=3, points_partitions=2)
    for i in range(0, len(messages), 3):
        proc.process(messages[i:i + 3])
        proc.commit()
    proc.close()
    where = {config.output_topic: partition % 3, config.points_topic: partition % 2,
             config.latest_topic_name: partition % 4}
    for topic, expected in where.items():
        assert sink.delivered[topic], topic
        assert set(sink.partitions[topic]) == {expected}, topic
    sequences = [int(key.rsplit(b"/", 1)[1]) for key, _ in sink.delivered[config.output_topic]]
    assert sequences == sorted(sequences) and sequences[-1] == 5
