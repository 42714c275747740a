package dozetest

// 1. A transactional commit retried after COORDINATOR_LOAD_IN_PROGRESS and
// after NOT_COORDINATOR: franz-go's EndTransaction retries the EndTxn itself
// (both are retriable coordinator errors: it looks the coordinator up again),
// the commit succeeds, and the records are committed once.

import (
	"slices"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

func TestCommitRetriedAfterCoordinatorErrors(t *testing.T) {
	cases := []struct {
		name   string
		faults []map[string]any // on EndTxn, each once, in this order
	}{
		{"COORDINATOR_LOAD_IN_PROGRESS", []map[string]any{
			{"api": "EndTxn", "error": "COORDINATOR_LOAD_IN_PROGRESS", "times": 1}}},
		{"NOT_COORDINATOR", []map[string]any{
			{"api": "EndTxn", "error": "NOT_COORDINATOR", "times": 1}}},
		{"both_in_a_row", []map[string]any{
			{"api": "EndTxn", "error": "COORDINATOR_LOAD_IN_PROGRESS", "times": 1},
			{"api": "EndTxn", "error": "NOT_COORDINATOR", "times": 1}}},
		// The EndTxn is carried out but its answer never comes (the
		// connection closes): franz-go sends it again, and the
		// coordinator, already CompleteCommit at that epoch, answers
		// the retry with success. Still one COMMIT marker.
		{"answer_dropped", []map[string]any{
			{"api": "EndTxn", "drop": true, "times": 1}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx := begin(t)
			createTopic(t, ctx, "orders", 1)
			txnID := "tx-" + c.name
			for _, f := range c.faults {
				f["transactional_id"] = txnID // the filter: only this transaction's EndTxn
				doze.Fault(t, f)
			}
			cl := client(t, kgo.TransactionalID(txnID), kgo.DefaultProduceTopic("orders"))
			if err := cl.BeginTransaction(); err != nil {
				t.Fatalf("BeginTransaction: %v", err)
			}
			if err := cl.ProduceSync(ctx, kgo.StringRecord("a"), kgo.StringRecord("b"), kgo.StringRecord("c")).FirstErr(); err != nil {
				t.Fatalf("produce: %v", err)
			}
			if err := cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
				t.Fatalf("EndTransaction(TryCommit) = %v, want nil (franz-go retries %s)", err, c.name)
			}
			if left := doze.Faults(t); len(left) != 0 {
				t.Fatalf("faults not used up: %v (the EndTxn never met them)", left)
			}
			if got, want := doze.Values(t, "orders", 0, "committed"), []string{"a", "b", "c"}; !slices.Equal(got, want) {
				t.Fatalf("committed records %q, want %q once", got, want)
			}
			if got := doze.Markers(t, "orders", 0); !slices.Equal(got, []string{"COMMIT"}) {
				t.Fatalf("markers %q, want one COMMIT", got)
			}
			if state := doze.Transaction(t, txnID)["transaction_state"]; state != "CompleteCommit" {
				t.Fatalf("transaction state %v, want CompleteCommit", state)
			}
		})
	}
}
