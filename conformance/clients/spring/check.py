#!/usr/bin/env python3
"""Spring Kafka exactly-once check (spring-kafka 4.0.6 from the Spring Boot 4.0.7 BOM), on doze-kafka
(default) or a real Kafka 4.3.1 (--kafka).

    conformance/clients/spring/run [--faults none,client] [--kafka] [--records 5000] [--fail-every 50]
                                   [--concurrency 3] [--kill-at 0.4] [--workdir DIR] [--job-timeout 300]

One job per fault, each on a fresh broker (doze via conformance/dozeproc.py, Kafka via realkafka.py):
  1. topics sp-in (3 partitions), sp-out (3), sp-side (1), made with confluent-kafka's AdminClient;
  2. N input records (key r%06d, value v%06d) written with an idempotent confluent-kafka producer;
  3. the Spring app (App.java) runs: transactional @KafkaListener in -> out (one output per input, sent
     inside the container's transaction, offsets committed with it; records n % fail-every == 3 send and
     then throw on their first attempt -> rollback + retry), and a thread doing executeInTransaction
     batches of 5 records to sp-side, every 5th batch aborted on purpose;
  fault=client: kill -9 the app when the group's committed input offsets reach --kill-at of N, start it
     again (same group, same transactional.id prefix);
  4. when the group has committed all input and the (last) app's side thread is done, the app is stopped
     and a read_committed confluent-kafka consumer checks: every input key exactly once in sp-out with
     its input value; in sp-side every batch complete (5 records, each once), no aborted batch, every
     SIDE-COMMITTED batch present, and unlogged batches only from a killed run (its last one);
     and that each partition's read_committed end (LSO) equals its high watermark.
--secure: the app connects over SASL_SSL as a SCRAM user with exactly its ACLs (READ on the input
and the group, WRITE on the outputs and on transactional ids prefixed spr-<group>-); the setup and
the checks stay on PLAINTEXT.
Logs (app-*.log, broker.log) and result.json are in the job's directory. Exit 1 if a job fails.
Debug log of every doze request: DOZE_LOG_LEVEL=DEBUG.
"""
import json
import os
import re
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))   # conformance/
from lib import Child  # noqa: E402
import needs  # noqa: E402
needs.venv()                                  # confluent-kafka: in the conformance venv
from confluent_kafka import Consumer, Producer, TopicPartition, KafkaError, KafkaException  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402
from clients import jvmcheck  # noqa: E402
from clients.jvmcheck import log  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
JAR = os.path.join(HERE, "target", "spring-eos-check-1.0.jar")


class App(Child):
    """One run of the Spring app (a JVM), its output in jdir/app-run<run>.log."""

    def __init__(self, args, bootstrap, t, run, jdir):
        self.logpath = os.path.join(jdir, "app-run%d.log" % run)
        cmd = jvmcheck.java(HERE, JAR, "dozespring.App",
                            "--bootstrap", bootstrap, "--group", t["group"], "--input", t["in"], "--output", t["out"],
                            "--side", t["side"], "--run", str(run), "--fail-every", str(args.fail_every),
                            "--concurrency", str(args.concurrency), "--side-batches", str(args.side_batches),
                            level=os.environ.get("SPRING_LOG", "warn"))
        super().__init__(cmd, log=self.logpath)

    def lines(self):
        with open(self.logpath) as f:
            return f.read().splitlines()


def read_all(bootstrap, topic, parts, isolation):
    """-> (list of (partition, key, value), {partition: end offset reached}, {partition: high watermark})"""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "sp-verify-%d" % time.time_ns(),
                  "isolation.level": isolation, "enable.auto.commit": False,
                  "enable.partition.eof": True, "auto.offset.reset": "earliest"})
    tps = [TopicPartition(topic, p, 0) for p in range(parts)]
    hw = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(parts)}
    c.assign(tps)
    out, eof, t0 = [], {}, time.time()
    while len(eof) < parts and time.time() - t0 < 60:
        for m in c.consume(500, 1.0):
            if m.error():
                if m.error().code() == KafkaError._PARTITION_EOF:
                    eof[m.partition()] = m.offset()
                else:
                    raise RuntimeError(str(m.error()))
            else:
                eof.pop(m.partition(), None)
                out.append((m.partition(), m.key().decode(), m.value().decode()))
    c.close()
    return out, eof, hw


def committed_total(bootstrap, group, topic, parts):
    # read_uncommitted: librdkafka's default read_committed asks OffsetFetch for stable offsets, which keeps
    # answering UNSTABLE_OFFSET_COMMIT while the app has a transaction open (nearly always, one txn per record)
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                  "isolation.level": "read_uncommitted"})
    try:
        res = c.committed([TopicPartition(topic, p) for p in range(parts)], timeout=10)
        return sum(max(tp.offset, 0) for tp in res)
    finally:
        c.close()


def run_job(job):
    fault, args, name, row, apps = job.fault, job.args, job.name, job.row, job.children
    jdir, t0 = job.dir, job.t0
    bs = job.start_broker()
    sfx = "%s-%d" % (fault, int(time.time()))
    t = {"in": "sp-in-" + sfx, "out": "sp-out-" + sfx, "side": "sp-side-" + sfx, "group": "sp-app-" + sfx}
    admin = AdminClient({"bootstrap.servers": bs})
    fs = admin.create_topics([NewTopic(t["in"], 3, 1), NewTopic(t["out"], 3, 1), NewTopic(t["side"], 1, 1)])
    for f in fs.values():
        f.result(30)
    p = Producer({"bootstrap.servers": bs, "enable.idempotence": True, "linger.ms": 5})
    for i in range(args.records):
        p.produce(t["in"], key="r%06d" % i, value="v%06d" % i)
        if i % 1000 == 999:
            p.poll(0)
    if p.flush(60):
        raise RuntimeError("input producer did not flush")
    log("%s: %d input records written" % (name, args.records))
    # --secure: the app over SASL_SSL with exactly what it needs
    app_bs = job.grant(bs, [("TOPIC", t["in"], "LITERAL", "READ"), ("TOPIC", t["out"], "LITERAL", "WRITE"),
                            ("TOPIC", t["side"], "LITERAL", "WRITE"), ("GROUP", t["group"], "LITERAL", "READ"),
                            ("TRANSACTIONAL_ID", "spr-%s-" % t["group"], "PREFIXED", "WRITE")])
    run = 1
    apps.append(App(args, app_bs, t, run, jdir))
    kill_at = int(args.records * args.kill_at) if fault in ("client", "broker") else None
    deadline = time.time() + args.job_timeout
    done = 0
    while time.time() < deadline:
        time.sleep(0.5)
        try:
            done = committed_total(bs, t["group"], t["in"], 3)
        except KafkaException as e:      # e.g. NOT_COORDINATOR while __consumer_offsets is being made
            log("%s: committed offsets not readable yet: %s" % (name, e))
        if kill_at is not None and done >= kill_at and fault == "broker":
            log("%s: kill -9 broker at %d/%d committed input" % (name, done, args.records))
            job.broker.kill9()
            job.note("broker kill -9 @%d committed, restarted" % done)
            kill_at = None
            time.sleep(0.5)
            job.broker.start()
            continue
        if kill_at is not None and done >= kill_at:
            log("%s: kill -9 app run%d at %d/%d committed input" % (name, run, done, args.records))
            apps[-1].kill9()
            job.note("app kill -9 @%d committed, restarted" % done)
            kill_at = None
            time.sleep(1)
            run += 1
            apps.append(App(args, app_bs, t, run, jdir))
            continue
        if not apps[-1].alive():
            raise RuntimeError("app run%d exited rc=%s" % (run, apps[-1].proc.returncode))
        if done >= args.records and any(l.startswith("SIDE-DONE") for l in apps[-1].lines()):
            break
    else:
        raise RuntimeError("timeout: %d/%d input committed" % (done, args.records))
    log("%s: all %d input committed after %.0fs" % (name, done, time.time() - t0))
    apps[-1].stop()
    # verify the output
    res = {}
    out, eof, hw = read_all(bs, t["out"], 3, "read_committed")
    seen = {}
    for part, k, v in out:
        seen.setdefault(k, []).append(v)
    missing = [("r%06d" % i) for i in range(args.records) if ("r%06d" % i) not in seen]
    dups = {k: v for k, v in seen.items() if len(v) > 1}
    badval = [k for k, v in seen.items() if not v[0].startswith("v" + k[1:] + "|")]
    extra = [k for k in seen if not re.fullmatch(r"r\d{6}", k) or int(k[1:]) >= args.records]
    unc, _, _ = read_all(bs, t["out"], 3, "read_uncommitted")
    res.update(output_records=len(out), missing=len(missing), duplicates=len(dups), bad_values=len(badval),
               extra=len(extra), output_read_uncommitted=len(unc),
               lso_eq_hw=all(eof.get(pp) == hw[pp] for pp in range(3)), out_end=eof, out_hw=hw)
    if missing:
        res["missing_sample"] = missing[:10]
    if dups:
        res["duplicate_sample"] = dict(list(dups.items())[:5])
    # fail-once lines (rollbacks that happened)
    logs = {i + 1: a.lines() for i, a in enumerate(apps)}
    res["fail_once"] = sum(l.startswith("FAIL-ONCE") for ls in logs.values() for l in ls)
    # side output
    committed, aborted, errors = set(), set(), []
    for ls in logs.values():
        for l in ls:
            if l.startswith("SIDE-COMMITTED "):
                committed.add(l.split()[1])
            elif l.startswith("SIDE-ABORTED "):
                aborted.add(l.split()[1])
            elif l.startswith("SIDE-ERROR "):
                errors.append(l)
    sout, seof, shw = read_all(bs, t["side"], 1, "read_committed")
    batches = {}
    for _, k, v in sout:
        batches.setdefault(k, []).append(v)
    incomplete = [b for b, vs in batches.items() if sorted(vs) != ["%s-%d" % (b, j) for j in range(5)]]
    aborted_seen = [b for b in batches if b in aborted or int(b.split("-")[1]) % 5 == 4]
    committed_missing = sorted(committed - set(batches))
    unlogged = sorted(set(batches) - committed)
    bad_unlogged = []
    for b in unlogged:        # allowed only: a killed run's batch right after its last logged one
        r, s = b.split("-")
        r, s = int(r), int(s)
        last = max([int(c.split("-")[1]) for c in committed | aborted if c.startswith("%d-" % r)] or [-1])
        if r == len(apps) or s != last + 1:
            bad_unlogged.append(b)
    sunc, _, _ = read_all(bs, t["side"], 1, "read_uncommitted")
    res.update(side_batches=len(batches), side_committed_logged=len(committed), side_aborted_logged=len(aborted),
               side_incomplete=incomplete, side_aborted_visible=aborted_seen,
               side_committed_missing=committed_missing, side_unlogged_ok=[b for b in unlogged if b not in bad_unlogged],
               side_unlogged_bad=bad_unlogged, side_errors=errors[:5], side_read_uncommitted=len(sunc),
               side_lso_eq_hw=seof.get(0) == shw[0])
    row["result"] = res
    row["ok"] = (not missing and not dups and not badval and not extra and res["lso_eq_hw"]
                 and res["fail_once"] > 0 and not incomplete and not aborted_seen and not committed_missing
                 and not bad_unlogged and not errors and len(committed) > 0 and res["side_lso_eq_hw"])


def summary(row, res):
    return "%s; %s" % (json.dumps(res), "; ".join(row["notes"]))


def main():
    ap = jvmcheck.parser(__doc__, records=5000, bootstrap=False)
    ap.add_argument("--fail-every", type=int, default=50)
    ap.add_argument("--concurrency", type=int, default=3)
    ap.add_argument("--side-batches", type=int, default=40)
    ap.add_argument("--kill-at", type=float, default=0.4)
    ap.add_argument("--job-timeout", type=int, default=300)
    jvmcheck.last_options(ap, "the app")
    jvmcheck.main(ap.parse_args(), HERE, JAR, "spring-eos-", run_job, summary)


if __name__ == "__main__":
    main()
