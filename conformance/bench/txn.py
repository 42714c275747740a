#!/usr/bin/env python3
"""Transactions per second and commit latency of doze-kafka with librdkafka.

    python3 conformance/bench/txn.py [--txns 2000] [--runs 3] [--bootstrap H:P]

One confluent-kafka transactional producer runs one-record transactions
(begin, produce, commit) back to back; reports commits/s and the p50/p99 of
commit_transaction()'s latency, median over the runs. Without --bootstrap it
starts doze_kafka.py itself. Runs itself in conformance/needs.py's venv.
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
from compare import admin_create, percentile, transactions  # noqa: E402


def run(bootstrap, topic, txns):
    """-> (commits/s, commit_transaction() p50 ms, p99 ms) of one producer's txns."""
    admin_create(bootstrap, topic, 3)
    rate, latencies, *_ = transactions(bootstrap, topic, topic + "-tx", txns)
    return rate, percentile(latencies, 0.5) * 1000, percentile(latencies, 0.99) * 1000


def main():
    needs.venv()
    ap = argparse.ArgumentParser()
    ap.add_argument("--txns", type=int, default=2000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--bootstrap")
    args = ap.parse_args()
    results = []
    for r in range(args.runs):
        with tempfile.TemporaryDirectory() as d:
            broker = None
            bootstrap = args.bootstrap
            if not bootstrap:
                broker = DozeProcess(d, "--log-level", "WARNING")
                broker.start()
                bootstrap = broker.bootstrap
            try:
                results.append(run(bootstrap, f"txbench{r}-{int(time.time())}", args.txns))
            finally:
                if broker:
                    broker.stop()
        print(f"run {r + 1}: {results[-1][0]:.0f} commits/s, commit_transaction p50 "
              f"{results[-1][1]:.2f} ms, p99 {results[-1][2]:.2f} ms", flush=True)
    print(f"median: {statistics.median(x[0] for x in results):.0f} commits/s, p50 "
          f"{statistics.median(x[1] for x in results):.2f} ms, p99 "
          f"{statistics.median(x[2] for x in results):.2f} ms")


if __name__ == "__main__":
    main()
