"""orders: the code this example project tests.

An order service publishes orders exactly once: a batch of orders goes to the
topic in one Kafka transaction (Publisher.publish), a reader copies what it
read and commits its offsets (read_and_commit, copy_in_transaction), and a
plain Sender writes one record and waits for its acknowledgement. It is
written once per client library -- confluent-kafka, kafka-python and aiokafka
-- so that each test shows each library's own behaviour against the same
fault; `CLIENTS` lists them. aiokafka is asynchronous: its classes here run
their own event loop, so a test calls all three the same way.

What the application does about errors is its own (Fenced below); every
other exception is the client library's own, unchanged.
"""
import asyncio

import confluent_kafka
import kafka
import kafka.errors
import aiokafka
import aiokafka.errors
from kafka.structs import OffsetAndMetadata as KafkaPythonOffset
from aiokafka.structs import TopicPartition as AioPartition

CLIENTS = ("confluent-kafka", "kafka-python", "aiokafka")
TIMEOUT_S = 30


class Fenced(Exception):
    """This publisher can do nothing more: the broker aborted its transaction
    (a timeout) or another instance took its transactional id. The
    application makes a new Publisher (with the same id) and publishes again.
    .cause is the client library's own error."""

    def __init__(self, cause):
        super().__init__(f"fenced: {cause!r}")
        self.cause = cause


# --- publishing orders in one transaction -------------------------------------------

class Publisher:
    """publish(orders): begin, send each (key, value), commit -- the steps are
    methods of their own, so that a test can put a fault between two of them."""

    def publish(self, orders):
        self.begin()
        for key, value in orders:
            self.send(key, value)
        self.commit()


class ConfluentPublisher(Publisher):
    def __init__(self, bootstrap, transactional_id, topic="orders", **config):
        self.topic = topic
        self.producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap,
                                                  "transactional.id": transactional_id, **config})
        self.producer.init_transactions(TIMEOUT_S)

    def begin(self):
        self.producer.begin_transaction()

    def send(self, key, value):
        self.producer.produce(self.topic, key=key, value=value)

    def flush(self):
        assert self.producer.flush(TIMEOUT_S) == 0, "records still queued"

    def commit(self):
        try:
            self.producer.commit_transaction(TIMEOUT_S)
        except confluent_kafka.KafkaException as e:
            if e.args[0].fatal():
                raise Fenced(e.args[0]) from e
            raise

    def close(self):
        try:
            self.producer.close()
        except confluent_kafka.KafkaException as e:   # a fenced producer's close raises its fatal error again
            if not e.args[0].fatal():
                raise


class KafkaPythonPublisher(Publisher):
    def __init__(self, bootstrap, transactional_id, topic="orders", **config):
        self.topic = topic
        self.producer = kafka.KafkaProducer(bootstrap_servers=bootstrap, transactional_id=transactional_id,
                                            **config)
        self.producer.init_transactions()

    def begin(self):
        self.producer.begin_transaction()

    def send(self, key, value):
        self.producer.send(self.topic, key=key, value=value)

    def flush(self):
        self.producer.flush(TIMEOUT_S)

    def commit(self):
        try:
            self.producer.commit_transaction()
        except kafka.errors.ProducerFencedError as e:
            raise Fenced(e) from e

    def close(self):
        self.producer.close(timeout=5)


class AioLoop:
    """An event loop of the object's own: run(coroutine) waits for its result."""

    def __init__(self):
        self.loop = asyncio.new_event_loop()

    def run(self, coroutine):
        return self.loop.run_until_complete(coroutine)

    def close_loop(self):
        self.loop.close()


class AiokafkaPublisher(Publisher, AioLoop):
    def __init__(self, bootstrap, transactional_id, topic="orders", **config):
        AioLoop.__init__(self)
        self.topic = topic
        self.pending = []
        self.producer = self.run(self._start(bootstrap, transactional_id, config))

    async def _start(self, bootstrap, transactional_id, config):
        producer = aiokafka.AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id=transactional_id,
                                             **config)
        await producer.start()
        return producer

    def begin(self):
        self.run(self.producer.begin_transaction())

    def send(self, key, value):
        self.pending.append(self.run(self.producer.send(self.topic, key=key, value=value)))

    def flush(self):
        self.run(asyncio.gather(*self.pending))
        self.pending = []

    def commit(self):
        try:
            self.run(self.producer.commit_transaction())
        except aiokafka.errors.ProducerFenced as e:
            raise Fenced(e) from e

    def close(self):
        self.run(self.producer.stop())
        self.close_loop()


PUBLISHERS = dict(zip(CLIENTS, (ConfluentPublisher, KafkaPythonPublisher, AiokafkaPublisher)))


def publisher(client, bootstrap, transactional_id, topic="orders", **config):
    """A Publisher of that client library; config in the library's own names."""
    return PUBLISHERS[client](bootstrap, transactional_id, topic, **config)


# --- one record at a time, acknowledged or not ----------------------------------------

class ConfluentSender:
    def __init__(self, bootstrap, topic, **config):
        self.topic = topic
        self.producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, **config})

    def send(self, value):
        """-> the offset the client reports (None: acks=0, no offset known)."""
        reports = []
        self.producer.produce(self.topic, value=value, on_delivery=lambda err, msg: reports.append((err, msg)))
        assert self.producer.flush(TIMEOUT_S) == 0
        err, msg = reports[0]
        if err is not None:
            raise confluent_kafka.KafkaException(err)
        return msg.offset()

    def close(self):
        self.producer.close()


class KafkaPythonSender:
    def __init__(self, bootstrap, topic, **config):
        self.topic = topic
        self.producer = kafka.KafkaProducer(bootstrap_servers=bootstrap, **config)

    def send(self, value):
        return self.producer.send(self.topic, value=value).get(TIMEOUT_S).offset

    def close(self):
        self.producer.close(timeout=5)


class AiokafkaSender(AioLoop):
    def __init__(self, bootstrap, topic, **config):
        AioLoop.__init__(self)
        self.topic = topic
        self.producer = self.run(self._start(bootstrap, config))

    async def _start(self, bootstrap, config):
        producer = aiokafka.AIOKafkaProducer(bootstrap_servers=bootstrap, **config)
        await producer.start()
        return producer

    def send(self, value):
        metadata = self.run(self.producer.send_and_wait(self.topic, value=value))
        return None if metadata is None else metadata.offset       # acks=0: no RecordMetadata at all

    def close(self):
        self.run(self.producer.stop())
        self.close_loop()


SENDERS = dict(zip(CLIENTS, (ConfluentSender, KafkaPythonSender, AiokafkaSender)))


def sender(client, bootstrap, topic, **config):
    return SENDERS[client](bootstrap, topic, **config)


# --- reading, and committing what was read ------------------------------------------------

def read_and_commit(client, bootstrap, group, topic, count):
    """Read `count` records of the topic as a member of `group`, commit the
    offsets (synchronously) and leave -> their values."""
    if client == "confluent-kafka":
        consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                                             "auto.offset.reset": "earliest", "enable.auto.commit": False})
        consumer.subscribe([topic])
        values = []
        try:
            while len(values) < count:
                msg = consumer.poll(TIMEOUT_S)
                assert msg is not None, "no record in time"
                assert msg.error() is None, msg.error()
                values.append(msg.value())
            consumer.commit(asynchronous=False)
        finally:
            consumer.close()
        return values
    if client == "kafka-python":
        consumer = kafka.KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group,
                                       auto_offset_reset="earliest", enable_auto_commit=False)
        values = []
        try:
            while len(values) < count:
                for records in consumer.poll(timeout_ms=1000).values():
                    values += [r.value for r in records]
            consumer.commit()
        finally:
            consumer.close(autocommit=False)
        return values

    async def aio():
        consumer = aiokafka.AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group,
                                             auto_offset_reset="earliest", enable_auto_commit=False)
        await consumer.start()
        values = []
        try:
            while len(values) < count:
                for records in (await consumer.getmany(timeout_ms=1000)).values():
                    values += [r.value for r in records]
            await consumer.commit()
        finally:
            await consumer.stop()
        return values
    return asyncio.run(aio())


def copy_in_transaction(client, bootstrap, transactional_id, group, source, target, count, before_commit):
    """Consume-transform-produce: read `count` records of `source` as a member
    of `group`, write each upper-cased to `target` and the group's offsets in
    the same transaction; before_commit() runs just before its commit."""
    if client == "confluent-kafka":
        consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                                             "auto.offset.reset": "earliest", "enable.auto.commit": False,
                                             "isolation.level": "read_committed"})
        consumer.subscribe([source])
        out = ConfluentPublisher(bootstrap, transactional_id, target)
        out.begin()
        got = 0
        while got < count:
            msg = consumer.poll(TIMEOUT_S)
            assert msg is not None and msg.error() is None
            out.send(msg.key(), msg.value().upper())
            got += 1
        out.producer.send_offsets_to_transaction(consumer.position(consumer.assignment()),
                                                 consumer.consumer_group_metadata(), TIMEOUT_S)
        out.flush()
        before_commit()
        out.commit()
        consumer.close()
        out.close()
        return
    if client == "kafka-python":
        consumer = kafka.KafkaConsumer(source, bootstrap_servers=bootstrap, group_id=group,
                                       auto_offset_reset="earliest", enable_auto_commit=False,
                                       isolation_level="read_committed")
        out = KafkaPythonPublisher(bootstrap, transactional_id, target)
        out.begin()
        got = 0
        while got < count:
            for records in consumer.poll(timeout_ms=1000).values():
                for r in records:
                    out.send(r.key, r.value.upper())
                    got += 1
        offsets = {tp: KafkaPythonOffset(consumer.position(tp), "", -1) for tp in consumer.assignment()}
        out.producer.send_offsets_to_transaction(offsets, consumer.group_metadata())
        out.flush()
        before_commit()
        out.commit()
        consumer.close(autocommit=False)
        out.close()
        return

    async def aio():
        consumer = aiokafka.AIOKafkaConsumer(source, bootstrap_servers=bootstrap, group_id=group,
                                             auto_offset_reset="earliest", enable_auto_commit=False,
                                             isolation_level="read_committed")
        await consumer.start()
        producer = aiokafka.AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id=transactional_id)
        await producer.start()
        await producer.begin_transaction()
        got = 0
        while got < count:
            for records in (await consumer.getmany(timeout_ms=1000)).values():
                for r in records:
                    await producer.send_and_wait(target, key=r.key, value=r.value.upper())
                    got += 1
        offsets = {AioPartition(tp.topic, tp.partition): await consumer.position(tp)
                   for tp in consumer.assignment()}
        await producer.send_offsets_to_transaction(offsets, group)
        before_commit()
        await producer.commit_transaction()
        await consumer.stop()
        await producer.stop()
    asyncio.run(aio())
