package dev.dpsynth.reader;

/**
 * Identity of one release on the wire: the run, the input partition and the sequence number.
 * Consumers de-duplicate by it (schemas/README.md "Assembling releases from a topic").
 */
public record ReleaseKey(String runId, long partition, long sequence) {
    @Override
    public String toString() {
        return runId + "/" + partition + "/" + sequence;
    }
}
