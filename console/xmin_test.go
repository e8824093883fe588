package console_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/inorder-dev/inorder/console"
	"github.com/inorder-dev/inorder/internal/harness/pgtest"
)

// page fetches u and returns its body, for conditions polled by EventuallyWithT.
func page(u string) (string, error) {
	resp, err := http.Get(u)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET %s: %d %s", u, resp.StatusCode, body)
	}
	return string(body), err
}

// TestPagesNameWhatHoldsTheXminHorizon: past Config.XminHoldAfter, the overview and a process page name the
// session holding the database's xmin horizon, with its state and start, and say what it costs; not before.
func TestPagesNameWhatHoldsTheXminHorizon(t *testing.T) {
	t.Parallel()
	b := setup(t)
	h := pgtest.HoldSnapshot(t, b.db.URL, "nightly-report")
	late := b.serve(t, console.Config{XminHoldAfter: time.Hour})
	srv := b.serve(t, console.Config{XminHoldAfter: time.Second})
	name := fmt.Sprintf("backend pid %d of database %s (user postgres, application nightly-report)", h.PID, b.db.Name)

	for _, path := range []string{"/", "/process/payments"} {
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			body, err := page(srv.URL + path)
			require.NoError(c, err)
			require.Contains(c, body, "Vacuum is held back")
			require.Contains(c, body, name)
			require.Contains(c, body, "idle in transaction, transaction started")
			require.Contains(c, body, "What it costs: inorder is unaffected")
		}, 20*time.Second, 20*time.Millisecond, path)
	}
	body, err := page(late.URL + "/")
	require.NoError(t, err)
	require.NotContains(t, body, "Vacuum is held back", "not an hour yet")
	require.NotContains(t, body, name)
}

// TestOperatorSeesWhatHoldsTheXminHorizonInTheBrowser: a console whose role lacks pg_read_all_stats shows,
// on the overview that refreshes itself, the session of another role that holds the xmin horizon, once it
// has seen it hold it past the threshold, and says that its start is hidden.
func TestOperatorSeesWhatHoldsTheXminHorizonInTheBrowser(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	url := pgtest.Unprivileged(t, db)
	db.Exec(t, fmt.Sprintf("GRANT USAGE ON SCHEMA inorder TO %[1]s; GRANT SELECT ON ALL TABLES IN SCHEMA inorder TO %[1]s",
		pgx.Identifier{db.Name + "_watcher"}.Sanitize()))
	pool, err := pgxpool.New(ctx, url)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	con, err := console.New(console.Config{Pool: pool, XminHoldAfter: time.Second, RefreshInterval: 200 * time.Millisecond})
	require.NoError(t, err)
	srv := httptest.NewServer(con)
	t.Cleanup(srv.Close)
	bctx := browser(t)

	require.NoError(t, chromedp.Run(bctx,
		chromedp.Navigate(srv.URL+"/"),
		chromedp.WaitVisible(`body[data-refresh]`, chromedp.ByQuery),
	))
	h := pgtest.HoldSnapshot(t, db.URL, "pg_dump")
	var live string
	require.NoError(t, chromedp.Run(bctx,
		chromedp.Poll(fmt.Sprintf(`document.getElementById("live").innerText.includes("backend pid %d")`, h.PID), nil),
		chromedp.Evaluate(liveText, &live),
	))
	require.Contains(t, live, "Vacuum is held back")
	require.Regexp(t, `its xmin is (1 transaction|[0-9]+ transactions) old`, live)
	require.Contains(t, live, "The xmin horizon has been held for at least")
	require.Contains(t, live, fmt.Sprintf("backend pid %d of database %s (user postgres, application pg_dump)", h.PID, db.Name))
	require.Contains(t, live, "hidden from the console's role (granting it pg_read_all_stats, or pg_monitor, shows them)")
}
