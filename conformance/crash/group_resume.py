#!/usr/bin/env python3
"""Consumer groups resume from their committed offsets after doze-kafka is killed -9.

    python3 conformance/crash/group_resume.py [--records 3000]

For confluent-kafka (librdkafka) and kafka-python in turn: a consumer in a
group subscribes to a 3-partition topic, reads about half of it and commits
synchronously; the broker is killed with SIGKILL and started again; a new
consumer in the same group must start exactly at the committed offsets and
read the rest: every record exactly once over both runs.
Runs itself in conformance/needs.py's venv.
"""
import argparse
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))   # conformance/
import needs  # noqa: E402
from dozeproc import DozeProcess  # noqa: E402


def confluent_run(bootstrap, topic, group, limit):
    """Consume up to `limit` records, committing each poll's batch synchronously."""
    from confluent_kafka import Consumer
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                  "auto.offset.reset": "earliest", "session.timeout.ms": 10000})
    c.subscribe([topic])
    seen, first, deadline = [], {}, time.time() + 60
    while len(seen) < limit and time.time() < deadline:
        msgs = [m for m in c.consume(num_messages=min(100, limit - len(seen)), timeout=1) if not m.error()]
        for m in msgs:
            first.setdefault(m.partition(), m.offset())
            seen.append((m.partition(), m.offset(), m.value()))
        if msgs:
            c.commit(asynchronous=False)
    c.close()
    return seen, first


def kafka_python_run(bootstrap, topic, group, limit):
    from kafka import KafkaConsumer
    c = KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False,
                      auto_offset_reset="earliest", session_timeout_ms=10000)
    seen, first, deadline = [], {}, time.time() + 60
    while len(seen) < limit and time.time() < deadline:
        batch = c.poll(timeout_ms=1000, max_records=min(100, limit - len(seen)))
        for tp, msgs in batch.items():
            for m in msgs:
                first.setdefault(m.partition, m.offset)
                seen.append((m.partition, m.offset, m.value))
        if batch:
            c.commit()
    c.close()
    return seen, first


def main():
    needs.venv()
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=3000)
    args = ap.parse_args()
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic
    tmp = tempfile.mkdtemp(prefix="doze-groups-")
    broker = DozeProcess(tmp, "--override", "group.initial.rebalance.delay.ms=0")
    broker.start()
    bootstrap = f"127.0.0.1:{broker.port}"
    ok = True
    for name, run in (("confluent-kafka", confluent_run), ("kafka-python", kafka_python_run)):
        topic, group = f"resume-{name}", f"group-{name}"
        admin = AdminClient({"bootstrap.servers": bootstrap})
        for f in admin.create_topics([NewTopic(topic, 3, 1)]).values():
            f.result()
        p = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
        for i in range(args.records):
            p.produce(topic, key=b"%d" % i, value=b"v%d" % i)
        p.flush(30)
        del admin, p
        before, _ = run(bootstrap, topic, group, args.records // 2)
        committed = {}
        for part, off, _ in before:
            committed[part] = max(committed.get(part, -1), off + 1)
        broker.kill9()
        broker.start()
        after, first = run(bootstrap, topic, group, args.records - len(before))
        values = [v for _, _, v in before + after]
        resumed_at = all(first.get(pp, committed.get(pp, 0)) == committed.get(pp, 0) for pp in first)
        exactly_once = sorted(values) == sorted(b"v%d" % i for i in range(args.records))
        print(f"{name}: read {len(before)} and committed {dict(sorted(committed.items()))}; "
              f"kill -9, restart; resumed at {dict(sorted(first.items()))}; read {len(after)} more; "
              f"every record exactly once: {exactly_once}")
        ok = ok and resumed_at and exactly_once
    broker.proc.terminate()
    broker.proc.wait(10)
    print("RESULT:", "ok" if ok else "FAIL")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
