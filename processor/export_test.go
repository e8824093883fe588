package processor

import "time"

// SetLateAfter sets how long after its delivery a span is counted for late rows, for the processors made
// until the function returned is called, for a test that cannot wait the default.
func SetLateAfter(d time.Duration) (undo func()) {
	lateAfterForTests.Store(int64(d))
	return func() { lateAfterForTests.Store(0) }
}
