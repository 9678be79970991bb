package dev.dpsynth.reader;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import javax.crypto.Cipher;
import javax.crypto.spec.ChaCha20ParameterSpec;
import javax.crypto.spec.SecretKeySpec;
import org.junit.jupiter.api.Test;

/** The block function against RFC 8439's known answer and the JDK's own ChaCha20 cipher. */
class ChaCha20Test {
    private static int[] words(byte[] key) {
        int[] out = new int[8];
        ByteBuffer.wrap(key).order(ByteOrder.LITTLE_ENDIAN).asIntBuffer().get(out);
        return out;
    }

    @Test
    void rfc8439BlockFunctionKnownAnswer() {
        // RFC 8439 §2.3.2: key 00..1f, nonce 000000090000004a00000000, block counter 1
        byte[] key = new byte[32];
        for (int i = 0; i < 32; i++) {
            key[i] = (byte) i;
        }
        int[] out = new int[16];
        ChaCha20.block(words(key), 1L | (0x09000000L << 32), 0x000000004a000000L, out);
        assertArrayEquals(new int[] {0xe4e7f110, 0x15593bd1, 0x1fdd0f50, 0xc47120a3,
            0xc7f4d1c7, 0x0368c033, 0x9aaa2204, 0x4e6cd4c3, 0x466482d2, 0x09aa9f07,
            0x05d7c214, 0xa2028bd9, 0xd19c12b5, 0xb94e16de, 0xe883d0cb, 0x4e3c50a2}, out);
    }

    @Test
    void equalsTheJdkCipherAtEveryAddressLayout() throws Exception {
        long[][] addresses = {{0, 0}, {1 << 8, 3}, {5L << 8 | 7, 0xFFFFFFFFL},
            {(1L << 30) << 8, Long.MAX_VALUE}, {((1L << 56) - 1) << 8 & 0x7FFFFFFFL, -1L},
            {0x1234L << 8, 0x0123456789abcdefL}};
        byte[] key = new byte[32];
        for (int i = 0; i < 32; i++) {
            key[i] = (byte) (7 * i + 3);
        }
        for (long[] address : addresses) {
            long counter = address[0];
            long stream = address[1];
            // RFC 8439 layout: 32-bit counter, nonce = LE32(counter >>> 32) || LE64(stream);
            // the JDK takes counters below 2^31 here, so the high word goes in the nonce
            byte[] nonce = ByteBuffer.allocate(12).order(ByteOrder.LITTLE_ENDIAN)
                    .putInt((int) (counter >>> 32)).putLong(stream).array();
            Cipher cipher = Cipher.getInstance("ChaCha20");
            cipher.init(Cipher.ENCRYPT_MODE, new SecretKeySpec(key, "ChaCha20"),
                    new ChaCha20ParameterSpec(nonce, (int) counter));
            byte[] keystream = cipher.doFinal(new byte[64]);
            int[] expected = new int[16];
            ByteBuffer.wrap(keystream).order(ByteOrder.LITTLE_ENDIAN).asIntBuffer().get(expected);
            int[] out = new int[16];
            ChaCha20.block(words(key), counter, stream, out);
            assertArrayEquals(expected, out, "counter " + counter + ", stream " + stream);
        }
    }
}
