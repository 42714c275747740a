#!/usr/bin/env python3
"""Kill -9 doze-kafka right after acknowledgements; restart; check nothing acknowledged is lost.

    python3 conformance/crash/kill9.py [--rounds 5] [--records 20000]

Each round: a librdkafka producer (acks=all, idempotence off so every send is
one attempt) writes keyed records to a 3-partition topic while the broker is
killed with SIGKILL at a random moment. Every record whose delivery report
said "acknowledged" (with its partition and offset) must be found at exactly
that offset after a restart, with the same key and value. After the last
round a torn batch (a partial copy of the last batch) is appended to a
segment file while the broker is down; the restart must cut it off and log
it, and new records must continue at fresh offsets, never reusing one.
Runs itself in conformance/needs.py's venv.
"""
import argparse
import glob
import os
import random
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))   # conformance/
import needs  # noqa: E402
from dozeproc import DozeProcess  # noqa: E402


def read_to_end(bootstrap, topic, conf, limit_s, partitions=3):
    """The records of topic's partitions 0..partitions-1 from offset 0 until each reports its
    end (or limit_s passes), read by a confluent-kafka Consumer with conf (group.id, ...) added
    -> [Message]. eos_copier.py reads its output with it too."""
    from confluent_kafka import Consumer, TopicPartition
    c = Consumer(dict({"bootstrap.servers": bootstrap, "enable.auto.commit": False, "enable.partition.eof": True},
                      **conf))
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    out, eof, deadline = [], set(), time.time() + limit_s
    while len(eof) < partitions and time.time() < deadline:
        m = c.poll(1)
        if m is None:
            continue
        if m.error():
            if m.error().code() == -191:           # _PARTITION_EOF
                eof.add(m.partition())
            continue
        out.append(m)
    c.close()
    return out


def read_all(bootstrap, topic):
    """{(partition, offset): (key, value)} of every record in the topic."""
    return {(m.partition(), m.offset()): (m.key(), m.value())
            for m in read_to_end(bootstrap, topic, {"group.id": "verify", "auto.offset.reset": "earliest"}, 60)}


def main():
    needs.venv()
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--records", type=int, default=20000)
    args = ap.parse_args()
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic
    tmp = tempfile.mkdtemp(prefix="doze-kill9-")
    broker = DozeProcess(tmp)
    data = broker.data
    bootstrap = f"127.0.0.1:{broker.port}"
    broker.start()
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic("k9", 3, 1)]).values():
        f.result()
    acked = {}
    seq = 0
    for rnd in range(args.rounds):
        p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 2,
                      "enable.idempotence": False, "retries": 0, "message.timeout.ms": 5000})

        def report(err, msg):
            if err is None:
                acked[(msg.partition(), msg.offset())] = (msg.key(), msg.value())
        kill_after = random.uniform(0.2, 1.5)
        killer = threading.Timer(kill_after, broker.kill9)
        killer.start()
        t0 = time.time()
        while time.time() - t0 < kill_after + 0.5:
            seq += 1
            try:
                p.produce("k9", key=b"key-%d" % seq, value=b"value-%d-" % seq + os.urandom(100).hex().encode(),
                          on_delivery=report)
            except BufferError:
                pass
            p.poll(0)
        killer.join()
        p.flush(10)
        before = len(acked)
        broker.start()
        found = read_all(bootstrap, "k9")
        lost = [k for k, v in acked.items() if found.get(k) != v]
        print(f"round {rnd + 1}: killed -9 after {kill_after:.2f}s; acknowledged so far {before}; "
              f"found {len(found)} records; acknowledged but missing or different: {len(lost)}")
        if lost:
            sys.exit(f"LOST: {lost[:5]}")
    # A torn tail: half of a copy of the last batch appended while the broker is down.
    broker.kill9()
    seg = sorted(glob.glob(os.path.join(data, "k9-0", "*.log")))[-1]
    with open(seg, "rb") as f:
        tail = f.read()[-200:]
    with open(seg, "ab") as f:
        f.write(tail[:137])
    broker.start()
    time.sleep(0.2)
    cut = broker.log_lines("torn tail")
    print("torn tail log line:", cut[-1] if cut else "NONE")
    old_max = {p: max([o for (pp, o) in acked if pp == p], default=-1) for p in range(3)}
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    new = {}
    for i in range(300):
        p.produce("k9", key=b"after-%d" % i, value=b"x",
                  on_delivery=lambda err, msg: new.__setitem__((msg.partition(), msg.offset()), err))
    p.flush(10)
    reused = [k for k in new if k[1] <= old_max[k[0]]]
    found = read_all(bootstrap, "k9")
    lost = [k for k, v in acked.items() if found.get(k) != v]
    print(f"after restart: {len(new)} new records at offsets above the old maxima {old_max}; "
          f"reused offsets: {len(reused)}; acknowledged records missing: {len(lost)}")
    broker.stop()
    ok = cut and not reused and not lost and all(e is None for e in new.values())
    print("RESULT:", "ok" if ok else "FAIL")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
