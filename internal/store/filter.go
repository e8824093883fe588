package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/inorder-dev/inorder/internal/pooler"
)

// RecordedFilter reads the filter the process's cursor row recorded when it last ran: ran is false when
// the row records no source (a process that never ran, or none at all), and filter is "" for a process
// that ran without one.
func (r *Repository) RecordedFilter(ctx context.Context) (filter string, ran bool, err error) {
	ctx, cancel := r.bounded(ctx)
	defer cancel()
	if err := r.attach(ctx); err != nil {
		return "", false, fmt.Errorf("cursor %q: %w", r.name, err)
	}
	err = r.conn.QueryRow(ctx, `SELECT coalesce(s.filter, ''), c.source_table IS NOT NULL
		FROM inorder.cursor c LEFT JOIN inorder.source_state s USING (process_name)
		WHERE c.process_name = $1`, r.name).Scan(&filter, &ran)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("read the filter of cursor %q: %w", r.name, pooler.Explain(err))
	}
	return filter, ran, nil
}
