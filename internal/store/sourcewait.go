package store

import (
	"context"
	"fmt"
)

// SetSourceWait records in the open transaction that the stream waits for its source table to fit again
// after a migration (a column it needs dropped or renamed), saying what and what to do; an empty wait
// clears it. Status shows it (CursorRow.SourceWait) in the row's source_wait (migration 14).
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
		UPDATE inorder.cursor SET source_wait = $2
		WHERE process_name = $1 AND source_wait IS DISTINCT FROM $2`, r.name, w)
	if err != nil {
		return fmt.Errorf("set source wait of cursor %q: %w", r.name, err)
	}
	r.dirty = r.dirty || tag.RowsAffected() > 0
	return nil
}
