#!/usr/bin/env python3
"""Kafka 4.3.1's own topic and broker config definitions, as a table.

Nothing here is typed in by hand: DumpConfigs.java (next to this file) is
compiled against the Kafka 4.3.1 jars realkafka.py fetches and asks Kafka's
classes -- LogConfig's ConfigDef (topics), AbstractKafkaConfig.CONFIG_DEF
(KafkaConfig: the broker), DynamicConfig.Broker, DynamicBrokerConfig and
ServerTopicConfigSynonyms -- for every config's name, type, default,
validator, importance and dynamic update mode. --check then asks a real
Kafka 4.3.1 broker the same through DescribeConfigs (doze_kafka's codec over
a raw socket, as conformance/recorder.py does), reports where the two
disagree, and records what Kafka answers to bad values.

    python3 conformance/configs/extract.py --json OUT.json          # the table (JSON)
    python3 conformance/configs/extract.py --check --json OUT.json --md OUT.md
                                       # ... and ask a real Kafka 4.3.1 (started here,
                                       # on a free loopback port; or --bootstrap H:P)
    python3 conformance/configs/extract.py --emit-python [FILE]     # the block for doze_kafka.py
    python3 conformance/configs/extract.py --from-json T.json --emit-python   # no Java, no broker
    python3 conformance/configs/extract.py --verify-block          # CI: doze_kafka.py's block is
                                       # exactly what Kafka's jars give (exit 1 if not)

With no output option the table is printed as JSON. Needs Java 17 (javac) and
the jars (`python3 conformance/kafka/realkafka.py fetch`, done here if missing).
The class files go to a temporary directory and are removed afterwards.
Standard library only.
"""

import argparse
import collections
import datetime
import itertools
import json
import os
import re
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))   # conformance/
from lib import DOZE  # noqa: E402
import realkafka  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))

JAVA_SOURCE = os.path.join(HERE, "DumpConfigs.java")
TYPE_CODES = {"BOOLEAN": 1, "STRING": 2, "INT": 3, "SHORT": 4, "LONG": 5, "DOUBLE": 6,
              "LIST": 7, "CLASS": 8, "PASSWORD": 9}            # DescribeConfigs' config_type
CODE_TYPES = {v: k for k, v in TYPE_CODES.items()}
CODE_TYPES[0] = "UNKNOWN"
SOURCES = {1: "TOPIC_CONFIG", 2: "DYNAMIC_BROKER_CONFIG", 3: "DYNAMIC_DEFAULT_BROKER_CONFIG",
           4: "STATIC_BROKER_CONFIG", 5: "DEFAULT_CONFIG", 6: "DYNAMIC_BROKER_LOGGER_CONFIG"}
UNIT_MS = {"hours_to_ms": 3600000, "minutes_to_ms": 60000}
RESOURCE_TOPIC, RESOURCE_BROKER = 2, 4
OP_NAMES = {0: "SET", 1: "DELETE", 2: "APPEND", 3: "SUBTRACT"}


# --------------------------------------------------------------------------- Kafka's ConfigDefs

def dump_configdefs():
    """Run DumpConfigs.java against the Kafka jars -> its JSON (a dict)."""
    out = os.path.join(tempfile.mkdtemp(prefix="doze-configs-"), "configs.json")
    try:
        r = realkafka.run_java_source(JAVA_SOURCE, "DumpConfigs", [out])
        if r.returncode != 0:
            sys.exit("DumpConfigs failed (exit %d):\n%s" % (r.returncode, r.stderr.decode(errors="replace")))
        with open(out, encoding="utf-8") as f:
            return json.load(f)
    finally:
        shutil.rmtree(os.path.dirname(out), ignore_errors=True)


LAMBDA_RANGE_OR = re.compile(r"\[(-?\d+),\.\.\.,(-?\d+)\] or (-?\d+)")


def check_of(v):
    """A validator (DumpConfigs' structured form) -> the compact check tuple
    doze can apply (see BLOCK_HEADER for the forms)."""
    if v is None:
        return None
    kind = v["kind"]
    if kind == "range":
        return ("range", v["min"], v["max"])
    if kind == "one_of":
        return ("in",) + tuple(v["values"])
    if kind == "one_of_case_insensitive":
        return ("in_ci",) + tuple(v["values"])
    if kind == "list":
        return ("list" if v["empty_allowed"] else "list_nonempty",) + tuple(v["values"])
    if kind == "non_empty_string":
        return ("non_empty",)
    if kind == "non_empty_string_without_control_chars":
        return ("non_empty_no_control",)
    if kind == "non_null":
        return ("non_null",)
    if kind == "list_max_size":
        return ("list_max", v["max"])
    if kind == "all_of":
        return ("all",) + tuple(check_of(p) for p in v["of"])
    if kind == "lambda":
        m = LAMBDA_RANGE_OR.fullmatch(v["string"])          # CompressionType.GZIP.levelValidator()
        if m:
            return ("or", ("range", int(m.group(1)), int(m.group(2))), ("value", int(m.group(3))))
        return ("custom", v["string"])
    if v["class"].endswith(".ThrottledReplicaListValidator"):
        return ("replicas",)
    outer, _, inner = v["class"].rsplit(".", 1)[-1].rpartition("$")
    return ("custom", f"{outer}.{inner}" if inner == "Validator" else inner)   # no bare "Validator"


def synonym_chain_text(name, synonyms):
    parts = [name]
    for s in synonyms:
        conv = s["converter"]
        parts.append(s["name"] + ("" if conv == "identity" else " (x%d)" % UNIT_MS[conv]))
    return " <- ".join(parts)


def build_table(dump):
    """DumpConfigs' output -> the table: one entry a config, with derived fields."""
    topics, brokers = [], []
    broker_by_name = {b["name"]: b for b in dump["broker"]}
    inherited = collections.defaultdict(list)
    for t in dump["topic"]:
        e = dict(t)
        e["type_code"] = TYPE_CODES[t["type"]]
        e["check"] = check_of(t["validator"])
        e["synonym_chain"] = synonym_chain_text(t["name"], t["broker_synonyms"])
        e["described"] = not t["internal"]      # DescribeConfigs lists it when not set
        for s in t["broker_synonyms"]:
            inherited[s["name"]].append(t["name"])
            b = broker_by_name.get(s["name"])
            s["broker_default"] = b["default"] if b else None
            s["broker_type"] = b["type"] if b else None
        topics.append(e)
    groups = []
    for g in dump.get("group", []):
        e = dict(g)
        e["type_code"] = TYPE_CODES[g["type"]]
        e["check"] = check_of(g["validator"])
        groups.append(e)
    for b in dump["broker"]:
        e = dict(b)
        e["type_code"] = TYPE_CODES[b["type"]]
        e["check"] = check_of(b["validator"])
        e["mode"] = ("per-listener" if b["listener_prefix_only"] else b["dynamic_update"]
                     if b["dynamic_update"] else "read-only")
        e["described"] = b["in_kafka_config"] and not b["internal"]
        e["inherited_by"] = sorted(inherited.get(b["name"], ()))
        brokers.append(e)
    modes = collections.Counter(b["mode"] for b in brokers)
    counts = {
        "topic": len(topics),
        "topic_internal": sum(t["internal"] for t in topics),
        "topic_described": sum(t["described"] for t in topics),
        "broker": len(brokers),
        "broker_in_kafka_config": sum(b["in_kafka_config"] for b in brokers),
        "broker_dynamic_only": sum(not b["in_kafka_config"] for b in brokers),
        "broker_internal": sum(b["internal"] for b in brokers),
        "broker_described": sum(b["described"] for b in brokers),
        "broker_no_default": sum(not b["has_default"] for b in brokers),
        "broker_null_default": sum(b["has_default"] and b["default"] is None for b in brokers),
        "broker_password": sum(b["type"] == "PASSWORD" for b in brokers),
        "broker_modes": dict(sorted(modes.items())),
        "broker_types": dict(sorted(collections.Counter(b["type"] for b in brokers).items())),
        "topic_types": dict(sorted(collections.Counter(t["type"] for t in topics).items())),
    }
    return {
        "kafka_version": dump["kafka_version"],
        "kafka_commit": dump["kafka_commit"],
        "generated_by": "conformance/configs/extract.py (DumpConfigs.java against the Kafka jars)",
        "generated_at": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "counts": counts,
        "topic": topics,
        "broker": brokers,
        "group": groups,
        "broker_synonyms": {b["name"]: b["synonyms"] for b in brokers if b["synonyms"] != [b["name"]]},
        "dynamic_security_configs": dump["dynamic_security_configs"],
    }


# --------------------------------------------------------------------------- a real broker

class Client:
    """Requests to a broker with doze_kafka's codec (conformance/recorder.py's Runner)."""

    def __init__(self, bootstrap):
        import recorder
        self.runner = recorder.Runner(bootstrap)
        self.ids = itertools.count()

    def call(self, api, version, req):
        step = {"id": "s%d" % next(self.ids), "api": api, "v": version, "req": req}
        resp = self.runner.run_step(step)["response"]
        if resp.get("closed"):
            raise RuntimeError("%s v%d: the broker closed the connection" % (api, version))
        return resp

    def close(self):
        self.runner.close()

    # the requests
    def create_topic(self, name, configs=(), validate_only=False):
        r = self.call("CreateTopics", 7, {
            "topics": [{"name": name, "num_partitions": 1, "replication_factor": 1, "assignments": [],
                        "configs": [{"name": n, "value": v} for n, v in configs]}],
            "timeout_ms": 30000, "validate_only": validate_only})
        return r["topics"][0]

    def delete_topic(self, name):
        return self.call("DeleteTopics", 6, {"topics": [{"name": name, "topic_id": {"$uuid": "0" * 32}}],
                                             "timeout_ms": 30000})

    def describe(self, rtype, rname, keys=None, synonyms=True):
        r = self.call("DescribeConfigs", 4, {
            "resources": [{"resource_type": rtype, "resource_name": rname, "configuration_keys": keys}],
            "include_synonyms": synonyms, "include_documentation": False})
        return r["results"][0]

    def alter(self, rtype, rname, configs, validate_only):
        r = self.call("AlterConfigs", 2, {
            "resources": [{"resource_type": rtype, "resource_name": rname,
                           "configs": [{"name": n, "value": v} for n, v in configs]}],
            "validate_only": validate_only})
        return r["responses"][0]

    def incremental_alter(self, rtype, rname, ops, validate_only):
        r = self.call("IncrementalAlterConfigs", 1, {
            "resources": [{"resource_type": rtype, "resource_name": rname,
                           "configs": [{"name": n, "config_operation": op, "value": v} for n, op, v in ops]}],
            "validate_only": validate_only})
        return r["responses"][0]


def error_name(code):
    import doze_kafka as dk
    try:
        return dk.ErrorCode(code).name
    except ValueError:
        return str(code)


def answer(r):
    return {"error_code": r["error_code"], "error": error_name(r["error_code"]),
            "error_message": r.get("error_message")}


def compare_describe(table, topic_desc, broker_desc):
    """Where the ConfigDef dump and a real DescribeConfigs (of a topic with no
    overrides, and of broker 1) disagree. -> list of dicts."""
    out = []
    broker = {b["name"]: b for b in table["broker"]}

    def diff(resource, name, what, configdef, described, note=None):
        d = {"resource": resource, "name": name, "what": what, "configdef": configdef, "describe": described}
        if note:
            d["note"] = note
        out.append(d)

    def described(resource, entries, answer):
        """The ConfigDef's entries paired with their config in the DescribeConfigs answer:
        (entry, config). On the way the differences both resources share: an entry one side
        lacks, or of another type; at the end, the described configs the ConfigDef lacks."""
        desc = {c["name"]: c for c in answer["configs"]}
        for e in entries:
            c = desc.get(e["name"])
            if c is None:
                if e["described"]:
                    diff(resource, e["name"], "only_in_configdef", e["type"], None)
                continue
            if not e["described"]:
                diff(resource, e["name"], "internal_but_described", "internal", c["value"])
            if c["config_type"] != e["type_code"]:
                diff(resource, e["name"], "type", e["type"], CODE_TYPES.get(c["config_type"]))
            yield e, c
        names = {e["name"] for e in entries}
        for name in desc:
            if name not in names:
                diff(resource, name, "only_in_describe", None, desc[name]["value"])

    for t, c in described("topic", table["topic"], topic_desc):
        if c["config_source"] == 5 and c["value"] != t["default"]:
            diff("topic", t["name"], "default", t["default"], c["value"])
        if c["read_only"]:
            diff("topic", t["name"], "read_only", False, True)
        if c["is_sensitive"] != t["sensitive"]:
            diff("topic", t["name"], "sensitive", t["sensitive"], c["is_sensitive"])
        # the broker settings named among its synonyms must be the ConfigDef's chain
        chain = [s["name"] for s in t["broker_synonyms"]]
        named = [s["name"] for s in c["synonyms"] if s["name"] != t["name"]]
        if any(n not in chain for n in named):
            diff("topic", t["name"], "synonyms", chain, named)
        # the default-source synonyms: each chain member with a default, unless the
        # first of the chain has no value at all (Kafka drops the synonyms before it)
        first = chain[0] if chain else None
        defaults = [n for n in chain if broker.get(n) and broker[n]["default"] is not None]
        has_first = any(s["name"] == first for s in c["synonyms"])
        expected = defaults if (first and (has_first or (broker.get(first) or {}).get("default")
                                           is not None)) else []
        got = [s["name"] for s in c["synonyms"] if s["source"] == 5]
        if got != expected:
            diff("topic", t["name"], "default_synonyms", expected, got,
                 "described synonyms with source DEFAULT_CONFIG")

    for b, c in described("broker", table["broker"], broker_desc):
        if c["read_only"] != b["read_only"]:
            diff("broker", b["name"], "read_only", b["read_only"], c["read_only"])
        if c["is_sensitive"] != b["sensitive"]:
            diff("broker", b["name"], "sensitive", b["sensitive"], c["is_sensitive"])
        dflt = [s for s in c["synonyms"] if s["source"] == 5 and s["name"] == b["name"]]
        if b["default"] is not None and not b["sensitive"]:
            if not dflt:
                diff("broker", b["name"], "default", b["default"], None, "no DEFAULT_CONFIG synonym")
            elif dflt[0]["value"] != b["default"]:
                diff("broker", b["name"], "default", b["default"], dflt[0]["value"])
        elif dflt and dflt[0]["value"] is not None:
            diff("broker", b["name"], "default", b["default"], dflt[0]["value"])
        if c["config_source"] == 5 and c["value"] != (None if b["sensitive"] else b["default"]):
            diff("broker", b["name"], "described_value", b["default"], c["value"],
                 "value described with source DEFAULT_CONFIG")
    return out


# Bad values, tried on a real broker. (label, config name, value); a list of
# (name, value) pairs for several at once.
TOPIC_BAD_VALUES = [
    ("int below its range", "retention.ms", "-5"),
    ("int below its range", "max.message.bytes", "-1"),
    ("double above its range", "min.cleanable.dirty.ratio", "2"),
    ("not a number", "segment.bytes", "abc"),
    ("empty number", "retention.ms", ""),
    ("int overflow", "segment.bytes", "99999999999"),
    ("hex number", "segment.ms", "0x10"),
    ("exponent in a long", "retention.bytes", "1e3"),
    ("unknown enum value", "compression.type", "brotli"),
    ("enum value in the wrong case", "message.timestamp.type", "createtime"),
    ("enum value in upper case", "compression.type", "GZIP"),
    ("list with a bad member", "cleanup.policy", "delete,bogus"),
    ("list with an empty member", "cleanup.policy", "delete,,compact"),
    ("list member in the wrong case", "cleanup.policy", "Compact"),
    ("not a boolean", "unclean.leader.election.enable", "yes"),
    ("gzip level (range or -1)", "compression.gzip.level", "0"),
    ("throttled replicas, bad form", "leader.replication.throttled.replicas", "bad"),
    ("null value", "retention.ms", None),
    ("unknown name", "foo.bar", "1"),
    ("a broker setting's name", "log.retention.ms", "1000"),
    ("min > max compaction lag", [("min.compaction.lag.ms", "10"), ("max.compaction.lag.ms", "5")]),
    ("tiered storage is off", "remote.storage.enable", "true"),
]

# Odd but accepted values: set, then read back as DescribeConfigs stores them.
TOPIC_ODD_VALUES = [
    ("segment.bytes", " 2000000 "),
    ("retention.ms", "+5"),
    ("retention.bytes", "-0"),
    ("cleanup.policy", " compact , delete "),
    ("cleanup.policy", "delete,delete"),
    ("cleanup.policy", ""),
    ("unclean.leader.election.enable", "TRUE"),
    ("min.cleanable.dirty.ratio", "NaN"),
    ("min.cleanable.dirty.ratio", "1e-1"),
    ("min.cleanable.dirty.ratio", "0.5d"),
    ("leader.replication.throttled.replicas", "*"),
    ("leader.replication.throttled.replicas", "0:1, 1:1"),
    ("internal.segment.bytes", "1048576"),
]

TOPIC_INCREMENTAL_OPS = [
    ("APPEND to a non-list config", [("retention.ms", 2, "5")]),
    ("APPEND a bad member", [("cleanup.policy", 2, "bogus")]),
    ("APPEND a good member", [("cleanup.policy", 2, "compact")]),
    ("SUBTRACT a member not there", [("cleanup.policy", 3, "compact")]),
    ("APPEND null", [("cleanup.policy", 2, None)]),
    ("DELETE an unknown name", [("foo.bar", 1, None)]),
    ("DELETE a config not set", [("retention.ms", 1, None)]),
    ("unknown operation 7", [("retention.ms", 7, "5")]),
    ("the same name twice", [("retention.ms", 0, "5"), ("retention.ms", 0, "6")]),
    ("one good, one bad", [("retention.ms", 0, "5"), ("segment.bytes", 0, "x")]),
]

BROKER_BAD_VALUES = [
    ("not a number", "log.retention.ms", "abc"),
    ("below its range", "num.io.threads", "0"),
    ("below its range", "message.max.bytes", "-1"),
    ("negative, no validator", "log.retention.ms", "-5"),
    ("list with a bad member", "log.cleanup.policy", "bogus"),
    ("unknown enum value", "compression.type", "brotli"),
    ("unknown name", "foo.bar", "1"),
    ("a topic config's name", "retention.ms", "1000"),
    ("read-only config", "node.id", "5"),
    ("read-only synonym of a dynamic one", "log.retention.hours", "5"),
    ("internal config", "producer.id.expiration.check.interval.ms", "1000"),
    ("per-broker config", "listeners", "PLAINTEXT://127.0.0.1:1"),
    ("security config without listener prefix", "ssl.keystore.type", "PKCS12"),
    ("dynamic-only quota config", "leader.replication.throttled.rate", "100"),
    ("quota config below its range", "leader.replication.throttled.rate", "-1"),
    ("null value", "log.retention.ms", None),
]


def wait_described(client, rtype, rname, name, value, timeout=15.0):
    """Poll DescribeConfigs until `name` shows `value` from a non-default source (or
    is gone, value None) -> the last entry (None if not listed)."""
    deadline = time.time() + timeout
    while True:
        res = client.describe(rtype, rname, [name])
        entry = next((c for c in res["configs"] if c["name"] == name), None)
        done = (entry is None or entry["config_source"] == 5) if value is None else \
            (entry is not None and entry["config_source"] != 5)
        if done or time.time() > deadline:
            return entry
        time.sleep(0.2)


def read_properties(path):
    props = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if line and line[0] not in "#!" and "=" in line:
                k, v = line.split("=", 1)
                props[k.strip()] = v.strip()
    return props


def probe_real_broker(table, bootstrap, server_properties=None):
    """Ask a real Kafka 4.3.1: describe, compare, then try bad values. -> dict.
    server_properties: the broker's settings, if known (to tell which configs it
    describes as static without their being in server.properties)."""
    client = Client(bootstrap)
    topic = "doze-configs-probe"
    out = {"bootstrap": bootstrap, "server_properties": server_properties}
    try:
        created = client.create_topic(topic)
        if created["error_code"] not in (0, 36):            # 36: TOPIC_ALREADY_EXISTS
            raise RuntimeError("CreateTopics: %r" % created)
        out["create_topics_configs"] = {
            "count": len(created.get("configs") or []),
            "names_sorted": [c["name"] for c in created.get("configs") or []] ==
            sorted(c["name"] for c in created.get("configs") or [])}
        topic_desc = wait_for_topic(client, topic)
        broker_desc = client.describe(RESOURCE_BROKER, "1")
        cluster_desc = client.describe(RESOURCE_BROKER, "")
        out["describe_topic"] = topic_desc
        out["describe_broker"] = broker_desc
        out["describe_cluster_default"] = cluster_desc
        out["describe_counts"] = {"topic": len(topic_desc["configs"]), "broker": len(broker_desc["configs"]),
                                  "cluster_default": len(cluster_desc["configs"])}
        out["disagreements"] = compare_describe(table, topic_desc, broker_desc)
        out["static_sources"] = sorted(c["name"] for c in broker_desc["configs"] if c["config_source"] == 4)
        if server_properties is not None:
            out["static_not_in_server_properties"] = [n for n in out["static_sources"]
                                                      if n not in server_properties]
            out["server_properties_not_static"] = sorted(
                n for n in server_properties if n not in out["static_sources"])
        out["probes"] = probes(client, topic)
        client.delete_topic(topic)
    finally:
        client.close()
    return out


def wait_for_topic(client, topic, timeout=15.0):
    deadline = time.time() + timeout
    while True:
        res = client.describe(RESOURCE_TOPIC, topic)
        if res["error_code"] == 0 or time.time() > deadline:
            return res
        time.sleep(0.2)


def probes(client, topic):
    results = []

    def record(api, resource, rname, request, r, **more):
        d = {"api": api, "resource": resource, "resource_name": rname, "request": request}
        d.update(more)
        d.update(answer(r))
        results.append(d)
        return d

    def pairs(name, value):
        return name if isinstance(name, list) else [(name, value)]

    # topic: the same bad value through the three requests that take topic configs
    for label, name, *value in TOPIC_BAD_VALUES:
        cfg = pairs(name, value[0] if value else None)
        shown = [{"name": n, "value": v} for n, v in cfg]
        r = client.alter(RESOURCE_TOPIC, topic, cfg, validate_only=False)
        record("AlterConfigs", "topic", topic, shown, r, label=label)
        r = client.incremental_alter(RESOURCE_TOPIC, topic, [(n, 0, v) for n, v in cfg], validate_only=False)
        record("IncrementalAlterConfigs", "topic", topic, shown, r, label=label, op="SET")
        r = client.create_topic(topic + "-new", cfg, validate_only=True)
        record("CreateTopics", "topic", topic + "-new", shown, r, label=label, validate_only=True)
    r = client.alter(RESOURCE_TOPIC, "no-such-topic", [("retention.ms", "5")], validate_only=True)
    record("AlterConfigs", "topic", "no-such-topic", [{"name": "retention.ms", "value": "5"}], r,
           label="topic that does not exist")
    r = client.describe(RESOURCE_TOPIC, "no-such-topic")
    record("DescribeConfigs", "topic", "no-such-topic", None, r, label="topic that does not exist")

    # IncrementalAlterConfigs' operations
    for label, ops in TOPIC_INCREMENTAL_OPS:
        r = client.incremental_alter(RESOURCE_TOPIC, topic, ops, validate_only=True)
        record("IncrementalAlterConfigs", "topic", topic,
               [{"name": n, "op": OP_NAMES.get(op, op), "value": v} for n, op, v in ops], r,
               label=label, validate_only=True)

    # odd values that are accepted: what DescribeConfigs shows afterwards
    for name, value in TOPIC_ODD_VALUES:
        r = client.incremental_alter(RESOURCE_TOPIC, topic, [(name, 0, value)], validate_only=False)
        d = record("IncrementalAlterConfigs", "topic", topic, [{"name": name, "value": value}], r,
                   label="accepted? and stored as", op="SET")
        if r["error_code"] == 0:
            entry = wait_described(client, RESOURCE_TOPIC, topic, name, value)
            d["described_value"] = entry and entry["value"]
            d["described_source"] = entry and SOURCES.get(entry["config_source"])
        client.incremental_alter(RESOURCE_TOPIC, topic, [(name, 1, None)], validate_only=False)
        wait_described(client, RESOURCE_TOPIC, topic, name, None)

    # describe: empty key list, unknown key
    r = client.describe(RESOURCE_TOPIC, topic, [])
    record("DescribeConfigs", "topic", topic, {"configuration_keys": []}, r,
           label="empty configuration_keys", configs_listed=len(r["configs"]))
    r = client.describe(RESOURCE_TOPIC, topic, ["foo.bar"])
    record("DescribeConfigs", "topic", topic, {"configuration_keys": ["foo.bar"]}, r,
           label="unknown configuration key", configs_listed=len(r["configs"]))

    # broker: per-broker ("1") and cluster default ("")
    for rname in ("1", ""):
        for label, name, value in BROKER_BAD_VALUES:
            r = client.incremental_alter(RESOURCE_BROKER, rname, [(name, 0, value)], validate_only=True)
            record("IncrementalAlterConfigs", "broker", rname, [{"name": name, "value": value}], r,
                   label=label, op="SET", validate_only=True)
        for label, name, value in [("not a number", "log.retention.ms", "abc"),
                                   ("unknown name", "foo.bar", "1"),
                                   ("read-only config", "node.id", "5"),
                                   ("null value", "log.retention.ms", None)]:
            r = client.alter(RESOURCE_BROKER, rname, [(name, value)], validate_only=True)
            record("AlterConfigs", "broker", rname, [{"name": name, "value": value}], r,
                   label=label, validate_only=True)
    for rname in ("2", "x"):
        r = client.incremental_alter(RESOURCE_BROKER, rname, [("log.retention.ms", 0, "5")], validate_only=True)
        record("IncrementalAlterConfigs", "broker", rname, [{"name": "log.retention.ms", "value": "5"}], r,
               label="another broker id" if rname == "2" else "broker id not a number", validate_only=True)
        r = client.describe(RESOURCE_BROKER, rname)
        record("DescribeConfigs", "broker", rname, None, r,
               label="another broker id" if rname == "2" else "broker id not a number")

    # broker: stored and described (then removed again)
    for rname, name, value in [("1", "foo.bar", "1"), ("1", "log.retention.ms", "-5"),
                               ("", "foo.baz", "2"), ("", "log.roll.ms", "3600000")]:
        r = client.incremental_alter(RESOURCE_BROKER, rname, [(name, 0, value)], validate_only=False)
        d = record("IncrementalAlterConfigs", "broker", rname, [{"name": name, "value": value}], r,
                   label="set, then described as", op="SET")
        if r["error_code"] == 0:
            entry = wait_described(client, RESOURCE_BROKER, "1", name, value)
            d["described_on_broker_1"] = entry
            if rname == "":
                res = client.describe(RESOURCE_BROKER, "")
                d["described_on_cluster_default"] = next((c for c in res["configs"] if c["name"] == name), None)
            if name in ("log.retention.ms", "log.roll.ms"):
                tname = {"log.retention.ms": "retention.ms", "log.roll.ms": "segment.ms"}[name]
                res = client.describe(RESOURCE_TOPIC, topic, [tname])
                d["described_on_topic"] = res["configs"][0] if res["configs"] else None
    for rname, name in [("1", "foo.bar"), ("1", "log.retention.ms"), ("", "foo.baz"), ("", "log.roll.ms")]:
        client.incremental_alter(RESOURCE_BROKER, rname, [(name, 1, None)], validate_only=False)
    for name in ("foo.bar", "log.retention.ms", "foo.baz", "log.roll.ms"):
        wait_described(client, RESOURCE_BROKER, "1", name, None)
    return results


# Settings for a second broker (--static-probe): how Kafka describes what
# server.properties gives -- an unknown name, an internal config, and a synonym
# of a topic config's inherited setting that is not the first of its chain.
STATIC_PROBE_PROPS = {"foo.static": "1", "producer.id.expiration.check.interval.ms": "1000",
                      "log.retention.hours": "100"}


def probe_static_props(port=0):
    """Start a second Kafka 4.3.1 with STATIC_PROBE_PROPS; -> what it describes."""
    out = {"server_properties_added": STATIC_PROBE_PROPS}
    with realkafka.RealKafka(port=port, extra_props=STATIC_PROBE_PROPS) as k:
        client = Client(k.bootstrap)
        try:
            created = client.create_topic("doze-configs-static")
            out["create_topics_retention_ms"] = next(
                (c for c in created.get("configs") or [] if c["name"] == "retention.ms"), None)
            wait_for_topic(client, "doze-configs-static")
            out["describe_broker"] = client.describe(RESOURCE_BROKER, "1", sorted(STATIC_PROBE_PROPS) + [
                "log.retention.ms", "log.retention.minutes"])["configs"]
            out["describe_topic"] = client.describe(RESOURCE_TOPIC, "doze-configs-static", ["retention.ms"])["configs"]
        finally:
            client.close()
    return out


# --------------------------------------------------------------------------- the Python block

BLOCK_BEGIN = "# ==== generated by conformance/configs/extract.py from Kafka %s -- do not edit by hand ===="
BLOCK_END = "# ==== end of the generated block ===="
BLOCK_HEADER = """\
# Regenerate: python3 conformance/configs/extract.py --emit-python
# Kafka's own config definitions (commit %s): LogConfig's ConfigDef for
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
"""


def py(v):
    """A Python literal, compact: tuples without trailing noise, ... for Ellipsis."""
    if v is Ellipsis:
        return "..."
    if isinstance(v, (tuple, list)):
        inner = ", ".join(py(x) for x in v)
        return "(%s,)" % inner if len(v) == 1 else "(%s)" % inner
    if isinstance(v, str):
        return json.dumps(v)
    return repr(v)


def tuple_check(check):
    if check is None:
        return None
    return tuple(tuple_check(x) if isinstance(x, list) else x for x in check)


def emit_python(table):
    lines = [BLOCK_BEGIN % table["kafka_version"], BLOCK_HEADER % table["kafka_commit"]]

    def default_of(e):
        return e["default"] if e["has_default"] else Ellipsis

    lines.append("KAFKA_TOPIC_CONFIGS = {")
    internal = []
    for t in table["topic"]:
        line = "    %s: %s," % (py(t["name"]), py((t["type"].lower(), default_of(t), tuple_check(t["check"]),
                                                tuple(s["name"] for s in t["broker_synonyms"]))))
        (internal if t["internal"] else lines).append(line)
    if internal:
        lines.append("    # internal (Kafka's defineInternal): accepted, described only when set")
        lines += internal
    lines.append("}")
    units = {}
    for t in table["topic"]:
        for s in t["broker_synonyms"]:
            if s["converter"] != "identity":
                units[s["name"]] = UNIT_MS[s["converter"]]
    lines.append("KAFKA_MS_PER_UNIT = {%s}" % ", ".join("%s: %d" % (py(k), v) for k, v in sorted(units.items())))
    lines.append("")

    lines.append("KAFKA_BROKER_CONFIGS = {")
    groups = collections.OrderedDict()
    for b in table["broker"]:
        if b["internal"]:
            key = "internal (Kafka's defineInternal): accepted, not listed by DescribeConfigs unless set"
        elif not b["in_kafka_config"]:
            key = "dynamic only (QuotaConfig.brokerQuotaConfigs): not read from server.properties, " \
                  "described only when set"
        else:
            key = b["defined_in"]
        groups.setdefault(key, []).append(b)
    plain = sorted(k for k in groups if not k.startswith(("internal", "dynamic only")))
    for key in plain + sorted(k for k in groups if k not in plain):
        lines.append("    # --- %s ---" % key)
        for b in groups[key]:
            lines.append("    %s: %s," % (py(b["name"]), py((b["type"].lower(), default_of(b),
                                                             tuple_check(b["check"]), b["mode"]))))
    lines.append("}")
    lines.append("# Group configs (config resources of type GROUP, KIP-848): name: (type, default, check,")
    lines.append("# the broker setting a group without its own value takes)")
    lines.append("KAFKA_GROUP_CONFIGS = {")
    for g in table.get("group", []):
        lines.append("    %s: %s," % (py(g["name"]), py((g["type"].lower(), default_of(g), tuple_check(g["check"]),
                                                         g["broker_synonym"]))))
    lines.append("}")
    lines.append("# The broker settings DescribeConfigs lists as synonyms of each other (besides")
    lines.append("# listener.name.<listener>.<name> overrides, synonyms of <name>):")
    lines.append("KAFKA_BROKER_SYNONYMS = {")
    for name, syn in sorted(table["broker_synonyms"].items()):
        lines.append("    %s: %s," % (py(name), py(tuple(syn))))
    lines.append("}")
    lines.append(BLOCK_END)
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- the summary

def md_escape(s):
    if s is None:
        return "null"
    s = str(s)
    return (s.replace("|", "\\|") if s else '""')


def fmt_default(e):
    if not e["has_default"]:
        return "*(none: required)*"
    if e["default"] is None:
        return "null"
    return "`%s`" % e["default"] if e["default"] != "" else '`""`'


def entry_text(e):
    return "value %s, source %s, type %s, sensitive %s, read_only %s, synonyms [%s]" % (
        json.dumps(e["value"]), SOURCES.get(e["config_source"]), CODE_TYPES.get(e["config_type"]),
        e["is_sensitive"], e["read_only"],
        ", ".join("%s=%s (%s)" % (s["name"], json.dumps(s["value"]), SOURCES.get(s["source"]))
                  for s in e["synonyms"]))


def write_md(table, notes=None):
    c = table["counts"]
    L = []
    L.append("# Kafka %s config definitions\n" % table["kafka_version"])
    L.append("Generated by `conformance/configs/extract.py` at %s from Kafka %s (commit %s): "
             "DumpConfigs.java run against the Kafka jars, and DescribeConfigs / AlterConfigs / "
             "IncrementalAlterConfigs / CreateTopics sent to a real Kafka %s broker.\n"
             % (table["generated_at"], table["kafka_version"], table["kafka_commit"], table["kafka_version"]))
    L.append("## Counts\n")
    L.append("| | |\n|---|---|")
    L.append("| topic configs (LogConfig) | %d (%d internal: %s; %d described) |" % (
        c["topic"], c["topic_internal"], ", ".join(t["name"] for t in table["topic"] if t["internal"]),
        c["topic_described"]))
    L.append("| broker configs | %d = %d in KafkaConfig's ConfigDef + %d dynamic-only quota configs |" % (
        c["broker"], c["broker_in_kafka_config"], c["broker_dynamic_only"]))
    L.append("| ... internal (not listed by DescribeConfigs) | %d |" % c["broker_internal"])
    L.append("| ... listed by DescribeConfigs of a broker | %d |" % c["broker_described"])
    L.append("| ... no default (must be given) | %d: %s |" % (
        c["broker_no_default"], ", ".join(b["name"] for b in table["broker"] if not b["has_default"])))
    L.append("| ... default null | %d |" % c["broker_null_default"])
    L.append("| ... password (sensitive) | %d |" % c["broker_password"])
    L.append("| ... dynamic update mode | %s |" % ", ".join("%s %d" % kv for kv in c["broker_modes"].items()))
    L.append("| broker types | %s |" % ", ".join("%s %d" % kv for kv in c["broker_types"].items()))
    L.append("| topic types | %s |" % ", ".join("%s %d" % kv for kv in c["topic_types"].items()))
    rb = table.get("real_broker")
    if rb:
        dc = rb["describe_counts"]
        L.append("| real broker: DescribeConfigs lists | topic %d, broker 1: %d, cluster default (\"\"): %d |"
                 % (dc["topic"], dc["broker"], dc["cluster_default"]))
    L.append("")

    L.append("## Topic configs\n")
    L.append("Type is Kafka's ConfigDef.Type; default as DescribeConfigs shows it; validator is "
             "the validator's toString (what Kafka's docs print) and the check tuple the generated "
             "block carries; the chain is the broker settings the topic config inherits from, "
             "first set wins (xN: the value is multiplied by N to make milliseconds).\n")
    L.append("| name | type | default | validator | check | synonym chain | importance |")
    L.append("|---|---|---|---|---|---|---|")
    for t in table["topic"]:
        v = t["validator"]
        L.append("| `%s`%s | %s | %s | %s | `%s` | %s | %s |" % (
            t["name"], " *(internal)*" if t["internal"] else "", t["type"], fmt_default(t),
            md_escape(v["string"]) if v else "", py(tuple_check(t["check"])),
            md_escape(t["synonym_chain"]), t["importance"]))
    L.append("")
    L.append("Broker defaults of the chains: " + "; ".join(
        "%s=%s" % (s["name"], "null" if s["broker_default"] is None else s["broker_default"]) for t in table["topic"] for s in t["broker_synonyms"]
        if s["broker_default"] != t["default"]) + " (others equal the topic default).\n")

    L.append("## Broker configs: internal ones (accepted in server.properties, not listed by "
             "DescribeConfigs unless set there)\n")
    for b in table["broker"]:
        if b["internal"]:
            L.append("- `%s` %s, default %s, %s" % (b["name"], b["type"], fmt_default(b), b["mode"]))
    L.append("")
    L.append("Dynamic-only (QuotaConfig.brokerQuotaConfigs; not in KafkaConfig, so not in "
             "server.properties' ConfigDef and not described until set): " +
             ", ".join("`%s` (%s, default %s, %s)" % (b["name"], b["type"], fmt_default(b), b["mode"])
                       for b in table["broker"] if not b["in_kafka_config"]) + "\n")
    L.append("Per-listener only (DynamicBrokerConfig.DYNAMIC_SECURITY_CONFIGS): " +
             ", ".join("`%s`" % n for n in table["dynamic_security_configs"]) + "\n")
    L.append("Broker synonyms (DynamicBrokerConfig.brokerConfigSynonyms): " +
             "; ".join("`%s`: %s" % (k, " <- ".join(v)) for k, v in sorted(table["broker_synonyms"].items()))
             + "\n")
    dyn = [b for b in table["broker"] if b["mode"] != "read-only"]
    L.append("Dynamic broker configs (%d): " % len(dyn) +
             ", ".join("`%s` (%s)" % (b["name"], b["mode"]) for b in dyn) + "\n")

    if notes:
        L.append(notes)

    if rb:
        L.append("## Cross-check: ConfigDef dump vs DescribeConfigs of a real broker\n")
        L.append("A topic with no overrides and broker 1, DescribeConfigs v4 with include_synonyms. "
                 "Described with source STATIC_BROKER_CONFIG: %s.\n" % ", ".join(rb["static_sources"]))
        if rb.get("static_not_in_server_properties") is not None:
            L.append("Of these, not in the broker's server.properties: %s; in server.properties but "
                     "not described as static: %s.\n" % (
                         ", ".join(rb["static_not_in_server_properties"]) or "none",
                         ", ".join(rb["server_properties_not_static"]) or "none"))
        if rb["disagreements"]:
            L.append("| resource | name | what | ConfigDef | DescribeConfigs | note |")
            L.append("|---|---|---|---|---|---|")
            for d in rb["disagreements"]:
                L.append("| %s | `%s` | %s | %s | %s | %s |" % (
                    d["resource"], d["name"], d["what"], md_escape(json.dumps(d["configdef"])),
                    md_escape(json.dumps(d["describe"])), md_escape(d.get("note", ""))))
        else:
            L.append("No disagreements.")
        L.append("")
        L.append("CreateTopics v7's response lists %d configs, %s.\n" % (
            rb["create_topics_configs"]["count"],
            "sorted by name" if rb["create_topics_configs"]["names_sorted"] else "not sorted"))

        sp = rb.get("static_probe")
        if sp:
            L.append("### Settings from server.properties (a second broker with %s)\n" % ", ".join(
                "%s=%s" % kv for kv in sorted(sp["server_properties_added"].items())))
            for e in sp["describe_broker"] + sp["describe_topic"]:
                L.append("- DescribeConfigs `%s`: %s" % (e["name"], entry_text(e)))
            e = sp["create_topics_retention_ms"]
            if e:
                L.append("- CreateTopics v7 response `retention.ms`: value %s, source %s" % (
                    json.dumps(e["value"]), SOURCES.get(e["config_source"])))
            L.append("")

        L.append("## What Kafka answers\n")
        L.append("Every probe, as sent to the real broker (validate_only false unless the row says "
                 "so; bad values change nothing).\n")
        L.append("| request | resource | config(s) | probe | error | message | stored / described as |")
        L.append("|---|---|---|---|---|---|---|")
        for p in rb["probes"]:
            req = p["request"]
            if isinstance(req, list):
                shown = ", ".join("%s%s=%s" % (x["name"], " " + str(x["op"]) if "op" in x else "",
                                               "null" if x["value"] is None else json.dumps(x["value"]))
                                  for x in req)
            else:
                shown = json.dumps(req) if req is not None else ""
            extra = ""
            if "described_value" in p:
                extra = "%s (%s)" % (json.dumps(p["described_value"]), p["described_source"])
            if "configs_listed" in p:
                extra = "%d configs listed" % p["configs_listed"]
            for key in ("described_on_broker_1", "described_on_cluster_default", "described_on_topic"):
                if key in p:
                    e = p[key]
                    extra += "%s `%s`: %s. " % (key.replace("described_on_", "").replace("_", " "),
                                                e["name"] if e else "", "not listed" if e is None else entry_text(e))
            L.append("| %s%s | %s %s | %s | %s | %d %s | %s | %s |" % (
                p["api"], " (validate_only)" if p.get("validate_only") else "", p["resource"],
                json.dumps(p["resource_name"]), md_escape(shown), md_escape(p.get("label", "")),
                p["error_code"], p["error"], md_escape(p["error_message"]), md_escape(extra) if extra else ""))
        L.append("")
    return "\n".join(L) + "\n"


def verify_block(block, doze_path):
    """0 if doze_kafka.py holds exactly this block, else 1 with a diff."""
    import difflib
    text = open(doze_path, encoding="utf-8").read()
    first = block.splitlines()[0]
    if first not in text or BLOCK_END not in text:
        print(f"{doze_path}: no generated block ({first!r} ... {BLOCK_END!r})", file=sys.stderr)
        return 1
    start = text.index(first)
    have = text[start:text.index(BLOCK_END, start) + len(BLOCK_END)] + "\n"
    if have == block:
        print(f"{doze_path}: the generated config block is what Kafka's jars give "
              f"({len(block.splitlines())} lines)")
        return 0
    sys.stderr.writelines(difflib.unified_diff(have.splitlines(True), block.splitlines(True),
                                               "doze_kafka.py", "extract.py --emit-python", n=1))
    print(f"{doze_path}: the generated config block differs; regenerate it with --emit-python",
          file=sys.stderr)
    return 1


# --------------------------------------------------------------------------- main

def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--json", metavar="FILE", help="write the table here")
    ap.add_argument("--md", metavar="FILE", help="write a summary (Markdown) here")
    ap.add_argument("--notes", metavar="FILE", help="Markdown to put into the summary after the tables")
    ap.add_argument("--emit-python", nargs="?", const="-", metavar="FILE",
                    help="write the block for doze_kafka.py (default: stdout)")
    ap.add_argument("--verify-block", nargs="?", const=DOZE,
                    metavar="DOZE", help="compare the generated block in doze_kafka.py with this table")
    ap.add_argument("--from-json", metavar="FILE", help="start from a table written before (no Java)")
    ap.add_argument("--check", action="store_true",
                    help="also ask a real Kafka 4.3.1 (started here unless --bootstrap)")
    ap.add_argument("--bootstrap", metavar="HOST:PORT", help="the real broker to ask (node id 1)")
    ap.add_argument("--static-probe", action="store_true",
                    help="with --check: also start a second Kafka with a few odd server.properties "
                    "settings (STATIC_PROBE_PROPS) and record how it describes them")
    ap.add_argument("--port", type=int, default=0, help="port for the Kafka started here (default: free)")
    ap.add_argument("--dir", help="run directory for the Kafka started here (default: temporary); "
                    "with --bootstrap, that broker's (its server.properties is read)")
    a = ap.parse_args(argv)

    if a.from_json:
        with open(a.from_json, encoding="utf-8") as f:
            table = json.load(f)
    else:
        table = build_table(dump_configdefs())
        c = table["counts"]
        print("Kafka %s: %d topic configs, %d broker configs" % (table["kafka_version"], c["topic"], c["broker"]),
              file=sys.stderr)
    if a.check:
        if a.bootstrap:
            path = os.path.join(a.dir, "server.properties") if a.dir else None
            props = read_properties(path) if path and os.path.exists(path) else None
            table["real_broker"] = probe_real_broker(table, a.bootstrap, props)
        else:
            with realkafka.RealKafka(port=a.port, dir=a.dir) as k:
                props = read_properties(os.path.join(k.dir, "server.properties"))
                table["real_broker"] = probe_real_broker(table, k.bootstrap, props)
        rb = table["real_broker"]
        if a.static_probe:
            rb["static_probe"] = probe_static_props()
        print("real broker: %d disagreements, %d probes" % (len(rb["disagreements"]), len(rb["probes"])),
              file=sys.stderr)
    if a.json:
        with open(a.json, "w", encoding="utf-8") as f:
            json.dump(table, f, indent=1)
            f.write("\n")
    if a.md:
        notes = open(a.notes, encoding="utf-8").read() if a.notes else None
        with open(a.md, "w", encoding="utf-8") as f:
            f.write(write_md(table, notes))
    if a.emit_python:
        block = emit_python(table)
        if a.emit_python == "-":
            sys.stdout.write(block)
        else:
            with open(a.emit_python, "w", encoding="utf-8") as f:
                f.write(block)
    if a.verify_block:
        return verify_block(emit_python(table), a.verify_block)
    if not (a.json or a.md or a.emit_python):
        json.dump(table, sys.stdout, indent=1)
        sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
