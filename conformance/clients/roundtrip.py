#!/usr/bin/env python3
"""Client interop round trip for doze-kafka (or any Kafka-compatible broker).

For every client x codec this script

  1. creates a fresh 3-partition topic  rt-<client>-<codec>-<random>,
  2. produces N records (keys, values of varying size, 1-3 headers each)
     with acks=all and that compression codec, using the client under test,
  3. reads the first record batches of every partition back with a raw
     Fetch request (stdlib decoder below) and checks that the stored batches
     carry compression codec X in their attributes and have a valid CRC32C,
  4. consumes everything back from the beginning of all 3 partitions with
     the SAME client and verifies every record byte for byte (key, value,
     headers in order), that every key stayed on one partition, that offsets
     are unique and increasing and that the producer's order is kept within
     each partition,

then prints a table and exits non-zero if anything failed.

Clients:
  kcat          kcat (librdkafka) CLI, -P with -K and -H, -C -e -f.  Line based:
                text keys/values; -H applies to every message of one kcat run,
                so records are produced in 10 blocks (one kcat run each) whose
                header sets differ (1, 2 or 3 headers); headers are verified
                per record against the block's set.
  confluent     confluent-kafka (librdkafka) Python client.  Binary keys and
                values, empty and null keys/values, null and empty header
                values, duplicate header keys, 1-3 headers per record.
  kafka-python  kafka-python.  Same binary data as confluent.
  console       Apache Kafka's own kafka-console-producer / -consumer, run from
                the Maven jars through conformance/kafka/realkafka.py (override
                with --console-cmd).  Line based: text, per-record headers.

Usage:
  python3 conformance/clients/roundtrip.py --bootstrap 127.0.0.1:9092 \
      [--records 100000] [--clients kcat,confluent,kafka-python,console] \
      [--codecs none,gzip,snappy,lz4,zstd] [--consume-mode assign|group]

Needs: kcat on PATH (apt-get install -y kcat) and java for the console tools; the
Python libraries come from conformance/needs.py's venv, where it runs itself.
The script itself (generator, raw Fetch decoder, verifier) is stdlib-only;
client libraries are imported lazily.
"""

import argparse
import json
import os
import random
import shlex
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import time
import uuid

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))   # conformance/
import lib  # noqa: E402
import needs  # noqa: E402

REALKAFKA = os.path.join(lib.CONFORMANCE, "kafka", "realkafka.py")

ALL_CLIENTS = ["kcat", "confluent", "kafka-python", "console"]
ALL_CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
CODEC_ID = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
CODEC_NAME = {v: k for k, v in CODEC_ID.items()}
PARTITIONS = 3
NKEYS = 1000          # distinct keys; record i uses key number i % NKEYS
KCAT_BLOCKS = 10      # kcat runs per produce step (one header set each)


def log(msg):
    print(msg, file=sys.stderr, flush=True)


# =========================================================================== data
#
# Three profiles:
#   binary  confluent, kafka-python: arbitrary bytes everywhere, edge cases.
#   text    console: UTF-8 text without \t \n \r; header values without , : \t.
#   kcat    text keys/values like "text"; headers per block (see module doc).
#
# Every record is identified by its sequence number: the first header
# "rt.seq" (binary, text) or the value prefix "<seq>|" (kcat).

TEXT_CHARS = ("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
              "     .,;:!?-_=+*/()[]{}<>@#$%&'\"~^`|\\"
              "éèßüöñçøåÆЖжΩλ€£¥日本語中文한국어🚀🙂")
HDR_CHARS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-éü日本"
WORDS = ("alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima "
         "mike november oscar papa quebec romeo sierra tango uniform victor whiskey "
         "xray yankee zulu").split()


class Rec(object):
    __slots__ = ("seq", "key", "value", "headers")

    def __init__(self, seq, key, value, headers):
        self.seq = seq
        self.key = key          # bytes or None
        self.value = value      # bytes or None
        self.headers = headers  # list of (str, bytes or None)


def _value_size(i):
    if i % 1000 == 999:
        return 16384 + (i * 7) % 8192          # a few large values
    if i % 100 == 50:
        return 2048 + (i * 13) % 2048
    return 1 + (i * 2654435761 >> 7) % 400     # mostly small, varied


class Blobs(object):
    def __init__(self, seed=20240601):
        rnd = random.Random(seed)
        self.rand = rnd.randbytes(1 << 20) if hasattr(rnd, "randbytes") else \
            bytes(rnd.getrandbits(8) for _ in range(1 << 20))
        self.text = "".join(rnd.choice(TEXT_CHARS) for _ in range(1 << 18))
        prose, size = [], 0
        while size < (1 << 18):
            prose.append(rnd.choice(WORDS))
            size += len(prose[-1]) + 1
        self.prose = " ".join(prose)
        self.hdr = "".join(rnd.choice(HDR_CHARS) for _ in range(1 << 14))

    def text_slice(self, i, n):
        src = self.prose if i % 3 == 0 else self.text   # some compressible, some not
        off = (i * 7919) % (len(src) - n - 1)
        s = src[off:off + n]
        return s.strip(" ") or "x"   # no leading/trailing blanks: line tools are fine
        # with them, but keep the text profile unambiguous

    def bin_slice(self, i, n):
        if i % 2 == 0:
            off = (i * 104729) % (len(self.rand) - n - 1)
            return self.rand[off:off + n]
        s = self.prose
        off = (i * 7919) % (len(s) - n - 1)
        return s[off:off + n].encode("utf-8")[:n]

    def hdr_text(self, i, n):
        off = (i * 31) % (len(self.hdr) - n - 1)
        return self.hdr[off:off + n]


def text_key(ki):
    w = WORDS[ki % len(WORDS)]
    if ki % 7 == 1:
        return ("ключ-%05d-%s-日本" % (ki, w)).encode("utf-8")
    return ("key-%05d-%s" % (ki, w[: 1 + ki % 8])).encode("utf-8")


def binary_key(ki):
    if ki == 3:
        return b""                                    # empty (not null) key
    if ki % 7 == 0:
        return struct.pack(">I", ki) + bytes((ki * k + 9) % 256 for k in range(ki % 13))
    return text_key(ki)


def make_records(n, profile, blobs):
    recs = []
    for i in range(n):
        ki = i % NKEYS
        if profile.startswith("binary"):
            key = None if i % 1009 == 17 else binary_key(ki)
            if i % 1013 == 5 and key is not None:
                value = None                          # tombstone / null value
            elif i % 97 == 0:
                value = b""                           # empty value
            else:
                value = blobs.bin_slice(i, _value_size(i))
            hs = [("rt.seq", str(i).encode())]
            nh = 1 + i % 3
            if nh >= 2:
                if i % 50 == 2:
                    # null header value; kafka-python cannot send one
                    hs.append(("trace", None if profile == "binary" else b"no-null"))
                elif i % 50 == 5:
                    hs.append(("trace", b""))          # empty header value
                else:
                    hs.append(("trace", ("t-%x" % (i * 2654435761 & 0xffffffff)).encode()))
            if nh >= 3:
                if i % 40 == 8:
                    hs.append(("trace", b"duplicate-key"))   # duplicate header key
                elif i % 40 == 20:
                    hs.append(("заголовок", blobs.hdr_text(i, 12).encode("utf-8")))
                else:
                    hs.append(("blob", blobs.bin_slice(i + 1, 1 + i % 64)))
            recs.append(Rec(i, key, value, hs))
        else:
            key = text_key(ki)
            value = ("%d|" % i + blobs.text_slice(i, _value_size(i))).encode("utf-8")
            if profile == "kcat":
                hs = kcat_block_headers(kcat_block(i, n))
            else:
                hs = [("rt.seq", str(i).encode())]
                nh = 1 + i % 3
                if nh >= 2:
                    hs.append(("trace", ("t-%x" % (i * 2654435761 & 0xffffffff)).encode()))
                if nh >= 3:
                    hs.append(("txt", blobs.hdr_text(i, 1 + i % 20).encode("utf-8")))
            recs.append(Rec(i, key, value, hs))
    return recs


def kcat_block(i, n):
    size = max(1, -(-n // KCAT_BLOCKS))
    return i // size


def kcat_block_headers(b):
    hs = [("rt.block", str(b).encode())]
    if b % 3 >= 1:
        hs.append(("trace", ("blk-%d-é" % (b * 7919)).encode("utf-8")))
    if b % 3 >= 2:
        hs.append(("content.type", b"text/plain"))
    return hs


def seq_of(rec_value, headers, profile):
    """Sequence number of a consumed record, or None."""
    try:
        if profile == "kcat":
            return int(rec_value.split(b"|", 1)[0])
        for hk, hv in headers or ():
            if hk == "rt.seq" and hv is not None:
                return int(hv)
    except (ValueError, AttributeError, IndexError):
        pass
    return None


# =========================================================================== verify

class Got(object):
    __slots__ = ("partition", "offset", "key", "value", "headers")

    def __init__(self, partition, offset, key, value, headers):
        self.partition = partition
        self.offset = offset
        self.key = key
        self.value = value
        self.headers = headers


def _short(b, n=60):
    r = repr(b)
    return r if len(r) <= n else r[:n] + "..."


def verify(expected, got, profile):
    res = {"read": len(got), "matched": 0, "missing": 0, "duplicates": 0, "unknown": 0,
           "mismatched": 0, "key_partition_conflicts": 0, "order_violations": 0,
           "offset_violations": 0, "partitions_used": 0, "problems": []}
    probs = res["problems"]

    def problem(msg):
        if len(probs) < 12:
            probs.append(msg)

    seen = {}
    key_part = {}
    by_part = {}
    for g in got:
        s = seq_of(g.value, g.headers, profile)
        if s is None or not (0 <= s < len(expected)):
            res["unknown"] += 1
            problem("p%d@%d: unidentifiable record key=%s value=%s headers=%s"
                    % (g.partition, g.offset, _short(g.key), _short(g.value), _short(g.headers)))
            continue
        if s in seen:
            res["duplicates"] += 1
            problem("seq %d read twice (p%d@%d and p%d@%d)" % (
                s, seen[s].partition, seen[s].offset, g.partition, g.offset))
            continue
        seen[s] = g
        by_part.setdefault(g.partition, []).append((g.offset, s))
        e = expected[s]
        bad = []
        if g.key != e.key:
            bad.append("key %s != %s" % (_short(g.key), _short(e.key)))
        if g.value != e.value:
            gl = -1 if g.value is None else len(g.value)
            el = -1 if e.value is None else len(e.value)
            bad.append("value (len %d) != expected (len %d)%s" % (
                gl, el, "" if gl != el or gl < 0 else
                " first diff at byte %d" % next(i for i in range(gl) if g.value[i] != e.value[i])))
        if list(g.headers) != list(e.headers):
            bad.append("headers %s != %s" % (_short(g.headers, 200), _short(e.headers, 200)))
        if bad:
            res["mismatched"] += 1
            problem("seq %d (p%d@%d): %s" % (s, g.partition, g.offset, "; ".join(bad)))
        else:
            res["matched"] += 1
        if e.key:   # librdkafka partitions empty keys like null ones: at random
            p0 = key_part.setdefault(e.key, g.partition)
            if p0 != g.partition:
                res["key_partition_conflicts"] += 1
                problem("key %s on partitions %d and %d" % (_short(e.key), p0, g.partition))
    res["missing"] = len(expected) - len(seen)
    if res["missing"]:
        miss = [i for i in range(len(expected)) if i not in seen][:10]
        problem("%d records never read, e.g. seq %s" % (res["missing"], miss))
    for p, lst in by_part.items():
        lst.sort()
        for (o1, s1), (o2, s2) in zip(lst, lst[1:]):
            if o2 <= o1:
                res["offset_violations"] += 1
                problem("p%d: offset %d repeated/out of order" % (p, o2))
            if s2 <= s1:
                res["order_violations"] += 1
                problem("p%d: seq %d at offset %d after seq %d at offset %d"
                        % (p, s2, o2, s1, o1))
    res["partitions_used"] = len([p for p in by_part if by_part[p]])
    if len(expected) >= 100 and res["partitions_used"] < PARTITIONS:
        problem("only %d of %d partitions hold data" % (res["partitions_used"], PARTITIONS))
    res["ok"] = (res["matched"] == len(expected) and res["read"] == len(expected)
                 and not res["key_partition_conflicts"] and not res["order_violations"]
                 and not res["offset_violations"]
                 and (len(expected) < 100 or res["partitions_used"] == PARTITIONS))
    return res


# =========================================================================== raw wire
# Just enough of the Kafka protocol (stdlib) to ask ApiVersions and Fetch the
# first bytes of each partition, then decode RecordBatch headers.

def _crc32c_table():
    t = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        t.append(c)
    return t


_CRC32C = _crc32c_table()


def crc32c(data):
    c = 0xFFFFFFFF
    t = _CRC32C
    for b in data:
        c = t[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def _kstr(s):
    b = s.encode("utf-8")
    return struct.pack(">h", len(b)) + b


class Reader(object):
    def __init__(self, buf):
        self.b = buf
        self.o = 0

    def take(self, fmt):
        v = struct.unpack_from(fmt, self.b, self.o)
        self.o += struct.calcsize(fmt)
        return v[0] if len(v) == 1 else v

    def string(self):
        n = self.take(">h")
        if n < 0:
            return None
        s = self.b[self.o:self.o + n].decode("utf-8")
        self.o += n
        return s

    def bytes_(self):
        n = self.take(">i")
        if n < 0:
            return None
        s = self.b[self.o:self.o + n]
        self.o += n
        return s


class Wire(object):
    def __init__(self, host, port, timeout=15.0):
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.corr = 0

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass

    def call(self, api_key, version, body):
        """Non-flexible request header v1 / response header v0."""
        self.corr += 1
        hdr = struct.pack(">hhi", api_key, version, self.corr) + _kstr("rt-rawcheck")
        msg = hdr + body
        self.sock.sendall(struct.pack(">i", len(msg)) + msg)
        n = struct.unpack(">i", lib.recv_exactly(self.sock, 4))[0]
        resp = lib.recv_exactly(self.sock, n)
        corr = struct.unpack_from(">i", resp)[0]
        if corr != self.corr:
            raise ValueError("correlation id %d != %d" % (corr, self.corr))
        return resp[4:]

    def api_versions(self):
        r = Reader(self.call(18, 0, b""))
        err = r.take(">h")
        out = {}
        for _ in range(r.take(">i")):
            k, lo, hi = r.take(">hhh")
            out[k] = (lo, hi)
        return err, out

    def fetch(self, version, topic, partitions, part_max=262144):
        v = version
        b = struct.pack(">iii", -1, 500, 1)
        if v >= 3:
            b += struct.pack(">i", 4 << 20)
        if v >= 4:
            b += struct.pack(">b", 0)
        if v >= 7:
            b += struct.pack(">ii", 0, -1)
        b += struct.pack(">i", 1) + _kstr(topic) + struct.pack(">i", len(partitions))
        for p in partitions:
            b += struct.pack(">i", p)
            if v >= 9:
                b += struct.pack(">i", -1)
            b += struct.pack(">q", 0)
            if v >= 5:
                b += struct.pack(">q", -1)
            b += struct.pack(">i", part_max)
        if v >= 7:
            b += struct.pack(">i", 0)
        if v >= 11:
            b += _kstr("")
        r = Reader(self.call(1, v, b))
        if v >= 1:
            r.take(">i")
        if v >= 7:
            top_err = r.take(">h")
            r.take(">i")
            if top_err:
                raise ValueError("Fetch top-level error %d" % top_err)
        out = {}
        for _ in range(r.take(">i")):
            r.string()
            for _ in range(r.take(">i")):
                p = r.take(">i")
                err = r.take(">h")
                hwm = r.take(">q")
                if v >= 4:
                    r.take(">q")
                if v >= 5:
                    r.take(">q")
                if v >= 4:
                    na = r.take(">i")
                    for _ in range(max(na, 0)):
                        r.take(">qq")
                if v >= 11:
                    r.take(">i")
                recs = r.bytes_()
                out[p] = (err, hwm, recs or b"")
        return out


def decode_batches(data):
    """RecordBatch headers of every complete batch in data."""
    out = []
    o = 0
    while o + 61 <= len(data):
        base, blen = struct.unpack_from(">qi", data, o)
        end = o + 12 + blen
        if blen < 49 or end > len(data):
            break
        magic = data[o + 16]
        if magic != 2:
            out.append({"base": base, "magic": magic})
            o = end
            continue
        crc = struct.unpack_from(">I", data, o + 17)[0]
        attrs = struct.unpack_from(">h", data, o + 21)[0]
        count = struct.unpack_from(">i", data, o + 57)[0]
        out.append({"base": base, "magic": magic, "codec": attrs & 7, "attrs": attrs,
                    "count": count, "crc_ok": crc32c(data[o + 21:end]) == crc})
        o = end
    return out


def check_stored_codec(bootstrap, topic, codec, wait=10.0, allow_none=False):
    """Fetch the first batches of each partition; dict with hwm per partition,
    codecs seen, crc state and ok flag."""
    host, port = split_hostport(bootstrap)
    res = {"ok": False, "hwm": {}, "stored": "?", "note": ""}
    try:
        w = Wire(host, port)
    except OSError as e:
        res["note"] = "connect: %s" % e
        return res
    try:
        err, apis = w.api_versions()
        lo, hi = apis.get(1, (None, None))
        if lo is None:
            res["note"] = "broker lists no Fetch version"
            return res
        ver = min(hi, 11)
        if ver < max(lo, 4):
            ver = max(lo, 0)
            if ver > 11:
                res["note"] = "broker only speaks Fetch v%d-v%d (checker: v0-v11)" % (lo, hi)
                return res
        # One partition per request: a broker returns an oversized first batch
        # only for the first partition of a response (KIP-74).
        parts = {}
        for p in range(PARTITIONS):
            deadline = time.time() + wait
            while True:
                r = w.fetch(ver, topic, [p])
                if p in r:
                    parts[p] = r[p]
                if (p in r and (r[p][1] == 0 or r[p][2])) or time.time() > deadline:
                    break
                time.sleep(0.3)
        seen = set()
        bad = []
        nb = 0
        for p in range(PARTITIONS):
            if p not in parts:
                bad.append("p%d absent from Fetch response" % p)
                continue
            perr, hwm, data = parts[p]
            res["hwm"][p] = hwm
            if perr:
                bad.append("p%d error %d" % (p, perr))
                continue
            if hwm > 0 and not data:
                bad.append("p%d: hwm %d but no data" % (p, hwm))
            for bt in decode_batches(data):
                nb += 1
                if bt["magic"] != 2:
                    bad.append("p%d@%d magic %d" % (p, bt["base"], bt["magic"]))
                    continue
                seen.add(bt["codec"])
                if not bt["crc_ok"]:
                    bad.append("p%d@%d bad CRC32C" % (p, bt["base"]))
        res["stored"] = "+".join(CODEC_NAME.get(c, "codec%d" % c) for c in sorted(seen)) or "-"
        want = {CODEC_ID[codec]}
        if allow_none:
            want.add(0)
        if nb and (not seen <= want or CODEC_ID[codec] not in seen):
            bad.append("stored codec %s, produced %s" % (res["stored"], codec))
        if not nb:
            bad.append("no record batch decoded")
        res["batches"] = nb
        res["fetch_version"] = ver
        res["note"] = "; ".join(bad)
        res["ok"] = not bad
    except (OSError, ValueError, struct.error, ConnectionError) as e:
        res["note"] = "raw fetch failed: %s" % e
    finally:
        w.close()
    return res


def split_hostport(bootstrap):
    first = bootstrap.split(",")[0].strip()
    host, _, port = first.rpartition(":")
    return host.strip("[]") or "127.0.0.1", int(port)


# =========================================================================== processes

def run_bounded(cmd, timeout, stdin_path=None, stdout_path=None, env=None):
    """lib.run_bounded (its own process group, killed on timeout), reading stdin_path and
    writing stdout_path (else nothing). Returns (rc or None on timeout, stderr text)."""
    fin = open(stdin_path, "rb") if stdin_path else subprocess.DEVNULL
    fout = open(stdout_path, "wb") if stdout_path else subprocess.DEVNULL
    ferr = tempfile.TemporaryFile()
    try:
        rc, _ = lib.run_bounded(cmd, timeout, grace=5, stdin=fin, stdout=fout, stderr=ferr, env=env)
        ferr.seek(0)
        err = ferr.read().decode("utf-8", "replace")
        return rc, err
    finally:
        ferr.close()
        if stdin_path:
            fin.close()
        if stdout_path:
            fout.close()


def _tail(text, n=6):
    lines = [l for l in text.strip().splitlines() if l.strip()]
    return " | ".join(lines[-n:])


# =========================================================================== admin

def new_topic_name(client, codec):
    return "rt-%s-%s-%s" % (client, codec, uuid.uuid4().hex[:8])


_ADMINS = {}


def _admin(bootstrap):
    """One confluent AdminClient per bootstrap for the whole run."""
    from confluent_kafka.admin import AdminClient
    if bootstrap not in _ADMINS:
        _ADMINS[bootstrap] = AdminClient({"bootstrap.servers": bootstrap})
    return _ADMINS[bootstrap]


def create_topic(bootstrap, name, timeout=60.0):
    try:
        from confluent_kafka.admin import AdminClient, NewTopic
    except ImportError:
        AdminClient = None
    if AdminClient is not None:
        a = _admin(bootstrap)
        fs = a.create_topics([NewTopic(name, num_partitions=PARTITIONS, replication_factor=1)],
                             operation_timeout=timeout, request_timeout=timeout)
        fs[name].result(timeout=timeout)
    else:
        from kafka.admin import KafkaAdminClient, NewTopic as KNewTopic
        a = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=int(timeout * 1000))
        try:
            a.create_topics([KNewTopic(name, PARTITIONS, 1)], timeout_ms=int(timeout * 1000))
        finally:
            a.close()
    # wait until the metadata shows 3 partitions with leaders
    deadline = time.time() + timeout
    while time.time() < deadline:
        if _topic_ready(bootstrap, name):
            return
        time.sleep(0.2)
    raise RuntimeError("topic %s not ready after %.0fs" % (name, timeout))


def _topic_ready(bootstrap, name):
    import importlib.util
    if importlib.util.find_spec("confluent_kafka") is None:
        return True
    md = _admin(bootstrap).list_topics(topic=name, timeout=10)
    t = md.topics.get(name)
    return (t is not None and t.error is None and len(t.partitions) == PARTITIONS
            and all(p.leader >= 0 for p in t.partitions.values()))


def delete_topic(bootstrap, name):
    try:
        fs = _admin(bootstrap).delete_topics([name], operation_timeout=30, request_timeout=30)
        fs[name].result(timeout=30)
        return None
    except Exception as e:  # broker may not implement DeleteTopics: never fatal
        return str(e)


# =========================================================================== clients

class Client(object):
    name = "?"
    profile = "binary"
    may_skip_compression = False

    def __init__(self, args):
        self.args = args

    def version(self):
        raise NotImplementedError

    def produce(self, topic, codec, recs, workdir, timeout):
        """Returns a list of error strings (empty on success)."""
        raise NotImplementedError

    def consume(self, topic, n, hwm, workdir, timeout):
        """Returns (list of Got, list of error strings)."""
        raise NotImplementedError


# --------------------------------------------------------------------------- kcat

class Kcat(Client):
    name = "kcat"
    profile = "kcat"
    FMT = "%p %o %K %S\n%k%s\n%h\n"

    def version(self):
        exe = shutil.which("kcat") or shutil.which("kafkacat")
        if not exe:
            raise RuntimeError("kcat not found on PATH (apt-get install -y kcat)")
        self.exe = exe
        out = subprocess.run([exe, "-V"], capture_output=True, text=True, timeout=30).stdout
        ver = lib = "?"
        for line in out.splitlines():
            if line.startswith("Version "):
                ver = line.split()[1]
                if "librdkafka " in line:
                    lib = line.split("librdkafka ")[1].split()[0]
        return "%s (librdkafka %s)" % (ver, lib)

    def produce(self, topic, codec, recs, workdir, timeout):
        errors = []
        deadline = time.time() + timeout
        n = len(recs)
        blocks = {}
        for r in recs:
            blocks.setdefault(kcat_block(r.seq, n), []).append(r)
        for b in sorted(blocks):
            path = os.path.join(workdir, "kcat-in-%d" % b)
            with open(path, "wb") as f:
                for r in blocks[b]:
                    f.write(r.key + b"\t" + r.value + b"\n")
            cmd = [self.exe, "-P", "-b", self.args.bootstrap, "-t", topic, "-K", "\t",
                   "-z", codec, "-X", "acks=all", "-X", "linger.ms=20"]
            for hk, hv in kcat_block_headers(b):
                cmd += ["-H", "%s=%s" % (hk, hv.decode("utf-8"))]
            left = deadline - time.time()
            if left <= 0:
                errors.append("produce timed out before block %d" % b)
                break
            rc, err = run_bounded(cmd, left, stdin_path=path)
            os.unlink(path)
            if rc is None:
                errors.append("kcat -P block %d timed out" % b)
                break
            if rc != 0 or "ERROR" in err or "Failed" in err:
                errors.append("kcat -P block %d rc=%s: %s" % (b, rc, _tail(err)))
        return errors

    def consume(self, topic, n, hwm, workdir, timeout):
        out = os.path.join(workdir, "kcat-out")
        cmd = [self.exe, "-C", "-b", self.args.bootstrap, "-e", "-q", "-f", self.FMT]
        if self.args.consume_mode == "group":
            cmd += ["-X", "auto.offset.reset=earliest", "-X", "enable.auto.commit=false",
                    "-G", "rt-" + uuid.uuid4().hex[:8], topic]
        else:
            cmd += ["-t", topic, "-o", "beginning"]
        rc, err = run_bounded(cmd, timeout, stdout_path=out)
        errors = []
        if rc is None:
            errors.append("kcat -C timed out after %.0fs" % timeout)
        elif rc != 0:
            errors.append("kcat -C rc=%s: %s" % (rc, _tail(err)))
        with open(out, "rb") as f:
            data = f.read()
        os.unlink(out)
        got = []
        o = 0
        try:
            while o < len(data):
                nl = data.index(b"\n", o)
                p, off, kl, vl = (int(x) for x in data[o:nl].split(b" "))
                o = nl + 1
                key = None if kl < 0 else data[o:o + kl]
                o += max(kl, 0)
                value = None if vl < 0 else data[o:o + vl]
                o += max(vl, 0)
                if data[o:o + 1] != b"\n":
                    raise ValueError("framing lost at byte %d" % o)
                o += 1
                nl = data.index(b"\n", o)
                hs = []
                if nl > o:
                    for item in data[o:nl].split(b","):
                        hk, _, hv = item.partition(b"=")
                        hs.append((hk.decode("utf-8"), hv))
                o = nl + 1
                got.append(Got(p, off, key, value, hs))
        except ValueError as e:
            errors.append("kcat output unparsable: %s" % e)
        return got, errors


# --------------------------------------------------------------------------- confluent

class Confluent(Client):
    name = "confluent"

    def version(self):
        import confluent_kafka
        v = confluent_kafka.version()
        v = v[0] if isinstance(v, tuple) else v
        return "%s (librdkafka %s)" % (v, confluent_kafka.libversion()[0])

    def produce(self, topic, codec, recs, workdir, timeout):
        from confluent_kafka import Producer
        errors = []

        def cb(err, msg):
            if err is not None and len(errors) < 20:
                errors.append("delivery: %s" % err)

        p = Producer({"bootstrap.servers": self.args.bootstrap, "acks": "all",
                      "compression.type": codec, "linger.ms": 20,
                      "queue.buffering.max.messages": 200000,
                      "message.timeout.ms": int(timeout * 1000)})
        deadline = time.time() + timeout
        for i, r in enumerate(recs):
            while True:
                try:
                    p.produce(topic, value=r.value, key=r.key, headers=r.headers, on_delivery=cb)
                    break
                except BufferError:
                    p.poll(0.05)
                    if time.time() > deadline:
                        errors.append("produce timed out (queue full)")
                        return errors
            if i % 1000 == 0:
                p.poll(0)
        left = p.flush(max(1.0, deadline - time.time()))
        if left:
            errors.append("%d messages still undelivered after flush" % left)
        return errors

    def consume(self, topic, n, hwm, workdir, timeout):
        from confluent_kafka import Consumer, TopicPartition, KafkaError, OFFSET_BEGINNING
        c = Consumer({"bootstrap.servers": self.args.bootstrap,
                      "group.id": "rt-" + uuid.uuid4().hex[:8],
                      "enable.auto.commit": False, "enable.partition.eof": True,
                      "auto.offset.reset": "earliest"})
        got, errors = [], []
        if self.args.consume_mode == "group":
            c.subscribe([topic])
        else:
            c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
        eof = set()
        deadline = time.time() + timeout
        try:
            while len(eof) < PARTITIONS:
                if time.time() > deadline:
                    errors.append("consume timed out after %.0fs (%d read)" % (timeout, len(got)))
                    break
                for m in c.consume(num_messages=10000, timeout=1.0):
                    e = m.error()
                    if e is not None:
                        if e.code() == KafkaError._PARTITION_EOF:
                            eof.add(m.partition())
                        elif len(errors) < 20:
                            errors.append("consume: %s" % e)
                        continue
                    got.append(Got(m.partition(), m.offset(), m.key(), m.value(),
                                   list(m.headers() or [])))
        finally:
            c.close()
        return got, errors


# --------------------------------------------------------------------------- kafka-python

class KafkaPython(Client):
    name = "kafka-python"
    profile = "binary-kp"      # same as binary, without null header values
    # kafka-python sends a batch uncompressed when compressing does not shrink it
    may_skip_compression = True

    def version(self):
        import kafka
        extra = []
        for mod, dist in (("snappy", "python-snappy"), ("cramjam", "cramjam"),
                          ("lz4", "lz4"), ("zstandard", "zstandard")):
            extra.append("%s %s" % (dist, _dist_version(dist, mod)))
        return "%s (%s)" % (kafka.__version__, ", ".join(extra))

    def produce(self, topic, codec, recs, workdir, timeout):
        from kafka import KafkaProducer
        errors = []

        def eb(exc):
            if len(errors) < 20:
                errors.append("delivery: %r" % (exc,))

        p = KafkaProducer(bootstrap_servers=self.args.bootstrap, acks="all",
                          compression_type=None if codec == "none" else codec,
                          linger_ms=20, batch_size=65536,
                          delivery_timeout_ms=int(timeout * 1000),
                          request_timeout_ms=30000)
        try:
            deadline = time.time() + timeout
            for r in recs:
                p.send(topic, key=r.key, value=r.value, headers=r.headers).add_errback(eb)
                if time.time() > deadline:
                    errors.append("produce timed out")
                    break
            p.flush(timeout=max(1.0, deadline - time.time()))
        except Exception as e:
            errors.append("producer: %r" % (e,))
        finally:
            p.close(timeout=10)
        return errors

    def consume(self, topic, n, hwm, workdir, timeout):
        from kafka import KafkaConsumer, TopicPartition
        got, errors = [], []
        deadline = time.time() + timeout
        if self.args.consume_mode == "group":
            c = KafkaConsumer(topic, bootstrap_servers=self.args.bootstrap,
                              group_id="rt-" + uuid.uuid4().hex[:8],
                              enable_auto_commit=False, auto_offset_reset="earliest")
        else:
            c = KafkaConsumer(bootstrap_servers=self.args.bootstrap, group_id=None,
                              enable_auto_commit=False, auto_offset_reset="earliest")
            tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
            c.assign(tps)
            c.seek_to_beginning(*tps)
        try:
            tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
            end = c.end_offsets(tps)
            last = {tp: -1 for tp in tps}
            while any(last[tp] + 1 < end[tp] for tp in tps):
                if time.time() > deadline:
                    errors.append("consume timed out after %.0fs (%d read)" % (timeout, len(got)))
                    break
                for tp, msgs in c.poll(timeout_ms=1000, max_records=10000).items():
                    for m in msgs:
                        got.append(Got(m.partition, m.offset, m.key, m.value,
                                       [(k, v) for k, v in (m.headers or [])]))
                        last[tp] = max(last[tp], m.offset)
        except Exception as e:
            errors.append("consumer: %r" % (e,))
        finally:
            c.close()
        return got, errors


def _dist_version(dist, mod):
    try:
        from importlib.metadata import version
        return version(dist)
    except Exception:
        try:
            return getattr(__import__(mod), "__version__", "?")
        except ImportError:
            return "missing"


# --------------------------------------------------------------------------- console

class Console(Client):
    name = "console"
    profile = "text"

    def _cmd(self, tool):
        return shlex.split(self.args.console_cmd) + [tool]

    def version(self):
        if not self.args.console_cmd:
            raise RuntimeError("no --console-cmd and %s missing" % REALKAFKA)
        r = subprocess.run(self._cmd("kafka-console-producer") + ["--help"],
                           capture_output=True, text=True, timeout=120)
        h = r.stdout + r.stderr
        if "--bootstrap-server" not in h:
            raise RuntimeError("console producer not runnable: %s" % _tail(h))
        # Kafka >= 4.2 renamed --property/--producer-property; keep older ones working.
        self.reader_opt = "--reader-property" if "--reader-property" in h else "--property"
        self.prod_opt = "--command-property" if "--command-property" in h else "--producer-property"
        r = subprocess.run(self._cmd("kafka-console-consumer") + ["--help"],
                           capture_output=True, text=True, timeout=120)
        h = r.stdout + r.stderr
        self.fmt_opt = "--formatter-property" if "--formatter-property" in h else "--property"
        self.cons_opt = "--command-property" if "--command-property" in h else "--consumer-property"
        r = subprocess.run(self._cmd("kafka-console-producer") + ["--version"],
                           capture_output=True, text=True, timeout=120)
        v = (r.stdout.strip().splitlines() or ["?"])[0].split()[0]
        jv = subprocess.run(["java", "-version"], capture_output=True, text=True, timeout=60)
        jline = (jv.stderr.strip().splitlines() or ["?"])[0]
        return "Apache Kafka %s tools (%s)" % (v, jline.replace('"', ""))

    def produce(self, topic, codec, recs, workdir, timeout):
        path = os.path.join(workdir, "console-in")
        with open(path, "wb") as f:
            for r in recs:
                hs = b",".join(k.encode("utf-8") + b":" + v for k, v in r.headers)
                f.write(hs + b"\t" + r.key + b"\t" + r.value + b"\n")
        cmd = self._cmd("kafka-console-producer") + [
            "--bootstrap-server", self.args.bootstrap, "--topic", topic,
            "--compression-codec", codec,
            self.reader_opt, "parse.key=true", self.reader_opt, "parse.headers=true",
            self.prod_opt, "acks=all", self.prod_opt, "linger.ms=20",
            "--batch-size", "65536", "--request-timeout-ms", "30000"]
        rc, err = run_bounded(cmd, timeout, stdin_path=path)
        os.unlink(path)
        if rc is None:
            return ["console producer timed out after %.0fs" % timeout]
        bad = [l for l in err.splitlines() if "ERROR" in l or "Exception" in l]
        if rc != 0 or bad:
            return ["console producer rc=%s: %s" % (rc, _tail("\n".join(bad) or err))]
        return []

    def consume(self, topic, n, hwm, workdir, timeout):
        props = []
        for prop in ("print.partition=true", "print.offset=true", "print.headers=true",
                     "print.key=true", "print.value=true"):
            props += [self.fmt_opt, prop]
        base = self._cmd("kafka-console-consumer") + [
            "--bootstrap-server", self.args.bootstrap, "--topic", topic] + props
        got, errors = [], []
        deadline = time.time() + timeout
        if self.args.consume_mode == "group":
            runs = [(None, n)]
        else:
            if not hwm:
                return [], ["no high watermarks known (raw Fetch failed), cannot bound "
                            "per-partition console consumers"]
            runs = [(p, hwm.get(p, 0)) for p in range(PARTITIONS)]
        for p, count in runs:
            if count <= 0:
                continue
            out = os.path.join(workdir, "console-out")
            cmd = base + ["--max-messages", str(count), "--timeout-ms", "30000"]
            if p is None:
                cmd += ["--group", "rt-" + uuid.uuid4().hex[:8], "--from-beginning"]
            else:
                cmd += ["--partition", str(p), "--offset", "earliest"]
            left = deadline - time.time()
            if left <= 0:
                errors.append("consume timed out")
                break
            rc, err = run_bounded(cmd, left, stdout_path=out)
            if rc is None:
                errors.append("console consumer p%s timed out" % p)
            elif rc != 0:
                errors.append("console consumer p%s rc=%s: %s" % (p, rc, _tail(err)))
            with open(out, "rb") as f:
                data = f.read()
            os.unlink(out)
            for line in data.split(b"\n"):
                if not line:
                    continue
                parts = line.split(b"\t", 4)
                if len(parts) != 5 or not parts[0].startswith(b"Partition:"):
                    if len(errors) < 20:
                        errors.append("unparsable console line: %s" % _short(line))
                    continue
                hs = []
                if parts[2] != b"NO_HEADERS":
                    for item in parts[2].split(b","):
                        hk, _, hv = item.partition(b":")
                        hs.append((hk.decode("utf-8"), hv))
                got.append(Got(int(parts[0][10:]), int(parts[1].split(b":", 1)[1]),
                               parts[3], parts[4], hs))
        return got, errors


CLIENT_CLASSES = {"kcat": Kcat, "confluent": Confluent, "kafka-python": KafkaPython,
                  "console": Console}


# =========================================================================== main

def run_case(client, codec, args, records, workdir):
    row = {"client": client.name, "codec": codec, "topic": new_topic_name(client.name, codec),
           "written": 0, "read": 0, "produce_s": None, "consume_s": None, "ok": False,
           "stored": "?", "errors": [], "problems": []}
    n = args.records
    try:
        create_topic(args.bootstrap, row["topic"], timeout=args.step_timeout)
    except Exception as e:
        row["errors"].append("create topic: %s: %s" % (type(e).__name__, e))
        return row
    t0 = time.time()
    try:
        perr = client.produce(row["topic"], codec, records, workdir, args.step_timeout)
    except Exception as e:
        perr = ["produce raised %r" % (e,)]
    row["produce_s"] = time.time() - t0
    row["errors"] += perr
    row["written"] = n if not perr else "?"
    chk = check_stored_codec(args.bootstrap, row["topic"], codec,
                             allow_none=client.may_skip_compression)
    row["stored"] = chk["stored"]
    row["hwm"] = chk["hwm"]
    if chk["hwm"] and row["written"] == "?":
        row["written"] = "<=%d" % sum(chk["hwm"].values())
    if not chk["ok"]:
        row["errors"].append("stored-batch check: %s" % chk["note"])
    t0 = time.time()
    try:
        got, cerr = client.consume(row["topic"], n, chk["hwm"], workdir, args.step_timeout)
    except Exception as e:
        got, cerr = [], ["consume raised %r" % (e,)]
    row["consume_s"] = time.time() - t0
    row["errors"] += cerr
    v = verify(records, got, client.profile)
    row["read"] = v["read"]
    row["problems"] = v.pop("problems")
    row["verify"] = v
    if chk["hwm"] and sum(chk["hwm"].values()) != n:
        row["errors"].append("high watermarks %s sum to %d, expected %d"
                             % (chk["hwm"], sum(chk["hwm"].values()), n))
    row["ok"] = v["ok"] and not row["errors"]
    if not args.keep_topics:
        derr = delete_topic(args.bootstrap, row["topic"])
        if derr:
            row["delete_error"] = derr
    return row


def fmt_s(x):
    return "-" if x is None else "%.1f" % x


def main(argv=None):
    needs.venv()
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bootstrap", required=True, help="host:port of the broker")
    ap.add_argument("--records", type=int, default=100000)
    ap.add_argument("--clients", default=",".join(ALL_CLIENTS))
    ap.add_argument("--codecs", default=",".join(ALL_CODECS))
    ap.add_argument("--consume-mode", choices=("assign", "group"), default="assign",
                    help="assign: read partitions directly (console: one run per partition); "
                         "group: subscribe with a fresh consumer group")
    ap.add_argument("--step-timeout", type=float, default=600.0,
                    help="seconds allowed for each produce and each consume step")
    ap.add_argument("--console-cmd",
                    default=("%s %s tool" % (shlex.quote(sys.executable), shlex.quote(REALKAFKA))
                             if os.path.exists(REALKAFKA) else ""),
                    help="command prefix that runs a Kafka CLI tool by script name "
                         "(default: python3 conformance/kafka/realkafka.py tool)")
    ap.add_argument("--keep-topics", action="store_true", help="do not delete the topics")
    ap.add_argument("--json", help="also write the results as JSON to this file")
    args = ap.parse_args(argv)

    clients = [c.strip() for c in args.clients.split(",") if c.strip()]
    codecs = [c.strip() for c in args.codecs.split(",") if c.strip()]
    for c in clients:
        if c not in CLIENT_CLASSES:
            ap.error("unknown client %r (known: %s)" % (c, ", ".join(ALL_CLIENTS)))
    for c in codecs:
        if c not in CODEC_ID:
            ap.error("unknown codec %r (known: %s)" % (c, ", ".join(ALL_CODECS)))

    print("roundtrip: broker %s, %d records x %d partitions, codecs %s, consume mode %s"
          % (args.bootstrap, args.records, PARTITIONS, ",".join(codecs), args.consume_mode))
    print("python %s" % sys.version.split()[0])
    ready = {}
    versions = {}
    for name in clients:
        cl = CLIENT_CLASSES[name](args)
        try:
            versions[name] = cl.version()
            ready[name] = cl
        except Exception as e:
            versions[name] = "UNAVAILABLE: %s" % e
        print("client %-13s %s" % (name, versions[name]))
    sys.stdout.flush()

    blobs = Blobs()
    data = {}
    rows = []
    workdir = tempfile.mkdtemp(prefix="rt-clients-")
    try:
        for name in clients:
            cl = ready.get(name)
            for codec in codecs:
                if cl is None:
                    rows.append({"client": name, "codec": codec, "written": 0, "read": 0,
                                 "produce_s": None, "consume_s": None, "ok": False,
                                 "stored": "-", "errors": [versions[name]], "problems": []})
                    continue
                if cl.profile not in data:
                    data[cl.profile] = make_records(args.records, cl.profile, blobs)
                log("[%s/%s] running ..." % (name, codec))
                row = run_case(cl, codec, args, data[cl.profile], workdir)
                rows.append(row)
                log("[%s/%s] %s written=%s read=%s produce=%ss consume=%ss%s" % (
                    name, codec, "ok" if row["ok"] else "FAIL", row["written"], row["read"],
                    fmt_s(row["produce_s"]), fmt_s(row["consume_s"]),
                    "" if row["ok"] else " :: " + "; ".join(row["errors"] + row["problems"])[:600]))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)

    head = ("client", "version", "codec", "stored", "written", "read", "result",
            "produce s", "consume s")
    table = [head]
    for r in rows:
        ver = versions.get(r["client"], "?")
        ver = ver.split(" (")[0] if not ver.startswith("UNAVAILABLE") else "n/a"
        table.append((r["client"], ver, r["codec"], r.get("stored", "?"), str(r["written"]),
                      str(r["read"]), "ok" if r["ok"] else "FAIL",
                      fmt_s(r["produce_s"]), fmt_s(r["consume_s"])))
    widths = [max(len(t[i]) for t in table) for i in range(len(head))]
    print()
    for j, t in enumerate(table):
        print("  ".join(c.ljust(widths[i]) for i, c in enumerate(t)).rstrip())
        if j == 0:
            print("  ".join("-" * w for w in widths))
    failed = [r for r in rows if not r["ok"]]
    for r in failed:
        print("\nFAIL %s/%s topic %s" % (r["client"], r["codec"], r.get("topic", "-")))
        v = r.get("verify")
        if v:
            print("  counts: " + ", ".join("%s=%s" % (k, v[k]) for k in (
                "read", "matched", "missing", "duplicates", "unknown", "mismatched",
                "key_partition_conflicts", "order_violations", "offset_violations",
                "partitions_used")))
        for e in r["errors"] + r["problems"]:
            print("  - " + e)
    print("\n%d passed, %d failed" % (len(rows) - len(failed), len(failed)))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"bootstrap": args.bootstrap, "records": args.records,
                       "versions": versions, "rows": rows}, f, indent=1, default=str)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
