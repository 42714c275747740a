"""Child processes that can be killed -9, commands run with a time limit, and a process's RSS."""
import os
import signal
import subprocess
import time


class Child:
    """A child process, by default in a process group of its own, so that kill9()
    and stop() also reach what it starts in turn (a JVM's, npm's, a shell's).

        c = Child(cmd, log=path)       # stdout and stderr appended to path, after "$ cmd"
        c.alive(); c.pid; c.proc       # c.proc: the subprocess.Popen
        c.kill9()                      # SIGKILL to the group, and wait
        c.stop(grace=30)               # SIGTERM, up to grace s, then kill9(); -> True if it stopped

    log: the file the child's output goes to (opened for appending, closed here once
    the child has it); without it, stdout and stderr are as popen gives them (inherited
    by default). show_command=False leaves out the "$ cmd" line. group=False keeps the
    child in this process group (a Ctrl-C in the terminal reaches it too); signals then
    go to it alone. stdin is /dev/null unless popen gives one. Other popen keywords
    (env, cwd, text, ...) go to subprocess.Popen."""

    def __init__(self, cmd, log=None, show_command=True, group=True, **popen):
        self.group = group
        popen.setdefault("stdin", subprocess.DEVNULL)
        f = None
        if log is not None:
            f = open(log, "a")
            if show_command:
                f.write("$ %s\n" % " ".join(cmd))
                f.flush()
            popen.setdefault("stdout", f)
            popen.setdefault("stderr", subprocess.STDOUT)
        try:
            self.proc = subprocess.Popen(cmd, start_new_session=group, **popen)
        finally:
            if f is not None:
                f.close()

    @property
    def pid(self):
        return self.proc.pid

    def alive(self):
        return self.proc.poll() is None

    def signal(self, sig):
        """sig to the child's group (to the child alone with group=False); nothing if gone."""
        if not self.group:
            self.proc.send_signal(sig)                # nothing once it has been waited for
            return
        try:
            os.killpg(self.proc.pid, sig)
        except ProcessLookupError:
            pass

    def kill9(self):
        self.signal(signal.SIGKILL)
        self.proc.wait()

    def stop(self, grace=30):
        """SIGTERM; wait up to grace seconds, then kill9(). -> True if it stopped by itself."""
        if self.proc.poll() is not None:
            return True
        self.signal(signal.SIGTERM)
        try:
            self.proc.wait(grace)
            return True
        except subprocess.TimeoutExpired:
            self.kill9()
            return False


def run_bounded(cmd, timeout_s, grace=10, **popen):
    """Run cmd (a Child: its own process group) and wait; past timeout_s, SIGTERM to
    the group, and SIGKILL after grace seconds more. Anything raised while waiting
    (a Ctrl-C) kills the group first. -> (returncode, or None when the time ran out;
    seconds)."""
    t0 = time.monotonic()
    child = Child(cmd, **popen)
    try:
        rc = child.proc.wait(timeout_s)
    except subprocess.TimeoutExpired:
        child.stop(grace)
        rc = None
    except BaseException:
        child.kill9()
        raise
    return rc, time.monotonic() - t0


def rss_mib(pid):
    """A process's resident set, MiB (nan if it cannot be read: gone, or no /proc)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except (OSError, TypeError):
        pass
    return float("nan")
