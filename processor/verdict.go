package processor

import (
	"time"

	"github.com/inorder-dev/inorder/handlers"
)

// verdict is everything decided about a handler's failure, once, when its result is in: the error, whether
// the sink refused the record for good, the status it answered, what to check when the failure is the
// sink's outage rather than the record's, and the delay the sink asked for. The record's fate carries it to
// whatever applies the fate (the halt state the store records, a parked record, the log), so that none of
// them looks at the error again.
type verdict struct {
	err         error
	permanent   bool
	status      int
	unavailable string
	retryAfter  time.Duration
}

// judge builds the verdict on err; unavailable is what to check at the sink when err is the sink's outage
// (executor.sinkCheck), "" otherwise.
func judge(err error, unavailable string) verdict {
	if err == nil {
		return verdict{}
	}
	v := verdict{err: err, permanent: handlers.IsPermanent(err), unavailable: unavailable}
	v.status, _ = handlers.StatusOf(err)
	v.retryAfter, _ = handlers.RetryAfterOf(err)
	return v
}
