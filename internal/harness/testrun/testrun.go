// Package testrun runs something that works until its context is done (a processor's Run, an example's
// run) in the background of a test.
package testrun

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
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
