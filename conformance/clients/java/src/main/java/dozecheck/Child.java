package dozecheck;

import java.io.*;
import java.nio.file.*;
import java.util.*;
import java.util.concurrent.*;

/** A member JVM started by a check; its events are collected into a shared list. */
public class Child {
    public static class Ev {
        final long t; final String member, kind; final String[] f; final String payload;
        Ev(long t, String member, String kind, String payload) {
            this.t = t; this.member = member; this.kind = kind; this.payload = payload;
            this.f = payload.split(" ");
        }
        public String toString() { return member + " " + kind + " " + payload; }
    }

    final String name;
    final Process proc;
    final List<Ev> events;
    final Thread reader;
    volatile String fate = "alive";
    volatile long fateTime = 0;
    final Set<Integer> current = new TreeSet<>();     // assignment as the events tell it
    final Set<String> quietKinds;

    Child(String name, Process proc, List<Ev> events, Set<String> quietKinds) {
        this.name = name; this.proc = proc; this.events = events; this.quietKinds = quietKinds;
        this.reader = new Thread(this::readLoop, "reader-" + name);
        this.reader.setDaemon(true);
        this.reader.start();
    }

    static Path logDir() throws IOException {
        Path d = Paths.get(System.getProperty("dozecheck.logdir", System.getProperty("java.io.tmpdir") + "/dozecheck-logs"));
        Files.createDirectories(d);
        return d;
    }

    public static Child start(String name, List<String> args, List<Ev> events, Set<String> quietKinds) throws IOException {
        List<String> cmd = new ArrayList<>();
        cmd.add(ProcessHandle.current().info().command().orElse("java"));
        cmd.add("-Xmx192m");
        cmd.add("-XX:TieredStopAtLevel=1");
        cmd.add("-XX:+UseSerialGC");
        for (String k : new String[]{"org.slf4j.simpleLogger.defaultLogLevel", "org.slf4j.simpleLogger.logFile"}) {
            String v = System.getProperty(k);
            if (v != null) cmd.add("-D" + k + "=" + v);
        }
        cmd.add("-cp"); cmd.add(System.getProperty("java.class.path"));
        cmd.add("dozecheck.Main");
        cmd.addAll(args);
        ProcessBuilder pb = new ProcessBuilder(cmd);
        pb.redirectError(logDir().resolve(name + ".stderr.log").toFile());
        Process p = pb.start();
        Main.log("%s: started member JVM pid %d", name, p.pid());
        return new Child(name, p, events, quietKinds);
    }

    void readLoop() {
        try (BufferedReader r = new BufferedReader(new InputStreamReader(proc.getInputStream()))) {
            String line;
            while ((line = r.readLine()) != null) {
                if (!line.startsWith("EV ")) { Main.log("%s: %s", name, line); continue; }
                String[] parts = line.split(" ", 4);
                Ev e = new Ev(Long.parseLong(parts[1]), name, parts[2], parts.length > 3 ? parts[3] : "");
                synchronized (events) {
                    events.add(e);
                    apply(e);
                }
                if (!quietKinds.contains(e.kind)) Main.log("%s: %s %s", name, e.kind, e.payload);
            }
        } catch (IOException ignored) { }
    }

    static Set<Integer> parseParts(String s) {
        Set<Integer> out = new TreeSet<>();
        if (s.startsWith("now=")) s = s.substring(4);
        if (s.equals("-") || s.isEmpty()) return out;
        for (String x : s.split(",")) out.add(Integer.parseInt(x));
        return out;
    }

    void apply(Ev e) {
        switch (e.kind) {
            case "ASSIGN": current.clear(); current.addAll(parseParts(e.f[3])); break;
            case "REVOKE": case "LOST": current.removeAll(parseParts(e.f[0])); break;
            case "CLOSED": current.clear(); break;
            default:
        }
    }

    /** Asks the member to close its consumer (Java close(): LeaveGroup for dynamic members). */
    public void close() throws Exception {
        try (OutputStream os = proc.getOutputStream()) {
            os.write("close\n".getBytes());
            os.flush();
        } catch (IOException ignored) { }
        if (!proc.waitFor(40, TimeUnit.SECONDS)) {
            Main.log("%s: did not exit after close; killing", name);
            proc.destroyForcibly().waitFor(10, TimeUnit.SECONDS);
        }
        reader.join(5000);
        fate = "closed"; fateTime = System.currentTimeMillis();
    }

    /** kill -9 */
    public void kill() throws Exception {
        long pid = proc.pid();
        proc.destroyForcibly();   // SIGKILL on Linux
        proc.waitFor(10, TimeUnit.SECONDS);
        reader.join(5000);
        synchronized (events) { current.clear(); }
        fate = "killed"; fateTime = System.currentTimeMillis();
        Main.log("%s: killed (SIGKILL) pid %d, exit %d", name, pid, proc.exitValue());
    }

    public Set<Integer> assignment() { synchronized (events) { return new TreeSet<>(current); } }
    public boolean alive() { return fate.equals("alive"); }
}
