package processor_test

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/inorder-dev/inorder/migrations"
)

// logBuffer collects a processor's log lines for assertions.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logBuffer) count(s string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Count(l.buf.String(), s)
}

func createNotifyTrigger(t *testing.T, b *bundle) {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), b.db.URL)
	require.NoError(t, err)
	defer conn.Close(context.Background())
	require.NoError(t, migrations.CreateNotifyTrigger(context.Background(), conn, "events"))
}

func TestNotifyWakesTheLoopWithoutWaitingForThePollInterval(t *testing.T) {
	t.Parallel()
	b := setup(t)
	createNotifyTrigger(t, b)
	var logs logBuffer
	b.cfg.Listen = true
	b.cfg.PollInterval = time.Hour // only a notification can make it look again within the test
	b.cfg.Logger = zerolog.New(&logs).Level(zerolog.DebugLevel)
	first := b.insert(t, 2)
	start(t, b.cfg)
	waitFor(t, "the rows before the start", func() bool { return b.h.count() == 2 })
	waitFor(t, "the listener", func() bool { return logs.count("listening for insert notifications") == 1 })

	more := b.insert(t, 3)
	waitFor(t, "the rows inserted while idle", func() bool { return b.h.count() == 5 })
	require.Equal(t, append(first, more...), b.h.ids())

	// Cut the listener: the processor gets a new one by itself, looks at once for what it may have
	// missed, and is woken by notifications again. Every test's processor is the same instance: only
	// this database's listener is cut.
	var killed bool
	require.NoError(t, b.db.Pool.QueryRow(context.Background(), `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
		WHERE application_name LIKE 'inorder-listen:%' AND datname = current_database()`).Scan(&killed))
	require.True(t, killed)
	during := b.insert(t, 1)
	waitFor(t, "a new listener", func() bool { return logs.count("listening for insert notifications") == 2 })
	require.Equal(t, 1, logs.count("wake-up listener lost"))
	waitFor(t, "the row inserted while nobody listened", func() bool { return b.h.count() == 6 })
	after := b.insert(t, 2)
	waitFor(t, "the rows after the listener came back", func() bool { return b.h.count() == 8 })
	require.Equal(t, append(append(append(first, more...), during...), after...), b.h.ids())
	require.Zero(t, logs.count("no insert-notification trigger"))
}

func TestWithoutATriggerListeningFallsBackToPolling(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var logs logBuffer
	b.cfg.Listen = true
	b.cfg.Logger = zerolog.New(&logs)
	start(t, b.cfg)
	waitFor(t, "the warning", func() bool { return logs.count("no insert-notification trigger on the table") == 1 })
	ids := b.insert(t, 4)
	waitFor(t, "the rows, by polling", func() bool { return b.h.count() == 4 })
	require.Equal(t, ids, b.h.ids())
	require.Equal(t, 1, logs.count("inorder migrate --notify public.events"))
}
