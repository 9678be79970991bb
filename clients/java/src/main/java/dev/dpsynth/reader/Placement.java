package dev.dpsynth.reader;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.security.GeneralSecurityException;
import javax.crypto.Mac;
import javax.crypto.spec.SecretKeySpec;

/**
 * The points of a release: a deterministic, data-independent function of the leaf counts, the
 * public placement seed and the placement rule (schemas/README.md "Placement"). Every step is
 * binary64 arithmetic as specified, so the result equals Python's {@code Release.points} bit
 * for bit.
 */
public final class Placement {
    /** Events are 56-bit: the low 8 bits of the block counter index blocks within a draw. */
    static final long MAX_EVENT = (1L << 56) - 1;
    private static final double TWO_53 = 0x1p53;
    private static final double BELOW_ONE = Math.nextDown(1.0);

    private Placement() {}

    /**
     * The t·d coordinates (row-major) of the points of the occupied leaves {@code cells}
     * (strictly increasing) holding {@code counts} points each.
     *
     * @param placement "uniform" or "centre"
     * @throws IllegalArgumentException for another placement, a seed below 16 bytes, or more
     *     points than one Java array holds
     */
    public static double[] points(long[] cells, long[] counts, int d, int depth, String placement,
                                  byte[] placementSeed) {
        boolean centre = "centre".equals(placement);
        if (!centre && !"uniform".equals(placement)) {
            throw new IllegalArgumentException(
                    "placement (" + placement + ") must be 'uniform' or 'centre'");
        }
        long total = 0;
        for (long c : counts) {
            total = Math.addExact(total, c);
        }
        if (total > (Integer.MAX_VALUE - 8) / Math.max(d, 1)) {
            throw new IllegalArgumentException("the release has more points than one array holds");
        }
        int[] key = centre ? null : subkey(placementSeed, depth);
        int[] block = new int[16];
        double[] out = new double[(int) total * d];
        double[] lower = new double[d];
        double[] upper = new double[d];
        int at = 0;
        for (int leaf = 0; leaf < cells.length; leaf++) {
            long cell = cells[leaf];
            leafBounds(cell, d, depth, lower, upper);
            for (long k = 0; k < counts[leaf]; k++) {
                for (int j = 0; j < d; j++) {
                    if (centre) {
                        out[at++] = (lower[j] + upper[j]) / 2;
                        continue;
                    }
                    long event = k * d + j;
                    if (event > MAX_EVENT) {
                        throw new IllegalArgumentException("events must be below 2^56");
                    }
                    double u = uniform(key, cell, event, block);
                    out[at++] = lower[j] + Math.min(u, BELOW_ONE) * (upper[j] - lower[j]);
                }
            }
        }
        return out;
    }

    /** Lower and upper corners of a leaf: its Morton bits, coordinate {@code l mod d} at level l. */
    static void leafBounds(long cell, int d, int depth, double[] lower, double[] upper) {
        long[] grid = new long[d];
        for (int level = 0; level < depth; level++) {
            int i = level % d;
            grid[i] = (grid[i] << 1) | ((cell >>> (depth - 1 - level)) & 1L);
        }
        for (int i = 0; i < d; i++) {
            int splits = Math.max(Math.floorDiv(depth - i + d - 1, d), 0);
            double side = 1.0 / Math.scalb(1.0, splits);
            lower[i] = (double) grid[i] * side;
            upper[i] = lower[i] + side;
        }
    }

    /** The uniform on (0, 1] at (stream, event): one block, its first two words. */
    static double uniform(int[] key, long stream, long event, int[] block) {
        return (double) uniform53(key, stream, event, block) / TWO_53;
    }

    /** The integer in [1, 2^53] at (stream, event). */
    static long uniform53(int[] key, long stream, long event, int[] block) {
        ChaCha20.block(key, event << 8, stream, block);
        long high = Integer.toUnsignedLong(block[0]) >>> 11;
        return ((high << 32) | Integer.toUnsignedLong(block[1])) + 1;
    }

    /** The context ("place", depth) as dpsynth.noise encodes it. */
    static byte[] context(int depth) {
        byte[] label = "dpsynth.noise.v1".getBytes(StandardCharsets.US_ASCII);
        byte[] name = "place".getBytes(StandardCharsets.US_ASCII);
        byte[] digits = Integer.toString(depth).getBytes(StandardCharsets.US_ASCII);
        return ByteBuffer.allocate(label.length + 10 + name.length + digits.length)
                .put(label).put((byte) 's').putInt(name.length).put(name)
                .put((byte) 'i').putInt(digits.length).put(digits).array();
    }

    /** The ChaCha20 key of placement at {@code depth}: HMAC-SHA256(seed, context) as 8 words. */
    static int[] subkey(byte[] placementSeed, int depth) {
        if (placementSeed == null || placementSeed.length < 16) {
            throw new IllegalArgumentException("placement_seed must be at least 16 bytes");
        }
        byte[] digest;
        try {
            Mac mac = Mac.getInstance("HmacSHA256");
            mac.init(new SecretKeySpec(placementSeed, "HmacSHA256"));
            digest = mac.doFinal(context(depth));
        } catch (GeneralSecurityException e) {
            throw new IllegalStateException("HmacSHA256 is missing from this JDK", e);
        }
        int[] words = new int[8];
        ByteBuffer.wrap(digest).order(ByteOrder.LITTLE_ENDIAN).asIntBuffer().get(words);
        return words;
    }
}
