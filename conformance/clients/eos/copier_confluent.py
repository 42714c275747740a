#!/usr/bin/env python3
"""Exactly-once copier: confluent-kafka (librdkafka). Contract: copier_common.py."""
import os
import time

from copier_common import Status, headers, log, parse_args, security_options

import confluent_kafka
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

T = 30  # seconds for each blocking transactional call


def dbg(conf, var="EOS_RDKAFKA_DEBUG"):
    """EOS_RDKAFKA_DEBUG=eos,protocol,... turns on librdkafka debug logs of the producer (to the
    copier log), EOS_RDKAFKA_CONSUMER_DEBUG=cgrp,protocol,... those of the consumer."""
    if os.environ.get(var):
        conf["debug"] = os.environ[var]
    return conf


def secure():
    return security_options({"protocol": "security.protocol", "mechanism": "sasl.mechanism",
                             "username": "sasl.username", "password": "sasl.password", "cafile": "ssl.ca.location",
                             "certfile": "ssl.certificate.location", "keyfile": "ssl.key.location"})


def main():
    a = parse_args()
    kip848 = a.group_protocol == "consumer"
    st = Status(a, "confluent-consumer" if kip848 else "confluent", "confluent-kafka %s / librdkafka %s%s"
                % (confluent_kafka.__version__, confluent_kafka.libversion()[0],
                   ", group.protocol=consumer" if kip848 else ""))
    if kip848:
        # KIP-848: the broker owns the session, the heartbeat interval and the assignor;
        # librdkafka refuses session.timeout.ms, heartbeat.interval.ms,
        # partition.assignment.strategy and group.protocol.type with group.protocol=consumer.
        group = {"group.protocol": "consumer"}
    else:
        group = {"session.timeout.ms": 10000}
    consumer = Consumer(dbg({"bootstrap.servers": a.bootstrap, "group.id": a.group,
                         "client.id": "eos-confluent-c%d" % a.attempt,
                         "isolation.level": "read_committed", "enable.auto.commit": False,
                         "auto.offset.reset": "earliest", **group,
                         "enable.partition.eof": False,
                         # librdkafka >= 2.10 re-bootstraps when every broker is down and then
                         # can hang send_offsets_to_transaction()/the group forever
                         # (confluentinc/librdkafka#5511); a single broker that restarts
                         # needs no re-bootstrap.
                         "metadata.recovery.strategy": "none", **secure()}, "EOS_RDKAFKA_CONSUMER_DEBUG"))
    consumer.subscribe([a.input])

    def new_producer():
        while True:
            p = Producer(dbg({"bootstrap.servers": a.bootstrap, "transactional.id": a.txn_id,
                          "client.id": "eos-confluent-p%d" % a.attempt,
                          "transaction.timeout.ms": 30000, "message.timeout.ms": 30000,
                          "metadata.recovery.strategy": "none", **secure()}))
            try:
                p.init_transactions(T)
                log("init_transactions ok")
                return p
            except KafkaException as e:
                st.error("init_transactions", e.args[0])
                time.sleep(0.5)

    def rewind():
        """Seek every assigned partition back to the group's committed offset."""
        while True:
            assignment = consumer.assignment()
            if not assignment:
                return
            try:
                committed = consumer.committed(assignment, timeout=T)
            except KafkaException as e:
                st.error("committed", e.args[0])
                time.sleep(0.5)
                continue
            for tp in committed:
                off = tp.offset if tp.offset >= 0 else 0
                try:
                    consumer.seek(TopicPartition(tp.topic, tp.partition, off))
                except KafkaException as e:   # e.g. partition not yet fetching: assign instead
                    st.error("seek", e.args[0])
            return

    producer = new_producer()
    while True:
        msgs = consumer.consume(num_messages=st.rnd.randint(1, a.max_batch), timeout=1.0)
        errs = [m for m in msgs if m.error()]
        for m in errs[:3]:
            log("consume error: %s" % m.error())
        msgs = [m for m in msgs if not m.error()]
        if not msgs:
            continue
        tag, plan = st.next_txn()
        offsets = {}
        try:
            producer.begin_transaction()
            for m in msgs:
                producer.produce(a.output, key=m.key(), value=m.value(),
                                 headers=headers(m.partition(), m.offset(), tag, plan))
                offsets[(m.topic(), m.partition())] = m.offset() + 1
            tps = [TopicPartition(t, p, o) for (t, p), o in offsets.items()]
            producer.send_offsets_to_transaction(tps, consumer.consumer_group_metadata(), T)
            if plan == "abort":
                producer.flush(T)                # the records must reach the log first
                if len(producer) != 0:
                    raise RuntimeError("flush left %d messages" % len(producer))
                producer.abort_transaction(T)
                st.aborted(tag, len(msgs))
                rewind()
                continue
            while True:
                try:
                    producer.commit_transaction(T)
                    break
                except KafkaException as e:
                    if e.args[0].retriable():
                        st.error("commit_transaction (retrying)", e.args[0])
                        continue
                    raise
            st.committed(tag, len(msgs))
        except KafkaException as e:
            err = e.args[0]
            if err.txn_requires_abort():
                st.error("txn %s (abortable)" % tag, err, aborted=True)
                try:
                    producer.abort_transaction(T)
                except KafkaException as e2:
                    st.error("abort_transaction", e2.args[0])
                    producer = new_producer()
            else:
                st.error("txn %s (fatal=%s)" % (tag, err.fatal()), err)
                producer = new_producer()
            rewind()
        except RuntimeError as e:
            st.error("txn %s" % tag, e)
            producer = new_producer()
            rewind()


if __name__ == "__main__":
    main()
