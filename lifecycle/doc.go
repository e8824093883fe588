// Package lifecycle runs inorder's processors, and whatever else a program serves beside them, as one
// group of actors (github.com/oklog/run) that starts and stops together.
//
// # Stopping
//
// SIGINT or SIGTERM, or the end of the context given to Run, asks every actor to stop. A processor stops
// taking records, lets the record in flight finish (bounded by its shutdown timeout), makes its position
// durable, unlocks its cursor and closes its connection; Run then returns nil and the program exits 0. A
// second signal during that shutdown exits at once with code 130. A service that handles its own signals
// sets Config.NoSignals and cancels the context instead.
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
// and health probes are in package lifecycle/ops, which this package does not import, so a program that
// serves none of them pulls in neither Prometheus nor a connection pool.
package lifecycle
