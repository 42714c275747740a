// Exactly-once copier: franz-go GroupTransactSession. Contract: ../../copier_common.py.
package main

import (
	"context"
	"fmt"
	"log"
	"os"
	"time"

	"dozekafka/eos/common"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// secure: the options of the runner's --secure and --auth (EOS_SECURITY): TLS, SASL or both.
func secure() []kgo.Opt {
	s := common.LoadSecurity()
	if s == nil {
		return nil
	}
	var opts []kgo.Opt
	switch s.Mechanism {
	case "PLAIN":
		opts = append(opts, kgo.SASL(plain.Auth{User: s.Username, Pass: s.Password}.AsMechanism()))
	case "SCRAM-SHA-256":
		opts = append(opts, kgo.SASL(scram.Auth{User: s.Username, Pass: s.Password}.AsSha256Mechanism()))
	case "SCRAM-SHA-512":
		opts = append(opts, kgo.SASL(scram.Auth{User: s.Username, Pass: s.Password}.AsSha512Mechanism()))
	}
	if config := s.TLSConfig(); config != nil {
		opts = append(opts, kgo.DialTLSConfig(config))
	}
	return opts
}

func main() {
	a := common.ParseArgs()
	st := common.NewStatus(a, "franz-go", "franz-go "+common.ModVersion("github.com/twmb/franz-go"))
	newSession := func() *kgo.GroupTransactSession {
		for {
			s, err := kgo.NewGroupTransactSession(append(secure(),
				kgo.SeedBrokers(a.Bootstrap),
				kgo.ClientID(fmt.Sprintf("eos-franz-%d", a.Attempt)),
				kgo.TransactionalID(a.TxnID),
				kgo.TransactionTimeout(30*time.Second),
				kgo.ConsumerGroup(a.Group),
				kgo.ConsumeTopics(a.Input),
				kgo.FetchIsolationLevel(kgo.ReadCommitted()),
				kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
				kgo.SessionTimeout(10*time.Second),
				kgo.WithLogger(kgo.BasicLogger(os.Stderr, kgo.LogLevelInfo, nil)),
			)...)
			if err == nil {
				return s
			}
			st.Error("NewGroupTransactSession", err, false)
			time.Sleep(500 * time.Millisecond)
		}
	}
	sess := newSession()
	ctx := context.Background()
	for {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		fetches := sess.PollRecords(pctx, st.BatchSize(a.MaxBatch))
		cancel()
		if fetches.IsClientClosed() {
			return
		}
		fetches.EachError(func(t string, p int32, err error) {
			if err != context.DeadlineExceeded {
				log.Printf("fetch error %s[%d]: %v", t, p, err)
			}
		})
		recs := fetches.Records()
		if len(recs) == 0 {
			continue
		}
		tag, plan := st.NextTxn()
		if err := sess.Begin(); err != nil {
			st.Error("Begin "+tag, err, false)
			sess.Close()
			sess = newSession()
			continue
		}
		out := make([]*kgo.Record, 0, len(recs))
		for _, r := range recs {
			out = append(out, &kgo.Record{Topic: a.Output, Key: r.Key, Value: r.Value, Headers: []kgo.RecordHeader{
				{Key: "src", Value: []byte(fmt.Sprintf("%d:%d", r.Partition, r.Offset))},
				{Key: "txn", Value: []byte(tag)},
				{Key: "plan", Value: []byte(plan)},
			}})
		}
		tctx, tcancel := context.WithTimeout(ctx, 60*time.Second)
		prodErr := sess.ProduceSync(tctx, out...).FirstErr()
		try := kgo.TryCommit
		if plan == "abort" || prodErr != nil {
			try = kgo.TryAbort
		}
		if prodErr != nil {
			st.Error("produce "+tag, prodErr, true)
		}
		committed, err := sess.End(tctx, try)
		tcancel()
		switch {
		case err != nil:
			st.Error("End "+tag, err, true)
			sess.Close()
			sess = newSession()
		case prodErr != nil:
		case plan == "abort":
			st.Aborted(tag, len(out))
		case committed:
			st.Committed(tag, len(out))
		default:
			st.Error("End "+tag, fmt.Errorf("not committed (aborted by the session)"), true)
		}
	}
}
