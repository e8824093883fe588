package handlers

import (
	"errors"
	"fmt"
	"time"
)

// permanentError is what Permanent makes of an error.
type permanentError struct{ err error }

func (e *permanentError) Error() string { return "permanent: " + e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

// Permanent marks err as a failure that will not go away by retrying soon: the sink rejected the record
// itself (an HTTP 4xx, an oversized message). The processor halts on the record as for any failure, but
// retries it at the longest backoff only, leaving it for an operator to fix the sink or skip the record.
// Its message is err's after "permanent: ", and it wraps err. Permanent(nil) is nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &permanentError{err: err}
}

// IsPermanent reports whether err is, or wraps, an error made by Permanent.
func IsPermanent(err error) bool {
	var p *permanentError
	return errors.As(err, &p)
}

// retryAfterError is what RetryAfter makes of an error.
type retryAfterError struct {
	err   error
	after time.Duration
}

func (e *retryAfterError) Error() string {
	return fmt.Sprintf("%s (retry after %s)", e.err.Error(), e.after)
}
func (e *retryAfterError) Unwrap() error { return e.err }

// RetryAfter wraps err with the sink's own word on when to try again (an HTTP Retry-After header): the
// processor waits at least after, capped at its longest backoff, before the next attempt. Its message is
// err's with " (retry after <after>)". RetryAfter(nil, ...) is nil.
func RetryAfter(err error, after time.Duration) error {
	if err == nil {
		return nil
	}
	return &retryAfterError{err: err, after: after}
}

// RetryAfterOf returns the delay RetryAfter put in err's chain, if any.
func RetryAfterOf(err error) (time.Duration, bool) {
	var r *retryAfterError
	if errors.As(err, &r) {
		return r.after, true
	}
	return 0, false
}

// StatusOf returns the sink's own status code carried by err (the HTTP status of a webhook response),
// found by an error in its chain with a SinkStatus method, as handlers/webhook's StatusError has. The
// processor stores it in the halt state.
func StatusOf(err error) (int, bool) {
	var s interface{ SinkStatus() int }
	if errors.As(err, &s) {
		return s.SinkStatus(), true
	}
	return 0, false
}

// UnavailableError marks a refusal that is the sink's, not the record's: every record would meet it (a
// wrong URL, a revoked or missing key, a topic that does not exist, a name that does not resolve, a TLS
// failure, a refused connection, a service that says it is unavailable). The processor treats it as an
// outage of the sink: it waits and retries with backoff for as long as the outage lasts, and flows again
// by itself once the sink accepts; it never halts the stream on it, never parks a key for it, and never
// suggests skipping the record. Check says what an operator should look at ("the URL", "the API key").
type UnavailableError struct {
	Err   error
	Check string
}

func (e *UnavailableError) Error() string { return e.Err.Error() }
func (e *UnavailableError) Unwrap() error { return e.Err }

// Unavailable wraps err as an UnavailableError, check saying what to look at.
func Unavailable(err error, check string) error {
	if err == nil {
		return nil
	}
	return &UnavailableError{Err: err, Check: check}
}

// UnavailableOf returns the UnavailableError in err's chain, if any.
func UnavailableOf(err error) (*UnavailableError, bool) {
	var u *UnavailableError
	if errors.As(err, &u) {
		return u, true
	}
	return nil, false
}
