"""Conformance scenarios: short scripts of Kafka requests (see recorder.py for the step DSL).

Each scenario is a dict: description, steps, and optionally broker_settings
(Kafka setting names, applied to both the real Kafka and doze), doze_settings
(doze's own, for doze only: e.g. doze.transaction.version), own_broker and
known_differences ({step id: {"name": ..., "doze": {expected fields of doze's
answer}, "why": ...}}: steps where doze differs from Kafka on purpose).

Every scenario names its own topics, groups and transactional ids with its own
name as prefix, so scenarios are independent of each other and deterministic.
"""

SCENARIOS = {}

# Error codes used below (Kafka's Errors enum)
NONE, UNKNOWN_TOPIC_OR_PARTITION, COORDINATOR_LOAD_IN_PROGRESS = 0, 3, 14
COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR = 15, 16
RETRIABLE_COORDINATOR = [COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR]
CONCURRENT_TRANSACTIONS = 51
RETRY_CONCURRENT = {"path": "error_code", "in": [CONCURRENT_TRANSACTIONS], "timeout_ms": 30000,
                    "interval_ms": 50}         # what a client does with CONCURRENT_TRANSACTIONS
FINISHES_ABORT = "doze-initproducerid-finishes-abort"
TS = -1        # record timestamps: none (a fixed old time would make Kafka roll segments,
               # and a Fetch answer holds one segment's batches)

DEFAULT_BROKER_SETTINGS = {"group.initial.rebalance.delay.ms": 0}


def scenario(name, description="", broker_settings=None, known_differences=None, doze_settings=None,
             own_broker=False):
    """Register fn(S) -> steps as scenario `name` (S is the name: the prefix of every
    topic, group and transactional id it uses). doze_settings: doze's own settings
    (replay.py gives them to doze only, never to the real Kafka). own_broker: the
    recorder gives the scenario a Kafka of its own (it changes the whole cluster)."""
    def register(fn):
        SCENARIOS[name] = {"description": description or (fn.__doc__ or "").strip(),
                           "broker_settings": broker_settings or {},
                           "doze_settings": doze_settings or {},
                           "own_broker": own_broker,
                           "known_differences": known_differences or {},
                           "build": fn}
        return fn
    return register


def names():
    return list(SCENARIOS)


def get(name):
    if name not in SCENARIOS:
        raise KeyError(f"no scenario {name!r}; known: {', '.join(SCENARIOS)}")
    sc = dict(SCENARIOS[name])
    sc["steps"] = sc["build"](name)
    return sc


# --- helpers --------------------------------------------------------------------

def ref(path, add=None):
    r = {"$ref": path}
    if add is not None:
        r["add"] = add
    return r


def step(id, api, v, req=None, conn=1, **kw):
    s = {"id": id, "api": api, "v": v, "req": req or {}, "conn": conn}
    s.update(kw)
    return s


def create_topics(id, topics, partitions=1, v=4, wait=True, **kw):
    """CreateTopics (v4 by default: v5+ answers list every topic config), then Metadata
    polled until every topic is there (Kafka's CreateTopics answers before the broker
    has the topic). topics: names, or (name, partitions[, configs dict]). -> steps."""
    items = []
    for t in topics:
        if isinstance(t, str):
            t = (t, partitions)
        configs = t[2] if len(t) > 2 else {}
        items.append({"name": t[0], "num_partitions": t[1], "replication_factor": 1,
                      "assignments": [], "configs": [{"name": k, "value": val}
                                                     for k, val in configs.items()]})
    steps = [step(id, "CreateTopics", v, {"topics": items, "timeout_ms": 30000,
                                          "validate_only": False}, **kw)]
    if wait:
        steps.append(wait_topics(f"{id}-wait", [t["name"] for t in items], conn=kw.get("conn", 1)))
        # ... and until every partition's log is there (Metadata can be ahead of it)
        steps.append(list_offsets(f"{id}-ready", {t["name"]: {p: -1 for p in range(max(t["num_partitions"], 1))}
                                                 for t in items}, conn=kw.get("conn", 1),
                                  until={"path": "topics.*.partitions.*.error_code", "equals": 0,
                                         "timeout_ms": 30000, "interval_ms": 50}))
    return steps


def metadata(id, topics, v=12, auto_create=False, conn=1, **kw):
    return step(id, "Metadata", v, {
        "topics": None if topics is None else [{"name": t} for t in topics],
        "allow_auto_topic_creation": auto_create,
        "include_topic_authorized_operations": False}, conn=conn, **kw)


def wait_topics(id, topics, conn=1):
    return metadata(id, topics, conn=conn, until={"path": "topics.*.error_code", "equals": 0,
                                                  "timeout_ms": 30000, "interval_ms": 50})


def find_coordinator(id, key, key_type, conn=1):
    """FindCoordinator v4, polled until the coordinator is there (a fresh Kafka
    creates __consumer_offsets / __transaction_state on the first request)."""
    return step(id, "FindCoordinator", 4, {"key_type": key_type, "coordinator_keys": [key]},
                conn=conn, until={"path": "coordinators.0.error_code", "equals": 0,
                                  "timeout_ms": 30000, "interval_ms": 200})


def init_pid(id, tid, timeout_ms=60000, v=5, conn=1, poll=True, producer_id=-1, producer_epoch=-1,
             **kw):
    req = {"transactional_id": tid, "transaction_timeout_ms": timeout_ms}
    if v >= 3:
        req.update(producer_id=producer_id, producer_epoch=producer_epoch)
    if poll:
        kw["until"] = {"path": "error_code", "not_in": RETRIABLE_COORDINATOR,
                       "timeout_ms": 30000, "interval_ms": 200}
    return step(id, "InitProducerId", v, req, conn=conn, **kw)


def pid_of(init_id):
    return ref(f"{init_id}.producer_id")


def epoch_of(init_id, add=None):
    return ref(f"{init_id}.producer_epoch", add)


def add_partitions(id, tid, init_id, topics, v=3, conn=1, epoch=None, **kw):
    """topics: {name: [partitions]}."""
    return step(id, "AddPartitionsToTxn", v, {
        "transactional_id": tid, "producer_id": pid_of(init_id),
        "producer_epoch": epoch if epoch is not None else epoch_of(init_id),
        "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]}, conn=conn, **kw)


def add_offsets(id, tid, init_id, group, v=4, conn=1, **kw):
    return step(id, "AddOffsetsToTxn", v, {
        "transactional_id": tid, "producer_id": pid_of(init_id),
        "producer_epoch": epoch_of(init_id), "group_id": group}, conn=conn, **kw)


def end_txn(id, tid, init_id, commit, v=4, conn=1, epoch=None, producer_id=None, **kw):
    return step(id, "EndTxn", v, {
        "transactional_id": tid,
        "producer_id": producer_id if producer_id is not None else pid_of(init_id),
        "producer_epoch": epoch if epoch is not None else epoch_of(init_id),
        "committed": commit}, conn=conn, **kw)


def batch(values, producer_id=-1, producer_epoch=-1, base_sequence=-1, transactional=False,
          timestamp_ms=TS, **kw):
    b = {"records": [[f"k{i}", v] for i, v in enumerate(values)], "producer_id": producer_id,
         "producer_epoch": producer_epoch, "base_sequence": base_sequence,
         "attributes": 0x10 if transactional else 0, "timestamp_ms": timestamp_ms}
    b.update(kw)
    return {"$batch": b}


def txn_batch(init_id, values, seq, epoch=None):
    return batch(values, pid_of(init_id), epoch if epoch is not None else epoch_of(init_id),
                 seq, transactional=True)


def produce(id, topic_data, v=9, acks=-1, tid=None, conn=1, **kw):
    """topic_data: {topic: {partition: records-json}}."""
    req = {"transactional_id": tid, "acks": acks, "timeout_ms": 30000,
           "topic_data": [{"name": t, "partition_data": [{"index": p, "records": r}
                                                        for p, r in parts.items()]}
                          for t, parts in topic_data.items()]}
    return step(id, "Produce", v, req, conn=conn, **kw)


def fetch(id, parts, isolation=0, v=12, max_wait_ms=0, conn=1, **kw):
    """parts: {topic: {partition: fetch_offset}}."""
    return step(id, "Fetch", v, {
        "replica_id": -1, "max_wait_ms": max_wait_ms, "min_bytes": 1, "max_bytes": 1048576,
        "isolation_level": isolation, "session_id": 0, "session_epoch": -1,
        "topics": [{"topic": t, "partitions": [
            {"partition": p, "current_leader_epoch": -1, "fetch_offset": off,
             "last_fetched_epoch": -1, "log_start_offset": -1, "partition_max_bytes": 1048576}
            for p, off in ps.items()]} for t, ps in parts.items()],
        "forgotten_topics_data": [], "rack_id": ""}, conn=conn, **kw)


def list_offsets(id, parts, isolation=0, v=9, conn=1, **kw):
    """parts: {topic: {partition: timestamp}}."""
    return step(id, "ListOffsets", v, {
        "replica_id": -1, "isolation_level": isolation,
        "topics": [{"name": t, "partitions": [{"partition_index": p, "current_leader_epoch": -1,
                                               "timestamp": ts} for p, ts in ps.items()]}
                   for t, ps in parts.items()]}, conn=conn, **kw)


def describe_txn(id, tids, conn=1, **kw):
    return step(id, "DescribeTransactions", 0, {"transactional_ids": tids}, conn=conn, **kw)


def wait_txn_state(id, tid, state, conn=1):
    """Poll DescribeTransactions until the transaction is in `state`."""
    return describe_txn(id, [tid], conn=conn, until={
        "path": "transaction_states.0.transaction_state", "equals": state,
        "timeout_ms": 30000, "interval_ms": 50})


def join_group(id, group, member_id="", topics=(), v=9, conn=1, session_timeout_ms=30000,
               instance_id=None, **kw):
    return step(id, "JoinGroup", v, {
        "group_id": group, "session_timeout_ms": session_timeout_ms,
        "rebalance_timeout_ms": 30000, "member_id": member_id, "group_instance_id": instance_id,
        "protocol_type": "consumer",
        "protocols": [{"name": "range", "metadata": {"$subscription": list(topics)}}],
        "reason": None}, conn=conn, **kw)


def sync_group(id, group, join_id, assignment, v=5, conn=1, **kw):
    """assignment: {topic: [partitions]} for the (only) member."""
    return step(id, "SyncGroup", v, {
        "group_id": group, "generation_id": ref(f"{join_id}.generation_id"),
        "member_id": ref(f"{join_id}.member_id"), "group_instance_id": None,
        "protocol_type": "consumer", "protocol_name": "range",
        "assignments": [{"member_id": ref(f"{join_id}.member_id"),
                         "assignment": {"$assignment": assignment}}]}, conn=conn, **kw)


def group_member(prefix, group, topics, assignment, conn=1):
    """FindCoordinator, JoinGroup (MEMBER_ID_REQUIRED, then again with the id), SyncGroup:
    a group with one member. Steps: {prefix}-find, -join0, -join, -sync."""
    return [
        find_coordinator(f"{prefix}-find", group, 0, conn=conn),
        join_group(f"{prefix}-join0", group, topics=topics, conn=conn, until={
            "path": "error_code", "not_in": RETRIABLE_COORDINATOR, "timeout_ms": 30000,
            "interval_ms": 200}),
        join_group(f"{prefix}-join", group, member_id=ref(f"{prefix}-join0.member_id"),
                   topics=topics, conn=conn),
        sync_group(f"{prefix}-sync", group, f"{prefix}-join", assignment, conn=conn),
    ]


def txn_setup(S, tid, init_id="init", topics=None, conn=1, timeout_ms=60000):
    """Find the transaction coordinator, then InitProducerId."""
    return [find_coordinator(f"{init_id}-find", tid, 1, conn=conn),
            init_pid(init_id, tid, timeout_ms=timeout_ms, conn=conn)]


# --- foundation -----------------------------------------------------------------

@scenario("api-versions")
def _api_versions(S):
    """ApiVersions v0..v4, and an unknown version (KIP-511: answered in the v0
    format with UNSUPPORTED_VERSION and ApiVersions' own range)."""
    steps = [step(f"v{v}", "ApiVersions", v, {"client_software_name": "doze-conformance",
                                              "client_software_version": "1.0"} if v >= 3 else {})
             for v in range(5)]
    steps.append(step("v99", "ApiVersions", 99, {"client_software_name": "doze-conformance",
                                                 "client_software_version": "1.0"},
                      body_version=4, decode_version=0))
    steps.append(step("v3-empty-name", "ApiVersions", 3, {"client_software_name": "",
                                                          "client_software_version": ""}, conn=2))
    return steps


@scenario("endtxn-decisions")
def _endtxn_decisions(S):
    """EndTxn's answers to every decision after every state: commit then commit
    again (success), commit then abort (INVALID_TXN_STATE), abort then abort,
    abort then commit, a stale epoch, no transaction, unknown ids."""
    t = f"{S}-t"
    a, b, c = f"{S}-a", f"{S}-b", f"{S}-c"
    return [
        *create_topics("create", [t]),
        *txn_setup(S, a, "ia"),
        add_partitions("a-add", a, "ia", {t: [0]}),
        produce("a-produce", {t: {0: txn_batch("ia", ["a1"], 0)}}, tid=a),
        end_txn("a-commit", a, "ia", True),
        wait_txn_state("a-wait", a, "CompleteCommit"),
        end_txn("a-commit-again", a, "ia", True),
        end_txn("a-abort-after-commit", a, "ia", False),
        init_pid("ib", b),
        add_partitions("b-add", b, "ib", {t: [0]}),
        produce("b-produce", {t: {0: txn_batch("ib", ["b1"], 0)}}, tid=b),
        end_txn("b-abort", b, "ib", False),
        wait_txn_state("b-wait", b, "CompleteAbort"),
        end_txn("b-abort-again", b, "ib", False),
        end_txn("b-commit-after-abort", b, "ib", True),
        init_pid("ic", c),
        end_txn("c-commit-no-txn", c, "ic", True),
        end_txn("c-abort-no-txn", c, "ic", False),
        init_pid("ic2", c, poll=False),
        end_txn("c-stale-epoch-v4", c, "ic", True),
        end_txn("c-stale-epoch-v1", c, "ic", False, v=1),
        end_txn("c-wrong-pid", c, "ic2", True, producer_id=ref("ic2.producer_id", 1000)),
        end_txn("unknown-tid", f"{S}-nope", "ic2", True),
        fetch("fetch", {t: {0: 0}}),
    ]


def one_txn(prefix, tid, init_id, topic, partitions, values_seq0=("v",), conn=1):
    """Add `partitions` of `topic` to the transaction and produce one batch to each."""
    return [add_partitions(f"{prefix}-add", tid, init_id, {topic: list(partitions)}, conn=conn),
            produce(f"{prefix}-produce", {topic: {p: txn_batch(init_id, list(values_seq0), 0)
                                                  for p in partitions}}, tid=tid, conn=conn)]


WINDOW_PARTITIONS = 50
AFTER_MARKERS = "doze-endtxn-answers-after-markers"


_AFTER_MARKERS_WHY = ("doze writes the markers before it answers EndTxn, so a request that "
                      "follows EndTxn finds the transaction complete; Kafka answers EndTxn after "
                      "PrepareCommit and answers CONCURRENT_TRANSACTIONS until the markers are written")


@scenario("endtxn-while-preparing", known_differences={
    "abort-follow": {"name": AFTER_MARKERS, "doze": {"error_code": 48}, "or_as_kafka": True, "why": _AFTER_MARKERS_WHY},
    "commit-follow": {"name": AFTER_MARKERS, "doze": {"error_code": 0}, "or_as_kafka": True, "why": _AFTER_MARKERS_WHY},
    "add-follow": {"name": AFTER_MARKERS, "doze": {"results_by_topic": [{"results_by_partition": [
        {"partition_error_code": 0}]}]}, "or_as_kafka": True, "why": _AFTER_MARKERS_WHY + " (here: a new transaction starts)"},
    "add-final": {"name": AFTER_MARKERS, "doze": {"transaction_states": [
        {"transaction_state": "Ongoing"}]}, "or_as_kafka": True, "why": "the transaction add-follow started"},
    "init-follow": {"name": AFTER_MARKERS, "doze": {"error_code": 0}, "or_as_kafka": True, "why": _AFTER_MARKERS_WHY},
})
def _endtxn_while_preparing(S):
    """Requests that arrive while EndTxn's markers are still being written (Kafka:
    CONCURRENT_TRANSACTIONS). A transaction over 50 partitions makes Kafka's window
    wide; the follow-up goes on a second connection 5 ms after EndTxn was sent, before
    its answer (pipelined)."""
    t = f"{S}-t"
    n = WINDOW_PARTITIONS
    steps = [*create_topics("create", [(t, n)])]
    variants = [("abort", "other decision"), ("commit", "same decision again"),
                ("add", "AddPartitionsToTxn"), ("init", "InitProducerId")]
    for name, _ in variants:
        tid = f"{S}-{name}"
        i = f"i-{name}"
        steps += txn_setup(S, tid, i)
        steps += one_txn(name, tid, i, t, range(n))
        steps.append(end_txn(f"{name}-end", tid, i, True, nowait=True))
        if name == "abort":
            steps.append(end_txn(f"{name}-follow", tid, i, False, conn=2, delay_ms=5))
        elif name == "commit":
            steps.append(end_txn(f"{name}-follow", tid, i, True, conn=2, delay_ms=5))
        elif name == "add":
            steps.append(add_partitions(f"{name}-follow", tid, i, {t: [0]}, conn=2, delay_ms=5))
        else:
            steps.append(init_pid(f"{name}-follow", tid, conn=2, delay_ms=5, poll=False,
                                  retry=RETRY_CONCURRENT))
        steps.append({"await": f"{name}-end"})
        steps.append(describe_txn(f"{name}-final", [tid], until={
            "path": "transaction_states.0.transaction_state",
            "in": ["CompleteCommit", "CompleteAbort", "Empty", "Ongoing"],
            "timeout_ms": 30000, "interval_ms": 50}))
    steps.append(list_offsets("lso", {t: {p: -1 for p in range(3)}}, isolation=1))
    return steps


@scenario("init-producer-id", known_differences={
    "b2-while-open": {"name": FINISHES_ABORT, "doze": {"error_code": 0},
                      "why": "Kafka fences, starts the abort and answers CONCURRENT_TRANSACTIONS (the "
                             "client retries); doze finishes the abort (markers durable) and answers"},
})
def _init_producer_id(S):
    """InitProducerId: a new id; re-init bumps the epoch and fences the old one;
    re-init while a transaction is open aborts it; KIP-360 bumps with the current
    (id, epoch); idempotent (no transactional id); bad timeouts; old versions."""
    t = f"{S}-t"
    a, b, c = f"{S}-a", f"{S}-b", f"{S}-c"
    return [
        *create_topics("create", [t]),
        *txn_setup(S, a, "a1"),
        init_pid("a2", a, poll=False),
        add_partitions("a-fenced-add", a, "a1", {t: [0]}),
        add_partitions("a-fenced-add-v1", a, "a1", {t: [0]}, v=1),
        produce("a-fenced-produce", {t: {0: txn_batch("a1", ["x"], 0)}}, tid=a),
        end_txn("a-fenced-end", a, "a1", True),
        init_pid("a3-kip360", a, poll=False, producer_id=pid_of("a2"), producer_epoch=epoch_of("a2")),
        init_pid("a4-kip360-stale", a, poll=False, producer_id=pid_of("a2"),
                 producer_epoch=epoch_of("a2")),
        init_pid("a5-kip360-wrong-pid", a, poll=False, producer_id=ref("a2.producer_id", 1000),
                 producer_epoch=epoch_of("a3-kip360")),
        init_pid("a6-v0", a, v=0, poll=False),
        init_pid("a7-v2", a, v=2, poll=False),
        # re-init while a transaction is open
        init_pid("b1", b),
        add_partitions("b-add", b, "b1", {t: [0]}),
        produce("b-produce", {t: {0: txn_batch("b1", ["b"], 0)}}, tid=b),
        init_pid("b2-while-open", b, poll=False, retry=RETRY_CONCURRENT),
        describe_txn("b-state", [b]),
        fetch("b-fetch", {t: {0: 0}}),
        # idempotent producers
        step("idem1", "InitProducerId", 5, {"transactional_id": None, "transaction_timeout_ms": 60000,
                                            "producer_id": -1, "producer_epoch": -1}),
        step("idem2", "InitProducerId", 5, {"transactional_id": None, "transaction_timeout_ms": 0,
                                            "producer_id": -1, "producer_epoch": -1}),
        step("idem-v0", "InitProducerId", 0, {"transactional_id": None, "transaction_timeout_ms": 0}),
        # timeouts
        init_pid("c-timeout-over-max", c, timeout_ms=900001, poll=False),
        init_pid("c-timeout-zero", c, timeout_ms=0, poll=False),
        init_pid("c-timeout-negative", c, timeout_ms=-1, poll=False),
        init_pid("c-timeout-max", c, timeout_ms=900000),
        init_pid("empty-tid", "", poll=False),
    ]


@scenario("add-partitions", known_differences={
    "i2": {"name": FINISHES_ABORT, "doze": {"error_code": 0}, "why": "see init-producer-id"},
})
def _add_partitions(S):
    """AddPartitionsToTxn: success, again, unknown topic (the others are not attempted),
    unknown partition, stale epoch, wrong producer id, unknown transactional id, v0-v3."""
    t, u = f"{S}-t", f"{S}-u"
    a = f"{S}-a"
    return [
        *create_topics("create", [(t, 3), (u, 1)]),
        *txn_setup(S, a, "i"),
        add_partitions("add", a, "i", {t: [0, 1]}),
        add_partitions("add-again", a, "i", {t: [0, 1], u: [0]}),
        add_partitions("add-unknown-topic", a, "i", {t: [2], f"{S}-nope": [0]}),
        add_partitions("add-unknown-partition", a, "i", {t: [2, 7]}),
        add_partitions("add-stale-epoch", a, "i", {t: [2]}, epoch=epoch_of("i", -1)),
        add_partitions("add-future-epoch", a, "i", {t: [2]}, epoch=epoch_of("i", 1)),
        step("add-wrong-pid", "AddPartitionsToTxn", 3, {
            "transactional_id": a, "producer_id": ref("i.producer_id", 1000),
            "producer_epoch": epoch_of("i"), "topics": [{"name": t, "partitions": [2]}]}),
        step("add-unknown-tid", "AddPartitionsToTxn", 3, {
            "transactional_id": f"{S}-nope", "producer_id": pid_of("i"),
            "producer_epoch": epoch_of("i"), "topics": [{"name": t, "partitions": [2]}]}),
        add_partitions("add-v0", a, "i", {t: [2]}, v=0),
        add_partitions("add-v2", a, "i", {u: [0]}, v=2),
        describe_txn("describe", [a]),
        end_txn("commit", a, "i", True),
        wait_txn_state("wait", a, "CompleteCommit"),
        add_partitions("add-after-commit", a, "i", {t: [0]}),
        describe_txn("describe-after", [a]),
        init_pid("i2", a, poll=False, retry=RETRY_CONCURRENT),
        add_partitions("add-fenced-v1", a, "i", {t: [0]}, v=1),
        add_partitions("add-fenced-v3", a, "i", {t: [0]}, v=3),
    ]


@scenario("add-offsets")
def _add_offsets(S):
    """AddOffsetsToTxn: success, again, empty group id, stale epoch, wrong producer id,
    unknown transactional id, old versions, then EndTxn commit."""
    a, g = f"{S}-a", f"{S}-g"
    return [
        *txn_setup(S, a, "i"),
        find_coordinator("group-find", g, 0),
        add_offsets("add", a, "i", g),
        add_offsets("add-again", a, "i", g),
        add_offsets("add-other-group", a, "i", f"{S}-g2"),
        add_offsets("add-empty-group", a, "i", ""),
        step("add-stale-epoch", "AddOffsetsToTxn", 4, {
            "transactional_id": a, "producer_id": pid_of("i"), "producer_epoch": epoch_of("i", -1),
            "group_id": g}),
        step("add-stale-epoch-v1", "AddOffsetsToTxn", 1, {
            "transactional_id": a, "producer_id": pid_of("i"), "producer_epoch": epoch_of("i", -1),
            "group_id": g}),
        step("add-wrong-pid", "AddOffsetsToTxn", 4, {
            "transactional_id": a, "producer_id": ref("i.producer_id", 1000),
            "producer_epoch": epoch_of("i"), "group_id": g}),
        step("add-unknown-tid", "AddOffsetsToTxn", 4, {
            "transactional_id": f"{S}-nope", "producer_id": pid_of("i"),
            "producer_epoch": epoch_of("i"), "group_id": g}),
        add_offsets("add-v0", a, "i", g, v=0),
        describe_txn("describe", [a]),
        end_txn("commit", a, "i", True),
        wait_txn_state("wait", a, "CompleteCommit"),
        describe_txn("describe-after", [a]),
    ]


def txn_offset_commit(id, tid, init_id, group, offsets, v=4, generation=-1, member="", conn=1):
    """offsets: {topic: {partition: offset}}."""
    req = {"transactional_id": tid, "group_id": group, "producer_id": pid_of(init_id),
           "producer_epoch": epoch_of(init_id),
           "topics": [{"name": t, "partitions": [
               {"partition_index": p, "committed_offset": o, "committed_leader_epoch": -1,
                "committed_metadata": "m"} for p, o in ps.items()]} for t, ps in offsets.items()]}
    if v >= 3:
        req.update(generation_id=generation, member_id=member, group_instance_id=None)
    return step(id, "TxnOffsetCommit", v, req, conn=conn)


def offset_fetch(id, group, topics, v=9, require_stable=False, conn=1, **kw):
    """topics: {topic: [partitions]} or None (all)."""
    tl = None if topics is None else [{"name": t, "partition_indexes": ps} for t, ps in topics.items()]
    if v >= 8:
        g = {"group_id": group, "topics": tl}
        if v >= 9:
            g.update(member_id=None, member_epoch=-1)
        req = {"groups": [g], "require_stable": require_stable}
    else:
        req = {"group_id": group, "topics": tl}
        if v >= 7:
            req["require_stable"] = require_stable
    return step(id, "OffsetFetch", v, req, conn=conn, **kw)


def offset_commit(id, group, offsets, v=9, generation=-1, member="", conn=1, **kw):
    req = {"group_id": group, "generation_id_or_member_epoch": generation, "member_id": member,
           "topics": [{"name": t, "partitions": [
               {"partition_index": p, "committed_offset": o, "committed_leader_epoch": -1,
                "committed_metadata": ""} for p, o in ps.items()]} for t, ps in offsets.items()]}
    if v >= 7:
        req["group_instance_id"] = None
    if 2 <= v <= 4:
        req["retention_time_ms"] = -1
    return step(id, "OffsetCommit", v, req, conn=conn, **kw)


@scenario("txn-offset-commit")
def _txn_offset_commit(S):
    """TxnOffsetCommit in a group with a member (JoinGroup/SyncGroup first): success,
    stale generation, unknown member, without AddOffsetsToTxn, unknown partition,
    v0-v4, then commit and OffsetFetch."""
    t, g, a, b = f"{S}-t", f"{S}-g", f"{S}-a", f"{S}-b"
    gen = ref("m-join.generation_id")
    mem = ref("m-join.member_id")
    return [
        *create_topics("create", [(t, 2)]),
        *group_member("m", g, [t], {t: [0, 1]}),
        *txn_setup(S, a, "i"),
        add_offsets("add-offsets", a, "i", g),
        txn_offset_commit("commit-ok", a, "i", g, {t: {0: 5}}, generation=gen, member=mem),
        txn_offset_commit("commit-stale-generation", a, "i", g, {t: {0: 6}},
                          generation=ref("m-join.generation_id", -1), member=mem),
        txn_offset_commit("commit-future-generation", a, "i", g, {t: {0: 6}},
                          generation=ref("m-join.generation_id", 1), member=mem),
        txn_offset_commit("commit-unknown-member", a, "i", g, {t: {0: 6}}, generation=gen,
                          member="nobody"),
        txn_offset_commit("commit-no-member", a, "i", g, {t: {1: 7}}),
        txn_offset_commit("commit-v2", a, "i", g, {t: {1: 8}}, v=2),
        txn_offset_commit("commit-v0", a, "i", g, {t: {1: 9}}, v=0),
        txn_offset_commit("commit-unknown-partition", a, "i", g, {t: {9: 1}}, generation=gen,
                          member=mem),
        txn_offset_commit("commit-unknown-topic", a, "i", g, {f"{S}-nope": {0: 1}},
                          generation=gen, member=mem),
        txn_offset_commit("commit-other-group", a, "i", f"{S}-g2", {t: {0: 1}}),
        txn_offset_commit("commit-other-group-v3", a, "i", f"{S}-g2", {t: {0: 1}}, v=3),
        step("commit-stale-epoch", "TxnOffsetCommit", 4, {
            "transactional_id": a, "group_id": g, "producer_id": pid_of("i"),
            "producer_epoch": epoch_of("i", -1), "generation_id": -1, "member_id": "",
            "group_instance_id": None, "topics": [{"name": t, "partitions": [
                {"partition_index": 0, "committed_offset": 1, "committed_leader_epoch": -1,
                 "committed_metadata": ""}]}]}),
        *txn_setup(S, b, "ib"),
        txn_offset_commit("b-commit-without-add-v4", b, "ib", g, {t: {0: 1}}),
        txn_offset_commit("b-commit-without-add-v3", b, "ib", g, {t: {0: 1}}, v=3),
        offset_fetch("fetch-stable", g, {t: [0, 1]}, require_stable=True),
        offset_fetch("fetch-unstable-ok", g, {t: [0, 1]}, require_stable=False),
        end_txn("end-commit", a, "i", True),
        wait_txn_state("wait", a, "CompleteCommit"),
        offset_fetch("fetch-after", g, {t: [0, 1]}, require_stable=True),
        step("heartbeat", "Heartbeat", 4, {"group_id": g, "generation_id": gen, "member_id": mem,
                                           "group_instance_id": None}),
    ]


@scenario("offset-fetch-require-stable")
def _offset_fetch_require_stable(S):
    """OffsetFetch with require_stable (KIP-447) while a transaction holds offsets of the
    group (UNSTABLE_OFFSET_COMMIT), without it, old versions; after commit and after abort."""
    t, g, a = f"{S}-t", f"{S}-g", f"{S}-a"
    return [
        *create_topics("create", [(t, 2)]),
        find_coordinator("group-find", g, 0),
        offset_commit("commit-plain", g, {t: {0: 1, 1: 1}}),
        *txn_setup(S, a, "i"),
        add_offsets("add-offsets", a, "i", g),
        txn_offset_commit("txn-commit", a, "i", g, {t: {0: 10}}),
        offset_fetch("v9-stable", g, {t: [0, 1]}, require_stable=True),
        offset_fetch("v9-stable-all", g, None, require_stable=True),
        offset_fetch("v9-unstable", g, {t: [0, 1]}),
        offset_fetch("v8-stable", g, {t: [0, 1]}, v=8, require_stable=True),
        offset_fetch("v7-stable", g, {t: [0, 1]}, v=7, require_stable=True),
        offset_fetch("v6-stable-v7-only", g, {t: [0, 1]}, v=6),
        offset_fetch("v1", g, {t: [0, 1]}, v=1),
        end_txn("end-abort", a, "i", False),
        wait_txn_state("wait-abort", a, "CompleteAbort"),
        offset_fetch("after-abort", g, {t: [0, 1]}, require_stable=True),
        add_offsets("add-offsets-2", a, "i", g),
        txn_offset_commit("txn-commit-2", a, "i", g, {t: {1: 20}}),
        offset_fetch("v7-stable-2", g, {t: [0, 1]}, v=7, require_stable=True),
        end_txn("end-commit", a, "i", True),
        wait_txn_state("wait-commit", a, "CompleteCommit"),
        offset_fetch("after-commit", g, {t: [0, 1]}, require_stable=True),
    ]


@scenario("produce-transactional")
def _produce_transactional(S):
    """Transactional Produce: to a partition added and not added, with a stale epoch,
    a wrong producer id, no transactional id, out-of-order and duplicate sequences,
    then commit and read."""
    t, a = f"{S}-t", f"{S}-a"
    return [
        *create_topics("create", [(t, 3)]),
        *txn_setup(S, a, "i"),
        add_partitions("add", a, "i", {t: [0]}),
        produce("p0-seq0", {t: {0: txn_batch("i", ["a", "b"], 0)}}, tid=a),
        produce("p0-seq2", {t: {0: txn_batch("i", ["c"], 2)}}, tid=a),
        produce("p0-duplicate-seq0", {t: {0: txn_batch("i", ["a", "b"], 0)}}, tid=a),
        produce("p0-duplicate-seq2", {t: {0: txn_batch("i", ["c"], 2)}}, tid=a),
        produce("p0-out-of-order-seq5", {t: {0: txn_batch("i", ["d"], 5)}}, tid=a),
        produce("p0-stale-epoch", {t: {0: txn_batch("i", ["e"], 3, epoch=epoch_of("i", -1))}}, tid=a),
        produce("p0-future-epoch", {t: {0: txn_batch("i", ["e"], 3, epoch=epoch_of("i", 1))}}, tid=a),
        produce("p1-not-added", {t: {1: txn_batch("i", ["f"], 0)}}, tid=a),
        produce("p0-no-tid", {t: {0: txn_batch("i", ["g"], 3)}}, tid=None),
        produce("p0-other-tid", {t: {0: txn_batch("i", ["g"], 3)}}, tid=f"{S}-nope"),
        produce("p0-wrong-pid", {t: {0: batch(["h"], ref("i.producer_id", 1000), epoch_of("i"), 3,
                                               transactional=True)}}, tid=a),
        produce("p0-v3", {t: {0: txn_batch("i", ["i"], 3)}}, tid=a, v=3),
        produce("p0-seq4-v7", {t: {0: txn_batch("i", ["j"], 4)}}, tid=a, v=7),
        add_partitions("add-p1", a, "i", {t: [1]}),
        produce("p1-seq0-first-not-zero", {t: {1: txn_batch("i", ["k"], 3)}}, tid=a),
        produce("p1-seq0", {t: {1: txn_batch("i", ["k"], 0)}}, tid=a),
        end_txn("commit", a, "i", True),
        wait_txn_state("wait", a, "CompleteCommit"),
        produce("p0-after-commit", {t: {0: txn_batch("i", ["l"], 5)}}, tid=a),
        fetch("read", {t: {0: 0, 1: 0}}, isolation=1),
    ]


@scenario("fetch-read-committed")
def _fetch_read_committed(S):
    """Fetch with read_committed vs read_uncommitted: the last stable offset, the
    aborted transactions list, committed/aborted/open transactions mixed with plain
    records, before and after the open one ends."""
    t, a, b, c = f"{S}-t", f"{S}-a", f"{S}-b", f"{S}-c"
    plain = lambda id_, v: produce(id_, {t: {0: batch([v])}})  # noqa: E731
    return [
        *create_topics("create", [(t, 1)]),
        plain("plain-1", "p1"),
        *txn_setup(S, a, "ia"),
        *txn_setup(S, b, "ib"),
        *txn_setup(S, c, "ic"),
        add_partitions("a-add", a, "ia", {t: [0]}),
        produce("a-1", {t: {0: txn_batch("ia", ["a1", "a2"], 0)}}, tid=a),
        add_partitions("b-add", b, "ib", {t: [0]}),
        produce("b-1", {t: {0: txn_batch("ib", ["b1"], 0)}}, tid=b),
        plain("plain-2", "p2"),
        produce("a-2", {t: {0: txn_batch("ia", ["a3"], 2)}}, tid=a),
        end_txn("a-abort", a, "ia", False),
        wait_txn_state("a-wait", a, "CompleteAbort"),
        add_partitions("c-add", c, "ic", {t: [0]}),
        produce("c-1", {t: {0: txn_batch("ic", ["c1"], 0)}}, tid=c),
        end_txn("c-commit", c, "ic", True),
        wait_txn_state("c-wait", c, "CompleteCommit"),
        plain("plain-3", "p3"),
        fetch("uncommitted-0", {t: {0: 0}}, isolation=0),
        fetch("committed-0", {t: {0: 0}}, isolation=1),
        fetch("committed-from-5", {t: {0: 5}}, isolation=1),
        list_offsets("lso", {t: {0: -1}}, isolation=1),
        list_offsets("hw", {t: {0: -1}}, isolation=0),
        end_txn("b-abort", b, "ib", False),
        wait_txn_state("b-wait", b, "CompleteAbort"),
        fetch("uncommitted-after", {t: {0: 0}}, isolation=0),
        fetch("committed-after", {t: {0: 0}}, isolation=1),
        fetch("committed-after-from-3", {t: {0: 3}}, isolation=1),
        fetch("committed-v4", {t: {0: 0}}, isolation=1, v=4),
        list_offsets("lso-after", {t: {0: -1}}, isolation=1),
    ]


@scenario("list-offsets-isolation")
def _list_offsets_isolation(S):
    """ListOffsets latest/earliest/max-timestamp/by-time under both isolation levels,
    with an open transaction, then after it commits; unknown topic/partition; versions."""
    t, a = f"{S}-t", f"{S}-a"
    cfg = {"segment.ms": "3153600000000"}    # no time-based roll for the old timestamps below
    return [
        *create_topics("create", [(t, 2, cfg)]),
        produce("plain", {t: {0: batch(["x", "y"], timestamp_ms=1700000000000)}}),
        *txn_setup(S, a, "i"),
        add_partitions("add", a, "i", {t: [0]}),
        produce("txn", {t: {0: batch(["t1"], pid_of("i"), epoch_of("i"), 0, transactional=True,
                                     timestamp_ms=1700000001000)}}, tid=a),
        list_offsets("latest-uncommitted", {t: {0: -1, 1: -1}}, isolation=0),
        list_offsets("latest-committed", {t: {0: -1, 1: -1}}, isolation=1),
        list_offsets("earliest-committed", {t: {0: -2}}, isolation=1),
        list_offsets("max-ts-uncommitted", {t: {0: -3}}, isolation=0),
        list_offsets("max-ts-committed", {t: {0: -3}}, isolation=1),
        list_offsets("by-time-committed", {t: {0: 1700000000500}}, isolation=1),
        list_offsets("by-time-uncommitted", {t: {0: 1700000000500}}, isolation=0),
        list_offsets("by-time-0", {t: {0: 0}}, isolation=0),
        list_offsets("by-time-future", {t: {0: 1800000000000}}, isolation=0),
        list_offsets("earliest-local", {t: {0: -4}}, isolation=0),
        list_offsets("v1", {t: {0: -1}}, isolation=0, v=1),
        list_offsets("v2-committed", {t: {0: -1}}, isolation=1, v=2),
        list_offsets("v5-committed", {t: {0: -1}}, isolation=1, v=5),
        list_offsets("v11-committed", {t: {0: -1}}, isolation=1, v=11),
        list_offsets("unknown", {f"{S}-nope": {0: -1}, t: {5: -1}}, isolation=0),
        end_txn("commit", a, "i", True),
        wait_txn_state("wait", a, "CompleteCommit"),
        list_offsets("latest-committed-after", {t: {0: -1}}, isolation=1),
        list_offsets("max-ts-committed-after", {t: {0: -3}}, isolation=1),
    ]


@scenario("describe-transactions")
def _describe_transactions(S):
    """DescribeTransactions in every state: Empty, Ongoing (with its partitions),
    PrepareCommit done (CompleteCommit), CompleteAbort, unknown id, several at once."""
    t, a, b = f"{S}-t", f"{S}-a", f"{S}-b"
    return [
        *create_topics("create", [(t, 2)]),
        *txn_setup(S, a, "ia"),
        describe_txn("empty", [a]),
        add_partitions("add", a, "ia", {t: [0, 1]}),
        describe_txn("ongoing-added", [a]),
        produce("produce", {t: {0: txn_batch("ia", ["v"], 0)}}, tid=a),
        describe_txn("ongoing", [a]),
        end_txn("commit", a, "ia", True),
        wait_txn_state("complete-commit", a, "CompleteCommit"),
        *txn_setup(S, b, "ib"),
        add_offsets("b-add-offsets", b, "ib", f"{S}-g"),
        describe_txn("b-ongoing-offsets", [b]),
        end_txn("b-abort", b, "ib", False),
        wait_txn_state("complete-abort", b, "CompleteAbort"),
        describe_txn("unknown", [f"{S}-nope"]),
        describe_txn("several", [a, f"{S}-nope", b]),
        describe_txn("none", []),
    ]


def list_txn(id, states=(), pids=(), v=1, duration=-1, **kw):
    req = {"state_filters": list(states), "producer_id_filters": list(pids)}
    if v >= 1:
        req["duration_filter"] = duration
    return step(id, "ListTransactions", v, req, **kw)


@scenario("list-transactions")
def _list_transactions(S):
    """ListTransactions filtered by producer id (other scenarios' transactions are in
    the same broker) and state; an unknown state filter; the duration filter (v1)."""
    t, a, b = f"{S}-t", f"{S}-a", f"{S}-b"
    keep = {"path": "transaction_states", "field": "transactional_id", "prefix": S}
    return [
        *create_topics("create", [(t, 1)]),
        *txn_setup(S, a, "ia"),
        *txn_setup(S, b, "ib"),
        add_partitions("a-add", a, "ia", {t: [0]}),
        list_txn("by-pid-a", pids=[pid_of("ia")]),
        list_txn("by-pid-b", pids=[pid_of("ib")]),
        list_txn("by-pid-and-state", states=["Ongoing"], pids=[pid_of("ia")]),
        list_txn("by-pid-wrong-state", states=["CompleteCommit"], pids=[pid_of("ia")]),
        list_txn("ongoing-mine", states=["Ongoing"], keep=keep),
        list_txn("empty-mine", states=["Empty"], keep=keep),
        list_txn("unknown-state", states=["Ongoing", "Bogus"], pids=[pid_of("ia")]),
        list_txn("duration-long", pids=[pid_of("ia")], duration=3600000),
        list_txn("duration-zero", pids=[pid_of("ia")], duration=0),
        list_txn("v0", pids=[pid_of("ia")], v=0),
        end_txn("a-commit", a, "ia", True),
        list_txn("after-commit", pids=[pid_of("ia")], until={
            "path": "transaction_states.0.transaction_state", "equals": "CompleteCommit",
            "timeout_ms": 30000, "interval_ms": 50}),
        list_txn("pid-unknown", pids=[ref("ib.producer_id", 100000)]),
    ]


@scenario("describe-producers")
def _describe_producers(S):
    """DescribeProducers: idempotent and transactional producers' state per partition
    (last sequence, epoch, current transaction start offset); unknown topic/partition."""
    t, a = f"{S}-t", f"{S}-a"
    return [
        *create_topics("create", [(t, 2)]),
        step("idem", "InitProducerId", 5, {"transactional_id": None, "transaction_timeout_ms": 0,
                                           "producer_id": -1, "producer_epoch": -1}),
        produce("idem-1", {t: {0: batch(["a", "b", "c"], pid_of("idem"), epoch_of("idem"), 0)}}),
        produce("idem-2", {t: {0: batch(["d"], pid_of("idem"), epoch_of("idem"), 3)}}),
        *txn_setup(S, a, "i"),
        add_partitions("add", a, "i", {t: [0, 1]}),
        produce("txn-1", {t: {0: txn_batch("i", ["t"], 0), 1: txn_batch("i", ["u"], 0)}}, tid=a),
        step("during", "DescribeProducers", 0, {"topics": [{"name": t, "partition_indexes": [0, 1]}]}),
        end_txn("commit", a, "i", True),
        wait_txn_state("wait", a, "CompleteCommit"),
        step("after", "DescribeProducers", 0, {"topics": [{"name": t, "partition_indexes": [0, 1]}]}),
        step("unknown", "DescribeProducers", 0, {"topics": [
            {"name": t, "partition_indexes": [7]}, {"name": f"{S}-nope", "partition_indexes": [0]}]}),
    ]


@scenario("transaction-timeout", broker_settings={
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": 500})
def _transaction_timeout(S):
    """A transaction with a 1 s timeout is aborted by the coordinator (the check runs
    every transaction.abort.timed.out.transaction.cleanup.interval.ms, set low here);
    the producer's next calls are fenced; a new InitProducerId works."""
    t, a = f"{S}-t", f"{S}-a"
    return [
        *create_topics("create", [(t, 1)]),
        *txn_setup(S, a, "i", timeout_ms=1000),
        add_partitions("add", a, "i", {t: [0]}),
        produce("produce", {t: {0: txn_batch("i", ["v"], 0)}}, tid=a),
        {"sleep_ms": 1500},
        wait_txn_state("aborted", a, "CompleteAbort"),
        add_partitions("fenced-add", a, "i", {t: [0]}),
        produce("fenced-produce", {t: {0: txn_batch("i", ["w"], 1)}}, tid=a),
        end_txn("fenced-commit", a, "i", True),
        end_txn("fenced-abort", a, "i", False),
        add_offsets("fenced-add-offsets", a, "i", f"{S}-g"),
        fetch("read-uncommitted", {t: {0: 0}}),
        fetch("read-committed", {t: {0: 0}}, isolation=1),
        init_pid("reinit", a, poll=False),
        add_partitions("add-after", a, "reinit", {t: [0]}),
        end_txn("abort-after", a, "reinit", False),
    ]


@scenario("late-endtxn-next-txn")
def _late_endtxn_next_txn(S):
    """KAFKA-17754's shape, as Jepsen found it, on the classic protocol (transaction
    version 1: EndTxn v4, Produce v9). One producer (one transactional id, one id and
    epoch) on two connections. T1: AddPartitionsToTxn, Produce "t1", then EndTxn(commit)
    on connection 2 -- it stands in for the client's retry after its first EndTxn on
    connection 1 went unanswered -- and T1's markers complete (CompleteCommit). T2:
    AddPartitionsToTxn of the same partition, Produce "t2-a". Then T1's first
    EndTxn(commit) arrives late on connection 1, with the same producer id and epoch:
    the coordinator cannot tell it from T2's own, so it commits T2 there and then, with
    "t2-a" only. Then "t2-b" (T2's next sequence, same epoch) and the application's
    EndTxn(commit) of T2; Fetch read_uncommitted and read_committed from 0, ListOffsets
    and DescribeProducers show what a consumer sees."""
    t, a = f"{S}-t", f"{S}-a"
    settled = {"path": "transaction_states.0.transaction_state",
               "in": ["CompleteCommit", "CompleteAbort", "Ongoing", "Empty"], "timeout_ms": 30000,
               "interval_ms": 50}
    return [
        *create_topics("create", [(t, 1)]),
        *txn_setup(S, a, "i"),
        # --- T1
        add_partitions("t1-add", a, "i", {t: [0]}),
        produce("t1-produce", {t: {0: txn_batch("i", ["t1"], 0)}}, tid=a),
        # the client's first EndTxn(commit) went out on connection 1 and is held up in the
        # network (it is sent below, late); the client retries it on connection 2
        end_txn("t1-commit-retry", a, "i", True, conn=2),
        wait_txn_state("t1-complete", a, "CompleteCommit"),
        # --- T2: same id, same epoch (the classic protocol bumps no epoch at a commit)
        add_partitions("t2-add", a, "i", {t: [0]}),
        produce("t2-a", {t: {0: txn_batch("i", ["t2-a"], 1)}}, tid=a),
        describe_txn("t2-ongoing", [a]),
        # --- T1's first EndTxn(commit) arrives now, on connection 1
        end_txn("t1-commit-late", a, "i", True, conn=1),
        describe_txn("after-late", [a], until=settled),
        list_offsets("after-late-lso", {t: {0: -1}}, isolation=1),
        # --- T2 goes on: its next record, then the application's commit
        produce("t2-b", {t: {0: txn_batch("i", ["t2-b"], 2)}}, tid=a),
        describe_txn("after-t2-b", [a]),
        end_txn("t2-commit", a, "i", True),
        describe_txn("final", [a], until=settled),
        # --- what a consumer sees
        fetch("read-uncommitted", {t: {0: 0}}, isolation=0),
        fetch("read-committed", {t: {0: 0}}, isolation=1),
        list_offsets("hw", {t: {0: -1}}, isolation=0),
        list_offsets("lso", {t: {0: -1}}, isolation=1),
        step("producers", "DescribeProducers", 0, {"topics": [{"name": t, "partition_indexes": [0]}]}),
    ]


def write_txn_markers(id, markers, v=1, **kw):
    """WriteTxnMarkers: markers = [(producer_id, producer_epoch, commit, {topic: [partitions]},
    coordinator_epoch[, transaction_version (v2+)])]. v2 is recorder.KAFKA_SCHEMAS' (doze's
    codec has v1)."""
    out = []
    for m in markers:
        pid, epoch, commit, topics, coordinator_epoch = m[:5]
        entry = {"producer_id": pid, "producer_epoch": epoch, "transaction_result": commit,
                 "topics": [{"name": n, "partition_indexes": ps} for n, ps in topics.items()],
                 "coordinator_epoch": coordinator_epoch}
        if v >= 2:
            entry["transaction_version"] = m[5] if len(m) > 5 else 0
        out.append(entry)
    return step(id, "WriteTxnMarkers", v, {"markers": out}, **kw)


def describe_producers(id, topics, **kw):
    """DescribeProducers v0 (what the admin client sends): topics = {name: [partitions]}."""
    return step(id, "DescribeProducers", 0, {"topics": [{"name": n, "partition_indexes": ps}
                                                        for n, ps in topics.items()]}, **kw)


VERIFICATION = "transaction.partition.verification.enable"


@scenario("hanging-txn-abort", broker_settings={VERIFICATION: "false"})
def _hanging_txn_abort(S):
    """A hanging transaction and `kafka-transactions abort` on the wire, with
    transaction.partition.verification.enable=false (Kafka before 3.6: nobody asks the
    coordinator whether a transactional batch's partition is in the transaction). The
    producer (epoch 1: two InitProducerIds) writes a transactional batch to partitions 0
    and 2 without AddPartitionsToTxn (the client bug KIP-890 part 1 guards against),
    adds and writes partition 1 properly, and commits: partition 1 gets its marker,
    partitions 0 and 2 keep an open transaction that holds their LSO. What
    `kafka-transactions find-hanging` asks (DescribeProducers: the producer with its
    current_txn_start_offset; ListTransactions by producer id; FindCoordinator and
    DescribeTransactions: CompleteCommit without those partitions, so they hang).
    WriteTxnMarkers' answers to a bad request: no markers, an unknown topic and
    partition, a stale producer epoch, a stale coordinator epoch, transaction version 2
    with the same epoch, a marker where no transaction is open, a producer the
    partition never saw, known and unknown partitions in one marker. Then `abort --topic
    T --partition 0 --start-offset 0` as the tool sends it to Kafka 4.3.1:
    DescribeProducers of the partition, then WriteTxnMarkers v2 with its producer id and
    epoch, coordinator epoch 0 (DescribeProducers says -1: the tool sends 0),
    transaction_result false and transaction_version 0; partition 2 is aborted with
    v1 and a newer epoch. The LSO moves on, read_committed Fetch lists the aborted
    transaction, DescribeProducers shows no open transaction, the coordinator never knew.
    The producer's next batch to partition 2 at its own epoch (now older than the
    marker's). Last, the setting is dynamic: IncrementalAlterConfigs turns verification
    on at the cluster default, and a batch to partition 1 (not in a transaction now) is
    refused; its DELETE turns it off again (the static false), and the same batch is
    taken and hangs there."""
    t, a = f"{S}-t", f"{S}-a"
    pid, epoch = pid_of("i"), epoch_of("i")
    stale, newer, stranger = epoch_of("i", -1), epoch_of("i", 1), ref("i.producer_id", 1000)
    every = {t: [0, 1, 2, 3]}

    def verification_is(id, value):
        return describe_configs(id, [(4, "1", [VERIFICATION])], until={
            "path": "results.0.configs.0.value", "equals": value, "timeout_ms": 30000, "interval_ms": 100})

    def set_verification(id, op, value):
        return step(id, "IncrementalAlterConfigs", 1, {"resources": [
            {"resource_type": 4, "resource_name": "", "configs": [
                {"name": VERIFICATION, "config_operation": op, "value": value}]}], "validate_only": False})
    return [
        *create_topics("create", [(t, 4)]),
        *txn_setup(S, a, "i0"),
        init_pid("i", a, poll=False),                     # epoch 1: a stale epoch (0) exists
        verification_is("verification-off", "false"),
        # --- the hanging transaction
        produce("not-added", {t: {0: txn_batch("i", ["hang-0"], 0), 2: txn_batch("i", ["hang-2"], 0)}}, tid=a),
        add_partitions("add-p1", a, "i", {t: [1]}),
        produce("p1", {t: {1: txn_batch("i", ["ok"], 0)}}, tid=a),
        describe_txn("ongoing", [a]),
        end_txn("commit", a, "i", True),
        wait_txn_state("committed", a, "CompleteCommit"),
        list_offsets("lso", {t: {p: -1 for p in range(4)}}, isolation=1),
        list_offsets("hw", {t: {p: -1 for p in range(4)}}, isolation=0),
        fetch("read-committed", {t: {0: 0, 1: 0, 2: 0}}, isolation=1),
        fetch("read-uncommitted", {t: {0: 0, 1: 0, 2: 0}}, isolation=0),
        # --- kafka-transactions find-hanging --broker-id 1 (to Kafka 4.3.1 it sends ListTransactions
        # v2 and FindCoordinator v6; these are the versions it sends to a broker serving 0-1 and 0-5)
        describe_producers("find-producers", every),
        list_txn("find-list", pids=[pid]),
        find_coordinator("find-coordinator", a, 1),
        describe_txn("find-describe", [a]),
        # --- WriteTxnMarkers' answers to bad requests
        write_txn_markers("wtm-empty", []),
        write_txn_markers("wtm-unknown", [(pid, epoch, False, {t: [7], f"{S}-nope": [0]}, 0)]),
        write_txn_markers("wtm-stale-epoch", [(pid, stale, False, {t: [0]}, 0)]),
        write_txn_markers("wtm-stale-coordinator-epoch", [(pid, epoch, False, {t: [1]}, -1)]),
        write_txn_markers("wtm-tv2-same-epoch", [(pid, epoch, False, {t: [0]}, 0, 2)], v=2),
        write_txn_markers("wtm-no-open-txn", [(pid, epoch, False, {t: [1]}, 0)]),
        write_txn_markers("wtm-unknown-producer", [(stranger, 0, False, {t: [3]}, 0)]),
        write_txn_markers("wtm-mixed", [(stranger, 0, True, {t: [3, 9]}, 0)]),
        describe_producers("probes-producers", every),
        list_offsets("probes-lso", {t: {p: -1 for p in range(4)}}, isolation=1),
        list_offsets("probes-hw", {t: {p: -1 for p in range(4)}}, isolation=0),
        # --- kafka-transactions abort --topic T --partition 0 --start-offset 0
        describe_producers("abort-describe", {t: [0]}),
        write_txn_markers("abort", [(ref("abort-describe.topics.0.partitions.0.active_producers.0.producer_id"),
                                     ref("abort-describe.topics.0.partitions.0.active_producers.0.producer_epoch"),
                                     False, {t: [0]}, 0, 0)], v=2),
        # --- partition 2: v1, an epoch newer than the partition's
        write_txn_markers("abort-newer-epoch", [(pid, newer, False, {t: [2]}, 0)]),
        list_offsets("after-lso", {t: {p: -1 for p in range(4)}}, isolation=1),
        list_offsets("after-hw", {t: {p: -1 for p in range(4)}}, isolation=0),
        fetch("after-read-committed", {t: {0: 0, 1: 0, 2: 0}}, isolation=1),
        fetch("after-read-uncommitted", {t: {0: 0, 1: 0, 2: 0, 3: 0}}, isolation=0),
        describe_producers("after-producers", every),
        describe_txn("after-describe", [a]),
        # --- the producer's next batch to partition 2, at its own (now older) epoch
        produce("p2-older-epoch", {t: {2: txn_batch("i", ["late"], 1)}}, tid=a),
        # --- the setting is dynamic (a cluster-wide default overrides server.properties)
        set_verification("verification-on", 0, "true"),
        verification_is("verification-on-seen", "true"),
        {"sleep_ms": 1000},
        produce("not-added-verified", {t: {1: txn_batch("i", ["refused"], 1)}}, tid=a),
        set_verification("verification-default", 1, None),
        verification_is("verification-default-seen", "false"),
        {"sleep_ms": 1000},
        produce("not-added-unverified", {t: {1: txn_batch("i", ["hangs"], 1)}}, tid=a),
        list_offsets("last-lso", {t: {1: -1}}, isolation=1),
        describe_producers("last-producers", {t: [1]}),
    ]


# --- foundation APIs ----------------------------------------------------------------

_SYNC_CREATE = {"name": "doze-auto-creates-synchronously",
                "doze": {"topics": [{"error_code": 0}]},
                "why": "Kafka asks the controller to create the topic and answers "
                       "UNKNOWN_TOPIC_OR_PARTITION meanwhile (the client retries); doze creates it "
                       "before answering"}


@scenario("metadata", known_differences={"auto-create": _SYNC_CREATE, "auto-create-v3": _SYNC_CREATE})
def _metadata(S):
    """Metadata: named topics in every version, unknown topic with and without
    auto-creation, an invalid name, an empty list."""
    t, u = f"{S}-t", f"{S}-u"
    steps = [*create_topics("create", [(t, 3), (u, 1)])]
    for v in (0, 1, 4, 7, 8, 9, 10, 11, 12):
        steps.append(metadata(f"v{v}", [t, u], v=v))
    steps += [
        metadata("unknown-no-create", [f"{S}-nope"]),
        metadata("invalid-name", ["bad name!"]),
        metadata("empty-list", []),
        metadata("auto-create", [f"{S}-auto"], auto_create=True),
        metadata("auto-created", [f"{S}-auto"], until={"path": "topics.0.error_code", "equals": 0,
                                                       "timeout_ms": 30000, "interval_ms": 50}),
        metadata("auto-create-v3", [f"{S}-auto3"], v=3),
    ]
    return steps


@scenario("create-topics")
def _create_topics(S):
    """CreateTopics: success (v7 lists the configs), already exists, invalid name,
    bad partition counts and replication factors, invalid config, manual assignment,
    validate_only, duplicates in one request, defaults (-1), old versions."""
    def ct(id, topics, v=7, validate_only=False):
        return step(id, "CreateTopics", v, {"topics": [
            dict({"replication_factor": 1, "num_partitions": 1, "assignments": [], "configs": []}, **t)
            for t in topics], "timeout_ms": 30000, "validate_only": validate_only})
    return [
        ct("ok-v7", [{"name": f"{S}-a", "num_partitions": 2}]),
        wait_topics("ok-wait", [f"{S}-a"]),
        ct("exists", [{"name": f"{S}-a"}]),
        ct("invalid-name", [{"name": "bad name!"}]),
        ct("invalid-name-dots", [{"name": ".."}]),
        ct("too-long-name", [{"name": "x" * 250}]),
        ct("zero-partitions", [{"name": f"{S}-z", "num_partitions": 0}]),
        ct("negative-partitions", [{"name": f"{S}-n", "num_partitions": -5}]),
        ct("replication-3", [{"name": f"{S}-r", "replication_factor": 3}]),
        ct("replication-0", [{"name": f"{S}-r0", "replication_factor": 0}]),
        ct("bad-config", [{"name": f"{S}-c", "configs": [{"name": "retention.ms", "value": "abc"}]}]),
        ct("unknown-config", [{"name": f"{S}-c2", "configs": [{"name": "no.such.config", "value": "1"}]}]),
        ct("with-config-v7", [{"name": f"{S}-c3", "configs": [{"name": "retention.ms", "value": "1000"},
                                                             {"name": "cleanup.policy", "value": "compact"}]}]),
        ct("defaults", [{"name": f"{S}-d", "num_partitions": -1, "replication_factor": -1}]),
        ct("assignment", [{"name": f"{S}-m", "num_partitions": -1, "replication_factor": -1,
                           "assignments": [{"partition_index": 0, "broker_ids": [1]},
                                           {"partition_index": 1, "broker_ids": [1]}]}]),
        ct("bad-assignment", [{"name": f"{S}-m2", "num_partitions": -1, "replication_factor": -1,
                               "assignments": [{"partition_index": 0, "broker_ids": [7]}]}]),
        ct("assignment-and-count", [{"name": f"{S}-m3", "num_partitions": 2,
                                     "assignments": [{"partition_index": 0, "broker_ids": [1]}]}]),
        ct("validate-only-v7", [{"name": f"{S}-v", "num_partitions": 3}], validate_only=True),
        metadata("validate-only-left-nothing", [f"{S}-v"]),
        ct("duplicate", [{"name": f"{S}-dup"}, {"name": f"{S}-dup"}]),
        ct("two", [{"name": f"{S}-b"}, {"name": f"{S}-a"}], v=4),
        ct("v2", [{"name": f"{S}-e"}], v=2),
        wait_topics("final-wait", [f"{S}-a", f"{S}-b", f"{S}-c3", f"{S}-d", f"{S}-m", f"{S}-e"]),
    ]


@scenario("delete-topics")
def _delete_topics(S):
    """DeleteTopics by name (v1-v5 topic_names, v6 topics) and by id; unknown name,
    unknown id; a produce to the deleted topic; re-creating it."""
    a, b, c = f"{S}-a", f"{S}-b", f"{S}-c"
    return [
        *create_topics("create", [a, b, c], v=7),
        step("delete-v6", "DeleteTopics", 6, {"topics": [{"name": a, "topic_id": {"$uuid": "0" * 32}}],
                                              "timeout_ms": 30000}),
        step("delete-v6-by-id", "DeleteTopics", 6, {"topics": [
            {"name": None, "topic_id": ref("create.topics.1.topic_id")}], "timeout_ms": 30000}),
        step("delete-v5", "DeleteTopics", 5, {"topic_names": [c, f"{S}-nope"], "timeout_ms": 30000}),
        step("delete-v1-unknown", "DeleteTopics", 1, {"topic_names": [f"{S}-nope"], "timeout_ms": 30000}),
        step("delete-v6-unknown-id", "DeleteTopics", 6, {"topics": [
            {"name": None, "topic_id": {"$uuid": "0123456789abcdef0123456789abcdef"}}], "timeout_ms": 30000}),
        step("delete-again", "DeleteTopics", 6, {"topics": [{"name": a, "topic_id": {"$uuid": "0" * 32}}],
                                                 "timeout_ms": 30000}),
        metadata("gone", [a, b, c], until={"path": "topics.*.error_code", "equals": 3,
                                           "timeout_ms": 30000, "interval_ms": 50}),
        produce("produce-deleted", {a: {0: batch(["x"])}}),
        *create_topics("recreate", [a]),
    ]


@scenario("create-partitions")
def _create_partitions(S):
    """CreatePartitions: grow, same count, shrink, unknown topic, validate_only,
    manual assignment, duplicate topic in one request, versions."""
    t, u = f"{S}-t", f"{S}-u"

    def cp(id, topics, v=3, validate_only=False):
        return step(id, "CreatePartitions", v, {"topics": [
            {"name": n, "count": c, "assignments": asg} for n, c, asg in topics],
            "timeout_ms": 30000, "validate_only": validate_only})
    return [
        *create_topics("create", [(t, 1), (u, 2)]),
        cp("grow", [(t, 3, None)]),
        metadata("grown", [t], until={"path": "topics.0.partitions.*.partition_index", "count": 3,
                                      "timeout_ms": 30000, "interval_ms": 50}),
        cp("same", [(t, 3, None)]),
        cp("shrink", [(t, 2, None)]),
        cp("unknown", [(f"{S}-nope", 2, None)]),
        cp("validate-only", [(u, 4, None)], validate_only=True),
        metadata("not-grown", [u]),
        cp("assignment", [(u, 3, [{"broker_ids": [1]}])]),
        cp("bad-assignment-count", [(u, 5, [{"broker_ids": [1]}])]),
        cp("bad-assignment-broker", [(u, 4, [{"broker_ids": [9]}])]),
        cp("duplicate", [(t, 5, None), (t, 6, None)]),
        cp("v0", [(t, 4, None)], v=0),
        metadata("final", [t, u], until={"path": "topics.0.partitions.*.partition_index", "count": 4,
                                         "timeout_ms": 30000, "interval_ms": 50}),
    ]


@scenario("produce-errors")
def _produce_errors(S):
    """Produce: success, unknown topic and partition, corrupt CRC, bad acks, message
    too large, magic 1, two batches, records count mismatch, idempotent sequence
    errors, old versions."""
    t, small = f"{S}-t", f"{S}-small"
    return [
        *create_topics("create", [(t, 2), (small, 1, {"max.message.bytes": "200"})]),
        produce("ok", {t: {0: batch(["a", "b"]), 1: batch(["c"])}}),
        produce("ok-acks1", {t: {0: batch(["d"])}}, acks=1),
        produce("unknown-topic", {f"{S}-nope": {0: batch(["x"])}}),
        produce("unknown-partition", {t: {5: batch(["x"])}}),
        produce("mixed", {t: {0: batch(["e"]), 9: batch(["x"])}}),
        produce("corrupt-crc", {t: {0: batch(["x"], corrupt_crc=True)}}),
        produce("acks-2", {t: {0: batch(["x"])}}, acks=2),
        produce("too-large", {small: {0: batch(["x" * 300])}}),
        produce("fits", {small: {0: batch(["x" * 50])}}),
        produce("magic-1", {t: {0: batch(["x"], magic=1)}}),
        produce("two-batches", {t: {0: {"$batches": [batch(["x"]), batch(["y"])]}}}),
        produce("count-mismatch", {t: {0: batch(["x", "y"], records_count=5)}}),
        produce("empty-records", {t: {0: {"$hex": ""}}}),
        step("idem", "InitProducerId", 5, {"transactional_id": None, "transaction_timeout_ms": 0,
                                           "producer_id": -1, "producer_epoch": -1}),
        produce("idem-seq0", {t: {1: batch(["i0", "i1"], pid_of("idem"), epoch_of("idem"), 0)}}),
        produce("idem-dup", {t: {1: batch(["i0", "i1"], pid_of("idem"), epoch_of("idem"), 0)}}),
        produce("idem-gap", {t: {1: batch(["i5"], pid_of("idem"), epoch_of("idem"), 5)}}),
        produce("idem-seq2", {t: {1: batch(["i2"], pid_of("idem"), epoch_of("idem"), 2)}}),
        produce("idem-old-epoch", {t: {1: batch(["i3"], pid_of("idem"), epoch_of("idem", -1), 3)}}),
        produce("idem-new-epoch-seq3", {t: {1: batch(["i3"], pid_of("idem"), epoch_of("idem", 1), 3)}}),
        produce("idem-new-epoch-seq0", {t: {1: batch(["i3"], pid_of("idem"), epoch_of("idem", 1), 0)}}),
        produce("idem-unknown-pid", {t: {0: batch(["u"], ref("idem.producer_id", 1000), 0, 7)}}),
        produce("no-seq", {t: {0: batch(["u"], pid_of("idem"), 0, -1)}}),
        produce("v3", {t: {0: batch(["f"])}}, v=3),
        produce("v8-unknown-partition", {t: {7: batch(["f"])}}, v=8),
        produce("v2-refused", {t: {0: batch(["f"])}}, v=2),
        fetch("read", {t: {0: 0, 1: 0}}),
    ]


@scenario("fetch", known_differences={
    "new-session": {"name": "doze-no-fetch-sessions", "doze": {"session_id": 0},
                    "why": "doze answers every Fetch sessionless (KIP-227 allows it: session id 0 "
                           "tells the client to send full requests)"},
    "small-partition-max": {"name": "doze-fetch-whole-batches", "doze": {"responses": [{"partitions": [
        {"records": {"batches": [{"header": {"base_offset": 0}}]}}]}]},
        "why": "Kafka cuts the records at partition_max_bytes, leaving a partial batch the "
               "client drops; doze sends whole batches only (at least one)"},
})
def _fetch(S):
    """Fetch: from the start, from the middle, at the end, past the end, before the
    start, unknown topic and partition, small max bytes, a session id, versions."""
    t = f"{S}-t"
    steps = [*create_topics("create", [(t, 2)])]
    for i in range(3):
        steps.append(produce(f"p{i}", {t: {0: batch([f"v{i}a", f"v{i}b"])}}))
    steps += [
        fetch("from-0", {t: {0: 0, 1: 0}}),
        fetch("from-3", {t: {0: 3}}),
        fetch("at-end", {t: {0: 6}}),
        fetch("past-end", {t: {0: 7}}),
        fetch("negative", {t: {0: -1}}),
        fetch("unknown", {f"{S}-nope": {0: 0}, t: {9: 0}}),
        step("small-max-bytes", "Fetch", 12, {
            "replica_id": -1, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 10,
            "isolation_level": 0, "session_id": 0, "session_epoch": -1,
            "topics": [{"topic": t, "partitions": [{"partition": 0, "fetch_offset": 0,
                                                     "partition_max_bytes": 10}]}],
            "forgotten_topics_data": [], "rack_id": ""}),
        step("small-partition-max", "Fetch", 12, {
            "replica_id": -1, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 100000,
            "isolation_level": 0, "session_id": 0, "session_epoch": -1,
            "topics": [{"topic": t, "partitions": [{"partition": 0, "fetch_offset": 0,
                                                     "partition_max_bytes": 100}]}],
            "forgotten_topics_data": [], "rack_id": ""}),
        step("unknown-session", "Fetch", 12, {
            "replica_id": -1, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 100000,
            "isolation_level": 0, "session_id": 12345, "session_epoch": 1,
            "topics": [{"topic": t, "partitions": [{"partition": 0, "fetch_offset": 0,
                                                     "partition_max_bytes": 100000}]}],
            "forgotten_topics_data": [], "rack_id": ""}),
        step("new-session", "Fetch", 12, {
            "replica_id": -1, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 100000,
            "isolation_level": 0, "session_id": 0, "session_epoch": 0,
            "topics": [{"topic": t, "partitions": [{"partition": 0, "fetch_offset": 4,
                                                     "partition_max_bytes": 100000}]}],
            "forgotten_topics_data": [], "rack_id": ""}),
        fetch("wait-timeout", {t: {1: 0}}, max_wait_ms=200),
        fetch("v4", {t: {0: 2}}, v=4),
        fetch("v11", {t: {0: 2}}, v=11),
        fetch("v3-refused", {t: {0: 2}}, v=3),
    ]
    return steps


@scenario("list-offsets")
def _list_offsets(S):
    """ListOffsets: earliest, latest, max timestamp, by timestamp, on an empty
    partition, unknown topic/partition, versions."""
    t = f"{S}-t"
    cfg = {"segment.ms": "3153600000000"}
    return [
        *create_topics("create", [(t, 2, cfg)]),
        produce("p1", {t: {0: batch(["a", "b"], timestamp_ms=1700000000000)}}),
        produce("p2", {t: {0: batch(["c"], timestamp_ms=1700000005000)}}),
        produce("p3", {t: {0: batch(["d"], timestamp_ms=1700000002000)}}),
        list_offsets("earliest", {t: {0: -2, 1: -2}}),
        list_offsets("latest", {t: {0: -1, 1: -1}}),
        list_offsets("max-ts", {t: {0: -3, 1: -3}}),
        list_offsets("by-time", {t: {0: 1700000001000}}),
        list_offsets("by-time-exact", {t: {0: 1700000005000}}),
        list_offsets("by-time-after-all", {t: {0: 1700000009000}}),
        list_offsets("by-time-empty", {t: {1: 1700000000000}}),
        list_offsets("earliest-local", {t: {0: -4}}),
        list_offsets("latest-tiered", {t: {0: -5}}, v=9),
        list_offsets("unknown", {f"{S}-nope": {0: -1}, t: {3: -1}}),
        list_offsets("v1", {t: {0: -1}}, v=1),
        list_offsets("v4", {t: {0: 1700000001000}}, v=4),
        list_offsets("v7-max", {t: {0: -3}}, v=7),
        list_offsets("v6-max", {t: {0: -3}}, v=6),
        list_offsets("v11", {t: {0: -2}}, v=11),
        list_offsets("v0-refused", {t: {0: -1}}, v=0),
    ]


@scenario("delete-records")
def _delete_records(S):
    """DeleteRecords: to an offset, to the high watermark (-1), beyond it, below the
    current start; then Fetch before the start and ListOffsets earliest."""
    t = f"{S}-t"

    def dr(id, parts, v=2):
        return step(id, "DeleteRecords", v, {"topics": [{"name": t, "partitions": [
            {"partition_index": p, "offset": o} for p, o in parts.items()]}], "timeout_ms": 30000})
    return [
        *create_topics("create", [(t, 2)]),
        produce("p1", {t: {0: batch(["a", "b"])}}),
        produce("p2", {t: {0: batch(["c", "d"])}}),
        dr("to-1", {0: 1}),
        fetch("fetch-0", {t: {0: 0}}),
        fetch("fetch-1", {t: {0: 1}}),
        list_offsets("earliest", {t: {0: -2}}),
        dr("back-to-0", {0: 0}),
        dr("to-3", {0: 3}, v=0),
        dr("beyond", {0: 10}),
        dr("to-hw", {0: -1, 1: -1}),
        dr("unknown-partition", {7: 0}),
        step("unknown-topic", "DeleteRecords", 2, {"topics": [{"name": f"{S}-nope", "partitions": [
            {"partition_index": 0, "offset": 0}]}], "timeout_ms": 30000}),
        list_offsets("after", {t: {0: -2, 1: -2}}),
        produce("p3", {t: {0: batch(["e"])}}),
        fetch("fetch-after", {t: {0: 4}}),
    ]


def describe_configs(id, resources, v=4, synonyms=False, **kw):
    """resources: [(type, name, keys or None)]."""
    return step(id, "DescribeConfigs", v, {"resources": [
        {"resource_type": rt, "resource_name": n, "configuration_keys": keys}
        for rt, n, keys in resources], "include_synonyms": synonyms,
        **({"include_documentation": False} if v >= 3 else {})}, **kw)


TOPIC_KEYS = ["cleanup.policy", "retention.ms", "retention.bytes", "segment.bytes", "max.message.bytes",
              "min.insync.replicas", "message.timestamp.type", "compression.type"]
BROKER_KEYS = ["num.partitions", "log.retention.ms", "message.max.bytes", "auto.create.topics.enable",
               "log.segment.bytes", "default.replication.factor"]


@scenario("describe-configs")
def _describe_configs(S):
    """DescribeConfigs of a topic (named keys: doze lists fewer configs than Kafka when
    asked for all), with an override, with synonyms, of the broker, unknown topic,
    unknown broker, versions."""
    t, u = f"{S}-t", f"{S}-u"
    return [
        *create_topics("create", [(t, 1), (u, 1, {"retention.ms": "123456", "cleanup.policy": "compact"})]),
        describe_configs("topic", [(2, t, TOPIC_KEYS)]),
        describe_configs("topic-override", [(2, u, TOPIC_KEYS)]),
        describe_configs("topic-synonyms", [(2, u, ["retention.ms", "cleanup.policy", "segment.bytes"])],
                         synonyms=True),
        describe_configs("topic-unknown-key", [(2, t, ["no.such.config"])]),
        describe_configs("broker", [(4, "1", BROKER_KEYS)]),
        describe_configs("broker-synonyms", [(4, "1", ["log.retention.ms", "num.partitions"])], synonyms=True),
        describe_configs("broker-default", [(4, "", ["log.retention.ms"])]),
        describe_configs("broker-wrong-id", [(4, "7", ["num.partitions"])]),
        describe_configs("broker-bad-id", [(4, "abc", ["num.partitions"])]),
        describe_configs("unknown-topic", [(2, f"{S}-nope", ["retention.ms"])]),
        describe_configs("two", [(2, t, ["retention.ms"]), (2, u, ["retention.ms"])]),
        describe_configs("v1", [(2, u, ["retention.ms"])], v=1),
        describe_configs("v1-synonyms", [(2, u, ["retention.ms"])], v=1, synonyms=True),
        describe_configs("unknown-type", [(99, "x", ["a"])]),
    ]


@scenario("alter-configs")
def _alter_configs(S):
    """AlterConfigs (replaces a topic's overrides) and IncrementalAlterConfigs (SET,
    DELETE, APPEND, SUBTRACT), validate_only, invalid values and names, unknown topic,
    then DescribeConfigs."""
    t = f"{S}-t"

    def ac(id, configs, v=2, validate_only=False, name=t, rtype=2):
        return step(id, "AlterConfigs", v, {"resources": [
            {"resource_type": rtype, "resource_name": name,
             "configs": [{"name": k, "value": val} for k, val in configs.items()]}],
            "validate_only": validate_only})

    def iac(id, ops, v=1, validate_only=False, name=t, rtype=2):
        return step(id, "IncrementalAlterConfigs", v, {"resources": [
            {"resource_type": rtype, "resource_name": name,
             "configs": [{"name": k, "config_operation": op, "value": val} for k, op, val in ops]}],
            "validate_only": validate_only})
    keys = ["retention.ms", "cleanup.policy", "segment.bytes", "max.message.bytes"]
    return [
        *create_topics("create", [(t, 1, {"segment.bytes": "1048576"})]),
        ac("alter", {"retention.ms": "1000", "cleanup.policy": "compact"}),
        describe_configs("after-alter", [(2, t, keys)]),
        ac("alter-validate-only", {"retention.ms": "2000"}, validate_only=True),
        ac("alter-bad-value", {"retention.ms": "abc"}),
        ac("alter-unknown-name", {"no.such.config": "1"}),
        ac("alter-unknown-topic", {"retention.ms": "1"}, name=f"{S}-nope"),
        ac("alter-v0", {"max.message.bytes": "5000"}, v=0),
        describe_configs("after-alter-v0", [(2, t, keys)]),
        iac("inc-set", [("retention.ms", 0, "5000")]),
        iac("inc-delete", [("max.message.bytes", 1, None)]),
        iac("inc-append", [("cleanup.policy", 2, "delete")]),
        describe_configs("after-inc", [(2, t, keys)]),
        iac("inc-subtract", [("cleanup.policy", 3, "compact")]),
        iac("inc-append-non-list", [("retention.ms", 2, "1")]),
        iac("inc-bad-op", [("retention.ms", 9, "1")]),
        iac("inc-bad-value", [("retention.ms", 0, "abc")]),
        iac("inc-unknown-name", [("no.such.config", 0, "1")]),
        iac("inc-validate-only", [("retention.ms", 0, "7")], validate_only=True),
        iac("inc-duplicate", [("retention.ms", 0, "7"), ("retention.ms", 0, "8")]),
        iac("inc-v0", [("segment.bytes", 0, "2097152")], v=0),
        describe_configs("final", [(2, t, keys)]),
    ]


@scenario("describe-cluster")
def _describe_cluster(S):
    """DescribeCluster v0 and v1, with authorized operations, and a controller endpoint type."""
    return [
        step("v0", "DescribeCluster", 0, {"include_cluster_authorized_operations": False}),
        step("v0-ops", "DescribeCluster", 0, {"include_cluster_authorized_operations": True}),
        step("v1-brokers", "DescribeCluster", 1, {"include_cluster_authorized_operations": False,
                                                  "endpoint_type": 1}),
        step("v1-controllers", "DescribeCluster", 1, {"include_cluster_authorized_operations": False,
                                                      "endpoint_type": 2}),
        step("v1-bad-type", "DescribeCluster", 1, {"include_cluster_authorized_operations": False,
                                                   "endpoint_type": 7}),
    ]


@scenario("find-coordinator")
def _find_coordinator(S):
    """FindCoordinator for groups and transactional ids, v0-v5, several keys (v4+), an
    invalid key type, an empty key."""
    g, a = f"{S}-g", f"{S}-a"
    return [
        find_coordinator("v4-group", g, 0),
        find_coordinator("v4-txn", a, 1),
        step("v0", "FindCoordinator", 0, {"key": g}),
        step("v1", "FindCoordinator", 1, {"key": g, "key_type": 0}),
        step("v2-txn", "FindCoordinator", 2, {"key": a, "key_type": 1}),
        step("v3", "FindCoordinator", 3, {"key": g, "key_type": 0}),
        step("v4-several", "FindCoordinator", 4, {"key_type": 0, "coordinator_keys": [g, f"{S}-g2"]}),
        step("v5", "FindCoordinator", 5, {"key_type": 0, "coordinator_keys": [g]}),
        step("v4-bad-type", "FindCoordinator", 4, {"key_type": 9, "coordinator_keys": [g]}),
        step("v3-bad-type", "FindCoordinator", 3, {"key": g, "key_type": 9}),
        step("v4-empty-key", "FindCoordinator", 4, {"key_type": 0, "coordinator_keys": [""]}),
        step("v4-empty-txn-key", "FindCoordinator", 4, {"key_type": 1, "coordinator_keys": [""]}),
        step("v4-no-keys", "FindCoordinator", 4, {"key_type": 0, "coordinator_keys": []}),
    ]


@scenario("group-membership")
def _group_membership(S):
    """The classic group protocol: JoinGroup (MEMBER_ID_REQUIRED, then with the id),
    SyncGroup, Heartbeat (ok, stale generation, unknown member, unknown group),
    LeaveGroup, and rejoining; bad session timeouts; old versions."""
    t, g = f"{S}-t", f"{S}-g"
    gen, mem = ref("m-join.generation_id"), ref("m-join.member_id")

    def hb(id, generation, member, group=g, v=4):
        req = {"group_id": group, "generation_id": generation, "member_id": member}
        if v >= 3:
            req["group_instance_id"] = None
        return step(id, "Heartbeat", v, req)
    return [
        *create_topics("create", [(t, 2)]),
        *group_member("m", g, [t], {t: [0, 1]}),
        hb("hb-ok", gen, mem),
        hb("hb-v0", gen, mem, v=0),
        hb("hb-stale-generation", ref("m-join.generation_id", -1), mem),
        hb("hb-unknown-member", gen, "nobody"),
        hb("hb-unknown-group", 1, "nobody", group=f"{S}-nope"),
        step("sync-stale-generation", "SyncGroup", 5, {
            "group_id": g, "generation_id": ref("m-join.generation_id", 5), "member_id": mem,
            "group_instance_id": None, "protocol_type": "consumer", "protocol_name": "range",
            "assignments": []}),
        step("sync-wrong-protocol", "SyncGroup", 5, {
            "group_id": g, "generation_id": gen, "member_id": mem,
            "group_instance_id": None, "protocol_type": "consumer", "protocol_name": "roundrobin",
            "assignments": []}),
        join_group("join-bad-session", g, member_id="", topics=[t], session_timeout_ms=10),
        join_group("join-huge-session", g, member_id="", topics=[t], session_timeout_ms=99999999),
        step("join-bad-protocol-type", "JoinGroup", 9, {
            "group_id": g, "session_timeout_ms": 30000, "rebalance_timeout_ms": 30000,
            "member_id": mem, "group_instance_id": None, "protocol_type": "connect",
            "protocols": [{"name": "range", "metadata": {"$hex": ""}}], "reason": None}),
        join_group("rejoin-same", g, member_id=mem, topics=[t]),
        step("describe", "DescribeGroups", 5, {"groups": [g], "include_authorized_operations": False}),
        step("leave-v5", "LeaveGroup", 5, {"group_id": g, "members": [
            {"member_id": mem, "group_instance_id": None, "reason": "done"}]}),
        hb("hb-after-leave", gen, mem),
        step("leave-again", "LeaveGroup", 5, {"group_id": g, "members": [
            {"member_id": mem, "group_instance_id": None, "reason": None}]}),
        step("leave-v0-unknown", "LeaveGroup", 0, {"group_id": g, "member_id": "nobody"}),
        step("leave-unknown-group", "LeaveGroup", 4, {"group_id": f"{S}-nope", "members": [
            {"member_id": "x", "group_instance_id": None}]}),
        step("join-v3", "JoinGroup", 3, {
            "group_id": f"{S}-g3", "session_timeout_ms": 30000, "rebalance_timeout_ms": 30000,
            "member_id": "", "protocol_type": "consumer",
            "protocols": [{"name": "range", "metadata": {"$subscription": [t]}}]}),
        step("describe-g3", "DescribeGroups", 5, {"groups": [f"{S}-g3"],
                                                 "include_authorized_operations": False}),
        step("join-empty-group-id", "JoinGroup", 9, {
            "group_id": "", "session_timeout_ms": 30000, "rebalance_timeout_ms": 30000,
            "member_id": "", "group_instance_id": None, "protocol_type": "consumer",
            "protocols": [{"name": "range", "metadata": {"$subscription": [t]}}], "reason": None}),
    ]


@scenario("offset-commit-fetch")
def _offset_commit_fetch(S):
    """OffsetCommit (standalone, by a member, stale generation, unknown member, unknown
    topic, large metadata) and OffsetFetch (named partitions, all, unknown group,
    several groups at once in v8+), versions."""
    t, g, s = f"{S}-t", f"{S}-g", f"{S}-simple"
    gen, mem = ref("m-join.generation_id"), ref("m-join.member_id")
    return [
        *create_topics("create", [(t, 3)]),
        find_coordinator("find-simple", s, 0),
        offset_commit("simple", s, {t: {0: 5, 1: 6}}),
        offset_commit("simple-v2", s, {t: {2: 7}}, v=2),
        offset_fetch("simple-fetch", s, {t: [0, 1, 2]}),
        offset_fetch("simple-fetch-all", s, None),
        offset_fetch("simple-fetch-v1", s, {t: [0, 1, 2]}, v=1),
        offset_fetch("simple-fetch-v5", s, {t: [0, 1, 2]}, v=5),
        offset_commit("unknown-topic", s, {f"{S}-nope": {0: 1}}),
        offset_commit("unknown-partition", s, {t: {9: 1}}),
        step("large-metadata", "OffsetCommit", 9, {
            "group_id": s, "generation_id_or_member_epoch": -1, "member_id": "",
            "group_instance_id": None, "topics": [{"name": t, "partitions": [
                {"partition_index": 0, "committed_offset": 1, "committed_leader_epoch": -1,
                 "committed_metadata": "m" * 5000}]}]}),
        *group_member("m", g, [t], {t: [0, 1, 2]}),
        offset_commit("member", g, {t: {0: 10}}, generation=gen, member=mem),
        offset_commit("member-stale-generation", g, {t: {0: 11}},
                      generation=ref("m-join.generation_id", -1), member=mem),
        offset_commit("member-unknown", g, {t: {0: 12}}, generation=gen, member="nobody"),
        offset_commit("no-member-in-active-group", g, {t: {0: 13}}),
        offset_fetch("member-fetch", g, {t: [0, 1]}),
        step("fetch-two-groups", "OffsetFetch", 8, {"groups": [
            {"group_id": g, "topics": None}, {"group_id": s, "topics": [{"name": t, "partition_indexes": [0]}]}],
            "require_stable": False}),
        offset_fetch("unknown-group", f"{S}-nope", {t: [0]}),
        offset_fetch("unknown-group-all", f"{S}-nope", None),
        offset_fetch("unknown-topic-fetch", s, {f"{S}-nope": [0]}),
        offset_commit("empty-group-id", "", {t: {0: 1}}),
    ]


@scenario("describe-groups")
def _describe_groups(S):
    """DescribeGroups: a stable group with a member, an empty group (after LeaveGroup),
    a group with only offsets, an unknown group, versions."""
    t, g, s = f"{S}-t", f"{S}-g", f"{S}-simple"
    mem = ref("m-join.member_id")

    def dg(id, groups, v=5):
        req = {"groups": groups}
        if v >= 3:
            req["include_authorized_operations"] = False
        return step(id, "DescribeGroups", v, req)
    return [
        *create_topics("create", [(t, 1)]),
        *group_member("m", g, [t], {t: [0]}),
        find_coordinator("find-simple", s, 0),
        offset_commit("commit-simple", s, {t: {0: 1}}),
        dg("stable", [g]),
        dg("stable-v0", [g], v=0),
        dg("stable-v4", [g], v=4),
        dg("only-offsets", [s]),
        dg("unknown", [f"{S}-nope"]),
        dg("several", [g, f"{S}-nope", s]),
        step("describe-ops", "DescribeGroups", 5, {"groups": [g], "include_authorized_operations": True}),
        step("leave", "LeaveGroup", 5, {"group_id": g, "members": [
            {"member_id": mem, "group_instance_id": None, "reason": None}]}),
        dg("empty", [g]),
    ]


@scenario("list-groups")
def _list_groups(S):
    """ListGroups (only this scenario's groups are kept: the broker holds other
    scenarios' groups too): all, by state (v4), by type (v5), unknown state."""
    t, g, s = f"{S}-t", f"{S}-g", f"{S}-simple"
    keep = {"path": "groups", "field": "group_id", "prefix": S}

    def lg(id, v=5, states=(), types=()):
        req = {}
        if v >= 4:
            req["states_filter"] = list(states)
        if v >= 5:
            req["types_filter"] = list(types)
        return step(id, "ListGroups", v, req, keep=keep)
    return [
        *create_topics("create", [(t, 1)]),
        *group_member("m", g, [t], {t: [0]}),
        find_coordinator("find-simple", s, 0),
        offset_commit("simple", s, {t: {0: 1}}),
        lg("all"),
        lg("all-v0", v=0),
        lg("all-v3", v=3),
        lg("stable", states=["Stable"]),
        lg("empty", states=["Empty"]),
        lg("stable-lower", states=["stable"]),
        lg("unknown-state", states=["Bogus"]),
        lg("classic", types=["classic"]),
        lg("consumer", types=["consumer"]),
        lg("unknown-type", types=["bogus"]),
        lg("v4-stable", v=4, states=["Stable"]),
    ]


@scenario("delete-groups")
def _delete_groups(S):
    """DeleteGroups: an empty group with offsets, a group with a member (NON_EMPTY_GROUP),
    an unknown group, the same group twice, versions; then OffsetFetch of the deleted group."""
    t, g, s = f"{S}-t", f"{S}-g", f"{S}-simple"
    return [
        *create_topics("create", [(t, 1)]),
        *group_member("m", g, [t], {t: [0]}),
        find_coordinator("find-simple", s, 0),
        offset_commit("simple", s, {t: {0: 1}}),
        offset_commit("simple2", f"{S}-simple2", {t: {0: 1}}),
        step("delete", "DeleteGroups", 2, {"groups_names": [s, g, f"{S}-nope"]}),
        step("delete-again", "DeleteGroups", 2, {"groups_names": [s]}),
        step("delete-v0", "DeleteGroups", 0, {"groups_names": [f"{S}-simple2"]}),
        offset_fetch("fetch-deleted", s, {t: [0]}),
        step("describe-deleted", "DescribeGroups", 5, {"groups": [s], "include_authorized_operations": False}),
    ]


@scenario("offset-delete")
def _offset_delete(S):
    """OffsetDelete: offsets of an empty group, of a group subscribed to the topic
    (GROUP_SUBSCRIBED_TO_TOPIC), of a topic it is not subscribed to, unknown group,
    unknown topic."""
    t, u, g, s = f"{S}-t", f"{S}-u", f"{S}-g", f"{S}-simple"
    mem, gen = ref("m-join.member_id"), ref("m-join.generation_id")

    def od(id, group, topics):
        return step(id, "OffsetDelete", 0, {"group_id": group, "topics": [
            {"name": n, "partitions": [{"partition_index": p} for p in ps]} for n, ps in topics.items()]})
    return [
        *create_topics("create", [(t, 2), (u, 1)]),
        find_coordinator("find-simple", s, 0),
        offset_commit("simple", s, {t: {0: 1, 1: 2}}),
        od("empty-group", s, {t: [0]}),
        offset_fetch("after", s, {t: [0, 1]}),
        od("not-committed", s, {t: [0]}),
        od("unknown-partition", s, {t: [9]}),
        od("unknown-topic", s, {f"{S}-nope": [0]}),
        od("unknown-group", f"{S}-nope", {t: [0]}),
        *group_member("m", g, [t], {t: [0, 1]}),
        offset_commit("member", g, {t: {0: 5}, u: {0: 6}}, generation=gen, member=mem),
        od("subscribed", g, {t: [0]}),
        od("not-subscribed", g, {u: [0]}),
        od("mixed", g, {t: [1], u: [0]}),
        offset_fetch("member-after", g, {t: [0], u: [0]}),
    ]


# --- hostile input ------------------------------------------------------------------
# Requests a careless or hostile client sends: special and invalid ListOffsets
# timestamps, record batches whose CRC is right but whose records do not decode,
# partition counts past Kafka's limits, and request bodies that do not decode
# (sent as raw bytes: the step's "body_hex", see recorder.py).

import gzip as _gzip      # noqa: E402
import struct as _struct  # noqa: E402

import doze_kafka as _dk  # noqa: E402  (recorder.py, which imports this file, put it on sys.path)

INT64_MIN = -(1 << 63)
NO_TIME_ROLL = {"segment.ms": "3153600000000"}   # 2023 timestamps must not roll segments


@scenario("list-offsets-special")
def _list_offsets_special(S):
    """ListOffsets' special timestamps -1 latest, -2 earliest, -3 max timestamp
    (KIP-734, v7+), -4 earliest local (KIP-405, v8+), -5 latest tiered (KIP-1005, v9+),
    -6 earliest pending upload (KIP-1023, v11+), and ones Kafka does not know (-7,
    -8, -100, INT64_MIN), at v1, v6-v11, read_uncommitted and read_committed, on a
    partition with records (CreateTime timestamps, uncompressed) and an empty one;
    then a duplicate partition in one request, a negative partition, replica ids."""
    t = f"{S}-t"
    special = [-1, -2, -3, -4, -5, -6, -7, -8, -100, INT64_MIN]
    steps = [
        *create_topics("create", [(t, 2, NO_TIME_ROLL)]),
        produce("p1", {t: {0: batch(["a", "b"], timestamp_ms=1700000000000)}}),
        produce("p2", {t: {0: batch(["c"], timestamp_ms=1700000005000)}}),
        produce("p3", {t: {0: batch(["d"], timestamp_ms=1700000002000)}}),
    ]

    def name(ts):
        return "min" if ts == INT64_MIN else str(-ts)
    for v in (1, 6, 7, 8, 9, 10, 11):
        for ts in special:
            steps.append(list_offsets(f"v{v}-ts-{name(ts)}", {t: {0: ts, 1: ts}}, v=v))
    for v in (2, 7, 9, 11):                   # read_committed (no transactions: LSO = HW)
        for ts in special:
            steps.append(list_offsets(f"v{v}-committed-ts-{name(ts)}", {t: {0: ts, 1: ts}},
                                      isolation=1, v=v))
    steps += [
        list_offsets("by-time-0", {t: {0: 0, 1: 0}}),
        list_offsets("by-time-max-int64", {t: {0: (1 << 63) - 1}}),
        # the same partition twice in one request: INVALID_REQUEST for it
        step("duplicate-partition", "ListOffsets", 9, {
            "replica_id": -1, "isolation_level": 0, "topics": [{"name": t, "partitions": [
                {"partition_index": 0, "current_leader_epoch": -1, "timestamp": -1},
                {"partition_index": 0, "current_leader_epoch": -1, "timestamp": -2}]}]}),
        step("duplicate-topic-entry", "ListOffsets", 9, {
            "replica_id": -1, "isolation_level": 0, "topics": [
                {"name": t, "partitions": [{"partition_index": 0, "current_leader_epoch": -1,
                                            "timestamp": -1}]},
                {"name": t, "partitions": [{"partition_index": 0, "current_leader_epoch": -1,
                                            "timestamp": -2}]}]}),
        list_offsets("negative-partition", {t: {-1: -1}}),
        step("replica-id-debug", "ListOffsets", 9, {
            "replica_id": -2, "isolation_level": 0, "topics": [{"name": t, "partitions": [
                {"partition_index": 0, "current_leader_epoch": -1, "timestamp": -1}]}]}),
        step("v10-negative-timeout", "ListOffsets", 10, {
            "replica_id": -1, "isolation_level": 0, "timeout_ms": -1, "topics": [
                {"name": t, "partitions": [{"partition_index": 0, "current_leader_epoch": -1,
                                            "timestamp": 1700000001000}]}]}),
        step("future-leader-epoch", "ListOffsets", 9, {
            "replica_id": -1, "isolation_level": 0, "topics": [{"name": t, "partitions": [
                {"partition_index": 0, "current_leader_epoch": 5, "timestamp": -1}]}]}),
        step("old-leader-epoch", "ListOffsets", 9, {
            "replica_id": -1, "isolation_level": 0, "topics": [{"name": t, "partitions": [
                {"partition_index": 0, "current_leader_epoch": -7, "timestamp": -1}]}]}),
    ]
    return steps


# --- raw record batches ---

BAD_TS = 1700000009000        # the bad batches' timestamp: later than every good one, so a
                              # bad batch that got into the log would be ListOffsets -3's answer


def raw_record(key=b"k", value=b"v", offset_delta=0, length=None, key_len=None):
    """One record's bytes; length / key_len replace the right values (the rest is kept)."""
    body = (b"\x00" + _dk.varint_bytes(0) + _dk.varint_bytes(offset_delta)
            + _dk.varint_bytes(len(key) if key_len is None else key_len) + key
            + _dk.varint_bytes(len(value)) + value + _dk.varint_bytes(0))
    return _dk.varint_bytes(len(body) if length is None else length) + body


def raw_batch(records, count, last_offset_delta, attributes=0, timestamp_ms=BAD_TS):
    """A RecordBatch v2 header (no producer) around `records` (bytes, taken as they are),
    with the count and last offset delta given and a right CRC-32C: the batch passes
    every check that does not read the records."""
    tail = _struct.pack(">hiqqqhii", attributes, last_offset_delta, timestamp_ms, timestamp_ms,
                        -1, -1, -1, count) + records
    return _struct.pack(">qiibI", 0, len(tail) + 9, -1, 2, _dk.crc32c(tail)) + tail


def _overlong_varint(n, size):
    """The zig-zag varint of n padded to `size` bytes (0x80 continuation bytes)."""
    z = (n << 1) ^ (n >> 63)
    out = []
    for _ in range(size - 1):
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    assert z < 0x80
    out.append(z)
    return bytes(out)


def _bad_batches():
    """(name, what is wrong, batch bytes); the last one is the batch that hung doze."""
    good = raw_record()                                   # key "k", value "v": 9 bytes
    body = good[1:]                                       # the 8 bytes after the length
    assert good[0] == 2 * len(body)
    return [
        ("len-minus2", "one record whose length varint is -2",
         raw_batch(_dk.varint_bytes(-2) + body, 1, 0)),
        ("leftover", "one good record, then 3 bytes that are no record",
         raw_batch(good + b"\x00\x00\x00", 1, 0)),
        ("short", "records_count 3, but only two records' bytes",
         raw_batch(raw_record() + raw_record(offset_delta=1), 3, 2)),
        ("len-5-byte-varint", "control: a length varint padded to 5 bytes (Java reads it)",
         raw_batch(_overlong_varint(len(body), 5) + body, 1, 0)),
        ("len-6-byte-varint", "a length varint padded to 6 bytes (Java reads at most 5)",
         raw_batch(_overlong_varint(len(body), 6) + body, 1, 0)),
        ("count0", "records_count 0, last_offset_delta -1, no records",
         raw_batch(b"", 0, -1)),
        ("key-len-minus5", "a record whose key length is -5 (no key bytes), total length right",
         raw_batch(raw_record(key=b"", key_len=-5), 1, 0)),
        ("gzip-ok", "control: gzip (attributes 1) of one good record",
         raw_batch(_gzip.compress(good, mtime=0), 1, 0, attributes=1)),
        ("gzip-not-gzip", "attributes 1 (gzip), but the records are not gzip",
         raw_batch(b"this is not gzip data", 1, 0, attributes=1)),
        ("gzip-garbage", "attributes 1, gzip of bytes that are no records",
         raw_batch(_gzip.compress(b"\x07garbage-not-records\xff\xff", mtime=0), 1, 0,
                   attributes=1)),
        ("count-max", "records_count 2147483647 (last_offset_delta to match), one record whose "
                      "length varint is -1: the 70-byte batch",
         raw_batch(_dk.varint_bytes(-1) + body, 2147483647, 2147483646)),
    ]


@scenario("produce-bad-records")
def _produce_bad_records(S):
    """Produce (v3 and v9, acks -1 and 1) of record batches whose CRC-32C is right but
    whose records do not decode: a record length of -2 or -1, records that do not tile
    the batch, a 6-byte length varint, records_count 0, a negative key length, a gzip
    batch that is not gzip or whose records are garbage, records_count 2147483647 (two
    controls that decode: a 5-byte varint, good gzip). Each partition gets one kind;
    after each bad produce, a good one and ListOffsets by time 0 and -3 show the
    partition still works. Then Fetch shows what is in the logs."""
    t = f"{S}-t"
    bad = _bad_batches()
    steps = [*create_topics("create", [(t, len(bad), NO_TIME_ROLL)])]
    n = 0
    for p, (kind, _what, data) in enumerate(bad):
        for v, acks in ((3, -1), (3, 1), (9, -1), (9, 1)):
            tag = f"{kind}-v{v}-acks{acks}"
            steps.append(produce(tag, {t: {p: {"$hex": data.hex()}}}, v=v, acks=acks))
            n += 1
            steps += [
                produce(f"{tag}-good", {t: {p: batch([f"ok{n}"], timestamp_ms=1700000000000 + n)}}),
                list_offsets(f"{tag}-by-time-0", {t: {p: 0}}),
                list_offsets(f"{tag}-max-ts", {t: {p: -3}}),
            ]
        if p == len(bad) - 2:
            # before the last kind (count-max): what each partition's log holds
            steps.append(fetch("fetch-logs", {t: {q: 0 for q in range(len(bad) - 1)}}))
    steps.append(list_offsets("final-latest", {t: {p: -1 for p in range(len(bad))}}))
    return steps


# --- partition counts ---

@scenario("partition-limits")
def _partition_limits(S):
    """Partition counts past Kafka's limits: CreateTopics of 10001 and 2147483647
    partitions, two topics of 6000 in one request (Kafka's controller refuses more than
    10,000 partitions per request: POLICY_VIOLATION for every topic of it), a small topic
    with a big one, 10000 (one more record than a controller batch holds) and 9999;
    validate_only true and false; CreatePartitions to 10001, 10002 and 2147483647 on a
    1-partition topic. Metadata afterwards: none of the refused topics exist. Two
    requests make Kafka's controller fail over (an OutOfMemoryError: CreatePartitions
    to 2147483647, and two topics of 2147483647 whose partition total overflows an
    int): they come last, each followed by a poll until the controller is back."""
    t = f"{S}-t"

    def ct(id, topics, v=7, validate_only=False, **kw):
        return step(id, "CreateTopics", v, {"topics": [
            {"name": n, "num_partitions": c, "replication_factor": 1, "assignments": [],
             "configs": []} for n, c in topics], "timeout_ms": 30000,
            "validate_only": validate_only}, **kw)

    def cp(id, count, validate_only, name=t):
        return step(id, "CreatePartitions", 3, {"topics": [
            {"name": name, "count": count, "assignments": None}], "timeout_ms": 30000,
            "validate_only": validate_only})

    def controller_back(id):
        # a validate-only CreateTopics of 1 partition, until it succeeds again
        return ct(id, [(f"{S}-probe", 1)], v=4, validate_only=True, until={
            "path": "topics.0.error_code", "equals": 0, "timeout_ms": 30000, "interval_ms": 200})
    refused = [f"{S}-{x}" for x in ("p10001", "pmax", "six-a", "six-b", "small", "big",
                                    "p10000", "p9999", "two-max-a", "two-max-b")]
    steps = [*create_topics("create", [(t, 1)])]        # the control: a small topic
    for vo in (True, False):
        sfx = "-validate-only" if vo else ""
        steps += [
            ct(f"p10001{sfx}", [(f"{S}-p10001", 10001)], validate_only=vo),
            ct(f"pmax{sfx}", [(f"{S}-pmax", 2147483647)], validate_only=vo),
            ct(f"two-6000{sfx}", [(f"{S}-six-a", 6000), (f"{S}-six-b", 6000)], validate_only=vo),
            ct(f"small-and-10001{sfx}", [(f"{S}-small", 1), (f"{S}-big", 10001)], validate_only=vo),
            ct(f"p10001-v4{sfx}", [(f"{S}-p10001", 10001)], v=4, validate_only=vo),
        ]
    steps += [
        ct("p10000-validate-only", [(f"{S}-p10000", 10000)], validate_only=True),
        ct("p9999-validate-only", [(f"{S}-p9999", 9999)], v=4, validate_only=True),
        cp("cp-10001-validate-only", 10001, True),
        cp("cp-10002-validate-only", 10002, True),
        metadata("after-create", refused + [t]),
        cp("cp-max-validate-only", 2147483647, True),
        controller_back("back-1"),
        cp("cp-max", 2147483647, False),
        controller_back("back-2"),
        ct("two-max-validate-only", [(f"{S}-two-max-a", 2147483647), (f"{S}-two-max-b", 2147483647)],
           v=4, validate_only=True),
        controller_back("back-3"),
        metadata("final", refused + [t]),
    ]
    return steps


# --- malformed request bodies ---

def request_body(api, v, fields):
    """A valid request body (the bytes after the header), from JSON-form fields."""
    import recorder
    spec = recorder.api_spec(api)
    msg = recorder.msg_from_json(spec.request, fields)
    return b"".join(bytes(c) for c in _dk.encode_body(spec, v, "request", msg).finish())


def _edit(body, old, new):
    """body with the one occurrence of `old` replaced by `new` (asserted unique)."""
    assert body.count(old) == 1, (old, body)
    return body.replace(old, new)


def _s16(s):
    """A classic string: int16 length, UTF-8 bytes."""
    b = s.encode() if isinstance(s, str) else s
    return _struct.pack(">h", len(b)) + b


def _cs(s):
    """A compact string: uvarint(length + 1), UTF-8 bytes."""
    b = s.encode() if isinstance(s, str) else s
    return _dk.uvarint_bytes(len(b) + 1) + b


def raw(id, api, v, body, note, conn, req=None):
    return step(id, api, v, req or {}, conn=conn, body_hex=body.hex(), note=note)


@scenario("malformed-requests")
def _malformed_requests(S):
    """Request bodies that do not decode, or decode to odd values, each on its own
    connection: does Kafka answer or close? Nulls in non-nullable strings and arrays,
    a string length of -5 in a nullable string (Java reads any negative length as
    null), a compact string over 0x7fff, array counts past the bytes left, varints of
    6 bytes (and a padded 5-byte one, which Java reads), unknown tagged fields, a known
    tagged field whose size is wrong, trailing bytes, truncated bodies, invalid UTF-8
    in topic names. Each step's body_hex is a valid encoding with the edit its note says."""
    t = f"{S}-t"
    x = f"{S}-x"
    md4 = {"topics": [{"name": x}], "allow_auto_topic_creation": False}
    md12 = {"topics": [{"topic_id": {"$uuid": "0" * 32}, "name": x}],
            "allow_auto_topic_creation": False, "include_topic_authorized_operations": False}
    b_md4 = request_body("Metadata", 4, md4)
    b_md12 = request_body("Metadata", 12, md12)
    assert b_md12.endswith(_cs(x) + b"\x00\x00\x00\x00")   # name, topic tags, 2 bools, tags
    join5 = {"group_id": f"{S}-g", "session_timeout_ms": 30000, "rebalance_timeout_ms": 30000,
             "member_id": "", "group_instance_id": None, "protocol_type": "consumer",
             "protocols": [{"name": "range", "metadata": {"$hex": ""}}]}
    fc1 = {"key": f"{S}-g", "key_type": 0}
    ct4 = {"topics": [{"name": f"{S}-c", "num_partitions": 1, "replication_factor": 1,
                       "assignments": [], "configs": []}], "timeout_ms": 30000,
           "validate_only": True}
    ipid1 = {"transactional_id": f"{S}-tid", "transaction_timeout_ms": 60000}
    ipid4 = dict(ipid1, producer_id=-1, producer_epoch=-1)
    prod3 = {"transactional_id": f"{S}-tid", "acks": -1, "timeout_ms": 30000, "topic_data": [
        {"name": t, "partition_data": [{"index": 0, "records": batch(["m"])}]}]}
    fetch12 = {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1048576,
               "isolation_level": 0, "session_id": 0, "session_epoch": -1,
               "topics": [{"topic": t, "partitions": [
                   {"partition": 0, "current_leader_epoch": -1, "fetch_offset": 0,
                    "last_fetched_epoch": -1, "log_start_offset": -1,
                    "partition_max_bytes": 1048576}]}],
               "forgotten_topics_data": [], "rack_id": ""}
    b_fetch12 = request_body("Fetch", 12, fetch12)
    assert b_fetch12.endswith(_cs("") + b"\x00")            # rack_id "", no tagged fields
    cluster_id = _cs("abc")                                  # tag 0's content: 4 bytes
    apiv3 = {"client_software_name": "doze-conformance", "client_software_version": "1.0"}
    b_apiv3 = request_body("ApiVersions", 3, apiv3)
    long_name = "a" * 0x8000

    cases = [
        # --- nulls where the schema allows none
        ("metadata-v4-null-name", "Metadata", 4, md4,
         _edit(b_md4, _s16(x), _struct.pack(">h", -1)),
         "topic name (non-nullable before v10): int16 length -1, no bytes"),
        ("metadata-v12-null-name", "Metadata", 12, md12,
         _edit(b_md12, _cs(x), b"\x00"),
         "topic name (nullable in v10+): compact length 0 = null"),
        ("joingroup-v5-null-group-id", "JoinGroup", 5, join5,
         _edit(request_body("JoinGroup", 5, join5), _s16(f"{S}-g"), _struct.pack(">h", -1)),
         "group_id: int16 length -1"),
        ("findcoordinator-v1-null-key", "FindCoordinator", 1, fc1,
         _edit(request_body("FindCoordinator", 1, fc1), _s16(f"{S}-g"), _struct.pack(">h", -1)),
         "key: int16 length -1"),
        ("createtopics-v4-null-topics", "CreateTopics", 4, ct4,
         _struct.pack(">i", -1) + request_body("CreateTopics", 4, dict(ct4, topics=[]))[4:],
         "topics (non-nullable array): int32 count -1"),
        ("createtopics-v4-topics-minus5", "CreateTopics", 4, ct4,
         _struct.pack(">i", -5) + request_body("CreateTopics", 4, dict(ct4, topics=[]))[4:],
         "topics: int32 count -5"),
        # --- a negative length other than -1 in a nullable string
        ("initproducerid-v1-tid-minus5", "InitProducerId", 1, ipid1,
         _edit(request_body("InitProducerId", 1, ipid1), _s16(f"{S}-tid"), _struct.pack(">h", -5)),
         "transactional_id (nullable): int16 length -5, no bytes"),
        ("initproducerid-v4-tid-compact-huge", "InitProducerId", 4, ipid4,
         _edit(request_body("InitProducerId", 4, ipid4), _cs(f"{S}-tid"), b"\xff\xff\xff\xff\x0f"),
         "transactional_id (nullable, compact): uvarint 0xffffffff (Java: int -1, length -2)"),
        ("produce-v3-tid-minus5", "Produce", 3, prod3,
         _edit(request_body("Produce", 3, prod3), _s16(f"{S}-tid"), _struct.pack(">h", -5)),
         "transactional_id (nullable): int16 length -5, no bytes"),
        ("joingroup-v5-group-id-minus5", "JoinGroup", 5, join5,
         _edit(request_body("JoinGroup", 5, join5), _s16(f"{S}-g"), _struct.pack(">h", -5)),
         "group_id (non-nullable): int16 length -5"),
        # --- lengths and counts past what is there
        ("metadata-v12-name-0x8000", "Metadata", 12, md12,
         _edit(b_md12, _cs(x), _cs(long_name)),
         "topic name: compact length 0x8000 + 1, and 0x8000 bytes of 'a' (one over Java's limit)"),
        ("metadata-v12-name-0x7fff", "Metadata", 12, md12,
         _edit(b_md12, _cs(x), _cs(long_name[:0x7fff])),
         "control: a topic name of 0x7fff bytes (the longest Java reads)"),
        ("metadata-v4-count-past-end", "Metadata", 4, md4,
         _struct.pack(">i", 1000) + b_md4[4:],
         "topics: int32 count 1000, one topic's bytes follow"),
        ("metadata-v4-count-max", "Metadata", 4, md4,
         _struct.pack(">i", 0x7fffffff) + b_md4[4:],
         "topics: int32 count 2147483647"),
        ("metadata-v12-count-past-end", "Metadata", 12, md12,
         _dk.uvarint_bytes(1001) + b_md12[1:],
         "topics: compact count 1000, one topic's bytes follow"),
        ("metadata-v4-name-past-end", "Metadata", 4, md4,
         _edit(b_md4, _s16(x), _struct.pack(">h", 200) + x.encode()),
         "topic name: int16 length 200, the body ends before"),
        # --- varints
        ("metadata-v12-6-byte-varint", "Metadata", 12, md12,
         b"\x82\x80\x80\x80\x80\x00" + b_md12[1:],
         "topics: compact count (2 = one element) as a 6-byte varint"),
        ("metadata-v12-5-byte-varint", "Metadata", 12, md12,
         b"\x82\x80\x80\x80\x00" + b_md12[1:],
         "control: topics' compact count (2 = one element) padded to 5 bytes"),
        ("metadata-v12-5-byte-varint-high-bits", "Metadata", 12, md12,
         b"\x82\x80\x80\x80\x70" + b_md12[1:],
         "topics: compact count as 5 bytes with bits above 32 set (Java keeps the low 32: 2)"),
        # --- tagged fields
        ("metadata-v12-unknown-tag", "Metadata", 12, md12,
         b_md12[:-1] + b"\x01" + _dk.uvarint_bytes(99) + _dk.uvarint_bytes(3) + b"abc",
         "top-level tagged fields: one unknown (tag 99, 3 bytes)"),
        ("metadata-v12-unknown-tag-in-topic", "Metadata", 12, md12,
         _edit(b_md12, _cs(x) + b"\x00", _cs(x) + b"\x01\x07\x02zz"),
         "the topic entry's tagged fields: one unknown (tag 7, 2 bytes)"),
        ("metadata-v12-tag-past-end", "Metadata", 12, md12,
         b_md12[:-1] + b"\x01" + _dk.uvarint_bytes(99) + _dk.uvarint_bytes(50) + b"abc",
         "an unknown tag whose size (50) runs past the body's end"),
        ("metadata-v12-duplicate-tags", "Metadata", 12, md12,
         b_md12[:-1] + b"\x02\x63\x01a\x63\x01b",
         "tag 99 twice"),
        ("fetch-v12-cluster-id", "Fetch", 12, fetch12,
         b_fetch12[:-1] + b"\x01\x00" + _dk.uvarint_bytes(len(cluster_id)) + cluster_id,
         "control: tag 0 (cluster_id) = \"abc\", size right (4)"),
        ("fetch-v12-cluster-id-size-larger", "Fetch", 12, fetch12,
         b_fetch12[:-1] + b"\x01\x00" + _dk.uvarint_bytes(len(cluster_id) + 2) + cluster_id
         + b"\x00\x00",
         "tag 0 (cluster_id) = \"abc\", declared size 6, 4 bytes of string then 2 zero bytes"),
        ("fetch-v12-cluster-id-size-smaller", "Fetch", 12, fetch12,
         b_fetch12[:-1] + b"\x01\x00" + _dk.uvarint_bytes(len(cluster_id) - 1) + cluster_id,
         "tag 0 (cluster_id) = \"abc\", declared size 3, its 4 bytes follow"),
        # --- trailing and missing bytes
        ("metadata-v12-trailing", "Metadata", 12, md12, b_md12 + b"\xde\xad\xbe\xef",
         "4 bytes after a complete body"),
        ("metadata-v4-trailing", "Metadata", 4, md4, b_md4 + b"\xde\xad\xbe\xef",
         "4 bytes after a complete body"),
        ("metadata-v12-truncated", "Metadata", 12, md12, b_md12[:-2],
         "the last 2 bytes cut off"),
        ("metadata-v4-truncated", "Metadata", 4, md4, b_md4[:-1],
         "the last byte (allow_auto_topic_creation) cut off"),
        ("metadata-v12-empty", "Metadata", 12, md12, b"", "no body at all"),
        ("apiversions-v3-truncated", "ApiVersions", 3, apiv3, b_apiv3[:-3],
         "client_software_version cut short"),
        ("apiversions-v3-trailing", "ApiVersions", 3, apiv3, b_apiv3 + b"\xde\xad",
         "2 bytes after a complete body"),
        # --- invalid UTF-8
        ("metadata-v12-invalid-utf8", "Metadata", 12, md12,
         _edit(b_md12, _cs(x), _cs(f"{S}-".encode() + b"\xff\xfe")),
         "topic name: S- then bytes ff fe (no UTF-8: Java reads U+FFFD U+FFFD)"),
        ("createtopics-v4-invalid-utf8", "CreateTopics", 4, ct4,
         _edit(request_body("CreateTopics", 4, ct4), _s16(f"{S}-c"), _s16(f"{S}-".encode() + b"\xc3")),
         "topic name: S- then byte c3 (a cut UTF-8 sequence)"),
    ]
    steps = [
        *create_topics("create", [t]),
        # a fresh Kafka answers COORDINATOR_LOAD_IN_PROGRESS to the first idempotent
        # InitProducerId (it has no block of producer ids yet): ask until it has one
        step("idempotent-warm-up", "InitProducerId", 1, {
            "transactional_id": None, "transaction_timeout_ms": 60000}, until={
            "path": "error_code", "equals": 0, "timeout_ms": 30000, "interval_ms": 200}),
    ]
    for i, (id, api, v, req, body, note) in enumerate(cases):
        steps.append(raw(id, api, v, body, note, conn=100 + i, req=req))
    # the broker still answers on a fresh connection
    steps.append(metadata("after", [t], conn=99))
    return steps


# --- internal topics ---

CONSUMER_OFFSETS, TRANSACTION_STATE = "__consumer_offsets", "__transaction_state"
SHARE_GROUP_STATE, CLUSTER_METADATA = "__share_group_state", "__cluster_metadata"
FAR_FUTURE_MS = 4102444800000       # 2100-01-01: later than any record


def kafka_partition_for(key, partitions=50):
    """Kafka's partitionFor(groupId / transactionalId): Utils.abs(key.hashCode()) % partitions
    (Utils.abs maps Integer.MIN_VALUE to 0)."""
    h = 0
    for unit in _struct.unpack(f">{len(key.encode('utf-16-be')) // 2}H", key.encode("utf-16-be")):
        h = (31 * h + unit) & 0xFFFFFFFF
    h = h - (1 << 32) if h >= 1 << 31 else h
    return 0 if h == -(1 << 31) else abs(h) % partitions


def _internal_metadata_versions(prefix, topics):
    """Metadata by name at v0, v1 (v0-v3 always auto-create), v4, v9, v12 (v4+ with and
    without allow_auto_topic_creation)."""
    steps = [step(f"{prefix}-v0", "Metadata", 0, {"topics": [{"name": t} for t in topics]}),
             step(f"{prefix}-v1", "Metadata", 1, {"topics": [{"name": t} for t in topics]})]
    for v in (4, 9, 12):
        steps.append(metadata(f"{prefix}-v{v}", topics, v=v))
        steps.append(metadata(f"{prefix}-v{v}-auto", topics, v=v, auto_create=True))
    return steps


INTERNAL_CONFIG_KEYS = ["cleanup.policy", "segment.bytes", "compression.type", "min.insync.replicas",
                        "retention.ms", "unclean.leader.election.enable", "max.message.bytes"]
INTERNAL_BROKER_SETTINGS = {
    # Kafka's defaults, named so that the recorder starts a Kafka of its own for the
    # scenario (it lists every topic of the broker) and doze is told them too
    "offsets.topic.num.partitions": 50,
    "transaction.state.log.num.partitions": 50,
    # realkafka.py sets these (one broker); DescribeConfigs shows them: __transaction_state's
    # min.insync.replicas, and min.insync.replicas' STATIC_BROKER_CONFIG synonym
    "transaction.state.log.min.isr": 1,
    "min.insync.replicas": 1,
}


INTERNAL_RECORDS = "doze-internal-topics-hold-no-records"
_INTERNAL_WHY = ("Kafka's group and transaction coordinators write their state as records into "
                 "__consumer_offsets and __transaction_state; doze keeps it in meta.db, so those "
                 "partitions' logs are empty: offsets, timestamps and records of internal partitions "
                 "are not compared (errors, partitions and everything else are)")


def _internal_content(*steps):
    return {s: {"name": INTERNAL_RECORDS, "internal_content": True, "why": _INTERNAL_WHY} for s in steps}


@scenario("internal-topics", broker_settings=INTERNAL_BROKER_SETTINGS, known_differences=_internal_content(
    "lo-latest", "lo-max-ts", "lo-by-time-0", "lo-by-time-2023", "lo-committed", "lo-v1",
    "fetch-v12", "fetch-v12-committed", "fetch-v4", "fetch-v4-committed", "fetch-ts-v12",
    "open-fetch-uncommitted", "open-fetch-committed", "open-lo-committed", "open-lo-uncommitted",
    "after-fetch-uncommitted", "after-fetch-committed", "after-fetch-ts", "after-lo-latest",
    "after-lo-max-ts", "after-lo-by-time-0", "after-lo-by-time-2023", "after-produce"))
def _internal_topics(S):
    """__consumer_offsets and __transaction_state as Kafka shows them. On a fresh broker
    (its own: the scenario lists every topic): Metadata of all topics and by name
    before any coordinator lookup, ListOffsets and DescribeConfigs of them. The first
    FindCoordinator (COORDINATOR_NOT_AVAILABLE: it asks the controller to create the
    topic), polled until ready; OffsetCommit; Metadata of all topics and by name at v0,
    v1, v4, v9, v12, with and without auto-creation; the same after the transactional
    FindCoordinator and InitProducerId. ListOffsets -1/-2/-3 and by time on the group's
    and the transactional id's partitions and an empty one; DescribeConfigs (all, named
    keys, synonyms, v1); Fetch v4/v12, read_uncommitted/read_committed, of the group's
    partition (its OffsetCommit record, Kafka's internal format) before, during and after
    a transactional offset commit, and of the transactional id's partition. Produce
    (v9 acks -1 and 1, v3) to both (and with a user topic in the same request),
    AddPartitionsToTxn of an internal partition, DeleteRecords, CreateTopics of the
    internal names, __cluster_metadata, a name starting with __, names that collide by
    '.'/'_' (and Metadata / ListOffsets of them), CreatePartitions (validate_only,
    same, fewer, more), DeleteTopics of both (Kafka deletes them), then FindCoordinator
    again (Kafka creates __consumer_offsets anew) and OffsetFetch (the offsets are gone)."""
    g, tid, t = f"{S}-g", f"{S}-tid", f"{S}-t"
    CO, TSX = CONSUMER_OFFSETS, TRANSACTION_STATE
    pg, pt = kafka_partition_for(g), kafka_partition_for(tid)
    eg = next(p for p in (0, 1, 2) if p != pg)          # a __consumer_offsets partition no one uses
    et = next(p for p in (0, 1, 2) if p != pt)
    by_name = [CO, TSX, SHARE_GROUP_STATE, CLUSTER_METADATA]

    def fc_first(id, key, key_type):
        return step(id, "FindCoordinator", 4, {"key_type": key_type, "coordinator_keys": [key]})

    def ct(id, names, v=7, validate_only=False, partitions=1):
        return step(id, "CreateTopics", v, {"topics": [
            {"name": n, "num_partitions": partitions, "replication_factor": 1, "assignments": [],
             "configs": []} for n in names], "timeout_ms": 30000, "validate_only": validate_only})

    def cp(id, topics, validate_only=False):
        return step(id, "CreatePartitions", 3, {"topics": [
            {"name": n, "count": c, "assignments": None} for n, c in topics],
            "timeout_ms": 30000, "validate_only": validate_only})

    def dr(id, parts):
        return step(id, "DeleteRecords", 2, {"topics": [
            {"name": n, "partitions": [{"partition_index": p, "offset": o} for p, o in ps.items()]}
            for n, ps in parts.items()], "timeout_ms": 30000})

    def lo_all(prefix, parts, isolation=0):
        return [list_offsets(f"{prefix}-latest", {n: {p: -1 for p in ps} for n, ps in parts.items()},
                             isolation=isolation),
                list_offsets(f"{prefix}-earliest", {n: {p: -2 for p in ps} for n, ps in parts.items()}),
                list_offsets(f"{prefix}-max-ts", {n: {p: -3 for p in ps} for n, ps in parts.items()}),
                list_offsets(f"{prefix}-by-time-0", {n: {p: 0 for p in ps} for n, ps in parts.items()}),
                list_offsets(f"{prefix}-by-time-2023", {n: {p: 1700000000000 for p in ps}
                                                         for n, ps in parts.items()}),
                list_offsets(f"{prefix}-by-time-2100", {n: {p: FAR_FUTURE_MS for p in ps}
                                                         for n, ps in parts.items()})]

    collide_co, collide_ts = "__consumer.offsets", "__transaction.state"
    u_under, u_dot = f"{S}_x", f"{S}.x"
    steps = [
        # --- 1. a fresh broker: no internal topic yet
        metadata("fresh-all", None),
        step("fresh-all-v0", "Metadata", 0, {"topics": []}),
        metadata("fresh-by-name", by_name),
        metadata("fresh-by-name-v4", [CO, TSX], v=4),
        list_offsets("fresh-list-offsets", {CO: {0: -1}, TSX: {0: -1}}),
        describe_configs("fresh-describe-configs", [(2, CO, ["cleanup.policy"]),
                                                    (2, TSX, ["cleanup.policy"])]),
        # --- 2. the group coordinator creates __consumer_offsets
        fc_first("find-group-first", g, 0),
        find_coordinator("find-group", g, 0),
        *create_topics("create", [(t, 2)]),
        offset_commit("commit", g, {t: {0: 5, 1: 7}}, until={
            "path": "topics.*.partitions.*.error_code", "equals": 0, "timeout_ms": 30000,
            "interval_ms": 200}),
        metadata("group-all", None),
        step("group-all-v0", "Metadata", 0, {"topics": []}),
        step("group-all-v1", "Metadata", 1, {"topics": None}),
        *_internal_metadata_versions("group-co", [CO]),
        metadata("group-ts-still-missing", [TSX, SHARE_GROUP_STATE, CLUSTER_METADATA]),
        # --- 3. the transaction coordinator creates __transaction_state
        fc_first("find-txn-first", tid, 1),
        find_coordinator("find-txn", tid, 1),
        init_pid("init", tid),
        metadata("txn-all", None),
        *_internal_metadata_versions("txn-both", [CO, TSX]),
        metadata("txn-by-name-others", by_name),
        # --- 4. ListOffsets
        *lo_all("lo", {CO: [pg, eg], TSX: [pt, et]}),
        list_offsets("lo-committed", {CO: {pg: -1, eg: -1}, TSX: {pt: -1}}, isolation=1),
        list_offsets("lo-v1", {CO: {pg: -1}, TSX: {pt: -2}}, v=1),
        list_offsets("lo-unknown-partition", {CO: {50: -1}, TSX: {50: -1}}),
        # --- 5. DescribeConfigs
        describe_configs("dc-co-all", [(2, CO, None)]),
        describe_configs("dc-ts-all", [(2, TSX, None)]),
        describe_configs("dc-keys", [(2, CO, INTERNAL_CONFIG_KEYS), (2, TSX, INTERNAL_CONFIG_KEYS)]),
        describe_configs("dc-synonyms", [(2, CO, ["cleanup.policy", "segment.bytes", "compression.type"]),
                                         (2, TSX, ["cleanup.policy", "min.insync.replicas"])],
                         synonyms=True),
        describe_configs("dc-v1", [(2, CO, ["cleanup.policy", "segment.bytes"])], v=1),
        # --- 6. Fetch: the group's partition holds its OffsetCommit record
        fetch("fetch-v12", {CO: {pg: 0, eg: 0}}),
        fetch("fetch-v12-committed", {CO: {pg: 0, eg: 0}}, isolation=1),
        fetch("fetch-v4", {CO: {pg: 0}}, v=4),
        fetch("fetch-v4-committed", {CO: {pg: 0}}, v=4, isolation=1),
        fetch("fetch-ts-v12", {TSX: {pt: 0, et: 0}}),
        fetch("fetch-past-end", {CO: {pg: 99}}),
        # a transactional offset commit: an open transaction in __consumer_offsets
        add_offsets("txn-add-offsets", tid, "init", g),
        step("txn-offset-commit", "TxnOffsetCommit", 3, {
            "transactional_id": tid, "group_id": g, "producer_id": pid_of("init"),
            "producer_epoch": epoch_of("init"), "generation_id": -1, "member_id": "",
            "group_instance_id": None, "topics": [{"name": t, "partitions": [
                {"partition_index": 0, "committed_offset": 9, "committed_leader_epoch": -1,
                 "committed_metadata": "m"}]}]}),
        fetch("open-fetch-uncommitted", {CO: {pg: 0}}),
        fetch("open-fetch-committed", {CO: {pg: 0}}, isolation=1),
        list_offsets("open-lo-committed", {CO: {pg: -1}}, isolation=1),
        list_offsets("open-lo-uncommitted", {CO: {pg: -1}}),
        end_txn("txn-commit", tid, "init", True, retry=RETRY_CONCURRENT),
        wait_txn_state("txn-wait", tid, "CompleteCommit"),
        fetch("after-fetch-uncommitted", {CO: {pg: 0}}),
        fetch("after-fetch-committed", {CO: {pg: 0}}, isolation=1),
        fetch("after-fetch-ts", {TSX: {pt: 0}}),
        *lo_all("after-lo", {CO: [pg], TSX: [pt]}),
        offset_fetch("offsets", g, {t: [0, 1]}),
        # --- 7. Produce and AddPartitionsToTxn: clients may not write to internal topics
        produce("produce-co", {CO: {pg: batch(["x"]), eg: batch(["y"]), 99: batch(["z"])}}),
        produce("produce-co-acks1", {CO: {pg: batch(["x"])}}, acks=1),
        produce("produce-co-v3", {CO: {pg: batch(["x"])}}, v=3),
        produce("produce-ts", {TSX: {pt: batch(["x"]), et: batch(["y"])}}),
        produce("produce-ts-acks1", {TSX: {pt: batch(["x"])}}, acks=1),
        produce("produce-mixed", {CO: {eg: batch(["x"])}, t: {0: batch(["u"])}}),
        add_partitions("add-internal", tid, "init", {CO: [eg], t: [1]}),
        list_offsets("after-produce", {CO: {pg: -1, eg: -1}, TSX: {pt: -1, et: -1}, t: {0: -1}}),
        # --- 8. DeleteRecords
        dr("delete-records", {CO: {pg: 0, eg: -1}, TSX: {pt: -1}}),
        # --- 9. CreateTopics: the internal names, __cluster_metadata, __ names, collisions
        ct("ct-internal-exist", [CO, TSX]),
        ct("ct-internal-exist-v4", [CO], v=4),
        ct("ct-share-state-validate-only", [SHARE_GROUP_STATE], validate_only=True),
        ct("ct-cluster-metadata", [CLUSTER_METADATA]),
        ct("ct-cluster-metadata-validate-only", [CLUSTER_METADATA], validate_only=True),
        ct("ct-double-underscore", [f"__{S}-new"]),
        wait_topics("ct-double-underscore-wait", [f"__{S}-new"]),
        ct("ct-collide-internal", [collide_co, collide_ts]),
        ct("ct-collide-internal-validate-only", [collide_co], validate_only=True),
        *create_topics("create-underscore", [u_under]),
        ct("ct-collide-user", [u_dot]),
        metadata("collide-metadata", [collide_co, collide_ts, u_dot, u_under, f"__{S}-new"]),
        metadata("collide-metadata-auto", [collide_co, u_dot], auto_create=True),
        {"sleep_ms": 1000},
        metadata("collide-metadata-after-auto", [collide_co, u_dot]),
        list_offsets("collide-list-offsets", {collide_co: {0: -1}, u_dot: {0: -1}, u_under: {0: -1}}),
        # --- 10. CreatePartitions
        cp("cp-validate-only", [(CO, 60), (TSX, 60)], validate_only=True),
        cp("cp-same", [(CO, 50), (TSX, 50)]),
        cp("cp-fewer", [(CO, 10), (TSX, 1)]),
        metadata("cp-not-grown", [CO, TSX]),
        cp("cp-grow", [(CO, 51), (TSX, 52)]),
        metadata("cp-grown", [CO, TSX], until={"path": "topics.*.partitions.*.partition_index",
                                               "count": 103, "timeout_ms": 30000, "interval_ms": 100}),
        # --- 11. DeleteTopics: Kafka deletes them; the group coordinator creates
        # __consumer_offsets again on the next FindCoordinator, without the offsets
        metadata("ts-id", [TSX]),
        step("delete-topics", "DeleteTopics", 6, {"topics": [
            {"name": CO, "topic_id": {"$uuid": "0" * 32}},                 # by name
            {"name": None, "topic_id": ref("ts-id.topics.0.topic_id")}],   # by id
            "timeout_ms": 30000}),
        metadata("deleted", [CO, TSX], until={"path": "topics.*.error_code", "equals": 3,
                                              "timeout_ms": 30000, "interval_ms": 100}),
        metadata("deleted-all", None),
        fc_first("refind-group-first", g, 0),
        find_coordinator("refind-group", g, 0),
        metadata("recreated", [CO, TSX]),
        offset_fetch("offsets-after-delete", g, {t: [0, 1]}, until={
            "path": "groups.0.error_code", "not_in": RETRIABLE_COORDINATOR, "timeout_ms": 30000,
            "interval_ms": 200}),
    ]
    return steps


# --- compacted topics: every record needs a key ---

def keyed_batch(keys, value_prefix="v", compression=None, timestamp_ms=TS, **kw):
    """A batch whose record i has key keys[i] (None: a null key, "": an empty key) and
    value value_prefix + i (None as value_prefix: null values, tombstones)."""
    b = {"records": [[k, None if value_prefix is None else f"{value_prefix}{i}"]
                     for i, k in enumerate(keys)],
         "producer_id": -1, "producer_epoch": -1, "base_sequence": -1, "attributes": 0,
         "timestamp_ms": timestamp_ms}
    if compression:
        b["compression"] = compression
    b.update(kw)
    return {"$batch": b}


def _compact_kinds():
    """(name, keys): the batches a compacted topic is given."""
    return [
        ("all-keyless", [None] * 10),
        ("some-keyless", [None if i % 10 == 3 else f"k{i}" for i in range(100)]),   # 10 of 100
        ("one-keyless", [None]),
        ("last-keyless", ["k0", "k1", None]),
        ("all-keyed", [f"k{i}" for i in range(10)]),
        ("empty-keys", ["", "", "k2"]),
    ]


@scenario("compacted-produce")
def _compacted_produce(S):
    """A topic with cleanup.policy=compact refuses a batch holding a record without a key
    (INVALID_RECORD, record_errors: each keyless record's batch_index). Produce v3, v8
    and v9 (acks -1; acks 1 once) of batches where all, some (10 of 100, as librdkafka's
    test 0011), one, or none of the records have a null key, and of empty (not null) keys
    and tombstones, uncompressed and gzip, each followed by ListOffsets -1 (nothing of a
    refused batch is stored) and, per partition, a Fetch at the end. Also: compact,delete;
    a topic with compression.type=gzip (Kafka recompresses); key and timestamp errors in one
    batch (message.timestamp.before.max.ms: INVALID_TIMESTAMP wins, each record has one
    error); an idempotent producer (a refused batch does not use up its sequence) and a
    transactional one; DeleteRecords (POLICY_VIOLATION on compact, allowed on
    compact,delete); a delete topic turned compact by IncrementalAlterConfigs and back by
    AlterConfigs, with keyless records produced before, between and after."""
    c, cd, d = f"{S}-compact", f"{S}-compact-delete", f"{S}-delete"
    cg, ct_, tx = f"{S}-compact-gzip", f"{S}-compact-ts", f"{S}-compact-txn"
    compact = dict(NO_TIME_ROLL, **{"cleanup.policy": "compact"})
    tid = f"{S}-tid"
    versions = (3, 8, 9)
    steps = [*create_topics("create", [
        (c, len(versions) + 1, compact),                           # a partition per version, + idempotent
        (cd, 1, dict(NO_TIME_ROLL, **{"cleanup.policy": "compact,delete"})),
        (d, 1, NO_TIME_ROLL),
        (cg, 1, dict(compact, **{"compression.type": "gzip"})),
        (ct_, 1, dict(compact, **{"message.timestamp.before.max.ms": "86400000"})),
        (tx, 1, compact),
    ])]
    steps.append(describe_configs("configs", [(2, n, ["cleanup.policy", "compression.type",
                                                      "message.timestamp.before.max.ms"])
                                              for n in (c, cd, d, cg, ct_)]))

    def then_latest(tag, topic, p):
        return list_offsets(f"{tag}-latest", {topic: {p: -1}})

    # --- 1. every kind, v3 / v8 / v9, uncompressed and gzip
    for p, v in enumerate(versions):
        for kind, keys in _compact_kinds():
            for comp in (None, "gzip"):
                tag = f"v{v}-{kind}{'-gzip' if comp else ''}"
                steps += [produce(tag, {c: {p: keyed_batch(keys, compression=comp)}}, v=v),
                          then_latest(tag, c, p)]
        steps += [produce(f"v{v}-tombstone", {c: {p: keyed_batch(["k0", "k1"], value_prefix=None)}}, v=v),
                  then_latest(f"v{v}-tombstone", c, p)]
    steps += [
        produce("v9-all-keyless-acks1", {c: {2: keyed_batch([None] * 3)}}, acks=1),
        then_latest("v9-all-keyless-acks1", c, 2),
        # one request, a keyless batch on one partition and a keyed one on another
        produce("v9-two-partitions", {c: {0: keyed_batch([None, None]), 1: keyed_batch(["a", "b"])}}),
        list_offsets("v9-two-partitions-latest", {c: {0: -1, 1: -1}}),
        fetch("fetch-compact", {c: {p: 0 for p in range(len(versions))}}),
        list_offsets("compact-max-ts", {c: {p: -3 for p in range(len(versions))}}),
    ]
    # --- 2. compact,delete
    steps += [
        produce("cd-all-keyless", {cd: {0: keyed_batch([None] * 10)}}),
        produce("cd-some-keyless", {cd: {0: keyed_batch([None if i % 10 == 3 else f"k{i}"
                                                         for i in range(100)])}}),
        produce("cd-all-keyed", {cd: {0: keyed_batch(["k0", "k1", "k2"])}}),
        then_latest("cd", cd, 0),
        fetch("fetch-compact-delete", {cd: {0: 0}}),
    ]
    # --- 3. DeleteRecords: refused on compact, allowed on compact,delete
    steps += [
        step("delete-records", "DeleteRecords", 2, {"topics": [
            {"name": c, "partitions": [{"partition_index": 0, "offset": 1}]},
            {"name": cd, "partitions": [{"partition_index": 0, "offset": 1}]}], "timeout_ms": 30000}),
        list_offsets("delete-records-earliest", {c: {0: -2}, cd: {0: -2}}),
    ]
    # --- 4. compression.type=gzip on the topic: Kafka recompresses what it takes
    steps += [
        produce("gzip-topic-keyless", {cg: {0: keyed_batch([None, "k1"])}}),
        produce("gzip-topic-keyless-gzip", {cg: {0: keyed_batch([None, "k1"], compression="gzip")}}),
        produce("gzip-topic-keyed", {cg: {0: keyed_batch(["k0", "k1"])}}),
        produce("gzip-topic-keyed-gzip", {cg: {0: keyed_batch(["k2", "k3"], compression="gzip")}}),
        then_latest("gzip-topic", cg, 0),
        fetch("fetch-gzip-topic", {cg: {0: 0}}),
    ]
    # --- 5. key and timestamp errors in one batch (timestamps of 2023: older than a day)
    old = 1700000000000
    steps += [
        produce("ts-keyed-old", {ct_: {0: keyed_batch(["k0", "k1"], timestamp_ms=old)}}),
        produce("ts-keyless-old", {ct_: {0: keyed_batch([None, None], timestamp_ms=old)}}),
        produce("ts-mixed-old", {ct_: {0: keyed_batch([None, "k1", None, "k3"], timestamp_ms=old)}}),
        produce("ts-mixed-old-v3", {ct_: {0: keyed_batch([None, "k1"], timestamp_ms=old)}}, v=3),
        produce("ts-mixed-old-gzip", {ct_: {0: keyed_batch([None, "k1"], timestamp_ms=old,
                                                           compression="gzip")}}),
        produce("ts-mixed-no-ts", {ct_: {0: keyed_batch([None, "k1"])}}),
        produce("ts-keyed-no-ts", {ct_: {0: keyed_batch(["k0", "k1"])}}),
        then_latest("ts", ct_, 0),
    ]
    # --- 6. an idempotent producer: a refused batch does not use up its sequence
    ip = len(versions)

    def idem(seq, keys):
        return keyed_batch(keys, producer_id=pid_of("idem"), producer_epoch=epoch_of("idem"),
                           base_sequence=seq)
    steps += [
        step("idem", "InitProducerId", 5, {"transactional_id": None, "transaction_timeout_ms": 0,
                                           "producer_id": -1, "producer_epoch": -1},
             until={"path": "error_code", "equals": 0, "timeout_ms": 30000, "interval_ms": 200}),
        produce("idem-seq0-keyless", {c: {ip: idem(0, [None, "k1"])}}),
        produce("idem-seq0-keyed", {c: {ip: idem(0, ["k0", "k1"])}}),
        produce("idem-seq2-keyless", {c: {ip: idem(2, [None])}}),
        produce("idem-seq2-keyed", {c: {ip: idem(2, ["k2"])}}),
        produce("idem-seq2-duplicate-keyless", {c: {ip: idem(2, [None])}}),
        produce("idem-seq3-keyed", {c: {ip: idem(3, ["k3"])}}),
        then_latest("idem", c, ip),
    ]
    # --- 7. a transactional producer
    steps += [
        *txn_setup(S, tid, "init"),
        add_partitions("txn-add", tid, "init", {tx: [0]}),
        produce("txn-seq0-keyless", {tx: {0: keyed_batch([None, "k1"], producer_id=pid_of("init"),
                                                         producer_epoch=epoch_of("init"),
                                                         base_sequence=0, attributes=0x10)}}, tid=tid),
        produce("txn-seq0-keyed", {tx: {0: keyed_batch(["k0", "k1"], producer_id=pid_of("init"),
                                                       producer_epoch=epoch_of("init"),
                                                       base_sequence=0, attributes=0x10)}}, tid=tid),
        end_txn("txn-commit", tid, "init", True, retry=RETRY_CONCURRENT),
        wait_txn_state("txn-wait", tid, "CompleteCommit"),
        fetch("fetch-txn", {tx: {0: 0}}, isolation=1),
    ]
    # --- 8. delete -> compact (IncrementalAlterConfigs) -> delete (AlterConfigs)
    def policy_is(id, value):
        return describe_configs(id, [(2, d, ["cleanup.policy"])], until={
            "path": "results.0.configs.0.value", "equals": value, "timeout_ms": 30000,
            "interval_ms": 100})
    steps += [
        produce("delete-keyless", {d: {0: keyed_batch([None, None])}}),
        step("to-compact", "IncrementalAlterConfigs", 1, {"resources": [
            {"resource_type": 2, "resource_name": d, "configs": [
                {"name": "cleanup.policy", "config_operation": 0, "value": "compact"}]}],
            "validate_only": False}),
        policy_is("to-compact-seen", "compact"),
        {"sleep_ms": 1000},      # the log's config follows the metadata image a moment later
        produce("now-compact-keyless", {d: {0: keyed_batch([None, None])}}),
        produce("now-compact-keyed", {d: {0: keyed_batch(["k0", "k1"])}}),
        step("to-delete", "AlterConfigs", 1, {"resources": [
            {"resource_type": 2, "resource_name": d, "configs": [
                {"name": "cleanup.policy", "value": "delete"},
                {"name": "segment.ms", "value": NO_TIME_ROLL["segment.ms"]}]}],
            "validate_only": False}),
        policy_is("to-delete-seen", "delete"),
        {"sleep_ms": 1000},
        produce("delete-again-keyless", {d: {0: keyed_batch([None, None])}}),
        then_latest("altered", d, 0),
        fetch("fetch-altered", {d: {0: 0}}),
    ]
    return steps


@scenario("internal-topics-settings", broker_settings={
    "offsets.topic.num.partitions": 7, "transaction.state.log.num.partitions": 5,
    "offsets.topic.segment.bytes": 52428800, "transaction.state.log.segment.bytes": 20971520,
    "transaction.state.log.min.isr": 1, "min.insync.replicas": 1},
    known_differences=_internal_content("latest"))
def _internal_topics_settings(S):
    """__consumer_offsets and __transaction_state under other settings (own broker): the
    partition counts follow offsets.topic.num.partitions (7) and
    transaction.state.log.num.partitions (5), segment.bytes follows
    offsets.topic.segment.bytes / transaction.state.log.segment.bytes, and a group or
    transactional id is placed by its hash modulo those counts (ListOffsets -1 of every
    partition shows which one holds the OffsetCommit / InitProducerId record). Here the
    topics are created by Metadata, not by FindCoordinator: __consumer_offsets by a
    Metadata v1 naming it (v0-v3 always allow auto-creation), __transaction_state by
    Metadata v12 with allow_auto_topic_creation; Kafka creates them as internal topics,
    with their own configs (and answers UNKNOWN_TOPIC_OR_PARTITION meanwhile)."""
    g, tid, t = f"{S}-g", f"{S}-tid", f"{S}-t"
    CO, TSX = CONSUMER_OFFSETS, TRANSACTION_STATE
    keys = ["cleanup.policy", "segment.bytes", "compression.type", "min.insync.replicas"]
    return [
        step("create-co-v1", "Metadata", 1, {"topics": [{"name": CO}]}),
        metadata("create-ts-v12-auto", [TSX], auto_create=True),
        metadata("created", [CO, TSX], until={"path": "topics.*.error_code", "equals": 0,
                                              "timeout_ms": 30000, "interval_ms": 100}),
        step("find-group-first", "FindCoordinator", 4, {"key_type": 0, "coordinator_keys": [g]}),
        find_coordinator("find-group", g, 0),
        *create_topics("create", [t]),
        offset_commit("commit", g, {t: {0: 3}}, until={
            "path": "topics.*.partitions.*.error_code", "equals": 0, "timeout_ms": 30000,
            "interval_ms": 200}),
        find_coordinator("find-txn", tid, 1),
        init_pid("init", tid),
        metadata("all", None),
        metadata("by-name", [CO, TSX]),
        step("by-name-v1", "Metadata", 1, {"topics": [{"name": CO}, {"name": TSX}]}),
        list_offsets("latest", {CO: {p: -1 for p in range(7)}, TSX: {p: -1 for p in range(5)}}),
        list_offsets("beyond", {CO: {7: -1}, TSX: {5: -1}}),
        describe_configs("configs", [(2, CO, keys), (2, TSX, keys)]),
        offset_fetch("offsets", g, {t: [0]}),
    ]


# --- every config name Kafka knows ----------------------------------------------------
# Built from doze_kafka's copy of Kafka 4.3.1's config tables (KAFKA_TOPIC_CONFIGS,
# KAFKA_BROKER_CONFIGS: generated from Kafka itself by conformance/configs/extract.py),
# so that a name Kafka knows is never left out.

# ConfigSource codes and IncrementalAlterConfigs operations
SRC_TOPIC, SRC_DYNAMIC_BROKER, SRC_DYNAMIC_DEFAULT, SRC_STATIC, SRC_DEFAULT = 1, 2, 3, 4, 5
OP_SET, OP_DELETE = 0, 1
I64_MAX = (1 << 63) - 1

# Topic configs left out of the "every config" requests: the internal one (not described
# unless set, no default).
ALL_CONFIGS_TOPIC_SKIP = {"internal.segment.bytes"}
# Topic configs whose value is fixed in every request: remote.storage.enable=true is
# refused while tiered storage is off (the broker under test has none).
ALL_CONFIGS_TOPIC_FIXED = {"remote.storage.enable": "false"}
# Checks that give no other value of their own: (first, second) non-default values.
ALL_CONFIGS_TOPIC_VALUES = {
    "retention.bytes": ("1073741824", "2147483648"),   # no validator; -1 + 1 would be 0 (delete all)
    "follower.replication.throttled.replicas": ("0:1", "*"),
    "leader.replication.throttled.replicas": ("0:1", "*"),
    "cleanup.policy": ("compact", "compact,delete"),
}


def _double_text(x):
    """A double as Java's Double.toString prints it, for the plain values used here
    (0.625, 0.75: Python's repr agrees)."""
    return repr(float(x))


def topic_config_value(name, which):
    """A valid non-default value of topic config `name` (which = 1 or 2: two different
    ones where the check allows), derived from Kafka's check; the default where none can be."""
    if name in ALL_CONFIGS_TOPIC_FIXED:
        return ALL_CONFIGS_TOPIC_FIXED[name]
    if name in ALL_CONFIGS_TOPIC_VALUES:
        return ALL_CONFIGS_TOPIC_VALUES[name][which - 1]
    typ, default, check, _ = _dk.KAFKA_TOPIC_CONFIGS[name]
    if typ == "boolean":
        return "true" if default == "false" else "false"
    if check and check[0] in ("in", "list") and len(check) > 1:
        others = [m for m in check[1:] if m != default]
        return others[(which - 1) % len(others)]
    if check and check[0] == "or":                   # gzip: [1..9] or -1
        rng = check[1]
        return str(rng[1] + which)
    if typ == "double":
        hi = check[2]
        d = float(default)
        return _double_text(d + (hi - d) * which / 4)
    if typ in ("int", "long", "short"):
        d = int(default)
        lo, hi = (check[1], check[2]) if check and check[0] == "range" else (None, None)
        top = hi if hi is not None else {"int": (1 << 31) - 1, "long": I64_MAX,
                                         "short": (1 << 15) - 1}[typ]
        v = d + which if d + which <= top else d - which
        assert lo is None or v >= lo, name
        return str(v)
    return default


def all_topic_configs(which):
    """{name: value} for every topic config (but the skipped internal one)."""
    out = {n: topic_config_value(n, which) for n in _dk.KAFKA_TOPIC_CONFIGS
           if n not in ALL_CONFIGS_TOPIC_SKIP}
    # LogConfig.validate: min.compaction.lag.ms <= max.compaction.lag.ms
    assert int(out["min.compaction.lag.ms"]) <= int(out["max.compaction.lag.ms"])
    return out


# Broker configs with a null default: their effective value (what the broker uses while
# they are unset), so that setting them changes nothing real: log.retention.hours=168,
# log.roll.hours=168, log.roll.jitter.hours=0, log.flush.scheduler.interval.ms=Long.MAX.
ALL_CONFIGS_NULL_DEFAULT_VALUES = {
    "log.retention.ms": "604800000", "log.roll.ms": "604800000", "log.roll.jitter.ms": "0",
    "log.flush.interval.ms": str(I64_MAX)}
# Per-broker configs not set on the broker under test: they could break it (its
# listeners and their security: listeners, listener.security.protocol.map, and every
# ssl.* / sasl.* / listener.* name would reconfigure or restart the listeners, or need
# keystores and JAAS files there are none of; log.dirs is read-only but named here too).
# What is left of the 27 per-broker configs: principal.builder.class, cordoned.log.dirs.
ALL_CONFIGS_BROKER_SKIP_PREFIXES = ("ssl.", "sasl.", "listener.")
ALL_CONFIGS_BROKER_SKIP = {"listeners", "advertised.listeners", "listener.security.protocol.map",
                           "log.dirs"}


def broker_configs_of_mode(mode):
    names = [n for n, (_, _, _, m) in _dk.KAFKA_BROKER_CONFIGS.items() if m == mode]
    return sorted(n for n in names if n not in ALL_CONFIGS_BROKER_SKIP
                  and not n.startswith(ALL_CONFIGS_BROKER_SKIP_PREFIXES))


def broker_default_value(name):
    default = _dk.KAFKA_BROKER_CONFIGS[name][1]
    if default is None:
        return ALL_CONFIGS_NULL_DEFAULT_VALUES[name]
    return default


def _chunks(items, n):
    return [items[i:i + n] for i in range(0, len(items), n)]


# What realkafka.py writes in the recording Kafka's server.properties (but its addresses
# and directory: listeners, advertised.listeners, controller.quorum.bootstrap.servers,
# log.dirs), so that doze is told the same: DescribeConfigs of the broker lists them
# (STATIC_BROKER_CONFIG). Naming them also makes the recorder start a Kafka of its own
# for the scenario: it sets and deletes cluster-wide defaults, and replaces their whole
# set once with the legacy AlterConfigs.
ALL_CONFIGS_BROKER_SETTINGS = {
    "process.roles": "broker,controller", "node.id": 1, "controller.listener.names": "CONTROLLER",
    "inter.broker.listener.name": "PLAINTEXT",
    "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
    "offsets.topic.replication.factor": 1, "transaction.state.log.replication.factor": 1,
    "transaction.state.log.min.isr": 1, "share.coordinator.state.topic.replication.factor": 1,
    "share.coordinator.state.topic.min.isr": 1, "min.insync.replicas": 1,
    "group.initial.rebalance.delay.ms": 0}


@scenario("all-configs", broker_settings=ALL_CONFIGS_BROKER_SETTINGS)
def _all_configs(S):
    """Every config name Kafka 4.3.1 knows, from doze_kafka's copy of Kafka's tables.
    Topics: CreateTopics v7 of a topic with every topic config (but the internal
    internal.segment.bytes) set to a valid non-default value (remote.storage.enable=false:
    tiered storage is off), CreateTopics v4 of a second one with the same configs,
    CreateTopics v7 validate_only of a third with other values; DescribeConfigs (all, with
    synonyms) of them; on the second topic IncrementalAlterConfigs SET of every config to
    another value, DELETE of every one, AlterConfigs (legacy) of every one, each followed
    by DescribeConfigs. Broker: IncrementalAlterConfigs SET of every cluster-wide config
    at "" to its default value (null defaults: the value in effect), DescribeConfigs of ""
    and "1" (all, with synonyms), DELETE of them all (min.insync.replicas on its own:
    the cluster is formatted with it, and ELR refuses its removal); the same for the
    per-broker configs at "1" (but the listener and security ones); errors: a read-only
    name, a per-listener name without a listener prefix, a per-broker name at "", a bad
    value, a null value; an unknown name (stored and described); legacy AlterConfigs at ""
    (replaces the whole set: without min.insync.replicas it is refused)."""
    a, b, c = f"{S}-a", f"{S}-b", f"{S}-c"
    set1, set2 = all_topic_configs(1), all_topic_configs(2)
    tnames = sorted(set1)
    poll = {"timeout_ms": 30000, "interval_ms": 100}

    def ct(id, name, configs, v, validate_only=False):
        return step(id, "CreateTopics", v, {"topics": [
            {"name": name, "num_partitions": 1, "replication_factor": 1, "assignments": [],
             "configs": [{"name": k, "value": val} for k, val in configs.items()]}],
            "timeout_ms": 30000, "validate_only": validate_only})

    def iac(id, rname, ops, rtype=4, validate_only=False):
        return step(id, "IncrementalAlterConfigs", 1, {"resources": [
            {"resource_type": rtype, "resource_name": rname,
             "configs": [{"name": k, "config_operation": op, "value": val} for k, op, val in ops]}],
            "validate_only": validate_only})

    def ac(id, rname, configs, rtype=4):
        return step(id, "AlterConfigs", 2, {"resources": [
            {"resource_type": rtype, "resource_name": rname,
             "configs": [{"name": k, "value": val} for k, val in configs.items()]}],
            "validate_only": False})

    def seen(id, rtype, rname, key, **cond):
        """DescribeConfigs of one key, polled until the broker's metadata image shows
        the change (the alter APIs answer once the controller has committed it)."""
        path = "results.0.configs.0." + ("value" if "value" in cond else "config_source")
        want = cond.get("value", cond.get("source"))
        c = {"path": path, **poll}
        if isinstance(want, list):
            c["in"] = want
        else:
            c["equals"] = want
        return describe_configs(id, [(rtype, rname, [key])], until=c)

    steps = [
        # --- topics
        *create_topics("create-a", [(a, 1, set1)], v=7),
        *create_topics("create-b-v4", [(b, 1, set1)], v=4),
        ct("create-c-validate-only", c, set2, 7, validate_only=True),
        metadata("c-not-created", [c]),
        describe_configs("describe-a", [(2, a, None)], synonyms=True),
        describe_configs("describe-b", [(2, b, None)], synonyms=True),
        describe_configs("describe-a-v1", [(2, a, None)], v=1, synonyms=True),
        iac("b-set-all", b, [(n, OP_SET, set2[n]) for n in tnames], rtype=2),
        seen("b-set-seen", 2, b, "retention.ms", value=set2["retention.ms"]),
        describe_configs("b-after-set", [(2, b, None)], synonyms=True),
        iac("b-delete-all", b, [(n, OP_DELETE, None) for n in tnames], rtype=2),
        seen("b-delete-seen", 2, b, "retention.ms", source=SRC_DEFAULT),
        describe_configs("b-after-delete", [(2, b, None)], synonyms=True),
        ac("b-alter-all", b, set1, rtype=2),
        seen("b-alter-seen", 2, b, "retention.ms", value=set1["retention.ms"]),
        describe_configs("b-after-alter", [(2, b, None)], synonyms=True),
    ]

    # --- broker: cluster-wide configs at "" (the cluster default), at their defaults
    cw = broker_configs_of_mode("cluster-wide")
    cw_chunks = _chunks(cw, 25)
    for i, chunk in enumerate(cw_chunks):
        steps.append(iac(f"cw-set-{i}", "", [(n, OP_SET, broker_default_value(n)) for n in chunk]))
    steps += [
        seen("cw-set-seen", 4, "1", cw[-1], source=SRC_DYNAMIC_DEFAULT),
        describe_configs("cw-default-after-set", [(4, "", None)], synonyms=True),
        describe_configs("cw-broker-after-set", [(4, "1", None)], synonyms=True),
    ]
    cw_del = [n for n in cw if n != "min.insync.replicas"]
    for i, chunk in enumerate(_chunks(cw_del, 25)):
        steps.append(iac(f"cw-delete-{i}", "", [(n, OP_DELETE, None) for n in chunk]))
    steps += [
        iac("cw-delete-min-insync", "", [("min.insync.replicas", OP_DELETE, None)]),
        seen("cw-delete-seen", 4, "1", cw_del[-1], source=[SRC_STATIC, SRC_DEFAULT]),
        describe_configs("cw-default-after-delete", [(4, "", None)], synonyms=True),
        describe_configs("cw-broker-after-delete", [(4, "1", cw)], synonyms=True),
    ]

    # --- broker: per-broker configs at "1", at their defaults
    pb = broker_configs_of_mode("per-broker")
    steps += [
        iac("pb-set", "1", [(n, OP_SET, broker_default_value(n)) for n in pb]),
        seen("pb-set-seen", 4, "1", pb[-1], source=SRC_DYNAMIC_BROKER),
        describe_configs("pb-broker-after-set", [(4, "1", None)], synonyms=True),
        describe_configs("pb-default-after-set", [(4, "", None)], synonyms=True),
        iac("pb-delete", "1", [(n, OP_DELETE, None) for n in pb]),
        seen("pb-delete-seen", 4, "1", pb[-1], source=[SRC_STATIC, SRC_DEFAULT]),
        describe_configs("pb-broker-after-delete", [(4, "1", pb)], synonyms=True),
    ]

    # --- broker: Kafka's errors, one a step
    steps += [
        iac("read-only", "1", [("node.id", OP_SET, "1")]),
        iac("read-only-default", "", [("node.id", OP_SET, "1")]),
        iac("per-listener-unprefixed", "1", [("ssl.keystore.type", OP_SET, "JKS")]),
        iac("per-broker-at-default", "", [("principal.builder.class", OP_SET,
                                           broker_default_value("principal.builder.class"))]),
        iac("bad-value-range", "", [("log.cleaner.threads", OP_SET, "-1")]),
        iac("bad-value-type", "", [("num.io.threads", OP_SET, "abc")]),
        iac("null-value", "", [("log.retention.ms", OP_SET, None)]),
        iac("validate-only-bad", "1", [("log.cleaner.threads", OP_SET, "-1")], validate_only=True),
        iac("unknown-name", "1", [("doze.test.unknown", OP_SET, "1")]),
        seen("unknown-name-seen", 4, "1", "doze.test.unknown", source=SRC_DYNAMIC_BROKER),
        describe_configs("unknown-name-described", [(4, "1", ["doze.test.unknown"])], synonyms=True),
        iac("unknown-name-default", "", [("doze.test.unknown", OP_SET, "1")]),
        seen("unknown-name-default-seen", 4, "", "doze.test.unknown", source=SRC_DYNAMIC_DEFAULT),
        describe_configs("unknown-name-default-described", [(4, "", None)], synonyms=True),
        iac("unknown-name-delete", "1", [("doze.test.unknown", OP_DELETE, None)]),
        iac("unknown-name-default-delete", "", [("doze.test.unknown", OP_DELETE, None)]),
        describe_configs("unknown-name-deleted-seen", [(4, "", ["doze.test.unknown"])], until={
            "path": "results.0.configs", "equals": [], **poll}),
        describe_configs("unknown-name-deleted", [(4, "", None)], synonyms=True),
    ]

    # --- legacy AlterConfigs at "": it replaces the cluster default's whole set. The
    # cluster is formatted with min.insync.replicas there, and (ELR on) refuses to lose it;
    # on this broker of its own the set is known, so each answer is too.
    steps += [
        ac("legacy-default-without-min-insync", "", {"log.cleaner.threads": "1"}),
        ac("legacy-default-whole-set", "", {"min.insync.replicas": "1", "log.cleaner.threads": "1"}),
        seen("legacy-default-seen", 4, "", "log.cleaner.threads", value="1"),
        describe_configs("legacy-default-after", [(4, "", None)], synonyms=True),
        ac("legacy-default-restore", "", {"min.insync.replicas": "1"}),
        seen("legacy-restore-seen", 4, "1", "log.cleaner.threads", source=[SRC_STATIC, SRC_DEFAULT]),
        describe_configs("legacy-default-restored", [(4, "", None)], synonyms=True),
    ]
    return steps


@scenario("describe-topic-partitions", broker_settings={"offsets.topic.num.partitions": 3})
def _describe_topic_partitions(S):
    """DescribeTopicPartitions (KIP-966), what kafka-topics --describe asks first (own
    broker, so "every topic" is known): every topic, named topics sorted with the unknown
    and the badly named among them, pages cut by response_partition_limit with the
    next_cursor Kafka computes (inside a topic, and at a topic's start when a page ends
    exactly at the end of one), a cursor past a topic's last partition, a limit of 0
    (taken as 1), and the cursors Kafka refuses (a topic not named, a negative partition):
    INVALID_REQUEST for every named topic. __consumer_offsets is internal."""
    a, b, c = f"{S}-a", f"{S}-b", f"{S}-c"

    def dtp(id, topics, limit=2000, cursor=None):
        return step(id, "DescribeTopicPartitions", 0, {
            "topics": [{"name": t} for t in topics], "response_partition_limit": limit,
            "cursor": None if cursor is None else {"topic_name": cursor[0], "partition_index": cursor[1]}})
    return [
        *create_topics("create", [(a, 5), (b, 3), (c, 1)]),
        find_coordinator("find-group", f"{S}-g", 0),
        dtp("all", []),
        dtp("named", [b, a, f"{S}-unknown", "bad/name", b]),
        dtp("page-1", [a, b, c], limit=4),
        dtp("page-2", [a, b, c], limit=4, cursor=(a, 4)),
        dtp("page-3", [a, b, c], limit=4, cursor=(c, 0)),
        dtp("all-from-b", [], limit=2, cursor=(b, 1)),
        dtp("cursor-past-the-end", [a, b], limit=3, cursor=(a, 10)),
        dtp("limit-0", [a], limit=0),
        dtp("cursor-not-named", [a, b], cursor=(c, 0)),
        dtp("cursor-negative", [a], cursor=(a, -1)),
        dtp("internal", ["__consumer_offsets"]),
    ]


@scenario("describe-client-quotas")
def _describe_client_quotas(S):
    """DescribeClientQuotas on a broker with no quotas (what kafka-configs --describe
    --entity-type users sends beside DescribeUserScramCredentials): filters that match
    nothing, and the ones Kafka's ClientQuotasImage refuses, with its messages."""
    def dcq(id, components, strict=False, v=1):
        return step(id, "DescribeClientQuotas", v, {"components": [
            {"entity_type": t, "match_type": m, "match": x} for t, m, x in components], "strict": strict})
    return [
        dcq("users", [("user", 2, None)]),
        dcq("user-exact", [("user", 0, f"{S}-alice")], strict=True),
        dcq("user-default", [("user", 1, None), ("client-id", 2, None)]),
        dcq("none", []),
        dcq("v0", [("client-id", 2, None)], v=0),
        dcq("empty-type", [("", 2, None)]),
        dcq("twice", [("user", 2, None), ("user", 1, None)]),
        dcq("unknown-type", [("group", 2, None)]),
        dcq("bad-match-type", [("user", 7, None)]),
        dcq("exact-null", [("user", 0, None)]),
        dcq("default-with-name", [("user", 1, "x")]),
        dcq("specified-with-name", [("user", 2, "x")]),
        dcq("ip-with-user", [("ip", 2, None), ("user", 2, None)]),
    ]


@scenario("config-append-subtract", broker_settings={"num.partitions": 1})
def _config_append_subtract(S):
    """IncrementalAlterConfigs APPEND and SUBTRACT where nothing is set yet (own broker):
    Kafka starts from the config's ConfigDef default (ConfigurationControlManager.getParts),
    for the broker's id, for the cluster default and for a topic, also when the cluster
    default differs from that (librdkafka's 0081 does APPEND then SUBTRACT of compact on
    log.cleanup.policy, then creates topics and deletes their records)."""
    t, t2 = f"{S}-t", f"{S}-t2"
    poll = {"timeout_ms": 30000, "interval_ms": 100}

    def iac(id, rtype, rname, ops):
        return step(id, "IncrementalAlterConfigs", 1, {"resources": [
            {"resource_type": rtype, "resource_name": rname,
             "configs": [{"name": k, "config_operation": op, "value": val} for k, op, val in ops]}],
            "validate_only": False})

    def seen(id, rtype, rname, key, value):
        return describe_configs(id, [(rtype, rname, [key])], until={
            "path": "results.0.configs.0.value", "equals": value, **poll})
    return [
        *create_topics("create", [t]),
        iac("broker-append", 4, "1", [("log.cleanup.policy", 2, "compact")]),
        seen("broker-appended", 4, "1", "log.cleanup.policy", "delete,compact"),
        iac("broker-subtract", 4, "1", [("log.cleanup.policy", 3, "compact")]),
        seen("broker-subtracted", 4, "1", "log.cleanup.policy", "delete"),
        iac("cluster-set-compact", 4, "", [("log.cleanup.policy", 0, "compact")]),
        seen("cluster-compact", 4, "", "log.cleanup.policy", "compact"),
        iac("topic-append", 2, t, [("cleanup.policy", 2, "delete")]),
        describe_configs("topic-appended", [(2, t, ["cleanup.policy"])], synonyms=True),
        *create_topics("create-2", [t2]),
        describe_configs("topic-2", [(2, t2, ["cleanup.policy"])], synonyms=True),
        iac("topic-2-subtract", 2, t2, [("cleanup.policy", 3, "delete")]),
        describe_configs("topic-2-subtracted", [(2, t2, ["cleanup.policy"])], synonyms=True),
        iac("cluster-unset", 4, "", [("log.cleanup.policy", 1, None)]),
        iac("broker-unset", 4, "1", [("log.cleanup.policy", 1, None)]),
        iac("retention-append", 4, "1", [("log.retention.ms", 2, "5")]),
    ]


@scenario("acls-without-authorizer")
def _acls_without_authorizer(S):
    """The ACL APIs on a broker with no authorizer (authorizer.class.name unset, as by
    default): SECURITY_DISABLED, with Kafka's messages, at every version served."""
    t = f"{S}-t"

    def creation(op=2, perm=3, pattern=3):
        return {"resource_type": 2, "resource_name": t, "resource_pattern_type": pattern,
                "principal": "User:alice", "host": "*", "operation": op, "permission_type": perm}

    def acl_filter():
        return {"resource_type_filter": 1, "resource_name_filter": None, "pattern_type_filter": 1,
                "principal_filter": None, "host_filter": None, "operation": 1, "permission_type": 1}
    steps = []
    for v in (1, 2, 3):
        steps += [
            step(f"describe-v{v}", "DescribeAcls", v, acl_filter()),
            step(f"create-v{v}", "CreateAcls", v, {"creations": [creation(), creation(op=4, perm=2, pattern=4)]}),
            step(f"delete-v{v}", "DeleteAcls", v, {"filters": [acl_filter(), acl_filter()]}),
        ]
    steps += [step("create-none", "CreateAcls", 3, {"creations": []}),
              step("delete-none", "DeleteAcls", 3, {"filters": []})]
    return steps


@scenario("group-configs", broker_settings={"group.consumer.heartbeat.interval.ms": 6000,
                                            "group.share.max.session.timeout.ms": 70000})
def _group_configs(S):
    """Config resources of type GROUP (32, KIP-848's group configs): DescribeConfigs of a
    group with no configs (it need not exist), of "" and after each change, with and
    without synonyms (a setting from server.properties, the broker's default, a config with
    no broker synonym); IncrementalAlterConfigs SET within and outside the broker's
    group.*.min/max bounds, unknown names, bad types, null values, DELETE, APPEND, two
    configs at once, validate_only, and the group ""; the older AlterConfigs on a group
    (librdkafka's 0081 sets consumer.session.timeout.ms=50000 on a group, then describes
    a group that does not exist)."""
    g, g2 = f"{S}-g", f"{S}-g2"
    poll = {"timeout_ms": 30000, "interval_ms": 100}

    def iac(id, name, ops, validate_only=False, **kw):
        return step(id, "IncrementalAlterConfigs", 1, {"resources": [
            {"resource_type": 32, "resource_name": name,
             "configs": [{"name": k, "config_operation": op, "value": val} for k, op, val in ops]}],
            "validate_only": validate_only}, **kw)

    def seen(id, name, key, value):
        return describe_configs(id, [(32, name, [key])], synonyms=True, until={
            "path": "results.0.configs.0.value", "equals": value, **poll})
    return [
        describe_configs("describe-all", [(32, g, None)], synonyms=True),
        describe_configs("describe-all-v1", [(32, g, None)], v=1),
        describe_configs("describe-keys", [(32, g, ["consumer.session.timeout.ms", "no.such.config",
                                                    "share.isolation.level"]), (32, "", None)]),
        iac("set-session", g, [("consumer.session.timeout.ms", 0, "50000")]),
        seen("session-set", g, "consumer.session.timeout.ms", "50000"),
        describe_configs("describe-all-set", [(32, g, None)], synonyms=True),
        iac("set-below-min", g, [("consumer.session.timeout.ms", 0, "10000")]),
        iac("set-above-max", g, [("consumer.session.timeout.ms", 0, "70000")]),
        iac("set-heartbeat-above-max", g, [("consumer.heartbeat.interval.ms", 0, "20000")]),
        iac("set-heartbeat-ok", g, [("consumer.heartbeat.interval.ms", 0, "15000")]),
        iac("set-two", g, [("share.isolation.level", 0, "read_committed"),
                           ("streams.num.standby.replicas", 0, "1")]),
        seen("two-set", g, "share.isolation.level", "read_committed"),
        iac("set-standby-above-max", g, [("streams.num.standby.replicas", 0, "3")]),
        iac("set-share-session", g, [("share.session.timeout.ms", 0, "65000")]),
        iac("set-share-session-low", g, [("share.session.timeout.ms", 0, "1000")]),
        iac("set-share-session-not-above-heartbeat", g2, [("share.session.timeout.ms", 0, "45000"),
                                                          ("share.heartbeat.interval.ms", 0, "15000")]),
        iac("set-assignment-interval", g2, [("consumer.assignment.interval.ms", 0, "0")]),
        iac("set-unknown", g, [("no.such.config", 0, "1")]),
        iac("set-not-int", g, [("consumer.session.timeout.ms", 0, "fifty")]),
        iac("set-bad-isolation", g, [("share.isolation.level", 0, "none")]),
        iac("set-bad-reset", g, [("share.auto.offset.reset", 0, "nowhere")]),
        iac("set-reset-by-duration", g, [("share.auto.offset.reset", 0, "by_duration:PT1H")]),
        iac("set-bool", g, [("share.renew.acknowledge.enable", 0, "FALSE")]),
        iac("set-null", g, [("consumer.session.timeout.ms", 0, None)]),
        iac("append", g, [("share.isolation.level", 2, "read_committed")]),
        iac("delete-unknown", g, [("no.such.config", 1, None)]),
        iac("validate-only", g, [("consumer.session.timeout.ms", 0, "55000")], validate_only=True),
        iac("validate-only-bad", g, [("consumer.session.timeout.ms", 0, "5")], validate_only=True),
        iac("empty-name", "", [("consumer.session.timeout.ms", 0, "50000")]),
        iac("duplicate-keys", g, [("consumer.session.timeout.ms", 0, "50000"),
                                  ("consumer.session.timeout.ms", 0, "51000")]),
        describe_configs("describe-all-after", [(32, g, None)], synonyms=True),
        iac("delete-session", g, [("consumer.session.timeout.ms", 1, None)]),
        seen("session-deleted", g, "consumer.session.timeout.ms", "45000"),
        step("alter-configs", "AlterConfigs", 2, {"resources": [
            {"resource_type": 32, "resource_name": g, "configs": [
                {"name": "consumer.session.timeout.ms", "value": "52000"}]}], "validate_only": False}),
        seen("after-alter", g, "consumer.session.timeout.ms", "52000"),
        describe_configs("describe-after-alter", [(32, g, None)], synonyms=True),
    ]


ACL_AUTHORIZER_SETTINGS = {"authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                           "super.users": "User:ANONYMOUS"}


@scenario("acls-crud", broker_settings=ACL_AUTHORIZER_SETTINGS)
def _acls_crud(S):
    """The ACL APIs with Kafka's StandardAuthorizer, called by a super user (the
    recorder's connections are User:ANONYMOUS on PLAINTEXT; so is the controller's
    link, which is why no ACL here denies it anything). CreateAcls of every resource
    type and pattern, ALLOW and DENY, hosts, User:*, an ACL created twice, and each
    refusal (CLUSTER not named kafka-cluster, an empty name, ANY/MATCH/UNKNOWN and
    out-of-range codes); DescribeAcls with every kind of filter (ANY, LITERAL, PREFIXED,
    MATCH, by principal, host, operation, permission), one resource per answer so
    that Kafka's HashMap order does not show; DeleteAcls with several filters at once
    (an ACL matched twice), a filter matching nothing, bad filters; the state after."""
    t, g, x = f"{S}-t", f"{S}-g", f"{S}-tx"

    def acl(rtype, name, op, perm=3, pattern=3, principal="User:alice", host="*"):
        return {"resource_type": rtype, "resource_name": name, "resource_pattern_type": pattern,
                "principal": principal, "host": host, "operation": op, "permission_type": perm}

    def filt(rtype=1, name=None, pattern=1, principal=None, host=None, op=1, perm=1):
        return {"resource_type_filter": rtype, "resource_name_filter": name, "pattern_type_filter": pattern,
                "principal_filter": principal, "host_filter": host, "operation": op, "permission_type": perm}

    def create(id, *acls, v=3, conn=1):
        return step(id, "CreateAcls", v, {"creations": list(acls)}, conn=conn)

    def describe(id, v=3, conn=1, **kw):
        return step(id, "DescribeAcls", v, filt(**kw), conn=conn)

    def delete(id, *filters, v=3, conn=1):
        return step(id, "DeleteAcls", v, {"filters": list(filters)}, conn=conn)
    return [
        describe("describe-empty"),
        create("create-topic-read", acl(2, t, 3)),
        describe("describe-topic", rtype=2, name=t, pattern=3),
        create("create-again", acl(2, t, 3)),
        describe("describe-topic-again", rtype=2, name=t, pattern=3),
        create("create-prefixed-deny", acl(2, f"{S}-", 4, perm=2, pattern=4, principal="User:bob", host="10.0.0.1")),
        describe("describe-prefixed", rtype=2, name=f"{S}-", pattern=4),
        describe("describe-prefixed-as-literal", rtype=2, name=f"{S}-", pattern=3),
        describe("describe-by-host", host="10.0.0.1"),
        describe("describe-by-principal-bob", principal="User:bob"),
        create("create-group-wildcard", acl(3, "*", 2, principal="User:*")),
        describe("describe-group-star", rtype=3, name="*", pattern=3),
        describe("describe-group-star-any-pattern", rtype=3, name="*"),
        describe("describe-group-by-name-literal", rtype=3, name=g, pattern=3),
        create("create-cluster", acl(4, "kafka-cluster", 12)),
        describe("describe-cluster", rtype=4),
        create("create-txn", acl(5, x, 4)),
        describe("describe-txn-write", rtype=5, op=4),
        describe("describe-txn-read", rtype=5, op=3),
        describe("describe-allow-txn", rtype=5, perm=3),
        describe("describe-deny-txn", rtype=5, perm=2),
        create("create-bad-cluster-name", acl(4, "my-cluster", 7)),
        create("create-empty-name", acl(2, "", 3)),
        create("create-type-any", acl(1, t, 3)),
        create("create-pattern-match", acl(2, t, 3, pattern=2)),
        create("create-pattern-any", acl(2, t, 3, pattern=1)),
        create("create-op-any", acl(2, t, 1)),
        create("create-perm-any", acl(2, t, 3, perm=1)),
        create("create-mixed", acl(2, f"{t}2", 8), acl(4, "x", 7), acl(2, f"{t}3", 6, principal="User:carol")),
        describe("describe-mixed-ok", rtype=2, name=f"{t}2", pattern=3),
        create("create-type-unknown", acl(0, t, 3), conn=2),
        create("create-op-unknown", acl(2, t, 0), conn=3),
        create("create-op-out-of-range", acl(2, t, 99), conn=4),
        create("create-perm-unknown", acl(2, t, 3, perm=0), conn=5),
        create("create-pattern-unknown", acl(2, t, 3, pattern=0), conn=6),
        create("create-v1", acl(2, f"{t}4", 3), v=1),
        describe("describe-match", rtype=2, name=f"{S}-t", pattern=2, principal="User:bob"),
        describe("describe-match-alice", rtype=2, name=f"{S}-t", pattern=2, principal="User:alice", op=3),
        describe("describe-v1", v=1, rtype=2, name=f"{t}4", pattern=3),
        describe("describe-unknown-pattern", rtype=2, pattern=0, conn=7),
        describe("describe-unknown-op", rtype=2, op=0, conn=8),
        delete("delete-two-filters", filt(rtype=2, name=t, pattern=3), filt(rtype=2, principal="User:alice", op=3)),
        delete("delete-nothing", filt(rtype=5, name="no-such-id", pattern=3)),
        delete("delete-bad-filter", filt(rtype=2, pattern=0), filt(rtype=5, op=4), conn=9),
        describe("describe-after-txn", rtype=5),
        delete("delete-match", filt(rtype=2, name=f"{S}-tx", pattern=2, principal="User:bob")),
        describe("describe-after-match", rtype=2, name=f"{S}-", pattern=4),
        delete("delete-rest", filt(rtype=3), filt(rtype=4), filt(rtype=2), filt(rtype=5)),
        describe("describe-end"),
    ]


SASL_USERS_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
                   'password="admin-secret" user_admin="admin-secret" user_alice="alice-secret";')
ACL_MATRIX_SETTINGS = {
    "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "super.users": "User:admin;User:ANONYMOUS",          # ANONYMOUS: the controller's link, conn 1
    "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT",
    "sasl.enabled.mechanisms": "PLAIN",
    "listener.name.sasl_plaintext.plain.sasl.jaas.config": SASL_USERS_JAAS,
}


def sasl_login(prefix, user, conn):
    """SaslHandshake and one PLAIN SaslAuthenticate on the SASL_PLAINTEXT listener."""
    token = f"\0{user}\0{user}-secret".encode().hex()
    return [step(f"{prefix}-handshake", "SaslHandshake", 1, {"mechanism": "PLAIN"}, conn=conn,
                 listener="SASL_PLAINTEXT"),
            step(f"{prefix}-authenticate", "SaslAuthenticate", 2, {"auth_bytes": {"$hex": token}}, conn=conn,
                 listener="SASL_PLAINTEXT")]


@scenario("acls-matrix", broker_settings=ACL_MATRIX_SETTINGS)
def _acls_matrix(S):
    """Every served API called by a principal without the ACL it needs, then with it
    (AUTH.md's table, Kafka 4.3.1 StandardAuthorizer): User:alice over SASL_PLAINTEXT
    (PLAIN), conn 2; the setup and the grants by a super user (conn 1, PLAINTEXT, whose
    User:ANONYMOUS is a super user so that the controller's link keeps working). Where a
    grant takes effect a moment later on Kafka (ACLs reach the broker as metadata), the
    first call after it is polled until it passes."""
    t, t2, g, x = f"{S}-t", f"{S}-t2", f"{S}-g", f"{S}-tx"
    a = 2                                            # alice's connection
    poll = {"timeout_ms": 30000, "interval_ms": 100}

    def alice(id, api, v, req, **kw):
        return step(id, api, v, req, conn=a, listener="SASL_PLAINTEXT", **kw)

    def grant(id, *acls):
        return step(id, "CreateAcls", 3, {"creations": [
            {"resource_type": rt, "resource_name": n, "resource_pattern_type": pt, "principal": "User:alice",
             "host": "*", "operation": op, "permission_type": perm} for rt, n, op, perm, pt in acls]})

    def md(id, names, v=12, **kw):
        return alice(id, "Metadata", v, {"topics": None if names is None else [
            {"name": n, "topic_id": {"$uuid": "0" * 32}} for n in names], "allow_auto_topic_creation": True,
            "include_topic_authorized_operations": True}, **kw)

    produce_req = {"transactional_id": None, "acks": -1, "timeout_ms": 30000, "topic_data": [
        {"name": t, "partition_data": [{"index": 0, "records": batch(["a"])}]}]}
    fetch_req = {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1048576, "isolation_level": 0,
                 "session_id": 0, "session_epoch": -1, "topics": [{"topic": t, "partitions": [
                     {"partition": 0, "current_leader_epoch": -1, "fetch_offset": 0, "last_fetched_epoch": -1,
                      "log_start_offset": -1, "partition_max_bytes": 1048576}]}], "forgotten_topics_data": [],
                 "rack_id": ""}
    list_offsets_req = {"replica_id": -1, "isolation_level": 0, "topics": [
        {"name": t, "partitions": [{"partition_index": 0, "current_leader_epoch": -1, "timestamp": -1}]}]}
    commit_req = {"group_id": g, "generation_id_or_member_epoch": -1, "member_id": "", "group_instance_id": None,
                  "topics": [{"name": t, "partitions": [{"partition_index": 0, "committed_offset": 1,
                                                         "committed_leader_epoch": -1, "committed_metadata": ""}]}]}
    fetch_offsets_req = {"groups": [{"group_id": g, "member_id": None, "member_epoch": -1, "topics": None}],
                         "require_stable": False}
    join_req = {"group_id": g, "session_timeout_ms": 30000, "rebalance_timeout_ms": 30000, "member_id": "",
                "group_instance_id": None, "protocol_type": "consumer",
                "protocols": [{"name": "range", "metadata": {"$subscription": [t]}}], "reason": None}
    txn_ids = {"transactional_id": x, "producer_id": 5000, "producer_epoch": 0}
    denied = [
        md("md-named", [t, f"{S}-nowhere"]),
        md("md-all", None, keep={"path": "topics", "field": "name", "prefix": S}),
        md("md-v4", [t], v=4),
        alice("produce", "Produce", 9, produce_req),
        alice("fetch", "Fetch", 12, fetch_req),
        alice("list-offsets", "ListOffsets", 7, list_offsets_req),
        alice("offset-commit", "OffsetCommit", 8, commit_req),
        alice("offset-fetch", "OffsetFetch", 8, fetch_offsets_req),
        alice("offset-fetch-v7", "OffsetFetch", 7, {"group_id": g, "topics": None, "require_stable": False}),
        alice("offset-fetch-v1", "OffsetFetch", 1, {"group_id": g, "topics": [{"name": t, "partition_indexes": [0]}]}),
        alice("find-group", "FindCoordinator", 4, {"key_type": 0, "coordinator_keys": [g]}),
        alice("find-txn", "FindCoordinator", 4, {"key_type": 1, "coordinator_keys": [x]}),
        alice("find-group-v3", "FindCoordinator", 3, {"key": g, "key_type": 0}),
        alice("join", "JoinGroup", 9, join_req),
        alice("heartbeat", "Heartbeat", 4, {"group_id": g, "generation_id": 1, "member_id": "m",
                                            "group_instance_id": None}),
        alice("leave", "LeaveGroup", 5, {"group_id": g, "members": [
            {"member_id": "m", "group_instance_id": None, "reason": None}]}),
        alice("sync", "SyncGroup", 5, {"group_id": g, "generation_id": 1, "member_id": "m",
                                       "group_instance_id": None, "protocol_type": "consumer",
                                       "protocol_name": "range", "assignments": []}),
        alice("describe-groups", "DescribeGroups", 5, {"groups": [g], "include_authorized_operations": True}),
        alice("list-groups", "ListGroups", 4, {"states_filter": []}, keep={"path": "groups", "field": "group_id",
                                                                        "prefix": S}),
        alice("create-topics", "CreateTopics", 7, {"topics": [{"name": f"{S}-new", "num_partitions": 1,
                                                               "replication_factor": 1, "assignments": [],
                                                               "configs": []}],
                                                   "timeout_ms": 30000, "validate_only": False}),
        alice("delete-topics", "DeleteTopics", 6, {"topics": [{"name": t, "topic_id": {"$uuid": "0" * 32}}],
                                                   "timeout_ms": 30000}),
        alice("delete-records", "DeleteRecords", 2, {"topics": [{"name": t, "partitions": [
            {"partition_index": 0, "offset": 0}]}], "timeout_ms": 30000}),
        alice("init-txn", "InitProducerId", 5, {"transactional_id": x, "transaction_timeout_ms": 60000,
                                                "producer_id": -1, "producer_epoch": -1}),
        alice("init-idempotent", "InitProducerId", 5, {"transactional_id": None, "transaction_timeout_ms": 60000,
                                                       "producer_id": -1, "producer_epoch": -1}),
        alice("add-partitions", "AddPartitionsToTxn", 3, dict(txn_ids, topics=[{"name": t, "partitions": [0]}])),
        alice("add-offsets", "AddOffsetsToTxn", 3, dict(txn_ids, group_id=g)),
        alice("end-txn", "EndTxn", 3, dict(txn_ids, committed=True)),
        alice("txn-offset-commit", "TxnOffsetCommit", 3, dict(
            txn_ids, group_id=g, generation_id=-1, member_id="", group_instance_id=None,
            topics=[{"name": t, "partitions": [{"partition_index": 0, "committed_offset": 1,
                                                "committed_leader_epoch": -1, "committed_metadata": ""}]}])),
        alice("write-markers", "WriteTxnMarkers", 1, {"markers": [
            {"producer_id": 5000, "producer_epoch": 0, "transaction_result": False,
             "topics": [{"name": t, "partition_indexes": [0]}], "coordinator_epoch": 0}]}),
        alice("describe-acls", "DescribeAcls", 3, {"resource_type_filter": 1, "resource_name_filter": None,
                                                   "pattern_type_filter": 1, "principal_filter": None,
                                                   "host_filter": None, "operation": 1, "permission_type": 1}),
        alice("create-acls", "CreateAcls", 3, {"creations": [
            {"resource_type": 2, "resource_name": t, "resource_pattern_type": 3, "principal": "User:alice",
             "host": "*", "operation": 2, "permission_type": 3}]}),
        alice("delete-acls", "DeleteAcls", 3, {"filters": [
            {"resource_type_filter": 2, "resource_name_filter": t, "pattern_type_filter": 3,
             "principal_filter": None, "host_filter": None, "operation": 1, "permission_type": 1}]}),
        alice("describe-configs", "DescribeConfigs", 4, {"resources": [
            {"resource_type": 2, "resource_name": t, "configuration_keys": ["retention.ms"]},
            {"resource_type": 4, "resource_name": "1", "configuration_keys": ["num.partitions"]},
            {"resource_type": 32, "resource_name": g, "configuration_keys": None}],
            "include_synonyms": False, "include_documentation": False}),
        alice("alter-configs", "AlterConfigs", 2, {"resources": [
            {"resource_type": 2, "resource_name": t, "configs": [{"name": "retention.ms", "value": "100000"}]}],
            "validate_only": True}),
        alice("incremental-alter-configs", "IncrementalAlterConfigs", 1, {"resources": [
            {"resource_type": 4, "resource_name": "1", "configs": [
                {"name": "log.cleaner.threads", "config_operation": 0, "value": "2"}]},
            {"resource_type": 32, "resource_name": g, "configs": [
                {"name": "consumer.session.timeout.ms", "config_operation": 0, "value": "50000"}]}],
            "validate_only": True}),
        alice("create-partitions", "CreatePartitions", 3, {"topics": [{"name": t, "count": 3, "assignments": None}],
                                                           "timeout_ms": 30000, "validate_only": True}),
        alice("delete-groups", "DeleteGroups", 2, {"groups_names": [g]}),
        alice("offset-delete", "OffsetDelete", 0, {"group_id": g, "topics": [{"name": t, "partitions": [
            {"partition_index": 0}]}]}),
        alice("describe-quotas", "DescribeClientQuotas", 1, {"components": [], "strict": False}),
        # users null: Kafka 4.3.1 never answers an unauthorized one (a NullPointerException in
        # DescribeUserScramCredentialsRequest.getErrorResponse, in its log), so the users are named
        alice("describe-scram", "DescribeUserScramCredentials", 0, {"users": [{"name": "bob"}]}),
        alice("alter-scram", "AlterUserScramCredentials", 0, {"deletions": [{"name": "bob", "mechanism": 1}],
                                                              "upsertions": []}),
        alice("describe-cluster", "DescribeCluster", 1, {"include_cluster_authorized_operations": True,
                                                         "endpoint_type": 1}),
        alice("describe-producers", "DescribeProducers", 0, {"topics": [{"name": t, "partition_indexes": [0]}]}),
        alice("describe-txns", "DescribeTransactions", 0, {"transactional_ids": [x]}),
        alice("list-txns", "ListTransactions", 1, {"state_filters": [], "producer_id_filters": [],
                                                    "duration_filter": -1},
              keep={"path": "transaction_states", "field": "transactional_id", "prefix": S}),
        alice("describe-topic-partitions", "DescribeTopicPartitions", 0, {
            "topics": [{"name": t}], "response_partition_limit": 2000, "cursor": None}),
        alice("describe-topic-partitions-all", "DescribeTopicPartitions", 0, {
            "topics": [], "response_partition_limit": 2000, "cursor": None},
            keep={"path": "topics", "field": "name", "prefix": S}),
    ]
    granted = [
        grant("grant-describe", (2, t, 8, 3, 3), (3, g, 8, 3, 3), (5, x, 8, 3, 3)),
        md("md-described", [t, f"{S}-nowhere"], until={"path": "topics.0.error_code", "equals": 0, **poll}),
        md("md-all-described", None, keep={"path": "topics", "field": "name", "prefix": S}),
        alice("produce-described", "Produce", 9, produce_req),
        alice("list-offsets-described", "ListOffsets", 7, list_offsets_req),
        alice("find-group-described", "FindCoordinator", 4, {"key_type": 0, "coordinator_keys": [g]},
              until={"path": "coordinators.0.error_code", "equals": 0, **poll}),
        alice("find-txn-described", "FindCoordinator", 4, {"key_type": 1, "coordinator_keys": [x]},
              until={"path": "coordinators.0.error_code", "equals": 0, **poll}),
        alice("offset-fetch-described", "OffsetFetch", 8, fetch_offsets_req,      # Kafka: loading the
              until={"path": "groups.0.error_code", "not_in": [14], **poll}),  # offsets partition at first
        alice("describe-groups-described", "DescribeGroups", 5, {"groups": [g], "include_authorized_operations": True}),
        alice("join-described", "JoinGroup", 9, join_req),
        alice("describe-txns-described", "DescribeTransactions", 0, {"transactional_ids": [x]},
              until={"path": "transaction_states.0.error_code", "not_in": [14, 16], **poll}),
        alice("init-txn-described", "InitProducerId", 5, {"transactional_id": x, "transaction_timeout_ms": 60000,
                                                          "producer_id": -1, "producer_epoch": -1}),
        alice("delete-topics-described", "DeleteTopics", 6, {"topics": [{"name": t, "topic_id": {"$uuid": "0" * 32}}],
                                                             "timeout_ms": 30000}),
        alice("delete-missing-described", "DeleteTopics", 6, {"topics": [
            {"name": f"{S}-nowhere", "topic_id": {"$uuid": "0" * 32}}], "timeout_ms": 30000}),
        alice("describe-topic-partitions-described", "DescribeTopicPartitions", 0, {
            "topics": [{"name": t}], "response_partition_limit": 2000, "cursor": None}),
        grant("grant-use", (2, t, 4, 3, 3), (2, t, 3, 3, 3), (3, g, 3, 3, 3), (5, x, 4, 3, 3),
              (2, f"{S}-n", 5, 3, 4)),
        alice("produce-granted", "Produce", 9, produce_req, until={
            "path": "responses.0.partition_responses.0.error_code", "equals": 0, **poll}),
        alice("fetch-granted", "Fetch", 12, fetch_req),
        alice("offset-commit-granted", "OffsetCommit", 8, commit_req),
        alice("offset-fetch-granted", "OffsetFetch", 8, fetch_offsets_req),
        alice("init-idempotent-granted", "InitProducerId", 5, {"transactional_id": None,
                                                               "transaction_timeout_ms": 60000,
                                                               "producer_id": -1, "producer_epoch": -1},
              until={"path": "error_code", "not_in": [14], **poll}),
        alice("create-prefixed-granted", "CreateTopics", 7, {"topics": [
            {"name": f"{S}-new", "num_partitions": 1, "replication_factor": 1, "assignments": [], "configs": []}],
            "timeout_ms": 30000, "validate_only": True}),
        md("md-auto-create-denied", [f"{S}-auto"]),
        md("md-ops", [t]),
        grant("deny-read", (2, t, 3, 2, 3)),
        alice("fetch-denied-again", "Fetch", 12, fetch_req, until={
            "path": "responses.0.partitions.0.error_code", "equals": 29, **poll}),
        md("md-after-deny", [t]),
        alice("describe-producers-after-deny", "DescribeProducers", 0, {"topics": [{"name": t, "partition_indexes": [0]}]}),
    ]
    return [
        *create_topics("create", [(t, 1), (t2, 1)]),
        *sasl_login("alice", "alice", a),
        *denied,
        *granted,
    ]


# --- SASL: SCRAM users, logins over SASL_PLAINTEXT and SASL_SSL, and failures ----------

import hashlib as _hashlib  # noqa: E402

from certs import RECORDING_TLS_SETTINGS  # noqa: E402

SCRAM_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule required;"
SASL_SETTINGS = {
    "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "super.users": "User:admin;User:ANONYMOUS",          # ANONYMOUS: conn 1 and the controller's link
    "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,"
                                      "SASL_SSL:SASL_SSL",
    "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
    **{f"listener.name.{listener}.{mechanism}.sasl.jaas.config": SASL_USERS_JAAS if mechanism == "plain"
       else SCRAM_MODULE
       for listener in ("sasl_plaintext", "sasl_ssl") for mechanism in ("plain", "scram-sha-256", "scram-sha-512")},
    **RECORDING_TLS_SETTINGS,
}
CLIENT_NONCE = "fyko+d2lbbFgONRv9qkxdawL"           # RFC 5802's example: the client picks it
SCRAM_SALT = b"doze-conformance-salt"


def salted_password(password, mechanism, iterations):
    return _hashlib.pbkdf2_hmac({1: "sha256", 2: "sha512"}[mechanism], password.encode(), SCRAM_SALT, iterations)


def scram_upsertion(name, mechanism, password, iterations=4096):
    return {"name": name, "mechanism": mechanism, "iterations": iterations, "salt": {"$hex": SCRAM_SALT.hex()},
            "salted_password": {"$hex": salted_password(password, mechanism, iterations).hex()}}


def scram_login(prefix, conn, listener, user, password, mechanism="SCRAM-SHA-256", tamper=None):
    """SaslHandshake, client-first, client-final (computed from the broker's server-first)."""
    on = {"conn": conn, "listener": listener}
    final = {"first": f"{prefix}-first", "user": user, "password": password, "mechanism": mechanism,
             "client_nonce": CLIENT_NONCE}
    if tamper:
        final["tamper"] = tamper
    return [step(f"{prefix}-handshake", "SaslHandshake", 1, {"mechanism": mechanism}, **on),
            step(f"{prefix}-first", "SaslAuthenticate", 2, {"auth_bytes": {"$utf8": f"n,,n={user},r={CLIENT_NONCE}"}},
                 scram="server-first", scram_client_nonce=CLIENT_NONCE, **on),
            step(f"{prefix}-final", "SaslAuthenticate", 2, {"auth_bytes": {"$scram_final": final}},
                 scram="server-final", **on)]


def plain_login(prefix, conn, listener, user, password):
    token = f"\0{user}\0{password}".encode().hex()
    on = {"conn": conn, "listener": listener}
    return [step(f"{prefix}-handshake", "SaslHandshake", 1, {"mechanism": "PLAIN"}, **on),
            step(f"{prefix}-authenticate", "SaslAuthenticate", 2, {"auth_bytes": {"$hex": token}}, **on)]


@scenario("sasl-scram", broker_settings=SASL_SETTINGS)
def _sasl_scram(S):
    """SCRAM users made, described and deleted (AlterUserScramCredentials with Kafka's
    errors, DescribeUserScramCredentials) by a super user on conn 1; then logins: SCRAM
    over SASL_PLAINTEXT and over SASL_SSL (TLS with the recordings' certificate), PLAIN
    over SASL_SSL, each followed by a request; a non-super user asking for credentials;
    and failures, each on a connection of its own: a wrong password, a tampered nonce, a
    tampered proof, a deleted user's mechanism, a wrong PLAIN password, an unknown
    mechanism, a request before authentication (on each SASL listener), SaslAuthenticate
    before SaslHandshake. After a failure the next request shows whether the connection
    was closed."""
    bob, carol = f"{S}-bob", f"{S}-carol"
    poll = {"timeout_ms": 30000, "interval_ms": 100}
    md = {"topics": [], "allow_auto_topic_creation": False, "include_topic_authorized_operations": False}

    def after(id, conn, listener):
        return step(id, "Metadata", 12, md, conn=conn, listener=listener)

    return [
        step("describe-before", "DescribeUserScramCredentials", 0, {"users": [{"name": bob}]}),
        step("upsert", "AlterUserScramCredentials", 0, {"deletions": [], "upsertions": [
            scram_upsertion(bob, 1, "bob-secret"), scram_upsertion(carol, 1, "carol-secret")]}),
        step("upsert-512", "AlterUserScramCredentials", 0, {"deletions": [], "upsertions": [
            scram_upsertion(bob, 2, "bob-512", 8192)]}),
        step("upsert-errors", "AlterUserScramCredentials", 0, {"deletions": [{"name": f"{S}-nobody", "mechanism": 1}],
                                                               "upsertions": [
            scram_upsertion(f"{S}-few", 1, "x", iterations=4095), scram_upsertion(f"{S}-many", 2, "x", 16385),
            dict(scram_upsertion(f"{S}-unknown", 1, "x"), mechanism=0), scram_upsertion("", 1, "x"),
            scram_upsertion(f"{S}-twice", 1, "x"), scram_upsertion(f"{S}-twice", 2, "x")]}),
        step("describe", "DescribeUserScramCredentials", 0, {"users": [{"name": bob}, {"name": carol},
                                                                        {"name": f"{S}-nobody"}]},
             until={"path": "results.0.credential_infos.*", "count": 2, **poll}),
        step("describe-twice", "DescribeUserScramCredentials", 0, {"users": [{"name": bob}, {"name": bob}]}),
        step("api-versions", "ApiVersions", 3, {"client_software_name": "doze-conformance",
                                                 "client_software_version": "1"}, conn=2, listener="SASL_PLAINTEXT"),
        *scram_login("bob", 2, "SASL_PLAINTEXT", bob, "bob-secret"),
        after("bob-metadata", 2, "SASL_PLAINTEXT"),
        step("bob-describe", "DescribeUserScramCredentials", 0, {"users": [{"name": bob}]}, conn=2,
             listener="SASL_PLAINTEXT"),
        *scram_login("bob-512-ssl", 3, "SASL_SSL", bob, "bob-512", mechanism="SCRAM-SHA-512"),
        after("bob-512-ssl-metadata", 3, "SASL_SSL"),
        *plain_login("admin-ssl", 4, "SASL_SSL", "admin", "admin-secret"),
        step("admin-ssl-describe", "DescribeUserScramCredentials", 0, {"users": [{"name": carol}]}, conn=4,
             listener="SASL_SSL"),
        *scram_login("wrong-password", 5, "SASL_PLAINTEXT", bob, "not-bobs"),
        after("wrong-password-after", 5, "SASL_PLAINTEXT"),
        *scram_login("wrong-nonce", 6, "SASL_PLAINTEXT", bob, "bob-secret", tamper="nonce"),
        after("wrong-nonce-after", 6, "SASL_PLAINTEXT"),
        *scram_login("wrong-proof", 7, "SASL_SSL", carol, "carol-secret", tamper="proof"),
        after("wrong-proof-after", 7, "SASL_SSL"),
        step("delete", "AlterUserScramCredentials", 0, {"deletions": [{"name": bob, "mechanism": 2}],
                                                        "upsertions": []}),
        step("describe-after-delete", "DescribeUserScramCredentials", 0, {"users": [{"name": bob}]},
             until={"path": "results.0.credential_infos.*", "count": 1, **poll}),
        *scram_login("deleted", 8, "SASL_PLAINTEXT", bob, "bob-512", mechanism="SCRAM-SHA-512"),
        after("deleted-after", 8, "SASL_PLAINTEXT"),
        *plain_login("plain-wrong", 9, "SASL_PLAINTEXT", "alice", "not-alices"),
        after("plain-wrong-after", 9, "SASL_PLAINTEXT"),
        step("unknown-mechanism", "SaslHandshake", 1, {"mechanism": "GSSAPI"}, conn=10, listener="SASL_PLAINTEXT"),
        after("unknown-mechanism-after", 10, "SASL_PLAINTEXT"),
        after("before-authentication", 11, "SASL_PLAINTEXT"),
        after("before-authentication-ssl", 12, "SASL_SSL"),
        step("authenticate-before-handshake", "SaslAuthenticate", 2, {"auth_bytes": {"$utf8": "n,,n=x,r=y"}},
             conn=13, listener="SASL_PLAINTEXT"),
    ]


# --- KIP-848: the consumer group protocol (ConsumerGroupHeartbeat, ConsumerGroupDescribe) ---
# A member's id is the client's choice from ConsumerGroupHeartbeat v1 (KAFKA-16813: the
# Java client sends Uuid.randomUuid().toString(), 22 base64url characters); the scenarios
# use fixed ids of that shape, so that the server-side assignors, which order members by
# id, assign the same partitions on every run. v0 lets the coordinator choose one.
# Epochs and owned partitions are taken from the broker's answers ($ref), as a client does:
# an acknowledgement sends the partitions of the last assignment received.

import base64 as _base64   # noqa: E402
import hashlib as _hashlib  # noqa: E402

CG_INVALID_REQUEST, CG_UNKNOWN_MEMBER_ID = 42, 25
CG_REBALANCE_TIMEOUT_MS = 30000
CG_POLL = {"timeout_ms": 20000, "interval_ms": 200}


def member_uuid(S, n):
    """A fixed member id of the Java client's shape (base64url of 16 bytes, no padding)."""
    return _base64.urlsafe_b64encode(_hashlib.md5(f"{S}-member-{n}".encode()).digest()).decode().rstrip("=")


def cg_heartbeat(id, group, member_id, epoch, v=1, topics=None, regex=None, rebalance_timeout_ms=-1,
                 instance_id=None, rack_id=None, assignor=None, owned=None, conn=1, **kw):
    """ConsumerGroupHeartbeat: every optional field null (= unchanged) unless given."""
    req = {"group_id": group, "member_id": member_id, "member_epoch": epoch,
           "instance_id": instance_id, "rack_id": rack_id,
           "rebalance_timeout_ms": rebalance_timeout_ms, "subscribed_topic_names": topics,
           "server_assignor": assignor, "topic_partitions": owned}
    if v >= 1:
        req["subscribed_topic_regex"] = regex
    return step(id, "ConsumerGroupHeartbeat", v, req, conn=conn, **kw)


def cg_join(id, group, member_id, topics=None, regex=None, v=1, poll=True, **kw):
    """A (re)join: epoch 0, the rebalance timeout, the subscription, no owned partitions;
    re-sent while the coordinator is not ready yet (a fresh __consumer_offsets)."""
    if poll:
        kw["until"] = {"path": "error_code", "not_in": RETRIABLE_COORDINATOR, "timeout_ms": 30000,
                       "interval_ms": 200}
    return cg_heartbeat(id, group, member_id, 0, v=v, topics=topics, regex=regex,
                        rebalance_timeout_ms=kw.pop("rebalance_timeout_ms", CG_REBALANCE_TIMEOUT_MS),
                        owned=kw.pop("owned", []), **kw)


def assigned(step_id):
    """The topic_partitions of a heartbeat answer's assignment (to acknowledge them)."""
    return ref(f"{step_id}.assignment.topic_partitions")


def epoch_from(step_id, add=None):
    return ref(f"{step_id}.member_epoch", add)


def cg_describe(id, groups, v=1, ops=False, **kw):
    return step(id, "ConsumerGroupDescribe", v, {"group_ids": groups, "include_authorized_operations": ops},
                **kw)


def list_groups(S, id, v=5, states=(), types=()):
    req = {}
    if v >= 4:
        req["states_filter"] = list(states)
    if v >= 5:
        req["types_filter"] = list(types)
    return step(id, "ListGroups", v, req, keep={"path": "groups", "field": "group_id", "prefix": S})


def describe_groups(id, groups, v=5):
    return step(id, "DescribeGroups", v, {"groups": groups, "include_authorized_operations": False})


def n_assigned(n):
    """until: the answer's assignment holds n partitions."""
    return {"path": "assignment.topic_partitions.*.partitions.*", "count": n, **CG_POLL}


@scenario("consumer-group-join")
def _consumer_group_join(S):
    """KIP-848, one member, Kafka's default settings (heartbeat interval 5 s): a member
    joins with epoch 0 and a client-chosen id (v1) subscribed to a topic of 3 partitions
    (the first answer carries epoch 1 and the whole assignment), acknowledges it, sends
    a steady-state heartbeat (every field null); a full request (which is answered with
    the assignment again); a rack id; ConsumerGroupDescribe v0 and v1 at each stage;
    v0 with the coordinator choosing the member id (and v1 refusing an empty one);
    leaving (epoch -1), a heartbeat after leaving; ListGroups and DescribeGroups. (A new
    consumer group starts at epoch 1, so the first member's epoch is 2. Right after
    FindCoordinator, ConsumerGroupDescribe answers NOT_COORDINATOR while the
    __consumer_offsets partition loads: the first describe is polled.)"""
    t, g, g0 = f"{S}-t", f"{S}-g", f"{S}-g0"
    m = member_uuid(S, 1)
    return [
        *create_topics("create", [(t, 3)]),
        find_coordinator("find", g, 0),
        cg_describe("describe-unknown", [g], until={
            "path": "groups.0.error_code", "not_in": RETRIABLE_COORDINATOR, **CG_POLL}),
        cg_join("join", g, m, topics=[t]),
        cg_describe("describe-joined", [g]),
        cg_describe("describe-joined-v0", [g], v=0),
        cg_heartbeat("ack", g, m, epoch_from("join"), owned=assigned("join")),
        cg_heartbeat("steady", g, m, epoch_from("ack")),
        cg_heartbeat("steady-again", g, m, epoch_from("steady")),
        cg_describe("describe-stable", [g]),
        cg_heartbeat("full", g, m, epoch_from("steady"), topics=[t],
                     rebalance_timeout_ms=CG_REBALANCE_TIMEOUT_MS, owned=assigned("join")),
        cg_heartbeat("rack", g, m, epoch_from("full"), rack_id="rack-a"),
        cg_describe("describe-rack", [g]),
        list_groups(S, "list"),
        list_groups(S, "list-consumer", types=["consumer"]),
        list_groups(S, "list-classic", types=["classic"]),
        describe_groups("describe-groups", [g]),
        find_coordinator("find-g0", g0, 0),
        cg_join("v0-join", g0, "", topics=[t], v=0),
        cg_heartbeat("v0-steady", g0, ref("v0-join.member_id"), epoch_from("v0-join"), v=0,
                     owned=assigned("v0-join")),
        cg_describe("v0-describe", [g0], v=0),
        cg_join("v1-empty-id", g0, "", topics=[t], poll=False),
        cg_heartbeat("v0-leave", g0, ref("v0-join.member_id"), -1, v=0),
        cg_heartbeat("leave", g, m, -1),
        cg_describe("describe-left", [g]),
        cg_heartbeat("after-leave", g, m, epoch_from("full")),
        list_groups(S, "list-after"),
    ]


@scenario("consumer-group-second-member")
def _consumer_group_second_member(S):
    """KIP-848, two members, Kafka's default settings (group.consumer.assignment.interval.ms
    1000: a new target assignment is computed at most once a second, on a heartbeat): A
    joins and gets all 3 partitions; B joins right after (the target is not recomputed
    yet); after 1.1 s B's heartbeat computes the new target: B waits for partitions A
    still owns, A's next heartbeat is answered with a smaller assignment (revocation), A
    acknowledges by sending what it kept, then B gets its partitions. ConsumerGroupDescribe
    after every step. Then A leaves (epoch -1) and, 1.1 s later, B gets everything."""
    t, g = f"{S}-t", f"{S}-g"
    a, b = member_uuid(S, "a"), member_uuid(S, "b")
    return [
        *create_topics("create", [(t, 3)]),
        find_coordinator("find", g, 0),
        cg_join("a-join", g, a, topics=[t]),
        cg_heartbeat("a-ack", g, a, epoch_from("a-join"), owned=assigned("a-join")),
        cg_describe("describe-a", [g]),
        cg_join("b-join", g, b, topics=[t], poll=False),
        cg_describe("describe-b-joined", [g]),
        cg_heartbeat("a-before-interval", g, a, epoch_from("a-ack")),
        {"sleep_ms": 1100},
        cg_heartbeat("b-hb", g, b, epoch_from("b-join")),
        cg_describe("describe-target", [g]),
        cg_heartbeat("a-revoke", g, a, epoch_from("a-before-interval")),
        cg_describe("describe-revoking", [g]),
        cg_heartbeat("b-waits", g, b, epoch_from("b-hb")),
        cg_heartbeat("a-revoked", g, a, epoch_from("a-revoke"), owned=assigned("a-revoke")),
        cg_describe("describe-released", [g]),
        cg_heartbeat("b-gets", g, b, epoch_from("b-waits")),
        cg_heartbeat("b-ack", g, b, epoch_from("b-gets"), owned=assigned("b-gets")),
        cg_heartbeat("a-steady", g, a, epoch_from("a-revoked")),
        cg_describe("describe-stable", [g]),
        describe_groups("describe-groups", [g]),
        cg_heartbeat("a-leave", g, a, -1),
        cg_describe("describe-a-left", [g]),
        cg_heartbeat("b-before-interval", g, b, epoch_from("b-ack")),
        {"sleep_ms": 1100},
        cg_heartbeat("b-all", g, b, epoch_from("b-before-interval")),
        cg_heartbeat("b-all-ack", g, b, epoch_from("b-all"), owned=assigned("b-all")),
        cg_describe("describe-b-alone", [g]),
        cg_heartbeat("b-leave", g, b, -1),
        cg_describe("describe-empty", [g]),
    ]


CG_STATIC_SETTINGS = {"group.consumer.session.timeout.ms": 4000, "group.consumer.min.session.timeout.ms": 1000,
                      "group.consumer.heartbeat.interval.ms": 1000,
                      "group.consumer.min.heartbeat.interval.ms": 500,
                      "group.consumer.assignment.interval.ms": 0}


@scenario("consumer-group-static", broker_settings=CG_STATIC_SETTINGS)
def _consumer_group_static(S):
    """KIP-848 static membership (instance_id), with a 4 s session timeout, a 1 s heartbeat
    interval and the assignment computed on every change (group.consumer.assignment.interval.ms
    0): two static members share 4 partitions; a third member with the first one's instance
    id while it is active (UNRELEASED_INSTANCE_ID); the first leaves with epoch -2 (its
    partitions stay assigned to it, no rebalance) and rejoins with epoch 0 and a new member
    id, getting its assignment back; the old member id with that instance id
    (FENCED_INSTANCE_ID, for a heartbeat and for a leave), an unknown instance id, the old
    id without an instance id; the second leaves with epoch -2 and does not come back: once
    its session times out the first gets all partitions (polled); the second instance id
    joins again as a new member; a static member leaves for good (epoch -1)."""
    t, g = f"{S}-t", f"{S}-g"
    m1, m1b, m2, m2b, m3 = (member_uuid(S, n) for n in ("1", "1b", "2", "2b", "3"))
    i1, i2 = f"{S}-i1", f"{S}-i2"
    return [
        *create_topics("create", [(t, 4)]),
        find_coordinator("find", g, 0),
        cg_join("s1-join", g, m1, topics=[t], instance_id=i1),
        cg_heartbeat("s1-ack", g, m1, epoch_from("s1-join"), owned=assigned("s1-join")),
        cg_join("s2-join", g, m2, topics=[t], instance_id=i2, poll=False),
        cg_heartbeat("s1-revoke", g, m1, epoch_from("s1-ack")),
        cg_heartbeat("s1-revoked", g, m1, epoch_from("s1-revoke"), owned=assigned("s1-revoke")),
        cg_heartbeat("s2-gets", g, m2, epoch_from("s2-join")),
        cg_heartbeat("s2-ack", g, m2, epoch_from("s2-gets"), owned=assigned("s2-gets")),
        cg_describe("describe-stable", [g]),
        cg_join("s3-same-instance", g, m3, topics=[t], instance_id=i1, poll=False),
        cg_heartbeat("s1-leave-temporarily", g, m1, -2, instance_id=i1),
        cg_describe("describe-s1-away", [g]),
        cg_heartbeat("s2-while-away", g, m2, epoch_from("s2-ack")),
        cg_join("s1-rejoin", g, m1b, topics=[t], instance_id=i1, poll=False),
        cg_describe("describe-s1-back", [g]),
        cg_heartbeat("s1-rejoin-ack", g, m1b, epoch_from("s1-rejoin"), owned=assigned("s1-rejoin")),
        cg_heartbeat("s1-old-id", g, m1, epoch_from("s1-revoked"), instance_id=i1),
        cg_heartbeat("s1-old-id-leave", g, m1, -2, instance_id=i1),
        cg_heartbeat("s1-old-id-no-instance", g, m1, epoch_from("s1-revoked")),
        cg_heartbeat("unknown-instance", g, m3, 1, instance_id=f"{S}-i9"),
        cg_heartbeat("unknown-instance-leave", g, m3, -2, instance_id=f"{S}-i9"),
        cg_heartbeat("s2-leave-temporarily", g, m2, -2, instance_id=i2),
        cg_heartbeat("s1-after-s2-expired", g, m1b, epoch_from("s1-rejoin-ack"), until=n_assigned(4)),
        cg_heartbeat("s1-all-ack", g, m1b, epoch_from("s1-after-s2-expired"),
                     owned=assigned("s1-after-s2-expired")),
        cg_describe("describe-s2-expired", [g]),
        cg_heartbeat("s2-old-id-after-expiry", g, m2, epoch_from("s2-ack"), instance_id=i2),
        cg_join("s2-rejoin-new", g, m2b, topics=[t], instance_id=i2, poll=False),
        cg_heartbeat("s1-leave", g, m1b, -1, instance_id=i1),
        cg_describe("describe-s1-gone", [g]),
        cg_heartbeat("s2-after-s1-left", g, m2b, epoch_from("s2-rejoin-new")),
        cg_heartbeat("s2-leave", g, m2b, -1, instance_id=i2),
        cg_describe("describe-end", [g]),
    ]


CG_SETTINGS = {"group.consumer.assignment.interval.ms": 0}


@scenario("consumer-group-regex", broker_settings=CG_SETTINGS)
def _consumer_group_regex(S):
    """KIP-848 regular expression subscription (v1 subscribed_topic_regex, RE2/J syntax,
    resolved asynchronously by the coordinator): a member subscribes to a regex matching
    two existing topics (and not a third); heartbeats until the assignment holds them
    (polled); a new matching topic is created, and heartbeats until the assignment holds
    it too (Kafka refreshes a group's regexes at most every 10 s:
    REGEX_BATCH_REFRESH_MIN_INTERVAL_MS); ConsumerGroupDescribe shows the regex; an invalid
    regex (INVALID_REGULAR_EXPRESSION); a second member subscribed by name to one of the
    topics (the uniform assignor moves that topic's partition to it; a second member on the
    same regex would be assigned partitions in the order of the topic ids, which differ
    from run to run). The join is
    answered before the regex is resolved (epoch 1, an empty assignment); the describe
    500 ms later finds it resolved (the group epoch bumped, the target not computed yet)."""
    ra, rb, rc, other = f"{S}-r-a", f"{S}-r-b", f"{S}-r-c", f"{S}-other"
    g = f"{S}-g"
    regex = f"{S}-r-.*"
    m1, m2, m3 = member_uuid(S, 1), member_uuid(S, 2), member_uuid(S, 3)
    return [
        *create_topics("create", [(ra, 2), (rb, 1), (other, 1)]),
        find_coordinator("find", g, 0),
        cg_join("join", g, m1, regex=regex),
        {"sleep_ms": 500},
        cg_describe("describe-joined", [g]),
        cg_heartbeat("resolved", g, m1, epoch_from("join"), until=n_assigned(3)),
        cg_heartbeat("ack", g, m1, epoch_from("resolved"), owned=assigned("resolved")),
        cg_describe("describe-resolved", [g]),
        *create_topics("create-c", [(rc, 2)]),
        cg_heartbeat("new-topic", g, m1, epoch_from("ack"), until=n_assigned(5)),
        cg_heartbeat("new-topic-ack", g, m1, epoch_from("new-topic"), owned=assigned("new-topic")),
        cg_describe("describe-new-topic", [g]),
        cg_join("invalid-regex", g, m2, regex="[", poll=False),
        cg_join("invalid-regex-paren", g, m2, regex=f"{S}-(", poll=False),
        cg_join("second", g, m3, topics=[rb], poll=False),
        cg_heartbeat("first-revokes", g, m1, epoch_from("new-topic-ack")),
        cg_heartbeat("first-revoked", g, m1, epoch_from("first-revokes"), owned=assigned("first-revokes")),
        cg_heartbeat("second-gets", g, m3, epoch_from("second")),
        cg_describe("describe-two", [g]),
        cg_heartbeat("leave", g, m1, -1),
        cg_heartbeat("second-leave", g, m3, -1),
        cg_describe("describe-empty", [g]),
    ]


@scenario("consumer-group-epochs", broker_settings=CG_SETTINGS)
def _consumer_group_epochs(S):
    """KIP-848 epochs and invalid heartbeats: a newer epoch (FENCED_MEMBER_EPOCH); a
    subscription change bumps the epoch, then the previous epoch with owned partitions that
    are a subset of the assignment or all of it (accepted: the answer may have been lost),
    with a partition not assigned, with no owned partitions, and an older epoch still
    (FENCED_MEMBER_EPOCH); rejoining with epoch 0
    keeps the member; unknown member id (UNKNOWN_MEMBER_ID) and unknown group
    (GROUP_ID_NOT_FOUND); INVALID_REQUEST: empty group id, v1 empty member id, v0 empty
    member id with an epoch, epoch 0 without rebalance timeout / with owned partitions /
    with null owned partitions / without subscription, epoch -2 without instance id, epoch
    -3, empty instance or rack id; an unknown server assignor (UNSUPPORTED_ASSIGNOR); the
    range assignor (server_assignor "range") for two members; leaving with an unknown
    member or group."""
    t, t2, t3, g, gr = f"{S}-t", f"{S}-t2", f"{S}-t3", f"{S}-g", f"{S}-range"
    m, r1, r2 = member_uuid(S, 1), member_uuid(S, "r1"), member_uuid(S, "r2")

    def bad(id, **kw):
        base = dict(group=g, member_id=m, epoch=0, topics=[t], rebalance_timeout_ms=CG_REBALANCE_TIMEOUT_MS,
                    owned=[])
        base.update(kw)
        return cg_heartbeat(id, base.pop("group"), base.pop("member_id"), base.pop("epoch"), **base)
    return [
        *create_topics("create", [(t, 3), (t2, 1), (t3, 1)]),
        metadata("t3-id", [t3]),
        find_coordinator("find", g, 0),
        cg_join("join", g, m, topics=[t]),
        cg_heartbeat("ack", g, m, epoch_from("join"), owned=assigned("join")),
        cg_heartbeat("newer-epoch", g, m, epoch_from("join", 1)),
        cg_heartbeat("resubscribe", g, m, epoch_from("ack"), topics=[t, t2]),
        cg_heartbeat("resubscribe-ack", g, m, epoch_from("resubscribe"), owned=assigned("resubscribe")),
        cg_heartbeat("previous-epoch-subset", g, m, epoch_from("ack"), owned=assigned("join")),
        cg_heartbeat("previous-epoch-same", g, m, epoch_from("ack"), owned=assigned("resubscribe")),
        cg_heartbeat("previous-epoch-not-subset", g, m, epoch_from("ack"), owned=[
            {"topic_id": ref("t3-id.topics.0.topic_id"), "partitions": [0]}]),
        cg_heartbeat("previous-epoch-no-owned", g, m, epoch_from("ack")),
        cg_heartbeat("older-epoch", g, m, epoch_from("ack", -1), owned=[]),
        cg_heartbeat("current-epoch", g, m, epoch_from("resubscribe-ack")),
        cg_describe("describe", [g]),
        cg_join("rejoin", g, m, topics=[t, t2], poll=False),
        cg_heartbeat("rejoin-ack", g, m, epoch_from("rejoin"), owned=assigned("rejoin")),
        cg_heartbeat("unknown-member", g, "nobody", epoch_from("rejoin")),
        cg_heartbeat("unknown-group", f"{S}-nope", m, 1),
        bad("empty-group-id", group=""),
        bad("v1-empty-member-id", member_id=""),
        bad("v0-empty-member-id-epoch", member_id="", epoch=1, v=0),
        bad("no-rebalance-timeout", rebalance_timeout_ms=-1),
        bad("owned-on-join", owned=assigned("rejoin")),
        bad("null-owned-on-join", owned=None),
        bad("no-subscription", topics=None),
        bad("static-leave-no-instance", epoch=-2),
        bad("epoch-minus-3", epoch=-3),
        bad("empty-instance-id", instance_id=""),
        bad("empty-rack-id", rack_id=""),
        bad("unknown-assignor", assignor="bogus"),
        bad("unknown-assignor-v0", assignor="bogus", v=0),
        cg_describe("describe-after-errors", [g]),
        find_coordinator("find-range", gr, 0),
        cg_join("range-1", gr, r1, topics=[t], assignor="range"),
        cg_join("range-2", gr, r2, topics=[t], assignor="range", poll=False),
        cg_heartbeat("range-1-revoke", gr, r1, epoch_from("range-1")),
        cg_heartbeat("range-1-revoked", gr, r1, epoch_from("range-1-revoke"), owned=assigned("range-1-revoke")),
        cg_heartbeat("range-2-gets", gr, r2, epoch_from("range-2")),
        cg_describe("describe-range", [gr]),
        cg_heartbeat("uniform-for-one", gr, r2, epoch_from("range-2-gets"), assignor="uniform"),
        cg_describe("describe-mixed-assignors", [gr]),
        cg_heartbeat("leave-unknown-member", g, "nobody", -1),
        cg_heartbeat("leave-unknown-group", f"{S}-nope", m, -1),
        cg_heartbeat("leave", g, m, -1),
        cg_heartbeat("leave-again", g, m, -1),
        cg_heartbeat("range-1-leave", gr, r1, -1),
        cg_heartbeat("range-2-leave", gr, r2, -1),
    ]


def member_offset_fetch(id, group, topics, member_id, member_epoch, require_stable=False, **kw):
    """OffsetFetch v9 with a consumer group member's id and epoch (KIP-848)."""
    return step(id, "OffsetFetch", 9, {"groups": [{
        "group_id": group, "member_id": member_id, "member_epoch": member_epoch,
        "topics": [{"name": t, "partition_indexes": ps} for t, ps in topics.items()]}],
        "require_stable": require_stable}, **kw)


@scenario("consumer-group-offsets", broker_settings=CG_SETTINGS)
def _consumer_group_offsets(S):
    """Offsets of a KIP-848 consumer group member: OffsetCommit v9 with its member id and
    epoch (the current epoch; a newer one: STALE_MEMBER_EPOCH; an unknown member or none
    while the group has members: UNKNOWN_MEMBER_ID; v8: UNSUPPORTED_VERSION, members of
    the consumer protocol must use v9); after a subscription change bumps the epoch, the
    previous epoch is accepted per partition for partitions assigned at or before it and
    refused (STALE_MEMBER_EPOCH) for the new ones (KIP-1251); OffsetFetch v9 with the
    member's id and epoch (current, older, newer, unknown member, none); TxnOffsetCommit v4
    from a transactional producer with the member's id and generation_id = its epoch (the
    exactly-once path: current, previous, newer, unknown member, no member), then the
    commit and OffsetFetch with require_stable; ListGroups v5 by type and state and
    DescribeGroups v5 and v6 of the consumer group; after the member leaves, commits
    without a member are accepted."""
    t, t2, g, tid = f"{S}-t", f"{S}-t2", f"{S}-g", f"{S}-tid"
    m = member_uuid(S, 1)
    ep = epoch_from("resubscribe-ack")
    return [
        *create_topics("create", [(t, 2), (t2, 1)]),
        find_coordinator("find", g, 0),
        cg_join("join", g, m, topics=[t]),
        cg_heartbeat("ack", g, m, epoch_from("join"), owned=assigned("join")),
        offset_commit("commit", g, {t: {0: 10, 1: 11}}, generation=epoch_from("ack"), member=m),
        offset_commit("commit-newer-epoch", g, {t: {0: 12}}, generation=epoch_from("ack", 1), member=m),
        offset_commit("commit-unknown-member", g, {t: {0: 12}}, generation=epoch_from("ack"), member="nobody"),
        offset_commit("commit-no-member", g, {t: {0: 12}}),
        offset_commit("commit-v8", g, {t: {0: 12}}, v=8, generation=epoch_from("ack"), member=m),
        offset_commit("commit-unassigned-topic", g, {t2: {0: 1}}, generation=epoch_from("ack"), member=m),
        cg_heartbeat("resubscribe", g, m, epoch_from("ack"), topics=[t, t2]),
        cg_heartbeat("resubscribe-ack", g, m, epoch_from("resubscribe"), owned=assigned("resubscribe")),
        offset_commit("commit-previous-epoch", g, {t: {0: 13}, t2: {0: 14}}, generation=epoch_from("ack"),
                      member=m),
        offset_commit("commit-older-epoch", g, {t: {1: 15}}, generation=epoch_from("ack", -1), member=m),
        offset_commit("commit-current", g, {t: {1: 16}, t2: {0: 17}}, generation=ep, member=m),
        member_offset_fetch("fetch", g, {t: [0, 1], t2: [0]}, m, ep),
        member_offset_fetch("fetch-previous-epoch", g, {t: [0]}, m, epoch_from("ack")),
        member_offset_fetch("fetch-newer-epoch", g, {t: [0]}, m, epoch_from("resubscribe-ack", 1)),
        member_offset_fetch("fetch-unknown-member", g, {t: [0]}, "nobody", ep),
        member_offset_fetch("fetch-no-member", g, {t: [0]}, None, -1),
        member_offset_fetch("fetch-member-no-epoch", g, {t: [0]}, m, -1),
        *txn_setup(S, tid, "i"),
        add_offsets("add-offsets", tid, "i", g),
        txn_offset_commit("txn-commit", tid, "i", g, {t: {0: 20}}, generation=ep, member=m),
        txn_offset_commit("txn-commit-previous-epoch", tid, "i", g, {t: {1: 21}, t2: {0: 22}},
                          generation=epoch_from("ack"), member=m),
        txn_offset_commit("txn-commit-newer-epoch", tid, "i", g, {t: {1: 23}},
                          generation=epoch_from("resubscribe-ack", 1), member=m),
        txn_offset_commit("txn-commit-unknown-member", tid, "i", g, {t: {1: 24}}, generation=ep,
                          member="nobody"),
        txn_offset_commit("txn-commit-no-member", tid, "i", g, {t2: {0: 25}}),
        member_offset_fetch("fetch-pending", g, {t: [0, 1], t2: [0]}, m, ep, require_stable=True),
        end_txn("end-commit", tid, "i", True),
        wait_txn_state("wait", tid, "CompleteCommit"),
        member_offset_fetch("fetch-committed", g, {t: [0, 1], t2: [0]}, m, ep, require_stable=True),
        list_groups(S, "list"),
        list_groups(S, "list-consumer", types=["consumer"]),
        list_groups(S, "list-consumer-upper", types=["Consumer"]),
        list_groups(S, "list-classic", types=["classic"]),
        list_groups(S, "list-stable", states=["stable"]),
        list_groups(S, "list-reconciling", states=["Reconciling"]),
        list_groups(S, "list-v4", v=4),
        describe_groups("describe-groups-v5", [g]),
        describe_groups("describe-groups-v6", [g], v=6),
        cg_heartbeat("leave", g, m, -1),
        offset_commit("commit-after-leave", g, {t: {0: 30}}),
        offset_commit("commit-after-leave-old-member", g, {t: {0: 31}}, generation=ep, member=m),
        offset_fetch("fetch-after-leave", g, {t: [0, 1]}),
        list_groups(S, "list-empty"),
    ]


def classic_heartbeat(id, group, join_id, **kw):
    return step(id, "Heartbeat", 4, {"group_id": group, "generation_id": ref(f"{join_id}.generation_id"),
                                     "member_id": ref(f"{join_id}.member_id"), "group_instance_id": None}, **kw)


def _conversion_steps(S, downgrade=True):
    """A classic group (one member, JoinGroup/SyncGroup, protocol type "consumer", a
    ConsumerProtocolSubscription v0) that a ConsumerGroupHeartbeat member joins."""
    t, g = f"{S}-t", f"{S}-g"
    m = member_uuid(S, 1)
    c = ref("c-join.member_id")
    steps = [
        *create_topics("create", [(t, 2)]),
        *group_member("c", g, [t], {t: [0, 1]}),
        list_groups(S, "list-classic"),
        describe_groups("describe-classic", [g]),
        cg_describe("cg-describe-classic", [g]),
        cg_join("m-join", g, m, topics=[t], poll=False),
        list_groups(S, "list-converted"),
        cg_describe("cg-describe-converted", [g]),
        describe_groups("describe-converted", [g]),
        classic_heartbeat("c-heartbeat", g, "c-join"),
        join_group("c-rejoin", g, member_id=c, topics=[t]),
        step("c-resync", "SyncGroup", 5, {
            "group_id": g, "generation_id": ref("c-rejoin.generation_id"), "member_id": c,
            "group_instance_id": None, "protocol_type": "consumer", "protocol_name": "range",
            "assignments": []}),
        classic_heartbeat("c-heartbeat-after-sync", g, "c-rejoin"),
        cg_heartbeat("m-gets", g, m, epoch_from("m-join")),
        cg_heartbeat("m-ack", g, m, epoch_from("m-gets"), owned=assigned("m-gets")),
        cg_describe("cg-describe-mixed", [g]),
        describe_groups("describe-mixed", [g]),
        offset_commit("c-commit", g, {t: {0: 5}}, v=8, generation=ref("c-rejoin.generation_id"), member=c),
        cg_heartbeat("m-leave", g, m, -1),
        list_groups(S, "list-after-leave"),
        cg_describe("cg-describe-after-leave", [g]),
        describe_groups("describe-after-leave", [g]),
        classic_heartbeat("c-heartbeat-after-leave", g, "c-rejoin"),
        join_group("c-rejoin-2", g, member_id=c, topics=[t]),
    ]
    if downgrade:
        steps += [
            sync_group("c-sync-2", g, "c-rejoin-2", {t: [0, 1]}),
            classic_heartbeat("c-heartbeat-2", g, "c-rejoin-2"),
        ]
    else:
        steps += [
            step("c-sync-2", "SyncGroup", 5, {
                "group_id": g, "generation_id": ref("c-rejoin-2.generation_id"), "member_id": c,
                "group_instance_id": None, "protocol_type": "consumer", "protocol_name": "range",
                "assignments": []}),
            classic_heartbeat("c-heartbeat-2", g, "c-rejoin-2"),
        ]
    steps += [
        list_groups(S, "list-end"),
        describe_groups("describe-end", [g]),
        cg_describe("cg-describe-end", [g]),
        step("c-leave", "LeaveGroup", 5, {"group_id": g, "members": [
            {"member_id": c, "group_instance_id": None, "reason": None}]}),
        list_groups(S, "list-left"),
    ]
    return steps


@scenario("consumer-group-conversion")
def _consumer_group_conversion(S):
    """Online migration between the classic and the consumer protocol (KIP-848), with
    Kafka 4.3.1's default group.consumer.migration.policy (bidirectional): a classic group
    with one member (JoinGroup/SyncGroup, ConsumerProtocolSubscription v0, "range"); a
    ConsumerGroupHeartbeat member joins the same group id (the group becomes a consumer
    group: ListGroups' type, DescribeGroups, ConsumerGroupDescribe with member_type 0 for
    the classic member); the classic member's next Heartbeat (REBALANCE_IN_PROGRESS), its
    rejoin and SyncGroup (its new assignment, in ConsumerProtocolAssignment bytes), the
    consumer member getting the partition released; an OffsetCommit by the classic member;
    then the consumer member leaves and the group converts back to a classic group (a
    rebalance: Heartbeat REBALANCE_IN_PROGRESS, JoinGroup, SyncGroup as leader)."""
    return _conversion_steps(S)


@scenario("consumer-group-conversion-upgrade", broker_settings={"group.consumer.migration.policy": "upgrade",
                                                                "group.consumer.assignment.interval.ms": 0})
def _consumer_group_conversion_upgrade(S):
    """As consumer-group-conversion, with group.consumer.migration.policy=upgrade: the
    classic group is upgraded when the consumer member joins, but when that member leaves
    the group stays a consumer group with its classic member (no downgrade): its Heartbeat,
    rejoin (the new target assignment: both partitions) and SyncGroup in the consumer group.
    (group.consumer.assignment.interval.ms 0: the rejoin computes the new target at once,
    whatever the time since the last one.)"""
    return _conversion_steps(S, downgrade=False)


@scenario("consumer-group-conversion-disabled", broker_settings={"group.consumer.migration.policy": "disabled"})
def _consumer_group_conversion_disabled(S):
    """group.consumer.migration.policy=disabled: a ConsumerGroupHeartbeat member cannot
    join a non-empty classic group (GROUP_ID_NOT_FOUND); once the classic member has left,
    the empty classic group becomes a consumer group (always allowed); a classic JoinGroup
    to the consumer group is refused (INCONSISTENT_GROUP_PROTOCOL)."""
    t, g = f"{S}-t", f"{S}-g"
    m = member_uuid(S, 1)
    c = ref("c-join.member_id")
    return [
        *create_topics("create", [(t, 2)]),
        *group_member("c", g, [t], {t: [0, 1]}),
        cg_join("m-join-refused", g, m, topics=[t], poll=False),
        list_groups(S, "list-classic"),
        step("c-leave", "LeaveGroup", 5, {"group_id": g, "members": [
            {"member_id": c, "group_instance_id": None, "reason": None}]}),
        describe_groups("describe-empty-classic", [g]),
        cg_join("m-join", g, m, topics=[t], poll=False),
        list_groups(S, "list-consumer"),
        join_group("d-join", g, topics=[t]),
        join_group("d-join-with-id", g, member_id="d-member", topics=[t]),
        cg_describe("cg-describe", [g]),
        cg_heartbeat("m-leave", g, m, -1),
        join_group("d-join-empty-consumer-group", g, topics=[t]),
        list_groups(S, "list-end"),
    ]


# --- transaction version 2 (KIP-890 part 2) ---------------------------------------------
# Kafka 4.3.1 formatted with its defaults finalizes transaction.version=2, and what the
# Java client (kafka-clients 4.3.1) sends then: FindCoordinator, InitProducerId v5,
# Produce v12 with transactional batches (the leader adds the partition to the
# transaction itself: no AddPartitionsToTxn), TxnOffsetCommit v5 (no AddOffsetsToTxn),
# EndTxn v5 (the coordinator bumps the epoch at every commit or abort, and answers with
# the producer id and epoch to go on with). doze serves these at doze.transaction.version
# 2, so these scenarios replay on a doze started so (doze_settings). The request sequences
# are S1-S13 of the notes on Kafka 4.3.1's source (tv2_spec.md); each scenario's
# docstring says which.

TV2 = {"doze.transaction.version": 2}
TIMEOUT_CHECK_500MS = {"transaction.abort.timed.out.transaction.cleanup.interval.ms": 500}
JAVA_CLIENT = {"client_software_name": "apache-kafka-java", "client_software_version": "4.3.1"}
TV_LEVEL = "finalized_features.[name=transaction.version].max_version_level"


def pid_epoch_batch(src, values, seq, epoch_add=None, pid_src=None):
    """A transactional batch at the producer id and epoch step `src` answered (an
    InitProducerId, or an EndTxn v5: the epoch to go on with), epoch + epoch_add."""
    return batch(values, ref(f"{pid_src or src}.producer_id"), ref(f"{src}.producer_epoch", epoch_add), seq,
                 transactional=True)


def produce_v12(id, tid, topic_data, **kw):
    """Produce v12 (the partitions are added to the transaction by the leader)."""
    return produce(id, topic_data, v=12, tid=tid, **kw)


def end_txn_v5(id, tid, src, commit, epoch_add=None, producer_id=None, **kw):
    """EndTxn v5 with the producer id and epoch of step `src` (epoch + epoch_add)."""
    return end_txn(id, tid, src, commit, v=5, epoch=ref(f"{src}.producer_epoch", epoch_add),
                   producer_id=producer_id if producer_id is not None else ref(f"{src}.producer_id"), **kw)


def txn_offset_commit_v5(id, tid, src, group, offsets, **kw):
    """TxnOffsetCommit v5 at step `src`'s producer id and epoch, outside a group
    generation (-1, ""), as a producer's sendOffsetsToTransaction with group metadata
    of only the group id sends it."""
    return txn_offset_commit(id, tid, src, group, offsets, v=5, **kw)


def api_versions(id, v=4, **kw):
    return step(id, "ApiVersions", v, dict(JAVA_CLIENT) if v >= 3 else {}, **kw)


def features_at(id, level, v=4, **kw):
    """ApiVersions, polled until transaction.version is finalized at `level` (0: not
    listed): Kafka's broker learns a change from the metadata log after UpdateFeatures
    has answered."""
    cond = {"path": "finalized_features.[name=transaction.version]", "count": 0} if level == 0 else \
        {"path": TV_LEVEL, "equals": level}
    cond.update(timeout_ms=30000, interval_ms=50)
    return api_versions(id, v, until=cond, **kw)


def update_features(id, updates, v=2, validate_only=False, **kw):
    """UpdateFeatures: updates = [(feature, level, upgrade_type (v1+: 1 upgrade, 2 safe
    downgrade, 3 unsafe downgrade) or allow_downgrade (v0))]."""
    items = []
    for name, level, how in updates:
        u = {"feature": name, "max_version_level": level}
        u["allow_downgrade" if v == 0 else "upgrade_type"] = how
        items.append(u)
    req = {"timeout_ms": 30000, "feature_updates": items}
    if v >= 1:
        req["validate_only"] = validate_only
    return step(id, "UpdateFeatures", v, req, **kw)


@scenario("api-versions-features", doze_settings=TV2)
def _api_versions_features(S):
    """S1: ApiVersions v0-v4 as the Java client sends them, and what features each
    carries: v0-v2 none; v3 and v4 the supported features (v3 only those whose lowest
    level is above 0, KAFKA-17492), the finalized ones and their epoch (Kafka's is the
    offset of the last metadata record its broker applied: it grows by itself, so only
    whether it is set is compared). The same again 1 s later."""
    return [*(api_versions(f"v{v}", v) for v in range(5)),
            {"sleep_ms": 1000},
            api_versions("v4-later", 4),
            api_versions("v3-later", 3, conn=2)]


@scenario("tv2-commit-and-retries", doze_settings=TV2)
def _tv2_commit_and_retries(S):
    """S2, S3, S4. A transaction of one Produce v12 (no AddPartitionsToTxn: the leader
    adds the partition), committed with EndTxn v5: the answer carries the producer id and
    the bumped epoch (1), and the marker is written at epoch 1. EndTxn v5 again at the old
    epoch (a client's retry): NONE with (P, 1), no effect; the other decision at the old
    epoch: INVALID_TXN_STATE; commit at the current epoch with nothing open:
    INVALID_TXN_STATE; an epoch never given: PRODUCER_FENCED; another producer id and an
    unknown transactional id: INVALID_PRODUCER_ID_MAPPING. An abort with nothing open (the
    "empty abort") bumps the epoch again, and its retry answers the same. Data at the old
    epoch after the marker: INVALID_PRODUCER_EPOCH (the partition knows epoch 1). The next
    transaction at the epoch EndTxn gave; InitProducerId with the current id and epoch
    (KIP-360) then EndTxn v5 commit with nothing open (INVALID_TXN_STATE) and abort (an
    empty abort). DescribeTransactions and DescribeProducers between, Fetch at the end."""
    t, a = f"{S}-t", f"{S}-a"
    return [
        *create_topics("create", [(t, 1)]),
        *txn_setup(S, a, "init"),                                          # (P, 0)
        produce_v12("p1", a, {t: {0: pid_epoch_batch("init", ["a"], 0)}}),
        describe_txn("ongoing", [a]),
        end_txn_v5("commit", a, "init", True),                             # -> (P, 1)
        wait_txn_state("committed", a, "CompleteCommit"),
        describe_producers("producers-after-commit", {t: [0]}),
        # --- S2: retries and wrong ids
        end_txn_v5("commit-retry", a, "init", True),
        end_txn_v5("abort-at-old-epoch", a, "init", False),
        end_txn_v5("commit-at-current-epoch", a, "commit", True),
        end_txn_v5("commit-epoch-never-given", a, "init", True, epoch_add=7),
        end_txn_v5("commit-wrong-pid", a, "commit", True, producer_id=ref("init.producer_id", 1000)),
        end_txn_v5("commit-unknown-tid", f"{S}-nope", "commit", True),
        describe_txn("after-errors", [a]),
        # --- S3: the empty abort
        end_txn_v5("empty-abort", a, "commit", False),                     # (P, 1) -> (P, 2)
        wait_txn_state("empty-aborted", a, "CompleteAbort"),
        end_txn_v5("empty-abort-retry", a, "commit", False),
        end_txn_v5("commit-after-empty-abort", a, "commit", True),
        describe_producers("producers-after-empty-abort", {t: [0]}),
        # --- S4: the old epoch's data after the marker; the next transaction
        produce_v12("old-epoch", a, {t: {0: pid_epoch_batch("init", ["late"], 1)}}),
        describe_txn("after-old-epoch", [a]),
        produce_v12("p2", a, {t: {0: pid_epoch_batch("empty-abort", ["b"], 0)}}),
        describe_txn("p2-ongoing", [a]),
        produce_v12("p2-next", a, {t: {0: pid_epoch_batch("empty-abort", ["c"], 1)}}),
        end_txn_v5("commit2", a, "empty-abort", True),                     # -> (P, 3)
        wait_txn_state("committed2", a, "CompleteCommit"),
        # --- S3's last: InitProducerId (KIP-360: the id and epoch it has), then nothing open
        init_pid("reinit", a, poll=False, producer_id=ref("commit2.producer_id"),
                 producer_epoch=ref("commit2.producer_epoch")),            # -> (P, 4)
        describe_txn("reinit-empty", [a]),
        end_txn_v5("empty-commit", a, "reinit", True),
        end_txn_v5("empty-abort-after-init", a, "reinit", False),          # -> (P, 5)
        wait_txn_state("aborted-after-init", a, "CompleteAbort"),
        describe_producers("producers", {t: [0]}),
        fetch("read-uncommitted", {t: {0: 0}}),
        fetch("read-committed", {t: {0: 0}}, isolation=1),
        list_offsets("lso", {t: {0: -1}}, isolation=1),
    ]


@scenario("tv2-late-endtxn", doze_settings=TV2)
def _tv2_late_endtxn(S):
    """S5: late-endtxn-next-txn (KAFKA-17754) under transaction version 2. T1's
    EndTxn v5 commit is answered on a second connection (the client's retry) and bumps
    the epoch; T2 runs at the new epoch (Produce v12 "t2-a"); then T1's first EndTxn v5
    commit arrives late with T1's epoch, and a late abort too: both are fenced
    (PRODUCER_FENCED, producer id and epoch -1), T2 stays open. read_committed Fetch and
    ListOffsets show T2 not committed early; then "t2-b" and T2's own commit."""
    t, a = f"{S}-t", f"{S}-a"
    settled = {"path": "transaction_states.0.transaction_state",
               "in": ["CompleteCommit", "CompleteAbort", "Ongoing", "Empty"], "timeout_ms": 30000,
               "interval_ms": 50}
    return [
        *create_topics("create", [(t, 1)]),
        *txn_setup(S, a, "init"),
        # --- T1 at epoch E
        produce_v12("t1-produce", a, {t: {0: pid_epoch_batch("init", ["t1"], 0)}}),
        end_txn_v5("t1-commit-retry", a, "init", True, conn=2),            # -> (P, E+1)
        wait_txn_state("t1-complete", a, "CompleteCommit"),
        # --- T2 at E+1
        produce_v12("t2-a", a, {t: {0: pid_epoch_batch("t1-commit-retry", ["t2-a"], 0)}}),
        describe_txn("t2-ongoing", [a]),
        # --- T1's first EndTxn(commit) arrives now, on connection 1; and a late abort
        end_txn_v5("t1-commit-late", a, "init", True, conn=1),
        describe_txn("after-late", [a], until=settled),
        end_txn_v5("t1-abort-late", a, "init", False, conn=1),
        describe_txn("after-late-abort", [a], until=settled),
        list_offsets("after-late-lso", {t: {0: -1}}, isolation=1),
        fetch("after-late-read-committed", {t: {0: 0}}, isolation=1),
        # --- T2 goes on: its next record, then the application's commit
        produce_v12("t2-b", a, {t: {0: pid_epoch_batch("t1-commit-retry", ["t2-b"], 1)}}),
        describe_txn("after-t2-b", [a]),
        end_txn_v5("t2-commit", a, "t1-commit-retry", True),               # -> (P, E+2)
        wait_txn_state("final", a, "CompleteCommit"),
        # --- what a consumer sees
        fetch("read-uncommitted", {t: {0: 0}}, isolation=0),
        fetch("read-committed", {t: {0: 0}}, isolation=1),
        list_offsets("hw", {t: {0: -1}}, isolation=0),
        list_offsets("lso", {t: {0: -1}}, isolation=1),
        describe_producers("producers", {t: [0]}),
    ]


@scenario("tv2-mixed-versions", doze_settings=TV2)
def _tv2_mixed_versions(S):
    """S6 and the other mix: versions of both protocols in one transaction. A: Produce
    v12, then EndTxn v4: the classic path (NONE, no epoch bump, the marker at the same
    epoch). B: the next Produce v12 at that same epoch opens B, and A's EndTxn v4 sent
    again late commits B early (KAFKA-17754 through the classic path); B's own EndTxn v5
    commit then finds CompleteCommit at its own epoch: INVALID_TXN_STATE. C:
    AddPartitionsToTxn v3 and Produce v11, then EndTxn v5: the epoch is bumped. D: the
    classic protocol again at the bumped epoch (AddPartitionsToTxn v3, Produce v11, EndTxn
    v4). E: Produce v12 and EndTxn v5 after it. DescribeProducers shows each marker's
    epoch; Fetch the markers."""
    t, a = f"{S}-t", f"{S}-a"
    settled = {"path": "transaction_states.0.transaction_state",
               "in": ["CompleteCommit", "CompleteAbort", "Ongoing", "Empty"], "timeout_ms": 30000,
               "interval_ms": 50}
    return [
        *create_topics("create", [(t, 1)]),
        *txn_setup(S, a, "init"),                                          # (P, 0)
        # --- A: Produce v12, EndTxn v4
        produce_v12("a-produce", a, {t: {0: pid_epoch_batch("init", ["a"], 0)}}),
        describe_txn("a-ongoing", [a]),
        end_txn("a-commit-v4", a, "init", True, v=4),
        wait_txn_state("a-committed", a, "CompleteCommit"),
        describe_producers("a-producers", {t: [0]}),
        # --- B: Produce v12 at the same epoch; A's EndTxn v4 again, late
        produce_v12("b-produce", a, {t: {0: pid_epoch_batch("init", ["b"], 1)}}),
        describe_txn("b-ongoing", [a]),
        end_txn("b-late-a-commit-v4", a, "init", True, v=4),
        describe_txn("b-after-late", [a], until=settled),
        end_txn_v5("b-commit-v5", a, "init", True),
        # --- C: AddPartitionsToTxn v3, Produce v11, EndTxn v5
        add_partitions("c-add-v3", a, "init", {t: [0]}),
        produce("c-produce-v11", {t: {0: pid_epoch_batch("init", ["c"], 2)}}, v=11, tid=a),
        end_txn_v5("c-commit-v5", a, "init", True),                        # -> (P, 1)
        wait_txn_state("c-committed", a, "CompleteCommit"),
        describe_producers("c-producers", {t: [0]}),
        # --- D: the classic protocol at the bumped epoch
        add_partitions("d-add-v3", a, "c-commit-v5", {t: [0]}),
        produce("d-produce-v11", {t: {0: pid_epoch_batch("c-commit-v5", ["d"], 0)}}, v=11, tid=a),
        end_txn("d-commit-v4", a, "c-commit-v5", True, v=4),
        wait_txn_state("d-committed", a, "CompleteCommit"),
        describe_producers("d-producers", {t: [0]}),
        # --- E: Produce v12 and EndTxn v5 again
        produce_v12("e-produce", a, {t: {0: pid_epoch_batch("c-commit-v5", ["e"], 1)}}),
        end_txn_v5("e-commit-v5", a, "c-commit-v5", True),                 # -> (P, 2)
        wait_txn_state("e-committed", a, "CompleteCommit"),
        describe_producers("producers", {t: [0]}),
        fetch("read-uncommitted", {t: {0: 0}}),
        fetch("read-committed", {t: {0: 0}}, isolation=1),
    ]


@scenario("tv2-offsets", doze_settings=TV2)
def _tv2_offsets(S):
    """S7: TxnOffsetCommit v5 without AddOffsetsToTxn (what the TV2 Java client's
    sendOffsetsToTransaction sends): the group coordinator's partition
    (__consumer_offsets-N) is added to the transaction by the broker; DescribeTransactions
    lists it; OffsetFetch (require_stable, and not) while the transaction is open, and the
    offsets after the commit. A transaction of offsets alone, aborted; a commit at the old
    epoch. The variant: AddOffsetsToTxn v4 in a transaction of transaction version 2, then
    TxnOffsetCommit v5 and EndTxn v5."""
    t, g, a = f"{S}-t", f"{S}-g", f"{S}-a"
    parts = {t: [0, 1]}
    return [
        *create_topics("create", [(t, 2)]),
        *txn_setup(S, a, "init"),                                          # (P, 0)
        find_coordinator("group-find", g, 0),
        # the group coordinator's partition loads after FindCoordinator has answered
        # (NOT_COORDINATOR meanwhile); the Java client retries TxnOffsetCommit then
        offset_fetch("group-ready", g, parts, until={"path": "groups.0.error_code", "equals": 0,
                                                     "timeout_ms": 30000, "interval_ms": 100}),
        produce_v12("p1", a, {t: {0: pid_epoch_batch("init", ["a"], 0)}}),
        txn_offset_commit_v5("offsets", a, "init", g, {t: {0: 5, 1: 6}}),
        describe_txn("ongoing", [a]),
        offset_fetch("fetch-stable-open", g, parts, require_stable=True),
        offset_fetch("fetch-open", g, parts),
        end_txn_v5("commit", a, "init", True),                             # -> (P, 1)
        wait_txn_state("committed", a, "CompleteCommit"),
        offset_fetch("fetch-committed", g, parts, require_stable=True),
        # --- offsets alone, then an abort; a commit at the old epoch meanwhile
        txn_offset_commit_v5("offsets-only", a, "commit", g, {t: {0: 9}}),
        describe_txn("offsets-only-ongoing", [a]),
        txn_offset_commit_v5("offsets-old-epoch", a, "init", g, {t: {0: 10}}),
        end_txn_v5("abort", a, "commit", False),                           # -> (P, 2)
        wait_txn_state("aborted", a, "CompleteAbort"),
        offset_fetch("fetch-after-abort", g, parts, require_stable=True),
        # --- AddOffsetsToTxn v4 in a transaction of version 2
        produce_v12("p2", a, {t: {1: pid_epoch_batch("abort", ["b"], 0)}}),
        add_offsets("add-offsets-v4", a, "abort", g),
        describe_txn("add-offsets-ongoing", [a]),
        txn_offset_commit_v5("offsets-after-add", a, "abort", g, {t: {1: 7}}),
        end_txn_v5("commit2", a, "abort", True),                           # -> (P, 3)
        wait_txn_state("committed2", a, "CompleteCommit"),
        offset_fetch("fetch-final", g, parts, require_stable=True),
        fetch("read-committed", {t: {0: 0, 1: 0}}, isolation=1),
    ]


@scenario("tv2-timeout", broker_settings=TIMEOUT_CHECK_500MS, doze_settings=TV2)
def _tv2_timeout(S):
    """S8: a transaction of version 2 with a 1 s timeout, aborted by the coordinator
    (its check runs every 500 ms here): the abort bumps the epoch once (E+1, KAFKA-19367),
    the marker is written at E+1. Then the producer at its old epoch E: Produce v12
    (INVALID_PRODUCER_EPOCH from the partition), AddPartitionsToTxn v3 and EndTxn v4
    (PRODUCER_FENCED), EndTxn v5 commit (INVALID_TXN_STATE) and abort (NONE with (P, E+1):
    a retry of the abort that happened). InitProducerId with (P, E) answers E+1 without a
    bump (E is the last epoch); with (-1, -1) E+2. A new transaction commits."""
    t, a = f"{S}-t", f"{S}-a"
    return [
        *create_topics("create", [(t, 1)]),
        *txn_setup(S, a, "init", timeout_ms=1000),                         # (P, E)
        produce_v12("p1", a, {t: {0: pid_epoch_batch("init", ["v"], 0)}}),
        describe_txn("ongoing", [a]),
        wait_txn_state("aborted", a, "CompleteAbort"),                     # polled: about 1-1.5 s
        describe_producers("producers", {t: [0]}),
        fetch("read-uncommitted", {t: {0: 0}}),
        produce_v12("fenced-produce", a, {t: {0: pid_epoch_batch("init", ["w"], 1)}}),
        add_partitions("fenced-add-v3", a, "init", {t: [0]}),
        end_txn("fenced-commit-v4", a, "init", True, v=4),
        end_txn_v5("fenced-commit", a, "init", True),
        end_txn_v5("fenced-abort", a, "init", False),
        describe_txn("after-fenced", [a]),
        init_pid("reinit-old-epoch", a, poll=False, producer_id=pid_of("init"), producer_epoch=epoch_of("init")),
        describe_txn("after-reinit-old-epoch", [a]),
        init_pid("reinit", a, poll=False),
        produce_v12("p2", a, {t: {0: pid_epoch_batch("reinit", ["x"], 0)}}),
        end_txn_v5("commit", a, "reinit", True),
        wait_txn_state("committed", a, "CompleteCommit"),
        fetch("read-committed", {t: {0: 0}}, isolation=1),
        describe_producers("producers-after", {t: [0]}),
    ]


@scenario("tv2-fencing", doze_settings=TV2, known_differences={
    step_id: {"name": FINISHES_ABORT, "doze": {"error_code": 0},
              "why": "Kafka fences, starts the abort and answers CONCURRENT_TRANSACTIONS (the client "
                     "retries); doze finishes the abort (markers durable) and answers as the retry is answered"}
    for step_id in ("fence", "b-fence")})
def _tv2_fencing(S):
    """S9: InitProducerId while a transaction of version 2 is open (another instance of
    the application, on connection 2). Kafka fences: it starts the abort and answers
    CONCURRENT_TRANSACTIONS (-1/-1), and the client retries: the abort ends at E+1
    (KAFKA-19367: one bump; DescribeProducers shows the marker's epoch), and the retry
    gets E+2. The old instance is fenced: EndTxn v5 at E (PRODUCER_FENCED), Produce v12
    at E (INVALID_PRODUCER_EPOCH), InitProducerId (P, E). The new one commits. B: fenced
    by an InitProducerId with the open transaction's own id and epoch (KIP-360's form),
    retried: E+1 without a bump (E is the last epoch), and again."""
    t, a, b = f"{S}-t", f"{S}-a", f"{S}-b"
    return [
        *create_topics("create", [(t, 2)]),
        *txn_setup(S, a, "init"),                                          # (P, E)
        produce_v12("p1", a, {t: {0: pid_epoch_batch("init", ["v"], 0)}}),
        describe_txn("ongoing", [a]),
        init_pid("fence", a, conn=2, poll=False, retry=RETRY_CONCURRENT),  # 51, then (P, E+2)
        describe_txn("fenced", [a]),
        describe_producers("producers", {t: [0]}),                         # the marker at E+1
        init_pid("reinit", a, conn=2, poll=False),                         # -> (P, E+3)
        end_txn_v5("old-commit", a, "init", True),
        end_txn_v5("old-abort", a, "init", False),
        produce_v12("old-produce", a, {t: {0: pid_epoch_batch("init", ["w"], 1)}}),
        init_pid("old-init", a, poll=False, producer_id=pid_of("init"), producer_epoch=epoch_of("init")),
        describe_txn("after-old", [a]),
        produce_v12("new-produce", a, {t: {0: pid_epoch_batch("reinit", ["x"], 0)}}, conn=2),
        end_txn_v5("new-commit", a, "reinit", True, conn=2),
        wait_txn_state("new-committed", a, "CompleteCommit"),
        # --- B: fenced by InitProducerId(P, E) of its open transaction
        *txn_setup(S, b, "ib"),
        produce_v12("b-p1", b, {t: {1: pid_epoch_batch("ib", ["v"], 0)}}),
        init_pid("b-fence", b, conn=2, poll=False, retry=RETRY_CONCURRENT, producer_id=pid_of("ib"),
                 producer_epoch=epoch_of("ib")),
        describe_txn("b-fenced", [b]),
        init_pid("b-reinit", b, conn=2, poll=False, producer_id=pid_of("ib"), producer_epoch=epoch_of("ib")),
        describe_txn("b-after-reinit", [b]),
        init_pid("b-reinit-again", b, conn=2, poll=False, producer_id=pid_of("ib"),
                 producer_epoch=epoch_of("ib")),
        describe_txn("b-after-reinit-again", [b]),
        describe_producers("producers-final", {t: [0, 1]}),
        fetch("read-committed", {t: {0: 0, 1: 0}}, isolation=1),
    ]


@scenario("tv2-markers", doze_settings=TV2)
def _tv2_markers(S):
    """S11 (KIP-1228): WriteTxnMarkers sent directly (as a coordinator, or `kafka-
    transactions abort`) with transaction_version 2 (v2) against v1's classic rule. With
    T2 open at epoch E+1 (after T1's EndTxn v5): a TV2 marker at E+1 is refused
    (INVALID_PRODUCER_EPOCH: a TV2 marker must carry a newer epoch than the data); a v1
    marker at E+1 is written (the classic >= rule) and commits T2 on the partition; a TV2
    marker at E+1 with nothing open is a retry (NONE); older epochs are refused (TV2 and
    TV0); an older coordinator epoch: TRANSACTION_COORDINATOR_FENCED. The coordinator
    still has T2 open: the producer's EndTxn v5 commits it, its marker at E+2 is written.
    A TV2 marker for a producer the partition never saw, and at a newer epoch."""
    t, a = f"{S}-t", f"{S}-a"
    pid, e0, e1 = pid_of("init"), epoch_of("init"), ref("t1-commit.producer_epoch")
    coord = ref("t1-producers.topics.0.partitions.0.active_producers.0.coordinator_epoch")
    older_coord = ref("t1-producers.topics.0.partitions.0.active_producers.0.coordinator_epoch", -1)
    return [
        *create_topics("create", [(t, 2)]),
        *txn_setup(S, a, "init"),                                          # (P, E)
        produce_v12("t1", a, {t: {0: pid_epoch_batch("init", ["t1"], 0)}}),
        end_txn_v5("t1-commit", a, "init", True),                          # -> (P, E+1)
        wait_txn_state("t1-committed", a, "CompleteCommit"),
        describe_producers("t1-producers", {t: [0]}),
        produce_v12("t2", a, {t: {0: pid_epoch_batch("t1-commit", ["t2"], 0)}}),
        write_txn_markers("tv2-same-epoch-open", [(pid, e1, True, {t: [0]}, coord, 2)], v=2),
        describe_producers("after-tv2-same-epoch", {t: [0]}),
        write_txn_markers("v1-same-epoch-open", [(pid, e1, True, {t: [0]}, coord)], v=1),
        describe_producers("after-v1", {t: [0]}),
        list_offsets("after-v1-lso", {t: {0: -1}}, isolation=1),
        write_txn_markers("tv2-same-epoch-nothing-open", [(pid, e1, True, {t: [0]}, coord, 2)], v=2),
        write_txn_markers("tv2-older-epoch", [(pid, e0, True, {t: [0]}, coord, 2)], v=2),
        write_txn_markers("tv0-older-epoch", [(pid, e0, False, {t: [0]}, coord, 0)], v=2),
        write_txn_markers("v1-older-epoch", [(pid, e0, False, {t: [0]}, coord)], v=1),
        write_txn_markers("tv2-older-coordinator-epoch",
                          [(pid, ref("t1-commit.producer_epoch", 1), True, {t: [0]}, older_coord, 2)], v=2),
        describe_producers("after-refusals", {t: [0]}),
        # --- the coordinator still has T2 open
        describe_txn("coordinator-view", [a]),
        end_txn_v5("t2-commit", a, "t1-commit", True),                     # -> (P, E+2)
        wait_txn_state("t2-committed", a, "CompleteCommit"),
        describe_producers("t2-producers", {t: [0]}),
        # --- a producer the partition never saw; a newer epoch
        write_txn_markers("tv2-unknown-producer", [(ref("init.producer_id", 1000), 0, False, {t: [1]}, coord, 2)],
                          v=2),
        write_txn_markers("tv2-newer-epoch", [(pid, ref("t2-commit.producer_epoch", 1), False, {t: [0]}, coord, 2)],
                          v=2),
        describe_producers("final-producers", {t: [0, 1]}),
        fetch("read-uncommitted", {t: {0: 0, 1: 0}}),
        fetch("read-committed", {t: {0: 0, 1: 0}}, isolation=1),
        list_offsets("lso", {t: {0: -1, 1: -1}}, isolation=1),
    ]


OVERFLOW_INITS = 32766       # after the first InitProducerId (epoch 0): epoch 32766, the last a producer gets


@scenario("tv2-overflow", doze_settings=TV2)
def _tv2_overflow(S):
    """S12: epoch overflow by requests alone. 32,767 InitProducerIds of one
    transactional id (the first, then 32,766 more as one "repeat" step) bring its epoch to
    32766, the last one a producer may hold. A transaction at 32766 committed with
    EndTxn v5: the coordinator writes the marker at (P, 32767) and answers a new producer
    id P' at epoch 0. DescribeProducers shows P at 32767; DescribeTransactions P', 0. The
    EndTxn retried with (P, 32766) answers (P', 0) (the overflow retry); an abort so
    INVALID_TXN_STATE. InitProducerId(P, 32766) answers (P', 0); (-1, -1) (P', 1); a
    transaction of P' commits. B: the same 32,767 InitProducerIds, then one more: the id
    is rotated with no transaction at all (P'', 0)."""
    t, a, b = f"{S}-t", f"{S}-a", f"{S}-b"
    return [
        *create_topics("create", [(t, 1)]),
        *txn_setup(S, a, "init"),                                          # (P, 0)
        step("init-repeat", "InitProducerId", 5, {"transactional_id": a, "transaction_timeout_ms": 60000,
                                                  "producer_id": -1, "producer_epoch": -1},
             repeat=OVERFLOW_INITS),                                       # -> (P, 32766)
        describe_txn("exhausted", [a]),
        produce_v12("p1", a, {t: {0: pid_epoch_batch("init-repeat", ["v"], 0)}}),
        end_txn_v5("commit", a, "init-repeat", True),                      # -> (P', 0)
        wait_txn_state("committed", a, "CompleteCommit"),
        describe_producers("producers", {t: [0]}),
        end_txn_v5("commit-retry", a, "init-repeat", True),
        end_txn_v5("abort-retry", a, "init-repeat", False),
        init_pid("init-old", a, poll=False, producer_id=pid_of("init-repeat"),
                 producer_epoch=epoch_of("init-repeat")),                  # -> (P', 0)
        init_pid("init-new", a, poll=False),                               # -> (P', 1)
        produce_v12("p2", a, {t: {0: pid_epoch_batch("init-new", ["w"], 0)}}),
        end_txn_v5("commit2", a, "init-new", True),
        wait_txn_state("committed2", a, "CompleteCommit"),
        describe_producers("producers-after", {t: [0]}),
        fetch("read-committed", {t: {0: 0}}, isolation=1),
        # --- B: one InitProducerId more at 32766 rotates the id
        *txn_setup(S, b, "ib"),
        step("b-init-repeat", "InitProducerId", 5, {"transactional_id": b, "transaction_timeout_ms": 60000,
                                                    "producer_id": -1, "producer_epoch": -1},
             repeat=OVERFLOW_INITS),
        init_pid("b-rotate", b, poll=False),                               # -> (P'', 0)
        describe_txn("b-rotated", [b]),
        init_pid("b-old", b, poll=False, producer_id=pid_of("b-init-repeat"),
                 producer_epoch=epoch_of("b-init-repeat")),
    ]


@scenario("update-features", broker_settings=TIMEOUT_CHECK_500MS, doze_settings=TV2, own_broker=True)
def _update_features(S):
    """S13: UpdateFeatures v0-v2 on transaction.version (what `kafka-features
    upgrade|downgrade|disable` send; the scenario has a Kafka of its own), each followed
    by ApiVersions v4 polled until the level shows. At 2: v0 with allow_downgrade to 1
    (v0 counts as an upgrade: refused), v2 upgrade type to 1 (refused), validate_only v2
    and v1 (nothing changes), the same level again. Down to 1 (safe downgrade), then
    transaction version 2's requests still work: Produce v12 and EndTxn v5 (the epoch
    is bumped); and a timed-out transaction is aborted the classic way (markers at E+1,
    no last epoch kept: InitProducerId(P, E) is fenced). Refusals: level 3, an unknown
    feature at 1 and at 0, a request whose second update is refused (nothing changes).
    Disabled (0): ApiVersions lists no transaction.version; a "downgrade" to 2. Up with
    v1 (one result per feature), v0, an unsafe downgrade to 1 and v2 back to 2."""
    t, a, b = f"{S}-t", f"{S}-a", f"{S}-b"
    tv = "transaction.version"
    return [
        *create_topics("create", [(t, 2)]),
        features_at("start", 2),
        update_features("v0-allow-downgrade", [(tv, 1, True)], v=0),
        update_features("v2-downgrade-as-upgrade", [(tv, 1, 1)]),
        update_features("v2-validate-only", [(tv, 1, 2)], validate_only=True),
        update_features("v1-validate-only", [(tv, 1, 2)], v=1, validate_only=True),
        api_versions("after-validate-only"),
        update_features("v2-same-level", [(tv, 2, 1)]),
        api_versions("after-same-level"),
        update_features("v2-down-to-1", [(tv, 1, 2)]),
        features_at("at-1", 1),
        features_at("at-1-v3", 1, v=3),
        # --- at 1: transaction version 2's requests still work
        *txn_setup(S, a, "init"),
        produce_v12("a-produce", a, {t: {0: pid_epoch_batch("init", ["a"], 0)}}),
        end_txn_v5("a-commit", a, "init", True),
        wait_txn_state("a-committed", a, "CompleteCommit"),
        describe_producers("a-producers", {t: [0]}),
        # --- at 1: a timeout's abort
        *txn_setup(S, b, "ib", timeout_ms=1000),
        produce_v12("b-produce", b, {t: {1: pid_epoch_batch("ib", ["b"], 0)}}),
        wait_txn_state("b-aborted", b, "CompleteAbort"),
        describe_producers("b-producers", {t: [1]}),
        end_txn_v5("b-abort-retry", b, "ib", False),
        init_pid("b-reinit-old-epoch", b, poll=False, producer_id=pid_of("ib"), producer_epoch=epoch_of("ib")),
        init_pid("b-reinit", b, poll=False),
        # --- refusals
        update_features("level-3", [(tv, 3, 1)]),
        update_features("unknown-feature", [(f"{S}.foo", 1, 1)]),
        update_features("unknown-feature-0", [(f"{S}.foo", 0, 1)]),
        update_features("second-refused", [(tv, 2, 1), (f"{S}.foo", 1, 1)]),
        api_versions("after-refusals"),
        # --- disabled
        update_features("v2-down-to-0", [(tv, 0, 2)]),
        features_at("at-0", 0),
        update_features("v2-downgrade-to-2", [(tv, 2, 2)]),
        # --- up again
        update_features("v1-up-to-1", [(tv, 1, 1)], v=1),
        features_at("at-1-again", 1),
        update_features("v0-up-to-2", [(tv, 2, False)], v=0),
        features_at("at-2", 2),
        update_features("v2-unsafe-down-to-1", [(tv, 1, 3)]),
        features_at("at-1-unsafe", 1),
        update_features("v2-up-to-2", [(tv, 2, 1)]),
        features_at("end", 2),
        features_at("end-v3", 2, v=3),
    ]
