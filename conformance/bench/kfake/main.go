// The kfake runner conformance/bench/compare.py builds and starts: franz-go's
// kfake as one single-broker process on a fixed port, its data in a directory
// (kfake.DataDir: state reloaded from there at start), and with -sync an
// fsync of every appended batch (kfake.SyncWrites). It prints "ready ADDR"
// once it listens, and closes cleanly (flushing its state) on SIGTERM or
// Ctrl-C.
//
//	go build -o kfake-bench . && ./kfake-bench -port 9092 -dir ./kfake-data [-sync]
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/twmb/franz-go/pkg/kfake"
)

func main() {
	port := flag.Int("port", 9092, "port to listen on, on 127.0.0.1")
	dir := flag.String("dir", "kfake-data", "data directory (kfake.DataDir)")
	sync := flag.Bool("sync", false, "fsync every appended batch (kfake.SyncWrites)")
	flag.Parse()

	opts := []kfake.Opt{kfake.NumBrokers(1), kfake.Ports(*port), kfake.DataDir(*dir)}
	if *sync {
		opts = append(opts, kfake.SyncWrites())
	}
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		fmt.Fprintln(os.Stderr, "kfake:", err)
		os.Exit(1)
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	fmt.Println("ready", c.ListenAddrs()[0])
	<-sigs
	c.Close()
}
