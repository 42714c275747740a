"""A consumer's committed offsets, read back from the broker without a consumer."""
import pytest

from orders import CLIENTS, copy_in_transaction, publisher, read_and_commit

EVENTS = [b"event-%d" % i for i in range(5)]
# The offset a client commits after reading the five records at offsets 0-4
# (the transaction's COMMIT marker is offset 5): librdkafka commits the last
# record's offset + 1; kafka-python and aiokafka commit their fetch position,
# already past the marker (as Kafka's Java consumer does).
NEXT_OFFSET = {"confluent-kafka": 5, "kafka-python": 6, "aiokafka": 6}


def fill(broker, topic, client):
    p = publisher(client, broker.bootstrap, "tx-fill", topic)
    p.publish([(b"k", v) for v in EVENTS])
    p.close()


# --- 6. a consumer's offsets, read back by inspection -----------------------------------

@pytest.mark.parametrize("client", CLIENTS)
def test_a_consumers_committed_offsets_are_read_back_by_inspection(doze_broker, client):
    """The application reads five records as a group member and commits: the
    broker's own view of the group (.committed) holds the offset the client
    committed, with no consumer of the test's own to ask -- and shows that
    the clients differ (NEXT_OFFSET)."""
    fill(doze_broker, "events", client)
    assert doze_broker.committed("readers") == {}
    assert read_and_commit(client, doze_broker.bootstrap, "readers", "events", len(EVENTS)) == EVENTS
    assert doze_broker.committed("readers") == {("events", 0): NEXT_OFFSET[client]}


@pytest.mark.parametrize("client", CLIENTS)
def test_offsets_committed_in_a_transaction_count_only_once_it_commits(doze_broker, client):
    """Consume-transform-produce: the group's offsets ride in the transaction
    (send_offsets_to_transaction). Until EndTxn they are staged in the
    transaction (.transaction shows them) and the group has none
    (.committed); after it, the group's offset and the copies together."""
    fill(doze_broker, "events", client)
    seen = {}

    def before_commit():
        seen["committed"] = doze_broker.committed("copier")
        seen["staged"] = [(o["group"], o["topic"], o["partition"], o["offset"])
                          for o in doze_broker.transaction("tx-copier")["pending_offsets"]]
        seen["copies"] = doze_broker.records("copies", view="committed")
    copy_in_transaction(client, doze_broker.bootstrap, "tx-copier", "copier", "events", "copies", len(EVENTS),
                        before_commit)
    assert seen == {"committed": {}, "staged": [("copier", "events", 0, NEXT_OFFSET[client])], "copies": []}
    assert doze_broker.committed("copier") == {("events", 0): NEXT_OFFSET[client]}
    assert [r["value"] for r in doze_broker.records("copies", view="committed")] == [v.upper() for v in EVENTS]
