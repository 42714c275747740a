#!/usr/bin/env python3
"""The produce path's two per-batch checks, and their alternatives, timed on one core:
the CRC-32C of a batch and the walk over its records' length varints.

    python3 conformance/bench/crc.py [--seconds 1] [--sizes 1024,16384,1048576]

CRC-32C (what a Produce of a RecordBatch v2 costs before any record is read):
  folding      doze's crc32c: the batch as one integer, folded down by x^k mod P
               identities (a ladder of shifts and XORs on the whole integer), the last
               256 bits by 32 byte tables
  fold-bits    the same ladder without its first, byte-aligned fold straight from the bytes
  table        the textbook byte-at-a-time table (256 entries)
  AF_ALG       the kernel's crc32c through socket.AF_ALG, if this kernel offers it
The standard library has no CRC-32C (zlib.crc32 is the IEEE polynomial, which no
transformation turns into Castagnoli's); every row is checked against b"123456789"
-> 0xE3069283 and against doze's value for the buffer.

Record framing (Kafka's LogValidator reads every record; doze walks their length
varints only), 1 KiB records and 100-byte records:
  bytes-walk   doze's check_record_framing (a memoryview is copied to bytes once)
  view-walk    the same walk and checks, indexing the memoryview (no copy)
Prints each one's median microseconds per call and MB/s.
"""
import argparse
import os
import socket
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
import doze_kafka as dk  # noqa: E402


def table_crc(data, crc=0):
    t0, reg = dk._T0, crc ^ 0xFFFFFFFF
    for b in bytes(data):
        reg = t0[(reg ^ b) & 0xFF] ^ (reg >> 8)
    return reg ^ 0xFFFFFFFF


def fold_bits_crc(data, crc=0):
    """doze's folding without the byte-aligned first fold."""
    n = len(data)
    if n < 4:
        return table_crc(data, crc)
    nb, reg = 8 * n, crc ^ 0xFFFFFFFF
    m = int.from_bytes(data, "little") ^ reg
    while nb > dk._CRC_TAIL_BITS:
        _, s, shifts, _ = dk._LADDER[dk.bisect.bisect_right(dk._MINBITS, nb) - 1]
        lo = m & ((1 << s) - 1)
        m = (m >> s) ^ lo
        for k in shifts:
            m ^= lo << k
        nb -= s
    b = (m << (dk._CRC_TAIL_BITS - nb)).to_bytes(dk._CRC_TAIL_BITS // 8, "little")
    return dk.functools.reduce(dk.operator.xor, map(dk.operator.getitem, dk._TABS, b)) ^ 0xFFFFFFFF


def af_alg():
    """The kernel's crc32c, or None where AF_ALG (or its crc32c) is not there."""
    try:
        s = socket.socket(socket.AF_ALG, socket.SOCK_SEQPACKET, 0)
        s.bind(("hash", "crc32c"))
    except (AttributeError, OSError):
        return None

    def crc(data):
        op, _ = s.accept()
        with op:
            op.sendall(data)
            return int.from_bytes(op.recv(4), "little") ^ 0xFFFFFFFF   # the kernel's raw register
    return crc


def view_walk(records, count, start):
    """check_record_framing's every check, indexing the buffer as given (no copy)."""
    pos, end = start, len(records)
    if count * (dk.MIN_RECORD_BODY + 1) > end - pos:
        return dk.ErrorCode.INVALID_RECORD, "too many records"
    view, last = records, end - 2
    for i in range(count):
        if pos > last:
            n, pos = dk._slow_length(view, pos, end)
        elif view[pos] < 0x80:
            n = view[pos]
            pos += 1
        elif view[pos + 1] < 0x80:
            n = (view[pos] & 0x7F) | view[pos + 1] << 7
            pos += 2
        else:
            n, pos = dk._slow_length(view, pos, end)
        if n is None:
            return pos
        n = (n >> 1) ^ -(n & 1)
        if n < dk.MIN_RECORD_BODY:
            return dk.ErrorCode.INVALID_RECORD, "record %d has length %d" % (i, n)
        pos += n
        if pos > end:
            return dk.ErrorCode.INVALID_RECORD, "short"
    return None if pos == end else (dk.ErrorCode.INVALID_RECORD, "left over")


def timed(fn, arg, seconds):
    """Median seconds per call over ~seconds of calls, in 20 slices."""
    runs, deadline = [], time.perf_counter() + seconds
    while time.perf_counter() < deadline or len(runs) < 5:
        t0, k = time.perf_counter(), 0
        while k < 3 or time.perf_counter() - t0 < seconds / 20:
            fn(arg)
            k += 1
        runs.append((time.perf_counter() - t0) / k)
    return statistics.median(runs)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=1.0)
    ap.add_argument("--sizes", default="1024,16384,1048576")
    args = ap.parse_args()
    sizes = [int(x) for x in args.sizes.split(",")]
    kernel = af_alg()
    crcs = [("folding", dk.crc32c), ("fold-bits", fold_bits_crc), ("table", table_crc)]
    print("CRC-32C, Python %s; AF_ALG crc32c: %s" % (sys.version.split()[0], "yes" if kernel else "not on this kernel"))
    if kernel:
        crcs.append(("AF_ALG", kernel))
    print("%-10s %10s %12s %10s" % ("", "bytes", "us/call", "MB/s"))
    for name, fn in crcs:
        assert fn(b"123456789") == 0xE3069283, name
        for n in sizes:
            data = os.urandom(n)
            assert fn(data) == dk.crc32c(data), (name, n)
            if name == "table" and n > 16384:
                continue                                 # ~100 ms a call: the point is made
            s = timed(fn, data, args.seconds)
            print("%-10s %10d %12.1f %10.1f" % (name, n, s * 1e6, n / s / 1e6), flush=True)

    print("\nrecord framing (the batch's records' length varints)")
    print("%-10s %10s %8s %12s %10s" % ("", "bytes", "records", "us/call", "MB/s"))
    for n in sizes:
        for size in (1024, 100):
            count = max(1, (n - dk.BATCH_HEADER_SIZE) // (size + 8))
            batch = dk.build_batch([(None, os.urandom(size), ())] * count)
            view = memoryview(bytearray(batch))
            assert dk.check_record_framing(view, count, dk.BATCH_HEADER_SIZE) is None
            assert view_walk(view, count, dk.BATCH_HEADER_SIZE) is None
            for name, fn in (("bytes-walk", lambda v: dk.check_record_framing(v, count, dk.BATCH_HEADER_SIZE)),
                             ("view-walk", lambda v: view_walk(v, count, dk.BATCH_HEADER_SIZE))):
                s = timed(fn, view, args.seconds)
                print("%-10s %10d %8d %12.1f %10.1f" % (name, len(batch), count, s * 1e6, len(batch) / s / 1e6),
                      flush=True)


if __name__ == "__main__":
    main()
