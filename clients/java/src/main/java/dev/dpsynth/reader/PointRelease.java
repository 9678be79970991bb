package dev.dpsynth.reader;

import java.util.Map;

/**
 * A release of format 1: t points in [0,1]^d in compact form, the non-zero leaf counts of depth
 * {@code depth} (Morton order) and the public placement seed. {@link #points()} materialises the
 * points exactly as Python's {@code Release.points}.
 *
 * @param cells the occupied leaves, strictly increasing
 * @param counts their counts (each in [1, t], summing to t)
 */
public record PointRelease(ReleaseKey key, long t, int depth, int d, Map<Object, Object> metadata,
                           byte[] placementSeed, long[] cells, long[] counts) implements Release {

    /** The placement rule: {@code metadata.placement}, "uniform" when absent. */
    public String placement() {
        if (!metadata.containsKey("placement")) {
            return "uniform";
        }
        Object value = metadata.get("placement");
        return value instanceof String s ? s : String.valueOf(value);
    }

    /** The t points, row-major (t·d values in [0,1]); computed on every call. */
    public double[] points() {
        return Placement.points(cells, counts, d, depth, placement(), placementSeed);
    }

    /** The points in the units of {@code schema} (row-major), as {@code Schema.from_unit}. */
    public double[] pointsInUnits(RecordSchema schema) {
        return schema.fromUnit(points(), d);
    }
}
