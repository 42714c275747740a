#!/usr/bin/env python3
"""A schema-driven fuzzer for doze-kafka: hostile input must never stop the
broker or reach past its own connection.

    python3 conformance/fuzz.py --seed 1 --frames 20000          # in-process doze
    python3 conformance/fuzz.py --seed 1 --minutes 30            # the long mode
    python3 conformance/fuzz.py --spawn --restart --minutes 2    # doze as a child process,
                                                                 # restarted when it dies/hangs
    python3 conformance/fuzz.py --bootstrap 127.0.0.1:9092 --pid PID --log broker.log
    python3 conformance/fuzz.py --schemas kafka ...              # requests from Kafka's JSON
    python3 conformance/fuzz.py --spawn --security --minutes 30  # and a SASL_SSL listener
                                                                 # with the authorizer (6b)

From Python (what the test suite does):

    import fuzz
    report = fuzz.run(seed=1, frames=20000, connections=4)
    assert not report.findings, report.summary()

How it works, top to bottom:

1. SCHEMAS. A neutral model of every request and response (`ApiModel`,
   `FieldModel`), built from doze's own HANDLERS table (the default) or from
   Apache Kafka's message JSON inside kafka-clients.jar (`--schemas kafka`),
   for every version doze serves -- plus ApiVersions above its maximum, the
   path KIP-511 defines.
2. ENCODER. Our own, independent of doze's: it writes a request from a dict
   and records the byte span and kind of every primitive it writes (lengths,
   varints, ints, tagged sections), so mutations can aim at structure.
3. DECODER. A strict reader of answers: a null where the schema allows none
   in that version, or bytes left over, makes an answer "undecodable".
4. RECORD BATCHES. Valid RecordBatch v2 (plain, idempotent, transactional,
   gzip) and batches with a right CRC but broken records inside.
5. VALUES. Pools of topics (existing, unknown, invalid), partitions, groups,
   members and transactional ids, and ids learned from earlier answers
   (InitProducerId -> AddPartitionsToTxn -> Produce with that producer id),
   so requests reach deep into the handlers, not just the decoder.
6. MUTATIONS. Boundary ints, null/negative/huge lengths, huge array counts,
   truncation, endless or over-long varints, unknown tagged fields, byte
   flips, trailing garbage, oversized frames; and on the transport: half
   frames, bad frame sizes, pipelined bursts. Beside malformation, overload:
   valid requests spanning up to 2,000 partitions of one topic ("wide").
6b. SASL AND TLS (--security). Half the fuzz connections go to a SASL_SSL
   listener: TLS, a valid authentication, then the same fuzz under Kafka's
   StandardAuthorizer; beside them hostile TLS and SASL exchanges on fresh
   connections, and re-authentication (KIP-368).
7. RUNNER. N fuzz connections (reconnecting when the broker closes one: a
   close is a legitimate answer to a malformed frame, and is counted), a
   well-behaved "bystander" client beside them (produce acks=-1, fetch back,
   ApiVersions probes for latency), a monitor (broker alive, RSS), and the
   broker's log (tracebacks, ERROR lines, why connections were closed).
8. REPORT. Per-API counts (sent, answered, ok = every error code 0, closed,
   dropped, timed out, mean answer latency) so that it is known which APIs
   the mutations actually reach; deduplicated findings, each with the frame
   that triggered it and the frames before it on the same connection; and
   notes, which fail nothing (UNKNOWN_SERVER_ERROR answers: Kafka 4.3.1 gives
   them too for some bad input).

Finding kinds: broker-death, stuck (no answer to the bystander for stuck_s),
stall (a bystander call slower than the threshold), traceback / error-log
(doze's log), undecodable-answer (kafka-undecodable-answer), no-answer (a
request that never waits got neither an answer nor a close),
skipped-answer / unexpected-correlation-id, valid-request-refused (a frame
valid by the schema it came from was closed as undecodable), bystander-*,
rss-growth (when a tolerance is set), fuzzer-error (a bug in this file);
with --security also tls-refused, valid-auth-refused,
sasl-accepted-what-it-should-not, unauthenticated-request-answered and
secret-in-clear (a password the run used in the broker's log or meta.db).

Deterministic: each fuzz connection draws from random.Random(f"{seed}:{i}"),
so the frames it sends depend only on the seed and on the answers it gets.
Standard library only; loopback only; every run stops by itself.
"""

import argparse
import base64
import collections
import gzip
import hashlib
import hmac
import json
import logging
import os
import random
import re
import signal
import socket
import ssl
import struct
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import urllib.parse
import zlib

import lib                      # free_port, recv_exactly (and puts the repository root on sys.path)
import schemacheck              # Kafka's message JSON and its version ranges (read_kafka_messages)
from schemacheck import version_range as _vrange     # "3+", "1-4", "7", "none" -> (first, last) or None

DOZE_PATH = lib.DOZE
KAFKA_JAR = os.path.expanduser("~/.cache/doze-kafka/kafka-4.3.1/lib/kafka-clients-4.3.1.jar")


def load_doze(wait_s=60, path=None):
    """Import doze_kafka from the repository root (or the file at `path`, as a
    module of its own). The file may be mid-edit (another session works on
    it): retry a failing import for a while."""
    if path is not None and os.path.abspath(path) != os.path.abspath(DOZE_PATH):
        import importlib.util
        name = "doze_kafka_" + re.sub(r"\W", "_", os.path.basename(path))
        if name not in sys.modules:
            spec = importlib.util.spec_from_file_location(name, path)
            module = importlib.util.module_from_spec(spec)
            sys.modules[name] = module
            spec.loader.exec_module(module)
        return sys.modules[name]
    deadline = time.monotonic() + wait_s
    while True:
        try:
            import doze_kafka
            return doze_kafka
        except (SyntaxError, ImportError, NameError, AttributeError, IndentationError):
            if time.monotonic() > deadline:
                raise
            sys.modules.pop("doze_kafka", None)
            time.sleep(2)


###############################################################################
# 1. SCHEMAS -- a neutral model of requests and responses
###############################################################################
# Both sources are reduced to the same model. A field exists in versions
# lo..hi, may be null in `nullable` (a (first, last) pair or None), and is a
# tagged field (KIP-482) in `tagged` versions. Types are Kafka's: bool int8
# int16 int32 int64 uint16 uint32 float64 uuid string bytes records, "[]T"
# for arrays of a primitive, "[]" for arrays of structs and "{}" for one
# struct (both with `fields`). Names are snake_case; Kafka's CamelCase is
# converted, so "V3AndBelowTransactionalId" becomes
# "v3_and_below_transactional_id", whose `alias` is "transactional_id".

INF = 32767
PRIMITIVE_TYPES = ("bool", "int8", "int16", "int32", "int64", "uint16", "uint32", "float64",
                   "uuid", "string", "bytes", "records")


class FieldModel:
    __slots__ = ("name", "alias", "type", "lo", "hi", "nullable", "tag", "tagged", "fields", "default")

    def __init__(self, name, type_, lo=0, hi=INF, nullable=None, tag=None, tagged=None,
                 fields=(), default=None):
        self.name, self.type, self.lo, self.hi = name, type_, lo, hi
        self.alias = alias_of(name)
        self.nullable, self.tag, self.tagged = nullable, tag, tagged
        self.fields, self.default = list(fields), default

    def present(self, v):
        return self.lo <= v <= self.hi

    def nullable_in(self, v):
        return self.nullable is not None and self.nullable[0] <= v <= self.nullable[1]

    def tagged_in(self, v):
        return self.tag is not None and self.tagged is not None and self.tagged[0] <= v <= self.tagged[1]

    def __repr__(self):
        return f"<{self.name} {self.type} v{self.lo}-{self.hi}>"


class ApiModel:
    """One API: the versions doze serves (lo..hi), its first flexible version,
    request and response fields, and where the model came from."""
    __slots__ = ("name", "key", "lo", "hi", "flexible_from", "request", "response", "origin")

    def __init__(self, name, key, lo, hi, flexible_from, request, response, origin):
        self.name, self.key, self.lo, self.hi = name, key, lo, hi
        self.flexible_from, self.request, self.response, self.origin = \
            flexible_from, request, response, origin

    def flexible(self, v):
        return self.flexible_from is not None and v >= self.flexible_from


def snake(name):
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name).lower()


def alias_of(name):
    """The name value generation knows a field by (Kafka's version-prefixed
    names fold onto doze's)."""
    for prefix in ("v3_and_below_",):
        if name.startswith(prefix):
            return name[len(prefix):]
    return name


def models_from_doze(doze):
    """ApiModels from doze_kafka.HANDLERS: versions min_served..max_version."""
    def conv(fields, flex):
        out = []
        for f in fields:
            out.append(FieldModel(f.name, f.type, f.since, f.until, f.nullable, f.tag,
                                  (flex, INF) if f.tag is not None and flex is not None else None,
                                  conv(f.fields, flex), f.default))
        return out
    models = {}
    for key, (spec, _) in sorted(doze.HANDLERS.items()):
        lo = spec.min_served if spec.min_served is not None else spec.min_version
        models[int(key)] = ApiModel(spec.name, int(key), lo, spec.max_version, spec.flexible_from,
                                    conv(spec.request, spec.flexible_from),
                                    conv(spec.response, spec.flexible_from), "doze")
    return models


def _kafka_default(text, type_):
    if not isinstance(text, str):
        return text
    if text == "null":
        return None
    if text in ("true", "false"):
        return text == "true"
    try:
        return int(text, 0)
    except ValueError:
        return text


def read_kafka_messages(jar=KAFKA_JAR):
    """apiKey -> {"request": json, "response": json}, read from the jar at run
    time (the schemas are Apache Kafka's; they are not copied anywhere) by
    schemacheck.py's reader."""
    out = collections.defaultdict(dict)
    for (key, kind), j in schemacheck.load_kafka(jar).items():
        out[key][kind] = j
    return out


def models_from_kafka(served, jar=KAFKA_JAR):
    """ApiModels from Kafka's JSON, for the versions doze serves:
    served = {api_key: (lo, hi)}."""
    messages = read_kafka_messages(jar)

    def conv(fields, common):
        out = []
        for j in fields:
            t = j["type"]
            lo, hi = _vrange(j["versions"])
            sub = []
            if t.startswith("[]"):
                el = t[2:]
                if el in PRIMITIVE_TYPES:
                    type_ = t
                else:
                    type_, sub = "[]", j.get("fields") or common[el]
            elif t in PRIMITIVE_TYPES:
                type_ = t
            else:
                type_, sub = "{}", j.get("fields") or common[t]
            out.append(FieldModel(snake(j["name"]), type_, lo, hi, _vrange(j.get("nullableVersions")),
                                  j.get("tag"), _vrange(j.get("taggedVersions")) if "tag" in j else None,
                                  conv(sub, common), _kafka_default(j.get("default"), type_)))
        return out

    models = {}
    for key, (lo, hi) in sorted(served.items()):
        pair = messages.get(key)
        if not pair or "request" not in pair or "response" not in pair:
            continue
        req, resp = pair["request"], pair["response"]
        flex = _vrange(req.get("flexibleVersions", "none"))
        common_req = {c["name"]: c["fields"] for c in req.get("commonStructs", [])}
        common_resp = {c["name"]: c["fields"] for c in resp.get("commonStructs", [])}
        models[key] = ApiModel(req["name"][:-len("Request")], key, lo, hi, flex[0] if flex else None,
                               conv(req["fields"], common_req), conv(resp["fields"], common_resp),
                               "kafka")
    return models


###############################################################################
# 2. ENCODER -- requests from dicts, with a map of every primitive written
###############################################################################
# Kafka's encoding in brief: big-endian fixed-width ints; classic versions
# write strings with an int16 length and bytes/arrays with an int32 length,
# -1 meaning null; flexible versions (KIP-482) write "compact" lengths as an
# unsigned varint of N + 1 (0 = null) and end every struct with a tagged-field
# section: uvarint count, then (uvarint tag, uvarint size, value) each. A
# nullable struct is preceded by an int8: -1 null, 1 present.
#
# Every primitive the encoder writes leaves a Span: [start, end) in the frame,
# its kind, a sub-kind, and for lengths the logical value and where the value
# the length governs ends. Span kinds:
#   fixed    an int/bool/uuid/float (sub: its type)
#   len      a length or count (sub: string, bytes, array); compact or not
#   marker   a nullable struct's int8 presence byte
#   payload  the bytes of a string or bytes/records value
#   tagcount / tagid / tagsize   the varints of a tagged section
#   tagsec   a whole tagged section (to append unknown tags to)

FIXED = {"bool": struct.Struct(">B"), "int8": struct.Struct(">b"), "int16": struct.Struct(">h"),
         "int32": struct.Struct(">i"), "int64": struct.Struct(">q"), "uint16": struct.Struct(">H"),
         "uint32": struct.Struct(">I"), "float64": struct.Struct(">d")}
INT_RANGE = {"int8": (-2 ** 7, 2 ** 7 - 1), "int16": (-2 ** 15, 2 ** 15 - 1),
             "int32": (-2 ** 31, 2 ** 31 - 1), "int64": (-2 ** 63, 2 ** 63 - 1),
             "uint16": (0, 2 ** 16 - 1), "uint32": (0, 2 ** 32 - 1), "bool": (0, 1)}
MISSING = object()


def uvarint(n):
    """Unsigned LEB128 of n (taken modulo 2^64)."""
    n &= 0xFFFFFFFFFFFFFFFF
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def zigzag(n):
    """A signed varint as records use them (zig-zag, 64 bits)."""
    return uvarint((n << 1) ^ (n >> 63))


def fit(type_, value):
    """Wrap an int into its type's range (two's complement), as Java would."""
    lo, hi = INT_RANGE[type_]
    span = hi - lo + 1
    return (value - lo) % span + lo


def field_value(d, f):
    v = d.get(f.name, MISSING)
    if v is MISSING and f.alias != f.name:
        v = d.get(f.alias, MISSING)
    return v


def zero_value(f):
    if f.type.startswith("[]"):
        return []
    if f.type == "{}":
        return {}
    return {"bool": False, "uuid": bytes(16), "string": "", "bytes": b"", "records": b"",
            "float64": 0.0}.get(f.type, 0)


class Span:
    __slots__ = ("start", "end", "kind", "sub", "compact", "path", "value", "whole_end")

    def __init__(self, start, end, kind, sub, compact, path, value=None, whole_end=None):
        self.start, self.end, self.kind, self.sub = start, end, kind, sub
        self.compact, self.path, self.value, self.whole_end = compact, path, value, whole_end

    def shifted(self, delta):
        return Span(self.start + delta, self.end + delta, self.kind, self.sub, self.compact, self.path,
                    self.value, None if self.whole_end is None else self.whole_end + delta)

    def __repr__(self):
        return f"<{self.kind}:{self.sub} {self.path} [{self.start},{self.end}) {self.value!r}>"


class Encoder:
    def __init__(self, flexible):
        self.out = bytearray()
        self.spans = []
        self.flexible = flexible

    def _span(self, start, kind, sub, path, value=None, compact=None):
        sp = Span(start, len(self.out), kind, sub, self.flexible if compact is None else compact,
                  path, value)
        self.spans.append(sp)
        return sp

    def fixed(self, type_, value, path):
        start = len(self.out)
        if type_ == "uuid":
            self.out += bytes(value or bytes(16))[:16].ljust(16, b"\0")
        elif type_ == "float64":
            self.out += FIXED[type_].pack(float(value))
        else:
            self.out += FIXED[type_].pack(fit(type_, int(value)))
        self._span(start, "fixed", type_, path, value)

    def varint(self, n, kind, path):
        start = len(self.out)
        self.out += uvarint(n)
        return self._span(start, kind, "varint", path, n, compact=True)

    def length(self, n, sub, path):
        """A length or count; n = -1 writes null."""
        start = len(self.out)
        if self.flexible:
            self.out += uvarint((n + 1) & 0xFFFFFFFF)
        elif sub == "string":
            self.out += FIXED["int16"].pack(fit("int16", n))
        else:
            self.out += FIXED["int32"].pack(fit("int32", n))
        return self._span(start, "len", sub, path, n)

    def blob(self, data, sub, path):
        ln = self.length(len(data), sub, path)
        start = len(self.out)
        self.out += data
        self._span(start, "payload", sub, path)
        ln.whole_end = len(self.out)

    def splice(self, other):
        delta = len(self.out)
        self.out += other.out
        self.spans.extend(sp.shifted(delta) for sp in other.spans)

    # --- structs ---
    def struct(self, fields, v, d, path):
        tagged = []
        for f in fields:
            if not f.present(v):
                continue
            value = field_value(d, f)
            if f.tagged_in(v):
                if self.flexible and value is not MISSING:
                    tagged.append((f.tag, f, value))
                continue
            if value is MISSING:
                value = zero_value(f)
            self.value(f, v, value, f"{path}.{f.name}" if path else f.name)
        if self.flexible:
            self.tag_section(sorted(tagged, key=lambda t: t[0]), v, path)

    def tag_section(self, tagged, v, path):
        start = len(self.out)
        self.varint(len(tagged), "tagcount", path)
        for tag, f, value in tagged:
            sub = Encoder(True)
            sub.value(f, v, value, f"{path}.{f.name}" if path else f.name)
            self.varint(tag, "tagid", f.name)
            self.varint(len(sub.out), "tagsize", f.name)
            self.splice(sub)
        sec = Span(start, len(self.out), "tagsec", "tags", True, path or "(top)", len(tagged))
        self.spans.append(sec)

    def value(self, f, v, value, path):
        t = f.type
        if value is None:
            if t == "{}":
                start = len(self.out)
                self.out += b"\xff"
                self._span(start, "marker", "struct", path, -1)
            else:
                sub = "string" if t == "string" else "array" if t.startswith("[]") else "bytes"
                self.length(-1, sub, path)
            return
        if t.startswith("[]"):
            ln = self.length(len(value), "array", path)
            if t == "[]":
                for item in value:
                    self.struct(f.fields, v, item, path)
            else:
                el = t[2:]
                for item in value:
                    self.primitive(el, item, path)
            ln.whole_end = len(self.out)
        elif t == "{}":
            if f.nullable_in(v):
                start = len(self.out)
                self.out += b"\x01"
                self._span(start, "marker", "struct", path, 1)
            self.struct(f.fields, v, value, path)
        else:
            self.primitive(t, value, path)

    def primitive(self, t, value, path):
        if t == "string":
            if value is None:
                self.length(-1, "string", path)
            else:
                self.blob(value.encode("utf-8", "surrogatepass") if isinstance(value, str) else value,
                          "string", path)
        elif t in ("bytes", "records"):
            if value is None:
                self.length(-1, "bytes", path)
            else:
                self.blob(bytes(value), "bytes", path)
        else:
            self.fixed(t, value, path)


REQUEST_HEADER = struct.Struct(">hhi")


def encode_request(api, version, correlation_id, client_id, body):
    """Header + body of one request (no size prefix) -> (bytes, spans).
    Request header v1 for classic versions, v2 (tagged fields) for flexible
    ones; client_id is a classic nullable string in both. A version above
    what the model knows (ApiVersions' KIP-511 probe) is encoded with the
    newest body the model has."""
    flexible = api.flexible(version)
    e = Encoder(flexible)
    e.fixed("int16", api.key, "header.api_key")
    e.fixed("int16", version, "header.api_version")
    e.fixed("int32", correlation_id, "header.correlation_id")
    e.flexible = False
    e.primitive("string", client_id, "header.client_id")
    e.flexible = flexible
    if flexible:
        e.tag_section([], version, "header")
    e.struct(api.request, min(version, api.hi), body, "")
    return bytes(e.out), e.spans


###############################################################################
# 3. DECODER -- answers, read strictly
###############################################################################
# Stricter than a client needs to be, so that doze's answers are held to the
# schema: a negative length where null is not allowed in that version, a
# compact string longer than 0x7fff, an array claiming more elements than
# bytes are left, a varint over 5 bytes, a known tagged field with bytes left
# over, or anything left after the body -- each makes the answer undecodable.

class DecodeError(Exception):
    pass


class Decoder:
    def __init__(self, buf, flexible):
        self.buf, self.pos, self.flexible = buf, 0, flexible

    def take(self, n, what):
        if n < 0 or self.pos + n > len(self.buf):
            raise DecodeError(f"{what}: need {n} bytes at {self.pos}, have {len(self.buf) - self.pos}")
        data = self.buf[self.pos:self.pos + n]
        self.pos += n
        return data

    def fixed(self, t, what):
        if t == "uuid":
            return bytes(self.take(16, what))
        s = FIXED[t]
        v = s.unpack(self.take(s.size, what))[0]
        return bool(v) if t == "bool" else v

    def uvarint(self, what):
        result = shift = 0
        for _ in range(5):
            if self.pos >= len(self.buf):
                raise DecodeError(f"{what}: varint runs past the end")
            b = self.buf[self.pos]
            self.pos += 1
            result |= (b & 0x7F) << shift
            if b < 0x80:
                return result & 0xFFFFFFFF
            shift += 7
        raise DecodeError(f"{what}: varint longer than 5 bytes")

    def length(self, sub, what):
        if self.flexible:
            n = self.uvarint(what)
            return n - 1 if n < 1 << 31 else n - (1 << 32) - 1
        return self.fixed("int16" if sub == "string" else "int32", what)

    def struct(self, fields, v, path):
        d = {}
        known_tags = {}
        for f in fields:
            if not f.present(v):
                continue
            name = f"{path}.{f.name}" if path else f.name
            if f.tagged_in(v):
                known_tags[f.tag] = f
                continue
            d[f.name] = self.value(f, v, name)
        if self.flexible:
            count = self.uvarint(f"{path or 'top'} tag count")
            for _ in range(count):
                tag = self.uvarint("tag")
                size = self.uvarint("tag size")
                data = self.take(size, f"tag {tag}")
                f = known_tags.get(tag)
                if f is not None:
                    sub = Decoder(data, True)
                    d[f.name] = sub.value(f, v, f"{path}.{f.name}" if path else f.name)
                    if sub.pos != len(data):
                        raise DecodeError(f"tagged field {f.name}: {len(data) - sub.pos} bytes left over")
        return d

    def value(self, f, v, name):
        t = f.type
        if t.startswith("[]"):
            n = self.length("array", name)
            if n < 0:
                if not f.nullable_in(v):
                    raise DecodeError(f"{name}: null array, not nullable in v{v}")
                return None
            if n > len(self.buf) - self.pos:
                raise DecodeError(f"{name}: {n} elements in {len(self.buf) - self.pos} bytes")
            if t == "[]":
                return [self.struct(f.fields, v, name) for _ in range(n)]
            return [self.primitive(t[2:], name, False, v) for _ in range(n)]
        if t == "{}":
            if f.nullable_in(v):
                marker = self.fixed("int8", name)
                if marker < 0:
                    return None
            return self.struct(f.fields, v, name)
        return self.primitive(t, name, f.nullable_in(v), v)

    def primitive(self, t, name, nullable, v):
        if t in ("string", "bytes", "records"):
            n = self.length("string" if t == "string" else "bytes", name)
            if n < 0:
                if not nullable:
                    raise DecodeError(f"{name}: null {t}, not nullable in v{v}")
                return None
            if t == "string" and self.flexible and n > 0x7FFF:
                raise DecodeError(f"{name}: string of {n} bytes")
            data = bytes(self.take(n, name))
            if t == "string":
                try:
                    return data.decode("utf-8")
                except UnicodeDecodeError:
                    raise DecodeError(f"{name}: not UTF-8: {data[:40]!r}")
            return data
        return self.fixed(t, name)


def decode_response(api, version, frame):
    """One response frame (without its size) -> (correlation_id, body dict).
    Response header v1 (tagged fields) for flexible versions, except
    ApiVersions, whose header is always v0 (KIP-511)."""
    flexible = api.flexible(version)
    d = Decoder(frame, flexible)
    correlation_id = d.fixed("int32", "correlation_id")
    if flexible and api.key != 18:
        for _ in range(d.uvarint("header tag count")):
            d.uvarint("header tag")
            d.take(d.uvarint("header tag size"), "header tag")
    body = d.struct(api.response, version, "")
    if d.pos != len(frame):
        raise DecodeError(f"{len(frame) - d.pos} bytes left over after the body")
    return correlation_id, body


def get(d, name, default=None):
    """A field of a decoded dict, by name or by alias."""
    if not isinstance(d, dict):
        return default
    if name in d:
        return d[name]
    for k, v in d.items():
        if alias_of(k) == name:
            return v
    return default


def error_codes(d):
    """Every *error_code value anywhere in a decoded answer."""
    out = []
    stack = [d]
    while stack:
        x = stack.pop()
        if isinstance(x, dict):
            for k, v in x.items():
                if k.endswith("error_code") and isinstance(v, int):
                    out.append(v)
                elif isinstance(v, (dict, list)):
                    stack.append(v)
        elif isinstance(x, list):
            stack.extend(i for i in x if isinstance(i, (dict, list)))
    return out


###############################################################################
# 4. RECORD BATCHES -- valid ones, and ones that lie about their records
###############################################################################
# RecordBatch v2 (KIP-98): base_offset int64, batch_length int32,
# partition_leader_epoch int32, magic int8 (2), crc uint32 (CRC-32C of
# everything after it), attributes int16, last_offset_delta int32,
# base_timestamp int64, max_timestamp int64, producer_id int64,
# producer_epoch int16, base_sequence int32, records_count int32, records.
# A record: varint length, int8 attributes, varlong timestamp_delta, varint
# offset_delta, key and value (varint length, -1 null), varint header count,
# headers (key, value). A broker checks the header and the CRC; the "right
# CRC, garbage inside" batches test what happens when something does read
# the records (ListOffsets by timestamp does, in doze).

BATCH_TAIL = struct.Struct(">hiqqqhii")        # attributes .. records_count
_CRC_TABLE = []


def _crc32c_slow(data):
    if not _CRC_TABLE:
        for i in range(256):
            c = i
            for _ in range(8):
                c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
            _CRC_TABLE.append(c)
    crc = 0xFFFFFFFF
    for b in data:
        crc = _CRC_TABLE[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def crc32c(data):
    doze = sys.modules.get("doze_kafka")
    return doze.crc32c(data) if doze is not None else _crc32c_slow(data)


def encode_record(offset_delta, key, value, headers=(), ts_delta=0):
    body = bytearray(b"\x00") + zigzag(ts_delta) + zigzag(offset_delta)
    for part in (key, value):
        body += zigzag(-1) if part is None else zigzag(len(part)) + part
    body += zigzag(len(headers))
    for hk, hv in headers:
        body += zigzag(len(hk)) + hk + (zigzag(-1) if hv is None else zigzag(len(hv)) + hv)
    return zigzag(len(body)) + bytes(body)


def raw_batch(records_bytes, count, last_offset_delta=None, attributes=0, producer_id=-1,
              producer_epoch=-1, base_sequence=-1, base_ts=None, max_ts=None, magic=2, crc=None,
              base_offset=0, batch_length=None, leader_epoch=-1):
    """A batch around any record bytes, with the right CRC unless crc is given."""
    now = int(time.time() * 1000) if base_ts is None else base_ts
    tail = BATCH_TAIL.pack(fit("int16", attributes),
                           fit("int32", count - 1 if last_offset_delta is None else last_offset_delta),
                           fit("int64", now), fit("int64", now if max_ts is None else max_ts),
                           fit("int64", producer_id), fit("int16", producer_epoch),
                           fit("int32", base_sequence), fit("int32", count)) + records_bytes
    c = crc32c(tail) if crc is None else crc
    length = len(tail) + 9 if batch_length is None else batch_length
    return struct.pack(">qiibI", base_offset, fit("int32", length), leader_epoch, magic,
                       c & 0xFFFFFFFF) + tail


def build_batch(records, **kw):
    """A valid uncompressed batch of [(key, value, headers)]."""
    data = b"".join(encode_record(i, k, v, h) for i, (k, v, h) in enumerate(records))
    return raw_batch(data, len(records), **kw)


def parse_batches(data):
    """Records of the uncompressed and gzip batches in a fetched records field
    -> [(offset, key, value)]. Stops at a partial batch (Kafka may cut one).
    Other codecs and control batches are skipped."""
    out, pos = [], 0
    while pos + 61 <= len(data):
        base_offset, length = struct.unpack_from(">qi", data, pos)
        end = pos + 12 + length
        if length < 49 or end > len(data):
            break
        attributes, = struct.unpack_from(">h", data, pos + 21)
        count, = struct.unpack_from(">i", data, pos + 57)
        if attributes & 0x20 or attributes & 0x07 not in (0, 1):   # control, or a codec not read here
            pos = end
            continue
        body = data[pos + 61:end]
        if attributes & 0x07 == 1:                        # gzip (compression.type=gzip recompresses)
            body = zlib.decompress(bytes(body), 47)
        d = Decoder(body, False)
        for _ in range(count):
            length_ = _read_zigzag(d)
            start = d.pos
            d.take(1, "attributes")
            _read_zigzag(d, 10)
            delta = _read_zigzag(d)
            klen = _read_zigzag(d)
            key = None if klen < 0 else bytes(d.take(klen, "key"))
            vlen = _read_zigzag(d)
            value = None if vlen < 0 else bytes(d.take(vlen, "value"))
            d.pos = start + length_
            out.append((base_offset + delta, key, value))
        pos = end
    return out


def _read_zigzag(d, max_bytes=5):
    result = shift = 0
    for _ in range(max_bytes):
        b = d.take(1, "varint")[0]
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return (result >> 1) ^ -(result & 1)
        shift += 7
    raise DecodeError("record varint too long")


def broken_batch(rng, producer_id=-1, producer_epoch=-1, base_sequence=-1, attributes=0, timestamp=None):
    """A batch whose header and CRC are right and whose records are not
    -> (label, bytes)."""
    kinds = {"count_huge_len_neg": 5, "count_huge": 2, "len_not_tiling": 2, "len_huge": 2, "zero_len": 2,
             "garbage": 1, "neg_key_len": 1, "headers_huge": 1, "gzip_garbage": 1, "codec_garbage": 1,
             "codec_invalid": 1, "count_mismatch": 1, "control": 1, "magic": 1, "timestamps": 1,
             "two_batches": 1, "bad_crc": 1, "short": 1, "batch_length": 1, "offset_delta_backwards": 1,
             "varint_endless": 1, "gzip_count_huge": 2}
    kind = rng.choices(list(kinds), list(kinds.values()))[0]
    kw = dict(producer_id=producer_id, producer_epoch=producer_epoch, base_sequence=base_sequence,
              attributes=attributes, base_ts=timestamp, max_ts=timestamp)
    good = encode_record(0, b"k", b"v")
    junk = bytes(rng.getrandbits(8) for _ in range(rng.randrange(1, 40)))
    # a record body that parses, whose length prefix lies: a reader that
    # trusts the length goes backwards (-1) or stands still (0)
    body = b"\x00" + zigzag(rng.choice([-5, -1000, 0, 7])) + zigzag(0) + zigzag(-1) + zigzag(-1) + zigzag(0)
    if kind == "count_huge_len_neg":          # the busy loop of the issue
        tail = rng.choice([junk, body, body, body * 3])
        return kind, raw_batch(zigzag(rng.choice([-1, -1, -1, 0, -2])) + tail, 2 ** 31 - 1, **kw)
    if kind == "count_huge":
        return kind, raw_batch(good * 2, 2 ** 31 - 1, **kw)
    if kind == "len_not_tiling":
        return kind, raw_batch(zigzag(3) + good[1:] + good, 2, **kw)
    if kind == "len_huge":
        return kind, raw_batch(zigzag(2 ** 30) + good[1:], 1, **kw)
    if kind == "zero_len":
        return kind, raw_batch(zigzag(0) * 3, 3, **kw)
    if kind == "garbage":
        return kind, raw_batch(junk, rng.randrange(1, 6), **kw)
    if kind == "neg_key_len":
        body = b"\x00" + zigzag(0) + zigzag(0) + zigzag(-5) + zigzag(1) + b"v" + zigzag(0)
        return kind, raw_batch(zigzag(len(body)) + body, 1, **kw)
    if kind == "headers_huge":
        body = b"\x00" + zigzag(0) + zigzag(0) + zigzag(-1) + zigzag(-1) + zigzag(2 ** 31 - 1)
        return kind, raw_batch(zigzag(len(body)) + body, 1, **kw)
    if kind == "gzip_garbage":
        kw["attributes"] |= 1
        return kind, raw_batch(junk, 1, **kw)
    if kind == "gzip_count_huge":
        kw["attributes"] |= 1
        return kind, raw_batch(gzip.compress(zigzag(-1) + rng.choice([junk, body])), 2 ** 31 - 1, **kw)
    if kind == "codec_garbage":
        kw["attributes"] |= rng.choice([2, 3, 4])
        return kind, raw_batch(junk, 1, **kw)
    if kind == "codec_invalid":
        kw["attributes"] |= rng.choice([5, 6, 7])
        return kind, raw_batch(good, 1, **kw)
    if kind == "count_mismatch":
        return kind, raw_batch(good, 3, last_offset_delta=1, **kw)
    if kind == "control":
        kw["attributes"] |= 0x20
        return kind, raw_batch(good, 1, **kw)
    if kind == "magic":
        return kind, raw_batch(good, 1, magic=rng.choice([0, 1, 3, -1]), **kw)
    if kind == "timestamps":
        kw.update(base_ts=rng.choice([-1, 2 ** 63 - 1, -2 ** 63]), max_ts=rng.choice([-1, 0, 2 ** 63 - 1]))
        return kind, raw_batch(good, 1, **kw)
    if kind == "two_batches":
        one = raw_batch(good, 1, **kw)
        return kind, one + one
    if kind == "bad_crc":
        return kind, raw_batch(good, 1, crc=rng.getrandbits(32), **kw)
    if kind == "short":
        return kind, raw_batch(good, 1, **kw)[:rng.randrange(0, 61)]
    if kind == "batch_length":
        return kind, raw_batch(good, 1, batch_length=rng.choice([-1, 0, 48, 2 ** 31 - 1, 10 ** 6]), **kw)
    if kind == "offset_delta_backwards":
        return kind, raw_batch(encode_record(5, b"k", b"v") + encode_record(-3, b"k", b"v"), 2, **kw)
    return kind, raw_batch(b"\xff" * 12, 1, **kw)          # varint_endless


###############################################################################
# 5. VALUES -- pools, learned ids, and a generator that knows field names
###############################################################################
# Random bytes would mostly be refused by the decoder; to reach the
# handlers, values must look like a client's: topics that exist (created at
# start with 1-4 partitions), unknown and invalid ones; partitions in and out
# of range; groups, members and transactional ids from small pools so that
# requests from different connections meet in the same coordinator state;
# and producer ids, epochs, member ids and generations taken from earlier
# answers on the same connection.

CORE_TOPICS = {"fz-a": 1, "fz-b": 2, "fz-c": 3, "fz-d": 4}
WIDE_TOPIC = "fz-wide"           # many partitions, for requests that span them all (overload)
CHURN_TOPICS = [f"fz-new-{i}" for i in range(8)]
UNKNOWN_TOPICS = [f"fz-unknown-{i}" for i in range(6)]
INVALID_TOPICS = ["", "a/b", "x" * 300, ".", "..", "a b", "fz\u00e9", "fz\x00a", "fz-a" + "." * 246,
                  "fz.a", "__consumer_offsets", "-" * 250]
GROUPS = ["fz-g0", "fz-g1", "fz-g2", "fz-g3", ""]
TXN_IDS = ["fz-t0", "fz-t1", "fz-t2", "fz-t3"]
CONFIG_NAMES = ["retention.ms", "retention.bytes", "cleanup.policy", "max.message.bytes",
                "segment.bytes", "segment.ms", "min.insync.replicas", "compression.type",
                "message.timestamp.type", "log.retention.ms", "log.segment.bytes",
                "message.max.bytes", "log.roll.ms", "log.retention.bytes", "no.such.config", ""]
CONFIG_VALUES = ["1000", "-1", "0", "86400000", "1048576", "compact", "delete", "compact,delete",
                 "abc", "", "9223372036854775807", "2147483648", "-2", "1e3", "producer", "gzip",
                 "LogAppendTime", "true"]
WEIRD_STRINGS = ["", " ", "\u00fc\u00f1\u00ef", "a" * 1000, "%s%n", "\x00", "null", "-1", "../.."]
NOW_MS = lambda: int(time.time() * 1000)            # noqa: E731


class Learned:
    """What one fuzz connection learned from its answers."""

    def __init__(self):
        self.producers = {}          # transactional id (None: idempotent) -> (producer_id, epoch)
        self.sequences = {}          # (producer_id, topic, partition) -> next base_sequence
        self.members = {}            # group -> (member_id, generation_id, protocol_name, leader)
        self.topic_ids = {}          # topic -> uuid bytes
        self.partitions = dict(CORE_TOPICS)   # topic -> partition count, as last seen
        self.high = {}               # (topic, partition) -> a high watermark seen

    def learn(self, api_name, req, resp):
        """Remember the ids in an answer that later requests can reuse."""
        if api_name == "InitProducerId" and get(resp, "error_code") == 0:
            self.producers[get(req, "transactional_id")] = (get(resp, "producer_id"),
                                                           get(resp, "producer_epoch"))
        elif api_name == "JoinGroup":
            member = get(resp, "member_id")
            if member:
                self.members[get(req, "group_id")] = (member, get(resp, "generation_id", -1),
                                                      get(resp, "protocol_name"),
                                                      get(resp, "leader") == member)
        elif api_name in ("Metadata", "CreateTopics"):
            for t in get(resp, "topics") or []:
                name = get(t, "name")
                if isinstance(name, str) and get(t, "error_code") == 0:
                    tid = get(t, "topic_id")
                    if tid and tid != bytes(16):
                        self.topic_ids[name] = tid
                    parts = get(t, "partitions")
                    if isinstance(parts, list) and parts:
                        self.partitions[name] = len(parts)
                    elif isinstance(get(t, "num_partitions"), int) and get(t, "num_partitions") > 0:
                        self.partitions[name] = get(t, "num_partitions")
        elif api_name == "Produce":
            for t in get(resp, "responses") or []:
                for p in get(t, "partition_responses") or []:
                    if get(p, "error_code") == 0:
                        self.high[(get(t, "name"), get(p, "index"))] = get(p, "base_offset", 0) + 1
        elif api_name == "Fetch":
            for t in get(resp, "responses") or []:
                for p in get(t, "partitions") or []:
                    if get(p, "error_code") == 0:
                        self.high[(get(t, "topic"), get(p, "partition_index"))] = get(p, "high_watermark", 0)


class Generator:
    """Builds request dicts for a model, field by field. Rules are looked up
    by the field's name (or alias) and its parent's; everything else gets a
    value of its type. A few per cent of ints get a boundary value at
    generation (so the rest of the request stays consistent)."""

    def __init__(self, rng, learned, bystander_topic=None, boundary_p=0.03):
        self.rng = rng
        self.learned = learned
        self.bystander_topic = bystander_topic
        self.boundary_p = boundary_p

    # --- entry point ---
    def request(self, api, version, partial=None):
        self.api_name = api.name
        return self.struct(api.request, min(version, api.hi), [], [], partial or {})

    def struct(self, fields, v, path, stack, partial=None):
        d = dict(partial) if partial else {}
        for f in fields:                       # partial values given by alias: rename
            if f.alias != f.name and f.alias in d and f.name not in d:
                d[f.name] = d.pop(f.alias)
        stack.append(d)
        for f in fields:
            if not f.present(v):
                continue
            given = d.get(f.name, MISSING)
            if given is None and not f.nullable_in(v):
                given = MISSING                  # a sequence's null where this version allows none
            if given is not MISSING:
                if f.type == "[]" and isinstance(given, list):
                    d[f.name] = [self.struct(f.fields, v, path + [f.alias], stack, item)
                                 if isinstance(item, dict) else item for item in given]
                elif f.type == "{}" and isinstance(given, dict):
                    d[f.name] = self.struct(f.fields, v, path + [f.alias], stack, given)
                continue
            if f.tagged_in(v) and self.rng.random() < 0.5:
                continue
            d[f.name] = self.value(f, v, path, stack)
        stack.pop()
        return d

    def value(self, f, v, path, stack):
        rng = self.rng
        if f.nullable_in(v) and rng.random() < 0.08:
            return None
        t = f.type
        if t == "{}":
            return self.struct(f.fields, v, path + [f.alias], stack)
        if t == "[]":
            rule = COUNT_RULES.get((self.api_name, f.alias))
            n = rule(self, stack) if rule else self.count(f.alias)
            n = None if n is None else min(n, 64)
            if n is None:
                return None if f.nullable_in(v) else []
            return [self.struct(f.fields, v, path + [f.alias], stack) for _ in range(n)]
        if t.startswith("[]"):
            rule = ARRAY_RULES.get(f.alias)
            if rule:
                got = rule(self, stack)
                if got is not None:
                    return got
            return [self.primitive(t[2:], f.alias, path, stack) for _ in range(self.count(f.alias))]
        return self.primitive(t, f.alias, path, stack)

    def count(self, name):
        r = self.rng.random()
        if r < 0.08:
            return 0
        if r < 0.75:
            return 1
        if r < 0.95:
            return 2
        return self.rng.randrange(3, 6)

    def primitive(self, t, name, path, stack):
        rng = self.rng
        if t in INT_RANGE and t != "bool" and rng.random() < self.boundary_p:
            return self.boundary(t)
        rule = RULES.get((path[-1] if path else "", name)) or RULES.get(name)
        if rule:
            got = rule(self, t, path, stack)
            if got is not None:
                return got
        if t == "bool":
            return rng.random() < 0.5
        if t in INT_RANGE:
            return fit(t, rng.choice([0, 0, 1, -1, rng.randrange(0, 100), rng.randrange(-5, 5000)]))
        if t == "float64":
            return rng.choice([0.0, 1.5, -1.0, 1e308])
        if t == "uuid":
            return rng.choice([bytes(16), bytes(rng.getrandbits(8) for _ in range(16))])
        if t == "string":
            return rng.choice(WEIRD_STRINGS + ["fz", "x"])
        return bytes(rng.getrandbits(8) for _ in range(rng.randrange(0, 16)))

    def boundary(self, t):
        lo, hi = INT_RANGE[t]
        return self.rng.choice([lo, hi, lo + 1, hi - 1, -1, 0, 1])

    # --- pools ---
    def topic(self):
        rng = self.rng
        r = rng.random()
        if getattr(self, "api_name", None) == "DeleteTopics" and r > 0.03:
            r = 0.62 + r * 0.38            # rarely the core topics: the others need them
        if r < 0.62:
            return rng.choice(list(CORE_TOPICS))
        if r < 0.74:
            return rng.choice(CHURN_TOPICS)
        if r < 0.86:
            return rng.choice(UNKNOWN_TOPICS)
        return rng.choice(INVALID_TOPICS)

    def partition(self, topic):
        rng = self.rng
        n = self.learned.partitions.get(topic, 1)
        r = rng.random()
        if r < 0.75:
            return rng.randrange(0, max(n, 1))
        if r < 0.88:
            return rng.randrange(0, 6)
        return rng.choice([-1, -2 ** 31, 2 ** 31 - 1, 1000, n])

    def topic_in(self, stack):
        """The topic a partition field belongs to: the nearest enclosing struct
        that names one."""
        for d in reversed(stack):
            for key in ("name", "topic", "topic_name"):
                value = d.get(key)
                if isinstance(value, str):
                    return value
        return None

    def group(self, stack=None):
        return self.rng.choice(GROUPS)

    def group_in(self, stack):
        for d in reversed(stack):
            g = get(d, "group_id")
            if isinstance(g, str):
                return g
        return None

    def txn_id(self):
        return self.rng.choice(TXN_IDS)

    def producer(self, stack):
        """(producer_id, epoch) for a request: learned for its transactional id
        when possible."""
        rng = self.rng
        tid = None
        for d in reversed(stack):
            tid = get(d, "transactional_id", tid)
        known = self.learned.producers.get(tid) or (
            rng.choice(list(self.learned.producers.values())) if self.learned.producers else None)
        if known and rng.random() < 0.8:
            return known
        return rng.choice([(-1, -1), (0, 0), (rng.randrange(0, 1000), rng.randrange(0, 5))])

    def records(self, stack):
        """A records field: mostly valid, sometimes idempotent or transactional
        with learned ids, sometimes right-CRC garbage, sometimes null/empty."""
        rng = self.rng
        r = rng.random()
        n = rng.randrange(1, 4)
        recs = [(rng.choice([None, b"k%d" % i]), b"fz-value-%d" % rng.randrange(1000),
                 [] if rng.random() < 0.7 else [(b"h", b"v"), (b"n", None)]) for i in range(n)]
        if r < 0.45:
            return build_batch(recs)
        if r < 0.62:
            tid = None
            for d in reversed(stack):
                tid = get(d, "transactional_id", tid)
            topic = self.topic_in(stack[:-1]) or ""
            part = get(stack[-1], "index", 0)
            pid, epoch = self.learned.producers.get(tid) or self.producer(stack)
            seq_key = (pid, topic, part)
            seq = self.learned.sequences.get(seq_key, 0)
            shift = rng.choice([0, 0, 0, 0, -n, 5, -1])
            self.learned.sequences[seq_key] = seq + n
            attrs = 0x10 if tid is not None and rng.random() < 0.9 else 0
            if rng.random() < 0.2:
                attrs |= 1
                data = b"".join(encode_record(i, k, v, h) for i, (k, v, h) in enumerate(recs))
                return raw_batch(gzip.compress(data), n, attributes=attrs, producer_id=pid,
                                 producer_epoch=epoch, base_sequence=max(seq + shift, 0))
            return build_batch(recs, producer_id=pid, producer_epoch=epoch,
                               base_sequence=fit("int32", seq + shift), attributes=attrs)
        if r < 0.92:
            pid, epoch = self.producer(stack) if rng.random() < 0.3 else (-1, -1)
            return broken_batch(rng, producer_id=pid, producer_epoch=epoch,
                                base_sequence=0 if pid >= 0 else -1)[1]
        return rng.choice([b"", None, b"\x00" * 61])

    def producer_batch(self, pid, epoch, topic, partition, transactional):
        """The next batch of an idempotent or transactional producer: its
        sequence numbers continue (mostly; sometimes a duplicate or a gap)."""
        rng = self.rng
        n = rng.randrange(1, 4)
        key = (pid, topic, partition)
        seq = self.learned.sequences.get(key, 0)
        self.learned.sequences[key] = seq + n
        seq += rng.choice([0, 0, 0, 0, 0, 0, -n, 3])
        recs = [(b"k%d" % i, b"fz-%d" % (seq + i), []) for i in range(n)]
        return build_batch(recs, producer_id=pid, producer_epoch=epoch, base_sequence=fit("int32", max(seq, 0)),
                           attributes=0x10 if transactional else 0)

    def subscription(self):
        """ConsumerProtocolSubscription v0/v1 bytes (JoinGroup metadata)."""
        rng = self.rng
        if rng.random() < 0.25:
            return bytes(rng.getrandbits(8) for _ in range(rng.randrange(0, 20)))
        topics = rng.sample(list(CORE_TOPICS), rng.randrange(1, 4))
        out = struct.pack(">hi", rng.choice([0, 1]), len(topics))
        for t in topics:
            out += struct.pack(">h", len(t)) + t.encode()
        return out + struct.pack(">i", -1)

    def assignment(self):
        """ConsumerProtocolAssignment bytes (SyncGroup)."""
        rng = self.rng
        if rng.random() < 0.25:
            return bytes(rng.getrandbits(8) for _ in range(rng.randrange(0, 20)))
        t = rng.choice(list(CORE_TOPICS))
        parts = list(range(CORE_TOPICS[t]))
        out = struct.pack(">hih", 0, 1, len(t)) + t.encode() + struct.pack(">i", len(parts))
        return out + b"".join(struct.pack(">i", p) for p in parts) + struct.pack(">i", -1)


def _member(g, stack):
    group = g.group_in(stack)
    known = g.learned.members.get(group)
    if known and g.rng.random() < 0.8:
        return known[0]
    return g.rng.choice(["", "", "fz-bogus-member", known[0] if known else ""])


def _generation(g, stack):
    known = g.learned.members.get(g.group_in(stack))
    if known and g.rng.random() < 0.8:
        return known[1]
    return g.rng.choice([-1, 0, 1, 2])


def _resource_name(g, t, path, stack):
    rtype = get(stack[-1], "resource_type", 2)
    if rtype == 2:
        return g.topic()
    if rtype in (4, 8):
        return g.rng.choice(["1", "1", "1", "", "0", "x"])
    return g.rng.choice(["", "fz-g0", "x"])


def _coordinator_key(g, t, path, stack):
    key_type = get(stack[-1], "key_type", 0)
    return g.txn_id() if key_type == 1 else g.group()


def _partition_rule(g, t, path, stack):
    return g.partition(g.topic_in(stack[:-1]) or g.topic_in(stack))


def _offset_rule(g, t, path, stack):
    rng = g.rng
    topic = g.topic_in(stack)
    part = get(stack[-1], "partition", get(stack[-1], "partition_index", 0))
    high = g.learned.high.get((topic, part))
    return rng.choice([0, 0, 1, -1, high if high is not None else 0, high or 0,
                       rng.randrange(0, 50), 2 ** 63 - 1, -2])


RULES = {
    # topics
    "topic": lambda g, t, p, s: g.topic(),
    "topic_name": lambda g, t, p, s: g.topic(),
    ("topics", "name"): lambda g, t, p, s: g.topic(),
    ("topic_data", "name"): lambda g, t, p, s: g.topic(),
    ("creatable_topics", "name"): lambda g, t, p, s: g.topic(),
    "topic_id": lambda g, t, p, s: (g.learned.topic_ids.get(g.topic()) or
                                    g.rng.choice([bytes(16), b"\x01" * 16, g.rng.randbytes(16)
                                                  if hasattr(g.rng, "randbytes") else b"\x02" * 16])),
    # rarely, around Kafka's 10,000-partitions-a-request limit: made in steps, no stall allowed
    "num_partitions": lambda g, t, p, s: g.rng.choice([9999, 10000, 10001, 2 ** 31 - 1]) if g.rng.random() < 0.01
    else g.rng.choice([1, 1, 2, 3, 4, -1, 0, -2]),
    "replication_factor": lambda g, t, p, s: g.rng.choice([-1, 1, 1, 3, 0]),
    "count": lambda g, t, p, s: g.learned.partitions.get(get(s[-1], "name"), 1) + (
        g.rng.choice([9999, 10000, 2 ** 31 - 2]) if g.rng.random() < 0.01 else g.rng.choice([1, 1, 2, 0, -1])),
    "broker_ids": None,
    ("assignments", "partition_index"): lambda g, t, p, s: g.rng.choice([0, 1, 2, -1]),
    # partitions and offsets
    "partition": _partition_rule, "partition_index": _partition_rule, "index": _partition_rule,
    "fetch_offset": _offset_rule, "offset": _offset_rule, "committed_offset": _offset_rule,
    "log_start_offset": lambda g, t, p, s: g.rng.choice([-1, -1, 0]),
    "timestamp": lambda g, t, p, s: g.rng.choice([-1, -2, -3, -4, -5, 0, NOW_MS() - 3600000,
                                                 NOW_MS(), 2 ** 63 - 1, 1]),
    "current_leader_epoch": lambda g, t, p, s: g.rng.choice([-1, -1, 0, 1]),
    "last_fetched_epoch": lambda g, t, p, s: g.rng.choice([-1, -1, 0, 5]),
    "committed_leader_epoch": lambda g, t, p, s: g.rng.choice([-1, 0]),
    "committed_metadata": lambda g, t, p, s: g.rng.choice(["", "", "m", "m" * 5000]),
    "partition_max_bytes": lambda g, t, p, s: g.rng.choice([1048576, 1, 100, 0]),
    "max_bytes": lambda g, t, p, s: g.rng.choice([1048576, 52428800, 1, 1000]),
    "min_bytes": lambda g, t, p, s: g.rng.choice([0, 1, 1]),
    "max_wait_ms": lambda g, t, p, s: g.rng.choice([0, 0, 10, 50]),
    "isolation_level": lambda g, t, p, s: g.rng.choice([0, 1, 1, 2]),
    "replica_id": lambda g, t, p, s: g.rng.choice([-1, -1, -1, 0, 1, -2]),
    "session_id": lambda g, t, p, s: g.rng.choice([0, 0, 0, 1]),
    "session_epoch": lambda g, t, p, s: g.rng.choice([-1, 0, 0, 1]),
    "cluster_id": lambda g, t, p, s: g.rng.choice([None, "bogus"]),
    "rack_id": lambda g, t, p, s: g.rng.choice(["", "r1"]),
    # produce
    "acks": lambda g, t, p, s: g.rng.choice([-1, -1, -1, 1, 1, 0, 2, -2]),
    "timeout_ms": lambda g, t, p, s: g.rng.choice([1000, 5000, 0, 100]),
    "records": lambda g, t, p, s: g.records(s),
    # groups
    "group_id": lambda g, t, p, s: g.group(),
    "groups_names": None,
    "member_id": lambda g, t, p, s: _member(g, s),
    "group_instance_id": lambda g, t, p, s: g.rng.choice([None, None, None, "fz-inst-0", "fz-inst-1"]),
    "generation_id": lambda g, t, p, s: _generation(g, s),
    "generation_id_or_member_epoch": lambda g, t, p, s: _generation(g, s),
    "member_epoch": lambda g, t, p, s: g.rng.choice([-1, 0]),
    # JoinGroup v0 waits for the other members up to the session timeout: keep both short
    "session_timeout_ms": lambda g, t, p, s: g.rng.choice([1000, 1000, 2000, 6000]),
    "rebalance_timeout_ms": lambda g, t, p, s: g.rng.choice([0, 100, 300]),
    "protocol_type": lambda g, t, p, s: g.rng.choice(["consumer", "consumer", "", "connect", None]),
    "protocol_name": lambda g, t, p, s: g.rng.choice(["range", "roundrobin", "", None]),
    ("protocols", "name"): lambda g, t, p, s: g.rng.choice(["range", "roundrobin", "x"]),
    ("protocols", "metadata"): lambda g, t, p, s: g.subscription(),
    "assignment": lambda g, t, p, s: g.assignment(),
    "reason": lambda g, t, p, s: g.rng.choice([None, "fuzz", ""]),
    "retention_time_ms": lambda g, t, p, s: g.rng.choice([-1, -1, 0, 1000]),
    "require_stable": lambda g, t, p, s: g.rng.random() < 0.3,
    "key": _coordinator_key,
    "key_type": lambda g, t, p, s: g.rng.choice([0, 0, 1, 1, 2]),
    ("groups", "group_id"): lambda g, t, p, s: g.group(),
    # transactions
    "transactional_id": lambda g, t, p, s: g.rng.choice(TXN_IDS + [None, None, ""]),
    "producer_id": lambda g, t, p, s: g.producer(s)[0],
    "producer_epoch": lambda g, t, p, s: g.producer(s)[1],
    "transaction_timeout_ms": lambda g, t, p, s: g.rng.choice([60000, 1000, 5000, -1, 0, 2 ** 31 - 1]),
    "committed": lambda g, t, p, s: g.rng.random() < 0.6,
    "transaction_result": lambda g, t, p, s: g.rng.random() < 0.6,
    "coordinator_epoch": lambda g, t, p, s: g.rng.choice([0, -1, 1]),
    "duration_filter": lambda g, t, p, s: g.rng.choice([-1, 0, 1000]),
    # configs
    ("configs", "name"): lambda g, t, p, s: g.rng.choice(CONFIG_NAMES),
    ("configs", "value"): lambda g, t, p, s: g.rng.choice(CONFIG_VALUES + [None]),
    "config_operation": lambda g, t, p, s: g.rng.choice([0, 0, 1, 2, 3, 4, -1]),
    "resource_type": lambda g, t, p, s: g.rng.choice([2, 2, 2, 2, 4, 4, 8, 0, 3, 99]),
    "resource_name": _resource_name,
    "validate_only": lambda g, t, p, s: g.rng.random() < 0.3,
    "include_synonyms": None,
    # ACLs (a code 0, UNKNOWN, closes the connection as in Kafka: rare here, so the rest is reached)
    ("creations", "resource_type"): lambda g, t, p, s: g.rng.choice([2, 2, 3, 4, 5, 1, 7, 99, 0]),
    "resource_type_filter": lambda g, t, p, s: g.rng.choice([1, 1, 2, 3, 4, 5, 99, 0]),
    "resource_pattern_type": lambda g, t, p, s: g.rng.choice([3, 3, 4, 1, 2, 9]),
    "pattern_type_filter": lambda g, t, p, s: g.rng.choice([1, 2, 3, 4, 9]),
    "operation": lambda g, t, p, s: g.rng.choice([1, 2, 3, 4, 5, 6, 7, 8, 12, 99, 0]),
    "permission_type": lambda g, t, p, s: g.rng.choice([1, 2, 3, 3, 9]),
    "principal": lambda g, t, p, s: g.rng.choice(["User:fz-alice", "User:*", "User:ANONYMOUS", "bad", ""]),
    "principal_filter": lambda g, t, p, s: g.rng.choice([None, "User:fz-alice", "User:*"]),
    "host": lambda g, t, p, s: g.rng.choice(["*", "*", "127.0.0.1", "10.0.0.1", ""]),
    "host_filter": lambda g, t, p, s: g.rng.choice([None, "*", "127.0.0.1"]),
    # misc
    "allow_auto_topic_creation": lambda g, t, p, s: g.rng.random() < 0.5,
    "client_software_name": lambda g, t, p, s: g.rng.choice(["fuzz", "apache-kafka-java", "", "-bad-",
                                                             "a" * 200]),
    "client_software_version": lambda g, t, p, s: g.rng.choice(["1.0", "4.3.1", "", "!"]),
    "endpoint_type": lambda g, t, p, s: g.rng.choice([1, 1, 2, 0, 5]),
}
RULES = {k: v for k, v in RULES.items() if v is not None}

def _create_topics_assignments(g, stack):
    """Manual assignments exclude num_partitions/replication_factor (-1 both)."""
    if g.rng.random() < 0.8:
        return 0
    if g.rng.random() < 0.8:
        stack[-1]["num_partitions"] = stack[-1]["replication_factor"] = -1
    return g.rng.choice([1, 1, 2])


def _create_partitions_assignments(g, stack):
    """Null (the broker places them) or one per new partition."""
    if g.rng.random() < 0.7:
        return None
    topic = stack[-1]
    n = get(topic, "count", 1) - g.learned.partitions.get(get(topic, "name"), 1)
    if not 0 <= n <= 50 or g.rng.random() < 0.2:          # a huge count: a few, mismatched
        return g.rng.randrange(0, 3)
    return n


COUNT_RULES = {             # (API, struct array) -> its element count (None: null)
    ("CreateTopics", "assignments"): _create_topics_assignments,
    ("CreatePartitions", "assignments"): _create_partitions_assignments,
}

ARRAY_RULES = {
    "partitions": lambda g, s: sorted({g.partition(g.topic_in(s)) for _ in range(g.rng.randrange(0, 4))}),
    "partition_indexes": lambda g, s: [g.partition(g.topic_in(s)) for _ in range(g.rng.randrange(0, 4))],
    "broker_ids": lambda g, s: g.rng.choice([[1], [1], [], [2], [1, 1], [-1]]),
    "topic_names": lambda g, s: [g.topic() for _ in range(g.rng.randrange(0, 3))],
    "groups": lambda g, s: [g.group() for _ in range(g.rng.randrange(0, 3))],
    "groups_names": lambda g, s: [g.group() for _ in range(g.rng.randrange(0, 3))],
    "coordinator_keys": lambda g, s: [(g.txn_id() if get(s[-1], "key_type") == 1 else g.group())
                                      for _ in range(g.rng.randrange(0, 3))],
    "transactional_ids": lambda g, s: [g.txn_id() for _ in range(g.rng.randrange(0, 3))],
    "producer_id_filters": lambda g, s: [pid for pid, _ in list(g.learned.producers.values())[:2]],
    "configuration_keys": lambda g, s: g.rng.choice([None, [g.rng.choice(CONFIG_NAMES)]]),
    "state_filters": lambda g, s: g.rng.choice([[], ["Ongoing"], ["CompleteCommit", "Empty"], ["bogus"]]),
    "states_filter": lambda g, s: g.rng.choice([[], ["Stable"], ["Empty", "bogus"]]),
    "types_filter": lambda g, s: g.rng.choice([[], ["classic"], ["consumer"], ["bogus"]]),
}


###############################################################################
# 6. MUTATIONS -- aimed at the structure the encoder mapped
###############################################################################
# Each mutation replaces one span (or inserts after one) and returns a label
# such as "len=-1@topics.name" for the report. The frame's size prefix is
# computed after mutating, so the frame boundaries stay right (the
# transport-level mutations -- bad sizes, half frames -- are in the runner).

class Frame:
    """One request frame: its bytes (header + body, no size), the span map,
    and what it was meant to be."""
    __slots__ = ("api", "version", "corr", "body", "data", "spans", "labels", "sent_at", "conn_index",
                 "may_skip", "header_api", "header_version", "tag")

    def __init__(self, api, version, corr, body, data, spans):
        self.api, self.version, self.corr, self.body = api, version, corr, body
        self.data, self.spans, self.labels = data, spans, []
        self.sent_at = 0.0
        self.conn_index = -1
        self.may_skip = False
        self.header_api, self.header_version = api.key, version
        self.tag = ""                    # what an unmutated frame is for, e.g. "wide:produce n=2000"

    @property
    def mutated(self):
        return bool(self.labels)

    def wire(self):
        return struct.pack(">i", len(self.data)) + self.data

    def label(self):
        return ",".join(self.labels) or ("valid " + self.tag if self.tag else "valid")

    def replace(self, start, end, new):
        """Splice new bytes over [start, end) and move the span map along:
        spans after the edit shift, a length whose value encloses the edit
        keeps governing it, spans the edit cuts into are forgotten."""
        delta = len(new) - (end - start)
        self.data = self.data[:start] + bytes(new) + self.data[end:]
        spans = []
        for sp in self.spans:
            if sp.start >= end and not (sp.start == end == start and sp.kind == "tagsec"):
                spans.append(sp.shifted(delta))
            elif sp.end <= start:
                sp2 = sp.shifted(0)
                if sp2.whole_end is not None:
                    if sp2.whole_end >= end:
                        sp2.whole_end += delta
                    elif sp2.whole_end > start:
                        sp2.whole_end = None
                if sp2.kind == "tagsec" and sp2.end >= end and sp2.end > start:
                    sp2.end += delta
                spans.append(sp2)
            elif sp.kind == "tagsec" and sp.start <= start and sp.end >= end:
                sp2 = sp.shifted(0)
                sp2.end += delta
                spans.append(sp2)
        self.spans = spans

    def reread_header(self):
        """After a mutation: what the header now says."""
        if len(self.data) >= 8:
            self.header_api, self.header_version, self.corr = REQUEST_HEADER.unpack_from(self.data, 0)
        else:
            self.header_api = None


def _len_bytes(sp, n):
    if sp.compact:
        return uvarint(n + 1 if n >= -1 else (n + 1) & 0xFFFFFFFF)
    if sp.sub == "string":
        return FIXED["int16"].pack(fit("int16", n))
    return FIXED["int32"].pack(fit("int32", n))


def _pick(rng, frame, kinds, body_only=True):
    spans = [sp for sp in frame.spans if sp.kind in kinds and not (body_only and sp.path.startswith("header"))]
    return rng.choice(spans) if spans else None


def m_int(rng, frame):
    sp = _pick(rng, frame, ("fixed",))
    if sp is None:
        return None
    t = sp.sub
    if t == "uuid":
        new = rng.choice([b"\xff" * 16, bytes(16), bytes(rng.getrandbits(8) for _ in range(16))])
        frame.replace(sp.start, sp.end, new)
        return f"uuid@{sp.path}"
    if t == "float64":
        value = rng.choice([float("nan"), float("inf"), -0.0, 1e308])
        frame.replace(sp.start, sp.end, FIXED[t].pack(value))
        return f"float={value}@{sp.path}"
    lo, hi = INT_RANGE[t]
    if t == "bool":
        value = rng.choice([2, 255, 0, 1])
    else:
        orig = sp.value if isinstance(sp.value, int) else 0
        value = rng.choice([0, -1, lo, hi, lo + 1, hi - 1, 1, orig + 1, orig - 1,
                            rng.randint(lo, hi), rng.randint(-10, 10)])
        value = fit(t, value)
    frame.replace(sp.start, sp.end, FIXED[t].pack(value))
    return f"{t}={value}@{sp.path}"


def m_null(rng, frame):
    sp = _pick(rng, frame, ("len", "marker"))
    if sp is None:
        return None
    if sp.kind == "marker":
        value = rng.choice([-1, -1, 0, 2, 127, -128])
        frame.replace(sp.start, sp.end, FIXED["int8"].pack(value))
        return f"marker={value}@{sp.path}"
    end = sp.end
    drop = sp.whole_end is not None and rng.random() < 0.5      # also remove the value
    if drop:
        end = sp.whole_end
    frame.replace(sp.start, end, _len_bytes(sp, -1))
    return f"null{'(dropped)' if drop else ''}@{sp.path}"


def m_len(rng, frame):
    sp = _pick(rng, frame, ("len",))
    if sp is None:
        return None
    orig = sp.value if isinstance(sp.value, int) else 0
    left = len(frame.data) - sp.end
    if sp.compact:
        choices = [-2, -5, 0, orig + 1, orig - 1, 0x7FFF, 0x8000, left + 1, 2 ** 31 - 2, 2 ** 31 - 1,
                   2 ** 32 - 2]
    elif sp.sub == "string":
        choices = [-2, -5, -32768, 0, orig + 1, orig - 1, 0x7FFF, left + 1]
    else:
        choices = [-2, -5, -2 ** 31, 0, orig + 1, orig - 1, 2 ** 31 - 1, left + 1, 2 ** 30]
    n = rng.choice(choices)
    frame.replace(sp.start, sp.end, _len_bytes(sp, n))
    return f"{sp.sub}len={n}@{sp.path}"


def m_count(rng, frame):
    spans = [sp for sp in frame.spans if sp.kind == "len" and sp.sub == "array"]
    if not spans:
        return m_len(rng, frame)
    sp = rng.choice(spans)
    left = len(frame.data) - sp.end
    n = rng.choice([-1, 2 ** 31 - 1, left + 1, left, (sp.value or 0) * 1000 + 1, 1000000, -2 ** 31])
    frame.replace(sp.start, sp.end, _len_bytes(sp, n))
    return f"count={n}@{sp.path}"


def m_truncate(rng, frame):
    cut = rng.randrange(0, len(frame.data)) if rng.random() < 0.1 else \
        rng.randrange(min(8, len(frame.data) - 1), len(frame.data))
    frame.replace(cut, len(frame.data), b"")
    return f"truncate@{cut}"


def m_varint(rng, frame):
    sp = _pick(rng, frame, ("len", "tagcount", "tagid", "tagsize"))
    if sp is None or not sp.compact:
        return m_len(rng, frame)
    value = (sp.value + 1) if sp.kind == "len" and isinstance(sp.value, int) and sp.value >= -1 else \
        (sp.value or 0)
    kind = rng.choice(["endless", "six", "five_max", "endless_at_end"])
    if kind == "endless":
        new = b"\xff" * 10
    elif kind == "six":                          # the same value in 6 bytes: over-long
        v = value & 0xFFFFFFFF
        new = bytes(((v >> (7 * i)) & 0x7F) | 0x80 for i in range(5)) + b"\x00"
    elif kind == "five_max":
        new = b"\xff\xff\xff\xff\x0f"
    else:
        frame.replace(sp.start, len(frame.data), b"\xff" * rng.randrange(1, 6))
        return f"varint-cut@{sp.path}"
    frame.replace(sp.start, sp.end, new)
    return f"varint-{kind}@{sp.kind}:{sp.path}"


def m_unknown_tag(rng, frame):
    secs = [sp for sp in frame.spans if sp.kind == "tagsec"]
    if not secs:
        return m_int(rng, frame)
    sp = rng.choice(secs)
    tag = rng.choice([0, 1, 2, 3, 7, 100, 10000, 2 ** 31 - 1, 2 ** 32 - 1])
    data = bytes(rng.getrandbits(8) for _ in range(rng.randrange(0, 9)))
    size = rng.choice([len(data)] * 4 + [len(data) + 1, 2 ** 31 - 1, 2 ** 32 - 1, 100000])
    count = (sp.value or 0) + 1
    # insert at the section's end first (positions before it stay valid)
    frame.replace(sp.end, sp.end, uvarint(tag) + uvarint(size) + data)
    # then the count, which is the section's first varint
    old = Decoder(frame.data[sp.start:sp.start + 5], True)
    try:
        old.uvarint("count")
        frame.replace(sp.start, sp.start + old.pos, uvarint(count))
    except DecodeError:
        pass
    return f"tag={tag},size={size}@{sp.path}"


def m_tag_size(rng, frame):
    sp = _pick(rng, frame, ("tagsize",))
    if sp is None:
        return m_unknown_tag(rng, frame)
    n = rng.choice([sp.value + 1, max(sp.value - 1, 0), 0, 2 ** 31 - 1, 2 ** 32 - 1,
                    len(frame.data) - sp.end + 1])
    frame.replace(sp.start, sp.end, uvarint(n))
    return f"tagsize={n}@{sp.path}"


def m_flip(rng, frame):
    data = bytearray(frame.data)
    k = rng.randrange(1, 5)
    lo = 0 if rng.random() < 0.1 else min(8, len(data) - 1)
    where = []
    for _ in range(k):
        i = rng.randrange(lo, len(data))
        data[i] ^= 1 << rng.randrange(8) if rng.random() < 0.5 else rng.randrange(1, 256)
        where.append(i)
    frame.data = bytes(data)
    frame.spans = []                              # the map no longer holds
    return f"flip@{where}"


def m_trailing(rng, frame):
    extra = bytes(rng.getrandbits(8) for _ in range(rng.randrange(1, 65)))
    frame.replace(len(frame.data), len(frame.data), extra)
    return f"trailing+{len(extra)}"


def m_header(rng, frame):
    kind = rng.choice(["version", "version", "key", "client_id"])
    if kind == "version":
        v = rng.choice([frame.api.hi + 1, frame.api.lo - 1, -1, 32767, -32768])
        frame.data = frame.data[:2] + FIXED["int16"].pack(fit("int16", v)) + frame.data[4:]
        return f"header.version={v}"
    if kind == "key":
        k = rng.choice([-1, 17, 36, 1000, 32767, 67, 68, 75])
        frame.data = FIXED["int16"].pack(k) + frame.data[2:]
        return f"header.api_key={k}"
    n = rng.choice([-2, 0x7FFF, len(frame.data), -32768])
    frame.data = frame.data[:8] + FIXED["int16"].pack(n) + frame.data[10:]
    frame.spans = []
    return f"header.client_id_len={n}"


def m_oversize(rng, frame):
    """A value of a few MiB: inside a bytes/records field when there is one."""
    size = rng.randrange(1, 5) * 1024 * 1024
    filler = bytes([rng.getrandbits(8)]) * size
    payloads = [sp for sp in frame.spans if sp.kind == "payload" and sp.sub == "bytes"]
    lens = {sp.end: sp for sp in frame.spans if sp.kind == "len" and sp.sub == "bytes"}
    if payloads:
        p = rng.choice(payloads)
        ln = lens.get(p.start)
        if ln is not None:
            frame.replace(p.start, p.end, filler)
            frame.replace(ln.start, ln.end, _len_bytes(ln, size))
            return f"oversize={size}@{p.path}"
    frame.replace(len(frame.data), len(frame.data), filler)
    return f"oversize-trailing={size}"


MUTATIONS = [(m_int, 20), (m_null, 14), (m_len, 12), (m_count, 8), (m_truncate, 8), (m_varint, 6),
             (m_unknown_tag, 6), (m_tag_size, 3), (m_flip, 8), (m_trailing, 4), (m_header, 2)]


def mutate(rng, frame, n=1):
    for _ in range(n):
        fns, weights = zip(*MUTATIONS)
        fn = rng.choices(fns, weights)[0]
        if not frame.data:
            break
        label = fn(rng, frame)
        if label:
            frame.labels.append(label)
    frame.reread_header()
    return frame


###############################################################################
# 6b. SASL AND TLS -- the secure listener (--security)
###############################################################################
# With --security the broker gets a SASL_SSL listener beside PLAINTEXT (PLAIN,
# SCRAM-SHA-256 and SCRAM-SHA-512; the recordings' throwaway certificate) and
# Kafka's StandardAuthorizer (allow.everyone.if.no.acl.found, User:ANONYMOUS
# the super user: PLAINTEXT's fuzz and the bystander pass every check). Every
# odd fuzz connection goes there: TLS, then a valid authentication (any of the
# three mechanisms, SaslHandshake v1 or v0's bare tokens, ApiVersions first or
# not), then the same fuzz as on PLAINTEXT, its principal subject to the ACLs
# the fuzz itself creates. Beside it, hostile exchanges on fresh connections
# (Worker.op_sasl): wrong passwords, unknown mechanisms, requests before
# authentication, mutated SaslHandshake/SaslAuthenticate frames, garbage and
# oversized tokens, SCRAM finals with a wrong nonce, proof or a replay, a
# Kafka frame or garbage where TLS is expected, a ClientHello cut short, TLS
# records broken under the session; and re-authentication (KIP-368) on
# authenticated connections. Findings: a wrong credential or a request before
# authentication answered as if authenticated, and a valid authentication
# refused (once its SCRAM credential is restored: the fuzz's own
# AlterUserScramCredentials may have changed it).

SECURE_LISTENER = "SASL_SSL"
PLAIN_USER, PLAIN_PASSWORD = "fuzzplain", "fuzzplain-secret"
SCRAM_USER, SCRAM_PASSWORD = "fuzzscram", "fuzzscram-secret"
SCRAM = {"SCRAM-SHA-256": (1, "sha256"), "SCRAM-SHA-512": (2, "sha512")}
WRONG_PASSWORD = "not-the-password"
SCRAM_SALT, SCRAM_ITERATIONS = b"fuzz-scram-salt", 4096
MECHANISMS = ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
SASL_MAX_RECEIVE = 524288                  # sasl.server.max.receive.size's default


def security_settings(plain_port, secure_port):
    """The broker settings of --security: PLAINTEXT on plain_port (0: any), SASL_SSL on secure_port."""
    from certs import RECORDING_TLS_SETTINGS
    return dict(RECORDING_TLS_SETTINGS, **{
        "listeners": f"PLAINTEXT://127.0.0.1:{plain_port},{SECURE_LISTENER}://127.0.0.1:{secure_port}",
        "listener.security.protocol.map": f"PLAINTEXT:PLAINTEXT,{SECURE_LISTENER}:{SECURE_LISTENER}",
        "sasl.enabled.mechanisms": ",".join(MECHANISMS),
        f"listener.name.{SECURE_LISTENER.lower()}.plain.sasl.jaas.config":
            f'org.apache.kafka.common.security.plain.PlainLoginModule required user_{PLAIN_USER}="{PLAIN_PASSWORD}";',
        "connection.failed.authentication.delay.ms": "20",
        "connections.max.reauth.ms": "60000",
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "allow.everyone.if.no.acl.found": "true", "super.users": "User:ANONYMOUS"})


def tls_client_context():
    from certs import recording_client_context
    return recording_client_context()


def client_hello(ctx):
    """The bytes of a real TLS ClientHello (from an SSLObject over memory BIOs)."""
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    obj = ctx.wrap_bio(incoming, outgoing, server_hostname="localhost")
    try:
        obj.do_handshake()
    except ssl.SSLWantReadError:
        pass
    return outgoing.read()


def scram_upsertions():
    return [{"name": SCRAM_USER, "mechanism": m, "iterations": SCRAM_ITERATIONS, "salt": SCRAM_SALT,
             "salted_password": hashlib.pbkdf2_hmac(d, SCRAM_PASSWORD.encode(), SCRAM_SALT, SCRAM_ITERATIONS)}
            for m, d in SCRAM.values()]


class ScramClient:
    """The client side of SCRAM (RFC 5802): first(), then final(server_first)."""

    def __init__(self, mechanism, user, password, rng):
        self.digest = SCRAM[mechanism][1]
        self.user, self.password = user, password
        self.nonce = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz0123456789") for _ in range(24))

    def first(self):
        self.bare = f"n={self.user},r={self.nonce}"
        return f"n,,{self.bare}".encode()

    def final(self, server_first, nonce=None, proof=None):
        fields = dict(kv.split("=", 1) for kv in server_first.decode().split(",") if "=" in kv)
        salted = hashlib.pbkdf2_hmac(self.digest, self.password.encode(), base64.b64decode(fields["s"]),
                                     int(fields["i"]))
        client_key = hmac.new(salted, b"Client Key", self.digest).digest()
        stored = hashlib.new(self.digest, client_key).digest()
        without_proof = f"c=biws,r={nonce or fields['r']}"
        auth = f"{self.bare},{server_first.decode()},{without_proof}".encode()
        signature = hmac.new(stored, auth, self.digest).digest()
        proof = proof or bytes(a ^ b for a, b in zip(client_key, signature))
        server_key = hmac.new(salted, b"Server Key", self.digest).digest()
        self.server_final = b"v=" + base64.b64encode(hmac.new(server_key, auth, self.digest).digest())
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()


def recv_exactly(sock, n):
    """n bytes from sock (lib.recv_exactly); ConnClosed if the broker closes first."""
    try:
        return lib.recv_exactly(sock, n)
    except lib.Closed:
        raise ConnClosed("broker closed the connection") from None


class AuthRefused(Exception):
    """A valid authentication got an error answer (or none)."""


def tcp_connect(addr, timeout):
    """A TCP connection to addr, Nagle off: a frame goes out as it is written."""
    sock = socket.create_connection(addr, timeout=timeout)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def close_quietly(sock):
    """Close sock; an error on closing is of no interest (the connection is over)."""
    try:
        sock.close()
    except OSError:
        pass


class SecureSide:
    """Worker's part on the secure listener: connecting (TLS, then SASL) and the
    hostile exchanges. Counts go to the runner (count_security, under its lock)."""

    def secure_tcp(self, timeout):
        """A TCP connection to the SASL_SSL listener, TLS not yet begun."""
        return tcp_connect(self.r.secure_addr, timeout)

    def tls_wrap(self, raw):
        return self.r.tls.wrap_socket(raw, server_hostname="localhost")

    def secure_connect(self):
        raw = self.secure_tcp(5)
        try:
            sock = self.tls_wrap(raw)
        except (ssl.SSLError, OSError) as e:
            raw.close()
            self.r.count_security("tls", "valid handshake failed")
            if isinstance(e, ssl.SSLError) and not self.r.restarting:
                self.r.finding("tls-refused", f"a valid TLS handshake failed: {e}", "tls refused", worker=self)
            raise OSError(str(e)) from None
        self.r.count_security("tls", "handshakes")
        try:
            self.authenticate(sock)
        except AuthRefused as e:
            sock.close()
            self.auth_failures += 1
            if self.auth_failures >= 2 and not self.r.restarting:
                self.r.finding("valid-auth-refused", str(e), _norm(str(e), 60), worker=self)
            self.r.restore_credentials()
            raise OSError(str(e)) from None
        except (OSError, ConnClosed, DecodeError) as e:
            sock.close()
            self.r.count_security("auth", f"cut off ({type(e).__name__})")
            raise OSError(str(e)) from None
        self.auth_failures = 0
        return sock

    def sasl_call(self, sock, api_key, version, body, raw_token=None):
        """One request on sock, its answer decoded (None for v0's bare token:
        the bare answer bytes then). Counted in the per-API table."""
        if raw_token is not None:
            sock.sendall(struct.pack(">i", len(raw_token)) + raw_token)
            return None, self.read_bare(sock)
        api = self.r.models[api_key]
        corr = self.next_corr()
        data, _ = encode_request(api, version, corr, "fuzz-secure", body)
        st = self.stats.per_api[api.name]
        st["sent"] += 1
        self.stats.versions[api.name].add(version)
        sock.settimeout(self.r.answer_timeout + 1)
        sock.sendall(struct.pack(">i", len(data)) + data)
        frame = self.read_bare(sock)
        _, resp = decode_response(api, version, frame)
        st["answered"] += 1
        if all(c == 0 for c in error_codes(resp)):
            st["ok"] += 1
        return resp, None

    def read_bare(self, sock):
        return recv_exactly(sock, struct.unpack(">i", recv_exactly(sock, 4))[0])

    def authenticate(self, sock, mechanism=None, reauth=False):
        """A valid SASL exchange on sock; AuthRefused when the broker says no."""
        rng = self.rng
        mechanism = mechanism or rng.choice(MECHANISMS)
        if not reauth and rng.random() < 0.5:
            self.sasl_call(sock, 18, rng.choice([0, 3]), {"client_software_name": "fuzz",
                                                          "client_software_version": "1"})
        bare = not reauth and rng.random() < 0.2               # SaslHandshake v0: bare tokens
        h, _ = self.sasl_call(sock, 17, 0 if bare else 1, {"mechanism": mechanism})
        if get(h, "error_code") != 0:
            raise AuthRefused(f"SaslHandshake {mechanism}: error {get(h, 'error_code')}")

        def token(data):
            if bare:
                return self.sasl_call(sock, 36, 0, None, raw_token=data)[1]
            resp, _ = self.sasl_call(sock, 36, rng.randint(0, 2), {"auth_bytes": data})
            if get(resp, "error_code") != 0:
                raise AuthRefused(f"SaslAuthenticate {mechanism}: error {get(resp, 'error_code')} "
                                  f"{get(resp, 'error_message')}")
            return get(resp, "auth_bytes")
        try:
            if mechanism == "PLAIN":
                token(f"\0{PLAIN_USER}\0{PLAIN_PASSWORD}".encode())
            else:
                scram = ScramClient(mechanism, SCRAM_USER, SCRAM_PASSWORD, rng)
                server_first = token(scram.first())
                final = token(scram.final(server_first))
                if final != scram.server_final:
                    raise AuthRefused(f"{mechanism}: the server's final message does not prove the key")
        except ConnClosed:
            if bare:                         # a bare token refused: the broker closes (after the delay)
                raise AuthRefused(f"SaslHandshake v0 {mechanism}: closed at a bare token") from None
            raise
        if not reauth:
            self.auth_mechanism, self.auth_bare = mechanism, bare
        self.r.count_security("auth", f"{mechanism}{' v0' if bare else ''}{' re-auth' if reauth else ''} ok")

    # --- the hostile side ---
    HOSTILE = ["wrong password", "unknown mechanism", "request before authentication", "mutated handshake",
               "mutated authenticate", "garbage token", "oversized token", "scram wrong nonce",
               "scram wrong proof", "scram replayed final", "scram garbage first", "kafka frame on tls",
               "garbage on tls", "client hello cut short", "tls records broken", "half token"]

    def op_sasl(self):
        if not self.secure:
            return self.op_single()
        self.drop()
        case = self.rng.choice(self.HOSTILE)
        try:
            outcome = self.hostile(case)
        except socket.timeout:
            outcome = "timeout"
        except (ConnClosed, OSError):          # ssl.SSLError among them
            outcome = "closed"
        except AuthRefused as e:             # a valid step of it (the fuzz may have changed the credential)
            outcome = "refused before its hostile step"
            self.r.note_security(str(e))
            self.r.restore_credentials()
        except DecodeError as e:
            outcome = "undecodable"
            self.r.finding("undecodable-answer", f"an answer on the SASL path ({case}) does not decode: {e}",
                           f"sasl {case}", worker=self)
        self.r.count_security(f"hostile: {case}", outcome)

    def op_reauth(self):
        """KIP-368 on an authenticated connection: SaslHandshake and tokens
        again (allowed a second after the last start); then the usual fuzz."""
        if not self.secure:
            return self.op_single()
        self.connect()
        if self.auth_bare:                       # v0's bare tokens: no session to renew (KIP-368)
            return self.op_single()
        try:
            self.authenticate(self.sock, mechanism=self.auth_mechanism, reauth=True)
        except AuthRefused as e:
            self.r.count_security("auth", "re-auth refused (" + _norm(str(e), 50) + ")")
            self.drop()
        except DecodeError as e:
            self.r.finding("undecodable-answer", f"an answer to a re-authentication does not decode: {e}",
                           "sasl re-auth", worker=self)
            self.drop()

    def hostile(self, case):
        """One misbehaving client; -> its outcome (what the broker answered, or
        "closed" once it closed). A credential that should fail but gets
        error 0 is a finding."""
        rng, r = self.rng, self.r
        with self.secure_tcp(r.answer_timeout + 1) as raw:
            if case in ("kafka frame on tls", "garbage on tls", "client hello cut short"):
                if case == "kafka frame on tls":
                    data, _ = encode_request(r.models[18], 3, 1, "fuzz", {"client_software_name": "fuzz",
                                                                         "client_software_version": "1"})
                    data = struct.pack(">i", len(data)) + data
                elif case == "garbage on tls":
                    data = bytes(rng.getrandbits(8) for _ in range(rng.randrange(1, 300)))
                else:
                    hello = client_hello(r.tls)
                    data = hello[:rng.randrange(1, len(hello))]
                raw.sendall(data)
                if case == "client hello cut short" and rng.random() < 0.5:
                    return "left"
                return self.until_closed(raw)
            sock = self.tls_wrap(raw)
            if case == "tls records broken":
                raw_fd = socket.socket(fileno=os.dup(sock.fileno()))
                with raw_fd:
                    raw_fd.sendall(b"\x17\x03\x03\x00\x20" + bytes(rng.getrandbits(8) for _ in range(32)))
                return self.until_closed(sock)
            return self.hostile_sasl(case, sock)

    def hostile_sasl(self, case, sock):
        rng = self.rng
        if case == "request before authentication":
            f = self.make_frame()
            while f.api.key in (17, 18):
                f = self.make_frame()
            sock.sendall(f.wire())
            return self.until_closed(sock, forbidden=f"{f.api.name} before authentication")
        if case == "mutated handshake":
            f = self.make_frame(self.r.models[17])
            mutate(rng, f, 1)
            sock.sendall(f.wire())
            return self.until_closed(sock)
        if case == "unknown mechanism":
            name = rng.choice(["GSSAPI", "OAUTHBEARER", "plain", "", "SCRAM-SHA-1", "X" * 300])
            h, _ = self.sasl_call(sock, 17, 1, {"mechanism": name})
            self.must_fail(h, f"mechanism {name!r}")
            return f"error {get(h, 'error_code')}, " + self.until_closed(sock)
        mech = rng.choice(list(SCRAM)) if case.startswith("scram") else rng.choice(MECHANISMS)
        h, _ = self.sasl_call(sock, 17, 1, {"mechanism": mech})
        if get(h, "error_code") != 0:
            raise AuthRefused(f"SaslHandshake {mech}: error {get(h, 'error_code')}")
        if case in ("mutated authenticate", "half token"):
            f = self.make_frame(self.r.models[36])
            wire = f.wire()
            if case == "half token":
                sock.sendall(wire[:rng.randrange(1, len(wire))])
                return "left"
            mutate(rng, f, 1)
            sock.sendall(f.wire())
            return self.until_closed(sock)
        if case == "scram replayed final":
            return self.replayed_final(sock, mech)
        resp, _ = self.sasl_call(sock, 36, rng.randint(0, 2), {"auth_bytes": self.hostile_token(case, mech, sock)})
        self.must_fail(resp, f"{case} with {mech}")
        return f"error {get(resp, 'error_code')}, " + self.until_closed(sock)

    def must_fail(self, resp, what):
        if get(resp, "error_code") == 0:
            self.r.finding("sasl-accepted-what-it-should-not", f"{what}: answered with error 0", what,
                           worker=self)

    def hostile_token(self, case, mech, sock):
        rng = self.rng
        if case == "wrong password":
            if mech == "PLAIN":
                return rng.choice([f"\0{PLAIN_USER}\0{WRONG_PASSWORD}", f"\0{PLAIN_USER}\0", f"\0nobody\0{PLAIN_PASSWORD}",
                                   f"other\0{PLAIN_USER}\0{PLAIN_PASSWORD}", "\0\0", PLAIN_USER]).encode()
            wrong = ScramClient(mech, SCRAM_USER, WRONG_PASSWORD, rng)
            return wrong.final(self.scram_server_first(sock, wrong))
        if case == "garbage token":
            return bytes(rng.getrandbits(8) for _ in range(rng.choice([0, 1, 2, 40, 300])))
        if case == "oversized token":
            return b"\0" * rng.choice([5000, SASL_MAX_RECEIVE + 1])
        if case == "scram garbage first":
            return rng.choice([b"n,,", b"y,,n=fuzzscram,r=abc", b"n,,n=,r=", b"n,,n=fuzzscram", b"p=x,,n=a,r=b",
                               b"n,a=other,n=fuzzscram,r=abc", b"n,,n=fuzz=2Cscram,r=" + b"\xff" * 8,
                               b"n,,m=,n=fuzzscram,r=abc", b"n,,n=fuzzscram,r=abc,1=x"])
            # (a reserved "m=ext," before the name is no garbage: Kafka's ScramMessages accepts it)
        scram = ScramClient(mech, SCRAM_USER, SCRAM_PASSWORD, rng)
        first = self.scram_server_first(sock, scram)
        if case == "scram wrong nonce":
            return scram.final(first, nonce=scram.nonce + "forged")
        return scram.final(first, proof=bytes(rng.getrandbits(8) for _ in range(64 if mech.endswith("512") else 32)))

    def replayed_final(self, sock, mech):
        """A valid client-final, then the same bytes on a second connection
        (whose server nonce differs): the second must fail."""
        scram = ScramClient(mech, SCRAM_USER, SCRAM_PASSWORD, self.rng)
        final = scram.final(self.scram_server_first(sock, scram))
        resp, _ = self.sasl_call(sock, 36, 1, {"auth_bytes": final})
        if get(resp, "error_code") != 0:
            raise AuthRefused(f"{mech}: the valid final before the replay was refused")
        with self.tls_wrap(self.secure_tcp(self.r.answer_timeout + 1)) as other:
            self.sasl_call(other, 17, 1, {"mechanism": mech})
            self.scram_server_first(other, ScramClient(mech, SCRAM_USER, SCRAM_PASSWORD, self.rng))
            again, _ = self.sasl_call(other, 36, 1, {"auth_bytes": final})
            self.must_fail(again, f"a replayed {mech} client-final")
            return f"error {get(again, 'error_code')}, " + self.until_closed(other)

    def scram_server_first(self, sock, scram):
        resp, _ = self.sasl_call(sock, 36, 1, {"auth_bytes": scram.first()})
        if get(resp, "error_code") != 0:
            raise AuthRefused(f"SCRAM client-first refused: {get(resp, 'error_code')}")
        return get(resp, "auth_bytes")

    def until_closed(self, sock, forbidden=None):
        """Read until the broker closes (-> "closed") or answer_timeout passes
        (-> "timeout"). An answer where `forbidden` is set is a finding."""
        sock.settimeout(self.r.answer_timeout + 1)
        got = 0
        try:
            while True:
                data = sock.recv(65536)
                if not data:
                    break
                got += len(data)
        except socket.timeout:
            return "timeout"
        except OSError:
            pass
        if forbidden and got >= 8:
            self.r.finding("unauthenticated-request-answered", f"{forbidden}: answered ({got} bytes)",
                           forbidden, worker=self)
        return "closed"



###############################################################################
# 7. RUNNER -- fuzz connections, the bystander, the monitor, the log
###############################################################################

PARKING_APIS = {"Produce", "Fetch", "JoinGroup", "SyncGroup", "InitProducerId", "AddPartitionsToTxn",
                "AddOffsetsToTxn", "EndTxn", "WriteTxnMarkers", "TxnOffsetCommit"}
# Admin requests that may legitimately take seconds (10,000 partitions made or
# removed in steps): they get HEAVY_TIMEOUT_S before they count as unanswered.
HEAVY_APIS = {"CreateTopics", "CreatePartitions", "DeleteTopics", "DeleteRecords"}
HEAVY_TIMEOUT_S = 30.0
FENCE_API = 18


class ConnClosed(Exception):
    pass


class Stats:
    """Per-API counters of one fuzz connection (merged at the end)."""
    FIELDS = ("sent", "answered", "ok", "closed", "dropped", "timeout", "no_answer", "mutated",
              "mutated_answered", "latency_ms")

    def __init__(self):
        self.per_api = collections.defaultdict(collections.Counter)
        self.versions = collections.defaultdict(set)
        self.close_reasons = collections.defaultdict(collections.Counter)
        self.error_codes = collections.defaultdict(collections.Counter)


def _messages(d, code=None):
    """The error messages in a decoded answer (next to error code `code`), joined."""
    out = []
    stack = [d]
    while stack:
        x = stack.pop()
        if isinstance(x, dict):
            if code is None or x.get("error_code") == code:
                out.extend(str(v) for k, v in x.items() if k.endswith("error_message") and v)
            stack.extend(v for v in x.values() if isinstance(v, (dict, list)))
        elif isinstance(x, list):
            stack.extend(x)
    return "; ".join(out) or "(no error message)"


def _norm(text, limit=140):
    text = re.sub(r"0x[0-9a-fA-F]+", "0xN", text)
    text = re.sub(r"127\.0\.0\.1:\d+", "HOST:PORT", text)
    text = re.sub(r"-?\d+", "N", text)
    return text[:limit]


def frame_record(frame):
    return {"api": frame.api.name, "version": frame.version, "corr": frame.corr,
            "mutation": frame.label(), "hex": frame.wire().hex()}


class Worker(SecureSide, threading.Thread):
    """One fuzz connection: generates, mutates, sends, reads, counts."""

    OPS = [("single", 56), ("sequence", 16), ("burst", 8), ("half", 3), ("badsize", 2),
           ("oversize", 0.3), ("fresh_apiversions", 2), ("maintain", 0.5), ("wide", 0.4)]

    def __init__(self, runner, index, budget):
        super().__init__(name=f"fuzz-{index}", daemon=True)
        self.r = runner
        self.index = index
        self.budget = budget
        self.rng = random.Random(f"{runner.seed}:{index}")
        self.learned = Learned()
        self.learned.partitions[WIDE_TOPIC] = runner.wide_partitions
        self.gen = Generator(self.rng, self.learned, runner.bystander_topic)
        self.stats = Stats()
        self.sent = 0
        self.sock = None
        self.rbuf = bytearray()
        self.local_port = None
        self.corr = self.rng.randrange(0, 1000)
        self.recent = collections.deque(maxlen=6)
        self.pending = collections.deque()
        self.tag = ""                    # tags the frames of the operation under way
        self.secure = runner.secure_addr is not None and index % 2 == 1     # on the SASL_SSL listener
        self.auth_failures = 0
        self.auth_mechanism, self.auth_bare = None, False
        if self.secure:
            self.OPS = self.OPS + [("sasl", 4), ("reauth", 0.5)]
        if runner.ops:
            self.OPS = [(o, runner.ops.get(o, w)) for o, w in self.OPS]

    # --- connection ---
    def connect(self):
        if self.sock is None:
            if self.secure:
                self.sock = self.secure_connect()
            else:
                self.sock = tcp_connect(self.r.addr, 5)
            self.local_port = self.sock.getsockname()[1]
            self.r.port_owner[self.local_port] = self
            self.r.closes.pop(self.local_port, None)         # an older connection's, same port
            self.rbuf = bytearray()
            self.recent.clear()

    def drop(self):
        if self.sock is not None:
            close_quietly(self.sock)
            self.sock = None
            self.pending.clear()

    def next_corr(self):
        self.corr = (self.corr + 1) & 0x7FFFFFFF
        if self.rng.random() < 0.01:
            return self.rng.choice([0, 2 ** 31 - 1, -1, -2 ** 31])
        return self.corr

    # --- frames ---
    def make_frame(self, api=None, version=None, partial=None):
        if api is None:
            api, version = self.r.pick_target(self.rng)
        elif version is None:
            version = self.rng.randint(api.lo, api.hi)
        body = self.gen.request(api, version, partial)
        corr = self.next_corr()
        client_id = self.rng.choice(["fuzz", "fuzz", "", None, "c" * 300])
        data, spans = encode_request(api, version, corr, client_id, body)
        f = Frame(api, version, corr, body, data, spans)
        f.conn_index = self.index
        f.may_skip = api.name == "Produce"
        return f

    def maybe_mutate(self, frame, p=0.5):
        if self.rng.random() < p:
            mutate(self.rng, frame, 1 if self.rng.random() < 0.8 else 2)
        return frame

    def fence(self):
        """An ApiVersions v0 frame after a Produce that may get no answer
        (acks=0): answers come in order, so its answer ends the wait."""
        api = self.r.models[FENCE_API]
        corr = self.next_corr()
        data, spans = encode_request(api, 0, corr, "fuzz-fence", {})
        f = Frame(api, 0, corr, {}, data, spans)
        f.conn_index = -2                      # not counted
        return f

    # --- one exchange ---
    def exchange(self, frames, timeout=None, payload=None):
        """Send frames (pipelined) and read every answer they get."""
        timeout = timeout or self.r.answer_timeout
        self.connect()
        out = []
        for f in frames:
            out.append(f)
            if f.may_skip:
                out.append(self.fence())
        now = time.monotonic()
        for f in out:
            f.sent_at = now
            if f.conn_index != -2:
                self.count_sent(f)
        self.pending = collections.deque(out)
        try:
            self.sock.settimeout(timeout)
            self.sock.sendall(payload if payload is not None else b"".join(f.wire() for f in out))
        except socket.timeout:
            self.finish_pending("timeout")
            self.drop()
            return
        except OSError:
            self.finish_pending("closed")
            self.drop()
            return
        self.await_answers(timeout)

    def count_sent(self, f):
        f.sent_at = time.monotonic()
        st = self.stats.per_api[f.api.name]
        st["sent"] += 1
        if f.mutated:
            st["mutated"] += 1
        self.stats.versions[f.api.name].add(f.version)
        self.sent += 1
        self.recent.append(f)
        self.r.last_by_api[(f.api.name, f.version)] = (self, f)

    def finish_pending(self, outcome, reason=None):
        """The connection closed or timed out. The frame it closed for (the one
        whose correlation id the broker's log line names, else the first
        unanswered one) gets the outcome; the others were "dropped" with the
        connection (Kafka too discards the answers still queued on a
        connection it closes)."""
        frames = [f for f in self.pending if f.conn_index != -2]
        self.pending.clear()
        if not frames:
            return
        culprit = frames[0]
        m = re.search(r"correlation id (-?\d+)", reason or "")
        if m:
            culprit = next((f for f in frames if f.corr == int(m.group(1))), culprit)
        for f in frames:
            self.stats.per_api[f.api.name][outcome if f is culprit else "dropped"] += 1
        if outcome == "closed":
            self.stats.close_reasons[culprit.api.name][_norm(reason or "?", 90)] += 1
            self.r.check_close(self, culprit, reason)
        elif outcome == "timeout":
            self.r.check_timeout(self, culprit)

    def await_answers(self, timeout):
        """Read answers until every pending frame has one. The wait is for the
        frame at the head (answers come in order): a heavy admin request may
        take HEAVY_TIMEOUT_S, anything else `timeout`."""
        while self.pending:
            head = self.pending[0]
            deadline = time.monotonic() + (HEAVY_TIMEOUT_S if head.api.name in HEAVY_APIS else timeout)
            try:
                frame = self.read_frame(deadline)
            except socket.timeout:
                self.finish_pending("timeout")
                self.drop()
                return
            except (ConnClosed, OSError):
                reason = self.r.close_reason(self.local_port)
                self.finish_pending("closed", reason)
                self.drop()
                return
            self.on_answer(frame)

    def read_frame(self, deadline):
        while True:
            if len(self.rbuf) >= 4:
                size = struct.unpack_from(">i", self.rbuf, 0)[0]
                if size < 4 or size > 256 * 1024 * 1024:
                    self.r.finding("bad-response-frame", f"response size {size}", f"size {size}",
                                   frame=self.pending[0] if self.pending else None, worker=self)
                    raise ConnClosed()
                if len(self.rbuf) >= 4 + size:
                    frame = bytes(self.rbuf[4:4 + size])
                    del self.rbuf[:4 + size]
                    return frame
            left = deadline - time.monotonic()
            if left <= 0:
                raise socket.timeout()
            self.sock.settimeout(left)
            data = self.sock.recv(1 << 20)
            if not data:
                raise ConnClosed()
            self.rbuf += data

    def on_answer(self, data):
        corr = struct.unpack_from(">i", data, 0)[0]
        if not any(f.corr == corr for f in self.pending):
            self.r.finding("unexpected-correlation-id", f"answer with correlation id {corr}",
                           "unexpected correlation id", frame=self.pending[0], worker=self,
                           response=data)
            self.pending.popleft()
            return
        while self.pending[0].corr != corr:
            f = self.pending.popleft()
            if f.conn_index == -2:
                continue
            if f.may_skip:
                self.stats.per_api[f.api.name]["no_answer"] += 1
            else:
                self.r.finding("skipped-answer", f"{f.api.name} v{f.version}: no answer, but the next "
                               "request on the connection got one", f"skipped {f.api.name}",
                               frame=f, worker=self)
        f = self.pending.popleft()
        if f.conn_index == -2:
            return
        st = self.stats.per_api[f.api.name]
        st["answered"] += 1
        ms = (time.monotonic() - f.sent_at) * 1000
        st["latency_ms"] += ms
        if ms > 500:
            self.r.slow_answer(ms, f, self)
        if f.mutated:
            st["mutated_answered"] += 1
        resp = self.r.check_answer(self, f, data)
        if resp is not None:
            codes = error_codes(resp)
            if all(c == 0 for c in codes):
                st["ok"] += 1
            for c in set(codes):
                if c:
                    self.stats.error_codes[f.api.name][c] += 1
            if -1 in codes:     # UNKNOWN_SERVER_ERROR: Kafka 4.3.1 answers it too in places -- a note
                self.r.finding("unknown-server-error", f"{f.api.name} v{f.version} answered UNKNOWN_SERVER_ERROR: "
                               f"{_messages(resp, -1)[:300]}", _norm(_messages(resp, -1), 80), frame=f, worker=self,
                               response=data, note=True)
            if not f.mutated:
                self.learned.learn(f.api.name, f.body, resp)

    # --- ops ---
    def run(self):
        try:
            while not self.r.stop.is_set() and (self.budget is None or self.sent < self.budget):
                self.r.running.wait()
                op = self.rng.choices([o for o, _ in self.OPS], [w for _, w in self.OPS])[0]
                try:
                    getattr(self, "op_" + op)()
                except (OSError, ConnClosed):
                    self.drop()
        except Exception:                                   # a bug in the fuzzer itself
            self.r.finding("fuzzer-error", traceback.format_exc(), traceback.format_exc().splitlines()[-1],
                           worker=self)
        finally:
            self.drop()

    def op_single(self):
        self.exchange([self.maybe_mutate(self.make_frame())])

    def op_fresh_apiversions(self):
        """What every client does first: ApiVersions, sometimes a version above
        the broker's (KIP-511)."""
        api = self.r.models[18]
        v = self.rng.choice(list(range(api.lo, api.hi + 1)) + [api.hi + 1, 127])
        self.drop()
        self.exchange([self.maybe_mutate(self.make_frame(api, v), 0.3)])

    def op_burst(self):
        """Many frames pipelined on one connection, all written at once. Valid
        ones (a malformed frame closes the connection, dropping the rest),
        except perhaps the last."""
        n = self.rng.randrange(5, 31)
        frames = [self.make_frame() for _ in range(n)]
        self.maybe_mutate(frames[-1], 0.3)
        self.exchange(frames, timeout=self.r.answer_timeout * 2)

    def op_half(self):
        f = self.maybe_mutate(self.make_frame(), 0.2)
        wire = f.wire()
        cut = self.rng.randrange(1, len(wire))
        self.connect()
        self.count_sent(f)
        self.sock.sendall(wire[:cut])
        time.sleep(self.rng.uniform(0.02, 0.2))
        r = self.rng.random()
        if r < 0.6:                                  # the rest, later: must be answered as usual
            self.pending = collections.deque([f])
            self.sock.sendall(wire[cut:])
            if f.may_skip:
                fence = self.fence()
                self.pending.append(fence)
                self.sock.sendall(fence.wire())
            self.await_answers(self.r.answer_timeout)
        else:                                        # never: the client goes away
            self.stats.per_api[f.api.name]["closed"] += 1
            self.stats.close_reasons[f.api.name]["(client left mid-frame)"] += 1
            self.drop()

    def op_badsize(self):
        limit = self.r.request_max_bytes
        size = self.rng.choice([-1, -2 ** 31, limit + 1, 2 ** 31 - 1, 0, 1, 2, 3, 7])
        body = bytes(self.rng.getrandbits(8) for _ in range(max(0, min(size, 7)) if 0 <= size <= 7
                                                            else self.rng.randrange(0, 16)))
        self.connect()
        st = self.stats.per_api["(frame size)"]
        st["sent"] += 1
        try:
            self.sock.sendall(struct.pack(">i", size) + body)
            self.sock.settimeout(self.r.answer_timeout)
            data = self.sock.recv(4096)
            st["answered" if data else "closed"] += 1
            if data:
                self.r.finding("answer-to-bad-frame", f"an answer to a frame of declared size {size}",
                               f"answered size {size}", worker=self, response=data)
        except socket.timeout:
            st["timeout"] += 1                       # still waiting for the rest: legitimate
        except OSError:
            st["closed"] += 1
        self.drop()

    def op_maintain(self):
        """Re-create the core topics a random DeleteTopics may have removed,
        and refresh what this connection knows of them (Metadata)."""
        self.step("CreateTopics", {"topics": [{"name": t, "num_partitions": n, "replication_factor": -1,
                                               "assignments": [], "configs": []}
                                              for t, n in CORE_TOPICS.items()],
                                   "timeout_ms": 5000, "validate_only": False})
        self.step("Metadata", {"topics": [{"name": t, "topic_id": bytes(16)} for t in CORE_TOPICS],
                               "allow_auto_topic_creation": False, "include_cluster_authorized_operations": False,
                               "include_topic_authorized_operations": False})

    def op_wide(self):
        """Overload, not malformation: one valid request over hundreds or
        thousands of partitions (of WIDE_TOPIC). The broker must serve it
        without holding its one loop so long that the bystander stalls."""
        w = self.r.wide_partitions
        if not w or self.r.by_name.get("Produce") is None:
            return
        rng = self.rng
        n = min(w, rng.choice([50, 200, 1000, w]))
        parts = sorted(rng.sample(range(w), n))
        t = WIDE_TOPIC
        kind = rng.choice(["produce", "produce", "txn", "delete_records", "offset_commit", "fetch", "list_offsets"])
        batch = build_batch([(b"w", b"wide", [])])
        self.tag = f"wide:{kind} n={n}"
        try:
            self._wide(kind, t, parts, batch)
        finally:
            self.tag = ""

    def _wide(self, kind, t, parts, batch):
        rng = self.rng
        if kind == "produce":
            self.step("Produce", {"transactional_id": None, "acks": -1, "timeout_ms": 30000, "topic_data": [
                {"name": t, "partition_data": [{"index": p, "records": batch} for p in parts]}]}, timeout=HEAVY_TIMEOUT_S)
        elif kind == "txn":
            tid = f"fz-wide-t{self.index}"
            self.step("InitProducerId", {"transactional_id": tid, "transaction_timeout_ms": 60000,
                                         "producer_id": -1, "producer_epoch": -1}, timeout=HEAVY_TIMEOUT_S)
            if tid not in self.learned.producers:
                return
            pid, epoch = self.learned.producers[tid]
            self.step("AddPartitionsToTxn", {"transactional_id": tid, "producer_id": pid, "producer_epoch": epoch,
                                             "topics": [{"name": t, "partitions": parts}]}, timeout=HEAVY_TIMEOUT_S)
            self.step("Produce", {"transactional_id": tid, "acks": -1, "timeout_ms": 30000, "topic_data": [
                {"name": t, "partition_data": [{"index": p, "records": self.gen.producer_batch(
                    pid, epoch, t, p, transactional=True)} for p in parts]}]}, timeout=HEAVY_TIMEOUT_S)
            self.step("EndTxn", {"transactional_id": tid, "producer_id": pid, "producer_epoch": epoch,
                                 "committed": rng.random() < 0.5}, timeout=HEAVY_TIMEOUT_S)
        elif kind == "delete_records":
            self.step("DeleteRecords", {"topics": [{"name": t, "partitions": [
                {"partition_index": p, "offset": rng.choice([-1, 1])} for p in parts]}], "timeout_ms": 30000}, timeout=HEAVY_TIMEOUT_S)
        elif kind == "offset_commit":
            self.step("OffsetCommit", {"group_id": f"fz-wide-g{self.index}", "generation_id_or_member_epoch": -1,
                                       "member_id": "", "group_instance_id": None, "retention_time_ms": -1,
                                       "topics": [{"name": t, "partitions": [
                                           {"partition_index": p, "committed_offset": 1, "committed_leader_epoch": -1,
                                            "committed_metadata": ""} for p in parts]}]}, timeout=HEAVY_TIMEOUT_S)
        elif kind == "fetch":
            self.step("Fetch", {"isolation_level": rng.choice([0, 1]), "session_id": 0, "session_epoch": -1,
                                "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 50 << 20,
                                "topics": [{"topic": t, "partitions": [
                                    {"partition": p, "fetch_offset": 0, "current_leader_epoch": -1,
                                     "last_fetched_epoch": -1, "log_start_offset": -1,
                                     "partition_max_bytes": 1 << 20} for p in parts]}],
                                "forgotten_topics_data": []}, timeout=HEAVY_TIMEOUT_S)
        else:
            self.step("ListOffsets", {"replica_id": -1, "isolation_level": rng.choice([0, 1]), "topics": [
                {"name": t, "partitions": [{"partition_index": p, "current_leader_epoch": -1,
                                            "timestamp": rng.choice([0, -1, -2])} for p in parts]}]}, timeout=HEAVY_TIMEOUT_S)

    def op_oversize(self):
        f = self.make_frame()
        f.labels.append(m_oversize(self.rng, f))
        f.reread_header()
        self.exchange([f], timeout=max(10.0, self.r.answer_timeout))

    # --- sequences: requests that build on each other's answers ---
    def op_sequence(self):
        getattr(self, self.rng.choice(["seq_txn", "seq_txn", "seq_idempotent", "seq_group", "seq_group",
                                       "seq_garbage", "seq_topics"]))()

    def step(self, api_name, partial, mutate_p=0.0, timeout=None):
        api = self.r.by_name.get(api_name)
        if api is None:
            return None
        f = self.maybe_mutate(self.make_frame(api, None, partial), mutate_p)
        f.tag = self.tag
        self.exchange([f], timeout=timeout)
        return f

    def seq_txn(self):
        rng, g = self.rng, self.gen
        tid = g.txn_id()
        self.step("InitProducerId", {"transactional_id": tid,
                                     "transaction_timeout_ms": rng.choice([1000, 10000, 60000]),
                                     "producer_id": -1, "producer_epoch": -1})
        if tid not in self.learned.producers:
            return
        pid, epoch = self.learned.producers[tid]
        tps = [(t, rng.randrange(CORE_TOPICS[t])) for t in rng.sample(list(CORE_TOPICS), rng.randrange(1, 3))]
        self.step("AddPartitionsToTxn", {"transactional_id": tid, "producer_id": pid, "producer_epoch": epoch,
                                         "topics": [{"name": t, "partitions": [p]} for t, p in tps]})
        for t, p in tps:
            self.step("Produce", {"transactional_id": tid, "acks": -1, "timeout_ms": 1000, "topic_data": [
                {"name": t, "partition_data": [{"index": p, "records": self.gen.producer_batch(
                    pid, epoch, t, p, transactional=True)}]}]}, mutate_p=0.2)
        group = g.group()
        if rng.random() < 0.5:
            self.step("AddOffsetsToTxn", {"transactional_id": tid, "producer_id": pid,
                                          "producer_epoch": epoch, "group_id": group})
            t, p = tps[0]
            self.step("TxnOffsetCommit", {"transactional_id": tid, "group_id": group, "producer_id": pid,
                                          "producer_epoch": epoch, "generation_id": -1, "member_id": "",
                                          "group_instance_id": None, "topics": [
                                              {"name": t, "partitions": [{"partition_index": p,
                                                                          "committed_offset": 1}]}]},
                      mutate_p=0.2)
        if rng.random() < 0.85:
            self.step("EndTxn", {"transactional_id": tid, "producer_id": pid, "producer_epoch": epoch,
                                 "committed": rng.random() < 0.6}, mutate_p=0.1)
        t, p = tps[-1]
        r = rng.random()
        if r < 0.3:
            self.step("Fetch", {"isolation_level": 1, "session_id": 0, "max_wait_ms": 0,
                                "topics": [{"topic": t, "partitions": [{"partition": p, "fetch_offset": 0}]}]})
        elif r < 0.5:
            self.step("ListOffsets", {"replica_id": -1, "isolation_level": 1, "topics": [
                {"name": t, "partitions": [{"partition_index": p, "timestamp": -1}]}]})
        elif r < 0.7:
            self.step("DescribeTransactions", {"transactional_ids": [tid]})
        elif r < 0.85:
            self.step("DescribeProducers", {"topics": [{"name": t, "partition_indexes": [p]}]})
        else:
            self.step("ListTransactions", {})

    def seq_idempotent(self):
        rng = self.rng
        self.step("InitProducerId", {"transactional_id": None, "transaction_timeout_ms": -1,
                                     "producer_id": -1, "producer_epoch": -1})
        if None not in self.learned.producers:
            return
        t = rng.choice(list(CORE_TOPICS))
        p = rng.randrange(CORE_TOPICS[t])
        pid, epoch = self.learned.producers[None]
        for _ in range(rng.randrange(1, 4)):
            self.step("Produce", {"transactional_id": None, "acks": -1, "timeout_ms": 1000, "topic_data": [
                {"name": t, "partition_data": [{"index": p, "records": self.gen.producer_batch(
                    pid, epoch, t, p, transactional=False)}]}]}, mutate_p=0.1)
        self.step("DescribeProducers", {"topics": [{"name": t, "partition_indexes": [p]}]})

    def seq_group(self):
        """A whole consumer-group life on a group of this connection's own (so
        that no other connection's stale members make the JoinGroups wait)."""
        rng = self.rng
        group = f"fz-w{self.index}-g{rng.randrange(2)}"
        self.step("FindCoordinator", {"key": group, "key_type": 0, "coordinator_keys": [group]})
        join = {"group_id": group, "member_id": "", "group_instance_id": None, "protocol_type": "consumer",
                "session_timeout_ms": rng.choice([1000, 6000]), "rebalance_timeout_ms": rng.choice([0, 200]),
                "reason": None}
        self.learned.members.pop(group, None)
        self.step("JoinGroup", join)
        known = self.learned.members.get(group)
        if known is None:
            return
        self.step("JoinGroup", dict(join, member_id=known[0]))
        known = self.learned.members.get(group)
        if known is None:
            return
        member, generation, protocol, leader = known
        assignments = [{"member_id": member, "assignment": self.gen.assignment()}] if leader else []
        self.step("SyncGroup", {"group_id": group, "generation_id": generation, "member_id": member,
                                "group_instance_id": None, "protocol_type": "consumer",
                                "protocol_name": protocol, "assignments": assignments}, mutate_p=0.1)
        self.step("Heartbeat", {"group_id": group, "generation_id": generation, "member_id": member,
                                "group_instance_id": None}, mutate_p=0.1)
        t = rng.choice(list(CORE_TOPICS))
        self.step("OffsetCommit", {"group_id": group, "generation_id_or_member_epoch": generation,
                                   "member_id": member, "group_instance_id": None, "retention_time_ms": -1,
                                   "topics": [{"name": t, "partitions": [
                                       {"partition_index": 0, "committed_offset": rng.randrange(0, 10),
                                        "committed_leader_epoch": -1, "committed_metadata": ""}]}]},
                  mutate_p=0.2)
        self.step("OffsetFetch", {"group_id": group, "topics": None, "require_stable": False,
                                  "groups": [{"group_id": group, "member_id": member, "member_epoch": -1,
                                              "topics": None}]})
        r = rng.random()
        if r < 0.4:
            self.step("LeaveGroup", {"group_id": group, "member_id": member,
                                     "members": [{"member_id": member, "group_instance_id": None,
                                                  "reason": None}]}, mutate_p=0.1)
            if rng.random() < 0.5:
                self.step("DeleteGroups", {"groups_names": [group]})
        elif r < 0.7:
            self.step("DescribeGroups", {"groups": [group], "include_authorized_operations": False})
        else:
            self.step("OffsetDelete", {"group_id": group, "topics": [{"name": t, "partitions": [
                {"partition_index": 0}]}]})

    def seq_garbage(self):
        """A batch with a right CRC and broken records, then what reads records:
        ListOffsets by timestamp, Fetch. The batch's timestamp is in the
        future and ListOffsets asks for exactly it, so that the lookup lands
        on this batch rather than on an earlier one."""
        rng = self.rng
        t = rng.choice(list(CORE_TOPICS))
        p = rng.randrange(CORE_TOPICS[t])
        ts = NOW_MS() + 10 ** 9 + rng.randrange(10 ** 6) * 1000
        label, batch = broken_batch(rng, timestamp=ts)
        f = self.step("Produce", {"transactional_id": None, "acks": -1, "timeout_ms": 1000, "topic_data": [
            {"name": t, "partition_data": [{"index": p, "records": batch}]}]})
        if f is not None:
            f.labels.append(f"batch:{label}")
        self.step("ListOffsets", {"replica_id": -1, "isolation_level": 0, "topics": [
            {"name": t, "partitions": [{"partition_index": p, "current_leader_epoch": -1,
                                        "timestamp": rng.choice([ts, ts, ts - 1, 0, -3])}]}]})
        if rng.random() < 0.5:
            self.step("Fetch", {"isolation_level": rng.choice([0, 1]), "session_id": 0, "max_wait_ms": 0,
                                "min_bytes": 1, "topics": [{"topic": t, "partitions": [
                                    {"partition": p, "fetch_offset": 0, "partition_max_bytes": 1 << 20}]}]})

    def seq_topics(self):
        rng = self.rng
        t = rng.choice(CHURN_TOPICS)
        n = rng.randrange(1, 5)
        self.step("CreateTopics", {"topics": [{"name": t, "num_partitions": n, "replication_factor": -1,
                                               "assignments": [], "configs": []}],
                                   "timeout_ms": 5000, "validate_only": False}, mutate_p=0.1)
        self.learned.partitions[t] = n
        r = rng.random()
        if r < 0.3:
            self.step("CreatePartitions", {"topics": [{"name": t, "count": n + rng.randrange(1, 3),
                                                       "assignments": None}],
                                           "timeout_ms": 5000, "validate_only": False}, mutate_p=0.2)
        elif r < 0.6:
            self.step("DescribeConfigs", {"resources": [{"resource_type": 2, "resource_name": t,
                                                         "configuration_keys": None}]})
            self.step("IncrementalAlterConfigs", {"resources": [{"resource_type": 2, "resource_name": t,
                                                                 "configs": [{"name": "retention.ms",
                                                                              "config_operation": 0,
                                                                              "value": "100000"}]}],
                                                  "validate_only": False}, mutate_p=0.2)
        else:
            self.step("Produce", {"transactional_id": None, "acks": -1, "timeout_ms": 1000, "topic_data": [
                {"name": t, "partition_data": [{"index": 0}]}]})
            self.step("DeleteRecords", {"topics": [{"name": t, "partitions": [
                {"partition_index": 0, "offset": rng.choice([1, -1, 0, 2 ** 63 - 1])}]}],
                "timeout_ms": 1000}, mutate_p=0.2)
        if rng.random() < 0.7:
            self.step("DeleteTopics", {"topics": [{"name": t, "topic_id": bytes(16)}], "topic_names": [t],
                                       "timeout_ms": 5000})


class Client:
    """A plain request/response client on its own connection (setup, and the
    bystander), encoding with the doze model."""

    def __init__(self, addr, models, timeout):
        self.addr, self.models, self.timeout = addr, models, timeout
        self.sock = None
        self.corr = 0

    def call(self, api_key, version, body, client_id="fuzz-bystander"):
        api = self.models[api_key]
        if self.sock is None:
            self.sock = tcp_connect(self.addr, self.timeout)
        self.corr += 1
        data, _ = encode_request(api, version, self.corr, client_id, body)
        self.sock.settimeout(self.timeout)
        self.sock.sendall(struct.pack(">i", len(data)) + data)
        size = struct.unpack(">i", self._read(4))[0]
        frame = self._read(size)
        corr, resp = decode_response(api, version, frame)
        if corr != self.corr:
            raise DecodeError(f"correlation id {corr}, expected {self.corr}")
        return resp

    def _read(self, n):
        return recv_exactly(self.sock, n)

    def close(self):
        if self.sock is not None:
            close_quietly(self.sock)
            self.sock = None


class Bystander(threading.Thread):
    """A well-behaved client beside the fuzzer: produces small acks=-1 batches
    with known payloads to its own topic, fetches them back, and probes with
    ApiVersions. Any error, disconnect, or probe slower than the stall
    threshold is a finding; at the end every acknowledged record must be read
    back at its offset."""

    def __init__(self, runner):
        super().__init__(name="bystander", daemon=True)
        self.r = runner
        self.topic = runner.bystander_topic
        self.client = Client(runner.addr, runner.doze_models, runner.stuck_s + 5)   # the monitor sees it first
        self.acked = {}                 # offset -> (key, value)
        self.next_fetch = 0
        self.n = 0
        self.max_latency = 0.0
        self.probes = 0
        self.inflight_since = None
        self.produce_v = min(9, runner.doze_models[0].hi)
        self.fetch_v = min(12, runner.doze_models[1].hi)

    def call(self, key, version, body, what):
        t0 = time.monotonic()
        self.inflight_since = t0
        epoch = self.r.broker_epoch
        try:
            resp = self.client.call(key, version, body)
        except (OSError, ConnClosed, DecodeError, struct.error) as e:
            self.client.close()
            if not self.r.stop.is_set() and epoch == self.r.broker_epoch and not self.r.restarting:
                kind = "bystander-undecodable" if isinstance(e, DecodeError) else \
                    "bystander-timeout" if isinstance(e, socket.timeout) else "bystander-disconnected"
                self.r.finding(kind, f"{what}: {type(e).__name__}: {e}", f"{what} {type(e).__name__}")
            return None
        finally:
            self.inflight_since = None
        latency = time.monotonic() - t0
        self.max_latency = max(self.max_latency, latency)
        if latency > 0.2:
            self.r.slow_probe(latency, what, t0)
        self.r.last_probe_ok = time.monotonic()
        if latency > self.r.stall_s:
            self.r.stall(latency, what)
        return resp

    def run(self):
        try:
            while not self.r.stop.is_set():
                self.r.running.wait(1)
                self.n += 1
                self.probes += 1
                self.call(18, self.n % 4, {"client_software_name": "fuzz-bystander",
                                           "client_software_version": "1"}, "ApiVersions probe")
                if self.n % 2:
                    self.produce()
                else:
                    self.fetch()
                time.sleep(0.02)
        except Exception:
            self.r.finding("fuzzer-error", traceback.format_exc(), "bystander " + traceback.format_exc().splitlines()[-1])

    def produce(self):
        n = 1 + self.n % 3
        recs = [(b"by-%d-%d" % (self.n, i), b"payload-%d-%d" % (self.n, i), []) for i in range(n)]
        resp = self.call(0, self.produce_v, {"transactional_id": None, "acks": -1, "timeout_ms": 5000,
                                             "topic_data": [{"name": self.topic, "partition_data": [
                                                 {"index": 0, "records": build_batch(recs)}]}]}, "Produce")
        if resp is None:
            return
        try:
            p = get(get(resp, "responses")[0], "partition_responses")[0]
        except (TypeError, IndexError):
            self.r.finding("bystander-error", f"Produce answer without the partition: {resp}", "produce shape")
            return
        if get(p, "error_code") != 0:
            self.r.finding("bystander-error", f"Produce error {get(p, 'error_code')}: {resp}",
                           f"produce error {get(p, 'error_code')}")
            return
        base = get(p, "base_offset")
        for i, (k, v, _) in enumerate(recs):
            self.acked[base + i] = (k, v)

    def fetch(self, offset=None, verify=True):
        offset = self.next_fetch if offset is None else offset
        resp = self.call(1, self.fetch_v, {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 0,
                                           "max_bytes": 1 << 20, "isolation_level": 0, "session_id": 0,
                                           "session_epoch": -1, "topics": [{"topic": self.topic, "partitions": [
                                               {"partition": 0, "fetch_offset": offset, "log_start_offset": -1,
                                                "current_leader_epoch": -1, "last_fetched_epoch": -1,
                                                "partition_max_bytes": 1 << 20}]}],
                                           "forgotten_topics_data": [], "rack_id": ""}, "Fetch")
        if resp is None:
            return None
        try:
            p = get(get(resp, "responses")[0], "partitions")[0]
        except (TypeError, IndexError):
            self.r.finding("bystander-error", f"Fetch answer without the partition: {resp}", "fetch shape")
            return None
        if get(p, "error_code") != 0 or get(resp, "error_code", 0) != 0:
            self.r.finding("bystander-error", f"Fetch error {get(p, 'error_code')}",
                           f"fetch error {get(p, 'error_code')}")
            return None
        got = parse_batches(get(p, "records") or b"")
        for off, k, v in got:
            if verify and off in self.acked and self.acked[off] != (k, v):
                self.r.finding("bystander-wrong-record", f"offset {off}: got {(k, v)}, acked {self.acked[off]}",
                               "wrong record")
            self.next_fetch = max(self.next_fetch, off + 1)
        return got

    def verify_all(self):
        """Every acknowledged record, read back at its offset."""
        if not self.acked:
            return
        self.client.timeout = max(self.r.stuck_s, 10)
        seen = {}
        offset = min(self.acked)
        last = max(self.acked)
        deadline = time.monotonic() + 120         # a fetch reads one segment: tiny ones mean many
        while time.monotonic() < deadline:
            got = self.fetch(offset, verify=False)
            if not got:
                break
            for off, k, v in got:
                seen[off] = (k, v)
            offset = max(off for off, _, _ in got) + 1
            if offset > last:
                break
        lost = [off for off in self.acked if seen.get(off) != self.acked[off]]
        if lost:
            self.r.finding("bystander-lost-records", f"{len(lost)} of {len(self.acked)} acknowledged records "
                           f"not read back, e.g. offsets {sorted(lost)[:10]}", "lost records")


class ConsoleFuzzer(threading.Thread):
    """The console's HTTP beside the Kafka fuzz (when the broker serves one):
    valid GETs of every page with random positions and ids, garbage and
    oversized heads, wrong hosts and methods, heads never finished, event
    streams opened and dropped. Every answer must be an HTTP/1.1 status of
    the console's own set; a 500 (a page that failed: a bug in doze), no
    answer, or anything else is a finding. The login's POSTs get bodies of
    every shape (forms, bytes, lengths that lie, chunked), the pages cookies
    and bearer tokens that are not sessions."""
    OK = {200, 303, 400, 401, 403, 404, 405, 408, 411, 413, 421, 429, 431, 503}
    PATHS = ["/", "/topics", "/apis", "/txn", "/console.css", "/console.js", "/events", "/api/cluster",
             "/api/topics", "/api/apis", "/api/txn", "/nothing", "/topics/%s", "/topics/%s/%s", "/api/topics/%s",
             "/api/topics/%s/%s"]

    def __init__(self, runner, port):
        super().__init__(name="console-fuzz", daemon=True)
        self.r, self.port = runner, port
        self.rng = random.Random(f"{runner.seed}:console")
        self.statuses = collections.Counter()
        self.sent = 0

    def run(self):
        while not self.r.stop.is_set():
            if self.r.restarting or not self.r.running.wait(1):
                continue
            try:
                self.one()
            except Exception as e:                 # a bug in this file
                self.r.finding("fuzzer-error", f"console fuzz: {type(e).__name__}: {e}", "console")
            time.sleep(0.005)

    def word(self):
        rng = self.rng
        return rng.choice([rng.choice(list(CORE_TOPICS)), WIDE_TOPIC, "", "..", "%ff%fe", "<script>", "a" * 300,
                           str(rng.randint(-2 ** 63, 2 ** 63)), "".join(chr(rng.randint(1, 0x2FFF)) for _ in range(6))])

    def target(self):
        rng = self.rng
        path = rng.choice(self.PATHS)
        path = path % tuple(urllib.parse.quote(self.word(), safe="") if i == 0 or rng.random() < 0.3
                            else str(rng.choice([0, 1, 2, 3, -1, 10 ** 12])) for i in range(path.count("%s")))
        query = {k: rng.choice([self.word(), str(rng.randint(-2 ** 63, 2 ** 63)), "end", "log", "committed",
                                "uncommitted", "hex", "json"])
                 for k in rng.sample(["offset", "timestamp", "at", "view", "format", "limit", "id", "last_id"],
                                     rng.randint(0, 4))}
        return path + ("?" + urllib.parse.urlencode(query) if query else "")

    def one(self):
        rng = self.rng
        host = f"127.0.0.1:{self.port}"
        kind = rng.choice(["get", "get", "get", "get", "garbage", "huge", "host", "method", "slow", "stream",
                           "headers", "login", "session"])
        if kind == "garbage":
            head = bytes(rng.randint(0, 255) for _ in range(rng.randint(0, 200))) + b"\r\n\r\n"
        elif kind == "huge":
            head = b"GET /" + b"a" * rng.randint(8000, 20000) + b" HTTP/1.1\r\nHost: " + host.encode() + b"\r\n\r\n"
        elif kind == "host":
            head = f"GET / HTTP/1.1\r\nHost: {rng.choice(['evil.test', '127.0.0.1', '', 'localhost:1'])}\r\n\r\n".encode()
        elif kind == "method":
            head = f"{rng.choice(['POST', 'PUT', 'DELETE', 'OPTIONS', 'TRACE', 'CONNECT', 'G@T'])} " \
                   f"{self.target()} HTTP/1.1\r\nHost: {host}\r\nContent-Length: 5\r\n\r\nhello".encode()
        elif kind == "login":
            body = rng.choice([urllib.parse.urlencode({"user": self.word(), "password": self.word(),
                                                       "next": rng.choice(["/", "//evil.test", "/topics", self.word()])}),
                               "&".join("f%d=%s" % (i, self.word()) for i in range(rng.randint(0, 40))),
                               "".join(chr(rng.randint(0, 255)) for _ in range(rng.randint(0, 5000)))])
            body = body.encode("utf-8", "replace")
            length = rng.choice([len(body), len(body), -1, "x", 2 ** 70, len(body) - 1 if body else 0])
            extra = rng.choice(["", "Transfer-Encoding: chunked\r\n", f"Origin: {rng.choice(['null', 'http://evil.test'])}\r\n",
                                f"Content-Length: {len(body)}\r\n"])
            head = (f"POST {rng.choice(['/login', '/logout', '/api/login', '/api/logout'])} HTTP/1.1\r\nHost: {host}\r\n"
                    f"Content-Length: {length}\r\n{extra}\r\n").encode() + body
        elif kind == "session":
            head = (f"GET {self.target()} HTTP/1.1\r\nHost: {host}\r\n"
                    f"Cookie: doze_console_{self.port}={self.word()}; other={self.word()}\r\n"
                    f"Authorization: {rng.choice(['Bearer', 'bearer', 'Basic', ''])} {self.word()}\r\n\r\n"
                    ).encode("utf-8", "replace")
        elif kind == "headers":
            lines = [f"X-{i}: {'v' * rng.randint(0, 80)}" for i in range(rng.randint(0, 120))]
            if rng.random() < 0.3:
                lines.append("no colon here")
            head = ("GET / HTTP/1.1\r\nHost: " + host + "\r\n" + "\r\n".join(lines) + "\r\n\r\n").encode()
        else:
            head = f"GET {self.target()} HTTP/1.{rng.choice([0, 1])}\r\nHost: {host}\r\n\r\n".encode("utf-8", "replace")
        self.sent += 1
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=self.r.answer_timeout * 3) as sock:
                if kind == "slow":
                    sock.sendall(b"GET / HTTP/1.1\r\nHo")
                    time.sleep(rng.uniform(0, 0.3))
                    return                                   # gone before the head ends
                sock.sendall(head)
                if kind == "stream":
                    time.sleep(rng.uniform(0, 0.2))
                answer = sock.recv(64)
        except socket.timeout:
            self.r.finding("console-no-answer", f"no answer to {kind} {head[:120]!r}", "console")
            return
        except OSError:
            self.statuses["reset"] += 1                      # closed under us: after a 431, say
            return
        m = re.match(rb"HTTP/1\.1 (\d{3}) ", answer)
        status = int(m.group(1)) if m else None
        self.statuses[status] += 1
        if status not in self.OK:
            self.r.finding("console-bad-answer", f"{kind}: {answer[:64]!r} to {head[:160]!r}", f"console {status}")


class LogWatch(logging.Handler):
    """Reads doze's log (in-process: a handler on the "doze_kafka" logger):
    tracebacks and ERROR lines are findings; "closing connection" lines say
    why a fuzz connection was closed."""

    def __init__(self, runner):
        super().__init__(logging.DEBUG)
        self.r = runner

    def emit(self, record):
        try:
            tb = "".join(traceback.format_exception(*record.exc_info)) if record.exc_info else None
            self.r.on_log(record.levelno, record.getMessage(), tb)
        except Exception:
            pass


class LogTail(threading.Thread):
    """The same for a broker writing to a file: follows the file from its
    current end. A traceback is the lines after "Traceback" up to the first
    line that is not indented (the exception)."""

    def __init__(self, runner, path):
        super().__init__(name="logtail", daemon=True)
        self.r, self.path = runner, path
        self.offset = os.path.getsize(path) if os.path.exists(path) else 0
        self.pending = None

    def run(self):
        while not self.r.stop.is_set():
            self.poll()
            time.sleep(0.2)
        self.poll()

    def poll(self):
        if not os.path.exists(self.path):
            return
        with open(self.path, "rb") as f:
            f.seek(self.offset)
            data = f.read()
        end = data.rfind(b"\n") + 1
        self.offset += end
        for line in data[:end].decode("utf-8", "replace").splitlines():
            self.line(line)
        self.flush()                  # a record (and its traceback) is written whole

    def line(self, line):
        m = re.match(r"\S+ \S+ (DEBUG|INFO|WARNING|ERROR|CRITICAL) \S+: (.*)", line)
        if m:
            self.flush()
            self.pending = (getattr(logging, m.group(1)), m.group(2), [])
        elif self.pending is not None:
            self.pending[2].append(line)               # a traceback's lines
        elif line.startswith("Traceback"):
            self.pending = (logging.ERROR, "(traceback without a log line)", [line])

    def flush(self):
        if self.pending is not None:
            level, msg, tb = self.pending
            self.pending = None
            self.r.on_log(level, msg, "\n".join(tb) if tb else None)


###############################################################################
# 8. BROKERS -- in-process, a child process, or one already running
###############################################################################

IN_PROCESS_SETTINGS = {"group.initial.rebalance.delay.ms": 0, "group.min.session.timeout.ms": 1000,
                       "group.max.session.timeout.ms": 30000}


def rss_of(pid="self"):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


class InProcessBroker:
    kind = "in-process"

    def __init__(self, settings):
        self.settings = settings
        self.ctx = None
        self.broker = None
        self.pid = "self"
        self.log_file = None

    def start(self):
        doze = load_doze()
        self.ctx = doze.running(dict({"doze.console.listener": "127.0.0.1:0"}, **self.settings))
        self.broker = self.ctx.__enter__()
        return self.broker.bootstrap

    @property
    def console_port(self):
        console = getattr(self.broker, "console", None)
        return console.port if console is not None else None

    def alive(self):
        return self.broker is not None and self.broker.thread.is_alive()

    def stop(self):
        if self.ctx is not None:
            try:
                self.ctx.__exit__(None, None, None)
            except Exception:
                pass
            self.ctx = None


class SpawnedBroker:
    """doze_kafka.py as a child process, in a temporary directory, with an
    address-space limit so that a runaway allocation fails instead of eating
    the machine. restart() kills it (SIGKILL) and starts it again on the same
    port and data."""
    kind = "child process"

    def __init__(self, settings, memory_limit=3 << 30, doze_path=DOZE_PATH):
        self.settings = settings
        self.doze_path = doze_path
        self.tmp = tempfile.mkdtemp(prefix="doze-fuzz-")
        self.log_file = os.path.join(self.tmp, "broker.log")
        self.data = os.path.join(self.tmp, "data")
        self.memory_limit = memory_limit
        self.port = lib.free_port()
        self.console_port = lib.free_port()
        self.settings.setdefault("doze.console.listener", f"127.0.0.1:{self.console_port}")
        self.proc = None

    @property
    def pid(self):
        return self.proc.pid if self.proc else None

    def start(self):
        args = [sys.executable, self.doze_path, "--port", str(self.port), "--data-dir", self.data]
        for k, v in self.settings.items():
            args += ["--override", f"{k}={v}"]
        limit = self.memory_limit

        def limits():
            import resource
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        logf = open(self.log_file, "a")
        self.proc = subprocess.Popen(args, stdout=logf, stderr=logf, preexec_fn=limits)
        logf.close()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return f"127.0.0.1:{self.port}"
            except OSError:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"doze exited with {self.proc.returncode}; see {self.log_file}")
                time.sleep(0.05)
        raise RuntimeError("doze did not start listening")

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def restart(self):
        self.kill()
        return self.start()

    def kill(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()


class ExternalBroker:
    kind = "external"

    def __init__(self, bootstrap, pid=None, log_file=None):
        self.bootstrap, self.pid, self.log_file = bootstrap, pid, log_file

    def start(self):
        return self.bootstrap

    def alive(self):
        if self.pid is not None:
            try:
                os.kill(self.pid, 0)
            except OSError:
                return False
        host, port = self.bootstrap.rsplit(":", 1)
        try:
            socket.create_connection((host, int(port)), timeout=2).close()
            return True
        except OSError:
            return False

    def stop(self):
        pass


###############################################################################
# 9. THE RUN -- and its report
###############################################################################

class Report:
    def __init__(self):
        self.findings = []          # deduplicated; each a dict
        self.notes = []             # observations that fail nothing (e.g. UNKNOWN_SERVER_ERROR, as Kafka)
        self.per_api = {}           # API name -> counts
        self.versions = {}          # API name -> sorted versions sent
        self.close_reasons = {}
        self.error_codes = {}
        self.frames = 0
        self.duration_s = 0.0
        self.seed = None
        self.schemas = None
        self.broker = None
        self.rss = {}
        self.max_probe_latency = 0.0
        self.probes = 0
        self.bystander_acked = 0
        self.deaths = 0
        self.stalls = 0
        self.tracebacks = 0
        self.served = {}
        self.slowest_probes = []
        self.slowest_answers = []
        self.phases = {}
        self.console = None         # the console fuzz's requests and answers by status, when it ran
        self.security = None        # --security: TLS and SASL outcomes, hostile cases by outcome
        self.security_notes = {}

    @property
    def rate(self):
        return self.frames / self.duration_s if self.duration_s else 0.0

    def to_json(self):
        return {k: v for k, v in self.__dict__.items()}

    def summary(self, hex_limit=160):
        lines = [f"fuzz: seed {self.seed}, schemas {self.schemas}, broker {self.broker}: "
                 f"{self.frames} frames in {self.duration_s:.1f} s ({self.rate:.0f}/s); phases (s) {self.phases}",
                 f"broker deaths {self.deaths}, stalls {self.stalls} (max probe latency "
                 f"{self.max_probe_latency * 1000:.0f} ms over {self.probes} probes), tracebacks/errors "
                 f"{self.tracebacks}, bystander acked {self.bystander_acked} records"]
        if self.rss:
            mb = lambda b: f"{b / 1048576:.1f} MiB" if b else "?"      # noqa: E731
            lines.append(f"RSS start {mb(self.rss.get('start'))}, peak {mb(self.rss.get('peak'))}, "
                         f"before cleanup {mb(self.rss.get('before_cleanup'))}, "
                         f"end {mb(self.rss.get('end'))} (settling {self.rss.get('settling')}); MiB by second: "
                         + " ".join(f"{t}s:{m}" for t, m in (self.rss.get("samples") or [])[-30:]))
        if self.console:
            lines.append(f"console: {self.console['sent']} HTTP requests, answers by status {self.console['answers']}")
        if self.security:
            lines.append(f"{SECURE_LISTENER}: " + "; ".join(
                f"{kind}: " + ", ".join(f"{o} {n}" for o, n in sorted(c.items())) for kind, c in self.security.items()))
            for text, n in self.security_notes.items():
                lines.append(f"{SECURE_LISTENER} note x{n}: {text}")
        for ms, what, _ in self.slowest_answers[:3]:
            lines.append(f"slow answer: {what} {ms} ms")
        for latency, what, busy, _ in self.slowest_probes[:3]:
            lines.append(f"slow: bystander {what} {latency * 1000:.0f} ms; in flight since before: {busy}")
        lines.append("")
        lines.append(f"{'API':24s} {'vers':>5s} {'sent':>7s} {'answered':>8s} {'ok':>6s} {'closed':>6s} "
                     f"{'dropped':>7s} {'timeout':>7s} {'mutated':>7s} {'mut.ans':>7s} {'ms':>6s}")
        for name, c in sorted(self.per_api.items()):
            vs = self.versions.get(name) or []
            vtext = f"{len(vs)}/{self.served.get(name, len(vs))}" if vs else "-"
            lines.append(f"{name:24s} {vtext:>5s} {c.get('sent', 0):7d} {c.get('answered', 0):8d} "
                         f"{c.get('ok', 0):6d} {c.get('closed', 0):6d} {c.get('dropped', 0):7d} "
                         f"{c.get('timeout', 0):7d} {c.get('mutated', 0):7d} {c.get('mutated_answered', 0):7d} "
                         f"{c.get('latency_ms', 0):6.1f}")
        lines.append("")
        for n in self.notes[:12]:
            lines.append(f"note: {n['kind']} x{n['count']}: {n['message'][:150]}")
        if self.notes:
            lines.append("")
        if not self.findings:
            lines.append("no findings")
        for i, f in enumerate(self.findings, 1):
            lines.append(f"[{i}] {f['kind']} x{f['count']}: {f['api'] or ''} {f['message'][:300]}")
            if f.get("frame"):
                fr = f["frame"]
                lines.append(f"    frame {fr['api']} v{fr['version']} corr {fr['corr']} ({fr['mutation']}): "
                             f"{fr['hex'][:hex_limit]}{'...' if len(fr['hex']) > hex_limit else ''}")
            for p in f.get("preceding") or []:
                lines.append(f"      after {p['api']} v{p['version']} ({p['mutation'][:60]}): "
                             f"{p['hex'][:80]}{'...' if len(p['hex']) > 80 else ''}")
            if f.get("traceback"):
                tb = f["traceback"].strip().splitlines()
                lines.extend("    | " + line for line in tb[-6:])
        return "\n".join(lines)


class Runner:
    def __init__(self, seed, connections, frames, time_limit_s, schemas, stall_s, stuck_s,
                 answer_timeout, broker, restart, rss_tolerance, verbose, ops=None, wide_partitions=2000,
                 security=None):
        self.seed = seed
        self.secure_addr = security            # None, or the SASL_SSL listener's (host, port)
        self.tls = tls_client_context() if security else None
        self.security_counts = collections.defaultdict(collections.Counter)
        self.security_notes = collections.Counter()
        self.credentials_restored_at = 0.0
        self.connections = connections
        self.frames = frames
        self.time_limit_s = time_limit_s
        self.schemas = schemas
        self.stall_s = stall_s
        self.stuck_s = stuck_s
        self.answer_timeout = answer_timeout
        self.broker = broker
        self.restart = restart
        self.rss_tolerance = rss_tolerance
        self.verbose = verbose
        self.ops = ops or {}
        self.wide_partitions = wide_partitions
        self.stop = threading.Event()
        self.running = threading.Event()
        self.running.set()
        self.restarting = False
        self.broker_epoch = 0
        self.lock = threading.Lock()
        self.findings = collections.OrderedDict()
        self.notes = collections.OrderedDict()
        self.port_owner = {}
        self.closes = {}
        self.last_by_api = {}
        self.last_probe_ok = time.monotonic()
        self.stall_episode = False
        self.stuck = False                  # hung and not restarted: no final verification
        self.slow = []                      # the slowest bystander calls
        self.slow_answers = []              # the slowest fuzz answers
        self.recent_slow = collections.deque(maxlen=64)   # (finished at, ms, frame, worker)
        self.stalls = 0
        self.deaths = 0
        self.tracebacks = 0
        self.rss = {}
        self.bystander_topic = f"fz-bystander-{os.getpid()}-{int(time.time()) % 100000}"
        self.request_max_bytes = 104857600

    # --- the secure listener's bookkeeping ---
    def count_security(self, kind, outcome):
        with self.lock:
            self.security_counts[kind][outcome] += 1

    def note_security(self, text):
        with self.lock:
            self.security_notes[_norm(text, 100)] += 1

    def restore_credentials(self, force=False):
        """The SCRAM user's credentials as setup made them (the fuzz's own
        AlterUserScramCredentials may delete or change them), at most once a second."""
        with self.lock:
            if not force and time.monotonic() - self.credentials_restored_at < 1.0:
                return
            self.credentials_restored_at = time.monotonic()
        c = Client(self.addr, self.doze_models, 10)
        try:
            for upsertion in scram_upsertions():     # one a request: Kafka refuses a user twice in one
                resp = c.call(51, 0, {"deletions": [], "upsertions": [upsertion]}, "fuzz-setup")
                if force and any(get(x, "error_code") for x in get(resp, "results") or []):
                    raise RuntimeError(f"setup: the SCRAM user could not be made: {resp}")
        except (OSError, ConnClosed, DecodeError):
            if force:
                raise
        finally:
            c.close()

    def check_secrets(self):
        """No password the run used (right or wrong) in the broker's log or its
        data directory (meta.db, its WAL), in clear: a finding."""
        places = [self.broker.log_file] if getattr(self.broker, "log_file", None) else []
        data = getattr(self.broker, "data", None)
        for root, _, files in os.walk(data) if data else ():
            places += [os.path.join(root, f) for f in files if f.startswith("meta.db")]
        for path in places:
            try:
                with open(path, "rb") as f:
                    content = f.read()
            except OSError:
                continue
            for secret in (PLAIN_PASSWORD, SCRAM_PASSWORD, WRONG_PASSWORD):
                if secret.encode() in content:
                    self.finding("secret-in-clear", f"{secret!r} is in {path}", f"secret {os.path.basename(path)}")

    # --- targets ---
    def setup_models(self):
        load_doze()                                       # crc32c, and the in-process broker
        doze = load_doze(path=getattr(self.broker, "doze_path", None))
        self.doze_models = models_from_doze(doze)
        if self.schemas == "kafka":
            served = {k: (m.lo, m.hi) for k, m in self.doze_models.items()}
            self.models = models_from_kafka(served)
            self.kafka_models = self.models
        else:
            self.models = self.doze_models
            self.kafka_models = None
        self.by_name = {m.name: m for m in self.models.values()}
        self.targets = []
        for key, m in sorted(self.models.items()):
            versions = list(range(m.lo, m.hi + 1))
            if key == 18:
                versions.append(m.hi + 1)
            self.targets.append((m, versions))

    def pick_target(self, rng):
        m, versions = rng.choice(self.targets)
        return m, rng.choice(versions)

    # --- findings ---
    def finding(self, kind, message, key, frame=None, worker=None, response=None, traceback_text=None,
                api=None, note=False):
        """Record a finding (or, note=True, an observation that fails nothing),
        deduplicated by kind, API and a normalised key; the first occurrence
        keeps its reproducer."""
        api = api or (frame.api.name if frame is not None else None)
        dedupe = (kind, api, _norm(key))
        table = self.notes if note else self.findings
        with self.lock:
            if dedupe in table:
                table[dedupe]["count"] += 1
                return
            entry = {"kind": kind, "api": api, "message": message, "count": 1,
                     "at_s": round(time.monotonic() - self.t0, 2)}
            if frame is not None:
                entry["frame"] = frame_record(frame)
                if worker is not None:
                    before = [p for p in worker.recent if p is not frame][-5:]
                    entry["preceding"] = [frame_record(p) for p in before]
            if response is not None:
                entry["response_hex"] = response.hex()
            if traceback_text:
                entry["traceback"] = traceback_text
            table[dedupe] = entry
        if self.verbose and not note:
            print(f"finding: {kind} {api or ''}: {message[:200]}", file=sys.stderr, flush=True)

    def check_answer(self, worker, f, data):
        """Decode an answer strictly, with the schema of the version asked for
        (ApiVersions above its maximum: v0, KIP-511)."""
        key = f.header_api
        models = [("doze", self.doze_models)] + ([("kafka", self.kafka_models)] if self.kafka_models else [])
        result = None
        for origin, models_ in models:
            api = models_.get(key)
            if api is None:
                continue
            version = f.header_version
            if key == 18 and version > api.hi:
                version = 0
            if not api.lo <= version <= api.hi and key != 18:
                self.finding("answer-to-unsupported-version", f"{api.name} v{version} was answered",
                             f"unsupported v{version}", frame=f, worker=worker, response=data)
                return None
            try:
                _, body = decode_response(api, version, data)
            except (DecodeError, struct.error, IndexError) as e:
                kind = "undecodable-answer" if origin == "doze" else "kafka-undecodable-answer"
                self.finding(kind, f"{api.name} v{version} answer does not decode by the {origin} schema: {e}",
                             f"v{version} {e}", frame=f, worker=worker, response=data)
                continue
            if origin == "doze":
                result = body
        return result

    def check_close(self, worker, f, reason):
        """A close is a fine answer to a malformed frame; for a frame valid by
        the schema it generated from, a refusal to decode is a finding."""
        if f.mutated or not reason:
            return
        m = re.search(r"correlation id (-?\d+)", reason)
        if m and int(m.group(1)) != f.corr:
            return                                   # the reason is some other frame's
        if "does not decode" in reason or "not supported" in reason:
            kind = "valid-request-refused" if self.schemas == "doze" else "kafka-valid-request-refused"
            self.finding(kind, f"{f.api.name} v{f.version} (valid by the {self.schemas} schema) "
                         f"was refused: {reason}", _norm(reason), frame=f, worker=worker)

    def check_timeout(self, worker, f):
        """No answer and no close for a request that never waits: a swallowed
        request -- if the broker meanwhile answered the bystander."""
        if f.api.name in PARKING_APIS or f.header_api is None or self.restarting:
            return
        if f.header_api != f.api.key:
            return
        if self.last_probe_ok > f.sent_at + 0.5:
            self.finding("no-answer", f"{f.api.name} v{f.version}: neither answered nor closed in "
                         f"{self.answer_timeout} s while the broker answered others", "no answer",
                         frame=f, worker=worker)

    def close_reason(self, port):
        for _ in range(3):
            reason = self.closes.pop(port, None)
            if reason is not None or self.broker.kind != "in-process":
                return reason
            time.sleep(0.005)
        return None

    def on_log(self, level, msg, tb):
        m = re.match(r"closing connection \S+?:(\d+): (.*)", msg)
        if m:
            self.closes[int(m.group(1))] = m.group(2)
            if len(self.closes) > 10000:
                self.closes.clear()
        if not tb and level < logging.ERROR:
            return
        self.tracebacks += 1
        frame = worker = None
        m = re.search(r"from \S+?:(\d+) \(correlation id (-?\d+)\)", msg)
        if m:
            worker = self.port_owner.get(int(m.group(1)))
            if worker is not None:
                corr = int(m.group(2))
                frame = next((f for f in reversed(worker.recent) if f.corr == corr), None)
        if frame is None:
            m = re.match(r"(\w+) v(\d+)", msg)
            if m and (m.group(1), int(m.group(2))) in self.last_by_api:
                worker, frame = self.last_by_api[(m.group(1), int(m.group(2)))]
        api = re.match(r"(\w+)", msg).group(1) if re.match(r"(\w+)", msg) else None
        if frame is not None:
            api = frame.api.name
        bug = re.search(r"failed: (\w+)(?:: .*?)?(?: \(at line \d+, in (\w+)\))?: a bug in doze", msg) or \
            re.search(r"does not encode: (\w+)(?:: .*?)?(?: \(at line \d+, in (\w+)\))?: a bug in doze", msg)
        if bug and not tb:
            # doze's one-line report of a handler's stray exception (the traceback is at DEBUG)
            self.finding("traceback", msg, f"{bug.group(1)} {bug.group(2) or ''}", frame=frame, worker=worker,
                         api=api, traceback_text=msg)
        elif tb:
            lines = tb.strip().splitlines()
            where = [line.strip() for line in lines if "doze_kafka.py" in line]
            exc = lines[-1] if lines else "?"
            func = re.sub(r", line \d+", "", where[-1]) if where else ""
            key = f"{exc.split(':')[0]} {func}"
            self.finding("traceback", f"{msg} -- {exc}", key, frame=frame, worker=worker,
                         traceback_text=tb, api=api)
        else:
            self.finding("error-log", msg, _norm(msg), frame=frame, worker=worker, api=api)

    def slow_probe(self, latency, what, t0):
        """Keep the slowest bystander calls, with the oldest fuzz frame that
        was in flight when each began: what the broker was busy with."""
        culprit = None
        for w in self.workers:
            for f in list(w.pending)[:1]:
                if f.sent_at <= t0 and (culprit is None or f.sent_at < culprit.sent_at):
                    culprit = f
        entry = (round(latency, 3), what, f"{culprit.api.name} v{culprit.version} ({culprit.label()[:60]})"
                 if culprit else "-", culprit.wire().hex()[:400] if culprit else "")
        with self.lock:
            self.slow.append(entry)
            self.slow.sort(reverse=True)
            del self.slow[5:]

    def slow_answer(self, ms, f, worker):
        with self.lock:
            self.recent_slow.append((time.monotonic(), ms, f, worker))
            self.slow_answers.append((round(ms), f"{f.api.name} v{f.version} ({f.label()[:60]})",
                                      f.wire().hex()[:200]))
            self.slow_answers.sort(reverse=True)
            del self.slow_answers[5:]

    def stall(self, latency, what):
        with self.lock:
            if self.stall_episode:
                return
            self.stall_episode = True
            self.stalls += 1
        self.record_stall(f"bystander {what} took {latency:.2f} s (threshold {self.stall_s} s)", "stall")

    def record_stall(self, message, kind):
        """Blame the earliest-sent frame still unanswered when the broker
        stalled (its one loop handles frames in arrival order), with the
        frames before it on its connection -- often the real cause, e.g. the
        Produce that stored a poisoned batch."""
        parked = ("JoinGroup", "SyncGroup", "Fetch")          # may wait legitimately: blamed last
        suspects = sorted(((w.pending[0].api.name in parked and not w.pending[0].tag, w.pending[0].sent_at, i, w,
                            w.pending[0]) for i, w in enumerate(self.workers)
                           if w.pending and w.pending[0].sent_at), key=lambda x: x[:3])
        suspects = [x[1:] for x in suspects]
        # a frame answered slowly during the stall (its answer and the
        # bystander's may come out of the same loop pass) is the better suspect
        now = time.monotonic()
        window = self.stall_s * 2
        with self.lock:
            recent = sorted((x for x in self.recent_slow if now - x[0] < window and x[1] / 1000 > self.stall_s / 2),
                            key=lambda x: -x[1])
        if recent:
            _, ms, f, w = recent[0]
            self.finding(kind, f"{message}; answered after {ms:.0f} ms just then: {f.api.name} v{f.version} "
                         f"({f.label()[:80]})", f"{kind} {f.api.name} {f.tag.split(' ')[0]}", frame=f, worker=w)
            return
        if not suspects:
            self.finding(kind, message, kind)
            return
        _, _, w, f = suspects[0]
        others = "; ".join(f"{g.api.name} v{g.version} ({g.label()[:40]})" for _, _, _, g in suspects[1:4])
        self.finding(kind, f"{message}; oldest unanswered frame: {f.api.name} v{f.version} ({f.label()[:80]})"
                     + (f"; also unanswered: {others}" if others else ""), f"{kind} {f.api.name}",
                     frame=f, worker=w)

    # --- the monitor ---
    def monitor(self):
        last_alive_check = 0.0
        while not self.stop.is_set():
            now = time.monotonic()
            rss = rss_of(self.broker.pid) if self.broker.pid else None
            if rss:
                self.rss["peak"] = max(self.rss.get("peak", 0), rss)
                samples = self.rss.setdefault("samples", [])
                if not samples or now - self.t0 - samples[-1][0] >= 10:
                    samples.append((round(now - self.t0), rss >> 20))
            if self.time_limit_s and now - self.t0 > self.time_limit_s:
                self.stop.set()
                break
            if self.stall_episode and self.bystander.inflight_since is None and \
                    now - self.last_probe_ok < 0.5:
                self.stall_episode = False
            since = self.bystander.inflight_since
            if since is not None and now - since > self.stuck_s:
                self.stalls += 1
                self.stuck = True
                self.record_stall(f"the broker did not answer the bystander for {self.stuck_s} s", "stuck")
                if not self.recover("stuck"):
                    return
            if now - last_alive_check > 1.0:
                last_alive_check = now
                if not self.broker.alive():
                    self.deaths += 1
                    self.record_stall("the broker died", "broker-death")
                    if not self.recover("dead"):
                        return
            time.sleep(0.2)

    def recover(self, why):
        """After a death or a hang: restart a child-process broker (--restart),
        otherwise stop the run."""
        if not (self.restart and isinstance(self.broker, SpawnedBroker)):
            self.stop.set()
            return False
        self.running.clear()
        self.restarting = True
        try:
            self.broker.restart()
        except Exception as e:
            self.finding("broker-death", f"restart failed: {e}", "restart failed")
            self.stop.set()
            return False
        self.broker_epoch += 1
        self.stuck = False
        self.bystander.client.close()
        self.bystander.inflight_since = None
        time.sleep(0.2)
        self.restarting = False
        self.stall_episode = False
        self.last_probe_ok = time.monotonic()
        self.running.set()
        return True

    def cleanup(self):
        """Remove what the fuzz made (its topics, its groups) before the last
        RSS reading, so that "back to its start" compares like with like."""
        try:
            c = Client(self.addr, self.doze_models, 10)
            api = self.doze_models[20]
            names = CHURN_TOPICS + UNKNOWN_TOPICS + list(CORE_TOPICS) + [WIDE_TOPIC, self.bystander_topic,
                                                                         "__consumer_offsets", "__transaction_state"]
            body = {"topic_names": names, "topics": [{"name": t, "topic_id": bytes(16)} for t in names],
                    "timeout_ms": 10000}
            c.call(20, api.hi, body, "fuzz-cleanup")
            self.reset_broker_configs(c)
            groups = GROUPS + [f"fz-w{i}-g{k}" for i in range(self.connections) for k in range(2)]
            c.call(42, self.doze_models[42].hi, {"groups_names": groups}, "fuzz-cleanup")
            if self.secure_addr:                          # the ACLs the fuzz made (the authorizer is on)
                c.call(31, 3, {"filters": [{"resource_type_filter": 1, "resource_name_filter": None,
                                            "pattern_type_filter": 1, "principal_filter": None,
                                            "host_filter": None, "operation": 1, "permission_type": 1}]},
                       "fuzz-cleanup")
            c.close()
        except (OSError, ConnClosed, DecodeError, KeyError) as e:
            self.finding("cleanup-failed", f"deleting the fuzz's topics and groups failed: {e}", "cleanup")

    def reset_broker_configs(self, c):
        """Undo the broker-level configs the fuzz set (AlterConfigs of broker ""
        and of its id): DELETE each one DescribeConfigs shows as dynamic."""
        for name in ("", "1"):
            resp = c.call(32, 4, {"resources": [{"resource_type": 4, "resource_name": name,
                                                 "configuration_keys": None}],
                                  "include_synonyms": False, "include_documentation": False}, "fuzz-cleanup")
            dynamic = [get(e, "name") for r in get(resp, "results") or [] for e in get(r, "configs") or []
                       if get(e, "config_source") in (2, 3) and get(e, "name") != "min.insync.replicas"]
            if dynamic:
                c.call(44, 1, {"resources": [{"resource_type": 4, "resource_name": name, "configs": [
                    {"name": n, "config_operation": 1, "value": None} for n in dynamic]}],
                    "validate_only": False}, "fuzz-cleanup")

    def settled_rss(self, limit_s=15.0):
        """RSS once the broker is idle: sampled until two readings half a
        second apart agree within 1% (or limit_s passes)."""
        last = rss_of(self.broker.pid)
        trail = self.rss.setdefault("settling", [last >> 20 if last else None])
        deadline = time.monotonic() + limit_s
        while time.monotonic() < deadline:
            time.sleep(0.5)
            now = rss_of(self.broker.pid)
            trail.append(now >> 20 if now else None)
            if now is None or last is None or abs(now - last) <= last * 0.01:
                return now
            last = now
        return last

    # --- the run ---
    def setup_topics(self):
        """The core topics (1-4 partitions) and the bystander's, whose own
        configs shield it from broker-level configs the fuzzer may change."""
        c = Client(self.addr, self.doze_models, 10)
        api = self.doze_models[19]
        v = min(api.hi, 7)
        topics = [{"name": t, "num_partitions": n, "replication_factor": -1, "assignments": [], "configs": []}
                  for t, n in CORE_TOPICS.items()]
        if self.wide_partitions:
            topics.append({"name": WIDE_TOPIC, "num_partitions": self.wide_partitions, "replication_factor": -1,
                           "assignments": [], "configs": []})
        topics.append({"name": self.bystander_topic, "num_partitions": 1, "replication_factor": -1,
                       "assignments": [], "configs": [
                           {"name": "retention.ms", "value": "-1"}, {"name": "retention.bytes", "value": "-1"},
                           {"name": "compression.type", "value": "producer"},
                           {"name": "max.message.bytes", "value": "1048588"},
                           {"name": "segment.bytes", "value": "1073741824"}]})
        try:
            resp = c.call(19, v, {"topics": topics, "timeout_ms": 10000, "validate_only": False}, "fuzz-setup")
        except (OSError, ConnClosed, DecodeError) as e:
            raise RuntimeError(f"setup: CreateTopics failed ({e}); the broker's log says why") from e
        for t in get(resp, "topics"):
            if get(t, "error_code") not in (0, 36):          # 36: TOPIC_ALREADY_EXISTS
                raise RuntimeError(f"cannot create topic {get(t, 'name')}: {t}")
        c.close()

    def execute(self):
        report = Report()
        report.seed, report.schemas, report.broker = self.seed, self.schemas, self.broker.kind
        self.setup_models()
        bootstrap = self.broker.start()
        host, port = bootstrap.rsplit(":", 1)
        self.addr = (host, int(port))
        watch = None
        tail = None
        doze_log = logging.getLogger("doze_kafka")
        old_level = doze_log.level
        if isinstance(self.broker, InProcessBroker):
            watch = LogWatch(self)
            doze_log.addHandler(watch)
            if doze_log.getEffectiveLevel() > logging.WARNING:
                doze_log.setLevel(logging.WARNING)
            try:
                self.request_max_bytes = self.broker.broker.config["socket.request.max.bytes"]
            except Exception:
                pass
        elif self.broker.log_file:
            tail = LogTail(self, self.broker.log_file)
            tail.start()
        self.t0 = time.monotonic()
        self.workers = []
        phases = {}
        try:
            self.setup_topics()
            if self.secure_addr:
                self.restore_credentials(force=True)
            self.rss["start"] = rss_of(self.broker.pid) if self.broker.pid else None
            per = None if self.frames is None else -(-self.frames // self.connections)
            self.workers = [Worker(self, i, per) for i in range(self.connections)]
            self.bystander = Bystander(self)
            self.t0 = time.monotonic()
            self.bystander.start()
            port = getattr(self.broker, "console_port", None)
            self.console = ConsoleFuzzer(self, port) if port else None
            if self.console:
                self.console.start()
            for w in self.workers:
                w.start()
            mon = threading.Thread(target=self.monitor, name="monitor", daemon=True)
            mon.start()
            for w in self.workers:
                while w.is_alive() and not self.stop.is_set():
                    w.join(0.2)
            self.stop.set()
            for w in self.workers:
                w.join(self.answer_timeout * 3)
            if self.console:
                self.console.join(self.answer_timeout * 4)
            phases["fuzz"] = time.monotonic() - self.t0
            self.bystander.join(self.stuck_s + 2)
            mon.join(2)
            report.duration_s = time.monotonic() - self.t0
            phases["bystander stop"] = report.duration_s - phases["fuzz"]
            t = time.monotonic()
            if not self.deaths and not self.stuck and self.broker.alive() and not self.restarting:
                self.bystander.verify_all()
            phases["verify"] = time.monotonic() - t
            t = time.monotonic()
            if self.broker.pid:
                self.rss["before_cleanup"] = rss_of(self.broker.pid)
                self.cleanup()
                if self.frames is None:
                    time.sleep(11)        # the long mode: doze gives freed memory back every 10 s
                self.rss["end"] = self.settled_rss()
            phases["cleanup+rss"] = time.monotonic() - t
        finally:
            self.stop.set()
            if tail is not None:
                tail.join(2)
            t = time.monotonic()
            self.broker.stop()
            phases["broker stop"] = time.monotonic() - t
            if self.secure_addr:
                self.check_secrets()
            report.phases = {k: round(v, 1) for k, v in phases.items()}
            if watch is not None:
                doze_log.removeHandler(watch)
                doze_log.setLevel(old_level)
        if self.rss_tolerance is not None and self.rss.get("start") and self.rss.get("end"):
            if self.rss["end"] > self.rss["start"] * (1 + self.rss_tolerance):
                self.finding("rss-growth", f"RSS {self.rss['start'] >> 20} MiB at start, {self.rss['end'] >> 20} "
                             f"MiB at the end (peak {self.rss.get('peak', 0) >> 20} MiB)", "rss")
        # merge the connections' counts
        per_api = collections.defaultdict(collections.Counter)
        versions = collections.defaultdict(set)
        closes = collections.defaultdict(collections.Counter)
        codes = collections.defaultdict(collections.Counter)
        for w in self.workers:
            for name, c in w.stats.per_api.items():
                per_api[name].update(c)
            for name, vs in w.stats.versions.items():
                versions[name] |= vs
            for name, c in w.stats.close_reasons.items():
                closes[name].update(c)
            for name, c in w.stats.error_codes.items():
                codes[name].update(c)
        report.per_api = {k: {f: c.get(f, 0) for f in Stats.FIELDS} for k, c in per_api.items()}
        for c in report.per_api.values():
            c["latency_ms"] = round(c["latency_ms"] / c["answered"], 1) if c["answered"] else 0
        report.versions = {k: sorted(v) for k, v in versions.items()}
        report.close_reasons = {k: dict(c.most_common(8)) for k, c in closes.items()}
        report.error_codes = {k: dict(c.most_common(10)) for k, c in codes.items()}
        report.served = {m.name: len(vs) for m, vs in self.targets}
        report.frames = sum(w.sent for w in self.workers)
        report.findings = list(self.findings.values())
        report.notes = list(self.notes.values())
        report.rss = dict(self.rss)
        report.max_probe_latency = self.bystander.max_latency if self.workers else 0.0
        report.slowest_probes = list(self.slow)
        report.slowest_answers = list(self.slow_answers)
        report.probes = self.bystander.probes if self.workers else 0
        report.bystander_acked = len(self.bystander.acked) if self.workers else 0
        report.deaths, report.stalls, report.tracebacks = self.deaths, self.stalls, self.tracebacks
        if self.secure_addr:
            report.security = {k: dict(c) for k, c in sorted(self.security_counts.items())}
            report.security_notes = dict(self.security_notes.most_common(10))
        if getattr(self, "console", None):
            report.console = {"sent": self.console.sent, "answers": {str(k): v for k, v in
                                                                     sorted(self.console.statuses.items(), key=str)}}
        return report


def run(bootstrap=None, seed=1, frames=20000, connections=4, broker_settings=None, time_limit_s=None,
        schemas="doze", pid=None, log_file=None, spawn=False, restart=False, stall_threshold_s=2.0,
        stuck_s=10.0, answer_timeout_s=3.0, rss_tolerance=None, verbose=False, doze_path=DOZE_PATH, ops=None,
        wide_partitions=2000, security=False):
    """Fuzz a broker; -> Report (.findings, .per_api, .summary()).

    bootstrap None: an in-process doze (doze_kafka.running, in a temp dir) --
    or, with spawn=True, doze as a child process (restarted after a death or
    hang when restart=True). ops reweights the operations of Worker.OPS
    ({"oversize": 0}: no multi-MiB frames). wide_partitions: the size of the
    topic the "wide" (overload) requests span (0: none). frames None: until time_limit_s. A run always
    stops: at the frame budget, the time limit (default: 600 s), or when the
    broker dies or hangs. security=True: a SASL_SSL listener beside PLAINTEXT,
    with the authorizer on, for half the fuzz connections (section 6b)."""
    settings = dict(IN_PROCESS_SETTINGS)
    settings.update(broker_settings or {})
    if bootstrap:
        broker = ExternalBroker(bootstrap, pid, log_file)
    elif spawn:
        broker = SpawnedBroker(settings, doze_path=doze_path)
    else:
        broker = InProcessBroker(settings)
    if time_limit_s is None:
        time_limit_s = 600.0
    secure_addr = None
    if security:
        if bootstrap:
            raise ValueError("security: only for a broker the fuzz starts")
        secure_addr = ("127.0.0.1", lib.free_port())
        broker.settings.update(security_settings(getattr(broker, "port", 0), secure_addr[1]))
    runner = Runner(seed, connections, frames, time_limit_s, schemas, stall_threshold_s, stuck_s,
                    answer_timeout_s, broker, restart, rss_tolerance, verbose, ops, wide_partitions, secure_addr)
    return runner.execute()


def main(argv=None):
    p = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--frames", type=int, default=None, help="frames to send (default 20000, or unbounded "
                   "with --minutes)")
    p.add_argument("--minutes", type=float, default=None, help="the long mode: run this long")
    p.add_argument("--connections", type=int, default=4)
    p.add_argument("--schemas", choices=["doze", "kafka"], default="doze")
    p.add_argument("--bootstrap", help="HOST:PORT of a running broker (default: start one)")
    p.add_argument("--pid", type=int, help="the external broker's pid (for RSS and liveness)")
    p.add_argument("--log", help="the external broker's log file (tracebacks, close reasons)")
    p.add_argument("--spawn", action="store_true", help="run doze as a child process")
    p.add_argument("--restart", action="store_true", help="with --spawn: restart doze after a death/hang")
    p.add_argument("--doze", default=DOZE_PATH, help="with --spawn: the doze_kafka.py to run")
    p.add_argument("--stall", type=float, default=2.0, help="stall threshold for bystander probes (s)")
    p.add_argument("--override", action="append", default=[], metavar="NAME=VALUE",
                   help="a broker setting for the broker this starts")
    p.add_argument("--rss-tolerance", type=float, default=None,
                   help="a finding if RSS ends this fraction above its start (long mode: 0.10)")
    p.add_argument("--ops", default="", help="reweight operations, e.g. oversize=0,burst=20 (see Worker.OPS)")
    p.add_argument("--wide", type=int, default=2000, help="partitions of the topic overload requests span (0: off)")
    p.add_argument("--security", action="store_true", help="a SASL_SSL listener (PLAIN, SCRAM) and the "
                   "authorizer: half the fuzz connections authenticate there, with hostile TLS and SASL beside")
    p.add_argument("--out", help="write the whole report (full frame hex) as JSON here")
    p.add_argument("--verbose", action="store_true")
    args = p.parse_args(argv)
    frames = args.frames if args.frames is not None else (None if args.minutes else 20000)
    settings = {}
    for item in args.override:
        k, _, v = item.partition("=")
        settings[k] = v
    rss_tol = args.rss_tolerance if args.rss_tolerance is not None else (0.10 if args.minutes else None)
    report = run(bootstrap=args.bootstrap, seed=args.seed, frames=frames, connections=args.connections,
                 broker_settings=settings, time_limit_s=args.minutes * 60 if args.minutes else None,
                 schemas=args.schemas, pid=args.pid, log_file=args.log, spawn=args.spawn,
                 restart=args.restart, stall_threshold_s=args.stall, rss_tolerance=rss_tol,
                 verbose=args.verbose, doze_path=args.doze, wide_partitions=args.wide, security=args.security,
                 ops={k: float(v) for k, v in (item.split("=") for item in args.ops.split(",") if item)})
    print(report.summary())
    if args.out:
        with open(args.out, "w") as f:
            json.dump(report.to_json(), f, indent=1, default=str)
    return 1 if report.findings else 0


if __name__ == "__main__":
    sys.exit(main())
