// Exactly-once copier: Sarama transactional AsyncProducer + ConsumerGroup, with
// AddOffsetsToTxnWithGroupMetadata (KIP-447). Contract: ../../copier_common.py.
//
// Sarama has no way to seek a claim back, so after any abort the copier ends the group
// session; the next session starts from the group's committed offsets, moved forward
// (never back) to the last commit this process saw confirmed: Sarama's OffsetFetch
// never sets require_stable, so a just-committed offset might not be visible yet.
package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"sync"
	"time"

	"dozekafka/eos/common"

	"github.com/IBM/sarama"
)

type copier struct {
	a        *common.Args
	st       *common.Status
	cfg      *sarama.Config
	mu       sync.Mutex // one transaction at a time
	producer sarama.AsyncProducer
	local    map[int32]int64 // partition -> offset committed by this process
}

func (c *copier) newProducer() {
	if c.producer != nil {
		c.producer.AsyncClose()
		go func(p sarama.AsyncProducer) { // drain
			for range p.Successes() {
			}
		}(c.producer)
		go func(p sarama.AsyncProducer) {
			for range p.Errors() {
			}
		}(c.producer)
	}
	for {
		p, err := sarama.NewAsyncProducer([]string{c.a.Bootstrap}, c.cfg)
		if err == nil {
			log.Printf("producer ready (InitProducerId ok)")
			c.producer = p
			return
		}
		c.st.Error("NewAsyncProducer", err, false)
		time.Sleep(500 * time.Millisecond)
	}
}

func (c *copier) Setup(s sarama.ConsumerGroupSession) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range s.Claims()[c.a.Input] {
		if off, ok := c.local[p]; ok {
			// Forward only: the fetched offset (no require_stable in Sarama) may lag a
			// commit confirmed here; it may also be ahead of it after a commit whose
			// outcome was unknown here, and then it is right.
			s.MarkOffset(c.a.Input, p, off, "")
		}
	}
	return nil
}

func (c *copier) Cleanup(sarama.ConsumerGroupSession) error { return nil }

var errRewind = errors.New("rewind")

func (c *copier) ConsumeClaim(s sarama.ConsumerGroupSession, claim sarama.ConsumerGroupClaim) error {
	for {
		var msgs []*sarama.ConsumerMessage
		n := c.st.BatchSize(c.a.MaxBatch)
		select {
		case m, ok := <-claim.Messages():
			if !ok {
				return nil
			}
			msgs = append(msgs, m)
		case <-s.Context().Done():
			return nil
		}
	more:
		for len(msgs) < n {
			select {
			case m, ok := <-claim.Messages():
				if !ok {
					break more
				}
				msgs = append(msgs, m)
			case <-time.After(20 * time.Millisecond):
				break more
			}
		}
		if err := c.txn(s, msgs); err != nil {
			return nil // end the session: the next one starts from the committed offsets
		}
	}
}

func (c *copier) txn(s sarama.ConsumerGroupSession, msgs []*sarama.ConsumerMessage) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if s.Context().Err() != nil {
		return errRewind
	}
	tag, plan := c.st.NextTxn()
	p := c.producer
	fail := func(what string, err error) error {
		c.st.Error(what+" "+tag, err, true)
		for i := 0; ; i++ {
			status := p.TxnStatus()
			if status&sarama.ProducerTxnFlagFatalError != 0 || i >= 5 {
				c.newProducer()
				return errRewind
			}
			if status&sarama.ProducerTxnFlagInTransaction == 0 && status&sarama.ProducerTxnFlagAbortableError == 0 {
				return errRewind
			}
			if err := p.AbortTxn(); err != nil {
				c.st.Error("AbortTxn "+tag, err, false)
				time.Sleep(200 * time.Millisecond)
				continue
			}
			return errRewind
		}
	}
	if err := p.BeginTxn(); err != nil {
		return fail("BeginTxn", err)
	}
	offsets := map[int32]int64{}
	for _, m := range msgs {
		p.Input() <- &sarama.ProducerMessage{Topic: c.a.Output, Key: sarama.ByteEncoder(m.Key),
			Value: sarama.ByteEncoder(m.Value), Headers: []sarama.RecordHeader{
				{Key: []byte("src"), Value: []byte(fmt.Sprintf("%d:%d", m.Partition, m.Offset))},
				{Key: []byte("txn"), Value: []byte(tag)},
				{Key: []byte("plan"), Value: []byte(plan)},
			}}
		offsets[m.Partition] = m.Offset + 1
	}
	var prodErr error
	timeout := time.After(60 * time.Second)
	for i := 0; i < len(msgs); i++ { // wait for every record's ack: they must be in the log
		select {
		case <-p.Successes():
		case e := <-p.Errors():
			if prodErr == nil {
				prodErr = e.Err
			}
		case <-timeout:
			return fail("produce", errors.New("no ack after 60s"))
		}
	}
	if prodErr != nil {
		return fail("produce", prodErr)
	}
	var pom []*sarama.PartitionOffsetMetadata
	for part, off := range offsets {
		pom = append(pom, &sarama.PartitionOffsetMetadata{Partition: part, Offset: off})
	}
	gm := &sarama.ConsumerGroupMetadata{GroupID: c.a.Group, GenerationID: s.GenerationID(), MemberID: s.MemberID()}
	if err := p.AddOffsetsToTxnWithGroupMetadata(map[string][]*sarama.PartitionOffsetMetadata{c.a.Input: pom}, gm); err != nil {
		return fail("AddOffsetsToTxn", err)
	}
	if plan == "abort" {
		if err := p.AbortTxn(); err != nil {
			return fail("AbortTxn", err)
		}
		c.st.Aborted(tag, len(msgs))
		return errRewind
	}
	if err := p.CommitTxn(); err != nil {
		return fail("CommitTxn", err)
	}
	for part, off := range offsets {
		c.local[part] = off
	}
	c.st.Committed(tag, len(msgs))
	return nil
}

func main() {
	a := common.ParseArgs()
	st := common.NewStatus(a, "sarama", "sarama "+common.ModVersion("github.com/IBM/sarama"))
	if os.Getenv("EOS_SARAMA_DEBUG") != "" {
		sarama.Logger = log.New(os.Stderr, "[sarama] ", log.Ltime|log.Lmicroseconds)
	}
	cfg := sarama.NewConfig()
	cfg.ClientID = fmt.Sprintf("eos-sarama-%d", a.Attempt)
	cfg.Producer.Idempotent = true
	cfg.Producer.RequiredAcks = sarama.WaitForAll
	cfg.Producer.Return.Successes = true
	cfg.Producer.Return.Errors = true
	cfg.Producer.Transaction.ID = a.TxnID
	cfg.Producer.Transaction.Timeout = 30 * time.Second
	cfg.Net.MaxOpenRequests = 1
	cfg.Consumer.IsolationLevel = sarama.ReadCommitted
	cfg.Consumer.Offsets.AutoCommit.Enable = false
	cfg.Consumer.Offsets.Initial = sarama.OffsetOldest
	cfg.Consumer.Group.Session.Timeout = 10 * time.Second
	cfg.Consumer.Group.Heartbeat.Interval = 2 * time.Second
	if s := common.LoadSecurity(); s != nil { // the runner's --secure and --auth: TLS, SASL or both
		if config := s.TLSConfig(); config != nil {
			cfg.Net.TLS.Enable, cfg.Net.TLS.Config = true, config
		}
		if s.Mechanism != "" {
			cfg.Net.SASL.Enable, cfg.Net.SASL.Handshake = true, true
			cfg.Net.SASL.Mechanism = sarama.SASLMechanism(s.Mechanism)
			cfg.Net.SASL.User, cfg.Net.SASL.Password = s.Username, s.Password
			cfg.Net.SASL.SCRAMClientGeneratorFunc = func() sarama.SCRAMClient { return common.NewScramClient(s.Mechanism) }
		}
	}
	log.Printf("sarama config version %s", cfg.Version)
	c := &copier{a: a, st: st, cfg: cfg, local: map[int32]int64{}}
	c.newProducer()
	var group sarama.ConsumerGroup
	for {
		g, err := sarama.NewConsumerGroup([]string{a.Bootstrap}, a.Group, cfg)
		if err == nil {
			group = g
			break
		}
		st.Error("NewConsumerGroup", err, false)
		time.Sleep(500 * time.Millisecond)
	}
	go func() {
		for err := range group.Errors() {
			log.Printf("group error: %v", err)
		}
	}()
	ctx := context.Background()
	for {
		if err := group.Consume(ctx, []string{a.Input}, c); err != nil {
			log.Printf("Consume: %v", err)
			time.Sleep(200 * time.Millisecond)
		}
	}
}
