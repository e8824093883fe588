package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/inorder-dev/inorder/cursor"
	"github.com/inorder-dev/inorder/internal/harness/pgtest"
)

// TestStatusAndTheLibraryAgreeOnAStream: `inorder status` and cursor.Read, as a service's admin endpoint
// serves it, say the same state of one stream while a record is in flight (running), once it has caught
// up (idle: the listing used to say running there), and once it stopped (not running).
func TestStatusAndTheLibraryAgreeOnAStream(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.book(t, 3, "1")
	holding := make(chan struct{}) // closed once the receiver holds record 2
	release := make(chan struct{})
	var once sync.Once
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body struct{ ID string }
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		if body.ID == "2" {
			once.Do(func() { close(holding) })
			<-release
		}
	}))
	t.Cleanup(srv.Close)
	env := append(append([]string{}, b.env...), "INORDER_TEST_SECRET=s3cret")
	p := startBinary(t, env, runArgs("--handler", "webhook", "--webhook-url", srv.URL,
		"--webhook-secret-env", "INORDER_TEST_SECRET")...)

	states := func() (cli, library string) {
		t.Helper()
		code, stdout, stderr := runBinary(t, b.env, "status", "--json", "--process", "booking_sms")
		require.Zero(t, code, stderr)
		var rep statusDoc
		require.NoError(t, json.Unmarshal([]byte(stdout), &rep), stdout)
		require.Len(t, rep.Processes, 1)
		procs, err := cursor.Read(context.Background(), b.db.Pool, cursor.ReadOpts{Process: "booking_sms"})
		require.NoError(t, err)
		require.Len(t, procs, 1)
		enc, err := json.Marshal(procs[0].Info)
		require.NoError(t, err)
		var served processDoc
		require.NoError(t, json.Unmarshal(enc, &served))
		require.Equal(t, string(procs[0].Info.Status), served.State, "cursor.Info encodes its Status as the state")
		return rep.Processes[0].State, served.State
	}

	select {
	case <-holding:
	case <-p.done:
		t.Fatalf("inorder run exited: %s", p.logs())
	}
	cli, library := states()
	require.Equal(t, "running", cli, "record 2 in flight, record 3 behind")
	require.Equal(t, cli, library)

	close(release)
	require.Eventually(t, func() bool { return b.position(t) == "3" }, 20*time.Second, 5*time.Millisecond, p.logs())
	cli, library = states()
	require.Equal(t, "idle", cli, "caught up")
	require.Equal(t, cli, library, "a caught-up stream is idle to the library too")

	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	require.Zero(t, p.wait(t), p.logs())
	cli, library = states()
	require.Equal(t, "not running", cli)
	require.Equal(t, cli, library)
}

// TestStatusNamesWhatHoldsTheXminHorizon: a report idle in REPEATABLE READ and a forgotten prepared
// transaction hold the database's xmin horizon; past --xmin-hold-after, `inorder status` names both, in
// its JSON and in its text, with what it costs and the statements to end them. A role without
// pg_read_all_stats, which sees neither the report's state nor its start, still gets it named, as the
// holder of the oldest xmin, with why its age is unknown.
func TestStatusNamesWhatHoldsTheXminHorizon(t *testing.T) {
	t.Parallel()
	b := setup(t)
	h := pgtest.HoldSnapshot(t, b.db.URL, "nightly-report")
	gid := "forgotten-" + b.db.Name
	rollback := pgtest.Prepare(t, b.db, gid)

	var rep statusDoc
	var report, prepared *xminHolderDoc
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		code, stdout, stderr := runBinary(t, b.env, "status", "--json", "--xmin-hold-after", "1s")
		require.Zero(c, code, stderr)
		rep = statusDoc{}
		require.NoError(c, json.Unmarshal([]byte(stdout), &rep), stdout)
		require.NotNil(c, rep.XminHold, stdout)
		report, prepared = nil, nil
		for i, x := range rep.XminHold.Holders {
			switch {
			case x.Kind == "backend" && x.PID == h.PID:
				report = &rep.XminHold.Holders[i]
			case x.Kind == "prepared transaction" && x.GID == gid:
				prepared = &rep.XminHold.Holders[i]
			}
		}
		require.NotNil(c, report, stdout)
		require.NotNil(c, prepared, stdout)
	}, 20*time.Second, 20*time.Millisecond)
	require.Empty(t, rep.XminHoldError)
	require.True(t, rep.XminHold.Held)
	require.Equal(t, b.db.Name, rep.XminHold.Database)
	require.Equal(t, 1.0, rep.XminHold.ThresholdSeconds)
	require.NotEmpty(t, rep.XminHold.Cost)
	require.Equal(t, "nightly-report", report.Application)
	require.Equal(t, "idle in transaction", report.State)
	require.NotNil(t, report.XactStart)
	require.Equal(t, "transaction start", report.SinceFrom)
	require.GreaterOrEqual(t, report.HeldSeconds, 1.0)
	require.Equal(t, b.db.Name, prepared.Database)
	require.NotNil(t, prepared.PreparedAt)
	require.Equal(t, "prepared", prepared.SinceFrom)

	code, text, stderr := runBinary(t, b.env, "status", "--xmin-hold-after", "1s")
	require.Zero(t, code, stderr)
	words := strings.Join(strings.Fields(text), " ") // as read, whatever the wrapping
	require.Contains(t, words, "The xmin horizon has been held for")
	require.Contains(t, words, fmt.Sprintf("backend pid %d of database %s (user postgres, application nightly-report)", h.PID, b.db.Name))
	require.Contains(t, words, fmt.Sprintf("prepared transaction '%s' of database %s (owner postgres)", gid, b.db.Name))
	require.Contains(t, words, "What it costs: inorder is unaffected")
	require.Contains(t, text, fmt.Sprintf("\n    SELECT pg_terminate_backend(%d);\n", h.PID))
	require.Contains(t, text, fmt.Sprintf("\n    ROLLBACK PREPARED '%s';\n", gid))
	for _, l := range strings.Split(text, "\n") {
		if !strings.HasPrefix(l, "    ") { // a command to copy is whole on its line
			require.LessOrEqual(t, len([]rune(l)), 100, "status fits 100 columns: %q", l)
		}
	}
	code, text, stderr = runBinary(t, b.env, "status")
	require.Zero(t, code, stderr)
	require.NotContains(t, text, "The xmin horizon has been held", "not for a minute yet, the default")

	// As a role without pg_read_all_stats: named, untimed, as the oldest xmin once the prepared
	// transaction is gone (it would hold an older one), and older transactions of other tests have ended.
	rollback()
	url := pgtest.Unprivileged(t, b.db)
	b.db.Exec(t, fmt.Sprintf(`GRANT USAGE ON SCHEMA inorder TO %[1]s; GRANT SELECT ON ALL TABLES IN SCHEMA inorder TO %[1]s`,
		pgx.Identifier{b.db.Name + "_watcher"}.Sanitize()))
	env := []string{"DATABASE_URL=" + url}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		code, stdout, stderr := runBinary(t, env, "status", "--json", "--xmin-hold-after", "1s")
		require.Zero(c, code, stderr)
		rep = statusDoc{}
		require.NoError(c, json.Unmarshal([]byte(stdout), &rep), stdout)
		require.Empty(c, rep.XminHoldError)
		require.NotNil(c, rep.XminHold.Oldest, stdout)
		require.Equal(c, h.PID, rep.XminHold.Oldest.PID, stdout)
	}, 20*time.Second, 20*time.Millisecond)
	o := rep.XminHold.Oldest
	require.True(t, o.StartHidden)
	require.Equal(t, "nightly-report", o.Application)
	require.Nil(t, o.XactStart, "hidden")
	for _, x := range rep.XminHold.Holders {
		require.NotEqual(t, h.PID, x.PID, "a single look cannot time what it cannot see the start of")
	}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		code, text, stderr := runBinary(t, env, "status", "--xmin-hold-after", "1s")
		require.Zero(c, code, stderr)
		words := strings.Join(strings.Fields(text), " ")
		require.Contains(c, words, fmt.Sprintf("is held by backend pid %d of database %s", h.PID, b.db.Name))
		require.Contains(c, words, "pg_read_all_stats")
	}, 20*time.Second, 20*time.Millisecond)
}

// TestRunMetricsNameWhatHoldsTheXminHorizon: `inorder run --metrics-addr` names, past --xmin-hold-after, the
// session that holds the database's xmin horizon in inorder_xmin_holder, and says how long in
// inorder_xmin_held_seconds.
func TestRunMetricsNameWhatHoldsTheXminHorizon(t *testing.T) {
	t.Parallel()
	b := setup(t)
	p := startBinary(t, b.env, runArgs("--metrics-addr", "127.0.0.1:0", "--xmin-hold-after", "1s")...)
	url := "http://" + metricsAddr(t, p) + "/metrics"
	h := pgtest.HoldSnapshot(t, b.db.URL, "nightly-report")
	holder := fmt.Sprintf(`inorder_xmin_holder{application="nightly-report",database=%q,kind="backend",name="",pid="%d",user="postgres"} `,
		b.db.Name, h.PID)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		resp, err := http.Get(url)
		require.NoError(c, err)
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		require.NoError(c, err)
		require.Contains(c, string(body), holder)
		require.NotContains(c, string(body), "inorder_xmin_held_seconds 0\n")
	}, 30*time.Second, 50*time.Millisecond, p.logs())
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	require.Zero(t, p.wait(t), p.logs())
}

// TestStatusListsEveryCursorRowByName: `inorder status --json` prints every cursor row, a partitioned
// process's own and its partitions', by name (byte order, as the server's C collation sorts them); with
// --process, the process's own row alone.
func TestStatusListsEveryCursorRowByName(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.db.Exec(t, `INSERT INTO inorder.cursor (process_name, partitions) VALUES
		('split', 12), ('split#10/12', NULL), ('split#2/12', NULL), ('single', NULL), ('split-v2', NULL)`)
	names := func(args ...string) []string {
		t.Helper()
		code, stdout, stderr := runBinary(t, b.env, append([]string{"status", "--json"}, args...)...)
		require.Zero(t, code, stderr)
		var rep statusDoc
		require.NoError(t, json.Unmarshal([]byte(stdout), &rep), stdout)
		var out []string
		for _, p := range rep.Processes {
			out = append(out, p.Process)
		}
		return out
	}
	require.Equal(t, []string{"single", "split", "split#10/12", "split#2/12", "split-v2"}, names())
	require.Equal(t, []string{"split"}, names("--process", "split"))
}
