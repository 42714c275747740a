#!/usr/bin/env python3
"""Log compaction on doze and on Apache Kafka 4.3.1, the same workload, compared.

    python3 conformance/compaction/check.py                 # profile A, classic transactions
    python3 conformance/compaction/check.py --profile B     # delete.retention.ms=1000, three passes
    python3 conformance/compaction/check.py --txn 2         # transaction version 2 (KIP-890) clients
    python3 conformance/compaction/check.py --keep          # keep both brokers' directories and logs
    python3 conformance/compaction/check.py --show          # print every batch both hold after each pass

Issue 37's first done-when item, by the recipe of cleaner_spec.md §8: a fresh
Kafka 4.3.1 (conformance/kafka/realkafka.py) and a fresh doze, each with
log.cleaner.backoff.ms=100 and log.segment.delete.delay.ms=0 (and doze with
doze.transaction.version=2, Kafka 4.3.1's level for a new cluster), one topic
`cmp` of one partition: cleanup.policy=compact, min.cleanable.dirty.ratio=0.0,
segment.ms=3000, min.compaction.lag.ms=0, segment.bytes=1048576 and
delete.retention.ms 3600000 (profile A) or 1000 (profile B).

The workload is sent in lockstep with doze_kafka's own codec (raw requests):
each batch is built once per step with the wall clock as its timestamp (Kafka
rolls segments by record timestamps, doze by the segment's wall-clock age) and
sent to doze and then to Kafka, each with that broker's producer id; every
answer must give the same offset on both, and after each EndTxn the script
waits for the marker on both, so the two logs hold the same records at the same
offsets (checked by a full read before any cleaning). Producers: a plain one
(P), two idempotent ones (I1, I2, interleaved), two transactional ones (T1, T2)
-- classic transactions (AddPartitionsToTxn, Produce v9, EndTxn v3) by default,
or --txn 2 (Produce v12, EndTxn v5: the epoch bumps at every EndTxn and each
producer's last marker is what the cleaner keeps for it). Puts, overwrites,
tombstones (some keys written again after, some not, one transactional), a
gzip batch, headers, two records of one key in one batch, committed
transactions (one whose keys are all overwritten later, and T1's last one,
overwritten too), aborted ones (one overwriting keys that must survive, one
of a key seen nowhere else, one interleaved with other producers' batches),
then a committed one of the producer that aborted them (T2).

Then the pass loop: wait until segment.ms + 500 ms after the segment's first
batch, produce a sentinel (key __sentinel): on both it rolls the segment, so
the workload is below the active segment and the LSO; wait until both have
cleaned up to the sentinel (Kafka: <data>/cleaner-offset-checkpoint says
`cmp 0 N`, N >= the sentinel's offset; doze: its log says "cleaned log cmp-0
(dirty section = [a, N])"). Profile B does it three times, delete.retention.ms
+ segment.ms + 500 ms apart (data removed / tombstone and marker horizons set
/ markers removed). After the last pass, phase T in the active segment: an
aborted transaction, a plain record and a transaction left open (never
cleaned; read_committed stops at it).

After each pass, a full read from offset 0 with raw Fetch v12 at
read_uncommitted and read_committed on both (read_committed filtered by the
answer's aborted transactions, as a consumer does), compared:
  - data records (offset, key, value, headers, timestamp): each one Kafka
    keeps must be on doze, the same; one doze keeps that Kafka removed is a
    difference, except a tombstone in profile B (its horizon is timing, §8.6);
  - control records (offset, COMMIT/ABORT): the same; one kept only by doze
    is allowed in profile B (a marker's horizon, §8.6), not in profile A;
  - per key the latest value (tombstones: no value), the high watermark, the
    LSO, the log start offset, ListOffsets earliest and latest;
  - the read_committed answer's aborted transactions (Kafka's come from the
    cleaned .txnindex: only ABORT markers kept with data left, spec §4.1),
    when both made the same passes (else informational);
  - informational: the header-only batches (base offset, last offset,
    producer, epoch), the batches with a delete horizon, ListOffsets by
    MAX_TIMESTAMP, each broker's segment files and cleaner passes.
Exit 0 when everything deterministic agrees, 1 otherwise.
"""
import argparse
import os
import re
import shutil
import struct
import sys
import tempfile
import time
import zlib

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))   # conformance/
from brokers import Doze, Kafka  # noqa: E402
import doze_kafka as dk  # noqa: E402
from doze_kafka import ApiKey, Msg  # noqa: E402

TOPIC = "cmp"
SEGMENT_MS = 3000
PROFILES = {"A": {"delete.retention.ms": 3600000, "passes": 1},
            "B": {"delete.retention.ms": 1000, "passes": 3}}
BROKER_SETTINGS = {"log.cleaner.backoff.ms": "100", "log.segment.delete.delay.ms": "0"}
TXN_TIMEOUT_MS = 600000
PASS_TIMEOUT_S = 60
RETRIABLE = {dk.ErrorCode[n].value for n in (
    "CONCURRENT_TRANSACTIONS", "COORDINATOR_NOT_AVAILABLE", "COORDINATOR_LOAD_IN_PROGRESS", "NOT_COORDINATOR",
    "NOT_LEADER_OR_FOLLOWER", "UNKNOWN_TOPIC_OR_PARTITION", "LEADER_NOT_AVAILABLE")}
CONTROL_NAMES = {dk.CONTROL_ABORT: "ABORT", dk.CONTROL_COMMIT: "COMMIT"}


class Diverged(Exception):
    """The two brokers answered the workload differently: the logs are not the same input."""


def error_name(code):
    try:
        return dk.ErrorCode(code).name
    except ValueError:
        return "error %d" % code


def now_ms():
    return int(time.time() * 1000)


def b(s):
    return None if s is None else s.encode()


def make_batch(records, ts, pid=-1, epoch=-1, seq=-1, transactional=False, gzip=False):
    """A RecordBatch v2 of [(key, value, headers)], every record at timestamp ts; gzip: its
    records gzip-compressed (the cleaner then rebuilds it in gzip, Kafka's and doze's)."""
    attributes = dk.ATTR_TRANSACTIONAL if transactional else 0
    batch = bytearray(dk.build_batch([(b(k), b(v), [(hk, b(hv)) for hk, hv in h]) for k, v, h in records],
                                     0, ts, pid, epoch, seq, attributes))
    if gzip:
        head = dk.BATCH_HEADER_SIZE
        deflater = zlib.compressobj(6, zlib.DEFLATED, 31)
        batch = batch[:head] + deflater.compress(bytes(batch[head:])) + deflater.flush()
        struct.pack_into(">i", batch, 8, len(batch) - dk.LOG_OVERHEAD)
        struct.pack_into(">h", batch, 21, attributes | 1)
        struct.pack_into(">I", batch, 17, dk.crc32c(bytes(batch[21:])))
    return bytes(batch)


# --- one broker, spoken to raw -------------------------------------------------------------

class Side:
    """One broker: its connection, its producer ids and epochs, its sequences."""

    def __init__(self, broker, txn_version):
        self.broker, self.name, self.txn_version = broker, broker.name, txn_version
        self.c = dk.Client(broker.bootstrap, client_id="compaction-check", timeout=60)
        self.pids = {"P": (-1, -1)}               # producer name -> (producer id, epoch)
        self.seq = {}                             # producer name -> next sequence
        self.in_txn = set()                       # transactional producers with the partition added

    def close(self):
        self.c.close()

    def retry(self, what, call, code=lambda r: r.error_code, timeout=60):
        """call() until its answer's error code is 0, again while it is retriable -> the answer."""
        deadline = time.time() + timeout
        while True:
            r = call()
            err = code(r)
            if err == 0:
                return r
            if err not in RETRIABLE or time.time() > deadline:
                raise Diverged("%s answered %s to %s" % (self.name, error_name(err), what))
            time.sleep(0.05)

    def name_of(self, pid):
        return next((n for n, (p, _) in self.pids.items() if p == pid), "pid %d" % pid)

    # setup
    def init_producer(self, name, tid):
        if tid is not None:
            self.retry("FindCoordinator " + tid, lambda: self.c.call(
                ApiKey.FIND_COORDINATOR, 4, key_type=1, coordinator_keys=[tid]).coordinators[0])
        r = self.retry("InitProducerId " + name, lambda: self.c.call(
            ApiKey.INIT_PRODUCER_ID, 4, transactional_id=tid, transaction_timeout_ms=TXN_TIMEOUT_MS,
            producer_id=-1, producer_epoch=-1))
        self.pids[name] = (r.producer_id, r.producer_epoch)
        self.seq[name] = 0

    def create_topic(self, configs):
        r = self.c.call(ApiKey.CREATE_TOPICS, 5, timeout_ms=60000, validate_only=False, topics=[Msg(
            name=TOPIC, num_partitions=1, replication_factor=1, assignments=[],
            configs=[Msg(name=k, value=str(v)) for k, v in configs.items()])]).topics[0]
        if r.error_code:
            raise Diverged("%s: CreateTopics: %s %s" % (self.name, error_name(r.error_code), r.error_message))
        self.retry("ListOffsets after CreateTopics", lambda: self.list_offset(-1), code=lambda r: r[0])

    # the workload
    def produce(self, name, records, ts, gzip=False):
        """-> (base offset, last offset) of the batch."""
        pid, epoch = self.pids[name]
        txn = name.startswith("T")
        seq = self.seq.get(name, -1) if pid >= 0 else -1
        version = 12 if txn and self.txn_version == 2 else 9
        tid = ("cmp-" + name) if txn else None
        if txn and self.txn_version == 1 and name not in self.in_txn:
            self.retry("AddPartitionsToTxn " + name, lambda: self.c.call(
                ApiKey.ADD_PARTITIONS_TO_TXN, 3, transactional_id=tid, producer_id=pid, producer_epoch=epoch,
                topics=[Msg(name=TOPIC, partitions=[0])]).results_by_topic[0].results_by_partition[0],
                code=lambda p: p.partition_error_code)
        if txn:
            self.in_txn.add(name)
        batch = make_batch(records, ts, pid, epoch, seq, txn, gzip)
        part = self.retry("Produce %s %s" % (name, [r[0] for r in records]), lambda: self.c.call(
            ApiKey.PRODUCE, version, transactional_id=tid, acks=-1, timeout_ms=30000,
            topic_data=[Msg(name=TOPIC, partition_data=[Msg(index=0, records=batch)])]
        ).responses[0].partition_responses[0])
        if pid >= 0:
            self.seq[name] = seq + len(records)
        return part.base_offset, part.base_offset + len(records) - 1

    def end_txn(self, name, commit):
        """EndTxn, then wait until its marker is in the log -> the marker's offset."""
        pid, epoch = self.pids[name]
        before = self.list_offset(-1)[1]
        version = 5 if self.txn_version == 2 else 3
        r = self.retry("EndTxn " + name, lambda: self.c.call(
            ApiKey.END_TXN, version, transactional_id="cmp-" + name, producer_id=pid, producer_epoch=epoch,
            committed=commit))
        if version >= 5:
            self.pids[name] = (r.producer_id, r.producer_epoch)
            self.seq[name] = 0                    # a new epoch: sequences start again
        self.in_txn.discard(name)
        deadline = time.time() + 30
        while self.list_offset(-1)[1] < before + 1:
            if time.time() > deadline:
                raise Diverged("%s: no marker after EndTxn %s" % (self.name, name))
            time.sleep(0.02)
        return before

    def list_offset(self, ts, isolation=0):
        """ListOffsets v8 -> (error code, offset, timestamp)."""
        p = self.c.call(ApiKey.LIST_OFFSETS, 8, replica_id=-1, isolation_level=isolation, topics=[Msg(
            name=TOPIC, partitions=[Msg(partition_index=0, current_leader_epoch=-1, timestamp=ts)])]
        ).topics[0].partitions[0]
        return p.error_code, p.offset, p.timestamp

    def wait_stable(self, timeout=30):
        """Until the LSO equals the log end offset (every marker written)."""
        deadline = time.time() + timeout
        while True:
            lso, leo = self.list_offset(-1, 1)[1], self.list_offset(-1, 0)[1]
            if lso == leo:
                return leo
            if time.time() > deadline:
                raise Diverged("%s: LSO %d never reached the log end offset %d" % (self.name, lso, leo))
            time.sleep(0.05)

    # reading
    def read_all(self, isolation):
        """Every batch from offset 0 (raw Fetch v12) -> a Log."""
        return read_log(self.c, TOPIC, 0, isolation, self.name)

    def segment_files(self):
        d = os.path.join(self.broker.data, "%s-0" % TOPIC)
        if not os.path.isdir(d):
            return []
        return sorted("%s(%d)" % (f, os.path.getsize(os.path.join(d, f))) for f in os.listdir(d)
                      if f.endswith(".log") or ".log." in f)


class Batch:
    def __init__(self, h, raw):
        self.h = h
        self.base, self.last = h.base_offset, h.base_offset + h.last_offset_delta
        self.pid, self.epoch = h.producer_id, h.producer_epoch
        self.control = bool(h.attributes & dk.ATTR_CONTROL)
        self.transactional = bool(h.attributes & dk.ATTR_TRANSACTIONAL)
        self.horizon = bool(h.attributes & 0x40)
        self.records = [(h.base_offset + d, h.base_timestamp + t, k, v, tuple((hk if isinstance(hk, str)
                                                                              else hk.decode(), hv)
                                                                             for hk, hv in hs))
                        for d, t, k, v, hs in dk.decode_records(raw)]

    def control_type(self):
        return struct.unpack(">hh", self.records[0][2])[1] if self.records else None


class Log:
    """A full read: its batches, and what a consumer makes of them."""

    def __init__(self, batches, aborted, hw, lso, log_start):
        self.batches, self.aborted, self.hw, self.lso, self.log_start = batches, aborted, hw, lso, log_start

    def data(self, committed):
        """{offset: (key, value, headers, timestamp)}; committed: without aborted transactions'
        records, as a read_committed consumer filters them with the answer's aborted list."""
        pending = sorted(self.aborted, key=lambda a: a[1])
        out, aborting = {}, set()
        for bt in self.batches:
            while committed and pending and pending[0][1] <= bt.last:
                aborting.add(pending.pop(0)[0])
            if bt.control:
                if bt.control_type() == dk.CONTROL_ABORT:
                    aborting.discard(bt.pid)
                continue
            if committed and bt.transactional and bt.pid in aborting:
                continue
            for offset, ts, k, v, hs in bt.records:
                out[offset] = (k, v, hs, ts)
        return out

    def controls(self):
        return {bt.base: CONTROL_NAMES.get(bt.control_type(), bt.control_type())
                for bt in self.batches if bt.control and bt.records}

    def headers_only(self, side):
        return {(bt.base, bt.last, side.name_of(bt.pid), bt.epoch, "control" if bt.control else "data")
                for bt in self.batches if not bt.records}

    def table(self, committed):
        t = {}
        for offset, (k, v, _, _) in sorted(self.data(committed).items()):
            if v is None:
                t.pop(k, None)
            else:
                t[k] = v
        return t

    def tombstones(self):
        return {o for o, (k, v, _, _) in self.data(False).items() if v is None}


# --- both brokers, in lockstep -------------------------------------------------------------

def read_log(client, topic, partition, isolation, who, max_bytes=1 << 20):
    """Every batch of topic-partition from offset 0 (raw Fetch v12, as a consumer at isolation
    would get them) -> a Log (batches, aborted transactions, hw, lso, log start); who names
    the broker in errors."""
    offset, batches, aborted = 0, [], set()
    while True:
        part = client.call(ApiKey.FETCH, 12, replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=max_bytes,
                           isolation_level=isolation, session_id=0, session_epoch=-1, topics=[Msg(
                               topic=topic, partitions=[Msg(partition=partition, current_leader_epoch=-1,
                                                            fetch_offset=offset, last_fetched_epoch=-1,
                                                            log_start_offset=-1, partition_max_bytes=max_bytes)])],
                           forgotten_topics_data=[], rack_id="").responses[0].partitions[0]
        if part.error_code:
            raise Diverged("%s: Fetch %s-%d at %d: %s" % (who, topic, partition, offset, error_name(part.error_code)))
        aborted |= {(a.producer_id, a.first_offset) for a in part.aborted_transactions or ()}
        data = bytes(part.records or b"")
        got = 0
        for start, h, end in dk.whole_batches(data):
            if h.base_offset + h.last_offset_delta < offset:
                continue
            batches.append(Batch(h, data[start:end]))
            offset = h.base_offset + h.last_offset_delta + 1
            got += 1
        limit = part.last_stable_offset if isolation else part.high_watermark
        if not got or offset >= limit:
            return Log(batches, aborted, part.high_watermark, part.last_stable_offset, part.log_start_offset)


class Pair:
    def __init__(self, doze, kafka):
        self.sides = [doze, kafka]
        self.first_ts = None                   # the first batch's timestamp of the current segment
        self.offsets = {}                      # label -> offset (the same on both)

    def each(self, f):
        return [f(s) for s in self.sides]

    def same(self, what, answers):
        if answers[0] != answers[1]:
            raise Diverged("%s: doze %s, kafka %s" % (what, answers[0], answers[1]))
        return answers[0]

    def produce(self, name, records, gzip=False, label=None):
        ts = now_ms()
        self.first_ts = self.first_ts or ts
        base, last = self.same("Produce %s %s" % (name, [r[0] for r in records]),
                               self.each(lambda s: s.produce(name, records, ts, gzip)))
        if label:
            self.offsets[label] = base
        return base, last

    def end_txn(self, name, commit):
        return self.same("EndTxn %s marker offset" % name, self.each(lambda s: s.end_txn(name, commit)))


def rec(k, v, *headers):
    return (k, v, list(headers))


def workload(pair):
    """Phase W: every kind of record a compacted topic meets, in one segment (well under segment.ms)."""
    P = pair.produce
    P("P", [rec("k%02d" % i, "p1-k%02d" % i, ("src", "P")) for i in range(10)])
    P("P", [rec("k%02d" % i, "p1-k%02d" % i) for i in range(10, 20)], gzip=True)
    P("I1", [rec("k05", "i1a-k05"), rec("k06", "i1a-k06"), rec("k07", "i1a-k07")])
    P("I2", [rec("k08", "i2a-k08"), rec("k09", "i2a-k09")])
    P("P", [rec("k00", "p2-k00"), rec("k01", "p2-k01"), rec("k02", "p2-k02")])
    P("I1", [rec("k05", "i1b-k05"), rec("k11", "i1b-k11")])
    P("I2", [rec("k12", "i2b-k12"), rec("k13", "i2b-k13")])          # I2's last batch, all overwritten later
    P("P", [rec("k01", None), rec("k02", None), rec("k15", None)])    # tombstones; k02 written again below
    # T1 commits A, T2 aborts B (over keys that must keep their earlier values), interleaved
    P("T1", [rec("k03", "t1A-k03"), rec("k16", "t1A-k16", ("txn", "A"))])
    P("T2", [rec("k04", "t2B-k04"), rec("k19", "t2B-k19")])
    P("T1", [rec("k17", "t1A-k17")])
    pair.end_txn("T2", False)
    pair.end_txn("T1", True)
    P("T1", [rec("k17", "t1C-k17"), rec("k18", "t1C-k18")])            # C: all overwritten later
    pair.end_txn("T1", True)
    P("P", [rec("k02", "p3-k02")])
    P("T2", [rec("k20", "t2D-k20")])                                  # D: aborted, its key nowhere else
    pair.end_txn("T2", False)
    # E: T2 aborted, interleaved with P, I1 (its last batch; k21 only there) and T1's F
    P("T2", [rec("k09", "t2E-k09")])
    P("P", [rec("k10", "p2-k10")])
    P("T1", [rec("k06", "t1F-k06", ("txn", "F")), rec("k07", None)])  # F: a transactional tombstone
    P("I1", [rec("k14", "i1c-k14"), rec("k21", "i1c-k21")])
    P("T2", [rec("k11", "t2E-k11")])
    P("P", [rec("k17", "p2-k17"), rec("k18", "p2-k18"), rec("k12", "p2-k12"), rec("k13", "p2-k13")])
    pair.end_txn("T2", False)
    pair.end_txn("T1", True)
    P("T2", [rec("k24", "t2I-k24")])                                  # I: T2 commits after its aborts
    pair.end_txn("T2", True)
    P("T1", [rec("k16", "t1J-k16")])                                  # J: T1's last one, overwritten below
    pair.end_txn("T1", True)
    P("P", [rec("k22", None), rec("k23", "p-k23-first"), rec("k23", "p-k23-second"), rec("k16", "p2-k16")])
    P("P", [rec("k19", None)])                                        # k19: its aborted value never counted


def phase_t(pair):
    """After the last pass, in the active segment: an aborted transaction, a plain record and a
    transaction left open -- never cleaned; read_committed stops at the open one."""
    pair.produce("T2", [rec("k01", "t2H-k01")])
    pair.end_txn("T2", False)
    pair.produce("P", [rec("k05", "p-after-k05")])
    pair.produce("T1", [rec("k00", "t1G-open-k00")])


# --- knowing each has cleaned -------------------------------------------------------------

def kafka_checkpoint(side):
    try:
        with open(os.path.join(side.broker.data, "cleaner-offset-checkpoint")) as f:
            for line in f.read().splitlines()[2:]:
                parts = line.split()
                if len(parts) == 3 and parts[0] == TOPIC and parts[1] == "0":
                    return int(parts[2])
    except FileNotFoundError:
        pass
    return None


# doze: "cleaned log cmp-0 (dirty section = [a, N]): ..."; Kafka's LogCleaner summary:
# "Log cleaner thread 0 cleaned log cmp-0 (dirty section = [a, N])"
PASS_LINE = re.compile(r"cleaned log %s-0 \(dirty section = \[(\d+), (\d+)\]\)" % TOPIC)


def pass_lines(side):
    """Each pass over the topic the broker's log tells of -> [(first dirty offset, end offset)]."""
    path = side.broker.proc.log_path if side.name == "doze" else os.path.join(side.broker.dir, "server.log")
    with open(path, errors="replace") as f:
        return [(int(m.group(1)), int(m.group(2))) for m in PASS_LINE.finditer(f.read())]


def cleaned_to(side):
    if side.name == "kafka":
        return kafka_checkpoint(side)
    ends = [end for _, end in pass_lines(side)]
    return max(ends) if ends else None


def wait_passes(pair, sentinel):
    deadline = time.time() + PASS_TIMEOUT_S
    waiting = list(pair.sides)
    took = {}
    t0 = time.time()
    while waiting:
        for s in list(waiting):
            done = cleaned_to(s)
            if done is not None and done >= sentinel:
                took[s.name] = time.time() - t0
                waiting.remove(s)
        if waiting and time.time() > deadline:
            raise Diverged("no pass up to the sentinel %d within %d s on %s (cleaned to: %s)" % (
                sentinel, PASS_TIMEOUT_S, ", ".join(s.name for s in waiting),
                {s.name: cleaned_to(s) for s in pair.sides}))
        time.sleep(0.05)
    return took


# --- comparing -----------------------------------------------------------------------------

def fmt_rec(offset, r):
    k, v, hs, ts = r
    return "%d %s=%s%s" % (offset, k.decode() if k else k, "<tombstone>" if v is None else v.decode(),
                           " headers=%s" % [(hk, hv.decode() if hv else hv) for hk, hv in hs] if hs else "")


class Report:
    def __init__(self, profile):
        self.profile, self.failures, self.notes = profile, [], []

    def fail(self, text):
        self.failures.append(text)
        print("  DIFF " + text)

    def allow(self, text):
        self.notes.append(text)
        print("  timing " + text)

    def info(self, text):
        print("  info " + text)


def dump(side, log):
    """Every batch of a read_uncommitted read, one line each."""
    for bt in log.batches:
        what = ("%s marker" % CONTROL_NAMES.get(bt.control_type(), "emptied")) if bt.control else \
            ", ".join(fmt_rec(o, (k, v, hs, ts)) for o, ts, k, v, hs in bt.records) or "(no records)"
        print("    %s [%d..%d] %s epoch %d%s%s: %s" % (
            side.name, bt.base, bt.last, side.name_of(bt.pid) if bt.pid >= 0 else "-", bt.epoch,
            " txn" if bt.transactional else "", " horizon" if bt.horizon else "", what))


def compare(report, label, doze, kafka, timing_ok, show=False, same_passes=True):
    """One snapshot: both brokers read in full at both isolation levels."""
    print("\n== %s" % label)
    d_side, k_side = doze, kafka
    if show:
        dump(k_side, k_side.read_all(0))
        dump(d_side, d_side.read_all(0))
    for isolation, name in ((0, "read_uncommitted"), (1, "read_committed")):
        d, k = d_side.read_all(isolation), k_side.read_all(isolation)
        dd, kd = d.data(isolation == 1), k.data(isolation == 1)
        missing = sorted(set(kd) - set(dd))
        extra = sorted(set(dd) - set(kd))
        changed = sorted(o for o in set(dd) & set(kd) if dd[o] != kd[o])
        print("  %s: kafka %d data records, doze %d; kafka %d control records, doze %d; hw %d/%d lso %d/%d "
              "log start %d/%d (doze/kafka)" % (name, len(kd), len(dd), len(k.controls()), len(d.controls()),
                                                d.hw, k.hw, d.lso, k.lso, d.log_start, k.log_start))
        for o in missing:
            report.fail("%s %s: kept by kafka, missing on doze: %s" % (label, name, fmt_rec(o, kd[o])))
        for o in changed:
            report.fail("%s %s: offset %d: doze %s, kafka %s" % (label, name, o, fmt_rec(o, dd[o]), fmt_rec(o, kd[o])))
        for o in extra:
            text = "%s %s: kept by doze, removed by kafka: %s" % (label, name, fmt_rec(o, dd[o]))
            (report.allow if timing_ok and dd[o][1] is None else report.fail)(
                text + (" (a tombstone: its horizon is timing)" if timing_ok and dd[o][1] is None else ""))
        dc, kc = d.controls(), k.controls()
        for o in sorted(set(kc) | set(dc)):
            if o not in dc:
                report.fail("%s %s: marker %d %s kept by kafka, missing on doze" % (label, name, o, kc[o]))
            elif o not in kc:
                text = "%s %s: marker %d %s kept by doze, removed by kafka" % (label, name, o, dc[o])
                (report.allow if timing_ok else report.fail)(text)
            elif dc[o] != kc[o]:
                report.fail("%s %s: marker %d: doze %s, kafka %s" % (label, name, o, dc[o], kc[o]))
        for what, dv, kv in (("high watermark", d.hw, k.hw), ("last stable offset", d.lso, k.lso),
                             ("log start offset", d.log_start, k.log_start)):
            if dv != kv:
                report.fail("%s %s: %s doze %d, kafka %d" % (label, name, what, dv, kv))
        dt, kt = d.table(isolation == 1), k.table(isolation == 1)
        for key in sorted(set(dt) | set(kt)):
            if dt.get(key) != kt.get(key):
                report.fail("%s %s: key %s: doze %s, kafka %s" % (label, name, key.decode(), dt.get(key), kt.get(key)))
        print("  %s: %d keys with a value on kafka, %d on doze%s" % (
            name, len(kt), len(dt), ", the same values" if dt == kt else ""))
        if isolation == 0:
            dh, kh = d.headers_only(d_side), k.headers_only(k_side)
            report.info("header-only batches (base, last, producer, epoch, kind): kafka %s" % sorted(kh))
            if dh != kh:
                report.info("header-only batches on doze differ: doze %s" % sorted(dh))
            dhz = sorted(bt.base for bt in d.batches if bt.horizon)
            khz = sorted(bt.base for bt in k.batches if bt.horizon)
            report.info("batches with a delete horizon: kafka %s%s" % (khz, "" if dhz == khz else ", doze %s" % dhz))
        else:
            da = sorted((d_side.name_of(p), f) for p, f in d.aborted)
            ka = sorted((k_side.name_of(p), f) for p, f in k.aborted)
            if da == ka:
                report.info("aborted transactions in the answer (producer, first offset): %s on both" % ka)
            else:   # Kafka lists those of its .txnindex: ABORT markers kept with data left (cleaner_spec §4.1)
                (report.fail if same_passes else report.info)(
                    "%s read_committed: aborted transactions in the answer (producer, first offset): doze %s, "
                    "kafka %s" % (label, da, ka))
    for ts, what in ((-2, "EARLIEST"), (-1, "LATEST")):
        for iso in (0, 1):
            dv, kv = d_side.list_offset(ts, iso)[:2], k_side.list_offset(ts, iso)[:2]
            if dv != kv:
                report.fail("%s ListOffsets %s isolation %d: doze %s, kafka %s" % (label, what, iso, dv, kv))
    dv, kv = d_side.list_offset(-3)[1:], k_side.list_offset(-3)[1:]
    report.info("ListOffsets MAX_TIMESTAMP (offset, timestamp): kafka %s%s"
                % (kv, "" if dv == kv else ", doze %s" % (dv,)))
    for s in (k_side, d_side):
        report.info("%s segments: %s" % (s.name, " ".join(s.segment_files())))


def compare_input(report, doze, kafka, show=False):
    """Before any cleaning: the two logs must be the same, record for record."""
    d, k = doze.read_all(0), kafka.read_all(0)
    if show:
        dump(kafka, k)
    dd, kd = d.data(False), k.data(False)
    same = dd == kd and d.controls() == k.controls() and d.hw == k.hw
    print("\n== before cleaning: %d data records, %d markers, log end %d on kafka; doze %s" % (
        len(kd), len(k.controls()), k.hw, "the same" if same else "DIFFERENT"))
    if not same:
        report.fail("the input differs before any cleaning: doze %d records %s, kafka %d records %s" % (
            len(dd), sorted(d.controls().items()), len(kd), sorted(k.controls().items())))
    for s in (kafka, doze):
        report.info("%s segments: %s" % (s.name, " ".join(s.segment_files())))
    return same


# --- main ----------------------------------------------------------------------------------

def run(args, root):
    profile = PROFILES[args.profile]
    report = Report(args.profile)
    topic_configs = {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.0", "segment.ms": SEGMENT_MS,
                     "min.compaction.lag.ms": 0, "segment.bytes": 1048576, "compression.type": "producer",
                     "delete.retention.ms": profile["delete.retention.ms"]}
    print("compaction check: profile %s (delete.retention.ms=%d, %d pass%s), %s transactions; brokers: %s; "
          "topic: %s" % (args.profile, profile["delete.retention.ms"], profile["passes"],
                        "es" if profile["passes"] > 1 else "",
                        "classic (v1)" if args.txn == 1 else "version 2 (KIP-890)", BROKER_SETTINGS,
                        topic_configs))
    os.makedirs(os.path.join(root, "doze"), exist_ok=True)
    doze_b = Doze(os.path.join(root, "doze"), settings=dict(BROKER_SETTINGS, **{"doze.transaction.version": "2"}))
    kafka_b = Kafka(os.path.join(root), settings=BROKER_SETTINGS)
    started = []
    try:
        t = time.time()
        doze_b.start()
        started.append(doze_b)
        kafka_b.start()
        started.append(kafka_b)
        print("started doze %s and kafka 4.3.1 %s in %.1f s" % (doze_b.bootstrap, kafka_b.bootstrap, time.time() - t))
        doze, kafka = Side(doze_b, args.txn), Side(kafka_b, args.txn)
        pair = Pair(doze, kafka)
        for name, tid in (("I1", None), ("I2", None), ("T1", "cmp-T1"), ("T2", "cmp-T2")):
            pair.each(lambda s: s.init_producer(name, tid))
        print("producers: " + "; ".join("%s %s" % (s.name, {n: p for n, p in s.pids.items()}) for s in pair.sides))
        pair.each(lambda s: s.create_topic(topic_configs))
        t = time.time()
        workload(pair)
        leo = pair.same("log end offset after the workload", pair.each(lambda s: s.wait_stable()))
        print("workload: %d offsets in %.2f s (segment.ms is %d)" % (leo, time.time() - t, SEGMENT_MS))
        compare_input(report, doze, kafka, args.show)
        if report.failures:
            return report
        timing_ok = args.profile == "B"
        for n in range(1, profile["passes"] + 1):
            wait_until = pair.first_ts + SEGMENT_MS + 500 if n == 1 else \
                pair.first_ts + profile["delete.retention.ms"] + SEGMENT_MS + 500
            time.sleep(max(0, wait_until - now_ms()) / 1000)
            pair.first_ts = None
            sentinel, _ = pair.produce("P", [rec("__sentinel", "pass-%d" % n)])
            took = wait_passes(pair, sentinel)
            passes = {s.name: pass_lines(s) for s in pair.sides}
            print("\nsentinel %d at offset %d: cleaned on doze after %.2f s, kafka after %.2f s; passes so far "
                  "(dirty sections): doze %s, kafka %s" % (n, sentinel, took["doze"], took["kafka"], passes["doze"],
                                                           passes["kafka"]))
            if passes["doze"] != passes["kafka"]:
                report.info("the passes differ: what depends on them is compared loosely (cleaner_spec §8.6)")
            if n == profile["passes"]:
                phase_t(pair)
                label = "after pass %d, then phase T" % n
            else:
                label = "after pass %d" % n
            compare(report, label, doze, kafka, timing_ok, args.show, passes["doze"] == passes["kafka"])
        for s in pair.sides:
            s.close()
    except Diverged as e:
        report.fail("the workload: %s" % e)
    finally:
        for b_ in started:
            b_.stop()
    return report


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--profile", choices=sorted(PROFILES), default="A")
    ap.add_argument("--txn", type=int, choices=(1, 2), default=1,
                    help="transactions: 1 classic (AddPartitionsToTxn, EndTxn v3), 2 KIP-890 (Produce v12, EndTxn v5)")
    ap.add_argument("--keep", action="store_true", help="keep both brokers' directories (and print where)")
    ap.add_argument("--show", action="store_true", help="print every batch both brokers hold after each pass")
    ap.add_argument("--dir", help="the directory for both brokers (default: a new temporary one)")
    args = ap.parse_args(argv)
    root = args.dir or tempfile.mkdtemp(prefix="compaction-check-")
    os.makedirs(root, exist_ok=True)
    t0 = time.time()
    report = run(args, root)
    print("\n== summary: profile %s, %s transactions, %.1f s" % (
        args.profile, "classic" if args.txn == 1 else "version 2", time.time() - t0))
    if report.notes:
        print("%d timing-dependent difference(s) allowed (cleaner_spec.md §8.6):" % len(report.notes))
        for n in report.notes:
            print("  " + n)
    if report.failures:
        print("%d difference(s) in what the spec makes deterministic:" % len(report.failures))
        for f in report.failures:
            print("  " + f)
    else:
        print("SAME: doze kept what Kafka 4.3.1 kept (records, offsets, markers, values per key, "
              "both isolation levels)")
    if args.keep:
        print("kept: %s (doze log %s, kafka log %s)" % (root, os.path.join(root, "doze", "broker.log"),
                                                       os.path.join(root, "kafka", "server.log")))
    elif not args.dir:
        shutil.rmtree(root, ignore_errors=True)
    return 1 if report.failures else 0


if __name__ == "__main__":
    sys.exit(main())
