package pubsub_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	gpubsub "cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"cloud.google.com/go/pubsub/v2/pstest"
	"github.com/jackc/pgx/v5"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/inorder-dev/inorder/handlers"
	"github.com/inorder-dev/inorder/handlers/pubsub"
	"github.com/inorder-dev/inorder/inordertype"
	"github.com/inorder-dev/inorder/internal/harness/pgtest"
	"github.com/inorder-dev/inorder/internal/harness/sinktest"
	"github.com/inorder-dev/inorder/internal/harness/testrun"
	"github.com/inorder-dev/inorder/processor"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

const project = "test-project"

const outboxDDL = `
	CREATE TABLE outbox (
		id           bigserial PRIMARY KEY,
		aggregate_id text NOT NULL,
		type         text NOT NULL,
		payload      jsonb NOT NULL,
		created_at   timestamptz NOT NULL DEFAULT clock_timestamp()
	);
	CREATE INDEX ON outbox (created_at, id);`

// injector is a reactor on pstest's Publish: while a record id is armed, every publish request carrying a
// message with that inorder_id is refused with a code the client does not retry by itself.
type injector struct {
	mu      sync.Mutex
	armed   map[string]bool
	refused int
}

func (in *injector) React(req any) (bool, any, error) {
	r, ok := req.(*pubsubpb.PublishRequest)
	if !ok {
		return false, nil, nil
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	for _, m := range r.Messages {
		if id := m.Attributes[handlers.HeaderID]; in.armed[id] {
			in.refused++
			return true, nil, status.Errorf(codes.FailedPrecondition, "injected failure for record %s", id)
		}
	}
	return false, nil, nil
}

func (in *injector) arm(id string, on bool) {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.armed[id] = on
}

func (in *injector) refusals() int {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.refused
}

// fake is a pstest server and a real client talking to it over gRPC.
type fake struct {
	srv    *pstest.Server
	client *gpubsub.Client
	inject *injector
}

func newFake(t *testing.T) *fake {
	t.Helper()
	in := &injector{armed: map[string]bool{}}
	srv := pstest.NewServer(pstest.ServerReactorOption{FuncName: "Publish", Reactor: in})
	t.Cleanup(func() { _ = srv.Close() })
	client, err := gpubsub.NewClient(context.Background(), project,
		option.WithEndpoint(srv.Addr),
		option.WithoutAuthentication(),
		option.WithGRPCDialOption(grpc.WithTransportCredentials(insecure.NewCredentials())))
	require.NoError(t, err)
	t.Cleanup(func() { _ = client.Close() })
	return &fake{srv: srv, client: client, inject: in}
}

// topic creates a topic and returns its full name.
func (f *fake) topic(t *testing.T, id string) string {
	t.Helper()
	name := "projects/" + project + "/topics/" + id
	_, err := f.client.TopicAdminClient.CreateTopic(context.Background(), &pubsubpb.Topic{Name: name})
	require.NoError(t, err)
	return name
}

// messages returns what was published to a topic, in the order the server accepted it.
func (f *fake) messages(topic string) []*pstest.Message {
	var out []*pstest.Message
	for _, m := range f.srv.Messages() {
		if m.Topic == topic {
			out = append(out, m)
		}
	}
	return out
}

// newHandler returns a handler closed when the test ends.
func newHandler(t *testing.T, cfg pubsub.Config) *pubsub.Handler {
	t.Helper()
	h, err := pubsub.New(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, h.Close()) })
	return h
}

// db is a test database with the outbox table.
type db struct{ *pgtest.DB }

// newDB returns a database made by ddl, whose source table gets the insert clock.
func newDB(t *testing.T, table, ddl string) db {
	t.Helper()
	d := pgtest.New(t)
	d.Exec(t, ddl)
	pgtest.AddClock(t, d, table)
	return db{d}
}

// insert runs an INSERT ... RETURNING id and returns the ids as text.
func (d db) insert(t *testing.T, sql string, args ...any) []string {
	t.Helper()
	return sinktest.Insert(t, d.Pool, sql, args...)
}

// insertOutbox adds n rows to the outbox (see sinktest.InsertOutbox).
func (d db) insertOutbox(t *testing.T, from, n, keys int) []string {
	t.Helper()
	return sinktest.InsertOutbox(t, d.Pool, from, n, keys)
}

// cursorRow is the part of a cursor row the tests look at.
type cursorRow struct {
	PositionID     string
	HaltedRecordID string
	HaltedError    string
	HaltedAttempts int
}

func (d db) cursor(t *testing.T, process string) cursorRow {
	t.Helper()
	var pos, halted, herr *string
	var c cursorRow
	err := d.Pool.QueryRow(context.Background(), `
		SELECT position_id, halted_record_id, halted_error, halted_attempts
		FROM inorder.cursor WHERE process_name = $1`, process).Scan(&pos, &halted, &herr, &c.HaltedAttempts)
	if errors.Is(err, pgx.ErrNoRows) {
		return c
	}
	require.NoError(t, err)
	c.PositionID, c.HaltedRecordID, c.HaltedError = deref(pos), deref(halted), deref(herr)
	return c
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// run starts a processor on table with handler h until the test ends, and returns a function that stops
// it and returns what Run returned.
func run(t *testing.T, d db, process, table string, h handlers.Handler[handlers.Row]) (stop func() error) {
	t.Helper()
	return runWith(t, d, process, table, h, nil)
}

// runWith is run with the processor's configuration changed by tune.
func runWith(t *testing.T, d db, process, table string, h handlers.Handler[handlers.Row],
	tune func(*processor.Config[handlers.Row])) (stop func() error) {
	t.Helper()
	cc, err := pgx.ParseConfig(d.URL)
	require.NoError(t, err)
	cfg := processor.Config[handlers.Row]{
		StartFrom:    inordertype.StartFromBeginning,
		Process:      process,
		ClientConfig: processor.ClientConfig{ConnConfig: cc},
		Source:       inordertype.Source{Table: table},
		Handler:      h,
		PollInterval: 20 * time.Millisecond,
		RetryMin:     20 * time.Millisecond,
		RetryMax:     200 * time.Millisecond,
		Logger:       zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.InfoLevel),
	}
	if tune != nil {
		tune(&cfg)
	}
	p, err := processor.New(cfg)
	require.NoError(t, err)
	return testrun.Start(t, p.Run)
}

// eventually is the tests' one wait, bounded by 30s here rather than 20s.
var eventually = testrun.EventuallyWithin(30 * time.Second)

// idNum is a record id as a number, for comparisons; the beginning ("") is 0.
var idNum = sinktest.IDNum

// requireOrderedPerKey checks what was published: every id in want is there, and per ordering key each
// record was first acknowledged after every record before it (see sinktest.RequireOrderedPerKey). It
// returns how many messages there were.
func requireOrderedPerKey(t *testing.T, msgs []*pstest.Message, want []string) int {
	t.Helper()
	sinktest.RequireOrderedPerKey(t, sent(msgs), want, sinktest.OrderOpts{})
	return len(msgs)
}

// published reports whether every id in want has been published to topic.
func (f *fake) published(topic string, want []string) bool {
	seen := map[string]bool{}
	for _, m := range f.messages(topic) {
		seen[m.Attributes[handlers.HeaderID]] = true
	}
	return !slices.ContainsFunc(want, func(id string) bool { return !seen[id] })
}

func describe(msgs []*pstest.Message) string { return sinktest.Describe(sent(msgs)) }

// sent is what was published as sinktest sees it: ordering key and id.
func sent(msgs []*pstest.Message) []sinktest.Sent {
	out := make([]sinktest.Sent, len(msgs))
	for i, m := range msgs {
		out[i] = sinktest.Sent{Key: m.OrderingKey, ID: m.Attributes[handlers.HeaderID]}
	}
	return out
}
