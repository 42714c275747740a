package dozecheck;

import java.time.Duration;
import java.util.*;
import java.util.concurrent.*;
import java.util.stream.*;

import org.apache.kafka.clients.admin.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.*;

import static dozecheck.Main.log;

/** Consume-transform-produce with a transactional producer: commits and deliberate aborts. */
public class TxnCheck {
    public static boolean run(Map<String, String> o) throws Exception {
        String bs = Main.need(o, "bootstrap");
        int inputs = Integer.parseInt(o.getOrDefault("records", "300"));
        int abortEvery = Integer.parseInt(o.getOrDefault("abort-every", "4"));
        int maxPoll = Integer.parseInt(o.getOrDefault("batch", "15"));
        String tag = o.getOrDefault("tag", Main.tag());
        String in = "txn-in-" + tag;
        String[] outs = {"txn-out-a-" + tag, "txn-out-b-" + tag, "txn-out-c-" + tag};
        String group = "txn-group-" + tag;
        String txnId = "txn-id-" + tag;
        List<String> failures = new ArrayList<>();
        long t0 = System.currentTimeMillis();

        try (Admin admin = Main.admin(bs)) {
            Main.createTopics(admin, 3, in, outs[0], outs[1], outs[2]);
            log("created topics %s %s (3 partitions each, RF 1)", in, Arrays.toString(outs));

            // 1. input records (plain idempotent producer)
            try (KafkaProducer<String, String> p = new KafkaProducer<>(Main.producerProps(bs))) {
                for (int i = 0; i < inputs; i++) p.send(new ProducerRecord<>(in, i % 3, "in-" + i, "v-" + i));
                p.flush();
            }
            log("produced %d input records to %s", inputs, in);

            // 2. transactional consume-transform-produce
            Properties pp = Main.producerProps(bs);
            pp.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, txnId);
            pp.put(ProducerConfig.TRANSACTION_TIMEOUT_CONFIG, "60000");
            Properties cp = Main.consumerProps(bs, group);
            cp.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
            cp.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, Integer.toString(maxPoll));

            Set<String> committedVals = new HashSet<>(), abortedVals = new HashSet<>();
            Map<TopicPartition, Long> expectOffsets = new HashMap<>();   // what committed txns sent
            Set<Integer> inputsDone = new HashSet<>();
            int commits = 0, aborts = 0, txn = 0, offsetChecks = 0, unsettled = 0; long settleMs = 0;
            Set<TopicPartition> outPartsTouched = new HashSet<>();
            long deadline = System.currentTimeMillis() + 240000;
            try (KafkaProducer<String, String> prod = new KafkaProducer<>(pp);
                 KafkaConsumer<String, String> cons = new KafkaConsumer<>(cp)) {
                prod.initTransactions();
                cons.subscribe(List.of(in));
                while (inputsDone.size() < inputs && System.currentTimeMillis() < deadline) {
                    ConsumerRecords<String, String> recs = cons.poll(Duration.ofMillis(500));
                    if (recs.isEmpty()) continue;
                    boolean abort = (txn % abortEvery) == abortEvery - 1;
                    Map<TopicPartition, Long> startPos = new HashMap<>();
                    Map<TopicPartition, OffsetAndMetadata> offs = new HashMap<>();
                    List<String> vals = new ArrayList<>();
                    prod.beginTransaction();
                    for (ConsumerRecord<String, String> r : recs) {
                        TopicPartition tp = new TopicPartition(r.topic(), r.partition());
                        startPos.putIfAbsent(tp, r.offset());
                        offs.put(tp, new OffsetAndMetadata(r.offset() + 1));
                        for (int k = 0; k < 3; k++) {
                            int part = (int) ((r.offset() + k) % 3);
                            String v = "t" + txn + "|" + r.key() + "|" + outs[k] + "|" + (abort ? "A" : "C");
                            prod.send(new ProducerRecord<>(outs[k], part, r.key(), v));
                            outPartsTouched.add(new TopicPartition(outs[k], part));
                            vals.add(outs[k] + "/" + r.key() + "/" + v);
                        }
                    }
                    prod.sendOffsetsToTransaction(offs, cons.groupMetadata());
                    if (abort) {
                        // flush first: abortTransaction() drops batches not yet sent, and we want the
                        // aborted records in the log (read_uncommitted must see them)
                        prod.flush();
                        prod.abortTransaction();
                        aborts++;
                        abortedVals.addAll(vals);
                        for (Map.Entry<TopicPartition, Long> e : startPos.entrySet()) cons.seek(e.getKey(), e.getValue());
                    } else {
                        prod.commitTransaction();
                        commits++;
                        committedVals.addAll(vals);
                        for (Map.Entry<TopicPartition, OffsetAndMetadata> e : offs.entrySet()) expectOffsets.put(e.getKey(), e.getValue().offset());
                        for (ConsumerRecord<String, String> r : recs) inputsDone.add(Integer.parseInt(r.key().substring(3)));
                    }
                    // the group's committed offsets (stable) must be exactly what committed txns sent
                    // (Kafka completes EndTxn's markers after answering; while an offset commit is still
                    //  pending, OffsetFetch(require_stable) answers UNSTABLE_OFFSET_COMMIT for that partition and
                    //  the admin client leaves it out: retry for up to 10 s and count how often that was needed)
                    Map<TopicPartition, Long> gotL = new HashMap<>();
                    long settleDeadline = System.currentTimeMillis() + 10000, tq = System.currentTimeMillis();
                    int tries = 0;
                    while (true) {
                        tries++;
                        Map<TopicPartition, OffsetAndMetadata> got = admin.listConsumerGroupOffsets(group,
                            new ListConsumerGroupOffsetsOptions().requireStable(true)).partitionsToOffsetAndMetadata().get(30, TimeUnit.SECONDS);
                        gotL.clear();
                        got.forEach((k, v) -> { if (v != null) gotL.put(k, v.offset()); });
                        if (gotL.equals(expectOffsets) || System.currentTimeMillis() > settleDeadline) break;
                        Thread.sleep(20);
                    }
                    offsetChecks++;
                    if (tries > 1) { unsettled++; settleMs = Math.max(settleMs, System.currentTimeMillis() - tq); }
                    if (!gotL.equals(expectOffsets)) {
                        String f = String.format("after txn %d (%s): group offsets %s, expected %s", txn, abort ? "abort" : "commit", gotL, expectOffsets);
                        failures.add(f);
                        log("MISMATCH %s", f);
                    }
                    txn++;
                }
            }
            log("group offsets checked after each of %d transactions; %d checks needed retries (pending offsets right after EndTxn), longest %d ms",
                offsetChecks, unsettled, settleMs);
            log("transactions: %d committed, %d aborted; %d committed output records, %d aborted output records; %d output partitions written",
                commits, aborts, committedVals.size(), abortedVals.size(), outPartsTouched.size());
            if (inputsDone.size() < inputs) failures.add("only " + inputsDone.size() + " of " + inputs + " inputs committed before deadline");
            if (outPartsTouched.size() != 9) failures.add("only " + outPartsTouched.size() + " of 9 output partitions written");

            // 3. read back
            List<TopicPartition> tps = new ArrayList<>();
            for (String t : outs) for (int i = 0; i < 3; i++) tps.add(new TopicPartition(t, i));
            List<ConsumerRecord<String, String>> rc = Main.readAll(bs, tps, "read_committed", 60000);
            List<ConsumerRecord<String, String>> ru = Main.readAll(bs, tps, "read_uncommitted", 60000);
            List<String> rcVals = rc.stream().map(r -> r.topic() + "/" + r.key() + "/" + r.value()).collect(Collectors.toList());
            List<String> ruVals = ru.stream().map(r -> r.topic() + "/" + r.key() + "/" + r.value()).collect(Collectors.toList());
            Set<String> rcSet = new HashSet<>(rcVals), ruSet = new HashSet<>(ruVals);
            Set<String> all = new HashSet<>(committedVals); all.addAll(abortedVals);
            log("read_committed consumer: %d records (%d distinct); expected %d", rcVals.size(), rcSet.size(), committedVals.size());
            log("read_uncommitted consumer: %d records (%d distinct); expected %d (committed %d + aborted %d)",
                ruVals.size(), ruSet.size(), all.size(), committedVals.size(), abortedVals.size());
            compareSets("read_committed", rcVals, rcSet, committedVals, failures);
            compareSets("read_uncommitted", ruVals, ruSet, all, failures);
            // offsets: control markers take offsets; the read_committed view must skip them and every aborted record
            for (TopicPartition tp : tps) {
                Map<TopicPartition, ListOffsetsResult.ListOffsetsResultInfo> lso = admin.listOffsets(Map.of(tp, OffsetSpec.latest()),
                    new ListOffsetsOptions(IsolationLevel.READ_COMMITTED)).all().get(30, TimeUnit.SECONDS);
                Map<TopicPartition, ListOffsetsResult.ListOffsetsResultInfo> hw = admin.listOffsets(Map.of(tp, OffsetSpec.latest())).all().get(30, TimeUnit.SECONDS);
                long l = lso.get(tp).offset(), h = hw.get(tp).offset();
                long recs = ru.stream().filter(r -> r.topic().equals(tp.topic()) && r.partition() == tp.partition()).count();
                if (l != h) failures.add(tp + ": LSO " + l + " != high watermark " + h + " after all transactions ended");
                log("  %s: high watermark %d, LSO %d, data records %d, control/other offsets %d", tp, h, l, recs, h - recs);
            }
            // final committed offsets = input end offsets
            Map<TopicPartition, OffsetAndMetadata> fin = admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata().get(30, TimeUnit.SECONDS);
            log("group %s committed offsets: %s (expected %s), checked after each of %d transactions", group,
                new TreeMap<>(fin.entrySet().stream().collect(Collectors.toMap(e -> e.getKey().toString(), e -> e.getValue().offset()))),
                new TreeMap<>(expectOffsets.entrySet().stream().collect(Collectors.toMap(e -> e.getKey().toString(), Map.Entry::getValue))), offsetChecks);
            Map<TopicPartition, Long> finL = new HashMap<>();
            fin.forEach((k, v) -> finL.put(k, v.offset()));
            if (!finL.equals(expectOffsets)) failures.add("final group offsets " + finL + " != " + expectOffsets);
            Map<TopicPartition, Long> inEnd = new HashMap<>();
            for (int i = 0; i < 3; i++) {
                TopicPartition tp = new TopicPartition(in, i);
                inEnd.put(tp, admin.listOffsets(Map.of(tp, OffsetSpec.latest())).all().get().get(tp).offset());
            }
            if (!finL.equals(inEnd)) failures.add("final group offsets " + finL + " != input end offsets " + inEnd);

            double secs = (System.currentTimeMillis() - t0) / 1000.0;
            for (String f : failures) System.out.println("  failure: " + f);
            boolean ok = failures.isEmpty();
            System.out.println(Main.summary(ok, "txn", String.format(
                "%d transactions (%d committed, %d aborted), %d input records, %d committed + %d aborted output records, "
                + "read_committed saw %d, read_uncommitted saw %d, %d offset checks, %d failures, %.1f s",
                commits + aborts, commits, aborts, inputs, committedVals.size(), abortedVals.size(), rcVals.size(), ruVals.size(),
                offsetChecks, failures.size(), secs)));
            return ok;
        }
    }

    static void compareSets(String what, List<String> list, Set<String> got, Set<String> exp, List<String> failures) {
        if (list.size() != got.size()) failures.add(what + ": " + (list.size() - got.size()) + " duplicate records");
        Set<String> missing = new TreeSet<>(exp); missing.removeAll(got);
        Set<String> extra = new TreeSet<>(got); extra.removeAll(exp);
        if (!missing.isEmpty()) failures.add(what + ": " + missing.size() + " missing, e.g. " + missing.stream().limit(3).collect(Collectors.toList()));
        if (!extra.isEmpty()) failures.add(what + ": " + extra.size() + " unexpected, e.g. " + extra.stream().limit(3).collect(Collectors.toList()));
    }
}
