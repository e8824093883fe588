package processortest

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Runner is what Start runs: a *processor.Processor, a *processor.Partitioned, or any function that works
// until its context is done (through RunFunc), such as a service's own run function that builds and runs
// its processors.
type Runner interface {
	// Run works until ctx is done and returns nil after a clean stop, or returns an error that ends it.
	Run(ctx context.Context) error
}

// RunFunc adapts a function to a Runner.
type RunFunc func(ctx context.Context) error

// Run calls f.
func (f RunFunc) Run(ctx context.Context) error { return f(ctx) }

// StartOpts configures Start. The zero value, like a nil *StartOpts, uses the defaults given on each field.
type StartOpts struct {
	// Name names the runner in failure messages. Empty means the runner's Name() when it has one (a
	// processor's process name), else "runner".
	Name string
	// StopTimeout bounds how long Stop, and the test's cleanup, wait for Run to return once its context
	// is cancelled. A processor lets the record in flight finish first, up to its ShutdownTimeout, so keep
	// this above that. Zero means 30s.
	StopTimeout time.Duration
}

// Running is a Runner that Start runs in the background.
type Running struct {
	t       testing.TB
	name    string
	timeout time.Duration
	cancel  context.CancelFunc
	done    chan struct{}
	err     error // what Run returned; set before done closes

	stopping atomic.Bool // Stop was called: Run returning is expected

	mu      sync.Mutex // held by Stop while it waits, so that concurrent calls share one result
	stopped bool       // Stop has a result
	result  error
}

// Start calls r.Run in a goroutine and keeps it running until the test ends; then the test's cleanup
// cancels Run's context and waits for Run to return, within StartOpts.StopTimeout. Start does not wait
// for the runner to do anything: wait for what it should do with WaitCaughtUp, WaitHalted or the
// test's own condition.
//
// The test fails if Run returns an error: at once, with the error, when Run returns before it was asked
// to stop, and otherwise at cleanup, unless the test called Stop and took the error itself. Start is for
// runs expected to succeed; to check the error of a run that should fail, call Run directly.
//
// Cleanups run last in, first out, so a runner started after NewDB stops before its database goes away.
func Start(t testing.TB, r Runner, opts *StartOpts) *Running {
	t.Helper()
	if opts == nil {
		opts = &StartOpts{}
	}
	run := &Running{t: t, name: opts.Name, timeout: opts.StopTimeout, done: make(chan struct{})}
	if run.name == "" {
		run.name = "runner"
		if n, ok := r.(interface{ Name() string }); ok {
			run.name = fmt.Sprintf("process %q", n.Name())
		}
	}
	if run.timeout <= 0 {
		run.timeout = 30 * time.Second
	}
	ctx, cancel := context.WithCancel(context.Background())
	run.cancel = cancel
	go func() {
		defer close(run.done)
		run.err = r.Run(ctx)
		if !run.stopping.Load() && run.err != nil {
			// The test's cleanup waits for done, so the test has not ended yet: Errorf is still allowed.
			t.Errorf("processortest: %s: Run returned before it was stopped: %v", run.name, run.err)
		}
	}()
	t.Cleanup(func() {
		run.mu.Lock()
		taken := run.stopped
		run.mu.Unlock()
		if err := run.Stop(); err != nil && !taken {
			t.Errorf("processortest: %v", err)
		}
	})
	return run
}

// Stop cancels Run's context, waits for Run to return (within StartOpts.StopTimeout) and returns what it
// returned, or an error saying that it did not return in time. It may be called more than once, and
// from any goroutine; every call returns the same result. An error that Run returned before it was asked
// to stop has failed the test already, and Stop returns it too.
func (r *Running) Stop() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stopped {
		return r.result
	}
	r.stopping.Store(true)
	r.cancel()
	select {
	case <-r.done:
		if r.err != nil {
			r.result = fmt.Errorf("%s: %w", r.name, r.err)
		}
	case <-time.After(r.timeout):
		r.result = fmt.Errorf("%s: Run did not return within %s of being stopped", r.name, r.timeout)
	}
	r.stopped = true
	return r.result
}

// Done is closed when Run has returned, whether it was stopped or not.
func (r *Running) Done() <-chan struct{} { return r.done }
