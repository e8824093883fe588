// Package testrun runs something that works until its context is done (a processor's Run, an example's
// run) in the background of a test, and waits for what it does (Eventually).
package testrun

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// StopTimeout bounds how long stop waits for run to return after its context was cancelled.
const StopTimeout = 30 * time.Second

// Start calls run in a goroutine with a context that stop cancels, and returns stop, which waits for run
// to return and gives back its result. stop is idempotent; the test's cleanup calls it too, and reports
// an error from run there (unless the test already took the result).
func Start(t testing.TB, run func(ctx context.Context) error) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx) }()
	var once sync.Once
	var result error
	taken := false
	stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case result = <-done:
			case <-time.After(StopTimeout):
				result = fmt.Errorf("did not return within %s of being stopped", StopTimeout)
			}
		})
		taken = true
		return result
	}
	t.Cleanup(func() {
		wasTaken := taken
		if err := stop(); err != nil && !wasTaken {
			t.Errorf("background run: %v", err)
		}
	})
	return stop
}

// Buffer collects what something running in the background writes (a log, a child process's output)
// while the test reads it.
type Buffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

// String returns everything written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// EventuallyTimeout bounds Eventually.
const EventuallyTimeout = 20 * time.Second

// eventuallyTick is how often Eventually checks its condition.
const eventuallyTick = 5 * time.Millisecond

// Eventually waits until cond returns true, checking it every 5ms, and fails the test with "waiting for
// <what>" if it has not within EventuallyTimeout. It is the one wait of the tests; a package whose waits
// take longer binds EventuallyWithin.
func Eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	eventually(t, what, cond, EventuallyTimeout)
}

// EventuallyWithin returns Eventually bounded by timeout rather than EventuallyTimeout.
func EventuallyWithin(timeout time.Duration) func(t testing.TB, what string, cond func() bool) {
	return func(t testing.TB, what string, cond func() bool) {
		t.Helper()
		eventually(t, what, cond, timeout)
	}
}

// eventually is Eventually within timeout. A wait that runs out is also said on the test binary's standard
// error at once, a line of its own: a parallel test's log is printed only when it ends, often thousands of
// lines long, and a CI log cut short keeps its first and last lines, not the failure amid them.
func eventually(t testing.TB, what string, cond func() bool, timeout time.Duration) {
	t.Helper()
	if !assert.Eventually(t, cond, timeout, eventuallyTick, "waiting for %s", what) {
		fmt.Fprintf(os.Stderr, "%s: still waiting for %s after %s\n", t.Name(), what, timeout)
		t.FailNow()
	}
}
