// Package pgtest gives each of the project's tests a database of its own on a real PostgreSQL server: a
// throwaway cluster started once per test binary from the installed server binaries, or the server named
// by $DATABASE_URL. It is a thin layer over internal/harness/testdb, which processor/processortest, the kit for
// users' tests, shares.
//
// Every test package that uses it has
//
//	func TestMain(m *testing.M) { pgtest.Main(m) }
//
// so the cluster is stopped when the package's tests end.
package pgtest

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/inorder-dev/inorder/internal/harness/pgbouncer"
	"github.com/inorder-dev/inorder/internal/harness/pgcluster"
	"github.com/inorder-dev/inorder/internal/harness/testdb"
)

// Main runs the package's tests and stops the cluster afterwards. It does not return.
func Main(m *testing.M) { testdb.Main(m) }

// Run runs the package's tests, stops the cluster afterwards and returns the tests' status, for a
// TestMain that has more to undo before os.Exit.
func Run(m *testing.M) int { return testdb.Run(m) }

// DB is one test's database: its Name, a URL that connects to it as a superuser, and a small Pool for the
// test's own setup and assertions.
type DB = testdb.DB

// Options tune NewDB.
type Options struct {
	// Empty skips the migrations: the database starts with nothing in it.
	Empty bool
}

// New returns a fresh database with inorder's migrations applied. It fails the test with one line saying
// how to get a server when there is none.
func New(t testing.TB) *DB {
	t.Helper()
	return NewDB(t, Options{})
}

// NewDB returns a fresh database for the test, shaped by opts.
func NewDB(t testing.TB, opts Options) *DB {
	t.Helper()
	return testdb.Open(t, "pgtest", "t", opts.Empty)
}

// Cluster returns the throwaway cluster, or nil when the tests run against $DATABASE_URL.
func Cluster() *pgcluster.Cluster { return testdb.Cluster() }

// ExampleURL returns the URL of a fresh database with inorder's migrations, for Example functions, which
// have no *testing.T. It panics when there is no server.
func ExampleURL() string {
	url, err := testdb.ExampleURL()
	if err != nil {
		panic("pgtest: " + err.Error())
	}
	return url
}

// Bouncer starts a PgBouncer in mode in front of the server that db lives on, with PgBouncer's default
// settings (see package pgbouncer), and stops it when the test ends. Its URL method gives a URL to db
// through it. It fails the test with one line saying how to install PgBouncer when it is missing.
func Bouncer(t testing.TB, db *DB, mode pgbouncer.Mode, settings map[string]string) *pgbouncer.Bouncer {
	t.Helper()
	cc, err := pgx.ParseConfig(db.URL)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	b, err := pgbouncer.Start(context.Background(), pgbouncer.Config{Mode: mode, Host: cc.Host, Port: int(cc.Port),
		User: cc.User, Password: cc.Password, Settings: settings})
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("pgbouncer:\n%s", b.Output())
		}
		_ = b.Stop()
	})
	return b
}
