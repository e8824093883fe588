package bench

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	gpubsub "cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"cloud.google.com/go/pubsub/v2/pstest"
	"github.com/jackc/pgx/v5"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/inorder-dev/inorder/handlers"
	"github.com/inorder-dev/inorder/handlers/pubsub"
	"github.com/inorder-dev/inorder/inordertype"
	"github.com/inorder-dev/inorder/internal/harness/pgtest"
	"github.com/inorder-dev/inorder/internal/harness/tcpproxy"
	"github.com/inorder-dev/inorder/processor"
)

// result is one measure: n operations (rows, records, messages) in elapsed.
type result struct {
	n       int
	elapsed time.Duration
	// resent counts the records the processor sent to the sink again after the sink had accepted them
	// (processor.Observer.Resent): 0 unless something regressed, a keyed window's row says so.
	resent int
}

func (r result) rate() float64 {
	if r.elapsed <= 0 {
		return 0
	}
	return float64(r.n) / r.elapsed.Seconds()
}

// event is the source row of the keyset read and the noop processor.
type event struct {
	ID          int64     `db:"id"`
	AggregateID string    `db:"aggregate_id"`
	Seq         int32     `db:"seq"`
	CreatedAt   time.Time `db:"created_at"`
}

var eventColumns = []string{"id", "aggregate_id", "seq", "created_at"}

const eventsDDL = `
	CREATE TABLE events (
		id           bigserial PRIMARY KEY,
		aggregate_id text NOT NULL,
		seq          integer NOT NULL,
		created_at   timestamptz NOT NULL DEFAULT clock_timestamp()
	);
	CREATE INDEX events_created_at_id_idx ON events (created_at, id);`

const outboxDDL = `
	CREATE TABLE outbox (
		id           bigserial PRIMARY KEY,
		aggregate_id text NOT NULL,
		type         text NOT NULL,
		payload      jsonb NOT NULL,
		created_at   timestamptz NOT NULL DEFAULT clock_timestamp()
	);
	CREATE INDEX outbox_created_at_id_idx ON outbox (created_at, id);`

// orderingKeys is how many aggregates (Pub/Sub ordering keys) the rows are spread over.
const orderingKeys = 10

// server describes the server the figures come from, for the table's title.
type server struct {
	version           string
	fsync, syncCommit string
}

var (
	serverOnce sync.Once
	serverInfo server
)

// queryRower is a connection or a pool.
type queryRower interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

func noteServer(tb testing.TB, q queryRower) {
	serverOnce.Do(func() {
		ctx := context.Background()
		err := q.QueryRow(ctx, "SELECT current_setting('server_version'), current_setting('fsync'), "+
			"current_setting('synchronous_commit')").Scan(&serverInfo.version, &serverInfo.fsync, &serverInfo.syncCommit)
		if err != nil {
			tb.Fatalf("read server settings: %v", err)
		}
		if i := strings.IndexByte(serverInfo.version, ' '); i > 0 {
			serverInfo.version = serverInfo.version[:i] // "15.8 (Debian 15.8-0+deb12u1)" -> "15.8"
		}
	})
}

// connect opens one connection of the test's own, closed when it ends.
func connect(tb testing.TB, db *pgtest.DB) *pgx.Conn {
	tb.Helper()
	return connectURL(tb, db.URL)
}

// connectURL is connect to the database url names, the test's database through a proxy for one.
func connectURL(tb testing.TB, url string) *pgx.Conn {
	tb.Helper()
	conn, err := pgx.Connect(context.Background(), url)
	if err != nil {
		tb.Fatalf("connect: %v", err)
	}
	tb.Cleanup(func() { _ = conn.Close(context.Background()) })
	noteServer(tb, conn)
	return conn
}

func exec(tb testing.TB, conn *pgx.Conn, sql string, args ...any) {
	tb.Helper()
	if _, err := conn.Exec(context.Background(), sql, args...); err != nil {
		tb.Fatalf("exec %q: %v", sql, err)
	}
}

// counterTable is one row to update.
const counterTable = `CREATE TABLE t (id integer PRIMARY KEY, v bigint NOT NULL); INSERT INTO t VALUES (1, 0)`

const updateSQL = `UPDATE t SET v = v + 1 WHERE id = 1`

// measureCommit runs the single-row UPDATE in autocommit n times (after a few unmeasured ones), each its
// own durable commit, or as many as fit in limit.
func measureCommit(tb testing.TB, n int, limit time.Duration) result {
	return measureCommitVia(tb, nil, n, limit, false)
}

// measureCommitVia is measureCommit on a connection through proxy (nil: none), and with commits that do
// not wait for their WAL flush when async is set (synchronous_commit off for the session): one round trip
// each, and no wait on the disk.
func measureCommitVia(tb testing.TB, proxy *tcpproxy.Proxy, n int, limit time.Duration, async bool) result {
	db := pgtest.New(tb)
	db.Exec(tb, counterTable)
	conn := connectURL(tb, viaURL(db, proxy))
	if async {
		exec(tb, conn, "SET synchronous_commit = off")
	}
	for range min(n/10, 200) {
		exec(tb, conn, updateSQL)
	}
	start := time.Now()
	done := 0
	for done < n && time.Since(start) < limit {
		exec(tb, conn, updateSQL)
		done++
	}
	return result{n: done, elapsed: time.Since(start)}
}

// measureUpdateInTx runs the single-row UPDATE n times between one BEGIN and one COMMIT, all measured.
func measureUpdateInTx(tb testing.TB, n int) result {
	db := pgtest.New(tb)
	conn := connect(tb, db)
	exec(tb, conn, counterTable)
	start := time.Now()
	exec(tb, conn, "BEGIN")
	for range n {
		exec(tb, conn, updateSQL)
	}
	exec(tb, conn, "COMMIT")
	return result{n: n, elapsed: time.Since(start)}
}

// insertEvents fills the events table with n rows in one statement, spread over orderingKeys aggregates,
// and vacuums it, so that every reader starts from the same state: hint bits set, statistics known.
func insertEvents(tb testing.TB, db *pgtest.DB, n int) {
	tb.Helper()
	db.Exec(tb, eventsDDL)
	pgtest.AddClock(tb, db, "events")
	db.Exec(tb, `INSERT INTO events (aggregate_id, seq) SELECT 'a' || (g % $2), g FROM generate_series(1, $1) g`,
		n, orderingKeys)
	db.Exec(tb, "VACUUM ANALYZE events")
}

// insertOutbox fills the outbox table with n rows in one statement, each a small jsonb payload, spread
// over keys aggregates, and vacuums it as insertEvents does.
func insertOutbox(tb testing.TB, db *pgtest.DB, n, keys int) {
	tb.Helper()
	db.Exec(tb, outboxDDL)
	pgtest.AddClock(tb, db, "outbox")
	db.Exec(tb, `
		INSERT INTO outbox (aggregate_id, type, payload)
		SELECT 'k' || (g % $2), 'booking.created', jsonb_build_object('booking', g, 'seats', 2, 'status', 'created')
		FROM generate_series(1, $1) g`, n, keys)
	db.Exec(tb, "VACUUM ANALYZE outbox")
}

// insertedEvents is a fresh database whose events table holds n rows (see insertEvents).
func insertedEvents(tb testing.TB, n int) *pgtest.DB {
	tb.Helper()
	db := pgtest.New(tb)
	insertEvents(tb, db, n)
	return db
}

// noopHandler does nothing.
var noopHandler = handlers.HandlerFunc[event](func(context.Context, *handlers.Record[event]) error { return nil })

const keysetSQL = `
	SELECT id, aggregate_id, seq, created_at FROM events
	WHERE (created_at, id) > ($1, $2) ORDER BY created_at, id LIMIT 1000`

// measureKeyset reads the n-row events table in 1000-row pages by (created_at, id) on one connection,
// once unmeasured to warm the cache and then passes times measured.
func measureKeyset(tb testing.TB, n, passes int) result {
	return measureKeysetVia(tb, nil, n, passes)
}

// measureKeysetVia is measureKeyset on a connection through proxy (nil: none).
func measureKeysetVia(tb testing.TB, proxy *tcpproxy.Proxy, n, passes int) result {
	db := pgtest.New(tb)
	insertEvents(tb, db, n)
	conn := connectURL(tb, viaURL(db, proxy))
	pass := func() int {
		ctx := context.Background()
		var at time.Time // year 1: before every row
		var id int64
		total := 0
		for {
			rows, err := conn.Query(ctx, keysetSQL, at, id)
			if err != nil {
				tb.Fatalf("keyset read: %v", err)
			}
			got := 0
			var e event
			for rows.Next() {
				if err := rows.Scan(&e.ID, &e.AggregateID, &e.Seq, &e.CreatedAt); err != nil {
					tb.Fatalf("keyset read: %v", err)
				}
				got++
			}
			if err := rows.Err(); err != nil {
				tb.Fatalf("keyset read: %v", err)
			}
			if got == 0 {
				return total
			}
			total += got
			at, id = e.CreatedAt, e.ID
		}
	}
	if got := pass(); got != n {
		tb.Fatalf("keyset read: %d rows, want %d", got, n)
	}
	start := time.Now()
	got := 0
	for range passes {
		got += pass()
	}
	return result{n: got, elapsed: time.Since(start)}
}

// lastRow returns the id (as text) and the time in its position (the insert clock's) of the last row of
// table in the order the processor reads it.
func lastRow(tb testing.TB, db *pgtest.DB, table string) (string, time.Time) {
	tb.Helper()
	var id string
	var at time.Time
	err := db.Pool.QueryRow(context.Background(), "SELECT id::text, coalesce(inorder_at, created_at) FROM "+table+
		" ORDER BY coalesce(inorder_at, created_at) DESC, id DESC LIMIT 1").Scan(&id, &at)
	if err != nil {
		tb.Fatalf("last row of %s: %v", table, err)
	}
	return id, at
}

// nopObserver is told everything and keeps nothing: an observer of the bench embeds it and overrides what
// it counts.
type nopObserver struct{}

func (nopObserver) Batch(string, int)                    {}
func (nopObserver) PassedOver(string)                    {}
func (nopObserver) SourceWaiting(string, string, bool)   {}
func (nopObserver) Handled(string, time.Duration, error) {}
func (nopObserver) InFlight(string, int, time.Duration)  {}
func (nopObserver) Resent(string, int)                   {}
func (nopObserver) Retrying(string, bool)                {}
func (nopObserver) Halted(string, bool)                  {}
func (nopObserver) SinkUnavailable(string, bool)         {}
func (nopObserver) Position(string, time.Time)           {}
func (nopObserver) Locked(string, bool)                  {}
func (nopObserver) Hold(string, time.Duration)           {}
func (nopObserver) Connected(string, bool)               {}
func (nopObserver) CredentialsRefused(string, string)    {}

// endObserver signals when the processor's position reaches the last row's time (see lastRow). With a checkpoint
// per batch it is told before the commit; the caller then waits for the position. It counts the reads
// that brought records, and notes the round trips a proxy had counted at the first of them.
type endObserver struct {
	nopObserver
	at   time.Time
	once sync.Once
	done chan struct{}

	proxy     *tcpproxy.Proxy // nil: none
	batches   atomic.Int64
	first     atomic.Int64 // when the first read that brought records was reported, in Unix nanoseconds
	exchanges atomic.Int64 // the proxy's count then
	resent    atomic.Int64 // records sent again after the sink had accepted them
}

// Resent implements processor.Observer.
func (o *endObserver) Resent(_ string, records int) { o.resent.Add(int64(records)) }

func newEndObserver(at time.Time, proxy *tcpproxy.Proxy) *endObserver {
	return &endObserver{at: at, done: make(chan struct{}), proxy: proxy}
}

func (o *endObserver) Position(_ string, createdAt time.Time) {
	if !createdAt.Before(o.at) {
		o.once.Do(func() { close(o.done) })
	}
}

func (o *endObserver) Batch(_ string, n int) {
	if n <= 0 || o.batches.Add(1) > 1 {
		return
	}
	o.first.Store(time.Now().UnixNano())
	if o.proxy != nil {
		o.exchanges.Store(o.proxy.Exchanges())
	}
}

func (*endObserver) Handled(string, time.Duration, error) {}
func (*endObserver) Halted(string, bool)                  {}
func (*endObserver) Locked(string, bool)                  {}
func (*endObserver) Hold(string, time.Duration)           {}
func (*endObserver) Connected(string, bool)               {}

// drain runs the processor from cfg over a backlog of n rows whose last row is lastID (created at
// lastAt) until the process's position is that row, and returns the time from Run to then. The
// processor is stopped afterwards and must stop cleanly.
func drain[T any](tb testing.TB, db *pgtest.DB, cfg processor.Config[T], n int, lastID string, lastAt time.Time,
	limit time.Duration) result {
	tb.Helper()
	return drainVia(tb, db, nil, cfg, n, lastID, lastAt, limit).result
}

// drained is what drainVia measured.
type drained struct {
	result
	batches int // reads that brought records (Observer.Batch with n > 0)
	// startup is the time from Run to the first of them being reported: the connection, the set-up and
	// the first read.
	startup time.Duration
	// exchanges are the round trips through the proxy from the first read that brought records until the
	// position held the last row: the steady state, without the connection's start-up. 0 without a proxy.
	exchanges int64
}

// drainVia is drain with the processor's connections through proxy (nil: none), which counts their round
// trips; the test's own reads of the position go around it. The position is read from inorder.position,
// where it stands: since the checkpoint log the cursor row's own columns lag it (see positionView).
func drainVia[T any](tb testing.TB, db *pgtest.DB, proxy *tcpproxy.Proxy, cfg processor.Config[T], n int,
	lastID string, lastAt time.Time, limit time.Duration) drained {
	tb.Helper()
	cc, err := pgx.ParseConfig(viaURL(db, proxy))
	if err != nil {
		tb.Fatalf("parse url: %v", err)
	}
	obs := newEndObserver(lastAt, proxy)
	cfg.ClientConfig.ConnConfig = cc
	cfg.Observer = obs
	cfg.PollInterval = 5 * time.Millisecond
	p, err := processor.New(cfg)
	if err != nil {
		tb.Fatalf("processor: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ran := make(chan error, 1)
	deadline := time.NewTimer(limit)
	defer deadline.Stop()

	view := positionView(tb, db)
	var end drained
	start := time.Now()
	go func() { ran <- p.Run(ctx) }()
	select {
	case <-obs.done:
	case err := <-ran:
		tb.Fatalf("processor stopped before the end of the backlog: %v", err)
	case <-deadline.C:
		tb.Fatalf("backlog of %d rows not drained within %s", n, limit)
	}
	for {
		var pos *string
		err := db.Pool.QueryRow(context.Background(),
			"SELECT position_id FROM "+view+" WHERE process_name = $1", cfg.Process).Scan(&pos)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			tb.Fatalf("read cursor: %v", err)
		}
		if pos != nil && *pos == lastID {
			if proxy != nil {
				end.exchanges = proxy.Exchanges() - obs.exchanges.Load()
			}
			break
		}
		select {
		case err := <-ran:
			tb.Fatalf("processor stopped before the end of the backlog: %v", err)
		case <-deadline.C:
			tb.Fatalf("backlog of %d rows not durable within %s", n, limit)
		case <-time.After(time.Millisecond):
		}
	}
	end.result = result{n: n, elapsed: time.Since(start), resent: int(obs.resent.Load())}
	end.batches = int(obs.batches.Load())
	if first := obs.first.Load(); first > 0 {
		end.startup = time.Unix(0, first).Sub(start)
	}
	cancel()
	select {
	case err := <-ran:
		if err != nil {
			tb.Fatalf("processor: %v", err)
		}
	case <-time.After(30 * time.Second):
		tb.Fatalf("processor did not stop within 30s")
	}
	return end
}

// positionView is where each process's position stands: inorder.position since the checkpoint log
// (migration 13), the cursor row before.
func positionView(tb testing.TB, db *pgtest.DB) string {
	var view *string
	if err := db.Pool.QueryRow(context.Background(), "SELECT to_regclass('inorder.position')::text").Scan(&view); err != nil {
		tb.Fatalf("position view: %v", err)
	}
	if view == nil {
		return "inorder.cursor"
	}
	return "inorder.position"
}

// viaURL is the URL of db, through proxy unless it is nil.
func viaURL(db *pgtest.DB, proxy *tcpproxy.Proxy) string {
	if proxy == nil {
		return db.URL
	}
	return proxy.URL(db.URL)
}

// measureNoop drains a backlog of n events through a handler that does nothing.
func measureNoop(tb testing.TB, checkpoint processor.Checkpoint, n int) result {
	return measureNoopWith(tb, checkpoint, n, false, nil)
}

// measureNoopWith is measureNoop with positions that wait for their flush when syncCommit is set, and
// spans recorded on tp (nil: the global provider, which records nothing). With a provider, every row
// carries an application's trace context, and the spans go through the SDK's batch processor to an
// exporter that drops them: the cost of recording, not of a collector.
func measureNoopWith(tb testing.TB, checkpoint processor.Checkpoint, n int, syncCommit bool, tp trace.TracerProvider) result {
	db := pgtest.New(tb)
	insertEvents(tb, db, n)
	if tp != nil {
		exec(tb, connect(tb, db), `ALTER TABLE events ADD COLUMN traceparent text;
			UPDATE events SET traceparent = '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01'`)
	}
	lastID, lastAt := lastRow(tb, db, "events")
	noteServer(tb, db.Pool)
	return drain(tb, db, processor.Config[event]{
		StartFrom:         inordertype.StartFromBeginning,
		Process:           "bench_noop_" + string(checkpoint),
		Source:            inordertype.Source{Table: "events", Columns: eventColumns},
		Handler:           noopHandler,
		BatchSize:         1000,
		Checkpoint:        checkpoint,
		SynchronousCommit: syncCommit,
		TracerProvider:    tp,
	}, n, lastID, lastAt, 3*time.Minute)
}

// tracedProvider is a provider that records every span and drops it at export.
func tracedProvider(tb testing.TB) trace.TracerProvider {
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(tracetest.NewNoopExporter()))
	tb.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return tp
}

const pubsubProject = "bench-project"

// measurePubsub drains an outbox of n rows (jsonb payload, orderingKeys ordering keys) through the Pub/Sub
// handler, publishing with the real client over gRPC to an in-process pstest server, with maxInFlight
// messages in flight, the client's default publish settings, 1000-record batches and a checkpoint per
// batch.
func measurePubsub(tb testing.TB, maxInFlight, n int) result {
	db := pgtest.New(tb)
	insertOutbox(tb, db, n, orderingKeys)
	lastID, lastAt := lastRow(tb, db, "outbox")
	noteServer(tb, db.Pool)

	srv := pstest.NewServer()
	tb.Cleanup(func() { _ = srv.Close() })
	ctx := context.Background()
	client, err := gpubsub.NewClient(ctx, pubsubProject,
		option.WithEndpoint(srv.Addr),
		option.WithoutAuthentication(),
		option.WithGRPCDialOption(grpc.WithTransportCredentials(insecure.NewCredentials())))
	if err != nil {
		tb.Fatalf("pubsub client: %v", err)
	}
	tb.Cleanup(func() { _ = client.Close() })
	topic := "projects/" + pubsubProject + "/topics/bench"
	if _, err := client.TopicAdminClient.CreateTopic(ctx, &pubsubpb.Topic{Name: topic}); err != nil {
		tb.Fatalf("create topic: %v", err)
	}
	h, err := pubsub.New(pubsub.Config{Client: client, Topic: topic, MaxInFlight: maxInFlight})
	if err != nil {
		tb.Fatalf("pubsub handler: %v", err)
	}
	res := drain(tb, db, processor.Config[handlers.Row]{
		StartFrom:  inordertype.StartFromBeginning,
		Process:    fmt.Sprintf("bench_pubsub_%d", maxInFlight),
		Source:     inordertype.Source{Table: "outbox"},
		Handler:    h,
		BatchSize:  1000,
		Checkpoint: processor.CheckpointBatch,
	}, n, lastID, lastAt, 3*time.Minute)
	if err := h.Close(); err != nil {
		tb.Fatalf("close handler: %v", err)
	}
	if got := len(srv.Messages()); got < n {
		tb.Fatalf("pstest holds %d messages, want at least %d", got, n)
	}
	return res
}
