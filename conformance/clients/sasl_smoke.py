#!/usr/bin/env python3
"""librdkafka (confluent-kafka, and kcat) authenticating to doze: PLAIN,
SCRAM-SHA-512 and SCRAM-SHA-256 over SASL_PLAINTEXT and SASL_SSL, a wrong
password, and a client certificate over SSL.

    python3 conformance/clients/sasl_smoke.py

Starts doze_kafka.py with four listeners (PLAINTEXT, SASL_PLAINTEXT, SASL_SSL
and SSL with ssl.client.auth=required, a throwaway CA and certificates made by
the openssl command), PLAIN users in the listeners' JAAS configs and SCRAM
users made with --add-scram; then, per listener and mechanism, produces 100
records with acks=all and reads them back in a group, and the same with kcat
(-P, then -C -e); and both with a client certificate (CN=dave) over SSL. The
wrong password must get Kafka's SASL_AUTHENTICATION_FAILED message and
deliver nothing; no password may appear in doze's log. Needs kcat on PATH
(apt-get install -y kcat). Exit 0 when
all of that holds. Runs itself in conformance/needs.py's venv (confluent-kafka).
"""
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))   # conformance/
from lib import DOZE, free_port, wait_port  # noqa: E402
import needs  # noqa: E402
needs.venv()
from confluent_kafka import Consumer, Producer  # noqa: E402
from certs import make_certs, make_client_cert  # noqa: E402

PASSWORDS = {"alice": "alice-secret", "bob": "bob-secret", "carol": "carol-secret"}
CASES = [("PLAIN", "alice", "alice-secret"), ("SCRAM-SHA-512", "bob", "bob-secret"),
         ("SCRAM-SHA-256", "carol", "carol-secret"), ("SCRAM-SHA-512", "bob", "wrong")]


def start_doze(d, keystore):
    ports = {"PLAINTEXT": free_port(), "SASL_PLAINTEXT": free_port(), "SASL_SSL": free_port(), "SSL": free_port()}
    jaas = ("org.apache.kafka.common.security.plain.PlainLoginModule required "
            f'user_alice="{PASSWORDS["alice"]}";')
    args = [sys.executable, DOZE, "--data-dir", f"{d}/data",
            "--override", "listeners=" + ",".join(f"{n}://127.0.0.1:{p}" for n, p in ports.items()),
            "--override", "sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-512,SCRAM-SHA-256",
            "--override", f"listener.name.sasl_plaintext.plain.sasl.jaas.config={jaas}",
            "--override", f"listener.name.sasl_ssl.plain.sasl.jaas.config={jaas}",
            "--override", "ssl.keystore.type=PEM", "--override", f"ssl.keystore.location={keystore}",
            "--override", "listener.name.ssl.ssl.client.auth=required",
            "--override", "listener.name.ssl.ssl.truststore.type=PEM",
            "--override", f"listener.name.ssl.ssl.truststore.location={d}/ca.pem",
            "--add-scram", f"SCRAM-SHA-512=[name=bob,password={PASSWORDS['bob']},iterations=8192]",
            "--add-scram", f"SCRAM-SHA-256=[name=carol,password={PASSWORDS['carol']}]"]
    log = open(f"{d}/broker.log", "w")
    proc = subprocess.Popen(args, stdout=log, stderr=log)
    try:
        wait_port(ports["SASL_SSL"])
    except RuntimeError:
        raise RuntimeError(f"doze did not start: see {d}/broker.log") from None
    return proc, ports


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


def kcat_round_trip(conf, topic):
    """The same with kcat: 100 records with -P, read back with -C -e ->
    (kcat -P's exit status, records read, the end of its error output)."""
    x = [a for k, v in conf.items() if k != "bootstrap.servers" for a in ("-X", f"{k}={v}")]
    base = ["kcat", "-b", conf["bootstrap.servers"], *x, "-t", topic]
    p = subprocess.run(base + ["-P"], input=b"".join(b"v%d\n" % i for i in range(100)), capture_output=True,
                       timeout=60)
    c = subprocess.run(base + ["-C", "-e", "-q", "-o", "beginning"], capture_output=True, timeout=60)
    return p.returncode, len(c.stdout.splitlines()), (p.stderr or c.stderr).decode(errors="replace")[-110:]


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
                    if not wrong:
                        rc, read, error = kcat_round_trip(conf, topic + "-kcat")
                        ok = rc == 0 and read == 100
                        failures += not ok
                        print(f"{'ok  ' if ok else 'FAIL'} {protocol:14s} {mechanism:13s} {user:5s} kcat "
                              f"exit {rc} read {read} {'' if ok else error}")
            cert, key = make_client_cert(d, "dave")        # TLS with a client certificate: no SASL
            conf = {"bootstrap.servers": f"127.0.0.1:{ports['SSL']}", "security.protocol": "SSL",
                    "ssl.ca.location": ca, "ssl.certificate.location": cert, "ssl.key.location": key}
            acked, got, error = round_trip(conf, "smoke-ssl-cert")
            rc, read, kerror = kcat_round_trip(conf, "smoke-ssl-cert-kcat")
            for who, ok, shown in (("confluent", acked == got == 100, f"acked {acked} read {got} {error[:110]}"),
                                   ("kcat", rc == 0 and read == 100, f"exit {rc} read {read} {kerror if rc else ''}")):
                failures += not ok
                print(f"{'ok  ' if ok else 'FAIL'} {'SSL':14s} {'certificate':13s} dave  {who} {shown}")
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
