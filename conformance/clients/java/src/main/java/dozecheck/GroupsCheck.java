package dozecheck;

import java.util.*;
import java.util.concurrent.*;
import java.util.concurrent.atomic.*;
import java.util.stream.*;

import org.apache.kafka.clients.admin.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.*;

import static dozecheck.Main.log;

/** Three members, close one, kill -9 one, add one; RangeAssignor and CooperativeStickyAssignor. */
public class GroupsCheck {
    static final int PARTS = 6;

    public static boolean run(Map<String, String> o) throws Exception {
        String strategies = o.getOrDefault("strategies", "range,cooperative-sticky");
        boolean ok = true;
        List<String> results = new ArrayList<>();
        for (String s : strategies.split(",")) {
            String cls = s.equals("range") ? "org.apache.kafka.clients.consumer.RangeAssignor"
                : s.equals("cooperative-sticky") ? "org.apache.kafka.clients.consumer.CooperativeStickyAssignor"
                : s.equals("sticky") ? "org.apache.kafka.clients.consumer.StickyAssignor"
                : s.equals("roundrobin") ? "org.apache.kafka.clients.consumer.RoundRobinAssignor" : s;
            String[] res = new String[1];
            boolean r = runOne(o, s, cls, res);
            results.add(res[0]);
            ok &= r;
        }
        System.out.println("==== groups summary");
        for (String r : results) System.out.println(r);
        System.out.println(Main.summary(ok, "groups", ok ? "all strategies passed" : "see failures above"));
        return ok;
    }

    static boolean runOne(Map<String, String> o, String sname, String strategy, String[] resultLine) throws Exception {
        String bs = Main.need(o, "bootstrap");
        String tag = o.getOrDefault("tag", Main.tag());
        String topic = "groups-" + sname + "-" + tag, group = "groups-" + sname + "-" + tag;
        String session = o.getOrDefault("session-ms", "8000");
        long stepMs = Long.parseLong(o.getOrDefault("step-ms", "4000"));
        int rate = Integer.parseInt(o.getOrDefault("rate", "200"));
        System.out.println("==== groups: strategy " + sname + " (" + strategy + "), topic/group " + topic + ", session.timeout.ms " + session);
        long t0 = System.currentTimeMillis();
        List<String> failures = new ArrayList<>();
        List<Child.Ev> events = new ArrayList<>();
        Set<String> quiet = Set.of("REC", "COMMIT", "STATE");
        Map<String, Child> members = new LinkedHashMap<>();
        List<String> timeline = new ArrayList<>();

        try (Admin admin = Main.admin(bs)) {
            Main.createTopics(admin, PARTS, topic);
            // producer thread
            Map<Long, String> produced = new ConcurrentHashMap<>();   // key p*1e9+off -> value
            AtomicLong sent = new AtomicLong(), errors = new AtomicLong();
            AtomicBoolean stopProd = new AtomicBoolean(false);
            Thread prodThread = new Thread(() -> {
                try (KafkaProducer<String, String> p = new KafkaProducer<>(Main.producerProps(bs))) {
                    long seq = 0, start = System.currentTimeMillis();
                    while (!stopProd.get()) {
                        final String v = "s" + seq;
                        p.send(new ProducerRecord<>(topic, (int) (seq % PARTS), "k" + seq, v), (md, ex) -> {
                            if (ex != null) errors.incrementAndGet();
                            else produced.put(md.partition() * 1000000000L + md.offset(), v);
                        });
                        seq++;
                        sent.set(seq);
                        long due = start + seq * 1000 / rate;
                        long now = System.currentTimeMillis();
                        if (due > now) Thread.sleep(due - now);
                    }
                    p.flush();
                } catch (Exception e) { log("producer error: %s", e); errors.incrementAndGet(); }
            }, "producer");
            prodThread.start();

            List<String> base = List.of("member", "--bootstrap", bs, "--group", group, "--topic", topic,
                "--strategy", strategy, "--session-ms", session, "--process-ms", o.getOrDefault("process-ms", "50"));
            java.util.function.Function<String, Child> start = name -> {
                List<String> a = new ArrayList<>(base); a.add("--name"); a.add(name);
                try { Child c = Child.start(name, a, events, quiet); members.put(name, c); return c; }
                catch (Exception e) { throw new RuntimeException(e); }
            };

            Child A = start.apply("A"), B = start.apply("B"), K = start.apply("K");
            stage("3 members join (A, B, K)", members, events, timeline, failures, 60000, t0);
            Thread.sleep(stepMs);
            log("closing B (close(): LeaveGroup)");
            long tc = System.currentTimeMillis();
            B.close();
            stage("B closed (close(), LeaveGroup)", members, events, timeline, failures, 60000, tc);
            Thread.sleep(stepMs);
            Set<Integer> kParts = K.assignment();
            long tk = System.currentTimeMillis();
            K.kill();
            stage("K killed -9 (session must expire)", members, events, timeline, failures, 60000, tk);
            long takeover = System.currentTimeMillis() - tk;
            Thread.sleep(stepMs);
            long td = System.currentTimeMillis();
            Child D = start.apply("D");
            stage("D joins", members, events, timeline, failures, 60000, td);
            if (D.assignment().isEmpty()) failures.add("new member D got no partitions");
            Thread.sleep(stepMs);
            stopProd.set(true);
            prodThread.join(60000);
            log("producer stopped: %d sent, %d acknowledged, %d errors", sent.get(), produced.size(), errors.get());
            if (errors.get() > 0 || produced.size() != sent.get()) failures.add("producer: " + errors.get() + " errors, " + produced.size() + "/" + sent.get() + " acked");

            // drain: wait until every produced record has been read by someone
            long drainDeadline = System.currentTimeMillis() + 60000;
            while (System.currentTimeMillis() < drainDeadline) {
                Set<Long> read = new HashSet<>();
                synchronized (events) { for (Child.Ev e : events) if (e.kind.equals("REC")) read.add(key(e)); }
                if (read.containsAll(produced.keySet())) break;
                Thread.sleep(500);
            }
            Thread.sleep(1500);   // let the last commits land
            A.close();
            D.close();

            // ---------- analysis
            Map<Long, List<Child.Ev>> reads = new HashMap<>();
            Map<String, Map<Integer, Long>> lastCommit = new HashMap<>();   // member -> partition -> highest committed offset
            int commitRetries = 0, commitFails = 0, lostEvents = 0;
            synchronized (events) {
                events.sort(Comparator.comparingLong(e -> e.t));
                for (Child.Ev e : events) {
                    switch (e.kind) {
                        case "REC": reads.computeIfAbsent(key(e), k -> new ArrayList<>()).add(e); break;
                        case "COMMIT":
                            for (String kv : e.f[0].split(",")) {
                                String[] x = kv.split("=");
                                lastCommit.computeIfAbsent(e.member, m -> new HashMap<>()).merge(Integer.parseInt(x[0]), Long.parseLong(x[1]), Math::max);
                            }
                            break;
                        case "COMMITRETRY": commitRetries++; break;
                        case "COMMITFAIL": commitFails++; failures.add("commit failed: " + e); break;
                        case "LOST": if (members.get(e.member).alive() || !e.member.equals("K")) { lostEvents++; failures.add("live member lost partitions: " + e); } break;
                        case "POLLERR": failures.add("poll error: " + e); break;
                        default:
                    }
                }
            }
            long lost = produced.keySet().stream().filter(k -> !reads.containsKey(k)).count();
            if (lost > 0) failures.add(lost + " produced records never processed, e.g. "
                + produced.keySet().stream().filter(k -> !reads.containsKey(k)).sorted().limit(5).map(GroupsCheck::kstr).collect(Collectors.toList()));
            long unknown = reads.keySet().stream().filter(k -> !produced.containsKey(k)).count();
            if (unknown > 0) failures.add(unknown + " records read that the producer did not get acked");
            for (Map.Entry<Long, List<Child.Ev>> r : reads.entrySet()) {
                String exp = produced.get(r.getKey());
                for (Child.Ev e : r.getValue()) if (exp != null && !exp.equals(e.f[2])) { failures.add("value mismatch at " + kstr(r.getKey()) + ": " + e.f[2] + " != " + exp); break; }
            }
            int dupAllowed = 0, dupBad = 0;
            Map<String, Integer> dupBy = new TreeMap<>();
            List<String> badEx = new ArrayList<>();
            for (Map.Entry<Long, List<Child.Ev>> r : reads.entrySet()) {
                List<Child.Ev> l = r.getValue();
                if (l.size() < 2) continue;
                int p = (int) (r.getKey() / 1000000000L); long off = r.getKey() % 1000000000L;
                for (int j = 1; j < l.size(); j++) {
                    boolean allowed = true;
                    for (int i = 0; i < j; i++) {
                        Child.Ev first = l.get(i);
                        Child m = members.get(first.member);
                        long lc = lastCommit.getOrDefault(first.member, Map.of()).getOrDefault(p, -1L);
                        boolean departed = !m.alive() && m.fateTime <= l.get(j).t + 1000;
                        if (first.member.equals(l.get(j).member) || !departed || lc > off) { allowed = false; }
                    }
                    String k = l.stream().limit(j + 1).map(e -> e.member).collect(Collectors.joining("->"));
                    if (allowed) { dupAllowed++; dupBy.merge(k, 1, Integer::sum); }
                    else {
                        dupBad++;
                        if (badEx.size() < 5) badEx.add(kstr(r.getKey()) + " read by " + l.stream().map(e -> e.member + "@" + (e.t - t0) + "ms").collect(Collectors.toList())
                            + " last commits " + l.stream().map(e -> e.member + ":" + lastCommit.getOrDefault(e.member, Map.of()).get(p)).distinct().collect(Collectors.toList()));
                    }
                }
            }
            if (dupBad > 0) failures.add(dupBad + " duplicate reads by live members between commits, e.g. " + badEx);
            // K's uncommitted tail: the allowed duplicates must all come from K (the killed one) or B (closed)
            // final offsets
            Map<TopicPartition, OffsetAndMetadata> fin = admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata().get(30, TimeUnit.SECONDS);
            Map<Integer, Long> endOffs = new TreeMap<>(), finOffs = new TreeMap<>();
            for (int i = 0; i < PARTS; i++) {
                TopicPartition tp = new TopicPartition(topic, i);
                endOffs.put(i, admin.listOffsets(Map.of(tp, OffsetSpec.latest())).all().get().get(tp).offset());
                OffsetAndMetadata om = fin.get(tp);
                finOffs.put(i, om == null ? -1 : om.offset());
            }
            if (!endOffs.equals(finOffs)) failures.add("final committed offsets " + finOffs + " != end offsets " + endOffs);
            // moves
            Map<Integer, List<String>> owners = new TreeMap<>();
            synchronized (events) {
                for (Child.Ev e : events) if (e.kind.equals("ASSIGN"))
                    for (int p : Child.parseParts(e.f[2])) {
                        List<String> ow = owners.computeIfAbsent(p, x -> new ArrayList<>());
                        if (ow.isEmpty() || !ow.get(ow.size() - 1).equals(e.member)) ow.add(e.member);
                    }
            }
            long moved = owners.values().stream().filter(l -> l.size() > 1).count();
            if (moved == 0) failures.add("no partition moved");
            // K's partitions must have moved to someone else after its death
            System.out.println("---- assignment timeline (" + sname + ")");
            for (String line : timeline) System.out.println("  " + line);
            System.out.println("  owners per partition over time: " + owners);
            System.out.printf("  K (killed) held %s; survivors took them over %.1f s after the kill%n", kParts, takeover / 1000.0);
            int reads1 = reads.values().stream().mapToInt(List::size).sum();
            System.out.println("  records: produced " + produced.size() + ", processed " + reads1 + " (distinct " + reads.size() + "), lost " + lost
                + ", duplicates allowed (uncommitted work of a departed member) " + dupAllowed + " " + dupBy + ", duplicates NOT allowed " + dupBad);
            System.out.println("  commit retries (RebalanceInProgress) " + commitRetries + ", commit failures " + commitFails
                + ", final committed offsets " + finOffs + " end offsets " + endOffs);
            for (String f : failures) System.out.println("  failure: " + f);
            boolean ok = failures.isEmpty();
            resultLine[0] = Main.summary(ok, "groups/" + sname, String.format("produced %d, processed %d, lost %d, allowed dups %d, bad dups %d, partitions moved %d/%d, K takeover %.1f s, %d failures, %.1f s",
                produced.size(), reads1, lost, dupAllowed, dupBad, moved, PARTS, takeover / 1000.0, failures.size(), (System.currentTimeMillis() - t0) / 1000.0));
            System.out.println(resultLine[0]);
            return ok;
        } finally {
            for (Child c : members.values()) if (c.proc.isAlive()) c.proc.destroyForcibly();
        }
    }

    static long key(Child.Ev e) { return Integer.parseInt(e.f[0]) * 1000000000L + Long.parseLong(e.f[1]); }
    static String kstr(long k) { return "p" + (k / 1000000000L) + "@" + (k % 1000000000L); }

    /** Waits until the live members' assignments are disjoint and cover every partition; records the result. */
    static void stage(String what, Map<String, Child> members, List<Child.Ev> events, List<String> timeline,
                      List<String> failures, long timeoutMs, long since) throws InterruptedException {
        long deadline = System.currentTimeMillis() + timeoutMs;
        String desc = null;
        boolean ok = false;
        while (System.currentTimeMillis() < deadline) {
            Set<Integer> union = new TreeSet<>();
            boolean disjoint = true, allHave = true;
            StringBuilder sb = new StringBuilder();
            synchronized (events) {
                for (Child c : members.values()) {
                    if (!c.alive()) continue;
                    Set<Integer> a = c.assignment();
                    for (int p : a) if (!union.add(p)) disjoint = false;
                    if (a.isEmpty()) allHave = false;
                    sb.append(c.name).append("=").append(a).append(" ");
                }
            }
            desc = sb.toString().trim();
            if (disjoint && allHave && union.size() == PARTS) { ok = true; break; }
            Thread.sleep(100);
        }
        // the last generation seen by the live members
        Set<String> gens = new TreeSet<>();
        synchronized (events) {
            for (Child c : members.values()) {
                if (!c.alive()) continue;
                String g = null;
                for (Child.Ev e : events) if (e.member.equals(c.name) && e.kind.equals("ASSIGN")) g = e.f[0];
                gens.add(c.name + ":gen" + g);
            }
        }
        String line = String.format("%-40s %s  (%s, stable after %.1f s)", what, desc, gens, (System.currentTimeMillis() - since) / 1000.0);
        if (!ok) { failures.add("assignment never became complete and disjoint after: " + what + " (" + desc + ")"); line += " NOT STABLE"; }
        timeline.add(line);
        log("STAGE %s", line);
    }
}
