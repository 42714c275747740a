"""One record at a time: a lost answer, and a power cut."""
import doze_kafka
import pytest

from orders import CLIENTS, sender


def values(rows):
    return [row["value"] for row in rows if "control" not in row]


def config(client, **kw):
    """Producer settings in the library's own spelling (confluent-kafka's dotted
    names); aiokafka has no `retries`: it resends until its request timeout."""
    if client == "aiokafka":
        kw.pop("retries", None)
    return {k.replace("_", ".") if client == "confluent-kafka" else k: v for k, v in kw.items()}


# --- 2. a produce whose answer is lost: resent, written once or twice -------------------

# The offset each client reports for the resent record: the first copy's (the
# broker recognised the idempotent resend as a duplicate) or the second's.
@pytest.mark.parametrize("idempotent,copies,reported", [(True, 1, 1), (False, 2, 2)])
@pytest.mark.parametrize("client", CLIENTS)
def test_a_produce_whose_answer_is_lost_is_resent_once_with_idempotence(doze_broker, client, idempotent,
                                                                          copies, reported):
    """The broker writes the record and closes the connection instead of
    answering (drop=True): the client never heard, so it resends on a new
    connection. With idempotence the resend has the same producer id and
    sequence, and the broker answers it with the first copy's offset; without
    it, the record is written a second time -- the case idempotence exists for."""
    payments = sender(client, doze_broker.bootstrap, "payments",
                      **config(client, acks="all", retries=5, enable_idempotence=idempotent))
    assert payments.send(b"warm-up") == 0
    doze_broker.faults.add("Produce", drop=True, times=1, topic="payments")
    assert payments.send(b"pay 10 EUR") == reported
    payments.close()
    assert doze_broker.faults.list() == []
    assert values(doze_broker.records("payments")) == [b"warm-up"] + [b"pay 10 EUR"] * copies


# --- 5. a power cut: what was acknowledged is there, and only that ----------------------

# What each client reports for an acks=0 record it sent: success, and no
# offset (None) -- but kafka-python reports offset 0 for every one of them.
ACKS0_OFFSET = {"confluent-kafka": None, "kafka-python": 0, "aiokafka": None}


@pytest.mark.parametrize("client", CLIENTS)
def test_a_power_cut_loses_exactly_what_was_not_acknowledged(client):
    """Three records with acks=all, each acknowledged; then two with acks=0,
    which every client reports as sent (ACKS0_OFFSET); the power goes out
    right after the first of them is written, before it is fsynced. After the
    restart on what the disk kept, the acknowledged records are all there
    and the two others are not. (Without the cut timed so, they would
    survive: doze fsyncs an acks=0 batch like any other, on its next pass.)"""
    with doze_kafka.running(disk=doze_kafka.FaultyDisk()) as broker:
        safe = sender(client, broker.bootstrap, "audit", acks="all")
        assert [safe.send(b"acked-%d" % i) for i in range(3)] == [0, 1, 2]
        safe.close()
        armed = broker.disk.changes
        broker.disk.cut_at = armed + 2                     # the next write lands, the change after it never does
        loose = sender(client, broker.bootstrap, "audit", acks=0)
        assert [loose.send(b"fire-and-forget-%d" % i) for i in range(2)] == [ACKS0_OFFSET[client]] * 2
        broker.wait_until(lambda b: b.disk.dead)                  # the power is out
        cut = [label.split(" audit-0/")[0] for label in broker.disk.labels[armed:]]
        assert cut in (["write", "fsync"], ["write", "write"])   # both batches in one pass: no fsync between
        broker.disk.cut_at = None           # else the restarted broker loses power at once (power_cut keeps it)
        broker.restart("power_cut")
        loose.close()
        assert values(broker.records("audit")) == [b"acked-0", b"acked-1", b"acked-2"]
        assert broker.offsets("audit")["high_watermark"] == 3
