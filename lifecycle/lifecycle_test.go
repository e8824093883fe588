package lifecycle_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/inorder-dev/inorder/cursor"
	"github.com/inorder-dev/inorder/handlers"
	"github.com/inorder-dev/inorder/internal/harness/pgtest"
	"github.com/inorder-dev/inorder/internal/harness/testrun"
	"github.com/inorder-dev/inorder/lifecycle"
	"github.com/inorder-dev/inorder/processor"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

type row struct {
	ID int64 `db:"id"`
}

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

func TestStoppingMidRecordFinishesItUnlocksAndReturnsNil(t *testing.T) {
	t.Parallel()
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
	g := lifecycle.New(lifecycle.Config{NoSignals: true})
	g.AddRunner(p)
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	result := make(chan error, 1)
	go func() { result <- g.Run(ctx) }()

	select {
	case id := <-inFlight:
		require.Equal(t, int64(3), id)
	case err := <-result:
		t.Fatalf("the group stopped before the record was in flight: %v", err)
	}
	stop() // what SIGTERM does to a group that listens for it
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
	err = g2.Run(context.Background())
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
			err := g.Run(context.Background())
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

// childEnv names, in a copy of the test binary started by inChild, the test that copy runs.
const childEnv = "INORDER_LIFECYCLE_CHILD"

// inChild runs the calling test's body in a copy of the test binary and returns that copy's exit code and
// output; in the copy it runs body and reports true. Tests that signal themselves run there, so that no
// signal reaches a group another test runs.
func inChild(t *testing.T, body func(t *testing.T)) (code int, out string, isChild bool) {
	t.Helper()
	if os.Getenv(childEnv) == t.Name() {
		body(t)
		return 0, "", true
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^"+t.Name()+"$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), childEnv+"="+t.Name())
	b, err := cmd.CombinedOutput()
	var exitErr *exec.ExitError
	if errors.As(err, &exitErr) {
		return exitErr.ExitCode(), string(b), false
	}
	require.NoError(t, err, "the child: %s", b)
	return 0, string(b), false
}

// passesInChild runs body in a copy of the test binary (see inChild) and requires that it passed there.
func passesInChild(t *testing.T, body func(t *testing.T)) {
	t.Helper()
	code, out, child := inChild(t, body)
	if !child {
		require.Equal(t, 0, code, "the child's output: %s", out)
		require.Contains(t, out, "--- PASS: "+t.Name())
	}
}

// TestZeroGroupStopsCleanlyOnSIGTERM: a zero Group listens for SIGTERM and takes it as a clean stop.
func TestZeroGroupStopsCleanlyOnSIGTERM(t *testing.T) {
	t.Parallel()
	passesInChild(t, func(t *testing.T) {
		var g lifecycle.Group
		stopped := make(chan struct{})
		g.Add("worker", func(ctx context.Context) error {
			// Run listens for signals before any actor starts.
			require.NoError(t, syscall.Kill(syscall.Getpid(), syscall.SIGTERM))
			<-ctx.Done()
			close(stopped)
			return nil
		})
		require.NoError(t, g.Run(context.Background()), "a signal is a clean stop")
		<-stopped
	})
}

// TestZeroGroupExitsWithOSExitOnASecondSignal runs a zero Group whose shutdown hangs after a first
// SIGTERM; a second SIGTERM must end that process with code 130 through os.Exit, the zero Group's
// ExitFunc.
func TestZeroGroupExitsWithOSExitOnASecondSignal(t *testing.T) {
	t.Parallel()
	code, out, child := inChild(t, func(t *testing.T) {
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
		err := g.Run(context.Background())
		t.Fatalf("Run returned (%v) instead of exiting", err)
	})
	if !child {
		require.Equal(t, 130, code, "the child's output: %s", out)
	}
}

// TestSecondSignalCallsExitFunc: a second signal during a shutdown that hangs ends the program through
// Config.ExitFunc, with code 130.
func TestSecondSignalCallsExitFunc(t *testing.T) {
	t.Parallel()
	passesInChild(t, func(t *testing.T) {
		exited := make(chan int, 1)
		g := lifecycle.New(lifecycle.Config{ExitFunc: func(code int) { exited <- code }})
		stuck := make(chan struct{})
		stopping := make(chan struct{})
		g.Add("stuck", func(ctx context.Context) error {
			require.NoError(t, syscall.Kill(syscall.Getpid(), syscall.SIGINT))
			<-ctx.Done()
			close(stopping)
			<-stuck // a shutdown that hangs
			return nil
		})
		result := make(chan error, 1)
		go func() { result <- g.Run(context.Background()) }()
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
	})
}

// TestNoSignalsLeavesSignalsToTheCaller: with NoSignals the group does not take SIGTERM (the caller
// handles it) and stops when its context is done.
func TestNoSignalsLeavesSignalsToTheCaller(t *testing.T) {
	t.Parallel()
	passesInChild(t, func(t *testing.T) {
		var logs testrun.Buffer
		g := lifecycle.New(lifecycle.Config{NoSignals: true, Logger: zerolog.New(&logs)})
		own := make(chan os.Signal, 1)
		signal.Notify(own, syscall.SIGTERM) // the caller's own handling; without it SIGTERM would kill the test
		ctx, stop := context.WithCancel(context.Background())
		g.Add("worker", func(ctx context.Context) error {
			require.NoError(t, syscall.Kill(syscall.Getpid(), syscall.SIGTERM))
			<-own // the signal has been delivered to every listener
			stop()
			<-ctx.Done()
			return nil
		})
		require.NoError(t, g.Run(ctx))
		require.Contains(t, logs.String(), `"cause":"context canceled"`)
		require.NotContains(t, logs.String(), `"signal"`, "the group took the signal it was told to leave")
	})
}

// TestCancelledContextStopsAZeroGroupCleanly: a parent stops a group by cancelling Run's context; every
// actor is interrupted and Run returns nil.
func TestCancelledContextStopsAZeroGroupCleanly(t *testing.T) {
	t.Parallel()
	var g lifecycle.Group
	ctx, stop := context.WithCancel(context.Background())
	interrupted := make(chan struct{})
	g.Add("worker", func(actx context.Context) error {
		stop()
		<-actx.Done()
		close(interrupted)
		return nil
	})
	require.NoError(t, g.Run(ctx))
	<-interrupted
}

// TestASignalAfterAContextStopExits: when the context stopped the group, a signal during a shutdown that
// hangs ends the program; when a signal cancelled that context (signal.NotifyContext, as the CLI runs
// the group), that signal is the first and the next one ends it, whichever of the two the group saw first.
func TestASignalAfterAContextStopExits(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		signal bool // the context is cancelled by a signal, not by its cancel function
	}{{"a cancelled context", false}, {"a context a signal cancelled", true}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			passesInChild(t, func(t *testing.T) {
				var sent atomic.Bool // the signal meant to end the program has been sent
				exited := make(chan int, 1)
				g := lifecycle.New(lifecycle.Config{ExitFunc: func(code int) {
					require.True(t, sent.Load(), "exited before the signal meant to end it")
					exited <- code
				}})
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				if tc.signal {
					var stop context.CancelFunc
					ctx, stop = signal.NotifyContext(ctx, syscall.SIGINT)
					defer stop()
				}
				stuck, stopping := make(chan struct{}), make(chan struct{})
				g.Add("stuck", func(actx context.Context) error {
					// Run listens for signals before any actor starts: the stop begins here.
					if tc.signal {
						require.NoError(t, syscall.Kill(syscall.Getpid(), syscall.SIGINT))
					} else {
						cancel()
					}
					<-actx.Done()
					close(stopping)
					<-stuck // a shutdown that hangs
					return nil
				})
				result := make(chan error, 1)
				go func() { result <- g.Run(ctx) }()
				<-stopping
				sent.Store(true)
				require.NoError(t, syscall.Kill(syscall.Getpid(), syscall.SIGINT))
				select {
				case code := <-exited:
					require.Equal(t, 130, code)
				case <-time.After(10 * time.Second):
					t.Fatal("the signal during the shutdown did not exit")
				}
				close(stuck)
				require.NoError(t, <-result)
			})
		})
	}
}
