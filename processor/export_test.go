package processor

import "time"

// SetLateAfter sets how long after its delivery a span is counted for late rows, for a test that cannot
// wait the default; the function returned puts it back.
func SetLateAfter(d time.Duration) (undo func()) {
	was := lateAfter
	lateAfter = d
	return func() { lateAfter = was }
}
