package cursor_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/inorder-dev/inorder/cursor"
	"github.com/inorder-dev/inorder/handlers"
	"github.com/inorder-dev/inorder/inordertype"
	"github.com/inorder-dev/inorder/internal/harness/pgtest"
	"github.com/inorder-dev/inorder/internal/harness/testrun"
	"github.com/inorder-dev/inorder/processor"
)

// gated is a handler that holds one record until released, and counts what it delivered.
type gated struct {
	hold     int64
	holding  chan struct{} // closed once it holds the record
	release  chan struct{}
	once     sync.Once
	mu       sync.Mutex
	received int
}

func (g *gated) Handle(ctx context.Context, rec *handlers.Record[booking]) error {
	if rec.Value.ID == g.hold {
		g.once.Do(func() { close(g.holding) })
		select {
		case <-g.release:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.received++
	return nil
}

// TestReadAndMeasureAgreeOnTheState: the status Read decides is the one Measure, and so `inorder status`,
// decides after counting the rows behind: running while records are behind, idle once the stream has
// caught up (Read said running there before it looked), not running once it stopped. A source Read
// cannot read leaves the status as without the rows behind, with the reason.
func TestReadAndMeasureAgreeOnTheState(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, _ := setup(t)
	db.Exec(t, `CREATE TABLE bookings (id bigserial PRIMARY KEY, created_at timestamptz NOT NULL DEFAULT clock_timestamp());
		CREATE INDEX ON bookings (created_at, id)`)
	pgtest.AddClock(t, db, "bookings")
	db.Exec(t, "INSERT INTO bookings SELECT FROM generate_series(1, 3)")
	cc, err := pgx.ParseConfig(db.URL)
	require.NoError(t, err)
	h := &gated{hold: 2, holding: make(chan struct{}), release: make(chan struct{})}
	p, err := processor.New(processor.Config[booking]{
		StartFrom: inordertype.StartFromBeginning, Process: "billing", ClientConfig: processor.ClientConfig{ConnConfig: cc},
		Source: inordertype.Source{Table: "bookings", Columns: []string{"id"}}, Handler: h,
		PollInterval: 10 * time.Millisecond, Logger: zerolog.Nop(),
	})
	require.NoError(t, err)
	stop := testrun.Start(t, p.Run)

	read := func() (listed, measured cursor.Info) {
		t.Helper()
		infos, err := cursor.Read(ctx, db.Pool, cursor.ReadOpts{Process: "billing"})
		require.NoError(t, err)
		require.Len(t, infos, 1)
		listed, measured = infos[0].Info, infos[0].Info
		require.NoError(t, measured.Measure(ctx, db.Pool))
		return listed, measured
	}

	select {
	case <-h.holding:
	case <-time.After(20 * time.Second):
		t.Fatal("the handler never got record 2")
	}
	listed, measured := read()
	require.Equal(t, cursor.StatusRunning, listed.Status, "record 2 in flight, record 3 behind")
	require.False(t, listed.CaughtUp)
	require.Equal(t, listed.Status, measured.Status)
	require.EqualValues(t, 2, measured.Lag.Rows)
	require.Nil(t, listed.Lag, "List counts nothing")

	close(h.release)
	await(t, "the position past record 3", func() bool {
		infos, err := cursor.Read(ctx, db.Pool, cursor.ReadOpts{Process: "billing"})
		return err == nil && len(infos) == 1 && infos[0].Info.Position.ID == "3"
	})
	listed, measured = read()
	require.Equal(t, cursor.StatusIdle, listed.Status, "caught up")
	require.True(t, listed.CaughtUp)
	require.Empty(t, listed.LagError)
	require.Equal(t, listed.Status, measured.Status)
	require.EqualValues(t, 0, measured.Lag.Rows)

	db.Exec(t, "INSERT INTO bookings SELECT FROM generate_series(1, 2)")
	await(t, "the new records", func() bool {
		infos, err := cursor.Read(ctx, db.Pool, cursor.ReadOpts{Process: "billing"})
		return err == nil && len(infos) == 1 && infos[0].Info.Position.ID == "5" && infos[0].Info.Status == cursor.StatusIdle
	})

	require.NoError(t, stop())
	listed, measured = read()
	require.Equal(t, cursor.StatusNotRunning, listed.Status)
	require.Equal(t, listed.Status, measured.Status)

	// A stream List cannot look into: running, as without the rows behind, and why.
	db.Exec(t, "ALTER TABLE bookings RENAME TO bookings_gone")
	db.Exec(t, "INSERT INTO inorder.instance (process_name, instance, seen_until) VALUES ('billing', 'elsewhere', clock_timestamp() + interval '1 hour')")
	infos, err := cursor.Read(ctx, db.Pool, cursor.ReadOpts{Process: "billing"})
	require.NoError(t, err, "a source List cannot read does not fail the listing")
	require.Len(t, infos, 1)
	require.Equal(t, cursor.StatusRunning, infos[0].Info.Status)
	require.False(t, infos[0].Info.CaughtUp)
	require.Contains(t, infos[0].Info.LagError, "bookings")
}
