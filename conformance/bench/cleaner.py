#!/usr/bin/env python3
"""The log cleaner measured: how fast doze compacts, what it costs the loop and a producer.

    python3 conformance/bench/cleaner.py [--gib 1] [--keys 100000] [--size 1024]

Two brokers in turn (doze_kafka.py as the command line runs it, each on a
fresh directory): one with log.cleaner.enable=false, one with the cleaner on
(log.cleaner.backoff.ms=1000). On each, one producer (librdkafka, acks=all,
no compression) writes GIB GiB of SIZE-byte values over KEYS keys, each key
overwritten again and again, to a one-partition topic with
cleanup.policy=compact and segment.bytes=64 MiB. Reported:
  - the producer's MB/s without the cleaner, and with it cleaning meanwhile;
  - the cleaning rate: the bytes each pass read over the time it took (the
    broker's "cleaned log" lines; a pass shares the loop with the producer);
  - the loop's pass times while the cleaner works (doze.loop.stats.interval.ms=1000:
    each second's p50, p99 and max of the loop's passes; the figure is the
    median of those p99s and the largest max);
  - the partition's size at the end (DescribeLogDirs) against what was written.
Runs itself in conformance/needs.py's venv (confluent-kafka).
"""
import argparse
import os
import re
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))   # conformance/
import needs  # noqa: E402

needs.venv()

from dozeproc import DozeProcess  # noqa: E402
import doze_kafka as dk  # noqa: E402

TOPIC = "compacted"
SEGMENT_BYTES = 64 * 1024 * 1024
CLEANED = re.compile(r"cleaned log \S+ \(dirty section = \[(\d+), (\d+)\]\): (\d+) bytes to (\d+), "
                     r"(\d+) records removed, in ([\d.]+) ms")
LOOP = re.compile(r"loop stats: passes=(\d+) p50_ms=([\d.]+) p99_ms=([\d.]+) max_ms=([\d.]+)")


def create_topic(bootstrap):
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topic = NewTopic(TOPIC, 1, 1, config={"cleanup.policy": "compact", "segment.bytes": str(SEGMENT_BYTES)})
    for f in admin.create_topics([topic]).values():
        f.result()


def produce(bootstrap, total_bytes, keys, size):
    """-> (bytes written, seconds)."""
    from confluent_kafka import Producer
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5, "batch.size": 1000000,
                  "queue.buffering.max.messages": 1000000, "compression.type": "none",
                  "enable.idempotence": False})
    p.list_topics(TOPIC, 30)
    value, errors = os.urandom(size), []
    count = total_bytes // size
    t0 = time.perf_counter()
    for i in range(count):
        while True:
            try:
                p.produce(TOPIC, key=b"key-%d" % (i % keys), value=value,
                          on_delivery=lambda err, _m: errors.append(err) if err else None)
                break
            except BufferError:
                p.poll(0.01)
        if i % 5000 == 0:
            p.poll(0)
    p.flush(600)
    took = time.perf_counter() - t0
    if errors:
        raise RuntimeError(f"{len(errors)} produce errors, the first: {errors[0]}")
    return count * size, took


def partition_size(bootstrap):
    with dk.Client(bootstrap, client_id="cleaner-bench") as c:
        r = c.call(dk.ApiKey.DESCRIBE_LOG_DIRS, 4, topics=[dk.Msg(topic=TOPIC, partitions=[0])])
    return r.results[0].topics[0].partitions[0].partition_size


def log_lines(path, pattern):
    with open(path, errors="replace") as f:
        return [m.groups() for m in map(pattern.search, f) if m]


def run(cleaner_on, args, tmp):
    broker = DozeProcess(tmp, "--override", f"log.cleaner.enable={'true' if cleaner_on else 'false'}",
                         "--override", "log.cleaner.backoff.ms=1000", "--override", "doze.loop.stats.interval.ms=1000")
    broker.start()
    try:
        create_topic(broker.bootstrap)
        written, took = produce(broker.bootstrap, int(args.gib * (1 << 30)), args.keys, args.size)
        out = {"produce_mb_s": written / took / 1e6, "written": written}
        if cleaner_on:
            # Until the cleaner has been quiet for a while after its last pass (every segment but the
            # active one cleaned, or not dirty enough to clean again).
            deadline, quiet_since, seen = time.time() + args.wait_s, time.time(), 0
            while time.time() < deadline:
                passes = log_lines(broker.log_path, CLEANED)
                if len(passes) != seen:
                    seen, quiet_since = len(passes), time.time()
                elif seen and time.time() - quiet_since > 5:
                    break
                time.sleep(0.5)
            passes = [tuple(map(float, p)) for p in log_lines(broker.log_path, CLEANED)]
            out["passes"] = len(passes)
            out["cleaned_mb"] = sum(p[2] for p in passes) / 1e6
            out["clean_mb_s"] = sum(p[2] for p in passes) / 1e6 / (sum(p[5] for p in passes) / 1000 or 1)
        loops = [tuple(map(float, l)) for l in log_lines(broker.log_path, LOOP) if float(l[0]) > 0]
        out["loop_p99_ms"] = statistics.median(l[2] for l in loops) if loops else float("nan")
        out["loop_max_ms"] = max((l[3] for l in loops), default=float("nan"))
        out["size"] = partition_size(broker.bootstrap)
        return out
    finally:
        broker.stop()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gib", type=float, default=1.0)
    ap.add_argument("--keys", type=int, default=100000)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--wait-s", type=float, default=900, help="how long to wait for the cleaner, at most")
    args = ap.parse_args()
    load0, t0 = os.getloadavg()[0], time.time()
    results = {}
    for name, on in (("cleaner off", False), ("cleaner on", True)):
        with tempfile.TemporaryDirectory(prefix="doze-cleaner-bench-") as tmp:
            results[name] = run(on, args, tmp)
            print(f"{name}: {results[name]}", flush=True)
    off, on = results["cleaner off"], results["cleaner on"]
    print(f"\ndoze's log cleaner, {args.gib} GiB of {args.size}-byte values over {args.keys} keys, one "
          f"partition (segment.bytes 64 MiB); {time.time() - t0:.0f} s, load {load0:.2f} -> "
          f"{os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
    rows = [("producer MB/s, no cleaner", f"{off['produce_mb_s']:.1f}"),
            ("producer MB/s, cleaner cleaning meanwhile", f"{on['produce_mb_s']:.1f} "
                                                          f"({on['produce_mb_s'] / off['produce_mb_s']:.2f}x)"),
            ("cleaning rate MB/s (bytes read / time of the passes)", f"{on['clean_mb_s']:.1f} "
                                                                   f"({on['passes']} passes, {on['cleaned_mb']:.0f} MB read)"),
            ("loop pass p99 ms (median of each second's), no cleaner", f"{off['loop_p99_ms']:.2f}"),
            ("loop pass p99 ms (median of each second's), with the cleaner", f"{on['loop_p99_ms']:.2f}"),
            ("loop pass max ms, no cleaner / with", f"{off['loop_max_ms']:.1f} / {on['loop_max_ms']:.1f}"),
            ("partition bytes at the end, no cleaner / with", f"{off['size']} / {on['size']} "
                                                             f"(written {on['written']})")]
    width = max(len(r[0]) for r in rows)
    for label, value in rows:
        print(f"  {label:{width}s}  {value}")


if __name__ == "__main__":
    main()
