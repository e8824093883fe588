package processor_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/inorder-dev/inorder/inordertype"
	"github.com/inorder-dev/inorder/processor"
)

func TestOneOfTwoInstancesWorksAndTheOtherTakesOver(t *testing.T) {
	t.Parallel()
	b := setup(t)
	first := b.cfg
	first.ClientConfig.Instance = "first"
	stopFirst := start(t, first)
	ids := b.insert(t, 5)
	waitFor(t, "the first instance to deliver", func() bool { return b.h.count() == 5 })

	second := b.cfg
	second.ClientConfig.Instance = "second"
	second.ClientConfig.Instance = "second" // another instance, as another program would be
	h2 := newCollector()
	second.Handler = h2
	start(t, second)
	// The second instance polls on its own schedule while the first goes idle and busy again; ownership
	// must not move. Await the second instance's connection, then feed the first several times.
	waitFor(t, "the second instance to connect", func() bool { return connected(t, b, "second") })
	for i := 0; i < 5; i++ {
		ids = append(ids, b.insert(t, 3)...)
		waitFor(t, "the first instance to keep delivering", func() bool { return b.h.count() == len(ids) })
	}
	require.Zero(t, h2.count(), "the standby delivered while the owner was alive")
	require.Equal(t, ids, b.h.ids())

	require.NoError(t, stopFirst())
	more := b.insert(t, 4)
	waitFor(t, "the second instance to take over", func() bool { return h2.count() == 4 })
	require.Equal(t, more, h2.ids())
}

// connected reports whether an instance has a connection open (its Client's). Every test's process has the same
// name, so only sessions on the test's own database count.
func connected(t *testing.T, b *bundle, instance string) bool {
	var n int
	require.NoError(t, b.db.Pool.QueryRow(context.Background(),
		"SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE $1 AND datname = current_database()",
		"inorder%@"+instance).Scan(&n))
	return n > 0
}

func TestConnectionKilledMidBatchRedeliversAtMostTheRecordInFlight(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := b.insert(t, 25)
	b.h.block = make(chan struct{})
	b.h.start = make(chan int64, 100)
	b.cfg.ClientConfig.Instance = "victim"
	start(t, b.cfg)

	// Let the first 13 records through (the 14th is in the second batch of 10), then cut the connection
	// while the 14th is in its handler.
	for i := 0; i < 13; i++ {
		require.Equal(t, ids[i], <-b.h.start)
		b.h.block <- struct{}{}
	}
	require.Equal(t, ids[13], <-b.h.start)
	var killed bool
	require.NoError(t, b.db.Pool.QueryRow(context.Background(),
		"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1 AND datname = current_database()",
		"inorder:"+b.cfg.Process+"@victim").Scan(&killed))
	require.True(t, killed)
	b.h.mu.Lock()
	b.h.start = nil
	b.h.mu.Unlock()
	close(b.h.block) // the handler succeeds, but its position can no longer be recorded
	waitFor(t, "every record after the reconnect", func() bool { return b.h.count() >= 26 })

	want := append(append(append([]int64{}, ids[:14]...), ids[13]), ids[14:]...)
	require.Equal(t, want, b.h.ids(), "exactly the record in flight is delivered twice, and order holds")
}

func TestBatchCheckpointKeepsWhatSucceededBeforeAFailure(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.cfg.Checkpoint = processor.CheckpointBatch
	ids := b.insert(t, 35)
	b.h.setFail(ids[14], errTest)
	start(t, b.cfg)
	waitFor(t, "the halt", func() bool { return haltedOn(t, b) == idText(ids[14]) })
	_, pos := b.position(t, b.cfg.Process)
	require.Equal(t, idText(ids[13]), pos, "the records before the failing one in its batch are kept")
	require.Equal(t, ids[:14], b.h.ids())
	b.h.setFail(ids[14], nil)
	waitFor(t, "all records", func() bool { return b.h.count() == 35 })
	require.Equal(t, ids, b.h.ids())
	waitFor(t, "the durable position at the end", func() bool {
		_, pos := b.position(t, b.cfg.Process)
		return pos == idText(ids[34])
	})
}

func TestInvalidSourcesFailWithOneClearError(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.db.Exec(t, `CREATE TABLE noindex (id bigint PRIMARY KEY, created_at timestamptz NOT NULL DEFAULT clock_timestamp())`)
	b.db.Exec(t, `CREATE TABLE textdate (id bigint PRIMARY KEY, created_at text NOT NULL)`)
	b.db.Exec(t, `CREATE TABLE jsonid (id jsonb, created_at timestamptz)`)
	for _, tc := range []struct {
		name string
		src  inordertype.Source
		want string
	}{
		{"unknown table", inordertype.Source{Table: "nope"}, `invalid source: table "nope" does not exist`},
		{"injection as a table name", inordertype.Source{Table: `events; DROP TABLE events`}, `invalid source: table "events; DROP TABLE events"`},
		{"unknown column", inordertype.Source{Table: "events", Columns: []string{"id", "colour"}},
			`selected column "colour" does not exist in public.events`},
		{"unknown id column", inordertype.Source{Table: "events", IDColumn: "event_id"}, `id column "event_id" does not exist`},
		{"unknown trace column", inordertype.Source{Table: "events", TraceColumn: "trace_ctx"},
			`trace column "trace_ctx" does not exist in public.events (columns: `},
		{"a trace state without a trace column", inordertype.Source{Table: "events", TraceStateColumn: "payload"},
			`trace state column "payload" is named without a trace column: public.events has no traceparent column`},
		{"created_at of the wrong type", inordertype.Source{Table: "textdate"},
			"created_at column public.textdate.created_at is text; it must be timestamptz or timestamp"},
		{"id of the wrong type", inordertype.Source{Table: "jsonid"}, "id column public.jsonid.id is jsonb"},
		{"missing index", inordertype.Source{Table: "noindex"},
			`no index serves the keyset read on public.noindex; create one: CREATE INDEX CONCURRENTLY "noindex_created_at_id_idx" ON "public"."noindex" ("created_at", "id")`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := b.cfg
			cfg.Process = "bad_" + tc.name
			cfg.Source = tc.src
			cfg.Source.Columns = tc.src.Columns
			p, err := processor.New(cfg)
			require.NoError(t, err)
			err = p.Run(context.Background())
			require.ErrorIs(t, err, processor.ErrInvalidSource)
			require.Contains(t, err.Error(), tc.want)
			require.Contains(t, err.Error(), `process "bad_`+tc.name+`"`)
			var rows int
			require.NoError(t, b.db.Pool.QueryRow(context.Background(),
				"SELECT count(*) FROM inorder.cursor WHERE process_name = $1", cfg.Process).Scan(&rows))
			require.Zero(t, rows, "a process whose start-up checks failed leaves no cursor row")
		})
	}
	// A process that ran keeps its row when a later start fails its checks.
	ran := b.cfg
	ran.Process = "ran_once"
	b.insert(t, 1)
	stop := start(t, ran)
	waitFor(t, "the first run", func() bool { _, id := b.position(t, ran.Process); return id != "" })
	require.NoError(t, stop())
	ran.Source = inordertype.Source{Table: "nope"}
	p, err := processor.New(ran)
	require.NoError(t, err)
	require.ErrorIs(t, p.Run(context.Background()), processor.ErrInvalidSource)
	_, id := b.position(t, ran.Process)
	require.NotEmpty(t, id, "the row of a process that ran stays, its position with it")
	var n int
	require.NoError(t, b.db.Pool.QueryRow(context.Background(), "SELECT count(*) FROM events").Scan(&n))
}

func haltedOn(t *testing.T, b *bundle) string {
	var id *string
	err := b.db.Pool.QueryRow(context.Background(),
		"SELECT halted_record_id FROM inorder.cursor WHERE process_name = $1", b.cfg.Process).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return "" // not registered yet
	}
	require.NoError(t, err)
	if id == nil {
		return ""
	}
	return *id
}
