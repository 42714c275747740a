package dozecheck;

import java.io.*;
import java.nio.file.*;
import java.util.*;
import java.util.concurrent.*;
import java.util.stream.*;

import org.apache.kafka.clients.admin.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.*;
import org.apache.kafka.common.serialization.*;

/** Entry point: java dozecheck.Main CHECK --bootstrap HOST:PORT [options]. */
public class Main {
    static final long T0 = System.currentTimeMillis();

    public static void main(String[] argv) throws Exception {
        if (argv.length < 1) usage();
        String check = argv[0];
        Map<String, String> opts = parseOpts(Arrays.copyOfRange(argv, 1, argv.length));
        // Every check is bounded: a watchdog ends the JVM if it runs far too long.
        long limitS = Long.parseLong(opts.getOrDefault("time-limit", "600"));
        Thread wd = new Thread(() -> {
            try { Thread.sleep(limitS * 1000); } catch (InterruptedException e) { return; }
            System.out.println("FAIL " + check + ": time limit of " + limitS + " s reached");
            System.out.flush();
            Runtime.getRuntime().halt(3);
        }, "watchdog");
        wd.setDaemon(true);
        wd.start();
        boolean ok;
        switch (check) {
            case "txn": ok = TxnCheck.run(opts); break;
            case "groups": ok = GroupsCheck.run(opts); break;
            case "static": ok = StaticCheck.run(opts); break;
            case "tools": ok = ToolsCheck.run(opts); break;
            case "compare-tools": ok = ToolsCheck.compare(opts); break;
            case "txnbench": ok = TxnBench.run(opts); break;         // figures: one-record transactions
            case "member": Member.run(opts); ok = true; break;      // child process used by groups/static
            case "hang": ToolsCheck.hang(opts); ok = true; break;    // child process used by tools
            default: usage(); ok = false;
        }
        System.out.flush();
        Runtime.getRuntime().halt(ok ? 0 : 1);   // do not wait for client threads
    }

    static void usage() {
        System.err.println("usage: run CHECK --bootstrap HOST:PORT [--key value ...]\n"
            + "  CHECK: txn | groups | static | tools | compare-tools --a DIR --b DIR | txnbench");
        System.exit(2);
    }

    static Map<String, String> parseOpts(String[] a) {
        Map<String, String> m = new LinkedHashMap<>();
        for (int i = 0; i < a.length; i++) {
            if (!a[i].startsWith("--")) throw new IllegalArgumentException("bad option " + a[i]);
            String k = a[i].substring(2);
            if (i + 1 < a.length && !a[i + 1].startsWith("--")) m.put(k, a[++i]);
            else m.put(k, "true");
        }
        return m;
    }

    static String need(Map<String, String> o, String k) {
        String v = o.get(k);
        if (v == null) throw new IllegalArgumentException("missing --" + k);
        return v;
    }

    static String tag() {
        return Long.toString(System.currentTimeMillis() % 100000000L, 36)
            + Integer.toString(new Random().nextInt(1296), 36);
    }

    static void log(String fmt, Object... args) {
        double t = (System.currentTimeMillis() - T0) / 1000.0;
        System.out.printf("[%7.2fs] %s%n", t, String.format(fmt, args));
        System.out.flush();
    }

    static Admin admin(String bootstrap) {
        Properties p = new Properties();
        p.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, "15000");
        p.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "30000");
        return Admin.create(p);
    }

    static void createTopics(Admin admin, int partitions, String... names) throws Exception {
        List<NewTopic> nt = new ArrayList<>();
        for (String n : names) nt.add(new NewTopic(n, partitions, (short) 1));
        admin.createTopics(nt).all().get(30, TimeUnit.SECONDS);
        // wait until metadata shows every partition with a leader
        long deadline = System.currentTimeMillis() + 20000;
        while (true) {
            try {
                Map<String, TopicDescription> d = admin.describeTopics(Arrays.asList(names)).allTopicNames().get(10, TimeUnit.SECONDS);
                boolean ok = d.values().stream().allMatch(td -> td.partitions().size() == partitions
                    && td.partitions().stream().allMatch(pi -> pi.leader() != null));
                if (ok) return;
            } catch (ExecutionException e) { /* not yet */ }
            if (System.currentTimeMillis() > deadline) throw new RuntimeException("topics not ready: " + Arrays.toString(names));
            Thread.sleep(200);
        }
    }

    static Properties producerProps(String bootstrap) {
        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        p.put(ProducerConfig.ACKS_CONFIG, "all");
        p.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true");
        p.put(ProducerConfig.LINGER_MS_CONFIG, "5");
        p.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, "60000");
        p.put(ProducerConfig.REQUEST_TIMEOUT_MS_CONFIG, "30000");
        p.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, "30000");
        return p;
    }

    static Properties consumerProps(String bootstrap, String group) {
        Properties p = new Properties();
        p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        if (group != null) p.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        p.put(ConsumerConfig.REQUEST_TIMEOUT_MS_CONFIG, "30000");
        p.put(ConsumerConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "30000");
        return p;
    }

    /** Reads every record of the given partitions from the beginning up to the end offsets seen
     *  by a consumer of that isolation level (LSO for read_committed). */
    static List<ConsumerRecord<String, String>> readAll(String bootstrap, Collection<TopicPartition> tps,
                                                         String isolation, long timeoutMs) {
        Properties p = consumerProps(bootstrap, null);
        p.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, isolation);
        List<ConsumerRecord<String, String>> out = new ArrayList<>();
        try (KafkaConsumer<String, String> c = new KafkaConsumer<>(p)) {
            c.assign(tps);
            c.seekToBeginning(tps);
            Map<TopicPartition, Long> end = c.endOffsets(tps);
            long deadline = System.currentTimeMillis() + timeoutMs;
            while (System.currentTimeMillis() < deadline) {
                boolean done = true;
                for (TopicPartition tp : tps) if (c.position(tp) < end.get(tp)) { done = false; break; }
                if (done) break;
                for (ConsumerRecord<String, String> r : c.poll(java.time.Duration.ofMillis(300))) out.add(r);
            }
        }
        return out;
    }

    static String fmtTps(Collection<TopicPartition> tps) {
        return tps.stream().sorted(Comparator.comparing(TopicPartition::topic).thenComparingInt(TopicPartition::partition))
            .map(tp -> tp.topic() + "-" + tp.partition()).collect(Collectors.joining(",", "[", "]"));
    }

    static String summary(boolean ok, String check, String msg) {
        return (ok ? "PASS " : "FAIL ") + check + ": " + msg;
    }
}
