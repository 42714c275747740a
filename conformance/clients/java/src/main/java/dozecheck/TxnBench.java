package dozecheck;

import java.lang.reflect.Field;
import java.util.*;
import java.util.concurrent.*;

import org.apache.kafka.clients.admin.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.clients.producer.internals.TransactionManager;

import static dozecheck.Main.log;

/**
 * txnbench: one-record transactions back to back with one transactional KafkaProducer
 * (acks=all, idempotent, linger.ms 0, a fresh transactional.id): beginTransaction, send one
 * 100-byte record (partition i % 3 of a 3-partition topic), commitTransaction. After --warmup
 * transactions (not measured) it times --txns more and prints transactions/s (wall time of the
 * measured ones, begin to commit) and the p50/p99 of commitTransaction() in ms.
 *
 * Which protocol the producer used: its TransactionManager decides from the finalized
 * transaction.version that ApiVersions gave it (at initTransactions and at each commit or
 * abort); the check reads that decision, isTransactionV2Enabled(), through reflection (the
 * producer's private transactionManager field) after each beginTransaction and each
 * commitTransaction, and counts the measured transactions for which it was true both times.
 * The broker's side: DescribeTransactions' producer epoch at the end (transaction version 2
 * bumps it at every commit, so it is about warmup + txns; the classic protocol leaves it at the
 * epoch initTransactions got, 0 for a fresh id).
 *
 * One line for scripts: RESULT txns=N warmup=N seconds=S txn_per_s=R commit_p50_ms=X
 * commit_p99_ms=Y tv2=true|false|mixed tv2_txns=K epoch=E.
 */
public class TxnBench {
    public static boolean run(Map<String, String> o) throws Exception {
        String bs = Main.need(o, "bootstrap");
        int txns = Integer.parseInt(o.getOrDefault("txns", "2000"));
        int warmup = Integer.parseInt(o.getOrDefault("warmup", "300"));
        int size = Integer.parseInt(o.getOrDefault("size", "100"));
        int partitions = 3;
        String tag = o.getOrDefault("tag", Main.tag());
        String topic = "txnbench-" + tag, txnId = "txnbench-id-" + tag;
        byte[] value = new byte[size];
        new Random(42).nextBytes(value);

        try (Admin admin = Main.admin(bs)) {
            Main.createTopics(admin, partitions, topic);
            log("created topic %s (%d partitions, RF 1); transactional.id %s", topic, partitions, txnId);

            Properties pp = Main.producerProps(bs);
            pp.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, "org.apache.kafka.common.serialization.ByteArraySerializer");
            pp.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, "org.apache.kafka.common.serialization.ByteArraySerializer");
            pp.put(ProducerConfig.LINGER_MS_CONFIG, "0");
            pp.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, txnId);
            pp.put(ProducerConfig.TRANSACTION_TIMEOUT_CONFIG, "60000");
            long[] commitNs = new long[txns];
            int tv2Txns = 0, tv1Txns = 0;
            long t0, elapsedNs;
            try (KafkaProducer<byte[], byte[]> prod = new KafkaProducer<>(pp)) {
                Field f = KafkaProducer.class.getDeclaredField("transactionManager");
                f.setAccessible(true);
                TransactionManager tm = (TransactionManager) f.get(prod);
                prod.initTransactions();
                log("initTransactions done; the producer's isTransactionV2Enabled() = %s", tm.isTransactionV2Enabled());
                for (int i = 0; i < warmup; i++) {
                    prod.beginTransaction();
                    prod.send(new ProducerRecord<>(topic, i % partitions, null, value));
                    prod.commitTransaction();
                }
                log("warm-up: %d transactions; isTransactionV2Enabled() = %s", warmup, tm.isTransactionV2Enabled());
                t0 = System.nanoTime();
                for (int i = 0; i < txns; i++) {
                    prod.beginTransaction();
                    boolean v2 = tm.isTransactionV2Enabled();
                    prod.send(new ProducerRecord<>(topic, i % partitions, null, value));
                    long c0 = System.nanoTime();
                    prod.commitTransaction();
                    commitNs[i] = System.nanoTime() - c0;
                    if (v2 && tm.isTransactionV2Enabled()) tv2Txns++;
                    else if (!v2 && !tm.isTransactionV2Enabled()) tv1Txns++;
                }
                elapsedNs = System.nanoTime() - t0;
            }
            // the broker's view: the producer epoch of the (now complete) transactional id
            int epoch = -1;
            try {
                TransactionDescription d = admin.describeTransactions(List.of(txnId)).description(txnId).get(30, TimeUnit.SECONDS);
                epoch = d.producerEpoch();
                log("DescribeTransactions %s: state %s, producer id %d, epoch %d", txnId, d.state(), d.producerId(), epoch);
            } catch (ExecutionException e) {
                log("DescribeTransactions %s failed: %s", txnId, e.getCause());
            }
            long[] sorted = commitNs.clone();
            Arrays.sort(sorted);
            double secs = elapsedNs / 1e9, rate = txns / secs;
            double p50 = pct(sorted, 0.50) / 1e6, p99 = pct(sorted, 0.99) / 1e6, max = sorted[txns - 1] / 1e6;
            String tv2 = tv2Txns == txns ? "true" : tv1Txns == txns ? "false" : "mixed";
            log("%d transactions in %.2f s: %.1f transactions/s; commitTransaction() p50 %.2f ms, p99 %.2f ms, max %.2f ms",
                txns, secs, rate, p50, p99, max);
            log("protocol: transaction version 2 (isTransactionV2Enabled) in %d of %d transactions, classic in %d",
                tv2Txns, txns, tv1Txns);
            System.out.printf(Locale.ROOT, "RESULT txns=%d warmup=%d seconds=%.3f txn_per_s=%.2f commit_p50_ms=%.3f "
                + "commit_p99_ms=%.3f commit_max_ms=%.3f tv2=%s tv2_txns=%d epoch=%d%n",
                txns, warmup, secs, rate, p50, p99, max, tv2, tv2Txns, epoch);
            System.out.println(Main.summary(true, "txnbench", String.format(Locale.ROOT,
                "%.1f transactions/s, commit p50 %.2f ms p99 %.2f ms, %s", rate, p50, p99,
                tv2.equals("true") ? "transaction version 2" : tv2.equals("false") ? "classic protocol (TV1)" : "mixed protocols")));
            return true;
        }
    }

    /** The q-th value of sorted values: sorted[min(n-1, floor(n*q))] (as conformance/bench/compare.py). */
    static long pct(long[] sorted, double q) {
        return sorted[Math.min(sorted.length - 1, (int) (sorted.length * q))];
    }
}
