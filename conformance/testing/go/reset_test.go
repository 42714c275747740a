package dozetest

// 6. POST /control/reset between tests: every test begins with one (begin),
// so no test sees another's topics. This test leaves everything behind -- a
// topic with a record, a committed group offset, a transactional id, a fault,
// a moved clock -- resets, and finds none of it, on the same ports, where
// franz-go clients made afterwards work as on a new broker.

import (
	"slices"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

func TestResetBetweenTests(t *testing.T) {
	ctx := begin(t)
	createTopic(t, ctx, "left-behind", 1)
	tx := client(t, kgo.TransactionalID("tx-left"), kgo.DefaultProduceTopic("left-behind"))
	if err := tx.BeginTransaction(); err != nil {
		t.Fatalf("BeginTransaction: %v", err)
	}
	if err := tx.ProduceSync(ctx, kgo.StringRecord("old")).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}
	if err := tx.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatalf("commit: %v", err)
	}
	adm := kadm.NewClient(client(t))
	if err := adm.CommitAllOffsets(ctx, "old-group", kadm.OffsetsFromRecords(kgo.Record{Topic: "left-behind", Partition: 0, Offset: 0})); err != nil {
		t.Fatalf("commit offsets: %v", err)
	}
	doze.Fault(t, map[string]any{"api": "Metadata", "close": true}) // would break every client
	doze.Advance(t, 3_600_000)
	before := doze.Summary(t)
	if len(before.Faults) != 1 || before.ClockOffsetMs != 3_600_000 || len(doze.Committed(t, "old-group")) != 1 {
		t.Fatalf("before the reset: %+v, committed %v", before, doze.Committed(t, "old-group"))
	}

	after := doze.Restart(t, "") // POST /control/reset, then wait for the next start
	if after.Starts != before.Starts+1 || after.Bootstrap != before.Bootstrap || len(after.Faults) != 0 || after.ClockOffsetMs != 0 {
		t.Fatalf("after the reset: %+v, want start %d on %s, no faults, the real clock", after, before.Starts+1, before.Bootstrap)
	}
	var missing map[string]any
	if status, err := doze.Call("GET", "/control/offsets?topic=left-behind&partition=0", nil, &missing); err != nil || status != 404 {
		t.Fatalf("/control/offsets of the old topic: %d %v %v, want 404", status, missing, err)
	}
	if txn := doze.Transaction(t, "tx-left"); txn != nil {
		t.Fatalf("the old transactional id is still there: %v", txn)
	}
	if got := doze.Committed(t, "old-group"); len(got) != 0 {
		t.Fatalf("the old group's offsets are still there: %v", got)
	}

	// A new client of the same bootstrap: the topic is gone for Kafka too.
	fresh := kadm.NewClient(client(t))
	topics, err := fresh.ListTopics(ctx)
	if err != nil {
		t.Fatalf("ListTopics after the reset: %v", err)
	}
	if names := topics.Names(); len(names) != 0 {
		t.Fatalf("topics after the reset: %v, want none", names)
	}
	createTopic(t, ctx, "left-behind", 1)
	p := client(t, kgo.DefaultProduceTopic("left-behind"))
	if r, err := p.ProduceSync(ctx, kgo.StringRecord("new")).First(); err != nil || r.Offset != 0 {
		t.Fatalf("produce after the reset: %v at %v, want offset 0", err, r)
	}
	if got := doze.Values(t, "left-behind", 0, "log"); !slices.Equal(got, []string{"new"}) {
		t.Fatalf("the topic of the same name holds %q, want only the new record", got)
	}
}
