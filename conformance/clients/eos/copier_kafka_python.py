#!/usr/bin/env python3
"""Exactly-once copier: kafka-python 3.x (KafkaProducer transactions + KafkaConsumer).
Contract: copier_common.py.

Two kafka-python 3.0.12 bugs shape the error handling (see conformance/clients/README.md):
after an abortable TxnOffsetCommit error (e.g. UNKNOWN_MEMBER_ID) and abort_transaction(),
the failed offsets are sent again in the *next* transaction's TxnOffsetCommit, so after
any error this copier throws the producer away instead of aborting and reusing it; and a
transactional call can block for ever after a broker restart, so every blocking producer
call runs under a 30 s watchdog."""
import concurrent.futures
import logging
import os
import time

from copier_common import Status, consumer_options, headers, log, parse_args, security_options

import kafka
from kafka import KafkaConsumer, KafkaProducer
from kafka.structs import OffsetAndMetadata


def secure():
    return security_options({"protocol": "security_protocol", "mechanism": "sasl_mechanism",
                             "username": "sasl_plain_username", "password": "sasl_plain_password",
                             "cafile": "ssl_cafile", "certfile": "ssl_certfile", "keyfile": "ssl_keyfile"})


class Hung(Exception):
    pass


def call(fn, *args, timeout=30, **kw):
    """Run a blocking producer call with a deadline (the thread is abandoned if it hangs)."""
    ex = concurrent.futures.ThreadPoolExecutor(1)
    fut = ex.submit(fn, *args, **kw)
    try:
        return fut.result(timeout)
    except concurrent.futures.TimeoutError:
        raise Hung("%s did not return in %ds" % (getattr(fn, "__name__", fn), timeout)) from None
    finally:
        ex.shutdown(wait=False)


def main():
    a = parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("kafka.coordinator").setLevel(logging.INFO)
    logging.getLogger("kafka.consumer.subscription_state").setLevel(logging.INFO)
    for name in filter(None, os.environ.get("EOS_KAFKA_PYTHON_DEBUG", "").split(",")):
        logging.getLogger(name).setLevel(logging.DEBUG)     # e.g. kafka.net,kafka.producer
    st = Status(a, "kafka-python", "kafka-python %s" % kafka.__version__)
    consumer = KafkaConsumer(a.input, **consumer_options(a, "kafka-python"), **secure())

    def new_producer(old=None):
        if old is not None:
            try:
                call(lambda: old.close(timeout=5), timeout=10)
            except Exception as e:  # noqa: BLE001
                log("close: %r" % e)
        while True:
            try:
                p = KafkaProducer(bootstrap_servers=a.bootstrap, transactional_id=a.txn_id,
                                  client_id="eos-kafka-python-p%d" % a.attempt,
                                  transaction_timeout_ms=30000, acks="all", **secure())
                call(p.init_transactions)
                log("init_transactions ok")
                return p
            except Exception as e:  # noqa: BLE001
                st.error("init_transactions", e)
                time.sleep(0.5)

    def rewind():
        while True:
            try:
                done = []
                for tp in consumer.assignment():
                    off = consumer.committed(tp, timeout_ms=30000)
                    consumer.seek(tp, off if off is not None and off >= 0 else 0)
                    done.append("%d->%s" % (tp.partition, off))
                log("rewind: %s" % (" ".join(done) or "nothing assigned"))
                return
            except Exception as e:  # noqa: BLE001
                st.error("rewind", e)
                time.sleep(0.5)

    producer = new_producer()
    while True:
        batches = consumer.poll(timeout_ms=1000, max_records=st.rnd.randint(1, a.max_batch))
        msgs = [m for recs in batches.values() for m in recs]
        if not msgs:
            continue
        tag, plan = st.next_txn()
        offsets = {}
        rng = {}
        for m in msgs:
            lo, hi = rng.get(m.partition, (m.offset, m.offset))
            rng[m.partition] = (min(lo, m.offset), max(hi, m.offset))
        log("txn %s %s: %s" % (tag, plan, " ".join("%d:%d-%d" % (p, lo, hi) for p, (lo, hi) in sorted(rng.items()))))
        try:
            call(producer.begin_transaction)
            for m in msgs:
                producer.send(a.output, key=m.key, value=m.value,
                              headers=headers(m.partition, m.offset, tag, plan))
                offsets[kafka.TopicPartition(m.topic, m.partition)] = OffsetAndMetadata(m.offset + 1, "", -1)
            call(producer.send_offsets_to_transaction, offsets, consumer.group_metadata())
            if plan == "abort":
                call(producer.flush, timeout=30)
                call(producer.abort_transaction)
                st.aborted(tag, len(msgs))
                rewind()
                continue
            call(producer.commit_transaction)
            st.committed(tag, len(msgs))
        except Exception as e:  # noqa: BLE001
            fatal = producer._transaction_manager.has_fatal_error()
            st.error("txn %s (fatal=%s)" % (tag, fatal), e, aborted=not fatal)
            # Never reuse the producer after an error (see the module docstring): the new
            # one's InitProducerId fences this one and aborts its open transaction.
            producer = new_producer(producer)
            rewind()


if __name__ == "__main__":
    main()
