#!/usr/bin/env python3
"""Which internal-topic partition holds a transactional id or a group: doze against Kafka 4.3.1.

    python3 conformance/kafka/coordinator_partitions.py          # exit 0: agree, 1: differ

Kafka places a transactional id on __transaction_state partition
Utils.abs(id.hashCode()) % transaction.state.log.num.partitions
(TransactionStateManager.partitionFor) and a group on __consumer_offsets partition
Utils.abs(groupId.hashCode()) % offsets.topic.num.partitions
(GroupCoordinatorService.partitionFor); String.hashCode runs over UTF-16 code
units (a character beyond the BMP counts as its two surrogates) and Utils.abs maps
Integer.MIN_VALUE to 0. doze has the same rule as doze_kafka.internal_partition
(imported here by path from the repository root).

This starts a real Kafka 4.3.1 (realkafka.py, its default 50 partitions for both
topics) and asks it, for 20 transactional ids and 20 group ids (ascii, long,
Latin-1, CJK, beyond the BMP, a ZWJ sequence, a NUL, ids whose hash is negative,
two whose hash is Integer.MIN_VALUE, one of them found here by a search, and a
hash collision), which partition its coordinator wrote to, two ways:

1. ListOffsets (latest) of all 50 partitions before and after the id's one write
   (InitProducerId for a transactional id, a simple OffsetCommit -- generation -1,
   member "" -- to an empty group for a group): the partition that grew;
2. at the end, Fetch of every partition from offset 0, each record's key decoded
   (TransactionLogKey / OffsetCommitKey / GroupMetadataKey: int16 version, then the
   id as a non-flexible string): the partitions whose records name the id.

Both must name one partition, the same one; that is Kafka's answer, compared with
doze_kafka.internal_partition(id, 50). One line per id, then
"coordinator partitions: doze and Kafka 4.3.1 AGREE (40 ids)" or DIFFER.
Standard library only; about 30 s with Kafka's start.
"""
import functools
import importlib.util
import itertools
import os
import struct
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))   # conformance/
import lib  # noqa: E402
from lib import DOZE  # noqa: E402
from realkafka import RealKafka  # noqa: E402


def load_doze():
    """doze_kafka.py of this repository, imported by its path."""
    spec = importlib.util.spec_from_file_location("doze_kafka", DOZE)
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("doze_kafka", module)
    spec.loader.exec_module(module)
    return module


dk = load_doze()
ApiKey, Msg = dk.ApiKey, dk.Msg

TXN_TOPIC, GROUP_TOPIC = "__transaction_state", "__consumer_offsets"
INT_MIN = -(1 << 31)
RETRIABLE = {14, 15, 16}          # COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR
DEADLINE_S = 60                   # for each poll below


# --- Java's String.hashCode, on its own here (doze's is what is checked) -----------------

def java_hash(s):
    h = 0
    units = s.encode("utf-16-be")
    for (u,) in struct.iter_unpack(">H", units):
        h = (31 * h + u) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-"


@functools.lru_cache(maxsize=None)
def _suffix_hashes(suffix_len):
    return {java_hash(s) & 0xFFFFFFFF: s for s in ("".join(cs) for cs in
                                                   itertools.product(ALPHABET, repeat=suffix_len))}


@functools.lru_cache(maxsize=None)
def search_hash(target, prefix_len=3, suffix_len=3):
    """The first string (in ALPHABET order of its prefix) of prefix_len + suffix_len
    characters whose hashCode is target, by brute force met in the middle:
    h = hash(prefix) * 31^suffix_len + hash(suffix) (mod 2^32), the suffixes' hashes in a dict."""
    mult = pow(31, suffix_len, 1 << 32)
    suffixes = _suffix_hashes(suffix_len)
    for cs in itertools.product(ALPHABET, repeat=prefix_len):
        p = "".join(cs)
        want = ((target & 0xFFFFFFFF) - (java_hash(p) & 0xFFFFFFFF) * mult) & 0xFFFFFFFF
        if want in suffixes:
            found = p + suffixes[want]
            assert java_hash(found) == target, found
            return found
    raise SystemExit(f"no string of {prefix_len + suffix_len} characters hashes to {target}")


def negative_hash_ids(prefix, n):
    """n ids prefix-0, prefix-1, ... whose hash is negative and whose partition a
    careless port gets wrong: Python's h % 50 and Java's h % 50 (negative) both differ
    from abs(h) % 50."""
    out, i = [], 0
    while len(out) < n:            # (the first ones are past 10^6: the prefix sets the sign)
        s = f"{prefix}-{i}"
        h = java_hash(s)
        if h < 0 and h % 50 != abs(h) % 50 and abs(h) % 50 != 0:
            out.append(s)
        i += 1
    return out


def ids(kind):
    """20 ids of one kind ("txn" or "grp")."""
    p = f"ccp-{kind}"
    out = [
        p,                                                  # short ascii
        kind[0],                                            # one character
        p + "-long-" + "".join(chr(0x41 + (i * 7) % 26) for i in range(1000)),   # 1000+ characters
        f"{p}-caf\u00e9-\u00fcber-stra\u00dfe",             # Latin-1 (2-byte UTF-8)
        f"{p}-\u65e5\u672c\u8a9e-\u30c8\u30e9\u30f3",        # CJK (3-byte UTF-8)
        f"{p}-\U0001F600",                                  # an emoji: a surrogate pair in UTF-16
        "\U0001D11E",                                       # only a non-BMP character (G clef)
        f"{p}-\U0001F3F3\uFE0F\u200D\U0001F308",            # a ZWJ sequence with a variation selector
        f"{p}-\U0001F468\u200D\U0001F469\u200D\U0001F467-\U00010348\U0001F9D1",   # several non-BMP
        search_hash(INT_MIN),                               # hashCode Integer.MIN_VALUE (searched)
        search_hash(INT_MIN + 1),                           # hashCode -2^31 + 1: abs is Integer.MAX_VALUE
        "polygenelubricants",                               # hashCode Integer.MIN_VALUE (well known)
        *negative_hash_ids(p + "-neg", 4),                  # negative hashes
        "Aa", "BB",                                         # the same hashCode (2112)
        f"{p} with spaces/slashes:colons.and,commas",
        f"{p}-nul-\u0000-inside",                           # a NUL character
    ]
    assert len(out) == 20 and len(set(out)) == 20, out
    return out


# --- talking to Kafka ------------------------------------------------------------------------

poll = functools.partial(lib.poll, timeout_s=DEADLINE_S)       # poll(fn, ok, what): GaveUp past DEADLINE_S


def partition_count(c, topic):
    md = c.call(ApiKey.METADATA, 12, topics=[Msg(name=topic, topic_id=bytes(16))],
                allow_auto_topic_creation=False, include_topic_authorized_operations=False)
    t = md.topics[0]
    return len(t.partitions) if t.error_code == 0 else 0


def latest_offsets(c, topic, n, strict=True):
    """{partition: its latest offset}; strict=False: None while a partition answers an error."""
    r = c.call(ApiKey.LIST_OFFSETS, 9, replica_id=-1, isolation_level=0, topics=[
        Msg(name=topic, partitions=[Msg(partition_index=p, current_leader_epoch=-1, timestamp=-1)
                                    for p in range(n)])])
    out = {}
    for p in r.topics[0].partitions:
        if p.error_code and not strict:
            return None
        if p.error_code:
            raise SystemExit(f"coordinator partitions: ListOffsets {topic}-{p.partition_index}: "
                             f"error {p.error_code}")
        out[p.partition_index] = p.offset
    return out


def grown(before, after):
    return sorted(p for p in after if after[p] != before.get(p))


def keys_by_partition(c, topic, n):
    """{partition: [the id each record's key names]} of the whole topic (Fetch from 0)."""
    out = {p: [] for p in range(n)}
    offsets = {p: 0 for p in range(n)}
    for _ in range(50):
        r = c.call(ApiKey.FETCH, 12, replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 24,
                   isolation_level=0, session_id=0, session_epoch=-1, topics=[
                       Msg(topic=topic, partitions=[Msg(partition=p, current_leader_epoch=-1, fetch_offset=o,
                                                        last_fetched_epoch=-1, log_start_offset=-1,
                                                        partition_max_bytes=1 << 20)
                                                    for p, o in offsets.items()])],
                   forgotten_topics_data=[], rack_id="")
        for p in r.responses[0].partitions:
            if p.error_code:
                raise SystemExit(f"coordinator partitions: Fetch {topic}-{p.partition_index}: error {p.error_code}")
            data = bytes(p.records or b"")
            for start, h, end in dk.whole_batches(data):
                if not h.attributes & dk.ATTR_CONTROL:
                    for _d, _t, key, _v, _h in dk.decode_records(data[start:end]):
                        (ln,) = struct.unpack_from(">h", key, 2)          # int16 version, then a string
                        out[p.partition_index].append(key[4:4 + ln].decode("utf-8"))
                offsets[p.partition_index] = h.base_offset + h.last_offset_delta + 1
            if offsets[p.partition_index] >= p.high_watermark:
                del offsets[p.partition_index]
        if not offsets:
            return out
    raise SystemExit(f"coordinator partitions: {topic} not read to its end: {offsets}")


def init_producer_id(c, tid):
    return poll(lambda: c.call(ApiKey.INIT_PRODUCER_ID, 5, transactional_id=tid, transaction_timeout_ms=60000,
                               producer_id=-1, producer_epoch=-1),
                lambda r: r.error_code not in RETRIABLE, f"InitProducerId of {tid!r}").error_code


def offset_commit(c, group, topic, offset):
    def once():
        r = c.call(ApiKey.OFFSET_COMMIT, 9, group_id=group, generation_id_or_member_epoch=-1, member_id="",
                   group_instance_id=None, topics=[Msg(name=topic, partitions=[
                       Msg(partition_index=0, committed_offset=offset, committed_leader_epoch=-1,
                           committed_metadata="")])])
        return r.topics[0].partitions[0].error_code
    return poll(once, lambda e: e not in RETRIABLE, f"OffsetCommit of {group!r}")


def find_coordinator(c, key, key_type):
    poll(lambda: c.call(ApiKey.FIND_COORDINATOR, 4, key_type=key_type, coordinator_keys=[key]).coordinators[0],
         lambda x: x.error_code == 0, f"FindCoordinator({key_type})")


def observe(c, kind, id_list, topic, write):
    """{id: (partitions that grew, error code of the write)}, and the partition count."""
    find_coordinator(c, id_list[0], 1 if kind == "txn" else 0)
    n = poll(lambda: partition_count(c, topic), lambda k: k > 0, f"{topic} in Metadata")
    poll(lambda: latest_offsets(c, topic, n, strict=False), lambda o: o is not None and len(o) == n,
         f"{topic}'s partitions (every one led)")
    out = {}
    for i, key in enumerate(id_list):
        before = latest_offsets(c, topic, n)
        err = write(key, i)
        out[key] = (grown(before, latest_offsets(c, topic, n)), err)
    return out, n


def show(s):
    r = ascii(s)
    return r if len(r) <= 60 else r[:45] + "...'(%d chars)" % len(s)


def main():
    txn_ids, group_ids = ids("txn"), ids("grp")
    problems, lines = [], []
    t0 = time.time()
    with RealKafka() as k:
        print(f"Apache Kafka 4.3.1 on {k.bootstrap} (started in {k.startup_seconds:.1f}s)", flush=True)
        with dk.Client(k.bootstrap, client_id="coordinator-partitions", timeout=30) as c:
            topic = "ccp-offsets"
            r = c.call(ApiKey.CREATE_TOPICS, 4, topics=[Msg(name=topic, num_partitions=1, replication_factor=1,
                                                            assignments=[], configs=[])],
                       timeout_ms=30000, validate_only=False)
            assert r.topics[0].error_code == 0, r
            poll(lambda: partition_count(c, topic), lambda k_: k_ == 1, topic)
            txn_seen, n_txn = observe(c, "txn", txn_ids, TXN_TOPIC, lambda key, i: init_producer_id(c, key))
            grp_seen, n_grp = observe(c, "grp", group_ids, GROUP_TOPIC,
                                      lambda key, i: offset_commit(c, key, topic, i + 1))
            txn_keys = keys_by_partition(c, TXN_TOPIC, n_txn)
            grp_keys = keys_by_partition(c, GROUP_TOPIC, n_grp)
    for kind, topic, id_list, seen, keys, n in (("transactional id", TXN_TOPIC, txn_ids, txn_seen, txn_keys, n_txn),
                                                ("group", GROUP_TOPIC, group_ids, grp_seen, grp_keys, n_grp)):
        for key in id_list:
            grew, err = seen[key]
            holding = sorted(p for p, names in keys.items() if key in names)
            doze_p = dk.internal_partition(key, n)
            h = java_hash(key)
            if err != 0 or len(grew) != 1 or holding != grew:
                kafka_p = None
                why = f"Kafka unclear: write error {err}, partitions grown {grew}, records naming it in {holding}"
            else:
                kafka_p = grew[0]
                why = ""
            verdict = "ok" if kafka_p == doze_p else "DIFFER"
            line = (f"{kind:16} {show(key):62} hash {h:11d}: Kafka {topic}-{kafka_p}, "
                    f"doze {doze_p} of {n}  {verdict}{'  (' + why + ')' if why else ''}")
            lines.append(line)
            if verdict != "ok":
                problems.append(line)
    for line in lines:
        print(line)
    total = len(txn_ids) + len(group_ids)
    print(f"(in {time.time() - t0:.1f}s)")
    if problems:
        print(f"coordinator partitions: doze and Kafka 4.3.1 DIFFER ({len(problems)} of {total} ids):")
        for p in problems:
            print("    " + p)
        return 1
    print(f"coordinator partitions: doze and Kafka 4.3.1 AGREE ({total} ids)")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except lib.GaveUp as e:
        sys.exit(f"coordinator partitions: {e}")
