#!/usr/bin/env python3
"""Members of consumer groups held open for Kafka's group tools (tools_compare.py).

Runs under the venv with confluent-kafka (conformance/needs.py's, or any with
confluent-kafka 2.10+ for group.protocol=consumer):

    PY=~/.cache/doze-kafka/eos/venv/bin/python
    $PY conformance/kafka/group_members.py --bootstrap 127.0.0.1:9092 --topic events --partitions 4 \
        --group G=consumer:member-1,member-2 --group C=classic:classic-1

Produces PARTITIONS * (p+1) records to TOPIC (partition p gets p+1, keys k0..),
then starts the members of each --group NAME=PROTOCOL:CLIENT_ID,... one after
the other (each waits for the group's members before it to hold a share of the
partitions), consumes everything, commits it synchronously, produces one
record more to every partition (so each partition's lag is 1), and, once
every member holds a stable share, prints one line of JSON:

    {"ready": true, "members": {"member-1": "<member id>", ...},
     "assignment": {"member-1": [[topic, partition], ...], ...}}

Then keeps polling (not committing) until its stdin closes, and closes the
members (which leave their groups). Bounded: --timeout seconds for getting
ready (exit 2 with {"ready": false, ...} past it), and it exits when stdin
closes or after --hold seconds.
"""
import argparse
import json
import select
import sys
import time

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--topic", default="events")
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--group", action="append", required=True, metavar="NAME=PROTOCOL:CLIENT,...")
    ap.add_argument("--timeout", type=float, default=60.0)
    ap.add_argument("--hold", type=float, default=600.0)
    a = ap.parse_args(argv)

    admin = AdminClient({"bootstrap.servers": a.bootstrap})
    fut = admin.create_topics([NewTopic(a.topic, a.partitions, 1)], operation_timeout=20)[a.topic]
    fut.result(30)
    prod = Producer({"bootstrap.servers": a.bootstrap, "linger.ms": 0})
    total = 0
    for p in range(a.partitions):
        for i in range(p + 1):
            prod.produce(a.topic, key=f"k{p}-{i}".encode(), value=f"v{p}-{i}".encode(), partition=p)
            total += 1
    if prod.flush(30) != 0:
        sys.exit("produce did not finish")

    deadline = time.monotonic() + a.timeout
    groups = []                                    # [(group, [(client_id, Consumer)])]
    consumed = {}                                  # (group, partition) -> next offset read

    def poll(name, c):
        m = c.poll(0.05)
        if m is not None and not m.error():
            key = (name, m.partition())
            consumed[key] = max(consumed.get(key, 0), m.offset() + 1)

    for spec in a.group:
        name, _, rest = spec.partition("=")
        protocol, _, clients = rest.partition(":")
        members = []
        for client_id in clients.split(","):
            conf = {"bootstrap.servers": a.bootstrap, "group.id": name, "client.id": client_id,
                    "group.protocol": protocol, "auto.offset.reset": "earliest", "enable.auto.commit": False}
            c = Consumer(conf)
            c.subscribe([a.topic])
            members.append((client_id, c))
            # wait until every member so far holds a share (the newcomer one too)
            while not all(c2.assignment() for _, c2 in members) and time.monotonic() < deadline:
                for _, c2 in members:
                    poll(name, c2)
                for other, done in groups:
                    for _, c2 in done:
                        poll(other, c2)
        groups.append((name, members))

    def poll_all():
        for name, members in groups:
            for _, c in members:
                poll(name, c)

    def settled():
        for _, members in groups:
            held = [(t.topic, t.partition) for _, c in members for t in c.assignment()]
            if len(held) != a.partitions or len(set(held)) != a.partitions or \
                    not all(c.assignment() for _, c in members):
                return False
        return True

    def read_all():
        return all(sum(consumed.get((name, p), 0) for p in range(a.partitions)) >= total for name, _ in groups)

    while time.monotonic() < deadline and not (settled() and read_all()):
        poll_all()
    ok = settled()
    for _, members in groups:
        for _, c in members:
            if c.assignment():
                c.commit(asynchronous=False)
    for p in range(a.partitions):
        prod.produce(a.topic, key=f"k{p}-late".encode(), value=b"late", partition=p)
    prod.flush(30)
    t_end = time.monotonic() + 3                    # a few heartbeats: every member reconciled
    while time.monotonic() < t_end:
        poll_all()
    ok = ok and settled()
    report = {"ready": ok,
              "members": {cid: c.memberid() for _, members in groups for cid, c in members},
              "assignment": {cid: sorted([t.topic, t.partition] for t in c.assignment())
                             for _, members in groups for cid, c in members}}
    print(json.dumps(report), flush=True)
    if not ok:
        return 2
    hold_end = time.monotonic() + a.hold
    while time.monotonic() < hold_end:
        r, _, _ = select.select([sys.stdin], [], [], 0)
        if r and not sys.stdin.readline():
            break
        poll_all()
    for _, members in groups:
        for _, c in members:
            c.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
