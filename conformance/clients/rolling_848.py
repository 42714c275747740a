#!/usr/bin/env python3
"""A rolling change of a consumer group from the classic protocol to KIP-848's, under load.

    python3 conformance/clients/rolling_848.py [--kafka] [--records 20000] [--rate 400]
        [--assignor range|roundrobin|cooperative-sticky] [--order close-first|start-first]
        [--kill STEP] [--kill-new] [--pause 5] [--keep] [--json FILE]

One run, on a fresh broker (doze, or with --kafka a real Apache Kafka 4.3.1; both
from conformance/brokers.py, group.initial.rebalance.delay.ms=0 on both, every
other group setting at its default: group.consumer.migration.policy bidirectional,
group.consumer.heartbeat.interval.ms 5000, group.consumer.session.timeout.ms 45000):

1. a topic of 6 partitions; a producer process writes --records numbered records
   (key and value: the number) at --rate records/s, idempotent, acks=all;
2. three consumer processes c1-c3, group.protocol=classic (--assignor, range by
   default: with librdkafka's cooperative-sticky both brokers refuse the online
   upgrade, GROUP_ID_NOT_FOUND, fatal to the new member; session.timeout.ms 10000, librdkafka's heartbeat.interval.ms 3000), consume in
   one group: each batch (up to 100 records) is processed (logged, then 20 ms of
   "work"), then its offsets (the highest offset + 1 of each partition in the
   batch) are committed synchronously;
3. step by step, classic member ci is closed (SIGTERM: the member finishes and
   commits its batch, then close(), which leaves the group) and n_i, a
   group.protocol=consumer member of the same group, is started; the step ends when
   the group has settled: every partition held by exactly one live member, n_i
   holding at least one; then --pause seconds more;
   (--order start-first: n_i starts first, the group settles with four members,
   --pause, then ci is closed and the group settles again: a surge, in which the
   classic members must give up partitions to the newcomer);
4. after the third step the producer finishes, the members read to the end (the
   group's committed offsets reach the high watermarks), and are closed.

--kill STEP: at that step the classic member is killed (SIGKILL to its process)
instead of closed, in the middle of a batch: SIGUSR1 first makes it stop after
logging its next batch and before committing it, so that batch is processed and
never committed (its records must come again, as "uncommitted" duplicates); the
group waits for the member's session (10 s) to end. --kill-new: after the third
step, new member n1 is killed too (the same way) and n4 started; its partitions
come back after the KIP-848 session timeout (45 s, the broker's minimum). Give
these a lower --rate (200) so that the producer still writes at the last kill.

Every consumer writes an event log (JSON lines, flushed per line): assign, revoke,
lost, each batch with its (partition, offset, number) records once processed, each
commit with its outcome and the time it was acknowledged. The verdict:

- lost = numbers the producer had acknowledged that no member processed (must be 0);
- duplicates = reads of an offset beyond its first. Each is classed by the first
  reading's commit: "uncommitted" when no successful commit covering that record had
  been acknowledged before the re-reader was assigned the partition (at-least-once
  allows these: processed, not yet committed at the handover); "after commit" when
  one had (the group handed out an offset older than one it had acknowledged: wrong);
- commits going back: a successful commit of a partition below an offset committed
  and acknowledged earlier (by any member; reported, not judged).

Exit 1 if lost > 0, a duplicate is "after commit", or the group never settles.
"""
import argparse
import collections
import json
import os
import shutil
import signal
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))   # conformance/
import needs  # noqa: E402
from lib import Child  # noqa: E402

TOPIC, GROUP, PARTITIONS = "rolling", "rolling-group", 6
CLASSIC_SESSION_MS = 10000


# --------------------------------------------------------------------------- child roles

def run_producer(a):
    from confluent_kafka import Producer
    p = Producer({"bootstrap.servers": a.bootstrap, "enable.idempotence": True, "acks": "all",
                  "linger.ms": 5, "client.id": "rolling-producer"})
    acked, failed = [0], []

    def report(err, msg):
        if err:
            failed.append([int(msg.value()), str(err)])
        else:
            acked[0] += 1

    def status(done=False):
        tmp = a.out + ".tmp"
        with open(tmp, "w") as f:
            json.dump({"sent": n_sent, "acked": acked[0], "failed": failed, "done": done, "t": time.time()}, f)
        os.replace(tmp, a.out)

    t0, last = time.monotonic(), 0.0
    n_sent = 0
    for n in range(a.records):
        due = t0 + n / a.rate
        while time.monotonic() < due:
            p.poll(min(0.05, max(0.0, due - time.monotonic())))
        while True:
            try:
                p.produce(TOPIC, key=b"%d" % n, value=b"%d" % n, on_delivery=report)
                break
            except BufferError:
                p.poll(0.05)
        n_sent = n + 1
        p.poll(0)
        if time.monotonic() - last > 1:
            last = time.monotonic()
            status()
    left = p.flush(120)
    status(done=True)
    sys.exit(0 if left == 0 and not failed else 1)


def run_consumer(a):
    from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
    stop = [False]
    hold = [False]
    signal.signal(signal.SIGTERM, lambda *_: stop.__setitem__(0, True))
    signal.signal(signal.SIGUSR1, lambda *_: hold.__setitem__(0, True))
    log = open(a.out, "a", buffering=1)

    def ev(kind, **kw):
        log.write(json.dumps(dict(t=time.time(), ev=kind, **kw)) + "\n")

    conf = {"bootstrap.servers": a.bootstrap, "group.id": GROUP, "client.id": a.name,
            "group.protocol": a.protocol, "enable.auto.commit": False, "auto.offset.reset": "earliest"}
    if a.protocol == "classic":
        conf.update({"partition.assignment.strategy": a.assignor, "session.timeout.ms": CLASSIC_SESSION_MS})
    c = Consumer(conf)
    parts = lambda ps: sorted(tp.partition for tp in ps)  # noqa: E731
    c.subscribe([TOPIC], on_assign=lambda _c, ps: ev("assign", parts=parts(ps)),
                on_revoke=lambda _c, ps: ev("revoke", parts=parts(ps)),
                on_lost=lambda _c, ps: ev("lost", parts=parts(ps)))
    ev("start", protocol=a.protocol, pid=os.getpid())
    batch = 0
    while not stop[0]:
        msgs = c.consume(100, 0.5)
        recs = []
        for m in msgs:
            if m.error():
                fatal = m.error().fatal() or m.error().code() == KafkaError._FATAL
                ev("error", err=str(m.error()), fatal=fatal)
                if fatal:
                    stop[0] = "fatal"
            else:
                recs.append([m.partition(), m.offset(), int(m.value())])
        if not recs or stop[0] == "fatal":
            continue
        time.sleep(a.work_ms / 1000)            # the work
        batch += 1
        ev("batch", b=batch, recs=recs)
        if hold[0]:                             # processed, not committed: the parent kills us here
            ev("holding", b=batch)
            time.sleep(60)
        high = {}
        for p, o, _n in recs:
            high[p] = max(high.get(p, -1), o + 1)
        try:
            res = c.commit(offsets=[TopicPartition(TOPIC, p, o) for p, o in sorted(high.items())],
                           asynchronous=False)
            got = {tp.partition: [tp.offset, str(tp.error) if tp.error else None] for tp in res}
            ev("commit", b=batch, ok=all(v[1] is None for v in got.values()), parts=got)
        except KafkaException as e:
            ev("commit", b=batch, ok=False, err=str(e.args[0]), parts={p: [o, str(e.args[0])] for p, o in high.items()})
    ev("closing")
    c.close()
    ev("closed")
    sys.exit(3 if stop[0] == "fatal" else 0)


# --------------------------------------------------------------------------- the parent

def kill_mid_batch(member, limit_s=10.0):
    """SIGUSR1 (the member stops after logging its next batch, before committing it),
    then SIGKILL: a batch processed and never committed. -> what happened."""
    member.child.proc.send_signal(signal.SIGUSR1)
    t_end = time.monotonic() + limit_s
    while time.monotonic() < t_end and not any(e["ev"] == "holding" for e in member.events):
        time.sleep(0.05)
        member.read()
    held = [e for e in member.events if e["ev"] == "holding"]
    member.child.kill9()
    member.killed = True
    if held:
        n = len(next(e for e in member.events if e["ev"] == "batch" and e["b"] == held[0]["b"])["recs"])
        return f"killed (SIGKILL) holding batch {held[0]['b']} of {n} records processed, not committed"
    return f"killed (SIGKILL) between batches (no batch in {limit_s:g} s)"


class Member:
    def __init__(self, name, protocol, workdir, a, bootstrap):
        self.name, self.protocol = name, protocol
        self.log = os.path.join(workdir, name + ".jsonl")
        self.events, self._pos = [], 0
        self.owned, self.gone, self.killed, self.stopping = set(), False, False, False
        self.child = Child([sys.executable, os.path.abspath(__file__), "--role", "consumer", "--bootstrap",
                            bootstrap, "--protocol", protocol, "--name", name, "--out", self.log,
                            "--assignor", a.assignor, "--work-ms", str(a.work_ms)],
                           log=os.path.join(workdir, name + ".stderr"))
        self.started = time.time()

    def read(self):
        """New complete lines of the member's log -> the current ownership."""
        try:
            with open(self.log) as f:
                f.seek(self._pos)
                data = f.read()
        except FileNotFoundError:
            return
        end = data.rfind("\n")
        if end < 0:
            return
        self._pos += len(data[:end + 1].encode())
        for line in data[:end + 1].splitlines():
            e = json.loads(line)
            e["who"] = self.name
            self.events.append(e)
            if e["ev"] == "assign":
                self.owned |= set(e["parts"])
            elif e["ev"] in ("revoke", "lost"):
                self.owned -= set(e["parts"])
            elif e["ev"] == "closed":
                self.owned, self.gone = set(), True

    def live_owned(self):
        return set() if (self.gone or self.killed) else self.owned


def settled(members, newcomers=()):
    """Every partition held by exactly one live member, and each newcomer holds one."""
    held = collections.Counter()
    for m in members:
        m.read()
        held.update(m.live_owned())
    ok = sorted(held) == list(range(PARTITIONS)) and all(v == 1 for v in held.values())
    return ok and all(m.live_owned() for m in newcomers)


def layout(members):
    return " ".join(f"{m.name}{'(' + m.protocol[0] + ')'}:{','.join(map(str, sorted(m.live_owned()))) or '-'}"
                    for m in members if not (m.gone or m.killed))


def describe_group(bootstrap):
    """The group's type and state and its members' client ids, as the broker describes them."""
    from confluent_kafka.admin import AdminClient
    admin = AdminClient({"bootstrap.servers": bootstrap})       # held until the answer comes
    try:
        d = admin.describe_consumer_groups([GROUP])[GROUP].result(10)
        return (f"{str(d.type).split('.')[-1]} {str(d.state).split('.')[-1]} "
                f"[{' '.join(sorted(m.client_id for m in d.members))}]")
    except Exception as e:           # an answer for the report, not a failure
        return f"describe failed: {e!r}"


def end_offsets_done(bootstrap):
    """(group's committed offsets, high watermarks) of the topic."""
    from confluent_kafka import Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP, "enable.auto.commit": False})
    try:
        tps = [TopicPartition(TOPIC, p) for p in range(PARTITIONS)]
        committed = {tp.partition: tp.offset for tp in c.committed(tps, timeout=10)}
        highs = {p: c.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=10)[1] for p in range(PARTITIONS)}
        return committed, highs
    finally:
        c.close()


def analyse(members, produced):
    events = sorted((e for m in members for e in m.events), key=lambda e: e["t"])
    reads = collections.defaultdict(list)       # (p, o) -> [(t, who, batch)]
    number = {}
    commits = []                                # (t ack, who, batch, {p: offset}) successful partitions only
    commit_fail = 0
    for e in events:
        if e["ev"] == "batch":
            for p, o, n in e["recs"]:
                reads[(p, o)].append((e["t"], e["who"], e["b"]))
                number[(p, o)] = n
        elif e["ev"] == "commit":
            good = {int(p): v[0] for p, v in e["parts"].items() if v[1] is None}
            if good:
                commits.append((e["t"], e["who"], e["b"], good))
            if not e["ok"]:
                commit_fail += 1
    assigned = collections.defaultdict(list)    # (who, p) -> [t of assign]
    for e in events:
        if e["ev"] == "assign":
            for p in e["parts"]:
                assigned[(e["who"], p)].append(e["t"])

    held = {(e["who"], e["b"]) for e in events if e["ev"] == "holding"}   # batches a kill left uncommitted
    seen = set(number.values())
    lost = sorted(set(range(produced["sent"])) - {f[0] for f in produced["failed"]} - seen)
    dup_uncommitted = dup_after = dup_held = 0
    after_examples = []
    for (p, o), rs in reads.items():
        for t_r, who, _b in rs[1:]:
            t_a = max([t for t in assigned[(who, p)] if t <= t_r], default=t_r)
            covered = [c for c in commits if c[0] < t_a and c[3].get(p, -1) > o]
            if covered:
                dup_after += 1
                if len(after_examples) < 5:
                    c = min(covered, key=lambda c: c[0])
                    after_examples.append(f"p{p}@{o} read by {rs[0][1]}, committed ({c[3][p]}) by {c[1]} at "
                                          f"{c[0]:.3f}, re-read by {who} at {t_r:.3f} (assigned {t_a:.3f})")
            else:
                dup_uncommitted += 1
                dup_held += (rs[0][1], rs[0][2]) in held
    back = []
    high = {}
    for t, who, b, offs in commits:
        for p, o in offs.items():
            if o < high.get(p, (-1,))[0]:
                back.append(f"p{p}: {who} committed {o} at {t:.3f} after {high[p][1]} committed {high[p][0]}")
            if o > high.get(p, (-1,))[0]:
                high[p] = (o, who)
    dup_numbers = sum(1 for c in collections.Counter(number.values()).values() if c > 1)
    return {"produced": produced["acked"], "sent": produced["sent"], "delivery_failed": len(produced["failed"]),
            "reads": sum(len(r) for r in reads.values()), "distinct": len(seen), "lost": len(lost),
            "lost_examples": lost[:10], "duplicates": dup_uncommitted + dup_after,
            "dup_uncommitted": dup_uncommitted, "dup_after_commit": dup_after, "dup_held_at_kill": dup_held,
            "held_batch_records": sum(len(e["recs"]) for e in events if e["ev"] == "batch" and (e["who"], e["b"]) in held),
            "after_examples": after_examples, "same_number_two_offsets": dup_numbers,
            "commits": len(commits), "commit_failures": commit_fail, "commits_back": back[:10],
            "commits_back_count": len(back)}


def broker_log_errors(broker, workdir):
    """ERROR lines and tracebacks in the broker's log (doze: broker.log; Kafka: server.log)."""
    path = os.path.join(workdir, "broker.log") if broker.name == "doze" else os.path.join(workdir, "kafka", "server.log")
    try:
        with open(path, errors="replace") as f:
            return [line.rstrip() for line in f if " ERROR " in line or "Traceback" in line][:20]
    except OSError:
        return []


def main():
    needs.venv()
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--role", default="parent", choices=["parent", "producer", "consumer"])
    ap.add_argument("--kafka", action="store_true", help="a real Kafka 4.3.1 instead of doze")
    ap.add_argument("--records", type=int, default=20000)
    ap.add_argument("--rate", type=float, default=400.0, help="records per second")
    ap.add_argument("--assignor", default="range",
                    help="the classic members' partition.assignment.strategy (range, roundrobin, cooperative-sticky)")
    ap.add_argument("--warmup", type=float, default=8.0, help="s the classic group runs before step 1")
    ap.add_argument("--pause", type=float, default=5.0, help="s after a step's group settled")
    ap.add_argument("--settle-timeout", type=float, default=90.0)
    ap.add_argument("--kill", type=int, default=0, metavar="STEP", help="kill -9 the classic member at this step")
    ap.add_argument("--kill-new", action="store_true", help="then kill -9 new member n1 and start n4")
    ap.add_argument("--order", default="close-first", choices=["close-first", "start-first"],
                    help="a step closes the old member then starts the new one, or the other way round")
    ap.add_argument("--work-ms", type=float, default=20.0, help="a batch's processing time")
    ap.add_argument("--timeout", type=float, default=600.0, help="the whole run's limit (s)")
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    ap.add_argument("--json", help="write the verdict here too")
    ap.add_argument("--workdir")
    # child roles
    ap.add_argument("--bootstrap")
    ap.add_argument("--protocol")
    ap.add_argument("--name")
    ap.add_argument("--out")
    a = ap.parse_args()
    if a.role == "producer":
        return run_producer(a)
    if a.role == "consumer":
        return run_consumer(a)

    from brokers import Doze, Kafka
    from confluent_kafka.admin import AdminClient, NewTopic
    workdir = a.workdir or tempfile.mkdtemp(prefix="rolling848-")
    os.makedirs(workdir, exist_ok=True)
    broker = (Kafka if a.kafka else Doze)(workdir)
    t_start = time.time()
    deadline = time.monotonic() + a.timeout

    def say(msg):
        print(f"[{time.time() - t_start:7.2f}] {msg}", flush=True)

    members, producer, failures, steps, joins = [], None, [], [], []
    try:
        broker.start()
        say(f"{broker.name} at {broker.bootstrap}, work directory {workdir}")
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])[TOPIC].result(60)
        prod_status = os.path.join(workdir, "producer.json")
        producer = Child([sys.executable, os.path.abspath(__file__), "--role", "producer", "--bootstrap",
                          broker.bootstrap, "--records", str(a.records), "--rate", str(a.rate), "--out", prod_status],
                         log=os.path.join(workdir, "producer.stderr"))

        def wait_settled(newcomers, what):
            t0 = time.time()
            limit = time.monotonic() + a.settle_timeout
            while not settled(members, newcomers):
                if time.monotonic() > limit or time.monotonic() > deadline:
                    failures.append(f"{what}: the group did not settle in {a.settle_timeout:g} s ({layout(members)})")
                    say(failures[-1])
                    return None
                for m in members:
                    if not m.stopping and not m.killed and not m.child.alive():
                        m.read()
                        last = [e["err"] for e in m.events if e["ev"] == "error"][-1:]
                        failures.append(f"{m.name} exited by itself (rc {m.child.proc.returncode}) {last}")
                        say(failures[-1])
                        m.killed = True
                        if m in newcomers:
                            return None
                time.sleep(0.1)
            t_settled = time.time()
            lay = layout(members)
            say(f"{what}: settled {t_settled - t0:.2f} s after the new member started: {lay}; "
                f"{describe_group(broker.bootstrap)}")
            return t_settled

        for i in (1, 2, 3):
            members.append(Member(f"c{i}", "classic", workdir, a, broker.bootstrap))
        if wait_settled(members[:3], "classic group of 3") is None:
            raise SystemExit("the classic group never formed")
        time.sleep(a.warmup)
        for i in (1, 2, 3):
            old = members[i - 1]
            if a.order == "start-first":             # a surge: the new member joins, then the old one goes
                new = Member(f"n{i}", "consumer", workdir, a, broker.bootstrap)
                members.append(new)
                say(f"step {i}: {new.name} (group.protocol=consumer) started beside {old.name}")
                t_in = time.time()
                took = wait_settled([new], f"step {i}, {new.name} in")
                joins.append(None if took is None else round(took - t_in, 2))
                if took is None:
                    steps.append(None)
                    continue
                time.sleep(a.pause)
            t0 = time.time()
            if a.kill == i:
                how = kill_mid_batch(old)
            else:
                old.stopping = True
                if not old.child.stop(30):
                    failures.append(f"{old.name} did not close within 30 s (killed)")
                    old.killed = True
                old.read()
                how = f"closed in {time.time() - t0:.2f} s"
            if a.order == "start-first":
                say(f"step {i}: {old.name} {how}")
                took = wait_settled([], f"step {i}, {old.name} out")
            else:
                new = Member(f"n{i}", "consumer", workdir, a, broker.bootstrap)
                members.append(new)
                say(f"step {i}: {old.name} {how}; {new.name} (group.protocol=consumer) started")
                took = wait_settled([new], f"step {i}")
            steps.append(None if took is None else round(took - t0, 2))
            time.sleep(a.pause)
        if a.kill_new:
            old = members[3]
            how = kill_mid_batch(old)
            t0 = time.time()
            new = Member("n4", "consumer", workdir, a, broker.bootstrap)
            members.append(new)
            say(f"step 4: {old.name} {how}; n4 started")
            took = wait_settled([new], "step 4")
            steps.append(None if took is None else round(took - t0, 2))

        # to the end: the producer done, the committed offsets at the high watermarks
        while producer.alive() and time.monotonic() < deadline:
            time.sleep(0.5)
        if producer.alive():
            failures.append("the producer did not finish in time")
            producer.kill9()
        with open(prod_status) as f:
            produced = json.load(f)
        say(f"producer done: sent {produced['sent']}, acked {produced['acked']}, failed {len(produced['failed'])}")
        while True:
            committed, highs = end_offsets_done(broker.bootstrap)
            if all(committed.get(p, -1) >= highs[p] for p in highs):
                say(f"group committed to the end: {sum(highs.values())} records")
                break
            if time.monotonic() > deadline:
                failures.append(f"committed {committed} never reached {highs}")
                break
            time.sleep(1)
        for m in members:
            if not m.gone and not m.killed:
                m.stopping = True
                m.child.stop(30)
        for m in members:
            m.read()
        v = analyse(members, produced)
    finally:
        for m in members:
            if m.child.alive():
                m.child.kill9()
        if producer and producer.alive():
            producer.kill9()
        broker.stop()

    if v["lost"]:
        failures.append(f"lost {v['lost']}: {v['lost_examples']}")
    if v["dup_after_commit"]:
        failures.append(f"{v['dup_after_commit']} re-reads after their commit was acknowledged: {v['after_examples']}")
    if None in steps or None in joins:
        failures.append("a step never settled")
    v["broker_log_errors"] = broker_log_errors(broker, workdir)
    v.update(broker=broker.name, assignor=a.assignor, order=a.order, kill=a.kill, kill_new=a.kill_new, steps_s=steps, joins_s=joins,
             failures=failures, workdir=workdir, seconds=round(time.time() - t_start, 1))
    for line in v["after_examples"] + v["commits_back"] + v["broker_log_errors"]:
        print("  " + line)
    print(f"VERDICT broker={broker.name} assignor={a.assignor} order={a.order} kill={a.kill or '-'}{'+new' if a.kill_new else ''} "
          f"produced={v['produced']} distinct={v['distinct']} lost={v['lost']} reads={v['reads']} "
          f"duplicates={v['duplicates']} (uncommitted-at-handover {v['dup_uncommitted']}, of them from batches a kill "
          f"held {v['dup_held_at_kill']} of {v['held_batch_records']}; after-commit {v['dup_after_commit']}) commits={v['commits']} failed-commits={v['commit_failures']} "
          f"commits-back={v['commits_back_count']} steps_s={steps}{' joins_s=%s' % joins if joins else ''} "
          f"{'PASS' if not failures else 'FAIL: ' + '; '.join(failures)}", flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(v, f, indent=1)
    if not failures and not a.keep:
        shutil.rmtree(workdir, ignore_errors=True)
    else:
        print(f"work directory kept: {workdir}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
