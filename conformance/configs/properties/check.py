#!/usr/bin/env python3
"""doze's .properties reader against Java's, on a corpus of tricky files.

Kafka 4.3.1 reads server.properties with Utils.loadProps(path) (called from
kafka.Kafka.getPropsFromArgs), which is Properties.load(InputStream): the
file's bytes, one ISO-8859-1 char each. DumpProperties.java (next to this
file) is compiled against the Kafka jars conformance/kafka/realkafka.py
fetches (the same cache; fetched here if missing) and makes that very call on
every corpus/*.properties; the reader gets the same bytes; the two are
compared key by key (a file Java refuses -- a malformed \\uXXXX throws
IllegalArgumentException -- must raise ValueError in the reader).

    python3 conformance/configs/properties/check.py               # doze_kafka.read_java_properties
    python3 conformance/configs/properties/check.py --reader FILE.py   # read_java_properties from FILE.py
    python3 conformance/configs/properties/check.py --record      # ... and write expected.json
    python3 conformance/configs/properties/check.py --offline     # against expected.json: no Java
    python3 conformance/configs/properties/check.py --self-test   # naive readers must be caught

expected.json holds Java's results for every corpus file (with each file's
sha256) and is written only by --record, from Java's output: a test suite can
check a reader against the corpus and it with no Java. Exit status 1 on any
mismatch. Needs Java 17 (javac) and Maven, except with --offline. Standard
library only, Python 3.9+.
"""

import argparse
import hashlib
import importlib.util
import json
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))   # conformance/
from lib import DOZE  # noqa: E402
import realkafka  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))

CORPUS = os.path.join(HERE, "corpus")
EXPECTED = os.path.join(HERE, "expected.json")
JAVA_SOURCE = os.path.join(HERE, "DumpProperties.java")
READER_NAME = "read_java_properties"


def corpus_files():
    return sorted(os.path.join(CORPUS, n) for n in os.listdir(CORPUS) if n.endswith(".properties"))


def java_results(paths):
    """{file name: {"props": {...}} or {"error": {"class", "message"}}}, from
    DumpProperties.java run against the Kafka 4.3.1 jars."""
    r = realkafka.run_java_source(JAVA_SOURCE, "DumpProperties", list(paths), heap="256m")
    if r.returncode != 0:
        sys.exit("DumpProperties failed (exit %d):\n%s" % (r.returncode, r.stderr.decode(errors="replace")))
    return json.loads(r.stdout.decode("ascii"))


def java_version():
    r = subprocess.run([realkafka.java_bin(), "-version"], capture_output=True, text=True)
    return (r.stderr or r.stdout).splitlines()[0]


def load_reader(path):
    """read_java_properties from FILE (--reader), else from doze_kafka."""
    if path:
        spec = importlib.util.spec_from_file_location("properties_reader", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        where = path
    else:
        import doze_kafka as module
        where = "doze_kafka"
    reader = getattr(module, READER_NAME, None)
    if reader is None:
        sys.exit("%s has no %s yet: give one with --reader FILE.py" % (where, READER_NAME))
    return reader, "%s.%s" % (where, READER_NAME)


def run_reader(reader, data):
    try:
        return {"props": reader(data)}
    except ValueError as e:
        return {"error": {"class": "ValueError", "message": str(e)}}
    except Exception as e:                          # a crash is a mismatch, not a refusal
        return {"crash": {"class": type(e).__name__, "message": str(e)}}


def differences(java, doze):
    """The ways doze's result differs from Java's, as lines (empty: equal)."""
    if "error" in java:
        if "error" in doze:
            return []
        return ["Java refuses the file (%s: %s); doze %s" % (
            java["error"]["class"], java["error"]["message"],
            "crashes: %r" % (doze["crash"],) if "crash" in doze else "reads it: %r" % (doze["props"],))]
    if "props" not in doze:
        what = doze.get("error") or doze.get("crash")
        return ["Java reads it, doze raises %s: %s" % (what["class"], what["message"])]
    j, d, out = java["props"], doze["props"], []
    for key in list(j) + [k for k in d if k not in j]:
        if key not in d:
            out.append("key %r: Java %r, doze has no such key" % (key, j[key]))
        elif key not in j:
            out.append("key %r: doze %r, Java has no such key" % (key, d[key]))
        elif j[key] != d[key]:
            out.append("key %r: Java %r, doze %r" % (key, j[key], d[key]))
    return out


def compare(reader, expected, paths, quiet=False):
    """Print per file OK or the differences and a summary; -> mismatch count."""
    mismatches = bad_files = 0
    for path in paths:
        name = os.path.basename(path)
        if name not in expected:
            print("MISSING %s: no Java result (run --record)" % name)
            mismatches, bad_files = mismatches + 1, bad_files + 1
            continue
        with open(path, "rb") as f:
            diffs = differences(expected[name], run_reader(reader, f.read()))
        if diffs:
            mismatches, bad_files = mismatches + len(diffs), bad_files + 1
        if quiet:
            continue
        if diffs:
            print("FAIL %s" % name)
            for line in diffs:
                print("     " + line)
        elif "error" in expected[name]:
            print("OK   %s (both refuse it: %s)" % (name, expected[name]["error"]["message"]))
        else:
            print("OK   %s (%d keys)" % (name, len(expected[name]["props"])))
    if not quiet:
        print("%d files: %d mismatches in %d files between Java and doze" % (len(paths), mismatches, bad_files)
              if mismatches else "%d files, every key equal between Java and doze" % len(paths))
    return mismatches


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def read_expected(paths):
    with open(EXPECTED, encoding="ascii") as f:
        recorded = json.load(f)["files"]
    stale = [os.path.basename(p) for p in paths
             if os.path.basename(p) in recorded and recorded[os.path.basename(p)]["sha256"] != sha256(p)]
    if stale:
        sys.exit("expected.json is stale for %s: run --record" % ", ".join(stale))
    return recorded


def record(paths, results):
    files = {}
    for path in paths:
        name = os.path.basename(path)
        files[name] = dict(sha256=sha256(path), **results[name])
    doc = {"generated_by": "conformance/configs/properties/check.py --record: DumpProperties.java, "
                           "Utils.loadProps(path) from the Kafka %s jars" % realkafka.KAFKA_VERSION,
           "java": java_version(),
           "kafka_version": realkafka.KAFKA_VERSION,
           "files": files}
    with open(EXPECTED, "w", encoding="ascii") as f:
        json.dump(doc, f, indent=1, ensure_ascii=True)
        f.write("\n")
    print("wrote %s (%d files)" % (EXPECTED, len(files)))


# --------------------------------------------------------------------------- --self-test

def naive_line_regex(data):
    """doze_kafka's Config.from_properties before issue 32: one regex a line."""
    props = {}
    for line in data.decode("utf-8", "replace").splitlines():
        line = line.strip()
        if not line or line[0] in "#!":
            continue
        m = re.match(r"([^=:\s]+)\s*[=:\s]\s*(.*)", line)
        if m:
            props[m.group(1)] = m.group(2).strip()
    return props


def mutants(reader):
    """Plausible near-misses of the real reader: each must be caught too."""
    def as_utf8(data):
        return reader(data.decode("utf-8", "replace"))

    def values_stripped(data):
        return {k: v.rstrip() for k, v in reader(data).items()}

    def never_refuses(data):
        try:
            return reader(data)
        except ValueError:
            return {}
    return [("decodes UTF-8 (not ISO-8859-1)", as_utf8), ("strips trailing whitespace", values_stripped),
            ("swallows a malformed \\uXXXX", never_refuses)]


def self_test(reader, expected, paths):
    caught = True
    for label, naive in [("doze's old per-line regex", naive_line_regex)] + mutants(reader):
        n = compare(naive, expected, paths, quiet=True)
        print("self-test: %-40s -> %d mismatches: %s" % (label, n, "caught" if n else "NOT CAUGHT"))
        caught = caught and n > 0
    print("self-test: %s" % ("every naive reader is caught" if caught else "FAILED: a naive reader passes"))
    return caught


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--reader", metavar="FILE.py", help="take %s from this file, not %s" % (READER_NAME, DOZE))
    p.add_argument("--record", action="store_true", help="write expected.json from Java's results")
    p.add_argument("--offline", action="store_true", help="compare with expected.json instead of running Java")
    p.add_argument("--self-test", action="store_true", help="show that naive readers are reported")
    a = p.parse_args(argv)
    if a.offline and a.record:
        p.error("--record needs Java: not with --offline")
    paths = corpus_files()
    reader, where = load_reader(a.reader)
    if a.offline:
        expected = read_expected(paths)
    else:
        expected = java_results(paths)
        if a.record:
            record(paths, expected)
    print("reader: %s; Java: %s" % (where, "expected.json" if a.offline else
                                    "Utils.loadProps (Kafka %s jars)" % realkafka.KAFKA_VERSION))
    if a.self_test:
        return 0 if self_test(reader, expected, paths) else 1
    return 1 if compare(reader, expected, paths) else 0


if __name__ == "__main__":
    sys.exit(main())
