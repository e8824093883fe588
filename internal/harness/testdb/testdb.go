// Package testdb gives each test a fresh database with inorder's migrations on one PostgreSQL server per
// test binary: a throwaway cluster started on first use from the installed server binaries, or the server
// that $DATABASE_URL names.
//
// The project's own tests reach it through internal/harness/pgtest and users' tests through
// processor/processortest; both are thin layers over this package, so a test binary that uses both shares
// one server.
//
// # Stopping the server
//
// A test binary whose TestMain calls Main stops the throwaway cluster when its tests end. Without one, the
// cluster still goes away with the binary: package pgcluster stops the server and removes its directory
// when the process that started it exits, however it exits.
//
// # Templates
//
// On the throwaway cluster, the migrations are applied once to a template database and each test's
// database is a copy of it. On a shared server ($DATABASE_URL) a template would outlive the binary unless
// someone drops it, so it is used only when Main runs (and drops it); otherwise each database is migrated
// on its own. Each test's database on a shared server is dropped when the test ends.
package testdb

import (
	"context"
	"crypto/rand"
	"encoding/hex"
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

	"github.com/inorder-dev/inorder/internal/harness/pgcluster"
	"github.com/inorder-dev/inorder/migrations"
)

var (
	startOnce sync.Once
	startErr  error
	cluster   *pgcluster.Cluster
	adminURL  string
	template  string // "" when each database is migrated on its own
	managed   atomic.Bool
	counter   atomic.Int64
	// tag makes this binary's database names unique on a server shared with other binaries, including
	// ones in other containers, where process ids repeat.
	tag = fmt.Sprintf("%d_%s", os.Getpid(), randomHex(3))
	// CREATE DATABASE ... TEMPLATE refuses while another session uses the template; copies are serialised.
	createMu sync.Mutex
)

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Main runs the binary's tests, then stops the throwaway cluster (or drops the template from a shared
// server) and exits with the tests' status. It does not return: a TestMain with more to undo afterwards
// (a temporary directory) calls Run, undoes it, then exits.
func Main(m *testing.M) {
	os.Exit(Run(m))
}

// Run runs the binary's tests, then stops the throwaway cluster (or drops the template from a shared
// server), and returns the tests' status for os.Exit.
func Run(m *testing.M) int {
	managed.Store(true)
	code := m.Run()
	Stop()
	return code
}

// Stop stops the throwaway cluster, or drops the template database from a shared server. Main calls it;
// a TestMain of its own calls it after m.Run. Databases handed out before are gone or unusable after it.
func Stop() {
	if cluster != nil {
		_ = cluster.Stop()
		return
	}
	if template != "" {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = drop(ctx, template)
	}
}

// Cluster returns the throwaway cluster, or nil when the tests run against $DATABASE_URL (or before the
// first database was asked for).
func Cluster() *pgcluster.Cluster { return cluster }

func start() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if url := os.Getenv("DATABASE_URL"); url != "" {
		adminURL = url
		if !managed.Load() {
			return // no one would drop a template: each database is migrated on its own
		}
	} else {
		// Prepared transactions are off by default (0); the tests that show one holding the xmin horizon
		// need a few. A slot costs a little shared memory, and nothing unless used.
		settings := map[string]string{"max_prepared_transactions": "10"}
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
	name := "inorder_tpl_" + tag
	if err := create(ctx, name, ""); err != nil {
		startErr = fmt.Errorf("create template database: %w", err)
		return
	}
	if err := migrate(ctx, WithDatabase(adminURL, name)); err != nil {
		_ = drop(ctx, name)
		startErr = fmt.Errorf("template database: %w", err)
		return
	}
	template = name
}

func benchmarking() bool {
	f := flag.Lookup("test.bench")
	return f != nil && f.Value.String() != ""
}

// Create makes a fresh database whose name starts with prefix and returns its name and a URL that
// connects to it as the server's superuser (or $DATABASE_URL's user). Unless empty, the database has
// inorder's migrations applied. The first call starts the server.
func Create(ctx context.Context, prefix string, empty bool) (name, url string, err error) {
	startOnce.Do(start)
	if startErr != nil {
		return "", "", startErr
	}
	name = fmt.Sprintf("%s%s_%d", prefix, tag, counter.Add(1))
	tpl := ""
	if !empty {
		tpl = template
	}
	if err := create(ctx, name, tpl); err != nil {
		return "", "", fmt.Errorf("create database: %w", err)
	}
	url = WithDatabase(adminURL, name)
	if !empty && tpl == "" {
		if err := migrate(ctx, url); err != nil {
			_ = drop(ctx, name)
			return "", "", err
		}
	}
	return name, url, nil
}

// Drop removes a database that Create made, cutting its connections, when it is on a shared server. On
// the throwaway cluster it does nothing: the cluster goes away whole.
func Drop(ctx context.Context, name string) error {
	if cluster != nil {
		return nil
	}
	return drop(ctx, name)
}

func create(ctx context.Context, name, tpl string) error {
	stmt := "CREATE DATABASE " + pgx.Identifier{name}.Sanitize()
	if tpl != "" {
		stmt += " TEMPLATE " + pgx.Identifier{tpl}.Sanitize()
		createMu.Lock()
		defer createMu.Unlock()
	}
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return fmt.Errorf("connect to %s: %w", redact(adminURL), err)
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, stmt)
	return err
}

func migrate(ctx context.Context, url string) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return fmt.Errorf("connect to %s: %w", redact(url), err)
	}
	defer conn.Close(ctx)
	if _, err := migrations.Migrate(ctx, conn); err != nil {
		return fmt.Errorf("apply the migrations: %w", err)
	}
	return nil
}

func drop(ctx context.Context, name string) error {
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return fmt.Errorf("connect to %s: %w", redact(adminURL), err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
		return fmt.Errorf("drop database %s: %w", name, err)
	}
	return nil
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

// Open returns a fresh database for the test (see Create), with a pool on it; both go away when the test
// ends. It fails the test, its message starting with who, when there is no server.
func Open(t testing.TB, who, prefix string, empty bool) *DB {
	t.Helper()
	ctx := context.Background()
	name, url, err := Create(ctx, prefix, empty)
	if err != nil {
		t.Fatalf("%s: %v", who, err)
	}
	db := &DB{Name: name, URL: url}
	db.Pool, err = pgxpool.New(ctx, url)
	if err != nil {
		_ = Drop(ctx, name)
		t.Fatalf("%s: pool on database %s: %v", who, name, err)
	}
	t.Cleanup(func() {
		db.Pool.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := Drop(ctx, name); err != nil {
			t.Errorf("%s: %v", who, err)
		}
	})
	return db
}

// Exec runs SQL on the test's database and fails the test on error.
func (db *DB) Exec(t testing.TB, sql string, args ...any) {
	t.Helper()
	if _, err := db.Pool.Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("exec %q: %v", sql, err)
	}
}

// ExampleURL returns the URL of a fresh database with inorder's migrations, for Example functions, which
// have no *testing.T. Nothing drops it; on a shared server it stays.
func ExampleURL() (string, error) {
	_, url, err := Create(context.Background(), "x", false)
	return url, err
}

// WithDatabase returns url with its database replaced by db. It takes both URL and keyword/value forms.
func WithDatabase(url, db string) string {
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

// redact names a server without its password, for messages.
func redact(url string) string {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return "DATABASE_URL"
	}
	return fmt.Sprintf("%s@%s:%d/%s", cfg.User, cfg.Host, cfg.Port, cfg.Database)
}
