package dev.dpsynth.reader;

import java.util.Map;

/**
 * A release of format {@code tabular.v1}: the synthetic table of one step, {@code nRows} rows of
 * {@code p} integer codes (decode them with the run's domain file).
 *
 * @param rows the codes, row-major (nRows·p values)
 */
public record TabularRelease(ReleaseKey key, long step, int p, int nRows, int width,
                             Map<Object, Object> metadata, long[] rows) implements Release {
    /** Code of row {@code row}, attribute {@code column}. */
    public long code(int row, int column) {
        return rows[row * p + column];
    }
}
