package lifecycle_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
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
	"github.com/inorder-dev/inorder/inordertype"
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
		CREATE INDEX ON jobs (created_at, id)`)
	pgtest.AddClock(t, db, "jobs")
	db.Exec(t, "INSERT INTO jobs SELECT FROM generate_series(1, 5)")
	cc, err := pgx.ParseConfig(db.URL)
	require.NoError(t, err)
	return db, processor.Config[row]{
		StartFrom: inordertype.StartFromBeginning,
		Process:   "jobs", ClientConfig: processor.ClientConfig{ConnConfig: cc}, Source: inordertype.Source{Table: "jobs", Columns: []string{"id"}},
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
	g := lifecycle.New(lifecycle.Config{})
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
	stop() // what SIGTERM does to a group with a signal actor
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
		procs, err := cursor.Read(context.Background(), conn.Conn(), cursor.ReadOpts{Process: "jobs"})
		require.NoError(t, err)
		return !procs[0].Info.Locked && procs[0].Info.Connected == 0
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

// inChild runs the calling test's body in a copy of the test binary and returns how that copy ended and
// its output; in the copy it runs body and reports true. Tests that signal themselves run there, so that no
// signal reaches a group another test runs.
func inChild(t *testing.T, body func(t *testing.T)) (state *os.ProcessState, out string, isChild bool) {
	t.Helper()
	if os.Getenv(childEnv) == t.Name() {
		body(t)
		return nil, "", true
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^"+t.Name()+"$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), childEnv+"="+t.Name())
	b, err := cmd.CombinedOutput()
	var exitErr *exec.ExitError
	if !errors.As(err, &exitErr) {
		require.NoError(t, err, "the child: %s", b)
	}
	return cmd.ProcessState, string(b), false
}

// passesInChild runs body in a copy of the test binary (see inChild) and requires that it passed there.
func passesInChild(t *testing.T, body func(t *testing.T)) {
	t.Helper()
	state, out, child := inChild(t, body)
	if !child {
		require.Equal(t, 0, state.ExitCode(), "the child's output: %s", out)
		require.Contains(t, out, "--- PASS: "+t.Name())
	}
}

// TestSignalActorStopsTheGroupWithASignalError: a group with a signal actor stops at SIGTERM, says so,
// and returns the actor's *SignalError, which names the signal, as it is.
func TestSignalActorStopsTheGroupWithASignalError(t *testing.T) {
	t.Parallel()
	passesInChild(t, func(t *testing.T) {
		var logs testrun.Buffer
		g := lifecycle.New(lifecycle.Config{Logger: zerolog.New(&logs)})
		sigs := lifecycle.NewSignalActor(context.Background(), lifecycle.SignalOpts{})
		defer sigs.Stop()
		g.AddSignals(sigs)
		stopped := make(chan struct{})
		g.Add("worker", func(ctx context.Context) error {
			// The actor listens from NewSignalActor on.
			require.NoError(t, syscall.Kill(syscall.Getpid(), syscall.SIGTERM))
			<-ctx.Done()
			close(stopped)
			return nil
		})
		err := g.Run(context.Background())
		<-stopped
		var sig *lifecycle.SignalError
		require.ErrorAs(t, err, &sig)
		require.Equal(t, syscall.SIGTERM, sig.Signal)
		require.EqualError(t, err, "received signal terminated", "no actor's name before it")
		require.Contains(t, logs.String(), `"signal":"terminated","message":"stopping: finishing the records in flight"`)
		require.Equal(t, err, context.Cause(sigs.Context()), "the actor's context ended at the signal, naming it")
	})
}

// TestASignalDuringStartUpStopsTheStartUpAndTheGroup: a signal before the group runs ends the actor's
// Context, with the signal as its cause, and the group, run anyway, stops at once with that signal.
func TestASignalDuringStartUpStopsTheStartUpAndTheGroup(t *testing.T) {
	t.Parallel()
	passesInChild(t, func(t *testing.T) {
		sigs := lifecycle.NewSignalActor(context.Background(), lifecycle.SignalOpts{Signals: []os.Signal{syscall.SIGUSR1}})
		defer sigs.Stop()
		require.NoError(t, syscall.Kill(syscall.Getpid(), syscall.SIGUSR1))
		<-sigs.Context().Done()
		var sig *lifecycle.SignalError
		require.ErrorAs(t, context.Cause(sigs.Context()), &sig)
		require.Equal(t, syscall.SIGUSR1, sig.Signal)

		var g lifecycle.Group
		g.AddSignals(sigs)
		g.Add("worker", func(ctx context.Context) error { <-ctx.Done(); return nil })
		err := g.Run(context.Background())
		require.ErrorAs(t, err, &sig)
		require.Equal(t, syscall.SIGUSR1, sig.Signal)
	})
}

// TestASignalWhileStoppingGoesToWhileStopping: a signal during a shutdown that hangs, whether a first
// signal or the context began it, goes to SignalOpts.WhileStopping, where a program would exit; the group
// itself goes on waiting for its actors.
func TestASignalWhileStoppingGoesToWhileStopping(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		signal bool // a signal begins the shutdown, not the context
	}{{"after a first signal", true}, {"after the context ended", false}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			passesInChild(t, func(t *testing.T) {
				var sent atomic.Bool // the signal meant for WhileStopping has been sent
				whileStopping := make(chan os.Signal, 1)
				sigs := lifecycle.NewSignalActor(context.Background(), lifecycle.SignalOpts{WhileStopping: func(s os.Signal) {
					require.True(t, sent.Load(), "a signal went to WhileStopping before the one meant for it")
					whileStopping <- s
				}})
				defer sigs.Stop()
				var g lifecycle.Group
				g.AddSignals(sigs)
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				// Added before the stuck actor, the signal actor is interrupted before it: by the time
				// that one sees the stop, a signal counts as one while stopping.
				stuck, stopping := make(chan struct{}), make(chan struct{})
				g.Add("stuck", func(actx context.Context) error {
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
				case s := <-whileStopping:
					require.Equal(t, syscall.SIGINT, s)
				case <-time.After(10 * time.Second):
					t.Fatal("the signal during the shutdown did not reach WhileStopping")
				}
				close(stuck)
				err := <-result
				if tc.signal {
					var sig *lifecycle.SignalError
					require.ErrorAs(t, err, &sig)
				} else {
					require.NoError(t, err, "the context stopped the group")
				}
			})
		})
	}
}

// TestWithoutWhileStoppingASecondSignalHasItsDefaultEffect: a signal actor without WhileStopping stops
// listening once the group stops, so that a second SIGTERM during a shutdown that hangs ends the program
// as SIGTERM does, by the operating system, not by this package.
func TestWithoutWhileStoppingASecondSignalHasItsDefaultEffect(t *testing.T) {
	t.Parallel()
	state, out, child := inChild(t, func(t *testing.T) {
		sigs := lifecycle.NewSignalActor(context.Background(), lifecycle.SignalOpts{})
		defer sigs.Stop()
		var g lifecycle.Group
		g.AddSignals(sigs)
		g.Add("stuck", func(ctx context.Context) error {
			if err := syscall.Kill(syscall.Getpid(), syscall.SIGTERM); err != nil {
				return err
			}
			<-ctx.Done() // the first signal began the shutdown, and the actor stopped listening
			if err := syscall.Kill(syscall.Getpid(), syscall.SIGTERM); err != nil {
				return err
			}
			select {} // a shutdown that hangs
		})
		err := g.Run(context.Background())
		t.Fatalf("Run returned (%v) instead of the program ending", err)
	})
	if !child {
		ws, ok := state.Sys().(syscall.WaitStatus)
		require.True(t, ok)
		require.True(t, ws.Signaled(), "the child ended by a signal; its output: %s", out)
		require.Equal(t, syscall.SIGTERM, ws.Signal())
	}
}

// TestCancelledContextStopsAZeroGroupCleanly: a parent stops a group by cancelling Run's context; every
// actor is interrupted and Run returns nil.
func TestCancelledContextStopsAZeroGroupCleanly(t *testing.T) {
	t.Parallel()
	var logs testrun.Buffer
	g := lifecycle.New(lifecycle.Config{Logger: zerolog.New(&logs)})
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
	require.Contains(t, logs.String(), `"cause":"context canceled","message":"stopping: finishing the records in flight"`)
}

// TestAGroupSaysWhatItsStopDoes: a group that runs no processor (the console) says what it does when it
// stops, not that it finishes records it does not have.
func TestAGroupSaysWhatItsStopDoes(t *testing.T) {
	t.Parallel()
	var logs testrun.Buffer
	g := lifecycle.New(lifecycle.Config{Logger: zerolog.New(&logs), Stopping: "closing the console"})
	ctx, stop := context.WithCancel(context.Background())
	g.Add("console", func(actx context.Context) error {
		stop()
		<-actx.Done()
		return nil
	})
	require.NoError(t, g.Run(ctx))
	require.Contains(t, logs.String(), `"message":"stopping: closing the console"`)
	require.NotContains(t, logs.String(), "records in flight")
}
