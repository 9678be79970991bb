package dev.dpsynth.reader;

import java.util.Map;

/** A complete, checked release of either format. */
public sealed interface Release permits PointRelease, TabularRelease {
    /** Its identity (run, input partition, sequence). */
    ReleaseKey key();

    /** Its public metadata, as decoded (str keys; values as in {@link Msgpack}). */
    Map<Object, Object> metadata();
}
