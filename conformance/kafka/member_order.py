#!/usr/bin/env python3
"""The order a consumer group's members are listed in, on Kafka 4.3.1 and on doze.

    python3 conformance/kafka/member_order.py [--groups 16]

For each of --groups consumer-protocol groups (group.protocol=consumer, on a
topic of 4 partitions): member m1 joins, then m2, and once both hold partitions
ConsumerGroupDescribe (confluent-kafka's describe_consumer_groups) lists them.
Kafka lists them in its TimelineHashMap's order, which tools_compare.timeline_order
computes from the (random) member ids: by slot, members sharing a slot newest
first. Prints per group the order each broker gave, the order the rule gives
for its ids, and the ids' slots (capacity 4); exit 1 when a broker's order is
not the rule's. Needs confluent-kafka in $DOZE_KAFKA_PYTHON or
conformance/needs.py's venv (the broker side runs there: --helper).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))                      # conformance/


def helper(bootstrap, groups):
    """(In the venv.) The groups, one after the other -> JSON lines of ids and order."""
    from confluent_kafka import Consumer
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic("member-order", 4, 1)])["member-order"].result(30)
    for g in range(groups):
        name = f"member-order-{g}"
        members = []
        for cid in ("m1", "m2"):
            c = Consumer({"bootstrap.servers": bootstrap, "group.id": name, "client.id": cid,
                          "group.protocol": "consumer"})
            c.subscribe(["member-order"])
            members.append(c)
            end = time.monotonic() + 30
            while time.monotonic() < end and not all(x.assignment() for x in members):
                for x in members:
                    x.poll(0.05)
        end = time.monotonic() + 30
        while time.monotonic() < end and sum(len(x.assignment()) for x in members) != 4:
            for x in members:
                x.poll(0.05)
        d = admin.describe_consumer_groups([name])[name].result(30)
        ids = {x.memberid(): cid for x, cid in zip(members, ("m1", "m2"))}
        print(json.dumps({"group": name, "ids": {cid: mid for mid, cid in ids.items()},
                          "order": [ids.get(m.member_id, m.member_id) for m in d.members]}), flush=True)
        for x in members:
            x.close()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--groups", type=int, default=16)
    ap.add_argument("--helper", metavar="BOOTSTRAP", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.helper:
        return helper(a.helper, a.groups)
    from dozeproc import DozeProcess
    from realkafka import RealKafka
    from tools_compare import timeline_order, venv_python

    def run(bootstrap):
        p = subprocess.run([venv_python(), os.path.abspath(__file__), "--helper", bootstrap, "--groups",
                            str(a.groups)], capture_output=True, text=True, timeout=60 + 40 * a.groups)
        return [json.loads(line) for line in p.stdout.splitlines() if line.startswith("{")]

    settings = {"group.initial.rebalance.delay.ms": "0"}
    with RealKafka(extra_props=settings) as kafka:
        results = {"kafka": run(kafka.bootstrap)}
    with tempfile.TemporaryDirectory(prefix="member-order-") as tmp:
        doze = DozeProcess(tmp, *[x for k, v in settings.items() for x in ("--override", f"{k}={v}")])
        doze.start()
        try:
            results["doze"] = run(doze.bootstrap)
        finally:
            doze.stop()

    def slot(k):                                                    # capacity 4: the top 2 bits
        h = 0
        for ch in k:
            h = (31 * h + ord(ch)) & 0xFFFFFFFF
        h = h - (1 << 32) if h >= 1 << 31 else h
        return ((h * -7046029254386353131) & (2 ** 64 - 1)) >> 62

    bad = 0
    for who, rows in results.items():
        ok = 0
        for r in rows:
            ids = r["ids"]
            want = [{v: k for k, v in ids.items()}[m] for m in timeline_order([ids["m1"], ids["m2"]])]
            ok += r["order"] == want
            print(f"{who:5} {','.join(r['order']):6} rule {','.join(want):6} slots m1 {slot(ids['m1'])} "
                  f"m2 {slot(ids['m2'])}{'' if r['order'] == want else '  NOT as the rule'}")
        print(f"{who}: {ok} of {len(rows)} groups in the rule's order")
        bad += ok != len(rows) or not rows
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
