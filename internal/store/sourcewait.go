package store

import (
	"context"
	"fmt"
)

// SetSourceWait records in the open transaction that the stream waits for its source table to fit again
// after a migration (a column it needs dropped or renamed), saying what and what to do; an empty wait
// clears it. It is kept in the row's halted_error while no record is failing (halted_record_id NULL), which
// no failing record's state uses then: status shows it (CursorRow.SourceWait), and a record's failure,
// which says more, takes its place.
func (r *Repository) SetSourceWait(ctx context.Context, wait string) error {
	ctx, cancel := r.bounded(ctx)
	defer cancel()
	if r.tx == nil {
		return fmt.Errorf("set source wait of cursor %q: %w", r.name, ErrNotLocked)
	}
	var w any
	if wait != "" {
		w = clip(wait)
	}
	tag, err := r.tx.Exec(ctx, `
		UPDATE inorder.cursor SET halted_error = $2
		WHERE process_name = $1 AND halted_record_id IS NULL AND halted_error IS DISTINCT FROM $2`, r.name, w)
	if err != nil {
		return fmt.Errorf("set source wait of cursor %q: %w", r.name, err)
	}
	r.dirty = r.dirty || tag.RowsAffected() > 0
	return nil
}
