package dev.dpsynth.reader;

import static dev.dpsynth.reader.Reason.*;

import java.math.BigInteger;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.ArrayList;
import java.util.HexFormat;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;

/**
 * Decodes and checks the records of exactly one release (schemas/README.md "Decoding one
 * release"): the checks run in the specified order and a refusal carries the specified
 * {@link Reason}, so this reader and Python's refuse the same records for the same reason.
 */
public final class ReleaseDecoder {
    /** Deepest release decoded by default (as Python's {@code MAX_DECODE_DEPTH}). */
    public static final int MAX_DECODE_DEPTH = 32;
    /** The format of tabular releases. */
    public static final String TABULAR_FORMAT = "tabular.v1";
    private static final int MAX_TREE_DEPTH = 63;
    private static final Set<String> POINT_HEADER = Set.of("kind", "format", "run_id",
            "partition", "sequence", "t", "depth", "d", "metadata", "placement_seed", "n_chunks",
            "leaf_encoding");
    private static final Set<String> POINT_CHUNK = Set.of("kind", "run_id", "partition",
            "sequence", "index", "cells", "counts");
    private static final Set<String> TABULAR_HEADER = Set.of("kind", "format", "run_id",
            "partition", "sequence", "step", "p", "n_rows", "width", "metadata", "n_chunks");
    private static final Set<String> TABULAR_CHUNK = Set.of("kind", "run_id", "partition",
            "sequence", "index", "rows");
    private static final Set<String> END = Set.of("kind", "run_id", "partition", "sequence",
            "n_chunks", "sha256");

    private ReleaseDecoder() {}

    /** A release of either format, told by its header's {@code format}. */
    public static Release decode(List<byte[]> records, int maxDepth)
            throws ReleaseFormatException {
        if (!records.isEmpty() && isTabular(records.get(0))) {
            return decodeTabular(records);
        }
        return decodePoints(records, maxDepth);
    }

    /** A release of format 1, at most {@link #MAX_DECODE_DEPTH} deep. */
    public static PointRelease decodePoints(List<byte[]> records) throws ReleaseFormatException {
        return decodePoints(records, MAX_DECODE_DEPTH);
    }

    /** A release of format 1 at most {@code maxDepth} deep. */
    public static PointRelease decodePoints(List<byte[]> records, int maxDepth)
            throws ReleaseFormatException {
        Iterator<byte[]> it = records.iterator();
        if (!it.hasNext()) {
            throw new ReleaseFormatException(TRUNCATED,
                    "no records: a release starts with a header record");
        }
        byte[] rawHeader = it.next();
        PointHeader header = pointHeader(rawHeader, maxDepth);
        MessageDigest digest = sha256(rawHeader);
        int width = header.depth <= 32 ? 4 : 8;
        List<long[]> cells = new ArrayList<>();
        List<long[]> counts = new ArrayList<>();
        long expected = 0;
        long lastCell = -1; // unsigned; -1 with none read yet
        boolean anyCell = false;
        long total = 0;
        boolean overflow = false;
        for (int position = 1; it.hasNext(); position++) {
            byte[] raw = it.next();
            String where = "record " + position;
            Map<Object, Object> rec = following(raw, where, header.key);
            if ("chunk".equals(rec.get("kind"))) {
                checkKeys(rec, POINT_CHUNK, where, 1);
                checkIndex(rec.get("index"), expected, header.nChunks, where);
                long index = expected;
                Object cellsRaw = rec.get("cells");
                Object countsRaw = rec.get("counts");
                if (!(cellsRaw instanceof byte[] cb) || !(countsRaw instanceof byte[] nb)) {
                    throw new ReleaseFormatException(BAD_CHUNK,
                            "chunk " + index + ": `cells` and `counts` must be bytes");
                }
                int n = nb.length / 8;
                if (n == 0 || nb.length != 8 * n || cb.length != (long) width * n) {
                    throw new ReleaseFormatException(BAD_CHUNK, "chunk " + index
                            + ": `cells` and `counts` must hold the same number (>= 1) of "
                            + width + "-byte cells and 8-byte counts");
                }
                long[] c = new long[n];
                long[] k = new long[n];
                ByteBuffer cbuf = ByteBuffer.wrap(cb).order(ByteOrder.LITTLE_ENDIAN);
                ByteBuffer nbuf = ByteBuffer.wrap(nb).order(ByteOrder.LITTLE_ENDIAN);
                for (int i = 0; i < n; i++) {
                    c[i] = width == 4 ? Integer.toUnsignedLong(cbuf.getInt()) : cbuf.getLong();
                    k[i] = nbuf.getLong();
                }
                if (Long.compareUnsigned(c[n - 1], 1L << header.depth) >= 0
                        && header.depth < 64) {
                    throw new ReleaseFormatException(BAD_CHUNK, "chunk " + index + ": cell "
                            + Long.toUnsignedString(c[n - 1]) + " must be below 2^depth");
                }
                boolean increasing = !anyCell || Long.compareUnsigned(c[0], lastCell) > 0;
                for (int i = 1; i < n && increasing; i++) {
                    increasing = Long.compareUnsigned(c[i], c[i - 1]) > 0;
                }
                if (!increasing) {
                    throw new ReleaseFormatException(BAD_CHUNK, "chunk " + index
                            + ": cells must increase strictly across the release (each leaf once)");
                }
                for (long count : k) {
                    if (count < 1 || count > header.t) {
                        // privacy: never name the offending count
                        throw new ReleaseFormatException(BAD_CHUNK, "chunk " + index
                                + ": counts must lie in [1, t] (non-zero leaves only)");
                    }
                    if (!overflow) {
                        try {
                            total = Math.addExact(total, count);
                        } catch (ArithmeticException e) {
                            overflow = true;
                        }
                    }
                }
                cells.add(c);
                counts.add(k);
                lastCell = c[n - 1];
                anyCell = true;
                expected++;
                digest.update(raw);
                continue;
            }
            checkEnd(rec, where, expected, header.nChunks, digest, 1);
            if (overflow || total != header.t) {
                throw new ReleaseFormatException(BAD_SUM,
                        "leaf counts must sum to t (" + header.t + ")");
            }
            if (it.hasNext()) {
                throw new ReleaseFormatException(TRAILING_RECORD,
                        "no record may follow the end record (" + where + ")");
            }
            return new PointRelease(header.key, header.t, header.depth, header.d,
                    header.metadata, header.seed, concat(cells), concat(counts));
        }
        throw new ReleaseFormatException(TRUNCATED, "records ended before the end record, after "
                + expected + " of " + header.nChunks + " chunks: the release is truncated");
    }

    /** A release of format {@code tabular.v1}. */
    public static TabularRelease decodeTabular(List<byte[]> records)
            throws ReleaseFormatException {
        Iterator<byte[]> it = records.iterator();
        if (!it.hasNext()) {
            throw new ReleaseFormatException(TRUNCATED,
                    "no records: a release starts with a header record");
        }
        byte[] rawHeader = it.next();
        TabularHeader header = tabularHeader(rawHeader);
        MessageDigest digest = sha256(rawHeader);
        List<byte[]> parts = new ArrayList<>();
        long expected = 0;
        for (int position = 1; it.hasNext(); position++) {
            byte[] raw = it.next();
            String where = "record " + position;
            Map<Object, Object> rec = following(raw, where, header.key);
            if ("chunk".equals(rec.get("kind"))) {
                checkKeys(rec, TABULAR_CHUNK, where, TABULAR_FORMAT);
                checkIndex(rec.get("index"), expected, header.nChunks, where);
                if (!(rec.get("rows") instanceof byte[] rows)) {
                    throw new ReleaseFormatException(BAD_CHUNK,
                            "chunk " + expected + ": `rows` must be bytes");
                }
                parts.add(rows);
                expected++;
                digest.update(raw);
                continue;
            }
            checkEnd(rec, where, expected, header.nChunks, digest, TABULAR_FORMAT);
            long size = 0;
            for (byte[] part : parts) {
                size += part.length;
            }
            long want;
            try {
                want = Math.multiplyExact(Math.multiplyExact(header.nRows, header.p),
                        header.width);
            } catch (ArithmeticException e) {
                want = -1;
            }
            if (size != want) {
                throw new ReleaseFormatException(BAD_SUM,
                        "chunks must hold exactly n_rows × p codes");
            }
            if (it.hasNext()) {
                throw new ReleaseFormatException(TRAILING_RECORD,
                        "no record may follow the end record");
            }
            ByteBuffer body = ByteBuffer.allocate((int) size).order(ByteOrder.LITTLE_ENDIAN);
            parts.forEach(body::put);
            body.flip();
            long[] rows = new long[(int) (header.nRows * header.p)];
            for (int i = 0; i < rows.length; i++) {
                rows[i] = switch (header.width) {
                    case 1 -> Byte.toUnsignedLong(body.get());
                    case 2 -> Short.toUnsignedLong(body.getShort());
                    default -> Integer.toUnsignedLong(body.getInt());
                };
            }
            return new TabularRelease(header.key, header.step, (int) header.p,
                    (int) header.nRows, header.width, header.metadata, rows);
        }
        throw new ReleaseFormatException(TRUNCATED,
                "records ended before the end record: the release is truncated");
    }

    // ---- headers ------------------------------------------------------------------------

    /** What the assembler needs of any header. */
    interface Header {
        ReleaseKey key();

        long nChunks();
    }

    record PointHeader(ReleaseKey key, long t, int depth, int d, Map<Object, Object> metadata,
                       byte[] seed, long nChunks) implements Header {}

    record TabularHeader(ReleaseKey key, long step, long p, long nRows, int width,
                         Map<Object, Object> metadata, long nChunks) implements Header {}

    static boolean isTabular(byte[] rawHeader) {
        try {
            return TABULAR_FORMAT.equals(Msgpack.map(rawHeader).get("format"));
        } catch (Msgpack.Malformed e) {
            return false;
        }
    }

    /** The header of either format (told by its {@code format}), checked. */
    static Header header(byte[] raw, int maxDepth) throws ReleaseFormatException {
        return isTabular(raw) ? tabularHeader(raw) : pointHeader(raw, maxDepth);
    }

    static PointHeader pointHeader(byte[] raw, int maxDepth) throws ReleaseFormatException {
        Map<Object, Object> rec = unpack(raw, "record 0");
        if (!"header".equals(rec.get("kind"))) {
            throw new ReleaseFormatException(MISSING_HEADER, "record 0 must be the header: a "
                    + "release starts with its header record (truncated at the front?)");
        }
        Object format = rec.get("format");
        if (!(format instanceof Long f) || f != 1) {
            throw new ReleaseFormatException(UNSUPPORTED_FORMAT, "header `format` (" + format
                    + ") must be 1: this reader reads release format 1 (and tabular.v1)");
        }
        if (!"sparse".equals(rec.get("leaf_encoding"))) {
            throw new ReleaseFormatException(UNSUPPORTED_FORMAT,
                    "header `leaf_encoding` must be 'sparse'");
        }
        checkKeys(rec, POINT_HEADER, "header", 1);
        ReleaseKey key = keyOf(rec, "header");
        Object depthValue = rec.get("depth");
        long limit = Math.min(maxDepth, MAX_TREE_DEPTH);
        if (!(depthValue instanceof Long depth) || depth < 0 || depth > limit) {
            boolean deeper = depthValue instanceof Long depth && depth > maxDepth
                    && depth <= MAX_TREE_DEPTH;
            throw new ReleaseFormatException(deeper ? DEPTH_LIMIT : BAD_HEADER, "header `depth` ("
                    + depthValue + ") must be an integer in [0, " + limit
                    + "]; raise maxDepth to decode deeper releases");
        }
        long t = fieldInt(rec, "t", 0);
        long d = fieldInt(rec, "d", 1);
        long nChunks = fieldInt(rec, "n_chunks", 0);
        if (depth < 63 && nChunks > (1L << depth)) {
            throw new ReleaseFormatException(BAD_HEADER,
                    "header `n_chunks` (" + nChunks + ") must be at most 2^depth");
        }
        if (!(rec.get("metadata") instanceof Map<?, ?> metadata)
                || !(metadata.get("d") instanceof Long md) || md != d) {
            throw new ReleaseFormatException(BAD_HEADER,
                    "header `metadata` must be a map whose 'd' equals the header's d (" + d + ")");
        }
        if (!(rec.get("placement_seed") instanceof byte[] seed)) {
            throw new ReleaseFormatException(BAD_HEADER, "header `placement_seed` must be bytes");
        }
        if (d > Integer.MAX_VALUE) { // a Java array limit; Python reads it and fails later
            throw new ReleaseFormatException(BAD_HEADER, "header `d` is too large for this reader");
        }
        return new PointHeader(key, t, (int) (long) depth, (int) d, mapOf(metadata), seed,
                nChunks);
    }

    static TabularHeader tabularHeader(byte[] raw) throws ReleaseFormatException {
        Map<Object, Object> rec = unpack(raw, "record 0");
        if (!"header".equals(rec.get("kind"))) {
            throw new ReleaseFormatException(MISSING_HEADER,
                    "record 0 must be the header (truncated at the front?)");
        }
        if (!TABULAR_FORMAT.equals(rec.get("format"))) {
            throw new ReleaseFormatException(UNSUPPORTED_FORMAT, "header `format` ("
                    + rec.get("format") + ") must be 'tabular.v1'; point releases are read "
                    + "with decodePoints");
        }
        checkKeys(rec, TABULAR_HEADER, "header", TABULAR_FORMAT);
        ReleaseKey key = keyOf(rec, "header");
        long step = fieldInt(rec, "step", 0);
        long p = fieldInt(rec, "p", 1);
        long nRows = fieldInt(rec, "n_rows", 0);
        long nChunks = fieldInt(rec, "n_chunks", 0);
        Object width = rec.get("width");
        if (!(width instanceof Long w) || (w != 1 && w != 2 && w != 4)
                || !(rec.get("metadata") instanceof Map<?, ?> metadata)) {
            throw new ReleaseFormatException(BAD_HEADER,
                    "header `width` must be 1, 2 or 4 and `metadata` a map");
        }
        return new TabularHeader(key, step, p, nRows, (int) (long) w, mapOf(metadata), nChunks);
    }

    // ---- shared checks ------------------------------------------------------------------

    static Map<Object, Object> unpack(byte[] raw, String where) throws ReleaseFormatException {
        try {
            return Msgpack.map(raw);
        } catch (Msgpack.Malformed e) {
            throw new ReleaseFormatException(UNDECODABLE, where + " " + e.getMessage());
        }
    }

    static ReleaseKey keyOf(Map<Object, Object> rec, String where)
            throws ReleaseFormatException {
        if (!(rec.get("run_id") instanceof String runId) || runId.isEmpty()) {
            throw new ReleaseFormatException(BAD_IDENTITY,
                    where + ": `run_id` must be a non-empty string");
        }
        long[] values = new long[2];
        String[] names = {"partition", "sequence"};
        for (int i = 0; i < 2; i++) {
            if (!(rec.get(names[i]) instanceof Long v) || v < 0) {
                throw new ReleaseFormatException(BAD_IDENTITY,
                        where + ": `" + names[i] + "` must be an integer in [0, 2^63)");
            }
            values[i] = v;
        }
        return new ReleaseKey(runId, values[0], values[1]);
    }

    /** A record after the header: decoded, its kind chunk or end, of the header's release. */
    private static Map<Object, Object> following(byte[] raw, String where, ReleaseKey key)
            throws ReleaseFormatException {
        Map<Object, Object> rec = unpack(raw, where);
        Object kind = rec.get("kind");
        if ("header".equals(kind)) {
            throw new ReleaseFormatException(UNEXPECTED_HEADER, where
                    + " is a second header before the end record: truncated or mixed");
        }
        if (!"chunk".equals(kind) && !"end".equals(kind)) {
            throw new ReleaseFormatException(BAD_KIND,
                    where + " `kind` must be 'header', 'chunk' or 'end'");
        }
        ReleaseKey own = keyOf(rec, where);
        if (!own.equals(key)) {
            throw new ReleaseFormatException(MIXED, where + " belongs to " + own + ", not to "
                    + key + ": records of different releases are mixed");
        }
        return rec;
    }

    private static void checkIndex(Object value, long expected, long nChunks, String where)
            throws ReleaseFormatException {
        if (!(value instanceof Long index) || index < 0) {
            throw new ReleaseFormatException(BAD_CHUNK,
                    where + ": chunk `index` must be an integer in [0, 2^63)");
        }
        if (index < expected) {
            throw new ReleaseFormatException(DUPLICATE_CHUNK,
                    "chunk " + index + " appears twice (" + where + ")");
        }
        if (index >= nChunks) {
            throw new ReleaseFormatException(EXTRA_CHUNK,
                    "chunk index (" + index + ") must be below n_chunks (" + nChunks + ")");
        }
        if (index != expected) {
            throw new ReleaseFormatException(REORDERED, "chunk index (" + index + ") must be "
                    + expected + " at " + where + ": chunk " + expected
                    + " is missing or out of order");
        }
    }

    private static void checkEnd(Map<Object, Object> rec, String where, long read, long nChunks,
                                 MessageDigest digest, Object format)
            throws ReleaseFormatException {
        checkKeys(rec, END, where, format);
        if (read != nChunks || !(rec.get("n_chunks") instanceof Long n) || n != nChunks) {
            throw new ReleaseFormatException(MISSING_CHUNKS, "end record after " + read + " of "
                    + nChunks + " chunks: chunks are missing");
        }
        String actual = HexFormat.of().formatHex(digest.digest());
        if (!(rec.get("sha256") instanceof String sha)
                || !MessageDigest.isEqual(sha.getBytes(java.nio.charset.StandardCharsets.UTF_8),
                        actual.getBytes(java.nio.charset.StandardCharsets.UTF_8))) {
            throw new ReleaseFormatException(BAD_CHECKSUM, "sha256 of the header and chunks "
                    + "must match the end record's checksum: corrupted or tampered with");
        }
    }

    static void checkKeys(Map<Object, Object> rec, Set<String> expected, String where,
                          Object format) throws ReleaseFormatException {
        if (!rec.keySet().equals(expected)) {
            Set<String> missing = new TreeSet<>(expected);
            missing.removeAll(rec.keySet());
            List<String> unknown = new ArrayList<>();
            for (Object k : rec.keySet()) {
                if (!expected.contains(k)) {
                    unknown.add(String.valueOf(k));
                }
            }
            throw new ReleaseFormatException(BAD_KEYS, where + ": keys must be exactly those of "
                    + "format " + format + " (missing " + missing + ", unknown " + unknown + ")");
        }
    }

    private static long fieldInt(Map<Object, Object> rec, String name, long low)
            throws ReleaseFormatException {
        if (!(rec.get(name) instanceof Long v) || v < low) {
            throw new ReleaseFormatException(BAD_HEADER,
                    "header `" + name + "` must be an integer in [" + low + ", 2^63)");
        }
        return v;
    }

    static boolean isInt(Object value) {
        return value instanceof Long || value instanceof BigInteger;
    }

    @SuppressWarnings("unchecked")
    private static Map<Object, Object> mapOf(Map<?, ?> map) {
        return java.util.Collections.unmodifiableMap((Map<Object, Object>) map);
    }

    private static MessageDigest sha256(byte[] first) {
        try {
            MessageDigest digest = MessageDigest.getInstance("SHA-256");
            digest.update(first);
            return digest;
        } catch (NoSuchAlgorithmException e) {
            throw new IllegalStateException("SHA-256 is missing from this JDK", e);
        }
    }

    private static long[] concat(List<long[]> parts) {
        int size = 0;
        for (long[] part : parts) {
            size = Math.addExact(size, part.length);
        }
        long[] out = new long[size];
        int at = 0;
        for (long[] part : parts) {
            System.arraycopy(part, 0, out, at, part.length);
            at += part.length;
        }
        return out;
    }
}
