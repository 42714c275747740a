#!/usr/bin/env python3
"""Record a conformance scenario against a Kafka broker (the oracle: Apache Kafka 4.3.1).

A scenario (conformance/scenarios.py) is a list of requests, each given as
(API, version, fields), sent over raw sockets with doze_kafka's own codec. The
recorder saves conformance/recordings/NAME.json: every request as sent (in a
JSON-friendly decoded form) and the broker's decoded response, or the fact that
the broker closed the connection. replay.py sends the same requests to another
broker (doze-kafka) and compares the answers.

    python3 conformance/recorder.py --all                 # starts a real Kafka 4.3.1 itself
    python3 conformance/recorder.py endtxn-decisions add-offsets
    python3 conformance/recorder.py --bootstrap 127.0.0.1:9300 metadata
    python3 conformance/recorder.py --all --out /tmp/again  # a second recording, to diff

Standard library only.

JSON forms (requests and responses):
    bytes      {"$hex": "..."} or {"$utf8": "..."} (recorded responses use $hex, except
               record keys/values/header values, which use $utf8 when they decode)
    uuid       {"$uuid": "32 hex digits"}
    records    request: {"$batch": {records, producer_id, producer_epoch, base_sequence,
               attributes, timestamp_ms, base_offset, corrupt_crc, magic, records_count,
               compression ("gzip")}} (a record is [key, value, headers?]; a key or value
               null is a null) (or {"$batches": [..]},
               {"$hex": raw}); response: {"batches": [{"header": {...}, "records": [...]}]}
    {"$subscription": [topics]}, {"$assignment": {topic: [partitions]}}: ConsumerProtocol
               v0 bytes for JoinGroup metadata / SyncGroup assignments
    {"$ref": "STEP.path.0.field", "add": N}: a value from an earlier step's response
               (resolved at run time; the recording keeps the ref and adds "value")

A step is a dict:
    {"id": "init", "api": "InitProducerId", "v": 5, "conn": 1, "req": {...},
     "nowait": True,          # send and do not wait; the answer is read later (pipelining)
     "delay_ms": N,           # sleep before sending
     "until": {"path": "a.0.b", "equals": X} or {"path":..., "in": [..]} or
              {"path": ..., "not_equals": X}, "timeout_ms": N, "interval_ms": N,
                              # poll: resend until the condition holds; only the last answer is kept
     "retry": {"path": "error_code", "in": [51]}, # resend while the answer matches; records
                              # the first answer and the last ("final_response")
     "keep": {"path": "groups", "field": "group_id", "prefix": S},
                              # drop list entries of other scenarios (listings of the broker)
     "decode_version": N,     # decode the response as this version (KIP-511 answers are v0)
     "body_version": N,       # encode the body as this version (header says "v")
     "body_hex": "...",       # send these bytes as the body, as they are (malformed requests);
                              # the header is still built from api, v and the correlation id.
                              # "req" is then only shown (what the bytes were made from), and
                              # "note" says what was changed; both are recorded with the bytes
     "repeat": N,             # send the same request N times on its connection, pipelined
                              # in chunks of REPEAT_CHUNK; only the last answer is kept, with
                              # "repeat_error_codes" ({error code: how many answers had it})
     "note": "..."}
    {"sleep_ms": N}
    {"await": "step id"}      # read a pipelined answer now

A condition's path ("until", "retry") may select list entries by a field's value:
"finalized_features.[name=transaction.version].max_version_level"; "count": 0 holds
when nothing is at the path.

A scenario may name doze_settings (doze's own settings, e.g. {"doze.transaction.version":
2}): they are written into the recording and given to doze by replay.py, never to the
real Kafka. own_broker=True records the scenario on a Kafka of its own (one that changes
the cluster, e.g. UpdateFeatures). Each recording also keeps the finalized features Kafka
had when the scenario started ("finalized_features", from ApiVersions v4).
"""

import argparse
import base64
import collections
import copy
import datetime
import hashlib
import hmac
import json
import os
import re
import socket
import struct
import sys
import time
import zlib

from lib import CONFORMANCE            # (and puts the repository root and conformance/kafka on sys.path)
import doze_kafka as dk

RECORDINGS = os.path.join(CONFORMANCE, "recordings")
KAFKA_BROKER = "Apache Kafka 4.3.1"
CLIENT_ID = "doze-conformance"
STEP_TIMEOUT_S = 30.0

API_BY_NAME = {spec.name: spec for spec, _ in dk.HANDLERS.values()}
API_BY_KEY = {spec.key: spec for spec, _ in dk.HANDLERS.values()}


def api_spec(api):
    if isinstance(api, int):
        return API_BY_KEY[api]
    return API_BY_NAME[api]


# --- JSON <-> codec values ------------------------------------------------------

class RecordingError(Exception):
    pass


def _bytes_from_json(v):
    if v is None or isinstance(v, (bytes, bytearray)):
        return v
    if isinstance(v, str):
        return v.encode()
    if "$hex" in v:
        return bytes.fromhex(v["$hex"])
    if "$utf8" in v:
        return v["$utf8"].encode()
    if "$b64" in v:
        return base64.b64decode(v["$b64"])
    if "$subscription" in v:
        return consumer_subscription(v["$subscription"])
    if "$assignment" in v:
        return consumer_assignment(v["$assignment"])
    raise RecordingError(f"cannot make bytes from {v!r}")


def _records_from_json(v):
    if v is None:
        return None
    if "$batches" in v:
        return b"".join(_records_from_json(b) for b in v["$batches"])
    if "$batch" in v:
        return make_batch(**v["$batch"])
    return _bytes_from_json(v)


def gzip_mtime0(data):
    """gzip.compress(data, mtime=0) as Python 3.11 writes it (zlib's own header:
    XFL 2, OS 3), on every Python: 3.9's gzip module writes OS 255 itself, which
    would change the batches' CRCs from those recorded."""
    deflater = zlib.compressobj(9, zlib.DEFLATED, 31)
    return deflater.compress(data) + deflater.flush()


def make_batch(records=(("k", "v"),), producer_id=-1, producer_epoch=-1, base_sequence=-1,
               attributes=0, timestamp_ms=1700000000000, base_offset=0, corrupt_crc=False,
               magic=2, records_count=None, compression=None):
    """RecordBatch v2 bytes from readable parameters (doze_kafka.build_batch).
    compression="gzip": the records gzip-compressed (mtime 0) and attributes' codec bits 1."""
    recs = []
    for r in records:
        if isinstance(r, dict):
            k, v, h = r.get("key"), r.get("value"), r.get("headers", ())
        else:
            k, v, h = (list(r) + [()])[:3]
        recs.append((_bytes_from_json(k), _bytes_from_json(v),
                     [(hk, _bytes_from_json(hv)) for hk, hv in h]))
    batch = bytearray(dk.build_batch(recs, base_offset, timestamp_ms, producer_id, producer_epoch,
                                     base_sequence, attributes))
    if compression is not None:
        if compression != "gzip":
            raise RecordingError(f"compression {compression!r}: only gzip is built")
        head = dk.BATCH_HEADER_SIZE
        batch = batch[:head] + gzip_mtime0(bytes(batch[head:]))
        struct.pack_into(">i", batch, 8, len(batch) - dk.LOG_OVERHEAD)
        struct.pack_into(">h", batch, 21, (attributes & ~0x07) | 1)
        struct.pack_into(">I", batch, 17, dk.crc32c(bytes(batch[21:])))
    if records_count is not None:
        struct.pack_into(">i", batch, 57, records_count)
        struct.pack_into(">I", batch, 17, dk.crc32c(bytes(batch[21:])))
    if magic != 2:
        batch[16] = magic
    if corrupt_crc:
        struct.pack_into(">I", batch, 17, (struct.unpack_from(">I", batch, 17)[0] ^ 0xFFFF))
    return bytes(batch)


def consumer_subscription(topics):
    """ConsumerProtocolSubscription v0: version, topics, user_data=null."""
    out = struct.pack(">hi", 0, len(topics))
    for t in topics:
        out += struct.pack(">h", len(t.encode())) + t.encode()
    return out + struct.pack(">i", -1)


def consumer_assignment(assignment):
    """ConsumerProtocolAssignment v0: version, [(topic, [partition])], user_data=null."""
    out = struct.pack(">hi", 0, len(assignment))
    for t, parts in assignment.items():
        out += struct.pack(">h", len(t.encode())) + t.encode()
        out += struct.pack(">i", len(parts)) + b"".join(struct.pack(">i", p) for p in parts)
    return out + struct.pack(">i", -1)


def value_from_json(f, v):
    """One field's JSON form -> what doze_kafka's encoder takes."""
    t = f.type
    if v is None:
        return None
    if t == "[]":
        return [msg_from_json(f.fields, item) for item in v]
    if t == "{}":
        return msg_from_json(f.fields, v)
    if t.startswith("[]"):
        elem = dk.Field(f.name, t[2:])
        return [value_from_json(elem, item) for item in v]
    if t == "uuid":
        return bytes.fromhex(v["$uuid"]) if isinstance(v, dict) else bytes.fromhex(v)
    if t == "bytes":
        return _bytes_from_json(v)
    if t == "records":
        return _records_from_json(v)
    return v


def msg_from_json(fields, d):
    by_name = {f.name: f for f in fields}
    msg = dk.Msg()
    for name, v in d.items():
        if name not in by_name:
            raise RecordingError(f"field {name!r} is not in the schema "
                                 f"(fields: {sorted(by_name)})")
        setattr(msg, name, value_from_json(by_name[name], v))
    return msg


def _maybe_text(b):
    if b is None:
        return None
    try:
        s = b.decode("utf-8")
        if s.isprintable():
            return {"$utf8": s}
    except UnicodeDecodeError:
        pass
    return {"$hex": b.hex()}


def records_to_json(data):
    """A Fetch response's records: batch headers and decoded records."""
    if data is None:
        return None
    data = bytes(data)
    batches, pos = [], 0
    while pos < len(data):
        if len(data) - pos < dk.BATCH_HEADER_SIZE:
            batches.append({"partial_bytes": len(data) - pos})
            break
        h = dk.read_batch_header(data, pos)
        size = h.batch_length + dk.LOG_OVERHEAD
        if pos + size > len(data):
            batches.append({"partial_bytes": len(data) - pos})
            break
        batch = data[pos:pos + size]
        entry = {"header": h._asdict()}
        try:
            recs = []
            for off_delta, ts_delta, key, value, headers in dk.decode_records(batch):
                if h.attributes & dk.ATTR_CONTROL and key is not None and len(key) == 4:
                    version, ctype = struct.unpack(">hh", key)
                    rec = {"offset_delta": off_delta, "timestamp_delta": ts_delta,
                           "control": {0: "ABORT", 1: "COMMIT"}.get(ctype, ctype),
                           "control_key_version": version, "value": {"$hex": value.hex()}
                           if value is not None else None}
                else:
                    rec = {"offset_delta": off_delta, "timestamp_delta": ts_delta,
                           "key": _maybe_text(key), "value": _maybe_text(value),
                           "headers": [[hk.decode("utf-8", "replace"), _maybe_text(hv)]
                                       for hk, hv in headers]}
                recs.append(rec)
            entry["records"] = recs
        except Exception as e:            # noqa: BLE001 -- keep the raw bytes instead
            entry["records_error"] = str(e)
            entry["raw"] = {"$hex": batch.hex()}
        batches.append(entry)
        pos += size
    return {"batches": batches}


def value_to_json(f, v):
    t = f.type
    if v is None:
        return None
    if t in ("[]", "{}"):             # only schema defaults get here (decode_struct builds dicts)
        return [] if t == "[]" else {}
    if t.startswith("[]"):
        elem = dk.Field(f.name, t[2:])
        return [value_to_json(elem, item) for item in v]
    if t == "uuid":
        return {"$uuid": bytes(v).hex()}
    if t == "bytes":
        return {"$hex": bytes(v).hex()}
    if t == "records":
        return records_to_json(v)
    return v


# A decoder like doze_kafka.read_struct, which also keeps tagged fields the
# schema does not know (as "_unknown_tags") and returns plain dicts in schema order.
# It takes a null wherever one comes (the broker under test decides what it sends;
# conformance/schemacheck.py decides what the schema allows).

def decode_struct(r, plan, flexible):
    out = {}
    absent = dict(plan.absent)
    known_tags = {}
    for f, child, nullable in plan.steps:
        out[f.name] = _decode_value(r, f, child, flexible, nullable)
    for tag, (f, child, _) in plan.tagged.items():
        known_tags[tag] = (f, child)
    tag_values, unknown = {}, {}
    if flexible:
        for _ in range(r.uvarint()):
            tag, size = r.uvarint(), r.uvarint()
            data = r.take(size)
            if tag in known_tags:
                f, child = known_tags[tag]
                tag_values[f.name] = _decode_value(dk.Reader(data), f, child, flexible)
            else:
                unknown[str(tag)] = {"$hex": bytes(data).hex()}
    for tag, (f, child) in sorted(known_tags.items()):
        if f.name in tag_values:
            out[f.name] = tag_values[f.name]
        else:
            out[f.name] = value_to_json(f, absent.get(f.name))
    if unknown:
        out["_unknown_tags"] = unknown
    return out


def _decode_value(r, f, child, flexible, nullable=False):
    t = f.type
    if t == "[]" or (t.startswith("[]") and len(t) > 2):
        n = r.length(flexible, dk.I32)
        if n < 0:
            return None
        if t == "[]":
            return [decode_struct(r, child, flexible) for _ in range(n)]
        read = dk.PRIMITIVES[t[2:]][0]
        elem = dk.Field(f.name, t[2:])
        return [value_to_json(elem, read(r, flexible, True, f.name)) for _ in range(n)]
    if t == "{}":
        if nullable and r.fixed(dk.I8) < 0:       # a nullable struct: int8 -1 null, 1 present
            return None
        return decode_struct(r, child, flexible)
    return value_to_json(f, dk.PRIMITIVES[t][0](r, flexible, True, f.name))


def decode_response(spec, version, body):
    """Response body bytes (after the header) -> JSON form."""
    r = dk.Reader(body)
    out = decode_struct(r, dk.plan_for(spec, version, "response"), spec.flexible(version))
    if r.pos != r.end:
        out["_trailing_bytes"] = {"$hex": bytes(body[r.pos:]).hex()}
    return out


# --- references -----------------------------------------------------------------

def lookup(responses, path):
    parts = path.split(".")
    if parts[0] not in responses:
        raise RecordingError(f"$ref {path}: no answer from step {parts[0]!r} (yet)")
    node = responses[parts[0]]
    for p in parts[1:]:
        if isinstance(node, list):
            node = node[int(p)]
        elif isinstance(node, dict) and p in node:
            node = node[p]
        else:
            raise RecordingError(f"$ref {path}: no {p!r} in {json.dumps(node)[:200]}")
    return node


def find_refs(template, out=None):
    out = [] if out is None else out
    if isinstance(template, dict):
        if "$ref" in template:
            out.append(template["$ref"].split(".")[0])
        elif "$scram_final" in template:
            out.append(template["$scram_final"]["first"])
        else:
            for v in template.values():
                find_refs(v, out)
    elif isinstance(template, list):
        for v in template:
            find_refs(v, out)
    return out


def resolve(template, responses, scram=None):
    """-> (the template with each ref's "value" filled in, the plain resolved value).
    scram: a Runner's Scram, for {"$scram_final": ...} (computed anew on every run,
    so shown without its value)."""
    if isinstance(template, dict):
        if "$scram_final" in template and scram is not None:
            return template, scram.client_final(template["$scram_final"])
        if "$ref" in template:
            value = lookup(responses, template["$ref"])
            if "add" in template:
                value = value + template["add"]
            shown = {k: v for k, v in template.items() if k != "value"}
            shown["value"] = value
            return shown, value
        shown, plain = {}, {}
        for k, v in template.items():
            shown[k], plain[k] = resolve(v, responses, scram)
        return shown, plain
    if isinstance(template, list):
        pairs = [resolve(v, responses, scram) for v in template]
        return [p[0] for p in pairs], [p[1] for p in pairs]
    return template, template


PATH_PART = re.compile(r"\[[^\]]*\]|[^.\[]+")


def path_values(node, path):
    """The values at a dotted path; "*" matches every element of a list, and
    "[field=value]" the elements whose field has that value (as text; the value may
    hold dots)."""
    nodes = [node]
    for p in PATH_PART.findall(path):
        nxt = []
        for n in nodes:
            if p.startswith("[") and isinstance(n, list):
                field, _, want = p[1:-1].partition("=")
                nxt.extend(e for e in n if isinstance(e, dict) and field in e and str(e[field]) == want)
            elif p == "*" and isinstance(n, list):
                nxt.extend(n)
            elif isinstance(n, list) and p.lstrip("-").isdigit() and -len(n) <= int(p) < len(n):
                nxt.append(n[int(p)])
            elif isinstance(n, dict) and p in n:
                nxt.append(n[p])
        nodes = nxt
    return nodes


def condition_holds(cond, response):
    """Every value at cond["path"] satisfies it (and there is at least one)."""
    if response is None or "closed" in response or "decode_error" in response:
        return False
    values = path_values(response, cond["path"])
    if "count" in cond:
        return len(values) == cond["count"]
    if not values:
        return False
    if "equals" in cond:
        return all(v == cond["equals"] for v in values)
    if "not_equals" in cond:
        return all(v != cond["not_equals"] for v in values)
    if "in" in cond:
        return all(v in cond["in"] for v in values)
    if "not_in" in cond:
        return all(v not in cond["not_in"] for v in values)
    raise RecordingError(f"bad until condition {cond!r}")


def apply_keep(keep, response):
    """Drop list entries that belong to other scenarios (a listing of every group or
    transaction in the broker): keep = {"path": "groups", "field": "group_id",
    "prefix": "..."}; the path may use "*"."""
    head, _, last = keep["path"].rpartition(".")
    parents = path_values(response, head) if head else [response]
    for parent in parents:
        if isinstance(parent, dict) and isinstance(parent.get(last), list):
            parent[last] = [e for e in parent[last]
                            if str(e.get(keep["field"], "")).startswith(keep["prefix"])]


# --- SCRAM (RFC 5802) as a client does it ------------------------------------------
# A scenario's client-first message is fixed (its nonce is the client's choice); the
# server-first answer holds the broker's random nonce, so the client-final request is
# computed on every run ({"$scram_final": {"first": STEP, "user", "password",
# "mechanism", "client_nonce"[, "tamper": "nonce" | "proof"]}}), and the answers are
# recorded in a form that holds on every run ("scram": "server-first" or
# "server-final" on the step): the broker's nonce part and its signature are checked
# here, then written as what was found.

class Scram:
    HASHES = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}

    def __init__(self):
        self.server_first = {}                    # step id -> the server-first text as sent
        self.pending = None                       # the v= the last client-final should get

    def client_final(self, spec):
        h = self.HASHES[spec["mechanism"]]
        first = self.server_first.get(spec["first"])
        if first is None:                         # the client-first failed: the broker closes
            self.pending = None
            return b"c=biws,r=" + spec["client_nonce"].encode() + b",p="
        attrs = dict(kv.split("=", 1) for kv in first.split(",") if "=" in kv)
        salted = hashlib.pbkdf2_hmac(h, spec["password"].encode(), base64.b64decode(attrs["s"]), int(attrs["i"]))
        client_key = hmac.new(salted, b"Client Key", h).digest()
        nonce = attrs["r"] + ("x" if spec.get("tamper") == "nonce" else "")
        without_proof = f"c=biws,r={nonce}"
        auth = f"n={spec['user']},r={spec['client_nonce']},{first},{without_proof}".encode()
        proof = bytes(a ^ b for a, b in zip(client_key, hmac.new(hashlib.new(h, client_key).digest(), auth,
                                                                  h).digest()))
        if spec.get("tamper") == "proof":
            proof = bytes([proof[0] ^ 1]) + proof[1:]
        self.pending = base64.b64encode(hmac.new(hmac.new(salted, b"Server Key", h).digest(), auth,
                                                 h).digest()).decode()
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()

    def normalise(self, role, record, response):
        """Keep the server-first text for the next step; record the checked form."""
        data = response.get("auth_bytes") if isinstance(response, dict) else None
        if not isinstance(data, dict) or "$hex" not in data or not data["$hex"]:
            return
        text = bytes.fromhex(data["$hex"]).decode("utf-8", "replace")
        if role == "server-first":
            self.server_first[record["step"]] = text
            attrs = dict(kv.split("=", 1) for kv in text.split(",") if "=" in kv)
            nonce = record.get("scram_client_nonce", "")
            ours = attrs.get("r", "").startswith(nonce) and len(attrs.get("r", "")) > len(nonce)
            response["auth_bytes"] = {"$scram": "r=%s+(the broker's part),s=%s,i=%s" % (
                nonce, attrs.get("s"), attrs.get("i")) if ours else "r=(not the client's nonce) " + text}
        elif role == "server-final":
            verified = self.pending is not None and text == "v=" + self.pending
            response["auth_bytes"] = {"$scram": "v=(the server signature verifies)" if verified else text}


# --- connections ----------------------------------------------------------------

class Closed(Exception):
    pass


class Connection:
    def __init__(self, bootstrap, tls=None):
        self.bootstrap = bootstrap
        self.tls = tls                           # an ssl.SSLContext for SSL and SASL_SSL listeners
        self.sock = None
        self.correlation_id = 0
        self.pending = collections.deque()      # (correlation_id, step dict)

    def open(self):
        host, port = self.bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=STEP_TIMEOUT_S)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self.tls is not None:
            self.sock = self.tls.wrap_socket(self.sock, server_hostname=host)

    def close(self):
        if self.sock:
            self.sock.close()
        self.sock = None

    def send(self, spec, version, body_version, msg, raw_body=None):
        """Send one request: msg encoded as body_version, or raw_body (bytes) as it is."""
        if self.sock is None:
            self.open()
        self.correlation_id += 1
        self.sock.sendall(request_frame(spec, version, body_version, self.correlation_id, msg, raw_body))
        return self.correlation_id

    def recv(self):
        """The next response frame, without its size (header and body)."""
        try:
            return dk.recv_exactly(self.sock, dk.I32.unpack(dk.recv_exactly(self.sock, 4))[0])
        except socket.timeout:
            raise RecordingError("no answer within %.0f s (to %s)" % (STEP_TIMEOUT_S, self.pending[0][1]["step"] if self.pending else "?")) from None
        except (EOFError, ConnectionResetError):
            raise Closed() from None


def request_frame(spec, version, body_version, correlation_id, msg, raw_body=None):
    """dk.encode_request's frame of msg, with what a step may change: the header says
    `version` while the body (and the header's flexibility) is body_version's (a version
    the broker does not know, KIP-511), and raw_body's bytes take the place of the
    encoded body (a request that does not decode)."""
    if raw_body is not None:
        msg = dk.Msg()
    frame = dk.encode_request(spec, body_version, correlation_id, msg, CLIENT_ID)
    if raw_body is not None:
        encoded = sum(len(c) for c in dk.encode_body(spec, body_version, "request", msg).finish())
        frame = frame[:len(frame) - encoded] + raw_body
    if version != body_version:
        frame = frame[:6] + dk.I16.pack(version) + frame[8:]      # after the size and api_key
    return dk.I32.pack(len(frame) - 4) + frame[4:]


def split_response(spec, version, frame):
    """A response frame (without its size) -> (correlation id, body): header v0, or v1
    with tagged fields (dk.response_header_flexible: never for ApiVersions)."""
    r = dk.Reader(frame)
    correlation_id = r.fixed(dk.I32)
    if dk.response_header_flexible(spec, version):
        dk.skip_tagged_fields(r)
    return correlation_id, frame[r.pos:]


# --- running a scenario -----------------------------------------------------------

# What a step may carry besides its request, kept as it is in its record (and so
# given back to the Runner by replay.py).
STEP_OPTIONS = ("nowait", "delay_ms", "until", "keep", "retry", "listener", "scram", "scram_client_nonce",
                "repeat")
# A "repeat" step's requests go out in chunks of this many, each chunk in one write,
# and then its answers are read (the broker handles one request of a connection at a
# time, in order, so the chunk only saves the round trips).
REPEAT_CHUNK = 1000


def tls_listener_names(settings):
    """Listener names that settings' listener.security.protocol.map makes SSL or SASL_SSL."""
    from realkafka import protocol_map
    return {n for n, protocol in protocol_map(settings).items() if protocol in ("SSL", "SASL_SSL")}


class Runner:
    """Runs steps against one broker. Used by the recorder and by replay.
    bootstrap: host:port, or {listener name: host:port} for scenarios whose
    steps name the listener their connection goes to ("listener": "SASL_PLAINTEXT").
    settings: the scenario's broker settings; the listeners its protocol map makes
    SSL or SASL_SSL are reached over TLS, trusting certs.RECORDING_CA."""

    def __init__(self, bootstrap, settings=None):
        self.tls_listeners = tls_listener_names(settings or {})
        self.bootstraps = bootstrap if isinstance(bootstrap, dict) else {"PLAINTEXT": bootstrap}
        self.bootstrap = self.bootstraps["PLAINTEXT"]
        self.conns = {}
        self.responses = {}                       # step id -> JSON response
        self.waiting = {}                         # step id -> (conn, record)
        self.scram = Scram()

    def conn(self, n, listener=None):
        if n not in self.conns:
            where = self.bootstraps.get(listener or "PLAINTEXT")
            if where is None:
                raise RecordingError(f"connection {n}: no listener {listener} (have {sorted(self.bootstraps)})")
            tls = None
            if (listener or "PLAINTEXT") in self.tls_listeners:
                from certs import recording_client_context
                tls = recording_client_context()
            self.conns[n] = Connection(where, tls)
        return self.conns[n]

    def close(self):
        for c in self.conns.values():
            c.close()

    def _read_answer(self, conn):
        """Read the next answer on conn and attach it to its step record."""
        corr, record = conn.pending[0]
        try:
            frame = conn.recv()
        except Closed:
            # every request still pending on this connection is unanswered
            for _, rec in conn.pending:
                rec["response"] = {"closed": True}
                self.responses[rec["step"]] = rec["response"]
                self.waiting.pop(rec["step"], None)
            conn.pending.clear()
            conn.close()
            return
        conn.pending.popleft()
        spec = api_spec(record["api"])
        version = record.get("decode_version", record["version"])
        got, body = split_response(spec, version, frame)
        if got != corr:
            raise RecordingError(f"step {record['step']}: correlation id {got}, expected {corr}")
        try:
            record["response"] = decode_response(spec, version, body)
        except dk.ProtocolError as e:
            record["response"] = {"decode_error": str(e), "raw": {"$hex": body.hex()}}
        if "keep" in record:
            apply_keep(record["keep"], record["response"])
        if "scram" in record:
            self.scram.normalise(record["scram"], record, record["response"])
        self.responses[record["step"]] = record["response"]
        self.waiting.pop(record["step"], None)

    def await_step(self, step_id):
        while step_id in self.waiting:
            conn = self.waiting[step_id][0]
            self._read_answer(conn)

    def send_step(self, step, template=None):
        """Send one request step; -> its record (response filled unless nowait)."""
        spec = api_spec(step["api"])
        version = step["v"]
        body_version = step.get("body_version", version)
        template = step.get("req", {}) if template is None else template
        for dep in find_refs(template):
            self.await_step(dep)
        shown, plain = resolve(template, self.responses, self.scram)
        raw_body = bytes.fromhex(step["body_hex"]) if "body_hex" in step else None
        msg = msg_from_json(spec.request, plain) if raw_body is None else None
        record = {"step": step["id"], "conn": step.get("conn", 1), "api_key": spec.key,
                  "api": spec.name, "version": version}
        if "body_version" in step:
            record["body_version"] = body_version
        if "decode_version" in step:
            record["decode_version"] = step["decode_version"]
        for k in STEP_OPTIONS:
            if k in step:
                record[k] = step[k]
        record["request"] = shown
        if raw_body is not None:
            record["body_hex"] = step["body_hex"]
            if "note" in step:
                record["note"] = step["note"]
        conn = self.conn(record["conn"], step.get("listener"))
        if step.get("delay_ms"):
            time.sleep(step["delay_ms"] / 1000)
        try:
            corr = conn.send(spec, version, body_version, msg, raw_body)
        except (BrokenPipeError, ConnectionResetError):
            conn.close()
            record["response"] = {"closed": True, "on_send": True}
            self.responses[record["step"]] = record["response"]
            return record
        conn.pending.append((corr, record))
        self.waiting[record["step"]] = (conn, record)
        if not step.get("nowait"):
            self.await_step(record["step"])
        return record

    def send_repeated(self, step, template=None):
        """A "repeat" step: the same request step["repeat"] times on its connection,
        pipelined in chunks; -> its record, with the last answer as "response" and
        "repeat_error_codes": how many answers had each error code."""
        if any(k in step for k in ("until", "retry", "nowait", "body_hex", "body_version")):
            raise RecordingError(f"step {step['id']}: repeat goes with none of until, retry, nowait, "
                                 f"body_hex, body_version")
        spec = api_spec(step["api"])
        version = step["v"]
        template = step.get("req", {}) if template is None else template
        for dep in find_refs(template):
            self.await_step(dep)
        shown, plain = resolve(template, self.responses, self.scram)
        msg = msg_from_json(spec.request, plain)
        record = {"step": step["id"], "conn": step.get("conn", 1), "api_key": spec.key,
                  "api": spec.name, "version": version}
        for k in STEP_OPTIONS:
            if k in step:
                record[k] = step[k]
        record["request"] = shown
        conn = self.conn(record["conn"], step.get("listener"))
        while conn.pending:                       # what was pipelined before on this connection
            self._read_answer(conn)
        if step.get("delay_ms"):
            time.sleep(step["delay_ms"] / 1000)
        if conn.sock is None:
            conn.open()
        frame = request_frame(spec, version, version, 0, msg)
        head, tail = frame[:8], frame[12:]      # size, api key, version | correlation id | the rest
        codes = collections.Counter()
        last, left = None, int(step["repeat"])
        while left > 0 and last != {"closed": True}:
            first = conn.correlation_id + 1
            n = min(REPEAT_CHUNK, left)
            conn.correlation_id += n
            try:
                conn.sock.sendall(b"".join(head + dk.I32.pack(first + i) + tail for i in range(n)))
            except (BrokenPipeError, ConnectionResetError):
                last = {"closed": True}
                break
            for i in range(n):
                try:
                    got, body = split_response(spec, version, conn.recv())
                except Closed:
                    last = {"closed": True}
                    break
                if got != first + i:
                    raise RecordingError(f"step {step['id']}: correlation id {got}, expected {first + i}")
                try:
                    last = decode_response(spec, version, body)
                except dk.ProtocolError as e:
                    last = {"decode_error": str(e), "raw": {"$hex": body.hex()}}
                codes["decode_error" if "decode_error" in last else str(last.get("error_code"))] += 1
            left -= n
        if last == {"closed": True}:
            conn.close()
            codes["closed"] += 1
        record["response"] = last
        record["repeat_error_codes"] = dict(sorted(codes.items()))
        self.responses[record["step"]] = last
        return record

    def run_step(self, step, template=None):
        """-> the step's record (or None for steps that leave none)."""
        if "sleep_ms" in step:
            time.sleep(step["sleep_ms"] / 1000)
            return {"sleep_ms": step["sleep_ms"]}
        if "await" in step:
            self.await_step(step["await"])
            return None
        if "repeat" in step:
            return self.send_repeated(step, template)
        if "retry" in step:
            # a client's retry loop: the first answer is "response"; if it matched the
            # retry condition, the request is re-sent until it does not, and the last
            # answer is "final_response"
            cond = step["retry"]
            record = self.send_step(dict(step, nowait=False), template)
            deadline = time.time() + cond.get("timeout_ms", 15000) / 1000
            final = record.get("response")
            while condition_holds(cond, final) and time.time() < deadline:
                time.sleep(cond.get("interval_ms", 50) / 1000)
                final = self.send_step(dict(step, nowait=False), template).get("response")
            record["final_response"] = final
            self.responses[record["step"]] = final
            return record
        if "until" in step:
            cond = step["until"]
            deadline = time.time() + cond.get("timeout_ms", 15000) / 1000
            while True:
                record = self.send_step(dict(step, nowait=False), template)
                if condition_holds(cond, record.get("response")) or time.time() > deadline:
                    record["until_met"] = condition_holds(cond, record.get("response"))
                    return record
                time.sleep(cond.get("interval_ms", 100) / 1000)
        return self.send_step(step, template)

    def finish(self):
        for step_id in list(self.waiting):
            self.await_step(step_id)


def step_ids(steps):
    seen = set()
    for i, s in enumerate(steps):
        if "api" in s:
            s.setdefault("id", f"step{i}")
            if s["id"] in seen:
                raise RecordingError(f"two steps named {s['id']}")
            seen.add(s["id"])
    return steps


def finalized_features(bootstrap):
    """{feature: level} the broker finalizes now (ApiVersions v4 on a connection of its
    own; a feature at level 0 is not listed), or None if it does not answer so."""
    runner = Runner(bootstrap)
    try:
        rec = runner.run_step({"id": "features", "api": "ApiVersions", "v": 4, "req": {
            "client_software_name": "doze-conformance", "client_software_version": "1.0"}})
    except (OSError, RecordingError, Closed):
        return None
    finally:
        runner.close()
    resp = rec.get("response") or {}
    if resp.get("error_code") != 0 or not isinstance(resp.get("finalized_features"), list):
        return None
    return {f["name"]: f["max_version_level"] for f in resp["finalized_features"]}


def record_scenario(name, bootstrap, broker=KAFKA_BROKER):
    import scenarios
    sc = scenarios.get(name)
    steps = step_ids(copy.deepcopy(sc["steps"]))
    features = finalized_features(bootstrap)
    runner = Runner(bootstrap, sc.get("broker_settings", {}))
    records = []
    try:
        for step in steps:
            rec = runner.run_step(step)
            if rec is not None:
                records.append(rec)
        runner.finish()
    finally:
        runner.close()
    return {
        "scenario": name,
        "broker": broker,
        "recorded_at": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "description": sc.get("description", ""),
        "broker_settings": sc.get("broker_settings", {}),
        "doze_settings": sc.get("doze_settings", {}),
        "finalized_features": features,
        "known_differences": sc.get("known_differences", {}),
        "steps": records,
    }


def save(recording, out_dir=RECORDINGS):
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, recording["scenario"] + ".json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(recording, f, indent=1, sort_keys=False)
        f.write("\n")
    return path


def main(argv=None):
    import scenarios
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("names", nargs="*", help="scenario names (see --list)")
    ap.add_argument("--all", action="store_true", help="every scenario")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--bootstrap", help="record against this broker (must be started with the "
                    "scenario's broker_settings); default: start a real Kafka 4.3.1 per settings")
    ap.add_argument("--out", default=RECORDINGS, help="directory for the recordings")
    ap.add_argument("--broker", default=KAFKA_BROKER, help="the broker's name, for the recording")
    a = ap.parse_args(argv)
    if a.list:
        for n in scenarios.names():
            print(n)
        return 0
    names = scenarios.names() if a.all else a.names
    if not names:
        ap.error("name scenarios, or --all")
    for n in names:
        scenarios.get(n)
    failed = []

    def run(names_, bootstrap):
        for n in names_:
            t0 = time.time()
            try:
                rec = record_scenario(n, bootstrap, a.broker)
            except Exception as e:                     # noqa: BLE001
                failed.append(n)
                print(f"{n}: FAILED: {type(e).__name__}: {e}", file=sys.stderr)
                continue
            path = save(rec, a.out)
            print(f"{n}: {len(rec['steps'])} steps in {time.time() - t0:.1f}s -> "
                  f"{os.path.relpath(path)}", flush=True)

    if a.bootstrap:
        run(names, a.bootstrap)
    else:
        from realkafka import RealKafka
        groups = collections.OrderedDict()
        for n in names:
            sc = scenarios.get(n)
            key = json.dumps(sc.get("broker_settings", {}), sort_keys=True)
            groups.setdefault((key, n if sc.get("own_broker") else None), []).append(n)
        for (key, _), group in groups.items():
            props = json.loads(key)
            print(f"starting Apache Kafka 4.3.1 with {props or 'the default settings'}", flush=True)
            with RealKafka(extra_props={k: str(v) for k, v in props.items()}) as k:
                run(group, k.bootstraps)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
