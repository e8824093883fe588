package pubsub_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
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
		if id := m.Attributes[pubsub.AttrID]; in.armed[id] {
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

func newDB(t *testing.T, ddl string) db {
	t.Helper()
	d := pgtest.New(t)
	d.Exec(t, ddl)
	return db{d}
}

// insert runs an INSERT ... RETURNING id and returns the ids as text.
func (d db) insert(t *testing.T, sql string, args ...any) []string {
	t.Helper()
	rows, err := d.Pool.Query(context.Background(), sql, args...)
	require.NoError(t, err)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(t, err)
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = strconv.FormatInt(id, 10)
	}
	return out
}

// insertOutbox adds n rows in one statement, with payload {"n": from+i} and key k((from+i) mod keys) for
// i from 1 to n.
func (d db) insertOutbox(t *testing.T, from, n, keys int) []string {
	t.Helper()
	return d.insert(t, `
		INSERT INTO outbox (aggregate_id, type, payload)
		SELECT 'k' || (g % $3), 'booking.created', jsonb_build_object('n', g)
		FROM generate_series($1 + 1, $1 + $2) g ORDER BY g RETURNING id`, from, n, keys)
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
		ConnConfig:   cc,
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
func idNum(t *testing.T, id string) int64 {
	t.Helper()
	if id == "" {
		return 0
	}
	n, err := strconv.ParseInt(id, 10, 64)
	require.NoError(t, err, "record id %q", id)
	return n
}

// requireOrderedPerKey checks that, per ordering key, each record was acknowledged for the first time
// after every record before it on that key: duplicates from redelivery are allowed, a first
// acknowledgement out of order is not. It also checks that every id in want was published, and returns
// how many messages were published in all.
func requireOrderedPerKey(t *testing.T, msgs []*pstest.Message, want []string) int {
	t.Helper()
	seen := map[string]bool{}
	last := map[string]int64{} // ordering key -> highest id acknowledged so far
	for i, m := range msgs {
		id := m.Attributes[pubsub.AttrID]
		if seen[id] {
			continue
		}
		seen[id] = true
		n := idNum(t, id)
		if prev, ok := last[m.OrderingKey]; ok {
			require.Greater(t, n, prev, "message %d: record %s on key %q was first acknowledged after record %d",
				i, id, m.OrderingKey, prev)
		}
		last[m.OrderingKey] = n
	}
	var missing []string
	for _, id := range want {
		if !seen[id] {
			missing = append(missing, id)
		}
	}
	require.Empty(t, missing, "records never published")
	return len(msgs)
}

// published reports whether every id in want has been published to topic.
func (f *fake) published(topic string, want []string) bool {
	seen := map[string]bool{}
	for _, m := range f.messages(topic) {
		seen[m.Attributes[pubsub.AttrID]] = true
	}
	return !slices.ContainsFunc(want, func(id string) bool { return !seen[id] })
}

func describe(msgs []*pstest.Message) string {
	s := ""
	for _, m := range msgs {
		s += fmt.Sprintf("%s/%s ", m.OrderingKey, m.Attributes[pubsub.AttrID])
	}
	return s
}
