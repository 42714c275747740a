#!/usr/bin/env python3
"""Kafka Streams 4.3.1 exactly_once_v2 check, on doze-kafka (default) or a real Kafka 4.3.1 (--kafka).

    conformance/clients/streams/run [--faults none,client,broker] [--kafka] [--records 10000] [--keys 100]
                                    [--bootstrap H:P] [--workdir DIR] [--job-timeout 300]

One job per fault, each on a fresh broker this script starts (doze through conformance/dozeproc.py,
Kafka through conformance/kafka/realkafka.py), or on --bootstrap H:P (then fault "broker" is skipped):

  1. topics st-in-<job> and st-out-<job>, 3 partitions each (Tool topics);
  2. a producer writes N records (key r%06d, value g%03d of i % K) at --rate records/s (Tool produce);
  3. two Streams instances (separate JVMs, same application.id, own state dirs) run the topology
     input -> selectKey(value) -> repartition -> count() (store + changelog) -> output (App);
  4. a read_committed watcher (Tool watch) reads the output from offset 0 and checks that each key's
     counts go 1, 2, 3, ... up to the number of input records with that key: no repeat, no gap; and at
     the end that the LSO equals the high watermark on every output partition.
  fault=client: kill -9 instance A at ~40% (--kill-at) of the output and start it again on the same state dir;
  fault=broker: kill -9 the broker at ~40% and start it again on the same data (and port).
--secure: the instances connect over SASL_SSL as a SCRAM user with exactly Streams' ACLs (READ on the
input, WRITE on the output, ALL on topics prefixed with the application.id, READ on its group, WRITE
on transactional ids prefixed with it); the producer, the watcher and the setup stay on PLAINTEXT.
The instances' logs, the broker log and result.json are in the job's directory. Exit 1 if a job fails.
Debug log of every doze request: DOZE_LOG_LEVEL=DEBUG.
"""
import json
import os
import queue
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))   # conformance/
from lib import Child  # noqa: E402
from clients import jvmcheck  # noqa: E402
from clients.jvmcheck import log  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
JAR = os.path.join(HERE, "target", "streams-eos-check-1.0.jar")


def java(cls, *args):
    return jvmcheck.java(HERE, JAR, "dozestreams." + cls, *args, level=os.environ.get("STREAMS_LOG", "warn"))


def watched(cmd, logpath, lines):
    """A child JVM (lib.Child) whose output lines go to the queue lines (then None at
    its end), and to logpath but for its "progress" lines."""
    child = Child(cmd, log=logpath, stdout=subprocess.PIPE, text=True)

    def pump():
        with open(logpath, "a") as f:
            for line in child.proc.stdout:
                if not line.startswith("progress "):
                    f.write(line)
                    f.flush()
                lines.put(line.rstrip("\n"))
        lines.put(None)
    threading.Thread(target=pump, daemon=True).start()
    return child


def run_job(job):
    fault, args, name, jdir, row, procs = job.fault, job.args, job.name, job.dir, job.row, job.children
    bootstrap = job.start_broker()
    suffix = "%s-%d" % (fault, int(time.time()))
    tin, tout, app_id = "st-in-" + suffix, "st-out-" + suffix, "st-app-" + suffix
    r = subprocess.run(java("Tool", "topics", "--bootstrap", bootstrap, "--input", tin, "--output", tout),
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120)
    if r.returncode:
        raise RuntimeError("topics: " + r.stdout[-2000:])
    # --secure: the instances over SASL_SSL with exactly what Streams needs
    app_bootstrap = job.grant(bootstrap, [("TOPIC", tin, "LITERAL", "READ"), ("TOPIC", tout, "LITERAL", "WRITE"),
                                          ("TOPIC", app_id, "PREFIXED", "ALL"), ("GROUP", app_id, "LITERAL", "READ"),
                                          ("TRANSACTIONAL_ID", app_id, "PREFIXED", "WRITE")])
    lines = queue.Queue()
    watch = watched(java("Tool", "watch", "--bootstrap", bootstrap, "--output", tout, "--records",
                         str(args.records), "--keys", str(args.keys), "--timeout-ms", str(args.job_timeout * 1000)),
                    os.path.join(jdir, "watch.log"), lines)
    procs.append(watch)
    prod = Child(java("Tool", "produce", "--bootstrap", bootstrap, "--input", tin, "--records",
                      str(args.records), "--keys", str(args.keys), "--rate", str(args.rate)),
                 log=os.path.join(jdir, "produce.log"))
    procs.append(prod)

    def app(inst):
        return Child(java("App", "--bootstrap", app_bootstrap, "--app-id", app_id, "--input", tin, "--output", tout,
                          "--state-dir", os.path.join(jdir, "state-" + inst), "--name", inst, "--threads", str(args.threads)),
                     log=os.path.join(jdir, "app-%s.log" % inst))
    apps = {"A": app("A"), "B": app("B")}
    procs.extend(apps.values())
    kill_at = int(args.records * args.kill_at) if fault != "none" else None
    result, progress = None, 0
    noted = set()                             # instances whose exit is in the notes
    while True:
        try:
            line = lines.get(timeout=1)
        except queue.Empty:
            line = ""
        if line is None:
            break
        if line.startswith("progress "):
            progress = int(line.split()[1])
        elif line.startswith("RESULT "):
            result = json.loads(line[7:])
        if kill_at is not None and progress >= kill_at:
            kill_at = None
            if fault == "client":
                log("%s: kill -9 instance A at %d/%d output records" % (name, progress, args.records))
                apps["A"].kill9()
                time.sleep(1)
                apps["A"] = app("A")
                procs.append(apps["A"])
                job.note("instance A kill -9 @%d, restarted" % progress)
            elif fault == "broker":
                log("%s: kill -9 broker at %d/%d output records" % (name, progress, args.records))
                job.broker.kill9()
                time.sleep(1)
                job.broker.start()
                job.note("broker kill -9 @%d, restarted" % progress)
        for k, a in apps.items():
            if not a.alive() and a not in noted:
                noted.add(a)
                job.note("instance %s exited rc=%s" % (k, a.proc.returncode))
                log("%s: instance %s exited rc=%s" % (name, k, a.proc.returncode))
    watch.proc.wait()
    if prod.proc.wait() != 0:
        job.note("producer rc=%s" % prod.proc.returncode)
    row["result"] = result
    row["ok"] = bool(result and result.get("ok")) and prod.proc.returncode == 0


def summary(row, res):
    return "output %s/%s, keys wrong %s, violations %s, lso %s hw %s, read_uncommitted %s; %s" % (
        res.get("output_records"), row["records"], res.get("keys_wrong"), res.get("violations"), res.get("lso"),
        res.get("hw"), res.get("read_uncommitted_records"), "; ".join(row["notes"]))


def main():
    ap = jvmcheck.parser(__doc__, records=10000)
    ap.add_argument("--keys", type=int, default=100)
    ap.add_argument("--rate", type=float, default=500.0, help="input records per second")
    ap.add_argument("--kill-at", type=float, default=0.4, help="fault when this share of the output is read")
    ap.add_argument("--threads", type=int, default=1, help="stream threads per instance")
    ap.add_argument("--job-timeout", type=int, default=300)
    jvmcheck.last_options(ap, "the instances", "their")
    args = ap.parse_args()
    jvmcheck.main(args, HERE, JAR, "streams-eos-", run_job, summary, keys=args.keys)


if __name__ == "__main__":
    main()
