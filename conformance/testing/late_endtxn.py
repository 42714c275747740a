#!/usr/bin/env python3
"""A late EndTxn on doze and on Apache Kafka 4.3.1, compared.

    python3 conformance/testing/late_endtxn.py              # every client; exit 1 where they differ
    python3 conformance/testing/late_endtxn.py --clients aiokafka

The example test (project/test_transactions.py,
test_a_commit_that_arrives_after_the_timeout_is_fenced_and_the_orders_aborted)
holds a client's EndTxn(commit) on doze (faults.add("EndTxn", hold_ms=...))
until its transaction has timed out. What reaches the coordinator, in order:

    InitProducerId -> AddPartitionsToTxn -> Produce (3 records)
    -> the transaction's timeout passes: the coordinator aborts it, epoch 0 -> 1
    -> EndTxn(commit, epoch 0) arrives

Kafka cannot hold a request inside the broker, so the same order is made
twice against a real Kafka 4.3.1 (conformance/kafka/realkafka.py; the first
run fetches its jars with Maven):

1. the real client, through a small proxy that holds the client's EndTxn
   until Kafka's coordinator has aborted the transaction (its
   transaction.timeout.ms 3 s, Kafka's timeout check every 0.1 s); the proxy
   also notes every request's API and version, which are the versions that
   client uses with Kafka 4.3.1 -- and so the transaction protocol (the
   classic one below EndTxn v5; Kafka's finalized transaction.version is
   printed too). The same client, flow and hold run on doze in this process.
2. those requests, at those versions, sent raw (doze_kafka's own codec) to a
   doze (the EndTxn held by a fault, its clock moved) and to Kafka (the EndTxn
   sent once DescribeTransactions says the timeout's abort is complete); the
   answers and the state after are compared field by field.

It prints both outcomes, field by field, and SAME or DIFF for each.
"""
import argparse
import logging
import os
import struct
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))   # conformance/
import needs  # noqa: E402

needs.venv()                                       # the client libraries: runs again in their venv

from lib import WireProxy, free_port, poll  # noqa: E402
import doze_kafka as dk  # noqa: E402
from doze_kafka import ApiKey, Msg  # noqa: E402
from realkafka import RealKafka, run_tool  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "project"))
import orders  # noqa: E402

TIMEOUT_MS = 3000                   # the transaction's timeout, on both brokers
RETRIABLE = {dk.ErrorCode[name] for name in ("COORDINATOR_LOAD_IN_PROGRESS", "COORDINATOR_NOT_AVAILABLE",
                                             "NOT_COORDINATOR", "CONCURRENT_TRANSACTIONS")}
NAMES = {spec.key: spec.name for spec, _ in dk.HANDLERS.values()}
KAFKA_SETTINGS = {"transaction.abort.timed.out.transaction.cleanup.interval.ms": "100"}


def error_name(code):
    return dk.ErrorCode(code).name


# --- a proxy that notes each request and can hold one ---------------------------------

class Proxy:
    """Between the clients and Kafka (Kafka advertises the proxy's port, so every
    connection comes through it; lib.WireProxy): notes each request (client id,
    API, version) and each EndTxn's answer; hold_next(api) holds the next such
    request until release() (its connection's later requests wait behind it, as
    on doze)."""

    def __init__(self, port, target_port):
        self.seen = []                              # [{client_id, api, version, error?}]
        self.hold_api, self.held, self.released = None, threading.Event(), threading.Event()
        self.wire = WireProxy(target_port, port, on_request=self._request, on_answer=self._answer)
        self.bootstrap = self.wire.bootstrap

    def hold_next(self, api):
        self.hold_api = api
        self.held.clear()
        self.released.clear()

    def release(self):
        self.released.set()

    def close(self):
        self.wire.close()

    def _request(self, frame):
        api, version, _, client_id, _ = dk.parse_request_header(frame)
        entry = {"client_id": client_id, "api": NAMES.get(api, api), "version": version}
        self.seen.append(entry)
        if api == self.hold_api:
            self.hold_api = None
            entry["held"] = True
            self.held.set()
            self.released.wait(60)
        return (api, version, entry)

    def _answer(self, asked, frame):
        api, version, entry = asked
        if api == ApiKey.END_TXN:
            entry["error"] = error_name(dk.decode_response(dk.HANDLERS[api][0], version, frame)[1].error_code)

    def versions(self, client_id):
        """{API: version} of the transaction requests a client sent (its first of each)."""
        out = {}
        for e in self.seen:
            if e["client_id"] == client_id and e["api"] in ("FindCoordinator", "InitProducerId",
                                                             "AddPartitionsToTxn", "Produce", "EndTxn"):
                out.setdefault(e["api"], e["version"])
        return out


# --- what a broker holds, read the same way on both -------------------------------------

def call(address, api, version, **fields):
    with dk.Client(address, client_id="late-endtxn-inspect") as c:
        return c.call(api, version, **fields)


def describe(address, tid):
    state = call(address, ApiKey.DESCRIBE_TRANSACTIONS, 0, transactional_ids=[tid]).transaction_states[0]
    return state


def wait_state(address, tid, want, timeout_s=30):
    return poll(lambda: describe(address, tid), lambda state: state.transaction_state == want,
                f"{tid} in {want}", timeout_s, interval_s=0.05)


def log_of(address, topic):
    """The partition as read_uncommitted: [("record" | "COMMIT" | "ABORT", producer epoch)], HW, LSO,
    and how many aborted transactions the fetch lists."""
    r = call(address, ApiKey.FETCH, 12, replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20,
             isolation_level=0, session_id=0, session_epoch=-1, topics=[
                 Msg(topic=topic, partitions=[Msg(partition=0, current_leader_epoch=-1, fetch_offset=0,
                                                  last_fetched_epoch=-1, log_start_offset=-1,
                                                  partition_max_bytes=1 << 20)])],
             forgotten_topics_data=[], rack_id="")
    p = r.responses[0].partitions[0]
    shape = []
    data = bytes(p.records or b"")
    for start, h, end in dk.whole_batches(data):
        if h.attributes & dk.ATTR_CONTROL:
            key = next(dk.decode_records(data[start:end]))[2]
            kind = "COMMIT" if struct.unpack(">hh", key)[1] == dk.CONTROL_COMMIT else "ABORT"
            shape.append((kind, h.producer_epoch))
        else:
            shape += [("record", h.producer_epoch)] * h.records_count
    p_committed = call(address, ApiKey.FETCH, 12, replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20,
                       isolation_level=1, session_id=0, session_epoch=-1, topics=[
                           Msg(topic=topic, partitions=[Msg(partition=0, current_leader_epoch=-1, fetch_offset=0,
                                                            last_fetched_epoch=-1, log_start_offset=-1,
                                                            partition_max_bytes=1 << 20)])],
                       forgotten_topics_data=[], rack_id="").responses[0].partitions[0]
    return {"log": shape, "high_watermark": p.high_watermark, "last_stable_offset": p.last_stable_offset,
            "aborted_transactions (read_committed fetch)": len(p_committed.aborted_transactions or [])}


def state_after(address, tid, topic, producer_id):
    s = describe(address, tid)
    return {"transaction_state": s.transaction_state, "producer_epoch": s.producer_epoch,
            "producer_id unchanged": s.producer_id == producer_id,
            "partitions in the transaction": sorted((t.topic, p) for t in s.topics or () for p in t.partitions),
            **log_of(address, topic)}


def make_topic(address, topic):
    with dk.Client(address, client_id="late-endtxn-inspect") as c:
        c.call(ApiKey.CREATE_TOPICS, 4, topics=[Msg(name=topic, num_partitions=1, replication_factor=1,
                                                    assignments=[], configs=[])],
               timeout_ms=30000, validate_only=False)
        deadline = time.monotonic() + 30
        while True:
            r = c.call(ApiKey.LIST_OFFSETS, 7, replica_id=-1, isolation_level=0, topics=[
                Msg(name=topic, partitions=[Msg(partition_index=0, current_leader_epoch=-1, timestamp=-1)])])
            if r.topics and r.topics[0].partitions[0].error_code == 0 or time.monotonic() > deadline:
                return
            time.sleep(0.1)


# --- 1. the real client, its EndTxn held ----------------------------------------------------

def client_flow(client, bootstrap, tid, topic, hold, wait_aborted, pause_s=0):
    """Begin, three sends, flush, pause; hold() the next EndTxn; commit in a
    thread; wait_aborted(); let the EndTxn go -> what the application saw."""
    key = "transaction.timeout.ms" if client == "confluent-kafka" else "transaction_timeout_ms"
    p = orders.publisher(client, bootstrap, tid, topic, **{key: TIMEOUT_MS})
    p.begin()
    for i in range(3):
        p.send(b"k", b"order-%d" % i)
    p.flush()
    time.sleep(pause_s)
    release = hold()
    outcome = {}

    def commit():
        try:
            p.commit()
            outcome["application"] = "committed"
        except orders.Fenced as e:
            outcome["application"] = f"Fenced: {type(e.cause).__name__}" + (
                f" {e.cause.name()}" if hasattr(e.cause, "name") else "")
        except Exception as e:
            outcome["application"] = f"{type(e).__name__}: {e}"
    t = threading.Thread(target=commit)
    t.start()
    wait_aborted()
    release()
    t.join(60)
    p.close()
    return outcome


def client_on_kafka(kafka, proxy, client):
    tid = topic = f"late-{client}"
    make_topic(kafka.bootstrap, topic)
    proxy.seen.clear()

    def hold():
        proxy.hold_next(ApiKey.END_TXN)
        return proxy.release

    def wait_aborted():
        assert proxy.held.wait(30), "no EndTxn came"
        wait_state(kafka.bootstrap, tid, "CompleteAbort")
    # librdkafka lowers its socket.timeout.ms below transaction.timeout.ms (its
    # CONFIGURATION.md): an EndTxn held longer than that in real time is given
    # up and sent again on a new connection (seen here with a 3.5 s hold). So
    # the application commits late enough that the hold (until Kafka's abort)
    # is shorter; on doze the hold is on the broker's clock.
    outcome = client_flow(client, proxy.bootstrap, tid, topic, hold, wait_aborted,
                          pause_s=TIMEOUT_MS / 1000 - 1.5)
    producer_id = describe(kafka.bootstrap, tid).producer_id
    [endtxn] = [e for e in proxy.seen if e.get("held")]
    return dict(outcome, **endtxn_seen(proxy, endtxn["client_id"]),
                **state_after(kafka.bootstrap, tid, topic, producer_id)), proxy.versions(endtxn["client_id"])


def endtxn_seen(proxy, client_id):
    """How many EndTxn the client sent (1: the held one, not given up and sent
    again) and the answer to the first."""
    sent = [e for e in proxy.seen if e["api"] == "EndTxn" and e["client_id"] == client_id]
    return {"EndTxn requests": len(sent), "EndTxn answer": sent[0].get("error")}


def client_on_doze(client):
    """The same flow on doze, the EndTxn held by doze's own fault; a proxy in
    front of it (doze advertises the proxy's port) notes its answer."""
    proxy_port = free_port()
    with dk.running({"advertised.listeners": f"PLAINTEXT://127.0.0.1:{proxy_port}"}) as broker:
        proxy = Proxy(proxy_port, broker.port)
        tid = topic = f"late-{client}"
        make_topic(broker.bootstrap, topic)

        def hold():
            broker.faults.add("EndTxn", hold_ms=TIMEOUT_MS + 10_000, times=1, transactional_id=tid)
            return lambda: broker.advance(10_000)

        def wait_aborted():
            broker.wait_until(lambda b: b.faults.list() == [])         # the EndTxn is in, and held
            broker.advance(TIMEOUT_MS + 1000)                            # the timeout passes first
            wait_state(broker.bootstrap, tid, "CompleteAbort")
        outcome = client_flow(client, proxy.bootstrap, tid, topic, hold, wait_aborted)
        producer_id = describe(broker.bootstrap, tid).producer_id
        proxy.close()
        client_id = next(e["client_id"] for e in proxy.seen if e["api"] == "EndTxn")
        return dict(outcome, **endtxn_seen(proxy, client_id),
                    **state_after(broker.bootstrap, tid, topic, producer_id)), proxy.versions(client_id)


# --- 2. the same requests, raw, in the same order -------------------------------------------

def raw_flow(address, versions, tid, topic, late_endtxn):
    """The client's requests at its versions; late_endtxn(client, send_endtxn)
    makes the EndTxn arrive after the timeout's abort -> answers and state."""
    out = {}
    with dk.Client(address, client_id="late-endtxn-raw") as c:
        v = versions["FindCoordinator"]
        deadline = time.monotonic() + 30
        while True:
            if v >= 4:
                r = c.call(ApiKey.FIND_COORDINATOR, v, key_type=1, coordinator_keys=[tid]).coordinators[0]
            else:
                r = c.call(ApiKey.FIND_COORDINATOR, v, key=tid, key_type=1)
            if r.error_code == 0 or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        out["FindCoordinator"] = error_name(r.error_code)
        v = versions["InitProducerId"]
        while True:
            r = c.call(ApiKey.INIT_PRODUCER_ID, v, transactional_id=tid, transaction_timeout_ms=TIMEOUT_MS,
                       **({"producer_id": -1, "producer_epoch": -1} if v >= 3 else {}))
            if r.error_code not in RETRIABLE or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        producer_id, epoch = r.producer_id, r.producer_epoch
        out["InitProducerId"] = (error_name(r.error_code), f"epoch {epoch}")
        r = c.call(ApiKey.ADD_PARTITIONS_TO_TXN, versions["AddPartitionsToTxn"], transactional_id=tid,
                   producer_id=producer_id, producer_epoch=epoch, topics=[Msg(name=topic, partitions=[0])])
        out["AddPartitionsToTxn"] = error_name(r.results_by_topic[0].results_by_partition[0].partition_error_code)
        batch = dk.build_batch([(b"k", b"order-%d" % i, ()) for i in range(3)], timestamp_ms=int(time.time() * 1000),
                               producer_id=producer_id, producer_epoch=epoch, base_sequence=0,
                               attributes=dk.ATTR_TRANSACTIONAL)
        r = c.call(ApiKey.PRODUCE, versions["Produce"], transactional_id=tid, acks=-1, timeout_ms=30000,
                   topic_data=[Msg(name=topic, partition_data=[Msg(index=0, records=batch)])])
        p = r.responses[0].partition_responses[0]
        out["Produce"] = (error_name(p.error_code), f"base_offset {p.base_offset}")

        def send_endtxn():
            return c.send(ApiKey.END_TXN, versions["EndTxn"], transactional_id=tid, producer_id=producer_id,
                          producer_epoch=epoch, committed=True)
        correlation_id, v = late_endtxn(send_endtxn)
        got, r = c.receive(ApiKey.END_TXN, v)
        assert got == correlation_id
        out["EndTxn(commit), late"] = error_name(r.error_code)
        out.update(state_after(address, tid, topic, producer_id))
        r = c.call(ApiKey.INIT_PRODUCER_ID, versions["InitProducerId"], transactional_id=tid,
                   transaction_timeout_ms=TIMEOUT_MS,
                   **({"producer_id": -1, "producer_epoch": -1} if versions["InitProducerId"] >= 3 else {}))
        out["a new instance's InitProducerId"] = (error_name(r.error_code), f"epoch {r.producer_epoch}",
                                                  "same producer id" if r.producer_id == producer_id else "new id")
    return out


def raw_on_kafka(kafka, versions, client):
    tid = topic = f"raw-{client}"
    make_topic(kafka.bootstrap, topic)

    def late(send_endtxn):
        wait_state(kafka.bootstrap, tid, "CompleteAbort")       # the timeout's abort, complete
        return send_endtxn()
    return raw_flow(kafka.bootstrap, versions, tid, topic, late)


def raw_on_doze(versions, client):
    with dk.running() as broker:
        tid = topic = f"raw-{client}"
        make_topic(broker.bootstrap, topic)

        def late(send_endtxn):
            broker.faults.add("EndTxn", hold_ms=TIMEOUT_MS + 10_000, times=1, transactional_id=tid)
            sent = send_endtxn()
            broker.wait_until(lambda b: b.faults.list() == [])   # in, and held
            broker.advance(TIMEOUT_MS + 1000)                      # the timeout passes
            wait_state(broker.bootstrap, tid, "CompleteAbort")
            broker.advance(10_000)                                 # the EndTxn is handled
            return sent
        return raw_flow(broker.bootstrap, versions, tid, topic, late)


# --- both, printed and compared ------------------------------------------------------------------

def shown(value):
    """A value in a column: a log as "record@0 x3, ABORT@1", a tuple as words."""
    if isinstance(value, list) and value and isinstance(value[0], tuple):
        runs = []
        for kind, epoch in value:
            if runs and runs[-1][0] == (kind, epoch):
                runs[-1][1] += 1
            else:
                runs.append([(kind, epoch), 1])
        return ", ".join(f"{k}@{e}" + (f" x{n}" if n > 1 else "") for (k, e), n in runs)
    if isinstance(value, tuple):
        return ", ".join(map(str, value))
    return str(value)


def compare(title, doze, kafka):
    print(f"\n  {title}")
    print(f"    {'':44} {'doze':34} {'Kafka 4.3.1':34}")
    same = True
    for key in list(dict.fromkeys(list(doze) + list(kafka))):
        a, b = doze.get(key, "-"), kafka.get(key, "-")
        same &= a == b
        print(f"    {key:44} {shown(a):34} {shown(b):34} {'SAME' if a == b else 'DIFF'}")
    return same


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", nargs="+", default=list(orders.CLIENTS), choices=orders.CLIENTS)
    args = parser.parse_args()
    logging.basicConfig(level=logging.CRITICAL)
    proxy_port = free_port()
    agree = True
    with RealKafka(extra_props=dict(KAFKA_SETTINGS, **{
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{proxy_port}"})) as kafka:
        proxy = Proxy(proxy_port, kafka.port)
        features = run_tool("kafka-features", "--bootstrap-server", kafka.bootstrap, "describe",
                            capture_output=True, text=True).stdout
        level = [line for line in features.splitlines() if "transaction.version" in line]
        print(f"Kafka 4.3.1 (started in {kafka.startup_seconds:.1f} s): "
              f"{' '.join(level[0].split()) if level else 'transaction.version: ?'}")
        for client in args.clients:
            on_kafka, versions = client_on_kafka(kafka, proxy, client)
            on_doze, doze_versions = client_on_doze(client)
            print(f"\n{client}: its transaction requests to Kafka 4.3.1: "
                  + ", ".join(f"{api} v{v}" for api, v in versions.items())
                  + "\n" + " " * len(client) + "  and to doze:                       "
                  + ", ".join(f"{api} v{v}" for api, v in doze_versions.items()))
            agree &= compare(f"{client}, its EndTxn held until the timeout's abort", on_doze, on_kafka)
            served = {api: min(v, dk.api_named(api).max_version) for api, v in versions.items()}
            if served != versions:
                print(f"    (raw on doze at the versions it serves: {served})")
            agree &= compare(f"{client}'s requests to Kafka, raw, in the same order",
                             raw_on_doze(served, client), raw_on_kafka(kafka, versions, client))
    print(f"\nlate EndTxn: doze and Kafka 4.3.1 {'AGREE' if agree else 'DIFFER'}")
    return 0 if agree else 1


if __name__ == "__main__":
    sys.exit(main())
