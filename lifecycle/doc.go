// Package lifecycle runs inorder's processors, and whatever else a program serves beside them, as one
// group of actors (github.com/oklog/run) that starts and stops together.
//
// # Stopping
//
// The end of the context given to Run, or any actor returning, asks every actor to stop. A processor stops
// taking records, lets the record in flight finish (bounded by its shutdown timeout), makes its position
// durable, unlocks its cursor and closes its connection; Run then returns once every actor has.
//
// # Signals
//
// This package never ends the program and listens for no signal unless asked: the program owns both. A
// program that stops on SIGINT and SIGTERM adds a signal actor, modelled on oklog/run's SignalHandler:
//
//	sigs := lifecycle.NewSignalActor(ctx, lifecycle.SignalOpts{}) // SIGINT and SIGTERM
//	defer sigs.Stop()
//	g.AddSignals(sigs)
//	err := g.Run(ctx)
//	var sig *lifecycle.SignalError
//	if errors.As(err, &sig) {
//		err = nil // a clean stop: exit 0
//	}
//
// A signal stops the group as the context's end does, and Run returns the actor's *SignalError, which
// names the signal; no guess is needed to tell which stopped the group. The actor listens from
// NewSignalActor on, and its Context ends at the first signal, so that a signal during start-up stops
// the start-up too. A signal while the group stops goes to SignalOpts.WhileStopping, where a program
// that ends at once on a second signal calls os.Exit with the code of its choice (the inorder CLI: 130);
// without it, such a signal has its default effect.
//
// # Failing
//
// An actor that returns an error stops the whole group, and Run returns the error prefixed with the
// actor's name, so the program exits non-zero with a line naming it; a processor's errors name their
// process already ("process \"booking_sms_outbox\": ..."), so AddRunner adds no prefix.
// A processor does not fail for a lost database connection: it reconnects with backoff.
//
// # Embedding
//
// A Go service adds its own actors beside the processors: an HTTP server with AddHTTPServer, anything
// else with Add. The zero Group is ready to use, as is New(Config{}). Metrics, the lag of each process
// and health probes are in package ops, which this package does not import, so a program that
// serves none of them pulls in neither Prometheus nor a connection pool.
package lifecycle
