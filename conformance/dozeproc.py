"""doze-kafka as a child process, for the conformance, crash and bench scripts.

    from dozeproc import DozeProcess
    broker = DozeProcess(tmpdir, "--override", "group.initial.rebalance.delay.ms=0")
    broker.start(); broker.kill9(); broker.start(); broker.stop()

The data directory is tmpdir/data and the log tmpdir/broker.log (appended
across restarts); the port stays the same across restarts.
"""
import os
import signal
import socket
import subprocess
import sys
import time

DOZE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "doze_kafka.py")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, limit_s=30):
    """Wait until something accepts on 127.0.0.1:port; -> seconds waited."""
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < limit_s:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return time.perf_counter() - t0
        except OSError:
            time.sleep(0.005)
    raise RuntimeError(f"nothing listens on port {port} after {limit_s} s")


class DozeProcess:
    def __init__(self, tmp, *extra_args):
        self.tmp = tmp
        self.data = os.path.join(tmp, "data")
        self.log_path = os.path.join(tmp, "broker.log")
        self.port = free_port()
        # The command line's console (127.0.0.1:8092) stays off: scripts start
        # many brokers at once; one that wants it overrides this after.
        self.extra = ["--override", "doze.console.listener="] + list(extra_args)
        if os.environ.get("DOZE_LOG_LEVEL"):             # e.g. DEBUG: every request and answer
            self.extra += ["--log-level", os.environ["DOZE_LOG_LEVEL"]]
        self.proc = None

    @property
    def bootstrap(self):
        return f"127.0.0.1:{self.port}"

    def start(self):
        """Start the broker; -> seconds until its port answered."""
        logf = open(self.log_path, "a")
        self.proc = subprocess.Popen([sys.executable, DOZE, "--data-dir", self.data, "--port",
                                      str(self.port)] + self.extra, stdout=logf, stderr=logf)
        logf.close()
        return wait_port(self.port)

    def kill9(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def stop(self):
        self.proc.terminate()
        self.proc.wait(20)

    def log_lines(self, text):
        with open(self.log_path) as f:
            return [line.rstrip() for line in f if text in line]
