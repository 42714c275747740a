#!/usr/bin/env python3
"""How long a group of 10 takes to be stable again after an 11th member joins (and leaves):
classic protocol against KIP-848's, doze against Apache Kafka 4.3.1.

    python3 conformance/bench/group_join.py [--rounds 5] [--samples 2] [--members 10]
        [--partitions 24] [--modes classic-range,classic-coop,consumer] [--only doze,kafka]
        [--quiet 2] [--set KEY=VALUE ...] [--json FILE]

Both brokers come from conformance/brokers.py: group.initial.rebalance.delay.ms is 0
on both (realkafka.py's setting, and brokers.py's COMMON for doze, whose default is
Kafka's 3000); it only delays the first rebalance of an empty group, so it touches
the group's forming, never a join to a stable group. Every other group setting is at
its default on both: group.consumer.heartbeat.interval.ms 5000 (librdkafka refuses
heartbeat.interval.ms with group.protocol=consumer: the broker decides),
group.consumer.assignment.interval.ms 1000, the uniform assignor. --set gives both
brokers more settings (e.g. --set group.consumer.heartbeat.interval.ms=1000
--set group.consumer.min.heartbeat.interval.ms=1000).

Modes (librdkafka 2.16, confluent-kafka consumers, one thread each, polling 50 ms):
  classic-range   group.protocol=classic, partition.assignment.strategy=range (eager),
                  heartbeat.interval.ms 3000, session.timeout.ms 45000 (librdkafka's defaults);
  classic-coop    the same with cooperative-sticky (incremental, two rebalances);
  consumer        group.protocol=consumer (KIP-848), the broker's uniform assignor.

A round starts one broker (the order of the brokers alternates round by round), and
for each mode: a topic of --partitions partitions (empty: only the group protocol
is measured) and a group of --members members, formed and stable; then --samples
times: an 11th consumer is made, then, at t0, it subscribes; once stable (t1) it is
closed (t2: close() called), and the group of --members is stable again (t3).
Figures: join = t1 - t0, leave = t3 - t2, and (one a round) form: from the
--members' subscribe() calls, made together, to their group's first stable state
(a fresh group: group.initial.rebalance.delay.ms matters here). Before t0 and before t2 the script
waits a random time (seeded by --seed, the round and the mode: the same waits on
both brokers) of up to one heartbeat interval (classic:
the client's 3 s; consumer: the broker's group.consumer.heartbeat.interval.ms),
after the --quiet window: the members all heartbeat in step once a rebalance is
over, so a fixed wait would always land at the same phase of their heartbeats
and give the same figure every time.

Stable, precisely: the members' assignments as the application sees them (the
partitions given to on_assign and not yet taken back by on_revoke or on_lost, one
set per member, updated in the callbacks) are such that every partition of the
topic is held by exactly one member, and every member holds floor(P/N) or
ceil(P/N) partitions (24 over 11: 2 or 3; over 10: 2 or 3), and no callback has
changed anything for --quiet seconds since. The time taken is that of the last
change before the quiet window, not the window's end. (Every intermediate state of
a rebalance fails the balance or the coverage test: the newcomer holds nothing
or too little until the last move.)

Prints, per figure, each broker's median with its range (min-max) over
rounds x samples values, and the ratio of medians doze/Kafka.
"""
import argparse
import json
import math
import os
import random
import statistics
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))   # conformance/
import needs  # noqa: E402

MODES = {
    "classic-range": {"group.protocol": "classic", "partition.assignment.strategy": "range",
                      "heartbeat.interval.ms": 3000, "session.timeout.ms": 45000},
    "classic-coop": {"group.protocol": "classic", "partition.assignment.strategy": "cooperative-sticky",
                     "heartbeat.interval.ms": 3000, "session.timeout.ms": 45000},
    "consumer": {"group.protocol": "consumer"},
}


class Board:
    """Every member's assignment as its callbacks leave it, and the time of the last change."""

    def __init__(self):
        self.cond = threading.Condition()
        self.last_change = time.monotonic()
        self.errors = []

    def changed(self):
        with self.cond:
            self.last_change = time.monotonic()
            self.cond.notify_all()

    def stable_since(self, members, partitions):
        """The time of the last change if the members' assignments are balanced and cover
        every partition exactly once, else None."""
        held, sizes = [], []
        for m in members:
            ps = m.owned
            held += ps
            sizes.append(len(ps))
        lo, hi = partitions // len(members), math.ceil(partitions / len(members))
        if sorted(held) == list(range(partitions)) and all(lo <= s <= hi for s in sizes):
            return self.last_change
        return None

    def wait_stable(self, members, partitions, quiet, limit):
        """-> the monotonic time of the change that made the group stable (see the module doc)."""
        deadline = time.monotonic() + limit
        while True:
            with self.cond:
                self.cond.wait(0.05)
                since = self.stable_since(members, partitions)
            now = time.monotonic()
            if since is not None and now - since >= quiet:
                return since
            if now > deadline:
                raise TimeoutError("not stable after %g s: %s" % (limit, " ".join(
                    "%s:%d" % (m.name, len(m.owned)) for m in members)))


class Member(threading.Thread):
    """One consumer, polled by its own thread from subscribe() to close()."""

    def __init__(self, name, bootstrap, group, topic, mode_conf, board):
        super().__init__(daemon=True, name=name)
        from confluent_kafka import Consumer
        self.topic, self.board = topic, board
        self.owned = []                                  # replaced, never mutated: read without the lock
        self.c = Consumer(dict(mode_conf, **{"bootstrap.servers": bootstrap, "group.id": group, "client.id": name,
                                             "enable.auto.commit": False, "auto.offset.reset": "earliest"}))
        self.go, self.done = threading.Event(), threading.Event()
        self.closed = threading.Event()
        self.start()

    def _set(self, parts, add):
        ps = {tp.partition for tp in parts}
        with self.board.cond:
            self.owned = sorted(set(self.owned) | ps) if add else sorted(set(self.owned) - ps)
        self.board.changed()

    def subscribe(self):
        self.c.subscribe([self.topic], on_assign=lambda _c, ps: self._set(ps, True),
                         on_revoke=lambda _c, ps: self._set(ps, False),
                         on_lost=lambda _c, ps: self._set(ps, False))
        self.go.set()

    def run(self):
        self.go.wait()
        while not self.done.is_set():
            m = self.c.poll(0.05)
            if m is not None and m.error():
                self.board.errors.append("%s: %s" % (self.name, m.error()))
        self.c.close()
        self.closed.set()

    def close(self, wait=30):
        self.done.set()
        self.go.set()
        self.closed.wait(wait)


def heartbeat_s(mode, a):
    """The members' heartbeat interval in this mode (s): the client's for classic,
    the broker's group.consumer.heartbeat.interval.ms for the consumer protocol."""
    if mode == "consumer":
        return float(dict(kv.split("=", 1) for kv in a.set).get("group.consumer.heartbeat.interval.ms", 5000)) / 1000
    return MODES[mode]["heartbeat.interval.ms"] / 1000


def run_mode(broker, mode, a, tag):
    """One group of --members on a fresh topic; --samples joins and leaves -> (form s, [join s], [leave s])."""
    from confluent_kafka.admin import AdminClient, NewTopic
    topic = group = "gj-%s-%s" % (mode, tag)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, a.partitions, 1)])[topic].result(60)
    board = Board()
    conf = MODES[mode]
    members = [Member("m%d" % i, broker.bootstrap, group, topic, conf, board) for i in range(a.members)]
    joins, leaves = [], []
    try:
        for m in members:
            m.subscribe()
        t = time.monotonic()
        formed = board.wait_stable(members, a.partitions, a.quiet, a.limit) - t
        print("    %s: group of %d formed in %.2f s" % (mode, a.members, formed), flush=True)
        period = heartbeat_s(mode, a)
        rng = random.Random("%d-%s-%s" % (a.seed, tag, mode))    # the same phases for both brokers
        for s in range(a.samples):
            new = Member("new%d" % s, broker.bootstrap, group, topic, conf, board)
            time.sleep(0.2 + rng.uniform(0, period))    # a random phase against the members' heartbeats
            t0 = time.monotonic()
            new.subscribe()
            t1 = board.wait_stable(members + [new], a.partitions, a.quiet, a.limit)
            time.sleep(rng.uniform(0, period))
            t2 = time.monotonic()
            new.close()
            t3 = board.wait_stable(members, a.partitions, a.quiet, a.limit)
            joins.append(t1 - t0)
            leaves.append(t3 - t2)
            print("    %s: join %.2f s, leave %.2f s" % (mode, t1 - t0, t3 - t2), flush=True)
    finally:
        for m in members:
            m.close()
    if board.errors:
        print("    client errors: %s" % board.errors[:5], flush=True)
    return formed, joins, leaves


def main():
    needs.venv()
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=5, help="broker starts each (their order alternates)")
    ap.add_argument("--samples", type=int, default=2, help="joins per mode per round")
    ap.add_argument("--members", type=int, default=10)
    ap.add_argument("--partitions", type=int, default=24)
    ap.add_argument("--modes", default="classic-range,classic-coop,consumer")
    ap.add_argument("--only", default="doze,kafka")
    ap.add_argument("--quiet", type=float, default=2.0, help="s without a change that make a state stable")
    ap.add_argument("--limit", type=float, default=120.0, help="s a group may take to be stable")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a setting for both brokers")
    ap.add_argument("--seed", type=int, default=1, help="of the random phases")
    ap.add_argument("--json", help="every sample, as JSON")
    a = ap.parse_args()
    from brokers import Doze, Kafka
    settings = dict(kv.split("=", 1) for kv in a.set)
    modes = a.modes.split(",")
    names = a.only.split(",")
    kinds = {"doze": Doze, "kafka": Kafka}
    results = {(b, m, f): [] for b in names for m in modes for f in ("join", "leave", "form")}
    t_all = time.time()
    print("load average at start: %s" % open("/proc/loadavg").read().split()[:3], flush=True)
    for r in range(a.rounds):
        order = names if r % 2 == 0 else names[::-1]
        for name in order:
            with tempfile.TemporaryDirectory(prefix="group-join-") as d:
                broker = kinds[name](d, settings)
                broker.start()
                try:
                    print("round %d, %s (%s), load %s" % (r + 1, name, broker.bootstrap,
                                                          open("/proc/loadavg").read().split()[0]), flush=True)
                    for mode in modes:
                        formed, joins, leaves = run_mode(broker, mode, a, "%d" % r)
                        results[(name, mode, "form")].append(formed)
                        results[(name, mode, "join")] += joins
                        results[(name, mode, "leave")] += leaves
                finally:
                    broker.stop()

    def cell(v):
        return "%.2f (%.2f-%.2f)" % (statistics.median(v), min(v), max(v)) if v else "-"

    print("\n%d rounds x %d samples, %d members + 1, %d partitions, quiet %g s, settings %s; %.0f s; "
          "load average at end: %s" % (a.rounds, a.samples, a.members, a.partitions, a.quiet, settings or "defaults",
                                       time.time() - t_all, open("/proc/loadavg").read().split()[:3]))
    head = "%-34s" % "figure (s, median (min-max))" + "".join("%22s" % n for n in names)
    if names == ["doze", "kafka"]:
        head += "%12s" % "doze/kafka"
    print(head)
    print("-" * len(head))
    for mode in modes:
        for f in ("join", "leave", "form"):
            line = "%-34s" % ("%s %s" % (mode, {"join": "11th joins", "leave": "11th leaves",
                                                "form": "%d form (1 a round)" % a.members}[f]))
            line += "".join("%22s" % cell(results[(n, mode, f)]) for n in names)
            if names == ["doze", "kafka"] and results[("doze", mode, f)] and results[("kafka", mode, f)]:
                line += "%11.2fx" % (statistics.median(results[("doze", mode, f)]) /
                                     statistics.median(results[("kafka", mode, f)]))
            print(line)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"args": vars(a), "samples": {"%s/%s/%s" % k: v for k, v in results.items()}}, f, indent=1)


if __name__ == "__main__":
    main()
