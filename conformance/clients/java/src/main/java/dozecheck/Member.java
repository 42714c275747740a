package dozecheck;

import java.io.*;
import java.time.Duration;
import java.util.*;
import java.util.stream.*;

import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.common.*;
import org.apache.kafka.common.errors.*;

/** A group member run as its own JVM. Prints one event per line on stdout:
 *    EV <epoch ms> <kind> <payload>
 *  kinds: READY, ASSIGN gen member parts | REVOKE parts | LOST parts | REC p offset value |
 *         COMMIT p=off,... | COMMITRETRY p=off,... | COMMITFAIL msg | STATE gen member parts | CLOSED
 *  Reads commands on stdin: "close" (or EOF) closes the consumer and exits. */
public class Member {
    static final PrintStream out = new PrintStream(new FileOutputStream(FileDescriptor.out), true);

    static synchronized void ev(String kind, String payload) {
        out.println("EV " + System.currentTimeMillis() + " " + kind + " " + payload);
        out.flush();
    }

    static String parts(Collection<TopicPartition> tps) {
        if (tps.isEmpty()) return "-";
        return tps.stream().map(TopicPartition::partition).sorted().map(String::valueOf).collect(Collectors.joining(","));
    }

    static String offs(Map<TopicPartition, OffsetAndMetadata> m) {
        return m.entrySet().stream().sorted(Comparator.comparingInt(e -> e.getKey().partition()))
            .map(e -> e.getKey().partition() + "=" + e.getValue().offset()).collect(Collectors.joining(","));
    }

    public static void run(Map<String, String> o) throws Exception {
        String bs = Main.need(o, "bootstrap");
        String group = Main.need(o, "group");
        String topic = Main.need(o, "topic");
        long life = Long.parseLong(o.getOrDefault("max-life-ms", "240000"));
        long processMs = Long.parseLong(o.getOrDefault("process-ms", "0"));
        Properties p = Main.consumerProps(bs, group);
        p.put(ConsumerConfig.PARTITION_ASSIGNMENT_STRATEGY_CONFIG, o.getOrDefault("strategy", "org.apache.kafka.clients.consumer.RangeAssignor"));
        p.put(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG, o.getOrDefault("session-ms", "8000"));
        p.put(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG, o.getOrDefault("heartbeat-ms", "1000"));
        p.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, "50");
        p.put(ConsumerConfig.CLIENT_ID_CONFIG, o.getOrDefault("name", "member"));
        if (o.containsKey("instance-id")) p.put(ConsumerConfig.GROUP_INSTANCE_ID_CONFIG, o.get("instance-id"));
        volatile_stop = false;
        Thread stdin = new Thread(() -> {
            try (BufferedReader r = new BufferedReader(new InputStreamReader(System.in))) {
                String line;
                while ((line = r.readLine()) != null) if (line.trim().equals("close")) break;
            } catch (IOException e) { /* treat as close */ }
            volatile_stop = true;
        }, "stdin");
        stdin.setDaemon(true);
        stdin.start();

        KafkaConsumer<String, String> c = new KafkaConsumer<>(p);
        Map<TopicPartition, OffsetAndMetadata> pending = new HashMap<>();
        final KafkaConsumer<String, String> cc = c;
        c.subscribe(List.of(topic), new ConsumerRebalanceListener() {
            public void onPartitionsRevoked(Collection<TopicPartition> parts) {
                Map<TopicPartition, OffsetAndMetadata> mine = new HashMap<>();
                for (TopicPartition tp : parts) if (pending.containsKey(tp)) mine.put(tp, pending.get(tp));
                if (!mine.isEmpty()) {
                    try { cc.commitSync(mine); ev("COMMIT", offs(mine) + " in-revoke"); }
                    catch (Exception e) { ev("COMMITFAIL", offs(mine) + " in-revoke " + e.getClass().getSimpleName() + ": " + e.getMessage()); }
                }
                for (TopicPartition tp : parts) pending.remove(tp);
                ev("REVOKE", parts(parts));
            }
            public void onPartitionsAssigned(Collection<TopicPartition> parts) {
                ConsumerGroupMetadata g = cc.groupMetadata();
                ev("ASSIGN", g.generationId() + " " + g.memberId() + " " + parts(parts) + " now=" + parts(cc.assignment()));
            }
            public void onPartitionsLost(Collection<TopicPartition> parts) {
                for (TopicPartition tp : parts) pending.remove(tp);
                ev("LOST", parts(parts));
            }
        });
        ev("READY", o.getOrDefault("name", "member"));
        long end = System.currentTimeMillis() + life, lastState = 0;
        while (!volatile_stop && System.currentTimeMillis() < end) {
            ConsumerRecords<String, String> recs;
            try {
                recs = c.poll(Duration.ofMillis(200));
            } catch (Exception e) {
                ev("POLLERR", e.getClass().getSimpleName() + ": " + e.getMessage());
                continue;
            }
            for (ConsumerRecord<String, String> r : recs) {
                ev("REC", r.partition() + " " + r.offset() + " " + r.value());
                pending.put(new TopicPartition(r.topic(), r.partition()), new OffsetAndMetadata(r.offset() + 1));
            }
            if (!recs.isEmpty() && processMs > 0) Thread.sleep(processMs);   // "processing" before the commit
            if (!pending.isEmpty()) {
                Map<TopicPartition, OffsetAndMetadata> toCommit = new HashMap<>(pending);
                try {
                    c.commitSync(toCommit);
                    ev("COMMIT", offs(toCommit));
                    for (Map.Entry<TopicPartition, OffsetAndMetadata> e : toCommit.entrySet())
                        pending.remove(e.getKey(), e.getValue());
                } catch (RebalanceInProgressException e) {
                    ev("COMMITRETRY", offs(toCommit) + " " + e.getClass().getSimpleName());
                } catch (Exception e) {
                    ev("COMMITFAIL", offs(toCommit) + " " + e.getClass().getSimpleName() + ": " + e.getMessage());
                }
            }
            long now = System.currentTimeMillis();
            if (now - lastState >= 1000) {
                lastState = now;
                ConsumerGroupMetadata g = c.groupMetadata();
                ev("STATE", g.generationId() + " " + g.memberId() + " " + parts(c.assignment()));
            }
        }
        c.close(Duration.ofSeconds(20));
        ev("CLOSED", "-");
    }

    static volatile boolean volatile_stop;
}
