#!/usr/bin/env python3
"""doze side by side with Apache Kafka 4.3.1 and franz-go's kfake: one command, one table.

    python3 conformance/bench/compare.py [--rounds 2] [--quick]
                                         [--only doze,kafka,kafka-fsync,kfake,kfake-fsync]
                                         [--restart-gib 1] [--restart-only]

Five brokers, alternated round by round so that the machine's drift hits
each: doze as the command line starts it (every acknowledged write fsynced);
Kafka with its defaults (no fsync: the page cache and replication are its
durability); Kafka with log.flush.interval.messages=1 (an fsync per append,
as doze does); franz-go's kfake, one Go process with its data on disk
(kfake.DataDir) and the page cache as its durability, like Kafka's default;
and kfake with kfake.SyncWrites (an fsync per appended batch, and per write
of its group and producer-id logs). doze and Kafka come from
conformance/brokers.py, the wrappers every check uses, with
group.initial.rebalance.delay.ms 0; kfake from the runner in
conformance/bench/kfake/ (its main.go and go.mod), which this script builds
from the Go module proxy into ${DOZE_KAFKA_CACHE:-~/.cache/doze-kafka}/bench/
(kfake has no initial rebalance delay: it does not delay joins).

The client is librdkafka (confluent-kafka) for every figure; producers that
run "at once" are separate processes, so Python's GIL is not the limit.
Every workload is bounded and stops by itself. Prints, per figure, each
broker's median over the rounds with its spread (min-max), and the ratios
doze/each other broker run. Higher is better for rates, lower for times and
sizes: the "better" column says which broker wins. A figure a broker cannot
give (an error, a refusal, a time-out) is recorded as "failed [n]" with its
reason under the table, and the run goes on; the exit status is 1 only if
doze failed one.
"""
import argparse
import hashlib
import multiprocessing
import os
import shutil
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))   # conformance/
import needs  # noqa: E402
from brokers import Doze, Kafka  # noqa: E402
from lib import free_port, rss_mib  # noqa: E402   (rss_mib: the broker's; Kafka: its JVM)


# --- kfake: franz-go's fake cluster, built here from the Go module proxy ---------

KFAKE_SRC = os.path.join(HERE, "kfake")              # main.go, go.mod, go.sum
KFAKE_MODULE = "github.com/twmb/franz-go/pkg/kfake"


def kfake_version():
    with open(os.path.join(KFAKE_SRC, "go.mod")) as f:
        for line in f:
            words = line.split()
            if KFAKE_MODULE in words:
                return words[words.index(KFAKE_MODULE) + 1]
    return "?"


def kfake_binary():
    """The runner built from conformance/bench/kfake (once per version of its
    sources) -> its path under ${DOZE_KAFKA_CACHE:-~/.cache/doze-kafka}/bench/."""
    digest = hashlib.sha256()
    for n in ("go.mod", "go.sum", "main.go"):
        with open(os.path.join(KFAKE_SRC, n), "rb") as f:
            digest.update(f.read())
    root = os.environ.get("DOZE_KAFKA_CACHE") or os.path.expanduser("~/.cache/doze-kafka")
    path = os.path.join(root, "bench", f"kfake-{digest.hexdigest()[:12]}")
    if not os.access(path, os.X_OK):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        print(f"building the kfake runner ({KFAKE_MODULE} {kfake_version()}) into {path}", flush=True)
        subprocess.run(["go", "build", "-o", path + ".tmp", "."], cwd=KFAKE_SRC, check=True)
        os.rename(path + ".tmp", path)
    return path


class Kfake:
    """kfake as a process of its own, the interface of brokers.Doze: one
    broker on a free port, its data in DIRECTORY/kfake-data (kfake.DataDir),
    with settings {"sync": True} kfake.SyncWrites. start() after stop() or
    kill9() starts again on the same data and port."""
    name = "kfake"
    binary = None                        # set by main(), once built

    def __init__(self, directory, settings=None):
        self.sync = bool((settings or {}).get("sync"))
        self.data = os.path.join(directory, "kfake-data")
        self.log_path = os.path.join(directory, "kfake.log")
        self.port = free_port()
        self.proc = None

    @property
    def bootstrap(self):
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self):
        return self.proc.pid if self.proc else None

    def start(self, limit_s=300):
        """Start it and wait for its "ready" line (it listens from then on)."""
        argv = [self.binary, "-port", str(self.port), "-dir", self.data] + (["-sync"] if self.sync else [])
        self.out = os.path.join(os.path.dirname(self.data), "kfake.out")
        with open(self.out, "w") as out, open(self.log_path, "a") as log:
            self.proc = subprocess.Popen(argv, stdout=out, stderr=log, stdin=subprocess.DEVNULL)
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < limit_s:
            with open(self.out) as f:
                if f.read().startswith("ready "):
                    return
            if self.proc.poll() is not None:
                with open(self.log_path) as f:
                    tail = f.read()[-400:]
                raise RuntimeError(f"kfake exited with {self.proc.returncode}: {tail}")
            time.sleep(0.002)
        raise RuntimeError(f"kfake not ready in {limit_s} s")

    def kill9(self):
        self.proc.kill()
        self.proc.wait()

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(120)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise RuntimeError("kfake did not stop in 120 s of SIGTERM (killed)")

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def cleanup(self):
        shutil.rmtree(self.data, ignore_errors=True)


BROKERS = {"doze": (Doze, {}), "kafka": (Kafka, {}), "kafka-fsync": (Kafka, {"log.flush.interval.messages": "1"}),
           "kfake": (Kfake, {}), "kfake-fsync": (Kfake, {"sync": True})}


# --- measuring ------------------------------------------------------------------

def api_versions_answered(bootstrap, limit_s=120):
    """Seconds until an ApiVersions v0 request is answered."""
    host, port = bootstrap.rsplit(":", 1)
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < limit_s:
        try:
            with socket.create_connection((host, int(port)), timeout=2) as s:
                s.sendall(struct.pack(">ihhih", 10, 18, 0, 1, 0))
                if len(s.recv(4)) == 4:
                    return time.perf_counter() - t0
        except OSError:
            time.sleep(0.005)
    raise RuntimeError(f"{bootstrap} answered nothing in {limit_s} s")


class RssSampler(threading.Thread):
    """The peak RSS of a pid while a workload runs."""

    def __init__(self, pid):
        super().__init__(daemon=True)
        self.pid, self.peak, self.done = pid, 0.0, threading.Event()

    def run(self):
        while not self.done.wait(0.1):
            self.peak = max(self.peak, rss_mib(self.pid))

    def stop(self):
        self.done.set()
        self.join()
        return self.peak


def percentile(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, int(len(values) * q))]


# --- workloads (each runs in its own process where several run at once) ---------

def admin_create(bootstrap, topic, partitions):
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(60)


def produce_records(bootstrap, topic, records, size, partitions=None, ready=None):
    """records of `size` random bytes, acks=all, no compression -> (bytes,
    seconds, start, end). bootstrap: HOST:PORT, or a librdkafka config (with
    its security settings); ready: a (started, go) pair of events, for
    producers that start together."""
    from confluent_kafka import Producer
    conf = {"bootstrap.servers": bootstrap} if isinstance(bootstrap, str) else bootstrap
    p = Producer(dict(conf, **{"acks": "all", "linger.ms": 5, "batch.size": 1000000,
                               "queue.buffering.max.messages": 1000000, "compression.type": "none",
                               "enable.idempotence": False}))
    p.list_topics(topic, 30)                       # connected, metadata known
    value, errors = os.urandom(size), []
    if ready:
        ready[0].release()
        ready[1].wait()

    def report(err, _msg):
        if err:
            errors.append(err)
    t0 = time.perf_counter()
    for i in range(records):
        while True:
            try:
                if partitions:
                    p.produce(topic, value=value, partition=i % partitions, on_delivery=report)
                else:
                    p.produce(topic, value=value, on_delivery=report)
                break
            except BufferError:
                p.poll(0.01)
        if i % 5000 == 0:
            p.poll(0)
    left = p.flush(300)
    elapsed = time.perf_counter() - t0
    if errors or left:
        raise RuntimeError(f"{len(errors)} delivery errors, {left} undelivered: {errors[:1]}")
    return records * size, elapsed, time.time() - elapsed, time.time()


def _worker(fn, args, ready, out):
    try:
        out.put(fn(*args, ready=ready))
    except Exception as e:                         # the parent raises it, at once
        if not ready[1].is_set():
            ready[0].release()
        out.put(RuntimeError(f"{type(e).__name__}: {e}"))


def at_once(fn, arg_lists):
    """Run fn(*args) in a process each, started together once all are
    connected -> their results (each with its start and end times last)."""
    ctx = multiprocessing.get_context("spawn")
    out, started, go = ctx.Queue(), ctx.Semaphore(0), ctx.Event()
    procs = [ctx.Process(target=_worker, args=(fn, args, (started, go), out)) for args in arg_lists]
    for p in procs:
        p.start()
    for _ in procs:
        started.acquire(timeout=120)
    go.set()
    results = [out.get(timeout=600) for _ in procs]
    for p in procs:
        p.join()
    for r in results:
        if isinstance(r, Exception):
            raise r
    return results


def span(results):
    return max(r[-1] for r in results) - min(r[-2] for r in results)


def produce_at_once(bootstrap, topic, records, size, producers):
    """MB/s of `producers` processes producing records/producers each, at once."""
    results = at_once(produce_records, [(bootstrap, topic, records // producers, size)] * producers)
    return sum(r[0] for r in results) / span(results) / 1e6


# librdkafka's local queue large enough, and its back-off when full short
# (fetch.queue.backoff.ms is 1 s by default), so that a consume figure is the
# broker's and not a pause of the client's.
CONSUMER_SETTINGS = {"auto.offset.reset": "earliest", "enable.auto.commit": False,
                     "fetch.max.bytes": 52428800, "max.partition.fetch.bytes": 10485760,
                     "queued.max.messages.kbytes": 1048576, "fetch.queue.backoff.ms": 10}


def consume_all(bootstrap, topic, records, isolation="read_committed"):
    """MB/s reading `records` records of the topic from the start (CONSUMER_SETTINGS)."""
    from confluent_kafka import Consumer
    c = Consumer(dict(CONSUMER_SETTINGS, **{"bootstrap.servers": bootstrap, "group.id": f"bench-{time.time_ns()}",
                                            "isolation.level": isolation}))
    c.subscribe([topic])
    got = nbytes = 0
    t0 = None
    deadline = time.time() + 300
    while got < records and time.time() < deadline:
        for m in c.consume(10000, 1.0):
            if m.error() is None:
                if t0 is None:
                    t0 = time.perf_counter()
                got += 1
                nbytes += len(m.value())
    elapsed = time.perf_counter() - t0
    c.close()
    if got < records:
        raise RuntimeError(f"read {got} of {records}")
    return nbytes / elapsed / 1e6


def transactions(bootstrap, topic, txn_id, count, ready=None):
    """One-record transactions back to back -> (txns/s, [commit_transaction()
    seconds], start, end)."""
    from confluent_kafka import Producer
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id, "linger.ms": 0})
    p.init_transactions(60)
    if ready:
        ready[0].release()
        ready[1].wait()
    latencies = []
    t0 = time.perf_counter()
    for i in range(count):
        p.begin_transaction()
        p.produce(topic, key=b"%d" % i, value=b"x" * 100)
        c0 = time.perf_counter()
        p.commit_transaction(60)
        latencies.append(time.perf_counter() - c0)
    elapsed = time.perf_counter() - t0
    return count / elapsed, latencies, time.time() - elapsed, time.time()


def transactions_at_once(bootstrap, topic, count, producers):
    """Total txns/s of `producers` transactional producers at once (processes)."""
    results = at_once(transactions, [(bootstrap, topic, f"{topic}-tx{i}", count) for i in range(producers)])
    return producers * count / span(results)


def end_to_end(bootstrap, topic, samples):
    """A read_committed consumer waiting in Fetch; a producer commits one-record
    transactions: seconds from commit_transaction() called to the record read."""
    from confluent_kafka import Consumer, Producer, TopicPartition
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"e2e-{time.time_ns()}", "isolation.level":
                  "read_committed", "enable.auto.commit": False, "fetch.wait.max.ms": 500,
                  "fetch.min.bytes": 1})
    c.assign([TopicPartition(topic, 0, 0)])
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"{topic}-e2e", "linger.ms": 0})
    p.init_transactions(60)
    c.consume(1, 1.0)                                  # connected, waiting in Fetch
    waits = []
    for i in range(samples):
        p.begin_transaction()
        p.produce(topic, value=b"%d" % i, partition=0)
        p.flush(10)
        t0 = time.perf_counter()
        p.commit_transaction(60)
        while True:
            ms = c.consume(1, 5.0)
            if ms and ms[0].error() is None and ms[0].value() == b"%d" % i:
                break
            if not ms:
                raise RuntimeError("the committed record did not arrive in 5 s")
        waits.append(time.perf_counter() - t0)
    c.close()
    return waits


def fresh_group_first_record(bootstrap, topic):
    """Seconds from a new consumer group's subscribe to its first record."""
    from confluent_kafka import Consumer
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"fresh-{time.time_ns()}",
                  "auto.offset.reset": "earliest", "isolation.level": "read_committed"})
    t0 = time.perf_counter()
    c.subscribe([topic])
    while True:
        ms = c.consume(1, 1.0)
        if ms and ms[0].error() is None:
            break
        if time.perf_counter() - t0 > 60:
            raise RuntimeError("no record in 60 s")
    took = time.perf_counter() - t0
    c.close()
    return took


def idle_connections(bootstrap, count):
    """count connections that each asked ApiVersions once and then wait -> the sockets."""
    host, port = bootstrap.rsplit(":", 1)
    socks = []
    for _ in range(count):
        s = socket.create_connection((host, int(port)), timeout=10)
        s.sendall(struct.pack(">ihhih", 10, 18, 0, 1, 0))
        socks.append(s)
    for s in socks:
        s.recv(65536)
    return socks


def fill_for_restart(bootstrap, topic, gib, transactional):
    """gib GiB of 1 KiB records (in transactions of 1,000 records if transactional)."""
    records = int(gib * (1 << 30)) // 1024
    if not transactional:
        produce_at_once(bootstrap, topic, records, 1024, 2)
        return
    from confluent_kafka import Producer
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"{topic}-fill", "linger.ms": 5,
                  "batch.size": 1000000, "queue.buffering.max.messages": 1000000})
    p.init_transactions(60)
    value = os.urandom(1024)
    for start in range(0, records, 1000):
        p.begin_transaction()
        for _ in range(min(1000, records - start)):
            while True:
                try:
                    p.produce(topic, value=value)
                    break
                except BufferError:
                    p.poll(0.01)
        p.commit_transaction(120)


# --- one round on one broker -------------------------------------------------------

class Round:
    """One broker's figures in one round. note() records a value; attempt()
    runs a step and records its error (or why it was skipped) against each of
    its figures it did not give, so that one broker's failure is a cell of the
    table and not the end of the run. results[name][figure] holds one value a
    round, None for a failed one; failures[(name, figure)] its reasons."""

    def __init__(self, name, b, results, failures):
        self.name, self.b, self.failures = name, b, failures
        self.r = results.setdefault(name, {})
        self.given, self.down = set(), None

    def note(self, figure, value):
        self.r.setdefault(figure, []).append(value)
        self.given.add(figure)
        print(f"  {self.name:12s} {figure:58s} {value:10.2f}", flush=True)

    def fail(self, figure, reason):
        self.r.setdefault(figure, []).append(None)
        self.failures.setdefault((self.name, figure), []).append(reason)
        print(f"  {self.name:12s} {figure:58s}     failed: {reason}", flush=True)

    def attempt(self, figures, fn, *args, needs=()):
        """fn(*args), which notes figures; needs: figures of this round it reads the records of."""
        missing = [f for f in needs if f not in self.given]
        if self.down or missing:
            for f in figures:
                self.fail(f, self.down or f"not run: {missing[0]} failed")
            return
        before = set(self.given)
        try:
            fn(*args)
        except Exception as e:
            reason = " ".join(f"{type(e).__name__}: {e}".split())[:300]
            for f in figures:
                if f not in self.given - before:
                    self.fail(f, reason)
            if not self.b.alive():
                try:
                    self.b.start()
                except Exception as e2:
                    self.down = f"not run: the broker is down ({type(e2).__name__}: {e2})"[:300]


def one_round(name, directory, sizes, results, failures):
    cls, settings = BROKERS[name]
    b = cls(directory, settings=dict(settings))
    R = Round(name, b, results, failures)
    note, attempt = R.note, R.attempt
    probe = cls is not Kafka                       # Kafka's start() waits for its answer itself

    def start():
        b.start()                                  # Kafka: formats its directory first
        b.stop()
        t0 = time.perf_counter()
        b.start()
        note("start to first answered request (s)",
             time.perf_counter() - t0 + (api_versions_answered(b.bootstrap) if probe else 0.0))
    attempt(["start to first answered request (s)"], start)
    try:
        if R.down or "start to first answered request (s)" not in R.given:
            return
        if sizes.get("restart_only"):
            restart(R, b, sizes, probe)
            return
        time.sleep(1.0)
        note("idle RSS (MiB)", rss_mib(b.pid))
        bs = b.bootstrap
        n1k, n100 = sizes["records_1k"], sizes["records_100"]
        p1 = "produce 1 KiB, acks=all, 3 partitions, 1 producer (MB/s)"
        sampler = RssSampler(b.pid)
        sampler.start()

        def produce1(topic, n, size, figure):
            admin_create(bs, topic, 3)
            nbytes, secs, *_ = produce_records(bs, topic, n, size)
            note(figure, nbytes / secs / 1e6)
        attempt([p1], produce1, "p1k", n1k, 1024, p1)
        p4 = "produce 1 KiB, acks=all, 3 partitions, 4 producers (MB/s)"
        attempt([p4], lambda: (admin_create(bs, "p1k4", 3), note(p4, produce_at_once(bs, "p1k4", n1k, 1024, 4))))
        attempt(["produce 100 B, acks=all, 3 partitions, 1 producer (MB/s)"], produce1, "p100", n100, 100,
                "produce 100 B, acks=all, 3 partitions, 1 producer (MB/s)")
        c1 = "consume 1 KiB, read_committed (MB/s)"
        attempt([c1], lambda: note(c1, consume_all(bs, "p1k", n1k)), needs=[p1])
        note("RSS under load, peak (MiB)", sampler.stop())

        txn = ["transactions/s, 1 producer, 1 record each", "commit_transaction() p50 (ms)",
               "commit_transaction() p99 (ms)"]

        def txn1():
            admin_create(bs, "txn", 3)
            rate, lat, *_ = transactions(bs, "txn", "bench-tx", sizes["txns"])
            note(txn[0], rate)
            note(txn[1], percentile(lat, 0.5) * 1000)
            note(txn[2], percentile(lat, 0.99) * 1000)
        attempt(txn, txn1)
        t10 = "transactions/s, 10 producers at once"
        attempt([t10], lambda: (admin_create(bs, "txn10", 3),
                                note(t10, transactions_at_once(bs, "txn10", sizes["txns"] // 5, 10))))
        e2e = ["read_committed end to end p50 (ms)", "read_committed end to end p99 (ms)"]

        def e2e_():
            admin_create(bs, "e2e", 1)
            waits = end_to_end(bs, "e2e", sizes["e2e"])
            note(e2e[0], percentile(waits, 0.5) * 1000)
            note(e2e[1], percentile(waits, 0.99) * 1000)
        attempt(e2e, e2e_)
        fresh = "fresh group's first record (s)"
        attempt([fresh], lambda: note(fresh, fresh_group_first_record(bs, "e2e")), needs=e2e[:1])
        scale(R, b, sizes)
        restart(R, b, sizes, probe)
    finally:
        try:
            b.stop()
        except Exception as e:
            print(f"  {name:12s} stop: {type(e).__name__}: {e}", flush=True)
        b.cleanup()


def scale(R, b, sizes):
    """Produce and consume over 1, 100, 1,000 partitions; idle connections' RSS."""
    bs = b.bootstrap
    records = sizes["scale_records"]
    for parts in (1, 100, 1000):
        topic = f"scale{parts}"
        pf, cf = f"produce 1 KiB over {parts} partitions (MB/s)", f"consume 1 KiB over {parts} partitions (MB/s)"

        def produce(topic=topic, parts=parts, pf=pf):
            admin_create(bs, topic, parts)
            nbytes, secs, *_ = produce_records(bs, topic, records, 1024, partitions=parts)
            R.note(pf, nbytes / secs / 1e6)
        R.attempt([pf], produce)
        R.attempt([cf], lambda topic=topic, cf=cf: R.note(cf, consume_all(bs, topic, records)), needs=[pf])
    base = rss_mib(b.pid)
    for count in (10, 100, 1000):
        rf, pf = (f"RSS with {count} more idle connections (MiB over before)",
                  f"produce 1 KiB beside {count} idle connections (MB/s)")
        socks = []

        def connect(count=count, rf=rf):
            socks.extend(idle_connections(bs, count))
            time.sleep(0.5)
            R.note(rf, rss_mib(b.pid) - base)

        def produce(pf=pf):
            nbytes, secs, *_ = produce_records(bs, "scale1", records, 1024)
            R.note(pf, nbytes / secs / 1e6)
        try:
            R.attempt([rf], connect)
            R.attempt([pf], produce, needs=["produce 1 KiB over 1 partitions (MB/s)"])
        finally:
            for s in socks:
                s.close()


def restart(R, b, sizes, probe):
    """Restart time with a log of sizes["restart_gib"] GiB, plain and
    transactional, after a clean stop and after kill -9."""
    gib = sizes["restart_gib"]
    for transactional in (False, True):
        kind = "transactional" if transactional else "plain"
        topic = f"restart-{kind}"
        figures = [f"restart, {gib:g} GiB {kind}, after {how} (s)" for how in ("clean stop", "kill -9")]

        def fill_and_restart(topic=topic, transactional=transactional, figures=figures):
            admin_create(b.bootstrap, topic, 3)
            fill_for_restart(b.bootstrap, topic, gib, transactional)
            for how, figure in zip(("clean stop", "kill -9"), figures):
                b.stop() if how == "clean stop" else b.kill9()
                t0 = time.perf_counter()
                b.start()
                waited = api_versions_answered(b.bootstrap) if probe else 0.0
                R.note(figure, time.perf_counter() - t0 + waited)
        R.attempt(figures, fill_and_restart)


# --- the table -------------------------------------------------------------------------

LOWER_IS_BETTER = ("(s)", "(ms)", "(MiB)", "(MiB over before)")


def table(results, failures):
    """The medians (min-max) of each broker, doze/each other broker, the best;
    a failed figure as "failed [n]" (some rounds failed: "[n]" after the
    median), its reasons listed under the table."""
    names = [n for n in BROKERS if n in results]
    others = [n for n in names if n != "doze"] if "doze" in names else []
    figures = list(dict.fromkeys(f for n in names for f in results[n]))
    notes = {}                                    # (broker, reason) -> its number

    def mark(n, f):
        reasons = failures.get((n, f), [])
        nums = sorted({notes.setdefault((n, why), len(notes) + 1) for why in reasons})
        return "[" + ",".join(map(str, nums)) + "]" if nums else ""
    ratio_heads = [f"doze/{o}" for o in others]
    head = (f"{'figure':62s}" + "".join(f"{n:>24s}" for n in names) +
            "".join(f"  {h:>{max(10, len(h))}s}" for h in ratio_heads) + "  better")
    lines = [head, "-" * len(head)]
    for f in figures:
        cells, med = "", {}
        for n in names:
            vals = [v for v in results[n].get(f, []) if v is not None]
            m = mark(n, f)
            if vals:
                med[n] = statistics.median(vals)
                cell = f"{med[n]:.2f} ({min(vals):.1f}-{max(vals):.1f})" + (" " + m if m else "")
            else:
                cell = "failed " + m if m else ""
            cells += cell.rjust(24)
        ratios = ""
        for o, h in zip(others, ratio_heads):
            r = f"{med['doze'] / med[o]:.2f}x" if "doze" in med and med.get(o) else ""
            ratios += f"  {r:>{max(10, len(h))}s}"
        lower = f.endswith(LOWER_IS_BETTER)
        best = (min if lower else max)(med, key=med.get) if med else ""
        lines.append(f"{f:62s}{cells}{ratios}  {best}")
    if notes:
        lines.append("")
        lines += [f"[{num}] {n}: {why}" for (n, why), num in notes.items()]
    return "\n".join(lines)


def main():
    needs.venv()
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--only", default=",".join(BROKERS),
                    help="the brokers to run, comma-separated, of " + ",".join(BROKERS) + " (default: all)")
    ap.add_argument("--quick", action="store_true", help="small workloads (a check that the command works)")
    ap.add_argument("--restart-gib", type=float, default=None, help="GiB of log for the restart figures (1)")
    ap.add_argument("--restart-only", action="store_true", help="only the start and restart figures")
    args = ap.parse_args()
    sizes = dict(records_1k=200000, records_100=1000000, txns=500, e2e=200, scale_records=30000,
                 restart_gib=1.0)
    if args.quick:
        sizes = dict(records_1k=20000, records_100=50000, txns=50, e2e=20, scale_records=5000, restart_gib=0.02)
    if args.restart_gib is not None:
        sizes["restart_gib"] = args.restart_gib
    sizes["restart_only"] = args.restart_only
    order = [n.strip() for n in args.only.split(",") if n.strip()]
    unknown = [n for n in order if n not in BROKERS]
    if unknown:
        ap.error(f"unknown broker {', '.join(unknown)}: of {', '.join(BROKERS)}")
    results, failures = {}, {}
    began = time.time()
    if any(BROKERS[n][0] is Kfake for n in order):
        try:
            Kfake.binary = kfake_binary()
        except (OSError, subprocess.CalledProcessError) as e:
            print(f"kfake left out: its runner did not build ({e})", flush=True)
            order = [n for n in order if BROKERS[n][0] is not Kfake]
    for rnd in range(args.rounds):
        for name in order if rnd % 2 == 0 else list(reversed(order)):
            print(f"round {rnd + 1}: {name}", flush=True)
            os.sync()          # no broker's fsyncs wait on the dirty pages the one before it left
            with tempfile.TemporaryDirectory(prefix=f"compare-{name}-") as d:
                one_round(name, d, sizes, results, failures)
    print()
    peers = ["Apache Kafka 4.3.1"] * any(BROKERS[n][0] is Kafka for n in order) + \
        [f"franz-go kfake {kfake_version()}"] * any(BROKERS[n][0] is Kfake for n in order)
    print(f"doze vs {' and '.join(peers) or 'itself'}, librdkafka client, {args.rounds} rounds alternating "
          f"({', '.join(order)}), medians (min-max); {os.cpu_count()} CPUs; {time.time() - began:.0f} s")
    print(table(results, failures))
    return 1 if any(n == "doze" for n, _ in failures) else 0


if __name__ == "__main__":
    sys.exit(main())
