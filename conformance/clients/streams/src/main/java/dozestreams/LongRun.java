package dozestreams;

import java.io.File;
import java.io.IOException;
import java.io.PrintWriter;
import java.nio.file.Files;
import java.nio.file.StandardCopyOption;
import java.time.Duration;
import java.util.HashMap;
import java.util.Map;
import java.util.Properties;
import java.util.Random;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.atomic.AtomicLong;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.utils.Bytes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.KeyValue;
import org.apache.kafka.streams.StoreQueryParameters;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.Topology;
import org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.KGroupedStream;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.processor.StateRestoreListener;
import org.apache.kafka.streams.state.KeyValueIterator;
import org.apache.kafka.streams.state.KeyValueStore;
import org.apache.kafka.streams.state.QueryableStoreTypes;
import org.apache.kafka.streams.state.ReadOnlyKeyValueStore;

/**
 * The Kafka Streams side of conformance/compaction/longrun.py (compacted changelogs over a long run).
 *
 *   LongRun app --bootstrap H:P --app-id ID --input T --state-dir DIR --control-dir DIR --name N
 *               [--segment-ms 30000] [--delete-retention-ms 60000]
 *       input (key k%04d) -> groupByKey -> count() twice, into the RocksDB stores "counts" and
 *       "counts-default", exactly_once_v2, caching off (each input record is one record of each
 *       changelog). Streams creates the changelogs <ID>-counts-changelog and
 *       <ID>-counts-default-changelog with the store's topic configs (Materialized.withLoggingEnabled):
 *       both segment.ms, only the first delete.retention.ms (the other keeps the broker's, 24 h).
 *       Prints "restore-start|restore-batch|restore-end ..." from a StateRestoreListener and
 *       "state A -> B"; when control-dir/dump.request appears and the instance is RUNNING it writes
 *       each store to control-dir/dump-<store>.txt ("key count" lines, then "end N") and removes
 *       the request.
 *   LongRun produce --bootstrap H:P --input T --keys K --rate R --stop-file F [--seed 1]
 *       idempotent, acks=all; record i: key k%04d of a seeded uniform draw over K keys, value "v<i>";
 *       R records/s until F exists; prints "produced N" every 10 s and at the end.
 */
public class LongRun {
    static void say(String msg) {
        System.out.printf("%tT.%<tL %s%n", System.currentTimeMillis(), msg);
        System.out.flush();
    }

    public static void main(String[] args) throws Exception {
        Map<String, String> a = App.parse(java.util.Arrays.copyOfRange(args, 1, args.length));
        switch (args[0]) {
            case "app": app(a); break;
            case "produce": produce(a); break;
            default: throw new IllegalArgumentException(args[0]);
        }
    }

    static void app(Map<String, String> a) throws Exception {
        StreamsBuilder b = new StreamsBuilder();
        // two stores of the same counts, their changelogs differing only in delete.retention.ms
        Map<String, String> changelog = new HashMap<>(), changelogDefault = new HashMap<>();
        changelog.put("segment.ms", a.getOrDefault("segment-ms", "30000"));
        changelogDefault.put("segment.ms", a.getOrDefault("segment-ms", "30000"));
        changelog.put("delete.retention.ms", a.getOrDefault("delete-retention-ms", "60000"));
        KGroupedStream<String, String> grouped = b.stream(a.get("input"), Consumed.with(Serdes.String(), Serdes.String()))
         .groupByKey(Grouped.with(Serdes.String(), Serdes.String()));
        grouped.count(Materialized.<String, Long, KeyValueStore<Bytes, byte[]>>as("counts").withLoggingEnabled(changelog));
        grouped.count(Materialized.<String, Long, KeyValueStore<Bytes, byte[]>>as("counts-default")
                .withLoggingEnabled(changelogDefault));
        Topology topo = b.build();

        Properties p = App.eosStreams(a);
        p.put(StreamsConfig.consumerPrefix(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG), 10000);
        p.put(StreamsConfig.consumerPrefix(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG), 1000);
        p.put(StreamsConfig.producerPrefix(ProducerConfig.TRANSACTION_TIMEOUT_CONFIG), 10000);
        say("topology " + topo.describe().toString().replace('\n', ' '));

        KafkaStreams ks = new KafkaStreams(topo, p);
        CountDownLatch done = new CountDownLatch(1);
        ks.setStateListener((now, before) -> {
            say("state " + before + " -> " + now);
            if (now == KafkaStreams.State.ERROR || now == KafkaStreams.State.NOT_RUNNING) done.countDown();
        });
        ks.setGlobalStateRestoreListener(new StateRestoreListener() {
            public void onRestoreStart(TopicPartition tp, String store, long start, long end) {
                say("restore-start " + tp.topic() + " " + tp.partition() + " " + start + " " + end);
            }
            public void onBatchRestored(TopicPartition tp, String store, long batchEnd, long n) {
                say("restore-batch " + tp.topic() + " " + tp.partition() + " " + batchEnd + " " + n);
            }
            public void onRestoreEnd(TopicPartition tp, String store, long total) {
                say("restore-end " + tp.topic() + " " + tp.partition() + " " + total);
            }
        });
        ks.setUncaughtExceptionHandler(e -> {
            say("uncaught exception, replacing thread: " + e);
            e.printStackTrace(System.out);
            return StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse.REPLACE_THREAD;
        });
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            say("closing");
            ks.close(Duration.ofSeconds(20));
            done.countDown();
        }));
        ks.start();

        File control = new File(a.get("control-dir"));
        File request = new File(control, "dump.request");
        while (!done.await(200, java.util.concurrent.TimeUnit.MILLISECONDS)) {
            if (!request.exists() || ks.state() != KafkaStreams.State.RUNNING) continue;
            try {
                dump(ks, control, "counts");
                dump(ks, control, "counts-default");
                Files.deleteIfExists(request.toPath());
            } catch (Exception e) {                 // e.g. InvalidStateStoreException mid-rebalance: again
                say("dump failed, trying again: " + e);
            }
        }
        say("exit, state " + ks.state());
        System.exit(ks.state() == KafkaStreams.State.ERROR ? 1 : 0);
    }

    static void dump(KafkaStreams ks, File control, String name) throws IOException {
        ReadOnlyKeyValueStore<String, Long> store = ks.store(
                StoreQueryParameters.fromNameAndType(name, QueryableStoreTypes.keyValueStore()));
        File tmp = new File(control, "dump.tmp");
        long n = 0;
        try (PrintWriter w = new PrintWriter(tmp, "UTF-8");
             KeyValueIterator<String, Long> it = store.all()) {
            while (it.hasNext()) {
                KeyValue<String, Long> kv = it.next();
                w.println(kv.key + " " + kv.value);
                n++;
            }
            w.println("end " + n);
        }
        Files.move(tmp.toPath(), new File(control, "dump-" + name + ".txt").toPath(), StandardCopyOption.ATOMIC_MOVE);
        say("dumped " + n + " keys of " + name);
    }

    static void produce(Map<String, String> a) throws Exception {
        int keys = Integer.parseInt(a.get("keys"));
        double rate = Double.parseDouble(a.get("rate"));
        File stop = new File(a.get("stop-file"));
        Random rnd = new Random(Long.parseLong(a.getOrDefault("seed", "1")));
        Properties p = Tool.idempotentProducer(a.get("bootstrap"));
        AtomicLong acked = new AtomicLong(), failed = new AtomicLong();
        long t0 = System.nanoTime(), lastSay = System.currentTimeMillis(), i = 0;
        try (KafkaProducer<String, String> pr = new KafkaProducer<>(p)) {
            while (!stop.exists()) {
                long due = t0 + (long) (i / rate * 1e9);
                long now = System.nanoTime();
                if (due > now) Thread.sleep((due - now) / 1_000_000, (int) ((due - now) % 1_000_000));
                pr.send(new ProducerRecord<>(a.get("input"), String.format("k%04d", rnd.nextInt(keys)), "v" + i),
                        (md, e) -> (e == null ? acked : failed).incrementAndGet());
                i++;
                if (System.currentTimeMillis() - lastSay >= 10000) {
                    say("produced " + i + " acked " + acked.get() + " failed " + failed.get());
                    lastSay = System.currentTimeMillis();
                }
            }
            pr.flush();
        }
        say("produced " + i + " acked " + acked.get() + " failed " + failed.get() + " end");
        System.exit(failed.get() == 0 ? 0 : 1);
    }
}
