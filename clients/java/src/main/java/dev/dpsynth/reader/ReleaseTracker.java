package dev.dpsynth.reader;

import java.util.Collections;
import java.util.Map;
import java.util.Optional;
import java.util.TreeMap;
import java.util.function.Consumer;

/**
 * The broker-free half of a consumer, as Python's {@code dpsynth.client.ReleaseTracker}: records
 * in (any interleaving of topic partitions, each in order), first-seen releases out, and the
 * latest release of every (run, input partition) kept. Refused releases are counted and handed
 * to a listener; they never stop the reader.
 */
public final class ReleaseTracker {
    /** A (run, input partition) slot; sorted by run, then partition. */
    public record Slot(String runId, long partition) implements Comparable<Slot> {
        @Override
        public int compareTo(Slot o) {
            int byRun = runId.compareTo(o.runId);
            return byRun != 0 ? byRun : Long.compare(partition, o.partition);
        }
    }

    private final String runId;
    private final ReleaseAssembler assembler;
    private final Map<Slot, Release> latest = new TreeMap<>();
    private final Consumer<ReleaseFormatException> onRejected;
    private long rejected;
    private long records;

    /**
     * @param runId only releases of this run (null: every run)
     * @param onRejected told of every refusal (e.g. to log its reason), may be null
     */
    public ReleaseTracker(String runId, ReleaseAssembler assembler,
                          Consumer<ReleaseFormatException> onRejected) {
        this.runId = runId;
        this.assembler = assembler;
        this.onRejected = onRejected;
    }

    /** Takes one record value; returns the release it completes, if any (each once). */
    public Optional<Release> add(byte[] value) {
        records++;
        Optional<Release> done;
        try {
            done = assembler.add(value);
        } catch (ReleaseFormatException e) {
            rejected++;
            if (onRejected != null) {
                onRejected.accept(e);
            }
            return Optional.empty();
        }
        if (done.isEmpty() || (runId != null && !runId.equals(done.get().key().runId()))) {
            return Optional.empty();
        }
        Release release = done.get();
        Slot slot = new Slot(release.key().runId(), release.key().partition());
        Release current = latest.get(slot);
        if (current == null || current.key().sequence() < release.key().sequence()) {
            latest.put(slot, release);
        }
        return done;
    }

    /** The release of the highest sequence seen, per (run, input partition), sorted. */
    public Map<Slot, Release> latest() {
        return Collections.unmodifiableMap(latest);
    }

    /** Releases refused so far. */
    public long rejected() {
        return rejected;
    }

    /** Records taken so far. */
    public long records() {
        return records;
    }
}
