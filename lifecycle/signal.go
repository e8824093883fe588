package lifecycle

import (
	"context"
	"os"
	"os/signal"
	"sync"
	"syscall"
)

// SignalError is the error a signal actor returns when one of its signals arrives, and so the error
// Group.Run returns when that signal stopped the group. A program tells it from a failure with errors.As:
//
//	var sig *lifecycle.SignalError
//	if errors.As(err, &sig) {
//		// a clean stop, asked for by sig.Signal
//	}
type SignalError struct {
	// Signal is the signal that arrived.
	Signal os.Signal
}

// Error says which signal arrived.
func (e *SignalError) Error() string { return "received signal " + e.Signal.String() }

// SignalOpts configures a SignalActor. Its zero value listens for SIGINT and SIGTERM.
type SignalOpts struct {
	// Signals are the signals the actor listens for. Nil or empty means SIGINT and SIGTERM: an empty list
	// must not mean every signal, as it would to signal.Notify.
	Signals []os.Signal
	// WhileStopping is called with every signal that arrives while the group stops: after the first
	// signal, or once the group is stopping for another reason, until Stop. A program that ends at once
	// on such a signal exits there, with the code of its choice. Nil leaves those signals their default
	// effect (SIGINT and SIGTERM end the program at once): the actor stops listening once the group stops.
	WhileStopping func(os.Signal)
}

// defaultSignals are what a SignalActor listens for when SignalOpts.Signals is empty.
var defaultSignals = []os.Signal{syscall.SIGINT, syscall.SIGTERM}

// signals returns the signals to listen for, defaulted.
func (o *SignalOpts) signals() []os.Signal {
	if len(o.Signals) == 0 {
		return defaultSignals
	}
	return o.Signals
}

// SignalActor is the actor that stops a group when the program receives a signal, modelled on
// github.com/oklog/run's SignalHandler. Nothing in this package listens for signals unless a program makes
// one: the program owns its signals and its exit.
//
// It listens from NewSignalActor on, so that a signal during the program's start-up, before the group
// runs, stops the start-up (Context) and then the group at once, rather than killing the program. Add it
// to a group with Group.AddSignals, and call Stop once the group has returned.
type SignalActor struct {
	opts    SignalOpts
	c       chan os.Signal
	ctx     context.Context
	cancel  context.CancelCauseFunc
	first   chan struct{} // closed at the first signal, once sig is set
	done    chan struct{} // closed by Stop
	stopped sync.Once

	mu       sync.Mutex
	sig      os.Signal // the first signal
	stopping bool      // execute has returned: the group is stopping
}

// NewSignalActor starts listening for opts.Signals and returns the actor. Its Context is derived from ctx.
func NewSignalActor(ctx context.Context, opts SignalOpts) *SignalActor {
	a := &SignalActor{
		opts:  opts,
		c:     make(chan os.Signal, 2),
		first: make(chan struct{}),
		done:  make(chan struct{}),
	}
	a.ctx, a.cancel = context.WithCancelCause(ctx)
	signal.Notify(a.c, opts.signals()...)
	go a.listen()
	return a
}

// listen takes the signals until Stop: the first cancels Context and ends execute; every later one, or
// one that arrives once the group is stopping, goes to WhileStopping.
func (a *SignalActor) listen() {
	for {
		select {
		case s := <-a.c:
			a.mu.Lock()
			first := a.sig == nil
			if first {
				a.sig = s
			}
			stopping := a.stopping || !first
			a.mu.Unlock()
			if first {
				a.cancel(&SignalError{Signal: s})
				close(a.first)
				a.stopListeningUnlessAsked()
			}
			if stopping && a.opts.WhileStopping != nil {
				a.opts.WhileStopping(s)
			}
		case <-a.done:
			return
		}
	}
}

// stopListeningUnlessAsked gives the signals back their default effect once the group is stopping, unless
// WhileStopping asked for them.
func (a *SignalActor) stopListeningUnlessAsked() {
	if a.opts.WhileStopping == nil {
		signal.Stop(a.c)
	}
}

// Context returns a context that the first signal cancels, with a *SignalError as its cause
// (context.Cause), for the work a program does before its group runs: a program that finds it done
// before Run stops there. Stop cancels it too.
func (a *SignalActor) Context() context.Context { return a.ctx }

// execute is the actor (Group.AddSignals adds it without a name before its error): it
// returns a *SignalError when the first signal arrives, at once if it arrived already, and nil when ctx
// is done, the group stopping for another reason.
func (a *SignalActor) execute(ctx context.Context) error {
	select {
	case <-a.first:
		return &SignalError{Signal: a.sig}
	case <-ctx.Done():
		a.interrupt()
		return nil
	}
}

// interrupt marks the group as stopping: a signal from now on goes to WhileStopping. Group.AddSignals
// calls it as the actor's interrupt, so that it holds before any actor added later sees the stop.
func (a *SignalActor) interrupt() {
	a.mu.Lock()
	a.stopping = true
	a.mu.Unlock()
	a.stopListeningUnlessAsked()
}

// Stop stops listening, giving the signals back their default effect, and cancels Context. It may be
// called more than once.
func (a *SignalActor) Stop() {
	a.stopped.Do(func() {
		signal.Stop(a.c)
		close(a.done)
		a.cancel(context.Canceled)
	})
}
