#!/usr/bin/env python3
"""Flink 2.2 exactly-once check (KafkaSource read_committed -> map -> KafkaSink EXACTLY_ONCE), on
doze-kafka (default) or a real Kafka 4.3.1 (--kafka).

    conformance/clients/flink/run [--faults none,client,broker] [--kafka] [--records 5000]
                                  [--parallelism 2] [--delay-ms 4] [--kill-after 3] [--bootstrap H:P]
                                  [--workdir DIR] [--job-timeout 300] [--settle-s 5]

One job per fault, each on a fresh broker this script starts (doze through conformance/dozeproc.py,
Kafka through conformance/kafka/realkafka.py), or on --bootstrap H:P (then fault "broker" is skipped):

  1. topics fl-in-<job> and fl-out-<job>, 3 partitions each; N records v000000.. written (Tool produce);
  2. the Flink job (FlinkJob: a local MiniCluster in its own JVM, checkpoints every 1 s to a local
     directory, retained) reads the input read_committed and bounded (up to the end offsets at start),
     maps v -> out-v (--delay-ms per record, so a fault lands mid-way), and writes with KafkaSink
     DeliveryGuarantee.EXACTLY_ONCE, transactional id prefix fl-tx-<job>, transaction.timeout.ms 15 min;
     the job ends by itself when the bounded input is done (final checkpoint commits the last transactions);
  3. Tool verify reads the output read_committed from offset 0 up to the LSO: every out-v exactly once,
     nothing else, and LSO == high watermark (no transaction left open).
  A bounded KafkaSource restored from a checkpoint never finishes (its enumerator does not send
  NoMoreSplits again: FLINK-33466 / FLINK-31006, Flink's bug, same on real Kafka), so after a restore
  the script polls the committed output, and --settle-s after it holds all N records stops the job.
  fault=client: kill -9 the job's JVM just after its --kill-after'th completed checkpoint and start it
     again from the newest retained checkpoint (execution.state-recovery.path); Flink commits the
     transactions that checkpoint prepared from a fresh producer with the stored producer id/epoch;
  fault=broker: kill -9 the broker at the same point and start it again on the same data (and port);
     the clients retry through the outage (open transactions must survive it); should a task fail,
     the job restarts inside its JVM from its last checkpoint (fixed-delay restart strategy).
--secure: the job connects over SASL_SSL as a SCRAM user with exactly its ACLs (READ on the input and
on its group flink-eos-<prefix>, WRITE on the output and on transactional ids prefixed <prefix>); the
producer and the verifier stay on PLAINTEXT.
Logs (job-*.log, produce.log, verify.log, broker log) and result.json are in the job's directory.
Exit 1 if a job fails. Debug log of every doze request: DOZE_LOG_LEVEL=DEBUG. Job log level: FLINK_LOG=info.
"""
import glob
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))   # conformance/
from lib import Child  # noqa: E402
from clients import jvmcheck  # noqa: E402
from clients.jvmcheck import log  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
JAR = os.path.join(HERE, "target", "flink-eos-check-1.0.jar")


def java(cls, *args, level="warn", heap="384m"):
    return jvmcheck.java(HERE, JAR, "dozeflink." + cls, *args, level=level, heap=heap,
                         jvm=["--add-opens=java.base/java.util=ALL-UNNAMED",
                              "--add-opens=java.base/java.lang=ALL-UNNAMED"])


def checkpoints(cpdir):
    """Completed retained checkpoints (chk-N dirs holding _metadata), oldest first by _metadata mtime."""
    found = []
    for m in glob.glob(os.path.join(cpdir, "*", "chk-*", "_metadata")):
        try:
            found.append((os.path.getmtime(m), os.path.dirname(m)))
        except OSError:
            pass
    return [d for _, d in sorted(found)]


def run_tool(jdir, logname, *args, timeout=180):
    r = subprocess.run(java("Tool", *args), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       timeout=timeout)
    with open(os.path.join(jdir, logname), "a") as f:
        f.write(r.stdout)
    if r.returncode:
        raise RuntimeError("Tool %s rc=%d: %s" % (args[0], r.returncode, r.stdout[-1500:]))
    return r.stdout


def committed(bootstrap, topic, records):
    """How many records a read_committed consumer sees in the output now (-1 if the tool failed)."""
    try:
        r = subprocess.run(java("Tool", "verify", "--bootstrap", bootstrap, "--output", topic, "--records",
                                str(records), "--timeout-ms", "20000"),
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=60)
        for line in r.stdout.splitlines():
            if line.startswith("RESULT "):
                return json.loads(line[7:])["output_records"]
    except (subprocess.TimeoutExpired, ValueError, KeyError):
        pass
    return -1


def run_job(job):
    fault, args, name, jdir, row, jvms = job.fault, job.args, job.name, job.dir, job.row, job.children
    bootstrap = job.start_broker()
    suffix = "%s-%d" % (fault, int(time.time()))
    tin, tout, prefix = "fl-in-" + suffix, "fl-out-" + suffix, "fl-tx-" + suffix
    cpdir = os.path.join(jdir, "checkpoints")
    os.makedirs(cpdir)
    run_tool(jdir, "produce.log", "produce", "--bootstrap", bootstrap, "--input", tin, "--output", tout,
             "--records", str(args.records))
    log("%s: produced %d records to %s" % (name, args.records, tin))
    # --secure: the job over SASL_SSL with exactly what it needs
    job_bootstrap = job.grant(bootstrap, [("TOPIC", tin, "LITERAL", "READ"), ("TOPIC", tout, "LITERAL", "WRITE"),
                                          ("GROUP", "flink-eos-" + prefix, "LITERAL", "READ"),
                                          ("TRANSACTIONAL_ID", prefix, "PREFIXED", "WRITE")])

    def start_jvm(restore=None):
        extra = ["--restore", restore] if restore else []
        p = Child(java("FlinkJob", "--bootstrap", job_bootstrap, "--input", tin, "--output", tout, "--prefix", prefix,
                       "--checkpoint-dir", cpdir, "--parallelism", str(args.parallelism),
                       "--delay-ms", str(args.delay_ms), *extra,
                       level=os.environ.get("FLINK_LOG", "info"), heap="768m"),
                  log=os.path.join(jdir, "job-%d.log" % (len(jvms) + 1)))
        jvms.append(p)
        return p

    jvm = start_jvm()
    deadline = time.time() + args.job_timeout
    pending = fault if fault != "none" else None
    next_poll, complete_at, stopped = 0, None, False
    while jvm.alive() and time.time() < deadline:
        time.sleep(0.1)
        if pending and len(checkpoints(cpdir)) >= args.kill_after:
            time.sleep(0.2)
            if pending == "client":
                jvm.kill9()
                cps = checkpoints(cpdir)
                log("%s: kill -9 job JVM after %d checkpoints; restart from %s" % (name, len(cps), cps[-1]))
                job.note("job kill -9 after checkpoint %s, restarted from it" % os.path.basename(cps[-1]))
                jvm = start_jvm(cps[-1])
            else:
                log("%s: kill -9 broker after %d checkpoints" % (name, len(checkpoints(cpdir))))
                job.broker.kill9()
                time.sleep(1)
                job.broker.start()
                job.note("broker kill -9 after %d checkpoints, restarted" % args.kill_after)
            pending = None
        if not pending and time.time() >= next_poll and (jvms[-1] is not jvms[0] or fault == "broker"):
            # A bounded KafkaSource restored from a checkpoint (new JVM, or a failover) never
            # finishes: its enumerator does not send NoMoreSplits again (FLINK-33466 / FLINK-31006,
            # apache/flink-connector-kafka PR #318). So once the committed output holds all N
            # records, wait --settle-s (more checkpoints: a late duplicate would show) and stop it.
            next_poll = time.time() + 3
            n = committed(bootstrap, tout, args.records)
            if n >= args.records and complete_at is None:
                complete_at = time.time()
                log("%s: committed output complete (%d); stopping the job in %ds" % (name, n, args.settle_s))
            if complete_at is not None and time.time() - complete_at >= args.settle_s:
                stopped = True
                job.note("restored bounded source did not finish (FLINK-33466); job stopped "
                         "%ds after the output was complete" % args.settle_s)
                jvm.kill9()
    if jvm.alive():
        job.note("job timeout after %ds" % args.job_timeout)
        jvm.kill9()
    elif jvm.proc.returncode != 0 and not stopped:
        job.note("job rc=%s" % jvm.proc.returncode)
    if pending:
        job.note("job ended before the fault could be injected (raise --delay-ms or --records)")
    job_ok = (jvm.proc.returncode == 0 or stopped) and not pending
    out = run_tool(jdir, "verify.log", "verify", "--bootstrap", bootstrap, "--output", tout,
                   "--records", str(args.records), "--timeout-ms", "60000")
    result = None
    for line in out.splitlines():
        if line.startswith("RESULT "):
            result = json.loads(line[7:])
    row["result"] = result
    row["checkpoints"] = len(checkpoints(cpdir))
    row["ok"] = bool(result and result.get("ok")) and job_ok


def summary(row, res):
    return "output %s/%s, missing %s, duplicates %s, unexpected %s, lso %s hw %s; %s %s" % (
        res.get("output_records"), row["records"], res.get("missing"), res.get("duplicates"),
        res.get("unexpected"), res.get("lso"), res.get("hw"), "; ".join(row["notes"]), res.get("samples") or "")


def main():
    ap = jvmcheck.parser(__doc__, records=5000)
    ap.add_argument("--parallelism", type=int, default=2)
    ap.add_argument("--delay-ms", type=int, default=4, help="map delay per record (per subtask)")
    ap.add_argument("--kill-after", type=int, default=3, help="fault after this many completed checkpoints")
    ap.add_argument("--job-timeout", type=int, default=300)
    ap.add_argument("--settle-s", type=int, default=5,
                    help="after a restore, stop the job this long after the committed output is complete")
    jvmcheck.last_options(ap, "the job")
    jvmcheck.main(ap.parse_args(), HERE, JAR, "flink-eos-", run_job, summary, kill9=True)


if __name__ == "__main__":
    main()
