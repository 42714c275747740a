#!/usr/bin/env python3
"""What the protocol trace costs when it is off: produce MB/s of this
doze_kafka.py against a build without the trace's hooks, rounds alternated.

    git show <commit before the trace>:doze_kafka.py > /tmp/baseline.py
    python3 conformance/bench/trace_off.py --baseline /tmp/baseline.py [--rounds 6]

Each round starts each build as a subprocess (this one with the trace off,
the baseline), produces --records records of --size bytes with librdkafka
(acks=all, 3 partitions) and takes the MB/s; the order alternates round by
round so the machine's drift hits both. Also, for scale, this build with
doze.trace=txn (on, but plain produce is not a transaction API: each
request is looked at and not printed). Prints medians, each round, and
the ratios.
"""
import argparse
import os
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))   # conformance/
from lib import DOZE as THIS  # noqa: E402
import needs  # noqa: E402
import dozeproc  # noqa: E402
from produce import create_topic, produce  # noqa: E402


def one(path, extra, records, size):
    """Start the build at path, produce, stop -> MB/s."""
    with tempfile.TemporaryDirectory() as tmp:
        dozeproc.DOZE = path
        proc = dozeproc.DozeProcess(tmp, *extra)
        proc.start()
        try:
            create_topic(proc.port, "bench")
            mbs, _ = produce({"bootstrap.servers": proc.bootstrap}, "bench", records, size)
        finally:
            proc.stop()
    return mbs


def main():
    needs.venv()
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--baseline", required=True, help="a doze_kafka.py without the trace's hooks")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--size", type=int, default=1024)
    args = ap.parse_args()
    builds = {"off": (THIS, ()), "baseline": (os.path.abspath(args.baseline), ()),
              "txn on": (THIS, ("--override", "doze.trace=txn"))}
    rates = {name: [] for name in builds}
    for r in range(args.rounds):
        order = list(builds) if r % 2 == 0 else list(reversed(builds))
        for name in order:
            path, extra = builds[name]
            rates[name].append(one(path, extra, args.records, args.size))
            print(f"  round {r} {name:8s} {rates[name][-1]:6.1f} MB/s", flush=True)
    med = {name: statistics.median(v) for name, v in rates.items()}
    spread = {name: max(v) - min(v) for name, v in rates.items()}
    for name in builds:
        print(f"{name:8s} median {med[name]:6.1f} MB/s (spread {spread[name]:.1f}; {[round(x, 1) for x in rates[name]]})")
    print(f"trace off / baseline: {med['off'] / med['baseline']:.3f}; txn on / baseline: "
          f"{med['txn on'] / med['baseline']:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
