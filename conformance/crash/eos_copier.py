#!/usr/bin/env python3
"""Exactly-once copy with librdkafka while doze-kafka is killed -9 and restarted.

    python3 conformance/crash/eos_copier.py [--records 10000] [--kills 5] [--bootstrap H:P]

A copier (a child process: confluent-kafka) reads topic `eos-in` in consumer
group `eos-copier` with isolation.level=read_committed, and for every input
record writes one output record to `eos-out` inside a transaction that also
carries the consumer offsets (send_offsets_to_transaction). About one
transaction in eight is aborted on purpose, and the copier rewinds to its
committed offsets. Meanwhile the broker is killed with SIGKILL and started
again --kills times at random moments (unless --bootstrap points at a broker
this script does not control). Then the output is verified: read_committed
shows every input exactly once; read_uncommitted shows the aborted copies too.
Runs itself in conformance/needs.py's venv.
"""
import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))   # conformance/
import needs  # noqa: E402
from dozeproc import DozeProcess  # noqa: E402
from kill9 import read_to_end  # noqa: E402

IN, OUT, GROUP, TXN_ID = "eos-in", "eos-out", "eos-copier", "eos-copier-1"


# --- the copier (run as a child process) -------------------------------------

def copier(bootstrap, total, status_path):
    from confluent_kafka import Consumer, Producer, KafkaException, TopicPartition
    rnd = random.Random()
    # librdkafka 2.16's re-bootstrap (KIP-899), which starts when every known
    # broker is down -- as when the only broker restarts -- can leave
    # send_offsets_to_transaction() waiting forever on a decommissioned broker
    # handle (seen here: "Handle is terminating" with refcounts held). A one-broker
    # cluster has nothing to re-bootstrap to, so it is turned off.
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP,
                         "metadata.recovery.strategy": "none",
                         "isolation.level": "read_committed", "enable.auto.commit": False,
                         "auto.offset.reset": "earliest", "session.timeout.ms": 10000})
    consumer.subscribe([IN])

    def new_producer():
        while True:
            conf = {"bootstrap.servers": bootstrap, "transactional.id": TXN_ID,
                    "metadata.recovery.strategy": "none",
                    "transaction.timeout.ms": 20000, "message.timeout.ms": 20000}
            if os.environ.get("COPIER_RDKAFKA_DEBUG"):          # e.g. "eos,protocol,broker"
                conf["debug"] = os.environ["COPIER_RDKAFKA_DEBUG"]
            p = Producer(conf)
            try:
                p.init_transactions(30)
                return p
            except KafkaException as e:
                print("copier: init_transactions:", e, flush=True)
                time.sleep(0.5)

    producer = new_producer()
    commits = aborts = 0
    deadline = time.time() + 600

    def rewind():
        assignment = consumer.assignment()
        if not assignment:
            return
        for tp in consumer.committed(assignment, timeout=30):
            consumer.seek(TopicPartition(tp.topic, tp.partition, tp.offset if tp.offset >= 0 else 0))

    while time.time() < deadline:
        msgs = consumer.consume(num_messages=100, timeout=1.0)
        msgs = [m for m in msgs if not m.error()]
        if not msgs:
            done = consumer.assignment() and sum(
                tp.offset for tp in consumer.committed(consumer.assignment(), timeout=30)
                if tp.offset > 0) >= total
            if done:
                break
            continue
        try:
            producer.begin_transaction()
            for m in msgs:
                producer.produce(OUT, key=m.key(), value=m.value(),
                                 headers=[("src", f"{m.partition()}:{m.offset()}".encode())])
            producer.send_offsets_to_transaction(consumer.position(consumer.assignment()),
                                                 consumer.consumer_group_metadata(), 30)
            if rnd.random() < 0.125:
                producer.flush(30)
                producer.abort_transaction(30)
                aborts += 1
                rewind()
            else:
                producer.commit_transaction(30)
                commits += 1
        except KafkaException as e:
            err = e.args[0]
            print(f"copier: {err}", flush=True)
            if err.txn_requires_abort():
                try:
                    producer.abort_transaction(30)
                except KafkaException as e2:
                    print("copier: abort failed:", e2, flush=True)
                    producer = new_producer()
            elif err.retriable():
                try:                         # e.g. commit timed out: retrying commit is allowed
                    producer.commit_transaction(30)
                    commits += 1
                    continue
                except KafkaException as e2:
                    print("copier: retried commit failed:", e2, flush=True)
                    producer = new_producer()
            else:
                producer = new_producer()
            rewind()
        with open(status_path, "w") as f:
            json.dump({"commits": commits, "aborts": aborts}, f)
    consumer.close()
    with open(status_path, "w") as f:
        json.dump({"commits": commits, "aborts": aborts, "done": True}, f)


# --- verification ----------------------------------------------------------------

def read_all(bootstrap, topic, isolation):
    """The values of every record in the topic, read with isolation."""
    return [m.value() for m in read_to_end(bootstrap, topic, {"group.id": "eos-verify-" + isolation,
                                                              "isolation.level": isolation}, 120)]


def main():
    needs.venv()
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=10000)
    ap.add_argument("--kills", type=int, default=5)
    ap.add_argument("--bootstrap", help="an external broker (no kills)")
    ap.add_argument("--copier", nargs=3, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.copier:
        copier(args.copier[0], int(args.copier[1]), args.copier[2])
        return
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic
    tmp = tempfile.mkdtemp(prefix="doze-eos-")
    broker = None
    if args.bootstrap:
        bootstrap = args.bootstrap
    else:
        broker = DozeProcess(tmp, "--override", "group.initial.rebalance.delay.ms=0")
        broker.start()
        bootstrap = f"127.0.0.1:{broker.port}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(IN, 3, 1), NewTopic(OUT, 3, 1)]).values():
        f.result()
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True})
    for i in range(args.records):
        p.produce(IN, key=b"k%d" % i, value=b"v%d" % i)
    p.flush(60)
    status = os.path.join(tmp, "status.json")
    t0 = time.time()
    child = subprocess.Popen([sys.executable, __file__, "--copier", bootstrap, str(args.records), status],
                             stdout=open(os.path.join(tmp, "copier.log"), "w"), stderr=subprocess.STDOUT)
    kills = 0
    while child.poll() is None and time.time() - t0 < 900:
        time.sleep(random.uniform(0.5, 3.0))
        if broker and kills < args.kills and child.poll() is None:
            broker.kill9()
            kills += 1
            print(f"kill -9 #{kills} at {time.time() - t0:.1f}s", flush=True)
            time.sleep(random.uniform(0.1, 1.0))
            broker.start()
    if child.poll() is None:
        child.kill()
        sys.exit("copier did not finish")
    st = json.load(open(status))
    committed = read_all(bootstrap, OUT, "read_committed")
    everything = read_all(bootstrap, OUT, "read_uncommitted")
    want = {b"v%d" % i for i in range(args.records)}
    counts = {}
    for v in committed:
        counts[v] = counts.get(v, 0) + 1
    missing = want - set(counts)
    dupes = [v for v, n in counts.items() if n > 1]
    print(f"copier: {st.get('commits')} commits, {st.get('aborts')} aborts (on purpose), "
          f"{kills} broker kills, {time.time() - t0:.1f}s")
    print(f"read_committed: {len(committed)} records, missing {len(missing)}, duplicated {len(dupes)}")
    print(f"read_uncommitted: {len(everything)} records ({len(everything) - len(committed)} "
          f"from aborted transactions)")
    ok = not missing and not dupes and len(committed) == args.records and len(everything) > len(committed)
    print("RESULT:", "ok" if ok else "FAIL")
    if broker:
        broker.stop()
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
