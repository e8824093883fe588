package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/oklog/run"
	"github.com/rs/zerolog"
)

// Config configures a Group. Its zero value is a working configuration, the one a zero Group uses.
type Config struct {
	// Logger receives the group's own lines (signals, which actor stopped the group). The zero value logs
	// nothing.
	Logger zerolog.Logger
	// Signals stop the group. Nil or empty means SIGINT and SIGTERM: an empty list must not mean every
	// signal, as it would to signal.Notify.
	Signals []os.Signal
	// NoSignals leaves signals to the caller: the group then listens for none and stops only when Run's
	// context is done or an actor returns. A service that already handles its signals, or runs several
	// groups, sets it and cancels the context instead. The zero value listens for Signals.
	NoSignals bool
	// ExitFunc ends the program when a second signal arrives during shutdown. Nil means os.Exit.
	ExitFunc func(code int)
}

// defaultSignals stop a group whose Config.Signals is empty.
var defaultSignals = []os.Signal{syscall.SIGINT, syscall.SIGTERM}

// signals returns the signals that stop the group, defaulted.
func (c *Config) signals() []os.Signal {
	if len(c.Signals) == 0 {
		return defaultSignals
	}
	return c.Signals
}

// exit ends the program with code, through ExitFunc or else os.Exit.
func (c *Config) exit(code int) {
	if c.ExitFunc == nil {
		os.Exit(code)
	}
	c.ExitFunc(code)
}

// errCleanStop is what the stopping actor returns when a signal or the context stopped the group, for Run
// to tell a clean stop from an actor's failure.
var errCleanStop = errors.New("stopped cleanly")

// Runner is anything with a name that runs until its context is done: a processor.
type Runner interface {
	Name() string
	Run(ctx context.Context) error
}

// Group runs actors together: when one returns, every other is interrupted, and Run returns once all
// have. It is built on github.com/oklog/run.
//
// The zero Group is ready to use, configured as by the zero Config: it stops when Run's context is done
// or on SIGINT or SIGTERM, and exits with os.Exit on a second signal.
type Group struct {
	cfg Config
	g   run.Group
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
	g.g.Add(func() error {
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
	g.g.Add(func() error { return r.Run(ctx) }, func(error) { cancel() })
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
	g.g.Add(func() error {
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

// Run runs the group until ctx is done, a signal arrives or an actor returns, then asks every actor to
// stop (processors finish the record in flight, make the position durable and unlock) and returns once
// all have. A second signal during that shutdown ends the program at once with exit code 130; so does a
// first one when the context began it (a context that a signal cancelled counts as that signal). Run returns
// nil after a clean stop (ctx done or a signal), else the error of the actor that stopped the group.
func (g *Group) Run(ctx context.Context) error {
	var sigs chan os.Signal // nil with NoSignals: a receive from it never happens
	if !g.cfg.NoSignals {
		sigs = make(chan os.Signal, 2)
		signal.Notify(sigs, g.cfg.signals()...)
		defer signal.Stop(sigs)
	}
	stop := make(chan struct{})     // the stopping actor is interrupted
	finished := make(chan struct{}) // every actor has returned
	var once sync.Once
	g.g.Add(func() error {
		select {
		case s := <-sigs:
			g.cfg.Logger.Info().Str("signal", s.String()).Msg("stopping: finishing the records in flight")
			go g.exitOnSignal(sigs, 0, finished)
			return errCleanStop
		case <-ctx.Done():
			// The same line as for a signal: what stopped the group is in its fields (a context made by
			// signal.NotifyContext names the signal as its cause).
			cause := context.Cause(ctx).Error()
			g.cfg.Logger.Info().Str("cause", cause).Msg("stopping: finishing the records in flight")
			// A context that a signal cancelled (signal.NotifyContext, as the CLI runs the group) stands
			// for that signal, which reaches this group too, now or in a moment: it is skipped, and the
			// signal after it is the second.
			skip := 0
			if signalled(ctx) {
				skip = 1
			}
			go g.exitOnSignal(sigs, skip, finished)
			return errCleanStop
		case <-stop:
			return nil
		}
	}, func(error) { once.Do(func() { close(stop) }) })
	err := g.g.Run()
	close(finished)
	if errors.Is(err, errCleanStop) {
		return nil
	}
	return err
}

// exitOnSignal ends the program at once, with code 130, at a signal during the shutdown (after skipping
// the first skip signals, which stand for the stop under way), unless every actor returns first.
func (g *Group) exitOnSignal(sigs <-chan os.Signal, skip int, finished <-chan struct{}) {
	for {
		select {
		case s := <-sigs:
			if skip > 0 {
				skip--
				continue
			}
			g.cfg.Logger.Warn().Str("signal", s.String()).Msg("second signal: exiting at once")
			g.cfg.exit(130)
			return
		case <-finished:
			return
		}
	}
}

// signalled reports whether ctx was cancelled with a cause of its own that counts as a cancellation, as
// signal.NotifyContext's is (its cause names the signal), rather than by a plain cancel or a deadline.
func signalled(ctx context.Context) bool {
	cause := context.Cause(ctx)
	return cause != context.Canceled && errors.Is(cause, context.Canceled)
}
