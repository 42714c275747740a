package dozetest

// 5. A consumer's committed offsets, read back through /control/committed
// and checked against Kafka's OffsetFetch (kadm). A group member of two
// partitions polls every record, then:
//   - explicit_commit: autocommit off, CommitUncommittedOffsets: each
//     partition's next offset;
//   - autocommit_close_after_poll: autocommit on, Close right after the
//     poll that brought the last records: franz-go's default commits, as it
//     leaves the group, only what the polls *before* the last one returned
//     (a record counts as processed once the next poll is made), so the
//     last poll's records will be read again by the next member;
//   - autocommit_one_more_poll: the same, with one more (empty) poll before
//     Close: everything.

import (
	"context"
	"maps"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

func TestConsumerCommittedOffsets(t *testing.T) {
	cases := []struct {
		name         string
		opts         []kgo.Opt
		finalise     func(t *testing.T, ctx context.Context, cl *kgo.Client)
		lastPollKept bool // whether the last poll's records are committed
	}{
		{"explicit_commit", []kgo.Opt{kgo.DisableAutoCommit()}, func(t *testing.T, ctx context.Context, cl *kgo.Client) {
			if err := cl.CommitUncommittedOffsets(ctx); err != nil {
				t.Fatalf("CommitUncommittedOffsets: %v", err)
			}
		}, true},
		{"autocommit_close_after_poll", nil, func(t *testing.T, ctx context.Context, cl *kgo.Client) {
			cl.Close()
		}, false},
		{"autocommit_one_more_poll", nil, func(t *testing.T, ctx context.Context, cl *kgo.Client) {
			short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
			defer cancel()
			if n := cl.PollFetches(short).NumRecords(); n != 0 {
				t.Fatalf("one more poll brought %d records, want none", n)
			}
			cl.Close()
		}, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx := begin(t)
			createTopic(t, ctx, "events", 2)
			producer := client(t, kgo.DefaultProduceTopic("events"), kgo.RecordPartitioner(kgo.ManualPartitioner()))
			var records []*kgo.Record
			for i, p := range []int32{0, 0, 0, 1, 1} {
				r := kgo.StringRecord(string(rune('a' + i)))
				r.Partition = p
				records = append(records, r)
			}
			if err := producer.ProduceSync(ctx, records...).FirstErr(); err != nil {
				t.Fatalf("produce: %v", err)
			}
			if got := doze.Committed(t, "readers"); len(got) != 0 {
				t.Fatalf("committed before any consumer: %v", got)
			}
			consumer := client(t, append([]kgo.Opt{kgo.ConsumerGroup("readers"), kgo.ConsumeTopics("events"),
				kgo.ConsumeResetOffset(kgo.NewOffset().AtStart())}, c.opts...)...)

			// Poll until every record came; want: each partition's next
			// offset after the records of the polls that count.
			want, lastPoll := map[int32]int64{}, map[int32]int64{}
			for seen := 0; seen < len(records); {
				fetches := consumer.PollFetches(ctx)
				if err := ctx.Err(); err != nil {
					t.Fatalf("polled %d of %d records before the deadline", seen, len(records))
				}
				fetches.EachError(func(topic string, p int32, err error) { t.Fatalf("fetch %s[%d]: %v", topic, p, err) })
				for p, next := range lastPoll {
					want[p] = next // an earlier poll's records: committed in every case
				}
				lastPoll = map[int32]int64{}
				fetches.EachRecord(func(r *kgo.Record) { lastPoll[r.Partition] = r.Offset + 1 })
				seen += fetches.NumRecords()
			}
			if c.lastPollKept {
				for p, next := range lastPoll {
					want[p] = next
				}
			}
			c.finalise(t, ctx, consumer)

			got := map[int32]int64{}
			for _, o := range doze.Committed(t, "readers") {
				if o["topic"] != "events" {
					t.Fatalf("/control/committed: %v, of another topic", o)
				}
				got[int32(o["partition"].(float64))] = int64(o["committed_offset"].(float64))
			}
			if len(got) != len(want) || !maps.Equal(got, want) {
				t.Fatalf("/control/committed?group=readers: %v, want %v (the last poll: %v)", got, want, lastPoll)
			}
			t.Logf("committed %v (the last poll brought %v)", got, lastPoll)
			fetched, err := kadm.NewClient(client(t)).FetchOffsets(ctx, "readers")
			if err != nil {
				t.Fatalf("OffsetFetch: %v", err)
			}
			for p := range int32(2) {
				o, ok := fetched.Lookup("events", p)
				if at, committed := want[p]; ok != committed || committed && o.At != at {
					t.Fatalf("OffsetFetch: events-%d at %v (%v), the control endpoint: %v", p, o.At, ok, got)
				}
			}
		})
	}
}
