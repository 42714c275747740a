package dozetest

// 4. A crash between produce and commit (POST /control/restart kill, and a
// power cut: only what was fsynced survives). What franz-go really does: it
// notices nothing until its next request, reconnects to the same address, and
// the transaction goes on where it was -- doze kept it Ongoing (meta.db) and
// kept the producer's state (its sequence numbers), so a produce after the
// restart joins it and the commit commits both. A transaction committed
// before the crash is all there, once. A third case crashes while the
// EndTxn is held unanswered in the broker (hold_ms): franz-go sends it
// again after the restart and the commit succeeds, once.

import (
	"slices"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

func TestCrashBetweenProduceAndCommit(t *testing.T) {
	for _, how := range []string{"kill", "power_cut"} {
		t.Run(how, func(t *testing.T) {
			ctx := begin(t)
			createTopic(t, ctx, "orders", 1)
			cl := client(t, kgo.TransactionalID("tx-crash"), kgo.DefaultProduceTopic("orders"))
			// A transaction committed (acknowledged) before the crash.
			if err := cl.BeginTransaction(); err != nil {
				t.Fatalf("BeginTransaction: %v", err)
			}
			if err := cl.ProduceSync(ctx, kgo.StringRecord("a1"), kgo.StringRecord("a2")).FirstErr(); err != nil {
				t.Fatalf("produce a: %v", err)
			}
			if err := cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
				t.Fatalf("commit a: %v", err)
			}
			// One open: produced (acknowledged), not committed.
			if err := cl.BeginTransaction(); err != nil {
				t.Fatalf("BeginTransaction: %v", err)
			}
			if err := cl.ProduceSync(ctx, kgo.StringRecord("b1")).FirstErr(); err != nil {
				t.Fatalf("produce b1: %v", err)
			}
			before := doze.Summary(t).Starts
			after := doze.Restart(t, how)
			if after.Starts != before+1 || after.Bootstrap != doze.Bootstrap {
				t.Fatalf("after the restart: %+v, want start %d on %s", after, before+1, doze.Bootstrap)
			}
			if state := doze.Transaction(t, "tx-crash")["transaction_state"]; state != "Ongoing" {
				t.Fatalf("after the %s: %v, want Ongoing (kept)", how, state)
			}
			if got := doze.Values(t, "orders", 0, "committed"); !slices.Equal(got, []string{"a1", "a2"}) {
				t.Fatalf("committed after the %s: %q, want a1 a2 (acknowledged as committed)", how, got)
			}
			if got := doze.Values(t, "orders", 0, "uncommitted"); !slices.Equal(got, []string{"a1", "a2", "b1"}) {
				t.Fatalf("read_uncommitted after the %s: %q, want b1 kept", how, got)
			}
			// The same client, the same transaction: it goes on.
			if err := cl.ProduceSync(ctx, kgo.StringRecord("b2")).FirstErr(); err != nil {
				t.Fatalf("produce b2 after the %s: %v", how, err)
			}
			if err := cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
				t.Fatalf("commit b after the %s: %v", how, err)
			}
			if got, want := doze.Values(t, "orders", 0, "committed"), []string{"a1", "a2", "b1", "b2"}; !slices.Equal(got, want) {
				t.Fatalf("committed %q, want %q", got, want)
			}
			if got := doze.Markers(t, "orders", 0); !slices.Equal(got, []string{"COMMIT", "COMMIT"}) {
				t.Fatalf("markers %q, want two COMMITs", got)
			}
			if epoch := doze.Transaction(t, "tx-crash")["producer_epoch"]; epoch != 0.0 {
				t.Fatalf("epoch %v, want 0: franz-go never re-initialised", epoch)
			}
		})
	}

	t.Run("kill_while_EndTxn_is_held", func(t *testing.T) {
		ctx := begin(t)
		createTopic(t, ctx, "orders", 1)
		cl := client(t, kgo.TransactionalID("tx-held"), kgo.DefaultProduceTopic("orders"))
		if err := cl.BeginTransaction(); err != nil {
			t.Fatalf("BeginTransaction: %v", err)
		}
		if err := cl.ProduceSync(ctx, kgo.StringRecord("c1")).FirstErr(); err != nil {
			t.Fatalf("produce: %v", err)
		}
		doze.Fault(t, map[string]any{"api": "EndTxn", "hold_ms": 60_000, "times": 1})
		ended := make(chan error, 1)
		go func() { ended <- cl.EndTransaction(ctx, kgo.TryCommit) }()
		waitFor(t, ctx, "the EndTxn to be held", func() bool { return len(doze.Faults(t)) == 0 })
		if state := doze.Transaction(t, "tx-held")["transaction_state"]; state != "Ongoing" {
			t.Fatalf("while the EndTxn is held: %v, want Ongoing", state)
		}
		doze.Restart(t, "kill")
		select {
		case err := <-ended:
			if err != nil {
				t.Fatalf("EndTransaction(TryCommit) across the kill = %v, want nil (franz-go resends it)", err)
			}
		case <-ctx.Done():
			t.Fatalf("EndTransaction did not return")
		}
		if got := doze.Values(t, "orders", 0, "committed"); !slices.Equal(got, []string{"c1"}) {
			t.Fatalf("committed %q, want c1 once", got)
		}
		if got := doze.Markers(t, "orders", 0); !slices.Equal(got, []string{"COMMIT"}) {
			t.Fatalf("markers %q, want one COMMIT", got)
		}
	})
}
