// Package ops serves what operators watch of a running inorder program: Prometheus metrics, the lag of
// every process, and liveness and readiness probes. `inorder run --metrics-addr` wires it as below; a Go
// service embedding processors wires it the same way. It lives apart from package lifecycle so that a
// program running processors without it pulls in neither Prometheus nor a connection pool.
//
// # Wiring
//
//	m := ops.NewMetrics()
//	client, err := processor.NewClient(processor.ClientConfig{ConnConfig: cc})
//	if err != nil {
//		return err
//	}
//	defer client.Close()
//	cfg.Client, cfg.Observer = client, m.Observer() // processor.Config of every processor of the program
//	pool := client.Pool()                // the Client owns every connection: ops takes none of its own
//	m.Track(cfg.Process)
//	h := ops.NewHealth(ops.HealthConfig{Ping: pool.Ping, Metrics: m})
//	g := lifecycle.New(lifecycle.Config{})
//	if _, err := g.AddHTTPServer("ops", ":9187", ops.NewHandler(m, h), 5*time.Second); err != nil {
//		return err
//	}
//	g.Add("lag", m.WatchLag(pool, 0))
//
// # Metrics
//
// Metrics serves these series, every one labelled by process (the process name) but inorder_build_info, the
// program's, and the inorder_xmin_* ones, which are the database's, on its own registry beside the Go
// runtime's go_* and process_* series:
//
//	inorder_records_handled_total        counter    records the handler took successfully
//	inorder_handler_failures_total       counter    handler calls (or async results) that failed; a record
//	                                                 that fails twice and then goes through counts 2
//	inorder_handler_duration_seconds     histogram  time of every handler call, success or failure (for an
//	                                                 async handler: the wait on its result); buckets 1ms..30s
//	inorder_batches_total                counter    reads of the source (one per batch, empty ones included)
//	inorder_records_read_total           counter    records those reads returned (records delivered again
//	                                                 after a failure are counted again)
//	inorder_sink_unavailable             gauge      1 while the stream waits for a sink that refuses what every
//	                                                record would meet; nothing is halted or parked for it
//	inorder_source_waiting               gauge      1 while the stream waits for its source table to fit
//	                                                 again after a migration, labelled column: the column it
//	                                                 needs that was dropped or renamed; 0, no column, else
//	inorder_retrying                     gauge      1 while the stream retries a failing record with backoff,
//	                                                 before it counts as halted (processor.Config.HaltAfter)
//	inorder_halted                       gauge      1 while the stream is halted on a failing record: refused
//	                                                 for good, or failing for longer than HaltAfter; else 0
//	inorder_horizon_hold_seconds         gauge      how long the transaction holding the horizon back
//	                                                 has been in flight; 0 when none
//	inorder_cursor_locked                gauge      1 while this instance owns the process, 0 while it
//	                                                 stands by (another instance owns it) or is stopped
//	inorder_position_timestamp_seconds   gauge      created_at of the position, as Unix seconds, as last
//	                                                 advanced by this instance; 0 until it advances
//	inorder_connected                    gauge      1 while the processor has a working database
//	                                                 connection, 0 while it is reconnecting or starting
//	inorder_credentials_refused          gauge      1 while the database refuses the credentials of a processor
//	                                                 that had connected (a rotated password, an expired token):
//	                                                 it reconnects until they are accepted; else 0
//	inorder_lag_rows                     gauge      committed source rows after the durable position,
//	                                                 counted up to 1,000,000 (cursor.Lag.Capped)
//	inorder_lag_seconds                  gauge      age of the oldest of those rows (database clock); 0 when
//	                                                 none
//	inorder_lag_errors_total             counter    lag measurements that failed (the lag gauges keep their
//	                                                 last value meanwhile)
//	inorder_in_flight                    gauge      records a keyed window (processor.Config.MaxInFlight)
//	                                                 has handed to the handler and not yet settled
//	inorder_in_flight_oldest_seconds     gauge      how long the oldest of them has been in flight; the
//	                                                 position waits on it; 0 when none
//	inorder_sink_resent_total            counter    records this instance sent to the sink again after the
//	                                                 sink had accepted them (a keyed window keeps what the
//	                                                 sink accepted, so this counts what a lost connection
//	                                                 or another instance's tenure in between sends again)
//	inorder_parked_keys, _records        gauge      keys parked (processor.OnHaltPark) and their records;
//	inorder_parked_oldest_seconds        gauge      how long the key parked longest has been (with the lag)
//	inorder_tracking                     gauge      1 for the tracking the position was last recorded under,
//	                                                 labelled tracking: clock, writers or transactions (with
//	                                                 the lag)
//	inorder_late_rows                    gauge      rows found committed behind the position after the
//	                                                 process passed them, never delivered (with the lag)
//	inorder_xmin_held_seconds            gauge      how long the database's xmin horizon (vacuum's) has been
//	                                                 held by its longest holder, once past the threshold
//	                                                 (SetXminHoldAfter, a minute by default); 0 otherwise
//	inorder_xmin_holder                  gauge      one series per holder past the threshold, valued how
//	                                                 long it has held it, labelled kind, pid, database, user,
//	                                                 application and name (a prepared transaction's gid, a
//	                                                 slot's name); it goes when its holder lets go
//	inorder_xmin_errors_total            counter    looks at the xmin horizon that failed
//	inorder_build_info                   gauge      always 1, labelled version (of inorder: SetVersion, else
//	                                                 the module's as the build recorded it), goversion and
//	                                                 revision (the commit built, where recorded); no process label
//
// The lag series are measured only by Metrics.WatchLag, from the cursor row and the source table, so every
// instance reports them, owner or not; they appear after the first measurement. WatchLag looks at the
// holders of the xmin horizon in the same rounds (timing a holder whose start the pool's role may not
// read from when it first saw it), and comes round early when a holder it saw is about
// to pass the threshold. They cost inorder nothing (its positions are appended), but vacuum cannot clean
// the outbox that prune empties while they hold. The other series come from
// the processor through the processor.Observer that Metrics.Observer returns.
//
// # Health
//
// Health answers GET /healthz (200 while the program runs) and GET /readyz (200 when the database answers
// a ping and every tracked processor is connected, 503 with one line per problem otherwise). NewHandler
// serves /metrics, /healthz and /readyz on one listener.
package ops
