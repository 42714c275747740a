#!/usr/bin/env python3
"""Where the time goes when librdkafka consumes many partitions from a new group.

    python3 conformance/bench/many_partitions.py [--broker doze|kafka] [--partitions 1,1000] [--records 30000]

compare.py's consume figure starts its clock at the first record. Over 1,000
partitions that is early: librdkafka asks one ListOffsets per partition (its
protocol log says so; this script counts them) and fetches each partition
once its offset is known. This prints, per partition count, the seconds from
subscribe() to the first and to the last record, and the ListOffsets and Fetch
requests librdkafka sent, read_committed, 1 KiB records.
"""
import argparse
import logging
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))   # conformance/
import needs  # noqa: E402
from brokers import Doze, Kafka  # noqa: E402
from compare import CONSUMER_SETTINGS, admin_create, produce_records  # noqa: E402


def consume(bootstrap, topic, records):
    """-> (s to first record, s to last, ListOffsets requests, Fetch requests)."""
    from confluent_kafka import Consumer
    counts = {"ListOffsetsRequest": 0, "FetchRequest": 0}

    def logger_line(record):
        for name in counts:
            if f"Sent {name} " in record.getMessage():
                counts[name] += 1

    class Counter(logging.Handler):
        def emit(self, record):
            logger_line(record)

    log = logging.getLogger(f"rdkafka-{time.time_ns()}")
    log.setLevel(logging.DEBUG)
    log.propagate = False
    log.addHandler(Counter())
    c = Consumer(dict(CONSUMER_SETTINGS, **{"bootstrap.servers": bootstrap, "group.id": f"many-{time.time_ns()}",
                                            "isolation.level": "read_committed", "debug": "protocol"}), logger=log)
    t0 = time.perf_counter()
    c.subscribe([topic])
    got, first, deadline = 0, None, time.time() + 120
    while got < records and time.time() < deadline:
        for m in c.consume(10000, 0.5):
            if m.error() is None:
                got += 1
                first = first or time.perf_counter() - t0
    last = time.perf_counter() - t0
    c.close()
    if got < records:
        raise RuntimeError(f"read {got} of {records}")
    return first, last, counts["ListOffsetsRequest"], counts["FetchRequest"]


def main():
    needs.venv()
    ap = argparse.ArgumentParser()
    ap.add_argument("--broker", default="doze", choices=("doze", "kafka"))
    ap.add_argument("--partitions", default="1,1000")
    ap.add_argument("--records", type=int, default=30000)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="many-") as d:
        b = (Doze if args.broker == "doze" else Kafka)(d)
        b.start()
        try:
            print(f"{args.broker}: {args.records} records of 1 KiB, read_committed, a new group each time")
            print(f"{'partitions':>10s} {'first (s)':>10s} {'last (s)':>9s} {'ListOffsets':>12s} {'Fetch':>6s}")
            for parts in (int(p) for p in args.partitions.split(",")):
                topic = f"many{parts}"
                admin_create(b.bootstrap, topic, parts)
                produce_records(b.bootstrap, topic, args.records, 1024, partitions=parts)
                first, last, lo, fe = consume(b.bootstrap, topic, args.records)
                print(f"{parts:>10d} {first:>10.3f} {last:>9.3f} {lo:>12d} {fe:>6d}", flush=True)
        finally:
            b.stop()
            b.cleanup()


if __name__ == "__main__":
    sys.exit(main())
