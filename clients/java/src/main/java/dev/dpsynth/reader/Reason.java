package dev.dpsynth.reader;

/**
 * The stable reason codes of a refused release, the same as Python's
 * {@code dpsynth.release.framing.REASONS} (schemas/README.md "Reason codes").
 */
public enum Reason {
    UNDECODABLE, BAD_IDENTITY, MISSING_HEADER, UNSUPPORTED_FORMAT, BAD_KEYS, BAD_HEADER,
    DEPTH_LIMIT, UNEXPECTED_HEADER, BAD_KIND, MIXED, DUPLICATE_CHUNK, EXTRA_CHUNK, REORDERED,
    BAD_CHUNK, MISSING_CHUNKS, BAD_CHECKSUM, BAD_SUM, TRAILING_RECORD, TRUNCATED, NO_HEADER,
    CONFLICTING_HEADER, CONFLICTING_CHUNK, EVICTED;

    /** The code as written in schemas/ and the vectors, e.g. {@code bad_checksum}. */
    public String code() {
        return name().toLowerCase(java.util.Locale.ROOT);
    }

    /** The reason of a code, e.g. {@code Reason.of("bad_checksum")}. */
    public static Reason of(String code) {
        return valueOf(code.toUpperCase(java.util.Locale.ROOT));
    }
}
