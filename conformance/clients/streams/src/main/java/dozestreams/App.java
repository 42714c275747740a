package dozestreams;

import java.util.HashMap;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.Topology;
import org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;

/**
 * One Kafka Streams instance of the exactly-once check:
 *   input (key=record id, value=group key) -> selectKey(value) -> repartition topic
 *   -> count() (RocksDB store "counts", changelog topic) -> output (key=group key, value=count, Long).
 * Caching is off (statestore.cache.max.bytes=0), so every input record yields one output record
 * and the counts per key in the output must be 1, 2, 3, ... with no gap and no repeat.
 *
 *   App --bootstrap H:P --app-id ID --input T --output T --state-dir DIR --name NAME
 */
public class App {
    static Map<String, String> parse(String[] args) {
        Map<String, String> m = new HashMap<>();
        for (int i = 0; i + 1 < args.length; i += 2) m.put(args[i].replaceFirst("^--", ""), args[i + 1]);
        return m;
    }

    static void say(String name, String msg) {
        System.out.printf("%tT.%<tL [%s] %s%n", System.currentTimeMillis(), name, msg);
        System.out.flush();
    }

    /** The check's --secure: client settings (SASL_SSL, SCRAM, a PEM truststore) from the file
     *  EOS_CLIENT_PROPERTIES names (conformance/secure.py writes it); none without. */
    static Properties security() {
        Properties p = new Properties();
        String file = System.getenv("EOS_CLIENT_PROPERTIES");
        if (file != null) try (java.io.Reader r = new java.io.FileReader(file)) { p.load(r); }
        catch (java.io.IOException e) { throw new java.io.UncheckedIOException(e); }
        return p;
    }

    /** exactly_once_v2, caching off (each input record is one changelog record): --app-id,
     *  --bootstrap, --state-dir of a; also conformance/compaction's LongRun. */
    static Properties eosStreams(Map<String, String> a) {
        Properties p = new Properties();
        p.put(StreamsConfig.APPLICATION_ID_CONFIG, a.get("app-id"));
        p.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, a.get("bootstrap"));
        p.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.EXACTLY_ONCE_V2);
        p.put(StreamsConfig.STATE_DIR_CONFIG, a.get("state-dir"));
        p.put(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG, 0);
        return p;
    }

    public static void main(String[] args) throws Exception {
        Map<String, String> a = parse(args);
        String name = a.getOrDefault("name", "app");
        StreamsBuilder b = new StreamsBuilder();
        b.stream(a.get("input"), Consumed.with(Serdes.String(), Serdes.String()))
         .selectKey((k, v) -> v)
         .groupByKey(Grouped.with("rekey", Serdes.String(), Serdes.String()))
         .count(Materialized.as("counts"))
         .toStream()
         .to(a.get("output"), Produced.with(Serdes.String(), Serdes.Long()));
        Topology topo = b.build();

        Properties p = eosStreams(a);
        p.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, Integer.parseInt(a.getOrDefault("threads", "1")));
        p.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, 100);
        // purge consumed repartition records (DeleteRecords) every second, not every 30 s
        p.put(StreamsConfig.REPARTITION_PURGE_INTERVAL_MS_CONFIG, 1000);
        // replication.factor stays at its default -1 (broker default), on purpose
        p.put(StreamsConfig.consumerPrefix(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG), 10000);
        p.put(StreamsConfig.consumerPrefix(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG), 1000);
        p.put(StreamsConfig.producerPrefix(ProducerConfig.TRANSACTION_TIMEOUT_CONFIG), 10000);
        p.putAll(security());
        say(name, "topology " + topo.describe().toString().replace('\n', ' '));

        KafkaStreams ks = new KafkaStreams(topo, p);
        KafkaStreams[] holder = {ks};
        CountDownLatch done = new CountDownLatch(1);
        ks.setStateListener((now, before) -> {
            say(name, "state " + before + " -> " + now);
            if (now == KafkaStreams.State.RUNNING)
                holder[0].metadataForLocalThreads().forEach(t -> say(name, "thread " + t.threadName()
                        + " active " + t.activeTasks().stream().map(x -> x.taskId().toString()).sorted().toList()
                        + " standby " + t.standbyTasks().stream().map(x -> x.taskId().toString()).sorted().toList()));
            if (now == KafkaStreams.State.ERROR || now == KafkaStreams.State.NOT_RUNNING) done.countDown();
        });
        ks.setUncaughtExceptionHandler(e -> {
            say(name, "uncaught exception, replacing thread: " + e);
            e.printStackTrace(System.out);
            return StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse.REPLACE_THREAD;
        });
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            say(name, "closing");
            ks.close(java.time.Duration.ofSeconds(20));
            done.countDown();
        }));
        ks.start();
        done.await();
        say(name, "exit, state " + ks.state());
        System.exit(ks.state() == KafkaStreams.State.ERROR ? 1 : 0);
    }
}
