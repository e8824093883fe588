package bench

import (
	"context"
	"errors"
	"fmt"
	"github.com/inorder-dev/inorder/internal/setting"
	"os"
	osexec "os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/inorder-dev/inorder/internal/harness/pgtest"
)

// Sizes and settings of the fleet measures: N processes on N tables of their own, run by one instance of
// `inorder run --config` and, as the reference, by N `inorder run` OS processes of one process each.
const (
	fleetRows        = 10                      // rows in each table before the processes start
	fleetWindow      = 3 * time.Second         // each sampling period, once the state has settled
	fleetSampleEvery = 25 * time.Millisecond   // pg_stat_activity is read this often within it
	fleetFlowEvery   = 100 * time.Millisecond  // while rows flow: a row into every table this often
	fleetMaxConns    = setting.DefaultMaxConns // the CLI's --max-conns, left at its default
	fleetLimit       = time.Minute             // bound on every wait for a state
	fleetStop        = 20 * time.Second        // bound on an OS process's clean stop
	fleetBinary      = "github.com/inorder-dev/inorder/cmd/inorder"
	fleetOwner       = "own"  // --instance of the owners (a suffix -NN for each OS process of the reference)
	fleetStandby     = "stby" // ... and of the standbys
)

// fleetCounts are the processes of the instance; fleetRefCounts those the reference runs as OS processes,
// one each: 50 OS processes are too heavy for a 2-CPU machine.
var (
	fleetCounts    = []int{1, 10, 50}
	fleetRefCounts = []int{1, 10}
)

// fleetPhases are the states measured, and what of each the table shows: connections of every state, RSS of
// the idle owner and the standby (the RSS while rows flow goes to the notes).
var fleetPhases = []struct{ phase, what string }{
	{"own", "conns"}, {"own", "rss"}, {"flow", "conns"}, {"stby", "conns"}, {"stby", "rss"},
}

// fleetSample is one state of the OS processes measured over a sampling period.
type fleetSample struct {
	conns    int     // the most sessions of theirs seen at once
	sessions int     // how many of them were the instances' lock sessions ("inorder-session:@…")
	samples  int     // reads of pg_stat_activity
	rss      float64 // VmRSS at the end, MiB, summed over the OS processes
	anon     float64 // RssAnon at the end, MiB, summed
}

// fleetRun is one measure: the owner idle, the owner while rows flow, and the standby.
type fleetRun struct {
	own, flow, stby fleetSample
	flowRate        float64 // rows a second the writer inserted while rows flowed, every table together
}

// fleetID names a measure: n processes, in one instance or (separate) in n OS processes.
type fleetID struct {
	n        int
	separate bool
}

// fleetNotes are the runs, for the notes. figuresMu guards them.
var fleetNotes = map[fleetID]fleetRun{}

func fleetKey(phase, what string, n int, separate bool) string {
	if separate {
		return fmt.Sprintf("fleet_ref_%s_%s%d", phase, what, n)
	}
	return fmt.Sprintf("fleet_%s_%s%d", phase, what, n)
}

// fleetWho names the OS processes of a measure: "10 OS processes", or "10 in 1 instance" for 10 processes.
func fleetWho(n int, separate bool) string {
	switch {
	case !separate:
		return fmt.Sprintf("%d in 1 instance", n)
	case n == 1:
		return "1 OS process"
	}
	return fmt.Sprintf("%d OS processes", n)
}

// fleetLabel is the label of a fleet line: "fleet idle owner: 10 in 1 instance, conns". Busy is the owner
// while rows flow.
func fleetLabel(phase, what string, n int, separate bool) string {
	state := map[string]string{"own": "idle owner", "flow": "busy owner", "stby": "standby"}[phase]
	measure := "conns"
	if what == "rss" {
		measure = "RSS"
		if separate && n > 1 {
			measure = "RSS summed"
		}
	}
	return fmt.Sprintf("fleet %s: %s, %s", state, fleetWho(n, separate), measure)
}

// fleetLines are the fleet lines of the table: for each state and figure, the OS processes of the
// reference as limits, then the instance beside them; 50 processes beside 1 in one instance, as there is
// no reference of 50 OS processes.
func fleetLines() []line {
	var ls []line
	for _, m := range fleetPhases {
		for _, n := range fleetRefCounts {
			ls = append(ls, line{key: fleetKey(m.phase, m.what, n, true), label: fleetLabel(m.phase, m.what, n, true), limit: true})
		}
		for _, n := range fleetCounts {
			l := line{key: fleetKey(m.phase, m.what, n, false), label: fleetLabel(m.phase, m.what, n, false)}
			if slices.Contains(fleetRefCounts, n) {
				l.ref, l.refLabel = fleetKey(m.phase, m.what, n, true), fleetWho(n, true)
			} else {
				l.ref = fleetKey(m.phase, m.what, 1, false)
				l.refLabel = fmt.Sprintf("%s (%s not run: too heavy for 2 CPUs)", fleetWho(1, false), fleetWho(n, true))
			}
			if m.what == "conns" {
				l.target = &target{ofValue: true, atMost: true, v: fleetMaxConns}
			}
			ls = append(ls, l)
		}
	}
	return ls
}

// fleetNote is the footnote on the fleet lines, given when they were measured.
func fleetNote(note func(format string, args ...any)) {
	if len(fleetNotes) == 0 {
		return
	}
	note("fleet: N processes on N tables of their own (%d rows each before the start), the stdout handler to "+
		"/dev/null, the CLI's defaults otherwise (checkpoint record, the probe, --max-conns %d); the binary built "+
		"by the benchmark (go build). N in 1 instance: `inorder run --config FILE --instance %s`, the file listing "+
		"the N processes; its standby the same file as --instance %s, started once the first owned every process "+
		"and had caught up. The reference: N `inorder run --process P --table T` OS processes of one process each "+
		"(each its own instance, %s-NN, and so its own connections), the way a process ran before --config, and N "+
		"more as standbys; %s are not run, too heavy for a 2-CPU machine. n: processes. conns: the most sessions "+
		"pg_stat_activity showed at once whose application_name ends in @<instance> of the instances measured, "+
		"read every %s for %s once the state had settled (idle owner: every cursor row at its table's last row, "+
		"the first instance its owner; busy owner: then a row into every table every %s throughout; standby: its "+
		"live row in inorder.instance for every process, the first still the owner of all, every row delivered). "+
		"RSS: VmRSS at the end of that period, summed over the OS processes.",
		fleetRows, fleetMaxConns, fleetOwner, fleetStandby, fleetOwner,
		fleetWho(slices.Max(fleetCounts), true), fleetSampleEvery, fleetWindow, fleetFlowEvery)
	var split, per, anon, busy []string
	for _, separate := range []bool{true, false} {
		counts := fleetCounts
		if separate {
			counts = fleetRefCounts
		}
		for _, n := range counts {
			r, ok := fleetNotes[fleetID{n, separate}]
			if !ok {
				continue
			}
			who := fleetWho(n, separate)
			split = append(split, fmt.Sprintf("%s %d+%d idle owner, %d+%d busy, %d+%d standby", who,
				r.own.sessions, r.own.conns-r.own.sessions, r.flow.sessions, r.flow.conns-r.flow.sessions,
				r.stby.sessions, r.stby.conns-r.stby.sessions))
			per = append(per, fmt.Sprintf("%s %.2f and %.2f conns, %.1f and %.1f MiB", who,
				float64(r.own.conns)/float64(n), float64(r.stby.conns)/float64(n), r.own.rss/float64(n), r.stby.rss/float64(n)))
			anon = append(anon, fmt.Sprintf("%s %.1f of %.1f MiB and %.1f of %.1f", who, r.own.anon, r.own.rss,
				r.stby.anon, r.stby.rss))
			busy = append(busy, fmt.Sprintf("%s %.1f MiB (%s rows/s into its tables)", who, r.flow.rss,
				thousands(r.flowRate)))
		}
	}
	note("fleet, conns at their most as lock sessions (inorder-session:@<instance>) + the rest (the pool's): %s. "+
		"Per process, idle owner and standby: %s. Anonymous memory (RssAnon; the rest of VmRSS is mostly the "+
		"binary's pages, which OS processes of one binary share and VmRSS counts in each), idle owner and "+
		"standby: %s. RSS of the busy owner: %s.",
		strings.Join(split, "; "), strings.Join(per, "; "), strings.Join(anon, "; "), strings.Join(busy, "; "))
}

// buildInorder builds the inorder binary into a directory removed when tb ends, as the CLI's tests do.
func buildInorder(tb testing.TB) string {
	tb.Helper()
	bin := filepath.Join(tb.TempDir(), "inorder")
	if out, err := osexec.Command("go", "build", "-o", bin, fleetBinary).CombinedOutput(); err != nil {
		tb.Fatalf("build inorder: %v\n%s", err, out)
	}
	return bin
}

// fleetProc is a running inorder binary.
type fleetProc struct {
	cmd     *osexec.Cmd
	logPath string // its stderr
	done    chan struct{}
	err     error // Wait's, once done is closed
}

func (p *fleetProc) logs() string {
	b, _ := os.ReadFile(p.logPath)
	const tail = 4000
	if len(b) > tail {
		b = b[len(b)-tail:]
	}
	return string(b)
}

// startFleetProc starts bin with args and the environment env, its stdout to /dev/null and its stderr to a
// file; it is stopped with SIGTERM when the test ends, and must stop cleanly.
func startFleetProc(tb testing.TB, bin string, env []string, args ...string) *fleetProc {
	tb.Helper()
	return startInorder(tb, bin, env, nil, args...)
}

// startInorder is startFleetProc with the OS process's stdout on stdout (nil: /dev/null), the write end of
// a pipe the caller reads, say: the caller closes its own copy once this returns.
func startInorder(tb testing.TB, bin string, env []string, stdout *os.File, args ...string) *fleetProc {
	tb.Helper()
	stderr, err := os.CreateTemp(tb.TempDir(), "inorder-*.log")
	if err != nil {
		tb.Fatalf("log file: %v", err)
	}
	defer stderr.Close()
	p := &fleetProc{cmd: osexec.Command(bin, args...), logPath: stderr.Name(), done: make(chan struct{})}
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stderr = stderr
	if stdout != nil { // an *os.File goes to the OS process as it is, with no goroutine of Wait's copying it
		p.cmd.Stdout = stdout
	}
	if err := p.cmd.Start(); err != nil {
		tb.Fatalf("start inorder: %v", err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	tb.Cleanup(func() {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
			if p.err != nil {
				tb.Errorf("inorder %s: %v; logs:\n%s", strings.Join(args, " "), p.err, p.logs())
			}
		case <-time.After(fleetStop):
			_ = p.cmd.Process.Kill()
			<-p.done
			tb.Errorf("inorder %s did not stop within %s; logs:\n%s", strings.Join(args, " "), fleetStop, p.logs())
		}
	})
	return p
}

// awaitFleet waits until cond holds, failing when one of procs exits first or fleetLimit passes.
func awaitFleet(tb testing.TB, procs []*fleetProc, what string, cond func() (bool, error)) {
	tb.Helper()
	deadline := time.Now().Add(fleetLimit)
	for {
		ok, err := cond()
		if err != nil {
			tb.Fatalf("%s: %v", what, err)
		}
		if ok {
			return
		}
		for _, p := range procs {
			select {
			case <-p.done:
				tb.Fatalf("%s: inorder %s exited: %v; logs:\n%s", what, strings.Join(p.cmd.Args[1:], " "), p.err, p.logs())
			default:
			}
		}
		if time.Now().After(deadline) {
			tb.Fatalf("%s: not within %s; logs of the first:\n%s", what, fleetLimit, procs[0].logs())
		}
		time.Sleep(20 * time.Millisecond) // polling the condition, not waiting for it
	}
}

// sampleFleet reads, every fleetSampleEvery for window, how many sessions of instances pg_stat_activity
// shows (application_name "inorder…@<instance>"), and then the VmRSS of procs.
func sampleFleet(tb testing.TB, db *pgtest.DB, procs []*fleetProc, instances []string, window time.Duration) fleetSample {
	tb.Helper()
	ctx := context.Background()
	var s fleetSample
	tick := time.NewTicker(fleetSampleEvery)
	defer tick.Stop()
	for end := time.Now().Add(window); time.Now().Before(end); <-tick.C {
		rows, err := db.Pool.Query(ctx, `SELECT application_name FROM pg_stat_activity
			WHERE datname = current_database() AND application_name LIKE 'inorder%@%'`)
		if err != nil {
			tb.Fatalf("pg_stat_activity: %v", err)
		}
		n, sessions := 0, 0
		for rows.Next() {
			var name string
			if err := rows.Scan(&name); err != nil {
				tb.Fatalf("pg_stat_activity: %v", err)
			}
			if slices.Contains(instances, name[strings.LastIndexByte(name, '@')+1:]) {
				n++
				if strings.HasPrefix(name, "inorder-session:") {
					sessions++
				}
			}
		}
		if err := rows.Err(); err != nil {
			tb.Fatalf("pg_stat_activity: %v", err)
		}
		if n > s.conns {
			s.conns, s.sessions = n, sessions
		}
		s.samples++
	}
	for _, p := range procs {
		status := fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid)
		rss, ok := procField(status, "VmRSS")
		anon, _ := procField(status, "RssAnon")
		if !ok {
			tb.Fatalf("no VmRSS in %s", status)
		}
		s.rss += rss / 1024
		s.anon += anon / 1024
	}
	return s
}

// measureFleet runs n processes on n tables: in one instance of `inorder run --config`, or (separate) in n
// `inorder run` OS processes of one process each. It measures the owner idle once every process has
// caught up, then while a row goes into every table every fleetFlowEvery, and then a standby of the same
// processes started once the owner has caught up again, each over window.
func measureFleet(tb testing.TB, bin string, n int, separate bool, window time.Duration) fleetRun {
	tb.Helper()
	db := pgtest.New(tb)
	noteServer(tb, db.Pool)
	ctx := context.Background()
	var ddl, entries strings.Builder
	names := make([]string, n)
	migrate := []string{"migrate"}
	for i := range n {
		names[i] = fmt.Sprintf("f%02d", i)
		fmt.Fprintf(&ddl, `CREATE TABLE fleet_%02d (id bigserial PRIMARY KEY, created_at timestamptz NOT NULL DEFAULT clock_timestamp());
			CREATE INDEX ON fleet_%02d (created_at, id);`, i, i)
		fmt.Fprintf(&entries, "  - process: %s\n    table: fleet_%02d\n", names[i], i)
		migrate = append(migrate, "--table", fmt.Sprintf("fleet_%02d", i))
	}
	db.Exec(tb, ddl.String())
	env := []string{"DATABASE_URL=" + db.URL}
	// The insert clock on every table, as a user gives it: inorder migrate --table.
	cmd := osexec.Command(bin, migrate...)
	cmd.Env = append(os.Environ(), env...)
	if out, err := cmd.CombinedOutput(); err != nil {
		tb.Fatalf("inorder migrate: %v: %s", err, out)
	}
	for i := range n {
		db.Exec(tb, fmt.Sprintf("INSERT INTO fleet_%02d SELECT FROM generate_series(1, %d)", i, fleetRows))
	}
	path := filepath.Join(tb.TempDir(), "inorder.yaml")
	if err := os.WriteFile(path, []byte("database-url: ${DATABASE_URL}\nstart-from: beginning\nprocesses:\n"+
		entries.String()), 0o644); err != nil {
		tb.Fatalf("write config: %v", err)
	}

	// start runs the instance (the OS processes, separate) named as, and returns them and their instances.
	start := func(as string) ([]*fleetProc, []string) {
		if !separate {
			return []*fleetProc{startFleetProc(tb, bin, env, "run", "--config", path, "--instance", as)}, []string{as}
		}
		var procs []*fleetProc
		var instances []string
		for i, name := range names {
			in := fmt.Sprintf("%s-%02d", as, i)
			procs = append(procs, startFleetProc(tb, bin, env, "run", "--process", name, "--table", fmt.Sprintf("fleet_%02d", i),
				"--start-from", "beginning", "--instance", in))
			instances = append(instances, in)
		}
		return procs, instances
	}
	count := func(sql string, args ...any) func() (int, error) {
		return func() (int, error) {
			var c int
			err := db.Pool.QueryRow(ctx, sql, args...).Scan(&c)
			return c, err
		}
	}
	all := func(c func() (int, error)) func() (bool, error) {
		return func() (bool, error) {
			got, err := c()
			return got == n, err
		}
	}
	owners, owning := start(fleetOwner)
	rows := fleetRows // in each table; every table's last row has this id
	caughtUp := func() func() (bool, error) {
		return all(count(`SELECT count(*)::int FROM inorder.cursor JOIN inorder.position AS p USING (process_name)
			WHERE process_name = ANY($1) AND owner_instance = ANY($2) AND p.position_id = $3`, names, owning, fmt.Sprint(rows)))
	}
	var run fleetRun
	awaitFleet(tb, owners, "every process caught up", caughtUp())
	run.own = sampleFleet(tb, db, owners, owning, window)

	// Rows flowing: a row into every table every fleetFlowEvery while the owner is sampled.
	var insert strings.Builder
	for i := range n {
		fmt.Fprintf(&insert, "INSERT INTO fleet_%02d DEFAULT VALUES;", i)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	ticks := 0
	var writeErr error
	began := time.Now()
	wg.Go(func() {
		tick := time.NewTicker(fleetFlowEvery)
		defer tick.Stop()
		for {
			if _, err := db.Pool.Exec(ctx, insert.String()); err != nil { // one transaction
				writeErr = err
				return
			}
			ticks++
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	})
	run.flow = sampleFleet(tb, db, owners, owning, window)
	close(stop)
	wg.Wait()
	if writeErr != nil {
		tb.Fatalf("insert rows: %v", writeErr)
	}
	run.flowRate = float64(ticks*n) / time.Since(began).Seconds()
	rows += ticks
	awaitFleet(tb, owners, "every process caught up after the flow", caughtUp())

	standbys, standing := start(fleetStandby)
	awaitFleet(tb, append(owners, standbys...), "the standby there for every process", func() (bool, error) {
		if ok, err := all(count(`SELECT count(*)::int FROM inorder.cursor
			WHERE process_name = ANY($1) AND owner_instance = ANY($2)`, names, owning))(); !ok || err != nil {
			if err == nil {
				err = errors.New("the owner no longer owns every process")
			}
			return false, err
		}
		return all(count(`SELECT count(*)::int FROM inorder.instance
			WHERE process_name = ANY($1) AND instance = ANY($2) AND seen_until > clock_timestamp()`, names, standing))()
	})
	run.stby = sampleFleet(tb, db, standbys, standing, window)
	return run
}

// BenchmarkFleet measures the connections and memory of 1, 10 and 50 processes in one instance of `inorder
// run --config`, owning and standing by, each right after the same processes as separate OS processes where
// those run.
func BenchmarkFleet(b *testing.B) {
	bin := buildInorder(b)
	for _, n := range fleetCounts {
		for _, separate := range []bool{true, false} {
			if separate && !slices.Contains(fleetRefCounts, n) {
				continue
			}
			name := fmt.Sprintf("instance/processes=%d", n)
			if separate {
				name = fmt.Sprintf("os_processes=%d", n)
			}
			b.Run(name, func(b *testing.B) {
				r := measureFleet(b, bin, n, separate, fleetWindow)
				for _, m := range fleetPhases {
					s := map[string]fleetSample{"own": r.own, "flow": r.flow, "stby": r.stby}[m.phase]
					f := figure{n: n, value: float64(s.conns), unit: connections}
					if m.what == "rss" {
						f = figure{n: n, value: s.rss, unit: mebibytes}
					}
					recordFigure(b, fleetKey(m.phase, m.what, n, separate), f)
				}
				figuresMu.Lock()
				defer figuresMu.Unlock()
				fleetNotes[fleetID{n, separate}] = r
			})
		}
	}
}

// TestFleetMeasures runs the fleet measure on two processes, both ways, so that the benchmark keeps
// working. It records no figures.
func TestFleetMeasures(t *testing.T) {
	bin := buildInorder(t)
	for _, separate := range []bool{true, false} {
		r := measureFleet(t, bin, 2, separate, 300*time.Millisecond)
		for name, s := range map[string]fleetSample{"own": r.own, "flow": r.flow, "stby": r.stby} {
			if s.conns == 0 || s.samples == 0 || s.rss <= 0 {
				t.Errorf("separate %v, %s: %+v", separate, name, s)
			}
		}
	}
}
