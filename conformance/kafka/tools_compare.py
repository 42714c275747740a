#!/usr/bin/env python3
"""Kafka 4.3.1's own admin tools against doze and against Kafka, outputs compared.

    python3 conformance/kafka/tools_compare.py                # every check below
    python3 conformance/kafka/tools_compare.py --only acls    # kafka-acls only
    python3 conformance/kafka/tools_compare.py --show         # print both outputs of each

Both brokers run with Kafka's StandardAuthorizer and User:ANONYMOUS a super user
(the tools connect over PLAINTEXT). Each command of SEQUENCES runs against doze
and against a real Kafka 4.3.1 (realkafka.py, started here), one sequence after
the other on the same brokers; outputs are normalised (the brokers' ports and
ids, Java's HashSet order of an ACL listing: lines sorted within a resource) and
compared. Prints SAME or DIFF per command; exit 1 on any DIFF. Standard library
only; needs Java and the jars realkafka.py fetches.

The `groups` sequence (kafka-consumer-groups) has members to describe: at its
{"do": "members"} step, group_members.py (confluent-kafka, run by the venv's
python: $DOZE_KAFKA_PYTHON, else conformance/needs.py's venv) holds on each
broker a consumer-protocol group G (members member-1, member-2, joined one
after the other) and a classic group C (classic-1) on a topic `events` of 4
partitions, every record consumed and committed and one more produced to
each partition (lag 1); {"do": "stop-members"} closes them (they leave). The
members' ids (random) are replaced by <member-1> and so on before comparing;
G's member rows must come in the order Kafka's TimelineHashMap gives each
broker's own ids (timeline_order), and are then compared sorted. The venv
with confluent-kafka is conformance/needs.py's, made when missing.
"""
import json
import subprocess
import argparse
import os
import re
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))   # conformance/
from dozeproc import DozeProcess  # noqa: E402
from realkafka import RealKafka, run_tool  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def venv_python():
    """The python with confluent-kafka for group_members.py: $DOZE_KAFKA_PYTHON, else
    conformance/needs.py's venv, made now when missing."""
    import needs
    return os.environ.get("DOZE_KAFKA_PYTHON") or needs.ensure()

SETTINGS = {"authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users": "User:ANONYMOUS", "group.initial.rebalance.delay.ms": "0"}

# (name, [tool args, with {bs} for --bootstrap-server's value])
SEQUENCES = {
    "acls": [
        ["kafka-topics", "--bootstrap-server", "{bs}", "--create", "--topic", "orders", "--partitions", "1"],
        ["kafka-acls", "--bootstrap-server", "{bs}", "--list"],
        ["kafka-acls", "--bootstrap-server", "{bs}", "--add", "--allow-principal", "User:alice",
         "--operation", "Read", "--operation", "Describe", "--topic", "orders"],
        ["kafka-acls", "--bootstrap-server", "{bs}", "--list", "--topic", "orders"],
        ["kafka-acls", "--bootstrap-server", "{bs}", "--add", "--allow-principal", "User:bob", "--producer",
         "--topic", "orders", "--transactional-id", "tx-1"],
        ["kafka-acls", "--bootstrap-server", "{bs}", "--list", "--transactional-id", "tx-1"],
        ["kafka-acls", "--bootstrap-server", "{bs}", "--add", "--allow-principal", "User:carol", "--consumer",
         "--topic", "orders", "--group", "billing"],
        ["kafka-acls", "--bootstrap-server", "{bs}", "--list", "--group", "billing"],
        ["kafka-acls", "--bootstrap-server", "{bs}", "--add", "--allow-principal", "User:dave", "--producer",
         "--topic", "logs-", "--resource-pattern-type", "prefixed", "--idempotent"],
        ["kafka-acls", "--bootstrap-server", "{bs}", "--list", "--topic", "logs-", "--resource-pattern-type",
         "prefixed"],
        ["kafka-acls", "--bootstrap-server", "{bs}", "--list", "--topic", "logs-2026",
         "--resource-pattern-type", "match"],
        ["kafka-acls", "--bootstrap-server", "{bs}", "--list", "--cluster"],
        ["kafka-acls", "--bootstrap-server", "{bs}", "--add", "--deny-principal", "User:mallory",
         "--operation", "All", "--topic", "*"],
        ["kafka-acls", "--bootstrap-server", "{bs}", "--list", "--topic", "*"],
        ["kafka-acls", "--bootstrap-server", "{bs}", "--list", "--principal", "User:bob"],
        ["kafka-acls", "--bootstrap-server", "{bs}", "--remove", "--force", "--allow-principal", "User:alice",
         "--operation", "Read", "--topic", "orders"],
        ["kafka-acls", "--bootstrap-server", "{bs}", "--list", "--topic", "orders"],
        ["kafka-acls", "--bootstrap-server", "{bs}", "--remove", "--force", "--topic", "orders"],
        ["kafka-acls", "--bootstrap-server", "{bs}", "--list", "--topic", "orders"],
        ["kafka-acls", "--bootstrap-server", "{bs}", "--list"],
    ],
    "scram": [
        ["kafka-configs", "--bootstrap-server", "{bs}", "--alter", "--add-config",
         "SCRAM-SHA-512=[iterations=8192,password=alice-secret]", "--entity-type", "users", "--entity-name",
         "alice"],
        ["kafka-configs", "--bootstrap-server", "{bs}", "--describe", "--entity-type", "users",
         "--entity-name", "alice"],
        ["kafka-configs", "--bootstrap-server", "{bs}", "--alter", "--delete-config", "SCRAM-SHA-512",
         "--entity-type", "users", "--entity-name", "alice"],
        ["kafka-configs", "--bootstrap-server", "{bs}", "--describe", "--entity-type", "users",
         "--entity-name", "alice"],
    ],
    "groups": [
        {"do": "members"},
        ["kafka-consumer-groups", "--bootstrap-server", "{bs}", "--list"],
        ["kafka-consumer-groups", "--bootstrap-server", "{bs}", "--list", "--type"],
        ["kafka-consumer-groups", "--bootstrap-server", "{bs}", "--list", "--type", "consumer"],
        ["kafka-consumer-groups", "--bootstrap-server", "{bs}", "--list", "--type", "classic"],
        ["kafka-consumer-groups", "--bootstrap-server", "{bs}", "--list", "--state"],
        ["kafka-consumer-groups", "--bootstrap-server", "{bs}", "--describe", "--group", "G"],
        ["kafka-consumer-groups", "--bootstrap-server", "{bs}", "--describe", "--group", "G", "--verbose"],
        ["kafka-consumer-groups", "--bootstrap-server", "{bs}", "--describe", "--group", "G", "--members"],
        ["kafka-consumer-groups", "--bootstrap-server", "{bs}", "--describe", "--group", "G", "--members",
         "--verbose"],
        ["kafka-consumer-groups", "--bootstrap-server", "{bs}", "--describe", "--group", "G", "--state"],
        ["kafka-consumer-groups", "--bootstrap-server", "{bs}", "--describe", "--group", "G", "--state",
         "--verbose"],
        ["kafka-consumer-groups", "--bootstrap-server", "{bs}", "--describe", "--group", "C", "--members",
         "--verbose"],
        ["kafka-consumer-groups", "--bootstrap-server", "{bs}", "--describe", "--group", "C", "--state",
         "--verbose"],
        ["kafka-consumer-groups", "--bootstrap-server", "{bs}", "--describe", "--all-groups", "--state"],
        {"do": "stop-members"},
        ["kafka-consumer-groups", "--bootstrap-server", "{bs}", "--describe", "--group", "G"],
        ["kafka-consumer-groups", "--bootstrap-server", "{bs}", "--describe", "--group", "G", "--members",
         "--verbose"],
        ["kafka-consumer-groups", "--bootstrap-server", "{bs}", "--describe", "--group", "G", "--state",
         "--verbose"],
        ["kafka-consumer-groups", "--bootstrap-server", "{bs}", "--list", "--type"],
    ],
}

# The groups' members of the `groups` sequence (group_members.py's arguments).
CONSUMER_MEMBERS = ["member-1", "member-2"]          # group G's, joined in this order
MEMBER_ARGS = ["--topic", "events", "--partitions", "4", "--group", "G=consumer:" + ",".join(CONSUMER_MEMBERS),
               "--group", "C=classic:classic-1"]


def timeline_order(member_ids):
    """The order Kafka 4.3.1 lists a consumer group's members in (ConsumerGroupDescribe,
    so the tool's rows), member_ids in the order they joined: its TimelineHashMap's.
    BaseHashTable puts an element in slot (hashCode * -7046029254386353131L) >>> (65 -
    log2(capacity)), appended to the slot's array; capacity starts at 2 and doubles when
    (size + 1) * 0.75 exceeds it, checked before every put, a member's update (a
    replacement) too, so once the members are updated after the last one joined the
    table is sized for one more. Its iterators (SnapshottableHashTable's Current- and
    HistoricalIterator) go through the slots in order but take each slot's elements
    from its end: members sharing a slot come newest first. Computed here apart from
    doze's code (doze_kafka.timeline_order), so that the check does not take doze's
    word for it."""
    capacity = 2
    while (len(member_ids) + 1) * 0.75 > capacity:
        capacity *= 2
    bits = capacity.bit_length() - 1

    def java_hash(text):
        h = 0
        for unit in text.encode("utf-16-be").hex(" ", 2).split():
            h = (31 * h + int(unit, 16)) & 0xFFFFFFFF
        return h - (1 << 32) if h >= 1 << 31 else h

    def slot(k):
        return ((java_hash(k) * -7046029254386353131) & (2 ** 64 - 1)) >> (64 - bits)
    joined = {k: i for i, k in enumerate(member_ids)}
    return sorted(member_ids, key=lambda k: (slot(k), -joined[k]))


def member_rows(text):
    """The member placeholders (<member-1>, ...) in the order an output's rows name them."""
    seen = []
    for name in re.findall(r"<(member-\d+)>", text):
        if name not in seen:
            seen.append(name)
    return seen


def rows_by_member(text):
    """The output with its member rows sorted (kept in their places among the other lines),
    trailing spaces off."""
    lines = [line.rstrip() for line in text.splitlines()]     # a table's last line has lost its padding
    at = [i for i, line in enumerate(lines) if re.search(r"<member-\d+>", line)]
    for i, line in zip(at, sorted(lines[i] for i in at)):
        lines[i] = line
    return "\n".join(lines)


class Members:
    """group_members.py on each broker at once; .ids[broker] = {member id: "<client id>"}."""

    def __init__(self):
        self.procs, self.ids = {}, {}
        self.order = {}                      # broker -> G's client ids in Kafka's TimelineHashMap order

    def start(self, brokers):
        for b in brokers:
            self.procs[b] = subprocess.Popen([venv_python(), os.path.join(HERE, "group_members.py"),
                                              "--bootstrap", b.bootstrap, *MEMBER_ARGS],
                                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        for b, p in self.procs.items():
            line = p.stdout.readline()                      # the helper bounds itself (--timeout 60)
            report = json.loads(line) if line.strip() else {"ready": False, "members": {}}
            self.ids[b] = {mid: f"<{cid}>" for cid, mid in report["members"].items() if mid}
            ids = {report["members"].get(cid): cid for cid in CONSUMER_MEMBERS}
            self.order[b] = [ids[m] for m in timeline_order(list(ids))] if None not in ids else None
            print(f"   members on {'kafka' if isinstance(b, RealKafka) else 'doze'}: "
                  f"{'ready' if report['ready'] else 'NOT READY'}, assignment {report.get('assignment')}, "
                  f"ids {report['members']}")

    def stop(self):
        for p in self.procs.values():
            p.stdin.close()
        for p in self.procs.values():
            try:
                p.wait(60)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        self.procs = {}
        time.sleep(1)                                        # the leaves reach the coordinators


def normalise(text, broker, ids=None):
    """Ports and the order of an ACL listing out of an output: Kafka lists the
    resources of a HashMap and each one's entries of a HashSet (of enums, whose
    hash differs per JVM run), so the order says nothing; blocks and their
    entries are sorted. ids: {member id: placeholder}, replaced (a classic
    member's id is the client id, a dash and a random UUID)."""
    text = text.replace(broker.bootstrap, "BROKER")
    for mid, name in (ids or {}).items():
        text = text.replace(mid, name)
    text = re.sub(r"\b([\w.]+)-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b", r"<\1-UUID>", text)
    text = re.sub(r"\[\d{4}-\d\d-\d\d [^\]]*\] (WARN|INFO) .*\n", "", text)   # the tools' log lines
    head, blocks = [], []
    for line in text.splitlines():
        if line.startswith(("Current ACLs for resource", "Adding ACLs for resource")):
            blocks.append([line])
        elif line.strip().startswith("(principal=") and blocks:
            blocks[-1].append(line.strip())
        elif line.strip() and not blocks:
            head.append(line)
        elif line.strip():
            blocks[-1].append(line)
    return "\n".join(head + ["\n".join([b[0]] + sorted(b[1:])) for b in sorted(blocks)]).strip()


def run_all(kafka, doze, names, show, members):
    diffs = 0
    for name in names:
        print(f"== {name}")
        for cmd in SEQUENCES[name]:
            if isinstance(cmd, dict):
                print(f"--    {cmd['do']}")
                members.start((kafka, doze)) if cmd["do"] == "members" else members.stop()
                continue
            outs = []
            for broker in (kafka, doze):
                p = run_tool(cmd[0], *[a.replace("{bs}", broker.bootstrap) for a in cmd[1:]],
                             capture_output=True, text=True, timeout=120)
                outs.append((p.returncode, normalise(p.stdout + p.stderr, broker, members.ids.get(broker))))
            same, note = outs[0] == outs[1], ""
            got = [member_rows(o[1]) for o in outs]
            if all(got):
                # G's members come in the order of their (random) ids' hashes: each broker's
                # rows must be in that order for its own ids; then the rows are compared sorted.
                want = [members.order.get(b) for b in (kafka, doze)]
                same = got == want and (outs[0][0], rows_by_member(outs[0][1])) == \
                    (outs[1][0], rows_by_member(outs[1][1]))
                if got != want or got[0] != got[1]:
                    note = "  (member rows: " + ", ".join(
                        f"{who} {','.join(g)}" + ("" if g == w else f" where its ids' order is {','.join(w or [])}")
                        for who, g, w in zip(("kafka", "doze"), got, want)) + "; the ids' TimelineHashMap order" + \
                        ("" if got == want else " NOT kept") + ")"
            diffs += not same
            print(f"{'SAME' if same else 'DIFF'}  {' '.join(cmd[:1] + cmd[3:])}{note}")
            if show or not same:
                for who, (rc, out) in zip(("kafka", "doze"), outs):
                    print(f"   {who} (rc {rc}):\n" + "\n".join("      " + line for line in out.splitlines()))
    return diffs


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", choices=sorted(SEQUENCES), action="append")
    ap.add_argument("--show", action="store_true", help="print both outputs of every command")
    a = ap.parse_args(argv)
    names = a.only or list(SEQUENCES)
    with tempfile.TemporaryDirectory(prefix="tools-compare-") as tmp:
        doze = DozeProcess(tmp, *[x for k, v in SETTINGS.items() for x in ("--override", f"{k}={v}")])
        doze.start()
        try:
            with RealKafka(extra_props=SETTINGS) as kafka:
                members = Members()
                try:
                    diffs = run_all(kafka, doze, names, a.show, members)
                finally:
                    for p in members.procs.values():
                        p.kill()
        finally:
            doze.stop()
    print(f"{'all SAME' if not diffs else f'{diffs} DIFF'}")
    return 1 if diffs else 0


if __name__ == "__main__":
    sys.exit(main())
