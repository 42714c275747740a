package dozeflink;

import java.util.HashMap;
import java.util.Properties;
import java.util.Map;

import org.apache.flink.api.common.eventtime.WatermarkStrategy;
import org.apache.flink.api.common.functions.RichMapFunction;
import org.apache.flink.api.common.serialization.SimpleStringSchema;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.connector.base.DeliveryGuarantee;
import org.apache.flink.connector.kafka.sink.KafkaRecordSerializationSchema;
import org.apache.flink.connector.kafka.sink.KafkaSink;
import org.apache.flink.connector.kafka.source.KafkaSource;
import org.apache.flink.connector.kafka.source.enumerator.initializer.OffsetsInitializer;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;

/**
 * The exactly-once job, run in a local MiniCluster inside this JVM:
 *   KafkaSource(input, read_committed, earliest .. latest-at-start: bounded)
 *     -> map(v -> "out-" + v, with a per-record delay so a kill can land mid-way)
 *     -> KafkaSink(output, EXACTLY_ONCE, transactional id prefix, transaction.timeout.ms 15 min).
 * Checkpoints every --interval-ms to --checkpoint-dir (retained on cancellation, 3 kept);
 * --restore DIR starts from a retained checkpoint (a chk-N directory).
 *
 *   FlinkJob --bootstrap H:P --input T --output T --prefix P --checkpoint-dir DIR
 *            [--restore DIR] [--parallelism 2] [--delay-ms 4] [--interval-ms 1000] [--group G]
 */
public class FlinkJob {
    /** The check's --secure: client settings (SASL_SSL, SCRAM, a PEM truststore) from the file
     *  EOS_CLIENT_PROPERTIES names (conformance/secure.py writes it); none without. */
    static Properties security() {
        Properties p = new Properties();
        String file = System.getenv("EOS_CLIENT_PROPERTIES");
        if (file != null) try (java.io.Reader r = new java.io.FileReader(file)) { p.load(r); }
        catch (java.io.IOException e) { throw new java.io.UncheckedIOException(e); }
        return p;
    }

    public static void main(String[] argv) throws Exception {
        Map<String, String> a = Tool.parse(argv);
        String bootstrap = a.get("bootstrap");
        int parallelism = Integer.parseInt(a.getOrDefault("parallelism", "2"));
        long delayMs = Long.parseLong(a.getOrDefault("delay-ms", "4"));
        long interval = Long.parseLong(a.getOrDefault("interval-ms", "1000"));

        Map<String, String> c = new HashMap<>();
        c.put("execution.checkpointing.interval", interval + " ms");
        c.put("execution.checkpointing.mode", "EXACTLY_ONCE");
        c.put("execution.checkpointing.dir", "file://" + a.get("checkpoint-dir"));
        c.put("execution.checkpointing.storage", "filesystem");
        c.put("execution.checkpointing.externalized-checkpoint-retention", "RETAIN_ON_CANCELLATION");
        c.put("execution.checkpointing.num-retained", "3");
        c.put("restart-strategy.type", "fixed-delay");
        c.put("restart-strategy.fixed-delay.attempts", "1000");
        c.put("restart-strategy.fixed-delay.delay", "2 s");
        c.put("rest.bind-port", "0");
        if (a.containsKey("restore")) {
            c.put("execution.state-recovery.path", "file://" + a.get("restore"));
        }
        Configuration conf = Configuration.fromMap(c);
        StreamExecutionEnvironment env = StreamExecutionEnvironment.getExecutionEnvironment(conf);
        env.setParallelism(parallelism);

        Properties secure = security();
        KafkaSource<String> source = KafkaSource.<String>builder()
                .setProperties(secure)
                .setBootstrapServers(bootstrap)
                .setTopics(a.get("input"))
                .setGroupId(a.getOrDefault("group", "flink-eos-" + a.get("prefix")))
                .setStartingOffsets(OffsetsInitializer.earliest())
                .setBounded(OffsetsInitializer.latest())
                .setValueOnlyDeserializer(new SimpleStringSchema())
                .setProperty("isolation.level", "read_committed")
                .build();

        KafkaSink<String> sink = KafkaSink.<String>builder()
                .setKafkaProducerConfig(secure)
                .setBootstrapServers(bootstrap)
                .setRecordSerializer(KafkaRecordSerializationSchema.builder()
                        .setTopic(a.get("output"))
                        .setValueSerializationSchema(new SimpleStringSchema())
                        .build())
                .setDeliveryGuarantee(DeliveryGuarantee.EXACTLY_ONCE)
                .setTransactionalIdPrefix(a.get("prefix"))
                // Flink's default (1 h) is above the broker default transaction.max.timeout.ms (15 min)
                .setProperty("transaction.timeout.ms", "900000")
                .build();

        env.fromSource(source, WatermarkStrategy.noWatermarks(), "kafka-in")
                .map(new Slow(delayMs)).name("map")
                .sinkTo(sink).name("kafka-out");
        System.out.println("JOB starting" + (a.containsKey("restore") ? " from " + a.get("restore") : ""));
        System.out.flush();
        env.execute("doze-flink-eos-" + a.get("prefix"));
        System.out.println("JOB finished");
        System.out.flush();
    }

    static class Slow extends RichMapFunction<String, String> {
        private final long delayMs;

        Slow(long delayMs) {
            this.delayMs = delayMs;
        }

        @Override
        public String map(String v) throws Exception {
            if (delayMs > 0) {
                Thread.sleep(delayMs);
            }
            return "out-" + v;
        }
    }
}
