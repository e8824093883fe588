package processortest

import (
	"context"
	"testing"
	"time"

	"github.com/inorder-dev/inorder/internal/store"
)

// ForgetOnCleanup removes the cursor rows of process from db when the test ends: its own row, the rows of
// its partitions when it is partitioned, and its audit entries, so that a database shared by several
// tests does not collect the cursors of processes that no longer run. A test that uses the same process
// name again later in the same database starts it from scratch.
//
// Call it before Start. Cleanups run last in, first out, so the processor then stops before its rows are
// removed; a process still running when they are to be removed fails the test, and its rows stay.
func ForgetOnCleanup(t testing.TB, db *DB, process string) {
	t.Helper()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		streams, err := streamsOf(ctx, db, process)
		if err != nil {
			t.Errorf("processortest: forget process %q: %v", process, err)
			return
		}
		for _, in := range streams {
			if in.Locked {
				t.Errorf("processortest: forget process %q: %s still runs (held by %s); call ForgetOnCleanup "+
					"before Start, so that the processor stops first", process, in.Process, in.Holder)
				return
			}
		}
		if err := store.Purge(ctx, db.Pool, process); err != nil {
			t.Errorf("processortest: forget process %q: %v", process, err)
		}
	})
}
