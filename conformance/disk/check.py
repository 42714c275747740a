#!/usr/bin/env python3
"""doze on a real, small file system that fills up, gets room again, and turns read-only.

    python3 conformance/disk/check.py        (as root: it mounts a tmpfs)

The tests inject these failures through doze's Files layer; this is the same
once for real, with librdkafka (confluent-kafka) as the client:

1. full: doze's data directory on a 24 MiB tmpfs, partly taken by a filler
   file; a producer (acks=all) sends 1 KiB records until the disk refuses
   them. doze answers KAFKA_STORAGE_ERROR (librdkafka retries until its
   message timeout), logs why, keeps serving, and every acknowledged record
   reads back at its offset.
2. room again: the filler goes; the same partition takes records again, at
   the offset after the last acknowledged one, with no restart; a transaction
   commits.
3. read-only: the file system is remounted read-only; a start on it stops
   with one clear line; remounted read-write, doze starts and every
   acknowledged record is there. (Linux refuses to remount a file system
   read-only while a process holds a file open for writing, so a read-only
   meta.db under a running broker is tested through the Files layer only.)

A real EIO is not made here: this machine has no device-mapper (dmsetup's
"error" target), and a loop device set read-only under ext4 made fsync
report success for writes that never reached it -- a disk that lies, which
no broker can detect. Prints RESULT ok or RESULT fail: why.
"""
import contextlib
import os
import re
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))   # conformance/
import needs  # noqa: E402
from dozeproc import DOZE, DozeProcess  # noqa: E402

SIZE_MB, FILLER_MB = 24, 6
VALUE = b"x" * 1024


class Failed(Exception):
    pass


def check(ok, what):
    print(("  ok   " if ok else "  FAIL ") + what, flush=True)
    if not ok:
        raise Failed(what)


def produce(bootstrap, topic, values, timeout_ms=4000, **conf):
    """-> {value: offset} of the records acknowledged, and the errors of the others."""
    from confluent_kafka import Producer
    acked, errors = {}, []

    def report(err, msg):
        if err is None:
            acked[msg.value()] = msg.offset()
        else:
            errors.append(err.name())
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5, "enable.idempotence": False,
                  "message.timeout.ms": timeout_ms, "retry.backoff.ms": 200, **conf})
    for v in values:
        p.produce(topic, v, partition=0, on_delivery=report)
        p.poll(0)
    p.flush(timeout_ms / 1000 + 10)
    return acked, errors


def read_all(bootstrap, topic, want):
    """{offset: value} of the partition, read until `want` records came (or 20 s)."""
    from confluent_kafka import Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{time.time()}",
                  "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    c.assign([TopicPartition(topic, 0, 0)])
    got, deadline = {}, time.time() + 20
    while len(got) < want and time.time() < deadline:
        for m in c.consume(1000, 0.5):
            if m.error() is None:
                got[m.offset()] = m.value()
    c.close()
    return got


def mount(where, *opts):
    subprocess.run(["mount", "-t", "tmpfs", "-o", ",".join((f"size={SIZE_MB}m",) + opts), "tmpfs", where],
                   check=True)


def remount(where, mode):
    subprocess.run(["mount", "-o", f"remount,{mode}", where], check=True)


def run(tmp, mnt):
    from confluent_kafka.admin import AdminClient, NewTopic
    broker = DozeProcess(tmp)
    broker.data = os.path.join(mnt, "data")
    filler = os.path.join(mnt, "filler")
    with open(filler, "wb") as f:
        f.write(b"\0" * (FILLER_MB << 20))
    broker.start()
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic("fill", 1, 1)])["fill"].result(10)

    print("1. the disk fills up")
    acked, errors, rounds = {}, [], 0
    while not errors and rounds < 100:
        batch = [b"%06d-" % (rounds * 2000 + i) + VALUE for i in range(2000)]
        got, errors = produce(broker.bootstrap, "fill", batch)
        acked.update(got)
        rounds += 1
    used = sum(len(v) for v in acked)
    print(f"     {len(acked)} records acknowledged ({used / 1e6:.1f} MB), then {len(errors)} refused "
          f"({sorted(set(errors))})")
    check(bool(errors) and len(acked) > 1000, "the producer was refused once the disk was full")
    check(broker.proc.poll() is None, "doze still runs")
    refused = broker.log_lines("a write was refused (No space left on device)")
    check(bool(refused), f"doze said why, once ({len(refused)} line: "
                         f"{refused[0].split('doze_kafka: ', 1)[-1][:100] if refused else ''}...)")
    check(not broker.log_lines("Traceback"), "no traceback in doze's log")
    got = read_all(broker.bootstrap, "fill", len(acked))
    check(all(got.get(o) == v for v, o in acked.items()), f"all {len(acked)} acknowledged records read back "
                                                          "at their offsets")

    print("2. room again")
    os.unlink(filler)
    more, errs = produce(broker.bootstrap, "fill", [b"after-%03d" % i for i in range(200)])
    check(len(more) == 200 and not errs, "the same partition takes 200 more records, no restart")
    check(min(more.values()) == max(acked.values()) + 1, "at the offset after the last acknowledged one "
                                                         f"({min(more.values())})")
    acked.update(more)
    from confluent_kafka import Producer
    tp = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "disk-check"})
    tp.init_transactions(10)
    tp.begin_transaction()
    tp.produce("fill", b"in a transaction", partition=0)
    tp.commit_transaction(10)
    check(True, "a transaction commits")

    print("3. read-only")
    broker.stop()
    remount(mnt, "ro")
    r = subprocess.run([sys.executable, DOZE, "--data-dir", broker.data, "--port", "0", "--override",
                        "doze.console.listener="], capture_output=True, text=True, timeout=60)
    line = r.stderr.strip().splitlines()[-1] if r.stderr.strip() else ""
    check(r.returncode == 1 and "cannot start" in line and "read-only" in line.lower() and "Traceback" not in r.stderr,
          f"a start on the read-only file system says why: {line}")
    remount(mnt, "rw")
    broker.start()
    got = read_all(broker.bootstrap, "fill", len(acked))
    check(all(got.get(o) == v for v, o in acked.items()), f"read-write again: all {len(acked)} acknowledged "
                                                          "records are there")
    again, errs = produce(broker.bootstrap, "fill", [b"back"])
    check(len(again) == 1 and not errs, "and it takes writes")
    broker.stop()


def main():
    needs.venv()
    if os.geteuid() != 0:
        print("RESULT fail: needs root, to mount a small tmpfs")
        return 1
    with tempfile.TemporaryDirectory() as tmp:
        mnt = os.path.join(tmp, "mnt")
        os.mkdir(mnt)
        mount(mnt)
        try:
            run(tmp, mnt)
        except Failed as e:
            print(f"RESULT fail: {e}")
            return 1
        finally:
            with contextlib.suppress(Exception):
                subprocess.run(["pkill", "-f", re.escape(os.path.join(mnt, "data"))], check=False)
            time.sleep(0.3)
            subprocess.run(["umount", "-l", mnt], check=False)
    print("RESULT ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
