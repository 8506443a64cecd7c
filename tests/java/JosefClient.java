// A small driver for the genuine Apache Kafka Java client (kafka-clients), used by the
// integration tests. Compiled by tests/integration/harness.py with the machine's javac.
//
//   produce --bootstrap B --topic T --count N [--compression none|gzip|snappy|lz4|zstd]
//           [--key-prefix P] [--headers] [--value-size S] [--null-values]
//           [--idempotence true|false] [--acks 0|1|all] [--partition P] [--linger-ms L]
//           [--timeout-ms T] [--delay-ms D] [--prop key=value]...
//     Sends N records; record i has key P+i (no key without --key-prefix), value of S bytes
//     (default 16) where byte j is (i + j) % 256 (null with --null-values), and with
//     --headers two headers: index=<i> and nothing=<null>. Without --idempotence the client's
//     default applies (enable.idempotence=true in 3.x). --delay-ms sleeps D ms after each
//     send (a slow stream the tests can disturb); --prop sets any other producer config.
//     Prints one line per acknowledged record as its callback fires,
//     "ack <i> <partition> <offset>" (or "fail <i> <exception>"), then "produced <N>" once
//     every record is acknowledged; exit code 1 if any record failed.
//
//   consume --bootstrap B --topic T --count N [--from-beginning] [--timeout-ms T]
//           [--group G]
//     Without --group, assigns every partition of T (no consumer group); with it, subscribes.
//     Prints one line per record:
//       <partition> <offset> <key|null> <value-length|-1> <crc32-hex|null> <headers>
//     where headers are k=v joined by "," (v "null" for a null value, "-" for no headers);
//     then "consumed <N>". Exits 2 if fewer than N records arrived within the timeout.
//
//   txn-produce --bootstrap B --topic T --count N --txn-id ID [--txn-size S]
//               [--abort-every K] [--partitions P]
//     Sends N records in transactions of S records (default 10); the K-th, 2K-th, ...
//     transaction is aborted after its records were flushed (K 0 = never). Record i goes to
//     partition i % P (default 1) with key "c<i>" in committed transactions and "a<i>" in
//     aborted ones and the usual value. Prints "committed-txn <n> <records>" /
//     "aborted-txn <n> <records>" per transaction, then "produced <N>".
//
//   txn-fence --bootstrap B --topic T --count 1 --txn-id ID [--late-send]
//     A producer begins a transaction and writes a record; a second producer with the same
//     transactional id initializes (fencing the first) and commits one record; the first
//     then (after one more send with --late-send) tries to commit. Prints "fenced <root
//     cause class>" (exit 0) or "not-fenced" (exit 1); with --late-send it then aborts, as
//     an application does after an abortable error: "aborted" or "abort-fenced <class>".
//
//   txn-copy --bootstrap B --topic IN --out OUT --group G --count N --txn-id ID
//     Consume-transform-produce: reads IN (read_committed, group G), writes each record to
//     OUT unchanged in transactions that also commit the consumer's offsets
//     (sendOffsetsToTransaction with the group metadata), until N records were copied or
//     --timeout-ms passed. Prints "copied <n>"; exit 2 when fewer than N arrived.
//   admin --bootstrap B --op create|describe|delete|elect-preferred|reassign|cluster
//         [--topic T] [--partitions N] [--replication-factor R] [--partition P]
//         [--replicas b1,b2,...] [--timeout-ms T]
//     The Java AdminClient: create a topic; describe it (one line per partition:
//     "partition <p> leader <id> replicas <ids> isr <ids>", ids comma-joined); delete it;
//     run a preferred election on all its partitions ("elected <p> <error|none>"); move a
//     partition's replicas (alterPartitionReassignments); "cluster" prints
//     "controller <id>" and "broker <id> <host>:<port> <rack|null>" lines.
//     --op may list several operations, comma-separated, run in order in one JVM. Prints
//     "ok <op>" after each; a failed operation is exit code 1.
//
// Exit codes: 0 success, 1 client error (stack trace on stderr), 2 timeout, 64 bad usage.

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.zip.CRC32;

import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.DescribeTopicsOptions;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.internals.RecordHeaders;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public final class JosefClient {
    private JosefClient() {}

    public static void main(String[] argv) {
        if (argv.length < 1) {
            usage("missing sub-command");
        }
        Map<String, String> opts = parseOptions(argv);
        try {
            int rc;
            switch (argv[0]) {
                case "produce": rc = produce(opts); break;
                case "consume": rc = consume(opts); break;
                case "describe-topics": rc = describeTopics(opts); break;
                case "txn-produce": rc = JosefTxn.produce(opts); break;
                case "txn-fence": rc = JosefTxn.fence(opts); break;
                case "txn-copy": rc = JosefTxn.copy(opts); break;
                case "admin": rc = admin(opts); break;
                default: usage("unknown sub-command " + argv[0]); return;
            }
            System.out.flush();
            System.exit(rc);
        } catch (Exception e) {
            e.printStackTrace();
            System.out.flush();
            System.exit(1);
        }
    }

    private static void usage(String why) {
        System.err.println("JosefClient: " + why);
        System.err.println("usage: JosefClient produce|consume --bootstrap B --topic T --count N ...");
        System.exit(64);
    }

    private static Map<String, String> parseOptions(String[] argv) {
        Map<String, String> opts = new HashMap<>();
        for (int i = 1; i < argv.length; i++) {
            String a = argv[i];
            if (!a.startsWith("--")) {
                usage("unexpected argument " + a);
            }
            String name = a.substring(2);
            boolean flag = name.equals("headers") || name.equals("null-values")
                || name.equals("from-beginning") || name.equals("late-send");
            if (flag) {
                opts.put(name, "true");
            } else if (name.equals("prop") && i + 1 < argv.length) {
                String kv = argv[++i];
                if (kv.indexOf('=') <= 0) {
                    usage("--prop wants key=value, got " + kv);
                }
                String prev = opts.get("prop");
                opts.put("prop", prev == null ? kv : prev + "\n" + kv);
            } else if (i + 1 < argv.length) {
                opts.put(name, argv[++i]);
            } else {
                usage("missing value for " + a);
            }
        }
        String[] requiredOpts = argv[0].equals("admin") ? new String[] {"bootstrap", "op"}
            : new String[] {"bootstrap", "topic", "count"};
        for (String required : requiredOpts) {
            if (!opts.containsKey(required)) {
                usage("missing --" + required);
            }
        }
        return opts;
    }

    /** Applies the newline-separated key=value pairs collected from --prop options. */
    static void applyProps(Properties p, Map<String, String> o) {
        String all = o.get("prop");
        if (all == null) {
            return;
        }
        for (String kv : all.split("\n")) {
            int eq = kv.indexOf('=');
            p.put(kv.substring(0, eq), kv.substring(eq + 1));
        }
    }

    static byte[] valueFor(int i, int size) {
        byte[] v = new byte[size];
        for (int j = 0; j < size; j++) {
            v[j] = (byte) ((i + j) % 256);
        }
        return v;
    }

    private static int produce(Map<String, String> o) throws Exception {
        int count = Integer.parseInt(o.get("count"));
        int valueSize = Integer.parseInt(o.getOrDefault("value-size", "16"));
        String keyPrefix = o.get("key-prefix");
        boolean headers = o.containsKey("headers");
        boolean nullValues = o.containsKey("null-values");
        Integer partition = o.containsKey("partition") ? Integer.valueOf(o.get("partition")) : null;
        int timeoutMs = Integer.parseInt(o.getOrDefault("timeout-ms", "30000"));

        Properties p = new Properties();
        p.put("bootstrap.servers", o.get("bootstrap"));
        p.put("client.id", "josef-java-producer");
        p.put("key.serializer", ByteArraySerializer.class.getName());
        p.put("value.serializer", ByteArraySerializer.class.getName());
        p.put("compression.type", o.getOrDefault("compression", "none"));
        if (o.containsKey("idempotence")) {
            p.put("enable.idempotence", o.get("idempotence"));
        }
        p.put("acks", o.getOrDefault("acks", "all"));
        p.put("linger.ms", o.getOrDefault("linger-ms", "5"));
        p.put("max.request.size", Integer.toString(Math.max(1048576, valueSize + 65536)));
        p.put("request.timeout.ms", Integer.toString(Math.max(1000, timeoutMs / 2)));
        p.put("delivery.timeout.ms", Integer.toString(timeoutMs));
        p.put("max.block.ms", Integer.toString(timeoutMs));
        long delayMs = Long.parseLong(o.getOrDefault("delay-ms", "0"));
        applyProps(p, o);

        AtomicInteger failed = new AtomicInteger();
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(p)) {
            for (int i = 0; i < count; i++) {
                byte[] key = keyPrefix == null ? null
                    : (keyPrefix + i).getBytes(StandardCharsets.UTF_8);
                byte[] value = nullValues ? null : valueFor(i, valueSize);
                RecordHeaders hs = new RecordHeaders();
                if (headers) {
                    hs.add("index", Integer.toString(i).getBytes(StandardCharsets.UTF_8));
                    hs.add("nothing", null);
                }
                final int index = i;
                producer.send(new ProducerRecord<>(o.get("topic"), partition, null, key, value, hs),
                    (md, e) -> {
                        synchronized (System.out) {
                            if (e != null) {
                                failed.incrementAndGet();
                                System.out.println("fail " + index + " " + e);
                            } else {
                                System.out.println("ack " + index + " " + md.partition() + " "
                                    + md.offset());
                            }
                            System.out.flush();
                        }
                    });
                if (delayMs > 0) {
                    Thread.sleep(delayMs);
                }
            }
            producer.flush();
        }
        if (failed.get() > 0) {
            System.err.println(failed.get() + " of " + count + " records failed");
            return 1;
        }
        System.out.println("produced " + count);
        return 0;
    }

    private static int consume(Map<String, String> o) {
        int count = Integer.parseInt(o.get("count"));
        long timeoutMs = Long.parseLong(o.getOrDefault("timeout-ms", "30000"));
        boolean fromBeginning = o.containsKey("from-beginning");
        String topic = o.get("topic");
        String group = o.get("group");

        Properties p = new Properties();
        p.put("bootstrap.servers", o.get("bootstrap"));
        p.put("client.id", "josef-java-consumer");
        p.put("key.deserializer", ByteArrayDeserializer.class.getName());
        p.put("value.deserializer", ByteArrayDeserializer.class.getName());
        p.put("auto.offset.reset", fromBeginning ? "earliest" : "latest");
        p.put("max.partition.fetch.bytes", "2097152");
        applyProps(p, o);
        if (group != null) {
            p.put("group.id", group);
        } else {
            p.put("enable.auto.commit", "false");
        }

        int got = 0;
        long deadline = System.currentTimeMillis() + timeoutMs;
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(p)) {
            if (group != null) {
                consumer.subscribe(Collections.singletonList(topic));
            } else {
                List<TopicPartition> tps = new ArrayList<>();
                for (PartitionInfo pi : consumer.partitionsFor(topic, Duration.ofMillis(timeoutMs))) {
                    tps.add(new TopicPartition(topic, pi.partition()));
                }
                consumer.assign(tps);
                if (fromBeginning) {
                    consumer.seekToBeginning(tps);
                } else {
                    consumer.seekToEnd(tps);
                }
            }
            while (got < count && System.currentTimeMillis() < deadline) {
                ConsumerRecords<byte[], byte[]> records = consumer.poll(Duration.ofMillis(200));
                for (ConsumerRecord<byte[], byte[]> r : records) {
                    System.out.println(describe(r));
                    got++;
                }
            }
        }
        System.out.println("consumed " + got);
        if (got < count) {
            System.err.println("timeout: got " + got + " of " + count + " records");
            return 2;
        }
        return 0;
    }

    private static String describe(ConsumerRecord<byte[], byte[]> r) {
        String key = r.key() == null ? "null" : new String(r.key(), StandardCharsets.UTF_8);
        String len = r.value() == null ? "-1" : Integer.toString(r.value().length);
        String crc = "null";
        if (r.value() != null) {
            CRC32 c = new CRC32();
            c.update(r.value());
            crc = String.format("%08x", c.getValue());
        }
        StringBuilder hs = new StringBuilder();
        for (Header h : r.headers()) {
            if (hs.length() > 0) {
                hs.append(',');
            }
            hs.append(h.key()).append('=')
              .append(h.value() == null ? "null" : new String(h.value(), StandardCharsets.UTF_8));
        }
        return r.partition() + " " + r.offset() + " " + key + " " + len + " " + crc + " "
            + (hs.length() == 0 ? "-" : hs.toString());
    }

    /** The transactional sub-commands (issue 14): txn-produce, txn-fence, txn-copy. */
    static final class JosefTxn {
        private JosefTxn() {}

        private static Properties producerProps(Map<String, String> o, String txnId) {
            Properties p = new Properties();
            p.put("bootstrap.servers", o.get("bootstrap"));
            p.put("key.serializer", ByteArraySerializer.class.getName());
            p.put("value.serializer", ByteArraySerializer.class.getName());
            p.put("transactional.id", txnId);
            p.put("linger.ms", "5");
            p.put("max.block.ms", o.getOrDefault("timeout-ms", "30000"));
            applyProps(p, o);
            return p;
        }

        static int produce(Map<String, String> o) {
            int count = Integer.parseInt(o.get("count"));
            int size = Integer.parseInt(o.getOrDefault("txn-size", "10"));
            int abortEvery = Integer.parseInt(o.getOrDefault("abort-every", "0"));
            int partitions = Integer.parseInt(o.getOrDefault("partitions", "1"));
            try (KafkaProducer<byte[], byte[]> producer =
                     new KafkaProducer<>(producerProps(o, o.get("txn-id")))) {
                producer.initTransactions();
                int txn = 0;
                for (int start = 0; start < count; start += size) {
                    txn++;
                    boolean abort = abortEvery > 0 && txn % abortEvery == 0;
                    int end = Math.min(count, start + size);
                    producer.beginTransaction();
                    for (int i = start; i < end; i++) {
                        byte[] key = ((abort ? "a" : "c") + i).getBytes(StandardCharsets.UTF_8);
                        producer.send(new ProducerRecord<>(o.get("topic"), i % partitions, key,
                                                           valueFor(i, 16)));
                    }
                    if (abort) {
                        producer.flush();
                        producer.abortTransaction();
                        System.out.println("aborted-txn " + txn + " " + (end - start));
                    } else {
                        producer.commitTransaction();
                        System.out.println("committed-txn " + txn + " " + (end - start));
                    }
                }
            }
            System.out.println("produced " + count);
            return 0;
        }

        static int fence(Map<String, String> o) {
            String topic = o.get("topic");
            KafkaProducer<byte[], byte[]> zombie = new KafkaProducer<>(producerProps(o, o.get("txn-id")));
            try {
                zombie.initTransactions();
                zombie.beginTransaction();
                zombie.send(new ProducerRecord<>(topic, "zombie".getBytes(StandardCharsets.UTF_8)));
                zombie.flush();
                try (KafkaProducer<byte[], byte[]> fresh =
                         new KafkaProducer<>(producerProps(o, o.get("txn-id")))) {
                    fresh.initTransactions();
                    fresh.beginTransaction();
                    fresh.send(new ProducerRecord<>(topic, "fresh".getBytes(StandardCharsets.UTF_8)));
                    fresh.commitTransaction();
                }
                try {
                    if (o.containsKey("late-send")) {
                        zombie.send(new ProducerRecord<>(topic, "late".getBytes(StandardCharsets.UTF_8)));
                    }
                    zombie.commitTransaction();
                } catch (Exception e) {
                    System.out.println("fenced " + rootCause(e));
                    if (o.containsKey("late-send")) {  // an abortable error: abort, as apps do
                        try {
                            zombie.abortTransaction();
                            System.out.println("aborted");
                        } catch (Exception e2) {
                            System.out.println("abort-fenced " + rootCause(e2));
                        }
                    }
                    return 0;
                }
                System.out.println("not-fenced");
                return 1;
            } finally {
                zombie.close(Duration.ofSeconds(5));
            }
        }

        private static String rootCause(Throwable t) {
            while (t.getCause() != null) {
                t = t.getCause();
            }
            return t.getClass().getSimpleName();
        }

        static int copy(Map<String, String> o) {
            int count = Integer.parseInt(o.get("count"));
            long timeoutMs = Long.parseLong(o.getOrDefault("timeout-ms", "60000"));
            Properties c = new Properties();
            c.put("bootstrap.servers", o.get("bootstrap"));
            c.put("group.id", o.get("group"));
            c.put("key.deserializer", ByteArrayDeserializer.class.getName());
            c.put("value.deserializer", ByteArrayDeserializer.class.getName());
            c.put("isolation.level", "read_committed");
            c.put("enable.auto.commit", "false");
            c.put("auto.offset.reset", "earliest");
            int copied = 0;
            long deadline = System.currentTimeMillis() + timeoutMs;
            try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(c);
                 KafkaProducer<byte[], byte[]> producer =
                     new KafkaProducer<>(producerProps(o, o.get("txn-id")))) {
                producer.initTransactions();
                consumer.subscribe(Collections.singletonList(o.get("topic")));
                while (copied < count && System.currentTimeMillis() < deadline) {
                    ConsumerRecords<byte[], byte[]> records = consumer.poll(Duration.ofMillis(200));
                    if (records.isEmpty()) {
                        continue;
                    }
                    producer.beginTransaction();
                    Map<TopicPartition, org.apache.kafka.clients.consumer.OffsetAndMetadata> offsets =
                        new HashMap<>();
                    for (ConsumerRecord<byte[], byte[]> r : records) {
                        producer.send(new ProducerRecord<>(o.get("out"), r.key(), r.value()));
                        offsets.put(new TopicPartition(r.topic(), r.partition()),
                            new org.apache.kafka.clients.consumer.OffsetAndMetadata(r.offset() + 1));
                        copied++;
                    }
                    producer.sendOffsetsToTransaction(offsets, consumer.groupMetadata());
                    producer.commitTransaction();
                }
            }
            System.out.println("copied " + copied);
            return copied < count ? 2 : 0;
        }
    }

    private static String ids(List<org.apache.kafka.common.Node> nodes) {
        StringBuilder b = new StringBuilder();
        for (org.apache.kafka.common.Node n : nodes) {
            if (b.length() > 0) {
                b.append(',');
            }
            b.append(n.id());
        }
        return b.toString();
    }

    private static int admin(Map<String, String> o) throws Exception {
        for (String op : o.get("op").split(",")) {
            adminOp(o, op.trim());
        }
        return 0;
    }

    private static void adminOp(Map<String, String> o, String op) throws Exception {
        String topic = o.get("topic");
        long timeoutMs = Long.parseLong(o.getOrDefault("timeout-ms", "30000"));
        Properties p = new Properties();
        p.put("bootstrap.servers", o.get("bootstrap"));
        p.put("client.id", "josef-java-admin");
        p.put("default.api.timeout.ms", Long.toString(timeoutMs));
        p.put("request.timeout.ms", Long.toString(Math.max(1000, timeoutMs / 2)));
        applyProps(p, o);
        java.util.concurrent.TimeUnit ms = java.util.concurrent.TimeUnit.MILLISECONDS;
        try (org.apache.kafka.clients.admin.Admin admin = org.apache.kafka.clients.admin.Admin.create(p)) {
            switch (op) {
                case "create": {
                    int partitions = Integer.parseInt(o.getOrDefault("partitions", "1"));
                    short rf = Short.parseShort(o.getOrDefault("replication-factor", "1"));
                    admin.createTopics(Collections.singletonList(
                        new org.apache.kafka.clients.admin.NewTopic(topic, partitions, rf)))
                        .all().get(timeoutMs, ms);
                    break;
                }
                case "describe": {
                    org.apache.kafka.clients.admin.TopicDescription d = admin
                        .describeTopics(Collections.singletonList(topic)).allTopicNames()
                        .get(timeoutMs, ms).get(topic);
                    for (org.apache.kafka.common.TopicPartitionInfo pi : d.partitions()) {
                        System.out.println("partition " + pi.partition() + " leader "
                            + (pi.leader() == null ? -1 : pi.leader().id()) + " replicas "
                            + ids(pi.replicas()) + " isr " + ids(pi.isr()));
                    }
                    break;
                }
                case "delete":
                    admin.deleteTopics(Collections.singletonList(topic)).all().get(timeoutMs, ms);
                    break;
                case "elect-preferred": {
                    org.apache.kafka.clients.admin.TopicDescription d = admin
                        .describeTopics(Collections.singletonList(topic)).allTopicNames()
                        .get(timeoutMs, ms).get(topic);
                    java.util.Set<TopicPartition> tps = new java.util.HashSet<>();
                    for (org.apache.kafka.common.TopicPartitionInfo pi : d.partitions()) {
                        tps.add(new TopicPartition(topic, pi.partition()));
                    }
                    Map<TopicPartition, java.util.Optional<Throwable>> res = admin
                        .electLeaders(org.apache.kafka.common.ElectionType.PREFERRED, tps)
                        .partitions().get(timeoutMs, ms);
                    for (Map.Entry<TopicPartition, java.util.Optional<Throwable>> e : res.entrySet()) {
                        System.out.println("elected " + e.getKey().partition() + " "
                            + e.getValue().map(t -> t.getClass().getSimpleName()).orElse("none"));
                    }
                    break;
                }
                case "reassign": {
                    List<Integer> replicas = new ArrayList<>();
                    for (String r : o.get("replicas").split(",")) {
                        replicas.add(Integer.valueOf(r.trim()));
                    }
                    TopicPartition tp = new TopicPartition(topic, Integer.parseInt(o.get("partition")));
                    admin.alterPartitionReassignments(Collections.singletonMap(tp,
                        java.util.Optional.of(new org.apache.kafka.clients.admin.NewPartitionReassignment(replicas))))
                        .all().get(timeoutMs, ms);
                    break;
                }
                case "cluster": {
                    org.apache.kafka.clients.admin.DescribeClusterResult c = admin.describeCluster();
                    System.out.println("controller " + c.controller().get(timeoutMs, ms).id());
                    for (org.apache.kafka.common.Node n : c.nodes().get(timeoutMs, ms)) {
                        System.out.println("broker " + n.id() + " " + n.host() + ":" + n.port()
                            + " " + (n.hasRack() ? n.rack() : "null"));
                    }
                    break;
                }
                default:
                    usage("unknown admin op " + op);
            }
        }
        System.out.println("ok " + op);
    }

    /**
     * describe-topics --bootstrap B --topic T1[,T2...] --count LIMIT: Admin.describeTopics
     * (DescribeTopicPartitions, KIP-966, with partitionSizeLimitPerResponse LIMIT, as Kafka
     * 4.0's kafka-topics.sh --describe). Prints "topic <name> <id> <partitions>" then one
     * "partition <name> <p> <leader> <isr size>" line per partition, then "described <N>".
     */
    private static int describeTopics(Map<String, String> o) throws Exception {
        Properties p = new Properties();
        p.put("bootstrap.servers", o.get("bootstrap"));
        applyProps(p, o);
        List<String> names = new ArrayList<>();
        for (String t : o.get("topic").split(",")) {
            names.add(t);
        }
        int total = 0;
        try (Admin admin = Admin.create(p)) {
            DescribeTopicsOptions options = new DescribeTopicsOptions()
                .partitionSizeLimitPerResponse(Integer.parseInt(o.get("count")));
            Map<String, TopicDescription> all = admin.describeTopics(names, options)
                .allTopicNames().get();
            for (String name : names) {
                TopicDescription d = all.get(name);
                System.out.println("topic " + d.name() + " " + d.topicId() + " "
                    + d.partitions().size());
                for (TopicPartitionInfo tp : d.partitions()) {
                    System.out.println("partition " + d.name() + " " + tp.partition() + " "
                        + tp.leader().id() + " " + tp.isr().size());
                    total++;
                }
            }
        }
        System.out.println("described " + total);
        return 0;
    }
}
