package migrations

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/inorder-dev/inorder/internal/clock"
	"github.com/inorder-dev/inorder/internal/setting"
)

// ClockColumn is the insert clock's column, which AddClock adds to a table: leave it out of what the
// application writes (whatever it writes, the trigger overwrites it).
const ClockColumn = clock.Column

// clockIndexSQL is the index that serves the keyset read of a table ident ordered by the insert clock.
func clockIndexSQL(ident, name, createdAt, typ, id string, concurrently bool) string {
	how := "INDEX CONCURRENTLY"
	if !concurrently {
		how = "INDEX"
	}
	return fmt.Sprintf("CREATE %s IF NOT EXISTS %s ON %s ((%s), %s)", how, pgx.Identifier{name}.Sanitize(), ident,
		clock.Expr("", createdAt, typ), pgx.Identifier{id}.Sanitize())
}

// ClockOpts tune AddClock.
type ClockOpts struct {
	// CreatedAtColumn is the table's created_at column, which orders the rows older than the clock; empty
	// means "created_at".
	CreatedAtColumn string
	// IDColumn is the table's id column; empty means "id".
	IDColumn string
	// LockTimeout bounds each wait for the table's lock (lock_timeout, SET LOCAL); zero means
	// 2s. While the ALTER TABLE waits, every insert into the table queues behind it.
	LockTimeout time.Duration
	// WaitedFunc, when set, is called after each attempt that gave up waiting for the table's lock, before
	// the pause that precedes the next one: `inorder migrate --table` prints it.
	WaitedFunc func(LockWait)
}

// AddClock gives table, a source table named as in SQL, inorder's insert clock, online: a column,
// inorder_at, that a BEFORE INSERT trigger sets to the database's clock at every insert whatever the
// insert says, and the index that orders the table by it. A processor whose table has the clock orders
// it by the clock and waits only for the table's writers (inordertype.HorizonClock), so neither an
// application's clock nor a long transaction elsewhere (a pg_dump) can make it skip a row or hold it
// back. It is what `inorder migrate --table` runs, and it is safe to run again: what is there stays.
//
// It never rewrites the table nor blocks its writers for longer than opts.LockTimeout at a time:
//   - the column is added without a default (a change of the catalog alone), its default and the
//     trigger set in the same short transaction, under lock_timeout, tried again after a pause while
//     the lock is not to be had (a writer or a dump holds the table);
//   - the index is built with CREATE INDEX CONCURRENTLY, which lets writers go on (it waits for
//     transactions older than it, a dump included, to end); on a partitioned table, one partition at a
//     time, attached to an index on the parent.
//
// The rows inserted before the clock have no inorder_at; they are ordered by created_at, before every row
// that has one, and all of them were committed before the clock was added (the ALTER TABLE waits for every
// writer of the table).
func AddClock(ctx context.Context, conn *pgx.Conn, table string, opts ClockOpts) error {
	t, err := clockTarget(ctx, conn, table, opts)
	if err != nil {
		return err
	}
	if err := t.stamp(ctx, conn, opts); err != nil {
		return err
	}
	return t.index(ctx, conn)
}

// clockTable is a table to give the clock, as the catalog names it.
type clockTable struct {
	oid                     uint32
	schema, name, ident     string
	partitioned             bool
	createdAt, createdAtTyp string
	id                      string
}

func clockTarget(ctx context.Context, conn *pgx.Conn, table string, opts ClockOpts) (*clockTable, error) {
	t := &clockTable{createdAt: opts.CreatedAtColumn, id: opts.IDColumn}
	if t.createdAt == "" {
		t.createdAt = "created_at"
	}
	if t.id == "" {
		t.id = "id"
	}
	var kind string
	var idOK bool
	err := conn.QueryRow(ctx, `
		SELECT c.oid, n.nspname, c.relname, c.relkind::text,
		       coalesce((SELECT t.typname::text FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid
		                 WHERE a.attrelid = c.oid AND a.attname = $2 AND NOT a.attisdropped), ''),
		       EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attname = $3 AND NOT a.attisdropped)
		FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE c.oid = to_regclass($1)`, table, t.createdAt, t.id).
		Scan(&t.oid, &t.schema, &t.name, &kind, &t.createdAtTyp, &idOK)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("insert clock: table %q does not exist (or is not on the search_path)", table)
	}
	if err != nil {
		return nil, fmt.Errorf("insert clock: table %q: %w", table, err)
	}
	t.ident = pgx.Identifier{t.schema, t.name}.Sanitize()
	switch {
	case kind != "r" && kind != "p":
		return nil, fmt.Errorf("insert clock: %s.%s is not a table (relkind %q)", t.schema, t.name, kind)
	case t.createdAtTyp != "timestamptz" && t.createdAtTyp != "timestamp":
		return nil, fmt.Errorf("insert clock: %s.%s has no created_at column %q of type timestamptz or timestamp, "+
			"which orders the rows older than the clock; name it with the created-at column setting", t.schema, t.name, t.createdAt)
	case !idOK:
		return nil, fmt.Errorf("insert clock: %s.%s has no id column %q; name it with the id column setting", t.schema, t.name, t.id)
	}
	t.partitioned = kind == "p"
	return t, nil
}

// stamp adds the column, its default and the trigger in one short transaction, tried again while the
// table's lock is not to be had.
func (t *clockTable) stamp(ctx context.Context, conn *pgx.Conn, opts ClockOpts) error {
	timeout := opts.LockTimeout
	if timeout <= 0 {
		timeout = setting.DefaultLockTimeout
	}
	var last *LockWait
	for attempt := 1; ; attempt++ {
		began := time.Now()
		err := t.stampOnce(ctx, conn, timeout)
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "55P03" { // lock_not_available: lock_timeout
			return err
		}
		w := LockWait{Attempt: attempt, Migration: "the insert clock on " + t.schema + "." + t.name, Waited: timeout,
			Holders: tableHolders(ctx, conn, t.oid, began), RetryIn: timeout}
		if last != nil {
			w.RetryIn = min(2*last.RetryIn, maxRetryIn)
		}
		last = &w
		if opts.WaitedFunc != nil {
			opts.WaitedFunc(w)
		}
		select {
		case <-ctx.Done():
			return gaveUp(attempt, last, ctx.Err())
		case <-time.After(w.RetryIn):
		}
	}
}

func (t *clockTable) stampOnce(ctx context.Context, conn *pgx.Conn, timeout time.Duration) error {
	tx, err := conn.Begin(ctx)
	if err != nil {
		return fmt.Errorf("insert clock on %s: %w", t.ident, err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // a no-op after Commit
	var there bool
	if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_trigger WHERE tgrelid = $1 AND tgname = $2 AND tgparentid = 0)`,
		t.oid, clock.Trigger).Scan(&there); err != nil {
		return fmt.Errorf("insert clock on %s: %w", t.ident, err)
	}
	if there {
		return nil // added before: its time stays what it was
	}
	if _, err := tx.Exec(ctx, fmt.Sprintf("SET LOCAL lock_timeout = %d", max(1, timeout.Milliseconds()))); err != nil {
		return fmt.Errorf("insert clock on %s: %w", t.ident, err)
	}
	for _, stmt := range clockStatements(t.ident) {
		if _, err := tx.Exec(ctx, stmt); err != nil {
			return fmt.Errorf("insert clock on %s: %w", t.ident, err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("insert clock on %s: %w", t.ident, err)
	}
	return nil
}

// clockStatements add the clock's column, default and trigger to the table ident, in one transaction. The
// trigger's argument is when the clock was added: the transaction's start, earlier than any row it stamps,
// and later than every row without it (whose writers ended before the ALTER TABLE got its lock).
func clockStatements(ident string) []string {
	col := pgx.Identifier{ClockColumn}.Sanitize()
	return []string{
		fmt.Sprintf("ALTER TABLE %s ADD COLUMN IF NOT EXISTS %s timestamptz", ident, col),
		fmt.Sprintf("ALTER TABLE %s ALTER COLUMN %s SET DEFAULT clock_timestamp()", ident, col),
		fmt.Sprintf(`DO $inorder$ BEGIN EXECUTE format('CREATE TRIGGER %s BEFORE INSERT ON %s FOR EACH ROW EXECUTE FUNCTION %s(%%L)',
			to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')); END $inorder$`,
			pgx.Identifier{clock.Trigger}.Sanitize(), strings.ReplaceAll(ident, "'", "''"), clock.Function),
	}
}

// indexName is the name of the clock's index on a table (a partition) named name, within Postgres's 63
// bytes.
func indexName(name string) string {
	const suffix = "_inorder_at_idx"
	if len(name) > 63-len(suffix) {
		name = name[:63-len(suffix)]
	}
	return name + suffix
}

// index builds the index that orders the table by the clock: concurrently on a plain table; on a
// partitioned one, on the parent alone (ON ONLY, invalid until every partition's is attached), then
// concurrently on each partition, attached to it.
func (t *clockTable) index(ctx context.Context, conn *pgx.Conn) error {
	if !t.partitioned {
		return buildIndex(ctx, conn, t.schema, t.name, t.ident, t.createdAt, t.createdAtTyp, t.id)
	}
	rows, err := conn.Query(ctx, `
		SELECT n.nspname, c.relname, c.relkind = 'p', pn.nspname, pc.relname
		FROM pg_partition_tree($1::oid::regclass) AS p
		JOIN pg_class c ON c.oid = p.relid JOIN pg_namespace n ON n.oid = c.relnamespace
		LEFT JOIN pg_class pc ON pc.oid = p.parentrelid LEFT JOIN pg_namespace pn ON pn.oid = pc.relnamespace
		ORDER BY p.level`, t.oid)
	if err != nil {
		return fmt.Errorf("insert clock index on %s: %w", t.ident, err)
	}
	type node struct {
		schema, name        string
		parted              bool
		parentSchema, paren *string
	}
	nodes, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (node, error) {
		var n node
		err := r.Scan(&n.schema, &n.name, &n.parted, &n.parentSchema, &n.paren)
		return n, err
	})
	if err != nil {
		return fmt.Errorf("insert clock index on %s: %w", t.ident, err)
	}
	for _, n := range nodes {
		ident := pgx.Identifier{n.schema, n.name}.Sanitize()
		if n.parted {
			stmt := strings.Replace(clockIndexSQL(ident, indexName(n.name), t.createdAt, t.createdAtTyp, t.id, false),
				" ON "+ident, " ON ONLY "+ident, 1)
			if _, err := conn.Exec(ctx, stmt); err != nil {
				return fmt.Errorf("insert clock index on %s: %w", ident, err)
			}
		} else if err := buildIndex(ctx, conn, n.schema, n.name, ident, t.createdAt, t.createdAtTyp, t.id); err != nil {
			return err
		}
		if n.paren == nil {
			continue
		}
		child := pgx.Identifier{n.schema, indexName(n.name)}.Sanitize()
		var attached bool
		if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_inherits WHERE inhrelid = to_regclass($1))", child).
			Scan(&attached); err != nil {
			return fmt.Errorf("insert clock index on %s: %w", ident, err)
		}
		if attached {
			continue
		}
		if _, err := conn.Exec(ctx, fmt.Sprintf("ALTER INDEX %s ATTACH PARTITION %s",
			pgx.Identifier{*n.parentSchema, indexName(*n.paren)}.Sanitize(), child)); err != nil {
			return fmt.Errorf("insert clock index on %s: attach to its parent's: %w", ident, err)
		}
	}
	return nil
}

// buildIndex creates the clock's index on one plain table (a partition) concurrently. An index of that
// name left invalid by a build that was cut off is dropped and built again.
func buildIndex(ctx context.Context, conn *pgx.Conn, schema, name, ident, createdAt, typ, id string) error {
	qualified := pgx.Identifier{schema, indexName(name)}.Sanitize()
	var valid *bool
	if err := conn.QueryRow(ctx, `SELECT (SELECT indisvalid FROM pg_index WHERE indexrelid = to_regclass($1))`, qualified).
		Scan(&valid); err != nil {
		return fmt.Errorf("insert clock index on %s: %w", ident, err)
	}
	if valid != nil && !*valid {
		if _, err := conn.Exec(ctx, "DROP INDEX CONCURRENTLY IF EXISTS "+qualified); err != nil {
			return fmt.Errorf("insert clock index on %s: drop the invalid one: %w", ident, err)
		}
	}
	if _, err := conn.Exec(ctx, clockIndexSQL(ident, indexName(name), createdAt, typ, id, true)); err != nil {
		return fmt.Errorf("insert clock index on %s: %w", ident, err)
	}
	return nil
}

// ClockSQL returns the statements AddClock runs on a plain table whose created_at is timestamptz, for
// teams that apply schema changes with their own tool: the first transaction's (run them in one, with a
// short lock_timeout, and try again while it times out), then the index, outside a transaction. The table
// is named as in SQL and quoted as it stands.
func ClockSQL(table string, opts ClockOpts) string {
	ca, id := opts.CreatedAtColumn, opts.IDColumn
	if ca == "" {
		ca = "created_at"
	}
	if id == "" {
		id = "id"
	}
	parts := strings.Split(table, ".")
	ident := pgx.Identifier(parts).Sanitize()
	var b strings.Builder
	fmt.Fprintf(&b, "-- the insert clock on %s: one short transaction (try again while its lock_timeout passes), then the index\n", table)
	fmt.Fprintf(&b, "BEGIN;\nSET LOCAL lock_timeout = '%s';\n", setting.DefaultLockTimeout)
	for _, s := range clockStatements(ident) {
		b.WriteString(s + ";\n")
	}
	b.WriteString("COMMIT;\n")
	b.WriteString(clockIndexSQL(ident, indexName(parts[len(parts)-1]), ca, "timestamptz", id, true) + ";\n")
	return b.String()
}

// tableHolders describes the locks on the table oid held by transactions open since before began, other
// than this session's: what an attempt that began then waited for. It says nothing when it cannot look.
func tableHolders(ctx context.Context, conn *pgx.Conn, oid uint32, began time.Time) []string {
	rows, err := conn.Query(ctx, `
		SELECT l.pid, coalesce(a.application_name, ''), coalesce(extract(epoch FROM clock_timestamp() - a.xact_start), -1), l.mode
		FROM pg_locks l LEFT JOIN pg_stat_activity a ON a.pid = l.pid
		WHERE l.locktype = 'relation' AND l.relation = $1 AND l.granted AND l.pid IS DISTINCT FROM pg_backend_pid()
		  AND (a.xact_start IS NULL OR a.xact_start <= $2)
		ORDER BY a.xact_start NULLS LAST, l.pid LIMIT 5`, oid, began)
	if err != nil {
		return nil
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var pid int32
		var app, mode string
		var secs float64
		if rows.Scan(&pid, &app, &secs, &mode) != nil {
			return out
		}
		held := ""
		if secs >= 0 {
			held = fmt.Sprintf(", in a transaction for %s", (time.Duration(secs * float64(time.Second))).Round(time.Millisecond))
		}
		out = append(out, fmt.Sprintf("pid %d (%s%s): %s", pid, app, held, mode))
	}
	return out
}
