// A producer load generator for benchmarks/bench_replication.py, in the manner of Kafka's
// kafka-producer-perf-test (which cannot be assembled from the kafka-clients jar alone: it
// needs argparse4j and kafka-server-common). Written for Josef; it uses only the genuine
// Apache kafka-clients producer.
//
//   PerfProducer <bootstrap> <topic> <records> <record-size> [key=value producer config]...
//
// Sends <records> records of <record-size> bytes (null key) as fast as the producer accepts
// them (send() blocks when buffer.memory is full, as the perf tool's does), timing each from
// send() to its callback, then prints one JSON line:
//   {"rate": records/s, "elapsed": s, "p50": ms, "p99": ms, "failed": n}
// The producer's defaults are the client's own (batch.size 16384, enable.idempotence true
// with acks=all, max.in.flight.requests.per.connection 5); pass linger.ms, acks, batch.size.
import java.util.Arrays;
import java.util.Properties;
import java.util.concurrent.atomic.AtomicLong;

import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public class PerfProducer {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0];
        String topic = args[1];
        int records = Integer.parseInt(args[2]);
        int size = Integer.parseInt(args[3]);
        Properties props = new Properties();
        props.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        props.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        for (int i = 4; i < args.length; i++) {
            int eq = args[i].indexOf('=');
            props.put(args[i].substring(0, eq), args[i].substring(eq + 1));
        }
        byte[] value = new byte[size];
        Arrays.fill(value, (byte) 'x');
        final int[] latencyUs = new int[records];
        final AtomicLong failed = new AtomicLong();
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(props)) {
            producer.send(new ProducerRecord<>(topic, value)).get();  // metadata, connections
            long start = System.nanoTime();
            for (int i = 0; i < records; i++) {
                final int n = i;
                final long sent = System.nanoTime();
                producer.send(new ProducerRecord<>(topic, value), (md, e) -> {
                    if (e != null) {
                        failed.incrementAndGet();
                    }
                    latencyUs[n] = (int) Math.min(Integer.MAX_VALUE, (System.nanoTime() - sent) / 1000);
                });
            }
            producer.flush();
            double elapsed = (System.nanoTime() - start) / 1e9;
            int[] sorted = latencyUs.clone();
            Arrays.sort(sorted);
            System.out.printf("{\"rate\": %.1f, \"elapsed\": %.3f, \"p50\": %.3f, \"p99\": %.3f, "
                    + "\"failed\": %d}%n", records / elapsed, elapsed, sorted[records / 2] / 1000.0,
                    sorted[Math.min(records - 1, (int) (records * 0.99))] / 1000.0, failed.get());
        }
    }
}
