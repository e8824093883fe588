package processortest_test

import (
	"fmt"
	"runtime"
	"slices"
	"sync"
	"testing"
)

// fakeT stands in for a test's testing.TB where a test checks how the kit fails: it records Errorf and
// Fatalf instead of failing the real test, ends the goroutine on Fatalf as testing.T does, and runs its
// cleanups when the real test calls cleanup. Only the methods the kit uses are implemented; the embedded
// nil TB makes any other call panic.
type fakeT struct {
	testing.TB
	mu       sync.Mutex
	errors   []string
	fatal    string
	cleanups []func()
}

func (f *fakeT) Helper() {}

func (f *fakeT) Errorf(format string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.errors = append(f.errors, fmt.Sprintf(format, args...))
}

func (f *fakeT) Fatalf(format string, args ...any) {
	f.mu.Lock()
	f.fatal = fmt.Sprintf(format, args...)
	f.mu.Unlock()
	runtime.Goexit()
}

func (f *fakeT) Cleanup(fn func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.cleanups = append(f.cleanups, fn)
}

// cleanup runs the cleanups, last in first out, as testing.T does at the end of a test.
func (f *fakeT) cleanup() {
	f.mu.Lock()
	fns := slices.Clone(f.cleanups)
	f.cleanups = nil
	f.mu.Unlock()
	for i := len(fns) - 1; i >= 0; i-- {
		fns[i]()
	}
}

func (f *fakeT) Errors() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.errors)
}

// fatalMsg returns the message of the Fatalf call, if any.
func (f *fakeT) fatalMsg() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.fatal
}

// inGoroutine runs fn on a goroutine of its own, so that a Fatalf ending it does not end the test, and
// waits for it.
func inGoroutine(fn func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn()
	}()
	<-done
}

// exampleT stands in for the *testing.T that a test has and an Example function does not: it panics
// where a test would fail and runs the cleanups when the example calls done.
type exampleT struct {
	testing.TB
	cleanups []func()
}

func (e *exampleT) Helper()                           {}
func (e *exampleT) Errorf(format string, args ...any) { panic(fmt.Sprintf(format, args...)) }
func (e *exampleT) Fatalf(format string, args ...any) { panic(fmt.Sprintf(format, args...)) }
func (e *exampleT) Cleanup(fn func())                 { e.cleanups = append(e.cleanups, fn) }

func (e *exampleT) done() {
	for i := len(e.cleanups) - 1; i >= 0; i-- {
		e.cleanups[i]()
	}
}
