package lifecycle

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/oklog/run"
	"github.com/rs/zerolog"
)

// Config configures a Group. Its zero value is a working configuration, the one a zero Group uses.
type Config struct {
	// Logger receives the group's own lines (what stopped the group: a signal, the context). The zero
	// value logs nothing.
	Logger zerolog.Logger

	// Stopping is what the group's line says it does once it begins to stop, after "stopping: ". Empty
	// means "finishing the records in flight", what a group of processors does; a group that runs no
	// processor (a console) says what it does instead.
	Stopping string
}

// errCleanStop is what the actor watching Run's context returns when the context stopped the group, for
// Run to tell a clean stop from an actor's failure.
var errCleanStop = errors.New("stopped cleanly")

// Runner is anything with a name that runs until its context is done: a processor.
type Runner interface {
	Name() string
	Run(ctx context.Context) error
}

// Group runs actors together: when one returns, every other is interrupted, and Run returns once all
// have. It is built on github.com/oklog/run.
//
// A Group listens for no signal: a program that stops on SIGINT or SIGTERM adds a signal actor
// (NewSignalActor, AddSignals), and decides its exit code from the *SignalError that Run then returns. The
// zero Group is ready to use, configured as by the zero Config.
type Group struct {
	cfg    Config
	actors []actor
}

// actor is one member of a group, as github.com/oklog/run takes it.
type actor struct {
	execute   func() error
	interrupt func(error)
}

// New returns an empty group configured by cfg.
func New(cfg Config) *Group {
	return &Group{cfg: cfg}
}

// Add adds an actor that runs until its context is cancelled. An error it returns stops the group and is
// returned by Run, prefixed with the actor's name, for the caller to report once; returning nil before
// being interrupted stops the group too.
func (g *Group) Add(name string, execute func(ctx context.Context) error) {
	ctx, cancel := context.WithCancel(context.Background())
	g.add(func() error {
		if err := execute(ctx); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		return nil
	}, func(error) { cancel() })
}

// AddRunner adds a processor (or any Runner) as an actor named after it. Its errors are returned as they
// are: a processor's already name its process ("process \"booking_sms\": ..."), and naming it twice
// helps nobody.
func (g *Group) AddRunner(r Runner) {
	ctx, cancel := context.WithCancel(context.Background())
	g.add(func() error { return r.Run(ctx) }, func(error) { cancel() })
}

// AddSignals adds a signal actor (see NewSignalActor): the group stops when one of its signals arrives,
// and Run returns the actor's *SignalError as it is, with no name before it.
func (g *Group) AddSignals(a *SignalActor) {
	ctx, cancel := context.WithCancel(context.Background())
	g.add(func() error { return a.execute(ctx) }, func(error) {
		a.interrupt()
		cancel()
	})
}

// add adds an actor as github.com/oklog/run takes it.
func (g *Group) add(execute func() error, interrupt func(error)) {
	g.actors = append(g.actors, actor{execute: execute, interrupt: interrupt})
}

// AddHTTPServer adds an HTTP server listening on addr as an actor; it shuts down gracefully (at most
// shutdownTimeout) when the group stops. The listener is opened at once, so an address in use fails here
// rather than later.
func (g *Group) AddHTTPServer(name, addr string, h http.Handler, shutdownTimeout time.Duration) (net.Addr, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("%s: listen on %s: %w", name, addr, err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	g.add(func() error {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("%s: %w", name, err)
		}
		return nil
	}, func(error) {
		ctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
		defer cancel()
		_ = srv.Shutdown(ctx)
	})
	return ln.Addr(), nil
}

// Run runs the group until ctx is done or an actor returns, then asks every actor to stop (processors
// finish the record in flight, make the position durable and unlock) and returns once all have. It
// returns nil after a clean stop by ctx; a *SignalError, as it is, when a signal actor stopped the group
// (a clean stop too, which the program tells apart with errors.As to choose its exit code); else the
// error of the actor that stopped the group. Run never ends the program.
func (g *Group) Run(ctx context.Context) error {
	var rg run.Group
	stop := make(chan struct{}) // the actor watching ctx is interrupted
	var once sync.Once
	// Added first, so that its interrupt, which says what stopped the group, runs before those of the
	// others (an HTTP server's takes up to its shutdown timeout).
	rg.Add(func() error {
		select {
		case <-ctx.Done():
			return errCleanStop
		case <-stop:
			return nil
		}
	}, func(err error) {
		once.Do(func() { close(stop) })
		g.logStop(ctx, err)
	})
	for _, a := range g.actors {
		rg.Add(a.execute, a.interrupt)
	}
	err := rg.Run()
	if errors.Is(err, errCleanStop) {
		return nil
	}
	return err
}

// logStop says, when the group begins to stop, what stopped it if that was a signal or ctx; an actor's
// error is Run's to return, for the caller to report once.
func (g *Group) logStop(ctx context.Context, err error) {
	msg := "stopping: " + cmp.Or(g.cfg.Stopping, "finishing the records in flight")
	var sig *SignalError
	switch {
	case errors.As(err, &sig):
		g.cfg.Logger.Info().Str("signal", sig.Signal.String()).Msg(msg)
	case errors.Is(err, errCleanStop):
		g.cfg.Logger.Info().Str("cause", context.Cause(ctx).Error()).Msg(msg)
	}
}
