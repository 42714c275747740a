package dozestreams;

import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.TreeMap;
import java.util.concurrent.Future;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.LongDeserializer;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * Helpers for check.py.
 *   Tool topics  --bootstrap H:P --input T --output T          create both with 3 partitions, RF 1
 *   Tool produce --bootstrap H:P --input T --records N --keys K [--rate R]
 *        record i: key "r%06d", value "g%03d" of (i % K); idempotent, acks=all, R records/s
 *   Tool watch   --bootstrap H:P --output T --records N --keys K [--quiet-ms 5000] [--timeout-ms 600000]
 *        read_committed from offset 0; prints "progress <records>" lines; when every key reached its
 *        expected count and nothing new came for quiet-ms, prints "RESULT {json}" and exits 0 if ok.
 */
public class Tool {
    static void out(String s) { System.out.println(s); System.out.flush(); }

    public static void main(String[] args) throws Exception {
        Map<String, String> a = App.parse(java.util.Arrays.copyOfRange(args, 1, args.length));
        switch (args[0]) {
            case "topics": topics(a); break;
            case "produce": produce(a); break;
            case "watch": System.exit(watch(a)); break;
            default: throw new IllegalArgumentException(args[0]);
        }
    }

    static void topics(Map<String, String> a) throws Exception {
        Properties p = new Properties();
        p.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, a.get("bootstrap"));
        try (Admin ad = Admin.create(p)) {
            ad.createTopics(List.of(new NewTopic(a.get("input"), 3, (short) 1),
                                    new NewTopic(a.get("output"), 3, (short) 1))).all().get();
        }
        out("topics created");
    }

    /** An idempotent producer of String keys and values, acks=all; also LongRun's. */
    static Properties idempotentProducer(String bootstrap) {
        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ProducerConfig.ACKS_CONFIG, "all");
        p.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, true);
        p.put(ProducerConfig.LINGER_MS_CONFIG, 5);
        p.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, 300000);
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class);
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class);
        return p;
    }

    static void produce(Map<String, String> a) throws Exception {
        int n = Integer.parseInt(a.get("records")), k = Integer.parseInt(a.get("keys"));
        double rate = Double.parseDouble(a.getOrDefault("rate", "0"));
        Properties p = idempotentProducer(a.get("bootstrap"));
        long t0 = System.nanoTime();
        List<Future<RecordMetadata>> fs = new ArrayList<>();
        try (KafkaProducer<String, String> pr = new KafkaProducer<>(p)) {
            for (int i = 0; i < n; i++) {
                if (rate > 0) {
                    long due = t0 + (long) (i / rate * 1e9);
                    long now = System.nanoTime();
                    if (due > now) Thread.sleep((due - now) / 1_000_000, (int) ((due - now) % 1_000_000));
                }
                fs.add(pr.send(new ProducerRecord<>(a.get("input"), String.format("r%06d", i),
                                                    String.format("g%03d", i % k))));
            }
            pr.flush();
            for (Future<RecordMetadata> f : fs) f.get();
        }
        out("produced " + n);
    }

    static int watch(Map<String, String> a) throws Exception {
        int n = Integer.parseInt(a.get("records")), k = Integer.parseInt(a.get("keys"));
        long quiet = Long.parseLong(a.getOrDefault("quiet-ms", "5000"));
        long deadline = System.currentTimeMillis() + Long.parseLong(a.getOrDefault("timeout-ms", "600000"));
        String topic = a.get("output");
        Map<String, Long> expected = new TreeMap<>();
        for (int i = 0; i < n; i++) expected.merge(String.format("g%03d", i % k), 1L, Long::sum);
        Properties p = new Properties();
        p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, a.get("bootstrap"));
        p.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, false);
        p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class);
        p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, LongDeserializer.class);
        Map<String, Long> last = new TreeMap<>();
        Map<String, Integer> keyPart = new HashMap<>();
        List<String> violations = new ArrayList<>();
        long total = 0, lastNew = System.currentTimeMillis(), lastPrint = 0;
        boolean complete = false;
        List<TopicPartition> tps = new ArrayList<>();
        Map<String, Object> lso = new TreeMap<>(), hw = new TreeMap<>();
        try (KafkaConsumer<String, Long> c = new KafkaConsumer<>(p)) {
            for (PartitionInfo pi : c.partitionsFor(topic, Duration.ofSeconds(60)))
                tps.add(new TopicPartition(topic, pi.partition()));
            c.assign(tps);
            c.seekToBeginning(tps);
            while (System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<String, Long> r : c.poll(Duration.ofMillis(200))) {
                    total++;
                    lastNew = System.currentTimeMillis();
                    long prev = last.getOrDefault(r.key(), 0L);
                    long v = r.value();
                    if (v != prev + 1 && violations.size() < 50)
                        violations.add(String.format("%s: %d after %d at %d:%d (%s)", r.key(), v, prev,
                                r.partition(), r.offset(), v <= prev ? "duplicate" : "gap"));
                    last.put(r.key(), Math.max(prev, v));
                    Integer kp = keyPart.putIfAbsent(r.key(), r.partition());
                    if (kp != null && kp != r.partition() && violations.size() < 50)
                        violations.add(r.key() + " on partitions " + kp + " and " + r.partition());
                }
                long now = System.currentTimeMillis();
                if (now - lastPrint >= 300) { out("progress " + total); lastPrint = now; }
                complete = last.equals(expected);
                if (complete && now - lastNew >= quiet) break;
            }
            // no transaction left open: LSO (read_committed end offset) == high watermark
            Map<TopicPartition, Long> e1 = c.endOffsets(tps);
            for (TopicPartition tp : tps) lso.put(String.valueOf(tp.partition()), e1.get(tp));
        }
        long uncommitted = 0;
        Properties pu = new Properties();
        pu.putAll(p);
        pu.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_uncommitted");
        pu.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class);
        pu.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class);
        try (KafkaConsumer<byte[], byte[]> c = new KafkaConsumer<>(pu)) {
            Map<TopicPartition, Long> e2 = c.endOffsets(tps);
            for (TopicPartition tp : tps) hw.put(String.valueOf(tp.partition()), e2.get(tp));
            // informational: records in the log, aborted ones included (read_uncommitted up to the HW)
            c.assign(tps);
            c.seekToBeginning(tps);
            long until = System.currentTimeMillis() + 60000;
            while (System.currentTimeMillis() < until) {
                uncommitted += c.poll(Duration.ofMillis(200)).count();
                boolean atEnd = true;
                for (TopicPartition tp : tps) if (c.position(tp) < e2.get(tp)) atEnd = false;
                if (atEnd) break;
            }
        }
        int wrongKeys = 0;
        StringBuilder wrong = new StringBuilder();
        for (Map.Entry<String, Long> e : expected.entrySet()) {
            Long got = last.get(e.getKey());
            if (!e.getValue().equals(got)) {
                if (wrongKeys++ < 10) wrong.append(String.format("\"%s: want %d got %s\",", e.getKey(), e.getValue(), got));
            }
        }
        for (String key : last.keySet()) if (!expected.containsKey(key)) wrongKeys++;
        boolean ok = complete && violations.isEmpty() && wrongKeys == 0 && total == n && lso.equals(hw);
        StringBuilder vs = new StringBuilder();
        for (String v : violations) vs.append('"').append(v.replace("\"", "'")).append("\",");
        out(String.format("RESULT {\"ok\": %s, \"complete\": %s, \"output_records\": %d, \"expected_records\": %d, "
                + "\"keys_seen\": %d, \"keys_wrong\": %d, \"wrong\": [%s], \"violations\": [%s], "
                + "\"lso\": %s, \"hw\": %s, \"read_uncommitted_records\": %d}",
                ok, complete, total, n, last.size(), wrongKeys, strip(wrong), strip(vs), json(lso), json(hw), uncommitted));
        return ok ? 0 : 1;
    }

    static String strip(StringBuilder b) { return b.length() > 0 ? b.substring(0, b.length() - 1) : ""; }

    static String json(Map<String, Object> m) {
        StringBuilder b = new StringBuilder("{");
        for (Map.Entry<String, Object> e : m.entrySet())
            b.append('"').append(e.getKey()).append("\": ").append(e.getValue()).append(", ");
        if (b.length() > 1) b.setLength(b.length() - 2);
        return b.append('}').toString();
    }
}
