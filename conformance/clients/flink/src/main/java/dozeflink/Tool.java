package dozeflink;

import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.ExecutionException;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.TopicExistsException;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * Helpers for check.py (plain kafka-clients, the version the connector brings):
 *   Tool produce --bootstrap H:P --input T --output T --records N [--partitions 3]
 *        creates both topics, writes N records (key k%06d, value v%06d), idempotent, acks=all
 *   Tool verify  --bootstrap H:P --output T --records N [--timeout-ms 60000]
 *        reads the output with read_committed from offset 0 up to the LSO, prints
 *        "RESULT {json}": each out-v%06d exactly once, nothing else, and LSO == high watermark.
 */
public class Tool {
    static Map<String, String> parse(String[] argv) {
        Map<String, String> m = new HashMap<>();
        for (int i = 0; i + 1 < argv.length; i += 2) {
            m.put(argv[i].replaceFirst("^--", ""), argv[i + 1]);
        }
        return m;
    }

    public static void main(String[] argv) throws Exception {
        Map<String, String> a = parse(java.util.Arrays.copyOfRange(argv, 1, argv.length));
        switch (argv[0]) {
            case "produce": produce(a); break;
            case "verify": verify(a); break;
            default: throw new IllegalArgumentException(argv[0]);
        }
    }

    static void produce(Map<String, String> a) throws Exception {
        int parts = Integer.parseInt(a.getOrDefault("partitions", "3"));
        Properties p = new Properties();
        p.put("bootstrap.servers", a.get("bootstrap"));
        try (Admin admin = Admin.create(p)) {
            for (String t : new String[]{a.get("input"), a.get("output")}) {
                try {
                    admin.createTopics(List.of(new NewTopic(t, parts, (short) 1))).all().get();
                } catch (ExecutionException e) {
                    if (!(e.getCause() instanceof TopicExistsException)) throw e;
                }
            }
        }
        p.put("acks", "all");
        p.put("enable.idempotence", "true");
        p.put("linger.ms", "5");
        int n = Integer.parseInt(a.get("records"));
        try (KafkaProducer<String, String> prod = new KafkaProducer<>(p, new StringSerializer(), new StringSerializer())) {
            for (int i = 0; i < n; i++) {
                prod.send(new ProducerRecord<>(a.get("input"), String.format("k%06d", i), String.format("v%06d", i)));
            }
            prod.flush();
        }
        System.out.println("produced " + n);
    }

    static void verify(Map<String, String> a) throws Exception {
        int n = Integer.parseInt(a.get("records"));
        long timeoutMs = Long.parseLong(a.getOrDefault("timeout-ms", "60000"));
        String topic = a.get("output");
        Properties p = new Properties();
        p.put("bootstrap.servers", a.get("bootstrap"));
        p.put("isolation.level", "read_committed");
        p.put("enable.auto.commit", "false");
        p.put("max.poll.records", "2000");
        int[] seen = new int[n];
        long total = 0, unexpected = 0;
        List<String> samples = new ArrayList<>();
        Map<TopicPartition, Long> lso, hw;
        try (KafkaConsumer<String, String> c = new KafkaConsumer<>(p, new StringDeserializer(), new StringDeserializer())) {
            List<TopicPartition> tps = new ArrayList<>();
            for (PartitionInfo pi : c.partitionsFor(topic)) tps.add(new TopicPartition(topic, pi.partition()));
            c.assign(tps);
            c.seekToBeginning(tps);
            lso = c.endOffsets(tps);            // read_committed: the last stable offset
            long deadline = System.currentTimeMillis() + timeoutMs;
            while (System.currentTimeMillis() < deadline) {
                boolean done = true;
                for (TopicPartition tp : tps) if (c.position(tp) < lso.get(tp)) done = false;
                if (done) break;
                for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(500))) {
                    total++;
                    String v = r.value();
                    int i = -1;
                    if (v != null && v.startsWith("out-v")) {
                        try { i = Integer.parseInt(v.substring(5)); } catch (NumberFormatException e) { i = -1; }
                    }
                    if (i < 0 || i >= n) {
                        unexpected++;
                        if (samples.size() < 10) samples.add("unexpected " + v + " @" + r.partition() + ":" + r.offset());
                    } else {
                        seen[i]++;
                        if (seen[i] == 2 && samples.size() < 10) samples.add("duplicate " + v + " @" + r.partition() + ":" + r.offset());
                    }
                }
            }
        }
        p.put("isolation.level", "read_uncommitted");
        try (KafkaConsumer<String, String> c = new KafkaConsumer<>(p, new StringDeserializer(), new StringDeserializer())) {
            hw = c.endOffsets(new ArrayList<>(lso.keySet()));
        }
        long missing = 0, dups = 0;
        for (int i = 0; i < n; i++) {
            if (seen[i] == 0) { missing++; if (samples.size() < 10) samples.add("missing out-" + String.format("v%06d", i)); }
            if (seen[i] > 1) dups += seen[i] - 1;
        }
        long lsoSum = lso.values().stream().mapToLong(Long::longValue).sum();
        long hwSum = hw.values().stream().mapToLong(Long::longValue).sum();
        boolean ok = missing == 0 && dups == 0 && unexpected == 0 && lsoSum == hwSum;
        StringBuilder s = new StringBuilder();
        s.append("{\"ok\": ").append(ok).append(", \"output_records\": ").append(total)
         .append(", \"missing\": ").append(missing).append(", \"duplicates\": ").append(dups)
         .append(", \"unexpected\": ").append(unexpected).append(", \"lso\": ").append(lsoSum)
         .append(", \"hw\": ").append(hwSum).append(", \"samples\": [");
        for (int i = 0; i < samples.size(); i++) s.append(i > 0 ? ", " : "").append('"').append(samples.get(i)).append('"');
        s.append("]}");
        System.out.println("RESULT " + s);
    }
}
