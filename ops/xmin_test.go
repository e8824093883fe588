package ops_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/inorder-dev/inorder/internal/harness/pgtest"
	"github.com/inorder-dev/inorder/internal/harness/testrun"
	"github.com/inorder-dev/inorder/ops"
)

// TestXminSeriesNameTheHolder: a report idle in REPEATABLE READ holds the database's xmin horizon. Past the
// threshold, the xmin series name it (its pid, database, user and application) and say how long it has held
// it, both to a superuser and to a role without pg_read_all_stats, which cannot see its start and times it
// from when it first saw it; once it ends, its series goes.
func TestXminSeriesNameTheHolder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	unprivileged, err := pgxpool.New(ctx, pgtest.Unprivileged(t, db))
	require.NoError(t, err)
	t.Cleanup(unprivileged.Close)
	const after = time.Second
	serve := func(pool *pgxpool.Pool) string {
		m := ops.NewMetrics()
		m.SetXminHoldAfter(after)
		srv := httptest.NewServer(ops.NewHandler(m, nil))
		t.Cleanup(srv.Close)
		testrun.Start(t, m.WatchLag(pool, 20*time.Millisecond))
		return srv.URL + "/metrics"
	}
	super, watcher := serve(db.Pool), serve(unprivileged)
	require.Equal(t, 0.0, scrape(t, super)["inorder_xmin_errors_total"])

	h := pgtest.HoldSnapshot(t, db.URL, "nightly-report")
	holder := fmt.Sprintf(`inorder_xmin_holder{application="nightly-report",database=%q,kind="backend",name="",pid="%d",user="postgres"}`,
		db.Name, h.PID)
	for _, url := range []string{super, watcher} {
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			s := scraped(url)
			require.Contains(c, s, holder, "the holder is named within a few seconds of the threshold")
			require.GreaterOrEqual(c, s[holder], after.Seconds(), "only past the threshold")
			require.GreaterOrEqual(c, s["inorder_xmin_held_seconds"], s[holder])
		}, 20*time.Second, 20*time.Millisecond, url)
	}
	require.Equal(t, 0.0, scrape(t, watcher)["inorder_xmin_errors_total"], "every role may look")

	h.End()
	for _, url := range []string{super, watcher} {
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			s := scraped(url)
			require.NotNil(c, s)
			require.NotContains(c, s, holder, "it ended")
		}, 20*time.Second, 20*time.Millisecond, url)
	}
}
