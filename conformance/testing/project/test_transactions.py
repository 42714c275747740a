"""The order service's transactions against a broker that fails on purpose.

Each test runs once per client library (orders.CLIENTS) on doze's fixtures:
`doze_broker` is the session's broker, reset before the test.
"""
import threading

import confluent_kafka
import kafka.errors
import aiokafka.errors
import pytest

from orders import CLIENTS, Fenced, publisher

ORDERS = [(b"order-1", b"2 apples"), (b"order-2", b"1 pear"), (b"order-3", b"5 plums")]


def values(rows):
    return [row["value"] for row in rows if "control" not in row]


def log_shape(rows):
    """The partition's log as ("record", epoch) and ("COMMIT" | "ABORT", epoch)."""
    return [(row.get("control", "record"), row["producer_epoch"]) for row in rows]


def timeout_config(client, ms):
    return {"transaction.timeout.ms": ms} if client == "confluent-kafka" else {"transaction_timeout_ms": ms}


# What each library raises for the fence, wrapped by the application in Fenced.
FENCED_CAUSE = {
    "confluent-kafka": lambda e: (e.code(), e.fatal()) == (confluent_kafka.KafkaError._FENCED, True),
    "kafka-python": lambda e: isinstance(e, kafka.errors.ProducerFencedError),
    "aiokafka": lambda e: isinstance(e, aiokafka.errors.ProducerFenced),
}
# What the fenced publisher's next begin() raises: the producer is done for good.
# (aiokafka's is an AssertionError from its state machine: "Invalid state
# transition TransactionState.FATAL_ERROR -> TransactionState.IN_TRANSACTION".)
AFTER_FENCE = {"confluent-kafka": confluent_kafka.KafkaException, "kafka-python": kafka.errors.KafkaError,
               "aiokafka": AssertionError}


# --- 1. a commit retried after the coordinator's retriable errors ----------------------

@pytest.mark.parametrize("api,error", [("EndTxn", "COORDINATOR_LOAD_IN_PROGRESS"), ("EndTxn", "NOT_COORDINATOR"),
                                       ("AddPartitionsToTxn", "COORDINATOR_LOAD_IN_PROGRESS"),
                                       ("AddPartitionsToTxn", "NOT_COORDINATOR")])
@pytest.mark.parametrize("client", CLIENTS)
def test_a_commit_is_retried_after_coordinator_errors_and_commits_once(doze_broker, client, api, error):
    """The coordinator answers the first two AddPartitionsToTxn or EndTxn with
    a retriable error (a coordinator moving or loading, as during a Kafka
    broker's restart): every client finds the coordinator again or backs off,
    resends, and the application's publish() returns; the orders are
    committed once."""
    orders = publisher(client, doze_broker.bootstrap, "tx-orders")
    doze_broker.faults.add(api, error=error, times=2, transactional_id="tx-orders")
    orders.publish(ORDERS)
    orders.close()
    assert doze_broker.faults.list() == []                     # both errors were sent, and the third try served
    assert values(doze_broker.records("orders", view="committed")) == [v for _, v in ORDERS]
    assert log_shape(doze_broker.records("orders", view="log")) == [("record", 0)] * 3 + [("COMMIT", 0)]
    assert doze_broker.transaction("tx-orders")["transaction_state"] == "CompleteCommit"


# --- 3. a transaction timed out by moving the broker's clock: the producer fenced -------

@pytest.mark.parametrize("client", CLIENTS)
def test_a_transaction_past_its_timeout_is_aborted_and_its_producer_fenced(doze_broker, client):
    """The application stalls between its sends and its commit for longer than
    transaction.timeout.ms: the test moves the broker's clock instead of
    waiting. The coordinator aborts the transaction and bumps the epoch; the
    commit gets PRODUCER_FENCED, fatal in every client. The application's
    recovery: a new publisher with the same transactional id."""
    old = publisher(client, doze_broker.bootstrap, "tx-slow", **timeout_config(client, 30_000))
    old.begin()
    for key, value in ORDERS:
        old.send(key, value)
    old.flush()
    doze_broker.advance(31_000)
    state = doze_broker.transaction("tx-slow")
    assert (state["transaction_state"], state["producer_epoch"]) == ("CompleteAbort", 1)
    assert log_shape(doze_broker.records("orders", view="log")) == [("record", 0)] * 3 + [("ABORT", 1)]
    with pytest.raises(Fenced) as fenced:
        old.commit()
    assert FENCED_CAUSE[client](fenced.value.cause), fenced.value.cause
    with pytest.raises(AFTER_FENCE[client]):
        old.begin()
    old.close()
    new = publisher(client, doze_broker.bootstrap, "tx-slow")
    new.publish([(b"order-4", b"again")])
    new.close()
    assert values(doze_broker.records("orders", view="committed")) == [b"again"]
    assert doze_broker.transaction("tx-slow")["producer_epoch"] == 2


# --- 4. a crash between the application's produce and its commit -----------------------

@pytest.mark.parametrize("client", CLIENTS)
def test_a_broker_killed_between_produce_and_commit_the_transaction_goes_on(doze_broker, client):
    """The broker is killed (kill -9) after the orders are acknowledged and
    before the commit: it restarts on the same port and data, the transaction
    is still open, and every client reconnects and commits it -- nothing to
    redo for the application."""
    orders = publisher(client, doze_broker.bootstrap, "tx-crash")
    orders.begin()
    for key, value in ORDERS:
        orders.send(key, value)
    orders.flush()
    assert values(doze_broker.records("orders", view="uncommitted")) == [v for _, v in ORDERS]
    assert doze_broker.records("orders", view="committed") == []
    doze_broker.restart("kill")
    assert doze_broker.transaction("tx-crash")["transaction_state"] == "Ongoing"
    orders.commit()
    orders.close()
    assert values(doze_broker.records("orders", view="committed")) == [v for _, v in ORDERS]
    assert doze_broker.transaction("tx-crash")["transaction_state"] == "CompleteCommit"


# --- 7. a late EndTxn: the commit arrives after the transaction timed out ---------------

@pytest.mark.parametrize("client", CLIENTS)
def test_a_commit_that_arrives_after_the_timeout_is_fenced_and_the_orders_aborted(doze_broker, client):
    """The application commits in time, but its EndTxn arrives late (held 40 s
    on the broker's clock; the transaction times out after 30 s). The order
    of arrival: the transaction's records, the coordinator's timeout (abort,
    epoch 0 -> 1, ABORT marker at epoch 1), then EndTxn(commit) of epoch 0,
    refused: PRODUCER_FENCED to EndTxn v2+ (kafka-python's v3),
    INVALID_PRODUCER_EPOCH to v0-v1 (aiokafka's v0, librdkafka's v1). Every
    client takes it as fatal. Kafka 4.3.1 (transaction.version 2 finalized;
    these clients speak the classic protocol, EndTxn below v5) does exactly
    this with the same order of arrival, client by client: the same answer,
    CompleteAbort at epoch 1, the ABORT marker at epoch 1, LSO = HW = 4, and
    a new instance's InitProducerId at epoch 2 (conformance/testing/late_endtxn.py)."""
    orders = publisher(client, doze_broker.bootstrap, "tx-late", **timeout_config(client, 30_000))
    orders.begin()
    for key, value in ORDERS:
        orders.send(key, value)
    orders.flush()
    doze_broker.faults.add("EndTxn", hold_ms=40_000, times=1, transactional_id="tx-late")
    outcome = {}

    def commit():
        try:
            orders.commit()
            outcome["committed"] = True
        except Exception as e:                       # what the application sees, asserted below
            outcome["error"] = e
    committing = threading.Thread(target=commit)
    committing.start()
    doze_broker.wait_until(lambda b: b.faults.list() == [])          # the EndTxn is in, and held
    doze_broker.advance(31_000)                                      # the timeout passes first
    assert doze_broker.transaction("tx-late")["transaction_state"] == "CompleteAbort"
    assert committing.is_alive()                                     # the client still waits for EndTxn
    doze_broker.advance(9_000)                                       # now the EndTxn is handled
    committing.join(60)
    orders.close()
    assert isinstance(outcome.get("error"), Fenced), outcome
    assert FENCED_CAUSE[client](outcome["error"].cause), outcome["error"].cause
    assert doze_broker.records("orders", view="committed") == []
    assert log_shape(doze_broker.records("orders", view="log")) == [("record", 0)] * 3 + [("ABORT", 1)]
    assert doze_broker.offsets("orders") == {"log_start_offset": 0, "last_stable_offset": 4, "high_watermark": 4}
    state = doze_broker.transaction("tx-late")
    assert (state["transaction_state"], state["producer_epoch"]) == ("CompleteAbort", 1)
