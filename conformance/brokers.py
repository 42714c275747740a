"""The two brokers the conformance checks run against, started the same way.

    sys.path.insert(0, CONFORMANCE_DIR)
    from brokers import Doze, Kafka
    b = Doze(directory)                 # or Kafka(directory): a real Apache Kafka 4.3.1
    b = Doze(directory, settings={"listener.security.protocol.map": "...,SASL_SSL:SASL_SSL", ...})
    b.start(); b.bootstrap; b.bootstraps["SASL_SSL"]; b.kill9(); b.start(); b.stop()

settings are broker settings in Kafka's names, given to both the same way;
every listener that listener.security.protocol.map names besides PLAINTEXT
(and CONTROLLER) gets a free port of its own (realkafka.py does the same for
Kafka), bootstrap is PLAINTEXT's address and bootstraps all of them.
group.initial.rebalance.delay.ms is 0 on both (realkafka.py's setting).
start() after kill9() or stop() starts again on the same data and ports.

transaction_version=N (0, 1, 2; None: the broker's default, doze 1, Kafka 4.3.1 2)
finalizes the transaction.version feature: doze starts (and restarts) with
doze.transaction.version=N; Kafka, after its first start on freshly formatted
data, gets `kafka-features upgrade|downgrade --feature transaction.version=N`
(the level then lives in its metadata log, so restarts keep it). Both check
it took: finalized_transaction_version() asks ApiVersions v3.
"""
import os
import shutil
import signal
import time

from lib import free_port              # (and puts conformance/kafka on sys.path: realkafka)
from dozeproc import DozeProcess
from realkafka import RealKafka, extra_listener_names

COMMON = {"group.initial.rebalance.delay.ms": "0"}


def finalized_transaction_version(bootstrap):
    """The broker's finalized transaction.version (ApiVersions v3's FinalizedFeatures), 0 when
    it finalizes none."""
    import doze_kafka as dk
    with dk.Client(bootstrap, client_id="brokers-features") as c:
        msg = c.call(dk.ApiKey.API_VERSIONS, 3, client_software_name="doze-conformance",
                     client_software_version="1")
    return next((f.max_version_level for f in msg.finalized_features or () if f.name == "transaction.version"), 0)


def check_transaction_version(bootstrap, want, wait_s=15.0):
    """Waits until the broker finalizes transaction.version want (a change goes through
    Kafka's metadata log first); RuntimeError if it does not."""
    deadline = time.time() + wait_s
    while True:
        got = finalized_transaction_version(bootstrap)
        if got == want:
            return got
        if time.time() > deadline:
            raise RuntimeError("transaction.version is %s on %s, not %s" % (got, bootstrap, want))
        time.sleep(0.3)


class Doze:
    name = "doze"

    def __init__(self, directory, settings=None, transaction_version=None):
        self.dir = directory
        self.transaction_version = transaction_version
        self.settings = dict(COMMON, **(settings or {}))
        if transaction_version is not None:
            self.settings["doze.transaction.version"] = str(transaction_version)
        self.ports = {n: free_port() for n in extra_listener_names(self.settings)}
        self.proc = DozeProcess(directory)
        if self.ports:
            self.settings["listeners"] = ",".join(
                ["PLAINTEXT://127.0.0.1:%d" % self.proc.port] + ["%s://127.0.0.1:%d" % (n, p)
                                                                  for n, p in self.ports.items()])
        for k, v in self.settings.items():
            self.proc.extra += ["--override", "%s=%s" % (k, v)]
        self.data = self.proc.data

    @property
    def bootstrap(self):
        return self.proc.bootstrap

    @property
    def bootstraps(self):
        return dict({"PLAINTEXT": self.bootstrap}, **{n: "127.0.0.1:%d" % p for n, p in self.ports.items()})

    @property
    def pid(self):
        return self.proc.proc.pid if self.proc.proc else None

    def start(self):
        took = self.proc.start()
        if self.transaction_version is not None:
            check_transaction_version(self.bootstrap, self.transaction_version, wait_s=0)
        return took

    def kill9(self):
        self.proc.kill9()

    def stop(self):
        if self.proc.proc and self.proc.proc.poll() is None:
            self.proc.stop()

    def alive(self):
        return self.proc.proc is not None and self.proc.proc.poll() is None

    def cleanup(self):
        shutil.rmtree(self.data, ignore_errors=True)


class Kafka:
    name = "kafka"

    def __init__(self, directory, settings=None, transaction_version=None):
        self.dir = os.path.join(directory, "kafka")
        self.transaction_version = transaction_version
        self.k = RealKafka(dir=self.dir, keep=True, keep_data=True, extra_props=settings)
        self.data = os.path.join(self.dir, "data")

    @property
    def bootstrap(self):
        return self.k.bootstrap

    @property
    def bootstraps(self):
        return self.k.bootstraps

    @property
    def pid(self):
        return self.k.pid

    def start(self):
        fresh = not os.path.exists(os.path.join(self.data, "meta.properties"))
        self.k.start()              # keep_data: a restart reuses the data (no format)
        want = self.transaction_version
        got = finalized_transaction_version(self.bootstrap) if want is not None and fresh else want
        if got != want:
            how = "upgrade" if want > got else "downgrade"
            r = self.k.tool("kafka-features", "--bootstrap-server", self.bootstrap, how, "--feature",
                            "transaction.version=%d" % want, capture_output=True, text=True, timeout=120)
            with open(os.path.join(self.dir, "server.log"), "a") as f:
                f.write("$ kafka-features %s --feature transaction.version=%d (rc %d)\n%s%s"
                        % (how, want, r.returncode, r.stdout, r.stderr))
            if r.returncode != 0:
                raise RuntimeError("kafka-features %s --feature transaction.version=%d: rc %d: %s"
                                   % (how, want, r.returncode, (r.stdout + r.stderr).strip()[-400:]))
        if want is not None:
            check_transaction_version(self.bootstrap, want)

    def kill9(self):
        self.k.proc.send_signal(signal.SIGKILL)
        self.k.proc.wait()
        self.k.proc = self.k.pid = None
        os.remove(os.path.join(self.k.dir, "kafka.pid"))

    def stop(self):
        if self.k.proc:
            self.k.stop()

    def alive(self):
        return self.k.proc is not None and self.k.proc.poll() is None

    def cleanup(self):
        shutil.rmtree(self.data, ignore_errors=True)
