"""Shared bits of the Python exactly-once copiers (see conformance/clients/README.md).

Every copier, in any language, follows the same contract:

    copier --bootstrap H:P --input IN --output OUT --group G --txn-id T
           --attempt A --status FILE [--abort-rate 0.125] [--max-batch 200] [--seed S]
           [--group-protocol classic|consumer]

* It reads IN in consumer group G (read_committed, no auto commit) and, for every input
  record, writes one record to OUT inside a transaction of transactional.id T that also
  carries the consumer offsets (send offsets to transaction).
* Output record: key = input key, value = input value, headers
  src = "<input partition>:<input offset>", txn = "<attempt>.<seq>", plan = "commit"|"abort".
* About abort-rate of the transactions are aborted on purpose, after their records were
  written (flushed); the copier then rewinds to the committed offsets.
* After every transaction it rewrites FILE (atomically) with a JSON status:
  {"client", "version", "attempt", "commits", "aborts", "error_aborts", "errors",
   "committed": {"<attempt>.<seq>": n_records}, "aborted": {"<attempt>.<seq>": n_records},
   "last_error"}. "committed" lists only transactions whose commit the client confirmed,
  "aborted" only the on-purpose aborts the client confirmed.
* --group-protocol consumer (the runner's *-consumer rows): the consumer joins G with
  KIP-848's consumer group protocol (group.protocol=consumer: ConsumerGroupHeartbeat, the
  broker assigns) instead of the classic JoinGroup/SyncGroup; the client's
  group-metadata then carries the member id and member epoch into TxnOffsetCommit.
  Only the copiers that have such a row take it (confluent, java).
* It runs until killed (the runner sends SIGTERM once the group's committed offsets cover
  the whole input).
* Secure modes (the runner's --secure and --auth): the environment variable EOS_SECURITY
  holds JSON {"protocol": SASL_SSL, SASL_PLAINTEXT or SSL, "mechanism": PLAIN or
  SCRAM-SHA-512 and "username", "password" (SASL), "cafile": PEM of the CA that signed the
  broker's certificate (TLS), "certfile", "keyfile": the client's own certificate (SSL)};
  the copier's consumer and producer connect with it (and check the broker's name,
  127.0.0.1, against its certificate).
"""
import argparse
import faulthandler
import json
import os
import random
import signal
import time

faulthandler.register(signal.SIGUSR1, all_threads=True)   # the runner dumps stacks of a hung copier


def security():
    """EOS_SECURITY as a dict (see above), or None: plaintext."""
    text = os.environ.get("EOS_SECURITY")
    return json.loads(text) if text else None


def security_options(names):
    """EOS_SECURITY in one client library's option names: names maps each field
    (protocol, mechanism, username, password, cafile, certfile, keyfile) to the
    library's; the fields this mode has, nothing else."""
    s = security() or {}
    return {names[k]: v for k, v in s.items() if k in names}


def consumer_options(a, client):
    """The copier's consumer (a: parse_args()) in the option names kafka-python and aiokafka
    share: group a.group, client id eos-<client>-c<attempt>, read_committed, no auto commit."""
    return {"bootstrap_servers": a.bootstrap, "group_id": a.group, "client_id": "eos-%s-c%d" % (client, a.attempt),
            "isolation_level": "read_committed", "enable_auto_commit": False, "auto_offset_reset": "earliest",
            "session_timeout_ms": 10000, "heartbeat_interval_ms": 2000}


def parse_args(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--input", required=True)
    ap.add_argument("--output", required=True)
    ap.add_argument("--group", required=True)
    ap.add_argument("--txn-id", required=True)
    ap.add_argument("--attempt", type=int, default=1)
    ap.add_argument("--status", required=True)
    ap.add_argument("--abort-rate", type=float, default=0.125)
    ap.add_argument("--max-batch", type=int, default=200)
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--group-protocol", choices=("classic", "consumer"), default="classic")
    return ap.parse_args(argv)


class Status:
    def __init__(self, args, client, version):
        self.path = args.status
        self.attempt = args.attempt
        self.rnd = random.Random(args.seed)
        self.abort_rate = args.abort_rate
        self.seq = 0
        self.d = {"client": client, "version": version, "attempt": args.attempt,
                  "commits": 0, "aborts": 0, "error_aborts": 0, "errors": 0,
                  "committed": {}, "aborted": {}, "last_error": None, "started": time.time()}
        self.write()

    def next_txn(self):
        """A new transaction: returns (tag, plan)."""
        self.seq += 1
        plan = "abort" if self.rnd.random() < self.abort_rate else "commit"
        return "%d.%d" % (self.attempt, self.seq), plan

    def committed(self, tag, n):
        self.d["commits"] += 1
        self.d["committed"][tag] = n
        self.write()

    def aborted(self, tag, n):
        self.d["aborts"] += 1
        self.d["aborted"][tag] = n
        self.write()

    def error(self, what, exc, aborted=False):
        self.d["errors"] += 1
        if aborted:
            self.d["error_aborts"] += 1
        self.d["last_error"] = "%s: %s" % (what, exc)
        log("ERROR %s: %r" % (what, exc))
        self.write()

    def write(self):
        tmp = self.path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(self.d, f)
        os.replace(tmp, self.path)


def log(msg):
    print("%s %s" % (time.strftime("%H:%M:%S"), msg), flush=True)


def headers(partition, offset, tag, plan):
    return [("src", ("%d:%d" % (partition, offset)).encode()),
            ("txn", tag.encode()), ("plan", plan.encode())]
