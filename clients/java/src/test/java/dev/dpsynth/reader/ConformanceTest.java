package dev.dpsynth.reader;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;
import static org.junit.jupiter.api.DynamicTest.dynamicTest;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Base64;
import java.util.EnumSet;
import java.util.HexFormat;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Set;
import java.util.stream.Stream;
import org.junit.jupiter.api.DynamicTest;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestFactory;

/**
 * The conformance vectors of schemas/conformance/vectors.json through this reader: valid
 * releases decode to the listed leaves and points bit for bit, invalid ones are refused with
 * the listed reason, assembler streams give the listed outcome record by record.
 */
class ConformanceTest {
    private static final Map<String, Object> VECTORS = load();

    @SuppressWarnings("unchecked")
    private static Map<String, Object> load() {
        Path path = Path.of(System.getProperty("dpsynth.vectors",
                "../../schemas/conformance/vectors.json"));
        try {
            return (Map<String, Object>) Json.parse(Files.readString(path, StandardCharsets.UTF_8));
        } catch (IOException e) {
            throw new IllegalStateException("cannot read the vectors at " + path, e);
        }
    }

    @SuppressWarnings("unchecked")
    static List<Map<String, Object>> section(String name) {
        return (List<Map<String, Object>>) VECTORS.get(name);
    }

    @SuppressWarnings("unchecked")
    static Map<String, Object> expect(Map<String, Object> vector) {
        return (Map<String, Object>) vector.get("expect");
    }

    static List<byte[]> records(Map<String, Object> vector) {
        List<byte[]> out = new ArrayList<>();
        for (Object r : (List<?>) vector.get("records")) {
            out.add(Base64.getDecoder().decode((String) r));
        }
        return out;
    }

    static long[] longs(Object list) {
        return ((List<?>) list).stream().mapToLong(v -> ((Number) v).longValue()).toArray();
    }

    /** Bit patterns of doubles as the vectors write them (16 hex digits). */
    static List<String> bits(double[] values) {
        List<String> out = new ArrayList<>(values.length);
        for (double v : values) {
            out.add(String.format("%016x", Double.doubleToRawLongBits(v)));
        }
        return out;
    }

    /** Decoded msgpack values in the JSON view of the vectors (bytes as base64). */
    static Object jsonView(Object value) {
        if (value instanceof byte[] b) {
            return Base64.getEncoder().encodeToString(b);
        }
        if (value instanceof Map<?, ?> map) {
            Map<Object, Object> out = new LinkedHashMap<>();
            map.forEach((k, v) -> out.put(k, jsonView(v)));
            return out;
        }
        if (value instanceof List<?> list) {
            return list.stream().map(ConformanceTest::jsonView).toList();
        }
        return value;
    }

    static void checkPoints(Map<String, Object> expect, PointRelease release) {
        assertEquals(expect.get("run_id"), release.key().runId());
        assertEquals(expect.get("partition"), release.key().partition());
        assertEquals(expect.get("sequence"), release.key().sequence());
        assertEquals(expect.get("t"), release.t());
        assertEquals(((Number) expect.get("depth")).intValue(), release.depth());
        assertEquals(((Number) expect.get("d")).intValue(), release.d());
        assertEquals(expect.get("metadata"), jsonView(release.metadata()));
        assertEquals(expect.get("placement_seed"), HexFormat.of().formatHex(release.placementSeed()));
        assertArrayEquals(longs(expect.get("cells")), release.cells());
        assertArrayEquals(longs(expect.get("counts")), release.counts());
        assertEquals(expect.get("points"), bits(release.points()), "points bit for bit");
        if (expect.containsKey("record_schema")) {
            RecordSchema schema = RecordSchema.fromJson(expect.get("record_schema"));
            assertEquals(expect.get("points_in_units"), bits(release.pointsInUnits(schema)));
        }
    }

    @TestFactory
    Stream<DynamicTest> pointReleasesDecodeToTheirLeavesAndPoints() {
        return section("points").stream().map(v -> dynamicTest((String) v.get("name"), () ->
                checkPoints(expect(v), ReleaseDecoder.decodePoints(records(v)))));
    }

    @TestFactory
    Stream<DynamicTest> tabularReleasesDecodeToTheirRows() {
        return section("tabular").stream().map(v -> dynamicTest((String) v.get("name"), () -> {
            Map<String, Object> e = expect(v);
            TabularRelease release = ReleaseDecoder.decodeTabular(records(v));
            assertEquals(e.get("sequence"), release.key().sequence());
            assertEquals(e.get("partition"), release.key().partition());
            assertEquals(e.get("step"), release.step());
            assertEquals(((Number) e.get("p")).intValue(), release.p());
            assertEquals(((Number) e.get("n_rows")).intValue(), release.nRows());
            assertEquals(((Number) e.get("width")).intValue(), release.width());
            assertEquals(e.get("metadata"), jsonView(release.metadata()));
            long[] rows = ((List<?>) e.get("rows")).stream()
                    .flatMapToLong(row -> ((List<?>) row).stream()
                            .mapToLong(c -> ((Number) c).longValue())).toArray();
            assertArrayEquals(rows, release.rows());
        }));
    }

    @TestFactory
    Stream<DynamicTest> invalidRecordsAreRefusedWithTheirReason() {
        return section("invalid").stream().map(v -> dynamicTest((String) v.get("name"), () -> {
            int maxDepth = v.containsKey("max_depth") ? ((Number) v.get("max_depth")).intValue()
                    : ReleaseDecoder.MAX_DECODE_DEPTH;
            ReleaseFormatException e = assertThrows(ReleaseFormatException.class, () -> {
                if ("points".equals(v.get("decoder"))) {
                    ReleaseDecoder.decodePoints(records(v), maxDepth);
                } else {
                    ReleaseDecoder.decodeTabular(records(v));
                }
            });
            assertEquals(v.get("reason"), e.reason().code(), e.getMessage());
        }));
    }

    @TestFactory
    Stream<DynamicTest> assemblerStreamsGiveTheListedOutcomes() {
        return section("streams").stream().map(v -> dynamicTest((String) v.get("name"), () -> {
            @SuppressWarnings("unchecked")
            Map<String, Object> params = (Map<String, Object>) v.get("assembler");
            ReleaseAssembler assembler = new ReleaseAssembler(
                    ((Number) params.getOrDefault("max_pending", 1024L)).intValue(),
                    ((Number) params.getOrDefault("remember", 4096L)).intValue(),
                    ReleaseDecoder.MAX_DECODE_DEPTH);
            List<byte[]> records = records(v);
            List<?> outcomes = (List<?>) v.get("expect");
            assertEquals(outcomes.size(), records.size());
            for (int i = 0; i < records.size(); i++) {
                Map<?, ?> want = (Map<?, ?>) outcomes.get(i);
                Optional<Release> got;
                try {
                    got = assembler.add(records.get(i));
                } catch (ReleaseFormatException e) {
                    assertEquals(want == null ? null : want.get("reject"), e.reason().code(),
                            "record " + i + ": " + e.getMessage());
                    continue;
                }
                if (want == null) {
                    assertTrue(got.isEmpty(), "record " + i + " completed a release");
                    continue;
                }
                assertTrue(got.isPresent(), "record " + i + ": expected " + want);
                Map<String, Object> reference = section("points").stream()
                        .filter(p -> p.get("name").equals(want.get("release")))
                        .findFirst().orElseThrow();
                checkPoints(expect(reference), (PointRelease) got.get());
            }
        }));
    }

    @TestFactory
    Stream<DynamicTest> keystreamFollowsTheSpecification() {
        return section("keystream").stream().map(v -> dynamicTest("depth " + v.get("depth"), () -> {
            byte[] seed = HexFormat.of().parseHex((String) v.get("placement_seed"));
            int depth = ((Number) v.get("depth")).intValue();
            assertEquals(v.get("context"), HexFormat.of().formatHex(Placement.context(depth)));
            int[] key = Placement.subkey(seed, depth);
            byte[] keyBytes = new byte[32];
            java.nio.ByteBuffer.wrap(keyBytes).order(java.nio.ByteOrder.LITTLE_ENDIAN)
                    .asIntBuffer().put(key);
            assertEquals(v.get("subkey"), HexFormat.of().formatHex(keyBytes));
            long stream = Long.parseUnsignedLong((String) v.get("stream"));
            long event = Long.parseUnsignedLong((String) v.get("event"));
            assertEquals(v.get("counter"), Long.toUnsignedString(event << 8));
            int[] block = new int[16];
            ChaCha20.block(key, event << 8, stream, block);
            List<String> words = new ArrayList<>();
            for (int w : block) {
                words.add(String.format("%08x", w));
            }
            assertEquals(v.get("block"), words);
            assertEquals(v.get("uniform53"),
                    Long.toString(Placement.uniform53(key, stream, event, block)));
            assertEquals(List.of(v.get("u")),
                    bits(new double[] {Placement.uniform(key, stream, event, block)}));
        }));
    }

    @Test
    void theVectorsCoverEveryReasonCode() {
        Set<Reason> used = EnumSet.noneOf(Reason.class);
        section("invalid").forEach(v -> used.add(Reason.of((String) v.get("reason"))));
        for (Map<String, Object> s : section("streams")) {
            for (Object o : (List<?>) s.get("expect")) {
                if (o instanceof Map<?, ?> m && m.containsKey("reject")) {
                    used.add(Reason.of((String) m.get("reject")));
                }
            }
        }
        assertEquals(EnumSet.allOf(Reason.class), used);
    }

    @Test
    void aTrackerKeepsTheLatestReleaseOfEachPartitionAndCountsRefusals() {
        List<String> refused = new ArrayList<>();
        ReleaseTracker tracker = new ReleaseTracker(null, new ReleaseAssembler(),
                e -> refused.add(e.reason().code()));
        for (String name : List.of("points/tiny/p0-s2", "points/tiny/p0-s1", "points/tiny/p1-s1",
                "points/tiny/p0-s2")) {
            Map<String, Object> v = section("points").stream()
                    .filter(p -> p.get("name").equals(name)).findFirst().orElseThrow();
            records(v).forEach(tracker::add);
        }
        tracker.add(new byte[] {(byte) 0xc1});
        assertEquals(List.of("undecodable"), refused);
        assertEquals(1, tracker.rejected());
        Map<ReleaseTracker.Slot, Release> latest = tracker.latest();
        assertEquals(2, latest.size());
        assertEquals(2L, latest.get(new ReleaseTracker.Slot("conformance", 0)).key().sequence());
        assertNotNull(latest.get(new ReleaseTracker.Slot("conformance", 1)));
    }

    @Test
    void anUnknownPlacementOrAShortSeedCannotBeMaterialised() throws Exception {
        Map<String, Object> v = section("points").get(0);
        PointRelease release = ReleaseDecoder.decodePoints(records(v));
        Map<Object, Object> metadata = new LinkedHashMap<>(release.metadata());
        metadata.put("placement", "spiral");
        PointRelease spiral = new PointRelease(release.key(), release.t(), release.depth(),
                release.d(), metadata, release.placementSeed(), release.cells(), release.counts());
        assertThrows(IllegalArgumentException.class, spiral::points);
        PointRelease shortSeed = new PointRelease(release.key(), release.t(), release.depth(),
                release.d(), release.metadata(), new byte[8], release.cells(), release.counts());
        assertThrows(IllegalArgumentException.class, shortSeed::points);
        if (release.t() == 0) {
            fail("the first vector must hold points");
        }
    }
}
