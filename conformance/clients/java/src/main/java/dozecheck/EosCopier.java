package dozecheck;

import java.io.*;
import java.nio.charset.StandardCharsets;
import java.nio.file.*;
import java.time.Duration;
import java.util.*;
import java.util.concurrent.Future;

import org.apache.kafka.clients.CommonClientConfigs;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.*;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.internals.RecordHeader;
import org.apache.kafka.common.serialization.*;
import org.apache.kafka.common.utils.AppInfoParser;

/**
 * Exactly-once copier for the EOS matrix (conformance/clients/eos/runner.py, client "java"):
 * kafka-clients KafkaProducer transactions + a read_committed KafkaConsumer in a group.
 * Contract: conformance/clients/eos/copier_common.py.
 *
 *   java -cp ... dozecheck.EosCopier --bootstrap H:P --input IN --output OUT --group G
 *        --txn-id T --attempt A --status FILE [--abort-rate 0.125] [--max-batch 200] [--seed S]
 *        [--group-protocol classic|consumer]
 *
 * --group-protocol consumer (the runner's client "java-consumer"): the KafkaConsumer joins with
 * KIP-848's protocol (group.protocol=consumer, the AsyncKafkaConsumer: ConsumerGroupHeartbeat,
 * the broker assigns); groupMetadata() then carries the member id and member epoch that
 * sendOffsetsToTransaction puts in TxnOffsetCommit. session.timeout.ms and heartbeat.interval.ms
 * are the broker's then (kafka-clients refuses them with group.protocol=consumer).
 *
 * Runs until killed. SIGUSR1 prints the stacks of all threads (the runner sends it to a hung copier).
 */
public class EosCopier {
    static final Duration T = Duration.ofSeconds(30);   // each blocking transactional/consumer call

    // ------------------------------------------------------------------ status file

    static final class Status {
        final String path;
        final int attempt;
        final Random rnd;
        final double abortRate;
        int seq = 0;
        final String client, version;
        int commits = 0, aborts = 0, errorAborts = 0, errors = 0;
        final Map<String, Integer> committed = new LinkedHashMap<>(), aborted = new LinkedHashMap<>();
        String lastError = null;
        final double started = System.currentTimeMillis() / 1000.0;

        Status(Map<String, String> o, String client, String version) throws IOException {
            this.path = Main.need(o, "status");
            this.attempt = Integer.parseInt(o.getOrDefault("attempt", "1"));
            this.rnd = o.containsKey("seed") ? new Random(Long.parseLong(o.get("seed"))) : new Random();
            this.abortRate = Double.parseDouble(o.getOrDefault("abort-rate", "0.125"));
            this.client = client;
            this.version = version;
            write();
        }

        String[] nextTxn() {
            seq++;
            String plan = rnd.nextDouble() < abortRate ? "abort" : "commit";
            return new String[]{attempt + "." + seq, plan};
        }

        void committed(String tag, int n) { commits++; committed.put(tag, n); write(); }

        void aborted(String tag, int n) { aborts++; aborted.put(tag, n); write(); }

        void error(String what, Throwable e, boolean abortedTxn) {
            errors++;
            if (abortedTxn) errorAborts++;
            lastError = what + ": " + e;
            log("ERROR " + what + ": " + e);
            write();
        }

        void write() {
            StringBuilder b = new StringBuilder("{");
            b.append("\"client\": ").append(js(client)).append(", \"version\": ").append(js(version))
             .append(", \"attempt\": ").append(attempt).append(", \"commits\": ").append(commits)
             .append(", \"aborts\": ").append(aborts).append(", \"error_aborts\": ").append(errorAborts)
             .append(", \"errors\": ").append(errors)
             .append(", \"committed\": ").append(jmap(committed)).append(", \"aborted\": ").append(jmap(aborted))
             .append(", \"last_error\": ").append(lastError == null ? "null" : js(lastError))
             .append(", \"started\": ").append(started).append("}");
            try {
                Path tmp = Paths.get(path + ".tmp");
                Files.write(tmp, b.toString().getBytes(StandardCharsets.UTF_8));
                Files.move(tmp, Paths.get(path), StandardCopyOption.REPLACE_EXISTING, StandardCopyOption.ATOMIC_MOVE);
            } catch (IOException e) {
                throw new UncheckedIOException(e);
            }
        }

        static String jmap(Map<String, Integer> m) {
            StringBuilder b = new StringBuilder("{");
            for (Map.Entry<String, Integer> e : m.entrySet()) {
                if (b.length() > 1) b.append(", ");
                b.append(js(e.getKey())).append(": ").append(e.getValue());
            }
            return b.append("}").toString();
        }

        static String js(String s) {
            StringBuilder b = new StringBuilder("\"");
            for (char c : s.toCharArray()) {
                if (c == '"' || c == '\\') b.append('\\').append(c);
                else if (c < 0x20) b.append(String.format("\\u%04x", (int) c));
                else b.append(c);
            }
            return b.append('"').toString();
        }
    }

    static void log(String msg) {
        System.out.println(new java.text.SimpleDateFormat("HH:mm:ss").format(new Date()) + " " + msg);
        System.out.flush();
    }

    static void installStackDump() {
        try {
            sun.misc.Signal.handle(new sun.misc.Signal("USR1"), sig -> {
                StringBuilder b = new StringBuilder("---- SIGUSR1: thread dump\n");
                for (Map.Entry<Thread, StackTraceElement[]> e : Thread.getAllStackTraces().entrySet()) {
                    b.append('"').append(e.getKey().getName()).append("\" ").append(e.getKey().getState()).append('\n');
                    for (StackTraceElement s : e.getValue()) b.append("    at ").append(s).append('\n');
                }
                System.out.print(b);
                System.out.flush();
            });
        } catch (Throwable e) {
            log("no SIGUSR1 handler: " + e);
        }
    }

    // ------------------------------------------------------------------ the copier

    final Map<String, String> o;
    final Status st;
    final String bootstrap, input, output, group, txnId;
    final int attempt, maxBatch;
    final KafkaConsumer<byte[], byte[]> consumer;
    KafkaProducer<byte[], byte[]> producer;

    EosCopier(Map<String, String> o) throws IOException {
        this.o = o;
        bootstrap = Main.need(o, "bootstrap");
        input = Main.need(o, "input");
        output = Main.need(o, "output");
        group = Main.need(o, "group");
        txnId = Main.need(o, "txn-id");
        attempt = Integer.parseInt(o.getOrDefault("attempt", "1"));
        maxBatch = Integer.parseInt(o.getOrDefault("max-batch", "200"));
        String protocol = o.getOrDefault("group-protocol", "classic");
        if (!protocol.equals("classic") && !protocol.equals("consumer"))
            throw new IllegalArgumentException("--group-protocol classic|consumer, not " + protocol);
        boolean kip848 = protocol.equals("consumer");
        st = new Status(o, kip848 ? "java-consumer" : "java", "kafka-clients " + AppInfoParser.getVersion()
                        + (kip848 ? ", group.protocol=consumer" : ""));
        Properties c = clientProps("eos-java-c");
        c.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        c.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
        c.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        c.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        if (kip848) {
            c.put(ConsumerConfig.GROUP_PROTOCOL_CONFIG, "consumer");
        } else {
            c.put(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG, "10000");
            c.put(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG, "1000");
        }
        c.put(ConsumerConfig.MAX_POLL_INTERVAL_MS_CONFIG, "120000");
        c.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, Integer.toString(maxBatch));
        c.put(ConsumerConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "30000");
        c.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        c.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        secure(c);
        consumer = new KafkaConsumer<>(c);
    }

    /** What the consumer and the producer share: the broker, a client id (prefix + attempt),
     *  and, for one broker that restarts, requests that fail fast and reconnect soon. */
    Properties clientProps(String clientIdPrefix) {
        Properties p = new Properties();
        p.put(CommonClientConfigs.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(CommonClientConfigs.CLIENT_ID_CONFIG, clientIdPrefix + attempt);
        p.put(CommonClientConfigs.REQUEST_TIMEOUT_MS_CONFIG, "10000");
        p.put(CommonClientConfigs.RECONNECT_BACKOFF_MAX_MS_CONFIG, "1000");
        p.put(CommonClientConfigs.RETRY_BACKOFF_MAX_MS_CONFIG, "1000");
        return p;
    }

    /** The runner's --secure: the client settings (SASL_SSL, SCRAM, a PEM truststore) in the
     *  properties file EOS_CLIENT_PROPERTIES names (conformance/secure.py writes it). */
    static void secure(Properties props) {
        String file = System.getenv("EOS_CLIENT_PROPERTIES");
        if (file != null) try (Reader r = new FileReader(file)) { props.load(r); }
        catch (IOException e) { throw new UncheckedIOException(e); }
    }

    /** Close pr at once (nothing if null); a failure to close is logged. */
    static void closeNow(KafkaProducer<byte[], byte[]> pr) {
        if (pr == null) return;
        try { pr.close(Duration.ZERO); } catch (Exception e) { log("producer close: " + e); }
    }

    KafkaProducer<byte[], byte[]> newProducer() {
        closeNow(producer);
        producer = null;
        while (true) {
            Properties p = clientProps("eos-java-p");
            p.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, txnId);
            p.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true");
            p.put(ProducerConfig.ACKS_CONFIG, "all");
            p.put(ProducerConfig.TRANSACTION_TIMEOUT_CONFIG, "30000");
            p.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, "30000");
            p.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, "30000");
            p.put(ProducerConfig.LINGER_MS_CONFIG, "5");
            p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
            p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
            secure(p);
            KafkaProducer<byte[], byte[]> pr = null;
            try {
                pr = new KafkaProducer<>(p);
                pr.initTransactions();
                log("initTransactions ok");
                return pr;
            } catch (KafkaException e) {
                st.error("initTransactions", e, false);
                closeNow(pr);
                sleep(500);
            }
        }
    }

    /** Seek every assigned partition back to the group's committed offset. */
    void rewind() {
        while (true) {
            Set<TopicPartition> assignment = consumer.assignment();
            if (assignment.isEmpty()) {
                log("rewind: nothing assigned");
                return;
            }
            try {
                Map<TopicPartition, OffsetAndMetadata> committed = consumer.committed(assignment, T);
                StringBuilder done = new StringBuilder();
                for (TopicPartition tp : assignment) {
                    OffsetAndMetadata om = committed.get(tp);
                    long off = om != null && om.offset() >= 0 ? om.offset() : 0;
                    consumer.seek(tp, off);
                    done.append(' ').append(tp).append('@').append(off);
                }
                log("rewind:" + done);
                return;
            } catch (WakeupException | InterruptException e) {
                throw e;
            } catch (KafkaException e) {
                st.error("rewind", e, false);
                sleep(500);
            }
        }
    }

    /** Must the producer be replaced (fatal for this instance) rather than the transaction aborted? */
    static boolean fatal(Throwable e) {
        return e instanceof ProducerFencedException || e instanceof OutOfOrderSequenceException
            || e instanceof AuthorizationException || e instanceof UnsupportedVersionException
            || e instanceof InvalidTxnStateException || e instanceof FencedInstanceIdException
            || e instanceof UnsupportedForMessageFormatException || e instanceof IllegalStateException;
    }

    void run() {
        consumer.subscribe(Collections.singletonList(input), new ConsumerRebalanceListener() {
            public void onPartitionsRevoked(Collection<TopicPartition> parts) { log("revoked " + parts); }
            public void onPartitionsAssigned(Collection<TopicPartition> parts) { log("assigned " + parts); }
        });
        producer = newProducer();
        while (true) {
            ConsumerRecords<byte[], byte[]> polled;
            try {
                polled = consumer.poll(Duration.ofSeconds(1));
            } catch (KafkaException e) {
                st.error("poll", e, false);
                sleep(200);
                continue;
            }
            if (polled.isEmpty()) continue;
            // a random batch size, as the other copiers: take a prefix, seek back for the rest
            int want = 1 + st.rnd.nextInt(maxBatch);
            List<ConsumerRecord<byte[], byte[]>> msgs = new ArrayList<>();
            Map<TopicPartition, Long> firstLeft = new HashMap<>();
            for (ConsumerRecord<byte[], byte[]> r : polled) {
                TopicPartition tp = new TopicPartition(r.topic(), r.partition());
                if (msgs.size() < want && !firstLeft.containsKey(tp)) msgs.add(r);
                else firstLeft.putIfAbsent(tp, r.offset());
            }
            try {
                for (Map.Entry<TopicPartition, Long> e : firstLeft.entrySet()) consumer.seek(e.getKey(), e.getValue());
            } catch (IllegalStateException e) {   // partition no longer assigned
                log("seek back: " + e);
            }
            String[] tp2 = st.nextTxn();
            String tag = tp2[0], plan = tp2[1];
            Map<TopicPartition, OffsetAndMetadata> offsets = new HashMap<>();
            List<Future<RecordMetadata>> futures = new ArrayList<>();
            long t0 = System.nanoTime();
            long[] at = new long[3];
            try {
                producer.beginTransaction();
                for (ConsumerRecord<byte[], byte[]> m : msgs) {
                    List<Header> h = Arrays.asList(
                        new RecordHeader("src", (m.partition() + ":" + m.offset()).getBytes(StandardCharsets.UTF_8)),
                        new RecordHeader("txn", tag.getBytes(StandardCharsets.UTF_8)),
                        new RecordHeader("plan", plan.getBytes(StandardCharsets.UTF_8)));
                    futures.add(producer.send(new ProducerRecord<>(output, null, m.key(), m.value(), h)));
                    offsets.put(new TopicPartition(m.topic(), m.partition()), new OffsetAndMetadata(m.offset() + 1));
                }
                at[0] = System.nanoTime();
                producer.sendOffsetsToTransaction(offsets, consumer.groupMetadata());
                at[1] = System.nanoTime();
                if (plan.equals("abort")) {
                    producer.flush();                 // the records must reach the log first
                    for (Future<RecordMetadata> f : futures) {
                        try {
                            f.get();
                        } catch (java.util.concurrent.ExecutionException e) {
                            throw e.getCause() instanceof KafkaException ? (KafkaException) e.getCause()
                                : new KafkaException(e.getCause());
                        }
                    }
                    producer.abortTransaction();
                    st.aborted(tag, msgs.size());
                    rewind();
                    continue;
                }
                for (int i = 0; ; i++) {
                    try {
                        producer.commitTransaction();
                        break;
                    } catch (TimeoutException e) {   // the commit may be retried after a timeout
                        if (i >= 3) throw e;
                        st.error("commitTransaction (retrying)", e, false);
                    }
                }
                st.committed(tag, msgs.size());
                at[2] = System.nanoTime();
                if (at[2] - t0 > 1_000_000_000L)    // where a slow transaction spent its time
                    log(String.format("slow txn %s (%d records): send %d ms, sendOffsets %d ms, commit %d ms", tag,
                        msgs.size(), (at[0] - t0) / 1_000_000, (at[1] - at[0]) / 1_000_000, (at[2] - at[1]) / 1_000_000));
            } catch (InterruptedException e) {
                throw new RuntimeException(e);
            } catch (KafkaException | IllegalStateException e) {
                if (fatal(e) || e instanceof TimeoutException) {
                    // the outcome of a timed-out call is unknown: a new producer (initTransactions)
                    // fences this one and completes or aborts whatever it left open
                    st.error("txn " + tag + " (fatal)", e, false);
                    producer = newProducer();
                } else {
                    st.error("txn " + tag + " (abortable)", e, true);
                    try {
                        producer.abortTransaction();
                    } catch (KafkaException | IllegalStateException e2) {
                        st.error("abortTransaction", e2, false);
                        producer = newProducer();
                    }
                }
                rewind();
            }
        }
    }

    static void sleep(long ms) {
        try { Thread.sleep(ms); } catch (InterruptedException e) { throw new RuntimeException(e); }
    }

    public static void main(String[] argv) throws Exception {
        installStackDump();
        Map<String, String> o = Main.parseOpts(argv);
        new EosCopier(o).run();
    }
}
