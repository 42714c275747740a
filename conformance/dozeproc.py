"""doze-kafka as a child process, for the conformance, crash and bench scripts.

    from dozeproc import DozeProcess
    broker = DozeProcess(tmpdir, "--override", "group.initial.rebalance.delay.ms=0")
    broker.start(); broker.kill9(); broker.start(); broker.stop()

The data directory is tmpdir/data and the log tmpdir/broker.log (appended
across restarts); the port stays the same across restarts. DOZE, free_port and
wait_port are lib's, named here too for the scripts that import them from here.
"""
import os
import sys

from lib import DOZE, Child, free_port, wait_port

__all__ = ["DOZE", "DozeProcess", "free_port", "wait_port"]


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
        self.child = None

    @property
    def proc(self):
        """The running (or last) broker's subprocess.Popen, or None before start()."""
        return self.child.proc if self.child else None

    @property
    def bootstrap(self):
        return f"127.0.0.1:{self.port}"

    def start(self):
        """Start the broker; -> seconds until its port answered."""
        # group=False: a Ctrl-C in the terminal stops the broker with the script
        self.child = Child([sys.executable, DOZE, "--data-dir", self.data, "--port", str(self.port)] + self.extra,
                           log=self.log_path, show_command=False, group=False, stdin=None)
        return wait_port(self.port)

    def kill9(self):
        self.child.kill9()

    def stop(self):
        """SIGTERM and wait (subprocess.TimeoutExpired after 20 s)."""
        self.proc.terminate()
        self.proc.wait(20)

    def log_lines(self, text):
        with open(self.log_path) as f:
            return [line.rstrip() for line in f if text in line]
