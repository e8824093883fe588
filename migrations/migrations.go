package migrations

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/inorder-dev/inorder/internal/setting"
)

//go:embed *.sql
var files embed.FS

// Migration is one versioned SQL file.
type Migration struct {
	// Version is the number the file name starts with; migrations apply in increasing version order.
	Version int
	// Name is the file name without its version and extension, for example "cursor".
	Name string
	// SQL is the file's content.
	SQL string
}

// All returns every migration embedded in the binary, in version order.
func All() []Migration {
	entries, err := fs.Glob(files, "*.sql")
	if err != nil {
		panic(err)
	}
	var out []Migration
	for _, e := range entries {
		base := strings.TrimSuffix(e, ".sql")
		num, name, ok := strings.Cut(base, "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil {
			panic(fmt.Sprintf("migration file %q is not named NNN_name.sql", e))
		}
		body, err := files.ReadFile(e)
		if err != nil {
			panic(err)
		}
		out = append(out, Migration{Version: v, Name: name, SQL: string(body)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	return out
}

// lockKey is the advisory lock that serialises concurrent Migrate calls across instances.
const lockKey = 0x696e6f72646572 // "inorder"

const bookkeeping = `CREATE SCHEMA IF NOT EXISTS inorder;
CREATE TABLE IF NOT EXISTS inorder.schema_migration (
    version    integer PRIMARY KEY,
    name       text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT clock_timestamp()
);`

// Script returns the SQL of every migration as one script, with the bookkeeping that Migrate does, for
// teams that apply schema changes with their own tool. Running it on a database that already has some of
// the migrations fails; apply only the versions that are missing.
func Script() string {
	var b strings.Builder
	b.WriteString("-- inorder migrations: apply in one transaction.\nBEGIN;\n")
	b.WriteString(bookkeeping + "\n\n")
	for _, m := range All() {
		fmt.Fprintf(&b, "-- version %d: %s\n%s\n", m.Version, m.Name, strings.TrimSpace(m.SQL))
		fmt.Fprintf(&b, "INSERT INTO inorder.schema_migration (version, name) VALUES (%d, '%s');\n\n", m.Version, m.Name)
	}
	b.WriteString("COMMIT;\n")
	return b.String()
}

// Applied is what Migrate did.
type Applied struct {
	// Versions are the migrations this call applied, in order; empty when the schema was current.
	Versions []int
	// Current is the highest version in the database after the call.
	Current int
}

// DB is what Migrate runs on: a *pgx.Conn, a *pgxpool.Pool, or a pgx.Tx (Migrate then works in a
// savepoint of it, and the migrations commit with it). It is the interface the actions of package cursor
// take (cursor.DB), so one value serves both.
type DB interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// maxRetryIn caps the pause between two attempts of Migrate.
const maxRetryIn = 30 * time.Second

// Options tune MigrateWith.
type Options struct {
	// LockTimeout bounds each wait for a lock on a table (lock_timeout, SET LOCAL); zero means 2s,
	// well below a processor's default database timeout (5s), after which it would count its connection
	// as dead.
	LockTimeout time.Duration
	// Waited, when set, is called after each attempt that gave up waiting for a lock, before the pause
	// that precedes the next one: `inorder migrate` prints it.
	Waited func(LockWait)
}

// LockWait is an attempt of Migrate that gave up waiting for a lock.
type LockWait struct {
	// Attempt counts the attempts so far, this one included.
	Attempt int
	// Migration is the migration it was applying, as 013_checkpoint_log.
	Migration string
	// Waited is how long it waited: the lock timeout.
	Waited time.Duration
	// Holders are the locks on inorder's tables held, when it gave up, by transactions that were open
	// before it began, by holder: "pid 4242 (pg_dump, in a transaction for 5m3s): AccessShareLock on
	// inorder.cursor, inorder.instance". Empty when none was left.
	Holders []string
	// RetryIn is the pause before the next attempt: twice the last one, from the lock timeout on, at most
	// 30s, so that the processors it held up run at least as long as they waited.
	RetryIn time.Duration
}

// String says what the attempt waited for, in one line.
func (w LockWait) String() string {
	held := "no lock on inorder's tables is held any more"
	if len(w.Holders) > 0 {
		held = "held: " + strings.Join(w.Holders, "; ")
	}
	return fmt.Sprintf("applying %s, waited %s for a lock on inorder's tables (%s)", w.Migration, w.Waited, held)
}

// Migrate applies the migrations the database does not have yet, in one transaction, and records each in
// inorder.schema_migration, as MigrateWith does with the default Options: concurrent calls are safe, and
// a wait for a table lock is cut short at 2s and tried again until ctx ends, so that
// running processors never queue behind it for long.
func Migrate(ctx context.Context, db DB) (Applied, error) {
	return MigrateWith(ctx, db, Options{})
}

// MigrateWith applies the migrations the database does not have yet, in one transaction, and records each
// in inorder.schema_migration. Concurrent calls from several instances are safe: they serialise on a
// transaction-level advisory lock, and the later ones find nothing left to do.
//
// It never makes running instances queue behind it for long: each wait for a table lock is cut short at
// opts.LockTimeout, the attempt rolled back and tried again after a pause, until ctx ends. The error it
// then returns names the locks it waited for and who held them.
func MigrateWith(ctx context.Context, db DB, opts Options) (Applied, error) {
	return migrate(ctx, db, All(), opts)
}

// migrate applies what of all the database lacks, retrying an attempt that waited too long for a lock.
func migrate(ctx context.Context, db DB, all []Migration, opts Options) (Applied, error) {
	timeout := opts.LockTimeout
	if timeout <= 0 {
		timeout = setting.DefaultLockTimeout
	}
	var last *LockWait
	for attempt := 1; ; attempt++ {
		res, wait, err := migrateOnce(ctx, db, all, timeout)
		if wait == nil {
			if err != nil && last != nil && ctx.Err() != nil {
				return Applied{}, gaveUp(attempt, last, ctx.Err())
			}
			return res, err
		}
		wait.Attempt, wait.Holders = attempt, holders(ctx, db, wait.began)
		wait.RetryIn = timeout
		if last != nil {
			wait.RetryIn = min(2*last.RetryIn, maxRetryIn)
		}
		last = &wait.LockWait
		if opts.Waited != nil {
			opts.Waited(*last)
		}
		select {
		case <-ctx.Done():
			return Applied{}, gaveUp(attempt, last, ctx.Err())
		case <-time.After(last.RetryIn):
		}
	}
}

// gaveUp is the error of a Migrate whose context ended (err) while it tried again and again to get a lock:
// it names the lock the last attempt to give up waited for.
func gaveUp(attempts int, last *LockWait, err error) error {
	return fmt.Errorf("migrate: gave up after %d attempts to get a lock, the last %s: %w", attempts, last, err)
}

// lockWait is an attempt that gave up waiting for a lock, and when it began by the server's clock.
type lockWait struct {
	LockWait
	began time.Time
}

// migrateOnce is one attempt: it returns a lockWait when a statement gave up waiting for a lock.
func migrateOnce(ctx context.Context, db DB, all []Migration, timeout time.Duration) (Applied, *lockWait, error) {
	var res Applied
	tx, err := db.Begin(ctx)
	if err != nil {
		return res, nil, fmt.Errorf("migrate: begin: %w", err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // a no-op after Commit
	// The advisory lock first, with no timeout: waiting for another Migrate holds up nobody else.
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", int64(lockKey)); err != nil {
		return res, nil, fmt.Errorf("migrate: take lock: %w", err)
	}
	// SET LOCAL, put back before the commit: in a caller's transaction (a savepoint of it) the setting
	// would otherwise outlast Migrate.
	var before string
	var began time.Time
	if err := tx.QueryRow(ctx, "SELECT current_setting('lock_timeout'), clock_timestamp()").Scan(&before, &began); err != nil {
		return res, nil, fmt.Errorf("migrate: read lock_timeout: %w", err)
	}
	if _, err := tx.Exec(ctx, fmt.Sprintf("SET LOCAL lock_timeout = %d", max(1, timeout.Milliseconds()))); err != nil {
		return res, nil, fmt.Errorf("migrate: set lock_timeout: %w", err)
	}
	step := "the bookkeeping"
	timedOut := func(err error) *lockWait {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "55P03" { // lock_not_available: lock_timeout
			return &lockWait{LockWait: LockWait{Migration: step, Waited: timeout}, began: began}
		}
		return nil
	}
	if _, err := tx.Exec(ctx, bookkeeping); err != nil {
		return res, timedOut(err), fmt.Errorf("migrate: create schema_migration: %w", err)
	}
	applied := map[int]bool{}
	rows, err := tx.Query(ctx, "SELECT version FROM inorder.schema_migration")
	if err != nil {
		return res, timedOut(err), fmt.Errorf("migrate: read applied versions: %w", err)
	}
	versions, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		return res, timedOut(err), fmt.Errorf("migrate: read applied versions: %w", err)
	}
	for _, v := range versions {
		applied[int(v)] = true
		res.Current = max(res.Current, int(v))
	}
	for _, m := range all {
		if applied[m.Version] {
			continue
		}
		step = fmt.Sprintf("%03d_%s", m.Version, m.Name)
		if _, err := tx.Exec(ctx, m.SQL); err != nil {
			return res, timedOut(err), fmt.Errorf("migrate: apply %s: %w", step, err)
		}
		if _, err := tx.Exec(ctx, "INSERT INTO inorder.schema_migration (version, name) VALUES ($1, $2)",
			m.Version, m.Name); err != nil {
			return res, timedOut(err), fmt.Errorf("migrate: record %s: %w", step, err)
		}
		res.Versions = append(res.Versions, m.Version)
		res.Current = max(res.Current, m.Version)
	}
	if _, err := tx.Exec(ctx, "SELECT set_config('lock_timeout', $1, true)", before); err != nil {
		return res, nil, fmt.Errorf("migrate: reset lock_timeout: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return res, nil, fmt.Errorf("migrate: commit: %w", err)
	}
	return res, nil, nil
}

// holders describes the locks on inorder's tables that transactions open since before began (by the
// server's clock) still hold, other than this session's, by holder: what an attempt that began then waited
// for. It says nothing when it cannot look.
func holders(ctx context.Context, db DB, began time.Time) []string {
	tx, err := db.Begin(ctx)
	if err != nil {
		return nil
	}
	defer tx.Rollback(ctx) //nolint:errcheck // read only
	rows, err := tx.Query(ctx, `
		SELECT l.pid, coalesce(a.application_name, ''),
		       coalesce(extract(epoch FROM clock_timestamp() - a.xact_start), -1), l.mode,
		       string_agg(l.relation::regclass::text, ', ' ORDER BY l.relation::regclass::text)
		FROM pg_locks AS l
		LEFT JOIN pg_stat_activity AS a ON a.pid = l.pid
		WHERE l.locktype = 'relation' AND l.granted AND l.pid IS DISTINCT FROM pg_backend_pid()
		  AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
		  AND l.relation IN (SELECT oid FROM pg_class WHERE relnamespace = to_regnamespace('inorder'))
		  AND (a.xact_start IS NULL OR a.xact_start <= $1)
		GROUP BY l.pid, l.virtualtransaction, a.application_name, a.xact_start, l.mode
		ORDER BY min(a.xact_start) NULLS LAST, l.pid, l.mode
		LIMIT 5`, began)
	if err != nil {
		return nil
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var pid *int32
		var app, mode, tables string
		var open float64
		if rows.Scan(&pid, &app, &open, &mode, &tables) != nil {
			return out
		}
		who := "a prepared transaction"
		if pid != nil {
			who = fmt.Sprintf("pid %d", *pid)
			var about []string
			if app != "" {
				about = append(about, app)
			}
			if open >= 0 {
				about = append(about, "in a transaction for "+(time.Duration(open*float64(time.Second))).Round(time.Second).String())
			}
			if len(about) > 0 {
				who += " (" + strings.Join(about, ", ") + ")"
			}
		}
		out = append(out, fmt.Sprintf("%s: %s on %s", who, mode, tables))
	}
	return out
}
