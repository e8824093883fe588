package store

import (
	"context"
	"fmt"
)

// SetSourceWait records in the open transaction that the stream waits for its source table to fit again
// after a migration (a column it needs dropped or renamed), saying what and what to do; an empty wait
// clears it. Status shows it (CursorRow.SourceWait); it is kept in inorder.source_state (migration 14).
func (r *Repository) SetSourceWait(ctx context.Context, wait string) error {
	ctx, cancel := r.bounded(ctx)
	defer cancel()
	if r.tx == nil {
		return fmt.Errorf("set source wait of cursor %q: %w", r.name, ErrNotLocked)
	}
	var w any
	if wait != "" {
		w = ClipError(wait)
	}
	tag, err := r.tx.Exec(ctx, `
		INSERT INTO inorder.source_state AS s (process_name, wait) VALUES ($1, $2)
		ON CONFLICT (process_name) DO UPDATE SET wait = excluded.wait WHERE s.wait IS DISTINCT FROM excluded.wait`,
		r.name, w)
	if err != nil {
		return fmt.Errorf("set source wait of cursor %q: %w", r.name, err)
	}
	r.dirty = r.dirty || tag.RowsAffected() > 0
	return nil
}
