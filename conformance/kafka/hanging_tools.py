#!/usr/bin/env python3
"""`kafka-transactions find-hanging` and `abort` on the wire, against Apache Kafka 4.3.1.

    python3 conformance/kafka/hanging_tools.py            # prints what each tool sent and got
    python3 conformance/kafka/hanging_tools.py --all      # every request's fields, Metadata's too
    python3 conformance/kafka/hanging_tools.py --doze     # the same tools against doze (doze_kafka.py here)

Starts a real Kafka 4.3.1 (realkafka.py) with transaction.partition.verification.enable
=false, advertising a small proxy's port so that every connection of the tools goes
through it. A hanging transaction is made with raw requests (doze_kafka's codec, straight
to Kafka): a transactional batch to partition 0 that was never added to the transaction
(what KIP-890 part 1's verification refuses), partition 1 added and written, the
transaction committed: partition 1 gets its marker, partition 0 keeps an open
transaction. Then Kafka's own tool runs through the proxy:

    kafka-transactions find-hanging --broker-id 1 --max-transaction-timeout 0
    kafka-transactions describe-producers --topic T --partition 0
    kafka-transactions abort --topic T --partition 0 --start-offset 0
    kafka-transactions find-hanging --broker-id 1 --max-transaction-timeout 0

and for each the proxy prints every request (API and version) and, for the transaction
APIs, the request's fields and the answer's (decoded with doze's schemas, by
recorder's decoder; an API or version doze's codec lacks is shown undecoded, with
the versions it has: against Kafka 4.3.1 the tool's FindCoordinator v6 and
ListTransactions v2). The tool's output and exit code follow; the script exits 1 if the tools did not find and
abort the hanging transaction. Standard library only; about a minute.
"""
import argparse
import json
import os
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))   # conformance/
from lib import GaveUp, WireProxy, free_port, poll  # noqa: E402
import recorder  # noqa: E402
import doze_kafka as dk  # noqa: E402
from doze_kafka import ApiKey, Msg  # noqa: E402
from realkafka import RealKafka, run_tool  # noqa: E402

TOPIC, TID = "hang-t", "hang-tid"
SETTINGS = {"transaction.partition.verification.enable": "false"}
SHOWN = {ApiKey.DESCRIBE_PRODUCERS, ApiKey.LIST_TRANSACTIONS, ApiKey.DESCRIBE_TRANSACTIONS,
         ApiKey.WRITE_TXN_MARKERS, ApiKey.FIND_COORDINATOR}
NAMES = {k.value: k.name for k in ApiKey}


def spec_at(api, version):
    """doze's schema of api, if its codec has that version (recorder.api_spec: KeyError
    for an API it lacks)."""
    spec = recorder.api_spec(api)
    if not spec.min_version <= version <= spec.max_version:
        raise ValueError(f"doze's codec has {spec.name} v{spec.min_version}-v{spec.max_version}")
    return spec


class Proxy:
    """Between the tools and Kafka (lib.WireProxy): notes each request and its answer,
    decoded with doze's schemas (recorder's decoder: JSON values, unknown tags kept)."""

    def __init__(self, port, target_port):
        self.seen = []                       # [{api, key, version, client_id, request, response}] in request order
        self.lock = threading.Lock()
        self.wire = WireProxy(target_port, port, on_request=self._request, on_answer=self._answer)

    def close(self):
        self.wire.close()

    def take(self):
        with self.lock:
            out, self.seen = self.seen, []
        return out

    def _request(self, frame):
        api, version, _, client_id, r = dk.parse_request_header(frame)
        entry = {"api": NAMES.get(api, str(api)), "key": api, "version": version, "client_id": client_id}
        try:
            spec = spec_at(api, version)
            if spec.flexible(version):
                dk.skip_tagged_fields(r)                 # request header v2's tags
            entry["request"] = recorder.decode_struct(r, dk.plan_for(spec, version, "request"),
                                                      spec.flexible(version))
        except Exception as e:                           # noqa: BLE001 -- an API or version doze's codec lacks
            entry["request"] = {"undecoded": f"{type(e).__name__}: {e}"}
        with self.lock:
            self.seen.append(entry)
        return entry

    def _answer(self, entry, frame):
        try:
            spec = spec_at(entry["key"], entry["version"])
            _, body = recorder.split_response(spec, entry["version"], frame)
            entry["response"] = recorder.decode_response(spec, entry["version"], body)
        except Exception as e:                           # noqa: BLE001
            entry["response"] = {"undecoded": f"{type(e).__name__}: {e}"}


def make_hanging(address):
    """The hanging transaction on partition 0 -> what each step answered."""
    notes = []
    with dk.Client(address, client_id="hanging-setup", timeout=30) as c:
        r = c.call(ApiKey.CREATE_TOPICS, 4, topics=[Msg(name=TOPIC, num_partitions=2, replication_factor=1,
                                                        assignments=[], configs=[])],
                   timeout_ms=30000, validate_only=False)
        notes.append(f"CreateTopics {TOPIC} (2 partitions): {r.topics[0].error_code}")

        def lso():
            r = c.call(ApiKey.LIST_OFFSETS, 9, replica_id=-1, isolation_level=1, topics=[Msg(
                name=TOPIC, partitions=[Msg(partition_index=p, current_leader_epoch=-1, timestamp=-1)
                                        for p in (0, 1)])])
            return {p.partition_index: (p.error_code, p.offset) for p in r.topics[0].partitions}
        poll(lso, lambda x: all(e == 0 for e, _ in x.values()), "the topic")
        poll(lambda: c.call(ApiKey.FIND_COORDINATOR, 4, key_type=1, coordinator_keys=[TID]).coordinators[0].error_code,
             lambda e: e == 0, "the transaction coordinator")
        init = poll(lambda: c.call(ApiKey.INIT_PRODUCER_ID, 5, transactional_id=TID, transaction_timeout_ms=60000,
                                   producer_id=-1, producer_epoch=-1),
                    lambda x: x.error_code not in (14, 15, 16), "InitProducerId")
        pid, epoch = init.producer_id, init.producer_epoch
        notes.append(f"InitProducerId: error {init.error_code}, producer {pid} epoch {epoch}")

        def produce(partition, value):
            batch = dk.build_batch([(b"k", value, [])], 0, int(time.time() * 1000), pid, epoch, 0,
                                   dk.ATTR_TRANSACTIONAL)
            r = c.call(ApiKey.PRODUCE, 9, transactional_id=TID, acks=-1, timeout_ms=30000, topic_data=[Msg(
                name=TOPIC, partition_data=[Msg(index=partition, records=batch)])])
            p = r.responses[0].partition_responses[0]
            return f"error {p.error_code}, base offset {p.base_offset}"
        notes.append(f"Produce to partition 0, never added: {produce(0, b'hanging')}")
        r = c.call(ApiKey.ADD_PARTITIONS_TO_TXN, 3, transactional_id=TID, producer_id=pid, producer_epoch=epoch,
                   topics=[Msg(name=TOPIC, partitions=[1])])
        notes.append("AddPartitionsToTxn partition 1: error %s" % [
            p.partition_error_code for t in r.results_by_topic for p in t.results_by_partition])
        notes.append(f"Produce to partition 1: {produce(1, b'committed')}")
        r = c.call(ApiKey.END_TXN, 4, transactional_id=TID, producer_id=pid, producer_epoch=epoch, committed=True)
        notes.append(f"EndTxn commit: error {r.error_code}")
        poll(lambda: c.call(ApiKey.DESCRIBE_TRANSACTIONS, 0, transactional_ids=[TID]).transaction_states[0]
             .transaction_state, lambda s: s == "CompleteCommit", "CompleteCommit")
        notes.append(f"ListOffsets read_committed (partition: (error, LSO)): {lso()}")
    return notes


def show(entry, everything):
    line = f"  -> {entry['api']} v{entry['version']}"
    if entry["key"] in SHOWN or everything:
        line += f"\n       request  {json.dumps(entry.get('request'))}\n       response {json.dumps(entry.get('response'))}"
    return line


def run(proxy, bootstrap, args, everything):
    proxy.take()
    print(f"\n$ kafka-transactions --bootstrap-server {bootstrap} {' '.join(args)}", flush=True)
    r = run_tool("kafka-transactions", "--bootstrap-server", bootstrap, *args, capture_output=True, text=True,
                 timeout=120)
    time.sleep(0.2)
    for e in proxy.take():
        if everything or e["key"] not in (ApiKey.API_VERSIONS,):
            print(show(e, everything))
    print("  output:")
    for line in (r.stdout + r.stderr).splitlines():
        print("    " + line)
    print(f"  exit {r.returncode}")
    return r


def tools(doze, everything):
    """The hanging transaction made, and the tools run through the proxy -> True if
    they found and aborted it."""
    proxy_port = free_port()
    props = dict(SETTINGS, **{"advertised.listeners": f"PLAINTEXT://127.0.0.1:{proxy_port}"})
    broker = dk.running(props, defaults={}) if doze else RealKafka(extra_props=props)
    with broker as k:
        proxy = Proxy(proxy_port, k.port)
        try:
            print(f"{'doze' if doze else 'Apache Kafka 4.3.1'} with {SETTINGS}, through a proxy on "
                  f"127.0.0.1:{proxy_port}")
            for n in make_hanging(k.bootstrap):
                print("  " + n)
            bs = f"127.0.0.1:{proxy_port}"
            found = run(proxy, bs, ["find-hanging", "--broker-id", "1", "--max-transaction-timeout", "0"], everything)
            run(proxy, bs, ["describe-producers", "--topic", TOPIC, "--partition", "0"], everything)
            aborted = run(proxy, bs, ["abort", "--topic", TOPIC, "--partition", "0", "--start-offset", "0"],
                          everything)
            after = run(proxy, bs, ["find-hanging", "--broker-id", "1", "--max-transaction-timeout", "0"], everything)
        finally:
            proxy.close()
    return TOPIC in found.stdout and aborted.returncode == 0 and TOPIC not in after.stdout


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--all", action="store_true", help="show every request's fields")
    ap.add_argument("--doze", action="store_true", help="the same tools against doze (this repository's "
                    "doze_kafka.py, in this process) instead of Kafka")
    a = ap.parse_args(argv)
    try:
        ok = tools(a.doze, a.all)
    except GaveUp as e:
        raise SystemExit(f"hanging tools: {e}") from None
    print(f"\nhanging tools: {'found and aborted the hanging transaction' if ok else 'FAILED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
