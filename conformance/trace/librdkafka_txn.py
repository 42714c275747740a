#!/usr/bin/env python3
"""The trace of a real librdkafka transaction: what README's "Watch the protocol" shows.

    python3 conformance/trace/librdkafka_txn.py

Starts doze_kafka.py with --trace txn, then with confluent-kafka (librdkafka):
init_transactions, one transaction over orders-0 and orders-1 with a
consumer group's offsets (send_offsets_to_transaction), commit; then one
record in a transaction that is aborted. Prints the trace as doze printed it
(times cut off) and checks that the steps came in order.
"""
import os
import re
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))   # conformance/
from lib import DOZE, free_port, wait_port  # noqa: E402
import needs  # noqa: E402

STEPS = [r"^→ InitProducerId ", r"^• txn tx-demo: Empty → Empty: InitProducerId", r"^→ AddPartitionsToTxn .*partitions=\[0, 1\]",
         r"^• txn tx-demo: Empty → Ongoing", r"^→ Produce v\d+ .*transactional_id=tx-demo", r"HW 0 → 1, LSO 0 \(held back",
         r"^→ AddOffsetsToTxn .*group_id=demo-group", r"^→ TxnOffsetCommit .*committed_offset=42",
         r"^→ EndTxn .*committed=True", r"Ongoing → PrepareCommit", r"COMMIT marker at orders-0 offset 1",
         r"LSO 0 → 2", r"PrepareCommit → CompleteCommit", r"^← EndTxn .*error_code=NONE",
         r"^→ EndTxn .*committed=False", r"Ongoing → PrepareAbort", r"ABORT marker at orders-0 offset 3",
         r"PrepareAbort → CompleteAbort"]


def transaction(bootstrap):
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic("orders", 2, 1), NewTopic("input", 1, 1)]).values():
        f.result(10)
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": "tx-demo", "client.id": "demo-producer",
                  "linger.ms": 0})
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "demo-group", "client.id": "demo-consumer"})
    p.init_transactions(10)
    p.begin_transaction()
    p.produce("orders", b"first", key=b"a", partition=0)
    p.produce("orders", b"second", key=b"b", partition=1)
    p.flush(10)
    p.send_offsets_to_transaction([TopicPartition("input", 0, 42)], c.consumer_group_metadata(), 10)
    p.commit_transaction(10)
    p.begin_transaction()
    p.produce("orders", b"dropped", partition=0)
    p.flush(10)
    p.abort_transaction(10)
    c.close()


def main():
    needs.venv()
    with tempfile.TemporaryDirectory() as tmp:
        port = free_port()
        with open(os.path.join(tmp, "trace.txt"), "w") as out:
            proc = subprocess.Popen([sys.executable, DOZE, "--port", str(port), "--data-dir", os.path.join(tmp, "data"),
                                     "--override", "doze.console.listener=", "--trace", "txn"],
                                    stdout=out, stderr=subprocess.DEVNULL)
        try:
            wait_port(port)
            transaction(f"127.0.0.1:{port}")
            time.sleep(0.5)
        finally:
            proc.terminate()
            proc.wait(10)
        lines = [line.rstrip("\n")[13:] for line in open(os.path.join(tmp, "trace.txt"))
                 if re.match(r"\d\d:\d\d:\d\d\.\d{3} ", line)]
    print("\n".join(lines))
    i = 0
    for step in STEPS:
        while i < len(lines) and not re.search(step, lines[i]):
            i += 1
        if i == len(lines):
            print(f"RESULT fail: no {step!r} in order")
            return 1
        i += 1
    print(f"RESULT ok: {len(lines)} lines, the {len(STEPS)} steps in order")
    return 0


if __name__ == "__main__":
    sys.exit(main())
