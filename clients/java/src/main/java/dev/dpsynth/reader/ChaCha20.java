package dev.dpsynth.reader;

/**
 * The ChaCha20 block function (D. J. Bernstein's layout: a 64-bit block counter in state words
 * 12-13 and a 64-bit nonce in words 14-15), written from the algorithm's definition. With
 * counter {@code c} and nonce {@code n} it equals RFC 8439's block with 32-bit counter
 * {@code c mod 2^32} and 12-byte nonce {@code LE32(c >>> 32) || LE64(n)} (tested against the
 * JDK's cipher).
 */
public final class ChaCha20 {
    private static final int[] SIGMA = {0x61707865, 0x3320646e, 0x79622d32, 0x6b206574};

    private ChaCha20() {}

    /**
     * One block: {@code out[0..15]} are the output words (as unsigned 32-bit values in ints).
     *
     * @param key 8 little-endian 32-bit key words
     */
    public static void block(int[] key, long counter, long nonce, int[] out) {
        int j0 = SIGMA[0], j1 = SIGMA[1], j2 = SIGMA[2], j3 = SIGMA[3];
        int j4 = key[0], j5 = key[1], j6 = key[2], j7 = key[3];
        int j8 = key[4], j9 = key[5], j10 = key[6], j11 = key[7];
        int j12 = (int) counter, j13 = (int) (counter >>> 32);
        int j14 = (int) nonce, j15 = (int) (nonce >>> 32);
        int x0 = j0, x1 = j1, x2 = j2, x3 = j3, x4 = j4, x5 = j5, x6 = j6, x7 = j7;
        int x8 = j8, x9 = j9, x10 = j10, x11 = j11, x12 = j12, x13 = j13, x14 = j14, x15 = j15;
        for (int round = 0; round < 10; round++) {
            // column round
            x0 += x4; x12 = Integer.rotateLeft(x12 ^ x0, 16);
            x8 += x12; x4 = Integer.rotateLeft(x4 ^ x8, 12);
            x0 += x4; x12 = Integer.rotateLeft(x12 ^ x0, 8);
            x8 += x12; x4 = Integer.rotateLeft(x4 ^ x8, 7);
            x1 += x5; x13 = Integer.rotateLeft(x13 ^ x1, 16);
            x9 += x13; x5 = Integer.rotateLeft(x5 ^ x9, 12);
            x1 += x5; x13 = Integer.rotateLeft(x13 ^ x1, 8);
            x9 += x13; x5 = Integer.rotateLeft(x5 ^ x9, 7);
            x2 += x6; x14 = Integer.rotateLeft(x14 ^ x2, 16);
            x10 += x14; x6 = Integer.rotateLeft(x6 ^ x10, 12);
            x2 += x6; x14 = Integer.rotateLeft(x14 ^ x2, 8);
            x10 += x14; x6 = Integer.rotateLeft(x6 ^ x10, 7);
            x3 += x7; x15 = Integer.rotateLeft(x15 ^ x3, 16);
            x11 += x15; x7 = Integer.rotateLeft(x7 ^ x11, 12);
            x3 += x7; x15 = Integer.rotateLeft(x15 ^ x3, 8);
            x11 += x15; x7 = Integer.rotateLeft(x7 ^ x11, 7);
            // diagonal round
            x0 += x5; x15 = Integer.rotateLeft(x15 ^ x0, 16);
            x10 += x15; x5 = Integer.rotateLeft(x5 ^ x10, 12);
            x0 += x5; x15 = Integer.rotateLeft(x15 ^ x0, 8);
            x10 += x15; x5 = Integer.rotateLeft(x5 ^ x10, 7);
            x1 += x6; x12 = Integer.rotateLeft(x12 ^ x1, 16);
            x11 += x12; x6 = Integer.rotateLeft(x6 ^ x11, 12);
            x1 += x6; x12 = Integer.rotateLeft(x12 ^ x1, 8);
            x11 += x12; x6 = Integer.rotateLeft(x6 ^ x11, 7);
            x2 += x7; x13 = Integer.rotateLeft(x13 ^ x2, 16);
            x8 += x13; x7 = Integer.rotateLeft(x7 ^ x8, 12);
            x2 += x7; x13 = Integer.rotateLeft(x13 ^ x2, 8);
            x8 += x13; x7 = Integer.rotateLeft(x7 ^ x8, 7);
            x3 += x4; x14 = Integer.rotateLeft(x14 ^ x3, 16);
            x9 += x14; x4 = Integer.rotateLeft(x4 ^ x9, 12);
            x3 += x4; x14 = Integer.rotateLeft(x14 ^ x3, 8);
            x9 += x14; x4 = Integer.rotateLeft(x4 ^ x9, 7);
        }
        out[0] = x0 + j0; out[1] = x1 + j1; out[2] = x2 + j2; out[3] = x3 + j3;
        out[4] = x4 + j4; out[5] = x5 + j5; out[6] = x6 + j6; out[7] = x7 + j7;
        out[8] = x8 + j8; out[9] = x9 + j9; out[10] = x10 + j10; out[11] = x11 + j11;
        out[12] = x12 + j12; out[13] = x13 + j13; out[14] = x14 + j14; out[15] = x15 + j15;
    }
}
