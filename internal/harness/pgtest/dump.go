package pgtest

import (
	"context"
	"errors"
	"os"
	osexec "os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inorder-dev/inorder/internal/harness/pgcluster"
)

// Dump is a real pg_dump of a database held open: its output goes to a pipe nobody reads, so it blocks
// writing a filler table's data, holding its snapshot and ACCESS SHARE on every table, as a nightly dump
// does for its whole length.
type Dump struct {
	// PID is the dump's backend.
	PID  uint32
	stop func()
}

// HoldPgDump starts pg_dump on db and returns once it is blocked writing, its locks held. End ends it; the
// test's end does too.
func HoldPgDump(t testing.TB, db *DB) *Dump {
	t.Helper()
	ctx := context.Background()
	bin, err := pgcluster.FindBinDir()
	if err != nil {
		t.Fatalf("pg_dump: %v", err)
	}
	if _, err := os.Stat(filepath.Join(bin, "pg_dump")); err != nil {
		// npm's server builds, which make test-matrix runs the other versions on, have no pg_dump; one of
		// another version refuses a newer server. The dump is held where the server's own binaries have it.
		t.Skipf("no pg_dump beside the server's binaries in %s: a held dump is tested where they have one", bin)
	}
	db.Exec(t, `CREATE TABLE zz_dump_filler AS SELECT g, repeat('x', 200) AS pad FROM generate_series(1, 50000) g`)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatalf("pg_dump: pipe: %v", err)
	}
	const app = "test_pg_dump"
	cmd := osexec.Command(filepath.Join(bin, "pg_dump"), "--dbname", db.URL)
	cmd.Stdout, cmd.Env = w, append(os.Environ(), "PGAPPNAME="+app)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("pg_dump: %v", err)
	}
	_ = w.Close()
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	var once sync.Once
	d := &Dump{stop: func() {
		once.Do(func() {
			_ = cmd.Process.Kill()
			<-exited
			_ = r.Close()
		})
	}}
	t.Cleanup(d.End)
	deadline := time.Now().Add(30 * time.Second) // a dump of a few tables blocks in well under a second
	// Blocked: the server waits on pg_dump, sending it a table's rows (ClientWrite) or for its next
	// command while pg_dump is stuck writing what it has (ClientRead, idle in transaction), its snapshot
	// held; the same at two looks a moment apart, so that a dump merely between two statements is not
	// taken for one that blocks.
	var last string
	for {
		var query string
		err := db.Pool.QueryRow(ctx, `SELECT a.pid, a.query FROM pg_stat_activity a
			WHERE a.application_name = $1 AND a.datname = current_database() AND a.backend_xmin IS NOT NULL
			  AND (a.wait_event = 'ClientWrite' OR (a.wait_event = 'ClientRead' AND a.state = 'idle in transaction'))`,
			app).Scan(&d.PID, &query)
		if err == nil && query == last {
			return d
		}
		if err == nil {
			last = query
			time.Sleep(200 * time.Millisecond)
			continue
		}
		last = ""
		if !errors.Is(err, pgx.ErrNoRows) {
			t.Fatalf("pg_dump: %v", err)
		}
		select {
		case <-exited:
			t.Fatalf("pg_dump ended before it held anything: %s", stderr.String())
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			var state string
			_ = db.Pool.QueryRow(ctx, `SELECT coalesce(string_agg(format('pid %s: %s, %s/%s, %s', pid, state, wait_event_type,
				wait_event, left(query, 120)), '; '), 'no backend') FROM pg_stat_activity WHERE application_name = $1`, app).Scan(&state)
			t.Fatalf("pg_dump did not block writing within 30s (%s): %s", state, stderr.String())
		}
	}
}

// Running reports whether the dump's backend is still there, holding what it holds.
func (d *Dump) Running(t testing.TB, db *DB) bool {
	t.Helper()
	var there bool
	if err := db.Pool.QueryRow(context.Background(), "SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = $1)", d.PID).
		Scan(&there); err != nil {
		t.Fatalf("pg_dump: %v", err)
	}
	return there
}

// End ends the dump.
func (d *Dump) End() { d.stop() }
