package bench

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inorder-dev/inorder/internal/harness/jsondoc"
	"github.com/inorder-dev/inorder/internal/harness/pgtest"
)

// Settings of the big-row measures: an outbox whose payload column holds JSON documents of a megabyte or
// more (internal/harness/jsondoc), drained through the real `inorder run` with the stdout handler writing
// to a pipe that this process reads.
const (
	// bigKeysetPage is the page of the keyset read beside them: the CLI's first batch (adaptive from 100).
	bigKeysetPage = 100
	// bigPoolBytes bounds the distinct documents built for a table, which its rows take in turn, each row a
	// copy of its own (its own TOAST chunks): copying a compressed document costs far less than building
	// one, so the load takes seconds.
	bigPoolBytes  = 64 << 20
	smallDocBytes = 1 << 10 // the small rows around the giant one
	// bigLimit bounds one drain; a drain that has not finished by then is reported as far as it went.
	bigLimit = 4 * time.Minute
	bigStop  = 30 * time.Second // bound on the binary's clean stop after a drain
	// bigArgsEnv names the environment variable whose flags every big-row run of the binary adds to its
	// own, to compare settings (a byte budget per batch, a deadline) on the same rows.
	bigArgsEnv = "INORDER_BENCH_BIG_ARGS"
	// reads is the unit of a count of reads the binary's log says were cut off.
	reads = "reads"
)

// bigSpec is a table of big rows: rows documents of docBytes each, after small/2 rows of smallDocBytes
// and before the other half.
type bigSpec struct {
	rows, docBytes, small int
}

func (s bigSpec) String() string {
	text := fmt.Sprintf("%s rows of %s", thousands(float64(s.rows)), sizeText(s.docBytes))
	if s.rows == 1 {
		text = "1 row of " + sizeText(s.docBytes)
	}
	if s.small > 0 {
		text += fmt.Sprintf(" among %s of %s", thousands(float64(s.small)), sizeText(smallDocBytes))
	}
	return text
}

// sizeText is n bytes in KiB, MiB or GiB, whichever is whole.
func sizeText(n int) string {
	for _, u := range []struct {
		unit string
		size int
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n >= u.size && n%u.size == 0 {
			return fmt.Sprintf("%d %s", n/u.size, u.unit)
		}
	}
	return fmt.Sprintf("%d bytes", n)
}

// bigMeasure is one table of the benchmark and the checkpoint modes it is drained with.
type bigMeasure struct {
	name        string
	spec        bigSpec
	checkpoints []string
}

// bigMeasures are the tables of issue 43's reports: 1,500 rows of 1 MiB with either checkpoint, 300 of 5
// MiB, and one row of 200 MiB among small ones.
var bigMeasures = []bigMeasure{
	{"1mib", bigSpec{rows: 1500, docBytes: 1 << 20}, []string{"record", "batch"}},
	{"5mib", bigSpec{rows: 300, docBytes: 5 << 20}, []string{"batch"}},
	{"200mib", bigSpec{rows: 1, docBytes: 200 << 20, small: 1000}, []string{"batch"}},
}

// bigRSSTargetMiB is the peak RSS the binary should keep to while it drains rows of a few MiB: a batch
// bounded by bytes, not by rows, held once or twice beside the runtime's own. A row larger than a
// batch's bytes is held whole, so the giant row's target is a ratio to its size instead.
const (
	bigRSSTargetMiB   = 128
	giantRSSPerDocMax = 3
)

func bigKey(measure, what string) string { return "big_" + measure + "_" + what }

// bigLines are the lines of the big-row measures: for each table, the keyset read as its limit, and for
// each checkpoint mode the drain's rate beside it, the binary's peak RSS and the reads its log says were
// cut off.
func bigLines() []line {
	var ls []line
	for _, m := range bigMeasures {
		ls = append(ls, line{key: bigKey(m.name, "keyset"), label: "postgres: keyset read, " + m.spec.String(),
			limit: true})
		if m.spec.small > 0 {
			ls = append(ls, line{key: bigKey(m.name, "doc"), label: "the " + sizeText(m.spec.docBytes) +
				" row's JSON, as jsonb prints it", limit: true})
		}
		for _, c := range m.checkpoints {
			run := "inorder run, " + m.spec.String() + ", checkpoint " + c
			ls = append(ls, line{key: bigKey(m.name, c), label: run, ref: bigKey(m.name, "keyset"),
				refLabel: "keyset read", target: &target{v: 0.5}})
			rss := line{key: bigKey(m.name, c+"_rss"), label: "the same: peak RSS of the OS process",
				target: &target{ofValue: true, atMost: true, v: bigRSSTargetMiB}}
			if m.spec.small > 0 {
				rss.ref, rss.refLabel = bigKey(m.name, "doc"), "the row's JSON"
				rss.target = &target{atMost: true, v: giantRSSPerDocMax}
			}
			ls = append(ls, rss, line{key: bigKey(m.name, c+"_cut"), label: "the same: reads cut off",
				target: &target{ofValue: true, atMost: true, v: 0}})
		}
	}
	return ls
}

// bigTable is a table of big rows, loaded.
type bigTable struct {
	db   *pgtest.DB
	spec bigSpec
	ids  []int64 // every row, in the order the processor reads them (the insert clock, then id)
	// text and stored are a document's bytes as jsonb prints it and as the table stores it (compressed),
	// on average over the documents built; pool is how many were built.
	text, stored float64
	pool         int
	size         int64 // pg_total_relation_size of the table
	loaded       time.Duration
}

// loadBig makes a fresh database whose outbox holds spec's rows (see bigSpec), keyed over orderingKeys
// aggregates: the small rows before the documents, the documents, the small rows after them, each set in
// one statement. The documents are built once each, up to bigPoolBytes of them, and the rows copy them in
// turn.
func loadBig(tb testing.TB, spec bigSpec) *bigTable {
	tb.Helper()
	t := &bigTable{db: pgtest.New(tb), spec: spec}
	noteServer(tb, t.db.Pool)
	start := time.Now()
	t.db.Exec(tb, outboxDDL)
	pgtest.AddClock(tb, t.db, "outbox")
	t.db.Exec(tb, jsondoc.FunctionSQL)
	small := func(n int) {
		t.db.Exec(tb, `INSERT INTO outbox (aggregate_id, type, payload)
			SELECT 'k' || (g % $2), 'order.noted', jsondoc(-g, $3) FROM generate_series(1, $1) g`, n, orderingKeys, smallDocBytes)
	}
	small(spec.small / 2)
	t.pool = min(spec.rows, max(1, bigPoolBytes/spec.docBytes))
	t.db.Exec(tb, `CREATE TABLE jsondoc_pool AS SELECT k, jsondoc(k, $2) AS doc FROM generate_series(0, $1 - 1) k`,
		t.pool, spec.docBytes)
	if err := t.db.Pool.QueryRow(context.Background(),
		"SELECT avg(octet_length(doc::text)), avg(pg_column_size(doc)) FROM jsondoc_pool").Scan(&t.text, &t.stored); err != nil {
		tb.Fatalf("documents: %v", err)
	}
	t.db.Exec(tb, `INSERT INTO outbox (aggregate_id, type, payload)
		SELECT 'k' || (g % $3), 'order.placed', p.doc FROM generate_series(1, $1) g JOIN jsondoc_pool p ON p.k = g % $2`,
		spec.rows, t.pool, orderingKeys)
	small(spec.small - spec.small/2)
	t.db.Exec(tb, "DROP TABLE jsondoc_pool")
	t.db.Exec(tb, "VACUUM ANALYZE outbox")
	t.loaded = time.Since(start)
	ctx := context.Background()
	rows, err := t.db.Pool.Query(ctx, "SELECT id FROM outbox ORDER BY coalesce(inorder_at, created_at), id")
	if err == nil {
		t.ids, err = pgx.CollectRows(rows, pgx.RowTo[int64])
	}
	if err == nil {
		err = t.db.Pool.QueryRow(ctx, "SELECT pg_total_relation_size('outbox')").Scan(&t.size)
	}
	if err != nil {
		tb.Fatalf("read the loaded table: %v", err)
	}
	if len(t.ids) != spec.rows+spec.small {
		tb.Fatalf("the outbox holds %d rows, want %d", len(t.ids), spec.rows+spec.small)
	}
	return t
}

const bigKeysetSQL = `
	SELECT id, aggregate_id, type, payload, created_at FROM outbox
	WHERE (created_at, id) > ($1, $2) ORDER BY created_at, id LIMIT $3`

// measureBigKeyset reads t's table once in pages of page rows by (created_at, id) on one connection of the
// test's own, every column brought and dropped (only the id and created_at decoded, for the next page): what
// a reader could drain the table at.
func measureBigKeyset(tb testing.TB, t *bigTable, page int) result {
	tb.Helper()
	conn := connect(tb, t.db)
	ctx := context.Background()
	var at time.Time // year 1: before every row
	var id int64
	got := 0
	start := time.Now()
	for {
		rows, err := conn.Query(ctx, bigKeysetSQL, at, id, page)
		if err != nil {
			tb.Fatalf("keyset read: %v", err)
		}
		n := 0
		for rows.Next() {
			if err := rows.Scan(&id, nil, nil, nil, &at); err != nil {
				tb.Fatalf("keyset read: %v", err)
			}
			n++
		}
		if err := rows.Err(); err != nil {
			tb.Fatalf("keyset read: %v", err)
		}
		if n == 0 {
			break
		}
		got += n
	}
	if got != len(t.ids) {
		tb.Fatalf("keyset read: %d rows, want %d", got, len(t.ids))
	}
	return result{n: got, elapsed: time.Since(start)}
}

// bigRun is one drain of a table of big rows by the binary.
type bigRun struct {
	// result: n records delivered (each counted once), elapsed from the binary's start until the position
	// held the last row, or the limit; resent counts the lines that delivered a record again.
	result
	drained bool
	peak    float64 // MiB: the binary's VmHWM at the end
	cutOff  int     // lines of its log saying that a read was cut off (see cutOffLines)
	bytes   int64   // of its lines in all
}

// runBig drains t's table with the binary bin: `inorder run` of the process big_<checkpoint> from the
// beginning, the CLI's defaults otherwise (and the flags in $INORDER_BENCH_BIG_ARGS), the stdout handler
// writing to a pipe read here. Every line must deliver the next record in (created_at, id) order, or one
// delivered before (sent again after a connection was lost); anything else fails the measure. It ends once
// the position holds the last row, or at limit; the binary's peak RSS is read then, before SIGTERM stops
// it, which it must do cleanly.
func runBig(tb testing.TB, bin string, t *bigTable, checkpoint string, limit time.Duration) bigRun {
	tb.Helper()
	process := "big_" + checkpoint
	pr, pw, err := os.Pipe()
	if err != nil {
		tb.Fatalf("pipe: %v", err)
	}
	defer pr.Close()
	lines := newLineCheck(t.ids)
	args := append([]string{"run", "--process", process, "--table", "outbox", "--start-from", "beginning",
		"--checkpoint", checkpoint, "--instance", "bench"}, strings.Fields(os.Getenv(bigArgsEnv))...)
	view := positionView(tb, t.db)
	start := time.Now()
	p := startInorder(tb, bin, []string{"DATABASE_URL=" + t.db.URL}, pw, args...)
	_ = pw.Close() // the binary holds the write end: the read ends when it exits
	read := make(chan error, 1)
	go func() { read <- lines.read(pr) }()

	var run bigRun
	position := func() string {
		var pos *string
		err := t.db.Pool.QueryRow(context.Background(),
			"SELECT position_id FROM "+view+" WHERE process_name = $1", process).Scan(&pos)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			tb.Fatalf("read the position: %v", err)
		}
		if pos == nil {
			return ""
		}
		return *pos
	}
	last := strconv.FormatInt(t.ids[len(t.ids)-1], 10)
	for deadline := start.Add(limit); time.Now().Before(deadline); {
		n, bad := lines.state()
		if bad != "" { // reported once the binary has stopped
			break
		}
		if n == len(t.ids) && position() == last {
			run.drained = true
			break
		}
		select {
		case <-p.done:
			tb.Fatalf("inorder %s exited during the drain: %v; logs:\n%s", strings.Join(args, " "), p.err, p.logs())
		case <-time.After(20 * time.Millisecond):
		}
	}
	run.elapsed = time.Since(start)
	hwm, ok := procField(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid), "VmHWM")
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(bigStop):
		_ = p.cmd.Process.Kill()
		<-p.done
		tb.Fatalf("inorder %s did not stop within %s of SIGTERM; logs:\n%s", strings.Join(args, " "), bigStop, p.logs())
	}
	if p.err != nil {
		tb.Fatalf("inorder %s: %v after SIGTERM; logs:\n%s", strings.Join(args, " "), p.err, p.logs())
	}
	if !ok { // no /proc: the most the kernel saw it hold, which wait4 reports (kB on Linux)
		if ru, isRusage := p.cmd.ProcessState.SysUsage().(*syscall.Rusage); isRusage {
			hwm = float64(ru.Maxrss)
		}
	}
	run.peak = hwm / 1024
	if err := <-read; err != nil {
		tb.Fatalf("read the binary's stdout: %v", err)
	}
	n, bad := lines.state()
	if bad != "" {
		tb.Fatalf("inorder %s: %s", strings.Join(args, " "), bad)
	}
	run.n, run.resent, run.bytes = n, lines.resent, lines.bytes
	logs, err := os.ReadFile(p.logPath)
	if err != nil {
		tb.Fatalf("read the binary's log: %v", err)
	}
	run.cutOff = cutOffLines(logs)
	return run
}

// cutOffLines counts the lines of a binary's log that say a read was cut off: the database did not answer
// in time, or the connection was lost and the processor is reconnecting.
func cutOffLines(logs []byte) int {
	n := 0
	for l := range bytes.Lines(logs) {
		if bytes.Contains(l, []byte("did not answer in time")) || bytes.Contains(l, []byte("reconnecting")) {
			n++
		}
	}
	return n
}

// lineCheck reads the stdout handler's lines and checks each against the table's order.
type lineCheck struct {
	rank map[int64]int // record id -> place in the order the processor reads them

	mu     sync.Mutex
	next   int // records delivered so far: the next new one must be the one at this place
	resent int
	bytes  int64
	bad    string // the first line out of order or not a record's
}

func newLineCheck(ids []int64) *lineCheck {
	c := &lineCheck{rank: make(map[int64]int, len(ids))}
	for i, id := range ids {
		c.rank[id] = i
	}
	return c
}

// state returns the records delivered so far and what was wrong with the lines, if anything.
func (c *lineCheck) state() (int, string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.next, c.bad
}

// read reads lines from r until it ends, keeping of each only its head, where the record's id is: a line
// may be hundreds of megabytes.
func (c *lineCheck) read(r io.Reader) error {
	const headBytes = 256
	br := bufio.NewReaderSize(r, 1<<20)
	var head []byte
	var size int64
	for {
		chunk, err := br.ReadSlice('\n')
		if len(head) < headBytes {
			head = append(head, chunk[:min(len(chunk), headBytes-len(head))]...)
		}
		size += int64(len(chunk))
		switch {
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF):
			return nil // a line cut off at the end was the stop's: the position had not covered it
		case err != nil:
			return err
		}
		c.line(head, size)
		head, size = head[:0], 0
	}
}

// recordIDPrefix starts every line of the stdout handler over the outbox, whose first column is id.
var recordIDPrefix = []byte(`,"record":{"id":`)

func (c *lineCheck) line(head []byte, size int64) {
	id, ok := int64(0), false
	if i := bytes.Index(head, recordIDPrefix); i >= 0 {
		digits := head[i+len(recordIDPrefix):]
		end := bytes.IndexFunc(digits, func(r rune) bool { return r < '0' || r > '9' })
		if end > 0 {
			n, err := strconv.ParseInt(string(digits[:end]), 10, 64)
			id, ok = n, err == nil
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.bytes += size
	if c.bad != "" {
		return
	}
	k, known := c.rank[id]
	switch {
	case !ok:
		c.bad = fmt.Sprintf("a line of %d bytes that is not a record of the outbox: %q", size, head)
	case !known:
		c.bad = fmt.Sprintf("record %d delivered, which is not in the table", id)
	case k == c.next:
		c.next++
	case k < c.next:
		c.resent++
	default:
		c.bad = fmt.Sprintf("record %d (number %d in order) delivered after %d records: the ones between were "+
			"skipped", id, k+1, c.next)
	}
}

// bigNote is what the notes say of one table and its drains.
type bigNote struct {
	table *bigTable
	runs  map[string]bigRun // by checkpoint
}

// bigNotes are the big-row measures' details, by measure. figuresMu guards them.
var bigNotes = map[string]bigNote{}

// bigNoteText is the footnote on the big-row lines, given when they were measured.
func bigNoteText(note func(format string, args ...any)) {
	if len(bigNotes) == 0 {
		return
	}
	extra := ""
	if args := os.Getenv(bigArgsEnv); args != "" {
		extra = fmt.Sprintf(", and %s (from %s)", args, bigArgsEnv)
	}
	note("big rows: an outbox (id, aggregate_id over %d keys, type, payload jsonb, created_at) whose payload "+
		"holds JSON orders of line items built by the server (internal/harness/jsondoc), compressing as documents "+
		"do; the documents of a table are built once each, up to %d MiB of them, and its rows copy them in turn. "+
		"inorder run: the binary built by the benchmark (go build), `inorder run --table outbox --start-from "+
		"beginning --checkpoint C`, the CLI's defaults otherwise (--batch-size 0: adaptive from 100 to 4,000 "+
		"rows; --db-timeout 5s)%s, its stdout a pipe this process reads, each line checked to deliver the next "+
		"record in (created_at, id) order or one delivered before (sent again); timed from its start until "+
		"inorder.position holds the last row, or %s at most. peak RSS: the OS process's VmHWM then. reads cut "+
		"off: lines of its log saying the database did not answer in time or that it is reconnecting (target 0). "+
		"The keyset read: one pass of SELECT every column WHERE (created_at, id) > ($1, $2) ORDER BY created_at, "+
		"id LIMIT %d on one connection, every value brought and dropped. Peak RSS targets: %d MiB with rows of "+
		"a few MiB; %dx the row's JSON for the giant row, which a batch must hold whole.",
		orderingKeys, bigPoolBytes>>20, extra, bigLimit, bigKeysetPage, bigRSSTargetMiB, giantRSSPerDocMax)
	var parts []string
	for _, m := range bigMeasures {
		n, ok := bigNotes[m.name]
		if !ok {
			continue
		}
		t := n.table
		part := fmt.Sprintf("%s: a document prints as %s kB and is stored in %s kB (%.2fx), %d built, the "+
			"table %s MiB, loaded in %s", m.spec, thousands(t.text/1000), thousands(t.stored/1000), t.text/t.stored,
			t.pool, thousands(float64(t.size)/(1<<20)), t.loaded.Round(100*time.Millisecond))
		for _, c := range m.checkpoints {
			r, ok := n.runs[c]
			if !ok {
				continue
			}
			how := fmt.Sprintf("drained in %s", r.elapsed.Round(100*time.Millisecond))
			if !r.drained {
				how = fmt.Sprintf("NOT drained: %s of %s records delivered within %s", thousands(float64(r.n)),
					thousands(float64(len(t.ids))), r.elapsed.Round(time.Second))
			}
			part += fmt.Sprintf("; checkpoint %s %s, %s MiB of lines, %s sent again, %s cut off", c, how,
				thousands(float64(r.bytes)/(1<<20)), count(r.resent, "record"), count(r.cutOff, "read"))
		}
		parts = append(parts, part)
	}
	note("big rows, each table: %s.", strings.Join(parts, ". "))
}

// count is n things, the noun singular for one.
func count(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return thousands(float64(n)) + " " + noun + "s"
}

// BenchmarkBigRows drains the tables of bigMeasures through the binary, each after the keyset read of the
// same rows in the same database.
func BenchmarkBigRows(b *testing.B) {
	bin := buildInorder(b)
	for _, m := range bigMeasures {
		b.Run(m.name, func(b *testing.B) {
			t := loadBig(b, m.spec)
			record(b, bigKey(m.name, "keyset"), measureBigKeyset(b, t, bigKeysetPage))
			if m.spec.small > 0 {
				recordFigure(b, bigKey(m.name, "doc"), figure{value: t.text / (1 << 20), unit: mebibytes})
			}
			runs := map[string]bigRun{}
			for _, c := range m.checkpoints {
				r := runBig(b, bin, t, c, bigLimit)
				record(b, bigKey(m.name, c), r.result)
				recordFigure(b, bigKey(m.name, c+"_rss"), figure{value: r.peak, unit: mebibytes})
				recordFigure(b, bigKey(m.name, c+"_cut"), figure{value: float64(r.cutOff), unit: reads})
				runs[c] = r
			}
			figuresMu.Lock()
			defer figuresMu.Unlock()
			bigNotes[m.name] = bigNote{table: t, runs: runs}
		})
	}
}

// TestBigRowMeasures runs the big-row measures on a few rows of each kind (58 MiB of documents in all), so
// that the benchmark keeps working. It records no figures; every record must be delivered, in order.
func TestBigRowMeasures(t *testing.T) {
	bin := buildInorder(t)
	for _, m := range []bigMeasure{
		{"1mib", bigSpec{rows: 30, docBytes: 1 << 20}, []string{"record", "batch"}},
		{"5mib", bigSpec{rows: 4, docBytes: 5 << 20}, []string{"batch"}},
		{"8mib", bigSpec{rows: 1, docBytes: 8 << 20, small: 40}, []string{"batch"}},
	} {
		tbl := loadBig(t, m.spec)
		if r := measureBigKeyset(t, tbl, bigKeysetPage); r.rate() <= 0 {
			t.Errorf("%s: keyset read: %+v", m.spec, r)
		}
		if tbl.text < 0.95*float64(m.spec.docBytes) || tbl.stored <= 0 {
			t.Errorf("%s: documents of %.0f bytes, stored in %.0f", m.spec, tbl.text, tbl.stored)
		}
		for _, c := range m.checkpoints {
			r := runBig(t, bin, tbl, c, time.Minute)
			if !r.drained || r.n != len(tbl.ids) {
				t.Errorf("%s, checkpoint %s: %d of %d records delivered within a minute", m.spec, c, r.n, len(tbl.ids))
			}
			// A line holds its document as compact JSON, about 0.92 of what jsonb prints.
			if r.peak <= 0 || float64(r.bytes) < 0.85*float64(m.spec.rows*m.spec.docBytes) {
				t.Errorf("%s, checkpoint %s: peak RSS %.1f MiB, %d bytes of lines", m.spec, c, r.peak, r.bytes)
			}
		}
	}
}
