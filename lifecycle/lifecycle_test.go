package lifecycle_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/inorder-dev/inorder/cursor"
	"github.com/inorder-dev/inorder/handlers"
	"github.com/inorder-dev/inorder/internal/pgtest"
	"github.com/inorder-dev/inorder/lifecycle"
	"github.com/inorder-dev/inorder/processor"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

type row struct {
	ID int64 `db:"id"`
}

// signalMu serialises the tests that signal the test binary itself: a signal reaches every group
// listening at that moment.
var signalMu sync.Mutex

func setup(t *testing.T) (*pgtest.DB, processor.Config[row]) {
	t.Helper()
	db := pgtest.New(t)
	db.Exec(t, `CREATE TABLE jobs (id bigserial PRIMARY KEY, created_at timestamptz NOT NULL DEFAULT clock_timestamp());
		CREATE INDEX ON jobs (created_at, id);
		INSERT INTO jobs SELECT FROM generate_series(1, 5)`)
	cc, err := pgx.ParseConfig(db.URL)
	require.NoError(t, err)
	return db, processor.Config[row]{
		StartFrom: cursor.StartFromBeginning,
		Process:   "jobs", ConnConfig: cc, Source: processor.Source{Table: "jobs", Columns: []string{"id"}},
		PollInterval: 20 * time.Millisecond,
	}
}

func TestSIGTERMMidRecordFinishesItUnlocksAndReturnsNil(t *testing.T) {
	signalMu.Lock()
	defer signalMu.Unlock()
	db, cfg := setup(t)
	inFlight := make(chan int64)
	release := make(chan struct{})
	var mu sync.Mutex
	var done []int64
	cfg.Handler = handlers.HandlerFunc[row](func(ctx context.Context, rec *handlers.Record[row]) error {
		if rec.Value.ID == 3 {
			inFlight <- rec.Value.ID
			<-release // the signal arrives while this record is in its handler
		}
		mu.Lock()
		done = append(done, rec.Value.ID)
		mu.Unlock()
		return nil
	})
	p, err := processor.New(cfg)
	require.NoError(t, err)
	g := lifecycle.New(lifecycle.Config{})
	g.AddRunner(p)
	result := make(chan error, 1)
	go func() { result <- g.Run() }()

	select {
	case id := <-inFlight:
		require.Equal(t, int64(3), id)
	case err := <-result:
		t.Fatalf("the group stopped before the record was in flight: %v", err)
	}
	require.NoError(t, syscall.Kill(syscall.Getpid(), syscall.SIGTERM))
	// The group must wait for the record in flight, not cut it off.
	select {
	case err := <-result:
		t.Fatalf("the group returned (%v) while a record was in flight", err)
	case <-time.After(100 * time.Millisecond):
	}
	close(release)
	require.NoError(t, <-result)
	require.Equal(t, []int64{1, 2, 3}, done, "the record in flight finished; nothing after it was started")

	var posID string
	require.NoError(t, db.Pool.QueryRow(context.Background(),
		"SELECT position_id FROM inorder.cursor WHERE process_name = 'jobs'").Scan(&posID))
	require.Equal(t, "3", posID, "the position of the record in flight is durable")
	conn, err := db.Pool.Acquire(context.Background())
	require.NoError(t, err)
	defer conn.Release()
	// The server ends the closed session (and its locks) a moment after the client hung up.
	require.Eventually(t, func() bool {
		infos, err := cursor.List(context.Background(), conn.Conn(), "jobs")
		require.NoError(t, err)
		return !infos[0].Locked && infos[0].Connected == 0
	}, 10*time.Second, 5*time.Millisecond, "the cursor is unlocked and its connection closed")
}

func TestSecondSignalExitsAtOnce(t *testing.T) {
	signalMu.Lock()
	defer signalMu.Unlock()
	exited := make(chan int, 1)
	g := lifecycle.New(lifecycle.Config{ExitFunc: func(code int) { exited <- code }})
	stuck := make(chan struct{})
	started := make(chan struct{})
	stopping := make(chan struct{})
	g.Add("stuck", func(ctx context.Context) error {
		close(started)
		<-ctx.Done()
		close(stopping)
		<-stuck // a shutdown that hangs
		return nil
	})
	result := make(chan error, 1)
	go func() { result <- g.Run() }()
	<-started
	require.NoError(t, syscall.Kill(syscall.Getpid(), syscall.SIGINT))
	<-stopping // the first signal began the shutdown
	require.NoError(t, syscall.Kill(syscall.Getpid(), syscall.SIGINT))
	select {
	case code := <-exited:
		require.Equal(t, 130, code)
	case <-time.After(10 * time.Second):
		t.Fatal("the second signal did not exit")
	}
	close(stuck)
	require.NoError(t, <-result)
}

func TestAFatalProcessorErrorStopsTheGroupNamingTheProcess(t *testing.T) {
	t.Parallel()
	_, cfg := setup(t)
	cfg.Source.Table = "missing_table"
	cfg.Handler = handlers.HandlerFunc[row](func(context.Context, *handlers.Record[row]) error { return nil })
	p, err := processor.New(cfg)
	require.NoError(t, err)
	other := make(chan struct{})
	g2 := lifecycle.New(lifecycle.Config{})
	g2.AddRunner(p)
	g2.Add("bystander", func(ctx context.Context) error { <-ctx.Done(); close(other); return nil })
	err = g2.Run()
	require.Error(t, err)
	require.True(t, errors.Is(err, processor.ErrInvalidSource))
	require.Contains(t, err.Error(), `process "jobs": invalid source: table "missing_table" does not exist`)
	require.NotContains(t, err.Error(), "process jobs:", "the process is named once")
	<-other // every other actor was interrupted
}

func TestZeroGroupReturnsWhatStoppedIt(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	for _, tt := range []struct {
		name    string
		result  error // what the actor "first" returns
		wantErr string
	}{
		{name: "an actor's error, prefixed with its name", result: boom, wantErr: "first: boom"},
		{name: "nil, when an actor returns nil", result: nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var g lifecycle.Group
			interrupted := make(chan struct{})
			g.Add("first", func(context.Context) error { return tt.result })
			g.Add("bystander", func(ctx context.Context) error { <-ctx.Done(); close(interrupted); return nil })
			err := g.Run()
			<-interrupted // every other actor was interrupted
			if tt.wantErr == "" {
				require.NoError(t, err)
				return
			}
			require.EqualError(t, err, tt.wantErr)
			require.ErrorIs(t, err, tt.result)
		})
	}
}

// TestZeroGroupStopsCleanlyOnSIGTERM signals the test binary, so it does not run in parallel: parallel
// tests run once every sequential one has returned, and no other group listens meanwhile.
func TestZeroGroupStopsCleanlyOnSIGTERM(t *testing.T) {
	signalMu.Lock()
	defer signalMu.Unlock()
	var g lifecycle.Group
	started := make(chan struct{})
	stopped := make(chan struct{})
	g.Add("worker", func(ctx context.Context) error {
		close(started) // Run listens for signals before any actor starts
		<-ctx.Done()
		close(stopped)
		return nil
	})
	result := make(chan error, 1)
	go func() { result <- g.Run() }()
	<-started
	require.NoError(t, syscall.Kill(syscall.Getpid(), syscall.SIGTERM))
	select {
	case err := <-result:
		require.NoError(t, err, "a signal is a clean stop")
	case <-time.After(10 * time.Second):
		t.Fatal("SIGTERM did not stop a zero Group")
	}
	<-stopped
}

// zeroGroupChildEnv marks the copy of the test binary that TestZeroGroupExitsWithOSExitOnASecondSignal
// starts.
const zeroGroupChildEnv = "INORDER_LIFECYCLE_ZERO_GROUP_CHILD"

// TestZeroGroupExitsWithOSExitOnASecondSignal runs a zero Group in a copy of the test binary, whose
// shutdown hangs after a first SIGTERM; a second SIGTERM must end that process with code 130 through
// os.Exit, the zero Group's ExitFunc.
func TestZeroGroupExitsWithOSExitOnASecondSignal(t *testing.T) {
	if os.Getenv(zeroGroupChildEnv) == "1" {
		var g lifecycle.Group
		g.Add("stuck", func(ctx context.Context) error {
			if err := syscall.Kill(syscall.Getpid(), syscall.SIGTERM); err != nil {
				return err
			}
			<-ctx.Done() // the first signal began the shutdown
			if err := syscall.Kill(syscall.Getpid(), syscall.SIGTERM); err != nil {
				return err
			}
			select {} // a shutdown that hangs
		})
		err := g.Run()
		t.Fatalf("Run returned (%v) instead of exiting", err)
	}
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestZeroGroupExitsWithOSExitOnASecondSignal$", "-test.count=1")
	cmd.Env = append(os.Environ(), zeroGroupChildEnv+"=1")
	out, err := cmd.CombinedOutput()
	var exitErr *exec.ExitError
	require.ErrorAs(t, err, &exitErr, "the child exited: %s", out)
	require.Equal(t, 130, exitErr.ExitCode(), "the child's output: %s", out)
}
