package dev.dpsynth.reader;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;

/**
 * The record schema of a run (schemas/record-schema.v1.json): column names and bounds, to map
 * points in [0,1]^d back to original units exactly as Python's {@code Schema.from_unit}.
 */
public record RecordSchema(List<String> names, double[] lower, double[] upper) {

    /** A schema file of version 1. */
    public static RecordSchema read(Path file) throws IOException {
        return fromJson(Json.parse(Files.readString(file, StandardCharsets.UTF_8)));
    }

    /** A schema from its parsed JSON form ({@code {"version": 1, "columns": [...]}}). */
    public static RecordSchema fromJson(Object json) {
        if (!(json instanceof Map<?, ?> doc) || !Long.valueOf(1).equals(doc.get("version"))
                || !(doc.get("columns") instanceof List<?> columns) || columns.isEmpty()) {
            throw new IllegalArgumentException(
                    "a record schema is {\"version\": 1, \"columns\": [...]} with >= 1 column");
        }
        List<String> names = new ArrayList<>();
        double[] lower = new double[columns.size()];
        double[] upper = new double[columns.size()];
        for (int i = 0; i < columns.size(); i++) {
            if (!(columns.get(i) instanceof Map<?, ?> column)
                    || !(column.get("name") instanceof String name)
                    || !(column.get("lower") instanceof Number lo)
                    || !(column.get("upper") instanceof Number hi)
                    || !(lo.doubleValue() < hi.doubleValue())) {
                throw new IllegalArgumentException(
                        "column " + i + " must have a name and finite bounds lower < upper");
            }
            names.add(name);
            lower[i] = lo.doubleValue();
            upper[i] = hi.doubleValue();
        }
        return new RecordSchema(List.copyOf(names), lower, upper);
    }

    /** Columns of the schema. */
    public int d() {
        return lower.length;
    }

    /**
     * Points in [0,1]^d (row-major) in original units: {@code lower + x·(upper − lower)}, kept
     * inside [lower, upper] as numpy's clip keeps it.
     */
    public double[] fromUnit(double[] points, int d) {
        if (d != d()) {
            throw new IllegalArgumentException("points of dimension " + d
                    + " do not fit schema columns " + names);
        }
        double[] out = new double[points.length];
        for (int i = 0; i < points.length; i++) {
            int j = i % d;
            double v = lower[j] + points[i] * (upper[j] - lower[j]);
            v = v >= lower[j] ? v : lower[j]; // numpy maximum, then minimum (clip)
            out[i] = v <= upper[j] ? v : upper[j];
        }
        return out;
    }
}
