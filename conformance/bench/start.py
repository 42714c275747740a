#!/usr/bin/env python3
"""doze's start and idle memory, with and without Python's bytecode cache.

    python3 conformance/bench/start.py [--starts 8] [--idle-s 12]

Python compiles doze_kafka.py (17,000 lines) at a start unless it may keep
the compiled module in __pycache__/ beside it, which Python does by default;
this machine sets PYTHONDONTWRITEBYTECODE=1, so every start here compiles. Two
cache modes, each for `python3 doze_kafka.py` (script: Python compiles a script
at every start, whatever the cache; doze then runs itself again as a module,
which the cache serves) and `python3 -m doze_kafka` (-m), alternated start by
start, each on a fresh data directory:
  no-cache  PYTHONDONTWRITEBYTECODE=1 and no __pycache__ beside doze_kafka.py
  cache     Python's default: the first (untimed) start writes the .pyc, the
            timed ones read it
doze_kafka.py is copied to a temporary directory first (its __pycache__ goes
there, not into the project). A start is timed from the process's creation to
the first ApiVersions answered (as compare.py's "start to first answered
request"), RSS read 1 s and --idle-s after that. Also shown: a bare `python3
-c pass`, and `python3 -c "import sqlite3, ssl, selectors, ..."` of the standard
modules doze imports at start (the floor under any pure-Python broker), each
in both modes. Prints each mode's medians and min-max.
"""
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))   # conformance/
from compare import api_versions_answered, rss_mib  # noqa: E402
from lib import DOZE, free_port  # noqa: E402


def env_for(mode):
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    if mode == "no-cache":
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def one_start(src_dir, mode, idle_s):
    """mode: "<how> <cache>", how "script" (python3 doze_kafka.py) or "-m" (python3 -m
    doze_kafka), cache "no-cache" or "cache" -> (seconds to the first answer, RSS MiB
    at 1 s, RSS MiB at idle_s)."""
    how, cache = mode.split()
    if cache == "no-cache":
        shutil.rmtree(os.path.join(src_dir, "__pycache__"), ignore_errors=True)
    data, port = tempfile.mkdtemp(prefix="doze-start-"), free_port()
    env = dict(env_for(cache), PYTHONPATH=src_dir)
    program = [os.path.join(src_dir, "doze_kafka.py")] if how == "script" else ["-m", "doze_kafka"]
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable] + program + ["--data-dir", data, "--port", str(port),
                                                          "--override", "doze.console.listener="],
                            env=env, cwd=src_dir, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        start = time.perf_counter() - t0 + api_versions_answered("127.0.0.1:%d" % port)
        time.sleep(1.0)
        rss1 = rss_mib(proc.pid)
        time.sleep(max(0.0, idle_s - 1.0))
        return start, rss1, rss_mib(proc.pid)
    finally:
        proc.terminate()
        proc.wait(30)
        shutil.rmtree(data, ignore_errors=True)


def floor(mode, code):
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], env=env_for(mode), check=True)
    return time.perf_counter() - t0


def show(label, values, unit):
    print("  %-44s %8.3f %s (%.3f-%.3f)" % (label, statistics.median(values), unit, min(values), max(values)))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--starts", type=int, default=8)
    ap.add_argument("--idle-s", type=float, default=12.0)
    args = ap.parse_args()
    src = tempfile.mkdtemp(prefix="doze-start-src-")
    shutil.copy(DOZE, src)
    modes = ("script no-cache", "script cache", "-m no-cache", "-m cache")
    one_start(src, "script cache", 1.0)                 # writes the .pyc the cache modes read
    assert os.path.isdir(os.path.join(src, "__pycache__")), "no bytecode cache was written"
    got = {m: [] for m in modes}
    imports = "import sqlite3, ssl, selectors, socket, hashlib, hmac, json, logging, zlib, gzip, struct, argparse"
    bare = {m: [] for m in modes}
    stdlib = {m: [] for m in modes}
    for i in range(args.starts):
        for m in (modes if i % 2 == 0 else modes[::-1]):                 # alternated
            got[m].append(one_start(src, m, args.idle_s))
            bare[m].append(floor(m.split()[1], "pass"))
            stdlib[m].append(floor(m.split()[1], imports))
            print("start %d %-16s %.3f s, RSS %.1f MiB at 1 s, %.1f MiB at %.0f s" % (
                i + 1, m, got[m][-1][0], got[m][-1][1], got[m][-1][2], args.idle_s), flush=True)
    print("\nPython %s, %d starts each, alternated; this machine's PYTHONDONTWRITEBYTECODE=%s" % (
        sys.version.split()[0], args.starts, os.environ.get("PYTHONDONTWRITEBYTECODE", "(unset)")))
    for m in modes:
        print(m)
        show("start to first answered request", [g[0] for g in got[m]], "s")
        show("idle RSS at 1 s", [g[1] for g in got[m]], "MiB")
        show("idle RSS at %.0f s" % args.idle_s, [g[2] for g in got[m]], "MiB")
        show("python3 -c pass", bare[m], "s")
        show("python3 -c 'import <doze's standard modules>'", stdlib[m], "s")
    shutil.rmtree(src, ignore_errors=True)


if __name__ == "__main__":
    main()
