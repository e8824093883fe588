// Command demo is `make demo`: inorder's main job on embedded defaults. It starts a throwaway Postgres
// and, unless PUBSUB_EMULATOR_HOST names one, an in-process Pub/Sub fake; creates a bookings outbox with
// sample rows; runs the real `inorder run --handler pubsub` against them; keeps inserting bookings while
// it runs; and shows every message as a subscriber receives it, checking order per customer, with a live
// count of what is behind. Ctrl-C stops it cleanly.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	d := flag.Duration("duration", 0, "stop by itself after this long (0: run until Ctrl-C)")
	every := flag.Duration("every", 700*time.Millisecond, "insert a booking this often while running")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	sum, err := run(ctx, options{Duration: *d, InsertEvery: *every, Out: os.Stdout, Logs: os.Stderr})
	if err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
	if !sum.InOrder {
		os.Exit(1)
	}
}
