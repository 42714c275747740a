#!/usr/bin/env python3
"""doze_kafka -- a small, single-file, Kafka-compatible broker. Standard library only.

    python3 doze_kafka.py                      # Kafka on 127.0.0.1:9092, data in ./doze-data
    python3 doze_kafka.py server.properties --port 9093 --override num.partitions=3

    import doze_kafka                          # a broker inside your own tests
    with doze_kafka.running() as broker:       # ephemeral port, temporary directory
        bootstrap = broker.bootstrap           # "127.0.0.1:PORT"

What it speaks: the Kafka wire protocol as Apache Kafka 4.3 does, for one node:
topics, Produce and Fetch on durable append-only logs, ListOffsets,
DeleteRecords, configs, consumer groups of both protocols (the classic one and
KIP-848's) with committed offsets, and the exactly-once protocol of KIP-98 -- idempotent and
transactional producers, markers, the last stable offset, read_committed --
with KIP-360 epoch recovery and KIP-447 offset commits, classic and, opt-in,
KIP-890's transaction version 2 (an epoch per transaction). Exact APIs and
versions: the HANDLERS table (filled by @api in §14-§17), or ``python3 doze_kafka.py --apis``.

Deliberately left out: replication (one broker is the whole cluster), KRaft,
topic ids on the wire (Fetch/Produce 13+), message format v0/v1, quotas,
fetch sessions (answered sessionless), tiered storage. Batches are stored and
served exactly as the producer sent them; doze never decompresses on the
produce or fetch path.

Reading guide -- the file reads top to bottom; nothing refers to a later chapter
(but Appendix A, Kafka's own config tables, generated, read last on purpose):
  §1 imports
  §2 config: doze's settings, how Kafka parses and checks a value,
     server.properties read as java.util.Properties reads it, the listeners
  §3 protocol vocabulary: API keys, error codes, the errors raised
  §4 wire codec: readers that refuse what Kafka's generated code refuses
  §5 schemas, with each field's nullability per version; request and
     response headers and frames, both sides
  §6 record batches and CRC-32C; what Produce checks inside a batch (framing,
     keys of compacted topics, timestamps), a record reader that trusts
     nothing, and the two rewrites a broker makes (recompression, LogAppendTime)
  §7 storage: every change to the disk through one layer (Files), what happens
     when the disk fails (a partition offline, never an fsync retried and
     trusted), descriptors opened on demand, segments with a bisectable time
     index, partition logs, and the flusher (the one other thread: a long
     group commit's fsyncs while the loop serves on)
  §8 meta.db and the topics: the metadata store (sqlite, fsynced by the group
     commit), LogManager: every partition of every topic, made and removed in steps
  §9 coordinators: where Kafka keeps their state (a partition of
     __transaction_state or __consumer_offsets, found by the id's hash), the
     journal (and its events in words), producer state (idempotence, the
     LSO), the group coordinator (the classic protocol)
  §10 log compaction: the log cleaner (Kafka's LogCleaner): the dirtiest
     compacted partition, its offset map, each batch kept, rebuilt, emptied
     or dropped (tombstones, aborted transactions, markers, each producer's
     last batch), in slices on the loop, swapped in crash-safely
  §11 the consumer group protocol (KIP-848): consumer groups beside the classic
     ones in the same registry, the server-side assignors (uniform, range, in
     Kafka's java.util.HashMap order), ConsumerGroups (heartbeats,
     reconciliation, session and rebalance timeouts, offsets with epochs)
  §12 transactions: producer ids handed out from blocks reserved in meta.db,
     the transaction.version feature, the transaction coordinator: the classic
     protocol (KIP-98) and version 2 (KIP-890: an epoch per transaction),
     doze's timing of EndTxn's answer, and Kafka's
  §13 security: SASL sessions (PLAIN, SCRAM), SCRAM credentials, and the
     authorizer (Kafka's StandardAuthorizer over ACLs in meta.db)
  §14 requests and the data path: how an API is declared (@api), what a
     handler may touch (RequestContext), requests that wait (Park, Purgatory)
     or run in steps (in_steps); Produce, Fetch, ListOffsets, Metadata, ...
  §15 group and transaction apis: the coordinators' protocols
  §16 config resources: what DescribeConfigs shows and AlterConfigs changes
  §17 administration and security apis: topics, configs, ACLs, SASL, SCRAM, quotas
  §18 connections: frames in and answers out in order, TLS on the loop (PEM
     stores, client certificates' principals), the faults a test asks for
     (Faults), the Dispatcher (request -> handler -> response), the limits and
     back-pressure, the listeners
  §19 console: what it shows: HTML and JSON twins of the transactions (each
     drawn as its state machine, its steps to the millisecond), producers,
     LSOs, topics, groups and the coordinators' events the broker holds, as
     each viewer's ACLs let it see them
  §20 console: http, login and its listener: its safety, its login against
     the broker's SASL users, the stylesheet and the small script it serves
  §21 the loop: the protocol trace (--trace: each request and answer, and the
     broker's own actions), the timers, the group commit, the Broker
  §22 embedding doze: running() for tests and what a test does to the broker
     (Embedded: faults, a FaultyDisk, a MovableClock, restarts, resets, its
     state without a consumer), the control endpoint for other languages,
     the pytest fixtures, and a small Client
  §23 demo: `python3 doze_kafka.py demo`, the transaction protocol step by step
     (FindCoordinator and InitProducerId, idempotence, a transaction with a
     group's offsets, commit, abort, fencing, the timeout, a crash between
     decision and markers, Kafka's timing), then a lab of what goes wrong (a
     zombie mid-transaction, a hanging transaction, a late EndTxn)
  §24 cli
  §A appendix: Kafka 4.3.1's config tables, generated from Kafka itself
To learn transactions: run `python3 doze_kafka.py demo` (README: "How a Kafka
transaction works, step by step"), then read each step's code:
  1 the coordinator     handle_find_coordinator, transaction_state_partition;
    and InitProducerId  handle_init_producer_id -> TransactionCoordinator.init_producer
  2 idempotence         produce_partition -> verify_producer, ProducerStateTable.check_append, .update
  3 a transaction       handle_add_partitions_to_txn -> TransactionCoordinator.add_partitions;
                        handle_produce (transactional batches); handle_add_offsets_to_txn,
                        handle_txn_offset_commit -> .stage_offsets; ProducerStates.last_stable_offset
  4 commit              handle_end_txn -> .end_txn -> ._write_markers -> .progress, ._complete
  5 abort, as consumers see it    the same; fetch_partitions -> ProducerStateTable.aborted_between
  6 fencing             .init_producer -> ._bump, ._fence_and_abort; .for_producer (PRODUCER_FENCED)
  7 the timeout         .tick -> ._fence_and_abort
  8 a crash, restarted  .load (a stored decision is carried out); rebuild_producer_state
  9 Kafka's timing      .end_txn (doze.transaction.answer.after), ._write_markers (the delay)
  10 a zombie           .init_producer -> ._fence_and_abort, with a transaction open
  11 a hanging one      verify_producer (transaction.partition.verification.enable),
                        handle_describe_producers, handle_write_txn_markers -> ProducerStateTable.check_marker
  12 a late EndTxn      handle_end_txn (KAFKA-17754), held by a test's fault (Faults, hold_ms);
                        version 2: handle_update_features -> Features; add_produced_partition ->
                        .add_implicitly; handle_end_txn v5 -> .end_txn_v2 -> ._decide_v2
Hostile input and overload: §4's Reader, §6's check_records, §18's Limits comment.
Failing disks and crashes: §7's "When the disk fails"; §8's LogManager.append and
flush_dirty, MetadataStore.transaction (StoreFailed, SYNC_NOW/ANSWERS/LATER)
and .sync, coordinator_store; §21's GroupCommit and §18's Connection.push.
"""

###############################################################################
# 1. IMPORTS
###############################################################################

import argparse
import array
import base64
import bisect
import collections
import contextlib
import dataclasses
import datetime
import decimal
import difflib
import enum
import errno
try:
    import fcntl                # the data directory's lock; Windows has none (msvcrt is not used)
except ImportError:
    fcntl = None
import functools
import gc
import hashlib
import heapq
import hmac
import html
import ipaddress
import itertools
import json
import logging
import operator
import os
import platform
import queue
import random
import re
import secrets
import selectors
import shutil
import signal
import socket
import sqlite3
try:
    import ssl                  # TLS listeners; a Python built without OpenSSL serves PLAINTEXT only
except ImportError:             # pragma: no cover
    ssl = None
import struct
import sys
import tempfile
import threading
import time
import types
import urllib.parse
import uuid
import weakref
import zlib

if sys.version_info < (3, 9):
    sys.exit("doze_kafka needs Python 3.9 or newer")

__version__ = "0.1.0"
log = logging.getLogger("doze_kafka")


class _OneLine(logging.Filter):
    """A log line stays one line: control characters in it (a client's group
    id, config name or client id may hold newlines) are written escaped."""

    def filter(self, record):
        text = record.getMessage()
        if not text.isprintable():
            record.msg, record.args = text.encode("unicode_escape").decode("ascii"), None
        return True


log.addFilter(_OneLine())


###############################################################################
# 2. CONFIG -- doze's settings, a value read as Kafka reads it, server.properties, listeners
###############################################################################
# Every setting has Kafka's own name and Kafka's own default, so a
# server.properties written for Apache Kafka configures doze the same way.
# Settings doze does not know are accepted and ignored (with a log line), as a
# Kafka broker ignores unknown ones.

BROKER_DEFAULTS = {
    "node.id": 1,
    "listeners": "PLAINTEXT://127.0.0.1:9092",
    "advertised.listeners": "",
    "listener.security.protocol.map": "SASL_SSL:SASL_SSL,PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT",
    "controller.listener.names": "",           # listeners of a KRaft controller: doze has none to serve
    "connection.failed.authentication.delay.ms": 100,   # a failed authentication is answered this late
    "sasl.server.max.receive.size": 524288,    # the largest frame before a SASL connection authenticates
    "sasl.enabled.mechanisms": "GSSAPI",       # Kafka's default, which doze does not serve: set it
    "connections.max.reauth.ms": 0,            # a SASL session's lifetime (KIP-368); 0: no end
    "authorizer.class.name": "",               # StandardAuthorizer: ACLs on; "": none (everything allowed)
    "super.users": "",                         # "User:admin;User:broker": allowed everything
    "allow.everyone.if.no.acl.found": False,   # the answer where no ACL names the resource
    "log.dirs": "./doze-data",
    "num.partitions": 1,
    "default.replication.factor": 1,
    "auto.create.topics.enable": True,
    "message.max.bytes": 1048588,              # the largest batch a topic accepts
    "log.segment.bytes": 1073741824,           # roll to a new segment file past this
    "log.retention.ms": 604800000,             # 7 days; -1 keeps forever
    "log.retention.bytes": -1,
    "log.retention.check.interval.ms": 300000,
    "log.cleaner.enable": True,                # compacted topics compacted (§10)
    "log.cleaner.backoff.ms": 15000,           # how often the cleaner looks, when it found nothing to clean
    "log.cleaner.dedupe.buffer.size": 134217728,   # the offset map: 24 bytes a key, as Kafka counts
    "log.cleaner.io.buffer.load.factor": 0.9,  # ... of which this much is filled
    "log.roll.ms": 604800000,
    "socket.request.max.bytes": 104857600,     # a frame over this closes the connection
    "max.connections": 2147483647,             # then stop accepting (doze: also fewer than descriptors allow)
    "max.connections.per.ip": 2147483647,      # past this a new connection is closed at once
    "max.connections.per.ip.overrides": "",    # "host:count,host:count"
    "connections.max.idle.ms": 600000,         # no byte in or out this long: closed
    "queued.max.requests": 500,                # doze: requests taken in per pass of the loop
    "doze.frame.timeout.ms": 30000,            # doze's own: a frame must arrive whole within this
    "transaction.max.timeout.ms": 900000,
    "producer.id.expiration.ms": 86400000,
    "producer.id.expiration.check.interval.ms": 600000,
    "transactional.id.expiration.ms": 604800000,
    "transaction.remove.expired.transaction.cleanup.interval.ms": 3600000,
    "delete.topic.enable": True,
    "group.initial.rebalance.delay.ms": 3000,
    "group.min.session.timeout.ms": 6000,
    "group.max.session.timeout.ms": 1800000,
    "group.max.size": 2147483647,
    "group.consumer.session.timeout.ms": 45000,   # KIP-848 groups (each group's consumer.* configs over these)
    "group.consumer.heartbeat.interval.ms": 5000,
    "group.consumer.assignment.interval.ms": 1000,  # a new target at most this often
    "group.consumer.max.size": 2147483647,
    "group.consumer.assignors": ["uniform", "range"],   # the first is the default
    "group.consumer.regex.refresh.interval.ms": 600000,  # regex subscriptions resolved again at least this often
    "group.consumer.migration.policy": "bidirectional",   # classic <-> consumer groups: upgrade, downgrade, disabled
    "offsets.retention.minutes": 10080,
    "offsets.retention.check.interval.ms": 600000,
    "offset.metadata.max.bytes": 4096,
    "offsets.topic.num.partitions": 50,        # __consumer_offsets, as Kafka shows it
    "offsets.topic.segment.bytes": 104857600,
    "transaction.state.log.num.partitions": 50,   # __transaction_state
    "transaction.state.log.segment.bytes": 104857600,
    "transaction.state.log.min.isr": 2,
    "transaction.partition.verification.enable": True,   # KIP-890 part 1: Produce asks the coordinator first
    "doze.check.crc": True,                    # doze's own: check each produced batch's CRC-32C
    "doze.loop.stats.interval.ms": 0,          # doze's own: log the loop's pass times this often (0: off)
    "doze.max.partitions": 20000,              # doze's own: partitions of all topics together, at most
    "doze.console.listener": "",               # doze's own: HOST:PORT of the web console ("": none; §19)
    "doze.console.hosts": "",                  # doze's own: more names the console answers to (Host)
    "doze.trace": "",                          # doze's own: the protocol trace: txn, group, all ("": off; §21)
    "doze.trace.ids": "",                      # doze's own: ... only of these transactional, group or client ids
    "doze.coordinator.waits.for.topic": True,  # doze's own: the first FindCoordinator waits while the internal
                                               # topic is made (Kafka's COORDINATOR_NOT_AVAILABLE); running(): no
    "doze.transaction.answer.after": "markers",  # doze's own: EndTxn answered once its markers are durable;
                                               # "decision": once PrepareCommit is, as Kafka answers (§12)
    "doze.transaction.markers.delay.ms": 0,    # doze's own: with "decision", the markers wait this long (Kafka's
                                               # WriteTxnMarkers to each leader, made long enough to see)
    "doze.transaction.version": 1,             # doze's own: the transaction.version feature at start: 1 classic
                                               # only; 2 KIP-890's version 2 besides (Kafka 4.x's default; §12)
}

TLS_SETTING_PREFIXES = ("ssl.", "listener.name.")   # acted on too: read per listener (§13, §18)

CONFIG_TYPE_CODES = {"boolean": 1, "string": 2, "int": 3, "short": 4, "long": 5,
                     "double": 6, "list": 7, "class": 8, "password": 9}
TOPIC_NAME = re.compile(r"[a-zA-Z0-9._-]{1,249}")
# Kafka's internal topics (Topic.INTERNAL_TOPICS). doze keeps groups' offsets and
# transactions in meta.db, but shows the topics as Kafka does (see LogManager).
CONSUMER_OFFSETS, TRANSACTION_STATE = "__consumer_offsets", "__transaction_state"
INTERNAL_TOPICS = {CONSUMER_OFFSETS, TRANSACTION_STATE, "__share_group_state"}
SEGMENT_HEADROOM = 64                           # bytes a segment may overshoot by


# --- Which settings doze acts on: one answer, for the start log and the README --
# doze acts on the settings of BROKER_DEFAULTS, the security settings it reads
# per listener (TLS_SETTING_PREFIXES), the inter-broker listener Kafka checks at
# start, and the topic configs of TOPIC_CONFIGS_USED with their broker synonyms
# (log.retention.hours for retention.ms, ...). Every other name of Kafka's is
# accepted, checked, stored and described as Kafka does, and not acted on; a
# name neither knows is kept and not used. The start log says which, once a
# setting given; test_doze_kafka.py finds every setting the code reads in here.

TOPIC_CONFIGS_USED = {"cleanup.policy", "compression.gzip.level", "compression.type", "max.message.bytes",
                      "delete.retention.ms", "min.cleanable.dirty.ratio", "min.compaction.lag.ms",
                      "max.compaction.lag.ms",
                      "message.timestamp.after.max.ms", "message.timestamp.before.max.ms",
                      "message.timestamp.type", "retention.bytes", "retention.ms", "segment.bytes", "segment.ms"}
SETTINGS_CHECKED_AT_START = {"inter.broker.listener.name", "security.inter.broker.protocol"}


def acts_on(name):
    """Does doze act on the broker setting `name`?"""
    return name in BROKER_DEFAULTS or name in SETTINGS_CHECKED_AT_START or name.startswith(TLS_SETTING_PREFIXES) \
        or any(name in KAFKA_TOPIC_CONFIGS[t][3] for t in TOPIC_CONFIGS_USED)


def setting_note(name, how=""):
    """What the log says of a setting given (at start, or `how`: " set
    dynamically"): (level, words), or None for one doze acts on. A name
    neither doze nor Kafka knows is a warning, with the nearest known name
    (a typo of one is the likely cause)."""
    if acts_on(name):
        return None
    if name in KAFKA_BROKER_CONFIGS or name in KAFKA_TOPIC_CONFIGS:
        return logging.INFO, f"setting {name}{how}: Kafka's, accepted and described; doze does not act on it"
    near = difflib.get_close_matches(name, list(BROKER_DEFAULTS) + list(KAFKA_BROKER_CONFIGS), n=1, cutoff=0.8)
    hint = f"; did you mean {near[0]}?" if near else ""
    return logging.WARNING, f"setting {name}{how}: not a setting of Kafka 4.3.1 or doze; kept, not used{hint}"


# --- Reading a config value as Kafka does ---------------------------------------
# Kafka parses a value's text by its type (ConfigDef.parseType), then lets its
# validator look at the parsed value, and describes it afterwards by the
# parsed value's text: " +5 " is stored and shown as "5". The messages are
# Kafka's, word for word (checked against a real Kafka 4.3.1).

class ConfigValueError(ValueError):
    """A config value Kafka's ConfigDef refuses; the text is Kafka's message."""


JAVA_WHITESPACE = "".join(map(chr, range(0x21)))        # what Java's String.trim() removes
INT_TEXT = re.compile(r"[+-]?[0-9]+")
DOUBLE_TEXT = re.compile(r"[+-]?(NaN|Infinity|(([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?)[fFdD]?)")
TYPE_BITS = {"short": 16, "int": 32, "long": 64}


def parse_config(name, kind, text):
    """The text of a config value -> the value, as Kafka's ConfigDef parses it."""
    t = text.strip(JAVA_WHITESPACE)
    if kind == "boolean":
        if t.lower() in ("true", "false"):
            return t.lower() == "true"
        raise ConfigValueError(f"Invalid value {text} for configuration {name}: "
                               "Expected value to be either true or false")
    if kind in TYPE_BITS:
        bits = TYPE_BITS[kind]
        if INT_TEXT.fullmatch(t) and -(1 << (bits - 1)) <= int(t) < 1 << (bits - 1):
            return int(t)
        raise ConfigValueError(f"Invalid value {text} for configuration {name}: "
                               f"Not a number of type {kind.upper()}")
    if kind == "double":
        if DOUBLE_TEXT.fullmatch(t):
            return float(t.rstrip("fFdD").replace("Infinity", "inf") if "Infinity" in t or
                         "NaN" in t else t.rstrip("fFdD"))
        raise ConfigValueError(f"Invalid value {text} for configuration {name}: "
                               "Not a number of type DOUBLE")
    if kind == "list":
        return [] if t == "" else re.split(r"\s*,\s*", t)
    return t


def java_text(value):
    """A parsed value as Java prints it (Kafka's messages and descriptions)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        if value != value:
            return "NaN"
        if value in (float("inf"), float("-inf")):
            return "Infinity" if value > 0 else "-Infinity"
        if value == 0 or 1e-3 <= abs(value) < 1e7:
            return repr(value) if value != int(value) else f"{value:.1f}"
        sign, digits, exponent = decimal.Decimal(repr(value)).normalize().as_tuple()
        ds = "".join(map(str, digits))                      # Java: d.dddE<n>, shortest digits
        return f"{'-' if sign else ''}{ds[0]}.{ds[1:] or '0'}E{exponent + len(ds) - 1}"
    if isinstance(value, list):
        return ",".join(value)
    return str(value)


def check_config(name, check, value):
    """Kafka's validator for one parsed value (a check tuple of the table above)."""
    kind = check[0] if check else None
    if kind == "range":
        lo, hi = check[1], check[2]
        shown = f"[{', '.join(value)}]" if isinstance(value, list) else java_text(value)
        if lo is not None and value < lo:
            raise ConfigValueError(f"Invalid value {shown} for configuration {name}: Value must be at least {lo}")
        if hi is not None and value > hi:
            raise ConfigValueError(f"Invalid value {shown} for configuration {name}: Value must be no more than {hi}")
    elif kind in ("in", "in_ci"):
        ok = value in check[1:] if kind == "in" else value.upper() in (s.upper() for s in check[1:])
        if not ok:
            raise ConfigValueError(f"Invalid value {value} for configuration {name}: String must be one of"
                                   f"{' (case insensitive)' if kind == 'in_ci' else ''}: {', '.join(check[1:])}")
    elif kind in ("list", "list_nonempty"):
        allowed = check[1:]
        if kind == "list_nonempty" and not value:
            raise ConfigValueError(f"Configuration '{name}' must not be empty. Valid values include: " +
                                   (f"[{', '.join(allowed)}]" if allowed else "any non-empty value"))
        for member in value:
            if member == "":
                raise ConfigValueError(f"Configuration '{name}' values must not be empty.")
            if allowed and member not in allowed:
                raise ConfigValueError(f"Invalid value {member} for configuration {name}: "
                                       f"String must be one of: {', '.join(allowed)}")
    elif kind == "or":                                      # compression.gzip.level
        (_, lo, hi), (_, only) = check[1], check[2]
        if not (lo <= value <= hi or value == only):
            raise ConfigValueError(f"Invalid value {value} for configuration {name}: "
                                   f"Value must be between {lo} and {hi} or equal to {only}")
    elif kind == "replicas":
        members = [m.strip() for m in value]
        if not (all(re.fullmatch(r"([0-9]+:[0-9]+)?", m) for m in members) or "".join(members) == "*"):
            raise ConfigValueError(
                f"Invalid value [{', '.join(value)}] for configuration {name}: {name} must be the "
                "literal '*' or a list of replicas in the following format: "
                "[partitionId]:[brokerId],[partitionId]:[brokerId],...")
    elif kind == "non_empty" and value == "":
        raise ConfigValueError(f"Invalid value  for configuration {name}: String must be non-empty")
    elif check == ("custom", "ShareGroupAutoOffsetResetStrategy.Validator") and not share_offset_reset_ok(value):
        raise ConfigValueError(f"Invalid value {value} for configuration {name}: Invalid value `{value}` for "
                               f"configuration {name}. The value must be either 'earliest', 'latest' or of "
                               "the format 'by_duration:<PnDTnHnMn.nS>'.")


# java.time.Duration.parse's grammar: PnDTnHnMn.nS, each part optional but one, signs allowed
JAVA_DURATION = re.compile(r"([-+]?)P(?:([-+]?[0-9]+)D)?(T(?:([-+]?[0-9]+)H)?(?:([-+]?[0-9]+)M)?"
                           r"(?:([-+]?[0-9]+)(?:[.,]([0-9]{0,9}))?S)?)?", re.IGNORECASE)


def share_offset_reset_ok(text):
    """A share group's auto.offset.reset as ShareGroupAutoOffsetResetStrategy
    reads it: earliest, latest, or by_duration:<an ISO-8601 duration not negative>."""
    if text in ("earliest", "latest"):
        return True
    m = JAVA_DURATION.fullmatch(text[len("by_duration:"):]) if text.startswith("by_duration:") else None
    if m is None or m.group(2) is None and m.group(3) is None or (m.group(3) or "").upper() == "T":
        return False
    days, hours, minutes, seconds = (int(g or 0) for g in m.group(2, 4, 5, 6))
    nanos = int((m.group(7) or "").ljust(9, "0")) * (-1 if (m.group(6) or "").startswith("-") else 1)
    total = ((days * 24 + hours) * 60 + minutes) * 60 + seconds + nanos / 1e9
    return (-total if m.group(1) == "-" else total) >= 0


def normalize_config(name, kind, check, text):
    """Parse, check and describe one value: -> the text Kafka stores and shows."""
    value = parse_config(name, kind, text)
    if isinstance(value, list):
        value = list(dict.fromkeys(value))                  # Kafka drops repeated members
    check_config(name, check, value)
    return java_text(value) if kind != "list" else ",".join(value)


def convert_setting(name, value):
    """A broker setting's text -> the type doze reads it as (the type of its
    default in BROKER_DEFAULTS; other settings stay text), checked as Kafka
    checks it."""
    if not isinstance(value, str):
        return value
    spec = KAFKA_BROKER_CONFIGS.get(name)
    if spec is not None:
        value = normalize_config(name, spec[0], spec[2], value)
    default = BROKER_DEFAULTS.get(name)
    if isinstance(default, bool):
        return parse_config(name, "boolean", value)
    if isinstance(default, int):
        return parse_config(name, "long", value)
    return value


# --- server.properties, as Java reads it ----------------------------------------

PROPERTIES_WHITESPACE = " \t\f"
PROPERTIES_ESCAPE = re.compile(r"\\(u[0-9a-fA-F]{4}|u|.)", re.DOTALL)


def read_java_properties(data):
    """A .properties file -> {key: value}, as java.util.Properties.load reads it.

    bytes are read as load(InputStream) reads them -- one ISO-8859-1 char a
    byte, never UTF-8 -- which is what Kafka's Utils.loadProps does with
    server.properties; a str is read as load(Reader). The rules (JDK 17):
    natural lines end at \\n, \\r or \\r\\n; one ending in an odd number of
    backslashes goes on (that backslash dropped) with the next, its leading
    spaces, tabs and form feeds skipped. A logical line that starts, after
    such whitespace, with # or ! is a comment (its trailing backslash
    continues nothing); a blank one is skipped. The key ends at the first
    unescaped =, : or whitespace; then whitespace, at most one = or :, and
    whitespace again separate it from the value, whose trailing whitespace is
    kept. In keys and values \\t \\n \\r \\f and \\uXXXX are decoded, and a
    backslash before any other character gives that character; a malformed
    \\uXXXX raises ValueError (Java: IllegalArgumentException). A key
    given twice keeps its last value."""
    text = data.decode("latin-1") if isinstance(data, bytes) else data
    props, logical, start = {}, "", 0
    naturals = re.split(r"\r\n|\r|\n", text)
    # Java's quirk: a continuation cut short by the end of the file, or by a
    # last \n or \r (not \r\n), ends a logical line even if it is empty
    last = len(naturals) - (naturals[-1] == "" and not text.endswith("\r\n"))
    for number, natural in enumerate(naturals, 1):
        natural = natural.lstrip(PROPERTIES_WHITESPACE)
        if not logical and (not natural or natural[0] in "#!"):
            continue                                # blank line or comment
        start = start if logical else number
        logical += natural
        if (len(natural) - len(natural.rstrip("\\"))) % 2:
            logical = logical[:-1]                  # continued on the next line
            if number < last:
                continue
        key, value = split_java_property(logical, start)
        props[key] = value
        logical = ""
    return props


def split_java_property(line, number):
    end = 0                                         # the key: up to =, : or whitespace
    while end < len(line) and line[end] not in "=:" + PROPERTIES_WHITESPACE:
        end += 2 if line[end] == "\\" else 1
    value = line[end:].lstrip(PROPERTIES_WHITESPACE)
    if value[:1] in ("=", ":"):
        value = value[1:].lstrip(PROPERTIES_WHITESPACE)
    return (java_unescape(line[:end], number), java_unescape(value, number))


def java_unescape(text, number):
    def one(m):
        c = m.group(1)
        if c == "u":
            raise ValueError(f"line {number}: Malformed \\uxxxx encoding in {text!r}")
        if c[0] == "u":
            return chr(int(c[1:], 16))
        return {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}.get(c, c)
    out = PROPERTIES_ESCAPE.sub(one, text)          # \uD83D\uDE00 -> one character:
    return out.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "surrogatepass")


class Config:
    """The broker's settings: Kafka's names, Kafka's defaults, plus doze's own
    (data_dir, host, port, clock). Build from a server.properties file and/or
    overrides; every value is read through config[name]."""

    def __init__(self, settings=None, data_dir=None, host=None, port=None, clock=None):
        self.settings = dict(BROKER_DEFAULTS)
        self.given = set(settings or ())          # named in server.properties or overrides
        self.dynamic_cluster = {}                 # set by AlterConfigs for broker "": name -> text
        self.dynamic_node = {}                    # ... for this broker's id
        for name, value in (settings or {}).items():
            note = setting_note(name)
            if note:
                log.log(*note)
            self.settings[name] = convert_setting(name, value)
        self.static_settings = dict(self.settings)
        self.listeners, self.advertised = self._listeners(host, port)
        self.host = self.listeners[0].host or "0.0.0.0"    # the first listener: --host/--port change it
        self.port = self.listeners[0].port
        self.data_dir = os.path.abspath(data_dir or self.settings["log.dirs"].split(",")[0])
        self.clock = clock or time.time           # seconds, as time.time(); tests inject a fake

    def __getitem__(self, name):
        return self.settings[name]

    def _listeners(self, host, port):
        """The listeners clients reach (not controller.listener.names: doze has
        no KRaft controller to serve there) and the advertised one per name."""
        protocols = parse_protocol_map(self.settings["listener.security.protocol.map"])
        controller = {n.strip().upper() for n in self.settings["controller.listener.names"].split(",")}
        every = parse_listeners(self.settings["listeners"], protocols)
        served = [l for l in every if l.name not in controller]
        self.controller_listeners = [l for l in every if l.name in controller]   # described, not bound
        if not served:
            raise ValueError("listeners: none for clients (every one is in controller.listener.names)")
        if host is not None or port is not None:
            served[0] = served[0]._replace(host=served[0].host if host is None else host,
                                           port=served[0].port if port is None else port)
        advertised = {l.name: l for l in parse_listeners(self.settings["advertised.listeners"], protocols,
                                                         "advertised.listeners") if l.name not in controller}
        if any(l.host == "0.0.0.0" for l in advertised.values()):
            raise ValueError("advertised.listeners cannot use the nonroutable meta-address 0.0.0.0. "
                             "Use a routable IP address.")
        names = set(advertised) or {l.name for l in served}
        inter_broker = (self.settings.get("inter.broker.listener.name")
                        or self.settings.get("security.inter.broker.protocol") or "PLAINTEXT").upper()
        if inter_broker not in names:
            raise ValueError(f"inter.broker.listener.name must be a listener name defined in "
                             f"advertised.listeners. The valid options based on currently configured "
                             f"listeners are {','.join(sorted(names))}")
        if not names <= {l.name for l in served}:
            raise ValueError(f"advertised.listeners listener names must be equal to or a subset of the "
                             f"ones defined in listeners. Found {','.join(sorted(names))}. The valid options "
                             f"based on the current configuration are {','.join(l.name for l in served)}")
        return served, advertised

    def set_text(self, name):
        """A broker setting's text where one was given (AlterConfigs for this
        broker, for the cluster, server.properties), else None."""
        for dynamic in (self.dynamic_node, self.dynamic_cluster):
            if name in dynamic:
                return dynamic[name]
        return self.static_text(name) if name in self.given else None

    def settle_started(self):
        """What a started broker reports of the settings Kafka requires (log.dirs
        is the data directory; node.id as used) when they were not given."""
        if "log.dirs" not in self.given:
            self.set_static("log.dirs", self.data_dir)
        if "node.id" not in self.given:             # Kafka has no default: it must be set
            self.set_static("node.id", self["node.id"])

    def set_default(self, name, value):
        """A default of the command line's own (the console's address): taken
        unless a setting named it; not a setting given (described as a default)."""
        if name not in self.given:
            self.settings[name] = self.static_settings[name] = value

    def set_static(self, name, value):
        """A setting the command line or running() gave (the data directory,
        the address): described as server.properties' ones are."""
        self.settings[name] = self.static_settings[name] = value
        self.given.add(name)

    def static_text(self, name):
        value = self.static_settings[name]
        return value if isinstance(value, str) else java_text(value)

    def set_dynamic(self, node, name, text):
        """A dynamic value for the cluster (node False) or this broker; None
        removes it. What doze reads of it takes effect at once."""
        dynamic = self.dynamic_node if node else self.dynamic_cluster
        if text is None:
            dynamic.pop(name, None)
        else:
            dynamic[name] = text
        if name in BROKER_DEFAULTS:
            now = self.set_text(name)
            self.settings[name] = self.static_settings[name] if now is None else convert_setting(name, now)

    @classmethod
    def from_properties(cls, path, **kw):
        """A server.properties file, read as Kafka reads it (read_java_properties
        of its bytes), under the settings given (which win)."""
        with open(path, "rb") as f:
            settings = read_java_properties(f.read())
        settings.update(kw.pop("settings", None) or {})
        return cls(settings, **kw)


# --- Listeners -----------------------------------------------------------------
# listeners=NAME://host:port,... names the sockets the broker serves; a name is
# not a protocol: listener.security.protocol.map gives each name one of the four
# (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL). advertised.listeners says, per name,
# the address clients are told (Metadata, FindCoordinator, DescribeCluster answer
# with the listener the request came in on). An empty host binds every address.

Listener = collections.namedtuple("Listener", "name host port protocol")
SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")


def parse_protocol_map(text):
    """listener.security.protocol.map -> {NAME: protocol}, as Kafka checks it."""
    out = {}
    for item in filter(None, (i.strip() for i in text.split(","))):
        name, sep, protocol = item.partition(":")
        if not sep or protocol.strip().upper() not in SECURITY_PROTOCOLS:
            raise ValueError(f"listener.security.protocol.map: {item!r} is not NAME:PROTOCOL "
                             f"with PROTOCOL one of {', '.join(SECURITY_PROTOCOLS)}")
        out[name.strip().upper()] = protocol.strip().upper()
    return out


def parse_listeners(text, protocols, setting="listeners"):
    """'NAME://host:port,...' -> [Listener], checked as Kafka's
    listenerListToEndPoints checks them (its messages): every name in the
    protocol map, names unique, and for listeners ports unique (0 aside)."""
    out = []

    def refuse(why):
        return ValueError(f"{setting}: Error creating broker listeners from '{text}': {why}")
    for item in filter(None, (i.strip() for i in text.split(","))):
        m = re.fullmatch(r"([A-Za-z0-9_]+)://\[?([^\]]*?)\]?:(\d+)", item)
        if not m:
            raise refuse(f"Unable to parse {item} to a broker endpoint")
        name = m.group(1).upper()
        if name not in protocols:
            raise refuse(f"No security protocol defined for listener {name}")
        out.append(Listener(name, m.group(2), int(m.group(3)), protocols[name]))
    names = [l.name for l in out]
    if len(set(names)) != len(names):
        raise refuse(f"Each listener must have a different name, listeners: {text}")
    ports = [l.port for l in out if l.port]
    if setting == "listeners" and len(set(ports)) != len(ports):
        raise refuse(f"Each listener must have a different port, listeners: {text}")
    return out


def listener_setting(config, listener, name):
    """A security setting for one listener: listener.name.<name>.<setting>,
    else <setting>, else Kafka's default (None when Kafka has none)."""
    for key in (f"listener.name.{listener.name.lower()}.{name}", name):
        if key in config.settings:
            return config.settings[key]
    spec = KAFKA_BROKER_CONFIGS.get(name)
    return spec[1] if spec and spec[1] is not ... else None


def format_listeners(listeners):
    return ",".join(f"{l.name}://{f'[{l.host}]' if ':' in l.host else l.host}:{l.port}" for l in listeners)


# Glossary: the names this file uses for the things Kafka talks about.
TopicPartition = tuple          # ("orders", 3)
ProducerId = int                # int64 handed out by InitProducerId
Epoch = int                     # int16; raised to fence an older producer
Msg = types.SimpleNamespace     # a decoded request or a response being built


###############################################################################
# 3. PROTOCOL VOCABULARY -- API keys, error codes, errors
###############################################################################
# Names are the protocol's own (Kafka's ApiKeys and Errors Java enums), so they
# survive a grep of Kafka's source and its protocol guide.

class ApiKey(enum.IntEnum):
    """Kafka's API keys (ApiKeys.java): the int16 every request header starts with."""
    PRODUCE = 0
    FETCH = 1
    LIST_OFFSETS = 2
    METADATA = 3
    OFFSET_COMMIT = 8
    OFFSET_FETCH = 9
    FIND_COORDINATOR = 10
    JOIN_GROUP = 11
    HEARTBEAT = 12
    LEAVE_GROUP = 13
    SYNC_GROUP = 14
    DESCRIBE_GROUPS = 15
    LIST_GROUPS = 16
    SASL_HANDSHAKE = 17
    API_VERSIONS = 18
    CREATE_TOPICS = 19
    DELETE_TOPICS = 20
    DELETE_RECORDS = 21
    INIT_PRODUCER_ID = 22
    ADD_PARTITIONS_TO_TXN = 24
    ADD_OFFSETS_TO_TXN = 25
    END_TXN = 26
    WRITE_TXN_MARKERS = 27
    TXN_OFFSET_COMMIT = 28
    DESCRIBE_ACLS = 29
    CREATE_ACLS = 30
    DELETE_ACLS = 31
    DESCRIBE_CONFIGS = 32
    ALTER_CONFIGS = 33
    DESCRIBE_LOG_DIRS = 35
    SASL_AUTHENTICATE = 36
    CREATE_PARTITIONS = 37
    DELETE_GROUPS = 42
    INCREMENTAL_ALTER_CONFIGS = 44
    OFFSET_DELETE = 47
    DESCRIBE_CLIENT_QUOTAS = 48
    DESCRIBE_USER_SCRAM_CREDENTIALS = 50
    ALTER_USER_SCRAM_CREDENTIALS = 51
    UPDATE_FEATURES = 57
    DESCRIBE_CLUSTER = 60
    DESCRIBE_PRODUCERS = 61
    DESCRIBE_TRANSACTIONS = 65
    LIST_TRANSACTIONS = 66
    CONSUMER_GROUP_HEARTBEAT = 68
    CONSUMER_GROUP_DESCRIBE = 69
    DESCRIBE_TOPIC_PARTITIONS = 75


class ErrorCode(enum.IntEnum):
    """Kafka error codes doze can return (Kafka's org.apache.kafka.common.protocol.Errors)."""
    UNKNOWN_SERVER_ERROR = -1
    NONE = 0
    OFFSET_OUT_OF_RANGE = 1
    CORRUPT_MESSAGE = 2
    UNKNOWN_TOPIC_OR_PARTITION = 3
    INVALID_FETCH_SIZE = 4
    LEADER_NOT_AVAILABLE = 5
    NOT_LEADER_OR_FOLLOWER = 6
    REQUEST_TIMED_OUT = 7
    MESSAGE_TOO_LARGE = 10
    OFFSET_METADATA_TOO_LARGE = 12
    COORDINATOR_LOAD_IN_PROGRESS = 14
    COORDINATOR_NOT_AVAILABLE = 15
    NOT_COORDINATOR = 16
    INVALID_TOPIC_EXCEPTION = 17
    RECORD_LIST_TOO_LARGE = 18
    NOT_ENOUGH_REPLICAS = 19
    INVALID_REQUIRED_ACKS = 21
    ILLEGAL_GENERATION = 22
    INCONSISTENT_GROUP_PROTOCOL = 23
    INVALID_GROUP_ID = 24
    UNKNOWN_MEMBER_ID = 25
    INVALID_SESSION_TIMEOUT = 26
    REBALANCE_IN_PROGRESS = 27
    INVALID_COMMIT_OFFSET_SIZE = 28
    TOPIC_AUTHORIZATION_FAILED = 29
    GROUP_AUTHORIZATION_FAILED = 30
    CLUSTER_AUTHORIZATION_FAILED = 31
    INVALID_TIMESTAMP = 32
    UNSUPPORTED_SASL_MECHANISM = 33
    ILLEGAL_SASL_STATE = 34
    UNSUPPORTED_VERSION = 35
    TOPIC_ALREADY_EXISTS = 36
    INVALID_PARTITIONS = 37
    INVALID_REPLICATION_FACTOR = 38
    INVALID_REPLICA_ASSIGNMENT = 39
    INVALID_CONFIG = 40
    NOT_CONTROLLER = 41
    INVALID_REQUEST = 42
    UNSUPPORTED_FOR_MESSAGE_FORMAT = 43
    POLICY_VIOLATION = 44
    OUT_OF_ORDER_SEQUENCE_NUMBER = 45
    DUPLICATE_SEQUENCE_NUMBER = 46
    INVALID_PRODUCER_EPOCH = 47
    INVALID_TXN_STATE = 48
    INVALID_PRODUCER_ID_MAPPING = 49
    INVALID_TRANSACTION_TIMEOUT = 50
    CONCURRENT_TRANSACTIONS = 51
    TRANSACTION_COORDINATOR_FENCED = 52
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
    SECURITY_DISABLED = 54
    OPERATION_NOT_ATTEMPTED = 55
    KAFKA_STORAGE_ERROR = 56
    SASL_AUTHENTICATION_FAILED = 58
    UNKNOWN_PRODUCER_ID = 59
    INVALID_RECORD = 87
    NON_EMPTY_GROUP = 68
    GROUP_ID_NOT_FOUND = 69
    FETCH_SESSION_ID_NOT_FOUND = 70
    INVALID_FETCH_SESSION_EPOCH = 71
    FENCED_LEADER_EPOCH = 74
    UNKNOWN_LEADER_EPOCH = 75
    GROUP_MAX_SIZE_REACHED = 81
    FENCED_INSTANCE_ID = 82
    MEMBER_ID_REQUIRED = 79
    GROUP_SUBSCRIBED_TO_TOPIC = 86
    UNSTABLE_OFFSET_COMMIT = 88
    PRODUCER_FENCED = 90
    INVALID_UPDATE_VERSION = 95
    UNKNOWN_TOPIC_ID = 100
    TOPIC_DELETION_DISABLED = 73
    RESOURCE_NOT_FOUND = 91
    DUPLICATE_RESOURCE = 92
    UNACCEPTABLE_CREDENTIAL = 93
    MISMATCHED_ENDPOINT_TYPE = 114
    UNSUPPORTED_ENDPOINT_TYPE = 115
    TRANSACTIONAL_ID_NOT_FOUND = 105
    TRANSACTION_ABORTABLE = 120
    FENCED_MEMBER_EPOCH = 110            # KIP-848's consumer groups
    UNRELEASED_INSTANCE_ID = 111
    UNSUPPORTED_ASSIGNOR = 112
    STALE_MEMBER_EPOCH = 113
    INVALID_REGULAR_EXPRESSION = 128


def kafka_uuid(data):
    """A topic id as Kafka's tools print one (Uuid.toString: base64, URL-safe, no padding)."""
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


class TxnState(enum.Enum):
    """Transaction states, by the names DescribeTransactions and ListTransactions use."""
    EMPTY = "Empty"
    ONGOING = "Ongoing"
    PREPARE_COMMIT = "PrepareCommit"
    PREPARE_ABORT = "PrepareAbort"
    COMPLETE_COMMIT = "CompleteCommit"
    COMPLETE_ABORT = "CompleteAbort"
    DEAD = "Dead"
    PREPARE_EPOCH_FENCE = "PrepareEpochFence"


class KafkaError(Exception):
    """A protocol-level failure. Raised anywhere below the handlers (§14-§17);
    a handler (or the Dispatcher) turns it into an error_code in the response."""

    def __init__(self, code, detail=""):
        super().__init__(f"{code.name}: {detail}" if detail else code.name)
        self.code = code
        self.detail = detail


class ProtocolError(Exception):
    """The bytes could not be understood (truncated, bad length, bad header).
    The connection is closed, as Kafka does; nothing is sent back."""


# Version-dependent errors are data, applied once by the encoder. Source: the
# "Version N adds support for new error code X" notes in Kafka's message JSON
# and KafkaApis' error mapping for older clients.
# (api, error) -> (first version that knows the error, what older versions get)
OLDER_CLIENTS_GET = {
    (ApiKey.INIT_PRODUCER_ID, ErrorCode.PRODUCER_FENCED): (4, ErrorCode.INVALID_PRODUCER_EPOCH),
    (ApiKey.ADD_PARTITIONS_TO_TXN, ErrorCode.PRODUCER_FENCED): (2, ErrorCode.INVALID_PRODUCER_EPOCH),
    (ApiKey.ADD_OFFSETS_TO_TXN, ErrorCode.PRODUCER_FENCED): (2, ErrorCode.INVALID_PRODUCER_EPOCH),
    (ApiKey.END_TXN, ErrorCode.PRODUCER_FENCED): (2, ErrorCode.INVALID_PRODUCER_EPOCH),
    (ApiKey.PRODUCE, ErrorCode.PRODUCER_FENCED): (99, ErrorCode.INVALID_PRODUCER_EPOCH),
}


def error_for_version(api_key, version, code):
    """The error code a client speaking `version` of `api_key` understands."""
    first_version, fallback = OLDER_CLIENTS_GET.get((api_key, code), (0, code))
    return code if version >= first_version else fallback


def remade(node, edit):
    """A copy of a message (its structs and lists; values shared), edit(copy)
    applied to each struct once its own fields are copied: how what shows a
    message (the trace, the log) changes it without touching the original."""
    if isinstance(node, list):
        return [remade(x, edit) for x in node]
    if not isinstance(node, types.SimpleNamespace):
        return node
    out = types.SimpleNamespace(**{k: remade(v, edit) for k, v in vars(node).items()})
    edit(out)
    return out


def errors_as_sent(api_key, version, msg):
    """A copy of an answer with every error code as the encoder will send it to
    this version (for what shows an answer: the trace); msg itself if none changes."""
    if not any(key == api_key for key, _ in OLDER_CLIENTS_GET):
        return msg

    def fix(out):
        for k, v in vars(out).items():
            if k.endswith("error_code") and v:
                setattr(out, k, error_for_version(api_key, version, ErrorCode(v)))
    return remade(msg, fix)


def where(e):
    """An exception in one line: its type and text, and the doze line it came from."""
    tb, place = e.__traceback__, ""
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == __file__:
            place = f" (at line {tb.tb_lineno}, in {tb.tb_frame.f_code.co_name})"
        tb = tb.tb_next
    return f"{type(e).__name__}: {e}{place}"


###############################################################################
# 4. WIRE CODEC -- primitive types, frames
###############################################################################
# Kafka's wire format is big-endian fixed-width integers, plus (since KIP-482's
# "flexible versions") unsigned varints for lengths and a trailing section of
# tagged fields in every struct. Classic versions write a string as an int16
# length (-1 = null) and an array as an int32 count; flexible ones write
# "compact" lengths as uvarint(N + 1), where 0 means null.

I8, I16, I32, I64 = (struct.Struct(f">{c}") for c in "bhiq")
U16, U32, F64, BOOL = struct.Struct(">H"), struct.Struct(">I"), struct.Struct(">d"), struct.Struct(">?")
UUID_ZERO = bytes(16)


MAX_REQUEST_ELEMENTS = 50_000   # array elements one request may hold, all arrays together


class Reader:
    """A cursor over one request body. Every read succeeds or raises ProtocolError,
    and nothing is allocated for a length before it is known to fit. `budget`
    bounds the array elements decoded, and so the work one request costs the
    loop (Kafka has no such bound; no client comes near it: a Fetch of every
    partition doze allows is under half of it)."""
    __slots__ = ("buf", "pos", "end", "budget")

    def __init__(self, buf, pos=0):
        self.buf = memoryview(buf)
        self.pos = pos
        self.end = len(self.buf)
        self.budget = MAX_REQUEST_ELEMENTS

    def fixed(self, s):
        pos = self.pos
        if pos + s.size > self.end:
            raise ProtocolError(f"need {s.size} bytes at offset {pos}, have {self.end - pos}")
        self.pos = pos + s.size
        return s.unpack_from(self.buf, pos)[0]

    def take(self, n):
        pos = self.pos
        if n < 0 or pos + n > self.end:
            raise ProtocolError(f"need {n} bytes at offset {pos}, have {self.end - pos}")
        self.pos = pos + n
        return self.buf[pos:pos + n]

    def uvarint(self, max_bytes=5):
        """Unsigned LEB128: 7 bits a byte, low bits first, high bit = more follows.
        The protocol's are 32-bit (at most 5 bytes, read as Java reads them:
        the low 32 bits, signed); records' 64-bit varlongs take up to 10."""
        result = shift = 0
        buf, pos, end = self.buf, self.pos, self.end
        for _ in range(max_bytes):
            if pos >= end:
                raise ProtocolError("varint runs past the end of the body")
            byte = buf[pos]
            pos += 1
            result |= (byte & 0x7F) << shift
            if byte < 0x80:
                self.pos = pos
                if max_bytes == 5:
                    result &= 0xFFFFFFFF
                    return result - (1 << 32) if result >= 1 << 31 else result
                return result & 0xFFFFFFFFFFFFFFFF
            shift += 7
        raise ProtocolError(f"varint longer than {max_bytes} bytes")

    def varint(self):
        """Signed varint, zig-zag encoded (records use these): 32 bits."""
        n = self.uvarint() & 0xFFFFFFFF
        return (n >> 1) ^ -(n & 1)

    def varlong(self):
        """Signed 64-bit varint, zig-zag encoded (a record's timestamp delta)."""
        n = self.uvarint(10)
        return (n >> 1) ^ -(n & 1)

    def length(self, flexible, classic):
        """A string/bytes/array length; negative means null. Compact lengths are
        N + 1 as a 32-bit varint, in Java's int arithmetic."""
        if flexible:
            n = self.uvarint() - 1
            return n if n >= -(1 << 31) else (1 << 31) - 1
        return self.fixed(classic)


class FileSlice:
    """`count` bytes of an open file from `offset`: a Fetch response's records,
    sent with os.sendfile so they never pass through Python."""
    __slots__ = ("file", "offset", "count", "end_offset")

    def __init__(self, file, offset, count, end_offset=None):
        self.file, self.offset, self.count = file, offset, count
        self.end_offset = end_offset      # the log offset after the last record in it

    def __len__(self):
        return self.count

    def read(self):
        return os.pread(self.file.fileno(), self.count, self.offset)


class Writer:
    """Builds one response: bytes, with FileSlices spliced in as separate chunks."""
    __slots__ = ("out", "chunks")

    def __init__(self):
        self.out = bytearray()
        self.chunks = []

    def fixed(self, s, value):
        self.out += s.pack(value)

    def uvarint(self, n):
        out = self.out
        while n >= 0x80:
            out.append((n & 0x7F) | 0x80)
            n >>= 7
        out.append(n)

    def varint(self, n):
        self.uvarint((n << 1) ^ (n >> 63))

    def length(self, flexible, classic, n):
        if flexible:
            self.uvarint(n + 1)
        else:
            self.out += classic.pack(n)

    def splice(self, file_slice):
        self.chunks.append(bytes(self.out))
        self.chunks.append(file_slice)
        self.out = bytearray()

    def finish(self):
        """The response as a list of chunks (bytes and FileSlices)."""
        if self.out or not self.chunks:
            self.chunks.append(bytes(self.out))
        return self.chunks


def uvarint_bytes(n):
    w = Writer()
    w.uvarint(n)
    return bytes(w.out)


def varint_bytes(n):
    w = Writer()
    w.varint(n)
    return bytes(w.out)


###############################################################################
# 5. SCHEMAS -- every API's request and response, declared once as data
###############################################################################
# Each API is a text block that reads like Kafka's protocol guide:
#
#   <ApiName>  key=<n>  versions=<lo>-<hi>  flexible=<v>+ | none
#     request | response
#       <field>  <type>[?[<a>+ | <a>-<b>]]  [= <default>]  [v<a>+ | v<a>-<b>]  [tag=<n>]
#
# Types: bool int8 int16 int32 int64 uint16 float64 uuid string bytes records.
# "[]T" is an array of a primitive; a bare "[]" is an array of the struct whose
# fields follow, indented; "{}" is a single nested struct. "?" marks a field
# that may be null -- in every version it has, or only in the versions that
# follow it ("string?7+": Kafka's nullableVersions). A null anywhere else is
# refused both ways: a request carrying one does not decode (Kafka closes the
# connection), and a response carrying one is a bug the encoder raises on.
# Compact or classic encoding is never written: it follows from flexible=
# (KIP-482). A field absent in a version decodes to its default, so handlers
# read req.producer_id without checking versions. Field names are the
# snake_case of Apache Kafka's message JSON names; conformance/schemacheck.py
# compares every field, version and nullability with Kafka's own JSON.

@dataclasses.dataclass
class Field:
    """One field of a schema: its type, the versions it is in, its nullability and default."""
    name: str
    type: str                    # "int16", "string", "[]int32", "[]" or "{}"
    nullable: object = None      # (first, last) version in which null is allowed, or None
    default: object = None
    since: int = 0               # first version with this field
    until: int = 32767           # last version with this field
    tag: object = None           # tagged-field number (flexible versions only)
    fields: list = dataclasses.field(default_factory=list)   # children of [] and {}

    def in_version(self, v):
        return self.since <= v <= self.until

    def nullable_in(self, v):
        return self.nullable is not None and self.nullable[0] <= v <= self.nullable[1]


@dataclasses.dataclass
class Api:
    """One API's schema: its key, versions, flexible versions, request and response fields."""
    name: str
    key: int
    min_version: int
    max_version: int
    flexible_from: object         # first flexible version, or None
    request: list = dataclasses.field(default_factory=list)
    response: list = dataclasses.field(default_factory=list)
    min_served: int = None        # versions below this are advertised but refused
    classic_max: int = None       # the last version advertised without transaction version 2

    def advertised_max(self, transaction_version):
        return self.max_version if transaction_version >= 2 else self.classic_max

    def flexible(self, version):
        return self.flexible_from is not None and version >= self.flexible_from


_HEADER = re.compile(r"(?P<name>\w+)\s+key=(?P<key>\d+)\s+versions=(?P<lo>\d+)-(?P<hi>\d+)"
                     r"\s+flexible=(?:(?P<flex>\d+)\+|none)")
_FIELD = re.compile(r"(?P<indent> *)(?P<name>\w+)\s+(?P<type>\[\]\w*|\{\}|\w+)"
                    r"(?P<null>\?(?:(?P<nlo>\d+)(?:\+|-(?P<nhi>\d+)))?)?"
                    r"(?:\s*=\s*(?P<default>-?\w+))?"
                    r"(?:\s+v(?P<since>\d+)(?:\+|-(?P<until>\d+)))?"
                    r"(?:\s+tag=(?P<tag>\d+))?")
PRIMITIVE_DEFAULTS = {"bool": False, "int8": 0, "int16": 0, "int32": 0, "int64": 0,
                      "uint16": 0, "float64": 0.0, "uuid": UUID_ZERO, "string": "",
                      "bytes": b"", "records": None}


def _literal(text, type_):
    if text is None:
        return [] if type_.startswith("[]") else PRIMITIVE_DEFAULTS.get(type_)
    if text == "null":
        return None
    if text in ("true", "false"):
        return text == "true"
    return int(text, 0)


def parse_api(text):
    """Compile one schema block into an Api. Raises SyntaxError with a line number."""
    spec, path = None, []            # path: [(indent, list the next field goes into), ...]
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].rstrip()
        if not line.strip():
            continue
        m = _HEADER.fullmatch(line.strip())
        if m:
            spec = Api(m["name"], int(m["key"]), int(m["lo"]), int(m["hi"]),
                       int(m["flex"]) if m["flex"] else None)
            continue
        if line.strip() in ("request", "response"):
            path = [(len(line) - len(line.lstrip()), getattr(spec, line.strip()))]
            continue
        m = _FIELD.fullmatch(line)
        if not m or spec is None:
            raise SyntaxError(f"schema line {lineno}: cannot parse {raw!r}")
        indent = len(m["indent"])
        while path and path[-1][0] >= indent:
            path.pop()
        if not path:
            raise SyntaxError(f"schema line {lineno}: field outside request/response")
        element = m["type"][2:] if m["type"].startswith("[]") else m["type"]
        if element not in PRIMITIVE_DEFAULTS and m["type"] not in ("[]", "{}"):
            raise SyntaxError(f"schema line {lineno}: unknown type {m['type']!r}")
        nullable = None
        if m["null"]:
            nullable = (int(m["nlo"] or 0), int(m["nhi"]) if m["nhi"] else 32767)
        f = Field(m["name"], m["type"], nullable=nullable,
                  default=_literal(m["default"], m["type"]),
                  since=int(m["since"] or 0),
                  until=int(m["until"]) if m["until"] else 32767,
                  tag=int(m["tag"]) if m["tag"] else None)
        path[-1][1].append(f)
        if f.type in ("[]", "{}"):
            path.append((indent, f.fields))
    return spec


# --- The generic codec --------------------------------------------------------
# A (field list, version) pair is compiled once into a "plan": the fields that
# exist in that version, each with its reader and writer and whether it may be
# null there. Decoding and encoding then walk the plan with no version checks.
# The reads are the checks of Kafka's generated message classes: a negative
# length is null, and refused where the field is not nullable; a compact
# string longer than 0x7fff, an array claiming more elements than bytes are
# left, or a varint over 5 bytes does not decode. Malformed UTF-8 becomes
# U+FFFD, as Java's String decoding does.

def _null(r, name):
    raise ProtocolError(f"non-nullable field {name} was serialized as null")


def _read_string(r, flexible, nullable=True, name="string"):
    n = r.length(flexible, I16)
    if n < 0:
        return None if nullable else _null(r, name)
    if n > 0x7FFF:
        raise ProtocolError(f"string field {name} had invalid length {n}")
    return str(r.take(n), "utf-8", "replace")


def _read_bytes(r, flexible, nullable=True, name="bytes"):
    n = r.length(flexible, I32)
    if n < 0:
        return None if nullable else _null(r, name)
    return bytes(r.take(n))


def _read_records(r, flexible, nullable=True, name="records"):
    n = r.length(flexible, I32)
    if n < 0:
        return None if nullable else _null(r, name)
    return r.take(n)        # a memoryview into the request: no copy


def _write_string(w, value, flexible):
    if value is None:
        w.length(flexible, I16, -1)
        return
    data = value.encode("utf-8")
    w.length(flexible, I16, len(data))
    w.out += data


def _write_bytes(w, value, flexible):
    if value is None:
        w.length(flexible, I32, -1)
        return
    w.length(flexible, I32, len(value))
    if isinstance(value, FileSlice):
        w.splice(value)
    else:
        w.out += value


def _fixed_codec(s):
    return (lambda r, flexible, nullable=False, name="": r.fixed(s)), \
        (lambda w, v, flexible: w.fixed(s, v))


PRIMITIVES = {
    "bool": _fixed_codec(BOOL), "int8": _fixed_codec(I8), "int16": _fixed_codec(I16),
    "int32": _fixed_codec(I32), "int64": _fixed_codec(I64), "uint16": _fixed_codec(U16),
    "float64": _fixed_codec(F64),
    "uuid": (lambda r, flexible, nullable=False, name="": bytes(r.take(16)),
             lambda w, v, flexible: w.out.__iadd__(v or UUID_ZERO)),
    "string": (_read_string, _write_string),
    "bytes": (_read_bytes, _write_bytes),
    "records": (_read_records, _write_bytes),
}
NULLABLE_TYPES = ("string", "bytes", "records", "[]", "{}")


class Plan:
    """The fields of one struct in one version: what read_struct/write_struct walk.
    A step is (field, child plan, nullable in this version); readers and
    writers are the same fields compiled into one function each (made on the
    first read or write)."""
    __slots__ = ("steps", "tagged", "absent", "absent_lists", "names", "readers", "tag_readers",
                 "writers", "tag_writers", "writers_flexible")

    def __init__(self, fields, version):
        present = [f for f in fields if f.in_version(version)]
        self.steps = [(f, _plan_child(f, version), f.nullable_in(version))
                      for f in present if f.tag is None]
        self.tagged = {f.tag: (f, _plan_child(f, version), f.nullable_in(version))
                       for f in present if f.tag is not None}
        self.absent = [(f.name, f.default) for f in fields if not f.in_version(version) or f.tag is not None]
        self.absent_lists = [name for name, default in self.absent if isinstance(default, list)]
        self.names = frozenset(f.name for f in fields)
        self.readers = self.tag_readers = None
        self.writers = self.tag_writers = self.writers_flexible = None

    def compile(self, flexible):
        self.readers = [(f.name, _reader(f, child, nullable, flexible))
                        for f, child, nullable in self.steps]
        self.tag_readers = {tag: (f.name, _reader(f, child, nullable, flexible))
                            for tag, (f, child, nullable) in self.tagged.items()}

    def compile_writers(self, flexible):
        self.writers = [(f.name, f.default, _writer(f, child, nullable, flexible))
                        for f, child, nullable in self.steps]
        self.tag_writers = [(tag, f.name, f.default, _writer(f, child, nullable, flexible))
                            for tag, (f, child, nullable) in sorted(self.tagged.items())]
        self.writers_flexible = flexible


def _plan_child(f, version):
    return Plan(f.fields, version) if f.type in ("[]", "{}") else None


FIXED_TYPES = {"bool": BOOL, "int8": I8, "int16": I16, "int32": I32, "int64": I64,
               "uint16": U16, "float64": F64}


def _reader(f, child, nullable, flexible):
    """One field's reader: r -> value, with its type, nullability and the
    encoding (flexible or not) decided once."""
    t, name = f.type, f.name
    if t in FIXED_TYPES:
        s = FIXED_TYPES[t]
        return lambda r: r.fixed(s)
    if t == "{}":
        def read_struct_field(r):
            if nullable and r.fixed(I8) < 0:     # a nullable struct: int8 -1 null, 1 present
                return None
            return read_struct(r, child, flexible)
        return read_struct_field
    if t.startswith("[]"):
        if t == "[]":
            def element(r):
                return read_struct(r, child, flexible)
        else:
            primitive = PRIMITIVES[t[2:]][0]

            def element(r):
                return primitive(r, flexible, False, name)

        def read_array(r):
            n = r.length(flexible, I32)
            if n < 0:
                return None if nullable else _null(r, name)
            if n > r.end - r.pos:               # every element takes at least one byte
                raise ProtocolError(f"array {name} claims {n} elements in {r.end - r.pos} bytes")
            r.budget -= n
            if r.budget < 0:
                raise ProtocolError(f"more than {MAX_REQUEST_ELEMENTS} array elements in one request")
            return [element(r) for _ in range(n)]
        return read_array
    primitive = PRIMITIVES[t][0]
    return lambda r: primitive(r, flexible, nullable, name)


def read_struct(r, plan, flexible):
    """Decode one struct; absent fields get their defaults; unknown tags are skipped."""
    if plan.readers is None:
        plan.compile(flexible)
    msg = Msg()
    d = msg.__dict__
    d.update(plan.absent)
    for name in plan.absent_lists:
        d[name] = []
    for name, read in plan.readers:
        d[name] = read(r)
    if flexible:
        for _ in range(r.uvarint()):
            tag, size = r.uvarint(), r.uvarint()
            known = plan.tag_readers.get(tag)
            if known:          # read as Kafka's generated code reads it: by its own length
                d[known[0]] = known[1](r)
            else:
                r.take(size)
    return msg


class Memo:
    """A struct array whose encoding depends only on `key`: the encoder writes
    it from a small cache and calls build() for its elements only on a miss.
    Metadata's partitions of a topic are alike on one node, so 10,000 of them
    cost a cache lookup, not 10,000 structs built and dropped per request
    (which also kept CPython's allocator from giving that memory back)."""
    __slots__ = ("key", "build")

    def __init__(self, key, build):
        self.key, self.build = key, build


_MEMO = collections.OrderedDict()
MEMO_MAX_BYTES = 1 << 20
_memo_bytes = [0]


def _memo_encoded(write_array, w, child, flexible, memo, fix_error):
    """write_array's output for memo's elements, from the cache or made once."""
    key = (child, flexible, memo.key)
    data = _MEMO.get(key)
    if data is None:
        sub = Writer()
        write_array(sub, memo.build(), fix_error)
        data = _MEMO[key] = bytes(sub.out)
        _memo_bytes[0] += len(data)
        while _memo_bytes[0] > MEMO_MAX_BYTES and len(_MEMO) > 1:
            _memo_bytes[0] -= len(_MEMO.popitem(last=False)[1])
    w.out += data


def _writer(f, child, nullable, flexible):
    """One field's writer: (w, value, fix_error) -> None, with its type,
    nullability and the encoding decided once (fix_error: an older version's
    stand-in for an error code, or None)."""
    t, name = f.type, f.name

    def null(w):
        if not nullable:
            raise TypeError(f"{name} is null, which its schema does not allow here")
        if t == "{}":
            w.out += I8.pack(-1)
        else:
            w.length(flexible, I16 if t == "string" else I32, -1)
    if t in FIXED_TYPES:
        pack, fixes = FIXED_TYPES[t].pack, name.endswith("error_code")

        def write_fixed(w, v, fix_error):
            if v is None:
                return null(w)
            if fixes and fix_error and v:
                v = fix_error(v)
            w.out += pack(v)
        return write_fixed
    if t == "[]":
        def write_structs(w, v, fix_error):
            if v is None:
                return null(w)
            if type(v) is Memo:
                return _memo_encoded(write_structs, w, child, flexible, v, fix_error)
            w.length(flexible, I32, len(v))
            for item in v:
                write_struct(w, child, item, flexible, fix_error)
        return write_structs
    if t.startswith("[]"):
        write = PRIMITIVES[t[2:]][1]

        def write_list(w, v, fix_error):
            if v is None:
                return null(w)
            w.length(flexible, I32, len(v))
            for item in v:
                if item is None:
                    raise TypeError(f"{name} holds a null element")
                write(w, item, flexible)
        return write_list
    if t == "{}":
        def write_struct_field(w, v, fix_error):
            if v is None:
                return null(w)
            if nullable:
                w.out += I8.pack(1)
            write_struct(w, child, v, flexible, fix_error)
        return write_struct_field
    write = PRIMITIVES[t][1]

    def write_primitive(w, v, fix_error):
        if v is None:
            return null(w)
        write(w, v, flexible)
    return write_primitive


def write_struct(w, plan, msg, flexible, fix_error=None):
    """Encode one struct; missing attributes get the schema default. An attribute
    the schema does not declare, or a null where it allows none, is a bug in a
    handler, so it raises."""
    d = msg.__dict__
    if not plan.names.issuperset(d):
        raise TypeError(f"fields not in the schema: {sorted(set(d) - plan.names)}")
    if plan.writers_flexible is not flexible:
        plan.compile_writers(flexible)
    get = d.get
    for name, default, write in plan.writers:
        write(w, get(name, default), fix_error)
    if flexible:
        tagged = [(tag, name, write) for tag, name, default, write in plan.tag_writers
                  if get(name, default) != default]
        w.uvarint(len(tagged))
        for tag, name, write in tagged:
            sub = Writer()
            write(sub, d[name], fix_error)
            w.uvarint(tag)
            w.uvarint(len(sub.out))
            w.out += sub.out


_PLANS = {}


def plan_for(spec, version, direction):
    """The compiled plan of spec.request or spec.response at `version`."""
    key = (spec.key, version, direction)
    plan = _PLANS.get(key)
    if plan is None:
        plan = _PLANS[key] = Plan(getattr(spec, direction), version)
    return plan


def decode_request_body(spec, version, r):
    return read_struct(r, plan_for(spec, version, "request"), spec.flexible(version))


def encode_body(spec, version, direction, msg, w=None):
    """Encode a request or response body; returns the Writer."""
    w = w or Writer()
    api_key = spec.key
    has_fallbacks = any(k[0] == api_key for k in OLDER_CLIENTS_GET)
    fix = (lambda code: error_for_version(api_key, version, ErrorCode(code))) if has_fallbacks else None
    write_struct(w, plan_for(spec, version, direction), msg, spec.flexible(version), fix)
    return w


# --- Headers ------------------------------------------------------------------
# Request header v0: api_key int16, api_version int16, correlation_id int32.
# v1 adds client_id (a classic nullable string, even in flexible versions);
# v2 (flexible APIs) adds a tagged-field section. Response header v0 is just
# correlation_id; v1 adds tagged fields -- except for ApiVersions, whose
# response header is always v0 so that a client can read it before it knows
# which versions the broker speaks (ApiVersionsResponse.json, KIP-511).

REQUEST_HEADER = struct.Struct(">hhi")


def parse_request_header(frame):
    """-> (api_key, api_version, correlation_id, client_id, Reader at the client_id end)."""
    if len(frame) < REQUEST_HEADER.size:
        raise ProtocolError(f"request of {len(frame)} bytes is shorter than a header")
    api_key, api_version, correlation_id = REQUEST_HEADER.unpack_from(frame, 0)
    r = Reader(frame, REQUEST_HEADER.size)
    client_id = _read_string(r, False, True, "client_id")
    return api_key, api_version, correlation_id, client_id, r


def skip_tagged_fields(r):
    for _ in range(r.uvarint()):
        r.uvarint()
        r.take(r.uvarint())


def response_header_flexible(spec, version):
    """Response header v1 (tagged fields)? Flexible versions, but never ApiVersions."""
    return spec.flexible(version) and spec.key != ApiKey.API_VERSIONS


def encode_response(spec, version, correlation_id, msg):
    """One response frame (size, header, body) as chunks, for Connection.push."""
    w = Writer()
    w.out += bytes(4)                                  # the frame size, patched below
    w.fixed(I32, correlation_id)
    if response_header_flexible(spec, version):
        w.uvarint(0)                                   # response header v1: no tags
    encode_body(spec, version, "response", msg, w)
    chunks = w.finish()
    size = sum(len(c) for c in chunks) - 4
    chunks[0] = I32.pack(size) + chunks[0][4:]
    return chunks


# The client's side of the same framing: what doze's own Client (and the
# demo, the tests, the recorder) send and read.

def encode_request(spec, version, correlation_id, msg, client_id="doze"):
    """One request frame (size, header v1 or v2, body) as bytes."""
    cid = client_id.encode() if client_id is not None else None
    head = REQUEST_HEADER.pack(spec.key, version, correlation_id) + \
        (I16.pack(-1) if cid is None else I16.pack(len(cid)) + cid)
    if spec.flexible(version):
        head += b"\x00"                                 # request header v2: no tags
    body = head + b"".join(encode_body(spec, version, "request", msg).finish())
    return I32.pack(len(body)) + body


def decode_response(spec, version, frame):
    """A response frame (without its size) -> (correlation id, Msg)."""
    r = Reader(frame)
    correlation_id = r.fixed(I32)
    if response_header_flexible(spec, version):
        skip_tagged_fields(r)
    return correlation_id, read_struct(r, plan_for(spec, version, "response"), spec.flexible(version))


###############################################################################
# 6. RECORD BATCHES -- the unit a producer sends and the log stores
###############################################################################
# Since Kafka 0.11 (KIP-98) records travel in RecordBatch v2 ("magic 2"): a
# 61-byte header, then the records, usually compressed together. The broker
# never needs the records themselves: it assigns offsets by writing base_offset
# and checks the CRC. The CRC covers everything from `attributes` to the end,
# so the broker may set base_offset and partition_leader_epoch without
# recomputing it -- exactly what doze does on append.

BATCH_HEADER = struct.Struct(">qiibIhiqqqhii")   # 61 bytes
BATCH_HEADER_SIZE = BATCH_HEADER.size
BATCH_FIELDS = (
    "base_offset",             # q int64   assigned by the broker
    "batch_length",            # i int32   bytes after this field
    "partition_leader_epoch",  # i int32
    "magic",                   # b int8    always 2
    "crc",                     # I uint32  CRC-32C (Castagnoli) of attributes..end
    "attributes",              # h int16   0x07 compression, 0x08 log-append time,
                               #           0x10 transactional, 0x20 control
    "last_offset_delta",       # i int32
    "base_timestamp",          # q int64
    "max_timestamp",           # q int64
    "producer_id",             # q int64   -1 unless idempotent/transactional
    "producer_epoch",          # h int16
    "base_sequence",           # i int32   KIP-98 idempotence
    "records_count",           # i int32
)
# Each field's byte offset in a batch, for the few places that read or write one in place.
BATCH_AT = {name: struct.calcsize(">" + BATCH_HEADER.format[1:1 + i]) for i, name in enumerate(BATCH_FIELDS)}
LOG_OVERHEAD = BATCH_AT["partition_leader_epoch"]   # base_offset + batch_length: what batch_length excludes
CRC_START = BATCH_AT["attributes"]  # the CRC covers the batch from its attributes to its end
ATTR_COMPRESSION = 0x07
ATTR_LOG_APPEND_TIME = 0x08
ATTR_TRANSACTIONAL = 0x10
ATTR_CONTROL = 0x20
COMPRESSION_NAMES = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}
CONTROL_ABORT, CONTROL_COMMIT = 0, 1
BatchHeader = collections.namedtuple("BatchHeader", BATCH_FIELDS)


# --- CRC-32C ------------------------------------------------------------------
# The standard library has zlib.crc32 (the IEEE polynomial) but not CRC-32C
# (Castagnoli), and a byte-at-a-time table runs at ~10 MB/s in CPython. doze
# uses "sparse-multiple folding", measured at 240-360 MB/s on 1 MiB here:
#
# CRC-32C is the remainder of the message polynomial modulo P(x) (0x1EDC6F41).
# Read the message as one big little-endian int M: its low bits are the high
# powers of x. If x^E == x^t1 + x^t2 + ... (mod P) for a few small t's (a
# sparse multiple of P, found offline; CRC_FOLDS lists them, and the tests
# prove each), the low s = E - max(t) bits of M can be folded down: remove them with
# M >>= s and XOR them back in shifted by max(t) - t for every t. Each fold
# roughly halves the bits using only big-int shifts and XORs, which CPython
# does in C over the whole number; ~20 folds bring 1 MiB down to 256 bits.
# Squaring is free in GF(2)[x], so an identity scaled by 2^j is valid too,
# giving a ladder of fold sizes. The last <= 256 bits go through 32
# per-byte-position tables. The initial register is XORed into the first 4
# message bytes, which is the same as starting the CRC register there.

_POLY_REFLECTED = 0x82F63B78
_CRC_POLY = 0x11EDC6F41          # normal-order generator incl. x^32
_CRC_TAIL_BITS = 256                  # final stage width in bits (32 byte tables)

# Sparse multiples of P: x^E == sum(x^t for t in S) (mod P), 0 in S.
# Found by a meet-in-the-middle search; test_doze_kafka.py checks each (with _xpow).
CRC_FOLDS = (
    (563, (0, 31, 53, 58, 109)), (743, (0, 47, 65, 97, 191)),
    (1036, (0, 20, 44, 55, 114)), (1408, (0, 27, 106, 150, 291)),
    (1900, (0, 14, 152, 214, 281)), (1944, (0, 2, 3, 76, 119)),
    (2565, (0, 152, 236, 400, 406)), (3462, (0, 12, 237, 368, 429)),
    (4035, (0, 67, 74, 93, 189)), (6777, (0, 100, 484)),
    (14867, (0, 278, 318)), (17201, (0, 304, 316)), (23055, (0, 374, 419)),
    (28692, (0, 164, 513)), (40145, (0, 48, 151)), (45112, (0, 247, 333)),
)


def _mulmod(a, b):
    r = 0
    while b:
        if b & 1:
            r ^= a
        b >>= 1
        a <<= 1
        if a >> 32:
            a ^= _CRC_POLY
    return r


def _xpow(e):                     # x^e mod P (normal bit order)
    r, b = 1, 2
    while e:
        if e & 1:
            r = _mulmod(r, b)
        b = _mulmod(b, b)
        e >>= 1
    return r


def _build_ladder():
    ids = []
    for e, s in CRC_FOLDS:
        j = 0
        while (e << j) < (1 << 31):
            ids.append((e << j, tuple(t << j for t in s)))
            j += 1
    for e in (64, 96, 128, 192, 256, 384, 512):         # dense, exact
        r = _xpow(e)
        ids.append((e, tuple(t for t in range(32) if r >> t & 1)))
    ladder = []
    for e, s in ids:
        hi, lo = max(s), min(s)
        # (smallest bit length this fold is valid for, bits removed,
        #  shifts of Lo other than 0, removed bits form whole bytes)
        ladder.append((2 * e - hi - lo, e - hi,
                       tuple(hi - t for t in s if t != hi), (e - hi) % 8 == 0))
    ladder.sort()
    return ladder


def _build_tables():
    t0 = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ _POLY_REFLECTED if c & 1 else c >> 1
        t0.append(c)
    tabs = [t0]
    for _ in range(_CRC_TAIL_BITS // 8 - 1):          # one more zero byte after the byte
        tabs.append([(v >> 8) ^ t0[v & 0xFF] for v in tabs[-1]])
    tabs.reverse()                         # tabs[j]: byte at index j of 32
    return t0, tabs


_T0, _TABS = _build_tables()
_LADDER = _build_ladder()
_MINBITS = [f[0] for f in _LADDER]
_BYTE_FOLDS = [f for f in _LADDER if f[3] and f[1] >= 32]
_BYTE_MINBITS = [f[0] for f in _BYTE_FOLDS]


def crc32c(data, crc=0):
    """CRC-32C of a bytes-like object (RecordBatch v2's checksum); pass a
    previous result as crc to continue. crc32c(b"123456789") == 0xE3069283."""
    n = len(data)
    reg = crc ^ 0xFFFFFFFF
    if n < 4:                              # too short to carry the register
        t0 = _T0
        for b in bytes(data):
            reg = t0[(reg ^ b) & 0xFF] ^ (reg >> 8)
        return reg ^ 0xFFFFFFFF
    nb = 8 * n
    if nb > _CRC_TAIL_BITS:
        # First fold straight from the bytes when a byte-aligned identity fits:
        # saves one shift over the whole message.
        i = bisect.bisect_right(_BYTE_MINBITS, nb) - 1
        if i >= 0:
            _, s, shifts, _ = _BYTE_FOLDS[i]
            sb = s >> 3
            lo = int.from_bytes(data[:sb], "little") ^ reg
            m = int.from_bytes(data[sb:], "little") ^ lo
            for k in shifts:
                m ^= lo << k
            nb -= s
        else:
            m = int.from_bytes(data, "little") ^ reg
        ladder, minbits = _LADDER, _MINBITS
        while nb > _CRC_TAIL_BITS:
            _, s, shifts, _ = ladder[bisect.bisect_right(minbits, nb) - 1]
            lo = m & ((1 << s) - 1)
            m = (m >> s) ^ lo
            for k in shifts:
                m ^= lo << k
            nb -= s
    else:
        m = int.from_bytes(data, "little") ^ reg
    # Final <= 256 bits: left-align (leading zero bits don't change a CRC
    # with zero register) and sum the per-position byte tables.
    b = (m << (_CRC_TAIL_BITS - nb)).to_bytes(_CRC_TAIL_BITS // 8, "little")
    return functools.reduce(operator.xor, map(operator.getitem, _TABS, b)) ^ 0xFFFFFFFF


def read_batch_header(buf, pos=0):
    return BatchHeader._make(BATCH_HEADER.unpack_from(buf, pos))


def whole_batches(data):
    """(start, header, end) of each whole batch in a buffer of batches (a
    Fetch's records), up to the first one cut short or of an impossible length."""
    pos = 0
    while pos + BATCH_HEADER_SIZE <= len(data):
        h = read_batch_header(data, pos)
        end = pos + LOG_OVERHEAD + h.batch_length
        if h.batch_length < BATCH_HEADER_SIZE - LOG_OVERHEAD or end > len(data):
            return
        yield pos, h, end
        pos = end


def encode_record(offset_delta, timestamp_delta, key, value, headers=()):
    """One record inside a batch (all lengths are zig-zag varints)."""
    body = bytearray(b"\x00")                         # attributes: unused
    body += varint_bytes(timestamp_delta) + varint_bytes(offset_delta)
    for part in (key, value):
        if part is None:
            body += varint_bytes(-1)
        else:
            body += varint_bytes(len(part)) + part
    body += varint_bytes(len(headers))
    for hkey, hvalue in headers:
        hk = hkey.encode() if isinstance(hkey, str) else hkey
        body += varint_bytes(len(hk)) + hk
        body += varint_bytes(-1) if hvalue is None else varint_bytes(len(hvalue)) + hvalue
    return varint_bytes(len(body)) + bytes(body)


def build_batch(records, base_offset=0, timestamp_ms=0, producer_id=-1, producer_epoch=-1,
                base_sequence=-1, attributes=0):
    """An uncompressed RecordBatch v2 from [(key, value, headers)]; used for
    control markers and by tests."""
    body = b"".join(encode_record(i, 0, k, v, h) for i, (k, v, h) in enumerate(records))
    tail = struct.pack(">hiqqqhii", attributes, len(records) - 1, timestamp_ms, timestamp_ms,
                       producer_id, producer_epoch, base_sequence, len(records)) + body
    crc = crc32c(tail)
    return struct.pack(">qiibI", base_offset, len(tail) + 9, 0, 2, crc) + tail


def build_control_batch(producer_id, producer_epoch, commit, timestamp_ms, coordinator_epoch=0):
    """A COMMIT or ABORT marker (KIP-98): a control batch whose one record has
    key (version int16 = 0, type int16) and value (version int16, coordinator_epoch int32)."""
    key = struct.pack(">hh", 0, CONTROL_COMMIT if commit else CONTROL_ABORT)
    value = struct.pack(">hi", 0, coordinator_epoch)
    return build_batch([(key, value, ())], 0, timestamp_ms, producer_id, producer_epoch, -1,
                       ATTR_TRANSACTIONAL | ATTR_CONTROL)


# --- Reading records, for the few places that must ----------------------------
# Produce and Fetch never decode a record. ListOffsets by timestamp (and the
# tests, and the recorder) do, on bytes that came from clients: so the reader
# trusts nothing -- each record is read inside its own length, a count is
# capped by the bytes there are, and gzip output is bounded -- and any flaw
# raises RecordsError. Whatever a log holds, reading it cannot loop or crash.

MIN_RECORD_BODY = 6             # attributes, timestamp and offset deltas, key, value, header count
MAX_INFLATED = 16 * 1024 * 1024 # gzip records decoded for a timestamp lookup, at most


class RecordsError(ValueError):
    """The records of a batch do not decode."""


def gunzip(data, limit=MAX_INFLATED):
    """gzip-framed bytes inflated, at most `limit` of them (RecordsError past it)."""
    try:
        inflater = zlib.decompressobj(47)                 # gzip framing
        out = inflater.decompress(data, limit)
    except zlib.error as e:
        raise RecordsError(f"gzip: {e}") from None
    if inflater.unconsumed_tail:
        raise RecordsError(f"gzip records inflate to more than {limit} bytes")
    return out


GZIP_ONLY = {1: gunzip}         # codec -> inflate(data, limit): what the broker's own readers decode


def record_payload(batch, codecs=GZIP_ONLY):
    """The records' bytes of a batch: uncompressed, or inflated by its codec in
    `codecs` (the broker's own readers: gzip only, up to MAX_INFLATED);
    RecordsError for another codec or a broken payload."""
    if len(batch) < BATCH_HEADER_SIZE:
        raise RecordsError(f"{len(batch)} bytes is shorter than a batch header")
    h = read_batch_header(batch)
    data = memoryview(batch)[BATCH_HEADER_SIZE:LOG_OVERHEAD + max(h.batch_length, 0)]
    codec = h.attributes & ATTR_COMPRESSION
    if codec == 0:
        return h, data
    if codec not in codecs:
        raise RecordsError(f"cannot decode {COMPRESSION_NAMES.get(codec, codec)} records")
    return h, memoryview(codecs[codec](data, MAX_INFLATED))


def decode_records(batch, codecs=GZIP_ONLY):
    """Yield (offset_delta, timestamp_delta, key, value, headers) of a batch
    whose codec is in `codecs`, as Kafka's DefaultRecord.readFrom reads them.
    Raises RecordsError at the first record that does not decode."""
    h, data = record_payload(batch, codecs)
    if not 0 <= h.records_count <= len(data) // (MIN_RECORD_BODY + 1):
        raise RecordsError(f"{h.records_count} records cannot fit in {len(data)} bytes")
    r = Reader(data)
    try:
        for _ in range(h.records_count):
            length = r.varint()
            if length < MIN_RECORD_BODY:
                raise RecordsError(f"record length {length}")
            body = Reader(r.take(length))
            body.take(1)                                  # attributes: unused
            ts_delta, off_delta = body.varlong(), body.varint()
            key, value = _record_bytes(body), _record_bytes(body)
            headers = []
            count = body.varint()
            if not 0 <= count <= body.end - body.pos:
                raise RecordsError(f"{count} record headers")
            for _ in range(count):
                hk = _record_bytes(body)
                if hk is None:
                    raise RecordsError("a null header key")
                headers.append((hk, _record_bytes(body)))
            if body.pos != body.end:
                raise RecordsError(f"record of {length} bytes has {body.end - body.pos} left over")
            yield off_delta, ts_delta, key, value, headers
        if r.pos != r.end:
            raise RecordsError("Incorrect declared batch size, records still remaining")
    except ProtocolError as e:
        raise RecordsError(str(e)) from None


def _record_bytes(r):
    n = r.varint()
    if n < -1:
        raise RecordsError(f"length {n}")
    return None if n < 0 else bytes(r.take(n))


def check_records(records, h):
    """Kafka's LogValidator reads every record of a produced batch and refuses
    the batch unless its records tile the payload exactly: INVALID_RECORD, or
    UNKNOWN_SERVER_ERROR where its reader throws something else (a length
    varint over 5 bytes, gzip that does not inflate), as Kafka 4.3.1 answers
    (recorded: produce-bad-records). doze walks the records' length varints
    only -- one pass, no field decoding -- of uncompressed and gzip batches
    (gzip inflated to check, up to MAX_INFLATED; lz4, snappy and zstd cannot be
    with the standard library, so their records go unchecked). The costs are
    in the README. -> None, or (error code, what is wrong)."""
    codec = h.attributes & ATTR_COMPRESSION
    if codec == 0:
        return check_record_framing(records, h.records_count, BATCH_HEADER_SIZE)
    if codec != 1:
        return None
    try:
        inflater = zlib.decompressobj(47)
        payload = inflater.decompress(memoryview(records)[BATCH_HEADER_SIZE:], MAX_INFLATED)
    except zlib.error as e:
        return ErrorCode.UNKNOWN_SERVER_ERROR, f"Failed to decompress record stream: {e}"
    if inflater.unconsumed_tail:
        return None                                       # too big to check here
    return check_record_framing(payload, h.records_count, 0)


def check_record_framing(records, count, start):
    """The length varints of `count` records from `start` tile the rest exactly?"""
    pos, end = start, len(records)
    if count * (MIN_RECORD_BODY + 1) > end - pos:
        return ErrorCode.INVALID_RECORD, f"{count} records cannot fit in {end - pos} bytes"
    view = bytes(records) if isinstance(records, memoryview) else records
    last = end - 2
    for i in range(count):
        if pos > last:                            # fewer than 2 bytes left: read slowly
            n, pos = _slow_length(view, pos, end)
        elif view[pos] < 0x80:                    # lengths under 64: one byte
            n = view[pos]
            pos += 1
        elif view[pos + 1] < 0x80:                # under 8192: two
            n = (view[pos] & 0x7F) | view[pos + 1] << 7
            pos += 2
        else:
            n, pos = _slow_length(view, pos, end)
        if n is None:
            return pos
        n = (n >> 1) ^ -(n & 1)
        if n < MIN_RECORD_BODY:
            return ErrorCode.INVALID_RECORD, f"Invalid record size: record {i} has length {n}"
        pos += n
        if pos > end:
            return ErrorCode.INVALID_RECORD, (f"Invalid record size: expected {n} bytes in record "
                                              f"payload, but instead the buffer has only "
                                              f"{end - pos + n} remaining bytes.")
    if pos != end:
        return ErrorCode.INVALID_RECORD, "Incorrect declared batch size, records still remaining in file"
    return None


LONG_MAX = 2 ** 63 - 1


def check_record_fields(records, h, where, compacted, now_ms, before_ms, after_ms):
    """What Kafka's LogValidator checks in each record, once the framing is
    right: a key on a compacted topic (an empty one will do), and a CreateTime
    timestamp within [now - message.timestamp.before.max.ms, now +
    message.timestamp.after.max.ms]. Refused as Kafka refuses: a record error
    for each record (the key first), INVALID_TIMESTAMP if any timestamp is
    wrong, else INVALID_RECORD. Records are read only when something can be
    wrong: on a compacted topic, or when the batch's max timestamp is past the
    future bound, or the past bound is set; lz4, snappy and zstd records go
    unchecked (they cannot be read)."""
    if h.attributes & ATTR_LOG_APPEND_TIME and before_ms is None:     # on a LogAppendTime topic
        why = "Invalid timestamp type in message. Producer should not set timestamp type to LogAppendTime."
        raise BatchError(ErrorCode.INVALID_TIMESTAMP, "One or more records have been rejected due to "
                         "invalid timestamp", in_log=True,
                         record_errors=[(i, why) for i in range(min(h.records_count, 1000))])
    check_time = before_ms is not None and (before_ms < LONG_MAX or h.max_timestamp > now_ms + after_ms)
    if not (compacted or check_time):
        return
    try:
        _, payload = record_payload(records)
    except RecordsError:
        return
    r, errors, bad_time = Reader(payload), [], False
    low, high = now_ms - before_ms if check_time else 0, now_ms + after_ms if check_time else 0
    try:
        for i in range(h.records_count):
            body = Reader(r.take(r.varint()))
            body.take(1)
            ts = h.base_timestamp + body.varlong() if not h.attributes & ATTR_LOG_APPEND_TIME \
                else h.max_timestamp                   # a LogAppendTime batch's records have its time
            offset = h.base_offset + body.varint()
            if compacted and body.varint() < 0:
                errors.append((i, f"Compacted topic cannot accept message without key in topic "
                                  f"partition {where}"))
            elif check_time and ts != -1 and not low <= ts <= high:
                bad_time = True
                errors.append((i, f"Timestamp {ts} of message with offset {offset} is out of range. "
                                  f"The timestamp should be within [{low}, {high}]"))
    except ProtocolError:
        raise BatchError(ErrorCode.INVALID_RECORD, "Found invalid record structure", in_log=True) from None
    if bad_time:
        raise BatchError(ErrorCode.INVALID_TIMESTAMP, "One or more records have been rejected due to "
                         "invalid timestamp", in_log=True, record_errors=errors)
    if errors:
        shown = ", ".join(f"RecordError(batchIndex={i}, message='{why}')" for i, why in errors[:3])
        raise BatchError(ErrorCode.INVALID_RECORD, f"One or more records have been rejected due to "
                         f"{len(errors)} record errors in total, and only showing the first three "
                         f"errors at most: [{shown}]", in_log=True, record_errors=errors)


def _slow_length(view, pos, end):
    """A length varint of any width: (value, new position) or (None, (code, what is wrong))."""
    n = shift = 0
    for _ in range(5):
        if pos >= end:
            return None, (ErrorCode.INVALID_RECORD, "Incorrect declared batch size, premature EOF reached")
        b = view[pos]
        pos += 1
        n |= (b & 0x7F) << shift
        shift += 7
        if b < 0x80:
            return n & 0xFFFFFFFF, pos
    return None, (ErrorCode.UNKNOWN_SERVER_ERROR, "a record length varint is longer than 5 bytes")


class BatchError(Exception):
    """A produced batch Kafka would refuse; carries the ErrorCode. in_log: found
    by Kafka's LogValidator (its answer carries the log start offset) rather
    than by the request-level checks (whose answer carries -1)."""

    def __init__(self, code, detail, in_log=False, record_errors=()):
        super().__init__(detail)
        self.code = code
        self.in_log = in_log
        self.record_errors = list(record_errors)    # [(record index, why)], Produce v8+


def validate_produced(records, check_crc=True):
    """Check the records of one partition of a Produce request, as Kafka's
    ProduceRequest.validateRecords and LogValidator do, without reading any
    record: exactly one v2 batch, consistent lengths, a good CRC, no control
    flag. Returns its BatchHeader."""
    n = len(records)
    if n == 0:
        raise BatchError(ErrorCode.INVALID_RECORD, "Produce v3+ needs one record batch")
    if n < BATCH_HEADER_SIZE:
        raise BatchError(ErrorCode.CORRUPT_MESSAGE, f"{n} bytes is shorter than a batch header")
    h = read_batch_header(records)
    if h.magic != 2:
        raise BatchError(ErrorCode.INVALID_RECORD, f"magic {h.magic}: Produce v3+ carries only "
                         "RecordBatch v2")
    size = h.batch_length + LOG_OVERHEAD
    if h.batch_length < BATCH_HEADER_SIZE - LOG_OVERHEAD or size > n:
        raise BatchError(ErrorCode.CORRUPT_MESSAGE, f"batch_length {h.batch_length} with {n} bytes")
    if size != n:
        raise BatchError(ErrorCode.INVALID_RECORD,
                         "Produce v3+ carries exactly one record batch per partition")
    if check_crc and crc32c(records[CRC_START:]) != h.crc:
        raise BatchError(ErrorCode.CORRUPT_MESSAGE, "CRC-32C mismatch")
    if h.attributes & ATTR_CONTROL:
        raise BatchError(ErrorCode.INVALID_RECORD, "clients may not send control batches", in_log=True)
    if h.records_count != h.last_offset_delta + 1 or h.records_count < 1:
        raise BatchError(ErrorCode.INVALID_RECORD, f"records_count {h.records_count} vs "
                         f"last_offset_delta {h.last_offset_delta}", in_log=True)
    return h


def analyze_batch(records, config, where, now_ms, check_crc=True):
    """Everything Produce checks in a partition's batch before the log
    (Kafka's analyzeAndValidateRecords and LogValidator), without reading a
    record's contents: its framing and CRC (validate_produced), its size
    against the topic's max.message.bytes and segment.bytes, a producer id
    with its sequence, each record's framing (check_records), the keys of a
    compacted topic and the timestamps (check_record_fields). config: the
    topic's configs by name; where: "topic-partition", for messages. -> its
    BatchHeader; raises BatchError."""
    if records is None:
        raise BatchError(ErrorCode.CORRUPT_MESSAGE, "null records")
    h = validate_produced(records, check_crc=check_crc)
    max_bytes = config("max.message.bytes")
    if len(records) > max_bytes:
        raise BatchError(ErrorCode.MESSAGE_TOO_LARGE,
                         f"batch of {len(records)} bytes is over max.message.bytes {max_bytes}")
    if len(records) > config("segment.bytes"):
        raise BatchError(ErrorCode.RECORD_LIST_TOO_LARGE, "batch larger than segment.bytes")
    if h.producer_id >= 0 and h.base_sequence < 0 or h.attributes & ATTR_TRANSACTIONAL and h.producer_id < 0:
        raise BatchError(ErrorCode.INVALID_RECORD, "a producer id needs a base sequence", in_log=True)
    flaw = check_records(records, h)
    if flaw:
        raise BatchError(flaw[0], flaw[1], in_log=True)
    create_time = config("message.timestamp.type") == "CreateTime"
    check_record_fields(records, h, where, "compact" in config("cleanup.policy"), now_ms,
                        config("message.timestamp.before.max.ms") if create_time else None,
                        config("message.timestamp.after.max.ms"))
    return h


# --- Rewriting a batch: what the broker may change in one -----------------------
# A topic's compression.type and message.timestamp.type=LogAppendTime make
# Kafka store a batch other than as sent: recompressed, or stamped with the
# broker's time. Both change bytes the CRC covers, so it is computed again.

def recompressed(records, h, config):
    """compression.type on the topic: Kafka stores a batch in that codec,
    recompressing it when the producer used another. doze can for gzip and
    "uncompressed" from uncompressed or gzip (the standard library has zlib,
    nothing for lz4, snappy, zstd: such batches are stored as sent). config:
    the topic's configs by name. -> the rewritten batch (a bytearray), or
    None to store it as it came."""
    target = config("compression.type")
    codec = h.attributes & ATTR_COMPRESSION
    if target == "gzip" and codec == 0:
        level = config("compression.gzip.level")
        return rebuild_batch(records, 1, gzip_deflate(records[BATCH_HEADER_SIZE:], level))
    if target == "uncompressed" and codec == 1:
        return rebuild_batch(records, 0, record_payload(records)[1])
    return None


def gzip_deflate(data, level=-1):
    """gzip bytes as Java's GZIPOutputStream writes them (so byte for byte as
    Kafka stores them): zlib's deflate, with the header's OS byte 255, unknown."""
    deflater = zlib.compressobj(level, zlib.DEFLATED, 31)
    out = bytearray(deflater.compress(data) + deflater.flush())
    out[9] = 0xFF
    return out


def rebuild_batch(records, codec, payload):
    """The same batch header over a new payload in another codec (new length, new CRC)."""
    batch = bytearray(records[:BATCH_HEADER_SIZE]) + payload
    I32.pack_into(batch, BATCH_AT["batch_length"], len(batch) - LOG_OVERHEAD)
    attributes = I16.unpack_from(batch, BATCH_AT["attributes"])[0]
    I16.pack_into(batch, BATCH_AT["attributes"], attributes & ~ATTR_COMPRESSION | codec)
    U32.pack_into(batch, BATCH_AT["crc"], crc32c(memoryview(batch)[CRC_START:]))
    return batch


def set_log_append_time(batch, now_ms):
    """message.timestamp.type=LogAppendTime: the broker stamps the batch (attribute
    bit 3 and max_timestamp) and, since those are inside the CRC, recomputes it."""
    attributes = I16.unpack_from(batch, BATCH_AT["attributes"])[0] | ATTR_LOG_APPEND_TIME
    I16.pack_into(batch, BATCH_AT["attributes"], attributes)
    I64.pack_into(batch, BATCH_AT["max_timestamp"], now_ms)
    U32.pack_into(batch, BATCH_AT["crc"], crc32c(memoryview(batch)[CRC_START:]))


###############################################################################
# 7. STORAGE -- partition logs on disk
###############################################################################
# A partition is a directory of segment files, named as Kafka names them
# (orders-0/00000000000000000000.log), each an append-only sequence of record
# batches exactly as the producers sent them, with base offsets filled in.
# Durability is fsync's: an acknowledged batch has been fsynced, and so has
# every directory entry (new partition directory, new segment file) on the
# path to it -- a new file whose directory was not fsynced can vanish in a
# power cut even if the file itself was. The broker fsyncs once per dirty file
# per pass of its loop ("group commit"), so a thousand batches cost one fsync.
#
# Everything else -- topics, configs, the producer-id counter -- lives in
# meta.db (sqlite, WAL), durable before it is acknowledged: fsynced by the
# same group commit as the logs (MetadataStore.sync; SYNC_ANSWERS below).

class Files:
    """Every change the broker makes to its disk goes through here -- the logs'
    writes, fsyncs and renames, and each meta.db commit -- so the crash tests
    can put in a layer that numbers them, fails one, or forgets what was not
    yet fsynced. Reads (pread, sendfile) go straight to the OS."""
    fsyncs_on_a_thread = True           # the Flusher may fsync the logs on its thread (a test's layer: no)

    def attach(self, data_dir):
        """The data directory this layer serves (a test's layer keeps track of it)."""

    def open_append(self, path, create):
        flags = os.O_WRONLY | os.O_APPEND | (os.O_CREAT | os.O_EXCL if create else 0)
        return os.open(path, flags, 0o644)

    def write(self, fd, data):
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]

    def fsync(self, fd):
        os.fsync(fd)

    def truncate(self, path, size):
        fd = os.open(path, os.O_WRONLY)
        try:
            os.ftruncate(fd, size)
            os.fsync(fd)
        finally:
            os.close(fd)

    def truncate_fd(self, fd, size):
        os.ftruncate(fd, size)

    def close(self, fd):
        os.close(fd)

    def mkdir(self, path):
        os.mkdir(path)

    def fsync_dir(self, path):
        """Make the directory's entries (files created, renamed, removed) durable."""
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def write_file(self, path, data):
        """Write a small whole file (an index cache); not fsynced."""
        with open(path, "wb") as f:
            f.write(data)

    def unlink(self, path):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)

    def rename(self, src, dst):
        os.rename(src, dst)

    def rmtree(self, path):
        shutil.rmtree(path, ignore_errors=True)

    def commit(self, db):
        """Commit meta.db's open transaction: sqlite appends it to meta.db-wal,
        not yet fsynced (sync_file does that; this is where a test layer
        numbers, fails or cuts a commit)."""
        db.execute("COMMIT")

    def syncfs(self, path):
        """Make every file and directory entry of the file system holding path
        durable at once: Linux's syncfs(2), which waits for the writes as an
        fsync of each would and (since Linux 5.8) reports one that failed.
        -> False where there is none (the caller fsyncs file by file); raises
        OSError if it failed."""
        call = syncfs_call()
        if call is None:
            return False
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        try:
            call(fd)
        finally:
            os.close(fd)
        return True

    def sync_file(self, path, fallback=None, keep=None):
        """fsync a file written by someone else (sqlite's meta.db-wal; the
        database itself when there is no WAL file). keep: the caller's dict
        {path: descriptor}, to open path once and keep it open for the next
        syncs (the caller closes them)."""
        fd = keep.get(path) if keep is not None else None
        if fd is None:
            try:
                fd = os.open(path, os.O_RDONLY)
            except FileNotFoundError:
                if fallback is None:
                    raise
                fd, keep = os.open(fallback, os.O_RDONLY), None
            if keep is not None:
                keep[path] = fd
        try:
            os.fsync(fd)
        finally:
            if keep is None:
                os.close(fd)


@functools.lru_cache(maxsize=None)
def syncfs_call():
    """syncfs(fd), raising OSError as os.fsync does, where libc's reports failed
    writes (Linux 5.8 and later), else None. ctypes is imported here, on first
    use, not at start."""
    release = re.match(r"(\d+)\.(\d+)", platform.release()) if sys.platform.startswith("linux") else None
    if not release or tuple(map(int, release.groups())) < (5, 8):
        return None
    try:
        import ctypes
        libc_syncfs = ctypes.CDLL(None, use_errno=True).syncfs
    except (OSError, AttributeError):
        return None
    libc_syncfs.argtypes = [ctypes.c_int]

    def syncfs(fd):
        if libc_syncfs(fd) != 0:
            code = ctypes.get_errno()
            raise OSError(code, os.strerror(code))
    return syncfs


# --- When the disk fails --------------------------------------------------------
# An fsync that fails is never retried and trusted: on Linux the kernel may
# already have dropped the dirty pages it could not write ("fsyncgate"), so a
# later fsync that succeeds proves nothing about them. The partition whose
# file failed goes offline instead, as a Kafka log directory does: what it
# had not made durable is never acknowledged (its waiting producers get
# KAFKA_STORAGE_ERROR), and every request that names it gets
# KAFKA_STORAGE_ERROR until the broker is restarted on a sound disk. The other
# partitions, and the coordinators in meta.db, serve on. (Kafka with a single
# log directory halts the whole broker instead; doze's partitions are its
# directories.) A write refused for want of space (ENOSPC, EDQUOT) or of
# descriptors is different: the file is cut back to its last whole batch,
# the request is refused with KAFKA_STORAGE_ERROR, and the next one that
# finds room succeeds. meta.db's own failures are sqlite's to detect; a
# refused commit changes nothing (see MetadataStore).
ROOM_ERRNOS = frozenset(getattr(errno, n) for n in ("ENOSPC", "EDQUOT", "EMFILE", "ENFILE") if hasattr(errno, n))


class TornWrite(OSError):
    """A write failed part-way and the file could not be cut back."""


def segment_name(base_offset, suffix=".log"):
    return f"{base_offset:020d}{suffix}"


# --- Open files: bounded --------------------------------------------------------
# Every segment of every partition would be two descriptors if all were kept
# open (Kafka asks its admins for a descriptor limit in the 100,000s). doze
# opens a segment's files when it needs them and keeps only the most recently
# used open: read handles for Fetch, ListOffsets and rebuilds, and the active
# segment's append descriptor -- closed only once its writes are fsynced. A
# read handle closes when the last user lets go: a Fetch answer being sent
# from a segment keeps its handle alive after the cache has dropped it.

class ReadHandle:
    """A read-only descriptor of a segment file (pread, sendfile)."""
    __slots__ = ("fd",)

    def __init__(self, path):
        self.fd = os.open(path, os.O_RDONLY)

    def fileno(self):
        return self.fd

    def __del__(self):
        with contextlib.suppress(OSError):
            os.close(self.fd)


class OpenFiles:
    """The segment descriptors the logs hold, least recently used first."""

    def __init__(self, limit):
        self.limit = limit
        self.lru = collections.OrderedDict()        # (segment, "read" | "append") -> None

    def touch(self, seg, kind):
        key = (seg, kind)
        self.lru[key] = None
        self.lru.move_to_end(key)
        if len(self.lru) > self.limit:
            self._evict()

    def _evict(self):
        victims = []
        for seg, kind in self.lru:                 # oldest first
            if len(self.lru) - len(victims) <= self.limit:
                break
            if kind == "read" or not seg.unsynced:
                victims.append((seg, kind))
        for seg, kind in victims:
            del self.lru[(seg, kind)]
            seg.release(kind)

    def forget(self, seg):
        for kind in ("read", "append"):
            self.lru.pop((seg, kind), None)


def raise_descriptor_limit():
    """RLIMIT_NOFILE's soft limit raised to its hard limit (what Kafka's docs ask
    an admin to do by hand) -> the limit now in force (or 1024 where unknown)."""
    try:
        import resource
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if hard == resource.RLIM_INFINITY or hard > soft:
            target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
            with contextlib.suppress(ValueError, OSError):
                resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
                soft = target
        return soft if soft != resource.RLIM_INFINITY else 1 << 20
    except (ImportError, OSError, ValueError):
        return 1024


# --- Segment: one file of a partition's log, and its index -------------------
# The in-memory index of a segment: four parallel arrays, one entry per batch.
# Kafka keeps a sparse .index (offset -> position) and .timeindex on disk; doze
# keeps every batch in memory (32 bytes each) and caches the arrays in a
# .index file when a segment is closed, so a restart need not rescan it.
INDEX_MAGIC = b"DZIX1\n"
INDEX_HEADER = struct.Struct(">6sqqI")      # magic, covered log bytes, entries, crc32 of arrays


class Segment:
    """One .log file and the batch index over it. A segment that never took a
    batch holds no arrays and no paths of its own (a topic of 10,000 unused
    partitions costs little, and its memory goes back when it is deleted)."""
    __slots__ = ("files", "open_files", "base_offset", "directory", "bases", "lasts", "positions",
                 "max_timestamps", "running_max", "size", "fd", "reader", "unsynced", "born_ms")

    def __init__(self, files, directory, base_offset, open_files):
        self.files = files
        self.open_files = open_files
        self.base_offset = base_offset
        self.directory = directory
        # bases: first offset of each batch; lasts: last offset of each batch; positions:
        # byte position of each batch; running_max: the largest max_timestamp so far (sorted,
        # so bisectable). Empty tuples until the first batch (_new_arrays).
        self.bases = self.lasts = self.positions = self.max_timestamps = self.running_max = ()
        self.size = 0
        self.fd = None                      # append descriptor: the active segment, on demand
        self.reader = None                  # ReadHandle, on demand
        self.unsynced = False
        self.born_ms = 0                    # when this segment started taking appends (segment.ms)

    @property
    def path(self):
        return os.path.join(self.directory, segment_name(self.base_offset))

    @property
    def index_path(self):
        return os.path.join(self.directory, segment_name(self.base_offset, ".index"))

    def _new_arrays(self):
        self.bases, self.lasts, self.positions, self.max_timestamps, self.running_max = (
            array.array("q") for _ in range(5))

    def create(self):
        """The empty file; its append descriptor is opened by the first append."""
        self.files.close(self.files.open_append(self.path, create=True))

    def takes_appends_from(self, now_ms):
        """This segment became the active one now (segment.ms counts from here)."""
        self.born_ms = now_ms

    def open_existing(self):
        """Load the index (cache, then a scan of what it does not cover); cut a torn tail."""
        file_size = os.stat(self.path).st_size
        covered = self._load_index_cache(file_size)
        good_end = self._scan(covered, file_size)
        if good_end < file_size:
            log.warning("%s: cut a torn tail of %d bytes at position %d (a partial batch "
                        "left by a crash)", self.path, file_size - good_end, good_end)
            self.files.truncate(self.path, good_end)
        self.size = good_end

    def _load_index_cache(self, file_size):
        try:
            with open(self.index_path, "rb") as f:
                data = f.read()
            magic, covered, count, crc = INDEX_HEADER.unpack_from(data)
        except (OSError, struct.error):
            return 0
        body = memoryview(data)[INDEX_HEADER.size:]
        if magic != INDEX_MAGIC or covered > file_size or len(body) != count * 32 \
                or zlib.crc32(body) != crc:
            return 0
        self._new_arrays()
        for i, arr in enumerate((self.bases, self.lasts, self.positions, self.max_timestamps)):
            arr.frombytes(body[i * count * 8:(i + 1) * count * 8])   # native order: a cache
        self.running_max = array.array("q", itertools.accumulate(self.max_timestamps, max))
        return covered

    def save_index_cache(self):
        arrays = b"".join(bytes(a) for a in (self.bases, self.lasts, self.positions,
                                                 self.max_timestamps))
        head = INDEX_HEADER.pack(INDEX_MAGIC, self.size, len(self.bases), zlib.crc32(arrays))
        with contextlib.suppress(OSError):
            self.files.write_file(self.index_path, head + arrays)

    def _scan(self, pos, file_size):
        """Index the batches from `pos`, reading headers only. Returns where the
        last whole, well-formed batch ends (anything after it is a torn tail)."""
        fd = self.read_handle().fd
        expected = self.lasts[-1] + 1 if self.lasts else self.base_offset
        last_start = None
        while pos + BATCH_HEADER_SIZE <= file_size:
            head = os.pread(fd, BATCH_HEADER_SIZE, pos)
            h = read_batch_header(head)
            end = pos + LOG_OVERHEAD + h.batch_length
            if h.magic != 2 or h.batch_length < BATCH_HEADER_SIZE - LOG_OVERHEAD \
                    or end > file_size or h.base_offset < expected:
                break                              # (above expected: a gap the cleaner left)
            self._add(h.base_offset, h.base_offset + h.last_offset_delta, pos, h.max_timestamp)
            expected = h.base_offset + h.last_offset_delta + 1
            last_start, pos = pos, end
        if last_start is not None and pos == file_size:
            # The last batch is the one a crash could have left half-written
            # with the right length; its CRC says whether it is whole.
            batch = os.pread(fd, pos - last_start, last_start)
            if crc32c(memoryview(batch)[CRC_START:]) != read_batch_header(batch).crc:
                self._drop_last()
                pos = last_start
        return pos

    def add_written(self, h, size):
        """A batch the cleaner wrote at the end of this (new) segment."""
        self._add(h.base_offset, h.base_offset + h.last_offset_delta, self.size, h.max_timestamp)
        self.size += size

    def _add(self, base, last, position, max_timestamp):
        try:
            self.bases.append(base)
        except AttributeError:                   # the first batch
            self._new_arrays()
            self.bases.append(base)
        self.lasts.append(last)
        self.positions.append(position)
        self.max_timestamps.append(max_timestamp)
        running = self.running_max
        running.append(max_timestamp if not running or running[-1] < max_timestamp else running[-1])

    def _drop_last(self):
        for a in (self.bases, self.lasts, self.positions, self.max_timestamps, self.running_max):
            a.pop()

    # --- descriptors, opened on demand ---
    def read_handle(self):
        if self.reader is None:
            self.reader = ReadHandle(self.path)
        self.open_files.touch(self, "read")
        return self.reader

    def append_fd(self):
        if self.fd is None:
            self.fd = self.files.open_append(self.path, create=False)
        self.open_files.touch(self, "append")
        return self.fd

    def release(self, kind):
        """The cache lets go of a descriptor (an append one only when synced)."""
        if kind == "read":
            self.reader = None
        elif self.fd is not None:
            self.files.close(self.fd)
            self.fd = None

    def close(self, sync=True):
        """Let go of every descriptor (a deleted segment, a stopping broker)."""
        if sync:
            self.sync()
        self.open_files.forget(self)
        self.reader = None
        if self.fd is not None:
            self.files.close(self.fd)
            self.fd = None

    def append(self, batch, base, last, max_timestamp):
        fd = self.append_fd()
        try:
            self.files.write(fd, batch)
        except OSError as e:
            # A write that failed part-way must not leave half a batch behind
            # the next one: cut the file back to where it was.
            try:
                self.files.truncate_fd(fd, self.size)
            except OSError as cut:
                raise TornWrite(e.errno, f"{e.strerror}, and cutting back failed: {cut}") from e
            raise
        self._add(base, last, self.size, max_timestamp)
        self.size += len(batch)
        self.unsynced = True

    def sync(self):
        """fsync what was appended (a segment let go of; the group commit's
        fsyncs are LogManager's, through PartitionLog.flush_begin)."""
        if self.unsynced and self.fd is not None:
            self.files.fsync(self.fd)
            self.unsynced = False

    def take_unsynced(self):
        """A group commit takes this segment's appends: -> True if it has some
        to fsync (its flag cleared now; an append meanwhile sets it again)."""
        if self.unsynced and self.fd is not None:
            self.unsynced = False
            return True
        return False

    def untake_unsynced(self):
        """The group commit ended before fsyncing it: unsynced again."""
        self.unsynced = True

    def close_for_append(self):
        self.close()
        self.save_index_cache()

    @property
    def next_offset(self):
        return self.lasts[-1] + 1 if self.lasts else self.base_offset

    @property
    def largest_timestamp(self):
        return self.running_max[-1] if self.running_max else -1

    def batch_at(self, offset):
        """Index of the batch holding `offset` (or the first one after it), or None."""
        i = bisect.bisect_left(self.lasts, offset)
        return i if i < len(self.lasts) else None

    def end_position(self, i):
        return self.positions[i + 1] if i + 1 < len(self.positions) else self.size

    def read_batch(self, i):
        return os.pread(self.read_handle().fd, self.end_position(i) - self.positions[i],
                        self.positions[i])


# --- PartitionLog: one partition's segments, its offsets, its appends --------

class PartitionLog:
    """One partition: its segments, its log start offset, its end offset, and
    its high watermark -- which in doze is the end of what has been fsynced:
    a consumer never sees a record a power cut could take back."""
    __slots__ = ("topic", "partition", "dir", "files", "open_files", "config", "clock", "segments",
                 "log_start_offset", "high_watermark", "dir_unsynced", "offline", "__weakref__")

    def __init__(self, topic, partition, directory, files, topic_config, clock, open_files):
        self.topic, self.partition = topic, partition
        self.dir = directory
        self.files = files
        self.open_files = open_files
        self.config = topic_config          # name -> effective value, looked up live
        self.clock = clock
        self.segments = []
        self.log_start_offset = 0
        self.high_watermark = 0
        self.dir_unsynced = False
        self.offline = None                 # why its disk failed it (see "When the disk fails")

    # --- opening ---
    def create(self):
        self.files.mkdir(self.dir)
        self.create_segment_at(0)

    def open(self, log_start_offset):
        self.recover_cleaning()
        bases = sorted(int(name[:-4]) for name in os.listdir(self.dir)
                       if name.endswith(".log") and name[:-4].isdigit())
        if not bases:
            self.create_segment_at(max(log_start_offset, 0))
        for base in bases:
            seg = Segment(self.files, self.dir, base, self.open_files)
            seg.open_existing()
            self.segments.append(seg)
        self.active.takes_appends_from(self.clock() * 1000)
        self.log_start_offset = max(log_start_offset, self.segments[0].base_offset)
        self.high_watermark = self.next_offset

    def recover_cleaning(self):
        """Put right what a crash left of a cleaning (Kafka's LogLoader, in its
        order): .deleted and .tmp files go; a .cleaned file is a cleaning never
        swapped in -- it goes, and so does a .swap from it; a .swap is a cleaning
        swapped in halfway -- the old segments it replaces go (their base
        offsets, first to last, are in its name: B.log.L.swap), and it becomes
        the segment."""
        names = os.listdir(self.dir)
        for name in names:
            if name.endswith((".deleted", ".tmp", ".cleaned")):
                self.files.unlink(os.path.join(self.dir, name))
        swaps = [n for n in names if re.fullmatch(r"\d{20}\.log\.\d+\.swap", n)]
        for swap in sorted(swaps):
            first, last = int(swap[:20]), int(swap.split(".")[2])
            for name in os.listdir(self.dir):
                if name.endswith((".log", ".index")) and name[:20].isdigit() and first <= int(name[:20]) <= last:
                    self.files.unlink(os.path.join(self.dir, name))
            self.files.rename(os.path.join(self.dir, swap), os.path.join(self.dir, segment_name(first)))
            log.info("%s: a cleaning swapped in before a crash is finished (%s)", self.dir, swap)
        if swaps:
            self.files.fsync_dir(self.dir)

    def replace_segments(self, old, new):
        """Swap a cleaned segment in for the consecutive segments `old` (never
        the active one), as Kafka's LocalLog.replaceSegments does: `new` was
        written beside them as B.log.cleaned and fsynced; it is renamed B.log.L.swap
        (L: the last old segment's base; the directory fsynced: from here a crash
        finishes the swap), the old
        segments' files are renamed .deleted, the swap becomes B.log, the
        directory is fsynced again, and the .deleted files go. A Fetch still
        sending from an old file keeps its descriptor, and so its bytes."""
        cleaned, swap = new.path + ".cleaned", f"{new.path}.{old[-1].base_offset}.swap"
        self.files.rename(cleaned, swap)
        self.files.fsync_dir(self.dir)
        for seg in old:
            seg.close(sync=False)
            self.files.unlink(seg.index_path)
            self.files.rename(seg.path, seg.path + ".deleted")
        self.files.rename(swap, new.path)
        self.files.fsync_dir(self.dir)
        for seg in old:
            self.files.unlink(seg.path + ".deleted")
        i = self.segments.index(old[0])
        self.segments[i:i + len(old)] = [new]
        new.save_index_cache()

    def create_segment_at(self, base):
        """A new, empty segment: its directory entry is made durable by the
        next flush (an empty file has no content of its own to fsync)."""
        seg = Segment(self.files, self.dir, base, self.open_files)
        seg.create()
        seg.takes_appends_from(self.clock() * 1000)
        self.segments.append(seg)
        self.dir_unsynced = True
        return seg

    @property
    def active(self):
        return self.segments[-1]

    @property
    def next_offset(self):
        """The log end offset (LEO): the offset the next batch will get."""
        return self.active.next_offset

    # --- writing ---
    def append(self, batch, header):
        """Append one validated batch (a writable buffer); assign its offsets by
        writing base_offset into its header. Returns the base offset."""
        seg = self.active
        if seg.size + len(batch) > self.config("segment.bytes") and seg.bases \
                or self._segment_too_old(seg):
            seg = self.roll()
        base = self.next_offset
        I64.pack_into(batch, BATCH_AT["base_offset"], base)
        I32.pack_into(batch, BATCH_AT["partition_leader_epoch"], 0)   # one leader, epoch 0
        seg.append(batch, base, base + header.last_offset_delta, header.max_timestamp)
        return base

    def _segment_too_old(self, seg):
        """segment.ms (a compacted topic's: at most max.compaction.lag.ms, as Kafka's maxSegmentMs)."""
        limit = self.config("segment.ms")
        if "compact" in self.config("cleanup.policy"):
            limit = min(limit, self.config("max.compaction.lag.ms"))
        return bool(seg.bases) and self.clock() * 1000 - seg.born_ms > limit

    def roll(self):
        """Start a new segment at the log end offset. The old one's last writes
        are fsynced by the next group commit, which then closes it."""
        self.active.save_index_cache()
        return self.create_segment_at(self.next_offset)

    def flush_begin(self):
        """A group commit takes what this log appended since the last one:
        -> (the offset its high watermark may move to once the disk confirms
        it, the segments to fsync, the directory to fsync or None), or None
        if the log is offline. Their flags are cleared now: an append meanwhile
        sets them again, for the next group commit."""
        if self.offline:
            return None
        segs = [seg for seg in self.segments if seg.take_unsynced()]
        directory = self.dir if self.dir_unsynced else None
        self.dir_unsynced = False
        return self.next_offset, segs, directory

    def flush_undo(self, segs, directory):
        """A group commit ended before this log's turn (its budget spent): dirty again."""
        for seg in segs:
            seg.untake_unsynced()
        self.dir_unsynced = self.dir_unsynced or directory is not None

    def flush_end(self, target):
        """The disk confirmed what was appended up to target: rolled segments
        are let go of, and the high watermark moves. -> True if it moved.
        (After a failed fsync LogManager takes the log offline instead: the
        high watermark stays where the disk last confirmed it.)"""
        for seg in self.segments:
            if seg is not self.active and seg.fd is not None and not seg.unsynced:
                seg.close(sync=False)                 # rolled: it takes no more appends
        if self.offline or target <= self.high_watermark:
            return False
        self.high_watermark = target
        return True

    # --- reading ---
    def segment_for(self, offset):
        i = bisect.bisect_right([s.base_offset for s in self.segments], offset) - 1
        return self.segments[max(i, 0)]

    def read(self, offset, max_bytes, end_offset, min_one=True):
        """Batches from the one holding `offset`, stopping before `end_offset`
        and within max_bytes (but at least one whole batch when min_one, as
        KIP-74 asks). Returns a FileSlice or None; reads one segment only."""
        if offset >= end_offset:
            return None
        for seg in self.segments[self.segments.index(self.segment_for(offset)):]:
            i = seg.batch_at(offset)
            if i is None:
                continue
            if seg.bases[i] >= end_offset:
                return None
            start = seg.positions[i]
            j = i
            while j + 1 < len(seg.bases) and seg.bases[j + 1] < end_offset \
                    and seg.end_position(j + 1) - start <= max_bytes:
                j += 1
            size = seg.end_position(j) - start
            if size > max_bytes and not min_one:
                return None
            return FileSlice(seg.read_handle(), start, size, seg.lasts[j] + 1)
        return None

    def batches(self, start_offset=0, end_offset=None):
        """Yield (base_offset, batch bytes) of every batch from start_offset:
        used by tests, the console and producer-state rebuilds, never by Fetch."""
        end_offset = self.next_offset if end_offset is None else end_offset
        for seg in list(self.segments):
            if seg.next_offset <= start_offset:
                continue
            i = seg.batch_at(start_offset)
            while i is not None and i < len(seg.bases) and seg.bases[i] < end_offset:
                yield seg.bases[i], seg.read_batch(i)
                i += 1

    def batch_heads(self, start_offset):
        """Yield (base_offset, the first 80 bytes of each batch) from start_offset:
        enough for the header and a control record, never the records."""
        for seg in list(self.segments):
            if seg.next_offset <= start_offset:
                continue
            fd = seg.read_handle().fd
            i = seg.batch_at(start_offset)
            while i is not None and i < len(seg.bases):
                yield seg.bases[i], os.pread(fd, 80, seg.positions[i])
                i += 1

    def offset_at_bytes_from_end(self, nbytes):
        """The first batch offset within the last `nbytes` of the log."""
        left = nbytes
        for seg in reversed(self.segments):
            if seg.size > left:
                i = bisect.bisect_left(seg.positions, seg.size - left)
                return seg.bases[i] if i < len(seg.bases) else seg.next_offset
            left -= seg.size
        return self.log_start_offset

    # --- timestamps (ListOffsets) ---
    # Kafka's time index holds each segment's growing maximum timestamp; doze's
    # running_max is the same per batch, so the first batch whose records reach
    # a timestamp is a bisection away. These are steps (generators: `yield from`
    # them inside in_steps), as decoding a batch to find the record is real work.

    def offset_for_timestamp(self, timestamp):
        """-> (offset, timestamp) of the first record at or after `timestamp`
        from the log start offset, or None."""
        for seg in self.segments:
            if not seg.bases or seg.running_max[-1] < timestamp or seg.lasts[-1] < self.log_start_offset:
                continue
            i = bisect.bisect_left(seg.running_max, timestamp)
            start = seg.batch_at(self.log_start_offset)
            if start > i:                  # the log starts inside this segment, past batch i
                i = next((k for k in range(start, len(seg.bases))
                          if seg.max_timestamps[k] >= timestamp), None)
                if i is None:
                    continue
            return (yield from self._refine(seg, i, lambda t: t >= timestamp))
        return None

    def offset_of_max_timestamp(self):
        """-> (offset, timestamp) of the first record with the largest timestamp, or None."""
        best = None
        for seg in self.segments:
            if seg.bases and (best is None or seg.running_max[-1] > best.running_max[-1]):
                best = seg
        if best is None:
            return None
        ts = best.running_max[-1]
        return (yield from self._refine(best, bisect.bisect_left(best.running_max, ts),
                                        lambda t: t == ts))

    def _refine(self, seg, i, match):
        """The matching record inside batch i. A batch doze cannot decode
        (lz4, snappy, zstd, or broken records) answers with its first offset,
        and so does a LogAppendTime batch, whose records all have its time."""
        batch = seg.read_batch(i)
        h = read_batch_header(batch)
        first = max(h.base_offset, self.log_start_offset), h.max_timestamp
        if h.attributes & ATTR_LOG_APPEND_TIME:
            return first
        try:
            for n, (off_delta, ts_delta, _, _, _) in enumerate(decode_records(batch)):
                if match(h.base_timestamp + ts_delta) and h.base_offset + off_delta >= self.log_start_offset:
                    return h.base_offset + off_delta, h.base_timestamp + ts_delta
                if n % 1024 == 1023:
                    yield
        except RecordsError:
            pass
        return first

    # --- deleting ---
    def delete_records_before(self, offset):
        """DeleteRecords: move the log start offset up; drop whole segments below it."""
        self.log_start_offset = max(self.log_start_offset, offset)
        while len(self.segments) > 1 and self.segments[1].base_offset <= self.log_start_offset:
            self._delete_segment(self.segments.pop(0))
        if self.log_start_offset >= self.next_offset and self.active.bases:
            self.roll()         # everything is deleted: start afresh at the same offset
            self._delete_segment(self.segments.pop(0))

    def apply_retention(self, now_ms):
        """retention.ms and retention.bytes: delete the oldest segments that are
        past either limit. Returns True if anything was deleted."""
        retention_ms, retention_bytes = self.config("retention.ms"), self.config("retention.bytes")
        deleted = False
        if "delete" not in self.config("cleanup.policy"):
            return False                                # compact alone: Kafka keeps every segment
        while self.segments and self.segments[0].bases:
            seg = self.segments[0]
            total = sum(s.size for s in self.segments)
            too_old = retention_ms >= 0 and now_ms - seg.largest_timestamp > retention_ms
            too_big = retention_bytes >= 0 and total - seg.size >= retention_bytes
            if not (too_old or too_big):
                break
            if seg is self.active:
                if self.high_watermark < self.next_offset:
                    break                       # never delete what is not yet durable
                self.roll()
            self._delete_segment(self.segments.pop(0))
            self.log_start_offset = max(self.log_start_offset, self.segments[0].base_offset)
            deleted = True
        return deleted

    def fail(self, why):
        """Its disk failed it: offline from now on, no writes nor reads (LogManager.take_offline)."""
        self.offline = why

    def _delete_segment(self, seg):
        seg.close(sync=False)
        self.files.unlink(seg.path)
        self.files.unlink(seg.index_path)
        self.dir_unsynced = True

    def close(self, clean=True):
        """A clean shutdown: sync, and cache every index so the next start is
        quick. Unclean (a crash, in tests, or an offline partition): just let
        go of the descriptors."""
        for seg in self.segments:
            if clean and not self.offline:
                seg.close_for_append()
            else:
                seg.close(sync=False)

    def discard(self):
        """Remove a partition that never became part of a topic (a creation that failed)."""
        self.close(clean=False)
        self.files.rmtree(self.dir)


# --- The flusher: a long group commit's fsyncs off the loop --------------------
# The one thread besides the loop. A group commit that will take long -- one
# over SYNCFS_MIN_LOGS logs or more (a syncfs), or over FLUSHER_MIN_BYTES
# appended since the last -- is handed to it: the loop reads, checks and
# appends the next requests while the disk works, and takes the result in a
# later pass (the flusher wakes its select). The flusher owns nothing but
# duplicates of the descriptors it is given, which it closes when done, so
# the loop may roll, close or delete a segment meanwhile; every piece of
# state -- the high watermarks, what is acknowledged, a log taken offline --
# stays the loop's, changed only when it takes the result. A short group
# commit (a transaction's one-record batch, its markers) stays on the loop:
# handing it over would cost more in thread switches (~0.1 ms) than its
# fsync. A disk that numbers its changes (the tests' FaultyDisk) is flushed
# inline, so that they keep one order. conformance/bench's README has the
# figures (produce over 1 and 1,000 partitions, with and without it).
FLUSHER_MIN_BYTES = 64 * 1024   # appended since the last group commit: the next one is long
SYNCFS_MIN_LOGS = 8             # this many logs dirty: one syncfs, not an fsync each (and a long commit)


class FlushEntry:
    """One log's part of a group commit."""
    __slots__ = ("plog", "target", "segs", "directory", "own", "fds", "error")

    def __init__(self, plog, target, segs, directory):
        self.plog, self.target, self.segs, self.directory = plog, target, segs, directory
        self.own = [seg.fd for seg in segs]     # the loop's descriptors
        self.fds = self.own                     # what is fsynced: the flusher's duplicates on its thread
        self.error = None                       # the OSError its fsync raised

    def sync(self, files):
        try:
            for fd in self.fds:
                files.fsync(fd)
            if self.directory is not None:
                files.fsync_dir(self.directory)
        except OSError as e:
            self.error = e

    def duplicate(self):
        """Descriptors of the flusher's own (os.dup), so that the loop may close its own meanwhile."""
        dups = []
        try:
            for fd in self.fds:
                dups.append(os.dup(fd))
        except OSError:
            for fd in dups:
                os.close(fd)
            raise
        self.fds = dups

    def close_duplicates(self):
        if self.fds is not self.own:
            for fd in self.fds:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self.fds = self.own


class FlushJob:
    """One group commit's fsyncs: the data directory first (a partition was
    made), then each log's segments and directory -- or, for
    SYNCFS_MIN_LOGS logs or more, one syncfs of them all."""

    def __init__(self, root, entries, urgent, root_first):
        self.root = root                # the data directory: where a syncfs is made
        self.root_first = root_first    # its entries changed: fsync it before anything else
        self.entries = entries          # [FlushEntry], the urgent ones first
        self.urgent = urgent            # how many entries came from LogManager.urgent
        self.at_once = len(entries) >= SYNCFS_MIN_LOGS
        self.done = 0                   # entries made durable (or failed), in order
        self.data_dir_error = self.syncfs_error = self.crashed = None
        self.finished = None            # a threading.Event, set when done, for a job handed to the thread

    def watch(self):
        """A job for the thread: the loop learns it finished from `finished`."""
        self.finished = threading.Event()

    def run(self, files, deadline=None):
        """The fsyncs, in order; with a deadline, stops after the entry that
        passed it (a syncfs is one step: no deadline). A bug in doze is kept
        for the loop to log; what was not done is then dirty again."""
        try:
            self._run(files, deadline)
        except Exception as e:
            self.crashed = e

    def _run(self, files, deadline):
        if self.root_first:
            try:
                files.fsync_dir(self.root)
            except OSError as e:
                self.data_dir_error = e
        if self.at_once:
            try:
                if files.syncfs(self.root):
                    self.done = len(self.entries)
                    return
            except OSError as e:
                self.syncfs_error = e   # then file by file: a file whose write failed fails its own fsync
        for entry in self.entries:
            entry.sync(files)
            self.done += 1
            if deadline is not None and time.perf_counter() > deadline:
                return


class Flusher:
    """Runs FlushJobs: inline, or one at a time on its own thread where the
    disk allows it (Files.fsyncs_on_a_thread) and the loop can be woken."""

    def __init__(self, files, wake=None):
        self.files = files
        self.wake = wake                        # wakes the loop's select (thread-safe), or None: inline only
        self.threaded = wake is not None and files.fsyncs_on_a_thread
        self.in_flight = None                   # the job on the thread
        self.jobs = self.thread = None

    def run(self, job, deadline=None):
        """Run a job on the caller's thread -> the job, done."""
        job.run(self.files, deadline)
        return job

    def hand_over(self, job):
        """Start a job on the thread (finished() gives it back); where the
        descriptors cannot be duplicated, run it here."""
        job.watch()
        try:
            for i, entry in enumerate(job.entries):
                entry.duplicate()
        except OSError:                         # out of descriptors: the loop waits for the disk this time
            for entry in job.entries[:i]:
                entry.close_duplicates()
            job.run(self.files)
            job.finished.set()
        else:
            if self.thread is None:
                self.jobs = queue.SimpleQueue()
                self.thread = threading.Thread(target=self._work, name="doze-flusher", daemon=True)
                self.thread.start()
            self.jobs.put(job)
        self.in_flight = job

    def _work(self):
        """The thread: a job's fsyncs, its descriptors closed, the loop woken."""
        while True:
            job = self.jobs.get()
            if job is None:
                return
            job.run(self.files)
            for entry in job.entries:
                entry.close_duplicates()
            job.finished.set()
            self.wake()

    @property
    def busy(self):
        return self.in_flight is not None

    def done(self):
        """Has the job in flight finished?"""
        return self.in_flight is not None and self.in_flight.finished.is_set()

    def finished(self):
        """The job in flight, once it finished (it is then taken), else None."""
        if not self.done():
            return None
        job, self.in_flight = self.in_flight, None
        return job

    def wait(self):
        """Until the job in flight (if any) has finished."""
        if self.in_flight is not None:
            self.in_flight.finished.wait()

    def close(self):
        """The thread ends after its job (the broker stops)."""
        if self.thread is not None:
            self.jobs.put(None)
            self.thread.join()
            self.thread = None


###############################################################################
# 8. META.DB AND THE TOPICS -- the metadata store, every partition of every topic
###############################################################################


# --- MetadataStore: meta.db ------------------------------------------------------
# One table per concept, each replacing a piece of Kafka's cluster metadata.

METADATA_SQL = """
CREATE TABLE IF NOT EXISTS settings (       -- cluster id, counters, broker-level dynamic configs
    name  TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS topics (         -- KRaft's TopicRecord + ConfigRecords
    name       TEXT PRIMARY KEY,
    topic_id   BLOB NOT NULL,
    partitions INTEGER NOT NULL,
    configs    TEXT NOT NULL                -- JSON object of topic-level overrides
);
CREATE TABLE IF NOT EXISTS groups (         -- __consumer_offsets' GroupMetadata records
    group_id TEXT PRIMARY KEY,
    state    TEXT NOT NULL                  -- JSON: protocol, generation, leader, members
);
CREATE TABLE IF NOT EXISTS group_offsets (  -- __consumer_offsets' OffsetCommit records
    group_id         TEXT NOT NULL,
    topic            TEXT NOT NULL,
    partition        INTEGER NOT NULL,
    committed_offset INTEGER NOT NULL,
    leader_epoch     INTEGER NOT NULL,
    metadata         TEXT,
    commit_timestamp INTEGER NOT NULL,
    PRIMARY KEY (group_id, topic, partition)
);
CREATE TABLE IF NOT EXISTS transactions (   -- __transaction_state
    transactional_id     TEXT PRIMARY KEY,
    producer_id          INTEGER NOT NULL,
    previous_producer_id INTEGER NOT NULL,
    producer_epoch       INTEGER NOT NULL,
    timeout_ms           INTEGER NOT NULL,
    state                TEXT NOT NULL,     -- Kafka's names: Empty, Ongoing, PrepareCommit, ...
    partitions           TEXT NOT NULL,     -- JSON [[topic, partition], ...]
    groups               TEXT NOT NULL,     -- JSON [group, ...]: AddOffsetsToTxn
    offsets              TEXT NOT NULL,     -- JSON: offsets staged by TxnOffsetCommit
    txn_start_ms         INTEGER NOT NULL,
    last_update_ms       INTEGER NOT NULL,
    begun_version        INTEGER NOT NULL DEFAULT 1,   -- the transaction version that began it (1, 2)
    ended_version        INTEGER NOT NULL DEFAULT 1,   -- ... that ended it: its markers' (KIP-890)
    next_producer_id     INTEGER NOT NULL DEFAULT -1   -- version 2 at epoch exhaustion: the id after it
);
CREATE TABLE IF NOT EXISTS scram_credentials (   -- KRaft's UserScramCredentialRecord: no password
    user TEXT NOT NULL, mechanism TEXT NOT NULL, salt BLOB NOT NULL, stored_key BLOB NOT NULL,
    server_key BLOB NOT NULL, iterations INTEGER NOT NULL, PRIMARY KEY (user, mechanism));
CREATE TABLE IF NOT EXISTS acls (           -- KRaft's AccessControlEntryRecords
    resource_type INTEGER NOT NULL, resource_name TEXT NOT NULL, pattern_type INTEGER NOT NULL,
    principal TEXT NOT NULL, host TEXT NOT NULL, operation INTEGER NOT NULL, permission INTEGER NOT NULL,
    PRIMARY KEY (resource_type, resource_name, pattern_type, principal, host, operation, permission));
CREATE TABLE IF NOT EXISTS group_configs (  -- KRaft's ConfigRecords of GROUP resources (KIP-848)
    group_id TEXT NOT NULL, name TEXT NOT NULL, value TEXT NOT NULL, PRIMARY KEY (group_id, name));
CREATE TABLE IF NOT EXISTS partitions (     -- Kafka's log-start-offset-checkpoint file
    topic            TEXT NOT NULL,
    partition        INTEGER NOT NULL,
    log_start_offset INTEGER NOT NULL DEFAULT 0,
    has_txn          INTEGER NOT NULL DEFAULT 0,   -- ever held a transactional batch
    cleaner_checkpoint INTEGER NOT NULL DEFAULT -1,  -- Kafka's cleaner-offset-checkpoint: the next first dirty offset
    PRIMARY KEY (topic, partition)
);
"""
OffsetEntry = collections.namedtuple("OffsetEntry", "offset leader_epoch metadata commit_timestamp")
PRODUCER_ID_BLOCK = 1000        # ids handed out per meta.db write, like Kafka's ProducerIdManager
META_DB_BUSY_S = 1.0            # how long a commit waits for another process's lock on meta.db (on the loop)
META_LAZY_SYNC_S = 0.2          # a change nobody waits on is fsynced this soon (if no other sync took it)

# When a meta.db change is made durable -- MetadataStore.transaction(sync=...).
# sqlite runs with synchronous=NORMAL: a COMMIT appends to meta.db-wal without
# an fsync, and MetadataStore.sync() fsyncs meta.db-wal itself, which makes
# every commit so far durable at once (the WAL is written in order, so a
# durable commit implies every earlier one). Three kinds of change:
SYNC_NOW = "now"                # fsynced before the call returns (admin changes, producer id blocks,
                                # has_txn marks: later writes to other files depend on them)
SYNC_ANSWERS = "answers"        # the group commit: no answer leaves the broker until it is durable
                                # (Connection.push holds them), and one fsync at the end of the loop's
                                # pass covers every such change of the pass -- coordinators' writes
SYNC_LATER = "later"            # nobody waits: a lost one is redone after a restart (a transaction's
                                # Complete step, redone from its durable Prepare* state)


def store_hint(e):
    """What an sqlite error on meta.db most likely means, for the log."""
    text = str(e).lower()
    for words, hint in ((("readonly", "read-only", "unable to open"), "is it, or its directory, read-only?"),
                        (("locked", "busy"), "another process holds it: a second broker on this data directory?"),
                        (("malformed", "not a database", "corrupt"),
                         "it is damaged: restore it from a copy (without it the partitions' data is not known)"),
                        (("full",), "the disk is full"),
                        (("disk i/o",), "the disk failed a read or write")):
        if any(w in text for w in words):
            return hint
    return "see sqlite's message"


class StoreFailed(KafkaError):
    """meta.db refused a change (full, read-only, locked, failing): nothing of
    it was kept. KAFKA_STORAGE_ERROR, which the coordinators answer as Kafka's
    do when their log refuses an append: NOT_COORDINATOR."""


# An ACL as meta.db keeps it (Kafka's AclBinding, flattened): §13's Authorizer decides with them.
Acl = collections.namedtuple("Acl", "resource_type name pattern principal host operation permission")


class MetadataStore:
    """meta.db. Every method that changes something commits before it returns,
    or raises StoreFailed, leaving nothing half-written: sqlite rolls the
    transaction back. Callers change memory only after it returned."""

    def __init__(self, path, files=None):
        self.path = path
        self.files = files or Files()
        self.kept_fds = {}                      # meta.db-wal's descriptor, for its fsyncs (_fsync_wal)
        try:
            self.db = sqlite3.connect(path, isolation_level=None, check_same_thread=False,
                                      timeout=META_DB_BUSY_S)
            # WAL: a commit appends to meta.db-wal; sync() fsyncs those appends, so
            # a synced change survives a power cut (sqlite alone would not fsync them).
            self.db.execute("PRAGMA journal_mode=WAL")
            self.db.execute("PRAGMA synchronous=NORMAL")     # sync() fsyncs: the group commit
            self.db.executescript(METADATA_SQL)
            self._add_columns("transactions", METADATA_SQL)
            self._add_columns("partitions", METADATA_SQL)
            self.db.execute("BEGIN IMMEDIATE")         # can it be written at all?
            self.db.execute("ROLLBACK")
            # The schema, and the directory entries of meta.db and of the WAL file
            # sqlite creates on opening it (sqlite would fsync the directory
            # itself only at its first checkpoint).
            self._fsync_wal()
            self.files.fsync_dir(os.path.dirname(os.path.abspath(path)))
        except (sqlite3.Error, OSError) as e:
            self._close_kept_fds()
            raise sqlite3.DatabaseError(f"{path} cannot be used: {e} ({store_hint(e)})") from None
        self.commits = self.synced = 0          # commits made, and made durable
        self.awaited = 0                        # the last SYNC_ANSWERS commit: answers wait for it
        self.owed_since = None                  # when a SYNC_LATER commit was first left unsynced
        self.failed = None                      # why an fsync failed: nothing may be written after it

    @contextlib.contextmanager
    def transaction(self, sync=SYNC_NOW):
        """One sqlite transaction, committed on leaving the block, and made
        durable as `sync` says (SYNC_NOW, SYNC_ANSWERS or SYNC_LATER)."""
        self._refuse_if_failed()
        try:
            self.db.execute("BEGIN IMMEDIATE")
            try:
                yield self.db
            except BaseException:
                self.db.execute("ROLLBACK")
                raise
            self.files.commit(self.db)
        except sqlite3.Error as e:
            with contextlib.suppress(sqlite3.Error):
                if self.db.in_transaction:
                    self.db.execute("ROLLBACK")
            log.error("meta.db refused a change: %s (%s); nothing of it was kept", e, store_hint(e))
            raise StoreFailed(ErrorCode.KAFKA_STORAGE_ERROR, f"meta.db: {e}") from None
        self.commits += 1
        if sync == SYNC_NOW:
            self.sync()
        elif sync == SYNC_ANSWERS:
            self.awaited = self.commits
        elif self.owed_since is None:
            self.owed_since = time.monotonic()

    def answers_wait(self):
        """Is a change that answers must not run ahead of still unsynced?"""
        return self.awaited > self.synced

    def sync_due(self):
        return self.answers_wait() or (
            self.owed_since is not None and time.monotonic() - self.owed_since >= META_LAZY_SYNC_S)

    def sync(self):
        """fsync meta.db-wal: every commit so far is durable (one fsync for all
        of them). A failed fsync is never retried and trusted: from then on
        meta.db takes no change (StoreFailed) until a restart reads what it holds."""
        self._refuse_if_failed()
        if self.synced == self.commits:
            return
        try:
            self._fsync_wal()
        except OSError as e:
            self.failed = f"fsync of meta.db-wal failed: {e}"
            self.awaited, self.owed_since = self.synced, None     # the answers held now are the last held
            log.error("%s; meta.db takes no more changes until a restart (answers that waited "
                      "for it are not sent: their connections are closed)", self.failed)
        self._refuse_if_failed()
        self.synced, self.owed_since = self.commits, None

    def _fsync_wal(self):
        """meta.db-wal's descriptor stays open (sqlite keeps the file while its
        connection is open), so a sync is one fsync, not an open and a close too."""
        self.files.sync_file(self.path + "-wal", fallback=self.path, keep=self.kept_fds)

    def _refuse_if_failed(self):
        if self.failed:
            raise StoreFailed(ErrorCode.KAFKA_STORAGE_ERROR, f"meta.db: {self.failed}")

    def close(self):
        with contextlib.suppress(StoreFailed):
            self.sync()
        self.db.close()
        self._close_kept_fds()

    def _close_kept_fds(self):
        for fd in self.kept_fds.values():
            os.close(fd)
        self.kept_fds.clear()

    # --- SCRAM credentials ---
    def scram_credential(self, user, mechanism):
        """-> (salt, stored key, server key, iterations) or None."""
        return self.db.execute("SELECT salt, stored_key, server_key, iterations FROM scram_credentials "
                               "WHERE user = ? AND mechanism = ?", (user, mechanism)).fetchone()

    def save_scram_credential(self, user, mechanism, credential):
        self.alter_scram_credentials([], [(user, mechanism, credential)])

    def alter_scram_credentials(self, deletions, upsertions):
        """[(user, mechanism)] removed and [(user, mechanism, credential)] stored, in one commit."""
        with self.transaction() as db:
            for user, mechanism in deletions:
                db.execute("DELETE FROM scram_credentials WHERE user = ? AND mechanism = ?", (user, mechanism))
            for user, mechanism, (salt, stored, server, iterations) in upsertions:
                db.execute("INSERT OR REPLACE INTO scram_credentials VALUES (?, ?, ?, ?, ?, ?)",
                           (user, mechanism, bytes(salt), stored, server, iterations))

    def scram_users(self):
        """{user: [(mechanism, iterations)]}, mechanisms in Kafka's type order."""
        out = {}
        for user, mechanism, iterations in self.db.execute(
                "SELECT user, mechanism, iterations FROM scram_credentials ORDER BY user, mechanism"):
            out.setdefault(user, []).append((mechanism, iterations))
        return out

    # --- ACLs ---
    def acls(self):
        return [Acl(*row) for row in self.db.execute("SELECT * FROM acls ORDER BY rowid")]

    def alter_acls(self, added, removed):
        with self.transaction() as db:
            db.executemany("DELETE FROM acls WHERE resource_type = ? AND resource_name = ? AND pattern_type = ? "
                           "AND principal = ? AND host = ? AND operation = ? AND permission = ?", removed)
            db.executemany("INSERT OR IGNORE INTO acls VALUES (?, ?, ?, ?, ?, ?, ?)", added)

    # --- group configs ---
    def group_configs(self):
        """{group id: {config name: value}}."""
        out = {}
        for group_id, name, value in self.db.execute("SELECT group_id, name, value FROM group_configs"):
            out.setdefault(group_id, {})[name] = value
        return out

    def set_group_configs(self, group_id, configs):
        """Replace one group's configs."""
        with self.transaction() as db:
            db.execute("DELETE FROM group_configs WHERE group_id = ?", (group_id,))
            db.executemany("INSERT INTO group_configs VALUES (?, ?, ?)",
                           [(group_id, n, v) for n, v in configs.items()])

    def _add_columns(self, table, sql):
        """A meta.db from an older doze: the columns its table lacks, added with their defaults."""
        have = {row[1] for row in self.db.execute(f"PRAGMA table_info({table})")}
        body = sql[sql.index(f"CREATE TABLE IF NOT EXISTS {table} ("):]
        for line in body[:body.index(");")].splitlines()[1:]:
            name = line.split()[0] if line.split() else ""
            if name.isidentifier() and name not in have and name != "PRIMARY":
                self.db.execute(f"ALTER TABLE {table} ADD COLUMN {line.split('--')[0].strip().rstrip(',')}")

    # --- settings ---
    def get_setting(self, name, default=None):
        row = self.db.execute("SELECT value FROM settings WHERE name = ?", (name,)).fetchone()
        return row[0] if row else default

    def settings_with_prefix(self, prefix):
        return dict(self.db.execute("SELECT name, value FROM settings WHERE substr(name, 1, ?) = ?",
                                    (len(prefix), prefix)))

    def set_settings(self, values):
        with self.transaction() as db:
            for name, value in values.items():
                if value is None:
                    db.execute("DELETE FROM settings WHERE name = ?", (name,))
                else:
                    db.execute("INSERT OR REPLACE INTO settings VALUES (?, ?)", (name, str(value)))

    def allocate_producer_ids(self, count=PRODUCER_ID_BLOCK):
        """Reserve `count` producer ids; returns the first. Durable before use,
        so no id is ever handed out twice, across any crash."""
        with self.transaction() as db:
            row = db.execute("SELECT value FROM settings WHERE name = 'next_producer_id'").fetchone()
            first = int(row[0]) if row else 0
            db.execute("INSERT OR REPLACE INTO settings VALUES ('next_producer_id', ?)",
                       (str(first + count),))
        return first

    # --- topics ---
    def load_topics(self):
        """{name: (topic_id, partitions, configs)}"""
        return {name: (bytes(tid), n, json.loads(cfg)) for name, tid, n, cfg in
                self.db.execute("SELECT name, topic_id, partitions, configs FROM topics")}

    def load_log_start_offsets(self):
        return {(t, p): o for t, p, o in
                self.db.execute("SELECT topic, partition, log_start_offset FROM partitions")}

    def save_topic(self, name, topic_id, partitions, configs):
        with self.transaction() as db:
            db.execute("INSERT OR REPLACE INTO topics VALUES (?, ?, ?, ?)",
                       (name, topic_id, partitions, json.dumps(configs, sort_keys=True)))

    def delete_topic(self, name):
        with self.transaction() as db:
            db.execute("DELETE FROM topics WHERE name = ?", (name,))
            db.execute("DELETE FROM partitions WHERE topic = ?", (name,))

    # --- groups and offsets ---
    def load_groups(self):
        """[(group_id, stored state dict or None, {(topic, partition): OffsetEntry})]"""
        states = {g: json.loads(st) for g, st in self.db.execute("SELECT group_id, state FROM groups")}
        offsets = {}
        for row in self.db.execute("SELECT group_id, topic, partition, committed_offset, "
                                   "leader_epoch, metadata, commit_timestamp FROM group_offsets"):
            offsets.setdefault(row[0], {})[(row[1], row[2])] = OffsetEntry(*row[3:])
        return [(g, states.get(g), offsets.get(g, {})) for g in sorted(set(states) | set(offsets))]

    def has_group(self, group_id):
        return self.db.execute("SELECT 1 FROM groups WHERE group_id = ?", (group_id,)).fetchone() \
            is not None

    def save_group(self, group_id, state):
        with self.transaction(SYNC_ANSWERS) as db:
            db.execute("INSERT OR REPLACE INTO groups VALUES (?, ?)", (group_id, json.dumps(state)))

    def save_offsets(self, group_id, offsets):
        with self.transaction(SYNC_ANSWERS) as db:
            db.executemany("INSERT OR REPLACE INTO group_offsets VALUES (?, ?, ?, ?, ?, ?, ?)",
                           [(group_id, t, p) + tuple(e) for (t, p), e in offsets.items()])

    def delete_offsets(self, group_id, tps):
        with self.transaction() as db:
            db.executemany("DELETE FROM group_offsets WHERE group_id = ? AND topic = ? AND partition = ?",
                           [(group_id, t, p) for t, p in tps])

    def delete_all_offsets(self):
        with self.transaction() as db:
            db.execute("DELETE FROM group_offsets")

    def delete_group(self, group_id):
        with self.transaction() as db:
            db.execute("DELETE FROM groups WHERE group_id = ?", (group_id,))
            db.execute("DELETE FROM group_offsets WHERE group_id = ?", (group_id,))

    # --- transactions ---
    TXN_COLUMNS = ("transactional_id", "producer_id", "previous_producer_id", "producer_epoch",
                   "timeout_ms", "state", "partitions", "groups", "offsets", "txn_start_ms",
                   "last_update_ms", "begun_version", "ended_version", "next_producer_id")
    TXN_INSERT = f"INSERT OR REPLACE INTO transactions ({', '.join(TXN_COLUMNS)}) VALUES ({', '.join('?' * 14)})"

    def load_txns(self):
        rows = []
        for values in self.db.execute(f"SELECT {', '.join(self.TXN_COLUMNS)} FROM transactions"):
            row = dict(zip(self.TXN_COLUMNS, values))
            row["state"] = TxnState(row["state"])
            row["partitions"] = {tuple(tp) for tp in json.loads(row["partitions"])}
            row["groups"] = set(json.loads(row["groups"]))
            row["offsets"] = {g: {(t, p): OffsetEntry(*e) for t, p, *e in entries}
                              for g, entries in json.loads(row["offsets"]).items()}
            rows.append(row)
        return rows

    def _txn_values(self, row):
        encoded = dict(row, state=row["state"].value,
                       partitions=json.dumps(sorted(row["partitions"])),
                       groups=json.dumps(sorted(row["groups"])),
                       offsets=json.dumps({g: [[t, p, *e] for (t, p), e in sorted(entries.items())]
                                           for g, entries in row["offsets"].items()}))
        return tuple(encoded[c] for c in self.TXN_COLUMNS)

    def save_txn(self, row):
        with self.transaction(SYNC_ANSWERS) as db:
            db.execute(self.TXN_INSERT, self._txn_values(row))

    def complete_txn(self, row, offsets_by_group):
        """A transaction's last step, atomically: its offsets become the groups'
        committed offsets, and its state becomes Complete*. Nobody waits for
        it to be durable: lost in a power cut, it is redone from Prepare*."""
        with self.transaction(SYNC_LATER) as db:
            for group, offsets in offsets_by_group.items():
                db.executemany("INSERT OR REPLACE INTO group_offsets VALUES (?, ?, ?, ?, ?, ?, ?)",
                               [(group, t, p) + tuple(e) for (t, p), e in offsets.items()])
            db.execute(self.TXN_INSERT, self._txn_values(row))

    def delete_txn(self, transactional_id):
        with self.transaction() as db:
            db.execute("DELETE FROM transactions WHERE transactional_id = ?", (transactional_id,))

    def save_log_start_offset(self, topic, partition, offset):
        self.save_log_start_offsets([(topic, partition, offset)])

    def save_log_start_offsets(self, rows):
        with self.transaction() as db:
            db.executemany("INSERT INTO partitions (topic, partition, log_start_offset) VALUES (?, ?, ?) "
                           "ON CONFLICT (topic, partition) DO UPDATE SET "
                           "log_start_offset = excluded.log_start_offset", rows)

    def cleaner_checkpoint(self, topic, partition):
        row = self.db.execute("SELECT cleaner_checkpoint FROM partitions WHERE topic = ? AND partition = ?",
                              (topic, partition)).fetchone()
        return row[0] if row and row[0] >= 0 else None

    def save_cleaner_checkpoint(self, topic, partition, offset):
        """Lost in a power cut, it only means the section is cleaned again."""
        with self.transaction(SYNC_LATER) as db:
            db.execute("INSERT INTO partitions (topic, partition, cleaner_checkpoint) VALUES (?, ?, ?) "
                       "ON CONFLICT (topic, partition) DO UPDATE SET cleaner_checkpoint = excluded.cleaner_checkpoint",
                       (topic, partition, offset))

    def mark_transactional(self, tps):
        with self.transaction() as db:
            db.executemany("INSERT INTO partitions (topic, partition, has_txn) VALUES (?, ?, 1) "
                           "ON CONFLICT (topic, partition) DO UPDATE SET has_txn = 1", sorted(tps))

    def transactional_partitions(self):
        return {(t, p) for t, p in self.db.execute(
            "SELECT topic, partition FROM partitions WHERE has_txn = 1")}


# --- LogManager: every partition of every topic --------------------------------

def check_topic_configs(configs, null_code=ErrorCode.INVALID_CONFIG, null_text="topic configs"):
    """A topic's overrides checked as Kafka's LogConfig checks them -> {name:
    the text stored}. Kafka's errors: INVALID_CONFIG (an unknown name, a value
    its validator refuses, a conflict between two), and for a null value
    INVALID_CONFIG from CreateTopics, INVALID_REQUEST from the alter APIs."""
    checked = {}
    for name, value in configs.items():
        spec = KAFKA_TOPIC_CONFIGS.get(name)
        if spec is None:
            raise KafkaError(ErrorCode.INVALID_CONFIG, f"Unknown topic config name: {name}")
        if value is None:
            raise KafkaError(null_code, f"Null value not supported for {null_text}: {name}")
        try:
            checked[name] = normalize_config(name, spec[0], spec[2], value)
        except ConfigValueError as e:
            raise KafkaError(ErrorCode.INVALID_CONFIG, str(e)) from None
    lag = [int(checked.get(n, KAFKA_TOPIC_CONFIGS[n][1])) for n in
           ("min.compaction.lag.ms", "max.compaction.lag.ms")]
    if lag[0] > lag[1]:
        raise KafkaError(ErrorCode.INVALID_CONFIG, f"conflict topic config setting "
                         f"min.compaction.lag.ms ({lag[0]}) > max.compaction.lag.ms ({lag[1]})")
    if checked.get("remote.storage.enable") == "true":
        raise KafkaError(ErrorCode.INVALID_CONFIG, "Tiered Storage functionality is disabled in the "
                         "broker. Topic cannot be configured with remote log storage.")
    return checked


def run_steps(steps):
    """Run a step generator to its end in one go -> its result. (Long work in
    doze is written as generators that yield where the loop may serve others;
    see in_steps in section 10. At start-up, and in tests, it just runs.)"""
    try:
        while True:
            next(steps)
    except StopIteration as done:
        return done.value


PARTITIONS_PER_STEP = 64         # partition directories made between two yields
RETENTION_STEP_S = 0.01          # loop time retention takes in one pass, at most (about)


class LogManager:
    """The topics: their partition logs on disk and their rows in meta.db."""

    def __init__(self, config, store, files=None, max_open_files=4096, flusher=None):
        self.config = config
        self.store = store
        self.files = files or Files()
        self.flusher = flusher or Flusher(self.files)      # inline unless the Broker gave one that can wake it
        self.clock = config.clock
        self.open_files = OpenFiles(max_open_files)
        self.topics = {}            # name -> Msg(topic_id, partitions, configs)
        self.logs = {}              # (topic, partition) -> PartitionLog
        self.creating = {}          # topic -> partitions being made for it now (in steps)
        self.removing = collections.OrderedDict()   # directories of deleted partitions, to remove
        self.dirty = {}             # logs appended to since their last flush, oldest first
        self.urgent = {}            # ... of those, the ones a narrow request waits on (first)
        self.data_dir_unsynced = False
        self.unflushed_bytes = 0    # appended since the last group commit took the dirty logs
        self.offline_topics = set()  # topics with a partition offline (see "When the disk fails")
        self.refusing = weakref.WeakSet()   # logs whose last write found no room (logged once)
        self.moves = 0              # high watermark moves, all logs (what the console's live pages watch)
        self.start_moved = []       # fn(log), called when retention or DeleteRecords moved a log's start

    # --- startup ---
    def load(self):
        """Open every topic in meta.db; remove partition directories meta.db does
        not know (a topic creation or deletion a crash interrupted)."""
        starts = self.store.load_log_start_offsets()
        for name, (topic_id, n, configs) in self.store.load_topics().items():
            self.topics[name] = Msg(name=name, topic_id=topic_id, partitions=n, configs=configs)
            view = functools.partial(self.topic_config, name)
            for p in range(n):
                plog = self._new_log(name, p, view)
                if os.path.isdir(plog.dir):
                    plog.open(starts.get((name, p), 0))
                else:                                    # created in meta.db, dir lost: recreate
                    plog.create()
                    self.dirty[plog] = None
                    self.data_dir_unsynced = True
                self.logs[(name, p)] = plog
        known = {os.path.basename(l.dir) for l in self.logs.values()}
        for entry in os.listdir(self.config.data_dir):
            path = os.path.join(self.config.data_dir, entry)
            if os.path.isdir(path) and entry not in known:
                log.warning("removing %s: no topic in meta.db owns it (an interrupted "
                            "create or delete)", path)
                self.files.rmtree(path)
        self.flush_dirty()

    def _new_log(self, topic, partition, view=None):
        """A partition's log (not yet opened); `view`, its topic's configs looked
        up live, is shared by the partitions made together."""
        directory = os.path.join(self.config.data_dir, f"{topic}-{partition}")
        return PartitionLog(topic, partition, directory, self.files,
                            view or functools.partial(self.topic_config, topic), self.clock, self.open_files)

    # --- topic configs ---
    def topic_config(self, topic, name):
        """The effective value of a topic config (parsed): the topic's override,
        else the broker setting it inherits from, else Kafka's default."""
        kind = KAFKA_TOPIC_CONFIGS[name][0]
        topic_meta = self.topics.get(topic)
        text = topic_meta.configs.get(name) if topic_meta else None
        if name == "segment.bytes" and topic_meta and "internal.segment.bytes" in topic_meta.configs:
            text = topic_meta.configs["internal.segment.bytes"]   # Kafka's test knob: below 1 MiB
        return parse_config(name, kind, text if text is not None else self.inherited(name)[0])

    def inherited(self, name):
        """(text, broker setting) a topic config has when a topic does not set
        it: the first of its broker synonyms that is set (hours and minutes
        made ms), else Kafka's default (setting None)."""
        kind, default, _, synonyms = KAFKA_TOPIC_CONFIGS[name]
        for broker_name in synonyms:
            text = self.config.set_text(broker_name)
            if text is not None:
                if broker_name in KAFKA_MS_PER_UNIT:
                    text = str(int(text) * KAFKA_MS_PER_UNIT[broker_name])
                if name in ("retention.ms", "retention.bytes") and text.lstrip("-").isdigit() \
                        and int(text) < 0:
                    text = "-1"                # Kafka: any negative retention is "forever"
                return text, broker_name
        return default, None

    # --- topics ---
    def check_new_topic(self, name, partitions, replication_factor, configs):
        """CreateTopics' validation, in Kafka's order. Returns (partitions, configs)."""
        if not TOPIC_NAME.fullmatch(name or "") or name in (".", ".."):
            raise KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION,
                             f"Topic name {name!r} is illegal, it contains a character other than "
                             "ASCII alphanumerics, '.', '_' and '-'" if name else "Topic name is empty")
        if name in self.topics or name in self.creating:
            raise KafkaError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.")
        colliding = name.replace(".", "_")
        for other in itertools.chain(self.topics, self.creating):
            if other.replace(".", "_") == colliding:
                raise KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION,
                                 f"Topic '{name}' collides with existing topic: {other}")
        if partitions == -1:
            partitions = self.config["num.partitions"]
        if partitions <= 0:
            raise KafkaError(ErrorCode.INVALID_PARTITIONS, "Number of partitions must be larger than 0.")
        if replication_factor not in (-1, 1):
            raise KafkaError(ErrorCode.INVALID_REPLICATION_FACTOR,
                             f"Unable to replicate the partition {replication_factor} time(s): "
                             "The target replication factor of "
                             f"{replication_factor} cannot be reached because only 1 broker(s) are registered.")
        checked = check_topic_configs(configs)
        self.check_partition_budget(partitions)
        return partitions, checked

    def partition_count(self):
        """Partitions of every topic, with those being made now."""
        return len(self.logs) + sum(self.creating.values())

    def check_partition_budget(self, more):
        limit = self.config["doze.max.partitions"]
        if self.partition_count() + more > limit:
            raise KafkaError(ErrorCode.POLICY_VIOLATION,
                             f"{more} more partitions would exceed doze.max.partitions ({limit}): "
                             f"there are {self.partition_count()}")

    def create_topic(self, name, partitions, configs):
        """Make the partition directories, then the meta.db row; a step generator
        (run_steps it where nothing else waits). Crash ordering: a directory
        without a row is removed on start, a row whose directory is missing gets
        an empty one -- so creating needs no fsync of its own: the data
        directory is fsynced by the next group commit, a partition directory by
        its first flush. Whatever fails half-way is removed again."""
        topic_id = uuid.uuid4().bytes
        self.creating[name] = partitions
        try:
            new_logs = yield from self._make_partitions(name, range(partitions))
            try:
                self.store.save_topic(name, topic_id, partitions, configs)
            except BaseException:
                for plog in new_logs:
                    plog.discard()
                raise
        finally:
            del self.creating[name]
        self.topics[name] = Msg(name=name, topic_id=topic_id, partitions=partitions, configs=configs)
        for plog in new_logs:
            self.logs[(name, plog.partition)] = plog
        return topic_id

    def ensure_internal_topic(self, name):
        """Make __consumer_offsets or __transaction_state as Kafka makes it (its
        partition count and configs from the broker's settings), the first time a
        client needs it. -> True if it was there already (False while a
        CreateTopics makes it: the client is told to come back)."""
        if name in self.topics:
            return True
        if name in self.creating:               # a CreateTopics is making it, in steps
            return False
        c = self.config
        if name == CONSUMER_OFFSETS:
            partitions = c["offsets.topic.num.partitions"]
            configs = {"cleanup.policy": "compact", "compression.type": "producer",
                       "segment.bytes": str(c["offsets.topic.segment.bytes"])}
        else:
            partitions = c["transaction.state.log.num.partitions"]
            configs = {"cleanup.policy": "compact", "compression.type": "uncompressed",
                       "segment.bytes": str(c["transaction.state.log.segment.bytes"]),
                       "min.insync.replicas": str(c["transaction.state.log.min.isr"]),
                       "unclean.leader.election.enable": "false"}
        log.info("creating the internal topic %s (%d partitions); doze keeps its state in meta.db",
                 name, partitions)
        run_steps(self.create_topic(name, partitions, configs))
        return False

    def add_partitions(self, name, count):
        """CreatePartitions: as create_topic, for partitions count-1 down to the
        topic's present count (a step generator)."""
        topic = self.topics[name]
        self.creating[name] = count - topic.partitions
        try:
            new_logs = yield from self._make_partitions(name, range(topic.partitions, count))
            try:
                if self.topics.get(name) is not topic:   # a DeleteTopics came between two steps
                    raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "The topic was deleted.")
                self.store.save_topic(name, topic.topic_id, count, topic.configs)
            except BaseException:
                for plog in new_logs:
                    plog.discard()
                raise
        finally:
            del self.creating[name]
        topic.partitions = count
        for plog in new_logs:
            self.logs[(name, plog.partition)] = plog

    def _make_partitions(self, name, numbers):
        new_logs = []
        view = functools.partial(self.topic_config, name)
        try:
            for i, p in enumerate(numbers):
                plog = self._new_log(name, p, view)
                self.removing.pop(plog.dir, None)
                if os.path.exists(plog.dir):            # leftover of a deleted topic
                    self.files.rmtree(plog.dir)
                plog.create()
                new_logs.append(plog)
                if i % PARTITIONS_PER_STEP == PARTITIONS_PER_STEP - 1:
                    yield
        except BaseException:            # OSError (no space, no descriptors...), or cancelled
            for plog in new_logs:
                plog.discard()
            if len(new_logs) < len(numbers):             # the one that failed half-made
                self.files.rmtree(self._new_log(name, numbers[len(new_logs)]).dir)
            raise
        self.data_dir_unsynced = True
        return new_logs

    def set_topic_configs(self, name, configs):
        topic = self.topics[name]
        self.store.save_topic(name, topic.topic_id, topic.partitions, configs)
        topic.configs = configs

    def delete_topic(self, name):
        """Remove the meta.db row first (then the topic is gone, whatever happens
        next); the directories are removed afterwards, a few each pass of the
        loop (remove_some), as Kafka deletes logs in the background."""
        self.store.delete_topic(name)
        topic = self.topics.pop(name)
        self.offline_topics.discard(name)
        for p in range(topic.partitions):
            plog = self.logs.pop((name, p))
            self.dirty.pop(plog, None)
            self.urgent.pop(plog, None)
            plog.close(clean=False)
            self.removing[plog.dir] = None

    def remove_some(self, count=PARTITIONS_PER_STEP):
        """Remove a few directories of deleted partitions (their meta.db rows are gone)."""
        for _ in range(min(count, len(self.removing))):
            path, _ = self.removing.popitem(last=False)
            self.files.rmtree(path)

    def holds(self, plog):
        """Is this log still its partition's? (Work done in steps must ask: a
        DeleteTopics may have come between two of them.)"""
        return self.logs.get((plog.topic, plog.partition)) is plog

    def get(self, topic, partition):
        plog = self.logs.get((topic, partition))
        if plog is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                             f"This server does not host this topic-partition: {topic}-{partition}")
        if plog.offline:                 # Kafka's getPartitionOrError for HostedPartition.Offline
            raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, f"{topic}-{partition} is offline: {plog.offline}")
        return plog

    # --- the write path ---
    def append(self, plog, batch, header):
        """Append to a log; a disk that refuses it is KAFKA_STORAGE_ERROR, and
        one that failed (anything but a lack of room) takes the log offline."""
        if plog.offline:
            raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, f"{plog.topic}-{plog.partition} is offline")
        try:
            base = plog.append(batch, header)
        except OSError as e:
            if isinstance(e, TornWrite) or e.errno not in ROOM_ERRNOS:
                self.take_offline(plog, f"a write failed: {e}")
            elif plog not in self.refusing:          # one line until a write succeeds again
                self.refusing.add(plog)
                log.warning("%s-%d: a write was refused (%s); nothing of it was kept, and the "
                            "next write that finds room succeeds", plog.topic, plog.partition, e.strerror)
            raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, e.strerror) from None
        if plog in self.refusing:
            self.refusing.discard(plog)
            log.info("%s-%d takes writes again", plog.topic, plog.partition)
        self.dirty[plog] = None
        self.unflushed_bytes += len(batch)
        return base

    def append_as_leader(self, plog, records, h, now_ms):
        """A checked batch (analyze_batch) into its log as Kafka's appendAsLeader
        stores it: in the topic's compression.type where doze can recompress,
        stamped with the broker's time under LogAppendTime. -> (its base
        offset, the log append time or -1)."""
        batch = recompressed(records, h, plog.config)
        if batch is None:
            batch = records if not records.readonly else bytearray(records)
        log_append_time = -1
        if plog.config("message.timestamp.type") == "LogAppendTime":
            log_append_time = now_ms
            set_log_append_time(batch, now_ms)
        return self.append(plog, batch, h), log_append_time

    def take_offline(self, plog, why):
        """Its disk failed it: once offline, a log takes no writes and gives no reads."""
        if not plog.offline:
            plog.fail(why)
            self.offline_topics.add(plog.topic)
            log.error("%s-%d is offline: %s. What it had not made durable is not acknowledged; "
                      "it answers KAFKA_STORAGE_ERROR until doze is restarted on a sound disk",
                      plog.topic, plog.partition, why)

    def offline_partitions(self, topic):
        """{partition} of a topic whose disk failed them (empty, and quick, for almost every topic)."""
        if topic not in self.offline_topics:
            return set()
        return {p for (t, p), plog in self.logs.items() if t == topic and plog.offline}

    def lost(self, appended):
        """The (topic, partition)s of `appended` ((log, last offset) pairs) that
        went offline before their write was durable: never to be acknowledged."""
        return {(plog.topic, plog.partition) for plog, last in appended
                if plog.offline and plog.high_watermark <= last}

    def hurry(self, plogs):
        """The logs a request to a few partitions waits on go first in the
        group commit, so that it does not wait behind the fsyncs of a request
        to thousands (shortest job first)."""
        for plog in plogs:
            if plog in self.dirty:
                self.urgent[plog] = None

    def flush_due(self):
        """Has the group commit work now: a job the flusher finished, or dirty
        logs it can take (a long commit waits while the flusher has one)?"""
        if self.flusher.done():
            return True
        return bool(self.dirty or self.data_dir_unsynced) and not (self.flusher.busy and self._long())

    def _long(self):
        """Will the dirty logs' fsyncs take long (the flusher's thread takes them)?"""
        return len(self.dirty) >= SYNCFS_MIN_LOGS or self.unflushed_bytes >= FLUSHER_MIN_BYTES

    def flush_dirty(self, budget_s=None):
        """Group commit: one fsync per dirty file, the urgent ones first, then
        oldest first; one syncfs for SYNCFS_MIN_LOGS logs or more. Returns the
        logs whose high watermark moved (in this pass: the flusher's job
        finished, or the short commit made here). A long commit goes to the
        Flusher's thread, the loop serving on. A short one runs here; with a
        budget it stops once that is spent, the rest in the next pass. Without
        a budget (a start, a stop): everything, here, after the job in flight.
        The data directory goes first, so a new partition's entry is durable
        before any of its records; if that fsync fails, every partition goes
        offline (the log directory failed, as Kafka says)."""
        if budget_s is None:
            self.flusher.wait()
        moved = self._flushed(self.flusher.finished())
        if not (self.dirty or self.data_dir_unsynced):
            return moved
        if budget_s is not None and self.flusher.threaded and self._long():
            if not self.flusher.busy:
                self.flusher.hand_over(self._flush_job())
            return moved
        deadline = None if budget_s is None else time.perf_counter() + budget_s
        return moved + self._flushed(self.flusher.run(self._flush_job(), deadline))

    def _flush_job(self):
        """Every dirty log, the urgent ones first, taken for one group commit."""
        urgent = [plog for plog in self.urgent if plog in self.dirty]
        entries = []
        for plog in urgent + [plog for plog in self.dirty if plog not in self.urgent]:
            taken = plog.flush_begin()
            if taken is not None:                   # not offline
                entries.append(FlushEntry(plog, *taken))
        n_urgent = sum(1 for entry in entries if entry.plog in self.urgent)
        self.dirty.clear()
        self.urgent.clear()
        self.unflushed_bytes = 0
        job = FlushJob(self.config.data_dir, entries, n_urgent, self.data_dir_unsynced)
        self.data_dir_unsynced = False
        return job

    def _flushed(self, job):
        """A group commit's result taken: a log whose fsync failed goes
        offline, the others' high watermarks move, and what the job did not
        reach is dirty again. -> the logs whose high watermark moved."""
        if job is None:
            return []
        if job.crashed is not None:
            log.error("the group commit's fsyncs failed: %s: a bug in doze", where(job.crashed))
        if job.data_dir_error is not None:
            for plog in self.logs.values():
                self.take_offline(plog, f"fsync of the data directory failed: {job.data_dir_error}")
        if job.syncfs_error is not None:
            log.warning("syncfs of %s failed (%s): fsyncing the logs one by one", self.config.data_dir,
                        job.syncfs_error)
        moved = []
        for i, entry in enumerate(job.entries):
            plog = entry.plog
            if not self.holds(plog) or plog.offline:
                continue                            # deleted, or its disk failed, meanwhile
            if i >= job.done:                       # not reached: the next group commit's
                plog.flush_undo(entry.segs, entry.directory)
                self.dirty[plog] = None
                if i < job.urgent:
                    self.urgent[plog] = None
            elif entry.error is not None:
                self.take_offline(plog, f"fsync failed: {entry.error}")
            elif plog.flush_end(entry.target):
                moved.append(plog)
                self.moves += 1
        return moved

    def delete_records(self, moves):
        """DeleteRecords: [(log, offset)] -> each log's start moved, in one
        meta.db commit; then, log by log, its segments below go (a generator:
        it yields after each log, whose files cost a create and two unlinks).
        -> the logs moved: not those a DeleteTopics removed before it began."""
        moves = [(plog, offset) for plog, offset in moves if self.holds(plog)]
        self.store.save_log_start_offsets([(plog.topic, plog.partition, max(plog.log_start_offset, offset))
                                           for plog, offset in moves])
        for plog, offset in moves:
            if self.holds(plog):                # not deleted by a step before this one
                plog.delete_records_before(offset)
                self.dirty[plog] = None
                self._tell_start_moved(plog)
            yield
        return {plog for plog, _ in moves}

    def _tell_start_moved(self, plog):
        for fn in self.start_moved:
            fn(plog)

    # --- retention, a chore on the loop ---
    def schedule(self, timers):
        """Start the retention chore (log.retention.check.interval.ms) on the loop's timers."""
        self.timers = timers
        timers.call_later(self.config["log.retention.check.interval.ms"] / 1000, self._retention)

    def _retention(self, steps=None):
        """Retention, one step a pass of the loop (a timer of 0 s between steps)."""
        steps = steps or self.retention_steps()
        try:
            next(steps)
            self.timers.call_later(0, self._retention, steps)
            return
        except StopIteration:
            pass
        except (OSError, StoreFailed) as e:
            log.error("retention check failed (%s); will try again", e)
        except Exception as e:                  # a bug in doze: this check is lost, not the next
            log.error("retention check failed: %s: a bug in doze", where(e))
        self.schedule(self.timers)

    def apply_retention(self):
        run_steps(self.retention_steps())

    def retention_steps(self):
        """Retention over every partition, as steps: a yield once a step has
        taken RETENTION_STEP_S (segments unlinked, meta.db written), so 20,000
        partitions past their retention never hold the loop in one pass."""
        now_ms = self.clock() * 1000
        since = time.perf_counter()
        for plog in list(self.logs.values()):
            if not self.holds(plog) or plog.offline:
                continue                                # deleted meanwhile, or its disk failed
            if plog.apply_retention(now_ms):
                self.dirty[plog] = None
                self.store.save_log_start_offset(plog.topic, plog.partition, plog.log_start_offset)
                self._tell_start_moved(plog)
            if time.perf_counter() - since >= RETENTION_STEP_S:
                yield
                since = time.perf_counter()

    def close(self, clean=True):
        self.flusher.close()
        for plog in self.logs.values():
            plog.close(clean)
        while clean and self.removing:
            self.remove_some()


###############################################################################
# 9. COORDINATORS -- producer state, classic groups
###############################################################################
# A coordinator is the broker-side owner of one kind of client state. In real
# Kafka it is chosen by hashing the id onto a partition of an internal topic
# (__consumer_offsets, __transaction_state); doze is one broker, so it is
# always the coordinator, FindCoordinator always answers "me", and meta.db
# stands in for both internal topics.
#
# --- Where Kafka keeps a coordinator's state: a partition of its internal topic
# (an id's hash picks it; its leader coordinates; each change is a record
# there). doze shows it (trace, console, demo) where meta.db stands in.

def java_string_hash(text):
    """Java's String.hashCode (over UTF-16 code units), as Kafka hashes an id."""
    units = text.encode("utf-16-be")
    h = 0
    for unit in struct.unpack(f">{len(units) // 2}H", units):
        h = (31 * h + unit) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def internal_partition(key, partitions):
    """Kafka's partitionFor(groupId or transactionalId): Utils.abs of its Java
    hash (Integer.MIN_VALUE -> 0), modulo the internal topic's partitions."""
    h = java_string_hash(key)
    return 0 if h == -(1 << 31) else abs(h) % partitions


def transaction_state_partition(config, transactional_id):
    """The partition of __transaction_state whose leader coordinates this id."""
    return internal_partition(transactional_id, config["transaction.state.log.num.partitions"])


def offsets_partition(config, group_id):
    """The partition of __consumer_offsets whose leader coordinates this group."""
    return internal_partition(group_id, config["offsets.topic.num.partitions"])


# --- The journal: what the coordinators did, for whoever watches ---------------
# Each state change of a transaction, each marker written, each fence and
# timeout is recorded as an event: numbered, timed, in a bounded ring. The
# console's feed and Transaction page read it; nothing else depends on it.
# An event is a small dict per transition or marker, never per record.

JOURNAL_SIZE = 2000             # events the ring keeps
TXN_HISTORY = 32                # transitions each transactional id keeps for its own page


class Journal:
    """The broker's own actions, newest last, with an id each; watchers (the
    console) are called with each event as it is recorded."""

    def __init__(self, clock):
        self.clock = clock
        self.events = collections.deque(maxlen=JOURNAL_SIZE)
        self.last_id = 0
        self.watchers = []

    def record(self, kind, **fields):
        self.last_id += 1
        event = {"id": self.last_id, "kind": kind, "at_ms": int(self.clock() * 1000), **fields}
        self.events.append(event)
        for watch in self.watchers:
            try:
                watch(event)
            except Exception as e:          # a bug in a watcher must not stop a transaction
                log.error("a watcher of the journal failed: %s: a bug in doze", where(e))
        return event


# The journal's events in words, as the console and the trace show them.

def producer_text(d):
    """"producer 7, epoch 3", with where they came from when they changed, and
    "transaction version 2" for its steps (the classic protocol goes unsaid)."""
    was = d.get("was")
    text = (f"producer {was[0]}, epoch {was[1]} \u2192 " if was and was[0] != d["producer_id"] else
            f"producer {d['producer_id']}, epoch {was[1]} \u2192 " if was else f"producer {d['producer_id']}, epoch ")
    text = text + (f"producer {d['producer_id']}, epoch {d['producer_epoch']}" if was and was[0] != d["producer_id"]
                   else str(d["producer_epoch"]))
    return text + ("; transaction version 2" if d.get("version") == 2 else "")


def event_text(e):
    if e["kind"] == "marker" and e.get("offset") is None:
        return stand_in_text(e)
    if e["kind"] == "marker":
        return f"{e['control']} marker at {e['topic']}-{e['partition']} offset {e['offset']} ({producer_text(e)})"
    if e["kind"] == "txn":
        return f"{e['from_state']} \u2192 {e['to_state']}: {e['cause'] or 'restart'} ({producer_text(e)})"
    if e["kind"] == "group":
        return f"generation {e['generation']}: {e['state']}, {e['members']} members"
    if e["kind"] == "feature":
        return f"feature {e['name']} finalized at level {e['level']} (was {e['was']}), epoch {e['epoch']}"
    if e["kind"] == "clean":
        return (f"cleaned {e['topic']}-{e['partition']}, dirty section [{e['dirty_section'][0]}, "
                f"{e['dirty_section'][1]}): {e['bytes_before']} bytes to {e['bytes_after']}, "
                f"{e['records_removed']} records removed, {e['batches_emptied']} batches emptied, in {e['took_ms']} ms")
    if e["kind"] == "member":
        return f"at epoch {e['epoch']} ({e['state']}): assigned [{', '.join(e['assigned'])}]" + (
            f", revoking [{', '.join(e['revoking'])}]" if e["revoking"] else "")
    return json.dumps({k: v for k, v in e.items() if k not in ("id", "kind", "at_ms")})


def stand_in_text(e):
    """A marker with no offset: a partition doze writes no marker to (its
    __consumer_offsets: the offsets are in meta.db), and what stands in for it."""
    what = e.get("stand_in") or "no marker written: the offsets are kept in meta.db"
    group = e.get("group")
    return f"{e.get('control', '?')} at {e['topic']}-{e['partition']}: {what}" + \
        (f" (group {group})" if group is not None and str(group) not in what else "")


# --- Producer state (idempotence) ---------------------------------------------
# An idempotent producer (KIP-98) numbers its batches per partition: producer
# id, epoch, and a sequence number that grows by the record count. The
# partition leader remembers, per producer, the last five batches it took, so
# a batch the producer resends after a lost answer is recognised and answered
# with its original offsets instead of being written twice; a gap in the
# sequence is refused with OUT_OF_ORDER_SEQUENCE_NUMBER.

MAX_CACHED_BATCHES = 5          # Kafka's ProducerStateEntry.NUM_BATCHES_TO_RETAIN
INT32_MAX = 2 ** 31 - 1


def next_sequence(seq, count):
    """Sequences wrap from INT32_MAX back to 0 (DefaultRecordBatch.incrementSequence)."""
    return (seq + count) % (INT32_MAX + 1)


class ProducerEntry:
    """What one partition remembers about one producer id."""
    __slots__ = ("epoch", "batches", "last_timestamp", "txn_first_offset", "coordinator_epoch")

    def __init__(self, epoch):
        self.epoch = epoch
        self.batches = collections.deque(maxlen=MAX_CACHED_BATCHES)   # (first_seq, last_seq, base, last)
        self.last_timestamp = -1
        self.txn_first_offset = -1            # first offset of its open transaction here, or -1
        self.coordinator_epoch = -1

    @property
    def last_seq(self):
        return self.batches[-1][1] if self.batches else -1


class ProducerStateTable:
    """Per partition: producer id -> ProducerEntry, plus the partition's
    transactions -- the open ones (which hold back the last stable offset)
    and the aborted ones (which read_committed fetches must list). The rules
    are Kafka's ProducerAppendInfo checks, for client writes."""

    def __init__(self):
        self.producers = {}
        self.aborted = []          # (producer_id, first_offset, marker_offset, stable_offset), in marker order
        self.aborted_markers = array.array("q")   # their marker offsets: sorted, so bisectable
        self.completing = []       # (first_offset, marker_offset): decided, marker not yet durable
        self.verifying = {}        # producer_id -> (epoch, lowest sequence seen while verifying, epoch_bumps, since ms)

    def has_open_txn(self, producer_id, producer_epoch):
        """Kafka's hasOngoingTransaction: open here, and with this epoch."""
        entry = self.producers.get(producer_id)
        return entry is not None and entry.txn_first_offset >= 0 and entry.epoch == producer_epoch

    def note_verification(self, producer_id, producer_epoch, first_seq, now_ms, epoch_bumps=False):
        """Kafka's VerificationStateEntry: the lowest sequence a not-yet-verified
        transactional producer sent here; a later first batch above it is out
        of order. epoch_bumps: transaction version 2's, whose epochs start at
        sequence 0 where the partition knows nothing of the producer. Kept
        until the batch is appended, or producer.id.expiration.ms (expire)."""
        seen = self.verifying.get(producer_id)
        if seen is None or seen[0] != producer_epoch:
            self.verifying[producer_id] = (producer_epoch, first_seq, epoch_bumps, now_ms)
        else:
            self.verifying[producer_id] = (producer_epoch, min(seen[1], first_seq), epoch_bumps or seen[2], seen[3])

    def check_epoch(self, h):
        """An epoch older than the partition knows is refused before anything else."""
        entry = self.producers.get(h.producer_id)
        if entry is not None and h.producer_epoch < entry.epoch:
            raise KafkaError(ErrorCode.INVALID_PRODUCER_EPOCH,
                             f"epoch {h.producer_epoch} is older than the current {entry.epoch}")

    def check(self, h, transactional=False):
        """Check a batch header. Returns the (base, last) offsets of a duplicate
        batch already in the log, or None when the batch should be appended."""
        entry = self.producers.get(h.producer_id)
        if entry is None:
            return None            # unknown producer: any sequence is accepted
        self.check_epoch(h)
        first_seq = h.base_sequence
        last_seq = next_sequence(first_seq, h.last_offset_delta)
        if h.producer_epoch == entry.epoch:
            for b_first, b_last, base, last in entry.batches:
                if b_first == first_seq and b_last == last_seq:
                    return base, last
            if entry.batches and first_seq != next_sequence(entry.last_seq, 1):
                raise KafkaError(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                                 f"producer {h.producer_id}: sequence {first_seq} after "
                                 f"{entry.last_seq}")
        elif first_seq != 0 and entry.epoch >= 0:
            # A new epoch starts its sequences at 0 (KIP-360 bumps included).
            raise KafkaError(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                             f"producer {h.producer_id}: new epoch {h.producer_epoch} "
                             f"starts at sequence {first_seq}")
        if not transactional and entry.txn_first_offset >= 0:
            raise KafkaError(ErrorCode.INVALID_TXN_STATE,
                             "a non-transactional batch from a producer with an open transaction")
        return None

    def check_append(self, h):
        """check(), and for a transactional batch that is no duplicate, its
        sequence against the lowest sent while the partition was verified."""
        transactional = bool(h.attributes & ATTR_TRANSACTIONAL)
        duplicate = self.check(h, transactional)
        if transactional and not duplicate:
            self.check_verified_sequence(h)
        return duplicate

    def check_verified_sequence(self, h):
        seen = self.verifying.get(h.producer_id)
        if seen is None or seen[0] != h.producer_epoch:
            return
        entry = self.producers.get(h.producer_id)
        if seen[2] and h.base_sequence != 0 and (entry is None or not entry.batches):
            raise KafkaError(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                             "Expected sequence 0 for transactions v2 idempotent producer with no existing state")
        if h.base_sequence > seen[1]:
            raise KafkaError(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                             f"sequence {h.base_sequence} above {seen[1]}, the lowest sent while verifying")

    def update(self, h, base):
        """Record an appended batch (data, or a marker via apply_marker)."""
        entry = self.producers.get(h.producer_id)
        if entry is None or entry.epoch != h.producer_epoch:
            old = entry
            entry = self.producers[h.producer_id] = ProducerEntry(h.producer_epoch)
            if old is not None:                 # an epoch bump keeps the open transaction
                entry.txn_first_offset = old.txn_first_offset
                entry.coordinator_epoch = old.coordinator_epoch
        first_seq = h.base_sequence
        if first_seq >= 0:
            entry.batches.append((first_seq, next_sequence(first_seq, h.last_offset_delta),
                                  base, base + h.last_offset_delta))
        entry.last_timestamp = h.max_timestamp
        if h.attributes & ATTR_TRANSACTIONAL:
            self.verifying.pop(h.producer_id, None)
        if h.attributes & ATTR_TRANSACTIONAL and entry.txn_first_offset < 0:
            entry.txn_first_offset = base       # this batch opens a transaction here
        return entry

    def check_marker(self, producer_id, producer_epoch, coordinator_epoch=0, transaction_version=0):
        """A marker WriteTxnMarkers asks for (Kafka's ProducerAppendInfo.appendEndTxnMarker):
        an older epoch is refused; with transaction version 2 the same epoch too,
        but where nothing is open (a retried marker: KAFKA-19999); then a
        coordinator epoch older than the last marker's."""
        entry = self.producers.get(producer_id)
        if entry is None:
            return                                  # a producer never seen here: written
        if producer_epoch < entry.epoch or transaction_version >= 2 and producer_epoch == entry.epoch \
                and entry.txn_first_offset >= 0:
            raise KafkaError(ErrorCode.INVALID_PRODUCER_EPOCH,
                             f"marker epoch {producer_epoch} is older than {entry.epoch}")
        if coordinator_epoch < entry.coordinator_epoch:
            raise KafkaError(ErrorCode.TRANSACTION_COORDINATOR_FENCED,
                             f"coordinator epoch {coordinator_epoch} is older than {entry.coordinator_epoch}")

    def apply_marker(self, producer_id, producer_epoch, commit, offset, timestamp,
                     coordinator_epoch=0):
        """A COMMIT or ABORT marker was appended at `offset`: the producer's
        open transaction here (if any) is over; an aborted one is indexed."""
        entry = self.producers.get(producer_id)
        if entry is None or entry.epoch != producer_epoch:
            old = entry
            entry = self.producers[producer_id] = ProducerEntry(producer_epoch)
            if old is not None:
                entry.txn_first_offset = old.txn_first_offset
        entry.last_timestamp = timestamp
        entry.coordinator_epoch = coordinator_epoch
        self.verifying.pop(producer_id, None)
        first = entry.txn_first_offset
        entry.txn_first_offset = -1
        if first >= 0:
            self.completing.append((first, offset))
            if not commit:
                # Kafka's aborted-transaction index keeps the stable offset once
                # this one is over: no later entry can start below it.
                stable = min((e.txn_first_offset for e in self.producers.values()
                              if e.txn_first_offset >= 0), default=offset + 1)
                self.aborted.append((producer_id, first, offset, min(stable, offset + 1)))
                self.aborted_markers.append(offset)

    def last_stable_offset(self, high_watermark):
        """The LSO: below the first offset of every transaction that is open,
        or decided with its marker not yet durable; else the high watermark."""
        if self.completing:
            self.completing = [(f, m) for f, m in self.completing if m >= high_watermark]
        lso = high_watermark
        for entry in self.producers.values():
            if 0 <= entry.txn_first_offset < lso:
                lso = entry.txn_first_offset
        for first, _ in self.completing:
            lso = min(lso, first)
        return lso

    def all_durable(self):
        """Every marker is durable (a table rebuilt from the log)."""
        self.completing = []

    def aborted_between(self, fetch_offset, upper_bound):
        """Aborted transactions a read_committed fetch of [fetch_offset,
        upper_bound) must list (Kafka's collectAbortedTransactions)."""
        found = []
        for i in range(bisect.bisect_left(self.aborted_markers, fetch_offset), len(self.aborted)):
            producer_id, first, _, stable = self.aborted[i]
            if first < upper_bound:
                found.append((producer_id, first))
            if stable >= upper_bound:
                break                     # every later one starts at or above upper_bound
        return found

    def keep_aborted(self, first, end, kept_markers):
        """A cleaning rewrote [first, end): of the aborted transactions whose
        marker lies there, only those whose marker it kept indexed stay."""
        kept = [a for a in self.aborted if not first <= a[2] < end or a[2] in kept_markers]
        if len(kept) != len(self.aborted):
            self.aborted = kept
            self.aborted_markers = array.array("q", (a[2] for a in kept))

    def forget_before(self, log_start_offset):
        """Retention or DeleteRecords removed the log below log_start_offset."""
        i = bisect.bisect_left(self.aborted_markers, log_start_offset)
        if i:
            del self.aborted[:i]
            del self.aborted_markers[:i]

    def expire(self, now_ms, expiration_ms):
        """producer.id.expiration.ms: forget producers idle that long, unless a
        transaction of theirs is open here (a batch's timestamp may be -1, or
        any age: Kafka compares it all the same), and verifications noted that
        long ago (Kafka's removeExpiredProducers, both)."""
        for producer_id, entry in list(self.producers.items()):
            if entry.txn_first_offset < 0 and entry.last_timestamp < now_ms - expiration_ms:
                del self.producers[producer_id]
        for producer_id, seen in list(self.verifying.items()):
            if now_ms - seen[3] >= expiration_ms:
                del self.verifying[producer_id]


def control_type(batch_head):
    """COMMIT or ABORT, from the first bytes of a control batch: the control
    record's key (version int16, type int16) starts 5 bytes into the records.
    None for one the log cleaner emptied (a header with no record)."""
    if I32.unpack_from(batch_head, BATCH_AT["records_count"])[0] == 0:
        return None
    return I16.unpack_from(batch_head, BATCH_HEADER_SIZE + 7)[0]


PRODUCER_STATE_WINDOW = 16 * 1024 * 1024    # bytes of log read back after a restart


def rebuild_producer_state(plog, whole_log):
    """Rebuild a partition's ProducerStateTable from its batch headers (records
    are never read): the whole log for a partition that has held transactions,
    else the last PRODUCER_STATE_WINDOW bytes (idempotence only)."""
    table = ProducerStateTable()
    start = plog.log_start_offset if whole_log else plog.offset_at_bytes_from_end(PRODUCER_STATE_WINDOW)
    for base, head in plog.batch_heads(start):
        h = read_batch_header(head)
        if h.producer_id < 0:
            continue
        if h.attributes & ATTR_CONTROL:
            if control_type(head) is not None:       # (a marker the cleaner emptied closes nothing)
                table.apply_marker(h.producer_id, h.producer_epoch, control_type(head) == CONTROL_COMMIT,
                                   base, h.max_timestamp, I32.unpack_from(head, BATCH_HEADER_SIZE + 12)[0])
        else:
            table.update(h, base)
    table.all_durable()                     # everything read back is
    return table


class ProducerStates:
    """Every partition's ProducerStateTable, and which partitions have held
    transactions (noted in meta.db, so that a start rebuilds those whole and
    the others only when first used). Its chores: producer.id.expiration.ms,
    and forgetting what retention or DeleteRecords removed."""

    def __init__(self, config, store, logs):
        self.config, self.store, self.logs = config, store, logs
        self.tables = {}                                # (topic, partition) -> ProducerStateTable
        self.transactional = store.transactional_partitions()
        for tp in sorted(self.transactional):           # their LSO is needed from the first fetch
            if tp in logs.logs:
                self.tables[tp] = rebuild_producer_state(logs.logs[tp], whole_log=True)
        logs.start_moved.append(self.forget_before)

    def schedule(self, timers):
        """Start the chore on the loop's timers."""
        self.timers = timers
        timers.call_later(self.config["producer.id.expiration.check.interval.ms"] / 1000, self._expire)

    def of(self, tp):
        """The partition's producer state, rebuilt from the log's tail on first
        use after a start (transactional partitions were rebuilt whole at start)."""
        table = self.tables.get(tp)
        if table is None:
            table = self.tables[tp] = rebuild_producer_state(self.logs.get(*tp), whole_log=False)
        return table

    def get(self, tp):
        """The partition's producer state if it has one in memory, else None
        (a reader that must not rebuild: no producer there is no transaction)."""
        return self.tables.get(tp)

    def items(self):
        """(tp, table) of every partition whose producer state is in memory."""
        return self.tables.items()

    def last_stable_offset(self, plog):
        """The LSO: below it every transaction is decided. Without transactions
        it is the high watermark."""
        table = self.tables.get((plog.topic, plog.partition))
        return table.last_stable_offset(plog.high_watermark) if table else plog.high_watermark

    def is_transactional(self, tp):
        """Has the partition held a transactional batch (since its topic was made)?"""
        return tp in self.transactional

    def mark_transactional(self, tps):
        """Note in meta.db that partitions hold transactional batches, so the
        next start rebuilds their transaction state (and only such partitions'):
        one meta.db commit for a whole request."""
        new = set(tps) - self.transactional
        if new:
            self.store.mark_transactional(new)
            self.transactional |= new

    def forget_topic(self, name):
        """A deleted topic's producer state, and that its partitions held
        transactions (meta.db's rows went with the topic): a topic made again
        under the name starts with neither."""
        for tp in [tp for tp in self.tables if tp[0] == name]:
            del self.tables[tp]
        self.transactional -= {tp for tp in self.transactional if tp[0] == name}

    def forget_before(self, plog):
        """The log's start moved (retention, DeleteRecords): forget what lay below."""
        table = self.tables.get((plog.topic, plog.partition))
        if table is not None:
            table.forget_before(plog.log_start_offset)

    def _expire(self):
        self.timers.call_later(self.config["producer.id.expiration.check.interval.ms"] / 1000, self._expire)
        now_ms = self.config.clock() * 1000
        for table in self.tables.values():
            table.expire(now_ms, self.config["producer.id.expiration.ms"])


# --- GroupCoordinator: the classic consumer-group protocol ----------------------
# A consumer group (KIP-62 and before) rebalances in two rounds. JoinGroup:
# every member says which assignment protocols it supports; the coordinator
# waits until all known members have joined (or the rebalance timeout
# passes), picks a protocol all support, raises the generation, and answers
# everyone -- the leader also gets every member's subscription. SyncGroup: the
# leader sends the assignment it computed; the coordinator hands each member
# its part. Heartbeats keep a member in; a member silent for its session
# timeout is expelled and the others rebalance. Static members
# (group.instance.id, KIP-345) keep their assignment across a restart
# without a rebalance. Kafka stores all of this in __consumer_offsets; doze
# stores the stable group and its offsets in meta.db.
#
# Kafka vs doze: the state machine and its errors are Kafka's
# (GroupMetadataManager's classicGroup* methods in Kafka 4.x); doze keeps no
# per-member timers, but sweeps deadlines every GROUP_TICK_S instead.

@contextlib.contextmanager
def coordinator_store():
    """A coordinator's meta.db write: refused, it is NOT_COORDINATOR, as Kafka's
    coordinators answer when their log refuses an append (KAFKA_STORAGE_ERROR)."""
    try:
        yield
    except StoreFailed as e:
        raise KafkaError(ErrorCode.NOT_COORDINATOR, e.detail) from None


class GroupState(enum.Enum):
    """A classic group's states, by the names DescribeGroups and ListGroups use."""
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


GROUP_TICK_S = 0.1


class GroupMember:
    """One member of a classic group."""

    def __init__(self, member_id, instance_id, client_id, client_host, session_timeout_ms,
                 rebalance_timeout_ms, protocol_type, protocols):
        self.member_id = member_id
        self.instance_id = instance_id
        self.client_id, self.client_host = client_id, client_host
        self.session_timeout_ms = session_timeout_ms
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.protocol_type = protocol_type
        self.protocols = protocols            # [(name, metadata)], in the member's preference order
        self.assignment = b""
        self.join_result = None               # the JoinGroup answer it is waiting for
        self.sync_result = None               # the SyncGroup answer it is waiting for
        self.awaiting_join = False
        self.awaiting_sync = False
        self.deadline_ms = 0                  # session expiry

    def metadata(self, protocol):
        return next((m for name, m in self.protocols if name == protocol), b"")

    def assign(self, assignment, deadline_ms):
        self.assignment, self.deadline_ms = assignment, deadline_ms    # a downgrade's (ConsumerGroups)

    def interrupted(self):
        """Its parked JoinGroup or SyncGroup answers REBALANCE_IN_PROGRESS (an upgrade's)."""
        if self.awaiting_join:
            self.join_result = Msg(error_code=ErrorCode.REBALANCE_IN_PROGRESS, member_id=self.member_id, leader="")
        if self.awaiting_sync:
            self.sync_result = Msg(error_code=ErrorCode.REBALANCE_IN_PROGRESS)

    def to_json(self):
        return {"member_id": self.member_id, "instance_id": self.instance_id,
                "client_id": self.client_id, "client_host": self.client_host,
                "session_timeout_ms": self.session_timeout_ms,
                "rebalance_timeout_ms": self.rebalance_timeout_ms,
                "protocol_type": self.protocol_type,
                "protocols": [[n, base64.b64encode(m).decode()] for n, m in self.protocols],
                "assignment": base64.b64encode(self.assignment).decode()}

    @classmethod
    def from_json(cls, d):
        m = cls(d["member_id"], d["instance_id"], d["client_id"], d["client_host"],
                d["session_timeout_ms"], d["rebalance_timeout_ms"], d["protocol_type"],
                [(n, base64.b64decode(b)) for n, b in d["protocols"]])
        m.assignment = base64.b64decode(d["assignment"])
        return m


class Group:
    """A classic group: members, generation, and committed offsets."""
    kind = "classic"

    def __init__(self, group_id):
        self.group_id = group_id
        self.state = GroupState.EMPTY
        self.generation = 0
        self.protocol_type = None
        self.protocol_name = None
        self.leader = None
        self.members = {}                     # member_id -> GroupMember, in join order
        self.pending = {}                     # member ids handed out by MEMBER_ID_REQUIRED -> deadline
        self.static = {}                      # group.instance.id -> member_id
        self.offsets = {}                     # (topic, partition) -> OffsetEntry
        self.rebalance_deadline_ms = None
        self.initial_delay_until_ms = None
        self.empty_since_ms = None

    def supported_protocols(self):
        if not self.members:
            return None
        common = None
        for m in self.members.values():
            names = {name for name, _ in m.protocols}
            common = names if common is None else common & names
        return common

    def select_protocol(self):
        """Each member votes for its most preferred protocol that all support."""
        common = self.supported_protocols()
        votes = collections.Counter()
        for m in self.members.values():
            votes[next(name for name, _ in m.protocols if name in common)] += 1
        return max(votes, key=lambda name: votes[name])

    def all_joined(self):
        return not self.pending and all(m.awaiting_join for m in self.members.values())

    def join_member(self, m):
        """A member a consumer group hands over (ConsumerGroups' downgrade)."""
        self.members[m.member_id] = m
        if m.instance_id:
            self.static[m.instance_id] = m.member_id


class GroupCoordinator:
    """The classic group protocol and committed offsets. Knows nothing of
    sockets: handlers call join/sync/heartbeat/leave/commit, and waiters are
    woken through notify(("group", group_id))."""

    def __init__(self, config, store, logs, notify, journal=None):
        self.config = config
        self.store = store
        self.logs = logs
        self.notify = notify
        self.journal = Journal(config.clock) if journal is None else journal   # new generations, for the console
        self.clock = config.clock
        self.groups = {}
        self.configs = store.group_configs()     # group id -> {config name: text} (GROUP resources)
        self.next_tick_s = None                  # when the deadlines are next swept (schedule)
        self.consumer_rows = []                  # meta.db's consumer groups, read once, for ConsumerGroups
        self._load()

    def now_ms(self):
        return int(self.clock() * 1000)

    def _load(self):
        now = self.now_ms()
        for group_id, row, offsets in self.store.load_groups():
            if row and row.get("type") == "consumer":   # a consumer group: ConsumerGroups takes it
                self.consumer_rows.append((group_id, row, offsets))
                continue
            g = self.groups[group_id] = Group(group_id)
            g.offsets = offsets
            if row:
                g.protocol_type, g.protocol_name = row["protocol_type"], row["protocol_name"]
                g.generation, g.leader = row["generation"], row["leader"]
                g.empty_since_ms = row.get("empty_since_ms")
                for d in row["members"]:
                    m = GroupMember.from_json(d)
                    m.deadline_ms = now + m.session_timeout_ms       # timers start again
                    g.members[m.member_id] = m
                    if m.instance_id:
                        g.static[m.instance_id] = m.member_id
                g.state = GroupState.STABLE if g.members else GroupState.EMPTY

    def _save(self, g):
        """Store the group's membership (Kafka's GroupMetadata record)."""
        with coordinator_store():
            self.store.save_group(g.group_id, {
                "protocol_type": g.protocol_type, "protocol_name": g.protocol_name,
                "generation": g.generation, "leader": g.leader, "empty_since_ms": g.empty_since_ms,
                "members": [m.to_json() for m in g.members.values()]})

    def get(self, group_id):
        return self.groups.get(group_id)

    def check_fetch(self, group_id, member_id, epoch):
        """OffsetFetch v9 by a consumer group's member: its exact epoch."""
        g = self.groups.get(group_id)
        if g is not None and g.kind == "consumer":
            g.check_fetch(member_id, epoch)

    def downgraded(self, g):
        """A consumer group turned classic (Kafka's convertToClassicGroup): Stable, then a rebalance."""
        g.state, g.leader, g.protocol_name = GroupState.STABLE, next(iter(g.members)), g.select_protocol()
        self.register(g)
        self._prepare_rebalance(g)
        self._save(g)

    def register(self, g):
        """A group of another protocol (ConsumerGroups') takes the id, the offsets committed under it with it."""
        old = self.groups.get(g.group_id)
        if old is not None:
            g.offsets = old.offsets
        self.groups[g.group_id] = g

    # --- JoinGroup ---
    def join(self, group_id, member_id, instance_id, client_id, client_host, session_timeout_ms,
             rebalance_timeout_ms, protocol_type, protocols, require_known_member_id):
        """Returns (member, response): response is an immediate answer (Msg),
        or None when the member must wait for member.join_result."""
        if not group_id:
            raise KafkaError(ErrorCode.INVALID_GROUP_ID, "group id is empty")
        if not (self.config["group.min.session.timeout.ms"] <= session_timeout_ms
                <= self.config["group.max.session.timeout.ms"]):
            raise KafkaError(ErrorCode.INVALID_SESSION_TIMEOUT)
        g = self.groups.get(group_id)
        if g is not None and g.kind == "consumer":      # empty (JoinGroup takes a non-empty one to ConsumerGroups)
            offsets, g = g.offsets, Group(group_id)           # an empty consumer group gives way, offsets kept
            g.offsets = offsets
            self.groups[group_id] = g
        if g is None:
            if member_id:
                raise KafkaError(ErrorCode.UNKNOWN_MEMBER_ID)
            g = self.groups[group_id] = Group(group_id)
        if not protocols or (g.members and (protocol_type != g.protocol_type or not (
                g.supported_protocols() & {name for name, _ in protocols}))):
            raise KafkaError(ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
        now = self.now_ms()
        args = (client_id, client_host, session_timeout_ms, rebalance_timeout_ms, protocol_type, protocols)
        if not member_id:
            if instance_id and instance_id in g.static:
                return self._rejoin_static(g, instance_id, args)
            if len(g.members) + len(g.pending) >= self.config["group.max.size"]:
                raise KafkaError(ErrorCode.GROUP_MAX_SIZE_REACHED)
            new_id = f"{instance_id or client_id}-{uuid.uuid4()}"
            if require_known_member_id and not instance_id:
                # KIP-394: hand out the id first; the member joins again with it.
                g.pending[new_id] = now + session_timeout_ms
                return None, Msg(error_code=ErrorCode.MEMBER_ID_REQUIRED, member_id=new_id,
                                 generation_id=-1, leader="", protocol_name=None)
            return self._add_member(g, new_id, instance_id, args), None
        if member_id in g.pending:
            del g.pending[member_id]
            return self._add_member(g, member_id, instance_id, args), None
        m = g.members.get(member_id)
        if m is None:
            raise KafkaError(ErrorCode.UNKNOWN_MEMBER_ID)
        if instance_id and g.static.get(instance_id) != member_id:
            raise KafkaError(ErrorCode.FENCED_INSTANCE_ID)
        return self._join_known(g, m, args)

    def _add_member(self, g, member_id, instance_id, args):
        m = GroupMember(member_id, instance_id, *args)
        m.deadline_ms = self.now_ms() + m.session_timeout_ms
        g.members[member_id] = m
        if instance_id:
            g.static[instance_id] = member_id
        if g.protocol_type is None or len(g.members) == 1:
            g.protocol_type = m.protocol_type
        m.awaiting_join = True
        if g.state == GroupState.PREPARING_REBALANCE and g.initial_delay_until_ms is not None:
            # A member joining during the initial delay extends it (Kafka's InitialDelayedJoin).
            delay = self.config["group.initial.rebalance.delay.ms"]
            g.initial_delay_until_ms = min(max(g.initial_delay_until_ms, self.now_ms() + delay),
                                           g.rebalance_deadline_ms)
        self._prepare_rebalance(g)
        self._maybe_complete_join(g)
        return m

    def _join_known(self, g, m, args):
        m.client_id, m.client_host, m.session_timeout_ms, m.rebalance_timeout_ms = args[:4]
        changed = m.protocols != args[5]
        m.protocols = args[5]
        m.deadline_ms = self.now_ms() + m.session_timeout_ms
        if g.state == GroupState.PREPARING_REBALANCE:
            m.awaiting_join = True
            m.join_result = None
            self._maybe_complete_join(g)
            return m, None
        if g.state in (GroupState.COMPLETING_REBALANCE, GroupState.STABLE) and not changed \
                and m.member_id != g.leader:
            return m, self._join_response(g, m)        # a follower that missed its answer
        m.awaiting_join = True
        m.join_result = None
        self._prepare_rebalance(g)
        self._maybe_complete_join(g)
        return m, None

    def _rejoin_static(self, g, instance_id, args):
        """KIP-345: a static member back with a new member id takes over its old
        entry and assignment. In a stable group with the same protocols there
        is no rebalance."""
        old = g.members.pop(g.static[instance_id])
        if old.awaiting_join:
            old.join_result = Msg(error_code=ErrorCode.FENCED_INSTANCE_ID, member_id=old.member_id)
        if old.awaiting_sync:
            old.sync_result = Msg(error_code=ErrorCode.FENCED_INSTANCE_ID)
        new_id = f"{instance_id}-{uuid.uuid4()}"
        m = GroupMember(new_id, instance_id, *args)
        m.assignment = old.assignment
        m.client_id, m.client_host = old.client_id, old.client_host   # as Kafka 4.3.1 shows it
        m.deadline_ms = self.now_ms() + m.session_timeout_ms
        g.members[new_id] = m
        g.static[instance_id] = new_id
        was_leader = g.leader == old.member_id
        if was_leader:
            g.leader = new_id
        # Kafka: a static member rejoining a stable group triggers no rebalance as
        # long as the protocol the group would select stays the same (its
        # subscription bytes may differ: a restarted consumer owns nothing yet).
        if g.state == GroupState.STABLE and g.select_protocol() == g.protocol_name:
            self._save(g)
            response = self._join_response(g, m)
            if was_leader:
                response.skip_assignment = True        # KIP-814: the leader need not reassign
            self.notify(("group", g.group_id))
            return m, response
        m.awaiting_join = True
        self._prepare_rebalance(g)
        self._maybe_complete_join(g)
        return m, None

    def _join_response(self, g, m):
        leader = m.member_id == g.leader
        return Msg(error_code=ErrorCode.NONE, generation_id=g.generation,
                   protocol_type=g.protocol_type, protocol_name=g.protocol_name,
                   leader=g.leader or "", member_id=m.member_id,
                   members=[Msg(member_id=o.member_id, group_instance_id=o.instance_id,
                                metadata=o.metadata(g.protocol_name))
                            for o in g.members.values()] if leader else [])

    def _prepare_rebalance(self, g):
        if g.state == GroupState.PREPARING_REBALANCE:
            return
        for m in g.members.values():                     # syncs waiting now fail
            if m.awaiting_sync:
                m.awaiting_sync = False
                m.sync_result = Msg(error_code=ErrorCode.REBALANCE_IN_PROGRESS)
        now = self.now_ms()
        timeout = max((m.rebalance_timeout_ms for m in g.members.values()), default=0)
        g.rebalance_deadline_ms = now + timeout
        delay = self.config["group.initial.rebalance.delay.ms"]
        g.initial_delay_until_ms = now + min(delay, timeout) if g.state == GroupState.EMPTY \
            and delay > 0 else None
        g.state = GroupState.PREPARING_REBALANCE
        self.notify(("group", g.group_id))

    def _maybe_complete_join(self, g, expired=False):
        if g.state != GroupState.PREPARING_REBALANCE:
            return
        now = self.now_ms()
        if g.initial_delay_until_ms is not None and now < g.initial_delay_until_ms and not expired:
            return
        if not (g.all_joined() or expired or (g.initial_delay_until_ms is not None
                                              and now >= g.initial_delay_until_ms
                                              and all(m.awaiting_join for m in g.members.values()))):
            return
        for m in [m for m in g.members.values() if not m.awaiting_join]:
            self._remove(g, m)                          # did not rejoin in time
        g.pending.clear()
        g.initial_delay_until_ms = None
        g.generation += 1
        if not g.members:
            g.state, g.protocol_name, g.leader = GroupState.EMPTY, None, None
            g.empty_since_ms = now
            self._save(g)
        else:
            g.protocol_name = g.select_protocol()
            if g.leader not in g.members:
                g.leader = next(iter(g.members))
            g.state = GroupState.COMPLETING_REBALANCE
            g.rebalance_deadline_ms = now + max(m.rebalance_timeout_ms for m in g.members.values())
            for m in g.members.values():
                m.awaiting_join = False
                m.join_result = self._join_response(g, m)
                m.deadline_ms = now + m.session_timeout_ms
        self.journal.record("group", group_id=g.group_id, generation=g.generation, state=g.state.value,
                            members=len(g.members), protocol=g.protocol_name, leader=g.leader)
        self.notify(("group", g.group_id))

    def _remove(self, g, m):
        del g.members[m.member_id]
        if m.instance_id and g.static.get(m.instance_id) == m.member_id:
            del g.static[m.instance_id]
        if m.awaiting_join:
            m.join_result = Msg(error_code=ErrorCode.UNKNOWN_MEMBER_ID, member_id=m.member_id)
        if m.awaiting_sync:
            m.sync_result = Msg(error_code=ErrorCode.UNKNOWN_MEMBER_ID)
        if g.leader == m.member_id:
            g.leader = next(iter(g.members), None)

    def _member(self, group_id, member_id, instance_id, generation=None):
        """The checks SyncGroup, Heartbeat and OffsetCommit share."""
        g = self.groups.get(group_id)
        if g is None or g.kind == "consumer" or g.state == GroupState.DEAD:
            raise KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE if g is not None and g.kind == "classic"
                             else ErrorCode.UNKNOWN_MEMBER_ID)
        if instance_id and instance_id in g.static and g.static[instance_id] != member_id:
            raise KafkaError(ErrorCode.FENCED_INSTANCE_ID)
        m = g.members.get(member_id)
        if m is None:
            raise KafkaError(ErrorCode.UNKNOWN_MEMBER_ID)
        if generation is not None and generation != g.generation:
            raise KafkaError(ErrorCode.ILLEGAL_GENERATION)
        return g, m

    # --- SyncGroup ---
    def sync(self, group_id, generation, member_id, instance_id, protocol_type, protocol_name,
             assignments):
        """Returns (member, response): the immediate answer, or None to wait for member.sync_result."""
        g, m = self._member(group_id, member_id, instance_id, generation)
        if (protocol_type and protocol_type != g.protocol_type) or \
                (protocol_name and protocol_name != g.protocol_name):
            raise KafkaError(ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
        if g.state == GroupState.PREPARING_REBALANCE:
            raise KafkaError(ErrorCode.REBALANCE_IN_PROGRESS)
        m.deadline_ms = self.now_ms() + m.session_timeout_ms
        if g.state == GroupState.STABLE:
            return m, self._sync_response(g, m)
        m.awaiting_sync = True
        m.sync_result = None
        if member_id == g.leader:
            given = {a.member_id: a.assignment for a in assignments}
            for member in g.members.values():
                member.assignment = given.get(member.member_id, b"")
            self._save(g)                    # the assignment is durable before anyone sees it
            g.state = GroupState.STABLE
            for member in g.members.values():
                if member.awaiting_sync:
                    member.awaiting_sync = False
                    member.sync_result = self._sync_response(g, member)
            self.notify(("group", g.group_id))
            return m, m.sync_result
        return m, None

    def _sync_response(self, g, m):
        return Msg(error_code=ErrorCode.NONE, protocol_type=g.protocol_type,
                   protocol_name=g.protocol_name, assignment=m.assignment)

    # --- Heartbeat and LeaveGroup ---
    def heartbeat(self, group_id, generation, member_id, instance_id):
        g = self.groups.get(group_id)
        if g is not None and g.state == GroupState.EMPTY:
            raise KafkaError(ErrorCode.UNKNOWN_MEMBER_ID)
        g, m = self._member(group_id, member_id, instance_id, generation)
        m.deadline_ms = self.now_ms() + m.session_timeout_ms
        if g.state == GroupState.PREPARING_REBALANCE:
            raise KafkaError(ErrorCode.REBALANCE_IN_PROGRESS)

    def leave(self, group_id, member_id, instance_id):
        """One member leaves; -> ErrorCode for that member."""
        g = self.groups.get(group_id)
        if g is None or g.kind == "consumer":
            return ErrorCode.UNKNOWN_MEMBER_ID
        if instance_id:
            current = g.static.get(instance_id)
            if current is None:
                return ErrorCode.UNKNOWN_MEMBER_ID
            if member_id and member_id != current:
                return ErrorCode.FENCED_INSTANCE_ID
            member_id = current
        if member_id in g.pending:
            del g.pending[member_id]
            self._maybe_complete_join(g)
            return ErrorCode.NONE
        m = g.members.get(member_id)
        if m is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        self._remove(g, m)
        self._member_gone(g)
        return ErrorCode.NONE

    def _member_gone(self, g):
        if g.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._prepare_rebalance(g)
        self._maybe_complete_join(g)
        if g.state == GroupState.EMPTY:
            self._save(g)
        self.notify(("group", g.group_id))

    # --- its chores on the loop: deadlines (every GROUP_TICK_S, or sooner), offsets' retention ---
    def schedule(self, timers):
        """Start the chores on the loop's timers."""
        self.timers = timers
        self.next_tick_s = self.clock() + GROUP_TICK_S
        timers.call_at(self.next_tick_s, self._tick)
        timers.call_later(self.config["offsets.retention.check.interval.ms"] / 1000, self._expire_offsets)

    def _tick(self):
        upcoming_ms = None
        try:
            upcoming_ms = self.tick()
        except KafkaError as e:                   # meta.db refused a change: the next tick retries
            log.error("group timeouts: %s", e.detail)
        finally:                                  # the next tick, whatever this one did
            due = self.clock() + GROUP_TICK_S
            self.next_tick_s = due if upcoming_ms is None else min(due, upcoming_ms / 1000)
            self.timers.call_at(self.next_tick_s, self._tick)

    def _expire_offsets(self):
        self.timers.call_later(self.config["offsets.retention.check.interval.ms"] / 1000, self._expire_offsets)
        with contextlib.suppress(StoreFailed):       # logged by the store; tried again next time
            self.expire_offsets()

    def tick(self):
        """Expire what is due; -> the earliest deadline still ahead (ms), so
        that the next tick comes exactly then (Kafka's timers are exact: a
        client waiting out a session timeout expects the member gone)."""
        now = self.clock() * 1000           # not rounded down: a deadline is due at its very ms
        classic = [g for g in self.groups.values() if g.kind == "classic"]
        for g in classic:
            for member_id, deadline in list(g.pending.items()):
                if now >= deadline:
                    del g.pending[member_id]
            if g.state == GroupState.PREPARING_REBALANCE:
                self._maybe_complete_join(g, expired=now >= g.rebalance_deadline_ms)
            elif g.state == GroupState.COMPLETING_REBALANCE and now >= g.rebalance_deadline_ms:
                for m in [m for m in g.members.values() if not m.awaiting_sync]:
                    self._remove(g, m)                # never synced: out
                self._member_gone(g)
            expired = [m for m in g.members.values()
                       if now >= m.deadline_ms and not m.awaiting_join and not m.awaiting_sync]
            for m in expired:
                log.info("group %s: member %s missed its session timeout (%d ms); removed",
                         g.group_id, m.member_id, m.session_timeout_ms)
                self._remove(g, m)
            if expired:
                self._member_gone(g)
        return min((d for g in classic for d in itertools.chain(
            g.pending.values(), (m.deadline_ms for m in g.members.values()),
            (g.rebalance_deadline_ms,) if g.rebalance_deadline_ms is not None else ()) if d > now), default=None)

    # --- offsets ---
    def check_commit(self, group_id, generation, member_id, instance_id, transactional=False, version=9, tps=()):
        """Kafka's ClassicGroup.validateOffsetCommit: a simple commit (generation
        < 0, no member) needs an empty group; a member's needs its generation.
        A consumer group's: ConsumerGroup.check_commit."""
        g = self.groups.get(group_id)
        if g is not None and g.kind == "consumer":
            ids = {name: t.topic_id for name, t in self.logs.topics.items()}
            return g.check_commit(member_id, generation, [(ids.get(t), t, p) for t, p in tps], transactional,
                                  version)
        if g is None:
            if generation >= 0:
                raise KafkaError(ErrorCode.ILLEGAL_GENERATION if not member_id
                                 else ErrorCode.UNKNOWN_MEMBER_ID, "no such group")
            return
        if g.state == GroupState.DEAD:
            raise KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE)
        if generation < 0 and g.state == GroupState.EMPTY:
            return
        if generation >= 0 or member_id or instance_id:
            if instance_id:
                current = g.static.get(instance_id)
                if current is None:
                    raise KafkaError(ErrorCode.UNKNOWN_MEMBER_ID)
                if current != member_id:
                    raise KafkaError(ErrorCode.FENCED_INSTANCE_ID)
            elif member_id not in g.members:
                raise KafkaError(ErrorCode.UNKNOWN_MEMBER_ID)
            if generation != g.generation:
                raise KafkaError(ErrorCode.ILLEGAL_GENERATION)
        elif not transactional and g.state != GroupState.EMPTY:
            raise KafkaError(ErrorCode.UNKNOWN_MEMBER_ID)
        if not transactional and g.state == GroupState.COMPLETING_REBALANCE:
            raise KafkaError(ErrorCode.REBALANCE_IN_PROGRESS)
        m = g.members.get(member_id)
        if m is not None:
            m.deadline_ms = self.now_ms() + m.session_timeout_ms

    def commit(self, group_id, offsets):
        """Store {(topic, partition): OffsetEntry} durably, then in memory."""
        with coordinator_store():
            self.store.save_offsets(group_id, offsets)  # first: memory never runs ahead of meta.db
        g = self.groups.get(group_id)
        if g is None:
            g = self.groups[group_id] = Group(group_id)
        g.offsets.update(offsets)

    def apply_committed(self, group_id, offsets):
        """Offsets a committed transaction stored in meta.db: now visible."""
        g = self.groups.get(group_id)
        if g is None:
            g = self.groups[group_id] = Group(group_id)
        g.offsets.update(offsets)

    def fetch_offsets(self, group_id, wanted):
        """{(topic, partition): OffsetEntry or None} for the partitions wanted
        (None: every partition with an offset)."""
        g = self.groups.get(group_id)
        stored = g.offsets if g else {}
        if wanted is None:
            return dict(sorted(stored.items()))
        return {tp: stored.get(tp) for tp in wanted}

    def forget_all_offsets(self):
        """__consumer_offsets was deleted (Kafka lets an admin do it): the offsets go."""
        self.store.delete_all_offsets()
        for g in self.groups.values():
            g.offsets = {}

    def delete_offsets(self, group_id, tps):
        g = self.groups.get(group_id)
        if g is None:
            raise KafkaError(ErrorCode.GROUP_ID_NOT_FOUND)
        self.store.delete_offsets(group_id, tps)
        for tp in tps:
            g.offsets.pop(tp, None)

    def subscribed_topics(self, g):
        """Topics the members of a consumer-protocol group subscribe to
        (ConsumerProtocolSubscription: version int16, topics [string], ...)."""
        topics = set()
        if g.kind == "consumer":
            return {t for m in g.members.values() for t in g.topic_names(m)}
        if g.protocol_type != "consumer" or g.state == GroupState.EMPTY:
            return topics
        for m in g.members.values():
            with contextlib.suppress(ProtocolError, IndexError):
                r = Reader(m.metadata(g.protocol_name))
                r.fixed(I16)
                for _ in range(r.fixed(I32)):
                    topics.add(_read_string(r, False))
        return topics

    def delete_group(self, group_id):
        g = self.groups.get(group_id)
        if g is None or (g.state == GroupState.EMPTY and not g.offsets and g.generation == 0
                         and not self.store.has_group(group_id)):
            raise KafkaError(ErrorCode.GROUP_ID_NOT_FOUND)
        if g.state.value != "Empty":
            raise KafkaError(ErrorCode.NON_EMPTY_GROUP)
        self.store.delete_group(group_id)
        del self.groups[group_id]

    def expire_offsets(self):
        """offsets.retention.minutes: a group empty that long loses its offsets;
        offsets committed outside any group protocol expire one by one."""
        retention = self.config["offsets.retention.minutes"] * 60000
        now = self.now_ms()
        for g in list(self.groups.values()):
            if g.state.value != "Empty":
                continue
            if g.protocol_type:
                old = list(g.offsets) if g.empty_since_ms is not None and \
                    now - g.empty_since_ms >= retention else []
            else:
                old = [tp for tp, e in g.offsets.items() if now - e.commit_timestamp >= retention]
            if old:
                self.delete_offsets(g.group_id, old)
            if not g.offsets and not g.members:
                self.store.delete_group(g.group_id)
                del self.groups[g.group_id]

###############################################################################
# 10. LOG COMPACTION -- compacted topics kept to the latest value of each key
###############################################################################
# A topic with cleanup.policy=compact keeps the latest value of each key, as
# Kafka's LogCleaner keeps it: every Kafka Connect worker's configs, offsets
# and status, every Kafka Streams state store's changelog, every "latest value
# per key" table lives in one. The cleaner looks for the dirtiest compacted
# partition every log.cleaner.backoff.ms (again at once after a pass), and
# cleans it in one pass, on the broker's loop in slices of CLEANER_SLICE_S:
#   1. The dirty section is [the checkpoint of the last pass, the first
#      uncleanable offset): the log start offset if there is no checkpoint;
#      the end is rounded down to the base of the segment holding the least
#      of the LSO, the active segment and min.compaction.lag.ms -- so nothing
#      of an open transaction, and nothing of the active segment, is touched.
#      A partition is cleaned once its dirty bytes / all bytes is over
#      min.cleanable.dirty.ratio, or max.compaction.lag.ms is overdue.
#   2. The offset map: each key's latest offset in the dirty section (MD5 of
#      the key, as Kafka), from the records of batches that are not control
#      batches and not of an aborted transaction; tombstones count, keyless
#      records do not. It holds at most log.cleaner.dedupe.buffer.size / 24 x
#      log.cleaner.io.buffer.load.factor keys; a full map ends the section early.
#   3. Every segment from the log's start to the section's end is written
#      again, in groups of at most segment.bytes, each group to one new
#      segment named after its first base offset. A record stays if it is the
#      latest of its key (or beyond the map), a tombstone only until its
#      batch's delete horizon has passed (KIP-534: the first pass that keeps
#      a tombstone writes now + delete.retention.ms into the batch, a later
#      one removes it); records of aborted transactions go; a COMMIT or ABORT
#      marker stays while any batch of its transaction does, then gets a
#      horizon, then goes. Offsets never change: the cleaned log has gaps. A
#      batch that keeps all its records and needs no horizon is copied as it
#      is; another is rebuilt with the same header (offsets, producer, epoch,
#      sequence, codec: none or gzip). Each producer's last batch, and the
#      batch that ends the section, stay even when emptied, as a 61-byte
#      header, so a producer's sequence and epoch survive a restart.
#   4. Each group is written beside the old segments as B.log.cleaned and
#      fsynced, then swapped in by renames (PartitionLog.replace_segments):
#      a crash at any point finds either the old segments or the new one
#      (PartitionLog.recover_cleaning). The checkpoint is stored in meta.db
#      after the pass; one lost in a crash means the section is cleaned again.
# Kafka vs doze: batches compressed with lz4, snappy or zstd cannot be read
# with the standard library: they are copied whole (their keys supersede
# nothing, so older values of those keys stay too -- a reader still ends with
# the latest; only the bytes saved are fewer). Kafka's cleaner threads become
# steps of the loop; a group is swapped in only if its segments are still
# there (retention or DeleteRecords may have removed some meanwhile).

CLEANER_SLICE_S = 0.003          # loop time a cleaning takes per turn, at most
CLEANER_SYNC_BYTES = 1 << 20     # the cleaned file fsynced as it grows: the last fsync is short too
ATTR_DELETE_HORIZON = 0x40       # KIP-534: base_timestamp holds the batch's delete horizon
EMPTY_BATCH_SIZE = BATCH_HEADER_SIZE


class OffsetMap:
    """Each key's latest offset in a dirty section (Kafka's SkimpyOffsetMap,
    by the MD5 of the key), of a bounded size."""

    def __init__(self, capacity):
        self.capacity = capacity
        self.offsets = {}
        self.latest_offset = -1

    def full(self):
        return len(self.offsets) >= self.capacity

    def put(self, key, offset):
        self.offsets[hashlib.md5(key, usedforsecurity=False).digest()] = offset
        self.latest_offset = offset

    def get(self, key):
        return self.offsets.get(hashlib.md5(key, usedforsecurity=False).digest(), -1)

    def reached(self, offset):
        """A batch read whole: the map covers the section up to its last offset."""
        self.latest_offset = max(self.latest_offset, offset)


class CleanedTransactions:
    """Which transactional batches a cleaning may drop, read in offset order
    (Kafka's CleanedTransactionMetadata): data of an aborted transaction, and a
    marker whose transaction has no batch left -- an ABORT marker stays while
    data it aborts does, a COMMIT marker while a batch of its producer came
    since the last marker."""

    def __init__(self, aborted):
        self.pending = sorted(aborted, key=lambda a: a[1])     # (producer id, first offset, marker offset)
        self.next = 0
        self.aborted = {}                                       # producer id -> [entry, data seen?]
        self.committed = set()
        self.kept_aborts = set()                                # ABORT markers kept with data seen: indexed

    def _reached(self, last_offset):
        while self.next < len(self.pending) and self.pending[self.next][1] <= last_offset:
            entry = self.pending[self.next]
            self.aborted.setdefault(entry[0], [entry, False])
            self.next += 1

    def data_discardable(self, h):
        self._reached(h.base_offset + h.last_offset_delta)
        if not h.attributes & ATTR_TRANSACTIONAL:
            return False
        if h.producer_id in self.aborted:
            self.aborted[h.producer_id][1] = True
            return True
        self.committed.add(h.producer_id)
        return False

    def marker_discardable(self, h, kind):
        self._reached(h.base_offset + h.last_offset_delta)
        if kind is None:                                        # emptied by an earlier pass
            return True
        if kind == CONTROL_ABORT:
            entry = self.aborted.pop(h.producer_id, None)
            if entry and entry[1]:
                self.kept_aborts.add(entry[0][2])
            return not (entry and entry[1])
        if h.producer_id in self.committed:
            self.committed.discard(h.producer_id)
            return False
        return True


def batch_horizon(h):
    """A batch's delete horizon (KIP-534), or None."""
    return h.base_timestamp if h.attributes & ATTR_DELETE_HORIZON else None


def empty_batch(h):
    """The batch as a 61-byte header with no records (Kafka's writeEmptyHeader):
    its offsets, producer, epoch and sequence kept."""
    tail = struct.pack(">hiqqqhii", h.attributes & ~(ATTR_COMPRESSION | ATTR_DELETE_HORIZON), h.last_offset_delta,
                       -1, h.max_timestamp, h.producer_id, h.producer_epoch, h.base_sequence, 0)
    return struct.pack(">qiibI", h.base_offset, len(tail) + 9, h.partition_leader_epoch, 2, crc32c(tail)) + tail


def rebuilt_batch(h, records, horizon):
    """The batch with only `records` [(offset delta, timestamp, key, value,
    headers)], its header otherwise kept; its codec's (none, gzip)."""
    base_ts = horizon if horizon is not None else records[0][1]
    body = b"".join(encode_record(d, ts - base_ts, k, v, hs) for d, ts, k, v, hs in records)
    if h.attributes & ATTR_COMPRESSION == 1:
        body = gzip_deflate(body)
    max_ts = h.max_timestamp if h.attributes & ATTR_LOG_APPEND_TIME else max(r[1] for r in records)
    attributes = h.attributes & ~ATTR_DELETE_HORIZON | (ATTR_DELETE_HORIZON if horizon is not None else 0)
    tail = struct.pack(">hiqqqhii", attributes, h.last_offset_delta, base_ts, max_ts, h.producer_id,
                       h.producer_epoch, h.base_sequence, len(records)) + body
    return struct.pack(">qiibI", h.base_offset, len(tail) + 9, h.partition_leader_epoch, 2, crc32c(tail)) + tail


def records_of(batch, h):
    """[(offset delta, timestamp, key, value, headers)] of a batch, or None
    when the standard library cannot read it (lz4, snappy, zstd)."""
    try:
        return [(d, h.base_timestamp + t, k, v, hs) for d, t, k, v, hs in decode_records(batch)]
    except RecordsError:
        return None


class CleaningPass:
    """One cleaning of one partition, as steps (a generator: run()): the offset
    map over its dirty section, then every group of segments up to the
    section's end written again and swapped in. What it removed is counted."""

    def __init__(self, cleaner, plog, first_dirty, upper, now_ms):
        self.cleaner, self.plog, self.files = cleaner, plog, cleaner.files
        self.first_dirty, self.upper, self.now_ms = first_dirty, upper, now_ms
        table = cleaner.producer_states.of((plog.topic, plog.partition))
        self.aborted = [(pid, first, marker) for pid, first, marker, _ in table.aborted
                        if marker >= plog.log_start_offset and first < upper]
        self.last_of = {pid: (e.batches[-1][3] if e.batches else None, e.epoch)
                        for pid, e in table.producers.items()}
        self.offsets = OffsetMap(cleaner.map_capacity)
        self.end = first_dirty
        self.stats = {"bytes_before": 0, "bytes_after": 0, "records_removed": 0, "batches_removed": 0,
                      "batches_emptied": 0}

    def run(self):
        complete = yield from self.build_map()
        self.end = self.upper if complete else self.offsets.latest_offset + 1
        group, size = [], 0
        for seg in [s for s in self.plog.segments if s.base_offset < self.end and s is not self.plog.active]:
            if group and size + seg.size > self.plog.config("segment.bytes"):
                if not (yield from self.clean_group(group)):
                    return False
                group, size = [], 0
            group.append(seg)
            size += seg.size
        if group and not (yield from self.clean_group(group)):
            return False
        return True

    def build_map(self):
        """The latest offset of each key in [first_dirty, upper) -> whether it
        holds the whole section (a full map ends it early)."""
        ctx = CleanedTransactions(self.aborted)
        for base, batch in self.plog.batches(self.first_dirty, self.upper):
            h = read_batch_header(batch)
            if h.attributes & ATTR_CONTROL:
                ctx.marker_discardable(h, control_type(batch))
            elif not ctx.data_discardable(h):
                for d, _, key, _, _ in records_of(batch, h) or ():
                    if key is not None and base + d >= self.first_dirty:
                        if self.offsets.full():
                            return False
                        self.offsets.put(key, base + d)
            self.offsets.reached(h.base_offset + h.last_offset_delta)
            yield
        return True

    def clean_group(self, group):
        """Write the group's kept batches to B.log.cleaned, fsynced, and swap it in -> done?"""
        new = Segment(self.files, self.plog.dir, group[0].base_offset, self.plog.open_files)
        path = new.path + ".cleaned"
        self.files.unlink(path)
        fd = self.files.open_append(path, create=True)
        ctx = CleanedTransactions(self.aborted)
        unsynced = 0
        try:
            for seg in group:
                for i in range(len(seg.bases)):
                    if seg not in self.plog.segments:
                        break                           # deleted meanwhile: not swapped in, below
                    batch = seg.read_batch(i)
                    kept = self.retained(read_batch_header(batch), batch, ctx)
                    self.stats["bytes_before"] += len(batch)
                    if kept:
                        self.files.write(fd, kept)
                        new.add_written(read_batch_header(kept), len(kept))
                        self.stats["bytes_after"] += len(kept)
                        unsynced += len(kept)
                    if unsynced >= CLEANER_SYNC_BYTES:
                        self.files.fsync(fd)
                        unsynced = 0
                    yield
            self.files.fsync(fd)
        finally:
            self.files.close(fd)
        if self.plog.offline or any(s not in self.plog.segments for s in group):
            self.files.unlink(path)                 # retention or DeleteRecords came first: not swapped in
            return False
        group_end = self.plog.segments[self.plog.segments.index(group[-1]) + 1].base_offset
        self.plog.replace_segments(group, new)
        # Kafka's cleaned .txnindex: only the ABORT markers kept with data of theirs
        # seen; a read_committed Fetch must not list an aborted transaction whose
        # marker is gone (its producer's next, committed, one would be skipped).
        self.cleaner.producer_states.of((self.plog.topic, self.plog.partition)).keep_aborted(
            group[0].base_offset, group_end, ctx.kept_aborts)
        return True

    def retained(self, h, batch, ctx):
        """The batch as the cleaned segment keeps it: as it is, rebuilt, as a
        header, or None (Kafka's Cleaner.cleanInto and MemoryRecords.filterTo)."""
        control = h.attributes & ATTR_CONTROL
        kind = control_type(batch) if control else None
        discardable = ctx.marker_discardable(h, kind) if control else ctx.data_discardable(h)
        horizon = batch_horizon(h)
        drop_all = discardable and (not control or horizon is not None and horizon <= self.now_ms)
        last_data, epoch = self.last_of.get(h.producer_id, (None, None))
        keep_header = h.producer_id >= 0 and (last_data == h.base_offset + h.last_offset_delta if last_data
                                              is not None else control and h.producer_epoch == epoch) \
            or h.base_offset + h.last_offset_delta + 1 == self.upper
        records = [] if drop_all else records_of(batch, h)
        if records is None:
            return batch                             # not readable here: kept whole
        kept = [r for r in records if control or self.keeps(h, r, horizon)]
        self.stats["records_removed"] += h.records_count - len(kept)
        if not kept:
            self.stats["batches_emptied" if keep_header else "batches_removed"] += 1
            return empty_batch(h) if keep_header and h.records_count else batch if keep_header else None
        wants_horizon = horizon is None and (any(r[3] is None for r in kept) or control and discardable)
        if len(kept) == h.records_count and not wants_horizon:
            return batch
        return rebuilt_batch(h, kept, self.now_ms + self.plog.config("delete.retention.ms")
                             if wants_horizon else horizon)

    def keeps(self, h, record, horizon):
        """A record stays if it is its key's latest (or beyond the map), a
        tombstone until its batch's delete horizon passes; a keyless one goes."""
        offset, key, value = h.base_offset + record[0], record[2], record[3]
        if offset > self.offsets.latest_offset:
            return True
        if key is None:
            return False
        return offset >= self.offsets.get(key) and (value is not None or horizon is None or self.now_ms < horizon)


class LogCleaner:
    """Compacted topics kept to the latest value of each key (Kafka's
    LogCleaner): which partition to clean, and its pass run in slices on the loop."""

    def __init__(self, config, store, logs, producer_states, journal):
        self.config, self.store, self.logs, self.producer_states = config, store, logs, producer_states
        self.journal, self.files = journal, logs.files
        self.map_capacity = int(config["log.cleaner.dedupe.buffer.size"] / 24
                                * config["log.cleaner.io.buffer.load.factor"])
        self.running = None                                  # (CleaningPass, its steps)
        self.last_runs = weakref.WeakKeyDictionary()         # log -> its last pass's journal event (gone with it)

    def schedule(self, timers):
        self.timers = timers
        timers.call_later(self.config["log.cleaner.backoff.ms"] / 1000, self._look)

    def now_ms(self):
        return int(self.config.clock() * 1000)

    def _look(self):
        found = self.filthiest() if self.config["log.cleaner.enable"] else None
        if found is None:
            self.timers.call_later(self.config["log.cleaner.backoff.ms"] / 1000, self._look)
            return
        cleaning = CleaningPass(self, *found, self.now_ms())
        self.running = (cleaning, cleaning.run(), time.perf_counter())
        self.timers.call_later(0, self._step)

    def _step(self):
        cleaning, steps, started = self.running
        until = time.perf_counter() + CLEANER_SLICE_S
        try:
            while time.perf_counter() < until:
                next(steps)
            self.timers.call_later(0, self._step)
            return
        except StopIteration as done:
            self.running = None
            self.finished(cleaning, done.value, time.perf_counter() - started)
            self.timers.call_later(0, self._look)             # as Kafka: look again at once
            return
        except (OSError, StoreFailed) as e:
            log.error("cleaning %s-%d failed (%s); it will be tried again", cleaning.plog.topic,
                      cleaning.plog.partition, e)
        except Exception as e:                                # a bug in doze: this pass is lost
            log.error("cleaning %s-%d failed: %s: a bug in doze", cleaning.plog.topic, cleaning.plog.partition,
                      where(e))
        self.running = None
        self.timers.call_later(self.config["log.cleaner.backoff.ms"] / 1000, self._look)

    def finished(self, cleaning, complete, took_s):
        """The pass's checkpoint (only a complete one moves it), and what it did, journaled."""
        plog = cleaning.plog
        if complete:
            self.store.save_cleaner_checkpoint(plog.topic, plog.partition, cleaning.end)
        event = self.journal.record("clean", topic=plog.topic, partition=plog.partition,
                                    dirty_section=[cleaning.first_dirty, cleaning.end], complete=complete,
                                    took_ms=round(took_s * 1000, 1), **cleaning.stats)
        self.last_runs[plog] = event
        log.info("cleaned log %s-%d (dirty section = [%d, %d]): %d bytes to %d, %d records removed, in %.1f ms",
                 plog.topic, plog.partition, cleaning.first_dirty, cleaning.end, cleaning.stats["bytes_before"],
                 cleaning.stats["bytes_after"], cleaning.stats["records_removed"], took_s * 1000)

    def filthiest(self):
        """-> (plog, first dirty, first uncleanable offset) of the compacted
        partition most worth cleaning (Kafka's LogCleanerManager), or None."""
        best, now = None, self.now_ms()
        for plog in list(self.logs.logs.values()):
            if plog.offline or "compact" not in plog.config("cleanup.policy"):
                continue
            first_dirty, upper, ratio, overdue = self.cleanable(plog, now)
            if upper > first_dirty and (ratio > plog.config("min.cleanable.dirty.ratio") or overdue) \
                    and (best is None or ratio > best[0]):
                best = (ratio, plog, first_dirty, upper)
        return best and best[1:]

    def cleanable(self, plog, now):
        """-> (first dirty offset, first uncleanable offset (a segment's base),
        the dirty ratio, is max.compaction.lag.ms overdue)."""
        first_dirty = self.store.cleaner_checkpoint(plog.topic, plog.partition)
        if first_dirty is None or not plog.log_start_offset <= first_dirty <= plog.next_offset:
            first_dirty = plog.log_start_offset
        lso = self.producer_states.last_stable_offset(plog)
        limit = min(lso, plog.active.base_offset)
        inactive = [s for s in plog.segments[:-1] if s.next_offset > first_dirty]
        lag = plog.config("min.compaction.lag.ms")
        young = next((s.base_offset for s in inactive if lag > 0 and s.largest_timestamp > now - lag), limit)
        upper = plog.segment_for(min(limit, young)).base_offset
        dirty = [s for s in inactive if s.base_offset < upper]
        clean_bytes = sum(s.size for s in plog.segments if s.base_offset < first_dirty)
        dirty_bytes = sum(s.size for s in dirty)
        ratio = dirty_bytes / (clean_bytes + dirty_bytes) if clean_bytes + dirty_bytes else 0.0
        first_ts = [s.max_timestamps[0] for s in dirty if s.bases and s.max_timestamps[0] > 0]
        overdue = bool(first_ts) and dirty_bytes > 0 and min(first_ts) < now - plog.config("max.compaction.lag.ms")
        return first_dirty, max(first_dirty, upper), ratio, overdue


###############################################################################
# 11. THE CONSUMER GROUP PROTOCOL -- KIP-848: the broker assigns; groups of both kinds
###############################################################################
# --- The consumer group protocol (KIP-848): the broker assigns ------------------
# A consumer-protocol group (Kafka 4.x's "consumer" group type) has no leader
# and no JoinGroup/SyncGroup rounds: each member heartbeats
# (ConsumerGroupHeartbeat) with its subscription, the coordinator computes a
# target assignment for the whole group with a server-side assignor (uniform
# or range) whenever the group epoch moves past the assignment epoch, and
# reconciles each member towards its target on the member's own heartbeats: a
# partition is given only once its previous owner has stopped reporting it
# (Kafka's CurrentAssignmentBuilder). Epochs: the group epoch counts changes
# of membership or subscribed metadata; the assignment epoch is the group
# epoch a target was computed at; a member's epoch is the assignment epoch it
# has reconciled to. Kafka's GroupMetadataManager, ConsumerGroup,
# TargetAssignmentBuilder and its assignors are the reference; where Kafka's
# answers follow java.util.HashMap's iteration order (the uniform assignor's
# member and topic order), doze follows it too (java_hash_order).

STABLE, UNREVOKED, UNRELEASED = 0, 1, 2
REGEX_MIN_REFRESH_MS = 10000                     # Kafka resolves a group's regexes at most this often          # MemberState: STABLE, UNREVOKED_PARTITIONS, UNRELEASED_PARTITIONS
CONSUMER_ASSIGNORS = ("uniform", "range")        # group.consumer.assignors' values doze has


class ConsumerGroupState(enum.Enum):
    """A consumer group's states, by the names ConsumerGroupDescribe and ListGroups use."""
    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"


def java_uuid_hash(topic_id):
    """Kafka's Uuid.hashCode: (int)(x >> 32) ^ (int) x, x = msb ^ lsb (as unsigned 32 bits)."""
    msb, lsb = struct.unpack(">QQ", topic_id)
    x = msb ^ lsb
    return ((x >> 32) ^ x) & 0xFFFFFFFF


def java_map_order(keys, hash_of, presized=False):
    """keys (in insertion order) in the order a java.util.HashMap or HashSet
    iterates them: by bucket of the spread hash, then insertion order (a
    map grown from 16 buckets, or presized for them: new HashSet<>(c))."""
    keys = list(dict.fromkeys(keys))
    capacity, n = 16, len(keys)
    while capacity < int(n / 0.75) + 1 if presized else n > capacity * 3 // 4:
        capacity *= 2
    return sorted(keys, key=lambda k: ((h := hash_of(k) & 0xFFFFFFFF) ^ (h >> 16)) & (capacity - 1))


def java_string_hash_u(text):
    return java_string_hash(text) & 0xFFFFFFFF


TIMELINE_MIX = 0x9E3779B97F4A7C15                # Kafka's BaseHashTable: -7046029254386353131L


def timeline_order(keys, table_len):
    """Member ids (in insertion order) in the order Kafka's TimelineHashMap
    (the group's members) iterates them: by slot -- the top bits of hashCode
    times the mixing constant -- and within a slot newest first (its chains
    are walked from their last entry; checked against Kafka 4.3.1's own class
    by conformance/kafka/member_order.py)."""
    bits = table_len.bit_length() - 1
    age = {k: i for i, k in enumerate(keys)}
    return sorted(age, key=lambda k: (((java_string_hash(k) * TIMELINE_MIX) & (2 ** 64 - 1)) >> (64 - bits),
                                      -age[k]))


class ConsumerMember:
    """One member of a consumer-protocol group (Kafka's ConsumerGroupMember)."""

    def __init__(self, member_id):
        self.member_id = member_id
        self.instance_id = None
        self.rack_id = None
        self.client_id = ""
        self.client_host = ""
        self.rebalance_timeout_ms = -1
        self.subscribed_names = []             # as the member sent them (a set in Kafka)
        self.regex = ""                        # "" : none
        self.server_assignor = None
        self.epoch = 0
        self.previous_epoch = -1
        self.state = STABLE
        self.assigned = {}                     # topic id -> {partition: the epoch it was assigned at}
        self.revoking = {}                     # partitions pending revocation, the same shape
        self.deadline_ms = None                # its session timeout
        self.revoke_by_ms = None               # its rebalance timeout while it must revoke
        self.revoke_epoch = None
        self.classic = None                    # a classic member's {"session_timeout_ms", "protocols": [[name, hex]]}
        self.rejoin_by_ms = None               # a classic member's JoinGroup or SyncGroup due by then

    def subscription(self):
        return (tuple(sorted(self.subscribed_names)), self.regex)

    def updated(self, req, client_id, client_host, member_id=None, epoch=None):
        """A copy with what a heartbeat sent (null fields keep their value), as
        Kafka's GroupMetadataManager builds the updated member."""
        m = ConsumerMember.from_json({**self.to_json(), **({"member_id": member_id, "epoch": epoch,
                                                            "previous_epoch": epoch} if member_id else {})})
        m.deadline_ms, m.revoke_by_ms, m.revoke_epoch = self.deadline_ms, self.revoke_by_ms, self.revoke_epoch
        m.rejoin_by_ms = self.rejoin_by_ms
        if req is None:
            return m
        m.instance_id = req.instance_id if req.instance_id is not None else self.instance_id
        m.rack_id = req.rack_id if req.rack_id is not None else self.rack_id
        if req.rebalance_timeout_ms != -1:
            m.rebalance_timeout_ms = req.rebalance_timeout_ms
        if req.server_assignor is not None:
            m.server_assignor = req.server_assignor
        if req.subscribed_topic_names is not None:
            m.subscribed_names = list(dict.fromkeys(req.subscribed_topic_names))
        if req.subscribed_topic_regex is not None:
            m.regex = req.subscribed_topic_regex
        m.client_id, m.client_host = client_id or "", f"/{client_host}"
        m.classic = None                      # a classic member heartbeating is a consumer member now
        return m

    @classmethod
    def from_classic(cls, cm, sub, assigned, epoch, now):
        """A classic group's member (GroupMember) as a consumer group's, stable at `epoch`."""
        m = cls(cm.member_id)
        m.instance_id, m.client_id, m.client_host = cm.instance_id, cm.client_id, cm.client_host
        m.rack_id, m.rebalance_timeout_ms = sub["rack_id"], cm.rebalance_timeout_ms
        m.subscribed_names = list(dict.fromkeys(sub["topics"]))
        m.epoch = m.previous_epoch = epoch
        m.assigned = {t: dict.fromkeys(ps, epoch) for t, ps in assigned.items()}
        m.classic = {"session_timeout_ms": cm.session_timeout_ms,
                     "protocols": [[n, bytes(d).hex()] for n, d in cm.protocols]}
        m.deadline_ms = now + cm.session_timeout_ms
        return m

    def joined_classic(self, req, subscription, client_id, client_host):
        """A copy as a classic JoinGroup makes it (Kafka's classicGroupJoinToConsumerGroup):
        the subscription from the embedded ConsumerProtocolSubscription."""
        m = self.updated(None, "", "")
        m.subscribed_names, m.regex = list(dict.fromkeys(subscription["topics"])), ""
        m.rack_id = subscription["rack_id"]
        m.rebalance_timeout_ms = req.rebalance_timeout_ms
        m.instance_id = req.group_instance_id
        m.client_id, m.client_host = client_id or "", f"/{client_host}"
        m.classic = {"session_timeout_ms": req.session_timeout_ms,
                     "protocols": [[p.name, bytes(p.metadata).hex()] for p in req.protocols]}
        return m

    def protocol_version(self):
        """A classic member's ConsumerProtocol version: its first protocol's, 0-3."""
        data = bytes.fromhex(self.classic["protocols"][0][1])
        return min(max(struct.unpack(">h", data[:2])[0], 0), 3) if len(data) >= 2 else 0

    def due(self, deadline_ms):
        """A classic member must come back (JoinGroup, SyncGroup) by then, or None: no longer."""
        self.rejoin_by_ms = deadline_ms

    def heard(self, now, session_ms, before):
        """After a heartbeat: its session timeout again; a rebalance timeout when
        it has just been asked to revoke (Kafka's), none when it need not."""
        self.deadline_ms = now + (self.classic["session_timeout_ms"] if self.classic else session_ms)
        if self.classic is not None or self.state != UNREVOKED:
            self.revoke_by_ms = None
        elif before != (self.epoch, self.state, self.assigned, self.revoking):
            self.revoke_by_ms, self.revoke_epoch = now + self.rebalance_timeout_ms, self.epoch

    def away(self):
        """A static member's leave with epoch -2: its partitions kept for it, at epoch 0."""
        self.epoch, self.revoking = -2, {}
        self.assigned = {t: dict.fromkeys(ps, 0) for t, ps in self.assigned.items()}

    def reconcile(self, g, target_epoch, target, owned, subscription_changed, subscribed):
        """Kafka's CurrentAssignmentBuilder: move towards the target; a partition
        another member still holds is withheld (UNRELEASED), and one the member
        must give up stays its own until it stops reporting it (UNREVOKED)."""
        if not subscription_changed and self.state == STABLE and self.epoch == target_epoch:
            return
        subscribed = set(subscribed)

        def owns(revoking):
            return owned is None or any(p in revoking.get(t, ()) for t, ps in owned.items() for p in ps)
        if self.state == STABLE and self.epoch == target_epoch or self.state == UNREVOKED and owns(self.revoking):
            if subscription_changed:
                self.shrink_to(subscribed, owns)
            return
        keep, revoke, pending, unreleased = {}, {}, {}, False
        for t in set(target) | set(self.assigned):
            wanted = target.get(t, set()) if t in subscribed else set()
            current = self.assigned.get(t, {})
            kept = {p: e for p, e in current.items() if p in wanted}
            gone = {p: e for p, e in current.items() if p not in kept}
            new = {p for p in wanted if p not in kept}
            held = {p for p in new if g.partition_epoch(t, p) != -1 and p not in self.revoking.get(t, {})}
            unreleased |= bool(held)
            for out, value in ((keep, kept), (revoke, gone)):
                if value:
                    out[t] = value
            if new - held:
                pending[t] = new - held
        if revoke and owns(revoke):
            self.previous_epoch, self.state, self.assigned, self.revoking = self.epoch, UNREVOKED, keep, revoke
            return
        for t, ps in pending.items():
            keep.setdefault(t, {}).update(dict.fromkeys(ps, target_epoch))
        self.previous_epoch, self.epoch = self.epoch, target_epoch
        self.state, self.assigned, self.revoking = UNRELEASED if unreleased else STABLE, keep, {}

    def shrink_to(self, subscribed, owns):
        """CurrentAssignmentBuilder.updateCurrentAssignment: topics no longer subscribed go to revocation."""
        if not subscribed and not self.revoking:
            moved, kept = dict(self.assigned), {}
        else:
            moved = {t: ps for t, ps in self.assigned.items() if t not in subscribed}
            kept = {t: ps for t, ps in self.assigned.items() if t in subscribed}
        if not moved:
            return
        revoking = {t: dict(ps) for t, ps in self.revoking.items()}
        for t, ps in moved.items():
            revoking.setdefault(t, {}).update(ps)
        self.previous_epoch = self.epoch
        if revoking and owns(revoking):
            self.state, self.assigned, self.revoking = UNREVOKED, kept, revoking
        else:
            self.assigned = kept

    def to_json(self):
        return {"member_id": self.member_id, "instance_id": self.instance_id, "rack_id": self.rack_id,
                "client_id": self.client_id, "client_host": self.client_host,
                "rebalance_timeout_ms": self.rebalance_timeout_ms, "subscribed_names": self.subscribed_names,
                "regex": self.regex, "server_assignor": self.server_assignor, "epoch": self.epoch,
                "previous_epoch": self.previous_epoch, "state": self.state, "classic": self.classic,
                "assigned": partition_map_json(self.assigned), "revoking": partition_map_json(self.revoking)}

    @classmethod
    def from_json(cls, d):
        m = cls(d["member_id"])
        for name in ("instance_id", "rack_id", "client_id", "client_host", "rebalance_timeout_ms",
                     "subscribed_names", "regex", "server_assignor", "epoch", "previous_epoch", "state"):
            setattr(m, name, d[name])
        m.classic = d.get("classic")
        m.assigned, m.revoking = partition_map_from_json(d["assigned"]), partition_map_from_json(d["revoking"])
        return m


def partition_map_json(m):
    return {t.hex(): {str(p): e for p, e in parts.items()} for t, parts in m.items()}


def partition_map_from_json(d):
    return {bytes.fromhex(t): {int(p): e for p, e in parts.items()} for t, parts in d.items()}


class ConsumerGroup:
    """A consumer-protocol group: members, epochs, the target assignment, and
    committed offsets (the same registry and offsets as a classic Group)."""
    kind = "consumer"
    protocol_type = "consumer"
    leader = ""

    def __init__(self, group_id):
        self.group_id = group_id
        self.group_epoch = 1                   # Kafka starts both at 1
        self.assignment_epoch = 1
        self.assignment_ms = 0                 # when the target was last computed
        self.members = {}                      # member id -> ConsumerMember, in Kafka's member order
        self.table_len = 2                     # TimelineHashMap's table size (it grows, never shrinks)
        self.static = {}                       # instance id -> member id
        self.target = {}                       # member id -> {topic id: set of partitions}
        self.metadata = None                   # the subscribed topics' ids and partition counts last seen
        self.offsets = {}                      # (topic, partition) -> OffsetEntry
        self.empty_since_ms = None
        self.resolved = {}                     # regex -> {"topics": [names], "at_ms", "seen": [every topic then]}
        self.resolving = False                 # a resolution is due (the loop's next pass)

    @property
    def state(self):
        if not self.members:
            return ConsumerGroupState.EMPTY
        if self.group_epoch > self.assignment_epoch:
            return ConsumerGroupState.ASSIGNING
        if any(m.state != STABLE or m.epoch != self.assignment_epoch for m in self.members.values()):
            return ConsumerGroupState.RECONCILING
        return ConsumerGroupState.STABLE

    @property
    def generation(self):
        return self.group_epoch

    @property
    def protocol_name(self):
        return self.assignor()

    def assignor(self, default="uniform", member=None):
        """The server assignor most members name (Kafka: ties to the first in its map), else the default;
        `member`, a heartbeating member as it is now, counted instead of its stored self."""
        members = {**self.members, **({member.member_id: member} if member is not None else {})}
        votes = collections.Counter(m.server_assignor for m in members.values() if m.server_assignor)
        if not votes:
            return default
        top = max(votes.values())
        return next(a for a in java_map_order(votes, java_string_hash_u) if votes[a] == top)

    def put(self, m):
        """Add or replace a member, as Kafka's TimelineHashMap grows."""
        if (len(self.members) + 1) * 0.75 > self.table_len:
            self.table_len *= 2
        self.members[m.member_id] = m
        self.empty_since_ms = None
        if m.instance_id:
            self.static[m.instance_id] = m.member_id

    def bump(self):
        """The group epoch moves: membership or the subscribed topics changed."""
        self.group_epoch += 1

    def regexes(self, but=None):
        """The regular expressions its members subscribe with (but one member's)."""
        return {m.regex for m in self.members.values() if m.regex and m.member_id != but}

    def topic_names(self, m):
        """A member's topics by name: those it names and those its regex resolved to."""
        return list(m.subscribed_names) + [t for t in self.resolved.get(m.regex, {}).get("topics", ())
                                           if t not in m.subscribed_names]

    def resolve(self, patterns, topics, now):
        """Kafka's handleRegularExpressionsResult: each regex's topics now;
        -> whether any changed. A regex nobody subscribes with is forgotten."""
        changed = False
        for regex in list(self.resolved):
            if regex not in patterns:
                del self.resolved[regex]
        for regex, pattern in patterns.items():
            found = sorted(t for t in topics if pattern.fullmatch(t))
            changed |= self.resolved.get(regex, {}).get("topics") != found
            self.resolved[regex] = {"topics": found, "at_ms": now, "seen": sorted(topics)}
        self.resolving = False
        return changed

    def resolution_due(self, now, topics, refresh_ms):
        """Kafka's maybeUpdateRegularExpressions: a resolution at most every 10 s,
        when a regex is new or unresolved, a topic was made since, or the refresh interval passed."""
        regexes = self.regexes()
        if not regexes or self.resolving:
            return False
        last = next((r["at_ms"] for r in self.resolved.values()), None)
        if last is not None and now <= last + REGEX_MIN_REFRESH_MS:
            return False
        made = any(set(topics) - set(r["seen"]) for r in self.resolved.values())
        due = set(self.resolved) != regexes or made or last is None or now > last + refresh_ms
        self.resolving = due
        return due

    def seen(self, fingerprint):
        """The subscribed topics as they are now -> whether they changed since last seen."""
        changed, self.metadata = self.metadata is not None and fingerprint != self.metadata, fingerprint
        return changed

    def assigned_to(self, target, now):
        """A new target assignment, at the group epoch."""
        self.target, self.assignment_epoch, self.assignment_ms = target, self.group_epoch, now

    def replace(self, old_id, new_id):
        """A static member's new id takes its predecessor's place and target."""
        inherited = self.target.get(old_id, {})
        self.remove(old_id)
        self.target[new_id] = inherited

    def fence(self, member_ids, now):
        """Members gone (left, timed out): removed, the group epoch raised."""
        for member_id in member_ids:
            self.remove(member_id)
        self.bump()
        self.empty_since_ms = None if self.members else now

    def remove(self, member_id):
        m = self.members.pop(member_id)
        if m.instance_id and self.static.get(m.instance_id) == member_id:
            del self.static[m.instance_id]
        self.target.pop(member_id, None)

    def ordered(self):
        """The members in Kafka's order (its TimelineHashMap's)."""
        return [self.members[k] for k in timeline_order(self.members, self.table_len)]

    def check_commit(self, member_id, epoch, tps, transactional, version):
        """Kafka's ConsumerGroup.validateOffsetCommit (and its transactional
        twin): a commit by no member only while the group is empty; a member's
        at its own epoch, or (KIP-1251) an older one, no older than each
        partition's assignment. tps: [(topic id, topic, partition)]."""
        if epoch < 0 and not self.members or transactional and epoch == -1 and not member_id:
            return
        m = self.members.get(member_id)
        if m is None:
            raise KafkaError(ErrorCode.UNKNOWN_MEMBER_ID, f"Member {member_id} is not a member of group "
                             f"{self.group_id}.")
        if not transactional and version < 9 and m.classic is None:
            raise KafkaError(ErrorCode.UNSUPPORTED_VERSION, "OffsetCommit version 9 or above must be used by "
                             "members using the consumer group protocol")
        stale = ErrorCode.ILLEGAL_GENERATION if transactional or m.classic else ErrorCode.STALE_MEMBER_EPOCH
        if epoch > m.epoch:
            raise KafkaError(stale, f"Received member epoch {epoch} is newer than current member epoch {m.epoch}.")
        for topic_id, topic, p in tps if epoch < m.epoch else ():
            assigned = m.assigned.get(topic_id, {}).get(p, m.revoking.get(topic_id, {}).get(p))
            if assigned is None:
                raise KafkaError(stale, f"Partition {topic}-{p} is not assigned or pending revocation for member.")
            if epoch < assigned:
                raise KafkaError(stale, f"Received member epoch {epoch} is older than assignment epoch "
                                 f"{assigned} for partition {topic}-{p}.")

    def check_fetch(self, member_id, epoch):
        """OffsetFetch v9's check: the member's exact epoch."""
        if member_id is None and epoch < 0:
            return
        m = self.members.get(member_id)
        if m is None:
            raise KafkaError(ErrorCode.UNKNOWN_MEMBER_ID, f"Member {member_id} is not a member of group "
                             f"{self.group_id}.")
        if epoch != m.epoch:
            raise KafkaError(ErrorCode.ILLEGAL_GENERATION if m.classic else ErrorCode.STALE_MEMBER_EPOCH,
                             f"The received member epoch {epoch} does not match the expected member epoch "
                             f"{m.epoch}.")

    def partition_epoch(self, topic_id, partition):
        """The epoch of the member owning the partition (assigned or revoking), or -1."""
        for m in self.members.values():
            for held in (m.assigned, m.revoking):
                if partition in held.get(topic_id, ()):
                    return m.epoch
        return -1

    def to_json(self):
        return {"type": "consumer", "group_epoch": self.group_epoch, "assignment_epoch": self.assignment_epoch,
                "resolved": self.resolved,
                "assignment_ms": self.assignment_ms, "table_len": self.table_len,
                "members": [m.to_json() for m in self.members.values()],
                "target": {mid: {t.hex(): sorted(ps) for t, ps in a.items()} for mid, a in self.target.items()},
                "empty_since_ms": self.empty_since_ms}

    @classmethod
    def from_classic(cls, classic, topic_ids, now):
        """Kafka's ConsumerGroup.fromClassicGroup: epochs at the classic
        generation, each member stable with its subscription and its assignment
        (a ValueError names what cannot be converted)."""
        g = cls(classic.group_id)
        g.group_epoch = g.assignment_epoch = classic.generation
        for cm in classic.members.values():
            try:
                sub = read_subscription(cm.metadata(classic.protocol_name))
                rows, user_data = read_assignment(cm.assignment) if cm.assignment else ([], None)   # none yet: empty
            except ProtocolError:
                raise ValueError("the embedded consumer protocol is malformed") from None
            if user_data:
                raise ValueError("an unsupported custom assignor is in use. Please refer to the documentation "
                                 "or switch to a default assignor before re-attempting the upgrade")
            m = ConsumerMember.from_classic(cm, sub, {topic_ids[t]: ps for t, ps in rows if t in topic_ids},
                                            classic.generation, now)
            g.put(m)
            g.target[m.member_id] = {t: set(ps) for t, ps in m.assigned.items()}
        g.offsets = classic.offsets
        return g

    def restarted(self, deadline_ms):
        """After a restart: every member's session timer starts again (Kafka's onLoaded)."""
        for m in self.members.values():
            m.deadline_ms = deadline_ms

    @classmethod
    def from_json(cls, group_id, row, offsets=None):
        g = cls(group_id)
        g.offsets = offsets or {}
        g.group_epoch, g.assignment_epoch = row["group_epoch"], row["assignment_epoch"]
        g.assignment_ms, g.empty_since_ms = row["assignment_ms"], row["empty_since_ms"]
        g.resolved = row.get("resolved", {})
        for d in row["members"]:
            g.put(ConsumerMember.from_json(d))
        g.table_len = max(g.table_len, row["table_len"])
        g.target = {mid: {bytes.fromhex(t): set(ps) for t, ps in a.items()} for mid, a in row["target"].items()}
        return g


# --- The embedded consumer protocol: what a classic consumer puts in JoinGroup
# and SyncGroup (ConsumerProtocolSubscription and ConsumerProtocolAssignment,
# versions 0-3, not flexible), read and written when a classic member meets a
# consumer group.

def read_subscription(data):
    """ConsumerProtocolSubscription -> {version, topics, user_data, owned {topic: [p]}, rack_id};
    ProtocolError when the bytes are not one."""
    r = Reader(data)
    version = r.fixed(I16)
    sub = {"version": version, "topics": [_read_string(r, False, False) for _ in range(r.length(False, I32))],
           "user_data": _read_bytes(r, False), "owned": {}, "rack_id": None}
    if version >= 1:
        for _ in range(r.length(False, I32)):
            topic = _read_string(r, False, False)
            sub["owned"][topic] = [r.fixed(I32) for _ in range(r.length(False, I32))]
    if version >= 2:
        r.fixed(I32)                                # generation_id
    if version >= 3:
        sub["rack_id"] = _read_string(r, False)
    return sub


def read_assignment(data):
    """ConsumerProtocolAssignment -> ([(topic, [partitions])], user_data); ProtocolError when not one."""
    r = Reader(data)
    r.fixed(I16)
    rows = []
    for _ in range(r.length(False, I32)):
        topic = _read_string(r, False, False)
        rows.append((topic, [r.fixed(I32) for _ in range(r.length(False, I32))]))
    return rows, _read_bytes(r, False)


def consumer_assignment(data):
    """A consumer member's assignment (ConsumerProtocolAssignment) as
    [{"topic", "partitions"}]; None when the bytes are not that (another
    protocol type, or nothing yet)."""
    try:
        return [{"topic": t, "partitions": ps} for t, ps in read_assignment(data)[0]]
    except (ProtocolError, ValueError):
        return None


def assignment_bytes(version, rows):
    """[(topic, [partitions])] as ConsumerProtocolAssignment of `version`, no user data."""
    out = [I16.pack(version), I32.pack(len(rows))]
    for topic, parts in rows:
        name = topic.encode()
        out += [I16.pack(len(name)), name, I32.pack(len(parts))] + [I32.pack(p) for p in parts]
    return b"".join(out + [I32.pack(-1)])


# --- The server-side assignors (Kafka's UniformAssignor and RangeAssignor) ------
# Each takes the members (in Kafka's HashMap order), each member's subscribed
# topic ids and previous target, and the topics' partition counts, and gives
# every member its new target {topic id: set of partitions}.

def uniform_assign(members, subscriptions, previous, partitions):
    """Kafka's UniformAssignor: sticky and balanced (sizes differ by one at most)."""
    if len({frozenset(subscriptions[m]) for m in members}) <= 1:
        return uniform_homogeneous(members, subscriptions, previous, partitions)
    return uniform_heterogeneous(members, subscriptions, previous, partitions)


def uniform_homogeneous(members, subscriptions, previous, partitions):
    """UniformHomogeneousAssignmentBuilder: each member keeps up to its quota of
    what it had; the rest is dealt out in member order."""
    topics = java_map_order(subscriptions[members[0]], java_uuid_hash, presized=True)
    if not topics:
        return {m: {} for m in members}
    taken = {(t, p) for a in previous.values() for t, ps in a.items() for p in ps}
    unassigned = [(t, p) for t in topics for p in range(partitions[t]) if (t, p) not in taken]
    total = sum(partitions[t] for t in topics)
    minimum, extra = divmod(total, len(members))
    unfilled, target = [], {}
    for index, m in enumerate(members):
        old = previous.get(m, {})
        new = {t: set(ps) for t, ps in old.items()}
        quota, has_extra = minimum, False
        if extra > 0:
            quota, has_extra = quota + 1, True
        for t in java_map_order(old, java_uuid_hash):
            if t not in subscriptions[m]:
                del new[t]
            elif len(old[t]) <= quota:
                quota -= len(old[t])
            else:
                for p in java_map_order(old[t], int, presized=True):
                    if quota > 0:
                        quota -= 1
                    else:
                        new[t].discard(p)
                        unassigned.append((t, p))
                if not new[t]:
                    del new[t]
        if quota > 0 and has_extra and len(members) - index > extra:
            quota, has_extra = quota - 1, False
        if quota > 0:
            unfilled.append((m, quota))
        if has_extra:
            extra -= 1
        target[m] = new
    dealt = iter(unassigned)
    for m, quota in unfilled:
        for t, p in itertools.islice(dealt, quota):
            target[m].setdefault(t, set()).add(p)
    return target


def uniform_heterogeneous(members, subscriptions, previous, partitions):
    """UniformHeterogeneousAssignmentBuilder: keep what is still subscribed,
    give the rest topic by topic to the least loaded subscribers, then move
    partitions from the most to the least loaded until balanced."""
    subscribers = collections.defaultdict(list)
    for i, m in enumerate(members):
        for t in subscriptions[m]:
            subscribers[t].append(i)
    if not subscribers:
        return {m: {} for m in members}
    size, owner = [0] * len(members), {t: [-1] * partitions[t] for t in subscribers}
    target = {}
    for i, m in enumerate(members):
        target[m] = {t: set(ps) for t, ps in previous.get(m, {}).items() if t in subscriptions[m]}
        for t, ps in target[m].items():
            size[i] += len(ps)
            for p in ps:
                owner[t][p] = i

    def ratio_key(t):
        msb, lsb = struct.unpack(">qq", t)
        return (-partitions[t] / len(subscribers[t]), len(subscribers[t]), msb, lsb)

    def assign(t, p, i):
        if owner[t][p] != -1:
            old = owner[t][p]
            target[members[old]][t].discard(p)
            if not target[members[old]][t]:
                del target[members[old]][t]
            size[old] -= 1
        target[members[i]].setdefault(t, set()).add(p)
        owner[t][p] = i
        size[i] += 1
    balancer = LoadBalancer(size)
    for t in sorted(subscribers, key=ratio_key):
        free = [p for p in range(partitions[t]) if owner[t][p] == -1]
        if free:
            balancer.initialize(subscribers[t])
            for p in free:
                assign(t, p, balancer.next_least_loaded())
    shared = sorted((t for t in subscribers if len(subscribers[t]) >= 2), key=ratio_key)
    last = -1
    for _ in range(16):                                     # Kafka's MAX_ITERATION_COUNT
        for k, t in enumerate(shared):
            if k == last:
                return target
            if balance_topic(t, partitions[t], subscribers[t], owner, balancer, assign) > 0 or last == -1:
                last = k
    return target


def balance_topic(t, count, subscribers, owner, balancer, assign):
    """Move partitions of one topic from its most to its least loaded subscribers -> how many moved."""
    if balancer.initialize(subscribers) <= 1:
        return 0
    parts = sorted(range(count), key=lambda p: (owner[t][p], p))
    start, end = {}, {}
    for k, p in enumerate(parts):
        start.setdefault(owner[t][p], k)
        end[owner[t][p]] = k + 1
    moved = 0
    while not balancer.is_balanced():
        while True:
            m = balancer.next_most_loaded()
            if m == -1:
                return moved
            if end.get(m, 0) - start.get(m, 0) <= 0:
                balancer.exclude_most_loaded()
                continue
            break
        end[m] -= 1
        p = parts[end[m]]
        least = balancer.next_least_loaded()
        if balancer.is_balanced():
            break
        assign(t, p, least)
        moved += 1
    return moved


class LoadBalancer:
    """Kafka's MemberAssignmentBalancer: members of one topic, least and most
    loaded first, as partitions move between them."""

    def __init__(self, size):
        self.size = size

    def initialize(self, members):
        s = self.size
        self.sorted = sorted(members, key=lambda i: (s[i], i))
        self.ll_end, self.ll_count, self.next_ll = 0, s[self.sorted[0]] - 1, 0
        n = len(self.sorted)
        self.ml_start = self.ml_end = n
        self.ml_count, self.next_ml = s[self.sorted[-1]] + 1, n - 1
        return s[self.sorted[-1]] - s[self.sorted[0]]

    def next_least_loaded(self):
        if self.next_ll >= self.ll_end:
            self.ll_count += 1
            while self.ll_end < len(self.sorted) and self.size[self.sorted[self.ll_end]] == self.ll_count:
                self.ll_end += 1
            self.next_ll = 0
        i = self.sorted[self.next_ll]
        self.next_ll += 1
        return i

    def next_most_loaded(self):
        if self.next_ml < self.ml_start:
            if self.ml_end <= self.ml_start and self.ml_start > 0:
                self.ml_count = self.size[self.sorted[self.ml_start - 1]]
            else:
                self.ml_count -= 1
            while self.ml_start > 0 and self.size[self.sorted[self.ml_start - 1]] == self.ml_count:
                self.ml_start -= 1
            self.next_ml = self.ml_end - 1
        if self.next_ml < 0:
            return -1
        i = self.sorted[self.next_ml]
        self.next_ml -= 1
        return i

    def exclude_most_loaded(self):
        a, b = self.next_ml + 1, self.ml_end - 1
        self.sorted[a], self.sorted[b] = self.sorted[b], self.sorted[a]
        self.ml_end -= 1

    def is_balanced(self):
        return self.ml_count - self.ll_count <= 1


def range_assign(members, subscriptions, previous, partitions, instance_ids):
    """Kafka's server-side RangeAssignor: members sorted (static ones first, by
    instance id, then by member id), each topic cut into contiguous ranges."""
    ordered = sorted(members, key=lambda m: (instance_ids.get(m) is None, instance_ids.get(m) or m))
    counts = collections.Counter(t for m in members for t in subscriptions[m])
    quotas = {t: list(divmod(partitions[t], n)) for t, n in counts.items()}
    next_range = dict.fromkeys(counts, 0)
    target = {}
    for m in ordered:
        target[m] = {}
        for t in subscriptions[m]:
            quota = quotas[t][0]
            if quotas[t][1] > 0:
                quota, quotas[t][1] = quota + 1, quotas[t][1] - 1
            end = min(next_range[t] + quota, partitions[t])
            if next_range[t] < end:
                target[m][t] = set(range(next_range[t], end))
            next_range[t] = end
    return target


# --- ConsumerGroups: the protocol's steps -----------------------------------------
# One heartbeat, as Kafka's GroupMetadataManager.consumerGroupHeartbeat: the
# member updated from what it sent (null fields keep what it had); the group
# epoch raised when subscriptions or the subscribed topics changed; a new
# target computed when the group epoch is ahead of the assignment epoch (at
# most once every group.consumer.assignment.interval.ms: a heartbeat after
# that computes it); the member reconciled towards its target; the answer.
# Every change is stored in meta.db before the answer (its group commit).

RE2_REFUSES = re.compile(r"\(\?[=!]|\(\?<[=!]|\(\?>|\(\?P=|\\[1-9]|[*+?}][+]")
RE2_WORDS = {"unterminated character set": "missing closing ]",
             "missing ), unterminated subpattern": "missing closing )",
             "unbalanced parenthesis": "unexpected )",
             "nothing to repeat": "missing argument to repetition operator"}


def re2_compile(regex):
    """A subscription's regular expression, as Kafka compiles it (RE2J), or
    INVALID_REGULAR_EXPRESSION with RE2J's words for the common mistakes.
    Python's re stands in: what RE2 refuses and re takes (lookaround,
    backreferences, atomic groups, possessive repeats) is refused first; RE2's
    \\p{...} classes, which re lacks, are refused too (a difference)."""
    refused = RE2_REFUSES.search(regex)
    try:
        if refused:
            raise re.error(f"invalid or unsupported Perl syntax: `{refused.group(0)}`")
        return re.compile(regex)
    except re.error as e:
        words = str(e.msg if hasattr(e, "msg") else e)
        raise KafkaError(ErrorCode.INVALID_REGULAR_EXPRESSION, f"SubscribedTopicRegex `{regex}` is not a valid "
                         f"regular expression: {RE2_WORDS.get(words, words)}.") from None


class ConsumerGroups:
    """KIP-848's consumer groups: heartbeats, leaves, the target assignment,
    reconciliation, session and rebalance timeouts. Shares the group registry
    and the offsets with the GroupCoordinator."""

    def __init__(self, config, coordinator, logs, journal=None):
        self.config, self.coordinator, self.logs = config, coordinator, logs
        self.clock = config.clock
        self.journal = journal or Journal(config.clock)   # new epochs and reconciliations, for the console and trace
        self._load()

    def _load(self):
        """The consumer groups meta.db holds, into the coordinator's registry; session timers start again."""
        now = self.now_ms()
        for group_id, row, offsets in self.coordinator.consumer_rows:       # read with the classic ones
            g = ConsumerGroup.from_json(group_id, row, offsets)
            g.restarted(now + self.config["group.consumer.session.timeout.ms"])
            self.coordinator.register(g)
        self.coordinator.consumer_rows.clear()

    def now_ms(self):
        return int(self.clock() * 1000)

    def setting(self, group_id, name):
        """A group's consumer.* config (IncrementalAlterConfigs on the group), else the broker's group.consumer.*."""
        text = self.coordinator.configs.get(group_id, {}).get(name)
        return int(text) if text is not None else self.config["group." + name]

    def _save(self, g, epochs=None, old=None, m=None):
        """Store the group; journal what moved since `epochs` (the group's
        epochs then) and `old` (the member as it was): a "group" event for a
        new epoch, a "member" event for a reconciliation step."""
        with coordinator_store():
            self.coordinator.store.save_group(g.group_id, g.to_json())
        if epochs is not None and epochs != (g.group_epoch, g.assignment_epoch):
            self.journal.record("group", group_id=g.group_id, generation=g.group_epoch, state=g.state.value,
                                members=len(g.members), protocol=g.assignor(), leader=None,
                                assignment_epoch=g.assignment_epoch)
        if m is not None and (old.epoch, old.state, old.assigned, old.revoking) != \
                (m.epoch, m.state, m.assigned, m.revoking):
            names = {t.topic_id: n for n, t in self.logs.topics.items()}
            self.journal.record("member", group_id=g.group_id, member_id=m.member_id, epoch=m.epoch,
                                state=("stable", "unrevoked", "unreleased")[m.state],
                                assigned=partition_names(m.assigned, names), revoking=partition_names(m.revoking, names))

    # --- ConsumerGroupHeartbeat ---
    def heartbeat(self, req, version, client_id, client_host):
        """-> the answer (a Msg) to a heartbeat that passed check_heartbeat."""
        if req.member_epoch in (-1, -2):
            return self.leave(req)
        now = self.now_ms()
        g = self._group_for(req.group_id, req.member_epoch)
        if req.member_id not in g.members and len(g.members) >= self.config["group.consumer.max.size"]:
            raise KafkaError(ErrorCode.GROUP_MAX_SIZE_REACHED, f"The consumer group has reached its maximum "
                             f"capacity of {self.config['group.consumer.max.size']} members.")
        old, replaced = self._member_for(g, req.member_id or kafka_uuid(uuid.uuid4().bytes), req)
        m = old.updated(req, client_id, client_host)
        regex = self._regex_change(g, old, m)
        if replaced is not None:
            g.replace(replaced.member_id, m.member_id)
        owned = None if req.topic_partitions is None else {t.topic_id: set(t.partitions) for t in req.topic_partitions}
        self._save(g, self._reconciled(g, old, m, owned, regex == "resolved"), old, m)
        if g.resolution_due(now, list(self.logs.topics), self.config["group.consumer.regex.refresh.interval.ms"]):
            self.timers.call_later(0, self._resolve, g)     # Kafka resolves in the background
        full = req.rebalance_timeout_ms != -1 and req.topic_partitions is not None and (
            req.subscribed_topic_names is not None or req.subscribed_topic_regex is not None)
        return Msg(member_id=m.member_id, member_epoch=m.epoch,
                   heartbeat_interval_ms=self.setting(g.group_id, "consumer.heartbeat.interval.ms"),
                   assignment=Msg(topic_partitions=assignment_rows(m.assigned))
                   if req.member_epoch == 0 or full or old.assigned != m.assigned else None)

    def _group_for(self, group_id, epoch):
        """The consumer group heartbeats go to: made on a first join (an empty
        classic group gives way, its offsets kept), else GROUP_ID_NOT_FOUND."""
        g = self.coordinator.groups.get(group_id)
        if g is None or epoch == 0 and g.kind == "classic" and not g.members:
            if g is None and epoch != 0:
                raise KafkaError(ErrorCode.GROUP_ID_NOT_FOUND, f"Consumer group {group_id} not found.")
            fresh = ConsumerGroup(group_id)
            self.coordinator.register(fresh)       # the offsets committed so far come with the id
            return fresh
        if g.kind == "classic" and epoch == 0:
            return self._upgrade(g)
        if g.kind != "consumer":
            raise KafkaError(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a consumer group.")
        return g

    def _policy(self, way):
        """Does group.consumer.migration.policy allow this way (upgrade, downgrade)?"""
        return self.config["group.consumer.migration.policy"].lower() in (way, "bidirectional")

    def _upgrade(self, classic):
        """A classic group with members meets its first consumer-protocol member
        (Kafka's validateOnlineUpgrade, convertToConsumerGroup)."""
        why = None
        if not self._policy("upgrade"):
            why = "online upgrade is disabled"
        elif classic.protocol_type != "consumer":
            why = "the group does not use the consumer embedded protocol"
        elif len(classic.members) > self.config["group.consumer.max.size"]:
            why = "the group size exceeds the consumer group maximum size"
        else:
            try:
                g = ConsumerGroup.from_classic(classic, {n: t.topic_id for n, t in self.logs.topics.items()},
                                               self.now_ms())
            except ValueError as e:
                why = str(e)
        if why:
            log.warning("cannot upgrade classic group %s to a consumer group: %s", classic.group_id, why)
            raise KafkaError(ErrorCode.GROUP_ID_NOT_FOUND, f"Cannot upgrade classic group {classic.group_id} to "
                             f"consumer group because {why}.")
        for m in classic.members.values():             # its parked JoinGroup and SyncGroup give up
            m.interrupted()
        self.coordinator.register(g)
        self.coordinator.notify(("group", g.group_id))
        return g

    def _member_for(self, g, member_id, req):
        """-> (the member as it was, the static member it replaces or None), or Kafka's error."""
        if req.instance_id is None:
            m = g.members.get(member_id)
            if m is None:
                if req.member_epoch != 0:
                    raise KafkaError(ErrorCode.UNKNOWN_MEMBER_ID,
                                     f"Member {member_id} is not a member of group {g.group_id}.")
                return ConsumerMember(member_id), None
            check_member_epoch(m, req)
            return m, None
        holder = g.static.get(req.instance_id)
        if req.member_epoch == 0:
            if holder is None:
                return ConsumerMember(member_id), None
            old = g.members[holder]
            if old.epoch != -2:
                raise KafkaError(ErrorCode.UNRELEASED_INSTANCE_ID,
                                 f"Static member {member_id} with instance id {req.instance_id} cannot join the "
                                 f"group because the instance id is owned by {holder} member.")
            return old.updated(None, "", "", member_id=member_id, epoch=0), old
        if holder is None:
            raise KafkaError(ErrorCode.UNKNOWN_MEMBER_ID, f"Instance id {req.instance_id} is unknown.")
        if holder != member_id:
            raise KafkaError(ErrorCode.FENCED_INSTANCE_ID, f"Static member {member_id} with instance id "
                             f"{req.instance_id} was fenced by member {holder}.")
        m = g.members[holder]
        check_member_epoch(m, req)
        return m, None

    def subscribed_ids(self, g, m):
        """The ids of the topics the member subscribes to that exist, in the
        order Kafka's TopicIds gives them: its names and its regex's topics
        (HashSets; both: the larger first, then the other's others)."""
        names = java_map_order(m.subscribed_names, java_string_hash_u, presized=True)
        found = java_map_order(g.resolved.get(m.regex, {}).get("topics", ()), java_string_hash_u, presized=True)
        larger, smaller = (names, found) if len(names) >= len(found) else (found, names)
        topics = self.logs.topics
        return [topics[n].topic_id for n in larger + [t for t in smaller if t not in larger] if n in topics]

    def _fingerprint(self, g, m=None):
        """The subscribed topics' names, ids and partition counts (Kafka's
        metadata hash): a topic made, deleted or grown changes it."""
        members = [x for x in g.members.values() if m is None or x.member_id != m.member_id] + ([m] if m else [])
        names = {n for x in members for n in g.topic_names(x)}
        topics = self.logs.topics
        return sorted((n, topics[n].topic_id, topics[n].partitions) for n in names if n in topics)

    def _regex_change(self, g, old, m):
        """Kafka's maybeUpdateRegularExpressions -> None (no change), "updated"
        (a regex new to the group: resolved in the background, no new epoch
        yet) or "resolved" (one the group has resolved already, or none now)."""
        if m.regex == old.regex:
            return None
        if old.regex and old.regex not in g.regexes(but=m.member_id):
            g.resolved.pop(old.regex, None)            # its last subscriber went
        if m.regex and m.regex not in g.regexes(but=m.member_id):
            re2_compile(m.regex)
            return "updated"
        return "resolved" if not m.regex or m.regex in g.resolved else "updated"

    def _resolve(self, g):
        """The background resolution's result (Kafka's handleRegularExpressionsResult):
        each regex's topics; a new group epoch when they, or the topics' metadata, changed."""
        if self.coordinator.groups.get(g.group_id) is not g:
            return                                     # the group went meanwhile
        patterns = {regex: re2_compile(regex) for regex in g.regexes()}
        changed = g.resolve(patterns, list(self.logs.topics), self.now_ms())
        if g.seen(self._fingerprint(g)) or changed:
            g.bump()
        with contextlib.suppress(KafkaError):          # meta.db refused: resolved again on a next heartbeat
            self._save(g)

    def _maybe_assign(self, g, m, now):
        """A new target assignment when the group epoch is ahead (Kafka's
        TargetAssignmentBuilder), at most once an assignment interval."""
        interval = self.setting(g.group_id, "consumer.assignment.interval.ms")
        if g.assignment_epoch >= g.group_epoch or interval and g.assignment_ms and now < g.assignment_ms + interval:
            return
        specs = dict((x.member_id, x) for x in g.ordered())
        specs[m.member_id] = m
        order = java_map_order(specs, java_string_hash_u)
        subscriptions = {mid: self.subscribed_ids(g, x) for mid, x in specs.items()}
        partitions = {t.topic_id: t.partitions for t in self.logs.topics.values()}
        if g.assignor(self.config["group.consumer.assignors"][0], m) == "range":
            ids = {mid: x.instance_id for mid, x in specs.items() if x.instance_id}
            g.assigned_to(range_assign(order, subscriptions, g.target, partitions, ids), now)
        else:
            g.assigned_to(uniform_assign(order, subscriptions, g.target, partitions), now)

    # --- classic members in a consumer group (Kafka's classicGroup*ToConsumerGroup) ---
    def classic_join(self, g, req, version, client_id, client_host):
        """JoinGroup into a consumer group -> the answer: the member reconciled as
        any other, its generation its member epoch, no leader (it follows)."""
        if not self._policy("upgrade") and not self._policy("downgrade"):
            raise KafkaError(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, f"Cannot join the consumer group "
                             f"{g.group_id} with the classic protocol because the group migration is disabled.")
        member_id = req.member_id or kafka_uuid(uuid.uuid4().bytes)
        if member_id not in g.members and len(g.members) >= self.config["group.consumer.max.size"]:
            raise KafkaError(ErrorCode.GROUP_MAX_SIZE_REACHED)
        names = [p.name for p in req.protocols]
        common = [{n for n, _ in m.classic["protocols"]} for m in g.members.values() if m.classic]
        if req.protocol_type != "consumer" or not names or not all(set(names) & c for c in common):
            raise KafkaError(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, f"Member {member_id}'s protocols are not supported.")
        if version >= 4 and not req.member_id and not req.group_instance_id:
            return Msg(error_code=ErrorCode.MEMBER_ID_REQUIRED, member_id=member_id, generation_id=-1, leader="")
        try:
            sub = read_subscription(bytes(req.protocols[0].metadata))
        except ProtocolError:
            raise KafkaError(ErrorCode.INCONSISTENT_GROUP_PROTOCOL) from None
        old = g.members.get(member_id) or ConsumerMember(member_id)
        m = old.joined_classic(req, sub, client_id, client_host)
        ids = {n: t.topic_id for n, t in self.logs.topics.items()}
        owned = {ids[t]: set(ps) for t, ps in sub["owned"].items() if t in ids}
        epochs = self._reconciled(g, old, m, owned)
        m.due(self.now_ms() + m.rebalance_timeout_ms)            # its SyncGroup, by then
        self._save(g, epochs, old, m)
        return Msg(member_id=m.member_id, generation_id=m.epoch, protocol_type="consumer", protocol_name=names[0],
                   leader="", members=[])

    def _reconciled(self, g, old, m, owned, regex_resolved=False):
        """A member's heartbeat steps, whichever protocol it came by: the epoch
        (raised by new names, a regex the group has resolved, or the subscribed
        topics' metadata), the target, the reconciliation, the timers; then it
        is the group's. -> the group's epochs before."""
        now = self.now_ms()
        epochs = (g.group_epoch, g.assignment_epoch)
        if g.seen(self._fingerprint(g, m)) or set(m.subscribed_names) != set(old.subscribed_names) or regex_resolved:
            g.bump()
        self._maybe_assign(g, m, now)
        before = (m.epoch, m.state, m.assigned, m.revoking)
        m.reconcile(g, g.assignment_epoch, g.target.get(m.member_id, {}), owned,
                    m.subscription() != old.subscription(), self.subscribed_ids(g, m))
        m.heard(now, self.setting(g.group_id, "consumer.session.timeout.ms"), before)
        g.put(m)
        return epochs

    def classic_member(self, g, member_id, instance_id, generation):
        """SyncGroup's and Heartbeat's checks of a classic member in a consumer group."""
        if instance_id:
            holder = g.static.get(instance_id)
            if holder is None:
                raise KafkaError(ErrorCode.UNKNOWN_MEMBER_ID, f"Member with instance id {instance_id} is not a "
                                 f"member of group {g.group_id}.")
            if holder != member_id:
                raise KafkaError(ErrorCode.FENCED_INSTANCE_ID)
        m = g.members.get(member_id)
        if m is None or not g.members:
            raise KafkaError(ErrorCode.UNKNOWN_MEMBER_ID)
        if m.classic is None:
            raise KafkaError(ErrorCode.UNKNOWN_MEMBER_ID, f"Member {member_id} does not use the classic protocol.")
        if generation != m.epoch:
            raise KafkaError(ErrorCode.ILLEGAL_GENERATION)
        return m

    def classic_sync(self, g, req):
        """SyncGroup from a classic member -> its assignment, as ConsumerProtocolAssignment bytes."""
        m = self.classic_member(g, req.member_id, req.group_instance_id, req.generation_id)
        first = m.classic["protocols"][0][0]
        if req.protocol_type not in (None, "consumer") or req.protocol_name not in (None, first):
            raise KafkaError(ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
        now = self.now_ms()
        if g.assignment_epoch > m.epoch and m.state != UNREVOKED:
            m.due(m.rejoin_by_ms or now + m.rebalance_timeout_ms)
            raise KafkaError(ErrorCode.REBALANCE_IN_PROGRESS)
        m.due(None)
        m.heard(now, 0, (m.epoch, m.state, m.assigned, m.revoking))
        names = {t.topic_id: n for n, t in self.logs.topics.items()}
        rows = [(names[t], java_map_order(ps, int)) for t, ps in java_map_order_items(m.assigned) if t in names]
        return Msg(protocol_type="consumer", protocol_name=first, assignment=assignment_bytes(m.protocol_version(), rows))

    def classic_heartbeat(self, g, req):
        """Heartbeat from a classic member: REBALANCE_IN_PROGRESS when it should rejoin to reconcile."""
        m = self.classic_member(g, req.member_id, req.group_instance_id, req.generation_id)
        now = self.now_ms()
        m.heard(now, 0, (m.epoch, m.state, m.assigned, m.revoking))
        target = g.target.get(m.member_id, {})
        released = not any(g.partition_epoch(t, p) not in (-1, m.epoch) for t, ps in target.items() for p in ps
                           if p not in m.assigned.get(t, {}))
        if m.epoch < g.assignment_epoch or m.state == UNREVOKED or m.state == UNRELEASED and released:
            m.due(m.rejoin_by_ms or now + m.rebalance_timeout_ms)
            raise KafkaError(ErrorCode.REBALANCE_IN_PROGRESS)

    def classic_leave(self, g, identities):
        """LeaveGroup's members out of a consumer group -> [(member id, instance id, error code)]."""
        results, gone = [], []
        for member_id, instance_id in identities:
            holder = g.static.get(instance_id) if instance_id else member_id
            if holder is None or holder not in g.members:
                code = ErrorCode.UNKNOWN_MEMBER_ID
            elif instance_id and member_id and holder != member_id:
                code = ErrorCode.FENCED_INSTANCE_ID
            else:
                code = ErrorCode.NONE
                gone.append(holder)
            results.append((member_id, instance_id, code))
        if gone:
            self.fence(g, gone)
        return results

    # --- leaving: epoch -1, and a static member's -2 ---
    def leave(self, req):
        g = self.coordinator.groups.get(req.group_id)
        if g is None or g.kind != "consumer":
            raise KafkaError(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {req.group_id} not found." if g is None
                             else f"Group {req.group_id} is not a consumer group.")
        if req.instance_id is None:
            if req.member_id not in g.members:
                raise KafkaError(ErrorCode.UNKNOWN_MEMBER_ID,
                                 f"Member {req.member_id} is not a member of group {g.group_id}.")
            self.fence(g, [req.member_id])
            return Msg(member_id=req.member_id, member_epoch=req.member_epoch)
        holder = g.static.get(req.instance_id)
        if holder is None:
            raise KafkaError(ErrorCode.UNKNOWN_MEMBER_ID, f"Instance id {req.instance_id} is unknown.")
        if holder != req.member_id:
            raise KafkaError(ErrorCode.FENCED_INSTANCE_ID, f"Static member {req.member_id} with instance id "
                             f"{req.instance_id} was fenced by member {holder}.")
        if req.member_epoch == -1:
            self.fence(g, [holder])
            return Msg(member_id=req.member_id, member_epoch=-1)
        g.members[holder].away()                 # -2: away for a while, its partitions kept for it
        self._save(g)
        return Msg(member_id=holder, member_epoch=-2)

    def fence(self, g, member_ids):
        """Members gone (left, timed out): removed, the group epoch raised, stored;
        or, when those who stay all speak the classic protocol, the group
        becomes a classic one (Kafka's validateOnlineDowngradeWithFencedMembers)."""
        staying = [m for m in g.members.values() if m.member_id not in member_ids]
        if staying and all(m.classic for m in staying) and self._policy("downgrade") \
                and len(staying) <= self.config["group.max.size"]:
            self.coordinator.downgraded(self._classic_of(g, staying))
            return
        epochs = (g.group_epoch, g.assignment_epoch)
        g.fence(member_ids, self.now_ms())
        self._save(g, epochs)

    def _classic_of(self, g, staying):
        """The classic group a consumer group becomes: its epoch the generation,
        each member's target assignment its assignment bytes."""
        classic = Group(g.group_id)
        classic.offsets, classic.generation, classic.protocol_type = g.offsets, g.group_epoch, "consumer"
        names = {t.topic_id: n for n, t in self.logs.topics.items()}
        now = self.now_ms()
        for m in staying:
            cm = GroupMember(m.member_id, m.instance_id, m.client_id, m.client_host,
                             m.classic["session_timeout_ms"], m.rebalance_timeout_ms, "consumer",
                             [(n, bytes.fromhex(d)) for n, d in m.classic["protocols"]])
            cm.assign(assignment_bytes(m.protocol_version(), [(names[t], sorted(ps)) for t, ps in sorted(
                g.target.get(m.member_id, {}).items(), key=lambda item: names.get(item[0], "")) if t in names]),
                now + m.classic["session_timeout_ms"])
            classic.join_member(cm)
        return classic

    # --- its chores: session and rebalance timeouts ---
    def schedule(self, timers):
        self.timers = timers
        timers.call_later(GROUP_TICK_S, self._tick)

    def _tick(self):
        self.timers.call_later(GROUP_TICK_S, self._tick)
        now = self.now_ms()
        for g in [g for g in self.coordinator.groups.values() if g.kind == "consumer"]:
            gone = [m.member_id for m in g.members.values()
                    if m.deadline_ms is not None and now >= m.deadline_ms
                    or m.revoke_by_ms is not None and now >= m.revoke_by_ms and m.epoch == m.revoke_epoch
                    or m.rejoin_by_ms is not None and now >= m.rejoin_by_ms]
            if gone:
                with contextlib.suppress(KafkaError):         # meta.db refused: the next tick
                    self.fence(g, gone)

    # --- ConsumerGroupDescribe ---
    def describe(self, group_id):
        g = self.coordinator.groups.get(group_id)
        if g is None or g.kind != "consumer":
            raise KafkaError(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} not found." if g is None
                             else f"Group {group_id} is not a consumer group.")
        names = {t.topic_id: name for name, t in self.logs.topics.items()}
        return Msg(group_id=group_id, group_state=g.state.value, group_epoch=g.group_epoch,
                   assignment_epoch=g.assignment_epoch, assignor_name=g.assignor(
                       self.config["group.consumer.assignors"][0]),
                   members=[Msg(member_id=m.member_id, instance_id=m.instance_id, rack_id=m.rack_id,
                                member_epoch=m.epoch, client_id=m.client_id, client_host=m.client_host,
                                subscribed_topic_names=m.subscribed_names, subscribed_topic_regex=m.regex,
                                assignment=Msg(topic_partitions=named_rows(merge_partitions(m.assigned, m.revoking),
                                                                           names)),
                                target_assignment=Msg(topic_partitions=named_rows(g.target.get(m.member_id, {}),
                                                                                  names)),
                                member_type=0 if m.classic else 1)
                            for m in g.ordered()])


def check_member_epoch(m, req):
    """Kafka's throwIfConsumerGroupMemberEpochIsInvalid: a newer epoch than the
    member's is fenced; an older one only as the retry of its previous epoch
    owning no more than it was given."""
    epoch = req.member_epoch
    if epoch == 0 or epoch == m.epoch:
        return
    if epoch > m.epoch:
        raise KafkaError(ErrorCode.FENCED_MEMBER_EPOCH, f"The consumer group member has a greater member epoch "
                         f"({epoch}) than the one known by the group coordinator ({m.epoch}). The member must "
                         f"abandon all its partitions and rejoin.")
    owned = req.topic_partitions
    if epoch != m.previous_epoch or owned is None or any(
            p not in m.assigned.get(t.topic_id, {}) for t in owned for p in t.partitions):
        raise KafkaError(ErrorCode.FENCED_MEMBER_EPOCH, f"The consumer group member has a smaller member epoch "
                         f"({epoch}) than the one known by the group coordinator ({m.epoch}). The member must "
                         f"abandon all its partitions and rejoin.")


def partition_names(by_topic_id, names):
    """{topic id: partitions} as ["topic-p", ...], sorted (the journal's)."""
    return [f"{names[t]}-{p}" for t, ps in sorted(by_topic_id.items(), key=lambda item: names.get(item[0], ""))
            if t in names for p in sorted(ps)]


def merge_partitions(a, b):
    out = {t: set(ps) for t, ps in a.items()}
    for t, ps in b.items():
        out.setdefault(t, set()).update(ps)
    return out


def java_map_order_items(by_topic_id):
    """A {topic id: ...} map's items in the order Kafka's HashMap<Uuid, ...> gives them."""
    return [(t, by_topic_id[t]) for t in java_map_order(by_topic_id, java_uuid_hash)]


def assignment_rows(assigned):
    """[{topic_id, partitions}] in the order Kafka's HashMaps give them."""
    return [Msg(topic_id=t, partitions=java_map_order(ps, int)) for t, ps in java_map_order_items(assigned)]


def named_rows(assigned, names):
    """ConsumerGroupDescribe's [{topic_id, topic_name, partitions}]; topics gone are left out."""
    return [Msg(topic_id=t, topic_name=names[t], partitions=java_map_order(assigned[t], int))
            for t in java_map_order(assigned, java_uuid_hash) if t in names]


###############################################################################
# 12. TRANSACTIONS -- the transaction coordinator: the classic protocol (KIP-98) and version 2 (KIP-890)
###############################################################################
# --- ProducerIdManager: the ids InitProducerId hands out --------------------------

class ProducerIdManager:
    """Hands out producer ids from blocks reserved in meta.db."""

    def __init__(self, store):
        self.store = store
        self.next_id = self.block_end = 0

    def new_id(self):
        if self.next_id >= self.block_end:
            try:
                self.next_id = self.store.allocate_producer_ids(PRODUCER_ID_BLOCK)
            except StoreFailed:           # Kafka's RPCProducerIdManager without a block: retriable
                raise KafkaError(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                                 "Producer ID block is full. Waiting for next block") from None
            self.block_end = self.next_id + PRODUCER_ID_BLOCK
        self.next_id += 1
        return self.next_id - 1


# --- Features: which transaction protocol the cluster speaks (KIP-584) --------
# Kafka finalizes each cluster-wide feature at a level, in its metadata log:
# `kafka-storage format --feature` sets it, `kafka-features upgrade|downgrade`
# (UpdateFeatures) changes it at run time, and every ApiVersions answer (v3+)
# carries the levels with an epoch that only grows. doze finalizes one:
# transaction.version. At 1 (doze's default) the classic protocol is the only
# one offered: Produce advertised up to v9, EndTxn and TxnOffsetCommit up to v4.
# At 2 (Kafka 4.x's default) KIP-890's transaction version 2 is offered
# besides: Produce v12, EndTxn v5, TxnOffsetCommit v5, advertised only together
# with the feature -- the Java client and franz-go turn it on from the feature
# alone. As in Kafka, the request's version decides how it is handled (a client
# that saw version 2 before a downgrade finishes its transaction with it); the
# level decides what is offered, and how the coordinator ends a transaction
# itself (a timeout, a fence). Clients without it (librdkafka, kafka-python,
# aiokafka, kafkajs, Sarama) go on with the classic protocol on the same
# broker. The level and its epoch live in meta.db.

TRANSACTION_VERSION = "transaction.version"
SUPPORTED_FEATURES = {TRANSACTION_VERSION: (0, 2)}      # name -> (min, max) level doze knows
FEATURE_UPGRADE, FEATURE_SAFE_DOWNGRADE, FEATURE_UNSAFE_DOWNGRADE = 1, 2, 3   # UpdateFeatures' upgrade_type


class Features:
    """The finalized feature levels: what ApiVersions tells and UpdateFeatures changes."""

    def __init__(self, config, store, journal=None):
        self.store, self.journal = store, journal
        stored = store.get_setting("feature." + TRANSACTION_VERSION)
        given = config["doze.transaction.version"]
        level = given if "doze.transaction.version" in config.given or stored is None else int(stored)
        if not SUPPORTED_FEATURES[TRANSACTION_VERSION][0] <= level <= SUPPORTED_FEATURES[TRANSACTION_VERSION][1]:
            raise ValueError(f"doze.transaction.version: {level}: 0, 1 or 2")
        self.levels = {TRANSACTION_VERSION: level}
        self.epoch = int(store.get_setting("features.epoch", 0))
        if stored is None or int(stored) != level:
            self._store(level)

    @property
    def transaction_version(self):
        return self.levels[TRANSACTION_VERSION]

    def _store(self, level):
        self.store.set_settings({"feature." + TRANSACTION_VERSION: level, "features.epoch": self.epoch + 1})
        self.levels[TRANSACTION_VERSION] = level
        self.epoch += 1

    def supported(self, api_versions_version=4):
        """ApiVersions v3 leaves out the features whose lowest level is 0 (KAFKA-17492)."""
        return [Msg(name=n, min_version=lo, max_version=hi) for n, (lo, hi) in SUPPORTED_FEATURES.items()
                if lo > 0 or api_versions_version >= 4]

    def finalized(self):
        return [Msg(name=n, max_version_level=level, min_version_level=level)
                for n, level in self.levels.items() if level > 0]

    def check(self, name, level, upgrade_type, node_id):
        """One of UpdateFeatures' changes, checked as Kafka's FeatureControlManager
        checks it (in its order, with its words) -> None, or raises KafkaError."""
        def refuse(why):
            raise KafkaError(ErrorCode.INVALID_UPDATE_VERSION, f"Invalid update version {level} for feature {name}. {why}")
        if upgrade_type not in (FEATURE_UPGRADE, FEATURE_SAFE_DOWNGRADE, FEATURE_UNSAFE_DOWNGRADE):
            refuse("The controller does not support the given upgrade type.")
        if level < 0:
            refuse("A feature version cannot be less than 0.")
        lo, hi = SUPPORTED_FEATURES.get(name, (0, 0))
        if name not in SUPPORTED_FEATURES and level > 0:
            refuse(f"Local controller {node_id} does not support this feature.")
        if not lo <= level <= hi:
            refuse(f"Local controller {node_id} only supports versions {lo}-{hi}")
        current = self.levels.get(name, 0)
        if level < current and upgrade_type == FEATURE_UPGRADE:
            refuse("Can't downgrade the version of this feature without setting the upgrade type to either safe "
                   "or unsafe downgrade.")
        if level > current and upgrade_type != FEATURE_UPGRADE:
            refuse("Can't downgrade to a newer version.")
        if name not in SUPPORTED_FEATURES:
            refuse(f"Feature {name} not found.")

    def update(self, name, level):
        was = self.levels[name]
        if level != was:
            log.info("feature %s finalized at level %d (was %d)", name, level, was)
            self._store(level)
            if self.journal is not None:
                self.journal.record("feature", name=name, level=level, was=was, epoch=self.epoch)


# --- TransactionCoordinator: KIP-98 transactions, the classic protocol ----------
# A transactional producer (KIP-98) owns a transactional id. InitProducerId
# makes it the owner, fencing any older holder by raising the epoch.
# AddPartitionsToTxn tells the coordinator which partitions the transaction
# will write; AddOffsetsToTxn and TxnOffsetCommit stage consumer offsets in
# it; EndTxn decides. Ending is a two-phase commit: the decision is made
# durable first (PrepareCommit/PrepareAbort), then a COMMIT or ABORT marker --
# a control batch with the producer's id and epoch -- goes to every partition
# the transaction wrote, then the transaction is complete.
#
# Crash ordering for EndTxn in doze, all in the loop's group commit of the pass
# that received it (Broker._group_commit):
#   1. meta.db: state := PREPARE_COMMIT / PREPARE_ABORT, fsynced  -- the decision is durable
#   2. logs:    a marker on every partition of the transaction; group commit fsyncs them
#   3. meta.db: the staged offsets become committed offsets, and
#               state := COMPLETE_COMMIT / COMPLETE_ABORT, in one sqlite transaction
#               (SYNC_LATER: not waited for)
#   4. answer EndTxn
# Recovery: a transaction found in PREPARE_* on start is carried out again
# from step 2 (a second marker for a finished transaction is harmless: it
# closes nothing). One found ONGOING is left open, its timeout restarted.
# Step 3 may be lost in a power cut after the answer: then it is redone. Nothing
# the producer does next can slip in between: its next request's answer waits
# for an fsync of meta.db, which makes step 3 durable too.
#
# Kafka vs doze: Kafka answers EndTxn once step 1 is durable and writes the
# markers afterwards (WriteTxnMarkers to each leader); meanwhile the same id
# gets CONCURRENT_TRANSACTIONS. doze answers after step 3: CONCURRENT_TRANSACTIONS
# only while a marker cannot be written, and a reader told of a commit finds it.
# doze.transaction.answer.after=decision answers as Kafka (the demo's step 9;
# doze.transaction.markers.delay.ms holds the markers back: the window shown).
# Likewise InitProducerId on an open transaction: Kafka starts the abort and
# answers CONCURRENT_TRANSACTIONS (the client retries); doze finishes the
# abort first and answers success (Sarama treats that error as fatal).
# Produce checks each transactional batch with the coordinator directly, as
# KIP-890 part 1's verification does.

S = TxnState
VALID_PREVIOUS = {                       # new state <- states it may be entered from
    S.EMPTY:               {S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT},
    S.ONGOING:             {S.ONGOING, S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT},
    S.PREPARE_COMMIT:      {S.ONGOING},
    S.PREPARE_ABORT:       {S.ONGOING, S.PREPARE_EPOCH_FENCE,
                            S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT},   # version 2: an abort of nothing
    S.COMPLETE_COMMIT:     {S.PREPARE_COMMIT},
    S.COMPLETE_ABORT:      {S.PREPARE_ABORT},
    S.DEAD:                {S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT},
    S.PREPARE_EPOCH_FENCE: {S.ONGOING},
}
DECIDED = {S.PREPARE_COMMIT, S.PREPARE_ABORT}
EPOCH_EXHAUSTED = 32766                  # Short.MAX_VALUE - 1: one more fence must fit
EPOCH_MAX = 32767
TXN_ANSWER_WAIT_MS = 5000                # then CONCURRENT_TRANSACTIONS, and the client retries
TXN_TICK_S = 0.1


class TransactionMetadata:
    """One transactional id: Kafka's TransactionMetadata, minus the pending state
    (doze's decided transactions are the PREPARE_* states themselves)."""

    def __init__(self, transactional_id, producer_id, producer_epoch, timeout_ms, now_ms):
        self.transactional_id = transactional_id
        self.producer_id = producer_id
        self.previous_producer_id = -1
        self.producer_epoch = producer_epoch
        self.last_producer_epoch = -1         # in memory only, as in Kafka: KIP-360 retries
        self.timeout_ms = timeout_ms
        self.state = TxnState.EMPTY
        self.partitions = set()               # {(topic, partition)}
        self.groups = set()                   # groups added by AddOffsetsToTxn
        self.offsets = {}                     # group -> {(topic, partition): OffsetEntry}, staged
        self.txn_start_ms = -1
        self.last_update_ms = now_ms
        self.begun_version = 1                # the transaction version of the request that began it (1, 2)
        self.ended_version = 1                # ... of the request (or the level, for the coordinator's own
                                              # aborts) that ended it: its markers' (KIP-890 part 2)
        self.next_producer_id = -1            # version 2, the epoch exhausted: the id its next transaction gets
        self.markers_needed = set()           # partitions still owed a marker
        self.decided_at = 0                   # meta.db's commit count once the decision was stored
        self.marker_offsets = {}              # (topic, partition) -> offset of its marker
        self.markers_due_ms = 0               # not written before (doze.transaction.markers.delay.ms)
        self.marker_error = None              # the last marker write the disk refused (logged once)
        # In memory only, for the console: the recent transitions (journal
        # events), and the last decided transaction's markers and offsets.
        self.history = collections.deque(maxlen=TXN_HISTORY)
        self.last_decision = None             # {"commit", "at_ms", "markers": {tp: offset}, "offsets": {group: {tp: entry}}}

    def row(self, **changes):
        """The meta.db row for this metadata with `changes` applied."""
        d = {"transactional_id": self.transactional_id, "producer_id": self.producer_id,
             "previous_producer_id": self.previous_producer_id,
             "producer_epoch": self.producer_epoch, "timeout_ms": self.timeout_ms,
             "state": self.state, "partitions": self.partitions, "groups": self.groups,
             "offsets": self.offsets, "txn_start_ms": self.txn_start_ms,
             "last_update_ms": self.last_update_ms, "begun_version": self.begun_version,
             "ended_version": self.ended_version, "next_producer_id": self.next_producer_id}
        unknown = set(changes) - set(d) - {"last_producer_epoch"}
        assert not unknown, unknown
        d.update(changes)
        return d

    def adopt(self, row):
        for name, value in row.items():
            setattr(self, name, value)


class TransactionCoordinator:
    """Transactional ids and their transactions. Knows nothing of sockets;
    waiters are woken through notify(("txn", transactional_id))."""

    def __init__(self, config, store, logs, groups, producer_states, producer_ids, notify, journal=None):
        self.config = config
        self.store = store
        self.logs = logs
        self.groups = groups
        self.journal = journal or Journal(config.clock)
        self.producer_states = producer_states    # ProducerStates
        self.producer_ids = producer_ids
        self.notify = notify
        self.clock = config.clock
        self.txns = {}                            # transactional id -> TransactionMetadata
        self.features = Features(config, store, self.journal)   # transaction.version
        self.completing = set()                   # ids in PREPARE_* being carried out
        self.staged = {}                          # group -> {(topic, partition): {transactional ids}}
        self.answer_after = config["doze.transaction.answer.after"]
        if self.answer_after not in ("markers", "decision"):
            raise ValueError(f"doze.transaction.answer.after: {self.answer_after!r}: markers (doze's way: the "
                             f"answer once the markers are durable) or decision (Kafka's: once PrepareCommit is)")

    def now_ms(self):
        return int(self.clock() * 1000)

    # --- storage ---
    def load(self):
        """Read meta.db; carry out stored decisions (the walkthrough's step 8: a
        crash between decision and markers). Open transactions keep their start:
        their timeout runs on from it."""
        now = self.now_ms()
        for row in self.store.load_txns():
            meta = TransactionMetadata(row["transactional_id"], row["producer_id"],
                                       row["producer_epoch"], row["timeout_ms"], now)
            meta.adopt(row)
            self.txns[meta.transactional_id] = meta
            self._index_staged(meta)
            if meta.state in DECIDED:
                log.info("transaction %s was decided (%s) before a restart; carrying it out",
                         meta.transactional_id, meta.state.value)
                self._journal_transition(meta, meta.state, "read back from meta.db after a restart: "
                                                           "the decision is carried out")
                self._write_markers(meta)

    def _save(self, meta, cause=None, **changes):
        """Store the changed metadata, then adopt it: the state in memory never
        runs ahead of meta.db. A failed write changes nothing: NOT_COORDINATOR.
        A new state, epoch or partition is journaled with its cause (each is a
        record Kafka appends to the id's __transaction_state partition)."""
        if "state" in changes and changes["state"] != meta.state \
                and meta.state not in VALID_PREVIOUS[changes["state"]]:
            raise KafkaError(ErrorCode.INVALID_TXN_STATE,
                             f"{meta.state.value} -> {changes['state'].value}")
        row = meta.row(**changes)
        with coordinator_store():
            self.store.save_txn(row)
        before = (meta.state, meta.producer_id, meta.producer_epoch, meta.partitions, meta.groups)
        meta.adopt(row)
        self.txns[meta.transactional_id] = meta
        if before != (meta.state, meta.producer_id, meta.producer_epoch, meta.partitions, meta.groups):
            self._journal_transition(meta, before[0], cause, was=before[1:3])

    def _journal_transition(self, meta, before, cause, to=None, was=None):
        """A "txn" event: from `before` to meta's state (or `to`), with its cause,
        the producer id and epoch it `was` when they changed, the transaction
        version of the step, and the __transaction_state partition Kafka would
        append it to."""
        names, state = self.partition_names(meta), to or meta.state
        event = self.journal.record(
            "txn", transactional_id=meta.transactional_id, from_state=before.value, to_state=state.value,
            cause=cause, producer_id=meta.producer_id, producer_epoch=meta.producer_epoch,
            was=list(was) if was and tuple(was) != (meta.producer_id, meta.producer_epoch) else None,
            version=meta.begun_version if state == TxnState.ONGOING else meta.ended_version
            if state in DECIDED or state in (TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT) else None,
            partitions=names[:20], partition_count=len(names),
            coordinator=f"{TRANSACTION_STATE}-{transaction_state_partition(self.config, meta.transactional_id)}")
        meta.history.append(event)

    def partition_names(self, meta):
        """Its partitions as Kafka lists them: those AddPartitionsToTxn added and,
        for each group AddOffsetsToTxn added, that group's __consumer_offsets partition."""
        tps = meta.partitions | {(CONSUMER_OFFSETS, offsets_partition(self.config, g)) for g in meta.groups}
        return [f"{t}-{p}" for t, p in sorted(tps)]

    def _index_staged(self, meta):
        for group, offsets in meta.offsets.items():
            for tp in offsets:
                self.staged.setdefault(group, {}).setdefault(tp, set()).add(meta.transactional_id)

    def _unindex_staged(self, meta):
        for group, offsets in meta.offsets.items():
            for tp in offsets:
                ids = self.staged.get(group, {}).get(tp)
                if ids:
                    ids.discard(meta.transactional_id)
                    if not ids:
                        del self.staged[group][tp]

    def staged_partitions(self, group_id):
        """Partitions with offsets staged in an undecided transaction (KIP-447's
        require_stable makes OffsetFetch answer UNSTABLE_OFFSET_COMMIT for these)."""
        return set(self.staged.get(group_id, {}))

    # --- checks every transactional call makes ---
    def for_producer(self, transactional_id, producer_id, producer_epoch):
        """The transaction of (id, producer id, epoch), or the error Kafka gives."""
        if not transactional_id:
            raise KafkaError(ErrorCode.INVALID_REQUEST, "empty transactional id")
        meta = self.txns.get(transactional_id)
        if meta is None or meta.producer_id != producer_id:
            raise KafkaError(ErrorCode.INVALID_PRODUCER_ID_MAPPING,
                             f"{transactional_id!r} is not bound to producer id {producer_id}")
        if producer_epoch != meta.producer_epoch:
            raise KafkaError(ErrorCode.PRODUCER_FENCED,
                             f"epoch {producer_epoch}; the current one is {meta.producer_epoch}")
        return meta

    # --- InitProducerId ---
    def init_producer(self, transactional_id, timeout_ms, producer_id, producer_epoch):
        """-> (meta, then): `then()` builds the answer; when meta is not None the
        answer waits until meta's fence-abort is complete."""
        if (producer_id == -1) != (producer_epoch == -1):
            raise KafkaError(ErrorCode.INVALID_REQUEST, "producer id and epoch must both be set")
        if transactional_id == "":
            raise KafkaError(ErrorCode.INVALID_REQUEST, "empty transactional id")
        if not 0 < timeout_ms <= self.config["transaction.max.timeout.ms"]:
            raise KafkaError(ErrorCode.INVALID_TRANSACTION_TIMEOUT,
                             f"{timeout_ms} ms; transaction.max.timeout.ms is "
                             f"{self.config['transaction.max.timeout.ms']}")
        meta = self.txns.get(transactional_id)
        if meta is None:                      # a new id: epoch -1 until the first bump
            meta = TransactionMetadata(transactional_id, self.producer_ids.new_id(), -1,
                                       timeout_ms, self.now_ms())
        if meta.state in DECIDED:
            raise KafkaError(ErrorCode.CONCURRENT_TRANSACTIONS, "markers are being written")
        if producer_id != -1 and not (meta.producer_epoch == -1 or producer_id == meta.producer_id or (
                producer_id == meta.previous_producer_id and producer_epoch >= EPOCH_EXHAUSTED)):
            raise KafkaError(ErrorCode.PRODUCER_FENCED, f"producer id {producer_id} is not current")
        if meta.state == TxnState.ONGOING:
            # Fence the old owner and abort its transaction; answer once that is done,
            # as Kafka answers the client's retry (old epoch + 2; for KIP-360's form,
            # the old epoch itself: at transaction.version 2 the fence's epoch).
            self._fence_and_abort(meta, "a new InitProducerId")
            return meta, lambda: self._bump(meta, timeout_ms, producer_id, producer_epoch)
        return None, lambda: self._bump(meta, timeout_ms, producer_id, producer_epoch)

    def _bump(self, meta, timeout_ms, producer_id, producer_epoch):
        """Empty/Complete*: a new epoch (or, at exhaustion, a new producer id)."""
        now = self.now_ms()
        new = {"state": TxnState.EMPTY, "timeout_ms": timeout_ms, "partitions": set(),
               "groups": set(), "offsets": {}, "txn_start_ms": -1, "last_update_ms": now}
        epoch, last = meta.producer_epoch, meta.last_producer_epoch
        if epoch >= EPOCH_EXHAUSTED and producer_epoch in (-1, epoch):
            new.update(previous_producer_id=meta.producer_id, producer_id=self.producer_ids.new_id(),
                       producer_epoch=0, last_producer_epoch=producer_epoch)
        elif producer_epoch == -1 or epoch == -1 or producer_epoch == epoch:
            new.update(producer_epoch=epoch + 1,
                       last_producer_epoch=epoch if producer_epoch != -1 else -1)
        elif producer_epoch == last:
            pass                                  # KIP-360: a retry of a bump that succeeded
        else:
            raise KafkaError(ErrorCode.PRODUCER_FENCED, f"epoch {producer_epoch} is not current")
        self._save(meta, "InitProducerId", **new)
        return Msg(producer_id=meta.producer_id, producer_epoch=meta.producer_epoch)

    def _fence_and_abort(self, meta, why):
        """Raise the epoch (fencing the producer) and abort its open transaction:
        as the finalized transaction.version ends transactions (Kafka asks the
        level, not the transaction): at 2 as EndTxn v5 would (KAFKA-19367: one
        bump, and a retried abort from the old epoch succeeds), else classic."""
        log.info("transaction %s: aborting its open transaction (%s); epoch %d -> %d",
                 meta.transactional_id, why, meta.producer_epoch, meta.producer_epoch + 1)
        if self.features.transaction_version >= 2:
            self._decide_v2(meta, False, f"fenced: {why}")
            return
        self._save(meta, f"fenced: {why}", state=TxnState.PREPARE_ABORT, producer_epoch=meta.producer_epoch + 1,
                   last_producer_epoch=-1, last_update_ms=self.now_ms(), ended_version=1)
        self._write_markers(meta)

    # --- AddPartitionsToTxn, AddOffsetsToTxn ---
    def add_partitions(self, meta, tps=(), group=None, version=1, cause=None):
        """Enter the transaction (or stay in it), durably. Callers have run for_producer."""
        if meta.state in DECIDED:
            raise KafkaError(ErrorCode.CONCURRENT_TRANSACTIONS, "markers are being written")
        tps = set(tps)
        if meta.state == TxnState.ONGOING and tps <= meta.partitions and \
                (group is None or group in meta.groups):
            return                                 # a retry: nothing to write
        now, begins = self.now_ms(), meta.state != TxnState.ONGOING
        self._save(meta, cause or ("AddOffsetsToTxn" if group else "AddPartitionsToTxn"),
                   state=TxnState.ONGOING, partitions=meta.partitions | tps,
                   groups=meta.groups | ({group} if group else set()), last_update_ms=now,
                   txn_start_ms=now if begins else meta.txn_start_ms,
                   begun_version=version if begins else meta.begun_version)

    def add_implicitly(self, transactional_id, producer_id, producer_epoch, tps=(), group=None, cause=None):
        """Transaction version 2: Produce v12+ and TxnOffsetCommit v5 add their
        partition (or group) themselves, beginning the transaction if none is
        open -- Kafka's leader sends AddPartitionsToTxn v5 for them. -> meta.
        Kafka's order: the id, then a decision being carried out, then the
        producer id and epoch."""
        meta = self.txns.get(transactional_id)
        if meta is None:
            raise KafkaError(ErrorCode.INVALID_PRODUCER_ID_MAPPING, f"{transactional_id!r} is not known")
        if meta.state in DECIDED:
            raise KafkaError(ErrorCode.CONCURRENT_TRANSACTIONS, "markers are being written")
        self.for_producer(transactional_id, producer_id, producer_epoch)
        self.add_partitions(meta, tps, group, version=2, cause=cause)
        if tps:
            # The batch is written next, and the kernel may write it back before
            # the group commit's fsync of meta.db: a power cut then would leave it
            # open where the coordinator does not know of it (no marker would
            # close it; its LSO stuck). So the add is durable first (one fsync, as
            # AddPartitionsToTxn's answer waits for one).
            with coordinator_store():
                self.store.sync()
        return meta

    # --- TxnOffsetCommit ---
    def check_offsets_added(self, meta, group, version):
        """KIP-890 part 1's verification for TxnOffsetCommit."""
        if meta.state in DECIDED:
            raise KafkaError(ErrorCode.CONCURRENT_TRANSACTIONS, "markers are being written")
        if meta.state != TxnState.ONGOING or group not in meta.groups:
            raise KafkaError(ErrorCode.TRANSACTION_ABORTABLE if version >= 4 else ErrorCode.INVALID_TXN_STATE,
                             f"group {group} was not added to the transaction")

    def stage_offsets(self, meta, group, offsets):
        staged = {g: dict(o) for g, o in meta.offsets.items()}
        staged.setdefault(group, {}).update(offsets)
        self._save(meta, offsets=staged, last_update_ms=self.now_ms())
        self._index_staged(meta)

    # --- EndTxn ---
    def end_txn(self, meta, commit):
        """-> True when the answer must wait for the markers, or raises."""
        if meta.state in DECIDED:
            raise KafkaError(ErrorCode.CONCURRENT_TRANSACTIONS,
                             f"{meta.state.value}: the decision is being carried out")
        done = TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT
        if meta.state == done:
            return False                             # a retry of the same decision
        if meta.state != TxnState.ONGOING:
            raise KafkaError(ErrorCode.INVALID_TXN_STATE,
                             f"cannot {'commit' if commit else 'abort'} in state {meta.state.value}")
        self._save(meta, f"EndTxn ({'commit' if commit else 'abort'})",
                   state=TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT,
                   last_update_ms=self.now_ms(), ended_version=1)
        self._write_markers(meta, self.config["doze.transaction.markers.delay.ms"]
                            if self.answer_after == "decision" else 0)
        return self.answer_after == "markers"

    # --- EndTxn v5: transaction version 2 (KIP-890 part 2) ---
    # Classic EndTxn keeps the epoch: a late EndTxn of one transaction finds
    # the next one open at the same epoch, and ends it (KAFKA-17754, the demo's
    # step 12). Version 2 bumps the epoch at every end -- commit, abort, an abort
    # with nothing open -- and answers with the new one, so that a late EndTxn
    # carries an old epoch: a retry of the same end (epoch - 1, the end carried
    # out) gets the same answer, anything else PRODUCER_FENCED. The markers carry
    # the new epoch, which partitions then insist on. At epoch 32766 the next
    # transaction gets a new producer id (the old one is remembered, so that a
    # retried EndTxn still matches: KAFKA-19367, KAFKA-20090).
    def end_txn_v2(self, transactional_id, producer_id, producer_epoch, commit):
        """-> (meta, (producer id, epoch) to answer, wait for the markers?), or raises."""
        meta = self.txns.get(transactional_id)
        if meta is None:
            raise KafkaError(ErrorCode.INVALID_PRODUCER_ID_MAPPING, f"{transactional_id!r} is not known")
        if meta.state in DECIDED:
            raise KafkaError(ErrorCode.CONCURRENT_TRANSACTIONS,
                             f"{meta.state.value}: the decision is being carried out")
        overflow_retry = producer_id == meta.previous_producer_id and producer_epoch == EPOCH_EXHAUSTED \
            and meta.producer_epoch == 0
        if producer_id != meta.producer_id and not overflow_retry:
            raise KafkaError(ErrorCode.INVALID_PRODUCER_ID_MAPPING,
                             f"{transactional_id!r} is not bound to producer id {producer_id}")
        ended = meta.state in (TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)
        retry = ended and (overflow_retry or producer_epoch + 1 == meta.producer_epoch)
        if producer_epoch != meta.producer_epoch and not retry:
            raise KafkaError(ErrorCode.PRODUCER_FENCED,
                             f"epoch {producer_epoch}; the current one is {meta.producer_epoch}")
        if retry and meta.state == (TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT):
            return meta, (meta.producer_id, meta.producer_epoch), False     # the end, asked again
        if retry or commit and meta.state != TxnState.ONGOING:
            raise KafkaError(ErrorCode.INVALID_TXN_STATE,
                             f"cannot {'commit' if commit else 'abort'} in state {meta.state.value} "
                             f"at epoch {producer_epoch}")
        answer = self._decide_v2(meta, commit, f"EndTxn v5 ({'commit' if commit else 'abort'})",
                                 self.config["doze.transaction.markers.delay.ms"]
                                 if self.answer_after == "decision" else 0)
        return meta, answer, self.answer_after == "markers" and meta.state in DECIDED

    def _decide_v2(self, meta, commit, cause, delay_ms=0):
        """PrepareCommit/PrepareAbort at the next epoch (an abort of nothing open
        too: it begins now); at exhaustion the producer id after it is drawn now.
        -> (producer id, epoch) of the next transaction."""
        epoch = meta.producer_epoch
        changes = {"state": TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT,
                   "producer_epoch": min(epoch + 1, EPOCH_MAX), "last_producer_epoch": epoch,
                   "ended_version": 2, "last_update_ms": self.now_ms()}
        if meta.state != TxnState.ONGOING:
            changes.update(txn_start_ms=changes["last_update_ms"], begun_version=2)
        if epoch >= EPOCH_EXHAUSTED:
            changes["next_producer_id"] = self.producer_ids.new_id()
        self._save(meta, cause, **changes)
        self._write_markers(meta, delay_ms)
        if meta.next_producer_id >= 0:
            return meta.next_producer_id, 0
        return meta.producer_id, meta.producer_epoch

    def outcome(self, meta, commit):
        """For a waiting EndTxn: its answer, or None while the markers are not durable."""
        done = TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT
        return Msg() if meta.state == done else None

    # --- markers ---
    def _write_markers(self, meta, delay_ms=0):
        """Owe a marker to each partition: progress() writes them once the
        decision just stored is durable (a marker on disk before its decision
        would be a commit that a power cut could turn into an abort), and
        not before delay_ms (doze.transaction.markers.delay.ms) has passed."""
        meta.markers_needed = set(meta.partitions)
        meta.marker_offsets = {}
        meta.decided_at = self.store.commits
        meta.markers_due_ms = self.now_ms() + delay_ms
        self.completing.add(meta.transactional_id)
        if delay_ms:
            self.timers.call_later(delay_ms / 1000, self.progress)

    def _append_markers(self, meta):
        """Up to PARTITIONS_PER_STEP markers a call: a transaction over thousands
        of partitions writes the rest in the next passes (progress, after each
        group commit), so no pass holds the loop long."""
        commit = meta.state == TxnState.PREPARE_COMMIT
        for tp in sorted(meta.markers_needed)[:PARTITIONS_PER_STEP]:
            plog = self.logs.logs.get(tp)
            if plog is None:                       # the topic was deleted meanwhile
                meta.markers_needed.discard(tp)
                continue
            if plog.offline:                       # retried after a restart (Kafka: until it is back)
                continue
            now = self.now_ms()
            batch = bytearray(build_control_batch(meta.producer_id, meta.producer_epoch, commit, now))
            try:
                base = self.logs.append(plog, batch, read_batch_header(batch))
            except KafkaError as e:                # no room, or the partition just went offline
                if meta.marker_error != e.detail:
                    log.error("transaction %s: the %s marker for %s-%d could not be written (%s); "
                              "the decision stands, retrying", meta.transactional_id,
                              "COMMIT" if commit else "ABORT", tp[0], tp[1], e.detail)
                meta.marker_error = e.detail
                continue
            self.producer_states.of(tp).apply_marker(meta.producer_id, meta.producer_epoch, commit,
                                                 base, now)
            meta.markers_needed.discard(tp)
            meta.marker_offsets[tp] = base
            self.journal.record("marker", transactional_id=meta.transactional_id, topic=tp[0], partition=tp[1],
                                offset=base, control="COMMIT" if commit else "ABORT",
                                producer_id=meta.producer_id, producer_epoch=meta.producer_epoch,
                                version=meta.ended_version)

    def progress(self):
        """In the group commit: make the decisions durable, write their markers;
        after the logs' fsync, finish every decided transaction whose markers
        are all durable; retry markers that could not be written."""
        if any(self.txns[t].decided_at > self.store.synced for t in self.completing):
            try:
                self.store.sync()
            except StoreFailed:
                return                         # logged; no marker without its durable decision
        for transactional_id in sorted(self.completing):
            meta = self.txns[transactional_id]
            if meta.markers_due_ms > self.now_ms():
                continue                       # held back (doze.transaction.markers.delay.ms)
            if meta.markers_needed:
                self._append_markers(meta)
            if meta.markers_needed or any(
                    tp in self.logs.logs and self.logs.logs[tp].high_watermark <= offset
                    for tp, offset in meta.marker_offsets.items()):
                continue
            self._complete(meta)

    def _complete(self, meta):
        """Step 3: committed offsets and the Complete state in one meta.db transaction."""
        commit = meta.state == TxnState.PREPARE_COMMIT
        offsets = meta.offsets if commit else {}
        row = meta.row(state=TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT,
                       partitions=set(), groups=set(), offsets={}, last_update_ms=self.now_ms())
        if meta.next_producer_id >= 0:          # version 2, the epoch exhausted: the next producer id
            row.update(producer_id=meta.next_producer_id, producer_epoch=0, next_producer_id=-1,
                       previous_producer_id=meta.producer_id)
        try:
            self.store.complete_txn(row, offsets)
        except StoreFailed:                     # logged by the store; the next group commit retries
            return
        for group, entries in offsets.items():
            self.groups.apply_committed(group, entries)
        self._unindex_staged(meta)
        self._offsets_marker(meta, commit)
        meta.last_decision = {"commit": commit, "markers": meta.marker_offsets, "offsets": meta.offsets,
                              "at_ms": row["last_update_ms"]}
        before, was = meta.state, (meta.producer_id, meta.producer_epoch)
        meta.adopt(row)
        self._journal_transition(meta, before, "markers durable", was=was)
        meta.markers_needed, meta.marker_offsets = set(), {}
        self.completing.discard(meta.transactional_id)
        self.notify(("txn", meta.transactional_id))

    def _offsets_marker(self, meta, commit):
        """Kafka writes the COMMIT or ABORT marker into each added group's
        __consumer_offsets partition too, and that marker is what publishes (or
        drops) the staged offsets. doze keeps offsets in meta.db: the sqlite
        transaction of step 3 stands in for it, journaled as what it stands for."""
        for group in sorted(meta.groups):
            tp = (CONSUMER_OFFSETS, offsets_partition(self.config, group))
            meta.marker_offsets[tp] = None
            done = "became its committed offsets" if commit else "were dropped"
            self.journal.record("marker", transactional_id=meta.transactional_id, topic=tp[0], partition=tp[1],
                                offset=None, control="COMMIT" if commit else "ABORT", group=group,
                                producer_id=meta.producer_id, producer_epoch=meta.producer_epoch,
                                stand_in=f"doze writes none: {group}'s staged offsets {done} in meta.db, "
                                         f"in the same sqlite transaction as the Complete state")

    # --- the produce path ---
    def check_produce(self, transactional_id, producer_id, producer_epoch, tp):
        """Is this transactional batch allowed? (KIP-890 part 1 verification,
        with Kafka's mapping of the answers to Produce v<=10 errors.)"""
        meta = self.txns.get(transactional_id)
        if meta is None or meta.producer_id != producer_id:
            raise KafkaError(ErrorCode.INVALID_PRODUCER_ID_MAPPING)
        if producer_epoch != meta.producer_epoch:
            raise KafkaError(ErrorCode.INVALID_PRODUCER_EPOCH, "fenced by a newer epoch")
        if meta.state in DECIDED:
            raise KafkaError(ErrorCode.NOT_ENOUGH_REPLICAS, "Unable to verify the partition has "
                             "been added to the transaction. Underlying error: CONCURRENT_TRANSACTIONS")
        if meta.state != TxnState.ONGOING or tp not in meta.partitions:
            raise KafkaError(ErrorCode.INVALID_TXN_STATE, "Partition was not added to the transaction")

    def check_not_decided(self, transactional_id, code=ErrorCode.NOT_ENOUGH_REPLICAS):
        """A transaction already decided takes no more data, even on a partition
        where it is open (Kafka checks only partitions it has not verified: the
        KAFKA-17754 window). NOT_ENOUGH_REPLICAS makes the client retry (Produce
        v12: CONCURRENT_TRANSACTIONS, as Kafka passes it on)."""
        meta = self.txns.get(transactional_id)
        if meta is not None and meta.state in DECIDED:
            raise KafkaError(code, "the transaction is being ended")

    # --- its chores on the loop: timeouts (every TXN_TICK_S), expired ids ---
    def schedule(self, timers):
        """Start the chores on the loop's timers."""
        self.timers = timers
        timers.call_later(TXN_TICK_S, self._tick)
        timers.call_later(self.config["transaction.remove.expired.transaction.cleanup.interval.ms"] / 1000,
                          self._expire_ids)

    def _tick(self):
        self.timers.call_later(TXN_TICK_S, self._tick)
        try:
            self.tick()
        except KafkaError as e:                 # meta.db refused a change (NOT_COORDINATOR)
            log.error("transaction timeouts: %s; will try again", e.detail)

    def _expire_ids(self):
        self.timers.call_later(self.config["transaction.remove.expired.transaction.cleanup.interval.ms"] / 1000,
                               self._expire_ids)
        with contextlib.suppress(StoreFailed):       # logged by the store; tried again next time
            self.expire_ids()

    def tick(self):
        """Time out transactions open longer than their transaction.timeout.ms
        since they began, as Kafka's TransactionStateManager.timedOutTransactions
        (the start is stored, so a restart does not reset it; the walkthrough's
        step 7), and retry unfinished decisions."""
        now = self.now_ms()
        for meta in list(self.txns.values()):
            start = meta.txn_start_ms if meta.txn_start_ms >= 0 else meta.last_update_ms
            if meta.state == TxnState.ONGOING and now - start > meta.timeout_ms:
                try:
                    self._fence_and_abort(meta, f"timed out after {meta.timeout_ms} ms")
                except KafkaError:
                    pass                          # meta.db unwritable now: next tick
        if self.completing:
            self.progress()

    def expire_ids(self):
        """transactional.id.expiration.ms: forget ids idle that long with nothing open."""
        limit = self.now_ms() - self.config["transactional.id.expiration.ms"]
        for meta in list(self.txns.values()):
            if meta.state in (TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT) \
                    and meta.last_update_ms < limit:
                self.store.delete_txn(meta.transactional_id)
                del self.txns[meta.transactional_id]
                self._journal_transition(meta, meta.state, "transactional.id.expiration.ms", TxnState.DEAD)


###############################################################################
# 13. SECURITY -- SASL authentication, SCRAM credentials, authorization
###############################################################################
# A connection on a SASL_PLAINTEXT or SASL_SSL listener (after TLS, for
# SASL_SSL) reaches nothing but ApiVersions and SaslHandshake until it has
# authenticated, as Kafka's SaslServerAuthenticator has it:
#
#   start --ApiVersions--> (one only) --SaslHandshake(mechanism)--> authenticate
#   authenticate --SaslAuthenticate(tokens)...--> complete (a principal User:<name>)
#
# Any other request before completion closes the connection; a failed
# authentication is answered (SASL_AUTHENTICATION_FAILED and a message) after
# connection.failed.authentication.delay.ms, then the connection is closed.
# SaslHandshake v0 means the tokens then come as bare size-prefixed frames,
# without Kafka headers (old clients). Mechanisms: PLAIN, with its users in
# the listener's JAAS config (listener.name.<l>.plain.sasl.jaas.config,
# user_<name>="<password>"), and SCRAM-SHA-256/512 (RFC 5802, as Kafka's
# ScramSaslServer speaks it), whose credentials live in meta.db as Kafka keeps
# them: salt, iterations, stored key and server key -- never a password.

SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
SCRAM_TYPES = {"SCRAM-SHA-256": (1, "sha256"), "SCRAM-SHA-512": (2, "sha512")}   # wire type, hash
SCRAM_OF_TYPE = {t: name for name, (t, _) in SCRAM_TYPES.items()}
SCRAM_MIN_ITERATIONS, SCRAM_MAX_ITERATIONS = 4096, 16384
SCRAM_SASLNAME = r"(?:[\x01-\x2b\x2d-\x3c\x3e-\x7f]|=2C|=3D)+"
SCRAM_CLIENT_FIRST = re.compile(
    r"n,(?:a=(?P<authzid>" + SCRAM_SASLNAME + r"))?,(?:m=[\x01-\x2b\x2d-\x7f]+,)?n=(?P<saslname>"
    + SCRAM_SASLNAME + r"),r=(?P<nonce>[\x21-\x2b\x2d-\x7e]+)(?P<extensions>(?:,[a-zA-Z]+=[\x01-\x2b\x2d-\x7f]+)*)")
SCRAM_BASE64 = r"(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?"
SCRAM_CLIENT_FINAL = re.compile(
    r"c=(?P<channel>" + SCRAM_BASE64 + r"),r=(?P<nonce>[\x21-\x2b\x2d-\x7e]+)"
    r"(?:,[a-zA-Z]+=[\x01-\x2b\x2d-\x7f]+)*,p=(?P<proof>" + SCRAM_BASE64 + r")")


class AuthenticationFailed(Exception):
    """A mechanism's refusal. Its text goes to the client only when Kafka's
    would (PLAIN's messages); otherwise the client gets Kafka's generic one."""

    def __init__(self, message, tell_client=False):
        super().__init__(message)
        self.tell_client = tell_client


def parse_jaas(text):
    """One JAAS login module: 'Class required key="value" ...;' -> (class, {key: value})."""
    m = re.fullmatch(r"\s*([\w.$]+)\s+(required|requisite|sufficient|optional)\s*(.*?);?\s*", text or "", re.S)
    if not m:
        raise ValueError("sasl.jaas.config: expected '<LoginModule> required key=\"value\" ... ;'")
    options = {}
    for key, quoted, bare in re.findall(r'([\w.-]+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^\s;"]+))', m.group(3)):
        options[key] = re.sub(r"\\(.)", r"\1", quoted) if quoted or not bare else bare
    return m.group(1), options


def scram_keys(mechanism, salted_password):
    """SaltedPassword -> (stored key, server key), as Kafka's ScramFormatter."""
    digest = SCRAM_TYPES[mechanism][1]
    client_key = hmac.new(salted_password, b"Client Key", digest).digest()
    return (hashlib.new(digest, client_key).digest(),
            hmac.new(salted_password, b"Server Key", digest).digest())


def scram_salted_password(mechanism, password, salt, iterations):
    return hashlib.pbkdf2_hmac(SCRAM_TYPES[mechanism][1], password.encode(), salt, iterations)


def new_scram_credential(mechanism, password, iterations=SCRAM_MIN_ITERATIONS):
    """A credential for a password: (salt, stored key, server key, iterations);
    the salt is random, as Kafka's tools make it."""
    salt = base36(secrets.randbits(130)).encode()
    stored, server = scram_keys(mechanism, scram_salted_password(mechanism, password, salt, iterations))
    return salt, stored, server, iterations


def base36(n):
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    out = ""
    while True:
        n, d = divmod(n, 36)
        out = digits[d] + out
        if not n:
            return out


class PlainServer:
    """SASL/PLAIN (RFC 4616) as Kafka's PlainSaslServer: one token,
    authzid NUL user NUL password, checked against the listener's users."""

    def __init__(self, users):
        self.users = users

    def step(self, token):
        """-> (reply token, user name once authenticated, else None)."""
        parts = token.decode("utf-8", "replace").split("\0", 3)
        if len(parts) != 3:
            raise AuthenticationFailed(f"Invalid SASL/PLAIN response: expected 3 tokens, got {len(parts)}")
        authzid, user, password = parts
        if not user:
            raise AuthenticationFailed("Authentication failed: username not specified", True)
        if not password:
            raise AuthenticationFailed("Authentication failed: password not specified", True)
        if not plain_password_ok(self.users, user, password):
            raise AuthenticationFailed("Authentication failed: Invalid username or password", True)
        if authzid and authzid != user:
            raise AuthenticationFailed("Authentication failed: Client requested an authorization id "
                                       "that is different from username", True)
        return b"", user


def plain_password_ok(users, user, password):
    """Is this a PLAIN user's password (compared in constant time)?"""
    expected = users.get(user)
    return expected is not None and hmac.compare_digest(expected.encode(), password.encode())


class ScramServer:
    """SCRAM-SHA-256/512 (RFC 5802, RFC 7677) as Kafka's ScramSaslServer: the
    client-first message names the user, the server answers its nonce, salt
    and iterations, the client-final proves the password, the server signs."""

    def __init__(self, mechanism, lookup, server_nonce=None):
        self.mechanism, self.lookup = mechanism, lookup        # lookup(user, mechanism) -> credential
        self.server_nonce = server_nonce                      # tests only: RFC 7677's example nonce
        self.expect = "client-first"

    def step(self, token):
        text = token.decode("utf-8", "replace")
        if self.expect == "client-first":
            return self._first(text), None
        if self.expect == "client-final":
            return self._final(text)
        raise AuthenticationFailed(f"Unexpected SASL request in state {self.expect}")

    def _first(self, text):
        m = SCRAM_CLIENT_FIRST.fullmatch(text)
        if not m:
            raise AuthenticationFailed("Invalid SCRAM client first message")
        if re.search(r"=(?!2C|3D)", m.group("saslname")):
            raise AuthenticationFailed("Invalid username")
        self.user = m.group("saslname").replace("=2C", ",").replace("=3D", "=")
        authzid = (m.group("authzid") or "").replace("=2C", ",").replace("=3D", "=")
        credential = self.lookup(self.user, self.mechanism)
        if credential is None:
            raise AuthenticationFailed("Authentication failed: Invalid user credentials")
        if authzid and authzid != self.user:
            raise AuthenticationFailed("Authentication failed: Client requested an authorization id "
                                       "that is different from username", True)
        self.salt, self.stored_key, self.server_key, iterations = credential
        if iterations < SCRAM_MIN_ITERATIONS:
            raise AuthenticationFailed(f"Iterations {iterations} is less than the minimum "
                                       f"{SCRAM_MIN_ITERATIONS} for {self.mechanism}")
        self.nonce = m.group("nonce") + (self.server_nonce or base36(secrets.randbits(130)))
        self.client_first_bare = f"n={m.group('saslname')},r={m.group('nonce')}{m.group('extensions')}"
        self.server_first = f"r={self.nonce},s={base64.b64encode(self.salt).decode()},i={iterations}"
        self.expect = "client-final"
        return self.server_first.encode()

    def _final(self, text):
        self.expect = "done"
        m = SCRAM_CLIENT_FINAL.fullmatch(text)
        if not m:
            raise AuthenticationFailed("Invalid SCRAM client final message")
        if not m.group("nonce").endswith(self.nonce):
            raise AuthenticationFailed("Invalid client nonce in the final client message.")
        digest = SCRAM_TYPES[self.mechanism][1]
        channel = base64.b64encode(base64.b64decode(m.group("channel"))).decode()
        auth_message = f"{self.client_first_bare},{self.server_first},c={channel},r={m.group('nonce')}".encode()
        signature = hmac.new(self.stored_key, auth_message, digest).digest()
        proof = base64.b64decode(m.group("proof"))
        if len(proof) != len(signature):
            raise AuthenticationFailed("Invalid client credentials")
        client_key = bytes(a ^ b for a, b in zip(proof, signature))
        if not hmac.compare_digest(hashlib.new(digest, client_key).digest(), self.stored_key):
            raise AuthenticationFailed("Invalid client credentials")
        server_signature = hmac.new(self.server_key, auth_message, digest).digest()
        return b"v=" + base64.b64encode(server_signature), self.user


def java_hash_order(names, presized=False):
    """names (in insertion order) in the order a java.util.HashMap<String, _>
    or HashSet iterates them, which Kafka's answers inherit (java_map_order by
    String.hashCode); presized: a HashSet made from a collection
    (SaslHandshake's mechanisms: `new ArrayList<>(new HashSet<>(enabled))`)."""
    return java_map_order(names, java_string_hash_u, presized)


class SaslSession:
    """One connection's SASL state (Kafka's SaslServerAuthenticator states)."""

    def __init__(self, mechanisms, plain_users, lookup_scram, listener, max_reauth_ms=0):
        self.plain_users, self.lookup_scram = plain_users, lookup_scram
        self.mechanisms = java_hash_order(mechanisms, presized=True)    # as SaslHandshake lists them
        self.listener = listener
        self.max_reauth_ms = max_reauth_ms  # connections.max.reauth.ms (KIP-368): 0 = no limit
        self.state = "start"              # start, versions, authenticate, complete
        self.raw = False                  # SaslHandshake v0: tokens come as bare frames
        self.server = None                # the mechanism's server side
        self.mechanism = None
        self.requested = None             # the mechanism a re-authentication asked for (must be the same)
        self.principal = None             # once authenticated: re-authentication may not change it
        self.expires_ms = None            # the session's end, when max_reauth_ms is set
        self.reauth_started_ms = None

    @property
    def complete(self):
        return self.state == "complete"

    def admits(self, api_key):
        """None if the request may go on now, else why the connection closes."""
        if self.state in ("start", "versions"):
            if api_key == ApiKey.API_VERSIONS and self.state == "start":
                return None                 # "versions" once one is answered (versions_answered)
            if api_key == ApiKey.SASL_HANDSHAKE:
                return None
            return (f"{ApiKey(api_key).name if api_key in ApiKey._value2member_map_ else api_key} "
                    f"before SASL authentication on listener {self.listener}")
        if self.state == "authenticate" and api_key != ApiKey.SASL_AUTHENTICATE:
            return f"API key {api_key} while authenticating with {self.mechanism}: only SaslAuthenticate"
        return None

    def refusal(self, api_key, now_ms):
        """Kafka's SaslServerAuthenticator as a gate -> (why, expired): (None,
        False) if the request may go on; before authentication completes,
        what admits() refuses (the delayed close of a failed authentication);
        once complete, anything but the SaslHandshake that re-authenticates
        after the session expired (expired: True, closed at once)."""
        if not self.complete:
            return self.admits(api_key), False
        if api_key != ApiKey.SASL_HANDSHAKE and self.expired(now_ms):
            return (f"session of {self.principal} expired (connections.max.reauth.ms): "
                    f"disconnecting expired channel"), True
        return None, False

    def versions_answered(self):
        """An ApiVersions was answered in full: no other before the handshake. One
        refused (UNSUPPORTED_VERSION, INVALID_REQUEST) may be retried, as in Kafka."""
        if self.state == "start":
            self.state = "versions"

    def may_reauthenticate(self, now_ms):
        """KIP-368: a SaslHandshake on an authenticated connection starts over,
        if its session has an end and the last start was a second ago or more."""
        return self.complete and self.expires_ms is not None and \
            (self.reauth_started_ms is None or now_ms - self.reauth_started_ms >= 1000)

    def expired(self, now_ms):
        return self.complete and self.expires_ms is not None and now_ms > self.expires_ms

    def handshake(self, mechanism, version, now_ms=0):
        """-> True if the mechanism is enabled here (then tokens are expected)."""
        if mechanism not in self.mechanisms:
            return False
        if self.complete:                                  # re-authentication
            self.reauth_started_ms = now_ms
            self.requested, mechanism = mechanism, self.mechanism   # a change fails at the next token
        self.mechanism, self.state, self.raw = mechanism, "authenticate", version == 0
        self.server = PlainServer(self.plain_users) if mechanism == "PLAIN" \
            else ScramServer(mechanism, self.lookup_scram)
        return True

    def token(self, data):
        """A client token -> (reply token, principal once complete, else None);
        raises AuthenticationFailed."""
        if self.requested not in (None, self.mechanism):
            raise AuthenticationFailed(f"SASL mechanism '{self.requested}' requested by client is not "
                                       f"supported for re-authentication of mechanism '{self.mechanism}'", True)
        reply, user = self.server.step(bytes(data))
        if user is None:
            return reply, None
        principal = f"User:{user}"
        if self.principal is not None and principal != self.principal:
            raise AuthenticationFailed(f"Cannot change principals during re-authentication from "
                                       f"{self.principal}: {principal}", True)
        self.state, self.principal = "complete", principal
        return reply, principal

    def start_session(self, now_ms):
        """-> the session lifetime the final SaslAuthenticate (v1+) tells the client."""
        self.expires_ms = now_ms + self.max_reauth_ms if self.max_reauth_ms > 0 else None
        return max(self.max_reauth_ms, 0)

    def failure_message(self, e):
        """What the client is told: the mechanism's words for PLAIN's refusals,
        else Kafka's generic message (it must not say whether the user exists)."""
        return str(e) if e.tell_client else ("Authentication failed during authentication due to "
                                             f"invalid credentials with SASL mechanism {self.mechanism}")


def sasl_setup(config, listener):
    """The SASL mechanisms of a SASL listener, its PLAIN users and its
    connections.max.reauth.ms, checked as Kafka checks them at start (what doze
    cannot do, it says)."""
    get = functools.partial(listener_setting, config, listener)
    mechanisms = [m.strip() for m in (get("sasl.enabled.mechanisms") or "GSSAPI").split(",") if m.strip()]
    unsupported = [m for m in mechanisms if m not in SASL_MECHANISMS]
    if unsupported or not mechanisms:
        raise ValueError(f"listener {listener.name}: sasl.enabled.mechanisms {','.join(mechanisms)}: doze "
                         f"serves {', '.join(SASL_MECHANISMS)} (set sasl.enabled.mechanisms, or "
                         f"listener.name.{listener.name.lower()}.sasl.enabled.mechanisms)")
    users = {}
    if "PLAIN" in mechanisms:
        key = f"listener.name.{listener.name.lower()}.plain.sasl.jaas.config"
        jaas = config.settings.get(key)
        if jaas is None:
            raise ValueError(f"listener {listener.name}: PLAIN needs its users in {key} "
                             f"(PlainLoginModule required user_<name>=\"<password>\" ...;)")
        module, options = parse_jaas(jaas)
        if not module.endswith("PlainLoginModule"):
            raise ValueError(f"{key}: {module} is not org.apache.kafka.common.security.plain.PlainLoginModule")
        users = {k[5:]: v for k, v in options.items() if k.startswith("user_")}
    return mechanisms, users, int(get("connections.max.reauth.ms") or 0)


def password_mechanism(setups, lookup_scram, user, password):
    """The mechanism whose credential of `user` the password matches, or None:
    the console's login, checked as a SASL client's would be. setups: the SASL
    listeners' (mechanisms, PLAIN users, _); lookup_scram(user, mechanism) ->
    SCRAM credential. A SCRAM check derives the salted password (PBKDF2, its
    credential's iterations: 3 to 40 ms), so callers limit how often."""
    if not user or not password:
        return None
    if any("PLAIN" in mechanisms and plain_password_ok(users, user, password) for mechanisms, users, _ in setups):
        return "PLAIN"
    for mechanism in SCRAM_TYPES:
        credential = lookup_scram(user, mechanism) if any(mechanism in s[0] for s in setups) else None
        if credential is None or not SCRAM_MIN_ITERATIONS <= credential[3] <= SCRAM_MAX_ITERATIONS:
            continue
        salt, stored_key, _, iterations = credential
        salted = scram_salted_password(mechanism, password, bytes(salt), iterations)
        if hmac.compare_digest(scram_keys(mechanism, salted)[0], stored_key):
            return mechanism
    return None


# --- Authorization: Kafka's StandardAuthorizer over ACLs kept in meta.db ---------
# On when authorizer.class.name names StandardAuthorizer. An ACL says: this
# principal (User:alice, or User:* for anyone), from this host (an IP, or *),
# may (ALLOW) or may not (DENY) do this operation on resources of one type
# whose name is this one (LITERAL; * for every name) or starts with it
# (PREFIXED). A request is allowed when the principal is a super user; else
# when no DENY applies and an ALLOW does -- where an ALLOW of READ, WRITE,
# DELETE or ALTER also allows DESCRIBE, and ALTER_CONFIGS allows
# DESCRIBE_CONFIGS; else, when no ACL at all names the resource, by
# allow.everyone.if.no.acl.found. Handlers ask ctx.allowed(...) before they
# look at whether the resource exists, so that a name never leaks.

class ResourceType(enum.IntEnum):
    """What an ACL names (Kafka's ResourceType codes)."""
    UNKNOWN, ANY, TOPIC, GROUP, CLUSTER, TRANSACTIONAL_ID, DELEGATION_TOKEN, USER = range(8)


class AclOperation(enum.IntEnum):
    """What an ACL allows or denies (Kafka's AclOperation codes)."""
    (UNKNOWN, ANY, ALL, READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE, CLUSTER_ACTION, DESCRIBE_CONFIGS,
     ALTER_CONFIGS, IDEMPOTENT_WRITE, CREATE_TOKENS, DESCRIBE_TOKENS) = range(15)


class PatternType(enum.IntEnum):
    """How an ACL's resource name matches (Kafka's PatternType codes)."""
    UNKNOWN, ANY, MATCH, LITERAL, PREFIXED = range(5)


class AclPermission(enum.IntEnum):
    """ALLOW or DENY (Kafka's AclPermissionType codes)."""
    UNKNOWN, ANY, DENY, ALLOW = range(4)


STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
CLUSTER_NAME = "kafka-cluster"              # the one name of the CLUSTER resource
Op = AclOperation
SUPPORTED_OPERATIONS = {                    # AclEntry.supportedOperations: also the bitfields' bits
    ResourceType.TOPIC: (Op.READ, Op.WRITE, Op.CREATE, Op.DESCRIBE, Op.DELETE, Op.ALTER,
                         Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS),
    ResourceType.GROUP: (Op.READ, Op.DESCRIBE, Op.DELETE, Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS),
    ResourceType.CLUSTER: (Op.CREATE, Op.CLUSTER_ACTION, Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS,
                           Op.IDEMPOTENT_WRITE, Op.ALTER, Op.DESCRIBE),
    ResourceType.TRANSACTIONAL_ID: (Op.DESCRIBE, Op.WRITE),
    ResourceType.DELEGATION_TOKEN: (Op.DESCRIBE,),
    ResourceType.USER: (Op.CREATE_TOKENS, Op.DESCRIBE_TOKENS),
}
IMPLIED_BY_ALLOW = {Op.DESCRIBE: (Op.READ, Op.WRITE, Op.DELETE, Op.ALTER),
                    Op.DESCRIBE_CONFIGS: (Op.ALTER_CONFIGS,)}
AUTHORIZATION_FAILED = {ResourceType.TOPIC: ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                        ResourceType.GROUP: ErrorCode.GROUP_AUTHORIZATION_FAILED,
                        ResourceType.CLUSTER: ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                        ResourceType.TRANSACTIONAL_ID: ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED}
KAFKA_ERROR_MESSAGES = {29: "Topic authorization failed.", 30: "Group authorization failed.",   # Errors.java
                        31: "Cluster authorization failed.", 53: "Transactional Id authorization failed."}


class Authorizer:
    """ACLs in memory (a list per resource type: a single node has few) and in
    meta.db; decisions as StandardAuthorizerData.authorize."""

    def __init__(self, store, super_users, allow_if_no_acl):
        self.store = store
        self.super_users = super_users
        self.allow_if_no_acl = allow_if_no_acl
        self.by_type = collections.defaultdict(list)
        for acl in store.acls():
            self.by_type[acl.resource_type].append(acl)

    @classmethod
    def from_config(cls, config, store):
        name = config["authorizer.class.name"]
        if not name:
            return None
        if name != STANDARD_AUTHORIZER:
            raise ValueError(f"authorizer.class.name={name}: doze has Kafka's {STANDARD_AUTHORIZER} only")
        supers = {p.strip() for p in config["super.users"].split(";") if p.strip()}
        return cls(store, supers, config["allow.everyone.if.no.acl.found"])

    def allowed(self, principal, host, operation, resource_type, name):
        if principal in self.super_users:
            return True
        acls = [a for a in self.by_type.get(resource_type, ()) if acl_names(a, name)]
        if not acls:
            return self.allow_if_no_acl
        implied = IMPLIED_BY_ALLOW.get(operation, ())
        verdict = False
        for a in acls:
            if a.principal not in (principal, "User:*") or a.host not in (host, "*"):
                continue
            if a.permission == AclPermission.DENY and a.operation in (operation, Op.ALL):
                return False
            if a.permission == AclPermission.ALLOW and (a.operation in (operation, Op.ALL) or a.operation in implied):
                verdict = True
        return verdict

    def allowed_on_any(self, principal, host, operation, resource_type):
        """KIP-679's authorizeByResourceType: may the principal do `operation`
        on some resource of the type (by the ACLs' patterns alone)?"""
        if self.allowed(principal, host, operation, resource_type, "hardcode"):
            return True
        acls = [a for a in self.by_type.get(resource_type, ()) if a.principal in (principal, "User:*")
                and a.host in (host, "*") and a.operation in (operation, Op.ALL)]
        denied = {(a.pattern, a.name) for a in acls if a.permission == AclPermission.DENY}
        if (PatternType.LITERAL, "*") in denied:
            return False
        deny_prefixes = [n for p, n in denied if p == PatternType.PREFIXED]
        for a in acls:
            if a.permission != AclPermission.ALLOW:
                continue
            if a.pattern == PatternType.LITERAL and (a.name == "*" or (PatternType.LITERAL, a.name) not in denied
                                                     and not any(a.name.startswith(d) for d in deny_prefixes)):
                return True
            if a.pattern == PatternType.PREFIXED and not any(a.name.startswith(d) for d in deny_prefixes):
                return True
        return False

    def operations(self, principal, host, resource_type, name):
        """KIP-430's authorized-operations bitfield of one resource."""
        return sum(1 << op for op in SUPPORTED_OPERATIONS[resource_type]
                   if self.allowed(principal, host, op, resource_type, name))

    # --- the ACL APIs ---
    def matching(self, f):
        """The ACLs an ACL filter (DescribeAcls, DeleteAcls) matches, in their order."""
        return [a for acls in self.by_type.values() for a in acls if acl_filter_matches(f, a)]

    def add(self, acls):
        new = [a for a in dict.fromkeys(acls) if a not in self.by_type.get(a.resource_type, ())]
        self.store.alter_acls(added=new, removed=[])
        for a in new:
            self.by_type[a.resource_type].append(a)

    def remove(self, acls):
        gone = set(acls)
        self.store.alter_acls(added=[], removed=list(gone))
        for rtype in list(self.by_type):
            self.by_type[rtype] = [a for a in self.by_type[rtype] if a not in gone]


def acl_names(acl, name):
    """Does the ACL's resource pattern cover the resource named `name`?"""
    if acl.pattern == PatternType.LITERAL:
        return acl.name == name or acl.name == "*"
    return acl.pattern == PatternType.PREFIXED and name.startswith(acl.name)


def acl_filter_matches(f, acl):
    """ResourcePatternFilter.matches and AccessControlEntryFilter.matches."""
    if f.resource_type_filter != ResourceType.ANY and f.resource_type_filter != acl.resource_type:
        return False
    name, pattern = f.resource_name_filter, f.pattern_type_filter
    if pattern == PatternType.MATCH:
        if name is not None and not acl_names(acl, name):
            return False
    elif (pattern != PatternType.ANY and pattern != acl.pattern) or (name is not None and name != acl.name):
        return False
    return (f.principal_filter is None or f.principal_filter == acl.principal) and \
        (f.host_filter is None or f.host_filter == acl.host) and \
        f.operation in (AclOperation.ANY, acl.operation) and f.permission_type in (AclPermission.ANY, acl.permission)


###############################################################################
# 14. REQUESTS AND THE DATA PATH -- how an API is declared; Produce, Fetch, offsets, metadata
###############################################################################
# Each API is declared once with @api(schema): the schema decodes its requests
# and encodes its responses, and the registry it fills is also what
# ApiVersions advertises -- so what doze says it speaks cannot drift from what
# it decodes. A handler gets the decoded request and a RequestContext, and
# returns the response as a Msg, NO_RESPONSE (Produce with acks=0), or a
# Park: "answer later", for Fetch's long poll and for acks that wait for fsync.

HANDLERS = {}        # ApiKey -> (Api schema, handler function)
NO_RESPONSE = object()


class CloseConnection:
    """A handler's verdict that the connection must close (with this reason)."""

    def __init__(self, reason):
        self.reason = reason


class AuthenticationFailure:
    """A handler's verdict on a failed authentication: this response, sent
    after connection.failed.authentication.delay.ms, then the close (KIP-306)."""

    def __init__(self, response, reason):
        self.response, self.reason = response, reason


FLUSHED = "flushed"  # the park key notified after every group commit


def durable(ctx, appended):
    """Every (log, last offset) appended is below its high watermark (fsynced),
    or settled otherwise: its topic is gone, or its disk failed (LogManager.lost)."""
    return all(plog.high_watermark > last or plog.offline or not ctx.logs.holds(plog)
               for plog, last in appended)


def storage_failed(ctx, results):
    """Produce answers [(topic, partition answer)] of partitions whose write
    the disk lost, made KAFKA_STORAGE_ERROR (in place)."""
    lost = ctx.logs.lost(ctx.appended)
    for topic, part in results:
        if (topic, part.index) in lost:
            part.error_code, part.base_offset = ErrorCode.KAFKA_STORAGE_ERROR, -1
            part.error_message = f"{topic}-{part.index} went offline before the write was durable"
    return results


def api(schema_text, min_served=None, classic_max=None):
    """Declare an API: its wire schema and the function that serves it.
    classic_max: the last version advertised while transaction.version is below
    2 (the versions after it are transaction version 2's; served always, as
    Kafka serves them: a client that saw them before a downgrade goes on)."""
    spec = parse_api(schema_text)
    spec.min_served = spec.min_version if min_served is None else min_served
    spec.classic_max = spec.max_version if classic_max is None else classic_max

    def register(handler):
        key = ApiKey(spec.key)
        assert key not in HANDLERS, f"two handlers for {key.name}"
        HANDLERS[key] = (spec, handler)
        return handler
    return register


class Park:
    """A response that is not ready yet. poll(expired) is called whenever one
    of `keys` is notified, and once more at deadline_ms with expired=True; it
    returns the response Msg, or None to keep waiting. A muting park (a
    long-poll) holds back the connection's next requests, as Kafka does; an
    early one (Fetch, whose max_wait_ms is only an upper bound) is answered as
    soon as the client's next request has come in behind it, so that nothing
    waits out a long-poll the client no longer needs (librdkafka sends its
    ListOffsets on the connection it fetches on). Kafka does not read ahead
    of a parked request: a named difference, and one the protocol allows."""
    __slots__ = ("poll", "deadline_ms", "keys", "mute", "early", "request", "answers", "done")

    def __init__(self, poll, deadline_ms=None, keys=(), mute=True, early=False):
        self.poll, self.deadline_ms, self.keys, self.mute = poll, deadline_ms, tuple(keys), mute
        self.early = early and mute
        self.request = None         # the Request it answers, once parked (Purgatory.add)
        self.answers = None         # ... and the Dispatcher that answers it
        self.done = False


class Purgatory:
    """Requests that wait (Kafka's DelayedOperationPurgatory): a Park waits
    until one of its keys is notified and its poll has the answer, or until
    its deadline. Whoever changes what a parked request may wait for notifies
    its key: the coordinators (("group", id), ("txn", id)), the group commit
    ((topic, partition) as its high watermark moves, and FLUSHED), and the
    loop once a pass (STEP, for requests in steps)."""

    def __init__(self, timers):
        self.timers = timers
        self.waiters = {}               # park key -> {Park}
        self.parked = 0                 # requests waiting here now

    def __len__(self):
        return self.parked

    def add(self, park, request, answers):
        """Park a request: `answers` (the Dispatcher) evaluates its poll and sends the answer."""
        park.request, park.answers = request, answers
        self.parked += 1
        for key in park.keys:
            self.waiters.setdefault(key, set()).add(park)
        if park.deadline_ms is not None:
            self.timers.call_at(park.deadline_ms / 1000, self._poll, park, True)
        request.conn.wait_for(park)

    def stepping(self):
        """Is a request in steps waiting for the next pass?"""
        return STEP in self.waiters

    def end_early(self, park):
        """Answer a parked long-poll now, with what there is (see Park)."""
        self._poll(park, expired=True)

    def notify(self, key):
        """Something a parked request may wait for happened: poll its waiters."""
        waiting = self.waiters.get(key)
        if waiting:
            for park in list(waiting):
                self._poll(park, expired=False)

    def _poll(self, park, expired):
        if park.done:
            return
        request = park.request
        if request.conn.closed:
            self._unpark(park)
            return
        result = park.answers.evaluate(request, park.poll, expired)
        if result is None and not request.conn.closed and not expired:
            return
        self._unpark(park)
        park.answers.reply(request, result)

    def _unpark(self, park):
        park.done = True
        self.parked -= 1
        for key in park.keys:
            waiting = self.waiters.get(key)
            if waiting:
                waiting.discard(park)
                if not waiting:
                    del self.waiters[key]
        park.request.conn.waited(park)


STEP = "step"                   # the park key notified once every pass of the loop
STEP_BUDGET_S = 0.005           # loop time a request in steps may take a pass
FLUSH_BUDGET_S = 0.02           # loop time the group commit may take a pass (then: the next pass)


def in_steps(work, budget_s=None):
    """Run a handler written as a generator -- it yields wherever it may
    pause and returns its answer -- for budget_s now and as long again in
    every pass of the loop until it is done, so that a long request (timestamp
    lookups over many partitions, thousands of partition directories) never
    holds the loop: the others are served between its steps. Its connection's
    next requests wait, as they would behind any request."""
    budget_s = STEP_BUDGET_S if budget_s is None else budget_s

    def advance(expired=False):
        deadline = time.perf_counter() + budget_s
        try:
            while time.perf_counter() < deadline:
                next(work)
        except StopIteration as done:
            return done.value
        return None
    return advance() or Park(advance, keys=[STEP])


def topics_allowed(ctx, operation, names):
    """The names (each asked once) the principal may do `operation` on."""
    return {n for n in dict.fromkeys(names) if ctx.allowed(operation, ResourceType.TOPIC, n)}


@dataclasses.dataclass(frozen=True)
class Rooms:
    """The rooms a handler may reach, composed once by the Broker (never the
    Broker itself): each request's RequestContext carries them."""
    config: object
    store: object                  # MetadataStore
    logs: object                   # LogManager
    producer_states: object        # ProducerStates
    producer_ids: object           # ProducerIdManager
    groups: object                 # GroupCoordinator
    txns: object                   # TransactionCoordinator
    authorizer: object             # Authorizer, or None
    node: object                   # Listeners.node: (node id, host, port) for a connection's clients
    notify: object                 # Purgatory.notify: wake what waits on a key
    consumer_groups: object = None # ConsumerGroups: KIP-848's protocol


class RequestContext:
    """What a handler may touch: the rooms, the connection's principal, the
    request's version and the time."""

    def __init__(self, rooms, conn, api_key, version, client_id):
        self.logs = rooms.logs
        self.groups = rooms.groups
        self.consumer_groups = rooms.consumer_groups
        self.txns = rooms.txns
        self.config = rooms.config
        self.store = rooms.store
        self.producer_states = rooms.producer_states
        self.producer_ids = rooms.producer_ids
        self.node = rooms.node
        self.notify = rooms.notify
        self.authorizer = rooms.authorizer
        self.conn = conn
        self.api_key = api_key
        self.version = version
        self.client_id = client_id
        self.now_ms = int(rooms.config.clock() * 1000)
        self.appended = []                     # (log, last offset) this request wrote

    def allowed(self, operation, resource_type, name, log_denial=True):
        """May this connection's principal do `operation` on the resource? True
        without an authorizer; a denial is logged (Kafka's authorizer log)."""
        a = self.authorizer
        if a is None or a.allowed(self.conn.principal, self.conn.host, operation, resource_type, name):
            return True
        if log_denial:
            self._log_denial(operation, f"resource {resource_type.name}:{name}")
        return False

    def _log_denial(self, operation, what):
        log.info("authorization: principal %s denied operation %s from host %s on %s (%s v%d)",
                 self.conn.principal, operation.name, self.conn.host, what, HANDLERS[self.api_key][0].name,
                 self.version)

    def require(self, operation, resource_type, name):
        """Raise the resource type's AUTHORIZATION_FAILED unless allowed."""
        if not self.allowed(operation, resource_type, name):
            code = AUTHORIZATION_FAILED[resource_type]
            raise KafkaError(code, KAFKA_ERROR_MESSAGES[code])

    def allowed_on_any(self, operation, resource_type):
        """KIP-679: may the principal do `operation` on some resource of the type?"""
        a = self.authorizer
        if a is None or a.allowed_on_any(self.conn.principal, self.conn.host, operation, resource_type):
            return True
        self._log_denial(operation, f"any resource of type {resource_type.name}")
        return False

    def operations(self, resource_type, name):
        """KIP-430's authorized-operations bitfield (every supported operation without an authorizer)."""
        if self.authorizer is None:
            return sum(1 << op for op in SUPPORTED_OPERATIONS[resource_type])
        return self.authorizer.operations(self.conn.principal, self.conn.host, resource_type, name)

    def check_cluster(self, operation):
        """Kafka's authorizeClusterOperation: CLUSTER_AUTHORIZATION_FAILED for the whole request."""
        if not self.allowed(operation, ResourceType.CLUSTER, CLUSTER_NAME):
            raise KafkaError(ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                             f"Request {HANDLERS[self.api_key][0].name} v{self.version} from "
                             f"{self.conn.principal} needs {operation.name} permission.")


def error_code_of(fn, *args):
    """Run fn; return ErrorCode.NONE (== 0, falsy) or the KafkaError's code."""
    try:
        fn(*args)
    except KafkaError as e:
        return e.code
    return ErrorCode.NONE


def by_topic(results, name="name", parts="partitions"):
    """Per-partition answers [(topic, partition answer Msg)] -> the answer's
    topics, [Msg(name=topic, partitions=[...])], in the request's order (the
    two field names as the API's schema has them)."""
    grouped = {}
    for topic, part in results:
        grouped.setdefault(topic, []).append(part)
    return [Msg(**{name: topic, parts: answers}) for topic, answers in grouped.items()]


# --- Produce (0) ----------------------------------------------------------------

@api("""
Produce  key=0  versions=0-12  flexible=9+     # v0-2 advertised, refused (KAFKA-18659)
  request
    transactional_id  string? = null  v3+
    acks  int16
    timeout_ms  int32
    topic_data  []
      name  string
      partition_data  []
        index  int32
        records  records?
  response
    responses  []
      name  string
      partition_responses  []
        index  int32
        error_code  int16
        base_offset  int64
        log_append_time_ms  int64 = -1  v2+
        log_start_offset  int64 = -1  v5+
        record_errors  []  v8+
          batch_index  int32
          batch_index_error_message  string? = null
        error_message  string? = null  v8+
        current_leader  {}  v10+  tag=0        # KIP-951: sent with NOT_LEADER_OR_FOLLOWER, never here
          leader_id  int32 = -1
          leader_epoch  int32 = -1
    throttle_time_ms  int32 = 0  v1+
    node_endpoints  []  v10+  tag=0
      node_id  int32
      host  string
      port  int32
      rack  string? = null
""", min_served=3, classic_max=9)
def handle_produce(ctx, req):
    """Produce: append one record batch per partition (KIP-98 format, magic 2).

    Each batch is checked without reading its records (see validate_produced),
    given offsets, and appended as it came. With acks=1 or -1 the answer waits
    for the group commit's fsync; acks=0 gets no answer at all.

    v0-2 never get here: like Kafka 4.3.1, doze advertises them and closes the
    connection of a client that sends one (see §18).

    Errors: INVALID_REQUIRED_ACKS, UNKNOWN_TOPIC_OR_PARTITION, TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
    INVALID_PRODUCER_ID_MAPPING,
    CORRUPT_MESSAGE (bad length or CRC), INVALID_RECORD, UNSUPPORTED_FOR_MESSAGE_FORMAT,
    MESSAGE_TOO_LARGE, RECORD_LIST_TOO_LARGE, INVALID_PRODUCER_EPOCH,
    OUT_OF_ORDER_SEQUENCE_NUMBER, INVALID_TXN_STATE (transactional batches), KAFKA_STORAGE_ERROR,
    TOPIC_AUTHORIZATION_FAILED (WRITE on the topic); transactional batches need
    WRITE on the transactional id (TRANSACTIONAL_ID_AUTHORIZATION_FAILED, everywhere).
    """
    code = produce_request_error(ctx, req)
    work = produce_all(ctx, req, code)
    if req.acks != 0 and sum(len(t.partition_data) for t in req.topic_data) > PARTITIONS_PER_STEP:
        return in_steps(wide_produce(ctx, work))        # thousands of partitions: in steps
    results = run_steps(work)
    ctx.logs.hurry(plog for plog, _ in ctx.appended)
    if req.acks == 0:
        # No answer is sent, so a failure can only be signalled by closing the
        # connection (Kafka: "closing connection due to error during produce").
        failed = [(t, p.index, p.error_code) for t, p in results if p.error_code]
        return CloseConnection(f"acks=0 produce failed: {failed[:3]}") if failed else NO_RESPONSE

    def respond(expired=False):
        return produce_response(storage_failed(ctx, results)) if durable(ctx, ctx.appended) else None
    if code is not None:
        return respond()
    return Park(respond, keys=[FLUSHED], mute=False)     # answered once fsynced


def produce_all(ctx, req, code):
    """Append every partition's batch (a step generator) -> [(topic, partition answer)]."""
    results = []
    writable = topics_allowed(ctx, AclOperation.WRITE, (t.name for t in req.topic_data)) if code is None else ()
    for topic in req.topic_data:
        for p in topic.partition_data:
            if code is not None or topic.name not in writable:
                results.append((topic.name, Msg(index=p.index, base_offset=-1, error_code=code if code is not None
                                                else ErrorCode.TOPIC_AUTHORIZATION_FAILED)))
            else:
                results.append((topic.name, produce_partition(ctx, topic.name, p.index, p.records,
                                                              req.transactional_id)))
            if len(results) % PARTITIONS_PER_STEP == 0:
                yield
    return results


def wide_produce(ctx, work):
    """A produce over many partitions, in steps: appended, then made durable
    over as many passes of the group commit as that takes."""
    results = yield from work
    while not durable(ctx, ctx.appended):
        yield
    return produce_response(storage_failed(ctx, results))


def produce_response(results):
    return Msg(responses=by_topic(results, parts="partition_responses"))


def produce_request_error(ctx, req):
    """The request-wide checks -> the error every partition gets, or None:
    transactional batches need a transactional id, one producer id, and WRITE
    on the id; acks is 0, 1 or -1; the partitions of transactional batches are
    noted in meta.db (one commit for the whole request)."""
    code = transactional_request_error(req)
    if code is None and req.transactional_id is not None and transactional_batches(req) and \
            not ctx.allowed(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, req.transactional_id):
        code = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    if req.acks not in (0, 1, -1) and code != ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED:
        code = ErrorCode.INVALID_REQUIRED_ACKS
    if code is None and req.transactional_id is not None:
        try:
            ctx.producer_states.mark_transactional([tp for tp in transactional_partitions(req) if tp in ctx.logs.logs])
        except StoreFailed:
            code = ErrorCode.KAFKA_STORAGE_ERROR
    return code


def transactional_request_error(req):
    """Kafka's request-wide checks on transactional batches: they need a
    transactional id, and one producer id for the whole request."""
    producer_ids = {I64.unpack_from(records, BATCH_AT["producer_id"])[0] for _, records in transactional_batches(req)}
    if producer_ids and req.transactional_id is None:
        return ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    if len(producer_ids) > 1:
        return ErrorCode.INVALID_PRODUCER_ID_MAPPING
    return None


def transactional_batches(req):
    """[((topic, partition), records)] of a Produce's batches flagged transactional."""
    return [((t.name, p.index), p.records) for t in req.topic_data for p in t.partition_data
            if p.records is not None and len(p.records) >= BATCH_HEADER_SIZE
            and I16.unpack_from(p.records, BATCH_AT["attributes"])[0] & ATTR_TRANSACTIONAL]


def transactional_partitions(req):
    return [tp for tp, _ in transactional_batches(req)]


def produce_partition(ctx, topic, partition, records, transactional_id=None):
    """Validate and append one partition's batch; -> its partition response.
    An error found before the log is consulted is answered with log_start_offset
    -1, one found by the log's producer-state checks with the real one (Kafka)."""
    plog, in_log = None, False
    try:
        plog = ctx.logs.get(topic, partition)
        if topic in INTERNAL_TOPICS:
            raise KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION, f"Cannot append to internal topic {topic}")
        h = analyze_batch(records, plog.config, f"{topic}-{partition}", ctx.now_ms, ctx.config["doze.check.crc"])
        state = verify_producer(ctx, (topic, partition), h, transactional_id)
        in_log = True
        duplicate = state.check_append(h) if state else None
        if duplicate:
            base, log_append_time = duplicate[0], -1
        else:
            base, log_append_time = ctx.logs.append_as_leader(plog, records, h, ctx.now_ms)
            ctx.appended.append((plog, base + h.last_offset_delta))
            if state:
                state.update(h, base)
        return Msg(index=partition, error_code=ErrorCode.NONE, base_offset=base,
                   log_append_time_ms=log_append_time, log_start_offset=plog.log_start_offset)
    except (KafkaError, BatchError) as e:
        in_log = in_log or getattr(e, "in_log", False)
        return Msg(index=partition, error_code=e.code, base_offset=-1,
                   log_start_offset=plog.log_start_offset if plog and in_log else -1,
                   error_message=str(e) if isinstance(e, BatchError) else e.detail or None,
                   record_errors=[Msg(batch_index=i, batch_index_error_message=why)
                                  for i, why in getattr(e, "record_errors", ())])


def verify_producer(ctx, tp, h, transactional_id):
    """The producer's side of an append (Kafka's analyzeAndValidateProducerState):
    -> the partition's producer state (None for a batch without a producer
    id). A transactional batch's transaction must not be decided, and
    (KIP-890 part 1) the coordinator is asked whether the partition is in
    it, unless the partition has it open already; the partition is noted
    transactional in meta.db before the batch is in the log. With
    transaction.partition.verification.enable=false nobody asks (Kafka before
    3.6): a batch to a partition never added opens a transaction there that
    no marker will close -- a hanging transaction (the demo's lab shows one)."""
    if h.producer_id < 0:
        return None
    state = ctx.producer_states.of(tp)
    if h.attributes & ATTR_TRANSACTIONAL and ctx.api_key == ApiKey.PRODUCE and ctx.version >= 12:
        add_produced_partition(ctx, state, tp, h, transactional_id)
    elif h.attributes & ATTR_TRANSACTIONAL and not ctx.config["transaction.partition.verification.enable"]:
        ctx.producer_states.mark_transactional([tp])
    elif h.attributes & ATTR_TRANSACTIONAL:
        ctx.txns.check_not_decided(transactional_id)
        if not state.has_open_txn(h.producer_id, h.producer_epoch):
            state.note_verification(h.producer_id, h.producer_epoch, h.base_sequence, ctx.now_ms)
            ctx.txns.check_produce(transactional_id, h.producer_id, h.producer_epoch, tp)
        ctx.producer_states.mark_transactional([tp])
    return state


def add_produced_partition(ctx, state, tp, h, transactional_id):
    """Transaction version 2 (Produce v12+): the batch adds its partition to the
    transaction, beginning one if none is open (no AddPartitionsToTxn). A stale
    epoch is refused here first, as Kafka's partition does before it asks the
    coordinator; the coordinator's PRODUCER_FENCED reaches the producer as
    INVALID_PRODUCER_EPOCH, CONCURRENT_TRANSACTIONS as it is."""
    state.check_epoch(h)
    ctx.txns.check_not_decided(transactional_id, ErrorCode.CONCURRENT_TRANSACTIONS)
    if not state.has_open_txn(h.producer_id, h.producer_epoch):
        state.note_verification(h.producer_id, h.producer_epoch, h.base_sequence, ctx.now_ms, epoch_bumps=True)
        try:
            ctx.txns.add_implicitly(transactional_id, h.producer_id, h.producer_epoch, [tp],
                                    cause=f"Produce v{ctx.version} to {tp[0]}-{tp[1]}")
        except KafkaError as e:
            if e.code == ErrorCode.PRODUCER_FENCED:
                raise KafkaError(ErrorCode.INVALID_PRODUCER_EPOCH, e.detail) from None
            raise
    ctx.producer_states.mark_transactional([tp])


# --- Fetch (1) ------------------------------------------------------------------

@api("""
Fetch  key=1  versions=4-12  flexible=12+      # 13+ names topics by id: not served
  request
    cluster_id  string? = null  v12+  tag=0
    replica_id  int32 = -1
    max_wait_ms  int32
    min_bytes  int32
    max_bytes  int32 = 0x7fffffff
    isolation_level  int8 = 0                  # 0 read_uncommitted, 1 read_committed
    session_id  int32 = 0  v7+                 # KIP-227 incremental fetch sessions
    session_epoch  int32 = -1  v7+
    topics  []
      topic  string
      partitions  []
        partition  int32
        current_leader_epoch  int32 = -1  v9+
        fetch_offset  int64
        last_fetched_epoch  int32 = -1  v12+
        log_start_offset  int64 = -1  v5+
        partition_max_bytes  int32
    forgotten_topics_data  []  v7+
      topic  string
      partitions  []int32
    rack_id  string  v11+
  response
    throttle_time_ms  int32
    error_code  int16  v7+
    session_id  int32 = 0  v7+
    responses  []
      topic  string
      partitions  []
        partition_index  int32
        error_code  int16
        high_watermark  int64
        last_stable_offset  int64 = -1
        log_start_offset  int64 = -1  v5+
        aborted_transactions  []?
          producer_id  int64
          first_offset  int64
        preferred_read_replica  int32 = -1  v11+
        records  records?
""")
def handle_fetch(ctx, req):
    """Fetch: read batches from the log, as stored, straight from the file (sendfile).

    Waits up to max_wait_ms until min_bytes are there. Fetch sessions (KIP-227)
    are answered sessionless: session_id 0 tells the client to keep sending
    full requests, which Kafka itself does when its session cache is full.

    Errors: FETCH_SESSION_ID_NOT_FOUND (a session id doze never gave),
    UNKNOWN_TOPIC_OR_PARTITION, OFFSET_OUT_OF_RANGE, TOPIC_AUTHORIZATION_FAILED
    (READ on the topic; a follower's fetch needs CLUSTER_ACTION on the cluster).
    """
    if req.session_id != 0:
        raise KafkaError(ErrorCode.FETCH_SESSION_ID_NOT_FOUND, "doze keeps no fetch sessions")
    deadline = ctx.now_ms + max(req.max_wait_ms, 0)
    if req.replica_id >= 0:
        readable = {t.topic for t in req.topics} if ctx.allowed(
            AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER, CLUSTER_NAME) else set()
    else:
        readable = topics_allowed(ctx, AclOperation.READ, (t.topic for t in req.topics))

    def poll(expired=False):
        results, total = fetch_partitions(ctx, req, readable)
        if total >= req.min_bytes or expired or req.max_wait_ms <= 0:
            return Msg(responses=by_topic(results, name="topic"))
        return None
    response = poll()
    if response is not None:
        return response
    keys = [(t.topic, p.partition) for t in req.topics for p in t.partitions]
    return Park(poll, deadline_ms=deadline, keys=keys, early=True)


def fetch_partitions(ctx, req, readable):
    """-> ([(topic, partition response)], bytes of records found)."""
    results, total, budget = [], 0, req.max_bytes
    read_committed = req.isolation_level == 1
    for t in req.topics:
        for p in t.partitions:
            part = Msg(partition_index=p.partition, high_watermark=-1, last_stable_offset=-1,
                       log_start_offset=-1, records=b"", aborted_transactions=[])
            results.append((t.topic, part))
            if t.topic not in readable:
                part.error_code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
                continue
            try:
                plog = ctx.logs.get(t.topic, p.partition)
                check_leader_epoch(p.current_leader_epoch)
            except KafkaError as e:
                part.error_code = e.code
                continue
            end = ctx.producer_states.last_stable_offset(plog) if read_committed else plog.high_watermark
            part.aborted_transactions = [] if read_committed else None
            part.high_watermark = plog.high_watermark
            part.last_stable_offset = ctx.producer_states.last_stable_offset(plog)
            part.log_start_offset = plog.log_start_offset
            if p.fetch_offset < plog.log_start_offset or p.fetch_offset > plog.next_offset:
                part.error_code = ErrorCode.OFFSET_OUT_OF_RANGE
                part.high_watermark = part.last_stable_offset = part.log_start_offset = -1
                continue
            limit = min(p.partition_max_bytes, budget)
            records = plog.read(p.fetch_offset, limit, end, min_one=(total == 0)) if limit > 0 else None
            part.records = records if records is not None else b""
            table = ctx.producer_states.get((t.topic, p.partition))
            if read_committed and records is not None and table is not None:
                part.aborted_transactions = [
                    Msg(producer_id=pid, first_offset=first)
                    for pid, first in table.aborted_between(p.fetch_offset, records.end_offset)]
            if records is not None:
                total += len(records)
                budget -= len(records)
    return results, total


def check_leader_epoch(current_leader_epoch):
    """A client's idea of the leader epoch (KIP-320) against doze's, which is
    always 0: older is FENCED_LEADER_EPOCH, newer UNKNOWN_LEADER_EPOCH; -1 skips it."""
    if current_leader_epoch == -1 or current_leader_epoch == 0:
        return
    raise KafkaError(ErrorCode.FENCED_LEADER_EPOCH if current_leader_epoch < 0
                     else ErrorCode.UNKNOWN_LEADER_EPOCH, f"leader epoch {current_leader_epoch}")


# --- ListOffsets (2) ------------------------------------------------------------

LATEST_TIMESTAMP, EARLIEST_TIMESTAMP, MAX_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP = -1, -2, -3, -4
LATEST_TIERED_TIMESTAMP, EARLIEST_PENDING_UPLOAD_TIMESTAMP = -5, -6
# The special (negative) timestamps and the first version that knows each
# (KIP-734, KIP-405, KIP-1005, KIP-1023); Kafka 4.3.1 answers any other
# negative timestamp, or one too new for the version, with UNSUPPORTED_VERSION.
SPECIAL_TIMESTAMP_VERSIONS = {LATEST_TIMESTAMP: 0, EARLIEST_TIMESTAMP: 0, MAX_TIMESTAMP: 7,
                              EARLIEST_LOCAL_TIMESTAMP: 8, LATEST_TIERED_TIMESTAMP: 9,
                              EARLIEST_PENDING_UPLOAD_TIMESTAMP: 11}


@api("""
ListOffsets  key=2  versions=1-11  flexible=6+
  request
    replica_id  int32
    isolation_level  int8  v2+
    topics  []
      name  string
      partitions  []
        partition_index  int32
        current_leader_epoch  int32 = -1  v4+
        timestamp  int64
    timeout_ms  int32  v10+
  response
    throttle_time_ms  int32  v2+
    topics  []
      name  string
      partitions  []
        partition_index  int32
        error_code  int16
        timestamp  int64 = -1
        offset  int64 = -1
        leader_epoch  int32 = -1  v4+
""")
def handle_list_offsets(ctx, req):
    """ListOffsets: an offset by time. -1 latest (the high watermark, or the last
    stable offset for read_committed), -2 earliest, -3 the record with the
    largest timestamp (KIP-734), -4 earliest local; otherwise the first record
    whose timestamp is at or after the one given. Lookups by time read a
    batch's records, so the answer is worked out in steps.

    Errors: UNKNOWN_TOPIC_OR_PARTITION, TOPIC_AUTHORIZATION_FAILED (DESCRIBE on the topic).
    """
    return in_steps(list_offsets(ctx, req))


def list_offsets(ctx, req):
    results = []
    asked = collections.Counter((t.name, p.partition_index) for t in req.topics for p in t.partitions)
    described = topics_allowed(ctx, AclOperation.DESCRIBE, (t.name for t in req.topics))
    for t in req.topics:
        for p in t.partitions:
            tp = (t.name, p.partition_index)
            if t.name not in described:
                results.append((t.name, Msg(partition_index=p.partition_index,
                                            error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED)))
                continue
            if asked[tp] == 0:
                continue                    # a duplicate, already answered
            part = Msg(partition_index=p.partition_index)
            results.append((t.name, part))
            try:
                if asked[tp] > 1:           # Kafka: one answer, INVALID_REQUEST
                    raise KafkaError(ErrorCode.INVALID_REQUEST, "duplicate partition")
                asked[tp] = 0
                plog = ctx.logs.get(*tp)
                check_leader_epoch(p.current_leader_epoch)
                if SPECIAL_TIMESTAMP_VERSIONS.get(p.timestamp, 0 if p.timestamp >= 0 else 99) > ctx.version:
                    raise KafkaError(ErrorCode.UNSUPPORTED_VERSION, f"timestamp {p.timestamp}")
            except KafkaError as e:
                asked[tp] = 0
                part.error_code = e.code
                continue
            part.offset, part.timestamp = yield from list_offset(ctx, plog, p.timestamp,
                                                                 req.isolation_level)
            part.leader_epoch = 0 if part.offset >= 0 else -1
            yield
    return Msg(topics=by_topic(results))


def list_offset(ctx, plog, timestamp, isolation_level):
    """-> (offset, timestamp) for one ListOffsets partition (a step generator)."""
    if timestamp == LATEST_TIMESTAMP:
        return (ctx.producer_states.last_stable_offset(plog) if isolation_level == 1 else plog.high_watermark), -1
    if timestamp in (EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP):
        return plog.log_start_offset, -1
    if timestamp == MAX_TIMESTAMP:
        found = yield from plog.offset_of_max_timestamp()
    elif timestamp >= 0:
        found = yield from plog.offset_for_timestamp(timestamp)
    else:
        found = None                  # -5, -6: tiered-storage offsets; doze has no tiers
    bound = ctx.producer_states.last_stable_offset(plog) if isolation_level == 1 else plog.high_watermark
    if found is None or found[0] >= bound:
        return -1, -1
    return found


# --- Metadata (3) ---------------------------------------------------------------


@api("""
Metadata  key=3  versions=0-12  flexible=9+
  request
    topics  []?1+                              # null (v1+): all topics; v0: an empty list
      topic_id  uuid  v10+
      name  string?10+
    allow_auto_topic_creation  bool = true  v4+
    include_cluster_authorized_operations  bool  v8-10
    include_topic_authorized_operations  bool  v8+
  response
    throttle_time_ms  int32  v3+
    brokers  []
      node_id  int32
      host  string
      port  int32
      rack  string? = null  v1+
    cluster_id  string? = null  v2+
    controller_id  int32 = -1  v1+
    topics  []
      error_code  int16
      name  string?12+
      topic_id  uuid  v10+
      is_internal  bool = false  v1+
      partitions  []
        error_code  int16
        partition_index  int32
        leader_id  int32
        leader_epoch  int32 = -1  v7+
        replica_nodes  []int32
        isr_nodes  []int32
        offline_replicas  []int32  v5+
      topic_authorized_operations  int32 = -2147483648  v8+
    cluster_authorized_operations  int32 = -2147483648  v8-10
""")
def handle_metadata(ctx, req):
    """Metadata: the brokers (this one) and the topics asked for, creating missing
    ones when the client allows it and auto.create.topics.enable is on.

    Errors per topic: UNKNOWN_TOPIC_OR_PARTITION, INVALID_TOPIC_EXCEPTION, UNKNOWN_TOPIC_ID,
    TOPIC_AUTHORIZATION_FAILED (DESCRIBE on a topic named, whether it exists or
    not; CREATE on the cluster or the topic to auto-create it). Asked for all,
    the topics without DESCRIBE are left out.
    """
    node_id, host, port = ctx.node(ctx.conn)
    if ctx.version < 12 and any(t.name is None or t.topic_id != UUID_ZERO for t in req.topics or ()):
        # Kafka takes topic ids only from v12 (KafkaApis.handleTopicMetadataRequest):
        # every topic gets INVALID_REQUEST, a null name is "" (MetadataRequest.getErrorResponse)
        return metadata_error(req, ErrorCode.INVALID_REQUEST)
    if any(t.name is None and t.topic_id == UUID_ZERO for t in req.topics or ()):
        return metadata_error(req, ErrorCode.UNKNOWN_SERVER_ERROR)    # Kafka 4.3.1 fails so
    return Msg(brokers=[Msg(node_id=node_id, host=host, port=port)],
               cluster_id=ctx.store.get_setting("cluster_id"), controller_id=node_id,
               topics=metadata_topics(ctx, req, node_id),
               cluster_authorized_operations=cluster_operations(ctx)
               if req.include_cluster_authorized_operations else -2147483648)


def metadata_topics(ctx, req, node_id):
    """The topics of a Metadata answer: those asked for (null: every topic
    the principal may DESCRIBE), auto-created where allowed, in Kafka's order."""
    if req.topics is None or (ctx.version == 0 and not req.topics):
        wanted = [Msg(name=name, topic_id=UUID_ZERO) for name in sorted(ctx.logs.topics)
                  if ctx.allowed(AclOperation.DESCRIBE, ResourceType.TOPIC, name, log_denial=False)]
    else:
        wanted = req.topics
    create_denied = []
    topics = [describe_topic(ctx, t, req.allow_auto_topic_creation or ctx.version < 4, node_id, create_denied)
              for t in wanted]
    for t in topics:
        if req.include_topic_authorized_operations and t.error_code not in (
                ErrorCode.TOPIC_AUTHORIZATION_FAILED, ErrorCode.UNKNOWN_TOPIC_ID):
            t.topic_authorized_operations = ctx.operations(ResourceType.TOPIC, t.name)
    if ctx.authorizer is not None:    # Kafka's order: unknown ids, described, refused CREATE, refused DESCRIBE
        topics.sort(key=lambda t: 0 if t.error_code == ErrorCode.UNKNOWN_TOPIC_ID else
                    1 if t.error_code != ErrorCode.TOPIC_AUTHORIZATION_FAILED else
                    2 if any(t is d for d in create_denied) else 3)
    return topics


def cluster_operations(ctx):
    """The cluster's authorized-operations bitfield: 0 without DESCRIBE on it (AuthHelper)."""
    if not ctx.allowed(AclOperation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME, log_denial=False):
        return 0
    return ctx.operations(ResourceType.CLUSTER, CLUSTER_NAME)


def metadata_error(req, code):
    """Kafka's answer to a Metadata request it refuses as a whole: every topic
    with the error, no brokers, no cluster id."""
    return Msg(brokers=[], cluster_id=None, controller_id=-1,
               topics=[Msg(error_code=code, name=t.name or "", topic_id=t.topic_id) for t in req.topics])


def describe_topic(ctx, wanted, may_create, node_id, create_denied=None):
    name = wanted.name
    if name is None:                                     # v10+: asked for by id
        name = next((n for n, t in ctx.logs.topics.items() if t.topic_id == wanted.topic_id), None)
        if name is None:
            return Msg(error_code=ErrorCode.UNKNOWN_TOPIC_ID, name=None, topic_id=wanted.topic_id)
    internal = name in INTERNAL_TOPICS                  # shown so even while missing
    if not ctx.allowed(AclOperation.DESCRIBE, ResourceType.TOPIC, name):
        return Msg(error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED, name=wanted.name, topic_id=wanted.topic_id,
                   is_internal=False)
    topic = ctx.logs.topics.get(name)
    if topic is None:
        if not TOPIC_NAME.fullmatch(name) or name in (".", ".."):
            return Msg(error_code=ErrorCode.INVALID_TOPIC_EXCEPTION, name=name)
        if not (may_create and ctx.config["auto.create.topics.enable"]):
            return Msg(error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, name=name, is_internal=internal)
        if not (ctx.allowed(AclOperation.CREATE, ResourceType.CLUSTER, CLUSTER_NAME, log_denial=False)
                or ctx.allowed(AclOperation.CREATE, ResourceType.TOPIC, name)):
            denied = Msg(error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED, name=name, is_internal=internal)
            if create_denied is not None:
                create_denied.append(denied)
            return denied
        return auto_create(ctx, name, internal)
    count = topic.partitions
    offline = ctx.logs.offline_partitions(name)
    partitions = [partition_metadata(p, node_id, p in offline) for p in range(count)] if offline else \
        Memo(("metadata", count, node_id), lambda: [partition_metadata(p, node_id) for p in range(count)])
    return Msg(error_code=ErrorCode.NONE, name=name, topic_id=topic.topic_id, is_internal=internal,
               partitions=partitions)


def partition_metadata(p, node_id, offline=False):
    """A partition's Metadata entry; offline as KRaft shows a partition whose
    only replica's directory failed: no leader, the broker in offline_replicas."""
    if offline:
        return Msg(partition_index=p, error_code=ErrorCode.LEADER_NOT_AVAILABLE, leader_id=-1, leader_epoch=0,
                   replica_nodes=[node_id], isr_nodes=[], offline_replicas=[node_id])
    return Msg(partition_index=p, leader_id=node_id, leader_epoch=0, replica_nodes=[node_id], isr_nodes=[node_id])


def auto_create(ctx, name, internal):
    """Metadata's auto-creation. doze makes a topic at once and describes it
    (Kafka answers UNKNOWN_TOPIC_OR_PARTITION until its controller has: a named
    difference); an internal topic is made as Kafka makes it and answered as
    Kafka answers, UNKNOWN_TOPIC_OR_PARTITION this time; a name Kafka's
    controller would refuse later (a collision) is UNKNOWN_TOPIC_OR_PARTITION too."""
    try:
        if internal:
            if name != "__share_group_state":
                ctx.logs.ensure_internal_topic(name)
            return Msg(error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, name=name, is_internal=True)
        partitions, configs = ctx.logs.check_new_topic(name, -1, -1, {})
        run_steps(ctx.logs.create_topic(name, partitions, configs))    # num.partitions: few
    except KafkaError as e:
        code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if e.code == ErrorCode.INVALID_TOPIC_EXCEPTION else e.code
        return Msg(error_code=code, name=name)
    except OSError as e:
        log.error("auto-creating topic %s failed: %s", name, e)
        return Msg(error_code=ErrorCode.UNKNOWN_SERVER_ERROR, name=name)
    return describe_topic(ctx, Msg(name=name, topic_id=UUID_ZERO), False, ctx.node(ctx.conn)[0])


# --- ApiVersions (18) -----------------------------------------------------------

SOFTWARE_NAME_VERSION = re.compile(r"[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?")


@api("""
ApiVersions  key=18  versions=0-4  flexible=3+
  request
    client_software_name  string  v3+
    client_software_version  string  v3+
  response
    error_code  int16
    api_keys  []
      api_key  int16
      min_version  int16
      max_version  int16
    throttle_time_ms  int32  v1+
    supported_features  []  v3+  tag=0        # KIP-584: the features doze knows, their levels
      name  string
      min_version  int16
      max_version  int16
    finalized_features_epoch  int64 = -1  v3+  tag=1
    finalized_features  []  v3+  tag=2        # the levels in force (transaction.version)
      name  string
      max_version_level  int16
      min_version_level  int16
    zk_migration_ready  bool = false  v3+  tag=3
""")
def handle_api_versions(ctx, req):
    """ApiVersions: which versions of which APIs doze speaks, built from HANDLERS.

    v3+ carries the finalized features (KIP-584): transaction.version 1 by
    default, so every client uses the classic transaction protocol; at 2 the
    versions of KIP-890's transaction version 2 are listed with it (§12's Features).
    A request version doze does not know is answered by the dispatcher with
    UNSUPPORTED_VERSION and this same list, in the v0 format (KIP-511).

    Errors: INVALID_REQUEST (v3+: a client software name or version that is not
    letters, digits, '.' and '-', as KIP-511 requires).
    """
    if ctx.version >= 3 and not (SOFTWARE_NAME_VERSION.fullmatch(req.client_software_name)
                                 and SOFTWARE_NAME_VERSION.fullmatch(req.client_software_version)):
        return Msg(error_code=ErrorCode.INVALID_REQUEST, api_keys=[])
    if ctx.conn.sasl is not None:
        ctx.conn.sasl.versions_answered()
    features = ctx.txns.features
    return Msg(api_keys=api_versions_list(features.transaction_version),
               supported_features=features.supported(ctx.version), finalized_features_epoch=features.epoch,
               finalized_features=features.finalized())


def api_versions_list(transaction_version):
    return [Msg(api_key=int(key), min_version=spec.min_version,
                max_version=spec.advertised_max(transaction_version)) for key, (spec, _) in sorted(HANDLERS.items())]


# --- DeleteRecords (21) ---------------------------------------------------------

@api("""
DeleteRecords  key=21  versions=0-2  flexible=2+
  request
    topics  []
      name  string
      partitions  []
        partition_index  int32
        offset  int64                          # -1: the high watermark
    timeout_ms  int32
  response
    throttle_time_ms  int32
    topics  []
      name  string
      partitions  []
        partition_index  int32
        low_watermark  int64
        error_code  int16
""")
def handle_delete_records(ctx, req):
    """DeleteRecords: raise the log start offset; whole segments below it go.

    Errors: UNKNOWN_TOPIC_OR_PARTITION, OFFSET_OUT_OF_RANGE (beyond the high watermark),
    POLICY_VIOLATION (cleanup.policy=compact alone: Kafka keeps such records),
    TOPIC_AUTHORIZATION_FAILED (DELETE on the topic).
    In steps: each partition's segment files are work for the loop.
    """
    return in_steps(delete_records(ctx, req))


def delete_records(ctx, req):
    results, moves = [], []
    deletable = topics_allowed(ctx, AclOperation.DELETE, (t.name for t in req.topics))
    for t in req.topics:
        for p in t.partitions:
            part = Msg(partition_index=p.partition_index, low_watermark=-1)
            results.append((t.name, part))
            if t.name not in deletable:
                part.error_code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
                continue
            try:
                plog = ctx.logs.get(t.name, p.partition_index)
                if t.name in INTERNAL_TOPICS:
                    raise KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION,
                                     f"Cannot delete records of internal topic {t.name}")
                if "delete" not in ctx.logs.topic_config(t.name, "cleanup.policy"):
                    raise KafkaError(ErrorCode.POLICY_VIOLATION, "a compacted topic keeps its records")
                offset = plog.high_watermark if p.offset == -1 else p.offset
                if offset < 0 or offset > plog.high_watermark:
                    raise KafkaError(ErrorCode.OFFSET_OUT_OF_RANGE)
                moves.append((plog, offset, part))
            except KafkaError as e:
                part.error_code = e.code
            yield
    moved = yield from ctx.logs.delete_records([(plog, offset) for plog, offset, _ in moves])
    for plog, offset, part in moves:
        if plog not in moved:               # a DeleteTopics came between two steps
            part.error_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            continue
        part.low_watermark = max(plog.log_start_offset, offset)
    return Msg(topics=by_topic(results))


# --- DescribeCluster (60) -------------------------------------------------------

@api("""
DescribeCluster  key=60  versions=0-1  flexible=0+
  request
    include_cluster_authorized_operations  bool
    endpoint_type  int8 = 1  v1+               # 1 brokers, 2 controllers
  response
    throttle_time_ms  int32
    error_code  int16
    error_message  string? = null
    endpoint_type  int8 = 1  v1+
    cluster_id  string
    controller_id  int32 = -1
    brokers  []
      broker_id  int32
      host  string
      port  int32
      rack  string? = null
    cluster_authorized_operations  int32 = -2147483648
""")
def handle_describe_cluster(ctx, req):
    """DescribeCluster (KIP-700): this broker, which is also the controller.
    Errors: UNSUPPORTED_ENDPOINT_TYPE for an endpoint type other than brokers or controllers."""
    if req.endpoint_type == 2:                  # controllers: not this (broker) listener
        return Msg(error_code=ErrorCode.MISMATCHED_ENDPOINT_TYPE, endpoint_type=1,
                   cluster_id=ctx.store.get_setting("cluster_id"), controller_id=-1,
                   error_message="The request was sent to an endpoint of type BROKER, but we "
                                 "wanted an endpoint of type CONTROLLER")
    if req.endpoint_type != 1:
        raise KafkaError(ErrorCode.UNSUPPORTED_ENDPOINT_TYPE, f"endpoint type {req.endpoint_type}")
    node_id, host, port = ctx.node(ctx.conn)
    return Msg(endpoint_type=req.endpoint_type, cluster_id=ctx.store.get_setting("cluster_id"),
               controller_id=node_id, brokers=[Msg(broker_id=node_id, host=host, port=port)],
               cluster_authorized_operations=cluster_operations(ctx)
               if req.include_cluster_authorized_operations else -2147483648)


# --- DescribeTopicPartitions (75) -----------------------------------------------

MAX_REQUEST_PARTITION_SIZE_LIMIT = 2000    # Kafka's max.request.partition.size.limit


@api("""
DescribeTopicPartitions  key=75  versions=0-0  flexible=0+     # KIP-966: kafka-topics --describe
  request
    topics  []
      name  string
    response_partition_limit  int32 = 2000
    cursor  {}? = null
      topic_name  string
      partition_index  int32
  response
    throttle_time_ms  int32 = 0
    topics  []
      error_code  int16
      name  string?
      topic_id  uuid
      is_internal  bool = false
      partitions  []
        error_code  int16
        partition_index  int32
        leader_id  int32
        leader_epoch  int32 = -1
        replica_nodes  []int32
        isr_nodes  []int32
        eligible_leader_replicas  []int32? = null
        last_known_elr  []int32? = null
        offline_replicas  []int32
      topic_authorized_operations  int32 = -2147483648
    next_cursor  {}? = null
      topic_name  string
      partition_index  int32
""")
def handle_describe_topic_partitions(ctx, req):
    """DescribeTopicPartitions: Metadata's partitions, paged. Topics sorted by
    name from the cursor's, at most response_partition_limit partitions (and
    2000) an answer; next_cursor says where the next page starts -- the order
    and the edge cases of Kafka's KRaftMetadataCache.describeTopicResponse.
    No topics named: every topic, unknown ones left out. Topics without
    DESCRIBE are left out, or, named, answered TOPIC_AUTHORIZATION_FAILED last.

    Errors (per topic): INVALID_REQUEST (for every named topic: a cursor topic
    not among them, or a negative cursor partition), UNKNOWN_TOPIC_OR_PARTITION,
    INVALID_TOPIC_EXCEPTION.
    """
    everything = not req.topics
    after = req.cursor.topic_name if req.cursor else ""
    names = sorted({n for n in (ctx.logs.topics if everything else (t.name for t in req.topics)) if n >= after})
    if req.cursor and (not everything and req.cursor.topic_name not in names or req.cursor.partition_index < 0):
        return Msg(topics=[Msg(error_code=ErrorCode.INVALID_REQUEST, name=t.name, topic_id=UUID_ZERO,
                               partitions=[]) for t in req.topics])           # Kafka's getErrorResponse
    described = topics_allowed(ctx, AclOperation.DESCRIBE, names)
    refused = [] if everything else [
        Msg(error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED, name=n, topic_id=UUID_ZERO, is_internal=False,
            partitions=[]) for n in names if n not in described]
    topics, cursor = topic_partitions_page(ctx, req, [n for n in names if n in described], everything)
    return Msg(topics=topics + refused, next_cursor=cursor)


def topic_partitions_page(ctx, req, names, everything):
    """The page: from the cursor on, at most the partition limit -> (topics, the next cursor or None)."""
    remaining = max(min(MAX_REQUEST_PARTITION_SIZE_LIMIT, req.response_partition_limit), 1)
    after = req.cursor.topic_name if req.cursor else ""
    node_id, topics = ctx.node(ctx.conn)[0], []
    for name in names:
        if remaining == 0:
            return topics, Msg(topic_name=name, partition_index=0)
        topic = ctx.logs.topics.get(name)
        if topic is None:
            if not everything:
                bad = not TOPIC_NAME.fullmatch(name) or name in (".", "..")
                topics.append(Msg(error_code=ErrorCode.INVALID_TOPIC_EXCEPTION if bad else
                                  ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, name=name, topic_id=UUID_ZERO,
                                  is_internal=name in INTERNAL_TOPICS, partitions=[],
                                  topic_authorized_operations=ctx.operations(ResourceType.TOPIC, name)))
            continue
        start = req.cursor.partition_index if req.cursor and name == after else 0
        upper = min(topic.partitions, start + remaining)
        topics.append(partitions_page(topic, range(start, upper), node_id, ctx.operations(ResourceType.TOPIC, name)))
        if upper < topic.partitions:
            return topics, Msg(topic_name=name, partition_index=upper)
        remaining -= max(0, upper - start)
    return topics, None


def partitions_page(topic, indexes, node_id, operations):
    """One topic of a DescribeTopicPartitions answer: these partitions, all led here."""
    return Msg(error_code=ErrorCode.NONE, name=topic.name, topic_id=topic.topic_id,
               is_internal=topic.name in INTERNAL_TOPICS, topic_authorized_operations=operations,
               partitions=[Msg(error_code=ErrorCode.NONE, partition_index=p, leader_id=node_id, leader_epoch=0,
                               replica_nodes=[node_id], isr_nodes=[node_id], eligible_leader_replicas=[],
                               last_known_elr=[], offline_replicas=[]) for p in indexes])


###############################################################################
# 15. GROUP AND TRANSACTION APIS -- the coordinators' protocols, in API-key order
###############################################################################
# The handlers of the APIs a consumer group and a transactional producer
# speak. Each checks authorization and the request's shape, then hands the
# step to its coordinator (§9 GroupCoordinator, §12 TransactionCoordinator),
# which knows nothing of sockets; a request that must wait (a JoinGroup until
# the group's members are in, an EndTxn until its markers are durable) is a
# Park its coordinator wakes.

# --- OffsetCommit (8) -----------------------------------------------------------

@api("""
OffsetCommit  key=8  versions=2-9  flexible=8+     # 10 names topics by id: not served
  request
    group_id  string
    generation_id_or_member_epoch  int32 = -1
    member_id  string
    group_instance_id  string? = null  v7+
    retention_time_ms  int64 = -1  v2-4
    topics  []
      name  string
      partitions  []
        partition_index  int32
        committed_offset  int64
        committed_leader_epoch  int32 = -1  v6+
        committed_metadata  string?
  response
    throttle_time_ms  int32  v3+
    topics  []
      name  string
      partitions  []
        partition_index  int32
        error_code  int16
""")
def handle_offset_commit(ctx, req):
    """OffsetCommit: store a group's consumer positions, durably, before answering.
    A commit with generation -1 and no member is a "simple" commit, allowed
    while the group has no members (admin tools, assign()-based consumers).

    Errors: ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID,
    REBALANCE_IN_PROGRESS, INVALID_GROUP_ID, UNKNOWN_TOPIC_OR_PARTITION,
    OFFSET_METADATA_TOO_LARGE (12).
    """
    refused = error_code_of(ctx.require, AclOperation.READ, ResourceType.GROUP, req.group_id)
    request_error = refused or error_code_of(   # (Kafka 4.3.1 accepts even the group id "" here)
        ctx.groups.check_commit, req.group_id, req.generation_id_or_member_epoch, req.member_id,
        req.group_instance_id, False, ctx.version, [(t.name, p.partition_index) for t in req.topics
                                                     for p in t.partitions])
    results, offsets = offsets_to_commit(ctx, req.topics, refused, request_error, unknown_first=True)
    if offsets:
        try:
            ctx.groups.commit(req.group_id, offsets)
        except KafkaError as e:                 # meta.db refused it: NOT_COORDINATOR, on each
            for t, part in results:
                if (t, part.partition_index) in offsets:
                    part.error_code = e.code
    return Msg(topics=by_topic(results))


def offsets_to_commit(ctx, topics, refused, request_error, unknown_first):
    """The per-partition checks OffsetCommit and TxnOffsetCommit share ->
    ([(topic, partition answer)], {(topic, partition): OffsetEntry} that
    passed them). `refused`: an authorization error every partition gets;
    a topic the principal may not READ: TOPIC_AUTHORIZATION_FAILED; then
    `request_error` (the group's or the transaction's verdict), on a
    partition that exists when `unknown_first` (OffsetCommit), else on every
    one (TxnOffsetCommit), as Kafka 4.3.1 answers; then an unknown
    partition, then metadata over offset.metadata.max.bytes."""
    results, offsets = [], {}
    readable = set() if refused else topics_allowed(ctx, AclOperation.READ, (t.name for t in topics))
    limit = ctx.config["offset.metadata.max.bytes"]
    for t in topics:
        for p in t.partitions:
            tp = (t.name, p.partition_index)
            known = tp in ctx.logs.logs
            if refused or t.name not in readable:
                code = refused or ErrorCode.TOPIC_AUTHORIZATION_FAILED
            elif request_error and (known or not unknown_first):
                code = request_error
            elif not known:
                code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            elif p.committed_metadata and len(p.committed_metadata.encode()) > limit:
                code = ErrorCode.OFFSET_METADATA_TOO_LARGE
            else:
                code = ErrorCode.NONE
                offsets[tp] = OffsetEntry(p.committed_offset, p.committed_leader_epoch, p.committed_metadata or "",
                                          ctx.now_ms)
            results.append((t.name, Msg(partition_index=p.partition_index, error_code=code)))
    return results, offsets


# --- OffsetFetch (9) ------------------------------------------------------------

@api("""
OffsetFetch  key=9  versions=1-9  flexible=6+      # 10 names topics by id: not served
  request
    group_id  string  v1-7
    topics  []?2-7  v1-7                       # null (v2+): every partition with an offset
      name  string
      partition_indexes  []int32
    groups  []  v8+                            # KIP-709: several groups at once
      group_id  string
      member_id  string? = null  v9+
      member_epoch  int32 = -1  v9+
      topics  []?
        name  string
        partition_indexes  []int32
    require_stable  bool = false  v7+          # KIP-447
  response
    throttle_time_ms  int32  v3+
    topics  []  v1-7
      name  string
      partitions  []
        partition_index  int32
        committed_offset  int64
        committed_leader_epoch  int32 = -1  v5-7
        metadata  string?
        error_code  int16
    error_code  int16 = 0  v2-7
    groups  []  v8+
      group_id  string
      topics  []
        name  string
        partitions  []
          partition_index  int32
          committed_offset  int64
          committed_leader_epoch  int32 = -1
          metadata  string?
          error_code  int16
      error_code  int16 = 0
""")
def handle_offset_fetch(ctx, req):
    """OffsetFetch: a group's committed positions (-1 where none).

    Errors per partition: UNSTABLE_OFFSET_COMMIT with require_stable while a
    transaction has offsets staged for it (KIP-447), TOPIC_AUTHORIZATION_FAILED
    (DESCRIBE on a topic named; asked for all, such topics are left out). Per
    group (v8+; before: the top-level error; v1: an empty answer):
    GROUP_AUTHORIZATION_FAILED (DESCRIBE on the group).
    """
    if ctx.version >= 8:
        out = []
        for g in req.groups:
            error = error_code_of(ctx.require, AclOperation.DESCRIBE, ResourceType.GROUP, g.group_id) or \
                error_code_of(ctx.groups.check_fetch, g.group_id, g.member_id, g.member_epoch)
            out.append(Msg(group_id=g.group_id, error_code=error, topics=[] if error else offset_fetch_topics(
                ctx, g.group_id, g.topics, req.require_stable)))
        return Msg(groups=out)
    error = error_code_of(ctx.require, AclOperation.DESCRIBE, ResourceType.GROUP, req.group_id)
    if error and ctx.version < 2:            # no top-level error yet: on each partition asked for
        return Msg(topics=[Msg(name=t.name, partitions=[
            Msg(partition_index=p, committed_offset=-1, metadata="", error_code=error)
            for p in t.partition_indexes]) for t in req.topics or ()])
    if error:
        return Msg(error_code=error, topics=[])
    return Msg(topics=offset_fetch_topics(ctx, req.group_id, req.topics, req.require_stable))


def offset_fetch_topics(ctx, group_id, topics, require_stable):
    wanted = None if topics is None else [(t.name, p) for t in topics for p in t.partition_indexes]
    found = ctx.groups.fetch_offsets(group_id, wanted)
    unstable = ctx.txns.staged_partitions(group_id) if require_stable else set()
    described = topics_allowed(ctx, AclOperation.DESCRIBE, (t for t, _ in found))
    results = []
    for (topic, partition), entry in found.items():
        if topic not in described:
            if wanted is not None:
                results.append((topic, Msg(partition_index=partition, committed_offset=-1, metadata="",
                                           error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED)))
            continue
        if (topic, partition) in unstable:             # KIP-447: wait for the transaction
            results.append((topic, Msg(partition_index=partition, committed_offset=-1, metadata="",
                                       error_code=ErrorCode.UNSTABLE_OFFSET_COMMIT)))
            continue
        results.append((topic, Msg(partition_index=partition, error_code=ErrorCode.NONE,
                                   committed_offset=entry.offset if entry else -1,
                                   committed_leader_epoch=entry.leader_epoch if entry else -1,
                                   metadata=entry.metadata if entry else "")))
    return by_topic(results)


# --- FindCoordinator (10) -------------------------------------------------------

COORDINATOR_GROUP, COORDINATOR_TRANSACTION = 0, 1


@api("""
FindCoordinator  key=10  versions=0-5  flexible=3+
  request
    key  string  v0-3
    key_type  int8 = 0  v1+                    # 0 group, 1 transaction
    coordinator_keys  []string  v4+            # KIP-699: batched
  response
    throttle_time_ms  int32  v1+
    error_code  int16  v0-3
    error_message  string?  v1-3
    node_id  int32  v0-3
    host  string  v0-3
    port  int32  v0-3
    coordinators  []  v4+
      key  string
      node_id  int32
      host  string
      port  int32
      error_code  int16
      error_message  string?
""")
def handle_find_coordinator(ctx, req):
    """FindCoordinator: which broker coordinates a group or a transactional id.
    Kafka hashes the key onto a partition of __consumer_offsets or
    __transaction_state; doze is one broker, so the answer is always "me".

    Errors: INVALID_REQUEST (an unknown key type), COORDINATOR_NOT_AVAILABLE (the
    first time: the internal topic is being made, as in Kafka).
    """
    if ctx.version >= 4:
        return Msg(coordinators=[coordinator(ctx, req.key_type, k) for k in req.coordinator_keys])
    answer = coordinator(ctx, req.key_type, req.key)
    del answer.key                                  # before v4 the answer is the one entry
    return answer


COORDINATOR_RESOURCE = {COORDINATOR_GROUP: ResourceType.GROUP, COORDINATOR_TRANSACTION: ResourceType.TRANSACTIONAL_ID}


def coordinator(ctx, key_type, key):
    """One key's answer (a coordinators entry of v4+, the whole answer before)."""
    node_id, host, port = ctx.node(ctx.conn)
    rtype = COORDINATOR_RESOURCE.get(key_type)
    code, message = ErrorCode.NONE, None
    if rtype is None:
        code = ErrorCode.INVALID_REQUEST
    elif not ctx.allowed(AclOperation.DESCRIBE, rtype, key):
        code = AUTHORIZATION_FAILED[rtype]
        message = KAFKA_ERROR_MESSAGES[code]
    elif not internal_topic_ready(ctx, CONSUMER_OFFSETS if key_type == COORDINATOR_GROUP else TRANSACTION_STATE) \
            and ctx.config["doze.coordinator.waits.for.topic"]:
        code, message = ErrorCode.COORDINATOR_NOT_AVAILABLE, ""      # Kafka: while it creates the topic
    if code:
        node_id, host, port = -1, "", -1
    return Msg(key=key, node_id=node_id, host=host, port=port, error_code=code, error_message=message)


def internal_topic_ready(ctx, name):
    """Kafka creates __consumer_offsets / __transaction_state on the first
    FindCoordinator that needs it, answering COORDINATOR_NOT_AVAILABLE meanwhile
    (clients retry); doze does the same, so tools see the same topics."""
    try:
        return ctx.logs.ensure_internal_topic(name)
    except (KafkaError, OSError) as e:
        log.error("the internal topic %s could not be made: %s", name, e)
        return False


# --- JoinGroup (11) -------------------------------------------------------------

@api("""
JoinGroup  key=11  versions=0-9  flexible=6+
  request
    group_id  string
    session_timeout_ms  int32
    rebalance_timeout_ms  int32 = -1  v1+       # v0: the session timeout
    member_id  string                           # "" on a first join
    group_instance_id  string? = null  v5+      # KIP-345 static membership
    protocol_type  string                       # "consumer" for consumers
    protocols  []
      name  string                              # an assignor: "range", "cooperative-sticky", ...
      metadata  bytes
    reason  string? = null  v8+
  response
    throttle_time_ms  int32  v2+
    error_code  int16
    generation_id  int32 = -1
    protocol_type  string? = null  v7+
    protocol_name  string?7+
    leader  string
    skip_assignment  bool = false  v9+          # KIP-814
    member_id  string
    members  []                                 # the leader's view: everyone's subscription
      member_id  string
      group_instance_id  string? = null  v5+
      metadata  bytes
""")
def handle_join_group(ctx, req):
    """JoinGroup: enter the group's next generation; waits until the rebalance
    completes. v4+ first joins get MEMBER_ID_REQUIRED with an id to join with (KIP-394).

    Errors: INVALID_GROUP_ID, INVALID_SESSION_TIMEOUT, UNKNOWN_MEMBER_ID,
    INCONSISTENT_GROUP_PROTOCOL, MEMBER_ID_REQUIRED, FENCED_INSTANCE_ID,
    GROUP_MAX_SIZE_REACHED, REBALANCE_IN_PROGRESS.
    """
    rebalance_timeout = req.rebalance_timeout_ms if ctx.version >= 1 else req.session_timeout_ms
    try:
        ctx.require(AclOperation.READ, ResourceType.GROUP, req.group_id)
        answer = join_group(ctx, req, rebalance_timeout)
    except KafkaError as e:           # Kafka's error answer echoes the member id (not into a consumer group)
        consumer = getattr(ctx.groups.get(req.group_id), "kind", "") == "consumer"
        answer = Msg(error_code=e.code, member_id="" if consumer else req.member_id, protocol_name=None, leader="")
    return answer if ctx.version >= 7 else with_protocol_name(answer)


def with_protocol_name(answer):
    """Before v7 the protocol name cannot be null: it is "" (as Kafka's
    JoinGroupResponse constructor makes it), in an answer now or one parked."""
    if isinstance(answer, Park):
        poll = answer.poll
        answer.poll = lambda expired: with_protocol_name(poll(expired))
    elif answer is not None and getattr(answer, "protocol_name", "") is None:
        answer = Msg(**{**vars(answer), "protocol_name": ""})
    return answer


def mixed_group(ctx, group_id):
    """The consumer group (KIP-848) a classic request names, when it has members; else None."""
    g = ctx.groups.get(group_id)
    return g if g is not None and g.kind == "consumer" and g.members else None


def join_group(ctx, req, rebalance_timeout):
    g = mixed_group(ctx, req.group_id)
    if g is not None:                         # a classic member joins a consumer group
        return ctx.consumer_groups.classic_join(g, req, ctx.version, ctx.client_id, ctx.conn.host)
    member, response = ctx.groups.join(
        req.group_id, req.member_id, req.group_instance_id, ctx.client_id or "",
        "/" + ctx.conn.addr[0] if isinstance(ctx.conn.addr, tuple) else "", req.session_timeout_ms,
        rebalance_timeout, req.protocol_type, [(p.name, p.metadata) for p in req.protocols],
        require_known_member_id=ctx.version >= 4)
    return answer_or_wait(response, member, "join_result", req.group_id)


def answer_or_wait(response, member, field, group_id):
    """The answer now (also when this very request completed the rebalance),
    or a Park until the coordinator sets member.<field>."""
    if response is None:
        response = getattr(member, field)
    if response is not None:
        return response
    return Park(lambda expired: getattr(member, field), keys=[("group", group_id)])


# --- Heartbeat (12) -------------------------------------------------------------

@api("""
Heartbeat  key=12  versions=0-4  flexible=4+
  request
    group_id  string
    generation_id  int32
    member_id  string
    group_instance_id  string? = null  v3+
  response
    throttle_time_ms  int32  v1+
    error_code  int16
""")
def handle_heartbeat(ctx, req):
    """Heartbeat: "still here". REBALANCE_IN_PROGRESS tells the member to rejoin.

    Errors: UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION, FENCED_INSTANCE_ID, REBALANCE_IN_PROGRESS.
    """
    ctx.require(AclOperation.READ, ResourceType.GROUP, req.group_id)
    if mixed_group(ctx, req.group_id) is not None:
        ctx.consumer_groups.classic_heartbeat(mixed_group(ctx, req.group_id), req)
    else:
        ctx.groups.heartbeat(req.group_id, req.generation_id, req.member_id, req.group_instance_id)
    return Msg()


# --- LeaveGroup (13) ------------------------------------------------------------

@api("""
LeaveGroup  key=13  versions=0-5  flexible=4+
  request
    group_id  string
    member_id  string  v0-2
    members  []  v3+                            # KIP-345: batched, static members too
      member_id  string
      group_instance_id  string? = null
      reason  string? = null  v5+
  response
    throttle_time_ms  int32  v1+
    error_code  int16
    members  []  v3+
      member_id  string
      group_instance_id  string?
      error_code  int16
""")
def handle_leave_group(ctx, req):
    """LeaveGroup: members go now rather than at their session timeout.

    Errors: UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID (per member from v3),
    GROUP_AUTHORIZATION_FAILED (READ on the group).
    """
    ctx.require(AclOperation.READ, ResourceType.GROUP, req.group_id)
    g = mixed_group(ctx, req.group_id)
    if g is not None:
        left = ctx.consumer_groups.classic_leave(g, [(req.member_id, None)] if ctx.version < 3 else
                                                 [(m.member_id, m.group_instance_id) for m in req.members])
        return Msg(error_code=left[0][2]) if ctx.version < 3 else Msg(members=[
            Msg(member_id=mid, group_instance_id=iid, error_code=code) for mid, iid, code in left])
    if ctx.version < 3:
        code = ctx.groups.leave(req.group_id, req.member_id, None)
        return Msg(error_code=code)
    return Msg(members=[Msg(member_id=m.member_id, group_instance_id=m.group_instance_id,
                            error_code=ctx.groups.leave(req.group_id, m.member_id, m.group_instance_id))
                        for m in req.members])


# --- SyncGroup (14) -------------------------------------------------------------

@api("""
SyncGroup  key=14  versions=0-5  flexible=4+
  request
    group_id  string
    generation_id  int32
    member_id  string
    group_instance_id  string? = null  v3+
    protocol_type  string? = null  v5+
    protocol_name  string? = null  v5+
    assignments  []                             # only the leader's carries any
      member_id  string
      assignment  bytes
  response
    throttle_time_ms  int32  v1+
    error_code  int16
    protocol_type  string? = null  v5+
    protocol_name  string? = null  v5+
    assignment  bytes
""")
def handle_sync_group(ctx, req):
    """SyncGroup: the leader hands in the assignment; every member gets its part.
    Followers wait for the leader.

    Errors: UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION, FENCED_INSTANCE_ID,
    INCONSISTENT_GROUP_PROTOCOL, REBALANCE_IN_PROGRESS, GROUP_AUTHORIZATION_FAILED
    (READ on the group, checked after v5's protocol type and name).
    """
    if ctx.version >= 5 and (req.protocol_type is None or req.protocol_name is None):
        raise KafkaError(ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
    ctx.require(AclOperation.READ, ResourceType.GROUP, req.group_id)
    if mixed_group(ctx, req.group_id) is not None:
        return ctx.consumer_groups.classic_sync(mixed_group(ctx, req.group_id), req)
    member, response = ctx.groups.sync(req.group_id, req.generation_id, req.member_id,
                                       req.group_instance_id, req.protocol_type,
                                       req.protocol_name, req.assignments)
    return answer_or_wait(response, member, "sync_result", req.group_id)


# --- DescribeGroups (15) --------------------------------------------------------

@api("""
DescribeGroups  key=15  versions=0-6  flexible=5+
  request
    groups  []string
    include_authorized_operations  bool  v3+
  response
    throttle_time_ms  int32  v1+
    groups  []
      error_code  int16
      error_message  string? = null  v6+
      group_id  string
      group_state  string
      protocol_type  string
      protocol_data  string
      members  []
        member_id  string
        group_instance_id  string? = null  v4+
        client_id  string
        client_host  string
        member_metadata  bytes
        member_assignment  bytes
      authorized_operations  int32 = -2147483648  v3+
""")
def handle_describe_groups(ctx, req):
    """DescribeGroups: state, protocol and members of each group. An unknown
    group is described as Dead; from v6 also with GROUP_ID_NOT_FOUND (KIP-1043)."""
    return Msg(groups=[describe_group(ctx, group_id, req.include_authorized_operations) for group_id in req.groups])


def describe_group(ctx, group_id, include_operations):
    """One group of a DescribeGroups -> its answer."""
    g = ctx.groups.get(group_id)
    if not ctx.allowed(AclOperation.DESCRIBE, ResourceType.GROUP, group_id):
        return Msg(group_id=group_id, error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED, group_state="",
                   protocol_type="", protocol_data="")
    if g is None or g.kind != "classic":        # a consumer group: ConsumerGroupDescribe describes it
        missing = Msg(group_id=group_id, group_state="Dead", protocol_type="", protocol_data="")
        if ctx.version >= 6:
            missing.error_code = ErrorCode.GROUP_ID_NOT_FOUND
            missing.error_message = f"Group {group_id} not found." if g is None else \
                f"Group {group_id} is not a classic group."
        elif include_operations:
            missing.authorized_operations = ctx.operations(ResourceType.GROUP, group_id)
        return missing
    stable = g.state == GroupState.STABLE
    return Msg(group_id=group_id, group_state=g.state.value, protocol_type=g.protocol_type or "",
               protocol_data=(g.protocol_name or "") if stable else "",
               members=[Msg(member_id=m.member_id, group_instance_id=m.instance_id,
                            client_id=m.client_id, client_host=m.client_host,
                            member_metadata=m.metadata(g.protocol_name) if stable else b"",
                            member_assignment=m.assignment)
                        for m in g.members.values()],
               authorized_operations=ctx.operations(ResourceType.GROUP, group_id)
               if include_operations else -2147483648)


# --- ListGroups (16) ------------------------------------------------------------

@api("""
ListGroups  key=16  versions=0-5  flexible=3+
  request
    states_filter  []string  v4+                # KIP-518
    types_filter  []string  v5+                 # KIP-848: "classic", "consumer"
  response
    throttle_time_ms  int32  v1+
    error_code  int16
    groups  []
      group_id  string
      protocol_type  string
      group_state  string  v4+
      group_type  string  v5+
""")
def handle_list_groups(ctx, req):
    """ListGroups: every group, optionally only those in the given states or types."""
    states = {s.lower() for s in req.states_filter}
    types = {t.lower() for t in req.types_filter}
    everything = ctx.allowed(AclOperation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME, log_denial=False)
    return Msg(groups=[
        Msg(group_id=g.group_id, protocol_type=g.protocol_type or "", group_state=g.state.value,
            group_type=g.kind)
        for g in ctx.groups.groups.values()
        if (not states or g.state.value.lower() in states) and (not types or g.kind in types)
        and (everything or ctx.allowed(AclOperation.DESCRIBE, ResourceType.GROUP, g.group_id, log_denial=False))])


# --- InitProducerId (22) --------------------------------------------------------

@api("""
InitProducerId  key=22  versions=0-5  flexible=2+
  request
    transactional_id  string?                  # null: idempotence only, no transactions
    transaction_timeout_ms  int32
    producer_id  int64 = -1  v3+               # KIP-360: resume after a lost epoch
    producer_epoch  int16 = -1  v3+
  response
    throttle_time_ms  int32
    error_code  int16
    producer_id  int64 = -1
    producer_epoch  int16 = -1
""")
def handle_init_producer_id(ctx, req):
    """InitProducerId: a producer id and epoch (KIP-98). The walkthrough's step 1,
    and step 6 (fencing) when the transactional id is asked for again.

    Without a transactional id: a fresh id at epoch 0 for an idempotent
    producer, every time ("blindly", as Kafka's coordinator says). With one:
    become its owner. The epoch goes up by one, fencing the previous owner; a
    never-used id starts at epoch 0; at epoch exhaustion a new producer id.
    KIP-360: a request carrying the current (id, epoch) bumps it; one carrying
    the epoch a successful bump came from is a retry and gets the same answer.
    An open transaction is aborted first -- finished, markers on disk, before
    the answer (doze; Kafka answers CONCURRENT_TRANSACTIONS meanwhile).

    Errors: INVALID_REQUEST, INVALID_TRANSACTION_TIMEOUT (over
    transaction.max.timeout.ms), PRODUCER_FENCED (INVALID_PRODUCER_EPOCH before
    v4), CONCURRENT_TRANSACTIONS (a decision's markers cannot be written yet),
    NOT_COORDINATOR (meta.db cannot be written), TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    (WRITE on the id), CLUSTER_AUTHORIZATION_FAILED (idempotent: neither
    IDEMPOTENT_WRITE on the cluster nor WRITE on some topic, KIP-679).
    """
    if req.transactional_id is None:
        if not (ctx.allowed(AclOperation.IDEMPOTENT_WRITE, ResourceType.CLUSTER, CLUSTER_NAME, log_denial=False)
                or ctx.allowed_on_any(AclOperation.WRITE, ResourceType.TOPIC)):
            raise KafkaError(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
        return Msg(producer_id=ctx.producer_ids.new_id(), producer_epoch=0)
    ctx.require(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, req.transactional_id)
    meta, answer = ctx.txns.init_producer(req.transactional_id, req.transaction_timeout_ms,
                                          req.producer_id, req.producer_epoch)
    if meta is None:
        return answer()
    return wait_for_txn(ctx, meta, lambda: answer() if meta.state == TxnState.COMPLETE_ABORT else None)


def wait_for_txn(ctx, meta, outcome):
    """Answer once a transaction's markers are durable: outcome() -> Msg or None.
    Past TXN_ANSWER_WAIT_MS (a marker that cannot be written) the answer is
    CONCURRENT_TRANSACTIONS; the coordinator keeps trying, and a retry gets the outcome."""
    def poll(expired):
        result = outcome()
        if result is None and expired:
            return Msg(error_code=ErrorCode.CONCURRENT_TRANSACTIONS)
        return result
    return Park(poll, deadline_ms=ctx.now_ms + TXN_ANSWER_WAIT_MS,
                keys=[("txn", meta.transactional_id)])


# --- AddPartitionsToTxn (24) ----------------------------------------------------

@api("""
AddPartitionsToTxn  key=24  versions=0-3  flexible=3+    # v4+ is broker-to-broker (KIP-890)
  request
    transactional_id  string                   # JSON: V3AndBelowTransactionalId
    producer_id  int64                         # JSON: V3AndBelowProducerId
    producer_epoch  int16                      # JSON: V3AndBelowProducerEpoch
    topics  []                                 # JSON: V3AndBelowTopics
      name  string
      partitions  []int32
  response
    throttle_time_ms  int32
    results_by_topic  []                       # JSON: ResultsByTopicV3AndBelow
      name  string
      results_by_partition  []
        partition_index  int32
        partition_error_code  int16
""")
def handle_add_partitions_to_txn(ctx, req):
    """AddPartitionsToTxn: the partitions this transaction will write, told to
    the coordinator *before* producing to them (KIP-98). They are where EndTxn
    writes its markers. All or nothing: if any partition fails its check, none
    is added; the others get OPERATION_NOT_ATTEMPTED (as KafkaApis does).
    The walkthrough's step 3.

    Errors: UNKNOWN_TOPIC_OR_PARTITION, OPERATION_NOT_ATTEMPTED, INVALID_REQUEST,
    INVALID_PRODUCER_ID_MAPPING, PRODUCER_FENCED (INVALID_PRODUCER_EPOCH before v2),
    CONCURRENT_TRANSACTIONS, NOT_COORDINATOR, TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    (WRITE on the id: every partition), TOPIC_AUTHORIZATION_FAILED (WRITE on the
    topic; an internal topic never).
    """
    tps = [(t.name, p) for t in req.topics for p in t.partitions]
    if not ctx.allowed(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, req.transactional_id):
        return partition_results(dict.fromkeys(tps, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED))
    writable = topics_allowed(ctx, AclOperation.WRITE, (t for t, _ in tps if t not in INTERNAL_TOPICS))
    failed = {tp: ErrorCode.TOPIC_AUTHORIZATION_FAILED if tp[0] not in writable
              else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION for tp in tps
              if tp[0] not in writable or tp not in ctx.logs.logs}
    if failed:
        codes = {tp: failed.get(tp, ErrorCode.OPERATION_NOT_ATTEMPTED) for tp in tps}
    else:
        try:
            meta = ctx.txns.for_producer(req.transactional_id, req.producer_id, req.producer_epoch)
            ctx.txns.add_partitions(meta, tps)
            code = ErrorCode.NONE
        except KafkaError as e:          # v0-3 have no top-level error_code:
            code = e.code                # a request-wide error goes on every partition
        codes = {tp: code for tp in tps}
    return partition_results(codes)


def partition_results(codes):
    """AddPartitionsToTxn's answer: {(topic, partition): error code} by topic."""
    grouped = {}
    for (topic, p), code in codes.items():
        grouped.setdefault(topic, []).append(Msg(partition_index=p, partition_error_code=code))
    return Msg(results_by_topic=[Msg(name=t, results_by_partition=parts) for t, parts in grouped.items()])


# --- AddOffsetsToTxn (25) -------------------------------------------------------

@api("""
AddOffsetsToTxn  key=25  versions=0-4  flexible=3+
  request
    transactional_id  string
    producer_id  int64
    producer_epoch  int16
    group_id  string
  response
    throttle_time_ms  int32
    error_code  int16
""")
def handle_add_offsets_to_txn(ctx, req):
    """AddOffsetsToTxn: this transaction will commit offsets of `group_id`
    (Kafka adds the group's __consumer_offsets partition; doze, the group).
    The walkthrough's step 3.

    Errors: as AddPartitionsToTxn; TRANSACTIONAL_ID_AUTHORIZATION_FAILED (WRITE
    on the id), then GROUP_AUTHORIZATION_FAILED (READ on the group).
    """
    ctx.require(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, req.transactional_id)
    ctx.require(AclOperation.READ, ResourceType.GROUP, req.group_id)
    meta = ctx.txns.for_producer(req.transactional_id, req.producer_id, req.producer_epoch)
    ctx.txns.add_partitions(meta, group=req.group_id)
    return Msg()


# --- EndTxn (26) ----------------------------------------------------------------

@api("""
EndTxn  key=26  versions=0-5  flexible=3+      # v5: transaction version 2 (KIP-890)
  request
    transactional_id  string
    producer_id  int64
    producer_epoch  int16
    committed  bool                            # true = commit, false = abort
  response
    throttle_time_ms  int32
    error_code  int16
    producer_id  int64 = -1  v5+               # the id and epoch of the next transaction
    producer_epoch  int16 = -1  v5+
""", classic_max=4)
def handle_end_txn(ctx, req):
    """EndTxn: the producer's last word on a transaction -- commit or abort.
    The walkthrough's steps 4 and 5 (and 8: the decision a restart carries out).

    doze answers after both phases: the decision in meta.db, a COMMIT or ABORT
    marker on every partition of the transaction, fsynced, and (for a commit)
    the staged offsets committed (see TransactionCoordinator for the crash
    ordering); with doze.transaction.answer.after=decision, once the decision
    is durable, as Kafka answers. A repeat of a decision already carried out succeeds.
    v5 is transaction version 2 (TransactionCoordinator.end_txn_v2): the epoch
    goes up at every end, and the answer carries the next transaction's id and epoch.

    Errors: INVALID_REQUEST, INVALID_PRODUCER_ID_MAPPING, PRODUCER_FENCED
    (INVALID_PRODUCER_EPOCH before v2), INVALID_TXN_STATE (nothing to end, or
    the other decision was carried out), CONCURRENT_TRANSACTIONS (a decision is
    being carried out), NOT_COORDINATOR, TRANSACTIONAL_ID_AUTHORIZATION_FAILED.
    """
    ctx.require(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, req.transactional_id)
    if not req.transactional_id:
        raise KafkaError(ErrorCode.INVALID_REQUEST, "empty transactional id")
    if ctx.version >= 5:                        # transaction version 2: the epoch moves on
        meta, (producer_id, epoch), wait = ctx.txns.end_txn_v2(req.transactional_id, req.producer_id,
                                                               req.producer_epoch, req.committed)
        answer = Msg(producer_id=producer_id, producer_epoch=epoch)
        return wait_for_txn(ctx, meta, lambda: ctx.txns.outcome(meta, req.committed) and answer) if wait else answer
    meta = ctx.txns.for_producer(req.transactional_id, req.producer_id, req.producer_epoch)
    if not ctx.txns.end_txn(meta, req.committed):
        return Msg()
    return wait_for_txn(ctx, meta, lambda: ctx.txns.outcome(meta, req.committed))


# --- WriteTxnMarkers (27) -------------------------------------------------------

@api("""
WriteTxnMarkers  key=27  versions=1-2  flexible=1+
  request
    markers  []
      producer_id  int64
      producer_epoch  int16
      transaction_result  bool                 # true = COMMIT
      topics  []
        name  string
        partition_indexes  []int32
      coordinator_epoch  int32
      transaction_version  int8 = 0  v2+       # KIP-890 part 2: 2 checks the epoch strictly
  response
    markers  []
      producer_id  int64
      topics  []
        name  string
        partitions  []
          partition_index  int32
          error_code  int16
""")
def handle_write_txn_markers(ctx, req):
    """WriteTxnMarkers: write markers straight to partitions. Kafka's coordinator
    uses it to reach partition leaders; doze's coordinator writes its own, so
    this serves `kafka-transactions abort` for a hanging transaction.

    Errors: UNKNOWN_TOPIC_OR_PARTITION, INVALID_PRODUCER_EPOCH (older than the
    partition knows; with transaction_version 2 not newer either, unless a
    retry), TRANSACTION_COORDINATOR_FENCED (a coordinator epoch older than the
    partition's), KAFKA_STORAGE_ERROR, CLUSTER_AUTHORIZATION_FAILED (neither
    ALTER nor CLUSTER_ACTION on the cluster: the whole request).
    """
    allowed = ctx.allowed(AclOperation.ALTER, ResourceType.CLUSTER, CLUSTER_NAME, log_denial=False) or \
        ctx.allowed(AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER, CLUSTER_NAME)
    out = []
    for m in req.markers:
        results = []
        for t in m.topics:
            for p in t.partition_indexes:
                results.append((t.name, Msg(partition_index=p, error_code=error_code_of(
                    write_marker, ctx, (t.name, p), m) if allowed else ErrorCode.CLUSTER_AUTHORIZATION_FAILED)))
        out.append(Msg(producer_id=m.producer_id,
                       topics=by_topic(results)))

    def respond(expired):
        if not durable(ctx, ctx.appended):
            return None
        lost = ctx.logs.lost(ctx.appended)
        for part in (p for m in out for t in m.topics for p in t.partitions if (t.name, p.partition_index) in lost):
            part.error_code = ErrorCode.KAFKA_STORAGE_ERROR
        return Msg(markers=out)
    return Park(respond, keys=[FLUSHED], mute=False)


def write_marker(ctx, tp, m):
    plog = ctx.logs.get(*tp)
    state = ctx.producer_states.of(tp)
    state.check_marker(m.producer_id, m.producer_epoch, m.coordinator_epoch, m.transaction_version)
    batch = bytearray(build_control_batch(m.producer_id, m.producer_epoch, m.transaction_result,
                                          ctx.now_ms, m.coordinator_epoch))
    base = ctx.logs.append(plog, batch, read_batch_header(batch))     # KAFKA_STORAGE_ERROR if refused
    ctx.appended.append((plog, base))
    state.apply_marker(m.producer_id, m.producer_epoch, m.transaction_result, base, ctx.now_ms,
                       m.coordinator_epoch)


# --- TxnOffsetCommit (28) -------------------------------------------------------

@api("""
TxnOffsetCommit  key=28  versions=0-5  flexible=3+     # v5: transaction version 2 (KIP-890)
  request
    transactional_id  string
    group_id  string
    producer_id  int64
    producer_epoch  int16
    generation_id  int32 = -1  v3+             # KIP-447: the consumer's group metadata
    member_id  string  v3+
    group_instance_id  string? = null  v3+
    topics  []
      name  string
      partitions  []
        partition_index  int32
        committed_offset  int64
        committed_leader_epoch  int32 = -1  v2+
        committed_metadata  string?
  response
    throttle_time_ms  int32
    topics  []
      name  string
      partitions  []
        partition_index  int32
        error_code  int16
""", classic_max=4)
def handle_txn_offset_commit(ctx, req):
    """TxnOffsetCommit: stage consumer offsets in the transaction; they become
    the group's committed offsets only if it commits (KIP-98), checked against
    the group's generation and member (KIP-447) so a zombie cannot commit.
    The walkthrough's step 3.

    Errors: INVALID_GROUP_ID, INVALID_PRODUCER_ID_MAPPING, INVALID_PRODUCER_EPOCH
    (fenced), CONCURRENT_TRANSACTIONS, INVALID_TXN_STATE (group not added;
    TRANSACTION_ABORTABLE from v4), ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID,
    FENCED_INSTANCE_ID, UNKNOWN_TOPIC_OR_PARTITION, OFFSET_METADATA_TOO_LARGE, NOT_COORDINATOR;
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED (WRITE on the id) then GROUP_AUTHORIZATION_FAILED
    (READ on the group) on every partition, TOPIC_AUTHORIZATION_FAILED (READ on its topic).
    """
    refused = error_code_of(ctx.require, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID,
                            req.transactional_id) or \
        error_code_of(ctx.require, AclOperation.READ, ResourceType.GROUP, req.group_id)
    meta, request_error = (None, refused) if refused else txn_offsets_verdict(ctx, req)
    results, staged = offsets_to_commit(ctx, req.topics, refused, request_error, unknown_first=False)
    if staged:
        try:
            ctx.txns.stage_offsets(meta, req.group_id, staged)
        except KafkaError as e:                 # on every partition
            for _, part in results:
                part.error_code = e.code
    return Msg(topics=by_topic(results))


def txn_offsets_verdict(ctx, req):
    """May the transaction stage these offsets? -> (its TransactionMetadata,
    None), or (None, the error every partition gets): the group id, the
    producer (a fenced one: INVALID_PRODUCER_EPOCH here), the group added to
    the transaction, and the consumer's generation and member (KIP-447)."""
    try:
        if not req.group_id:
            raise KafkaError(ErrorCode.INVALID_GROUP_ID)
        try:
            if ctx.version >= 5:                # transaction version 2: the commit adds the group
                meta = ctx.txns.add_implicitly(req.transactional_id, req.producer_id, req.producer_epoch,
                                               group=req.group_id, cause=f"TxnOffsetCommit v{ctx.version}")
            else:
                meta = ctx.txns.for_producer(req.transactional_id, req.producer_id, req.producer_epoch)
        except KafkaError as e:
            raise KafkaError(ErrorCode.INVALID_PRODUCER_EPOCH if e.code == ErrorCode.PRODUCER_FENCED
                             else e.code, e.detail) from None
        ctx.txns.check_offsets_added(meta, req.group_id, ctx.version)
        ctx.groups.check_commit(req.group_id, req.generation_id, req.member_id, req.group_instance_id,
                                transactional=True, tps=[(t.name, p.partition_index) for t in req.topics
                                                         for p in t.partitions])
        return meta, None
    except KafkaError as e:
        return None, e.code


# --- DeleteGroups (42) ----------------------------------------------------------

@api("""
DeleteGroups  key=42  versions=0-2  flexible=2+
  request
    groups_names  []string
  response
    throttle_time_ms  int32
    results  []
      group_id  string
      error_code  int16
""")
def handle_delete_groups(ctx, req):
    """DeleteGroups: remove empty groups and their offsets.

    Errors: GROUP_ID_NOT_FOUND, NON_EMPTY_GROUP, INVALID_GROUP_ID.
    """
    return Msg(results=[Msg(group_id=g, error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED
                            if not ctx.allowed(AclOperation.DELETE, ResourceType.GROUP, g)
                            else error_code_of(ctx.groups.delete_group, g) if g else ErrorCode.INVALID_GROUP_ID)
                        for g in req.groups_names])


# --- OffsetDelete (47) ----------------------------------------------------------

@api("""
OffsetDelete  key=47  versions=0-0  flexible=none     # KIP-496
  request
    group_id  string
    topics  []
      name  string
      partitions  []
        partition_index  int32
  response
    error_code  int16
    throttle_time_ms  int32
    topics  []
      name  string
      partitions  []
        partition_index  int32
        error_code  int16
""")
def handle_offset_delete(ctx, req):
    """OffsetDelete: drop committed offsets of topics the group no longer consumes.

    Errors: GROUP_ID_NOT_FOUND, NON_EMPTY_GROUP is not used: a topic the live
    group subscribes to gets GROUP_SUBSCRIBED_TO_TOPIC per partition;
    GROUP_AUTHORIZATION_FAILED (DELETE on the group), TOPIC_AUTHORIZATION_FAILED
    (READ on a topic).
    """
    ctx.require(AclOperation.DELETE, ResourceType.GROUP, req.group_id)
    readable = topics_allowed(ctx, AclOperation.READ, (t.name for t in req.topics))
    g = ctx.groups.get(req.group_id)
    if g is None:
        raise KafkaError(ErrorCode.GROUP_ID_NOT_FOUND)
    subscribed = ctx.groups.subscribed_topics(g)
    results, deletable = [], []
    for t in req.topics:
        for p in t.partitions:
            code = ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC if t.name in subscribed else ErrorCode.NONE
            if t.name not in readable:
                code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            elif (t.name, p.partition_index) not in ctx.logs.logs:
                code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            results.append((t.name, Msg(partition_index=p.partition_index, error_code=code)))
            if code == ErrorCode.NONE:
                deletable.append((t.name, p.partition_index))
    ctx.groups.delete_offsets(req.group_id, deletable)
    return Msg(topics=by_topic(results))


# --- DescribeProducers (61) -----------------------------------------------------

@api("""
DescribeProducers  key=61  versions=0-0  flexible=0+
  request
    topics  []
      name  string
      partition_indexes  []int32
  response
    throttle_time_ms  int32
    topics  []
      name  string
      partitions  []
        partition_index  int32
        error_code  int16
        error_message  string? = null
        active_producers  []
          producer_id  int64
          producer_epoch  int32
          last_sequence  int32 = -1
          last_timestamp  int64 = -1
          coordinator_epoch  int32
          current_txn_start_offset  int64 = -1
""")
def handle_describe_producers(ctx, req):
    """DescribeProducers: the idempotent and transactional producers each
    partition remembers, with their open transaction's first offset (what
    `kafka-transactions find-hanging` and Flink look at).

    Errors: UNKNOWN_TOPIC_OR_PARTITION, INVALID_TOPIC_EXCEPTION, TOPIC_AUTHORIZATION_FAILED
    (READ, not DESCRIBE, on the topic; checked after the name).
    """
    readable = topics_allowed(ctx, AclOperation.READ, (t.name for t in req.topics if TOPIC_NAME.fullmatch(t.name)))
    return Msg(topics=by_topic([(t.name, partition_producers(ctx, t.name, p, t.name in readable))
                                for t in req.topics for p in t.partition_indexes]))


def partition_producers(ctx, topic, partition, readable):
    """One partition of a DescribeProducers -> its answer."""
    part = Msg(partition_index=partition, active_producers=[])
    if not TOPIC_NAME.fullmatch(topic):
        part.error_code = ErrorCode.INVALID_TOPIC_EXCEPTION
    elif not readable:
        part.error_code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
    elif (topic, partition) not in ctx.logs.logs:
        part.error_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    else:
        part.active_producers = [
            Msg(producer_id=pid, producer_epoch=e.epoch, last_sequence=e.last_seq,
                last_timestamp=e.last_timestamp, coordinator_epoch=e.coordinator_epoch,
                current_txn_start_offset=e.txn_first_offset)
            for pid, e in sorted(ctx.producer_states.of((topic, partition)).producers.items())]
    return part


# --- DescribeTransactions (65) --------------------------------------------------

@api("""
DescribeTransactions  key=65  versions=0-0  flexible=0+
  request
    transactional_ids  []string
  response
    throttle_time_ms  int32
    transaction_states  []
      error_code  int16
      transactional_id  string
      transaction_state  string
      transaction_timeout_ms  int32
      transaction_start_time_ms  int64
      producer_id  int64
      producer_epoch  int16
      topics  []
        topic  string
        partitions  []int32
""")
def handle_describe_transactions(ctx, req):
    """DescribeTransactions: state, producer, timeout and partitions of each id.
    Errors: TRANSACTIONAL_ID_NOT_FOUND, INVALID_REQUEST (an empty id),
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED (DESCRIBE on the id); the topics
    without DESCRIBE are left out of the partitions listed."""
    return Msg(transaction_states=[describe_transaction(ctx, i) for i in req.transactional_ids])


def describe_transaction(ctx, transactional_id):
    """One id of a DescribeTransactions -> its answer."""
    meta = ctx.txns.txns.get(transactional_id)
    if not ctx.allowed(AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, transactional_id):
        return Msg(error_code=ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                   transactional_id=transactional_id, transaction_state="")
    if not transactional_id or meta is None:
        return Msg(error_code=ErrorCode.INVALID_REQUEST if not transactional_id
                   else ErrorCode.TRANSACTIONAL_ID_NOT_FOUND, transactional_id=transactional_id, transaction_state="")
    left = meta.markers_needed | {tp for tp, off in meta.marker_offsets.items()} \
        if meta.state in DECIDED else meta.partitions
    topics = {}
    for topic, p in sorted(left):
        topics.setdefault(topic, []).append(p)
    if meta.state == TxnState.ONGOING:    # what Kafka lists for AddOffsetsToTxn
        for group in sorted(meta.groups, key=lambda g: offsets_partition(ctx.config, g)):
            topics.setdefault(CONSUMER_OFFSETS, []).append(offsets_partition(ctx.config, group))
    return Msg(transactional_id=transactional_id, transaction_state=meta.state.value,
               transaction_timeout_ms=meta.timeout_ms, transaction_start_time_ms=meta.txn_start_ms,
               producer_id=meta.producer_id, producer_epoch=meta.producer_epoch,
               topics=[Msg(topic=t, partitions=ps) for t, ps in topics.items()
                       if ctx.allowed(AclOperation.DESCRIBE, ResourceType.TOPIC, t, log_denial=False)])


# --- ListTransactions (66) ------------------------------------------------------

@api("""
ListTransactions  key=66  versions=0-1  flexible=0+
  request
    state_filters  []string                    # Kafka's state names: "Ongoing", ...
    producer_id_filters  []int64
    duration_filter  int64 = -1  v1+           # KIP-994: running longer than this
  response
    throttle_time_ms  int32
    error_code  int16
    unknown_state_filters  []string
    transaction_states  []
      transactional_id  string
      producer_id  int64
      transaction_state  string
""")
def handle_list_transactions(ctx, req):
    """ListTransactions: the transactional ids, filtered by state, producer id
    and (v1) how long their transaction has run."""
    names = {s.value for s in TxnState}
    states = set(req.state_filters)
    now = ctx.now_ms
    found = [meta for meta in ctx.txns.txns.values()
             if ctx.allowed(AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, meta.transactional_id,
                            log_denial=False)
             and (not states or meta.state.value in states)
             and (not req.producer_id_filters or meta.producer_id in req.producer_id_filters)
             and (req.duration_filter < 0 or now - meta.txn_start_ms > req.duration_filter)]
    return Msg(unknown_state_filters=sorted(states - names), transaction_states=[
        Msg(transactional_id=m.transactional_id, producer_id=m.producer_id,
            transaction_state=m.state.value) for m in sorted(found, key=lambda m: m.transactional_id)])


@api("""
ConsumerGroupHeartbeat  key=68  versions=0-1  flexible=0+     # KIP-848: the broker assigns
  request
    group_id  string
    member_id  string                          # v1+: chosen by the client (KIP-1082)
    member_epoch  int32                        # 0 joins, -1 leaves, -2 a static member leaves
    instance_id  string? = null
    rack_id  string? = null
    rebalance_timeout_ms  int32 = -1
    subscribed_topic_names  []string? = null   # null: unchanged since the last heartbeat
    subscribed_topic_regex  string? = null  v1+
    server_assignor  string? = null
    topic_partitions  []? = null               # what the member owns now (null: unchanged)
      topic_id  uuid
      partitions  []int32
  response
    throttle_time_ms  int32
    error_code  int16
    error_message  string? = null
    member_id  string? = null
    member_epoch  int32
    heartbeat_interval_ms  int32
    assignment  {}? = null                     # null: unchanged
      topic_partitions  []
        topic_id  uuid
        partitions  []int32
""")
def handle_consumer_group_heartbeat(ctx, req):
    """ConsumerGroupHeartbeat (KIP-848): a member joins (epoch 0), stays at its
    epoch, or leaves (-1; a static member for a while: -2); the answer carries
    its epoch, the heartbeat interval, and its assignment when that changed
    (ConsumerGroups has the steps).

    Errors: GROUP_AUTHORIZATION_FAILED (READ on the group),
    TOPIC_AUTHORIZATION_FAILED (DESCRIBE on a topic named), INVALID_REQUEST,
    UNSUPPORTED_ASSIGNOR, GROUP_ID_NOT_FOUND, GROUP_MAX_SIZE_REACHED,
    UNKNOWN_MEMBER_ID, FENCED_MEMBER_EPOCH, UNRELEASED_INSTANCE_ID, FENCED_INSTANCE_ID.
    """
    ctx.require(AclOperation.READ, ResourceType.GROUP, req.group_id)
    names = set(req.subscribed_topic_names or ())
    if names and len(topics_allowed(ctx, AclOperation.DESCRIBE, names)) < len(names):
        return Msg(error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED)
    check_heartbeat(ctx, req)
    return ctx.consumer_groups.heartbeat(req, ctx.version, ctx.client_id, ctx.conn.host)


def check_heartbeat(ctx, req):
    """GroupCoordinatorService.throwIfConsumerGroupHeartbeatRequestIsInvalid, in its order."""
    def invalid(text):
        raise KafkaError(ErrorCode.INVALID_REQUEST, text)

    def blank(text):
        return not text.strip(JAVA_WHITESPACE)
    epoch = req.member_epoch
    if (ctx.version >= 1 or epoch > 0 or epoch == -1) and blank(req.member_id):
        invalid("MemberId can't be empty.")
    for name, value in (("GroupId", req.group_id), ("InstanceId", req.instance_id), ("RackId", req.rack_id)):
        if value is not None and blank(value):
            invalid(f"{name} can't be empty.")
    if epoch == 0 and req.rebalance_timeout_ms == -1:
        invalid("RebalanceTimeoutMs must be provided in first request.")
    if epoch == 0 and (req.topic_partitions is None or req.topic_partitions):
        invalid("TopicPartitions must be empty when (re-)joining.")
    if epoch == 0 and req.subscribed_topic_names is None and req.subscribed_topic_regex is None:
        invalid("Either SubscribedTopicNames or SubscribedTopicRegex must be non-null when (re-)joining.")
    if epoch == -2 and req.instance_id is None:
        invalid("InstanceId can't be null.")
    if epoch < -2:
        invalid("MemberEpoch is invalid.")
    assignors = ctx.config["group.consumer.assignors"]
    if req.server_assignor is not None and req.server_assignor not in assignors:
        raise KafkaError(ErrorCode.UNSUPPORTED_ASSIGNOR, f"ServerAssignor {req.server_assignor} is not supported. "
                         f"Supported assignors: {', '.join(java_map_order(assignors, java_string_hash_u))}.")


# --- ConsumerGroupDescribe (69) --------------------------------------------------

@api("""
ConsumerGroupDescribe  key=69  versions=0-1  flexible=0+
  request
    group_ids  []string
    include_authorized_operations  bool
  response
    throttle_time_ms  int32
    groups  []
      error_code  int16
      error_message  string? = null
      group_id  string
      group_state  string
      group_epoch  int32
      assignment_epoch  int32
      assignor_name  string
      members  []
        member_id  string
        instance_id  string? = null
        rack_id  string? = null
        member_epoch  int32
        client_id  string
        client_host  string
        subscribed_topic_names  []string
        subscribed_topic_regex  string? = null
        assignment  {}
          topic_partitions  []
            topic_id  uuid
            topic_name  string
            partitions  []int32
        target_assignment  {}
          topic_partitions  []
            topic_id  uuid
            topic_name  string
            partitions  []int32
        member_type  int8 = -1  v1+            # 1 the consumer protocol, 0 a classic member
      authorized_operations  int32 = -2147483648
""")
def handle_consumer_group_describe(ctx, req):
    """ConsumerGroupDescribe: each consumer group's epochs, assignor and members
    with their current and target assignments (kafka-consumer-groups
    --describe uses it for these groups). The groups the principal may not
    DESCRIBE first (GROUP_AUTHORIZATION_FAILED), as Kafka lists them."""
    allowed = {g: ctx.allowed(AclOperation.DESCRIBE, ResourceType.GROUP, g) for g in req.group_ids}
    refused = [Msg(group_id=g, error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED, group_state="", assignor_name="")
               for g in req.group_ids if not allowed[g]]
    described = [describe_consumer_group(ctx, g, req.include_authorized_operations)
                 for g in req.group_ids if allowed[g]]
    return Msg(groups=refused + sorted(described, key=lambda d: d.group_id != ""))


def describe_consumer_group(ctx, group_id, include_operations):
    """One group of a ConsumerGroupDescribe -> its answer.
    Errors: INVALID_GROUP_ID, GROUP_ID_NOT_FOUND (unknown, or not a consumer group)."""
    try:
        if not group_id:
            raise KafkaError(ErrorCode.INVALID_GROUP_ID)
        d = ctx.consumer_groups.describe(group_id)
    except KafkaError as e:
        return Msg(group_id=group_id, error_code=e.code, error_message=e.detail or None, group_state="",
                   assignor_name="")
    if include_operations:
        d.authorized_operations = ctx.operations(ResourceType.GROUP, group_id)
    return d


###############################################################################
# 16. CONFIG RESOURCES -- what DescribeConfigs shows and AlterConfigs changes
###############################################################################
# Config resources: type 2 is a topic, type 4 a broker (named by its node id,
# or "" for the cluster-wide default), type 32 a group (KIP-848's group
# configs). Sources are Kafka's ConfigSource codes.

RESOURCE_TOPIC, RESOURCE_BROKER, RESOURCE_GROUP = 2, 4, 32
SOURCE_TOPIC, SOURCE_DYNAMIC_BROKER, SOURCE_DYNAMIC_DEFAULT, SOURCE_STATIC, SOURCE_DEFAULT = 1, 2, 3, 4, 5
SOURCE_GROUP = 8
DYNAMIC_PREFIX = "broker.config."        # meta.db settings rows: cluster-wide dynamic broker configs
NODE_PREFIX = "broker.config.node."      # ... and this broker's own
SECRET_NOT_KEPT = "(a secret: doze keeps no copy)"   # what meta.db holds for a sensitive one
# A KRaft cluster writes min.insync.replicas as a cluster-wide dynamic config
# when it is formatted (checked by the describe-configs recording).
KRAFT_CLUSTER_DEFAULTS = {"min.insync.replicas": "1"}


def broker_entries(ctx, name, node=True):
    """[(name, text, source)] of one broker setting, most specific first: this
    broker's dynamic value (2), the cluster's (3), server.properties (4), the
    default (5, where there is one)."""
    config, entries = ctx.config, []
    if node and name in config.dynamic_node:
        entries.append((name, config.dynamic_node[name], SOURCE_DYNAMIC_BROKER))
    if name in config.dynamic_cluster:
        entries.append((name, config.dynamic_cluster[name], SOURCE_DYNAMIC_DEFAULT))
    elif name in KRAFT_CLUSTER_DEFAULTS:
        entries.append((name, KRAFT_CLUSTER_DEFAULTS[name], SOURCE_DYNAMIC_DEFAULT))
    if name in config.given:
        entries.append((name, config.static_text(name), SOURCE_STATIC))
    default = broker_default_text(name)
    if default is not None:
        entries.append((name, default, SOURCE_DEFAULT))
    return entries


def broker_config_sensitive(name):
    """As Kafka's maybeSensitive: a PASSWORD setting, or one neither Kafka nor
    doze knows (its type unknown, it may be a secret: listener.name.<l>.ssl.key.password)."""
    spec = KAFKA_BROKER_CONFIGS.get(name)
    return spec[0] == "password" if spec else name not in BROKER_DEFAULTS


def broker_default_text(name):
    """The default DescribeConfigs shows: Kafka's (none for the settings that
    exist only dynamically), or doze's for its own doze.* settings."""
    spec = KAFKA_BROKER_CONFIGS.get(name)
    if spec is None:
        value = BROKER_DEFAULTS.get(name)
        return None if value is None else java_text(value)
    if name in KAFKA_QUOTA_BROKER_CONFIGS:
        return None
    return spec[1] if isinstance(spec[1], str) else None


def synonym_chain(entries, head):
    """Kafka lists a config's synonyms from the first entry of the chain's head
    (its most specific broker name); a chain without one lists none."""
    i = next((i for i, e in enumerate(entries) if e[0] == head), None)
    return [] if i is None else entries[i:]


def describe_topic_config(ctx, overrides, name):
    """(value, source, synonyms) of one config of a topic with these overrides."""
    synonyms = KAFKA_TOPIC_CONFIGS[name][3]
    chain = synonym_chain([e for s in synonyms for e in broker_entries(ctx, s)], synonyms[0]) \
        if synonyms else []
    if name in overrides:
        return overrides[name], SOURCE_TOPIC, [(name, overrides[name], SOURCE_TOPIC)] + chain
    if chain:
        return chain[0][1], chain[0][2], chain
    return ctx.logs.inherited(name)[0], SOURCE_DEFAULT, chain


def topic_config_entries(ctx, topic, keys, synonyms):
    meta = ctx.logs.topics[topic]
    names = sorted(set(TOPIC_CONFIGS) | set(meta.configs))
    entries = []
    for name in names:
        if keys and name not in keys:
            continue
        value, source, chain = describe_topic_config(ctx, meta.configs, name)
        entries.append(Msg(name=name, value=value, read_only=False, config_source=source,
                           is_sensitive=False,
                           synonyms=[Msg(name=n, value=v, source=src) for n, v, src in chain]
                           if synonyms else [],
                           config_type=CONFIG_TYPE_CODES[KAFKA_TOPIC_CONFIGS[name][0]],
                           documentation=None))
    return entries


def described_broker_names(ctx):
    """What DescribeConfigs lists for the broker: Kafka's settings but its
    internal and dynamic-only ones, doze's own, and any other that was set."""
    internal = KAFKA_INTERNAL_BROKER_CONFIGS | KAFKA_QUOTA_BROKER_CONFIGS
    config = ctx.config
    return (set(KAFKA_BROKER_CONFIGS) - internal) | config.given \
        | set(config.dynamic_cluster) | set(config.dynamic_node)


def broker_config_entries(ctx, resource_name, keys, synonyms):
    """The broker's settings; for resource "" (the cluster default) only the
    ones set dynamically for the whole cluster."""
    entries = []
    for name in sorted(described_broker_names(ctx)):
        if keys and name not in keys:
            continue
        spec = KAFKA_BROKER_CONFIGS.get(name)
        chain = broker_entries(ctx, name, node=resource_name != "")
        if resource_name == "":
            chain = [e for e in chain if e[2] == SOURCE_DYNAMIC_DEFAULT]
            if not chain:
                continue
        own = next((e for e in chain if e[0] == name), None)
        value, source = (own[1], own[2]) if own else (None, SOURCE_DEFAULT)
        if name == "broker.id":                       # Kafka copies node.id into it
            value, source = str(ctx.config["node.id"]), SOURCE_STATIC
            chain = [(name, value, source)] + chain
        heads = KAFKA_BROKER_SYNONYMS.get(name)
        if heads and resource_name != "":
            chain = synonym_chain([e for s in heads for e in broker_entries(ctx, s)], name)
        known = spec is not None or name in BROKER_DEFAULTS
        sensitive = broker_config_sensitive(name)
        if sensitive:
            value, chain = None, [(n, None, s) for n, _, s in chain]
        entries.append(Msg(name=name, value=value, read_only=not known or broker_mode(name) == "read-only",
                           config_source=source, is_sensitive=sensitive,
                           synonyms=[Msg(name=n, value=v, source=src) for n, v, src in chain]
                           if synonyms else [],
                           config_type=CONFIG_TYPE_CODES.get(broker_type(name), 0), documentation=None))
    return entries


def group_config_entries(ctx, group_id, keys, synonyms):
    """A group's configs as ConfigHelper.createGroupConfigEntry: the group's own
    value (source 8), else its broker setting's chain, else the default."""
    own = ctx.groups.configs.get(group_id, {})
    entries = []
    for name in java_hash_order(list(KAFKA_GROUP_CONFIGS)):     # Kafka answers from a HashMap
        if keys and name not in keys:
            continue
        kind, default, _, broker_name = KAFKA_GROUP_CONFIGS[name]
        chain = broker_entries(ctx, broker_name) if broker_name else [(name, default, SOURCE_DEFAULT)]
        if name in own:
            chain = [(name, own[name], SOURCE_GROUP)] + chain
        entries.append(Msg(name=name, value=chain[0][1], read_only=False, config_source=chain[0][2],
                           is_sensitive=False, synonyms=[Msg(name=n, value=v, source=src) for n, v, src in chain]
                           if synonyms else [], config_type=CONFIG_TYPE_CODES[kind], documentation=None))
    return entries


# GroupConfig.validateValues: a group's value within the broker's bounds
# (group.<kind>.min.<rest> / .max.), in Kafka's order; the assignment intervals
# only when the group sets them; then each kind's session above its heartbeat.
GROUP_CONFIGS_BOUNDED = (
    "consumer.heartbeat.interval.ms", "consumer.session.timeout.ms", "consumer.assignment.interval.ms",
    "share.heartbeat.interval.ms", "share.session.timeout.ms", "share.record.lock.duration.ms",
    "share.delivery.count.limit", "share.partition.max.record.locks", "share.assignment.interval.ms",
    "streams.heartbeat.interval.ms", "streams.session.timeout.ms", "streams.num.standby.replicas",
    "streams.assignment.interval.ms")


def check_group_configs(ctx, configs):
    """-> configs as Kafka stores them, or KafkaError INVALID_CONFIG with Kafka's message."""
    for name in configs:
        if name not in KAFKA_GROUP_CONFIGS:
            raise KafkaError(ErrorCode.INVALID_CONFIG, f"Unknown group config name: {name}")
    try:
        checked = {n: normalize_config(n, KAFKA_GROUP_CONFIGS[n][0], KAFKA_GROUP_CONFIGS[n][2], text)
                   for n, text in configs.items()}
    except ConfigValueError as e:
        raise KafkaError(ErrorCode.INVALID_CONFIG, str(e)) from None

    def value(name):                  # the group's, else its broker setting's (extractGroupConfigMap)
        broker_name = KAFKA_GROUP_CONFIGS[name][3]
        return int(checked[name] if name in checked else broker_entries(ctx, broker_name)[0][1])
    for name in GROUP_CONFIGS_BOUNDED:
        if name.endswith(".assignment.interval.ms") and name not in checked:
            continue
        kind, rest = name.split(".", 1)
        for bound, fails, words in (("min", operator.lt, "greater than or equal to"),
                                    ("max", operator.gt, "less than or equal to")):
            limit = f"group.{kind}.{bound}.{rest.replace('num.standby', 'standby')}"
            if limit in KAFKA_BROKER_CONFIGS and fails(value(name), int(broker_entries(ctx, limit)[0][1])):
                raise KafkaError(ErrorCode.INVALID_CONFIG, f"{name} must be {words} {limit}")
    for kind in ("consumer", "share", "streams"):
        if value(f"{kind}.session.timeout.ms") <= value(f"{kind}.heartbeat.interval.ms"):
            raise KafkaError(ErrorCode.INVALID_CONFIG, f"{kind}.session.timeout.ms must be greater than "
                             f"{kind}.heartbeat.interval.ms")
    return checked


def alter_group_configs(ctx, res, validate_only, incremental):
    """A group's configs (KIP-848's consumer, share and streams groups): stored
    and described; doze serves the classic protocol only and does not act on them."""
    check_null_values(res, incremental)
    current = ctx.groups.configs.get(res.resource_name, {})
    new = apply_config_ops(current, res, incremental, lambda n: KAFKA_GROUP_CONFIGS.get(n, (None,))[0])
    if not res.resource_name:
        raise KafkaError(ErrorCode.INVALID_REQUEST, "Default group resources are not allowed.")
    checked = check_group_configs(ctx, new)
    if validate_only or checked == current:
        return
    ctx.store.set_group_configs(res.resource_name, checked)
    if checked:
        ctx.groups.configs[res.resource_name] = checked
    else:
        ctx.groups.configs.pop(res.resource_name, None)
    log.info("group %s configs set (%s): stored and described; doze serves the classic group "
             "protocol and does not act on them", res.resource_name, ", ".join(sorted(checked)) or "none")


def broker_mode(name):
    spec = KAFKA_BROKER_CONFIGS.get(name)
    return spec[3] if spec else "read-only"


def broker_type(name):
    spec = KAFKA_BROKER_CONFIGS.get(name)
    if spec is not None:
        return spec[0]
    default = BROKER_DEFAULTS.get(name)
    return "boolean" if isinstance(default, bool) else "long" if isinstance(default, int) \
        else "string" if default is not None else None


def check_broker_resource(ctx, name, alter=False):
    node_id = ctx.node(ctx.conn)[0]
    if name and not re.fullmatch(r"-?\d+", name):
        raise KafkaError(ErrorCode.INVALID_REQUEST, f"{'Node' if alter else 'Broker'} id must be "
                         f"an integer, but it is: {name}")
    if name not in ("", str(node_id)):
        raise KafkaError(ErrorCode.INVALID_REQUEST, f"Unexpected broker id, expected {node_id}"
                         f"{'' if alter else ' or empty string'}, but received {name}")


CONFIG_RESOURCE_ACL = {RESOURCE_TOPIC: ResourceType.TOPIC, RESOURCE_BROKER: ResourceType.CLUSTER,
                       RESOURCE_GROUP: ResourceType.GROUP}


def config_resource_denied(ctx, res, operation):
    """The authorization error of a config resource (a broker's is the cluster's), or 0."""
    rtype = CONFIG_RESOURCE_ACL.get(res.resource_type)
    if rtype is None:
        return 0
    name = CLUSTER_NAME if rtype == ResourceType.CLUSTER else res.resource_name
    return 0 if ctx.allowed(operation, rtype, name) else AUTHORIZATION_FAILED[rtype]


def alter_configs(ctx, resources, validate_only, incremental):
    """The shared body of AlterConfigs and IncrementalAlterConfigs."""
    results = []
    for res in resources:
        out = Msg(resource_type=res.resource_type, resource_name=res.resource_name,
                  error_message=None)
        results.append(out)
        try:
            denied = config_resource_denied(ctx, res, AclOperation.ALTER_CONFIGS)
            if denied:
                raise KafkaError(denied, KAFKA_ERROR_MESSAGES[denied])
            if res.resource_type == RESOURCE_TOPIC:
                alter_topic_configs(ctx, res, validate_only, incremental)
            elif res.resource_type == RESOURCE_BROKER:
                alter_broker_configs(ctx, res, validate_only, incremental)
            elif res.resource_type == RESOURCE_GROUP:
                alter_group_configs(ctx, res, validate_only, incremental)
            else:
                raise KafkaError(ErrorCode.INVALID_REQUEST,
                                 f"Unsupported resource type {res.resource_type}")
        except KafkaError as e:
            out.error_code, out.error_message = e.code, e.detail or None
    return Msg(responses=results)


OP_SET, OP_DELETE, OP_APPEND, OP_SUBTRACT = 0, 1, 2, 3


def apply_config_ops(current, res, incremental, kind_of, unset=lambda name: ""):
    """-> the new {name: value} after a resource's operations (kind_of(name):
    a config's type, or None for a name it does not know; unset(name): the
    value APPEND and SUBTRACT start from for a name not set)."""
    new = dict(current) if incremental else {}
    names = [c.name for c in res.configs]
    if len(set(names)) != len(names):
        raise KafkaError(ErrorCode.INVALID_REQUEST, "Error due to duplicate config keys")
    for c in res.configs:
        op = c.config_operation if incremental else OP_SET
        if op == OP_SET:
            new[c.name] = c.value
        elif op == OP_DELETE:
            new.pop(c.name, None)
        elif op in (OP_APPEND, OP_SUBTRACT):
            if kind_of(c.name) != "list":
                verb = "APPEND" if op == OP_APPEND else "SUBTRACT"
                raise KafkaError(ErrorCode.INVALID_CONFIG,
                                 f"Can't {verb} to key {c.name} because its type is not LIST.")
            items = [v for v in ((new[c.name] if c.name in new else unset(c.name)) or "").split(",") if v]
            for v in (c.value or "").split(","):
                if op == OP_APPEND and v not in items:
                    items.append(v)
                elif op == OP_SUBTRACT and v in items:
                    items.remove(v)
            new[c.name] = ",".join(items)
        else:                          # Kafka's OpType.forId throws: an unexpected error
            raise KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR)
    return new


def check_null_values(res, incremental):
    for c in res.configs:
        if c.value is None and (not incremental or c.config_operation != OP_DELETE):
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"Null value not supported for : {c.name}")


def alter_topic_configs(ctx, res, validate_only, incremental):
    if res.resource_name not in ctx.logs.topics:
        raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                         f"The topic '{res.resource_name}' does not exist.")
    current = ctx.logs.topics[res.resource_name].configs
    new = apply_config_ops(current, res, incremental, lambda n: KAFKA_TOPIC_CONFIGS.get(n, (None,))[0],
                           unset=lambda n: ctx.logs.inherited(n)[0])
    checked = check_topic_configs(new, ErrorCode.INVALID_REQUEST, "")
    if not validate_only:
        ctx.logs.set_topic_configs(res.resource_name, checked)


def alter_broker_configs(ctx, res, validate_only, incremental):
    """Kafka's rules: a read-only setting cannot change; a per-broker one only
    for the broker's id; a bad value is INVALID_REQUEST (not INVALID_CONFIG, as
    for topics); a name Kafka does not know is accepted and stored. The value of
    a sensitive one (a password, a key, a JAAS config) is not kept: doze does
    not act on it and DescribeConfigs shows none, so meta.db holds a marker."""
    check_broker_resource(ctx, res.resource_name, alter=True)
    node = res.resource_name != ""
    check_null_values(res, incremental)
    dynamic = ctx.config.dynamic_node if node else dict(KRAFT_CLUSTER_DEFAULTS, **ctx.config.dynamic_cluster)
    new = apply_config_ops(dynamic, res, incremental, broker_type,    # APPEND/SUBTRACT start from Kafka's
                           unset=broker_default_text)              # default (ConfigurationControlManager.getParts)
    if not node and "min.insync.replicas" not in new:
        raise KafkaError(ErrorCode.INVALID_CONFIG, "Cluster-level min.insync.replicas cannot be "
                         "removed while ELR is enabled.")
    changed = {n for n in set(new) | set(dynamic) if new.get(n) != dynamic.get(n)}
    fixed = sorted(n for n in changed if n in KAFKA_BROKER_CONFIGS and broker_mode(n) == "read-only"
                   or n in BROKER_DEFAULTS and n not in KAFKA_BROKER_CONFIGS)
    if fixed:
        raise KafkaError(ErrorCode.INVALID_REQUEST, f"Cannot update these configs dynamically: "
                         f"[{', '.join(fixed)}]")
    if not node and any(broker_mode(n) == "per-broker" for n in changed):
        raise KafkaError(ErrorCode.INVALID_REQUEST, "Cannot update these configs at default cluster "
                         "level, broker id must be specified: "
                         f"[{', '.join(sorted(n for n in changed if broker_mode(n) == 'per-broker'))}]")
    listener = sorted(n for n in changed if broker_mode(n) == "per-listener")
    if listener:
        raise KafkaError(ErrorCode.INVALID_REQUEST, "These security configs can be dynamically "
                         f"updated only per-listener using the listener prefix: [{', '.join(listener)}]")
    checked = {}
    for name, text in new.items():
        spec = KAFKA_BROKER_CONFIGS.get(name)
        try:
            checked[name] = normalize_config(name, spec[0], spec[2], text) if spec and text is not None \
                else text
        except ConfigValueError as e:
            raise KafkaError(ErrorCode.INVALID_REQUEST, str(e)) from None
    if validate_only:
        return
    for name in changed:                # never read back (DescribeConfigs shows them as null)
        if checked.get(name) is not None and broker_config_sensitive(name):
            checked[name] = SECRET_NOT_KEPT
    prefix = NODE_PREFIX if node else DYNAMIC_PREFIX
    ctx.store.set_settings({prefix + n: checked.get(n) for n in changed})
    for name in sorted(changed):
        ctx.config.set_dynamic(node, name, checked.get(name))
        note = setting_note(name, " set dynamically") if name in checked else None
        if note:
            log.log(*note)


###############################################################################
# 17. ADMINISTRATION AND SECURITY APIS -- topics, configs, ACLs, SASL, SCRAM users, quotas
###############################################################################
# The handlers an administrator's tools speak (kafka-topics, kafka-configs,
# kafka-acls, the AdminClient), and the two SASL steps of a connection, in
# API-key order. Topics are made and removed by LogManager (§8) in steps;
# configs are read and changed through the config resources (§16); ACLs go
# to the Authorizer and SCRAM credentials to meta.db (§13).

# --- SaslHandshake (17) ---------------------------------------------------------

@api("""
SaslHandshake  key=17  versions=0-1  flexible=none
  request
    mechanism  string
  response
    error_code  int16
    mechanisms  []string
""")
def handle_sasl_handshake(ctx, req):
    """SaslHandshake: the mechanism a SASL connection will authenticate with.
    v1: the tokens follow in SaslAuthenticate; v0: as bare frames (see §13).

    Errors: UNSUPPORTED_SASL_MECHANISM (not enabled on this listener: answered
    with the enabled ones after the failure delay, then the connection closes),
    ILLEGAL_SASL_STATE (not a SASL listener, or already authenticated).
    """
    sasl = ctx.conn.sasl
    if sasl is None or sasl.complete and not sasl.may_reauthenticate(ctx.now_ms):
        return Msg(error_code=ErrorCode.ILLEGAL_SASL_STATE, mechanisms=[])
    if sasl.handshake(req.mechanism, ctx.version, ctx.now_ms):
        return Msg(error_code=ErrorCode.NONE, mechanisms=sasl.mechanisms)
    return AuthenticationFailure(Msg(error_code=ErrorCode.UNSUPPORTED_SASL_MECHANISM, mechanisms=sasl.mechanisms),
                                 f"SASL mechanism {req.mechanism!r} is not enabled on listener {sasl.listener}")


# --- CreateTopics (19) ----------------------------------------------------------

@api("""
CreateTopics  key=19  versions=2-7  flexible=5+
  request
    topics  []
      name  string
      num_partitions  int32                    # -1: num.partitions
      replication_factor  int16                # -1: default.replication.factor
      assignments  []
        partition_index  int32
        broker_ids  []int32
      configs  []
        name  string
        value  string?
    timeout_ms  int32 = 60000
    validate_only  bool = false
  response
    throttle_time_ms  int32
    topics  []
      name  string
      topic_id  uuid  v7+
      error_code  int16
      error_message  string?
      num_partitions  int32 = -1  v5+
      replication_factor  int16 = -1  v5+
      configs  []?  v5+
        name  string
        value  string?
        read_only  bool
        config_source  int8 = -1
        is_sensitive  bool
      topic_config_error_code  int16 = 0  v5+  tag=0     # no DESCRIBE_CONFIGS: 29, configs not shown
""")
def handle_create_topics(ctx, req):
    """CreateTopics: new topics, their partition directories and meta.db rows,
    made in steps (thousands of directories take a while).

    Errors per topic: INVALID_TOPIC_EXCEPTION, TOPIC_ALREADY_EXISTS,
    INVALID_PARTITIONS, INVALID_REPLICATION_FACTOR (anything but 1 or -1: one
    broker), INVALID_REPLICA_ASSIGNMENT, INVALID_CONFIG, INVALID_REQUEST
    (a topic named twice in one request), POLICY_VIOLATION (over Kafka's
    10,000 partitions a request, or doze.max.partitions in all),
    UNKNOWN_SERVER_ERROR (the directories could not be made), TOPIC_AUTHORIZATION_FAILED
    (CREATE on the cluster or on the topic; answered after the others, as Kafka's
    controller does). A topic made without DESCRIBE_CONFIGS on it is answered
    with topic_config_error_code 29 and no configs.
    """
    return in_steps(create_topics(ctx, req))


def create_topics(ctx, req):
    counts = collections.Counter(t.name for t in req.topics)
    request_error = create_topics_limit(ctx, req.topics)
    if ctx.allowed(AclOperation.CREATE, ResourceType.CLUSTER, CLUSTER_NAME, log_denial=False):
        creatable = set(counts)
    else:
        creatable = topics_allowed(ctx, AclOperation.CREATE, (n for n in counts if counts[n] == 1))
    results = []
    for t in req.topics:
        if counts[t.name] > 1 or t.name not in creatable:
            continue
        res = Msg(name=t.name, error_message=None)
        results.append(res)
        try:
            if request_error:
                raise request_error
            if t.name == "__cluster_metadata":
                raise KafkaError(ErrorCode.INVALID_REQUEST,
                                 "Creation of internal topic __cluster_metadata is prohibited.")
            partitions, replication = check_assignments(ctx, t)
            partitions, configs = ctx.logs.check_new_topic(
                t.name, partitions, replication, {c.name: c.value for c in t.configs})
            res.topic_id = uuid.uuid4().bytes if req.validate_only else \
                (yield from ctx.logs.create_topic(t.name, partitions, configs))
            if ctx.allowed(AclOperation.DESCRIBE_CONFIGS, ResourceType.TOPIC, t.name, log_denial=False):
                res.num_partitions, res.replication_factor = partitions, 1
                res.configs = [describe_new_topic_config(ctx, name, configs)
                               for name in sorted(set(TOPIC_CONFIGS) | set(configs))]
            else:
                res.topic_config_error_code, res.configs = ErrorCode.TOPIC_AUTHORIZATION_FAILED, []
        except KafkaError as e:
            res.error_code, res.error_message = e.code, e.detail or None
        except OSError as e:
            log.error("creating topic %s failed: %s; nothing of it is left", t.name, e)
            res.error_code, res.error_message = ErrorCode.UNKNOWN_SERVER_ERROR, f"storage: {e}"
    results += [Msg(name=name, error_code=ErrorCode.INVALID_REQUEST, error_message="Duplicate topic name.")
                for name, n in counts.items() if n > 1]          # Kafka: one entry each, last
    results += [Msg(name=name, error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED, error_message="Authorization failed.")
                for name in java_hash_order(n for n in counts if counts[n] == 1 and n not in creatable)]
    return Msg(topics=results)


# Kafka 4.3.1's controller makes a request's changes as one batch of metadata
# records: CreateTopics may hold 10,000 partitions in all (summed in Java's
# int), and no request more than 10,000 records (a topic, each partition and
# each config is one). What it answers past them, recorded (partition-limits):
MAX_PARTITIONS_PER_REQUEST = 10000        # ReplicationControlManager.MAX_PARTITIONS_PER_BATCH
MAX_RECORDS_PER_REQUEST = 10000           # QuorumController.MAX_RECORDS_PER_USER_OP


def java_int(n):
    return (n + (1 << 31)) % (1 << 32) - (1 << 31)


def create_topics_limit(ctx, topics):
    """The request-wide refusal Kafka gives a CreateTopics too big for one batch, or None."""
    total = records = exact = 0
    for t in topics:
        n = len(t.assignments) if t.assignments else \
            ctx.config["num.partitions"] if t.num_partitions == -1 else max(t.num_partitions, 0)
        total, exact = java_int(total + n), exact + n
        records += 1 + n + len(t.configs)
    if total > MAX_PARTITIONS_PER_REQUEST:
        return KafkaError(ErrorCode.POLICY_VIOLATION, "Excessively large number of partitions per request.")
    if records > MAX_RECORDS_PER_REQUEST:
        if exact > INT32_MAX:           # the Java sum wrapped: Kafka runs out of memory here
            return KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR)
        return KafkaError(ErrorCode.POLICY_VIOLATION, "Unable to perform excessively large batch operation.")
    return None


def check_assignments(ctx, t):
    """Manual replica assignments: allowed only onto this broker, one replica each."""
    if not t.assignments:
        return t.num_partitions, t.replication_factor
    if t.num_partitions != -1 or t.replication_factor != -1:
        raise KafkaError(ErrorCode.INVALID_REQUEST,
                         "Both numPartitions or replicationFactor and replicasAssignments were set. "
                         "Both cannot be used at the same time.")
    node_id = ctx.node(ctx.conn)[0]
    for i, a in enumerate(sorted(t.assignments, key=lambda a: a.partition_index)):
        if a.partition_index != i or not a.broker_ids:
            raise KafkaError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, "partitions must be 0..n-1")
        if a.broker_ids != [node_id]:
            raise KafkaError(ErrorCode.INVALID_REPLICA_ASSIGNMENT
                             if any(b != node_id for b in a.broker_ids)
                             else ErrorCode.INVALID_REPLICATION_FACTOR,
                             f"replicas {a.broker_ids}: this cluster is broker {node_id} alone")
    return len(t.assignments), 1


def describe_new_topic_config(ctx, name, overrides):
    """One config of a topic CreateTopics made (or would make), v5+."""
    value, source, _ = describe_topic_config(ctx, overrides, name)
    return Msg(name=name, value=value, read_only=False, config_source=source, is_sensitive=False)


# --- DeleteTopics (20) ----------------------------------------------------------

@api("""
DeleteTopics  key=20  versions=1-6  flexible=4+
  request
    topics  []  v6+
      name  string? = null
      topic_id  uuid
    topic_names  []string  v1-5
    timeout_ms  int32
  response
    throttle_time_ms  int32
    responses  []
      name  string?6+
      topic_id  uuid  v6+
      error_code  int16
      error_message  string? = null  v5+
""")
def handle_delete_topics(ctx, req):
    """DeleteTopics: the meta.db row goes first, then the partition directories.

    Errors: UNKNOWN_TOPIC_OR_PARTITION, UNKNOWN_TOPIC_ID, TOPIC_DELETION_DISABLED,
    TOPIC_AUTHORIZATION_FAILED (DESCRIBE on the topic, asked before whether it
    exists; then DELETE on the cluster or the topic).
    """
    wanted = req.topics if ctx.version >= 6 else [Msg(name=n, topic_id=UUID_ZERO)
                                                   for n in req.topic_names]
    cluster_delete = ctx.allowed(AclOperation.DELETE, ResourceType.CLUSTER, CLUSTER_NAME, log_denial=False)
    return Msg(responses=[delete_topic(ctx, t, cluster_delete) for t in wanted])


def delete_topic(ctx, t, cluster_delete):
    """One topic of a DeleteTopics, by name or by id -> its answer."""
    name = t.name
    if name is None:
        name = next((n for n, m in ctx.logs.topics.items() if m.topic_id == t.topic_id), None)
    res = Msg(name=name, topic_id=t.topic_id)
    if name is None:
        res.error_code = ErrorCode.UNKNOWN_TOPIC_ID
    elif not (cluster_delete or ctx.allowed(AclOperation.DESCRIBE, ResourceType.TOPIC, name)):
        res.error_code, res.error_message = ErrorCode.TOPIC_AUTHORIZATION_FAILED, KAFKA_ERROR_MESSAGES[29]
        res.name = t.name                           # by id: the name stays unsaid
    elif name not in ctx.logs.topics:
        res.error_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        res.error_message = "This server does not host this topic-partition."
    elif not (cluster_delete or ctx.allowed(AclOperation.DELETE, ResourceType.TOPIC, name)):
        res.error_code, res.error_message = ErrorCode.TOPIC_AUTHORIZATION_FAILED, KAFKA_ERROR_MESSAGES[29]
    elif not ctx.config["delete.topic.enable"]:
        res.error_code = ErrorCode.TOPIC_DELETION_DISABLED
    else:
        res.topic_id = ctx.logs.topics[name].topic_id
        ctx.logs.delete_topic(name)
        ctx.producer_states.forget_topic(name)
        if name == CONSUMER_OFFSETS:
            log.warning("%s was deleted: every group's committed offsets are gone, as in Kafka", name)
            ctx.groups.forget_all_offsets()
    return res


# --- DescribeAcls (29), CreateAcls (30), DeleteAcls (31) ----------------------
# The cluster's DESCRIBE (DescribeAcls) or ALTER (the others) first; then,
# without an authorizer (authorizer.class.name unset, as by default), Kafka
# answers every ACL request SECURITY_DISABLED, and so does doze. Filters
# match as Kafka's AclBindingFilter (acl_filter_matches).

NO_AUTHORIZER = "No Authorizer is configured."
ANY_CODE = 1                            # ANY of a type, operation or permission: for filters only


@api("""
DescribeAcls  key=29  versions=1-3  flexible=2+
  request
    resource_type_filter  int8
    resource_name_filter  string?
    pattern_type_filter  int8 = 3
    principal_filter  string?
    host_filter  string?
    operation  int8
    permission_type  int8
  response
    throttle_time_ms  int32 = 0
    error_code  int16
    error_message  string?
    resources  []
      resource_type  int8
      resource_name  string
      pattern_type  int8 = 3
      acls  []
        principal  string
        host  string
        operation  int8
        permission_type  int8
""")
def handle_describe_acls(ctx, req):
    """DescribeAcls: the ACLs the filter matches, grouped by resource pattern.

    Errors: CLUSTER_AUTHORIZATION_FAILED, SECURITY_DISABLED (no authorizer),
    INVALID_REQUEST (an UNKNOWN pattern or entry filter).
    """
    if has_unknown_acl_field(req):
        return CloseConnection("DescribeAcls: its filter contains UNKNOWN (0) elements")
    ctx.check_cluster(AclOperation.DESCRIBE)
    if ctx.authorizer is None:
        return Msg(error_code=ErrorCode.SECURITY_DISABLED, error_message="No Authorizer is configured on the broker",
                   resources=[])
    patterns = {}
    for acl in ctx.authorizer.matching(acl_filter(req)):
        patterns.setdefault((acl.resource_type, acl.name, acl.pattern), []).append(
            Msg(principal=acl.principal, host=acl.host, operation=acl.operation, permission_type=acl.permission))
    return Msg(error_code=ErrorCode.NONE, resources=[
        Msg(resource_type=t, resource_name=n, pattern_type=p, acls=acls) for (t, n, p), acls in patterns.items()])


def has_unknown_acl_field(*items):
    """Kafka's ACL requests refuse a code 0 (UNKNOWN) in a type, pattern,
    operation or permission when they are parsed: the connection closes."""
    return any(0 in (getattr(i, "resource_type", None), getattr(i, "resource_type_filter", None),
                     getattr(i, "resource_pattern_type", None), getattr(i, "pattern_type_filter", None),
                     i.operation, i.permission_type) for i in items)


def acl_filter(f):
    """A filter of DescribeAcls or DeleteAcls, checked as AclControlManager.validateFilter."""
    if 0 in (known_code(ResourceType, f.resource_type_filter), known_code(PatternType, f.pattern_type_filter)):
        raise KafkaError(ErrorCode.INVALID_REQUEST, "Unknown patternFilter.")
    if 0 in (known_code(AclOperation, f.operation), known_code(AclPermission, f.permission_type)):
        raise KafkaError(ErrorCode.INVALID_REQUEST, "Unknown entryFilter.")
    return f


def known_code(enum_type, value):
    """An ACL enum's member, or its UNKNOWN (0) for a code it does not have (Kafka's fromCode)."""
    return enum_type(value) if value in enum_type._value2member_map_ else enum_type.UNKNOWN


@api("""
CreateAcls  key=30  versions=1-3  flexible=2+
  request
    creations  []
      resource_type  int8
      resource_name  string
      resource_pattern_type  int8 = 3
      principal  string
      host  string
      operation  int8
      permission_type  int8
  response
    throttle_time_ms  int32 = 0
    results  []
      error_code  int16
      error_message  string?
""")
def handle_create_acls(ctx, req):
    """CreateAcls: each creation stored (one meta.db commit), or its error; an
    ACL that exists already is success. In effect from the next request on.

    Errors (per creation): CLUSTER_AUTHORIZATION_FAILED, SECURITY_DISABLED,
    INVALID_REQUEST (a CLUSTER not named kafka-cluster, an empty name, a type,
    pattern, operation or permission that is not one an ACL may have).
    """
    if has_unknown_acl_field(*req.creations):
        return CloseConnection("CreateAcls: a creation contains UNKNOWN (0) elements")
    try:
        check_acl_alteration(ctx)
        if any(ANY_CODE in (c.resource_type, c.operation, c.permission_type) or
               c.resource_pattern_type in (PatternType.ANY, PatternType.MATCH) for c in req.creations):
            raise KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR)   # Kafka's AclBinding throws: the whole request
    except KafkaError as e:
        return Msg(results=[Msg(error_code=e.code, error_message=e.detail or None) for _ in req.creations])
    results, new = [], []
    for c in req.creations:
        error = new_acl_error(c)
        results.append(Msg(error_code=ErrorCode.INVALID_REQUEST if error else ErrorCode.NONE, error_message=error))
        if error is None:
            new.append(Acl(c.resource_type, c.resource_name, c.resource_pattern_type, c.principal, c.host,
                           c.operation, c.permission_type))
    ctx.authorizer.add(new)
    return Msg(results=results)


def check_acl_alteration(ctx):
    """CreateAcls' and DeleteAcls' first checks: ALTER on the cluster, then an authorizer."""
    ctx.check_cluster(AclOperation.ALTER)
    if ctx.authorizer is None:
        raise KafkaError(ErrorCode.SECURITY_DISABLED, NO_AUTHORIZER)


def new_acl_error(c):
    """What AclApis and AclControlManager.validateNewAcl refuse in an ACL, or None."""
    if c.resource_type == ResourceType.CLUSTER and c.resource_name != CLUSTER_NAME:
        return f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}"
    if not c.resource_name:
        return "Invalid empty resource name"
    for value, enum_type, ok, what in (
            (c.resource_type, ResourceType, lambda v: v not in (ResourceType.UNKNOWN, ResourceType.ANY), "resourceType"),
            (c.resource_pattern_type, PatternType, lambda v: v in (PatternType.LITERAL, PatternType.PREFIXED),
             "patternType"),
            (c.operation, AclOperation, lambda v: v not in (AclOperation.UNKNOWN, AclOperation.ANY), "operation"),
            (c.permission_type, AclPermission, lambda v: v in (AclPermission.DENY, AclPermission.ALLOW),
             "permissionType")):
        known = known_code(enum_type, value)
        if not ok(known):
            return f"Invalid {what} {known.name}"
    return None


@api("""
DeleteAcls  key=31  versions=1-3  flexible=2+
  request
    filters  []
      resource_type_filter  int8
      resource_name_filter  string?
      pattern_type_filter  int8 = 3
      principal_filter  string?
      host_filter  string?
      operation  int8
      permission_type  int8
  response
    throttle_time_ms  int32 = 0
    filter_results  []
      error_code  int16
      error_message  string?
      matching_acls  []
        error_code  int16
        error_message  string?
        resource_type  int8
        resource_name  string
        pattern_type  int8 = 3
        principal  string
        host  string
        operation  int8
        permission_type  int8
""")
def handle_delete_acls(ctx, req):
    """DeleteAcls: every ACL any filter matches goes (all filters at once, one
    meta.db commit); each filter lists what it matched.

    Errors (per filter): CLUSTER_AUTHORIZATION_FAILED, SECURITY_DISABLED,
    INVALID_REQUEST (an UNKNOWN pattern or entry filter).
    """
    if has_unknown_acl_field(*req.filters):
        return CloseConnection("DeleteAcls: a filter contains UNKNOWN (0) elements")
    try:
        check_acl_alteration(ctx)
    except KafkaError as e:
        return Msg(filter_results=[Msg(error_code=e.code, error_message=e.detail, matching_acls=[])
                                   for _ in req.filters])
    matches = [acls_matching(ctx, f) for f in req.filters]
    ctx.authorizer.remove([acl for _, matched in matches for acl in matched])
    return Msg(filter_results=[result for result, _ in matches])


def acls_matching(ctx, f):
    """One filter of a DeleteAcls -> (its answer, the ACLs it matched)."""
    try:
        matched = ctx.authorizer.matching(acl_filter(f))
    except KafkaError as e:
        return Msg(error_code=e.code, error_message=e.detail, matching_acls=[]), []
    return Msg(error_code=ErrorCode.NONE, matching_acls=[Msg(
        error_code=ErrorCode.NONE, resource_type=a.resource_type, resource_name=a.name, pattern_type=a.pattern,
        principal=a.principal, host=a.host, operation=a.operation, permission_type=a.permission)
        for a in matched]), matched


# --- DescribeConfigs (32), AlterConfigs (33), IncrementalAlterConfigs (44) ------

@api("""
DescribeConfigs  key=32  versions=1-4  flexible=4+
  request
    resources  []
      resource_type  int8
      resource_name  string
      configuration_keys  []string?            # null: all
    include_synonyms  bool = false
    include_documentation  bool = false  v3+
  response
    throttle_time_ms  int32
    results  []
      error_code  int16
      error_message  string?
      resource_type  int8
      resource_name  string
      configs  []
        name  string
        value  string?
        read_only  bool
        config_source  int8 = -1
        is_sensitive  bool
        synonyms  []
          name  string
          value  string?
          source  int8
        config_type  int8 = 0  v3+
        documentation  string?  v3+
""")
def handle_describe_configs(ctx, req):
    """DescribeConfigs: topic, broker and group configs with their sources and synonyms.

    Errors: UNKNOWN_TOPIC_OR_PARTITION, INVALID_REQUEST (unknown resource type or
    broker, a group named ""), CLUSTER_, TOPIC_ and GROUP_AUTHORIZATION_FAILED
    (DESCRIBE_CONFIGS on the cluster for a broker, on the topic, on the group;
    such answers come after the others, as in Kafka).
    """
    results, refused = [], []
    for res in req.resources:
        out = Msg(resource_type=res.resource_type, resource_name=res.resource_name,
                  error_message=None, configs=[])
        denied = config_resource_denied(ctx, res, AclOperation.DESCRIBE_CONFIGS)
        if denied:
            out.error_code, out.error_message = denied, KAFKA_ERROR_MESSAGES[denied]
            refused.append(out)
            continue
        results.append(out)
        try:
            out.configs = config_entries(ctx, res, req.include_synonyms)
        except KafkaError as e:
            out.error_code, out.error_message = e.code, e.detail or None
    return Msg(results=results + refused)


def config_entries(ctx, res, include_synonyms):
    """One resource of a DescribeConfigs: its entries (configuration_keys
    null or []: every config) -> [Msg]; raises KafkaError for the resource."""
    keys = set(res.configuration_keys or ())
    if res.resource_type == RESOURCE_TOPIC:
        if res.resource_name not in ctx.logs.topics:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "The topic does not exist.")
        return topic_config_entries(ctx, res.resource_name, keys, include_synonyms)
    if res.resource_type == RESOURCE_BROKER:
        check_broker_resource(ctx, res.resource_name)
        return broker_config_entries(ctx, res.resource_name, keys, include_synonyms)
    if res.resource_type == RESOURCE_GROUP:
        if not res.resource_name:
            raise KafkaError(ErrorCode.INVALID_REQUEST, "Group name must not be empty")
        return group_config_entries(ctx, res.resource_name, keys, include_synonyms)
    raise KafkaError(ErrorCode.INVALID_REQUEST, "This most likely occurs because of a request being malformed by "
                     "the client library or the message was sent to an incompatible broker. See the broker "
                     "logs for more details.")


@api("""
AlterConfigs  key=33  versions=0-2  flexible=2+
  request
    resources  []
      resource_type  int8
      resource_name  string
      configs  []
        name  string
        value  string?
    validate_only  bool
  response
    throttle_time_ms  int32
    responses  []
      error_code  int16
      error_message  string?
      resource_type  int8
      resource_name  string
""")
def handle_alter_configs(ctx, req):
    """AlterConfigs: replace a resource's overrides with the ones given (the
    older, non-incremental form). Errors: UNKNOWN_TOPIC_OR_PARTITION, INVALID_CONFIG,
    INVALID_REQUEST."""
    return alter_configs(ctx, req.resources, req.validate_only, incremental=False)


@api("""
IncrementalAlterConfigs  key=44  versions=0-1  flexible=1+
  request
    resources  []
      resource_type  int8
      resource_name  string
      configs  []
        name  string
        config_operation  int8                 # 0 SET, 1 DELETE, 2 APPEND, 3 SUBTRACT
        value  string?
    validate_only  bool
  response
    throttle_time_ms  int32
    responses  []
      error_code  int16
      error_message  string?
      resource_type  int8
      resource_name  string
""")
def handle_incremental_alter_configs(ctx, req):
    """IncrementalAlterConfigs (KIP-339): set, delete, append to or subtract from
    individual configs. Errors: as AlterConfigs."""
    return alter_configs(ctx, req.resources, req.validate_only, incremental=True)


# --- DescribeLogDirs (35) -------------------------------------------------------

@api("""
DescribeLogDirs  key=35  versions=1-5  flexible=2+     # kafka-log-dirs --describe
  request
    topics  []?                                # null: every partition
      topic  string
      partitions  []int32
  response
    throttle_time_ms  int32
    error_code  int16  v3+
    results  []
      error_code  int16
      log_dir  string
      topics  []
        name  string
        partitions  []
          partition_index  int32
          partition_size  int64
          offset_lag  int64
          is_future_key  bool
      total_bytes  int64 = -1  v4+
      usable_bytes  int64 = -1  v4+
      is_cordoned  bool = false  v5+
""")
def handle_describe_log_dirs(ctx, req):
    """DescribeLogDirs: doze's one log directory, each partition's size in it
    (the bytes of its segments: a compacted partition's shrink as its cleaner
    runs), and the disk's total and usable bytes. No partition has a future
    replica, so every offset lag is 0.

    Errors: CLUSTER_AUTHORIZATION_FAILED (DESCRIBE on the cluster: v3+ says so,
    older versions get no results).
    """
    if not ctx.allowed(AclOperation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME):
        return Msg(error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED, results=[])
    wanted = None if req.topics is None else {(t.topic, p) for t in req.topics for p in t.partitions}
    sizes = [(tp, sum(s.size for s in plog.segments)) for tp, plog in sorted(ctx.logs.logs.items())
             if (wanted is None or tp in wanted) and not plog.offline]
    disk = os.statvfs(ctx.config.data_dir)
    return Msg(results=[Msg(log_dir=ctx.config.data_dir, total_bytes=disk.f_blocks * disk.f_frsize,
                            usable_bytes=disk.f_bavail * disk.f_frsize,
                            topics=by_topic([(t, Msg(partition_index=p, partition_size=size, offset_lag=0))
                                             for (t, p), size in sizes], parts="partitions"))])


# --- SaslAuthenticate (36) ------------------------------------------------------

@api("""
SaslAuthenticate  key=36  versions=0-2  flexible=2+
  request
    auth_bytes  bytes
  response
    error_code  int16
    error_message  string?                       # "" on success: Kafka's generated default
    auth_bytes  bytes
    session_lifetime_ms  int64 = 0  v1+
""")
def handle_sasl_authenticate(ctx, req):
    """SaslAuthenticate: one token of the mechanism chosen by SaslHandshake v1,
    answered with the server's (empty bytes when it has none); the last one
    makes the connection's principal User:<name>.

    Errors: SASL_AUTHENTICATION_FAILED (sent after the failure delay, then the
    connection closes), ILLEGAL_SASL_STATE (no handshake on a SASL listener,
    or already authenticated: the connection stays).
    """
    sasl = ctx.conn.sasl
    if sasl is None or sasl.complete or sasl.raw:
        message = "SaslAuthenticate request received after successful authentication" \
            if sasl is not None and sasl.complete else "Unexpected SaslAuthenticate request"
        return Msg(error_code=ErrorCode.ILLEGAL_SASL_STATE, error_message=message, auth_bytes=b"")
    try:
        reply, principal = sasl.token(req.auth_bytes)
    except AuthenticationFailed as e:
        return AuthenticationFailure(Msg(error_code=ErrorCode.SASL_AUTHENTICATION_FAILED,
                                         error_message=sasl.failure_message(e), auth_bytes=b""),
                                     f"SASL {sasl.mechanism} authentication failed: {e}")
    if principal is None:
        return Msg(error_code=ErrorCode.NONE, auth_bytes=reply)
    ctx.conn.authenticated(principal)
    return Msg(error_code=ErrorCode.NONE, auth_bytes=reply, session_lifetime_ms=sasl.start_session(ctx.now_ms))


# --- CreatePartitions (37) ------------------------------------------------------

@api("""
CreatePartitions  key=37  versions=0-3  flexible=2+
  request
    topics  []
      name  string
      count  int32
      assignments  []?
        broker_ids  []int32
    timeout_ms  int32
    validate_only  bool
  response
    throttle_time_ms  int32
    results  []
      name  string
      error_code  int16
      error_message  string? = null
""")
def handle_create_partitions(ctx, req):
    """CreatePartitions: grow a topic to `count` partitions (never shrink), in
    steps as CreateTopics.

    Errors: UNKNOWN_TOPIC_OR_PARTITION, INVALID_PARTITIONS, INVALID_REPLICA_ASSIGNMENT,
    INVALID_REQUEST (a topic named twice), UNKNOWN_SERVER_ERROR (more than 10,000
    new partitions in one request: Kafka's controller fails so, recorded),
    POLICY_VIOLATION (doze.max.partitions).
    """
    return in_steps(create_partitions(ctx, req))


def create_partitions(ctx, req):
    counts = collections.Counter(t.name for t in req.topics)
    results, records = [], 0
    for t in req.topics:
        if counts[t.name] > 1:
            continue
        res = Msg(name=t.name)
        results.append(res)
        try:
            added = check_new_partitions(ctx, t)
            if records + added > MAX_RECORDS_PER_REQUEST:
                raise KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR)
            ctx.logs.check_partition_budget(added)
            records += added
            if not req.validate_only:
                yield from ctx.logs.add_partitions(t.name, t.count)
        except KafkaError as e:
            res.error_code, res.error_message = e.code, e.detail or None
        except OSError as e:
            log.error("adding partitions to %s failed: %s; nothing of it is left", t.name, e)
            res.error_code, res.error_message = ErrorCode.UNKNOWN_SERVER_ERROR, f"storage: {e}"
    results += [Msg(name=name, error_code=ErrorCode.INVALID_REQUEST, error_message="Duplicate topic name.")
                for name, n in counts.items() if n > 1]
    return Msg(results=results)


def check_new_partitions(ctx, t):
    """-> how many partitions CreatePartitions would add to topic t.name."""
    if not ctx.allowed(AclOperation.ALTER, ResourceType.TOPIC, t.name):
        raise KafkaError(ErrorCode.TOPIC_AUTHORIZATION_FAILED)       # Kafka: no message
    topic = ctx.logs.topics.get(t.name)
    if topic is None or t.name in ctx.logs.creating:
        raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "The topic does not exist.")
    if t.count < topic.partitions:
        raise KafkaError(ErrorCode.INVALID_PARTITIONS,
                         f"Topic currently has {topic.partitions} partitions, which is "
                         f"higher than the requested {t.count}.")
    if t.count == topic.partitions:
        raise KafkaError(ErrorCode.INVALID_PARTITIONS,
                         f"Topic already has {topic.partitions} partitions.")
    node_id = ctx.node(ctx.conn)[0]
    if t.assignments is not None and (len(t.assignments) != t.count - topic.partitions or any(
            a.broker_ids != [node_id] for a in t.assignments)):
        raise KafkaError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                         f"Attempted to add {t.count - topic.partitions} additional "
                         f"partition(s), but only {len(t.assignments)} assignment(s) "
                         "were specified, or they name other brokers.")
    return t.count - topic.partitions


# --- DescribeClientQuotas (48) --------------------------------------------------

QUOTA_ENTITY_TYPES = ("user", "client-id", "ip")


@api("""
DescribeClientQuotas  key=48  versions=0-1  flexible=1+
  request
    components  []
      entity_type  string
      match_type  int8                        # 0 exact, 1 default, 2 any specified
      match  string?
    strict  bool
  response
    throttle_time_ms  int32 = 0
    error_code  int16
    error_message  string?
    entries  []?
      entity  []
        entity_type  string
        entity_name  string?
      values  []
        key  string
        value  float64
""")
def handle_describe_client_quotas(ctx, req):
    """DescribeClientQuotas: doze has no quotas, so every valid filter matches
    nothing (kafka-configs --describe --entity-type users asks this beside the
    SCRAM credentials). The filter is checked as Kafka's ClientQuotasImage does.

    Errors: INVALID_REQUEST, UNSUPPORTED_VERSION (an entity type Kafka does not
    know), CLUSTER_AUTHORIZATION_FAILED (DESCRIBE_CONFIGS on the cluster), with
    Kafka's messages and entries null.
    """
    if not ctx.allowed(AclOperation.DESCRIBE_CONFIGS, ResourceType.CLUSTER, CLUSTER_NAME):
        return Msg(error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED, error_message=KAFKA_ERROR_MESSAGES[31],
                   entries=None)
    error = client_quota_filter_error(req.components)
    if error:
        return Msg(error_code=error[0], error_message=error[1], entries=None)
    return Msg(error_code=ErrorCode.NONE, entries=[])


def client_quota_filter_error(components):
    seen = set()
    for c in components:
        if not c.entity_type:
            return ErrorCode.INVALID_REQUEST, "Invalid empty entity type."
        if c.entity_type in seen:
            return ErrorCode.INVALID_REQUEST, f"Entity type {c.entity_type} cannot appear more than once in the filter."
        if c.entity_type not in QUOTA_ENTITY_TYPES:
            return ErrorCode.UNSUPPORTED_VERSION, f"Unsupported entity type {c.entity_type}"
        name = {0: "MATCH_TYPE_EXACT", 1: "MATCH_TYPE_DEFAULT", 2: "MATCH_TYPE_SPECIFIED"}.get(c.match_type)
        if name is None:
            return ErrorCode.INVALID_REQUEST, f"Unknown match type {c.match_type}"
        if c.match_type == 0 and c.match is None:
            return ErrorCode.INVALID_REQUEST, "Request specified MATCH_TYPE_EXACT, but set match string to null."
        if c.match_type != 0 and c.match is not None:
            return ErrorCode.INVALID_REQUEST, f"Request specified {name}, but also specified a match string."
        seen.add(c.entity_type)
    if "ip" in seen and seen & {"user", "client-id"}:
        return ErrorCode.INVALID_REQUEST, ("Invalid entity filter component combination. IP filter component "
                                           "should not be used with user or clientId filter component.")
    return None


# --- DescribeUserScramCredentials (50), AlterUserScramCredentials (51) --------

@api("""
DescribeUserScramCredentials  key=50  versions=0-0  flexible=0+     # KIP-554
  request
    users  []?
      name  string
  response
    throttle_time_ms  int32 = 0
    error_code  int16
    error_message  string?
    results  []
      user  string
      error_code  int16
      error_message  string?
      credential_infos  []
        mechanism  int8
        iterations  int32
""")
def handle_describe_user_scram_credentials(ctx, req):
    """DescribeUserScramCredentials: each user's SCRAM mechanisms and
    iterations (never a salt or a key); none named: every user.

    Errors (per user): RESOURCE_NOT_FOUND (no credential), DUPLICATE_RESOURCE
    (named twice); CLUSTER_AUTHORIZATION_FAILED (DESCRIBE on the cluster: top-level).
    """
    if not ctx.allowed(AclOperation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME):
        code = ErrorCode.CLUSTER_AUTHORIZATION_FAILED       # as Kafka's getErrorResponse: no names, no message
        return Msg(error_code=code, error_message=None, results=[
            Msg(user="", error_code=code, error_message=None, credential_infos=[]) for _ in req.users or ()])
    known = ctx.store.scram_users()
    names = [u.name for u in req.users] if req.users else list(known)
    order = java_hash_order(names)            # Kafka answers from a HashMap
    results = []
    for name in order:
        if names.count(name) > 1:
            results.append(Msg(user=name, error_code=ErrorCode.DUPLICATE_RESOURCE, credential_infos=[],
                               error_message="Cannot describe SCRAM credentials for the same user twice "
                                             f"in a single request: {name}"))
        elif name not in known:
            results.append(Msg(user=name, error_code=ErrorCode.RESOURCE_NOT_FOUND, credential_infos=[],
                               error_message=f"Attempt to describe a user credential that does not exist: {name}"))
        else:
            results.append(Msg(user=name, error_code=ErrorCode.NONE, credential_infos=[
                Msg(mechanism=SCRAM_TYPES[m][0], iterations=i) for m, i in known[name]]))
    return Msg(error_code=ErrorCode.NONE, results=results)


@api("""
AlterUserScramCredentials  key=51  versions=0-0  flexible=0+        # KIP-554
  request
    deletions  []
      name  string
      mechanism  int8
    upsertions  []
      name  string
      mechanism  int8
      iterations  int32
      salt  bytes
      salted_password  bytes
  response
    throttle_time_ms  int32 = 0
    results  []
      user  string
      error_code  int16
      error_message  string?
""")
def handle_alter_user_scram_credentials(ctx, req):
    """AlterUserScramCredentials: the client sends salt and SaltedPassword
    (never the password); doze keeps the stored and server keys derived from
    them. One result per user; the valid changes are made in one commit.

    Errors (per user, Kafka's ScramControlManager): DUPLICATE_RESOURCE (a user
    twice in one request), UNACCEPTABLE_CREDENTIAL (empty name, too few or
    too many iterations), UNSUPPORTED_SASL_MECHANISM, RESOURCE_NOT_FOUND
    (deleting a credential that does not exist), CLUSTER_AUTHORIZATION_FAILED
    (ALTER on the cluster: every user).
    """
    try:
        ctx.check_cluster(AclOperation.ALTER)
    except KafkaError as e:                       # each user once, sorted (getErrorResponse)
        return Msg(results=[Msg(user=name, error_code=e.code, error_message=e.detail)
                            for name in sorted({op.name for op in list(req.deletions) + list(req.upsertions)})])
    errors, deletions, upsertions = scram_alterations(ctx, req)
    ctx.store.alter_scram_credentials(
        [(d.name, SCRAM_OF_TYPE[d.mechanism]) for d in deletions.values()],
        [(u.name, SCRAM_OF_TYPE[u.mechanism], (u.salt, *scram_keys(SCRAM_OF_TYPE[u.mechanism],
                                                                  bytes(u.salted_password)), u.iterations))
         for u in upsertions.values()])
    return Msg(results=[Msg(user=n, error_code=ErrorCode.NONE, error_message=None)      # Kafka's HashMaps'
                        for n in java_hash_order(deletions) + java_hash_order(upsertions)] +   # order
               [Msg(user=n, error_code=errors[n][0], error_message=errors[n][1]) for n in java_hash_order(errors)])


def scram_alterations(ctx, req):
    """-> ({user: (code, message)} refused, {user: deletion}, {user: upsertion})
    valid: a user named twice is DUPLICATE_RESOURCE, the rest per scram_alteration_error."""
    errors, deletions, upsertions = {}, {}, {}
    for op, kind in [(d, "delete") for d in req.deletions] + [(u, "upsert") for u in req.upsertions]:
        if op.name in errors:
            continue
        if deletions.pop(op.name, None) or upsertions.pop(op.name, None):
            errors[op.name] = (ErrorCode.DUPLICATE_RESOURCE, "A user credential cannot be altered twice in "
                                                            "the same request")
            continue
        error = scram_alteration_error(ctx, op, kind)
        if error:
            errors[op.name] = error
        else:
            (deletions if kind == "delete" else upsertions)[op.name] = op
    return errors, deletions, upsertions


def scram_alteration_error(ctx, op, kind):
    """Kafka's validateDeletion / validateUpsertion -> (code, message) or None."""
    if not op.name:
        return ErrorCode.UNACCEPTABLE_CREDENTIAL, "Username must not be empty"
    mechanism = SCRAM_OF_TYPE.get(op.mechanism)
    if mechanism is None:
        return ErrorCode.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism"
    if kind == "delete":
        if ctx.store.scram_credential(op.name, mechanism) is None:
            return ErrorCode.RESOURCE_NOT_FOUND, "Attempt to delete a user credential that does not exist"
    elif op.iterations < SCRAM_MIN_ITERATIONS:
        return ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too few iterations"
    elif op.iterations > SCRAM_MAX_ITERATIONS:
        return ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too many iterations"
    return None


# --- UpdateFeatures (57) -------------------------------------------------------

@api("""
UpdateFeatures  key=57  versions=0-2  flexible=0+     # KIP-584: kafka-features upgrade / downgrade
  request
    timeout_ms  int32 = 60000
    feature_updates  []
      feature  string
      max_version_level  int16
      allow_downgrade  bool  v0-0
      upgrade_type  int8 = 1  v1+              # 1 upgrade, 2 safe downgrade, 3 unsafe downgrade
    validate_only  bool = false  v1+
  response
    throttle_time_ms  int32
    error_code  int16
    error_message  string?
    results  []  v0-1
      feature  string
      error_code  int16
      error_message  string?
""")
def handle_update_features(ctx, req):
    """UpdateFeatures: finalize a feature at another level -- doze's one,
    transaction.version (1 the classic protocol, 2 KIP-890's version 2 besides;
    §12's Features). What `kafka-features upgrade|downgrade` sends. All or
    nothing: the first change refused fails the request, as Kafka's controller
    does; v0's allow_downgrade is not read (Kafka's controller reads only
    upgrade_type, whose default is an upgrade).

    Errors: CLUSTER_AUTHORIZATION_FAILED (ALTER on the cluster), INVALID_REQUEST
    (a feature named twice), INVALID_UPDATE_VERSION (a feature or level doze
    does not know, a downgrade not asked for as one).
    """
    ctx.check_cluster(AclOperation.ALTER)
    names = [u.feature for u in req.feature_updates]
    if len(set(names)) != len(names):
        raise KafkaError(ErrorCode.INVALID_REQUEST, "the same feature more than once")
    features = ctx.txns.features
    try:
        for u in req.feature_updates:
            features.check(u.feature, u.max_version_level, u.upgrade_type, ctx.config["node.id"])
    except KafkaError as e:
        return Msg(error_code=e.code, error_message="The update failed for all features since the following "
                                                    f"feature had an error: {e.detail}")
    if not req.validate_only:
        for u in req.feature_updates:
            features.update(u.feature, u.max_version_level)
    return Msg(results=[Msg(feature=n, error_code=ErrorCode.NONE, error_message="NONE") for n in names]
               if ctx.version <= 1 else [])


###############################################################################
# 18. CONNECTIONS -- frames in, answers out in order; TLS; dispatch; limits
###############################################################################
# A Kafka connection carries frames: int32 size, then a request (header +
# body); each request gets exactly one response frame with the same
# correlation id (Produce with acks=0 gets none), in the order the requests
# came. doze decodes every complete frame as soon as it arrives and queues a
# response slot for it; a slot is filled now, after the next fsync, or when a
# parked request's wait ends. Slots leave in order, so pipelined requests are
# answered in order; a long-poll parks the connection (Kafka "mutes" it)
# until it is answered.
#
# What Kafka 4.3.1 does with bad input, and doze with it: an unknown API key,
# a version outside the advertised range (also Produce v0-2, which Kafka
# advertises but refuses) or a body that does not decode closes that one
# connection, with a log line; an unknown ApiVersions version is answered in
# the v0 format with UNSUPPORTED_VERSION and ApiVersions' own range (KIP-511).
#
# Limits, so that no client reaches past its own connection (Kafka's settings
# where Kafka has them, with what Kafka does):
#   max.connections.per.ip (and .overrides): a connection past it is accepted
#     and closed at once, with Kafka's log line.
#   max.connections: at it, the listener stops accepting; new connections wait
#     in the kernel's backlog until one closes (Kafka blocks its acceptor). doze
#     also stops short of the descriptors it has (RLIMIT_NOFILE, less the
#     segment files' share), so descriptors cannot run out.
#   connections.max.idle.ms: a connection with no byte in or out that long is
#     closed -- also one that sends requests and never reads the answers, since
#     doze stops reading it (below) and it goes quiet.
#   queued.max.requests: at most this many requests are taken in per pass of
#     the loop, across all connections, TURNS_PER_CONNECTION at a time, in
#     turn; the rest wait, so a pass stays short and fair whoever pipelines.
#   A connection stops being read while it has MAX_QUEUED answers pending, or
#     MAX_QUEUED_BYTES of answers its client has not read (Kafka reads the next
#     request only once the answer is written): back-pressure, not memory.
#   doze.frame.timeout.ms: a frame must arrive whole within this from its first
#     byte (Kafka has no such deadline; a client that drips a frame a byte at a
#     time holds a connection only that long).

READ_CHUNK = 256 * 1024
MAX_QUEUED = 64                 # responses queued on one connection before it stops reading
MAX_QUEUED_BYTES = 1 << 20      # ... or answer bytes its client has not read yet
TURNS_PER_CONNECTION = 16       # requests one connection may have handled at a time in a pass
PASS_REQUESTS_S = 0.05          # loop time a pass may spend taking requests in (at least one)
SWEEP_S = 1.0                   # how often idle connections and late frames are looked for


# --- TLS --------------------------------------------------------------------------
# An SSL listener's connections are wrapped in the standard library's ssl,
# non-blocking: the handshake advances as its bytes come, on the loop, and must
# be done within doze.frame.timeout.ms (a stalled handshake holds a connection
# no longer than a dripped frame). Settings are Kafka's (KIP-651 PEM stores),
# each also per listener as listener.name.<name>.ssl.*. The standard library
# reads PEM only: another ssl.keystore.type stops the start with a message.
# Fetch cannot sendfile() through TLS: file slices are read and encrypted.

PRINCIPAL_ANONYMOUS = "User:ANONYMOUS"


def java_host_address(ip):
    """An address as Java's InetAddress.getHostAddress prints it (what an ACL's
    host is compared with): IPv6 in full groups without leading zeros."""
    if ":" not in ip:
        return ip
    with contextlib.suppress(ValueError):
        return ":".join(format(int(g, 16), "x") for g in ipaddress.IPv6Address(ip.split("%")[0]).exploded.split(":"))
    return ip


TLS_SEND_CHUNK = 256 * 1024       # bytes of a file slice read for one TLS write
TLS_VERSIONS = {"TLSv1.2": "TLSv1_2", "TLSv1.3": "TLSv1_3"}
RFC2253_KEYWORDS = {"commonName": "CN", "countryName": "C", "localityName": "L",
                    "stateOrProvinceName": "ST", "organizationName": "O",
                    "organizationalUnitName": "OU", "streetAddress": "STREET",
                    "domainComponent": "DC", "userId": "UID"}
OTHER_DN_OIDS = {"emailAddress": ("1.2.840.113549.1.9.1", 0x16), "serialNumber": ("2.5.4.5", 0x13),
                 "title": ("2.5.4.12", 0x0C), "surname": ("2.5.4.4", 0x0C), "givenName": ("2.5.4.42", 0x0C)}


def tls_context(config, listener):
    """The server SSLContext of an SSL listener, from Kafka's settings, with
    the checks and messages of Kafka's DefaultSslEngineFactory."""
    if ssl is None:
        raise ValueError(f"listener {listener.name}: this Python has no ssl module")
    get = functools.partial(listener_setting, config, listener)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    _load_keystore(ctx, listener.name, get)
    _load_truststore(ctx, listener.name, get)
    auth = (get("ssl.client.auth") or "none").lower()
    prefixed = config.settings.get(f"listener.name.{listener.name.lower()}.ssl.client.auth")
    if listener.protocol == "SASL_SSL" and prefixed is None:   # Kafka's ChannelBuilders: only prefixed
        if auth != "none":
            log.warning("Broker configuration 'ssl.client.auth' is applied only to SSL listeners. "
                        "Listener-prefixed configuration can be used to enable SSL client authentication "
                        "for SASL_SSL listeners (listener %s).", listener.name)
        auth = "none"
    if auth not in ("none", "requested", "required"):
        raise ValueError(f"listener {listener.name}: ssl.client.auth {auth!r} is not none, requested or required")
    ctx.verify_mode = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL,
                       "required": ssl.CERT_REQUIRED}[auth]
    versions = [v.strip() for v in (get("ssl.enabled.protocols") or "TLSv1.2,TLSv1.3").split(",") if v.strip()]
    unknown = [v for v in versions if v not in TLS_VERSIONS]
    if unknown or not versions:
        raise ValueError(f"listener {listener.name}: ssl.enabled.protocols {','.join(unknown) or '(none)'}: "
                         f"doze serves {', '.join(TLS_VERSIONS)}")
    ordered = sorted(versions)
    ctx.minimum_version = getattr(ssl.TLSVersion, TLS_VERSIONS[ordered[0]])
    ctx.maximum_version = getattr(ssl.TLSVersion, TLS_VERSIONS[ordered[-1]])
    ciphers = get("ssl.cipher.suites")
    if ciphers:
        ctx.set_ciphers(":".join(c.strip() for c in ciphers.split(",")))   # TLS 1.2 suites only
    return ctx


def _load_keystore(ctx, name, get):
    kind, path = (get("ssl.keystore.type") or "JKS").upper(), get("ssl.keystore.location")
    key, chain = get("ssl.keystore.key"), get("ssl.keystore.certificate.chain")
    if key is not None and kind != "PEM":
        raise ValueError(f"SSL private key can be specified only for PEM, but key store type is {kind}.")
    if key is not None and chain is None:
        raise ValueError("SSL private key is specified, but certificate chain is not specified.")
    if chain is not None and key is None:
        raise ValueError("SSL certificate chain is specified, but private key is not specified")
    if key is not None and path is not None:
        raise ValueError("Both SSL key store location and separate private key are specified.")
    if (key is not None or path is not None) and kind == "PEM" and get("ssl.keystore.password") is not None:
        raise ValueError("SSL key store password cannot be specified with PEM format, only key password "
                         "may be specified.")
    if key is None and path is None:
        raise ValueError(f"listener {name}: an SSL listener needs a key and certificate: "
                         f"ssl.keystore.location (PEM), or ssl.keystore.key and ssl.keystore.certificate.chain")
    if kind != "PEM":
        raise ValueError(f"listener {name}: ssl.keystore.type {kind}: doze reads PEM keystores only "
                         f"(KIP-651, ssl.keystore.type=PEM); convert it with keytool -importkeystore "
                         f"to PKCS12 and openssl pkcs12 -nodes to PEM")
    password = get("ssl.key.password")
    try:
        if path is not None:
            ctx.load_cert_chain(path, password=password)
            return
        with tempfile.NamedTemporaryFile("w", suffix=".pem") as f:    # ssl loads keys from files only
            os.chmod(f.name, 0o600)
            f.write(key.strip() + "\n" + chain.strip() + "\n")
            f.flush()
            ctx.load_cert_chain(f.name, password=password)
    except (ssl.SSLError, OSError) as e:
        raise ValueError(f"Failed to load PEM SSL keystore {path or '(ssl.keystore.key)'}: {e}") from None


def _load_truststore(ctx, name, get):
    kind, path, certs = (get("ssl.truststore.type") or "JKS").upper(), get("ssl.truststore.location"), \
        get("ssl.truststore.certificates")
    if certs is not None and kind != "PEM":
        raise ValueError(f"SSL trust store certs can be specified only for PEM, but trust store type is {kind}.")
    if certs is not None and path is not None:
        raise ValueError("Both SSL trust store location and separate trust certificates are specified.")
    if kind == "PEM" and (certs or path) and get("ssl.truststore.password") is not None:
        raise ValueError("SSL trust store password cannot be specified for PEM format.")
    if path is not None and kind != "PEM":
        raise ValueError(f"listener {name}: ssl.truststore.type {kind}: doze reads PEM truststores only "
                         f"(ssl.truststore.type=PEM)")
    try:
        if certs is not None:
            ctx.load_verify_locations(cadata=certs)
        elif path is not None:
            ctx.load_verify_locations(cafile=path)
        else:
            ctx.load_default_certs(ssl.Purpose.CLIENT_AUTH)     # as Java's default truststore
    except (ssl.SSLError, OSError) as e:
        raise ValueError(f"Invalid PEM truststore configs ({path or 'ssl.truststore.certificates'}): {e}") \
            from None


def parse_principal_rules(text):
    """ssl.principal.mapping.rules -> [None (DEFAULT) or (regex, replacement,
    case)], split and parsed as Kafka's SslPrincipalMapper does."""
    rule = r"(DEFAULT)|RULE:((?:\\.|[^\\/])*)/((?:\\.|[^\\/])*)/([LU]?).*?|(.*?)"
    rules = []
    for m in re.finditer(r"\s*(" + rule + r")\s*(?:,\s*|$)", ("DEFAULT" if text is None else text).strip()):
        one = m.group(1)
        p = re.match(rule, one)
        if p.end() != len(one):
            raise ValueError(f"ssl.principal.mapping.rules: Invalid rule: `{one}`, unmatched substring: "
                             f"`{one[p.end():]}`")
        if p.group(1):
            rules.append(None)
        elif p.group(2) is not None:
            rules.append((re.compile(p.group(2)), p.group(3), p.group(4)))
    return rules


def map_principal(rules, dn):
    """A certificate's RFC 2253 name -> the principal's name by the first rule
    that matches it whole (Java's replaceAll: $n are groups). None: no rule."""
    for r in rules:
        if r is None:
            return dn
        pattern, replacement, case = r
        if pattern.fullmatch(dn):
            out = pattern.sub(lambda m: re.sub(r"\$(\d)", lambda g: m.group(int(g.group(1)))
                                              if int(g.group(1)) <= pattern.groups else g.group(0),
                                              replacement), dn)
            return out.lower() if case == "L" else out.upper() if case == "U" else out
    return None


def rfc2253(subject):
    """getpeercert()'s subject -> the name as Java's X500Principal.getName()
    prints it (RFC 2253): most specific part first, specials escaped."""
    def value(v):
        v = re.sub(r'([,+"\\<>;])', r"\\\1", v)
        if v[:1] in ("#", " "):
            v = "\\" + v
        return v[:-1] + "\\ " if v.endswith(" ") and len(v) > 1 else v

    def part(k, v):
        if k in RFC2253_KEYWORDS:
            return f"{RFC2253_KEYWORDS[k]}={value(v)}"
        oid, tag = OTHER_DN_OIDS.get(k, (k, 0x0C))
        raw = v.encode()
        length = bytes([len(raw)]) if len(raw) < 128 else bytes([0x81, len(raw)]) if len(raw) < 256 \
            else bytes([0x82]) + len(raw).to_bytes(2, "big")
        return f"{oid}=#{(bytes([tag]) + length + raw).hex()}"
    return ",".join("+".join(part(k, v) for k, v in rdn) for rdn in reversed(subject))


WOULD_BLOCK = (BlockingIOError, InterruptedError) + ((ssl.SSLWantReadError, ssl.SSLWantWriteError) if ssl else ())


class TlsServer:
    """TLS for one SSL listener: its context, and each connection's handshake
    and principal. Connection calls handshake() until it returns True."""

    def __init__(self, config, listener):
        self.context = tls_context(config, listener)
        self.rules = parse_principal_rules(listener_setting(config, listener, "ssl.principal.mapping.rules"))

    def wrap(self, sock):
        return self.context.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)

    def handshake(self, sock):
        """One step of the handshake -> (done, the event it waits for while
        not, the principal of the client's certificate once done, or None)."""
        try:
            sock.do_handshake()
        except ssl.SSLWantReadError:
            return False, selectors.EVENT_READ, None
        except ssl.SSLWantWriteError:
            return False, selectors.EVENT_WRITE, None
        cert = sock.getpeercert()
        if not (cert and cert.get("subject")):
            return True, 0, None
        dn = rfc2253(cert["subject"])
        name = map_principal(self.rules, dn)
        if name is None:
            raise ssl.SSLError(f"no ssl.principal.mapping.rules rule applies to {dn}")
        return True, 0, f"User:{name}"


# --- Connection: one client socket, its frames and its answers in order ------

class Slot:
    """One request's place in its connection's response order."""
    __slots__ = ("chunks",)

    def __init__(self):
        self.chunks = None          # the encoded response frame, once ready


class Connection:
    """One client socket: bytes in, frames out, in order."""

    def __init__(self, sock, addr, room, listener, tls=None, sasl=None):
        self.sock = sock
        self.addr = addr
        self.listener = listener         # the Listener it came in on
        self.name = f"{addr[0]}:{addr[1]}" if isinstance(addr, tuple) else str(addr)
        self.host = java_host_address(addr[0]) if isinstance(addr, tuple) else str(addr)   # for ACLs' hosts
        self.ip = addr[0] if isinstance(addr, tuple) else str(addr)
        self.room = room                 # Connections: the rest of the broker, as a connection sees it
        self.clock, self.config = room.clock, room.config
        self.inbuf = bytearray()
        self.slots = collections.deque()
        self.out = collections.deque()   # chunks being written: bytes or FileSlice
        self.out_pos = 0
        self.out_bytes = 0               # bytes of the chunks in self.out
        self.parked = 0                  # muting parks outstanding
        self.early_park = None           # ... the one the next request ends (a Fetch's long-poll)
        self.unflushed = 0               # answers waiting for the group commit (Produce)
        self.closed = False
        self.closing = None              # why it closes once the answers owed are written
        self.events = 0                  # what the selector watches for (0: unregistered)
        self.last_active = self.clock()  # a byte in or out: connections.max.idle.ms
        self.frame_started = None        # when the first byte of an incomplete frame came
        self.principal = PRINCIPAL_ANONYMOUS
        self.sasl = sasl                 # SaslSession on a SASL listener
        self.failing = False             # authentication failed: answered after the delay, then closed
        self.tls = tls                   # TlsServer of an SSL listener, else None
        self.handshaking = tls is not None
        self.tls_wants = 0               # the event the TLS handshake waits for
        if self.handshaking:
            self.frame_started = self.last_active   # the handshake is due within the frame timeout

    # --- reading ---
    def on_readable(self):
        got = False
        while True:
            try:
                data = self.sock.recv(READ_CHUNK)
            except WOULD_BLOCK:
                break
            except OSError as e:
                self.close("client closed the connection" if ssl and isinstance(e, ssl.SSLZeroReturnError)
                           else f"read failed: {e}")
                return
            if not data:
                self.close("client closed the connection")
                return
            got = True
            self.inbuf += data
            if not (self.tls and self.sock.pending()):     # TLS may hold decrypted bytes already read
                break
        if got:
            self.last_active = self.clock()
            if self.early_park is not None and self._whole_frame_waiting():
                self.room.end_park_early(self.early_park)         # the next request is here
            self.process_frames()

    def process_frames(self):
        """Handle every complete frame in the buffer, unless muted."""
        buf = self.inbuf
        pos = taken = 0
        limit = self.config["socket.request.max.bytes"]
        if self.sasl is not None and not self.sasl.complete:
            limit = min(limit, self.config["sasl.server.max.receive.size"])
        while not self.closed and self.may_read():
            if len(buf) - pos < 4:
                break
            size = I32.unpack_from(buf, pos)[0]
            if size < 0 or size > limit:
                self.close_after_answers(f"frame of {size} bytes is larger than socket.request.max.bytes "
                                         f"({limit}) or negative")
                break
            if len(buf) - pos - 4 < size:
                break
            if self.unflushed and size >= 2 and I16.unpack_from(buf, pos + 4)[0] != ApiKey.PRODUCE:
                # A request after a Produce waiting for its fsync must see that
                # Produce's result (Kafka handles one request at a time per
                # connection); Produces themselves may pipeline into one fsync.
                break
            if taken == TURNS_PER_CONNECTION or not self.room.take_request_turn():
                self.room.resume_later(self)            # its turn is over: the others, then more
                break
            taken += 1
            frame = buf[pos + 4:pos + 4 + size]
            pos += 4 + size
            self.room.dispatch(self, frame)
        if pos:
            del buf[:pos]
            self.frame_started = None
        if self.inbuf and self.frame_started is None and not self._whole_frame_waiting():
            self.frame_started = self.clock()
        self.update_interest()

    def may_read(self):
        """Take in more requests? Not while muted, nor with answers piling up."""
        return not self.parked and not self.failing and len(self.slots) < MAX_QUEUED \
            and self.out_bytes < MAX_QUEUED_BYTES and self.closing is None

    def close_after_answers(self, reason):
        """A request refused whole (it does not decode, or is not served): the
        connection closes once the answers owed to the requests before it are
        written, and reads nothing more. Kafka reads a connection's next
        request only after answering the last one, so those answers reach the
        client there too."""
        self.closing = reason
        self._close_if_answered()

    def _close_if_answered(self):
        if self.closing is not None and not self.slots and not self.out and not self.closed:
            self.close(self.closing)

    def authenticated(self, principal):
        self.principal = principal
        log.info("%s authenticated as %s with %s on listener %s", self.name, principal,
                 self.sasl.mechanism, self.listener.name)

    def fail_authentication(self, reason, chunks=None):
        """KIP-306: the answer (if any) after connection.failed.authentication.delay.ms, then the close."""
        self.failing = True
        log.warning("closing connection %s after the authentication failure delay: %s", self.name, reason)

        def finish():
            if chunks and not self.closed:
                self.out.extend(chunks)
                self.out_bytes += sum(len(c) for c in chunks)
                self.on_writable()
            self.close("authentication failed", quiet=True)
        self.room.call_later(self.config["connection.failed.authentication.delay.ms"] / 1000, finish)
        self.update_interest()

    def _whole_frame_waiting(self):
        buf = self.inbuf
        return len(buf) >= 4 and len(buf) - 4 >= I32.unpack_from(buf, 0)[0]

    # --- the answers' order ---
    def new_slot(self):
        """A request taken in: its place in the answers' order."""
        slot = Slot()
        self.slots.append(slot)
        return slot

    def drop_slot(self, slot):
        """A request that gets no answer (acks=0, or a refusal that closes)."""
        self.slots.remove(slot)

    def wait_for(self, park):
        """A request of this connection was parked (Purgatory.add): a muting
        park holds back the next requests, as Kafka mutes a channel; one
        waiting for the group commit only keeps later non-Produce requests back."""
        if park.mute:
            self.parked += 1
            if park.early:
                self.early_park = park
            self.update_interest()
        else:
            self.unflushed += 1

    def waited(self, park):
        """A parked request's wait is over (answered, or its connection gone)."""
        if park.mute:
            self.parked -= 1
            if self.early_park is park:
                self.early_park = None
        else:
            self.unflushed -= 1
        if not self.closed:
            self.update_interest()
            if self.inbuf:
                self.room.resume_later(self)

    # --- writing ---
    def queued_bytes(self):
        """Bytes of answers waiting to be written (file slices count their size)."""
        return self.out_bytes - self.out_pos

    def push(self, slot, chunks):
        """Fill a slot; send every slot at the head of the queue that is ready --
        unless a meta.db change is not yet durable: then the answers are held
        until the group commit's fsync of it (GroupCommit.hold), so that no
        answer runs ahead of what a power cut would keep."""
        slot.chunks = chunks
        if not self.room.hold(self):
            self.send_ready()
        if self.inbuf and not self.parked:
            self.room.resume_later(self)           # frames waited while muted or full

    def send_ready(self):
        while self.slots and self.slots[0].chunks is not None:
            for chunk in self.slots.popleft().chunks:
                self.out.append(chunk)
                self.out_bytes += len(chunk)
        self.on_writable()

    def on_writable(self):
        before = self.queued_bytes()
        try:
            while self.out:
                chunk = self.out[0]
                if isinstance(chunk, FileSlice):
                    if not self._send_file(chunk):
                        break
                else:
                    view = memoryview(chunk)[self.out_pos:]
                    self.out_pos += self.sock.send(view) if view else 0
                    if self.out_pos < len(chunk):
                        break
                    self.out_pos = 0
                self.out.popleft()
                self.out_bytes -= len(chunk)
        except WOULD_BLOCK:
            pass
        except OSError as e:
            self.close(f"write failed: {e}")
            return
        if self.queued_bytes() != before:
            self.last_active = self.clock()
            if self.inbuf and self.may_read():
                self.room.resume_later(self)            # reading waited for the client to read
        self._close_if_answered()
        self.update_interest()

    def _send_file(self, chunk):
        """sendfile: the kernel copies file pages to the socket. Returns True
        once the whole chunk is sent."""
        start = chunk.offset + self.out_pos
        left = chunk.count - self.out_pos
        if left > 0:
            if self.tls:                            # TLS: read, encrypt, send
                sent = self.sock.send(os.pread(chunk.file.fileno(), min(left, TLS_SEND_CHUNK), start))
            elif hasattr(os, "sendfile"):
                sent = os.sendfile(self.sock.fileno(), chunk.file.fileno(), start, left)
            else:                                   # no sendfile: copy through Python
                sent = self.sock.send(os.pread(chunk.file.fileno(), min(left, READ_CHUNK), start))
            if sent == 0:
                # The file is shorter than promised (deleted underneath): the
                # frame cannot be completed, so the connection must go.
                raise OSError(errno.EIO, "file shrank while being sent")
            self.out_pos += sent
            if self.out_pos < chunk.count:
                return False
        self.out_pos = 0
        return True

    def update_interest(self):
        """Ask the selector for exactly what this connection can use now."""
        if self.closed:
            return
        events = selectors.EVENT_WRITE if self.out else 0
        if self.handshaking:
            events = self.tls_wants or selectors.EVENT_READ
        elif (self.may_read() or self.early_park is not None and self.parked == 1 and not self.failing
              and self.closing is None) and not self._whole_frame_waiting():   # no more while one waits
            events |= selectors.EVENT_READ
        if events == self.events:
            return
        selector = self.room.selector
        if not self.events:
            selector.register(self.sock, events, self)
        elif not events:
            selector.unregister(self.sock)
        else:
            selector.modify(self.sock, events, self)
        self.events = events

    def on_event(self, mask):
        if self.handshaking:
            self.step_handshake()
            return
        if mask & selectors.EVENT_READ and not self.closed:
            self.on_readable()
        if mask & selectors.EVENT_WRITE and not self.closed:
            self.on_writable()

    def step_handshake(self):
        try:
            done, self.tls_wants, principal = self.tls.handshake(self.sock)
        except (OSError, ValueError) as e:
            self.close(f"TLS handshake failed: {e}")
            return
        if done:
            self.principal = principal or self.principal
            log.debug("TLS %s from %s: principal %s", self.sock.version(), self.name, self.principal)
            self.handshaking = False
            self.frame_started = None
            self.last_active = self.clock()
            self.on_readable()              # the first request may have come with the handshake
        self.update_interest()

    def close(self, reason, quiet=False):
        if self.closed:
            return
        self.closed = True
        quiet = quiet or reason in ("client closed the connection", "broker stopping") \
            or "Connection reset" in reason or "Broken pipe" in reason
        log.log(logging.DEBUG if quiet else logging.WARNING, "closing connection %s: %s",
                self.name, reason)
        if self.events:
            with contextlib.suppress(KeyError, ValueError):
                self.room.selector.unregister(self.sock)
        with contextlib.suppress(OSError):
            self.sock.close()
        self.room.forget(self)


# --- What a request's log line may show --------------------------------------

SECRET_FIELDS = {ApiKey.SASL_AUTHENTICATE: ("auth_bytes",),
                 ApiKey.ALTER_USER_SCRAM_CREDENTIALS: ("salt", "salted_password")}
CONFIG_APIS = (ApiKey.ALTER_CONFIGS, ApiKey.INCREMENTAL_ALTER_CONFIGS, ApiKey.CREATE_TOPICS)


def loggable(api_key, msg):
    """A request or response as the DEBUG log may show it: SASL tokens, SCRAM
    salts and salted passwords, and the values of sensitive settings (the ones
    DescribeConfigs hides) hidden -- Kafka logs its requests so (loggableRequest)."""
    fields = SECRET_FIELDS.get(api_key)
    if fields is None and api_key not in CONFIG_APIS:
        return msg

    def hide(out):
        for name in fields or ():
            if getattr(out, name, None) is not None:
                setattr(out, name, f"<hidden: {len(getattr(out, name))} bytes>")
        if api_key in CONFIG_APIS and isinstance(getattr(out, "name", None), str) and \
                getattr(out, "value", None) is not None and out.name not in KAFKA_TOPIC_CONFIGS \
                and broker_config_sensitive(out.name):
            out.value = "[hidden]"
    return remade(msg, hide)


# --- Faults: a chosen error, a late or a lost answer, on purpose ------------------
# A test that vendors doze makes it fail where its own code must cope: a rule
# (Faults.add) names an API by Kafka's name, optionally narrowed to a topic, a
# partition, a transactional id, a group or a client id, and says what happens
# to a request it matches, instead of or around its handler:
#   error=NAME    answered with that Kafka error, not handled: every error code
#                 of the answer is set, per partition where it has them (as
#                 Kafka's getErrorResponse does), else the top-level one
#   hold_ms=N     held N ms (on the broker's clock), then handled: a request that
#                 arrives late; the connection's next requests wait behind it
#   delay_ms=N    handled now, answered N ms later (the answers after it wait)
#   close=True    its connection closed at once, the request not handled
#   drop=True     handled, and its connection closed instead of the answer: the
#                 write happened, the client never heard (what idempotence is for)
# A rule fires `times` times (None: every time), each time with `probability`
# (drawn from a seeded random). Without rules, a request costs one truth test.

# How an answer lists what its request named, where its errors are per item
# (Kafka's getErrorResponse of each request): (request list, answer list,
# {answer field: request field, or "" for the request's item itself}, the
# level below or None). The first whose request list this version has applies.
ERROR_ITEMS = {
    ApiKey.PRODUCE: [("topic_data", "responses", {"name": "name"},
                      ("partition_data", "partition_responses", {"index": "index"}, None))],
    ApiKey.FETCH: [("topics", "responses", {"topic": "topic"},
                    ("partitions", "partitions", {"partition_index": "partition"}, None))],
    ApiKey.LIST_OFFSETS: [("topics", "topics", {"name": "name"},
                           ("partitions", "partitions", {"partition_index": "partition_index"}, None))],
    ApiKey.METADATA: [("topics", "topics", {"name": "name", "topic_id": "topic_id"}, None)],
    ApiKey.OFFSET_COMMIT: [("topics", "topics", {"name": "name"},
                            ("partitions", "partitions", {"partition_index": "partition_index"}, None))],
    ApiKey.OFFSET_FETCH: [("groups", "groups", {"group_id": "group_id"}, None)],
    ApiKey.FIND_COORDINATOR: [("coordinator_keys", "coordinators", {"key": ""}, None)],
    ApiKey.DESCRIBE_GROUPS: [("groups", "groups", {"group_id": ""}, None)],
    ApiKey.CREATE_TOPICS: [("topics", "topics", {"name": "name"}, None)],
    ApiKey.DELETE_TOPICS: [("topics", "responses", {"name": "name", "topic_id": "topic_id"}, None),
                           ("topic_names", "responses", {"name": ""}, None)],
    ApiKey.DELETE_RECORDS: [("topics", "topics", {"name": "name"},
                             ("partitions", "partitions", {"partition_index": "partition_index"}, None))],
    ApiKey.ADD_PARTITIONS_TO_TXN: [("topics", "results_by_topic", {"name": "name"},
                                    ("partitions", "results_by_partition", {"partition_index": ""}, None))],
    ApiKey.WRITE_TXN_MARKERS: [("markers", "markers", {"producer_id": "producer_id"},
                                ("topics", "topics", {"name": "name"},
                                 ("partition_indexes", "partitions", {"partition_index": ""}, None)))],
    ApiKey.TXN_OFFSET_COMMIT: [("topics", "topics", {"name": "name"},
                                ("partitions", "partitions", {"partition_index": "partition_index"}, None))],
    ApiKey.DESCRIBE_CONFIGS: [("resources", "results", {"resource_type": "resource_type",
                                                        "resource_name": "resource_name"}, None)],
    ApiKey.ALTER_CONFIGS: [("resources", "responses", {"resource_type": "resource_type",
                                                       "resource_name": "resource_name"}, None)],
    ApiKey.INCREMENTAL_ALTER_CONFIGS: [("resources", "responses", {"resource_type": "resource_type",
                                                                   "resource_name": "resource_name"}, None)],
    ApiKey.CREATE_PARTITIONS: [("topics", "results", {"name": "name"}, None)],
    ApiKey.DELETE_GROUPS: [("groups_names", "results", {"group_id": ""}, None)],
    ApiKey.DESCRIBE_PRODUCERS: [("topics", "topics", {"name": "name"},
                                 ("partition_indexes", "partitions", {"partition_index": ""}, None))],
    ApiKey.DESCRIBE_TRANSACTIONS: [("transactional_ids", "transaction_states", {"transactional_id": ""}, None)],
    ApiKey.DESCRIBE_TOPIC_PARTITIONS: [("topics", "topics", {"name": "name"}, None)],
}


def error_answer(spec, version, req, code):
    """The answer to req with every error code set to code (not handled), or
    None where the answer carries no error code doze can set."""
    fields = [f for f in spec.response if f.in_version(version)]
    for items in ERROR_ITEMS.get(spec.key, ()):
        if getattr(req, items[0], None) is not None:
            return Msg(**_error_items(fields, req, items, code))
    if any(f.name == "error_code" for f in fields):
        return Msg(error_code=code)
    return None


def _error_items(fields, parent, items, code):
    """{answer list: [an item per request item, its error codes set]} (see ERROR_ITEMS)."""
    request_list, answer_list, keys, below = items
    field = next(f for f in fields if f.name == answer_list)
    present = {f.name for f in field.fields}
    out = []
    for item in getattr(parent, request_list) or ():
        entry = {f.name: -1 for f in field.fields if f.type == "int64"
                 and f.name.endswith(("offset", "watermark"))}       # Kafka's error answers: no offset
        entry.update({name: (item if source == "" else getattr(item, source)) for name, source in keys.items()
                      if name in present})
        entry.update({f.name: code for f in field.fields if f.name.endswith("error_code")})
        if below is not None:
            entry.update(_error_items(field.fields, item, below, code))
        out.append(Msg(**entry))
    return {answer_list: out}


def request_ids(req):
    """The transactional and group ids a request names (single or in lists:
    OffsetFetch v8+, DescribeGroups, DeleteGroups, DescribeTransactions, FindCoordinator)."""
    ids = {getattr(req, "transactional_id", None), getattr(req, "group_id", None), getattr(req, "key", None)}
    for name in ("transactional_ids", "groups", "groups_names", "coordinator_keys"):
        for item in getattr(req, name, None) or ():
            ids.add(item if isinstance(item, str) else getattr(item, "group_id", None))
    return ids


FAULT_ACTIONS = ("error", "hold_ms", "delay_ms", "close", "drop")
FAULT_FILTERS = ("topic", "partition", "transactional_id", "group", "client_id")


def api_named(name):
    """An API's schema by Kafka's name ("EndTxn"), ApiKey's ("END_TXN") or its key."""
    for key, (spec, _) in HANDLERS.items():
        if name in (spec.name, key.name, int(key)) or str(name).lower() in (spec.name.lower(), key.name.lower()):
            return spec
    raise ValueError(f"no API {name!r}: one of {', '.join(sorted(spec.name for spec, _ in HANDLERS.values()))}")


def error_named(name):
    """A Kafka error code by its name ("NOT_COORDINATOR", any case) or number."""
    try:
        return ErrorCode(name) if isinstance(name, int) else ErrorCode[str(name).upper()]
    except (KeyError, ValueError):
        raise ValueError(f"no Kafka error {name!r}: one of {', '.join(e.name for e in ErrorCode)}") from None


def request_names(req):
    """(topics, partitions, ids) a request names: its topics' names, their
    partitions, and its transactional and group ids (for a rule's filters)."""
    topics, partitions = set(), set()
    for t in itertools.chain(*(getattr(req, n, None) or () for n in ("topics", "topic_data", "resources"))):
        if isinstance(t, str):
            topics.add(t)
            continue
        topics.add(getattr(t, "name", None) or getattr(t, "topic", None) or getattr(t, "resource_name", None))
        for p in itertools.chain(*(getattr(t, n, None) or () for n in ("partitions", "partition_data",
                                                                        "partition_indexes"))):
            partitions.add(p if isinstance(p, int) else next(
                (getattr(p, n) for n in ("partition_index", "index", "partition") if hasattr(p, n)), None))
    topics.update(getattr(req, "topic_names", None) or ())
    return topics, partitions, request_ids(req)


class Fault:
    """One rule (see above): what it matches, what it does, how often."""
    __slots__ = ("id", "spec", "where", "action", "value", "times", "probability", "fired")

    def __init__(self, id_, spec, where, action, value, times, probability):
        self.id, self.spec, self.where, self.action, self.value = id_, spec, where, action, value
        self.times, self.probability, self.fired = times, probability, 0

    def matches(self, req, client_id):
        if not self.where:
            return True
        topics, partitions, ids = request_names(req)
        w = self.where
        return ("topic" not in w or w["topic"] in topics) and ("partition" not in w or w["partition"] in partitions) \
            and ("transactional_id" not in w or w["transactional_id"] in ids) \
            and ("group" not in w or w["group"] in ids) and ("client_id" not in w or w["client_id"] == client_id)

    def what_it_does(self):
        """In words, for the trace."""
        if self.action == "error":
            return f"answered {ErrorCode(self.value).name} without being handled"
        return {"close": "the connection closed before it is handled",
                "hold_ms": f"held {self.value} ms, then handled (a late request)",
                "delay_ms": f"handled, its answer held {self.value} ms",
                "drop": "handled, its answer dropped and the connection closed"}[self.action]

    def describe(self):
        """The rule as a dict (what Faults.list and the control endpoint show)."""
        value = ErrorCode(self.value).name if self.action == "error" else self.value
        return {"id": self.id, "api": self.spec.name, **self.where, self.action: value, "times": self.times,
                "probability": self.probability, "fired": self.fired}


class Faults:
    """The faults asked of this broker (a test's), matched by the Dispatcher
    before each request's handler."""

    def __init__(self, seed=0):
        self.rules = []
        self.random = random.Random(seed)
        self.next_id = 1

    def add(self, api, *, times=None, probability=1.0, **what):
        """One rule: add("EndTxn", error="NOT_COORDINATOR", times=1),
        add("Produce", topic="orders", drop=True, times=1), add("EndTxn", hold_ms=500)
        -> its id. Exactly one action of FAULT_ACTIONS; filters of FAULT_FILTERS."""
        spec = api_named(api)
        unknown = set(what) - set(FAULT_ACTIONS) - set(FAULT_FILTERS)
        actions = [a for a in FAULT_ACTIONS if what.get(a) not in (None, False, 0)]
        if unknown or len(actions) != 1:
            raise ValueError(f"a fault takes one of {', '.join(FAULT_ACTIONS)} and filters "
                             f"{', '.join(FAULT_FILTERS)}" + (f"; not {', '.join(sorted(unknown))}" if unknown else ""))
        action, value = actions[0], what[actions[0]]
        if action == "error":
            value = error_named(value)
            if not any(error_answer(spec, v, Msg(), value) is not None or spec.key in ERROR_ITEMS
                       for v in range(spec.min_served, spec.max_version + 1)):
                raise ValueError(f"{spec.name}'s answer carries no error code: try close=True or drop=True")
        if times is not None and times < 1 or not 0 < probability <= 1:
            raise ValueError("times is at least 1 (or None: always), probability in (0, 1]")
        fault = Fault(self.next_id, spec, {k: what[k] for k in FAULT_FILTERS if what.get(k) is not None},
                      action, value, times, probability)
        self.next_id += 1
        self.rules.append(fault)
        return fault.id

    def remove(self, fault_id):
        """Remove a rule by its id; -> whether there was one."""
        before = len(self.rules)
        self.rules = [f for f in self.rules if f.id != fault_id]
        return len(self.rules) < before

    def clear(self):
        self.rules = []

    def list(self):
        return [f.describe() for f in self.rules]

    def match(self, spec, req, client_id):
        """The rule that fires for this request now (counted), or None."""
        for fault in self.rules:
            if fault.spec is spec and fault.matches(req, client_id) and \
                    (fault.probability >= 1 or self.random.random() < fault.probability):
                fault.fired += 1
                if fault.times is not None and fault.fired >= fault.times:
                    self.rules.remove(fault)
                return fault
        return None


# --- Dispatch: a request to its handler, its answer back ---------------------------
# Kafka's KafkaApis.handle and RequestChannel in one class: a frame is decoded
# (header, then body by the API's schema), run by its handler, and whatever
# the handler returned -- a response, NO_RESPONSE, a Park, a verdict to close
# -- is carried out. The one place where an exception a handler let out
# becomes an answer: UNKNOWN_SERVER_ERROR where the response has a top-level
# error code, else the close of that one connection.

def whole_request_error(spec, version, e, quiet=False):
    """A whole-request error: a response with just its top-level error_code
    (and error_message) set, if the response has one; else None (logged)."""
    names = {f.name for f in spec.response if f.in_version(version)}
    if "error_code" not in names:
        if not quiet:
            log.error("%s v%d: %s, and the response has no error_code to carry it", spec.name, version, e)
        return None
    if "error_message" in names:
        return Msg(error_code=e.code, error_message=e.detail or None)
    return Msg(error_code=e.code)


class Request:
    """One request in flight: its connection, its place in the answers'
    order, and how to encode its answer."""
    __slots__ = ("conn", "slot", "spec", "version", "correlation_id", "traced", "fault")

    def __init__(self, conn, spec, version, correlation_id):
        self.conn, self.spec, self.version, self.correlation_id = conn, spec, version, correlation_id
        self.slot = conn.new_slot()
        self.traced = None          # how its answer is traced, when the request was (--trace)
        self.fault = None           # a Fault that delays or drops its answer


class Dispatcher:
    """Request -> handler -> response, for every connection."""

    def __init__(self, rooms, purgatory, timers, faults, tracer=None):
        self.rooms, self.purgatory, self.timers, self.faults, self.tracer = rooms, purgatory, timers, faults, tracer
        self.clock = rooms.config.clock

    def handle_frame(self, conn, frame):
        """Decode one request, run its handler (or a fault), queue its response."""
        if conn.sasl is not None and conn.sasl.raw and not conn.sasl.complete:
            self._raw_sasl_token(conn, frame)
            return
        decoded = self._decode(conn, frame)
        if decoded is None:
            return
        request, handler, req, client_id = decoded
        if self.tracer is not None:
            request.traced = self.tracer.request(conn, request.spec, request.version, client_id, req)
        fault = self.faults.match(request.spec, req, client_id) if self.faults.rules else None
        if fault is None:
            ctx = RequestContext(self.rooms, conn, request.spec.key, request.version, client_id)
            self._settle(request, self.evaluate(request, handler, ctx, req))
        else:
            self._inject(fault, request, handler, req, client_id)

    def _handle(self, request, handler, req, client_id):
        """The handler's result for the request, in a context of its own."""
        return handler(RequestContext(self.rooms, request.conn, request.spec.key, request.version, client_id), req)

    def _inject(self, fault, request, handler, req, client_id):
        """Carry out a fault (see Faults) instead of, or around, the handler."""
        spec, conn = request.spec, request.conn
        log.info("fault %d on %s v%d from %s (%s): %s", fault.id, spec.name, request.version, conn.name,
                 client_id, fault.describe())
        if self.tracer is not None and request.traced:
            self.tracer.fault(request.traced, fault)
        if fault.action == "close":
            conn.close(f"fault {fault.id}: closed before {spec.name} was handled")
        elif fault.action == "error":
            answer = error_answer(spec, request.version, req, fault.value)
            if answer is None:
                conn.close(f"fault {fault.id}: {spec.name} v{request.version}'s answer carries no error code")
            else:
                self._respond(request, answer)
        elif fault.action == "hold_ms":
            def held(expired):
                return self._handle(request, handler, req, client_id) if expired else None
            self.purgatory.add(Park(held, deadline_ms=self.clock() * 1000 + fault.value), request, self)
        else:                                         # delay_ms, drop: handled now, answered later or never
            request.fault = fault
            self._settle(request, self.evaluate(request, self._handle, request, handler, req, client_id))

    def _decode(self, conn, frame):
        """-> (Request, its handler, its decoded body, client id); None when it
        is refused (the connection closes once the answers before it are sent)."""
        try:
            api_key, version, correlation_id, client_id, r = parse_request_header(frame)
        except ProtocolError as e:
            conn.close_after_answers(f"request header does not decode: {e}")
            return None
        if conn.sasl is not None and not self._sasl_admits(conn, api_key):
            return None
        entry = HANDLERS.get(api_key)
        if entry is None:
            conn.close_after_answers(f"unknown API key {api_key} (correlation id {correlation_id})")
            return None
        spec, handler = entry
        if not spec.min_served <= version <= spec.max_version:
            if api_key == ApiKey.API_VERSIONS and version > spec.max_version:
                self._unsupported_api_versions(conn, r, correlation_id)
            else:
                conn.close_after_answers(f"{spec.name} v{version} is not supported (doze serves "
                                         f"v{spec.min_served}-v{spec.max_version})")
            return None
        try:
            if spec.flexible(version):
                skip_tagged_fields(r)                 # request header v2
            req = decode_request_body(spec, version, r)
        except ProtocolError as e:
            conn.close_after_answers(f"{spec.name} v{version} request (correlation id {correlation_id}) "
                                     f"does not decode: {e}")
            return None
        if log.isEnabledFor(logging.DEBUG):
            log.debug("%s %s <- %s v%d #%d %s", conn.name, conn.principal, spec.name, version,
                      correlation_id, loggable(api_key, req))
        return Request(conn, spec, version, correlation_id), handler, req, client_id

    def evaluate(self, request, fn, *args):
        """fn's answer (a handler, or a parked request's poll): a KafkaError
        becomes the whole request's error; a bug, UNKNOWN_SERVER_ERROR, or
        None with the connection closed when the response cannot carry it."""
        try:
            return fn(*args)
        except KafkaError as e:
            return whole_request_error(request.spec, request.version, e)
        except Exception as e:
            result = self._handler_failed(request, e)
            if result is None:
                request.conn.close(f"{request.spec.name} could not be answered")
            return result

    def _settle(self, request, result):
        """Carry out a handler's result: an answer now or later (a Park), none, or a close."""
        conn = request.conn
        if result is None:
            conn.close(f"{request.spec.name} could not be answered")
        elif result is NO_RESPONSE:
            conn.drop_slot(request.slot)
        elif isinstance(result, CloseConnection):
            conn.drop_slot(request.slot)
            conn.close_after_answers(result.reason)
        elif isinstance(result, AuthenticationFailure):
            conn.drop_slot(request.slot)
            conn.fail_authentication(result.reason, self._response_chunks(
                request.spec, request.version, request.correlation_id, result.response))
        elif isinstance(result, Park):
            self.purgatory.add(result, request, self)
        else:
            self._respond(request, result)

    def reply(self, request, result):
        """A parked request's result, once its wait is over (Purgatory): an
        answer, or a close (a held request's handler may park it again)."""
        if not request.conn.closed:
            self._settle(request, result)

    def _handler_failed(self, request, e):
        """An exception a handler should not have let out (a bug): one log line
        that says where, the traceback only at DEBUG; the request is answered
        with UNKNOWN_SERVER_ERROR where its response has a top-level error code,
        else its connection alone is closed (-> None). No other connection sees it."""
        log.error("%s v%d from %s (correlation id %d) failed: %s: a bug in doze", request.spec.name,
                  request.version, request.conn.name, request.correlation_id, where(e))
        log.debug("the traceback", exc_info=e)
        return whole_request_error(request.spec, request.version, KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR),
                                    quiet=True)

    def _unsupported_api_versions(self, conn, r, correlation_id):
        """KIP-511: answer an ApiVersions version we do not know in the v0
        format, with UNSUPPORTED_VERSION and ApiVersions' own range, so the
        client can retry with one we do. (Kafka 4.3.1 sends exactly this.)"""
        try:
            skip_tagged_fields(r)     # newer versions use request header v2
        except ProtocolError as e:
            conn.close_after_answers(f"ApiVersions request of an unknown version does not decode: {e}")
            return
        spec = HANDLERS[ApiKey.API_VERSIONS][0]
        msg = Msg(error_code=ErrorCode.UNSUPPORTED_VERSION, api_keys=[
            Msg(api_key=int(ApiKey.API_VERSIONS), min_version=spec.min_version,
                max_version=spec.max_version)])
        self._respond(Request(conn, spec, 0, correlation_id), msg)

    def _respond(self, request, msg):
        spec, version, conn = request.spec, request.version, request.conn
        chunks = self._response_chunks(spec, version, request.correlation_id, msg)
        if chunks is None:
            conn.close(f"{spec.name} response could not be encoded")
            return
        if log.isEnabledFor(logging.DEBUG):
            log.debug("%s -> %s v%d #%d %s", conn.name, spec.name, version, request.correlation_id,
                      loggable(spec.key, msg))
        if request.traced is not None:
            self.tracer.response(request.traced, spec, msg)
        if request.fault is not None:
            self._answer_late(request, chunks)
        elif not conn.closed:
            conn.push(request.slot, chunks)

    def _answer_late(self, request, chunks):
        """A fault's answer: dropped (the connection closed instead), or delayed."""
        fault, conn = request.fault, request.conn
        if fault.action == "drop":
            conn.close(f"fault {fault.id}: the answer to {request.spec.name} dropped")
        else:
            self.timers.call_later(fault.value / 1000, lambda: None if conn.closed else conn.push(request.slot, chunks))

    def _response_chunks(self, spec, version, correlation_id, msg):
        """One response frame (size, header, body) as chunks; None (logged) if it does not encode."""
        try:
            return encode_response(spec, version, correlation_id, msg)
        except (TypeError, ValueError, struct.error, AttributeError, OverflowError) as e:
            log.error("%s v%d response (correlation id %d) does not encode: %s: a bug in doze",
                      spec.name, version, correlation_id, where(e))
            log.debug("the traceback", exc_info=e)
            return None

    def _sasl_admits(self, conn, api_key):
        """May this request of a SASL connection go on? (SaslSession.refusal);
        if not, the connection is failed or closed here."""
        refused, expired = conn.sasl.refusal(api_key, self.clock() * 1000)
        if refused and expired:
            conn.close(refused)
        elif refused:
            conn.fail_authentication(refused)
        return not refused

    def _raw_sasl_token(self, conn, frame):
        """After SaslHandshake v0: a bare SASL token in, the server's bare token
        out; a failure gets no answer, only the delayed close (as in Kafka)."""
        sasl = conn.sasl
        try:
            reply, principal = sasl.token(frame)
        except AuthenticationFailed as e:
            conn.fail_authentication(f"SASL {sasl.mechanism} authentication failed: {e}")
            return
        conn.push(conn.new_slot(), [I32.pack(len(reply)) + reply])
        if principal is not None:
            conn.authenticated(principal)


# --- Connections: the open ones, their limits, the listeners -----------------------

class Connections:
    """Every open Kafka connection, and the limits on them (see "Limits"
    above): max.connections and the descriptors doze has, the connections per
    IP, the requests taken in per pass (queued.max.requests), the idle and
    dripped-frame sweep. A Connection reaches the rest of the broker through
    it: the dispatcher for its frames, the group commit for answers that wait,
    the purgatory for a long-poll its next request ends, the loop's timers."""

    def __init__(self, config, selector, timers, listeners, dispatcher, group_commit, purgatory, descriptors):
        self.config, self.selector, self.timers = config, selector, timers
        self.dispatcher, self.group_commit, self.purgatory = dispatcher, group_commit, purgatory
        self.clock = config.clock
        self.open = set()
        self.ip_counts = collections.Counter()
        # Connections get what the segment files leave, less some for sqlite,
        # the listener and the log: then accepting stops rather than failing.
        self.descriptors = max(16, descriptors // 2 - 64)
        self.per_ip = parse_connection_overrides(config["max.connections.per.ip.overrides"])
        self.accepting = True           # False while at max.connections
        self.stopping = False
        self.turns = config["queued.max.requests"]   # requests still to take in this pass
        self.pass_deadline = float("inf")            # ... and until when
        self.resume = {}                # connections with frames waiting, first come first (a dict as an ordered set)
        self.acceptors = [_Listener(self, bound, listeners) for bound in listeners.bound]
        self.listen(True)

    def __iter__(self):
        return iter(self.open)

    def __len__(self):
        return len(self.open)

    def schedule(self, timers):
        """Start the sweep (connections.max.idle.ms, doze.frame.timeout.ms) on the loop's timers."""
        timers.call_later(SWEEP_S, self._sweep)

    # --- accepting, within the limits ---
    @property
    def max_connections(self):
        """max.connections (it may change while running), within the descriptors there are."""
        return min(self.config["max.connections"], self.descriptors)

    def listen(self, on):
        """Accept on every listener, or on none (at max.connections)."""
        for acceptor in self.acceptors:
            with contextlib.suppress(KeyError, ValueError, OSError):
                if on:
                    self.selector.register(acceptor.sock, selectors.EVENT_READ, acceptor)
                else:
                    self.selector.unregister(acceptor.sock)

    def may_accept(self):
        """Below max.connections? At it, the listeners are unregistered until one closes."""
        if len(self.open) < self.max_connections:
            return True
        if self.accepting:
            self.accepting = False
            self.listen(False)
            log.info("%d connections: not accepting more until one closes (max.connections, "
                     "or the descriptors doze has)", len(self.open))
        return False

    def allowed_from(self, ip):
        """May one more connection come from ip (max.connections.per.ip and its overrides)?"""
        allowed = self.per_ip.get(ip, self.config["max.connections.per.ip"])
        if self.ip_counts[ip] < allowed:
            return True
        log.info("Rejected connection from /%s, address already has the configured "
                 "maximum of %d connections.", ip, allowed)
        return False

    def add(self, conn):
        """A connection accepted: counted, and watched by the selector."""
        self.ip_counts[conn.ip] += 1
        self.open.add(conn)
        conn.update_interest()

    def forget(self, conn):
        """A connection closed (Connection.close): uncounted; accepting again below the limit."""
        self.open.discard(conn)
        self.resume.pop(conn, None)
        self.ip_counts[conn.ip] -= 1
        if not self.ip_counts[conn.ip]:
            del self.ip_counts[conn.ip]
        if not self.accepting and len(self.open) < self.max_connections and not self.stopping:
            self.accepting = True
            self.listen(True)

    def close_all(self, reason):
        """The broker stops: every connection closed, nothing more accepted."""
        self.stopping = True
        for conn in list(self.open):
            conn.close(reason)
        self.listen(False)

    # --- one pass of the loop ---
    def new_pass(self, began):
        """A pass begins: queued.max.requests turns again, for PASS_REQUESTS_S at most."""
        self.turns = self.config["queued.max.requests"]
        self.pass_deadline = began + PASS_REQUESTS_S

    def take_request_turn(self):
        """queued.max.requests: may one more request be taken in this pass? Not
        past that many, nor once the pass has spent PASS_REQUESTS_S on requests
        (wide ones can take a while each): the rest wait for the next pass."""
        if self.turns <= 0 or time.perf_counter() > self.pass_deadline:
            return False
        self.turns -= 1
        return True

    def resume_later(self, conn):
        """conn has frames that waited (muted, full, or out of turns): the next pass takes them."""
        self.resume[conn] = None

    def waiting(self):
        """Has a connection frames for the next pass?"""
        return bool(self.resume)

    def take_waiting(self):
        """The connections with frames waiting, once a pass: those put back
        meanwhile wait for the next pass."""
        waiting, self.resume = self.resume, {}
        return [conn for conn in waiting if not conn.closed]

    # --- what a Connection reaches through this ---
    def dispatch(self, conn, frame):
        """A whole request frame of conn: to its handler (Dispatcher)."""
        self.dispatcher.handle_frame(conn, frame)

    def hold(self, conn):
        """Must conn's ready answers wait for meta.db's fsync? (GroupCommit.hold)"""
        return self.group_commit.hold(conn)

    def end_park_early(self, park):
        """conn's next request came: its long-poll is answered now (Purgatory.end_early)."""
        self.purgatory.end_early(park)

    def call_later(self, delay_s, fn):
        self.timers.call_later(delay_s, fn)

    def _sweep(self):
        """connections.max.idle.ms, and doze.frame.timeout.ms for frames dripped in."""
        now = self.clock()
        idle_s = self.config["connections.max.idle.ms"] / 1000
        frame_s = self.config["doze.frame.timeout.ms"] / 1000
        self.timers.call_later(SWEEP_S, self._sweep)
        for conn in list(self.open):
            if idle_s >= 0 and now - conn.last_active > idle_s:
                conn.close(f"idle for more than connections.max.idle.ms ({idle_s * 1000:.0f} ms)")
            elif conn.frame_started is not None and now - conn.frame_started > frame_s:
                conn.close(f"{'the TLS handshake was not done' if conn.handshaking else 'a frame did not arrive whole'}"
                           f" within doze.frame.timeout.ms ({frame_s * 1000:.0f} ms)")


BoundListener = collections.namedtuple("BoundListener", "sock listener tls sasl")


class Listeners:
    """The broker's listening sockets, bound at construction (a port 0 becomes
    the one the system gave, and the listeners setting says so, as --port
    does), each with its TLS and SASL settings; and the address each
    advertises to its clients."""

    def __init__(self, config, scram_credential):
        self.config, self.scram_credential = config, scram_credential
        listeners = config.listeners
        tls = [TlsServer(config, l) if l.protocol in ("SSL", "SASL_SSL") else None for l in listeners]
        sasl = [sasl_setup(config, l) if l.protocol.startswith("SASL_") else None for l in listeners]
        self.bound = []
        try:
            for l, t, a in zip(listeners, tls, sasl):
                host = l.host or "0.0.0.0"
                try:
                    sock = socket.create_server((host, l.port), backlog=512, reuse_port=False,
                                                family=socket.AF_INET6 if ":" in host else socket.AF_INET)
                except OSError as e:
                    raise OSError(e.errno, f"listener {l.name} cannot listen on {host}:{l.port}: "
                                           f"{os.strerror(e.errno) if e.errno else e}"
                                           + ("; is another Kafka or doze running there? Give another port "
                                              "with --port N (or listeners=...)" if e.errno == errno.EADDRINUSE
                                              else "")) from None
                sock.setblocking(False)
                self.bound.append(BoundListener(sock, l._replace(port=sock.getsockname()[1]), t, a))
        except OSError:
            self.close()
            raise
        actual = [b.listener for b in self.bound]
        if actual != config.listeners or "listeners" not in config.given:
            config.set_static("listeners", format_listeners(actual + config.controller_listeners))
        self.port = self.bound[0].listener.port

    def node(self, conn):
        """(node_id, host, port) as clients of the listener conn came in on
        should reach this broker: its advertised.listeners entry, else its own."""
        listener = conn.listener if conn is not None else self.bound[0].listener
        advertised = self.config.advertised.get(listener.name)
        if advertised:
            return self.config["node.id"], advertised.host, advertised.port
        host = listener.host
        if host in ("", "0.0.0.0", "::") and conn is not None:
            host = conn.sock.getsockname()[0]
        return self.config["node.id"], host or "127.0.0.1", listener.port

    def sasl_session(self, bound):
        """A new connection's SaslSession on a SASL listener, else None."""
        if not bound.sasl:
            return None
        mechanisms, users, max_reauth_ms = bound.sasl
        return SaslSession(mechanisms, users, self.scram_credential, bound.listener.name, max_reauth_ms)

    def sasl_setups(self):
        """(mechanisms, PLAIN users, max reauth ms) of each SASL listener (the console's login)."""
        return [b.sasl for b in self.bound if b.sasl]

    def close(self):
        for b in self.bound:
            b.sock.close()


class _Listener:
    """A listening socket's selector callback: accept, within the limits."""

    def __init__(self, connections, bound, listeners):
        self.connections, self.bound, self.listeners = connections, bound, listeners
        self.sock, self.listener, self.tls = bound.sock, bound.listener, bound.tls

    def on_event(self, mask):
        connections = self.connections
        for _ in range(64):
            if not connections.may_accept():
                return
            try:
                sock, addr = self.sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as e:              # out of descriptors, ...: keep serving the others
                log.warning("accept failed: %s", e)
                return
            ip = addr[0] if isinstance(addr, tuple) else str(addr)
            if not connections.allowed_from(ip):
                sock.close()
                continue
            sock.setblocking(False)
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self.tls:
                try:
                    sock = self.tls.wrap(sock)
                except OSError as e:
                    log.warning("TLS on a connection from %s failed: %s", ip, e)
                    sock.close()
                    continue
            try:
                conn = Connection(sock, addr, connections, self.listener, self.tls,
                                  self.listeners.sasl_session(self.bound))
            except Exception as e:                # a bug in doze: this one connection is refused
                log.error("a connection from %s on listener %s: %s: a bug in doze", ip, self.listener.name,
                          where(e))
                with contextlib.suppress(OSError):
                    sock.close()
                continue
            connections.add(conn)


def parse_connection_overrides(text):
    """max.connections.per.ip.overrides: "host:count,host:count" -> {ip: count}."""
    out = {}
    for item in filter(None, (s.strip() for s in text.split(","))):
        host, _, count = item.rpartition(":")
        try:
            out[socket.gethostbyname(host)] = int(count)
        except (OSError, ValueError):
            raise ValueError(f"max.connections.per.ip.overrides: cannot read {item!r}") from None
    return out


###############################################################################
# 19. CONSOLE: WHAT IT SHOWS -- the broker in a browser, read-only, on the same loop
###############################################################################
# doze.console.listener=HOST:PORT serves a small web console on the broker's
# own loop (`python3 doze_kafka.py` turns it on at 127.0.0.1:8092, running()
# leaves it off). It shows what Kafka's consoles cannot, because the broker
# knows it: every transactional id with its state, the producers each
# partition remembers, and which open transaction holds a partition's last
# stable offset back. Every page is whole HTML without JavaScript, and has a
# JSON twin under /api/ with Kafka's own field names.
#
# Read-only: GET and HEAD, and POST for the login form only; no answer
# changes the broker, so a page elsewhere in the browser has nothing to
# forge. Any Kafka client can write what the console shows (a transactional
# id, a client id, a record), and the console usually runs on a learner's
# laptop, so:
#   - the Host header must name the console itself (127.0.0.1, localhost,
#     [::1], or a name in doze.console.hosts), which stops DNS rebinding: 421;
#   - every value on a page goes through esc(), once, in the builders below
#     (table cells, links, headings); characters that do not print (control,
#     bidi overrides, zero-width) are shown as visible tokens;
#   - every answer has a Content-Security-Policy that allows no inline script
#     or style and nothing from elsewhere, so an escaping bug is a blocked
#     violation rather than running code; no CORS header, ever;
#   - every request is bounded: CONSOLE_MAX_CONNECTIONS connections, a
#     request head of at most 8 KiB (and a login's body of 4 KiB) within
#     CONSOLE_HEAD_TIMEOUT_S, one request a connection, at most
#     CONSOLE_MAX_ROWS rows a table (the rest counted); a parameter a page
#     does not take is a 400 naming it (BadParameter), never a silent default;
#   - when any listener is SASL, every page but the login asks for one: a
#     user name and password checked against the broker's own PLAIN users and
#     SCRAM credentials (ConsoleLogin), a session cookie (random, HttpOnly,
#     SameSite=Strict; only its hash kept, in memory), logins limited per
#     address and per second, Origin checked on the two POSTs (login, logout:
#     they change the console's sessions, never the broker). Without SASL the
#     console's viewer is User:ANONYMOUS, as a PLAINTEXT client is;
#   - with an authorizer, each viewer sees what its ACLs let it see, asked as
#     Kafka's APIs ask (ConsoleViewer): DESCRIBE for topics, groups and
#     transactional ids (ListTopics, DescribeGroups, DescribeTransactions),
#     READ for records and producers (Fetch, DescribeProducers),
#     DESCRIBE_CONFIGS for configs, DESCRIBE on the cluster for ACLs and users.

CONSOLE_CLI_ADDRESS = "127.0.0.1:8092"    # what python3 doze_kafka.py serves the console on
CONSOLE_MAX_ROWS = 500


# --- Markup ---------------------------------------------------------------------

class Html(str):
    """Markup the console made itself: written as it is. Any other value put
    on a page is text, and esc() escapes it."""


def esc(value):
    """Text as markup: escaped, quotes too, and what does not print shown as
    a visible token (U+202E and the like cannot reorder or hide a cell)."""
    if isinstance(value, Html):
        return value
    text = "" if value is None else str(value)
    if not text.isprintable():
        text = "".join(c if c.isprintable() or c in "\n\t" else f"\u27e8U+{ord(c):04X}\u27e9" for c in text)
    return Html(html.escape(text, quote=True))


def tag(element, content="", **attrs):
    """<element attrs>content</element>; attribute values escaped (class_ for class)."""
    attributes = "".join(f' {k.rstrip("_").replace("_", "-")}="{esc(v)}"'
                         for k, v in attrs.items() if v is not None)
    if element in VOID_ELEMENTS:
        return Html(f"<{element}{attributes}>")
    return Html(f"<{element}{attributes}>{join_html(content)}</{element}>")


VOID_ELEMENTS = {"input", "meta", "link", "br"}


def join_html(content):
    """Content as markup: a list (nested or not) is its items in order."""
    if isinstance(content, (list, tuple)):
        return Html("".join(join_html(c) for c in content))
    return esc(content)


def console_path(*segments, **query):
    """A console URL: each path segment and query value percent-encoded."""
    path = "/" + "/".join(urllib.parse.quote(str(s), safe="") for s in segments)
    pairs = [(k, v) for k, v in query.items() if v is not None]
    return path + ("?" + urllib.parse.urlencode(pairs) if pairs else "")


def link(text, *segments, **query):
    return tag("a", text, href=console_path(*segments, **query))


def table(caption, columns, rows, total=None, numeric=()):
    """A table with a caption; a row's first cell is its header. total: the
    rows there were before CONSOLE_MAX_ROWS cut them (said under the table)."""
    head = tag("tr", [tag("th", c, scope="col", class_="num" if c in numeric else None) for c in columns])
    body = []
    for row in rows:
        cells = [tag("th", row[0], scope="row")]
        cells += [tag("td", cell, class_="num" if col in numeric else None)
                  for col, cell in zip(columns[1:], row[1:])]
        body.append(tag("tr", cells))
    if not rows:
        body.append(tag("tr", tag("td", "none", colspan=str(len(columns)), class_="empty")))
    note = ""
    if total is not None and total > len(rows):
        note = tag("p", f"{len(rows)} of {total} shown.", class_="note")
    return Html(tag("div", tag("table", [tag("caption", caption), tag("thead", head), tag("tbody", body)]),
                    class_="wide") + note)           # a table wider than the window scrolls in its own box


STATE_SYMBOLS = {"Empty": "\u25cb", "Ongoing": "\u25cf", "PrepareCommit": "\u25d0", "PrepareAbort": "\u25d0",
                 "CompleteCommit": "\u2713", "CompleteAbort": "\u2717", "PrepareEpochFence": "\u2691",
                 "Dead": "\u2020"}


def state_badge(state):
    """A transaction state as text with a symbol (never colour alone)."""
    return tag("span", f"{STATE_SYMBOLS.get(state, '')} {state}", class_=f"state s-{state}")


def time_text(ms, clock=False):
    """A timestamp (ms) as UTC text to the millisecond in a <time> element
    (-1: none); clock: the time of day only (the date in its title), for
    event feeds. The script shows both in the browser's own zone, and says which."""
    if ms is None or ms < 0:
        return "\u2014"
    try:
        when = datetime.datetime.fromtimestamp(ms / 1000, datetime.timezone.utc)
    except (OverflowError, OSError, ValueError):
        return str(ms)
    full = when.strftime("%Y-%m-%d %H:%M:%S.") + f"{ms % 1000:03d} UTC"
    return tag("time", full[11:] if clock else full, title=full if clock else None, class_="clock" if clock else None,
               datetime=when.isoformat(timespec="milliseconds").replace("+00:00", "Z"))


def age_text(ms):
    if ms is None or ms < 0:
        return "\u2014"
    if ms < 1000:
        return f"{ms} ms"
    if ms < 120_000:
        return f"{ms / 1000:.1f} s"
    if ms < 7_200_000:
        return f"{ms // 60_000} min"
    return f"{ms // 3_600_000} h"


def elapsed_text(ms):
    """The time since the step before: "+12 ms", "+1.5 s"; "+0 ms" is the
    same millisecond (the order is then the journal's)."""
    return "\u2014" if ms is None else f"+{age_text(ms)}"


CONSOLE_PAGES = (("Cluster", "/"), ("Topics", "/topics"), ("Groups", "/groups"), ("Security", "/security"),
                 ("APIs", "/apis"))


def console_layout(title, heading, body, active, api, viewer=None, script=True):
    """The one page layout: landmarks, the pages' navigation, who is logged
    in (with the logout button), the JSON twin's link; the script (live
    updates) unless the page has nothing to follow (the login form)."""
    nav = tag("nav", tag("ul", [tag("li", tag("a", name, href=path,
                                              aria_current="page" if path == active else None))
                                for name, path in CONSOLE_PAGES]), aria_label="Pages")
    who = tag("form", [tag("span", ["Logged in as ", tag("strong", viewer["user"])]), " ",
                       tag("button", "Log out", type="submit")], method="post", action="/logout",
              class_="who") if viewer else ""
    top = tag("header", [tag("span", "doze-kafka", class_="brand"), nav, who])
    main = tag("main", [tag("h1", heading), body], id="main")
    foot = tag("footer", ["This page as JSON: ", tag("a", api, href=api), " \u00b7 read-only"] if api else
               "read-only")
    return Html("<!DOCTYPE html>\n" + tag("html", [
        tag("head", [Html('<meta charset="utf-8">'),
                     Html('<meta name="viewport" content="width=device-width, initial-scale=1">'),
                     tag("title", f"{title} \u00b7 doze-kafka"),
                     Html('<link rel="icon" href="data:,">'),        # no /favicon.ico asked for
                     Html('<link rel="stylesheet" href="/console.css">'),
                     Html('<script src="/console.js" defer></script>') if script else ""]),
        tag("body", [Html('<a class="skip" href="#main">Skip to content</a>'), top, main,
                     tag("p", "", id="live", role="status", aria_live="polite", class_="live"),
                     tag("noscript", tag("p", "Live updates need JavaScript; reload the page for fresh figures.",
                                         class_="note")),
                     foot])], lang="en"))


# --- Decoding compressed batches, for the console only ----------------------------
# The produce and fetch paths never decompress. The console shows records, so
# it reads snappy and lz4 with the small decoders below (the standard library
# has neither). zstd it does not read: the standard library of the Pythons doze
# runs on has no zstd (3.14's compression.zstd is no module doze may import),
# so a zstd batch is one row with its offsets and record count. Each decoder
# refuses malformed input with RecordsError and stops at MAX_INFLATED.

def _copy_back(out, distance, length):
    """LZ77's back-reference: append `length` bytes starting `distance` back (overlap repeats)."""
    if not 0 < distance <= len(out):
        raise RecordsError(f"a back-reference {distance} bytes before {len(out)} bytes of output")
    start = len(out) - distance
    if distance >= length:
        out += out[start:start + length]
    else:
        out += (out[start:] * (length // distance + 1))[:length]


def snappy_block(data, limit):
    """One raw snappy block (the format's own description, github.com/google/snappy)."""
    r = Reader(data)
    try:
        size = r.uvarint() & 0xFFFFFFFF
        if size > limit:
            raise RecordsError(f"snappy block of {size} bytes, over {limit}")
        out = bytearray()
        while r.pos < r.end:
            tag = r.take(1)[0]
            kind = tag & 3
            if kind == 0:                                     # literal
                n = tag >> 2
                if n >= 60:
                    n = int.from_bytes(r.take(n - 59), "little")
                out += r.take(n + 1)
            elif kind == 1:
                _copy_back(out, ((tag >> 5) << 8) | r.take(1)[0], ((tag >> 2) & 7) + 4)
            else:
                length = (tag >> 2) + 1
                _copy_back(out, int.from_bytes(r.take(2 if kind == 2 else 4), "little"), length)
            if len(out) > size:
                raise RecordsError("snappy output longer than its header says")
    except ProtocolError as e:
        raise RecordsError(f"snappy: {e}") from None
    if len(out) != size:
        raise RecordsError(f"snappy: {len(out)} bytes, its header says {size}")
    return out


SNAPPY_XERIAL = b"\x82SNAPPY\x00"


def unsnappy(data, limit):
    """Kafka's snappy: xerial's framing (Java's SnappyOutputStream, librdkafka
    too) -- a 16-byte header, then blocks each with a 4-byte length -- or one raw block."""
    data = bytes(data)
    if not data.startswith(SNAPPY_XERIAL):
        return snappy_block(data, limit)
    out, pos = bytearray(), 16
    while pos < len(data):
        if pos + 4 > len(data):
            raise RecordsError("snappy: a torn block length")
        n = int.from_bytes(data[pos:pos + 4], "big")
        out += snappy_block(data[pos + 4:pos + 4 + n], limit - len(out))
        pos += 4 + n
    return out


def lz4_block(data, out, limit):
    """One LZ4 block (lz4's Block format description), appended to out."""
    r = Reader(data)
    try:
        while r.pos < r.end:
            token = r.take(1)[0]
            n = token >> 4
            if n == 15:
                n += _lz4_more(r)
            out += r.take(n)
            if r.pos == r.end:                                # the last sequence: literals only
                break
            distance = int.from_bytes(r.take(2), "little")
            length = token & 15
            if length == 15:
                length += _lz4_more(r)
            _copy_back(out, distance, length + 4)
            if len(out) > limit:
                raise RecordsError(f"lz4 records inflate to more than {limit} bytes")
    except ProtocolError as e:
        raise RecordsError(f"lz4: {e}") from None


def _lz4_more(r):
    total = 0
    while True:
        b = r.take(1)[0]
        total += b
        if b != 255:
            return total


def unlz4(data, limit):
    """An LZ4 frame (lz4's Frame format description; Kafka's KafkaLZ4BlockOutputStream
    writes one): header, blocks each with a 4-byte length (high bit: stored as
    is), an end mark. Blocks may refer back into earlier ones, so all go to one output."""
    r = Reader(bytes(data))
    out = bytearray()
    try:
        if r.take(4) != b"\x04\x22\x4d\x18":
            raise RecordsError("lz4: not an LZ4 frame")
        flags = r.take(1)[0]
        r.take(1)                                             # block size: the blocks say theirs
        if flags & 0x08:
            r.take(8)                                         # content size
        if flags & 0x01:
            r.take(4)                                         # dictionary id
        r.take(1)                                             # header checksum
        while True:
            n = int.from_bytes(r.take(4), "little")
            if n == 0:
                return out
            block = r.take(n & 0x7FFFFFFF)
            if n & 0x80000000:
                out += block
            else:
                lz4_block(block, out, limit)
            if len(out) > limit:
                raise RecordsError(f"lz4 records inflate to more than {limit} bytes")
            if flags & 0x10:
                r.take(4)                                     # block checksum
    except ProtocolError as e:
        raise RecordsError(f"lz4: {e}") from None


CONSOLE_CODECS = {1: gunzip, 2: unsnappy, 3: unlz4}     # zstd: a batch row with its record count


# --- The message browser: one partition, three views ------------------------------
# A page reads from one offset (or the batch a timestamp bisects to, or the end)
# at most CONSOLE_READ_BYTES of log and CONSOLE_PAGE_ROWS records, so a 10 GiB
# partition browses as fast as a small one. It classifies as a read_committed
# consumer does: the aborted transactions over the page come from the producer
# state (as a Fetch lists them), an ABORT marker ends one, and a transactional
# batch at or past the LSO belongs to a transaction still open. Views: "log"
# (everything as stored, markers as dividers, the LSO and high watermark as
# lines), "uncommitted" and "committed" (the records that consumer gets).

CONSOLE_READ_BYTES = 1 << 20        # log bytes one browser page reads, at most
CONSOLE_PAGE_ROWS = 100             # records a browser page shows unless asked (at most CONSOLE_MAX_ROWS)
BROWSER_VIEWS = ("log", "uncommitted", "committed")


def bytes_item(prefix, data):
    """A key, value or header value as JSON: exact (base64), and as text when it is UTF-8."""
    if data is None:
        return {f"{prefix}_b64": None}
    item = {f"{prefix}_b64": base64.b64encode(data).decode()}
    try:
        item[f"{prefix}_text"] = data.decode("utf-8")
    except UnicodeDecodeError:
        pass
    return item


class BadParameter(ValueError):
    """A query parameter or path part a page does not take: a 400 page naming
    it and what it accepts (never a silent default)."""

    def __init__(self, name, value, accepts):
        super().__init__(f"{name}={value[:100]}: {name} takes {accepts}")
        self.name, self.value, self.accepts = name, value, accepts

    def text(self):
        return f"{self.name}={self.value[:100]} is not accepted here: {self.name} takes {self.accepts}."


WHOLE_NUMBER = "a whole number, 0 or more"


def query_number(query, name, default, low=0, high=None, accepts=WHOLE_NUMBER):
    """An integer parameter from low to high (absent or empty: default); anything else is BadParameter."""
    text = query.get(name, "")
    if text == "":
        return default
    if not re.fullmatch(r"-?[0-9]{1,19}", text) or int(text) < low or high is not None and int(text) > high:
        raise BadParameter(name, text, accepts)
    return int(text)


def query_choice(query, name, choices, accepts=None):
    """One of choices (absent or empty: the first)."""
    text = query.get(name, "")
    if text == "":
        return choices[0]
    if text not in choices:
        raise BadParameter(name, text, accepts or "one of " + ", ".join(choices))
    return text


def query_time(query, name):
    """A date and time as an <input type="datetime-local"> sends it
    (2024-05-01T21:09, seconds and milliseconds optional), read as UTC unless
    it names its offset -> ms since the epoch; None when absent. (A page
    cannot know the browser's zone without a script: the form says UTC.)"""
    text = query.get(name, "").strip()
    if not text:
        return None
    try:
        when = datetime.datetime.fromisoformat(text[:-1] + "+00:00" if text[-1:] in "Zz" else text)
    except ValueError:
        when = None
    if when is not None and when.tzinfo is None:
        when = when.replace(tzinfo=datetime.timezone.utc)
    epoch = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)
    if when is None or when < epoch:
        raise BadParameter(name, text, "a date and time from 1970 on, in UTC: 2024-05-01T21:09:51.237 "
                                       "(seconds and milliseconds may be left out)")
    return (when - epoch) // datetime.timedelta(milliseconds=1)


class PartitionBrowser:
    """One page of one partition's records, classified (see above)."""

    def __init__(self, broker, plog, view):
        self.broker, self.plog, self.view = broker, plog, view
        self.lso = broker.producer_states.last_stable_offset(plog)
        self.table = broker.producer_states.get((plog.topic, plog.partition))
        self.lso_drawn = False

    def start_offset(self, query, limit):
        """Where the page starts: ?timestamp= (ms) or ?time= (a date and time,
        UTC), else ?at=end, else ?offset= (a number, earliest or latest; each
        checked: BadParameter)."""
        plog = self.plog
        ms = query_number(query, "timestamp", None, accepts="milliseconds since 1970-01-01 00:00 UTC, 0 or more")
        ms = query_time(query, "time") if ms is None else ms
        at = query_choice(query, "at", ("", "end"), accepts="end (the last records), or nothing")
        offset = {"earliest": plog.log_start_offset, "latest": plog.high_watermark}.get(query.get("offset"))
        if offset is None:
            offset = query_number(query, "offset", plog.log_start_offset,
                                  accepts="an offset (a whole number, 0 or more), earliest or latest")
        if ms is not None:
            found = run_steps(plog.offset_for_timestamp(ms))
            return found[0] if found else plog.high_watermark
        if at == "end":
            return max(plog.log_start_offset, plog.high_watermark - limit)
        return min(max(offset, plog.log_start_offset), plog.high_watermark)

    def page(self, start, limit):
        """-> (items, the offset the next page starts at)."""
        plog, items, shown, read = self.plog, [], 0, 0
        hw = plog.high_watermark
        # As Java's consumer does: aborted transactions by first offset; a
        # producer's records are dropped from its first offset to its ABORT marker.
        aborts = sorted(self.table.aborted_between(start, hw), key=lambda a: a[1]) if self.table else []
        aborting, k = set(), 0
        following = start
        for base, batch in plog.batches(start, hw):
            h = read_batch_header(batch)
            while k < len(aborts) and aborts[k][1] <= base:
                aborting.add(aborts[k][0])
                k += 1
            if self.view == "committed" and base >= self.lso:
                break                                      # where a read_committed consumer stops
            read += len(batch)
            following = base + h.last_offset_delta + 1
            if h.attributes & ATTR_CONTROL:
                if control_type(batch) == CONTROL_ABORT:
                    aborting.discard(h.producer_id)
                if self.view == "log" and base >= start:
                    self.line_before(items, base)
                    items.append(self.marker(h, batch))
                continue
            status = self.status(h, aborting)
            for item in self.records(h, batch, status, start):
                if self.view == "committed" and status == "aborted":
                    continue
                self.line_before(items, item["offset"])
                items.append(item)
                if item["kind"] == "record":
                    shown += 1
                    if shown >= limit:
                        following = item["offset"] + 1
                        break
            if shown >= limit or read >= CONSOLE_READ_BYTES:
                break
        end = min(hw, self.lso) if self.view == "committed" else hw
        if following >= end:
            self.line_before(items, hw)
            items.append({"kind": "line", "name": "HW", "offset": hw})
        return items, following

    def line_before(self, items, offset):
        """The LSO line, once, before the first item at or past it (when it is
        below the high watermark; not in the read_uncommitted view)."""
        if self.view != "uncommitted" and not self.lso_drawn and self.lso < self.plog.high_watermark \
                and offset >= self.lso:
            items.append({"kind": "line", "name": "LSO", "offset": self.lso})
            self.lso_drawn = True

    def status(self, h, aborting):
        """A data batch's transaction: None (not transactional), aborted, pending (open), committed."""
        if not h.attributes & ATTR_TRANSACTIONAL:
            return None
        if h.producer_id in aborting:
            return "aborted"
        entry = self.table.producers.get(h.producer_id) if self.table else None
        if h.base_offset >= self.lso and entry is not None and 0 <= entry.txn_first_offset <= h.base_offset:
            return "pending"
        return "committed"

    @staticmethod
    def marker(h, batch):
        return {"kind": "marker", "offset": h.base_offset, "timestamp": h.max_timestamp,
                "control": "COMMIT" if control_type(batch) == CONTROL_COMMIT else "ABORT",
                "producer_id": h.producer_id, "producer_epoch": h.producer_epoch}

    def records(self, h, batch, status, start):
        """The batch's record items from `start` on (one "batch" item when they cannot be read)."""
        common = {"producer_id": h.producer_id, "producer_epoch": h.producer_epoch,
                  "transactional": bool(h.attributes & ATTR_TRANSACTIONAL), "txn_status": status,
                  "compression": COMPRESSION_NAMES.get(h.attributes & ATTR_COMPRESSION, "?"),
                  "tstype": "log_append" if h.attributes & ATTR_LOG_APPEND_TIME else "create"}
        try:
            for off_delta, ts_delta, key, value, headers in decode_records(batch, CONSOLE_CODECS):
                offset = h.base_offset + off_delta
                if offset < start:
                    continue
                yield {"kind": "record", "offset": offset, "partition": self.plog.partition,
                       "timestamp": h.max_timestamp if h.attributes & ATTR_LOG_APPEND_TIME
                       else h.base_timestamp + ts_delta,
                       "sequence": -1 if h.base_sequence < 0 else next_sequence(h.base_sequence, off_delta),
                       **common, **bytes_item("key", key), **bytes_item("value", value),
                       "headers": [{**bytes_item("key", k), **bytes_item("value", v)} for k, v in headers]}
        except RecordsError as e:
            if h.base_offset + h.last_offset_delta >= start:
                yield {"kind": "batch", "offset": h.base_offset, "last_offset": h.base_offset + h.last_offset_delta,
                       "records_count": h.records_count, "note": str(e), **common}


class RecordCounter:
    """Exact record counts that leave the transaction markers out, without
    reading a record: a partition's offsets from log start to the high
    watermark (doze never compacts: each is a record or a marker), less its
    control batches. Only a one-record batch can be a marker, so only those
    batches' attributes are read (a pread of 23 bytes each). How far each
    segment is counted is kept, so a batch is read once; each page, and each
    sweep of the console, spends at most CONSOLE_COUNT_BUDGET_S on it, and a
    partition not counted yet says so (None)."""

    def __init__(self):
        # Keyed by the log object itself: a topic deleted and made again is a new one.
        self.counted = weakref.WeakKeyDictionary()    # log -> {segment base: [segment, first batch, next, markers]}
        self.unfinished = weakref.WeakSet()           # the logs a sweep goes on counting

    def markers(self, plog, deadline):
        """The markers between log start and the HW, or None if not counted by the deadline."""
        hw, start = plog.high_watermark, plog.log_start_offset
        old, fresh, total, complete = self.counted.get(plog, {}), {}, 0, True
        for seg in plog.segments:
            first = 0 if seg.base_offset >= start else seg.batch_at(start)
            if not seg.bases or first is None or seg.base_offset >= hw:
                continue
            entry = old.get(seg.base_offset)
            if entry is None or entry[0] is not seg or entry[1] != first:
                entry = [seg, first, first, 0]
            fresh[seg.base_offset] = entry
            end = bisect.bisect_left(seg.lasts, hw)       # the batches below the HW
            if complete and entry[2] < end:
                self._count(seg, entry, end, deadline)
            complete = complete and entry[2] >= end
            total += entry[3]
        self.counted[plog] = fresh
        (self.unfinished.discard if complete else self.unfinished.add)(plog)
        return total if complete else None

    @staticmethod
    def _count(seg, entry, end, deadline):
        bases, lasts, positions = seg.bases, seg.lasts, seg.positions
        fd, i, found = seg.read_handle().fd, entry[2], entry[3]
        for n in range(end - i):
            if n & 255 == 0 and time.perf_counter() > deadline:
                break
            if bases[i] == lasts[i] and I16.unpack_from(os.pread(fd, 23, positions[i]), 21)[0] & ATTR_CONTROL:
                found += 1
            i += 1
        entry[2], entry[3] = i, found

    def counts(self, plog, deadline):
        """{"records": offsets less markers, "markers": ...}: None while not counted yet."""
        markers = self.markers(plog, deadline)
        return {"records": None if markers is None else plog.high_watermark - plog.log_start_offset - markers,
                "markers": markers}

    def sweep(self, logs, budget_s):
        """Go on counting what pages left unfinished (of the logs still there)."""
        deadline = time.perf_counter() + budget_s
        for plog in list(self.unfinished):
            if time.perf_counter() > deadline:
                break
            if logs.holds(plog):
                self.markers(plog, deadline)
            else:
                self.unfinished.discard(plog)


CONSOLE_COUNT_BUDGET_S = 0.02


# --- What a read_committed consumer still has to read ------------------------------
# A group's lag, as Kafka's tools print it, is in offsets: the high watermark
# less the committed offset. Transaction markers take offsets and aborted
# records are never delivered, so a transactional topic's consumer has fewer
# records to read than that: the data records between its offset and the
# LSO whose transaction did not abort. Counted from the batch headers (and a
# control record's type), never a record, and bounded: a page reads at most
# CONSOLE_LAG_BATCHES batch headers for one partition and
# CONSOLE_LAG_PAGE_BATCHES in all, then says "at least".

CONSOLE_LAG_BATCHES = 500
CONSOLE_LAG_PAGE_BATCHES = 5000


def records_to_read(plog, table, lso, start, budget):
    """-> (records, batches read, complete): the data records of [start, lso)
    a read_committed consumer gets, from at most `budget` batch headers."""
    aborts = sorted(table.aborted_between(start, lso), key=lambda a: a[1]) if table else []
    aborting, k, count, read = set(), 0, 0, 0
    for base, head in plog.batch_heads(start):
        if base >= lso:
            break
        if read >= budget:
            return count, read, False
        read += 1
        h = read_batch_header(head)
        while k < len(aborts) and aborts[k][1] <= base:      # as PartitionBrowser.page: by first offset
            aborting.add(aborts[k][0])
            k += 1
        if h.attributes & ATTR_CONTROL:
            if control_type(head) == CONTROL_ABORT:
                aborting.discard(h.producer_id)
        elif not (h.attributes & ATTR_TRANSACTIONAL and h.producer_id in aborting):
            count += min(base + h.last_offset_delta + 1, lso) - max(base, start)
    return count, read, True


# --- What the pages show: the broker's state as JSON-ready data, as a viewer may see it ---

def marker_rows(offsets):
    return [{"topic": t, "partition": p, "offset": o} for (t, p), o in sorted(offsets.items())]


def offset_rows(offsets):
    """{group: {(topic, partition): OffsetEntry}} as rows."""
    return [{"group": g, "topic": t, "partition": p, "offset": e.offset, "metadata": e.metadata}
            for g, entries in sorted(offsets.items()) for (t, p), e in sorted(entries.items())]


CONFIG_SOURCE_NAMES = {SOURCE_TOPIC: "DYNAMIC_TOPIC_CONFIG", SOURCE_DYNAMIC_BROKER: "DYNAMIC_BROKER_CONFIG",
                       SOURCE_DYNAMIC_DEFAULT: "DYNAMIC_DEFAULT_BROKER_CONFIG",
                       SOURCE_STATIC: "STATIC_BROKER_CONFIG", SOURCE_DEFAULT: "DEFAULT_CONFIG"}


RUNNING = {TxnState.ONGOING} | DECIDED          # a transaction open, or decided and being carried out


def cut(rows):
    """At most CONSOLE_MAX_ROWS of rows, and how many there were."""
    return rows[:CONSOLE_MAX_ROWS], len(rows)


CONSOLE_FEED_EVENTS = 20          # the Cluster page's recent events
CONSOLE_EVENTS_PAGE = 100         # the events page's, unless asked (at most CONSOLE_MAX_ROWS)


class ConsoleViewer:
    """Who looks: a principal from an address, asked as the broker's
    authorizer asks a Kafka client (everything is allowed without one);
    answers are kept for one page, asked once a name."""

    def __init__(self, authorizer, principal, host, user=None, session=None):
        self.authorizer, self.principal, self.host = authorizer, principal, host
        self.user, self.session = user, session        # a logged-in viewer's name and session key
        self.answers = {}

    def fresh(self):
        """The same viewer without remembered answers (ACLs may have changed)."""
        return ConsoleViewer(self.authorizer, self.principal, self.host, self.user, self.session)

    def can(self, operation, resource_type, name):
        if self.authorizer is None:
            return True
        key = (operation, resource_type, name)
        if key not in self.answers:
            self.answers[key] = self.authorizer.allowed(self.principal, self.host, operation, resource_type, name)
        return self.answers[key]

    def topic(self, name, operation=Op.DESCRIBE):
        return self.can(operation, ResourceType.TOPIC, name)

    def txn(self, transactional_id):
        return self.can(Op.DESCRIBE, ResourceType.TRANSACTIONAL_ID, transactional_id)

    def group(self, group_id):
        return self.can(Op.DESCRIBE, ResourceType.GROUP, group_id)

    def cluster(self):
        return self.can(Op.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME)

    def partitions(self, rows):
        """The rows (dicts with a "topic") whose topic it may describe."""
        return [r for r in rows if self.topic(r["topic"])]

    def offsets(self, rows):
        """Offset rows whose group and topic it may describe."""
        return [r for r in rows if self.group(r["group"]) and self.topic(r["topic"])]

    def event(self, e):
        """A journal event as this viewer may see it, or None."""
        tid, gid = e.get("transactional_id"), e.get("group_id")
        if tid is not None and not self.txn(tid) or "topic" in e and not self.topic(e["topic"]) or \
                gid is not None and not self.group(gid):
            return None
        if "partitions" in e and self.authorizer is not None:
            seen = [p for p in e["partitions"] if self.topic(p.rpartition("-")[0])]
            if len(seen) < len(e["partitions"]):
                e = {**e, "partitions": seen, "partition_count": len(seen)}
        return e

    def describe(self):
        return None if self.user is None else {"user": self.user, "principal": self.principal}


class ConsoleViews:
    """The data each page shows, read from the broker as it is now (nothing
    kept for the console): the same dicts the /api/ twins answer with, each
    cut to what the viewer may see."""

    def __init__(self, broker, viewer, counter=None):
        self.broker, self.viewer = broker, viewer
        self.counter = counter or RecordCounter()
        self.deadline = time.perf_counter() + CONSOLE_COUNT_BUDGET_S     # for counting records
        self.lag_budget = CONSOLE_LAG_PAGE_BATCHES                        # batch headers, for records to read

    def now_ms(self):
        return int(self.broker.clock() * 1000)

    def cluster(self):
        b, v = self.broker, self.viewer
        node_id, host, port = b.listeners.node(None)
        txns, txn_total = cut(sorted((m for m in b.txns.txns.values() if v.txn(m.transactional_id)),
                                     key=lambda m: m.transactional_id))
        by_producer = {m.producer_id: m for m in b.txns.txns.values()}
        producers, producer_total = cut([
            self.producer_row(tp, pid, e, by_producer.get(pid))
            for tp, table in sorted(b.producer_states.items()) if v.topic(tp[0], Op.READ)
            for pid, e in sorted(table.producers.items())])
        partitions, partition_total = cut(self.partition_rows(by_producer))
        states = collections.Counter(g.state.value for g in b.groups.groups.values() if v.group(g.group_id))
        return {"broker": {"node_id": node_id, "host": host, "port": port, "version": __version__,
                           "data_dir": b.config.data_dir if v.can(Op.DESCRIBE_CONFIGS, ResourceType.CLUSTER,
                                                                  CLUSTER_NAME) else None,
                           "cluster_id": b.store.get_setting("cluster_id"),
                           "now_ms": self.now_ms()},
                "transactions": [self.txn_row(m) for m in txns], "transactions_total": txn_total,
                "producers": producers, "producers_total": producer_total,
                "partitions": partitions, "partitions_total": partition_total,
                "groups": dict(sorted(states.items())), "recent_events": self.recent_events()}

    def txn_row(self, meta):
        now = self.now_ms()
        age = now - meta.txn_start_ms if meta.state in RUNNING and meta.txn_start_ms >= 0 else None
        return {"transactional_id": meta.transactional_id, "transaction_state": meta.state.value,
                "producer_id": meta.producer_id, "producer_epoch": meta.producer_epoch,
                "transaction_timeout_ms": meta.timeout_ms, "transaction_start_time_ms": meta.txn_start_ms,
                "age_ms": age, "last_update_ms": meta.last_update_ms,
                "partitions": self.viewer.partitions({"topic": t, "partition": p} for t, p in sorted(
                    meta.partitions | {(CONSUMER_OFFSETS, offsets_partition(self.broker.config, g))
                                       for g in meta.groups})),     # as Kafka lists them (AddOffsetsToTxn)
                "groups": [g for g in sorted(meta.groups) if self.viewer.group(g)],
                "begun_version": meta.begun_version, "ended_version": meta.ended_version,   # transaction.version
                "pending_offsets": len(self.viewer.offsets(offset_rows(meta.offsets))),
                "hanging": age is not None and meta.state == TxnState.ONGOING and age > meta.timeout_ms}

    def transaction(self, transactional_id):
        """One transactional id: its row, its recent transitions, the markers
        and offsets of the decision in progress and of the last one."""
        meta = self.broker.txns.txns.get(transactional_id)
        if meta is None:
            return None
        last, v = meta.last_decision, self.viewer
        history = [e for e in map(v.event, meta.history) if e is not None]
        taken = collections.Counter((e["from_state"], e["to_state"]) for e in history)
        return {**self.txn_row(meta), "history": history, "timeline": self.timeline(meta),
                "coordinator": next((e["coordinator"] for e in reversed(history) if e.get("coordinator")), None),
                "markers_written": v.partitions(marker_rows(meta.marker_offsets)),
                "markers_needed": v.partitions({"topic": t, "partition": p} for t, p in sorted(meta.markers_needed)),
                "pending_offsets": v.offsets(offset_rows(meta.offsets)),
                "last_decision": None if last is None else {
                    "committed": last["commit"], "at_ms": last["at_ms"],
                    "markers": v.partitions(marker_rows(last["markers"])), "offsets": v.offsets(offset_rows(last["offsets"]))},
                "state_machine": [{"state": s.value, "entered_from": sorted(p.value for p in VALID_PREVIOUS[s])}
                                  for s in TxnState],
                "transitions_taken": [{"from": a, "to": b, "times": n} for (a, b), n in sorted(taken.items())]}

    def timeline(self, meta):
        """Its recent transitions and the markers written meanwhile, in the
        journal's order (its ids: two steps may share a millisecond), each
        with the milliseconds since the step before."""
        history = list(meta.history)
        first = history[0]["id"] if history else 0
        markers = [e for e in self.broker.journal.events if e["kind"] == "marker" and e["id"] > first
                   and e.get("transactional_id") == meta.transactional_id]
        steps, before = [], None
        for e in filter(None, map(self.viewer.event, sorted(history + markers, key=lambda e: e["id"]))):
            steps.append({**e, "elapsed_ms": None if before is None else e["at_ms"] - before})
            before = e["at_ms"]
        return steps

    def records(self, topic, partition, query):
        """A page of the message browser (PartitionBrowser), or None for no such partition."""
        plog = self.broker.logs.logs.get((topic, partition))
        if plog is None:
            return None
        view = query_choice(query, "view", BROWSER_VIEWS)
        fmt = query_choice(query, "format", ("text", "json", "hex"))
        limit = query_number(query, "limit", CONSOLE_PAGE_ROWS, 1, CONSOLE_MAX_ROWS,
                             f"a whole number from 1 to {CONSOLE_MAX_ROWS}")
        browser = PartitionBrowser(self.broker, plog, view)
        start = browser.start_offset(query, limit)
        items, following = browser.page(start, limit)
        return {"topic": topic, "partition": partition, "view": view, "format": fmt, "from": start,
                "limit": limit, "log_start_offset": plog.log_start_offset, "last_stable_offset": browser.lso,
                "high_watermark": plog.high_watermark, "items": items,
                "next_offset": following if following < plog.high_watermark else None,
                "query": {k: v for k, v in query.items() if k in ("offset", "timestamp", "time", "at", "view",
                                                                  "format", "limit")}}

    def groups(self):
        """Each group; its lag in offsets (as Kafka's tools) and the records
        still to read (None where the viewer may not READ a topic of it)."""
        v, rows = self.viewer, []
        for g in sorted(self.broker.groups.groups.values(), key=lambda g: g.group_id):
            if not v.group(g.group_id):
                continue
            shown = [(tp, e) for tp, e in sorted(g.offsets.items()) if v.topic(tp[0])]
            reads = [self.to_read(tp, e.offset) for tp, e in shown]
            rows.append({"group_id": g.group_id, "group_state": g.state.value, "protocol_type": g.protocol_type,
                         "protocol": g.protocol_name, "generation_id": g.generation, "members": len(g.members),
                         "committed_partitions": len(shown), "lag": sum(self.lags(tp, e)[0] for tp, e in shown),
                         "records_to_read": None if any(n is None for n, _ in reads) else sum(n for n, _ in reads),
                         "records_to_read_complete": all(done for _, done in reads)})
        rows, total = cut(rows)
        return {"groups": rows, "groups_total": total}

    def lags(self, tp, entry):
        """(offsets behind the high watermark, behind the LSO) of a committed offset."""
        plog = self.broker.logs.logs.get(tp)
        if plog is None:
            return 0, 0
        lso = self.broker.producer_states.last_stable_offset(plog)
        return max(plog.high_watermark - entry.offset, 0), max(lso - entry.offset, 0)

    def to_read(self, tp, offset):
        """(records a read_committed consumer at `offset` still gets, complete)
        -- within the page's budget; (None, True) without READ on the topic."""
        plog = self.broker.logs.logs.get(tp)
        if plog is None:
            return 0, True
        if not self.viewer.topic(tp[0], Op.READ):          # records, as Fetch: READ
            return None, True
        lso = self.broker.producer_states.last_stable_offset(plog)
        start = max(offset, plog.log_start_offset)
        if start >= lso:
            return 0, True
        try:
            count, read, complete = records_to_read(plog, self.broker.producer_states.get(tp), lso, start,
                                                    min(CONSOLE_LAG_BATCHES, self.lag_budget))
        except OSError:                          # a failing disk: what the page can say is nothing exact
            return 0, False
        self.lag_budget -= read
        return count, complete

    def group(self, group_id):
        """One group: its members with their assignments, its committed offsets
        with both lags and the records still to read, and the offsets open
        transactions have staged for it."""
        g = self.broker.groups.groups.get(group_id)
        if g is None:
            return None
        v = self.viewer
        offsets, total = cut([{"topic": t, "partition": p, "committed_offset": e.offset, "metadata": e.metadata,
                               **dict(zip(("lag", "lag_to_lso"), self.lags((t, p), e))),
                               **dict(zip(("records_to_read", "records_to_read_complete"),
                                          self.to_read((t, p), e.offset)))}
                              for (t, p), e in sorted(g.offsets.items()) if v.topic(t)])
        txns = self.broker.txns
        pending = [{"transactional_id": tid, "topic": t, "partition": p,
                    "offset": txns.txns[tid].offsets[group_id][(t, p)].offset}
                   for (t, p), ids in sorted(txns.staged.get(group_id, {}).items()) if v.topic(t)
                   for tid in sorted(ids) if v.txn(tid)
                   and group_id in txns.txns[tid].offsets and (t, p) in txns.txns[tid].offsets[group_id]]
        return {"group_id": group_id, "group_state": g.state.value, "protocol_type": g.protocol_type,
                "protocol": g.protocol_name, "generation_id": g.generation, "leader": g.leader,
                "members": [{"member_id": m.member_id, "group_instance_id": m.instance_id, "client_id": m.client_id,
                             "client_host": m.client_host, "assignment": consumer_assignment(m.assignment)
                             if g.kind == "classic" else self.assigned_rows(m.assigned),
                             **(self.reconciliation(g, m) if g.kind == "consumer" else {})}
                            for m in g.members.values()],
                **({"group_epoch": g.group_epoch, "assignment_epoch": g.assignment_epoch} if g.kind == "consumer"
                   else {}),
                "offsets": offsets, "offsets_total": total, "pending_offsets": pending}

    def reconciliation(self, g, m):
        """A consumer group member's epoch, step, target and what it must give up (KIP-848)."""
        return {"member_epoch": m.epoch, "step": ("stable", "revoking", "waiting for partitions")[m.state],
                "protocol": "classic" if m.classic else "consumer", "revoking": self.assigned_rows(m.revoking),
                "target": self.assigned_rows(g.target.get(m.member_id, {}))}

    def assigned_rows(self, assigned):
        """A consumer-protocol member's partitions (by topic id) as [{"topic", "partitions"}]."""
        names = {t.topic_id: name for name, t in self.broker.logs.topics.items()}
        return [{"topic": names[t], "partitions": sorted(ps)} for t, ps in sorted(
            assigned.items(), key=lambda item: names.get(item[0], "")) if t in names]

    def recent_events(self):
        """The Cluster page's feed: the last CONSOLE_FEED_EVENTS (the events page has all the journal keeps)."""
        return self.events_before(None, CONSOLE_FEED_EVENTS)[0]

    def events_before(self, before, limit):
        """-> (up to `limit` events older than id `before` (None: the newest), newest first; more older ones?)"""
        ring = self.broker.journal.events
        seen = filter(None, map(self.viewer.event, (e for e in reversed(ring) if before is None or e["id"] < before)))
        shown = list(itertools.islice(seen, limit + 1))
        return shown[:limit], len(shown) > limit

    def events(self, query):
        """The events page: the journal, newest first, CONSOLE_EVENTS_PAGE a page; ?before=ID for older ones."""
        before = query_number(query, "before", None, 1, accepts="an event id, 1 or more")
        limit = query_number(query, "limit", CONSOLE_EVENTS_PAGE, 1, CONSOLE_MAX_ROWS,
                             f"a whole number from 1 to {CONSOLE_MAX_ROWS}")
        events, more = self.events_before(before, limit)
        ring = self.broker.journal.events
        return {"events": events, "before": before, "limit": limit,
                "older_before": events[-1]["id"] if more else None,      # the next page's ?before=
                "kept": ring.maxlen, "oldest_id": ring[0]["id"] if ring else None,
                "last_id": self.broker.journal.last_id}

    def producer_row(self, tp, producer_id, entry, meta):
        """One producer a partition remembers; "hanging": an open transaction
        here that no running transaction of its producer includes (KIP-664)."""
        open_here = meta is not None and meta.state in RUNNING and tp in meta.partitions
        return {"topic": tp[0], "partition": tp[1], "producer_id": producer_id,
                "producer_epoch": entry.epoch, "transactional_id": self.txn_id(meta),
                "last_sequence": entry.last_seq, "last_timestamp": entry.last_timestamp,
                "coordinator_epoch": entry.coordinator_epoch,
                "current_txn_start_offset": entry.txn_first_offset,
                "hanging": entry.txn_first_offset >= 0 and not open_here}

    def partition_rows(self, by_producer):
        """Every partition's offsets, those whose LSO is held back first; not
        the internal topics' (doze keeps their state in meta.db: they stay empty)."""
        b = self.broker
        rows = []
        for (topic, p), plog in b.logs.logs.items():
            if topic in INTERNAL_TOPICS or not self.viewer.topic(topic):
                continue
            lso = b.producer_states.last_stable_offset(plog)
            held = None
            if lso < plog.high_watermark:
                table = b.producer_states.get((topic, p))
                holder = next((pid for pid, e in table.producers.items() if e.txn_first_offset == lso), None)
                meta = by_producer.get(holder)
                readable = self.viewer.topic(topic, Op.READ)        # producers: as DescribeProducers
                held = {"producer_id": holder if readable else None, "since_offset": lso,
                        "transactional_id": self.txn_id(meta),
                        "producer_epoch": table.producers[holder].epoch if holder is not None and readable else None}
            rows.append({"topic": topic, "partition": p, "log_start_offset": plog.log_start_offset,
                         "last_stable_offset": lso, "high_watermark": plog.high_watermark, "held_back_by": held,
                         "offline": plog.offline})          # why its disk failed it, or None
        rows.sort(key=lambda r: (r["offline"] is None, r["held_back_by"] is None, r["topic"], r["partition"]))
        return rows

    def shown_counts(self, topic):
        """The counts the viewer may see of a topic's partitions: records and
        markers with READ on it (they tell what a fetch would), bytes and
        segments with DESCRIBE on the cluster (as DescribeLogDirs)."""
        return (("records", "markers") if self.viewer.topic(topic, Op.READ) else ()) + \
            (("bytes", "segments") if self.viewer.cluster() else ())

    def counts(self, plog):
        """A partition's counts, those shown_counts allows (the others left out)."""
        shown = self.shown_counts(plog.topic)
        out = self.counter.counts(plog, self.deadline) if "records" in shown else {}
        if "bytes" in shown:
            out.update(bytes=sum(seg.size for seg in plog.segments), segments=len(plog.segments))
        return out

    def txn_id(self, meta):
        """A producer's transactional id, if there is one and the viewer may describe it."""
        return meta.transactional_id if meta is not None and self.viewer.txn(meta.transactional_id) else None

    def topics(self):
        b = self.broker
        rows = []
        for name in sorted(n for n in b.logs.topics if self.viewer.topic(n)):
            logs = [b.logs.logs[(name, p)] for p in range(b.logs.topics[name].partitions)
                    if (name, p) in b.logs.logs]
            counts = [self.counts(plog) for plog in logs]
            rows.append({"name": name, "partitions": b.logs.topics[name].partitions,
                         "internal": name in INTERNAL_TOPICS,
                         "offsets": sum(plog.high_watermark - plog.log_start_offset for plog in logs),
                         **{k: None if any(c[k] is None for c in counts) else sum(c[k] for c in counts)
                            for k in self.shown_counts(name) if k != "segments"},
                         "open_transactions": sum(b.producer_states.last_stable_offset(plog) < plog.high_watermark for plog in logs)})
        rows, total = cut(rows)
        return {"topics": rows, "topics_total": total}

    def topic(self, name):
        b = self.broker
        meta = b.logs.topics.get(name)
        if meta is None:
            return None
        parts, total = cut([b.logs.logs[(name, p)] for p in range(meta.partitions) if (name, p) in b.logs.logs])
        ctx = RequestContext(b.rooms, None, ApiKey.DESCRIBE_CONFIGS, 4, "doze-console")   # as kafka-configs asks
        configs = [{"name": e.name, "value": e.value, "source": CONFIG_SOURCE_NAMES.get(e.config_source)}
                   for e in topic_config_entries(ctx, name, None, False)] \
            if self.viewer.topic(name, Op.DESCRIBE_CONFIGS) else None
        return {"name": name, "topic_id": kafka_uuid(meta.topic_id), "internal": name in INTERNAL_TOPICS,
                "partitions": [{"partition": plog.partition, "log_start_offset": plog.log_start_offset,
                                "last_stable_offset": b.producer_states.last_stable_offset(plog), "high_watermark": plog.high_watermark,
                                **self.counts(plog)}
                               for plog in parts],
                "partitions_total": total, "configs": configs,
                "compaction": [self.compaction(plog) for plog in parts]
                if "compact" in b.logs.topic_config(name, "cleanup.policy") else None}

    def compaction(self, plog):
        """A compacted partition: its dirty section and ratio now, and the cleaner's last pass."""
        cleaner, now = self.broker.cleaner, int(self.broker.config.clock() * 1000)
        first_dirty, upper, ratio, overdue = cleaner.cleanable(plog, now)
        return {"partition": plog.partition, "first_dirty_offset": first_dirty, "first_uncleanable_offset": upper,
                "dirty_ratio": round(ratio, 3), "overdue": overdue,
                "last_run": cleaner.last_runs.get(plog)}

    def apis(self):                          # the versions served now: transaction.version decides some
        level = self.broker.txns.features.transaction_version
        return {"apis": [{"api_key": key, "name": spec.name, "min_version": spec.min_served,
                          "max_version": spec.advertised_max(level),
                          "flexible_from": next((v for v in range(spec.min_served, spec.max_version + 1)
                                                 if spec.flexible(v)), None)}
                         for key, (spec, _) in sorted(HANDLERS.items())], "transaction_version": level}

    def security(self):
        """The listeners' protocols and mechanisms; with DESCRIBE on the cluster
        (what DescribeAcls and DescribeUserScramCredentials ask) the ACLs and
        the SCRAM users (names, mechanisms, iterations: never a key)."""
        if not self.viewer.cluster():
            return {"allowed": False}
        b = self.broker
        a = b.authorizer
        listeners = [{"name": x.listener.name, "protocol": x.listener.protocol, "port": x.listener.port,
                      "sasl_mechanisms": list(x.sasl[0]) if x.sasl else [],
                      "plain_users": len(x.sasl[1]) if x.sasl and "PLAIN" in x.sasl[0] else 0}
                     for x in b.listeners.bound]
        out = {"authorizer": None if a is None else STANDARD_AUTHORIZER, "listeners": listeners, "allowed": True}
        if a is not None:
            out["allow_everyone_if_no_acl_found"] = a.allow_if_no_acl
        acls, total = cut([{"resource_type": ResourceType(x.resource_type).name, "name": x.name,
                            "pattern_type": PatternType(x.pattern).name, "principal": x.principal, "host": x.host,
                            "operation": AclOperation(x.operation).name,
                            "permission": AclPermission(x.permission).name}
                           for acls in (a.by_type.values() if a is not None else ()) for x in acls])
        users, users_total = cut([{"user": u, "mechanisms": [{"mechanism": m, "iterations": i} for m, i in creds]}
                                  for u, creds in b.store.scram_users().items()])
        return {**out, "super_users": sorted(a.super_users) if a is not None else [],
                "acls": acls, "acls_total": total, "scram_users": users, "scram_users_total": users_total}


# --- The pages: data as HTML ------------------------------------------------------

def page_cluster(d):
    b = d["broker"]
    facts = tag("dl", [tag("dt", "Broker"), tag("dd", f"node {b['node_id']} \u00b7 {b['host']}:{b['port']}"),
                       tag("dt", "Cluster id"), tag("dd", tag("code", b["cluster_id"])),
                       tag("dt", "Data"), tag("dd", tag("code", b["data_dir"]) if b["data_dir"] else
                                              "(needs DESCRIBE_CONFIGS on the cluster)"),
                       tag("dt", "Groups"), tag("dd", ", ".join(f"{n} {s}" for s, n in d["groups"].items())
                                                 or "none")], class_="facts")
    txns = table("Transactional ids", ["Transactional id", "State", "Producer", "Epoch", "Partitions",
                                       "Pending offsets", "Age", "Timeout"], [
        [link(r["transactional_id"], "txn", id=r["transactional_id"]), state_badge(r["transaction_state"]),
         r["producer_id"], r["producer_epoch"],
         ", ".join(f"{p['topic']}-{p['partition']}" for p in r["partitions"]) or "\u2014",
         r["pending_offsets"],
         tag("span", [age_text(r["age_ms"]), " past its timeout"], class_="hang") if r["hanging"]
         else age_text(r["age_ms"]),
         age_text(r["transaction_timeout_ms"])] for r in d["transactions"]],
        d["transactions_total"], numeric={"Producer", "Epoch", "Pending offsets", "Age", "Timeout"})
    producers = table("Producers by partition", ["Partition", "Producer", "Epoch", "Transactional id",
                                                 "Last sequence", "Last timestamp", "Open transaction from"], [
        [f"{r['topic']}-{r['partition']}", r["producer_id"], r["producer_epoch"],
         r["transactional_id"] if r["transactional_id"] is not None else tag("span", "(idempotent)", class_="muted"),
         r["last_sequence"], time_text(r["last_timestamp"]),
         ("\u2014" if r["current_txn_start_offset"] < 0 else
          tag("span", [str(r["current_txn_start_offset"]), " (hanging)"], class_="hang") if r["hanging"]
          else r["current_txn_start_offset"])] for r in d["producers"]],
        d["producers_total"], numeric={"Producer", "Epoch", "Last sequence", "Open transaction from"})
    parts = table("Stable and visible offsets (LSO and high watermark)",
                  ["Partition", "Log start", "LSO", "High watermark", "Held back by"], [
        [link(f"{r['topic']}-{r['partition']}", "topics", r["topic"]), r["log_start_offset"],
         r["last_stable_offset"], r["high_watermark"],
         tag("span", f"offline: {r['offline']}", class_="hang") if r["offline"] else held_text(r["held_back_by"])]
        for r in d["partitions"]],
        d["partitions_total"], numeric={"Log start", "LSO", "High watermark"})
    feed = tag("section", [events_table(d["recent_events"], f"Recent events, newest first (the last "
                                                            f"{CONSOLE_FEED_EVENTS})"),
                           tag("p", link("All events", "events"), class_="more")])
    return console_layout("Cluster", "Cluster", [facts, tag("section", txns), tag("section", producers),
                                                  tag("section", parts), feed], "/", "/api/cluster", d.get("viewer"))


def events_table(events, caption):
    """Journal events: their id (the order, when two share a millisecond), time to the millisecond, what."""
    rows = [[f"#{e['id']}", time_text(e["at_ms"], clock=True), e["kind"], event_subject(e), event_text(e)]
            for e in events]
    return table(caption, ["#", "Time", "Kind", "Of", "What"], rows)


def event_subject(e):
    tid, gid = e.get("transactional_id"), e.get("group_id")
    return link(tid, "txn", id=tid) if tid is not None else link(gid, "group", id=gid) if gid is not None else ""


def page_events(d):
    older = [link("Older", "events", before=d["older_before"])] if d["older_before"] is not None else []
    pager = tag("nav", tag("ul", [tag("li", a) for a in [link("Newest", "events")] + older]),
                aria_label="Pages of events", class_="pager")
    what = "newest first" if d["before"] is None else f"newest first, before #{d['before']}"
    note = tag("p", f"The journal keeps the last {d['kept']} events, in memory (a restart starts it anew).",
               class_="note")
    return console_layout("Events", "Events", [tag("section", [events_table(d["events"], f"Events, {what}"), pager]),
                                               note], None, console_path("api", "events", before=d["before"]),
                          d.get("viewer"))


# The transaction state machine, drawn: each state a box where the layout
# puts it (its centre), each transition Kafka allows (VALID_PREVIOUS) a path
# routed so that few cross -- commit on top, abort below, the way back to
# Empty, Ongoing and Dead around the outside. SVG attributes and the
# stylesheet's classes only: the CSP refuses style attributes.
MACHINE_BOX = (160, 36)
MACHINE_STATES = {"Empty": (135, 175), "Ongoing": (330, 175), "PrepareCommit": (525, 80),
                  "CompleteCommit": (720, 80), "PrepareEpochFence": (525, 175), "PrepareAbort": (525, 270),
                  "CompleteAbort": (720, 270), "Dead": (135, 270)}
MACHINE_EDGES = {
    ("Empty", "Empty"): "M115,157 C105,120 165,120 155,157",
    ("Empty", "Ongoing"): "M215,175 H250",
    ("Empty", "Dead"): "M135,193 V252",
    ("Ongoing", "Ongoing"): "M360,157 C350,120 410,120 400,157",
    ("Ongoing", "PrepareCommit"): "M410,166 L445,90",
    ("Ongoing", "PrepareEpochFence"): "M410,175 H445",
    ("Ongoing", "PrepareAbort"): "M410,184 L445,260",
    ("PrepareEpochFence", "PrepareAbort"): "M525,193 V252",
    ("PrepareCommit", "CompleteCommit"): "M605,80 H640",
    ("PrepareAbort", "CompleteAbort"): "M605,270 H640",
    ("Empty", "PrepareAbort"): "M215,186 L445,266",           # version 2: an abort with nothing open
    ("CompleteAbort", "PrepareAbort"): "M640,282 H605",
    ("CompleteCommit", "PrepareAbort"): "M650,98 L600,252",
    ("CompleteCommit", "Ongoing"): "M660,62 V44 H315 V157",
    ("CompleteCommit", "Empty"): "M700,62 V28 H34 V165 H55",
    ("CompleteCommit", "Dead"): "M740,62 V12 H18 V270 H55",
    ("CompleteAbort", "Ongoing"): "M660,288 V306 H315 V193",
    ("CompleteAbort", "Empty"): "M700,288 V322 H232 V210 H175 V193",
    ("CompleteAbort", "Dead"): "M740,288 V338 H135 V288",
}


def machine_svg(d):
    """The state machine as inline SVG: the current state lit (aria-current),
    the states and transitions of its recent history marked."""
    now = d["transaction_state"]
    taken = {(t["from"], t["to"]): t["times"] for t in d["transitions_taken"]}
    seen = {state for pair in taken for state in pair}
    heads = tag("defs", [tag("marker", tag("path", d="M0,0 L10,5 L0,10 z", class_=f"head {kind}"), id=f"arrow-{kind}",
                             viewBox="0 0 10 10", refX="9", refY="5", markerWidth="9", markerHeight="9", orient="auto",
                             markerUnits="userSpaceOnUse")
                         for kind in ("all", "taken")])
    edges = [tag("path", tag("title", f"{a} \u2192 {b}" + (f": {taken[(a, b)]}\u00d7 in its recent history"
                                                          if (a, b) in taken else "")),
                 d=path, class_="edge taken" if (a, b) in taken else "edge",
                 marker_end=f"url(#arrow-{'taken' if (a, b) in taken else 'all'})")
             for (a, b), path in sorted(MACHINE_EDGES.items(), key=lambda item: item[0] in taken)]
    w, h = MACHINE_BOX
    boxes = [tag("g", [tag("title", state + (" (now)" if state == now else "")),
                       tag("rect", x=str(x - w // 2), y=str(y - h // 2), width=str(w), height=str(h), rx="6"),
                       tag("text", f"{STATE_SYMBOLS.get(state, '')} {state}", x=str(x), y=str(y))],
                 class_="state-box now" if state == now else "state-box seen" if state in seen else "state-box",
                 data_state=state, aria_current="step" if state == now else None)
             for state, (x, y) in MACHINE_STATES.items()]
    return tag("svg", [heads] + edges + boxes, viewBox="0 0 820 350", class_="machine", role="img",
               aria_label=f"The transaction state machine, now in {now}")


def version_text(d):              # which transaction version began and ended it
    began, ended = (("version 2 (KIP-890: a new epoch at each end)" if v == 2 else "version 1 (classic)")
                    for v in (d["begun_version"], d["ended_version"]))
    return f"began with {began}" + (f", ended with {ended}" if ended != began and d["transaction_state"]
                                    not in ("Empty", "Ongoing") else "")


def epoch_cell(e):               # a step's epoch; where the step moved it, from where (and which id)
    was = e.get("was")
    if not was:
        return e.get("producer_epoch")
    return f"{was[1]} \u2192 {e['producer_epoch']}" + (f" (id {e['producer_id']})" if was[0] != e["producer_id"] else "")


def page_txn(d):
    facts = tag("dl", [tag("dt", "State"), tag("dd", state_badge(d["transaction_state"])),
                       tag("dt", "Producer"), tag("dd", f"id {d['producer_id']}, epoch {d['producer_epoch']}"),
                       tag("dt", "Protocol"), tag("dd", version_text(d)),
                       tag("dt", "Timeout"), tag("dd", age_text(d["transaction_timeout_ms"])),
                       tag("dt", "Started"), tag("dd", time_text(d["transaction_start_time_ms"])),
                       tag("dt", "Last change"), tag("dd", time_text(d["last_update_ms"]))]
                + ([tag("dt", "Coordinator"), tag("dd", tag("code", d["coordinator"]))] if d.get("coordinator")
                   else []), class_="facts")
    machine = [machine_svg(d), tag("p", ["Now ", state_badge(d["transaction_state"]), ": lit. Marked: the states "
                                         "and transitions of its steps below. Each arrow is a transition Kafka "
                                         "allows."], class_="note")]
    timeline = table("Its steps, oldest first: transitions and the markers written (times to the millisecond; "
                     "steps in the same millisecond keep the journal's order)",
                     ["#", "Time", "Since the step before", "Step", "Cause", "Epoch"], [
        [f"#{e['id']}", time_text(e["at_ms"], clock=True), elapsed_text(e["elapsed_ms"]), step_text(e),
         e.get("cause") or ("restart" if e["kind"] == "txn" else "\u2014"), epoch_cell(e)]
        for e in d["timeline"]], numeric={"Since the step before", "Epoch"})
    written = {(m["topic"], m["partition"]): m["offset"] for m in d["markers_written"]}
    now_parts = table("Partitions of the open transaction", ["Partition", "Marker"], [
        [f"{p['topic']}-{p['partition']}", marker_cell(written, p)] for p in d["partitions"]])
    staged = table("Offsets staged for its groups (committed with it)", ["Group", "Partition", "Offset"], [
        [o["group"], f"{o['topic']}-{o['partition']}", o["offset"]] for o in d["pending_offsets"]],
        numeric={"Offset"})
    sections = [facts, tag("section", [tag("h2", "State machine"), machine]), tag("section", timeline),
                tag("section", now_parts), tag("section", staged)]
    last = d["last_decision"]
    if last is not None:
        word = "COMMIT" if last["committed"] else "ABORT"
        sections.append(tag("section", [
            table([f"Its last decision: {word}, ", time_text(last["at_ms"])], ["Partition", "Marker offset"],
                  [[link(f"{m['topic']}-{m['partition']}", "topics", m["topic"]),
                    stand_in_text({"control": word, **m}) if m["offset"] is None else m["offset"]]
                   for m in last["markers"]], numeric={"Marker offset"}),
            table("Offsets it committed" if last["committed"] else "Offsets it dropped",
                  ["Group", "Partition", "Offset"],
                  [[o["group"], f"{o['topic']}-{o['partition']}", o["offset"]] for o in last["offsets"]],
                  numeric={"Offset"})]))
    return console_layout(d["transactional_id"], ["Transaction ", tag("code", d["transactional_id"])], sections,
                          None, console_path("api", "txn", id=d["transactional_id"]), d.get("viewer"))


def step_text(e):
    """A timeline step: a transition (from -> to, the new state's badge) or a marker."""
    if e["kind"] == "txn":
        return Html(esc(e["from_state"]) + " \u2192 " + state_badge(e["to_state"]))
    return event_text(e)


def marker_cell(written, p):
    """The marker of one partition of a decided transaction: its offset, a stand-in, or none yet."""
    tp = (p["topic"], p["partition"])
    if tp not in written:
        return "\u2014"
    if written[tp] is None:
        return "no marker: a stand-in (the offsets are kept in meta.db)"
    return f"at offset {written[tp]}"


def held_text(held):
    if held is None:
        return "\u2014"
    who = held["transactional_id"]
    if held["producer_id"] is None:              # the viewer may not READ the topic: no producer shown
        name = link(who, "txn", id=who) if who is not None else esc("an open transaction")
        return Html(f"{name}, open since offset {held['since_offset']}")
    name = link(who, "txn", id=who) if who is not None else esc(f"producer {held['producer_id']}")
    return Html(f"{name} ({esc(producer_text(held))}), open since offset {held['since_offset']}")


def page_topics(d):
    rows = [[link(r["name"], "topics", r["name"]), r["partitions"], count_cell(r, "records"),
             count_cell(r, "markers"), count_cell(r, "bytes"), r["open_transactions"]] for r in d["topics"]]
    body = table("Topics", ["Topic", "Partitions", "Records", "Markers", "Bytes", "Partitions held back"], rows,
                 d["topics_total"], numeric={"Partitions", "Records", "Markers", "Bytes", "Partitions held back"})
    note = tag("p", "Records: from log start to the high watermark, transaction markers not counted "
                    "(each marker takes an offset too).", class_="note")
    return console_layout("Topics", "Topics", [tag("section", body), note], "/topics", "/api/topics", d.get("viewer"))


def page_topic(d):
    parts = table("Partitions", ["Partition", "Log start", "LSO", "High watermark", "Records", "Markers", "Bytes",
                                 "Segments"], [
        [link(str(r["partition"]), "topics", d["name"], r["partition"]), r["log_start_offset"],
         r["last_stable_offset"], r["high_watermark"], count_cell(r, "records"), count_cell(r, "markers"),
         count_cell(r, "bytes"), count_cell(r, "segments")] for r in d["partitions"]],
        d["partitions_total"],
        numeric={"Log start", "LSO", "High watermark", "Records", "Markers", "Bytes", "Segments"})
    configs = tag("p", "Its configs need DESCRIBE_CONFIGS on the topic.", class_="note") \
        if d["configs"] is None else table("Configs", ["Name", "Value", "Source"],
                                           [[tag("code", c["name"]), c["value"], c["source"]] for c in d["configs"]])
    facts = tag("dl", [tag("dt", "Topic id"), tag("dd", tag("code", d["topic_id"])),
                       tag("dt", "Internal"), tag("dd", "yes" if d["internal"] else "no")], class_="facts")
    compaction = [] if d["compaction"] is None else [tag("section", table(
        "Compaction: the dirty section (cleaned when its share passes min.cleanable.dirty.ratio) and the "
        "cleaner's last pass", ["Partition", "Dirty section", "Dirty ratio", "Last pass", "Bytes", "Records removed"],
        [[c["partition"], f"{c['first_dirty_offset']}\u2013{c['first_uncleanable_offset']}", c["dirty_ratio"]]
         + ([time_text(r["at_ms"]), f"{r['bytes_before']} \u2192 {r['bytes_after']}", r["records_removed"]]
            if (r := c["last_run"]) else ["never", "\u2014", "\u2014"]) for c in d["compaction"]],
        numeric={"Dirty ratio", "Records removed"}))]
    return console_layout(d["name"], f"Topic {d['name']}", [facts, tag("section", parts)] + compaction
                          + [tag("section", configs)],
                          "/topics", console_path("api", "topics", d["name"]), d.get("viewer"))


def count_cell(row, key):
    """A count: "counting…" while not counted yet, a dash where the viewer may not see it."""
    if key not in row:
        return tag("span", "\u2014", class_="muted", title="needs more permissions")
    return tag("span", "counting\u2026", class_="muted") if row[key] is None else row[key]


def to_read_cell(row):
    """Records still to read: a count, "at least" one where counting stopped, a dash without READ."""
    n = row["records_to_read"]
    if n is None:
        return tag("span", "\u2014", class_="muted", title="needs READ on the topic")
    return n if row["records_to_read_complete"] else tag(
        "span", f"at least {n}", title=f"the console reads at most {CONSOLE_LAG_BATCHES} batch headers a "
                                       f"partition, {CONSOLE_LAG_PAGE_BATCHES} a page")


LAG_NOTE = ("Offsets behind: the high watermark less the committed offset, the lag Kafka's tools print; "
            "transaction markers and aborted records take offsets too. Records to read: the records a "
            "read_committed consumer still gets, up to the LSO (markers and aborted records left out).")


def page_groups(d):
    body = table("Consumer groups", ["Group", "State", "Protocol", "Generation", "Members",
                                     "Partitions committed", "Offsets behind", "Records to read"], [
        [link(r["group_id"], "group", id=r["group_id"]), r["group_state"],
         f"{r['protocol_type'] or chr(0x2014)} / {r['protocol'] or chr(0x2014)}", r["generation_id"], r["members"],
         r["committed_partitions"], r["lag"], to_read_cell(r)] for r in d["groups"]], d["groups_total"],
        numeric={"Generation", "Members", "Partitions committed", "Offsets behind", "Records to read"})
    return console_layout("Groups", "Consumer groups", [tag("section", body), tag("p", LAG_NOTE, class_="note")],
                          "/groups", "/api/groups", d.get("viewer"))


def page_group(d):
    modern = "group_epoch" in d                 # KIP-848: epochs, and each member's way to its target
    facts = tag("dl", [tag("dt", "State"), tag("dd", d["group_state"]),
                       tag("dt", "Protocol"), tag("dd", f"{d['protocol_type']} / {d['protocol']}"),
                       tag("dt", "Group epoch, assignment epoch" if modern else "Generation"),
                       tag("dd", f"{d['group_epoch']}, {d['assignment_epoch']}" if modern else str(d["generation_id"])),
                       tag("dt", "Leader"), tag("dd", d["leader"] or "\u2014")], class_="facts")

    def rows(assignment):
        return "\u2014" if assignment is None else "; ".join(f"{a['topic']} {a['partitions']}" for a in assignment) or "none"
    extra = ["Epoch", "Step", "Revoking", "Target"] if modern else []
    members = table("Members", ["Member", "Instance", "Client id", "Host", "Assignment"] + extra, [
        [m["member_id"], m["group_instance_id"] or "\u2014", m["client_id"], m["client_host"], rows(m["assignment"])]
        + ([m["member_epoch"], f"{m['step']} ({m['protocol']} protocol)", rows(m["revoking"]), rows(m["target"])]
           if modern else []) for m in d["members"]], numeric={"Epoch"})
    offsets = table("Committed offsets", ["Partition", "Committed", "Offsets behind", "Offsets behind the LSO",
                                          "Records to read", "Metadata"], [
        [link(f"{o['topic']}-{o['partition']}", "topics", o["topic"], o["partition"], offset=o["committed_offset"]),
         o["committed_offset"], o["lag"], o["lag_to_lso"], to_read_cell(o), o["metadata"] or ""]
        for o in d["offsets"]], d["offsets_total"],
        numeric={"Committed", "Offsets behind", "Offsets behind the LSO", "Records to read"})
    pending = table("Offsets open transactions have staged (committed with them)",
                    ["Transactional id", "Partition", "Offset"], [
        [link(p["transactional_id"], "txn", id=p["transactional_id"]), f"{p['topic']}-{p['partition']}",
         p["offset"]] for p in d["pending_offsets"]], numeric={"Offset"})
    return console_layout(d["group_id"], ["Group ", tag("code", d["group_id"])],
                          [facts, tag("section", members), tag("section", [offsets, tag("p", LAG_NOTE, class_="note")]),
                           tag("section", pending)],
                          "/groups", console_path("api", "group", id=d["group_id"]), d.get("viewer"))


def page_apis(d):
    body = table("APIs served", ["API", "Key", "Versions", "Flexible from"], [
        [r["name"], r["api_key"], f"{r['min_version']}\u2013{r['max_version']}",
         "\u2014" if r["flexible_from"] is None else r["flexible_from"]] for r in d["apis"]],
        numeric={"Key", "Flexible from"})
    return console_layout("APIs", "APIs", tag("section", body), "/apis", "/api/apis", d.get("viewer"))


def page_security(d):
    if not d["allowed"]:
        return console_layout("Security", "ACLs and users", tag("p", "The listeners, ACLs and users need "
                                                                     "DESCRIBE on the cluster.", class_="note"),
                              "/security", "/api/security", d.get("viewer"))
    listeners = table("Listeners", ["Listener", "Protocol", "Port", "SASL mechanisms", "PLAIN users"], [
        [x["name"], x["protocol"], x["port"], ", ".join(x["sasl_mechanisms"]) or "\u2014", x["plain_users"]]
        for x in d["listeners"]], numeric={"Port", "PLAIN users"})
    facts = tag("dl", [tag("dt", "Authorizer"), tag("dd", tag("code", d["authorizer"]) if d["authorizer"] else
                                                   "none: every principal may do everything"),
                       tag("dt", "Super users"), tag("dd", ", ".join(d["super_users"]) or "\u2014")]
                + ([tag("dt", "No ACL found"), tag("dd", "allowed" if d["allow_everyone_if_no_acl_found"]
                                                         else "denied")] if d["authorizer"] else []), class_="facts")
    acls = table("ACLs", ["Principal", "Host", "Permission", "Operation", "Resource", "Name", "Pattern"], [
        [a["principal"], a["host"], a["permission"], a["operation"], a["resource_type"], a["name"],
         a["pattern_type"]] for a in d["acls"]], d["acls_total"])
    users = table("SCRAM users", ["User", "Mechanisms (iterations)"], [
        [u["user"], ", ".join(f"{m['mechanism']} ({m['iterations']})" for m in u["mechanisms"])]
        for u in d["scram_users"]], d["scram_users_total"])
    return console_layout("Security", "ACLs and users", [facts, tag("section", listeners), tag("section", acls),
                                                         tag("section", users)],
                          "/security", "/api/security", d.get("viewer"))


def page_login(d):
    """The login form (a POST to /login; the answer sets the session cookie)."""
    failed = [tag("p", "Invalid user name or password.", class_="error", role="alert")] \
        if d["failed"] is not None else []
    form = tag("form", [
        tag("label", "User", for_="user"),
        tag("input", id="user", name="user", autocomplete="username", required="required",
            value=d["failed"] or None, autofocus="autofocus"),
        tag("label", "Password", for_="password"),
        tag("input", id="password", name="password", type="password", autocomplete="current-password",
            required="required"),
        tag("input", type="hidden", name="next", value=d["next"]),
        tag("button", "Log in", type="submit")], method="post", action="/login", class_="login")
    note = tag("p", "A user of this broker's SASL listeners: its PLAIN users or SCRAM credentials. "
                    "The console then shows what that user's ACLs let it see.", class_="note")
    return console_layout("Log in", "Log in", failed + [form, note], None, None, script=False)


def page_message(title, text, viewer=None):
    """An error page: the usual header (who is logged in), the reason, no JSON twin."""
    return console_layout(title, title, tag("p", text), None, None, viewer)


def value_cell(item, prefix, fmt):
    """A key or value as the page shows it: text, pretty JSON or hex (what is
    not UTF-8 is hex in any format); long ones cut at CONSOLE_VALUE_CHARS."""
    b64 = item.get(f"{prefix}_b64")
    if b64 is None:
        return tag("span", "null", class_="muted")
    text = item.get(f"{prefix}_text")
    if fmt == "json" and text is not None:
        try:
            text = json.dumps(json.loads(text), indent=1, ensure_ascii=False)
        except (ValueError, RecursionError):
            pass
    if fmt == "hex" or text is None:
        text = base64.b64decode(b64).hex(" ")
    if len(text) > CONSOLE_VALUE_CHARS:
        return Html(esc(text[:CONSOLE_VALUE_CHARS]) + tag("span", f" \u2026 ({len(text)} characters)",
                                                           class_="muted"))
    return tag("pre", text) if fmt == "json" and "\n" in text else text


CONSOLE_VALUE_CHARS = 2000
STATUS_TEXT = {"aborted": "ABORTED", "pending": "PENDING (open)", "committed": "committed", None: "\u2014"}


def page_records(d):
    where = f"{d['topic']}-{d['partition']}"
    cols = ["Offset", "Time", "Key", "Value", "Headers", "Producer", "Transaction"]
    rows = []
    for item in d["items"]:
        if item["kind"] == "record":
            headers = ", ".join(f"{h.get('key_text', '?')}={h.get('value_text', h.get('value_b64'))}"
                                for h in item["headers"]) or "\u2014"
            producer = "\u2014" if item["producer_id"] < 0 else \
                f"{item['producer_id']}/{item['producer_epoch']} seq {item['sequence']}"
            rows.append(tag("tr", [tag("th", str(item["offset"]), scope="row", class_="num"),
                                   tag("td", time_text(item["timestamp"])),
                                   tag("td", tag("div", value_cell(item, "key", d["format"]), class_="value")),
                                   tag("td", tag("div", value_cell(item, "value", d["format"]), class_="value")),
                                   tag("td", headers), tag("td", producer),
                                   tag("td", STATUS_TEXT[item["txn_status"]])],
                            class_=item["txn_status"]))
        else:
            rows.append(tag("tr", tag("th", divider_text(item), scope="row", colspan=str(len(cols))),
                            class_=item["kind"] if item["kind"] != "line" else f"line {item['name']}"))
    if not rows:
        rows.append(tag("tr", tag("td", "no records here", colspan=str(len(cols)), class_="empty")))
    head = tag("tr", [tag("th", c, scope="col") for c in cols])
    records = tag("div", tag("table", [tag("caption", f"{where}, {VIEW_TEXT[d['view']]}, from offset {d['from']}"),
                                       tag("thead", head), tag("tbody", rows)], class_="records"), class_="wide")
    facts = tag("dl", [tag("dt", "Log start"), tag("dd", str(d["log_start_offset"])),
                       tag("dt", tag("abbr", "LSO", title="last stable offset")),
                       tag("dd", str(d["last_stable_offset"])),
                       tag("dt", tag("abbr", "HW", title="high watermark")), tag("dd", str(d["high_watermark"]))],
                 class_="facts")
    return console_layout(f"{where} \u00b7 Browser", ["Browse ", link(d["topic"], "topics", d["topic"]),
                                                      f"-{d['partition']}"],
                          [facts, browser_form(d), tag("section", [records, browser_pages(d)])], "/topics",
                          console_path("api", "topics", d["topic"], d["partition"], **d["query"]), d.get("viewer"))


VIEW_TEXT = {"log": "the log as stored", "uncommitted": "what a read_uncommitted consumer gets",
             "committed": "what a read_committed consumer gets"}


def divider_text(item):
    if item["kind"] == "marker":
        return f"\u2014 {item['control']} by {producer_text(item)}, at offset {item['offset']} \u2014"
    if item["kind"] == "batch":
        return (f"offsets {item['offset']}\u2013{item['last_offset']}: a {item['compression']} batch of "
                f"{item['records_count']} records the console cannot show ({item['note']})")
    if item["name"] == "LSO":
        return (f"LSO {item['offset']}: a read_committed consumer stops here until the transaction "
                f"open at this offset ends")
    return f"HW {item['offset']}: the end of what is durable and visible"


def browser_form(d):
    """The position and view, as a GET form (no script needed). A time given
    is UTC: a page cannot learn the browser's zone without a script
    (?timestamp=MS in the URL is taken too)."""
    def choice(name, value, label, current):
        return tag("label", [tag("input", type="radio", name=name, value=value,
                                 checked="checked" if value == current else None), f" {label} "])
    return tag("form", [
        tag("label", ["Offset ", tag("input", name="offset", type="number", min="0", value=str(d["from"]))]), " ",
        tag("label", ["or from a time, UTC ", tag("input", name="time", type="datetime-local", step="0.001")]), " ",
        tag("fieldset", [tag("legend", "View")] + [choice("view", v, v, d["view"]) for v in BROWSER_VIEWS]),
        tag("fieldset", [tag("legend", "Values as")] + [choice("format", f, f, d["format"])
                                                        for f in ("text", "json", "hex")]),
        tag("button", "Show", type="submit")], method="get", class_="browse")


def browser_pages(d):
    seg = ("topics", d["topic"], d["partition"])
    keep = {"view": d["view"], "format": d["format"]}
    links = [link("First", *seg, offset=d["log_start_offset"], **keep),
             link("Previous", *seg, offset=max(d["log_start_offset"], d["from"] - d["limit"]), **keep)]
    if d["next_offset"] is not None:
        links.append(link("Next", *seg, offset=d["next_offset"], **keep))
    links.append(link("End", *seg, at="end", **keep))
    return tag("nav", tag("ul", [tag("li", a) for a in links]), aria_label="Pages of records", class_="pager")


###############################################################################
# 20. CONSOLE: HTTP, LOGIN AND ITS LISTENER -- one request a connection, on the loop
###############################################################################
# The console's sockets: its stylesheet and script, each HTTP connection (one
# request, then closed), its login against the broker's own SASL users, and
# the listener that accepts them -- on the broker's loop, with one timer of
# its own (Console._sweep). Its limits (§19 says why):

CONSOLE_MAX_CONNECTIONS = 32
CONSOLE_HEAD_MAX = 8192
CONSOLE_HEAD_TIMEOUT_S = 10.0
CONSOLE_SWEEP_S = 1.0
CONSOLE_MAX_STREAMS = 8               # event streams (one a browser tab)
CONSOLE_STREAM_BUFFER = 256 * 1024    # bytes a stream may have unread before it is let go
CONSOLE_HEARTBEAT_S = 15.0
CONSOLE_LINGER_S = 2.0                # an answered connection waits this long for its client to close
CONSOLE_BODY_MAX = 4096               # a POST's body (the login form)
CONSOLE_SESSION_IDLE_S = 3600.0       # a login lasts while used, up to
CONSOLE_SESSION_MAX_S = 12 * 3600.0
CONSOLE_MAX_SESSIONS = 256            # past it, the least recently used session ends
CONSOLE_LOGIN_FAILURES = 5            # failed logins from one address within CONSOLE_LOGIN_WINDOW_S: then wait
CONSOLE_LOGIN_WINDOW_S = 60.0
CONSOLE_LOGIN_CHECKS_PER_S = 4        # password checks a second, all addresses (each may be a PBKDF2)
CONSOLE_HEADERS = (
    ("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; "
     "img-src 'self' data:; connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"),
    ("X-Content-Type-Options", "nosniff"),
    ("Referrer-Policy", "same-origin"),       # (no-referrer would make a form's Origin "null")
    ("Cache-Control", "no-store"),
    ("Connection", "close"))
HTTP_REASONS = {200: "OK", 201: "Created", 202: "Accepted", 303: "See Other", 400: "Bad Request", 401: "Unauthorized", 403: "Forbidden",
                404: "Not Found", 405: "Method Not Allowed", 408: "Request Timeout", 411: "Length Required",
                413: "Content Too Large", 421: "Misdirected Request", 429: "Too Many Requests",
                431: "Request Header Fields Too Large", 500: "Internal Server Error", 503: "Service Unavailable"}

# --- Its stylesheet and script, served as files -----------------------------------
# The CSP lets no inline style or script run: the pages link these two. The
# stylesheet colours by class (the state machine's SVG too); the script only
# adds to a page that works without it -- live updates and local times.

CONSOLE_CSS = """\
:root { color-scheme: light dark; --fg: #1d1f21; --bg: #fdfdfd; --muted: #5f6368; --line: #d7dadc;
  --accent: #0b57d0; --warn: #8a4b00; --warn-bg: #fff3e0; }
@media (prefers-color-scheme: dark) { :root { --fg: #e6e6e6; --bg: #17181a; --muted: #a0a4a8;
  --line: #3a3d41; --accent: #8ab4f8; --warn: #ffcc80; --warn-bg: #3b2a12; } }
* { box-sizing: border-box; }
body { margin: 0; font: 15px/1.45 system-ui, sans-serif; color: var(--fg); background: var(--bg); }
header, main, footer { padding: 0.6rem 1rem; max-width: 80rem; margin: 0 auto; }
header { display: flex; flex-wrap: wrap; gap: 0.4rem 1.2rem; align-items: baseline; border-bottom: 1px solid var(--line); }
header .brand { font-weight: 600; }
nav ul { display: flex; gap: 1rem; list-style: none; margin: 0; padding: 0; }
a { color: var(--accent); }
a[aria-current="page"] { font-weight: 600; text-decoration: none; }
a:focus-visible { outline: 2px solid var(--accent); outline-offset: 2px; }
.skip { position: absolute; left: -100rem; }
header button { font: inherit; }
header form.who { margin-left: auto; }
form.login { display: grid; grid-template-columns: max-content 16rem; gap: 0.5rem 1rem; align-items: center; }
form.login button { grid-column: 2; justify-self: start; }
.error { color: var(--warn); background: var(--warn-bg); padding: 0.2rem 0.5rem; }
.live { position: absolute; left: -100rem; }
.skip:focus { left: 1rem; top: 0.5rem; }
h1 { font-size: 1.35rem; margin: 0.8rem 0 0.4rem; }
section { margin: 1.2rem 0; }
div.wide { overflow-x: auto; max-width: 100%; }
table { border-collapse: collapse; min-width: 50%; }
caption { text-align: left; font-weight: 600; padding: 0.3rem 0; }
th, td { text-align: left; padding: 0.2rem 0.7rem 0.2rem 0; border-bottom: 1px solid var(--line); vertical-align: top;
  overflow-wrap: normal; word-break: normal; hyphens: none; }
th[scope="row"] { font-weight: 500; }
.num { text-align: right; font-variant-numeric: tabular-nums; }
.empty, .note, footer, .muted { color: var(--muted); }
.hang { color: var(--warn); background: var(--warn-bg); padding: 0 0.3rem; }
h2 { font-size: 1.05rem; margin: 0.4rem 0; }
svg.machine { display: block; width: 100%; max-width: 52rem; height: auto; }
svg.machine rect { fill: var(--bg); stroke: var(--line); stroke-width: 1.5; }
svg.machine text { fill: var(--fg); font: 14px system-ui, sans-serif; text-anchor: middle; dominant-baseline: central; }
svg.machine .edge { fill: none; stroke: var(--muted); stroke-width: 1.2; }
svg.machine .edge.taken { stroke: var(--accent); stroke-width: 3; }
svg.machine .head { fill: var(--muted); }
svg.machine .head.taken { fill: var(--accent); }
svg.machine .seen rect { stroke: var(--accent); stroke-width: 2; }
svg.machine .now rect { fill: var(--accent); stroke: var(--accent); stroke-width: 3; }
svg.machine .now text { fill: var(--bg); font-weight: 600; }
table.records td { font-family: ui-monospace, monospace; font-size: 0.9em; }
table.records .value { width: max-content; max-width: 32rem; overflow-wrap: break-word; }
table.records pre { margin: 0; white-space: pre-wrap; }
tr.marker th { text-align: center; font-weight: 600; border-top: 2px solid var(--fg); border-bottom: 2px solid var(--fg); }
tr.batch th { text-align: left; font-weight: 400; color: var(--muted); }
tr.line th { text-align: left; color: var(--accent); border-bottom: 2px dashed var(--accent); }
tr.aborted td { text-decoration: line-through; color: var(--muted); }
tr.pending td { color: var(--warn); }
form.browse { display: flex; flex-wrap: wrap; gap: 0.5rem 1rem; align-items: end; }
form.browse fieldset { border: 1px solid var(--line); padding: 0.1rem 0.5rem; }
nav.pager ul { display: flex; gap: 1rem; list-style: none; padding: 0; }
code, .mono { font-family: ui-monospace, monospace; font-size: 0.92em; }
dl.facts { display: grid; grid-template-columns: max-content minmax(0, 1fr); gap: 0.1rem 1rem; }
dl.facts dt { color: var(--muted); }
dl.facts dd { margin: 0; min-width: 0; overflow-wrap: break-word; }
form.browse input { max-width: 100%; }
"""


CONSOLE_JS = """\
"use strict";
// doze-kafka console: live updates over one event stream, local times, Pause.
// Only same-origin requests; text goes in with textContent; the fresh page
// comes from the console itself (escaped there) through DOMParser.
(function () {
  var live = document.getElementById("live");
  var paused = false, pending = null, announced = 0;
  function pad(n, width) { n = String(n); while (n.length < (width || 2)) n = "0" + n; return n; }
  function zone(when) {            // the browser's zone, said: "UTC", "UTC+2", "UTC-3:30"
    var off = -when.getTimezoneOffset(), a = Math.abs(off);
    return off ? "UTC" + (off < 0 ? "-" : "+") + Math.floor(a / 60) + (a % 60 ? ":" + pad(a % 60) : "") : "UTC";
  }
  function localTimes(root) {      // to the millisecond, as the page has them, in the browser's zone
    var times = root.querySelectorAll("time[datetime]");
    for (var i = 0; i < times.length; i++) {
      var t = times[i], when = new Date(t.getAttribute("datetime"));
      if (isNaN(when.getTime()) || t.hasAttribute("data-local")) continue;
      var day = when.getFullYear() + "-" + pad(when.getMonth() + 1) + "-" + pad(when.getDate()) + " ";
      var clock = pad(when.getHours()) + ":" + pad(when.getMinutes()) + ":" + pad(when.getSeconds()) + "." +
        pad(when.getMilliseconds(), 3);
      if (!t.title) t.title = t.textContent;
      t.textContent = (t.classList.contains("clock") ? "" : day) + clock + " " + zone(when);
      t.setAttribute("data-local", "");
    }
  }
  function refresh() {
    if (paused || pending) return;
    pending = setTimeout(function () {
      fetch(location.href, {headers: {"Accept": "text/html"}, credentials: "same-origin"})
        .then(function (r) { return r.ok ? r.text() : null; })
        .then(function (text) {
          pending = null;
          if (text === null || paused) return;
          var fresh = new DOMParser().parseFromString(text, "text/html").getElementById("main");
          var old = document.getElementById("main");
          if (fresh && old) { old.replaceWith(document.importNode(fresh, true)); localTimes(document); }
          document.body.setAttribute("data-refreshed", String(Date.now()));
        })
        .catch(function () { pending = null; });
    }, 500);
  }
  function say(text) {
    var now = Date.now();
    if (live && now - announced > 3000) { live.textContent = text; announced = now; }
  }
  localTimes(document);
  if (!window.EventSource) return;
  var button = document.createElement("button");
  button.type = "button";
  button.textContent = "Pause live updates";
  button.setAttribute("aria-pressed", "false");
  button.addEventListener("click", function () {
    paused = !paused;
    button.textContent = paused ? "Resume live updates" : "Pause live updates";
    button.setAttribute("aria-pressed", String(paused));
    if (!paused) refresh();
  });
  document.querySelector("header").appendChild(button);
  var source = new EventSource("/events");
  source.addEventListener("open", function () { document.body.setAttribute("data-live", "open"); });
  source.addEventListener("txn", function (e) {
    var d = JSON.parse(e.data);
    say(d.transactional_id + ": " + d.from_state + " to " + d.to_state);
    refresh();
  });
  source.addEventListener("marker", refresh);
  source.addEventListener("offsets", refresh);
  source.addEventListener("group", refresh);
  source.addEventListener("reset", refresh);
})();
"""


# --- HTTP: one request a connection, on the loop ---------------------------------

class HttpConnection:
    """One console connection: read a request head, answer it, close -- or,
    for the event stream, keep writing events until the browser leaves."""

    def __init__(self, console, sock, ip):
        self.console, self.sock, self.ip = console, sock, ip
        self.head = bytearray()
        self.out = bytearray()              # bytes still to write
        self.answered = False
        self.lingering = False              # answered and half-closed: reading what is left, until EOF
        self.stream = False                 # an event stream: stays open
        self.viewer = None                  # ... and who watches it
        self.since = time.monotonic()
        self.closed = False
        console.broker.selector.register(sock, selectors.EVENT_READ, self)

    def become_stream(self, viewer):
        """This connection is an event stream from now on, for viewer (Console.open_stream)."""
        self.stream, self.viewer = True, viewer

    def on_event(self, mask):
        if mask & selectors.EVENT_READ:
            self._read()
        if mask & selectors.EVENT_WRITE and not self.closed:
            self._write()

    def _read(self):
        try:
            data = self.sock.recv(CONSOLE_HEAD_MAX + 4 + CONSOLE_BODY_MAX + 1 - len(self.head)
                                  if not self.answered else 4096)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as e:
            self.close(str(e))
            return
        if not data:
            self.close("client closed the connection")
        elif not self.answered:
            self.head += data
            self._take()

    def _take(self):
        """Answer once the head (and the body its Content-Length announces) is whole."""
        end = self.head.find(b"\r\n\r\n")
        if end < 0 or end > CONSOLE_HEAD_MAX:
            if end > CONSOLE_HEAD_MAX or len(self.head) > CONSOLE_HEAD_MAX:
                self.send(http_response(431, "text/plain", b"request head over 8 KiB\n"), "head too long")
            return
        length, refusal = http_body_length(self.head[:end])
        if refusal:
            self.send(http_response(refusal[0], "text/plain", refusal[1].encode() + b"\n"), refusal[1])
        elif len(self.head) >= end + 4 + length:
            self.send(self.console.answer(bytes(self.head[:end]), bytes(self.head[end + 4:end + 4 + length]), self))

    def send(self, response, reason=None):
        """Queue the answer; the connection closes once it is written (a stream's stays)."""
        if reason:
            log.info("console: %s from %s", reason, self.ip)
        self.answered = True
        self.out += response
        self._write()

    def push(self, data):
        """More of an event stream; a browser too slow to take it is let go (it reconnects)."""
        if len(self.out) + len(data) > CONSOLE_STREAM_BUFFER:
            self.close("event stream not read fast enough")
            return
        self.out += data
        self._write()

    def _write(self):
        try:
            if self.out:
                del self.out[:self.sock.send(self.out)]
        except (BlockingIOError, InterruptedError):
            pass
        except OSError as e:
            self.close(str(e))
            return
        if not self.out and not self.stream:
            self.linger()
            return
        events = selectors.EVENT_READ | (selectors.EVENT_WRITE if self.out else 0)
        with contextlib.suppress(KeyError, ValueError):
            self.console.broker.selector.modify(self.sock, events, self)

    def linger(self):
        """Answered: half-close and read what the client still sends until it
        closes (closing with unread bytes would reset the connection, and the
        client could lose the answer); the sweep ends a long linger."""
        self.lingering, self.since = True, time.monotonic()
        try:
            self.sock.shutdown(socket.SHUT_WR)
        except OSError:
            self.close("answered")
            return
        with contextlib.suppress(KeyError, ValueError):
            self.console.broker.selector.modify(self.sock, selectors.EVENT_READ, self)

    def close(self, reason):
        if self.closed:
            return
        self.closed = True
        log.debug("console connection from %s closed: %s", self.ip, reason)
        with contextlib.suppress(KeyError, ValueError):
            self.console.broker.selector.unregister(self.sock)
        with contextlib.suppress(OSError):
            self.sock.close()
        self.console.connections.discard(self)


def sse_event(event):
    """One journal event as a Server-Sent Event."""
    return f"id: {event['id']}\nevent: {event['kind']}\ndata: {json.dumps(event)}\n\n".encode()


def http_head(status, content_type, length=None, extra=()):
    """A response head with the console's headers (no Content-Length: a stream, ended by closing)."""
    lines = [f"HTTP/1.1 {status} {HTTP_REASONS[status]}", f"Content-Type: {content_type}"]
    lines += [f"Content-Length: {length}"] if length is not None else []
    lines += [f"{k}: {v}" for k, v in CONSOLE_HEADERS + tuple(extra)]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def http_response(status, content_type, body, head_only=False, extra=()):
    return http_head(status, content_type, len(body), extra) + (b"" if head_only else body)


def http_body_length(head):
    """-> (the body's length, None), or (0, (status, why)) for a body the console does not take."""
    if re.search(rb"\r\ntransfer-encoding:", head, re.I):
        return 0, (411, "a body needs a Content-Length")
    lengths = re.findall(rb"\r\ncontent-length:[ \t]*([^\r]*)", head, re.I)
    if not lengths:
        return 0, None
    if len(lengths) > 1 or not lengths[0].strip().isdigit():
        return 0, (400, "one Content-Length, a number")
    if len(lengths[0].strip()) > 9:
        return 0, (413, "a body over 4 KiB")
    length = int(lengths[0])
    return (length, None) if length <= CONSOLE_BODY_MAX else (0, (413, "a body over 4 KiB"))


def parse_http_head(data):
    """-> (method, path, {query name: value}, {header name (lower): value});
    ValueError for what is not an HTTP/1.x request head."""
    lines = data.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1.") or not parts[1].startswith("/"):
        raise ValueError(f"not an HTTP/1.x request line: {lines[0][:80]!r}")
    headers = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if not sep or not name or name != name.strip():
            raise ValueError(f"a header line that does not parse: {line[:80]!r}")
        headers[name.lower()] = value.strip()
    url = urllib.parse.urlsplit(parts[1])
    query = dict(urllib.parse.parse_qsl(url.query, keep_blank_values=True, max_num_fields=20))
    return parts[0], urllib.parse.unquote(url.path), query, headers


HOST_WITH_PORT = re.compile(r"(\[[^\]]*\]|[^:\[\]]+):\d+")     # a Host header value with its port


# --- Login: the broker's own SASL users; sessions in memory -----------------------

class ConsoleSession:
    """One console login: its user, the proof of its password, when it began and was last used."""
    __slots__ = ("user", "mechanism", "proof", "created", "seen")

    def __init__(self, user, mechanism, proof, now):
        self.user, self.mechanism, self.proof = user, mechanism, proof   # proof: the SCRAM stored key
        self.created = self.seen = now


class ConsoleLogin:
    """The console's logins, asked for when any listener is SASL: a user name
    and password checked against the broker's PLAIN users and SCRAM
    credentials (password_mechanism), then a session -- a random token in a
    cookie, of which only the hash is kept, in memory (a restart logs everyone
    out). A session ends at logout, CONSOLE_SESSION_IDLE_S unused,
    CONSOLE_SESSION_MAX_S in all, or when its user's SCRAM credential changes
    or goes. Password checks are limited per address and per second: each
    SCRAM one is a PBKDF2 on the loop."""

    def __init__(self, broker, port):
        self.broker = broker
        self.setups = broker.listeners.sasl_setups()
        self.cookie = f"doze_console_{port}"            # cookies ignore ports: a name a console
        self.sessions = collections.OrderedDict()       # token hash -> ConsoleSession, least recently used first
        self.failures = {}                              # address -> times of its recent failed logins
        self.checks = collections.deque()               # times of the last second's password checks

    @property
    def required(self):
        return bool(self.setups)

    def viewer(self, headers, ip):
        """Who asks: the session's user; User:ANONYMOUS where no login is
        asked (as a PLAINTEXT client); None: log in first."""
        host = java_host_address(ip)
        if not self.required:
            return ConsoleViewer(self.broker.authorizer, PRINCIPAL_ANONYMOUS, host)
        key = self.session_key(headers)
        if not self.alive(key):
            return None
        session = self.sessions[key]
        session.seen = time.monotonic()
        self.sessions.move_to_end(key)
        return ConsoleViewer(self.broker.authorizer, f"User:{session.user}", host, session.user, key)

    def session_key(self, headers):
        """The hash of the request's token: its cookie's, or a script's Authorization: Bearer."""
        scheme, _, token = headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            token = next((value for name, _, value in (part.strip().partition("=")
                                                       for part in headers.get("cookie", "").split(";"))
                          if name == self.cookie and value), None)
        return None if token is None else hashlib.sha256(token.strip().encode()).hexdigest()

    def alive(self, key):
        """Is the session there, fresh, and its credential the one it logged in with? (Else it ends.)"""
        session = self.sessions.get(key)
        if session is None:
            return False
        now = time.monotonic()
        if session.proof is not None:
            credential = self.broker.store.scram_credential(session.user, session.mechanism)
            fresh = credential is not None and hmac.compare_digest(credential[1], session.proof)
        else:
            fresh = True                          # PLAIN users are the listeners' settings: fixed while running
        if fresh and now - session.seen < CONSOLE_SESSION_IDLE_S and now - session.created < CONSOLE_SESSION_MAX_S:
            return True
        del self.sessions[key]
        log.info("console: the session of %s ended", session.user)
        return False

    def attempt(self, ip, user, password, headers):
        """A login -> ("ok", the session's token), ("refused", None) or ("wait", seconds)."""
        now = time.monotonic()
        wait = self.wait_s(ip, now)
        if wait > 0:
            log.info("console: login from %s refused for %.0f s: too many attempts", ip, wait)
            return "wait", wait
        self.checks.append(now)
        mechanism = password_mechanism(self.setups, self.broker.store.scram_credential, user, password)
        if mechanism is None:
            self.failures.setdefault(ip, collections.deque()).append(now)
            log.info("console: login of %r from %s failed", user[:100], ip)
            return "refused", None
        self.sessions.pop(self.session_key(headers), None)     # the browser's session before, if any
        token = secrets.token_urlsafe(32)
        proof = None if mechanism == "PLAIN" else self.broker.store.scram_credential(user, mechanism)[1]
        self.sessions[hashlib.sha256(token.encode()).hexdigest()] = ConsoleSession(user, mechanism, proof, now)
        while len(self.sessions) > CONSOLE_MAX_SESSIONS:
            self.sessions.popitem(last=False)
        log.info("console: %s logged in from %s (%s)", user, ip, mechanism)
        return "ok", token

    def set_cookie(self, token):
        return f"{self.cookie}={token}; Path=/; HttpOnly; SameSite=Strict"

    def wait_s(self, ip, now):
        """How long this address must wait before its next password check (0: none)."""
        fails = self.failures.get(ip)
        while fails and fails[0] < now - CONSOLE_LOGIN_WINDOW_S:
            fails.popleft()
        if fails and len(fails) >= CONSOLE_LOGIN_FAILURES:
            return fails[0] + CONSOLE_LOGIN_WINDOW_S - now
        while self.checks and self.checks[0] < now - 1.0:
            self.checks.popleft()
        return 1.0 - (now - self.checks[0]) if len(self.checks) >= CONSOLE_LOGIN_CHECKS_PER_S else 0

    def logout(self, headers):
        """End the request's session -> the Set-Cookie that forgets it."""
        session = self.sessions.pop(self.session_key(headers), None)
        if session is not None:
            log.info("console: %s logged out", session.user)
        return f"{self.cookie}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0"

    def sweep(self):
        now = time.monotonic()
        for key in [k for k, s in self.sessions.items() if now - s.seen >= CONSOLE_SESSION_IDLE_S
                    or now - s.created >= CONSOLE_SESSION_MAX_S]:
            self.alive(key)
        for ip in [ip for ip, fails in self.failures.items() if not fails or fails[-1] < now - CONSOLE_LOGIN_WINDOW_S]:
            del self.failures[ip]


class Console:
    """The console's listener, its connections, and its routes. It owns its
    one timer (the sweep of slow connections); the broker's loop only
    multiplexes its sockets."""

    def __init__(self, broker, sock, hosts):
        self.broker, self.sock = broker, sock
        self.port = sock.getsockname()[1]
        self.hosts = {h if HOST_WITH_PORT.fullmatch(h) else f"{h}:{self.port}"
                      for h in ["127.0.0.1", "localhost", "[::1]"] + hosts}
        self.login = ConsoleLogin(broker, self.port)
        self.counter = RecordCounter()
        self.connections = set()
        self.heartbeat = time.monotonic()
        self.moves = broker.logs.moves              # high watermark moves the streams were last told of
        broker.selector.register(sock, selectors.EVENT_READ, self)
        broker.timers.call_later(CONSOLE_SWEEP_S, self._sweep)
        broker.journal.watchers.append(self.on_journal)

    @classmethod
    def open(cls, broker):
        """The console of doze.console.listener, or None when it is off. An
        address in use is an error when the setting was given, and a warning
        when it is the command line's default."""
        address = broker.config["doze.console.listener"]
        if not address:
            return None
        host, sep, port = address.rpartition(":")
        if not sep or not port.isdigit():
            raise ValueError(f"doze.console.listener: HOST:PORT, got {address!r}")
        host = host.strip("[]") or "127.0.0.1"
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        try:
            sock = socket.create_server((host, int(port)), backlog=64, family=family)
        except OSError as e:
            if "doze.console.listener" in broker.config.given:
                raise OSError(e.errno, f"the console's address {address}: {os.strerror(e.errno) if e.errno else e}; "
                                       "give another with "
                                       "--console HOST:PORT (doze.console.listener), or --no-console") from None
            sock = socket.create_server((host, 0), backlog=64, family=family)    # the default's: another
            log.warning("the console's default address %s: %s; serving it on port %d instead",
                        address, os.strerror(e.errno) if e.errno else e, sock.getsockname()[1])
        sock.setblocking(False)
        hosts = [h.strip().lower() for h in broker.config["doze.console.hosts"].split(",") if h.strip()]
        console = cls(broker, sock, hosts)
        if not ipaddress.ip_address(host).is_loopback:
            log.warning("the console listens on %s, not a loopback address: %s", address,
                        "its logins' passwords cross the network in clear (plain HTTP)" if console.login.required
                        else "anyone who reaches it sees the broker's transactions, topics and configs")
        return console

    @property
    def address(self):
        """HOST:PORT, as doze.console.listener names it."""
        host = self.sock.getsockname()[0]
        return f"{'[' + host + ']' if ':' in host else host}:{self.port}"

    @property
    def url(self):
        return f"http://{self.address}/"

    def on_event(self, mask):
        for _ in range(16):
            try:
                sock, addr = self.sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as e:
                log.warning("console: accept failed: %s", e)
                return
            sock.setblocking(False)
            conn = HttpConnection(self, sock, addr[0])
            self.connections.add(conn)
            if len(self.connections) > CONSOLE_MAX_CONNECTIONS:
                conn.send(http_response(503, "text/plain", b"too many console connections\n"),
                          "too many console connections")

    def _sweep(self):
        """The console's timer, every CONSOLE_SWEEP_S: its own chores, guarded
        (they read files and meta.db: a failure is logged, the broker serves on)."""
        try:
            self._chores(time.monotonic())
        except Exception as e:
            log.error("console: its sweep failed: %s", where(e))
        if self.sock.fileno() >= 0:
            self.broker.timers.call_later(CONSOLE_SWEEP_S, self._sweep)

    def _chores(self, now):
        """Close connections that have not sent a whole request, or not taken
        their answer, within CONSOLE_HEAD_TIMEOUT_S; sessions, streams, counts."""
        late = now - CONSOLE_HEAD_TIMEOUT_S
        self.login.sweep()
        self.tell_streams(now)
        self.counter.sweep(self.broker.logs, CONSOLE_COUNT_BUDGET_S)
        for conn in [c for c in self.connections if not c.stream]:
            if conn.lingering:
                if conn.since < now - CONSOLE_LINGER_S:
                    conn.close("answered")
                continue
            if conn.since >= late:
                continue
            if not conn.answered:
                conn.send(http_response(408, "text/plain", b"request head not sent in time\n"),
                          "request head not sent in time")
            if not conn.closed and conn.since < late - CONSOLE_HEAD_TIMEOUT_S:
                conn.close("answer not taken in time")

    def close(self):
        with contextlib.suppress(ValueError):
            self.broker.journal.watchers.remove(self.on_journal)
        for conn in list(self.connections):
            conn.close("broker stopping")
        with contextlib.suppress(KeyError, ValueError):
            self.broker.selector.unregister(self.sock)
        self.sock.close()

    # --- the event stream (Server-Sent Events): one a tab, the journal's events as they happen;
    # /events asked for as text/event-stream (an EventSource always is), else /events is a page ---
    def streams(self):
        return [c for c in self.connections if c.stream and not c.closed]

    def on_journal(self, event):
        data = None
        for conn in self.streams():
            seen = conn.viewer.fresh().event(event)
            if seen is event:
                data = data or sse_event(event)
                conn.push(data)
            elif seen is not None:
                conn.push(sse_event(seen))

    def tell_streams(self, now):
        """A sweep's news for the streams: their sessions' ends, an "offsets"
        event when a high watermark moved (plain produce journals nothing),
        a keep-alive now and then."""
        moved, self.moves = self.moves != self.broker.logs.moves, self.broker.logs.moves
        beat = now - self.heartbeat >= CONSOLE_HEARTBEAT_S
        if beat:
            self.heartbeat = now
        for conn in self.streams():
            if conn.viewer.session is not None and not self.login.alive(conn.viewer.session):
                conn.close("its session ended")
            elif moved or beat:
                conn.push(b"event: offsets\ndata: {}\n\n" if moved else b": keep-alive\n\n")

    def open_stream(self, conn, headers, query, viewer):
        """-> the stream's head and what the browser missed since Last-Event-ID
        (if the ring still holds it; else a "reset" event: reload the page)."""
        if len(self.streams()) >= CONSOLE_MAX_STREAMS:
            return http_response(503, "text/plain", b"too many event streams\n")
        conn.become_stream(viewer)
        out = bytearray(http_head(200, "text/event-stream") + b"retry: 2000\n\n")
        last = headers.get("last-event-id") or query.get("last_id")
        if last is not None and last.isdigit():
            ring = self.broker.journal.events
            if ring and ring[0]["id"] > int(last) + 1:
                out += b"event: reset\ndata: {}\n\n"
            else:
                for event in ring:
                    seen = viewer.event(event) if event["id"] > int(last) else None
                    if seen is not None:
                        out += sse_event(seen)
        return bytes(out)

    # --- requests ---
    def answer(self, head, body, conn):
        """A request (head and body) -> the HTTP answer (bytes)."""
        ip = conn.ip
        try:
            method, path, query, headers = parse_http_head(head)
        except ValueError as e:
            log.info("console: bad request from %s: %s", ip, e)
            return http_response(400, "text/plain", b"bad request\n")
        if headers.get("host", "").lower() not in self.hosts:
            log.info("console: request from %s for host %r refused", ip, headers.get("host", "")[:100])
            return http_response(421, "text/plain", b"this console answers to its own address only\n")
        try:
            if path == "/control" or path.startswith("/control/"):
                return self.control_answer(method, path, query, headers, body, ip)
            if path in LOGIN_PATHS:
                return self.login_answer(method, path, query, headers, body, ip)
            if method not in ("GET", "HEAD"):
                return http_response(405, "text/plain", b"the console is read-only: GET and HEAD\n",
                                     extra=(("Allow", "GET, HEAD"),))
            viewer = self.login.viewer(headers, ip)
            if path == "/events" and "text/event-stream" in headers.get("accept", ""):   # an EventSource's
                return self.open_stream(conn, headers, query, viewer) if viewer else \
                    http_response(401, "text/plain", b"log in first\n")
            status, kind, body, extra = self.route(path, query, viewer)
        except Exception as e:                # a bug in doze: this page fails, the broker serves on
            log.error("console: %s failed: %s", path[:200], where(e))
            status, kind, body, extra = 500, "text/plain", b"the console failed on this page; the log says why\n", ()
        return http_response(status, kind, body, head_only=method == "HEAD", extra=extra)

    ROUTES = {"/": ("cluster", page_cluster), "/topics": ("topics", page_topics), "/groups": ("groups", page_groups),
              "/apis": ("apis", page_apis), "/security": ("security", page_security)}
    PUBLIC = ("/console.css", "/console.js", "/apis", "/api/apis")

    def route(self, path, query, viewer):
        """-> (status, content type, body, extra headers): a page, or where to log in first."""
        if path == "/console.css":
            return 200, "text/css; charset=utf-8", CONSOLE_CSS.encode(), ()
        if path == "/console.js":
            return 200, "text/javascript; charset=utf-8", CONSOLE_JS.encode(), ()
        api = path.startswith("/api/")
        if viewer is None and path not in self.PUBLIC:
            if api:
                return self.error(api, 401, "", "Log in first: POST user and password (a form) to /api/login, "
                                  "then send its cookie.")
            here = path + ("?" + urllib.parse.urlencode(query) if query else "")
            return 303, "text/plain", b"log in first\n", (("Location", console_path("login", next=here)),)
        name = path[4:] if api else path
        if api:
            name = {"/cluster": "/", "/": ""}.get(name, name)      # "/"'s twin is /api/cluster
        views = ConsoleViews(self.broker, viewer, self.counter)
        try:
            data, page = self.page_data(views, name, query)
        except BadParameter as e:
            data, page = (400, "Bad request", e.text()), None
        if page is None:
            return self.error(api, *data, viewer=viewer)
        if viewer is not None and viewer.user is not None:
            data["viewer"] = viewer.describe()
        return self.respond(api, data, page)

    def page_data(self, views, name, query):
        """-> (data, page function), or ((status, title, text), None) for no page."""
        v = views.viewer
        if name in self.ROUTES:
            view, page = self.ROUTES[name]
            return getattr(views, view)(), page
        if name == "/events":
            return views.events(query), page_events
        if name.startswith("/topics/") and name.count("/") in (2, 3):
            topic, _, partition = name[len("/topics/"):].partition("/")
            if not v.topic(topic, Op.READ if partition else Op.DESCRIBE):    # as Fetch and Metadata ask
                return (403, "Not allowed", "TOPIC_AUTHORIZATION_FAILED: Topic authorization failed."), None
            if partition and not re.fullmatch(r"[0-9]{1,10}", partition):
                raise BadParameter("partition", partition, f"a partition number, 0 or more: /topics/{topic}/0")
            data = views.records(topic, int(partition), query) if partition else views.topic(topic)
            if data is not None:
                return data, page_records if partition else page_topic
            return (404, "Not found", "UNKNOWN_TOPIC_OR_PARTITION: no such topic or partition."), None
        if name in ("/txn", "/group"):
            key = query.get("id", "")
            if not (v.txn(key) if name == "/txn" else v.group(key)):
                return (403, "Not allowed", "TRANSACTIONAL_ID_AUTHORIZATION_FAILED: Transactional Id authorization "
                        "failed." if name == "/txn" else "GROUP_AUTHORIZATION_FAILED: Group authorization failed."), None
            data = views.transaction(key) if name == "/txn" else views.group(key)
            if data is not None:
                return data, page_txn if name == "/txn" else page_group
            return (404, "Not found", "TRANSACTIONAL_ID_NOT_FOUND: no such transactional id." if name == "/txn"
                    else "GROUP_ID_NOT_FOUND: no such group."), None
        return (404, "Not found", f"No console page at {name}."), None

    @staticmethod
    def respond(api, data, page):
        if api:
            return 200, "application/json; charset=utf-8", json.dumps(data, indent=1).encode(), ()
        return 200, "text/html; charset=utf-8", page(data).encode(), ()

    @staticmethod
    def error(api, status, title, text, viewer=None):
        """An error as JSON, or as a page with the usual header (who is logged in)."""
        if api:
            return status, "application/json; charset=utf-8", json.dumps({"error": text}).encode(), ()
        who = viewer.describe() if viewer is not None else None
        return status, "text/html; charset=utf-8", page_message(title, text, who).encode(), ()

    def control_answer(self, method, path, query, headers, body, ip):
        """/control: the control endpoint's, when the command line serves one (§22)."""
        if self.broker.control is None:
            return http_response(404, "application/json; charset=utf-8", json.dumps(
                {"error": "the control endpoint is off: start doze with --control"}).encode())
        return http_response(*self.broker.control.answer(method, path, query, headers, body, ip)[:3])

    # --- logging in and out (when a listener is SASL): the two POSTs, and the form ---
    def login_answer(self, method, path, query, headers, body, ip):
        api, out = path.startswith("/api/"), path.endswith("logout")
        if not self.login.required:
            return http_response(*self.error(api, 404, "Not found", "No login here: no listener is SASL, "
                                             "the console shows what User:ANONYMOUS may see.")[:3])
        if method != "POST" and (api or out or method not in ("GET", "HEAD")):
            return http_response(405, "text/plain", b"POST a form here\n",
                                 extra=(("Allow", "POST" if api or out else "GET, HEAD, POST"),))
        if method != "POST":
            page = page_login({"next": safe_next(query.get("next")), "failed": None})
            return http_response(200, "text/html; charset=utf-8", page.encode(), head_only=method == "HEAD")
        if not same_origin(headers):
            log.info("console: a %s from %s with Origin %r refused", path, ip, headers.get("origin", "")[:100])
            return http_response(403, "text/plain", b"a login or logout from another origin is refused\n")
        if out:
            extra = (("Set-Cookie", self.login.logout(headers)),)
            return http_response(200, "application/json; charset=utf-8", b'{"logged_out": true}', extra=extra) \
                if api else http_response(303, "text/plain", b"logged out\n", extra=extra + (("Location", "/login"),))
        try:
            form = dict(urllib.parse.parse_qsl(body.decode("utf-8", "replace"), max_num_fields=5))
        except ValueError:
            return http_response(400, "text/plain", b"a login form has user, password and next\n")
        user, next_path = form.get("user", ""), safe_next(form.get("next"))
        outcome, value = self.login.attempt(ip, user, form.get("password", ""), headers)
        if outcome == "wait":
            return http_response(429, "text/plain", b"too many logins: wait\n",
                                 extra=(("Retry-After", str(int(value) + 1)),))
        if outcome == "refused":
            status, kind, page, _ = self.error(api, 401, "", "Invalid user name or password.") if api else \
                (401, "text/html; charset=utf-8", page_login({"next": next_path, "failed": user}).encode(), ())
            return http_response(status, kind, page)
        extra = (("Set-Cookie", self.login.set_cookie(value)),)
        if api:                                   # a script may send the token as Authorization: Bearer
            return http_response(200, "application/json; charset=utf-8", json.dumps(
                {"user": user, "principal": f"User:{user}", "token": value}).encode(), extra=extra)
        return http_response(303, "text/plain", b"logged in\n", extra=extra + (("Location", next_path),))


LOGIN_PATHS = ("/login", "/logout", "/api/login", "/api/logout")


def same_origin(headers):
    """A browser's POST from the console's own pages (Origin, or Sec-Fetch-Site
    where a browser sends no Origin); a script sends neither."""
    origin = headers.get("origin")
    if origin is not None:
        return origin.lower() == f"http://{headers.get('host', '').lower()}"
    return headers.get("sec-fetch-site", "same-origin") in ("same-origin", "none")


def safe_next(path):
    """Where to go after the login: a path of this console (never another site, never the login itself)."""
    if not path or not path.startswith("/") or path.startswith(("//", "/\\")) or \
            path.partition("?")[0] in LOGIN_PATHS:
        return "/"
    return urllib.parse.quote(path, safe="/?=&%-._~+")


###############################################################################
# 21. THE LOOP -- one selectors loop, its timers, the group commit, the trace; the Broker
###############################################################################
# The loop is the only thread that touches broker state. Each pass:
#   1. select: accept, read frames and handle them, write what is ready
#   2. run the timers that are due (parked deadlines, retention); a periodic
#      one schedules its next run first, and a failure is logged, not fatal
#   3. group commit: one fsync per dirty log, then answer what waited for it
#
# Broker composes the rooms above and multiplexes their sockets and timers;
# nothing else. Each room schedules its own chores on Timers (its
# schedule(timers)); the group commit (GroupCommit) ends every pass.

TRIM_S = 10.0                   # how often freed memory is given back to the system


# --- The protocol trace (--trace): the protocol as it moves, for learners ---------
# doze.trace=KINDS (or --trace) prints one line per request and per answer,
# decoded and cut short (the fields that are set; long lists abbreviated;
# record batches as their headers: offsets, producer id/epoch, sequence,
# transactional, COMMIT or ABORT), and between them the broker's own actions
# from the journal (a transaction's state change, stored in meta.db before it
# is shown; a marker appended; a group's new generation) and each partition's
# high watermark and LSO as they move after a group commit. KINDS: txn
# (the transaction APIs, transactional Produce, read_committed Fetch),
# group (the group APIs), all. doze.trace.ids keeps only what names one of
# these transactional ids, group ids or client ids. Lines go to the logger
# doze_kafka.trace (the command line prints them bare on stdout). Off, it
# costs one `is None` test per request and per group commit.

TRACE_TXN_APIS = {ApiKey.INIT_PRODUCER_ID, ApiKey.ADD_PARTITIONS_TO_TXN, ApiKey.ADD_OFFSETS_TO_TXN, ApiKey.END_TXN,
                  ApiKey.TXN_OFFSET_COMMIT, ApiKey.WRITE_TXN_MARKERS, ApiKey.DESCRIBE_TRANSACTIONS,
                  ApiKey.LIST_TRANSACTIONS, ApiKey.DESCRIBE_PRODUCERS}
TRACE_GROUP_APIS = {ApiKey.JOIN_GROUP, ApiKey.SYNC_GROUP, ApiKey.HEARTBEAT, ApiKey.LEAVE_GROUP, ApiKey.OFFSET_COMMIT,
                    ApiKey.OFFSET_FETCH, ApiKey.DESCRIBE_GROUPS, ApiKey.LIST_GROUPS, ApiKey.DELETE_GROUPS,
                    ApiKey.OFFSET_DELETE, ApiKey.TXN_OFFSET_COMMIT, ApiKey.CONSUMER_GROUP_HEARTBEAT,
                    ApiKey.CONSUMER_GROUP_DESCRIBE}
TRACE_TXN_APIS.add(ApiKey.FIND_COORDINATOR)
TRACE_GROUP_APIS.add(ApiKey.FIND_COORDINATOR)
TRACE_KINDS = ("txn", "group", "all")
TRACE_LINE_CHARS = 600
TRACE_NOISE = {"throttle_time_ms", "replica_id", "replica_state", "session_id", "session_epoch", "rack_id",
               "cluster_authorized_operations", "topic_authorized_operations", "forgotten_topics_data",
               "current_leader", "node_endpoints", "leader_epoch", "current_leader_epoch", "log_start_offset",
               "last_fetched_epoch", "preferred_read_replica", "diverging_epoch", "snapshot_id",
               "record_errors", "include_cluster_authorized_operations", "include_topic_authorized_operations",
               "log_append_time_ms", "committed_leader_epoch", "error_message"}


class Tracer:
    """The trace's filter and its lines (see above)."""

    def __init__(self, config, logs, producer_states, txns, journal, kinds, ids):
        self.config, self.clock, self.producer_states, self.txns = config, config.clock, producer_states, txns
        self.kinds, self.ids = kinds, ids
        self.failed = False
        # log -> (HW, LSO) last shown, the logs' own at the start (by the log: a topic made again is new)
        self.offsets = weakref.WeakKeyDictionary(
            (plog, (plog.high_watermark, producer_states.last_stable_offset(plog))) for plog in logs.logs.values())
        journal.watchers.append(self.on_event)

    @classmethod
    def open(cls, config, logs, producer_states, txns, journal):
        """The trace doze.trace asks for, or None (off)."""
        kinds = {k.strip() for k in config["doze.trace"].split(",") if k.strip()}
        if not kinds:
            return None
        if not kinds <= set(TRACE_KINDS):
            raise ValueError(f"doze.trace: {', '.join(sorted(kinds))}: the kinds are {', '.join(TRACE_KINDS)}")
        ids = {i.strip() for i in config["doze.trace.ids"].split(",") if i.strip()}
        return cls(config, logs, producer_states, txns, journal, kinds, ids)

    def emit(self, mark, text):
        now = datetime.datetime.fromtimestamp(self.clock()).strftime("%H:%M:%S.%f")[:-3]
        line = f"{now} {mark} {text}"
        trace_log.info("%s", line if len(line) <= TRACE_LINE_CHARS else line[:TRACE_LINE_CHARS] + " \u2026")

    def wants(self, api_key, req, client_id):
        if "all" not in self.kinds and not (
                "txn" in self.kinds and (api_key in TRACE_TXN_APIS or getattr(req, "transactional_id", None)
                                         or getattr(req, "isolation_level", 0) == 1)
                or "group" in self.kinds and api_key in TRACE_GROUP_APIS):
            return False
        return not self.ids or bool(self.ids & ({client_id} | request_ids(req)))

    def guarded(hook):
        """A trace hook runs inside request handling and the group commit: a
        failure of its own (a bug, a closed stdout) is logged once, never the loop's."""
        def run(self, *args):
            try:
                return hook(self, *args)
            except Exception as e:
                if not self.failed:
                    self.failed = True
                    log.error("the trace failed (it goes on; this is said once): %s", where(e))
                return None
        return run

    @guarded
    def request(self, conn, spec, version, client_id, req):
        """A request to trace -> what its answer is traced with (None: not traced)."""
        if not self.wants(spec.key, req, client_id):
            return None
        who = f"{trace_text(client_id or '-')}@{conn.name}]{self.coordinators(spec.key, req)}"
        self.emit("\u2192", f"{spec.name} v{version} [{who} {trace_text(loggable(spec.key, req), True)}")
        return (spec.name, version, who)

    def coordinators(self, api_key, req):
        """" (demo-tx \u2192 __transaction_state-23)": where Kafka keeps the state of each
        transactional id and group the request names, whose leader coordinates it."""
        txn = [req.transactional_id] if getattr(req, "transactional_id", None) else []
        groups = [req.group_id] if getattr(req, "group_id", None) else \
            [g.group_id for g in getattr(req, "groups", None) or () if hasattr(g, "group_id")]
        if api_key == ApiKey.FIND_COORDINATOR:
            (txn if req.key_type == COORDINATOR_TRANSACTION else groups).extend(
                req.coordinator_keys or ([req.key] if req.key else []))
        pairs = [f"{trace_text(t)} \u2192 {TRANSACTION_STATE}-{transaction_state_partition(self.config, t)}"
                 for t in txn]
        pairs += [f"{trace_text(g)} \u2192 {CONSUMER_OFFSETS}-{offsets_partition(self.config, g)}" for g in groups]
        return f" ({', '.join(pairs)})" if pairs else ""

    @guarded
    def response(self, traced, spec, msg):
        """An answer of a traced request, its errors as this version gets them
        (error_for_version); its top-level error said even when left at its default."""
        name, version, who = traced
        text = trace_text(loggable(spec.key, errors_as_sent(spec.key, version, msg)), True)
        if not hasattr(msg, "error_code") and any(f.name == "error_code" for f in spec.response
                                                  if f.in_version(version)):
            text = "error_code=NONE " + text if text != "(no error)" else "error_code=NONE"
        self.emit("\u2190", f"{name} v{version} [{who} {text}")

    @guarded
    def fault(self, traced, fault):
        """A test's fault on a traced request."""
        name, version, who = traced
        self.emit("\u2022", f"{name} v{version} [{who} fault {fault.id} (a test's): {fault.what_it_does()}")

    def on_event(self, e):
        """A journal event, between the requests: what the broker itself did."""
        if "all" not in self.kinds and not ("txn" in self.kinds and e["kind"] in ("txn", "marker", "feature")
                                            or "group" in self.kinds and e["kind"] in ("group", "member")):
            return
        if self.ids and e["kind"] != "feature" and not self.ids & {e.get("transactional_id"), e.get("group_id")}:
            return                                 # (a feature is every transaction's)
        self.emit("\u2022", trace_event_text(e))

    @guarded
    def moved(self, plogs):
        """After a group commit: each partition whose HW or LSO moved."""
        for plog in plogs:
            tp = (plog.topic, plog.partition)
            now = (plog.high_watermark, self.producer_states.last_stable_offset(plog))
            before = self.offsets.get(plog, (plog.log_start_offset, plog.log_start_offset))   # a new partition
            self.offsets[plog] = now
            if now != before and self.shows_offsets(tp):
                hw, lso = (f"{name} {now[i]}" if before[i] == now[i] else f"{name} {before[i]} \u2192 {now[i]}"
                           for i, name in enumerate(("HW", "LSO")))
                held = " (held back by an open transaction)" if now[1] < now[0] else ""
                self.emit("\u2022", f"{tp[0]}-{tp[1]}: {hw}, {lso}{held}, durable")

    def shows_offsets(self, tp):
        if "all" not in self.kinds and "txn" not in self.kinds:
            return False
        if not self.ids:
            return "all" in self.kinds or self.producer_states.is_transactional(tp)
        return any(tp in m.partitions or tp in m.marker_offsets for m in map(self.txns.txns.get, self.ids)
                   if m is not None)


trace_log = logging.getLogger("doze_kafka.trace")


def trace_text(node, top=False, depth=0):
    """A request or answer as one short line: set fields only, error codes by
    name, lists cut after TRACE_LIST_ITEMS, batches as their headers."""
    if isinstance(node, types.SimpleNamespace):
        parts = []
        for k, v in vars(node).items():
            if k in TRACE_NOISE or k.startswith("_") or v is None or v == [] or v == bytes(16) or \
                    (v == "" and not k.endswith("_id")) or (k.endswith("error_code") and v == 0 and not top) or \
                    (k.endswith("_ms") and v == 0 and k != "transaction_timeout_ms"):
                continue                # what is unset; an empty id (a first JoinGroup's member_id) is told
            if k.endswith("error_code"):
                parts.append(f"{k}={ErrorCode(v).name if v in ErrorCode._value2member_map_ else v}")
            elif k == "records":
                parts.append(f"records=[{batches_text(v)}]")
            else:
                parts.append(f"{k}={trace_text(v, depth=depth + 1)}")
        return ("{" + " ".join(parts) + "}") if depth else " ".join(parts) or "(no error)"
    if isinstance(node, list):
        items = [trace_text(x, depth=depth + 1) for x in node[:TRACE_LIST_ITEMS]]
        more = f" \u2026+{len(node) - TRACE_LIST_ITEMS}" if len(node) > TRACE_LIST_ITEMS else ""
        return "[" + ", ".join(items) + more + "]"
    if isinstance(node, Memo):
        return "<as cached>"                    # built only on a cache miss: not for the trace
    if isinstance(node, (bytes, bytearray, memoryview)):
        return f"<{len(node)} bytes>"
    if isinstance(node, str):
        return json.dumps(node) if not node or any(c in node for c in " {}[]=,\"") or not node.isprintable() \
            else node
    if isinstance(node, (int, float, bool)):
        return str(node)
    return f"<{type(node).__name__}>"


TRACE_LIST_ITEMS = 4


def batches_text(records):
    """Record batches by their headers: "0-1 pid 1000/0 seq 0 txn", "2 COMMIT pid 1000/0";
    of a FileSlice (a Fetch's records on disk) only the first batches' heads are read."""
    if isinstance(records, FileSlice):
        return file_batches_text(records)
    view, pos, spans, more = memoryview(records), 0, [], 0
    for start, h, pos in whole_batches(view):             # pos: where the last whole batch ends
        if len(spans) < TRACE_LIST_ITEMS:
            spans.append(batch_span(h, view[start:start + BATCH_HEADER_SIZE + 9]))
        else:
            more += 1
    return ", ".join(spans + ([f"\u2026+{more} batches"] if more else []) +
                     ([f"+{len(view) - pos} bytes"] if pos < len(view) else []))


def file_batches_text(records):
    fd, pos, end, spans = records.file.fileno(), records.offset, records.offset + records.count, []
    while pos + BATCH_HEADER_SIZE <= end and len(spans) < TRACE_LIST_ITEMS:
        head = os.pread(fd, BATCH_HEADER_SIZE + 9, pos)
        h = read_batch_header(head)
        if h.batch_length < BATCH_HEADER_SIZE - LOG_OVERHEAD:
            break
        spans.append(batch_span(h, head))
        pos += LOG_OVERHEAD + h.batch_length
    return ", ".join(spans + ([f"+{end - pos} bytes"] if pos < end else []))


def batch_span(h, head):
    """One batch by its header; head: its first bytes (a control batch's type is just past the header)."""
    span = f"{h.base_offset}" if h.last_offset_delta <= 0 else f"{h.base_offset}-{h.base_offset + h.last_offset_delta}"
    if h.attributes & ATTR_CONTROL:
        if len(head) >= BATCH_HEADER_SIZE + 9:
            kind = control_type(head)
            span += {CONTROL_COMMIT: " COMMIT", CONTROL_ABORT: " ABORT"}.get(kind, f" control type {kind}")
    elif h.records_count != h.last_offset_delta + 1:
        span += f" ({h.records_count} records)"
    if h.producer_id >= 0:
        span += f" pid {h.producer_id}/{h.producer_epoch}" + (f" seq {h.base_sequence}" if h.base_sequence >= 0 else "")
    return span + (" txn" if h.attributes & ATTR_TRANSACTIONAL and not h.attributes & ATTR_CONTROL else "")


def trace_event_text(e):
    """A journal event in words: the console's (event_text), with what it is of;
    every name a client chose quoted as trace_text quotes (no line or escape of its own)."""
    e = {k: trace_text(v) if k in ("transactional_id", "group_id", "leader", "protocol") and isinstance(v, str)
         else v for k, v in e.items()}
    kafka = f"Kafka: a record in {e['coordinator']}; doze: a row in meta.db" if "coordinator" in e else "stored in meta.db"
    if e["kind"] == "txn" and e["from_state"] == e["to_state"] and e["cause"].startswith("read back"):
        return (f"txn {e['transactional_id']}: {e['to_state']} (producer {e['producer_id']}, epoch "
                f"{e['producer_epoch']}), partitions [{', '.join(e['partitions'])}], {e['cause']} (Kafka: the "
                f"coordinator reads {e.get('coordinator', TRANSACTION_STATE)} back when it takes over)")
    if e["kind"] == "txn":
        return f"txn {e['transactional_id']}: {event_text(e)}, partitions [{', '.join(e['partitions'])}]; {kafka}"
    if e["kind"] == "marker" and e.get("stand_in"):
        return (f"txn {e['transactional_id']}: {e['control']} marker at {e['topic']}-{e['partition']} "
                f"(producer {e['producer_id']}, epoch {e['producer_epoch']}) publishes "
                f"{trace_text(e['group'])}'s offsets in Kafka; {e['stand_in']}")
    if e["kind"] == "marker":
        return f"txn {e['transactional_id']}: {event_text(e)} appended"
    if e["kind"] == "group":
        return f"group {e['group_id']}: {event_text(e)}, protocol {e['protocol'] or '-'}, leader {e['leader'] or '-'}"
    if e["kind"] == "feature":
        return f"{event_text(e)}; Kafka: a FeatureLevelRecord in the metadata log; doze: a row in meta.db"
    if e["kind"] == "member":                  # KIP-848: a partition is revoked before another member gets it
        return f"group {e['group_id']}: member {trace_text(e['member_id'])} {event_text(e)}"
    return event_text(e)


# --- The loop's own parts: its pass times, its waker, memory given back ------

class LoopStats:
    """How long the loop's passes take (select's wait excluded), logged once an
    interval when doze.loop.stats.interval.ms > 0: the measure of "nothing
    slow on the loop". One pass is the work between two selects."""

    def __init__(self, connections, interval_ms):
        self.connections = connections
        self.interval_s = interval_ms / 1000
        self.passes = []
        self.started = time.perf_counter()

    def record(self, seconds):
        self.passes.append(seconds)
        now = time.perf_counter()
        if now - self.started >= self.interval_s:
            self.report()
            self.passes, self.started = [], now

    def report(self):
        times = sorted(self.passes) or [0.0]

        def pct(q):
            return times[min(len(times) - 1, int(q * len(times)))] * 1000
        queued = sum(c.queued_bytes() for c in self.connections)
        log.info("loop stats: passes=%d p50_ms=%.2f p99_ms=%.2f max_ms=%.2f connections=%d "
                 "queued_out_bytes=%d open_files=%d", len(self.passes), pct(0.5), pct(0.99),
                 times[-1] * 1000, len(self.connections), queued, open_file_count())


def open_file_count():
    """This process's open descriptors (Linux: /proc/self/fd), or -1 where unknown."""
    try:
        return len(os.listdir("/proc/self/fd")) - 1       # less the one listdir holds
    except OSError:
        return -1


class _Waker:
    """The self-pipe that wakes select() for stop(), run_in_loop() and the flusher."""

    def __init__(self):
        self.recv_sock, self.send_sock = socket.socketpair()
        self.recv_sock.setblocking(False)
        self.send_sock.setblocking(False)

    def on_event(self, mask):
        with contextlib.suppress(OSError):
            while self.recv_sock.recv(4096):
                pass

    def wake(self):
        with contextlib.suppress(OSError):
            self.send_sock.send(b"\0")

    def close(self):
        self.recv_sock.close()
        self.send_sock.close()


@functools.lru_cache(maxsize=None)
def _libc():
    try:
        import ctypes
        libc = ctypes.CDLL(None)
        return libc if hasattr(libc, "malloc_trim") else None
    except (ImportError, OSError):
        return None


def release_freed_memory():
    """glibc's malloc_trim(0), where there is one (Linux); elsewhere nothing."""
    libc = _libc()
    if libc is not None:
        libc.malloc_trim(0)


# --- The Broker: the rooms composed, the loop, the stop ----------------------

def make_data_dir(path, files):
    """makedirs that makes each created directory's entry durable; a path that
    cannot be a directory stops the start with words that say why."""
    def cannot(why):
        return OSError(errno.ENOTDIR, f"the data directory {path} cannot be made: {why} (--data-dir, or "
                                      "log.dirs, names where doze keeps its logs and meta.db)")
    missing, at = [], path
    while not os.path.isdir(at):
        if os.path.lexists(at):
            raise cannot(f"{at} is a file, not a directory")
        missing.append(at)
        at = os.path.dirname(at)
    for d in reversed(missing):
        try:
            files.mkdir(d)
        except OSError as e:
            special = e.errno == errno.ENOENT and os.path.isdir(os.path.dirname(d))
            raise cannot(f"making {d}: {e.strerror}" + (f" ({os.path.dirname(d)} takes no new directory: "
                                                         "not a place for files)" if special else "")) from None
        files.fsync_dir(os.path.dirname(d))


def lock_data_dir(path):
    """Kafka's .lock: one broker per data directory (two would write the same
    segments and meta.db). -> the open lock file, held until the broker stops."""
    try:
        f = open(os.path.join(path, ".lock"), "a+b")
    except OSError as e:
        raise OSError(e.errno, f"the data directory {path} cannot be written ({e.strerror}): "
                               "doze keeps its logs and meta.db there") from None
    try:
        if fcntl is not None:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        f.close()
        raise OSError(errno.EBUSY, f"Failed to acquire lock on file .lock in {path}. A Kafka instance in "
                                   "another process or thread is using this directory.") from None
    return f


def open_meta_db(config, files):
    """meta.db as a start finds it: the cluster id made on the first start
    (Kafka's base64 form), the dynamic configs applied to `config`."""
    store = MetadataStore(os.path.join(config.data_dir, "meta.db"), files)   # fsyncs its directory entry
    try:
        if store.get_setting("cluster_id") is None:
            store.set_settings({"cluster_id": base64.urlsafe_b64encode(uuid.uuid4().bytes).decode()[:22]})
        for key, value in store.settings_with_prefix(DYNAMIC_PREFIX).items():
            node = key.startswith(NODE_PREFIX)
            config.set_dynamic(node, key[len(NODE_PREFIX if node else DYNAMIC_PREFIX):], value)
    except BaseException:
        store.close()
        raise
    return store


class Timers:
    """The loop's timers on the broker's clock: a heap of (when, seq, fn).
    Each room schedules its own chores here (its schedule(timers)); the loop
    runs whatever is due after each pass. A periodic chore schedules its next
    run before its work, so a failure (a bug in doze) loses that run only."""

    def __init__(self, clock):
        self.clock = clock
        self.heap = []
        self.seq = 0

    def call_later(self, delay_s, fn, *args):
        self.call_at(self.clock() + delay_s, fn, *args)

    def call_at(self, when_s, fn, *args):
        self.seq += 1
        heapq.heappush(self.heap, (when_s, self.seq, fn, args))

    def next_in(self):
        """Seconds until the next timer is due (0 if one is), or None without timers."""
        return max(self.heap[0][0] - self.clock(), 0) if self.heap else None

    def run_due(self):
        """Run the timers that are due; one that fails is logged and the loop serves on."""
        now = self.clock()
        while self.heap and self.heap[0][0] <= now:
            _, _, fn, args = heapq.heappop(self.heap)
            try:
                fn(*args)
            except Exception as e:
                log.error("a timer (%s) failed: %s: a bug in doze", getattr(fn, "__qualname__", "?"), where(e))


class GroupCommit:
    """Once a pass of the loop: one fsync of meta.db for every change the pass
    made, one per dirty log (a long commit's on the Flusher's thread, its
    result taken in a later pass), then the answers that waited for them. An answer
    never runs ahead of what a power cut would keep: a Produce is answered
    once its high watermark passed its records (its Park, woken by the log's
    key), any other answer once the meta.db change it follows is durable
    (held here by Connection.push). A decided transaction's markers go out
    between the two fsyncs, so EndTxn's answer follows them in the same pass."""

    def __init__(self, store, logs, txns, purgatory, tracer=None):
        self.store, self.logs, self.txns, self.purgatory, self.tracer = store, logs, txns, purgatory, tracer
        self.held = {}                  # connections whose answers wait for meta.db's fsync (a dict as an ordered set)

    def hold(self, conn):
        """Does an answer of conn have to wait for meta.db's fsync? If so, it
        is held (True) and conn.send_ready() is called once it is durable."""
        if not self.store.answers_wait():
            return False
        self.held[conn] = None
        return True

    def due_in(self):
        """Seconds the loop may sleep before this has work: 0 now, or until a lazy meta.db sync."""
        if self.held or self.logs.flush_due() or self.logs.removing:
            return 0
        return META_LAZY_SYNC_S if self.store.owed_since is not None else None

    def run(self):
        """The group commit of one pass."""
        self._sync_store()
        if self.txns.completing:
            self.txns.progress()                       # markers of the decisions just made durable
        if self.logs.flush_due():
            moved = self.logs.flush_dirty(FLUSH_BUDGET_S)    # a failed fsync: that log offline
            for plog in moved:
                self.purgatory.notify((plog.topic, plog.partition))
            if self.tracer is not None:
                self.tracer.moved(moved)
        if self.txns.completing:
            self.txns.progress()                       # decisions whose markers are now durable
        self.purgatory.notify(FLUSHED)
        self._sync_store()                             # changes made by what FLUSHED woke
        if self.logs.removing:
            self.logs.remove_some()                    # directories of deleted topics

    def _sync_store(self):
        """meta.db's fsync if an answer waits for a change (or a change has
        waited META_LAZY_SYNC_S), then the answers held for it. If the fsync
        fails they are never sent: their connections close."""
        if self.held or self.store.sync_due():
            failed = None
            try:
                self.store.sync()
            except StoreFailed as e:
                failed = e.detail
            held, self.held = self.held, {}
            for conn in held:
                if failed:
                    conn.close(f"an answer waited for a meta.db change that could not be made durable ({failed})")
                elif not conn.closed:
                    conn.send_ready()


class Broker:
    """A whole single-node Kafka cluster: the rooms composed, their sockets
    and timers multiplexed on one selectors loop, and nothing else. Binds its
    ports on construction (so .port is known before serve_forever starts, as
    Kafka's acceptors bind at startup); serve_forever() runs the loop until
    stop()."""

    def __init__(self, config, files=None, faults=None, control=None):
        self.config = config
        self.clock = config.clock
        self.files = files or Files()
        self.faults = faults if faults is not None else Faults()   # none unless a test asks (§18)
        self.control = control              # the control endpoint (§22) the console serves, if asked
        self.files.attach(config.data_dir)
        make_data_dir(config.data_dir, self.files)
        self.dir_lock = lock_data_dir(config.data_dir)
        self.waker = _Waker()               # wakes select: stop(), run_in_loop(), the flusher's thread
        try:
            self._compose(config)
        except BaseException:           # a failed start lets go of the directory
            self.waker.close()
            self.dir_lock.close()
            raise

    def _compose(self, config):
        """Every room, in the order data flows through them; each schedules its own chores."""
        self.store = open_meta_db(config, self.files)
        descriptors = raise_descriptor_limit()
        self.timers = Timers(self.clock)
        self.logs = LogManager(config, self.store, self.files, max_open_files=max(64, descriptors // 2),
                               flusher=Flusher(self.files, self.waker.wake))
        self.logs.load()
        self.purgatory = Purgatory(self.timers)
        self.producer_states = ProducerStates(config, self.store, self.logs)
        self.producer_ids = ProducerIdManager(self.store)
        self.authorizer = Authorizer.from_config(config, self.store)     # None: no authorizer, as by default
        self.journal = Journal(self.clock)          # what the coordinators did (§9), for the console and trace
        self.cleaner = LogCleaner(config, self.store, self.logs, self.producer_states, self.journal)
        self.groups = GroupCoordinator(config, self.store, self.logs, self.purgatory.notify, self.journal)
        self.consumer_groups = ConsumerGroups(config, self.groups, self.logs, self.journal)
        self.txns = TransactionCoordinator(config, self.store, self.logs, self.groups, self.producer_states,
                                           self.producer_ids, self.purgatory.notify, self.journal)
        self.tracer = Tracer.open(config, self.logs, self.producer_states, self.txns, self.journal)
        self.txns.load()                            # traced: a decision carried out after a restart
        self.selector = selectors.DefaultSelector()
        self.listeners = Listeners(config, self.store.scram_credential)   # bound: the first one's port is self.port
        self.port = self.listeners.port
        config.settle_started()
        self.rooms = Rooms(config=config, store=self.store, logs=self.logs, producer_states=self.producer_states,
                           producer_ids=self.producer_ids, groups=self.groups, txns=self.txns,
                           authorizer=self.authorizer, node=self.listeners.node, notify=self.purgatory.notify,
                           consumer_groups=self.consumer_groups)
        self.dispatcher = Dispatcher(self.rooms, self.purgatory, self.timers, self.faults, self.tracer)
        self.group_commit = GroupCommit(self.store, self.logs, self.txns, self.purgatory, self.tracer)
        self.connections = Connections(config, self.selector, self.timers, self.listeners, self.dispatcher,
                                       self.group_commit, self.purgatory, descriptors)
        self.selector.register(self.waker.recv_sock, selectors.EVENT_READ, self.waker)
        self._calls = collections.deque()   # functions run_in_loop() hands over
        self._stopping = False
        self._clean_stop = True
        self.stopped = threading.Event()
        self.thread = None                  # the loop's own thread, when serve_in_thread started it
        for room in (self.logs, self.producer_states, self.cleaner, self.groups, self.consumer_groups, self.txns,
                     self.connections):
            room.schedule(self.timers)
        self.timers.call_later(TRIM_S, self._trim_memory)
        self.console = Console.open(self)            # None unless doze.console.listener is set

    @property
    def bootstrap(self):
        host = self.config.host if self.config.host not in ("", "0.0.0.0", "::") else "127.0.0.1"
        return f"{host}:{self.port}"

    def _trim_memory(self):
        """Give freed memory back to the system (glibc keeps it otherwise: after a
        burst of big frames the process would stay as large as the burst made it)."""
        self.timers.call_later(TRIM_S, self._trim_memory)
        release_freed_memory()

    # --- the loop ---
    def serve_in_thread(self, name="doze-kafka"):
        """serve_forever on a thread of its own (running(), the demo, tests) -> the thread."""
        self.thread = threading.Thread(target=self.serve_forever, name=name, daemon=True)
        self.thread.start()
        return self.thread

    def serve_forever(self):
        """The only loop in doze; the only thread that touches broker state."""
        interval = self.config["doze.loop.stats.interval.ms"]
        stats = LoopStats(self.connections, interval) if interval > 0 else None
        try:
            while not self._stopping:
                events = self.selector.select(self._select_timeout())
                began = time.perf_counter()
                self.connections.new_pass(began)
                for key, mask in events:
                    try:
                        key.data.on_event(mask)
                    except Exception as e:         # a bug in doze: that socket's client alone pays
                        self._event_failed(key.data, e)
                while self._calls:
                    self._calls.popleft()()
                self.timers.run_due()
                if self.purgatory.stepping():
                    self.purgatory.notify(STEP)     # requests in steps: one more step each
                for conn in self.connections.take_waiting():
                    try:
                        conn.process_frames()
                    except Exception as e:         # as for a socket event: that client alone pays
                        self._event_failed(conn, e)
                self.group_commit.run()
                if stats:
                    stats.record(time.perf_counter() - began)
        finally:
            self._shutdown()

    def _select_timeout(self):
        """0 while anything waits for the next pass; else until the first timer (at most 1 s)."""
        if self._calls or self.connections.waiting() or self.purgatory.stepping():
            return 0
        waits = [w for w in (self.group_commit.due_in(), self.timers.next_in()) if w is not None]
        return min(waits + [1.0])

    def _event_failed(self, source, e):
        """A socket's event handler raised: log it as the bug it is; close that
        connection (a listener or the waker goes on as it is)."""
        log.error("%s %s: %s: a bug in doze", type(source).__name__.strip("_"), getattr(source, "name", ""),
                  where(e))
        log.debug("the traceback", exc_info=e)
        if isinstance(source, Connection) and not source.closed:
            with contextlib.suppress(Exception):
                source.close(f"a bug in doze: {where(e)}")

    def run_in_loop(self, fn):
        """Run fn on the loop thread and return its result (for tests and the CLI)."""
        if threading.current_thread() is self.thread:
            return fn()
        done, box = threading.Event(), {}

        def call():
            try:
                box["result"] = fn()
            except BaseException as e:       # handed back to the caller's thread
                box["error"] = e
            done.set()
        self._calls.append(call)
        self.waker.wake()
        if not done.wait(10):
            raise TimeoutError("the broker loop did not run the call within 10 s")
        if "error" in box:
            raise box["error"]
        return box.get("result")

    def stop(self, clean=True):
        """Stop the loop (idempotent; callable from any thread or a signal handler).
        clean=False stops without the final fsync and index caches: a crash."""
        self._clean_stop = self._clean_stop and clean
        self._stopping = True
        self.waker.wake()

    def _shutdown(self):
        self.connections.close_all("broker stopping")
        if self.console is not None:
            self.console.close()
        self.listeners.close()
        if self._clean_stop:
            with contextlib.suppress(OSError):
                self.logs.flush_dirty()
        self.logs.close(self._clean_stop)
        self.store.close()
        self.dir_lock.close()
        self.selector.close()
        self.waker.close()
        self.stopped.set()


###############################################################################
# 22. EMBEDDING DOZE -- a broker in your own tests, and a small client
###############################################################################
# running() starts a broker on its own thread, on an ephemeral port in a
# temporary directory, with settings a test wants, and gives the test what it
# needs to test its own code against it: faults, a disk that fails, a clock
# it moves, restarts, the broker's state without a consumer, a reset. Client
# speaks the wire protocol on doze's own schemas (the demo and doze's tests
# use it too).

# What a test wants that Kafka's broker defaults do not give: a new consumer
# group's first join answered at once, not after group.initial.rebalance.delay.ms
# (3 s by default, for a cluster whose members start one by one; Testcontainers'
# Kafka and Spring's EmbeddedKafka set the same), and the first FindCoordinator
# answered at once, not COORDINATOR_NOT_AVAILABLE while the internal topic is
# made (librdkafka then waits half a second: 25 times the broker's start), and
# the internal topics made of one partition each, not Kafka's 50 (tens of ms
# of a test's first group or transaction). The command line keeps Kafka's
# ways; `settings` given to running() win over these.
TEST_DEFAULTS = {"group.initial.rebalance.delay.ms": 0, "doze.coordinator.waits.for.topic": False,
                 "offsets.topic.num.partitions": 1, "transaction.state.log.num.partitions": 1}
RESTARTS = ("clean", "kill", "power_cut")


class MovableClock:
    """The clock of a broker running() started: real time plus an offset a
    test moves forward (Embedded.advance), so that transaction and session
    timeouts, producer-id and transactional-id expiry and retention come
    without being waited out."""

    def __init__(self):
        self.offset_s = 0.0

    def __call__(self):
        return time.time() + self.offset_s

    def advance(self, ms):
        self.offset_s += ms / 1000

    def reset(self):
        self.offset_s = 0.0


# --- A disk that fails on purpose ---------------------------------------------------
# Everything doze writes goes through Files (§7), so a test can put this layer
# in its place (running(disk=FaultyDisk(...)) and make the disk fail as disks
# do: fsyncs or writes under a directory failing with an errno (EIO, a disk
# failing; ENOSPC, no room left), every fsync slower, meta.db's commits
# refused. It also remembers what a power cut would leave -- every file as of
# its last fsync, every directory entry as of its directory's, meta.db as of
# its last sync -- so power_cut() (or Embedded.restart("power_cut")) rewrites
# the data directory to exactly that. cut_at=N cuts the power at the N-th
# change the broker asks for: that change and every later one fail with EIO.

class FaultyDisk(Files):
    """A Files layer for tests (see above). Set what fails with fail_fsyncs,
    fail_writes, fail_meta_db, slow_fsyncs; heal() clears them. .labels
    names every change made, in order (which call, which file)."""

    SQLITE_OWN = ("meta.db-wal", "meta.db-shm", "meta.db-journal")
    fsyncs_on_a_thread = False          # its changes are numbered in one order: the loop makes them all

    def __init__(self, root=None, cut_at=None, on_cut=None):
        self.root = None
        self.cut_at, self.on_cut = cut_at, on_cut
        self.changes = 0
        self.labels = []
        self.dead = False
        self.paths = {}                  # fd -> path
        self.durable = {}                # path -> bytes as of the last fsync
        self.entries = set()             # paths whose directory entry is durable
        self.renamed = {}                # new path -> (old path, its durable bytes): renames not yet fsynced
        self.fsyncs = collections.Counter()   # path -> fsyncs asked of it
        self.heal()
        if root is not None:
            self.attach(root)

    def start_over(self):
        """A new, empty data directory (Embedded.reset): nothing known, nothing failing."""
        self.heal()
        self.root, self.dead, self.changes = None, False, 0
        for known in (self.labels, self.paths, self.durable, self.entries, self.renamed, self.fsyncs):
            known.clear()

    def attach(self, root):
        """The data directory this disk serves (the Broker says so at start):
        what is in it already counts as durable (it survived the last boot)."""
        if self.root is not None:
            return
        self.root = os.path.abspath(root)
        if os.path.isdir(self.root):
            self._everything_durable_now()
        self.meta = self._meta_files()                  # meta.db's files as of the last sync_file

    # --- the faults a test sets ---
    def fail_fsyncs(self, under=None, errno_=errno.EIO):
        """fsyncs of files under `under` (a partition's directory; None: any) fail with errno_."""
        self.fsync_failure = (os.path.abspath(under) if under else self.root, errno_)

    def fail_writes(self, under=None, errno_=errno.ENOSPC):
        """Writes under `under` fail with errno_ (ENOSPC: no room left; EIO: a failing disk)."""
        self.write_failure = (os.path.abspath(under) if under else self.root, errno_)

    def fail_meta_db(self, message="disk I/O error"):
        """meta.db's commits fail, as sqlite's do when its disk refuses them."""
        self.meta_db_failure = message

    def slow_fsyncs(self, seconds):
        """Every fsync (and meta.db's) takes this much longer: doze waits for it, as on a slow disk."""
        self.fsync_delay_s = seconds

    def cut_after(self, changes=1):
        """The power goes out at the change after the next `changes - 1` (1: the
        very next write, fsync, rename or meta.db commit): that one and every
        later one fail, as with cut_at; then restart("power_cut")."""
        self.cut_at = self.changes + changes

    def heal(self):
        """No fault any more (what failed stays failed: an offline partition
        stays offline until a restart, as in Kafka)."""
        self.fsync_failure = self.write_failure = self.meta_db_failure = None
        self.fsync_delay_s = 0

    def _fails(self, failure, path):
        if failure and (path == failure[0] or path.startswith(failure[0] + os.sep)):
            raise OSError(failure[1], os.strerror(failure[1]))

    def _everything_durable_now(self):
        """Every entry under the root, and every file but meta.db's (which has
        its own syncs here), durable as it is now."""
        self.entries.add(self.root)
        for directory, dirs, names in os.walk(self.root):
            for name in dirs + names:
                self.entries.add(os.path.join(directory, name))
            for name in names:
                if not name.startswith("meta.db"):
                    path = os.path.join(directory, name)
                    self.durable[path] = self._read(path)

    def _meta_files(self):
        """{meta.db and its WAL: bytes} as they are now."""
        out = {}
        for name in ("meta.db", "meta.db-wal"):
            path = os.path.join(self.root, name)
            if os.path.isfile(path):
                out[path] = self._read(path)
        return out

    @staticmethod
    def _read(path):
        with open(path, "rb") as f:
            return f.read()

    def _change(self, what=None):
        if self.dead:
            raise OSError(errno.EIO, "power is out")
        self.changes += 1
        caller = sys._getframe(1)
        what = what or caller.f_locals.get("path") or self.paths.get(caller.f_locals.get("fd"), "")
        what = os.path.relpath(what, self.root) if os.path.isabs(str(what)) else what
        self.labels.append(f"{caller.f_code.co_name} {what}")
        if self.cut_at is not None and self.changes >= self.cut_at:
            self.dead = True
            if self.on_cut:
                self.on_cut()
            raise OSError(errno.EIO, "power is out")

    # --- the Files interface ---
    def open_append(self, path, create):
        self._change()
        fd = super().open_append(path, create)
        path = os.path.abspath(path)
        self.paths[fd] = path
        if create:
            self.durable[path] = b""
        else:
            self.durable.setdefault(path, self._read(path))
        return fd

    def write(self, fd, data):
        self._change()
        self._fails(self.write_failure, self.paths.get(fd, ""))
        super().write(fd, data)

    def fsync(self, fd):
        self._change()
        self.fsyncs[self.paths.get(fd)] += 1
        if self.fsync_delay_s:
            time.sleep(self.fsync_delay_s)       # the disk's time, not a wait of doze's
        self._fails(self.fsync_failure, self.paths.get(fd, ""))
        super().fsync(fd)
        self.durable[self.paths[fd]] = self._read(self.paths[fd])

    def truncate(self, path, size):
        self._change()
        super().truncate(path, size)                 # doze's truncate fsyncs
        self.durable[os.path.abspath(path)] = self._read(path)

    def truncate_fd(self, fd, size):
        self._change()
        super().truncate_fd(fd, size)

    def close(self, fd):
        super().close(fd)                            # closing is not a change
        self.paths.pop(fd, None)

    def mkdir(self, path):
        self._change()
        super().mkdir(path)

    def fsync_dir(self, path):
        self._change()
        super().fsync_dir(path)
        path = os.path.abspath(path)
        for name in os.listdir(path):
            self.entries.add(os.path.join(path, name))
        for new in [n for n in self.renamed if os.path.dirname(n) == path]:
            del self.renamed[new]

    def write_file(self, path, data):
        self._change()
        super().write_file(path, data)
        self.durable.setdefault(os.path.abspath(path), b"")    # written, never fsynced

    def unlink(self, path):
        self._change()
        super().unlink(path)
        path = os.path.abspath(path)
        self.durable.pop(path, None)
        self.entries.discard(path)

    def rename(self, src, dst):
        """Until its directory is fsynced, a power cut undoes a rename: the file
        is back under its old name (if that name was durable), as of its last fsync."""
        self._change(src)
        super().rename(src, dst)
        src, dst = os.path.abspath(src), os.path.abspath(dst)
        before = self.renamed.pop(src, (src, self.durable.get(src, b"")) if src in self.entries else None)
        if before is not None:
            self.renamed[dst] = before
        self.durable[dst] = self.durable.pop(src, b"")
        self.entries.discard(src)

    def rmtree(self, path):
        self._change()
        super().rmtree(path)
        path = os.path.abspath(path)
        for known in (self.durable, self.entries):
            for p in [p for p in known if p == path or p.startswith(path + os.sep)]:
                known.pop(p) if isinstance(known, dict) else known.discard(p)

    def commit(self, db):
        try:
            self._change("meta.db")
        except OSError as e:
            raise sqlite3.OperationalError(f"disk I/O error ({e.strerror})") from None
        if self.meta_db_failure:
            raise sqlite3.OperationalError(self.meta_db_failure)
        super().commit(db)

    def syncfs(self, path):
        """One change: every file of the data directory (but meta.db's, which
        keeps its own syncs here) durable as it is now, and every entry."""
        self._change(path)
        if self.fsync_delay_s:
            time.sleep(self.fsync_delay_s)
        if self.fsync_failure:                   # some file's writes failed: so does the syncfs
            raise OSError(self.fsync_failure[1], os.strerror(self.fsync_failure[1]))
        self._everything_durable_now()
        self.renamed.clear()
        return True

    def sync_file(self, path, fallback=None, keep=None):
        self._change(path)
        if self.fsync_delay_s:
            time.sleep(self.fsync_delay_s)
        super().sync_file(path, fallback, keep)
        if os.path.basename(path).startswith("meta.db"):
            self.meta = self._meta_files()

    # --- the power cut ---
    def _restore_meta(self):
        """meta.db as of its last sync."""
        for name in ("meta.db",) + self.SQLITE_OWN:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(os.path.join(self.root, name))
        for path, content in self.meta.items():
            with open(path, "wb") as f:
                f.write(content)

    def power_cut(self, written_back=False):
        """Rewrite the data directory to what a power cut leaves: every write
        not fsynced forgotten, every entry whose directory was not fsynced
        gone (call it with the broker stopped). written_back: the kernel had
        written every log file and directory back (as it may at any moment),
        but meta.db is as of its last sync."""
        self.dead, self.cut_at = False, None          # the power is back on
        if written_back:
            self._restore_meta()
            return
        for path, content in self.durable.items():
            if os.path.isfile(path):
                with open(path, "wb") as f:
                    f.write(content)
        for new, (old, content) in self.renamed.items():
            with contextlib.suppress(FileNotFoundError):
                os.unlink(new)
            with open(old, "wb") as f:
                f.write(content)
            self.entries.discard(new)
            self.entries.add(old)
        self._restore_meta()
        if self.root not in self.entries:
            shutil.rmtree(self.root, ignore_errors=True)
            return
        for directory, dirs, names in os.walk(self.root):
            for name in list(dirs):
                if os.path.join(directory, name) not in self.entries:
                    shutil.rmtree(os.path.join(directory, name))
                    dirs.remove(name)
            for name in names:
                path = os.path.join(directory, name)
                if path not in self.entries and name not in self.SQLITE_OWN:
                    os.unlink(path)


# --- Embedded: the broker a test holds ---------------------------------------------
# running() gives a test an Embedded: the Broker (every attribute of the
# Broker reads through it: bootstrap, port, run_in_loop, ...), and what a test
# does to it -- its faults (§18), its disk, its clock, a restart, its state
# read without a consumer (the console's views, §19, as a superuser sees
# them), a reset. A restart keeps the ports, the data directory, the faults,
# the disk and the clock.

class Embedded:
    """A broker running in this process for a test (see above)."""

    def __init__(self, settings=None, data_dir=None, port=0, host="127.0.0.1", disk=None, clock=None,
                 defaults=None, control_token=None):
        self.tmp = None if data_dir is not None else tempfile.mkdtemp(prefix="doze-")
        self.data_dir = os.path.abspath(data_dir or self.tmp)
        self.settings = dict(settings or {})
        self.defaults = TEST_DEFAULTS if defaults is None else defaults
        self.disk = disk if disk is not None else Files()
        self.clock = clock if clock is not None else MovableClock()
        self.faults = Faults()
        self.control = Control(self, control_token) if control_token else None
        self.broker = self._start(port, host)

    def _start(self, port, host, kept=None):
        """A broker on these settings, and on `kept` (after a restart or a reset: the ports, see _where)."""
        settings = dict(self.settings, **(kept or {}))
        config = Config(settings, data_dir=self.data_dir, host=host, port=port, clock=self.clock)
        for name, value in self.defaults.items():
            config.set_default(name, value)          # not given: described as defaults
        broker = Broker(config, files=self.disk, faults=self.faults, control=self.control)
        broker.serve_in_thread()
        return broker

    def __getattr__(self, name):
        broker = self.__dict__.get("broker")
        if broker is None:
            raise AttributeError(name)
        return getattr(broker, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        """Stop the broker; remove its directory if running() made it."""
        self._stop(clean=True)
        if self.tmp:
            shutil.rmtree(self.tmp, ignore_errors=True)

    def _stop(self, clean):
        self.broker.stop(clean)
        if self.broker.thread is not None:
            self.broker.thread.join(10)

    # --- a restart, a reset, the clock ---
    def restart(self, how="clean"):
        """Stop the broker and start it again on the same ports and data:
        "clean"; "kill", as kill -9 (no final fsync, no index caches); or
        "power_cut", as kill -9 and then only what was fsynced (the disk must
        be a FaultyDisk). Clients reconnect as they would to a Kafka that restarted."""
        if how not in RESTARTS:
            raise ValueError(f"restart how? one of {', '.join(RESTARTS)}, not {how!r}")
        if how == "power_cut" and not isinstance(self.disk, FaultyDisk):
            raise ValueError("a power cut needs running(disk=FaultyDisk()): it knows what was fsynced")
        old, kept = self.broker, self._where()
        self._stop(clean=how == "clean")
        if how == "power_cut":
            self.disk.power_cut()
        self.broker = self._start(old.port, old.config.host, kept)

    def reset(self):
        """Every topic, group, transactional id, ACL, SCRAM user and fault gone,
        and the clock back to real time: a new broker on an empty directory,
        on the same ports (what a test between two others wants)."""
        old, kept = self.broker, self._where()
        self._stop(clean=False)
        for entry in dozes_own(self.data_dir):
            if os.path.isdir(entry):
                shutil.rmtree(entry)
            else:
                os.unlink(entry)
        self.faults.clear()
        if isinstance(self.clock, MovableClock):
            self.clock.reset()
        if isinstance(self.disk, FaultyDisk):
            self.disk.start_over()
        self.broker = self._start(old.port, old.config.host, kept)

    def _where(self):
        """The settings that keep a restarted broker where it was: its listeners' ports, its console's."""
        kept = {"listeners": self.broker.config["listeners"]}
        if self.broker.console is not None:
            kept["doze.console.listener"] = self.broker.console.address
        return kept

    def advance(self, ms):
        """Move the broker's clock ms forward; returns once the loop has run
        what came due (a timed-out transaction aborted, a silent member gone)."""
        self.clock.advance(ms)
        self.settle()

    def settle(self, passes=2):
        """Return once the loop has made whole passes from now: what was due ran."""
        self.broker.waker.wake()
        for _ in range(passes):
            self.broker.run_in_loop(lambda: None)

    # --- the broker's state, without a consumer ---
    def views(self):
        """The console's views of the broker as a superuser sees them (on the loop only)."""
        return ConsoleViews(self.broker, ConsoleViewer(None, "User:doze-test", "127.0.0.1"))

    def look(self, fn):
        """fn(ConsoleViews) on the loop -> what it returns (the console's /api/ dicts)."""
        return self.broker.run_in_loop(lambda: fn(self.views()))

    def records(self, topic, partition=0, view="committed"):
        """A partition's records as a consumer gets them: view "committed"
        (read_committed), "uncommitted" (read_uncommitted), or "log" (as stored,
        markers and aborted records included) -> [dict]: a record's offset,
        key, value (bytes or None), headers [(key, value)], timestamp,
        producer_id/epoch, transactional, txn_status; a marker's offset,
        control (COMMIT or ABORT), producer_id/epoch."""
        if view not in BROWSER_VIEWS:
            raise ValueError(f"view: one of {', '.join(BROWSER_VIEWS)}")
        rows, offset = [], None
        while True:
            query = {"view": view, "format": "json", "limit": str(CONSOLE_MAX_ROWS),
                     **({"offset": str(offset)} if offset is not None else {"offset": "earliest"})}
            page = self.look(lambda v: v.records(topic, partition, query))
            if page is None:
                raise KeyError(f"no partition {topic}-{partition}")
            rows += [plain_record(item) for item in page["items"] if item["kind"] != "line"]
            following = page["next_offset"]
            if following is None or following == offset or \
                    view == "committed" and following >= page["last_stable_offset"]:
                return rows                        # the end, or (committed) the LSO: what is open waits
            offset = following

    def offsets(self, topic, partition=0):
        """{log_start_offset, last_stable_offset, high_watermark} of a partition."""
        page = self.look(lambda v: v.records(topic, partition, {"view": "log", "limit": "1", "offset": "latest"}))
        if page is None:
            raise KeyError(f"no partition {topic}-{partition}")
        return {k: page[k] for k in ("log_start_offset", "last_stable_offset", "high_watermark")}

    def transactions(self):
        """Every transactional id: state, producer id and epoch, partitions, staged offsets."""
        return self.look(lambda v: v.cluster()["transactions"])

    def transaction(self, transactional_id):
        """One transactional id, with its history and its decision's markers (None: unknown)."""
        return self.look(lambda v: v.transaction(transactional_id))

    def producers(self, topic=None, partition=None):
        """The producers the partitions remember (idempotence, open transactions)."""
        return [p for p in self.look(lambda v: v.cluster()["producers"])
                if topic in (None, p["topic"]) and partition in (None, p["partition"])]

    def committed(self, group_id):
        """A group's committed offsets -> {(topic, partition): offset}."""
        group = self.look(lambda v: v.group(group_id))
        return {} if group is None else {(o["topic"], o["partition"]): o["committed_offset"]
                                         for o in group["offsets"]}

    def wait_until(self, check, timeout_s=10.0):
        """Poll check(self) until it is true (-> its value); TimeoutError after timeout_s."""
        deadline = time.monotonic() + timeout_s
        while True:
            value = check(self)
            if value:
                return value
            if time.monotonic() > deadline:
                raise TimeoutError(f"not true within {timeout_s} s")
            time.sleep(0.01)               # polling: what it waits for is the check


SEGMENT_FILE = re.compile(r"\d{20}\.\w+")


def dozes_own(data_dir):
    """What doze made in a data directory (meta.db and its files, the lock,
    every partition's directory of segment files) -- what a reset removes,
    and nothing else that may stand there (--data-dir . is someone's)."""
    found = []
    for name in os.listdir(data_dir):
        path = os.path.join(data_dir, name)
        if name in ("meta.db", "meta.db-wal", "meta.db-shm", "meta.db-journal", ".lock"):
            found.append(path)
        elif re.fullmatch(r".+-\d+", name) and os.path.isdir(path) and \
                all(SEGMENT_FILE.fullmatch(f) for f in os.listdir(path)):
            found.append(path)
    return found


def plain_record(item):
    """A row of the console's message browser as a test reads it: bytes, not base64."""
    if item["kind"] != "record":
        return {k: v for k, v in item.items() if k != "kind"}

    def raw(prefix, of):
        text = of.get(f"{prefix}_b64")
        return None if text is None else base64.b64decode(text)
    return {"offset": item["offset"], "key": raw("key", item), "value": raw("value", item),
            "headers": [(raw("key", h).decode("utf-8", "replace"), raw("value", h)) for h in item["headers"]],
            **{k: item[k] for k in ("timestamp", "producer_id", "producer_epoch", "transactional", "txn_status")}}


def running(settings=None, data_dir=None, port=0, host="127.0.0.1", disk=None, clock=None, defaults=None):
    """A broker on an ephemeral port in a temporary directory, for tests, with
    TEST_DEFAULTS (or `defaults`) under the settings given; an Embedded, to
    use as a context:

        with doze_kafka.running({"num.partitions": 3}) as broker:
            produce_to(broker.bootstrap)
            broker.faults.add("EndTxn", error="NOT_COORDINATOR", times=1)
            broker.restart("kill")
    """
    return Embedded(settings, data_dir, port, host, disk, clock, defaults)


# --- Control: the same, over HTTP, for tests in other languages ------------------
# `python3 doze_kafka.py --control` serves what Embedded does on the console's
# listener, under /control: a test in Java, Go or JavaScript that runs doze as
# a process adds faults, moves the clock, restarts it (the process keeps its
# ports), resets it and reads its state. Off unless asked; only on a loopback
# console, only for loopback clients; every request carries the token printed
# at start (Authorization: Bearer TOKEN); the console's Host check; no POST
# from another Origin (a browser's page elsewhere cannot forge one). The
# broker starts as running() starts one (TEST_DEFAULTS: no test waits for a
# rebalance's delay). JSON in and out; bytes as base64 (the console's rows); a
# reset removes only what doze made in the data directory (dozes_own). The routes:
#   GET  /control                      faults, clock offset, starts, bootstrap
#   POST /control/faults               {"api": "EndTxn", "error": "NOT_COORDINATOR", "times": 1, ...} -> {"id"}
#   POST /control/faults/remove        {"id": 3}           POST /control/faults/clear
#   POST /control/advance              {"ms": 60000}
#   POST /control/disk                 {"fail_fsyncs": "orders-0", "errno": "EIO"}, {"fail_writes": ...},
#                                      {"fail_meta_db": "disk I/O error"}, {"slow_fsyncs": 0.5}, {"heal": true}
#   POST /control/restart              {"how": "clean" | "kill" | "power_cut"}     POST /control/reset
#   GET  /control/faults                   the faults, as Faults.list gives them
#   GET  /control/records?topic=T&partition=0&view=committed|uncommitted|log&offset=N
#                                      a page of at most CONSOLE_MAX_ROWS items (kind "record",
#                                      "marker"; "batch" where records do not decode); the next
#                                      page from offset=next_offset (null: the end, or the LSO)
#   GET  /control/offsets?topic=T&partition=0     /control/transactions[?id=X]
#   GET  /control/producers?topic=T&partition=0   /control/committed?group=G
# A restart or a reset is answered (202) first, then carried out by the
# command line's main thread (Control.serve): the loop cannot stop itself and
# start again; GET /control answers again, with one more start, once it is done.

CONTROL_DISK = {"fail_fsyncs": "fail_fsyncs", "fail_writes": "fail_writes"}


class Control:
    """The control endpoint of an Embedded the command line runs (see above)."""

    def __init__(self, embedded, token):
        self.embedded, self.token = embedded, token
        self.actions = queue.Queue()      # (what, how) for the main thread: restart, reset, stop
        self.starts = 1

    def answer(self, method, path, query, headers, body, ip):
        """An HTTP request under /control -> (status, content type, body, extra headers)."""
        if not ipaddress.ip_address(ip.split("%")[0]).is_loopback:
            return self._json(403, {"error": "the control endpoint answers loopback clients only"})
        given = headers.get("authorization", "")
        if not (given.startswith("Bearer ") and hmac.compare_digest(given[7:].encode(), self.token.encode())):
            return self._json(401, {"error": "Authorization: Bearer <the token doze printed at start>"})
        if method == "POST" and not same_origin(headers) and "origin" in headers:
            return self._json(403, {"error": "a POST from another origin is refused"})
        try:
            fields = json.loads(body or b"{}") if method == "POST" else {}
            if not isinstance(fields, dict):
                raise ValueError("the body is a JSON object")
            route = CONTROL_ROUTES.get((method, path))
            if route is None:
                return self._json(404, {"error": f"no {method} {path}: see doze_kafka.py's Control comment"})
            return self._json(*route(self, fields, query))
        except (ValueError, KeyError, TypeError) as e:
            return self._json(400, {"error": str(e).strip("'\"")})

    @staticmethod
    def _json(status, data):
        return status, "application/json; charset=utf-8", json.dumps(data).encode(), ()

    # --- the routes: each -> (status, data) ---
    def summary(self, fields, query):
        e = self.embedded
        return 200, {"faults": e.faults.list(), "clock_offset_ms": round(getattr(e.clock, "offset_s", 0) * 1000),
                     "starts": self.starts, "bootstrap": e.broker.bootstrap, "data_dir": e.data_dir}

    def add_fault(self, fields, query):
        fields = dict(fields)
        return 201, {"id": self.embedded.faults.add(fields.pop("api"), **fields)}

    def remove_fault(self, fields, query):
        return 200, {"removed": self.embedded.faults.remove(int(fields["id"]))}

    def clear_faults(self, fields, query):
        self.embedded.faults.clear()
        return 200, {"faults": []}

    def advance(self, fields, query):
        self.embedded.clock.advance(float(fields["ms"]))      # due timers run in this very pass
        return 200, {"clock_offset_ms": round(self.embedded.clock.offset_s * 1000)}

    def disk(self, fields, query):
        disk = self.embedded.disk
        if not isinstance(disk, FaultyDisk):
            raise ValueError("this broker's disk fails no faults")
        if fields.get("heal"):
            disk.heal()
        for name, method in CONTROL_DISK.items():
            if name in fields:
                code = fields.get("errno", "EIO" if name == "fail_fsyncs" else "ENOSPC")
                getattr(disk, method)(os.path.join(self.embedded.data_dir, fields[name] or ""),
                                      getattr(errno, str(code)))
        if "fail_meta_db" in fields:
            disk.fail_meta_db(fields["fail_meta_db"] or "disk I/O error")
        if "slow_fsyncs" in fields:
            disk.slow_fsyncs(float(fields["slow_fsyncs"]))
        return 200, {"disk": "as asked"}

    def restart(self, fields, query):
        how = fields.get("how", "clean")
        if how not in RESTARTS:
            raise ValueError(f"how: one of {', '.join(RESTARTS)}")
        self.actions.put(("restart", how))
        return 202, {"restarting": how, "starts": self.starts + 1}

    def reset(self, fields, query):
        self.actions.put(("reset", None))
        return 202, {"resetting": True, "starts": self.starts + 1}

    def records(self, fields, query):
        views = self.embedded.views()
        topic, partition, view = query["topic"], int(query.get("partition", 0)), query.get("view", "committed")
        if view not in BROWSER_VIEWS:
            raise ValueError(f"view: one of {', '.join(BROWSER_VIEWS)}")
        page = views.records(topic, partition, {"view": view, "format": "json", "limit": str(CONSOLE_MAX_ROWS),
                                                "offset": query.get("offset", "earliest")})
        if page is None:
            return 404, {"error": f"no partition {topic}-{partition}"}
        return 200, {"items": [item for item in page["items"] if item["kind"] != "line"],
                     **{k: page[k] for k in ("next_offset", "log_start_offset", "last_stable_offset",
                                             "high_watermark")}}

    def offsets(self, fields, query):
        status, page = self.records(fields, dict(query, view="log", offset="latest"))
        return status, page if status != 200 else {k: page[k] for k in ("log_start_offset", "last_stable_offset",
                                                                         "high_watermark")}

    def transactions(self, fields, query):
        views = self.embedded.views()
        if "id" in query:
            found = views.transaction(query["id"])
            return (200, found) if found is not None else (404, {"error": f"no transactional id {query['id']}"})
        return 200, {"transactions": views.cluster()["transactions"]}

    def producers(self, fields, query):
        rows = self.embedded.views().cluster()["producers"]
        return 200, {"producers": [p for p in rows if query.get("topic") in (None, p["topic"]) and
                                   query.get("partition") in (None, str(p["partition"]))]}

    def committed(self, fields, query):
        group = self.embedded.views().group(query["group"])
        return 200, {"offsets": [] if group is None else group["offsets"]}

    # --- the main thread's side ---
    def serve(self):
        """The command line's main thread: carry out restarts and resets as
        they are asked, until stop() (a signal); then stop the broker."""
        while True:
            what, how = self.actions.get()
            if what == "stop":
                self.embedded.close()
                return
            try:
                if what == "restart":
                    self.embedded.restart(how)
                else:
                    self.embedded.reset()
                self.starts += 1
            except (OSError, ValueError) as e:
                log.error("control: the %s failed: %s", what, e)

    def stop(self):
        """Stop serving (from a signal handler)."""
        self.actions.put(("stop", None))


CONTROL_ROUTES = {
    ("GET", "/control"): Control.summary, ("POST", "/control/faults"): Control.add_fault,
    ("GET", "/control/faults"): lambda c, f, q: (200, {"faults": c.embedded.faults.list()}),
    ("POST", "/control/faults/remove"): Control.remove_fault, ("POST", "/control/faults/clear"): Control.clear_faults,
    ("POST", "/control/advance"): Control.advance, ("POST", "/control/disk"): Control.disk,
    ("POST", "/control/restart"): Control.restart, ("POST", "/control/reset"): Control.reset,
    ("GET", "/control/records"): Control.records, ("GET", "/control/offsets"): Control.offsets,
    ("GET", "/control/transactions"): Control.transactions, ("GET", "/control/producers"): Control.producers,
    ("GET", "/control/committed"): Control.committed,
}


# --- pytest: fixtures from the vendored file alone -------------------------------
# A project's conftest.py says `pytest_plugins = ["doze_kafka"]` and its tests
# take `doze_broker` (one broker for the whole session, reset before each
# test: a few milliseconds) or `fresh_doze_broker` (one of the test's own).
# They exist only when pytest has loaded this module, and they use the pytest
# already loaded (sys.modules): doze itself never imports pytest or anything
# beyond the standard library (§1).

if "pytest" in sys.modules:
    pytest = sys.modules["pytest"]

    @pytest.fixture(scope="session")
    def doze_session_broker():
        """One broker for the whole test session (doze_broker resets it)."""
        with running() as broker:
            yield broker

    @pytest.fixture
    def doze_broker(doze_session_broker):
        """The session's broker, reset before the test: no topic, group,
        transactional id, ACL, SCRAM user or fault of another test."""
        doze_session_broker.reset()
        return doze_session_broker

    @pytest.fixture
    def fresh_doze_broker():
        """A broker of the test's own, stopped after it."""
        with running() as broker:
            yield broker


def recv_exactly(sock, n):
    """n bytes from a blocking socket; EOFError if it closes first."""
    data = bytearray()
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise EOFError("the broker closed the connection")
        data += chunk
    return bytes(data)


class Client:
    """A small blocking Kafka client of one connection, on doze's own schemas
    (encode_request, decode_response): for tests, scripts and the demo.

        with doze_kafka.Client(broker.bootstrap) as c:
            c.call(ApiKey.METADATA, 12, topics=None).brokers

    call() sends one request and reads its answer; send() and receive()
    pipeline (answers come in the order the requests went). A version left
    out is the newest doze serves."""

    def __init__(self, address, client_id="doze-client", timeout=10.0):
        if isinstance(address, int):
            address = ("127.0.0.1", address)
        elif isinstance(address, str):
            host, _, port = address.rpartition(":")
            address = (host.strip("[]") or "127.0.0.1", int(port))
        self.sock = socket.create_connection(address, timeout=timeout)
        self.client_id = client_id
        self.next_correlation_id = 0

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        self.sock.close()

    def send(self, api_key, version=None, /, **fields):
        """Send one request -> (its correlation id, its version)."""
        spec = HANDLERS[api_key][0]
        version = spec.classic_max if version is None else version        # the classic protocol unless asked
        self.next_correlation_id += 1
        self.sock.sendall(encode_request(spec, version, self.next_correlation_id, Msg(**fields), self.client_id))
        return self.next_correlation_id, version

    def read_frame(self):
        """The next response frame, without its size."""
        return recv_exactly(self.sock, I32.unpack(recv_exactly(self.sock, 4))[0])

    def receive(self, api_key, version):
        """The next answer -> (correlation id, decoded response Msg)."""
        return decode_response(HANDLERS[api_key][0], version, self.read_frame())

    def call(self, api_key, version=None, /, **fields):
        """One request and its answer (a Msg)."""
        correlation_id, version = self.send(api_key, version, **fields)
        got, msg = self.receive(api_key, version)
        if got != correlation_id:
            raise ProtocolError(f"correlation id {got} answers {correlation_id}")
        return msg


###############################################################################
# 23. DEMO -- the transaction protocol step by step, on a broker in this process
###############################################################################
# python3 doze_kafka.py demo starts a broker (with its console and the txn
# trace) and walks through the classic transaction protocol with a small
# client of its own on the codec above: each step says what it sends, what
# came back and why, naming the KIP or Kafka class that makes the rule.
# demo() returns each step's outcome, so the tests check them.

class DemoClient(Client):
    """The demo's client: Client, with the verbs its steps use."""

    # --- the verbs the steps use ---
    def find_coordinator(self, key, key_type):
        """FindCoordinator, asked again (as clients do) while the answer is
        COORDINATOR_NOT_AVAILABLE -> (the answer, how many times it was asked)."""
        for asked in range(1, 50):
            found = self.call(ApiKey.FIND_COORDINATOR, 4, key_type=key_type, coordinator_keys=[key]).coordinators[0]
            if found.error_code != ErrorCode.COORDINATOR_NOT_AVAILABLE:
                break
            time.sleep(0.02)
        return found, asked

    def init(self, transactional_id, timeout_ms=60000):
        return self.call(ApiKey.INIT_PRODUCER_ID, 4, transactional_id=transactional_id,
                         transaction_timeout_ms=timeout_ms, producer_id=-1, producer_epoch=-1)

    def produce(self, topic, partition, values, pid=-1, epoch=-1, seq=-1, transactional_id=None, version=9):
        batch = build_batch([(None, v, ()) for v in values], timestamp_ms=int(time.time() * 1000), producer_id=pid,
                            producer_epoch=epoch, base_sequence=seq,
                            attributes=ATTR_TRANSACTIONAL if transactional_id else 0)
        r = self.call(ApiKey.PRODUCE, version, transactional_id=transactional_id, acks=-1, timeout_ms=10000,
                      topic_data=[Msg(name=topic, partition_data=[Msg(index=partition, records=batch)])])
        return r.responses[0].partition_responses[0]

    def add_partitions(self, transactional_id, pid, epoch, *tps):
        r = self.call(ApiKey.ADD_PARTITIONS_TO_TXN, 3, transactional_id=transactional_id, producer_id=pid,
                      producer_epoch=epoch, topics=[Msg(name=t, partitions=[p for tt, p in tps if tt == t])
                                                    for t in dict.fromkeys(t for t, _ in tps)])
        return [p.partition_error_code for t in r.results_by_topic for p in t.results_by_partition]

    def end(self, transactional_id, pid, epoch, commit, version=3):
        """EndTxn -> its error code; v5 (transaction version 2): the answer, the next epoch in it."""
        r = self.call(ApiKey.END_TXN, version, transactional_id=transactional_id, producer_id=pid,
                      producer_epoch=epoch, committed=commit)
        return r if version >= 5 else r.error_code

    def finalize(self, feature, level):
        """UpdateFeatures, as `kafka-features upgrade --feature NAME=LEVEL` sends it -> its error code."""
        return self.call(ApiKey.UPDATE_FEATURES, 2, feature_updates=[
            Msg(feature=feature, max_version_level=level, upgrade_type=FEATURE_UPGRADE)]).error_code

    def describe(self, transactional_id):
        """DescribeTransactions, as `kafka-transactions describe` sends it -> (state, ["topic-p", ...])."""
        t = self.call(ApiKey.DESCRIBE_TRANSACTIONS, 0, transactional_ids=[transactional_id]).transaction_states[0]
        return t.transaction_state, [f"{x.topic}-{p}" for x in t.topics for p in x.partitions]

    def set_broker_config(self, name, value):
        """IncrementalAlterConfigs on the cluster's default (kafka-configs --entity-default); None deletes."""
        r = self.call(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, validate_only=False, resources=[Msg(
            resource_type=RESOURCE_BROKER, resource_name="", configs=[
                Msg(name=name, config_operation=1 if value is None else 0, value=value)])])
        return r.responses[0].error_code

    def fetch(self, topic, partition, offset, read_committed):
        r = self.call(ApiKey.FETCH, 12, replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20,
                      isolation_level=int(read_committed), topics=[Msg(topic=topic, partitions=[
                          Msg(partition=partition, fetch_offset=offset, partition_max_bytes=1 << 20)])])
        part = r.responses[0].partitions[0]
        data, values = bytes(part.records or b""), []
        for start, h, end in whole_batches(data):
            batch = data[start:end]
            if h.attributes & ATTR_CONTROL:
                values.append((h.base_offset, h.producer_id, None, control_type(batch)))
            else:
                values += [(h.base_offset + rec[0], h.producer_id, rec[3], None) for rec in decode_records(batch)]
        return part, values


DEMO_TOPIC = "demo-orders"
DEMO_TIMEOUT_MS = 2000        # step 7's: long enough that a slow machine still sees the LSO held
DEMO_MARKER_DELAY_MS = 500    # step 9's: the markers' trip in Kafka's timing, made long enough to see
DEMO_HOLD_MS = 600            # step 12's: how late the late EndTxn is
DEMO_LAB_FIRST = 10
DEMO_LAB = ("\n--- The lab: what goes wrong, and what Kafka does about it ---\n"
            "Steps 10 to 12 break things on purpose: a zombie, a hanging transaction, a late EndTxn.")
DEMO_IDS = "demo,demo-new-instance,demo-abandoned,demo-tx,demo-buggy,demo-late,demo-late-retry,demo-late-2,demo-features"


def demo_values(values, aborted=()):
    """What a consumer keeps of fetched (offset, producer, value, control
    type): it drops an aborted transaction's records, from its first offset
    to its ABORT marker, and the markers (as Java's consumer)."""
    starts = sorted((a.first_offset, a.producer_id) for a in aborted)
    kept, dropping = [], set()
    for offset, pid, value, control in values:
        while starts and starts[0][0] <= offset:
            dropping.add(starts.pop(0)[1])
        if control is not None:
            if control == CONTROL_ABORT:
                dropping.discard(pid)
        elif pid not in dropping:
            kept.append(value.decode())
    return kept


class DemoDisk(Files):
    """The disk the demo's crash step uses: writes to one partition's
    directory fail while `refusing` names it (the rest as Files)."""

    def __init__(self):
        self.refusing, self.paths = None, {}

    def refuse(self, directory):
        """Refuse writes under directory from now on (None: refuse none)."""
        self.refusing = directory

    def open_append(self, path, create):
        fd = super().open_append(path, create)
        self.paths[fd] = path
        return fd

    def write(self, fd, data):
        if self.refusing and self.paths.get(fd, "").startswith(self.refusing + os.sep):
            raise OSError(errno.ENOSPC, "the demo's disk refuses this write")
        super().write(fd, data)


class Demo:
    """The steps, in order; each prints its story and returns what it saw."""

    def __init__(self, data_dir, say, pause, settings, console_default=None):
        self.data_dir, self.say, self.pause, self.settings = data_dir, say, pause, settings
        self.console_default = console_default    # the console's address unless a setting names one
        self.disk = DemoDisk()
        self.faults = Faults()                    # the lab's late EndTxn (a held request)
        self.broker = self.start()
        self.connect()

    def connect(self):
        self.c = DemoClient(self.broker.port, "demo")
        self.watch = DemoClient(self.broker.port, "demo-watch")      # polls states: not traced

    def start(self):
        config = Config(self.settings, data_dir=self.data_dir, host="127.0.0.1", port=0)
        if self.console_default:
            config.set_default("doze.console.listener", self.console_default)
        broker = Broker(config, files=self.disk, faults=self.faults)
        broker.serve_in_thread("doze-demo")
        return broker

    def stop(self, clean=True):
        self.c.close()
        self.watch.close()
        self.broker.stop(clean)
        self.broker.thread.join(10)

    def restart(self, clean=True, **settings):
        """Stop the broker and start it again on the same data, with `settings` changed;
        the console comes back on the same address, the disk healthy again."""
        console = self.broker.console and self.broker.console.address
        self.stop(clean)
        self.disk.refuse(None)
        if console:
            self.settings["doze.console.listener"] = console
            self.console_default = None
        self.settings.update(settings)
        self.broker = self.start()
        self.connect()

    def step(self, number, title, text):
        self.say(f"\n=== Step {number}: {title} ===\n{text}")

    def explain(self, text):
        self.say(f"   {text}")

    def run(self):
        results = []
        steps = [self.init_producer, self.idempotence, self.transaction, self.commit, self.abort, self.fencing,
                 self.timeout, self.crash, self.kafka_timing, self.zombie, self.hanging, self.late_end_txn]
        self.c.call(ApiKey.CREATE_TOPICS, 7, topics=[Msg(name=DEMO_TOPIC, num_partitions=2, replication_factor=-1,
                                                         configs=[])], timeout_ms=5000, validate_only=False)
        for number, step in enumerate(steps, 1):
            if number == DEMO_LAB_FIRST:
                self.say(DEMO_LAB)
            results.append(step(number))
            if number < len(steps):
                self.pause()
        return results

    def committed_offset(self, group="demo-group"):
        r = self.c.call(ApiKey.OFFSET_FETCH, 7, group_id=group, require_stable=False,
                        topics=[Msg(name=DEMO_TOPIC, partition_indexes=[0])])
        return r.topics[0].partitions[0].committed_offset

    def state_of(self, transactional_id):
        """Its state, asked by ListTransactions (which names no id: the trace leaves the polls out)."""
        r = self.watch.call(ApiKey.LIST_TRANSACTIONS, 1, state_filters=[], producer_id_filters=[], duration_filter=-1)
        return next((t.transaction_state for t in r.transaction_states if t.transactional_id == transactional_id), None)

    def watch_hw(self, partition):
        r = self.watch.call(ApiKey.LIST_OFFSETS, 7, replica_id=-1, isolation_level=0, topics=[
            Msg(name=DEMO_TOPIC, partitions=[Msg(partition_index=partition, timestamp=LATEST_TIMESTAMP)])])
        return r.topics[0].partitions[0].offset

    def until_state(self, transactional_id, states, limit_s=10.0):
        deadline = time.monotonic() + limit_s
        while (state := self.state_of(transactional_id)) not in states and time.monotonic() < deadline:
            time.sleep(0.05)
        return state

    def read_committed(self, partition, client=None):
        """What a read_committed consumer of the partition keeps, and the Fetch's answer."""
        part, values = (client or self.c).fetch(DEMO_TOPIC, partition, 0, read_committed=True)
        return demo_values(values, part.aborted_transactions or []), part

    # --- the steps ---
    def init_producer(self, n):
        self.step(n, "FindCoordinator and InitProducerId: the coordinator, a producer id and an epoch",
                  "A transactional producer first finds its transaction coordinator. Kafka hashes the\n"
                  "transactional.id onto one of __transaction_state's partitions (Utils.abs(id.hashCode()) %\n"
                  "transaction.state.log.num.partitions, 50 by default: Kafka's TransactionStateManager\n"
                  ".partitionFor), and that partition's leader is the coordinator: it keeps the id's state as\n"
                  "records appended to that partition. Then the producer asks it for a producer id and epoch\n"
                  "(KIP-98; TransactionCoordinator.handleInitProducerId). Sent: FindCoordinator key_type=1\n"
                  "demo-tx, then InitProducerId transactional_id=demo-tx.")
        found, asked = self.c.find_coordinator("demo-tx", COORDINATOR_TRANSACTION)
        state_partition = transaction_state_partition(self.broker.config, "demo-tx")
        r = self.c.init("demo-tx")
        self.pid, self.epoch = r.producer_id, r.producer_epoch
        self.explain("FindCoordinator: " + ("COORDINATOR_NOT_AVAILABLE first (Kafka makes __transaction_state on "
                                             "the first FindCoordinator that needs it; the client asks again), "
                                             "then " if asked > 1 else "") +
                     f"node {found.node_id}. demo-tx maps to __transaction_state-{state_partition}"
                     f", whose leader is that node\n   (doze is one broker: it leads every partition, and its meta.db "
                     f"stands in for the topic: each • txn line says what Kafka appends and where).\n"
                     f"   InitProducerId: {ErrorCode(r.error_code).name}, producer id {self.pid}, epoch {self.epoch}. "
                     f"The id's state (Empty) was stored before the answer.\n   The same transactional.id asked "
                     f"again gets the same producer id and the next epoch: that is how a zombie is fenced (step 6).")
        return {"error": r.error_code, "producer_id": self.pid, "producer_epoch": self.epoch,
                "coordinator": found.node_id, "asked": asked, "state_partition": state_partition}

    def idempotence(self, n):
        self.step(n, "Idempotence: a resent batch is not written twice",
                  "An idempotent producer numbers its batches per partition (producer id, epoch, sequence).\n"
                  "Its answer lost, it sends the same batch again; the partition remembers the last five\n"
                  "batches of each producer and answers the resend with the first offsets (Kafka's\n"
                  "ProducerStateManager). Sent: Produce seq 0, then the same batch again.")
        r = self.c.call(ApiKey.INIT_PRODUCER_ID, 4, transactional_id=None, transaction_timeout_ms=60000,
                        producer_id=-1, producer_epoch=-1)
        first = self.c.produce(DEMO_TOPIC, 0, [b"once"], r.producer_id, r.producer_epoch, seq=0)
        again = self.c.produce(DEMO_TOPIC, 0, [b"once"], r.producer_id, r.producer_epoch, seq=0)
        _, values = self.c.fetch(DEMO_TOPIC, 0, 0, read_committed=False)
        copies = sum(v == b"once" for _, _, v, _ in values)
        self.explain(f"First answer: offset {first.base_offset}; the resend's: offset {again.base_offset} "
                     f"({ErrorCode(again.error_code).name}). The log holds {copies} copy.")
        return {"first_offset": first.base_offset, "again_offset": again.base_offset, "again_error": again.error_code,
                "copies": copies}

    def transaction(self, n):
        self.step(n, "A transaction over two partitions, with a consumer's offsets",
                  "AddPartitionsToTxn names the partitions before the first write to each (the coordinator\n"
                  "stores them: Ongoing); Produce writes transactional batches. To commit a consumer group's\n"
                  "offsets with them (KIP-98, KIP-447), AddOffsetsToTxn adds the group's own partition of\n"
                  "__consumer_offsets to the transaction (found as FindCoordinator finds the group's\n"
                  "coordinator: the group id hashed onto __consumer_offsets), and TxnOffsetCommit, sent to\n"
                  "that group coordinator, stages the offsets there: invisible until the transaction's\n"
                  "COMMIT marker reaches that partition too.")
        added = self.c.add_partitions("demo-tx", self.pid, self.epoch, (DEMO_TOPIC, 0), (DEMO_TOPIC, 1))
        a = self.c.produce(DEMO_TOPIC, 0, [b"t1-a"], self.pid, self.epoch, 0, "demo-tx")
        b = self.c.produce(DEMO_TOPIC, 1, [b"t1-b"], self.pid, self.epoch, 0, "demo-tx")
        offsets = self.c.call(ApiKey.ADD_OFFSETS_TO_TXN, 3, transactional_id="demo-tx", producer_id=self.pid,
                              producer_epoch=self.epoch, group_id="demo-group").error_code
        self.c.find_coordinator("demo-group", COORDINATOR_GROUP)    # __consumer_offsets is made now
        staged = self.c.call(ApiKey.TXN_OFFSET_COMMIT, 3, transactional_id="demo-tx", group_id="demo-group",
                             producer_id=self.pid, producer_epoch=self.epoch, generation_id=-1, member_id="",
                             topics=[Msg(name=DEMO_TOPIC, partitions=[Msg(partition_index=0, committed_offset=1,
                                                                          committed_metadata="")])])
        state, partitions = self.c.describe("demo-tx")
        _, uncommitted = self.c.fetch(DEMO_TOPIC, 0, 0, read_committed=False)
        part, committed = self.c.fetch(DEMO_TOPIC, 0, 0, read_committed=True)
        seen_u, seen_c, group_offset = demo_values(uncommitted), demo_values(committed), self.committed_offset()
        self.explain(f"Written at {DEMO_TOPIC}-0 offset {a.base_offset} and {DEMO_TOPIC}-1 offset {b.base_offset}. "
                     f"DescribeTransactions (kafka-transactions describe) lists {state} over {partitions}.\n"
                     f"   read_uncommitted sees {seen_u}; read_committed sees {seen_c}: it stops at the last stable "
                     f"offset, {part.last_stable_offset} (high watermark {part.high_watermark}): the first offset of "
                     f"the open transaction.\n   The group's committed offset is still {group_offset}.")
        return {"added": added, "offsets_error": offsets, "described": partitions,
                "staged_error": staged.topics[0].partitions[0].error_code, "uncommitted": seen_u,
                "committed": seen_c, "lso": part.last_stable_offset, "hw": part.high_watermark,
                "group_offset": group_offset}

    def commit(self, n):
        self.step(n, "Commit: the decision, the markers, the LSO",
                  "EndTxn(commit): the coordinator stores PrepareCommit (the decision: from here the commit\n"
                  "happens, whatever fails), writes a COMMIT marker into each partition of the transaction\n"
                  "(the group's __consumer_offsets partition too: that marker is what publishes the staged\n"
                  "offsets), then stores CompleteCommit. Kafka answers EndTxn once PrepareCommit is stored;\n"
                  "doze answers once the markers are durable (step 9 shows Kafka's way).")
        code = self.c.end("demo-tx", self.pid, self.epoch, commit=True)
        seen, part = self.read_committed(0)
        group_offset = self.committed_offset()
        self.explain(f"EndTxn: {ErrorCode(code).name}. read_committed now sees {seen}; LSO {part.last_stable_offset}"
                     f" = high watermark {part.high_watermark} (the marker took offset "
                     f"{part.high_watermark - 1}).\n   The group's committed offset: {group_offset}. doze keeps "
                     f"offsets in meta.db: the marker on __consumer_offsets is a stand-in there (its • line says so).")
        return {"error": code, "committed": seen, "lso": part.last_stable_offset, "hw": part.high_watermark,
                "group_offset": group_offset, "state": self.state_of("demo-tx")}

    def abort(self, n):
        self.step(n, "Abort: the records stay, the consumers drop them",
                  "EndTxn(abort) writes ABORT markers. The aborted records stay in the log; a read_committed\n"
                  "Fetch carries the aborted transactions (producer id, first offset) below the LSO, and the\n"
                  "consumer drops their records (Kafka's CompletedFetch, KIP-98).")
        self.c.add_partitions("demo-tx", self.pid, self.epoch, (DEMO_TOPIC, 0))
        dropped = self.c.produce(DEMO_TOPIC, 0, [b"t2-dropped"], self.pid, self.epoch, 1, "demo-tx")
        code = self.c.end("demo-tx", self.pid, self.epoch, commit=False)
        committed, part = self.read_committed(0)
        _, uncommitted = self.c.fetch(DEMO_TOPIC, 0, 0, read_committed=False)
        aborted = [(a.producer_id, a.first_offset) for a in part.aborted_transactions or []]
        self.explain(f"EndTxn: {ErrorCode(code).name}. The Fetch lists aborted transactions {aborted}; a "
                     f"read_committed consumer keeps {committed},\n"
                     f"   a read_uncommitted one gets {demo_values(uncommitted)}.")
        return {"error": code, "dropped_offset": dropped.base_offset, "aborted": aborted,
                "committed": committed, "uncommitted": demo_values(uncommitted)}

    def fencing(self, n):
        self.step(n, "Fencing: a second producer with the same transactional.id",
                  "A new instance (after a restart, or a zombie's replacement) sends InitProducerId with the\n"
                  "same transactional.id: the epoch goes up, and the coordinator refuses the old epoch from\n"
                  "then on (PRODUCER_FENCED; a partition refuses a batch of an old epoch:\n"
                  "INVALID_PRODUCER_EPOCH). An open transaction of the old one would be aborted first\n"
                  "(step 10).")
        self.c2 = c2 = DemoClient(self.broker.port, "demo-new-instance")
        r = c2.init("demo-tx")
        c2.add_partitions("demo-tx", r.producer_id, r.producer_epoch, (DEMO_TOPIC, 1))
        c2.produce(DEMO_TOPIC, 1, [b"t5-new"], r.producer_id, r.producer_epoch, 0, "demo-tx")   # a new epoch: seq 0
        add = self.c.add_partitions("demo-tx", self.pid, self.epoch, (DEMO_TOPIC, 1))
        late = self.c.produce(DEMO_TOPIC, 1, [b"t5-zombie"], self.pid, self.epoch, 3, "demo-tx")
        end = self.c.end("demo-tx", self.pid, self.epoch, commit=True)
        done = c2.end("demo-tx", r.producer_id, r.producer_epoch, commit=True)
        self.explain(f"The new instance got producer id {r.producer_id}, epoch {r.producer_epoch}, and wrote to "
                     f"{DEMO_TOPIC}-1. The zombie (epoch {self.epoch}): AddPartitionsToTxn "
                     f"{ErrorCode(add[0]).name},\n   its Produce to {DEMO_TOPIC}-1 {ErrorCode(late.error_code).name} "
                     f"(the partition has seen epoch {r.producer_epoch}), EndTxn {ErrorCode(end).name}. The new "
                     f"instance's commit: {ErrorCode(done).name}.")
        old, self.epoch = self.epoch, r.producer_epoch
        return {"producer_id": r.producer_id, "new_epoch": r.producer_epoch, "old_epoch": old, "zombie_add": add[0],
                "zombie_produce": late.error_code, "zombie_end": end, "new_commit": done}

    def timeout(self, n):
        self.step(n, "The transaction timeout: an abandoned transaction is aborted",
                  "transaction.timeout.ms is the producer's (more than the broker's transaction.max.timeout.ms\n"
                  "is refused: INVALID_TRANSACTION_TIMEOUT). A transaction Ongoing longer than that since it\n"
                  "began is aborted by the coordinator itself, and its\n"
                  "producer fenced: the epoch goes up (Kafka's TransactionCoordinator.abortTimedOutTransactions).\n"
                  f"Here a producer with a {DEMO_TIMEOUT_MS // 1000} s timeout writes one record and goes quiet.")
        c3 = DemoClient(self.broker.port, "demo-abandoned")
        r = c3.init("demo-abandoned", timeout_ms=DEMO_TIMEOUT_MS)
        c3.add_partitions("demo-abandoned", r.producer_id, r.producer_epoch, (DEMO_TOPIC, 1))
        c3.produce(DEMO_TOPIC, 1, [b"t3-abandoned"], r.producer_id, r.producer_epoch, 0, "demo-abandoned")
        held = self.c.fetch(DEMO_TOPIC, 1, 0, read_committed=True)[0].last_stable_offset
        state = self.until_state("demo-abandoned", ("CompleteAbort",))
        late = c3.end("demo-abandoned", r.producer_id, r.producer_epoch, commit=True)
        committed, part = self.read_committed(1)
        c3.close()
        self.explain(f"While open, {DEMO_TOPIC}-1's LSO was held at {held}; after the timeout the state is {state}, "
                     f"the LSO {part.last_stable_offset} (HW {part.high_watermark}),\n   and the producer's late "
                     f"EndTxn(commit) gets {ErrorCode(late).name}. read_committed keeps {committed}.")
        return {"held_lso": held, "state": state, "late_end": late, "lso": part.last_stable_offset,
                "hw": part.high_watermark, "committed": committed}

    def crash(self, n):
        self.step(n, "A crash between the decision and the markers",
                  "The decision is what makes a commit happen: once PrepareCommit is stored (Kafka: in\n"
                  "__transaction_state; doze: meta.db), a broker that dies before all its markers are\n"
                  "written carries the commit out when it starts again (Kafka's TransactionStateManager\n"
                  "loads it; doze's TransactionCoordinator.load). Here the disk refuses the write of one\n"
                  "marker, and the broker dies right after.")
        c2, pid, epoch = self.c2, self.pid, self.epoch
        c2.add_partitions("demo-tx", pid, epoch, (DEMO_TOPIC, 0), (DEMO_TOPIC, 1))
        a = c2.produce(DEMO_TOPIC, 0, [b"t4-a"], pid, epoch, 0, "demo-tx")     # a new epoch numbers from 0
        c2.produce(DEMO_TOPIC, 1, [b"t4-b"], pid, epoch, 1, "demo-tx")     # after step 6's t5-new
        self.disk.refuse(os.path.join(self.data_dir, f"{DEMO_TOPIC}-1"))
        c2.send(ApiKey.END_TXN, 3, transactional_id="demo-tx", producer_id=pid, producer_epoch=epoch, committed=True)
        before = self.until_state("demo-tx", ("PrepareCommit",))
        deadline = time.monotonic() + 10                  # until demo-orders-0's marker is durable
        while self.watch_hw(0) < a.base_offset + 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        self.explain(f"The broker dies now, as under kill -9 (no final fsync, no clean close): demo-tx is {before}, "
                     f"{DEMO_TOPIC}-0 has its COMMIT marker,\n   {DEMO_TOPIC}-1 none, and the producer never got "
                     f"its answer.")
        c2.close()
        self.restart(clean=False)
        after = self.until_state("demo-tx", ("CompleteCommit",))
        self.explain("The broker is back on the same data: it read meta.db (the first • line above: demo-tx in "
                     "PrepareCommit) and wrote every partition's marker again.")
        seen, _ = self.read_committed(1)
        commits = sum(1 for line in batches_text(self.c.fetch(DEMO_TOPIC, 0, 6, False)[0].records).split(", ")
                      if "COMMIT" in line)
        self.explain(f"When it died the transaction was {before}; after the restart it is {after}, and "
                     f"read_committed on {DEMO_TOPIC}-1 sees {seen}.\n   The restart wrote every partition's "
                     f"marker again ({DEMO_TOPIC}-0 now has {commits} COMMIT markers from offset 6): it does not know "
                     f"which were written, and a\n   second marker of a finished transaction changes nothing "
                     f"(Kafka's coordinator does the same after a failover).")
        return {"before": before, "after": after, "committed_1": seen, "commit_markers_0": commits}

    def kafka_timing(self, n):
        self.step(n, "Kafka's timing: \"committed\", and a consumer that does not see it yet",
                  "Kafka answers EndTxn once PrepareCommit is stored, and sends the markers afterwards\n"
                  "(WriteTxnMarkers to each partition's leader). Until a partition has its marker, its LSO\n"
                  "stays at the transaction's first offset: a read_committed consumer waits, though the\n"
                  "producer was told \"committed\". The broker restarts with doze.transaction.answer.after=\n"
                  f"decision and doze.transaction.markers.delay.ms={DEMO_MARKER_DELAY_MS} (the markers' trip, "
                  "made long enough to see).\ndoze's default answers after the markers: what the producer is "
                  "told, a reader then sees.")
        self.restart(**{"doze.transaction.answer.after": "decision",
                        "doze.transaction.markers.delay.ms": DEMO_MARKER_DELAY_MS})
        self.c.add_partitions("demo-tx", self.pid, self.epoch, (DEMO_TOPIC, 0))
        self.c.produce(DEMO_TOPIC, 0, [b"t6-told-committed"], self.pid, self.epoch, 1, "demo-tx")
        told = time.monotonic()
        code = self.c.end("demo-tx", self.pid, self.epoch, commit=True)
        at_once, part = self.read_committed(0)
        while "t6-told-committed" not in self.read_committed(0, self.watch)[0] and time.monotonic() - told < 10:
            time.sleep(0.02)                      # polled untraced; then once more, traced
        seen, _ = self.read_committed(0)
        self.explain(f"EndTxn: {ErrorCode(code).name} at once. A read_committed Fetch right after: LSO "
                     f"{part.last_stable_offset}, HW {part.high_watermark}: 't6-told-committed' "
                     f"{'not there' if 't6-told-committed' not in at_once else 'there'};\n   it was there about "
                     f"{DEMO_MARKER_DELAY_MS} ms later, once the marker landed. The broker goes back to doze's way.")
        self.restart(**{"doze.transaction.answer.after": "markers", "doze.transaction.markers.delay.ms": 0})
        return {"error": code, "seen_at_once": "t6-told-committed" in at_once, "seen_later": "t6-told-committed" in seen,
                "lso_at_once": part.last_stable_offset, "hw_at_once": part.high_watermark}

    def zombie(self, n):
        self.step(n, "A zombie fenced in the middle of its transaction",
                  "A producer stalls (a long GC pause, a network partition) with a transaction open; its\n"
                  "replacement starts with the same transactional.id. InitProducerId aborts the open\n"
                  "transaction (PrepareAbort with the epoch raised: the ABORT markers fence the zombie on\n"
                  "every partition it wrote) and gives the new instance the epoch after that (Kafka's\n"
                  "TransactionCoordinator: epoch + 2 in all). Kafka answers CONCURRENT_TRANSACTIONS until\n"
                  "the abort is done and the client retries; doze finishes the abort before answering.")
        self.c.add_partitions("demo-tx", self.pid, self.epoch, (DEMO_TOPIC, 1))
        open_ = self.c.produce(DEMO_TOPIC, 1, [b"t7-zombie"], self.pid, self.epoch, 2, "demo-tx")
        replacement = DemoClient(self.broker.port, "demo-new-instance")
        r = replacement.init("demo-tx")
        late = self.c.produce(DEMO_TOPIC, 1, [b"t7-zombie-late"], self.pid, self.epoch, 3, "demo-tx")
        end = self.c.end("demo-tx", self.pid, self.epoch, commit=True)
        committed, part = self.read_committed(1)
        replacement.close()
        self.explain(f"The zombie (epoch {self.epoch}) wrote 't7-zombie' at {DEMO_TOPIC}-1 offset "
                     f"{open_.base_offset}; the replacement got epoch {r.producer_epoch}. The zombie's next Produce: "
                     f"{ErrorCode(late.error_code).name}, its EndTxn: {ErrorCode(end).name}.\n   read_committed on "
                     f"{DEMO_TOPIC}-1 keeps {committed}: the zombie's record was aborted.")
        old, self.epoch = self.epoch, r.producer_epoch
        return {"old_epoch": old, "new_epoch": r.producer_epoch, "zombie_produce": late.error_code,
                "zombie_end": end, "committed": committed}

    def hanging(self, n):
        self.step(n, "A hanging transaction, found and aborted as kafka-transactions does it",
                  "Before KIP-890 (Kafka 3.6) a partition took a transactional batch without asking the\n"
                  "coordinator; a client bug (or a late retry) could write to a partition never added to the\n"
                  "transaction. No marker ever reaches it: its LSO stays there and read_committed consumers\n"
                  "stall. Here verification is turned off (as `kafka-configs --alter --entity-type brokers\n"
                  "--entity-default --add-config transaction.partition.verification.enable=false` does) and a\n"
                  f"producer writes to {DEMO_TOPIC}-0 without AddPartitionsToTxn. Then what `kafka-transactions\n"
                  "find-hanging` and `kafka-transactions abort` send: DescribeProducers (an open transaction\n"
                  "on the partition), ListTransactions and DescribeTransactions (its coordinator knows no such\n"
                  "partition), WriteTxnMarkers (an ABORT marker written by hand).")
        self.c.set_broker_config("transaction.partition.verification.enable", "false")
        buggy = DemoClient(self.broker.port, "demo-buggy")
        r = buggy.init("demo-buggy")
        buggy.add_partitions("demo-buggy", r.producer_id, r.producer_epoch, (DEMO_TOPIC, 1))
        stray = buggy.produce(DEMO_TOPIC, 0, [b"t8-stray"], r.producer_id, r.producer_epoch, 0, "demo-buggy")
        buggy.produce(DEMO_TOPIC, 1, [b"t8-b"], r.producer_id, r.producer_epoch, 0, "demo-buggy")
        end = buggy.end("demo-buggy", r.producer_id, r.producer_epoch, commit=True)
        _, stuck = self.read_committed(0)
        producers = self.c.call(ApiKey.DESCRIBE_PRODUCERS, 0, topics=[Msg(name=DEMO_TOPIC, partition_indexes=[0])])
        hung = next(p for p in producers.topics[0].partitions[0].active_producers if p.producer_id == r.producer_id)
        listed = self.c.call(ApiKey.LIST_TRANSACTIONS, 1, state_filters=[], producer_id_filters=[r.producer_id],
                             duration_filter=-1).transaction_states
        state, partitions = self.c.describe("demo-buggy")
        abort = self.c.call(ApiKey.WRITE_TXN_MARKERS, 2, markers=[Msg(     # as Kafka's admin client sends it
            producer_id=hung.producer_id, producer_epoch=hung.producer_epoch, transaction_result=False,
            coordinator_epoch=max(hung.coordinator_epoch, 0), topics=[Msg(name=DEMO_TOPIC, partition_indexes=[0])])])
        _, freed = self.read_committed(0)
        self.c.set_broker_config("transaction.partition.verification.enable", None)
        buggy.close()
        self.explain(f"The stray batch went to {DEMO_TOPIC}-0 offset {stray.base_offset}; the commit "
                     f"({ErrorCode(end).name}) wrote markers only where the coordinator knew: {DEMO_TOPIC}-0's LSO "
                     f"stayed at {stuck.last_stable_offset} (HW {stuck.high_watermark}).\n   DescribeProducers: "
                     f"producer {hung.producer_id} has a transaction open since offset {hung.current_txn_start_offset}"
                     f"; ListTransactions names {[t.transactional_id for t in listed]}, DescribeTransactions says "
                     f"{state} over {partitions}: it hangs.\n   WriteTxnMarkers(abort): "
                     f"{ErrorCode(abort.markers[0].topics[0].partitions[0].error_code).name}; the LSO is "
                     f"{freed.last_stable_offset} again. Verification is back on (Kafka's default).")
        return {"stray_offset": stray.base_offset, "stuck_lso": stuck.last_stable_offset,
                "open_since": hung.current_txn_start_offset, "state": state, "partitions": partitions,
                "abort": abort.markers[0].topics[0].partitions[0].error_code, "freed_lso": freed.last_stable_offset,
                "freed_hw": freed.high_watermark}

    def late_end_txn(self, n):
        self.step(n, "A late EndTxn commits the next transaction (KAFKA-17754); version 2 fences it",
                  "In the classic protocol a producer keeps its epoch from one transaction to the next. Its\n"
                  "EndTxn(commit) is delayed in the network; the client gives up waiting and sends it again on\n"
                  "a new connection, which commits; the application begins its next transaction. Then the first\n"
                  "EndTxn arrives: same producer id, same epoch, commit, and a transaction Ongoing, so the\n"
                  "coordinator commits the next transaction halfway through (Jepsen found it in 2024).\n"
                  "Transaction version 2 (KIP-890 part 2) closes it: EndTxn v5 ends each transaction at a new\n"
                  "epoch, so the late copy carries an old one. The same story twice: classic, then version 2\n"
                  "(finalized as `kafka-features upgrade --feature transaction.version=2` does: UpdateFeatures).\n"
                  f"The held request is doze's test fault: add(\"EndTxn\", hold_ms={DEMO_HOLD_MS}, "
                  f"client_id=\"demo-late\").")
        classic = self.late_story("demo-late", 1, [b"t9-first", b"t10-half", b"t10-rest"])
        committed, _ = self.read_committed(0)
        self.explain(f"Classic: the retry's EndTxn: {ErrorCode(classic['retried']).name}. The next transaction wrote "
                     f"'t10-half'; then the late EndTxn got {ErrorCode(classic['late']).name}: it committed that "
                     f"transaction.\n   Its next write, 't10-rest': {ErrorCode(classic['rest']).name}; its own "
                     f"EndTxn(commit): {ErrorCode(classic['final']).name}. read_committed on {DEMO_TOPIC}-0 ends "
                     f"with {committed[-2:]}: half a transaction, committed.")
        upgraded = DemoClient(self.broker.port, "demo-features").finalize(TRANSACTION_VERSION, 2)
        v2 = self.late_story("demo-late-2", 2, [b"t11-first", b"t12-half", b"t12-rest"])
        committed, part = self.read_committed(0)
        self.explain(f"transaction.version 2: {ErrorCode(upgraded).name}. The retry's EndTxn v5: "
                     f"{ErrorCode(v2['retried']).name}, epoch {v2['epochs'][0]} -> {v2['epochs'][1]}; the next "
                     f"transaction runs at epoch {v2['epochs'][1]}. The late EndTxn (epoch {v2['epochs'][0]}): "
                     f"{ErrorCode(v2['late']).name}.\n   't12-rest': {ErrorCode(v2['rest']).name}; EndTxn(commit): "
                     f"{ErrorCode(v2['final']).name}. read_committed ends with {committed[-2:]}: the whole transaction, "
                     f"committed once.\n   Kafka 4.3.1 answers the same requests the same way (conformance/"
                     f"recordings/late-endtxn-next-txn.json, classic; tv2-late-endtxn.json, version 2).")
        return dict(classic, v2=v2, upgraded=upgraded, committed=committed, lso=part.last_stable_offset,
                    hw=part.high_watermark)

    def late_story(self, transactional_id, version, values):
        """One producer's transaction whose EndTxn(commit) is held and retried
        on a new connection, then its next transaction, which the held one
        reaches halfway -> what each answer was."""
        first, retry = DemoClient(self.broker.port, "demo-late"), DemoClient(self.broker.port, "demo-late-retry")
        produce_v, end_v = (12, 5) if version >= 2 else (9, 3)
        r = first.init(transactional_id)
        pid, epoch = r.producer_id, r.producer_epoch
        if version < 2:
            first.add_partitions(transactional_id, pid, epoch, (DEMO_TOPIC, 0))
        first.produce(DEMO_TOPIC, 0, values[:1], pid, epoch, 0, transactional_id, produce_v)
        self.faults.add("EndTxn", hold_ms=DEMO_HOLD_MS, times=1, client_id="demo-late")
        first.send(ApiKey.END_TXN, end_v, transactional_id=transactional_id, producer_id=pid, producer_epoch=epoch,
                   committed=True)
        retried = retry.end(transactional_id, pid, epoch, True, end_v)
        after = retried.producer_epoch if version >= 2 else epoch
        seq = 0 if version >= 2 else 1                 # version 2: a new epoch starts at sequence 0
        if version < 2:
            retry.add_partitions(transactional_id, pid, after, (DEMO_TOPIC, 0))
        retry.produce(DEMO_TOPIC, 0, values[1:2], pid, after, seq, transactional_id, produce_v)
        late = first.receive(ApiKey.END_TXN, end_v)[1].error_code
        rest = retry.produce(DEMO_TOPIC, 0, values[2:], pid, after, seq + 1, transactional_id, produce_v)
        final = retry.end(transactional_id, pid, after, True, end_v)
        first.close()
        retry.close()
        code = (lambda a: a.error_code) if version >= 2 else (lambda a: a)
        return {"retried": code(retried), "late": late, "rest": rest.error_code, "final": code(final),
                "epochs": (epoch, after)}


class _Say(logging.Handler):
    """The trace's lines, to the demo's say(), indented under its story; and
    the broker's warnings and errors among them, timed as the trace is."""

    def __init__(self, say, clock):
        super().__init__()
        self.say, self.clock = say, clock

    def emit(self, record):
        if record.name == trace_log.name:
            self.say("      " + record.getMessage())
            return
        now = datetime.datetime.fromtimestamp(self.clock()).strftime("%H:%M:%S.%f")[:-3]
        self.say(f"      {now} ! {record.levelname.lower()}: {record.getMessage()}")


def demo(say=print, pause=None, data_dir=None, console=None, trace=True, console_given=True, end=None):
    """Run the demo's steps on a broker of its own (in a temporary directory
    unless given) -> each step's outcome. say(text) tells the story (and,
    with trace, the trace's lines and the broker's warnings between); pause()
    runs between steps, end() after the last, before the broker stops;
    console: HOST:PORT to serve the console on (None: none), there or not at
    all when console_given, else moved to a free port when taken (as the
    broker's command line does with its default)."""
    tmp = None
    if data_dir is None:
        tmp = data_dir = tempfile.mkdtemp(prefix="doze-demo-")
    settings = {"doze.trace": "all" if trace else "", "doze.trace.ids": DEMO_IDS}
    if console_given or not console:
        settings["doze.console.listener"] = console or ""
    handler = _Say(say, time.time)
    saved = [(logger, logger.propagate, logger.level) for logger in (trace_log, log)]
    if trace:
        for logger, level in ((trace_log, logging.INFO), (log, logging.WARNING)):
            logger.addHandler(handler)
            logger.propagate = False
            logger.setLevel(level)
    try:
        d = Demo(data_dir, say, pause or (lambda: None), settings, None if console_given else console)
        try:
            if d.broker.console is not None:
                say(f"The console: {d.broker.console.url} (open it: each step shows there as it happens)")
            results = d.run()
            if end is not None:
                say("\nThe steps are done. The broker stays up until Enter" + (
                    f", and its console: {d.broker.console.url}" if d.broker.console is not None else "") + ".")
                end()
            return results
        finally:
            d.stop()
    finally:
        for logger, propagate, level in saved:
            logger.removeHandler(handler)
            logger.propagate = propagate
            logger.setLevel(level)
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)


WALKTHROUGH_BEGIN = "<!-- walkthrough: python3 doze_kafka.py demo --walkthrough README.md writes it; not by hand -->"
WALKTHROUGH_END = "<!-- end of the walkthrough -->"


def walkthrough(said):
    """The demo's story and trace (what say() got) as Markdown: a heading a
    step, its text, the trace as code; times and ports left out, so that the
    same run gives the same page."""
    out, code = [], False
    for text in said:
        if text.startswith("      "):
            line = re.sub(r"^\d\d:\d\d:\d\d\.\d{3} ", "", text.strip())
            line = re.sub(r"host=127\.0\.0\.1 port=\d+", "host=127.0.0.1 port=9092", line)   # ports as the CLI's
            line = re.sub(r"=1\d{12}\b", "=<time ms>", line)                      # wall-clock times
            out.append(("" if code else "\n") + "    " + re.sub(r"@127\.0\.0\.1:\d+\]", "]", line))
            code = True
            continue
        code = False
        if text.startswith(("\n=== Step ", "\n--- ")):
            head, _, body = text.strip().partition("\n")
            out.append(f"\n### {head.strip('=- ')}\n\n" + " ".join(body.split()))
        elif text.startswith(("   ", "\nThe steps are done")):
            out.append("\n" + " ".join(text.split()))
    return "\n" + "\n".join(out).strip("\n") + "\n\n"          # blank lines around it, for Markdown


###############################################################################
# 24. CLI
###############################################################################

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


def add_console_flags(parser):
    """--console HOST:PORT and --no-console, for the broker and the demo alike."""
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--console", metavar="HOST:PORT",
                       help=f"serve the web console here (default {CONSOLE_CLI_ADDRESS}; taken: another port)")
    group.add_argument("--no-console", dest="console", action="store_const", const="",
                       help="serve no console")


def demo_main(argv):
    """python3 doze_kafka.py demo [--no-pause] [--no-trace] [--console HOST:PORT]"""
    parser = argparse.ArgumentParser(prog="doze_kafka.py demo",
                                     description="Kafka's transaction protocol, step by step, on a broker in "
                                                 "this process")
    parser.add_argument("--no-pause", action="store_true", help="do not wait for Enter between steps")
    parser.add_argument("--no-trace", action="store_true", help="do not print the protocol trace between")
    add_console_flags(parser)
    parser.add_argument("--walkthrough", metavar="README",
                        help="run it without pauses or console and write its story and trace into this file, "
                             "between its walkthrough markers")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s")
    if args.walkthrough:
        said = []
        demo(say=said.append, end=lambda: None)
        with open(args.walkthrough) as f:
            text = f.read()
        head, begin, rest = text.partition(WALKTHROUGH_BEGIN)
        _, end, tail = rest.partition(WALKTHROUGH_END)
        if not begin or not end:
            print(f"{args.walkthrough}: no walkthrough markers ({WALKTHROUGH_BEGIN} ... {WALKTHROUGH_END})",
                  file=sys.stderr)
            return 1
        with open(args.walkthrough, "w") as f:
            f.write(head + begin + "\n" + walkthrough(said) + end + tail)
        print(f"{args.walkthrough}: the walkthrough written ({len(said)} lines of the demo)")
        return 0
    try:
        demo(pause=None if args.no_pause else lambda: input("\n(Enter for the next step) "),
             end=None if args.no_pause else lambda: input("(Enter to end: the broker and its console stop) "),
             console=CONSOLE_CLI_ADDRESS if args.console is None else args.console or None,
             console_given=args.console is not None, trace=not args.no_trace)
    except (OSError, ValueError) as e:
        print(f"doze_kafka demo: cannot start: {e.strerror if isinstance(e, OSError) and e.strerror else e}",
              file=sys.stderr)
        return 1
    print("\nDone: the broker is gone with its temporary directory.")
    return 0


def render_apis():
    """The APIs and versions served, one line each (what ApiVersions advertises
    at transaction.version 1, and what version 2 adds)."""
    lines = []
    for key, (spec, handler) in sorted(HANDLERS.items()):
        served = f"v{spec.min_served}-v{spec.classic_max}"
        notes = [f"v{spec.min_version}-v{spec.min_served - 1} advertised, refused"] \
            if spec.min_served > spec.min_version else []
        if spec.classic_max < spec.max_version:
            more = range(spec.classic_max + 1, spec.max_version + 1)
            notes.append(f"v{more[0]}{f'-v{more[-1]}' if len(more) > 1 else ''} with transaction.version 2")
        note = f" ({'; '.join(notes)})" if notes else ""
        lines.append(f"{int(key):3d}  {spec.name:29s} {served}{note}")
    return "\n".join(lines)


def parse_add_scram(text):
    """'SCRAM-SHA-256=[name=alice,password=alice-secret,iterations=8192]' ->
    (user, mechanism, credential); the password goes no further than the hash."""
    m = re.fullmatch(r"\s*(" + "|".join(SCRAM_TYPES) + r")=\[(.*)\]\s*", text)
    if not m:
        raise ValueError("--add-scram: expected 'SCRAM-SHA-256=[name=...,password=...]' "
                         "(or SCRAM-SHA-512)")
    fields = dict(kv.split("=", 1) for kv in re.findall(r'(\w+=(?:"[^"]*"|[^,]*))', m.group(2)))
    fields = {k: v[1:-1] if v.startswith('"') and v.endswith('"') else v for k, v in fields.items()}
    if not fields.get("name") or "password" not in fields:
        raise ValueError("--add-scram: name and password are required")
    iterations = int(fields.get("iterations", SCRAM_MIN_ITERATIONS))
    if not SCRAM_MIN_ITERATIONS <= iterations <= SCRAM_MAX_ITERATIONS:
        raise ValueError(f"--add-scram: iterations must be {SCRAM_MIN_ITERATIONS} to {SCRAM_MAX_ITERATIONS}")
    return fields["name"], m.group(1), new_scram_credential(m.group(1), fields["password"], iterations)


def calm_garbage_collector():
    """For the broker's own process (not running(), which shares its host's):
    what was loaded at start lives as long as the broker, so it is frozen out
    of the cycle collector, and full collections come a hundred times less
    often. Measured under the fuzzer: a full collection of a broker's heap
    took 100-265 ms of the loop, every 2-3 s; the refcounts free nearly
    everything, the young generations catch the rest."""
    gc.collect()
    gc.freeze()
    young, middle, _ = gc.get_threshold()
    gc.set_threshold(young, middle, 1000)


CLI_EPILOG = f"""\
the console: a read-only web view of the broker (transactions, producers, LSOs,
topics, groups), at http://{CONSOLE_CLI_ADDRESS}/ unless --console or --no-console says
otherwise (that port taken: another, said at start).

the demo: python3 doze_kafka.py demo [--no-pause] [--console HOST:PORT | --no-console]
walks through Kafka's transaction protocol step by step on a broker of its own.

tests: import doze_kafka; with doze_kafka.running() as broker: ... (README: "Testing your code with doze")."""


def main(argv=None):
    """python3 doze_kafka.py [server.properties] [--port N] [--data-dir DIR] [--override k=v ...]
    python3 doze_kafka.py demo [--no-pause]"""
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["demo"]:
        return demo_main(argv[1:])
    parser = argparse.ArgumentParser(prog="doze_kafka.py", description=__doc__.split("\n")[0], epilog=CLI_EPILOG,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("properties", nargs="?", help="a Kafka server.properties file")
    parser.add_argument("--port", type=int, help="listen on this port (overrides listeners)")
    parser.add_argument("--add-scram", action="append", default=[], metavar="CREDENTIAL",
                        help="add a SCRAM user before serving, as kafka-storage format --add-scram: "
                        "'SCRAM-SHA-256=[name=alice,password=alice-secret(,iterations=8192)]'")
    parser.add_argument("--host", help="listen on this address (overrides listeners)")
    parser.add_argument("--data-dir", help="data directory (overrides log.dirs)")
    parser.add_argument("--override", action="append", default=[], metavar="NAME=VALUE",
                        help="a Kafka setting, as in server.properties (repeatable)")
    parser.add_argument("--trace", nargs="?", const="all", metavar="KINDS",
                        help="print the protocol as it moves: every request and answer, decoded, and the "
                        "broker's own actions between them; KINDS: txn, group, all (the default)")
    parser.add_argument("--trace-ids", metavar="IDS",
                        help="trace only what names one of these transactional, group or client ids")
    add_console_flags(parser)
    parser.add_argument("--control", action="store_true",
                        help="serve the control endpoint for tests in other languages (faults, the clock, "
                        "restarts, resets, the broker's state: /control on the console's listener, with the "
                        "token printed at start)")
    parser.add_argument("--control-token", metavar="TOKEN", help="--control, with this token")
    parser.add_argument("--apis", action="store_true", help="list the APIs served and exit")
    parser.add_argument("--log-level", default="INFO", type=str.upper, choices=LOG_LEVELS,
                        help="how much the log says (default INFO)")
    args = parser.parse_args(argv)
    if args.apis:
        print(render_apis())
        return 0
    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    settings = {}
    for item in args.override:
        name, sep, value = item.partition("=")
        if not sep:
            parser.error(f"--override needs NAME=VALUE, got {item!r}")
        settings[name.strip()] = value.strip()
    if args.trace or args.trace_ids:                      # --trace-ids alone: every kind, of those ids
        settings["doze.trace"] = args.trace or "all"
        settings["doze.trace.ids"] = args.trace_ids or ""
    if args.console is not None:
        settings["doze.console.listener"] = args.console
    if settings.get("doze.trace"):                         # bare lines on stdout, beside the log on stderr
        trace_to_stdout()
    try:
        if args.control or args.control_token:
            return serve_controlled(args, settings)
        if args.properties:
            config = Config.from_properties(args.properties, settings=settings, data_dir=args.data_dir,
                                            host=args.host, port=args.port)
        else:
            config = Config(settings, data_dir=args.data_dir, host=args.host, port=args.port)
        config.set_default("doze.console.listener", CONSOLE_CLI_ADDRESS)   # the command line serves it
        broker = Broker(config)
        add_scram_users(broker.store, args.add_scram)
    except (OSError, ValueError, sqlite3.Error, StoreFailed) as e:
        return cannot_start(e)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: broker.stop())
    say_started(broker)
    broker.serve_forever()
    log.info("stopped cleanly")
    return 0


def trace_to_stdout():
    """The trace's lines, bare, on stdout (whatever --log-level says of the rest)."""
    out = logging.StreamHandler(sys.stdout)
    out.setFormatter(logging.Formatter("%(message)s"))
    trace_log.addHandler(out)
    trace_log.setLevel(logging.INFO)
    trace_log.propagate = False


def add_scram_users(store, credentials):
    for text in credentials:
        user, mechanism, credential = parse_add_scram(text)
        store.save_scram_credential(user, mechanism, credential)
        log.info("SCRAM credential for %s (%s, %d iterations) stored", user, mechanism, credential[3])


def cannot_start(e):
    said = e.strerror if isinstance(e, OSError) and e.strerror and not e.filename else e
    print(f"doze_kafka: cannot start: {said}", file=sys.stderr)
    return 1


def say_started(broker, control=None):
    """The start's lines on stdout (what scripts wait for), then the process settles down."""
    print(f"doze-kafka {__version__} listening on {broker.bootstrap} (data in {broker.config.data_dir})",
          flush=True)
    if broker.console is not None:
        print(f"console: {broker.console.url}", flush=True)
        if control is not None:
            print(f"control: {broker.console.url}control (Authorization: Bearer {control.token})", flush=True)
    calm_garbage_collector()
    release_freed_memory()          # what compiling this file and starting freed


def serve_controlled(args, settings):
    """--control: the broker in an Embedded (its loop on a thread of its own),
    the main thread carrying out the restarts and resets the control endpoint
    is asked for (Control.serve); the disk a FaultyDisk, the clock movable,
    TEST_DEFAULTS as running() has them."""
    if args.properties:
        with open(args.properties, "rb") as f:
            settings = dict(read_java_properties(f.read()), **settings)
    console = settings.get("doze.console.listener", CONSOLE_CLI_ADDRESS)
    host = console.rpartition(":")[0].strip("[]") or "127.0.0.1"
    if not console or not ipaddress.ip_address(host).is_loopback:
        raise ValueError("--control is served on the console's listener, which must be on a loopback address")
    data_dir = args.data_dir or str(settings.get("log.dirs", BROKER_DEFAULTS["log.dirs"])).split(",")[0]
    embedded = Embedded(settings, data_dir, args.port, args.host, FaultyDisk(), MovableClock(),
                        defaults=dict(TEST_DEFAULTS, **{"doze.console.listener": CONSOLE_CLI_ADDRESS}),
                        control_token=args.control_token or secrets.token_urlsafe(16))
    embedded.broker.run_in_loop(lambda: add_scram_users(embedded.broker.store, args.add_scram))
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: embedded.control.stop())
    say_started(embedded.broker, embedded.control)
    embedded.control.serve()
    log.info("stopped cleanly")
    return 0


def run_as_module():
    """`python3 doze_kafka.py` starts the interpreter again, once and in the
    same process, on this file imported as a module, before it does anything
    else. CPython keeps a script's syntax tree until the script returns --
    for a broker, its whole life: 26 MiB of RSS for this file, a third of
    what it holds at all when idle -- while an imported module's tree goes as
    soon as the module is compiled. Nothing happens under -m, a debugger or a
    profiler (the file is not the program then), or where there is no exec.
    Measured: idle RSS 56 -> 27 MiB, about 0.07 s more at start (README,
    "Memory")."""
    path = os.path.abspath(globals().get("__file__") or "")
    if sys._getframe(1).f_back is not None or os.name != "posix" or not sys.executable \
            or not os.path.isfile(path) or sys.flags.interactive:
        return
    options = sys.orig_argv[1:len(sys.orig_argv) - len(sys.argv)] if hasattr(sys, "orig_argv") else []
    directory, name = os.path.split(path[:-3] if path.endswith(".py") else path)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, (directory, os.environ.get("PYTHONPATH")))))
    if path.endswith(".py") and name.isidentifier() and module_path_safe(name, directory):
        # `ps` shows "python3 -m doze_kafka --port ...": a broker one can tell apart.
        # -P (3.11+): the working directory is not searched first.
        argv = [sys.executable, *options, *(["-P"] if sys.version_info >= (3, 11) else []), "-m", name]
    else:                                # a name -m cannot import: the same by hand
        argv = [sys.executable, *options, "-c", "import importlib.util, sys\n"
                f"spec = importlib.util.spec_from_file_location('doze_kafka', {path!r})\n"
                "sys.modules['doze_kafka'] = module = importlib.util.module_from_spec(spec)\n"
                "spec.loader.exec_module(module)\n"
                "sys.exit(module.main())\n"]
    try:
        os.execve(sys.executable, argv + sys.argv[1:], env)
    except OSError as e:                 # then serve as a script
        print(f"doze_kafka: could not start again as a module ({e}); serving as a script",
              file=sys.stderr)


def module_path_safe(name, directory):
    """Will `-m name`, with directory first on PYTHONPATH, import this very
    file? Before 3.11 (no -P) the working directory is searched first."""
    if sys.version_info >= (3, 11):
        return True
    cwd = os.getcwd()
    return os.path.realpath(cwd) == os.path.realpath(directory) or not any(
        os.path.exists(os.path.join(cwd, name + suffix)) for suffix in (".py", "", ".pyc"))


###############################################################################
# A. APPENDIX: KAFKA 4.3.1'S CONFIG TABLES -- generated from Kafka; do not edit by hand
###############################################################################
# Every topic config and broker setting Kafka 4.3.1 has, with its type, its
# default, the check its validator makes and how it may change, taken from
# Kafka itself. doze acts on the settings acts_on (§2) names; every other name
# is accepted, checked, stored and described as Kafka does, and not acted on
# (the start log says so).

# ==== generated by conformance/configs/extract.py from Kafka 4.3.1 -- do not edit by hand ====
# Regenerate: python3 conformance/configs/extract.py --emit-python
# Kafka's own config definitions (commit 26b251a451ce941d): LogConfig's ConfigDef for
# topics; KafkaConfig's (AbstractKafkaConfig.CONFIG_DEF) and the dynamic-only
# quota configs for the broker; DynamicBrokerConfig for what may change while
# the broker runs. One line a config:
#
#     name: (type, default, check, synonyms | mode)
#
# type     Kafka's ConfigDef.Type in lower case (DescribeConfigs' config_type).
# default  the text DescribeConfigs shows; None: null (Kafka has none, or derives
#          it: log.retention.ms from log.retention.hours); ...: none at all,
#          server.properties must give it.
# check    what Kafka's validator allows of the parsed value; None: any value of the type.
#            ("range", lo, hi)      lo <= v <= hi; None is open on that side
#            ("in", s, ...)         one of these strings, exactly
#            ("in_ci", s, ...)      one of these strings, in any case
#            ("list", s, ...)       no empty member, no member but s, ... (none named: any); may be empty
#            ("list_nonempty", s, ...)   the same, and not an empty list
#            ("non_empty",)         a string that is not ""
#            ("non_null",)          any value, but one must be given
#            ("or", c1, c2)         c1 or c2;  ("value", v): exactly v
#            ("replicas",)          "*", or "partition:broker,partition:broker,..."
#            ("custom", "Name")     Kafka's own check (controller quorum addresses)
# synonyms (topic configs) the broker settings it inherits from, the first set
#          one wins; KAFKA_MS_PER_UNIT converts those not in ms.
# mode     (broker configs) how Kafka 4.3.1 lets it change while running:
#          "read-only"; "cluster-wide" (broker "" or the broker's id);
#          "per-broker" (the broker's id only); "per-listener" (only as
#          listener.name.<listener>.<name>).

KAFKA_TOPIC_CONFIGS = {
    "cleanup.policy": ("list", "delete", ("list", "compact", "delete"), ("log.cleanup.policy",)),
    "compression.gzip.level": ("int", "-1", ("or", ("range", 1, 9), ("value", -1)), ("compression.gzip.level",)),
    "compression.lz4.level": ("int", "9", ("range", 1, 17), ("compression.lz4.level",)),
    "compression.type": ("string", "producer", ("in", "uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"), ("compression.type",)),
    "compression.zstd.level": ("int", "3", ("range", -131072, 22), ("compression.zstd.level",)),
    "delete.retention.ms": ("long", "86400000", ("range", 0, None), ("log.cleaner.delete.retention.ms",)),
    "file.delete.delay.ms": ("long", "60000", ("range", 0, None), ("log.segment.delete.delay.ms",)),
    "flush.messages": ("long", "9223372036854775807", ("range", 1, None), ("log.flush.interval.messages",)),
    "flush.ms": ("long", "9223372036854775807", ("range", 0, None), ("log.flush.interval.ms", "log.flush.scheduler.interval.ms")),
    "follower.replication.throttled.replicas": ("list", "", ("replicas",), ()),
    "index.interval.bytes": ("int", "4096", ("range", 0, None), ("log.index.interval.bytes",)),
    "leader.replication.throttled.replicas": ("list", "", ("replicas",), ()),
    "local.retention.bytes": ("long", "-2", ("range", -2, None), ("log.local.retention.bytes",)),
    "local.retention.ms": ("long", "-2", ("range", -2, None), ("log.local.retention.ms",)),
    "max.compaction.lag.ms": ("long", "9223372036854775807", ("range", 1, None), ("log.cleaner.max.compaction.lag.ms",)),
    "max.message.bytes": ("int", "1048588", ("range", 0, None), ("message.max.bytes",)),
    "message.timestamp.after.max.ms": ("long", "3600000", ("range", 0, None), ("log.message.timestamp.after.max.ms",)),
    "message.timestamp.before.max.ms": ("long", "9223372036854775807", ("range", 0, None), ("log.message.timestamp.before.max.ms",)),
    "message.timestamp.type": ("string", "CreateTime", ("in", "CreateTime", "LogAppendTime"), ("log.message.timestamp.type",)),
    "min.cleanable.dirty.ratio": ("double", "0.5", ("range", 0, 1), ("log.cleaner.min.cleanable.ratio",)),
    "min.compaction.lag.ms": ("long", "0", ("range", 0, None), ("log.cleaner.min.compaction.lag.ms",)),
    "min.insync.replicas": ("int", "1", ("range", 1, None), ("min.insync.replicas",)),
    "preallocate": ("boolean", "false", None, ("log.preallocate",)),
    "remote.log.copy.disable": ("boolean", "false", None, ()),
    "remote.log.delete.on.disable": ("boolean", "false", None, ()),
    "remote.storage.enable": ("boolean", "false", None, ()),
    "retention.bytes": ("long", "-1", None, ("log.retention.bytes",)),
    "retention.ms": ("long", "604800000", ("range", -1, None), ("log.retention.ms", "log.retention.minutes", "log.retention.hours")),
    "segment.bytes": ("int", "1073741824", ("range", 1048576, None), ("log.segment.bytes",)),
    "segment.index.bytes": ("int", "10485760", ("range", 4, None), ("log.index.size.max.bytes",)),
    "segment.jitter.ms": ("long", "0", ("range", 0, None), ("log.roll.jitter.ms", "log.roll.jitter.hours")),
    "segment.ms": ("long", "604800000", ("range", 1, None), ("log.roll.ms", "log.roll.hours")),
    "unclean.leader.election.enable": ("boolean", "false", None, ("unclean.leader.election.enable",)),
    # internal (Kafka's defineInternal): accepted, described only when set
    "internal.segment.bytes": ("int", None, None, ()),
}
KAFKA_MS_PER_UNIT = {"log.retention.hours": 3600000, "log.retention.minutes": 60000, "log.roll.hours": 3600000, "log.roll.jitter.hours": 3600000}

KAFKA_BROKER_CONFIGS = {
    # --- AddPartitionsToTxnConfig ---
    "add.partitions.to.txn.retry.backoff.max.ms": ("int", "100", ("range", 0, None), "read-only"),
    "add.partitions.to.txn.retry.backoff.ms": ("int", "20", ("range", 1, None), "read-only"),
    # --- BrokerSecurityConfigs ---
    "connections.max.reauth.ms": ("long", "0", None, "read-only"),
    "principal.builder.class": ("class", "org.apache.kafka.common.security.authenticator.DefaultKafkaPrincipalBuilder", None, "per-broker"),
    "sasl.client.callback.handler.class": ("class", None, None, "read-only"),
    "sasl.enabled.mechanisms": ("list", "GSSAPI", ("list",), "per-broker"),
    "sasl.jaas.config": ("password", None, None, "per-broker"),
    "sasl.kerberos.kinit.cmd": ("string", "/usr/bin/kinit", None, "per-broker"),
    "sasl.kerberos.min.time.before.relogin": ("long", "60000", None, "per-broker"),
    "sasl.kerberos.principal.to.local.rules": ("list", "DEFAULT", ("list",), "per-broker"),
    "sasl.kerberos.service.name": ("string", None, None, "per-broker"),
    "sasl.kerberos.ticket.renew.jitter": ("double", "0.05", None, "per-broker"),
    "sasl.kerberos.ticket.renew.window.factor": ("double", "0.8", None, "per-broker"),
    "sasl.login.callback.handler.class": ("class", None, None, "read-only"),
    "sasl.login.class": ("class", None, None, "read-only"),
    "sasl.login.connect.timeout.ms": ("int", None, None, "read-only"),
    "sasl.login.read.timeout.ms": ("int", None, None, "read-only"),
    "sasl.login.refresh.buffer.seconds": ("short", "300", None, "per-broker"),
    "sasl.login.refresh.min.period.seconds": ("short", "60", None, "per-broker"),
    "sasl.login.refresh.window.factor": ("double", "0.8", None, "per-broker"),
    "sasl.login.refresh.window.jitter": ("double", "0.05", None, "per-broker"),
    "sasl.login.retry.backoff.max.ms": ("long", "10000", None, "read-only"),
    "sasl.login.retry.backoff.ms": ("long", "100", None, "read-only"),
    "sasl.mechanism.inter.broker.protocol": ("string", "GSSAPI", None, "per-broker"),
    "sasl.oauthbearer.assertion.algorithm": ("string", "RS256", ("in_ci", "ES256", "RS256"), "read-only"),
    "sasl.oauthbearer.assertion.claim.aud": ("string", None, None, "read-only"),
    "sasl.oauthbearer.assertion.claim.exp.seconds": ("int", "300", ("range", 0, 86400), "read-only"),
    "sasl.oauthbearer.assertion.claim.iss": ("string", None, None, "read-only"),
    "sasl.oauthbearer.assertion.claim.jti.include": ("boolean", "false", None, "read-only"),
    "sasl.oauthbearer.assertion.claim.nbf.seconds": ("int", "60", ("range", 0, 3600), "read-only"),
    "sasl.oauthbearer.assertion.claim.sub": ("string", None, None, "read-only"),
    "sasl.oauthbearer.assertion.file": ("string", None, None, "read-only"),
    "sasl.oauthbearer.assertion.private.key.file": ("string", None, None, "read-only"),
    "sasl.oauthbearer.assertion.private.key.passphrase": ("password", None, None, "read-only"),
    "sasl.oauthbearer.assertion.template.file": ("string", None, None, "read-only"),
    "sasl.oauthbearer.client.credentials.client.id": ("string", None, None, "read-only"),
    "sasl.oauthbearer.client.credentials.client.secret": ("password", None, None, "read-only"),
    "sasl.oauthbearer.clock.skew.seconds": ("int", "30", None, "read-only"),
    "sasl.oauthbearer.expected.audience": ("list", "", ("list",), "read-only"),
    "sasl.oauthbearer.expected.issuer": ("string", None, None, "read-only"),
    "sasl.oauthbearer.jwks.endpoint.refresh.ms": ("long", "3600000", None, "read-only"),
    "sasl.oauthbearer.jwks.endpoint.retry.backoff.max.ms": ("long", "10000", None, "read-only"),
    "sasl.oauthbearer.jwks.endpoint.retry.backoff.ms": ("long", "100", None, "read-only"),
    "sasl.oauthbearer.jwks.endpoint.url": ("string", None, None, "read-only"),
    "sasl.oauthbearer.jwt.retriever.class": ("class", "org.apache.kafka.common.security.oauthbearer.DefaultJwtRetriever", None, "read-only"),
    "sasl.oauthbearer.jwt.validator.class": ("class", "org.apache.kafka.common.security.oauthbearer.DefaultJwtValidator", None, "read-only"),
    "sasl.oauthbearer.scope": ("string", None, None, "read-only"),
    "sasl.oauthbearer.scope.claim.name": ("string", "scope", None, "read-only"),
    "sasl.oauthbearer.sub.claim.name": ("string", "sub", None, "read-only"),
    "sasl.oauthbearer.token.endpoint.url": ("string", None, None, "read-only"),
    "sasl.server.callback.handler.class": ("class", None, None, "read-only"),
    "sasl.server.max.receive.size": ("int", "524288", None, "read-only"),
    "security.providers": ("string", None, None, "read-only"),
    "ssl.allow.dn.changes": ("boolean", "false", None, "read-only"),
    "ssl.allow.san.changes": ("boolean", "false", None, "read-only"),
    "ssl.cipher.suites": ("list", "", ("list",), "per-broker"),
    "ssl.client.auth": ("string", "none", ("in", "required", "requested", "none"), "per-broker"),
    "ssl.enabled.protocols": ("list", "TLSv1.2,TLSv1.3", ("list",), "per-broker"),
    "ssl.endpoint.identification.algorithm": ("string", "https", None, "per-broker"),
    "ssl.engine.factory.class": ("class", None, None, "per-broker"),
    "ssl.key.password": ("password", None, None, "per-listener"),
    "ssl.keymanager.algorithm": ("string", "SunX509", None, "per-broker"),
    "ssl.keystore.certificate.chain": ("password", None, None, "per-listener"),
    "ssl.keystore.key": ("password", None, None, "per-listener"),
    "ssl.keystore.location": ("string", None, None, "per-listener"),
    "ssl.keystore.password": ("password", None, None, "per-listener"),
    "ssl.keystore.type": ("string", "JKS", None, "per-listener"),
    "ssl.principal.mapping.rules": ("string", "DEFAULT", None, "read-only"),
    "ssl.protocol": ("string", "TLSv1.3", None, "per-broker"),
    "ssl.provider": ("string", None, None, "per-broker"),
    "ssl.secure.random.implementation": ("string", None, None, "per-broker"),
    "ssl.trustmanager.algorithm": ("string", "PKIX", None, "per-broker"),
    "ssl.truststore.certificates": ("password", None, None, "per-listener"),
    "ssl.truststore.location": ("string", None, None, "per-listener"),
    "ssl.truststore.password": ("password", None, None, "per-listener"),
    "ssl.truststore.type": ("string", "JKS", None, "per-listener"),
    # --- CleanerConfig ---
    "log.cleaner.backoff.ms": ("long", "15000", ("range", 0, None), "cluster-wide"),
    "log.cleaner.dedupe.buffer.size": ("long", "134217728", None, "cluster-wide"),
    "log.cleaner.delete.retention.ms": ("long", "86400000", ("range", 0, None), "cluster-wide"),
    "log.cleaner.enable": ("boolean", "true", None, "read-only"),
    "log.cleaner.io.buffer.load.factor": ("double", "0.9", None, "cluster-wide"),
    "log.cleaner.io.buffer.size": ("int", "524288", ("range", 0, None), "cluster-wide"),
    "log.cleaner.io.max.bytes.per.second": ("double", "1.7976931348623157E308", None, "cluster-wide"),
    "log.cleaner.max.compaction.lag.ms": ("long", "9223372036854775807", ("range", 1, None), "cluster-wide"),
    "log.cleaner.min.cleanable.ratio": ("double", "0.5", ("range", 0, 1), "cluster-wide"),
    "log.cleaner.min.compaction.lag.ms": ("long", "0", ("range", 0, None), "cluster-wide"),
    "log.cleaner.threads": ("int", "1", ("range", 0, None), "cluster-wide"),
    # --- DelegationTokenManagerConfigs ---
    "delegation.token.expiry.check.interval.ms": ("long", "3600000", ("range", 1, None), "read-only"),
    "delegation.token.expiry.time.ms": ("long", "86400000", ("range", 1, None), "read-only"),
    "delegation.token.max.lifetime.ms": ("long", "604800000", ("range", 1, None), "read-only"),
    "delegation.token.secret.key": ("password", None, None, "read-only"),
    # --- GroupCoordinatorConfig ---
    "group.consumer.assignment.interval.ms": ("int", "1000", ("range", 0, None), "cluster-wide"),
    "group.consumer.assignors": ("list", "uniform,range", ("list_nonempty",), "read-only"),
    "group.consumer.heartbeat.interval.ms": ("int", "5000", ("range", 1, None), "read-only"),
    "group.consumer.max.assignment.interval.ms": ("int", "15000", ("range", 0, None), "read-only"),
    "group.consumer.max.heartbeat.interval.ms": ("int", "15000", ("range", 1, None), "read-only"),
    "group.consumer.max.session.timeout.ms": ("int", "60000", ("range", 1, None), "read-only"),
    "group.consumer.max.size": ("int", "2147483647", ("range", 1, None), "read-only"),
    "group.consumer.migration.policy": ("string", "bidirectional", ("in_ci", "BIDIRECTIONAL", "DISABLED", "DOWNGRADE", "UPGRADE"), "read-only"),
    "group.consumer.min.assignment.interval.ms": ("int", "0", ("range", 0, None), "read-only"),
    "group.consumer.min.heartbeat.interval.ms": ("int", "5000", ("range", 1, None), "read-only"),
    "group.consumer.min.session.timeout.ms": ("int", "45000", ("range", 1, None), "read-only"),
    "group.consumer.session.timeout.ms": ("int", "45000", ("range", 1, None), "read-only"),
    "group.coordinator.append.linger.ms": ("int", "-1", ("range", -1, None), "read-only"),
    "group.coordinator.background.threads": ("int", "2", ("range", 1, None), "read-only"),
    "group.coordinator.cached.buffer.max.bytes": ("int", "1048588", ("range", 524288, None), "cluster-wide"),
    "group.coordinator.rebalance.protocols": ("list", "classic,consumer,streams", ("list_nonempty", "consumer", "classic", "share", "streams"), "read-only"),
    "group.coordinator.threads": ("int", "4", ("range", 1, None), "read-only"),
    "group.initial.rebalance.delay.ms": ("int", "3000", None, "read-only"),
    "group.max.session.timeout.ms": ("int", "1800000", None, "read-only"),
    "group.max.size": ("int", "2147483647", ("range", 1, None), "read-only"),
    "group.min.session.timeout.ms": ("int", "6000", None, "read-only"),
    "group.share.assignment.interval.ms": ("int", "1000", ("range", 0, None), "cluster-wide"),
    "group.share.assignors": ("list", "simple", ("list_nonempty",), "read-only"),
    "group.share.heartbeat.interval.ms": ("int", "5000", ("range", 1, None), "read-only"),
    "group.share.max.assignment.interval.ms": ("int", "15000", ("range", 0, None), "read-only"),
    "group.share.max.heartbeat.interval.ms": ("int", "15000", ("range", 1, None), "read-only"),
    "group.share.max.session.timeout.ms": ("int", "60000", ("range", 1, None), "read-only"),
    "group.share.max.size": ("int", "200", ("range", 1, 1000), "read-only"),
    "group.share.min.assignment.interval.ms": ("int", "0", ("range", 0, None), "read-only"),
    "group.share.min.heartbeat.interval.ms": ("int", "5000", ("range", 1, None), "read-only"),
    "group.share.min.session.timeout.ms": ("int", "45000", ("range", 1, None), "read-only"),
    "group.share.session.timeout.ms": ("int", "45000", ("range", 1, None), "read-only"),
    "group.streams.assignment.interval.ms": ("int", "1000", ("range", 0, None), "cluster-wide"),
    "group.streams.heartbeat.interval.ms": ("int", "5000", ("range", 1, None), "read-only"),
    "group.streams.initial.rebalance.delay.ms": ("int", "3000", ("range", 0, None), "read-only"),
    "group.streams.max.assignment.interval.ms": ("int", "15000", ("range", 0, None), "read-only"),
    "group.streams.max.heartbeat.interval.ms": ("int", "15000", ("range", 1, None), "read-only"),
    "group.streams.max.session.timeout.ms": ("int", "60000", ("range", 1, None), "read-only"),
    "group.streams.max.size": ("int", "2147483647", ("range", 1, None), "read-only"),
    "group.streams.max.standby.replicas": ("int", "2", ("range", 0, None), "read-only"),
    "group.streams.min.assignment.interval.ms": ("int", "0", ("range", 0, None), "read-only"),
    "group.streams.min.heartbeat.interval.ms": ("int", "5000", ("range", 1, None), "read-only"),
    "group.streams.min.session.timeout.ms": ("int", "45000", ("range", 1, None), "read-only"),
    "group.streams.num.standby.replicas": ("int", "0", ("range", 0, None), "read-only"),
    "group.streams.session.timeout.ms": ("int", "45000", ("range", 1, None), "read-only"),
    "offset.metadata.max.bytes": ("int", "4096", None, "read-only"),
    "offsets.commit.timeout.ms": ("int", "5000", ("range", 1, None), "read-only"),
    "offsets.load.buffer.size": ("int", "5242880", ("range", 1, None), "read-only"),
    "offsets.retention.check.interval.ms": ("long", "600000", ("range", 1, None), "read-only"),
    "offsets.retention.minutes": ("int", "10080", ("range", 1, None), "read-only"),
    "offsets.topic.compression.codec": ("int", "0", None, "read-only"),
    "offsets.topic.num.partitions": ("int", "50", ("range", 1, None), "read-only"),
    "offsets.topic.replication.factor": ("short", "3", ("range", 1, None), "read-only"),
    "offsets.topic.segment.bytes": ("int", "104857600", ("range", 1, None), "read-only"),
    # --- KRaftConfigs ---
    "broker.heartbeat.interval.ms": ("int", "2000", None, "read-only"),
    "broker.session.timeout.ms": ("int", "9000", None, "read-only"),
    "controller.listener.names": ("list", ..., ("list_nonempty",), "read-only"),
    "initial.broker.registration.timeout.ms": ("int", "60000", None, "read-only"),
    "node.id": ("int", ..., ("range", 0, None), "read-only"),
    "process.roles": ("list", ..., ("list_nonempty", "broker", "controller"), "read-only"),
    "sasl.mechanism.controller.protocol": ("string", "GSSAPI", None, "read-only"),
    # --- LogConfig ---
    "alter.config.policy.class.name": ("class", None, None, "read-only"),
    "auto.create.topics.enable": ("boolean", "true", None, "read-only"),
    "cordoned.log.dirs": ("list", "", ("list",), "per-broker"),
    "create.topic.policy.class.name": ("class", None, None, "read-only"),
    "log.cleanup.policy": ("list", "delete", ("list", "compact", "delete"), "cluster-wide"),
    "log.dir": ("list", "/tmp/kafka-logs", ("list_nonempty",), "read-only"),
    "log.dir.failure.timeout.ms": ("long", "30000", ("range", 1, None), "read-only"),
    "log.dirs": ("list", None, ("list_nonempty",), "read-only"),
    "log.flush.interval.messages": ("long", "9223372036854775807", ("range", 1, None), "cluster-wide"),
    "log.flush.interval.ms": ("long", None, None, "cluster-wide"),
    "log.flush.offset.checkpoint.interval.ms": ("int", "60000", ("range", 0, None), "read-only"),
    "log.flush.scheduler.interval.ms": ("long", "9223372036854775807", None, "read-only"),
    "log.flush.start.offset.checkpoint.interval.ms": ("int", "60000", ("range", 0, None), "read-only"),
    "log.index.interval.bytes": ("int", "4096", ("range", 0, None), "cluster-wide"),
    "log.index.size.max.bytes": ("int", "10485760", ("range", 4, None), "cluster-wide"),
    "log.message.timestamp.after.max.ms": ("long", "3600000", ("range", 0, None), "cluster-wide"),
    "log.message.timestamp.before.max.ms": ("long", "9223372036854775807", ("range", 0, None), "cluster-wide"),
    "log.message.timestamp.type": ("string", "CreateTime", ("in", "CreateTime", "LogAppendTime"), "cluster-wide"),
    "log.preallocate": ("boolean", "false", None, "cluster-wide"),
    "log.retention.bytes": ("long", "-1", None, "cluster-wide"),
    "log.retention.check.interval.ms": ("long", "300000", ("range", 1, None), "read-only"),
    "log.retention.hours": ("int", "168", None, "read-only"),
    "log.retention.minutes": ("int", None, None, "read-only"),
    "log.retention.ms": ("long", None, None, "cluster-wide"),
    "log.roll.hours": ("int", "168", ("range", 1, None), "read-only"),
    "log.roll.jitter.hours": ("int", "0", ("range", 0, None), "read-only"),
    "log.roll.jitter.ms": ("long", None, None, "cluster-wide"),
    "log.roll.ms": ("long", None, None, "cluster-wide"),
    "log.segment.bytes": ("int", "1073741824", ("range", 1048576, None), "cluster-wide"),
    "log.segment.delete.delay.ms": ("long", "60000", ("range", 0, None), "cluster-wide"),
    "min.insync.replicas": ("int", "1", ("range", 1, None), "cluster-wide"),
    "num.partitions": ("int", "1", ("range", 1, None), "read-only"),
    "num.recovery.threads.per.data.dir": ("int", "2", ("range", 1, None), "cluster-wide"),
    # --- MetadataLogConfig ---
    "metadata.log.dir": ("string", None, None, "read-only"),
    "metadata.log.max.record.bytes.between.snapshots": ("long", "20971520", ("range", 1, None), "read-only"),
    "metadata.log.max.snapshot.interval.ms": ("long", "3600000", ("range", 0, None), "read-only"),
    "metadata.log.segment.bytes": ("int", "1073741824", ("range", 8388608, None), "read-only"),
    "metadata.log.segment.ms": ("long", "604800000", None, "read-only"),
    "metadata.max.idle.interval.ms": ("int", "500", ("range", 0, None), "read-only"),
    "metadata.max.retention.bytes": ("long", "104857600", None, "read-only"),
    "metadata.max.retention.ms": ("long", "604800000", None, "read-only"),
    # --- MetricConfigs ---
    "kafka.metrics.polling.interval.secs": ("int", "10", ("range", 1, None), "read-only"),
    "kafka.metrics.reporters": ("list", "", ("list",), "read-only"),
    "metric.reporters": ("list", "org.apache.kafka.common.metrics.JmxReporter", ("list",), "cluster-wide"),
    "metrics.num.samples": ("int", "2", ("range", 1, None), "read-only"),
    "metrics.recording.level": ("string", "INFO", None, "read-only"),
    "metrics.sample.window.ms": ("long", "30000", ("range", 1, None), "read-only"),
    "telemetry.max.bytes": ("int", "1048576", ("range", 1, None), "read-only"),
    # --- QuorumConfig ---
    "controller.quorum.append.linger.ms": ("int", "25", ("range", 0, None), "read-only"),
    "controller.quorum.auto.join.enable": ("boolean", "false", None, "read-only"),
    "controller.quorum.bootstrap.servers": ("list", "", ("custom", "ControllerQuorumBootstrapServersValidator"), "read-only"),
    "controller.quorum.election.backoff.max.ms": ("int", "1000", ("range", 0, None), "read-only"),
    "controller.quorum.election.timeout.ms": ("int", "1000", ("range", 0, None), "read-only"),
    "controller.quorum.fetch.max.bytes": ("int", "1048576", ("range", 1, None), "read-only"),
    "controller.quorum.fetch.snapshot.max.bytes": ("int", "1048576", ("range", 1, None), "read-only"),
    "controller.quorum.fetch.timeout.ms": ("int", "2000", ("range", 0, None), "read-only"),
    "controller.quorum.request.timeout.ms": ("int", "2000", ("range", 0, None), "read-only"),
    "controller.quorum.retry.backoff.ms": ("int", "20", ("range", 0, None), "read-only"),
    "controller.quorum.voters": ("list", "", ("custom", "ControllerQuorumVotersValidator"), "read-only"),
    # --- QuotaConfig ---
    "alter.log.dirs.replication.quota.window.num": ("int", "11", ("range", 1, None), "read-only"),
    "alter.log.dirs.replication.quota.window.size.seconds": ("int", "1", ("range", 1, None), "read-only"),
    "client.quota.callback.class": ("class", None, None, "read-only"),
    "controller.quota.window.num": ("int", "11", ("range", 1, None), "read-only"),
    "controller.quota.window.size.seconds": ("int", "1", ("range", 1, None), "read-only"),
    "quota.window.num": ("int", "11", ("range", 1, None), "read-only"),
    "quota.window.size.seconds": ("int", "1", ("range", 1, None), "read-only"),
    "replication.quota.window.num": ("int", "11", ("range", 1, None), "read-only"),
    "replication.quota.window.size.seconds": ("int", "1", ("range", 1, None), "read-only"),
    # --- RemoteLogManagerConfig ---
    "log.local.retention.bytes": ("long", "-2", ("range", -2, None), "cluster-wide"),
    "log.local.retention.ms": ("long", "-2", ("range", -2, None), "cluster-wide"),
    "remote.fetch.max.wait.ms": ("int", "500", ("range", 1, None), "cluster-wide"),
    "remote.list.offsets.request.timeout.ms": ("long", "30000", ("range", 1, None), "cluster-wide"),
    "remote.log.index.file.cache.total.size.bytes": ("long", "1073741824", ("range", 1, None), "cluster-wide"),
    "remote.log.manager.copier.thread.pool.size": ("int", "10", ("range", 1, None), "cluster-wide"),
    "remote.log.manager.copy.max.bytes.per.second": ("long", "9223372036854775807", ("range", 1, None), "cluster-wide"),
    "remote.log.manager.copy.quota.window.num": ("int", "11", ("range", 1, None), "read-only"),
    "remote.log.manager.copy.quota.window.size.seconds": ("int", "1", ("range", 1, None), "read-only"),
    "remote.log.manager.expiration.thread.pool.size": ("int", "10", ("range", 1, None), "cluster-wide"),
    "remote.log.manager.fetch.max.bytes.per.second": ("long", "9223372036854775807", ("range", 1, None), "cluster-wide"),
    "remote.log.manager.fetch.quota.window.num": ("int", "11", ("range", 1, None), "read-only"),
    "remote.log.manager.fetch.quota.window.size.seconds": ("int", "1", ("range", 1, None), "read-only"),
    "remote.log.manager.follower.thread.pool.size": ("int", "2", ("range", 1, None), "cluster-wide"),
    "remote.log.manager.task.interval.ms": ("long", "30000", ("range", 1, None), "read-only"),
    "remote.log.manager.thread.pool.size": ("int", "2", ("range", 1, None), "read-only"),
    "remote.log.metadata.custom.metadata.max.bytes": ("int", "128", ("range", 0, None), "read-only"),
    "remote.log.metadata.manager.class.name": ("string", "org.apache.kafka.server.log.remote.metadata.storage.TopicBasedRemoteLogMetadataManager", ("non_empty",), "read-only"),
    "remote.log.metadata.manager.class.path": ("string", None, None, "read-only"),
    "remote.log.metadata.manager.impl.prefix": ("string", "rlmm.config.", ("non_empty",), "read-only"),
    "remote.log.metadata.manager.listener.name": ("string", None, ("non_empty",), "read-only"),
    "remote.log.reader.max.pending.tasks": ("int", "100", ("range", 1, None), "read-only"),
    "remote.log.reader.threads": ("int", "10", ("range", 1, None), "cluster-wide"),
    "remote.log.storage.manager.class.name": ("string", None, ("non_empty",), "read-only"),
    "remote.log.storage.manager.class.path": ("string", None, None, "read-only"),
    "remote.log.storage.manager.impl.prefix": ("string", "rsm.config.", ("non_empty",), "read-only"),
    "remote.log.storage.system.enable": ("boolean", "false", None, "read-only"),
    # --- ReplicationConfigs ---
    "auto.leader.rebalance.enable": ("boolean", "true", None, "read-only"),
    "controller.socket.timeout.ms": ("int", "30000", None, "read-only"),
    "default.replication.factor": ("int", "1", None, "read-only"),
    "delete.records.purgatory.purge.interval.requests": ("int", "1", None, "read-only"),
    "fetch.purgatory.purge.interval.requests": ("int", "1000", None, "read-only"),
    "follower.fetch.last.tiered.offset.enable": ("boolean", "false", None, "cluster-wide"),
    "inter.broker.listener.name": ("string", None, None, "read-only"),
    "leader.imbalance.check.interval.seconds": ("long", "300", ("range", 1, None), "read-only"),
    "num.replica.fetchers": ("int", "1", ("range", 1, None), "cluster-wide"),
    "producer.purgatory.purge.interval.requests": ("int", "1000", None, "read-only"),
    "replica.fetch.backoff.ms": ("int", "1000", ("range", 0, None), "read-only"),
    "replica.fetch.max.bytes": ("int", "1048576", ("range", 0, None), "read-only"),
    "replica.fetch.min.bytes": ("int", "1", None, "read-only"),
    "replica.fetch.response.max.bytes": ("int", "10485760", ("range", 0, None), "read-only"),
    "replica.fetch.wait.max.ms": ("int", "500", None, "read-only"),
    "replica.high.watermark.checkpoint.interval.ms": ("long", "5000", None, "read-only"),
    "replica.lag.time.max.ms": ("long", "30000", None, "read-only"),
    "replica.selector.class": ("string", None, None, "read-only"),
    "replica.socket.receive.buffer.bytes": ("int", "65536", None, "read-only"),
    "replica.socket.timeout.ms": ("int", "30000", None, "read-only"),
    "security.inter.broker.protocol": ("string", "PLAINTEXT", ("in", "PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"), "read-only"),
    "unclean.leader.election.enable": ("boolean", "false", None, "cluster-wide"),
    # --- ServerConfigs ---
    "authorizer.class.name": ("string", "", ("non_null",), "read-only"),
    "background.threads": ("int", "10", ("range", 1, None), "cluster-wide"),
    "broker.id": ("int", "-1", None, "read-only"),
    "broker.rack": ("string", None, None, "read-only"),
    "compression.gzip.level": ("int", "-1", ("or", ("range", 1, 9), ("value", -1)), "cluster-wide"),
    "compression.lz4.level": ("int", "9", ("range", 1, 17), "cluster-wide"),
    "compression.type": ("string", "producer", ("in", "uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"), "cluster-wide"),
    "compression.zstd.level": ("int", "3", ("range", -131072, 22), "cluster-wide"),
    "config.providers": ("list", "", ("list",), "cluster-wide"),
    "controlled.shutdown.enable": ("boolean", "true", None, "read-only"),
    "delete.topic.enable": ("boolean", "true", None, "read-only"),
    "early.start.listeners": ("list", None, ("list",), "read-only"),
    "fetch.max.bytes": ("int", "57671680", ("range", 1024, None), "read-only"),
    "max.incremental.fetch.session.cache.slots": ("int", "1000", ("range", 0, None), "read-only"),
    "max.request.partition.size.limit": ("int", "2000", ("range", 1, None), "read-only"),
    "message.max.bytes": ("int", "1048588", ("range", 0, None), "cluster-wide"),
    "num.io.threads": ("int", "8", ("range", 1, None), "cluster-wide"),
    "num.replica.alter.log.dirs.threads": ("int", None, None, "read-only"),
    "request.timeout.ms": ("int", "30000", None, "read-only"),
    "socket.connection.setup.timeout.max.ms": ("long", "30000", None, "read-only"),
    "socket.connection.setup.timeout.ms": ("long", "10000", None, "read-only"),
    # --- ShareCoordinatorConfig ---
    "share.coordinator.append.linger.ms": ("int", "-1", ("range", -1, None), "read-only"),
    "share.coordinator.cached.buffer.max.bytes": ("int", "1048588", ("range", 524288, None), "cluster-wide"),
    "share.coordinator.load.buffer.size": ("int", "5242880", ("range", 1, None), "read-only"),
    "share.coordinator.snapshot.update.records.per.snapshot": ("int", "500", ("range", 0, 500), "read-only"),
    "share.coordinator.state.topic.compression.codec": ("int", "0", None, "read-only"),
    "share.coordinator.state.topic.min.isr": ("short", "2", ("range", 1, None), "read-only"),
    "share.coordinator.state.topic.num.partitions": ("int", "50", ("range", 1, None), "read-only"),
    "share.coordinator.state.topic.replication.factor": ("short", "3", ("range", 1, None), "read-only"),
    "share.coordinator.state.topic.segment.bytes": ("int", "104857600", ("range", 1, None), "read-only"),
    "share.coordinator.threads": ("int", "1", ("range", 1, None), "read-only"),
    "share.coordinator.write.timeout.ms": ("int", "5000", ("range", 1, None), "read-only"),
    # --- ShareGroupConfig ---
    "group.share.delivery.count.limit": ("int", "5", ("range", 2, 10), "read-only"),
    "group.share.max.delivery.count.limit": ("int", "10", ("range", 5, 25), "read-only"),
    "group.share.max.partition.max.record.locks": ("int", "4000", ("range", 2000, 10000), "read-only"),
    "group.share.max.record.lock.duration.ms": ("int", "60000", ("range", 30000, 3600000), "read-only"),
    "group.share.max.share.sessions": ("int", "2000", ("range", 1, None), "read-only"),
    "group.share.min.delivery.count.limit": ("int", "2", ("range", 2, 5), "read-only"),
    "group.share.min.partition.max.record.locks": ("int", "100", ("range", 100, 2000), "read-only"),
    "group.share.min.record.lock.duration.ms": ("int", "15000", ("range", 1000, 30000), "read-only"),
    "group.share.partition.max.record.locks": ("int", "2000", ("range", 100, 10000), "read-only"),
    "group.share.record.lock.duration.ms": ("int", "30000", ("range", 1000, 3600000), "read-only"),
    "share.fetch.purgatory.purge.interval.requests": ("int", "1000", None, "read-only"),
    # --- SocketServerConfigs ---
    "advertised.listeners": ("list", None, ("list_nonempty",), "read-only"),
    "connection.failed.authentication.delay.ms": ("int", "100", ("range", 0, None), "read-only"),
    "connections.max.idle.ms": ("long", "600000", None, "read-only"),
    "listener.security.protocol.map": ("string", "SASL_SSL:SASL_SSL,PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT", None, "per-broker"),
    "listeners": ("list", "PLAINTEXT://:9092", ("list_nonempty",), "per-broker"),
    "max.connection.creation.rate": ("int", "2147483647", ("range", 0, None), "cluster-wide"),
    "max.connections": ("int", "2147483647", ("range", 0, None), "cluster-wide"),
    "max.connections.per.ip": ("int", "2147483647", ("range", 0, None), "cluster-wide"),
    "max.connections.per.ip.overrides": ("string", "", None, "cluster-wide"),
    "num.network.threads": ("int", "3", ("range", 1, None), "cluster-wide"),
    "queued.max.request.bytes": ("long", "-1", None, "read-only"),
    "queued.max.requests": ("int", "500", ("range", 1, None), "read-only"),
    "socket.listen.backlog.size": ("int", "50", ("range", 1, None), "read-only"),
    "socket.receive.buffer.bytes": ("int", "102400", None, "read-only"),
    "socket.request.max.bytes": ("int", "104857600", ("range", 1, None), "read-only"),
    "socket.send.buffer.bytes": ("int", "102400", None, "read-only"),
    # --- TransactionLogConfig ---
    "producer.id.expiration.ms": ("int", "86400000", ("range", 1, None), "cluster-wide"),
    "transaction.partition.verification.enable": ("boolean", "true", None, "cluster-wide"),
    "transaction.state.log.load.buffer.size": ("int", "5242880", ("range", 1, None), "read-only"),
    "transaction.state.log.min.isr": ("int", "2", ("range", 1, None), "read-only"),
    "transaction.state.log.num.partitions": ("int", "50", ("range", 1, None), "read-only"),
    "transaction.state.log.replication.factor": ("short", "3", ("range", 1, None), "read-only"),
    "transaction.state.log.segment.bytes": ("int", "104857600", ("range", 1, None), "read-only"),
    # --- TransactionStateManagerConfig ---
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": ("int", "10000", ("range", 1, None), "read-only"),
    "transaction.max.timeout.ms": ("int", "900000", ("range", 1, None), "read-only"),
    "transaction.remove.expired.transaction.cleanup.interval.ms": ("int", "3600000", ("range", 1, None), "read-only"),
    "transaction.two.phase.commit.enable": ("boolean", "false", None, "read-only"),
    "transactional.id.expiration.ms": ("int", "604800000", ("range", 1, None), "read-only"),
    # --- dynamic only (QuotaConfig.brokerQuotaConfigs): not read from server.properties, described only when set ---
    "follower.replication.throttled.rate": ("long", "9223372036854775807", ("range", 0, None), "cluster-wide"),
    "leader.replication.throttled.rate": ("long", "9223372036854775807", ("range", 0, None), "cluster-wide"),
    "replica.alter.log.dirs.io.max.bytes.per.second": ("long", "9223372036854775807", ("range", 0, None), "cluster-wide"),
    # --- internal (Kafka's defineInternal): accepted, not listed by DescribeConfigs unless set ---
    "controller.performance.always.log.threshold.ms": ("long", "2000", ("range", 0, None), "read-only"),
    "controller.performance.sample.period.ms": ("long", "60000", ("range", 100, None), "read-only"),
    "group.consumer.regex.refresh.interval.ms": ("int", "600000", ("range", 10000, None), "read-only"),
    "group.share.initialize.retry.interval.ms": ("int", "30000", ("range", 1, None), "read-only"),
    "group.share.persister.class.name": ("string", "org.apache.kafka.server.share.persister.DefaultStatePersister", None, "read-only"),
    "internal.metadata.delete.delay.millis": ("long", "60000", None, "read-only"),
    "internal.metadata.log.segment.bytes": ("int", None, None, "read-only"),
    "internal.metadata.max.batch.size.in.bytes": ("int", "8388608", None, "read-only"),
    "log.initial.task.delay.ms": ("long", "30000", ("range", 0, None), "read-only"),
    "producer.id.expiration.check.interval.ms": ("int", "600000", ("range", 1, None), "read-only"),
    "remote.log.index.file.cache.ttl.ms": ("long", "900000", ("range", -1, None), "read-only"),
    "remote.log.manager.task.retry.backoff.max.ms": ("long", "30000", ("range", 1, None), "read-only"),
    "remote.log.manager.task.retry.backoff.ms": ("long", "500", ("range", 1, None), "read-only"),
    "remote.log.manager.task.retry.jitter": ("double", "0.2", ("range", 0, 0.5), "read-only"),
    "server.max.startup.time.ms": ("long", "9223372036854775807", ("range", 0, None), "read-only"),
    "share.coordinator.cold.partition.snapshot.interval.ms": ("int", "300000", ("range", 1, None), "read-only"),
    "share.coordinator.state.topic.prune.interval.ms": ("int", "300000", ("range", 1, None), "read-only"),
    "unclean.leader.election.interval.ms": ("long", "300000", ("range", 1, None), "read-only"),
    "unstable.api.versions.enable": ("boolean", "false", None, "read-only"),
    "unstable.feature.versions.enable": ("boolean", "false", None, "read-only"),
}
# Group configs (config resources of type GROUP, KIP-848): name: (type, default, check,
# the broker setting a group without its own value takes)
KAFKA_GROUP_CONFIGS = {
    "consumer.assignment.interval.ms": ("int", "1000", ("range", 0, None), "group.consumer.assignment.interval.ms"),
    "consumer.heartbeat.interval.ms": ("int", "5000", ("range", 1, None), "group.consumer.heartbeat.interval.ms"),
    "consumer.session.timeout.ms": ("int", "45000", ("range", 1, None), "group.consumer.session.timeout.ms"),
    "share.assignment.interval.ms": ("int", "1000", ("range", 0, None), "group.share.assignment.interval.ms"),
    "share.auto.offset.reset": ("string", "latest", ("custom", "ShareGroupAutoOffsetResetStrategy.Validator"), None),
    "share.delivery.count.limit": ("int", "5", ("range", 2, None), "group.share.delivery.count.limit"),
    "share.heartbeat.interval.ms": ("int", "5000", ("range", 1, None), "group.share.heartbeat.interval.ms"),
    "share.isolation.level": ("string", "read_uncommitted", ("in", "read_committed", "read_uncommitted"), None),
    "share.partition.max.record.locks": ("int", "2000", ("range", 100, None), "group.share.partition.max.record.locks"),
    "share.record.lock.duration.ms": ("int", "30000", ("range", 1000, None), "group.share.record.lock.duration.ms"),
    "share.renew.acknowledge.enable": ("boolean", "true", None, None),
    "share.session.timeout.ms": ("int", "45000", ("range", 1, None), "group.share.session.timeout.ms"),
    "streams.assignment.interval.ms": ("int", "1000", ("range", 0, None), "group.streams.assignment.interval.ms"),
    "streams.heartbeat.interval.ms": ("int", "5000", ("range", 1, None), "group.streams.heartbeat.interval.ms"),
    "streams.initial.rebalance.delay.ms": ("int", "3000", ("range", 0, None), "group.streams.initial.rebalance.delay.ms"),
    "streams.num.standby.replicas": ("int", "0", ("range", 0, None), "group.streams.num.standby.replicas"),
    "streams.session.timeout.ms": ("int", "45000", ("range", 1, None), "group.streams.session.timeout.ms"),
}
# The broker settings DescribeConfigs lists as synonyms of each other (besides
# listener.name.<listener>.<name> overrides, synonyms of <name>):
KAFKA_BROKER_SYNONYMS = {
    "log.flush.interval.ms": ("log.flush.interval.ms", "log.flush.scheduler.interval.ms"),
    "log.retention.hours": ("log.retention.ms", "log.retention.minutes", "log.retention.hours"),
    "log.retention.minutes": ("log.retention.ms", "log.retention.minutes", "log.retention.hours"),
    "log.retention.ms": ("log.retention.ms", "log.retention.minutes", "log.retention.hours"),
    "log.roll.hours": ("log.roll.ms", "log.roll.hours"),
    "log.roll.jitter.hours": ("log.roll.jitter.ms", "log.roll.jitter.hours"),
    "log.roll.jitter.ms": ("log.roll.jitter.ms", "log.roll.jitter.hours"),
    "log.roll.ms": ("log.roll.ms", "log.roll.hours"),
}
# ==== end of the generated block ====
KAFKA_INTERNAL_BROKER_CONFIGS = set(list(KAFKA_BROKER_CONFIGS)[
    list(KAFKA_BROKER_CONFIGS).index("controller.performance.always.log.threshold.ms"):])
KAFKA_QUOTA_BROKER_CONFIGS = {"follower.replication.throttled.rate", "leader.replication.throttled.rate",
                              "replica.alter.log.dirs.io.max.bytes.per.second"}
TOPIC_CONFIGS = {name: spec for name, spec in KAFKA_TOPIC_CONFIGS.items()
                 if not name.startswith("internal.")}     # described; internal ones only when set


if __name__ == "__main__":
    run_as_module()
    sys.modules.setdefault("doze_kafka", sys.modules["__main__"])   # under -m: one module, one name
    sys.exit(main())
