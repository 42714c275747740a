#!/usr/bin/env python3
"""A change's before and after: two trees of doze, alternated, on the figures
the produce and fsync paths move. One command, so that every change that
moves a figure is measured the same way.

    python3 conformance/bench/beforeafter.py BEFORE AFTER [--rounds 2]
                                             [--records 60000] [--txns 1000]

BEFORE and AFTER: git revisions of this repository (each checked out into a
temporary worktree, removed afterwards) or directories holding a
doze_kafka.py. Each round starts a fresh doze of each tree, in turn (the
order flips every round), as conformance/brokers.py starts one (the command
line: every acknowledged write fsynced), and runs compare.py's own
workloads with librdkafka: 1 KiB records, acks=all, one producer, over 1, 3
and 1,000 partitions (MB/s), then one-record transactions back to back
(transactions/s and commit_transaction() p50, after 100 to warm up).
Prints each round's figures, then the medians and after/before. The machine
decides much at this level: run it on a quiet one, and read the spread.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(HERE, ".."))   # conformance/
import needs  # noqa: E402

FIGURES = ["produce over 1 partition (MB/s)", "produce over 3 partitions (MB/s)",
           "produce over 1,000 partitions (MB/s)", "one-record transactions/s", "commit p50 (ms)"]


def measure(doze_path, records, txns):
    """The figures of one fresh doze run from doze_path (in this process)."""
    import dozeproc
    dozeproc.DOZE = doze_path                       # the tree measured, not this one
    from brokers import Doze
    from compare import admin_create, percentile, produce_records, transactions
    with tempfile.TemporaryDirectory(prefix="beforeafter-") as d:
        b = Doze(d, {})
        b.start()
        try:
            got = {}
            for n, figure in zip((1, 3, 1000), FIGURES):
                admin_create(b.bootstrap, f"p{n}", n)
                nbytes, secs, *_ = produce_records(b.bootstrap, f"p{n}", records, 1024, partitions=n)
                got[figure] = nbytes / secs / 1e6
            admin_create(b.bootstrap, "t", 3)
            transactions(b.bootstrap, "t", "warm", 100)
            rate, lat, *_ = transactions(b.bootstrap, "t", "tx", txns)
            got[FIGURES[3]], got[FIGURES[4]] = rate, percentile(lat, 0.5) * 1e3
            return got
        finally:
            b.stop()


def tree(rev, keep):
    """A directory holding rev's doze_kafka.py: rev itself, or a worktree made for it."""
    if os.path.isfile(os.path.join(rev, "doze_kafka.py")):
        return os.path.abspath(rev)
    path = tempfile.mkdtemp(prefix="beforeafter-tree-")
    subprocess.run(["git", "-C", REPO, "worktree", "add", "--detach", "-f", path, rev], check=True,
                   stdout=subprocess.DEVNULL)
    keep.append(path)
    return path


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("before")
    ap.add_argument("after")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--records", type=int, default=60000)
    ap.add_argument("--txns", type=int, default=1000)
    ap.add_argument("--measure", help=argparse.SUPPRESS)   # the child: one doze's figures, as JSON
    args = ap.parse_args()
    needs.venv()
    if args.measure:
        print(json.dumps(measure(args.measure, args.records, args.txns)))
        return
    made = []
    try:
        trees = {"before": tree(args.before, made), "after": tree(args.after, made)}
        runs = {"before": [], "after": []}
        for rnd in range(args.rounds):
            for which in ("before", "after") if rnd % 2 == 0 else ("after", "before"):
                os.sync()
                out = subprocess.run([sys.executable, os.path.abspath(__file__), args.before, args.after,
                                      "--records", str(args.records), "--txns", str(args.txns),
                                      "--measure", os.path.join(trees[which], "doze_kafka.py")],
                                     check=True, stdout=subprocess.PIPE, text=True).stdout
                got = json.loads(out.strip().splitlines()[-1])
                runs[which].append(got)
                print(f"round {rnd + 1} {which:6} " + "  ".join(f"{f}: {got[f]:.2f}" for f in FIGURES), flush=True)
        print(f"\n{args.before} -> {args.after}, {args.rounds} rounds alternated, medians (each round)")
        for f in FIGURES:
            b, a = (statistics.median(r[f] for r in runs[w]) for w in ("before", "after"))
            each = lambda w: ", ".join(f"{r[f]:.1f}" for r in runs[w])  # noqa: E731
            print(f"  {f:40} {b:8.2f} ({each('before')}) -> {a:8.2f} ({each('after')})   {a / b:.2f}x")
    finally:
        for path in made:
            subprocess.run(["git", "-C", REPO, "worktree", "remove", "--force", path], check=False)


if __name__ == "__main__":
    main()
