#!/usr/bin/env python3
"""A soak of doze-kafka: sustained mixed load plus hostile clients, with the
broker's RSS, descriptors and loop latency sampled. See conformance/soak/README.md.

    python3 conformance/soak/soak.py --minutes 10
    python3 conformance/soak/soak.py --minutes 1          # a quick check

It starts doze as a child process and, all on 127.0.0.1, runs for --minutes:
  - ~1,000 connections in all: idle raw sockets that did an ApiVersions, and
    --active raw connections sending Metadata/ApiVersions and checking answers;
  - --producers transactional confluent-kafka producers in --producer-procs
    processes, committing and aborting at random, each journaling its outcomes;
  - --consumer-procs processes, each with one read_committed member of every
    one of --groups consumer groups;
  - hostile clients: never-readers (send Fetch/Metadata, never read) and
    drippers (send a request one byte at a time);
  - every --kill-every seconds a kill -9 of one producer or consumer process,
    restarted 1-3 s later with the same transactional ids;
  - by default a steady state: the topic has retention.ms (--retention-ms,
    120000) and 1 MiB segments, so the log stays a couple of minutes long;
    --retention-ms 0 keeps everything (the log, and doze's index, grow);
and samples the broker's RSS, descriptors, CPU, connections, loop stats (if
doze logs them) and an ApiVersions probe. Then it verifies the data and
prints a report ending in `RESULT: ok` or `RESULT: FAIL (reasons)`.
Exit status 0 or 1. Needs confluent-kafka: the script runs itself again in conformance/needs.py's
venv (${DOZE_KAFKA_CACHE:-~/.cache/doze-kafka}/eos/venv), made if missing.
"""
import argparse
import collections
import hashlib
import json
import os
import random
import re
import selectors
import shutil
import signal
import socket
import statistics
import struct
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))   # conformance/
from lib import DOZE, Child  # noqa: E402
import doze_kafka as dk  # noqa: E402

TOPIC = "soak-txn"
PARTITIONS = 6
SEGMENT_BYTES = 1048576          # with --retention-ms: small segments, so retention deletes whole ones
RETENTION_CHECK_MS = 5000        # with --retention-ms: log.retention.check.interval.ms
CACHE = os.environ.get("DOZE_KAFKA_CACHE", os.path.join(os.path.expanduser("~"), ".cache", "doze-kafka"))


# --- the venv (the one conformance/clients/run sets up) ------------------------

def ensure_venv():
    """The client libraries: in conformance/needs.py's venv (run again there)."""
    import needs
    needs.venv()


# --- the Kafka protocol: doze_kafka's Client and codec -------------------------------

class ProtoError(Exception):
    pass


# what a raw connection may raise: the socket's errors, the broker closing it (EOFError),
# an answer that does not decode or check (doze_kafka.ProtocolError, ProtoError)
CONN_ERRORS = (OSError, EOFError, dk.ProtocolError, ProtoError, struct.error)
METADATA = dk.HANDLERS[dk.ApiKey.METADATA][0]
FETCH = dk.HANDLERS[dk.ApiKey.FETCH][0]


def metadata_v1(corr, client_id, topics):
    """A whole Metadata v1 request frame."""
    return dk.encode_request(METADATA, 1, corr, dk.Msg(topics=[dk.Msg(name=t) for t in topics]), client_id)


def fetch_v4(corr, client_id, topic, partitions, offset=0, pmax=1 << 20, max_bytes=4 << 20, isolation=1):
    """A whole Fetch v4 request frame; offset: one for all partitions, or {partition: offset}."""
    return dk.encode_request(FETCH, 4, corr, dk.Msg(
        replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=max_bytes, isolation_level=isolation,  # 1: read_committed
        topics=[dk.Msg(topic=topic, partitions=[dk.Msg(
            partition=p, fetch_offset=offset.get(p, 0) if isinstance(offset, dict) else offset,
            partition_max_bytes=pmax) for p in partitions])]), client_id)


class RawConn(dk.Client):
    """A blocking connection (doze_kafka.Client) that checks every answer."""

    def __init__(self, port, client_id, timeout=10.0):
        super().__init__(port, client_id, timeout)
        self.port = port
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.next_correlation_id = random.randrange(1 << 20)

    def read_frame(self):
        size = dk.I32.unpack(dk.recv_exactly(self.sock, 4))[0]
        if not 4 <= size <= 64 << 20:
            raise ProtoError(f"answer frame of {size} bytes")
        return dk.recv_exactly(self.sock, size)

    def api_versions(self):
        r = self.call(dk.ApiKey.API_VERSIONS, 0)
        apis = {a.api_key: (a.min_version, a.max_version) for a in r.api_keys}
        if r.error_code != 0 or 18 not in apis or 3 not in apis or 1 not in apis:
            raise ProtoError(f"ApiVersions v0: error {r.error_code}, {len(apis)} APIs")
        return apis

    def metadata(self, topics, partitions):
        r = self.call(dk.ApiKey.METADATA, 1, topics=[dk.Msg(name=t) for t in topics])
        brokers = [(b.node_id, b.host, b.port, b.rack) for b in r.brokers]
        got = {t.name: t for t in r.topics}
        if len(brokers) != 1 or brokers[0][1] != "127.0.0.1" or brokers[0][2] != self.port:
            raise ProtoError(f"Metadata v1: brokers {brokers}")
        node = brokers[0][0]
        for name in topics:
            t = got.get(name)
            parts = [(p.error_code, p.partition_index, p.leader_id) for p in t.partitions] if t else []
            if t is None or t.error_code != 0 or len(parts) != partitions or \
                    any(err != 0 or leader != node for err, _, leader in parts):
                raise ProtoError(f"Metadata v1: topic {name}: error {t and t.error_code}, partitions {parts}")
        return got

    def log_starts(self, topic, partitions):
        """ListOffsets v1, timestamp -2 (earliest): {partition: log start offset}."""
        r = self.call(dk.ApiKey.LIST_OFFSETS, 1, replica_id=-1, topics=[dk.Msg(name=topic, partitions=[
            dk.Msg(partition_index=p, timestamp=-2) for p in partitions])])
        got = {}
        for t in r.topics:
            for p in t.partitions:
                if p.error_code != 0:
                    raise ProtoError(f"ListOffsets v1: partition {p.partition_index}: error {p.error_code}")
                got[p.partition_index] = p.offset
        return got

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass


# --- shared bits for the worker processes -----------------------------------------

class Journal:
    """Append-only lines, one write(2) each: what returned survives kill -9."""

    def __init__(self, path):
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self.lock = threading.Lock()

    def write(self, text):
        with self.lock:
            os.write(self.fd, text.encode())

    def line(self, *fields):
        self.write(" ".join(str(f) for f in fields) + "\n")


def worker_setup(conf):
    """SIGTERM stops the worker cleanly; it also stops by itself at its deadline,
    and at once if the soak that started it goes away."""
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    parent = conf["parent"]
    deadline = conf["deadline"]

    def watchdog():
        while True:
            if os.getppid() != parent:
                os._exit(3)
            if time.time() > deadline + 120:
                os._exit(4)
            if time.time() > deadline:
                stop.set()
            time.sleep(0.5)
    threading.Thread(target=watchdog, daemon=True).start()
    return stop


def err_text(e):
    try:
        k = e.args[0]
        return f"{k.name()}: {k.str()}"
    except Exception:
        return repr(e)


def oneline(s):
    return str(s).replace("\n", " ")[:400]


# --- role: transactional producers -----------------------------------------------

def role_producers(conf):
    from confluent_kafka import Producer, KafkaException
    stop = worker_setup(conf)
    w, attempt, bootstrap = conf["index"], conf["attempt"], conf["bootstrap"]
    journal = Journal(conf["journal"])
    journal.line("START", w, attempt, time.time())
    pmin, pmax = conf["pause"]

    def run_one(i):
        rnd = random.Random()
        txn_id = f"soak-w{w}-p{i}"
        name = f"producer {txn_id} (attempt {attempt})"

        def on_error(e):
            journal.line("ERR", "-", time.time(), oneline(f"{name}: error_cb {e}"))

        def on_delivery(err, msg):
            # where each record was written: with retention, the checks need to
            # know whether a record the scan does not find is below the log start.
            # librdkafka serves these within commit_transaction's flush, so a
            # journaled C comes after every D of its transaction.
            if err is None and msg.offset() >= 0:
                f = msg.value().split(b"|", 2)
                journal.line("D", f[0].decode(), f[1].decode(), msg.partition(), msg.offset())

        def new_producer():
            while not stop.is_set():
                pconf = {"bootstrap.servers": bootstrap, "transactional.id": txn_id,
                         "transaction.timeout.ms": 60000, "linger.ms": 5,
                         "message.timeout.ms": 30000, "error_cb": on_error,
                         "client.id": txn_id}
                if conf.get("journal_offsets"):
                    pconf["on_delivery"] = on_delivery
                p = Producer(pconf)
                try:
                    p.init_transactions(30)
                    return p
                except KafkaException as e:
                    journal.line("ERR", "-", time.time(), oneline(f"{name}: init_transactions: {err_text(e)}"))
                    stop.wait(1)
            return None

        stop.wait(rnd.uniform(0, 3))                   # do not all start at once
        p = new_producer()
        seq = 0
        while p is not None and not stop.is_set():
            seq += 1
            tag = f"{w}.{i}.{attempt}.{seq}"
            n = rnd.randint(1, 20)
            plan = "abort" if rnd.random() < 0.25 else "commit"
            journal.line("B", tag, n, plan)
            phase = "begin"
            try:
                p.begin_transaction()
                phase = "produce"
                for k in range(n):
                    pad = b"x" * rnd.randint(10, 1000)
                    p.produce(TOPIC, key=tag.encode(), partition=rnd.randrange(PARTITIONS),
                              value=f"{tag}|{k}|{n}|{plan}|".encode() + pad,
                              headers=[("plan", plan.encode())])
                if plan == "abort":
                    phase = "flush"
                    left = p.flush(30)                  # the records are really in the log
                    if left:
                        journal.line("ERR", tag, time.time(), f"{name}: flush left {left} records")
                    journal.line("X", tag)
                    phase = "abort"
                    p.abort_transaction(30)
                    journal.line("A", tag, n, "plan")
                else:
                    journal.line("E", tag)
                    phase = "commit"
                    p.commit_transaction(30)
                    journal.line("C", tag, n)
            except KafkaException as e:
                err = e.args[0]
                journal.line("ERR", tag, time.time(), oneline(f"{name}: {phase}: {err_text(e)}"))
                if phase == "commit" and err.retriable():
                    try:
                        p.commit_transaction(30)
                        journal.line("C", tag, n)
                        continue
                    except KafkaException as e2:
                        journal.line("ERR", tag, time.time(), oneline(f"{name}: commit retry: {err_text(e2)}"))
                        err = e2.args[0]
                if err.txn_requires_abort():
                    try:
                        p.abort_transaction(30)
                        journal.line("A", tag, n, "error")
                    except KafkaException as e3:
                        journal.line("ERR", tag, time.time(), oneline(f"{name}: abort: {err_text(e3)}"))
                        journal.line("U", tag, n)
                        p = new_producer()
                else:
                    journal.line("U", tag, n)           # outcome unknown: a new producer fences it
                    p = new_producer()
                stop.wait(0.5)
                continue
            t_end = time.time() + rnd.uniform(pmin, pmax)
            while not stop.is_set() and time.time() < t_end:
                p.poll(0.2)
        if p is not None:
            p.flush(10)

    threads = [threading.Thread(target=run_one, args=(i,), daemon=True) for i in range(conf["count"])]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    journal.line("DONE", w, attempt, time.time())


# --- role: read_committed consumers -------------------------------------------------

EXPECTED_COMMIT_ERRORS = {"REBALANCE_IN_PROGRESS", "ILLEGAL_GENERATION"}


def role_consumers(conf):
    from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
    stop = worker_setup(conf)
    w, attempt, bootstrap = conf["index"], conf["attempt"], conf["bootstrap"]

    def run_one(group):
        journal = Journal(os.path.join(conf["dir"], f"cons-{group}-w{w}-a{attempt}.log"))
        name = f"consumer {group}/w{w} (attempt {attempt})"
        journal.line("START", time.time())

        def on_error(e):
            journal.line("ERR", time.time(), oneline(f"{name}: error_cb {e}"))

        def on_commit(err, partitions):
            bad = []
            if err is not None and err.code() != KafkaError._NO_OFFSET:
                bad.append(err)
            bad += [tp.error for tp in partitions or [] if tp.error is not None]
            for e in bad:
                kind = "NOTE" if e.name() in EXPECTED_COMMIT_ERRORS else "ERR"
                journal.line(kind, time.time(), oneline(f"{name}: offset commit: {e.name()}: {e.str()}"))

        c = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                      "isolation.level": "read_committed", "auto.offset.reset": "earliest",
                      "enable.auto.commit": True, "auto.commit.interval.ms": 1000,
                      "enable.auto.offset.store": False, "session.timeout.ms": 10000,
                      "heartbeat.interval.ms": 1000, "error_cb": on_error, "on_commit": on_commit,
                      "client.id": f"soak-{group}-w{w}"})
        c.subscribe([TOPIC])
        while not stop.is_set():
            try:
                msgs = c.consume(num_messages=500, timeout=0.5)
            except KafkaException as e:
                journal.line("ERR", time.time(), oneline(f"{name}: consume: {err_text(e)}"))
                stop.wait(0.5)
                continue
            lines, ends = [], {}
            for m in msgs:
                e = m.error()
                if e is not None:
                    if e.code() != KafkaError._PARTITION_EOF:
                        lines.append(f"ERR {time.time()} {oneline(name + ': message error ' + str(e))}\n")
                    continue
                f = (m.value() or b"").split(b"|", 4)
                if len(f) < 5:
                    lines.append(f"ERR {time.time()} {name}: unparsable record at {m.partition()}:{m.offset()}\n")
                    continue
                tag, k, plan = f[0].decode(), f[1].decode(), f[3].decode()
                lines.append(f"R {tag} {k} {m.partition()} {m.offset()}\n")
                if plan != "commit":
                    lines.append(f"V {time.time()} record of an aborted-by-plan transaction {tag} #{k} "
                                 f"at {m.partition()}:{m.offset()}\n")
                ends[m.partition()] = m.offset() + 1
            if lines:
                journal.write("".join(lines))       # first journaled, then the offset stored
            if ends:
                try:
                    c.store_offsets(offsets=[TopicPartition(TOPIC, p, o) for p, o in ends.items()])
                except KafkaException as e:
                    kind = "NOTE" if e.args[0].code() == KafkaError._STATE else "ERR"
                    journal.line(kind, time.time(), oneline(f"{name}: store_offsets: {err_text(e)}"))
        c.close()
        journal.line("DONE", time.time())

    threads = [threading.Thread(target=run_one, args=(g,), daemon=True) for g in conf["groups"]]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


# --- role: raw connections (idle and active) -----------------------------------------

def percentiles(xs):
    if not xs:
        return None
    s = sorted(xs)

    def q(f):
        return s[min(len(s) - 1, int(f * len(s)))]
    return {"n": len(s), "p50": q(0.50), "p99": q(0.99), "max": s[-1]}


def role_raw(conf):
    stop = worker_setup(conf)
    port = conf["port"]
    t0 = conf["t0"]
    errors, lock = [], threading.Lock()
    stats = collections.Counter()
    lat = []

    def error(msg):
        with lock:
            errors.append((time.time(), msg))

    idle = {}
    for k in range(conf["idle"]):
        if stop.is_set():
            break
        try:
            c = RawConn(port, f"soak-idle-{k}")
            c.api_versions()
            idle[k] = c
        except CONN_ERRORS as e:
            error(f"idle connection {k}: setup: {e!r}")
        if k % 50 == 49:
            time.sleep(0.05)
    stats["idle_opened"] = len(idle)

    def watch_idle():
        sel = selectors.DefaultSelector()
        for k, c in idle.items():
            sel.register(c.sock, selectors.EVENT_READ, k)
        while not stop.is_set():
            for key, _ in sel.select(1.0):
                k = key.data
                try:
                    data = idle[k].sock.recv(4096)
                    msg = "closed by the broker" if not data else f"{len(data)} unexpected bytes"
                except OSError as e:
                    msg = f"recv: {e!r}"
                error(f"idle connection {k}: {msg}")
                stats["idle_lost"] += 1
                sel.unregister(idle[k].sock)
                idle.pop(k).close()
        sel.close()
    watcher = threading.Thread(target=watch_idle, daemon=True)
    watcher.start()

    def active(k):
        rnd = random.Random(k)
        conn = None
        n = 0
        while not stop.is_set():
            try:
                if conn is None:
                    conn = RawConn(port, f"soak-active-{k}")
                stop.wait(rnd.uniform(1.0, 4.0))
                if stop.is_set():
                    break
                n += 1
                t = time.perf_counter()
                if n % 2:
                    conn.metadata([TOPIC], PARTITIONS)
                    stats["metadata_ok"] += 1
                else:
                    conn.api_versions()
                    stats["api_versions_ok"] += 1
                with lock:
                    lat.append((time.perf_counter() - t) * 1000)
            except CONN_ERRORS as e:
                error(f"active connection {k}: request {n}: {e!r}")
                stats["active_errors"] += 1
                if conn:
                    conn.close()
                conn = None
                stop.wait(1)
        if conn:
            conn.close()
    threads = [threading.Thread(target=active, args=(k,), daemon=True) for k in range(conf["active"])]
    for t in threads:
        t.start()
        time.sleep(0.02)
    stop.wait()
    for t in threads:
        t.join(15)
    watcher.join(5)
    # still there, and still answered?
    for k, c in list(idle.items()):
        try:
            c.sock.settimeout(10)
            c.api_versions()
            stats["idle_answered_at_end"] += 1
        except CONN_ERRORS as e:
            error(f"idle connection {k}: at the end: {e!r}")
        c.close()
    with open(conf["stats"], "w") as f:
        json.dump({"stats": stats, "errors": errors, "latency_ms": percentiles(lat)}, f)


# --- role: hostile clients (never-readers, drippers) ------------------------------------

def role_hostile(conf):
    stop = worker_setup(conf)
    port = conf["port"]
    t0 = conf["t0"]
    stats = collections.Counter()
    events, lock = [], threading.Lock()

    def note(msg):
        with lock:
            if len(events) < 200:
                events.append(f"+{time.time() - t0:.1f}s {msg}")

    # With retention, offset 0 is soon out of range, and a Fetch of it is answered
    # with an error of a few bytes: the never-readers then fetch from the log start,
    # which a well-behaved side connection asks for every 5 s (ListOffsets v1, -2).
    starts = {}

    def watch_log_start():
        conn = None
        while not stop.is_set():
            try:
                conn = conn or RawConn(port, "soak-never-reader-offsets")
                starts.update(conn.log_starts(TOPIC, range(PARTITIONS)))
            except CONN_ERRORS as e:
                note(f"never-readers' log start: {e!r}")
                if conn:
                    conn.close()
                conn = None
            stop.wait(5)
        if conn:
            conn.close()

    def never_reader(k):
        """Sends Fetch (6 partitions from offset 0, or with retention from the log
        start; read_committed for even k) and Metadata requests, at most
        conf['nr_rate'] a second, and never reads; reconnects every
        conf['nr_reconnect_s'] (k == 0 never does)."""
        life = float("inf") if k == 0 else conf["nr_reconnect_s"]
        corr = 0
        while not stop.is_set():
            try:
                s = socket.create_connection(("127.0.0.1", port), timeout=10)
            except OSError as e:
                note(f"never-reader {k}: connect: {e!r}")
                stop.wait(1)
                continue
            s.setblocking(False)
            stats["nr_connects"] += 1
            opened, pending, blocked_since = time.time(), b"", None
            while not stop.is_set() and time.time() - opened < life:
                if not pending:
                    corr += 1
                    if corr % 4:                # Fetch from offset 0 (log start); even k read_committed
                        pending = fetch_v4(corr, f"soak-never-reader-{k}", TOPIC, range(PARTITIONS),
                                           offset=dict(starts) if conf["retention"] else 0, isolation=1 - k % 2)
                    else:
                        pending = metadata_v1(corr, f"soak-never-reader-{k}", [TOPIC])
                try:
                    sent = s.send(pending)
                    pending = pending[sent:]
                    if not pending:
                        stats["nr_requests_sent"] += 1
                    blocked_since = None
                    stop.wait(1.0 / conf["nr_rate"])
                except (BlockingIOError, InterruptedError):
                    if blocked_since is None:
                        blocked_since = time.time()
                        stats["nr_send_blocked"] += 1
                    stop.wait(0.2)
                except OSError as e:
                    stats["nr_closed_by_broker"] += 1
                    note(f"never-reader {k}: closed after {time.time() - opened:.1f}s: {e!r}")
                    break
            s.close()

    def dripper(k):
        """Sends a Metadata request one byte every conf['drip_s'][k] seconds,
        reads the answer, and again; reconnects when the broker closes it."""
        interval = conf["drip_s"][k % len(conf["drip_s"])]
        while not stop.is_set():
            try:
                conn = RawConn(port, f"soak-dripper-{k}", timeout=30)
            except OSError as e:
                note(f"dripper {k}: connect: {e!r}")
                stop.wait(1)
                continue
            stats["drip_connects"] += 1
            opened = time.time()
            try:
                while not stop.is_set():
                    conn.next_correlation_id += 1
                    req = metadata_v1(conn.next_correlation_id, f"soak-dripper-{k}", [TOPIC])
                    for i in range(len(req)):
                        if stop.wait(interval):
                            break
                        conn.sock.sendall(req[i:i + 1])
                        stats["drip_bytes"] += 1
                    if stop.is_set():
                        break
                    if conn.receive(dk.ApiKey.METADATA, 1)[0] != conn.next_correlation_id:
                        raise ProtoError("wrong correlation id")
                    stats["drip_answers"] += 1
            except CONN_ERRORS as e:
                stats["drip_closed"] += 1
                note(f"dripper {k}: after {time.time() - opened:.1f}s: {e!r}")
            conn.close()

    threads = [threading.Thread(target=never_reader, args=(k,), daemon=True) for k in range(conf["never_readers"])]
    if conf["retention"]:
        threads.append(threading.Thread(target=watch_log_start, daemon=True))
    threads += [threading.Thread(target=dripper, args=(k,), daemon=True) for k in range(conf["drippers"])]
    for t in threads:
        t.start()
    stop.wait()
    for t in threads:
        t.join(10)
    with open(conf["stats"], "w") as f:
        json.dump({"stats": stats, "events": events}, f)


# --- the soak itself -------------------------------------------------------------------

class Broker:
    """Sampling the broker process from /proc."""

    STATS_RE = re.compile(r"loop stats:(.*)")

    def __init__(self, doze, t0):
        self.doze, self.t0 = doze, t0
        self.pid = doze.proc.pid
        self.port = doze.port
        self.log_pos = 0
        self.loop_stats = []           # (t, {key: number})
        self.levels = collections.Counter()
        self.warnings = collections.Counter()
        self.warning_examples = {}
        self.tracebacks = []

    def rss_kb(self):
        with open(f"/proc/{self.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        return None

    def fds(self):
        return len(os.listdir(f"/proc/{self.pid}/fd"))

    def data_fds(self):
        """Descriptors of files in the data directory (segments the log holds open)."""
        root = os.path.realpath(self.doze.data) + os.sep
        n = 0
        for fd in os.listdir(f"/proc/{self.pid}/fd"):
            try:
                n += os.readlink(f"/proc/{self.pid}/fd/{fd}").startswith(root)
            except OSError:
                pass
        return n

    def cpu_s(self):
        with open(f"/proc/{self.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def connections(self):
        """Established TCP connections whose local end is the broker's port."""
        n = 0
        hexport = f":{self.port:04X}"
        with open("/proc/net/tcp") as f:
            next(f)
            for line in f:
                parts = line.split()
                if parts[1].endswith(hexport) and parts[3] == "01":
                    n += 1
        return n

    def read_log(self):
        try:
            with open(self.doze.log_path, errors="replace") as f:
                f.seek(self.log_pos)
                data = f.read()
        except OSError:
            return
        cut = data.rfind("\n") + 1
        self.log_pos += len(data[:cut].encode(errors="replace"))
        now = time.time() - self.t0
        for line in data[:cut].splitlines():
            m = self.STATS_RE.search(line)
            if m:
                try:                                   # the line's own time: "2026-12-01 10:49:13,796"
                    now = time.mktime(time.strptime(line[:19], "%Y-%m-%d %H:%M:%S")) \
                        + int(line[20:23]) / 1000 - self.t0
                except ValueError:
                    pass
                vals = {}
                for kv in m.group(1).split():
                    k, _, v = kv.partition("=")
                    try:
                        vals[k] = float(v)
                    except ValueError:
                        pass
                self.loop_stats.append((now, vals))
            for level in ("WARNING", "ERROR", "CRITICAL"):
                if f" {level} " in line or line.startswith(level):
                    self.levels[level] += 1
                    pattern = re.sub(r"\d+(\.\d+)?", "N", line.split(level, 1)[1])[:160]
                    self.warnings[(level, pattern)] += 1
                    self.warning_examples.setdefault((level, pattern), f"+{now:.0f}s {line[:300]}")
            if line.startswith("Traceback"):
                self.tracebacks.append(f"+{now:.0f}s")


class Worker:
    def __init__(self, soak, role, index, extra):
        self.soak, self.role, self.index, self.extra = soak, role, index, extra
        self.attempt = 0
        self.child = None
        self.kills = 0
        self.unexpected_exits = []
        soak.all_workers.append(self)

    @property
    def name(self):
        return f"{self.role}-{self.index}"

    def start(self):
        self.attempt += 1
        conf = dict(self.extra, role=self.role, index=self.index, attempt=self.attempt,
                    parent=os.getpid(), deadline=self.soak.worker_deadline,
                    bootstrap=self.soak.doze.bootstrap, port=self.soak.doze.port,
                    dir=self.soak.jdir, t0=self.soak.t0)
        if self.role == "producers":
            conf["journal"] = os.path.join(self.soak.jdir, f"prod-w{self.index}-a{self.attempt}.log")
        self.child = Child([sys.executable, os.path.abspath(__file__), "--role", self.role, "--conf", json.dumps(conf)],
                           log=os.path.join(self.soak.run_dir, f"{self.name}-a{self.attempt}.log"))

    @property
    def proc(self):
        """The worker's subprocess.Popen (None before start())."""
        return self.child.proc if self.child else None

    def kill9(self):
        self.child.kill9()
        self.kills += 1

    def terminate(self, timeout):
        """SIGTERM, wait; -> True if it stopped by itself (SIGKILL otherwise)."""
        if self.child.stop(timeout):
            return True
        self.kills += 1
        return False


def parse_producer_journals(jdir, offsets=None):
    """-> {tag: (state, n)}, errors[], counts. state: C committed, A aborted (confirmed),
    F fenced (began, never ended: killed), X killed while aborting, U unknown (killed in commit).
    With a dict `offsets`, the delivery reports (D lines, with --retention-ms) go into
    it: {(tag, k): (partition, offset)}."""
    txns, errors = {}, []
    for name in sorted(os.listdir(jdir)):
        if not name.startswith("prod-"):
            continue
        with open(os.path.join(jdir, name), errors="replace") as f:
            for line in f:
                if not line.endswith("\n"):
                    continue                       # a line cut by kill -9
                p = line.split(" ", 3)
                kind = p[0]
                if kind == "B":
                    txns[p[1]] = ["F", int(p[2]), p[3].strip()]
                elif kind in ("E", "X") and p[1].strip() in txns:
                    txns[p[1].strip()][0] = "U" if kind == "E" else "X"
                elif kind == "C":
                    txns[p[1]][0] = "C"
                elif kind == "A":
                    txns[p[1]][0] = "A" + p[3].strip()
                elif kind == "U":
                    txns[p[1]][0] = "U"
                elif kind == "D" and offsets is not None:
                    part, off = p[3].split()
                    offsets[(p[1], int(p[2]))] = (int(part), int(off))
                elif kind == "ERR":
                    _, _tag, when, text = line.rstrip("\n").split(" ", 3)
                    errors.append((float(when), text))
    return txns, errors


class ConsumerJournals:
    """Reads the consumers' journals incrementally."""

    def __init__(self, jdir, groups, track_offsets=False):
        self.jdir = jdir
        self.pos = {}
        self.seen = {g: set() for g in groups}
        self.records = collections.Counter()
        self.errors, self.notes, self.violations = [], collections.Counter(), []
        self.note_examples = {}
        self.track_offsets = track_offsets
        self.offsets = {}              # (tag, k) -> (partition, offset) where a group read it
        self.conflicts = []            # (tag, k, (p, o), (p, o)): one record read at two places

    def update(self):
        for name in sorted(os.listdir(self.jdir)):
            if not name.startswith("cons-"):
                continue
            group = name.split("-w")[0][len("cons-"):]
            path = os.path.join(self.jdir, name)
            with open(path, "rb") as f:
                f.seek(self.pos.get(name, 0))
                data = f.read()
            cut = data.rfind(b"\n") + 1
            self.pos[name] = self.pos.get(name, 0) + cut
            seen = self.seen[group]
            for line in data[:cut].decode(errors="replace").splitlines():
                if line.startswith("R "):
                    _, tag, k, part, off = line.split()
                    seen.add((tag, int(k)))
                    self.records[group] += 1
                    if self.track_offsets:
                        where = (int(part), int(off))
                        first = self.offsets.setdefault((tag, int(k)), where)
                        if first != where and len(self.conflicts) < 1000:
                            self.conflicts.append((tag, int(k), first, where))
                elif line.startswith("V "):
                    _, when, text = line.split(" ", 2)
                    self.violations.append((float(when), f"{group}: {text}"))
                elif line.startswith("ERR "):
                    _, when, text = line.split(" ", 2)
                    self.errors.append((float(when), text))
                elif line.startswith("NOTE "):
                    key = re.sub(r"\d+(\.\d+)?", "N", line.split(": ", 1)[-1])[:120]
                    self.notes[key] += 1


def summarize(say, t0, items, top=6):
    """Errors grouped by their text with the numbers taken out: count, first and
    last time (seconds from the soak's start), one example each."""
    say(f"  errors: {len(items)}")
    groups = collections.OrderedDict()
    for when, text in sorted(items):
        key = re.sub(r"[0-9a-f]{8}-[0-9a-f-]{27}|\d+(\.\d+)*", "N", text)[:200]
        g = groups.setdefault(key, [0, when, when, text])
        g[0] += 1
        g[2] = when
    for n, first, last, text in sorted(groups.values(), key=lambda g: -g[0])[:top]:
        say(f"    {n}x, +{first - t0:.0f}s..+{last - t0:.0f}s, e.g. {text[:260]}")
    if len(groups) > top:
        say(f"    ... and {len(groups) - top} more kinds")


def machine_busy_s():
    """Seconds of CPU the whole machine has used (all processes, all cores)."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return (sum(v[:8]) - v[3] - v[4]) / os.sysconf("SC_CLK_TCK")     # less idle and iowait


SYSCALLS = {"0": "read", "1": "write", "7": "poll", "17": "pread64", "40": "sendfile", "44": "sendto",
            "45": "recvfrom", "74": "fsync", "75": "fdatasync", "232": "epoll_wait", "281": "epoll_pwait",
            "202": "futex", "257": "openat", "3": "close", "62": "kill"}


def log_batches(data_dir):
    """(batches, control batches, bytes) in the partition logs: Kafka's on-disk
    format, baseOffset int64, length int32, ..., attributes int16 at byte 21."""
    n = ctrl = size = 0
    for root, _dirs, files in os.walk(data_dir):
        for name in files:
            if not name.endswith(".log"):
                continue
            with open(os.path.join(root, name), "rb") as f:
                data = f.read()
            size += len(data)
            pos = 0
            while pos + 23 <= len(data):
                length = struct.unpack_from(">i", data, pos + 8)[0]
                if length <= 0:
                    break
                n += 1
                ctrl += bool(struct.unpack_from(">h", data, pos + 21)[0] & 0x20)
                pos += 12 + length
    return n, ctrl, size


def fmt_kb(kb):
    return f"{kb / 1024:.1f} MiB" if kb is not None else "-"


class Soak:
    def __init__(self, args):
        from dozeproc import DozeProcess
        self.args = args
        stamp = time.strftime("%Y%m%d-%H%M%S")
        self.run_dir = args.workdir or os.path.join(CACHE, "soak", "runs", stamp)
        os.makedirs(self.run_dir, exist_ok=True)
        self.jdir = os.path.join(self.run_dir, "journals")
        os.makedirs(self.jdir, exist_ok=True)
        self.duration = args.minutes * 60
        # The idle connections are to stay for the whole soak: Kafka's default
        # connections.max.idle.ms (10 min) would close them at a 10-minute run's end.
        idle_ms = args.idle_ms if args.idle_ms is not None else int((self.duration + 1800) * 1000)
        self.retention = args.retention_ms > 0
        overrides = ["group.initial.rebalance.delay.ms=0", f"connections.max.idle.ms={idle_ms}",
                     f"doze.loop.stats.interval.ms={args.loop_stats_ms}"]
        if self.retention:                     # the topic has retention.ms; check it every 5 s
            overrides.append(f"log.retention.check.interval.ms={RETENTION_CHECK_MS}")
        overrides += args.override or []
        extra = []
        for o in overrides:
            extra += ["--override", o]
        self.doze = DozeProcess(self.run_dir, *extra)
        self.samples = []
        self.marks = {}
        self.probe_lat, self.probe_errors = [], []
        self.probe_started = None
        self.stall_obs = []              # (t, state, syscall, wchan) while a probe waits > 1 s
        self.loadavg_peak = 0.0
        self.kills = []
        self.workers = []
        self.all_workers = []
        self.stop_sampling = threading.Event()
        self.t0 = time.time()
        self.worker_deadline = self.t0 + self.duration + 600
        self.reasons = []
        self.out = []
        # with --retention-ms: what the retention monitor saw
        self.log_start_samples = []      # (t, {partition: log start offset})
        self.first_deletion = {}         # partition -> t its log start first moved
        self.retention_began = None      # t by which retention had deleted in every partition
        self.below_start = []            # (t, group, partition, committed offset, log start)
        self.margin = {}                 # group -> least (committed offset - log start) seen, log start > 0
        self.monitor_errors = []

    def say(self, text=""):
        print(text, flush=True)
        self.out.append(text)

    def now(self):
        return time.time() - self.t0

    # --- the broker ---
    def start_broker(self):
        for attempt in range(1, 6):
            with open(DOZE, "rb") as f:
                self.doze_sha1 = hashlib.sha1(f.read()).hexdigest()[:12]
            try:
                took = self.doze.start()
                if self.doze.proc.poll() is None:
                    self.say(f"doze started (doze_kafka.py sha1 {self.doze_sha1}) on {self.doze.bootstrap} "
                             f"in {took:.2f}s, pid {self.doze.proc.pid}")
                    return
            except RuntimeError as e:
                self.say(f"doze did not start (attempt {attempt}): {e}")
            if self.doze.proc and self.doze.proc.poll() is None:
                self.doze.kill9()
            time.sleep(10)
        raise SystemExit("doze did not start; see " + self.doze.log_path)

    def create_topics(self):
        from confluent_kafka.admin import AdminClient, NewTopic
        admin = AdminClient({"bootstrap.servers": self.doze.bootstrap})
        if self.retention:
            topic = NewTopic(TOPIC, PARTITIONS, 1, config={"retention.ms": str(self.args.retention_ms),
                                                           "segment.bytes": str(SEGMENT_BYTES)})
        else:
            topic = NewTopic(TOPIC, PARTITIONS, 1)
        for f in admin.create_topics([topic]).values():
            f.result(30)

    # --- retention (--retention-ms) ---
    @staticmethod
    def log_starts(admin, tries=3):
        """Each partition's log start offset: ListOffsets, timestamp -2 (earliest)."""
        from confluent_kafka import TopicPartition, KafkaException
        from confluent_kafka.admin import OffsetSpec
        for attempt in range(tries):
            try:
                fs = admin.list_offsets({TopicPartition(TOPIC, p): OffsetSpec.earliest()
                                         for p in range(PARTITIONS)}, request_timeout=10)
                return {tp.partition: f.result(15).offset for tp, f in fs.items()}
            except KafkaException:
                if attempt == tries - 1:
                    raise
                time.sleep(1)

    def retention_monitor(self, groups):
        """Every --sample-every s: the log start offsets, then every group's
        committed offsets. A committed offset below the log start (or none, once
        the log start has moved) means a member that starts now loses records:
        a finding. Log start first: committed offsets only grow, so
        committed(later) < log start(earlier) is below it for sure."""
        try:
            self._retention_monitor(groups)
        except Exception as e:                          # noqa: BLE001 (reported: a FAIL)
            self.monitor_errors.append((time.time(), oneline(f"retention monitor stopped: {e!r}")))

    def _retention_monitor(self, groups):
        from confluent_kafka import TopicPartition, ConsumerGroupTopicPartitions
        from confluent_kafka.admin import AdminClient
        admin = AdminClient({"bootstrap.servers": self.doze.bootstrap})
        tps = [TopicPartition(TOPIC, p) for p in range(PARTITIONS)]
        while not self.stop_sampling.wait(self.args.sample_every):
            t = round(self.now(), 1)
            try:
                starts = self.log_starts(admin, tries=1)
                committed = {}
                for g in groups:
                    fut = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(g, tps)],
                                                            request_timeout=10)[g]
                    committed[g] = {tp.partition: (tp.offset, tp.error) for tp in fut.result(15).topic_partitions}
            except Exception as e:                      # noqa: BLE001 (reported)
                self.monitor_errors.append((time.time(), oneline(f"retention monitor: {err_text(e)}")))
                continue
            self.log_start_samples.append((t, starts))
            for p, start in starts.items():
                if start > 0:
                    self.first_deletion.setdefault(p, t)
            if self.retention_began is None and len(self.first_deletion) == PARTITIONS:
                self.retention_began = t
            for g, offs in committed.items():
                for p in range(PARTITIONS):
                    c, err = offs.get(p, (-1001, None))
                    if err is not None:
                        self.monitor_errors.append((time.time(), oneline(
                            f"retention monitor: {g} partition {p}: {err}")))
                        continue
                    start = starts[p]
                    if start > 0 and c < start:          # includes "no committed offset" (-1001)
                        self.below_start.append((t, g, p, c, start))
                    elif start > 0:
                        self.margin[g] = min(self.margin.get(g, c - start), c - start)

    # --- sampling ---
    def sample(self, mark=None):
        b = self.broker
        try:
            s = {"t": round(self.now(), 1), "rss_kb": b.rss_kb(), "fds": b.fds(), "cpu_s": b.cpu_s(),
                 "conns": b.connections()}
            if self.retention:
                s["data_fds"] = b.data_fds()
        except (OSError, ValueError):
            return None
        b.read_log()
        if b.loop_stats and b.loop_stats[-1][0] >= s["t"] - 2 * self.args.loop_stats_ms / 1000:
            s["loop"] = b.loop_stats[-1][1]
        self.samples.append(s)
        if mark:
            self.marks[mark] = s
        return s

    def sampler(self):
        next_print = 0
        while not self.stop_sampling.wait(self.args.sample_every):
            s = self.sample()
            if s and s["t"] >= next_print:
                next_print = s["t"] + 30
                loop = s.get("loop") or {}
                lp = f" loop p99 {loop['p99_ms']:.1f}ms" if "p99_ms" in loop else ""
                recent = self.probe_lat[-100:]
                pr = f" probe p99 {percentiles(recent)['p99']:.1f}ms" if recent else ""
                pr += f" probe errors {len(self.probe_errors)}" if self.probe_errors else ""
                self.say(f"  +{s['t']:6.0f}s rss {fmt_kb(s['rss_kb'])} fds {s['fds']} conns {s['conns']}"
                         f" cpu {s['cpu_s']:.0f}s{lp}{pr}")

    def prober(self):
        conn = None
        while not self.stop_sampling.is_set():
            try:
                if conn is None:
                    conn = RawConn(self.doze.port, "soak-probe")
                t = self.probe_started = time.perf_counter()
                conn.api_versions()
                self.probe_started = None
                self.probe_lat.append((time.perf_counter() - t) * 1000)
            except CONN_ERRORS as e:
                self.probe_started = None
                self.probe_errors.append((time.time(), f"probe: {e!r}"))
                if conn:
                    conn.close()
                conn = None
            self.stop_sampling.wait(self.args.probe_every)
        if conn:
            conn.close()

    def stall_watcher(self):
        """While a probe has waited over 1 s: what is the broker doing? Its
        process state (R running, D disk, S sleeping), syscall and wchan."""
        pid = self.broker.pid
        while not self.stop_sampling.wait(0.5):
            try:
                with open("/proc/loadavg") as f:
                    self.loadavg_peak = max(self.loadavg_peak, float(f.read().split()[0]))
            except OSError:
                pass
            started = self.probe_started
            if started is None or time.perf_counter() - started < 1.0 or len(self.stall_obs) >= 500:
                continue
            try:
                with open(f"/proc/{pid}/stat") as f:
                    state = f.read().rsplit(")", 1)[1].split()[0]
                with open(f"/proc/{pid}/syscall") as f:
                    sc = f.read().split()
                with open(f"/proc/{pid}/wchan") as f:
                    wchan = f.read().strip() or "-"
            except OSError:
                continue
            call = "running" if sc and sc[0] == "running" else SYSCALLS.get(sc[0], f"syscall {sc[0]}") if sc else "?"
            self.stall_obs.append((round(self.now(), 1), state, call, wchan))

    # --- the run ---
    def run(self):
        a = self.args
        self.say(f"soak: {a.minutes:g} min; "
                 + (f"retention.ms {a.retention_ms} (segment.bytes {SEGMENT_BYTES}, checked every "
                    f"{RETENTION_CHECK_MS} ms)" if self.retention else "no retention")
                 + f"; run directory {self.run_dir}")
        self.start_broker()
        self.create_topics()
        self.broker = Broker(self.doze, self.t0)
        with open(f"/proc/{self.broker.pid}/limits") as f:
            nofile = [line for line in f if line.startswith("Max open files")]
        self.say("broker " + " ".join(nofile[0].split()) if nofile else "")
        time.sleep(1)
        self.sample("start")
        threading.Thread(target=self.sampler, daemon=True).start()
        threading.Thread(target=self.prober, daemon=True).start()
        threading.Thread(target=self.stall_watcher, daemon=True).start()
        self.busy0, self.wall0 = machine_busy_s(), time.time()

        per = [a.producers // a.producer_procs + (1 if i < a.producers % a.producer_procs else 0)
               for i in range(a.producer_procs)]
        groups = [f"soak-g{g}" for g in range(a.groups)]
        if self.retention:
            threading.Thread(target=self.retention_monitor, args=(groups,), daemon=True).start()
        pextra = {"journal_offsets": True} if self.retention else {}
        self.producers = [Worker(self, "producers", i, dict(pextra, count=per[i], pause=[a.pause_min, a.pause_max]))
                          for i in range(a.producer_procs)]
        self.consumers = [Worker(self, "consumers", i, {"groups": groups}) for i in range(a.consumer_procs)]
        self.raw = Worker(self, "raw", 0, {"stats": os.path.join(self.run_dir, "raw-stats.json")})
        self.hostile = Worker(self, "hostile", 0, {
            "stats": os.path.join(self.run_dir, "hostile-stats.json"), "never_readers": a.never_readers,
            "drippers": a.drippers, "nr_rate": a.never_reader_rate, "nr_reconnect_s": 60,
            "retention": self.retention,
            "drip_s": [0.2, 0.5, 1.0]})
        self.killable = self.producers + self.consumers
        for w in self.consumers + self.producers + [self.hostile]:
            w.start()
        self.say(f"started {a.producers} producers in {a.producer_procs} processes, "
                 f"{a.consumer_procs} consumer processes x {a.groups} groups, "
                 f"{a.never_readers} never-readers, {a.drippers} drippers")
        time.sleep(12)
        clients = self.broker.connections()
        idle = max(0, a.connections - clients - a.active - 1)
        self.raw.extra.update(idle=idle, active=a.active)
        self.raw.start()
        self.say(f"{clients} connections from the clients above; opening {idle} idle + {a.active} active raw "
                 f"connections (target {a.connections})")
        want, waited = clients + idle + a.active, time.time()
        while self.broker.connections() < want - 5 and time.time() - waited < 60:
            time.sleep(0.5)
        self.load_t0 = self.now()
        self.sample("load start")
        self.say(f"load phase: {self.duration:.0f}s from +{self.load_t0:.0f}s")
        self.workers = self.killable + [self.raw, self.hostile]

        warm = min(60.0, max(15.0, self.duration * 0.1))
        quiet = min(45.0, self.duration / 4)
        next_kill = self.load_t0 + a.kill_every
        restart = []
        while self.now() < self.load_t0 + self.duration:
            t = self.now()
            if "warm" not in self.marks and t >= self.load_t0 + warm:
                self.sample("warm")
            if self.retention and "warm" in self.marks and "steady" not in self.marks \
                    and self.retention_began is not None:
                s = self.sample("steady")
                if s:
                    self.say(f"  +{t:6.0f}s retention has deleted segments in every partition (the log is "
                             f"now bounded): steady-state reference sample, rss {fmt_kb(s['rss_kb'])}")
            if a.kill_every > 0 and t >= next_kill and t < self.load_t0 + self.duration - quiet:
                kind = [self.producers, self.consumers][len(self.kills) % 2]    # alternate
                w = random.choice([x for x in kind if x.proc.poll() is None] or self.killable)
                w.kill9()
                self.kills.append(f"+{t:.0f}s kill -9 {w.name} (attempt {w.attempt})")
                self.say(f"  +{t:6.0f}s kill -9 {w.name} attempt {w.attempt}")
                restart.append((t + random.uniform(1, 3), w))
                next_kill = t + a.kill_every + random.uniform(-5, 5)
            for due, w in list(restart):
                if t >= due:
                    restart.remove((due, w))
                    w.start()
            for w in self.workers:
                if w.proc.poll() is not None and all(w is not x for _, x in restart):
                    w.unexpected_exits.append(f"+{t:.0f}s {w.name} attempt {w.attempt} exited by itself "
                                              f"(status {w.proc.returncode})")
                    self.say(f"  +{t:6.0f}s {w.unexpected_exits[-1]}; restarting it")
                    w.start()
            time.sleep(0.25)
        for due, w in restart:
            w.start()
        self.sample("end")
        self.say(f"load phase over at +{self.now():.0f}s; stopping the hostile clients and the producers")
        self.finish(groups)

    def finish(self, groups):
        a = self.args
        if not self.hostile.terminate(40):
            self.reasons.append("the hostile clients did not stop within 40 s of SIGTERM")
        stuck = [w.name for w in self.producers if not w.terminate(60)]
        if stuck:
            self.reasons.append(f"producer processes did not stop within 60 s of SIGTERM: {stuck}")
        self.written_at = {} if self.retention else None     # (tag, k) -> (partition, offset)
        txns, perrors = parse_producer_journals(self.jdir, self.written_at)
        committed = {(tag, k) for tag, (st, n, _p) in txns.items() if st == "C" for k in range(n)}
        cj = ConsumerJournals(self.jdir, groups, track_offsets=self.retention)
        t_drain = time.time()
        missing = {}
        while True:
            cj.update()
            missing = {g: committed - cj.seen[g] for g in groups}
            if not any(missing.values()) or time.time() - t_drain > a.drain_timeout:
                break
            time.sleep(1)
        self.say(f"consumers drained in {time.time() - t_drain:.1f}s" if not any(missing.values())
                 else f"consumers still missing records after {a.drain_timeout}s")
        for w in self.consumers + [self.raw]:
            if not w.terminate(40):
                self.reasons.append(f"{w.name} did not stop within 40 s of SIGTERM")
        cj.update()
        self.stop_sampling.set()
        time.sleep(0.5)
        scan = self.final_scan(txns)
        time.sleep(2)
        self.sample("after clients")
        self.doze.stop()
        self.broker.read_log()
        mine = sum(os.times()[:4])                       # this process and every child waited for
        wall = time.time() - self.wall0
        self.others_cores = max(0.0, machine_busy_s() - self.busy0 - mine) / wall
        self.soak_cores = mine / wall
        try:
            self.log_size = log_batches(self.doze.data)
        except OSError:
            self.log_size = None
        self.report(txns, perrors, committed, cj, missing, scan)

    def final_scan(self, txns):
        """Read the whole topic from offset 0: read_committed, then read_uncommitted.
        With retention, from each partition's log start offset (ListOffsets
        earliest), and with every record's place kept; retention goes on under
        the scan, so the log start is taken again after it."""
        from confluent_kafka import Consumer, KafkaError, TopicPartition
        out = {}
        admin = None
        if self.retention:
            from confluent_kafka.admin import AdminClient
            admin = AdminClient({"bootstrap.servers": self.doze.bootstrap})
        for iso in ("read_committed", "read_uncommitted"):
            cconf = {"bootstrap.servers": self.doze.bootstrap, "group.id": "soak-scan",
                     "isolation.level": iso, "enable.auto.commit": False,
                     "enable.partition.eof": True}
            if self.retention:
                # a segment deleted under the scan: go on from the new log start (the
                # records skipped are below the log start taken after the scan)
                cconf["auto.offset.reset"] = "earliest"
                starts = self.log_starts(admin)
            else:
                starts = {p: 0 for p in range(PARTITIONS)}
            c = Consumer(cconf)
            c.assign([TopicPartition(TOPIC, p, starts[p]) for p in range(PARTITIONS)])
            counts, ends, eof = collections.Counter(), {}, set()
            recs = []                                    # (partition, offset, tag, k), with retention
            per_tag = collections.Counter()
            plan_abort = []
            deadline = time.time() + 180
            while len(eof) < PARTITIONS and time.time() < deadline:
                for m in c.consume(1000, 1.0):
                    if m.error():
                        if m.error().code() == KafkaError._PARTITION_EOF:
                            eof.add(m.partition())
                            ends[m.partition()] = m.offset()
                        continue
                    f = m.value().split(b"|", 4)
                    tag, k = f[0].decode(), int(f[1])
                    counts[(tag, k)] += 1
                    per_tag[tag] += 1
                    if self.retention:
                        recs.append((m.partition(), m.offset(), tag, k))
                    if f[3] != b"commit" and len(plan_abort) < 20:
                        plan_abort.append(f"{tag} #{k} at {m.partition()}:{m.offset()}")
            c.close()
            out[iso] = {"counts": counts, "per_tag": per_tag, "ends": ends, "complete": len(eof) == PARTITIONS,
                        "plan_abort": plan_abort, "start": starts, "recs": recs}
        if self.retention:
            out["log_start_after"] = self.log_starts(admin)
        return out

    # --- the report ---
    def report(self, txns, perrors, committed, cj, missing, scan):
        a = self.args
        R = self.reasons
        say = self.say
        say("")
        say("=" * 78)
        say(f"SOAK REPORT  doze_kafka.py sha1 {self.doze_sha1}  load {self.duration:.0f}s  "
            f"run directory {self.run_dir}")
        say("=" * 78)

        # transactions
        by = collections.Counter(st for st, _n, _p in txns.values())
        recs = collections.Counter()
        for st, n, _p in txns.values():
            recs[st] += n
        say(f"producers ({a.producers} transactional, {a.producer_procs} processes, "
            f"{sum(w.attempt for w in self.producers)} process starts):")
        say(f"  transactions: {by['C']} committed ({recs['C']} records), {by['Aplan']} aborted on purpose "
            f"({recs['Aplan']} records), {by['Aerror']} aborted after an error, {by['F']} open at a kill "
            f"(fenced), {by['X']} killed while aborting, {by['U']} killed during commit (outcome unknown)")
        summarize(say, self.t0, perrors)
        if perrors:
            R.append(f"{len(perrors)} producer errors")

        # consumers
        say(f"consumers ({a.groups} groups x {a.consumer_procs} members, read_committed):")
        should_not = {(tag, k) for tag, (st, n, _p) in txns.items() if st in ("Aplan", "Aerror", "F", "X")
                      for k in range(n)}
        for g in sorted(cj.seen):
            bad = cj.seen[g] & should_not
            say(f"  {g}: {cj.records[g]} records read, {len(cj.seen[g])} distinct; committed not seen: "
                f"{len(missing[g])}; of aborted/fenced transactions seen: {len(bad)}")
            if missing[g]:
                gone = ""
                if self.retention:           # fell behind the log start, or never got there?
                    after, at = scan["log_start_after"], self.written_at
                    n_gone = sum(1 for key in missing[g] if key in at and at[key][1] < after[at[key][0]])
                    gone = f" ({n_gone} of them since removed by retention)"
                R.append(f"{g}: {len(missing[g])} committed records not read within {a.drain_timeout:.0f} s "
                         f"of the load's end{gone}, e.g. {sorted(missing[g])[:3]}")
            if bad:
                R.append(f"{g}: read {len(bad)} records of aborted or fenced transactions, e.g. {sorted(bad)[:3]}")
        if self.retention:
            margins = ", ".join(f"{g} {self.margin[g]}" for g in sorted(self.margin)) or "-"
            say(f"  retention monitor ({len(self.log_start_samples)} looks, every {a.sample_every:g} s, log start "
                f"then OffsetFetch): committed offsets below the log start (or none once it moved): "
                f"{len(self.below_start)}; least committed offset - log start, once the log start moved: {margins}")
            for t, g, p, c, start in self.below_start[:10]:
                say(f"    +{t:.0f}s {g} partition {p}: committed {c}, log start {start}")
            if self.below_start:
                t, g, p, c, start = self.below_start[0]
                R.append(f"{len(self.below_start)} times a group's committed offset was below the log start "
                         f"(a member starting then loses records), first +{t:.0f}s {g} partition {p}: "
                         f"committed {c}, log start {start}")
            if self.monitor_errors:
                summarize(say, self.t0, self.monitor_errors, top=3)
                R.append(f"{len(self.monitor_errors)} retention-monitor errors")
            if not self.log_start_samples:
                R.append("the retention monitor took no look at the log start and committed offsets")
        summarize(say, self.t0, cj.errors)
        say(f"  violations (a record of a transaction aborted by plan read): {len(cj.violations)}")
        for when, text in cj.violations[:10]:
            say(f"    +{when - self.t0:.0f}s {text}")
        if cj.notes:
            say("  expected during rebalances (not errors): "
                + "; ".join(f"{n}x {k}" for k, n in cj.notes.most_common(5)))
        if cj.errors:
            R.append(f"{len(cj.errors)} consumer errors")
        if cj.violations:
            R.append(f"{len(cj.violations)} read_committed reads of records of aborted transactions")

        # final scan
        rc, ru = scan["read_committed"], scan["read_uncommitted"]
        dup = [key for key, n in rc["counts"].items() if n > 1]
        lost = committed - set(rc["counts"])
        visible_bad = set(rc["counts"]) & should_not
        partial = [tag for tag, c in rc["per_tag"].items() if tag in txns and c != txns[tag][1]]
        hanging = {p: (rc["ends"].get(p), ru["ends"].get(p)) for p in range(PARTITIONS)
                   if rc["ends"].get(p) != ru["ends"].get(p)}
        n_rc, n_ru = sum(rc["counts"].values()), sum(ru["counts"].values())
        misplaced = []
        if self.retention:
            # Retention removes a prefix of each partition. A record the scan did not
            # find counts as removed only if it is known to have been written below
            # the log start taken after the scan; one of unknown place counts as missing.
            after = scan["log_start_after"]
            where = dict(cj.offsets)
            misplaced = [(tag, k, a_, b_) for tag, k, a_, b_ in cj.conflicts]
            for key, w in self.written_at.items():       # the producers' delivery reports
                got = cj.offsets.get(key)
                if got is not None and got != w:
                    misplaced.append((key[0], key[1], w, got))
                where[key] = w
            for p, o, tag, k in rc["recs"]:
                w = where.setdefault((tag, k), (p, o))
                if w != (p, o):
                    misplaced.append((tag, k, w, (p, o)))

            def below(key):
                w = where.get(key)
                return w is not None and w[1] < after[w[0]]
            scanned = set(rc["counts"])
            removed = {key for key in committed if below(key)}        # by the scan's end
            lost = committed - scanned - removed
            partial = [tag for tag, c in rc["per_tag"].items() if tag in txns and
                       (c > txns[tag][1] or any((tag, k) not in scanned and not below((tag, k))
                                                for k in range(txns[tag][1])))]
            n_rc = sum(1 for p, o, _t, _k in rc["recs"] if o >= after[p])
            n_ru = sum(1 for p, o, _t, _k in ru["recs"] if o >= after[p])

            def offs(d):
                return " ".join(str(d.get(p)) for p in range(PARTITIONS))
            firsts = sorted(self.first_deletion.values())
            say(f"retention (retention.ms={a.retention_ms}, segment.bytes={SEGMENT_BYTES}, checked every "
                f"{RETENTION_CHECK_MS} ms): first deletion in {len(firsts)} of {PARTITIONS} partitions"
                + (f", at +{firsts[0]:.0f}s..+{firsts[-1]:.0f}s" if firsts else ""))
            say(f"final scan of {TOPIC} from the log start offsets (ListOffsets earliest) {offs(rc['start'])}: "
                f"read_committed {sum(rc['counts'].values())} records, read_uncommitted "
                f"{sum(ru['counts'].values())}")
            say(f"  log start after the scan {offs(after)} (log end {offs(ru['ends'])}); committed records "
                f"removed by retention: {len(removed)} of {len(committed)} ({len(removed & scanned)} of them "
                f"read by the scan before they went; every group had read "
                f"{'them' if not any(removed - cj.seen[g] for g in cj.seen) else 'NOT all of them'}); "
                f"committed records whose place is known: {sum(1 for key in committed if key in where)} "
                f"(delivery reports: {sum(1 for key in committed if key in self.written_at)}); records read "
                f"at another place than written: {len(misplaced)}")
            say(f"  at offsets the log still holds: read_committed {n_rc}, read_uncommitted {n_ru}; committed "
                f"missing {len(lost)}, duplicated {len(dup)}, aborted/fenced visible {len(visible_bad)}, "
                f"plan=abort visible {len(rc['plan_abort'])}, partly visible transactions {len(partial)}, "
                f"partitions with LSO != high watermark {len(hanging)}")
        else:
            say(f"final scan of {TOPIC} from offset 0: read_committed {n_rc} records, read_uncommitted {n_ru}")
            say(f"  committed missing {len(lost)}, duplicated {len(dup)}, aborted/fenced visible {len(visible_bad)}, "
                f"plan=abort visible {len(rc['plan_abort'])}, partly visible transactions {len(partial)}, "
                f"partitions with LSO != high watermark {len(hanging)}")
        if not rc["complete"] or not ru["complete"]:
            R.append("final scan did not reach the end of every partition")
        for what, bad in (("committed records missing from the log", lost), ("duplicated records", dup),
                          ("aborted/fenced records visible read_committed", visible_bad),
                          ("plan=abort records visible read_committed", rc["plan_abort"]),
                          ("transactions partly visible", partial),
                          ("records read at another partition/offset than they were written at", misplaced)):
            if bad:
                R.append(f"final scan: {len(bad)} {what}, e.g. {sorted(bad)[:3]}")
        if hanging:
            R.append(f"final scan: open transactions left (LSO, HWM): {hanging}")
        if n_ru <= n_rc:
            R.append("final scan: no aborted records in the log (the aborts did not reach the broker?)")

        # raw clients
        raw = self._load(self.raw)
        st = raw.get("stats", {})
        say(f"raw connections: {st.get('idle_opened', 0)} idle opened, {st.get('idle_lost', 0)} lost, "
            f"{st.get('idle_answered_at_end', 0)} answered ApiVersions at the end; {a.active} active: "
            f"{st.get('metadata_ok', 0)} Metadata + {st.get('api_versions_ok', 0)} ApiVersions answered and "
            f"checked, latency {self._pct(raw.get('latency_ms'))}")
        errs = [tuple(e) for e in raw.get("errors", [])]
        summarize(say, self.t0, errs)
        if errs:
            R.append(f"{len(errs)} raw-connection errors")
        if not raw:
            R.append("the raw-connection process left no stats")
        elif st.get("idle_answered_at_end", 0) != st.get("idle_opened", -1):
            R.append("not every idle connection was still served at the end")

        # hostile
        h = self._load(self.hostile)
        hs = h.get("stats", {})
        say(f"hostile (expected to be cut off; counted, not errors): never-readers: {hs.get('nr_connects', 0)} "
            f"connections, {hs.get('nr_requests_sent', 0)} requests sent unread, send blocked "
            f"{hs.get('nr_send_blocked', 0)}x, closed by broker {hs.get('nr_closed_by_broker', 0)}x; drippers: "
            f"{hs.get('drip_connects', 0)} connections, {hs.get('drip_bytes', 0)} bytes dripped, "
            f"{hs.get('drip_answers', 0)} answers, closed {hs.get('drip_closed', 0)}x")
        for e in h.get("events", [])[:8]:
            say(f"    {e}")


        # processes
        say(f"kills: {len(self.kills)}: " + ", ".join(self.kills))
        exits = [e for w in self.workers for e in w.unexpected_exits]
        if exits:
            R.append(f"client processes exited by themselves: {exits[:5]}")
            for e in exits:
                say(f"  {e}")

        # probe
        pp = percentiles(self.probe_lat)
        say(f"probe (ApiVersions round trip every {a.probe_every}s on its own connection, 10 s timeout): "
            f"{self._pct(pp)}")
        summarize(say, self.t0, self.probe_errors, top=3)
        if self.probe_errors:
            R.append(f"{len(self.probe_errors)} probe errors")

        # loop stats
        ls = [v for t, v in self.broker.loop_stats if t >= self.load_t0]
        if ls and all(k in ls[0] for k in ("p50_ms", "p99_ms", "max_ms")):
            p50s, p99s = [v["p50_ms"] for v in ls], [v["p99_ms"] for v in ls]
            say(f"loop passes (doze's loop stats, {len(ls)} intervals of {a.loop_stats_ms} ms, "
                f"{sum(v.get('passes', 0) for v in ls):.0f} passes): p50 {statistics.median(p50s):.2f} ms "
                f"(median of intervals), p99 {statistics.median(p99s):.2f} ms (median interval) / "
                f"{max(p99s):.2f} ms (worst interval), max {max(v['max_ms'] for v in ls):.1f} ms")
            long = [(t, v["max_ms"]) for t, v in self.broker.loop_stats if t >= self.load_t0 and v["max_ms"] > 1000]
            if long:
                say(f"  intervals with a pass over 1 s: {len(long)}: "
                    + ", ".join(f"+{t:.0f}s {m / 1000:.1f}s" for t, m in long[:10]))
            for k in ("connections", "queued_out_bytes", "open_files"):
                xs = [v[k] for v in ls if k in v]
                if xs:
                    say(f"  {k}: first {xs[0]:.0f}, peak {max(xs):.0f}, last {xs[-1]:.0f}")
        else:
            say("loop passes: doze logged no `loop stats:` lines (doze.loop.stats.interval.ms not "
                "implemented in this doze_kafka.py?); only the probe latency is reported")

        if self.stall_obs:
            kinds = collections.Counter((st, call, wchan) for _t, st, call, wchan in self.stall_obs)
            say(f"broker while a probe waited over 1 s ({len(self.stall_obs)} looks, every 0.5 s, "
                f"+{self.stall_obs[0][0]:.0f}s..+{self.stall_obs[-1][0]:.0f}s; state R running, D disk wait): "
                + "; ".join(f"{n}x {st} {call} {wchan}" for (st, call, wchan), n in kinds.most_common(5)))

        # resources
        load = [s for s in self.samples if self.load_t0 <= s["t"] <= self.marks["end"]["t"]]
        cols = ["start", "load start", "warm", None, "end", "after clients"]
        if self.retention:
            cols.insert(3, "steady")
            say("broker resources     start      load start warm-up    steady     peak       end        after clients")
        else:
            say("broker resources     start      load start warm-up    peak       end        after clients")
        for key, f in (("rss_kb", fmt_kb), ("fds", str), ("conns", str)):
            row = [self.marks.get(m, {}).get(key) for m in cols]
            row[cols.index(None)] = max(s[key] for s in load) if load else None
            say(f"  {key:<18} " + " ".join(f"{(f(v) if v is not None else '-'):<10}" for v in row))
        warm, end = self.marks.get("warm"), self.marks["end"]
        cpu = (end["cpu_s"] - self.marks["load start"]["cpu_s"]) / max(1, end["t"] - self.load_t0)
        say(f"  broker CPU during the load: {cpu * 100:.0f}% of one core; the soak and its clients, broker "
            f"included: {self.soak_cores:.2f} cores; other processes on the machine: {self.others_cores:.2f} "
            f"cores on average (of {os.cpu_count()}); load average peak {self.loadavg_peak:.1f}")
        if self.log_size:
            nb, nc, size = self.log_size
            say(f"  the log at the end: {nb} batches ({nc} of them markers), {size / 2**20:.0f} MiB"
                + (" (what retention left)" if self.retention else ""))
            if warm and nb and not self.retention:
                say(f"  RSS growth from warm-up to end per batch in the log: "
                    f"{(end['rss_kb'] - warm['rss_kb']) * 1024 / nb:.0f} bytes (an upper bound: the log "
                    f"also grew before the warm-up sample)")
        # The reference for "flat": the warm-up sample; with retention, the first
        # sample after retention had deleted in every partition (from then on the log,
        # and doze's per-batch index with it, is bounded), if that came in the load.
        ref, ref_name = warm, "warm-up"
        if self.retention:
            steady = self.marks.get("steady")
            if steady:
                ref, ref_name = steady, "steady"
                if warm:
                    say(f"  steady state from +{steady['t']:.0f}s (retention had deleted in every partition); "
                        f"RSS warm-up (+{warm['t']:.0f}s) {fmt_kb(warm['rss_kb'])} -> steady "
                        f"{fmt_kb(steady['rss_kb'])} -> end {fmt_kb(end['rss_kb'])} "
                        f"({(end['rss_kb'] - warm['rss_kb']) / warm['rss_kb'] * 100:+.1f}% from warm-up, "
                        f"not judged); judged: end vs steady")
            else:
                say(f"  retention had not deleted in every partition by the load's end (it did in "
                    f"{len(self.first_deletion)}): judged from the warm-up, with the log growing all through")
                if self.duration >= a.retention_ms / 1000 + 180:
                    R.append(f"retention deleted no segment in {PARTITIONS - len(self.first_deletion)} "
                             f"partitions within the {self.duration:.0f} s load (retention.ms {a.retention_ms})")
        if ref:
            after = [s for s in load if s["t"] >= ref["t"]]
            if len(after) >= 3:
                ts, ys = [s["t"] for s in after], [s["rss_kb"] for s in after]
                mt, my = statistics.mean(ts), statistics.mean(ys)
                slope = sum((t - mt) * (y - my) for t, y in zip(ts, ys)) / max(1e-9, sum((t - mt) ** 2 for t in ts))
                say(f"  RSS trend after {ref_name}: {slope * 60 / 1024:+.2f} MiB/min")
            for key in ("rss_kb", "fds"):
                w0, e0 = ref[key], end[key]
                change = (e0 - w0) / w0
                flat = abs(change) <= 0.10
                say(f"  {key}: end vs {ref_name} {change * 100:+.1f}% -> {'flat' if flat else 'NOT flat'}")
                if not flat:
                    R.append(f"{key} not flat: {w0} after {ref_name}, {e0} at the end ({change * 100:+.1f}%)")
        else:
            R.append("no warm-up sample (run too short?)")
        start_fds, after_fds = self.marks["start"]["fds"], self.marks.get("after clients", {}).get("fds")
        if self.retention and after_fds is not None:
            # With 1 MiB segments the log has many segment files, and doze keeps
            # descriptors of the ones read (the final scan read them all) in an LRU:
            # those are the log's, not the clients'. The check is on the others.
            sd, ad = self.marks["start"].get("data_fds", 0), self.marks["after clients"].get("data_fds", 0)
            say(f"  descriptors of data files (segments): start {sd}, end {end.get('data_fds')}, after "
                f"clients {ad}; the others: start {start_fds - sd}, after clients {after_fds - ad}")
            if after_fds - ad > start_fds - sd + 10:
                R.append(f"descriptors other than data files left after every client went away: "
                         f"{after_fds - ad} (at start {start_fds - sd})")
        elif after_fds is not None and after_fds > start_fds + 10:
            R.append(f"descriptors left after every client went away: {after_fds} (at start {start_fds})")

        # the broker's log
        b = self.broker
        say(f"broker log: {b.levels['WARNING']} WARNING, {b.levels['ERROR']} ERROR, "
            f"{len(b.tracebacks)} tracebacks, broker exit status {self.doze.proc.returncode}")
        for (level, pattern), n in b.warnings.most_common(8):
            say(f"  {n}x {b.warning_examples[(level, pattern)]}")
        if b.levels["ERROR"] or b.levels["CRITICAL"] or b.tracebacks:
            R.append(f"the broker logged {b.levels['ERROR']} ERROR lines and {len(b.tracebacks)} tracebacks")
        if self.doze.proc.returncode not in (0, -15):
            R.append(f"broker exit status {self.doze.proc.returncode}")

        say("")
        say("RESULT: ok" if not R else "RESULT: FAIL (" + "; ".join(R) + ")")
        with open(os.path.join(self.run_dir, "samples.json"), "w") as f:
            json.dump({"samples": self.samples, "marks": self.marks, "loop_stats": b.loop_stats,
                       "probe_ms": self.probe_lat, "log_starts": self.log_start_samples,
                       "committed_below_log_start": self.below_start}, f)
        with open(os.path.join(self.run_dir, "report.txt"), "w") as f:
            f.write("\n".join(self.out) + "\n")

    def _load(self, w):
        try:
            with open(w.extra["stats"]) as f:
                return json.load(f)
        except (OSError, ValueError):
            return {}

    @staticmethod
    def _pct(p):
        return f"p50 {p['p50']:.2f} ms, p99 {p['p99']:.2f} ms, max {p['max']:.1f} ms (n={p['n']})" if p else "-"

    def cleanup(self):
        for w in self.all_workers:
            if w.proc and w.proc.poll() is None:
                w.kill9()
        if self.doze.proc and self.doze.proc.poll() is None:
            try:
                self.doze.stop()
            except subprocess.TimeoutExpired:
                self.doze.kill9()


def main():
    ap = argparse.ArgumentParser(description="doze-kafka soak")
    ap.add_argument("--minutes", type=float, default=10)
    ap.add_argument("--connections", type=int, default=1000, help="connections in all (idle raw ones fill up)")
    ap.add_argument("--active", type=int, default=50, help="active raw connections")
    ap.add_argument("--producers", type=int, default=100)
    ap.add_argument("--producer-procs", type=int, default=5)
    ap.add_argument("--pause-min", type=float, default=1.0, help="seconds between a producer's transactions")
    ap.add_argument("--pause-max", type=float, default=4.0)
    ap.add_argument("--consumer-procs", type=int, default=3)
    ap.add_argument("--groups", type=int, default=3)
    ap.add_argument("--never-readers", type=int, default=3)
    ap.add_argument("--never-reader-rate", type=float, default=20, help="requests/s per never-reader")
    ap.add_argument("--drippers", type=int, default=3)
    ap.add_argument("--kill-every", type=float, default=30, help="seconds between client kills (0: none)")
    ap.add_argument("--sample-every", type=float, default=5)
    ap.add_argument("--probe-every", type=float, default=0.25)
    ap.add_argument("--loop-stats-ms", type=int, default=5000)
    ap.add_argument("--drain-timeout", type=float, default=120)
    ap.add_argument("--retention-ms", type=int, default=120000,
                    help="the soak topic's retention.ms, with segment.bytes=1 MiB and the broker's "
                         "log.retention.check.interval.ms=5000: a steady state with a bounded log "
                         "(default 120000; 0: no retention, the log grows all through)")
    ap.add_argument("--idle-ms", type=int, help="the broker's connections.max.idle.ms "
                    "(default: the soak's length + 30 min)")
    ap.add_argument("--override", action="append", help="more broker settings, k=v")
    ap.add_argument("--workdir", help="default: ~/.cache/doze-kafka/soak/runs/<time>")
    ap.add_argument("--keep", action="store_true", help="keep the broker's data even if the soak passes")
    ap.add_argument("--role", help=argparse.SUPPRESS)
    ap.add_argument("--conf", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.role:
        conf = json.loads(args.conf)
        {"producers": role_producers, "consumers": role_consumers, "raw": role_raw,
         "hostile": role_hostile}[args.role](conf)
        return
    ensure_venv()
    soak = Soak(args)

    def on_signal(signum, _frame):
        raise SystemExit(f"soak: stopped by signal {signum}")
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    ok = False
    try:
        soak.run()
        ok = not soak.reasons
    finally:
        soak.cleanup()
    if ok and not args.keep:
        shutil.rmtree(soak.doze.data, ignore_errors=True)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
