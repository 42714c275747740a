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
"""
import argparse
import os
import re
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))   # conformance/
from dozeproc import DozeProcess  # noqa: E402
from realkafka import RealKafka, run_tool  # noqa: E402

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
}


def normalise(text, broker):
    """Ports and the order of an ACL listing out of an output: Kafka lists the
    resources of a HashMap and each one's entries of a HashSet (of enums, whose
    hash differs per JVM run), so the order says nothing; blocks and their
    entries are sorted."""
    text = text.replace(broker.bootstrap, "BROKER")
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


def run_all(kafka, doze, names, show):
    diffs = 0
    for name in names:
        print(f"== {name}")
        for cmd in SEQUENCES[name]:
            outs = []
            for broker in (kafka, doze):
                p = run_tool(cmd[0], *[a.replace("{bs}", broker.bootstrap) for a in cmd[1:]],
                             capture_output=True, text=True, timeout=120)
                outs.append((p.returncode, normalise(p.stdout + p.stderr, broker)))
            same = outs[0] == outs[1]
            diffs += not same
            print(f"{'SAME' if same else 'DIFF'}  {' '.join(cmd[:1] + cmd[3:])}")
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
                diffs = run_all(kafka, doze, names, a.show)
        finally:
            doze.stop()
    print(f"{'all SAME' if not diffs else f'{diffs} DIFF'}")
    return 1 if diffs else 0


if __name__ == "__main__":
    sys.exit(main())
