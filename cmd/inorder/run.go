package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"github.com/inorder-dev/inorder/internal/setting"
	"io"
	"os"
	"strings"
	"syscall"
	"time"

	gpubsub "cloud.google.com/go/pubsub/v2"
	"github.com/rs/zerolog"

	"github.com/inorder-dev/inorder/handlers"
	"github.com/inorder-dev/inorder/handlers/cloudevent"
	"github.com/inorder-dev/inorder/handlers/pubsub"
	"github.com/inorder-dev/inorder/handlers/stdout"
	"github.com/inorder-dev/inorder/handlers/webhook"
	"github.com/inorder-dev/inorder/inordertype"
	"github.com/inorder-dev/inorder/internal/xmin"
	"github.com/inorder-dev/inorder/lifecycle"
	"github.com/inorder-dev/inorder/ops"
	"github.com/inorder-dev/inorder/processor"
)

// runFlags are the flags of `inorder run`.
type runFlags struct {
	databaseURL      databaseURL
	process          string
	table            string
	idColumn         string
	createdAtColumn  string
	horizon          string
	keyColumn        string
	where            string
	traceColumn      string
	traceStateColumn string
	columns          string
	batchSize        int
	batchBytes       byteSize
	pollInterval     time.Duration
	probeInterval    time.Duration
	insertLatency    time.Duration
	checkpoint       string
	onHalt           string
	syncCommit       bool
	startFrom        string
	handler          string
	logLevel         string
	idleTimeout      time.Duration
	lease            time.Duration
	handlerTimeout   time.Duration
	dbTimeout        time.Duration
	shutdownTimeout  time.Duration
	retryMin         time.Duration
	retryMax         time.Duration
	haltAfter        time.Duration
	holdWarnAfter    time.Duration
	instance         string
	metricsAddr      string
	xminHoldAfter    time.Duration
	listen           bool
	partitions       int
	maxPartitions    int
	maxConns         int

	webhookURL         string
	webhookSecretEnv   string
	webhookTimeout     time.Duration
	webhookInFlight    int
	webhookMaxRate     string
	webhookRecordCodes string
	webhookHeaders     headerFlag
	webhookBodyColumn  string
	webhookIdempotency string
	webhookSignature   string
	webhookEnvelope    *cloudevent.Envelope // from --envelope, set by newHandler

	pubsubProject       string
	pubsubTopic         string
	pubsubTopicTemplate string
	pubsubMaxInFlight   int
	pubsubPayloadColumn string
	pubsubMaxBytes      int

	kafka    kafkaFlags
	nats     natsFlags
	rabbitmq rabbitmqFlags
	redis    redisFlags
	envelope envelopeFlags

	// configPath is --config; configEntry says where a process of a configuration file is, for its errors.
	configPath, configEntry string
	// stdoutHandler is the stdout handler the processes of one OS process share, so that their lines never
	// mix; nil until the first asks for it.
	stdoutHandler *stdout.Handler[handlers.Row]
}

func (f *runFlags) register(fs *flag.FlagSet) {
	registerDatabaseURL(fs, &f.databaseURL, "database to read")
	fs.StringVar(&f.process, "process", "", "process name: the stream and its cursor (required)")
	fs.StringVar(&f.table, "table", "", "source table, optionally schema-qualified (required)")
	fs.StringVar(&f.idColumn, "id-column", "id", "column that breaks ties in the table's order")
	fs.StringVar(&f.createdAtColumn, "created-at-column", "created_at", "column each record carries as its time; it orders the rows older than the insert clock")
	fs.StringVar(&f.horizon, "horizon", "auto", "auto or clock: read the table by inorder's insert clock (inorder migrate --table adds it); "+
		"for a table without it, the opt-ins that trust created_at: writers (only ever set by the database at insert, clock_timestamp()), "+
		"transactions (only ever a transaction's start, now())")
	fs.StringVar(&f.keyColumn, "key-column", "", "column passed to handlers as the record key (default aggregate_id if present)")
	fs.StringVar(&f.where, "where", "", "filter: a SQL boolean expression over the table's columns, e.g. \"type LIKE 'payment.%'\"; "+
		"only the rows it keeps are delivered, the position moves past the others without a handler call (IMMUTABLE "+
		"functions only; part of the process: changing it is refused)")
	fs.StringVar(&f.traceColumn, "trace-column", "", "column holding each row's W3C traceparent: deliveries continue the application's trace (default traceparent if present)")
	fs.StringVar(&f.traceStateColumn, "trace-state-column", "", "column holding each row's W3C tracestate (default tracestate if present)")
	fs.StringVar(&f.columns, "columns", "", "comma-separated columns to deliver (default all)")
	fs.IntVar(&f.batchSize, "batch-size", 0, "records read per batch (default adaptive: 100 while the stream keeps up, doubling to 4000 over a backlog)")
	f.batchBytes = setting.DefaultBatchBytes
	fs.Var(&f.batchBytes, "batch-bytes", "`size` a batch reads at most, as well as --batch-size records (8MiB, 512KiB); a larger record is read alone. "+
		"Memory is about three times this, or three times the largest record")
	fs.DurationVar(&f.pollInterval, "poll-interval", setting.DefaultPollInterval, "wait when idle and the probe cannot help, or when another instance holds the cursor")
	fs.DurationVar(&f.probeInterval, "probe-interval", setting.DefaultProbeInterval, "longest wait between probes for new rows while idle (0: no probe, poll only)")
	fs.DurationVar(&f.insertLatency, "insert-latency", 0, "safety margin below the horizon for clock steps (default 5ms, 1ms on a table with the insert clock)")
	fs.StringVar(&f.checkpoint, "checkpoint", "record", "when the position becomes durable: record or batch")
	fs.BoolVar(&f.syncCommit, "synchronous-commit", false, "make each position commit wait for its WAL flush "+
		"(default off: a Postgres crash may deliver the last few hundred ms of records again, never skip one)")
	fs.StringVar(&f.startFrom, "start-from", "", "where a new process starts: beginning, now or an RFC 3339 time "+
		"(required when the table already has rows; an existing process keeps its position)")
	fs.StringVar(&f.handler, "handler", "stdout", "where records go: stdout, webhook, pubsub, kafka, nats, rabbitmq or redis")
	fs.StringVar(&f.logLevel, "log-level", "info", "debug, info, warn or error")
	fs.DurationVar(&f.idleTimeout, "idle-timeout", setting.DefaultIdleInTransactionTimeout, "idle_in_transaction_session_timeout of the cursor transactions")
	fs.DurationVar(&f.lease, "lease", setting.DefaultLease, "how long an instance owns the process without renewing; a frozen owner is replaced after it")
	fs.DurationVar(&f.handlerTimeout, "handler-timeout", 0, "how long a handler call may go without finishing or, one record at a time, without moving bytes (a webhook's body going out); a call still moving ends within the lease (default the smaller of half the idle timeout and a third of the lease)")
	fs.DurationVar(&f.dbTimeout, "db-timeout", setting.DefaultDatabaseTimeout, "how long an exchange with the database (a statement, a read, a commit) may receive nothing, "+
		"and a connection's start-up may take; past it the connection counts as dead and is replaced")
	fs.DurationVar(&f.shutdownTimeout, "shutdown-timeout", setting.DefaultShutdownTimeout, "how long the record in flight may take after a signal")
	fs.DurationVar(&f.retryMin, "retry-min", setting.DefaultRetryMin, "first wait before retrying a failing record")
	fs.DurationVar(&f.retryMax, "retry-max", setting.DefaultRetryMax, "longest wait between retries of a failing record")
	fs.StringVar(&f.onHalt, "on-halt", string(processor.OnHaltHalt), "what a record that would halt the stream does: halt (every key waits) "+
		"or park (its key waits, parked, until inorder redrive; the other keys go on; a record without a key halts)")
	fs.DurationVar(&f.haltAfter, "halt-after", setting.DefaultHaltAfter, "how long a record may fail (retrying) before the stream counts as halted; a refusal halts at once")
	fs.DurationVar(&f.holdWarnAfter, "hold-warn-after", setting.DefaultHoldWarnAfter, "warn when a writer holds the stream longer than this")
	fs.StringVar(&f.instance, "instance", "", "this instance's name in status (default host:pid)")
	fs.IntVar(&f.partitions, "partitions", 0, "split the process into N ordered streams by a hash of the key column (default: one stream)")
	fs.IntVar(&f.maxPartitions, "max-partitions", 0, "partitions this instance works at once, one connection each (default all)")
	fs.IntVar(&f.maxConns, "max-conns", setting.DefaultMaxConns, "the most connections this instance opens to the database for its processes, however many "+
		"it runs or stands by for: a session for the ownership locks and a pool the batches take turns on (--listen and --partitions add their own)")
	fs.BoolVar(&f.listen, "listen", false, "wake at once on inserts (needs the trigger that inorder migrate --notify TABLE creates); the probe and polling stay the fallback")
	fs.StringVar(&f.metricsAddr, "metrics-addr", "", "serve /metrics, /healthz and /readyz on this address, e.g. :9187 (default off)")
	fs.DurationVar(&f.xminHoldAfter, "xmin-hold-after", xmin.DefaultHoldAfter, "with --metrics-addr: name in the inorder_xmin_* series what has held "+
		"the database's xmin horizon (vacuum's) longer than this")
	fs.StringVar(&f.configPath, "config", "", "a YAML file of run flags and a processes: list, one OS process running them all "+
		"(see docs/configuration.md); the environment and the command line apply to every process, over the file")

	fs.StringVar(&f.webhookURL, "webhook-url", "", "webhook: URL each record is POSTed to")
	fs.StringVar(&f.webhookSecretEnv, "webhook-secret-env", "", "webhook: name of the environment variable holding the signing secret")
	fs.DurationVar(&f.webhookTimeout, "webhook-timeout", 0, "webhook: how long a request may go with nothing moving (its body going out, its answer coming in), below --handler-timeout (default four fifths of it)")
	fs.IntVar(&f.webhookInFlight, "webhook-max-in-flight", 1, "webhook: requests at once, in order per key (records of one key one at a time)")
	fs.StringVar(&f.webhookMaxRate, "webhook-max-rate", "", "webhook: at most N requests a second, e.g. 100/s, shared by every request in flight (default no bound); "+
		"a 429 or 503 with Retry-After pauses every request either way")
	fs.StringVar(&f.webhookRecordCodes, "webhook-record-status", "", "webhook: statuses that mean the record's own refusal for this API, e.g. 404 "+
		"for one whose 404 says the customer does not exist (default none: 401, 403, 404 and the like are the sink's outage, "+
		"which the stream waits out)")
	fs.Var(&f.webhookHeaders, "webhook-header", "webhook: 'Name=value' header sent with every request, ${VAR} taken from the environment (repeatable)")
	fs.StringVar(&f.webhookBodyColumn, "webhook-body-column", "", "webhook: column whose JSON is the request body, as is (default the envelope)")
	fs.StringVar(&f.webhookIdempotency, "webhook-idempotency-header", webhook.IdempotencyKeyHeader, "webhook: header carrying the idempotency key <process>:<id>")
	fs.StringVar(&f.webhookSignature, "webhook-signature", string(webhook.SignatureInorder), "webhook: inorder (Inorder-Signature, Stripe's scheme), standard-webhooks or none")

	fs.StringVar(&f.pubsubProject, "pubsub-project", "", "pubsub: Google Cloud project (PUBSUB_EMULATOR_HOST is honoured)")
	fs.StringVar(&f.pubsubTopic, "pubsub-topic", "", "pubsub: topic ID or full name")
	fs.StringVar(&f.pubsubTopicTemplate, "pubsub-topic-template", "", "pubsub: topic per event type, e.g. events-{type}")
	fs.IntVar(&f.pubsubMaxInFlight, "pubsub-max-in-flight", setting.DefaultPubSubMaxInFlight, "pubsub: publishes awaiting acknowledgement at once")
	fs.IntVar(&f.pubsubMaxBytes, "pubsub-max-message-bytes", setting.DefaultPubSubMaxMessageBytes, "pubsub: a larger record halts the stream as a poison record")
	fs.StringVar(&f.pubsubPayloadColumn, "pubsub-payload-column", handlers.DefaultPayloadColumn, "pubsub: column sent as message data (whole record as JSON without it)")

	f.kafka.register(fs)
	f.nats.register(fs)
	f.rabbitmq.register(fs)
	f.redis.register(fs)
	f.envelope.register(fs)
}

func runCmd(ctx context.Context, args []string, stdoutW, stderr io.Writer) error {
	fs := newFlagSet("run", stderr)
	var f runFlags
	f.register(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	procs := []*runFlags{&f}
	if f.configPath != "" {
		cf, err := readConfig(f.configPath, os.LookupEnv)
		if err != nil {
			return err
		}
		if procs, err = cf.processFlags(args); err != nil {
			return err
		}
	}
	top := procs[0] // log level and metrics are the OS process's: the file's top level sets them
	log, err := newLogger(stderr, top.logLevel)
	if err != nil {
		return err
	}
	// A signal during start-up (connecting a sink, the metrics pool) stops it cleanly too: from here on
	// it ends ctx instead of killing the program, and the group is not started. The signal actor keeps it
	// for the group, so a signal landing between that check and the group running stops the group at once.
	sigs := stopOnSignals(ctx, log)
	defer sigs.Stop()
	runCtx := ctx // the group's: a signal reaches the group through its signal actor alone
	ctx = sigs.Context()
	tp, stopTracing, err := tracerProvider(ctx, log)
	if err != nil {
		return err
	}
	defer stopTracing()
	var metrics *ops.Metrics
	if top.metricsAddr != "" {
		if top.xminHoldAfter <= 0 {
			return usageErr("--xmin-hold-after must be positive, got %s", top.xminHoldAfter)
		}
		metrics = ops.NewMetrics()
		metrics.SetXminHoldAfter(top.xminHoldAfter)
		v, _, _ := buildVersion()
		metrics.SetVersion(v) // inorder_build_info names the version `inorder version` prints
	}
	if top.maxConns < 2 {
		return usageErr("--max-conns must be at least 2 (a session and one connection to work on), got %d", top.maxConns)
	}
	var runners []lifecycle.Runner
	shared := &stdoutShare{}
	clients := map[string]*processor.Client{} // one per database and instance: the instance's connections
	timeouts := map[string]time.Duration{}    // each client's database timeout
	var first *processor.Client
	var databases []database // one per client, to say why one refused to write
	defer func() {
		for _, c := range clients {
			c.Close()
		}
	}()
	cfgs := make([]processor.Config[handlers.Row], len(procs))
	for i, pf := range procs {
		cfg, err := pf.config(log)
		if err != nil {
			return pf.inEntry(err)
		}
		cfgs[i] = cfg
		// The processes of one database and instance run on one Client (see below), whose database timeout
		// is the longest --db-timeout among them, so that none is cut off sooner than it asked.
		key := clientKey(cfg.ClientConfig)
		timeouts[key] = max(timeouts[key], cfg.ClientConfig.DatabaseTimeout)
	}
	for i, pf := range procs {
		cfg := cfgs[i]
		cc := cfg.ClientConfig
		key := clientKey(cc)
		if clients[key] == nil {
			databases = append(databases, database{cc.ConnConfig, cc.BeforeConnectFunc})
			cc.MaxConns, cc.DatabaseTimeout = top.maxConns, timeouts[key]
			c, err := processor.NewClient(cc)
			if err != nil {
				return pf.inEntry(usageErr("%v", err))
			}
			clients[key] = c
			if first == nil {
				first = c
			}
		}
		cfg.Client, cfg.ClientConfig = clients[key], processor.ClientConfig{}
		cfg.TracerProvider = tp
		pf.stdoutHandler = shared.handler(stdoutW)
		h, closeHandler, err := pf.newHandler(ctx, cfg, stdoutW)
		if err != nil {
			return pf.inEntry(err)
		}
		defer closeHandler()
		cfg.Handler = h
		if pf.handler == "webhook" {
			cfg.MaxInFlight = pf.webhookInFlight
		}
		if pf.handler == "kafka" {
			cfg.MaxInFlight = pf.kafka.maxInFlight
		}
		if pf.handler == "nats" {
			cfg.MaxInFlight = pf.nats.maxInFlight
		}
		if pf.handler == "rabbitmq" {
			cfg.MaxInFlight = pf.rabbitmq.maxInFlight
		}
		if pf.handler == "redis" {
			cfg.MaxInFlight = pf.redis.maxInFlight
		}
		if metrics != nil {
			cfg.Observer = metrics.Observer()
		}
		var p lifecycle.Runner
		if pf.partitions > 0 {
			p, err = processor.NewPartitioned(cfg, processor.PartitionOpts{Partitions: pf.partitions, Slots: pf.maxPartitions})
		} else {
			p, err = processor.New(cfg)
		}
		if err != nil {
			return pf.inEntry(usageErr("%v", err))
		}
		runners = append(runners, p)
	}
	g := lifecycle.New(lifecycle.Config{Logger: log})
	g.AddSignals(sigs)
	if metrics != nil {
		// On the instance's own pool: metrics take no connection of their own.
		pool := first.Pool()
		// Readiness and lag follow each process: one stream, or for a partitioned run the process as a
		// whole (its coordination connected; the rows behind all its partitions), beside the partitions
		// this instance works, each under its own name.
		for _, p := range runners {
			metrics.Track(p.Name())
		}
		health := ops.NewHealth(ops.HealthConfig{Ping: pool.Ping, Metrics: metrics})
		addr, err := g.AddHTTPServer("ops", top.metricsAddr, ops.NewHandler(metrics, health), 5*time.Second)
		if err != nil {
			return usageErr("--metrics-addr: %v", err)
		}
		g.Add("lag", metrics.WatchLag(pool, 0))
		log.Info().Str("addr", addr.String()).Msg("serving /metrics, /healthz and /readyz")
	}
	if cause := context.Cause(ctx); cause != nil {
		if errors.As(cause, new(*lifecycle.SignalError)) {
			log.Info().Msg("stopped by a signal during start-up")
			return nil
		}
		return cause
	}
	for _, p := range runners {
		g.AddRunner(p)
	}
	// A signal stops it with a *lifecycle.SignalError: realMain exits 0.
	return explainReadOnly(ctx, g.Run(runCtx), databases...)
}

// clientKey names the Client of the processes of one database and instance: the instance's connections.
func clientKey(cc processor.ClientConfig) string {
	return fmt.Sprintf("%s@%s:%d/%s\x00%s", cc.ConnConfig.User, cc.ConnConfig.Host, cc.ConnConfig.Port,
		cc.ConnConfig.Database, cc.Instance)
}

// stopOnSignals returns the signal actor of a command that runs a group: SIGINT or SIGTERM stops the
// start-up (the actor's Context) and then the group cleanly, and a signal while the group stops ends the
// program at once with exit code 130.
func stopOnSignals(ctx context.Context, log zerolog.Logger) *lifecycle.SignalActor {
	return lifecycle.NewSignalActor(ctx, lifecycle.SignalOpts{
		Signals: []os.Signal{os.Interrupt, syscall.SIGTERM},
		WhileStopping: func(s os.Signal) {
			log.Warn().Str("signal", s.String()).Msg("second signal: exiting at once")
			os.Exit(130)
		},
	})
}

// stdoutShare hands the processes of one OS process one stdout handler, made when the first asks.
type stdoutShare struct{ h *stdout.Handler[handlers.Row] }

func (s *stdoutShare) handler(w io.Writer) *stdout.Handler[handlers.Row] {
	if s.h == nil {
		s.h = stdout.New[handlers.Row](w)
	}
	return s.h
}

// newHandler builds the sink named by --handler from its flags. The returned function releases it.
func (f *runFlags) newHandler(ctx context.Context, cfg processor.Config[handlers.Row], stdoutW io.Writer) (handlers.Handler[handlers.Row], func(), error) {
	nothing := func() {}
	webhookSet := f.webhookSet()
	pubsubSet := f.pubsubProject != "" || f.pubsubTopic != "" || f.pubsubTopicTemplate != ""
	if f.kafka.set() && f.handler != "kafka" {
		return nil, nothing, usageErr("--kafka-* flags need --handler kafka")
	}
	if f.nats.set() && f.handler != "nats" {
		return nil, nothing, usageErr("--nats-* flags need --handler nats")
	}
	if f.rabbitmq.set() && f.handler != "rabbitmq" {
		return nil, nothing, usageErr("--rabbitmq-* flags need --handler rabbitmq")
	}
	if f.redis.set() && f.handler != "redis" {
		return nil, nothing, usageErr("--redis-* flags need --handler redis")
	}
	env, err := f.envelope.build(f.handler)
	if err != nil {
		return nil, nothing, err
	}
	f.webhookEnvelope, f.kafka.envelope, f.nats.envelope, f.rabbitmq.envelope, f.redis.envelope = env, env, env, env, env
	switch f.handler {
	case "stdout":
		if webhookSet || pubsubSet {
			return nil, nothing, usageErr("--webhook-* and --pubsub-* flags need --handler webhook or pubsub")
		}
		if f.stdoutHandler != nil {
			return f.stdoutHandler, nothing, nil
		}
		return stdout.New[handlers.Row](stdoutW), nothing, nil
	case "webhook":
		if pubsubSet {
			return nil, nothing, usageErr("--pubsub-* flags contradict --handler webhook")
		}
		h, err := f.newWebhook(cfg)
		if err != nil {
			return nil, nothing, err
		}
		return h, nothing, nil
	case "pubsub":
		if webhookSet {
			return nil, nothing, usageErr("--webhook-* flags contradict --handler pubsub")
		}
		if f.pubsubProject == "" || (f.pubsubTopic == "" && f.pubsubTopicTemplate == "") {
			return nil, nothing, usageErr("--handler pubsub needs --pubsub-project and --pubsub-topic (or --pubsub-topic-template)")
		}
		if f.pubsubMaxBytes < 1 {
			return nil, nothing, usageErr("--pubsub-max-message-bytes must be positive, got %d", f.pubsubMaxBytes)
		}
		if f.pubsubMaxInFlight < 1 {
			return nil, nothing, usageErr("--pubsub-max-in-flight must be at least 1, got %d", f.pubsubMaxInFlight)
		}
		client, err := gpubsub.NewClient(ctx, f.pubsubProject)
		if err != nil {
			return nil, nothing, fmt.Errorf("pubsub client for project %q: %w", f.pubsubProject, err)
		}
		h, err := pubsub.New(pubsub.Config{
			Client: client, Topic: f.pubsubTopic, TopicTemplate: f.pubsubTopicTemplate,
			MaxInFlight: f.pubsubMaxInFlight, PayloadColumn: namedColumn(f.pubsubPayloadColumn, handlers.DefaultPayloadColumn), MaxMessageBytes: f.pubsubMaxBytes,
			Envelope: env,
		})
		if err != nil {
			client.Close()
			return nil, nothing, usageErr("%v", err)
		}
		return h, func() { _ = h.Close(); _ = client.Close() }, nil
	case "kafka":
		if webhookSet || pubsubSet {
			return nil, nothing, usageErr("--webhook-* and --pubsub-* flags contradict --handler kafka")
		}
		return f.kafka.newHandler(cfg)
	case "nats":
		if webhookSet || pubsubSet {
			return nil, nothing, usageErr("--webhook-* and --pubsub-* flags contradict --handler nats")
		}
		return f.nats.newHandler(ctx)
	case "rabbitmq":
		if webhookSet || pubsubSet {
			return nil, nothing, usageErr("--webhook-* and --pubsub-* flags contradict --handler rabbitmq")
		}
		return f.rabbitmq.newHandler(ctx, cfg)
	case "redis":
		if webhookSet || pubsubSet {
			return nil, nothing, usageErr("--webhook-* and --pubsub-* flags contradict --handler redis")
		}
		return f.redis.newHandler(ctx)
	default:
		return nil, nothing, usageErr("unknown --handler %q: use stdout, webhook, pubsub, kafka, nats, rabbitmq or redis", f.handler)
	}
}

// handlerTimeout is the bound the processor puts on one handler call under cfg: its HandlerTimeout, or the
// processor's default when that is zero. A sink's own timeout must be shorter.
func handlerTimeout(cfg processor.Config[handlers.Row]) time.Duration {
	if cfg.HandlerTimeout > 0 {
		return cfg.HandlerTimeout
	}
	return setting.DefaultHandlerTimeout(cfg.IdleInTransactionTimeout, cfg.Lease)
}

// sinkTimeout is a sink's own timeout: set, or four fifths of the handler timeout bound, so that the
// sink gives up (and says why) before the processor cuts the call off.
func sinkTimeout(set, bound time.Duration) time.Duration {
	if set != 0 {
		return set
	}
	return bound * 4 / 5
}

// probeSetting is the ProbeInterval for --probe-interval, where 0 turns probing off.
func probeSetting(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
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
	if f.batchBytes < 1 {
		return cfg, usageErr("--batch-bytes must be at least 1 byte, got %d", f.batchBytes)
	}
	if f.batchSize < 0 {
		return cfg, usageErr("--batch-size must be at least 1 (or 0: adaptive), got %d", f.batchSize)
	}
	if f.partitions < 0 || f.maxPartitions < 0 {
		return cfg, usageErr("--partitions and --max-partitions must not be negative")
	}
	if f.maxPartitions > 0 && f.partitions == 0 {
		return cfg, usageErr("--max-partitions needs --partitions")
	}
	if f.pollInterval <= 0 {
		return cfg, usageErr("--poll-interval must be positive")
	}
	if f.probeInterval < 0 {
		return cfg, usageErr("--probe-interval must not be negative")
	}
	if f.insertLatency < 0 {
		return cfg, usageErr("--insert-latency must not be negative")
	}
	if f.retryMin <= 0 || f.retryMax < f.retryMin {
		return cfg, usageErr("--retry-min must be positive and at most --retry-max")
	}
	if f.haltAfter <= 0 {
		return cfg, usageErr("--halt-after must be positive, got %s", f.haltAfter)
	}
	if f.lease <= 0 {
		return cfg, usageErr("--lease must be positive, got %s", f.lease)
	}
	if f.handlerTimeout != 0 && f.handlerTimeout >= f.idleTimeout {
		return cfg, usageErr("--handler-timeout (%s) must be shorter than --idle-timeout (%s): a handler "+
			"that outlives the idle timeout loses the cursor lock mid-record", f.handlerTimeout, f.idleTimeout)
	}
	if f.handlerTimeout != 0 && f.handlerTimeout+min(time.Second, f.lease/10) >= f.lease {
		return cfg, usageErr("--handler-timeout (%s) must be well shorter than --lease (%s): an owner starts a "+
			"record only while its lease covers the call", f.handlerTimeout, f.lease)
	}
	if f.dbTimeout <= 0 {
		return cfg, usageErr("--db-timeout must be positive, got %s", f.dbTimeout)
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
	onHalt := processor.OnHalt(f.onHalt)
	if onHalt != processor.OnHaltHalt && onHalt != processor.OnHaltPark {
		return cfg, usageErr("--on-halt must be halt or park, got %q", f.onHalt)
	}
	var start inordertype.StartFrom
	if f.startFrom != "" {
		var err error
		if start, err = inordertype.ParseStartFrom(f.startFrom); err != nil {
			return cfg, usageErr("--start-from must be beginning, now or an RFC 3339 time, got %q", f.startFrom)
		}
	}
	horizon, err := parseHorizon(f.horizon)
	if err != nil {
		return cfg, usageErr("--horizon: %v", err)
	}
	cc, before, err := f.databaseURL.connConfig()
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
		Process: f.process,
		ClientConfig: processor.ClientConfig{ConnConfig: cc, BeforeConnectFunc: before, Instance: f.instance,
			DatabaseTimeout: f.dbTimeout},
		Source: inordertype.Source{
			Table: f.table, IDColumn: f.idColumn, CreatedAtColumn: f.createdAtColumn,
			KeyColumn: f.keyColumn, Columns: cols, Horizon: horizon, Where: f.where,
			TraceColumn: f.traceColumn, TraceStateColumn: f.traceStateColumn,
		},
		BatchSize:                f.batchSize,
		BatchBytes:               int(f.batchBytes),
		PollInterval:             f.pollInterval,
		ProbeInterval:            probeSetting(f.probeInterval),
		InsertLatency:            f.insertLatency,
		Checkpoint:               cp,
		StartFrom:                start,
		RetryMin:                 f.retryMin,
		RetryMax:                 f.retryMax,
		HaltAfter:                f.haltAfter,
		OnHalt:                   onHalt,
		SynchronousCommit:        f.syncCommit,
		IdleInTransactionTimeout: f.idleTimeout,
		Lease:                    f.lease,
		HandlerTimeout:           f.handlerTimeout,
		ShutdownTimeout:          f.shutdownTimeout,
		HoldWarnAfter:            f.holdWarnAfter,
		Logger:                   log,
		Listen:                   f.listen,
	}
	return cfg, nil
}

// namedColumn is a payload column flag as the handler takes it: empty for the default column, which a
// record may lack (it is then sent whole), so that only a column the flag names otherwise must exist.
func namedColumn(flag, def string) string {
	if flag == def {
		return ""
	}
	return flag
}
