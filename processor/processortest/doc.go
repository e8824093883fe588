// Package processortest helps test code that uses inorder: a handler, a processor's configuration, a
// service that embeds a processor. It is meant to be imported from a _test.go file and gives each test a
// real PostgreSQL database, a way to run a processor in the background, conditions to wait on, and a
// handler that records what it receives.
//
//	func TestBookingSMS(t *testing.T) {
//		t.Parallel()
//		db := processortest.NewDB(t, nil)
//		db.Exec(t, bookingsDDL)
//		// The insert clock that orders the table, as `inorder migrate --table bookings` adds it.
//		conn, err := pgx.Connect(context.Background(), db.URL)
//		require.NoError(t, err)
//		require.NoError(t, migrations.AddClock(context.Background(), conn, "bookings", migrations.ClockOpts{}))
//		require.NoError(t, conn.Close(context.Background()))
//		db.Exec(t, "INSERT INTO bookings (customer, seats) VALUES ('ada', 2), ('grace', 1)")
//
//		rec := &processortest.Recorder[Booking]{}
//		p, err := processor.New(processor.Config[Booking]{
//			Process:      "booking_sms",
//			ClientConfig: processor.ClientConfig{ConnConfig: db.ConnConfig(t)},
//			Source:       inordertype.Source{Table: "bookings"},
//			StartFrom:    inordertype.StartFromBeginning, // the rows inserted above
//			Handler:      rec,
//		})
//		require.NoError(t, err)
//		processortest.Start(t, p, nil)
//		processortest.WaitCaughtUp(t, db, "booking_sms", nil)
//		require.Equal(t, []string{"1", "2"}, rec.IDs())
//	}
//
// # Databases
//
// NewDB returns a fresh database with inorder's migrations applied, dropped or discarded when the test
// ends, so tests may run in parallel without seeing each other's rows or cursors. When $DATABASE_URL is
// set, the databases are created on that server (its user must be allowed to create databases). Otherwise
// the first NewDB of a test binary starts a throwaway PostgreSQL cluster from the server binaries installed
// on the machine (`pg_config --bindir`, /usr/lib/postgresql/*/bin or PATH; Debian's package is
// postgresql), on a free loopback port in a temporary directory, and every test of the binary gets a
// database on it.
//
// # Stopping the cluster
//
// Nothing needs to be done to stop the cluster: when the test binary exits, however it exits, the server
// shuts down and its directory is removed. A package with a TestMain of its own may call Main instead of
// m.Run, which stops the cluster as soon as the tests end rather than just after the binary exits, and
// lets the databases on a $DATABASE_URL server be copied from one template (which it drops at the end)
// rather than migrated one by one:
//
//	func TestMain(m *testing.M) { processortest.Main(m) }
//
// # Running processors
//
// Start runs a processor (anything with a Run method: a *processor.Processor, a *processor.Partitioned,
// or a function through RunFunc) in the background until the test ends, and fails the test if Run returns
// an error. Running.Stop ends it early, to restart it or to check what it left behind. Tests in parallel
// may run processes of the same name, each in its own database; to play two instances of one process in
// one test, give them different Config.Instance names.
//
// # Waiting
//
// WaitCaughtUp waits until a process's durable position has reached the last row of its source: every
// record committed so far has been handled. WaitFailing waits until a record fails (the stream retrying
// it, or halted on it), WaitHalted until the stream is halted (the sink refused the record, or it failed
// for longer than the processor's HaltAfter); both return the failure. They poll the cursor row, never
// sleep a fixed time, and fail the test after WaitOpts.Timeout (10s by default) with a message that names
// the process and where it stands. They must be called from the test's goroutine.
//
// # Recording records
//
// Recorder is a handler that keeps the records it accepted, in order, for the test to compare with what
// it expects, and fails the records it is told to fail, to test halts and recoveries.
//
// # Cursor rows
//
// A process's cursor row stays in its database after the processor stops. On the databases NewDB gives
// out that is harmless; a test that runs processors on a database shared by several tests can remove
// them in a cleanup with cursor.Forget, once the processor has stopped.
package processortest
