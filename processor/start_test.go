package processor_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inorder-dev/inorder/inordertype"
	"github.com/inorder-dev/inorder/processor"
)

// TestStartFromHasNoDefaultForATableWithRows: the library keeps the rule the CLI shows. A new process
// without StartFrom on a table with rows is refused (a StartFromError), with no cursor row left; on an
// empty table it starts at the beginning; StartFromTime delivers the rows created from then on.
func TestStartFromHasNoDefaultForATableWithRows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	empty := b.cfg
	empty.StartFrom = inordertype.StartFrom{}
	empty.Process = "on_an_empty_table"
	start(t, empty)
	waitFor(t, "the process on an empty table to register", func() bool { return b.registered(t, empty.Process) })
	first := b.insert(t, 3)
	waitFor(t, "its rows", func() bool { return b.h.count() == 3 })
	require.Equal(t, first, b.h.ids())

	late := b.cfg
	late.StartFrom, late.Process, late.Handler = inordertype.StartFrom{}, "late", newCollector()
	p, err := processor.New(late)
	require.NoError(t, err)
	runCtx, cancel := context.WithTimeout(ctx, 20*time.Second) // without the rule it would run on
	defer cancel()
	err = p.Run(runCtx)
	var sfe *processor.StartFromError
	require.ErrorAs(t, err, &sfe)
	require.ErrorContains(t, err, "did you mean on_an_empty_table?")
	require.False(t, b.registered(t, "late"), "no cursor row left")

	var third time.Time
	require.NoError(t, b.db.Pool.QueryRow(ctx, "SELECT created_at FROM events WHERE id = $1", first[2]).Scan(&third))
	h := newCollector()
	from := b.cfg
	from.StartFrom, from.Process, from.Handler = inordertype.StartFromTime(third), "from_a_time", h
	start(t, from)
	waitFor(t, "the rows from the time on", func() bool { return h.count() == 1 })
	require.Equal(t, first[2:], h.ids())

	_, err = processor.New(processor.Config[event]{Process: "x#1/2", ClientConfig: processor.ClientConfig{ConnConfig: b.cfg.ClientConfig.ConnConfig}, Handler: h,
		Source: b.cfg.Source})
	require.ErrorContains(t, err, "the name has the form of a partition's")
}

// registered reports whether process has a cursor row.
func (b *bundle) registered(t *testing.T, process string) bool {
	t.Helper()
	var n int
	require.NoError(t, b.db.Pool.QueryRow(context.Background(),
		"SELECT count(*) FROM inorder.cursor WHERE process_name = $1", process).Scan(&n))
	return n == 1
}

// TestAStructThatDoesNotMatchItsColumnsFailsAtStart: a record type whose fields do not pair up with
// Source.Columns is found at start, naming both sides, with no cursor row left, rather than by pgx's scan
// error at the first record.
func TestAStructThatDoesNotMatchItsColumnsFailsAtStart(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.insert(t, 1)
	cfg := b.cfg
	cfg.Source.Columns = []string{"id", "aggregate_id", "payload", "created_at"} // no seq; payload has no field
	p, err := processor.New(cfg)
	require.NoError(t, err)
	err = p.Run(context.Background())
	require.ErrorIs(t, err, processor.ErrInvalidSource)
	require.ErrorContains(t, err, "processor_test.event does not match the columns read from public.events "+
		"(id, aggregate_id, payload, created_at): fields without a column: [seq]; columns without a field: [payload]")
	require.False(t, b.registered(t, cfg.Process), "no cursor row")
	require.Zero(t, b.h.count())
}

// TestNewRefusesWhatTheCLIRefuses: a negative setting is a mistake, not a request for the default.
func TestNewRefusesWhatTheCLIRefuses(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, tc := range []struct {
		name string
		set  func(*processor.Config[event])
		want string
	}{
		{"batch size", func(c *processor.Config[event]) { c.BatchSize = -1 }, "Config.BatchSize is negative"},
		{"lease", func(c *processor.Config[event]) { c.Lease = -time.Second }, "Config.Lease is negative"},
		{"retries", func(c *processor.Config[event]) { c.RetryMin, c.RetryMax = time.Minute, time.Second },
			"Config.RetryMax (1s) is below Config.RetryMin (1m0s)"},
	} {
		cfg := b.cfg
		tc.set(&cfg)
		_, err := processor.New(cfg)
		require.ErrorContains(t, err, tc.want, tc.name)
	}
}
