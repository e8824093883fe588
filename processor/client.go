package processor

import (
	"context"
	"errors"
	"fmt"
	"github.com/inorder-dev/inorder/internal/setting"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inorder-dev/inorder/internal/store"
	"github.com/inorder-dev/inorder/lifecycle"
)

// ClientConfig configures a Client.
type ClientConfig struct {
	// ConnConfig is the database every process of the client reads from. Required.
	ConnConfig *pgx.ConnConfig

	// MaxConns bounds the connections the client opens to Postgres, whatever the number of processes it
	// runs or stands by for: one session holds the ownership lock (a session-level advisory lock) of
	// every process the instance owns, and the rest are a pool lent to a process for the length of its
	// batch transaction, and to the idle probe and a standby's look at a lease between them. A process
	// waiting for a connection waits its turn, so MaxConns bounds how many processes deliver at the same
	// moment: slow handlers (a webhook that takes a second a batch) want more, fast ones few. At least 2;
	// zero means 4.
	MaxConns int

	// Instance names this instance in the cursor row's owner and in application_name, so that status can
	// say who works a process; every process of the client runs as it. Any number of instances may run one
	// process; one works it at a time. Empty means "<hostname>:<pid>".
	Instance string

	// DatabaseTimeout bounds every exchange of the client and its processors with the database: a
	// statement, a round trip of several, a commit, and a connection's start-up (TCP, TLS,
	// authentication). A connection a NAT or a load balancer forgot never errors by itself (a request
	// waits unanswered, and TCP keepalives do not fire while it does); once an exchange has received
	// nothing for this long, the connection counts as dead, the processor says so in one line and
	// reconnects. It bounds a silence, not a length: a read of big rows whose bytes keep arriving on a slow
	// link goes on however long it takes (a start-up, though, must end within it). Where the system
	// allows, the socket is told the same bound (TCP_USER_TIMEOUT) and idle connections are probed by
	// keepalives. The statements of a TxHandler run under Config.HandlerTimeout instead. Zero means
	// 5s.
	DatabaseTimeout time.Duration

	// BeforeConnectFunc, when set, is called before each connection the client opens (its session, the
	// connections of its pool, and those the pool makes for its wake-up listener, a partitioned process's
	// coordinator and the pooler's check), as pgxpool.Config.BeforeConnect is, with a copy of ConnConfig that it may change for
	// that connection alone: the password read again from where a rotation puts it, a token issued for
	// this connection (an IAM token lives 15 minutes, a connection may live for hours: a connection
	// made later gets a fresh one), a TLS configuration. An error it returns fails that connection: at
	// start-up the processors return it, later they wait it out as an outage (see "Credentials" in the
	// package documentation). It is called concurrently and must be safe for that. Nil connects with
	// ConnConfig as it is.
	BeforeConnectFunc func(ctx context.Context, cc *pgx.ConnConfig) error
}

// Client owns the Postgres connections of one instance and runs many processors on them, as River's
// Client owns one pool for all its workers: every connection inorder makes is a Client's, made by its pool
// or as its session. A processor given no Client makes one of its own (see Config.ClientConfig), so a
// service that embeds forty lone processes in three replicas would hold over a hundred connections; with
// one Client per replica it holds MaxConns each (and its listener's), owning or standing by.
//
// A processor runs on the client when its Config.Client is set. Add the processors to the client and Run
// it, or run them in a lifecycle.Group: either way Close the client after they stopped.
//
// Takeover is as fast as without a Client: on a direct connection the client's session holds each owned
// process's advisory lock, and when the instance dies the session ends with it and a standby takes over
// at its next look. Through a pooler the lease decides, as always.
type Client struct {
	cfg     ClientConfig
	shared  *store.Shared
	cursors *store.Store // the processors' cursor repositories and probe, on shared

	mu       sync.Mutex
	runners  []lifecycle.Runner
	listener listener // the processors' wake-up listener, shared (see Config.Listen)
	// polls are the processors' polls of the transactions in flight on their sources, shared (see
	// pollshare.go).
	polls pollShares

	// starting holds a token for each processor starting up (see startTurn): as many at once as the
	// client has connections to work on.
	starting chan struct{}
}

// NewClient makes a client. It connects nothing yet: the connections open as the processors need them.
func NewClient(cfg ClientConfig) (*Client, error) {
	if cfg.ConnConfig == nil {
		return nil, errors.New("processor client: ClientConfig.ConnConfig is required")
	}
	if cfg.MaxConns == 0 {
		cfg.MaxConns = setting.DefaultMaxConns
	}
	if cfg.MaxConns < 2 {
		return nil, fmt.Errorf("processor client: MaxConns must be at least 2 (a session and one connection to work on), got %d", cfg.MaxConns)
	}
	if cfg.DatabaseTimeout <= 0 {
		cfg.DatabaseTimeout = setting.DefaultDatabaseTimeout
	}
	shared, err := store.NewShared(store.SharedConfig{ConnConfig: cfg.ConnConfig, MaxConns: cfg.MaxConns,
		Instance: cfg.Instance, Timeout: cfg.DatabaseTimeout, BeforeConnect: cfg.BeforeConnectFunc})
	if err != nil {
		return nil, err
	}
	return &Client{cfg: cfg, shared: shared, cursors: store.New(shared), starting: make(chan struct{}, cfg.MaxConns-1)}, nil
}

// startTurn waits for a turn to start a processor on the client's connections, and returns the function
// that gives it back (once, however often it is called): after the processor's first look at its cursor
// row, which takes the process when it is free. A processor's start-up is a dozen statements (the checks
// of the source, the registration, the first lock and the lease), each waiting for a connection of the
// pool: a thousand processes starting at once would each wait behind all the others at every statement,
// and every one would be owned only once the last had started. Started a few at a time, each goes
// through its statements without waiting behind the rest, and the first are owned at once. The turn is
// given back before any record is delivered, so a handler that waits for another process of the client
// never keeps it from starting.
func (c *Client) startTurn(ctx context.Context) func() {
	if c == nil || c.starting == nil {
		return func() {}
	}
	select {
	case c.starting <- struct{}{}:
	case <-ctx.Done():
		return func() {}
	}
	var once sync.Once
	return func() { once.Do(func() { <-c.starting }) }
}

// Add makes Run run r: a Processor, or a Partitioned runner. Add every processor before Run.
func (c *Client) Add(r lifecycle.Runner) {
	c.mu.Lock()
	c.runners = append(c.runners, r)
	c.mu.Unlock()
}

// Name names the client as a lifecycle.Runner: "processes".
func (c *Client) Name() string { return "processes" }

// Run runs every processor added until ctx is done, and returns once all have stopped: nil after a clean
// stop, or, when one fails with an error retrying cannot fix, that error (naming its process) once it has
// stopped the others. It does not close the client.
func (c *Client) Run(ctx context.Context) error {
	c.mu.Lock()
	runners := append([]lifecycle.Runner(nil), c.runners...)
	c.mu.Unlock()
	if len(runners) == 0 {
		return errors.New("processor client: no processor added")
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make([]error, len(runners))
	var wg sync.WaitGroup
	for i, r := range runners {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if errs[i] = r.Run(ctx); errs[i] != nil {
				cancel()
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Pool is the client's pool, for what else the instance asks the database (metrics, status) without a
// connection of its own. What it holds, the processors wait for.
func (c *Client) Pool() *pgxpool.Pool { return c.shared.Pool() }

// Instance is the name every process of the client runs as.
func (c *Client) Instance() string { return c.shared.Instance() }

// Close closes the client's connections, releasing the ownership locks its session holds. Call it after
// the processors stopped.
func (c *Client) Close() { c.shared.Close() }

// ownClient makes the Client of a processor that was given none (a lone processor, or a partitioned
// process's partitions) from its Config.ClientConfig; maxConns is its MaxConns when that is zero.
func ownClient[T any](cfg *Config[T], maxConns int) (*Client, error) {
	cc := cfg.ClientConfig
	if cc.MaxConns == 0 {
		cc.MaxConns = maxConns
	}
	return NewClient(cc)
}

// fit checks a processor's ClientConfig beside its Client: it may be left zero, or name the client's
// database and instance; anything else it says would be a second place for what the connections are.
func (c *Client) fit(cfg *ClientConfig) error {
	mine := c.cfg.ConnConfig
	switch o := cfg.ConnConfig; {
	case o == nil:
	case o.Host != mine.Host || o.Port != mine.Port || o.Database != mine.Database || o.User != mine.User:
		return fmt.Errorf("Config.ClientConfig.ConnConfig names another database (%s@%s:%d/%s) than its Client's (%s@%s:%d/%s)",
			o.User, o.Host, o.Port, o.Database, mine.User, mine.Host, mine.Port, mine.Database)
	}
	if cfg.Instance != "" && cfg.Instance != c.Instance() {
		return fmt.Errorf("Config.ClientConfig.Instance %q differs from its Client's instance %q: a client is one instance",
			cfg.Instance, c.Instance())
	}
	if (cfg.DatabaseTimeout != 0 && cfg.DatabaseTimeout != c.cfg.DatabaseTimeout) || cfg.BeforeConnectFunc != nil ||
		cfg.MaxConns != 0 {
		return errors.New("Config.ClientConfig sets what its Client decides (DatabaseTimeout, BeforeConnectFunc, " +
			"MaxConns): a processor on a Client runs on the client's connections, as its own ClientConfig says")
	}
	return nil
}
