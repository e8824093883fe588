package source

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inorder-dev/inorder/inordertype"
)

// ErrNoRecord is returned by Locate when the source has no row with the id.
var ErrNoRecord = errors.New("no such record")

// Located is a source record's place in the stream, for operator actions.
type Located struct {
	// Record is the record's own position: a position there is just past it (what a skip sets).
	Record inordertype.Position
	// Before is the position just before it: a position there delivers it next (what a rewind sets).
	Before inordertype.Position
	// Ahead reports whether rows lie between the current position and the record, so that moving the
	// position to Before would skip them.
	Ahead bool
}

// Locate finds record id in t and places it relative to current.
func (t *Table) Locate(ctx context.Context, q Querier, id string, current inordertype.Position) (Located, error) {
	ca, idc := t.AtExpr(""), quote(t.Spec.IDColumn)
	var loc Located
	var at time.Time
	sql := fmt.Sprintf(`SELECT %[1]s::timestamptz, %[2]s::text FROM %[3]s WHERE %[2]s = $1::text::%[4]s`, ca, idc, t.Ident, t.IDCast)
	if err := q.QueryRow(ctx, sql, id).Scan(&at, &loc.Record.ID); errors.Is(err, pgx.ErrNoRows) {
		return Located{}, fmt.Errorf("record %s in %s: %w", id, t.Qualified, ErrNoRecord)
	} else if err != nil {
		return Located{}, fmt.Errorf("find record %s in %s: %w", id, t.Qualified, err)
	}
	loc.Record.CreatedAt = at.UTC()
	var err error
	if loc.Before, err = t.Before(ctx, q, loc.Record); err != nil {
		return Located{}, err
	}
	after, args := t.After(current, "", 3)
	sql = fmt.Sprintf(`SELECT EXISTS (SELECT 1 FROM %[1]s WHERE %[2]s AND (%[3]s, %[4]s) < ($1, $2::text::%[5]s))`,
		t.Ident, after, ca, idc, t.IDCast)
	if err := q.QueryRow(ctx, sql, append([]any{loc.Record.CreatedAt, loc.Record.ID}, args...)...).Scan(&loc.Ahead); err != nil {
		return Located{}, fmt.Errorf("place record %s in %s: %w", id, t.Qualified, err)
	}
	return loc, nil
}
