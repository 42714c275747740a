"""What the JVM framework checks share (clients/flink, clients/spring, clients/streams:
each check.py), and what the exactly-once matrix (eos/runner.py) shares with them (log,
build):

    from clients import jvmcheck
    from clients.jvmcheck import log

    jvmcheck.build(PROJECT, JAR)         # mvn package when the jar is older than pom.xml or src/
    jvmcheck.java(PROJECT, JAR, "pkg.Main", "--x", "1", level="warn", heap="384m")  # -> a command
    ap = jvmcheck.parser(__doc__, records=5000)  # --bootstrap --kafka --faults --records
    ap.add_argument(...)                         # the check's own
    jvmcheck.last_options(ap, "the job")         # --workdir --secure
    jvmcheck.main(ap.parse_args(), PROJECT, JAR, "flink-eos-", body, summary)

main() builds the project, makes the work directory (--workdir, or a new one named
prefix...) and runs one Job per fault of --faults (fault "broker" is skipped with
--bootstrap): body(job) does the check's work, with job.fault, job.args,
job.start_broker() (a fresh broker, or --bootstrap's), job.grant(bootstrap, acls) (--secure:
the user and ACLs of the client under test), job.children (the processes ended with the job)
and job.row (what result.json gets: "ok", "notes", "result", ...). Job.run() makes what body
raises a note, ends the children and the broker, and writes result.json in the job's
directory. Then main() prints the table and exits 1 if a job failed.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

from brokers import Doze, Kafka
from secure import Security
import needs


def log(msg):
    print("%s %s" % (time.strftime("%H:%M:%S"), msg), file=sys.stderr, flush=True)


def build(project, jar):
    """mvn package in project (pom.xml, src/) if jar is missing or older than one of its sources."""
    srcs = [os.path.join(project, "pom.xml")] + [os.path.join(d, f) for d, _, fs in
                                                os.walk(os.path.join(project, "src")) for f in fs]
    if not os.path.exists(jar) or os.path.getmtime(jar) < max(os.path.getmtime(f) for f in srcs):
        log("mvn package in %s" % project)
        subprocess.run(["mvn", "-q", "-B", "package"], cwd=project, check=True, timeout=600)


def java(project, jar, main_class, *args, level="warn", heap="384m", jvm=()):
    """The command that runs main_class of project's jar, its dependencies (target/lib) on the
    class path, slf4j-simple logging at level with the time; jvm: more JVM options."""
    return (["java", "-Xmx" + heap, "-Dorg.slf4j.simpleLogger.defaultLogLevel=" + level,
             "-Dorg.slf4j.simpleLogger.showDateTime=true"] + list(jvm)
            + ["-cp", jar + os.pathsep + os.path.join(project, "target", "lib", "*"), main_class] + list(args))


class Job:
    """One job of a check: one fault, in its own directory under root, on its own broker.

    name: "<idx>-<doze|kafka|ext>-<fault>"; dir: root/name; row: what result.json gets
    (job, fault, records, the fields given, ok, notes, dir; then what the check adds, and
    seconds); children: the processes (lib.Child) to end when the job ends."""

    def __init__(self, args, root, idx, fault, broker_cls, **fields):
        self.args, self.fault, self.broker_cls = args, fault, broker_cls
        self.external = getattr(args, "bootstrap", None)        # --bootstrap (not every check has it)
        self.name = "%d-%s-%s" % (idx, "kafka" if args.kafka else ("ext" if self.external else "doze"), fault)
        self.dir = os.path.join(root, self.name)
        os.makedirs(self.dir)
        self.row = dict({"job": self.name, "fault": fault, "records": args.records}, **fields)
        self.row.update(ok=False, notes=[], dir=self.dir)
        self.broker, self.sec, self.children = None, None, []
        self.t0 = time.time()

    def note(self, text):
        self.row["notes"].append(text)

    def start_broker(self):
        """--bootstrap's broker, or a fresh broker (Doze, or Kafka with --kafka; with --secure's
        listener, user store and authorizer) started in the job's directory -> its PLAINTEXT
        bootstrap."""
        if self.external:
            return self.external
        self.sec = Security(self.dir) if self.args.secure else None
        settings = dict(self.sec.settings) if self.sec else {}
        if getattr(self.args, "doze_trace", None) and self.broker_cls is Doze:     # into broker.log
            settings["doze.trace"] = self.args.doze_trace
        self.broker = self.broker_cls(self.dir, settings or None,
                                      transaction_version=getattr(self.args, "transaction_version", None))
        self.broker.start()
        return self.broker.bootstrap

    def grant(self, bootstrap, acls):
        """--secure: a SCRAM user with exactly acls (made over bootstrap), and its settings in
        os.environ for the client under test -> the SASL_SSL bootstrap that client uses.
        Without --secure -> bootstrap."""
        if not self.sec:
            return bootstrap
        self.sec.add_user(bootstrap)
        self.sec.grant(bootstrap, acls)
        os.environ.update(self.sec.env)
        return self.broker.bootstraps["SASL_SSL"]

    def run(self, body, kill9=False):
        """body(self); anything it raises becomes a note. Then the children still running are
        stopped (kill9: killed -9), the broker stopped, and the row written to result.json
        -> the row."""
        try:
            body(self)
        except Exception as e:
            self.note("error: %r" % e)
        finally:
            for c in self.children:
                if not kill9:
                    c.stop()
                elif c.alive():
                    c.kill9()
            if self.broker:
                self.broker.stop()
        self.row["seconds"] = round(time.time() - self.t0, 1)
        with open(os.path.join(self.dir, "result.json"), "w") as f:
            json.dump(self.row, f, indent=1)
        return self.row


def parser(doc, records, bootstrap=True):
    """The check's argument parser (doc: its --help) with the options every check has first:
    --bootstrap (bootstrap=False: none), --kafka, --faults, --records (default records)."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    if bootstrap:
        ap.add_argument("--bootstrap", help="use this broker instead of starting one (no broker fault)")
    ap.add_argument("--kafka", action="store_true", help="start a real Kafka 4.3.1 instead of doze")
    ap.add_argument("--faults", default="none,client,broker")
    ap.add_argument("--records", type=int, default=records)
    return ap


def last_options(ap, client, its="its"):
    """The options every check has last: --workdir, --secure for the client under test
    (client: "the job", "the app", ...; its: "its" or "their"), --transaction-version and
    --doze-trace (what the exactly-once matrix passes on)."""
    ap.add_argument("--workdir")
    ap.add_argument("--secure", action="store_true", help="%s over SASL_SSL with exactly %s ACLs "
                    "(conformance/secure.py)" % (client, its))
    ap.add_argument("--transaction-version", type=int, choices=(0, 1, 2),
                    help="the broker's finalized transaction.version (doze: doze.transaction.version, "
                    "restarts keep it; Kafka: kafka-features upgrade|downgrade after its first start); "
                    "default: the broker's own (doze 1, Kafka 4.3.1 2)")
    ap.add_argument("--doze-trace", metavar="KINDS", help="doze's protocol trace (doze.trace: txn, group, "
                    "all) into the job's broker.log; nothing with --kafka")


def main(args, project, jar, prefix, body, summary, kill9=False, **fields):
    """A check's main, once its arguments are parsed: the venv for --secure (secure.py makes the
    user and the ACLs with confluent-kafka), the build, the work directory, one Job per fault
    (fields: more of its row; kill9: Job.run's), the table. summary(row, res) -> the end of the
    job's log line (res: the row's "result")."""
    if args.secure:
        needs.venv()
    build(project, jar)
    root = args.workdir or tempfile.mkdtemp(prefix=prefix)
    os.makedirs(root, exist_ok=True)
    log("work dir %s" % root)
    broker_cls = Kafka if args.kafka else Doze
    rows = []
    for idx, fault in enumerate(args.faults.split(","), 1):
        if fault == "broker" and getattr(args, "bootstrap", None):
            log("skip fault=broker with --bootstrap")
            continue
        log("job %s ..." % fault)
        row = Job(args, root, idx, fault, broker_cls, **fields).run(body, kill9)
        rows.append(row)
        log("job %s: %s in %.0fs; %s" % (fault, "PASS" if row["ok"] else "FAIL", row["seconds"],
                                         summary(row, row.get("result") or {})))
    print("%-8s %-6s %8s %s" % ("fault", "result", "seconds", "notes"))
    for r in rows:
        print("%-8s %-6s %8.1f %s" % (r["fault"], "PASS" if r["ok"] else "FAIL", r["seconds"], "; ".join(r["notes"])))
    print("%d passed, %d failed" % (sum(r["ok"] for r in rows), sum(not r["ok"] for r in rows)))
    sys.exit(0 if all(r["ok"] for r in rows) else 1)
