#!/usr/bin/env python3
"""doze side by side with Apache Kafka 4.3.1: one command, one table.

    python3 conformance/bench/compare.py [--rounds 2] [--quick] [--only doze,kafka,kafka-fsync]
                                         [--restart-gib 1] [--restart-only]

Three brokers, alternated round by round so that the machine's drift hits
each: doze as the command line starts it (every acknowledged write fsynced);
Kafka with its defaults (no fsync: the page cache and replication are its
durability); and Kafka with log.flush.interval.messages=1 (an fsync per
append, as doze does). All come from conformance/brokers.py, the wrappers
every check uses; group.initial.rebalance.delay.ms is 0 on all three.

The client is librdkafka (confluent-kafka) for every figure; producers that
run "at once" are separate processes, so Python's GIL is not the limit.
Every workload is bounded and stops by itself. Prints, per figure, each
broker's median over the rounds with its spread (min-max), and the ratio
doze/Kafka-default (and doze/Kafka-fsync). Higher is better for rates,
lower for times and sizes: the "better" column says which broker wins.
"""
import argparse
import multiprocessing
import os
import socket
import statistics
import struct
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))   # conformance/
import needs  # noqa: E402
from brokers import Doze, Kafka  # noqa: E402

BROKERS = {"doze": (Doze, {}), "kafka": (Kafka, {}), "kafka-fsync": (Kafka, {"log.flush.interval.messages": "1"})}


# --- measuring ------------------------------------------------------------------

def rss_mib(pid):
    """The broker's resident set (Kafka: its JVM), MiB."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


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
    out.put(fn(*args, ready=ready))


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

def one_round(name, directory, sizes, results):
    cls, settings = BROKERS[name]
    b = cls(directory, settings=dict(settings))
    r = results.setdefault(name, {})

    def note(figure, value):
        r.setdefault(figure, []).append(value)
        print(f"  {name:12s} {figure:58s} {value:10.2f}", flush=True)

    b.start()                                    # Kafka: formats its directory first
    b.stop()
    t0 = time.perf_counter()
    b.start()
    note("start to first answered request (s)", time.perf_counter() - t0 +
         (api_versions_answered(b.bootstrap) if name == "doze" else 0.0))
    try:
        if sizes.get("restart_only"):
            restart(name, b, sizes, note)
            return
        time.sleep(1.0)
        note("idle RSS (MiB)", rss_mib(b.pid))
        bs = b.bootstrap
        n1k, n100 = sizes["records_1k"], sizes["records_100"]
        for t, parts in (("p1k", 3), ("p100", 3), ("p1k4", 3), ("txn", 3), ("txn10", 3), ("e2e", 1)):
            admin_create(bs, t, parts)
        sampler = RssSampler(b.pid)
        sampler.start()
        nbytes, secs, *_ = produce_records(bs, "p1k", n1k, 1024)
        note("produce 1 KiB, acks=all, 3 partitions, 1 producer (MB/s)", nbytes / secs / 1e6)
        note("produce 1 KiB, acks=all, 3 partitions, 4 producers (MB/s)",
             produce_at_once(bs, "p1k4", n1k, 1024, 4))
        nbytes, secs, *_ = produce_records(bs, "p100", n100, 100)
        note("produce 100 B, acks=all, 3 partitions, 1 producer (MB/s)", nbytes / secs / 1e6)
        note("consume 1 KiB, read_committed (MB/s)", consume_all(bs, "p1k", n1k))
        note("RSS under load, peak (MiB)", sampler.stop())
        rate, lat, *_ = transactions(bs, "txn", "bench-tx", sizes["txns"])
        note("transactions/s, 1 producer, 1 record each", rate)
        note("commit_transaction() p50 (ms)", percentile(lat, 0.5) * 1000)
        note("commit_transaction() p99 (ms)", percentile(lat, 0.99) * 1000)
        note("transactions/s, 10 producers at once", transactions_at_once(bs, "txn10", sizes["txns"] // 5, 10))
        waits = end_to_end(bs, "e2e", sizes["e2e"])
        note("read_committed end to end p50 (ms)", percentile(waits, 0.5) * 1000)
        note("read_committed end to end p99 (ms)", percentile(waits, 0.99) * 1000)
        note("fresh group's first record (s)", fresh_group_first_record(bs, "e2e"))
        scale(name, b, sizes, note)
        restart(name, b, sizes, note)
    finally:
        b.stop()
        b.cleanup()


def scale(name, b, sizes, note):
    """Produce and consume over 1, 100, 1,000 partitions; idle connections' RSS."""
    bs = b.bootstrap
    records = sizes["scale_records"]
    for parts in (1, 100, 1000):
        topic = f"scale{parts}"
        admin_create(bs, topic, parts)
        nbytes, secs, *_ = produce_records(bs, topic, records, 1024, partitions=parts)
        note(f"produce 1 KiB over {parts} partitions (MB/s)", nbytes / secs / 1e6)
        note(f"consume 1 KiB over {parts} partitions (MB/s)", consume_all(bs, topic, records))
    base = rss_mib(b.pid)
    for count in (10, 100, 1000):
        socks = idle_connections(bs, count)
        time.sleep(0.5)
        note(f"RSS with {count} more idle connections (MiB over before)", rss_mib(b.pid) - base)
        nbytes, secs, *_ = produce_records(bs, "scale1", records, 1024)
        note(f"produce 1 KiB beside {count} idle connections (MB/s)", nbytes / secs / 1e6)
        for s in socks:
            s.close()


def restart(name, b, sizes, note):
    """Restart time with a log of sizes["restart_gib"] GiB, plain and
    transactional, after a clean stop and after kill -9."""
    gib = sizes["restart_gib"]
    for transactional in (False, True):
        kind = "transactional" if transactional else "plain"
        topic = f"restart-{kind}"
        admin_create(b.bootstrap, topic, 3)
        fill_for_restart(b.bootstrap, topic, gib, transactional)
        for how in ("clean stop", "kill -9"):
            b.stop() if how == "clean stop" else b.kill9()
            t0 = time.perf_counter()
            b.start()
            waited = api_versions_answered(b.bootstrap) if name == "doze" else 0.0
            note(f"restart, {gib:g} GiB {kind}, after {how} (s)", time.perf_counter() - t0 + waited)


# --- the table -------------------------------------------------------------------------

LOWER_IS_BETTER = ("(s)", "(ms)", "(MiB)", "(MiB over before)")


def table(results):
    names = [n for n in BROKERS if n in results]
    figures = list(dict.fromkeys(f for n in names for f in results[n]))
    head = f"{'figure':62s}" + "".join(f"{n:>22s}" for n in names) + "  doze/kafka  doze/kafka-fsync  better"
    lines = [head, "-" * len(head)]
    for f in figures:
        cells, med = "", {}
        for n in names:
            vals = results[n].get(f, [])
            if vals:
                med[n] = statistics.median(vals)
                cells += f"{med[n]:>10.2f} ({min(vals):.1f}-{max(vals):.1f})".rjust(22)
            else:
                cells += f"{'':>22s}"
        ratio = lambda other: (f"{med['doze'] / med[other]:.2f}x" if "doze" in med and med.get(other) else "")  # noqa: E731
        lower = f.endswith(LOWER_IS_BETTER)
        best = (min if lower else max)(med, key=med.get) if med else ""
        lines.append(f"{f:62s}{cells}  {ratio('kafka'):>10s}  {ratio('kafka-fsync'):>16s}  {best}")
    return "\n".join(lines)


def main():
    needs.venv()
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--only", default=",".join(BROKERS), help="brokers to run, of " + ",".join(BROKERS))
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
    order = args.only.split(",")
    results = {}
    began = time.time()
    for rnd in range(args.rounds):
        for name in order if rnd % 2 == 0 else list(reversed(order)):
            print(f"round {rnd + 1}: {name}", flush=True)
            with tempfile.TemporaryDirectory(prefix=f"compare-{name}-") as d:
                one_round(name, d, sizes, results)
    print()
    print(f"doze vs Apache Kafka 4.3.1, librdkafka client, {args.rounds} rounds alternating "
          f"({', '.join(order)}), medians (min-max); {os.cpu_count()} CPUs; {time.time() - began:.0f} s")
    print(table(results))


if __name__ == "__main__":
    sys.exit(main())
