package fault

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inorder-dev/inorder/internal/harness/pgtest"
)

// schema is the source table; its copy without the insert clock, kept by a trigger in the inserting
// transaction, which the streams on the transactions horizon read by created_at (a table with the clock
// refuses that opt-in); the aggregates the writers lock; and a trigger that logs every committed write of
// the cursor row with the application_name of the session that made it and the owner (epoch and instance)
// the row names after it. A world gives events the insert clock (inorder migrate --table events) and runs
// auditCheckpoints after it.
const schema = `
	CREATE TABLE events (
		id           bigserial PRIMARY KEY,
		aggregate_id text NOT NULL,
		seq          integer NOT NULL,
		created_at   timestamptz NOT NULL DEFAULT clock_timestamp()
	);
	CREATE INDEX events_created_at_id_idx ON events (created_at, id);
	CREATE TABLE events_created_at (LIKE events);
	ALTER TABLE events_created_at ADD PRIMARY KEY (id);
	CREATE INDEX ON events_created_at (created_at, id);
	-- By name, so that the clock's column stays behind and a column added to both (big_rows' payload) goes.
	CREATE FUNCTION fault_copy_event() RETURNS trigger LANGUAGE plpgsql AS $$
	BEGIN
		INSERT INTO events_created_at SELECT (jsonb_populate_record(NULL::events_created_at, to_jsonb(NEW))).*;
		RETURN NULL;
	END
	$$;
	CREATE TRIGGER fault_copy_event AFTER INSERT ON events FOR EACH ROW EXECUTE FUNCTION fault_copy_event();
	CREATE TABLE aggregates (id text PRIMARY KEY, seq integer NOT NULL DEFAULT 0);
	INSERT INTO aggregates (id) SELECT 'agg-' || g FROM generate_series(0, %d) g;

	CREATE TABLE fault_cursor_writes (
		n           bigserial PRIMARY KEY,
		at          timestamptz NOT NULL DEFAULT clock_timestamp(),
		process     text NOT NULL,
		app         text NOT NULL,
		position_id text,
		epoch       bigint NOT NULL,
		owner       text,
		moved       boolean NOT NULL
	);
	-- A write of a cursor row logs the position as it stands after it (a row written without a newer number
	-- leaves the newest checkpoint entry's), and whether it moved it: a fold copies an entry into the row.
	-- BEFORE, and named after the trigger that numbers a position written by hand, so that it sees the number.
	-- On a schema from before the checkpoint log (the upgrade scenario, until inorder migrate) the row alone
	-- is the position.
	CREATE FUNCTION fault_log_cursor_write() RETURNS trigger LANGUAGE plpgsql AS $$
	DECLARE
		now_at record;
	BEGIN
		IF to_regclass('inorder.position') IS NULL THEN
			INSERT INTO fault_cursor_writes (process, app, position_id, epoch, owner, moved)
			VALUES (NEW.process_name, current_setting('application_name'), NEW.position_id, NEW.owner_epoch,
			        NEW.owner_instance, (NEW.position_created_at, NEW.position_id) IS DISTINCT FROM
			                            (OLD.position_created_at, OLD.position_id));
			RETURN NEW;
		END IF;
		SELECT position_seq, position_id INTO now_at FROM inorder.position WHERE process_name = NEW.process_name;
		INSERT INTO fault_cursor_writes (process, app, position_id, epoch, owner, moved)
		VALUES (NEW.process_name, current_setting('application_name'),
		        CASE WHEN NEW.position_seq > now_at.position_seq THEN NEW.position_id ELSE now_at.position_id END,
		        NEW.owner_epoch, NEW.owner_instance,
		        NEW.position_seq > now_at.position_seq AND NEW.position_id IS DISTINCT FROM now_at.position_id);
		RETURN NEW;
	END
	$$;
	CREATE TRIGGER fault_log_cursor_write BEFORE UPDATE ON inorder.cursor
		FOR EACH ROW EXECUTE FUNCTION fault_log_cursor_write();
	-- A position appended to the checkpoint log, under the owner the cursor row names (the append is fenced).
	CREATE FUNCTION fault_log_checkpoint() RETURNS trigger LANGUAGE plpgsql AS $$
	BEGIN
		INSERT INTO fault_cursor_writes (process, app, position_id, epoch, owner, moved)
		SELECT NEW.process_name, current_setting('application_name'), NEW.position_id, c.owner_epoch,
		       c.owner_instance, true
		FROM inorder.cursor AS c WHERE c.process_name = NEW.process_name;
		RETURN NULL;
	END
	$$;`

// auditCheckpoints puts fault_log_checkpoint on the checkpoint log when the schema has it: not before
// migration 13, so the upgrade scenario runs it again once `inorder migrate` has made it.
const auditCheckpoints = `
	DO $$
	BEGIN
		IF to_regclass('inorder.checkpoint') IS NOT NULL AND NOT EXISTS (
			SELECT 1 FROM pg_trigger WHERE tgname = 'fault_log_checkpoint' AND tgrelid = to_regclass('inorder.checkpoint'))
		THEN
			CREATE TRIGGER fault_log_checkpoint AFTER INSERT ON inorder.checkpoint
				FOR EACH ROW EXECUTE FUNCTION fault_log_checkpoint();
		END IF;
	END
	$$;`

// park is a key a stream parked: the receiver refused its record first, and so every later one of the key.
type park struct {
	key   string
	first int64 // the record refused first
}

// stream is one process name worked by the children of a scenario.
type stream struct {
	process    string
	checkpoint string // record or batch
	batch      int    // --batch-size
	horizon    string // --horizon: auto (the insert clock of events), writers or transactions (events_created_at)
	// syncCommit runs the stream with --synchronous-commit. slack is how many more redeliveries than the
	// checkpoint allows one crash may cause: only a crash of the server itself takes back positions
	// committed without waiting for their WAL flush (the default), the last few hundred milliseconds of
	// them.
	syncCommit bool
	slack      int
}

// table is the source table st reads: events, ordered by its insert clock, or for the opt-ins that read
// created_at, events without its clock (the upgrade scenario's version before has none) or its copy.
func (s stream) table() string {
	if s.horizon == "transactions" {
		return "events_created_at"
	}
	return "events"
}

// perCrash is how many redeliveries one injected crash may cause.
func (s stream) perCrash() int {
	if s.checkpoint == "batch" {
		return s.batch + s.slack
	}
	return 1 + s.slack
}

// streamsFor returns the streams of a scenario: in the short form one, with the given checkpoint mode;
// in the full form one per mode.
func streamsFor(scenario, short string) []stream {
	rec := stream{process: scenario + "_record", checkpoint: "record", batch: 20, horizon: "auto"}
	bat := stream{process: scenario + "_batch", checkpoint: "batch", batch: 20, horizon: "auto"}
	// The transactions horizon, which waits for every transaction of the database, not only the writers.
	txn := stream{process: scenario + "_txn", checkpoint: "record", batch: 20, horizon: "transactions"}
	switch {
	case full:
		return []stream{rec, bat, txn}
	case short == "batch":
		return []stream{bat}
	case short == "txn":
		return []stream{txn}
	default:
		return []stream{rec}
	}
}

// world is one scenario: its database, writers, receiver, position monitor and children.
type world struct {
	t       *testing.T
	name    string
	url     string // the database, directly: the checks and the position monitor use it
	via     string // what the children and the writers connect to: url, or a pooler in front of it
	pool    *pgxpool.Pool
	sink    *sink
	writers *writers
	mon     *monitor
	rng     *rand.Rand // the test goroutine's
	seed    uint64

	// mayGoBack, when set, names the writes of a cursor row that may set its position back (see
	// report.checkWrites); allowance, when set, says how many redeliveries of a stream beyond its crashes'
	// the scenario allows, given every delivery the receiver recorded. The upgrade scenario sets both.
	mayGoBack func(auditRow) bool
	allowance func(st stream, log []delivery) int
	// committed is the table drain reads the committed rows from: events, or a copy of it that a trigger
	// keeps when the scenario prunes events (held_snapshot's fault_committed).
	committed string
	// clocked says that events has the insert clock, which orders it for the streams on the auto horizon:
	// every world's but the upgrade scenario's, whose version before knows no clock.
	clocked bool
	// parks are the keys the scenario parked, by process (see parkedRecords).
	parks map[string]park

	mu       sync.Mutex
	children []*child
	gen      int
	dumps    []func() string // extra logs shown when the test fails
}

// sharedWorld makes a world in a fresh database of the package's shared cluster.
func sharedWorld(t *testing.T, name string) *world {
	db := pgtest.NewDB(t, pgtest.Options{Empty: true})
	return newWorld(t, name, db.URL)
}

func newWorld(t *testing.T, name, url string) *world {
	return newWorldVia(t, name, url, url)
}

// newWorldVia makes a world whose children and writers connect through via (a pooler in front of url).
func newWorldVia(t *testing.T, name, url, via string) *world {
	t.Helper()
	return newWorldMigratedBy(t, name, url, via, binary)
}

// newWorldMigratedBy makes a world whose schema is the one that the inorder binary bin migrates to: the
// upgrade scenario's is an earlier version's.
func newWorldMigratedBy(t *testing.T, name, url, via, bin string) *world {
	t.Helper()
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	w := &world{t: t, name: name, url: url, via: via, seed: seed, rng: rand.New(rand.NewPCG(seed, 0)),
		committed: "events", parks: map[string]park{}}
	if code, out := w.runWith(bin, "migrate"); code != 0 {
		t.Fatalf("inorder migrate: exit %d: %s", code, out)
	}
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatalf("pool: %v", err)
	}
	t.Cleanup(pool.Close)
	w.pool = pool
	if _, err := pool.Exec(ctx, fmt.Sprintf(schema, aggregates-1)+auditCheckpoints); err != nil {
		t.Fatalf("schema: %v", err)
	}
	if bin == binary {
		if code, out := w.runWith(bin, "migrate", "--table", "events"); code != 0 {
			t.Fatalf("inorder migrate --table events: exit %d: %s", code, out)
		}
		w.clocked = true
	}
	w.sink = newSink(t)
	w.mon = startMonitor(t, pool, w.sink)
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		w.mu.Lock()
		defer w.mu.Unlock()
		for _, c := range w.children {
			t.Logf("logs of %s (pid %d):\n%s", c.name, c.pid(), tail(c.logs(), 60))
		}
		for _, d := range w.dumps {
			t.Log(d())
		}
	})
	return w
}

// write starts the writers.
func (w *world) write(n int) {
	w.writers = startWriters(w.t, w.via, n, w.seed)
}

// sleep paces fault injection: a random wait between lo and hi.
func (w *world) sleep(lo, hi time.Duration) {
	time.Sleep(lo + time.Duration(w.rng.Int64N(int64(hi-lo)+1)))
}

func (w *world) env() []string {
	return w.envFor(w.via)
}

// envFor is the environment of a child that connects to db.
func (w *world) envFor(db string) []string {
	return append(os.Environ(), "DATABASE_URL="+db, secretEnv+"="+string(secret))
}

// operatorApp is the application_name of the operator's commands a scenario runs (see world.cli): the
// checks take a write of a cursor row under it for an operator's, which no owner makes, as long as it moves
// no position.
const operatorApp = "fault:operator"

// runBinary runs an inorder command to completion and returns its exit code and combined output.
func (w *world) runBinary(args ...string) (int, string) {
	return w.runWith(binary, args...)
}

// runWith is runBinary with the inorder binary bin.
func (w *world) runWith(bin string, args ...string) (int, string) {
	cmd := exec.Command(bin, args...)
	cmd.Env = w.env()
	out, err := cmd.CombinedOutput()
	if _, ok := err.(*exec.ExitError); err != nil && !ok {
		w.t.Fatalf("run inorder %v: %v", args, err)
	}
	return cmd.ProcessState.ExitCode(), string(out)
}

// child is one `inorder run` process.
type child struct {
	name   string // its --instance
	stream stream
	cmd    *exec.Cmd
	done   chan struct{}

	mu     sync.Mutex
	stderr bytes.Buffer
}

func (c *child) Write(b []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stderr.Write(b)
}

func (c *child) logs() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stderr.String()
}

// count counts the log lines with message msg.
func (c *child) count(msg string) int {
	return strings.Count(c.logs(), `"message":"`+msg+`"`)
}

func (c *child) pid() int { return c.cmd.Process.Pid }

func (c *child) running() bool {
	select {
	case <-c.done:
		return false
	default:
		return true
	}
}

func (c *child) signal(t *testing.T, sig syscall.Signal) {
	t.Helper()
	if err := c.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("signal %s to %s: %v", sig, c.name, err)
	}
}

// wait waits for the child to exit and returns its exit code (-1 when a signal ended it).
func (c *child) wait(t *testing.T, timeout time.Duration) int {
	t.Helper()
	select {
	case <-c.done:
	case <-time.After(timeout):
		t.Fatalf("%s did not exit within %s", c.name, timeout)
	}
	return c.cmd.ProcessState.ExitCode()
}

// start starts an instance of st; the test's cleanup kills it.
func (w *world) start(st stream, extra ...string) *child {
	w.t.Helper()
	return w.startAt(st, w.via, extra...)
}

// startAt is start for an instance that connects to db rather than to what the world's children connect
// to. Every instance posts to a path of the receiver's that names it, so that each delivery can be told
// apart by the instance that made it.
func (w *world) startAt(st stream, db string, extra ...string) *child {
	w.t.Helper()
	return w.startBin(binary, st, db, extra...)
}

// startBin is startAt for an instance of the inorder binary bin (the upgrade scenario runs an earlier
// version's).
func (w *world) startBin(bin string, st stream, db string, extra ...string) *child {
	w.t.Helper()
	w.mu.Lock()
	w.gen++
	name := fmt.Sprintf("%s-%d", st.process, w.gen)
	w.mu.Unlock()
	args := []string{"run", "--process", st.process, "--table", st.table(), "--start-from", "beginning",
		"--handler", "webhook", "--webhook-url", w.sink.urlFor(name), "--webhook-secret-env", secretEnv,
		"--checkpoint", st.checkpoint, "--batch-size", strconv.Itoa(st.batch), "--horizon", st.horizon,
		"--poll-interval", "20ms", "--retry-min", "20ms", "--retry-max", "200ms", "--instance", name}
	if len(extra) == 0 {
		extra = []string{"--idle-timeout", "10s", "--webhook-timeout", "3s"}
	}
	if st.syncCommit {
		args = append(args, "--synchronous-commit")
	}
	c := &child{name: name, stream: st, done: make(chan struct{})}
	c.cmd = exec.Command(bin, append(args, extra...)...)
	c.cmd.Env = w.envFor(db)
	c.cmd.Stderr = c
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := c.cmd.Start(); err != nil {
		w.t.Fatalf("start %s: %v", name, err)
	}
	go func() {
		_ = c.cmd.Wait()
		close(c.done)
	}()
	w.t.Cleanup(func() {
		_ = c.cmd.Process.Kill() // SIGKILL ends a stopped process too
		<-c.done
		if strings.Contains(c.logs(), "WARNING: DATA RACE") {
			w.t.Errorf("data race in %s:\n%s", c.name, c.logs())
		}
	})
	w.mu.Lock()
	w.children = append(w.children, c)
	w.mu.Unlock()
	return c
}

// live returns the running children of st.
func (w *world) live(st stream) []*child {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []*child
	for _, c := range w.children {
		if c.stream.process == st.process && c.running() {
			out = append(out, c)
		}
	}
	return out
}

// owner returns the running child whose lease runs on st's cursor row, or nil.
func (w *world) owner(st stream) *child {
	var name string
	err := w.pool.QueryRow(context.Background(), `
		SELECT owner_instance FROM inorder.cursor
		WHERE process_name = $1 AND lease_expires_at > clock_timestamp()`, st.process).Scan(&name)
	if err != nil {
		return nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, c := range w.children {
		if c.name == name && c.running() {
			return c
		}
	}
	return nil
}

// position returns st's durable position id, "" at the beginning: as it stands (inorder.position), since a
// running processor writes its position into the cursor row only from time to time.
func (w *world) position(st stream) string {
	var id *string
	err := w.pool.QueryRow(context.Background(),
		"SELECT position_id FROM inorder.position WHERE process_name = $1", st.process).Scan(&id)
	if err != nil || id == nil {
		return ""
	}
	return *id
}

// await polls cond until it holds, failing the test after timeout.
func (w *world) await(what string, timeout time.Duration, cond func() bool) {
	w.t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			w.t.Fatalf("timed out after %s awaiting %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// row is a committed event.
type row struct {
	id  int64
	agg string
	seq int
}

// orders are the committed rows in the order each stream reads them: by the insert clock of events, or by
// created_at (the opt-ins' order, and the order of every row when events has no clock), then id.
type orders struct {
	byClock, byCreatedAt []row
}

// of returns the committed rows in st's order.
func (o orders) of(st stream) []row {
	if st.table() == "events" {
		return o.byClock
	}
	return o.byCreatedAt
}

// drain waits, after the writers stopped, for every stream's position to reach the last committed row in
// its order, and returns the committed rows in each order.
func (w *world) drain(sts []stream) orders {
	w.t.Helper()
	ctx := context.Background()
	read := func(by string) []row {
		var order []row
		w.await("the committed rows", 30*time.Second, func() bool {
			rows, err := w.pool.Query(ctx, "SELECT id, aggregate_id, seq FROM "+w.committed+" ORDER BY "+by+", id")
			if err != nil {
				return false
			}
			defer rows.Close()
			order = order[:0]
			for rows.Next() {
				var r row
				if rows.Scan(&r.id, &r.agg, &r.seq) != nil {
					return false
				}
				order = append(order, r)
			}
			return rows.Err() == nil
		})
		return order
	}
	o := orders{byCreatedAt: read("created_at")}
	o.byClock = o.byCreatedAt
	if w.clocked {
		o.byClock = read("coalesce(inorder_at, created_at)")
	}
	if len(o.byClock) == 0 {
		w.t.Fatal("the writers committed nothing")
	}
	timeout := pick(60*time.Second, 3*time.Minute)
	for _, st := range sts {
		order := o.of(st)
		last := strconv.FormatInt(order[len(order)-1].id, 10)
		deadline := time.Now().Add(timeout)
		for w.position(st) != last {
			if time.Now().After(deadline) {
				_, status := w.runBinary("status", "--process", st.process)
				w.t.Fatalf("stuck: %s did not reach the last committed row %s within %s (position %q, "+
					"%d of %d rows delivered); status:\n%s", st.process, last, timeout, w.position(st),
					w.distinct(st), len(order), status)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	return o
}

func (w *world) distinct(st stream) int {
	seen := map[int64]bool{}
	for _, d := range w.sink.deliveries() {
		if d.Process == st.process {
			seen[d.ID] = true
		}
	}
	return len(seen)
}

// auditRow is one committed write of a cursor row, in commit order.
type auditRow struct {
	n       int64
	process string
	app     string
	id      int64 // -1: no position
	epoch   int64
	owner   string
	at      time.Time // when the write was made, by the server's clock
	moved   bool      // it moved the position (a fold of the checkpoint log into the row does not)
}

func (w *world) audit() []auditRow {
	rows, err := w.pool.Query(context.Background(),
		"SELECT n, process, app, position_id, epoch, coalesce(owner, ''), at, moved FROM fault_cursor_writes ORDER BY n")
	if err != nil {
		w.t.Fatalf("audit: %v", err)
	}
	defer rows.Close()
	var out []auditRow
	for rows.Next() {
		var a auditRow
		var pos *string
		if err := rows.Scan(&a.n, &a.process, &a.app, &pos, &a.epoch, &a.owner, &a.at, &a.moved); err != nil {
			w.t.Fatalf("audit: %v", err)
		}
		a.id = parseID(pos)
		out = append(out, a)
	}
	if err := rows.Err(); err != nil {
		w.t.Fatalf("audit: %v", err)
	}
	return out
}

func (w *world) auditMax() int64 {
	var n int64
	if err := w.pool.QueryRow(context.Background(), "SELECT coalesce(max(n), 0) FROM fault_cursor_writes").Scan(&n); err != nil {
		w.t.Fatalf("audit: %v", err)
	}
	return n
}

func parseID(s *string) int64 {
	if s == nil {
		return -1
	}
	id, err := strconv.ParseInt(*s, 10, 64)
	if err != nil {
		return -2 // not a bigint: analyze reports it as a position on no committed row
	}
	return id
}

// posObs is one observation of a cursor row's position, with how many deliveries the receiver had
// recorded once the position was read.
type posObs struct {
	process string
	id      int64 // -1: beginning
	sinkLen int
}

// ownerSpan is a stretch of polls during which a cursor row named one owner under one epoch: since the epoch
// grows at every change of owner, no other instance owned the process in between (only a failover that
// lost a commit can hand an epoch out twice). Every delivery the receiver recorded at an index in
// [from, until) arrived within it, and must have been made by owner.
type ownerSpan struct {
	process     string
	owner       string // "" when the row names none
	epoch       int64
	from, until int // receiver indexes: recorded after the first such poll, before the last
}

// monitor polls every process's position and owner, and keeps each change.
type monitor struct {
	stopCh chan struct{}
	done   chan struct{}
	once   sync.Once

	mu    sync.Mutex
	obs   []posObs
	spans []ownerSpan
	errs  int
}

func startMonitor(t *testing.T, pool *pgxpool.Pool, s *sink) *monitor {
	m := &monitor{stopCh: make(chan struct{}), done: make(chan struct{})}
	go m.run(pool, s)
	t.Cleanup(m.stop)
	return m
}

func (m *monitor) stop() {
	m.once.Do(func() { close(m.stopCh) })
	<-m.done
}

func (m *monitor) run(pool *pgxpool.Pool, s *sink) {
	defer close(m.done)
	last := map[string]int64{}
	span := map[string]int{} // process -> index of its latest span
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-m.stopCh:
			return
		case <-tick.C:
		}
		type read struct {
			pos   posObs
			owner string
			epoch int64
		}
		before := s.len() // before the read: every delivery counted here arrived before it
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		// The position as it stands (inorder.position: a running processor appends positions to the
		// checkpoint log and writes them into the cursor row only from time to time), and the owner.
		rows, err := pool.Query(ctx, `SELECT c.process_name, p.position_id, coalesce(c.owner_instance, ''), c.owner_epoch
			FROM inorder.cursor AS c JOIN inorder.position AS p USING (process_name)`)
		var got []read
		if err == nil {
			for rows.Next() {
				var r read
				var pos *string
				if err = rows.Scan(&r.pos.process, &pos, &r.owner, &r.epoch); err != nil {
					break
				}
				r.pos.id = parseID(pos)
				got = append(got, r)
			}
			rows.Close()
			if err == nil {
				err = rows.Err()
			}
		}
		cancel()
		n := s.len() // after the read: every delivery the position covers arrived before it
		m.mu.Lock()
		if err != nil {
			m.errs++ // the server is away (server_restart): go on
		}
		for _, r := range got {
			o := r.pos
			if prev, ok := last[o.process]; !ok || prev != o.id {
				last[o.process] = o.id
				o.sinkLen = n
				m.obs = append(m.obs, o)
			}
			if i, ok := span[o.process]; ok && m.spans[i].owner == r.owner && m.spans[i].epoch == r.epoch {
				m.spans[i].until = max(m.spans[i].until, before)
				continue
			}
			span[o.process] = len(m.spans)
			m.spans = append(m.spans, ownerSpan{process: o.process, owner: r.owner, epoch: r.epoch, from: n, until: n})
		}
		m.mu.Unlock()
	}
}

func (m *monitor) observations() []posObs {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]posObs(nil), m.obs...)
}

// owners returns the owner spans of process, in the order they began.
func (m *monitor) owners(process string) []ownerSpan {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []ownerSpan
	for _, sp := range m.spans {
		if sp.process == process {
			out = append(out, sp)
		}
	}
	return out
}

// tail returns the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = append([]string{fmt.Sprintf("... (%d lines before)", len(lines)-n)}, lines[len(lines)-n:]...)
	}
	return strings.Join(lines, "\n")
}
