#!/usr/bin/env python3
"""librdkafka's own test suite (tests/test-runner) against doze (or any broker).

    python3 conformance/peers/librdkafka.py --tree DIR                 # the sample, fresh doze
    python3 conformance/peers/librdkafka.py --tree DIR --tests 0011,0081,0103
    python3 conformance/peers/librdkafka.py --tree DIR --tests 0081 --split 0081
    python3 conformance/peers/librdkafka.py --tree DIR --bootstrap 127.0.0.1:9330   # e.g. real Kafka
    python3 conformance/peers/librdkafka.py --tree DIR --check       # rf-3 calls left, sample, exclusions

DIR is a librdkafka 2.15.0 source tree, outside the repo (by default
~/.cache/doze-kafka/peers/librdkafka-2.15.0). Prepare it once with --fetch
(unpacked from npm's @confluentinc/kafka-javascript 1.10.0, which carries
librdkafka v2.15.0's src/, tests/ and build files unchanged), --patch-rf
(the tests' replication factor 3 becomes 1, in that copy) and --build
(configure, make libs, make -C tests build); `--check` lists any rf-3
call still there.

Each test number runs on its own (`TESTS=NNNN`, `-V 4.3.1`), bounded by
--test-timeout, the whole run by --timeout. Tests of librdkafka's
`default` scenario run on a doze started as that scenario's broker
(num.partitions=4, auto-create on); those of `noautocreate` on a second doze
with auto.create.topics.enable=false. test.conf is written to OUT with
bootstrap.servers naming the broker (RDKAFKA_TEST_CONF). If doze dies, the
test is marked so and doze is started again. Results per test
(PASSED/FAILED/SKIPPED/TIMEOUT, seconds, the failure line) go to
OUT/librdkafka.{md,json}; each test's output to OUT/logs/.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tarfile
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))   # conformance/
from lib import run_bounded  # noqa: E402
from common import Broker, cache_root, out_dir, write_results  # noqa: E402

DEFAULT_TREE = "librdkafka-2.15.0"
KAFKA_VERSION = "4.3.1"

# The sample: every broker test of librdkafka's table except those below.
EXCLUDED = {
    # KIP-932 share groups: doze has no ShareGroupHeartbeat/ShareFetch.
    **{n: "share groups (KIP-932): not in doze" for n in
       ("0170", "0171", "0172", "0173", "0174", "0175", "0176", "0177", "0178", "0179",
        "0180", "0181", "0184", "0185", "0190")},
    # They need a SASL/SSL/OAUTHBEARER listener or an authorizer set up in test.conf.
    "0097": "SSL listener and certificates (security: not in doze yet)",
    "0115": "producer authorization (ACLs, SASL: not in doze yet)",
    "0119": "consumer authorization (ACLs, SASL: not in doze yet)",
    "0126": "OAUTHBEARER/OIDC (SASL: not in doze yet)",
    "0135": "SASL credentials (not in doze yet)",
    "0142": "SASL re-authentication (not in doze yet)",
    # More than one broker.
    "0101": "fetch from follower: needs 3 brokers in racks",
    # Marked known-issue in librdkafka's own table (skipped unless -k).
    "0028": "known issue in librdkafka (#529)",
    "0047": "known issue in librdkafka",
    # Only librdkafka's mock cluster, no real broker.
    "0139": "uses librdkafka's mock cluster only",
    "0150": "uses librdkafka's mock cluster only",
}
SCENARIO_BROKERS = {
    "default": {"num.partitions": "4", "auto.create.topics.enable": "true"},
    "noautocreate": {"num.partitions": "4", "auto.create.topics.enable": "false"},
}
# What 0081's CreateAcls/DescribeAcls/DeleteAcls subtests need of the broker: an
# authorizer, and the tests' PLAINTEXT connections (User:ANONYMOUS) allowed to use it.
# 0109's unauthorized topic is a DENY for User:* on it, which a super user passes:
# it needs a broker that lets everyone do what no ACL names, and no super user.
ACL_BROKERS = {
    "super": {"authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
              "super.users": "User:ANONYMOUS"},
    "open": {"authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
             "allow.everyone.if.no.acl.found": "true"},
}
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def table(tree):
    """librdkafka's test table: [(number, name, flags, scenarios)] of broker tests."""
    text = open(os.path.join(tree, "tests", "test.c")).read()
    body = text[text.index("struct test tests[] = {"):]
    body = body[:body.index("{NULL}")]
    body = re.sub(r"/\*.*?\*/", "", body, flags=re.S)
    out = []
    for chunk in body.split("_TEST(")[1:]:
        m = re.match(r"\s*(\d{4})_(\w+)\s*,\s*([^,)]*)", chunk)
        if not m:
            continue
        sc = re.search(r'\.scenario\s*=\s*"([^"]*)"', chunk)
        scen = sc.group(1).split(",") if sc else ["default"]
        flags = m.group(3).strip()
        if "TEST_F_LOCAL" in flags or "TEST_F_MANUAL" in flags:
            continue
        out.append((m.group(1), m.group(1) + "_" + m.group(2), flags, scen))
    return out


def rf3_calls(tree, fix=False):
    """Topic creations with replication factor 3 still in the tests' sources
    (["file:line"]); with fix, that argument is changed to 1 in place (in
    the copy outside the repo; build the tests again afterwards)."""
    found = []
    tdir = os.path.join(tree, "tests")
    for name in sorted(os.listdir(tdir)):
        if not re.match(r"\d{4}-.*\.(c|cpp)$", name):
            continue
        path = os.path.join(tdir, name)
        s = open(path, errors="replace").read()
        edits = []
        for m in re.finditer(r"\b(test_create_topic\w*|Test::create_topic\w*)\s*\(", s):
            depth, j, commas = 1, m.end(), []
            while depth and j < len(s):
                c = s[j]
                depth += {"(": 1, ")": -1}.get(c, 0)
                if c == "," and depth == 1:
                    commas.append(j)
                j += 1
            bounds = [m.end() - 1] + commas + [j - 1]          # the call's argument separators
            if len(bounds) < 5:
                continue
            lo, hi = bounds[3] + 1, bounds[4]                   # the fourth argument
            if re.sub(r"/\*.*?\*/", "", s[lo:hi], flags=re.S).strip() == "3":
                found.append(f"{name}:{s[:m.start()].count(chr(10)) + 1}")
                edits.append((lo, hi))
        if fix and edits:
            for lo, hi in reversed(edits):
                k = s.rindex("3", lo, hi)
                s = s[:k] + "1" + s[k + 1:]
            with open(path, "w") as f:
                f.write(s)
    return found


# The npm package of Confluent's JavaScript client ships librdkafka's source
# (deps/librdkafka: src, src-cpp, tests, mklove, configure), byte for byte the
# files of tag v2.15.0 (checked against a clone), from a registry this machine
# reaches; the tag's tarball on GitHub is the other way.
NPM_PACKAGE, NPM_VERSION, RD_KAFKA_VERSION = "@confluentinc/kafka-javascript", "1.10.0", "0x020f00ff"


def fetch(tree):
    """Unpack librdkafka 2.15.0 from NPM_PACKAGE into tree (which must not exist yet)."""
    if os.path.exists(tree):
        sys.exit(f"{tree} exists already: remove it first, or leave out --fetch")
    with tempfile.TemporaryDirectory() as tmp:
        rc, secs = run_bounded(["npm", "pack", "--silent", f"{NPM_PACKAGE}@{NPM_VERSION}"], 600, cwd=tmp,
                               stdout=subprocess.DEVNULL)
        [tgz] = [f for f in os.listdir(tmp) if f.endswith(".tgz")] if rc == 0 else [None]
        if tgz is None:
            sys.exit(f"npm pack {NPM_PACKAGE}@{NPM_VERSION} failed (rc {rc})")
        prefix = "package/deps/librdkafka/"
        with tarfile.open(os.path.join(tmp, tgz)) as tar:
            members = [m for m in tar.getmembers() if m.name.startswith(prefix) and m.isfile()]
            for m in members:
                m.name = m.name[len(prefix):]
            tar.extractall(tree, members)        # modes kept: configure, lds-gen.py, tests/*.sh
    header = open(os.path.join(tree, "src", "rdkafka.h")).read()
    if f"#define RD_KAFKA_VERSION {RD_KAFKA_VERSION}" not in header:
        sys.exit(f"{tree}: not librdkafka 2.15.0 (RD_KAFKA_VERSION is not {RD_KAFKA_VERSION})")
    print(f"librdkafka 2.15.0 unpacked from {NPM_PACKAGE}@{NPM_VERSION}: {len(members)} files in {tree}")


def build(tree):
    """configure and make librdkafka and its test-runner in tree (SSL and
    SASL/SCRAM built, for the security issue's parts of 0081)."""
    steps = [["./configure", "--disable-gssapi", "--disable-curl", "--disable-zstd", "--disable-lz4-ext"],
             ["make", f"-j{os.cpu_count() or 2}", "libs"],
             ["make", f"-j{os.cpu_count() or 2}", "-C", "tests", "build"]]
    for cmd in steps:
        rc, secs = run_bounded(cmd, 3600, cwd=tree)
        print(f"{' '.join(cmd)}: rc {rc} in {secs:.0f} s", flush=True)
        if rc != 0:
            sys.exit(f"building librdkafka failed at: {' '.join(cmd)}")


def kafka_tools(out):
    """A KAFKA_PATH for the tests that run Kafka's own tools (kafka-topics.sh in
    0052 and 0077, kafka-acls.sh in 0109, ...): OUT/kafka/bin/<tool>.sh runs
    Kafka 4.3.1's tool from the jars conformance/kafka/realkafka.py fetches."""
    import realkafka
    bindir = os.path.join(out, "kafka", "bin")
    os.makedirs(bindir, exist_ok=True)
    scripts = {tool: f'exec "{sys.executable}" "{os.path.abspath(realkafka.__file__)}" tool {tool} "$@"'
               for tool in realkafka.TOOLS}
    # tests/java (0098's TransactionProducerCli, ...) compiles against KAFKA_PATH/libs and runs
    # through bin/kafka-run-class.sh with its own CLASSPATH
    scripts["kafka-run-class"] = f'exec "{realkafka.java_bin()}" -cp "$CLASSPATH:{realkafka.lib_dir()}/*" "$@"'
    for tool, command in scripts.items():
        script = os.path.join(bindir, tool + ".sh")
        with open(script, "w") as f:
            f.write(f"#!/bin/sh\n{command}\n")
        os.chmod(script, 0o755)
    libs = os.path.join(out, "kafka", "libs")
    if not os.path.exists(libs):
        os.symlink(realkafka.lib_dir(), libs)
    return os.path.dirname(bindir)


def parse_report(path, stdout_text):
    """-> {test name: (state, seconds, failure text)} of the tests that ran."""
    res = {}
    try:
        rep = json.load(open(path))
        for name, t in rep.get("tests", {}).items():
            if name != "<MAIN>" and t.get("state") not in ("SKIPPED", "NOT_STARTED"):
                res[name] = [t["state"], float(t.get("duration", 0.0)), ""]
    except (OSError, ValueError):
        pass
    for line in ANSI.sub("", stdout_text).splitlines():     # the summary table: fail lines, skips
        m = re.match(r"\|\s*(\d{4}_\w+)\s*\|\s*(\w+)\s*\|\s*([\d.]+)s\s*\|\s*(.*)$", line)
        if m and m.group(1) != "<MAIN>":
            name, state, secs, extra = m.groups()
            if state in ("SKIPPED", "NOT_STARTED") and name not in res:
                res.setdefault(name, [state, float(secs), extra.strip()])
                continue
            cur = res.setdefault(name, [state, float(secs), ""])
            cur[2] = extra.strip()
    return res


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tree", default=os.environ.get("LIBRDKAFKA_TREE")
                    or os.path.join(cache_root(), DEFAULT_TREE))
    ap.add_argument("--tests", help="comma-separated test numbers (default: the sample)")
    ap.add_argument("--split", default="", help="test numbers to run once per subtest function "
                    "(SUBTESTS=do_test_X), e.g. 0081")
    ap.add_argument("--only", default="", help="with --split: only these subtest functions, e.g. "
                    "do_test_DeleteRecords,do_test_DescribeConsumerGroups")
    ap.add_argument("--bootstrap", help="use this broker (every scenario) instead of starting doze")
    ap.add_argument("--quick", action="store_true", help="test-runner -Q (fewer messages)")
    ap.add_argument("--test-timeout", type=int, default=600, help="seconds per test number")
    ap.add_argument("--timeout", type=int, default=7200, help="seconds for the whole run")
    ap.add_argument("--timeout-multiplier", default="", help="test.conf test.timeout.multiplier")
    ap.add_argument("--doze-log-level", help="e.g. DEBUG: doze logs every request and answer")
    ap.add_argument("--check", action="store_true", help="list rf-3 calls, sample and exclusions; run nothing")
    ap.add_argument("--fetch", action="store_true", help="unpack librdkafka 2.15.0 into --tree "
                    "(from npm), then go on")
    ap.add_argument("--patch-rf", action="store_true", help="change the tests' replication factor 3 to 1 "
                    "in the tree (then --build)")
    ap.add_argument("--build", action="store_true", help="configure and make the tree, then go on")
    ap.add_argument("--acls", nargs="?", const="super", choices=sorted(ACL_BROKERS),
                    help="doze with Kafka's StandardAuthorizer: super (the default), User:ANONYMOUS a "
                    "super user (0081's ACL subtests); open, allow.everyone.if.no.acl.found and no super "
                    "user (0109's denied topic)")
    ap.add_argument("--out", help="results directory (default: a new temp dir)")
    a = ap.parse_args(argv)

    tree = os.path.abspath(a.tree)
    if a.fetch:
        fetch(tree)
    if not os.path.isfile(os.path.join(tree, "tests", "test.c")):
        sys.exit(f"{tree} is not a librdkafka source tree (see conformance/peers/README.md)")
    tab = table(tree)
    if a.patch_rf:
        print(f"replication factor 3 changed to 1 in: {', '.join(rf3_calls(tree, fix=True)) or 'none'}")
    if a.build:
        build(tree)
    left = rf3_calls(tree)
    if a.check:
        print(f"replication factor 3 still in: {', '.join(left) or 'none'}")
        for num, name, flags, scen in tab:
            why = EXCLUDED.get(num)
            print(f"{name:48s} {','.join(scen):20s} {'EXCLUDED: ' + why if why else 'sample'}")
        return 0
    runner = os.path.join(tree, "tests", "test-runner")
    if not os.access(runner, os.X_OK):
        sys.exit(f"{runner} is missing: build the tree first (see conformance/peers/README.md)")
    if left:
        print(f"warning: replication factor 3 still in {', '.join(left)}", flush=True)

    nums = a.tests.split(",") if a.tests else [n for n, _, _, _ in tab if n not in EXCLUDED]
    nums = list(dict.fromkeys(n.strip() for n in nums if n.strip()))
    scen_of = {}
    for num, _, _, scen in tab:
        for s in scen:
            if s in SCENARIO_BROKERS and s not in scen_of.setdefault(num, []):
                scen_of[num].append(s)
    split = set(a.split.split(",")) - {""}
    out = out_dir(a.out, "librdkafka-")
    kafka_path = kafka_tools(out)
    os.makedirs(os.path.join(out, "logs"), exist_ok=True)
    deadline = time.monotonic() + a.timeout
    rows = []
    needed = [s for s in SCENARIO_BROKERS if any(s in scen_of.get(n, ["default"]) for n in nums)]
    for scenario in needed:
        units = []
        for n in nums:
            if scenario not in scen_of.get(n, ["default"]):
                continue
            if n in split:
                src = [f for f in os.listdir(os.path.join(tree, "tests"))
                       if f.startswith(n + "-") and f.endswith((".c", ".cpp"))][0]   # not the .o/.d
                text = open(os.path.join(tree, "tests", src)).read()
                subs = re.findall(r"^\s+(do_test_\w+)\(", text, flags=re.M)
                for s in dict.fromkeys(subs):
                    if not a.only or s in a.only.split(","):
                        units.append((n, s))
            else:
                units.append((n, None))
        with Broker(a.bootstrap, dict(SCENARIO_BROKERS[scenario], **(ACL_BROKERS[a.acls] if a.acls else {})), a.doze_log_level,
                    keep_dir=os.path.join(out, f"doze-{scenario}")) as b:
            conf = os.path.join(out, f"test-{scenario}.conf")
            with open(conf, "w") as f:
                f.write(f"bootstrap.servers={b.bootstrap}\n")
                if a.timeout_multiplier:
                    f.write(f"test.timeout.multiplier={a.timeout_multiplier}\n")
            for n, sub in units:
                label = n + (f" [{sub}]" if sub else "")
                left_s = deadline - time.monotonic()
                if left_s < 30:
                    rows.append({"test": label, "result": "NOT_RUN", "seconds": 0.0,
                                 "note": "whole-run timeout reached", "scenario": scenario})
                    continue
                tag = f"{n}-{scenario}" + (f"-{sub}" if sub else "")
                report = os.path.join(out, "logs", tag + ".report.json")
                logp = os.path.join(out, "logs", tag + ".log")
                env = dict(os.environ, TESTS=n, RDKAFKA_TEST_CONF=conf, TEST_REPORT=report,
                           TEST_KAFKA_VERSION=KAFKA_VERSION, KAFKA_PATH=kafka_path, BROKERS=b.bootstrap)
                env.pop("CI", None)
                libs = [os.path.join(tree, "src"), os.path.join(tree, "src-cpp")]   # as run-test.sh does
                env["LD_LIBRARY_PATH"] = os.pathsep.join(libs + [env.get("LD_LIBRARY_PATH", "")]).rstrip(os.pathsep)
                if sub:
                    env["SUBTESTS"] = sub
                cmd = [runner, "-s", scenario, "-V", KAFKA_VERSION] + (["-Q"] if a.quick else [])
                mark = os.path.getsize(b.log_path) if b.log_path and os.path.exists(b.log_path) else 0
                with open(logp, "w") as lf:
                    rc, secs = run_bounded(cmd, min(a.test_timeout, left_s), cwd=os.path.join(tree, "tests"),
                                           env=env, stdout=lf, stderr=lf)
                text = open(logp, errors="replace").read()
                res = parse_report(report, text)
                died = not b.alive()
                if not res:
                    res = {n: ["TIMEOUT" if rc is None else f"NO_RESULT(rc {rc})", secs, ""]}
                for name, (state, tsecs, note) in res.items():
                    if rc is None and state in ("RUNNING", "PASSED"):
                        state = "TIMEOUT" if state == "RUNNING" else state
                    if died:
                        note = ("doze died; " + note).strip()
                    rows.append({"test": name + (f" [{sub}]" if sub else ""), "result": state,
                                 "seconds": round(tsecs if tsecs else secs, 2), "note": note[:300],
                                 "scenario": scenario, "log": logp, "doze_log_from": mark})
                print(f"{label:12s} {scenario:13s} {secs:7.1f} s  " +
                      ", ".join(f"{k}={v[0]}" for k, v in res.items()), flush=True)
                if died:
                    b.restart()
    summary = write_results(out, "librdkafka", rows, {
        "suite": f"librdkafka tests ({tree})", "broker": a.bootstrap or "doze", "quick": a.quick})
    print(f"librdkafka tests: {summary}; results in {out}")
    print(open(os.path.join(out, "librdkafka.md")).read())
    return 0 if all(r["result"] in ("PASSED", "SKIPPED") for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
