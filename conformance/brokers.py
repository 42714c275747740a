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
"""
import os
import shutil
import signal

from lib import free_port              # (and puts conformance/kafka on sys.path: realkafka)
from dozeproc import DozeProcess
from realkafka import RealKafka, extra_listener_names

COMMON = {"group.initial.rebalance.delay.ms": "0"}


class Doze:
    name = "doze"

    def __init__(self, directory, settings=None):
        self.dir = directory
        self.settings = dict(COMMON, **(settings or {}))
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
        return self.proc.start()

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

    def __init__(self, directory, settings=None):
        self.dir = os.path.join(directory, "kafka")
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
        self.k.start()              # keep_data: a restart reuses the data (no format)

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
