package dev.dpsynth.reader;

import java.io.IOException;
import java.math.BigInteger;
import java.nio.ByteBuffer;
import java.nio.charset.CharacterCodingException;
import java.nio.charset.CodingErrorAction;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.msgpack.core.MessageFormat;
import org.msgpack.core.MessagePack;
import org.msgpack.core.MessagePackException;
import org.msgpack.core.MessageUnpacker;
import org.msgpack.core.buffer.ArrayBufferInput;

/**
 * One release record as plain Java values, read as Python's {@code msgpack.unpackb(raw,
 * raw=False, strict_map_key=True)} reads it: exactly one map, str keys (or bin, as {@link Bin}),
 * strict UTF-8 strings; nil is {@code null}, integers {@link Long} (or {@link BigInteger} beyond
 * 2^63), floats {@link Double}, bin {@code byte[]}, arrays {@link List}, maps {@link Map}
 * (insertion order, a repeated key keeps its last value), ext {@link Ext}.
 */
final class Msgpack {
    private Msgpack() {}

    /** A bin map key (compared by content). */
    record Bin(byte[] bytes) {
        @Override
        public boolean equals(Object o) {
            return o instanceof Bin b && Arrays.equals(bytes, b.bytes);
        }

        @Override
        public int hashCode() {
            return Arrays.hashCode(bytes);
        }

        @Override
        public String toString() {
            return "Bin" + Arrays.toString(bytes);
        }
    }

    /** An extension value, kept opaque. */
    record Ext(byte type, byte[] data) {}

    static final class Malformed extends Exception {
        private static final long serialVersionUID = 1L;

        Malformed(String message) {
            super(message);
        }
    }

    /** The one map a record holds, or {@link Malformed}. */
    static Map<Object, Object> map(byte[] raw) throws Malformed {
        if (raw == null) {
            throw new Malformed("must be bytes");
        }
        try (MessageUnpacker in = MessagePack.DEFAULT_UNPACKER_CONFIG.newUnpacker(
                new ArrayBufferInput(raw))) {
            if (!in.hasNext()) {
                throw new Malformed("cannot be decoded as one msgpack map");
            }
            Object value = read(in);
            if (in.hasNext()) {
                throw new Malformed("cannot be decoded as one msgpack map");
            }
            if (!(value instanceof Map<?, ?>)) {
                throw new Malformed("must be a msgpack map");
            }
            @SuppressWarnings("unchecked")
            Map<Object, Object> map = (Map<Object, Object>) value;
            return map;
        } catch (IOException | MessagePackException | ArithmeticException e) {
            throw new Malformed("cannot be decoded as one msgpack map");
        }
    }

    private static Object read(MessageUnpacker in) throws IOException, Malformed {
        MessageFormat format = in.getNextFormat();
        switch (format.getValueType()) {
            case NIL:
                in.unpackNil();
                return null;
            case BOOLEAN:
                return in.unpackBoolean();
            case INTEGER:
                if (format == MessageFormat.UINT64) {
                    BigInteger big = in.unpackBigInteger();
                    return big.bitLength() < 64 ? (Object) big.longValue() : big;
                }
                return in.unpackLong();
            case FLOAT:
                return in.unpackDouble();
            case STRING: {
                byte[] raw = in.readPayload(in.unpackRawStringHeader());
                try {
                    return StandardCharsets.UTF_8.newDecoder()
                            .onMalformedInput(CodingErrorAction.REPORT)
                            .onUnmappableCharacter(CodingErrorAction.REPORT)
                            .decode(ByteBuffer.wrap(raw)).toString();
                } catch (CharacterCodingException e) {
                    throw new Malformed("invalid UTF-8");
                }
            }
            case BINARY:
                return in.readPayload(in.unpackBinaryHeader());
            case ARRAY: {
                int n = in.unpackArrayHeader();
                List<Object> list = new ArrayList<>(Math.min(n, 1024));
                for (int i = 0; i < n; i++) {
                    list.add(read(in));
                }
                return list;
            }
            case MAP: {
                int n = in.unpackMapHeader();
                Map<Object, Object> map = new LinkedHashMap<>();
                for (int i = 0; i < n; i++) {
                    Object key = read(in);
                    if (key instanceof byte[] b) {
                        key = new Bin(b);
                    } else if (!(key instanceof String)) {
                        throw new Malformed("map keys must be str or bin");
                    }
                    map.put(key, read(in));
                }
                return map;
            }
            case EXTENSION: {
                var header = in.unpackExtensionTypeHeader();
                return new Ext(header.getType(), in.readPayload(header.getLength()));
            }
            default:
                throw new Malformed("unknown msgpack type");
        }
    }
}
