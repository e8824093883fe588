package processortest

import (
	"context"
	"sync"

	"github.com/inorder-dev/inorder/handlers"
)

// Recorder is a handlers.Handler that keeps the records it accepts, in the order it accepted them, for a
// test to compare with what it expects. The zero value is ready to use; all its methods are safe to call
// from any goroutine while a processor delivers to it.
//
// Since a processor hands a record to its handler again after a failure, or after a crash before the
// position was durable, Records is what the sink received, redeliveries included: a test that wants each
// record once asserts that it got each once.
type Recorder[T any] struct {
	mu       sync.Mutex
	records  []handlers.Record[T]
	fail     map[string]error
	attempts map[string]int
}

// Handle records rec and returns nil, or, for a record that Fail named, counts the attempt and returns
// the error without recording the record.
func (r *Recorder[T]) Handle(_ context.Context, rec *handlers.Record[T]) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.attempts == nil {
		r.attempts = map[string]int{}
	}
	r.attempts[rec.ID]++
	if err := r.fail[rec.ID]; err != nil {
		return err
	}
	r.records = append(r.records, *rec)
	return nil
}

// Fail makes Handle return err for the record whose ID is id, every time, until Fail is called again for
// it with a nil err. The processor retries the record with backoff (WaitFailing sees it fail); once the
// failure is lifted, the next retry goes through. Wrap err with handlers.Permanent to play a sink that
// rejects the record itself: the stream is then halted on it at once (WaitHalted sees the halt).
func (r *Recorder[T]) Fail(id string, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err == nil {
		delete(r.fail, id)
		return
	}
	if r.fail == nil {
		r.fail = map[string]error{}
	}
	r.fail[id] = err
}

// Records returns a copy of the records accepted so far, in order.
func (r *Recorder[T]) Records() []handlers.Record[T] {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]handlers.Record[T], len(r.records))
	copy(out, r.records)
	return out
}

// IDs returns the IDs of the records accepted so far, in order.
func (r *Recorder[T]) IDs() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]string, len(r.records))
	for i, rec := range r.records {
		out[i] = rec.ID
	}
	return out
}

// Values returns the values of the records accepted so far, in order.
func (r *Recorder[T]) Values() []T {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]T, len(r.records))
	for i, rec := range r.records {
		out[i] = rec.Value
	}
	return out
}

// Len returns how many records were accepted so far.
func (r *Recorder[T]) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.records)
}

// Attempts returns how many times Handle was called for the record whose ID is id, the failed calls
// included.
func (r *Recorder[T]) Attempts(id string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.attempts[id]
}

var _ handlers.Handler[struct{}] = (*Recorder[struct{}])(nil)
