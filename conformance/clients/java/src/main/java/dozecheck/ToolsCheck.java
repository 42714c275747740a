package dozecheck;

import java.io.*;
import java.nio.charset.StandardCharsets;
import java.nio.file.*;
import java.time.Duration;
import java.util.*;
import java.util.concurrent.*;
import java.util.regex.*;
import java.util.stream.*;

import org.apache.kafka.clients.admin.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.*;

import static dozecheck.Main.log;

/** Runs Kafka 4.3.1's kafka-consumer-groups and kafka-transactions against the broker, saves every output. */
public class ToolsCheck {
    static Path outDir;
    static String repo, bs, tag;
    static List<String> failures = new ArrayList<>();
    static List<String> table = new ArrayList<>();

    static String tool(String file, String name, String... args) throws Exception {
        List<String> cmd = new ArrayList<>(List.of("python3", repo + "/conformance/kafka/realkafka.py", "tool", name, "--bootstrap-server", bs));
        cmd.addAll(Arrays.asList(args));
        ProcessBuilder pb = new ProcessBuilder(cmd);
        pb.redirectErrorStream(false);
        Path err = outDir.resolve(file + ".stderr");
        pb.redirectError(err.toFile());
        long t = System.currentTimeMillis();
        Process p = pb.start();
        p.getOutputStream().close();
        byte[] outB;
        try (InputStream is = p.getInputStream()) { outB = is.readAllBytes(); }
        if (!p.waitFor(90, TimeUnit.SECONDS)) { p.destroyForcibly(); failures.add(file + ": timed out"); }
        int rc = p.exitValue();
        String out = new String(outB, StandardCharsets.UTF_8);
        String errS = Files.readString(err);
        // keep stderr lines that are not JVM/log noise
        String errKeep = Arrays.stream(errS.split("\n")).filter(l -> !l.isBlank() && !l.contains("WARN") && !l.startsWith("\tat ")).collect(Collectors.joining("\n"));
        String all = "$ kafka-" + name.replace("kafka-", "") + " " + String.join(" ", args) + "\n" + out
            + (errKeep.isEmpty() ? "" : "[stderr]\n" + errKeep + "\n") + "[exit " + rc + "]\n";
        Files.writeString(outDir.resolve(file + ".txt"), all);
        long ms = System.currentTimeMillis() - t;
        table.add(String.format("%-28s exit %d  %5d ms  %s %s", file, rc, ms, name, String.join(" ", args)));
        System.out.println("---- " + file + " (" + ms + " ms)");
        System.out.print(all);
        return out + (errKeep.isEmpty() ? "" : "\n" + errKeep) + "\n[exit " + rc + "]";
    }

    static void expect(boolean cond, String what) {
        if (!cond) { failures.add(what); log("EXPECTATION FAILED: %s", what); }
    }

    /** rows of a whitespace table whose first column is `first`. */
    static List<String[]> rows(String out, String first) {
        return Arrays.stream(out.split("\n")).map(String::trim).map(l -> l.split("\\s+")).filter(a -> a.length > 1 && a[0].equals(first)).collect(Collectors.toList());
    }

    public static boolean run(Map<String, String> o) throws Exception {
        bs = Main.need(o, "bootstrap");
        repo = Main.need(o, "repo");
        tag = o.getOrDefault("tag", Main.tag());
        outDir = Paths.get(o.getOrDefault("out", System.getProperty("java.io.tmpdir") + "/dozecheck-tools-" + tag));
        Files.createDirectories(outDir);
        Files.writeString(outDir.resolve("TAG"), tag + "\n");
        long t0 = System.currentTimeMillis();
        String topic = "tools-" + tag, group = "tools-group-" + tag;
        String ttopic = "tools-txn-" + tag, doneId = "tools-txn-done-" + tag, hangId = "tools-txn-hang-" + tag;
        log("outputs go to %s (tag %s)", outDir, tag);
        Process hang = null;
        try (Admin admin = Main.admin(bs)) {
            Main.createTopics(admin, 3, topic, ttopic);
            try (KafkaProducer<String, String> p = new KafkaProducer<>(Main.producerProps(bs))) {
                for (int i = 0; i < 30; i++) p.send(new ProducerRecord<>(topic, i % 3, "k" + i, "v" + i));
                for (int i = 0; i < 30; i++) p.send(new ProducerRecord<>(ttopic, i % 3, "k" + i, "v" + i));
                p.flush();
            }
            // ---- consumer groups: an active member with known offsets 10/5/0 on partitions 0/1/2
            Properties cp = Main.consumerProps(bs, group);
            cp.put(ConsumerConfig.CLIENT_ID_CONFIG, "tools-client");
            KafkaConsumer<String, String> c = new KafkaConsumer<>(cp);
            c.subscribe(List.of(topic));
            long dl = System.currentTimeMillis() + 30000;
            while (c.assignment().size() < 3 && System.currentTimeMillis() < dl) c.poll(Duration.ofMillis(200));
            c.pause(c.assignment());
            Map<TopicPartition, OffsetAndMetadata> offs = new HashMap<>();
            offs.put(new TopicPartition(topic, 0), new OffsetAndMetadata(10));
            offs.put(new TopicPartition(topic, 1), new OffsetAndMetadata(5));
            offs.put(new TopicPartition(topic, 2), new OffsetAndMetadata(0));
            c.commitSync(offs);
            // keep the member alive (heartbeats run in the background; poll keeps it within max.poll.interval)
            final boolean[] stop = {false};
            Thread poller = new Thread(() -> { while (!stop[0]) { synchronized (c) { c.poll(Duration.ofMillis(100)); } try { Thread.sleep(200); } catch (InterruptedException e) { return; } } });
            poller.setDaemon(true);
            poller.start();

            String out = tool("01-cg-list", "kafka-consumer-groups", "--list");
            expect(out.contains(group), "--list shows " + group);
            tool("02-cg-list-state", "kafka-consumer-groups", "--list", "--state");
            out = tool("03-cg-describe", "kafka-consumer-groups", "--describe", "--group", group);
            List<String[]> r = rows(out, group);
            Map<String, String> got = new TreeMap<>();
            for (String[] a : r) if (a.length >= 6) got.put(a[2], a[3] + "/" + a[4] + "/" + a[5]);
            expect(got.equals(Map.of("0", "10/10/0", "1", "5/10/5", "2", "0/10/10")), "describe offsets/log-end/lag per partition " + got + " == {0=10/10/0, 1=5/10/5, 2=0/10/10}");
            expect(r.stream().allMatch(a -> a.length >= 9 && a[6].startsWith("tools-client") && a[8].equals("tools-client")), "describe shows the member (consumer-id, client-id tools-client) on every partition");
            out = tool("04-cg-describe-members", "kafka-consumer-groups", "--describe", "--group", group, "--members", "--verbose");
            expect(out.contains("tools-client") && out.contains(topic + ":0,1,2"), "--members --verbose shows tools-client with " + topic + ":0,1,2");
            out = tool("05-cg-describe-state", "kafka-consumer-groups", "--describe", "--group", group, "--state");
            expect(out.contains("Stable") && out.contains("range"), "--state shows Stable, range");
            tool("06-cg-describe-offsets", "kafka-consumer-groups", "--describe", "--group", group, "--offsets");
            // reset while active must be refused
            out = tool("07-cg-reset-while-active", "kafka-consumer-groups", "--reset-offsets", "--group", group, "--topic", topic, "--to-earliest", "--execute");
            expect(!out.contains("NEW-OFFSET") || out.contains("inactive") || out.contains("Error"), "reset refused while the group has active members");
            stop[0] = true; poller.join(5000);
            synchronized (c) { c.close(); }
            out = tool("08-cg-describe-inactive", "kafka-consumer-groups", "--describe", "--group", group);
            expect(out.contains("has no active members"), "describe after close says the group has no active members");
            tool("09-cg-describe-state-empty", "kafka-consumer-groups", "--describe", "--group", group, "--state");
            tool("10-cg-reset-dry-run", "kafka-consumer-groups", "--reset-offsets", "--group", group, "--topic", topic, "--to-earliest", "--dry-run");
            out = tool("11-cg-reset-execute", "kafka-consumer-groups", "--reset-offsets", "--group", group, "--topic", topic, "--to-earliest", "--execute");
            r = rows(out, group);
            expect(r.size() == 3 && r.stream().allMatch(a -> a[a.length - 1].equals("0")), "reset --execute: NEW-OFFSET 0 on 3 partitions");
            out = tool("12-cg-describe-after-reset", "kafka-consumer-groups", "--describe", "--group", group);
            r = rows(out, group);
            expect(r.size() == 3 && r.stream().allMatch(a -> a[3].equals("0") && a[5].equals("10")), "after reset: offsets 0, lag 10");
            Map<TopicPartition, OffsetAndMetadata> adm = admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata().get();
            expect(adm.size() == 3 && adm.values().stream().allMatch(x -> x.offset() == 0), "admin sees offsets 0 after reset: " + adm);
            tool("13-cg-reset-shift", "kafka-consumer-groups", "--reset-offsets", "--group", group, "--topic", topic + ":1", "--shift-by", "3", "--execute");
            out = tool("14-cg-delete", "kafka-consumer-groups", "--delete", "--group", group);
            expect(out.contains("successful"), "--delete successful");
            out = tool("15-cg-list-after-delete", "kafka-consumer-groups", "--list");
            expect(!out.contains(group), "--list no longer shows the group");
            tool("16-cg-describe-deleted", "kafka-consumer-groups", "--describe", "--group", group);
            tool("17-cg-delete-again", "kafka-consumer-groups", "--delete", "--group", group);

            // ---- transactions: one committed, one left open by a producer killed with -9
            Properties pp = Main.producerProps(bs);
            pp.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, doneId);
            try (KafkaProducer<String, String> p = new KafkaProducer<>(pp)) {
                p.initTransactions();
                p.beginTransaction();
                p.send(new ProducerRecord<>(ttopic, 0, "d1", "done-1"));
                p.send(new ProducerRecord<>(ttopic, 0, "d2", "done-2"));
                p.commitTransaction();
            }
            List<String> cmd = new ArrayList<>(List.of(ProcessHandle.current().info().command().orElse("java"), "-Xmx192m",
                "-cp", System.getProperty("java.class.path"), "dozecheck.Main", "hang", "--bootstrap", bs, "--topic", ttopic, "--txn-id", hangId));
            ProcessBuilder hb = new ProcessBuilder(cmd);
            hb.redirectError(outDir.resolve("hang.stderr").toFile());
            hang = hb.start();
            BufferedReader hr = new BufferedReader(new InputStreamReader(hang.getInputStream()));
            String ready = null;
            long hdl = System.currentTimeMillis() + 60000;
            while (System.currentTimeMillis() < hdl) { String l = hr.readLine(); if (l == null) break; log("hang: %s", l); if (l.startsWith("READY")) { ready = l; break; } }
            expect(ready != null, "hanging producer reached READY");
            hang.destroyForcibly();
            hang.waitFor(10, TimeUnit.SECONDS);
            log("hanging producer killed -9 mid-transaction");
            TopicPartition tp1 = new TopicPartition(ttopic, 1);
            long hw1 = admin.listOffsets(Map.of(tp1, OffsetSpec.latest())).all().get().get(tp1).offset();
            long lso1 = admin.listOffsets(Map.of(tp1, OffsetSpec.latest()), new ListOffsetsOptions(IsolationLevel.READ_COMMITTED)).all().get().get(tp1).offset();
            log("%s: high watermark %d, LSO %d (open transaction)", tp1, hw1, lso1);
            expect(hw1 == 13 && lso1 == 10, "open txn: high watermark 13 and LSO 10 on partition 1 (got " + hw1 + ", " + lso1 + ")");

            out = tool("20-txn-list", "kafka-transactions", "list");
            expect(out.contains(doneId) && out.contains(hangId), "list shows both transactional ids");
            expect(Pattern.compile(Pattern.quote(hangId) + "\\s.*Ongoing").matcher(out).find(), "list shows " + hangId + " Ongoing");
            expect(Pattern.compile(Pattern.quote(doneId) + "\\s.*CompleteCommit").matcher(out).find(), "list shows " + doneId + " CompleteCommit");
            out = tool("21-txn-describe-hang", "kafka-transactions", "describe", "--transactional-id", hangId);
            expect(out.contains("Ongoing") && out.contains(ttopic + "-1"), "describe hang: Ongoing with " + ttopic + "-1");
            out = tool("22-txn-describe-done", "kafka-transactions", "describe", "--transactional-id", doneId);
            expect(out.contains("CompleteCommit"), "describe done: CompleteCommit");
            tool("23-txn-describe-unknown", "kafka-transactions", "describe", "--transactional-id", "no-such-" + tag);
            out = tool("24-txn-describe-producers-p1", "kafka-transactions", "describe-producers", "--topic", ttopic, "--partition", "1");
            List<String[]> pr = Arrays.stream(out.split("\n")).map(String::trim).map(l -> l.split("\\s+")).filter(a -> a.length >= 6 && a[0].matches("\\d+")).collect(Collectors.toList());
            expect(pr.stream().anyMatch(a -> a[5].equals("10")), "describe-producers shows CurrentTransactionStartOffset 10");
            tool("25-txn-describe-producers-p0", "kafka-transactions", "describe-producers", "--topic", ttopic, "--partition", "0");
            tool("26-txn-find-hanging", "kafka-transactions", "find-hanging", "--broker-id", "1");
            tool("27-txn-find-hanging-0min", "kafka-transactions", "find-hanging", "--broker-id", "1", "--max-transaction-timeout", "0");
            tool("28-txn-find-hanging-topic", "kafka-transactions", "find-hanging", "--topic", ttopic, "--partition", "1", "--max-transaction-timeout", "0");
            out = tool("29-txn-abort", "kafka-transactions", "abort", "--topic", ttopic, "--partition", "1", "--start-offset", "10");
            expect(out.contains("[exit 0]"), "abort exits 0");
            long dl2 = System.currentTimeMillis() + 10000;
            long hw2 = 0, lso2 = -1;
            while (System.currentTimeMillis() < dl2) {
                hw2 = admin.listOffsets(Map.of(tp1, OffsetSpec.latest())).all().get().get(tp1).offset();
                lso2 = admin.listOffsets(Map.of(tp1, OffsetSpec.latest()), new ListOffsetsOptions(IsolationLevel.READ_COMMITTED)).all().get().get(tp1).offset();
                if (hw2 == lso2) break;
                Thread.sleep(200);
            }
            log("%s after abort: high watermark %d, LSO %d", tp1, hw2, lso2);
            expect(hw2 == 14 && lso2 == 14, "after abort: marker appended, HW = LSO = 14 (got " + hw2 + ", " + lso2 + ")");
            List<ConsumerRecord<String, String>> rc = Main.readAll(bs, List.of(tp1), "read_committed", 20000);
            expect(rc.size() == 10, "read_committed sees the 10 plain records on partition 1, not the 3 aborted (got " + rc.size() + ")");
            out = tool("30-txn-describe-producers-p1-after", "kafka-transactions", "describe-producers", "--topic", ttopic, "--partition", "1");
            tool("31-txn-find-hanging-after", "kafka-transactions", "find-hanging", "--broker-id", "1", "--max-transaction-timeout", "0");
            tool("32-txn-list-after", "kafka-transactions", "list");
            tool("33-txn-describe-hang-after", "kafka-transactions", "describe", "--transactional-id", hangId);
        } finally {
            if (hang != null && hang.isAlive()) hang.destroyForcibly();
        }
        System.out.println("---- tool runs");
        for (String t : table) System.out.println("  " + t);
        for (String f : failures) System.out.println("  failure: " + f);
        boolean ok = failures.isEmpty();
        System.out.println(Main.summary(ok, "tools", String.format("%d tool runs, %d expectation failures, outputs in %s, %.1f s",
            table.size(), failures.size(), outDir, (System.currentTimeMillis() - t0) / 1000.0)));
        return ok;
    }

    /** Child: opens a transaction, writes 3 records to partition 1, then waits to be killed. */
    public static void hang(Map<String, String> o) throws Exception {
        Properties pp = Main.producerProps(Main.need(o, "bootstrap"));
        pp.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, Main.need(o, "txn-id"));
        pp.put(ProducerConfig.TRANSACTION_TIMEOUT_CONFIG, "600000");
        KafkaProducer<String, String> p = new KafkaProducer<>(pp);
        p.initTransactions();
        p.beginTransaction();
        for (int i = 0; i < 3; i++) p.send(new ProducerRecord<>(Main.need(o, "topic"), 1, "h" + i, "hang-" + i)).get();
        System.out.println("READY");
        System.out.flush();
        Thread.sleep(120000);
    }

    /** Normalises and diffs two output directories (e.g. doze vs real Kafka). */
    public static boolean compare(Map<String, String> o) throws Exception {
        Path a = Paths.get(Main.need(o, "a")), b = Paths.get(Main.need(o, "b"));
        String ta = Files.readString(a.resolve("TAG")).trim(), tb = Files.readString(b.resolve("TAG")).trim();
        List<Path> files;
        try (Stream<Path> s = Files.list(a)) { files = s.filter(p -> p.toString().endsWith(".txt")).sorted().collect(Collectors.toList()); }
        int same = 0, differ = 0;
        Path tmp = Files.createTempDirectory("dozecheck-cmp");
        for (Path fa : files) {
            Path fb = b.resolve(fa.getFileName());
            String na = norm(Files.readString(fa), ta), nb = Files.exists(fb) ? norm(Files.readString(fb), tb) : "(missing)\n";
            if (na.equals(nb)) { same++; System.out.println("SAME    " + fa.getFileName()); continue; }
            differ++;
            Path xa = tmp.resolve("a.txt"), xb = tmp.resolve("b.txt");
            Files.writeString(xa, na); Files.writeString(xb, nb);
            Process p = new ProcessBuilder("diff", "-u", "--label", o.getOrDefault("a-label", "a") + "/" + fa.getFileName(),
                "--label", o.getOrDefault("b-label", "b") + "/" + fa.getFileName(), xa.toString(), xb.toString()).redirectErrorStream(true).start();
            String d = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
            p.waitFor(10, TimeUnit.SECONDS);
            System.out.println("DIFFER  " + fa.getFileName());
            System.out.print(d);
        }
        System.out.println("compare-tools: " + same + " same, " + differ + " differ (after normalising ids, timestamps, durations)");
        return true;
    }

    static String norm(String s, String tag) {
        s = s.replace(tag, "<TAG>");
        s = s.replaceAll("tools-client-[0-9a-f-]{36}", "tools-client-<UUID>");
        s = s.replaceAll("[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", "<UUID>");
        s = s.replaceAll("\\b1[6-9]\\d{11}\\b", "<TS>");                 // epoch millis
        s = s.replaceAll("(?m)(<TS>\\s+)\\d+", "$1<DUR>");              // duration columns following a timestamp
        s = s.replaceAll("127\\.0\\.0\\.1:\\d+", "127.0.0.1:<PORT>");
        s = s.replaceAll("-1[a-z0-9]{7}\\b", "-<RUN>");                  // names made by earlier runs of other checks
        // column alignment differs with id widths: collapse runs of spaces
        s = s.replaceAll("(?m)[ \\t]+", " ").replaceAll("(?m) $", "");
        // row order of lists and tables is not compared (hash order in the tool): sort all lines but the command
        String[] lines = s.split("\n");
        List<String> body = new ArrayList<>(Arrays.asList(lines).subList(1, lines.length));
        Collections.sort(body);
        return lines[0] + "\n" + String.join("\n", body) + "\n";
    }
}
