package main

import (
	"context"
	"flag"
	"io"
	"os"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/inorder-dev/inorder/cursor"
	"github.com/inorder-dev/inorder/handlers"
	"github.com/inorder-dev/inorder/handlers/stdout"
	"github.com/inorder-dev/inorder/lifecycle"
	"github.com/inorder-dev/inorder/processor"
)

// runFlags are the flags of `inorder run`.
type runFlags struct {
	databaseURL     string
	process         string
	table           string
	idColumn        string
	createdAtColumn string
	keyColumn       string
	columns         string
	batchSize       int
	pollInterval    time.Duration
	insertLatency   time.Duration
	checkpoint      string
	startFrom       string
	handler         string
	logLevel        string
	idleTimeout     time.Duration
	handlerTimeout  time.Duration
	shutdownTimeout time.Duration
	retryMin        time.Duration
	retryMax        time.Duration
	holdWarnAfter   time.Duration
	instance        string
}

func (f *runFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.databaseURL, "database-url", os.Getenv("DATABASE_URL"), "database to read (default $DATABASE_URL)")
	fs.StringVar(&f.process, "process", "", "process name: the stream and its cursor (required)")
	fs.StringVar(&f.table, "table", "", "source table, optionally schema-qualified (required)")
	fs.StringVar(&f.idColumn, "id-column", "id", "column that breaks ties on the created-at column")
	fs.StringVar(&f.createdAtColumn, "created-at-column", "created_at", "column that orders the table")
	fs.StringVar(&f.keyColumn, "key-column", "", "column passed to handlers as the record key (default aggregate_id if present)")
	fs.StringVar(&f.columns, "columns", "", "comma-separated columns to deliver (default all)")
	fs.IntVar(&f.batchSize, "batch-size", 100, "records read per batch")
	fs.DurationVar(&f.pollInterval, "poll-interval", 200*time.Millisecond, "wait when idle or when another instance holds the cursor")
	fs.DurationVar(&f.insertLatency, "insert-latency", 5*time.Millisecond, "safety margin below the horizon for clock steps")
	fs.StringVar(&f.checkpoint, "checkpoint", "record", "when the position becomes durable: record or batch")
	fs.StringVar(&f.startFrom, "start-from", "beginning", "where a new process starts: beginning or now")
	fs.StringVar(&f.handler, "handler", "stdout", "where records go: stdout")
	fs.StringVar(&f.logLevel, "log-level", "info", "debug, info, warn or error")
	fs.DurationVar(&f.idleTimeout, "idle-timeout", 60*time.Second, "idle_in_transaction_session_timeout of the cursor connection")
	fs.DurationVar(&f.handlerTimeout, "handler-timeout", 0, "bound on one handler call (default half the idle timeout)")
	fs.DurationVar(&f.shutdownTimeout, "shutdown-timeout", 15*time.Second, "how long the record in flight may take after a signal")
	fs.DurationVar(&f.retryMin, "retry-min", time.Second, "first wait before retrying a failing record")
	fs.DurationVar(&f.retryMax, "retry-max", time.Minute, "longest wait between retries of a failing record")
	fs.DurationVar(&f.holdWarnAfter, "hold-warn-after", time.Minute, "warn when a writer holds the stream longer than this")
	fs.StringVar(&f.instance, "instance", "", "this instance's name in status (default host:pid)")
}

func runCmd(ctx context.Context, args []string, stdoutW, stderr io.Writer) error {
	fs := newFlagSet("run", stderr)
	var f runFlags
	f.register(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	log, err := newLogger(stderr, f.logLevel)
	if err != nil {
		return err
	}
	cfg, err := f.config(log)
	if err != nil {
		return err
	}
	switch f.handler {
	case "stdout":
		cfg.Handler = stdout.New[handlers.Row](stdoutW)
	default:
		return usageErr("unknown --handler %q: use stdout", f.handler)
	}
	p, err := processor.New(cfg)
	if err != nil {
		return usageErr("%v", err)
	}
	g := lifecycle.New(lifecycle.Config{Logger: log})
	g.AddRunner(p)
	return g.Run()
}

// config checks the flags against each other and turns them into a processor configuration.
func (f *runFlags) config(log zerolog.Logger) (processor.Config[handlers.Row], error) {
	var cfg processor.Config[handlers.Row]
	if f.process == "" {
		return cfg, usageErr("--process is required")
	}
	if f.table == "" {
		return cfg, usageErr("--table is required")
	}
	if f.batchSize < 1 {
		return cfg, usageErr("--batch-size must be at least 1, got %d", f.batchSize)
	}
	if f.pollInterval <= 0 {
		return cfg, usageErr("--poll-interval must be positive")
	}
	if f.insertLatency < 0 {
		return cfg, usageErr("--insert-latency must not be negative")
	}
	if f.retryMin <= 0 || f.retryMax < f.retryMin {
		return cfg, usageErr("--retry-min must be positive and at most --retry-max")
	}
	if f.handlerTimeout != 0 && f.handlerTimeout >= f.idleTimeout {
		return cfg, usageErr("--handler-timeout (%s) must be shorter than --idle-timeout (%s): a handler "+
			"that outlives the idle timeout loses the cursor lock mid-record", f.handlerTimeout, f.idleTimeout)
	}
	var cp processor.Checkpoint
	switch f.checkpoint {
	case "record":
		cp = processor.CheckpointRecord
	case "batch":
		cp = processor.CheckpointBatch
	default:
		return cfg, usageErr("--checkpoint must be record or batch, got %q", f.checkpoint)
	}
	var start cursor.StartFrom
	switch f.startFrom {
	case "beginning":
		start = cursor.StartFromBeginning
	case "now":
		start = cursor.StartFromNow
	default:
		return cfg, usageErr("--start-from must be beginning or now, got %q", f.startFrom)
	}
	cc, err := connConfig(f.databaseURL)
	if err != nil {
		return cfg, err
	}
	var cols []string
	for _, c := range strings.Split(f.columns, ",") {
		if c = strings.TrimSpace(c); c != "" {
			cols = append(cols, c)
		}
	}
	cfg = processor.Config[handlers.Row]{
		Process:    f.process,
		ConnConfig: cc,
		Source: processor.Source{
			Table: f.table, IDColumn: f.idColumn, CreatedAtColumn: f.createdAtColumn,
			KeyColumn: f.keyColumn, Columns: cols,
		},
		BatchSize:                f.batchSize,
		PollInterval:             f.pollInterval,
		InsertLatency:            f.insertLatency,
		Checkpoint:               cp,
		StartFrom:                start,
		RetryMin:                 f.retryMin,
		RetryMax:                 f.retryMax,
		IdleInTransactionTimeout: f.idleTimeout,
		HandlerTimeout:           f.handlerTimeout,
		ShutdownTimeout:          f.shutdownTimeout,
		HoldWarnAfter:            f.holdWarnAfter,
		Logger:                   log,
		Instance:                 f.instance,
	}
	return cfg, nil
}
