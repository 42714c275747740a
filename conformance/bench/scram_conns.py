#!/usr/bin/env python3
"""New SCRAM-SHA-512 connections per second: connect, SaslHandshake, two
SaslAuthenticate, close -- at 4096 and 8192 iterations.

    python3 conformance/bench/scram_conns.py [--seconds 5] [--runs 3]

Starts doze_kafka.py as a subprocess with a SASL_PLAINTEXT listener and one
SCRAM user per iteration count (made with --add-scram), then opens
connections one after another for SECONDS, RUNS times per count, and reports
the median connections per second and the broker's CPU ms per connection.
The client computes its salted password once per user (real clients do it per
connection: that is client time, not the broker's). Standard library only.
"""
import argparse
import base64
import hashlib
import hmac
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))   # conformance/
from lib import free_port, wait_port  # noqa: E402
import doze_kafka as dk  # noqa: E402
from dozeproc import DozeProcess  # noqa: E402
from tls_fetch import connect, cpu_seconds  # noqa: E402

MECHANISM, DIGEST = "SCRAM-SHA-512", "sha512"


def login(port, user, password, salted_cache):
    c = connect(port)
    try:
        assert c.call(dk.ApiKey.SASL_HANDSHAKE, 1, mechanism=MECHANISM).error_code == 0
        nonce = base64.b64encode(os.urandom(18)).decode()
        bare = f"n={user},r={nonce}"
        first = c.call(dk.ApiKey.SASL_AUTHENTICATE, 2, auth_bytes=f"n,,{bare}".encode())
        server_first = bytes(first.auth_bytes).decode()
        fields = dict(kv.split("=", 1) for kv in server_first.split(","))
        key = (user, fields["s"], fields["i"])
        if key not in salted_cache:
            salted_cache[key] = hashlib.pbkdf2_hmac(DIGEST, password.encode(), base64.b64decode(fields["s"]),
                                                    int(fields["i"]))
        salted = salted_cache[key]
        client_key = hmac.new(salted, b"Client Key", DIGEST).digest()
        stored = hashlib.new(DIGEST, client_key).digest()
        without_proof = f"c=biws,r={fields['r']}"
        auth = f"{bare},{server_first},{without_proof}".encode()
        proof = bytes(a ^ b for a, b in zip(client_key, hmac.new(stored, auth, DIGEST).digest()))
        final = c.call(dk.ApiKey.SASL_AUTHENTICATE, 2,
                       auth_bytes=f"{without_proof},p={base64.b64encode(proof).decode()}".encode())
        assert final.error_code == 0, final
    finally:
        c.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--runs", type=int, default=3)
    a = ap.parse_args()
    counts = (4096, 8192)
    with tempfile.TemporaryDirectory(prefix="scram-bench-") as tmp:
        sasl = free_port()
        jaas = "org.apache.kafka.common.security.scram.ScramLoginModule required;"
        args = ["--override", f"listeners=PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:{sasl}",
                "--override", f"sasl.enabled.mechanisms={MECHANISM}",
                "--override", f"listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config={jaas}"]
        for n in counts:
            args += ["--add-scram", f"{MECHANISM}=[name=u{n},iterations={n},password=p{n}]"]
        broker = DozeProcess(tmp, *args)
        broker.start()
        wait_port(sasl)
        cache, rows = {}, []
        try:
            for n in counts:
                login(sasl, f"u{n}", f"p{n}", cache)               # warm: the client's PBKDF2 once
                rates, cpu = [], []
                for _ in range(a.runs):
                    done, c0, t0 = 0, cpu_seconds(broker.proc.pid), time.perf_counter()
                    while time.perf_counter() - t0 < a.seconds:
                        login(sasl, f"u{n}", f"p{n}", cache)
                        done += 1
                    secs = time.perf_counter() - t0
                    rates.append(done / secs)
                    cpu.append((cpu_seconds(broker.proc.pid) - c0) * 1000 / done)
                rows.append((n, statistics.median(rates), min(rates), max(rates), statistics.median(cpu)))
        finally:
            broker.stop()
    print(f"{MECHANISM} connections (connect, handshake, 2 SaslAuthenticate), {a.runs} runs of {a.seconds:.0f} s:")
    for n, med, lo, hi, cpu in rows:
        print(f"  {n:5d} iterations: {med:7.1f} conn/s (min {lo:.1f}, max {hi:.1f}); broker {cpu:.2f} ms CPU each")
    return 0


if __name__ == "__main__":
    sys.exit(main())
