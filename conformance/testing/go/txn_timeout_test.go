package dozetest

// 3. A transaction aborted by moving the broker's clock past its timeout
// (POST /control/advance): the coordinator aborts it and bumps the epoch
// (CompleteAbort, epoch 0 -> 1), and the producer, still at epoch 0, is
// fenced. What franz-go reports:
//   - EndTransaction(TryCommit) -> PRODUCER_FENCED (the coordinator's answer);
//   - a produce to the partition it already added -> INVALID_PRODUCER_EPOCH
//     (the partition's answer; it saw the ABORT marker at epoch 1), and then
//     EndTransaction(TryCommit) -> OPERATION_NOT_ATTEMPTED (franz-go sends no
//     EndTxn for a producer id a produce failed).
// Either way EndTransaction(TryAbort) then returns nil and the client is
// dead: BeginTransaction -> "producer ID has a fatal, unrecoverable error,
// err: PRODUCER_FENCED" (franz-go's KIP-360 re-init at epoch 0 is refused).
// A new client with the same transactional id starts over (epoch 2).

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

func TestTransactionAbortedByTheClock(t *testing.T) {
	const timeout = 10 * time.Second
	cases := []struct {
		name string
		next func(t *testing.T, ctx context.Context, cl *kgo.Client) // the producer's next step, and the error franz-go gives
	}{
		{"then_EndTransaction", func(t *testing.T, ctx context.Context, cl *kgo.Client) {
			err := cl.EndTransaction(ctx, kgo.TryCommit)
			if want := kerr.ProducerFenced; !errors.Is(err, want) {
				t.Fatalf("EndTransaction(TryCommit) = %v, want %v", err, want)
			}
		}},
		{"then_produce", func(t *testing.T, ctx context.Context, cl *kgo.Client) {
			err := cl.ProduceSync(ctx, kgo.StringRecord("late")).FirstErr()
			if want := kerr.InvalidProducerEpoch; !errors.Is(err, want) {
				t.Fatalf("produce = %v, want %v", err, want)
			}
			err = cl.EndTransaction(ctx, kgo.TryCommit)
			if want := kerr.OperationNotAttempted; !errors.Is(err, want) {
				t.Fatalf("EndTransaction(TryCommit) after it = %v, want %v", err, want)
			}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx := begin(t)
			createTopic(t, ctx, "orders", 1)
			cl := client(t, kgo.TransactionalID("tx-slow"), kgo.TransactionTimeout(timeout),
				kgo.DefaultProduceTopic("orders"))
			if err := cl.BeginTransaction(); err != nil {
				t.Fatalf("BeginTransaction: %v", err)
			}
			if err := cl.ProduceSync(ctx, kgo.StringRecord("doomed")).FirstErr(); err != nil {
				t.Fatalf("produce: %v", err)
			}
			if state := doze.Transaction(t, "tx-slow")["transaction_state"]; state != "Ongoing" {
				t.Fatalf("before the clock moves: %v, want Ongoing", state)
			}
			doze.Advance(t, timeout.Milliseconds()+1000)
			var txn map[string]any
			waitFor(t, ctx, "CompleteAbort", func() bool {
				txn = doze.Transaction(t, "tx-slow")
				return txn["transaction_state"] == "CompleteAbort"
			})
			if epoch := txn["producer_epoch"]; epoch != 1.0 {
				t.Fatalf("epoch after the timeout %v, want 1 (bumped to fence the producer)", epoch)
			}
			if got := doze.Values(t, "orders", 0, "committed"); len(got) != 0 {
				t.Fatalf("committed %q, want nothing", got)
			}
			if got := doze.Markers(t, "orders", 0); !slices.Equal(got, []string{"ABORT"}) {
				t.Fatalf("markers %q, want one ABORT", got)
			}

			c.next(t, ctx, cl)

			if err := cl.EndTransaction(ctx, kgo.TryAbort); err != nil {
				t.Fatalf("EndTransaction(TryAbort) = %v, want nil (the broker aborted already)", err)
			}
			err := cl.BeginTransaction()
			if !errors.Is(err, kerr.ProducerFenced) || !strings.Contains(err.Error(), "fatal, unrecoverable") {
				t.Fatalf("BeginTransaction after fencing = %v, want franz-go's fatal PRODUCER_FENCED", err)
			}

			fresh := client(t, kgo.TransactionalID("tx-slow"), kgo.DefaultProduceTopic("orders"))
			if err := fresh.BeginTransaction(); err != nil {
				t.Fatalf("a new client's BeginTransaction: %v", err)
			}
			if err := fresh.ProduceSync(ctx, kgo.StringRecord("again")).FirstErr(); err != nil {
				t.Fatalf("a new client's produce: %v", err)
			}
			if err := fresh.EndTransaction(ctx, kgo.TryCommit); err != nil {
				t.Fatalf("a new client's commit: %v", err)
			}
			if got := doze.Values(t, "orders", 0, "committed"); !slices.Equal(got, []string{"again"}) {
				t.Fatalf("committed %q, want only the new client's record", got)
			}
			if epoch := doze.Transaction(t, "tx-slow")["producer_epoch"]; epoch != 2.0 {
				t.Fatalf("the new client's epoch %v, want 2", epoch)
			}
		})
	}
}
