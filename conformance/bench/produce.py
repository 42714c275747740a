#!/usr/bin/env python3
"""Produce throughput, start time and idle RSS of doze-kafka, measured with librdkafka.

    python3 conformance/bench/produce.py [--records 200000] [--size 1024] [--runs 3]

Starts doze_kafka.py as a subprocess (once with the CRC check, once without:
--override doze.check.crc=false), produces N records of SIZE bytes with
confluent-kafka (acks=all, no compression, 3 partitions), and reports the
median MB/s over the runs. Also reports the time from process start until
the port answers, and the broker's RSS when idle. Runs itself in conformance/needs.py's venv.
"""
import argparse
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))   # conformance/
import needs  # noqa: E402
from dozeproc import DozeProcess  # noqa: E402
from compare import produce_records  # noqa: E402


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return -1


def create_topic(port, topic):
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{port}"})
    for f in admin.create_topics([NewTopic(topic, 3, 1)]).values():
        f.result()


def produce(conf, topic, records, size):
    """records of size random bytes with librdkafka (acks=all, no compression) over
    conf (its bootstrap and security settings) -> (MB/s, records/s)."""
    nbytes, seconds, *_ = produce_records(conf, topic, records, size)
    return nbytes / seconds / 1e6, records / seconds


def main():
    needs.venv()
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=200000)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    for label, extra in (("crc checked", []), ("crc not checked", ["--override", "doze.check.crc=false"])):
        rates, starts, rss = [], [], []
        for run in range(args.runs):
            with tempfile.TemporaryDirectory() as d:
                broker = DozeProcess(d, "--log-level", "WARNING", *extra)
                starts.append(broker.start())
                time.sleep(0.5)
                rss.append(rss_kib(broker.proc.pid))
                try:
                    create_topic(broker.port, f"bench{run}")
                    rates.append(produce({"bootstrap.servers": broker.bootstrap}, f"bench{run}", args.records,
                                         args.size))
                finally:
                    broker.stop()
        mbs = statistics.median(r[0] for r in rates)
        rps = statistics.median(r[1] for r in rates)
        print(f"{label:16s} produce {mbs:6.1f} MB/s ({rps:8.0f} records/s), runs: "
              f"{', '.join(f'{r[0]:.1f}' for r in rates)} MB/s; start {statistics.median(starts)*1000:.0f} ms "
              f"(to port answering, incl. interpreter); idle RSS {statistics.median(rss)/1024:.1f} MiB")


if __name__ == "__main__":
    main()
