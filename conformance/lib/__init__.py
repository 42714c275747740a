"""What the conformance scripts share. Standard library only.

A script in a directory below conformance/ starts with this one line, with one ".." for
each level it sits below conformance/:

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))   # conformance/

A script in conformance/ itself needs no line: its own directory is sys.path[0], or
whatever imported it put conformance/ there. Then it imports from lib:

    from lib import free_port, wait_port, recv_exactly, Closed, Child, run_bounded, rss_mib
    from lib import WireProxy, poll, GaveUp
    from lib import CONFORMANCE, ROOT, DOZE

Importing lib also puts the repository root (doze_kafka) and conformance/kafka
(realkafka) on sys.path, so that `import doze_kafka` and `import realkafka` work after
it. A script's neighbours in its own directory import by name as they always did. A
script of another directory imports as a package from conformance/ (`from clients import
verify`, `from console.check import Browser`).
"""
import os
import sys

CONFORMANCE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROOT = os.path.dirname(CONFORMANCE)
DOZE = os.path.join(ROOT, "doze_kafka.py")

for _p in (ROOT, os.path.join(CONFORMANCE, "kafka")):
    if _p not in sys.path:
        sys.path.append(_p)

from lib.net import Closed, free_port, recv_exactly, wait_port  # noqa: E402
from lib.proc import Child, rss_mib, run_bounded  # noqa: E402
from lib.wait import GaveUp, poll  # noqa: E402
from lib.wire import WireProxy  # noqa: E402

__all__ = ["CONFORMANCE", "ROOT", "DOZE", "Closed", "free_port", "recv_exactly", "wait_port", "Child",
           "run_bounded", "rss_mib", "GaveUp", "poll", "WireProxy"]
