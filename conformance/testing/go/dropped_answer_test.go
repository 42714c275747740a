package dozetest

// 2. A produce whose answer is dropped: doze writes the batch, then closes the
// connection instead of answering (Produce drop=True times=1). franz-go sends
// the batch again on a new connection. With its default idempotent producer
// the retry carries the same producer id and sequence, and the partition
// answers it as a duplicate of what it has: one copy, acknowledged at the
// first copy's offset. With idempotence disabled the retry is a new batch:
// two copies.

import (
	"slices"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

func TestDroppedProduceAnswer(t *testing.T) {
	cases := []struct {
		name       string
		opts       []kgo.Opt
		wantValues []string
		wantOffset int64 // where franz-go says the record went
		producers  int   // producer ids the partition remembers
	}{
		{"idempotent_default", nil, []string{"once"}, 0, 1},
		{"idempotence_disabled", []kgo.Opt{kgo.DisableIdempotentWrite()}, []string{"once", "once"}, 1, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx := begin(t)
			createTopic(t, ctx, "payments", 1)
			doze.Fault(t, map[string]any{"api": "Produce", "topic": "payments", "drop": true, "times": 1})
			cl := client(t, append([]kgo.Opt{kgo.DefaultProduceTopic("payments")}, c.opts...)...)
			r, err := cl.ProduceSync(ctx, kgo.StringRecord("once")).First()
			if err != nil {
				t.Fatalf("produce: %v (franz-go should retry a produce whose connection closed)", err)
			}
			if left := doze.Faults(t); len(left) != 0 {
				t.Fatalf("fault not used: %v", left)
			}
			if got := doze.Values(t, "payments", 0, "log"); !slices.Equal(got, c.wantValues) {
				t.Fatalf("the log holds %q, want %q", got, c.wantValues)
			}
			if r.Offset != c.wantOffset {
				t.Fatalf("franz-go acknowledged offset %d, want %d", r.Offset, c.wantOffset)
			}
			var got struct {
				Producers []map[string]any `json:"producers"`
			}
			doze.must(t, 200, "GET", "/control/producers?topic=payments&partition=0", nil, &got)
			if len(got.Producers) != c.producers {
				t.Fatalf("the partition remembers %d producers (%v), want %d", len(got.Producers), got.Producers, c.producers)
			}
		})
	}
}
