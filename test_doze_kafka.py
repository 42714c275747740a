"""Tests for doze_kafka. Standard library + pytest only:

    python3 -m pytest -q test_doze_kafka.py

The sections are numbered and titled as doze_kafka.py's chapters are, so
"§7" means storage in both files, and a test stands in the section
of the chapter whose code it is mainly about. A section opens with the helpers
only it uses (section 0 holds those many sections use), then its tests. After
§24, lettered sections hold what belongs to no one chapter:

  0. Fixtures                  start_broker, RawClient, make_batch, FakeClock, loop_passes, wait_until;
                               Txn and the other clients' verbs; the SASL clients
  1. Imports                   a log line stays one line
  2. Config                    settings as Kafka reads them; server.properties as Java reads it; listeners
  3. Protocol vocabulary       ErrorCode values match Kafka's table
  4. Wire codec                golden bytes; varint vectors; truncated input -> ProtocolError
  5. Schemas                   parser errors carry line numbers; every API round-trips at every version
  6. Record batches            CRC-32C check value and reference; batch validation
  7. Storage                   append/read, index, roll, retention, log start, torn tail; failing disks
  8. meta.db and the topics    meta.db's group commit, its failures at start
  9. Coordinators              producer state; the group coordinator, no sockets
  10. Log compaction           the cleaner's rules, its pass on real segments, a crash mid-swap
  11. Consumer group protocol  KIP-848: assignors, reconciliation, conversions
  12. Transactions             the transaction coordinator, no sockets
  13. Security                 SASL PLAIN and SCRAM; the authorizer; every API's ACL checks
  14. Requests, the data path  Produce, Fetch, ListOffsets, Metadata, ApiVersions, DeleteRecords, ...
  15. Group and txn APIs       groups, offsets, FindCoordinator, InitProducerId, transactions, on the wire
  16. Config resources         DescribeConfigs, AlterConfigs, IncrementalAlterConfigs
  17. Administration APIs      CreateTopics, DeleteTopics, ACLs, CreatePartitions, SCRAM users
  18. Connections              pipelining, bad input, TLS, dispatch, limits, listeners, faults
  19. Console: what it shows   pages and their JSON twins, the browser, what each viewer may see
  20. Console: HTTP, login     its safety, login and sessions, event streams, its limits
  21. The loop                 the protocol trace, the timers, a bug in an event, the directory's lock
  22. Embedding doze           running(), Embedded, the control endpoint, the fixtures
  23. Demo                     every step of the demo, each outcome Kafka's; the README's walkthrough
  24. CLI                      --apis, bad flags, --add-scram, demo, --trace, the file run again as a module
  B. Scenarios                 kill -9, restart, torn tails, power cuts, a crash at every point
  C. Conformance               Kafka 4.3.1's recordings replayed; conformance/fuzz.py, bounded
  D. The book                  doze_kafka.py's shape, measured by conformance/book.py
  E. The README                its lists (settings, APIs, .ci/run) against the code; its links and sections

The broker's state belongs to its loop: a test reads it through
broker.run_in_loop(...), and waits with loop_passes(broker) or wait_until(),
never a fixed sleep. A test marked "# BUG:" exposes a broker bug and fails
until doze_kafka.py is fixed.
"""

import base64
import collections
import contextlib
import errno
import glob
import hashlib
import hmac
import html
import http.client
import json
import logging
import os
import random
import re
import select
import shlex
import shutil
import socket
import ssl
import sqlite3
import struct
import subprocess
import sys
import textwrap
import threading
import time
import urllib.parse
import zlib

import pytest

import doze_kafka as doze
from doze_kafka import ApiKey, ErrorCode, Msg


###############################################################################
# 0. FIXTURES -- brokers, clients, batches and a clock, used across the sections
###############################################################################

SOCKET_TIMEOUT_S = 5            # a hang fails one test instead of the run


@pytest.fixture(scope="session", autouse=True)
def _cache_under_conformance(request):
    """pytest's cache (--lf, --nf) in conformance/.pytest_cache: the top level holds
    only the design card's files, and there is no pytest config file to say so."""
    cache = getattr(request.config, "cache", None)
    if cache is not None and hasattr(cache, "_cachedir"):
        cache._cachedir = type(cache._cachedir)(os.path.dirname(os.path.abspath(__file__)),
                                                "conformance", ".pytest_cache")


class FakeClock:
    """A clock for Config(clock=...): seconds, moved only by advance()."""

    def __init__(self, start_s=1_700_000_000.0):
        self.now = start_s

    def __call__(self):
        return self.now

    def advance(self, ms):
        self.now += ms / 1000


def loop_passes(broker, n=2):
    """A barrier instead of a sleep: returns once the broker's loop has made n
    whole passes from now. run_in_loop's call is served in a pass after its
    socket events and before its timers and group commit, so the second
    call's return proves a whole pass ran after the first: the frames sent
    before it handled, the timers due on the clock (a FakeClock moved)
    fired, the group commit done."""
    broker.waker.wake()
    for _ in range(n):
        broker.run_in_loop(lambda: None)


def wait_until(check, timeout_s=5, poll_s=0.02):
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        if check():
            return True
        time.sleep(poll_s)             # polling: what it waits for is the check, not the time
    return False


# --- Test-side record batches (written without doze's build_batch) -----------

def uleb(u):
    out = bytearray()
    while True:
        byte = u & 0x7F
        u >>= 7
        if u:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def zigzag(n):
    """Signed varint bytes (zig-zag, then LEB128), written independently of doze."""
    u = (n << 1) ^ (n >> 63)
    return uleb(u)


def make_batch(values, timestamps=None, producer_id=-1, producer_epoch=-1, base_sequence=-1,
               attributes=0, leader_epoch=0, keys=None):
    """An uncompressed RecordBatch v2 as a producer would send it (base offset 0)."""
    timestamps = list(timestamps) if timestamps else [1_000] * len(values)
    body = b""
    for i, value in enumerate(values):
        key = keys[i] if keys else None
        rec = (b"\x00" + zigzag(timestamps[i] - timestamps[0]) + zigzag(i)
               + (zigzag(-1) if key is None else zigzag(len(key)) + key)
               + zigzag(len(value)) + value + zigzag(0))
        body += zigzag(len(rec)) + rec
    tail = struct.pack(">hiqqqhii", attributes, len(values) - 1, timestamps[0], max(timestamps),
                       producer_id, producer_epoch, base_sequence, len(values)) + body
    return struct.pack(">qiibI", 0, len(tail) + 9, leader_epoch, 2, doze.crc32c(tail)) + tail


def _read_varint(buf, pos):
    result = shift = 0
    while True:
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return (result >> 1) ^ -(result & 1), pos
        shift += 7


def split_batches(data):
    """Cut fetched records into whole batches (a trailing partial one is dropped)."""
    out, pos = [], 0
    while pos + 12 <= len(data):
        size = 12 + struct.unpack_from(">i", data, pos + 8)[0]
        if pos + size > len(data):
            break
        out.append(bytes(data[pos:pos + size]))
        pos += size
    return out


def batch_records(batch):
    """[(offset, key, value, timestamp)] of one uncompressed batch."""
    base_offset, = struct.unpack_from(">q", batch, 0)
    base_ts, = struct.unpack_from(">q", batch, 27)
    count, = struct.unpack_from(">i", batch, 57)
    out, pos = [], 61
    for _ in range(count):
        length, pos = _read_varint(batch, pos)
        end = pos + length
        pos += 1
        ts_delta, pos = _read_varint(batch, pos)
        off_delta, pos = _read_varint(batch, pos)
        klen, pos = _read_varint(batch, pos)
        key = None if klen < 0 else batch[pos:pos + klen]
        pos += max(klen, 0)
        vlen, pos = _read_varint(batch, pos)
        value = None if vlen < 0 else batch[pos:pos + vlen]
        out.append((base_offset + off_delta, key, value, base_ts + ts_delta))
        pos = end
    return out


def header_of(batch):
    return doze.read_batch_header(batch)


# --- A broker on an ephemeral port, and a client of it ------------------------------

class RawClient(doze.Client):
    """doze's own Client (requests by doze.encode_request, answers by
    doze.decode_response), with the verbs the tests use. A test that builds
    its own bytes takes a frame from RawClient.encode.
    client.call(ApiKey.METADATA, 12, topics=None)."""

    def __init__(self, port, timeout=SOCKET_TIMEOUT_S, client_id="doze-test"):
        super().__init__(port, client_id=client_id, timeout=timeout)

    @staticmethod
    def encode(api_key, version, correlation_id, /, client_id="doze-test", **fields):
        """One request frame: size, header v1 (v2 for flexible versions), body."""
        return doze.encode_request(doze.HANDLERS[api_key][0], version, correlation_id, Msg(**fields), client_id)

    def is_closed_by_broker(self, wait_s=SOCKET_TIMEOUT_S):
        """True once the broker has closed this connection (EOF or reset)."""
        self.sock.settimeout(wait_s)
        try:
            while True:
                if not self.sock.recv(4096):
                    return True
        except (ConnectionResetError, BrokenPipeError):
            return True
        except socket.timeout:
            return False

    # --- verbs over call() ---
    def create_topics(self, *topics, validate_only=False, version=7):
        """topics: (name, partitions, {config: value}) tuples -> response topics."""
        return self.call(ApiKey.CREATE_TOPICS, version, topics=[
            Msg(name=n, num_partitions=p, replication_factor=-1,
                configs=[Msg(name=k, value=v) for k, v in (c or {}).items()])
            for n, p, c in topics], timeout_ms=5000, validate_only=validate_only).topics

    def create_topic(self, name, partitions=1, **configs):
        configs = {k.replace("_", "."): str(v) for k, v in configs.items()}
        [res] = self.create_topics((name, partitions, configs))
        assert res.error_code == 0, res
        return res

    def produce(self, topic, partition, batch, acks=-1, version=9):
        """-> the partition response (None for acks=0)."""
        if acks == 0:
            self.send(ApiKey.PRODUCE, version, acks=0, timeout_ms=5000, topic_data=[
                Msg(name=topic, partition_data=[Msg(index=partition, records=batch)])])
            return None
        resp = self.call(ApiKey.PRODUCE, version, acks=acks, timeout_ms=5000, topic_data=[
            Msg(name=topic, partition_data=[Msg(index=partition, records=batch)])])
        [t] = resp.responses
        [p] = t.partition_responses
        return p

    def fetch(self, topic, partition, offset, max_bytes=1 << 20, partition_max_bytes=1 << 20,
              max_wait_ms=0, min_bytes=0, version=12):
        resp = self.call(ApiKey.FETCH, version, max_wait_ms=max_wait_ms, min_bytes=min_bytes,
                         max_bytes=max_bytes, topics=[Msg(topic=topic, partitions=[
                             Msg(partition=partition, fetch_offset=offset,
                                 partition_max_bytes=partition_max_bytes)])])
        [t] = resp.responses
        [p] = t.partitions
        p.records = bytes(p.records) if p.records is not None else None
        return p

    def values(self, topic, partition, offset=0):
        """[(offset, value)] of every record from offset to the high watermark."""
        out = []
        while True:
            p = self.fetch(topic, partition, offset)
            assert p.error_code == 0, p
            batches = split_batches(p.records)
            if not batches:
                return out
            for batch in batches:
                out += [(o, v) for o, _, v, _ in batch_records(batch) if o >= offset]
            offset = out[-1][0] + 1 if out else offset

    def list_offset(self, topic, partition, timestamp, version=None):
        resp = self.call(ApiKey.LIST_OFFSETS, version, replica_id=-1, isolation_level=0,
                         topics=[Msg(name=topic, partitions=[
                             Msg(partition_index=partition, timestamp=timestamp)])])
        return resp.topics[0].partitions[0]

    def metadata(self, topics, version=12, allow_auto_topic_creation=True):
        wanted = None if topics is None else [Msg(name=t) for t in topics]
        return self.call(ApiKey.METADATA, version, topics=wanted,
                         allow_auto_topic_creation=allow_auto_topic_creation)


@pytest.fixture
def start_broker(tmp_path):
    """start_broker(settings=None, files=None, clock=None) -> a running Broker on
    127.0.0.1:<ephemeral port>, data in tmp_path/"data". Everything it starts is
    stopped at teardown. Call it again (after broker.stop()) to restart on the
    same directory."""
    running = []

    def start(settings=None, files=None, clock=None):
        config = doze.Config(settings, data_dir=tmp_path / "data", host="127.0.0.1", port=0,
                             clock=clock)
        broker = doze.Broker(config, files=files)
        running.append((broker, broker.serve_in_thread("doze")))
        return broker

    yield start
    for broker, thread in reversed(running):
        broker.stop()
        thread.join(timeout=5)
        assert not thread.is_alive(), "broker loop did not stop within 5 s"


def stop(broker, clean=True):
    """Stop a broker started by start_broker and wait for its loop to end."""
    broker.stop(clean=clean)
    assert broker.stopped.wait(5), "broker loop did not stop within 5 s"


@pytest.fixture
def broker(start_broker):
    return start_broker()


@pytest.fixture
def client(broker):
    with RawClient(broker.port) as c:
        yield c


SOFTWARE = dict(client_software_name="doze-test", client_software_version="1.0")


@pytest.fixture
def bystander(broker):
    """A second client, connected before the misbehaving one, that must notice nothing."""
    with RawClient(broker.port) as c:
        assert c.call(ApiKey.API_VERSIONS, 3, **SOFTWARE).error_code == 0
        yield c
        assert c.call(ApiKey.API_VERSIONS, 3, **SOFTWARE).error_code == 0
        assert c.metadata(None).brokers[0].node_id == 1


# --- What clients say, spoken by hand: ids, groups, offsets, transactions, configs ---

def init_producer_id(client, version=5):
    resp = client.call(ApiKey.INIT_PRODUCER_ID, version, transactional_id=None,
                       transaction_timeout_ms=60000)
    assert resp.error_code == 0
    return resp.producer_id, resp.producer_epoch


def send_join(client, group, member_id="", instance=None, protocols=(("range", b"sub"),),
              session_ms=10000, protocol_type="consumer", version=7):
    return client.send(ApiKey.JOIN_GROUP, version, group_id=group, session_timeout_ms=session_ms,
                       rebalance_timeout_ms=session_ms, member_id=member_id,
                       group_instance_id=instance, protocol_type=protocol_type,
                       protocols=[Msg(name=n, metadata=m) for n, m in protocols])


def receive(client, key, sent):
    cid, version = sent
    got, msg = client.receive(key, version)
    assert got == cid
    return msg


def join(client, group, **kw):
    """A full first join: MEMBER_ID_REQUIRED, then the join with that id (KIP-394)."""
    first = receive(client, ApiKey.JOIN_GROUP, send_join(client, group, **kw))
    if first.error_code != ErrorCode.MEMBER_ID_REQUIRED:
        return first
    kw["member_id"] = first.member_id
    return receive(client, ApiKey.JOIN_GROUP, send_join(client, group, **kw))


def send_sync(client, group, generation, member_id, assignments=None, instance=None):
    return client.send(ApiKey.SYNC_GROUP, 5, group_id=group, generation_id=generation,
                       member_id=member_id, group_instance_id=instance, protocol_type="consumer",
                       protocol_name="range", assignments=[
                           Msg(member_id=m, assignment=a) for m, a in (assignments or {}).items()])


def sync(client, group, generation, member_id, assignments=None, instance=None):
    return receive(client, ApiKey.SYNC_GROUP,
                   send_sync(client, group, generation, member_id, assignments, instance))


def commit_offsets(client, group, offsets, generation=-1, member_id="", version=8):
    r = client.call(ApiKey.OFFSET_COMMIT, version, group_id=group, generation_id_or_member_epoch=generation,
                    member_id=member_id, topics=[
                        Msg(name=t, partitions=[Msg(partition_index=p, committed_offset=o,
                                                    committed_metadata="m")])
                        for (t, p), o in offsets.items()])
    return {(t.name, p.partition_index): p.error_code for t in r.topics for p in t.partitions}


def committed_offsets(client, group, tps, require_stable=False):
    r = client.call(ApiKey.OFFSET_FETCH, 7, group_id=group, require_stable=require_stable,
                    topics=[Msg(name=t, partition_indexes=[p for tt, p in tps if tt == t])
                            for t in dict.fromkeys(t for t, _ in tps)])
    return {(t.name, p.partition_index): (p.error_code, p.committed_offset)
            for t in r.topics for p in t.partitions}


class Txn:
    """A transactional producer spoken by hand over a RawClient."""

    def __init__(self, client, transactional_id, timeout_ms=60000, version=4):
        self.c, self.id = client, transactional_id
        r = client.call(ApiKey.INIT_PRODUCER_ID, version, transactional_id=transactional_id,
                        transaction_timeout_ms=timeout_ms)
        assert r.error_code == 0, r
        self.producer_id, self.epoch = r.producer_id, r.producer_epoch
        self.seq = {}

    def add(self, *tps, version=3):
        r = self.c.call(ApiKey.ADD_PARTITIONS_TO_TXN, version, transactional_id=self.id,
                        producer_id=self.producer_id, producer_epoch=self.epoch, topics=[
                            Msg(name=t, partitions=[p for tt, p in tps if tt == t])
                            for t in dict.fromkeys(t for t, _ in tps)])
        return {(t.name, p.partition_index): p.partition_error_code
                for t in r.results_by_topic for p in t.results_by_partition}

    def produce(self, topic, partition, values, epoch=None, version=9, seq=None):
        seq = self.seq.get((topic, partition), 0) if seq is None else seq
        batch = make_batch(values, producer_id=self.producer_id,
                           producer_epoch=self.epoch if epoch is None else epoch,
                           base_sequence=seq, attributes=doze.ATTR_TRANSACTIONAL)
        resp = self.c.call(ApiKey.PRODUCE, version, transactional_id=self.id, acks=-1, timeout_ms=5000,
                           topic_data=[Msg(name=topic, partition_data=[
                               Msg(index=partition, records=batch)])])
        part = resp.responses[0].partition_responses[0]
        if part.error_code == 0:
            self.seq[(topic, partition)] = seq + len(values)
        return part

    def whole(self, topic, partition, values, commit):
        """A whole transaction on one partition -> EndTxn's error code."""
        self.add((topic, partition))
        self.produce(topic, partition, values)
        return self.end(commit)

    def add_offsets(self, group, version=3):
        return self.c.call(ApiKey.ADD_OFFSETS_TO_TXN, version, transactional_id=self.id,
                           producer_id=self.producer_id, producer_epoch=self.epoch,
                           group_id=group).error_code

    def commit_offsets(self, group, offsets, version=3, generation=-1, member=""):
        r = self.c.call(ApiKey.TXN_OFFSET_COMMIT, version, transactional_id=self.id, group_id=group,
                        producer_id=self.producer_id, producer_epoch=self.epoch,
                        generation_id=generation, member_id=member, topics=[
                            Msg(name=t, partitions=[Msg(partition_index=p, committed_offset=o,
                                                        committed_metadata="")])
                            for (t, p), o in offsets.items()])
        return {(t.name, p.partition_index): p.error_code for t in r.topics for p in t.partitions}

    def end(self, commit, epoch=None, producer_id=None, version=3):
        return self.end_answer(commit, epoch, producer_id, version).error_code

    def end_answer(self, commit, epoch=None, producer_id=None, version=5):
        """EndTxn -> the answer; v5 (transaction version 2): its id and epoch are the producer's next."""
        r = self.c.call(ApiKey.END_TXN, version, transactional_id=self.id,
                        producer_id=self.producer_id if producer_id is None else producer_id,
                        producer_epoch=self.epoch if epoch is None else epoch, committed=commit)
        if version >= 5 and r.error_code == 0:
            self.producer_id, self.epoch, self.seq = r.producer_id, r.producer_epoch, {}
        return r


def fetch_isolated(client, topic, partition, offset=0, read_committed=True):
    """One Fetch v12 with an isolation level -> the partition response."""
    resp = client.call(ApiKey.FETCH, 12, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20,
                       isolation_level=1 if read_committed else 0, topics=[Msg(topic=topic, partitions=[
                           Msg(partition=partition, fetch_offset=offset, partition_max_bytes=1 << 20)])])
    part = resp.responses[0].partitions[0]
    part.records = bytes(part.records or b"")
    return part


def visible_values(client, topic, partition, read_committed=True, every_segment=False):
    """What a consumer sees: data records below the LSO (or HW), minus aborted
    transactions' records and control batches, as Java's consumer filters.
    One Fetch (one segment), or every_segment: fetches until the end."""
    part = fetch_isolated(client, topic, partition, 0, read_committed)
    batches, aborted_list = split_batches(part.records), list(part.aborted_transactions or [])
    while every_segment and batches:
        last = header_of(batches[-1])
        nxt = fetch_isolated(client, topic, partition, last.base_offset + last.last_offset_delta + 1,
                             read_committed)
        if not nxt.records:
            break
        batches += split_batches(nxt.records)
        aborted_list += nxt.aborted_transactions or []
    pending = sorted({(a.first_offset, a.producer_id) for a in aborted_list})
    aborting, out = set(), []                 # Java's consumer: the queue of aborted transactions
    for batch in batches:
        h = header_of(batch)
        while pending and pending[0][0] <= h.base_offset + h.last_offset_delta:
            aborting.add(pending.pop(0)[1])
        if h.attributes & doze.ATTR_CONTROL:
            if doze.control_type(batch) == doze.CONTROL_ABORT:
                aborting.discard(h.producer_id)
            continue
        if read_committed and h.attributes & doze.ATTR_TRANSACTIONAL and h.producer_id in aborting:
            continue
        out += [v for _, _, v, _ in batch_records(batch)]
    return out


def describe_txn(client, transactional_id):
    return client.call(ApiKey.DESCRIBE_TRANSACTIONS, 0,
                       transactional_ids=[transactional_id]).transaction_states[0]


def describe_configs(client, rtype, name, keys=None, version=4, synonyms=False):
    resp = client.call(ApiKey.DESCRIBE_CONFIGS, version, include_synonyms=synonyms, resources=[
        Msg(resource_type=rtype, resource_name=name, configuration_keys=keys)])
    [r] = resp.results
    return r


def config_map(result):
    return {c.name: (c.value, c.config_source) for c in result.configs}


# --- SASL clients --------------------------------------------------------------------

PLAIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
              'password="admin-secret" user_admin="admin-secret" user_alice="alice-secret";')


def sasl_settings(**more):
    settings = {"listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
                "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
                "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
                "connection.failed.authentication.delay.ms": 300}
    settings.update({k.replace("_", "."): v for k, v in more.items()})
    return settings


def sasl_port(broker):
    [port] = [b.listener.port for b in broker.listeners.bound if b.listener.protocol.startswith("SASL_")]
    return port


def add_scram_user(broker, user, password, mechanism="SCRAM-SHA-256", iterations=4096):
    broker.run_in_loop(lambda: broker.store.save_scram_credential(
        user, mechanism, doze.new_scram_credential(mechanism, password, iterations)))


def plain_token(user, password, authzid=""):
    return f"{authzid}\0{user}\0{password}".encode()


def sasl_authenticate(c, mechanism, tokens, handshake_version=1):
    """SaslHandshake, then each token in a SaslAuthenticate -> the answers."""
    h = c.call(ApiKey.SASL_HANDSHAKE, handshake_version, mechanism=mechanism)
    assert h.error_code == 0, h
    return [c.call(ApiKey.SASL_AUTHENTICATE, 2, auth_bytes=t) for t in tokens]


###############################################################################
# 1. IMPORTS
###############################################################################
# (and the log's filter, _OneLine: whatever a client names, a log line stays one line)

def test_server_client_text_cannot_break_a_log_line(client, caplog):
    """A config name (or group id, client id) with a newline is logged escaped, on one line."""
    caplog.set_level(logging.INFO, logger="doze_kafka")
    client.call(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, validate_only=False, resources=[Msg(
        resource_type=4, resource_name="", configs=[Msg(name="log#\n2026-12-01 ERROR forged", config_operation=0,
                                                         value="1")])])
    lines = [r.getMessage() for r in caplog.records if "forged" in r.getMessage()]
    assert lines and all("\n" not in line and "\\n" in line for line in lines)


###############################################################################
# 2. CONFIG -- doze's settings, a value read as Kafka reads it, server.properties, listeners
###############################################################################

PROPERTIES_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "conformance", "configs", "properties")


def properties_corpus():
    with open(os.path.join(PROPERTIES_DIR, "expected.json"), encoding="utf-8") as f:
        return sorted(json.load(f)["files"].items())


def settings_read_by_the_code():
    """Every broker setting name the code reads by a literal: config["x"],
    .settings["x"] / .settings.get("x"), a listener's get("x") (sasl_setup,
    tls_context), and the topic configs: config("x") / topic_config(..., "x")."""
    with open(doze.__file__, encoding="utf-8") as f:
        src = f.read()
    start = src.index("BROKER_DEFAULTS = {")
    src = src[:start] + src[src.index("\n}\n", start):]            # the table itself aside
    broker = set(re.findall(r'config\["([a-z0-9_.]+)"\]|settings(?:\.get\(|\[)"([a-z0-9_.]+)"', src))
    broker = {a or b for a, b in broker}
    broker |= set(re.findall(r'(?<![.\w])get\("([a-z][a-z0-9_]*\.[a-z0-9_.]+)"\)', src))   # a listener's get
    topic = set(re.findall(r'(?:\.config|config|topic_config\([^,()]+,)\s*\(?"([a-z0-9_.]+)"\)', src))
    return broker, topic


def test_config_every_setting_the_code_reads_is_one_the_start_log_says_doze_acts_on():
    """One answer to "does doze act on this setting?" (acts_on), and it is the
    code's: every setting the code reads is in it, every topic config it reads
    is in TOPIC_CONFIGS_USED (and every one listed there is read)."""
    broker, topic = settings_read_by_the_code()
    assert broker, "the scan found nothing: it is broken"
    assert {n for n in broker if not doze.acts_on(n)} == set()
    topic = {n for n in topic if n in doze.KAFKA_TOPIC_CONFIGS}
    assert topic == doze.TOPIC_CONFIGS_USED


def test_config_start_log_says_what_doze_does_with_each_setting(caplog):
    """Every setting Kafka has, given at start: no line if doze acts on it, else
    Kafka's and not acted on (INFO); a name neither knows is a WARNING with the
    nearest known name."""
    caplog.set_level(logging.INFO, logger="doze_kafka")
    for name in doze.KAFKA_BROKER_CONFIGS:
        note = doze.setting_note(name)
        assert (note is None) == doze.acts_on(name), name
        if note:
            assert note == (logging.INFO, f"setting {name}: Kafka's, accepted and described; doze does not act on it")
    assert doze.setting_note("log.retention.hours") is None                 # a synonym of retention.ms
    assert doze.setting_note("inter.broker.listener.name") is None           # checked at start
    assert doze.setting_note("log.flush.interval.messages")[0] == logging.INFO
    level, words = doze.setting_note("num.partition")
    assert level == logging.WARNING and words.endswith("did you mean num.partitions?")
    doze.Config({"num.partition": "3"})
    assert "setting num.partition: not a setting of Kafka 4.3.1 or doze; kept, not used; " \
           "did you mean num.partitions?" in caplog.text


def test_broker_settings_doze_does_not_act_on_are_logged_once(start_broker, caplog):
    caplog.set_level(logging.INFO, logger="doze_kafka")
    broker = start_broker({"log.flush.interval.messages": "10", "no.such.setting": "1"})
    assert "setting log.flush.interval.messages: Kafka's, accepted and described; doze does not act on it" \
        in caplog.text
    assert "setting no.such.setting: not a setting of Kafka 4.3.1 or doze" in caplog.text
    with RawClient(broker.port) as c:
        got = {e.name: e for e in describe_configs(c, 4, "1").configs}
        assert (got["log.flush.interval.messages"].value, got["log.flush.interval.messages"].config_source) \
            == ("10", 4)
    with pytest.raises(ValueError, match="Value must be at least 1"):
        doze.Config({"num.partitions": "0"})


@pytest.mark.parametrize("text, ok", [
    ("earliest", True), ("latest", True), ("none", False), ("by_duration", False),
    ("by_duration:PT1H", True), ("by_duration:p1dt2h3m4.5s", True), ("by_duration:-PT1H", False),
    ("by_duration:P", False), ("by_duration:PT", False), ("by_duration:P1DT", False),
    ("by_duration:PT-1S", False), ("by_duration:PT1H-30M", True), ("by_duration:-PT0S", True),
    ("Earliest", False)])
def test_share_auto_offset_reset_as_kafka_reads_it(text, ok):
    assert doze.share_offset_reset_ok(text) is ok


@pytest.mark.parametrize("name, java", properties_corpus(), ids=lambda x: x if isinstance(x, str) else "")
def test_config_properties_read_as_java_reads_them(name, java):
    """server.properties as java.util.Properties.load reads it (Kafka's
    Utils.loadProps): every corpus file against what Java 17 gave for it
    (expected.json, written only by conformance/configs/properties/check.py
    --record from Java's output): continuations, escapes, separators, comments."""
    with open(os.path.join(PROPERTIES_DIR, "corpus", name), "rb") as f:
        data = f.read()
    assert hashlib.sha256(data).hexdigest() == java["sha256"], "the corpus changed: record expected.json again"
    if "error" in java:
        with pytest.raises(ValueError, match="Malformed"):
            doze.read_java_properties(data)
    else:
        assert doze.read_java_properties(data) == java["props"]


def test_config_a_jaas_line_continued_as_kafkas_docs_write_it_starts_a_sasl_listener(tmp_path):
    """Kafka's docs write sasl.jaas.config over several lines ending in a
    backslash: read as Java reads it, the PLAIN users are all there."""
    path = tmp_path / "server.properties"
    path.write_bytes(b"listeners=PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0\n"
                     b"sasl.enabled.mechanisms=PLAIN\n"
                     b"num.partitions=\\\n    4\n"
                     b"listener.name.sasl_plaintext.plain.sasl.jaas.config="
                     b"org.apache.kafka.common.security.plain.PlainLoginModule required \\\n"
                     b'    username="admin" \\\n    password="admin-secret" \\\n'
                     b'    user_admin="admin-secret" \\\n    user_alice="alice-secret";\n')
    config = doze.Config.from_properties(str(path), data_dir=str(tmp_path / "data"), port=0)
    assert config["num.partitions"] == 4 and "user_alice" not in config.given
    broker = doze.Broker(config)
    thread = broker.serve_in_thread()
    try:
        with RawClient(sasl_port(broker)) as c:
            [answer] = sasl_authenticate(c, "PLAIN", [plain_token("alice", "alice-secret")])
            assert answer.error_code == 0
            assert c.call(ApiKey.METADATA, 12, topics=None).brokers
    finally:
        broker.stop()
        thread.join(5)


@pytest.mark.parametrize("settings, message", [
    ({"listeners": "A://127.0.0.1:0,A://127.0.0.1:1", "listener.security.protocol.map": "A:PLAINTEXT"},
     "Each listener must have a different name"),
    ({"listeners": "PLAINTEXT://127.0.0.1:0,OTHER://127.0.0.1:9"}, "No security protocol defined for listener OTHER"),
    ({"listeners": "PLAINTEXT://127.0.0.1:0,A://127.0.0.1:7,B://127.0.0.1:7",
      "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,A:PLAINTEXT,B:PLAINTEXT"},
     "Each listener must have a different port"),
    ({"listener.security.protocol.map": "PLAINTEXT:TELNET"}, "is not NAME:PROTOCOL"),
    ({"listeners": "PLAINTEXT://127.0.0.1:0", "advertised.listeners": "PLAINTEXT://0.0.0.0:9092"},
     "nonroutable meta-address 0.0.0.0"),
    ({"advertised.listeners": "PLAINTEXT://a:1,SSL://example:9093"},
     "advertised.listeners listener names must be equal to or a subset"),
    ({"listeners": "A://127.0.0.1:0", "listener.security.protocol.map": "A:PLAINTEXT"},
     "inter.broker.listener.name must be a listener name defined in advertised.listeners"),
    ({"listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0"},
     "sasl.enabled.mechanisms GSSAPI: doze serves PLAIN, SCRAM-SHA-256, SCRAM-SHA-512"),
    ({"listeners": "127.0.0.1:9092"}, "Unable to parse 127.0.0.1:9092 to a broker endpoint"),
])
def test_listener_settings_kafka_refuses_stop_the_start(start_broker, settings, message):
    with pytest.raises(ValueError, match=message):
        start_broker(settings)


###############################################################################
# 3. PROTOCOL VOCABULARY -- API keys, error codes, errors
###############################################################################

KAFKA_ERRORS = {   # from Kafka's org.apache.kafka.common.protocol.Errors
    "UNKNOWN_SERVER_ERROR": -1, "NONE": 0, "OFFSET_OUT_OF_RANGE": 1, "CORRUPT_MESSAGE": 2,
    "UNKNOWN_TOPIC_OR_PARTITION": 3, "MESSAGE_TOO_LARGE": 10, "NOT_COORDINATOR": 16,
    "INVALID_TOPIC_EXCEPTION": 17, "RECORD_LIST_TOO_LARGE": 18, "INVALID_REQUIRED_ACKS": 21,
    "UNSUPPORTED_VERSION": 35, "TOPIC_ALREADY_EXISTS": 36, "INVALID_PARTITIONS": 37,
    "INVALID_REPLICATION_FACTOR": 38, "INVALID_REPLICA_ASSIGNMENT": 39, "INVALID_CONFIG": 40,
    "INVALID_REQUEST": 42, "OUT_OF_ORDER_SEQUENCE_NUMBER": 45, "DUPLICATE_SEQUENCE_NUMBER": 46,
    "INVALID_PRODUCER_EPOCH": 47, "INVALID_TXN_STATE": 48, "UNKNOWN_PRODUCER_ID": 59,
    "FETCH_SESSION_ID_NOT_FOUND": 70, "INVALID_RECORD": 87, "PRODUCER_FENCED": 90,
    "UNKNOWN_TOPIC_ID": 100,
}


@pytest.mark.parametrize("name,value", sorted(KAFKA_ERRORS.items()))
def test_vocabulary_error_codes_match_kafka(name, value):
    assert ErrorCode[name] == value


def test_vocabulary_api_keys_match_kafka():
    assert (ApiKey.PRODUCE, ApiKey.FETCH, ApiKey.METADATA, ApiKey.API_VERSIONS,
            ApiKey.CREATE_TOPICS, ApiKey.INIT_PRODUCER_ID, ApiKey.DESCRIBE_CLUSTER) == \
        (0, 1, 3, 18, 19, 22, 60)


def test_vocabulary_older_clients_get_the_fallback_error():
    assert doze.error_for_version(ApiKey.INIT_PRODUCER_ID, 3, ErrorCode.PRODUCER_FENCED) \
        == ErrorCode.INVALID_PRODUCER_EPOCH
    assert doze.error_for_version(ApiKey.INIT_PRODUCER_ID, 4, ErrorCode.PRODUCER_FENCED) \
        == ErrorCode.PRODUCER_FENCED
    assert doze.error_for_version(ApiKey.METADATA, 0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION) \
        == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


###############################################################################
# 4. WIRE CODEC -- primitive types, frames
###############################################################################

# (value, zig-zag varint bytes): kafka-python's test_varint vectors and a few more
ZIGZAG_VECTORS = [
    (0, "00"), (-1, "01"), (1, "02"), (-2, "03"), (63, "7e"), (-64, "7f"), (64, "8001"),
    (-65, "8101"), (300, "d804"), (-300, "d704"), (8191, "fe7f"), (-8192, "ff7f"),
    (8192, "808001"), (2 ** 31 - 1, "feffffff0f"), (-2 ** 31, "ffffffff0f"),
    (2 ** 63 - 1, "feffffffffffffffff01"), (-2 ** 63, "ffffffffffffffffff01"),
]
UVARINT_VECTORS = [
    (0, "00"), (1, "01"), (127, "7f"), (128, "8001"), (300, "ac02"), (16383, "ff7f"),
    (16384, "808001"), (2 ** 32 - 1, "ffffffff0f"),
]


@pytest.mark.parametrize("value,hexed", ZIGZAG_VECTORS)
def test_codec_zigzag_varint_vectors(value, hexed):
    assert doze.varint_bytes(value).hex() == hexed
    assert doze.Reader(bytes.fromhex(hexed)).varlong() == value
    if -2 ** 31 <= value < 2 ** 31:                   # a 32-bit varint reads it too
        assert doze.Reader(bytes.fromhex(hexed)).varint() == value
    else:                                             # ... and refuses a longer one
        with pytest.raises(doze.ProtocolError):
            doze.Reader(bytes.fromhex(hexed)).varint()
    assert zigzag(value).hex() == hexed               # the tests' own encoder agrees


@pytest.mark.parametrize("value,hexed", UVARINT_VECTORS)
def test_codec_unsigned_varint_vectors(value, hexed):
    assert doze.uvarint_bytes(value).hex() == hexed
    r = doze.Reader(bytes.fromhex(hexed))
    java_int = value - 2 ** 32 if value >= 2 ** 31 else value     # readUnsignedVarint's int
    assert r.uvarint() == java_int and r.pos == len(hexed) // 2


@pytest.mark.parametrize("hexed,value", [("ffffffff7f", -1), ("8080808010", 0), ("ffffffff07", 2 ** 31 - 1)])
def test_codec_five_byte_uvarint_keeps_the_low_32_bits_as_java_does(hexed, value):
    assert doze.Reader(bytes.fromhex(hexed)).uvarint() == value


def test_codec_uvarint_of_six_bytes_is_refused():
    with pytest.raises(doze.ProtocolError, match="longer than 5 bytes"):
        doze.Reader(bytes.fromhex("808080808001")).uvarint()


def test_codec_fixed_width_integers_are_big_endian():
    w = doze.Writer()
    w.fixed(doze.I16, -2)
    w.fixed(doze.I32, 0x01020304)
    w.fixed(doze.I64, -1)
    assert bytes(w.out).hex() == "fffe" + "01020304" + "ff" * 8
    r = doze.Reader(bytes(w.out))
    assert (r.fixed(doze.I16), r.fixed(doze.I32), r.fixed(doze.I64)) == (-2, 0x01020304, -1)


def test_codec_golden_api_versions_v0_request():
    """ApiVersions v0, correlation id 1, client id "ab": header v1, empty body."""
    frame = RawClient.encode(ApiKey.API_VERSIONS, 0, 1, client_id="ab")
    assert frame.hex() == "0000000c" "0012" "0000" "00000001" "0002" "6162"


def test_codec_golden_metadata_v9_flexible_request():
    """Metadata v9 is flexible: header v2 (client id stays a classic string, then
    an empty tag section) and compact arrays/strings in the body (KIP-482)."""
    frame = RawClient.encode(ApiKey.METADATA, 9, 7, client_id="ab", topics=[Msg(name="t")],
                             allow_auto_topic_creation=True,
                             include_topic_authorized_operations=False)
    body = ("0003" "0009" "00000007" "0002" "6162" "00"   # header v2
            "02" "0274" "00"                              # topics: [ {name "t", no tags} ]
            "01" "00" "00"                                # auto-create; no cluster/topic ops (v8-10, v8+)
            "00")                                         # no tagged fields
    assert frame.hex() == "%08x" % (len(body) // 2) + body


def test_codec_golden_produce_v3_request():
    records = b"R" * 3
    frame = RawClient.encode(ApiKey.PRODUCE, 3, 2, client_id="c", transactional_id=None,
                             acks=-1, timeout_ms=1000,
                             topic_data=[Msg(name="t", partition_data=[
                                 Msg(index=0, records=records)])])
    body = ("0000" "0003" "00000002" "0001" "63"
            "ffff" "ffff" "000003e8"              # null transactional id, acks -1, timeout
            "00000001" "0001" "74"                # one topic, "t"
            "00000001" "00000000" "00000003" "525252")   # one partition, index 0, records
    assert frame.hex() == "%08x" % (len(body) // 2) + body


@pytest.mark.parametrize("data", ["", "00", "0001", "000000", "80", "ffff"])
def test_codec_truncated_fixed_and_varint_reads_raise_protocol_error(data):
    r = doze.Reader(bytes.fromhex(data))
    with pytest.raises(doze.ProtocolError):
        r.fixed(doze.I32)
    if data in ("", "80", "ffff"):
        with pytest.raises(doze.ProtocolError):
            doze.Reader(bytes.fromhex(data)).uvarint()


def test_codec_overlong_varint_raises_protocol_error():
    with pytest.raises(doze.ProtocolError):
        doze.Reader(b"\xff" * 10 + b"\x01").uvarint()


def test_codec_take_past_the_end_raises_protocol_error():
    r = doze.Reader(b"abc")
    assert bytes(r.take(2)) == b"ab"
    with pytest.raises(doze.ProtocolError):
        r.take(2)
    with pytest.raises(doze.ProtocolError):
        r.take(-1)


###############################################################################
# 5. SCHEMAS -- every API's request and response, declared once as data
###############################################################################

SAMPLES = {"bool": True, "int8": -7, "int16": 300, "int32": -70000, "int64": 2 ** 40 + 5,
           "uint16": 65000, "float64": 1.5, "uuid": bytes(range(16)), "string": "héllo",
           "bytes": b"\x00\xffab", "records": b"RECORDS!"}
ERROR_SAMPLE = int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)   # must survive OLDER_CLIENTS_GET


def sample_struct(fields, nulls, salt=0, version=None):
    """A Msg with a value for every field (all versions); fields nullable (in
    `version`, or in any) are None when nulls is set."""

    def value(f):
        if nulls and (f.nullable_in(version) if version is not None else f.nullable):
            return None
        if f.type == "[]":
            return [sample_struct(f.fields, nulls, salt + i, version) for i in range(2)]
        if f.type == "{}":
            return sample_struct(f.fields, nulls, salt, version)
        if f.type.startswith("[]"):
            return [SAMPLES[f.type[2:]], SAMPLES[f.type[2:]]]
        if f.name.endswith("error_code"):
            return ERROR_SAMPLE
        return SAMPLES[f.type] + salt if f.type == "int32" else SAMPLES[f.type]
    msg = Msg()
    for f in fields:
        setattr(msg, f.name, value(f))
    return msg


def plain(value):
    if isinstance(value, Msg):
        return {k: plain(v) for k, v in vars(value).items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    if isinstance(value, memoryview):
        return bytes(value)
    return value


def expected_plain(fields, msg, version):
    """What decoding msg at `version` must give: the value where the field
    exists in that version, else its schema default."""
    out = {}
    for f in fields:
        if not f.in_version(version):
            out[f.name] = plain(f.default)
            continue
        value = getattr(msg, f.name)
        if f.type in ("[]", "{}") and value is not None:
            items = value if f.type == "[]" else [value]
            decoded = [expected_plain(f.fields, m, version) for m in items]
            out[f.name] = decoded if f.type == "[]" else decoded[0]
        else:
            out[f.name] = plain(value)
    return out


ALL_VERSIONS = [(key, v) for key, (spec, _) in sorted(doze.HANDLERS.items())
                for v in range(spec.min_version, spec.max_version + 1)]


@pytest.mark.parametrize("nulls", [False, True], ids=["values", "nulls"])
@pytest.mark.parametrize("direction", ["request", "response"])
@pytest.mark.parametrize("key,version", ALL_VERSIONS,
                         ids=[f"{k.name}-v{v}" for k, v in ALL_VERSIONS])
def test_schema_every_api_round_trips_at_every_version(key, version, direction, nulls):
    spec = doze.HANDLERS[key][0]
    fields = getattr(spec, direction)
    msg = sample_struct(fields, nulls, version=version)
    w = doze.encode_body(spec, version, direction, msg)
    data = b"".join(w.finish())
    r = doze.Reader(data)
    decoded = doze.read_struct(r, doze.plan_for(spec, version, direction), spec.flexible(version))
    assert r.pos == len(data), "decoding did not consume exactly what was encoded"
    assert plain(decoded) == expected_plain(fields, msg, version)


def test_schema_flexible_versions_use_compact_encoding():
    """The same Metadata request is shorter in v9 (compact) than in v8 (classic)."""
    spec = doze.HANDLERS[ApiKey.METADATA][0]
    msg = Msg(topics=[Msg(name="orders")], allow_auto_topic_creation=True)
    v8 = b"".join(doze.encode_body(spec, 8, "request", msg).finish())
    v9 = b"".join(doze.encode_body(spec, 9, "request", msg).finish())
    assert v8.hex() == "00000001" "0006" + b"orders".hex() + "01" "00" "00"
    assert v9.hex() == "02" "07" + b"orders".hex() + "00" "01" "00" "00" "00"


def test_memo_array_encodes_as_its_elements_and_builds_them_once(monkeypatch):
    """A Memo struct array is written exactly as its elements would be, in
    classic and compact versions; a second use of its key comes from the
    cache without building them; the cache keeps under its byte bound."""
    spec = doze.HANDLERS[ApiKey.METADATA][0]
    monkeypatch.setattr(doze, "_MEMO", collections.OrderedDict())
    monkeypatch.setattr(doze, "_memo_bytes", [0])
    monkeypatch.setattr(doze, "MEMO_MAX_BYTES", 2000)

    def partitions(n):
        return [Msg(partition_index=p, leader_id=7, leader_epoch=0, replica_nodes=[7], isr_nodes=[7])
                for p in range(n)]

    def response(parts):
        return Msg(brokers=[], cluster_id="c", controller_id=7, topics=[
            Msg(error_code=0, name="t", topic_id=doze.UUID_ZERO, is_internal=False, partitions=parts)])
    builds = []

    def build(n):
        builds.append(n)
        return partitions(n)
    for version in (1, 9, 12):
        for n in (0, 3, 40):
            plain = b"".join(doze.encode_body(spec, version, "response", response(partitions(n))).finish())
            for _ in range(2):
                memo = doze.Memo(("test", n), lambda n=n: build(n))
                assert b"".join(doze.encode_body(spec, version, "response", response(memo)).finish()) == plain
    assert builds == [0, 3, 40] * 3                     # once per (version, key), not per use
    assert doze._memo_bytes[0] <= 2000 and doze._memo_bytes[0] == sum(map(len, doze._MEMO.values()))


def test_schema_tagged_field_is_written_only_when_not_default():
    spec = doze.HANDLERS[ApiKey.FETCH][0]
    base = dict(max_wait_ms=0, min_bytes=0, topics=[], forgotten_topics_data=[], rack_id="")
    without = b"".join(doze.encode_body(spec, 12, "request", Msg(**base)).finish())
    with_tag = b"".join(doze.encode_body(spec, 12, "request",
                                         Msg(cluster_id="c1", **base)).finish())
    assert without.endswith(b"\x00")                                   # no tags
    assert with_tag.endswith(b"\x01" b"\x00" b"\x03" b"\x03c1")        # tag 0, size 3, "c1"
    r = doze.Reader(with_tag)
    req = doze.read_struct(r, doze.plan_for(spec, 12, "request"), True)
    assert req.cluster_id == "c1"


def test_schema_unknown_tags_are_skipped():
    spec = doze.HANDLERS[ApiKey.API_VERSIONS][0]
    data = b"\x02a\x02b" + b"\x01" + b"\x05\x02zz"     # two compact strings, then tag 5 (2 bytes)
    req = doze.read_struct(doze.Reader(data), doze.plan_for(spec, 3, "request"), True)
    assert (req.client_software_name, req.client_software_version) == ("a", "b")


def test_schema_undeclared_attribute_is_refused():
    spec = doze.HANDLERS[ApiKey.API_VERSIONS][0]
    with pytest.raises(TypeError):
        doze.encode_body(spec, 0, "response", Msg(error_code=0, api_keys=[], bogus=1))


@pytest.mark.parametrize("text,line", [
    ("Foo  key=1  versions=0-1  flexible=none\n  request\n    good  int32\n    bad line !!\n", 4),
    ("\nFoo  key=1  versions=0-1  flexible=none\n    stray  int32\n", 3),
    ("  orphan  int32\n", 1),
    ("Foo  key=1  versions=0-1\n", 1),
])
def test_schema_parser_errors_carry_line_numbers(text, line):
    with pytest.raises(SyntaxError) as e:
        doze.parse_api(text)
    assert f"line {line}" in str(e.value)


def test_schema_parser_rejects_unknown_type():
    # A typo such as "int23" must fail at import, not at request time.
    text = "Foo  key=1  versions=0-1  flexible=none\n  request\n    count  int23\n"
    with pytest.raises(SyntaxError) as e:
        doze.parse_api(text)
    assert "line 3" in str(e.value)


def test_schema_parser_builds_nested_fields_and_version_ranges():
    spec = doze.parse_api("""
Foo  key=99  versions=0-5  flexible=3+
  request
    a  int32
    b  string?  = null  v2+
    items  []  v1-4
      x  int16 = -1
      ys  []int64
    c  string?4+
    d  bytes?1-3
  response
    error_code  int16
""")
    assert (spec.name, spec.key, spec.min_version, spec.max_version, spec.flexible_from) == \
        ("Foo", 99, 0, 5, 3)
    a, b, items, c, d = spec.request
    assert (b.nullable, b.default, b.since, b.until) == ((0, 32767), None, 2, 32767)
    assert (c.nullable, d.nullable, a.nullable) == ((4, 32767), (1, 3), None)
    assert [c.nullable_in(v) for v in (3, 4, 5)] == [False, True, True]
    assert [d.nullable_in(v) for v in (0, 1, 3, 4)] == [False, True, True, False]
    assert (items.since, items.until, [f.name for f in items.fields]) == (1, 4, ["x", "ys"])
    assert items.fields[0].default == -1
    assert not spec.flexible(2) and spec.flexible(3)


def test_schema_truncated_body_raises_protocol_error_at_every_cut():
    spec = doze.HANDLERS[ApiKey.CREATE_TOPICS][0]
    msg = sample_struct(spec.request, nulls=False)
    for version in (2, 5, 7):
        data = b"".join(doze.encode_body(spec, version, "request", msg).finish())
        for cut in range(len(data)):
            with pytest.raises(doze.ProtocolError):
                doze.read_struct(doze.Reader(data[:cut]), doze.plan_for(spec, version, "request"),
                                 spec.flexible(version))


def test_schema_api_versions_advertises_exactly_the_registry(client):
    resp = client.call(ApiKey.API_VERSIONS, 3, client_software_name="t",
                       client_software_version="1")
    assert resp.error_code == 0
    got = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
    assert got == {int(k): (s.min_version, s.classic_max) for k, (s, _) in doze.HANDLERS.items()}


###############################################################################
# 6. RECORD BATCHES -- the unit a producer sends and the log stores
###############################################################################

def _crc32c_reference(data, crc=0):
    """Bit at a time, from the definition (reflected polynomial 0x82F63B78)."""
    crc ^= 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
    return crc ^ 0xFFFFFFFF


def _crc32c_table_reference(data):
    table = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    crc = 0xFFFFFFFF
    for byte in data:
        crc = table[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def batch_with_payload(payload, count, attributes=0, timestamp_ms=1_000):
    """A RecordBatch v2 around arbitrary record bytes, with a right CRC-32C:
    the shape of a batch whose header is fine and whose records are not."""
    tail = struct.pack(">hiqqqhii", attributes, count - 1, timestamp_ms, timestamp_ms,
                       -1, -1, -1, count) + payload
    return struct.pack(">qiibI", 0, len(tail) + 9, 0, 2, doze.crc32c(tail)) + tail


GOOD_RECORD = zigzag(7) + b"\x00" + zigzag(0) + zigzag(0) + zigzag(-1) + zigzag(1) + b"v" + zigzag(0)
BAD_RECORDS = {   # name: (records bytes, records_count), each with a right CRC
    "count-2^31-1-length--1": (zigzag(-1) + bytes(8), 2 ** 31 - 1),   # the 70-byte batch of the issue
    "length--2": (zigzag(-2) + GOOD_RECORD, 2),
    "length-too-short": (zigzag(3) + b"\x00\x00\x00", 1),
    "bytes-left-over": (GOOD_RECORD + b"\x00\x00", 1),
    "too-few-bytes-for-the-count": (GOOD_RECORD * 2, 3),
    "length-past-the-end": (zigzag(500) + GOOD_RECORD[1:], 1),
    "six-byte-varint": (b"\x80\x80\x80\x80\x80\x01" + GOOD_RECORD, 2),
}


def gzip_batch(payload, count):
    co = zlib.compressobj(6, zlib.DEFLATED, 31)
    return batch_with_payload(co.compress(payload) + co.flush(), count, attributes=1)


@pytest.mark.parametrize("e, terms", doze.CRC_FOLDS)
def test_batch_crc32c_every_fold_identity_holds(e, terms):
    """Each fold crc32c uses is an identity x^e == sum(x^t) mod P, found offline: proven here."""
    folded = 0
    for t in terms:
        folded ^= doze._xpow(t)
    assert folded == doze._xpow(e)
    assert folded != doze._xpow(e + 1)                  # (a wrong exponent would not pass)


def test_batch_crc32c_check_value():
    assert doze.crc32c(b"123456789") == 0xE3069283
    assert doze.crc32c(b"") == 0
    assert doze.crc32c(bytes(32)) == 0x8A9136AA                 # RFC 3720 B.4 vectors
    assert doze.crc32c(b"\xff" * 32) == 0x62A8AB43
    assert doze.crc32c(bytes(range(32))) == 0x46DD794E


def test_batch_crc32c_matches_reference_at_every_small_length():
    rng = random.Random(1)
    data = bytes(rng.randrange(256) for _ in range(700))
    for n in range(len(data) + 1):
        assert doze.crc32c(data[:n]) == _crc32c_reference(data[:n]), n


def test_batch_crc32c_matches_reference_on_large_inputs():
    rng = random.Random(2)
    for n in (4096, 6000, 65_537, 300_001):
        data = rng.randbytes(n) if hasattr(rng, "randbytes") else os.urandom(n)
        assert doze.crc32c(data) == _crc32c_table_reference(data), n
        assert doze.crc32c(memoryview(data)) == doze.crc32c(data)


def test_batch_crc32c_continues_from_a_previous_result():
    assert doze.crc32c(b"56789", doze.crc32c(b"1234")) == 0xE3069283
    assert doze.crc32c(b"9", doze.crc32c(b"12345678")) == 0xE3069283


def test_batch_header_layout_and_test_batch_validate():
    batch = make_batch([b"a", b"bb", b"ccc"], timestamps=[10, 20, 15], producer_id=7,
                       producer_epoch=1, base_sequence=4)
    h = doze.validate_produced(batch)
    assert (h.magic, h.last_offset_delta, h.records_count) == (2, 2, 3)
    assert (h.base_timestamp, h.max_timestamp) == (10, 20)
    assert (h.producer_id, h.producer_epoch, h.base_sequence) == (7, 1, 4)
    assert h.batch_length == len(batch) - 12
    assert [(o, v) for o, _, v, _ in batch_records(batch)] == [(0, b"a"), (1, b"bb"), (2, b"ccc")]


def test_batch_doze_decode_records_reads_test_batches():
    batch = make_batch([b"x", b"y"], timestamps=[100, 105], keys=[b"k1", None])
    got = list(doze.decode_records(batch))
    assert [(o, t, k, v) for o, t, k, v, _ in got] == [(0, 0, b"k1", b"x"), (1, 5, None, b"y")]


def test_batch_build_batch_agrees_with_test_builder():
    ours = make_batch([b"v"], timestamps=[5])
    theirs = doze.build_batch([(None, b"v", ())], timestamp_ms=5)
    assert theirs == ours


def test_batch_control_batch_layout():
    batch = doze.build_control_batch(42, 3, commit=True, timestamp_ms=9, coordinator_epoch=5)
    h = header_of(batch)
    assert h.attributes & doze.ATTR_CONTROL and h.attributes & doze.ATTR_TRANSACTIONAL
    assert (h.producer_id, h.producer_epoch, h.base_sequence) == (42, 3, -1)
    [(_, key, value, _)] = batch_records(batch)
    assert struct.unpack(">hh", key) == (0, doze.CONTROL_COMMIT)
    assert struct.unpack(">hi", value) == (0, 5)
    assert doze.crc32c(batch[doze.CRC_START:]) == h.crc


@pytest.mark.parametrize("mutate,code", [
    (lambda b: b[:40], ErrorCode.CORRUPT_MESSAGE),                               # short
    (lambda b: b[:-1] + bytes([b[-1] ^ 1]), ErrorCode.CORRUPT_MESSAGE),           # bad CRC
    (lambda b: b + b"x", ErrorCode.INVALID_RECORD),                               # trailing bytes
    (lambda b: b[:16] + b"\x01" + b[17:], ErrorCode.INVALID_RECORD),  # magic 1: as Kafka 4.3.1 answers
    (lambda b: b[:8] + struct.pack(">i", 10 ** 6) + b[12:], ErrorCode.CORRUPT_MESSAGE),
], ids=["short", "crc", "trailing", "magic", "length"])
def test_batch_validation_errors(mutate, code):
    with pytest.raises(doze.BatchError) as e:
        doze.validate_produced(mutate(make_batch([b"abc"])))
    assert e.value.code == code


def test_batch_control_flag_from_a_client_is_invalid_record():
    with pytest.raises(doze.BatchError) as e:
        doze.validate_produced(make_batch([b"x"], attributes=doze.ATTR_CONTROL))
    assert e.value.code == ErrorCode.INVALID_RECORD


def test_batch_record_framing_accepts_what_producers_send():
    for values in ([b"a"], [b"x" * 70] * 3, [b"y" * 10_000, b"z"], [b""] * 500):
        batch = make_batch(values, keys=[b"k"] * len(values))
        assert doze.check_record_framing(memoryview(batch), len(values), 61) is None
    assert doze.check_record_framing(batch_with_payload(GOOD_RECORD * 4, 4), 4, 61) is None


@pytest.mark.parametrize("name", sorted(BAD_RECORDS))
def test_batch_record_framing_refuses_records_that_do_not_tile_the_batch(name):
    payload, count = BAD_RECORDS[name]
    batch = batch_with_payload(payload, count)
    h = doze.validate_produced(batch)                   # the header and the CRC are fine
    assert doze.check_records(memoryview(batch), h)
    with pytest.raises(doze.RecordsError):
        list(doze.decode_records(batch))


def test_batch_the_70_byte_batch_of_the_issue():
    batch = batch_with_payload(zigzag(-1) + bytes(8), 2 ** 31 - 1)
    assert len(batch) == 70


@pytest.mark.parametrize("payload", [
    zigzag(9) + b"\x00" + zigzag(0) + zigzag(0) + zigzag(-7) + zigzag(1) + b"v" + zigzag(0) + b"\x00\x00",
    zigzag(8) + b"\x00" + zigzag(0) + zigzag(0) + zigzag(-1) + zigzag(50) + b"v" + zigzag(0),
    zigzag(7) + b"\x00" + zigzag(0) + zigzag(0) + zigzag(-1) + zigzag(1) + b"v" + zigzag(100),
    zigzag(7) + b"\x00" + zigzag(0) + zigzag(0) + zigzag(-1) + zigzag(1) + b"v" + zigzag(-3),
], ids=["negative-key-length", "value-past-the-record", "header-count-too-big", "negative-header-count"])
def test_batch_decode_records_stays_inside_each_record(payload):
    """Lengths that tile the batch, fields inside a record that do not: the
    decoder refuses them without reading past the record."""
    with pytest.raises(doze.RecordsError):
        list(doze.decode_records(batch_with_payload(payload, 1)))


def test_batch_decode_records_never_loops_on_random_payloads():
    rng = random.Random(9)
    started = time.perf_counter()
    for i in range(3000):
        payload = bytes(rng.randrange(256) for _ in range(rng.randrange(80)))
        count = rng.choice([1, 2, 7, 2 ** 31 - 1, -5, 0])
        with contextlib.suppress(doze.RecordsError):
            for _ in doze.decode_records(batch_with_payload(payload, count, attributes=rng.choice([0, 1]))):
                pass
    assert time.perf_counter() - started < 10


@pytest.mark.parametrize("records,count,expected", [
    (GOOD_RECORD * 3, 3, None),
    (GOOD_RECORD * 3 + b"\x00", 3, ErrorCode.INVALID_RECORD),
    (zigzag(-2) + GOOD_RECORD, 2, ErrorCode.INVALID_RECORD),
], ids=["good", "left-over", "negative-length"])
def test_batch_gzip_records_are_checked_after_inflating(records, count, expected):
    flaw = doze.check_records(gzip_batch(records, count), doze.read_batch_header(gzip_batch(records, count)))
    assert (flaw[0] if flaw else None) == expected


def test_batch_gzip_that_does_not_inflate_is_unknown_server_error():
    batch = batch_with_payload(b"not gzip at all, not at all", 1, attributes=1)
    assert doze.check_records(batch, doze.read_batch_header(batch))[0] == ErrorCode.UNKNOWN_SERVER_ERROR


def test_batch_decode_records_bounds_gzip_output():
    bomb = zlib.compressobj(9, zlib.DEFLATED, 31)
    payload = bomb.compress(bytes(doze.MAX_INFLATED + 1)) + bomb.flush()
    with pytest.raises(doze.RecordsError, match="inflate to more than"):
        list(doze.decode_records(batch_with_payload(payload, 1, attributes=1)))


###############################################################################
# 7. STORAGE -- partition logs on disk
###############################################################################

@pytest.fixture
def open_logs(tmp_path):
    """open_logs(settings=None, clock=None, files=None, flusher=None) -> a loaded
    LogManager on tmp_path/"logs"; reopen by calling it again after logs.close()."""
    opened = []

    def open_(settings=None, clock=None, files=None, flusher=None):
        data_dir = tmp_path / "logs"
        os.makedirs(data_dir, exist_ok=True)
        config = doze.Config(settings, data_dir=data_dir, clock=clock)
        store = doze.MetadataStore(os.path.join(config.data_dir, "meta.db"))
        logs = doze.LogManager(config, store, files, flusher=flusher)
        logs.load()
        opened.append(store)
        return logs

    yield open_
    for store in opened:
        store.close()


def new_topic(logs, name="t", partitions=1, **configs):
    configs = {k.replace("_", "."): str(v) for k, v in configs.items()}
    doze.run_steps(logs.create_topic(name, partitions, configs))
    return logs.get(name, 0)


def append(logs, plog, values, flush=True, **kw):
    """Append one test batch the way Produce does; returns its base offset."""
    batch = bytearray(make_batch(values, **kw))
    base = logs.append(plog, batch, doze.validate_produced(batch))
    if flush:
        logs.flush_dirty()
    return base


def delete_records_to(logs, plog, offset):
    """DeleteRecords up to offset, every step of it, made durable."""
    list(logs.delete_records([(plog, offset)]))
    logs.flush_dirty()


def reopened(logs, open_logs):
    """Close the logs cleanly and open them again -> the topic "t"'s partition 0."""
    logs.close()
    return open_logs().get("t", 0)


def log_files(plog):
    return sorted(n for n in os.listdir(plog.dir) if n.endswith(".log"))


def _one_batch_per_segment(logs, clock, ages_s, **configs):
    plog = new_topic(logs, segment_bytes=80, **configs)
    now_ms = int(clock() * 1000)
    for i, age in enumerate(ages_s):
        append(logs, plog, [b"%02d" % i], timestamps=[now_ms - age * 1000])
    assert len(plog.segments) == len(ages_s)
    return plog


def finish(steps):
    """Run a step generator (what in_steps drives on the loop) to its end."""
    try:
        while True:
            next(steps)
    except StopIteration as done:
        return done.value


def _brute_force_for_timestamp(records, target, log_start):
    """The first (offset, ts) at or after target by Kafka's rule, from a list of
    (offset, ts, batch max ts) in log order: the first batch whose max reaches
    the target, then its first record that does, from the log start."""
    by_batch = {}
    for off, ts, batch in records:
        by_batch.setdefault(batch, []).append((off, ts))
    for batch in sorted(by_batch):
        recs = by_batch[batch]
        if max(t for _, t in recs) >= target and recs[-1][0] >= log_start:
            return next(((o, t) for o, t in recs if t >= target and o >= log_start),
                        (max(recs[0][0], log_start), max(t for _, t in recs)))
    return None


class CountingFiles(doze.Files):
    """Counts fsyncs; fails open_append with `fail_errno` from the N-th call on."""

    def __init__(self, fail_from=None, fail_errno=errno.EMFILE):
        self.fsyncs = self.dir_fsyncs = self.opens = self.syncfses = 0
        self.fail_from, self.fail_errno = fail_from, fail_errno
        self.syncfs_errno = None                 # syncfs fails with this

    def syncfs(self, path):
        self.syncfses += 1
        if self.syncfs_errno:
            raise OSError(self.syncfs_errno, os.strerror(self.syncfs_errno))
        return super().syncfs(path)

    def open_append(self, path, create):
        self.opens += 1
        if self.fail_from is not None and self.opens >= self.fail_from:
            raise OSError(self.fail_errno, os.strerror(self.fail_errno))
        return super().open_append(path, create)

    def fsync(self, fd):
        self.fsyncs += 1
        super().fsync(fd)

    def fsync_dir(self, path):
        self.dir_fsyncs += 1
        super().fsync_dir(path)


def fds_under(path):
    """This process's descriptors open on files below `path` (other tests'
    threads may open and close descriptors of their own meanwhile)."""
    path, found = str(path), 0
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            if os.readlink(f"/proc/self/fd/{fd}").startswith(path):
                found += 1
    return found


class MetaSyncLog(doze.Files):
    """Files that record meta.db's commits and fsyncs in order, and can fail the fsyncs."""

    def __init__(self):
        self.events, self.sync_errno, self.sync_delay_s = [], None, 0

    def commit(self, db):
        super().commit(db)
        self.events.append("commit")

    def sync_file(self, path, fallback=None, keep=None):
        if self.sync_errno:
            raise OSError(self.sync_errno, os.strerror(self.sync_errno))
        super().sync_file(path, fallback, keep)
        time.sleep(self.sync_delay_s)            # a slow disk: an answer sent before the fsync would show
        self.events.append("sync")


# --- PartitionLog and LogManager, no sockets ------------------------------------------

def test_storage_append_and_read_back(open_logs):
    logs = open_logs()
    plog = new_topic(logs)
    sent = [make_batch([b"a", b"b", b"c"]), make_batch([b"d"]), make_batch([b"e", b"f"])]
    bases = [append(logs, plog, [bytes(r[2]) for r in batch_records(b)]) for b in sent]
    assert bases == [0, 3, 4]
    assert (plog.next_offset, plog.high_watermark, plog.log_start_offset) == (6, 6, 0)
    stored = list(plog.batches())
    assert [base for base, _ in stored] == bases
    for (base, data), original in zip(stored, sent):
        assert struct.unpack_from(">q", data)[0] == base
        assert data[8:] == original[8:]                  # only the base offset differs


def test_storage_high_watermark_moves_only_on_flush(open_logs):
    logs = open_logs()
    plog = new_topic(logs)
    append(logs, plog, [b"a", b"b"], flush=False)
    assert (plog.next_offset, plog.high_watermark) == (2, 0)
    assert plog.read(0, 1 << 20, plog.high_watermark) is None
    assert [p.topic for p in logs.flush_dirty()] == ["t"]
    assert plog.high_watermark == 2
    assert logs.flush_dirty() == []                      # nothing dirty: nothing moved


def test_storage_group_commit_fsyncs_a_narrow_requests_logs_first(open_logs):
    """A produce to a few partitions does not wait behind the fsyncs of one to
    many: the logs it waits on (hurry) are flushed first, the rest oldest first."""
    logs = open_logs()
    wide = [new_topic(logs, "wide", 5)] + [logs.get("wide", p) for p in range(1, 5)]
    assert len(wide) + 1 < doze.SYNCFS_MIN_LOGS          # fsynced one by one
    narrow = new_topic(logs, "narrow")
    logs.flush_dirty()
    for plog in wide:
        append(logs, plog, [b"w"], flush=False)
    append(logs, narrow, [b"n"], flush=False)
    logs.hurry([narrow])
    assert logs.flush_dirty(budget_s=0) == [narrow]      # a budget of 0: exactly one fsync
    assert logs.flush_dirty(budget_s=0) == [wide[0]]     # then the oldest
    assert logs.flush_dirty() == wide[1:]

@pytest.mark.skipif(doze.syncfs_call() is None, reason="syncfs(2) with error reports is Linux 5.8+ only")
def test_storage_group_commit_makes_many_dirty_logs_durable_with_one_syncfs(open_logs, caplog):
    """SYNCFS_MIN_LOGS or more logs dirty: one syncfs of the file system, no
    fsync each, and every high watermark moves; fewer: an fsync each. A failed
    syncfs falls back to an fsync each (which learns which file failed)."""
    files = CountingFiles()
    logs = open_logs(files=files)
    wide = [new_topic(logs, "wide", 40)] + [logs.get("wide", p) for p in range(1, 40)]
    logs.flush_dirty()
    for plog in wide:
        append(logs, plog, [b"w"], flush=False)
    before = files.fsyncs
    assert logs.flush_dirty(budget_s=0) == wide          # all at once, whatever the budget
    assert (files.syncfses, files.fsyncs - before) == (1, 0)
    assert all(plog.high_watermark == 1 for plog in wide)
    for plog in wide[:5]:
        append(logs, plog, [b"few"], flush=False)
    assert logs.flush_dirty() == wide[:5]
    assert (files.syncfses, files.fsyncs - before) == (1, 5)
    files.syncfs_errno = errno.EIO
    for plog in wide:
        append(logs, plog, [b"again"], flush=False)
    assert logs.flush_dirty() == wide
    assert (files.syncfses, files.fsyncs - before) == (2, 45)
    assert all(plog.high_watermark == 3 - (i >= 5) for i, plog in enumerate(wide))
    assert "syncfs of" in caplog.text and "fsyncing the logs one by one" in caplog.text


class GatedFiles(doze.Files):
    """Real files whose fsyncs on the flusher's thread wait at a gate (and
    fail with `fail_errno` if set); the loop's own fsyncs pass."""

    def __init__(self):
        self.gate, self.entered = threading.Event(), threading.Event()
        self.fail_errno, self.on_thread = None, 0

    def fsync(self, fd):
        if threading.current_thread().name == "doze-flusher":
            self.on_thread += 1
            self.entered.set()
            assert self.gate.wait(10), "the test never opened the gate"
            if self.fail_errno:
                raise OSError(self.fail_errno, os.strerror(self.fail_errno))
        super().fsync(fd)


def threaded_logs(open_logs):
    """A LogManager whose Flusher runs on its thread -> (logs, files, woken):
    woken is set each time the flusher wakes the loop."""
    files, woken = GatedFiles(), threading.Event()
    return open_logs(files=files, flusher=doze.Flusher(files, wake=woken.set)), files, woken


def take_woken(logs, woken):
    """The loop's pass after the flusher woke it: -> the logs moved."""
    assert woken.wait(10), "the flusher never woke the loop"
    woken.clear()
    assert logs.flush_due()
    return logs.flush_dirty(budget_s=0.02)


def test_flusher_takes_a_long_group_commit_off_the_loop_and_moves_nothing_before_the_disk(open_logs):
    """A commit of FLUSHER_MIN_BYTES or more is fsynced on the flusher's
    thread: no high watermark moves until the loop takes the finished job; a
    short commit meanwhile is made on the loop, and a long one waits its turn."""
    logs, files, woken = threaded_logs(open_logs)
    big, small = new_topic(logs, "big"), new_topic(logs, "small")
    append(logs, big, [b"x" * doze.FLUSHER_MIN_BYTES], flush=False)
    assert logs.flush_dirty(budget_s=0.02) == [] and logs.flusher.busy
    assert files.entered.wait(10)                             # the fsync runs on the flusher's thread
    assert big.high_watermark == 0                            # ... and nothing moved before it returns
    append(logs, small, [b"short"], flush=False)              # a short commit: here, at once
    assert logs.flush_dirty(budget_s=0.02) == [small] and small.high_watermark == 1
    append(logs, big, [b"y" * doze.FLUSHER_MIN_BYTES], flush=False)
    assert not logs.flush_due() and logs.flush_dirty(budget_s=0.02) == []   # long: after the one in flight
    assert big.high_watermark == 0 and files.on_thread == 1
    files.gate.set()
    assert take_woken(logs, woken) == [big] and big.high_watermark == 1     # the first job's target only
    assert logs.flusher.busy                                  # the second, handed over in the same pass
    assert take_woken(logs, woken) == [big] and big.high_watermark == 2
    assert not logs.flush_due() and files.on_thread == 2
    logs.close()
    assert logs.flusher.thread is None


def test_flusher_failed_fsync_takes_that_log_offline_and_others_serve_on(open_logs, caplog):
    """An fsync that fails on the flusher's thread: its log goes offline with
    nothing acknowledged, the loop logs why, the other logs move."""
    logs, files, woken = threaded_logs(open_logs)
    logs_ = [new_topic(logs, "wide", 10)] + [logs.get("wide", p) for p in range(1, 10)]
    for plog in logs_:
        append(logs, plog, [b"w"], flush=False)
    files.syncfs = lambda path: (_ for _ in ()).throw(OSError(errno.EIO, "syncfs failed"))
    files.fail_errno = errno.EIO
    assert logs.flush_dirty(budget_s=0.02) == []
    files.gate.set()
    moved = take_woken(logs, woken)
    assert moved == [] and all(plog.offline and plog.high_watermark == 0 for plog in logs_)
    assert "fsync failed" in caplog.text and "syncfs of" in caplog.text
    logs.close()


def test_flusher_keeps_its_own_descriptors_while_the_loop_deletes_the_topic(open_logs, caplog):
    """The loop may delete a topic (close and remove its files) while the
    flusher fsyncs them: the flusher's duplicates stay valid, the result is
    dropped for the deleted log, and every duplicate is closed after."""
    logs, files, woken = threaded_logs(open_logs)
    plog = new_topic(logs, "gone")
    append(logs, plog, [b"z" * doze.FLUSHER_MIN_BYTES], flush=False)
    logs.flush_dirty(budget_s=0.02)
    assert files.entered.wait(10) and fds_under(plog.dir) == 2             # the loop's, the flusher's
    logs.delete_topic("gone")
    while logs.removing:
        logs.remove_some()
    files.gate.set()
    assert take_woken(logs, woken) == []
    assert not logs.flusher.busy and fds_under(plog.dir) == 0
    assert "failed" not in caplog.text and "bug" not in caplog.text
    logs.close()


def test_storage_index_finds_the_batch_holding_any_offset(open_logs):
    logs = open_logs()
    plog = new_topic(logs)
    ranges = []
    for values in ([b"a", b"b", b"c"], [b"d"], [b"e", b"f", b"g", b"h"]):
        base = append(logs, plog, values)
        ranges.append((base, base + len(values) - 1))
    for offset in range(plog.next_offset):
        data = plog.read(offset, 1 << 20, plog.next_offset).read()
        h = header_of(data)
        assert (h.base_offset, h.base_offset + h.last_offset_delta) in ranges
        assert h.base_offset <= offset <= h.base_offset + h.last_offset_delta
        assert len(split_batches(data)) == len([r for r in ranges if r[1] >= offset])
    assert plog.read(plog.next_offset, 1 << 20, plog.next_offset) is None


def test_storage_read_respects_max_bytes_but_returns_one_batch(open_logs):
    logs = open_logs()
    plog = new_topic(logs)
    for i in range(3):
        append(logs, plog, [b"x" * 50])
    one = len(plog.read(0, 1 << 20, 3).read()) // 3
    assert len(plog.read(0, one * 2, 3)) == one * 2
    assert len(plog.read(0, one * 2 - 1, 3)) == one
    assert len(plog.read(0, 1, 3)) == one                    # KIP-74: at least one batch
    assert plog.read(0, 1, 3, min_one=False) is None
    assert len(plog.read(0, 1 << 20, 2)) == one * 2          # stops before end_offset


def test_storage_segment_roll_by_segment_bytes(open_logs):
    logs = open_logs()
    plog = new_topic(logs, segment_bytes=200)
    for i in range(10):
        append(logs, plog, [b"value-%d" % i])
    size = os.path.getsize(os.path.join(plog.dir, log_files(plog)[0]))
    assert 100 < size <= 200
    bases = [s.base_offset for s in plog.segments]
    assert len(bases) >= 4
    assert log_files(plog) == [doze.segment_name(b) for b in bases]
    assert [o for o, _ in plog.batches()] == list(range(10))
    for offset in range(10):                                 # every segment is readable
        data = plog.read(offset, 1 << 20, 10).read()
        assert batch_records(data)[0][2] == b"value-%d" % offset


def test_storage_segment_roll_by_broker_setting(open_logs):
    logs = open_logs({"log.segment.bytes": 1048576})          # Kafka's smallest
    plog = new_topic(logs)
    for i in range(6):
        append(logs, plog, [b"v%d" % i + bytes(400_000)])
    assert len(plog.segments) >= 3


def test_storage_unwritten_partitions_hold_no_descriptor_and_no_index(open_logs):
    """A topic of many partitions nobody writes costs a file each on disk, but
    no open descriptor and no index arrays; the first append opens one
    descriptor for its own partition only, and the topic survives a restart."""
    logs = open_logs()
    plog = new_topic(logs, partitions=300)
    assert len(logs.open_files.lru) == 0
    assert all(seg.bases == () for p in range(300) for seg in logs.get("t", p).segments)
    assert all(log_files(logs.get("t", p)) == ["00000000000000000000.log"] for p in range(300))
    append(logs, plog, [b"a", b"b"])
    assert [seg for seg, kind in logs.open_files.lru if kind == "append"] == [plog.active]
    assert list(plog.active.bases) == [0]
    logs.close()
    again = open_logs()
    assert again.get("t", 299).next_offset == 0
    assert [r[2] for r in batch_records(again.get("t", 0).read(0, 1 << 20, 10).read())] == [b"a", b"b"]


def test_storage_restart_reopens_every_segment(open_logs):
    logs = open_logs()
    plog = new_topic(logs, segment_bytes=200)
    for i in range(8):
        append(logs, plog, [b"r%d" % i, b"s%d" % i])
    before = list(plog.batches())
    plog2 = reopened(logs, open_logs)
    assert list(plog2.batches()) == before
    assert (plog2.next_offset, plog2.high_watermark) == (16, 16)


def test_storage_index_cache_is_reused_after_clean_close(open_logs, monkeypatch):
    logs = open_logs()
    plog = new_topic(logs, segment_bytes=300)
    for i in range(12):
        append(logs, plog, [b"i%d" % i])
    before = list(plog.batches())
    logs.close()
    assert all(os.path.exists(s.index_path) for s in plog.segments)
    scans = []
    real_scan = doze.Segment._scan

    def spy(seg, pos, file_size):
        scans.append((pos, file_size))
        return real_scan(seg, pos, file_size)
    monkeypatch.setattr(doze.Segment, "_scan", spy)
    logs2 = open_logs()
    assert list(logs2.get("t", 0).batches()) == before
    assert scans and all(pos == size for pos, size in scans), "a cached segment was rescanned"
    logs2.close()

    for seg in plog.segments:                                # a damaged cache is ignored
        with open(seg.index_path, "r+b") as f:
            f.seek(30)
            f.write(b"garbage")
    scans.clear()
    assert list(open_logs().get("t", 0).batches()) == before
    assert any(pos == 0 and size > 0 for pos, size in scans)


def test_storage_unclean_close_rescans_and_keeps_everything(open_logs):
    logs = open_logs()
    plog = new_topic(logs, segment_bytes=250)
    for i in range(9):
        append(logs, plog, [b"u%d" % i])
    before = list(plog.batches())
    # no logs.close(): the active segment has no index cache
    plog2 = open_logs().get("t", 0)
    assert list(plog2.batches()) == before
    assert append(logs, plog2, [b"next"]) == 9


@pytest.mark.parametrize("tail", ["short garbage", "long garbage", "half batch",
                                  "bad crc", "repeated batch"])
def test_storage_torn_tail_is_cut_on_open(open_logs, caplog, tail):
    logs = open_logs()
    plog = new_topic(logs)
    for i in range(3):
        append(logs, plog, [b"keep-%d" % i])
    good_size = plog.active.size
    last = plog.active.read_batch(2)
    extra = {
        "short garbage": b"\x00\x01\x02\x03\x04\x05",
        "long garbage": bytes(range(200)),
        "half batch": struct.pack(">q", 3) + make_batch([b"torn" * 20])[8:60],
        "bad crc": struct.pack(">q", 3) + make_batch([b"crc"])[8:-1] + b"?",
        "repeated batch": last,                              # base offset 2 again, not 3
    }[tail]
    logs.close()
    with open(plog.active.path, "ab") as f:
        f.write(extra)
    caplog.set_level(logging.WARNING, logger="doze_kafka")
    plog2 = open_logs().get("t", 0)
    assert os.path.getsize(plog2.active.path) == good_size
    assert plog2.next_offset == 3
    assert [batch_records(b)[0][2] for _, b in plog2.batches()] == [b"keep-0", b"keep-1", b"keep-2"]
    assert any("torn tail" in r.getMessage() for r in caplog.records)


def test_storage_good_tail_is_not_cut(open_logs, caplog):
    logs = open_logs()
    plog = new_topic(logs)
    append(logs, plog, [b"a"])
    caplog.set_level(logging.WARNING, logger="doze_kafka")
    size = plog.active.size
    open_logs().get("t", 0)                                  # no close: a full rescan
    assert os.path.getsize(plog.active.path) == size
    assert not any("torn tail" in r.getMessage() for r in caplog.records)


def test_storage_retention_by_time(open_logs):
    clock = FakeClock()
    logs = open_logs(clock=clock)
    plog = _one_batch_per_segment(logs, clock, [60, 50, 40, 30, 20, 10], retention_ms=25_000)
    logs.apply_retention()
    assert plog.log_start_offset == 4
    assert log_files(plog) == [doze.segment_name(4), doze.segment_name(5)]
    assert [o for o, _ in plog.batches()] == [4, 5]
    clock.advance(100_000)                    # everything is too old, the active segment too
    logs.flush_dirty()
    logs.apply_retention()
    assert (plog.log_start_offset, plog.next_offset) == (6, 6)
    assert list(plog.batches()) == []
    assert append(logs, plog, [b"after"]) == 6


def test_storage_retention_runs_in_steps_of_bounded_time(open_logs, monkeypatch):
    """Over many partitions past their retention, retention yields between
    partitions once a step has used RETENTION_STEP_S (here: after each), and a
    topic deleted between two steps is skipped."""
    clock = FakeClock()
    logs = open_logs(clock=clock)
    now_ms = int(clock() * 1000)
    for name in ("a", "b"):
        doze.run_steps(logs.create_topic(name, 3, {"retention.ms": "1000"}))
        for p in range(3):
            append(logs, logs.get(name, p), [b"old"], timestamps=[now_ms])
    clock.advance(10_000)                                              # ms: past retention.ms
    monkeypatch.setattr(doze, "RETENTION_STEP_S", 0)
    steps = logs.retention_steps()
    next(steps)
    starts = lambda name: [logs.get(name, p).log_start_offset for p in range(3)]     # noqa: E731
    assert starts("a") == [1, 0, 0] and starts("b") == [0, 0, 0]        # one partition, then a yield
    logs.delete_topic("b")
    assert sum(1 for _ in steps) == 2                                  # a-1 and a-2; b is gone
    assert starts("a") == [1, 1, 1]


def test_storage_retention_forever_keeps_everything(open_logs):
    clock = FakeClock()
    logs = open_logs(clock=clock)
    plog = _one_batch_per_segment(logs, clock, [9000, 8000, 7000], retention_ms=-1)
    clock.advance(10 ** 9)
    logs.apply_retention()
    assert plog.log_start_offset == 0 and len(log_files(plog)) == 3


def test_storage_retention_by_size(open_logs):
    clock = FakeClock()
    logs = open_logs(clock=clock)
    plog = _one_batch_per_segment(logs, clock, [1] * 6)
    size = plog.segments[0].size
    logs.set_topic_configs("t", {"segment.bytes": "80", "retention.bytes": str(2 * size + 1)})
    logs.apply_retention()
    # Kafka's rule: delete the oldest segment while what stays is >= retention.bytes
    assert plog.log_start_offset == 3
    assert len(log_files(plog)) == 3


def test_storage_retention_never_deletes_unflushed_data(open_logs):
    clock = FakeClock()
    logs = open_logs(clock=clock)
    plog = new_topic(logs, retention_ms=1000)
    append(logs, plog, [b"x"], flush=False, timestamps=[0])
    logs.apply_retention()
    assert plog.next_offset == 1 and list(plog.batches(0, 1))
    logs.flush_dirty()
    logs.apply_retention()
    assert plog.log_start_offset == 1


def test_storage_delete_records_moves_log_start_and_survives_restart(open_logs):
    logs = open_logs()
    plog = new_topic(logs, segment_bytes=150)
    for i in range(6):
        append(logs, plog, [b"d%d" % i])
    delete_records_to(logs, plog, 3)
    assert plog.log_start_offset == 3
    assert plog.segments[0].base_offset < 3 < plog.segments[-1].base_offset + 10
    assert [o for o, _ in plog.batches(3)] == [3, 4, 5]
    plog2 = reopened(logs, open_logs)
    assert (plog2.log_start_offset, plog2.next_offset) == (3, 6)


def test_storage_delete_everything_keeps_the_offsets_going(open_logs):
    logs = open_logs()
    plog = new_topic(logs)
    for i in range(4):
        append(logs, plog, [b"z%d" % i])
    delete_records_to(logs, plog, 4)
    assert (plog.log_start_offset, plog.next_offset) == (4, 4)
    assert log_files(plog) == [doze.segment_name(4)]
    assert append(logs, plog, [b"again"]) == 4
    plog2 = reopened(logs, open_logs)
    assert (plog2.log_start_offset, plog2.next_offset) == (4, 5)


def test_storage_offset_for_timestamp(open_logs):
    logs = open_logs()
    plog = new_topic(logs)
    append(logs, plog, [b"a", b"b", b"c"], timestamps=[100, 300, 200])
    append(logs, plog, [b"d"], timestamps=[500])
    assert finish(plog.offset_for_timestamp(50)) == (0, 100)
    assert finish(plog.offset_for_timestamp(150)) == (1, 300)
    assert finish(plog.offset_for_timestamp(400)) == (3, 500)
    assert finish(plog.offset_for_timestamp(501)) is None
    assert finish(plog.offset_of_max_timestamp()) == (3, 500)


def test_storage_offset_for_timestamp_agrees_with_a_scan_of_every_record(open_logs):
    """Random timestamps, several segments, a log start inside a segment, and a
    restart (the running maximum is rebuilt from the index cache)."""
    rng = random.Random(4)
    logs = open_logs()
    plog = new_topic(logs, segment_bytes=900)
    records, offset = [], 0
    for b in range(60):
        ts = [rng.randrange(0, 2_000) for _ in range(rng.randrange(1, 4))]
        append(logs, plog, [b"v"] * len(ts), timestamps=ts)
        records += [(offset + i, t, b) for i, t in enumerate(ts)]
        offset += len(ts)
    delete_records_to(logs, plog, 17)
    for reopen in (False, True):
        if reopen:
            logs.close()
            logs = open_logs()
            plog = logs.get("t", 0)
        assert len(plog.segments) > 3
        for target in list(range(0, 2_100, 37)) + [t for _, t, _ in records[:20]]:
            assert finish(plog.offset_for_timestamp(target)) == \
                _brute_force_for_timestamp(records, target, 17), target
        top = max(t for _, t, _ in records)
        first_top = next(o for o, t, _ in records if t == top)
        assert finish(plog.offset_of_max_timestamp()) == (max(first_top, 17), top)


def test_storage_topic_directories_unknown_to_meta_db_are_removed(open_logs, tmp_path):
    logs = open_logs()
    new_topic(logs, "kept")
    logs.close()
    os.mkdir(tmp_path / "logs" / "ghost-0")
    logs2 = open_logs()
    assert not os.path.exists(tmp_path / "logs" / "ghost-0")
    assert "kept" in logs2.topics


def test_storage_creating_partitions_needs_no_fsync_per_partition(open_logs):
    """Empty partitions are made without an fsync each (a lost directory is made
    again on start); the data directory is fsynced once, by the next flush."""
    files = CountingFiles()
    logs = open_logs(files=files)
    new_topic(logs, "wide", 500)
    assert (files.fsyncs, files.dir_fsyncs) == (0, 0)
    logs.flush_dirty()
    assert (files.fsyncs, files.dir_fsyncs) == (0, 1)
    plog = logs.get("wide", 7)
    append(logs, plog, [b"x"])                   # the first append: file, partition dir
    assert (files.fsyncs, files.dir_fsyncs) == (1, 2)


@pytest.mark.parametrize("fail_errno", [errno.EMFILE, errno.ENOSPC])
def test_storage_failed_creation_leaves_no_directory_and_no_descriptor(open_logs, tmp_path, fail_errno):
    logs = open_logs(files=CountingFiles(fail_from=40, fail_errno=fail_errno))
    with pytest.raises(OSError):
        new_topic(logs, "half", 100)
    assert fds_under(tmp_path / "logs" / "half-") == 0
    assert not [d for d in os.listdir(tmp_path / "logs") if d.startswith("half-")]
    assert "half" not in logs.topics and not logs.creating
    assert all(tp[0] != "half" for tp in logs.logs)
    logs.files.fail_from = None
    new_topic(logs, "half", 3)                   # the name is free again
    assert logs.topics["half"].partitions == 3


def test_storage_open_descriptors_are_bounded(tmp_path):
    """300 partitions, each appended to and read back, with room for 32 descriptors."""
    config = doze.Config(None, data_dir=tmp_path / "d")
    os.makedirs(config.data_dir)
    store = doze.MetadataStore(os.path.join(config.data_dir, "meta.db"))
    logs = doze.LogManager(config, store, max_open_files=32)
    logs.load()
    new_topic(logs, "many", 300)
    for p in range(300):
        append(logs, logs.get("many", p), [b"v%d" % p])
    assert fds_under(os.path.join(config.data_dir, "many-")) <= 32
    for p in range(300):
        [(_, batch)] = logs.get("many", p).batches()
        assert batch_records(batch)[0][2] == b"v%d" % p
    slices = [logs.get("many", p).read(0, 1 << 20, 1) for p in range(300)]
    assert fds_under(os.path.join(config.data_dir, "many-")) <= 32 + 300       # handles held by pending answers
    assert [batch_records(s.read())[0][2] for s in slices[:3]] == [b"v0", b"v1", b"v2"]
    del slices
    assert fds_under(os.path.join(config.data_dir, "many-")) <= 32              # ... closed once let go
    logs.close()
    store.close()
    assert fds_under(os.path.join(config.data_dir, "many-")) == 0


def test_storage_deleted_topic_directories_go_in_steps_and_a_new_topic_may_reuse_the_name(open_logs, tmp_path):
    logs = open_logs()
    new_topic(logs, "gone", 200)
    logs.delete_topic("gone")
    assert len(logs.removing) == 200 and "gone" not in logs.topics
    logs.remove_some(50)
    assert len(logs.removing) == 150
    new_topic(logs, "gone", 2)                   # its partitions 0-1 are made afresh now
    append(logs, logs.get("gone", 1), [b"new"])
    while logs.removing:
        logs.remove_some()
    assert sorted(d for d in os.listdir(tmp_path / "logs") if d.startswith("gone-")) == ["gone-0", "gone-1"]
    assert [r[2] for _, b in logs.get("gone", 1).batches() for r in batch_records(b)] == [b"new"]


def test_storage_partition_directory_lost_is_recreated(open_logs, tmp_path):
    import shutil
    logs = open_logs()
    new_topic(logs, "t", partitions=2)
    logs.close()
    shutil.rmtree(tmp_path / "logs" / "t-1")
    logs2 = open_logs()
    assert logs2.get("t", 1).next_offset == 0
    assert os.path.isdir(tmp_path / "logs" / "t-1")


# --- Failing disks ------------------------------------------------------------------
# Injected through the Files layer: EIO on an fsync, ENOSPC on a write, a
# meta.db that refuses commits. Each gets Kafka's answer and loses nothing
# acknowledged; conformance/disk/check.py does the same on a real, small,
# full and then read-only file system.

def test_disk_fsync_eio_takes_the_partition_offline_and_never_retries(start_broker, tmp_path, caplog):
    """Verifies fsyncgate's rule: after EIO on an fsync the batch waiting on it
    is answered KAFKA_STORAGE_ERROR (never acknowledged), the fsync is not
    retried, every request naming the partition gets KAFKA_STORAGE_ERROR and
    Metadata shows it offline, while the other partition serves on; a restart
    on a sound disk brings it back with everything acknowledged."""
    files = doze.FaultyDisk()
    broker = start_broker(files=files)
    with RawClient(broker.port) as c:
        c.create_topic("sick", partitions=2)
        assert c.produce("sick", 0, make_batch([b"before"])).error_code == 0
        files.fail_fsyncs(str(tmp_path / "data" / "sick-0"), errno.EIO)
        failed = c.produce("sick", 0, make_batch([b"never acknowledged"]))
        assert (failed.error_code, failed.base_offset) == (ErrorCode.KAFKA_STORAGE_ERROR, -1)
        segment = str(tmp_path / "data" / "sick-0" / doze.segment_name(0))
        tried = files.fsyncs[segment]
        assert c.produce("sick", 0, make_batch([b"later"])).error_code == ErrorCode.KAFKA_STORAGE_ERROR
        assert c.fetch("sick", 0, 0).error_code == ErrorCode.KAFKA_STORAGE_ERROR
        assert c.list_offset("sick", 0, -1).error_code == ErrorCode.KAFKA_STORAGE_ERROR
        [part0, part1] = c.metadata(["sick"]).topics[0].partitions
        assert (part0.error_code, part0.leader_id, part0.offline_replicas) == \
            (ErrorCode.LEADER_NOT_AVAILABLE, -1, [broker.config["node.id"]])
        assert (part1.error_code, part1.leader_id) == (0, broker.config["node.id"])
        assert c.produce("sick", 1, make_batch([b"healthy"])).error_code == 0     # the rest is served
        assert c.values("sick", 1) == [(0, b"healthy")]
        loop_passes(broker, 3)                               # group commits that could have retried
        assert files.fsyncs[segment] == tried                # never retried-and-trusted
    assert sum("sick-0 is offline: fsync failed" in r.getMessage() for r in caplog.records) == 1
    stop(broker)
    broker = start_broker()                                  # a sound disk again
    with RawClient(broker.port) as c:
        got = [v for _, v in c.values("sick", 0)]
        assert got[0] == b"before" and b"later" not in got
        assert c.produce("sick", 0, make_batch([b"back"])).error_code == 0


def test_disk_fsync_eio_with_a_transaction_open_keeps_the_commit_for_the_restart(start_broker, tmp_path):
    """Verifies that a commit whose marker's fsync fails is not answered as
    done (CONCURRENT_TRANSACTIONS while the partition is offline) and is
    carried out whole after a restart on a sound disk."""
    files = doze.FaultyDisk()
    broker = start_broker(files=files)
    with RawClient(broker.port) as c:
        c.create_topic("sick-txn", partitions=2)
        txn = Txn(c, "sick-txn")
        assert set(txn.add(("sick-txn", 0), ("sick-txn", 1)).values()) == {0}
        assert txn.produce("sick-txn", 0, [b"a"]).error_code == 0
        assert txn.produce("sick-txn", 1, [b"b"]).error_code == 0
        files.fail_fsyncs(str(tmp_path / "data" / "sick-txn-1"), errno.EIO)
        with pytest.MonkeyPatch.context() as m:
            m.setattr(doze, "TXN_ANSWER_WAIT_MS", 300)
            assert txn.end(True) == ErrorCode.CONCURRENT_TRANSACTIONS
        assert describe_txn(c, "sick-txn").transaction_state == "PrepareCommit"
    stop(broker)
    broker = start_broker()
    with RawClient(broker.port) as c:
        assert wait_until(lambda: describe_txn(c, "sick-txn").transaction_state == "CompleteCommit")
        assert visible_values(c, "sick-txn", 0) == [b"a"] and visible_values(c, "sick-txn", 1) == [b"b"]


def test_disk_full_refuses_the_write_and_recovers_when_space_returns(start_broker, tmp_path, caplog):
    """Verifies ENOSPC: the produce is refused with KAFKA_STORAGE_ERROR, the
    file is cut back, nothing acknowledged is lost, and once there is room
    again the partition takes writes at the next offset, no restart needed."""
    caplog.set_level(logging.INFO, logger="doze_kafka")
    files = doze.FaultyDisk()
    broker = start_broker(files=files)
    with RawClient(broker.port) as c:
        c.create_topic("full")
        assert c.produce("full", 0, make_batch([b"one", b"two"])).error_code == 0
        files.fail_writes(str(tmp_path / "data" / "full-0"), errno.ENOSPC)
        for _ in range(3):
            assert c.produce("full", 0, make_batch([b"no room"])).error_code == ErrorCode.KAFKA_STORAGE_ERROR
        assert c.values("full", 0) == [(0, b"one"), (1, b"two")]
        assert c.metadata(["full"]).topics[0].partitions[0].error_code == 0       # online
        assert sum("full-0: a write was refused (No space left on device)" in r.getMessage()
                   for r in caplog.records) == 1                     # one line, not one a batch
        files.heal()
        assert c.produce("full", 0, make_batch([b"three"])).base_offset == 2
        assert any("full-0 takes writes again" in r.getMessage() for r in caplog.records)
        assert c.values("full", 0) == [(0, b"one"), (1, b"two"), (2, b"three")]
    stop(broker, clean=False)
    broker = start_broker()
    with RawClient(broker.port) as c:
        assert c.values("full", 0) == [(0, b"one"), (1, b"two"), (2, b"three")]


@pytest.mark.parametrize("error", ["attempt to write a readonly database", "database or disk is full",
                                   "disk I/O error"])
def test_disk_meta_db_refusing_writes_gets_kafkas_answers(start_broker, tmp_path, error):
    """Verifies a meta.db that cannot be written (read-only, full, failing):
    the coordinators answer NOT_COORDINATOR (Kafka's answer when their log
    refuses an append), InitProducerId COORDINATOR_LOAD_IN_PROGRESS or
    NOT_COORDINATOR, CreateTopics KAFKA_STORAGE_ERROR with nothing left; plain
    produce and fetch serve on; nothing in memory runs ahead of meta.db; and
    all works again once meta.db takes writes."""
    files = doze.FaultyDisk()
    broker = start_broker(files=files)
    with RawClient(broker.port) as c:
        c.create_topic("md")
        txn = Txn(c, "md-txn")
        assert commit_offsets(c, "md-g", {("md", 0): 1}) == {("md", 0): 0}
        files.fail_meta_db(error)
        assert commit_offsets(c, "md-g", {("md", 0): 5}) == {("md", 0): ErrorCode.NOT_COORDINATOR}
        assert committed_offsets(c, "md-g", [("md", 0)])[("md", 0)] == (0, 1)      # memory kept meta.db's
        assert txn.add(("md", 0)) == {("md", 0): ErrorCode.NOT_COORDINATOR}
        assert describe_txn(c, "md-txn").transaction_state == "Empty"
        [res] = c.create_topics(("md-new", 3, {}))
        assert res.error_code == ErrorCode.KAFKA_STORAGE_ERROR
        assert not any(name.startswith("md-new") for name in os.listdir(tmp_path / "data"))
        assert c.metadata(["md-new"], allow_auto_topic_creation=False).topics[0].error_code == \
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        assert c.produce("md", 0, make_batch([b"plain"])).error_code == 0          # the logs serve on
        files.heal()
        assert txn.add(("md", 0)) == {("md", 0): 0}
        [res] = c.create_topics(("md-new", 3, {}))
        assert res.error_code == 0
    assert broker.stopped.is_set() is False


###############################################################################
# 8. META.DB AND THE TOPICS -- the metadata store, every partition of every topic
###############################################################################


def test_meta_db_answers_wait_for_its_fsync_and_share_one(start_broker):
    """Verifies meta.db's group commit: an OffsetCommit (or AddPartitionsToTxn)
    is answered only once its change is fsynced, and twenty OffsetCommits sent
    at once cost far fewer than twenty fsyncs."""
    files = MetaSyncLog()
    broker = start_broker(files=files)
    with RawClient(broker.port) as c:
        c.create_topic("gc")
        files.sync_delay_s = 0.2
        del files.events[:]
        assert commit_offsets(c, "gc-g", {("gc", 0): 1}) == {("gc", 0): 0}
        assert files.events == ["commit", "sync"]        # the answer came after the fsync
        txn = Txn(c, "gc-txn")
        del files.events[:]
        assert txn.add(("gc", 0)) == {("gc", 0): 0}
        assert files.events == ["commit", "sync"]
        files.sync_delay_s = 0
        del files.events[:]
        frames = b"".join(c.encode(ApiKey.OFFSET_COMMIT, 8, 1000 + i, group_id="gc-g", generation_id_or_member_epoch=-1,
                                   member_id="", topics=[Msg(name="gc", partitions=[
                                       Msg(partition_index=0, committed_offset=i, committed_metadata="")])])
                           for i in range(20))
        c.sock.sendall(frames)
        for i in range(20):
            cid, r = c.receive(ApiKey.OFFSET_COMMIT, 8)
            assert (cid, r.topics[0].partitions[0].error_code) == (1000 + i, 0)
        assert files.events.count("commit") == 20 and files.events.count("sync") <= 4, files.events
        assert files.events[-1] == "sync"
        assert committed_offsets(c, "gc-g", [("gc", 0)])[("gc", 0)][1] == 19


def test_meta_db_wal_is_opened_once_for_all_its_fsyncs(tmp_path, monkeypatch):
    """Verifies meta.db's fsyncs keep meta.db-wal's descriptor open: ten synced
    changes open the file no more (its descriptor is the one kept), and closing
    the store lets it go."""
    store = doze.MetadataStore(str(tmp_path / "meta.db"))
    opened, real_open = [], os.open
    monkeypatch.setattr(doze.os, "open", lambda path, *a, **k: opened.append(path) or real_open(path, *a, **k))
    for i in range(10):
        store.set_settings({f"wal-test.{i}": str(i)})
    assert store.synced == store.commits >= 10
    assert not [p for p in opened if str(p).endswith("meta.db-wal")], opened
    [fd] = store.kept_fds.values()
    assert os.readlink(f"/proc/self/fd/{fd}") == str(tmp_path / "meta.db-wal")
    store.close()
    assert store.kept_fds == {} and fds_under(tmp_path) == 0


def test_meta_db_fsync_failing_sends_no_answer_that_waited_for_it(start_broker, caplog):
    """Verifies that when meta.db's fsync fails (EIO), the answer that waited
    for it is never sent -- its connection is closed -- and meta.db takes no
    more changes (NOT_COORDINATOR), while the logs serve on; a restart reads
    what meta.db holds."""
    files = MetaSyncLog()
    broker = start_broker(files=files)
    with RawClient(broker.port) as c:
        c.create_topic("sf")
        assert commit_offsets(c, "sf-g", {("sf", 0): 1}) == {("sf", 0): 0}
        files.sync_errno = errno.EIO
        c.send(ApiKey.OFFSET_COMMIT, 8, group_id="sf-g", generation_id_or_member_epoch=-1, member_id="",
               topics=[Msg(name="sf", partitions=[Msg(partition_index=0, committed_offset=5,
                                                       committed_metadata="")])])
        assert c.is_closed_by_broker()
    assert "could not be made durable" in caplog.text and "fsync of meta.db-wal failed" in caplog.text
    files.sync_errno = None                                # the disk is sound again: too late to trust
    with RawClient(broker.port) as c:
        assert commit_offsets(c, "sf-g", {("sf", 0): 7}) == {("sf", 0): ErrorCode.NOT_COORDINATOR}
        assert c.produce("sf", 0, make_batch([b"logs serve on"])).error_code == 0
    stop(broker)
    broker = start_broker()
    with RawClient(broker.port) as c:
        assert committed_offsets(c, "sf-g", [("sf", 0)])[("sf", 0)][1] in (1, 5)   # never told: either
        assert commit_offsets(c, "sf-g", {("sf", 0): 7}) == {("sf", 0): 0}


def test_disk_meta_db_damaged_at_start_says_so(tmp_path):
    """Verifies that a meta.db that is not a database stops the start with one
    clear line, not a traceback."""
    data = tmp_path / "data"
    data.mkdir()
    (data / "meta.db").write_bytes(b"this is not sqlite" * 100)
    r = subprocess.run([sys.executable, doze.__file__, "--data-dir", str(data), "--port", "0"],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 1
    assert "cannot start" in r.stderr and "meta.db cannot be used" in r.stderr and "damaged" in r.stderr
    assert "Traceback" not in r.stderr


def test_disk_meta_db_locked_by_another_process_is_answered_within_a_second(start_broker, tmp_path):
    """Verifies that a meta.db another process holds locked (here sqlite's own
    EXCLUSIVE lock, as a tool could) gets NOT_COORDINATOR after
    META_DB_BUSY_S, not a loop stalled for sqlite's default 5 s, and that
    commits work again once it lets go."""
    broker = start_broker()
    with RawClient(broker.port) as c:
        c.create_topic("lk")
        other = sqlite3.connect(str(tmp_path / "data" / "meta.db"), isolation_level=None)
        other.execute("BEGIN EXCLUSIVE")
        began = time.perf_counter()
        answer = commit_offsets(c, "lk-g", {("lk", 0): 5})
        took = time.perf_counter() - began
        assert answer == {("lk", 0): ErrorCode.NOT_COORDINATOR}
        assert took < doze.META_DB_BUSY_S + 1.5
        other.execute("ROLLBACK")
        other.close()
        assert commit_offsets(c, "lk-g", {("lk", 0): 5}) == {("lk", 0): 0}


###############################################################################
# 9. COORDINATORS -- producer state, classic groups
###############################################################################

def idem_header(seq, count=1, producer_id=7, epoch=0):
    return header_of(make_batch([b"x"] * count, producer_id=producer_id, producer_epoch=epoch,
                                base_sequence=seq))


GROUP_SETTINGS = {"group.initial.rebalance.delay.ms": 0}


class Coordinators:
    """The group and transaction coordinators over a real meta.db and real
    partition logs in data_dir, composed as Broker._compose composes them, with
    no socket, loop or Broker: the clock is a FakeClock, and the loop's group
    commit is group_commit(), by hand."""

    def __init__(self, data_dir, clock, settings=None):
        self.clock = clock
        self.config = doze.Config(settings, data_dir=data_dir, clock=clock)
        os.makedirs(self.config.data_dir, exist_ok=True)
        self.store = doze.MetadataStore(os.path.join(self.config.data_dir, "meta.db"))
        self.logs = doze.LogManager(self.config, self.store)
        self.logs.load()
        self.woken = []                         # what notify() was told: ("group", id), ("txn", id)
        self.producer_states = doze.ProducerStates(self.config, self.store, self.logs)
        self.producer_ids = doze.ProducerIdManager(self.store)
        self.groups = doze.GroupCoordinator(self.config, self.store, self.logs, self.woken.append)
        self.txns = doze.TransactionCoordinator(self.config, self.store, self.logs, self.groups,
                                                self.producer_states, self.producer_ids, self.woken.append)
        self.txns.load()
        self.closed = False

    def group_commit(self):
        """GroupCommit.run's steps (§21): meta.db's fsync; the markers of the
        decisions now durable; the logs' fsync, which moves high watermarks;
        then the decisions whose markers are all durable are completed."""
        self.store.sync()
        if self.txns.completing:
            self.txns.progress()
        self.logs.flush_dirty()
        if self.txns.completing:
            self.txns.progress()
        self.store.sync()

    def produce(self, meta, tp, values, seq=0):
        """A transactional batch of meta's producer, appended as Produce appends
        one (§14's produce_partition and verify_producer) -> its base offset."""
        self.txns.check_produce(meta.transactional_id, meta.producer_id, meta.producer_epoch, tp)
        batch = bytearray(make_batch(values, producer_id=meta.producer_id, producer_epoch=meta.producer_epoch,
                                     base_sequence=seq, attributes=doze.ATTR_TRANSACTIONAL))
        h = doze.validate_produced(batch)
        self.producer_states.mark_transactional([tp])
        state = self.producer_states.of(tp)
        assert state.check_append(h) is None
        base = self.logs.append(self.logs.get(*tp), batch, h)
        state.update(h, base)
        return base

    def offsets(self, tp):
        """(last stable offset, high watermark) of a partition."""
        plog = self.logs.get(*tp)
        return self.producer_states.last_stable_offset(plog), plog.high_watermark

    def batches(self, tp):
        """[(base offset, the values, or "COMMIT"/"ABORT" for a marker)] of a
        partition's log, durable or not."""
        out = []
        for base, batch in self.logs.get(*tp).batches():
            if header_of(batch).attributes & doze.ATTR_CONTROL:
                out.append((base, "COMMIT" if doze.control_type(batch) == doze.CONTROL_COMMIT else "ABORT"))
            else:
                out.append((base, [v for _, _, v, _ in batch_records(batch)]))
        return out

    def close(self, clean=True):
        """clean=False: as a kill -9 leaves them (nothing more of the logs fsynced)."""
        self.logs.close(clean)
        self.store.close()
        self.closed = True


@pytest.fixture
def coordinators(tmp_path):
    """coordinators(settings=None) -> a Coordinators on tmp_path/"coordinators",
    every one on the same FakeClock; after .close(clean=False), calling it
    again is a restart over the same meta.db and logs."""
    clock, opened = FakeClock(), []

    def open_(settings=None):
        c = Coordinators(tmp_path / "coordinators", clock, settings)
        opened.append(c)
        return c
    yield open_
    for c in opened:
        if not c.closed:
            c.close()


def group_join(groups, group_id, member_id="", instance=None, protocols=(("range", b"sub"),)):
    """GroupCoordinator.join as JoinGroup v4+ calls it -> (member, immediate answer or None)."""
    return groups.join(group_id, member_id, instance, "app", "/127.0.0.1", 6000, 6000, "consumer",
                       list(protocols), True)


def stable_member(groups, group_id):
    """A group's only member, joined (KIP-394's two joins) and synced: the group is Stable."""
    _, first = group_join(groups, group_id)
    m, _ = group_join(groups, group_id, first.member_id)
    _, synced = groups.sync(group_id, m.join_result.generation_id, m.member_id, None, "consumer", "range",
                            [Msg(member_id=m.member_id, assignment=b"all")])
    assert synced.error_code == 0 and groups.get(group_id).state == doze.GroupState.STABLE
    return m


# --- Producer state (idempotence), no sockets --------------------------------------

def test_producer_state_unknown_producer_takes_any_sequence():
    table = doze.ProducerStateTable()
    assert table.check(idem_header(42)) is None


def test_producer_state_duplicate_is_recognised_with_its_offsets():
    table = doze.ProducerStateTable()
    h = idem_header(0, count=3)
    table.update(h, 10)
    assert table.check(h) == (10, 12)
    h2 = idem_header(3, count=2)
    assert table.check(h2) is None
    table.update(h2, 13)
    assert table.check(h) == (10, 12) and table.check(h2) == (13, 14)


@pytest.mark.parametrize("seq", [2, 4, 100])
def test_producer_state_gap_is_out_of_order(seq):
    table = doze.ProducerStateTable()
    table.update(idem_header(0, count=3), 0)
    with pytest.raises(doze.KafkaError) as e:
        table.check(idem_header(seq))
    assert e.value.code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


def test_producer_state_expiry_forgets_idle_producers_and_old_verifications():
    """producer.id.expiration.ms, as Kafka's removeExpiredProducers: a producer
    whose last batch is older is forgotten (a timestamp of -1 too), and so is
    a verification noted that long ago; newer ones, and an open transaction, stay."""
    table = doze.ProducerStateTable()
    table.update(idem_header(0, producer_id=1)._replace(max_timestamp=-1), 0)
    table.update(idem_header(0, producer_id=2)._replace(max_timestamp=10_000), 1)
    table.update(idem_header(0, producer_id=5)._replace(max_timestamp=-1, attributes=doze.ATTR_TRANSACTIONAL), 2)
    table.note_verification(3, 0, 0, now_ms=1_000)
    table.note_verification(4, 0, 0, now_ms=9_000)
    table.expire(now_ms=11_000, expiration_ms=5_000)
    assert set(table.producers) == {2, 5} and set(table.verifying) == {4}


def test_producer_state_older_epoch_is_fenced():
    table = doze.ProducerStateTable()
    table.update(idem_header(0, epoch=3), 0)
    with pytest.raises(doze.KafkaError) as e:
        table.check(idem_header(1, epoch=2))
    assert e.value.code == ErrorCode.INVALID_PRODUCER_EPOCH


def test_producer_state_aborted_between_equals_a_scan_of_every_aborted_transaction():
    """Interleaved transactions of 6 producers, some aborted: the early stop of
    aborted_between (Kafka's stable-offset rule) never drops one a brute-force
    scan (marker at or after the fetch offset, first offset below the bound) lists."""
    rng = random.Random(11)
    table, offset, opened, aborted = doze.ProducerStateTable(), 0, {}, []
    for _ in range(600):
        pid = rng.randrange(6)
        if pid not in opened:
            h = idem_header(0, producer_id=pid)._replace(attributes=doze.ATTR_TRANSACTIONAL)
            table.producers.pop(pid, None)
            table.update(h, offset)
            opened[pid] = offset
        else:
            commit = rng.random() < 0.5
            table.apply_marker(pid, 0, commit, offset, 0)
            if not commit:
                aborted.append((pid, opened[pid], offset))
            del opened[pid]
        offset += 1
    for _ in range(300):
        fetch = rng.randrange(offset)
        upper = fetch + rng.randrange(1, 80)
        want = [(p, f) for p, f, m in aborted if m >= fetch and f < upper]
        assert table.aborted_between(fetch, upper) == want, (fetch, upper)
    table.forget_before(300)
    assert table.aborted_between(0, offset) == [(p, f) for p, f, m in aborted if m >= 300]


def test_producer_state_new_epoch_starts_at_zero():
    table = doze.ProducerStateTable()
    table.update(idem_header(0, epoch=0), 0)
    assert table.check(idem_header(0, epoch=1)) is None
    with pytest.raises(doze.KafkaError) as e:
        table.check(idem_header(5, epoch=1))
    assert e.value.code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


def test_producer_state_remembers_only_five_batches():
    table = doze.ProducerStateTable()
    for i in range(6):
        table.update(idem_header(i), i)
    assert table.check(idem_header(1)) == (1, 1)
    with pytest.raises(doze.KafkaError):
        table.check(idem_header(0))          # fell out of the window: not a known duplicate


def test_producer_state_sequence_wraps_at_int32_max():
    table = doze.ProducerStateTable()
    table.update(idem_header(doze.INT32_MAX - 1, count=2), 0)
    assert table.check(idem_header(0)) is None
    with pytest.raises(doze.KafkaError):
        table.check(idem_header(1))


# --- The coordinators without sockets or a Broker: their methods, a FakeClock, tick() --

def test_coordinators_group_join_sync_heartbeat_then_the_session_timeout_by_tick(coordinators):
    c = coordinators(GROUP_SETTINGS)
    start_ms = c.groups.now_ms()
    member, first = group_join(c.groups, "g")
    assert member is None and first.error_code == ErrorCode.MEMBER_ID_REQUIRED      # KIP-394: the id first
    m, answer = group_join(c.groups, "g", first.member_id)
    assert answer is None                                                        # answered by join_result
    assert (m.join_result.error_code, m.join_result.generation_id, m.join_result.leader,
            m.join_result.protocol_name) == (0, 1, m.member_id, "range")
    assert [(x.member_id, x.metadata) for x in m.join_result.members] == [(m.member_id, b"sub")]
    g = c.groups.get("g")
    assert g.state == doze.GroupState.COMPLETING_REBALANCE
    _, synced = c.groups.sync("g", 1, m.member_id, None, "consumer", "range",
                              [Msg(member_id=m.member_id, assignment=b"mine")])
    assert (synced.error_code, synced.assignment, g.state) == (0, b"mine", doze.GroupState.STABLE)
    assert ("group", "g") in c.woken
    [(group_id, stored, _)] = c.store.load_groups()
    assert (group_id, stored["generation"], [x["member_id"] for x in stored["members"]]) == ("g", 1, [m.member_id])
    c.clock.advance(5000)
    c.groups.heartbeat("g", 1, m.member_id, None)                                # the session starts again
    with pytest.raises(doze.KafkaError) as e:
        c.groups.heartbeat("g", 7, m.member_id, None)
    assert e.value.code == ErrorCode.ILLEGAL_GENERATION
    c.clock.advance(5500)
    assert c.groups.tick() == start_ms + 11_000 == g.members[m.member_id].deadline_ms   # next tick: its deadline
    assert g.state == doze.GroupState.STABLE
    c.clock.advance(500)                                                         # the deadline itself
    c.groups.tick()
    assert (g.state, g.members, g.generation) == (doze.GroupState.EMPTY, {}, 2)
    with pytest.raises(doze.KafkaError) as e:
        c.groups.heartbeat("g", 2, m.member_id, None)
    assert e.value.code == ErrorCode.UNKNOWN_MEMBER_ID
    [(_, stored, _)] = c.store.load_groups()
    assert (stored["generation"], stored["members"]) == (2, [])


def test_coordinators_group_a_second_member_rebalances_the_group(coordinators):
    c = coordinators(GROUP_SETTINGS)
    a = stable_member(c.groups, "g")
    _, first = group_join(c.groups, "g")
    b, answer = group_join(c.groups, "g", first.member_id)
    g = c.groups.get("g")
    assert (answer, b.join_result, g.state) == (None, None, doze.GroupState.PREPARING_REBALANCE)   # b waits for a
    with pytest.raises(doze.KafkaError) as e:
        c.groups.heartbeat("g", 1, a.member_id, None)
    assert e.value.code == ErrorCode.REBALANCE_IN_PROGRESS
    a, answer = group_join(c.groups, "g", a.member_id)                            # a joins again: all are in
    assert answer is None and (a.join_result.generation_id, b.join_result.generation_id) == (2, 2)
    assert a.join_result.leader == b.join_result.leader == a.member_id
    assert sorted(x.member_id for x in a.join_result.members) == sorted([a.member_id, b.member_id])
    assert b.join_result.members == []                                           # only the leader sees them
    _, waiting = c.groups.sync("g", 2, b.member_id, None, "consumer", "range", [])
    assert waiting is None and g.state == doze.GroupState.COMPLETING_REBALANCE
    _, led = c.groups.sync("g", 2, a.member_id, None, "consumer", "range", [
        Msg(member_id=a.member_id, assignment=b"p0"), Msg(member_id=b.member_id, assignment=b"p1")])
    assert (led.assignment, b.sync_result.assignment, g.state) == (b"p0", b"p1", doze.GroupState.STABLE)


def test_coordinators_group_a_static_member_rejoins_with_its_assignment_and_survives_a_restart(coordinators):
    c = coordinators(GROUP_SETTINGS)
    m, answer = group_join(c.groups, "g", instance="i-1")
    assert answer is None and m.join_result.generation_id == 1                  # static: no MEMBER_ID_REQUIRED
    c.groups.sync("g", 1, m.member_id, "i-1", "consumer", "range", [Msg(member_id=m.member_id, assignment=b"mine")])
    back, answer = group_join(c.groups, "g", instance="i-1", protocols=(("range", b"restarted"),))
    g = c.groups.get("g")
    assert back.member_id != m.member_id and g.static == {"i-1": back.member_id}
    assert (answer.error_code, answer.generation_id, answer.leader, answer.skip_assignment, g.state) == (
        0, 1, back.member_id, True, doze.GroupState.STABLE)                     # no rebalance (KIP-345, KIP-814)
    _, synced = c.groups.sync("g", 1, back.member_id, "i-1", "consumer", "range", [])
    assert synced.assignment == b"mine"
    with pytest.raises(doze.KafkaError) as e:
        c.groups.heartbeat("g", 1, m.member_id, "i-1")
    assert e.value.code == ErrorCode.FENCED_INSTANCE_ID
    c.close(clean=False)
    again = coordinators(GROUP_SETTINGS)                                         # the stored group carries on
    g = again.groups.get("g")
    assert (g.state, g.generation, list(g.members), g.static) == (
        doze.GroupState.STABLE, 1, [back.member_id], {"i-1": back.member_id})
    again.groups.heartbeat("g", 1, back.member_id, "i-1")
    assert g.members[back.member_id].assignment == b"mine"


def test_coordinators_group_offsets_commit_checks_and_retention(coordinators):
    c = coordinators(dict(GROUP_SETTINGS, **{"offsets.retention.minutes": 1}))
    entry = doze.OffsetEntry(5, -1, "", c.groups.now_ms())
    c.groups.check_commit("simple", -1, "", None)                                 # no group: a simple commit
    c.groups.commit("simple", {("t", 0): entry})
    assert c.groups.fetch_offsets("simple", None) == {("t", 0): entry}
    m = stable_member(c.groups, "live")
    for generation, member_id, code in [(2, m.member_id, ErrorCode.ILLEGAL_GENERATION),
                                        (1, "ghost", ErrorCode.UNKNOWN_MEMBER_ID),
                                        (-1, "", ErrorCode.UNKNOWN_MEMBER_ID)]:   # a live group: members only
        with pytest.raises(doze.KafkaError) as e:
            c.groups.check_commit("live", generation, member_id, None)
        assert e.value.code == code, (generation, member_id)
    c.groups.check_commit("live", 1, m.member_id, None)
    c.clock.advance(59_000)
    c.groups.expire_offsets()
    assert c.groups.fetch_offsets("simple", None) == {("t", 0): entry}
    c.clock.advance(1_000)                                                       # offsets.retention.minutes
    c.groups.expire_offsets()
    assert c.groups.get("simple") is None and c.groups.fetch_offsets("simple", None) == {}
    assert [g for g, _, _ in c.store.load_groups()] == ["live"]


###############################################################################
# 10. LOG COMPACTION -- compacted topics kept to the latest value of each key
###############################################################################

def put(c, tp, records, producer_id=-1, epoch=-1, sequence=-1, attributes=0):
    """Append one batch of [(key, value)] to a partition as Produce would
    (its producer's state kept) -> its base offset."""
    batch = bytearray(doze.build_batch([(k, v, ()) for k, v in records], 0, 1_000, producer_id, epoch,
                                       sequence, attributes))
    h = doze.read_batch_header(batch)
    base = c.logs.append(c.logs.get(*tp), batch, h)
    if producer_id >= 0:
        c.producer_states.of(tp).update(h, base)
    return base


def cleaner_of(c):
    return doze.LogCleaner(c.config, c.store, c.logs, c.producer_states, doze.Journal(c.clock))


def clean_once(c, cleaner=None):
    """One pass of the cleaner, to its end -> the pass (None: nothing to clean)."""
    cleaner = cleaner or cleaner_of(c)
    found = cleaner.filthiest()
    if found is None:
        return None
    cleaning = doze.CleaningPass(cleaner, *found, cleaner.now_ms())
    cleaner.finished(cleaning, doze.run_steps(cleaning.run()), 0.0)
    return cleaning


def kept(c, tp):
    """[(offset, key, value)] of every record left, and the control batches as (offset, "COMMIT"/"ABORT")."""
    out = []
    for base, batch in c.logs.get(*tp).batches():
        h = header_of(batch)
        if h.attributes & doze.ATTR_CONTROL:
            kind = doze.control_type(batch)
            out.append((base, {doze.CONTROL_COMMIT: "COMMIT", doze.CONTROL_ABORT: "ABORT", None: "empty"}[kind]))
        else:
            out += [(base + d, k, v) for d, _, k, v, _ in doze.decode_records(batch)]
    return out


COMPACT = {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.0"}


def test_cleaner_keeps_the_latest_of_each_key_at_its_offset_and_touches_no_active_segment(coordinators):
    c = coordinators()
    new_topic(c.logs, "kv", **{k.replace(".", "_"): v for k, v in COMPACT.items()})
    tp, plog = ("kv", 0), c.logs.get("kv", 0)
    put(c, tp, [(b"a", b"1"), (b"b", b"1")])                     # 0, 1
    put(c, tp, [(b"a", b"2")])                                   # 2
    put(c, tp, [(None, b"keyless"), (b"c", b"1")])               # 3, 4: keyless goes
    plog.roll()
    put(c, tp, [(b"a", b"3")])                                   # 5: the active segment, untouched
    c.group_commit()
    before = plog.next_offset
    cleaning = clean_once(c)
    assert (cleaning.first_dirty, cleaning.end) == (0, 5)
    assert kept(c, tp) == [(1, b"b", b"1"), (2, b"a", b"2"), (4, b"c", b"1"), (5, b"a", b"3")]
    assert plog.next_offset == before and plog.log_start_offset == 0
    assert cleaning.stats["records_removed"] == 2 and cleaning.stats["bytes_after"] < cleaning.stats["bytes_before"]
    assert c.store.cleaner_checkpoint("kv", 0) == 5
    assert clean_once(c) is None                                 # nothing dirty below the active segment
    assert [b for b, _ in c.logs.get(*tp).batches(3)] == [3, 5]  # a read inside a gap finds the next batch


def test_cleaner_tombstones_stay_until_their_delete_horizon_then_go(coordinators):
    c = coordinators()
    new_topic(c.logs, "kv", delete_retention_ms=1000, **{k.replace(".", "_"): v for k, v in COMPACT.items()})
    tp, plog = ("kv", 0), c.logs.get("kv", 0)
    put(c, tp, [(b"a", b"1"), (b"b", b"1")])
    put(c, tp, [(b"a", None)])                                   # 2: a's tombstone
    plog.roll()
    put(c, tp, [(b"x", b"1")])
    c.group_commit()
    clean_once(c)
    assert kept(c, tp) == [(1, b"b", b"1"), (2, b"a", None), (3, b"x", b"1")]
    h = header_of(next(batch for base, batch in plog.batches() if base == 2))
    assert h.attributes & doze.ATTR_DELETE_HORIZON and h.base_timestamp == c.clock() * 1000 + 1000    # KIP-534
    plog.roll()
    put(c, tp, [(b"y", b"1")])
    c.group_commit()
    clean_once(c)
    assert (2, b"a", None) in kept(c, tp)                        # before its horizon: kept
    c.clock.advance(1500)
    plog.roll()
    put(c, tp, [(b"z", b"1")])
    c.group_commit()
    clean_once(c)
    assert [r for r in kept(c, tp) if r[1] == b"a"] == []        # after it: gone, and a with it


def test_cleaner_removes_aborted_records_keeps_markers_while_their_data_stays_and_each_producers_last_batch(
        coordinators):
    """Aborted records go at once; a marker stays while its transaction has a
    batch, then gets a delete horizon; an idempotent producer's last batch
    stays as a header, so a restart's rebuild still knows its sequence."""
    c = coordinators()
    new_topic(c.logs, "kv", **{k.replace(".", "_"): v for k, v in COMPACT.items()})
    tp, plog = ("kv", 0), c.logs.get("kv", 0)
    for tid, key, commit in (("tx-a", b"never", False), ("tx-c", b"kept", True)):
        meta = begin(c, tid, [tp])
        put(c, tp, [(key, b"v")], meta.producer_id, meta.producer_epoch, 0, doze.ATTR_TRANSACTIONAL)
        c.txns.end_txn(meta, commit)
        c.group_commit()                                         # 0 data, 1 ABORT; 2 data, 3 COMMIT
    put(c, tp, [(b"k", b"1")], producer_id=77, epoch=0, sequence=0)      # 4: an idempotent producer
    put(c, tp, [(b"k", b"2")], producer_id=77, epoch=0, sequence=1)      # 5: its last batch
    put(c, tp, [(b"k", b"3")])                                   # 6: supersedes both
    plog.roll()
    put(c, tp, [(b"end", b"1")])
    c.group_commit()
    clean_once(c)
    assert kept(c, tp) == [(1, "ABORT"), (2, b"kept", b"v"), (3, "COMMIT"), (6, b"k", b"3"), (7, b"end", b"1")]
    batches = {base: header_of(b) for base, b in plog.batches()}
    assert not batches[1].attributes & doze.ATTR_DELETE_HORIZON                # its data was there this pass
    assert batches[5].records_count == 0 and batches[5].base_sequence == 1     # 77's last batch: a header
    assert 4 not in batches
    assert doze.rebuild_producer_state(plog, True).producers[77].last_seq == 1  # a restart's rebuild knows it
    assert batches[0].records_count == 0          # tx-a's aborted batch: its producer's last, so a header...
    meta = c.txns.txns["tx-a"]                    # ... until that producer writes again
    c.txns.add_partitions(meta, [tp])
    put(c, tp, [(b"again", b"v")], meta.producer_id, meta.producer_epoch, 1, doze.ATTR_TRANSACTIONAL)
    c.txns.end_txn(meta, True)
    c.group_commit()
    plog.roll()
    put(c, tp, [(b"end", b"2")])
    c.group_commit()
    clean_once(c)
    batches = {base: header_of(b) for base, b in plog.batches()}
    assert 0 not in batches and not batches[1].attributes & doze.ATTR_DELETE_HORIZON   # its data read this pass
    plog.roll()
    put(c, tp, [(b"end", b"3")])
    c.group_commit()
    clean_once(c)
    batches = {base: header_of(b) for base, b in plog.batches()}
    assert batches[1].attributes & doze.ATTR_DELETE_HORIZON      # the next: no data left, a horizon (Kafka: 3 passes)
    assert [a for a in c.producer_states.of(tp).aborted if a[2] == 1] == []   # and no longer indexed: a
    # read_committed Fetch lists no aborted transaction whose data is gone (else its producer's next,
    # committed, transaction would be skipped once the marker goes)
    assert not batches[3].attributes & doze.ATTR_DELETE_HORIZON                # tx-c's data (a header) stays


def test_cleaner_swap_interrupted_at_every_rename_leaves_the_old_log_or_the_new(coordinators, tmp_path):
    """A crash at each rename of the swap: the next start finds the old
    segments or the cleaned one, never both, never neither."""
    for crash_at in range(1, 8):
        class CrashAt(doze.Files):
            renames = 0

            def rename(self, src, dst):
                CrashAt.renames += 1
                if CrashAt.renames == crash_at:
                    raise OSError(errno.EIO, "crash")
                super().rename(src, dst)
        data = tmp_path / f"crash-{crash_at}"
        config = doze.Config(None, data_dir=data)
        os.makedirs(config.data_dir)
        store = doze.MetadataStore(os.path.join(config.data_dir, "meta.db"))
        logs = doze.LogManager(config, store, CrashAt())
        logs.load()
        new_topic(logs, "kv", **{k.replace(".", "_"): v for k, v in COMPACT.items()})
        plog = logs.get("kv", 0)
        for i, (key, value) in enumerate([(b"a", b"0"), (b"a", b"1"), (b"a", b"2"), (b"b", b"x")]):
            batch = doze.build_batch([(key, value, ())])
            logs.append(plog, bytearray(batch), header_of(batch))
            if i < 3:
                plog.roll()
        logs.flush_dirty()
        states = doze.ProducerStates(config, store, logs)
        cleaner = doze.LogCleaner(config, store, logs, states, doze.Journal(time.time))
        found = cleaner.filthiest()
        try:
            doze.run_steps(doze.CleaningPass(cleaner, *found, cleaner.now_ms()).run())
        except OSError:
            pass
        logs.close(clean=False)
        store.close()
        store = doze.MetadataStore(os.path.join(config.data_dir, "meta.db"))
        logs = doze.LogManager(config, store)
        logs.load()
        values = [(b + d, v) for b, batch in logs.get("kv", 0).batches() for d, _, _, v, _ in doze.decode_records(batch)]
        assert values in ([(0, b"0"), (1, b"1"), (2, b"2"), (3, b"x")], [(2, b"2"), (3, b"x")]), (crash_at, values)
        assert not [n for n in os.listdir(logs.get("kv", 0).dir) if n.endswith((".cleaned", ".swap", ".deleted"))]
        logs.close()
        store.close()


def test_cleaner_runs_on_the_broker_loop_and_a_compacted_topic_stops_growing(start_broker):
    broker = start_broker({"log.cleaner.backoff.ms": 50})
    with RawClient(broker.port) as c:
        c.create_topic("table", 1, cleanup_policy="compact", min_cleanable_dirty_ratio="0.0", segment_ms=100)
        written = 0
        for round_ in range(4):
            for key in range(20):
                batch = make_batch([b"v%d" % round_], keys=[b"k%d" % key])
                assert c.produce("table", 0, batch).error_code == 0
                written += len(batch)
            time.sleep(0.15)                                     # segment.ms: the next append rolls
        assert c.produce("table", 0, make_batch([b"last"], keys=[b"k0"])).error_code == 0

        def size():                            # what kafka-log-dirs --describe shows
            r = c.call(ApiKey.DESCRIBE_LOG_DIRS, 4, topics=[Msg(topic="table", partitions=[0])])
            [result] = r.results
            assert result.log_dir == broker.config.data_dir and result.usable_bytes > 0
            return result.topics[0].partitions[0].partition_size
        assert 0 < size() <= written + 100
        wait_until(lambda: size() < written * 0.4, timeout_s=10)           # 21 records of 81 left
        got = {}
        for base, batch in broker.run_in_loop(lambda: list(broker.logs.get("table", 0).batches())):
            for d, _, k, v, _ in doze.decode_records(batch):
                got[k] = v
        assert got == {**{b"k%d" % i: b"v3" for i in range(20)}, b"k0": b"last"}


###############################################################################
# 11. THE CONSUMER GROUP PROTOCOL -- KIP-848: the broker assigns; groups of both kinds
###############################################################################
# Kafka 4.3.1's answers, step by step, are the recordings replayed in section C
# (consumer-group-*); these tests add what a recording cannot: the clock, a
# restart, and the assignors' balance.

def cg_heartbeat(c, member, epoch, topics=None, owned=None, group="g", **more):
    """One ConsumerGroupHeartbeat v1 -> its answer."""
    return c.call(ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, group_id=group, member_id=member, member_epoch=epoch,
                  rebalance_timeout_ms=more.pop("rebalance_timeout_ms", 30000 if epoch == 0 else -1),
                  subscribed_topic_names=topics, topic_partitions=owned, **more)


def partitions_of(answer):
    return None if answer.assignment is None else sorted(p for t in answer.assignment.topic_partitions
                                                         for p in t.partitions)


def owning(answer):
    """What a member reports it owns after taking its assignment."""
    return [Msg(topic_id=t.topic_id, partitions=t.partitions) for t in answer.assignment.topic_partitions]


def test_consumer_group_member_missing_its_session_timeout_is_fenced_and_its_partitions_move(tmp_path):
    with doze.running({"group.consumer.assignment.interval.ms": 0}, data_dir=str(tmp_path)) as b, \
            RawClient(b.port) as c:
        c.create_topic("orders", 4)
        a = cg_heartbeat(c, "a", 0, ["orders"], [])
        bb = cg_heartbeat(c, "b", 0, ["orders"], [])
        a = cg_heartbeat(c, "a", a.member_epoch, owned=owning(a))           # a revokes two
        a = cg_heartbeat(c, "a", a.member_epoch, owned=owning(a))
        bb = cg_heartbeat(c, "b", bb.member_epoch, owned=[])
        got = c.call(ApiKey.CONSUMER_GROUP_DESCRIBE, 1, group_ids=["g"], include_authorized_operations=False)
        assert {m.member_id: [p for t in m.assignment.topic_partitions for p in t.partitions]
                for m in got.groups[0].members} == {"a": [0, 1], "b": [2, 3]}
        b.advance(30000)
        a = cg_heartbeat(c, "a", a.member_epoch)                            # a stays alive
        b.advance(15001)                                                 # b: 45 s without a heartbeat
        group = c.call(ApiKey.CONSUMER_GROUP_DESCRIBE, 1, group_ids=["g"],
                       include_authorized_operations=False).groups[0]
        assert [m.member_id for m in group.members] == ["a"] and group.group_epoch == 4
        a = cg_heartbeat(c, "a", a.member_epoch, owned=[])
        assert (a.member_epoch, partitions_of(a)) == (4, [0, 1, 2, 3])


def test_consumer_group_member_that_does_not_revoke_in_its_rebalance_timeout_is_fenced(tmp_path):
    with doze.running({"group.consumer.assignment.interval.ms": 0}, data_dir=str(tmp_path)) as b, \
            RawClient(b.port) as c:
        c.create_topic("orders", 2)
        a = cg_heartbeat(c, "a", 0, ["orders"], [], rebalance_timeout_ms=5000)
        cg_heartbeat(c, "b", 0, ["orders"], [])
        a = cg_heartbeat(c, "a", a.member_epoch, owned=[Msg(topic_id=t.topic_id, partitions=[0, 1])
                                                     for t in a.assignment.topic_partitions])
        assert partitions_of(a) == [0]                                   # asked to give one up
        b.advance(5001)
        assert cg_heartbeat(c, "a", a.member_epoch).error_code == ErrorCode.UNKNOWN_MEMBER_ID


def test_consumer_group_epochs_and_assignments_survive_a_restart(tmp_path):
    with doze.running({"group.consumer.assignment.interval.ms": 0}, data_dir=str(tmp_path)) as b:
        with RawClient(b.port) as c:
            c.create_topic("orders", 3)
            a = cg_heartbeat(c, "a", 0, ["orders"], [], instance_id="app-1")
            before = c.call(ApiKey.CONSUMER_GROUP_DESCRIBE, 1, group_ids=["g"],
                            include_authorized_operations=False).groups[0]
        b.restart("kill")
        with RawClient(b.port) as c:
            after = c.call(ApiKey.CONSUMER_GROUP_DESCRIBE, 1, group_ids=["g"],
                           include_authorized_operations=False).groups[0]
            assert after == before
            steady = cg_heartbeat(c, "a", a.member_epoch, instance_id="app-1")
            assert (steady.error_code, steady.member_epoch, steady.assignment) == (0, a.member_epoch, None)
            listed = c.call(ApiKey.LIST_GROUPS, 5, states_filter=[], types_filter=["consumer"]).groups
            assert [(g.group_id, g.group_type, g.group_state) for g in listed] == [("g", "consumer", "Stable")]


def test_classic_group_upgraded_by_a_consumer_member_answers_a_parked_join_rebalance_in_progress(tmp_path):
    """A classic group mid-rebalance (a JoinGroup parked for the others) meets
    its first ConsumerGroupHeartbeat: it becomes a consumer group and the
    parked JoinGroup is answered REBALANCE_IN_PROGRESS (Kafka's
    convertToConsumerGroup), so the classic member rejoins the new group."""
    subscription = struct.pack(">hih", 0, 1, 1) + b"t" + struct.pack(">i", -1)      # v0: [t], no user data
    assignment = struct.pack(">hih", 0, 1, 1) + b"t" + struct.pack(">iii", 2, 0, 1) + struct.pack(">i", -1)
    with doze.running({"group.consumer.assignment.interval.ms": 0}, data_dir=str(tmp_path)) as b, \
            RawClient(b.port) as c, RawClient(b.port) as other:
        c.create_topic("t", 2)
        a = join(c, "g", protocols=(("range", subscription),))
        assert receive(c, ApiKey.SYNC_GROUP, send_sync(c, "g", a.generation_id, a.member_id,
                                                         {a.member_id: assignment})).error_code == 0
        parked = send_join(other, "g", member_id="", protocols=(("range", subscription),), version=3)
        assert b.wait_until(lambda b: b.look(lambda v: v.group("g"))["group_state"] == "PreparingRebalance")
        m = cg_heartbeat(c, "m", 0, ["t"], [])
        assert m.error_code == 0 and m.member_epoch == a.generation_id + 1
        assert receive(other, ApiKey.JOIN_GROUP, parked).error_code == ErrorCode.REBALANCE_IN_PROGRESS
        described = c.call(ApiKey.CONSUMER_GROUP_DESCRIBE, 1, group_ids=["g"],
                           include_authorized_operations=False).groups[0]
        types = {x.member_id: x.member_type for x in described.members}
        assert types[a.member_id] == 0 and types["m"] == 1 and sorted(types.values()) == [0, 0, 1]  # the parked too


def test_consumer_group_follows_its_topics_growing_and_going(tmp_path):
    """Partitions added to a subscribed topic, and a subscribed topic deleted,
    move the assignment at the next heartbeat (Kafka's metadata hash)."""
    with doze.running({"group.consumer.assignment.interval.ms": 0}, data_dir=str(tmp_path)) as b, \
            RawClient(b.port) as c:
        c.create_topic("t", 2)
        c.create_topic("u", 1)
        a = cg_heartbeat(c, "a", 0, ["t", "u"], [])
        assert (a.member_epoch, sorted(len(t.partitions) for t in a.assignment.topic_partitions)) == (2, [1, 2])
        grown = c.call(ApiKey.CREATE_PARTITIONS, 3, topics=[Msg(name="t", count=4, assignments=None)],
                       timeout_ms=5000, validate_only=False)
        assert grown.results[0].error_code == 0
        a = cg_heartbeat(c, "a", a.member_epoch)
        assert a.member_epoch == 3 and sorted(len(t.partitions) for t in a.assignment.topic_partitions) == [1, 4]
        c.call(ApiKey.DELETE_TOPICS, 5, timeout_ms=1000, topic_names=["u"])
        a = cg_heartbeat(c, "a", a.member_epoch, owned=owning(a))      # still reports u-0: revoke it first
        assert a.member_epoch == 3 and [len(t.partitions) for t in a.assignment.topic_partitions] == [4]
        a = cg_heartbeat(c, "a", a.member_epoch, owned=owning(a))
        assert (a.member_epoch, a.assignment) == (4, None)                 # u-0 given up: the new epoch


def test_uniform_assignor_is_balanced_and_sticky_and_range_cuts_ranges():
    t1, t2 = b"\x01" * 16, b"\x02" * 16
    counts = {t1: 7, t2: 3}
    members = ["m1", "m2", "m3"]
    subs = {m: [t1, t2] for m in members}
    first = doze.uniform_assign(members, subs, {}, counts)
    sizes = sorted(sum(len(ps) for ps in a.values()) for a in first.values())
    assert sizes == [3, 3, 4] and set().union(*({(t, p) for t, ps in a.items() for p in ps}
                                                 for a in first.values())) == {(t, p) for t in counts
                                                                                for p in range(counts[t])}
    again = doze.uniform_assign(members + ["m4"], {**subs, "m4": [t1, t2]}, first, counts)
    kept = sum(len(again[m].get(t, set()) & first[m].get(t, set())) for m in members for t in counts)
    assert sorted(sum(len(ps) for ps in a.values()) for a in again.values()) == [2, 2, 3, 3] and kept >= 8
    mixed = doze.uniform_assign(members, {"m1": [t1], "m2": [t1, t2], "m3": [t2]}, {}, counts)
    assert all(t in ({"m1": [t1], "m2": [t1, t2], "m3": [t2]}[m]) for m, a in mixed.items() for t in a)
    assert sorted(sum(len(ps) for ps in a.values()) for a in mixed.values()) in ([3, 3, 4], [3, 4, 3])
    ranges = doze.range_assign(members, subs, {}, counts, {"m3": "app-0"})
    assert ranges["m3"] == {t1: {0, 1, 2}, t2: {0}}                    # a static member sorts first
    assert (ranges["m1"], ranges["m2"]) == ({t1: {3, 4}, t2: {1}}, {t1: {5, 6}, t2: {2}})


###############################################################################
# 12. TRANSACTIONS -- the transaction coordinator: the classic protocol (KIP-98) and version 2 (KIP-890)
###############################################################################

def begin(c, transactional_id, tps, group=None, timeout_ms=60000):
    """InitProducerId, then AddPartitionsToTxn (and AddOffsetsToTxn for group) -> the Ongoing transaction."""
    meta, then = c.txns.init_producer(transactional_id, timeout_ms, -1, -1)
    assert meta is None
    answer = then()
    meta = c.txns.for_producer(transactional_id, answer.producer_id, answer.producer_epoch)
    c.txns.add_partitions(meta, tps)
    if group:
        c.txns.add_partitions(meta, group=group)
    assert meta.state == doze.TxnState.ONGOING
    return meta


def test_coordinators_txn_commit_writes_its_markers_in_the_group_commit_and_moves_the_lso(coordinators):
    c = coordinators()
    new_topic(c.logs, "t", partitions=2)
    meta, then = c.txns.init_producer("tx", 60000, -1, -1)
    answer = then()
    assert meta is None and (answer.producer_id, answer.producer_epoch) == (0, 0)   # meta.db's first id
    meta = c.txns.for_producer("tx", 0, 0)
    assert meta.state == doze.TxnState.EMPTY
    c.txns.add_partitions(meta, [("t", 0), ("t", 1)])
    c.txns.add_partitions(meta, group="g")                                        # AddOffsetsToTxn
    assert (meta.state, meta.partitions, meta.groups) == (doze.TxnState.ONGOING, {("t", 0), ("t", 1)}, {"g"})
    assert (c.produce(meta, ("t", 0), [b"a", b"b"]), c.produce(meta, ("t", 1), [b"c"])) == (0, 0)
    c.txns.check_offsets_added(meta, "g", 3)
    c.txns.stage_offsets(meta, "g", {("t", 0): doze.OffsetEntry(2, -1, "", c.txns.now_ms())})
    c.group_commit()
    assert (c.offsets(("t", 0)), c.offsets(("t", 1))) == ((0, 2), (0, 1))      # open: the LSO holds
    assert c.txns.staged_partitions("g") == {("t", 0)} and c.groups.fetch_offsets("g", [("t", 0)]) == {("t", 0): None}
    assert c.txns.end_txn(meta, commit=True) is True                              # the answer waits
    assert (meta.state, c.txns.outcome(meta, True)) == (doze.TxnState.PREPARE_COMMIT, None)
    assert c.batches(("t", 0)) == [(0, [b"a", b"b"])]                            # no marker before the group commit
    for call in (lambda: c.txns.end_txn(meta, commit=False), lambda: c.txns.init_producer("tx", 60000, -1, -1)):
        with pytest.raises(doze.KafkaError) as e:
            call()
        assert e.value.code == ErrorCode.CONCURRENT_TRANSACTIONS
    c.group_commit()
    assert meta.state == doze.TxnState.COMPLETE_COMMIT and c.txns.outcome(meta, True) is not None
    assert c.batches(("t", 0)) == [(0, [b"a", b"b"]), (2, "COMMIT")]
    assert c.batches(("t", 1)) == [(0, [b"c"]), (1, "COMMIT")]
    assert (c.offsets(("t", 0)), c.offsets(("t", 1))) == ((3, 3), (2, 2))
    assert c.groups.fetch_offsets("g", [("t", 0)])[("t", 0)].offset == 2 and c.txns.staged_partitions("g") == set()
    offsets_tp = (doze.CONSUMER_OFFSETS, doze.internal_partition("g", 50))       # no marker there: a stand-in
    assert ("txn", "tx") in c.woken and meta.last_decision["markers"] == {("t", 0): 2, ("t", 1): 1, offsets_tp: None}
    assert [row["state"] for row in c.store.load_txns()] == [doze.TxnState.COMPLETE_COMMIT]
    assert c.txns.end_txn(meta, commit=True) is False                            # a retry: done already


def test_coordinators_txn_abort_writes_abort_markers_and_drops_the_staged_offsets(coordinators):
    c = coordinators()
    new_topic(c.logs, "t")
    meta = begin(c, "tx", [("t", 0)], group="g")
    c.produce(meta, ("t", 0), [b"x"])
    c.txns.stage_offsets(meta, "g", {("t", 0): doze.OffsetEntry(1, -1, "", c.txns.now_ms())})
    c.group_commit()
    assert c.txns.end_txn(meta, commit=False) is True
    c.group_commit()
    assert meta.state == doze.TxnState.COMPLETE_ABORT
    assert c.batches(("t", 0)) == [(0, [b"x"]), (1, "ABORT")] and c.offsets(("t", 0)) == (2, 2)
    assert c.producer_states.of(("t", 0)).aborted_between(0, 2) == [(meta.producer_id, 0)]
    assert c.groups.fetch_offsets("g", [("t", 0)]) == {("t", 0): None} and c.txns.staged_partitions("g") == set()
    with pytest.raises(doze.KafkaError) as e:
        c.txns.end_txn(meta, commit=True)
    assert e.value.code == ErrorCode.INVALID_TXN_STATE


def test_coordinators_txn_timeout_by_tick_aborts_and_fences_the_producer(coordinators):
    c = coordinators()
    new_topic(c.logs, "t")
    meta = begin(c, "tx", [("t", 0)], timeout_ms=2000)
    c.produce(meta, ("t", 0), [b"abandoned"])
    c.group_commit()
    c.clock.advance(2000)
    c.txns.tick()
    assert (meta.state, meta.producer_epoch) == (doze.TxnState.ONGOING, 0)        # at its timeout, not past it
    c.clock.advance(500)
    c.txns.tick()
    assert (meta.state, meta.producer_epoch) == (doze.TxnState.PREPARE_ABORT, 1)  # fenced: a new epoch
    c.group_commit()
    assert meta.state == doze.TxnState.COMPLETE_ABORT
    assert c.batches(("t", 0)) == [(0, [b"abandoned"]), (1, "ABORT")] and c.offsets(("t", 0)) == (2, 2)
    assert [e["cause"] for e in meta.history] == [
        "InitProducerId", "AddPartitionsToTxn", "fenced: timed out after 2000 ms", "markers durable"]
    for call, code in [(lambda: c.txns.for_producer("tx", meta.producer_id, 0), ErrorCode.PRODUCER_FENCED),
                       (lambda: c.txns.check_produce("tx", meta.producer_id, 0, ("t", 0)),
                        ErrorCode.INVALID_PRODUCER_EPOCH)]:
        with pytest.raises(doze.KafkaError) as e:
            call()
        assert e.value.code == code


def test_coordinators_txn_a_second_init_producer_fences_aborts_and_bumps_twice(coordinators):
    c = coordinators()
    new_topic(c.logs, "t")
    meta = begin(c, "tx", [("t", 0)])
    pid = meta.producer_id
    c.produce(meta, ("t", 0), [b"zombie"])
    c.group_commit()
    waiting, then = c.txns.init_producer("tx", 60000, -1, -1)
    assert waiting is meta and (meta.state, meta.producer_epoch) == (doze.TxnState.PREPARE_ABORT, 1)
    c.group_commit()                                                             # the abort first ...
    assert meta.state == doze.TxnState.COMPLETE_ABORT and c.batches(("t", 0))[-1] == (1, "ABORT")
    answer = then()                                                              # ... then the answer
    assert (answer.producer_id, answer.producer_epoch, meta.state) == (pid, 2, doze.TxnState.EMPTY)
    for call, code in [(lambda: c.txns.for_producer("tx", pid, 0), ErrorCode.PRODUCER_FENCED),
                       (lambda: c.txns.init_producer("tx", 60000, pid + 77, 0), ErrorCode.PRODUCER_FENCED)]:
        with pytest.raises(doze.KafkaError) as e:
            call()
        assert e.value.code == code
    bumped = c.txns.init_producer("tx", 60000, pid, 2)[1]()                     # KIP-360: a bump ...
    retried = c.txns.init_producer("tx", 60000, pid, 2)[1]()                    # ... and its retry
    assert (bumped.producer_epoch, retried.producer_epoch, meta.producer_epoch) == (3, 3, 3)


def test_coordinators_txn_load_after_a_restart_carries_out_a_stored_prepare_commit(coordinators):
    c = coordinators()
    new_topic(c.logs, "t", partitions=2)
    meta = begin(c, "tx", [("t", 0), ("t", 1)], group="g")
    c.produce(meta, ("t", 0), [b"a"])
    c.produce(meta, ("t", 1), [b"b"])
    c.txns.stage_offsets(meta, "g", {("t", 0): doze.OffsetEntry(42, -1, "", c.txns.now_ms())})
    c.group_commit()
    assert c.txns.end_txn(meta, commit=True) is True
    c.store.sync()                                      # the decision is durable (the group commit's first step)
    c.close(clean=False)                                # ... and the broker dies before any marker
    again = coordinators()
    meta = again.txns.for_producer("tx", meta.producer_id, meta.producer_epoch)
    assert (meta.state, again.txns.completing) == (doze.TxnState.PREPARE_COMMIT, {"tx"})
    assert again.batches(("t", 0)) == [(0, [b"a"])] and again.offsets(("t", 0)) == (0, 1)   # rebuilt: still held
    assert again.groups.fetch_offsets("g", [("t", 0)]) == {("t", 0): None}
    assert again.txns.staged_partitions("g") == {("t", 0)}
    again.group_commit()
    assert meta.state == doze.TxnState.COMPLETE_COMMIT
    assert again.batches(("t", 0)) == [(0, [b"a"]), (1, "COMMIT")]
    assert again.batches(("t", 1)) == [(0, [b"b"]), (1, "COMMIT")]
    assert (again.offsets(("t", 0)), again.offsets(("t", 1))) == ((2, 2), (2, 2))
    assert again.groups.fetch_offsets("g", [("t", 0)])[("t", 0)].offset == 42


def test_coordinators_txn_load_after_a_restart_keeps_an_open_transaction_and_its_start(coordinators):
    c = coordinators()
    new_topic(c.logs, "t")
    meta = begin(c, "tx", [("t", 0)], timeout_ms=10_000)
    c.produce(meta, ("t", 0), [b"open"])
    c.group_commit()
    started = meta.txn_start_ms
    c.clock.advance(6000)
    c.close(clean=False)
    again = coordinators()
    meta = again.txns.for_producer("tx", meta.producer_id, meta.producer_epoch)
    assert (meta.state, meta.txn_start_ms, again.txns.completing) == (doze.TxnState.ONGOING, started, set())
    assert again.offsets(("t", 0)) == (0, 1)                                     # the LSO still held
    again.clock.advance(4000)                                                    # 10 s since it began
    again.txns.tick()
    assert meta.state == doze.TxnState.ONGOING
    again.clock.advance(500)                                                     # past its timeout, from its start
    again.txns.tick()
    again.group_commit()
    assert meta.state == doze.TxnState.COMPLETE_ABORT and again.offsets(("t", 0)) == (2, 2)


def test_coordinators_txn_v2_a_timeout_at_level_2_bumps_once_and_the_old_abort_is_a_retry(coordinators):
    """The coordinator ends a transaction itself as the finalized level says
    (Kafka asks the level, not the transaction): at 2 as EndTxn v5 would, one
    bump (KAFKA-19367), so the producer's own abort from the old epoch is a
    retry and its InitProducerId from it gets the new epoch; at 1 that
    InitProducerId is fenced (an EndTxn v5 abort from the old epoch is a
    retry at either level: the request's version decides)."""
    for level in (2, 1):
        c = coordinators({"doze.transaction.version": level})
        new_topic(c.logs, f"t{level}")
        meta = begin(c, f"tx{level}", [(f"t{level}", 0)], timeout_ms=1000)
        c.produce(meta, (f"t{level}", 0), [b"abandoned"])
        c.clock.advance(1500)
        c.txns.tick()
        c.group_commit()
        assert (meta.state, meta.producer_epoch, meta.ended_version) == (doze.TxnState.COMPLETE_ABORT, 1, level)
        assert c.txns.end_txn_v2(f"tx{level}", meta.producer_id, 0, False)[1:] == ((meta.producer_id, 1), False)
        if level == 2:
            assert c.txns.init_producer(f"tx{level}", 1000, meta.producer_id, 0)[1]().producer_epoch == 1
        else:
            with pytest.raises(doze.KafkaError) as e:
                c.txns.init_producer(f"tx{level}", 1000, meta.producer_id, 0)[1]()
            assert e.value.code == ErrorCode.PRODUCER_FENCED
        c.close()


def test_coordinators_txn_v2_an_exhausted_epoch_moves_to_a_new_producer_id_across_a_crash(coordinators):
    """EndTxn v5 at epoch 32766: the markers carry (old id, 32767), the next
    transaction a new id at epoch 0 -- drawn with the decision and stored with
    it, so a crash before the markers changes nothing; a retry from the old
    id still matches (KAFKA-20090)."""
    c = coordinators({"doze.transaction.version": 2})
    new_topic(c.logs, "t")
    meta = begin(c, "tx", [])
    c.txns._save(meta, "the epoch, worn out", producer_epoch=doze.EPOCH_EXHAUSTED)
    old = meta.producer_id
    c.txns.add_implicitly("tx", old, doze.EPOCH_EXHAUSTED, [("t", 0)])
    c.produce(meta, ("t", 0), [b"last of its id"])
    _, answer, wait = c.txns.end_txn_v2("tx", old, doze.EPOCH_EXHAUSTED, True)
    new = answer[0]
    assert new != old and answer == (new, 0) and wait
    assert (meta.producer_id, meta.producer_epoch, meta.next_producer_id) == (old, doze.EPOCH_MAX, new)
    c.store.sync()
    c.close(clean=False)                                  # before any marker
    c = coordinators({"doze.transaction.version": 2})
    c.group_commit()
    meta = c.txns.txns["tx"]
    assert (meta.state, meta.producer_id, meta.producer_epoch, meta.previous_producer_id) == \
        (doze.TxnState.COMPLETE_COMMIT, new, 0, old)
    assert c.producer_states.of(("t", 0)).producers[old].epoch == doze.EPOCH_MAX     # the marker's
    assert c.batches(("t", 0)) == [(0, [b"last of its id"]), (1, "COMMIT")]
    assert c.txns.end_txn_v2("tx", old, doze.EPOCH_EXHAUSTED, True)[1] == (new, 0)   # the retry


###############################################################################
# 13. SECURITY -- SASL authentication, SCRAM credentials, authorization
###############################################################################

def principals(broker):
    return broker.run_in_loop(lambda: sorted(c.principal for c in broker.connections))


class ScramClient:
    """The client side of SCRAM (RFC 5802), for the tests: first(), final(server_first)."""

    def __init__(self, mechanism, user, password, nonce="fyko+d2lbbFgONRv9qkxdawL"):
        self.digest = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}[mechanism]
        self.user, self.password, self.nonce = user, password, nonce

    def first(self):
        self.bare = f"n={self.user},r={self.nonce}"
        return f"n,,{self.bare}".encode()

    def final(self, server_first, nonce=None):
        fields = dict(kv.split("=", 1) for kv in server_first.decode().split(","))
        salted = hashlib.pbkdf2_hmac(self.digest, self.password.encode(), base64.b64decode(fields["s"]),
                                     int(fields["i"]))
        client_key = hmac.new(salted, b"Client Key", self.digest).digest()
        stored = hashlib.new(self.digest, client_key).digest()
        without_proof = f"c=biws,r={nonce or fields['r']}"
        auth = f"{self.bare},{server_first.decode()},{without_proof}".encode()
        signature = hmac.new(stored, auth, self.digest).digest()
        proof = bytes(a ^ b for a, b in zip(client_key, signature))
        server_key = hmac.new(salted, b"Server Key", self.digest).digest()
        self.expected_server_final = b"v=" + base64.b64encode(hmac.new(server_key, auth, self.digest).digest())
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()


def plain_v0(c, password):
    """SaslHandshake v0 for PLAIN, then alice's token as a bare size-prefixed frame."""
    assert c.call(ApiKey.SASL_HANDSHAKE, 0, mechanism="PLAIN").error_code == 0
    token = plain_token("alice", password)
    c.sock.sendall(struct.pack(">i", len(token)) + token)


def doze_string_hash(s):
    """java.lang.String.hashCode, unsigned."""
    h = 0
    for ch in s:
        h = (31 * h + ord(ch)) % 2 ** 32
    return h


A = doze.AclOperation
R = doze.ResourceType
ALLOW, DENY, LITERAL, PREFIXED = doze.AclPermission.ALLOW, doze.AclPermission.DENY, \
    doze.PatternType.LITERAL, doze.PatternType.PREFIXED


def acl(rtype, name, op, perm=ALLOW, pattern=LITERAL, principal="User:alice", host="*"):
    return doze.Acl(int(rtype), name, int(pattern), principal, host, int(op), int(perm))


@pytest.fixture
def authorizer(tmp_path):
    """authorizer(*acls, allow_if_no_acl=False, super_users=()) -> an Authorizer over a real meta.db."""
    def make(*acls, allow_if_no_acl=False, super_users=()):
        a = doze.Authorizer(doze.MetadataStore(str(tmp_path / f"meta{len(os.listdir(tmp_path))}.db")),
                            set(super_users), allow_if_no_acl)
        a.add(acls)
        return a
    return make


def acl_settings(**more):
    return sasl_settings(authorizer_class_name=doze.STANDARD_AUTHORIZER, super_users="User:admin", **more)


@contextlib.contextmanager
def as_user(broker, user):
    """A RawClient on the SASL listener, authenticated with PLAIN as `user`."""
    with RawClient(sasl_port(broker)) as c:
        [a] = sasl_authenticate(c, "PLAIN", [plain_token(user, f"{user}-secret")])
        assert a.error_code == 0, a
        yield c


def create_acls(c, *acls):
    r = c.call(ApiKey.CREATE_ACLS, 3, creations=[Msg(
        resource_type=a.resource_type, resource_name=a.name, resource_pattern_type=a.pattern,
        principal=a.principal, host=a.host, operation=a.operation, permission_type=a.permission) for a in acls])
    assert [x.error_code for x in r.results] == [0] * len(acls), r


# The ACL matrix: every served API, called by a principal without the ACL it
# needs, with it, with it but one part missing, with a DENY beside it, through
# a prefixed and a wildcard pattern, by a super user, and on a broker that
# allows everyone where no ACL is found. Each row: the request (built from the
# variant's names: topic t, group g, transactional id x), what it needs in the
# order Kafka checks it (resource type, which name, operation, the value seen
# when that one is missing), how to read the answer, and the value when allowed.

def as_msg(value):
    if isinstance(value, dict):
        return Msg(**{k: as_msg(v) for k, v in value.items()})
    return [as_msg(v) for v in value] if isinstance(value, list) else value


CLUSTER_NAME = doze.CLUSTER_NAME


class Names:
    def __init__(self, prefix):
        self.prefix, self.t, self.g, self.x, self.new = prefix, prefix + "t", prefix + "g", prefix + "x", prefix + "new"

    def __getitem__(self, key):
        return CLUSTER_NAME if key == "cluster" else getattr(self, key)


TOP = lambda r: r.error_code                                              # noqa: E731
PART = lambda r: r.responses[0].partitions[0].error_code                  # noqa: E731
PRODUCE_REQ = lambda n, tx=None, batch=None: dict(                       # noqa: E731
    transactional_id=tx, acks=-1, timeout_ms=5000, topic_data=[dict(name=n.t, partition_data=[dict(
        index=0, records=batch or make_batch([b"v"]))])])
TXN = lambda n: dict(transactional_id=n.x, producer_id=5000, producer_epoch=0)   # noqa: E731
COMMIT_TOPICS = lambda n: [dict(name=n.t, partitions=[dict(                # noqa: E731
    partition_index=0, committed_offset=1, committed_leader_epoch=-1, committed_metadata="")])]
FETCH_REQ = lambda n: dict(                                               # noqa: E731
    replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, isolation_level=0, session_id=0,
    session_epoch=-1, forgotten_topics_data=[], rack_id="", topics=[dict(topic=n.t, partitions=[dict(
        partition=0, current_leader_epoch=-1, fetch_offset=0, last_fetched_epoch=-1, log_start_offset=-1,
        partition_max_bytes=1 << 20)])])
ACL_FILTER = dict(resource_type_filter=2, resource_name_filter=None, pattern_type_filter=1, principal_filter=None,
                  host_filter=None, operation=1, permission_type=1)


def commit_offset(admin, n):
    admin.call(ApiKey.OFFSET_COMMIT, 8, **as_msg(dict(group_id=n.g, generation_id_or_member_epoch=-1, member_id="",
                                                      group_instance_id=None, topics=COMMIT_TOPICS(n))).__dict__)


def coordinators_loaded(admin, n):
    """The group and transaction coordinators answer 0 (not still loading)."""
    for key_type in (0, 1):
        assert wait_until(lambda: admin.call(ApiKey.FIND_COORDINATOR, 4, key_type=key_type,
                                             coordinator_keys=["warm"]).coordinators[0].error_code == 0)


def begin_transaction(admin, n):
    admin.call(ApiKey.INIT_PRODUCER_ID, 4, transactional_id=n.x, transaction_timeout_ms=60000, producer_id=-1,
               producer_epoch=-1)


ACL_ROWS = [   # id, api, version, request(n), needs [(type, name key, op, missing)], result, allowed, setup
    ("produce", ApiKey.PRODUCE, 9, PRODUCE_REQ, [(R.TOPIC, "t", A.WRITE, 29)],
     lambda r: r.responses[0].partition_responses[0].error_code, 0, None),
    ("produce-transactional", ApiKey.PRODUCE, 9,
     lambda n: PRODUCE_REQ(n, n.x, make_batch([b"v"], producer_id=5000, producer_epoch=0, base_sequence=0,
                                              attributes=0x10)),
     [(R.TRANSACTIONAL_ID, "x", A.WRITE, 53), (R.TOPIC, "t", A.WRITE, 29)],
     lambda r: r.responses[0].partition_responses[0].error_code, ErrorCode.INVALID_PRODUCER_ID_MAPPING, None),
    ("fetch", ApiKey.FETCH, 12, FETCH_REQ, [(R.TOPIC, "t", A.READ, 29)], PART, 0, None),
    ("list-offsets", ApiKey.LIST_OFFSETS, 7, lambda n: dict(replica_id=-1, isolation_level=0, topics=[dict(
        name=n.t, partitions=[dict(partition_index=0, current_leader_epoch=-1, timestamp=-1)])]),
     [(R.TOPIC, "t", A.DESCRIBE, 29)], lambda r: r.topics[0].partitions[0].error_code, 0, None),
    ("metadata", ApiKey.METADATA, 12, lambda n: dict(topics=[dict(name=n.t, topic_id=bytes(16))],
                                                      allow_auto_topic_creation=False,
                                                      include_topic_authorized_operations=False),
     [(R.TOPIC, "t", A.DESCRIBE, 29)], lambda r: r.topics[0].error_code, 0, None),
    ("offset-commit", ApiKey.OFFSET_COMMIT, 8, lambda n: dict(
        group_id=n.g, generation_id_or_member_epoch=-1, member_id="", group_instance_id=None,
        topics=COMMIT_TOPICS(n)), [(R.GROUP, "g", A.READ, 30), (R.TOPIC, "t", A.READ, 29)],
     lambda r: r.topics[0].partitions[0].error_code, 0, None),
    ("offset-fetch", ApiKey.OFFSET_FETCH, 8, lambda n: dict(require_stable=False, groups=[dict(
        group_id=n.g, member_id=None, member_epoch=-1, topics=[dict(name=n.t, partition_indexes=[0])])]),
     [(R.GROUP, "g", A.DESCRIBE, 30), (R.TOPIC, "t", A.DESCRIBE, 29)],
     lambda r: r.groups[0].error_code or r.groups[0].topics[0].partitions[0].error_code, 0, None),
    ("find-group", ApiKey.FIND_COORDINATOR, 4, lambda n: dict(key_type=0, coordinator_keys=[n.g]),
     [(R.GROUP, "g", A.DESCRIBE, 30)], lambda r: r.coordinators[0].error_code, 0, coordinators_loaded),
    ("find-transaction", ApiKey.FIND_COORDINATOR, 4, lambda n: dict(key_type=1, coordinator_keys=[n.x]),
     [(R.TRANSACTIONAL_ID, "x", A.DESCRIBE, 53)], lambda r: r.coordinators[0].error_code, 0,
     coordinators_loaded),
    ("join", ApiKey.JOIN_GROUP, 9, lambda n: dict(
        group_id=n.g, session_timeout_ms=30000, rebalance_timeout_ms=30000, member_id="", group_instance_id=None,
        protocol_type="consumer", protocols=[dict(name="range", metadata=b"")], reason=None),
     [(R.GROUP, "g", A.READ, 30)], TOP, ErrorCode.MEMBER_ID_REQUIRED, None),
    ("heartbeat", ApiKey.HEARTBEAT, 4, lambda n: dict(group_id=n.g, generation_id=1, member_id="m",
                                                      group_instance_id=None),
     [(R.GROUP, "g", A.READ, 30)], TOP, ErrorCode.UNKNOWN_MEMBER_ID, commit_offset),
    ("leave", ApiKey.LEAVE_GROUP, 5, lambda n: dict(group_id=n.g, members=[dict(
        member_id="m", group_instance_id=None, reason=None)]),
     [(R.GROUP, "g", A.READ, 30)], lambda r: r.error_code or r.members[0].error_code,
     ErrorCode.UNKNOWN_MEMBER_ID, commit_offset),
    ("sync", ApiKey.SYNC_GROUP, 5, lambda n: dict(group_id=n.g, generation_id=1, member_id="m",
                                                  group_instance_id=None, protocol_type="consumer",
                                                  protocol_name="range", assignments=[]),
     [(R.GROUP, "g", A.READ, 30)], TOP, ErrorCode.UNKNOWN_MEMBER_ID, commit_offset),
    ("describe-groups", ApiKey.DESCRIBE_GROUPS, 5, lambda n: dict(groups=[n.g], include_authorized_operations=False),
     [(R.GROUP, "g", A.DESCRIBE, 30)], lambda r: r.groups[0].error_code, 0, commit_offset),
    ("list-groups", ApiKey.LIST_GROUPS, 4, lambda n: dict(states_filter=[]),
     [(R.GROUP, "g", A.DESCRIBE, "unlisted")], None, "listed", commit_offset),
    ("create-topics", ApiKey.CREATE_TOPICS, 7, lambda n: dict(
        topics=[dict(name=n.prefix + "new", num_partitions=1, replication_factor=1, assignments=[], configs=[])],
        timeout_ms=5000, validate_only=False),
     [(R.TOPIC, "new", A.CREATE, 29)], lambda r: r.topics[0].error_code, 0, None),
    ("delete-topics", ApiKey.DELETE_TOPICS, 6, lambda n: dict(topics=[dict(name=n.t, topic_id=bytes(16))],
                                                              timeout_ms=5000),
     [(R.TOPIC, "t", A.DELETE, 29)], lambda r: r.responses[0].error_code, 0, None),
    ("delete-records", ApiKey.DELETE_RECORDS, 2, lambda n: dict(topics=[dict(name=n.t, partitions=[dict(
        partition_index=0, offset=0)])], timeout_ms=5000),
     [(R.TOPIC, "t", A.DELETE, 29)], lambda r: r.topics[0].partitions[0].error_code, 0, None),
    ("init-transactional", ApiKey.INIT_PRODUCER_ID, 4, lambda n: dict(
        transactional_id=n.x, transaction_timeout_ms=60000, producer_id=-1, producer_epoch=-1),
     [(R.TRANSACTIONAL_ID, "x", A.WRITE, 53)], TOP, 0, None),
    ("init-idempotent", ApiKey.INIT_PRODUCER_ID, 4, lambda n: dict(
        transactional_id=None, transaction_timeout_ms=60000, producer_id=-1, producer_epoch=-1),
     [(R.CLUSTER, "cluster", A.IDEMPOTENT_WRITE, 31)], TOP, 0, None),
    ("init-idempotent-by-topic-write", ApiKey.INIT_PRODUCER_ID, 4, lambda n: dict(
        transactional_id=None, transaction_timeout_ms=60000, producer_id=-1, producer_epoch=-1),
     [(R.TOPIC, "t", A.WRITE, 31)], TOP, 0, None),                                  # KIP-679
    ("add-partitions", ApiKey.ADD_PARTITIONS_TO_TXN, 3, lambda n: dict(TXN(n), topics=[dict(
        name=n.t, partitions=[0])]),
     [(R.TRANSACTIONAL_ID, "x", A.WRITE, 53), (R.TOPIC, "t", A.WRITE, 29)],
     lambda r: r.results_by_topic[0].results_by_partition[0].partition_error_code,
     ErrorCode.INVALID_PRODUCER_ID_MAPPING, None),
    ("add-offsets", ApiKey.ADD_OFFSETS_TO_TXN, 3, lambda n: dict(TXN(n), group_id=n.g),
     [(R.TRANSACTIONAL_ID, "x", A.WRITE, 53), (R.GROUP, "g", A.READ, 30)], TOP,
     ErrorCode.INVALID_PRODUCER_ID_MAPPING, None),
    ("end-txn", ApiKey.END_TXN, 3, lambda n: dict(TXN(n), committed=True),
     [(R.TRANSACTIONAL_ID, "x", A.WRITE, 53)], TOP, ErrorCode.INVALID_PRODUCER_ID_MAPPING, None),
    ("txn-offset-commit", ApiKey.TXN_OFFSET_COMMIT, 3, lambda n: dict(
        TXN(n), group_id=n.g, generation_id=-1, member_id="", group_instance_id=None, topics=COMMIT_TOPICS(n)),
     [(R.TRANSACTIONAL_ID, "x", A.WRITE, 53), (R.GROUP, "g", A.READ, 30), (R.TOPIC, "t", A.READ, 29)],
     lambda r: r.topics[0].partitions[0].error_code, ErrorCode.INVALID_PRODUCER_ID_MAPPING, None),
    ("write-markers", ApiKey.WRITE_TXN_MARKERS, 1, lambda n: dict(markers=[dict(
        producer_id=5000, producer_epoch=0, transaction_result=False, coordinator_epoch=0,
        topics=[dict(name=n.t, partition_indexes=[0])])]),
     [(R.CLUSTER, "cluster", A.CLUSTER_ACTION, 31)],
     lambda r: r.markers[0].topics[0].partitions[0].error_code, 0, None),
    ("describe-acls", ApiKey.DESCRIBE_ACLS, 3, lambda n: ACL_FILTER,
     [(R.CLUSTER, "cluster", A.DESCRIBE, 31)], TOP, 0, None),
    ("create-acls", ApiKey.CREATE_ACLS, 3, lambda n: dict(creations=[dict(
        resource_type=2, resource_name=n.t, resource_pattern_type=3, principal="User:bob", host="*",
        operation=2, permission_type=3)]),
     [(R.CLUSTER, "cluster", A.ALTER, 31)], lambda r: r.results[0].error_code, 0, None),
    ("delete-acls", ApiKey.DELETE_ACLS, 3, lambda n: dict(filters=[dict(ACL_FILTER, principal_filter="User:bob")]),
     [(R.CLUSTER, "cluster", A.ALTER, 31)], lambda r: r.filter_results[0].error_code, 0, None),
    ("describe-topic-configs", ApiKey.DESCRIBE_CONFIGS, 4, lambda n: dict(resources=[dict(
        resource_type=2, resource_name=n.t, configuration_keys=["retention.ms"])], include_synonyms=False,
        include_documentation=False),
     [(R.TOPIC, "t", A.DESCRIBE_CONFIGS, 29)], lambda r: r.results[0].error_code, 0, None),
    ("describe-broker-configs", ApiKey.DESCRIBE_CONFIGS, 4, lambda n: dict(resources=[dict(
        resource_type=4, resource_name="1", configuration_keys=["num.partitions"])], include_synonyms=False,
        include_documentation=False),
     [(R.CLUSTER, "cluster", A.DESCRIBE_CONFIGS, 31)], lambda r: r.results[0].error_code, 0, None),
    ("describe-group-configs", ApiKey.DESCRIBE_CONFIGS, 4, lambda n: dict(resources=[dict(
        resource_type=32, resource_name=n.g, configuration_keys=None)], include_synonyms=False,
        include_documentation=False),
     [(R.GROUP, "g", A.DESCRIBE_CONFIGS, 30)], lambda r: r.results[0].error_code, 0, None),
    ("alter-topic-configs", ApiKey.ALTER_CONFIGS, 2, lambda n: dict(resources=[dict(
        resource_type=2, resource_name=n.t, configs=[dict(name="retention.ms", value="100000")])],
        validate_only=True),
     [(R.TOPIC, "t", A.ALTER_CONFIGS, 29)], lambda r: r.responses[0].error_code, 0, None),
    ("alter-broker-configs", ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, lambda n: dict(resources=[dict(
        resource_type=4, resource_name="1", configs=[dict(name="log.cleaner.threads", config_operation=0,
                                                          value="2")])], validate_only=True),
     [(R.CLUSTER, "cluster", A.ALTER_CONFIGS, 31)], lambda r: r.responses[0].error_code, 0, None),
    ("alter-group-configs", ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, lambda n: dict(resources=[dict(
        resource_type=32, resource_name=n.g, configs=[dict(name="consumer.session.timeout.ms", config_operation=0,
                                                           value="50000")])], validate_only=True),
     [(R.GROUP, "g", A.ALTER_CONFIGS, 30)], lambda r: r.responses[0].error_code, 0, None),
    ("create-partitions", ApiKey.CREATE_PARTITIONS, 3, lambda n: dict(
        topics=[dict(name=n.t, count=3, assignments=None)], timeout_ms=5000, validate_only=True),
     [(R.TOPIC, "t", A.ALTER, 29)], lambda r: r.results[0].error_code, 0, None),
    ("delete-groups", ApiKey.DELETE_GROUPS, 2, lambda n: dict(groups_names=[n.g]),
     [(R.GROUP, "g", A.DELETE, 30)], lambda r: r.results[0].error_code, 0, commit_offset),
    ("offset-delete", ApiKey.OFFSET_DELETE, 0, lambda n: dict(group_id=n.g, topics=[dict(
        name=n.t, partitions=[dict(partition_index=0)])]),
     [(R.GROUP, "g", A.DELETE, 30), (R.TOPIC, "t", A.READ, 29)],
     lambda r: r.error_code or r.topics[0].partitions[0].error_code, 0, commit_offset),
    ("describe-quotas", ApiKey.DESCRIBE_CLIENT_QUOTAS, 1, lambda n: dict(components=[], strict=False),
     [(R.CLUSTER, "cluster", A.DESCRIBE_CONFIGS, 31)], TOP, 0, None),
    ("describe-scram", ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, 0, lambda n: dict(users=[dict(name="bob")]),
     [(R.CLUSTER, "cluster", A.DESCRIBE, 31)], lambda r: r.error_code or r.results[0].error_code,
     ErrorCode.RESOURCE_NOT_FOUND, None),
    ("alter-scram", ApiKey.ALTER_USER_SCRAM_CREDENTIALS, 0, lambda n: dict(
        deletions=[dict(name="bob", mechanism=1)], upsertions=[]),
     [(R.CLUSTER, "cluster", A.ALTER, 31)], lambda r: r.results[0].error_code, ErrorCode.RESOURCE_NOT_FOUND, None),
    ("describe-cluster", ApiKey.DESCRIBE_CLUSTER, 1, lambda n: dict(include_cluster_authorized_operations=True,
                                                                   endpoint_type=1),
     [(R.CLUSTER, "cluster", A.DESCRIBE, 0)], lambda r: r.cluster_authorized_operations & (1 << A.DESCRIBE),
     1 << A.DESCRIBE, None),
    ("describe-producers", ApiKey.DESCRIBE_PRODUCERS, 0, lambda n: dict(topics=[dict(name=n.t, partition_indexes=[0])]),
     [(R.TOPIC, "t", A.READ, 29)], lambda r: r.topics[0].partitions[0].error_code, 0, None),
    ("describe-transactions", ApiKey.DESCRIBE_TRANSACTIONS, 0, lambda n: dict(transactional_ids=[n.x]),
     [(R.TRANSACTIONAL_ID, "x", A.DESCRIBE, 53)], lambda r: r.transaction_states[0].error_code, 0,
     begin_transaction),
    ("list-transactions", ApiKey.LIST_TRANSACTIONS, 1, lambda n: dict(state_filters=[], producer_id_filters=[],
                                                                      duration_filter=-1),
     [(R.TRANSACTIONAL_ID, "x", A.DESCRIBE, "unlisted")], None, "listed", begin_transaction),
    ("describe-topic-partitions", ApiKey.DESCRIBE_TOPIC_PARTITIONS, 0, lambda n: dict(
        topics=[dict(name=n.t)], response_partition_limit=2000, cursor=None),
     [(R.TOPIC, "t", A.DESCRIBE, 29)], lambda r: r.topics[0].error_code, 0, None),
]
ACL_ROW_IDS = [r[0] for r in ACL_ROWS]
ACL_USERS = ("admin", "none", "granted", "deny", "prefixed", "wildcard", "miss0", "miss1", "miss2", "open",
             "other")


def acl_matrix_settings(**more):
    jaas = ("org.apache.kafka.common.security.plain.PlainLoginModule required username=\"admin\" "
            "password=\"admin-secret\" " + " ".join(f'user_{u}="{u}-secret"' for u in ACL_USERS) + ";")
    return dict(acl_settings(**more), **{"listener.name.sasl_plaintext.plain.sasl.jaas.config": jaas})


def acl_row_call(broker, user, row, n):
    """Row's request as `user` on the SASL listener -> the value its result reads."""
    _, api, version, request, needs, result, _, _ = row
    with as_user(broker, user) as c:
        r = c.call(api, version, **as_msg(request(n)).__dict__)
    if result is not None:
        return result(r)
    rtype, key = needs[0][0], needs[0][1]
    seen = [g.group_id for g in r.groups] if rtype == R.GROUP else [s.transactional_id for s in r.transaction_states]
    return "listed" if n[key] in seen else "unlisted"


def grants(principal, needs, n, pattern=LITERAL, skip=None):
    """ACLs that give `principal` each of needs (all but index skip); pattern
    PREFIXED grants the variant's prefix and WILDCARD "*", except on the cluster."""
    out = []
    for i, (rtype, key, op, _) in enumerate(needs):
        if i == skip:
            continue
        name, pat = n[key], LITERAL
        if rtype != R.CLUSTER and pattern == "wildcard":
            name = "*"
        elif rtype != R.CLUSTER and pattern == PREFIXED:
            name, pat = n.prefix, PREFIXED
        out.append(acl(rtype, name, op, pattern=pat, principal=principal))
    return out


def prepare(admin, row, n):
    admin.create_topic(n.t)
    if row[7]:
        row[7](admin, n)


# --- SASL ---------------------------------------------------------------------------

def test_sasl_scram_rfc7677_test_vector():
    """RFC 7677's example exchange, byte for byte (Kafka's ScramFormatterTest uses it too)."""
    salt = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
    keys = doze.scram_keys("SCRAM-SHA-256", doze.scram_salted_password("SCRAM-SHA-256", "pencil", salt, 4096))
    server = doze.ScramServer("SCRAM-SHA-256", lambda u, m: (salt, *keys, 4096) if u == "user" else None,
                              server_nonce="%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0")
    first, user = server.step(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO")
    assert (first, user) == (b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,"
                             b"i=4096", None)
    final, user = server.step(b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                              b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
    assert (final, user) == (b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=", "user")


def test_sasl_plain_authenticates_then_serves_everything(start_broker):
    broker = start_broker(sasl_settings())
    with RawClient(sasl_port(broker)) as c:
        assert c.call(ApiKey.API_VERSIONS, 3, **SOFTWARE).error_code == 0
        h = c.call(ApiKey.SASL_HANDSHAKE, 1, mechanism="PLAIN")
        assert (h.error_code, h.mechanisms) == (0, ["PLAIN", "SCRAM-SHA-512", "SCRAM-SHA-256"])   # Java's HashSet order
        a = c.call(ApiKey.SASL_AUTHENTICATE, 2, auth_bytes=plain_token("alice", "alice-secret"))
        assert (a.error_code, a.error_message, bytes(a.auth_bytes)) == (0, "", b"")   # Kafka's "" default
        assert principals(broker) == ["User:alice"]
        [b] = c.metadata(None).brokers
        assert b.port == sasl_port(broker)
        again = c.call(ApiKey.SASL_AUTHENTICATE, 2, auth_bytes=b"x")
        assert (again.error_code, again.error_message) == (ErrorCode.ILLEGAL_SASL_STATE,
                                                           "SaslAuthenticate request received after successful authentication")
        assert c.call(ApiKey.SASL_HANDSHAKE, 1, mechanism="PLAIN").error_code == ErrorCode.ILLEGAL_SASL_STATE
        assert c.call(ApiKey.API_VERSIONS, 3, **SOFTWARE).error_code == 0     # still open


@pytest.mark.parametrize("token, message", [
    (plain_token("alice", "wrong"), "Authentication failed: Invalid username or password"),
    (plain_token("mallory", "x"), "Authentication failed: Invalid username or password"),
    (plain_token("", "x"), "Authentication failed: username not specified"),
    (plain_token("alice", ""), "Authentication failed: password not specified"),
    (plain_token("alice", "alice-secret", authzid="admin"),
     "Authentication failed: Client requested an authorization id that is different from username"),
    (b"no-nuls-at-all", "Authentication failed during authentication due to invalid credentials with SASL "
                        "mechanism PLAIN"),
])
def test_sasl_plain_failure_is_answered_after_the_delay_then_closed(start_broker, token, message):
    broker = start_broker(sasl_settings())
    with RawClient(broker.port) as bystander, RawClient(sasl_port(broker)) as c:
        assert c.call(ApiKey.SASL_HANDSHAKE, 1, mechanism="PLAIN").error_code == 0
        started = time.monotonic()
        a = c.call(ApiKey.SASL_AUTHENTICATE, 2, auth_bytes=token)
        assert time.monotonic() - started >= 0.25                 # connection.failed.authentication.delay.ms
        assert (a.error_code, a.error_message) == (ErrorCode.SASL_AUTHENTICATION_FAILED, message)
        assert c.is_closed_by_broker(3)
        assert bystander.call(ApiKey.API_VERSIONS, 3, **SOFTWARE).error_code == 0


def test_sasl_unknown_mechanism_gets_the_enabled_ones_then_the_close(start_broker):
    broker = start_broker(sasl_settings(sasl_enabled_mechanisms="SCRAM-SHA-512"))
    with RawClient(sasl_port(broker)) as c:
        h = c.call(ApiKey.SASL_HANDSHAKE, 1, mechanism="plain")            # matched exactly
        assert (h.error_code, h.mechanisms) == (ErrorCode.UNSUPPORTED_SASL_MECHANISM, ["SCRAM-SHA-512"])
        assert c.is_closed_by_broker(3)


@pytest.mark.parametrize("api_key, fields", [
    (ApiKey.METADATA, {"topics": None}),
    (ApiKey.SASL_AUTHENTICATE, {"auth_bytes": b"x"}),
    (ApiKey.PRODUCE, {"acks": -1, "timeout_ms": 1000, "topic_data": []}),
])
def test_sasl_a_request_before_authentication_closes_without_an_answer(start_broker, api_key, fields):
    broker = start_broker(sasl_settings())
    with RawClient(broker.port) as bystander, RawClient(sasl_port(broker)) as c:
        c.send(api_key, None, **fields)
        assert c.is_closed_by_broker(3)                           # nothing read: closed
        assert bystander.call(ApiKey.API_VERSIONS, 3, **SOFTWARE).error_code == 0


def test_sasl_other_requests_between_handshake_and_authenticate_close(start_broker):
    broker = start_broker(sasl_settings())
    with RawClient(sasl_port(broker)) as c:
        assert c.call(ApiKey.SASL_HANDSHAKE, 1, mechanism="PLAIN").error_code == 0
        c.send(ApiKey.METADATA, None, topics=None)
        assert c.is_closed_by_broker(3)


def test_sasl_a_second_api_versions_before_the_handshake_closes(start_broker):
    broker = start_broker(sasl_settings())
    with RawClient(sasl_port(broker)) as c:
        assert c.call(ApiKey.API_VERSIONS, 3, **SOFTWARE).error_code == 0
        c.send(ApiKey.API_VERSIONS, 3, **SOFTWARE)
        assert c.is_closed_by_broker(3)


def test_sasl_api_versions_refused_as_unsupported_may_be_retried(start_broker):
    """franz-go sends ApiVersions at its newest version first; the v0 answer with
    UNSUPPORTED_VERSION leaves the connection where it was (Kafka's
    HANDSHAKE_OR_VERSIONS_REQUEST), so its retry at v4 and then the handshake go on."""
    broker = start_broker(sasl_settings())
    with RawClient(sasl_port(broker)) as c:
        body = struct.pack(">hhih", 18, 9, 42, 3) + b"cli" + b"\x00" + b"\x04doze\x020\x00"
        c.sock.sendall(struct.pack(">i", len(body)) + body)
        assert c.read_frame()[4:6] == b"\x00\x23"                          # UNSUPPORTED_VERSION
        assert c.call(ApiKey.API_VERSIONS, 4, **SOFTWARE).error_code == 0
        [a] = sasl_authenticate(c, "PLAIN", [plain_token("alice", "alice-secret")])
        assert a.error_code == 0


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_sasl_scram_authenticates_and_signs(start_broker, mechanism):
    broker = start_broker(sasl_settings())
    add_scram_user(broker, "bob", "bob-secret", mechanism, iterations=8192)
    with RawClient(sasl_port(broker)) as c:
        client = ScramClient(mechanism, "bob", "bob-secret")
        h = c.call(ApiKey.SASL_HANDSHAKE, 1, mechanism=mechanism)
        assert h.error_code == 0
        first = c.call(ApiKey.SASL_AUTHENTICATE, 2, auth_bytes=client.first())
        assert first.error_code == 0 and bytes(first.auth_bytes).startswith(b"r=" + client.nonce.encode())
        assert b",i=8192" in bytes(first.auth_bytes)
        final = c.call(ApiKey.SASL_AUTHENTICATE, 2, auth_bytes=client.final(bytes(first.auth_bytes)))
        assert (final.error_code, bytes(final.auth_bytes)) == (0, client.expected_server_final)
        assert principals(broker) == ["User:bob"]
        assert c.metadata(None).brokers


@pytest.mark.parametrize("case", ["wrong password", "unknown user", "wrong nonce", "garbage first",
                                  "other mechanism's credential"])
def test_sasl_scram_failures_get_kafkas_generic_answer(start_broker, case):
    broker = start_broker(sasl_settings())
    add_scram_user(broker, "bob", "bob-secret", "SCRAM-SHA-256")
    mechanism = "SCRAM-SHA-512" if case == "other mechanism's credential" else "SCRAM-SHA-256"
    user = "nobody" if case == "unknown user" else "bob"
    password = "wrong" if case == "wrong password" else "bob-secret"
    client = ScramClient(mechanism, user, password)
    with RawClient(sasl_port(broker)) as c:
        assert c.call(ApiKey.SASL_HANDSHAKE, 1, mechanism=mechanism).error_code == 0
        if case == "garbage first":
            answer = c.call(ApiKey.SASL_AUTHENTICATE, 2, auth_bytes=b"\xff\x00garbage")
        else:
            first = c.call(ApiKey.SASL_AUTHENTICATE, 2, auth_bytes=client.first())
            if first.error_code:
                answer = first                                    # no credential: refused at once
            else:
                nonce = "forged" if case == "wrong nonce" else None
                answer = c.call(ApiKey.SASL_AUTHENTICATE, 2,
                                auth_bytes=client.final(bytes(first.auth_bytes), nonce))
        assert (answer.error_code, answer.error_message) == (
            ErrorCode.SASL_AUTHENTICATION_FAILED,
            f"Authentication failed during authentication due to invalid credentials with SASL mechanism "
            f"{mechanism}")
        assert c.is_closed_by_broker(3)


def test_sasl_scram_client_final_replayed_on_another_connection_fails(start_broker):
    broker = start_broker(sasl_settings())
    add_scram_user(broker, "bob", "bob-secret")
    client = ScramClient("SCRAM-SHA-256", "bob", "bob-secret")
    with RawClient(sasl_port(broker)) as c:
        first = sasl_authenticate(c, "SCRAM-SHA-256", [client.first()])[0]
        final = client.final(bytes(first.auth_bytes))
        assert c.call(ApiKey.SASL_AUTHENTICATE, 2, auth_bytes=final).error_code == 0
    with RawClient(sasl_port(broker)) as eve:
        sasl_authenticate(eve, "SCRAM-SHA-256", [client.first()])      # a new server nonce here
        assert eve.call(ApiKey.SASL_AUTHENTICATE, 2, auth_bytes=final).error_code == \
            ErrorCode.SASL_AUTHENTICATION_FAILED


def test_sasl_meta_db_holds_no_password(start_broker, tmp_path):
    broker = start_broker(sasl_settings())
    add_scram_user(broker, "carol", "carol-very-secret-password", "SCRAM-SHA-512")
    with RawClient(sasl_port(broker)) as c:
        client = ScramClient("SCRAM-SHA-512", "carol", "carol-very-secret-password")
        first = sasl_authenticate(c, "SCRAM-SHA-512", [client.first()])[0]
        assert c.call(ApiKey.SASL_AUTHENTICATE, 2, auth_bytes=client.final(bytes(first.auth_bytes))) \
            .error_code == 0
    with RawClient(broker.port) as admin:                 # a dynamic secret: described, never kept
        secret = "listener.name.sasl_plaintext.ssl.key.password"
        r = admin.call(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, validate_only=False, resources=[Msg(
            resource_type=4, resource_name="1", configs=[Msg(name=secret, config_operation=0,
                                                             value="dynamic-key-secret")])])
        assert r.responses[0].error_code == 0
    broker.stop()
    assert broker.stopped.wait(10)                        # meta.db closed: no journal file coming or going
    for name in os.listdir(tmp_path / "data"):
        if name.startswith("meta.db"):
            data = open(tmp_path / "data" / name, "rb").read()
            assert b"carol-very-secret-password" not in data and b"alice-secret" not in data
            assert b"dynamic-key-secret" not in data
    broker = start_broker(sasl_settings())
    with RawClient(broker.port) as admin:
        d = admin.call(ApiKey.DESCRIBE_CONFIGS, 4, include_synonyms=False, include_documentation=False,
                       resources=[Msg(resource_type=4, resource_name="1", configuration_keys=[secret])])
        [entry] = d.results[0].configs
        assert (entry.value, entry.is_sensitive, entry.config_source) == (None, True, 2)   # DYNAMIC_BROKER_CONFIG


def test_sasl_v0_handshake_takes_bare_tokens(start_broker):
    """SaslHandshake v0: the tokens come and go as bare size-prefixed frames."""
    broker = start_broker(sasl_settings())
    with RawClient(sasl_port(broker)) as c:
        plain_v0(c, "alice-secret")
        assert c.read_frame() == b""                              # PLAIN's empty reply, as a frame
        assert c.metadata(None).brokers                           # now Kafka requests again


def test_sasl_v0_bad_token_is_closed_without_an_answer(start_broker):
    broker = start_broker(sasl_settings())
    with RawClient(sasl_port(broker)) as c:
        plain_v0(c, "nope")
        assert c.is_closed_by_broker(3)


def test_sasl_an_oversized_frame_before_authentication_closes(start_broker):
    broker = start_broker(sasl_settings(sasl_server_max_receive_size=1000))
    with RawClient(broker.port) as bystander, RawClient(sasl_port(broker)) as c:
        assert c.call(ApiKey.SASL_HANDSHAKE, 1, mechanism="PLAIN").error_code == 0
        c.send(ApiKey.SASL_AUTHENTICATE, 2, auth_bytes=b"\0" * 5000)
        assert c.is_closed_by_broker(3)
        assert bystander.call(ApiKey.API_VERSIONS, 3, **SOFTWARE).error_code == 0


def test_sasl_session_lifetime_ends_the_connection_unless_reauthenticated(start_broker):
    """KIP-368: connections.max.reauth.ms is the lifetime the final SaslAuthenticate
    tells; a request after it closes the connection, a re-authentication (a
    SaslHandshake on the live connection, a second or more after the last) renews it."""
    clock = FakeClock()
    broker = start_broker(sasl_settings(connections_max_reauth_ms=10_000), clock=clock)
    with RawClient(sasl_port(broker)) as c, RawClient(sasl_port(broker)) as stale:
        for conn in (c, stale):
            [a] = sasl_authenticate(conn, "PLAIN", [plain_token("alice", "alice-secret")])
            assert (a.error_code, a.session_lifetime_ms) == (0, 10_000)
        clock.advance(7_500)                                          # 7.5 s in: re-authenticate
        [a] = sasl_authenticate(c, "PLAIN", [plain_token("alice", "alice-secret")])
        assert (a.error_code, a.session_lifetime_ms) == (0, 10_000)
        clock.advance(500)                                            # again within a second: refused
        assert c.call(ApiKey.SASL_HANDSHAKE, 1, mechanism="PLAIN").error_code == ErrorCode.ILLEGAL_SASL_STATE
        clock.advance(4_500)                                          # 12.5 s: past the first session
        assert c.metadata(None).brokers                               # renewed until 17.5 s
        stale.send(ApiKey.METADATA, None, topics=None)
        assert stale.is_closed_by_broker(3)                           # expired: closed, no answer


def test_sasl_reauthentication_may_not_change_the_principal(start_broker):
    broker = start_broker(sasl_settings(connections_max_reauth_ms=60_000))
    with RawClient(sasl_port(broker)) as c:
        sasl_authenticate(c, "PLAIN", [plain_token("alice", "alice-secret")])
        [a] = sasl_authenticate(c, "PLAIN", [plain_token("admin", "admin-secret")])
        assert (a.error_code, a.error_message) == (
            ErrorCode.SASL_AUTHENTICATION_FAILED,
            "Cannot change principals during re-authentication from User:alice: User:admin")
        assert c.is_closed_by_broker(3)


def test_sasl_handshake_on_a_plaintext_listener_is_an_illegal_state(client):
    assert client.call(ApiKey.SASL_HANDSHAKE, 1, mechanism="PLAIN").error_code == ErrorCode.ILLEGAL_SASL_STATE
    assert client.call(ApiKey.SASL_AUTHENTICATE, 2, auth_bytes=b"").error_code == ErrorCode.ILLEGAL_SASL_STATE


@pytest.mark.parametrize("settings, message", [
    ({"sasl.enabled.mechanisms": "GSSAPI"}, "sasl.enabled.mechanisms GSSAPI"),
    ({"sasl.enabled.mechanisms": "PLAIN", "listener.name.sasl_plaintext.plain.sasl.jaas.config": None},
     "PLAIN needs its users in listener.name.sasl_plaintext.plain.sasl.jaas.config"),
    ({"listener.name.sasl_plaintext.plain.sasl.jaas.config": "nonsense"}, "sasl.jaas.config: expected"),
])
def test_sasl_settings_that_cannot_work_stop_the_start(start_broker, settings, message):
    merged = {k: v for k, v in {**sasl_settings(), **settings}.items() if v is not None}
    with pytest.raises(ValueError, match=message):
        start_broker(merged)


@pytest.mark.parametrize("names, java", [           # what Kafka 4.3.1's SaslHandshake answers with
    (["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"], ["PLAIN", "SCRAM-SHA-512", "SCRAM-SHA-256"]),
    (["SCRAM-SHA-512", "PLAIN", "PLAIN"], ["SCRAM-SHA-512", "PLAIN"]),              # one bucket: as given
    (["PLAIN", "SCRAM-SHA-512"], ["PLAIN", "SCRAM-SHA-512"]),
    ([f"M{i}" for i in range(20)], sorted([f"M{i}" for i in range(20)], key=lambda n: (
        (doze_string_hash(n) ^ (doze_string_hash(n) >> 16)) & 31))),          # 20 names: a table of 32
])
def test_java_hash_order_as_kafkas_sasl_handshake_lists_mechanisms(names, java):
    assert doze.java_hash_order(names, presized=True) == java


# --- Authorization: StandardAuthorizer's decisions and the checks of each API -------

@pytest.mark.parametrize("acls, op, name, allowed", [
    ([], A.READ, "t", False),                                                     # nothing: denied
    ([acl(R.TOPIC, "t", A.READ)], A.READ, "t", True),
    ([acl(R.TOPIC, "t", A.READ)], A.WRITE, "t", False),                            # WRITE is not READ
    ([acl(R.TOPIC, "t", A.READ)], A.DESCRIBE, "t", True),                          # READ implies DESCRIBE
    ([acl(R.TOPIC, "t", A.ALTER_CONFIGS)], A.DESCRIBE_CONFIGS, "t", True),
    ([acl(R.TOPIC, "t", A.CREATE)], A.DESCRIBE, "t", False),                       # CREATE implies nothing
    ([acl(R.TOPIC, "t", A.ALL)], A.DELETE, "t", True),
    ([acl(R.TOPIC, "t", A.READ), acl(R.TOPIC, "t", A.READ, DENY)], A.READ, "t", False),  # DENY wins
    ([acl(R.TOPIC, "t", A.DESCRIBE), acl(R.TOPIC, "t", A.READ, DENY)], A.DESCRIBE, "t", True),  # not implied
    ([acl(R.TOPIC, "t", A.READ), acl(R.TOPIC, "*", A.ALL, DENY)], A.READ, "t", False),
    ([acl(R.TOPIC, "te", A.READ, pattern=PREFIXED)], A.READ, "test", True),
    ([acl(R.TOPIC, "te", A.READ, pattern=PREFIXED)], A.READ, "t", False),
    ([acl(R.TOPIC, "*", A.READ, pattern=PREFIXED)], A.READ, "t", False),           # * is literal here
    ([acl(R.TOPIC, "*", A.READ)], A.READ, "anything", True),
    ([acl(R.TOPIC, "t", A.READ, principal="User:*")], A.READ, "t", True),
    ([acl(R.TOPIC, "t", A.READ, principal="User:bob")], A.READ, "t", False),
    ([acl(R.TOPIC, "t", A.READ, host="10.0.0.1")], A.READ, "t", False),
    ([acl(R.TOPIC, "t", A.READ, host="127.0.0.1")], A.READ, "t", True),
    ([acl(R.GROUP, "t", A.READ)], A.READ, "t", False),                             # another type
])
def test_authorizer_decides_as_standard_authorizer(authorizer, acls, op, name, allowed):
    a = authorizer(*acls)
    assert a.allowed("User:alice", "127.0.0.1", op, R.TOPIC, name) is allowed


def test_authorizer_super_users_and_allow_everyone(authorizer):
    a = authorizer(acl(R.TOPIC, "t", A.READ, principal="User:bob"), allow_if_no_acl=True,
                   super_users={"User:admin"})
    assert a.allowed("User:alice", "127.0.0.1", A.WRITE, R.TOPIC, "other")       # no ACL for it
    assert not a.allowed("User:alice", "127.0.0.1", A.READ, R.TOPIC, "t")        # bob's ACL shuts alice out
    assert a.allowed("User:admin", "127.0.0.1", A.ALTER, R.CLUSTER, "kafka-cluster")


@pytest.mark.parametrize("acls, allowed", [
    ([], False),
    ([acl(R.TOPIC, "t", A.WRITE)], True),
    ([acl(R.TOPIC, "t", A.READ)], False),                                         # no implication here
    ([acl(R.TOPIC, "t", A.WRITE), acl(R.TOPIC, "t", A.WRITE, DENY)], False),
    ([acl(R.TOPIC, "t", A.WRITE), acl(R.TOPIC, "t", A.WRITE, DENY, PREFIXED)], False),
    ([acl(R.TOPIC, "t", A.WRITE), acl(R.TOPIC, "u", A.WRITE, DENY)], True),
    ([acl(R.TOPIC, "p", A.ALL, pattern=PREFIXED)], True),
    ([acl(R.TOPIC, "*", A.WRITE), acl(R.TOPIC, "*", A.WRITE, DENY)], False),
])
def test_authorizer_any_topic_kip_679(authorizer, acls, allowed):
    assert authorizer(*acls).allowed_on_any("User:alice", "127.0.0.1", A.WRITE, R.TOPIC) is allowed


def test_acls_topic_checks_over_real_sockets(start_broker):
    broker = start_broker(acl_settings())
    with as_user(broker, "admin") as admin, as_user(broker, "alice") as alice:
        admin.create_topic("seen")
        admin.create_topic("hidden")
        batch = make_batch([b"v"])

        def produce(topic):
            r = alice.call(ApiKey.PRODUCE, 9, transactional_id=None, acks=-1, timeout_ms=5000, topic_data=[
                Msg(name=topic, partition_data=[Msg(index=0, records=batch)])])
            return r.responses[0].partition_responses[0].error_code
        assert produce("seen") == ErrorCode.TOPIC_AUTHORIZATION_FAILED
        named = alice.metadata(["seen", "hidden", "nowhere"]).topics
        assert {t.name: t.error_code for t in named} == dict.fromkeys(["seen", "hidden", "nowhere"], 29)
        create_acls(admin, acl(R.TOPIC, "seen", A.WRITE))             # WRITE implies DESCRIBE
        assert produce("seen") == 0                                   # in effect at the next request
        assert [t.name for t in alice.metadata(None).topics] == ["seen"]     # all topics: the rest left out
        fetch = alice.call(ApiKey.FETCH, 12, replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20,
                           isolation_level=0, session_id=0, session_epoch=-1, topics=[Msg(
                               topic="seen", partitions=[Msg(partition=0, current_leader_epoch=-1, fetch_offset=0,
                                                             last_fetched_epoch=-1, log_start_offset=-1,
                                                             partition_max_bytes=1 << 20)])],
                           forgotten_topics_data=[], rack_id="")
        assert fetch.responses[0].partitions[0].error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED   # no READ
        [made] = alice.create_topics(("mine", 1, None))
        assert (made.error_code, made.error_message) == (29, "Authorization failed.")
        assert "mine" not in broker.run_in_loop(lambda: set(broker.logs.topics))
        create_acls(admin, acl(R.TOPIC, "mine", A.CREATE))
        [made] = alice.create_topics(("mine", 1, None))
        assert (made.error_code, made.topic_config_error_code, made.configs) == (0, 29, [])   # no DESCRIBE_CONFIGS
        deleted = alice.call(ApiKey.DELETE_TOPICS, 6, topics=[Msg(name="hidden", topic_id=bytes(16))],
                             timeout_ms=5000)
        assert deleted.responses[0].error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED
        assert "hidden" in broker.run_in_loop(lambda: set(broker.logs.topics))


def test_acls_group_and_transactional_id_checks(start_broker):
    broker = start_broker(acl_settings())
    with as_user(broker, "admin") as admin, as_user(broker, "alice") as alice:
        admin.create_topic("t")
        j = alice.call(ApiKey.JOIN_GROUP, 5, group_id="g", session_timeout_ms=10000, rebalance_timeout_ms=10000,
                       member_id="", group_instance_id=None, protocol_type="consumer",
                       protocols=[Msg(name="range", metadata=b"")])
        assert j.error_code == ErrorCode.GROUP_AUTHORIZATION_FAILED
        tx = alice.call(ApiKey.INIT_PRODUCER_ID, 4, transactional_id="tx", transaction_timeout_ms=60000,
                        producer_id=-1, producer_epoch=-1)
        assert tx.error_code == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        idem = alice.call(ApiKey.INIT_PRODUCER_ID, 4, transactional_id=None, transaction_timeout_ms=60000,
                          producer_id=-1, producer_epoch=-1)
        assert idem.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED      # no WRITE on any topic
        fc = alice.call(ApiKey.FIND_COORDINATOR, 4, key_type=1, coordinator_keys=["tx"]).coordinators[0]
        assert (fc.error_code, fc.node_id) == (ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, -1)
        create_acls(admin, acl(R.TRANSACTIONAL_ID, "tx", A.WRITE), acl(R.TOPIC, "t", A.WRITE),
                    acl(R.GROUP, "g", A.READ))
        assert alice.call(ApiKey.FIND_COORDINATOR, 4, key_type=1, coordinator_keys=["tx"]).coordinators[0] \
            .error_code in (0, ErrorCode.COORDINATOR_NOT_AVAILABLE)           # WRITE implies DESCRIBE
        assert alice.call(ApiKey.INIT_PRODUCER_ID, 4, transactional_id=None, transaction_timeout_ms=60000,
                          producer_id=-1, producer_epoch=-1).error_code == 0   # KIP-679: WRITE on a topic
        listed = alice.call(ApiKey.LIST_GROUPS, 4, states_filter=[])
        admin.call(ApiKey.OFFSET_COMMIT, 8, group_id="other", generation_id_or_member_epoch=-1, member_id="",
                   group_instance_id=None, topics=[Msg(name="t", partitions=[Msg(
                       partition_index=0, committed_offset=0, committed_leader_epoch=-1, committed_metadata="")])])
        assert "other" not in [g.group_id for g in alice.call(ApiKey.LIST_GROUPS, 4, states_filter=[]).groups]
        assert listed.error_code == 0


@pytest.mark.parametrize("row", ACL_ROWS, ids=ACL_ROW_IDS)
def test_acl_matrix_every_api_with_and_without_its_acls(start_broker, row):
    """Each variant has its own principal and names, so that one's ACLs cannot
    reach another's; the super user's answer is the granted one."""
    broker = start_broker(acl_matrix_settings())
    needs, allowed = row[4], row[6]
    variants = {"none": ([], needs[0][3]), "granted": (grants("User:granted", needs, Names("granted-")), allowed),
                "deny": (grants("User:deny", needs, Names("deny-")) + [acl(
                    needs[0][0], Names("deny-")[needs[0][1]], needs[0][2], DENY, principal="User:deny")],
                    needs[0][3]),
                "prefixed": (grants("User:prefixed", needs, Names("prefixed-"), PREFIXED), allowed),
                "wildcard": (grants("User:wildcard", needs, Names("wildcard-"), "wildcard"), allowed),
                "admin": ([], allowed)}
    for i in range(len(needs)) if len(needs) > 1 else ():
        variants[f"miss{i}"] = (grants(f"User:miss{i}", needs, Names(f"miss{i}-"), skip=i), needs[i][3])
    with as_user(broker, "admin") as admin:
        for variant, (acls, _) in variants.items():
            prepare(admin, row, Names(variant + "-"))
            if acls:
                create_acls(admin, *acls)
    seen = {v: acl_row_call(broker, v, row, Names(v + "-")) for v in variants}
    assert seen == {v: want for v, (_, want) in variants.items()}


def test_acl_matrix_allow_everyone_if_no_acl_found(start_broker):
    """allow.everyone.if.no.acl.found=true: a resource without ACLs is open to all;
    once it has one (for anyone, here User:other), only what the ACLs say."""
    broker = start_broker(acl_matrix_settings(allow_everyone_if_no_acl_found="true"))
    with as_user(broker, "admin") as admin:
        for row in ACL_ROWS:
            prepare(admin, row, Names(row[0] + "-"))
    opened = {row[0]: acl_row_call(broker, "open", row, Names(row[0] + "-")) for row in ACL_ROWS}
    assert opened == {row[0]: row[6] for row in ACL_ROWS}
    with as_user(broker, "admin") as admin:
        for row in ACL_ROWS:
            n = Names(row[0] + "-again-")
            prepare(admin, row, n)
            create_acls(admin, *{a for rtype, key, op, _ in row[4]
                                 for a in [acl(rtype, n[key], op, principal="User:other")]})
    closed = {row[0]: acl_row_call(broker, "open", row, Names(row[0] + "-again-")) for row in ACL_ROWS}
    by_type = {"init-idempotent", "init-idempotent-by-topic-write"}   # KIP-679's WRITE on any topic asks
    # for a topic named "hardcode" first (Authorizer.authorizeByResourceType): no ACL there, so allowed
    assert closed == {row[0]: row[6] if row[0] in by_type else row[4][0][3] for row in ACL_ROWS}


###############################################################################
# 14. REQUESTS AND THE DATA PATH -- how an API is declared; Produce, Fetch, offsets, metadata
###############################################################################

@pytest.fixture
def timed_topic(client):
    """Topic "times": offsets 0-2 at 100, 300, 200 ms; offset 3 at 500 ms."""
    client.create_topic("times")
    client.produce("times", 0, make_batch([b"a", b"b", b"c"], timestamps=[100, 300, 200]))
    client.produce("times", 0, make_batch([b"d"], timestamps=[500]))
    return "times"


def delete_records(client, topic, partition, offset, version=2):
    resp = client.call(ApiKey.DELETE_RECORDS, version, timeout_ms=1000, topics=[
        Msg(name=topic, partitions=[Msg(partition_index=partition, offset=offset)])])
    return resp.topics[0].partitions[0]


PRODUCE_TXN_CASES = [
    ("added",              ErrorCode.NONE),
    ("not added",          ErrorCode.INVALID_TXN_STATE),
    ("stale epoch",        ErrorCode.INVALID_PRODUCER_EPOCH),
    ("no transactional id", ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED),
]


# --- Work in steps, and a DeleteTopics between two of its steps -------------------
# CreatePartitions, CreateTopics and DeleteRecords run in steps (in_steps), so
# other connections are served between them -- a DeleteTopics among them. Kafka's
# controller applies each request whole, so each must end as if the deletion came
# wholly before or wholly after it. held() pins the step generator at one point,
# yielding (the loop serves everyone else) until the test lets it go.

def held(monkeypatch, owner, name, where):
    """Pin the step generator owner.name "before" its first step or "after" its
    last -> (reached, release): Events the test waits on and sets."""
    reached, release = threading.Event(), threading.Event()
    real = getattr(owner, name)

    def pinned(*args):
        if where == "before":
            reached.set()
            while not release.is_set():
                yield
        result = yield from real(*args)
        if where == "after":
            reached.set()
            while not release.is_set():
                yield
        return result
    monkeypatch.setattr(owner, name, pinned)
    return reached, release


def delete_topic(client, name):
    [r] = client.call(ApiKey.DELETE_TOPICS, 5, timeout_ms=1000, topic_names=[name]).responses
    assert r.error_code == 0, r


# --- in_steps: a request answered at once, or parked until its steps are done ------

def test_in_steps_answers_at_once_or_parks_until_done():
    def work(n):
        for _ in range(n):
            yield
        return Msg(done=n)
    assert doze.in_steps(work(3)).done == 3
    park = doze.in_steps(work(10 ** 9), budget_s=0)
    assert isinstance(park, doze.Park) and park.keys == (doze.STEP,)
    assert park.poll(False) is None


# --- Produce (0) -----------------------------------------------------------------

@pytest.mark.parametrize("version", range(3, 10))
def test_produce_every_served_version(client, version):
    client.create_topic("pv")
    first = client.produce("pv", 0, make_batch([b"a", b"b"]), version=version)
    second = client.produce("pv", 0, make_batch([b"c"]), version=version)
    assert (first.error_code, first.base_offset) == (0, 0)
    assert (second.error_code, second.base_offset) == (0, 2)
    if version >= 5:
        assert second.log_start_offset == 0
    assert client.values("pv", 0) == [(0, b"a"), (1, b"b"), (2, b"c")]


@pytest.mark.parametrize("acks", [1, -1])
def test_produce_acked_is_readable(client, acks):
    client.create_topic("acks")
    p = client.produce("acks", 0, make_batch([b"x"]), acks=acks)
    assert (p.error_code, p.base_offset) == (0, 0)
    assert client.values("acks", 0) == [(0, b"x")]


def test_produce_acks_zero_gets_no_response(client):
    client.create_topic("fire")
    client.produce("fire", 0, make_batch([b"f1"]), acks=0)
    client.produce("fire", 0, make_batch([b"f2"]), acks=0)
    # the next answer on this connection is the Metadata's, not a Produce's
    assert client.metadata(["fire"]).topics[0].error_code == 0
    assert client.values("fire", 0) == [(0, b"f1"), (1, b"f2")]


@pytest.mark.parametrize("acks", [2, -2, 5])
def test_produce_invalid_required_acks(client, acks):
    client.create_topic("badacks")
    p = client.produce("badacks", 0, make_batch([b"x"]), acks=acks)
    assert p.error_code == ErrorCode.INVALID_REQUIRED_ACKS
    assert client.values("badacks", 0) == []


def test_produce_unknown_topic_or_partition(client):
    client.create_topic("known")
    assert client.produce("unknown-topic", 0, make_batch([b"x"])).error_code == \
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert client.produce("known", 7, make_batch([b"x"])).error_code == \
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_produce_bad_crc_is_corrupt_message(client):
    client.create_topic("crc")
    batch = bytearray(make_batch([b"payload"]))
    batch[-2] ^= 0xFF
    p = client.produce("crc", 0, bytes(batch))
    assert p.error_code == ErrorCode.CORRUPT_MESSAGE
    assert client.produce("crc", 0, make_batch([b"good"])).base_offset == 0   # nothing written


def test_server_bad_crc_gets_corrupt_message_and_keeps_the_connection(client, bystander):
    client.create_topic("crc2")
    batch = bytearray(make_batch([b"abc"]))
    batch[30] ^= 1
    assert client.produce("crc2", 0, bytes(batch)).error_code == ErrorCode.CORRUPT_MESSAGE
    assert client.produce("crc2", 0, make_batch([b"ok"])).error_code == 0


def test_produce_message_too_large_by_topic_config(client):
    client.create_topic("small", max_message_bytes=100)
    p = client.produce("small", 0, make_batch([b"x" * 200]))
    assert p.error_code == ErrorCode.MESSAGE_TOO_LARGE
    assert client.produce("small", 0, make_batch([b"x" * 10])).error_code == 0


def test_produce_control_batch_is_invalid_record(client):
    client.create_topic("ctl")
    # a non-transactional batch with the control bit (a transactional one without a
    # transactional_id is refused earlier, with TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    batch = make_batch([b"\x00\x00\x00\x01"], attributes=doze.ATTR_CONTROL)
    assert client.produce("ctl", 0, batch).error_code == ErrorCode.INVALID_RECORD
    assert client.values("ctl", 0) == []


def test_produce_several_partitions_in_one_request(client):
    client.create_topic("multi", partitions=2)
    resp = client.call(ApiKey.PRODUCE, 9, acks=-1, timeout_ms=1000, topic_data=[
        Msg(name="multi", partition_data=[Msg(index=0, records=make_batch([b"zero"])),
                                          Msg(index=1, records=make_batch([b"one"])),
                                          Msg(index=9, records=make_batch([b"nine"]))])])
    [t] = resp.responses
    assert [(p.index, p.error_code) for p in t.partition_responses] == \
        [(0, 0), (1, 0), (9, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)]
    assert client.values("multi", 1) == [(0, b"one")]


def test_produce_idempotent_duplicate_gets_same_offset_and_is_not_written(client):
    client.create_topic("idem")
    pid, epoch = init_producer_id(client)
    first = make_batch([b"a", b"b"], producer_id=pid, producer_epoch=epoch, base_sequence=0)
    assert client.produce("idem", 0, first).base_offset == 0
    again = client.produce("idem", 0, first)
    assert (again.error_code, again.base_offset) == (0, 0)
    nxt = make_batch([b"c"], producer_id=pid, producer_epoch=epoch, base_sequence=2)
    assert client.produce("idem", 0, nxt).base_offset == 2
    assert client.values("idem", 0) == [(0, b"a"), (1, b"b"), (2, b"c")]


def test_produce_out_of_order_sequence(client):
    client.create_topic("ooo")
    pid, epoch = init_producer_id(client)
    client.produce("ooo", 0, make_batch([b"a"], producer_id=pid, producer_epoch=epoch,
                                        base_sequence=0))
    p = client.produce("ooo", 0, make_batch([b"gap"], producer_id=pid, producer_epoch=epoch,
                                            base_sequence=5))
    assert p.error_code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert client.values("ooo", 0) == [(0, b"a")]


def test_produce_older_epoch_is_invalid_producer_epoch(client):
    client.create_topic("epoch")
    pid, _ = init_producer_id(client)
    client.produce("epoch", 0, make_batch([b"new"], producer_id=pid, producer_epoch=2,
                                          base_sequence=0))
    p = client.produce("epoch", 0, make_batch([b"old"], producer_id=pid, producer_epoch=1,
                                              base_sequence=1))
    assert p.error_code == ErrorCode.INVALID_PRODUCER_EPOCH
    assert client.values("epoch", 0) == [(0, b"new")]


def test_produce_log_append_time_stamps_the_batch(client):
    client.create_topic("lat", message_timestamp_type="LogAppendTime")
    before = int(time.time() * 1000)
    p = client.produce("lat", 0, make_batch([b"x"], timestamps=[5]))
    assert p.error_code == 0 and p.log_append_time_ms >= before
    batch = client.fetch("lat", 0, 0).records
    h = header_of(batch)
    assert h.attributes & 0x08 and h.max_timestamp == p.log_append_time_ms
    assert doze.crc32c(batch[doze.CRC_START:]) == h.crc


def test_verification_off_lets_a_partition_never_added_hang_until_write_txn_markers(start_broker):
    """transaction.partition.verification.enable=false (a dynamic cluster-wide
    setting, as Kafka's): a transactional batch to a partition never added is
    taken; the commit's markers miss it and its LSO stays; WriteTxnMarkers (what
    `kafka-transactions abort` sends) frees it. With verification on, refused."""
    broker = start_broker()
    with RawClient(broker.port) as c:
        c.create_topic("orders", 2)
        t = Txn(c, "tx")
        t.add(("orders", 1))
        assert t.produce("orders", 0, [b"stray"]).error_code == ErrorCode.INVALID_TXN_STATE     # verified: refused
        r = c.call(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, validate_only=False, resources=[Msg(
            resource_type=4, resource_name="", configs=[Msg(
                name="transaction.partition.verification.enable", config_operation=0, value="false")])])
        assert r.responses[0].error_code == 0
        assert t.produce("orders", 0, [b"stray"]).error_code == 0
        assert t.produce("orders", 1, [b"b"]).error_code == 0 and t.end(commit=True) == 0
        lso = lambda p: fetch_isolated(c, "orders", p).last_stable_offset   # noqa: E731
        assert (lso(0), lso(1)) == (0, 2)                                   # partition 0 hangs
        p = c.call(ApiKey.DESCRIBE_PRODUCERS, 0, topics=[Msg(name="orders", partition_indexes=[0])])
        hung = p.topics[0].partitions[0].active_producers[0]
        assert (hung.producer_id, hung.current_txn_start_offset) == (t.producer_id, 0)
        r = c.call(ApiKey.WRITE_TXN_MARKERS, 1, markers=[Msg(
            producer_id=hung.producer_id, producer_epoch=hung.producer_epoch, transaction_result=False,
            coordinator_epoch=hung.coordinator_epoch, topics=[Msg(name="orders", partition_indexes=[0])])])
        assert r.markers[0].topics[0].partitions[0].error_code == 0 and lso(0) == 2


@pytest.mark.parametrize("case,expected", PRODUCE_TXN_CASES, ids=[c for c, _ in PRODUCE_TXN_CASES])
def test_produce_transactional_batch_checks(client, case, expected):
    client.create_topic("pt", 2)
    txn = Txn(client, "tx-pt")
    txn.add(("pt", 0))
    if case == "stale epoch":
        fresh = Txn(client, "tx-pt")
        fresh.add(("pt", 0))
    if case == "no transactional id":
        batch = make_batch([b"v"], producer_id=txn.producer_id, producer_epoch=txn.epoch,
                           base_sequence=0, attributes=doze.ATTR_TRANSACTIONAL)
        assert client.produce("pt", 0, batch).error_code == expected
        return
    part = txn.produce("pt", 1 if case == "not added" else 0, [b"v"])
    assert part.error_code == expected
    if expected:
        assert part.base_offset == -1


@pytest.mark.parametrize("name", sorted(BAD_RECORDS))
def test_server_batch_whose_records_do_not_decode_is_refused(client, bystander, name):
    """A right CRC around records that do not tile the batch: Kafka's LogValidator
    refuses it (INVALID_RECORD; a varint over 5 bytes, UNKNOWN_SERVER_ERROR), so
    does doze; the partition keeps working."""
    client.create_topic("framing")
    payload, count = BAD_RECORDS[name]
    p = client.produce("framing", 0, batch_with_payload(payload, count))
    expected = ErrorCode.UNKNOWN_SERVER_ERROR if name == "six-byte-varint" else ErrorCode.INVALID_RECORD
    assert p.error_code == expected, p                 # as Kafka 4.3.1 answers (produce-bad-records)
    assert client.produce("framing", 0, make_batch([b"ok"], timestamps=[5_000])).base_offset == 0
    for ts in (0, -3):
        assert client.list_offset("framing", 0, ts).offset == 0


def test_server_compacted_topic_refuses_keyless_records_as_kafka_does(client):
    """cleanup.policy=compact: a batch with keyless records is refused whole
    (INVALID_RECORD, a record error for each, Produce v8+); an empty key is a key."""
    client.create_topic("compacted", cleanup_policy="compact")
    keys = [None if i % 10 == 3 else b"k%d" % i for i in range(100)]
    p = client.produce("compacted", 0, make_batch([b"v"] * 100, keys=keys))
    assert p.error_code == ErrorCode.INVALID_RECORD and p.base_offset == -1
    assert [e.batch_index for e in p.record_errors] == [i for i, k in enumerate(keys) if k is None]
    assert "Compacted topic cannot accept message without key in topic partition compacted-0" in \
        p.record_errors[0].batch_index_error_message
    assert client.list_offset("compacted", 0, -1).offset == 0             # nothing stored
    assert client.produce("compacted", 0, make_batch([b"v"], keys=[b""])).error_code == 0
    assert client.produce("compacted", 0, make_batch([b"a", b"b"], keys=[b"k", b"k"])).base_offset == 1
    gz = gzip_batch(GOOD_RECORD, 1)                                        # keyless, gzip
    assert client.produce("compacted", 0, gz).error_code == ErrorCode.INVALID_RECORD
    client.create_topic("plain")
    assert client.produce("plain", 0, make_batch([b"v"] * 3)).error_code == 0   # keyless is fine there


def test_server_record_timestamps_outside_the_topic_window_are_refused(client):
    """message.timestamp.after.max.ms (1 h by default) and .before.max.ms, per
    record, as Kafka's LogValidator: INVALID_TIMESTAMP with a record error for
    each record out of range; nothing stored."""
    now = int(time.time() * 1000)
    client.create_topic("times-checked")
    future = client.produce("times-checked", 0, make_batch([b"a", b"b"], timestamps=[now, now + 7_200_000]))
    assert future.error_code == ErrorCode.INVALID_TIMESTAMP
    assert [e.batch_index for e in future.record_errors] == [1]
    assert "of message with offset 1 is out of range" in future.record_errors[0].batch_index_error_message
    assert client.produce("times-checked", 0, make_batch([b"ok"], timestamps=[now])).base_offset == 0
    client.create_topic("recent-only", message_timestamp_before_max_ms=60_000)
    old = client.produce("recent-only", 0, make_batch([b"x", b"y"], timestamps=[now - 120_000, now]))
    assert old.error_code == ErrorCode.INVALID_TIMESTAMP and [e.batch_index for e in old.record_errors] == [0]
    assert client.list_offset("recent-only", 0, -1).offset == 0


# --- Fetch (1) -------------------------------------------------------------------

@pytest.mark.parametrize("version", range(4, 13))
def test_fetch_every_served_version(client, version):
    client.create_topic("fv")
    sent = make_batch([b"one", b"two"])
    client.produce("fv", 0, sent)
    p = client.fetch("fv", 0, 0, version=version)
    assert (p.error_code, p.high_watermark, p.last_stable_offset) == (0, 2, 2)
    if version >= 5:
        assert p.log_start_offset == 0
    assert p.records[8:] == sent[8:]             # byte-identical but for the base offset


def test_fetch_records_are_byte_identical_except_base_offset(client):
    client.create_topic("same")
    sent = [make_batch([b"k%d" % i] * (i + 1), timestamps=list(range(i + 1)), keys=[b"key"] * (i + 1))
            for i in range(4)]
    for batch in sent:
        client.produce("same", 0, batch)
    got = split_batches(client.fetch("same", 0, 0).records)
    assert len(got) == 4
    offset = 0
    for original, fetched in zip(sent, got):
        assert struct.unpack_from(">q", fetched)[0] == offset
        assert fetched[8:] == original[8:]
        offset += header_of(original).records_count


def test_fetch_from_the_middle_of_a_batch_returns_the_whole_batch(client):
    client.create_topic("mid")
    client.produce("mid", 0, make_batch([b"a", b"b", b"c"]))
    client.produce("mid", 0, make_batch([b"d"]))
    batches = split_batches(client.fetch("mid", 0, 1).records)
    assert [header_of(b).base_offset for b in batches] == [0, 3]
    assert client.values("mid", 0, offset=1) == [(1, b"b"), (2, b"c"), (3, b"d")]


def test_fetch_at_high_watermark_is_empty(client):
    client.create_topic("hw")
    client.produce("hw", 0, make_batch([b"a"]))
    p = client.fetch("hw", 0, 1)
    assert (p.error_code, p.records, p.high_watermark) == (0, b"", 1)


@pytest.mark.parametrize("offset", [2, 100, -1])
def test_fetch_out_of_range(client, offset):
    client.create_topic("oor")
    client.produce("oor", 0, make_batch([b"a"]))
    assert client.fetch("oor", 0, offset).error_code == ErrorCode.OFFSET_OUT_OF_RANGE


def test_fetch_max_bytes_limits_but_returns_at_least_one_batch(client):
    client.create_topic("mb")
    for i in range(3):
        client.produce("mb", 0, make_batch([b"v" * 40]))
    size = len(client.fetch("mb", 0, 0).records) // 3
    assert len(split_batches(client.fetch("mb", 0, 0, max_bytes=size * 2).records)) == 2
    assert len(split_batches(client.fetch("mb", 0, 0, max_bytes=1).records)) == 1
    assert len(split_batches(client.fetch("mb", 0, 0, partition_max_bytes=size + 1).records)) == 1


def test_fetch_unknown_partition_and_session_id(client):
    client.create_topic("fs")
    assert client.fetch("nowhere", 0, 0).error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    resp = client.call(ApiKey.FETCH, 12, max_wait_ms=0, min_bytes=0, session_id=77,
                       session_epoch=1, topics=[])
    assert resp.error_code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND


def test_server_fetch_long_poll_wakes_when_data_arrives(broker, client):
    client.create_topic("poll")
    results = []

    def long_poll():
        with RawClient(broker.port, timeout=10) as c:
            start = time.monotonic()
            p = c.fetch("poll", 0, 0, max_wait_ms=8000, min_bytes=1)
            results.append((time.monotonic() - start, p))
    t = threading.Thread(target=long_poll)
    t.start()
    assert wait_until(lambda: broker.run_in_loop(lambda: len(broker.purgatory)) == 1)     # parked
    assert not results, "the fetch answered before there was anything to read"
    client.produce("poll", 0, make_batch([b"wake"]))
    t.join(10)
    [(elapsed, p)] = results
    assert elapsed < 5, elapsed                   # woken by the produce, long before its 8 s
    assert [r[2] for r in batch_records(p.records)] == [b"wake"]


def test_server_fetch_long_poll_answers_empty_at_the_deadline(client):
    client.create_topic("idle")
    start = time.monotonic()
    p = client.fetch("idle", 0, 0, max_wait_ms=400, min_bytes=1)
    elapsed = time.monotonic() - start
    assert 0.35 < elapsed < 4, elapsed
    assert (p.error_code, p.records) == (0, b"")


def test_server_parked_fetch_holds_back_later_requests_in_order(broker, client):
    client.create_topic("order")
    client.send(ApiKey.FETCH, 12, max_wait_ms=300, min_bytes=1, topics=[Msg(topic="order", partitions=[
        Msg(partition=0, fetch_offset=0, partition_max_bytes=1000)])])
    client.send(ApiKey.API_VERSIONS, 0)
    assert client.receive(ApiKey.FETCH, 12)[0] == client.next_correlation_id - 1
    assert client.receive(ApiKey.API_VERSIONS, 0)[0] == client.next_correlation_id


def test_server_a_request_behind_a_parked_fetch_ends_its_wait(broker, client):
    """A Fetch's max_wait_ms is an upper bound: when the client's next request
    arrives behind a parked Fetch (librdkafka sends ListOffsets on its fetch
    connection), the Fetch is answered with what there is, then the request:
    nothing waits out a long-poll the client no longer needs. A Fetch with
    nothing behind it still waits (the deadline test above)."""
    client.create_topic("behind")
    started = time.monotonic()
    client.send(ApiKey.FETCH, 12, max_wait_ms=8000, min_bytes=1, topics=[Msg(topic="behind", partitions=[
        Msg(partition=0, fetch_offset=0, partition_max_bytes=1000)])])
    assert wait_until(lambda: broker.run_in_loop(lambda: len(broker.purgatory)) == 1)     # parked
    client.send(ApiKey.LIST_OFFSETS, 7, replica_id=-1, isolation_level=0, topics=[Msg(name="behind", partitions=[
        Msg(partition_index=0, timestamp=-2)])])
    cid, fetched = client.receive(ApiKey.FETCH, 12)
    assert cid == client.next_correlation_id - 1
    assert fetched.responses[0].partitions[0].error_code == 0 and not fetched.responses[0].partitions[0].records
    cid, listed = client.receive(ApiKey.LIST_OFFSETS, 7)
    assert cid == client.next_correlation_id and listed.topics[0].partitions[0].offset == 0
    assert time.monotonic() - started < 3            # not the 8 s of max_wait_ms


# --- ListOffsets (2) -------------------------------------------------------------

def test_list_offsets_by_time_over_many_batches_lets_others_through(broker, client, bystander):
    """A ListOffsets whose lookups decode many records is worked out in steps:
    a request on another connection, sent after it, is answered before it."""
    client.create_topic("steps", 40)
    values = [b"%06d" % i for i in range(3000)]
    batch = make_batch(values, timestamps=range(1_000, 4_000))
    for p in range(40):
        assert client.produce("steps", p, batch).error_code == 0
    cid, version = client.send(ApiKey.LIST_OFFSETS, 9, replica_id=-1, isolation_level=0, topics=[
        Msg(name="steps", partitions=[Msg(partition_index=p, timestamp=3_999) for p in range(40)])])
    assert wait_until(lambda: broker.run_in_loop(lambda: len(broker.purgatory)) == 1)     # taken, in steps
    assert bystander.call(ApiKey.API_VERSIONS, 3, **SOFTWARE).error_code == 0
    lookup_done = select.select([client.sock], [], [], 0)[0]
    got, resp = client.receive(ApiKey.LIST_OFFSETS, version)
    assert got == cid and {p.offset for p in resp.topics[0].partitions} == {2999}
    assert not lookup_done, "the bystander was answered only after the whole lookup"


def test_list_offsets_in_one_go_would_hold_the_bystander(broker, client, bystander, monkeypatch):
    """The control: with an unbounded step the same lookup holds the loop."""
    monkeypatch.setattr(doze, "STEP_BUDGET_S", 1000)
    client.create_topic("nosteps", 40)
    batch = make_batch([b"%06d" % i for i in range(3000)], timestamps=range(1_000, 4_000))
    for p in range(40):
        client.produce("nosteps", p, batch)
    client.send(ApiKey.LIST_OFFSETS, 9, replica_id=-1, isolation_level=0, topics=[
        Msg(name="nosteps", partitions=[Msg(partition_index=p, timestamp=3_999) for p in range(40)])])
    loop_passes(broker, 1)                                 # the pass that took it
    assert bystander.call(ApiKey.API_VERSIONS, 3, **SOFTWARE).error_code == 0
    assert select.select([client.sock], [], [], 0)[0], "the lookup was not done in one go"


@pytest.mark.parametrize("version", range(1, 12))
def test_list_offsets_every_version(client, timed_topic, version):
    assert client.list_offset(timed_topic, 0, -2, version).offset == 0
    assert client.list_offset(timed_topic, 0, -1, version).offset == 4
    by_time = client.list_offset(timed_topic, 0, 250, version)
    assert (by_time.error_code, by_time.offset, by_time.timestamp) == (0, 1, 300)


@pytest.mark.parametrize("timestamp,offset,found_ts", [
    (-2, 0, -1), (-1, 4, -1), (0, 0, 100), (100, 0, 100), (101, 1, 300), (301, 3, 500),
    (501, -1, -1), (-3, 3, 500),
], ids=["earliest", "latest", "ts0", "ts100", "ts101", "ts301", "after-all", "max-timestamp"])
def test_list_offsets_by_time(client, timed_topic, timestamp, offset, found_ts):
    p = client.list_offset(timed_topic, 0, timestamp)
    assert (p.error_code, p.offset, p.timestamp) == (0, offset, found_ts)


def test_list_offsets_max_timestamp_inside_a_batch(client):
    client.create_topic("maxts")
    client.produce("maxts", 0, make_batch([b"a", b"b", b"c"], timestamps=[10, 90, 20]))
    client.produce("maxts", 0, make_batch([b"d"], timestamps=[50]))
    p = client.list_offset("maxts", 0, -3)
    assert (p.offset, p.timestamp) == (1, 90)


def test_list_offsets_unknown_partition(client):
    assert client.list_offset("nope", 0, -1).error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_list_offsets_after_delete_records_inside_a_batch(client, timed_topic):
    delete_records(client, timed_topic, 0, 1)
    assert client.list_offset(timed_topic, 0, -2).offset == 1
    # The batch holding offsets 0-2 starts below the log start offset but still
    # holds readable records: Kafka answers offset 1 (first record at or after
    # ts 250 at or above the log start).
    p = client.list_offset(timed_topic, 0, 250)
    assert (p.offset, p.timestamp) == (1, 300)


def test_server_partition_holding_a_bad_batch_is_served_without_a_stall(client, broker):
    """A log written by an older doze (which took any batch with a right CRC):
    timestamp lookups on it answer at once, the log is served as it is."""
    client.create_topic("poisoned")
    plog = broker.run_in_loop(lambda: broker.logs.get("poisoned", 0))
    for payload, count in [BAD_RECORDS["count-2^31-1-length--1"], BAD_RECORDS["length--2"]]:
        batch = bytearray(batch_with_payload(payload, count, timestamp_ms=2_000))
        broker.run_in_loop(lambda: broker.logs.append(plog, batch, doze.read_batch_header(batch)))
    client.produce("poisoned", 0, make_batch([b"after"], timestamps=[9_000]))
    started = time.perf_counter()
    assert client.list_offset("poisoned", 0, 0).offset == 0            # the first batch's offset
    after = 2 ** 31 - 1 + 2                      # the two bad batches hold 2^31-1 and 2 offsets
    assert client.list_offset("poisoned", 0, -3).offset == after          # "after" has the max
    assert client.list_offset("poisoned", 0, 3_000).offset == after
    assert time.perf_counter() - started < 2
    assert client.fetch("poisoned", 0, 0).error_code == 0


# --- Metadata (3) ----------------------------------------------------------------

@pytest.mark.parametrize("version", [0, 1, 4, 9, 12])
def test_metadata_lists_broker_and_topics(client, broker, version):
    client.create_topic("meta-a", partitions=3)
    resp = client.metadata(["meta-a"], version=version)
    [b] = resp.brokers
    assert (b.node_id, b.host, b.port) == (1, "127.0.0.1", broker.port)
    [t] = resp.topics
    assert (t.error_code, t.name) == (0, "meta-a")
    assert sorted(p.partition_index for p in t.partitions) == [0, 1, 2]
    assert all(p.leader_id == 1 and p.replica_nodes == [1] for p in t.partitions)


def test_metadata_v0_empty_list_means_all_topics(client):
    client.create_topic("all-1")
    client.create_topic("all-2")
    assert {t.name for t in client.metadata([], version=0).topics} == {"all-1", "all-2"}
    assert client.metadata([], version=1).topics == []              # v1+: empty is none
    assert {t.name for t in client.metadata(None, version=1).topics} == {"all-1", "all-2"}


def test_metadata_auto_creates_topics_when_allowed(client):
    [t] = client.metadata(["auto-1"]).topics
    assert t.error_code == 0 and len(t.partitions) == 1
    [t] = client.metadata(["auto-2"], allow_auto_topic_creation=False).topics
    assert t.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert "auto-2" not in {t.name for t in client.metadata(None).topics}
    assert "auto-1" in {t.name for t in client.metadata(None).topics}


def test_metadata_auto_create_uses_num_partitions(start_broker):
    broker = start_broker({"num.partitions": 3})
    with RawClient(broker.port) as c:
        [t] = c.metadata(["auto-3"]).topics
        assert len(t.partitions) == 3


def test_metadata_auto_create_off_by_broker_setting(start_broker):
    broker = start_broker({"auto.create.topics.enable": "false"})
    with RawClient(broker.port) as c:
        [t] = c.metadata(["nope"]).topics
        assert t.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        [t] = c.metadata(["nope"], version=3).topics          # v0-3 always "allow"
        assert t.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_metadata_invalid_topic_name(client):
    [t] = client.metadata(["bad name!"]).topics
    assert t.error_code == ErrorCode.INVALID_TOPIC_EXCEPTION


def test_metadata_topic_by_id(client):
    created = client.create_topic("by-id")
    [t] = client.call(ApiKey.METADATA, 12, topics=[Msg(topic_id=created.topic_id, name=None)]).topics
    assert (t.error_code, t.name) == (0, "by-id")
    [t] = client.call(ApiKey.METADATA, 12, topics=[Msg(topic_id=b"\x01" * 16, name=None)]).topics
    assert t.error_code == ErrorCode.UNKNOWN_TOPIC_ID


# --- ApiVersions (18) ----------------------------------------------------------

@pytest.mark.parametrize("version", range(0, 5))
def test_api_versions_every_version(client, version):
    fields = dict(client_software_name="doze-test", client_software_version="1.0") \
        if version >= 3 else {}
    resp = client.call(ApiKey.API_VERSIONS, version, **fields)
    assert resp.error_code == 0
    keys = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
    assert keys[ApiKey.API_VERSIONS] == (0, 4)
    assert keys[ApiKey.PRODUCE][1] == 9 and keys[ApiKey.METADATA] == (0, 12)


@pytest.mark.parametrize("name,version", [("", "1"), ("a", ""), ("bad name", "1"), ("-x", "1")])
def test_api_versions_v3_checks_the_client_software_name(client, name, version):
    """KIP-511: Kafka refuses names and versions that are not [a-zA-Z0-9.-]."""
    resp = client.call(ApiKey.API_VERSIONS, 3, client_software_name=name,
                       client_software_version=version)
    assert (resp.error_code, resp.api_keys) == (ErrorCode.INVALID_REQUEST, [])


def test_server_api_versions_response_header_is_v0_even_when_flexible(client):
    client.sock.sendall(RawClient.encode(ApiKey.API_VERSIONS, 3, 9, client_software_name="a",
                                         client_software_version="b"))
    frame = client.read_frame()
    assert frame[:4] == b"\x00\x00\x00\x09" and frame[4:6] == b"\x00\x00"   # no header tags


# --- DeleteRecords (21) ----------------------------------------------------------

@pytest.mark.parametrize("version", range(0, 3))
def test_delete_records_moves_log_start(client, version):
    client.create_topic("dr")
    for i in range(5):
        client.produce("dr", 0, make_batch([b"%d" % i]))
    p = delete_records(client, "dr", 0, 3, version)
    assert (p.error_code, p.low_watermark) == (0, 3)
    assert client.list_offset("dr", 0, -2).offset == 3
    assert client.fetch("dr", 0, 2).error_code == ErrorCode.OFFSET_OUT_OF_RANGE
    assert client.values("dr", 0, offset=3) == [(3, b"3"), (4, b"4")]
    assert client.fetch("dr", 0, 3).log_start_offset == 3


def test_delete_records_to_high_watermark_with_minus_one(client):
    client.create_topic("drhw")
    client.produce("drhw", 0, make_batch([b"a", b"b"]))
    p = delete_records(client, "drhw", 0, -1)
    assert (p.error_code, p.low_watermark) == (0, 2)
    assert client.produce("drhw", 0, make_batch([b"c"])).base_offset == 2
    assert client.values("drhw", 0, offset=2) == [(2, b"c")]


@pytest.mark.parametrize("offset", [3, 1000, -5])
def test_delete_records_beyond_high_watermark_is_out_of_range(client, offset):
    client.create_topic("drx")
    client.produce("drx", 0, make_batch([b"a", b"b"]))
    p = delete_records(client, "drx", 0, offset)
    assert p.error_code == ErrorCode.OFFSET_OUT_OF_RANGE
    assert client.list_offset("drx", 0, -2).offset == 0


def test_delete_records_unknown_partition(client):
    assert delete_records(client, "nope", 0, 0).error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_delete_records_of_a_topic_deleted_and_made_again_between_two_steps(start_broker, monkeypatch):
    """Verifies that DeleteRecords does not touch a topic made again under the
    name of the one it was asked about: UNKNOWN_TOPIC_OR_PARTITION, and the new
    topic keeps log start offset 0 and its records, before and after a restart.
    (It used to write the old log start offsets into the new topic's meta.db rows
    and cut segments in the directory both share.)"""
    broker = start_broker()
    with RawClient(broker.port) as a, RawClient(broker.port) as b:
        a.create_topic("dr-again", partitions=2)
        for p in (0, 1):
            a.produce("dr-again", p, make_batch([b"old-%d" % i for i in range(3)]))
        reached, release = held(monkeypatch, doze.LogManager, "delete_records", "before")
        a.send(ApiKey.DELETE_RECORDS, 2, timeout_ms=1000, topics=[Msg(name="dr-again", partitions=[
            Msg(partition_index=0, offset=2), Msg(partition_index=1, offset=-1)])])
        assert reached.wait(5)
        delete_topic(b, "dr-again")
        b.create_topic("dr-again", partitions=2)
        assert b.produce("dr-again", 0, make_batch([b"new"])).base_offset == 0
        release.set()
        _, resp = a.receive(ApiKey.DELETE_RECORDS, 2)
        assert [(p.error_code, p.low_watermark) for p in resp.topics[0].partitions] == \
            [(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1)] * 2
        assert b.values("dr-again", 0) == [(0, b"new")]
    stop(broker)
    broker = start_broker()
    with RawClient(broker.port) as c:
        assert [c.list_offset("dr-again", p, -2).offset for p in (0, 1)] == [0, 0]
        assert c.values("dr-again", 0) == [(0, b"new")]


# --- DescribeCluster (60) ----------------------------------------------------------

@pytest.mark.parametrize("version", range(0, 2))
def test_describe_cluster(client, broker, version):
    resp = client.call(ApiKey.DESCRIBE_CLUSTER, version, include_cluster_authorized_operations=False)
    assert resp.error_code == 0
    assert resp.controller_id == 1 and len(resp.cluster_id) == 22
    [b] = resp.brokers
    assert (b.broker_id, b.host, b.port) == (1, "127.0.0.1", broker.port)
    assert resp.cluster_id == client.metadata(None).cluster_id


def test_describe_cluster_id_survives_restart(start_broker):
    broker = start_broker()
    with RawClient(broker.port) as c:
        first = c.call(ApiKey.DESCRIBE_CLUSTER, 1).cluster_id
    stop(broker)
    broker = start_broker()
    with RawClient(broker.port) as c:
        assert c.call(ApiKey.DESCRIBE_CLUSTER, 1).cluster_id == first


def test_describe_cluster_unknown_endpoint_type(client):
    resp = client.call(ApiKey.DESCRIBE_CLUSTER, 1, endpoint_type=3)
    # Kafka (KIP-919): UNSUPPORTED_ENDPOINT_TYPE, 115 in Kafka's Errors
    assert resp.error_code == 115


###############################################################################
# 15. GROUP AND TRANSACTION APIS -- the coordinators' protocols, in API-key order
###############################################################################

def heartbeat(client, group, generation, member_id, instance=None):
    return client.call(ApiKey.HEARTBEAT, 4, group_id=group, generation_id=generation,
                       member_id=member_id, group_instance_id=instance).error_code


def describe_group(client, group):
    return client.call(ApiKey.DESCRIBE_GROUPS, 5, groups=[group]).groups[0]


ADD_PARTITIONS_CASES = [
    # state,     partitions asked,                 expected per partition
    ("empty",   [("ap", 0)],                       {("ap", 0): ErrorCode.NONE}),
    ("ongoing", [("ap", 0)],                       {("ap", 0): ErrorCode.NONE}),           # a retry
    ("empty",   [("ap", 0), ("nope", 0)],          {("ap", 0): ErrorCode.OPERATION_NOT_ATTEMPTED,
                                                    ("nope", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}),
    ("fenced",  [("ap", 0)],                       {("ap", 0): ErrorCode.PRODUCER_FENCED}),
    ("fenced v1", [("ap", 0)],                     {("ap", 0): ErrorCode.INVALID_PRODUCER_EPOCH}),
]


# (state the transaction is put in, action, expected error) -- Kafka's EndTxn table
END_TXN_CASES = [
    ("empty",            "commit",            ErrorCode.INVALID_TXN_STATE),
    ("empty",            "abort",             ErrorCode.INVALID_TXN_STATE),
    ("ongoing",          "commit",            ErrorCode.NONE),
    ("ongoing",          "abort",             ErrorCode.NONE),
    ("complete commit",  "commit",            ErrorCode.NONE),
    ("complete commit",  "abort",             ErrorCode.INVALID_TXN_STATE),
    ("complete abort",   "abort",             ErrorCode.NONE),
    ("complete abort",   "commit",            ErrorCode.INVALID_TXN_STATE),
    ("ongoing",          "commit, old epoch", ErrorCode.PRODUCER_FENCED),
    ("ongoing",          "commit, v1",        ErrorCode.NONE),
    ("fenced",           "commit",            ErrorCode.PRODUCER_FENCED),
    ("fenced",           "commit, v1",        ErrorCode.INVALID_PRODUCER_EPOCH),
    ("ongoing",          "commit, other id",  ErrorCode.INVALID_PRODUCER_ID_MAPPING),
]


def _put_txn_in(client, state):
    client.create_topic("et", 1)
    txn = Txn(client, "tx-et")
    if state != "empty":
        txn.add(("et", 0))
        txn.produce("et", 0, [b"x"])
    if state == "complete commit":
        assert txn.end(True) == 0
    elif state == "complete abort":
        assert txn.end(False) == 0
    elif state == "fenced":
        Txn(client, "tx-et")                 # a second owner fences the first
    return txn


def _txn_with_offsets(client, name):
    client.create_topic(name, 2)
    txn = Txn(client, "tx-" + name)
    txn.add((name, 0), (name, 1))
    txn.produce(name, 0, [b"p0"])
    txn.produce(name, 1, [b"p1"])
    txn.add_offsets("g-" + name)
    assert txn.commit_offsets("g-" + name, {(name, 0): 42}) == {(name, 0): 0}
    return txn


def _check_committed(client, name, txn):
    assert visible_values(client, name, 0) == [b"p0"]
    assert visible_values(client, name, 1) == [b"p1"]
    assert committed_offsets(client, "g-" + name, [(name, 0)], require_stable=True) == \
        {(name, 0): (0, 42)}
    assert describe_txn(client, "tx-" + name).transaction_state == "CompleteCommit"
    assert txn.end(True) == 0                          # EndTxn retried gets the outcome
    assert txn.end(False) == ErrorCode.INVALID_TXN_STATE


class FailingMarkers(doze.Files):
    """A disk that refuses control batches (markers) while .broken is set,
    with .errno (ENOSPC: no room, then room again)."""
    broken = False
    errno = errno.ENOSPC

    def write(self, fd, data):
        if self.broken and len(data) > 21 and data[21 + 1] & doze.ATTR_CONTROL:
            raise OSError(self.errno, "injected: marker write failed")
        super().write(fd, data)


TXN_STATES = ["empty", "ongoing", "prepare commit", "complete commit", "complete abort", "fenced"]
# API -> expected error in each of TXN_STATES (doze; Kafka's where they agree -- see
# the conformance recordings for the two places they do not: InitProducerId on an
# open transaction, and anything while markers are being written).
TXN_TABLE = {
    "InitProducerId":     [0, 0, 51, 0, 0, 90],
    "AddPartitionsToTxn": [0, 0, 51, 0, 0, 90],
    "AddOffsetsToTxn":    [0, 0, 51, 0, 0, 90],
    "TxnOffsetCommit":    [48, 0, 51, 48, 48, 47],
    "EndTxn commit":      [48, 0, 51, 0, 48, 90],
    "EndTxn abort":       [48, 0, 51, 48, 0, 90],
    "Produce":            [48, 0, 19, 48, 48, 47],
}


# --- Consumer groups (the classic protocol) ------------------------------------------

def test_offsets_commit_fetch_and_survive_a_restart(start_broker):
    broker = start_broker(GROUP_SETTINGS)
    with RawClient(broker.port) as c:
        c.create_topic("ot", 2)
        assert commit_offsets(c, "simple", {("ot", 0): 10, ("ot", 1): 20}) == \
            {("ot", 0): 0, ("ot", 1): 0}
        assert commit_offsets(c, "simple", {("nope", 0): 1}) == \
            {("nope", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
        assert committed_offsets(c, "simple", [("ot", 0), ("ot", 1)]) == \
            {("ot", 0): (0, 10), ("ot", 1): (0, 20)}
    stop(broker, clean=False)
    broker = start_broker(GROUP_SETTINGS)
    with RawClient(broker.port) as c:
        assert committed_offsets(c, "simple", [("ot", 0), ("ot", 1), ("ot", 5)]) == \
            {("ot", 0): (0, 10), ("ot", 1): (0, 20), ("ot", 5): (0, -1)}
        r = c.call(ApiKey.OFFSET_FETCH, 8, groups=[Msg(group_id="simple", topics=None),
                                                   Msg(group_id="none", topics=None)])
        assert [(g.group_id, [(t.name, [(p.partition_index, p.committed_offset) for p in t.partitions])
                              for t in g.topics]) for g in r.groups] == \
            [("simple", [("ot", [(0, 10), (1, 20)])]), ("none", [])]
        r = c.call(ApiKey.OFFSET_DELETE, 0, group_id="simple",
                   topics=[Msg(name="ot", partitions=[Msg(partition_index=0)])])
        assert (r.error_code, r.topics[0].partitions[0].error_code) == (0, 0)
        assert committed_offsets(c, "simple", [("ot", 0)]) == {("ot", 0): (0, -1)}
        lg = c.call(ApiKey.LIST_GROUPS, 4, states_filter=["Empty"])
        assert [g.group_id for g in lg.groups] == ["simple"]
        r = c.call(ApiKey.DELETE_GROUPS, 2, groups_names=["simple", "never"])
        assert [(x.group_id, x.error_code) for x in r.results] == \
            [("simple", 0), ("never", ErrorCode.GROUP_ID_NOT_FOUND)]
        assert committed_offsets(c, "simple", [("ot", 1)]) == {("ot", 1): (0, -1)}


def test_offsets_commit_checks_generation_and_member(start_broker):
    broker = start_broker(GROUP_SETTINGS)
    with RawClient(broker.port) as c:
        c.create_topic("gt", 1)
        j = join(c, "live")
        tp = ("gt", 0)
        assert commit_offsets(c, "live", {tp: 1}, 1, j.member_id) == {tp: ErrorCode.REBALANCE_IN_PROGRESS}
        sync(c, "live", 1, j.member_id, {j.member_id: b""})
        assert commit_offsets(c, "live", {tp: 1}, 1, j.member_id) == {tp: 0}
        assert commit_offsets(c, "live", {tp: 1}, 7, j.member_id) == {tp: ErrorCode.ILLEGAL_GENERATION}
        assert commit_offsets(c, "live", {tp: 1}, 1, "ghost") == {tp: ErrorCode.UNKNOWN_MEMBER_ID}
        assert commit_offsets(c, "live", {tp: 1}) == {tp: ErrorCode.UNKNOWN_MEMBER_ID}  # not empty
        r = c.call(ApiKey.DELETE_GROUPS, 2, groups_names=["live"])
        assert r.results[0].error_code == ErrorCode.NON_EMPTY_GROUP


def test_offsets_expire_after_the_group_is_empty_for_the_retention(start_broker):
    clock = FakeClock()
    broker = start_broker(dict(GROUP_SETTINGS, **{"offsets.retention.minutes": 1,
                                                  "offsets.retention.check.interval.ms": 100}),
                          clock=clock)
    with RawClient(broker.port) as c:
        c.create_topic("xt", 1)
        commit_offsets(c, "old", {("xt", 0): 5})
        clock.advance(30_000)
        loop_passes(broker)                                  # the expiry check ran: too early
        assert committed_offsets(c, "old", [("xt", 0)]) == {("xt", 0): (0, 5)}
        clock.advance(31_000)
        broker.waker.wake()
        assert wait_until(lambda: committed_offsets(c, "old", [("xt", 0)]) == {("xt", 0): (0, -1)})


def test_find_coordinator_is_always_this_broker(client, broker):
    """The first lookup makes the internal topic and answers COORDINATOR_NOT_AVAILABLE,
    as Kafka does (clients retry); from then on, always this broker."""
    r = client.call(ApiKey.FIND_COORDINATOR, 3, key="g", key_type=0)
    assert (r.error_code, r.node_id) == (ErrorCode.COORDINATOR_NOT_AVAILABLE, -1)
    r = client.call(ApiKey.FIND_COORDINATOR, 3, key="g", key_type=0)
    assert (r.error_code, r.node_id, r.port) == (0, 1, broker.port)
    assert client.call(ApiKey.FIND_COORDINATOR, 4, key_type=1, coordinator_keys=["t0"]) \
        .coordinators[0].error_code == ErrorCode.COORDINATOR_NOT_AVAILABLE
    r = client.call(ApiKey.FIND_COORDINATOR, 4, key_type=1, coordinator_keys=["t1", "t2"])
    assert [(x.key, x.port, x.error_code) for x in r.coordinators] == \
        [("t1", broker.port, 0), ("t2", broker.port, 0)]


def test_find_coordinator_while_a_create_topics_makes_the_internal_topic(start_broker, monkeypatch):
    """Verifies that a coordinator lookup while a CreateTopics is still making
    __consumer_offsets in steps is told to come back (COORDINATOR_NOT_AVAILABLE)
    instead of making the topic a second time over the first's directories."""
    broker = start_broker()
    reached, release = held(monkeypatch, doze.LogManager, "_make_partitions", "after")
    with RawClient(broker.port) as a, RawClient(broker.port) as b:
        a.send(ApiKey.CREATE_TOPICS, 7, timeout_ms=5000, validate_only=False, topics=[
            Msg(name=doze.CONSUMER_OFFSETS, num_partitions=3, replication_factor=-1, configs=[])])
        assert reached.wait(5)
        r = b.call(ApiKey.FIND_COORDINATOR, 3, key="g", key_type=0)
        assert r.error_code == ErrorCode.COORDINATOR_NOT_AVAILABLE
        release.set()
        _, resp = a.receive(ApiKey.CREATE_TOPICS, 7)
        assert resp.topics[0].error_code == 0
        assert b.call(ApiKey.FIND_COORDINATOR, 3, key="g", key_type=0).error_code == 0
        [t] = b.metadata([doze.CONSUMER_OFFSETS]).topics
        assert len(t.partitions) == 3
        for p in range(3):
            assert os.path.isdir(os.path.join(broker.config.data_dir, f"{doze.CONSUMER_OFFSETS}-{p}"))


def test_internal_topics_are_shown_as_kafka_shows_them(client, broker):
    """Made by the first coordinator lookup, with Kafka's partition counts and
    configs; listed with is_internal; closed to clients' writes and deletes."""
    md = client.metadata([doze.CONSUMER_OFFSETS], allow_auto_topic_creation=False)
    assert (md.topics[0].error_code, md.topics[0].is_internal) == (3, True)
    client.call(ApiKey.FIND_COORDINATOR, 4, key_type=0, coordinator_keys=["g"])
    [t] = client.metadata([doze.CONSUMER_OFFSETS]).topics
    assert (t.error_code, t.is_internal, len(t.partitions)) == (0, True, 50)
    assert [n for n in (x.name for x in client.metadata(None).topics)] == [doze.CONSUMER_OFFSETS]
    got = config_map(describe_configs(client, 2, doze.CONSUMER_OFFSETS))
    assert (got["cleanup.policy"], got["segment.bytes"]) == (("compact", 1), ("104857600", 1))
    assert client.produce(doze.CONSUMER_OFFSETS, 0, make_batch([b"x"])).error_code == \
        ErrorCode.INVALID_TOPIC_EXCEPTION
    r = client.call(ApiKey.DELETE_RECORDS, 2, timeout_ms=1000, topics=[
        Msg(name=doze.CONSUMER_OFFSETS, partitions=[Msg(partition_index=0, offset=0)])])
    assert r.topics[0].partitions[0].error_code == ErrorCode.INVALID_TOPIC_EXCEPTION
    [res] = client.create_topics(("__cluster_metadata", 1, {}))
    assert res.error_code == ErrorCode.INVALID_REQUEST


def test_group_one_member_joins_syncs_heartbeats_and_leaves(start_broker):
    broker = start_broker(GROUP_SETTINGS)
    with RawClient(broker.port) as c:
        first = receive(c, ApiKey.JOIN_GROUP, send_join(c, "solo"))
        assert first.error_code == ErrorCode.MEMBER_ID_REQUIRED and first.member_id
        j = receive(c, ApiKey.JOIN_GROUP, send_join(c, "solo", member_id=first.member_id))
        assert (j.error_code, j.generation_id, j.leader, j.protocol_name) == \
            (0, 1, first.member_id, "range")
        assert [(m.member_id, m.metadata) for m in j.members] == [(first.member_id, b"sub")]
        s = sync(c, "solo", 1, j.member_id, {j.member_id: b"assigned"})
        assert (s.error_code, s.assignment) == (0, b"assigned")
        assert heartbeat(c, "solo", 1, j.member_id) == 0
        d = describe_group(c, "solo")
        assert (d.group_state, d.protocol_data, [m.member_assignment for m in d.members]) == \
            ("Stable", "range", [b"assigned"])
        r = c.call(ApiKey.LEAVE_GROUP, 5, group_id="solo", members=[Msg(member_id=j.member_id)])
        assert (r.error_code, r.members[0].error_code) == (0, 0)
        assert describe_group(c, "solo").group_state == "Empty"
        assert heartbeat(c, "solo", 1, j.member_id) == ErrorCode.UNKNOWN_MEMBER_ID


def test_group_second_member_triggers_a_rebalance(start_broker):
    broker = start_broker(GROUP_SETTINGS)
    with RawClient(broker.port) as a, RawClient(broker.port) as b:
        ja = join(a, "pair")
        assert sync(a, "pair", 1, ja.member_id, {ja.member_id: b"all"}).assignment == b"all"
        sent_b = send_join(b, "pair")
        first_b = receive(b, ApiKey.JOIN_GROUP, sent_b)
        sent_b = send_join(b, "pair", member_id=first_b.member_id)      # parks: rebalance
        assert wait_until(lambda: describe_group(a, "pair").group_state == "PreparingRebalance")
        assert heartbeat(a, "pair", 1, ja.member_id) == ErrorCode.REBALANCE_IN_PROGRESS
        ja2 = join(a, "pair", member_id=ja.member_id)
        jb = receive(b, ApiKey.JOIN_GROUP, sent_b)
        assert ja2.generation_id == jb.generation_id == 2
        assert ja2.leader == jb.leader == ja.member_id
        assert sorted(m.member_id for m in ja2.members) == sorted([ja.member_id, jb.member_id])
        assert jb.members == []                        # only the leader sees subscriptions
        sent_sync_b = send_sync(b, "pair", 2, jb.member_id)              # waits for the leader
        sa = sync(a, "pair", 2, ja.member_id, {ja.member_id: b"p0", jb.member_id: b"p1"})
        sb = receive(b, ApiKey.SYNC_GROUP, sent_sync_b)
        assert (sa.assignment, sb.assignment) == (b"p0", b"p1")
        assert heartbeat(a, "pair", 1, ja.member_id) == ErrorCode.ILLEGAL_GENERATION
        assert heartbeat(b, "pair", 2, jb.member_id) == 0


def test_group_session_timeout_expels_a_silent_member(start_broker):
    clock = FakeClock()
    broker = start_broker(GROUP_SETTINGS, clock=clock)
    with RawClient(broker.port) as a, RawClient(broker.port) as b:
        ja = join(a, "quiet", session_ms=6000)
        sync(a, "quiet", 1, ja.member_id, {ja.member_id: b"x"})
        sent_b = send_join(b, "quiet", session_ms=6000)
        jb0 = receive(b, ApiKey.JOIN_GROUP, sent_b)
        sent_b = send_join(b, "quiet", member_id=jb0.member_id, session_ms=6000)
        assert wait_until(lambda: describe_group(a, "quiet").group_state == "PreparingRebalance")
        ja2 = join(a, "quiet", member_id=ja.member_id, session_ms=6000)
        jb = receive(b, ApiKey.JOIN_GROUP, sent_b)
        sent_sb = send_sync(b, "quiet", 2, jb.member_id)
        sync(a, "quiet", 2, ja.member_id, {ja.member_id: b"0", jb.member_id: b"1"})
        receive(b, ApiKey.SYNC_GROUP, sent_sb)
        clock.advance(4000)
        assert heartbeat(a, "quiet", 2, ja.member_id) == 0           # a keeps beating, b does not
        clock.advance(4000)
        broker.waker.wake()
        assert wait_until(lambda: heartbeat(a, "quiet", 2, ja.member_id) == ErrorCode.REBALANCE_IN_PROGRESS)
        ja3 = join(a, "quiet", member_id=ja.member_id, session_ms=6000)
        assert (ja3.generation_id, [m.member_id for m in ja3.members]) == (3, [ja.member_id])
        assert ja2.generation_id == 2


def test_group_tick_comes_at_a_members_deadline_not_a_ms_later(start_broker):
    # librdkafka's 0081 closes static members (no LeaveGroup; their last OffsetCommit
    # restarts the session), sleeps exactly session.timeout.ms, then deletes the groups:
    # a sweep even 1 ms late leaves the group non-empty, where Kafka's exact timer does not.
    clock = FakeClock()
    broker = start_broker(GROUP_SETTINGS, clock=clock)
    with RawClient(broker.port) as a:
        ja = join(a, "exact", session_ms=6000, instance="i-0")
        sync(a, "exact", 1, ja.member_id, {ja.member_id: b"x"})
        deadline_ms = broker.run_in_loop(lambda: broker.groups.get("exact").members[ja.member_id].deadline_ms)
        clock.advance(5950.25)                        # inside the last sweep before the deadline
        broker.waker.wake()

        def next_tick():
            return broker.run_in_loop(lambda: broker.groups.next_tick_s)
        assert wait_until(lambda: next_tick() == deadline_ms / 1000)
        clock.advance(deadline_ms - clock.now * 1000)  # exactly the deadline
        broker.waker.wake()
        assert wait_until(lambda: describe_group(a, "exact").group_state == "Empty")


def test_group_static_member_restart_gets_its_assignment_without_a_rebalance(start_broker):
    broker = start_broker(GROUP_SETTINGS)
    with RawClient(broker.port) as a, RawClient(broker.port) as b:
        ja = join(a, "static", instance="instance-a")
        assert ja.error_code == 0                      # static members need no MEMBER_ID_REQUIRED
        sync(a, "static", 1, ja.member_id, {ja.member_id: b"everything"}, instance="instance-a")
        sent_b = send_join(b, "static", instance="instance-b")
        assert wait_until(lambda: describe_group(a, "static").group_state == "PreparingRebalance")
        ja2 = join(a, "static", member_id=ja.member_id, instance="instance-a")
        jb = receive(b, ApiKey.JOIN_GROUP, sent_b)
        generation = ja2.generation_id
        sent_sb = send_sync(b, "static", generation, jb.member_id, instance="instance-b")
        sync(a, "static", generation, ja.member_id,
             {ja.member_id: b"part-a", jb.member_id: b"part-b"}, instance="instance-a")
        assert receive(b, ApiKey.SYNC_GROUP, sent_sb).assignment == b"part-b"
    with RawClient(broker.port) as b2, RawClient(broker.port) as a:
        # instance-b "restarts": a new connection, no member id, same instance id
        # a restarted consumer's subscription bytes differ (it owns nothing yet):
        # only a change of the selected protocol would mean a rebalance (Kafka)
        back = join(b2, "static", instance="instance-b", protocols=(("range", b"restarted"),))
        assert (back.error_code, back.generation_id) == (0, generation)   # no new generation
        assert back.member_id != jb.member_id
        assert sync(b2, "static", generation, back.member_id, instance="instance-b").assignment == b"part-b"
        assert heartbeat(a, "static", generation, ja.member_id, instance="instance-a") == 0
        assert describe_group(a, "static").group_state == "Stable"
        assert heartbeat(a, "static", generation, jb.member_id, instance="instance-b") == \
            ErrorCode.FENCED_INSTANCE_ID


@pytest.mark.parametrize("case,expected", [
    ("other protocol type", ErrorCode.INCONSISTENT_GROUP_PROTOCOL),
    ("no common assignor", ErrorCode.INCONSISTENT_GROUP_PROTOCOL),
    ("session too short", ErrorCode.INVALID_SESSION_TIMEOUT),
    ("unknown member", ErrorCode.UNKNOWN_MEMBER_ID),
    ("group full", ErrorCode.GROUP_MAX_SIZE_REACHED),
    ("empty group id", ErrorCode.INVALID_GROUP_ID),
])
def test_group_join_errors(start_broker, case, expected):
    broker = start_broker(dict(GROUP_SETTINGS, **{"group.max.size": 1}))
    with RawClient(broker.port) as a, RawClient(broker.port) as b:
        j = join(a, "g")
        sync(a, "g", 1, j.member_id, {j.member_id: b""})
        kw = {"other protocol type": dict(protocol_type="connect"),
              "no common assignor": dict(protocols=(("roundrobin", b""),)),
              "session too short": dict(session_ms=10),
              "unknown member": dict(member_id="ghost"),
              "group full": {}, "empty group id": {}}[case]
        group = "" if case == "empty group id" else "g"
        assert receive(b, ApiKey.JOIN_GROUP, send_join(b, group, **kw)).error_code == expected


@pytest.mark.parametrize("version", range(0, 10))
def test_server_join_group_error_answers_decode_at_every_version(client, version):
    """JoinGroup's protocol_name may be null only from v7 (Kafka's schema): the
    error answers and the v4+ MEMBER_ID_REQUIRED first join carry "" before it.
    The test client decodes strictly, refusing a null where the schema has none."""
    base = dict(group_id="jg", session_timeout_ms=10_000, rebalance_timeout_ms=10_000,
                protocol_type="consumer", protocols=[Msg(name="range", metadata=b"")])
    unknown = client.call(ApiKey.JOIN_GROUP, version, member_id="nobody", **base)
    assert unknown.error_code == ErrorCode.UNKNOWN_MEMBER_ID
    assert unknown.protocol_name == ("" if version < 7 else None)
    bad = client.call(ApiKey.JOIN_GROUP, version, member_id="", **dict(base, session_timeout_ms=1))
    assert bad.error_code == ErrorCode.INVALID_SESSION_TIMEOUT
    if version >= 4:
        first = client.call(ApiKey.JOIN_GROUP, version, member_id="", **base)
        assert first.error_code == ErrorCode.MEMBER_ID_REQUIRED and first.member_id
        assert first.protocol_name == ("" if version < 7 else None)


def test_group_members_carry_on_after_a_restart(start_broker):
    """Verifies that a stable group is stored: after a restart its members'
    heartbeats and commits with the same generation are accepted."""
    broker = start_broker(GROUP_SETTINGS)
    with RawClient(broker.port) as c:
        c.create_topic("rt", 1)
        j = join(c, "durable")
        sync(c, "durable", 1, j.member_id, {j.member_id: b"mine"})
    stop(broker, clean=False)
    broker = start_broker(GROUP_SETTINGS)
    with RawClient(broker.port) as c:
        assert heartbeat(c, "durable", 1, j.member_id) == 0
        assert sync(c, "durable", 1, j.member_id).assignment == b"mine"
        assert commit_offsets(c, "durable", {("rt", 0): 3}, 1, j.member_id) == {("rt", 0): 0}


# --- InitProducerId (22) ---------------------------------------------------------

@pytest.mark.parametrize("version", range(0, 6))
def test_init_producer_id_every_version_gives_fresh_ids(client, version):
    a = init_producer_id(client, version)
    b = init_producer_id(client, version)
    assert a[0] >= 0 and b[0] >= 0 and a[0] != b[0]
    assert a[1] == b[1] == 0


def test_init_producer_id_ids_are_not_reused_after_restart(start_broker):
    broker = start_broker()
    with RawClient(broker.port) as c:
        before = {init_producer_id(c)[0] for _ in range(3)}
    stop(broker, clean=False)
    broker = start_broker()
    with RawClient(broker.port) as c:
        after = {init_producer_id(c)[0] for _ in range(3)}
    assert not before & after and min(after) > max(before)


def test_init_producer_id_fences_and_aborts_the_open_transaction(client):
    """Verifies that a second InitProducerId aborts the open transaction before
    answering (doze), returns the epoch Kafka's retry would (old + 2), and that
    the old producer is fenced everywhere."""
    client.create_topic("fence", 1)
    old = Txn(client, "tx-fence")
    old.add(("fence", 0))
    old.produce("fence", 0, [b"zombie"])
    new = Txn(client, "tx-fence")
    assert (new.producer_id, new.epoch) == (old.producer_id, old.epoch + 2)
    assert describe_txn(client, "tx-fence").transaction_state == "Empty"
    assert visible_values(client, "fence", 0) == []
    assert fetch_isolated(client, "fence", 0).last_stable_offset == 2      # data + ABORT marker
    assert old.produce("fence", 0, [b"late"]).error_code == ErrorCode.INVALID_PRODUCER_EPOCH
    assert old.add(("fence", 0)) == {("fence", 0): ErrorCode.PRODUCER_FENCED}
    assert old.end(True) == ErrorCode.PRODUCER_FENCED
    assert old.end(True, version=1) == ErrorCode.INVALID_PRODUCER_EPOCH


def test_init_producer_id_rules(client):
    r = client.call(ApiKey.INIT_PRODUCER_ID, 4, transactional_id="t-max",
                    transaction_timeout_ms=900_001)
    assert r.error_code == ErrorCode.INVALID_TRANSACTION_TIMEOUT
    r = client.call(ApiKey.INIT_PRODUCER_ID, 4, transactional_id="t-new", transaction_timeout_ms=1000)
    assert (r.error_code, r.producer_epoch) == (0, 0)                    # never used: epoch 0
    again = client.call(ApiKey.INIT_PRODUCER_ID, 4, transactional_id="t-new",
                        transaction_timeout_ms=1000, producer_id=r.producer_id,
                        producer_epoch=r.producer_epoch)
    assert (again.producer_id, again.producer_epoch) == (r.producer_id, 1)   # KIP-360 bump
    retry = client.call(ApiKey.INIT_PRODUCER_ID, 4, transactional_id="t-new",
                        transaction_timeout_ms=1000, producer_id=r.producer_id,
                        producer_epoch=r.producer_epoch)
    assert (retry.error_code, retry.producer_epoch) == (0, 1)            # a retry: same answer
    stale = client.call(ApiKey.INIT_PRODUCER_ID, 4, transactional_id="t-new",
                        transaction_timeout_ms=1000, producer_id=r.producer_id + 77, producer_epoch=0)
    assert stale.error_code == ErrorCode.PRODUCER_FENCED
    stale3 = client.call(ApiKey.INIT_PRODUCER_ID, 3, transactional_id="t-new",
                         transaction_timeout_ms=1000, producer_id=r.producer_id + 77, producer_epoch=0)
    assert stale3.error_code == ErrorCode.INVALID_PRODUCER_EPOCH
    idem = client.call(ApiKey.INIT_PRODUCER_ID, 4, transactional_id=None, transaction_timeout_ms=1)
    assert idem.error_code == 0 and idem.producer_id != r.producer_id


# --- Transactions (KIP-98, classic protocol) --------------------------------------

def test_txn_scenario_commit_and_abort_as_read_committed_sees_them(client):
    """Verifies that read_committed sees exactly the committed transactions, and
    read_uncommitted everything, with the aborted ones listed (KIP-98)."""
    client.create_topic("orders", 1)
    txn = Txn(client, "tx-orders")
    assert txn.add(("orders", 0)) == {("orders", 0): 0}
    assert txn.produce("orders", 0, [b"a1", b"a2"]).error_code == 0
    assert txn.end(commit=True) == 0
    assert txn.add(("orders", 0)) == {("orders", 0): 0}
    assert txn.produce("orders", 0, [b"b1"]).error_code == 0
    assert txn.end(commit=False) == 0
    assert txn.add(("orders", 0)) == {("orders", 0): 0}
    assert txn.produce("orders", 0, [b"c1"]).error_code == 0
    assert txn.end(commit=True) == 0
    assert visible_values(client, "orders", 0) == [b"a1", b"a2", b"c1"]
    assert visible_values(client, "orders", 0, read_committed=False) == [b"a1", b"a2", b"b1", b"c1"]
    part = fetch_isolated(client, "orders", 0)
    # offsets: a1 a2 COMMIT(2) b1(3) ABORT(4) c1(5) COMMIT(6)
    assert [(a.producer_id, a.first_offset) for a in part.aborted_transactions] == [(txn.producer_id, 3)]
    assert part.last_stable_offset == part.high_watermark == 7
    assert fetch_isolated(client, "orders", 0, read_committed=False).aborted_transactions is None


def test_txn_over_hundreds_of_partitions_writes_its_markers_in_steps(client, broker):
    """A transaction over 300 partitions: EndTxn's markers go out PARTITIONS_PER_STEP
    a pass, over several passes, and the answer still comes only once every
    marker is durable: read_committed then sees every partition."""
    client.create_topic("wide", 300)
    txn = Txn(client, "tx-wide")
    tps = [("wide", p) for p in range(300)]
    assert set(txn.add(*tps).values()) == {0}
    for p in range(300):
        assert txn.produce("wide", p, [b"w%d" % p]).error_code == 0
    assert doze.PARTITIONS_PER_STEP < 300
    assert txn.end(commit=True) == 0
    assert all(visible_values(client, "wide", p) == [b"w%d" % p] for p in range(300))
    assert all(fetch_isolated(client, "wide", p).last_stable_offset == 2 for p in (0, 150, 299))


def test_txn_scenario_open_transaction_holds_the_last_stable_offset(client):
    """Verifies that read_committed stops at the first offset of an open
    transaction, and ListOffsets(latest, read_committed) answers that LSO."""
    client.create_topic("lso", 1)
    client.produce("lso", 0, make_batch([b"plain"]))
    txn = Txn(client, "tx-lso")
    txn.add(("lso", 0))
    txn.produce("lso", 0, [b"pending"])
    client.produce("lso", 0, make_batch([b"after"]))
    part = fetch_isolated(client, "lso", 0)
    assert (part.high_watermark, part.last_stable_offset) == (3, 1)
    assert visible_values(client, "lso", 0) == [b"plain"]
    r = client.call(ApiKey.LIST_OFFSETS, 5, replica_id=-1, isolation_level=1, topics=[
        Msg(name="lso", partitions=[Msg(partition_index=0, timestamp=-1)])])
    assert r.topics[0].partitions[0].offset == 1
    assert client.list_offset("lso", 0, -1).offset == 3          # read_uncommitted: the HW
    assert txn.end(commit=True) == 0
    assert visible_values(client, "lso", 0) == [b"plain", b"pending", b"after"]


@pytest.mark.parametrize("state,tps,expected", ADD_PARTITIONS_CASES,
                         ids=[c[0] + "-" + str(len(c[1])) for c in ADD_PARTITIONS_CASES])
def test_add_partitions_to_txn_in_every_state(client, state, tps, expected):
    client.create_topic("ap", 1)
    txn = Txn(client, "tx-ap")
    if state == "ongoing":
        txn.add(("ap", 0))
    if state.startswith("fenced"):
        Txn(client, "tx-ap")
    assert txn.add(*tps, version=1 if state.endswith("v1") else 3) == expected
    if ErrorCode.OPERATION_NOT_ATTEMPTED in expected.values():
        assert describe_txn(client, "tx-ap").transaction_state == "Empty"   # nothing was added


def test_add_partitions_unknown_transactional_id_is_a_mapping_error(client):
    client.create_topic("ap2", 1)
    r = client.call(ApiKey.ADD_PARTITIONS_TO_TXN, 3, transactional_id="never-inited",
                    producer_id=5, producer_epoch=0, topics=[Msg(name="ap2", partitions=[0])])
    assert r.results_by_topic[0].results_by_partition[0].partition_error_code == \
        ErrorCode.INVALID_PRODUCER_ID_MAPPING


@pytest.mark.parametrize("state,action,expected", END_TXN_CASES,
                         ids=[f"{s}-{a}" for s, a, _ in END_TXN_CASES])
def test_end_txn_in_every_state(client, state, action, expected):
    txn = _put_txn_in(client, state)
    commit = action.startswith("commit")
    kw = {}
    if "old epoch" in action:
        kw["epoch"] = txn.epoch - 1
    if "v1" in action:
        kw["version"] = 1
    if "other id" in action:
        kw["producer_id"] = txn.producer_id + 1000
    assert txn.end(commit, **kw) == expected


@pytest.fixture
def tv2(start_broker):
    """A broker with transaction.version 2 finalized, and a client."""
    broker = start_broker({"doze.transaction.version": 2})
    with RawClient(broker.port) as c:
        yield c


def test_tv2_end_txn_bumps_the_epoch_at_each_end_and_a_retry_gets_the_same_answer(tv2):
    """EndTxn v5: the answer is the next transaction's epoch; the same end
    asked again from the old epoch gets it again, the other end
    INVALID_TXN_STATE; the partitions refuse the old epoch (Kafka 4.3.1's
    TransactionCoordinator.endTransaction, recorded as tv2-commit-and-retries)."""
    tv2.create_topic("t2", 1)
    txn = Txn(tv2, "tx-2", version=5)
    pid, e = txn.producer_id, txn.epoch
    assert txn.produce("t2", 0, [b"a"], version=12).error_code == 0             # no AddPartitionsToTxn
    assert describe_txn(tv2, "tx-2").transaction_state == "Ongoing"
    r = txn.end_answer(True)
    assert (r.error_code, r.producer_id, r.producer_epoch) == (0, pid, e + 1)
    again = [txn.end_answer(commit, epoch=epoch, version=5) for commit, epoch in
             ((True, e), (False, e), (True, e + 1), (True, e + 7))]
    assert [(a.error_code, a.producer_id, a.producer_epoch) for a in again] == [
        (0, pid, e + 1), (ErrorCode.INVALID_TXN_STATE, -1, -1), (ErrorCode.INVALID_TXN_STATE, -1, -1),
        (ErrorCode.PRODUCER_FENCED, -1, -1)]
    assert txn.end_answer(True, producer_id=pid + 1000).error_code == ErrorCode.INVALID_PRODUCER_ID_MAPPING
    assert txn.produce("t2", 0, [b"late"], epoch=e, seq=1, version=12).error_code == \
        ErrorCode.INVALID_PRODUCER_EPOCH                                          # the marker carried e + 1
    r = txn.end_answer(False)                                                     # an abort of nothing open
    assert (r.error_code, r.producer_epoch) == (0, e + 2)
    assert txn.end_answer(False, epoch=e + 1).producer_epoch == e + 2             # ... asked again
    assert txn.produce("t2", 0, [b"b"], version=12, seq=1).error_code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert txn.produce("t2", 0, [b"b"], version=12).error_code == 0              # a new epoch starts at 0
    assert txn.end_answer(True).producer_epoch == e + 3
    assert visible_values(tv2, "t2", 0) == [b"a", b"b"]


def test_tv2_a_late_end_txn_is_fenced_where_the_classic_one_ends_the_next_transaction(tv2):
    """KAFKA-17754: classic EndTxn keeps the epoch, so a late copy of the first
    transaction's commit ends the second; version 2's carries the old epoch."""
    tv2.create_topic("late", 1)
    for version, expected, state in ((3, 0, "CompleteCommit"), (5, ErrorCode.PRODUCER_FENCED, "Ongoing")):
        txn = Txn(tv2, f"tx-late-{version}", version=5)
        first = txn.epoch
        if version < 5:
            txn.whole("late", 0, [b"first"], commit=True)
            txn.add(("late", 0))
            txn.produce("late", 0, [b"second"])
        else:
            txn.produce("late", 0, [b"first"], version=12)
            txn.end_answer(True)
            txn.produce("late", 0, [b"second"], version=12)
        late = tv2.call(ApiKey.END_TXN, version, transactional_id=txn.id, producer_id=txn.producer_id,
                        producer_epoch=first, committed=True)
        assert late.error_code == expected
        assert describe_txn(tv2, txn.id).transaction_state == state


def test_tv2_txn_offset_commit_v5_adds_the_group_itself(tv2):
    tv2.create_topic("in2", 1)
    txn = Txn(tv2, "tx-offsets2", version=5)
    assert txn.commit_offsets("g2", {("in2", 0): 7}, version=5) == {("in2", 0): 0}      # no AddOffsetsToTxn
    d = describe_txn(tv2, "tx-offsets2")
    assert d.transaction_state == "Ongoing" and \
        [t.topic for t in d.topics] == ["__consumer_offsets"]
    assert txn.commit_offsets("g2", {("in2", 0): 8}, version=4) == {("in2", 0): 0}      # added already
    assert txn.end_answer(True).error_code == 0
    r = tv2.call(ApiKey.OFFSET_FETCH, 8, groups=[Msg(group_id="g2", topics=None)], require_stable=True)
    assert [p.committed_offset for t in r.groups[0].topics for p in t.partitions] == [8]
    late = Txn(tv2, "tx-offsets-late", version=5)
    assert late.commit_offsets("g3", {("in2", 0): 1}, version=4) == {("in2", 0): ErrorCode.TRANSACTION_ABORTABLE}


def test_tv2_is_offered_with_the_feature_and_served_always_as_kafka_serves_it(start_broker):
    """ApiVersions lists Produce v12, EndTxn v5 and TxnOffsetCommit v5 only with
    transaction.version 2 finalized (the Java client turns version 2 on from the
    feature alone); a request of those versions is handled as version 2 at any level."""
    broker = start_broker()
    with RawClient(broker.port) as c:
        def offered():
            r = c.call(ApiKey.API_VERSIONS, 4, **SOFTWARE)
            return ({k.api_key: k.max_version for k in r.api_keys if k.api_key in (0, 26, 28)},
                    [(f.name, f.max_version_level) for f in r.finalized_features], r.finalized_features_epoch)
        first = offered()
        assert first[:2] == ({0: 9, 26: 4, 28: 4}, [("transaction.version", 1)])
        assert c.call(ApiKey.API_VERSIONS, 3, **SOFTWARE).supported_features == []    # KAFKA-17492
        c.create_topic("any", 1)
        txn = Txn(c, "tx-any", version=5)
        txn.produce("any", 0, [b"x"], version=12)
        assert txn.end_answer(True).producer_epoch == 1                          # version 2 at level 1
        update = [Msg(feature="transaction.version", max_version_level=2, upgrade_type=1)]
        r = c.call(ApiKey.UPDATE_FEATURES, 2, feature_updates=update, validate_only=True)
        assert r.error_code == 0 and offered()[:2] == first[:2]
        assert c.call(ApiKey.UPDATE_FEATURES, 1, feature_updates=update).results[0].error_code == 0
        second = offered()
        assert second[:2] == ({0: 12, 26: 5, 28: 5}, [("transaction.version", 2)]) and second[2] > first[2]
        down = [Msg(feature="transaction.version", max_version_level=1, upgrade_type=1)]
        r = c.call(ApiKey.UPDATE_FEATURES, 2, feature_updates=down)
        assert r.error_code == ErrorCode.INVALID_UPDATE_VERSION and "downgrade" in r.error_message
    stop(broker)
    broker = start_broker()                                                     # a restart keeps the level
    with RawClient(broker.port) as c:
        r = c.call(ApiKey.API_VERSIONS, 4, **SOFTWARE)
        assert [(f.name, f.max_version_level) for f in r.finalized_features] == [("transaction.version", 2)]
        assert r.finalized_features_epoch >= second[2]


def test_kafka_timing_answers_end_txn_at_the_decision_and_a_reader_waits_for_the_markers(tmp_path):
    """doze.transaction.answer.after=decision: EndTxn is answered once PrepareCommit
    is stored (Kafka's timing); a read_committed reader does not see the
    transaction until its markers land (doze.transaction.markers.delay.ms, on
    the broker's clock). doze's default answers after the markers."""
    settings = {"doze.transaction.answer.after": "decision", "doze.transaction.markers.delay.ms": 60000}
    with doze.running(settings, data_dir=str(tmp_path / "kafka-timing")) as b, RawClient(b.port) as c:
        c.create_topic("orders", 1)
        t = Txn(c, "tx")
        t.add(("orders", 0))
        assert t.produce("orders", 0, [b"told"]).error_code == 0
        assert t.end(commit=True) == 0                                       # "committed"
        assert b.transaction("tx")["transaction_state"] == "PrepareCommit"
        assert b.records("orders", 0, "committed") == []                     # ... and a reader sees nothing
        assert b.offsets("orders", 0)["last_stable_offset"] == 0
        assert t.end(commit=True) == ErrorCode.CONCURRENT_TRANSACTIONS       # as Kafka answers meanwhile
        assert t.add(("orders", 0)) == {("orders", 0): ErrorCode.CONCURRENT_TRANSACTIONS}
        b.advance(60000)                                                     # the markers land
        assert b.wait_until(lambda b: b.transaction("tx")["transaction_state"] == "CompleteCommit")
        assert [r["value"] for r in b.records("orders", 0, "committed")] == [b"told"]
        assert b.offsets("orders", 0) == {"log_start_offset": 0, "last_stable_offset": 2, "high_watermark": 2}
    with doze.running(data_dir=str(tmp_path / "doze-timing")) as b, RawClient(b.port) as c:
        c.create_topic("orders", 1)
        t = Txn(c, "tx")
        t.add(("orders", 0))
        t.produce("orders", 0, [b"told"])
        assert t.end(commit=True) == 0
        assert [r["value"] for r in b.records("orders", 0, "committed")] == [b"told"]   # at once
    with pytest.raises(ValueError, match="doze.transaction.answer.after: 'soon': markers"):
        doze.Broker(doze.Config({"doze.transaction.answer.after": "soon"}, data_dir=tmp_path / "bad", port=0))


def test_txn_offset_commit_staged_until_commit_and_require_stable(client):
    """Verifies that offsets sent with a transaction are invisible until it
    commits, that require_stable gets UNSTABLE_OFFSET_COMMIT meanwhile (KIP-447),
    and that an abort discards them."""
    client.create_topic("src", 1)
    client.create_topic("dst", 1)
    tp = ("src", 0)
    txn = Txn(client, "tx-copy")
    txn.add(("dst", 0))
    assert txn.commit_offsets("copy-group", {tp: 5}) == {tp: ErrorCode.INVALID_TXN_STATE}
    assert txn.add_offsets("copy-group") == 0
    assert txn.commit_offsets("copy-group", {tp: 5}) == {tp: 0}
    assert committed_offsets(client, "copy-group", [tp]) == {tp: (0, -1)}
    assert committed_offsets(client, "copy-group", [tp], require_stable=True)[tp][0] == \
        ErrorCode.UNSTABLE_OFFSET_COMMIT
    assert txn.end(commit=True) == 0
    assert committed_offsets(client, "copy-group", [tp], require_stable=True) == {tp: (0, 5)}
    txn.add(("dst", 0))
    txn.add_offsets("copy-group")
    assert txn.commit_offsets("copy-group", {tp: 9}) == {tp: 0}
    assert txn.end(commit=False) == 0
    assert committed_offsets(client, "copy-group", [tp], require_stable=True) == {tp: (0, 5)}


def test_txn_offset_commit_checks_the_group_generation(start_broker):
    """KIP-447: a transactional commit naming a member must match the group."""
    broker = start_broker({"group.initial.rebalance.delay.ms": 0})
    client = RawClient(broker.port)
    client.create_topic("gsrc", 1)
    join = client.call(ApiKey.JOIN_GROUP, 3, group_id="eos-g", session_timeout_ms=10000,
                       rebalance_timeout_ms=10000, member_id="", protocol_type="consumer",
                       protocols=[Msg(name="range", metadata=b"")])
    assert join.error_code == 0, join
    txn = Txn(client, "tx-gen")
    txn.add_offsets("eos-g")
    tp = ("gsrc", 0)
    assert txn.commit_offsets("eos-g", {tp: 1}, generation=join.generation_id,
                              member=join.member_id) == {tp: 0}
    assert txn.commit_offsets("eos-g", {tp: 1}, generation=join.generation_id + 5,
                              member=join.member_id) == {tp: ErrorCode.ILLEGAL_GENERATION}
    assert txn.commit_offsets("eos-g", {tp: 1}, generation=join.generation_id,
                              member="nobody") == {tp: ErrorCode.UNKNOWN_MEMBER_ID}


def test_txn_timeout_aborts_and_fences(start_broker):
    """Verifies that a transaction idle past its timeout is aborted by the
    broker's timer, the LSO moves on, and its producer is fenced."""
    clock = FakeClock()
    broker = start_broker(clock=clock)
    with RawClient(broker.port) as client:
        client.create_topic("slow", 1)
        txn = Txn(client, "tx-slow", timeout_ms=2000)
        txn.add(("slow", 0))
        txn.produce("slow", 0, [b"abandoned"])
        assert fetch_isolated(client, "slow", 0).last_stable_offset == 0
        clock.advance(2500)
        broker.waker.wake()
        assert wait_until(lambda: describe_txn(client, "tx-slow").transaction_state == "CompleteAbort")
        assert describe_txn(client, "tx-slow").producer_epoch == txn.epoch + 1
        assert fetch_isolated(client, "slow", 0).last_stable_offset == 2
        assert visible_values(client, "slow", 0) == []
        assert txn.end(True) == ErrorCode.PRODUCER_FENCED
        assert txn.produce("slow", 0, [b"late"]).error_code == ErrorCode.INVALID_PRODUCER_EPOCH


def test_txn_timeout_runs_from_the_transactions_start_not_its_last_request(start_broker):
    """As Kafka's TransactionStateManager.timedOutTransactions: start + timeout,
    however busy the transaction keeps itself (AddPartitionsToTxn, TxnOffsetCommit)."""
    clock = FakeClock()
    broker = start_broker(clock=clock)
    with RawClient(broker.port) as client:
        client.create_topic("busy", 2)
        txn = Txn(client, "tx-busy", timeout_ms=2000)
        txn.add(("busy", 0))
        for step in range(3):
            clock.advance(600)
            assert txn.add(("busy", step % 2)) == {("busy", step % 2): 0}      # still Ongoing, and touched
        assert describe_txn(client, "tx-busy").transaction_state == "Ongoing"
        clock.advance(300)                                                    # 2100 ms since it began
        broker.waker.wake()
        assert wait_until(lambda: describe_txn(client, "tx-busy").transaction_state == "CompleteAbort")


def test_txn_timeout_is_kept_across_a_restart(start_broker):
    """The transaction's start is stored (meta.db): a broker that dies and
    starts again aborts it at start + transaction.timeout.ms, not a timeout
    after the restart (Kafka: the txnStartTimestamp of the loaded metadata)."""
    clock = FakeClock()
    broker = start_broker(clock=clock)
    with RawClient(broker.port) as client:
        client.create_topic("kept", 1)
        txn = Txn(client, "tx-kept", timeout_ms=3000)
        txn.add(("kept", 0))
        txn.produce("kept", 0, [b"x"])
    clock.advance(2000)
    stop(broker, clean=False)
    broker = start_broker(clock=clock)
    with RawClient(broker.port) as client:
        assert describe_txn(client, "tx-kept").transaction_state == "Ongoing"
        clock.advance(1100)                             # 3100 ms since it began, 1100 since the restart
        loop_passes(broker)
        assert wait_until(lambda: describe_txn(client, "tx-kept").transaction_state == "CompleteAbort")


def test_txn_marker_write_failure_keeps_the_decision(start_broker, monkeypatch):
    """Verifies that when a marker cannot be written for want of room the
    decision stands: EndTxn answers CONCURRENT_TRANSACTIONS, the other decision
    is never carried out, and the coordinator finishes on its own once there
    is room again."""
    monkeypatch.setattr(doze, "TXN_ANSWER_WAIT_MS", 300)
    files = FailingMarkers()
    broker = start_broker(files=files)
    with RawClient(broker.port) as client:
        txn = _txn_with_offsets(client, "mfail")
        files.broken = True
        assert txn.end(True) == ErrorCode.CONCURRENT_TRANSACTIONS
        assert txn.end(False) == ErrorCode.CONCURRENT_TRANSACTIONS
        assert txn.end(True) == ErrorCode.CONCURRENT_TRANSACTIONS
        assert describe_txn(client, txn.id).transaction_state == "PrepareCommit"
        assert fetch_isolated(client, "mfail", 0).last_stable_offset == 0
        files.broken = False
        assert wait_until(lambda: describe_txn(client, txn.id).transaction_state == "CompleteCommit")
        _check_committed(client, "mfail", txn)


@pytest.mark.parametrize("api,state", [(a, s) for a in TXN_TABLE for s in TXN_STATES])
def test_txn_every_api_in_every_state(start_broker, monkeypatch, api, state):
    """Each transactional API, asked by the transaction's producer (or, in
    "fenced", by the producer a newer InitProducerId replaced), in each state."""
    monkeypatch.setattr(doze, "TXN_ANSWER_WAIT_MS", 200)
    files = FailingMarkers()
    broker = start_broker(files=files)
    with RawClient(broker.port) as c:
        c.create_topic("st", 2)
        txn = Txn(c, "tx-state")
        if state != "empty":
            txn.add(("st", 0))
            txn.add_offsets("g-state")
            txn.produce("st", 0, [b"x"])
        if state == "prepare commit":
            files.broken = True
            assert txn.end(True) == ErrorCode.CONCURRENT_TRANSACTIONS
        elif state in ("complete commit", "complete abort"):
            assert txn.end(state == "complete commit") == 0
        elif state == "fenced":
            Txn(c, "tx-state")
        want = ErrorCode(TXN_TABLE[api][TXN_STATES.index(state)])
        if api == "InitProducerId":
            kw = dict(producer_id=txn.producer_id, producer_epoch=txn.epoch) if state == "fenced" else {}
            got = c.call(ApiKey.INIT_PRODUCER_ID, 4, transactional_id="tx-state",
                         transaction_timeout_ms=60000, **kw).error_code
        elif api == "AddPartitionsToTxn":
            got = txn.add(("st", 1))[("st", 1)]
        elif api == "AddOffsetsToTxn":
            got = txn.add_offsets("g-other")
        elif api == "TxnOffsetCommit":
            got = txn.commit_offsets("g-state", {("st", 0): 1})[("st", 0)]
        elif api.startswith("EndTxn"):
            got = txn.end(api.endswith("commit"))
        else:
            got = txn.produce("st", 0, [b"y"]).error_code
        assert got == want
        files.broken = False


def test_describe_and_list_transactions_and_producers(client):
    client.create_topic("adm", 1)
    txn = Txn(client, "tx-adm")
    txn.add(("adm", 0))
    txn.produce("adm", 0, [b"a", b"b"])
    d = describe_txn(client, "tx-adm")
    assert (d.transaction_state, d.producer_id, d.producer_epoch) == ("Ongoing", txn.producer_id, txn.epoch)
    assert [(t.topic, t.partitions) for t in d.topics] == [("adm", [0])]
    assert describe_txn(client, "nope").error_code == ErrorCode.TRANSACTIONAL_ID_NOT_FOUND
    lst = client.call(ApiKey.LIST_TRANSACTIONS, 1, state_filters=["Ongoing", "Bogus"],
                      producer_id_filters=[], duration_filter=-1)
    assert [(t.transactional_id, t.transaction_state) for t in lst.transaction_states] == \
        [("tx-adm", "Ongoing")]
    assert lst.unknown_state_filters == ["Bogus"]
    prod = client.call(ApiKey.DESCRIBE_PRODUCERS, 0, topics=[Msg(name="adm", partition_indexes=[0])])
    [p] = prod.topics[0].partitions[0].active_producers
    assert (p.producer_id, p.producer_epoch, p.last_sequence, p.current_txn_start_offset) == \
        (txn.producer_id, txn.epoch, 1, 0)


def test_write_txn_markers_aborts_a_hanging_transaction(client):
    """kafka-transactions abort: a marker written straight to the partition."""
    client.create_topic("hang", 1)
    batch = make_batch([b"h"], producer_id=9999, producer_epoch=3, base_sequence=0,
                       attributes=doze.ATTR_TRANSACTIONAL)
    client.call(ApiKey.INIT_PRODUCER_ID, 4, transactional_id="tx-hang", transaction_timeout_ms=60000)
    r = client.call(ApiKey.WRITE_TXN_MARKERS, 1, markers=[Msg(
        producer_id=9999, producer_epoch=3, transaction_result=False, coordinator_epoch=0,
        topics=[Msg(name="hang", partition_indexes=[0])])])
    assert r.markers[0].topics[0].partitions[0].error_code == 0
    assert fetch_isolated(client, "hang", 0).last_stable_offset == 1
    r = client.call(ApiKey.WRITE_TXN_MARKERS, 1, markers=[Msg(
        producer_id=9999, producer_epoch=2, transaction_result=False, coordinator_epoch=0,
        topics=[Msg(name="hang", partition_indexes=[0])])])
    assert r.markers[0].topics[0].partitions[0].error_code == ErrorCode.INVALID_PRODUCER_EPOCH
    assert batch                                # (the batch above is only the shape of one)


###############################################################################
# 16. CONFIG RESOURCES -- what DescribeConfigs shows and AlterConfigs changes
###############################################################################

def incremental_alter(client, rtype, name, ops, validate_only=False, version=1):
    resp = client.call(ApiKey.INCREMENTAL_ALTER_CONFIGS, version, validate_only=validate_only,
                       resources=[Msg(resource_type=rtype, resource_name=name, configs=[
                           Msg(name=n, config_operation=op, value=v) for n, op, v in ops])])
    return resp.responses[0]


# --- DescribeConfigs (32), AlterConfigs (33), IncrementalAlterConfigs (44) ---------

@pytest.mark.parametrize("version", range(1, 5))
def test_describe_configs_topic_sources(client, version):
    client.create_topic("dc", retention_ms=5000)
    r = describe_configs(client, 2, "dc", version=version)
    assert r.error_code == 0
    got = config_map(r)
    assert got["retention.ms"] == ("5000", 1)                     # TOPIC_CONFIG
    assert got["cleanup.policy"] == ("delete", 5)                 # DEFAULT_CONFIG
    assert got["max.message.bytes"] == ("1048588", 5)
    assert set(got) == set(doze.TOPIC_CONFIGS)


def test_describe_configs_static_broker_setting_is_source_4(start_broker):
    broker = start_broker({"log.retention.ms": "777"})
    with RawClient(broker.port) as c:
        c.create_topic("st")
        r = describe_configs(c, 2, "st", keys=["retention.ms"], synonyms=True)
        [entry] = r.configs
        assert (entry.value, entry.config_source) == ("777", 4)   # STATIC_BROKER_CONFIG
        # Kafka has no default of its own for log.retention.ms (it derives it from
        # log.retention.hours), so the chain goes on to log.retention.hours' default
        assert [(s.name, s.value, s.source) for s in entry.synonyms] == \
            [("log.retention.ms", "777", 4), ("log.retention.hours", "168", 5)]


def test_describe_configs_keys_filter_and_errors(client):
    client.create_topic("dk")
    r = describe_configs(client, 2, "dk", keys=["segment.bytes"])
    assert [c.name for c in r.configs] == ["segment.bytes"]
    assert describe_configs(client, 2, "missing").error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert describe_configs(client, 4, "99").error_code == ErrorCode.INVALID_REQUEST
    assert describe_configs(client, 77, "x").error_code == ErrorCode.INVALID_REQUEST


def test_describe_configs_broker(client):
    r = describe_configs(client, 4, "1")
    assert r.error_code == 0
    got = {c.name: c for c in r.configs}
    assert got["num.partitions"].value == "1" and got["num.partitions"].config_source == 5
    assert got["num.partitions"].config_type == 3                       # INT, as in Kafka
    assert got["log.retention.ms"].read_only is False
    assert got["log.retention.ms"].value is None                        # Kafka: derived from hours
    assert got["node.id"].read_only is True
    # the cluster-wide default resource lists only what was set dynamically for it
    # (a KRaft cluster is formatted with min.insync.replicas set so)
    assert [(e.name, e.value) for e in describe_configs(client, 4, "").configs] == [("min.insync.replicas", "1")]
    assert incremental_alter(client, 4, "", [("log.retention.ms", 0, "5000")]).error_code == 0
    entry = {e.name: e for e in describe_configs(client, 4, "").configs}["log.retention.ms"]
    assert (entry.name, entry.value, entry.config_source) == ("log.retention.ms", "5000", 3)


@pytest.mark.parametrize("version", range(0, 2))
def test_incremental_alter_configs_topic_set_delete_append(client, version):
    client.create_topic("iac", retention_ms=1000)
    r = incremental_alter(client, 2, "iac", [("segment.bytes", 0, "2097152"), ("retention.ms", 1, None),
                                              ("cleanup.policy", 2, "compact")], version=version)
    assert r.error_code == 0
    got = config_map(describe_configs(client, 2, "iac"))
    assert got["segment.bytes"] == ("2097152", 1)
    assert got["retention.ms"] == ("604800000", 5)
    assert got["cleanup.policy"] == ("delete,compact", 1)
    r = incremental_alter(client, 2, "iac", [("cleanup.policy", 3, "delete")])
    assert r.error_code == 0
    assert config_map(describe_configs(client, 2, "iac"))["cleanup.policy"] == ("compact", 1)


@pytest.mark.parametrize("ops,code", [
    ([("no.such", 0, "1")], ErrorCode.INVALID_CONFIG),
    ([("retention.ms", 0, "forever")], ErrorCode.INVALID_CONFIG),
    ([("retention.ms", 2, "5")], ErrorCode.INVALID_CONFIG),       # APPEND to a non-list
    ([("retention.ms", 9, "5")], ErrorCode.UNKNOWN_SERVER_ERROR),  # no such operation: as Kafka
    ([("retention.ms", 0, "5"), ("retention.ms", 0, "6")], ErrorCode.INVALID_REQUEST),  # twice
])
def test_incremental_alter_configs_errors_change_nothing(client, ops, code):
    client.create_topic("iae", retention_ms=1000)
    assert incremental_alter(client, 2, "iae", ops).error_code == code
    assert config_map(describe_configs(client, 2, "iae"))["retention.ms"] == ("1000", 1)


def test_incremental_alter_configs_validate_only_and_unknown_topic(client):
    client.create_topic("iav")
    assert incremental_alter(client, 2, "iav", [("retention.ms", 0, "9")], True).error_code == 0
    assert config_map(describe_configs(client, 2, "iav"))["retention.ms"][1] == 5
    assert incremental_alter(client, 2, "ghost", [("retention.ms", 0, "9")]).error_code == \
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_topic_config_change_takes_effect(client):
    client.create_topic("live")
    assert client.produce("live", 0, make_batch([b"x" * 300])).error_code == 0
    incremental_alter(client, 2, "live", [("max.message.bytes", 0, "200")])
    assert client.produce("live", 0, make_batch([b"x" * 300])).error_code == \
        ErrorCode.MESSAGE_TOO_LARGE


@pytest.mark.parametrize("version", range(0, 3))
def test_alter_configs_replaces_all_topic_overrides(client, version):
    client.create_topic("ac", retention_ms=1000, segment_bytes=2097152)
    resp = client.call(ApiKey.ALTER_CONFIGS, version, validate_only=False, resources=[
        Msg(resource_type=2, resource_name="ac", configs=[Msg(name="retention.ms", value="2000")])])
    assert resp.responses[0].error_code == 0
    got = config_map(describe_configs(client, 2, "ac"))
    assert got["retention.ms"] == ("2000", 1)
    assert got["segment.bytes"][1] == 5                           # the override is gone
    resp = client.call(ApiKey.ALTER_CONFIGS, version, validate_only=False, resources=[
        Msg(resource_type=2, resource_name="ac", configs=[Msg(name="retention.ms", value="x")])])
    assert resp.responses[0].error_code == ErrorCode.INVALID_CONFIG


def test_alter_configs_broker_dynamic_default(client, broker):
    r = incremental_alter(client, 4, "", [("log.retention.ms", 0, "123456")])
    assert r.error_code == 0
    got = {c.name: c for c in describe_configs(client, 4, "").configs}
    assert (got["log.retention.ms"].value, got["log.retention.ms"].config_source) == ("123456", 3)
    client.create_topic("inherit")
    assert config_map(describe_configs(client, 2, "inherit"))["retention.ms"] == ("123456", 3)


@pytest.mark.parametrize("ops,code", [                # broker configs: INVALID_REQUEST, as Kafka
    ([("log.retention.ms", 0, "soon")], ErrorCode.INVALID_REQUEST),
    ([("log.segment.bytes", 0, "5")], ErrorCode.INVALID_REQUEST),   # under Kafka's 1 MiB
    ([("node.id", 0, "5")], ErrorCode.INVALID_REQUEST),             # not dynamic
])
def test_alter_configs_broker_errors(client, ops, code):
    assert incremental_alter(client, 4, "", ops).error_code == code
    assert [e.name for e in describe_configs(client, 4, "").configs] == ["min.insync.replicas"]
    got = {c.name: c for c in describe_configs(client, 4, "1").configs}
    assert got["log.retention.ms"].config_source == 5 and got["node.id"].value == "1"


def test_create_topics_takes_every_topic_config_kafka_knows(client):
    """Each of Kafka 4.3.1's topic configs, at its default, is accepted,
    stored and described as an override (source 1)."""
    names = sorted(n for n, spec in doze.KAFKA_TOPIC_CONFIGS.items()
                   if spec[1] is not None and n != "remote.storage.enable")
    configs = {n: doze.KAFKA_TOPIC_CONFIGS[n][1] for n in names}
    [res] = client.create_topics(("all-configs", 1, configs))
    assert res.error_code == 0, res
    got = config_map(describe_configs(client, 2, "all-configs"))
    assert {n: got[n] for n in names} == {n: (configs[n], 1) for n in names}
    assert len(got) == len(doze.TOPIC_CONFIGS) == 33          # what a Kafka 4.3.1 topic lists
    assert len(describe_configs(client, 2, "all-configs", keys=[]).configs) == 33   # [] is "all"


@pytest.mark.parametrize("name,value,code,message", [     # Kafka 4.3.1's answers, word for word
    ("retention.ms", "-5", 40, "Invalid value -5 for configuration retention.ms: Value must be at least -1"),
    ("segment.bytes", "abc", 40, "Invalid value abc for configuration segment.bytes: Not a number of type INT"),
    ("compression.type", "brotli", 40, "Invalid value brotli for configuration compression.type: String must "
                                       "be one of: uncompressed, zstd, lz4, snappy, gzip, producer"),
    ("cleanup.policy", "delete,bogus", 40, "Invalid value bogus for configuration cleanup.policy: String must "
                                           "be one of: compact, delete"),
    ("cleanup.policy", "delete,,compact", 40, "Configuration 'cleanup.policy' values must not be empty."),
    ("unclean.leader.election.enable", "yes", 40, "Invalid value yes for configuration "
                                                  "unclean.leader.election.enable: Expected value to be either true or false"),
    ("min.cleanable.dirty.ratio", "2", 40, "Invalid value 2.0 for configuration min.cleanable.dirty.ratio: "
                                           "Value must be no more than 1"),
    ("compression.gzip.level", "0", 40, "Invalid value 0 for configuration compression.gzip.level: Value must "
                                        "be between 1 and 9 or equal to -1"),
    ("foo.bar", "1", 40, "Unknown topic config name: foo.bar"),
    ("retention.ms", None, 42, "Null value not supported for : retention.ms"),
])
def test_topic_config_values_are_checked_as_kafka_checks_them(client, name, value, code, message):
    client.create_topic("checked")
    r = incremental_alter(client, 2, "checked", [(name, 0, value)])
    assert (r.error_code, r.error_message) == (code, message)


def test_topic_config_values_are_stored_as_kafka_writes_them(client):
    client.create_topic("norm")
    assert incremental_alter(client, 2, "norm", [("retention.ms", 0, " +5 "), ("preallocate", 0, "TRUE"),
                                                  ("cleanup.policy", 0, " compact , delete ,delete"),
                                                  ("min.cleanable.dirty.ratio", 0, "0.5d")]).error_code == 0
    got = config_map(describe_configs(client, 2, "norm"))
    assert [got[n][0] for n in ("retention.ms", "preallocate", "cleanup.policy", "min.cleanable.dirty.ratio")] \
        == ["5", "true", "compact,delete", "0.5"]
    r = incremental_alter(client, 2, "norm", [("min.compaction.lag.ms", 0, "10"), ("max.compaction.lag.ms", 0, "5")])
    assert (r.error_code, r.error_message) == (40, "conflict topic config setting min.compaction.lag.ms (10) > "
                                                   "max.compaction.lag.ms (5)")


def test_broker_configs_kafka_has_are_described_and_unknown_ones_kept(client, broker):
    got = {c.name: c for c in describe_configs(client, 4, "1").configs}
    assert "sasl.kerberos.min.time.before.relogin" in got and "internal.metadata.log.segment.bytes" not in got
    assert (got["listeners"].config_type, got["ssl.key.password"].is_sensitive) == (7, True)
    assert got["log.flush.interval.messages"].value == "9223372036854775807"
    assert incremental_alter(client, 4, "1", [("sasl.kerberos.min.time.before.relogin", 0, "70000"),
                                              ("made.up.setting", 0, "x")]).error_code == 0
    got = {c.name: c for c in describe_configs(client, 4, "1").configs}
    assert (got["sasl.kerberos.min.time.before.relogin"].value,
            got["sasl.kerberos.min.time.before.relogin"].config_source) == ("70000", 2)
    made_up = got["made.up.setting"]                    # Kafka: kept, shown as unknown and secret
    assert (made_up.value, made_up.is_sensitive, made_up.read_only, made_up.config_type) == (None, True, True, 0)
    r = incremental_alter(client, 4, "", [("listeners", 0, "PLAINTEXT://:1")])
    assert (r.error_code, r.error_message) == (42, "Cannot update these configs at default cluster level, "
                                                   "broker id must be specified: [listeners]")
    r = incremental_alter(client, 4, "1", [("node.id", 0, "5")])
    assert (r.error_code, r.error_message) == (42, "Cannot update these configs dynamically: [node.id]")


def test_retention_hours_set_in_server_properties_reaches_topics(start_broker):
    broker = start_broker({"log.retention.hours": "2"})
    with RawClient(broker.port) as c:
        c.create_topic("hours")
        assert config_map(describe_configs(c, 2, "hours"))["retention.ms"] == ("7200000", 5)
    assert broker.run_in_loop(lambda: broker.logs.topic_config("hours", "retention.ms")) == 7_200_000


def test_alter_configs_broker_survives_restart(start_broker):
    broker = start_broker()
    with RawClient(broker.port) as c:
        assert incremental_alter(c, 4, "1", [("log.segment.bytes", 0, "5000000")]).error_code == 0
    stop(broker)
    broker = start_broker()
    with RawClient(broker.port) as c:
        got = {c_.name: c_.value for c_ in describe_configs(c, 4, "1").configs}
        assert got["log.segment.bytes"] == "5000000"


def test_group_configs_survive_restart_and_follow_the_broker_bounds(start_broker):
    # GROUP resources (32): a group's own value is kept in meta.db; the bounds are the
    # broker's group.consumer.min/max settings of the run that checks (recorded: group-configs).
    broker = start_broker()
    with RawClient(broker.port) as c:
        assert incremental_alter(c, 32, "g", [("consumer.session.timeout.ms", 0, "+50000"),
                                              ("share.renew.acknowledge.enable", 0, "FALSE")]).error_code == 0
    stop(broker)
    broker = start_broker({"group.consumer.max.session.timeout.ms": "40000",
                           "group.consumer.min.session.timeout.ms": "30000",
                           "group.consumer.session.timeout.ms": "35000"})
    with RawClient(broker.port) as c:
        got = config_map(describe_configs(c, 32, "g"))
        assert got["consumer.session.timeout.ms"] == ("50000", 8)
        assert got["share.renew.acknowledge.enable"] == ("false", 8)
        assert got["consumer.heartbeat.interval.ms"] == ("5000", 5)
        bad = incremental_alter(c, 32, "g", [("share.isolation.level", 0, "read_committed")])
        assert (bad.error_code, bad.error_message) == (40, "consumer.session.timeout.ms must be less than "
                                                           "or equal to group.consumer.max.session.timeout.ms")
        assert incremental_alter(c, 32, "g", [("consumer.session.timeout.ms", 1, None)]).error_code == 0
        assert config_map(describe_configs(c, 32, "g"))["consumer.session.timeout.ms"] == ("35000", 4)
    assert broker.run_in_loop(broker.store.group_configs) == {"g": {"share.renew.acknowledge.enable": "false"}}


###############################################################################
# 17. ADMINISTRATION AND SECURITY APIS -- topics, configs, ACLs, SASL, SCRAM users, quotas
###############################################################################

def any_acl_filter(**kw):
    f = dict(resource_type_filter=1, resource_name_filter=None, pattern_type_filter=1, principal_filter=None,
             host_filter=None, operation=1, permission_type=1)
    f.update(kw)
    return f


def scram_upsertion(name, mechanism, password, iterations=4096, salt=b"salt-from-the-client"):
    digest = {1: "sha256", 2: "sha512"}[mechanism] if mechanism in (1, 2) else "sha256"
    return Msg(name=name, mechanism=mechanism, iterations=iterations, salt=salt,
               salted_password=hashlib.pbkdf2_hmac(digest, password.encode(), salt, max(1, min(iterations, 4096))))


# --- CreateTopics (19) -----------------------------------------------------------

@pytest.mark.parametrize("version", range(2, 8))
def test_create_topics_every_version(client, version):
    [res] = client.create_topics(("ct-%d" % version, 2, {"retention.ms": "1234"}), version=version)
    assert res.error_code == 0
    if version >= 5:
        assert (res.num_partitions, res.replication_factor) == (2, 1)
        configs = {c.name: (c.value, c.config_source) for c in res.configs}
        assert configs["retention.ms"] == ("1234", 1)
        assert configs["cleanup.policy"] == ("delete", 5)
    if version >= 7:
        assert res.topic_id != bytes(16)
    [t] = client.metadata(["ct-%d" % version], allow_auto_topic_creation=False).topics
    assert t.error_code == 0 and len(t.partitions) == 2


def test_create_topics_default_partitions(client):
    [res] = client.create_topics(("dflt", -1, None))
    assert (res.error_code, res.num_partitions) == (0, 1)


def test_create_topics_validate_only_creates_nothing(client):
    [res] = client.create_topics(("dry", 4, None), validate_only=True)
    assert (res.error_code, res.num_partitions) == (0, 4)
    [t] = client.metadata(["dry"], allow_auto_topic_creation=False).topics
    assert t.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


@pytest.mark.parametrize("topic,code", [
    (("", 1, None), ErrorCode.INVALID_TOPIC_EXCEPTION),
    (("a/b", 1, None), ErrorCode.INVALID_TOPIC_EXCEPTION),
    ((".", 1, None), ErrorCode.INVALID_TOPIC_EXCEPTION),
    (("x" * 250, 1, None), ErrorCode.INVALID_TOPIC_EXCEPTION),
    (("zero", 0, None), ErrorCode.INVALID_PARTITIONS),
    (("minus", -5, None), ErrorCode.INVALID_PARTITIONS),
    (("cfg", 1, {"no.such.config": "1"}), ErrorCode.INVALID_CONFIG),
    (("cfg2", 1, {"retention.ms": "soon"}), ErrorCode.INVALID_CONFIG),
    (("cfg3", 1, {"cleanup.policy": "shred"}), ErrorCode.INVALID_CONFIG),
])
def test_create_topics_errors(client, topic, code):
    [res] = client.create_topics(topic)
    assert res.error_code == code
    assert res.error_message


@pytest.mark.parametrize("replication", [0, 2, 3])
def test_create_topics_invalid_replication_factor(client, replication):
    [res] = client.call(ApiKey.CREATE_TOPICS, 7, topics=[
        Msg(name="rf", num_partitions=1, replication_factor=replication, configs=[])],
        timeout_ms=1000).topics
    assert res.error_code == ErrorCode.INVALID_REPLICATION_FACTOR


def test_create_topics_already_exists_and_collision(client):
    client.create_topic("exists.here")
    [res] = client.create_topics(("exists.here", 1, None))
    assert res.error_code == ErrorCode.TOPIC_ALREADY_EXISTS
    [res] = client.create_topics(("exists_here", 1, None))           # '.' and '_' collide
    assert res.error_code == ErrorCode.INVALID_TOPIC_EXCEPTION


def test_create_topics_duplicate_in_request_is_invalid_request(client):
    results = client.create_topics(("dup", 1, None), ("dup", 1, None), ("single", 1, None))
    # Kafka 4.3.1 (ControllerApis): one entry per duplicated name, after the others
    assert [(r.name, r.error_code, r.error_message) for r in results] == [
        ("single", 0, None), ("dup", ErrorCode.INVALID_REQUEST, "Duplicate topic name.")]
    names = {t.name for t in client.metadata(None).topics}
    assert "dup" not in names and "single" in names


def test_limit_doze_max_partitions_refuses_what_would_pass_it(start_broker):
    """doze.max.partitions bounds the partitions of every topic together:
    CreateTopics, CreatePartitions and Metadata's auto-creation past it get
    POLICY_VIOLATION and make nothing (no directory); what fits is made, and a
    client producing beside them notices nothing."""
    broker = start_broker({"doze.max.partitions": 10})
    with RawClient(broker.port) as c, RawClient(broker.port) as other:
        c.create_topic("six", 6)
        other.create_topic("mine", 1)
        assert other.produce("mine", 0, make_batch([b"before"])).error_code == 0
        [r] = c.create_topics(("four", 4, {}))
        assert r.error_code == ErrorCode.POLICY_VIOLATION and "doze.max.partitions (10)" in r.error_message
        resp = c.call(ApiKey.CREATE_PARTITIONS, 3, timeout_ms=1000, validate_only=False,
                      topics=[Msg(name="six", count=10, assignments=None)])
        assert resp.results[0].error_code == ErrorCode.POLICY_VIOLATION
        [t] = c.metadata(["auto"]).topics                     # num.partitions 1: 7 + 1 fits
        assert t.error_code == 0
        [r] = c.create_topics(("three", 3, {}))               # 8 + 3 does not
        assert r.error_code == ErrorCode.POLICY_VIOLATION
        c.create_topic("two", 2)                              # 10: the last that fits
        [t] = c.metadata(["auto-2"]).topics
        assert t.error_code == ErrorCode.POLICY_VIOLATION
        data = broker.config.data_dir
        made = sorted(d.rsplit("-", 1)[0] for d in os.listdir(data) if os.path.isdir(os.path.join(data, d)))
        assert made == ["auto", "mine"] + ["six"] * 6 + ["two"] * 2
        assert other.produce("mine", 0, make_batch([b"after"])).base_offset == 1
        assert other.values("mine", 0) == [(0, b"before"), (1, b"after")]


# --- DeleteTopics (20) -----------------------------------------------------------

@pytest.mark.parametrize("version", range(1, 7))
def test_delete_topics_every_version(client, version):
    created = client.create_topic("del-me")
    if version >= 6:
        resp = client.call(ApiKey.DELETE_TOPICS, version, timeout_ms=1000,
                           topics=[Msg(name="del-me", topic_id=bytes(16)),
                                   Msg(name="never-was", topic_id=bytes(16))])
    else:
        resp = client.call(ApiKey.DELETE_TOPICS, version, timeout_ms=1000,
                           topic_names=["del-me", "never-was"])
    got = [(r.name, r.error_code) for r in resp.responses]
    assert got == [("del-me", 0), ("never-was", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)]
    if version >= 6:
        assert resp.responses[0].topic_id == created.topic_id
    [t] = client.metadata(["del-me"], allow_auto_topic_creation=False).topics
    assert t.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_delete_topics_by_id_and_recreate_starts_empty(client):
    created = client.create_topic("again")
    assert client.produce("again", 0, make_batch([b"old"])).error_code == 0
    resp = client.call(ApiKey.DELETE_TOPICS, 6, timeout_ms=1000,
                       topics=[Msg(name=None, topic_id=created.topic_id)])
    assert [(r.name, r.error_code) for r in resp.responses] == [("again", 0)]
    client.create_topic("again")
    assert client.values("again", 0) == []
    assert client.produce("again", 0, make_batch([b"new"])).base_offset == 0


# --- DescribeAcls (29), CreateAcls (30), DeleteAcls (31) ------------------------

def test_acls_created_described_deleted_and_kept_in_meta_db(start_broker, caplog):
    caplog.set_level(logging.INFO, logger="doze_kafka")
    broker = start_broker(acl_settings())
    with as_user(broker, "admin") as admin, as_user(broker, "alice") as alice:
        create_acls(admin, acl(R.TOPIC, "t", A.READ), acl(R.TOPIC, "t", A.READ),
                    acl(R.GROUP, "g", A.ALL, pattern=PREFIXED, principal="User:*"))
        d = admin.call(ApiKey.DESCRIBE_ACLS, 3, **any_acl_filter())
        assert sorted((r.resource_type, r.resource_name, r.pattern_type, [(x.principal, x.operation) for x in r.acls])
                      for r in d.resources) == [(2, "t", 3, [("User:alice", 3)]), (3, "g", 4, [("User:*", 2)])]
        m = admin.call(ApiKey.DESCRIBE_ACLS, 3, **any_acl_filter(resource_type_filter=3, resource_name_filter="gx",
                                                                 pattern_type_filter=2))
        assert [r.resource_name for r in m.resources] == ["g"]                  # MATCH: what applies to gx
        denied = alice.call(ApiKey.DESCRIBE_ACLS, 3, **any_acl_filter())
        assert denied.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        assert "principal User:alice denied operation DESCRIBE" in caplog.text
        bad = admin.call(ApiKey.CREATE_ACLS, 3, creations=[Msg(
            resource_type=4, resource_name="c", resource_pattern_type=3, principal="User:a", host="*",
            operation=7, permission_type=3)])
        assert (bad.results[0].error_code, bad.results[0].error_message) == (
            ErrorCode.INVALID_REQUEST, "The only valid name for the CLUSTER resource is kafka-cluster")
    stop(broker)
    with open(os.path.join(broker.config.data_dir, "meta.db"), "rb") as f:
        assert b"User:alice" in f.read()                          # the ACLs are in meta.db ...
    broker = start_broker(acl_settings())                          # ... and back after a restart
    with as_user(broker, "admin") as admin:
        gone = admin.call(ApiKey.DELETE_ACLS, 3, filters=[Msg(**any_acl_filter(resource_type_filter=2)),
                                                          Msg(**any_acl_filter(principal_filter="User:alice"))])
        assert [len(r.matching_acls) for r in gone.filter_results] == [1, 1]       # matched twice, gone once
        assert [r.resource_name for r in admin.call(ApiKey.DESCRIBE_ACLS, 3, **any_acl_filter()).resources] == ["g"]


def test_acl_apis_without_an_authorizer_are_security_disabled(client):
    assert client.call(ApiKey.DESCRIBE_ACLS, 3, **any_acl_filter()).error_code == ErrorCode.SECURITY_DISABLED


# --- CreatePartitions (37) -------------------------------------------------------

@pytest.mark.parametrize("version", range(0, 4))
def test_create_partitions_grow(client, version):
    client.create_topic("grow", partitions=1)
    resp = client.call(ApiKey.CREATE_PARTITIONS, version, timeout_ms=1000, validate_only=False,
                       topics=[Msg(name="grow", count=3, assignments=None)])
    assert [(r.name, r.error_code) for r in resp.results] == [("grow", 0)]
    [t] = client.metadata(["grow"]).topics
    assert len(t.partitions) == 3
    assert client.produce("grow", 2, make_batch([b"p2"])).error_code == 0
    assert client.values("grow", 2) == [(0, b"p2")]


@pytest.mark.parametrize("count", [1, 2])
def test_create_partitions_shrink_or_same_is_invalid(client, count):
    client.create_topic("keep", partitions=2)
    resp = client.call(ApiKey.CREATE_PARTITIONS, 3, timeout_ms=1000, validate_only=False,
                       topics=[Msg(name="keep", count=count, assignments=None)])
    assert resp.results[0].error_code == ErrorCode.INVALID_PARTITIONS
    assert len(client.metadata(["keep"]).topics[0].partitions) == 2


def test_create_partitions_unknown_topic_and_validate_only(client):
    client.create_topic("vo", partitions=1)
    resp = client.call(ApiKey.CREATE_PARTITIONS, 3, timeout_ms=1000, validate_only=True,
                       topics=[Msg(name="vo", count=5, assignments=None),
                               Msg(name="ghost", count=5, assignments=None)])
    assert [r.error_code for r in resp.results] == [0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]
    assert len(client.metadata(["vo"]).topics[0].partitions) == 1


def test_create_partitions_of_a_topic_deleted_between_two_steps_leaves_nothing(start_broker, monkeypatch):
    """Verifies that partitions made for a topic a DeleteTopics removed meanwhile
    are thrown away: the CreatePartitions answers UNKNOWN_TOPIC_OR_PARTITION, and
    neither memory nor meta.db (after a restart) nor the data directory keeps any
    of them. (It used to save the topic's row again and keep 10,000 orphan logs.)"""
    broker = start_broker()
    with RawClient(broker.port) as a, RawClient(broker.port) as b:
        a.create_topic("gone", partitions=1)
        reached, release = held(monkeypatch, doze.LogManager, "_make_partitions", "after")
        cid, _ = a.send(ApiKey.CREATE_PARTITIONS, 3, timeout_ms=1000, validate_only=False,
                        topics=[Msg(name="gone", count=300, assignments=None)])
        assert reached.wait(5)
        delete_topic(b, "gone")
        release.set()
        got, resp = a.receive(ApiKey.CREATE_PARTITIONS, 3)
        assert (got, [r.error_code for r in resp.results]) == (cid, [ErrorCode.UNKNOWN_TOPIC_OR_PARTITION])
        left = broker.run_in_loop(lambda: ([tp for tp in broker.logs.logs if tp[0] == "gone"], dict(broker.logs.creating)))
        assert left == ([], {})
        data = broker.config.data_dir
        assert wait_until(lambda: not [d for d in os.listdir(data) if d.startswith("gone-")])
    stop(broker)
    broker = start_broker()
    with RawClient(broker.port) as c:
        [t] = c.metadata(["gone"], allow_auto_topic_creation=False).topics
        assert t.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


# --- DescribeUserScramCredentials (50), AlterUserScramCredentials (51) --------

def test_scram_admin_alter_then_authenticate_then_describe(start_broker):
    """KIP-554: the client sends salt and SaltedPassword; the user can then log in."""
    broker = start_broker(sasl_settings())
    with RawClient(broker.port) as admin:
        r = admin.call(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, 0, deletions=[], upsertions=[
            scram_upsertion("erin", 2, "erin-secret", 4096)])
        assert [(x.user, x.error_code, x.error_message) for x in r.results] == [("erin", 0, None)]
        d = admin.call(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, 0, users=None)
        assert [(x.user, x.error_code, [(i.mechanism, i.iterations) for i in x.credential_infos])
                for x in d.results] == [("erin", 0, [(2, 4096)])]
    with RawClient(sasl_port(broker)) as c:
        client = ScramClient("SCRAM-SHA-512", "erin", "erin-secret")
        first = sasl_authenticate(c, "SCRAM-SHA-512", [client.first()])[0]
        assert bytes(first.auth_bytes).endswith(b",s=" + base64.b64encode(b"salt-from-the-client") + b",i=4096")
        assert c.call(ApiKey.SASL_AUTHENTICATE, 2, auth_bytes=client.final(bytes(first.auth_bytes))).error_code == 0
    with RawClient(broker.port) as admin:
        r = admin.call(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, 0, deletions=[Msg(name="erin", mechanism=2)],
                       upsertions=[])
        assert [(x.user, x.error_code) for x in r.results] == [("erin", 0)]
        d = admin.call(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, 0, users=[Msg(name="erin")])
        assert [(x.user, x.error_code, x.error_message) for x in d.results] == [
            ("erin", ErrorCode.RESOURCE_NOT_FOUND, "Attempt to describe a user credential that does not exist: erin")]


def test_scram_admin_errors_as_kafkas_scram_control_manager(client):
    client.call(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, 0, deletions=[], upsertions=[scram_upsertion("old", 1, "x")])
    r = client.call(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, 0, deletions=[
        Msg(name="ghost", mechanism=1), Msg(name="old", mechanism=1)], upsertions=[
        scram_upsertion("", 1, "x"), scram_upsertion("few", 1, "x", iterations=100),
        scram_upsertion("many", 1, "x", iterations=16385), scram_upsertion("odd", 3, "x"),
        scram_upsertion("old", 2, "x"), scram_upsertion("both", 1, "x"), scram_upsertion("both", 2, "x"),
        scram_upsertion("fine", 1, "x")])
    got = {x.user: (x.error_code, x.error_message) for x in r.results}
    assert got == {
        "ghost": (ErrorCode.RESOURCE_NOT_FOUND, "Attempt to delete a user credential that does not exist"),
        "": (ErrorCode.UNACCEPTABLE_CREDENTIAL, "Username must not be empty"),
        "few": (ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too few iterations"),
        "many": (ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too many iterations"),
        "odd": (ErrorCode.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism"),
        "old": (ErrorCode.DUPLICATE_RESOURCE, "A user credential cannot be altered twice in the same request"),
        "both": (ErrorCode.DUPLICATE_RESOURCE, "A user credential cannot be altered twice in the same request"),
        "fine": (0, None)}
    d = client.call(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, 0, users=[Msg(name="fine"), Msg(name="old"),
                                                                     Msg(name="old")])
    assert {(x.user, x.error_code) for x in d.results} == {("fine", 0), ("old", ErrorCode.DUPLICATE_RESOURCE)}
    assert sorted(x.user for x in client.call(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, 0, users=[]).results) == \
        ["fine", "old"]


###############################################################################
# 18. CONNECTIONS -- frames in, answers out in order; TLS; dispatch; limits
###############################################################################

def raw_connection(broker):
    return RawClient(broker.port)


def answers(client, wait_s=2):
    """Does the connection answer an ApiVersions within wait_s? False: no answer
    yet (still open); EOFError propagates when the broker closed it."""
    client.sock.settimeout(wait_s)
    try:
        return client.call(ApiKey.API_VERSIONS, 3, **SOFTWARE).error_code == 0
    except socket.timeout:
        return False


SERVED = [(key, v) for key, (spec, _) in sorted(doze.HANDLERS.items())
          for v in range(spec.min_served, spec.max_version + 1)]


TWO_LISTENERS = {"listeners": "CLIENT://127.0.0.1:0,BACKEND://127.0.0.1:0,CONTROLLER://127.0.0.1:0",
                 "listener.security.protocol.map": "CLIENT:PLAINTEXT,BACKEND:PLAINTEXT,CONTROLLER:PLAINTEXT",
                 "controller.listener.names": "CONTROLLER", "inter.broker.listener.name": "BACKEND",
                 "advertised.listeners": "CLIENT://clients.example:19092,BACKEND://127.0.0.1:0"}


def addresses_seen_on(port):
    """What a client of this port is told: Metadata's, FindCoordinator's and DescribeCluster's broker."""
    with RawClient(port) as c:
        [m] = c.metadata(None).brokers
        c.call(ApiKey.FIND_COORDINATOR, 3, key="g", key_type=0)       # makes __consumer_offsets
        f = c.call(ApiKey.FIND_COORDINATOR, 3, key="g", key_type=0)
        [d] = c.call(ApiKey.DESCRIBE_CLUSTER, 1, include_cluster_authorized_operations=False).brokers
        return {(m.host, m.port), (f.host, f.port), (d.host, d.port)}


# --- TLS ---------------------------------------------------------------------------

# Test certificates (EC P-256, valid until 2126), made once with openssl for these tests only:
#   a CA "doze-test-ca"; a server certificate for localhost / 127.0.0.1; a client
#   certificate "C=US, O=Acme, Inc, OU=eng, CN=alice"; the server key also as
#   encrypted PKCS#8 (password "keypass").
TEST_CA_PEM = """\
-----BEGIN CERTIFICATE-----
MIIBhTCCASugAwIBAgIUJ5BdPEBqq+ovvrtX3KzStBOBimswCgYIKoZIzj0EAwIw
FzEVMBMGA1UEAwwMZG96ZS10ZXN0LWNhMCAXDTI2MTIwMTEzNTkwN1oYDzIxMjYx
MTA3MTM1OTA3WjAXMRUwEwYDVQQDDAxkb3plLXRlc3QtY2EwWTATBgcqhkjOPQIB
BggqhkjOPQMBBwNCAAQaOj+w8d+vbN4cQLlcr9UKnvGGsORUWunOR4R40OVbN8Fl
ZivmbfX58aVpHfp3kspi/Y669wT40iBlN1zLL0eio1MwUTAdBgNVHQ4EFgQUeItm
/RKZqnJX7Qkbn0YQbCvT1YEwHwYDVR0jBBgwFoAUeItm/RKZqnJX7Qkbn0YQbCvT
1YEwDwYDVR0TAQH/BAUwAwEB/zAKBggqhkjOPQQDAgNIADBFAiEA40clyDI+JIAa
CNmjRP4L5Bvv6eiFV9Pg3ZUCjk6nIMQCIDe5krVs48lQhDoZKGqzK8LvZld0OLLz
cVfTXgzyn+mc
-----END CERTIFICATE-----
"""
TEST_SERVER_KEY = """\
-----BEGIN PRIVATE KEY-----
MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgYtQ2F/SH5wnwVJLR
0agatIoc2uYGZQi0x87HkCsaDK+hRANCAARaW7uKMZbWmtKlYi6Ac+LPuEuNCwa9
g1naBUvKFddxjsNwBVHkjYoqyhpM/BnSjmJ6XEx4yThogxYe9X36Lwd6
-----END PRIVATE KEY-----
"""
TEST_SERVER_CERT = """\
-----BEGIN CERTIFICATE-----
MIIBjjCCATOgAwIBAgIUP1m9XTfI6xJCp3i41or7YPO+zq0wCgYIKoZIzj0EAwIw
FzEVMBMGA1UEAwwMZG96ZS10ZXN0LWNhMCAXDTI2MTIwMTEzNTkwN1oYDzIxMjYx
MTA3MTM1OTA3WjAUMRIwEAYDVQQDDAlsb2NhbGhvc3QwWTATBgcqhkjOPQIBBggq
hkjOPQMBBwNCAARaW7uKMZbWmtKlYi6Ac+LPuEuNCwa9g1naBUvKFddxjsNwBVHk
jYoqyhpM/BnSjmJ6XEx4yThogxYe9X36Lwd6o14wXDAaBgNVHREEEzARgglsb2Nh
bGhvc3SHBH8AAAEwHQYDVR0OBBYEFKd4TQroR43dpVrUto0HwQSybM+bMB8GA1Ud
IwQYMBaAFHiLZv0SmapyV+0JG59GEGwr09WBMAoGCCqGSM49BAMCA0kAMEYCIQCn
kPIBAgswsK3BImx7amaDeWZ1OxRn3n4+lVKbd8c9xQIhAM5Lx2dc9uMdeDCZORxp
RY0RiGaMTNvkwYcfJ+iv0jR8
-----END CERTIFICATE-----
"""
TEST_SERVER_KEY_ENCRYPTED = """\
-----BEGIN ENCRYPTED PRIVATE KEY-----
MIHsMFcGCSqGSIb3DQEFDTBKMCkGCSqGSIb3DQEFDDAcBAjA/ExQpyRk/wICCAAw
DAYIKoZIhvcNAgkFADAdBglghkgBZQMEASoEEBTzekkwjPKZ9B62UnCigW8EgZCd
hXeTkZE7qh8GHsJtbY7ElrScGt8sUVdwnkSUf6qJnUoeGEL6olLwIWP5TAuROaLr
+lsPwp8Q2/Fo2g62hXLWPzw0fCZnRYZco94sQkGzoWFkeiz3V66+peD0sXckYajo
XO8aWYyvRm234w3SBYBimueM5965eNTE17b1g8mZg9NSHK+oNX/Q7bSR+edV3q4=
-----END ENCRYPTED PRIVATE KEY-----
"""
TEST_ALICE_KEY = """\
-----BEGIN PRIVATE KEY-----
MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQg77rUhtiUODCdH/HR
kEXxDUM0RiWDrNkelCpsAx0d0+mhRANCAAR5udfsU7ZtJQQFfKH4a9I+vrK5XqdU
Vur55dpjbUcT5XEu/WoMUE3XvvXn/+LhZ5WvS+Axzez0LRBI/EgpGE0A
-----END PRIVATE KEY-----
"""
TEST_ALICE_CERT = """\
-----BEGIN CERTIFICATE-----
MIIBUjCB+QIUP1m9XTfI6xJCp3i41or7YPO+zq4wCgYIKoZIzj0EAwIwFzEVMBMG
A1UEAwwMZG96ZS10ZXN0LWNhMCAXDTI2MTIwMTEzNTkwN1oYDzIxMjYxMTA3MTM1
OTA3WjA/MQswCQYDVQQGEwJVUzESMBAGA1UECgwJQWNtZSwgSW5jMQwwCgYDVQQL
DANlbmcxDjAMBgNVBAMMBWFsaWNlMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE
ebnX7FO2bSUEBXyh+GvSPr6yuV6nVFbq+eXaY21HE+VxLv1qDFBN17715//i4WeV
r0vgMc3s9C0QSPxIKRhNADAKBggqhkjOPQQDAgNIADBFAiEAzib7TGAAPzfvgzLa
Vtq2vRnMXkmnbSmX9hCuE/qJXsoCIGrfUtLf/yQ/5qT3w9Poj12ZxR1xBPp0xOYl
FWryjvS2
-----END CERTIFICATE-----
"""


@pytest.fixture
def pem(tmp_path):
    """The test certificates as files: keystore (key + chain), ca, alice's."""
    files = {"keystore": TEST_SERVER_KEY + TEST_SERVER_CERT, "ca": TEST_CA_PEM,
             "alice_key": TEST_ALICE_KEY, "alice_cert": TEST_ALICE_CERT}
    paths = {}
    for name, text in files.items():
        paths[name] = str(tmp_path / f"{name}.pem")
        with open(paths[name], "w") as f:
            f.write(text)
    return paths


def tls_settings(pem, **more):
    settings = {"listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",
                "ssl.keystore.type": "PEM", "ssl.keystore.location": pem["keystore"],
                "ssl.truststore.type": "PEM", "ssl.truststore.location": pem["ca"]}
    settings.update({k.replace("_", "."): v for k, v in more.items()})
    return settings


class TlsClient(RawClient):
    """RawClient over TLS, verifying the broker against the test CA."""

    def __init__(self, port, cert=None, key=None, timeout=SOCKET_TIMEOUT_S):
        ctx = ssl.create_default_context(cadata=TEST_CA_PEM)
        if cert:
            ctx.load_cert_chain(cert, key)
        raw = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.sock = ctx.wrap_socket(raw, server_hostname="localhost")
        self.client_id = "doze-test"
        self.next_correlation_id = 0


def ssl_port(broker):
    [port] = [b.listener.port for b in broker.listeners.bound if b.listener.protocol == "SSL"]
    return port


def port_of(broker, protocol):
    [port] = [b.listener.port for b in broker.listeners.bound if b.listener.protocol == protocol]
    return port


def hostile_sasl_and_tls(case, broker):
    """One misbehaving client of test_sasl_and_tls_hostile_clients_leave_others_alone;
    it must be closed (or answered with its error, then closed)."""
    plain, tls = port_of(broker, "SASL_PLAINTEXT"), ssl_port(broker)
    if case in ("TLS garbage", "TLS closed mid-handshake"):
        with socket.create_connection(("127.0.0.1", tls)) as s:
            s.sendall(RawClient.encode(ApiKey.API_VERSIONS, 3, 1, **SOFTWARE) if case == "TLS garbage"
                      else b"\x16\x03\x01\x00\xff")
            if case == "TLS garbage":
                s.settimeout(5)
                try:
                    assert s.recv(100) == b""
                except ConnectionResetError:
                    pass
        return
    with RawClient(plain) as c:
        scram = ScramClient("SCRAM-SHA-256", "bob", "bob-secret")
        if case == "wrong password":
            assert sasl_authenticate(c, "PLAIN", [plain_token("alice", "nope")])[0].error_code == 58
        elif case == "unknown mechanism":
            assert c.call(ApiKey.SASL_HANDSHAKE, 1, mechanism="GSSAPI").error_code == 33
        elif case == "request before authentication":
            c.send(ApiKey.METADATA, None, topics=None)
        elif case == "out of order":
            assert c.call(ApiKey.SASL_HANDSHAKE, 1, mechanism="PLAIN").error_code == 0
            c.send(ApiKey.METADATA, None, topics=None)
        elif case == "garbage token":
            assert sasl_authenticate(c, "SCRAM-SHA-256", [b"\xff\xfe garbage"])[0].error_code == 58
        elif case == "oversized token":
            assert c.call(ApiKey.SASL_HANDSHAKE, 1, mechanism="PLAIN").error_code == 0
            c.send(ApiKey.SASL_AUTHENTICATE, 2, auth_bytes=b"\0" * 5000)
        elif case == "wrong nonce":
            first = sasl_authenticate(c, "SCRAM-SHA-256", [scram.first()])[0]
            bad = c.call(ApiKey.SASL_AUTHENTICATE, 2, auth_bytes=scram.final(bytes(first.auth_bytes), "forged"))
            assert bad.error_code == 58
        elif case == "replayed client-final":
            first = sasl_authenticate(c, "SCRAM-SHA-256", [scram.first()])[0]
            final = scram.final(bytes(first.auth_bytes))
            assert c.call(ApiKey.SASL_AUTHENTICATE, 2, auth_bytes=final).error_code == 0
            with RawClient(plain) as other:
                other_first = sasl_authenticate(other, "SCRAM-SHA-256", [scram.first()])[0]
                assert other_first.error_code == 0
                assert other.call(ApiKey.SASL_AUTHENTICATE, 2, auth_bytes=final).error_code == 58
                assert other.is_closed_by_broker(3)
            return
        assert c.is_closed_by_broker(3)


HOSTILE_SASL_AND_TLS = {   # case -> what the broker's log says about it
    "wrong password": "SASL PLAIN authentication failed",
    "unknown mechanism": "SASL mechanism 'GSSAPI' is not enabled",
    "request before authentication": "METADATA before SASL authentication",
    "out of order": "while authenticating with PLAIN: only SaslAuthenticate",
    "garbage token": "SASL SCRAM-SHA-256 authentication failed",
    "oversized token": "larger than socket.request.max.bytes (4096)",
    "wrong nonce": "SASL SCRAM-SHA-256 authentication failed",
    "replayed client-final": "SASL SCRAM-SHA-256 authentication failed",
    "TLS garbage": "TLS handshake failed",
    "TLS closed mid-handshake": "TLS handshake failed",
}


# --- Frames in, answers out in order ---------------------------------------------

def test_server_pipelined_requests_are_answered_in_order(client):
    client.create_topic("pipe")
    plan = [(ApiKey.PRODUCE, 9, dict(acks=-1, timeout_ms=1000, topic_data=[
                Msg(name="pipe", partition_data=[Msg(index=0, records=make_batch([b"p%d" % i]))])]))
            for i in range(4)]
    plan.insert(1, (ApiKey.API_VERSIONS, 0, {}))
    plan.insert(3, (ApiKey.METADATA, 12, dict(topics=None)))
    plan.append((ApiKey.LIST_OFFSETS, 11, dict(replica_id=-1, topics=[
        Msg(name="pipe", partitions=[Msg(partition_index=0, timestamp=-1)])])))
    frames = b"".join(RawClient.encode(key, v, 100 + i, **f) for i, (key, v, f) in enumerate(plan))
    client.sock.sendall(frames)                              # all at once, one write
    answers = [client.receive(key, v) for key, v, _ in plan]
    assert [cid for cid, _ in answers] == [100 + i for i in range(len(plan))]
    produced = [m.responses[0].partition_responses[0].base_offset
                for (cid, m), (key, _, _) in zip(answers, plan) if key == ApiKey.PRODUCE]
    assert produced == [0, 1, 2, 3]


def test_server_pipelined_request_sees_an_earlier_acked_produce(client):
    """Kafka handles one request per connection at a time (the channel is muted
    until the response is sent), so a ListOffsets or Fetch sent right behind a
    Produce sees that produce's records."""
    client.create_topic("ryw")
    produce = RawClient.encode(ApiKey.PRODUCE, 9, 1, acks=-1, timeout_ms=1000, topic_data=[
        Msg(name="ryw", partition_data=[Msg(index=0, records=make_batch([b"mine"]))])])
    latest = RawClient.encode(ApiKey.LIST_OFFSETS, 11, 2, replica_id=-1, topics=[
        Msg(name="ryw", partitions=[Msg(partition_index=0, timestamp=-1)])])
    client.sock.sendall(produce + latest)
    _, acked = client.receive(ApiKey.PRODUCE, 9)
    _, offsets = client.receive(ApiKey.LIST_OFFSETS, 11)
    assert acked.responses[0].partition_responses[0].base_offset == 0
    # The answer sent after the Produce ack must not predate it.
    assert offsets.topics[0].partitions[0].offset == 1


def test_server_serves_hundreds_of_connections_at_once(broker):
    """Verifies that 300 connections, each with a request in flight, are all
    answered (one selectors loop, non-blocking sockets)."""
    clients = [RawClient(broker.port) for _ in range(300)]
    try:
        sent = [c.send(ApiKey.API_VERSIONS, 3, client_software_name="t",
                       client_software_version="1") for c in clients]
        for c, (cid, version) in zip(clients, sent):
            got, msg = c.receive(ApiKey.API_VERSIONS, version)
            assert (got, msg.error_code) == (cid, 0)
    finally:
        for c in clients:
            c.close()


@pytest.mark.parametrize("size", [-1, -2 ** 31, 2 ** 31 - 1])
def test_server_bad_frame_length_closes_the_connection(broker, bystander, size):
    with raw_connection(broker) as bad:
        bad.sock.sendall(struct.pack(">i", size) + b"\x00" * 16)
        assert bad.is_closed_by_broker()


def test_server_frame_over_socket_request_max_bytes_closes(start_broker):
    broker = start_broker({"socket.request.max.bytes": 1000})
    with RawClient(broker.port) as bystander, RawClient(broker.port) as bad:
        bystander.call(ApiKey.API_VERSIONS, 0)
        bystander.create_topic("big")
        assert bystander.produce("big", 0, make_batch([b"x" * 500])).error_code == 0
        bad.sock.sendall(RawClient.encode(ApiKey.PRODUCE, 9, 1, acks=-1, timeout_ms=1000,
                                          topic_data=[Msg(name="big", partition_data=[
                                              Msg(index=0, records=make_batch([b"y" * 2000]))])]))
        assert bad.is_closed_by_broker()
        assert bystander.values("big", 0) == [(0, b"x" * 500)]


@pytest.mark.parametrize("key", [7, 99, 1000, -1])
def test_server_unknown_api_key_closes_the_connection(broker, bystander, key):
    with raw_connection(broker) as bad:
        body = struct.pack(">hhih", key, 0, 1, -1)
        bad.sock.sendall(struct.pack(">i", len(body)) + body)
        assert bad.is_closed_by_broker()


@pytest.mark.parametrize("key,version", [(ApiKey.PRODUCE, 0), (ApiKey.PRODUCE, 2),
                                         (ApiKey.METADATA, 13), (ApiKey.FETCH, 3),
                                         (ApiKey.FETCH, 13), (ApiKey.CREATE_TOPICS, 1)])
def test_server_unsupported_version_closes_the_connection(broker, bystander, key, version):
    with raw_connection(broker) as bad:
        body = struct.pack(">hhih", key, version, 1, -1) + b"\x00" * 40
        bad.sock.sendall(struct.pack(">i", len(body)) + body)
        assert bad.is_closed_by_broker()


@pytest.mark.parametrize("bad", ["unknown-api-key", "unsupported-version", "truncated", "oversized"])
def test_server_a_refused_frame_closes_only_after_the_answers_owed_before_it(broker, bystander, bad):
    """An OffsetCommit (its answer held for meta.db's group commit) and an
    ApiVersions pipelined in one write with a frame that is refused after
    them: both answers arrive, then the close (the long fuzz found the answer
    dropped). Kafka reads a connection's next request only once it has
    answered the one before."""
    with raw_connection(broker) as c:
        c.create_topic("owed")
        commit = RawClient.encode(ApiKey.OFFSET_COMMIT, 8, 7, group_id="owed-g", generation_id_or_member_epoch=-1,
                                  member_id="", topics=[Msg(name="owed", partitions=[
                                      Msg(partition_index=0, committed_offset=5, committed_metadata="")])])
        versions = RawClient.encode(ApiKey.API_VERSIONS, 3, 8, **SOFTWARE)
        refused = {"unknown-api-key": struct.pack(">hhih", 999, 0, 9, -1),
                   "unsupported-version": struct.pack(">hhih", ApiKey.PRODUCE, 0, 9, -1) + bytes(20),
                   "truncated": RawClient.encode(ApiKey.METADATA, 12, 9, topics=None)[4:-3]}.get(bad)
        tail = struct.pack(">i", len(refused)) + refused if refused else struct.pack(">i", 2 ** 31 - 1) + bytes(8)
        c.sock.sendall(commit + versions + tail)
        cid, answer = c.receive(ApiKey.OFFSET_COMMIT, 8)
        assert cid == 7 and answer.topics[0].partitions[0].error_code == 0
        assert c.receive(ApiKey.API_VERSIONS, 3)[0] == 8
        assert c.is_closed_by_broker()
    with raw_connection(broker) as again:
        assert again.call(ApiKey.OFFSET_FETCH, 7, group_id="owed-g", topics=None,
                          require_stable=False).topics[0].partitions[0].committed_offset == 5


def test_server_truncated_body_closes_only_that_connection(broker, bystander):
    for key, version in SERVED:
        spec = doze.HANDLERS[key][0]
        frame = RawClient.encode(key, version, 5, **vars(sample_struct(spec.request, False)))
        header = 4 + 10 + len("doze-test") + (1 if spec.flexible(version) else 0)
        if len(frame) <= header:
            continue                                     # an empty body cannot be cut
        cut = frame[4:header + (len(frame) - header) // 2]
        with raw_connection(broker) as bad:
            bad.sock.sendall(struct.pack(">i", len(cut)) + cut)
            assert bad.is_closed_by_broker(), (key.name, version)
    assert bystander.call(ApiKey.API_VERSIONS, 0).error_code == 0


def test_server_random_bytes_never_kill_the_broker(broker, bystander):
    rng = random.Random(7)
    for i in range(150):
        key, version = SERVED[i % len(SERVED)]
        if key in (ApiKey.CREATE_TOPICS, ApiKey.CREATE_PARTITIONS):
            continue                                     # could legitimately make 10^9 partitions
        body = struct.pack(">hhih", key, version, i, -1) + rng.randbytes(rng.randrange(0, 80)) \
            if hasattr(rng, "randbytes") else struct.pack(">hhih", key, version, i, -1) + os.urandom(40)
        with raw_connection(broker) as bad:
            bad.sock.sendall(struct.pack(">i", len(body)) + body)
            bad.sock.settimeout(0.05)
            try:
                bad.sock.recv(65536)                     # an answer or a close: both fine
            except (socket.timeout, ConnectionError):
                pass
    assert bystander.call(ApiKey.API_VERSIONS, 0).error_code == 0


def test_server_a_request_of_too_many_elements_closes_its_connection(broker, bystander):
    with RawClient(broker.port) as c:
        c.send(ApiKey.METADATA, 12, topics=[Msg(name="t") for _ in range(doze.MAX_REQUEST_ELEMENTS + 1)],
               allow_auto_topic_creation=False)
        assert c.is_closed_by_broker()
    with RawClient(broker.port) as c:
        resp = c.metadata(["t%d" % i for i in range(1000)], allow_auto_topic_creation=False)
        assert len(resp.topics) == 1000


# --- TLS on the loop, and SASL over it -------------------------------------------

def test_tls_listener_serves_requests_and_fetch_without_sendfile(start_broker, pem):
    broker = start_broker(tls_settings(pem))
    port = ssl_port(broker)
    with TlsClient(port) as c:
        assert c.sock.version() in ("TLSv1.2", "TLSv1.3")
        [b] = c.metadata(None).brokers
        assert (b.host, b.port) == ("127.0.0.1", port)          # the SSL listener's own address
        c.call(ApiKey.CREATE_TOPICS, 7, topics=[Msg(name="t", num_partitions=1, replication_factor=1,
                                                    assignments=[], configs=[])], timeout_ms=5000)
        values = [bytes([i]) * 3000 for i in range(200)]          # bigger than one TLS record
        assert c.produce("t", 0, make_batch(values)).error_code == 0
        assert [v for _, v in c.values("t", 0)] == values
    with RawClient(broker.port) as plain:                         # the PLAINTEXT listener beside it
        assert plain.metadata(None).brokers[0].port == broker.port


def test_tls_client_certificate_gives_the_mapped_principal(start_broker, pem):
    broker = start_broker(tls_settings(pem, ssl_client_auth="required",
                                       ssl_principal_mapping_rules="RULE:^CN=(.*?),OU=eng,.*$/$1/U,DEFAULT"))
    with TlsClient(ssl_port(broker), pem["alice_cert"], pem["alice_key"]) as c:
        assert c.call(ApiKey.API_VERSIONS, 3, **SOFTWARE).error_code == 0
        assert principals(broker) == ["User:ALICE"]
    with RawClient(broker.port) as plain:
        assert plain.call(ApiKey.API_VERSIONS, 3, **SOFTWARE).error_code == 0
        assert principals(broker) == ["User:ANONYMOUS"]


def test_tls_required_client_auth_refuses_a_client_without_a_certificate(start_broker, pem, caplog):
    broker = start_broker(tls_settings(pem, ssl_client_auth="required"))
    with RawClient(broker.port) as bystander:
        with pytest.raises((ssl.SSLError, OSError, EOFError)):
            with TlsClient(ssl_port(broker)) as c:
                c.call(ApiKey.API_VERSIONS, 3, **SOFTWARE)
        assert bystander.call(ApiKey.API_VERSIONS, 3, **SOFTWARE).error_code == 0
    assert wait_until(lambda: "TLS handshake failed" in caplog.text)


def test_java_host_address_prints_ipv6_as_java_does():
    assert doze.java_host_address("::1") == "0:0:0:0:0:0:0:1"
    assert doze.java_host_address("127.0.0.1") == "127.0.0.1"


def test_tls_rfc2253_names_as_java_prints_them():
    subject = ((("countryName", "US"),), (("organizationName", "Acme, Inc"),),
               (("organizationalUnitName", "eng"),), (("commonName", "alice"),), (("emailAddress", "a@b.c"),))
    assert doze.rfc2253(subject) == "1.2.840.113549.1.9.1=#16056140622e63,CN=alice,OU=eng,O=Acme\\, Inc,C=US"
    assert doze.rfc2253(((("commonName", "#x "),),)) == "CN=\\#x\\ "


@pytest.mark.parametrize("rules, dn, name", [
    ("DEFAULT", "CN=alice,O=Acme", "CN=alice,O=Acme"),
    ("RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,DEFAULT", "CN=kafka1,OU=ServiceUsers,O=Org", "kafka1"),
    ("RULE:^CN=(.*?),OU=(.*?),O=.*$/$1@$2/L", "CN=Duke,OU=JavaSoft,O=Sun", "duke@javasoft"),
    ("RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/", "CN=x,O=y", None),
    ("", "CN=x", None),
])
def test_tls_principal_mapping_rules_as_kafka_applies_them(rules, dn, name):
    assert doze.map_principal(doze.parse_principal_rules(rules), dn) == name


def test_tls_principal_mapping_rule_that_does_not_parse_stops_the_start(start_broker, pem):
    with pytest.raises(ValueError, match="Invalid rule: `FOO`"):
        start_broker(tls_settings(pem, ssl_principal_mapping_rules="FOO"))


def test_tls_inline_pem_keystore_with_an_encrypted_key(start_broker, pem):
    broker = start_broker(tls_settings(pem, ssl_keystore_location=None) | {
        "ssl.keystore.key": TEST_SERVER_KEY_ENCRYPTED, "ssl.keystore.certificate.chain": TEST_SERVER_CERT,
        "ssl.key.password": "keypass", "ssl.truststore.certificates": TEST_CA_PEM,
        "ssl.truststore.location": None})
    with TlsClient(ssl_port(broker)) as c:
        assert c.call(ApiKey.API_VERSIONS, 3, **SOFTWARE).error_code == 0


@pytest.mark.parametrize("more, message", [
    ({"ssl.keystore.type": "JKS"}, "doze reads PEM keystores only"),
    ({"ssl.keystore.password": "x"}, "SSL key store password cannot be specified with PEM format"),
    ({"ssl.keystore.location": None}, "an SSL listener needs a key and certificate"),
    ({"ssl.keystore.location": None, "ssl.keystore.key": TEST_SERVER_KEY}, "certificate chain is not specified"),
    ({"ssl.keystore.key": TEST_SERVER_KEY, "ssl.keystore.certificate.chain": TEST_SERVER_CERT},
     "Both SSL key store location and separate private key are specified"),
    ({"ssl.truststore.password": "x"}, "SSL trust store password cannot be specified for PEM format"),
    ({"ssl.enabled.protocols": "TLSv1.1"}, "ssl.enabled.protocols TLSv1.1"),
    ({"ssl.client.auth": "sometimes"}, "ssl.client.auth"),
    ({"ssl.keystore.location": "/nonexistent.pem"}, "Failed to load PEM SSL keystore"),
])
def test_tls_settings_kafka_refuses_stop_the_start(start_broker, pem, more, message):
    settings = tls_settings(pem)
    settings.update(more)
    with pytest.raises(ValueError, match=message):
        start_broker({k: v for k, v in settings.items() if v is not None})


def test_tls_per_listener_settings_win(start_broker, pem):
    """listener.name.<name>.ssl.* for one listener, over the plain ssl.* ones."""
    settings = tls_settings(pem, ssl_keystore_type="JKS")       # would stop the start ...
    settings["listener.name.ssl.ssl.keystore.type"] = "PEM"     # ... but not for listener SSL
    broker = start_broker(settings)
    with TlsClient(ssl_port(broker)) as c:
        assert c.call(ApiKey.API_VERSIONS, 3, **SOFTWARE).error_code == 0


def test_tls_garbage_closes_only_that_connection(start_broker, pem, caplog):
    broker = start_broker(tls_settings(pem))
    with RawClient(broker.port) as bystander, socket.create_connection(("127.0.0.1", ssl_port(broker))) as s:
        s.sendall(RawClient.encode(ApiKey.API_VERSIONS, 3, 1, **SOFTWARE))   # Kafka bytes, not TLS
        s.settimeout(5)
        try:
            assert s.recv(100) == b""                             # closed ...
        except ConnectionResetError:
            pass                                                  # ... with its bytes unread: a reset
        assert wait_until(lambda: "TLS handshake failed" in caplog.text)
        assert bystander.call(ApiKey.API_VERSIONS, 3, **SOFTWARE).error_code == 0


def test_tls_a_stalled_handshake_is_cut_off_at_the_frame_timeout(start_broker, pem):
    clock = FakeClock()
    broker = start_broker(tls_settings(pem, doze_frame_timeout_ms=30_000), clock=clock)
    with socket.create_connection(("127.0.0.1", ssl_port(broker))) as s, RawClient(broker.port) as ok:
        s.sendall(b"\x16\x03\x01")                              # the start of a ClientHello, no more
        assert wait_until(lambda: broker.run_in_loop(lambda: any(c.handshaking for c in broker.connections)))
        clock.advance(25_000)
        loop_passes(broker)                                      # the sweep ran at 25 s
        assert answers(ok)
        s.settimeout(0.2)
        with pytest.raises(socket.timeout):
            s.recv(1)                                            # 25 s in: still open
        clock.advance(10_000)
        s.settimeout(5)
        assert s.recv(1) == b""                                  # past 30 s: closed


def test_sasl_ssl_listener_does_tls_then_sasl(start_broker, pem):
    settings = {**tls_settings(pem), **sasl_settings()}
    settings["listeners"] = "PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0"
    settings["listener.name.sasl_ssl.plain.sasl.jaas.config"] = PLAIN_JAAS
    broker = start_broker(settings)
    with TlsClient(sasl_port(broker)) as c:
        a = sasl_authenticate(c, "PLAIN", [plain_token("admin", "admin-secret")])[0]
        assert a.error_code == 0
        assert principals(broker) == ["User:admin"]
        assert c.metadata(None).brokers[0].port == sasl_port(broker)


def test_sasl_ssl_takes_ssl_client_auth_only_listener_prefixed(start_broker, pem, caplog):
    """Kafka's ChannelBuilders: on a SASL_SSL listener a plain ssl.client.auth is
    ignored (with Kafka's warning); listener.name.<l>.ssl.client.auth applies."""
    settings = {**tls_settings(pem), **sasl_settings(), "ssl.client.auth": "required",
                "listeners": "PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0",
                "listener.name.sasl_ssl.plain.sasl.jaas.config": PLAIN_JAAS}
    broker = start_broker(settings)
    with TlsClient(sasl_port(broker)) as c:                    # no client certificate: still in
        assert sasl_authenticate(c, "PLAIN", [plain_token("alice", "alice-secret")])[0].error_code == 0
    assert "is applied only to SSL listeners" in caplog.text
    stop(broker)
    broker = start_broker(dict(settings, **{"listener.name.sasl_ssl.ssl.client.auth": "required"}))
    with pytest.raises((ssl.SSLError, OSError, EOFError)):
        with TlsClient(sasl_port(broker)) as c:
            c.call(ApiKey.API_VERSIONS, 3, **SOFTWARE)


@pytest.mark.parametrize("case", list(HOSTILE_SASL_AND_TLS))
def test_sasl_and_tls_hostile_clients_leave_others_alone(start_broker, pem, caplog, case):
    """A client authenticated with SCRAM over SASL_SSL produces before and after each
    misbehaving client, whose connection alone closes with a log line that says why."""
    caplog.set_level(logging.INFO, logger="doze_kafka")
    settings = {**tls_settings(pem), **sasl_settings(sasl_server_max_receive_size=4096)}
    settings["listeners"] = "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0," \
                            "SSL://127.0.0.1:0"
    settings["listener.name.sasl_ssl.plain.sasl.jaas.config"] = PLAIN_JAAS
    broker = start_broker(settings)
    add_scram_user(broker, "bob", "bob-secret")
    add_scram_user(broker, "carol", "carol-secret", "SCRAM-SHA-512")
    with TlsClient(port_of(broker, "SASL_SSL")) as bystander:
        scram = ScramClient("SCRAM-SHA-512", "carol", "carol-secret")
        first = sasl_authenticate(bystander, "SCRAM-SHA-512", [scram.first()])[0]
        assert bystander.call(ApiKey.SASL_AUTHENTICATE, 2,
                              auth_bytes=scram.final(bytes(first.auth_bytes))).error_code == 0
        bystander.create_topic("calm")
        assert bystander.produce("calm", 0, make_batch([b"before"])).base_offset == 0
        hostile_sasl_and_tls(case, broker)
        assert wait_until(lambda: HOSTILE_SASL_AND_TLS[case] in caplog.text), caplog.text[-2000:]
        assert bystander.produce("calm", 0, make_batch([b"after"])).base_offset == 1
        assert bystander.fetch("calm", 0, 0).high_watermark == 2
    assert "Traceback" not in caplog.text and "bob-secret" not in caplog.text


# --- Dispatch: a request to its handler, its answer back ---------------------------

def test_server_api_versions_unknown_version_gets_v0_fallback(client):
    """KIP-511: ApiVersions v9 (request header v2) is answered in the v0 format
    with UNSUPPORTED_VERSION and ApiVersions' own range, as Kafka 4.3.1 does."""
    body = (struct.pack(">hhih", 18, 9, 42, 3) + b"cli" + b"\x00"     # header v2
            + b"\x04doze\x020\x00")                                     # a v9 body nobody reads
    client.sock.sendall(struct.pack(">i", len(body)) + body)
    frame = client.read_frame()
    assert frame.hex() == ("0000002a" "0023" "00000001" "0012" "0000" "0004")
    assert client.call(ApiKey.API_VERSIONS, 4, **SOFTWARE).error_code == 0   # the connection lives


def test_server_a_handler_that_fails_is_answered_or_closes_only_its_connection(broker, bystander,
                                                                              monkeypatch, caplog):
    """A bug in a handler: one log line saying where (no traceback), the request
    answered with UNKNOWN_SERVER_ERROR where its response has an error code,
    else that connection closed; nobody else notices."""
    def broken(ctx, req):
        raise ZeroDivisionError("on purpose")
    for key in (ApiKey.HEARTBEAT, ApiKey.METADATA):
        monkeypatch.setitem(doze.HANDLERS, key, (doze.HANDLERS[key][0], broken))
    with RawClient(broker.port) as c:
        assert c.call(ApiKey.HEARTBEAT, 4, group_id="g", generation_id=1, member_id="m").error_code \
            == ErrorCode.UNKNOWN_SERVER_ERROR
        c.send(ApiKey.METADATA, 12, topics=None)
        assert c.is_closed_by_broker()
    [line] = [r for r in caplog.records if "Heartbeat v4" in r.getMessage()]
    assert "ZeroDivisionError: on purpose (at line" in line.getMessage() and line.exc_info is None
    assert "Traceback" not in caplog.text


@pytest.mark.parametrize("key,version", ALL_VERSIONS, ids=[f"{k.name}-v{v}" for k, v in ALL_VERSIONS])
def test_server_whole_request_error_answers_decode_at_every_version(key, version):
    """The answer to a request that fails whole (a KafkaError at the top of its
    handler, or a bug: UNKNOWN_SERVER_ERROR) holds the schema's defaults
    elsewhere: it must encode, and decode strictly (no null where the schema of
    that version allows none), for every API and version doze serves. A response
    without a top-level error code has no such answer: its connection closes."""
    spec = doze.HANDLERS[key][0]
    msg = doze.whole_request_error(spec, version, doze.KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, "x"), quiet=True)
    has_code = any(f.name == "error_code" and f.in_version(version) for f in spec.response)
    assert (msg is not None) == has_code
    if msg is None:
        return
    data = b"".join(doze.encode_body(spec, version, "response", msg).finish())
    r = doze.Reader(data)
    decoded = doze.read_struct(r, doze.plan_for(spec, version, "response"), spec.flexible(version))
    assert r.pos == len(data) and decoded.error_code == ErrorCode.UNKNOWN_SERVER_ERROR


def test_sasl_debug_log_shows_no_secret(start_broker, caplog):
    """The DEBUG request log (every request and answer) hides SASL tokens, SCRAM
    salted passwords and password-type config values."""
    caplog.set_level(logging.DEBUG, logger="doze_kafka")
    broker = start_broker(sasl_settings())
    with RawClient(sasl_port(broker)) as c:
        sasl_authenticate(c, "PLAIN", [plain_token("alice", "alice-secret")])
        c.call(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, 0, deletions=[], upsertions=[
            scram_upsertion("dora", 1, "dora-secret", salt=b"dora-salt")])
        c.call(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, validate_only=False, resources=[Msg(
            resource_type=4, resource_name="1", configs=[Msg(name="listener.name.sasl_plaintext.ssl.key.password",
                                                             config_operation=0, value="key-secret")])])
    text = "\n".join(r.getMessage() for r in caplog.records)
    assert "<- SaslAuthenticate" in text and "<hidden:" in text
    for secret in ("alice-secret", "dora-salt", "key-secret"):
        assert secret not in text


# --- Limits over real sockets (what Kafka does at each, per its source and a
# real Kafka 4.3.1 tried with small limits) -----------------------------------

def test_limit_descriptor_limit_is_raised_and_shared(broker):
    """RLIMIT_NOFILE's soft limit goes up to the hard one at start; segment files
    get half of it, connections stop short of the rest."""
    import resource
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    assert soft == hard or hard == resource.RLIM_INFINITY
    files, connections = broker.run_in_loop(lambda: (broker.logs.open_files.limit, broker.connections.max_connections))
    assert files == max(64, soft // 2)
    assert connections <= soft // 2


def test_limit_max_connections_per_ip_closes_the_extra_one_at_once(start_broker, caplog):
    caplog.set_level(logging.INFO, logger="doze_kafka")
    broker = start_broker({"max.connections.per.ip": 3})
    kept = [RawClient(broker.port) for _ in range(3)]
    assert all(answers(c) for c in kept)
    extra = RawClient(broker.port)
    assert extra.is_closed_by_broker(2)
    assert "Rejected connection from /127.0.0.1, address already has the configured maximum " \
           "of 3 connections." in caplog.text
    assert all(answers(c) for c in kept)                # the others notice nothing
    kept.pop().close()
    assert wait_until(lambda: broker.run_in_loop(lambda: len(broker.connections)) == 2)   # the close seen
    with RawClient(broker.port) as again:               # a slot freed: taken
        assert answers(again)
    for c in kept + [extra]:
        c.close()


def test_limit_max_connections_per_ip_overrides(start_broker):
    broker = start_broker({"max.connections.per.ip": 1, "max.connections.per.ip.overrides": "127.0.0.1:4"})
    clients = [RawClient(broker.port) for _ in range(5)]
    assert all(answers(c) for c in clients[:4])
    assert clients[4].is_closed_by_broker(2)
    for c in clients:
        c.close()


def test_limit_max_connections_waits_in_the_backlog_until_one_closes(start_broker):
    broker = start_broker({"max.connections": 3})
    kept = [RawClient(broker.port) for _ in range(3)]
    assert all(answers(c) for c in kept)
    waiting = RawClient(broker.port)                    # connect() succeeds: the kernel's backlog
    assert not answers(waiting, 0.5)                     # ... but nobody reads it
    assert all(answers(c) for c in kept)
    kept.pop().close()
    waiting.sock.settimeout(5)
    _, msg = waiting.receive(ApiKey.API_VERSIONS, 3)    # the request it sent is answered now
    assert msg.error_code == 0 and answers(waiting)
    for c in kept + [waiting]:
        c.close()


def test_limit_idle_connections_are_closed(start_broker):
    clock = FakeClock()
    broker = start_broker({"connections.max.idle.ms": 10_000}, clock=clock)
    silent, busy = RawClient(broker.port), RawClient(broker.port)
    assert answers(busy)
    for _ in range(4):
        clock.advance(3_000)
        loop_passes(broker)                              # the sweep ran
        assert answers(busy)                             # a request every 3 s keeps it open
    assert silent.is_closed_by_broker(2)                 # 12 s without a byte


def test_limit_a_frame_dripped_in_is_cut_off_at_the_frame_timeout(start_broker):
    clock = FakeClock()
    broker = start_broker({"doze.frame.timeout.ms": 30_000}, clock=clock)
    drip, ok = RawClient(broker.port), RawClient(broker.port)
    frame = RawClient.encode(ApiKey.API_VERSIONS, 3, 1, **SOFTWARE)
    for i in range(5):                                    # one byte every 5 s: never idle
        drip.sock.sendall(frame[i:i + 1])
        loop_passes(broker)                               # read, and the sweep ran
        clock.advance(5_000)
        assert answers(ok)
    assert not drip.is_closed_by_broker(0.3)              # 25 s into its frame: still open
    clock.advance(10_000)
    assert drip.is_closed_by_broker(3)                    # past 30 s
    assert answers(ok)


def test_limit_a_client_that_never_reads_is_not_read_either(broker, bystander):
    """Requests pipelined without reading: doze stops reading that connection
    once its unread answers pile up (memory stays bounded), serves the others,
    and answers everything in order once the client reads."""
    greedy = RawClient(broker.port)
    assert answers(greedy)                                # accepted, so it can be found below
    frame = RawClient.encode(ApiKey.METADATA, 12, 7, topics=None, allow_auto_topic_creation=False,
                             include_topic_authorized_operations=False)
    burst = frame * 10_000
    greedy.sock.setblocking(False)
    sent = 0
    with contextlib.suppress(BlockingIOError):
        while sent < 256 << 20:                           # whole frames only, in order
            sent += greedy.sock.send(memoryview(burst)[sent % len(burst):])
    assert sent < 256 << 20, "the broker kept reading a client that never reads"
    [queued] = broker.run_in_loop(lambda: [c.queued_bytes() for c in broker.connections
                                           if c.sock.getpeername() == greedy.sock.getsockname()])
    assert queued < doze.MAX_QUEUED_BYTES + 64 * 1024
    assert bystander.call(ApiKey.API_VERSIONS, 3, **SOFTWARE).error_code == 0
    greedy.sock.setblocking(True)
    greedy.sock.settimeout(5)
    for _ in range(50):
        cid, _ = greedy.receive(ApiKey.METADATA, 12)
        assert cid == 7
    greedy.close()


def test_limit_queued_max_requests_takes_pipelined_requests_a_few_a_pass(start_broker):
    broker = start_broker({"queued.max.requests": 2})
    with RawClient(broker.port) as c, RawClient(broker.port) as other:
        c.sock.sendall(b"".join(RawClient.encode(ApiKey.API_VERSIONS, 3, i, **SOFTWARE)
                                for i in range(1, 41)))
        assert answers(other)
        assert [c.receive(ApiKey.API_VERSIONS, 3)[0] for _ in range(40)] == list(range(1, 41))


def test_a_bug_while_resuming_waiting_frames_closes_that_connection_only(start_broker, monkeypatch, caplog):
    """Frames past a pass's turns wait for the next pass (Connections.take_waiting);
    a bug met there costs that client its connection, as a socket event's does."""
    broker = start_broker({"queued.max.requests": 1})
    handle = doze.Dispatcher.handle_frame
    seen = []

    def second_one_fails(self, conn, frame):
        seen.append(frame)
        if len(seen) == 2:
            raise KeyError("a bug")
        return handle(self, conn, frame)
    with RawClient(broker.port) as bystander:
        monkeypatch.setattr(doze.Dispatcher, "handle_frame", second_one_fails)
        with RawClient(broker.port) as victim:
            for _ in range(3):                             # one burst: one taken now, the rest wait
                victim.send(ApiKey.API_VERSIONS, 3, **SOFTWARE)
            assert victim.is_closed_by_broker(3)
        monkeypatch.undo()
        assert bystander.call(ApiKey.API_VERSIONS, 3, **SOFTWARE).error_code == 0
    assert "KeyError: 'a bug'" in caplog.text and "a bug in doze" in caplog.text


# --- Listeners ---------------------------------------------------------------------

def test_listener_each_answers_with_its_own_advertised_address(start_broker):
    """Named listeners at once; a request is answered with the address of the
    listener it came in on (advertised.listeners, else the listener's own).
    A controller listener is not served: doze has no KRaft controller."""
    broker = start_broker(TWO_LISTENERS)
    client_l, backend = broker.listeners.bound
    assert [(b.listener.name, b.listener.protocol) for b in broker.listeners.bound] == \
        [("CLIENT", "PLAINTEXT"), ("BACKEND", "PLAINTEXT")]
    assert addresses_seen_on(client_l.listener.port) == {("clients.example", 19092)}
    assert addresses_seen_on(backend.listener.port) == {("127.0.0.1", 0)}    # as advertised
    listeners = broker.config["listeners"]
    assert listeners.startswith(f"CLIENT://127.0.0.1:{client_l.listener.port},"
                                f"BACKEND://127.0.0.1:{backend.listener.port},")
    assert "CONTROLLER://127.0.0.1:0" in listeners                  # as given: doze does not bind it


def test_listener_a_port_taken_fails_the_start_and_frees_the_others(tmp_path):
    def sockets():
        return sum(os.readlink(f"/proc/self/fd/{fd}").startswith("socket:")
                   for fd in os.listdir("/proc/self/fd") if os.path.exists(f"/proc/self/fd/{fd}"))
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        config = doze.Config({"listeners": f"PLAINTEXT://127.0.0.1:0,B://127.0.0.1:{port}",
                              "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,B:PLAINTEXT"},
                             data_dir=tmp_path / "data")
        before = sockets()
        with pytest.raises(OSError):
            doze.Broker(config)
        assert sockets() <= before                # A's socket was closed, not leaked


# --- Faults: a test's errors, late and lost answers ------------------------------

def two_partitions(broker, name="ft"):
    with RawClient(broker.port) as c:
        c.create_topic(name, partitions=2)


def produce_both(client, topic, idempotent=None, seq=0):
    """One batch on each of the topic's two partitions -> {partition: (error name, base offset)}."""
    kw = {} if idempotent is None else {"producer_id": idempotent[0], "producer_epoch": idempotent[1],
                                        "base_sequence": seq}
    r = client.call(ApiKey.PRODUCE, 9, acks=-1, timeout_ms=5000, topic_data=[Msg(name=topic, partition_data=[
        Msg(index=p, records=make_batch([b"v"], **kw)) for p in (0, 1)])])
    return {p.index: (ErrorCode(p.error_code).name, p.base_offset) for p in r.responses[0].partition_responses}


def test_faults_an_error_on_every_partition_once_then_served():
    """error=NAME answers without handling, on every partition of a per-partition
    answer (Kafka's getErrorResponse); times=1 then the request is served again."""
    with doze.running() as broker:
        two_partitions(broker)
        fault = broker.faults.add("Produce", error="NOT_LEADER_OR_FOLLOWER", times=1, topic="ft")
        assert broker.faults.list()[0]["id"] == fault
        with RawClient(broker.port) as c:
            assert produce_both(c, "ft") == {0: ("NOT_LEADER_OR_FOLLOWER", -1), 1: ("NOT_LEADER_OR_FOLLOWER", -1)}
            assert produce_both(c, "ft") == {0: ("NONE", 0), 1: ("NONE", 0)}       # nothing was written
        assert broker.faults.list() == []


def test_faults_filters_name_a_transactional_id_and_a_top_level_error_answers():
    with doze.running() as broker:
        broker.faults.add("EndTxn", error="not_coordinator", transactional_id="tx-faulty")
        with RawClient(broker.port) as c:
            c.create_topic("ff", 1)
            other = Txn(c, "tx-fine")
            assert other.whole("ff", 0, [b"x"], commit=True) == 0                 # another id: served
            txn = Txn(c, "tx-faulty")
            assert txn.whole("ff", 0, [b"y"], commit=True) == ErrorCode.NOT_COORDINATOR
            assert describe_txn(c, "tx-faulty").transaction_state == "Ongoing"   # not handled
            broker.faults.clear()
            assert txn.end(True) == 0


def test_faults_a_held_request_waits_on_the_brokers_clock_and_the_next_behind_it():
    """hold_ms: the request is handled only once the broker's clock has moved
    that far (a test moves it); the connection's next request waits behind it."""
    with doze.running() as broker:
        broker.faults.add("ApiVersions", hold_ms=60_000, times=1)
        with RawClient(broker.port) as c:
            c.send(ApiKey.API_VERSIONS, 3, **SOFTWARE)
            c.send(ApiKey.METADATA, 12, topics=None)
            broker.settle()
            assert not select.select([c.sock], [], [], 0.2)[0]                  # held: nothing answered
            broker.advance(60_000)
            assert c.receive(ApiKey.API_VERSIONS, 3)[1].error_code == 0
            assert c.receive(ApiKey.METADATA, 12)[1].brokers


def test_faults_a_delayed_answer_comes_when_the_clock_says():
    with doze.running() as broker:
        two_partitions(broker)
        broker.faults.add("Produce", delay_ms=30_000, times=1)
        with RawClient(broker.port) as c:
            c.send(ApiKey.PRODUCE, 9, acks=-1, timeout_ms=5000, topic_data=[Msg(name="ft", partition_data=[
                Msg(index=0, records=make_batch([b"late"]))])])
            broker.settle()
            assert broker.offsets("ft", 0)["high_watermark"] == 1                # handled, durable
            assert not select.select([c.sock], [], [], 0.2)[0]                  # but not answered
            broker.advance(30_000)
            assert c.receive(ApiKey.PRODUCE, 9)[1].responses[0].partition_responses[0].base_offset == 0


def test_faults_a_dropped_answer_is_a_write_that_happened_and_idempotence_saves_its_retry():
    """drop=True: handled, and the connection closed instead of the answer. An
    idempotent producer's resend is recognised (the same offsets, once); a
    plain producer's resend is written twice -- the case idempotence exists for."""
    with doze.running() as broker:
        two_partitions(broker)
        with RawClient(broker.port) as c:
            r = c.call(ApiKey.INIT_PRODUCER_ID, 4, transactional_id=None, transaction_timeout_ms=1000)
            producer = (r.producer_id, r.producer_epoch)
        for idempotent in (producer, None):
            broker.faults.add("Produce", drop=True, times=1)
            with RawClient(broker.port) as c:
                with pytest.raises(EOFError):
                    produce_both(c, "ft", idempotent)
            with RawClient(broker.port) as c:
                produce_both(c, "ft", idempotent)                                # the client's retry
        values = [r["offset"] for r in broker.records("ft", 0)]
        assert values == [0, 1, 2]        # idempotent: offset 0 once; plain: offsets 1 and 2


def test_faults_close_and_probability_and_misuse():
    with doze.running() as broker:
        broker.faults.add("Metadata", close=True, times=1)
        with RawClient(broker.port) as c:
            c.send(ApiKey.METADATA, 12, topics=None)
            assert c.is_closed_by_broker()
        fault = broker.faults.add("ApiVersions", error="REQUEST_TIMED_OUT" if hasattr(ErrorCode, "REQUEST_TIMED_OUT")
                                  else "UNKNOWN_SERVER_ERROR", probability=0.5)
        with RawClient(broker.port) as c:
            errors = [c.call(ApiKey.API_VERSIONS, 3, **SOFTWARE).error_code for _ in range(200)]
        assert 50 < sum(1 for e in errors if e) < 150                       # a seeded half
        assert broker.faults.remove(fault) and not broker.faults.remove(fault)
        for bad, words in [(dict(api="NoSuchApi", close=True), "no API 'NoSuchApi': one of"),
                           (dict(api="Produce", error="NO_SUCH_ERROR"), "no Kafka error 'NO_SUCH_ERROR'"),
                           (dict(api="Produce"), "a fault takes one of"),
                           (dict(api="Produce", close=True, drop=True), "a fault takes one of"),
                           (dict(api="Produce", close=True, color="red"), "not color"),
                           (dict(api="CreateAcls", error="NOT_CONTROLLER"), "carries no error code")]:
            api = bad.pop("api")
            with pytest.raises(ValueError, match=re.escape(words)):
                broker.faults.add(api, **bad)


###############################################################################
# 19. CONSOLE: WHAT IT SHOWS -- the broker in a browser, read-only, on the same loop
###############################################################################

def http_get(port, path, host=None, method="GET", headers=None, body=None, source=None):
    """One HTTP request with the standard library's client -> (status, {header: value}, body)."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=SOCKET_TIMEOUT_S,
                                   source_address=(source, 0) if source else None)
    try:
        c.request(method, path, body=body, headers={"Host": f"127.0.0.1:{port}" if host is None else host,
                                                    **(headers or {})})
        r = c.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    finally:
        c.close()


def console_json(broker, path):
    status, headers, body = http_get(broker.console.port, path)
    assert status == 200, (path, status, body[:300])
    assert headers["content-type"] == "application/json; charset=utf-8"
    return json.loads(body)


def console_html(broker, path):
    status, headers, body = http_get(broker.console.port, path)
    assert status == 200, (path, status, body[:300])
    assert headers["content-type"] == "text/html; charset=utf-8"
    return body.decode()


SCRIPT_ID = "<script>alert(1)</script>"


@pytest.fixture
def console(start_broker):
    """A broker serving its console on an ephemeral loopback port."""
    return start_broker({"doze.console.listener": "127.0.0.1:0"})


def txn_scene(client):
    """orders-0: a committed transaction (offsets 0-1, marker 2), an aborted one
    (3, marker 4) and an open one (5) whose id is a script."""
    client.create_topic("orders", 2)
    done = Txn(client, "tx-done")
    done.add(("orders", 0))
    assert done.produce("orders", 0, [b"c1", b"c2"]).error_code == 0
    assert done.end(commit=True) == 0
    gone = Txn(client, "tx-gone")
    gone.add(("orders", 0))
    assert gone.produce("orders", 0, [b"a1"]).error_code == 0
    assert gone.end(commit=False) == 0
    pending = Txn(client, SCRIPT_ID, timeout_ms=45000)
    pending.add(("orders", 0))
    assert pending.produce("orders", 0, [b"p1"]).error_code == 0
    return done, gone, pending


def browse(broker, topic, partition, **query):
    return console_json(broker, doze.console_path("api", "topics", topic, partition, **query))


# Batches librdkafka (confluent-kafka 2.16.1) wrote, one per codec: keys k0-k2, values
# b"value N " * 6, header h=xN (captured from doze's log; the console's decoders are checked on them).
LIBRDKAFKA_BATCHES = {
    "gzip": bytes.fromhex(
        "00000000000000000000007d000000000223e3eb300001000000020000018bcfe568000000018bcfe56802ffffffffffffff"
        "ffffffffffffff000000031f8b0800000000000003ab62606060c93648284bcc294d55305020966662ca60a930a862606262"
        "c93684ea3654209606eb36ac62606161c93682ea3652209606eb36020057e74893ba000000"
    ),
    "snappy": bytes.fromhex(
        "0000000000000000000000790000000002b2b06cf30002000000020000018bcfe568000000018bcfe56802ffffffffffffff"
        "ffffffffffffff00000003ba013c7a000000046b306076616c75652030209e0800300202680478307a000202046b310d3e00"
        "310d3e860800053e1c317a000404046b320d3e00320d3e86080014020268047832"
    ),
    "lz4": bytes.fromhex(
        "00000000000000000000008a0000000002ed7e7d820003000000020000018bcfe568000000018bcfe56802ffffffffffffff"
        "ffffffffffffff0000000304224d186040824a000000ff017a000000046b306076616c7565203020080015d3020268047830"
        "7a000202046b313e0013313e000f08000f013e0083317a000404046b323e0013323e000f08000f6002026804783200000000"
    ),
    "zstd": bytes.fromhex(
        "00000000000000000000007c0000000002324359d40004000000020000018bcfe568000000018bcfe56802ffffffffffffff"
        "ffffffffffffff0000000328b52ffd0058150200d4027a000000046b306076616c75652030200202680478307a000202046b"
        "3131317a000404046b32320202680478320800c001c8172483368003c85710b2efcab204"
    ),
}


def form(**fields):
    return urllib.parse.urlencode(fields).encode()


FORM = {"Content-Type": "application/x-www-form-urlencoded"}


def console_login(port, user, password, source=None, origin=True, api=False):
    """POST the login form -> (status, headers, body); the cookie is headers["set-cookie"]."""
    headers = {**FORM, **({"Origin": f"http://127.0.0.1:{port}"} if origin else {})}
    return http_get(port, "/api/login" if api else "/login", method="POST", headers=headers,
                    body=form(user=user, password=password, next="/topics?x=1"), source=source)


def session_cookie(port, user, password, **kw):
    status, headers, body = console_login(port, user, password, **kw)
    assert status in (200, 303), (status, body)
    return headers["set-cookie"].split(";")[0]


@pytest.fixture
def sasl_console(start_broker):
    return start_broker(acl_settings(doze_console_listener="127.0.0.1:0"))


def console_json_as(port, path, cookie):
    status, _, body = http_get(port, path, headers={"Cookie": cookie})
    assert status == 200, (path, status, body[:300])
    return json.loads(body)


def acl_scene(broker):
    """As admin (a super user): topics pub and secret, a committed transaction
    on each (tx-pub, tx-secret), group offsets (g-pub, g-secret); alice may see
    pub, tx-pub and g-pub only (DESCRIBE_CONFIGS not given)."""
    with as_user(broker, "admin") as c:
        c.create_topic("pub", 1)
        c.create_topic("secret", 1)
        for name in ("pub", "secret"):
            t = Txn(c, f"tx-{name}")
            t.add((name, 0))
            assert t.produce(name, 0, [f"{name}-value".encode()]).error_code == 0
            assert t.end(commit=True) == 0
            assert commit_offsets(c, f"g-{name}", {(name, 0): 1}) == {(name, 0): 0}
        c.create_topic("desc", 1)                      # alice may DESCRIBE it, not READ it
        held = Txn(c, "tx-open")
        held.add(("desc", 0))
        assert held.produce("desc", 0, [b"open"]).error_code == 0
        create_acls(c, acl(doze.ResourceType.TOPIC, "pub", doze.Op.READ),
                    acl(doze.ResourceType.TOPIC, "desc", doze.Op.DESCRIBE),
                    acl(doze.ResourceType.TRANSACTIONAL_ID, "tx-pub", doze.Op.DESCRIBE),
                    acl(doze.ResourceType.GROUP, "g-pub", doze.Op.DESCRIBE))


def test_console_cluster_json_shows_every_transaction_and_what_holds_the_lso(console):
    with RawClient(console.port) as c:
        done, gone, pending = txn_scene(c)
        d = console_json(console, "/api/cluster")
        part = fetch_isolated(c, "orders", 0)
        described = describe_txn(c, SCRIPT_ID)
    txns = {t["transactional_id"]: t for t in d["transactions"]}
    assert {k: txns[k]["transaction_state"] for k in txns} == {
        "tx-done": "CompleteCommit", "tx-gone": "CompleteAbort", SCRIPT_ID: "Ongoing"}
    open_txn = txns[SCRIPT_ID]
    assert (open_txn["producer_id"], open_txn["producer_epoch"]) == (pending.producer_id, pending.epoch)
    assert open_txn["partitions"] == [{"topic": "orders", "partition": 0}]
    assert open_txn["transaction_timeout_ms"] == 45000 == described.transaction_timeout_ms
    assert open_txn["transaction_start_time_ms"] == described.transaction_start_time_ms
    assert open_txn["age_ms"] >= 0 and open_txn["hanging"] is False
    assert txns["tx-done"]["age_ms"] is None
    [orders0] = [p for p in d["partitions"] if (p["topic"], p["partition"]) == ("orders", 0)]
    assert d["partitions"][0] == orders0                      # held back: listed first
    assert (orders0["last_stable_offset"], orders0["high_watermark"]) == \
        (part.last_stable_offset, part.high_watermark) == (5, 6)
    assert orders0["held_back_by"] == {"producer_id": pending.producer_id, "producer_epoch": pending.epoch,
                                       "transactional_id": SCRIPT_ID, "since_offset": 5}
    [orders1] = [p for p in d["partitions"] if (p["topic"], p["partition"]) == ("orders", 1)]
    assert orders1["held_back_by"] is None and orders1["last_stable_offset"] == orders1["high_watermark"] == 0
    producers = {p["producer_id"]: p for p in d["producers"] if p["topic"] == "orders"}
    assert {pid: p["transactional_id"] for pid, p in producers.items()} == {
        done.producer_id: "tx-done", gone.producer_id: "tx-gone", pending.producer_id: SCRIPT_ID}
    assert {pid: p["current_txn_start_offset"] for pid, p in producers.items()} == {
        done.producer_id: -1, gone.producer_id: -1, pending.producer_id: 5}
    assert producers[done.producer_id]["last_sequence"] == 1
    assert not any(p["hanging"] for p in producers.values())


def test_console_cluster_shows_a_partition_the_disk_took_offline(start_broker, tmp_path):
    files = doze.FaultyDisk()
    broker = start_broker({"doze.console.listener": "127.0.0.1:0"}, files=files)
    with RawClient(broker.port) as c:
        c.create_topic("shaky", partitions=2)
        files.fail_fsyncs(str(tmp_path / "data" / "shaky-1"), errno.EIO)
        assert c.produce("shaky", 1, make_batch([b"x"])).error_code == ErrorCode.KAFKA_STORAGE_ERROR
    rows = console_json(broker, "/api/cluster")["partitions"]
    assert rows[0]["topic"] == "shaky" and rows[0]["partition"] == 1 and "fsync failed" in rows[0]["offline"]
    assert [r["offline"] for r in rows if (r["topic"], r["partition"]) == ("shaky", 0)] == [None]
    status, _, body = http_get(broker.console.port, "/")
    assert status == 200 and "offline: fsync failed" in body.decode()


def test_console_transaction_page_shows_its_machine_timeline_markers_and_offsets(console):
    with RawClient(console.port) as c:
        c.create_topic("orders", 2)
        t = Txn(c, "tx-page")
        t.add(("orders", 0), ("orders", 1))
        assert t.produce("orders", 0, [b"a"]).error_code == t.produce("orders", 1, [b"b", b"c"]).error_code == 0
        assert t.add_offsets("g1") == 0
        assert t.commit_offsets("g1", {("orders", 0): 1}) == {("orders", 0): 0}
        during = console_json(console, "/api/txn?id=tx-page")
        assert t.end(commit=True) == 0
        after = console_json(console, "/api/txn?id=tx-page")
        page = console_html(console, "/txn?id=tx-page")
        cluster = console_json(console, "/api/cluster")
        ends = [fetch_isolated(c, "orders", p).high_watermark for p in (0, 1)]
        committed = committed_offsets(c, "g1", [("orders", 0)])
    assert during["transaction_state"] == "Ongoing" and during["last_decision"] is None
    offsets_partition = doze.internal_partition("g1", console.config["offsets.topic.num.partitions"])
    assert during["partitions"] == [{"topic": "__consumer_offsets", "partition": offsets_partition},  # as Kafka's
                                    {"topic": "orders", "partition": 0}, {"topic": "orders", "partition": 1}]
    assert during["pending_offsets"] == [{"group": "g1", "topic": "orders", "partition": 0, "offset": 1,
                                          "metadata": ""}]
    assert [(e["from_state"], e["to_state"], e["cause"], e["producer_epoch"]) for e in after["history"]] == [
        ("Empty", "Empty", "InitProducerId", 0), ("Empty", "Ongoing", "AddPartitionsToTxn", 0),
        ("Ongoing", "Ongoing", "AddOffsetsToTxn", 0),                 # Kafka: a record in __transaction_state too
        ("Ongoing", "PrepareCommit", "EndTxn (commit)", 0), ("PrepareCommit", "CompleteCommit", "markers durable", 0)]
    assert [e["at_ms"] for e in after["history"]] == sorted(e["at_ms"] for e in after["history"])
    last = after["last_decision"]
    assert last["committed"] is True
    assert last["markers"] == [{"topic": "__consumer_offsets", "partition": offsets_partition, "offset": None},
                               {"topic": "orders", "partition": 0, "offset": ends[0] - 1},
                               {"topic": "orders", "partition": 1, "offset": ends[1] - 1}] \
        and ends == [2, 3]                                          # each marker is its partition's last offset
    assert last["offsets"] == during["pending_offsets"] and committed == {("orders", 0): (0, 1)}
    assert after["pending_offsets"] == [] and after["partitions"] == []
    assert page.count('aria-current="step"') == 1
    assert '<g class="state-box now" data-state="CompleteCommit" aria-current="step">' in page
    assert "Its last decision: COMMIT" in page and "EndTxn (commit)" in page
    markers = [(e["topic"], e["partition"], e["offset"], e["control"]) for e in cluster["recent_events"]
               if e["kind"] == "marker"]
    assert sorted(markers) == [("__consumer_offsets", offsets_partition, None, "COMMIT"),   # a stand-in: see §12
                               ("orders", 0, 1, "COMMIT"), ("orders", 1, 2, "COMMIT")]
    ids = [e["id"] for e in cluster["recent_events"]]
    assert ids == sorted(ids, reverse=True)                            # newest first
    assert http_get(console.console.port, "/txn?id=nobody")[0] == 404
    assert json.loads(http_get(console.console.port, "/api/txn?id=nobody")[2])["error"].startswith(
        "TRANSACTIONAL_ID_NOT_FOUND")


def test_console_transaction_timeline_shows_a_fence_and_its_abort(console):
    with RawClient(console.port) as c:
        c.create_topic("orders", 1)
        zombie = Txn(c, "tx-fence")
        zombie.add(("orders", 0))
        zombie.produce("orders", 0, [b"z"])
        fresh = Txn(c, "tx-fence")                     # a new instance fences the zombie
        assert zombie.end(commit=True) == ErrorCode.PRODUCER_FENCED
        d = console_json(console, "/api/txn?id=tx-fence")
    steps = [(e["from_state"], e["to_state"], e["cause"], e["producer_epoch"]) for e in d["history"]]
    assert steps == [("Empty", "Empty", "InitProducerId", 0), ("Empty", "Ongoing", "AddPartitionsToTxn", 0),
                     ("Ongoing", "PrepareAbort", "fenced: a new InitProducerId", 1),
                     ("PrepareAbort", "CompleteAbort", "markers durable", 1),
                     ("CompleteAbort", "Empty", "InitProducerId", 2)]
    assert (d["producer_epoch"], fresh.epoch) == (2, 2) and d["last_decision"]["committed"] is False


def test_console_browser_views_agree_with_what_consumers_fetch(console):
    """orders-0: committed 0-1, COMMIT 2, aborted 3, ABORT 4, open 5, plain 6."""
    with RawClient(console.port) as c:
        done, gone, pending = txn_scene(c)
        c.produce("orders", 0, make_batch([b"plain"]))
        log = browse(console, "orders", 0)
        committed = browse(console, "orders", 0, view="committed")
        uncommitted = browse(console, "orders", 0, view="uncommitted")
        page = console_html(console, "/topics/orders/0")
        seen_committed = visible_values(c, "orders", 0)
        seen_uncommitted = visible_values(c, "orders", 0, read_committed=False)
    shape = [(i["kind"], i["offset"], i.get("txn_status") or i.get("control") or i.get("name")) for i in log["items"]]
    assert shape == [("record", 0, "committed"), ("record", 1, "committed"), ("marker", 2, "COMMIT"),
                     ("record", 3, "aborted"), ("marker", 4, "ABORT"), ("line", 5, "LSO"),
                     ("record", 5, "pending"), ("record", 6, None), ("line", 7, "HW")]
    markers = [i for i in log["items"] if i["kind"] == "marker"]
    assert [(m["producer_id"], m["producer_epoch"]) for m in markers] == [
        (done.producer_id, done.epoch), (gone.producer_id, gone.epoch)]
    values = [base64.b64decode(i["value_b64"]) for i in committed["items"] if i["kind"] == "record"]
    assert values == seen_committed == [b"c1", b"c2"]
    assert [i["kind"] for i in committed["items"]][-2:] == ["line", "line"]       # stops at the LSO
    values = [base64.b64decode(i["value_b64"]) for i in uncommitted["items"] if i["kind"] == "record"]
    assert values == seen_uncommitted == [b"c1", b"c2", b"a1", b"p1", b"plain"]
    assert not any(i["kind"] in ("marker", "line") and i.get("name") == "LSO" for i in uncommitted["items"])
    first = log["items"][0]
    assert (first["producer_id"], first["sequence"], first["transactional"], first["value_text"]) == (
        done.producer_id, 0, True, "c1")
    assert f"\u2014 COMMIT by producer {done.producer_id}, epoch 0, at offset 2 \u2014" in page
    assert f"\u2014 ABORT by producer {gone.producer_id}, epoch 0, at offset 4 \u2014" in page
    assert re.search(r'<tr class="aborted"><th scope="row" class="num">3</th>.*?ABORTED</td></tr>', page)
    assert re.search(r'<tr class="pending"><th scope="row" class="num">5</th>.*?PENDING \(open\)</td></tr>', page)
    assert "LSO 5: a read_committed consumer stops here" in page and "HW 7:" in page


def test_console_browser_seeks_by_offset_time_and_end_within_its_budget(console, monkeypatch):
    with RawClient(console.port) as c:
        c.create_topic("many", 1)
        for b in range(30):
            c.produce("many", 0, make_batch([b"v%d" % (b * 10 + i) for i in range(10)],
                                            timestamps=[100_000 + (b * 10 + i) * 10 for i in range(10)]))
        page = browse(console, "many", 0, offset=155, limit=20)
        by_time = browse(console, "many", 0, timestamp=100_000 + 200 * 10 - 5, limit=5)
        end = browse(console, "many", 0, at="end", limit=10)
        monkeypatch.setattr(doze, "CONSOLE_READ_BYTES", 1)          # one batch a page, whatever the limit
        small = browse(console, "many", 0, offset=40, limit=100)
    offsets = [i["offset"] for i in page["items"] if i["kind"] == "record"]
    assert offsets == list(range(155, 175)) and page["next_offset"] == 175 and page["from"] == 155
    assert [i["offset"] for i in by_time["items"] if i["kind"] == "record"] == [200, 201, 202, 203, 204]
    assert by_time["items"][0]["timestamp"] == 102_000
    assert [i["offset"] for i in end["items"] if i["kind"] == "record"] == list(range(290, 300))
    assert end["items"][-1] == {"kind": "line", "name": "HW", "offset": 300} and end["next_offset"] is None
    assert [i["offset"] for i in small["items"] if i["kind"] == "record"] == list(range(40, 50))
    assert small["next_offset"] == 50


def test_console_browser_shows_keys_values_and_headers_inertly(console):
    with RawClient(console.port) as c:
        c.create_topic("odd", 1)
        batch = doze.build_batch([(b"<script>alert(1)</script>", b'{"a": [1, {"b": "<i>"}]}',
                                   [(b'q"uote', b"<angle>")]), (None, b"\xff\xfe\x00binary", [])])
        c.produce("odd", 0, batch)
        page = console_html(console, "/topics/odd/0")
        as_json = console_html(console, "/topics/odd/0?format=json")
        as_hex = console_html(console, "/topics/odd/0?format=hex")
        d = browse(console, "odd", 0)
    assert page.count("<script") == 1 and "<i>" not in page and "<angle>" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page and "q&quot;uote=&lt;angle&gt;" in page
    assert "ff fe 00 62 69 6e 61 72 79" in page                      # not UTF-8: hex
    assert "<pre>{\n &quot;a&quot;: [" in as_json
    assert "3c 73 63 72 69 70 74 3e" in as_hex
    [one, two] = [i for i in d["items"] if i["kind"] == "record"]
    assert base64.b64decode(one["key_b64"]) == b"<script>alert(1)</script>" and one["key_text"] == "<script>alert(1)</script>"
    assert one["headers"] == [{"key_b64": base64.b64encode(b'q"uote').decode(), "key_text": 'q"uote',
                               "value_b64": base64.b64encode(b"<angle>").decode(), "value_text": "<angle>"}]
    assert two["key_b64"] is None and "value_text" not in two


def test_console_snappy_and_lz4_decoders_follow_their_formats():
    """Hand-made streams: literals, back-references (overlapping too), xerial
    framing, LZ4 frames with linked blocks; malformed ones raise RecordsError."""
    raw = b"\x0d" + b"\x0cabcd" + b"\x11\x04" + b"\x00e"                  # 12 + 1 bytes
    assert doze.snappy_block(raw, 100) == b"abcdabcdabcde"
    overlap = b"\x0a" + b"\x00a" + b"\x22\x01\x00"                        # "a", then 9 more from 1 back
    assert doze.snappy_block(overlap, 100) == b"a" * 10
    xerial = doze.SNAPPY_XERIAL + bytes(8) + struct.pack(">i", len(raw)) + raw + struct.pack(">i", 3) + b"\x01\x00z"
    assert doze.unsnappy(xerial, 100) == b"abcdabcdabcdez"
    for bad in (b"\x05\x00a", b"\x04\x11\x09", raw[:-1], b"\xff\xff\xff\xff\x0f"):
        with pytest.raises(doze.RecordsError):
            doze.snappy_block(bad, 100)
    with pytest.raises(doze.RecordsError):
        doze.snappy_block(raw, 5)                                              # over the limit
    block1 = b"\x44abcd\x04\x00" + b"\x10e"                                 # abcd + 8 back-copied + e
    block2 = b"\x0f\x09\x00" + b"\x00"                                      # 19 bytes from 9 back: the first block
    header = b"\x04\x22\x4d\x18" + b"\x40\x40" + b"\x00"                      # linked blocks, no checksums
    frame = header + struct.pack("<I", len(block1)) + block1 + struct.pack("<I", len(block2)) + block2 \
        + struct.pack("<I", 0x80000003) + b"xyz" + b"\x00\x00\x00\x00"
    out = doze.unlz4(frame, 1000)
    assert out[:13] == b"abcdabcdabcde" and len(out) == 13 + 19 + 3 and out.endswith(b"xyz")
    assert out[13:32] == (out[4:13] * 3)[:19]
    for bad in (b"\x00" + frame[1:], frame[:-4], header + struct.pack("<I", 3) + b"\x00\x09\x00"):
        with pytest.raises(doze.RecordsError):
            doze.unlz4(bad, 1000)
    with pytest.raises(doze.RecordsError):
        doze.unlz4(frame, 20)


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_console_browser_decodes_what_librdkafka_compresses(console, codec):
    """Real client batches of every codec: the browser shows their records
    (zstd, which no standard library doze runs on reads, as one batch row)."""
    with RawClient(console.port) as c:
        c.create_topic("packed", 1)
        assert c.produce("packed", 0, LIBRDKAFKA_BATCHES[codec]).error_code == 0
        items = browse(console, "packed", 0)["items"]
        page = console_html(console, "/topics/packed/0")
    if codec == "zstd":
        assert [(i["kind"], i["records_count"], i["compression"]) for i in items[:1]] == [("batch", 3, "zstd")]
        assert "a zstd batch of 3 records the console cannot show" in page
        return
    records = [i for i in items if i["kind"] == "record"]
    assert [(r["offset"], r["key_text"], r["value_text"], r["headers"][0]["value_text"], r["compression"])
            for r in records] == [(n, f"k{n}", f"value {n} " * 6, f"x{n}", codec) for n in range(3)]
    assert "value 2 value 2" in page


def test_console_group_page_shows_a_consumer_group_reconciling(start_broker):
    """A KIP-848 group's page: its epochs, each member's epoch and step, what it
    is revoking and its target (a learner sees t-2 leave a before b gets it)."""
    broker = start_broker({"doze.console.listener": "127.0.0.1:0", "group.consumer.assignment.interval.ms": 0})
    with RawClient(broker.port) as c:
        c.create_topic("t", 3)
        a = cg_heartbeat(c, "a", 0, ["t"], [])
        cg_heartbeat(c, "b", 0, ["t"], [])
        cg_heartbeat(c, "a", a.member_epoch)                   # a is asked to give up t-2
    status, _, body = http_get(broker.console.port, "/api/group?id=g")
    d = json.loads(body)
    assert status == 200 and (d["group_epoch"], d["assignment_epoch"], d["group_state"]) == (3, 3, "Reconciling")
    members = {m["member_id"]: m for m in d["members"]}
    assert (members["a"]["member_epoch"], members["a"]["step"]) == (2, "revoking")
    assert members["a"]["revoking"] == [{"topic": "t", "partitions": [2]}]
    assert members["a"]["target"] == [{"topic": "t", "partitions": [0, 1]}]
    assert (members["b"]["step"], members["b"]["target"]) == ("waiting for partitions", [{"topic": "t", "partitions": [2]}])
    page = http_get(broker.console.port, "/group?id=g")[2].decode()
    assert "Group epoch, assignment epoch" in page and "revoking (consumer protocol)" in page


def test_console_groups_show_offsets_with_both_lags_and_staged_ones(console):
    """A group with committed offsets behind the HW and the LSO, and an open
    transaction's staged offsets for it; its id is a script, shown as text."""
    gid = "<b>g</b>"
    with RawClient(console.port) as c:
        done, gone, pending = txn_scene(c)                       # orders-0: LSO 5, HW 6
        assert commit_offsets(c, gid, {("orders", 0): 1, ("orders", 1): 0}) == {("orders", 0): 0, ("orders", 1): 0}
        assert pending.add_offsets(gid) == 0
        assert pending.commit_offsets(gid, {("orders", 0): 4}) == {("orders", 0): 0}
        groups = console_json(console, "/api/groups")
        g = console_json(console, doze.console_path("api", "group", id=gid))
        page = console_html(console, doze.console_path("group", id=gid))
        listing = console_html(console, "/groups")
        fetched = committed_offsets(c, gid, [("orders", 0), ("orders", 1)])
    [row] = [r for r in groups["groups"] if r["group_id"] == gid]
    assert (row["group_state"], row["members"], row["committed_partitions"], row["lag"]) == ("Empty", 0, 2, 5)
    assert (row["records_to_read"], row["records_to_read_complete"]) == (1, True)     # c2: a1 aborted, p1 open
    assert [(o["topic"], o["partition"], o["committed_offset"], o["lag"], o["lag_to_lso"], o["records_to_read"])
            for o in g["offsets"]] == [("orders", 0, 1, 5, 4, 1), ("orders", 1, 0, 0, 0, 0)]
    assert fetched == {("orders", 0): (0, 1), ("orders", 1): (0, 0)}
    assert g["pending_offsets"] == [{"transactional_id": SCRIPT_ID, "topic": "orders", "partition": 0, "offset": 4}]
    assert g["members"] == []
    assert "&lt;b&gt;g&lt;/b&gt;" in page and "<b>g</b>" not in page and "<b>g</b>" not in listing
    assert 'href="/group?id=%3Cb%3Eg%3C%2Fb%3E"' in listing
    assert http_get(console.console.port, "/group?id=nobody")[0] == 404


def test_console_reads_a_consumer_assignment_and_refuses_other_bytes():
    data = struct.pack(">hi", 3, 1) + struct.pack(">h", 6) + b"orders" + struct.pack(">iii", 2, 0, 5) + \
        struct.pack(">i", -1)
    assert doze.consumer_assignment(data) == [{"topic": "orders", "partitions": [0, 5]}]
    assert doze.consumer_assignment(b"") is None and doze.consumer_assignment(b"\x00\x00\x7f\xff\xff\xff") is None


def test_console_group_page_shows_a_member_and_its_assignment(console):
    """A consumer that joined and got orders [0, 1] from its SyncGroup: its
    member id, instance, client id, host and assignment, on the page and the twin."""
    assignment = struct.pack(">hi", 3, 1) + struct.pack(">h", 6) + b"orders" + struct.pack(">iii", 2, 0, 1) + \
        struct.pack(">i", -1)
    with RawClient(console.port) as c:
        c.create_topic("orders", 2)
        j = join(c, "live-group", instance="i-1")
        assert j.error_code == 0, j
        assert sync(c, "live-group", j.generation_id, j.member_id, {j.member_id: assignment}).error_code == 0
        g = console_json(console, doze.console_path("api", "group", id="live-group"))
        page = console_html(console, doze.console_path("group", id="live-group"))
    assert (g["group_state"], g["protocol_type"], g["protocol"], g["generation_id"], g["leader"]) == (
        "Stable", "consumer", "range", j.generation_id, j.member_id)
    [m] = g["members"]
    assert (m["member_id"], m["group_instance_id"], m["client_host"]) == (j.member_id, "i-1", "/127.0.0.1")
    assert m["client_id"] == c.client_id and m["assignment"] == [{"topic": "orders", "partitions": [0, 1]}]
    assert f'<th scope="row">{j.member_id}</th><td>i-1</td>' in page and "<td>orders [0, 1]</td>" in page


def test_console_topics_and_topic_pages_agree_with_the_protocol(console):
    with RawClient(console.port) as c:
        txn_scene(c)
        c.call(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, resources=[Msg(
            resource_type=2, resource_name="orders", configs=[
                Msg(name="retention.ms", config_operation=0, value="3600000")])], validate_only=False)
        topics = {t["name"]: t for t in console_json(console, "/api/topics")["topics"]}
        topic = console_json(console, "/api/topics/orders")
        page = console_html(console, "/topics/orders")
    assert (topics["orders"]["partitions"], topics["orders"]["offsets"]) == (2, 6)
    assert (topics["orders"]["records"], topics["orders"]["markers"]) == (4, 2)       # c1 c2 a1 p1, two markers
    assert topics["orders"]["open_transactions"] == 1
    assert [(p["partition"], p["log_start_offset"], p["last_stable_offset"], p["high_watermark"], p["records"],
             p["markers"]) for p in topic["partitions"]] == [(0, 0, 5, 6, 4, 2), (1, 0, 0, 0, 0, 0)]
    configs = {e["name"]: e for e in topic["configs"]}
    assert configs["retention.ms"] == {"name": "retention.ms", "value": "3600000", "source": "DYNAMIC_TOPIC_CONFIG"}
    assert configs["cleanup.policy"]["source"] == "DEFAULT_CONFIG"
    assert "<caption>Partitions</caption>" in page and ">3600000<" in page
    assert http_get(console.console.port, "/topics/nothing-here")[0] == 404
    assert http_get(console.console.port, "/api/topics/nothing-here")[0] == 404


def test_console_counts_records_without_markers_within_its_budget(console, monkeypatch):
    """One-record batches (each could be a marker) over two segments, past a
    log start moved by DeleteRecords: a budget of nothing counts nothing
    ("counting"), and the count is exact, as a fetch sees it, once it has time."""
    with RawClient(console.port) as c:
        c.create_topic("many", 1)
        for i in range(150):
            if i == 75:
                console.run_in_loop(lambda: console.logs.logs[("many", 0)].roll())
            t = Txn(c, f"tx-{i % 3}")
            t.add(("many", 0))
            assert t.produce("many", 0, [b"v%d" % i]).error_code == 0
            assert t.end(commit=i % 4 != 0) == 0
        assert c.produce("many", 0, make_batch([b"plain"] * 7)).error_code == 0     # one batch of seven
        r = c.call(ApiKey.DELETE_RECORDS, 2, topics=[Msg(name="many", partitions=[
            Msg(partition_index=0, offset=5)])], timeout_ms=5000)
        assert r.topics[0].partitions[0].error_code == 0
        monkeypatch.setattr(doze, "CONSOLE_COUNT_BUDGET_S", 0.0)
        blind = console_json(console, "/api/topics/many")["partitions"][0]
        monkeypatch.undo()
        counted = console_json(console, "/api/topics/many")["partitions"][0]
        listed = {t["name"]: t for t in console_json(console, "/api/topics")["topics"]}["many"]
        data, offset = 0, 5                                          # what a fetch from log start sees
        while offset < counted["high_watermark"]:
            batches = split_batches(c.fetch("many", 0, offset).records)
            data += sum(struct.unpack_from(">i", b, 57)[0] for b in batches if not header_of(b).attributes & 0x20)
            offset = header_of(batches[-1]).base_offset + header_of(batches[-1]).last_offset_delta + 1
    assert console.run_in_loop(lambda: len(console.logs.get("many", 0).segments)) == 2
    assert (blind["records"], blind["markers"]) == (None, None)
    assert (counted["log_start_offset"], counted["high_watermark"]) == (5, 307)
    assert (counted["records"], counted["markers"]) == (154, 148) == (data, 148)   # offsets 0-4 held 2 markers
    assert (listed["records"], listed["markers"]) == (154, 148)


def test_console_counts_a_topic_made_again_afresh(console):
    """Counts are kept by the log itself: a topic deleted and made again under
    the same name is counted from nothing."""
    with RawClient(console.port) as c:
        c.create_topic("again", 1)
        for i in range(6):
            t = Txn(c, "tx-again")
            t.add(("again", 0))
            assert t.produce("again", 0, [b"x"]).error_code == 0
            assert t.end(commit=True) == 0
        assert console_json(console, "/api/topics/again")["partitions"][0]["markers"] == 6
        r = c.call(ApiKey.DELETE_TOPICS, 4, topic_names=["again"], timeout_ms=5000)
        assert r.responses[0].error_code == 0
        c.create_topic("again", 1)
        for _ in range(2):
            assert c.produce("again", 0, make_batch([b"y"])).error_code == 0
        again = console_json(console, "/api/topics/again")["partitions"][0]
    assert (again["high_watermark"], again["records"], again["markers"]) == (2, 2, 0)


def test_console_every_page_is_whole_html_and_has_its_json_twin(console):
    with RawClient(console.port) as c:
        txn_scene(c)
    for path, api in (("/", "/api/cluster"), ("/topics", "/api/topics"), ("/topics/orders", "/api/topics/orders"),
                      ("/groups", "/api/groups"), ("/apis", "/api/apis"), ("/events", "/api/events")):
        page = console_html(console, path)
        assert page.startswith("<!DOCTYPE html>\n<html lang=\"en\">") and page.endswith("</html>")
        assert page.count("<h1>") == 1 and '<main id="main">' in page and "<nav aria-label=\"Pages\">" in page
        assert f'href="{api}"' in page                          # the twin is linked
        console_json(console, api)
    apis = console_json(console, "/api/apis")["apis"]
    assert [(a["api_key"], a["min_version"], a["max_version"]) for a in apis] == [
        (k, spec.min_served, spec.classic_max) for k, (spec, _) in sorted(doze.HANDLERS.items())]
    status, headers, css = http_get(console.console.port, "/console.css")
    assert status == 200 and headers["content-type"] == "text/css; charset=utf-8" and b"prefers-color-scheme" in css


def test_console_escapes_every_name_and_shows_what_does_not_print(console):
    """A transactional id that is a script, quotes and angle brackets in an id,
    bidi and zero-width characters: inert text on every page."""
    with RawClient(console.port) as c:
        txn_scene(c)
        for tid in ('"><img src=x onerror=alert(2)>', "a\u202eb\u200bc"):
            t = Txn(c, tid)
            t.add(("orders", 1))
            assert t.produce("orders", 1, [b"x"]).error_code == 0
        pages = {path: console_html(console, path) for path in ("/", "/topics", "/topics/orders")}
    cluster = pages["/"]
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in cluster
    assert "&quot;&gt;&lt;img src=x onerror=alert(2)&gt;" in cluster
    assert "a\u27e8U+202E\u27e9b\u27e8U+200B\u27e9c" in cluster and "\u202e" not in cluster
    assert 'href="/txn?id=%3Cscript%3Ealert%281%29%3C%2Fscript%3E"' in cluster
    for page in pages.values():
        assert page.count("<script") == 1 and '<script src="/console.js" defer></script>' in page
        assert "<img" not in page and "onerror=alert" not in page.replace("&lt;img src=x onerror=alert(2)&gt;", "")
    assert json.loads(http_get(console.console.port, "/api/cluster")[2])["transactions"][0]["transactional_id"] \
        in ('"><img src=x onerror=alert(2)>', SCRIPT_ID, "a\u202eb\u200bc", "tx-done", "tx-gone")


def test_console_tables_are_cut_at_their_row_limit(console, monkeypatch):
    monkeypatch.setattr(doze, "CONSOLE_MAX_ROWS", 50)
    with RawClient(console.port) as c:
        c.create_topic("wide", 120)
    topic = console_json(console, "/api/topics/wide")
    assert (len(topic["partitions"]), topic["partitions_total"]) == (50, 120)
    assert "50 of 120 shown." in console_html(console, "/topics/wide")
    cluster = console_json(console, "/api/cluster")
    assert len(cluster["partitions"]) == 50 and cluster["partitions_total"] == 120


def test_console_without_sasl_shows_what_anonymous_may_see_under_an_authorizer(start_broker):
    """No SASL listener: no login; the viewer is User:ANONYMOUS, as a PLAINTEXT client."""
    broker = start_broker({"doze.console.listener": "127.0.0.1:0", "authorizer.class.name": doze.STANDARD_AUTHORIZER,
                           "super.users": "User:admin"})
    port = broker.console.port
    broker.run_in_loop(lambda: doze.run_steps(broker.logs.create_topic("hidden", 1, {})))
    assert console_json(broker, "/api/topics")["topics"] == []
    for path in ("/topics/hidden", "/topics/hidden/0", "/topics/nosuch", "/txn?id=x", "/group?id=g"):
        assert http_get(port, path)[0] == 403, path
    assert console_json(broker, "/api/security")["allowed"] is False
    assert http_get(port, "/login")[0] == 404 and http_get(port, "/apis")[0] == 200
    broker.run_in_loop(lambda: broker.authorizer.add([acl(doze.ResourceType.TOPIC, "hidden", doze.Op.READ,
                                                          principal="User:ANONYMOUS", host="127.0.0.1")]))
    assert [t["name"] for t in console_json(broker, "/api/topics")["topics"]] == ["hidden"]
    assert http_get(port, "/topics/hidden/0")[0] == 200


def test_console_shows_each_user_what_its_acls_let_it_see(sasl_console):
    broker, port = sasl_console, sasl_console.console.port
    acl_scene(broker)
    alice = session_cookie(port, "alice", "alice-secret")
    admin = session_cookie(port, "admin", "admin-secret")

    def seen(cookie):
        cluster = console_json_as(port, "/api/cluster", cookie)
        return ([t["transactional_id"] for t in cluster["transactions"]],
                sorted({p["topic"] for p in cluster["producers"]}), sorted({p["topic"] for p in cluster["partitions"]}),
                [e.get("transactional_id") for e in cluster["recent_events"]],
                [t["name"] for t in console_json_as(port, "/api/topics", cookie)["topics"]],
                [g["group_id"] for g in console_json_as(port, "/api/groups", cookie)["groups"]])
    txns, producers, partitions, events, topics, groups = seen(alice)
    assert (txns, producers, partitions, topics, groups) == (["tx-pub"], ["pub"], ["desc", "pub"], ["desc", "pub"],
                                                             ["g-pub"])
    [desc] = [p for p in console_json_as(port, "/api/cluster", alice)["partitions"] if p["topic"] == "desc"]
    assert desc["held_back_by"] == {"producer_id": None, "producer_epoch": None, "transactional_id": None,
                                    "since_offset": 0}                           # no READ: no producer shown
    rows = {t["name"]: t for t in console_json_as(port, "/api/topics", alice)["topics"]}
    assert (rows["pub"]["records"], rows["pub"]["markers"]) == (1, 1) and "bytes" not in rows["pub"]
    assert not {"records", "markers", "bytes"} & set(rows["desc"])            # DESCRIBE only: offsets, no counts
    assert rows["desc"]["offsets"] == 1
    admin_rows = {t["name"]: t for t in console_json_as(port, "/api/topics", admin)["topics"]}
    assert admin_rows["desc"]["records"] == 1 and admin_rows["desc"]["bytes"] > 0
    assert console_json_as(port, "/api/cluster", alice)["broker"]["data_dir"] is None
    assert console_json_as(port, "/api/cluster", admin)["broker"]["data_dir"] == broker.config.data_dir
    assert events and set(events) == {"tx-pub"}
    txns, producers, partitions, events, topics, groups = seen(admin)
    assert (txns, producers, partitions, groups) == (["tx-open", "tx-pub", "tx-secret"], ["desc", "pub", "secret"],
                                                     ["desc", "pub", "secret"], ["g-pub", "g-secret"])
    assert {"pub", "secret"} <= set(topics) and set(events) == {"tx-open", "tx-pub", "tx-secret"}
    for path, status in [("/topics/secret", 403), ("/topics/secret/0", 403), ("/topics/nosuch", 403),
                         ("/txn?id=tx-secret", 403), ("/txn?id=nosuch", 403), ("/group?id=g-secret", 403),
                         ("/topics/pub/0", 200), ("/txn?id=tx-pub", 200), ("/group?id=g-pub", 200)]:
        assert http_get(port, path, headers={"Cookie": alice})[0] == status, path
        assert http_get(port, path, headers={"Cookie": admin})[0] in (200, 404), path
    records = console_json_as(port, "/api/topics/pub/0", alice)["items"]
    assert [r["value_text"] for r in records if r["kind"] == "record"] == ["pub-value"]
    assert console_json_as(port, "/api/topics/pub", alice)["configs"] is None          # no DESCRIBE_CONFIGS
    assert console_json_as(port, "/api/topics/pub", admin)["configs"]
    assert console_json_as(port, "/api/security", alice) == {"allowed": False, "viewer": {
        "user": "alice", "principal": "User:alice"}}
    security = console_json_as(port, "/api/security", admin)
    assert security["allowed"] and security["super_users"] == ["User:admin"] and security["acls_total"] == 4
    assert {(a["resource_type"], a["name"], a["operation"], a["permission"]) for a in security["acls"]} == {
        ("TOPIC", "pub", "READ", "ALLOW"), ("TOPIC", "desc", "DESCRIBE", "ALLOW"),
        ("TRANSACTIONAL_ID", "tx-pub", "DESCRIBE", "ALLOW"),
        ("GROUP", "g-pub", "DESCRIBE", "ALLOW")}
    assert "ACLs and users" in http_get(port, "/security", headers={"Cookie": admin})[2].decode()


def test_console_times_steps_to_the_millisecond_with_the_time_between_them(start_broker):
    """The Transaction page's steps: each transition and marker with its time
    to the millisecond, the time since the step before, in the journal's
    order (PrepareCommit, the markers, CompleteCommit: in one millisecond)."""
    clock = FakeClock(1_700_000_000.237)                           # 2023-11-14 22:13:20.237 UTC
    broker = start_broker({"doze.console.listener": "127.0.0.1:0"}, clock=clock)
    with RawClient(broker.port) as c:
        c.create_topic("orders", 2)
        t = Txn(c, "tx-ms")
        clock.advance(12)
        t.add(("orders", 0), ("orders", 1))
        t.produce("orders", 0, [b"a"])
        t.produce("orders", 1, [b"b"])
        clock.advance(400)
        assert t.end(commit=True) == 0
        d = console_json(broker, "/api/txn?id=tx-ms")
        page = console_html(broker, "/txn?id=tx-ms")
        cluster = console_html(broker, "/")
    steps = [(e["kind"], e.get("to_state") or e.get("topic") + "-" + str(e["partition"]), e["elapsed_ms"])
             for e in d["timeline"]]
    assert steps == [("txn", "Empty", None), ("txn", "Ongoing", 12), ("txn", "PrepareCommit", 400),
                     ("marker", "orders-0", 0), ("marker", "orders-1", 0), ("txn", "CompleteCommit", 0)]
    assert [e["id"] for e in d["timeline"]] == sorted(e["id"] for e in d["timeline"])
    assert [e["at_ms"] for e in d["timeline"]] == [1_700_000_000_237] + [1_700_000_000_249] + [1_700_000_000_649] * 4
    assert '<time title="2023-11-14 22:13:20.237 UTC" class="clock" datetime="2023-11-14T22:13:20.237Z">' \
           '22:13:20.237 UTC</time>' in page
    assert re.search(r"<td class=\"num\">\+12 ms</td><td>Empty \u2192 <span class=\"state s-Ongoing\">", page)
    assert re.search(r"\+400 ms</td><td>Ongoing \u2192 .*?\+0 ms</td><td>COMMIT marker at orders-0 offset 1 "
                     r".*?\+0 ms</td><td>COMMIT marker at orders-1 offset 1 .*?\+0 ms</td><td>PrepareCommit", page)
    assert "22:13:20.649 UTC</time></td><td>marker</td>" in cluster


def test_console_group_lag_counts_offsets_and_the_records_still_to_read(console, monkeypatch):
    """A group at offset 0 of a partition holding 2 aborted records, 1
    committed record and 3 markers: 6 offsets behind, 1 record to read; the
    counting stops where its bound says, and the page says "at least"."""
    with RawClient(console.port) as c:
        c.create_topic("lagged", 1)
        for commit, value in ((False, b"gone-1"), (False, b"gone-2"), (True, b"kept")):
            assert Txn(c, "tx-lag").whole("lagged", 0, [value], commit) == 0
        assert commit_offsets(c, "g-lag", {("lagged", 0): 0}) == {("lagged", 0): 0}
        assert visible_values(c, "lagged", 0) == [b"kept"]
        g = console_json(console, "/api/group?id=g-lag")
        [row] = console_json(console, "/api/groups")["groups"]
        page = console_html(console, "/group?id=g-lag")
        listing = console_html(console, "/groups")
        monkeypatch.setattr(doze, "CONSOLE_LAG_BATCHES", 3)            # gone-1, ABORT, gone-2: then stop
        cut_short = console_json(console, "/api/group?id=g-lag")["offsets"][0]
        cut_page = console_html(console, "/group?id=g-lag")
    [o] = g["offsets"]
    assert (o["lag"], o["lag_to_lso"], o["records_to_read"], o["records_to_read_complete"]) == (6, 6, 1, True)
    assert (row["lag"], row["records_to_read"], row["records_to_read_complete"]) == (6, 1, True)
    assert "Offsets behind" in page and "Records to read" in page and "Records behind" not in listing
    assert re.search(r'<td class="num">6</td><td class="num">6</td><td class="num">1</td>', page)
    assert (cut_short["records_to_read"], cut_short["records_to_read_complete"]) == (0, False)
    assert ">at least 0</span>" in cut_page


def test_console_records_to_read_skip_aborted_records_from_a_committed_offset_inside_a_transaction():
    """The count a read_committed consumer gets from a start inside an aborted
    transaction and up to an LSO below the end: by batch headers only."""
    class Log:
        def __init__(self, heads):
            self.heads = heads

        def batch_heads(self, start):                       # from the batch holding `start`, as PartitionLog's
            return ((base, head) for base, head, last in self.heads if last >= start)

    def head(base, pid, count=1, transactional=True, control=None):
        batch = doze.build_control_batch(pid, 0, control == "commit", 0) if control else \
            make_batch([b"v"] * count, producer_id=pid, producer_epoch=0, base_sequence=0,
                       attributes=doze.ATTR_TRANSACTIONAL if transactional else 0)
        batch = bytearray(batch)
        struct.pack_into(">q", batch, 0, base)
        return base, bytes(batch[:80]), base + (1 if control else count) - 1

    class Table:
        @staticmethod
        def aborted_between(start, upper):
            return [(7, 2)]                                 # producer 7 aborted from offset 2 (its ABORT at 5)
    log = Log([head(0, 5, 2), head(2, 7, 2), head(4, -1, 1, transactional=False), head(5, 7, control="abort"),
               head(6, 5, control="commit"), head(7, 8, 3)])
    assert doze.records_to_read(log, Table, 7, 0, 100) == (2 + 1, 5, True)       # 0-1, 4; stops at the LSO 7
    assert doze.records_to_read(log, Table, 7, 3, 100) == (1, 4, True)           # from inside the aborted one
    assert doze.records_to_read(log, Table, 10, 1, 100) == (1 + 1 + 3, 6, True)  # 1, 4, 7-9
    assert doze.records_to_read(log, Table, 10, 0, 2) == (2, 2, False)           # the bound: 0-1, (2-3 aborted)


def test_console_shows_topic_ids_as_kafkas_tools_print_them(console):
    with RawClient(console.port) as c:
        created = c.call(ApiKey.CREATE_TOPICS, 7, topics=[Msg(name="ids", num_partitions=1, replication_factor=-1,
                                                               assignments=[], configs=[])],
                         timeout_ms=5000, validate_only=False).topics[0]
        d = console_json(console, "/api/topics/ids")
        page = console_html(console, "/topics/ids")
    assert created.error_code == 0 and created.topic_id != bytes(16)
    assert d["topic_id"] == base64.urlsafe_b64encode(created.topic_id).decode().rstrip("=")   # Uuid.toString
    assert re.fullmatch(r"[A-Za-z0-9_-]{22}", d["topic_id"]) and f"<code>{d['topic_id']}</code>" in page
    cluster_id = console_json(console, "/api/cluster")["broker"]["cluster_id"]
    assert re.fullmatch(r"[A-Za-z0-9_-]{22}", cluster_id)                                  # the same form


def test_console_shows_a_compacted_partitions_dirty_section_and_the_cleaners_last_pass(start_broker):
    broker = start_broker({"doze.console.listener": "127.0.0.1:0", "log.cleaner.backoff.ms": 50})
    with RawClient(broker.port) as c:
        c.create_topic("table", 1, cleanup_policy="compact", min_cleanable_dirty_ratio="0.0", segment_ms=100)
        for value in (b"old", b"new"):
            assert c.produce("table", 0, make_batch([value], keys=[b"k"])).error_code == 0
            time.sleep(0.15)
        assert c.produce("table", 0, make_batch([b"x"], keys=[b"x"])).error_code == 0
        wait_until(lambda: (console_json(broker, "/api/topics/table")["compaction"][0]["last_run"] or {})
                   .get("records_removed"))
        d = console_json(broker, "/api/topics/table")
        page = console_html(broker, "/topics/table")
        plain = (c.create_topic("plain", 1), console_json(broker, "/api/topics/plain"))[1]
    [part] = d["compaction"]
    assert part["last_run"]["records_removed"] >= 1 and part["first_dirty_offset"] >= 1
    assert "Compaction: the dirty section" in page and "Records removed" in page
    assert plain["compaction"] is None


def test_console_shows_each_transactions_version_and_how_its_epoch_moved(console):
    """Transaction version 2 on the transaction's page: which version began and
    ended it, and each step's epoch -- 0 -> 1 where EndTxn v5 moved it."""
    with RawClient(console.port) as c:
        c.create_topic("v2", 1)
        txn = Txn(c, "tx-v2", version=5)
        assert txn.produce("v2", 0, [b"a"], version=12).error_code == 0
        assert txn.end_answer(True).producer_epoch == 1
        classic = Txn(c, "tx-v1")
        classic.whole("v2", 0, [b"b"], commit=True)
        d, page = console_json(console, "/api/txn?id=tx-v2"), console_html(console, "/txn?id=tx-v2")
        plain = console_html(console, "/txn?id=tx-v1")
    assert (d["begun_version"], d["ended_version"]) == (2, 2)
    assert "began with version 2 (KIP-890: a new epoch at each end)" in page and "0 \u2192 1" in page
    assert "transaction version 2" in page                               # its steps, as the trace says them
    assert "began with version 1 (classic)" in plain and "transaction version 2" not in plain


def test_console_draws_the_transaction_state_machine_with_its_path(console):
    """Every transition Kafka allows drawn once; the current state lit; the
    transitions this transaction took marked; SVG and classes only (the CSP
    refuses a style attribute)."""
    drawn = set(doze.MACHINE_EDGES)
    assert drawn == {(p.value, s.value) for s, ps in doze.VALID_PREVIOUS.items() for p in ps}
    assert set(doze.MACHINE_STATES) == {s.value for s in doze.TxnState}
    with RawClient(console.port) as c:
        c.create_topic("orders", 1)
        zombie = Txn(c, "tx-drawn")
        zombie.add(("orders", 0))
        zombie.produce("orders", 0, [b"z"])
        Txn(c, "tx-drawn")                                          # fenced: its transaction aborted
        d = console_json(console, "/api/txn?id=tx-drawn")
        page = console_html(console, "/txn?id=tx-drawn")
    taken = {(t["from"], t["to"]) for t in d["transitions_taken"]}
    assert taken == {("Empty", "Empty"), ("Empty", "Ongoing"), ("Ongoing", "PrepareAbort"),
                     ("PrepareAbort", "CompleteAbort"), ("CompleteAbort", "Empty")}
    svg = re.search(r'<svg viewBox="0 0 820 350" class="machine" role="img" '
                    r'aria-label="The transaction state machine, now in Empty">(.*?)</svg>', page, re.S).group(1)
    edges = re.findall(r'<path d="[^"]*" class="(edge(?: taken)?)" marker-end="url\(#arrow-(\w+)\)">'
                       r'<title>(\w+) \u2192 (\w+)', svg)
    assert len(edges) == len(drawn) and {(a, b) for _, _, a, b in edges} == drawn
    assert {(a, b) for cls, head, a, b in edges if cls == "edge taken" and head == "taken"} == taken
    assert re.findall(r'<g class="state-box now" data-state="(\w+)" aria-current="step">', svg) == ["Empty"]
    assert set(re.findall(r'<g class="state-box seen" data-state="(\w+)"', svg)) == {
        "Ongoing", "PrepareAbort", "CompleteAbort"}
    assert "style=" not in page and "<li class=\"now\"" not in page


def test_console_cluster_page_keeps_the_last_events_and_the_events_page_has_them_all(console):
    console.run_in_loop(lambda: [console.journal.record("test", n=n) for n in range(130)])
    cluster = console_json(console, "/api/cluster")
    page = console_html(console, "/")
    newest = console_json(console, "/api/events")
    older = console_json(console, f"/api/events?before={newest['older_before']}")
    small = console_json(console, "/api/events?limit=7&before=100")
    events_page = console_html(console, "/events")
    last = console.run_in_loop(lambda: console.journal.last_id)
    assert [e["id"] for e in cluster["recent_events"]] == list(range(last, last - doze.CONSOLE_FEED_EVENTS, -1))
    assert page.count("<td>test</td>") == doze.CONSOLE_FEED_EVENTS and '<a href="/events">All events</a>' in page
    assert [e["id"] for e in newest["events"]] == list(range(last, last - 100, -1))
    assert newest["older_before"] == last - 99 and newest["kept"] == doze.JOURNAL_SIZE
    assert [e["id"] for e in older["events"]] == list(range(last - 100, 0, -1)) and older["older_before"] is None
    assert [e["id"] for e in small["events"]] == list(range(99, 92, -1)) and small["older_before"] == 93
    assert f'<a href="/events?before={last - 99}">Older</a>' in events_page
    assert events_page.count("<td>test</td>") == 100


@pytest.mark.parametrize("path, name", [
    ("/topics/orders/0?offset=abc", "offset"), ("/topics/orders/0?offset=-1", "offset"),
    ("/topics/orders/0?offset=1.5", "offset"), ("/topics/orders/0?timestamp=yesterday", "timestamp"),
    ("/topics/orders/0?timestamp=-5", "timestamp"), ("/topics/orders/0?time=noon", "time"),
    ("/topics/orders/0?time=1969-12-31T23:59", "time"), ("/topics/orders/0?limit=0", "limit"),
    ("/topics/orders/0?limit=501", "limit"), ("/topics/orders/0?view=all", "view"),
    ("/topics/orders/0?format=xml", "format"), ("/topics/orders/0?at=start", "at"),
    ("/topics/orders/abc", "partition"), ("/topics/orders/-1", "partition"), ("/topics/orders/%D9%A1", "partition"),
    ("/events?before=x", "before"), ("/events?limit=-3", "limit")])
def test_console_refuses_a_parameter_it_does_not_take_and_says_what_it_takes(console, path, name):
    with RawClient(console.port) as c:
        c.create_topic("orders", 1)
    status, headers, body = http_get(console.console.port, path)
    assert status == 400 and headers["content-type"] == "text/html; charset=utf-8"
    text = body.decode()
    assert re.search(rf"<p>{name}=[^<]* is not accepted here: {name} takes [^<]+\.</p>", text), text
    assert "This page as JSON" not in text and '<nav aria-label="Pages">' in text
    status, _, body = http_get(console.console.port, "/api" + path)
    assert status == 400 and json.loads(body)["error"].startswith(f"{name}=")


def test_console_browser_takes_a_utc_date_and_time_and_empty_fields(console):
    """The form's datetime-local field (UTC), the URL's timestamp=MS, offset=
    earliest and latest; the fields a form sends empty (left alone) are
    absent, not 0."""
    with RawClient(console.port) as c:
        c.create_topic("timed", 1)
        c.produce("timed", 0, make_batch([b"v%d" % i for i in range(10)],
                                         timestamps=[100_000 + i * 1000 for i in range(10)]))
        by_ms = browse(console, "timed", 0, timestamp=104_000)
        by_time = browse(console, "timed", 0, time="1970-01-01T00:01:44")
        by_time_ms = browse(console, "timed", 0, time="1970-01-01T00:01:43.500", offset=1)
        by_offset = browse(console, "timed", 0, offset=7, time="", timestamp="", view="", format="")
        named = [browse(console, "timed", 0, offset=word)["from"] for word in ("earliest", "latest")]
        page = console_html(console, "/topics/timed/0")
    assert by_ms["from"] == by_time["from"] == by_time_ms["from"] == 4 and by_offset["from"] == 7
    assert named == [0, 10]                                          # as auto.offset.reset names them
    assert by_offset["view"] == "log" and by_offset["format"] == "text"
    assert '<input name="time" type="datetime-local" step="0.001">' in page and "UTC" in page


def test_console_shows_offsets_stand_in_markers_and_the_coordinator(console):
    """What the transaction coordinator tells of a transaction with offsets:
    its coordinator's partition, and the __consumer_offsets "marker" doze
    does not write (offset None: a stand-in, the offsets being in meta.db)."""
    with RawClient(console.port) as c:
        c.create_topic("orders", 1)
        t = Txn(c, "tx-offsets")
        t.add(("orders", 0))
        t.produce("orders", 0, [b"v"])
        assert t.add_offsets("g-std") == 0
        assert t.commit_offsets("g-std", {("orders", 0): 1}) == {("orders", 0): 0}
        assert t.end(commit=True) == 0

    def as_the_coordinator_tells_it():
        meta = console.txns.txns["tx-offsets"]
        meta.history.append(console.journal.record(
            "txn", transactional_id="tx-offsets", from_state="CompleteCommit", to_state="CompleteCommit",
            cause="test", producer_id=t.producer_id, producer_epoch=t.epoch, coordinator="__transaction_state-23",
            partitions=["orders-0", "__consumer_offsets-44"], partition_count=2))
        console.journal.record("marker", transactional_id="tx-offsets", topic="__consumer_offsets", partition=44,
                               offset=None, control="COMMIT", producer_id=t.producer_id, producer_epoch=t.epoch,
                               stand_in="offsets committed in meta.db; no marker written", group="g-std")
        meta.last_decision["markers"] = {**meta.last_decision["markers"], ("__consumer_offsets", 44): None}
    console.run_in_loop(as_the_coordinator_tells_it)
    d = console_json(console, "/api/txn?id=tx-offsets")
    page = console_html(console, "/txn?id=tx-offsets")
    cluster = console_html(console, "/")
    events = console_html(console, "/events")
    assert d["coordinator"] == "__transaction_state-23"
    assert "<dt>Coordinator</dt><dd><code>__transaction_state-23</code></dd>" in page
    stand_in = "COMMIT at __consumer_offsets-44: offsets committed in meta.db; no marker written (group g-std)"
    assert stand_in in page and stand_in in cluster and stand_in in events
    assert {"topic": "__consumer_offsets", "partition": 44, "offset": None} in d["last_decision"]["markers"]
    assert re.search(r"<th scope=\"row\"><a [^>]*>__consumer_offsets-44</a></th><td class=\"num\">COMMIT at "
                     r"__consumer_offsets-44: no marker written", page)


###############################################################################
# 20. CONSOLE: HTTP, LOGIN AND ITS LISTENER -- one request a connection, on the loop
###############################################################################

def http_raw(port, data, wait_s=SOCKET_TIMEOUT_S):
    """Send bytes as they are; -> everything the console answers before closing."""
    with socket.create_connection(("127.0.0.1", port), timeout=wait_s) as s:
        if data:
            s.sendall(data)
        out = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                return out
            out += chunk


CONSOLE_CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
               "connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'")


def broker_digest(broker):
    """What a read-only console must leave as it is: meta.db, every log's
    offsets and files, every transaction's and group's state."""
    def snapshot():
        logs = sorted((k, p.log_start_offset, p.high_watermark, [(s.base_offset, s.size) for s in p.segments])
                      for k, p in broker.logs.logs.items())
        txns = sorted((t, m.state.value, m.producer_epoch, m.last_update_ms, sorted(m.partitions))
                      for t, m in broker.txns.txns.items())
        groups = sorted((g, x.state.value, x.generation) for g, x in broker.groups.groups.items())
        return logs, txns, groups, sorted(broker.logs.topics)
    db = sqlite3.connect(f"file:{broker.config.data_dir}/meta.db?mode=ro", uri=True)
    try:
        dump = list(db.iterdump())
    finally:
        db.close()
    return broker.run_in_loop(snapshot), dump


class EventStream:
    """A raw reader of the console's /events stream."""

    def __init__(self, port, last_id=None, rcvbuf=None, cookie=None):
        self.sock = socket.socket()
        if rcvbuf:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        self.sock.settimeout(SOCKET_TIMEOUT_S)
        self.sock.connect(("127.0.0.1", port))
        extra = "Accept: text/event-stream\r\n"                  # as a browser's EventSource asks
        extra += f"Last-Event-ID: {last_id}\r\n" if last_id is not None else ""
        extra += f"Cookie: {cookie}\r\n" if cookie else ""
        self.sock.sendall(f"GET /events HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n{extra}\r\n".encode())
        self.buf = b""
        while b"\r\n\r\n" not in self.buf:
            self.buf += self._recv()
        self.head, self.buf = self.buf.split(b"\r\n\r\n", 1)

    def _recv(self):
        data = self.sock.recv(65536)
        if not data:
            raise EOFError("the console closed the stream")
        return data

    def events(self, count, skip=("offsets",)):
        """The next `count` events as (id, event name, data dict); comments, retry
        and (unless asked) the offsets events skipped."""
        out = []
        while len(out) < count:
            while b"\n\n" not in self.buf:
                self.buf += self._recv()
            block, self.buf = self.buf.split(b"\n\n", 1)
            fields = dict(line.split(": ", 1) for line in block.decode().split("\n") if ": " in line
                          and not line.startswith(":"))
            if "event" in fields and fields["event"] not in skip:
                out.append((int(fields["id"]) if "id" in fields else None, fields["event"],
                            json.loads(fields["data"])))
        return out

    def close(self):
        self.sock.close()


def test_console_is_off_unless_asked(broker):
    assert broker.run_in_loop(lambda: broker.console) is None


def test_console_address_in_use_stops_a_given_setting(start_broker):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        with pytest.raises(OSError, match="doze.console.listener"):
            start_broker({"doze.console.listener": f"127.0.0.1:{taken.getsockname()[1]}"})
    with pytest.raises(ValueError, match="HOST:PORT"):
        start_broker({"doze.console.listener": "nonsense"})


@pytest.mark.parametrize("path,method,host,status", [
    ("/", "GET", None, 200), ("/topics", "GET", None, 200), ("/apis", "GET", None, 200),
    ("/api/cluster", "GET", None, 200), ("/console.css", "GET", None, 200), ("/nothing", "GET", None, 404),
    ("/", "HEAD", None, 200), ("/", "POST", None, 405), ("/api/cluster", "DELETE", None, 405),
    ("/", "GET", "evil.example:80", 421), ("/", "GET", "127.0.0.1", 421)])
def test_console_answers_carry_its_security_headers(console, path, method, host, status):
    got, headers, body = http_get(console.console.port, path, host=host, method=method)
    assert got == status
    assert headers["content-security-policy"] == CONSOLE_CSP
    assert (headers["x-content-type-options"], headers["referrer-policy"], headers["cache-control"]) == (
        "nosniff", "same-origin", "no-store")
    assert not any(h.startswith("access-control-") for h in headers)
    if method == "HEAD":
        assert body == b"" and int(headers["content-length"]) > 0
    if status == 405:
        assert headers["allow"] == "GET, HEAD"


def test_console_answers_only_to_its_own_names(start_broker):
    broker = start_broker({"doze.console.listener": "127.0.0.1:0", "doze.console.hosts": "doze.test, Other:81"})
    port = broker.console.port
    for host in (f"127.0.0.1:{port}", f"localhost:{port}", f"[::1]:{port}", f"LOCALHOST:{port}",
                 f"doze.test:{port}", "other:81"):
        assert http_get(port, "/apis", host=host)[0] == 200, host
    for host in (f"doze.test.evil:{port}", f"127.0.0.2:{port}", "doze.test:80", f"other:{port}", ""):
        assert http_get(port, "/apis", host=host)[0] == 421, host
    assert http_raw(port, b"GET / HTTP/1.0\r\n\r\n").startswith(b"HTTP/1.1 421 ")      # no Host at all
    assert http_raw(port, b"NONSENSE\r\n\r\n").startswith(b"HTTP/1.1 400 ")


def test_console_requests_change_nothing(console):
    """Crawl every link of every page, with every method, twice: the broker's
    state is what it was."""
    with RawClient(console.port) as c:
        txn_scene(c)
        before = broker_digest(console)
        seen, todo = set(), ["/", "/topics", "/apis"]
        while todo:
            path = todo.pop()
            if path in seen:
                continue
            seen.add(path)
            for method in ("HEAD", "POST", "PUT", "DELETE", "PATCH", "GET"):
                status, headers, body = http_get(console.console.port, path, method=method)
                assert status in (200, 404, 405), (path, method, status)
            if headers.get("content-type", "").startswith("text/html"):          # the GET's
                todo += [html.unescape(h) for h in re.findall(r'(?:href|src)="(/[^"]*)"', body.decode())]
        assert {"/topics/orders", "/api/cluster", "/api/topics/orders", "/console.css", "/console.js",
                "/txn?id=tx-done", "/api/txn?id=tx-done", "/topics/orders/0", "/api/topics/orders/0"} <= seen
        assert broker_digest(console) == before


def test_console_limits_head_size_time_and_connections(console, monkeypatch):
    port = console.console.port
    assert http_raw(port, b"GET /" + b"a" * 9000 + b" HTTP/1.1\r\n").startswith(b"HTTP/1.1 431 ")
    monkeypatch.setattr(doze, "CONSOLE_HEAD_TIMEOUT_S", 0.3)
    started = time.monotonic()
    assert http_raw(port, b"GET / HTTP/1.1\r\nHost: x").startswith(b"HTTP/1.1 408 ")   # never ends its head
    assert time.monotonic() - started < 3
    monkeypatch.setattr(doze, "CONSOLE_HEAD_TIMEOUT_S", 30)
    idle = [socket.create_connection(("127.0.0.1", port), timeout=SOCKET_TIMEOUT_S)
            for _ in range(doze.CONSOLE_MAX_CONNECTIONS)]
    try:
        assert wait_until(lambda: console.run_in_loop(lambda: len(console.console.connections))
                          == doze.CONSOLE_MAX_CONNECTIONS)
        assert http_get(port, "/apis")[0] == 503                   # one too many
        with RawClient(console.port) as c:                         # Kafka's clients notice nothing
            c.create_topic("still", 1)
            assert c.produce("still", 0, make_batch([b"v"])).error_code == 0
    finally:
        for s in idle:
            s.close()
    assert wait_until(lambda: http_get(port, "/apis")[0] == 200)


def test_console_sweep_that_fails_is_logged_and_the_broker_serves_on(console, monkeypatch, caplog):
    def broken(*_):
        raise OSError(24, "Too many open files")
    counter = console.run_in_loop(lambda: console.console.counter)
    monkeypatch.setattr(counter, "sweep", broken)
    assert wait_until(lambda: "console: its sweep failed" in caplog.text)
    with RawClient(console.port) as c:                             # the loop lives on
        c.create_topic("alive", 1)
    monkeypatch.undo()
    count, real, swept = caplog.text.count("console: its sweep failed"), counter.sweep, []
    monkeypatch.setattr(counter, "sweep", lambda *a: swept.append(1) or real(*a))
    assert wait_until(lambda: len(swept) >= 2, timeout_s=doze.CONSOLE_SWEEP_S * 5)   # still scheduled
    assert caplog.text.count("console: its sweep failed") == count and http_get(console.console.port, "/apis")[0] == 200


def test_console_event_stream_sends_each_transition_and_marker_as_it_happens(console):
    port = console.console.port
    stream = EventStream(port)
    try:
        assert stream.head.startswith(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream")
        assert b"Content-Security-Policy: default-src 'none'" in stream.head and b"Content-Length" not in stream.head
        with RawClient(console.port) as c:
            c.create_topic("orders", 1)
            t = Txn(c, "tx-live")
            t.add(("orders", 0))
            t.produce("orders", 0, [b"v"])
            assert t.end(commit=True) == 0
        got = stream.events(5)
    finally:
        stream.close()
    assert [(name, d.get("from_state"), d.get("to_state") or d.get("control")) for _, name, d in got] == [
        ("txn", "Empty", "Empty"), ("txn", "Empty", "Ongoing"), ("txn", "Ongoing", "PrepareCommit"),
        ("marker", None, "COMMIT"), ("txn", "PrepareCommit", "CompleteCommit")]
    ids = [i for i, _, _ in got]
    assert ids == sorted(ids) and len(set(ids)) == 5 and all(d["id"] == i for i, _, d in got)
    assert got[3][2]["offset"] == 1 and got[3][2]["transactional_id"] == "tx-live"
    again = EventStream(port, last_id=ids[1])                    # a reconnect gets what it missed
    try:
        assert [i for i, _, _ in again.events(3)] == ids[2:]
    finally:
        again.close()
    console.run_in_loop(lambda: setattr(console.journal, "events", collections.deque(console.journal.events,
                                                                                        maxlen=2)))
    lost = EventStream(port, last_id=ids[0])                     # no longer in the ring: reset
    try:
        assert lost.events(1)[0][1] == "reset"
    finally:
        lost.close()


def test_console_event_stream_says_when_offsets_move(console):
    """Plain produce journals nothing; the stream still hears of it (an
    "offsets" event, no id) within a sweep, so live pages refresh."""
    stream = EventStream(console.console.port)
    try:
        with RawClient(console.port) as c:
            c.create_topic("plain", 1)
            assert c.produce("plain", 0, make_batch([b"x"])).error_code == 0
        [(event_id, name, data)] = stream.events(1, skip=("txn", "marker"))
    finally:
        stream.close()
    assert (event_id, name, data) == (None, "offsets", {})


def test_console_event_streams_are_capped_and_a_slow_one_is_let_go(console, monkeypatch):
    port = console.console.port
    streams = [EventStream(port) for _ in range(doze.CONSOLE_MAX_STREAMS)]
    try:
        assert http_raw(port, f"GET /events HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAccept: text/event-stream\r\n"
                              "\r\n".encode()).startswith(b"HTTP/1.1 503 ")
    finally:
        for s in streams:
            s.close()
    monkeypatch.setattr(doze, "CONSOLE_STREAM_BUFFER", 4096)
    slow = EventStream(port, rcvbuf=2048)                       # reads nothing from here on
    try:
        assert wait_until(lambda: console.run_in_loop(lambda: len(console.console.streams())) == 1)
        for _ in range(200):
            console.run_in_loop(lambda: [console.journal.record("test", padding="x" * 1000) for _ in range(50)])
            if not console.run_in_loop(console.console.streams):
                break
        assert console.run_in_loop(console.console.streams) == []
        assert http_get(port, "/apis")[0] == 200                  # the console serves on
    finally:
        slow.close()


def test_console_asks_for_a_login_checked_against_the_brokers_plain_and_scram_users(sasl_console, caplog):
    broker, port = sasl_console, sasl_console.console.port
    add_scram_user(broker, "carol", "carol-pw", "SCRAM-SHA-512", iterations=8192)
    status, headers, _ = http_get(port, "/topics?view=a")
    assert status == 303 and headers["location"] == "/login?next=%2Ftopics%3Fview%3Da"
    status, _, body = http_get(port, "/api/cluster")
    assert status == 401 and "log in first" in json.loads(body)["error"].lower()
    assert http_get(port, "/events", headers={"Accept": "text/event-stream"})[0] == 401     # the stream
    assert http_get(port, "/events")[0] == 303                                               # the page
    assert [http_get(port, p)[0] for p in ("/apis", "/api/apis", "/console.css", "/console.js")] == [200] * 4
    status, headers, body = http_get(port, "/login?next=/txn%3Fid%3Dx")
    assert status == 200 and "content-security-policy" in headers
    assert 'method="post" action="/login"' in body.decode() and 'value="/txn?id=x"' in body.decode()
    before = broker_digest(broker)
    with caplog.at_level(logging.DEBUG, logger="doze_kafka"):
        status, headers, body = console_login(port, "alice", "wrong")
        assert status == 401 and "Invalid user name or password." in body.decode() and "set-cookie" not in headers
        assert console_login(port, "nobody", "alice-secret")[0] == 401
        status, headers, _ = console_login(port, "alice", "alice-secret")         # PLAIN
        assert status == 303 and headers["location"] == "/topics?x=1"
        cookie = headers["set-cookie"]
        assert re.fullmatch(rf"doze_console_{port}=[\w-]{{40,}}; Path=/; HttpOnly; SameSite=Strict", cookie)
        cookie = cookie.split(";")[0]
        status, _, body = http_get(port, "/", headers={"Cookie": cookie})
        assert status == 200 and "Logged in as <strong>alice</strong>" in body.decode()
        assert console_json_as(port, "/api/cluster", cookie)["viewer"] == {"user": "alice", "principal": "User:alice"}
        status, _, body = console_login(port, "carol", "carol-pw", api=True)     # SCRAM-SHA-512
        token = json.loads(body)["token"]
        scram = f"doze_console_{port}={token}"
        assert console_json_as(port, "/api/topics", scram)["viewer"]["user"] == "carol"
        status, _, body = http_get(port, "/api/topics", headers={"Authorization": f"Bearer {token}"})
        assert status == 200 and json.loads(body)["viewer"]["user"] == "carol"
        assert http_get(port, "/api/topics", headers={"Authorization": f"Bearer {token}x"})[0] == 401
        status, headers, _ = http_get(port, "/logout", method="POST", headers={"Cookie": cookie, **FORM,
                                                                            "Origin": f"http://127.0.0.1:{port}"})
        assert status == 303 and headers["location"] == "/login" and "Max-Age=0" in headers["set-cookie"]
        assert http_get(port, "/", headers={"Cookie": cookie})[0] == 303           # that session is over
        assert http_get(port, "/api/topics", headers={"Cookie": scram})[0] == 200   # not the other
    text = "\n".join(r.getMessage() for r in caplog.records)
    assert "alice-secret" not in text and "carol-pw" not in text and scram.split("=")[1] not in text
    assert "console: alice logged in from 127.0.0.1 (PLAIN)" in text and "console: login of 'alice'" in text
    assert broker_digest(broker) == before                                       # logins change no broker state
    add_scram_user(broker, "carol", "new-pw", "SCRAM-SHA-512")                   # a changed credential ends it
    assert http_get(port, "/api/topics", headers={"Cookie": scram})[0] == 401


def test_console_error_pages_keep_the_login_header_and_link_no_json(sasl_console):
    """An error page is a page like the others: the navigation, who is logged
    in and the Log out button; no "as JSON" link to a twin it does not have."""
    broker, port = sasl_console, sasl_console.console.port
    acl_scene(broker)
    alice = session_cookie(port, "alice", "alice-secret")
    for path, status in (("/nothing", 404), ("/topics/secret/0", 403), ("/topics/pub/0?offset=x", 400),
                         ("/txn?id=nosuch", 403), ("/events?before=0", 400)):
        got, headers, body = http_get(port, path, headers={"Cookie": alice})
        page = body.decode()
        assert got == status and headers["content-type"] == "text/html; charset=utf-8", path
        assert "Logged in as <strong>alice</strong>" in page and 'action="/logout"' in page, path
        assert "This page as JSON" not in page and 'href="/api/"' not in page, path
        assert '<nav aria-label="Pages">' in page and "<footer>read-only</footer>" in page, path


@pytest.mark.parametrize("headers, status", [
    ({"Origin": "http://evil.example"}, 403), ({"Origin": "null"}, 403), ({"Sec-Fetch-Site": "cross-site"}, 403),
    ({"Sec-Fetch-Site": "same-origin"}, 303), ({}, 303)])
def test_console_login_and_logout_refuse_other_origins(sasl_console, headers, status):
    port = sasl_console.console.port
    body = form(user="alice", password="alice-secret")
    assert http_get(port, "/login", method="POST", headers={**FORM, **headers}, body=body)[0] == status
    cookie = session_cookie(sasl_console.console.port, "alice", "alice-secret")
    code = http_get(port, "/logout", method="POST", headers={**headers, "Cookie": cookie})[0]
    assert code == (403 if status == 403 else 303)
    assert http_get(port, "/", headers={"Cookie": cookie})[0] == (200 if status == 403 else 303)


def test_console_login_is_limited_per_address_and_per_second(sasl_console, monkeypatch):
    port = sasl_console.console.port
    monkeypatch.setattr(doze, "CONSOLE_LOGIN_CHECKS_PER_S", 100)
    assert [console_login(port, "alice", "bad")[0] for _ in range(doze.CONSOLE_LOGIN_FAILURES)] == [401] * 5
    status, headers, _ = console_login(port, "alice", "alice-secret")            # the right one, too late
    assert status == 429 and 50 <= int(headers["retry-after"]) <= 61
    assert console_login(port, "alice", "alice-secret", source="127.0.0.2")[0] == 303   # another address
    assert [console_login(port, "admin", "guess", source="127.0.0.4")[0] for _ in range(4)] == [401] * 4
    assert console_login(port, "alice", "alice-secret", source="127.0.0.4")[0] == 303   # a success there ...
    assert console_login(port, "admin", "guess", source="127.0.0.4")[0] == 401
    assert console_login(port, "admin", "guess", source="127.0.0.4")[0] == 429        # ... resets no count
    monkeypatch.setattr(doze, "CONSOLE_LOGIN_CHECKS_PER_S", 2)
    sasl_console.run_in_loop(sasl_console.console.login.checks.clear)           # the last second's, so far
    codes = [console_login(port, "admin", "admin-secret", source="127.0.0.3")[0] for _ in range(3)]
    assert codes[:2] == [303, 303] and codes[2] == 429                           # all addresses: checks a second
    assert wait_until(lambda: console_login(port, "admin", "admin-secret", source="127.0.0.3")[0] == 303)


def test_console_takes_a_small_form_body_only(sasl_console):
    port = sasl_console.console.port
    head = f"POST /login HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
    assert http_raw(port, (head + "Content-Length: 5000\r\n\r\n").encode()).startswith(b"HTTP/1.1 413 ")
    assert http_raw(port, (head + "Transfer-Encoding: chunked\r\n\r\n").encode()).startswith(b"HTTP/1.1 411 ")
    assert http_raw(port, (head + "Content-Length: 1\r\nContent-Length: 2\r\n\r\nab").encode()).startswith(
        b"HTTP/1.1 400 ")
    assert http_raw(port, (head + "Content-Length: -1\r\n\r\n").encode()).startswith(b"HTTP/1.1 400 ")
    assert http_raw(port, (head + "Content-Length: " + "9" * 5000 + "\r\n\r\n").encode()).startswith(b"HTTP/1.1 413 ")
    fields = form(**{f"f{i}": "x" for i in range(9)})
    assert http_raw(port, (head + f"Content-Length: {len(fields)}\r\n\r\n").encode() + fields).startswith(
        b"HTTP/1.1 400 ")
    short = form(user="alice", password="alice-secret", next="/")
    big = form(user="alice", password="alice-secret", next="/" + "a" * (doze.CONSOLE_BODY_MAX - len(short)))
    padded = head + f"Content-Length: {len(big)}\r\nX-Pad: "
    padded += "p" * (doze.CONSOLE_HEAD_MAX - len(padded)) + "\r\n\r\n"           # the largest head and body
    assert len(padded) - 4 == doze.CONSOLE_HEAD_MAX and len(big) == doze.CONSOLE_BODY_MAX
    assert http_raw(port, padded.encode() + big).startswith(b"HTTP/1.1 303 ")
    body = form(user="alice", password="alice-secret")
    with socket.create_connection(("127.0.0.1", port), timeout=SOCKET_TIMEOUT_S) as s:   # a body in pieces
        s.sendall((head + f"Content-Length: {len(body)}\r\n\r\n").encode() + body[:5])
        loop_passes(sasl_console)                               # the first piece read alone
        s.sendall(body[5:])
        assert s.recv(65536).startswith(b"HTTP/1.1 303 ")
    assert http_get(port, "/api/login")[0] == 405 and http_get(port, "/logout")[0] == 405


def test_console_event_streams_carry_only_what_the_user_may_see_and_end_with_the_session(sasl_console):
    broker, port = sasl_console, sasl_console.console.port
    acl_scene(broker)
    alice = session_cookie(port, "alice", "alice-secret")
    stream = EventStream(port, cookie=alice)
    try:
        assert stream.head.startswith(b"HTTP/1.1 200 OK")
        with as_user(broker, "admin") as c:
            for name in ("secret", "pub"):
                t = Txn(c, f"tx-{name}")
                t.add((name, 0))
                t.produce(name, 0, [b"more"])
                assert t.end(commit=True) == 0
        got = stream.events(5, skip=())
        assert {d.get("transactional_id") for _, kind, d in got if kind != "offsets"} == {"tx-pub"}
        assert any(kind == "offsets" for _, kind, _ in got) or stream.events(1, skip=("txn", "marker"))
        http_get(port, "/logout", method="POST", headers={"Cookie": alice})
        with pytest.raises(EOFError):
            for _ in range(50):
                stream.events(1, skip=())
    finally:
        stream.close()


###############################################################################
# 21. THE LOOP -- one selectors loop, its timers, the group commit, the trace; the Broker
###############################################################################

@pytest.fixture
def traced(start_broker, caplog):
    """A broker with doze.trace set; -> (broker, lines()) where lines() is what it traced so far."""
    def start(kinds="txn", ids="", **more):
        caplog.set_level(logging.INFO, logger="doze_kafka.trace")
        broker = start_broker({"doze.trace": kinds, "doze.trace.ids": ids, **more})
        return broker, lambda: [r.getMessage()[13:] for r in caplog.records if r.name == "doze_kafka.trace"]
    return start


def in_order(lines, *patterns):
    """Each pattern matches a line after the previous one's; -> the matched lines."""
    found, i = [], 0
    for pattern in patterns:
        while i < len(lines) and not re.search(pattern, lines[i]):
            i += 1
        assert i < len(lines), f"no line {pattern!r} after {found[-1:] or 'the start'}:\n" + "\n".join(lines)
        found.append(lines[i])
        i += 1
    return found


# --- The protocol trace -------------------------------------------------------------

def test_trace_shows_a_transaction_request_by_request_and_what_the_broker_did(traced):
    broker, lines = traced("txn")
    with RawClient(broker.port, client_id="learner") as c:
        c.create_topic("orders", 2)
        t = Txn(c, "tx-1")
        t.add(("orders", 0), ("orders", 1))
        t.produce("orders", 0, [b"a", b"b"])
        t.produce("orders", 1, [b"c"])
        assert t.add_offsets("g") == 0
        assert t.commit_offsets("g", {("orders", 0): 7}) == {("orders", 0): 0}
        assert t.end(commit=True) == 0
        t.add(("orders", 0))
        t.produce("orders", 0, [b"gone"])
        assert t.end(commit=False) == 0
        assert wait_until(lambda: any("CompleteAbort" in x for x in lines()))
    got = lines()
    pid = t.producer_id
    state = f"__transaction_state-{doze.internal_partition('tx-1', broker.config['transaction.state.log.num.partitions'])}"
    offsets = f"__consumer_offsets-{doze.internal_partition('g', broker.config['offsets.topic.num.partitions'])}"
    kafka = f"; Kafka: a record in {state}; doze: a row in meta\\.db$"
    in_order(got,
             rf"^\u2192 InitProducerId v4 \[learner@127\.0\.0\.1:\d+\] \(tx-1 \u2192 {state}\) transactional_id=tx-1 "
             r"transaction_timeout_ms=60000",
             rf"^\u2022 txn tx-1: Empty \u2192 Empty: InitProducerId \(producer {pid}, epoch -1 \u2192 0\), partitions \[\]{kafka}",
             rf"^\u2190 InitProducerId v4 \[learner@[\d.:]+\] \(tx-1 \u2192 {state}\) error_code=NONE producer_id={pid} "
             r"producer_epoch=0$",
             r"^\u2192 AddPartitionsToTxn v3 .* topics=\[\{name=orders partitions=\[0, 1\]\}\]",
             r"^\u2022 txn tx-1: Empty \u2192 Ongoing: AddPartitionsToTxn .*partitions \[orders-0, orders-1\]",
             rf"^\u2192 Produce v9 .*transactional_id=tx-1 .*index=0 records=\[0-1 pid {pid}/0 seq 0 txn\]",
             r"^\u2022 orders-0: HW 0 \u2192 2, LSO 0 \(held back by an open transaction\), durable$",
             r"^\u2190 Produce v9 .*index=0 base_offset=0",
             rf"^\u2022 txn tx-1: Ongoing \u2192 Ongoing: AddOffsetsToTxn .*partitions \[{offsets}, orders-0, orders-1\]"
             + kafka,
             rf"^\u2192 TxnOffsetCommit v3 \[learner@[\d.:]+\] \(tx-1 \u2192 {state}, g \u2192 {offsets}\) .*group_id=g "
             r".*committed_offset=7",
             r"^\u2192 EndTxn v3 .*committed=True",
             rf"^\u2022 txn tx-1: Ongoing \u2192 PrepareCommit: EndTxn \(commit\).*partitions \[{offsets}, orders-0, "
             r"orders-1\]" + kafka,
             rf"^\u2022 txn tx-1: COMMIT marker at orders-0 offset 2 \(producer {pid}, epoch 0\) appended$",
             r"^\u2022 orders-0: HW 2 \u2192 3, LSO 0 \u2192 3, durable$",
             rf"^\u2022 txn tx-1: COMMIT marker at {offsets} \(producer {pid}, epoch 0\) publishes g's offsets in Kafka; "
             r"doze writes none: g's staged offsets became its committed offsets in meta\.db",
             r"^\u2022 txn tx-1: PrepareCommit \u2192 CompleteCommit: markers durable",
             r"^\u2190 EndTxn v3 .* error_code=NONE$",
             r"^\u2022 txn tx-1: ABORT marker at orders-0 offset 4",
             r"^\u2022 txn tx-1: PrepareAbort \u2192 CompleteAbort")
    assert not [x for x in got if "CreateTopics" in x or "Metadata" in x]        # not a transaction API
    assert all(len(x) <= doze.TRACE_LINE_CHARS + 20 for x in got)


def test_console_trace_and_describe_transactions_list_the_same_partitions(traced):
    """One transaction with a consumer's offsets: the console, the trace and
    DescribeTransactions (what `kafka-transactions describe` sends) all name
    the group's __consumer_offsets partition beside the data partitions."""
    broker, lines = traced("txn")
    offsets = f"__consumer_offsets-{doze.internal_partition('g', broker.config['offsets.topic.num.partitions'])}"
    with RawClient(broker.port) as c:
        c.create_topic("orders", 2)
        t = Txn(c, "tx-1")
        t.add(("orders", 1), ("orders", 0))
        assert t.add_offsets("g") == 0
        described = c.call(ApiKey.DESCRIBE_TRANSACTIONS, 0, transactional_ids=["tx-1"]).transaction_states[0]
        console = broker.run_in_loop(lambda: doze.ConsoleViews(broker, doze.ConsoleViewer(
            None, "User:test", "127.0.0.1")).transaction("tx-1"))
        assert wait_until(lambda: any("AddOffsetsToTxn" in x and "\u2022" in x for x in lines()))
    kafka = sorted(f"{x.topic}-{p}" for x in described.topics for p in x.partitions)
    shown = sorted(f"{p['topic']}-{p['partition']}" for p in console["partitions"])
    traced_line = in_order(lines(), r"^\u2022 txn tx-1: Ongoing \u2192 Ongoing: AddOffsetsToTxn")[0]
    trace = sorted(re.search(r"partitions \[([^\]]*)\]", traced_line).group(1).split(", "))
    assert kafka == shown == trace == sorted([offsets, "orders-0", "orders-1"])


def test_consumer_group_trace_shows_a_partition_revoked_before_it_moves(traced):
    """--trace group: the group's new epochs and each member's reconciliation
    step, so a learner sees t-2 revoked by a before b gets it."""
    broker, lines = traced("group", **{"group.consumer.assignment.interval.ms": 0})
    with RawClient(broker.port) as c:
        c.create_topic("t", 3)
        a = cg_heartbeat(c, "a", 0, ["t"], [])
        b = cg_heartbeat(c, "b", 0, ["t"], [])
        a = cg_heartbeat(c, "a", a.member_epoch)
        cg_heartbeat(c, "a", a.member_epoch, owned=owning(a))
        cg_heartbeat(c, "b", b.member_epoch, owned=[])
        assert wait_until(lambda: any("member b at epoch 3 (stable)" in x for x in lines()))
    in_order(lines(), r"^\u2022 group g: generation 2: Stable, 1 members, protocol uniform, leader -$",
             r"^\u2022 group g: member a at epoch 2 \(stable\): assigned \[t-0, t-1, t-2\]$",
             r"^\u2022 group g: generation 3: Reconciling, 2 members",
             r"^\u2022 group g: member b at epoch 3 \(unreleased\): assigned \[\]$",
             r"^\u2022 group g: member a at epoch 2 \(unrevoked\): assigned \[t-0, t-1\], revoking \[t-2\]$",
             r"^\u2022 group g: member a at epoch 3 \(stable\): assigned \[t-0, t-1\]$",
             r"^\u2022 group g: member b at epoch 3 \(stable\): assigned \[t-2\]$")


def test_trace_filters_by_kind_and_by_id(traced):
    broker, lines = traced("group", ids="g-seen")
    with RawClient(broker.port) as c:
        c.create_topic("orders", 1)
        Txn(c, "tx-1")
        for group in ("g-seen", "g-other"):
            j = join(c, group)
            assert sync(c, group, j.generation_id, j.member_id, {j.member_id: b""}).error_code == 0
        assert wait_until(lambda: any("\u2190 SyncGroup" in x for x in lines()))
    got = lines()
    in_order(got, r"^\u2192 JoinGroup v7 .*group_id=g-seen", r"^\u2190 JoinGroup v7 .*error_code=MEMBER_ID_REQUIRED",
             r"^\u2022 group g-seen: generation 1: CompletingRebalance, 1 members, protocol range",
             r"^\u2190 SyncGroup v5 .*error_code=NONE")
    assert not [x for x in got if "g-other" in x or "InitProducerId" in x or "tx-1" in x]


def test_trace_group_kind_keeps_group_apis_only_and_quotes_what_clients_name(traced):
    broker, lines = traced("group")
    with RawClient(broker.port, client_id="evil\n12:00:00.000 \u2190 EndTxn v3 [x] error_code=NONE\x1b[2J") as c:
        c.create_topic("orders", 1)
        t = Txn(c, "tx\n\u2022 txn forged: Ongoing \u2192 CompleteCommit")
        t.add(("orders", 0))
        assert t.add_offsets("g") == 0
        assert t.commit_offsets("g", {("orders", 0): 3}) == {("orders", 0): 0}
        j = join(c, "g2")
        assert j.error_code == 0
        assert wait_until(lambda: any("\u2190 JoinGroup" in x and "NONE" in x for x in lines()))
    got = lines()
    in_order(got, r"^\u2192 TxnOffsetCommit v3 ", r"^\u2190 TxnOffsetCommit v3 ", r"^\u2192 JoinGroup v7 .*group_id=g2")
    assert not [x for x in got if "InitProducerId" in x or "AddPartitionsToTxn" in x or "txn " in x[:6]]
    assert all("\n" not in x and "\x1b" not in x for x in got)
    assert any('[\"evil\\n12:00:00.000' in x for x in got), got          # the client id quoted, one line


def test_trace_counts_a_topic_made_again_from_its_start(traced):
    broker, lines = traced("all")
    with RawClient(broker.port) as c:
        c.create_topic("again", 1)
        assert c.produce("again", 0, make_batch([b"a", b"b"])).error_code == 0
        assert c.call(ApiKey.DELETE_TOPICS, 4, topic_names=["again"], timeout_ms=5000).responses[0].error_code == 0
        c.create_topic("again", 1)
        assert c.produce("again", 0, make_batch([b"c"])).error_code == 0
    moves = [x for x in lines() if x.startswith("\u2022 again-0: ")]
    assert moves == ["\u2022 again-0: HW 0 \u2192 2, LSO 0 \u2192 2, durable",
                     "\u2022 again-0: HW 0 \u2192 1, LSO 0 \u2192 1, durable"], moves


def test_trace_that_fails_is_said_once_and_the_broker_serves_on(traced, caplog):
    broker, lines = traced("all")

    class Broken(logging.Handler):
        def emit(self, record):
            raise OSError(32, "Broken pipe")           # a closed stdout, say
    broken = Broken()
    doze.trace_log.addHandler(broken)
    try:
        with RawClient(broker.port) as c:
            c.create_topic("orders", 1)
            for _ in range(3):
                assert c.produce("orders", 0, make_batch([b"x"])).error_code == 0
    finally:
        doze.trace_log.removeHandler(broken)
    assert caplog.text.count("the trace failed (it goes on; this is said once)") == 1
    assert broker.thread.is_alive()


def test_trace_all_hides_secrets_and_abbreviates(traced):
    broker, lines = traced("all", **sasl_settings())
    with RawClient(sasl_port(broker), client_id="sasl-client") as c:
        [a] = sasl_authenticate(c, "PLAIN", [plain_token("alice", "alice-secret")])
        assert a.error_code == 0
        c.create_topic("many", 9)
        c.metadata(["many"])
    got = "\n".join(lines())
    assert "alice-secret" not in got and 'auth_bytes="<hidden: 19 bytes>"' in got
    assert re.search(r"\u2192 Metadata v12 \[sasl-client@[\d.:]+\] topics=\[\{name=many\}\]", got)
    assert re.search(r"\u2190 CreateTopics v7 .* configs=\[\{name=cleanup\.policy value=delete .*\} \u2026\+\d+\]", got), got
    assert "partitions=<as cached>" in got                         # Metadata's cached partitions not built for it


def test_trace_is_off_unless_asked_and_refuses_unknown_kinds(start_broker, caplog):
    caplog.set_level(logging.INFO, logger="doze_kafka.trace")
    broker = start_broker()
    with RawClient(broker.port) as c:
        Txn(c, "tx-1")
    assert broker.run_in_loop(lambda: broker.tracer) is None
    assert not [r for r in caplog.records if r.name == "doze_kafka.trace"]
    stop(broker)
    with pytest.raises(ValueError, match="doze.trace: txns: the kinds are txn, group, all"):
        start_broker({"doze.trace": "txns"})


# --- The timers, a bug in an event handler, the Broker's data directory -------------

def test_server_retention_timer_runs_on_the_broker_clock(start_broker):
    clock = FakeClock()
    broker = start_broker({"log.retention.check.interval.ms": 1000}, clock=clock)
    now_ms = int(clock() * 1000)
    with RawClient(broker.port) as c:
        c.create_topic("ret", internal_segment_bytes=80, retention_ms=10_000)
        for i in range(3):
            c.produce("ret", 0, make_batch([b"%d" % i], timestamps=[now_ms]))
        clock.advance(5_000)
        broker.run_in_loop(lambda: None)
        broker.run_in_loop(lambda: None)
        assert c.list_offset("ret", 0, -2).offset == 0
        clock.advance(60_000)
        deadline = time.monotonic() + 5
        while c.list_offset("ret", 0, -2).offset != 3 and time.monotonic() < deadline:
            broker.run_in_loop(lambda: None)
        assert c.list_offset("ret", 0, -2).offset == 3
        assert c.fetch("ret", 0, 0).error_code == ErrorCode.OFFSET_OUT_OF_RANGE


def test_a_timer_that_fails_loses_one_run_and_the_broker_serves_on(start_broker, monkeypatch, caplog):
    """A bug in a periodic chore (here the transaction tick, once) is logged;
    the loop lives, and the chore's next run still comes (the timeout fires)."""
    clock = FakeClock()
    broker = start_broker(clock=clock)
    real, calls = broker.txns.tick, []

    def flaky():
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("a bug")
        return real()
    monkeypatch.setattr(broker.txns, "tick", flaky)
    with RawClient(broker.port) as client:
        client.create_topic("t", 1)
        txn = Txn(client, "tx-t", timeout_ms=1000)
        txn.add(("t", 0))
        clock.advance(200)
        broker.waker.wake()
        assert wait_until(lambda: "a timer (TransactionCoordinator._tick) failed: RuntimeError: a bug" in caplog.text)
        clock.advance(1000)
        broker.waker.wake()
        assert wait_until(lambda: describe_txn(client, "tx-t").transaction_state == "CompleteAbort")
    assert broker.thread.is_alive() and len(calls) > 1


def test_a_bug_in_an_event_handler_closes_that_connection_only(start_broker, monkeypatch, caplog):
    """A handler that raises (a bug, made here on purpose) costs its own client
    the connection, with a log line; the loop, the listeners and the others go on."""
    broker = start_broker(sasl_settings())
    with RawClient(broker.port) as bystander:
        real = doze.SaslSession.__init__
        monkeypatch.setattr(doze.SaslSession, "__init__", lambda *a, **k: 1 / 0)
        with RawClient(sasl_port(broker)) as refused:                   # the accept path
            assert refused.is_closed_by_broker(3)
        monkeypatch.setattr(doze.SaslSession, "__init__", real)
        with RawClient(broker.port) as victim:
            victim.call(ApiKey.API_VERSIONS, 3, **SOFTWARE)
            monkeypatch.setattr(doze.Connection, "process_frames", lambda self: {}["a bug"])
            victim.send(ApiKey.API_VERSIONS, 3, **SOFTWARE)
            assert victim.is_closed_by_broker(3)                        # a connection's own event
            monkeypatch.undo()
        assert bystander.call(ApiKey.API_VERSIONS, 3, **SOFTWARE).error_code == 0
        with RawClient(sasl_port(broker)) as later:
            assert later.call(ApiKey.SASL_HANDSHAKE, 1, mechanism="PLAIN").error_code == 0
    assert "ZeroDivisionError: division by zero" in caplog.text and "KeyError: 'a bug'" in caplog.text
    assert caplog.text.count("a bug in doze") >= 2


def test_disk_one_broker_per_data_directory(start_broker, tmp_path):
    """Verifies Kafka's .lock: a second broker on a data directory in use
    refuses to start (with Kafka's message) and changes nothing; once the
    first stops, the directory can be used again."""
    broker = start_broker()
    with RawClient(broker.port) as c:
        c.create_topic("locked")
        c.produce("locked", 0, make_batch([b"mine"]))
    with pytest.raises(OSError, match="Failed to acquire lock on file .lock in .* another process or thread"):
        doze.Broker(doze.Config(None, data_dir=tmp_path / "data", host="127.0.0.1", port=0))
    with RawClient(broker.port) as c:
        assert c.values("locked", 0) == [(0, b"mine")]
    stop(broker)
    broker = start_broker()
    with RawClient(broker.port) as c:
        assert c.values("locked", 0) == [(0, b"mine")]


def test_trace_shows_an_error_as_the_requests_version_gets_it(traced):
    """An EndTxn v1 of a fenced producer is answered INVALID_PRODUCER_EPOCH (v1
    knows no PRODUCER_FENCED): the trace says what the client got."""
    broker, lines = traced()
    with RawClient(broker.port) as c:
        old = Txn(c, "tx-v1")
        Txn(c, "tx-v1")                                        # fences the first
        assert old.end(True, version=1) == ErrorCode.INVALID_PRODUCER_EPOCH
        assert old.end(True, version=3) == ErrorCode.PRODUCER_FENCED
    assert in_order(lines(), r"\u2190 EndTxn v1 .*error_code=INVALID_PRODUCER_EPOCH",
                    r"\u2190 EndTxn v3 .*error_code=PRODUCER_FENCED")


###############################################################################
# 22. EMBEDDING DOZE -- a broker in your own tests, and a small client
###############################################################################

def test_running_gives_a_fresh_group_its_first_join_at_once_and_the_cli_keeps_kafkas_delay():
    """running() is for tests: a new group's first join is answered at once
    (group.initial.rebalance.delay.ms 0, as Testcontainers and EmbeddedKafka
    set it); a setting given wins; the command line keeps Kafka's 3 s."""
    with doze.running() as broker:
        assert broker.config["group.initial.rebalance.delay.ms"] == 0
        with RawClient(broker.port) as c:
            t0 = time.perf_counter()
            assert join(c, "fresh").error_code == 0
            assert time.perf_counter() - t0 < 1.0
    with doze.running({"group.initial.rebalance.delay.ms": 50}) as broker:
        assert broker.config["group.initial.rebalance.delay.ms"] == 50
    assert doze.Config(None)["group.initial.rebalance.delay.ms"] == 3000


def test_embedded_restart_keeps_its_port_data_and_an_open_transaction():
    """restart("kill") in one call, on the same port and data: an open
    transaction survives and commits, as after a real kill -9."""
    with doze.running() as broker:
        port = broker.port
        with RawClient(broker.port) as c:
            c.create_topic("rk", 1)
            txn = Txn(c, "tx-rk")
            txn.add(("rk", 0))
            assert txn.produce("rk", 0, [b"before"]).error_code == 0
        broker.restart("kill")
        assert broker.port == port
        assert broker.transaction("tx-rk")["transaction_state"] == "Ongoing"
        with RawClient(broker.port) as c:
            txn.c = c
            assert txn.end(True) == 0
        assert broker.wait_until(lambda b: [r["value"] for r in b.records("rk", view="committed")] == [b"before"])
        broker.restart("clean")
        assert broker.offsets("rk") == {"log_start_offset": 0, "last_stable_offset": 2, "high_watermark": 2}
        with pytest.raises(ValueError, match="FaultyDisk"):
            broker.restart("power_cut")
        with pytest.raises(ValueError, match="one of clean, kill, power_cut"):
            broker.restart("gently")


def test_embedded_a_power_cut_keeps_what_was_acknowledged_and_only_that():
    with doze.running(disk=doze.FaultyDisk()) as broker:
        with RawClient(broker.port) as c:
            c.create_topic("pw", 1)
            assert c.produce("pw", 0, make_batch([b"acked"])).error_code == 0
            c.produce("pw", 0, make_batch([b"fire and forget"]), acks=0)
        broker.restart("power_cut")
        assert [r["value"] for r in broker.records("pw")][:1] == [b"acked"]
        with RawClient(broker.port) as c:
            assert c.produce("pw", 0, make_batch([b"after"])).error_code == 0


def test_embedded_a_power_cut_timed_by_the_test_and_the_power_back_on():
    """cut_after(n): the power goes out at the n-th change from now; after
    restart("power_cut") it is on again (later changes succeed)."""
    with doze.running(disk=doze.FaultyDisk()) as broker:
        with RawClient(broker.port) as c:
            c.create_topic("cut", 1)
            assert c.produce("cut", 0, make_batch([b"durable"])).error_code == 0
            broker.disk.cut_after(1)                                     # the next write
            assert c.produce("cut", 0, make_batch([b"lost"])).error_code == ErrorCode.KAFKA_STORAGE_ERROR
        broker.restart("power_cut")
        assert [r["value"] for r in broker.records("cut")] == [b"durable"]
        with RawClient(broker.port) as c:
            assert c.produce("cut", 0, make_batch([b"after"])).error_code == 0


def test_embedded_the_clock_moves_a_transaction_to_its_timeout_and_fences_its_producer():
    with doze.running() as broker:
        with RawClient(broker.port) as c:
            c.create_topic("tt", 1)
            txn = Txn(c, "tx-tt", timeout_ms=60_000)
            txn.add(("tt", 0))
            txn.produce("tt", 0, [b"abandoned"])
            assert broker.offsets("tt")["last_stable_offset"] == 0
            broker.advance(61_000)
            assert broker.transaction("tx-tt")["transaction_state"] == "CompleteAbort"
            assert broker.offsets("tt")["last_stable_offset"] == 2
            assert txn.end(True) == ErrorCode.PRODUCER_FENCED


def test_embedded_shows_records_by_view_transactions_producers_and_committed_offsets():
    with doze.running() as broker:
        with RawClient(broker.port) as c:
            c.create_topic("iv", 1)
            txn = Txn(c, "tx-iv")
            assert txn.whole("iv", 0, [b"gone"], commit=False) == 0
            txn.add(("iv", 0))
            txn.produce("iv", 0, [b"open"])
            commit_offsets(c, "readers", {("iv", 0): 7})
        broker.settle()
        assert [r["value"] for r in broker.records("iv", view="uncommitted")] == [b"gone", b"open"]
        assert [r["value"] for r in broker.records("iv", view="committed")] == []
        log = broker.records("iv", view="log")
        assert [r.get("control") for r in log] == [None, "ABORT", None]
        assert log[0]["txn_status"] == "aborted" and log[2]["txn_status"] == "pending"
        [row] = broker.transactions()
        assert (row["transactional_id"], row["transaction_state"], row["partitions"]) == \
            ("tx-iv", "Ongoing", [{"topic": "iv", "partition": 0}])
        [producer] = broker.producers("iv", 0)
        assert producer["producer_id"] == txn.producer_id
        assert broker.committed("readers") == {("iv", 0): 7} and broker.committed("nobody") == {}
        with pytest.raises(KeyError):
            broker.records("iv", 5)


def test_embedded_reset_leaves_nothing_of_the_last_test_on_the_same_port():
    with doze.running() as broker:
        port = broker.port
        with RawClient(broker.port) as c:
            c.create_topic("rs", 1)
            Txn(c, "tx-rs")
            commit_offsets(c, "g-rs", {("rs", 0): 1})
        broker.faults.add("Metadata", close=True)
        broker.advance(5_000)
        with open(os.path.join(broker.data_dir, "notes.txt"), "w") as f:
            f.write("not doze's")                   # --data-dir may be someone's directory
        t0 = time.perf_counter()
        broker.reset()
        took = time.perf_counter() - t0
        assert os.listdir(broker.data_dir).count("notes.txt") == 1 and not os.path.isdir(
            os.path.join(broker.data_dir, "rs-0"))
        assert broker.port == port and broker.faults.list() == [] and broker.clock.offset_s == 0
        assert broker.look(lambda v: v.topics())["topics"] == [] and broker.transactions() == []
        assert broker.committed("g-rs") == {}
        with RawClient(broker.port) as c:
            assert c.metadata(None).topics == []
        assert took < 2.0, took                     # milliseconds, in practice (README: "Testing your code")


def test_embedded_a_failing_disk_takes_a_partition_offline_and_no_room_refuses_writes():
    with doze.running(disk=doze.FaultyDisk()) as broker:
        with RawClient(broker.port) as c:
            c.create_topic("dk", 2)
            broker.disk.fail_writes(os.path.join(broker.data_dir, "dk-0"))       # ENOSPC: no room left
            assert c.produce("dk", 0, make_batch([b"x"])).error_code == ErrorCode.KAFKA_STORAGE_ERROR
            broker.disk.heal()
            assert c.produce("dk", 0, make_batch([b"x"])).error_code == 0       # room again
            broker.disk.fail_fsyncs(os.path.join(broker.data_dir, "dk-1"))      # EIO: the disk fails
            assert c.produce("dk", 1, make_batch([b"y"])).error_code == ErrorCode.KAFKA_STORAGE_ERROR
            broker.disk.heal()
            assert c.produce("dk", 1, make_batch([b"y"])).error_code == ErrorCode.KAFKA_STORAGE_ERROR  # offline
            broker.disk.fail_meta_db()
            [topic] = c.create_topics(("dk2", 1, None))
            assert topic.error_code != 0
            broker.disk.heal()
        broker.restart("clean")
        with RawClient(broker.port) as c:
            assert c.produce("dk", 1, make_batch([b"y"])).error_code == 0       # a restart on a sound disk


def test_embedded_pytest_fixtures_from_the_vendored_file_alone(tmp_path):
    """conftest.py's pytest_plugins = ["doze_kafka"] gives doze_broker (one a
    session, reset per test) and fresh_doze_broker; importing doze_kafka
    alone imports no pytest."""
    (tmp_path / "doze_kafka.py").write_bytes(open(doze.__file__, "rb").read())
    (tmp_path / "conftest.py").write_text('pytest_plugins = ["doze_kafka"]\n')
    (tmp_path / "test_app.py").write_text(textwrap.dedent("""\
        import doze_kafka
        from doze_kafka import ApiKey, Msg

        def make(broker, name):
            with doze_kafka.Client(broker.bootstrap) as c:
                return c.call(ApiKey.CREATE_TOPICS, 7, topics=[Msg(name=name, num_partitions=1,
                              replication_factor=-1, configs=[])], timeout_ms=5000, validate_only=False
                              ).topics[0].error_code

        def test_one(doze_broker):
            assert make(doze_broker, "t") == 0

        def test_two_sees_nothing_of_one(doze_broker):
            assert make(doze_broker, "t") == 0

        def test_own(fresh_doze_broker, doze_broker):
            assert fresh_doze_broker.port != doze_broker.port
        """))
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0 and "3 passed" in run.stdout, run.stdout + run.stderr
    run = subprocess.run([sys.executable, "-c", "import doze_kafka, sys; print('pytest' in sys.modules)"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert run.stdout.strip() == "False"


# --- The control endpoint: the same over HTTP, for tests in other languages -----------

class Controlled:
    """python3 doze_kafka.py --control, as a test in another language runs it."""

    def __init__(self, tmp_path, *extra):
        self.proc = subprocess.Popen([sys.executable, doze.__file__, "--port", "0", "--data-dir",
                                      str(tmp_path / "data"), "--console", "127.0.0.1:0",
                                      "--control-token", "t0ken", *extra],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.port = int(re.search(r":(\d+) ", self.proc.stdout.readline()).group(1))
        self.console = int(re.search(r":(\d+)/", self.proc.stdout.readline()).group(1))
        self.banner = self.proc.stdout.readline()

    def call(self, method, path, body=None, token="t0ken", headers=()):
        c = http.client.HTTPConnection("127.0.0.1", self.console, timeout=SOCKET_TIMEOUT_S)
        head = dict(headers, **({"Authorization": f"Bearer {token}"} if token else {}))
        c.request(method, path, body=None if body is None else json.dumps(body), headers=head)
        r = c.getresponse()
        out = (r.status, json.loads(r.read() or b"null"))
        c.close()
        return out

    def after_restart(self, starts):
        """The summary once the broker answers again with `starts` starts."""
        def back():
            try:
                status, summary = self.call("GET", "/control")
                return summary if status == 200 and summary["starts"] == starts else None
            except OSError:
                return None
        assert wait_until(back)
        return back()

    def stop(self):
        self.proc.terminate()
        assert self.proc.wait(10) == 0


def test_control_endpoint_faults_clock_restart_reset_and_state(tmp_path):
    broker = Controlled(tmp_path)
    try:
        assert broker.banner == f"control: http://127.0.0.1:{broker.console}/control (Authorization: Bearer t0ken)\n"
        assert broker.call("POST", "/control/faults", {"api": "EndTxn", "error": "NOT_COORDINATOR", "times": 1}) \
            == (201, {"id": 1})
        with RawClient(broker.port) as c:
            c.create_topic("ctl", 1)
            txn = Txn(c, "tx-ctl", timeout_ms=60_000)
            assert txn.whole("ctl", 0, [b"a"], commit=True) == ErrorCode.NOT_COORDINATOR
            assert txn.end(True) == 0                                          # the client's retry
        status, got = broker.call("GET", "/control/records?topic=ctl&view=committed")
        assert status == 200 and [base64.b64decode(i["value_b64"]) for i in got["items"] if i["kind"] == "record"] \
            == [b"a"]
        assert broker.call("GET", "/control/offsets?topic=ctl")[1] == \
            {"log_start_offset": 0, "last_stable_offset": 2, "high_watermark": 2}
        with RawClient(broker.port) as c:
            txn.c = c
            txn.add(("ctl", 0))
            txn.produce("ctl", 0, [b"open"])
        assert broker.call("POST", "/control/advance", {"ms": 61_000})[1] == {"clock_offset_ms": 61_000}
        assert wait_until(lambda: broker.call("GET", "/control/transactions?id=tx-ctl")[1]["transaction_state"]
                          == "CompleteAbort")
        assert broker.call("POST", "/control/restart", {"how": "kill"}) == (202, {"restarting": "kill", "starts": 2})
        summary = broker.after_restart(2)
        assert summary["bootstrap"] == f"127.0.0.1:{broker.port}"              # the same port
        assert broker.call("GET", "/control/offsets?topic=ctl")[1]["high_watermark"] == 4
        broker.call("POST", "/control/faults", {"api": "Metadata", "close": True})
        assert broker.call("POST", "/control/reset") == (202, {"resetting": True, "starts": 3})
        summary = broker.after_restart(3)
        assert summary["faults"] == [] and summary["clock_offset_ms"] == 0
        assert broker.call("GET", "/control/offsets?topic=ctl") == (404, {"error": "no partition ctl-0"})
    finally:
        broker.stop()


def test_control_endpoint_misuse_gets_a_clear_answer(tmp_path):
    broker = Controlled(tmp_path)
    try:
        assert broker.call("GET", "/control", token=None)[0] == 401
        assert broker.call("GET", "/control", token="guess")[0] == 401
        assert broker.call("POST", "/control/faults/clear", {}, headers={"Origin": "http://elsewhere.example"}) \
            == (403, {"error": "a POST from another origin is refused"})
        status, said = broker.call("POST", "/control/faults", {"api": "EndTxn", "error": "NO_SUCH_ERROR"})
        assert status == 400 and said["error"].startswith("no Kafka error 'NO_SUCH_ERROR': one of")
        status, said = broker.call("POST", "/control/faults", {"api": "Nope", "close": True})
        assert status == 400 and said["error"].startswith("no API 'Nope': one of")
        assert broker.call("POST", "/control/restart", {"how": "gently"})[0] == 400
        assert broker.call("GET", "/control/nothing")[0] == 404
    finally:
        broker.stop()
    with doze.running({"doze.console.listener": "127.0.0.1:0"}) as plain:             # no --control
        c = http.client.HTTPConnection("127.0.0.1", plain.console.port, timeout=SOCKET_TIMEOUT_S)
        c.request("POST", "/control/faults", body="{}")
        r = c.getresponse()
        assert (r.status, json.loads(r.read())) == (404, {"error": "the control endpoint is off: start doze with "
                                                                   "--control"})
    code, line = cli_start_error(tmp_path, "--port", "0", "--data-dir", str(tmp_path / "d2"), "--no-console",
                                 "--control")
    assert code == 1 and "--control is served on the console's listener" in line


###############################################################################
# 23. DEMO -- the transaction protocol step by step, on a broker in this process
###############################################################################

def test_demo_runs_every_step_and_each_outcome_is_kafkas(tmp_path):
    said, ended = [], []
    s = doze.demo(say=said.append, data_dir=str(tmp_path / "demo"), end=lambda: ended.append(len(said)))
    init, idem, txn, commit, abort, fence, timeout, crash, timing, zombie, hanging, late = s
    assert init["error"] == 0 and init["producer_epoch"] == 0 and init["producer_id"] >= 0
    assert init["state_partition"] == doze.internal_partition("demo-tx", 50) and init["coordinator"] == 1
    assert init["asked"] == 2                              # COORDINATOR_NOT_AVAILABLE while the topic is made
    assert (idem["first_offset"], idem["again_offset"], idem["again_error"], idem["copies"]) == (0, 0, 0, 1)
    assert txn["added"] == [0, 0] and (txn["offsets_error"], txn["staged_error"]) == (0, 0)
    offsets_partition = f"__consumer_offsets-{doze.internal_partition('demo-group', 50)}"
    assert txn["described"] == ["demo-orders-0", "demo-orders-1", offsets_partition]     # as Kafka's tool lists it
    assert txn["uncommitted"] == ["once", "t1-a"] and txn["committed"] == ["once"]
    assert (txn["lso"], txn["hw"], txn["group_offset"]) == (1, 2, -1)               # LSO at the open txn's first
    assert commit["error"] == 0 and commit["committed"] == ["once", "t1-a"]
    assert (commit["lso"], commit["hw"], commit["group_offset"], commit["state"]) == (3, 3, 1, "CompleteCommit")
    assert abort["error"] == 0 and abort["aborted"] == [(init["producer_id"], abort["dropped_offset"])]
    assert abort["committed"] == ["once", "t1-a"] and abort["uncommitted"] == ["once", "t1-a", "t2-dropped"]
    assert (fence["producer_id"], fence["old_epoch"], fence["new_epoch"]) == (init["producer_id"], 0, 1)
    assert fence["zombie_add"] == fence["zombie_end"] == ErrorCode.PRODUCER_FENCED and fence["new_commit"] == 0
    assert fence["zombie_produce"] == ErrorCode.INVALID_PRODUCER_EPOCH          # the partition saw the new epoch
    assert (timeout["held_lso"], timeout["state"], timeout["late_end"]) == (4, "CompleteAbort", ErrorCode.PRODUCER_FENCED)
    assert timeout["lso"] == timeout["hw"] == 6 and timeout["committed"] == ["t1-b", "t5-new"]
    assert (crash["before"], crash["after"]) == ("PrepareCommit", "CompleteCommit")
    assert crash["committed_1"] == ["t1-b", "t5-new", "t4-b"]
    assert crash["commit_markers_0"] == 2
    # Kafka's timing: told "committed", and a read_committed Fetch right after does not see it yet.
    assert timing["error"] == 0 and timing["seen_at_once"] is False and timing["seen_later"] is True
    assert timing["lso_at_once"] == timing["hw_at_once"] - 1
    assert (zombie["old_epoch"], zombie["new_epoch"]) == (1, 3) and zombie["committed"] == ["t1-b", "t5-new", "t4-b"]
    assert (zombie["zombie_produce"], zombie["zombie_end"]) == (ErrorCode.INVALID_PRODUCER_EPOCH,
                                                                ErrorCode.PRODUCER_FENCED)
    assert hanging["stuck_lso"] == hanging["stray_offset"] == hanging["open_since"]     # held at the stray batch
    assert (hanging["state"], hanging["partitions"], hanging["abort"]) == ("CompleteCommit", [], 0)
    assert hanging["freed_lso"] == hanging["freed_hw"] > hanging["stuck_lso"]
    assert (late["retried"], late["late"], late["rest"], late["final"]) == (0, 0, ErrorCode.INVALID_TXN_STATE, 0)
    v2 = late["v2"]                                    # transaction version 2: the late EndTxn is fenced
    assert late["upgraded"] == 0 and (v2["retried"], v2["late"], v2["rest"], v2["final"]) == \
        (0, ErrorCode.PRODUCER_FENCED, 0, 0) and v2["epochs"] == (0, 1)
    assert late["committed"][-2:] == ["t12-half", "t12-rest"] and late["lso"] == late["hw"]
    assert "half a transaction, committed" in "\n".join(said) and "the whole transaction, committed once" in \
        "\n".join(said)
    assert "\u2022 feature transaction.version finalized at level 2 (was 1), epoch " in "\n".join(said)
    text = "\n".join(said)
    assert [int(n) for n in re.findall(r"^=== Step (\d+): ", text, re.M)] == list(range(1, 13))
    for rule in ("KIP-98", "KIP-447", "ProducerStateManager", "abortTimedOutTransactions", "TransactionStateManager",
                 "KIP-890", "KAFKA-17754"):
        assert rule in text
    # The coordinator as Kafka finds it, the offsets' partition, the crash and the restart, and the pause.
    assert re.search(r"\u2192 FindCoordinator v4 \[demo@[\d.:]+\] \(demo-tx \u2192 __transaction_state-\d+\)", text)
    assert re.search(rf"\u2192 FindCoordinator v4 \[demo@[\d.:]+\] \(demo-group \u2192 {offsets_partition}\)", text)
    for tid in ("demo-tx", "demo-abandoned", "demo-buggy", "demo-late"):
        part = f"__transaction_state-{doze.internal_partition(tid, 50)}"
        assert f"({tid} \u2192 {part})" in text and f"txn {tid}: Empty \u2192 Empty: InitProducerId" in text
        assert re.search(rf"txn {tid}: .*; Kafka: a record in {part}; doze: a row in meta\.db", text)
    assert re.search(rf"txn demo-tx: COMMIT marker at {offsets_partition} .* publishes demo-group's offsets", text)
    assert "! warning: demo-orders-1: a write was refused" in text and "! error: transaction demo-tx:" in text
    assert "The broker dies now, as under kill -9" in text and "The broker is back on the same data" in text
    assert re.search(r"txn demo-tx: PrepareCommit \(producer 0, epoch 1\).* read back from meta\.db after a "
                     r"restart", text)
    assert re.search(r"EndTxn v3 \[demo-late@[\d.:]+\] .* fault 1 \(a test's\): held 600 ms", text)
    assert ended == [len(said)] and said[-1].startswith("\nThe steps are done")     # the pause comes last
    # The README's walkthrough is this run's story and trace, word for word.
    readme = open(os.path.join(os.path.dirname(doze.__file__), "README.md")).read()
    written = readme.split(doze.WALKTHROUGH_BEGIN + "\n", 1)[1].split(doze.WALKTHROUGH_END, 1)[0]
    ours = doze.walkthrough(said)
    assert "\u2192 EndTxn v3 [demo-new-instance] (demo-tx \u2192 __transaction_state-" in ours
    for kept in ("FindCoordinator", "__consumer_offsets-", "The broker dies now", "read back from meta.db",
                 "! warning:", "The steps are done"):
        assert kept in ours, kept
    assert written == ours, "README.md's walkthrough is not the demo's: python3 doze_kafka.py demo --walkthrough README.md"


###############################################################################
# 24. CLI
###############################################################################

def test_cli_apis_lists_every_handler(capsys):
    assert doze.main(["--apis"]) == 0
    out = capsys.readouterr().out
    for key, (spec, _) in doze.HANDLERS.items():
        assert spec.name in out
    assert "v0-v2 advertised, refused" in out


def cli_start_error(tmp_path, *args):
    """The first line a broker that cannot start prints, and its exit status."""
    proc = subprocess.run([sys.executable, doze.__file__, *args], capture_output=True, text=True, timeout=60,
                          cwd=tmp_path)
    return proc.returncode, proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else ""


def test_cli_errors_say_what_to_do(tmp_path):
    a_file = tmp_path / "a-file"
    a_file.write_text("x")
    code, line = cli_start_error(tmp_path, "--port", "0", "--data-dir", str(a_file))
    assert code == 1 and line == (f"doze_kafka: cannot start: the data directory {a_file} cannot be made: {a_file} "
                                  "is a file, not a directory (--data-dir, or log.dirs, names where doze keeps "
                                  "its logs and meta.db)")
    code, line = cli_start_error(tmp_path, "--port", "0", "--data-dir", str(a_file / "under"))
    assert code == 1 and f"{a_file} is a file, not a directory" in line
    code, line = cli_start_error(tmp_path, "--log-level", "chatty")
    assert code == 2 and "argument --log-level: invalid choice: 'CHATTY'" in line
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        code, line = cli_start_error(tmp_path, "--port", str(port), "--data-dir", str(tmp_path / "d"))
        assert code == 1 and "Address already in use" in line and "--port" in line, line
        code, line = cli_start_error(tmp_path, "--port", "0", "--data-dir", str(tmp_path / "d"),
                                     "--console", f"127.0.0.1:{port}")
        assert code == 1 and line.startswith(f"doze_kafka: cannot start: the console's address 127.0.0.1:{port}: "
                                             "Address already in use") and "--console HOST:PORT" in line, line


def test_cli_a_taken_default_console_address_moves_to_another_port(tmp_path, monkeypatch):
    """The command line's console (127.0.0.1:8092 unless told) moves to a free
    port when that one is taken, and says where; the demo does the same."""
    with socket.create_server(("127.0.0.1", 0)) as taken:
        monkeypatch.setattr(doze, "CONSOLE_CLI_ADDRESS", f"127.0.0.1:{taken.getsockname()[1]}")
        config = doze.Config({}, data_dir=str(tmp_path / "d"), port=0)
        config.set_default("doze.console.listener", doze.CONSOLE_CLI_ADDRESS)
        broker = doze.Broker(config)
        try:
            assert broker.console is not None and broker.console.port != taken.getsockname()[1]
        finally:
            broker.stop()
            broker.serve_forever()                      # runs the stop at once: closes everything


def test_cli_bad_flag_exits_non_zero(capsys):
    with pytest.raises(SystemExit) as e:
        doze.main(["--no-such-flag"])
    assert e.value.code != 0


def test_cli_bad_override_exits_non_zero(capsys, tmp_path):
    with pytest.raises(SystemExit) as e:
        doze.main(["--data-dir", str(tmp_path), "--override", "no-equals-sign"])
    assert e.value.code != 0


def test_sasl_add_scram_on_the_command_line(tmp_path, capsys):
    user, mechanism, credential = doze.parse_add_scram("SCRAM-SHA-512=[name=dave,password=\"p,w=d\",iterations=8192]")
    assert (user, mechanism, credential[3]) == ("dave", "SCRAM-SHA-512", 8192)
    salt, stored, server, iterations = credential
    assert (stored, server) == doze.scram_keys(mechanism, doze.scram_salted_password(mechanism, "p,w=d", salt, 8192))
    with pytest.raises(ValueError, match="iterations must be"):
        doze.parse_add_scram("SCRAM-SHA-256=[name=x,password=y,iterations=100]")


def test_cli_serves_the_console_and_prints_its_url(tmp_path):
    """python3 doze_kafka.py: the console on by default (here moved to port 0)."""
    proc = subprocess.Popen([sys.executable, doze.__file__, "--port", "0", "--data-dir", str(tmp_path),
                             "--override", "doze.console.listener=127.0.0.1:0"],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        proc.stdout.readline()
        line = proc.stdout.readline()
        m = re.fullmatch(r"console: http://127\.0\.0\.1:(\d+)/\n", line)
        assert m, line
        assert http_get(int(m.group(1)), "/apis")[0] == 200
    finally:
        proc.terminate()
        proc.wait(10)


def test_cli_demo_runs_without_pauses(tmp_path):
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    r = subprocess.run([sys.executable, doze.__file__, "demo", "--no-pause", "--console", "127.0.0.1:0"],
                       capture_output=True, text=True, timeout=60, cwd=tmp_path, env=dict(os.environ, TMPDIR=str(scratch)))
    assert r.returncode == 0, r.stderr                      # its restarts keep the console's address
    assert re.search(r"^The console: http://127\.0\.0\.1:\d+/ ", r.stdout, re.M)
    assert "=== Step 8: A crash between the decision and the markers ===" in r.stdout
    assert re.search(r"\u2192 EndTxn v3 \[demo-new-instance@[\d.:]+\] .*committed=True", r.stdout)   # the trace
    assert "! error: transaction demo-tx: the COMMIT marker for demo-orders-1 could not be written (the demo's disk " \
        "refuses this write)" in r.stdout and r.stderr == ""                  # among the trace, where it happened
    assert os.listdir(scratch) == [] and os.listdir(tmp_path) == ["tmp"]   # its broker's directory is gone


def test_cli_trace_prints_bare_lines_on_stdout(tmp_path):
    proc = subprocess.Popen([sys.executable, doze.__file__, "--port", "0", "--data-dir", str(tmp_path),
                             "--override", "doze.console.listener=", "--trace", "all", "--trace-ids", "cli-test",
                             "--log-level", "ERROR"],                   # the trace is printed whatever the level
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, bufsize=0)

    def line():                                         # unbuffered, so that select() tells the truth
        out = b""
        while not out.endswith(b"\n"):
            assert select.select([proc.stdout], [], [], SOCKET_TIMEOUT_S)[0], f"no line from --trace: {out!r}"
            out += proc.stdout.read(1)
        return out.decode()
    try:
        port = int(re.search(r"listening on 127\.0\.0\.1:(\d+)", line()).group(1))
        with RawClient(port, client_id="cli-test") as c:
            c.call(ApiKey.API_VERSIONS, 3, client_software_name="t", client_software_version="1")
        lines = [line(), line()]
    finally:
        proc.terminate()
        proc.wait(10)
    assert re.fullmatch(r"\d\d:\d\d:\d\d\.\d{3} \u2192 ApiVersions v3 \[cli-test@127\.0\.0\.1:\d+\] "
                        r"client_software_name=t client_software_version=1\n", lines[0]), lines
    assert re.match(r"\d\d:\d\d:\d\d\.\d{3} \u2190 ApiVersions v3 \[cli-test@[\d.:]+\] error_code=NONE api_keys=\[",
                    lines[1]), lines


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="reads /proc")
def test_cli_the_script_runs_again_as_a_module(tmp_path):
    """python3 doze_kafka.py starts the interpreter again on the file imported
    as a module (the script's syntax tree is not kept for the broker's life),
    with the interpreter's options and the arguments given, in the same
    process (kill and wait work on the pid the caller has), from a copy of
    the file under another name too: `python3 [-P] -m renamed_broker ...`, so
    that `ps` tells a broker apart; a file name -m cannot import (a dash in
    it) runs the same by hand, with -c."""
    copy = tmp_path / "renamed_broker.py"
    copy.write_bytes(open(doze.__file__, "rb").read())
    proc = subprocess.Popen([sys.executable, "-X", "utf8", str(copy), "--port", "0", "--data-dir",
                             str(tmp_path / "d"), "--override", "doze.console.listener="],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert proc.stdout.readline().startswith("doze-kafka ")     # it serves
        with open(f"/proc/{proc.pid}/cmdline", "rb") as f:
            cmdline = f.read().split(b"\0")
        options = [b"-X", b"utf8"] if hasattr(sys, "orig_argv") else []   # Python 3.9 cannot tell
        assert cmdline[1:1 + len(options)] == options, cmdline
        rest = cmdline[1 + len(options):]
        if rest[0] == b"-P":
            rest = rest[1:]
        assert rest[:2] == [b"-m", b"renamed_broker"], cmdline
        assert rest[2:6] == [b"--port", b"0", b"--data-dir", str(tmp_path / "d").encode()]
    finally:
        proc.terminate()
        assert proc.wait(10) == 0
    dashed = tmp_path / "doze-kafka.py"
    dashed.write_bytes(open(doze.__file__, "rb").read())
    proc = subprocess.Popen([sys.executable, str(dashed), "--port", "0", "--data-dir", str(tmp_path / "e"),
                             "--no-console"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert proc.stdout.readline().startswith("doze-kafka ")
        with open(f"/proc/{proc.pid}/cmdline", "rb") as f:
            cmdline = f.read().split(b"\0")
        assert cmdline[1] == b"-c" and str(dashed).encode() in cmdline[2], cmdline
    finally:
        proc.terminate()
        assert proc.wait(10) == 0


def test_cli_under_run_path_the_file_does_not_start_again(capsys):
    """Run by another program (runpy, a profiler, a debugger), the file is not
    the program and is not started again: --apis answers in this process."""
    import runpy
    saved = sys.argv
    sys.argv = [doze.__file__, "--apis"]
    try:
        with pytest.raises(SystemExit) as e:
            runpy.run_path(doze.__file__, run_name="__main__")
    finally:
        sys.argv = saved
    assert e.value.code == 0 and "Produce" in capsys.readouterr().out


###############################################################################
# B. SCENARIOS -- kill -9, restart, torn tails, power cuts
###############################################################################

def _wait_for_state(broker, transactional_id, state):
    """Wait (test thread) until meta.db holds the transaction in `state`."""
    path = os.path.join(broker.config.data_dir, "meta.db")

    def stored():
        db = sqlite3.connect(path)
        try:
            row = db.execute("SELECT state FROM transactions WHERE transactional_id = ?",
                             (transactional_id,)).fetchone()
        finally:
            db.close()
        return row and row[0] == state
    assert wait_until(stored), f"{transactional_id} never reached {state} in meta.db"


def run_workload(broker, files, log_bytes_topics=3):
    """Create topics and produce with acks=-1/1 (plus acks=0 noise) until the
    broker goes away. Returns (acked records {(topic, p): {offset: value}},
    created topics {name: partitions})."""
    acked, created = {}, {}
    try:
        with RawClient(broker.port, timeout=3) as c:
            for t in range(log_bytes_topics):
                name = "pc-%d" % t
                [res] = c.create_topics((name, 2, {"internal.segment.bytes": "400"}))
                if res.error_code == 0:
                    created[name] = 2
                for i in range(40):
                    tp = ("pc-%d" % (i % (t + 1)), i % 2)
                    value = b"%s/%d/%d" % (tp[0].encode(), tp[1], i + 100 * t)
                    if i % 5 == 4:
                        c.produce(*tp, make_batch([value + b"-noise"]), acks=0)
                        continue
                    p = c.produce(*tp, make_batch([value, value + b"+"]), acks=(-1, 1)[i % 2])
                    if p.error_code == 0:
                        acked.setdefault(tp, {}).update({p.base_offset: value,
                                                         p.base_offset + 1: value + b"+"})
    except (EOFError, ConnectionError, socket.timeout):
        pass                                               # the power went out
    return acked, created


def check_nothing_acknowledged_was_lost(broker, acked, created):
    """-> the acknowledged records that are missing (empty when all is well)."""
    missing = []
    with RawClient(broker.port) as c:
        topics = {t.name: len(t.partitions) for t in c.metadata(None).topics}
        for name, partitions in created.items():
            assert topics.get(name) == partitions, f"created topic {name} is gone"
        for (topic, partition), records in acked.items():
            got = dict(c.values(topic, partition)) if topic in topics else {}
            missing += [(topic, partition, o) for o, v in records.items() if got.get(o) != v]
            if records and topic in topics:
                nxt = c.produce(topic, partition, make_batch([b"after the cut"]))
                if nxt.error_code != 0 or nxt.base_offset <= max(records):
                    missing.append((topic, partition, "offset reused", nxt.base_offset))
    return missing


class LyingDisk(doze.FaultyDisk):
    """A disk whose fsync returns without making anything durable."""

    def fsync(self, fd):
        self._change()


# --- Crash at every point ---------------------------------------------------------
# A transactional workload on the doze.FaultyDisk layer numbers every change the
# broker makes (write, fsync, directory fsync, rename, truncate, mkdir, unlink,
# meta.db commit). For each point N the disk dies at N (the broker is stopped
# there), and the broker restarts on what a crash leaves (every write made) or,
# separately, on what a power cut leaves (only what was fsynced). Then every
# invariant is checked against what the clients were told.

class Ledger:
    """What the workload's clients were told, and so may rely on."""

    def __init__(self):
        self.topic_created = False
        self.acked = {}              # (topic, partition) -> {offset: value}: every answered produce
        self.txns = []               # [{"values": {tp: [v]}, "offsets": {tp: o}, "end": None/True/False, "told": bool}]
        self.plain_offset = None     # an OffsetCommit answered
        self.member_offset = None    # ... and one by a group's member, with its generation
        self.idem_sent = []          # (batch, seq, values) of the idempotent producer, in order
        self.idem_acked = {}         # seq -> offset


CP_TOPIC, CP_GROUP, CP_PLAIN_GROUP, CP_MEMBERS = "cp", "cp-group", "cp-plain", "cp-members"


def crash_idempotent(c, ledger):
    """An idempotent producer's two batches, then a plain OffsetCommit."""
    pid, epoch = init_producer_id(c)
    for seq in (0, 2):
        values = [b"idem-%d" % seq, b"idem-%d" % (seq + 1)]
        batch = make_batch(values, producer_id=pid, producer_epoch=epoch, base_sequence=seq)
        ledger.idem_sent.append((batch, seq, values))
        p = c.produce(CP_TOPIC, 1, batch)
        assert p.error_code == 0, p
        ledger.idem_acked[seq] = p.base_offset
        ledger.acked.setdefault((CP_TOPIC, 1), {}).update({p.base_offset: values[0], p.base_offset + 1: values[1]})
    assert commit_offsets(c, CP_PLAIN_GROUP, {(CP_TOPIC, 1): 77}) == {(CP_TOPIC, 1): 0}
    ledger.plain_offset = 77


def crash_group_and_wide_produce(c, ledger):
    """A group's member joins and commits with its generation; then one
    Produce to both partitions (two logs in one group commit)."""
    joined = join(c, CP_MEMBERS)
    assert joined.error_code == 0, joined
    assert sync(c, CP_MEMBERS, joined.generation_id, joined.member_id,
                {joined.member_id: b"assignment"}).error_code == 0
    assert commit_offsets(c, CP_MEMBERS, {(CP_TOPIC, 0): 3}, joined.generation_id,
                          joined.member_id) == {(CP_TOPIC, 0): 0}
    ledger.member_offset = 3
    resp = c.call(ApiKey.PRODUCE, 9, acks=-1, timeout_ms=5000, topic_data=[Msg(name=CP_TOPIC, partition_data=[
        Msg(index=p, records=make_batch([b"wide-%d" % p])) for p in (0, 1)])])
    for part in resp.responses[0].partition_responses:
        assert part.error_code == 0, part
        ledger.acked.setdefault((CP_TOPIC, part.index), {})[part.base_offset] = b"wide-%d" % part.index


def crash_workload(port, ledger, strict=False):
    """Topics, three transactions (committed, aborted, left open), an
    idempotent producer, plain offset commits. Ends where the broker goes away
    (strict: it must not)."""
    try:
        with RawClient(port, timeout=5) as c:
            [res] = c.create_topics((CP_TOPIC, 2, {"internal.segment.bytes": "300"}))
            assert res.error_code == 0, res
            ledger.topic_created = True
            txn = Txn(c, "cp-txn", timeout_ms=600000)
            for n, (commit, tps) in enumerate([(True, [(CP_TOPIC, 0), (CP_TOPIC, 1)]),
                                               (False, [(CP_TOPIC, 0)]),
                                               (True, [(CP_TOPIC, 1), (CP_TOPIC, 0)]),
                                               (None, [(CP_TOPIC, 1)])]):
                t = {"values": {}, "offsets": {}, "end": commit, "told": False}
                ledger.txns.append(t)
                assert set(txn.add(*tps).values()) == {0}
                for tp in tps:
                    values = [b"txn%d-%s-%d-%d" % (n, tp[0].encode(), tp[1], i) for i in range(2)]
                    t["values"][tp] = values
                    part = txn.produce(*tp, values)
                    assert part.error_code == 0, part
                    ledger.acked.setdefault(tp, {}).update({part.base_offset + i: v for i, v in enumerate(values)})
                if commit is None:
                    return True                              # left open: undecided
                assert txn.add_offsets(CP_GROUP) == 0
                t["offsets"] = {(CP_TOPIC, 0): 10 + n}
                assert set(txn.commit_offsets(CP_GROUP, t["offsets"]).values()) == {0}
                assert txn.end(commit) == 0
                t["told"] = True
                if n == 0:
                    crash_idempotent(c, ledger)
                    crash_group_and_wide_produce(c, ledger)
    except (EOFError, ConnectionError, socket.timeout, AssertionError):
        if strict:
            raise
        return False                                          # the disk died: the broker is gone


def crash_idempotent_violations(c, ledger, logs):
    """The idempotent producer retries its last batch, then sends the next:
    one copy of each in the log, no sequence error."""
    if not ledger.idem_sent:
        return []
    bad = []
    batch, seq, values = ledger.idem_sent[-1]
    retry = c.produce(CP_TOPIC, 1, batch)
    if retry.error_code != 0 or seq in ledger.idem_acked and retry.base_offset != ledger.idem_acked[seq]:
        bad.append(f"the idempotent retry of seq {seq} got {retry.error_code} @{retry.base_offset}")
    if seq == 0:
        pid, epoch = header_of(batch).producer_id, header_of(batch).producer_epoch
        nxt = c.produce(CP_TOPIC, 1, make_batch([b"idem-2", b"idem-3"], producer_id=pid,
                                                producer_epoch=epoch, base_sequence=2))
        if nxt.error_code != 0:
            bad.append(f"the idempotent producer's next batch got {nxt.error_code}")
    after = [v for _, v in c.values(CP_TOPIC, 1) if v.startswith(b"idem-")]
    if sorted(after) != sorted(set(after)):
        bad.append(f"idempotent records written twice: {after}")
    return bad


def crash_violations(port, ledger):
    """-> [what is wrong] after a restart, checked against the ledger."""
    bad = []
    with RawClient(port) as c:
        topics = {t.name: t for t in c.metadata([CP_TOPIC], allow_auto_topic_creation=False).topics}
        if not ledger.topic_created:
            return bad
        if topics[CP_TOPIC].error_code != 0 or len(topics[CP_TOPIC].partitions) != 2:
            return ["the answered CreateTopics is gone"]
        tps = [(CP_TOPIC, 0), (CP_TOPIC, 1)]
        logs = {tp: dict(c.values(*tp)) for tp in tps}
        for tp, records in ledger.acked.items():
            bad += [f"acknowledged {tp} @{o} {v!r} reads {logs[tp].get(o)!r}" for o, v in records.items()
                    if logs[tp].get(o) != v]
        bad += crash_idempotent_violations(c, ledger, logs)
        # The application restarts: its InitProducerId aborts what is open, finishes what is decided.
        assert wait_until(lambda: c.call(ApiKey.INIT_PRODUCER_ID, 4, transactional_id="cp-txn",
                                         transaction_timeout_ms=60000).error_code == 0, timeout_s=10)
        for tp in tps:
            if not wait_until(lambda: (lambda p: p.last_stable_offset == p.high_watermark)(
                    fetch_isolated(c, *tp)), timeout_s=5):
                bad.append(f"{tp}: the LSO is stuck below the high watermark")
        visible = {tp: set(visible_values(c, *tp, every_segment=True)) for tp in tps}
        offsets = committed_offsets(c, CP_GROUP, [(CP_TOPIC, 0)])[(CP_TOPIC, 0)][1]
        for n, t in enumerate(ledger.txns):
            shown = {tp: set(vs) <= visible[tp] for tp, vs in t["values"].items()}
            hidden = {tp: not (set(vs) & visible[tp]) for tp, vs in t["values"].items()}
            if t["told"] and t["end"]:
                if not all(shown.values()):
                    bad.append(f"transaction {n}: its commit was answered, its records are not all visible")
            elif t["told"] or t["end"] is None:
                if not all(hidden.values()):
                    bad.append(f"transaction {n}: aborted or undecided, yet read_committed shows its records")
            elif not (all(shown.values()) or all(hidden.values())):
                bad.append(f"transaction {n}: half of it is visible ({shown})")
        committed = [t for t in ledger.txns if t["end"] and t["offsets"] and
                     t["values"] and all(set(vs) <= visible[tp] for tp, vs in t["values"].items())]
        want = committed[-1]["offsets"][(CP_TOPIC, 0)] if committed else -1
        if offsets != want:
            bad.append(f"the group's offset is {offsets}, its committed transactions say {want}")
        if ledger.plain_offset is not None:
            got = committed_offsets(c, CP_PLAIN_GROUP, [(CP_TOPIC, 1)])[(CP_TOPIC, 1)][1]
            if got != ledger.plain_offset:
                bad.append(f"the answered OffsetCommit reads {got}")
        if ledger.member_offset is not None:
            got = committed_offsets(c, CP_MEMBERS, [(CP_TOPIC, 0)])[(CP_TOPIC, 0)][1]
            if got != ledger.member_offset:
                bad.append(f"the member's answered OffsetCommit reads {got}")
    return bad


def _crash_broker(data, files=None, settings=None):
    config = doze.Config(dict({"group.initial.rebalance.delay.ms": 0}, **(settings or {})), data_dir=data,
                         host="127.0.0.1", port=0)
    broker = doze.Broker(config, files=files)
    broker.serve_in_thread("doze-crash")
    return broker


def crash_points(tmp_path, power_cut, points=None, files_class=doze.FaultyDisk, first_failure=False,
                 patch=None):
    """Run the workload once to number its changes, then crash at each (or at
    `points`; first_failure: stop at the first point that fails). power_cut:
    False (a crash), True (files.power_cut()) or "written back" (files.power_cut(written_back=True)).
    patch(broker) changes the broker under test (for negative controls).
    -> (number of points, [(point, its change, what is wrong)])."""
    count, labels = None, None
    failures = []
    n = 0
    while count is None or n <= count:
        data = tmp_path / f"run-{n}"
        holder = []
        files = files_class(data)

        def die():
            holder[0].stop(clean=False)
        files.on_cut = die
        broker = _crash_broker(data, files)
        holder.append(broker)
        if patch:
            broker.run_in_loop(lambda: patch(broker))
        if n:
            files.cut_at = files.changes + n
        before = files.changes
        ledger = Ledger()
        crash_workload(broker.port, ledger, strict=not n)
        broker.stop(clean=False)
        assert broker.stopped.wait(5)
        made = files.labels[before:]
        if not n:
            count, labels = len(made), made
            n = 1 if points is None else points.pop(0)
            continue
        assert made == labels[:n], f"the workload is not deterministic at point {n}: {made[-3:]}"
        if power_cut:
            files.power_cut(written_back=power_cut == "written back")
        broker = _crash_broker(data)
        try:
            failures += [(n, labels[n - 1], why) for why in crash_violations(broker.port, ledger)]
        finally:
            broker.stop(clean=False)
            assert broker.stopped.wait(5)
        import shutil
        shutil.rmtree(data)
        if first_failure and failures:
            break
        if points is not None:
            if not points:
                break
            n = points.pop(0)
        else:
            n += 1
    return count, failures


class SkipsMarkerFsync(doze.FaultyDisk):
    """A doze that forgot to fsync the markers before finishing the commit: an
    fsync right after a marker's write returns without making it durable."""

    def write(self, fd, data):
        super().write(fd, data)
        self.marker_last = len(data) > 22 and bool(data[22] & doze.ATTR_CONTROL)

    def fsync(self, fd):
        if getattr(self, "marker_last", False):
            self._change()
            return
        super().fsync(fd)


class LyingMetaSync(doze.FaultyDisk):
    """A doze whose fsync of meta.db-wal returns without making anything durable."""

    def sync_file(self, path, fallback=None, keep=None):
        self._change(path)


# --- Kill -9 and restart ---------------------------------------------------------------

def test_restart_scenario_kill_keeps_every_acked_record_and_continues_offsets(start_broker):
    broker = start_broker()
    with RawClient(broker.port) as c:
        c.create_topic("k", partitions=2, internal_segment_bytes=300)
        acked = []
        for i in range(20):
            p = c.produce("k", i % 2, make_batch([b"k%d" % i]), acks=(-1, 1)[i % 2])
            assert p.error_code == 0
            acked.append((i % 2, p.base_offset, b"k%d" % i))
    stop(broker, clean=False)
    broker = start_broker()
    with RawClient(broker.port) as c:
        for partition in (0, 1):
            want = [(o, v) for p, o, v in acked if p == partition]
            assert c.values("k", partition) == want
            nxt = c.produce("k", partition, make_batch([b"after"]))
            assert nxt.base_offset == want[-1][0] + 1                 # no offset reused


@pytest.mark.parametrize("torn", ["garbage", "partial batch", "bad crc"])
def test_restart_scenario_torn_last_batch_is_cut_with_a_log_line(start_broker, tmp_path, caplog,
                                                                 torn):
    broker = start_broker()
    with RawClient(broker.port) as c:
        c.create_topic("torn")
        for i in range(3):
            c.produce("torn", 0, make_batch([b"t%d" % i]))
    stop(broker, clean=False)
    segment = tmp_path / "data" / "torn-0" / doze.segment_name(0)
    size = os.path.getsize(segment)
    whole = struct.pack(">q", 3) + make_batch([b"torn-away" * 10])[8:]
    with open(segment, "ab") as f:
        f.write({"garbage": os.urandom(37),
                 "partial batch": whole[:len(whole) // 2],
                 "bad crc": whole[:-3] + b"???"}[torn])
    caplog.set_level(logging.WARNING, logger="doze_kafka")
    broker = start_broker()
    assert any("torn tail" in r.getMessage() and "torn-0" in r.getMessage()
               for r in caplog.records)
    assert os.path.getsize(segment) == size
    with RawClient(broker.port) as c:
        assert [v for _, v in c.values("torn", 0)] == [b"t0", b"t1", b"t2"]
        assert c.produce("torn", 0, make_batch([b"t3"])).base_offset == 3
        assert [v for _, v in c.values("torn", 0)] == [b"t0", b"t1", b"t2", b"t3"]


def test_restart_scenario_idempotent_retry_after_restart_is_not_written_twice(start_broker):
    broker = start_broker()
    with RawClient(broker.port) as c:
        c.create_topic("idem-restart")
        pid, epoch = init_producer_id(c)
        batch = make_batch([b"once"], producer_id=pid, producer_epoch=epoch, base_sequence=0)
        assert c.produce("idem-restart", 0, batch).base_offset == 0
    stop(broker, clean=False)
    broker = start_broker()
    with RawClient(broker.port) as c:
        retry = c.produce("idem-restart", 0, batch)     # the producer never saw the answer
        # Kafka rebuilds producer state from the log (ProducerStateManager), so
        # the retry is answered with its original offset, not written again.
        assert (retry.error_code, retry.base_offset) == (0, 0)
        assert c.values("idem-restart", 0) == [(0, b"once")]


def test_server_partition_holding_a_bad_batch_is_served_by_every_reader_after_a_restart(start_broker):
    """The other readers of stored records, on the same poisoned log: a restart
    (segment indexes and producer state rebuilt from batch headers), the
    console's browser (a bad batch is one row saying why, the good record after
    it is shown) and its topic page (record counts), timestamp lookups again."""
    broker = start_broker({"doze.console.listener": "127.0.0.1:0"})
    with RawClient(broker.port) as c:
        c.create_topic("poisoned")
        plog = broker.run_in_loop(lambda: broker.logs.get("poisoned", 0))
        for payload, count in [BAD_RECORDS["count-2^31-1-length--1"], BAD_RECORDS["length--2"]]:
            batch = bytearray(batch_with_payload(payload, count, timestamp_ms=2_000))
            broker.run_in_loop(lambda: broker.logs.append(plog, batch, doze.read_batch_header(batch)))
        assert c.produce("poisoned", 0, make_batch([b"after"], timestamps=[9_000])).error_code == 0
    stop(broker)
    broker = start_broker({"doze.console.listener": "127.0.0.1:0"})
    after = 2 ** 31 - 1 + 2
    started = time.perf_counter()
    with RawClient(broker.port) as c:
        assert c.list_offset("poisoned", 0, 3_000).offset == after
        assert c.list_offset("poisoned", 0, -3).offset == after
        items = browse(broker, "poisoned", 0)["items"]
        page = console_html(broker, "/topics/poisoned")
        assert c.produce("poisoned", 0, make_batch([b"later"])).base_offset == after + 1
    assert time.perf_counter() - started < 3
    assert [(i["kind"], i["offset"]) for i in items[:2]] == [("batch", 0), ("batch", 2 ** 31 - 1)]
    assert all(i["note"] for i in items[:2])
    assert [(i["offset"], i["value_text"]) for i in items if i["kind"] == "record"] == [(after, "after")]
    assert "poisoned" in page


def test_txn_restart_keeps_the_open_transaction_and_the_aborted_index(start_broker):
    """Verifies that after a restart an open transaction is still open (its
    producer can commit it) and aborted transactions are still listed."""
    broker = start_broker()
    with RawClient(broker.port) as client:
        client.create_topic("rs", 1)
        txn = Txn(client, "tx-rs")
        assert txn.whole("rs", 0, [b"dropped"], commit=False) == 0
        txn.add(("rs", 0))
        txn.produce("rs", 0, [b"kept"])
        pid, epoch = txn.producer_id, txn.epoch
    stop(broker, clean=False)
    broker = start_broker()
    with RawClient(broker.port) as client:
        part = fetch_isolated(client, "rs", 0)
        assert part.last_stable_offset == 2 and part.high_watermark == 3
        assert [(a.producer_id, a.first_offset) for a in part.aborted_transactions] == [(pid, 0)]
        resumed = Txn.__new__(Txn)
        resumed.c, resumed.id, resumed.producer_id, resumed.epoch, resumed.seq = \
            client, "tx-rs", pid, epoch, {("rs", 0): 2}
        assert resumed.end(True) == 0                  # a fresh connection, no InitProducerId
        assert visible_values(client, "rs", 0) == [b"kept"]


def test_txn_a_topic_made_again_under_a_deleted_ones_name_is_rebuilt_whole_after_a_restart(
        start_broker, monkeypatch):
    """Verifies that a topic made again under the name of a deleted one that
    held transactions is noted as transactional in meta.db when it takes its
    own, so a restart rebuilds its aborted index whole: read_committed still
    hides an aborted record that more than the tail window of plain records
    followed. (The broker used to remember the deleted topic's partitions as
    noted, and skipped the note.)"""
    monkeypatch.setattr(doze, "PRODUCER_STATE_WINDOW", 4096)
    broker = start_broker()
    with RawClient(broker.port) as c:
        c.create_topic("twice", 1)
        assert Txn(c, "tx-twice").whole("twice", 0, [b"first topic"], commit=False) == 0
        delete_topic(c, "twice")
        c.create_topic("twice", 1)
        assert Txn(c, "tx-twice").whole("twice", 0, [b"aborted"], commit=False) == 0
        for _ in range(4):
            assert c.produce("twice", 0, make_batch([b"p" * 1000, b"q" * 1000])).error_code == 0
        assert b"aborted" not in visible_values(c, "twice", 0)
    stop(broker, clean=False)
    broker = start_broker()
    with RawClient(broker.port) as c:
        seen = visible_values(c, "twice", 0)
        assert len(seen) == 8 and b"aborted" not in seen


def test_txn_crash_between_the_decision_and_the_markers(start_broker):
    """Verifies that a commit decided in meta.db but with no marker written is
    carried out on restart: markers, offsets, and EndTxn retried succeeds."""
    files = FailingMarkers()
    broker = start_broker(files=files)
    with RawClient(broker.port) as client:
        txn = _txn_with_offsets(client, "crash1")
        files.broken = True                            # the disk takes no marker: none is written
        client.send(ApiKey.END_TXN, 3, transactional_id=txn.id, producer_id=txn.producer_id,
                    producer_epoch=txn.epoch, committed=True)
        _wait_for_state(broker, txn.id, "PrepareCommit")
        with RawClient(broker.port) as other:          # (EndTxn's answer is owed on this connection)
            assert fetch_isolated(other, "crash1", 0, read_committed=False).high_watermark == 1   # no marker
        stop(broker, clean=False)
    broker = start_broker()                            # a sound disk
    with RawClient(broker.port) as client:
        txn.c = client
        assert wait_until(lambda: describe_txn(client, txn.id).transaction_state == "CompleteCommit")
        _check_committed(client, "crash1", txn)


def test_txn_crash_between_the_markers_and_the_offsets(start_broker, monkeypatch):
    """Verifies that a commit whose markers are on disk but whose offsets and
    Complete state are not is finished on restart."""
    broker = start_broker()
    with RawClient(broker.port) as client:
        txn = _txn_with_offsets(client, "crash2")

        def fail(*args):
            raise doze.StoreFailed(ErrorCode.KAFKA_STORAGE_ERROR, "injected: disk I/O error")
        monkeypatch.setattr(broker.store, "complete_txn", fail)
        client.send(ApiKey.END_TXN, 3, transactional_id=txn.id, producer_id=txn.producer_id,
                    producer_epoch=txn.epoch, committed=True)
        with RawClient(broker.port) as other:          # the markers are durable...
            assert wait_until(lambda: fetch_isolated(other, "crash2", 1, read_committed=False)
                              .high_watermark == 2)
        _wait_for_state(broker, txn.id, "PrepareCommit")  # ...the offsets are not
        stop(broker, clean=False)
    broker = start_broker()
    with RawClient(broker.port) as client:
        txn.c = client
        assert wait_until(lambda: describe_txn(client, txn.id).transaction_state == "CompleteCommit")
        _check_committed(client, "crash2", txn)


# --- A power cut: only what was fsynced is left ----------------------------------

def test_power_cut_layer_forgets_unsynced_writes_and_entries(tmp_path):
    root = tmp_path / "data"
    os.mkdir(root)
    files = doze.FaultyDisk(root)
    synced, unsynced_entry = str(root / "synced.log"), str(root / "lost.log")
    fd = files.open_append(synced, create=True)
    files.fsync_dir(str(root))
    files.write(fd, b"durable")
    files.fsync(fd)
    files.write(fd, b"-volatile")
    fd2 = files.open_append(unsynced_entry, create=True)
    files.write(fd2, b"data")
    files.fsync(fd2)                         # the file is synced, its entry is not
    files.mkdir(str(root / "newdir"))
    files.close(fd)
    files.close(fd2)
    assert open(synced, "rb").read() == b"durable-volatile"
    files.power_cut()
    assert open(synced, "rb").read() == b"durable"
    assert not os.path.exists(unsynced_entry)
    assert not os.path.exists(root / "newdir")


def test_power_cut_layer_fails_every_change_after_the_cut(tmp_path):
    root = tmp_path / "data"
    os.mkdir(root)
    cuts = []
    files = doze.FaultyDisk(root, cut_at=2, on_cut=lambda: cuts.append(1))
    files.mkdir(str(root / "a"))
    with pytest.raises(OSError):
        files.mkdir(str(root / "b"))
    with pytest.raises(OSError):
        files.fsync_dir(str(root))
    assert cuts == [1] and not os.path.exists(root / "b")


@pytest.mark.parametrize("cut_at", [9, 42, 92, 162, 262, None],
                         ids=["at-9", "at-42", "at-92", "at-162", "at-262", "after-all"])
def test_power_cut_loses_nothing_acknowledged(start_broker, tmp_path, cut_at):
    """Verifies that every record acknowledged with acks=1/-1 and every topic
    whose CreateTopics was answered survive a power cut at any point: acks
    are only sent after the fsyncs (of data and of directory entries)."""
    holder = []
    files = doze.FaultyDisk(tmp_path / "data", cut_at=cut_at,
                          on_cut=lambda: holder[0].stop(clean=False))
    broker = start_broker(files=files)
    holder.append(broker)
    acked, created = run_workload(broker, files)
    stop(broker, clean=False)
    assert files.dead == (cut_at is not None)
    files.power_cut()
    if cut_at is None:
        assert len(created) == 3 and sum(map(len, acked.values())) > 100
        assert files.changes > 300            # so every cut_at above falls inside the run
    broker = start_broker()
    assert check_nothing_acknowledged_was_lost(broker, acked, created) == []


def test_power_cut_negative_control_lying_fsync_loses_acked_records(start_broker, tmp_path):
    """The check above can fail: when fsync lies, acknowledged records vanish."""
    files = LyingDisk(tmp_path / "data")
    broker = start_broker(files=files)
    acked, created = run_workload(broker, files, log_bytes_topics=1)
    stop(broker, clean=False)
    files.power_cut()
    broker = start_broker()
    assert acked and check_nothing_acknowledged_was_lost(broker, acked, created) != []


def test_power_cut_meta_db_entry_must_be_durable(start_broker, tmp_path):
    """The broker fsyncs the data directory after sqlite creates meta.db; a
    layer that skips directory fsyncs loses the topic with it."""
    class NoDirSync(doze.FaultyDisk):
        def fsync_dir(self, path):
            self._change()
    files = NoDirSync(tmp_path / "data")
    broker = start_broker(files=files)
    with RawClient(broker.port) as c:
        c.create_topic("entry")
    stop(broker, clean=False)
    files.power_cut()
    assert not os.path.exists(tmp_path / "data")
    files = doze.FaultyDisk(tmp_path / "data")
    broker = start_broker(files=files)
    with RawClient(broker.port) as c:
        c.create_topic("entry")
    stop(broker, clean=False)
    files.power_cut()
    assert os.path.exists(tmp_path / "data" / "meta.db")
    broker = start_broker()
    with RawClient(broker.port) as c:
        assert c.metadata(["entry"], allow_auto_topic_creation=False).topics[0].error_code == 0


def test_txn_power_cut_right_after_end_txn_keeps_the_commit(start_broker, tmp_path):
    """Verifies that a power cut the moment EndTxn answered success cannot take
    the commit back: markers, offsets and state survive."""
    files = doze.FaultyDisk(tmp_path / "data")
    broker = start_broker(files=files)
    with RawClient(broker.port) as client:
        txn = _txn_with_offsets(client, "pcut")
        assert txn.end(True) == 0
        stop(broker, clean=False)
    files.power_cut()
    broker = start_broker()
    with RawClient(broker.port) as client:
        txn.c = client
        _check_committed(client, "pcut", txn)


# --- A power cut at every point of a cleaning -------------------------------------

def cleaning_state(data_dir):
    """A compacted partition: a written three times over three rolled segments,
    b once in the active one -- the values a reader must end with: a=2, b=x."""
    config = doze.Config(None, data_dir=data_dir)
    os.makedirs(config.data_dir)
    store = doze.MetadataStore(os.path.join(config.data_dir, "meta.db"))
    logs = doze.LogManager(config, store)
    logs.load()
    new_topic(logs, "kv", cleanup_policy="compact", min_cleanable_dirty_ratio="0.0")
    plog = logs.get("kv", 0)
    for i, (key, value) in enumerate([(b"a", b"0"), (b"a", b"1"), (b"a", b"2"), (b"b", b"x")]):
        batch = doze.build_batch([(key, value, ())])
        logs.append(plog, bytearray(batch), header_of(batch))
        if i < 3:
            plog.roll()
    logs.flush_dirty()
    logs.close()
    store.close()


def clean_on(data_dir, disk, cut=None):
    """One cleaning pass of kv-0 over `disk`, the power cut at its `cut`th
    change if given -> the changes the pass made."""
    config = doze.Config(None, data_dir=data_dir)
    store = doze.MetadataStore(os.path.join(config.data_dir, "meta.db"), disk)
    logs = doze.LogManager(config, store, disk)
    logs.load()
    before = disk.changes
    if cut is not None:
        disk.cut_at = before + cut
    cleaner = doze.LogCleaner(config, store, logs, doze.ProducerStates(config, store, logs), doze.Journal(time.time))
    try:
        doze.run_steps(doze.CleaningPass(cleaner, *cleaner.filthiest(), cleaner.now_ms()).run())
    except OSError:
        pass
    logs.close(clean=False)
    store.close()
    return disk.changes - before


def cleaning_power_cuts(tmp_path, disk_class=doze.FaultyDisk, power_cut=True):
    """A power cut (or, power_cut=False, a crash: every write made) at each
    change of a cleaning; after each, the log read back -> [(point, what is
    wrong)]: it must be the old log or the cleaned one, whole."""
    cleaning_state(tmp_path / "clean")
    shutil.copytree(tmp_path / "clean", tmp_path / "count")
    points, failures = clean_on(tmp_path / "count", disk_class(tmp_path / "count")), []
    for n in range(1, points + 1):
        data = tmp_path / f"cut-{n}"
        shutil.copytree(tmp_path / "clean", data)
        disk = disk_class(data)
        clean_on(data, disk, n)
        if power_cut:
            disk.power_cut()
        config = doze.Config(None, data_dir=data)
        store = doze.MetadataStore(os.path.join(config.data_dir, "meta.db"))
        logs = doze.LogManager(config, store)
        logs.load()
        plog = logs.get("kv", 0)
        values = [(b + d, k, v) for b, batch in plog.batches() for d, _, k, v, _ in doze.decode_records(batch)]
        left = [f for f in os.listdir(plog.dir) if f.endswith((".cleaned", ".swap", ".deleted"))]
        if values not in ([(0, b"a", b"0"), (1, b"a", b"1"), (2, b"a", b"2"), (3, b"b", b"x")],
                          [(2, b"a", b"2"), (3, b"b", b"x")]) or left:
            failures.append((n, disk.labels[-1] if disk.labels else "", values, left))
        logs.close()
        store.close()
    return points, failures


@pytest.mark.parametrize("power_cut", [False, True], ids=["crash", "power-cut"])
def test_cleaning_power_cut_at_every_point_leaves_the_old_log_or_the_cleaned_one(tmp_path, power_cut):
    """A crash or a power cut at each change a cleaning makes (the cleaned
    file's writes and fsync, each rename of the swap, the directory's fsyncs,
    the old files' removal): the next start reads the old segments or the
    cleaned one, whole, and no file of the cleaning is left over."""
    points, failures = cleaning_power_cuts(tmp_path, power_cut=power_cut)
    assert failures == [] and points >= 10, (points, failures)


def test_cleaning_power_cut_negative_control_fails_without_the_cleaned_files_fsync(tmp_path):
    """The check above can fail: without the cleaned file's fsync, a power cut
    after the swap leaves a segment that lost what the cleaning wrote."""
    class SkipsCleanedFsync(doze.FaultyDisk):
        def fsync(self, fd):
            if self.paths.get(fd, "").endswith(".cleaned"):
                self._change()                            # counted, and nothing made durable
                return
            super().fsync(fd)
    points, failures = cleaning_power_cuts(tmp_path, SkipsCleanedFsync)
    assert failures, "no point failed"


# --- A crash, or a power cut, at every point of a workload ------------------------

@pytest.mark.parametrize("power_cut", [False, True, "written back"],
                         ids=["crash", "power-cut", "power-cut-logs-written-back"])
def test_crash_at_every_point_loses_nothing_acknowledged(tmp_path, power_cut):
    """Verifies, for every change the workload makes, that a crash (or a power
    cut, with or without the kernel having written the logs back before it:
    meta.db's unsynced commits lost either way) exactly there loses nothing any client was told: answered produces at
    their offsets, answered commits whole with their offsets, aborted and
    undecided transactions invisible to read_committed, no LSO stuck, the
    idempotent producer's sequences intact."""
    count, failures = crash_points(tmp_path, power_cut)
    assert failures == []
    assert count > 60                  # the workload reaches its every part (its size is in the README)


def test_crash_at_every_point_negative_control_fails_without_an_fsync(tmp_path):
    """The check above can fail: a layer that skips the markers' fsync loses
    answered commits at some power-cut point."""
    count, failures = crash_points(tmp_path, power_cut=True, files_class=SkipsMarkerFsync, first_failure=True)
    assert any("commit was answered" in why for _, _, why in failures), failures


def test_crash_at_every_point_negative_control_fails_without_meta_db_fsync(tmp_path):
    """The check above can fail: without meta.db's fsync a power cut loses
    what was answered (offsets, transactions, topics)."""
    count, failures = crash_points(tmp_path, power_cut=True, files_class=LyingMetaSync, first_failure=True)
    assert failures, "no point failed"


def test_crash_at_every_point_negative_control_markers_before_decision(tmp_path):
    """The check above can fail: markers written (and written back) before
    their decision is durable leave a transaction that the restart does not
    know was decided -- half committed, or its answered commit undone."""
    def markers_at_once(broker):
        txns, deferred = broker.txns, broker.txns._write_markers

        def write_markers(meta, delay_ms=0):   # as EndTxn did when meta.db fsynced each commit itself
            deferred(meta, delay_ms)
            txns._append_markers(meta)
        txns._write_markers = write_markers
    count, failures = crash_points(tmp_path, power_cut="written back", patch=markers_at_once,
                                   first_failure=True)
    assert any("half of it is visible" in why or "commit was answered" in why for _, _, why in failures), failures


def run_wide_workload(port, partitions=40, rounds=3):
    """Produce to every partition of a wide topic in one request, a few times
    (each pass's group commit has SYNCFS_MIN_LOGS or more logs dirty: one
    syncfs), until the broker goes away -> (acked, created) as run_workload's."""
    acked, created = {}, {}
    try:
        with RawClient(port, timeout=3) as c:
            [res] = c.create_topics(("wide", partitions, {}))
            if res.error_code == 0:
                created["wide"] = partitions
            for r in range(rounds):
                values = {p: b"wide/%d/%d" % (p, r) for p in range(partitions)}
                resp = c.call(ApiKey.PRODUCE, 9, acks=-1, timeout_ms=5000, topic_data=[Msg(name="wide", partition_data=[
                    Msg(index=p, records=make_batch([v])) for p, v in values.items()])])
                for part in resp.responses[0].partition_responses:
                    if part.error_code == 0:
                        acked.setdefault(("wide", part.index), {})[part.base_offset] = values[part.index]
    except (EOFError, ConnectionError, socket.timeout):
        pass                                               # the power went out
    return acked, created


def tv2_produce_workload(port):
    """Transaction version 2: two transactions whose Produce v12s add their
    partitions themselves (the second to a partition new to it), until the
    broker goes away."""
    try:
        with RawClient(port, timeout=3) as c:
            c.create_topics(("v2", 2, {}))
            txn = Txn(c, "tv2-pc", version=5)
            txn.produce("v2", 0, [b"first"], version=12)
            txn.end_answer(True, version=5)
            txn.produce("v2", 0, [b"second-0"], version=12)
            txn.produce("v2", 1, [b"second-1"], version=12)
            txn.end_answer(True, version=5)
    except (EOFError, ConnectionError, socket.timeout, AssertionError):
        pass                                               # the power went out (InitProducerId refused)


def power_cuts_at_every_change(tmp_path, workload, check, files_class=doze.FaultyDisk, settings=None,
                               written_back=False):
    """Run workload(port) once on a disk that numbers its changes, then once per
    change with the power cut there (the disk as FaultyDisk.power_cut leaves it,
    with written_back), a restart, and check(broker, what workload returned) ->
    (the changes, what the first run returned, [(point, change, what check found)])."""
    files = files_class(tmp_path / "run-0")
    broker = _crash_broker(tmp_path / "run-0", files, settings)
    before = files.changes
    first = workload(broker.port)
    stop(broker, clean=False)
    made, failures = files.labels[before:], []
    for n in range(1, len(made) + 1):
        holder, data = [], tmp_path / f"run-{n}"
        files = files_class(data, on_cut=lambda: holder[0].stop(clean=False))
        broker = _crash_broker(data, files, settings)
        holder.append(broker)
        files.cut_at = files.changes + n
        got = workload(broker.port)
        stop(broker, clean=False)
        files.power_cut(written_back=written_back)
        broker = _crash_broker(data, settings=settings)
        try:
            found = check(broker, got)
        finally:
            stop(broker)
        if found:
            failures.append((n, made[n - 1], found))
    return made, first, failures


def tv2_batches_open_unknown_to_the_coordinator(broker, _):
    """The partitions of "v2" whose LSO an open batch holds back while the
    coordinator does not list them in the transaction."""
    found = []
    with RawClient(broker.port) as c:
        if not [t for t in c.metadata(["v2"], allow_auto_topic_creation=False).topics if t.error_code == 0]:
            return found
        state = describe_txn(c, "tv2-pc")
        listed = {(t.topic, p) for t in state.topics for p in t.partitions} \
            if state.transaction_state == "Ongoing" else set()
        for p in (0, 1):
            part = fetch_isolated(c, "v2", p)
            if part.last_stable_offset < part.high_watermark and ("v2", p) not in listed:
                found.append(f"v2-{p}: LSO {part.last_stable_offset} < HW {part.high_watermark}, "
                             f"transaction {state.transaction_state} over {listed}")
    return found


@pytest.mark.parametrize("written_back", [False, True], ids=["power-cut", "power-cut-logs-written-back"])
def test_power_cut_tv2_produce_leaves_no_batch_open_that_the_coordinator_does_not_know(tmp_path, written_back):
    """Transaction version 2: a Produce v12 adds its partition to the
    transaction itself. Whatever a power cut at any change of it leaves (the
    kernel may have written the log back before meta.db's fsync), a partition
    holding an open batch of the transaction is one the coordinator lists as
    in it: else no marker would ever close it, and its LSO would stay stuck.
    So the add is durable before the batch is written."""
    _, _, failures = power_cuts_at_every_change(tmp_path, tv2_produce_workload,
                                                tv2_batches_open_unknown_to_the_coordinator,
                                                settings={"doze.transaction.version": 2}, written_back=written_back)
    assert failures == []


def wide_power_cuts(tmp_path, files_class=doze.FaultyDisk):
    """run_wide_workload, and a power cut at each of its changes -> (its changes,
    [(point, change, acknowledged records missing)])."""
    made, (acked, _), failures = power_cuts_at_every_change(
        tmp_path, run_wide_workload,
        lambda broker, got: check_nothing_acknowledged_was_lost(broker, *got)[:3], files_class)
    assert sum(map(len, acked.values())) == 120
    return made, failures


@pytest.mark.skipif(doze.syncfs_call() is None, reason="syncfs(2) with error reports is Linux 5.8+ only")
def test_power_cut_at_every_point_of_a_wide_produce_loses_nothing_acknowledged(tmp_path):
    """Verifies the group commit's syncfs (many logs dirty at once): a power cut
    at each change of produces to 40 partitions at a time keeps everything
    answered; the run itself took syncfs, not an fsync per log."""
    made, failures = wide_power_cuts(tmp_path)
    assert [label for label in made if label.startswith("syncfs")] and \
        not [label for label in made if label.startswith("fsync ") and "wide-" in label], made
    assert failures == []


class LyingSyncfs(doze.FaultyDisk):
    """A disk whose syncfs returns without making anything durable."""

    def syncfs(self, path):
        self._change(path)
        return True


def test_power_cut_wide_produce_negative_control_lying_syncfs_loses_acked_records(tmp_path):
    """The check above can fail: with a syncfs that keeps nothing, answered records vanish."""
    made, failures = wide_power_cuts(tmp_path, LyingSyncfs)
    assert failures, "no point failed"


###############################################################################
# C. CONFORMANCE -- recordings of Kafka 4.3.1 replayed; the fuzz
###############################################################################

# conformance/recordings/*.json were made by running conformance/recorder.py
# against a real Kafka 4.3.1 (conformance/README.md says how). Each is replayed
# here against a fresh doze and compared field by field, with the short list
# of normalised fields in conformance/replay.py. Where doze differs from Kafka
# on purpose, the scenario names the difference and doze's expected answer, and
# the test below checks that exactly those named differences show.

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "conformance"))
import replay as conformance_replay  # noqa: E402

RECORDINGS = conformance_replay.recording_names()


def _first_int_field(node, path=()):
    """The path of some integer field of a response (to change it)."""
    if isinstance(node, dict):
        for k, v in node.items():
            if k.endswith("error_code") and isinstance(v, int):
                return path + (k,)
        for k, v in node.items():
            found = _first_int_field(v, path + (k,))
            if found:
                return found
    if isinstance(node, list):
        for i, v in enumerate(node):
            found = _first_int_field(v, path + (i,))
            if found:
                return found
    return None


@pytest.mark.parametrize("name", RECORDINGS)
def test_conformance_replay_matches_kafka(name):
    rec = conformance_replay.load(name)
    with doze.running(conformance_replay.broker_settings(rec), defaults={}) as broker:
        result = conformance_replay.replay_full(rec, conformance_replay.bootstraps(broker))
    assert result.differences == []
    assert result.stale_known == []
    declared = {step: kd["name"] for step, kd in conformance_replay.known_differences(rec).items()}
    seen = {item.split(":")[0]: item.split(":")[1].split("(")[0].strip()
            for item in result.known_differences_seen}
    assert seen == {step: name for step, name in declared.items()
                    if any(s.get("step") == step for s in rec["steps"])}


@pytest.mark.parametrize("name", ["endtxn-decisions", "produce-transactional", "fetch-read-committed",
                                  "group-membership", "describe-configs"])
def test_conformance_replay_fails_when_a_response_field_is_changed(name):
    """The replay can fail: change one error code Kafka answered and it must say so."""
    rec = conformance_replay.load(name)
    changed = 0
    for step in rec["steps"]:
        path = _first_int_field(step.get("response"))
        if path and step.get("step") not in conformance_replay.known_differences(rec):
            node = step["response"]
            for p in path[:-1]:
                node = node[p]
            node[path[-1]] = 99 if node[path[-1]] != 99 else 98
            changed += 1
            break
    assert changed == 1
    with doze.running(conformance_replay.broker_settings(rec), defaults={}) as broker:
        differences = conformance_replay.replay(rec, broker.bootstrap)
    assert any("kafka=99" in d or "kafka=98" in d for d in differences), differences


def test_fuzz_bounded_run():
    """conformance/fuzz.py, seeded and bounded: valid requests for every API and
    version doze serves, built from its schemas (checked against Kafka's by
    conformance/schemacheck.py) and mutated, with a well-behaved client beside.
    Nothing may kill or stall the broker, no handler may fail, every answer must
    decode strictly by the schema of its version, and every API must have been
    reached (50 real answers at least) so that the mutations count."""
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "conformance"))
    import fuzz
    report = fuzz.run(seed=1, frames=8000, connections=4, spawn=True)   # a child process: the
    # fuzzer's own threads (multi-MiB frames, gzip) do not share the broker's GIL
    assert not report.findings, report.summary()
    thin = {spec.name: report.per_api.get(spec.name, {}).get("answered", 0)
            for spec, _ in doze.HANDLERS.values()
            if report.per_api.get(spec.name, {}).get("answered", 0) < 50}
    assert not thin, f"APIs the fuzz barely reached: {thin}\n{report.summary()}"


def test_fuzz_bounded_run_over_sasl_ssl():
    """The same fuzz with a SASL_SSL listener and Kafka's StandardAuthorizer:
    half the connections authenticate (PLAIN, SCRAM-SHA-256/512, SaslHandshake
    v1 and v0's bare tokens, re-authentication) and are fuzzed as principals
    under the ACLs the fuzz makes; beside them every hostile TLS and SASL
    exchange of fuzz.SecureSide.HOSTILE. No finding (a wrong credential or a
    request before authentication answered, a valid one refused, a password in
    the log or meta.db), every mechanism authenticated, every case reached."""
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "conformance"))
    import fuzz
    report = fuzz.run(seed=2, frames=3000, connections=4, spawn=True, security=True,
                      ops={"sasl": 30, "reauth": 5})
    assert not report.findings, report.summary()
    auth = report.security["auth"]
    for mechanism in fuzz.MECHANISMS:
        assert auth.get(f"{mechanism} ok", 0) and auth.get(f"{mechanism} v0 ok", 0), report.summary()
    assert sum(n for k, n in auth.items() if k.endswith("re-auth ok")), report.summary()
    missed = [case for case in fuzz.SecureSide.HOSTILE if f"hostile: {case}" not in report.security]
    assert not missed, f"hostile cases never run: {missed}\n{report.summary()}"
    assert report.per_api["SaslAuthenticate"]["answered"] >= 100, report.summary()


###############################################################################
# D. THE BOOK -- doze_kafka.py's shape, measured by conformance/book.py
###############################################################################

def book():
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "conformance"))
    import book as measured
    return measured


def chapter_names():
    """[(number, its name as the reading guide and the README say it)]: a banner's title before ' -- '."""
    return [(n, title.split(" -- ")[0].lower()) for n, title, _, _ in book().chapters()]


def test_book_reading_guide_and_readme_layout_name_every_chapter():
    """The module docstring's reading guide has a line "§N name" for every
    chapter banner and none for a chapter that is not there; the README's
    Layout names them all, in order."""
    guide = doze.__doc__
    named = re.findall(r"^  §(\w+) ", guide, re.M)
    assert named == [n for n, _ in chapter_names()]
    for n, name in chapter_names():
        assert re.search(rf"^  §{n} {re.escape(name)}\b", guide, re.M | re.I), (n, name)
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "README.md"), encoding="utf-8") as f:
        readme = f.read()
    layout = " ".join(readme[readme.index("## Layout"):].split("\n## ")[0].split()).lower()
    at = 0
    for n, name in chapter_names():
        found = layout.find(f"{n} {name}".lower(), at)
        assert found >= 0, f"README Layout: no '{n} {name}' after position {at}"
        at = found


def test_book_no_chapter_over_1550_lines_and_the_broker_only_composes():
    sizes = {n: size for n, _, _, size in book().chapters() if n.isdigit()}
    assert max(sizes.values()) <= 1550, sizes
    classes = {name: size for name, _, size, _ in book().classes()}
    assert classes["Broker"] <= 250, classes["Broker"]


def test_book_every_handler_reads_as_the_protocol_step():
    """At most 20 code lines a handler (docstring, comments and schema aside)."""
    long = [(name, n) for name, n in book().handlers() if n > 20]
    assert not long, long


def test_book_nothing_refers_to_a_later_chapter():
    assert book().forward() == []


def test_book_no_class_writes_another_class_s_state():
    assert book().writes() == []


def test_book_every_class_says_its_job():
    assert [name for name, _, _, job in book().classes() if not job] == []


###############################################################################
# E. THE README -- its lists against the code, its links and sections against the files
###############################################################################

ROOT = os.path.dirname(os.path.abspath(__file__))
README = os.path.join(ROOT, "README.md")


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def marked(text, name):
    """The text between <!-- NAME ... --> and <!-- /NAME --> (one such block)."""
    m = re.search(rf"<!-- {re.escape(name)}\b[^>]*-->\n(.*?)<!-- /{re.escape(name)} -->", text, re.S)
    assert m, f"README.md has no <!-- {name} --> ... <!-- /{name} --> block"
    return m.group(1)


def fenced(block):
    """The lines of the one fenced code block in `block`."""
    m = re.search(r"^```[^\n]*\n(.*?)^```", block, re.S | re.M)
    assert m, "no fenced block between the markers"
    return m.group(1).rstrip("\n").split("\n")


# --- (a) the settings doze acts on, and its own doze.* settings ------------------

def settings_acted_on():
    """What the code says doze acts on, named as the README names it:
    BROKER_DEFAULTS' Kafka names, the settings checked at start, the
    per-listener prefixes (as `ssl.*`), the topic configs of TOPIC_CONFIGS_USED
    and their broker synonyms (log.retention.hours, ...)."""
    synonyms = {s for t in doze.TOPIC_CONFIGS_USED for s in doze.KAFKA_TOPIC_CONFIGS[t][3]}
    return ({k for k in doze.BROKER_DEFAULTS if not k.startswith("doze.")} | set(doze.SETTINGS_CHECKED_AT_START)
            | {p + "*" for p in doze.TLS_SETTING_PREFIXES} | set(doze.TOPIC_CONFIGS_USED) | synonyms)


def test_readme_settings_doze_acts_on_are_the_codes():
    named = re.findall(r"`([a-z][a-z0-9._*-]*)`", marked(read(os.path.join(ROOT, "conformance", "configs",
                                                                             "README.md")), "acts-on"))
    assert len(named) == len(set(named)), "a setting named twice"
    expected = settings_acted_on()
    assert set(named) - expected == set(), "named in the README, not acted on by the code"
    assert expected - set(named) == set(), "acted on by the code, missing from the README"
    for name in named:                        # and acts_on, the start log's answer, agrees name by name
        probe = name[:-1] + "x" if name.endswith("*") else name
        assert name in doze.TOPIC_CONFIGS_USED or doze.acts_on(probe), name


def default_text(value):
    return '""' if value == "" else str(value).lower() if isinstance(value, bool) else str(value)


def test_readme_doze_settings_are_the_codes_with_their_defaults():
    named = re.findall(r"`(doze\.[a-z.]+)` \(`([^`]*)`\)", marked(read(README), "doze-settings"))
    ours = {k: v for k, v in doze.BROKER_DEFAULTS.items() if k.startswith("doze.")}
    assert [name for name, _ in named] == list(ours), "the doze.* settings, in BROKER_DEFAULTS' order"
    assert dict(named) == {k: default_text(v) for k, v in ours.items()}


# --- (b) the APIs table -----------------------------------------------------------

def apis_table_lines(block):
    """The README's APIs table (key | API | versions, repeated across the
    columns, read down each column) as --apis prints it: one line an API."""
    rows = [[c.strip() for c in line.strip().strip("|").split("|")]
            for line in block.strip().split("\n") if line.startswith("|")][2:]      # header and rule
    columns = max(len(r) for r in rows) // 3
    entries = [r[3 * c:3 * c + 3] for c in range(columns) for r in rows if len(r) > 3 * c and r[3 * c]]
    return [f"{int(key):3d}  {name:29s} {versions}" for key, name, versions in entries]


def test_readme_apis_table_is_what_apis_prints():
    assert apis_table_lines(marked(read(README), "apis")) == doze.render_apis().split("\n")


def test_apis_table_lines_reads_down_the_columns():
    table = ("| key | API | versions | key | API | versions |\n|---|---|---|---|---|---|\n"
             "| 0 | Produce | v3-v9 | 2 | ListOffsets | v1-v11 |\n| 1 | Fetch | v4-v12 |  |  |  |\n")
    assert apis_table_lines(table) == ["  0  Produce                       v3-v9",
                                       "  1  Fetch                         v4-v12",
                                       "  2  ListOffsets                   v1-v11"]
    assert apis_table_lines(table.replace("v4-v12", "v4-v13")) != apis_table_lines(table)


# --- (c) what .ci/run runs ---------------------------------------------------------

def command_lines(text):
    """A shell script's command lines: not blank, not a comment, not the
    script's own plumbing (set, cd)."""
    lines = [line.strip() for line in text.split("\n")]
    return [line for line in lines if line and not line.startswith("#")
            and shlex.split(line, comments=True)[0] not in ("set", "cd")]


def test_readme_lists_what_ci_runs():
    readme = command_lines("\n".join(fenced(marked(read(README), "ci"))))
    assert readme == command_lines(read(os.path.join(ROOT, ".ci", "run")))


def test_command_lines_sees_a_changed_ci_script():
    script = "#!/bin/sh\nset -e\ncd x\n# a comment\npython3 -m pytest -q\n\npython3 a.py --quick\n"
    assert command_lines(script) == ["python3 -m pytest -q", "python3 a.py --quick"]
    assert command_lines(script + "python3 b.py\n") != command_lines(script)


# --- (d) links, anchors and the sections named in prose ----------------------------

SKIP_DIRS = {"node_modules", "target", ".venv", "venv", "__pycache__"}
FENCE = re.compile(r"^ {0,3}(```+|~~~+)")


def markdown_files():
    files = [README]
    for path in sorted(glob.glob(os.path.join(ROOT, "conformance", "**", "*.md"), recursive=True)):
        if not SKIP_DIRS & set(os.path.relpath(path, ROOT).split(os.sep)):
            files.append(path)
    return files


def without_code(text, spans=True):
    """The text with fenced code blocks blanked (lines kept, so line numbers
    hold); with `spans`, indented code blocks and `code spans` too: what is
    left is what a reader reads as prose."""
    out, fence, after_blank = [], None, True
    for line in text.split("\n"):
        m = FENCE.match(line)
        if fence:
            if m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence):
                fence = None
            out.append("")
        elif m:
            fence = m.group(1)
            out.append("")
        elif spans and after_blank and re.match(r"^( {4}|\t)", line):
            out.append("")                        # an indented code block: it follows a blank line
        else:
            after_blank = not line.strip()
            out.append(re.sub(r"(`+)(.+?)\1", lambda s: " " * len(s.group(0)), line) if spans else line)
    return "\n".join(out)


def heading_texts(text):
    """Headings as GitHub renders their text (code marks, links and emphasis undone)."""
    texts = []
    for line in without_code(text, spans=False).split("\n"):
        m = re.match(r"^ {0,3}#{1,6}\s+(.*?)\s*#*\s*$", line)
        if m:
            t = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", m.group(1))
            texts.append(re.sub(r"[`*]|(?<!\w)_|_(?!\w)", "", t).strip())
    return texts


def slug(heading):
    """GitHub's anchor for a heading: lowercase, punctuation but - and _ dropped, spaces to -."""
    return re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")


def anchors(text):
    seen, out = {}, set()
    for h in heading_texts(text):
        s = slug(h)
        out.add(s if s not in seen else f"{s}-{seen[s]}")      # a repeated heading gets -1, -2, ...
        seen[s] = seen.get(s, 0) + 1
    return out | set(re.findall(r"""<a\s+(?:name|id)=["']([^"']+)["']""", text))


LINKS = [r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]*)>?(?:\s+\"[^\"]*\")?\s*\)",     # [text](target)
         r"""<(?:a|img)\b[^>]*?\b(?:href|src)=["']([^"']+)["']""",                      # <a href>, <img src>
         r"^ {0,3}\[[^\]]+\]:\s*(\S+)"]                                                 # [name]: target


def link_targets(text):
    """[(line number, target)] of the links in the prose (a link's text may run over lines)."""
    words = without_code(text)
    found = [(words.count("\n", 0, m.start()) + 1, m.group(1))
             for pattern in LINKS for m in re.finditer(pattern, words, re.M)]
    return sorted(found)


def dead_links(text, path, root=ROOT):
    """Problems with the links of the Markdown `text` of the file at `path`:
    a relative link to a file that is not there, an #anchor no heading has."""
    problems = []
    for number, target in link_targets(text):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I) or target.startswith("//"):
            continue                               # http:, https:, mailto:
        file_part, _, anchor = target.partition("#")
        where = f"{os.path.relpath(path, root)}:{number}: {target}"
        base = root if file_part.startswith("/") else os.path.dirname(path)
        full = os.path.normpath(os.path.join(base, file_part.lstrip("/"))) if file_part else path
        if not os.path.exists(full):
            problems.append(f"{where}: no such file")
        elif anchor and full.endswith(".md") and anchor not in anchors(text if full == path else read(full)):
            problems.append(f"{where}: no heading with that anchor")
    return problems


README_NAMES = re.compile(r"""README(?:[:,]|'s)\s+"([^"]+)\"""")
SEE_NAMES = re.compile(r"""\b[Ss]ee\s+"([^"]+)\"""")


def named_sections(text):
    """Sections the prose names by title: (README: "X"), README's "X"; see "X"."""
    words = without_code(text)
    tidy = lambda names: [" ".join(n.split()) for n in names]          # noqa: E731 (a name may wrap)
    return tidy(README_NAMES.findall(words)), tidy(SEE_NAMES.findall(words))


def missing_sections(names, *texts):
    """The names no heading of `texts` is, or starts with before ':', ' (' or ','."""
    heads = [h.lower() for t in texts for h in heading_texts(t)]
    return [n for n in names
            if not any(h == n.lower() or h.startswith(tuple(n.lower() + c for c in ":(,")) or
                       h.startswith(n.lower() + " (") for h in heads)]


def test_every_link_in_the_markdown_points_at_something():
    files = markdown_files()
    assert len(files) > 10 and sum(len(link_targets(read(p))) for p in files) > 100   # it reads them all
    assert [p for path in files for p in dead_links(read(path), path)] == []


def test_every_section_named_in_prose_exists():
    readme = read(README)
    problems = []
    for path in markdown_files():
        text = read(path)
        by_readme, seen = named_sections(text)
        problems += [f"{os.path.relpath(path, ROOT)}: README \"{n}\"" for n in missing_sections(by_readme, readme)]
        problems += [f"{os.path.relpath(path, ROOT)}: see \"{n}\"" for n in missing_sections(seen, text, readme)]
    # the code names README sections too (--help, the reading guide, docstrings)
    code = [os.path.join(ROOT, "doze_kafka.py")] + [
        p for p in glob.glob(os.path.join(ROOT, "conformance", "**", "*.py"), recursive=True)
        if not SKIP_DIRS & set(os.path.relpath(p, ROOT).split(os.sep))]
    named = 0
    for path in code:
        names = [" ".join(n.split()) for n in README_NAMES.findall(read(path))]
        named += len(names)
        problems += [f"{os.path.relpath(path, ROOT)}: README \"{n}\"" for n in missing_sections(names, readme)]
    assert named >= 3 and problems == []


def test_the_link_checker_finds_a_dead_link_and_a_dead_anchor(tmp_path):
    (tmp_path / "there.md").write_text("# A heading: with `code`\n\n## Twice\n\n## Twice\n")
    page = tmp_path / "page.md"
    text = ("# Page\n\nSee [a file](there.md), [its heading](there.md#a-heading-with-code),\n"
            "[the second twice](there.md#twice-1), [here](#page), [the web](https://example.com/x),\n"
            "[a link over\ntwo lines](there.md).\n\n"
            "Dead: [gone](gone.md), [no anchor](there.md#nowhere), [no local](#nowhere-here),\n"
            "[dead over\ntwo lines](gone-too.md).\n\n"
            "```\n[in code](not-a-link.md)\n```\n")
    page.write_text(text)
    problems = dead_links(text, str(page), root=str(tmp_path))
    assert sorted(p.split(": ", 1)[1] for p in problems) == [
        "#nowhere-here: no heading with that anchor", "gone-too.md: no such file",
        "gone.md: no such file", "there.md#nowhere: no heading with that anchor"]
    assert dead_links(text.split("Dead:")[0], str(page), root=str(tmp_path)) == []


def test_the_section_checker_finds_a_section_that_is_gone():
    readme = "# R\n\n## In your own tests\n\n## Watch the protocol: --trace\n"
    text = 'As the README: "In your own\ntests" says; README\'s "Watch the protocol"; see "Gone away".'
    by_readme, seen = named_sections(text)
    assert by_readme == ["In your own tests", "Watch the protocol"] and seen == ["Gone away"]
    assert missing_sections(by_readme, readme) == []
    assert missing_sections(seen, text, readme) == ["Gone away"]
    assert missing_sections(["In your own"], readme) == ["In your own"]     # a prefix is not a name


@pytest.mark.parametrize("heading, anchor", [
    ("Watch the protocol: --trace", "watch-the-protocol---trace"),
    ("Side by side with Apache Kafka 4.3.1", "side-by-side-with-apache-kafka-431"),
    ("Exactly-once with every client, under crashes (`run`)", "exactly-once-with-every-client-under-crashes-run"),
    ("The reverse path: Kafka → doze for local testing", "the-reverse-path-kafka--doze-for-local-testing"),
])
def test_anchors_follow_githubs_rules(heading, anchor):
    assert anchor in anchors(f"## {heading}\n")
