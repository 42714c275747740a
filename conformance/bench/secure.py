#!/usr/bin/env python3
"""What security costs: produce throughput over PLAINTEXT, SASL_PLAINTEXT and
SASL_SSL, and the memory of idle TLS connections.

    python3 conformance/bench/secure.py [--records 100000] [--size 1024] [--runs 3] [--idle 1000]

One doze (a subprocess) with four listeners: PLAINTEXT, SASL_PLAINTEXT and
SASL_SSL (SCRAM-SHA-512) and SSL, a throwaway certificate made with the
openssl command, Kafka's StandardAuthorizer (the SASL user is granted WRITE on
the topics; PLAINTEXT's User:ANONYMOUS is a super user). Each round produces
RECORDS records of SIZE bytes with librdkafka (confluent-kafka, acks=all, no
compression, 3 partitions, a fresh topic) over each listener in turn, the
order rotated each round so that the machine's drift hits all three; medians
and the spread are printed, with each listener's ratio to PLAINTEXT. Then IDLE
TLS connections are opened to the SSL listener (handshake done, then silent)
and the broker's RSS is read before and after. Runs itself in
conformance/needs.py's venv.
"""
import argparse
import os
import socket
import ssl
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))   # conformance/
from lib import free_port, wait_port  # noqa: E402
import needs  # noqa: E402
from certs import make_certs  # noqa: E402
from dozeproc import DozeProcess  # noqa: E402
from produce import produce, rss_kib  # noqa: E402

USER, PASSWORD = "bench", "bench-secret"
LISTENERS = ("PLAINTEXT", "SASL_PLAINTEXT", "SASL_SSL")


def rss_mib(pid):
    return rss_kib(pid) / 1024


def settled_rss(pid, limit_s=10):
    last = rss_mib(pid)
    deadline = time.time() + limit_s
    while time.time() < deadline:
        time.sleep(0.5)
        now = rss_mib(pid)
        if abs(now - last) <= last * 0.005:
            return now
        last = now
    return last


def client_conf(listener, ports, ca):
    conf = {"bootstrap.servers": f"127.0.0.1:{ports[listener]}"}
    if listener.startswith("SASL_"):
        conf.update({"security.protocol": listener, "sasl.mechanism": "SCRAM-SHA-512",
                     "sasl.username": USER, "sasl.password": PASSWORD})
    if listener.endswith("SSL"):
        conf["ssl.ca.location"] = ca
    return conf


def setup(ports, topics):
    """Topics and the SASL user's ACLs, made by the super user over PLAINTEXT."""
    from confluent_kafka.admin import (AclBinding, AclOperation, AclPermissionType, AdminClient, NewTopic,
                                       ResourcePatternType, ResourceType)
    admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{ports['PLAINTEXT']}"})
    for f in admin.create_topics([NewTopic(t, 3, 1) for t in topics]).values():
        f.result(30)
    for f in admin.create_acls([AclBinding(ResourceType.TOPIC, "bench-", ResourcePatternType.PREFIXED,
                                           f"User:{USER}", "*", AclOperation.WRITE,
                                           AclPermissionType.ALLOW)]).values():
        f.result(30)


def idle_tls(port, ca, n):
    ctx = ssl.create_default_context(cafile=ca)
    conns = []
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", port), timeout=30)
        conns.append(ctx.wrap_socket(s, server_hostname="localhost"))
    return conns


def main():
    needs.venv()
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=100000)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--idle", type=int, default=1000)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        keystore, ca = make_certs(d)
        ports = {n: free_port() for n in LISTENERS + ("SSL",)}
        jaas = "org.apache.kafka.common.security.scram.ScramLoginModule required;"
        settings = {"listeners": ",".join(f"{n}://127.0.0.1:{p}" for n, p in ports.items()),
                    "sasl.enabled.mechanisms": "SCRAM-SHA-512",
                    "listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config": jaas,
                    "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": jaas,
                    "ssl.keystore.type": "PEM", "ssl.keystore.location": keystore,
                    "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                    "super.users": "User:ANONYMOUS"}
        args = ["--log-level", "WARNING", "--add-scram", f"SCRAM-SHA-512=[name={USER},password={PASSWORD}]"]
        for k, v in settings.items():
            args += ["--override", f"{k}={v}"]
        broker = DozeProcess(d, *args)
        broker.port = ports["PLAINTEXT"]
        broker.start()
        for p in ports.values():
            wait_port(p)
        try:
            topics = [f"bench-{r}-{n}" for r in range(a.runs) for n in LISTENERS]
            setup(ports, topics)
            rates = {n: [] for n in LISTENERS}
            for r in range(a.runs):
                order = LISTENERS[r % 3:] + LISTENERS[:r % 3]
                for n in order:
                    rates[n].append(produce(client_conf(n, ports, ca), f"bench-{r}-{n}", a.records, a.size)[0])
                    print(f"round {r + 1} {n:15s} {rates[n][-1]:6.1f} MB/s", flush=True)
            base = statistics.median(rates["PLAINTEXT"])
            print(f"\nproduce, librdkafka, {a.size} B records, acks=all, 3 partitions, {a.records} records, "
                  f"median of {a.runs} (spread):")
            for n in LISTENERS:
                m = statistics.median(rates[n])
                print(f"  {n:15s} {m:6.1f} MB/s ({min(rates[n]):.1f}-{max(rates[n]):.1f}), {m / base:.2f} of PLAINTEXT")
            before = settled_rss(broker.proc.pid)
            conns = idle_tls(ports["SSL"], ca, a.idle)
            time.sleep(1)
            after = settled_rss(broker.proc.pid)
            print(f"\nidle TLS connections: RSS {before:.1f} MiB -> {after:.1f} MiB with {len(conns)} open "
                  f"({(after - before) * 1024 / max(1, len(conns)):.1f} KiB each)")
            for c in conns:
                c.close()
        finally:
            broker.stop()


if __name__ == "__main__":
    main()
