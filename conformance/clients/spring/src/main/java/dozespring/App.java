package dozespring;

import java.util.HashMap;
import java.util.Properties;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.atomic.AtomicLong;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;
import org.springframework.context.annotation.AnnotationConfigApplicationContext;
import org.springframework.context.annotation.Bean;
import org.springframework.context.annotation.Configuration;
import org.springframework.kafka.annotation.EnableKafka;
import org.springframework.kafka.annotation.KafkaListener;
import org.springframework.kafka.config.ConcurrentKafkaListenerContainerFactory;
import org.springframework.kafka.core.ConsumerFactory;
import org.springframework.kafka.core.DefaultKafkaConsumerFactory;
import org.springframework.kafka.core.DefaultKafkaProducerFactory;
import org.springframework.kafka.core.KafkaTemplate;
import org.springframework.kafka.core.ProducerFactory;
import org.springframework.kafka.listener.ContainerProperties;
import org.springframework.kafka.listener.DefaultAfterRollbackProcessor;
import org.springframework.kafka.listener.DefaultErrorHandler;
import org.springframework.kafka.transaction.KafkaTransactionManager;
import org.springframework.util.backoff.FixedBackOff;

/**
 * Spring Kafka (Boot 4.0.7 BOM: spring-kafka 4.0.6) exactly-once app, plain Spring context, no Boot runtime.
 *
 *   java dozespring.App --bootstrap H:P --group G --input IN --output OUT --side SIDE --run R
 *                       [--fail-every 50] [--concurrency 3] [--side-batches 40]
 *
 * (a) a transactional @KafkaListener (KafkaTransactionManager, read_committed, EOS V2) reads IN and for each
 *     record sends one record to OUT through the KafkaTemplate inside the container's transaction; the
 *     container sends the consumed offsets with that transaction. Records whose number % fail-every == 3
 *     fail on their first attempt only (after the send, so the rolled-back transaction holds a record):
 *     the transaction aborts and the record is retried (DefaultAfterRollbackProcessor / DefaultErrorHandler
 *     with a FixedBackOff).
 * (b) a side thread runs kafkaTemplate.executeInTransaction(...) batches of 5 records (key R-seq) to SIDE;
 *     every 5th batch throws after its sends (must abort). Prints SIDE-COMMITTED / SIDE-ABORTED / SIDE-DONE.
 */
public class App {
    static final Map<String, String> A = new HashMap<>();
    static final Set<String> failedOnce = ConcurrentHashMap.newKeySet();
    static final AtomicLong processed = new AtomicLong();

    static String arg(String k, String def) {
        String v = A.get(k);
        if (v == null && def == null) throw new IllegalArgumentException("missing --" + k);
        return v == null ? def : v;
    }

    @Configuration
    @EnableKafka
    public static class Config {
        @Bean
        public ProducerFactory<String, String> producerFactory() {
            Map<String, Object> p = new HashMap<>();
            p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, arg("bootstrap", null));
            p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class);
            p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class);
            p.put(ProducerConfig.ACKS_CONFIG, "all");
            p.put(ProducerConfig.TRANSACTION_TIMEOUT_CONFIG, 20000);
            security().forEach((k, v) -> p.put((String) k, v));
            DefaultKafkaProducerFactory<String, String> pf = new DefaultKafkaProducerFactory<>(p);
            // stable across restarts, so a restarted app fences its killed predecessor's transactional ids
            pf.setTransactionIdPrefix("spr-" + arg("group", null) + "-");
            return pf;
        }

        @Bean
        public KafkaTemplate<String, String> kafkaTemplate(ProducerFactory<String, String> pf) {
            return new KafkaTemplate<>(pf);
        }

        @Bean
        public KafkaTransactionManager<String, String> kafkaTransactionManager(ProducerFactory<String, String> pf) {
            return new KafkaTransactionManager<>(pf);
        }

        @Bean
        public ConsumerFactory<String, String> consumerFactory() {
            Map<String, Object> c = new HashMap<>();
            c.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, arg("bootstrap", null));
            c.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class);
            c.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class);
            c.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
            c.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
            c.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, false);
            c.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, 100);
            security().forEach((k, v) -> c.put((String) k, v));
            return new DefaultKafkaConsumerFactory<>(c);
        }

        @Bean
        public ConcurrentKafkaListenerContainerFactory<String, String> kcf(ConsumerFactory<String, String> cf,
                KafkaTransactionManager<String, String> tm) {
            ConcurrentKafkaListenerContainerFactory<String, String> f = new ConcurrentKafkaListenerContainerFactory<>();
            f.setConsumerFactory(cf);
            f.setConcurrency(Integer.parseInt(arg("concurrency", "3")));
            ContainerProperties props = f.getContainerProperties();
            props.setKafkaAwareTransactionManager(tm);
            props.setEosMode(ContainerProperties.EOSMode.V2);
            f.setCommonErrorHandler(new DefaultErrorHandler(new FixedBackOff(100L, 10L)));
            // with a transaction manager, a record listener's failure rolls back and goes here
            f.setAfterRollbackProcessor(new DefaultAfterRollbackProcessor<>(new FixedBackOff(100L, 10L)));
            return f;
        }

        @Bean
        public Listener listener(KafkaTemplate<String, String> t) {
            return new Listener(t);
        }
    }

    public static class Listener {
        final KafkaTemplate<String, String> template;
        final String output = arg("output", null);
        final String name = "run" + arg("run", null);
        final int failEvery = Integer.parseInt(arg("fail-every", "50"));

        Listener(KafkaTemplate<String, String> t) {
            template = t;
        }

        @KafkaListener(id = "${doze.group}", topics = "${doze.input}", containerFactory = "kcf")
        public void listen(ConsumerRecord<String, String> rec) {
            String k = rec.key();
            template.send(output, k, rec.value() + "|" + name + "|" + rec.partition() + ":" + rec.offset());
            int n = Integer.parseInt(k.substring(1));
            if (failEvery > 0 && n % failEvery == 3 && failedOnce.add(k)) {
                System.out.println("FAIL-ONCE " + k);
                throw new IllegalStateException("planned first-attempt failure of " + k);
            }
            long p = processed.incrementAndGet();
            if (p % 500 == 0) System.out.println("processed " + p);
        }
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

    public static void main(String[] argv) throws Exception {
        for (int i = 0; i + 1 < argv.length; i += 2) A.put(argv[i].replaceFirst("^--", ""), argv[i + 1]);
        System.setProperty("doze.group", arg("group", null));
        System.setProperty("doze.input", arg("input", null));
        AnnotationConfigApplicationContext ctx = new AnnotationConfigApplicationContext(Config.class);
        ctx.registerShutdownHook();
        System.out.println("STARTED run" + arg("run", null));
        @SuppressWarnings("unchecked")
        KafkaTemplate<String, String> template = ctx.getBean(KafkaTemplate.class);
        String side = arg("side", null), run = arg("run", null);
        int batches = Integer.parseInt(arg("side-batches", "40"));
        for (int seq = 0; seq < batches; seq++) {
            String batch = run + "-" + seq;
            boolean abort = seq % 5 == 4;
            try {
                template.executeInTransaction(t -> {
                    for (int j = 0; j < 5; j++) t.send(side, batch, batch + "-" + j);
                    if (abort) throw new IllegalStateException("planned abort of side batch " + batch);
                    return null;
                });
                System.out.println("SIDE-COMMITTED " + batch);
            } catch (RuntimeException e) {
                System.out.println((abort ? "SIDE-ABORTED " : "SIDE-ERROR ") + batch + " " + e);
            }
            Thread.sleep(100);
        }
        System.out.println("SIDE-DONE run" + run);
        new CountDownLatch(1).await();
    }
}
