package dozecheck;

import java.util.*;
import java.util.concurrent.*;
import java.util.stream.*;

import org.apache.kafka.clients.admin.*;
import org.apache.kafka.common.*;

import static dozecheck.Main.log;

/** A static member (group.instance.id) is stopped without leaving and restarted within the session timeout. */
public class StaticCheck {
    public static boolean run(Map<String, String> o) throws Exception {
        String bs = Main.need(o, "bootstrap");
        String tag = o.getOrDefault("tag", Main.tag());
        String topic = "static-" + tag, group = "static-" + tag, instance = "static-member-" + tag;
        String session = o.getOrDefault("session-ms", "10000");
        String strategy = o.getOrDefault("strategy", "org.apache.kafka.clients.consumer.RangeAssignor");
        long t0 = System.currentTimeMillis();
        List<String> failures = new ArrayList<>();
        List<Child.Ev> events = new ArrayList<>();
        Map<String, Child> members = new LinkedHashMap<>();
        List<String> timeline = new ArrayList<>();
        List<String> report = new ArrayList<>();
        try (Admin admin = Main.admin(bs)) {
            Main.createTopics(admin, GroupsCheck.PARTS, topic);
            List<String> base = List.of("member", "--bootstrap", bs, "--group", group, "--topic", topic,
                "--strategy", strategy, "--session-ms", session);
            java.util.function.BiFunction<String, Boolean, Child> start = (name, stat) -> {
                List<String> a = new ArrayList<>(base); a.add("--name"); a.add(name);
                if (stat) { a.add("--instance-id"); a.add(instance); }
                try { Child c = Child.start(name, a, events, Set.of("REC", "COMMIT", "STATE")); members.put(name, c); return c; }
                catch (Exception e) { throw new RuntimeException(e); }
            };
            Child O = start.apply("O", false);
            Child S = start.apply("S1", true);
            GroupsCheck.stage("O (dynamic) + S1 (static " + instance + ") join", members, events, timeline, failures, 60000, t0);
            Thread.sleep(2500);
            String[] modes = {"close", "kill"};
            for (int round = 0; round < 2; round++) {
                String mode = modes[round];
                Snapshot before = snapshot(admin, group, events, "O", S.name);
                log("before %s: %s", mode, before);
                int oEventsBefore = count(events, "O", "ASSIGN", "REVOKE", "LOST");
                long tStop = System.currentTimeMillis();
                if (mode.equals("close")) S.close(); else S.kill();
                log("%s: %s (static member, no LeaveGroup expected)", S.name, mode.equals("close") ? "close()d" : "killed -9");
                ConsumerGroupDescription dStopped = describe(admin, group);
                String afterStop = descr(dStopped);
                log("group right after the stop: %s", afterStop);
                Thread.sleep(2000);
                Child S2 = start.apply("S" + (round + 2), true);
                long deadline = System.currentTimeMillis() + 60000;
                while (System.currentTimeMillis() < deadline && count(events, S2.name, "ASSIGN") == 0) Thread.sleep(100);
                long back = System.currentTimeMillis() - tStop;
                Thread.sleep(3000);   // watch for a late rebalance
                Snapshot after = snapshot(admin, group, events, "O", S2.name);
                log("after restart: %s", after);
                int oEventsAfter = count(events, "O", "ASSIGN", "REVOKE", "LOST");
                List<String> f = new ArrayList<>();
                if (count(events, S2.name, "ASSIGN") == 0) f.add(S2.name + " never got an assignment");
                if (back >= Long.parseLong(session)) f.add("restart took " + back + " ms, not within session.timeout.ms " + session);
                if (oEventsAfter != oEventsBefore) f.add("other member O saw " + (oEventsAfter - oEventsBefore) + " rebalance callbacks");
                if (!Objects.equals(before.oGen, after.oGen)) f.add("O's generation changed " + before.oGen + " -> " + after.oGen);
                if (!Objects.equals(before.sGen, after.sGen)) f.add("static member generation " + before.sGen + " -> " + after.sGen);
                if (!before.sParts.equals(after.sParts)) f.add("static member assignment " + before.sParts + " -> " + after.sParts);
                if (!before.oParts.equals(after.oParts)) f.add("O's assignment " + before.oParts + " -> " + after.oParts);
                if (Objects.equals(before.sMember, after.sMember)) f.add("static member kept member id " + before.sMember + " (expected a new one)");
                if (!Objects.equals(before.oMember, after.oMember)) f.add("O's member id changed");
                if (!"STABLE".equalsIgnoreCase(after.state)) f.add("group state " + after.state);
                if (after.adminMembers != 2) f.add("describeConsumerGroups shows " + after.adminMembers + " members");
                if (!after.adminDescr.contains(instance)) f.add("describeConsumerGroups does not show group.instance.id " + instance);
                if (!Objects.equals(after.adminAssign, before.adminAssign)) f.add("describeConsumerGroups assignments " + before.adminAssign + " -> " + after.adminAssign);
                String line = String.format("%s+restart: back in %.1f s; O gen %s->%s, O callbacks +%d; S gen %s->%s parts %s->%s, member id %s->%s; group %s",
                    mode, back / 1000.0, before.oGen, after.oGen, oEventsAfter - oEventsBefore, before.sGen, after.sGen,
                    before.sParts, after.sParts, shortId(before.sMember), shortId(after.sMember), after.adminDescr);
                report.add(line + (f.isEmpty() ? "  OK" : "  FAILED: " + f));
                log("%s", line);
                failures.addAll(f.stream().map(x -> mode + ": " + x).collect(Collectors.toList()));
                S = S2;
            }
            // the static member's rejoin must not have needed a rebalance at all: count every ASSIGN per member
            S.close();
            O.close();
            System.out.println("---- static member timeline");
            for (String t : timeline) System.out.println("  " + t);
            for (String r : report) System.out.println("  " + r);
            for (String f : failures) System.out.println("  failure: " + f);
            boolean ok = failures.isEmpty();
            System.out.println(Main.summary(ok, "static", String.format("2 restarts (close, kill -9) of a static member, %d failures, %.1f s",
                failures.size(), (System.currentTimeMillis() - t0) / 1000.0)));
            return ok;
        } finally {
            for (Child c : members.values()) if (c.proc.isAlive()) c.proc.destroyForcibly();
        }
    }

    static String shortId(String m) { return m == null ? null : (m.length() > 12 ? "…" + m.substring(m.length() - 8) : m); }

    static int count(List<Child.Ev> events, String member, String... kinds) {
        Set<String> k = Set.of(kinds);
        synchronized (events) { return (int) events.stream().filter(e -> e.member.equals(member) && k.contains(e.kind)).count(); }
    }

    static class Snapshot {
        String oGen, oMember, sGen, sMember, state, adminDescr; Set<Integer> oParts, sParts; int adminMembers; Map<String, String> adminAssign;
        public String toString() {
            return "O gen " + oGen + " parts " + oParts + "; S gen " + sGen + " parts " + sParts + " member " + shortId(sMember) + "; admin: " + adminDescr;
        }
    }

    static Snapshot snapshot(Admin admin, String group, List<Child.Ev> events, String o, String s) throws Exception {
        Snapshot sn = new Snapshot();
        synchronized (events) {
            for (Child.Ev e : events) {
                if (!e.kind.equals("STATE") && !e.kind.equals("ASSIGN")) continue;
                if (e.member.equals(o)) { sn.oGen = e.f[0]; sn.oMember = e.f[1]; }
                if (e.member.equals(s)) { sn.sGen = e.f[0]; sn.sMember = e.f[1]; }
            }
        }
        // the latest STATE events also carry the assignment
        synchronized (events) {
            for (Child.Ev e : events) {
                if (e.member.equals(o) && e.kind.equals("STATE")) sn.oParts = Child.parseParts(e.f[2]);
                if (e.member.equals(s) && e.kind.equals("STATE")) sn.sParts = Child.parseParts(e.f[2]);
            }
        }
        ConsumerGroupDescription d = describe(admin, group);
        sn.state = d.groupState().toString();
        sn.adminMembers = d.members().size();
        sn.adminDescr = descr(d);
        sn.adminAssign = new TreeMap<>();
        for (MemberDescription m : d.members())
            sn.adminAssign.put(m.groupInstanceId().orElse("dynamic"), Member.parts(m.assignment().topicPartitions()));
        return sn;
    }

    static ConsumerGroupDescription describe(Admin admin, String group) throws Exception {
        return admin.describeConsumerGroups(List.of(group)).describedGroups().get(group).get(30, TimeUnit.SECONDS);
    }

    static String descr(ConsumerGroupDescription d) {
        return d.groupState() + " " + d.members().stream().map(m -> m.clientId() + "/" + m.groupInstanceId().orElse("-") + "=" + Member.parts(m.assignment().topicPartitions()))
            .sorted().collect(Collectors.joining(" ", "[", "]"));
    }
}
