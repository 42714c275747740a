#!/usr/bin/env python3
"""Compacted topics under real long-running users: Kafka Streams (exactly_once_v2) and
MirrorMaker 2's Connect internal topics, 10 minutes each, bytes on disk per minute.

    python3 conformance/compaction/longrun.py                    # streams, control, mm2 (about 30 min)
    python3 conformance/compaction/longrun.py --runs streams     # one of streams, control, mm2
    python3 conformance/compaction/longrun.py --runs streams --minutes 2 --interval 30   # a quick look
    python3 conformance/compaction/longrun.py --keep             # keep the directories (logs, data)

Issue 37's second done-when item. Each run is on a fresh doze started with
log.cleaner.backoff.ms=1000 (Kafka's default is 15000: 1 s makes a pass follow a
roll at once, nothing else changes) and doze.transaction.version=2 (Kafka 4.3.1's
level for a new cluster; --transaction-version 1 for the classic protocol). Topic
settings are Kafka's defaults but segment.ms=30000 (--segment-ms), so that segments
roll, and so become cleanable, within a minute; min.cleanable.dirty.ratio stays 0.5.

streams: a Kafka Streams 4.3.1 application (clients/streams/, its LongRun app) counts records per
  key (1,000 keys, --keys) of the topic lr-in (3 partitions) twice, into the RocksDB
  stores "counts" and "counts-default", exactly_once_v2, caching off: each input
  record is one record of each changelog, lr-app-counts-changelog and
  lr-app-counts-default-changelog (3 partitions each, compacted). Streams creates
  them itself, with the store's topic configs (Materialized.withLoggingEnabled):
  both segment.ms, only the first delete.retention.ms=60000 (--delete-retention-ms);
  the other keeps the broker's 24 h, so the transaction markers every commit leaves
  stay a day after their data went (Kafka's rule) and it cannot level off within
  minutes (its figures are informational). An idempotent producer (LongRun produce)
  writes --rate records/s (300) of uniformly drawn keys. Every --interval s (60) a row
  per changelog: input records, what was written to it (a tailer reads every batch
  about a second after its append: bytes, records), what is on disk (DescribeLogDirs'
  partition_size then, and the least, mean and most of its samples every 5 s over the
  minute; the segment files; a full read from offset 0: records, batches, markers),
  and the cleaner's passes (from the broker's log). At the end: kill -9 of the
  instance, its state directory wiped, a new instance started (the producer goes on
  for --after-kill s, 20), the producer stopped; once the group's committed offsets
  reach the input's end, each of the new instance's stores (an interactive query)
  must equal the per-key counts of every input record, and each changelog's
  read_committed latest value per key too. It reports how many records the restore
  read (StateRestoreListener) against how many were ever written to the changelog.
  --kafka runs it (and control) on a real Kafka 4.3.1 instead, as a reference.
control: the same with log.cleaner.enable=false, --control-minutes (3) long.
mm2: MirrorMaker 2 (Kafka 4.3.1's connect-mirror-maker, outgrow.py's properties)
  from a Kafka 4.3.1 source to doze: the Connect worker's configs, offsets and status
  topics, the checkpoints and heartbeats topics, and here the offset-syncs topic too
  (offset-syncs.topic.location=target) are all on doze, all compacted. A steady
  producer on the source (--mm2-rate 1 KiB records/s, 100) and a group "app" reading
  and committing there keep MirrorMaker writing them. Each of those topics gets
  segment.ms=30000 by IncrementalAlterConfigs the moment it appears (MirrorMaker
  creates them with its own settings). Rows as above, per topic and in total. At the
  end MirrorMaker is killed -9 and started again on the cleaned topics; once it has
  caught up, the target's end offsets against the source's count what it copied a
  second time (a few at least once; all of it if its offsets were lost).

Prints the tables (also written to DIR/result.json) and exits 1 if a check failed.
Needs java 17 and mvn (the Streams project is built on first use), the venv of
conformance/needs.py and the Kafka jars of conformance/kafka/realkafka.py (mm2).
"""
import argparse
import collections
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))   # conformance/
from lib import Child, rss_mib  # noqa: E402
from brokers import Doze, Kafka  # noqa: E402
from clients import jvmcheck  # noqa: E402
import doze_kafka as dk  # noqa: E402
from doze_kafka import ApiKey, Msg  # noqa: E402
from check import error_name, read_log  # noqa: E402   (this directory's check.py: a full read, as a consumer filters it)

PROJECT = os.path.join(HERE, "..", "clients", "streams")    # the Streams check's project: its LongRun class
JAR = os.path.join(PROJECT, "target", "streams-eos-check-1.0.jar")
APP_ID, INPUT = "lr-app", "lr-in"
STORES = ("counts", "counts-default")           # delete.retention.ms 60000 (--delete-retention-ms); 24 h
CHANGELOGS = {s: "%s-%s-changelog" % (APP_ID, s) for s in STORES}
SIZE_EVERY_S = 5                                 # DescribeLogDirs this often: each row's min, mean and max
# doze: "cleaned log T-P (dirty section = [a, b]): X bytes to Y, N records removed, in T ms";
# Kafka 4.3.1: "Log cleaner thread 0 cleaned log T-P (dirty section = [a, b])" (its figures on later lines)
CLEANED = re.compile(r"cleaned log (\S+)-(\d+) \(dirty section = \[(\d+), (\d+)\]\)(?:: (\d+) bytes to (\d+), "
                     r"(\d+) records removed, in ([\d.]+) ms)?")


def log(msg):
    print("%s %s" % (time.strftime("%H:%M:%S"), msg), flush=True)


# --- doze, asked with its own client ---------------------------------------------------------

class Probe:
    """One connection to the broker: topics, configs, sizes, offsets, full reads."""

    def __init__(self, bootstrap):
        self.bootstrap = bootstrap
        self.c = dk.Client(bootstrap, client_id="compaction-longrun", timeout=60)

    def close(self):
        self.c.close()

    def topics(self):
        """{topic: [partitions]} of every topic."""
        md = self.c.call(ApiKey.METADATA, 9, topics=None, allow_auto_topic_creation=False)
        return {t.name: sorted(p.partition_index for p in t.partitions) for t in md.topics if not t.error_code}

    def create_topic(self, name, partitions, configs=None):
        r = self.c.call(ApiKey.CREATE_TOPICS, 5, timeout_ms=60000, validate_only=False, topics=[Msg(
            name=name, num_partitions=partitions, replication_factor=1, assignments=[],
            configs=[Msg(name=k, value=str(v)) for k, v in (configs or {}).items()])]).topics[0]
        if r.error_code:
            raise RuntimeError("CreateTopics %s: %s %s" % (name, error_name(r.error_code), r.error_message))

    def topic_configs(self, topic, names=None):
        r = self.c.call(ApiKey.DESCRIBE_CONFIGS, 4, resources=[Msg(resource_type=2, resource_name=topic,
                                                                    configuration_keys=names)],
                        include_synonyms=False, include_documentation=False).results[0]
        return {c.name: c.value for c in r.configs} if not r.error_code else {}

    def alter_topic(self, topic, configs):
        r = self.c.call(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, validate_only=False, resources=[Msg(
            resource_type=2, resource_name=topic,
            configs=[Msg(name=k, config_operation=0, value=str(v)) for k, v in configs.items()])]).responses[0]
        if r.error_code:
            raise RuntimeError("IncrementalAlterConfigs %s: %s %s" % (topic, error_name(r.error_code),
                                                                      r.error_message))

    def log_dir_sizes(self):
        """{(topic, partition): partition_size} from DescribeLogDirs (kafka-log-dirs --describe)."""
        r = self.c.call(ApiKey.DESCRIBE_LOG_DIRS, 4, topics=None)
        return {(t.name, p.partition_index): p.partition_size for d in r.results for t in d.topics
                for p in t.partitions}

    def end_offsets(self, topic, partitions, isolation=0):
        r = self.c.call(ApiKey.LIST_OFFSETS, 7, replica_id=-1, isolation_level=isolation, topics=[Msg(
            name=topic, partitions=[Msg(partition_index=p, current_leader_epoch=-1, timestamp=-1)
                                    for p in partitions])])
        return {p.partition_index: p.offset for t in r.topics for p in t.partitions}

    def committed(self, group):
        """{(topic, partition): committed offset} of group (stable offsets only: a pending
        transactional commit answers UNSTABLE_OFFSET_COMMIT -> {})."""
        r = self.c.call(ApiKey.OFFSET_FETCH, 7, group_id=group, topics=None, require_stable=True)
        if r.error_code:
            return {}
        return {(t.name, p.partition_index): p.committed_offset for t in r.topics for p in t.partitions
                if not p.error_code and p.committed_offset >= 0}

    def read_all(self, topic, partition, isolation=0):
        """Every batch from offset 0 -> a Log (check.py's read_log)."""
        return read_log(self.c, topic, partition, isolation, "doze", 4 << 20)


class Tailer(threading.Thread):
    """Reads every batch appended to the topics it tracks, about once a second, from
    offset 0 on: what was written (bytes, data records, control batches), before any
    cleaning could touch it (a segment is cleanable only once rolled, segment.ms
    after it began). A batch whose base offset skips past the next expected one is
    counted as a gap: records the tailer never saw (0 expected).
    discover(probe) -> the topics to track now; on_new(probe, topic): once for each."""

    def __init__(self, bootstrap, discover, on_new=None):
        super().__init__(daemon=True)
        self.bootstrap, self.discover, self.on_new = bootstrap, discover, on_new
        self.pos = {}                                   # (topic, partition) -> next offset
        self.stats = collections.defaultdict(lambda: {"bytes": 0, "records": 0, "batches": 0, "controls": 0,
                                                       "gaps": 0, "late": 0})
        self.tracked = {}                               # topic -> when it was first seen
        self.sizes = []                                 # (time, {topic: DescribeLogDirs bytes}) every 5 s
        self.sized_at = 0.0
        self.lock = threading.Lock()
        self.halt = threading.Event()
        self.errors = []
        self.gap_at = []                                # ((topic, partition), expected, found, when)

    def run(self):
        probe = None
        while not self.halt.is_set():
            try:
                if probe is None:
                    probe = Probe(self.bootstrap)
                self.step(probe)
            except Exception as e:                      # noted, and the connection made again
                self.errors.append("%s: %r" % (time.strftime("%H:%M:%S"), e))
                if probe:
                    probe.close()
                probe = None
            self.halt.wait(1.0)
        if probe:
            probe.close()

    def step(self, probe):
        parts = probe.topics()
        for t in self.discover(probe, {t: ps for t, ps in parts.items() if t not in self.tracked}):
            if t not in self.tracked and parts.get(t):
                self.tracked[t] = time.time()
                for p in parts[t]:
                    self.pos.setdefault((t, p), 0)
                if self.on_new:
                    self.on_new(probe, t)
        if time.time() - self.sized_at >= SIZE_EVERY_S:
            self.sized_at = time.time()
            by_topic = collections.Counter()
            for (t, _), size in probe.log_dir_sizes().items():
                if t in self.tracked:
                    by_topic[t] += size
            with self.lock:
                self.sizes.append((self.sized_at, dict(by_topic)))
        while True:                                      # until nothing new came
            wanted = collections.defaultdict(list)
            for (t, p), off in self.pos.items():
                wanted[t].append(Msg(partition=p, current_leader_epoch=-1, fetch_offset=off, last_fetched_epoch=-1,
                                     log_start_offset=-1, partition_max_bytes=1 << 20))
            if not wanted:
                return
            r = probe.c.call(ApiKey.FETCH, 12, replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=16 << 20,
                             isolation_level=0, session_id=0, session_epoch=-1,
                             topics=[Msg(topic=t, partitions=ps) for t, ps in wanted.items()],
                             forgotten_topics_data=[], rack_id="")
            more = False
            with self.lock:
                for t in r.responses:
                    for part in t.partitions:
                        if part.error_code:
                            continue
                        key = (t.topic, part.partition_index)
                        off, st = self.pos[key], self.stats[key]
                        data = bytes(part.records or b"")
                        for start, h, end in dk.whole_batches(data):
                            last = h.base_offset + h.last_offset_delta
                            if last < off:
                                continue
                            if h.base_offset > off:     # records a cleaning removed before the tailer came
                                st["gaps"] += h.base_offset - off
                                st["records"] += h.base_offset - off
                                if len(self.gap_at) < 20:
                                    self.gap_at.append((key, off, h.base_offset, time.strftime("%H:%M:%S")))
                            st["bytes"] += end - start
                            st["batches"] += 1
                            if h.attributes & dk.ATTR_CONTROL:
                                st["controls"] += 1
                            else:                       # a producer's batch spans its records' offsets
                                st["records"] += h.last_offset_delta + 1
                                if h.records_count < h.last_offset_delta + 1:
                                    st["late"] += 1     # read after a cleaning rebuilt it: bytes undercounted
                            off = last + 1
                            more = True
                        self.pos[key] = off
            if not more:
                return

    def size_range(self, topics, since):
        """(min, mean, max) of the topics' bytes on disk (summed) in the samples taken after since."""
        with self.lock:
            got = [sum(s.get(t, 0) for t in topics) for at, s in self.sizes if at > since]
        return (min(got), int(sum(got) / len(got)), max(got)) if got else (None, None, None)

    def written(self, topic):
        with self.lock:
            out = {"bytes": 0, "records": 0, "batches": 0, "controls": 0, "gaps": 0, "late": 0}
            for (t, _), st in self.stats.items():
                if t == topic:
                    for k in out:
                        out[k] += st[k]
            return out


def cleaner_passes(broker_log):
    """{topic: [passes, records removed, bytes before, bytes after, longest pass ms]} from doze's log."""
    out = collections.defaultdict(lambda: [0, 0, 0, 0, 0.0])
    try:
        with open(broker_log, errors="replace") as f:
            for line in f:
                m = CLEANED.search(line)
                if m:
                    o = out[m.group(1)]
                    o[0] += 1
                    if m.group(5):                      # doze's figures
                        o[1] += int(m.group(7))
                        o[2] += int(m.group(5))
                        o[3] += int(m.group(6))
                        o[4] = max(o[4], float(m.group(8)))
    except FileNotFoundError:
        pass
    return out


def log_path(broker):
    return broker.proc.log_path if broker.name == "doze" else os.path.join(broker.dir, "server.log")


def broker_problems(broker_log):
    """doze's ERROR and Traceback lines (the first 20)."""
    out = []
    try:
        with open(broker_log, errors="replace") as f:
            for line in f:
                if " ERROR " in line or "Traceback" in line or "a bug in doze" in line:
                    out.append(line.rstrip()[:400])
    except FileNotFoundError:
        pass
    return out[:20]


def on_disk(probe, broker, topic, partitions, sizes):
    """What topic holds now: DescribeLogDirs bytes, segment files (.log: count; every file
    of its directories: bytes), and a full read from offset 0 (data records, batches,
    control batches, emptied batches, distinct keys, end offsets)."""
    row = {"disk": 0, "files": 0, "segments": 0, "records": 0, "batches": 0, "controls": 0, "emptied": 0,
           "marker_bytes": 0, "keys": 0, "end": 0}
    keys = set()
    for p in partitions:
        row["disk"] += sizes.get((topic, p), 0)
        d = os.path.join(broker.data, "%s-%d" % (topic, p))
        if os.path.isdir(d):
            for f in os.listdir(d):
                try:
                    row["files"] += os.path.getsize(os.path.join(d, f))
                except FileNotFoundError:              # swapped away by a cleaning meanwhile
                    continue
                row["segments"] += f.endswith(".log")
        lg = probe.read_all(topic, p)
        row["end"] += lg.hw
        for bt in lg.batches:
            row["batches"] += 1
            if bt.control:
                row["controls"] += 1
                row["marker_bytes"] += bt.h.batch_length + dk.LOG_OVERHEAD
            elif not bt.records:
                row["emptied"] += 1
            else:
                row["records"] += len(bt.records)
                keys.update((p, r[2]) for r in bt.records)
    row["keys"] = len(keys)
    return row


def sample(probe, broker, tailer, topics, minute, since=None):
    """One row per topic, and their total: written (tailer) and on disk (now, and the least
    and most of the tailer's DescribeLogDirs samples after since)."""
    parts = probe.topics()
    sizes = probe.log_dir_sizes()
    passes = cleaner_passes(log_path(broker))
    rows = {}
    for t in topics:
        if t not in parts:
            continue
        r = on_disk(probe, broker, t, parts[t], sizes)
        w = tailer.written(t)
        lo, mean, hi = tailer.size_range([t], since) if since is not None else (None, None, None)
        r.update(minute=minute, topic=t, partitions=len(parts[t]), written_bytes=w["bytes"],
                 written_records=w["records"], written_controls=w["controls"], tailer_gaps=w["gaps"],
                 tailer_late=w["late"],
                 passes=passes[t][0], removed=passes[t][1], longest_pass_ms=passes[t][4],
                 disk_min=lo, disk_mean=mean, disk_max=hi)
        rows[t] = r
    total = {"minute": minute, "topic": "(all)"}
    for k in ("partitions", "written_bytes", "written_records", "written_controls", "tailer_gaps", "tailer_late",
              "disk", "files",
              "segments", "records", "batches", "controls", "emptied", "marker_bytes", "keys", "end", "passes",
              "removed"):
        total[k] = sum(r[k] for r in rows.values())
    if since is not None:                                # the same over the sum of the topics
        total["disk_min"], total["disk_mean"], total["disk_max"] = tailer.size_range(list(rows), since)
    total["longest_pass_ms"] = max([r["longest_pass_ms"] for r in rows.values()] or [0])
    return rows, total


HEAD = ("min", "written B", "written recs", "on disk B", "on disk min/mean/max in the minute", "markers B", "files B",
        "recs on disk", "batches (markers, emptied)", "segs", "passes", "recs removed")


def fmt_row(r, extra=()):
    rng = "%s / %s / %s" % (r["disk_min"], r["disk_mean"], r["disk_max"]) if r.get("disk_min") is not None else ""
    return "| " + " | ".join(str(x) for x in [
        r["minute"], r["written_bytes"], r["written_records"], r["disk"], rng, r["marker_bytes"], r["files"],
        r["records"], "%d (%d, %d)" % (r["batches"], r["controls"], r["emptied"]), r["segments"], r["passes"],
        r["removed"]] + list(extra)) + " |"


def table(rows, extra_head=(), extra=lambda r: ()):
    head = list(HEAD) + list(extra_head)
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += [fmt_row(r, extra(r)) for r in rows]
    return "\n".join(lines)


# --- Kafka Streams ---------------------------------------------------------------------------

class Instance:
    """One LongRun app JVM: its output lines to its log, restore and state lines kept."""

    def __init__(self, run_dir, name, bootstrap, state_dir, args):
        self.name, self.control = name, os.path.join(run_dir, "control-" + name)
        os.makedirs(self.control, exist_ok=True)
        self.log_path = os.path.join(run_dir, "app-%s.log" % name)
        cmd = jvmcheck.java(PROJECT, JAR, "dozestreams.LongRun", "app", "--bootstrap", bootstrap,
                            "--app-id", APP_ID, "--input", INPUT, "--state-dir", state_dir, "--control-dir",
                            self.control, "--name", name, "--segment-ms", str(args.segment_ms),
                            "--delete-retention-ms", str(args.delete_retention_ms),
                            level=os.environ.get("STREAMS_LOG", "warn"), heap="512m")
        self.states, self.restore_start, self.restore_end, self.lock = [], {}, {}, threading.Lock()
        self.child = Child(cmd, log=self.log_path, stdout=subprocess.PIPE, text=True)
        threading.Thread(target=self.pump, daemon=True).start()

    def pump(self):
        with open(self.log_path, "a") as f:
            for line in self.child.proc.stdout:
                f.write(line)
                f.flush()
                w = line.split()
                with self.lock:
                    if len(w) >= 5 and w[1] == "state":
                        self.states.append((time.time(), w[4]))
                    elif len(w) >= 6 and w[1] == "restore-start":
                        self.restore_start[(w[2], int(w[3]))] = (time.time(), int(w[4]), int(w[5]))
                    elif len(w) >= 5 and w[1] == "restore-end":
                        self.restore_end[(w[2], int(w[3]))] = (time.time(), int(w[4]))

    def running_since(self):
        with self.lock:
            return self.states[-1][0] if self.states and self.states[-1][1] == "RUNNING" else None

    def dump(self, timeout=90):
        """Each store, by an interactive query -> {store: {key: count}}."""
        outs = {s: os.path.join(self.control, "dump-%s.txt" % s) for s in STORES}
        for out in outs.values():
            if os.path.exists(out):
                os.remove(out)
        open(os.path.join(self.control, "dump.request"), "w").close()
        deadline = time.time() + timeout
        while not all(os.path.exists(out) for out in outs.values()):
            if time.time() > deadline or not self.child.alive():
                raise RuntimeError("instance %s dumped no stores within %d s" % (self.name, timeout))
            time.sleep(0.2)
        stores = {}
        for s, out in outs.items():
            store, n = {}, None
            with open(out) as f:
                for line in f:
                    k, v = line.split()
                    if k == "end":
                        n = int(v)
                    else:
                        store[k] = int(v)
            if n != len(store):
                raise RuntimeError("dump of %s's %s cut short" % (self.name, s))
            stores[s] = store
        return stores


def wait_until(what, fn, timeout, step=0.5):
    deadline = time.time() + timeout
    while True:
        got = fn()
        if got:
            return got
        if time.time() > deadline:
            raise TimeoutError("%s: not within %d s" % (what, timeout))
        time.sleep(step)


def counts_of_input(probe, partitions):
    """{key: number of records} of every record of the input topic."""
    counts = collections.Counter()
    for p in partitions:
        for bt in probe.read_all(INPUT, p).batches:
            if not bt.control:
                counts.update(r[2].decode() for r in bt.records)
    return counts


def changelog_table(probe, topic, partitions):
    """A changelog read_committed, latest value per key (a consumer's view) -> {key: count};
    a value is the count as 8 bytes, big-endian (the timestamp is the record's own)."""
    table_ = {}
    for p in partitions:
        lg = probe.read_all(topic, p, isolation=1)
        for k, v in lg.table(committed=True).items():
            table_[k.decode()] = struct.unpack(">q", v[-8:])[0]
    return table_


def run_streams(args, root, cleaner, minutes):
    name = ("streams" if cleaner else "control") + ("-kafka" if args.kafka else "")
    d = os.path.join(root, name)
    os.makedirs(d)
    settings = {"log.cleaner.backoff.ms": "1000", "log.cleaner.enable": "true" if cleaner else "false"}
    broker = (Kafka if args.kafka else Doze)(d, settings, transaction_version=args.transaction_version)
    topics = [CHANGELOGS[s] for s in STORES]
    res = {"run": name, "broker": broker.name, "cleaner": cleaner, "minutes": minutes, "settings": settings,
           "transaction_version": args.transaction_version, "rate": args.rate, "keys": args.keys,
           "segment_ms": args.segment_ms, "rows": {t: [] for t in topics}, "checks": [], "dir": d}
    children, tailer, probe = [], None, None
    t_begin = time.time()
    try:
        broker.start()
        probe = Probe(broker.bootstrap)
        probe.create_topic(INPUT, 3)
        state_dir = os.path.join(d, "state")
        inst = Instance(d, "A", broker.bootstrap, state_dir, args)
        children.append(inst.child)
        wait_until("instance A RUNNING", inst.running_since, 120)
        stop_file = os.path.join(d, "produce.stop")
        prod = Child(jvmcheck.java(PROJECT, JAR, "dozestreams.LongRun", "produce", "--bootstrap", broker.bootstrap,
                                   "--input", INPUT, "--keys", str(args.keys), "--rate", str(args.rate),
                                   "--stop-file", stop_file), log=os.path.join(d, "produce.log"))
        children.append(prod)
        tailer = Tailer(broker.bootstrap, lambda probe_, parts: [t for t in topics if t in parts])
        tailer.start()
        wait_until("the changelog topics", lambda: len(tailer.tracked) == len(topics), 120)
        res["changelog_configs"] = {t: probe.topic_configs(t, ["cleanup.policy", "segment.ms", "delete.retention.ms",
                                                               "min.cleanable.dirty.ratio", "segment.bytes"])
                                    for t in topics}
        log("%s: %s %s; changelogs %s; %d rows of %d s follow" % (
            name, broker.name, broker.bootstrap, json.dumps(res["changelog_configs"]), int(minutes * 60 / args.interval),
            args.interval))
        t0 = time.time()
        n = int(round(minutes * 60 / args.interval))
        since = t0
        for i in range(1, n + 1):
            time.sleep(max(0.0, t0 + i * args.interval - time.time()))
            rows, _ = sample(probe, broker, tailer, topics, round(i * args.interval / 60, 2), since)
            since = time.time()
            inp = sum(probe.end_offsets(INPUT, [0, 1, 2]).values())
            for t, r in rows.items():
                r["input"], r["rss_mb"] = inp, round(rss_mib(broker.pid), 1)
                res["rows"][t].append(r)
                log("%s: %s %s input %d" % (name, t, fmt_row(r), inp))
            if not inst.child.alive() or not prod.alive():
                raise RuntimeError("instance A or the producer exited early")

        # kill -9, the state directory wiped, a new instance restores from the changelogs
        log("%s: kill -9 of instance A; its state directory %s wiped; instance B starts" % (name, state_dir))
        inst.child.kill9()
        t_kill = time.time()
        shutil.rmtree(state_dir)
        at_kill, _ = sample(probe, broker, tailer, topics, "kill")
        inst2 = Instance(d, "B", broker.bootstrap, state_dir, args)
        children.append(inst2.child)
        wait_until("instance B's restore", lambda: inst2.restore_start or inst2.running_since(), 180)
        at_restore, _ = sample(probe, broker, tailer, topics, "B restores")
        wait_until("instance B RUNNING", inst2.running_since, 180)
        t_running = inst2.running_since()
        time.sleep(max(0.0, t_kill + args.after_kill - time.time()))
        open(stop_file, "w").close()
        if prod.proc.wait(120) != 0:
            res["checks"].append(("producer ended without a failed send", False, "rc %s" % prod.proc.returncode))
        ends = probe.end_offsets(INPUT, [0, 1, 2])
        wait_until("instance B at the input's end (committed offsets)",
                   lambda: all(probe.committed(APP_ID).get((INPUT, p), -1) >= e for p, e in ends.items()), 300)
        t_caught = time.time()
        stores = inst2.dump()
        expected = counts_of_input(probe, [0, 1, 2])
        final, _ = sample(probe, broker, tailer, topics, "end")
        with inst2.lock:
            starts, ends_r = dict(inst2.restore_start), dict(inst2.restore_end)
        res["at_kill"], res["at_restore"], res["final"], res["restore"] = at_kill, at_restore, final, {}
        res["input_records"], res["input_keys"] = sum(expected.values()), len(expected)
        res["kill_to_running_s"] = round(t_running - t_kill, 1)
        res["kill_to_caught_up_s"] = round(t_caught - t_kill, 1)
        for s in STORES:
            t = CHANGELOGS[s]
            parts = probe.topics()[t]
            wait_until("%s's LSO at its high watermark" % t,
                       lambda: probe.end_offsets(t, parts, 1) == probe.end_offsets(t, parts, 0), 60)
            table_ = changelog_table(probe, t, parts)
            store = stores[s]
            wrong = [k for k in set(expected) | set(store) if expected.get(k) != store.get(k)]
            wrong_cl = [k for k in set(expected) | set(table_) if expected.get(k) != table_.get(k)]
            mine = {k: v for k, v in ends_r.items() if k[0] == t}
            restored = sum(n_ for _, n_ in mine.values())
            k = at_kill[t]
            res["restore"][s] = {
                "store_keys": len(store), "store_wrong_keys": len(wrong),
                "store_wrong": {key: (expected.get(key), store.get(key)) for key in sorted(wrong)[:10]},
                "changelog_table_wrong_keys": len(wrong_cl),
                "restored_records": restored,
                "restored_partitions": {"%s-%d" % key: {"offsets": list(starts.get(key, (0, None, None))[1:]),
                                                        "restored": v[1]} for key, v in sorted(mine.items())},
                "written_records_before_kill": k["written_records"], "records_on_disk_at_kill": k["records"],
                "records_on_disk_at_restore": at_restore[t]["records"],
                "written_bytes_before_kill": k["written_bytes"], "bytes_on_disk_at_kill": k["disk"],
                "end_offsets_at_kill": k["end"],
                "restore_s": round(max((v[0] for v in mine.values()), default=t_kill)
                                   - min((v[0] for key, v in starts.items() if key[0] == t), default=t_kill), 2),
            }
            res["checks"].append(("%s: the restored store equals the input's per-key counts" % s, not wrong,
                                  "%d keys, %d input records; %d keys wrong" % (len(expected), sum(expected.values()),
                                                                                len(wrong))))
            res["checks"].append(("%s: its changelog read_committed, latest per key, equals them too" % s,
                                  not wrong_cl, "%d keys wrong" % len(wrong_cl)))
            res["checks"].append(("%s: (informational) records written to the changelog, input records" % s, True,
                                  "%d written (aborted ones included), %d input; the tailer came after a cleaning "
                                  "for %d batches (rebuilt: their bytes undercounted) and %d offsets (removed: "
                                  "counted as records, their bytes missing)" % (
                                      final[t]["written_records"], sum(expected.values()), final[t]["tailer_late"],
                                      final[t]["tailer_gaps"])))
            if cleaner:
                rows = res["rows"][t]
                # counts-default keeps the broker's delete.retention.ms (24 h): every transaction's
                # markers stay that long after their data went (Kafka's rule), so it is not expected
                # to level off within minutes; its figures are informational
                info = s != "counts"
                ok, why = bounded(rows, "disk_mean")
                res["checks"].append(("%s: %schangelog bytes on disk bounded (delete.retention.ms=%s)"
                                      % (s, "(informational) " if info else "",
                                         "24 h" if info else args.delete_retention_ms), ok or info, why))
                # each minute's one full read: the active segment's share swings with the roll and the
                # passes, so this figure is informational
                ok, why = bounded([dict(r, data=r["disk"] - r["marker_bytes"]) for r in rows], "data")
                res["checks"].append(("%s: (informational) changelog bytes on disk but the transaction markers "
                                      "bounded: %s" % (s, "yes" if ok else "no"), True, why))
                res["checks"].append(("%s: the restore read fewer records than were written (a cleaned changelog)"
                                      % s, restored < k["written_records"],
                                      "restored %d of %d written" % (restored, k["written_records"])))
        log("%s: restore: %s" % (name, json.dumps(res["restore"])))
    except Exception as e:
        res["checks"].append(("the run completed", False, "%s: %s" % (type(e).__name__, e)))
        log("%s: FAILED: %r" % (name, e))
    finally:
        if tailer:
            tailer.halt.set()
            res["tailer_errors"] = tailer.errors[:10]
            res["tailer_gaps"] = tailer.gap_at
        for c in children:
            c.stop(grace=30)
        if probe:
            probe.close()
        broker.stop()
        if broker.name == "doze":
            res["broker_problems"] = broker_problems(log_path(broker))
        res["wall_s"] = round(time.time() - t_begin, 1)
    return res


def bounded(rows, key):
    """Bounded: growth has stopped. The mean of rows[key] over the last third of the run
    is at most 1.25 x its mean over the middle third (plus 64 KiB), and the run ends with
    under a quarter of every byte written on disk. key: "disk_mean" (each minute's mean
    of the DescribeLogDirs samples every 5 s), or a figure of the row. -> (ok, figures)."""
    if len(rows) < 3:
        return False, "too few rows"
    n = len(rows)
    mid, last = rows[n // 3: 2 * n // 3], rows[2 * n // 3:]
    mean = lambda rs: sum(r[key] for r in rs) / len(rs)   # noqa: E731
    m_mid, m_last = mean(mid), mean(last)
    wrote = last[-1]["written_bytes"] - mid[0]["written_bytes"]
    end = rows[-1]["disk"]
    ok = m_last <= 1.25 * m_mid + 65536 and end < 0.25 * rows[-1]["written_bytes"]
    peak = max(r.get("disk_max") or r["disk"] for r in rows)
    return ok, ("mean %s: minutes %s-%s %d, minutes %s-%s %d (%+.0f%%), while %d bytes were written over them; "
                "largest on disk %d; at the end %d on disk of %d written (%.1f%%)" % (
                    key, mid[0]["minute"], mid[-1]["minute"], m_mid, last[0]["minute"], last[-1]["minute"], m_last,
                    100.0 * (m_last - m_mid) / max(1, m_mid), wrote, peak, end, rows[-1]["written_bytes"],
                    100.0 * end / max(1, rows[-1]["written_bytes"])))


# --- MirrorMaker 2 ------------------------------------------------------------------------------

def run_mm2(args, root):
    sys.path.insert(0, os.path.join(HERE, "..", "outgrow"))
    import outgrow
    from confluent_kafka import Consumer, Producer
    d = os.path.join(root, "mm2")
    for sub in ("source", "target"):
        os.makedirs(os.path.join(d, sub))
    res = {"run": "mm2", "minutes": args.minutes, "rate": args.mm2_rate, "segment_ms": args.segment_ms,
           "rows": [], "per_topic": [], "checks": [], "dir": d}
    settings = {"log.cleaner.backoff.ms": "1000"}
    src = Kafka(os.path.join(d, "source"))
    tgt = Doze(os.path.join(d, "target"), settings, transaction_version=args.transaction_version)
    src.sec = tgt.sec = None
    mm, tailer, probe, threads = None, None, None, []
    halt = threading.Event()
    produced = [0]
    altered = {}
    t_begin = time.time()
    try:
        src.start()
        tgt.start()
        probe = Probe(tgt.bootstrap)
        outgrow.create(src.bootstrap, "steady", 3)

        def produce():
            p = Producer({"bootstrap.servers": src.bootstrap, "acks": "all", "linger.ms": 5})
            t0, i = time.time(), 0
            while not halt.is_set():
                due = t0 + i / args.mm2_rate
                if due > time.time():
                    time.sleep(due - time.time())
                try:
                    p.produce("steady", key=b"steady-%d" % i, value=outgrow.value_of("steady", i, 1024))
                    i += 1
                except BufferError:
                    p.poll(0.05)
                p.poll(0)
            p.flush(60)
            produced[0] = i

        def consume():                       # group "app" on the source: checkpoints and offset syncs follow it
            c = Consumer({"bootstrap.servers": src.bootstrap, "group.id": "app", "auto.offset.reset": "earliest",
                          "enable.auto.commit": False})
            c.subscribe(["steady"])
            last = time.time()
            while not halt.is_set():
                c.consume(500, 0.5)
                if time.time() - last > 5:
                    try:
                        c.commit(asynchronous=False)
                    except Exception:
                        pass
                    last = time.time()
            c.close()
        for fn in (produce, consume):
            threads.append(threading.Thread(target=fn, daemon=True))
            threads[-1].start()

        props = outgrow.mm2_properties(src, tgt, "steady")
        props["offset-syncs.topic.location"] = "target"
        mm = outgrow.MirrorMaker(d, props)
        mm.start()

        def discover(probe_, parts):
            out = []
            for t in parts:
                if t.startswith("__") or t == "steady":
                    continue
                if "compact" in probe_.topic_configs(t, ["cleanup.policy"]).get("cleanup.policy", ""):
                    out.append(t)
            return out

        def on_new(probe_, t):
            probe_.alter_topic(t, {"segment.ms": args.segment_ms})
            altered[t] = time.time()
            log("mm2: %s appeared on doze: segment.ms=%d set (%d partitions)" % (t, args.segment_ms,
                                                                                   len(probe_.topics()[t])))

        tailer = Tailer(tgt.bootstrap, discover, on_new)
        tailer.start()
        wait_until("MirrorMaker's internal topics on doze", lambda: len(tailer.tracked) >= 6, 180)
        res["topics"] = sorted(tailer.tracked)
        res["topic_configs"] = {t: probe.topic_configs(t, ["cleanup.policy", "segment.ms", "min.cleanable.dirty.ratio"])
                                for t in res["topics"]}
        t0 = since = time.time()
        n = int(round(args.minutes * 60 / args.interval))
        for i in range(1, n + 1):
            time.sleep(max(0.0, t0 + i * args.interval - time.time()))
            rows, total = sample(probe, tgt, tailer, sorted(tailer.tracked), round(i * args.interval / 60, 2), since)
            since = time.time()
            total["copied"] = sum(probe.end_offsets("steady", [0, 1, 2]).values()) if "steady" in probe.topics() else 0
            total["rss_mb"] = round(rss_mib(tgt.pid), 1)
            res["rows"].append(total)
            res["per_topic"].append(list(rows.values()))
            log("mm2: %s copied %d" % (fmt_row(total), total["copied"]))
            if mm.proc.poll() is not None:
                raise RuntimeError("MirrorMaker exited early (rc %s)" % mm.proc.returncode)

        # MirrorMaker killed -9 and started again on its cleaned topics
        log("mm2: kill -9 of MirrorMaker, started again on the cleaned topics")
        mm.proc.kill()
        mm.proc.wait()
        mm.out.close()
        mm.start()
        time.sleep(args.after_kill)
        halt.set()
        for t in threads:
            t.join(90)
        source_end = outgrow.end_offsets(src.bootstrap, "steady")

        last = []

        def caught_up():
            n_ = sum(probe.end_offsets("steady", [0, 1, 2]).values())
            last.append(n_)
            return n_ >= source_end and len(last) > 20 and last[-20] == n_
        wait_until("MirrorMaker caught up after its restart", caught_up, 300)
        copied = last[-1]
        mm.stop()
        errors = mm.errors()
        final_rows, final = sample(probe, tgt, tailer, sorted(tailer.tracked), "end")
        res["final"], res["final_per_topic"] = final, list(final_rows.values())
        res["resume"] = {"source_records": source_end, "produced": produced[0], "target_records": copied,
                         "copied_again": copied - source_end}
        res["mm2_errors"] = errors[:10]
        res["checks"].append(("MirrorMaker logged no ERROR", not errors, "%d lines" % len(errors)))
        res["checks"].append(("after kill -9, MirrorMaker resumed from its compacted offsets (re-copied < 1%)",
                              0 <= copied - source_end < max(100, 0.01 * source_end),
                              "%d records on the source, %d on the target: %d copied again"
                              % (source_end, copied, copied - source_end)))
        ok, why = bounded(res["rows"], "disk_mean")
        res["checks"].append(("MirrorMaker's compacted topics: bytes on disk bounded", ok, why))
        res["checks"].append(("(informational) what the tailer missed", True,
                              "it came after a cleaning for %d batches (rebuilt: their bytes undercounted) and %d "
                              "offsets (removed: counted as records, their bytes missing)" % (
                                  final["tailer_late"], final["tailer_gaps"])))
    except Exception as e:
        res["checks"].append(("the run completed", False, "%s: %s" % (type(e).__name__, e)))
        log("mm2: FAILED: %r" % e)
    finally:
        halt.set()
        if tailer:
            tailer.halt.set()
            res["tailer_errors"] = tailer.errors[:10]
            res["tailer_gaps"] = tailer.gap_at
        if mm and mm.proc and mm.proc.poll() is None:
            mm.stop()
        if probe:
            probe.close()
        for b in (src, tgt):
            try:
                b.stop()
            except Exception as e:
                log("stopping %s: %r" % (b.name, e))
        res["broker_problems"] = broker_problems(tgt.proc.log_path)
        res["wall_s"] = round(time.time() - t_begin, 1)
    return res


# --- the report ----------------------------------------------------------------------------------

def report(results):
    ok = True
    for res in results:
        print()
        print("## %s (%s s wall)" % (res["run"], res.get("wall_s")))
        if res["run"] != "mm2":
            print("%s; input %s records/s over %d keys; cleaner %s; transaction version %s" % (
                res["broker"], res["rate"], res["keys"], "on" if res["cleaner"] else "off (log.cleaner.enable=false)",
                res["transaction_version"]))
            for s in STORES:
                t = CHANGELOGS[s]
                print()
                print("### %s (%s)" % (t, res.get("changelog_configs", {}).get(t)))
                rows = res["rows"][t] + [r[t] for r in (res.get("at_kill"), res.get("at_restore"), res.get("final"))
                                         if r]
                print(table(rows, ("input recs", "broker RSS MB"), lambda r: (r.get("input", ""), r.get("rss_mb", ""))))
                r = res.get("restore", {}).get(s)
                if r:
                    print("restore after kill -9 (state dir wiped): %d records restored; %d written before the kill "
                          "(%d on disk then, %d when B restored; end offsets %d); store %d keys, %d wrong; restore "
                          "%.2f s" % (r["restored_records"], r["written_records_before_kill"],
                                      r["records_on_disk_at_kill"], r["records_on_disk_at_restore"],
                                      r["end_offsets_at_kill"], r["store_keys"], r["store_wrong_keys"],
                                      r["restore_s"]))
            if res.get("restore"):
                print("input %d records over %d keys; kill -> RUNNING %.1f s, kill -> caught up %.1f s" % (
                    res["input_records"], res["input_keys"], res["kill_to_running_s"], res["kill_to_caught_up_s"]))
        else:
            print("topics on doze: %s" % ", ".join(res.get("topics", [])))
            rows = res["rows"] + ([res["final"]] if res.get("final") else [])
            print(table(rows, ("copied recs", "doze RSS MB"), lambda r: (r.get("copied", ""), r.get("rss_mb", ""))))
            if res.get("final_per_topic"):
                print("per topic at the end:")
                print(table(res["final_per_topic"], ("topic", "partitions"), lambda r: (r["topic"], r["partitions"])))
            if res.get("resume"):
                print("resume after kill -9: %s" % res["resume"])
        for name, good, detail in res["checks"]:
            ok &= bool(good)
            print("%s %s: %s" % ("ok  " if good else "FAIL", name, detail))
        for p in res.get("broker_problems", []):
            print("doze log: " + p)
        for e in res.get("tailer_errors", []):
            print("tailer: " + e)
        for g in res.get("tailer_gaps", []):
            print("tailer gap: %s-%d: expected offset %d, next batch at %d (%s)" % (g[0][0], g[0][1], g[1], g[2], g[3]))
    return ok


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", default="streams,control,mm2")
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--control-minutes", type=float, default=3.0)
    ap.add_argument("--interval", type=float, default=60.0, help="seconds between rows")
    ap.add_argument("--rate", type=float, default=300.0, help="Streams input records/s")
    ap.add_argument("--keys", type=int, default=1000)
    ap.add_argument("--mm2-rate", type=float, default=100.0, help="1 KiB records/s on MirrorMaker's source")
    ap.add_argument("--segment-ms", type=int, default=30000)
    ap.add_argument("--delete-retention-ms", type=int, default=60000,
                    help="the store counts' changelog's (counts-default keeps the broker's, 24 h)")
    ap.add_argument("--after-kill", type=float, default=20.0, help="seconds the producer goes on after kill -9")
    ap.add_argument("--transaction-version", type=int, default=2, choices=(1, 2))
    ap.add_argument("--kafka", action="store_true", help="streams and control on a real Kafka 4.3.1 (a reference)")
    ap.add_argument("--workdir")
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args()
    runs = args.runs.split(",")
    if "mm2" in runs:
        import needs
        needs.venv()
    if {"streams", "control"} & set(runs):
        jvmcheck.build(PROJECT, JAR)
    root = args.workdir or tempfile.mkdtemp(prefix="compaction-longrun-")
    os.makedirs(root, exist_ok=True)
    log("work directory %s" % root)
    results = []
    for run in runs:
        if run == "streams":
            results.append(run_streams(args, root, True, args.minutes))
        elif run == "control":
            results.append(run_streams(args, root, False, args.control_minutes))
        elif run == "mm2":
            results.append(run_mm2(args, root))
        else:
            raise SystemExit("unknown run %r" % run)
        with open(os.path.join(root, "result.json"), "w") as f:
            json.dump(results, f, indent=1, default=str)
    ok = report(results)
    print()
    print("%d passed, %d failed" % (sum(all(c[1] for c in r["checks"]) for r in results),
                                    sum(not all(c[1] for c in r["checks"]) for r in results)))
    if ok and not args.keep and not args.workdir:
        shutil.rmtree(root, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
