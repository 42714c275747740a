#!/usr/bin/env python3
"""What TLS costs Fetch: the same log read over PLAINTEXT (sendfile) and SSL
(read, encrypt, send), on one doze with both listeners.

    python3 conformance/bench/tls_fetch.py [--mb 64] [--runs 5]

Makes a throwaway CA and server certificate with the openssl command, starts
doze_kafka.py as a subprocess with PLAINTEXT and SSL listeners, produces MB
megabytes (1 KiB records, batches of 512 KiB) and then reads them all back
with Fetch (1 MiB per partition per request) over each listener in turn,
RUNS times. Reports the median MB/s of each, their ratio, and the broker's
CPU seconds per GB read. Standard library only (and the openssl command).
"""
import argparse
import os
import ssl
import statistics
import struct
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))   # conformance/
from lib import free_port  # noqa: E402
import doze_kafka as dk  # noqa: E402
from dozeproc import DozeProcess  # noqa: E402
from certs import make_certs  # noqa: E402


def connect(port, ca=None):
    """A doze_kafka.Client on 127.0.0.1:port; over TLS (trusting ca) when ca is given."""
    c = dk.Client(port, client_id="bench", timeout=30)
    if ca:
        c.sock = ssl.create_default_context(cafile=ca).wrap_socket(c.sock, server_hostname="localhost")
    return c


def fetch_all(c, end):
    offset, got = 0, 0
    while offset < end:
        r = c.call(1, 12, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, topics=[dk.Msg(
            topic="bench", partitions=[dk.Msg(partition=0, fetch_offset=offset, partition_max_bytes=1 << 20)])])
        records = r.responses[0].partitions[0].records
        pos = 0
        while pos + 61 <= len(records):
            base, length = struct.unpack_from(">qi", records, pos)
            last_delta, = struct.unpack_from(">i", records, pos + 23)
            offset = base + last_delta + 1
            pos += 12 + length
        got += len(records)
    return got


def cpu_seconds(pid):
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mb", type=int, default=64)
    ap.add_argument("--runs", type=int, default=5)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        keystore, ca = make_certs(d)
        plain_port, ssl_port = free_port(), free_port()
        doze = DozeProcess(d, "--override", f"listeners=PLAINTEXT://127.0.0.1:{plain_port},SSL://127.0.0.1:{ssl_port}",
                           "--override", "ssl.keystore.type=PEM", "--override", f"ssl.keystore.location={keystore}")
        doze.port = plain_port                      # --port sets the first listener's
        doze.start()
        try:
            c = connect(plain_port)
            c.call(19, 7, topics=[dk.Msg(name="bench", num_partitions=1, replication_factor=1, assignments=[],
                                         configs=[])], timeout_ms=10000)
            per_batch = 512
            batch = bytes(dk.build_batch([(None, os.urandom(1024), ())] * per_batch, 0, 1700000000000))
            batches = a.mb * 1024 // per_batch
            for _ in range(batches):
                c.call(0, 9, acks=1, timeout_ms=10000, topic_data=[dk.Msg(name="bench", partition_data=[
                    dk.Msg(index=0, records=batch)])])
            end = batches * per_batch
            results = {"PLAINTEXT": [], "SSL": []}
            cpu = {"PLAINTEXT": 0.0, "SSL": 0.0}
            for _ in range(a.runs):
                for name, client in (("PLAINTEXT", connect(plain_port)), ("SSL", connect(ssl_port, ca))):
                    t0, c0 = time.perf_counter(), cpu_seconds(doze.proc.pid)
                    got = fetch_all(client, end)
                    dt = time.perf_counter() - t0
                    cpu[name] += cpu_seconds(doze.proc.pid) - c0
                    results[name].append(got / dt / 1e6)
                    client.close()
            total_gb = a.runs * got / 1e9
            for name, mbs in results.items():
                print(f"{name:10s} median {statistics.median(mbs):7.1f} MB/s (runs: "
                      f"{', '.join(f'{m:.0f}' for m in mbs)}); broker CPU {cpu[name] / total_gb:.1f} s/GB")
            print(f"SSL/PLAINTEXT throughput ratio {statistics.median(results['SSL']) / statistics.median(results['PLAINTEXT']):.2f}"
                  f" ({a.mb} MB per read, {a.runs} runs)")
        finally:
            doze.stop()


if __name__ == "__main__":
    main()
