package processortest

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/inorder-dev/inorder/cursor"
	"github.com/inorder-dev/inorder/inordertype"
)

// WaitOpts configures WaitCaughtUp and WaitHalted. The zero value, like a nil *WaitOpts, uses the
// defaults given on each field.
type WaitOpts struct {
	// Timeout bounds the wait; past it the test fails. Zero means 10s.
	Timeout time.Duration
}

func (o *WaitOpts) timeout() time.Duration {
	if o == nil || o.Timeout <= 0 {
		return 10 * time.Second
	}
	return o.Timeout
}

// pollEvery is how often a wait reads the cursor rows again.
const pollEvery = 10 * time.Millisecond

// WaitCaughtUp waits until the durable position of process has reached the last row of its source: every
// row committed before the call, and any committed while it waits, has been handled and its position
// committed. For a partitioned process (processor.NewPartitioned) it waits until every partition has.
// It reads the cursor rows and the source from db and takes no lock, so it does not disturb the processor.
//
// It fails the test after opts.Timeout, saying where the process stands (its position and how many rows
// are left, the record it is halted on, or that it has not run yet). Call it from the test's goroutine.
//
// A row whose transaction is still open when WaitCaughtUp returns is not counted; neither is a row the
// processor has not yet read because an open transaction holds its horizon back: WaitCaughtUp waits for
// the processor to read it, like the processor waits for the transaction.
func WaitCaughtUp(t testing.TB, db *DB, process string, opts *WaitOpts) {
	t.Helper()
	wait(t, db, process, "catch up", opts, func(ctx context.Context, streams []cursor.Info) (bool, string, error) {
		var states []string
		caughtUp := true
		for _, in := range streams {
			if in.Source.Table == "" {
				caughtUp = false
				states = append(states, name(in, process)+"has not run yet")
				continue
			}
			m := in
			if err := m.Measure(ctx, db.Pool); err != nil {
				return false, "", err
			}
			lag := *m.Lag
			if lag.Rows > 0 || in.Halt != nil {
				caughtUp = false
				states = append(states, name(in, process)+describe(in, lag))
			}
		}
		return caughtUp, strings.Join(states, "; "), nil
	})
}

// WaitHalted waits until process is halted on a failing record (refused by the sink, or failing for
// longer than the processor's HaltAfter; a stream only retrying a record is not halted: see WaitFailing)
// and returns the halt: the record, the handler's last error and how many attempts failed so far. For a
// partitioned process it returns the halt of the first partition found halted. It fails the test after
// opts.Timeout, saying where the process stands. Call it from the test's goroutine.
func WaitHalted(t testing.TB, db *DB, process string, opts *WaitOpts) inordertype.Halt {
	t.Helper()
	return waitFailure(t, db, process, "halt", opts, func(h *inordertype.Halt) bool { return !h.Retrying() })
}

// WaitSinkUnavailable waits until process waits for its sink: a record fails with a refusal every record
// would meet (handlers.Unavailable), so that nothing halts or parks for it. It returns the failure as
// WaitHalted does; its Unavailable says what to check.
func WaitSinkUnavailable(t testing.TB, db *DB, process string, opts *WaitOpts) inordertype.Halt {
	t.Helper()
	return waitFailure(t, db, process, "sink outage", opts, func(h *inordertype.Halt) bool { return h.SinkUnavailable() })
}

// WaitFailing waits until a record of process fails, whether the stream is retrying it or halted on it,
// and returns the failure as WaitHalted does.
func WaitFailing(t testing.TB, db *DB, process string, opts *WaitOpts) inordertype.Halt {
	t.Helper()
	return waitFailure(t, db, process, "failing record", opts, func(*inordertype.Halt) bool { return true })
}

func waitFailure(t testing.TB, db *DB, process, what string, opts *WaitOpts, enough func(*inordertype.Halt) bool) inordertype.Halt {
	t.Helper()
	var halt inordertype.Halt
	wait(t, db, process, what, opts, func(ctx context.Context, streams []cursor.Info) (bool, string, error) {
		var states []string
		for _, in := range streams {
			if in.Halt != nil && enough(in.Halt) {
				halt = *in.Halt
				return true, "", nil
			}
			state := name(in, process) + "position " + in.Position.String()
			if in.Halt != nil {
				state += fmt.Sprintf(", retrying record %s (%d attempts)", in.Halt.RecordID, in.Halt.Attempts)
			}
			states = append(states, state)
		}
		return false, strings.Join(states, "; "), nil
	})
	return halt
}

// wait polls the cursor rows of process until done says so, and fails the test after the timeout with
// what done last said about the process, or the last error.
func wait(t testing.TB, db *DB, process, what string, opts *WaitOpts,
	done func(ctx context.Context, streams []cursor.Info) (bool, string, error)) {
	t.Helper()
	timeout := opts.timeout()
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(pollEvery)
	defer tick.Stop()
	state := "it has no cursor row: it never started"
	for {
		// Every poll runs to its end, however short the timeout, so that the failure says what a whole
		// poll saw; the deadline is looked at between polls.
		ok, now, err := poll(db, process, done)
		switch {
		case err != nil:
			state = "last error: " + err.Error()
		case ok:
			return
		case now != "":
			state = now
		}
		if !time.Now().Before(deadline) {
			t.Fatalf("processortest: process %q did not %s within %s: %s", process, what, timeout, state)
			return
		}
		<-tick.C
	}
}

// poll runs one check under a bound of its own; now is empty when the process has no cursor row yet.
func poll(db *DB, process string, done func(ctx context.Context, streams []cursor.Info) (bool, string, error)) (bool, string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	streams, err := streamsOf(ctx, db, process)
	if err != nil || len(streams) == 0 {
		return false, "", err
	}
	return done(ctx, streams)
}

// streamsOf returns the cursor rows of process's streams: its own, or for a partitioned process those of
// its partitions (fewer than it has when some are not registered yet). None means no cursor row yet.
func streamsOf(ctx context.Context, db *DB, process string) ([]cursor.Info, error) {
	procs, err := cursor.Read(ctx, db.Pool, cursor.ReadOpts{Process: process})
	if err != nil || len(procs) == 0 {
		return nil, err
	}
	p := procs[0]
	if len(p.Unregistered) > 0 {
		// A partition without a row yet has not run: the process cannot be caught up, nor halted there.
		return append(p.Streams, cursor.Info{Process: fmt.Sprintf("%s (%d of %d partitions registered)",
			process, len(p.Streams), p.Info.Partitions)}), nil
	}
	return p.Streams, nil
}

// name prefixes a state with the stream's name when it is a partition of process.
func name(in cursor.Info, process string) string {
	if in.Process == process {
		return ""
	}
	return in.Process + ": "
}

// describe says where a stream stands for a failure message.
func describe(in cursor.Info, lag cursor.Lag) string {
	s := fmt.Sprintf("position %s, %d rows behind", in.Position, lag.Rows)
	if lag.Capped {
		s = fmt.Sprintf("position %s, at least %d rows behind", in.Position, lag.Rows)
	}
	if h := in.Halt; h != nil {
		what := "halted on"
		if h.Retrying() {
			what = "retrying"
		}
		s += fmt.Sprintf(", %s record %s after %d attempts: %s", what, h.RecordID, h.Attempts, h.Error)
	}
	if in.Paused {
		s += ", paused"
	}
	return s
}
