#!/usr/bin/env python3
"""The Python venv of the conformance scripts that import client libraries.

    sys.path.insert(0, CONFORMANCE_DIR); import needs
    needs.venv()                  # first in main(): runs the script again in the venv

    python3 conformance/needs.py  # makes sure the venv exists; prints its python

The venv is ${DOZE_KAFKA_CACHE:-~/.cache/doze-kafka}/eos/venv, made with the
python3 that runs this, from conformance/clients/eos/requirements.txt (every
Python client library the checks use, pinned), and made again when that file
changes. A script already running in it goes on; any other starts again in it
with the same arguments, so that each script works on a machine where nothing
was installed.
"""
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REQUIREMENTS = os.path.join(HERE, "clients", "eos", "requirements.txt")
VENV = os.path.join(os.environ.get("DOZE_KAFKA_CACHE") or os.path.expanduser("~/.cache/doze-kafka"),
                    "eos", "venv")
PYTHON = os.path.join(VENV, "bin", "python")
STAMP = os.path.join(VENV, ".requirements.txt")


def _current():
    try:
        with open(REQUIREMENTS, "rb") as a, open(STAMP, "rb") as b:
            return a.read() == b.read()
    except OSError:
        return False


def ensure():
    """Make (or remake) the venv if it is missing or older than the requirements -> its python."""
    if not (os.access(PYTHON, os.X_OK) and _current()):
        print(f"setting up {VENV}", file=sys.stderr, flush=True)
        os.makedirs(os.path.dirname(VENV), exist_ok=True)
        subprocess.check_call([sys.executable, "-m", "venv", VENV])
        subprocess.check_call([PYTHON, "-m", "pip", "install", "-q", "--disable-pip-version-check",
                               "-r", REQUIREMENTS], stdout=sys.stderr)
        shutil.copy(REQUIREMENTS, STAMP)
    return PYTHON


def venv():
    """Run the calling script in the venv (from the top, same arguments) unless it is there."""
    if os.path.realpath(sys.prefix) == os.path.realpath(VENV):
        return
    python = ensure()
    os.execv(python, [python, os.path.abspath(sys.argv[0])] + sys.argv[1:])


if __name__ == "__main__":
    print(ensure())
