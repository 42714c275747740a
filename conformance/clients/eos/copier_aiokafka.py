#!/usr/bin/env python3
"""Exactly-once copier: aiokafka (AIOKafkaProducer transactions with
send_offsets_to_transaction(offsets, group_id) -- no KIP-447 group metadata; all txn
APIs at v0). Contract: copier_common.py."""
import asyncio

from copier_common import Status, consumer_options, headers, log, parse_args, security_options

import aiokafka
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.helpers import create_ssl_context


def secure():
    out = security_options({"protocol": "security_protocol", "mechanism": "sasl_mechanism",
                            "username": "sasl_plain_username", "password": "sasl_plain_password",
                            "cafile": "cafile", "certfile": "certfile", "keyfile": "keyfile"})
    tls = {k: out.pop(k) for k in ("cafile", "certfile", "keyfile") if k in out}
    if tls:
        out["ssl_context"] = create_ssl_context(**tls)
    return out

T = 30


async def main():
    a = parse_args()
    st = Status(a, "aiokafka", "aiokafka %s" % aiokafka.__version__)
    consumer = AIOKafkaConsumer(a.input, **consumer_options(a, "aiokafka"), **secure())
    while True:
        try:
            await asyncio.wait_for(consumer.start(), T)
            break
        except Exception as e:  # noqa: BLE001
            st.error("consumer start", e)
            await asyncio.sleep(0.5)

    async def new_producer(old=None):
        if old is not None:
            try:
                await asyncio.wait_for(old.stop(), 10)
            except Exception as e:  # noqa: BLE001
                log("producer stop: %r" % e)
        while True:
            p = AIOKafkaProducer(bootstrap_servers=a.bootstrap, transactional_id=a.txn_id,
                                 client_id="eos-aiokafka-p%d" % a.attempt,
                                 enable_idempotence=True, transaction_timeout_ms=30000,
                                 request_timeout_ms=15000, **secure())
            try:
                await asyncio.wait_for(p.start(), T)     # start() runs InitProducerId
                log("producer started (InitProducerId ok)")
                return p
            except Exception as e:  # noqa: BLE001
                st.error("producer start", e)
                try:
                    await asyncio.wait_for(p.stop(), 10)
                except Exception:  # noqa: BLE001
                    pass
                await asyncio.sleep(0.5)

    async def rewind():
        while True:
            try:
                for tp in consumer.assignment():
                    off = await asyncio.wait_for(consumer.committed(tp), T)
                    consumer.seek(tp, off if off is not None and off >= 0 else 0)
                return
            except Exception as e:  # noqa: BLE001
                st.error("rewind", e)
                await asyncio.sleep(0.5)

    producer = await new_producer()
    while True:
        batches = await consumer.getmany(timeout_ms=1000, max_records=st.rnd.randint(1, a.max_batch))
        msgs = [m for recs in batches.values() for m in recs]
        if not msgs:
            continue
        tag, plan = st.next_txn()
        offsets = {}
        try:
            await asyncio.wait_for(producer.begin_transaction(), T)
            futs = []
            for m in msgs:
                futs.append(await producer.send(a.output, key=m.key, value=m.value,
                                                headers=headers(m.partition, m.offset, tag, plan)))
                offsets[aiokafka.TopicPartition(m.topic, m.partition)] = m.offset + 1
            await asyncio.wait_for(asyncio.gather(*futs), T)     # every record is in the log
            await asyncio.wait_for(producer.send_offsets_to_transaction(offsets, a.group), T)
            if plan == "abort":
                await asyncio.wait_for(producer.abort_transaction(), T)
                st.aborted(tag, len(msgs))
                await rewind()
                continue
            await asyncio.wait_for(producer.commit_transaction(), T)
            st.committed(tag, len(msgs))
        except Exception as e:  # noqa: BLE001
            st.error("txn %s" % tag, e, aborted=True)
            try:
                await asyncio.wait_for(producer.abort_transaction(), T)
            except Exception as e2:  # noqa: BLE001
                st.error("abort_transaction", e2)
                producer = await new_producer(producer)
            await rewind()


if __name__ == "__main__":
    asyncio.run(main())
