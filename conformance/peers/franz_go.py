#!/usr/bin/env python3
"""franz-go's pkg/kgo integration tests against doze (or any broker).

    python3 conformance/peers/franz_go.py                      # whole pkg/kgo, fresh doze
    python3 conformance/peers/franz_go.py --run 'TestTxnEtl|TestGroupETL'
    python3 conformance/peers/franz_go.py --bootstrap 127.0.0.1:9330   # a broker you started
    python3 conformance/peers/franz_go.py --no-848             # as a broker without KIP-848
    python3 conformance/peers/franz_go.py --transaction-version 2   # doze with KIP-890's TV2

franz-go comes from the Go module proxy (`go mod download
github.com/twmb/franz-go@v1.22.3`) and is copied, writable, to
~/.cache/doze-kafka/peers/franz-go-v1.22.3; nothing of it enters the repo.
The test binary is built first (`go test -c`), then run through
`go tool test2json` with the settings franz-go's own CI gives a one-node
Kafka: KGO_SEEDS=<broker>, KGO_TEST_RF=1. The doze it starts has a second
listener, SASL_PLAINTEXT with SCRAM-SHA-512 and a user made by
`--add-scram`, named in KGO_TEST_SCRAM_SEEDS and KGO_TEST_SCRAM, so that
franz-go's SCRAM tests (a login, then bad credentials) run too. Its KIP-848
tests run as on Kafka 4.3.1 (the broker's ApiVersions has
ConsumerGroupHeartbeat v1); --no-848 hides KIP-848 from them (they skip
themselves, as on a broker without it). --transaction-version 2 starts doze
with doze.transaction.version=2: its ApiVersions then finalizes the
transaction.version feature at 2 with Produce v12, EndTxn v5 and
TxnOffsetCommit v5, and franz-go's transactional clients (TestTxnEtl) switch
to KIP-890 part 2 on their own (client.go's supportsKIP890p2). The run asks
the broker's ApiVersions once and prints the level it finalizes, and the
versions, beside the results. Results per top-level test (pass,
fail, skip, timeout; seconds; whether it talks to the broker or only to
in-process code) go to OUT/franz-go.{md,json}, the full output to
OUT/franz-go.out.
"""
import argparse
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))   # conformance/
from lib import WireProxy, free_port, run_bounded  # noqa: E402
from common import Broker, cache_root, out_dir, write_results  # noqa: E402
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))   # doze_kafka.py
import doze_kafka as dk  # noqa: E402

MODULE = "github.com/twmb/franz-go"
DEFAULT_VERSION = "v1.22.3"
# franz-go's tests of KIP-848 consumer groups (ServerSideBalancer) run when the
# broker's ApiVersions, as the tests' admin client first asks it (helpers_test.go's
# adm(), through a seed), has ConsumerGroupHeartbeat v1; doze's has. --no-848
# puts a proxy before the seed (KGO_SEEDS) that takes ConsumerGroupHeartbeat and
# ConsumerGroupDescribe out of ApiVersions answers: the tests skip themselves as
# on a broker without KIP-848 (doze before Issue 35). Everything after the
# bootstrap goes to the broker's advertised listener, not through the proxy
# (which reaches 127.0.0.1:<the broker's port>, so --bootstrap must be local).
# (go test -skip cannot do it: TestGroupETL and TestTxnEtl free a semaphore slot
# inside each subtest's function, which a -skip'd subtest never runs.)
HIDDEN_848 = (68, 69)                      # ConsumerGroupHeartbeat, ConsumerGroupDescribe


def without_apis(frame, version, hidden=HIDDEN_848):
    """An ApiVersions answer frame (without its size) without the entries of the
    hidden API keys, read and written by doze's own codec; None for an error answer."""
    if struct.unpack_from(">h", frame, 4)[0]:
        return None                           # an error answer (UNSUPPORTED_VERSION comes as v0): left alone
    spec = dk.HANDLERS[dk.ApiKey.API_VERSIONS][0]
    correlation_id, msg = dk.decode_response(spec, version, frame)
    msg.api_keys = [k for k in msg.api_keys if k.api_key not in hidden]
    return b"".join(bytes(chunk) for chunk in dk.encode_response(spec, version, correlation_id, msg))[4:]


def seed_without_848(bootstrap):
    """A WireProxy before bootstrap (127.0.0.1:port) whose ApiVersions answers lack KIP-848."""
    def on_request(frame):
        key, version = struct.unpack_from(">hh", frame, 0)
        return version if key == 18 else None

    return WireProxy(int(bootstrap.rsplit(":", 1)[1]), on_request=on_request,
                     on_answer=lambda version, frame: without_apis(frame, version))


# KIP-890 part 2 (transaction version 2): franz-go opts in when the finalized
# transaction.version is >= 2 and these are advertised (client.go supportsKIP890p2,
# txn.go: Produce v12 adds the partition, TxnOffsetCommit v5 the group, EndTxn v5
# bumps the epoch). Its tests have no skip of their own for it: TestTxnEtl's
# producer and its GroupTransactSession consumers run TV1 or TV2 as the broker offers.
TV2_VERSIONS = ((0, "Produce", 12), (26, "EndTxn", 5), (28, "TxnOffsetCommit", 5))


def transaction_features(bootstrap):
    """The broker's ApiVersions v3 (as franz-go asks it) -> {"transaction.version": finalized
    level or None, "features_epoch", and the advertised max of Produce, EndTxn, TxnOffsetCommit},
    and "tv2": whether franz-go would switch to transaction version 2 on it."""
    with dk.Client(bootstrap, client_id="franz-go-peer") as c:
        msg = c.call(dk.ApiKey.API_VERSIONS, 3, client_software_name="doze-peers", client_software_version="1")
    level = next((f.max_version_level for f in msg.finalized_features or () if f.name == "transaction.version"), None)
    maxes = {k.api_key: k.max_version for k in msg.api_keys}
    got = {"transaction.version": level, "features_epoch": msg.finalized_features_epoch}
    got.update({name: maxes.get(key) for key, name, _ in TV2_VERSIONS})
    got["tv2"] = (level or 0) >= 2 and all((maxes.get(key) or -1) >= v for key, _, v in TV2_VERSIONS)
    return got


def features_text(f):
    return (f"transaction.version {f['transaction.version']} (features epoch {f['features_epoch']}); "
            + ", ".join(f"{name} v{f[name]}" for _, name, _ in TV2_VERSIONS)
            + (": franz-go uses transaction version 2 (KIP-890 part 2)" if f["tv2"]
               else ": franz-go uses the classic transaction protocol"))


# What in a test's body shows it talks to the broker in KGO_SEEDS.
BROKER_MARKERS = re.compile(r"\b(adm\(\)|newTestClient|tmpTopic|getSeedBrokers|testClientOpts|"
                            r"newTestConsumer|testConsumer\{)")


def ensure_source(version):
    dest = os.path.join(cache_root(), f"franz-go-{version}")
    if os.path.isfile(os.path.join(dest, "go.mod")):
        return dest
    os.makedirs(cache_root(), exist_ok=True)
    env = dict(os.environ, GOFLAGS="-mod=mod")
    out = subprocess.run(["go", "mod", "download", "-json", f"{MODULE}@{version}"], env=env,
                         check=True, capture_output=True, text=True, cwd=cache_root()).stdout
    src = json.loads(out)["Dir"]
    shutil.copytree(src, dest + ".tmp")
    for root, dirs, files in os.walk(dest + ".tmp"):
        for n in dirs + files:
            os.chmod(os.path.join(root, n), 0o755 if n in dirs else 0o644)
    os.rename(dest + ".tmp", dest)
    return dest


def broker_tests(pkg_dir):
    """Names of top-level tests that reach the broker (directly or via a helper)."""
    bodies = {}
    for name in os.listdir(pkg_dir):
        if not name.endswith("_test.go"):
            continue
        text = open(os.path.join(pkg_dir, name)).read()
        for chunk in re.split(r"\nfunc ", text)[1:]:
            m = re.match(r"(?:\([^)]*\)\s*)?(\w+)", chunk)
            if m:
                bodies[m.group(1)] = bodies.get(m.group(1), "") + chunk
    reach = {n for n, b in bodies.items() if BROKER_MARKERS.search(b)}
    changed = True
    while changed:
        changed = False
        for n, b in bodies.items():
            if n not in reach and any(re.search(r"\b" + re.escape(r) + r"\(", b) for r in reach):
                reach.add(n)
                changed = True
    return {n for n in reach if n.startswith("Test")}


def parse_events(path):
    tests = {}            # name -> {"result", "seconds", "sub": {...}}
    order = []
    with open(path, errors="replace") as f:
        for line in f:
            try:
                ev = json.loads(line)
            except ValueError:
                continue
            name, action = ev.get("Test"), ev.get("Action")
            if not name:
                continue
            top, _, sub = name.partition("/")
            if top not in tests:
                tests[top] = {"result": "timeout", "seconds": 0.0, "sub": {}}
                order.append(top)
            if action in ("pass", "fail", "skip"):
                if sub:
                    tests[top]["sub"][sub] = {"result": action, "seconds": ev.get("Elapsed", 0.0)}
                else:
                    tests[top]["result"] = action
                    tests[top]["seconds"] = float(ev.get("Elapsed", 0.0))
    return tests, order


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--version", default=DEFAULT_VERSION, help="franz-go module version")
    ap.add_argument("--run", default="", help="go test -run regexp (default: every test)")
    ap.add_argument("--bootstrap", help="use this broker instead of starting doze")
    ap.add_argument("--records", type=int, help="KGO_TEST_RECORDS (franz-go's default: 500000)")
    ap.add_argument("--timeout", type=int, default=1800, help="whole run, seconds (go test -timeout)")
    ap.add_argument("--parallel", type=int, default=0, help="go test -parallel (default GOMAXPROCS)")
    ap.add_argument("--no-848", action="store_true",
                    help="the tests see no KIP-848 in the seed's ApiVersions (a proxy takes "
                    "ConsumerGroupHeartbeat and ConsumerGroupDescribe out): its tests skip themselves")
    ap.add_argument("--transaction-version", type=int, choices=(0, 1, 2),
                    help="start doze with doze.transaction.version=N (default: doze's, 1); "
                    "2 offers KIP-890 part 2, which franz-go then uses")
    ap.add_argument("--doze-log-level", help="e.g. DEBUG: doze logs every request and answer")
    ap.add_argument("--override", action="append", default=[], help="doze setting NAME=VALUE")
    ap.add_argument("--out", help="results directory (default: a new temp dir)")
    a = ap.parse_args(argv)
    if a.bootstrap and a.transaction_version is not None:
        ap.error("--transaction-version starts doze at that level; an outside broker's level is its own "
                 "(kafka-features upgrade --feature transaction.version=N)")

    out = out_dir(a.out, "franz-go-")
    src = ensure_source(a.version)
    pkg = os.path.join(src, "pkg", "kgo")
    env = dict(os.environ, GOFLAGS="-mod=mod")
    binary = os.path.join(src, "kgo.test")
    t0 = time.monotonic()
    rc, _ = run_bounded(["go", "test", "-c", "-o", binary, "./pkg/kgo/"], 1200, cwd=src, env=env)
    if rc != 0:
        sys.exit(f"building the kgo test binary failed (rc {rc})")
    print(f"kgo.test built in {time.monotonic() - t0:.0f} s; results in {out}", flush=True)
    reach = broker_tests(pkg)

    overrides = dict(kv.split("=", 1) for kv in a.override)
    if a.transaction_version is not None:
        overrides["doze.transaction.version"] = str(a.transaction_version)
    scram, extra = {}, []
    if not a.bootstrap:                      # a SCRAM listener beside the plain one
        port = free_port()
        overrides.setdefault("listeners", f"PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:{port}")
        overrides.setdefault("sasl.enabled.mechanisms", "SCRAM-SHA-512")
        extra = ["--add-scram", "SCRAM-SHA-512=[name=franz,password=franz-secret]"]
        scram = {"KGO_TEST_SCRAM_SEEDS": f"127.0.0.1:{port}", "KGO_TEST_SCRAM": "franz:franz-secret:512"}
    with Broker(a.bootstrap, overrides, a.doze_log_level, keep_dir=os.path.join(out, "doze"),
                extra_args=extra) as b:
        features = transaction_features(b.bootstrap)
        print("broker's ApiVersions: " + features_text(features), flush=True)
        proxy = seed_without_848(b.bootstrap) if a.no_848 else None
        env = dict(os.environ, KGO_SEEDS=proxy.bootstrap if proxy else b.bootstrap, KGO_TEST_RF="1", **scram)
        if a.records:
            env["KGO_TEST_RECORDS"] = str(a.records)
        cmd = ["go", "tool", "test2json", "-t", binary, "-test.v", "-test.count=1",
               f"-test.timeout={a.timeout}s"]
        if a.run:
            cmd.append(f"-test.run={a.run}")
        if a.parallel:
            cmd.append(f"-test.parallel={a.parallel}")
        events = os.path.join(out, "franz-go.events.json")
        try:
            with open(events, "w") as ef:
                rc, secs = run_bounded(cmd, a.timeout + 120, cwd=pkg, env=env, stdout=ef,
                                       stderr=subprocess.STDOUT)
        finally:
            if proxy:
                proxy.close()
        alive = b.alive()
        broker = b.bootstrap

    tests, order = parse_events(events)
    with open(os.path.join(out, "franz-go.out"), "w") as f:       # the plain text, for reading
        for line in open(events, errors="replace"):
            try:
                ev = json.loads(line)
                if ev.get("Action") == "output":
                    f.write(ev.get("Output", ""))
            except ValueError:
                f.write(line)
    rows = []
    for name in order:
        t = tests[name]
        note = ""
        failed_subs = [s for s, v in t["sub"].items() if v["result"] == "fail"]
        if failed_subs:
            note = "failed: " + ", ".join(failed_subs[:6]) + (" ..." if len(failed_subs) > 6 else "")
        rows.append({"test": name, "result": t["result"], "seconds": round(t["seconds"], 2),
                     "kind": "broker" if name in reach else "in-process", "note": note,
                     "subtests": t["sub"]})
    summary = write_results(out, "franz-go", rows, {
        "suite": f"{MODULE}@{a.version} pkg/kgo", "broker": broker, "run": a.run,
        "records": a.records, "no_848": a.no_848, "transaction_features": features, "rc": rc,
        "seconds": round(secs, 1), "broker_alive_at_end": alive})
    brows = [r for r in rows if r["kind"] == "broker"]
    bsum = {}
    for r in brows:
        bsum[r["result"]] = bsum.get(r["result"], 0) + 1
    k848 = [(r["test"], r["result"]) for r in rows if "848" in r["test"]] + \
        [(f"{r['test']}/{s}", v["result"]) for r in rows for s, v in r["subtests"].items() if "848" in s]
    print(f"franz-go pkg/kgo against {broker}: {summary} in {secs:.0f} s (rc {rc}); "
          f"broker tests: {bsum}; " + ("outside broker" if a.bootstrap else f"doze alive at end: {alive}"))
    print("KIP-848 tests: " + (", ".join(f"{n} {r}" for n, r in k848) or "none ran"))
    txn = [(r["test"], r["result"]) for r in rows if r["test"] == "TestTxnEtl"] + \
        [(f"TestTxnEtl/{s}", v["result"]) for r in rows if r["test"] == "TestTxnEtl" for s, v in r["subtests"].items()]
    print(("TV2" if features["tv2"] else "classic") + " transactional tests: "
          + (", ".join(f"{n} {r}" for n, r in txn) or "none ran") + "; broker's " + features_text(features))
    print(open(os.path.join(out, "franz-go.md")).read())
    return 0 if rc == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
