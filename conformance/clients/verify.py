#!/usr/bin/env python3
"""Verify the output of one exactly-once copy job (shared by every client).

    python3 conformance/clients/verify.py --bootstrap H:P --input IN --output OUT \
        [--status copier-status-1.json ...] [--json result.json]

Reads IN (all of it) and OUT twice with confluent-kafka, assigned from offset 0 to the
end: once read_committed, once read_uncommitted. Output records carry headers
src="<p>:<offset>" (the input record), txn="<attempt>.<seq>" and plan="commit"|"abort"
(see conformance/clients/eos/copier_common.py). Checks:

  exactly-once  every input record appears exactly once in read_committed output,
                with the input's key and value
  no-aborted    no record of a transaction planned as "abort" is visible read_committed
  atomic        every transaction is all-or-nothing: for each txn tag, the committed
                count is 0 or equals the read_uncommitted count
  confirmed     every commit the client confirmed (status files) is fully visible;
                every on-purpose abort it confirmed is invisible read_committed but
                present (all its records) read_uncommitted
  aborted-in-log  read_uncommitted holds more records than read_committed when there
                were aborts (the aborted copies are really in the log)
  no-hanging    on every output partition the read_committed end (LSO) equals the
                high watermark: no transaction was left open
Exit 0 if all pass, 1 otherwise.
"""
import argparse
import collections
import json
import os
import sys
import time
import uuid

if __name__ == "__main__":                    # run as a script: in the conformance venv
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))   # conformance/
    import needs
    needs.venv()
from confluent_kafka import Consumer, KafkaError, TopicPartition


def read_topic(bootstrap, topic, isolation, timeout=180):
    """[(partition, offset, key, value, headers-dict)], {partition: end offset}.

    The end offset is where the consumer saw end-of-partition: the high watermark for
    read_uncommitted, the last stable offset (LSO) for read_committed."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "verify-" + uuid.uuid4().hex,
                  "isolation.level": isolation, "enable.auto.commit": False,
                  "enable.partition.eof": True, "fetch.wait.max.ms": 100})
    md = c.list_topics(topic, timeout=30)
    parts = sorted(md.topics[topic].partitions)
    c.assign([TopicPartition(topic, p, 0) for p in parts])
    out, eof, deadline = [], {}, time.time() + timeout
    while len(eof) < len(parts) and time.time() < deadline:
        for m in c.consume(1000, 1.0):
            if m.error():
                if m.error().code() == KafkaError._PARTITION_EOF:
                    eof[m.partition()] = m.offset()
                else:
                    print("verify: %s %s: %s" % (topic, isolation, m.error()), file=sys.stderr)
                continue
            eof.pop(m.partition(), None)
            out.append((m.partition(), m.offset(), m.key(), m.value(),
                        {k: (v.decode() if v is not None else None) for k, v in (m.headers() or [])}))
    c.close()
    if len(eof) < len(parts):
        raise RuntimeError("%s (%s): no end of partition after %ds (eof at %s)"
                           % (topic, isolation, timeout, eof))
    return out, eof


def verify(bootstrap, input_topic, output_topic, statuses):
    problems = []

    def bad(kind, msg):
        problems.append("%s: %s" % (kind, msg))

    inputs, in_hw = read_topic(bootstrap, input_topic, "read_uncommitted")
    by_src = {"%d:%d" % (p, o): (k, v) for p, o, k, v, _ in inputs}
    committed, c_eof = read_topic(bootstrap, output_topic, "read_committed")
    everything, u_eof = read_topic(bootstrap, output_topic, "read_uncommitted")

    for p, hw in sorted(u_eof.items()):
        if c_eof.get(p) != hw:
            bad("no-hanging", "partition %d: read_committed ends at %s, high watermark %s"
                % (p, c_eof.get(p), hw))

    seen = collections.Counter()
    c_txn = collections.Counter()
    for p, o, k, v, h in committed:
        src, tag, plan = h.get("src"), h.get("txn"), h.get("plan")
        c_txn[tag] += 1
        seen[src] += 1
        if plan != "commit":
            bad("no-aborted", "output %d:%d (src %s, txn %s, plan %s) is visible read_committed"
                % (p, o, src, tag, plan))
        if src not in by_src:
            bad("exactly-once", "output %d:%d has unknown src %r" % (p, o, src))
        elif by_src[src] != (k, v):
            bad("exactly-once", "output %d:%d (src %s) key/value %r/%r != input %r/%r"
                % (p, o, src, k, v, by_src[src][0], by_src[src][1]))
    missing = [s for s in by_src if seen[s] == 0]
    dupes = {s: n for s, n in seen.items() if n > 1}
    if missing:
        bad("exactly-once", "%d inputs missing, e.g. %s" % (len(missing), missing[:5]))
    if dupes:
        bad("exactly-once", "%d inputs duplicated, e.g. %s" % (len(dupes), list(dupes.items())[:5]))

    u_txn = collections.Counter(h.get("txn") for _, _, _, _, h in everything)
    partial = {t: (c_txn[t], n) for t, n in u_txn.items() if c_txn[t] not in (0, n)}
    if partial:
        bad("atomic", "%d transactions partly visible (committed, in log), e.g. %s"
            % (len(partial), list(partial.items())[:5]))

    commits = aborts = 0
    for st in statuses:
        for tag, n in st.get("committed", {}).items():
            commits += 1
            if c_txn[tag] != n:
                bad("confirmed", "commit of txn %s (%d records) confirmed, %d visible read_committed"
                    % (tag, n, c_txn[tag]))
        for tag, n in st.get("aborted", {}).items():
            aborts += 1
            if c_txn[tag]:
                bad("confirmed", "abort of txn %s confirmed, %d records visible read_committed"
                    % (tag, c_txn[tag]))
            if u_txn[tag] != n:
                bad("aborted-in-log", "aborted txn %s had %d records, %d in the log (read_uncommitted)"
                    % (tag, n, u_txn[tag]))
    if aborts and len(everything) <= len(committed):
        bad("aborted-in-log", "%d aborts but read_uncommitted (%d) <= read_committed (%d)"
            % (aborts, len(everything), len(committed)))
    return {"ok": not problems, "inputs": len(inputs), "input_hw": sum(in_hw.values()),
            "committed_records": len(committed), "log_records": len(everything),
            "txns_in_log": len(u_txn), "txns_visible": sum(1 for t in c_txn if c_txn[t]),
            "confirmed_commits": commits, "confirmed_aborts": aborts,
            "missing": len(missing), "duplicated": len(dupes), "problems": problems[:50],
            "n_problems": len(problems)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--input", required=True)
    ap.add_argument("--output", required=True)
    ap.add_argument("--status", nargs="*", default=[], help="copier status JSON files")
    ap.add_argument("--json", help="write the result here")
    a = ap.parse_args()
    statuses = []
    for path in a.status:
        with open(path) as f:
            statuses.append(json.load(f))
    r = verify(a.bootstrap, a.input, a.output, statuses)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(r, f, indent=1)
    print(json.dumps(r, indent=1))
    sys.exit(0 if r["ok"] else 1)


if __name__ == "__main__":
    main()
