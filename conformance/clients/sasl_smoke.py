#!/usr/bin/env python3
"""librdkafka (confluent-kafka) authenticating to doze: PLAIN, SCRAM-SHA-512 and
SCRAM-SHA-256 over SASL_PLAINTEXT and SASL_SSL, and a wrong password.

    python3 conformance/clients/sasl_smoke.py

Starts doze_kafka.py with three listeners (PLAINTEXT, SASL_PLAINTEXT, SASL_SSL
with a throwaway certificate made by the openssl command), PLAIN users in the
listeners' JAAS configs and SCRAM users made with --add-scram; then, per
listener and mechanism, produces 100 records with acks=all and reads them back
in a group. The wrong password must get Kafka's SASL_AUTHENTICATION_FAILED
message and deliver nothing; no password may appear in doze's log. Exit 0 when
all of that holds. Runs itself in conformance/needs.py's venv (confluent-kafka).
"""
import os
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
DOZE = os.path.join(HERE, "..", "..", "doze_kafka.py")
sys.path.insert(0, os.path.join(HERE, ".."))
import needs  # noqa: E402
needs.venv()
from confluent_kafka import Consumer, Producer  # noqa: E402
from certs import make_certs  # noqa: E402

PASSWORDS = {"alice": "alice-secret", "bob": "bob-secret", "carol": "carol-secret"}
CASES = [("PLAIN", "alice", "alice-secret"), ("SCRAM-SHA-512", "bob", "bob-secret"),
         ("SCRAM-SHA-256", "carol", "carol-secret"), ("SCRAM-SHA-512", "bob", "wrong")]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_doze(d, keystore):
    ports = {"PLAINTEXT": free_port(), "SASL_PLAINTEXT": free_port(), "SASL_SSL": free_port()}
    jaas = ("org.apache.kafka.common.security.plain.PlainLoginModule required "
            f'user_alice="{PASSWORDS["alice"]}";')
    args = [sys.executable, DOZE, "--data-dir", f"{d}/data",
            "--override", "listeners=" + ",".join(f"{n}://127.0.0.1:{p}" for n, p in ports.items()),
            "--override", "sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-512,SCRAM-SHA-256",
            "--override", f"listener.name.sasl_plaintext.plain.sasl.jaas.config={jaas}",
            "--override", f"listener.name.sasl_ssl.plain.sasl.jaas.config={jaas}",
            "--override", "ssl.keystore.type=PEM", "--override", f"ssl.keystore.location={keystore}",
            "--add-scram", f"SCRAM-SHA-512=[name=bob,password={PASSWORDS['bob']},iterations=8192]",
            "--add-scram", f"SCRAM-SHA-256=[name=carol,password={PASSWORDS['carol']}]"]
    log = open(f"{d}/broker.log", "w")
    proc = subprocess.Popen(args, stdout=log, stderr=log)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", ports["SASL_SSL"]), timeout=1).close()
            return proc, ports
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"doze did not start: see {d}/broker.log")


def round_trip(conf, topic):
    """-> (records acknowledged, records read back, the first client error)."""
    errors, delivered = [], []
    producer = Producer(dict(conf, **{"acks": "all", "error_cb": lambda e: errors.append(str(e))}))
    for i in range(100):
        producer.produce(topic, value=b"v%d" % i, on_delivery=lambda err, msg: delivered.append(err))
    producer.flush(10)
    acked = sum(1 for err in delivered if err is None)
    got = 0
    if acked:
        consumer = Consumer(dict(conf, **{"group.id": "g-" + topic, "auto.offset.reset": "earliest"}))
        consumer.subscribe([topic])
        deadline = time.time() + 20
        while got < acked and time.time() < deadline:
            m = consumer.poll(0.5)
            got += m is not None and not m.error()
        consumer.close()
    return acked, got, errors[0] if errors else ""


def main():
    failures = 0
    with tempfile.TemporaryDirectory() as d:
        keystore, ca = make_certs(d)
        proc, ports = start_doze(d, keystore)
        try:
            for protocol in ("SASL_PLAINTEXT", "SASL_SSL"):
                for mechanism, user, password in CASES:
                    conf = {"bootstrap.servers": f"127.0.0.1:{ports[protocol]}", "security.protocol": protocol,
                            "sasl.mechanism": mechanism, "sasl.username": user, "sasl.password": password,
                            "ssl.ca.location": ca}
                    topic = f"smoke-{protocol}-{mechanism}-{user}".lower().replace("_", "-")
                    acked, got, error = round_trip(conf, topic)
                    wrong = password not in PASSWORDS.values()
                    ok = (acked == 0 and "invalid credentials with SASL mechanism" in error) if wrong \
                        else (acked == got == 100)
                    failures += not ok
                    print(f"{'ok  ' if ok else 'FAIL'} {protocol:14s} {mechanism:13s} {user:5s} "
                          f"{'wrong password' if wrong else ''} acked {acked} read {got} {error[:110]}")
        finally:
            proc.terminate()
            proc.wait(20)
        log = open(f"{d}/broker.log").read()
        leaked = [p for p in PASSWORDS.values() if p in log]
        print(f"{log.count('authenticated as')} authentications in doze's log; passwords in it: {leaked or 'none'}")
        failures += bool(leaked)
    print("RESULT:", "ok" if not failures else f"{failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
