package dev.dpsynth.reader;

import static dev.dpsynth.reader.Reason.*;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.HashSet;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Set;
import java.util.TreeMap;

/**
 * Reassembles releases from the records of many releases interleaved, retried and replayed, as
 * a consumer of the synthetic topic meets them (schemas/README.md "Assembling releases from a
 * topic"): every release is returned once, complete and checked; duplicates are dropped by
 * (run_id, partition, sequence); a refused release is discarded and may still come through
 * complete later. Reads format 1 and tabular.v1 releases (Python's assembler reads format 1).
 * Not thread-safe.
 */
public final class ReleaseAssembler {
    private final int maxPending;
    private final int remember;
    private final int maxDepth;
    private final LinkedHashMap<ReleaseKey, Pending> pending = new LinkedHashMap<>();
    private final Map<RunPartition, Seen> seen = new HashMap<>();

    /** With the defaults: 1024 open releases, 4096 remembered sequences, depth 32. */
    public ReleaseAssembler() {
        this(1024, 4096, ReleaseDecoder.MAX_DECODE_DEPTH);
    }

    /**
     * @param maxPending releases open at once before the oldest is evicted
     * @param remember assembled sequences remembered per (run, partition)
     * @param maxDepth deepest point release accepted
     */
    public ReleaseAssembler(int maxPending, int remember, int maxDepth) {
        if (maxPending < 1 || remember < 1) {
            throw new IllegalArgumentException("maxPending and remember must be >= 1");
        }
        this.maxPending = maxPending;
        this.remember = remember;
        this.maxDepth = maxDepth;
    }

    private record RunPartition(String runId, long partition) {}

    private static final class Seen {
        long floor = -1; // every sequence <= floor counts as assembled
        Set<Long> sequences = new HashSet<>();
    }

    private static final class Pending {
        final byte[] headerRaw;
        final ReleaseDecoder.Header header;
        final Map<Long, byte[]> chunks = new TreeMap<>();

        Pending(byte[] headerRaw, ReleaseDecoder.Header header) {
            this.headerRaw = headerRaw;
            this.header = header;
        }
    }

    /** Keys of the releases begun but not complete, oldest first. */
    public List<ReleaseKey> pending() {
        return List.copyOf(pending.keySet());
    }

    /**
     * Takes one record; returns the release it completes, if any.
     *
     * @throws ReleaseFormatException when the record is refused, or refuses its release
     */
    public Optional<Release> add(byte[] record) throws ReleaseFormatException {
        Map<Object, Object> rec = ReleaseDecoder.unpack(record, "record");
        ReleaseKey key = ReleaseDecoder.keyOf(rec, "record");
        if (isAssembled(key)) {
            return Optional.empty(); // a duplicate of a release already returned
        }
        Object kind = rec.get("kind");
        Pending open = pending.get(key);
        if ("header".equals(kind)) {
            if (open != null) {
                if (Arrays.equals(open.headerRaw, record)) {
                    return Optional.empty();
                }
                fail(key, CONFLICTING_HEADER, "two different headers arrived for it");
            }
            openRelease(key, record.clone());
            return Optional.empty();
        }
        if (open == null) {
            throw new ReleaseFormatException(NO_HEADER, "release " + key + ": " + kind
                    + " record arrived without its header (the consumer started mid-release, "
                    + "or the header was lost)");
        }
        if ("chunk".equals(kind)) {
            Object index = rec.get("index");
            if (!(index instanceof Long i) || i < 0 || i >= open.header.nChunks()) {
                boolean isIndex = index instanceof Long j && j >= 0;
                fail(key, isIndex ? EXTRA_CHUNK : BAD_CHUNK,
                        "chunk index (" + index + ") must lie in [0, n_chunks)");
                return Optional.empty(); // not reached
            }
            byte[] held = open.chunks.get(i);
            if (held == null) {
                open.chunks.put(i, record.clone());
            } else if (!Arrays.equals(held, record)) {
                fail(key, CONFLICTING_CHUNK, "two different versions of chunk " + i + " arrived");
            }
            return Optional.empty();
        }
        if (!"end".equals(kind)) {
            fail(key, BAD_KIND, "record `kind` must be 'header', 'chunk' or 'end'");
        }
        pending.remove(key);
        long n = open.header.nChunks();
        for (long i = 0; i < n; i++) {
            if (!open.chunks.containsKey(i)) {
                throw new ReleaseFormatException(MISSING_CHUNKS, "release " + key
                        + ": end record before all " + n + " chunks: chunk " + i + " is missing");
            }
        }
        List<byte[]> records = new ArrayList<>(open.chunks.size() + 2);
        records.add(open.headerRaw);
        records.addAll(open.chunks.values()); // in index order
        records.add(record);
        Release release;
        try {
            release = ReleaseDecoder.decode(records, maxDepth);
        } catch (ReleaseFormatException e) {
            throw new ReleaseFormatException(e.reason(), "release " + key + ": " + e.getMessage());
        }
        markAssembled(key);
        return Optional.of(release);
    }

    private void openRelease(ReleaseKey key, byte[] raw) throws ReleaseFormatException {
        ReleaseDecoder.Header header;
        try {
            header = ReleaseDecoder.header(raw, maxDepth);
        } catch (ReleaseFormatException e) {
            throw new ReleaseFormatException(e.reason(), "release " + key + ": " + e.getMessage());
        }
        pending.put(key, new Pending(raw, header));
        if (pending.size() > maxPending) {
            Iterator<ReleaseKey> oldest = pending.keySet().iterator();
            ReleaseKey evicted = oldest.next();
            oldest.remove();
            throw new ReleaseFormatException(EVICTED, "release " + evicted + " evicted "
                    + "incomplete: more than maxPending (" + maxPending + ") releases were open");
        }
    }

    private void fail(ReleaseKey key, Reason reason, String why) throws ReleaseFormatException {
        pending.remove(key);
        throw new ReleaseFormatException(reason,
                "release " + key + ": " + why + "; the release is discarded");
    }

    private boolean isAssembled(ReleaseKey key) {
        Seen s = seen.get(new RunPartition(key.runId(), key.partition()));
        return s != null && (key.sequence() <= s.floor || s.sequences.contains(key.sequence()));
    }

    private void markAssembled(ReleaseKey key) {
        Seen s = seen.computeIfAbsent(new RunPartition(key.runId(), key.partition()),
                k -> new Seen());
        s.sequences.add(key.sequence());
        if (s.sequences.size() > 2 * remember) {
            List<Long> ordered = new ArrayList<>(s.sequences);
            ordered.sort(null);
            s.floor = Math.max(s.floor, ordered.get(ordered.size() - remember - 1));
            s.sequences = new HashSet<>(ordered.subList(ordered.size() - remember,
                    ordered.size()));
        }
    }
}
