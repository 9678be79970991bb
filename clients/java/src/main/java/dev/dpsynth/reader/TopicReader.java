package dev.dpsynth.reader;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.UUID;
import java.util.function.Consumer;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

/**
 * Reads a synthetic topic with {@code isolation.level=read_committed} into a
 * {@link ReleaseTracker}: every partition from its beginning, without a consumer group's
 * committed offsets. Works the same on the history topic, a transactional one or a compacted
 * latest view (the identity of a release is in its records, never in the Kafka key); a
 * tombstone (a null value: a position the latest view deleted) is skipped.
 *
 * <pre>{@code
 * try (TopicReader reader = new TopicReader("127.0.0.1:9092", "dpsynth-synthetic", Map.of())) {
 *     ReleaseTracker tracker = new ReleaseTracker(null, new ReleaseAssembler(), null);
 *     reader.readToEnd(tracker, Duration.ofSeconds(60));
 *     tracker.latest().forEach((slot, release) -> ...);
 * }
 * }</pre>
 */
public final class TopicReader implements AutoCloseable {
    private final KafkaConsumer<byte[], byte[]> consumer;
    private final List<TopicPartition> partitions = new ArrayList<>();

    /**
     * @param extra further consumer settings (security, client.id, ...); they win
     * @throws IllegalArgumentException if the topic does not exist
     */
    public TopicReader(String bootstrapServers, String topic, Map<String, Object> extra) {
        Properties settings = new Properties();
        settings.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrapServers);
        settings.put(ConsumerConfig.GROUP_ID_CONFIG, "dpsynth-reader-" + UUID.randomUUID());
        settings.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        settings.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
        settings.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        settings.putAll(extra);
        consumer = new KafkaConsumer<>(settings, new ByteArrayDeserializer(),
                new ByteArrayDeserializer());
        List<PartitionInfo> infos = consumer.partitionsFor(topic, Duration.ofSeconds(30));
        if (infos == null || infos.isEmpty()) {
            consumer.close();
            throw new IllegalArgumentException("topic " + topic + " does not exist on "
                    + bootstrapServers);
        }
        for (PartitionInfo info : infos) {
            partitions.add(new TopicPartition(topic, info.partition()));
        }
        partitions.sort((a, b) -> Integer.compare(a.partition(), b.partition()));
        consumer.assign(partitions);
        consumer.seekToBeginning(partitions);
    }

    /**
     * Reads every partition up to its end as it is now (the last stable offset, under
     * read_committed), feeding each record to {@code sink}.
     *
     * @throws java.util.concurrent.TimeoutException if the end is not reached in time (an
     *     open transaction holds read_committed readers before its records)
     */
    public void readToEnd(Consumer<ConsumerRecord<byte[], byte[]>> sink, Duration timeout)
            throws java.util.concurrent.TimeoutException {
        long deadline = System.nanoTime() + timeout.toNanos();
        Map<TopicPartition, Long> ends = consumer.endOffsets(partitions, timeout);
        while (true) {
            List<TopicPartition> behind = new ArrayList<>();
            for (TopicPartition tp : partitions) {
                if (consumer.position(tp, timeout) < ends.get(tp)) {
                    behind.add(tp);
                }
            }
            if (behind.isEmpty()) {
                return;
            }
            if (System.nanoTime() > deadline) {
                throw new java.util.concurrent.TimeoutException(
                        "partitions " + behind + " not read to their end in " + timeout);
            }
            for (ConsumerRecord<byte[], byte[]> record : consumer.poll(Duration.ofMillis(200))) {
                sink.accept(record);
            }
        }
    }

    /** As {@link #readToEnd(Consumer, Duration)}, into a tracker; tombstones skipped. */
    public void readToEnd(ReleaseTracker tracker, Duration timeout)
            throws java.util.concurrent.TimeoutException {
        readToEnd(record -> {
            if (record.value() != null) {
                tracker.add(record.value());
            }
        }, timeout);
    }

    @Override
    public void close() {
        consumer.close();
    }
}
