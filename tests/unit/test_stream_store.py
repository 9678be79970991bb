"""The partition state store: atomic commits, only changed chunks written, corruption caught."""

from __future__ import annotations

import os

import pytest

rocksdict = pytest.importorskip("rocksdict")

from dpsynth.errors import ConfigError, StateCorruptError  # noqa: E402
from dpsynth.stream.store import PartitionStore, _chunk_key  # noqa: E402

CHUNK = 4096


def _store(path, **kwargs):
    return PartitionStore(path, partition=3, run_id="unit", chunk_bytes=CHUNK, sync=False,
                          **kwargs)


def _raw(path):
    """The database opened directly, as an attacker or a disk fault would see it."""
    return rocksdict.Rdict(str(path), rocksdict.Options(raw_mode=True))


def test_empty_store_loads_nothing(tmp_path):
    with _store(tmp_path / "db") as store:
        assert store.load() is None
        assert store.manifest() is None


def test_commit_then_load_round_trips_snapshot_and_watermark(tmp_path):
    snapshot = os.urandom(10 * CHUNK + 123)
    with _store(tmp_path / "db") as store:
        stats = store.commit(snapshot, watermark=99, t=1234, sequence=7, config={"d": 2})
    assert (stats.chunks_total, stats.chunks_written) == (11, 11)
    assert stats.snapshot_bytes == len(snapshot)
    with _store(tmp_path / "db") as store:
        state = store.load()
    assert state.snapshot == snapshot
    assert (state.watermark, state.t, state.sequence, state.config) == (99, 1234, 7, {"d": 2})


def test_only_changed_chunks_are_written(tmp_path):
    first = bytearray(os.urandom(8 * CHUNK))
    with _store(tmp_path / "db") as store:
        store.commit(bytes(first), watermark=1, t=1, sequence=0, config={})
        second = bytearray(first)
        second[2 * CHUNK + 5] ^= 0xFF  # chunk 2
        second[7 * CHUNK] ^= 0xFF  # chunk 7
        stats = store.commit(bytes(second), watermark=2, t=2, sequence=0, config={})
        assert (stats.chunks_written, stats.chunks_total) == (2, 8)
        assert stats.bytes_written < 3 * CHUNK  # two chunks and the manifest
        unchanged = store.commit(bytes(second), watermark=3, t=3, sequence=0, config={})
        assert unchanged.chunks_written == 0
    with _store(tmp_path / "db") as store:  # a reopened store diffs against what is on disk
        state = store.load()
        assert state.snapshot == bytes(second) and state.watermark == 3
        third = bytearray(second)
        third[0] ^= 1
        assert store.commit(bytes(third), watermark=4, t=4, sequence=0,
                            config={}).chunks_written == 1


def test_a_shorter_snapshot_deletes_trailing_chunks(tmp_path):
    with _store(tmp_path / "db") as store:
        store.commit(os.urandom(6 * CHUNK), watermark=1, t=1, sequence=0, config={})
        short = os.urandom(2 * CHUNK + 10)
        store.commit(short, watermark=2, t=2, sequence=0, config={})
    db = _raw(tmp_path / "db")
    try:
        assert db.get(_chunk_key(3)) is None and db.get(_chunk_key(5)) is None
        assert db.get(_chunk_key(2)) is not None
    finally:
        db.close()
    with _store(tmp_path / "db") as store:
        assert store.load().snapshot == short


def test_a_failed_commit_leaves_the_previous_commit_whole(tmp_path):
    old = os.urandom(5 * CHUNK)
    with _store(tmp_path / "db") as store:
        store.commit(old, watermark=10, t=10, sequence=1, config={})

        class FailingDb:
            def __init__(self, db):
                self.db = db

            def write(self, batch, options):
                raise OSError("disk full")

            def __getattr__(self, name):
                return getattr(self.db, name)

        real = store._db
        store._db = FailingDb(real)
        with pytest.raises(OSError):
            store.commit(os.urandom(5 * CHUNK), watermark=20, t=20, sequence=2, config={})
        store._db = real
    with _store(tmp_path / "db") as store:
        state = store.load()
    assert (state.snapshot, state.watermark, state.sequence) == (old, 10, 1)


@pytest.mark.parametrize(("damage", "message"), [
    ("flip", "chunk 1 of 3 fails its hash check"),
    ("delete", "chunk 2 of 3 is missing"),
    ("manifest", "the manifest cannot be decoded"),
])
def test_corruption_is_detected_and_names_the_fix(tmp_path, damage, message):
    with _store(tmp_path / "db") as store:
        store.commit(os.urandom(3 * CHUNK), watermark=5, t=5, sequence=0, config={})
    db = _raw(tmp_path / "db")
    try:
        if damage == "flip":
            chunk = bytearray(db[_chunk_key(1)])
            chunk[100] ^= 0x01
            db[_chunk_key(1)] = bytes(chunk)
        elif damage == "delete":
            del db[_chunk_key(2)]
        else:
            db[b"manifest"] = b"\xc1not msgpack"
    finally:
        db.close()
    with _store(tmp_path / "db") as store, pytest.raises(StateCorruptError) as info:
        store.load()
    assert message in str(info.value)
    assert "delete that directory" in str(info.value)
    assert "replaying its input from offset 0" in str(info.value)


def test_a_store_of_another_run_or_partition_is_refused(tmp_path):
    with _store(tmp_path / "db") as store:
        store.commit(b"x" * 10, watermark=0, t=1, sequence=0, config={})
    other = PartitionStore(tmp_path / "db", partition=3, run_id="other", chunk_bytes=CHUNK)
    try:
        with pytest.raises(ConfigError, match="belongs to run 'unit' partition 3"):
            other.load()
    finally:
        other.close()


def test_two_openers_of_one_database_get_a_clear_error(tmp_path):
    with _store(tmp_path / "db"), pytest.raises(ConfigError, match="locked by another process"):
        _store(tmp_path / "db")


def test_a_changed_chunk_size_rewrites_everything_and_still_loads(tmp_path):
    data = os.urandom(4 * CHUNK)
    with _store(tmp_path / "db") as store:
        store.commit(data, watermark=1, t=1, sequence=0, config={})
    with PartitionStore(tmp_path / "db", partition=3, run_id="unit", chunk_bytes=2 * CHUNK,
                        sync=False) as store:
        assert store.load().snapshot == data
        stats = store.commit(data, watermark=2, t=2, sequence=0, config={})
        assert (stats.chunks_total, stats.chunks_written) == (2, 2)
        assert store.load().snapshot == data
