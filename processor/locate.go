package processor

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inorder-dev/inorder/cursor"
)

// ErrNoRecord is returned by Locate when the source has no row with the id.
var ErrNoRecord = errors.New("no such record")

// Located is a source record's place in the stream, for operator actions.
type Located struct {
	// Record is the record's own position: a position there is just past it (what Skip sets).
	Record cursor.Position
	// Before is the position just before it: a position there delivers it next (what Rewind sets).
	Before cursor.Position
	// Ahead reports whether rows lie between the current position and the record, so that moving the
	// position to Before would skip them.
	Ahead bool
}

// Locate finds record id in src and places it relative to current.
func Locate(ctx context.Context, conn *pgx.Conn, src Source, id string, current cursor.Position) (Located, error) {
	t, err := inspect(ctx, conn, src)
	if err != nil {
		return Located{}, err
	}
	ca := pgx.Identifier{t.src.CreatedAtColumn}.Sanitize()
	idc := pgx.Identifier{t.src.IDColumn}.Sanitize()
	var loc Located
	var at time.Time
	q := fmt.Sprintf(`SELECT %[1]s::timestamptz, %[2]s::text FROM %[3]s WHERE %[2]s = $1::text::%[4]s`, ca, idc, t.ident, t.idCast)
	if err := conn.QueryRow(ctx, q, id).Scan(&at, &loc.Record.ID); errors.Is(err, pgx.ErrNoRows) {
		return Located{}, fmt.Errorf("record %s in %s: %w", id, t.qualified, ErrNoRecord)
	} else if err != nil {
		return Located{}, fmt.Errorf("find record %s in %s: %w", id, t.qualified, err)
	}
	loc.Record.CreatedAt = at.UTC()
	var prevAt *time.Time
	var prevID *string
	q = fmt.Sprintf(`SELECT %[1]s::timestamptz, %[2]s::text FROM %[3]s WHERE (%[1]s, %[2]s) < ($1, $2::text::%[4]s)
		ORDER BY %[1]s DESC, %[2]s DESC LIMIT 1`, ca, idc, t.ident, t.idCast)
	if err := conn.QueryRow(ctx, q, loc.Record.CreatedAt, loc.Record.ID).Scan(&prevAt, &prevID); err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return Located{}, fmt.Errorf("find the record before %s in %s: %w", id, t.qualified, err)
	}
	if prevAt != nil {
		loc.Before = cursor.Position{CreatedAt: prevAt.UTC(), ID: *prevID}
	}
	after, args := "true", []any{loc.Record.CreatedAt, loc.Record.ID}
	switch {
	case current.IsBeginning():
	case current.ID == "":
		after, args = ca+" > $3", append(args, current.CreatedAt)
	default:
		after = fmt.Sprintf("(%s, %s) > ($3, $4::text::%s)", ca, idc, t.idCast)
		args = append(args, current.CreatedAt, current.ID)
	}
	q = fmt.Sprintf(`SELECT EXISTS (SELECT 1 FROM %[1]s WHERE %[2]s AND (%[3]s, %[4]s) < ($1, $2::text::%[5]s))`,
		t.ident, after, ca, idc, t.idCast)
	if err := conn.QueryRow(ctx, q, args...).Scan(&loc.Ahead); err != nil {
		return Located{}, fmt.Errorf("place record %s in %s: %w", id, t.qualified, err)
	}
	return loc, nil
}
