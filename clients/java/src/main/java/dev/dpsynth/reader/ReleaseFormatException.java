package dev.dpsynth.reader;

/**
 * A release's records are missing, duplicated, out of order, mixed or corrupt. {@link #reason()}
 * is a stable code for programs; the message is for people (it names record positions, chunk
 * indices, cells and t, never a count).
 */
public final class ReleaseFormatException extends Exception {
    private static final long serialVersionUID = 1L;
    private final Reason reason;

    public ReleaseFormatException(Reason reason, String message) {
        super(message);
        this.reason = reason;
    }

    /** Why the release was refused. */
    public Reason reason() {
        return reason;
    }
}
