#!/usr/bin/env python3
"""Moving to Apache Kafka and back: MirrorMaker 2 between doze and Kafka 4.3.1.

    python3 conformance/outgrow/outgrow.py                      # doze->kafka, kafka->doze, kafka->kafka
    python3 conformance/outgrow/outgrow.py --pairs doze-kafka   # one direction
    python3 conformance/outgrow/outgrow.py --quick              # fewer records
    python3 conformance/outgrow/outgrow.py --secure             # MirrorMaker over SASL_SSL, ACLs synced

For each pair (source -> target), on fresh brokers from conformance/brokers.py:

1. The source gets, with confluent-kafka (librdkafka):
   - a topic per codec (codec-none, -gzip, -snappy, -lz4, -zstd), 3 partitions,
     two non-default configs (retention.ms, max.message.bytes), records with a
     key, a value, two headers and a CreateTime of their own;
   - txn-mixed: transactions of 10 records, every third one aborted;
   - rate: 1 KiB records, for the copy rate;
   - a consumer group "app" that reads about half of codec-none and commits.
2. MirrorMaker 2 in dedicated mode (Kafka 4.3.1's connect-mirror-maker, from
   the jars conformance/kafka/realkafka.py fetches) copies source -> target with
   IdentityReplicationPolicy (same topic names), read_committed on the source,
   checkpoints and sync.group.offsets, at-least-once (its default).
3. Checked on the target: each topic with its partition count and configs;
   every record with its partition, key, value, headers and timestamp; no
   record of an aborted transaction; the group's translated offsets, by a
   consumer of group "app" on the target reading the rest: nothing lost, and
   the duplicates at-least-once allows counted.
4. A second MirrorMaker with exactly-once source support (KIP-618,
   <target>.exactly.once.source.support=enabled) copies the topic "eos" while
   the source broker is killed -9 and restarted, and then MirrorMaker itself:
   0 duplicates, 0 missing. A third, at least once, copies "alo" under the
   same kills: nothing missing, and the duplicates it allows counted.

With --secure both brokers have a SASL_SSL listener and Kafka's
StandardAuthorizer; MirrorMaker connects as the SCRAM user mm2 and syncs the
source's topic ACLs, which are checked on the target.

Prints a verdict per check and pair, the copy rate in MB/s, and exits 0 only
when every pair passes. Bounded: every wait has a deadline.
"""
import argparse
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))   # conformance/
import needs  # noqa: E402
from brokers import Doze, Kafka  # noqa: E402
from realkafka import tool_command  # noqa: E402
from secure import Security  # noqa: E402

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
CONFIGS = {"retention.ms": "604800000", "max.message.bytes": "2097152"}
BROKERS = {"doze": Doze, "kafka": Kafka}
BASE_TS = int(time.time() * 1000) - 3_600_000     # an hour ago: well inside retention.ms
MM2_LOG4J = """\
status = warn
appender.f.type = File
appender.f.name = F
appender.f.fileName = {path}
appender.f.layout.type = PatternLayout
appender.f.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = info
rootLogger.appenderRef.f.ref = F
"""


def value_of(topic, i, size):
    seed = hashlib.sha256(f"{topic}/{i}".encode()).digest()
    return (seed * (size // len(seed) + 1))[:size]


# --- the source's contents ------------------------------------------------------

ADMINS = {}


def admin(bootstrap):
    """One AdminClient per address, kept: a dropped one cancels its futures."""
    from confluent_kafka.admin import AdminClient
    if bootstrap not in ADMINS:
        ADMINS[bootstrap] = AdminClient({"bootstrap.servers": bootstrap})
    return ADMINS[bootstrap]


def create(bootstrap, topic, partitions, configs=None):
    from confluent_kafka.admin import NewTopic
    admin(bootstrap).create_topics([NewTopic(topic, partitions, 1, config=configs or {})])[topic].result(60)


def produce(bootstrap, topic, count, size, codec="none", partitions=3):
    """count records, record i to partition i % partitions -> {key: record}."""
    from confluent_kafka import Producer
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5, "compression.type": codec,
                  "queue.buffering.max.messages": 1000000})
    expected = {}
    for i in range(count):
        key = f"{topic}-{i}".encode()
        rec = (i % partitions, key, value_of(topic, i, size), [("n", str(i).encode()), ("codec", codec.encode())],
               BASE_TS + i)
        expected[key] = rec
        while True:
            try:
                p.produce(topic, key=key, value=rec[2], headers=rec[3], timestamp=rec[4], partition=rec[0])
                break
            except BufferError:
                p.poll(0.05)
    if p.flush(60):
        raise RuntimeError(f"{topic}: records left unsent")
    return expected


def produce_transactions(bootstrap, topic, transactions):
    """Transactions of 10 records over 2 partitions, every third aborted -> (committed, aborted) keys."""
    from confluent_kafka import Producer
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"{topic}-tx", "linger.ms": 5})
    p.init_transactions(60)
    committed, aborted = set(), set()
    for t in range(transactions):
        p.begin_transaction()
        keys = [f"{topic}-{t}-{j}".encode() for j in range(10)]
        for j, key in enumerate(keys):
            p.produce(topic, key=key, value=value_of(topic, t * 10 + j, 100), partition=j % 2,
                      headers=[("t", str(t).encode())], timestamp=BASE_TS + t)
        if t % 3 == 2:
            p.abort_transaction(60)
            aborted.update(keys)
        else:
            p.commit_transaction(60)
            committed.update(keys)
    return committed, aborted


def read_half(bootstrap, topic, group, total):
    """A consumer of `group` reads about half of topic and commits -> the keys it read."""
    from confluent_kafka import Consumer
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                  "enable.auto.commit": False, "isolation.level": "read_committed"})
    c.subscribe([topic])
    seen, deadline = set(), time.time() + 60
    while len(seen) < total // 2 and time.time() < deadline:
        for m in c.consume(100, 1.0):
            if m.error() is None:
                seen.add(m.key())
    c.commit(asynchronous=False)
    c.close()
    return seen


def read_all(bootstrap, topics, idle_s=3.0, limit_s=120, group=None, expect=None):
    """Every record of topics, read_committed: a consumer of `group` (from its
    committed offsets) or, without one, from the start -> [(topic, partition,
    key, value, headers, timestamp)]. Stops after idle_s with nothing new once
    `expect` records are in (or at limit_s)."""
    from confluent_kafka import Consumer, TopicPartition, OFFSET_BEGINNING
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group or f"outgrow-check-{time.time_ns()}",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False,
                  "isolation.level": "read_committed"})
    if group:
        c.subscribe(list(topics))
    else:
        md = c.list_topics(timeout=30).topics
        c.assign([TopicPartition(t, p, OFFSET_BEGINNING) for t in topics for p in md[t].partitions])
    out, last_new, t0 = [], time.time(), time.time()
    while time.time() - t0 < limit_s:
        got = [m for m in c.consume(10000, 0.5) if m.error() is None]
        if got:
            last_new = time.time()
            out += [(m.topic(), m.partition(), m.key(), m.value(), m.headers() or [], m.timestamp()[1]) for m in got]
        elif time.time() - last_new > idle_s and (expect is None or len(out) >= expect):
            break
    c.close()
    return out


def end_offsets(bootstrap, topic):
    from confluent_kafka import Consumer, KafkaException, TopicPartition
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "outgrow-offsets"})
    try:
        md = c.list_topics(topic, timeout=10).topics.get(topic)
        if md is None or md.error is not None:
            return None
        return sum(c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in md.partitions)
    except KafkaException:                   # a topic just made: no leader yet
        return None
    finally:
        c.close()


def group_offsets(bootstrap, group, topic):
    """{partition: committed offset} of group on topic (absent partitions left out)."""
    from confluent_kafka import ConsumerGroupTopicPartitions
    try:
        res = admin(bootstrap).list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])
        tps = res[group].result(30).topic_partitions
    except Exception:
        return {}
    return {tp.partition: tp.offset for tp in tps if tp.topic == topic and tp.offset >= 0}


# --- MirrorMaker 2 -----------------------------------------------------------------

def mm2_properties(src, tgt, topics, eos=False, alias=("src", "tgt")):
    s, t = alias
    props = {
        "clusters": f"{s}, {t}",
        f"{s}->{t}.enabled": "true",
        f"{s}->{t}.topics": topics,
        f"{s}->{t}.groups": "app",
        f"{t}->{s}.enabled": "false",
        f"{t}->{s}.emit.heartbeats.enabled": "false",
        "replication.policy.class": "org.apache.kafka.connect.mirror.IdentityReplicationPolicy",
        f"{s}.consumer.isolation.level": "read_committed",
        "emit.checkpoints.enabled": "true",
        "emit.checkpoints.interval.seconds": "1",
        "sync.group.offsets.enabled": "true",
        "sync.group.offsets.interval.seconds": "1",
        "refresh.topics.interval.seconds": "5",
        "refresh.groups.interval.seconds": "5",
        "sync.topic.configs.interval.seconds": "5",
        "sync.topic.acls.enabled": "false",
        f"{t}.offset.flush.interval.ms": "1000",    # held offset syncs go out at each flush (60 s by default)
    }
    for rf in ("replication.factor", "offset-syncs.topic.replication.factor",
               "checkpoints.topic.replication.factor", "heartbeats.topic.replication.factor",
               "offset.storage.replication.factor", "config.storage.replication.factor",
               "status.storage.replication.factor"):
        props[rf] = "1"
    if eos:
        props[f"{t}.exactly.once.source.support"] = "enabled"
    for name, b in ((s, src), (t, tgt)):
        props.update(cluster_properties(name, b))
    if src.sec:
        props.update({"sync.topic.acls.enabled": "true", "sync.topic.acls.interval.seconds": "5"})
    return props


def cluster_properties(alias, b):
    """How MirrorMaker reaches broker b: PLAINTEXT, or SASL_SSL as the user mm2
    with the Java client settings Security writes (its client.properties)."""
    if not b.sec:
        return {f"{alias}.bootstrap.servers": b.bootstrap}
    with open(b.sec.client_properties) as f:
        props = dict(line.rstrip("\n").split("=", 1) for line in f if "=" in line)
    return dict({f"{alias}.bootstrap.servers": b.bootstraps[b.sec.listener]},
                **{f"{alias}.{k}": v for k, v in props.items()})


# MirrorMaker's user: what a replication user is given, on both sides.
MM2_GRANTS = [("BROKER", "kafka-cluster", "LITERAL", "ALL"), ("TOPIC", "*", "LITERAL", "ALL"),
              ("GROUP", "*", "LITERAL", "ALL"), ("TRANSACTIONAL_ID", "*", "LITERAL", "ALL")]
# Topic ACLs on the source, and what MirrorMaker's ACL sync should make of each
# on the target: LITERAL topic ACLs of replicated topics are copied, ALLOW ALL
# becomes ALLOW READ, ALLOW WRITE is left out (only MirrorMaker writes there).
SOURCE_ACLS = [("User:reader", "codec-none", "LITERAL", "READ", "ALLOW"),
               ("User:writer", "codec-gzip", "LITERAL", "ALL", "ALLOW"),
               ("User:writer", "codec-lz4", "LITERAL", "WRITE", "ALLOW"),
               ("User:bad", "codec-snappy", "LITERAL", "READ", "DENY"),
               ("User:reader", "codec-", "PREFIXED", "READ", "ALLOW")]
SYNCED_ACLS = {("User:reader", "codec-none", "LITERAL", "READ", "ALLOW"),
               ("User:writer", "codec-gzip", "LITERAL", "READ", "ALLOW"),
               ("User:bad", "codec-snappy", "LITERAL", "READ", "DENY")}


def topic_acls(bootstrap, skip="User:mm2"):
    """The broker's topic ACLs, as (principal, name, pattern, operation, permission)."""
    from confluent_kafka.admin import (AclBindingFilter, AclOperation, AclPermissionType, ResourcePatternType,
                                       ResourceType)
    f = AclBindingFilter(ResourceType.TOPIC, None, ResourcePatternType.ANY, None, None, AclOperation.ANY,
                         AclPermissionType.ANY)
    return {(b.principal, b.name, b.resource_pattern_type.name, b.operation.name, b.permission_type.name)
            for b in admin(bootstrap).describe_acls(f).result(30) if b.principal != skip}


def create_acls(bootstrap, acls):
    from confluent_kafka.admin import AclBinding, AclOperation, AclPermissionType, ResourcePatternType, ResourceType
    bindings = [AclBinding(ResourceType.TOPIC, name, ResourcePatternType[pt], who, "*", AclOperation[op],
                           AclPermissionType[perm]) for who, name, pt, op, perm in acls]
    for f in admin(bootstrap).create_acls(bindings).values():
        f.result(30)


class MirrorMaker:
    """connect-mirror-maker in dedicated mode, as a child JVM logging to a file."""

    def __init__(self, directory, props, name="mm2"):
        self.dir = os.path.join(directory, name)
        os.makedirs(self.dir, exist_ok=True)
        self.props = os.path.join(self.dir, "mm2.properties")
        with open(self.props, "w") as f:
            f.writelines(f"{k} = {v}\n" for k, v in props.items())
        self.log = os.path.join(self.dir, "mm2.log")
        conf = os.path.join(self.dir, "log4j2.properties")
        with open(conf, "w") as f:
            f.write(MM2_LOG4J.format(path=self.log))
        self.cmd = tool_command("connect-mirror-maker", [self.props], log4j=conf, heap="768m")
        self.proc = None

    def start(self):
        self.out = open(os.path.join(self.dir, "mm2.out"), "w")
        self.proc = subprocess.Popen(self.cmd, stdout=self.out, stderr=subprocess.STDOUT)

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.stopped_at = os.path.getsize(self.log) if os.path.exists(self.log) else 0
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.out.close()

    # MirrorMaker's own race while it shuts down on our SIGTERM: a checkpoint
    # task's last query meets its admin client closing (seen with Kafka as the
    # target as well as doze). Logged after the stop, it is not the broker's.
    SHUTDOWN_RACE = re.compile(r"AdminClient is closing|AdminClient thread has exited")

    def errors(self):
        """ERROR lines, each with the first line of its exception; those
        logged after stop() sent SIGTERM whose stack is the SHUTDOWN_RACE are
        left out."""
        with open(self.log, "rb") as f:
            text = f.read()
        stopped_at = getattr(self, "stopped_at", len(text))
        found, current, pos = [], None, 0       # found: (offset, line, its stack lines)
        for raw in text.splitlines(keepends=True):
            at, pos = pos, pos + len(raw)
            line = raw.decode(errors="replace").rstrip()
            if line.startswith("["):            # a new log line ends the last one's stack
                current = (at, line, []) if " ERROR " in line else None
                if current:
                    found.append(current)
            elif current and line.strip():
                current[2].append(line.strip())
        return [f"{line} | {stack[0]}" if stack else line for at, line, stack in found
                if at < stopped_at or not self.SHUTDOWN_RACE.search("\n".join(stack))]


def wait_for(what, check, limit_s, step_s=0.5):
    t0 = time.time()
    while time.time() - t0 < limit_s:
        if check():
            return time.time() - t0
        time.sleep(step_s)
    raise TimeoutError(f"{what}: not within {limit_s} s")


# --- one pair ----------------------------------------------------------------------------

class Verdicts:
    def __init__(self, pair):
        self.pair, self.rows = pair, []

    def check(self, name, ok, detail=""):
        self.rows.append((name, bool(ok), detail))
        print(f"  {self.pair:12s} {'ok  ' if ok else 'FAIL'} {name}: {detail}", flush=True)

    @property
    def ok(self):
        return all(ok for _, ok, _ in self.rows)


def start_broker(name, directory, secure):
    """A broker of `name`; secure: with a SASL_SSL listener (SCRAM-SHA-512), the
    StandardAuthorizer and a user mm2 holding MM2_GRANTS. This script's own
    clients stay on PLAINTEXT, whose User:ANONYMOUS is the super user."""
    os.makedirs(directory)
    sec = Security(directory, "scram-ssl", user="mm2", password="mm2-secret") if secure else None
    b = BROKERS[name](directory, sec.settings if sec else None)
    b.sec = sec
    b.start()
    if sec:
        sec.add_user(b.bootstrap)
        sec.grant(b.bootstrap, MM2_GRANTS)
    return b


def run_pair(src_name, tgt_name, directory, sizes, secure=False):
    pair = f"{src_name}->{tgt_name}"
    v = Verdicts(pair)
    src = start_broker(src_name, os.path.join(directory, "source"), secure)
    tgt = start_broker(tgt_name, os.path.join(directory, "target"), secure)
    figures = {}
    mm = None
    try:
        expected = {}
        for codec in CODECS:
            create(src.bootstrap, f"codec-{codec}", 3, CONFIGS)
            expected[f"codec-{codec}"] = produce(src.bootstrap, f"codec-{codec}", sizes["records"], 1024, codec)
        create(src.bootstrap, "txn-mixed", 2)
        committed, aborted = produce_transactions(src.bootstrap, "txn-mixed", sizes["transactions"])
        create(src.bootstrap, "rate", 3)
        produce(src.bootstrap, "rate", sizes["rate"], 1024)
        read_on_source = read_half(src.bootstrap, "codec-none", "app", sizes["records"])
        source_group = group_offsets(src.bootstrap, "app", "codec-none")
        if secure:
            create_acls(src.bootstrap, SOURCE_ACLS)
        print(f"  {pair:12s} source filled; group app read {len(read_on_source)} of codec-none, "
              f"offsets {source_group}", flush=True)

        mm = MirrorMaker(directory, mm2_properties(src, tgt, "codec-.*|txn-mixed|rate"))
        t_start = time.time()
        mm.start()
        samples = []

        def rate_copied():
            n = end_offsets(tgt.bootstrap, "rate") or 0
            samples.append((time.time(), n))
            return n >= sizes["rate"]
        wait_for("rate copied", rate_copied, 300)
        moving = [(t, n) for t, n in samples if n > 0]
        (t1, n1), (t2, n2) = moving[0], moving[-1]
        figures["copy MB/s"] = (n2 - n1) * 1024 / max(t2 - t1, 1e-3) / 1e6 if t2 > t1 else float("nan")
        figures["first record after start (s)"] = t1 - t_start
        total = sum(len(e) for e in expected.values())
        wait_for("every codec topic copied",
                 lambda: all((end_offsets(tgt.bootstrap, t) or 0) >= len(e) for t, e in expected.items()), 180)

        def translated():
            now = group_offsets(tgt.bootstrap, "app", "codec-none")
            seen.append(now)
            return set(now) == set(source_group) and len(seen) > 6 and seen[-6] == now
        seen = []
        waited = wait_for("group app's offsets on the target, steady for 3 s", translated, 90)
        target_group = seen[-1]
        behind = {p: source_group[p] - o for p, o in target_group.items()}
        exact = f"steady after {waited:.0f} s, behind the source's by {behind}"
        time.sleep(6)                                   # one more topic-config sync interval
        mm.stop()
        errors = mm.errors()
        v.check("MirrorMaker logged no ERROR", not errors, f"{len(errors)} lines" + (f"; first: {errors[0][:300]}"
                                                                                    if errors else ""))

        # topics and configs
        md = admin(tgt.bootstrap).list_topics(timeout=30).topics
        src_md = admin(src.bootstrap).list_topics(timeout=30).topics
        bad = [t for t in list(expected) + ["txn-mixed", "rate"]
               if t not in md or len(md[t].partitions) != len(src_md[t].partitions)]
        v.check("topics created with the source's partition counts", not bad, f"missing or different: {bad}"
                if bad else f"{len(expected) + 2} topics")
        from confluent_kafka.admin import ConfigResource
        res = [ConfigResource("topic", t) for t in expected]
        described = {r.name: f.result(30) for r, f in admin(tgt.bootstrap).describe_configs(res).items()}
        wrong = {t: {k: (cfg[k].value if k in cfg else None) for k in CONFIGS}
                 for t, cfg in described.items() if any(k not in cfg or cfg[k].value != CONFIGS[k] for k in CONFIGS)}
        v.check("topic configs synced (retention.ms, max.message.bytes)", not wrong, str(wrong) if wrong else "")

        if secure:
            got = topic_acls(tgt.bootstrap)
            v.check("topic ACLs synced (ALL as READ, no WRITE, DENY kept, PREFIXED left out)", got == SYNCED_ACLS,
                    f"target has {sorted(got)}" if got != SYNCED_ACLS else f"{len(got)} ACLs as expected")

        # records, per codec
        got = read_all(tgt.bootstrap, list(expected) + ["txn-mixed"], expect=total + len(committed))
        by_topic = {}
        for t, p, key, value, headers, ts in got:
            by_topic.setdefault(t, []).append((p, key, value, [tuple(h) for h in headers], ts))
        for topic, exp in expected.items():
            recs = by_topic.get(topic, [])
            keys = [r[1] for r in recs]
            have = set(keys)
            dups = len(keys) - len(have)
            missing = [k for k in exp if k not in have]
            differ = [r for r in recs if r[1] in exp and tuple(r) != (exp[r[1]][0], r[1], exp[r[1]][2],
                                                                     list(exp[r[1]][3]), exp[r[1]][4])]
            v.check(f"{topic}: every record copied with key, value, headers, timestamp",
                    not missing and not differ and not dups,
                    f"{len(have)} of {len(exp)}, {dups} duplicates, {len(differ)} different")
        keys = [r[1] for r in by_topic.get("txn-mixed", [])]
        have = set(keys)
        v.check("txn-mixed: committed records copied, aborted ones absent",
                have == committed and not (have & aborted) and len(keys) == len(have),
                f"{len(have & committed)} of {len(committed)} committed, {len(have & aborted)} of {len(aborted)} aborted")

        # the group resumes on the target
        resumed = read_all(tgt.bootstrap, ["codec-none"], group="app", expect=sizes["records"] - len(read_on_source))
        resumed_keys = [r[2] for r in resumed]
        lost = set(expected["codec-none"]) - read_on_source - set(resumed_keys)
        dups = len(set(resumed_keys) & read_on_source) + len(resumed_keys) - len(set(resumed_keys))
        v.check("group app resumes on the target at or before its offsets there, with nothing lost",
                not lost and target_group and all(b >= 0 for b in behind.values()),
                f"target offsets {target_group} ({exact}); read {len(resumed_keys)} more, lost {len(lost)}, "
                f"read again {dups}")
        figures["group duplicates"] = dups
        figures["records copied"] = total + len(committed) + sizes["rate"]

        # exactly-once source mode under kill -9 of the source and of MirrorMaker,
        # and the same at least once (its default): duplicates allowed, nothing lost
        for topic, eos in (("eos", True), ("alo", False)):
            dups, missing, at = copy_under_kill(src, tgt, directory, topic, sizes["eos"], eos)
            detail = (f"{dups} duplicates, {missing} missing of {sizes['eos']}; killed at "
                      f"{at[0]} (MirrorMaker) and {at[1]} (source) copied")
            mid = all(a < sizes["eos"] for a in at)
            if eos:
                v.check("exactly-once source mode, MirrorMaker and source killed -9 mid-copy: 0 duplicates, "
                        "0 missing", dups == 0 and missing == 0 and mid, detail)
            else:
                v.check("at least once, the same kills: 0 missing", missing == 0 and mid, detail)
            figures[f"{'exactly-once' if eos else 'at-least-once'} duplicates"] = dups
    except Exception as e:                   # a verdict, not a traceback: the run goes on to the next pair
        v.check("the run completed", False, f"{type(e).__name__}: {e}")
        if mm and mm.proc and mm.proc.poll() is None:
            mm.stop()
    finally:
        for b in (src, tgt):
            b.stop()
    return v, figures


def copy_under_kill(src, tgt, directory, topic, count, eos):
    """MirrorMaker copies `topic` (count records) while it is killed -9 and
    restarted (at a fifth), and then the source broker is (at half) ->
    (duplicates, missing, copied when each kill came)."""
    create(src.bootstrap, topic, 3)
    produce(src.bootstrap, topic, count, 1024)
    aliases = ("srcx", "tgtx") if eos else ("srcy", "tgty")
    props = mm2_properties(src, tgt, topic, eos=eos, alias=aliases)
    mm = MirrorMaker(directory, props, name=f"mm2-{topic}")
    mm.start()
    at = []
    try:
        for fraction, kill in ((5, "mirrormaker"), (2, "source")):
            copied = []
            wait_for(f"1/{fraction} of {topic} copied", lambda: copied.append(end_offsets(tgt.bootstrap, topic) or 0)
                     or copied[-1] >= count // fraction, 240, step_s=0.05)
            at.append(copied[-1])
            if kill == "source":
                src.kill9()
                time.sleep(2)
                src.start()
            else:
                mm.proc.kill()
                mm.proc.wait()
                mm.out.close()
                mm.start()
        got = []

        def all_in():
            got[:] = read_all(tgt.bootstrap, [topic], idle_s=2, limit_s=30)
            return len({r[2] for r in got}) >= count
        wait_for(f"all of {topic} copied", all_in, 300)
        time.sleep(3)
        got = read_all(tgt.bootstrap, [topic], idle_s=2, limit_s=60, expect=count)
    finally:
        mm.stop()
    keys = [r[2] for r in got]
    return len(keys) - len(set(keys)), count - len(set(keys)), at


def main():
    needs.venv()
    ap = argparse.ArgumentParser()
    ap.add_argument("--pairs", default="doze-kafka,kafka-doze,kafka-kafka",
                    help="source-target pairs, of doze-kafka, kafka-doze, kafka-kafka, doze-doze")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--secure", action="store_true", help="MirrorMaker over SASL_SSL, with ACLs and their sync")
    ap.add_argument("--keep", action="store_true", help="keep the directories (MirrorMaker's logs)")
    args = ap.parse_args()
    sizes = dict(records=3000, transactions=30, rate=100000, eos=100000)
    if args.quick:
        sizes = dict(records=300, transactions=9, rate=10000, eos=40000)
    results = []
    for pair in args.pairs.split(","):
        s, t = pair.split("-")
        d = tempfile.mkdtemp(prefix=f"outgrow-{pair}-")
        print(f"pair {s} -> {t} ({d})", flush=True)
        verdicts, figures = run_pair(s, t, d, sizes, args.secure)
        results.append((pair, verdicts, figures))
        if not args.keep and verdicts.ok:
            shutil.rmtree(d, ignore_errors=True)
    print()
    for pair, verdicts, figures in results:
        print(f"{pair:12s} {'PASS' if verdicts.ok else 'FAIL'}  " +
              ", ".join(f"{k} {v:.1f}" if isinstance(v, float) else f"{k} {v}" for k, v in figures.items()))
    return 0 if all(v.ok for _, v, _ in results) else 1


if __name__ == "__main__":
    sys.exit(main())
