package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
)

// Holder is a session holding the xmin horizon: a transaction in REPEATABLE READ that has taken its
// snapshot, idle in transaction, as a report or a forgotten psql would be.
type Holder struct {
	// PID is the holding backend's.
	PID  int
	conn *pgx.Conn
}

// HoldSnapshot opens a session on url named application, begins a REPEATABLE READ transaction and takes its
// snapshot (so the session holds the xmin horizon from now), and leaves it idle in transaction until End or
// the test's end. So that the snapshot holds something back at once, as on a database that is written to,
// a transaction id is handed out after it (Burn).
func HoldSnapshot(t testing.TB, url, application string) *Holder {
	t.Helper()
	ctx := context.Background()
	cc, err := pgx.ParseConfig(url)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	cc.RuntimeParams["application_name"] = application
	conn, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		t.Fatalf("pgtest: connect the holder: %v", err)
	}
	h := &Holder{conn: conn}
	t.Cleanup(h.End)
	if _, err := conn.Exec(ctx, "BEGIN ISOLATION LEVEL REPEATABLE READ"); err != nil {
		t.Fatalf("pgtest: begin the holder's transaction: %v", err)
	}
	if err := conn.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&h.PID); err != nil {
		t.Fatalf("pgtest: take the holder's snapshot: %v", err)
	}
	Burn(t, url)
	return h
}

// Burn hands out a transaction id on the server url names, in a session of its own: a snapshot or an xmin
// taken before it now holds back what a transaction that ran after it deleted.
func Burn(t testing.TB, url string) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "SELECT pg_current_xact_id()"); err != nil {
		t.Fatalf("pgtest: hand out a transaction id: %v", err)
	}
}

// Exec runs sql in the holder's transaction, failing the test on error.
func (h *Holder) Exec(t testing.TB, sql string, args ...any) {
	t.Helper()
	if _, err := h.conn.Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("pgtest: holder: exec %q: %v", sql, err)
	}
}

// End ends the holder's session, and with it its transaction. It may be called more than once.
func (h *Holder) End() { _ = h.conn.Close(context.Background()) }

// Unprivileged creates a login role of its own for the test, without pg_read_all_stats nor any other role's
// privileges, as a service's role usually is, and returns a URL that connects to db as it. The role sees
// of other roles' sessions in pg_stat_activity their pid, role, application and transaction ids, not their
// state nor their times. It is dropped when the test ends.
func Unprivileged(t testing.TB, db *DB) string {
	t.Helper()
	ctx := context.Background()
	role := db.Name + "_watcher"
	secret := make([]byte, 12)
	_, _ = rand.Read(secret)
	password := hex.EncodeToString(secret) // for a shared server ($DATABASE_URL) that asks for one
	if _, err := db.Pool.Exec(ctx, "CREATE ROLE "+pgx.Identifier{role}.Sanitize()+" LOGIN PASSWORD "+quote(password)); err != nil {
		t.Fatalf("pgtest: create role %s: %v", role, err)
	}
	t.Cleanup(func() {
		// DROP OWNED first revokes what the test granted the role in db.
		name := pgx.Identifier{role}.Sanitize()
		if _, err := db.Pool.Exec(context.Background(), "DROP OWNED BY "+name+"; DROP ROLE "+name); err != nil {
			t.Errorf("pgtest: drop role %s: %v", role, err)
		}
	})
	cc, err := pgx.ParseConfig(db.URL)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	// Keyword/value form, so that any password of the superuser's URL is left behind.
	return fmt.Sprintf("host=%s port=%d dbname=%s user=%s password=%s", cc.Host, cc.Port, db.Name, role, password)
}

// Prepare prepares a transaction named gid on db that has written a row (into a table of its own), so that
// it holds the xmin horizon until it is rolled back: by the function it returns, or when the test ends. It
// skips the test on a server with max_prepared_transactions = 0 (the throwaway cluster allows a few).
func Prepare(t testing.TB, db *DB, gid string) (rollback func()) {
	t.Helper()
	ctx := context.Background()
	var max int
	if err := db.Pool.QueryRow(ctx, "SELECT current_setting('max_prepared_transactions')::int").Scan(&max); err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	if max == 0 {
		t.Skip("the server has max_prepared_transactions = 0: a prepared transaction cannot be made")
	}
	conn, err := pgx.Connect(ctx, db.URL)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE TABLE IF NOT EXISTS pgtest_prepared (gid text)"); err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	if _, err := conn.Exec(ctx, "BEGIN"); err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	if _, err := conn.Exec(ctx, "INSERT INTO pgtest_prepared VALUES ($1)", gid); err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	// PREPARE TRANSACTION takes a literal, not a parameter.
	if _, err := conn.Exec(ctx, "PREPARE TRANSACTION "+quote(gid)); err != nil {
		t.Fatalf("pgtest: prepare %s: %v", gid, err)
	}
	var once sync.Once
	rollback = func() {
		once.Do(func() {
			// Left prepared, it would hold the horizon of the whole cluster, and keep its database, for good.
			if _, err := db.Pool.Exec(context.Background(), "ROLLBACK PREPARED "+quote(gid)); err != nil {
				t.Errorf("pgtest: roll back prepared transaction %s: %v", gid, err)
			}
		})
	}
	t.Cleanup(rollback)
	return rollback
}

// quote is s as an SQL string literal.
func quote(s string) string {
	out := []byte{'\''}
	for i := 0; i < len(s); i++ {
		if s[i] == '\'' {
			out = append(out, '\'')
		}
		out = append(out, s[i])
	}
	return string(append(out, '\''))
}
