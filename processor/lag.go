package processor

import (
	"context"
	"errors"
	"fmt"
	"sort"
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
	if t.part != nil {
		where += fmt.Sprintf(" AND %s = %d", t.partitionExpr(""), t.part.Index)
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

// RecordedSource turns the source a cursor row records (what its process last ran against) into a Source,
// partition included, for measuring lag or locating records from outside the process.
func RecordedSource(s cursor.Source) Source {
	src := Source{Table: s.Table, IDColumn: s.IDColumn, CreatedAtColumn: s.CreatedAtColumn, KeyColumn: s.KeyColumn}
	if s.Partitions > 0 {
		src.Partition = &Partition{Index: s.Partition, Count: s.Partitions}
	}
	return src
}

// Tail is the position of the last row of src now (the beginning when it is empty): where a stream that
// has delivered everything stands.
func Tail(ctx context.Context, conn *pgx.Conn, src Source) (cursor.Position, error) {
	t, err := inspect(ctx, conn, Source{Table: src.Table, IDColumn: src.IDColumn, CreatedAtColumn: src.CreatedAtColumn,
		KeyColumn: src.KeyColumn})
	if err != nil {
		return cursor.Position{}, err
	}
	ca, id := pgx.Identifier{t.src.CreatedAtColumn}.Sanitize(), pgx.Identifier{t.src.IDColumn}.Sanitize()
	var at *time.Time
	var last *string
	q := fmt.Sprintf("SELECT %[1]s::timestamptz, %[2]s::text FROM %[3]s ORDER BY %[1]s DESC, %[2]s DESC LIMIT 1", ca, id, t.ident)
	if err := conn.QueryRow(ctx, q).Scan(&at, &last); err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return cursor.Position{}, fmt.Errorf("find the last row of %s: %w", t.qualified, err)
	}
	if at == nil {
		return cursor.Position{}, nil
	}
	return cursor.Position{CreatedAt: at.UTC(), ID: *last}, nil
}

// Writers lists the backends with a transaction open that could still commit rows of src dated before
// now: for a source with the writers horizon, the transactions that wrote or are writing to it; for the
// transactions horizon, every transaction of the database it watches (see the horizon). A prepared
// transaction is listed as pid 0.
func Writers(ctx context.Context, conn *pgx.Conn, src Source) ([]int, error) {
	t, err := inspect(ctx, conn, Source{Table: src.Table, IDColumn: src.IDColumn, CreatedAtColumn: src.CreatedAtColumn,
		KeyColumn: src.KeyColumn, Horizon: src.Horizon})
	if err != nil {
		return nil, err
	}
	o, err := pollLocks(ctx, conn, t)
	if err != nil {
		return nil, fmt.Errorf("read writers of %s: %w", t.qualified, err)
	}
	set := o.writers
	if t.horizon == HorizonTransactions || !t.writersSafe(o.default_) {
		for vxid, pid := range o.txs {
			set[vxid] = pid
		}
	}
	pids := make([]int, 0, len(set))
	for _, pid := range set {
		pids = append(pids, pid)
	}
	sort.Ints(pids)
	return pids, nil
}
