"""Shared helpers for the peer-suite runners (franz_go.py, librdkafka.py).

A peer suite is another project's own integration tests, run against doze.
The suites' sources live outside the repo, under the cache directory
(`${DOZE_KAFKA_CACHE:-~/.cache/doze-kafka}/peers/`); nothing of theirs is
committed here.
"""
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))   # conformance/
from dozeproc import DozeProcess  # noqa: E402

# The settings conformance/kafka/realkafka.py gives the real Kafka beyond its
# defaults that matter on one node; doze gets the same, so the two brokers
# answer the suites under the same configuration.
COMMON_OVERRIDES = {"group.initial.rebalance.delay.ms": "0"}


def cache_root():
    root = os.environ.get("DOZE_KAFKA_CACHE") or os.path.expanduser("~/.cache/doze-kafka")
    return os.path.join(root, "peers")


def out_dir(arg, prefix):
    if arg:
        os.makedirs(arg, exist_ok=True)
        return os.path.abspath(arg)
    return tempfile.mkdtemp(prefix=prefix)


class Broker:
    """doze in a temp dir (or an outside broker when bootstrap is given)."""

    def __init__(self, bootstrap=None, overrides=None, log_level=None, keep_dir=None, extra_args=()):
        self.outside = bootstrap
        self.extra_args = list(extra_args)
        self.overrides = dict(COMMON_OVERRIDES, **(overrides or {}))
        self.log_level = log_level
        self.tmp = keep_dir or tempfile.mkdtemp(prefix="doze-peers-")
        os.makedirs(self.tmp, exist_ok=True)
        self.proc = None

    @property
    def bootstrap(self):
        return self.outside or self.proc.bootstrap

    @property
    def log_path(self):
        return None if self.outside else self.proc.log_path

    def __enter__(self):
        if self.outside:
            return self
        args = list(self.extra_args)
        for k, v in self.overrides.items():
            args += ["--override", f"{k}={v}"]
        if self.log_level:
            args += ["--log-level", self.log_level]
        self.proc = DozeProcess(self.tmp, *args)
        waited = self.proc.start()
        print(f"doze on {self.proc.bootstrap} (data {self.proc.data}, log {self.proc.log_path}, "
              f"up in {waited:.2f} s)", flush=True)
        return self

    def alive(self):
        return self.outside or self.proc.proc.poll() is None

    def restart(self):
        """Start doze again on the same port and data (after it died)."""
        if not self.outside:
            self.proc.start()

    def __exit__(self, *exc):
        if self.outside or self.proc is None or self.proc.proc is None:
            return
        if self.proc.proc.poll() is None:
            try:
                self.proc.stop()
            except subprocess.TimeoutExpired:
                self.proc.kill9()


def write_results(out, name, rows, meta):
    """rows: dicts with at least test, result, seconds. Writes NAME.json and NAME.md."""
    with open(os.path.join(out, name + ".json"), "w") as f:
        json.dump({"meta": meta, "tests": rows}, f, indent=1)
    cols = [c for c in ("test", "result", "seconds", "kind", "note") if any(c in r for r in rows)]
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for r in rows:
        cells = []
        for c in cols:
            v = r.get(c, "")
            cells.append(f"{v:.2f}" if isinstance(v, float) else str(v).replace("|", "/"))
        lines.append("| " + " | ".join(cells) + " |")
    counts = {}
    for r in rows:
        counts[r["result"]] = counts.get(r["result"], 0) + 1
    summary = ", ".join(f"{n} {k}" for k, n in sorted(counts.items()))
    with open(os.path.join(out, name + ".md"), "w") as f:
        f.write(f"{name}: {summary}\n\n" + "\n".join(lines) + "\n")
    return summary
