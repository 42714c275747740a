#!/usr/bin/env python3
"""Replay recordings of Apache Kafka 4.3.1 against another broker and compare.

    import sys; sys.path.insert(0, "conformance")
    import replay
    replay.run_recording("endtxn-decisions", broker.bootstrap)   # -> [difference, ...]
    replay.broker_settings("transaction-timeout")                 # settings to start doze with

Command line:

    python3 conformance/replay.py                  # every recording, each on a fresh in-process doze
    python3 conformance/replay.py add-offsets --bootstrap 127.0.0.1:9092
    python3 conformance/replay.py --diff DIR_A DIR_B   # compare two recordings of the same scenarios
    python3 conformance/replay.py --transaction-version 2   # every recording, doze at that level
    python3 conformance/replay.py --dir DIR            # the recordings of another directory

Each recorded request is sent again; references ({"$ref": ...}) are resolved
against the new broker's answers. Every answer is compared field by field with
Kafka's after normalising the fields listed in NORMALISED (README.md explains
why). A step listed in the scenario's known_differences is instead compared
with doze's expected answer, and the difference is reported by name in
`known_differences_seen` rather than as a failure.
"""

import argparse
import json
import os
import sys
import time

import recorder                 # (its lib puts the repository root and conformance/kafka on sys.path)
from realkafka import extra_listener_names

RECORDINGS = recorder.RECORDINGS

# Settings every broker under test needs (Kafka names; the real Kafka gets them from
# realkafka.py). Per recording, broker_settings(name) adds the scenario's own.
SETTINGS = {"group.initial.rebalance.delay.ms": 0}

# --- normalisation ------------------------------------------------------------------
# Field name -> how it is compared. "map:KIND" fields are mapped Kafka value -> doze value
# by first appearance (consistently, both ways); "ignore" fields are not compared;
# "time" fields are wall-clock: only "set (>= 0)" vs "unset (< 0)" is compared;
# "presence" fields: only null vs not null.
NORMALISED = {
    "throttle_time_ms": "ignore",            # quota throttling; always 0 here, but not a contract
    "cluster_id": "ignore",                  # random per cluster
    "host": "ignore",                        # the broker's address
    "port": "ignore",
    "node_id": "map:node", "broker_id": "map:node", "controller_id": "map:node",
    "leader_id": "map:node", "replica_nodes": "map:node", "isr_nodes": "map:node",
    "offline_replicas": "map:node",
    "producer_id": "map:producer", "producer_id_filters": "map:producer",
    "member_id": "map:member", "leader": "map:member",
    "topic_id": "map:topic",
    "log_append_time_ms": "time", "transaction_start_time_ms": "time",
    "last_timestamp": "time",                # DescribeProducers: includes marker append times
    "error_message": "ignore", "batch_index_error_message": "ignore",   # prose (see README)
    "session_id": "set",                     # Fetch: a random id when a session is created
    "timestamp": "maybe-time", "base_timestamp": "maybe-time", "max_timestamp": "maybe-time",
}
# "maybe-time": a timestamp the client chose is compared; one at or after WALL_CLOCK_MIN
# (2025-01-01) is the broker's clock (a marker's or the log append time): set vs unset.
# The scenarios use timestamp -1 or ones from 2023.
WALL_CLOCK_MIN = 1735689600000
# A batch's CRC covers its producer id (mapped) and, in control batches (transaction
# markers), the broker's clock: not compared for those batches.
CONTROL_BATCH_TIME_FIELDS = {"crc"}
# Broker configs whose server.properties value is the broker's own address or directory
# (its ports and data directory differ per run, like "host" and "port"): in a config
# entry (DescribeConfigs' configs and their synonyms: a dict with "name", "value" and
# "config_source" or "source") of one of these names whose source is
# STATIC_BROKER_CONFIG (4) on Kafka's side, the value is not compared when both are set.
# Their defaults (source 5) are compared.
RUN_DEPENDENT_CONFIGS = {"listeners", "advertised.listeners", "controller.quorum.bootstrap.servers",
                         "log.dirs"}
STATIC_BROKER_CONFIG = 4
# Two of them realkafka.py writes into the recording Kafka's server.properties with
# that run's ports, and doze is not told (it has no controller, and advertises the
# address it listens on): where Kafka has them from server.properties, only the
# entry's presence is compared.
SETUP_ONLY_CONFIGS = {"advertised.listeners", "controller.quorum.bootstrap.servers"}


# Known differences that hold for every step of an API (named like the per-scenario ones).
API_KNOWN_DIFFERENCES = {}


class Mapper:
    """Kafka value <-> doze value, bound at first appearance, per kind."""

    IDENTITY = {None, -1, "", "0" * 32}

    def __init__(self):
        self.fwd, self.back = {}, {}

    def same(self, kind, a, b):
        if a in self.IDENTITY or b in self.IDENTITY:
            return a == b
        if kind == "producer" and a == b == 0:
            # 0 is also the "no producer" default of error entries (DescribeTransactions
            # for an unknown id), besides being a real id: 0 on both sides binds nothing.
            return True
        fwd, back = self.fwd.setdefault(kind, {}), self.back.setdefault(kind, {})
        if a in fwd or b in back:
            return fwd.get(a) == b and back.get(b) == a
        fwd[a], back[b] = b, a
        return True


def _key(v):
    if isinstance(v, dict) and "$uuid" in v:
        return v["$uuid"]
    return v


def compare(a, b, path, mapper, diffs, api=None, in_control_batch=False):
    """Kafka's value a vs the other broker's b; appends difference strings to diffs."""
    parts = path.split(".") if path else [""]
    while len(parts) > 1 and parts[-1].isdigit():       # list element: the list's name rules
        parts.pop()
    name = parts[-1]
    rule = NORMALISED.get(name)
    if in_control_batch and name in CONTROL_BATCH_TIME_FIELDS:
        return
    if rule == "ignore":
        return
    if rule == "set":
        if bool(a) != bool(b):
            diffs.append(f"{path}: kafka={a!r} doze={b!r} (set vs unset)")
        return
    if rule == "maybe-time" and isinstance(a, int) and isinstance(b, int) \
            and (a >= WALL_CLOCK_MIN or b >= WALL_CLOCK_MIN):
        rule = "time"
    if rule == "time":
        if isinstance(a, int) and isinstance(b, int):
            if (a >= 0) != (b >= 0):
                diffs.append(f"{path}: kafka={a!r} doze={b!r} (wall-clock time: set vs unset)")
            return
    if rule and rule.startswith("map:") and not isinstance(a, (list, dict)) or \
            rule and rule.startswith("map:") and isinstance(a, dict) and "$uuid" in a:
        if not mapper.same(rule[4:], _key(a), _key(b)):
            diffs.append(f"{path}: kafka={_show(a)} doze={_show(b)} ({rule[4:]} id mapping)")
        return
    if isinstance(a, dict) and isinstance(b, dict):
        control = in_control_batch
        if "header" in a and isinstance(a.get("header"), dict):
            h = a["header"]
            control = bool(h.get("attributes", 0) & 0x20) or h.get("producer_id", -1) >= 0
        run_dependent = a.get("name") in RUN_DEPENDENT_CONFIGS \
            and a.get("config_source", a.get("source")) == STATIC_BROKER_CONFIG \
            and isinstance(a.get("value"), str) and isinstance(b.get("value"), str)
        setup_only = a.get("name") in SETUP_ONLY_CONFIGS \
            and a.get("config_source") == STATIC_BROKER_CONFIG and "synonyms" in a
        for k in list(a) + [k for k in b if k not in a]:
            sub = f"{path}.{k}" if path else k
            if run_dependent and k == "value" or setup_only and k in ("value", "config_source", "synonyms"):
                continue
            if k not in a:
                diffs.append(f"{sub}: kafka has no such field, doze={_show(b[k])}")
            elif k not in b:
                diffs.append(f"{sub}: kafka={_show(a[k])}, doze has no such field")
            else:
                compare(a[k], b[k], sub, mapper, diffs, api, control)
        return
    if isinstance(a, list) and isinstance(b, list):
        aligned = _aligned_by_mapped_id(a, b, mapper)
        if aligned is not None:
            a, b = aligned
        else:
            a, b = _sorted_like_a_map(name, a), _sorted_like_a_map(name, b)
        if len(a) != len(b):
            diffs.append(f"{path}: kafka has {len(a)} entries, doze {len(b)}: "
                         f"kafka={_show(a)} doze={_show(b)}")
            if rule and rule.startswith("map:"):
                return
        for i, (x, y) in enumerate(zip(a, b)):
            compare(x, y, f"{path}.{i}", mapper, diffs, api, in_control_batch)
        return
    if a != b:
        diffs.append(f"{path}: kafka={_show(a)} doze={_show(b)}{_error_names(name, a, b)}")


# Lists that are maps in Kafka's code (per-topic / per-partition / per-group results,
# built from hash maps): compared sorted by their key, not in the order sent.
MAP_KEYS = ("name", "topic", "group_id", "transactional_id", "key", "resource_name",
            "partition_index", "index", "partition")
INT_SET_LISTS = {"partitions", "partition_indexes"}


def _sorted_like_a_map(name, items):
    if not items:
        return items
    if name in INT_SET_LISTS and all(isinstance(x, int) for x in items):
        return sorted(items)
    if not all(isinstance(x, dict) for x in items):
        return items
    for k in MAP_KEYS:
        if all(k in x for x in items):
            keys = [json.dumps(x[k], sort_keys=True) for x in items]
            if len(set(keys)) == len(keys):
                return [x for _, x in sorted(zip(keys, items), key=lambda p: p[0])]
            return items
    return items


# Lists keyed by an id that is mapped per broker (KIP-848's assignments name topics by
# topic_id alone; members are listed by member_id), in a hash map's order: when no
# MAP_KEYS field keys them, Kafka's entries are taken sorted by their id, and the other
# broker's in the same order under the mapping bound so far (by earlier answers:
# Metadata's topic ids, heartbeats' member ids). Left as they are while any id is unbound.
MAPPED_ID_KEYS = ("topic_id", "member_id")


def _aligned_by_mapped_id(a, b, mapper):
    """-> (a, b) reordered so that entries with mapped ids face each other, or None."""
    if not a or len(a) != len(b) or not all(isinstance(x, dict) for x in a + b):
        return None
    if any(all(k in x for x in a + b) for k in MAP_KEYS):
        return None
    for field in MAPPED_ID_KEYS:
        if not all(field in x for x in a + b):
            continue
        if not all(isinstance(_key(x[field]), (str, int, type(None))) for x in a + b):
            return None                 # e.g. a request's {"$ref": ...} (compared as it is)
        kind = NORMALISED[field][len("map:"):]
        a_ids = [json.dumps(_key(x[field])) for x in a]
        b_ids = [json.dumps(_key(x[field])) for x in b]
        if len(set(a_ids)) != len(a_ids) or len(set(b_ids)) != len(b_ids):
            return None
        bound = mapper.fwd.get(kind, {})
        want = [_mapped_id(_key(x[field]), bound) for x in a]
        if None in want or set(want) != set(b_ids):
            return None
        order = sorted(range(len(a)), key=lambda i: a_ids[i])
        at = {k: i for i, k in enumerate(b_ids)}
        return [a[i] for i in order], [b[at[want[i]]] for i in order]
    return None


def _mapped_id(k, bound):
    """The other broker's id for Kafka's id k (JSON text), or None if it is not bound yet."""
    if k in Mapper.IDENTITY:
        return json.dumps(k)
    return json.dumps(bound[k]) if k in bound else None


def _show(v, limit=300):
    s = json.dumps(v)
    return s if len(s) <= limit else s[:limit] + "..."


def _error_names(name, a, b):
    if not name.endswith("error_code") or not isinstance(a, int) or not isinstance(b, int):
        return ""
    from doze_kafka import ErrorCode

    def n(c):
        try:
            return ErrorCode(c).name
        except ValueError:
            return str(c)
    return f" ({n(a)} vs {n(b)})"


# ApiVersions' features (KIP-584). doze finalizes only transaction.version; Kafka 4.3.1
# also metadata.version, group.version, share.version, streams.version,
# eligible.leader.replicas.version and kraft.version. Only the entries of these are
# compared, and only when both brokers ran at the same transaction.version (the classic
# recordings replay on doze at its default level 1, while Kafka ran at 2).
# finalized_features_epoch is Kafka's metadata offset: set vs unset only.
COMPARED_FEATURES = {"transaction.version"}
FEATURE_LISTS = ("supported_features", "finalized_features")
# What Kafka 4.3.1 finalizes when formatted with its defaults (realkafka.py): the
# recordings made before the recorder kept "finalized_features" ran on such a Kafka.
KAFKA_DEFAULT_FEATURES = {"metadata.version": 30, "transaction.version": 2, "group.version": 1,
                          "share.version": 1, "streams.version": 1, "eligible.leader.replicas.version": 1,
                          "kraft.version": 1}


def normalise_response(api, resp, features="compare"):
    """Whole-response normalisation of ApiVersions: its list of APIs and versions, and
    the tags doze's schema does not declare, unless it is an error answer; its features
    (features="compare": only COMPARED_FEATURES' entries; "skip": none, the brokers ran
    at different levels; "all": every entry, for two recordings of Kafka), and the
    features' epoch as set or unset."""
    if api != "ApiVersions" or not isinstance(resp, dict):
        return resp
    resp = dict(resp)
    if resp.get("error_code") == 0:
        resp.pop("api_keys", None)
        resp.pop("_unknown_tags", None)
    if isinstance(resp.get("finalized_features_epoch"), int):
        resp["finalized_features_epoch"] = "set" if resp["finalized_features_epoch"] >= 0 else "unset"
    if features != "all":
        for k in FEATURE_LISTS:
            if isinstance(resp.get(k), list):
                resp[k] = [e for e in resp[k] if features == "compare" and e.get("name") in COMPARED_FEATURES]
    return resp


def upgrade_tags(rec, key="response"):
    """A recorded answer as the recorder decodes it today: tagged fields that doze's
    schema did not declare when it was recorded were kept as "_unknown_tags" (the
    ApiVersions features, before doze knew them), and a tagged field it now declares that
    was absent gets its default, as recorder.decode_response does. -> the answer."""
    resp = rec.get(key)
    if not isinstance(resp, dict) or "closed" in resp or "decode_error" in resp:
        return resp
    try:
        spec = recorder.api_spec(rec["api"])
        version = rec.get("decode_version", rec["version"])
        if not spec.flexible(version):
            return resp
        from doze_kafka import plan_for
        return _upgrade_struct(resp, plan_for(spec, version, "response"))
    except Exception:                      # noqa: BLE001 -- a version or field doze no longer has
        return resp


def _upgrade_struct(node, plan):
    if not isinstance(node, dict):
        return node
    from doze_kafka import Reader
    out = dict(node)
    for f, child, _ in plan.steps:
        if child is not None and f.name in out:
            out[f.name] = _upgrade_child(out[f.name], child)
    unknown = dict(out.pop("_unknown_tags", None) or {})
    absent = dict(plan.absent)
    for tag, (f, child, _) in sorted(plan.tagged.items()):
        if str(tag) in unknown:
            data = bytes.fromhex(unknown.pop(str(tag))["$hex"])
            out[f.name] = recorder._decode_value(Reader(data), f, child, True)
        elif f.name not in out:
            out[f.name] = recorder.value_to_json(f, absent.get(f.name))
        elif child is not None:
            out[f.name] = _upgrade_child(out[f.name], child)
    if unknown:
        out["_unknown_tags"] = unknown
    return out


def _upgrade_child(value, plan):
    if isinstance(value, list):
        return [_upgrade_struct(x, plan) for x in value]
    return _upgrade_struct(value, plan)


# doze's own settings that replay gives doze (the recording's doze_settings, and
# --transaction-version): doze lists a setting it was given among the broker's configs
# (DescribeConfigs), Kafka was never given them. Where Kafka's answer has no entry of
# such a name, doze's entry is not compared.
REPLAY_DOZE_SETTINGS = {"doze.transaction.version"}


def drop_replay_settings(api, kafka_resp, doze_resp, names):
    """doze's DescribeConfigs answer without the entries of `names` that Kafka's
    answer to the same resource does not list."""
    if api != "DescribeConfigs" or not isinstance(doze_resp, dict) or not isinstance(kafka_resp, dict):
        return doze_resp
    kafka_names = {(r.get("resource_type"), r.get("resource_name")): {c.get("name") for c in r.get("configs") or []}
                   for r in kafka_resp.get("results") or []}
    results = []
    for r in doze_resp.get("results") or []:
        known = kafka_names.get((r.get("resource_type"), r.get("resource_name")), set())
        if isinstance(r.get("configs"), list):
            r = dict(r, configs=[c for c in r["configs"] if c.get("name") not in names or c.get("name") in known])
        results.append(r)
    return dict(doze_resp, results=results)


def features_mode(recording, transaction_version):
    """How ApiVersions' features are compared: "compare" when the broker under test runs
    at the transaction.version Kafka ran at, else "skip"."""
    kafka = (recording.get("finalized_features") or KAFKA_DEFAULT_FEATURES).get("transaction.version", 0)
    return "compare" if transaction_version is not None and transaction_version == kafka else "skip"


def _pairs_at(a, b, parts):
    """Parallel walk of a and b along a path with "*": -> [(path, a_node, b_node)]."""
    out = [("", a, b)]
    for p in parts:
        nxt = []
        for path, x, y in out:
            if p == "*" and isinstance(x, list) and isinstance(y, list):
                nxt += [(f"{path}.{i}", xi, yi) for i, (xi, yi) in enumerate(zip(x, y))]
            elif isinstance(x, dict) and isinstance(y, dict) and p in x and p in y:
                nxt.append((f"{path}.{p}", x[p], y[p]))
        out = nxt
    return [(path.lstrip("."), x, y) for path, x, y in out]


def _drop_at(node, parts):
    if not parts or not isinstance(node, (dict, list)):
        return node
    head, rest = parts[0], parts[1:]
    if head == "*" and isinstance(node, list):
        return [_drop_at(x, rest) for x in node]
    if isinstance(node, dict) and head in node:
        node = dict(node)
        if rest:
            node[head] = _drop_at(node[head], rest)
        else:
            del node[head]
    return node


INTERNAL_TOPICS = {"__consumer_offsets", "__transaction_state"}
INTERNAL_CONTENT = {"offset", "timestamp", "leader_epoch", "high_watermark", "last_stable_offset",
                    "records", "aborted_transactions"}


def strip_internal_content(resp):
    """A ListOffsets or Fetch answer without what depends on the records of
    internal topics' partitions (offsets, timestamps, records)."""
    if not isinstance(resp, dict):
        return resp
    out = dict(resp)
    for key in ("topics", "responses"):
        if isinstance(out.get(key), list):
            out[key] = [dict(t, partitions=[{k: v for k, v in p.items() if k not in INTERNAL_CONTENT}
                                            for p in t.get("partitions") or []])
                        if (t.get("name") or t.get("topic")) in INTERNAL_TOPICS else t
                        for t in out[key]]
    return out


def compare_with_subsets(a, b, subset_paths, mapper, diffs, api):
    """As compare, except that at each of subset_paths (lists of {"name": ...} entries)
    doze may list fewer entries: each of doze's must equal Kafka's entry of that name."""
    for pattern in subset_paths:
        parts = pattern.split(".")
        for path, x, y in _pairs_at(a, b, parts):
            if x is None or y is None:
                if (x is None) != (y is None):
                    diffs.append(f"{path}: kafka={_show(x)} doze={_show(y)}")
                continue
            by_name = {e.get("name"): e for e in x}
            for i, e in enumerate(y):
                if e.get("name") not in by_name:
                    diffs.append(f"{path}.{i}: doze lists {e.get('name')!r}, Kafka does not")
                else:
                    compare(by_name[e["name"]], e, f"{path}.{i}", mapper, diffs, api)
        a, b = _drop_at(a, parts), _drop_at(b, parts)
    compare(a, b, "", mapper, diffs, api)


def subset_matches(expected, actual, mapper, api):
    """Does actual contain every field of expected (normalised)?"""
    diffs = []
    _subset(expected, actual, "", mapper, diffs, api)
    return diffs


def _subset(e, a, path, mapper, diffs, api):
    if isinstance(e, dict) and isinstance(a, dict):
        for k, v in e.items():
            sub = f"{path}.{k}" if path else k
            if k not in a:
                diffs.append(f"{sub}: expected {_show(v)}, missing")
            else:
                _subset(v, a[k], sub, mapper, diffs, api)
        return
    if isinstance(e, list) and isinstance(a, list) and len(e) == len(a):
        for i, (x, y) in enumerate(zip(e, a)):
            _subset(x, y, f"{path}.{i}", mapper, diffs, api)
        return
    compare(e, a, path, Mapper(), diffs, api)


# --- loading and replaying --------------------------------------------------------------

def load(name, directory=RECORDINGS):
    path = name if name.endswith(".json") else os.path.join(directory, name + ".json")
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def recording_names(directory=RECORDINGS):
    return sorted(f[:-5] for f in os.listdir(directory) if f.endswith(".json"))


def known_differences(recording):
    """The scenario's current known differences (scenarios.py), else the recording's."""
    try:
        import scenarios
        sc = scenarios.SCENARIOS.get(recording["scenario"])
        if sc is not None:
            return sc.get("known_differences", {})
    except ImportError:
        pass
    return recording.get("known_differences", {})


def broker_settings(name_or_recording, transaction_version=None):
    """Settings to start doze with for this recording: SETTINGS, the recording's
    broker_settings (Kafka names) and doze_settings (doze's own, given to doze only);
    transaction_version: doze.transaction.version at that level, whatever the
    recording says."""
    rec = load(name_or_recording) if isinstance(name_or_recording, str) else name_or_recording
    settings = dict(SETTINGS)
    settings.update(rec.get("broker_settings", {}))
    settings.update(rec.get("doze_settings", {}))
    if transaction_version is not None:
        settings["doze.transaction.version"] = transaction_version
    extra = extra_listener_names(settings)
    if extra:                      # as realkafka.py gives Kafka: PLAINTEXT and these, on free ports
        settings["listeners"] = ",".join(f"{n}://127.0.0.1:0" for n in ["PLAINTEXT"] + extra)
    return settings


def bootstraps(broker):
    """{listener name: host:port} of a running doze (what Runner takes)."""
    return {b.listener.name: f"127.0.0.1:{b.listener.port}" for b in broker.listeners.bound}


def _strip_values(template):
    """A recorded request with each ref's resolved "value" removed."""
    if isinstance(template, dict):
        if "$ref" in template:
            return {k: v for k, v in template.items() if k != "value"}
        return {k: _strip_values(v) for k, v in template.items()}
    if isinstance(template, list):
        return [_strip_values(v) for v in template]
    return template


def _as_step(rec):
    step = {"id": rec["step"], "api": rec["api"], "v": rec["version"], "conn": rec["conn"]}
    for k in ("body_version", "decode_version", "body_hex", "note") + recorder.STEP_OPTIONS:
        if k in rec:
            step[k] = rec[k]
    return step


class Result:
    def __init__(self, name):
        self.name = name
        self.differences = []               # failures: "step (api vN) path: ..."
        self.known_differences_seen = []    # "step: NAME" for known differences that showed
        self.stale_known = []               # known differences doze no longer has

    def __repr__(self):
        return f"<Result {self.name}: {len(self.differences)} differences>"


def replay(recording, bootstrap, transaction_version=None):
    """Send the recording's requests to bootstrap; -> list of difference strings."""
    return replay_full(recording, bootstrap, transaction_version).differences


def broker_transaction_version(bootstrap):
    """The transaction.version the broker finalizes now (ApiVersions v4), or None."""
    features = recorder.finalized_features(bootstrap)
    return None if features is None else features.get("transaction.version", 0)


def replay_full(recording, bootstrap, transaction_version=None):
    """transaction_version: the level the broker under test runs at (asked with
    ApiVersions first when not given); ApiVersions' transaction.version entries are
    compared only when it is the one Kafka ran at."""
    res = Result(recording.get("scenario", "?"))
    known = known_differences(recording)
    if transaction_version is None:
        transaction_version = broker_transaction_version(bootstrap)
    features = features_mode(recording, transaction_version)
    given = REPLAY_DOZE_SETTINGS | set(recording.get("doze_settings", {}))
    runner = recorder.Runner(bootstrap, recording.get("broker_settings", {}))
    mapper = Mapper()
    actual = []
    try:
        for rec in recording["steps"]:
            if "sleep_ms" in rec:
                time.sleep(rec["sleep_ms"] / 1000)
                continue
            got = runner.run_step(_as_step(rec), _strip_values(rec["request"]))
            actual.append((rec, got))
        runner.finish()
    except recorder.RecordingError as e:
        res.differences.append(f"replay stopped: {e}")
    except OSError as e:
        res.differences.append(f"replay stopped: {type(e).__name__}: {e}")
    finally:
        runner.close()
    for rec, got in actual:
        label = f"{rec['step']} ({rec['api']} v{rec['version']})"
        diffs = []
        kafka_resp = normalise_response(rec["api"], upgrade_tags(rec), features)
        doze_resp = drop_replay_settings(rec["api"], kafka_resp,
                                         normalise_response(rec["api"], got.get("response"), features), given)
        if "repeat_error_codes" in rec and rec["repeat_error_codes"] != got.get("repeat_error_codes"):
            res.differences.append(f"{label} repeat_error_codes: kafka={_show(rec['repeat_error_codes'])} "
                                   f"doze={_show(got.get('repeat_error_codes'))} ({rec['repeat']} requests)")
        kd = known.get(rec["step"]) or API_KNOWN_DIFFERENCES.get(rec["api"])
        if kd is not None and kd.get("internal_content"):
            # What the internal topics' logs hold: Kafka's coordinators write their
            # records there, doze keeps that state in meta.db. Everything else of the
            # answer (errors, partitions, structure, the other topics) is compared.
            kafka_resp, doze_resp = strip_internal_content(kafka_resp), strip_internal_content(doze_resp)
            compare(kafka_resp, doze_resp, "", mapper, diffs, rec["api"])
            if not diffs:
                res.known_differences_seen.append(f"{rec['step']}: {kd['name']}")
        elif kd is not None and "subset" in kd:
            compare_with_subsets(kafka_resp, doze_resp, kd["subset"], mapper, diffs, rec["api"])
            if not diffs and rec["api"] not in API_KNOWN_DIFFERENCES:
                res.known_differences_seen.append(f"{rec['step']}: {kd['name']}")
        elif kd is not None:
            expect = kd.get("doze")
            if expect is not None:
                d = subset_matches(expect, doze_resp or {}, mapper, rec["api"])
                if d and kd.get("or_as_kafka"):        # a race doze may win or lose, as Kafka can
                    as_kafka = []
                    compare(kafka_resp, doze_resp, "", Mapper(), as_kafka, rec["api"])
                    if not as_kafka:
                        res.known_differences_seen.append(f"{rec['step']}: {kd['name']} (answered as Kafka)")
                        continue
                if not d:
                    res.known_differences_seen.append(f"{rec['step']}: {kd['name']}")
                    compare_into = []
                    compare(kafka_resp, doze_resp, "", Mapper(), compare_into, rec["api"])
                    if not compare_into:
                        res.stale_known.append(f"{rec['step']}: {kd['name']} (doze now answers as Kafka)")
                    continue
                diffs.append(f"known difference {kd['name']}: doze's answer is not the expected one")
                diffs.extend(d)
            else:
                res.known_differences_seen.append(f"{rec['step']}: {kd['name']} (not compared)")
                continue
        else:
            compare(kafka_resp, doze_resp, "", mapper, diffs, rec["api"])
        if "final_response" in rec:
            compare(normalise_response(rec["api"], upgrade_tags(rec, "final_response"), features),
                    normalise_response(rec["api"], got.get("final_response"), features),
                    "final_response", mapper, diffs, rec["api"])
        for d in diffs:
            res.differences.append(f"{label} {d}")
    return res


def run_recording(name, bootstrap, transaction_version=None):
    """Replay recordings/NAME.json against bootstrap; -> list of differences (empty = pass)."""
    return replay(load(name), bootstrap, transaction_version)


def diff_recordings(rec_a, rec_b):
    """Two recordings of one scenario (e.g. two runs against Kafka), compared with the
    same normalisation; -> list of differences."""
    diffs, mapper = [], Mapper()
    steps_a = [s for s in rec_a["steps"] if "step" in s]
    steps_b = [s for s in rec_b["steps"] if "step" in s]
    if [s["step"] for s in steps_a] != [s["step"] for s in steps_b]:
        return ["the two recordings have different steps"]
    for sa, sb in zip(steps_a, steps_b):
        d = []
        compare(_strip_values(sa["request"]), _strip_values(sb["request"]), "request", mapper, d,
                sa["api"])
        if sa.get("body_hex") != sb.get("body_hex"):
            d.append(f"body_hex: {sa.get('body_hex')!r} vs {sb.get('body_hex')!r}")
        for key in ("response", "final_response"):
            compare(normalise_response(sa["api"], upgrade_tags(sa, key), "all"),
                    normalise_response(sa["api"], upgrade_tags(sb, key), "all"), key, mapper, d, sa["api"])
        if sa.get("repeat_error_codes") != sb.get("repeat_error_codes"):
            d.append(f"repeat_error_codes: {_show(sa.get('repeat_error_codes'))} vs "
                     f"{_show(sb.get('repeat_error_codes'))}")
        diffs.extend(f"{sa['step']} ({sa['api']} v{sa['version']}) {x}" for x in d)
    return diffs


def _doze_running(settings):
    """A doze as Kafka behaves: none of running()'s test defaults (SETTINGS gives the recordings')."""
    import doze_kafka
    return doze_kafka.running(settings, defaults={})


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("names", nargs="*")
    ap.add_argument("--bootstrap", help="replay against this broker (default: a fresh in-process "
                    "doze per recording, started with the recording's broker_settings)")
    ap.add_argument("--diff", nargs=2, metavar=("DIR_A", "DIR_B"),
                    help="compare two directories of recordings of the same scenarios")
    ap.add_argument("--transaction-version", type=int, metavar="N",
                    help="start doze at doze.transaction.version=N for every recording (the classic "
                         "ones too), whatever the recording's doze_settings say")
    ap.add_argument("--dir", default=RECORDINGS, help="the directory of the recordings to replay "
                    "(default: conformance/recordings)")
    ap.add_argument("-q", "--quiet", action="store_true")
    a = ap.parse_args(argv)
    if a.transaction_version is not None and a.bootstrap:
        ap.error("--transaction-version starts doze itself: not with --bootstrap")
    if a.diff:
        names = a.names or sorted(set(recording_names(a.diff[0])) & set(recording_names(a.diff[1])))
        bad = 0
        for n in names:
            d = diff_recordings(load(n, a.diff[0]), load(n, a.diff[1]))
            print(f"{n}: {'same' if not d else f'{len(d)} differences'}")
            for x in d:
                print("   ", x)
            bad += bool(d)
        return 1 if bad else 0
    names = a.names or recording_names(a.dir)
    import logging
    logging.basicConfig(level=logging.WARNING)
    failed = 0
    for n in names:
        rec = load(n, a.dir)
        t0 = time.time()
        if a.bootstrap:
            res = replay_full(rec, a.bootstrap)
        else:
            with _doze_running(broker_settings(rec, a.transaction_version)) as broker:
                res = replay_full(rec, bootstraps(broker))
        status = "PASS" if not res.differences else f"FAIL ({len(res.differences)} differences)"
        print(f"{n}: {status} in {time.time() - t0:.1f}s")
        for k in res.known_differences_seen:
            print(f"    known difference {k}")
        for k in res.stale_known:
            print(f"    STALE known difference {k}")
        if not a.quiet:
            for d in res.differences:
                print(f"    {d}")
        failed += bool(res.differences)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
