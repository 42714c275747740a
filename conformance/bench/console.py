#!/usr/bin/env python3
"""What the console costs: page times on a big partition, and produce with a live page open.

    python3 conformance/bench/console.py [--records 1000000] [--rounds 4] [--no-browser]

1. Fills one partition with --records records (100 B values, librdkafka),
   then times, over HTTP, the message browser's first page, its last page
   (?at=end), a timestamp seek into the middle (?timestamp=), the Cluster
   page and the Topics page (its first visit counts the records: one try):
   medians of 5 each, and the broker's loop is not held longer than that.
2. Produce MB/s (librdkafka, 1 KiB, acks=all, 3 partitions) with the Cluster
   page open in headless Chromium (live: every transaction and marker makes it
   reload its tables) against no browser, rounds alternated; a transactional
   producer commits beside the plain one in both, so the live page has work.
   Needs Chromium and playwright-core as conformance/console/check.py does
   (--no-browser skips part 2).
"""
import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))   # conformance/
from lib import free_port  # noqa: E402
import needs  # noqa: E402
from produce import create_topic, produce  # noqa: E402
from tls_fetch import cpu_seconds  # noqa: E402


def fill(bootstrap, topic, records):
    from confluent_kafka import Producer
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 20, "batch.size": 1000000,
                  "queue.buffering.max.messages": 2000000})
    value = b"v" * 100
    start_ms = int(time.time() * 1000)
    for i in range(records):
        while True:
            try:
                p.produce(topic, value=value, key=b"%d" % i, partition=0, timestamp=start_ms + i)
                break
            except BufferError:
                p.poll(0.01)
    assert p.flush(300) == 0
    return start_ms


def timed_get(url):
    t0 = time.perf_counter()
    with urllib.request.urlopen(url, timeout=30) as r:
        body = r.read()
    return time.perf_counter() - t0, len(body)


def page_times(base, start_ms, records):
    rows = {}
    for name, path in (("browser, first page", "/topics/big/0"),
                       ("browser, last page", "/topics/big/0?at=end"),
                       ("browser, timestamp seek", f"/topics/big/0?timestamp={start_ms + records // 2}"),
                       ("browser, read_committed view", "/topics/big/0?view=committed&offset=500000"),
                       ("cluster page", "/"), ("cluster JSON", "/api/cluster"),
                       ("topics page, first (counting)", "/topics"), ("topics page", "/topics")):
        times = [timed_get(base + path) for _ in range(1 if "first" in name else 5)]
        rows[name] = (statistics.median(t for t, _ in times), times[0][1])
    return rows


def txn_beside(bootstrap, stop):
    """A transactional producer committing one record at a time until stop is set."""
    from confluent_kafka import Producer
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": "bench-live"})
    p.init_transactions(10)
    n = 0
    while not stop.is_set():
        p.begin_transaction()
        p.produce("side", b"x")
        p.commit_transaction(10)
        n += 1
    return n


def main():
    needs.venv()
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--produce-records", type=int, default=150_000)
    ap.add_argument("--no-browser", action="store_true")
    args = ap.parse_args()
    from brokers import Doze
    with tempfile.TemporaryDirectory() as work:
        port = free_port()
        doze = Doze(work, settings={"doze.console.listener": f"127.0.0.1:{port}", "log.segment.bytes": "104857600"})
        doze.start()
        base = f"http://127.0.0.1:{port}"
        try:
            create_topic(doze.proc.port, "big")
            t0 = time.perf_counter()
            start_ms = fill(doze.bootstrap, "big", args.records)
            print(f"filled big-0 with {args.records} records in {time.perf_counter() - t0:.1f} s")
            for name, (median, size) in page_times(base, start_ms, args.records).items():
                print(f"  {name:30s} {median * 1000:7.1f} ms  ({size} bytes)")
            if args.no_browser:
                return 0
            from console.check import Browser, chromium_path, playwright_dir
            browser = Browser(chromium_path(False), playwright_dir())
            create_topic(doze.proc.port, "side")
            rates = {"closed": [], "open": []}
            cpu = {"closed": [], "open": []}
            try:
                for r in range(args.rounds):
                    for mode in (("closed", "open") if r % 2 == 0 else ("open", "closed")):
                        browser.do("goto", url=base + "/" if mode == "open" else "about:blank",
                                   live=mode == "open")
                        topic = f"p{r}{mode}"
                        create_topic(doze.proc.port, topic)
                        stop = threading.Event()
                        side = threading.Thread(target=txn_beside, args=(doze.bootstrap, stop), daemon=True)
                        side.start()
                        before = cpu_seconds(doze.pid)
                        mbs, _ = produce({"bootstrap.servers": doze.bootstrap}, topic, args.produce_records, 1024)
                        used = cpu_seconds(doze.pid) - before
                        stop.set()
                        side.join(30)
                        rates[mode].append(mbs)
                        per_gb = used / (args.produce_records * 1024 / 1e9)
                        cpu[mode].append(per_gb)
                        print(f"  round {r} {mode:6s} {mbs:6.1f} MB/s, broker CPU {per_gb:5.1f} s per GB", flush=True)
            finally:
                browser.close()
            closed, opened = statistics.median(rates["closed"]), statistics.median(rates["open"])
            print(f"produce with the live Cluster page open: {opened:.1f} MB/s, closed: {closed:.1f} MB/s "
                  f"(ratio {opened / closed:.3f}; rounds open {[round(x, 1) for x in rates['open']]}, "
                  f"closed {[round(x, 1) for x in rates['closed']]})")
            c_open, c_closed = statistics.median(cpu["open"]), statistics.median(cpu["closed"])
            print(f"broker CPU per GB produced: open {c_open:.1f} s, closed {c_closed:.1f} s "
                  f"(ratio {c_open / c_closed:.3f}): what the console itself costs the broker")
        finally:
            doze.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
