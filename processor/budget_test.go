package processor_test

import (
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/inorder-dev/inorder/handlers"
	"github.com/inorder-dev/inorder/inordertype"
	"github.com/inorder-dev/inorder/internal/harness/pgtest"
	"github.com/inorder-dev/inorder/processor"
)

// document is a row of the docs table: a text body and a jsonb document, each up to megabytes.
type document struct {
	ID   int64  `db:"id"`
	Body string `db:"body"`
	Doc  string `db:"doc"`
}

// docCollector records the documents delivered and the sizes of the batches read.
type docCollector struct {
	processor.Observer
	mu      sync.Mutex
	ids     []int64
	sizes   []int // each record's body and document, in bytes
	batches []int // the records of each batch read, empty ones left out
}

func (c *docCollector) Handle(_ context.Context, rec *handlers.Record[document]) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ids = append(c.ids, rec.Value.ID)
	c.sizes = append(c.sizes, len(rec.Value.Body)+len(rec.Value.Doc))
	return nil
}

func (c *docCollector) Batch(_ string, n int) {
	if n > 0 {
		c.mu.Lock()
		c.batches = append(c.batches, n)
		c.mu.Unlock()
	}
}

func (c *docCollector) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.ids)
}

// TestBigRecordsAreReadWithinTheByteBudget drains documents of about a megabyte (a text body that does
// not compress, and a jsonb document that compresses about twice, so that the read's stored sizes are
// below what it receives until the ratio is learned), small rows, and one record of 6 MiB, twice the
// budget: every record arrives once and in order, the big one alone in its batch, and no batch of more
// than one record holds more than the budget, in either checkpoint mode.
func TestBigRecordsAreReadWithinTheByteBudget(t *testing.T) {
	t.Parallel()
	for _, mode := range []processor.Checkpoint{processor.CheckpointRecord, processor.CheckpointBatch} {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			b.db.Exec(t, `CREATE TABLE docs (id bigserial PRIMARY KEY, created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
					body text, doc jsonb);
				CREATE INDEX ON docs (created_at, id);
				CREATE FUNCTION pg_temp.noise(n int, seed int) RETURNS text LANGUAGE sql AS
					$$ SELECT string_agg(md5((seed * 100000 + i)::text), '') FROM generate_series(1, n / 32) i $$;
				CREATE FUNCTION pg_temp.document(n int, seed int) RETURNS jsonb LANGUAGE sql AS
					$$ SELECT jsonb_agg(jsonb_build_object('line', i, 'sku', md5((seed * 100000 + i)::text), 'qty', i % 7))
					   FROM generate_series(1, n / 70) i $$;
				INSERT INTO docs (body, doc) SELECT pg_temp.noise(500000, g), pg_temp.document(500000, g) FROM generate_series(1, 12) g;
				INSERT INTO docs (body, doc) SELECT 'small ' || g, '{}' FROM generate_series(1, 30) g;
				INSERT INTO docs (body, doc) SELECT pg_temp.noise(6 << 20, 99), '{}';
				INSERT INTO docs (body, doc) SELECT pg_temp.noise(400000, g), pg_temp.document(400000, g) FROM generate_series(13, 20) g;
				INSERT INTO docs (body, doc) SELECT 'small ' || g, '{}' FROM generate_series(31, 40) g;`)
			pgtest.AddClock(t, b.db, "docs") // its rows are older than the clock: ordered by created_at
			var want []int64
			rows, err := b.db.Pool.Query(context.Background(), `SELECT id FROM docs ORDER BY created_at, id`)
			require.NoError(t, err)
			for rows.Next() {
				var id int64
				require.NoError(t, rows.Scan(&id))
				want = append(want, id)
			}
			require.NoError(t, rows.Err())

			const budget = 3 << 20
			c := &docCollector{Observer: nopObserver{}}
			start(t, processor.Config[document]{
				Process: "docs", ClientConfig: processor.ClientConfig{ConnConfig: b.cfg.ClientConfig.ConnConfig}, StartFrom: b.cfg.StartFrom, Logger: b.cfg.Logger,
				PollInterval: b.cfg.PollInterval, Checkpoint: mode, Observer: c,
				Source:     inordertype.Source{Table: "docs", Columns: []string{"id", "body", "doc"}},
				Handler:    c,
				BatchBytes: budget,
			})
			waitFor(t, "every document", func() bool { return c.count() >= len(want) })

			c.mu.Lock()
			defer c.mu.Unlock()
			require.Equal(t, want, c.ids, "every record once, in order")
			at := 0
			for _, n := range c.batches {
				sum := 0
				for _, s := range c.sizes[at : at+n] {
					sum += s
				}
				if n > 1 {
					require.LessOrEqual(t, sum, budget, "the batch of records %d to %d", c.ids[at], c.ids[at+n-1])
				}
				if sum > 6<<20 {
					require.Equal(t, 1, n, "the record of 6 MiB alone in its batch")
				}
				at += n
			}
			require.Equal(t, len(want), at, "the batches hold every record")
		})
	}
}
