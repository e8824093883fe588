package processor

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inorder-dev/inorder/cursor"
)

// Lag is how far a process is behind its source.
type Lag struct {
	// Rows counts the rows after the position, up to LagCountCap; Capped says the count stopped there.
	Rows   int64
	Capped bool
	// Oldest is the created_at of the first row after the position; zero when there is none.
	Oldest time.Time
	// Now is the database's clock when Lag was measured, to age Oldest against.
	Now time.Time
}

// LagCountCap bounds the rows Behind counts, so that status stays cheap on a stream far behind.
const LagCountCap = 1_000_000

// Behind measures the rows of src after pos. It reads the committed rows now, horizon or not.
func Behind(ctx context.Context, conn *pgx.Conn, src Source, pos cursor.Position) (Lag, error) {
	t, err := inspect(ctx, conn, src)
	if err != nil {
		return Lag{}, err
	}
	ca := pgx.Identifier{t.src.CreatedAtColumn}.Sanitize()
	id := pgx.Identifier{t.src.IDColumn}.Sanitize()
	where := "true"
	args := []any{}
	switch {
	case pos.IsBeginning():
	case pos.ID == "":
		where, args = ca+" > $1", []any{pos.CreatedAt}
	default:
		where, args = fmt.Sprintf("(%s, %s) > ($1, $2::text::%s)", ca, id, t.idCast), []any{pos.CreatedAt, pos.ID}
	}
	var lag Lag
	var oldest *time.Time
	q := fmt.Sprintf(`SELECT clock_timestamp(),
		(SELECT count(*) FROM (SELECT 1 FROM %[1]s WHERE %[2]s LIMIT %[3]d) AS s),
		(SELECT %[4]s::timestamptz FROM %[1]s WHERE %[2]s ORDER BY %[4]s, %[5]s LIMIT 1)`,
		t.ident, where, LagCountCap+1, ca, id)
	if err := conn.QueryRow(ctx, q, args...).Scan(&lag.Now, &lag.Rows, &oldest); err != nil {
		return Lag{}, fmt.Errorf("measure lag of %s: %w", t.qualified, err)
	}
	if lag.Rows > LagCountCap {
		lag.Rows, lag.Capped = LagCountCap, true
	}
	if oldest != nil {
		lag.Oldest = oldest.UTC()
	}
	return lag, nil
}
