#!/usr/bin/env python3
"""One-record transactions at transaction.version 1 and 2, doze beside Kafka 4.3.1, Java client.

    python3 conformance/bench/tv2.py [--txns 2000] [--warmup 300] [--rounds 2]
                                     [--only doze-tv1,doze-tv2,kafka-tv1,kafka-tv2]

Four brokers, alternated round by round (the order reversed every other
round, as compare.py does) so that the machine's drift hits each: doze with
doze.transaction.version=1 and =2, started from conformance/brokers.py's Doze
as compare.py starts it (every acknowledged write fsynced, EndTxn answered once
its markers are written); Apache Kafka 4.3.1 from brokers.py's Kafka
(realkafka.py, defaults: no fsync), formatted at its default
transaction.version 2, and for level 1 brought down with `kafka-features
downgrade --feature transaction.version=1` (realkafka.py's tool). Each broker
is fresh in each round. Before measuring, ApiVersions v3 must show the
feature finalized at the level wanted (Kafka applies a change through its
metadata log first: polled for up to 30 s); the EndTxn version it advertises
is noted too (4 classic, 5 with transaction version 2).

The client is kafka-clients 4.3.1: conformance/clients/java's `txnbench`
check (TxnBench.java), one transactional KafkaProducer (acks=all, idempotent,
linger.ms 0, a fresh transactional.id) running --warmup and then --txns
one-record transactions (begin, send one 100-byte record to a 3-partition
topic, commit); it prints transactions/s and commitTransaction()'s p50/p99,
which protocol the producer chose (its TransactionManager's
isTransactionV2Enabled(), read by reflection at every measured transaction),
and the producer epoch DescribeTransactions gives at the end (transaction
version 2 bumps it at every commit). A run whose producer did not use the
level's protocol is a failed cell.

Prints each broker's figures as they come, then one table: the median over
the rounds (min-max) per broker and level, the ratios TV2/TV1 per broker and
doze/Kafka per level, and the 1-minute load average around each run (the
machine has other work: figures from a loaded machine say so). Standard
library only; it runs java (and mvn, through conformance/clients/java/run,
when the jar is older than its sources).
"""
import argparse
import contextlib
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
CONFORMANCE = os.path.join(HERE, "..")
sys.path.insert(0, CONFORMANCE)
from brokers import Doze, Kafka  # noqa: E402
from realkafka import run_tool  # noqa: E402
import doze_kafka as dk  # noqa: E402

JAVA_RUN = os.path.join(CONFORMANCE, "clients", "java", "run")
# name -> (broker class, transaction.version wanted)
CONFIGS = {"doze-tv1": (Doze, 1), "doze-tv2": (Doze, 2), "kafka-tv1": (Kafka, 1), "kafka-tv2": (Kafka, 2)}
FIGURES = [("transactions/s (higher is better)", "txn_per_s", False),
           ("commitTransaction() p50, ms (lower is better)", "commit_p50_ms", True),
           ("commitTransaction() p99, ms (lower is better)", "commit_p99_ms", True)]


# --- ApiVersions v3: the finalized transaction.version and EndTxn's versions -----

def api_versions_v3(bootstrap):
    """-> (finalized transaction.version (0: none), {api_key: (min, max)}), asked with
    doze_kafka's own client and codec (ApiVersions v3, as the Java client asks)."""
    host, port = bootstrap.rsplit(":", 1)
    with dk.Client((host, int(port)), client_id="tv2-bench") as c:
        r = c.call(dk.ApiKey.API_VERSIONS, 3, client_software_name="tv2-bench", client_software_version="1")
    if r.error_code:
        raise RuntimeError(f"ApiVersions v3: error {r.error_code}")
    level = next((f.max_version_level for f in r.finalized_features if f.name == "transaction.version"), 0)
    return level, {k.api_key: (k.min_version, k.max_version) for k in r.api_keys}


def wait_level(bootstrap, want, limit_s=30):
    """Until ApiVersions shows transaction.version finalized at want -> EndTxn's max version."""
    deadline = time.time() + limit_s
    while True:
        level, apis = api_versions_v3(bootstrap)
        if level == want:
            return apis.get(26, (0, -1))[1]
        if time.time() > deadline:
            raise RuntimeError(f"transaction.version is {level} on {bootstrap}, not {want}")
        time.sleep(0.3)


# --- one run -----------------------------------------------------------------------

def txnbench(bootstrap, txns, warmup, log_path):
    """conformance/clients/java/run txnbench -> its RESULT line as a dict."""
    argv = [JAVA_RUN, "txnbench", "--bootstrap", bootstrap, "--txns", str(txns), "--warmup", str(warmup)]
    r = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=1200)
    with open(log_path, "a") as f:
        f.write(r.stdout)
    found = re.search(r"^RESULT (.*)$", r.stdout, re.M)
    if r.returncode or not found:
        tail = " ".join(r.stdout.strip().splitlines()[-3:])[:300]
        raise RuntimeError(f"txnbench exited with {r.returncode}: {tail}")
    out = {}
    for word in found.group(1).split():
        k, v = word.split("=", 1)
        try:
            out[k] = float(v) if "." in v else int(v)
        except ValueError:
            out[k] = v
    return out


def one_run(name, directory, args, results, notes, failures, logs):
    cls, level = CONFIGS[name]
    settings = {"doze.transaction.version": str(level)} if cls is Doze else {}
    b = cls(directory, settings=settings)
    load0 = os.getloadavg()[0]
    t0 = time.time()
    try:
        b.start()
        if cls is Kafka and level != 2:                 # formatted at 2: downgrade
            r = run_tool("kafka-features", "--bootstrap-server", b.bootstrap, "downgrade",
                         "--feature", f"transaction.version={level}", capture_output=True, text=True, timeout=120)
            if r.returncode:
                raise RuntimeError(f"kafka-features downgrade: {r.returncode}: {(r.stdout + r.stderr)[-300:]}")
        endtxn_max = wait_level(b.bootstrap, level)
        res = txnbench(b.bootstrap, args.txns, args.warmup, os.path.join(logs, f"{name}.txt"))
        expect = "true" if level >= 2 else "false"
        if res.get("tv2") != expect:
            raise RuntimeError(f"the producer's isTransactionV2Enabled() was {res.get('tv2')} "
                               f"({res.get('tv2_txns')} of {res.get('txns')} transactions) at level {level}")
        load1 = os.getloadavg()[0]
        for figure, key, _ in FIGURES:
            results.setdefault(name, {}).setdefault(figure, []).append(res[key])
        notes.setdefault(name, []).append(
            f"transaction.version {level} (ApiVersions), EndTxn up to v{endtxn_max}; client "
            f"{'TV2' if expect == 'true' else 'classic'} in all {res['txns']} measured; producer epoch at the end "
            f"{res['epoch']}; load {load0:.2f}->{load1:.2f}")
        print(f"  {name:10s} {res['txn_per_s']:8.1f} txn/s  commit p50 {res['commit_p50_ms']:7.2f} ms  "
              f"p99 {res['commit_p99_ms']:7.2f} ms  (EndTxn v{endtxn_max} offered, "
              f"isTransactionV2Enabled={res['tv2']}, epoch {res['epoch']}, load {load0:.2f}->{load1:.2f}, "
              f"{time.time() - t0:.0f} s)", flush=True)
    except Exception as e:
        reason = " ".join(f"{type(e).__name__}: {e}".split())[:300]
        failures.setdefault(name, []).append(reason)
        for figure, _, _ in FIGURES:
            results.setdefault(name, {}).setdefault(figure, []).append(None)
        print(f"  {name:10s} failed: {reason}", flush=True)
        with contextlib.suppress(OSError):              # the broker's log and data, for whoever looks next
            b.stop()
            shutil.copytree(directory, os.path.join(logs, f"{name}-broker-{len(failures[name])}"), dirs_exist_ok=True)
            print(f"  {name:10s} its broker's directory kept in {logs}", flush=True)
    finally:
        try:
            b.stop()
        except Exception as e:
            print(f"  {name:10s} stop: {type(e).__name__}: {e}", flush=True)
        b.cleanup()


# --- the table -----------------------------------------------------------------------

def table(order, results, failures):
    cols = [n for n in CONFIGS if n in order]
    ratios = [(f"{b} TV2/TV1", f"{b}-tv2", f"{b}-tv1") for b in ("doze", "kafka")] + \
             [(f"doze/kafka TV{v}", f"doze-tv{v}", f"kafka-tv{v}") for v in (1, 2)]
    ratios = [r for r in ratios if r[1] in cols and r[2] in cols]
    head = f"{'figure':46s}" + "".join(f"{c:>22s}" for c in cols) + "".join(f"{r[0]:>17s}" for r in ratios)
    lines = [head, "-" * len(head)]
    for figure, _, _ in FIGURES:
        med, cells = {}, ""
        for c in cols:
            vals = [v for v in results.get(c, {}).get(figure, []) if v is not None]
            failed = len(results.get(c, {}).get(figure, [])) - len(vals)
            if vals:
                med[c] = statistics.median(vals)
                cell = f"{med[c]:.2f} ({min(vals):.1f}-{max(vals):.1f})" + (f" [{failed} failed]" if failed else "")
            else:
                cell = "failed"
            cells += f"{cell:>22s}"
        rs = ""
        for _, a, bb in ratios:
            rs += f"{(f'{med[a] / med[bb]:.2f}x' if a in med and med.get(bb) else ''):>17s}"
        lines.append(f"{figure:46s}" + cells + rs)
    for c in cols:
        for why in failures.get(c, []):
            lines.append(f"failed: {c}: {why}")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--txns", type=int, default=2000, help="measured transactions per run (2000)")
    ap.add_argument("--warmup", type=int, default=300, help="transactions before measuring (300)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--only", default=",".join(CONFIGS), help="of " + ",".join(CONFIGS))
    args = ap.parse_args()
    order = [n.strip() for n in args.only.split(",") if n.strip()]
    unknown = [n for n in order if n not in CONFIGS]
    if unknown:
        ap.error(f"unknown {', '.join(unknown)}: of {', '.join(CONFIGS)}")
    began, load_before = time.time(), os.getloadavg()
    logs = tempfile.mkdtemp(prefix="tv2-bench-")
    print(f"load average before: {' '.join(f'{x:.2f}' for x in load_before)} ({os.cpu_count()} CPUs); "
          f"txnbench output in {logs}", flush=True)
    results, notes, failures = {}, {}, {}
    for rnd in range(args.rounds):
        for name in order if rnd % 2 == 0 else list(reversed(order)):
            print(f"round {rnd + 1}: {name}", flush=True)
            with tempfile.TemporaryDirectory(prefix=f"tv2-{name}-") as d:
                one_run(name, d, args, results, notes, failures, logs)
    load_after = os.getloadavg()
    print()
    print(f"One-record transactions, kafka-clients 4.3.1 (1 producer, acks=all, idempotent, 100 B record, "
          f"3 partitions), {args.txns} measured after {args.warmup} warm-up; {args.rounds} rounds alternating "
          f"({', '.join(order)}), medians (min-max); doze fsyncs each write, Kafka does not (its default); "
          f"{os.cpu_count()} CPUs; {time.time() - began:.0f} s; load average before "
          f"{' '.join(f'{x:.2f}' for x in load_before)}, after {' '.join(f'{x:.2f}' for x in load_after)}")
    print(table(order, results, failures))
    print()
    for name in order:
        for i, n in enumerate(notes.get(name, []), 1):
            print(f"{name} run {i}: {n}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
