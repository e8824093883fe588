package migrations

import (
	"context"
	"embed"
	"fmt"
	"io/fs"
	"sort"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
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

// Migrate applies the migrations the database does not have yet, in one transaction, and records each in
// inorder.schema_migration. Concurrent calls from several instances are safe: they serialise on a
// transaction-level advisory lock, and the later ones find nothing left to do.
func Migrate(ctx context.Context, db DB) (Applied, error) {
	var res Applied
	tx, err := db.Begin(ctx)
	if err != nil {
		return res, fmt.Errorf("migrate: begin: %w", err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // a no-op after Commit
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", int64(lockKey)); err != nil {
		return res, fmt.Errorf("migrate: take lock: %w", err)
	}
	if _, err := tx.Exec(ctx, bookkeeping); err != nil {
		return res, fmt.Errorf("migrate: create schema_migration: %w", err)
	}
	applied := map[int]bool{}
	rows, err := tx.Query(ctx, "SELECT version FROM inorder.schema_migration")
	if err != nil {
		return res, fmt.Errorf("migrate: read applied versions: %w", err)
	}
	versions, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		return res, fmt.Errorf("migrate: read applied versions: %w", err)
	}
	for _, v := range versions {
		applied[int(v)] = true
		res.Current = max(res.Current, int(v))
	}
	for _, m := range All() {
		if applied[m.Version] {
			continue
		}
		if _, err := tx.Exec(ctx, m.SQL); err != nil {
			return res, fmt.Errorf("migrate: apply %03d_%s: %w", m.Version, m.Name, err)
		}
		if _, err := tx.Exec(ctx, "INSERT INTO inorder.schema_migration (version, name) VALUES ($1, $2)",
			m.Version, m.Name); err != nil {
			return res, fmt.Errorf("migrate: record %03d_%s: %w", m.Version, m.Name, err)
		}
		res.Versions = append(res.Versions, m.Version)
		res.Current = max(res.Current, m.Version)
	}
	if err := tx.Commit(ctx); err != nil {
		return res, fmt.Errorf("migrate: commit: %w", err)
	}
	return res, nil
}
