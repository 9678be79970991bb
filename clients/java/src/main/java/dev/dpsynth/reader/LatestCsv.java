package dev.dpsynth.reader;

import java.io.BufferedWriter;
import java.io.IOException;
import java.io.OutputStreamWriter;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;

/**
 * Command-line example: the latest release of every input partition of a synthetic topic, as
 * CSV on standard output ({@code run_id,partition,sequence,<columns>}, one line per point).
 *
 * <pre>
 * java -jar target/dpsynth-reader.jar --bootstrap 127.0.0.1:9092 --topic dpsynth-synthetic \
 *     [--latest-view] [--run-id RUN] [--schema schema.json] [--hex] [--timeout-s 60]
 * </pre>
 *
 * With {@code --latest-view} it reads the topic's latest view ({@code TOPIC-latest}, the
 * compacted topic holding each input partition's newest release) instead of its history: about
 * one release per partition, whatever the history length.
 *
 * Values are in the schema's units with {@code --schema} (else in [0,1], columns x0..), printed
 * with {@link Double#toString(double)} (which reads back to the same double) or, with
 * {@code --hex}, {@link Double#toHexString(double)}. Tabular releases are skipped (noted on
 * standard error with the counts of releases and refusals).
 */
public final class LatestCsv {
    /** The latest view's topic is the synthetic topic's name plus this (the worker's default). */
    static final String LATEST_VIEW_SUFFIX = "-latest";

    private LatestCsv() {}

    public static void main(String[] args) {
        System.exit(run(args, System.out, System.err));
    }

    static int run(String[] args, PrintStream stdout, PrintStream stderr) {
        Map<String, String> options;
        try {
            options = options(args);
        } catch (IllegalArgumentException e) {
            stderr.println(e.getMessage());
            stderr.println("usage: --bootstrap HOST:PORT --topic TOPIC [--latest-view] "
                    + "[--run-id RUN] [--schema FILE] [--hex] [--timeout-s SECONDS]");
            return 2;
        }
        try {
            RecordSchema schema = options.containsKey("schema")
                    ? RecordSchema.read(Path.of(options.get("schema"))) : null;
            boolean hex = options.containsKey("hex");
            List<String> refusals = new ArrayList<>();
            ReleaseTracker tracker = new ReleaseTracker(options.get("run-id"),
                    new ReleaseAssembler(), e -> refusals.add(e.reason().code()));
            Duration timeout = Duration.ofSeconds(
                    Long.parseLong(options.getOrDefault("timeout-s", "60")));
            String topic = options.get("topic")
                    + (options.containsKey("latest-view") ? LATEST_VIEW_SUFFIX : "");
            try (TopicReader reader = new TopicReader(options.get("bootstrap"), topic,
                    Map.of())) {
                reader.readToEnd(tracker, timeout);
            }
            write(tracker, schema, hex, stdout);
            stderr.println(tracker.records() + " records, " + tracker.latest().size()
                    + " partitions, " + tracker.rejected() + " releases refused "
                    + (refusals.isEmpty() ? "" : refusals));
            return 0;
        } catch (IOException | IllegalArgumentException | java.util.concurrent.TimeoutException
                 | org.apache.kafka.common.KafkaException e) {
            stderr.println("dpsynth-reader: " + e.getMessage());
            return 1;
        }
    }

    static void write(ReleaseTracker tracker, RecordSchema schema, boolean hex, PrintStream stdout)
            throws IOException {
        BufferedWriter out = new BufferedWriter(new OutputStreamWriter(stdout,
                StandardCharsets.UTF_8), 1 << 16);
        boolean headed = false;
        for (Map.Entry<ReleaseTracker.Slot, Release> entry : tracker.latest().entrySet()) {
            if (!(entry.getValue() instanceof PointRelease release)) {
                continue;
            }
            int d = release.d();
            double[] values = schema == null ? release.points() : release.pointsInUnits(schema);
            if (!headed) {
                out.write("run_id,partition,sequence");
                for (int j = 0; j < d; j++) {
                    out.write("," + (schema == null ? "x" + j : schema.names().get(j)));
                }
                out.newLine();
                headed = true;
            }
            String prefix = release.key().runId() + "," + release.key().partition() + ","
                    + release.key().sequence();
            for (int i = 0; i < values.length; i += d) {
                out.write(prefix);
                for (int j = 0; j < d; j++) {
                    out.write(',');
                    out.write(hex ? Double.toHexString(values[i + j])
                            : Double.toString(values[i + j]));
                }
                out.newLine();
            }
        }
        out.flush();
    }

    private static Map<String, String> options(String[] args) {
        Map<String, String> out = new java.util.HashMap<>();
        for (int i = 0; i < args.length; i++) {
            String name = args[i];
            if (!name.startsWith("--")) {
                throw new IllegalArgumentException("unexpected argument " + name);
            }
            name = name.substring(2);
            if (name.equals("hex") || name.equals("latest-view")) {
                out.put(name, "");
            } else if (List.of("bootstrap", "topic", "run-id", "schema", "timeout-s")
                    .contains(name) && i + 1 < args.length) {
                out.put(name, args[++i]);
            } else {
                throw new IllegalArgumentException("unknown option or missing value: --" + name);
            }
        }
        for (String required : List.of("bootstrap", "topic")) {
            if (!out.containsKey(required)) {
                throw new IllegalArgumentException("--" + required + " is required");
            }
        }
        return out;
    }
}
