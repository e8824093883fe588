package processortest

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inorder-dev/inorder/internal/harness/testdb"
)

// DBOpts configures NewDB. The zero value, like a nil *DBOpts, gives a database with inorder's
// migrations applied.
type DBOpts struct {
	// Empty skips the migrations: the database starts with nothing in it, for a test of a program that
	// applies them itself (migrations.Migrate, `inorder migrate`). False means the migrations are applied.
	Empty bool
}

// DB is one test's database: fresh, on the binary's throwaway cluster or on the $DATABASE_URL server, and
// gone when the test ends.
type DB struct {
	// Name is the database's name, unique on the server; handy to name roles the test creates.
	Name string
	// URL connects to the database as the server's superuser (on $DATABASE_URL, as its user). Hand it to
	// the code under test.
	URL string
	// Pool is a small pool on the database for the test's own setup and assertions. It is closed when
	// the test ends.
	Pool *pgxpool.Pool
}

// NewDB returns a fresh database for the test, with inorder's migrations applied unless opts say Empty.
// When the test ends its pool is closed and, on a $DATABASE_URL server, it is dropped (with FORCE, so
// connections left open do not keep it). It fails the test when there is no server: no $DATABASE_URL and
// no PostgreSQL server binaries installed.
//
// The first NewDB of a test binary starts the server (see the package documentation); it takes a second
// or two, every later one a few milliseconds.
func NewDB(t testing.TB, opts *DBOpts) *DB {
	t.Helper()
	if opts == nil {
		opts = &DBOpts{}
	}
	d := testdb.Open(t, "processortest", "p", opts.Empty)
	return &DB{Name: d.Name, URL: d.URL, Pool: d.Pool}
}

// Exec runs sql with args on the database and fails the test if it returns an error. Several statements
// may go in one call when there are no args.
func (db *DB) Exec(t testing.TB, sql string, args ...any) {
	t.Helper()
	if _, err := db.Pool.Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("processortest: exec %q on %s: %v", sql, db.Name, err)
	}
}

// ConnConfig returns a new connection configuration for the database, for processor.Config.ConnConfig.
// Each call returns a copy of its own, so a test may change one without touching others.
func (db *DB) ConnConfig(t testing.TB) *pgx.ConnConfig {
	t.Helper()
	cc, err := pgx.ParseConfig(db.URL)
	if err != nil {
		t.Fatalf("processortest: parse the URL of %s: %v", db.Name, err)
	}
	return cc
}

// Main runs the tests of a package and exits with their status, having stopped the throwaway cluster (or,
// on a $DATABASE_URL server, dropped the template its databases were copied from). It is optional: call
// it from TestMain to stop the cluster as soon as the tests end rather than when the binary exits.
//
//	func TestMain(m *testing.M) { processortest.Main(m) }
//
// It does not return.
func Main(m *testing.M) { testdb.Main(m) }
