"""RocksDB details of the partition store: options, chunk hashes and the chunk comparison.

Layer: adapter (rocksdict). Kept apart from :mod:`dpsynth.stream.store` (which owns the layout
and the commit) so that each module stays one concept.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import rocksdict

#: Chunks at least this large live in RocksDB blob files: compactions then move 30-byte
#: references instead of rewriting every 256 KiB chunk again and again.
MIN_BLOB_BYTES = 4096


def rocksdb_options(block_cache_bytes: int, write_buffer_bytes: int) -> rocksdict.Options:
    """A small block cache and write buffer (Faust's defaults: 2 GiB and 3 × 64 MiB), a bloom
    filter for the per-user counts, blob files for the chunks."""
    options = rocksdict.Options(raw_mode=True)
    options.create_if_missing(True)
    options.set_write_buffer_size(int(write_buffer_bytes))
    options.set_max_write_buffer_number(2)
    options.set_max_open_files(64)
    table = rocksdict.BlockBasedOptions()
    table.set_block_cache(rocksdict.Cache(int(block_cache_bytes)))
    # the per-user counts (privacy unit "user") are mostly looked up for users never seen:
    # a bloom filter (10 bits a key, ~1 % false positives) answers those without a read
    table.set_bloom_filter(10, False)
    options.set_memtable_whole_key_filtering(True)
    options.set_memtable_prefix_bloom_ratio(0.1)
    options.set_block_based_table_factory(table)
    options.set_enable_blob_files(True)
    options.set_min_blob_size(MIN_BLOB_BYTES)
    options.set_enable_blob_gc(True)
    return options


def chunk_hash(data: bytes | memoryview) -> bytes:
    """BLAKE2b-256 of one chunk: an integrity check, about twice as fast as SHA-256 here."""
    return hashlib.blake2b(data, digest_size=32).digest()


def diff_chunks(
    snapshot: bytes, previous: bytes, previous_hashes: Sequence[bytes], step: int
) -> tuple[list[bytes], list[int]]:
    """Hashes of every chunk of ``snapshot`` and the indices of the chunks that changed.

    A chunk equal (byte for byte) to the previous snapshot's chunk keeps its stored hash;
    only changed chunks are hashed.
    """
    hashes: list[bytes] = []
    changed: list[int] = []
    for index, offset in enumerate(range(0, len(snapshot), step)):
        chunk = snapshot[offset:offset + step]
        if index < len(previous_hashes) and previous[offset:offset + step] == chunk:
            hashes.append(previous_hashes[index])
        else:
            hashes.append(chunk_hash(chunk))
            changed.append(index)
    return hashes, changed
