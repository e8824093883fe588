// Package stdout is the simplest sink: one JSON object per record on a writer, usually standard output,
// for shell pipelines and scripts.
//
// # Format
//
// Each record is one line, and scripts may rely on it:
//
//	{"process":"<name>","record":{<column>:<value>,...}}
//
// Columns appear in the order they were selected; ids, numbers, booleans and timestamps are natural JSON
// values and json/jsonb columns are embedded as JSON.
package stdout

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sync"

	"github.com/inorder-dev/inorder/handlers"
)

// Handler writes records as JSON lines. It buffers lines and is a handlers.Flusher: the processor flushes
// it before any position that covers them is made durable, so a line is never behind the position.
type Handler[T any] struct {
	mu sync.Mutex
	w  *bufio.Writer
	// line is the scratch buffer a handlers.Row's line is built in; prefix is the line's start for the
	// process named process, encoded once.
	line            []byte
	process, prefix string
}

// New returns a handler writing to w.
func New[T any](w io.Writer) *Handler[T] {
	return &Handler[T]{w: bufio.NewWriterSize(w, 64<<10)}
}

type line[T any] struct {
	Process string `json:"process"`
	Record  T      `json:"record"`
}

// Handle writes rec as one line. A record that cannot be encoded (a value JSON has no form for) is a
// permanent failure: the stream halts on it with the column named.
func (h *Handler[T]) Handle(ctx context.Context, rec *handlers.Record[T]) error {
	if row, ok := any(rec.Value).(handlers.Row); ok {
		return h.handleRow(rec.ID, rec.Process, row)
	}
	b, err := json.Marshal(line[T]{Process: rec.Process, Record: rec.Value})
	if err != nil {
		return handlers.Permanent(fmt.Errorf("encode record %s as JSON: %w", rec.ID, err))
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, err := h.w.Write(append(b, '\n')); err != nil {
		return fmt.Errorf("write record %s: %w", rec.ID, err)
	}
	return nil
}

// Flush writes out every buffered line.
func (h *Handler[T]) Flush(context.Context) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.w.Flush()
}

// keepLine is the largest line buffer kept from one record to the next.
const keepLine = 1 << 20

// handleRow writes a handlers.Row's line, the same bytes as json.Marshal of the line gives, without
// reflection: the row appends its own JSON (handlers.Row.AppendJSON).
func (h *Handler[T]) handleRow(id, process string, row handlers.Row) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.prefix == "" || process != h.process {
		p, _ := json.Marshal(process) // a string always encodes
		h.process, h.prefix = process, `{"process":`+string(p)+`,"record":`
	}
	b, err := row.AppendJSON(append(h.line[:0], h.prefix...))
	if err != nil {
		return handlers.Permanent(fmt.Errorf("encode record %s as JSON: json: error calling MarshalJSON for type handlers.Row: %w", id, err))
	}
	h.line = append(b, '}', '\n')
	_, err = h.w.Write(h.line)
	if cap(h.line) > keepLine {
		h.line = nil // a big record's line is not kept for the small ones after it
	}
	if err != nil {
		return fmt.Errorf("write record %s: %w", id, err)
	}
	return nil
}
