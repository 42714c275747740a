#!/usr/bin/env python3
"""What doze costs a test suite: start, reset, and the fixtures' per-test overhead.

    python3 conformance/testing/figures.py                 # 100 tests a variant, 20 starts and resets
    python3 conformance/testing/figures.py --tests 30 --rounds 2

- start: running() until the broker answers an ApiVersions (then closed), the
  median of --starts;
- reset: Embedded.reset() of a broker holding a topic, a committed transaction
  and a group's offset, the median of --starts;
- per test: a vendored project (doze_kafka.py copied, conftest.py with
  `pytest_plugins = ["doze_kafka"]`) runs --tests tests three ways, each test
  producing a transaction of 3 records with confluent-kafka and reading it
  back (read_committed): on `doze_broker` (the session's broker, reset before
  each test), on `fresh_doze_broker` (a broker of its own), and "bare" (the
  session's broker as it is: no fixture work, every test its own names).
  A test's time is pytest's setup + call + teardown; the figure is the median
  over the tests, and the overhead is a variant's median minus the bare one's.
  The two fixtures run again with their brokers' internal topics of one
  partition (a conftest.py overriding them; see TUNED).
  --rounds runs the three variants that many times, alternating.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))   # conformance/
import needs  # noqa: E402

needs.venv()

from lib import DOZE  # noqa: E402
import doze_kafka as dk  # noqa: E402

CONFTEST = '''pytest_plugins = ["doze_kafka"]

import json, os

TIMES = {}


def pytest_runtest_logreport(report):
    TIMES.setdefault(report.nodeid, {})[report.when] = report.duration


def pytest_sessionfinish(session):
    with open(os.environ["FIGURES_OUT"], "w") as f:
        json.dump(TIMES, f)
'''

TESTS = '''import pytest
from confluent_kafka import Consumer, Producer, TopicPartition


def produce_and_read_back(bootstrap, name):
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": name})
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(3):
        producer.produce(name, value=b"v%d" % i)
    producer.commit_transaction(30)
    producer.close()
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": name, "isolation.level": "read_committed",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(name, 0, 0)])
    got = []
    while len(got) < 3:
        msg = consumer.poll(30)
        assert msg is not None and msg.error() is None
        got.append(msg.value())
    consumer.close()
    assert got == [b"v0", b"v1", b"v2"]


@pytest.mark.parametrize("i", range(COUNT))
def test_FIXTURE(FIXTURE, i):
    produce_and_read_back(FIXTURE.bootstrap, "t%d" % i)
'''

# The same fixtures, their brokers' internal topics of one partition each (a
# project's conftest.py overriding doze's fixtures of the same names): a fresh
# broker's first FindCoordinator for a group or a transactional id then makes
# one partition, not 50.
TUNED = '''import doze_kafka
import pytest

ONE_PARTITION = {"offsets.topic.num.partitions": 1, "transaction.state.log.num.partitions": 1}


@pytest.fixture(scope="session")
def doze_session_broker():
    with doze_kafka.running(ONE_PARTITION) as broker:
        yield broker


@pytest.fixture
def fresh_doze_broker():
    with doze_kafka.running(ONE_PARTITION) as broker:
        yield broker
'''

# variant -> (fixture, directory)
VARIANTS = {"bare": ("doze_session_broker", "."), "doze_broker": ("doze_broker", "."),
            "fresh_doze_broker": ("fresh_doze_broker", "."),
            "doze_broker, 1-partition internal topics": ("doze_broker", "tuned"),
            "fresh_doze_broker, 1-partition internal topics": ("fresh_doze_broker", "tuned")}


def median_ms(values):
    return statistics.median(values) * 1000


def start_and_reset(count):
    starts, resets = [], []
    for _ in range(count):
        t0 = time.perf_counter()
        broker = dk.running()
        with dk.Client(broker.bootstrap) as c:
            c.call(dk.ApiKey.API_VERSIONS, 3, client_software_name="figures", client_software_version="1")
        starts.append(time.perf_counter() - t0)
        broker.close()
    with dk.running() as broker:
        for _ in range(count):
            with dk.Client(broker.bootstrap) as c:
                c.call(dk.ApiKey.CREATE_TOPICS, 7, topics=[dk.Msg(name="t", num_partitions=3, replication_factor=-1,
                                                                  assignments=[], configs=[])],
                       timeout_ms=5000, validate_only=False)
                r = c.call(dk.ApiKey.INIT_PRODUCER_ID, 4, transactional_id="tx", transaction_timeout_ms=60000,
                           producer_id=-1, producer_epoch=-1)
                c.call(dk.ApiKey.ADD_PARTITIONS_TO_TXN, 3, transactional_id="tx", producer_id=r.producer_id,
                       producer_epoch=r.producer_epoch, topics=[dk.Msg(name="t", partitions=[0])])
                c.call(dk.ApiKey.PRODUCE, 9, transactional_id="tx", acks=-1, timeout_ms=5000, topic_data=[
                    dk.Msg(name="t", partition_data=[dk.Msg(index=0, records=dk.build_batch(
                        [(None, b"x", ())], producer_id=r.producer_id, producer_epoch=r.producer_epoch,
                        base_sequence=0, attributes=dk.ATTR_TRANSACTIONAL))])])
                c.call(dk.ApiKey.END_TXN, 3, transactional_id="tx", producer_id=r.producer_id,
                       producer_epoch=r.producer_epoch, committed=True)
                c.call(dk.ApiKey.OFFSET_COMMIT, 8, group_id="g", generation_id_or_member_epoch=-1, member_id="",
                       group_instance_id=None, topics=[dk.Msg(name="t", partitions=[dk.Msg(
                           partition_index=0, committed_offset=1, committed_leader_epoch=-1,
                           committed_metadata="")])])
            assert broker.committed("g") == {("t", 0): 1}
            t0 = time.perf_counter()
            broker.reset()
            resets.append(time.perf_counter() - t0)
    return starts, resets


def per_test(count, rounds):
    python = sys.executable
    where = tempfile.mkdtemp(prefix="doze-figures-")
    try:
        shutil.copy(DOZE, where)
        with open(os.path.join(where, "conftest.py"), "w") as f:
            f.write(CONFTEST)
        os.mkdir(os.path.join(where, "tuned"))
        with open(os.path.join(where, "tuned", "conftest.py"), "w") as f:
            f.write(TUNED)
        files = {}
        for n, (variant, (fixture, directory)) in enumerate(VARIANTS.items()):
            files[variant] = os.path.join(directory, f"test_{n}_{fixture}.py")
            with open(os.path.join(where, files[variant]), "w") as f:
                f.write(TESTS.replace("COUNT", str(count)).replace("test_FIXTURE", f"test_{n}_{fixture}")
                        .replace("FIXTURE", fixture))
        times = {v: [] for v in VARIANTS}
        walls = {v: [] for v in VARIANTS}
        for _ in range(rounds):
            for variant in VARIANTS:
                out = os.path.join(where, "times.json")
                t0 = time.perf_counter()
                run = subprocess.run([python, "-m", "pytest", "-q", "-p", "no:cacheprovider", files[variant]],
                                     cwd=where, capture_output=True, text=True, timeout=900,
                                     env=dict(os.environ, FIGURES_OUT=out))
                walls[variant].append(time.perf_counter() - t0)
                if run.returncode != 0:
                    sys.exit(f"{variant}: pytest failed\n{run.stdout[-3000:]}{run.stderr[-2000:]}")
                with open(out) as f:
                    times[variant] += [t for t in json.load(f).values()]
        return times, walls
    finally:
        shutil.rmtree(where, ignore_errors=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tests", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--starts", type=int, default=20)
    args = parser.parse_args()
    dk.logging.basicConfig(level=dk.logging.WARNING)
    starts, resets = start_and_reset(args.starts)
    print(f"start (running() until it answers): median {median_ms(starts):.1f} ms "
          f"(min {min(starts) * 1000:.1f}, max {max(starts) * 1000:.1f}) over {len(starts)}")
    print(f"reset() of a broker holding a topic, a transaction, a group: median {median_ms(resets):.1f} ms "
          f"(min {min(resets) * 1000:.1f}, max {max(resets) * 1000:.1f}) over {len(resets)}")
    times, walls = per_test(args.tests, args.rounds)
    bare = statistics.median([sum(t.values()) for t in times["bare"]])
    print(f"\nper test ({args.tests} tests x {args.rounds} round(s) a variant; each a confluent-kafka transaction "
          f"of 3 records, read back), medians in ms:")
    print(f"  {'variant':48} {'setup':>7} {'call':>7} {'teardown':>9} {'total':>7} {'overhead':>9} "
          f"{'pytest run':>11}")
    for variant, rows in times.items():
        parts = {w: median_ms([r.get(w, 0) for r in rows]) for w in ("setup", "call", "teardown")}
        total = median_ms([sum(r.values()) for r in rows])
        print(f"  {variant:48} {parts['setup']:7.1f} {parts['call']:7.1f} {parts['teardown']:9.1f} {total:7.1f} "
              f"{total - bare * 1000:+9.1f} {statistics.median(walls[variant]):10.1f}s")


if __name__ == "__main__":
    main()
