package processor_test

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/inorder-dev/inorder/internal/harness/pgtest"
	"github.com/inorder-dev/inorder/internal/harness/testrun"
	"github.com/inorder-dev/inorder/processor"
)

// credentials plays the issuer of a role's credentials: the password it gives the hook is the role's
// current one, and a rotation changes both under its lock, as a token service issues only tokens that
// work. lag, when set, keeps giving the password before the last rotation: a secret not yet rewritten.
type credentials struct {
	t    *testing.T
	db   *pgtest.DB
	role string

	mu      sync.Mutex
	current string
	given   string // what the hook gives: current, unless lagging
	lag     bool
	issued  map[string]int // how many connections were given each password
}

func newCredentials(t *testing.T, db *pgtest.DB, password string) (*credentials, *pgx.ConnConfig) {
	t.Helper()
	role, url := pgtest.PasswordRole(t, db, password)
	cc, err := pgx.ParseConfig(url)
	require.NoError(t, err)
	return &credentials{t: t, db: db, role: role, current: password, given: password, issued: map[string]int{}}, cc
}

// before is the hook: each connection gets the password as issued now.
func (c *credentials) before(_ context.Context, cc *pgx.ConnConfig) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	cc.Password = c.given
	c.issued[c.given]++
	return nil
}

// rotate changes the role's password to password and, unless lagging, what the hook gives.
func (c *credentials) rotate(password string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.db.Exec(c.t, "ALTER ROLE "+pgx.Identifier{c.role}.Sanitize()+" PASSWORD "+sqlString(password))
	c.current = password
	if !c.lag {
		c.given = password
	}
}

// catchUp makes the hook give the current password again.
func (c *credentials) catchUp() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lag, c.given = false, c.current
}

// endSessions ends every session of the role whose application_name is like application (% for all), as
// a rotation does after its grace period (or as the server does to a session whose token expired), and
// returns how many there were.
func (c *credentials) endSessions(application string) int {
	var n int
	require.NoError(c.t, c.db.Pool.QueryRow(context.Background(), `SELECT count(pg_terminate_backend(pid))
		FROM pg_stat_activity WHERE usename = $1 AND application_name LIKE $2`, c.role, application).Scan(&n))
	return n
}

func (c *credentials) connections(password string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.issued[password]
}

// distinct counts the records among ids, each once.
func distinct(ids []int64) int {
	seen := map[int64]bool{}
	for _, id := range ids {
		seen[id] = true
	}
	return len(seen)
}

func sqlString(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// refusalObserver records what a processor says of its connection and its credentials.
type refusalObserver struct {
	nopObserver
	mu        sync.Mutex
	refusal   string   // now
	refusals  []string // every one said
	connected bool
}

func (o *refusalObserver) Connected(_ string, ok bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.connected = ok
}

func (o *refusalObserver) CredentialsRefused(_ string, refusal string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.refusal = refusal
	if refusal != "" {
		o.refusals = append(o.refusals, refusal)
	}
}

func (o *refusalObserver) now() (refusal string, said []string, connected bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.refusal, append([]string(nil), o.refusals...), o.connected
}

var _ processor.Observer = (*refusalObserver)(nil)

// requireInOrderOnce requires got to be want, in order, each record once but for those delivered again
// after a lost connection: at most the record in flight at each loss (Checkpoint record).
func requireInOrderOnce(t *testing.T, want, got []int64, losses int) {
	t.Helper()
	var seen []int64
	again := 0
	for _, id := range got {
		if len(seen) > 0 && id <= seen[len(seen)-1] {
			require.Equal(t, seen[len(seen)-1], id, "only the record in flight comes again, at once: %v", got)
			again++
			continue
		}
		seen = append(seen, id)
	}
	require.Equal(t, want, seen, "every row once, in order")
	require.LessOrEqual(t, again, losses, "at most the record in flight again per lost connection")
}

// TestATokenThatExpiresEveryFewSecondsIsFreshAtEachConnection issues, through ClientConfig's hook, a
// password that changes every 500ms (the role's password is rotated, as a token expires), and ends the
// role's sessions after every other rotation while rows are written: each new connection is given the
// token of its time and the server accepts it, so the stream never meets a refusal and delivers every row
// once, in order.
func TestATokenThatExpiresEveryFewSecondsIsFreshAtEachConnection(t *testing.T) {
	t.Parallel()
	b := setup(t)
	creds, cc := newCredentials(t, b.db, "token-0")
	client, err := processor.NewClient(processor.ClientConfig{ConnConfig: cc, Instance: "tokens",
		BeforeConnectFunc: creds.before})
	require.NoError(t, err)
	obs := &refusalObserver{}
	cfg := b.cfg
	cfg.ClientConfig.ConnConfig, cfg.Client, cfg.Observer = nil, client, obs
	p, err := processor.New(cfg)
	require.NoError(t, err)
	client.Add(p)
	stop := testrun.Start(t, client.Run)
	t.Cleanup(func() { _ = stop(); client.Close() })

	var want []int64
	ended, rotations := 0, 6
	for i := 1; i <= rotations; i++ {
		want = append(want, b.insert(t, 5)...)
		waitFor(t, "the rows before the rotation delivered", func() bool { return distinct(b.h.ids()) >= len(want) })
		creds.rotate(fmt.Sprintf("token-%d", i))
		if i%2 == 0 {
			ended += creds.endSessions("%")
			require.NotZero(t, ended, "the process had sessions to end")
		}
		time.Sleep(500 * time.Millisecond) // the tokens' lifetime, not a synchronisation
	}
	want = append(want, b.insert(t, 5)...)
	waitFor(t, "every row delivered", func() bool { return distinct(b.h.ids()) >= len(want) })
	requireInOrderOnce(t, want, b.h.ids(), ended)

	refusal, said, _ := obs.now()
	require.Empty(t, refusal)
	require.Empty(t, said, "a token issued for each connection is never refused")
	fresh := 0
	for i := 2; i <= rotations; i += 2 {
		if creds.connections(fmt.Sprintf("token-%d", i)) > 0 {
			fresh++
		}
	}
	require.Equal(t, rotations/2, fresh, "after each end of the sessions, the new connections used the token of their time")
}

// TestCredentialsRefusedMidRunAreAnOutageNotAnExit rotates the role's password and ends its sessions
// while the hook still gives the old one (a Secret not yet rewritten): the processor, without a Client,
// does not stop; it says the database refused the credentials, naming the user and the server, and once
// the hook gives the new password it resumes on its own within seconds, every row once, in order. At
// start-up, the same refusal stops Run at once.
func TestCredentialsRefusedMidRunAreAnOutageNotAnExit(t *testing.T) {
	t.Parallel()
	for _, withClient := range []bool{false, true} {
		t.Run(fmt.Sprintf("client=%t", withClient), func(t *testing.T) {
			t.Parallel()
			testCredentialsRefusedMidRun(t, withClient)
		})
	}
}

func testCredentialsRefusedMidRun(t *testing.T, withClient bool) {
	b := setup(t)
	creds, cc := newCredentials(t, b.db, "first")
	obs := &refusalObserver{}
	cfg := b.cfg
	cfg.ClientConfig.ConnConfig, cfg.ClientConfig.BeforeConnectFunc, cfg.Observer = cc, creds.before, obs
	var logs testrun.Buffer
	cfg.Logger = cfg.Logger.Output(&logs)
	run := func(cfg processor.Config[event]) func(context.Context) error {
		if !withClient {
			p, err := processor.New(cfg)
			require.NoError(t, err)
			return p.Run
		}
		client, err := processor.NewClient(processor.ClientConfig{ConnConfig: cc, Instance: "refused",
			BeforeConnectFunc: creds.before})
		require.NoError(t, err)
		t.Cleanup(client.Close)
		cfg.ClientConfig.ConnConfig, cfg.ClientConfig.BeforeConnectFunc, cfg.Client = nil, nil, client
		p, err := processor.New(cfg)
		require.NoError(t, err)
		client.Add(p)
		return client.Run
	}
	stop := testrun.Start(t, run(cfg))

	want := b.insert(t, 20)
	waitFor(t, "the first rows delivered", func() bool { return distinct(b.h.ids()) >= len(want) })
	creds.mu.Lock()
	creds.lag = true
	creds.mu.Unlock()
	creds.rotate("second")
	// With a Client, its session alone first: the next batch's lock connects it again, while the pool's
	// connection lives on, and meets the refusal there.
	ended := creds.endSessions(map[bool]string{false: "%", true: "inorder-session:%"}[withClient])
	require.NotZero(t, ended)
	want = append(want, b.insert(t, 20)...)

	server := net.JoinHostPort(cc.Host, strconv.Itoa(int(cc.Port)))
	line := "the database refused the credentials of user " + creds.role + " on " + server
	defer func() {
		if t.Failed() {
			t.Log(logs.String())
		}
	}()
	waitFor(t, "the refusal said", func() bool {
		refusal, _, connected := obs.now()
		return strings.HasPrefix(refusal, line) && !connected
	})
	require.Contains(t, logs.String(), line)
	refusal, _, _ := obs.now()
	require.Contains(t, refusal, `password authentication failed for user "`+creds.role+`"`)
	require.NotContains(t, refusal, "first")
	require.NotContains(t, refusal, "second")

	caughtUp := time.Now()
	creds.catchUp()
	testrun.EventuallyWithin(10*time.Second)(t, "resumed within 10s of the new password", func() bool {
		refusal, _, connected := obs.now()
		return refusal == "" && connected && distinct(b.h.ids()) >= len(want)
	})
	t.Logf("resumed %s after the hook gave the new password", time.Since(caughtUp).Round(time.Millisecond))
	requireInOrderOnce(t, want, b.h.ids(), ended)
	_, said, _ := obs.now()
	require.Len(t, said, 1, "said once for the whole outage")
	require.Equal(t, 1, strings.Count(logs.String(), line), "one line when it begins")
	require.Contains(t, logs.String(), "the database accepts the credentials again")
	require.NoError(t, stop(), "Run did not return during the outage")

	// At start-up the same refusal is a mistake: Run returns it at once, naming the server.
	creds.mu.Lock()
	creds.lag, creds.given = true, "third"
	creds.mu.Unlock()
	cfg.Process = "another_process"
	began := time.Now()
	err := run(cfg)(context.Background())
	require.Error(t, err)
	require.Contains(t, err.Error(), `password authentication failed for user "`+creds.role+`"`)
	require.Less(t, time.Since(began), 5*time.Second, "at once")
}

// TestCredentialsTheHookCannotGiveAreWaitedOut: a hook that fails for a while once the process has
// connected (a token service down, a Secret's file gone between two versions) is an outage as a refusal
// is: said once with the hook's error, naming the user and the server, and over once the hook gives the
// credentials again, every row once, in order.
func TestCredentialsTheHookCannotGiveAreWaitedOut(t *testing.T) {
	t.Parallel()
	b := setup(t)
	creds, cc := newCredentials(t, b.db, "only")
	var mu sync.Mutex
	down := false
	obs := &refusalObserver{}
	cfg := b.cfg
	cfg.ClientConfig.ConnConfig, cfg.Observer = cc, obs
	cfg.ClientConfig.BeforeConnectFunc = func(ctx context.Context, cc *pgx.ConnConfig) error {
		mu.Lock()
		defer mu.Unlock()
		if down {
			return fmt.Errorf("the token service is sealed")
		}
		return creds.before(ctx, cc)
	}
	stop := start(t, cfg)
	want := b.insert(t, 10)
	waitFor(t, "the first rows delivered", func() bool { return distinct(b.h.ids()) >= len(want) })
	mu.Lock()
	down = true
	mu.Unlock()
	ended := creds.endSessions("%")
	want = append(want, b.insert(t, 10)...)
	line := "the credentials of user " + creds.role + " on " + net.JoinHostPort(cc.Host, strconv.Itoa(int(cc.Port))) +
		" could not be had: the token service is sealed"
	waitFor(t, "the outage said", func() bool { refusal, _, _ := obs.now(); return refusal == line })
	mu.Lock()
	down = false
	mu.Unlock()
	testrun.EventuallyWithin(10*time.Second)(t, "resumed", func() bool {
		refusal, _, connected := obs.now()
		return refusal == "" && connected && distinct(b.h.ids()) >= len(want)
	})
	requireInOrderOnce(t, want, b.h.ids(), ended)
	require.NoError(t, stop())
}

// TestAPartitionedProcessWaitsOutRefusedCredentials: a partitioned process whose one slot takes its four
// partitions in turn (so that a partition's stream starts afresh, or its coordination looks for a free
// partition, while the credentials are refused) does not stop when they are, and says so: once the hook
// gives the new password, every row arrives once, in order.
func TestAPartitionedProcessWaitsOutRefusedCredentials(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.partitionIndex(t, 4)
	creds, cc := newCredentials(t, b.db, "first")
	obs := &refusalObserver{}
	cfg := b.cfg
	cfg.Process = "split"
	cfg.ClientConfig.ConnConfig, cfg.ClientConfig.BeforeConnectFunc, cfg.Observer = cc, creds.before, obs
	p, err := processor.NewPartitioned(cfg, processor.PartitionOpts{Partitions: 4, Slots: 1})
	require.NoError(t, err)
	stop := testrun.Start(t, p.Run)
	want := b.insert(t, 10)
	waitFor(t, "the first rows delivered", func() bool { return distinct(b.h.ids()) >= len(want) })
	creds.mu.Lock()
	creds.lag = true
	creds.mu.Unlock()
	creds.rotate("second")
	ended := creds.endSessions("%")
	want = append(want, b.insert(t, 10)...)
	waitFor(t, "the refusal said", func() bool {
		refusal, _, _ := obs.now()
		return strings.HasPrefix(refusal, "the database refused the credentials of user "+creds.role)
	})
	creds.catchUp()
	testrun.EventuallyWithin(10*time.Second)(t, "resumed", func() bool { return distinct(b.h.ids()) >= len(want) })
	requireInOrderOnce(t, want, b.h.ids(), ended)
	require.NoError(t, stop(), "Run did not return during the outage")
}
