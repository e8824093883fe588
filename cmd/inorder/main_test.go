package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/inorder-dev/inorder/internal/harness/pgtest"
)

var binary string

// testVersion is the version the tests' inorder binary is stamped with, as make build stamps one.
const testVersion = "v0.0.0-clitest"

func TestMain(m *testing.M) {
	if os.Getenv(publicChainChild) != "" {
		os.Exit(m.Run()) // the child of a test that needs a process of its own: no binary, no database
	}
	dir, err := os.MkdirTemp("", "inorder-bin-")
	if err != nil {
		panic(err)
	}
	binary = filepath.Join(dir, "inorder")
	if out, err := exec.Command("go", "build", "-ldflags", "-X main.version="+testVersion, "-o", binary, ".").CombinedOutput(); err != nil {
		_ = os.RemoveAll(dir)
		panic(fmt.Sprintf("build inorder: %v\n%s", err, out))
	}
	// Not a defer: os.Exit runs none, and the binary is tens of megabytes left in the temporary
	// directory by every run.
	code := pgtest.Run(m)
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// proc is a running inorder binary.
type proc struct {
	cmd    *exec.Cmd
	mu     sync.Mutex
	lines  []string // stdout lines
	stderr bytes.Buffer
	done   chan struct{}
}

func startBinary(t *testing.T, env []string, args ...string) *proc {
	t.Helper()
	p := &proc{cmd: exec.Command(binary, args...), done: make(chan struct{})}
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stderr = &lockedWriter{mu: &p.mu, w: &p.stderr}
	out, err := p.cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, p.cmd.Start())
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			p.mu.Lock()
			p.lines = append(p.lines, sc.Text())
			p.mu.Unlock()
		}
		_ = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.done
	})
	return p
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}

func (p *proc) output() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.lines...)
}

func (p *proc) logs() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stderr.String()
}

func (p *proc) wait(t *testing.T) int {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		t.Fatalf("inorder did not exit; logs:\n%s", p.logs())
	}
	return p.cmd.ProcessState.ExitCode()
}

// runBinary runs a command to completion and returns its exit code, stdout and stderr.
func runBinary(t *testing.T, env []string, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if _, ok := err.(*exec.ExitError); err != nil && !ok {
		require.NoError(t, err)
	}
	return cmd.ProcessState.ExitCode(), stdout.String(), stderr.String()
}

type bundle struct {
	db  *pgtest.DB
	env []string
}

func setup(t *testing.T) *bundle {
	t.Helper()
	db := pgtest.New(t)
	db.Exec(t, `CREATE TABLE bookings (
			id          bigserial PRIMARY KEY,
			aggregate_id text NOT NULL,
			amount      float8 NOT NULL,
			details     jsonb,
			created_at  timestamptz NOT NULL DEFAULT clock_timestamp()
		);
		CREATE INDEX ON bookings (created_at, id)`)
	pgtest.AddClock(t, db, "bookings") // inorder migrate --table bookings, as the README says
	return &bundle{db: db, env: []string{"DATABASE_URL=" + db.URL}}
}

func (b *bundle) book(t *testing.T, n int, amount string) {
	t.Helper()
	b.db.Exec(t, fmt.Sprintf(`INSERT INTO bookings (aggregate_id, amount, details)
		SELECT 'customer-' || (g %% 3), %s, jsonb_build_object('seats', g) FROM generate_series(1, %d) g`, amount, n))
}

// position returns booking_sms's durable position id, "" before it has one.
func (b *bundle) position(t *testing.T) string {
	t.Helper()
	var id *string
	err := b.db.Pool.QueryRow(context.Background(),
		"SELECT position_id FROM inorder.position WHERE process_name = 'booking_sms'").Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return "" // not registered yet
	}
	require.NoError(t, err)
	if id == nil {
		return "" // at the beginning
	}
	return *id
}

func runArgs(extra ...string) []string {
	return append([]string{"run", "--process", "booking_sms", "--table", "bookings", "--start-from", "beginning", "--poll-interval", "20ms",
		"--retry-min", "20ms", "--retry-max", "100ms"}, extra...)
}

func TestMigrateIsSafeConcurrentlyAndPrintsItsSQL(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t, pgtest.Options{Empty: true})
	env := []string{"DATABASE_URL=" + db.URL}
	var wg sync.WaitGroup
	codes := make([]int, 4)
	for i := range codes {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			codes[i], _, _ = runBinary(t, env, "migrate")
		}(i)
	}
	wg.Wait()
	require.Equal(t, []int{0, 0, 0, 0}, codes)
	var versions, cursors int
	require.NoError(t, db.Pool.QueryRow(context.Background(),
		"SELECT count(*), count(DISTINCT version) FROM inorder.schema_migration").Scan(&versions, &cursors))
	require.Equal(t, versions, cursors, "each version recorded once")
	code, _, stderr := runBinary(t, env, "migrate")
	require.Zero(t, code)
	require.Contains(t, stderr, "schema is current")

	code, stdout, _ := runBinary(t, nil, "migrate", "--print")
	require.Zero(t, code)
	require.Contains(t, stdout, "CREATE TABLE inorder.cursor")
	require.Contains(t, stdout, "INSERT INTO inorder.schema_migration")
}

func TestRunPrintsJSONLinesInOrderAndStopsCleanlyOnSIGTERM(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.book(t, 5, "g * 1.5")
	p := startBinary(t, b.env, runArgs("--columns", "id,aggregate_id,amount,details,created_at")...)
	require.Eventually(t, func() bool { return len(p.output()) == 5 }, 20*time.Second, 5*time.Millisecond, p.logs())
	b.book(t, 3, "2") // rows arriving while it runs
	require.Eventually(t, func() bool { return len(p.output()) == 8 }, 20*time.Second, 5*time.Millisecond, p.logs())

	lines := p.output()
	var first struct {
		Process string                     `json:"process"`
		Record  map[string]json.RawMessage `json:"record"`
	}
	require.NoError(t, json.Unmarshal([]byte(lines[0]), &first))
	require.Equal(t, "booking_sms", first.Process)
	require.True(t, strings.HasPrefix(lines[0], `{"process":"booking_sms","record":{"id":1,"aggregate_id":"customer-1","amount":1.5,"details":{"seats":1},"created_at":"`),
		"exact line format: %s", lines[0])
	for i, l := range lines {
		require.Contains(t, l, fmt.Sprintf(`"id":%d,`, i+1), "in order")
	}

	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	require.Zero(t, p.wait(t), p.logs())
	require.Contains(t, p.logs(), "cursor released")
	var pos string
	require.NoError(t, b.db.Pool.QueryRow(context.Background(),
		"SELECT position_id FROM inorder.position WHERE process_name = 'booking_sms'").Scan(&pos))
	require.Equal(t, "8", pos, "the position is durable")
	code, stdout, _ := runBinary(t, b.env, "status", "--json")
	require.Zero(t, code)
	var rep statusDoc
	require.NoError(t, json.Unmarshal([]byte(stdout), &rep))
	require.Len(t, rep.Processes, 1)
	require.False(t, rep.Processes[0].Locked, "ownership given up before exit")
	require.Equal(t, int64(0), rep.Processes[0].Behind.Rows)
	// The server drops the closed session from pg_stat_activity a moment after the client hung up.
	require.Eventually(t, func() bool {
		_, stdout, _ := runBinary(t, b.env, "status", "--json")
		var rep statusDoc
		return json.Unmarshal([]byte(stdout), &rep) == nil && len(rep.Processes) == 1 && rep.Processes[0].State == "not running"
	}, 10*time.Second, 20*time.Millisecond)
}

func TestAKilledInstanceIsTakenOverByTheStandby(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.book(t, 4, "1")
	first := startBinary(t, b.env, runArgs("--instance", "first")...)
	require.Eventually(t, func() bool { return len(first.output()) == 4 }, 20*time.Second, 5*time.Millisecond, first.logs())
	// A record is printed before its position commits; killed in between, the first would leave record 4
	// to be delivered again, as it should. Here the kill comes once the position is durable.
	require.Eventually(t, func() bool { return b.position(t) == "4" }, 20*time.Second, 5*time.Millisecond, first.logs())
	second := startBinary(t, b.env, runArgs("--instance", "second")...)
	require.Eventually(t, func() bool {
		_, stdout, _ := runBinary(t, b.env, "status", "--json")
		var rep statusDoc
		return json.Unmarshal([]byte(stdout), &rep) == nil && len(rep.Processes) == 1 &&
			rep.Processes[0].Connected == 2 && rep.Processes[0].Holder == "first"
	}, 20*time.Second, 20*time.Millisecond)
	code, text, stderr := runBinary(t, b.env, "status")
	require.Zero(t, code, stderr)
	require.Regexp(t, `first \(pid \d+\) \+1 standing by`, text, "text status shows the standby")
	require.Eventually(t, func() bool {
		return regexp.MustCompile(`"owner":"first",.*"message":"another instance works the process; standing by"`).
			MatchString(second.logs())
	}, 20*time.Second, 20*time.Millisecond, "the standby says once that it stands by, and who works the process")
	require.Equal(t, 1, strings.Count(second.logs(), "standing by"))

	require.NoError(t, first.cmd.Process.Kill()) // SIGKILL: no chance to unlock
	first.wait(t)
	b.book(t, 3, "1")
	require.Eventually(t, func() bool { return len(second.output()) == 3 }, 20*time.Second, 5*time.Millisecond, second.logs())
	for i, l := range second.output() {
		require.Contains(t, l, fmt.Sprintf(`"id":%d,`, 5+i))
	}
}

func TestStatusExplainsAHaltedStream(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.book(t, 2, "1")
	b.book(t, 1, "'NaN'") // JSON has no NaN: the stdout handler cannot encode record 3
	b.book(t, 1, "1")
	p := startBinary(t, b.env, runArgs()...)
	var rep statusDoc
	require.Eventually(t, func() bool {
		_, stdout, _ := runBinary(t, b.env, "status", "--json", "--process", "booking_sms")
		return json.Unmarshal([]byte(stdout), &rep) == nil && len(rep.Processes) == 1 &&
			rep.Processes[0].Halt != nil && rep.Processes[0].Halt.Attempts >= 2
	}, 20*time.Second, 20*time.Millisecond, p.logs())
	ps := rep.Processes[0]
	require.Equal(t, "halted", ps.State)
	require.Equal(t, "3", ps.Halt.RecordID)
	require.Contains(t, ps.Halt.Error, "encode record 3 as JSON")
	require.Contains(t, ps.Halt.Error, "NaN")
	require.Equal(t, "2", *ps.Position.ID, "the position stays before the halted record")
	require.Equal(t, int64(2), ps.Behind.Rows)
	require.Len(t, p.output(), 2, "nothing after the halted record was delivered")

	code, text, _ := runBinary(t, b.env, "status")
	require.Zero(t, code)
	require.Contains(t, text, "booking_sms halted on record 3")
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(l, "    ") {
			continue // a command to copy, whole on its line
		}
		require.LessOrEqual(t, len([]rune(l)), 100, "status fits 100 columns: %q", l)
	}
	// The commands it suggests are whole, each on a line of its own, however long: they can be copied.
	require.Contains(t, text, "\n    inorder retry --process booking_sms\n")
	require.Contains(t, text, "\n    inorder skip --process booking_sms --record 3 --reason '...'\n")
}

func TestBadInputGetsOneClearLine(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.book(t, 1, "1")
	b.db.Exec(t, `CREATE TABLE nbookings (id bigserial PRIMARY KEY, created_at timestamptz NOT NULL DEFAULT now());
		CREATE INDEX ON nbookings (created_at, id)`)
	for _, tc := range []struct {
		name string
		env  []string
		args []string
		code int
		want string
	}{
		{"unknown table", b.env, []string{"run", "--process", "p1", "--table", "nope"}, 1,
			`inorder run: process "p1": invalid source: table "nope" does not exist`},
		{"a table name with a typo", b.env, []string{"run", "--process", "p1", "--table", "booking"}, 1,
			`table "booking" does not exist (or is not on the search_path); did you mean bookings?`},
		{"a qualified table name with a typo", b.env, []string{"run", "--process", "p1", "--table", "public.bookngs"}, 1,
			`table "public.bookngs" does not exist (or is not on the search_path); did you mean public.bookings?`},
		{"unknown column", b.env, []string{"run", "--process", "p2", "--table", "bookings", "--columns", "id,colour"}, 1,
			`selected column "colour" does not exist in public.bookings`},
		{"bad checkpoint", b.env, runArgs("--checkpoint", "sometimes"), 2, `--checkpoint must be record or batch, got "sometimes"`},
		{"bad horizon", b.env, runArgs("--horizon", "soon"), 2, `--horizon: horizon "soon" is none of auto, clock, writers and transactions`},
		{"a table without the insert clock", b.env, []string{"run", "--process", "p4", "--table", "nbookings"}, 1,
			`public.nbookings has no insert clock, so a created_at the application writes (an ORM writes it whatever the column's default says) can date a row earlier than rows already delivered, and it would be skipped; add the clock, online and without a rewrite: inorder migrate --table public.nbookings`},
		{"an opt-in on a table with the clock", b.env, runArgs("--horizon", "transactions"), 1,
			`public.bookings has inorder's insert clock, which orders it whoever writes created_at; the transactions horizon orders by created_at instead`},
		{"writers horizon on a now() default", b.env, []string{"run", "--process", "p3", "--table", "nbookings", "--horizon", "writers"}, 1,
			`public.nbookings.created_at defaults to now(), and rows that take this default would be skipped by the writers horizon`},
		{"invalid database url", []string{"DATABASE_URL=postgres://u:hunter2@host:notaport/db"}, []string{"run", "--process", "p", "--table", "t"}, 2,
			"invalid --database-url"},
		{"no database", []string{"DATABASE_URL="}, []string{"status"}, 2, "no database: set --database-url or DATABASE_URL"},
		{"handler timeout over idle timeout", b.env, runArgs("--handler-timeout", "2m"), 2, "--handler-timeout (2m0s) must be shorter than --idle-timeout (1m0s)"},
		{"webhook flags with stdout", b.env, runArgs("--webhook-url", "http://x"), 2, "--webhook-* and --pubsub-* flags need --handler webhook or pubsub"},
		{"webhook without secret", b.env, runArgs("--handler", "webhook", "--webhook-url", "http://127.0.0.1:1", "--webhook-secret-env", "INORDER_TEST_UNSET"), 2,
			"--webhook-secret-env names INORDER_TEST_UNSET, which is not set or empty"},
		{"unknown flag", b.env, []string{"run", "--colour", "blue"}, 2, "flag provided but not defined: -colour"},
		{"no xmin threshold for status", b.env, []string{"status", "--xmin-hold-after", "0s"}, 2, "--xmin-hold-after must be positive, got 0s"},
		{"no xmin threshold for the console", b.env, []string{"console", "--xmin-hold-after", "-1m"}, 2, "--xmin-hold-after must be positive, got -1m0s"},
		{"no xmin threshold for the metrics", b.env, runArgs("--metrics-addr", "127.0.0.1:0", "--xmin-hold-after", "0s"), 2,
			"--xmin-hold-after must be positive, got 0s"},
		{"unknown command", nil, []string{"frobnicate"}, 2, `unknown command "frobnicate"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, stderr := runBinary(t, tc.env, tc.args...)
			require.Equal(t, tc.code, code, stderr)
			require.Empty(t, stdout)
			require.Contains(t, stderr, tc.want)
			require.NotContains(t, stderr, "hunter2", "no password echoed")
			if tc.name != "unknown command" {
				require.Equal(t, 1, strings.Count(strings.TrimSpace(stderr), "\n")+1, "one line: %q", stderr)
			}
		})
	}
	var n int
	require.NoError(t, b.db.Pool.QueryRow(context.Background(),
		"SELECT count(*) FROM inorder.position WHERE position_id IS NOT NULL").Scan(&n))
	require.Zero(t, n, "no position moved")
}

func TestRunServesMetricsAndHealth(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.book(t, 6, "1")
	p := startBinary(t, b.env, runArgs("--metrics-addr", "127.0.0.1:0")...)
	addr := metricsAddr(t, p)
	get := func(path string) (int, string) {
		resp, err := http.Get("http://" + addr + path)
		require.NoError(t, err)
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, string(body)
	}
	require.Eventually(t, func() bool {
		code, body := get("/metrics")
		return code == 200 && strings.Contains(body, `inorder_records_handled_total{process="booking_sms"} 6`)
	}, 20*time.Second, 10*time.Millisecond)
	_, body := get("/metrics")
	require.Contains(t, body, `inorder_build_info{goversion="`+runtime.Version()+`",revision="",version="`+testVersion+`"} 1`,
		"the version the binary was stamped with, as inorder version says")
	require.Equal(t, 1, strings.Count(body, "\ninorder_build_info{"), "one series")
	code, _ := get("/healthz")
	require.Equal(t, 200, code)
	require.Eventually(t, func() bool { code, _ := get("/readyz"); return code == 200 }, 20*time.Second, 10*time.Millisecond)
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	require.Zero(t, p.wait(t), p.logs())
}

// metricsAddr waits until p says where it serves /metrics, and returns that address.
func metricsAddr(t *testing.T, p *proc) string {
	t.Helper()
	var addr string
	require.Eventually(t, func() bool {
		for _, l := range strings.Split(p.logs(), "\n") {
			var line struct{ Addr, Message string }
			if json.Unmarshal([]byte(l), &line) == nil && line.Message == "serving /metrics, /healthz and /readyz" {
				addr = line.Addr
				return true
			}
		}
		return false
	}, 20*time.Second, 5*time.Millisecond, p.logs())
	return addr
}

// TestMigrateTableGivesTheInsertClock: what the refusal of a table without the clock says to run does
// what it says: `inorder migrate --table` adds it, and run then starts; --print prints it.
func TestMigrateTableGivesTheInsertClock(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.db.Exec(t, `CREATE TABLE orders (id bigserial PRIMARY KEY, created_at timestamptz NOT NULL, note text);
		CREATE INDEX ON orders (created_at, id);
		INSERT INTO orders (created_at, note) VALUES (now() - interval '1 hour', 'before the clock')`)
	args := []string{"run", "--process", "orders", "--table", "orders", "--start-from", "beginning", "--poll-interval", "20ms"}
	code, _, stderr := runBinary(t, b.env, args...)
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "inorder migrate --table public.orders")
	code, _, stderr = runBinary(t, b.env, "migrate", "--table", "public.orders")
	require.Zero(t, code, stderr)
	require.Contains(t, stderr, "insert clock on public.orders in place")
	code, stdout, _ := runBinary(t, nil, "migrate", "--print", "--table", "orders")
	require.Zero(t, code)
	require.Contains(t, stdout, `ALTER TABLE "orders" ADD COLUMN IF NOT EXISTS "inorder_at" timestamptz;`)
	require.Contains(t, stdout, `CREATE INDEX CONCURRENTLY IF NOT EXISTS "orders_inorder_at_idx" ON "orders" ((coalesce("inorder_at", "created_at")), "id");`)

	p := startBinary(t, b.env, args...)
	// Dated by the application an hour back, after the first row: delivered all the same, in insert order.
	b.db.Exec(t, `INSERT INTO orders (created_at, note) VALUES (now() - interval '2 hours', 'dated back')`)
	require.Eventually(t, func() bool { return len(p.output()) == 2 }, 20*time.Second, 5*time.Millisecond, p.logs())
	out := strings.Join(p.output(), "\n")
	require.Less(t, strings.Index(out, "before the clock"), strings.Index(out, "dated back"), out)
	require.NotContains(t, out, "inorder_at", "the clock is inorder's, not the record's")
}

func TestMigrateNotifyAndRunListen(t *testing.T) {
	t.Parallel()
	b := setup(t)
	code, _, stderr := runBinary(t, b.env, "migrate", "--notify", "bookings")
	require.Zero(t, code, stderr)
	require.Contains(t, stderr, "insert-notification trigger on bookings in place")
	code, stdout, _ := runBinary(t, nil, "migrate", "--print", "--notify", "sales.bookings")
	require.Zero(t, code)
	require.Contains(t, stdout, `CREATE OR REPLACE TRIGGER "inorder_notify" AFTER INSERT ON "sales"."bookings" FOR EACH STATEMENT`)
	code, _, stderr = runBinary(t, b.env, "migrate", "--notify", "nope")
	require.Equal(t, 1, code)
	require.Contains(t, stderr, `notify trigger: table "nope" does not exist`)

	// With a poll interval of an hour, only the notification can deliver rows inserted after the start.
	p := startBinary(t, b.env, "run", "--process", "booking_sms", "--table", "bookings", "--start-from", "beginning", "--listen", "--poll-interval", "1h")
	require.Eventually(t, func() bool { return strings.Contains(p.logs(), "listening for insert notifications") },
		20*time.Second, 5*time.Millisecond, p.logs())
	b.book(t, 3, "1")
	require.Eventually(t, func() bool { return len(p.output()) == 3 }, 20*time.Second, 5*time.Millisecond, p.logs())
}

func TestHostileProcessNamesAndRefusedRolesAreHandled(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.book(t, 3, "1")
	name := `o'brien"; DROP TABLE bookings; --`
	p := startBinary(t, b.env, "run", "--process", name, "--table", "bookings", "--start-from", "beginning", "--poll-interval", "20ms")
	require.Eventually(t, func() bool { return len(p.output()) == 3 }, 20*time.Second, 5*time.Millisecond, p.logs())
	require.Contains(t, p.output()[0], `"process":"o'brien\"; DROP TABLE bookings; --"`)
	code, stdout, stderr := runBinary(t, b.env, "status", "--json", "--process", name)
	require.Zero(t, code, stderr)
	require.Contains(t, stdout, `"process": "o'brien\"; DROP TABLE bookings; --"`)
	var n int
	require.NoError(t, b.db.Pool.QueryRow(context.Background(), "SELECT count(*) FROM bookings").Scan(&n))
	require.Equal(t, 3, n, "the table is intact")

	url := strings.Replace(b.db.URL, "postgres://postgres@", "postgres://nosuchrole@", 1)
	code, stdout, stderr = runBinary(t, []string{"DATABASE_URL=" + url}, "run", "--process", "p", "--table", "bookings")
	require.Equal(t, 1, code)
	require.Empty(t, stdout)
	require.Contains(t, stderr, `role "nosuchrole" does not exist`)
	require.Equal(t, 1, strings.Count(strings.TrimSpace(stderr), "\n")+1, "one line: %q", stderr)
}

// TestALeastPrivilegedRoleRunsTheProcessor: the owner migrates; a role with only the documented grants
// runs the processor, reads status and is refused what it was not granted.
func TestALeastPrivilegedRoleRunsTheProcessor(t *testing.T) {
	t.Parallel()
	b := setup(t)
	role := b.db.Name + "_runner"
	b.db.Exec(t, fmt.Sprintf(`CREATE ROLE %[1]s LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE;
		GRANT CONNECT ON DATABASE %[2]s TO %[1]s;
		GRANT SELECT ON bookings TO %[1]s;
		GRANT USAGE ON SCHEMA inorder TO %[1]s;
		GRANT SELECT, INSERT, UPDATE ON inorder.cursor TO %[1]s;
		GRANT SELECT, INSERT, UPDATE, DELETE ON inorder.instance, inorder.parked TO %[1]s;
		GRANT SELECT, INSERT, TRUNCATE ON inorder.checkpoint, inorder.checkpoint_0, inorder.checkpoint_1, inorder.checkpoint_2 TO %[1]s;
		GRANT USAGE ON SEQUENCE inorder.checkpoint_seq TO %[1]s;
		GRANT SELECT ON inorder.position TO %[1]s;
		GRANT SELECT, INSERT, UPDATE, DELETE ON inorder.source_state TO %[1]s`, role, b.db.Name))
	env := []string{"DATABASE_URL=" + strings.Replace(b.db.URL, "postgres://postgres@", "postgres://"+role+"@", 1)}
	b.book(t, 4, "1")
	p := startBinary(t, env, runArgs()...)
	require.Eventually(t, func() bool { return len(p.output()) == 4 }, 20*time.Second, 5*time.Millisecond, p.logs())
	// A record is printed before its position commits: idle once the last one's has.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		code, stdout, stderr := runBinary(t, env, "status", "--json")
		assert.Zero(c, code, stderr)
		assert.Contains(c, stdout, `"state": "idle"`)
	}, 20*time.Second, 20*time.Millisecond)
	code, _, stderr := runBinary(t, env, "pause", "--process", "booking_sms", "--actor", "x")
	require.Equal(t, 1, code, "operator actions need the audit grants")
	require.Contains(t, stderr, "permission denied")
	code, _, stderr = runBinary(t, env, "migrate")
	require.Equal(t, 1, code, "migrations are the owner's")
	require.Contains(t, stderr, "permission denied")
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	require.Zero(t, p.wait(t), p.logs())
}
