package source

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/inorder-dev/inorder/inordertype"
)

// Beginner starts a transaction: a connection, for the checks of a filter that must leave nothing behind.
type Beginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// CheckFilter checks the source's filter (Spec.Where) the way a column name is checked: it must be one
// boolean expression over the table's columns that a partial index could have as its predicate, so that a
// row's verdict depends on the row alone, never on when it is read, and nothing in it can write. The
// lexical checks refuse a statement separator, a comment, a dollar sign (dollar quoting, a parameter) and
// parentheses that close more than they open, so that the expression cannot reach outside the parentheses
// every read puts it in. Postgres then checks the rest, in a transaction that is rolled back: it builds a
// partial index with the filter as its predicate on an empty temporary copy of the table (which refuses
// a function that is not IMMUTABLE, a subquery, an aggregate), and plans and runs the read's condition
// (LIMIT 0, in a READ ONLY transaction). The error is one line naming the expression. A source without a
// filter passes at once.
func (t *Table) CheckFilter(ctx context.Context, conn Beginner) error {
	where := strings.TrimSpace(t.Spec.Where)
	t.Spec.Where = where
	if where == "" {
		return nil
	}
	if err := lexFilter(where); err != nil {
		return invalid("filter %q on %s: %s", where, t.Qualified, err)
	}
	if err := t.filterImmutable(ctx, conn, where); err != nil {
		return err
	}
	return t.filterReads(ctx, conn, where)
}

// filterImmutable has Postgres check that where could be a partial index's predicate on the table: a
// boolean expression over its columns whose functions and operators are all IMMUTABLE, without a
// subquery. It builds the index on an empty temporary copy of the table, and rolls it all back.
func (t *Table) filterImmutable(ctx context.Context, conn Beginner, where string) error {
	tx, err := conn.Begin(ctx)
	if err != nil {
		return fmt.Errorf("check the filter on %s: %w", t.Qualified, err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	copyName := pgx.Identifier{"pg_temp", "inorder_filter_check"}.Sanitize()
	if _, err := tx.Exec(ctx, fmt.Sprintf("CREATE TEMPORARY TABLE %s (LIKE %s) ON COMMIT DROP", copyName, t.Ident)); err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "42501" {
			return invalid("filter %q on %s: checking it needs a temporary table, and the role may not create one: GRANT TEMPORARY ON DATABASE <database> TO <role>",
				where, t.Qualified)
		}
		return fmt.Errorf("check the filter on %s: %w", t.Qualified, err)
	}
	_, err = tx.Exec(ctx, fmt.Sprintf("CREATE INDEX ON %s (%s) WHERE (%s)", copyName, quote(t.Spec.IDColumn), where))
	if err != nil {
		return t.filterError(where, err)
	}
	return t.noteFilterIndex(ctx, tx, copyName, where)
}

// noteFilterIndex warns, when the table has the insert clock and no valid partial index in its order with
// the filter as its predicate (as Postgres prints the predicate of the temporary copy's index, in tx),
// that a selective filter wants one, naming it. Without it the read walks the table's ordering index and
// looks at every row the filter passes over once.
func (t *Table) noteFilterIndex(ctx context.Context, tx pgx.Tx, copyName, where string) error {
	if t.Horizon != inordertype.HorizonClock || t.Part != nil {
		return nil
	}
	var want string
	if err := tx.QueryRow(ctx, `SELECT pg_get_expr(indpred, indrelid) FROM pg_index WHERE indrelid = $1::regclass`,
		copyName).Scan(&want); err != nil {
		return fmt.Errorf("check the filter on %s: %w", t.Qualified, err)
	}
	rows, err := tx.Query(ctx, `
		SELECT pg_get_indexdef(i.indexrelid, 1, true), pg_get_expr(i.indpred, i.indrelid)
		FROM pg_index i JOIN pg_class ic ON ic.oid = i.indexrelid JOIN pg_am am ON am.oid = ic.relam
		WHERE i.indrelid = $1 AND am.amname = 'btree' AND i.indpred IS NOT NULL AND i.indnkeyatts >= 2 AND i.indisvalid
		  AND i.indkey[0] = 0 AND i.indkey[1] = (SELECT attnum FROM pg_attribute WHERE attrelid = $1 AND attname = $2)`,
		t.OID, t.Spec.IDColumn)
	if err != nil {
		return fmt.Errorf("check the filter on %s: %w", t.Qualified, err)
	}
	type partial struct{ first, pred string }
	found, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (partial, error) {
		var p partial
		return p, r.Scan(&p.first, &p.pred)
	})
	if err != nil {
		return fmt.Errorf("check the filter on %s: %w", t.Qualified, err)
	}
	for _, p := range found {
		if sameExpr(p.first, t.AtExpr("")) && p.pred == want {
			return nil
		}
	}
	t.Warnings = append(t.Warnings, fmt.Sprintf("no partial index on %s has the filter %q as its predicate: the read "+
		"looks at every row the filter passes over once; for a selective filter create one (online): %s", t.Qualified,
		where, t.FilterIndexSQL()))
	return nil
}

// FilterIndexSQL is the statement that creates the partial index serving the source's filter: the
// table's order (the insert clock, then the id) over the rows the filter keeps.
func (t *Table) FilterIndexSQL() string {
	name := strings.SplitN(t.Qualified, ".", 2)[1] + "_filter_idx"
	return fmt.Sprintf("CREATE INDEX CONCURRENTLY %s ON %s ((%s), %s) WHERE %s", quote(name), t.Ident, t.AtExpr(""),
		quote(t.Spec.IDColumn), t.Spec.Where)
}

// filterReads plans and runs the read's condition with the filter, returning no row, in a READ ONLY
// transaction: what the reads will ask, so that nothing about it is first found at the first read.
func (t *Table) filterReads(ctx context.Context, conn Beginner, where string) error {
	tx, err := conn.Begin(ctx)
	if err != nil {
		return fmt.Errorf("check the filter on %s: %w", t.Qualified, err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if _, err := tx.Exec(ctx, "SET TRANSACTION READ ONLY"); err != nil {
		return fmt.Errorf("check the filter on %s: %w", t.Qualified, err)
	}
	q := fmt.Sprintf("SELECT 1 FROM %s AS src WHERE %s < $1::timestamptz%s LIMIT 0", t.Ident, t.AtExpr("src."), t.FilterCond())
	at := time.Now()
	rows, err := tx.Query(ctx, "EXPLAIN "+q, at)
	if err == nil {
		rows.Close()
		err = rows.Err()
	}
	if err == nil {
		_, err = tx.Exec(ctx, q, at)
	}
	if err != nil {
		return t.filterError(where, err)
	}
	return nil
}

// filterError is the one line that refuses a filter Postgres would not take, or the error as it is when it
// says nothing about the filter (a lost connection, a cancelled statement).
func (t *Table) filterError(where string, err error) error {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return fmt.Errorf("check the filter on %s: %w", t.Qualified, err)
	}
	msg := pgErr.Message
	switch {
	case strings.Contains(msg, "index predicate must be marked IMMUTABLE"):
		msg = "it calls a function or operator that is not IMMUTABLE (one that can write, or whose result depends on when it runs, such as now() or a subquery's table); a filter must decide by the row alone"
	case strings.Contains(msg, "cannot use subquery in index predicate"):
		msg = "it has a subquery; a filter must decide by the row alone"
	}
	switch pgErr.Code[:2] {
	case "08", "40", "53", "57", "58": // the connection, a conflict, the server's resources, a cancel: not the filter's
		return fmt.Errorf("check the filter on %s: %w", t.Qualified, err)
	}
	return invalid("filter %q on %s: %s", where, t.Qualified, msg)
}

// FilterCond is the read's condition for the filter, " AND (<filter>)" to follow the keyset condition,
// or "" without one. The filter names the table's columns unqualified (the read's alias is src).
func (t *Table) FilterCond() string {
	if t.Spec.Where == "" {
		return ""
	}
	return " AND (" + t.Spec.Where + ")"
}

// Filtered reports whether the source has a filter.
func (t *Table) Filtered() bool { return t.Spec.Where != "" }

// AnyBelowSQL builds the question whether any row, matching the filter or not, lies after pos and below
// horizon (in the process's partition): one step down the ordering index, which tells a process with a
// filter whether its position has rows to pass over. Its arguments follow.
func (t *Table) AnyBelowSQL(pos inordertype.Position, horizon time.Time) (string, []any) {
	after, args := t.After(pos, "src.", 1)
	part := ""
	if t.Part != nil {
		part = fmt.Sprintf(" AND %s = %d", t.PartExpr("src."), t.Part.Index)
	}
	// The first row in the index's order, so that the planner takes the index's first entry in the range:
	// for an EXISTS, which drops the order, it may scan the table from its start for one instead.
	at := t.AtExpr("src.")
	sql := fmt.Sprintf("SELECT (SELECT true FROM %s AS src WHERE %s%s AND %s < $%d::timestamptz ORDER BY %s, src.%s LIMIT 1) IS NOT NULL",
		t.Ident, after, part, at, len(args)+1, at, quote(t.Spec.IDColumn))
	return sql, append(args, horizon)
}

// lexFilter refuses what could take a filter outside the parentheses a read puts it in, or make it
// more than one expression: a statement separator, a comment, a dollar sign, parentheses that close more
// than they opened or leave one open, an unterminated string or quoted identifier. It reads string
// constants ('...', E'...' with its backslash escapes) and quoted identifiers ("...") as Postgres does.
func lexFilter(s string) error {
	depth := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '\'':
			escapes := i > 0 && (s[i-1] == 'e' || s[i-1] == 'E') && (i < 2 || !identChar(s[i-2]))
			end, ok := closing(s, i, '\'', escapes)
			if !ok {
				return errors.New("a string constant is not terminated")
			}
			i = end
		case c == '"':
			end, ok := closing(s, i, '"', false)
			if !ok {
				return errors.New("a quoted identifier is not terminated")
			}
			i = end
		case c == ';':
			return errors.New("it has a statement separator (;): a filter is one boolean expression")
		case c == '$':
			return errors.New("it has a dollar sign (dollar quoting or a parameter): write string constants in single quotes")
		case c == '-' && i+1 < len(s) && s[i+1] == '-', c == '/' && i+1 < len(s) && s[i+1] == '*':
			return errors.New("it has a comment: a filter is one boolean expression")
		case c == '(':
			depth++
		case c == ')':
			depth--
			if depth < 0 {
				return errors.New("it closes a parenthesis it did not open")
			}
		}
	}
	if depth != 0 {
		return errors.New("it leaves a parenthesis open")
	}
	return nil
}

// closing finds the quote q that ends the quoted text opened at s[open], a doubled quote standing for
// itself (and with escapes, a backslash escaping the next byte).
func closing(s string, open int, q byte, escapes bool) (int, bool) {
	for j := open + 1; j < len(s); j++ {
		switch {
		case escapes && s[j] == '\\':
			j++
		case s[j] == q && j+1 < len(s) && s[j+1] == q:
			j++
		case s[j] == q:
			return j, true
		}
	}
	return 0, false
}

func identChar(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c >= 0x80
}
