package eosbench;

import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.time.Duration;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.utils.Bytes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.kstream.SessionWindows;
import org.apache.kafka.streams.kstream.SlidingWindows;
import org.apache.kafka.streams.kstream.TimeWindows;
import org.apache.kafka.streams.kstream.WindowedSerdes;
import org.apache.kafka.streams.processor.TimestampExtractor;
import org.apache.kafka.streams.state.KeyValueStore;
import org.apache.kafka.streams.state.SessionStore;
import org.apache.kafka.streams.state.WindowStore;

/**
 * The peers benchmark's jobs on Kafka Streams, exactly_once_v2:
 * "stateless": parse each JSON value, add a field, write it; "count": records per key, one output per
 * input when the record cache is off (cache.max.bytes.buffering=0), fewer with the default cache;
 * "pipeline": filter (qty >= 2), add the total, group by key, sum the totals per key (one fused
 * sub-topology, as the DSL builds it: no repartition, one task per partition); "window": records per key and
 * tumbling window of event time (the records' timestamps), one output per input with the cache off, keyed as
 * WindowedSerdes' time-windowed keys (the key's bytes, then the window's start); "window-field": the same with
 * event time read from each value by a TimestampExtractor (its "id", taken as milliseconds); "session": records per key and
 * session of event time (inactivity gap, the same grace), a tombstone for each session a record extends or
 * merges, keyed as WindowedSerdes' session-windowed keys (the key's bytes, then the session's end and start);
 * "sliding": records per key and sliding window of event time (time difference, the same grace), one output per
 * window a record creates or falls in with the cache off, keyed as time-windowed keys.
 * Arguments: bootstrap job input output application-id threads commit-ms cache(on|off) [window-ms grace-ms
 * [session-gap-ms [sliding-ms]]].
 * Runs until killed.
 */
public final class PeerJob {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], job = args[1], input = args[2], output = args[3], appId = args[4];
        int threads = Integer.parseInt(args[5]);
        long commitMs = Long.parseLong(args[6]);
        boolean cache = args[7].equals("on");

        Properties props = new Properties();
        props.put(StreamsConfig.APPLICATION_ID_CONFIG, appId);
        props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.EXACTLY_ONCE_V2);
        props.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, threads);
        props.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, commitMs);
        props.put(StreamsConfig.STATE_DIR_CONFIG, System.getProperty("java.io.tmpdir") + "/kstreams-peer-" + appId);
        props.put(StreamsConfig.REPLICATION_FACTOR_CONFIG, 1);
        props.put("auto.offset.reset", "earliest");
        if (!cache) {
            props.put(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG, 0);
        }

        StreamsBuilder builder = new StreamsBuilder();
        if (job.equals("stateless")) {
            ObjectMapper json = new ObjectMapper();
            builder.stream(input, Consumed.with(Serdes.String(), Serdes.ByteArray()))
                .mapValues(raw -> {
                    try {
                        ObjectNode order = (ObjectNode) json.readTree(raw);
                        order.put("total", order.get("qty").asDouble() * order.get("price").asDouble());
                        return json.writeValueAsBytes(order);
                    } catch (Exception e) {
                        throw new RuntimeException(e);
                    }
                })
                .to(output, Produced.with(Serdes.String(), Serdes.ByteArray()));
        } else if (job.equals("pipeline")) {
            ObjectMapper json = new ObjectMapper();
            builder.stream(input, Consumed.with(Serdes.String(), Serdes.ByteArray()))
                .mapValues(raw -> {
                    try {
                        return (ObjectNode) json.readTree(raw);
                    } catch (Exception e) {
                        throw new RuntimeException(e);
                    }
                })
                .filter((key, order) -> order.get("qty").asInt() >= 2)
                .mapValues(order -> order.put("total", order.get("qty").asDouble() * order.get("price").asDouble()))
                .groupByKey()
                .aggregate(() -> 0.0, (key, order, total) -> total + order.get("total").asDouble(),
                           Materialized.<String, Double, KeyValueStore<Bytes, byte[]>>as("revenue")
                               .withKeySerde(Serdes.String()).withValueSerde(Serdes.Double()))
                .toStream()
                .to(output, Produced.with(Serdes.String(), Serdes.Double()));
        } else if (job.equals("window")) {
            long windowMs = Long.parseLong(args[8]), graceMs = Long.parseLong(args[9]);
            builder.stream(input, Consumed.with(Serdes.String(), Serdes.ByteArray()))
                .groupByKey()
                .windowedBy(TimeWindows.ofSizeAndGrace(Duration.ofMillis(windowMs), Duration.ofMillis(graceMs)))
                .count(Materialized.<String, Long, WindowStore<Bytes, byte[]>>as("counts"))
                .toStream()
                .to(output, Produced.with(WindowedSerdes.timeWindowedSerdeFrom(String.class, windowMs), Serdes.Long()));
        } else if (job.equals("window-field")) {
            // the window job with event time read from each value: its "id", taken as milliseconds
            long windowMs = Long.parseLong(args[8]), graceMs = Long.parseLong(args[9]);
            ObjectMapper json = new ObjectMapper();
            TimestampExtractor fromId = (record, partitionTime) -> {
                try {
                    return json.readTree((byte[]) record.value()).get("id").asLong();
                } catch (Exception e) {
                    throw new RuntimeException(e);
                }
            };
            builder.stream(input, Consumed.with(Serdes.String(), Serdes.ByteArray()).withTimestampExtractor(fromId))
                .groupByKey()
                .windowedBy(TimeWindows.ofSizeAndGrace(Duration.ofMillis(windowMs), Duration.ofMillis(graceMs)))
                .count(Materialized.<String, Long, WindowStore<Bytes, byte[]>>as("counts"))
                .toStream()
                .to(output, Produced.with(WindowedSerdes.timeWindowedSerdeFrom(String.class, windowMs), Serdes.Long()));
        } else if (job.equals("session")) {
            long graceMs = Long.parseLong(args[9]), gapMs = Long.parseLong(args[10]);
            builder.stream(input, Consumed.with(Serdes.String(), Serdes.ByteArray()))
                .groupByKey()
                .windowedBy(SessionWindows.ofInactivityGapAndGrace(Duration.ofMillis(gapMs), Duration.ofMillis(graceMs)))
                .count(Materialized.<String, Long, SessionStore<Bytes, byte[]>>as("counts"))
                .toStream()
                .to(output, Produced.with(WindowedSerdes.sessionWindowedSerdeFrom(String.class), Serdes.Long()));
        } else if (job.equals("sliding")) {
            long graceMs = Long.parseLong(args[9]), diffMs = Long.parseLong(args[11]);
            builder.stream(input, Consumed.with(Serdes.String(), Serdes.ByteArray()))
                .groupByKey()
                .windowedBy(SlidingWindows.ofTimeDifferenceAndGrace(Duration.ofMillis(diffMs), Duration.ofMillis(graceMs)))
                .count(Materialized.<String, Long, WindowStore<Bytes, byte[]>>as("counts"))
                .toStream()
                .to(output, Produced.with(WindowedSerdes.timeWindowedSerdeFrom(String.class, diffMs), Serdes.Long()));
        } else {
            builder.stream(input, Consumed.with(Serdes.String(), Serdes.ByteArray()))
                .groupByKey()
                .count(Materialized.<String, Long, KeyValueStore<Bytes, byte[]>>as("counts"))
                .toStream()
                .to(output, Produced.with(Serdes.String(), Serdes.Long()));
        }
        KafkaStreams streams = new KafkaStreams(builder.build(), props);
        CountDownLatch done = new CountDownLatch(1);
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            streams.close();
            done.countDown();
        }));
        streams.start();
        done.await();
    }
}
