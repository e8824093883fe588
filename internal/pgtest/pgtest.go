// Package pgtest gives each test a database of its own on a real PostgreSQL server: a throwaway cluster
// started once per test binary from the installed server binaries, or the server named by $DATABASE_URL.
//
// Every test package that uses it has
//
//	func TestMain(m *testing.M) { pgtest.Main(m) }
//
// so the cluster is stopped when the package's tests end.
package pgtest

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inorder-dev/inorder/internal/pgcluster"
	"github.com/inorder-dev/inorder/migrations"
)

var (
	startOnce sync.Once
	startErr  error
	cluster   *pgcluster.Cluster
	adminURL  string
	template  string
	counter   atomic.Int64
	createMu  sync.Mutex
)

// Main runs the package's tests and stops the cluster afterwards. It does not return.
func Main(m *testing.M) {
	code := m.Run()
	if cluster != nil {
		_ = cluster.Stop()
	}
	os.Exit(code)
}

func start() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if url := os.Getenv("DATABASE_URL"); url != "" {
		adminURL = url
	} else {
		settings := map[string]string{}
		if !benchmarking() {
			// Tests do not need durability; benchmarks keep the server's defaults so that their figures and
			// the Postgres limits beside them are measured on a realistic server.
			settings["fsync"] = "off"
			settings["synchronous_commit"] = "off"
			settings["full_page_writes"] = "off"
		}
		cluster, startErr = pgcluster.Start(ctx, pgcluster.Config{Settings: settings})
		if startErr != nil {
			return
		}
		adminURL = cluster.URL("postgres")
	}
	// A template database with the migrations applied makes each test's database one fast copy.
	template = fmt.Sprintf("inorder_tpl_%d_%d", os.Getpid(), time.Now().UnixNano()%1e6)
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		startErr = fmt.Errorf("connect to %s: %w", redact(adminURL), err)
		return
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{template}.Sanitize()); err != nil {
		startErr = fmt.Errorf("create template database: %w", err)
		return
	}
	tconn, err := pgx.Connect(ctx, withDatabase(adminURL, template))
	if err != nil {
		startErr = fmt.Errorf("connect to template database: %w", err)
		return
	}
	defer tconn.Close(ctx)
	if _, err := migrations.Migrate(ctx, tconn); err != nil {
		startErr = err
	}
}

func benchmarking() bool {
	f := flag.Lookup("test.bench")
	return f != nil && f.Value.String() != ""
}

// DB is one test's database.
type DB struct {
	// Name is the database's name.
	Name string
	// URL connects to it as a superuser.
	URL string
	// Pool is a small pool on it for the test's own setup and assertions.
	Pool *pgxpool.Pool
}

// Options tune NewDB.
type Options struct {
	// Empty skips the migrations: the database starts with nothing in it.
	Empty bool
}

// New returns a fresh database with inorder's migrations applied. It fails the test with one line saying
// how to get a server when there is none.
func New(t testing.TB) *DB { return NewDB(t, Options{}) }

// NewDB returns a fresh database for the test, shaped by opts.
func NewDB(t testing.TB, opts Options) *DB {
	t.Helper()
	startOnce.Do(start)
	if startErr != nil {
		t.Fatalf("pgtest: %v", startErr)
	}
	ctx := context.Background()
	name := fmt.Sprintf("t%d_%d", os.Getpid(), counter.Add(1))
	stmt := "CREATE DATABASE " + pgx.Identifier{name}.Sanitize()
	if !opts.Empty {
		stmt += " TEMPLATE " + pgx.Identifier{template}.Sanitize()
	}
	// CREATE DATABASE ... TEMPLATE refuses while another session uses the template; copies are serialised.
	createMu.Lock()
	conn, err := pgx.Connect(ctx, adminURL)
	if err == nil {
		_, err = conn.Exec(ctx, stmt)
		conn.Close(ctx)
	}
	createMu.Unlock()
	if err != nil {
		t.Fatalf("pgtest: create database: %v", err)
	}
	db := &DB{Name: name, URL: withDatabase(adminURL, name)}
	db.Pool, err = pgxpool.New(ctx, db.URL)
	if err != nil {
		t.Fatalf("pgtest: pool: %v", err)
	}
	t.Cleanup(func() {
		db.Pool.Close()
		if cluster == nil { // a shared server: leave it clean
			if c, err := pgx.Connect(context.Background(), adminURL); err == nil {
				_, _ = c.Exec(context.Background(), "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
				c.Close(context.Background())
			}
		}
	})
	return db
}

// Exec runs SQL on the test's database and fails the test on error.
func (db *DB) Exec(t testing.TB, sql string, args ...any) {
	t.Helper()
	if _, err := db.Pool.Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("pgtest: exec %q: %v", sql, err)
	}
}

// Cluster returns the throwaway cluster, or nil when the tests run against $DATABASE_URL.
func Cluster() *pgcluster.Cluster { return cluster }

func withDatabase(url, db string) string {
	i := strings.Index(url, "://")
	if i < 0 { // keyword/value form: a later dbname wins
		return url + " dbname=" + db
	}
	rest, query := url[i+3:], ""
	if j := strings.IndexByte(rest, '?'); j >= 0 {
		rest, query = rest[:j], rest[j:]
	}
	if j := strings.IndexByte(rest, '/'); j >= 0 {
		rest = rest[:j]
	}
	return url[:i+3] + rest + "/" + db + query
}

func redact(url string) string {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return "DATABASE_URL"
	}
	return fmt.Sprintf("%s@%s:%d/%s", cfg.User, cfg.Host, cfg.Port, cfg.Database)
}

// ExampleURL returns the URL of a fresh database with inorder's migrations, for Example functions, which
// have no *testing.T. It panics when there is no server.
func ExampleURL() string {
	startOnce.Do(start)
	if startErr != nil {
		panic("pgtest: " + startErr.Error())
	}
	name := fmt.Sprintf("x%d_%d", os.Getpid(), counter.Add(1))
	createMu.Lock()
	defer createMu.Unlock()
	conn, err := pgx.Connect(context.Background(), adminURL)
	if err != nil {
		panic("pgtest: " + err.Error())
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(context.Background(), "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()+
		" TEMPLATE "+pgx.Identifier{template}.Sanitize()); err != nil {
		panic("pgtest: " + err.Error())
	}
	return withDatabase(adminURL, name)
}
