#!/usr/bin/env python3
"""A real Apache Kafka 4.3.1 on demand, built from Maven Central jars.

Used as the oracle for doze-kafka's conformance tests.  Standard library only,
Python 3.9+.

Command line:

    realkafka.py fetch                       # populate the jar cache (idempotent)
    realkafka.py start [--port 9192] [--dir DIR]
    realkafka.py stop  [--port 9192] [--dir DIR] [--keep]
    realkafka.py status [--port 9192] [--dir DIR]
    realkafka.py tool NAME ARGS...           # e.g. tool kafka-topics --bootstrap-server ... --list
    realkafka.py tools                       # list known tool names

Python:

    from realkafka import RealKafka
    with RealKafka() as k:                   # port=0: pick a free loopback port
        print(k.bootstrap)                   # "127.0.0.1:NNNNN"
        k.tool("kafka-topics", "--bootstrap-server", k.bootstrap, "--list")

The jar cache lives in ${DOZE_KAFKA_CACHE:-$HOME/.cache/doze-kafka}/kafka-4.3.1/lib.
Environment: JAVA (java binary; default $JAVA_HOME/bin/java, else `java` on PATH),
MVN (maven binary; default `mvn`), REALKAFKA_HEAP (broker -Xmx, default 1g),
REALKAFKA_TOOL_HEAP (tool -Xmx, default 512m).
"""

import argparse
import base64
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))   # conformance/
from lib import free_port, recv_exactly  # noqa: E402

KAFKA_VERSION = "4.3.1"
DEFAULT_PORT = 9192
HERE = os.path.dirname(os.path.abspath(__file__))
POM = os.path.join(HERE, "pom.xml")

# Shell-script name (as in Kafka's bin/) -> main class in the 4.3.1 jars.
# Verified against the class lists of kafka-tools-4.3.1.jar and kafka_2.13-4.3.1.jar.
TOOLS = {
    "kafka-topics": "org.apache.kafka.tools.TopicCommand",
    "kafka-console-producer": "org.apache.kafka.tools.ConsoleProducer",
    "kafka-console-consumer": "org.apache.kafka.tools.consumer.ConsoleConsumer",
    "kafka-console-share-consumer": "org.apache.kafka.tools.consumer.ConsoleShareConsumer",
    "kafka-transactions": "org.apache.kafka.tools.TransactionsCommand",
    "kafka-consumer-groups": "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
    "kafka-share-groups": "org.apache.kafka.tools.consumer.group.ShareGroupCommand",
    "kafka-streams-groups": "org.apache.kafka.tools.streams.StreamsGroupCommand",
    "kafka-groups": "org.apache.kafka.tools.GroupsCommand",
    "kafka-acls": "org.apache.kafka.tools.AclCommand",
    "kafka-configs": "kafka.admin.ConfigCommand",
    "kafka-storage": "kafka.tools.StorageTool",
    "kafka-get-offsets": "org.apache.kafka.tools.GetOffsetShell",
    "kafka-delete-records": "org.apache.kafka.tools.DeleteRecordsCommand",
    "kafka-broker-api-versions": "org.apache.kafka.tools.BrokerApiVersionsCommand",
    "kafka-metadata-quorum": "org.apache.kafka.tools.MetadataQuorumCommand",
    "kafka-features": "org.apache.kafka.tools.FeatureCommand",
    "kafka-cluster": "org.apache.kafka.tools.ClusterTool",
    "kafka-log-dirs": "org.apache.kafka.tools.LogDirsCommand",
    "kafka-leader-election": "org.apache.kafka.tools.LeaderElectionCommand",
    "kafka-reassign-partitions": "org.apache.kafka.tools.reassign.ReassignPartitionsCommand",
    "kafka-delegation-tokens": "org.apache.kafka.tools.DelegationTokenCommand",
    "kafka-client-metrics": "org.apache.kafka.tools.ClientMetricsCommand",
    "kafka-dump-log": "org.apache.kafka.tools.DumpLogSegments",
    "kafka-producer-perf-test": "org.apache.kafka.tools.ProducerPerformance",
    "kafka-consumer-perf-test": "org.apache.kafka.tools.ConsumerPerformance",
    "kafka-share-consumer-perf-test": "org.apache.kafka.tools.ShareConsumerPerformance",
    "kafka-verifiable-producer": "org.apache.kafka.tools.VerifiableProducer",
    "kafka-verifiable-consumer": "org.apache.kafka.tools.VerifiableConsumer",
    "kafka-verifiable-share-consumer": "org.apache.kafka.tools.VerifiableShareConsumer",
    "kafka-e2e-latency": "org.apache.kafka.tools.EndToEndLatency",
    "connect-mirror-maker": "org.apache.kafka.connect.mirror.MirrorMaker",
    "kafka-jmx": "org.apache.kafka.tools.JmxTool",
    "kafka-replica-verification": "org.apache.kafka.tools.ReplicaVerificationTool",
}

# Broker settings that differ from Kafka's built-in defaults.  Everything else
# (num.partitions=1, auto.create.topics.enable=true, retention, segment sizes,
# ...) is left to Kafka.  Ports and directories are filled in at start.
BROKER_SETTINGS = [
    ("process.roles", "broker,controller"),
    ("node.id", "1"),
    ("controller.listener.names", "CONTROLLER"),
    ("inter.broker.listener.name", "PLAINTEXT"),
    ("listener.security.protocol.map", "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT"),
    ("offsets.topic.replication.factor", "1"),
    ("transaction.state.log.replication.factor", "1"),
    ("transaction.state.log.min.isr", "1"),
    ("share.coordinator.state.topic.replication.factor", "1"),
    ("share.coordinator.state.topic.min.isr", "1"),
    ("min.insync.replicas", "1"),
    ("group.initial.rebalance.delay.ms", "0"),
]

BROKER_LOG4J = """\
# log4j2 config for the real-Kafka oracle broker: everything to stdout (server.log).
status = warn
appender.out.type = Console
appender.out.name = OUT
appender.out.target = SYSTEM_OUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.out.ref = OUT
logger.request.name = kafka.request.logger
logger.request.level = WARN
logger.statechange.name = state.change.logger
logger.statechange.level = INFO
"""

TOOLS_LOG4J = """\
# log4j2 config for the Kafka CLI tools: warnings and errors to stderr only.
status = warn
appender.err.type = Console
appender.err.name = ERR
appender.err.target = SYSTEM_ERR
appender.err.layout.type = PatternLayout
appender.err.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = WARN
rootLogger.appenderRef.err.ref = ERR
"""

JVM_COMMON = [
    "-XX:+UseG1GC",
    "-XX:MaxGCPauseMillis=20",
    "-XX:InitiatingHeapOccupancyPercent=35",
    "-XX:+ExplicitGCInvokesConcurrent",
    "-Djava.awt.headless=true",
]


class RealKafkaError(RuntimeError):
    pass


# --------------------------------------------------------------------------- paths


def cache_root():
    base = os.environ.get("DOZE_KAFKA_CACHE") or os.path.join(
        os.path.expanduser("~"), ".cache", "doze-kafka")
    return os.path.join(base, "kafka-" + KAFKA_VERSION)


def lib_dir():
    return os.path.join(cache_root(), "lib")


def _marker():
    return os.path.join(cache_root(), ".lib-complete")


def java_bin():
    if os.environ.get("JAVA"):
        return os.environ["JAVA"]
    jh = os.environ.get("JAVA_HOME")
    if jh and os.path.exists(os.path.join(jh, "bin", "java")):
        return os.path.join(jh, "bin", "java")
    return shutil.which("java") or "java"


def default_dir(port):
    return os.path.join(tempfile.gettempdir(), "realkafka-%d" % port)


def _write_if_changed(path, text):
    try:
        with open(path) as f:
            if f.read() == text:
                return path
    except OSError:
        pass
    tmp = "%s.%d.tmp" % (path, os.getpid())
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)
    return path


# --------------------------------------------------------------------------- fetch


def is_fetched():
    lib = lib_dir()
    return (os.path.exists(_marker())
            and os.path.exists(os.path.join(lib, "kafka_2.13-%s.jar" % KAFKA_VERSION))
            and os.path.exists(os.path.join(lib, "kafka-tools-%s.jar" % KAFKA_VERSION))
            and os.path.exists(os.path.join(lib, "connect-mirror-%s.jar" % KAFKA_VERSION)))


def fetch(quiet=False):
    """Populate the jar cache with Maven (skipped when already complete).

    Returns the lib directory."""
    lib = lib_dir()
    if is_fetched():
        if not quiet:
            print("already fetched: %s" % lib, file=sys.stderr)
        return lib
    mvn = os.environ.get("MVN") or shutil.which("mvn")
    if not mvn:
        raise RealKafkaError("maven (mvn) not found; install it or set MVN")
    root = cache_root()
    os.makedirs(root, exist_ok=True)
    staging = tempfile.mkdtemp(prefix="lib.", dir=root)
    cmd = [mvn, "-q", "-B", "-Dstyle.color=never", "-f", POM, "dependency:copy-dependencies",
           "-DoutputDirectory=" + staging]
    if not quiet:
        print("fetching Kafka %s jars: %s" % (KAFKA_VERSION, " ".join(cmd)), file=sys.stderr)
    t0 = time.time()
    try:
        r = subprocess.run(cmd, stdout=sys.stderr if not quiet else subprocess.PIPE,
                           stderr=subprocess.STDOUT)
        if r.returncode != 0:
            out = r.stdout.decode(errors="replace") if r.stdout else ""
            raise RealKafkaError("maven failed (exit %d)\n%s" % (r.returncode, out[-4000:]))
        if os.path.isdir(lib):
            shutil.rmtree(lib)
        os.replace(staging, lib)
    finally:
        if os.path.isdir(staging):
            shutil.rmtree(staging, ignore_errors=True)
    with open(_marker(), "w") as f:
        f.write("%s\n" % KAFKA_VERSION)
    if not quiet:
        print("fetched %d jars into %s in %.1fs" % (len(os.listdir(lib)), lib, time.time() - t0),
              file=sys.stderr)
    return lib


def _classpath():
    return os.path.join(fetch(quiet=True), "*")


# --------------------------------------------------------------------------- tools


def tool_command(name, args=(), log4j=None, heap=None):
    """The argv that runs Kafka CLI tool NAME (script name or a main class);
    log4j: a log4j2 config file of the caller's (default: warnings to stderr),
    heap: its -Xmx (default: REALKAFKA_TOOL_HEAP or 512m)."""
    main = TOOLS.get(name[:-3] if name.endswith(".sh") else name)
    if main is None:
        if "." in name and not name.endswith(".sh"):
            main = name  # a fully qualified main class
        else:
            raise RealKafkaError("unknown tool %r; known: %s" % (name, ", ".join(sorted(TOOLS))))
    conf = log4j or _write_if_changed(os.path.join(cache_root(), "tools-log4j2.properties"), TOOLS_LOG4J)
    heap = heap or os.environ.get("REALKAFKA_TOOL_HEAP", "512m")
    return ([java_bin(), "-Xmx" + heap] + JVM_COMMON
            + ["-Dlog4j2.configurationFile=" + conf, "-cp", _classpath(), main] + list(args))


def run_tool(name, *args, **kwargs):
    """subprocess.run() a Kafka CLI tool; kwargs go to subprocess.run
    (e.g. input=..., capture_output=True, text=True, timeout=...)."""
    return subprocess.run(tool_command(name, args), **kwargs)


def run_java_source(source, main_class, args=(), heap="512m"):
    """Compile one .java file against the Kafka jars (fetched if missing) and
    run its main_class with args -> the CompletedProcess (output captured, as
    bytes). For the checks that ask Kafka's own classes a question
    (conformance/configs: its ConfigDefs, its Utils.loadProps)."""
    classpath = _classpath()
    work = tempfile.mkdtemp(prefix="doze-java-")
    try:
        javac = os.path.join(os.path.dirname(java_bin()), "javac")
        javac = javac if os.path.isfile(javac) else (shutil.which("javac") or "javac")
        subprocess.run([javac, "-nowarn", "-encoding", "UTF-8", "-cp", classpath, "-d", work, source], check=True)
        return subprocess.run([java_bin(), "-Xmx" + heap, "-cp", work + os.pathsep + classpath, main_class]
                              + list(args), capture_output=True, cwd=work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


# --------------------------------------------------------------------------- wire probes


def _kstr(s):
    b = s.encode()
    return struct.pack(">h", len(b)) + b


def _roundtrip(sock, api_key, version, corr, body):
    msg = struct.pack(">hhi", api_key, version, corr) + _kstr("realkafka-probe") + body
    sock.sendall(struct.pack(">i", len(msg)) + msg)
    (size,) = struct.unpack(">i", recv_exactly(sock, 4))
    resp = recv_exactly(sock, size)
    (got,) = struct.unpack(">i", resp[:4])
    if got != corr:
        raise ConnectionError("correlation id mismatch: %d != %d" % (got, corr))
    return resp[4:]


def api_versions(host, port, timeout=2.0):
    """Send an ApiVersions v0 request; return {api_key: (min, max)}."""
    with socket.create_connection((host, port), timeout=timeout) as s:
        resp = _roundtrip(s, 18, 0, 1, b"")
    err, n = struct.unpack(">hi", resp[:6])
    if err != 0:
        raise ConnectionError("ApiVersions error %d" % err)
    out = {}
    for i in range(n):
        k, lo, hi = struct.unpack(">hhh", resp[6 + 6 * i:12 + 6 * i])
        out[k] = (lo, hi)
    return out


def probe_create_topic(host, port, versions, timeout=10.0):
    """CreateTopics (validate_only) for a probe topic.  Returns (error_code, message).

    validate_only makes the controller run the full check (including replica
    placement on a registered, unfenced broker) without leaving a topic behind."""
    lo, hi = versions.get(19, (0, -1))
    v = max(lo, 2)
    if v > min(hi, 4):  # only the non-flexible versions 2..4 are encoded here
        raise RealKafkaError("CreateTopics v2-v4 not offered (%d..%d)" % (lo, hi))
    body = (struct.pack(">i", 1) + _kstr("realkafka-ready-probe")
            + struct.pack(">ihii", 1, 1, 0, 0)    # partitions, rf, assignments[], configs[]
            + struct.pack(">ib", 5000, 1))         # timeout_ms, validate_only
    with socket.create_connection((host, port), timeout=timeout) as s:
        resp = _roundtrip(s, 19, v, 2, body)
    off = 4  # throttle_time_ms
    (n,) = struct.unpack(">i", resp[off:off + 4])
    off += 4
    if n < 1:
        return -1, "no topic in CreateTopics response"
    (ln,) = struct.unpack(">h", resp[off:off + 2])
    off += 2 + ln
    (err, mlen) = struct.unpack(">hh", resp[off:off + 4])
    off += 4
    msg = resp[off:off + mlen].decode(errors="replace") if mlen >= 0 else None
    return err, msg


# --------------------------------------------------------------------------- broker


def _new_cluster_id():
    # Same shape as org.apache.kafka.common.Uuid.randomUuid().toString().
    while True:
        s = base64.urlsafe_b64encode(os.urandom(16)).decode().rstrip("=")
        if not s.startswith("-"):
            return s


def _pid_alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie child of ours counts as dead
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return True


def _pid_is_ours(pid, run_dir):
    """True unless /proc says pid is something other than our broker."""
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            cmd = f.read().decode(errors="replace")
    except OSError:
        return True  # no /proc: trust the pid file
    return "kafka.Kafka" in cmd and os.path.join(run_dir, "server.properties") in cmd


def _read_pid(run_dir):
    try:
        with open(os.path.join(run_dir, "kafka.pid")) as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None


def _tail(path, n=40):
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-n:])
    except OSError:
        return "(no %s)" % path


def protocol_map(settings):
    """settings' listener.security.protocol.map as {listener name: protocol}, in its order."""
    mapping = settings.get("listener.security.protocol.map", "")
    pairs = (e.split(":", 1) for e in mapping.split(",") if ":" in e)
    return {name.strip(): protocol.strip() for name, protocol in pairs}


def extra_listener_names(settings):
    """The listeners besides PLAINTEXT (and the controller's) that settings'
    listener.security.protocol.map names: each gets a port of its own (also
    when replay.py starts doze with the same settings)."""
    return [n for n in protocol_map(settings) if n not in ("PLAINTEXT", "CONTROLLER")]


class RealKafka:
    """A single-node KRaft Apache Kafka 4.3.1 on 127.0.0.1.

    port=0 picks a free port.  dir=None makes a fresh temp directory (removed on
    stop unless keep=True).  Use as a context manager or call start()/stop()."""

    host = "127.0.0.1"

    def __init__(self, port=0, dir=None, keep=False, heap=None, startup_timeout=120.0,
                 extra_props=None, quiet=True, keep_data=False):
        self.keep_data = keep_data        # restart on the data a previous start() left (stop --keep)
        self.port = port or free_port()
        self.controller_port = None
        self.dir = dir
        self.keep = keep
        self.heap = heap or os.environ.get("REALKAFKA_HEAP", "1g")
        self.startup_timeout = startup_timeout
        self.extra_props = dict(extra_props or {})
        self.quiet = quiet
        self.proc = None
        self.pid = None
        self.startup_seconds = None
        self._made_dir = False
        self.extra_ports = {}

    @property
    def bootstrap(self):
        return "%s:%d" % (self.host, self.port)

    @property
    def bootstraps(self):
        """{listener name: host:port}: PLAINTEXT, and every other listener that
        extra_props' listener.security.protocol.map names (each on a free port)."""
        return dict({"PLAINTEXT": self.bootstrap},
                    **{n: "%s:%d" % (self.host, p) for n, p in self.extra_ports.items()})

    def _log(self, msg):
        if not self.quiet:
            print(msg, file=sys.stderr, flush=True)

    def _properties(self):
        extra = "".join(",%s://%s:%d" % (n, self.host, p) for n, p in self.extra_ports.items())
        props = list(BROKER_SETTINGS) + [
            ("listeners", "PLAINTEXT://%s:%d%s,CONTROLLER://%s:%d"
             % (self.host, self.port, extra, self.host, self.controller_port)),
            ("advertised.listeners", "PLAINTEXT://%s:%d%s" % (self.host, self.port, extra)),
            ("controller.quorum.bootstrap.servers", "%s:%d" % (self.host, self.controller_port)),
            ("log.dirs", os.path.join(self.dir, "data")),
        ]
        d = dict(props)
        d.update(self.extra_props)
        order = [k for k, _ in props] + [k for k in self.extra_props if k not in dict(props)]
        # a value of several lines (an inline PEM) in Java's properties syntax: \n escapes
        return "".join("%s=%s\n" % (k, str(d[k]).replace("\n", "\\n")) for k in order)

    def start(self):
        t0 = time.time()
        cp = _classpath()
        # The readiness probe must not be answered by some other server on our port.
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as Kafka's own listener
            try:
                s.bind((self.host, self.port))
            except OSError as e:
                raise RealKafkaError("port %s:%d is not free: %s" % (self.host, self.port, e))
        if self.dir is None:
            self.dir = tempfile.mkdtemp(prefix="realkafka-")
            self._made_dir = True
        os.makedirs(self.dir, exist_ok=True)
        old = _read_pid(self.dir)
        if old and _pid_alive(old) and _pid_is_ours(old, self.dir):
            raise RealKafkaError("a broker (pid %d) is already running in %s" % (old, self.dir))
        data = os.path.join(self.dir, "data")
        reuse = self.keep_data and os.path.exists(os.path.join(data, "meta.properties"))
        if reuse:
            # the formatted quorum names the controller's endpoint: keep the old one
            with open(os.path.join(self.dir, "server.properties")) as f:
                found = re.search(r"^controller\.quorum\.bootstrap\.servers=[^:]+:(\d+)$", f.read(), re.M)
            if not found:
                raise RealKafkaError("cannot reuse %s: no controller port in server.properties" % data)
            self.controller_port = int(found.group(1))
        else:
            if os.path.exists(data):
                shutil.rmtree(data)
            self.controller_port = free_port()
            while self.controller_port == self.port:
                self.controller_port = free_port()
        for name in extra_listener_names(self.extra_props):
            taken = {self.port, self.controller_port, *self.extra_ports.values()}
            self.extra_ports.setdefault(name, next(p for p in iter(free_port, None) if p not in taken))
        props = _write_if_changed(os.path.join(self.dir, "server.properties"), self._properties())
        log4j = _write_if_changed(os.path.join(self.dir, "log4j2.properties"), BROKER_LOG4J)
        logfile = os.path.join(self.dir, "server.log")

        # kafka-storage format --standalone (single-node dynamic KRaft quorum)
        if reuse:
            with open(logfile, "ab") as f:
                f.write(b"$ (restart on the existing data: no format)\n")
        else:
            cluster_id = _new_cluster_id()
            fmt = tool_command("kafka-storage", ["format", "--standalone", "-t", cluster_id,
                                                 "-c", props])
            r = subprocess.run(fmt, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
            with open(logfile, "wb") as f:
                f.write(b"$ " + " ".join(fmt).encode() + b"\n" + r.stdout)
            if r.returncode != 0:
                raise RealKafkaError("kafka-storage format failed:\n" + r.stdout.decode(errors="replace"))
        t_fmt = time.time() - t0

        cmd = ([java_bin(), "-Xmx" + self.heap, "-Xms" + self.heap] + JVM_COMMON
               + ["-Dlog4j2.configurationFile=" + log4j, "-Dkafka.logs.dir=" + self.dir,
                  "-cp", cp, "kafka.Kafka", props])
        with open(logfile, "ab") as out:
            out.write(b"$ " + " ".join(cmd).encode() + b"\n")
            out.flush()
            self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out,
                                         stderr=subprocess.STDOUT, cwd=self.dir,
                                         start_new_session=True)
        self.pid = self.proc.pid
        with open(os.path.join(self.dir, "kafka.pid"), "w") as f:
            f.write("%d\n" % self.pid)
        try:
            self._wait_ready(t0, logfile)
        except BaseException:
            self.stop()
            raise
        self.startup_seconds = time.time() - t0
        self._log("kafka %s ready on %s in %.1fs (format %.1fs)"
                  % (KAFKA_VERSION, self.bootstrap, self.startup_seconds, t_fmt))
        return self

    def _wait_ready(self, t0, logfile):
        deadline = t0 + self.startup_timeout
        versions, last = None, None
        while True:
            if self.proc.poll() is not None:
                raise RealKafkaError("broker exited with %s during startup; tail of %s:\n%s"
                                     % (self.proc.returncode, logfile, _tail(logfile)))
            if time.time() > deadline:
                raise RealKafkaError("broker not ready after %.0fs (last: %s); tail of %s:\n%s"
                                     % (self.startup_timeout, last, logfile, _tail(logfile)))
            try:
                if versions is None:
                    versions = api_versions(self.host, self.port)
                    self._log("ApiVersions answered after %.1fs" % (time.time() - t0))
                err, msg = probe_create_topic(self.host, self.port, versions)
                if err in (0, 36):  # NONE, TOPIC_ALREADY_EXISTS
                    return
                last = "CreateTopics error %d: %s" % (err, msg)
            except (OSError, struct.error) as e:
                last = repr(e)
            time.sleep(0.2)

    def stop(self, timeout=30.0):
        """SIGTERM, then SIGKILL after timeout; remove the dir unless keep."""
        pid = self.pid
        if pid is None and self.dir:
            pid = _read_pid(self.dir)
            if pid and not _pid_is_ours(pid, self.dir):
                pid = None
        if pid:
            _terminate(pid, timeout, self.proc)
        self.proc = None
        self.pid = None
        if self.dir and not self.keep:
            shutil.rmtree(self.dir, ignore_errors=True)
        elif self.dir:
            try:
                os.remove(os.path.join(self.dir, "kafka.pid"))
            except OSError:
                pass

    def tool(self, name, *args, **kwargs):
        """Run a Kafka CLI tool (see run_tool); pass --bootstrap-server yourself,
        e.g. k.tool("kafka-topics", "--bootstrap-server", k.bootstrap, "--list")."""
        return run_tool(name, *args, **kwargs)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()


def _terminate(pid, timeout, proc=None):
    def alive():
        if proc is not None:
            return proc.poll() is None
        return _pid_alive(pid)

    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    end = time.time() + timeout
    while time.time() < end and alive():
        time.sleep(0.1)
    if alive():
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        end = time.time() + 10
        while time.time() < end and alive():
            time.sleep(0.1)
    if proc is not None:
        try:
            proc.wait(timeout=1)
        except subprocess.TimeoutExpired:
            pass


# --------------------------------------------------------------------------- CLI


def _cmd_start(a):
    run_dir = os.path.abspath(a.dir or default_dir(a.port))
    pid = _read_pid(run_dir)
    if pid and _pid_alive(pid) and _pid_is_ours(pid, run_dir):
        try:
            api_versions("127.0.0.1", a.port)
            print("127.0.0.1:%d" % a.port)
            print("already running (pid %d, dir %s)" % (pid, run_dir), file=sys.stderr)
            return 0
        except OSError:
            raise RealKafkaError("broker pid %d in %s is alive but not answering on port %d"
                                 % (pid, run_dir, a.port))
    extra = {}
    for kv in a.prop:
        if "=" not in kv:
            raise RealKafkaError("--prop wants KEY=VALUE, got %r" % kv)
        k, v = kv.split("=", 1)
        extra[k.strip()] = v.strip()
    k = RealKafka(port=a.port, dir=run_dir, keep=True, quiet=False, keep_data=a.keep_data,
                  startup_timeout=a.timeout, extra_props=extra, heap=a.heap)
    k.start()
    print("pid %d, dir %s, log %s" % (k.pid, run_dir, os.path.join(run_dir, "server.log")),
          file=sys.stderr)
    print(k.bootstrap)
    return 0


def _cmd_stop(a):
    run_dir = os.path.abspath(a.dir or default_dir(a.port))
    if not os.path.isdir(run_dir):
        print("nothing at %s" % run_dir, file=sys.stderr)
        return 0
    pid = _read_pid(run_dir)
    if pid and _pid_alive(pid):
        if not _pid_is_ours(pid, run_dir):
            print("pid %d is not this broker; not killing it" % pid, file=sys.stderr)
        else:
            t0 = time.time()
            _terminate(pid, a.timeout)
            print("stopped pid %d in %.1fs" % (pid, time.time() - t0), file=sys.stderr)
    else:
        print("no running broker in %s" % run_dir, file=sys.stderr)
    if a.keep:
        try:
            os.remove(os.path.join(run_dir, "kafka.pid"))
        except OSError:
            pass
    else:
        shutil.rmtree(run_dir, ignore_errors=True)
        print("removed %s" % run_dir, file=sys.stderr)
    return 0


def _cmd_status(a):
    run_dir = os.path.abspath(a.dir or default_dir(a.port))
    pid = _read_pid(run_dir)
    if not (pid and _pid_alive(pid) and _pid_is_ours(pid, run_dir)):
        print("not running (%s)" % run_dir)
        return 1
    try:
        n = len(api_versions("127.0.0.1", a.port))
        print("running: pid %d, 127.0.0.1:%d answers ApiVersions (%d APIs)" % (pid, a.port, n))
        return 0
    except OSError as e:
        print("pid %d alive but port %d not answering: %s" % (pid, a.port, e))
        return 1


def _cmd_tool(a):
    cmd = tool_command(a.name, a.args)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(cmd[0], cmd)


def main(argv=None):
    p = argparse.ArgumentParser(description="A real Apache Kafka %s from Maven Central jars."
                                % KAFKA_VERSION)
    sub = p.add_subparsers(dest="cmd", required=True)
    sub.add_parser("fetch", help="download the jars into the cache (idempotent)")
    for name in ("start", "stop", "status"):
        sp = sub.add_parser(name)
        sp.add_argument("--port", type=int, default=DEFAULT_PORT)
        sp.add_argument("--dir", help="run directory (default: %s)" % default_dir(DEFAULT_PORT))
        if name == "start":
            sp.add_argument("--timeout", type=float, default=120.0,
                            help="seconds to wait for readiness")
            sp.add_argument("--prop", action="append", default=[], metavar="KEY=VALUE",
                            help="extra/overriding server.properties entry (repeatable)")
            sp.add_argument("--heap", help="broker -Xmx/-Xms (default $REALKAFKA_HEAP or 1g)")
            sp.add_argument("--keep-data", action="store_true",
                            help="restart on the data a previous `stop --keep` left")
        if name == "stop":
            sp.add_argument("--keep", action="store_true", help="keep the run directory")
            sp.add_argument("--timeout", type=float, default=30.0,
                            help="seconds between SIGTERM and SIGKILL")
    tp = sub.add_parser("tool", help="run a Kafka CLI tool, e.g. tool kafka-topics --help")
    tp.add_argument("name")
    tp.add_argument("args", nargs=argparse.REMAINDER)
    sub.add_parser("tools", help="list tool names and main classes")
    sub.add_parser("path", help="print the jar cache directory")
    a = p.parse_args(argv)
    try:
        if a.cmd == "fetch":
            print(fetch())
            return 0
        if a.cmd == "start":
            return _cmd_start(a)
        if a.cmd == "stop":
            return _cmd_stop(a)
        if a.cmd == "status":
            return _cmd_status(a)
        if a.cmd == "tool":
            return _cmd_tool(a)
        if a.cmd == "tools":
            for k in sorted(TOOLS):
                print("%-32s %s" % (k, TOOLS[k]))
            return 0
        if a.cmd == "path":
            print(lib_dir())
            return 0
    except RealKafkaError as e:
        print("realkafka: %s" % e, file=sys.stderr)
        return 1
    return 2


if __name__ == "__main__":
    sys.exit(main())
