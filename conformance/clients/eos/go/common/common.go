// Package common holds the copier contract shared by the Go exactly-once copiers
// (see ../../copier_common.py for the contract in full).
package common

import (
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"math/rand"
	"os"
	"runtime/debug"
	"sync"
	"time"
)

type Args struct {
	Bootstrap, Input, Output, Group, TxnID, Status string
	Attempt, MaxBatch                              int
	AbortRate                                      float64
	Seed                                           int64
}

func ParseArgs() *Args {
	a := &Args{}
	flag.StringVar(&a.Bootstrap, "bootstrap", "", "host:port")
	flag.StringVar(&a.Input, "input", "", "input topic")
	flag.StringVar(&a.Output, "output", "", "output topic")
	flag.StringVar(&a.Group, "group", "", "consumer group")
	flag.StringVar(&a.TxnID, "txn-id", "", "transactional.id")
	flag.StringVar(&a.Status, "status", "", "status JSON file")
	flag.IntVar(&a.Attempt, "attempt", 1, "copier attempt number")
	flag.IntVar(&a.MaxBatch, "max-batch", 200, "max records per transaction")
	flag.Float64Var(&a.AbortRate, "abort-rate", 0.125, "share of transactions aborted on purpose")
	flag.Int64Var(&a.Seed, "seed", time.Now().UnixNano(), "random seed")
	flag.Parse()
	if a.Bootstrap == "" || a.Input == "" || a.Output == "" || a.Group == "" || a.TxnID == "" || a.Status == "" {
		log.Fatal("need --bootstrap --input --output --group --txn-id --status")
	}
	log.SetFlags(log.Ltime | log.Lmicroseconds)
	return a
}

// ModVersion is the version of a module linked into this binary.
func ModVersion(path string) string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == path {
				return d.Version
			}
		}
	}
	return "?"
}

type Status struct {
	mu        sync.Mutex
	path      string
	attempt   int
	seq       int
	abortRate float64
	Rnd       *rand.Rand
	D         map[string]any
	committed map[string]int
	aborted   map[string]int
}

func NewStatus(a *Args, client, version string) *Status {
	s := &Status{path: a.Status, attempt: a.Attempt, abortRate: a.AbortRate,
		Rnd: rand.New(rand.NewSource(a.Seed)), committed: map[string]int{}, aborted: map[string]int{}}
	s.D = map[string]any{"client": client, "version": version, "attempt": a.Attempt,
		"commits": 0, "aborts": 0, "error_aborts": 0, "errors": 0,
		"committed": s.committed, "aborted": s.aborted, "last_error": nil,
		"started": float64(time.Now().UnixNano()) / 1e9}
	s.write()
	return s
}

// NextTxn returns the tag and plan ("commit" or "abort") of a new transaction.
func (s *Status) NextTxn() (string, string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seq++
	plan := "commit"
	if s.Rnd.Float64() < s.abortRate {
		plan = "abort"
	}
	return fmt.Sprintf("%d.%d", s.attempt, s.seq), plan
}

func (s *Status) BatchSize(max int) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.Rnd.Intn(max) + 1
}

// Committed records a transaction of n records whose commit the client confirmed.
func (s *Status) Committed(tag string, n int) { s.ended("commits", s.committed, tag, n) }

// Aborted records an abort on purpose the client confirmed.
func (s *Status) Aborted(tag string, n int) { s.ended("aborts", s.aborted, tag, n) }

// ended counts a transaction under count and lists it (tag: n records) in txns.
func (s *Status) ended(count string, txns map[string]int, tag string, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.D[count] = s.D[count].(int) + 1
	txns[tag] = n
	s.write()
}

func (s *Status) Error(what string, err error, aborted bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.D["errors"] = s.D["errors"].(int) + 1
	if aborted {
		s.D["error_aborts"] = s.D["error_aborts"].(int) + 1
	}
	s.D["last_error"] = fmt.Sprintf("%s: %v", what, err)
	log.Printf("ERROR %s: %v", what, err)
	s.write()
}

func (s *Status) write() {
	b, err := json.Marshal(s.D)
	if err != nil {
		log.Fatal(err)
	}
	tmp := s.path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		log.Fatal(err)
	}
	if err := os.Rename(tmp, s.path); err != nil {
		log.Fatal(err)
	}
}
