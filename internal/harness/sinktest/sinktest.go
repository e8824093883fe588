// Package sinktest is what every sink's tests share: rows written to an outbox, a processor run over it
// with a test's short intervals, the position as it stands, and the check that what reached the sink is
// in order per key. Each sink's tests keep only what is the sink's own: its broker and how to read back
// what it received.
package sinktest

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/trace"

	"github.com/inorder-dev/inorder/handlers"
	"github.com/inorder-dev/inorder/inordertype"
	"github.com/inorder-dev/inorder/internal/harness/pgtest"
	"github.com/inorder-dev/inorder/processor"
	"github.com/inorder-dev/inorder/processor/processortest"
)

// AddClock gives table inorder's insert clock, as `inorder migrate --table` does (see pgtest.AddClock):
// what every source table has.
func AddClock(t testing.TB, db *processortest.DB, table string) {
	t.Helper()
	pgtest.AddClock(t, &pgtest.DB{Name: db.Name, URL: db.URL, Pool: db.Pool}, table)
}

// Insert runs an INSERT ... RETURNING id on pool and returns the ids as text.
func Insert(t testing.TB, pool *pgxpool.Pool, sql string, args ...any) []string {
	t.Helper()
	rows, err := pool.Query(context.Background(), sql, args...)
	require.NoError(t, err)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(t, err)
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = strconv.FormatInt(id, 10)
	}
	return out
}

// InsertOutbox adds n rows to the table outbox in one statement, with type booking.created, payload
// {"n": from+i} and key k((from+i) mod keys) for i from 1 to n.
func InsertOutbox(t testing.TB, pool *pgxpool.Pool, from, n, keys int) []string {
	t.Helper()
	return Insert(t, pool, `
		INSERT INTO outbox (aggregate_id, type, payload)
		SELECT 'k' || (g % $3), 'booking.created', jsonb_build_object('n', g)
		FROM generate_series($1 + 1, $1 + $2) g ORDER BY g RETURNING id`, from, n, keys)
}

// Position returns the process's position id as it stands (inorder.position), "" at the beginning or
// before the process has a cursor row.
func Position(t testing.TB, pool *pgxpool.Pool, process string) string {
	t.Helper()
	var pos *string
	err := pool.QueryRow(context.Background(),
		"SELECT position_id FROM inorder.position WHERE process_name = $1", process).Scan(&pos)
	if errors.Is(err, pgx.ErrNoRows) || pos == nil {
		return ""
	}
	require.NoError(t, err)
	return *pos
}

// RunOpts tune the processor Run starts; zero values keep the processor's defaults.
type RunOpts struct {
	MaxInFlight    int
	HandlerTimeout time.Duration
	OnHalt         processor.OnHalt
	TracerProvider trace.TracerProvider
}

// Run starts a processor of process on the table outbox (keyed by aggregate_id) with h until the test
// ends, polling every 20ms and retrying from 20ms to 200ms.
func Run(t *testing.T, db *processortest.DB, process string, h handlers.Handler[handlers.Row], o RunOpts) *processortest.Running {
	t.Helper()
	p, err := processor.New(processor.Config[handlers.Row]{
		StartFrom:      inordertype.StartFromBeginning,
		Process:        process,
		ClientConfig:   processor.ClientConfig{ConnConfig: db.ConnConfig(t)},
		Source:         inordertype.Source{Table: "outbox", KeyColumn: "aggregate_id"},
		Handler:        h,
		MaxInFlight:    o.MaxInFlight,
		HandlerTimeout: o.HandlerTimeout,
		OnHalt:         o.OnHalt,
		TracerProvider: o.TracerProvider,
		PollInterval:   20 * time.Millisecond,
		RetryMin:       20 * time.Millisecond,
		RetryMax:       200 * time.Millisecond,
		Logger:         zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.InfoLevel),
	})
	require.NoError(t, err)
	return processortest.Start(t, p, nil)
}

// IDNum is a record id as a number, for comparisons; the beginning ("") is 0.
func IDNum(t testing.TB, id string) int64 {
	t.Helper()
	if id == "" {
		return 0
	}
	n, err := strconv.ParseInt(id, 10, 64)
	require.NoError(t, err, "record id %q", id)
	return n
}

// Sent is one record as the sink received it: its key, its id, and where it went (a partition, a
// stream), in the order the sink received them there.
type Sent struct {
	Key, ID, Place string
}

// OrderOpts say what else RequireOrderedPerKey checks.
type OrderOpts struct {
	// OnePlace requires every record of a key to have gone to one place (a key's partition).
	OnePlace bool
}

// RequireOrderedPerKey checks what the sink received: every id in want is there, and per key and place
// each record arrived for the first time after every record before it (copies sent again by a
// redelivery are allowed, a first copy out of order is not). It returns how many were copies.
func RequireOrderedPerKey(t testing.TB, sent []Sent, want []string, o OrderOpts) (duplicates int) {
	t.Helper()
	seen := map[string]bool{}
	last := map[string]int64{}   // place and key -> highest id first received so far
	place := map[string]string{} // key -> its place
	for i, s := range sent {
		if p, ok := place[s.Key]; ok && o.OnePlace && s.Key != "" {
			require.Equal(t, p, s.Place, "record %d (id %s): key %q in two places", i, s.ID, s.Key)
		}
		place[s.Key] = s.Place
		if seen[s.ID] {
			duplicates++
			continue
		}
		seen[s.ID] = true
		n, at := IDNum(t, s.ID), s.Place+"\x00"+s.Key
		if prev, ok := last[at]; ok {
			require.Greater(t, n, prev, "record %d: id %s on key %q first received after id %d: %s",
				i, s.ID, s.Key, prev, Describe(sent))
		}
		last[at] = n
	}
	var missing []string
	for _, id := range want {
		if !seen[id] {
			missing = append(missing, id)
		}
	}
	require.Empty(t, missing, "records never received")
	return duplicates
}

// Describe lists what the sink received, as key/place/id, for a failure's message.
func Describe(sent []Sent) string {
	var b strings.Builder
	for i, s := range sent {
		if i == 200 {
			fmt.Fprintf(&b, "... (%d more)", len(sent)-i)
			break
		}
		fmt.Fprintf(&b, "%s/%s/%s ", s.Key, s.Place, s.ID)
	}
	return b.String()
}

// Outbox is a sink test's database, with its table outbox: embed it in the test's bundle, beside the
// sink's own broker and client.
type Outbox struct {
	DB *processortest.DB
}

// Run starts a processor of process on the outbox with h until the test ends (see Run).
func (o Outbox) Run(t *testing.T, process string, h handlers.Handler[handlers.Row], opts RunOpts) *processortest.Running {
	t.Helper()
	return Run(t, o.DB, process, h, opts)
}

// Insert runs an INSERT ... RETURNING id and returns the ids as text.
func (o Outbox) Insert(t testing.TB, sql string, args ...any) []string {
	t.Helper()
	return Insert(t, o.DB.Pool, sql, args...)
}

// InsertOutbox adds n rows to the outbox (see InsertOutbox).
func (o Outbox) InsertOutbox(t testing.TB, from, n, keys int) []string {
	t.Helper()
	return InsertOutbox(t, o.DB.Pool, from, n, keys)
}

// Position returns the process's position id as it stands, "" at the beginning.
func (o Outbox) Position(t testing.TB, process string) string {
	t.Helper()
	return Position(t, o.DB.Pool, process)
}
