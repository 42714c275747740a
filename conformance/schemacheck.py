#!/usr/bin/env python3
"""doze's wire schemas against Apache Kafka 4.3.1's own message JSON.

    python3 conformance/schemacheck.py              # the report; exit 1 on a real difference
    python3 conformance/schemacheck.py --json       # the same differences, as JSON
    python3 conformance/schemacheck.py --jar PATH   # a kafka-clients-4.3.1.jar from elsewhere
    python3 conformance/schemacheck.py --doze PATH  # check another copy of doze_kafka.py
    python3 conformance/schemacheck.py --flip Metadata.response.brokers.host
                                                    # flip one field's nullability, then check
    python3 conformance/schemacheck.py --self-test  # flip one in memory: exit 0 if it is caught

Kafka declares every message in JSON (common/message/*.json inside
kafka-clients-4.3.1.jar). This tool reads them from the jar cache of
conformance/kafka/realkafka.py -- ${DOZE_KAFKA_CACHE:-~/.cache/doze-kafka} --
running `realkafka.py fetch` first if the jar is missing. Nothing of Kafka's
JSON is copied into this repository.

For every API in doze_kafka.HANDLERS, request and response, and every version
doze declares, the fields doze decodes or encodes are compared with Kafka's:

  versions  doze declares a version Kafka 4.3.1 does not have
  refused   ... but only advertises it, refusing requests in it (Api.min_served,
            as Kafka 4 does for Produce v0-2: KAFKA-18659) -- a note
  flexible  the version is flexible (KIP-482) in one and not the other
  position  a non-tagged field one side has and the other has not (fields pair
            by position; when the counts differ, aligned by name first)
  type      "[]" for an array of structs, "{}" for a struct, primitives as named
  nullable  Kafka's nullableVersions against doze's "?"
  tag       a tagged field (by tag number) only one side has
  unsent    ... a response field doze never sends, in UNSENT_RESPONSE_TAGS (a note)
  name      doze's name is not the snake_case of Kafka's (a note: some differ on purpose)
  default   doze's default against Kafka's "default", or the type's zero when
            Kafka declares none (a note: it is what doze writes for a field a
            handler leaves out, and what it decodes for a field a version lacks)

Consecutive versions with the same difference are shown as one range. The
exit status is 1 when any difference other than the notes (refused, name,
default) is found. --self-test flips Metadata's response brokers.host in memory
and exits 0 only if the check reports it and fails, so the check can fail.
"""

import argparse
import copy
import difflib
import importlib.util
import itertools
import json
import os
import re
import subprocess
import sys
import zipfile
from collections import Counter, namedtuple

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
KAFKA_VERSION = "4.3.1"
NOTES = ("name", "default", "refused", "unsent")  # kinds that are reported but do not fail

# Tagged response fields Kafka declares and doze leaves out of its schemas on
# purpose: it never sends them, and a reader takes a missing tag as its
# default, so doze's answers still decode by Kafka's schema ("unsent": a note).
# Anything else only one side has still fails the check.
UNSENT_RESPONSE_TAGS = {
    ("FetchResponse", "responses.partitions.diverging_epoch"): "KIP-595, for followers only",
    ("FetchResponse", "responses.partitions.current_leader"): "KIP-951: one broker, no new leader",
    ("FetchResponse", "responses.partitions.snapshot_id"): "KRaft snapshots, for controllers only",
    ("ApiVersionsResponse", "supported_features"): "no features: clients keep transaction v1",
    ("ApiVersionsResponse", "finalized_features_epoch"): "no features",
    ("ApiVersionsResponse", "finalized_features"): "no features: transaction.version stays 0",
    ("ApiVersionsResponse", "zk_migration_ready"): "no ZooKeeper",
    ("CreateTopicsResponse", "topics.topic_config_error_code"): "configs are described or the topic fails",
}
ANY = 32767                            # "N+": up to the largest version there is


# --- Kafka's side -------------------------------------------------------------

def default_jar():
    """kafka-clients-4.3.1.jar in realkafka.py's cache, fetched if it is missing."""
    cache = os.environ.get("DOZE_KAFKA_CACHE") or os.path.expanduser("~/.cache/doze-kafka")
    jar = os.path.join(cache, f"kafka-{KAFKA_VERSION}", "lib", f"kafka-clients-{KAFKA_VERSION}.jar")
    if not os.path.exists(jar):
        subprocess.run([sys.executable, os.path.join(HERE, "kafka", "realkafka.py"), "fetch"])
    if not os.path.exists(jar):
        sys.exit(f"no {jar}: `conformance/kafka/realkafka.py fetch` failed; or pass --jar PATH")
    return jar


def load_kafka(jar):
    """{(api key, "request" | "response"): the message's JSON}, read from the jar.
    Kafka's JSON has // comments on lines of their own; they are dropped first."""
    messages = {}
    with zipfile.ZipFile(jar) as z:
        for name in z.namelist():
            if re.fullmatch(r"common/message/\w+\.json", name):
                text = z.read(name).decode("utf-8")
                text = "\n".join(line for line in text.splitlines()
                                 if not line.lstrip().startswith("//"))
                msg = json.loads(text)
                if msg.get("type") in ("request", "response") and "apiKey" in msg:
                    messages[msg["apiKey"], msg["type"]] = msg
    return messages


def version_range(text):
    """Kafka's "3+", "0-7", "5" or "none" -> (first, last), or None."""
    if text is None or text == "none":
        return None
    if text.endswith("+"):
        return int(text[:-1]), ANY
    first, _, last = text.partition("-")
    return int(first), int(last or first)


def within(v, text):
    r = version_range(text)
    return r is not None and r[0] <= v <= r[1]


def snake(name):
    """Kafka's CamelCase -> doze's snake_case: "V3AndBelowTopics" -> "v3_and_below_topics"."""
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", name).lower()


def struct_types(msg):
    """Every struct a message names -- inline or in commonStructs -> its fields."""
    found = {s["name"]: s["fields"] for s in msg.get("commonStructs", ())}

    def walk(fields):
        for f in fields:
            if "fields" in f:
                found.setdefault(f["type"].lstrip("[]"), f["fields"])
                walk(f["fields"])
    walk(msg.get("fields", ()))
    return found


# --- Both sides as the same tree: the fields present in one version ------------
# A Node is one field in one version; children() gives its struct's Nodes.

Node = namedtuple("Node", "name label type nullable tag default declared children")
SKIP = object()                        # a default not worth comparing (a struct's)


def kafka_default(f, type_):
    text = f.get("default")
    if text is None:                   # the zero of the type, as Kafka's generated code has
        zero = {"bool": False, "string": "", "bytes": b"", "uuid": bytes(16),
                "records": None, "float64": 0.0, "[]": [], "{}": SKIP}
        return [] if type_.startswith("[]") else zero.get(type_, 0)
    if text == "null":
        return None
    if type_ == "bool":
        return text in (True, "true")
    if type_ == "string":
        return text
    if type_ == "float64":
        return float(str(text))
    if type_ in ("int8", "int16", "int32", "int64", "uint16", "uint32"):
        return int(str(text), 0)
    return text


def kafka_nodes(fields, v, structs):
    nodes = []
    for f in fields:
        if not within(v, f["versions"]):
            continue
        t = f["type"]
        element = t[2:] if t.startswith("[]") else t
        is_struct = element[:1].isupper()
        type_ = ("[]" if t.startswith("[]") else "{}") if is_struct else t
        children = f.get("fields") or structs.get(element, [])
        nodes.append(Node(snake(f["name"]), f["name"], type_, within(v, f.get("nullableVersions")),
                          f.get("tag") if within(v, f.get("taggedVersions")) else None,
                          kafka_default(f, type_), "default" in f,
                          lambda c=children: kafka_nodes(c, v, structs)))
    return nodes


def doze_nodes(fields, v):
    return [Node(f.name, f.name, f.type, f.nullable_in(v), f.tag,
                 SKIP if f.type == "{}" else f.default, True,
                 lambda f=f: doze_nodes(f.fields, v))
            for f in fields if f.in_version(v)]


# --- The comparison -------------------------------------------------------------

def align(dz, kf):
    """Pair doze's non-tagged fields with Kafka's by position; when the counts
    differ, by name first, so one missing field is one difference, not many."""
    if len(dz) == len(kf):
        return list(zip(dz, kf))
    matcher = difflib.SequenceMatcher(None, [n.name for n in dz], [n.name for n in kf],
                                      autojunk=False)
    return [pair for _, i1, i2, j1, j2 in matcher.get_opcodes()
            for pair in itertools.zip_longest(dz[i1:i2], kf[j1:j2])]


def show(value):
    if isinstance(value, (bytes, bytearray)):
        return "zero uuid" if len(value) == 16 and not any(value) else repr(bytes(value))
    return json.dumps(value)


def compare_field(path, d, k, report):
    p = path + d.name
    if d.name != k.name:
        report("name", p, f"Kafka calls it {k.label}")
    if d.type != k.type:
        report("type", p, f"doze {d.type}, Kafka {k.type}")
        return
    if d.nullable != k.nullable:
        report("nullable", p, "doze nullable, Kafka not" if d.nullable else "Kafka nullable, doze not")
    if SKIP not in (d.default, k.default) and d.default != k.default:
        declared = "" if k.declared else " (Kafka declares none: the type's zero)"
        report("default", p, f"doze {show(d.default)}, Kafka {show(k.default)}{declared}")
    if d.type in ("[]", "{}"):
        compare_struct(p + ".", d.children(), k.children(), report)


def compare_struct(path, dz, kf, report):
    for d, k in align([n for n in dz if n.tag is None], [n for n in kf if n.tag is None]):
        if d is None:
            report("position", path + k.name, f"Kafka has {k.label} ({k.type}) here, doze has nothing")
        elif k is None:
            report("position", path + d.name, f"doze has it ({d.type}), Kafka has nothing here")
        else:
            compare_field(path, d, k, report)
    dz_tags = {n.tag: n for n in dz if n.tag is not None}
    kf_tags = {n.tag: n for n in kf if n.tag is not None}
    for tag in sorted(set(dz_tags) | set(kf_tags)):
        d, k = dz_tags.get(tag), kf_tags.get(tag)
        if d is None or k is None:
            who, n = ("Kafka", k) if d is None else ("doze", d)
            report("tag", path + n.name, f"tagged field {tag} ({n.label}, {n.type}) only in {who}")
        else:
            compare_field(path, d, k, report)


def check(specs, kafka):
    """Every difference, one per version and field: dicts of api, key, direction,
    kind, path, version and message."""
    found = []
    for key, spec in sorted(specs.items()):
        for direction in ("request", "response"):
            title = spec.name + direction.capitalize()
            for v in range(spec.min_version, spec.max_version + 1):
                def report(kind, path, message, v=v, title=title, direction=direction):
                    if kind == "tag" and message.endswith("only in Kafka") and \
                            (title, path) in UNSENT_RESPONSE_TAGS:
                        kind = "unsent"
                        message += f": doze never sends it ({UNSENT_RESPONSE_TAGS[(title, path)]})"
                    found.append(dict(api=title, key=key, direction=direction, kind=kind,
                                      path=path, version=v, message=message))
                check_version(spec, direction, title, kafka.get((key, direction)), v, report)
    return found


def check_version(spec, direction, title, msg, v, report):
    if msg is None:
        return report("versions", "", f"Kafka {KAFKA_VERSION} has no {title}")
    if msg["name"] != title:
        report("name", "", f"Kafka calls it {msg['name']}")
    if not within(v, msg["validVersions"]):
        if v < spec.min_served:
            return report("refused", "", f"advertised and refused (doze serves "
                          f"v{spec.min_served}+); Kafka's validVersions are {msg['validVersions']}")
        return report("versions", "", f"Kafka's validVersions are {msg['validVersions']}")
    if spec.flexible(v) != within(v, msg.get("flexibleVersions")):
        report("flexible", "", "doze flexible, Kafka not" if spec.flexible(v)
               else "Kafka flexible, doze not")
    compare_struct("", doze_nodes(getattr(spec, direction), v),
                   kafka_nodes(msg["fields"], v, struct_types(msg)), report)


# --- The report -----------------------------------------------------------------

def collapse(found):
    """One entry per difference, its versions as consecutive ranges, in the order
    first found (API key, request before response, then by version and field)."""
    groups = {}
    for d in found:
        groups.setdefault((d["key"], d["direction"], d["kind"], d["path"], d["message"]),
                          (d, []))[1].append(d["version"])
    entries = []
    for d, versions in groups.values():
        for _, run in itertools.groupby(enumerate(sorted(versions)), lambda iv: iv[1] - iv[0]):
            run = [v for _, v in run]
            entries.append(dict(api=d["api"], key=d["key"], direction=d["direction"],
                                kind=d["kind"], path=d["path"], versions=[run[0], run[-1]],
                                message=d["message"], fails=d["kind"] not in NOTES))
    order = {"request": 0, "response": 1}
    return sorted(entries, key=lambda e: (e["key"], order[e["direction"]]))


def counts(entries):
    return dict(sorted(Counter(e["kind"] for e in entries).items()))


def line(e):
    lo, hi = e["versions"]
    where = f"{e['api']} v{lo}" + (f"-{hi}" if hi != lo else "") + (" " + e["path"] if e["path"] else "")
    return f"  {e['kind']:<9} {where}: {e['message']}"


def text_report(entries, jar, apis):
    failing = [e for e in entries if e["fails"]]
    out = [f"doze-kafka's schemas against Apache Kafka {KAFKA_VERSION}'s message JSON",
           f"  {jar}", f"  {apis} APIs; " + ", ".join(f"{n} {k}" for k, n in counts(entries).items()),
           f"  {'FAIL' if failing else 'OK'}: {len(failing)} differences that fail, "
           f"{len(entries) - len(failing)} notes", ""]
    out.append("== Differences and notes, by API and direction")
    heading = None
    for e in entries:
        if e["kind"] == "default":
            continue
        if e["api"] != heading:
            heading = e["api"]
            out.append(f"{heading} (key {e['key']})")
        out.append(line(e))
    out += ["", "== Defaults (informational: what doze writes for a field a handler leaves "
            "out, and decodes for a field a version lacks)"]
    out += [line(e) for e in entries if e["kind"] == "default"] or ["  (none)"]
    return "\n".join(out) + "\n"


# --- doze's side, and altering it for the self-test -------------------------------

def load_doze(path):
    spec = importlib.util.spec_from_file_location("doze_kafka", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("doze_kafka", module)
    spec.loader.exec_module(module)
    return {int(key): api for key, (api, _) in module.HANDLERS.items()}


def flip(specs, target):
    """A copy of specs with one field's nullability flipped in every version:
    target is "Api.direction.path.to.field", e.g. "Metadata.response.brokers.host"."""
    api_name, direction, *path = target.split(".")
    key = next((k for k, s in specs.items() if s.name == api_name), None)
    if key is None or direction not in ("request", "response") or not path:
        sys.exit(f"--flip: no such field {target!r}")
    api = copy.deepcopy(specs[key])
    fields = getattr(api, direction)
    for name in path:
        field = next((f for f in fields if f.name == name), None)
        if field is None:
            sys.exit(f"--flip: no field {name!r} in {target!r}")
        fields = field.fields
    field.nullable = None if field.nullable else (0, ANY)
    return {**specs, key: api}


SELF_TEST_FIELD = "Metadata.response.brokers.host"


def self_test(specs, kafka):
    """Flip one field's nullability in memory; the check must report it, and fail."""
    api, direction, path = SELF_TEST_FIELD.split(".", 2)

    def at_field(entries):
        return {line(e) for e in entries if e["kind"] == "nullable" and e["path"] == path
                and e["api"] == api + direction.capitalize()}
    after = collapse(check(flip(specs, SELF_TEST_FIELD), kafka))
    caught = at_field(after) - at_field(collapse(check(specs, kafka)))
    print(f"self-test: flipped {SELF_TEST_FIELD}; reported as:", *sorted(caught), sep="\n")
    if caught and any(e["fails"] for e in after):
        print("self-test passed: the altered schema fails the check")
        return 0
    print("self-test FAILED: the flipped field went unreported")
    return 1


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jar", help=f"kafka-clients-{KAFKA_VERSION}.jar (default: the cache)")
    ap.add_argument("--doze", default=os.path.join(ROOT, "doze_kafka.py"), help="the file to check")
    ap.add_argument("--json", action="store_true", help="machine-readable output")
    ap.add_argument("--flip", metavar="API.DIRECTION.FIELD", help="flip its nullability first")
    ap.add_argument("--self-test", action="store_true", help="check that a flipped field is caught")
    args = ap.parse_args(argv)
    jar = args.jar or default_jar()
    kafka, specs = load_kafka(jar), load_doze(args.doze)
    if args.self_test:
        return self_test(specs, kafka)
    if args.flip:
        specs = flip(specs, args.flip)
    entries = collapse(check(specs, kafka))
    failed = any(e["fails"] for e in entries)
    if args.json:
        json.dump(dict(kafka=KAFKA_VERSION, jar=jar, failed=failed, counts=counts(entries),
                       differences=entries), sys.stdout, indent=1)
        print()
    else:
        sys.stdout.write(text_report(entries, jar, len(specs)))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
