package pgtest

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// hbaMu serialises the changes the tests of one binary make to the cluster's pg_hba.conf.
var hbaMu sync.Mutex

// PasswordRole creates a login role of its own for the test, with password, that must give it: a rule of
// its own at the top of the cluster's pg_hba.conf asks it for scram-sha-256 over TCP, where the cluster
// trusts every other role. The role is a member of the role of db's URL, so that it may do in db what that
// role may. It returns the role's name and a URL to db as it without a password. The rule and the role go
// when the test ends. It skips the test without the throwaway cluster, whose pg_hba.conf the test may
// change.
func PasswordRole(t testing.TB, db *DB, password string) (role, url string) {
	t.Helper()
	if Cluster() == nil {
		t.Skip("needs the throwaway cluster, whose pg_hba.conf the test may change")
	}
	ctx := context.Background()
	role = "pw_" + strings.ToLower(db.Name)
	name := pgx.Identifier{role}.Sanitize()
	var owner string
	if err := db.Pool.QueryRow(ctx, "SELECT current_user").Scan(&owner); err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	if _, err := db.Pool.Exec(ctx, "CREATE ROLE "+name+" LOGIN PASSWORD "+quote(password)+"; GRANT "+
		pgx.Identifier{owner}.Sanitize()+" TO "+name); err != nil {
		t.Fatalf("pgtest: create role %s: %v", role, err)
	}
	rules := fmt.Sprintf("host all %s 0.0.0.0/0 scram-sha-256\nhost all %s ::/0 scram-sha-256\n", role, role)
	EditHBA(t, db, func(hba string) string { return rules + hba }, func(hba string) string {
		return strings.Replace(hba, rules, "", 1)
	})
	t.Cleanup(func() {
		if _, err := db.Pool.Exec(context.Background(), "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = $1", role); err != nil {
			t.Errorf("pgtest: end the sessions of %s: %v", role, err)
		}
		if _, err := db.Pool.Exec(context.Background(), "DROP OWNED BY "+name+"; DROP ROLE "+name); err != nil {
			t.Errorf("pgtest: drop role %s: %v", role, err)
		}
	})
	cc, err := pgx.ParseConfig(db.URL)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	host := cc.Host
	if strings.Contains(host, ":") {
		host = "[" + host + "]"
	}
	url = fmt.Sprintf("postgres://%s@%s:%d/%s?sslmode=disable", role, host, cc.Port, cc.Database)
	// pg_reload_conf only signals the server: wait until a wrong password is refused, so that the rule
	// holds for what the test does next.
	deadline := time.Now().Add(10 * time.Second)
	for {
		conn, err := pgx.Connect(ctx, url+"&password=not-"+password)
		if err != nil {
			break
		}
		_ = conn.Close(ctx)
		if time.Now().After(deadline) {
			t.Fatalf("pgtest: the server does not ask %s for a password 10s after pg_hba.conf asked it to", role)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return role, url
}

// EditHBA changes the cluster's pg_hba.conf with edit and reloads it, and with undo when the test ends:
// each must change only its own lines, since the other tests of the binary may have lines of theirs.
func EditHBA(t testing.TB, db *DB, edit, undo func(hba string) string) {
	t.Helper()
	var path string
	if err := db.Pool.QueryRow(context.Background(), "SHOW hba_file").Scan(&path); err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	change := func(f func(string) string) error {
		hbaMu.Lock()
		defer hbaMu.Unlock()
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if err := os.WriteFile(path, []byte(f(string(b))), 0o600); err != nil {
			return err
		}
		_, err = db.Pool.Exec(context.Background(), "SELECT pg_reload_conf()")
		return err
	}
	if err := change(edit); err != nil {
		t.Fatalf("pgtest: edit pg_hba.conf: %v", err)
	}
	t.Cleanup(func() {
		if err := change(undo); err != nil {
			t.Errorf("pgtest: restore pg_hba.conf: %v", err)
		}
	})
}
