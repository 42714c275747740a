#!/usr/bin/env python3
"""The exactly-once matrix: every client x every fault, on doze-kafka or a real Kafka 4.3.1.

Run it through conformance/clients/run (which sets up the Python venv first):

    conformance/clients/run [--clients a,b] [--faults none,broker,client] [--kafka]
                            [--records 10000] [--workdir DIR] [--job-timeout 420]

One job = fresh broker, fresh topics eos-in/eos-out (3 partitions each), N input records
(idempotent producer), then a copier process (the client under test, see
eos/copier_common.py for its contract) copies them exactly once. The runner watches the
group's committed offsets (OffsetFetch with require_stable) and
  fault=broker: kills the broker with SIGKILL at ~20% and ~55% progress and restarts it
                on the same port and data directory;
  fault=client: kills the copier with SIGKILL at ~40% and starts a new one (attempt 2),
                which must pick up from the committed offsets (a *-consumer row, a KIP-848
                group, waits for the killed member's 45 s session to end first);
and stops the copier (SIGTERM) once the committed offsets cover the whole input. Then
conformance/clients/verify.py checks the output. Exit 1 if any job fails.

--secure: the broker (doze, or Kafka with --kafka, from the same settings) gets a
SASL_SSL listener (SCRAM-SHA-512, a certificate of a throwaway CA) beside the
PLAINTEXT one, and Kafka's StandardAuthorizer with User:ANONYMOUS as the only
super user: the runner's own clients (setup, monitor, verify) stay on PLAINTEXT
as that super user. Each job makes a SCRAM user for its copier (AlterUserScram-
Credentials) and grants it exactly what a copier needs: READ on the input topic
and the group, WRITE on the output topic and the transactional id. The copier
connects over SASL_SSL (EOS_SECURITY, see copier_common.py). One more fault,
noacl, grants everything but WRITE on the transactional id: the copier must fail
with TRANSACTIONAL_ID_AUTHORIZATION_FAILED and write nothing. The Streams, Spring
and Flink checks run with their own --secure (each grants what its framework
needs; conformance/secure.py makes the certificate, the user and the ACLs).

--auth scram-ssl,scram,plain-ssl,plain,cert: each copier once per mode (fault
none, the same exact ACLs): SCRAM-SHA-512 or PLAIN over SASL_SSL or
SASL_PLAINTEXT, or TLS with a client certificate whose subject is the
principal (User:CN=eos-client). The frameworks' checks are left out.

--transaction-version N: the broker finalizes transaction.version N (KIP-890 part 2 at 2):
doze starts, and restarts, with doze.transaction.version=N; Kafka gets `kafka-features
upgrade|downgrade --feature transaction.version=N` after its first start (brokers.py; both
checked through ApiVersions v3). Without it each broker keeps its default: doze 1, Kafka 4.3.1 2.
The frameworks' checks get the same option.

The "protocol" column: which transaction protocol the client really used, counted from doze's
protocol trace in the job's broker.log: the EndTxn requests by version (v5 is transaction
version 2, v0-v4 the classic protocol) and the transactional Produce requests by version
(v12: version 2). Every doze job traces the txn kind for that: a copier job only its own
transactional id (doze.trace.ids, to keep the trace's cost on the broker's loop small), a
framework's job all of them (their ids are made at run time); --doze-trace KINDS instead
traces KINDS unfiltered, --no-protocol-trace turns it off. On Kafka the column shows the
finalized level only.
"""
import argparse
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))   # conformance/
from lib import DOZE, Child  # noqa: E402
from clients import verify as verify_mod  # noqa: E402
from clients.jvmcheck import build, log  # noqa: E402
from brokers import Doze, Kafka  # noqa: E402
from secure import MODES, Security  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
CLIENTS_DIR = os.path.dirname(HERE)

CACHE = os.path.join(os.environ.get("DOZE_KAFKA_CACHE", os.path.expanduser("~/.cache/doze-kafka")), "eos")
ALL_CLIENTS = ["confluent", "kafka-python", "aiokafka", "kafkajs", "franz-go", "sarama", "java",
               "confluent-consumer", "java-consumer", "streams", "spring", "flink"]
ALL_FAULTS = ["none", "broker", "client"]
SECURE_FAULTS = ALL_FAULTS + ["noacl"]
IN, OUT = "eos-in", "eos-out"


# --------------------------------------------------------------------------- clients

def _pinned(path, pattern):
    try:
        with open(path) as f:
            m = re.search(pattern, f.read(), re.M)
        return m.group(1) if m else "?"
    except OSError:
        return "?"


def _go_build(name):
    out = os.path.join(CACHE, "bin", name + "-copier")
    src = os.path.join(HERE, "go")
    srcs = [os.path.join(src, f) for f in ("go.mod", "go.sum")] + \
           [os.path.join(src, d, f) for d in (name, "common") for f in os.listdir(os.path.join(src, d))]
    if not os.path.exists(out) or os.path.getmtime(out) < max(os.path.getmtime(f) for f in srcs):
        log("go build %s" % name)
        os.makedirs(os.path.dirname(out), exist_ok=True)
        subprocess.run(["go", "build", "-o", out, "./" + name], cwd=src, check=True)
    return [out]


def _npm_ci():
    dst = os.path.join(CACHE, "node")
    lock = os.path.join(HERE, "node", "package-lock.json")
    stamp = os.path.join(dst, ".lock-copy")
    want = open(lock).read()
    if not (os.path.exists(stamp) and open(stamp).read() == want):
        log("npm ci into %s" % dst)
        os.makedirs(dst, exist_ok=True)
        for f in ("package.json", "package-lock.json"):
            shutil.copy(os.path.join(HERE, "node", f), dst)
        subprocess.run(["npm", "ci", "--ignore-scripts", "--no-audit", "--no-fund"], cwd=dst, check=True,
                       stdout=subprocess.DEVNULL)
        with open(stamp, "w") as f:
            f.write(want)
    return ["node", os.path.join(HERE, "node", "copier.js")]


JAVA_DIR = os.path.join(CLIENTS_DIR, "java")


def _java_build():
    """Builds conformance/clients/java (as its `run` script does) if the jar is missing or stale."""
    jar = os.path.join(JAVA_DIR, "target", "java-client-checks-1.0.jar")
    build(JAVA_DIR, jar)
    return ["java", "-Xmx512m", "-Dorg.slf4j.simpleLogger.defaultLogLevel=" + os.environ.get("DOZECHECK_LOG", "warn"),
            "-cp", jar + os.pathsep + os.path.join(JAVA_DIR, "target", "lib", "*"), "dozecheck.EosCopier"]


REQ = os.path.join(HERE, "requirements.txt")
CLIENTS = {
    "confluent": (lambda: [sys.executable, os.path.join(HERE, "copier_confluent.py")],
                  lambda: "confluent-kafka " + _pinned(REQ, r"^confluent-kafka==(\S+)")),
    "kafka-python": (lambda: [sys.executable, os.path.join(HERE, "copier_kafka_python.py")],
                     lambda: "kafka-python " + _pinned(REQ, r"^kafka-python==(\S+)")),
    "aiokafka": (lambda: [sys.executable, os.path.join(HERE, "copier_aiokafka.py")],
                 lambda: "aiokafka " + _pinned(REQ, r"^aiokafka==(\S+)")),
    "kafkajs": (_npm_ci, lambda: "kafkajs " + _pinned(os.path.join(HERE, "node", "package.json"),
                                                     r'"kafkajs":\s*"([^"]+)"')),
    "franz-go": (lambda: _go_build("franz"),
                 lambda: "franz-go " + _pinned(os.path.join(HERE, "go", "go.mod"),
                                               r"github.com/twmb/franz-go (\S+)")),
    "sarama": (lambda: _go_build("sarama"),
               lambda: "sarama " + _pinned(os.path.join(HERE, "go", "go.mod"), r"github.com/IBM/sarama (\S+)")),
    "java": (_java_build, lambda: "kafka-clients " + _pinned(os.path.join(JAVA_DIR, "pom.xml"),
                                                            r"<kafka.version>([^<]+)</kafka.version>")),
}
# The same copiers in a KIP-848 group (group.protocol=consumer: ConsumerGroupHeartbeat, the
# broker's assignor, TxnOffsetCommit with the member epoch): client "<name>-consumer".
KIP848 = ["--group-protocol", "consumer"]
for _name in ("confluent", "java"):
    CLIENTS[_name + "-consumer"] = ((lambda cmd: lambda: cmd() + KIP848)(CLIENTS[_name][0]),
                                    (lambda ver: lambda: ver() + ", group.protocol=consumer")(CLIENTS[_name][1]))


# --------------------------------------------------------------------------- brokers

def make_broker(broker_cls, jdir, settings, args):
    """A broker of broker_cls in jdir, at --transaction-version's level when given."""
    return broker_cls(jdir, settings or None, transaction_version=args.transaction_version)


def client_bootstrap(broker, sec):
    """Where the copier connects: the secure mode's listener, or PLAINTEXT."""
    return broker.bootstraps[sec.listener] if sec else broker.bootstrap


# --------------------------------------------------------------------------- one job

def setup_topics(bootstrap, n):
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for t, f in admin.create_topics([NewTopic(IN, 3, 1), NewTopic(OUT, 3, 1)], operation_timeout=30).items():
        f.result(60)
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                  "linger.ms": 5})
    for i in range(n):
        while True:
            try:
                p.produce(IN, key=b"k%05d" % i, value=b"v%05d-" % i + b"x" * (i % 50))
                break
            except BufferError:
                p.poll(0.1)
    left = p.flush(120)
    if left:
        raise RuntimeError("%d input records not delivered" % left)


def grant_copier(sec, bootstrap, group, txn_id, txn_write=True):
    """--secure: the copier's SCRAM user and exactly the ACLs a copier needs (made
    by the super user over PLAINTEXT); without txn_write no WRITE on its transactional id."""
    sec.add_user(bootstrap)
    grants = [("TOPIC", IN, "LITERAL", "READ"), ("TOPIC", OUT, "LITERAL", "WRITE"), ("GROUP", group, "LITERAL", "READ")]
    if txn_write:
        grants.append(("TRANSACTIONAL_ID", txn_id, "LITERAL", "WRITE"))
    sec.grant(bootstrap, grants)


TXN_ID_DENIED = re.compile(r"TRANSACTIONAL_ID_AUTHORIZATION_FAILED|Transactional ?Id authorization failed|"
                           r"TransactionalIdAuthorization", re.I)


def output_records(bootstrap):
    """Records in the output topic, committed or not (its high watermarks)."""
    from confluent_kafka import Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "eos-runner-count", "log_level": 0})
    try:
        return sum(c.get_watermark_offsets(TopicPartition(OUT, p), timeout=10)[1] for p in range(3))
    finally:
        c.close()


def wait_denied(statuses, limit_s):
    """noacl: the copier's report of the transactional id's denial once it shows, or
    None. Its status file's last_error, or else its log, where the client library
    logs the broker's answer (kafkajs reports the denied FindCoordinator only as
    "Failed to find group coordinator", and logs the error it got)."""
    deadline = time.time() + limit_s
    while time.time() < deadline:
        for p in statuses:
            texts = []
            try:
                with open(p) as fh:
                    texts.append(json.load(fh).get("last_error") or "")
                with open(p.replace("status-", "copier-").replace(".json", ".log"), errors="replace") as fh:
                    texts.append(fh.read())
            except (OSError, ValueError):
                continue
            for text in texts:
                found = TXN_ID_DENIED.search(text)
                if found:
                    line = text[text.rfind("\n", 0, found.start()) + 1:].split("\n", 1)[0]
                    return line.strip()
        time.sleep(0.2)
    return None


class Monitor:
    """Reads the group's committed offsets (OffsetFetch, require_stable) without joining it."""

    def __init__(self, bootstrap, group):
        from confluent_kafka import Consumer, TopicPartition
        self.c = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                           "isolation.level": "read_committed", "enable.auto.commit": False,
                           "socket.timeout.ms": 5000, "log_level": 0})
        self.tps = [TopicPartition(IN, p) for p in range(3)]

    def committed(self):
        try:
            return sum(max(tp.offset, 0) for tp in self.c.committed(self.tps, timeout=3))
        except Exception:
            return None

    def close(self):
        self.c.close()


def run_job(client, fault, broker_cls, args, root, mode=None):
    """One copy job; mode: a secure.MODES name (--secure, --auth), None for plaintext."""
    name = "%s-%s-%s%s" % (broker_cls.name, client, fault, "-" + mode if mode else "")
    jdir = os.path.join(root, name)
    os.makedirs(jdir)
    row = {"client": client, "version": CLIENTS[client][1](), "fault": fault, "inputs": args.records,
           "commits": 0, "aborts": 0, "result": "FAIL", "seconds": 0.0, "notes": [], "dir": jdir,
           "broker": broker_cls.name, "auth": mode or "plaintext"}
    sec = Security(jdir, mode) if mode else None
    settings = dict(sec.settings) if sec else {}
    if args.doze_trace and broker_cls is Doze:       # doze's protocol trace, into broker.log
        settings["doze.trace"] = args.doze_trace
    elif args.protocol_trace and broker_cls is Doze:  # the protocol column: this job's transactional id only
        settings["doze.trace"] = "txn"
        settings["doze.trace.ids"] = "eos-%s-%s" % (client, fault)
    broker = make_broker(broker_cls, jdir, settings, args)
    copier = None
    t_start = time.time()
    try:
        cmd = CLIENTS[client][0]()
        broker.start()
        setup_topics(broker.bootstrap, args.records)
        group = "eos-%s-%s" % (client, fault)
        txn_id = "eos-%s-%s" % (client, fault)
        if sec:
            grant_copier(sec, broker.bootstrap, group, txn_id, txn_write=fault != "noacl")
        statuses = []
        rnd = random.Random(args.seed)

        def start_copier(attempt):
            st = os.path.join(jdir, "status-%d.json" % attempt)
            statuses.append(st)
            full = cmd + ["--bootstrap", client_bootstrap(broker, sec), "--input", IN, "--output", OUT, "--group", group,
                          "--txn-id", txn_id, "--attempt", str(attempt), "--status", st,
                          "--seed", str(rnd.randrange(1 << 30))]
            env = dict(os.environ, NODE_PATH=os.path.join(CACHE, "node", "node_modules"))
            if sec:
                env.update(sec.env)
            return Child(full, log=os.path.join(jdir, "copier-%d.log" % attempt), env=env)

        t0 = time.time()
        attempt = 1
        copier = start_copier(attempt)
        if fault == "noacl":
            return finish_noacl(row, copier, statuses, broker)
        mon = Monitor(broker.bootstrap, group)
        kill_at = {"broker": [0.2, 0.55], "client": [0.4], "none": []}[fault]
        done = False
        last = -1
        crashes = 0
        def progress():
            """Records in transactions the copiers confirmed committed (from their status files)."""
            n = 0
            for p in statuses:
                try:
                    with open(p) as fh:
                        n += sum(json.load(fh).get("committed", {}).values())
                except (OSError, ValueError):
                    pass
            return n

        next_check = 0.0
        while time.time() - t0 < args.job_timeout:
            if kill_at and progress() >= kill_at[0] * args.records:
                kill_at.pop(0)
                time.sleep(rnd.uniform(0, 0.2))
                c = progress()
                if fault == "broker":
                    log("%s: kill -9 broker at %d/%d copied" % (name, c, args.records))
                    broker.kill9()
                    time.sleep(rnd.uniform(0.2, 1.0))
                    broker.start()
                    row["notes"].append("broker kill@%d" % c)
                    mon.close()
                    mon = Monitor(broker.bootstrap, group)
                else:
                    log("%s: kill -9 copier at %d/%d copied" % (name, c, args.records))
                    copier.kill9()
                    attempt += 1
                    copier = start_copier(attempt)
                    row["notes"].append("client kill@%d" % c)
            if time.time() >= next_check and not kill_at:
                c = mon.committed()
                next_check = time.time() + 0.25
                if c is not None:
                    last = c
                    if c >= args.records:
                        done = True
                        break
            if not copier.alive():
                crashes += 1
                row["notes"].append("copier %d exited rc=%s" % (attempt, copier.proc.returncode))
                log("%s: copier attempt %d exited with %s" % (name, attempt, copier.proc.returncode))
                if crashes > 2:
                    break
                attempt += 1
                copier = start_copier(attempt)
            time.sleep(0.05)
        mon.close()
        if not done and copier.alive():
            try:
                copier.proc.send_signal(signal.SIGUSR1)     # Python copiers dump their stacks
                time.sleep(1)
            except OSError:
                pass
        copier.stop(15)
        if not done:
            row["notes"].append("not done after %ds (%s/%d committed)" % (args.job_timeout, last, args.records))
        sts = []
        for p in statuses:
            try:
                with open(p) as f:
                    sts.append(json.load(f))
            except (OSError, ValueError) as e:
                row["notes"].append("status %s: %s" % (os.path.basename(p), e))
        row["commits"] = sum(s.get("commits", 0) for s in sts)
        row["aborts"] = sum(s.get("aborts", 0) for s in sts)
        errs = sum(s.get("errors", 0) for s in sts)
        if errs:
            row["notes"].append("%d client errors" % errs)
        if sts and sts[0].get("version"):
            row["version"] = sts[0]["version"]
        row["copy_seconds"] = round(time.time() - t0, 1)
        res = verify_mod.verify(broker.bootstrap, IN, OUT, sts)
        row["dups"], row["lost"] = res.get("duplicated", "?"), res.get("missing", "?")
        with open(os.path.join(jdir, "verify.json"), "w") as f:
            json.dump(res, f, indent=1)
        if not res["ok"]:
            row["notes"].append("verify: " + "; ".join(res["problems"][:3]))
        if kill_at:
            row["notes"].append("fault not injected (job done first)")
        if res["ok"] and done and crashes == 0 and not kill_at:
            row["result"] = "PASS"
    except Exception as e:  # noqa: BLE001
        row["notes"].append("runner: %s: %s" % (type(e).__name__, e))
        log("%s: %r" % (name, e))
    finally:
        if copier and copier.alive():
            copier.kill9()
        try:
            broker.stop()
        except Exception as e:  # noqa: BLE001
            row["notes"].append("broker stop: %s" % e)
        add_protocol(row, broker_cls, args, [os.path.join(jdir, "broker.log")])
        if row["result"] == "PASS" and not args.keep:
            broker.cleanup()
        row["seconds"] = round(time.time() - t_start, 1)
    return row


def finish_noacl(row, copier, statuses, broker):
    """noacl: PASS when the copier reports TRANSACTIONAL_ID_AUTHORIZATION_FAILED within
    60 s and the output topic holds no record, committed or not."""
    denied = wait_denied(statuses, 60)
    copier.stop(15)
    written = output_records(broker.bootstrap)
    row["notes"].append("denied: %s" % (denied or "no authorization error seen")[:120])
    row["notes"].append("%d records in %s" % (written, OUT))
    row["result"] = "PASS" if denied and written == 0 else "FAIL"
    return row


# JVM frameworks with checks of their own (a job of their shape does not fit the
# copier protocol): each check runs one fault per call and writes result.json;
# their rows join the table. client -> (folder, version, faults it implements).
EXTERNAL = {
    "streams": ("streams", "Kafka Streams 4.3.1 exactly_once_v2", {"none", "client", "broker"}),
    "spring": ("spring", "Spring Kafka 4.0.6 (Spring Boot 4.0.7)", {"none", "client", "broker"}),
    "flink": ("flink", "Flink 2.2.1 + flink-connector-kafka 5.0.0-2.2 (kafka-clients 4.2.0)",
              {"none", "client", "broker"}),
}


def run_external(client, fault, kafka, root, secure=False, args=None):
    """One fault of a framework's own check (conformance/clients/<folder>/run)."""
    folder, version, faults = EXTERNAL[client]
    row = {"client": client, "version": version, "auth": "scram-ssl" if secure else "plaintext", "fault": fault,
           "inputs": "-", "commits": "-",
           "aborts": "-", "result": "FAIL", "seconds": 0.0, "notes": [], "broker": "kafka" if kafka else "doze"}
    if fault not in faults:
        row["result"], row["notes"] = "NOT RUN", ["this check has no %s fault yet" % fault]
        return row
    jroot = os.path.join(root, "%s-%s-%s" % (row["broker"], client, fault))
    os.makedirs(jroot, exist_ok=True)
    cmd = [os.path.join(CLIENTS_DIR, folder, "run"), "--faults", fault, "--workdir", jroot]
    if kafka:
        cmd.append("--kafka")
    if secure:
        cmd.append("--secure")
    if args is not None and args.transaction_version is not None:
        cmd += ["--transaction-version", str(args.transaction_version)]
    trace = args is not None and not kafka and (args.doze_trace or ("txn" if args.protocol_trace else None))
    if trace:
        cmd += ["--doze-trace", trace]
    t0 = time.time()
    with open(os.path.join(jroot, "check.log"), "w") as out:
        code = subprocess.call(cmd, stdout=out, stderr=subprocess.STDOUT, timeout=900)
    row["seconds"] = round(time.time() - t0, 1)
    row["result"] = "PASS" if code == 0 else "FAIL"
    for directory, _, names in os.walk(jroot):
        if "result.json" in names:
            with open(os.path.join(directory, "result.json")) as fh:
                res = json.load(fh)
            for key in ("records", "inputs", "n"):
                if isinstance(res, dict) and key in res:
                    row["inputs"] = res[key]
            if isinstance(res, dict):
                row["notes"] += [n for n in res.get("notes", []) if isinstance(n, str)]
    if args is not None:
        add_protocol(row, Kafka if kafka else Doze, args,
                     [os.path.join(d, "broker.log") for d, _, names in os.walk(jroot) if "broker.log" in names])
    return row


# --------------------------------------------------------------------------- the protocol column

TRACED_REQUEST = re.compile("\u2192 (EndTxn|Produce|TxnOffsetCommit|AddPartitionsToTxn|AddOffsetsToTxn|"
                            "InitProducerId) v(\\d+) ")


def protocol_counts(paths):
    """Requests in doze's protocol trace (broker.log files) -> {"EndTxn v5": n, ...} (Produce:
    the transactional ones only), and "steps v2": the transaction steps the trace says were
    of transaction version 2."""
    counts = {}
    for path in paths:
        try:
            f = open(path, errors="replace")
        except OSError:
            continue
        with f:
            for line in f:
                if "\u2192 " in line:
                    m = TRACED_REQUEST.search(line)
                    if m and (m.group(1) != "Produce" or "transactional_id=" in line):
                        key = "%s v%s" % m.groups()
                        counts[key] = counts.get(key, 0) + 1
                elif "transaction version 2" in line:
                    counts["steps v2"] = counts.get("steps v2", 0) + 1
    return counts


def protocol_text(counts):
    """ "v2 (EndTxn v5 x123; Produce v12 x456)", "classic (EndTxn v3 x118; Produce v9 x300)",
    "mixed (...)" when both show, or what is missing."""
    def by_version(api):
        return {int(k.split(" v")[1]): n for k, n in counts.items() if k.startswith(api + " v")}

    def listed(api, d):
        return ", ".join("%s v%d x%d" % (api, v, n) for v, n in sorted(d.items(), reverse=True)) or "no " + api

    end, produce = by_version("EndTxn"), by_version("Produce")
    if not end and not produce:
        return "no transaction traced"
    v2 = end.get(5, 0) + produce.get(12, 0)
    classic = sum(n for v, n in end.items() if v < 5) + sum(n for v, n in produce.items() if v < 12)
    kind = "mixed" if v2 and classic else "v2" if v2 else "classic"
    return "%s (%s; %s)" % (kind, listed("EndTxn", end), listed("Produce", produce))


def add_protocol(row, broker_cls, args, logs):
    """The row's protocol column (see the top of this file) and its counts."""
    if broker_cls is not Doze:
        level = args.transaction_version if args.transaction_version is not None else "2 (default)"
        row["protocol"] = "kafka TV%s, not traced" % level
        return
    if not (args.doze_trace or args.protocol_trace):
        row["protocol"] = "not traced"
        return
    counts = protocol_counts(logs)
    row["protocol_counts"] = counts
    row["protocol"] = protocol_text(counts)


def print_table(rows, out=sys.stdout):
    cols = ["client", "version", "auth", "fault", "inputs", "commits", "aborts", "dups", "lost", "protocol", "result",
            "seconds", "notes"]
    cells = [[str(r.get(c, "-")) if c != "notes" else ", ".join(r["notes"]) for c in cols] for r in rows]
    w = [max(len(c), *(len(r[i]) for r in cells)) if cells else len(c) for i, c in enumerate(cols)]
    print("  ".join(c.ljust(w[i]) for i, c in enumerate(cols)), file=out)
    print("  ".join("-" * w[i] for i in range(len(cols))), file=out)
    for r in cells:
        print("  ".join(x.ljust(w[i]) for i, x in enumerate(r)), file=out)
    out.flush()


def main():
    ap = argparse.ArgumentParser(description="exactly-once matrix (see conformance/clients/README.md)")
    ap.add_argument("--clients", default=",".join(ALL_CLIENTS))
    ap.add_argument("--faults", default=",".join(ALL_FAULTS))
    ap.add_argument("--kafka", action="store_true", help="run against a real Kafka 4.3.1 instead of doze-kafka")
    ap.add_argument("--records", type=int, default=10000)
    ap.add_argument("--job-timeout", type=int, default=420, help="seconds per copy job")
    ap.add_argument("--workdir", help="where job directories go (default: a new dir under %s/runs)" % CACHE)
    ap.add_argument("--keep", action="store_true", help="keep broker data of passing jobs")
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--json", help="write the rows here")
    ap.add_argument("--doze-trace", metavar="KINDS", help="doze's protocol trace (doze.trace: txn, group, all) "
                    "into each job's broker.log")
    ap.add_argument("--transaction-version", type=int, choices=(0, 1, 2),
                    help="the broker's finalized transaction.version (2: KIP-890 part 2); doze: "
                    "doze.transaction.version=N at every start; Kafka: kafka-features upgrade|downgrade after "
                    "its first start; default: the broker's own (doze 1, Kafka 4.3.1 2)")
    ap.add_argument("--no-protocol-trace", dest="protocol_trace", action="store_false",
                    help="no doze trace for the protocol column (see the top of this file)")
    ap.add_argument("--secure", action="store_true", help="copiers over SASL_SSL with exactly their ACLs; "
                    "adds the noacl fault (see the top of this file)")
    ap.add_argument("--auth", help="authentication modes to run each copier in, with fault none "
                    "(a list of: %s); the frameworks' checks are left out" % ", ".join(MODES))
    a = ap.parse_args()
    clients = [c for c in a.clients.split(",") if c]
    faults = [f for f in a.faults.split(",") if f]
    for c in clients:
        if c not in CLIENTS and c not in EXTERNAL:
            ap.error("unknown client %r (have %s)" % (c, ", ".join(ALL_CLIENTS)))
    modes = [m for m in (a.auth or "").split(",") if m]
    for m in modes:
        if m not in MODES:
            ap.error("unknown authentication mode %r (have %s)" % (m, ", ".join(MODES)))
    known = SECURE_FAULTS if a.secure or modes else ALL_FAULTS
    if a.secure and a.faults == ",".join(ALL_FAULTS):
        faults = list(SECURE_FAULTS)
    elif modes and a.faults == ",".join(ALL_FAULTS):
        faults = ["none"]
    for f in faults:
        if f not in known:
            ap.error("unknown fault %r (have %s)" % (f, ", ".join(known)))
    root = a.workdir or os.path.join(CACHE, "runs", time.strftime("%Y%m%d-%H%M%S") + ("-kafka" if a.kafka else "-doze"))
    os.makedirs(root, exist_ok=True)
    log("job directories under %s" % root)
    broker_cls = Kafka if a.kafka else Doze
    t_run = time.time()
    rows = []
    jobs = [(c, f, m) for c in clients if not (modes and c in EXTERNAL)      # --auth: copiers only
            for m in modes or ["scram-ssl" if a.secure else None]
            for f in faults if not (f == "noacl" and c in EXTERNAL)]            # the checks have no noacl
    for c, f, m in jobs:
        log("---- %s / %s / %s%s" % (broker_cls.name, c, f, " / " + m if m else ""))
        row = run_external(c, f, a.kafka, root, a.secure, a) if c in EXTERNAL else run_job(c, f, broker_cls, a, root, m)
        log("%s %s %s: %s in %.1fs [%s] %s" % (broker_cls.name, c, f, row["result"], row["seconds"],
                                                row.get("protocol", "-"), "; ".join(row["notes"])))
        rows.append(row)
        with open(a.json or os.path.join(root, "results.json"), "w") as fh:
            json.dump(rows, fh, indent=1)
    level = "transaction.version %s" % (a.transaction_version if a.transaction_version is not None
                                         else "at the broker's default")
    if a.kafka:
        print("broker: Apache Kafka 4.3.1 (conformance/kafka/realkafka.py), %s" % level)
    else:
        import hashlib
        with open(DOZE, "rb") as fh:
            print("broker: doze-kafka %s (sha1 %s at the end of the run), %s"
                  % (DOZE, hashlib.sha1(fh.read()).hexdigest()[:12], level))
    print("wall time: %.0f s" % (time.time() - t_run))
    print_table(rows)
    failed = [r for r in rows if r["result"] != "PASS"]
    print("%d passed, %d failed; job dirs in %s" % (len(rows) - len(failed), len(failed), root))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
