package console_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/inorder-dev/inorder/console"
	"github.com/inorder-dev/inorder/cursor"
	"github.com/inorder-dev/inorder/handlers"
	"github.com/inorder-dev/inorder/inordertype"
	"github.com/inorder-dev/inorder/internal/harness/pgtest"
	"github.com/inorder-dev/inorder/internal/harness/testrun"
	"github.com/inorder-dev/inorder/processor"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// refuser delivers every record but those it refuses, until told to stop refusing.
type refuser struct {
	mu      sync.Mutex
	refuse  map[int64]bool
	handled []int64
}

type payment struct {
	ID       int64  `db:"id"`
	Customer string `db:"customer"`
}

func (h *refuser) Handle(_ context.Context, rec *handlers.Record[payment]) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.refuse[rec.Value.ID] {
		return handlers.Permanent(&statusErr{code: 422})
	}
	h.handled = append(h.handled, rec.Value.ID)
	return nil
}

func (h *refuser) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.handled)
}

type statusErr struct{ code int }

func (e *statusErr) Error() string   { return "payments API answered 422: card_declined" }
func (e *statusErr) SinkStatus() int { return e.code }

type bundle struct {
	db *pgtest.DB
	h  *refuser
}

// setup gives a test a database with a payments table of 5 rows and a process "payments" halted on the
// third, which the sink refuses.
func setup(t *testing.T) *bundle {
	t.Helper()
	db := pgtest.New(t)
	db.Exec(t, `CREATE TABLE payments (id bigserial PRIMARY KEY, customer text NOT NULL,
		created_at timestamptz NOT NULL DEFAULT clock_timestamp());
		CREATE INDEX ON payments (created_at, id)`)
	pgtest.AddClock(t, db, "payments")
	db.Exec(t, "INSERT INTO payments (customer) SELECT 'customer-' || g FROM generate_series(1, 5) g")
	b := &bundle{db: db, h: &refuser{refuse: map[int64]bool{3: true}}}
	b.runProcess(t, "payments")
	return b
}

// runProcess runs a process on the payments table into the bundle's handler until the test ends, and
// waits until it halts on record 3.
func (b *bundle) runProcess(t *testing.T, name string) {
	t.Helper()
	db, h := b.db, b.h
	cc, err := pgx.ParseConfig(db.URL)
	require.NoError(t, err)
	p, err := processor.New(processor.Config[payment]{
		Process: name, ClientConfig: processor.ClientConfig{ConnConfig: cc}, StartFrom: inordertype.StartFromBeginning,
		Source:  inordertype.Source{Table: "payments", KeyColumn: "customer", Columns: []string{"id", "customer"}},
		Handler: h, PollInterval: 20 * time.Millisecond, RetryMin: 20 * time.Millisecond, RetryMax: 200 * time.Millisecond,
		Logger: zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel),
	})
	require.NoError(t, err)
	testrun.Start(t, p.Run)
	require.Eventually(t, func() bool {
		procs, err := cursor.Read(context.Background(), db.Pool, cursor.ReadOpts{Process: name})
		return err == nil && len(procs) == 1 && procs[0].Info.Status == cursor.StatusHalted
	}, 20*time.Second, 10*time.Millisecond, "the stream halts on record 3")
}

// serve starts the console on a loopback test server.
func (b *bundle) serve(t *testing.T, cfg console.Config) *httptest.Server {
	t.Helper()
	cfg.Pool = b.db.Pool
	c, err := console.New(cfg)
	require.NoError(t, err)
	srv := httptest.NewServer(c)
	t.Cleanup(srv.Close)
	return srv
}

// noRedirects is a client that shows redirects rather than following them.
var noRedirects = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
