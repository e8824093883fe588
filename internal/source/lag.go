package source

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inorder-dev/inorder/inordertype"
)

// Querier runs queries: a connection, a pool or a transaction.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Lag is how far a position is behind its source.
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

// Behind measures the rows of t after pos. It reads the committed rows now, horizon or not.
func (a Admin) Behind(ctx context.Context, q Querier, pos inordertype.Position) (Lag, error) {
	where, args := a.t.After(pos, "", 1)
	if a.t.Part != nil {
		where += fmt.Sprintf(" AND %s = %d", a.t.PartExpr(""), a.t.Part.Index)
	}
	ca, id := a.t.AtExpr(""), quote(a.t.Spec.IDColumn)
	var lag Lag
	var oldest *time.Time
	sql := fmt.Sprintf(`SELECT clock_timestamp(),
		(SELECT count(*) FROM (SELECT 1 FROM %[1]s WHERE %[2]s LIMIT %[3]d) AS s),
		(SELECT %[4]s::timestamptz FROM %[1]s WHERE %[2]s ORDER BY %[4]s, %[5]s LIMIT 1)`,
		a.t.Ident, where, LagCountCap+1, ca, id)
	if err := q.QueryRow(ctx, sql, args...).Scan(&lag.Now, &lag.Rows, &oldest); err != nil {
		return Lag{}, fmt.Errorf("measure lag of %s: %w", a.t.Qualified, err)
	}
	if lag.Rows > LagCountCap {
		lag.Rows, lag.Capped = LagCountCap, true
	}
	if oldest != nil {
		lag.Oldest = oldest.UTC()
	}
	return lag, nil
}

// TailBefore is the position of the last row of t created before at (the beginning when there is none).
func (a Admin) TailBefore(ctx context.Context, q Querier, at time.Time) (inordertype.Position, error) {
	ca, id := a.t.AtExpr(""), quote(a.t.Spec.IDColumn)
	var when *time.Time
	var last *string
	sql := fmt.Sprintf("SELECT %[1]s::timestamptz, %[2]s::text FROM %[3]s WHERE %[1]s < $1 ORDER BY %[1]s DESC, %[2]s DESC LIMIT 1",
		ca, id, a.t.Ident)
	if err := q.QueryRow(ctx, sql, at).Scan(&when, &last); err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return inordertype.Position{}, fmt.Errorf("find the last row of %s before %s: %w", a.t.Qualified, at, err)
	}
	if when == nil {
		return inordertype.Position{}, nil
	}
	return inordertype.Position{CreatedAt: when.UTC(), ID: *last}, nil
}

// InFlight lists the backends of o with a transaction open that could still commit rows of t dated
// before o was taken: for a source with the writers horizon, the transactions that wrote or are writing
// to it; for the transactions horizon, every transaction of the database it watches (see the horizon). A
// prepared transaction is listed as pid 0.
func (o Observation) InFlight(t *Table) []int {
	set := map[string]int{}
	for vxid, pid := range o.Writers {
		set[vxid] = pid
	}
	if t.Horizon == inordertype.HorizonTransactions || !t.WritersSafe(o.Default) {
		for vxid, pid := range o.Txs {
			set[vxid] = pid
		}
	}
	pids := make([]int, 0, len(set))
	for _, pid := range set {
		pids = append(pids, pid)
	}
	sort.Ints(pids)
	return pids
}

func quote(name string) string { return pgx.Identifier{name}.Sanitize() }

// HasRows reports whether t (its partition's rows, for a partition) has any row at all.
func (t *Table) HasRows(ctx context.Context, q Querier) (bool, error) {
	where := "true"
	if t.Part != nil {
		where = fmt.Sprintf("%s = %d", t.PartExpr(""), t.Part.Index)
	}
	var has bool
	if err := q.QueryRow(ctx, fmt.Sprintf("SELECT EXISTS (SELECT 1 FROM %s WHERE %s)", t.Ident, where)).Scan(&has); err != nil {
		return false, fmt.Errorf("look for rows in %s: %w", t.Qualified, err)
	}
	return has, nil
}
