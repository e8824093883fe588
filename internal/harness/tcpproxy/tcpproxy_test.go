package tcpproxy

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/inorder-dev/inorder/internal/harness/pgtest"
)

// await is how long a test waits for a condition that should hold at once.
const await = 5 * time.Second

// quiet is how long a test watches a swallowed connection for bytes that must not come.
const quiet = 150 * time.Millisecond

// echoServer is a TCP server on loopback that writes back whatever it reads, on every connection.
type echoServer struct {
	ln    net.Listener
	ended atomic.Int64 // connections whose client side has ended (EOF or error)
	mu    sync.Mutex
	conns []net.Conn
}

func startEcho(t *testing.T) *echoServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	s := &echoServer{ln: ln}
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.mu.Lock()
			s.conns = append(s.conns, c)
			s.mu.Unlock()
			wg.Go(func() {
				_, _ = io.Copy(c, c)
				s.ended.Add(1)
				_ = c.Close()
			})
		}
	})
	t.Cleanup(func() {
		_ = ln.Close()
		s.mu.Lock()
		for _, c := range s.conns {
			_ = c.Close()
		}
		s.mu.Unlock()
		wg.Wait()
	})
	return s
}

func startProxy(t *testing.T, target string, delay time.Duration) *Proxy {
	t.Helper()
	p, err := Start(Config{Target: target, Delay: delay})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, p.Close()) })
	return p
}

func dial(t *testing.T, p *Proxy) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", p.Addr())
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// roundTrip sends msg and reads it back, and returns how long that took.
func roundTrip(t *testing.T, c net.Conn, msg string) time.Duration {
	t.Helper()
	start := time.Now()
	_, err := c.Write([]byte(msg))
	require.NoError(t, err)
	require.NoError(t, c.SetReadDeadline(time.Now().Add(await)))
	got := make([]byte, len(msg))
	_, err = io.ReadFull(c, got)
	require.NoError(t, err)
	require.Equal(t, msg, string(got))
	return time.Since(start)
}

// requireNothing checks that nothing arrives on c for a while and that c is not closed meanwhile.
func requireNothing(t *testing.T, c net.Conn) {
	t.Helper()
	require.NoError(t, c.SetReadDeadline(time.Now().Add(quiet)))
	n, err := c.Read(make([]byte, 64))
	require.Zero(t, n, "bytes came through a swallowed connection")
	var ne net.Error
	require.True(t, errors.As(err, &ne) && ne.Timeout(), "want a read timeout on an open connection, got %v", err)
}

func TestDelayAddsToEveryRoundTrip(t *testing.T) {
	t.Parallel()
	const delay = 3 * time.Millisecond
	echo := startEcho(t)
	p := startProxy(t, echo.ln.Addr().String(), delay)
	c := dial(t, p)
	for i := range 10 {
		took := roundTrip(t, c, "ping "+strconv.Itoa(i))
		require.GreaterOrEqual(t, took, 2*delay, "round trip %d", i)
	}
}

func TestDelayKeepsOrder(t *testing.T) {
	t.Parallel()
	echo := startEcho(t)
	p := startProxy(t, echo.ln.Addr().String(), 500*time.Microsecond)
	c := dial(t, p)
	// Many chunks in flight at once, in both directions: what comes back must be what went, in order.
	var sent bytes.Buffer
	for i := range 200_000 {
		sent.WriteString(strconv.Itoa(i))
		sent.WriteByte(' ')
	}
	errc := make(chan error, 1)
	go func() {
		_, err := c.Write(sent.Bytes())
		errc <- err
	}()
	require.NoError(t, c.SetReadDeadline(time.Now().Add(await)))
	got := make([]byte, sent.Len())
	_, err := io.ReadFull(c, got)
	require.NoError(t, err)
	require.NoError(t, <-errc)
	require.True(t, bytes.Equal(sent.Bytes(), got), "bytes came back changed or out of order")
}

func TestNoDelayPasses(t *testing.T) {
	t.Parallel()
	echo := startEcho(t)
	p := startProxy(t, echo.ln.Addr().String(), 0)
	c := dial(t, p)
	for i := range 10 {
		roundTrip(t, c, "ping "+strconv.Itoa(i))
	}
	// The end of the client's stream reaches the server, and the server's end comes back.
	require.NoError(t, c.(*net.TCPConn).CloseWrite())
	require.NoError(t, c.SetReadDeadline(time.Now().Add(await)))
	_, err := c.Read(make([]byte, 1))
	require.ErrorIs(t, err, io.EOF)
	require.Eventually(t, func() bool { return echo.ended.Load() == 1 && p.Conns() == 0 }, await, time.Millisecond)
}

func TestSwallowKeepsConnectionsOpenAndDeliversNothing(t *testing.T) {
	t.Parallel()
	echo := startEcho(t)
	p := startProxy(t, echo.ln.Addr().String(), 500*time.Microsecond)
	old := dial(t, p)
	roundTrip(t, old, "before")
	p.Swallow()

	_, err := old.Write([]byte("after"))
	require.NoError(t, err)
	requireNothing(t, old)

	// A new connection passes, and the swallowed one still counts as open.
	fresh := dial(t, p)
	roundTrip(t, fresh, "new")
	require.Equal(t, 2, p.Conns())

	// Heal does not bring a swallowed connection back.
	p.Heal()
	_, err = old.Write([]byte("healed?"))
	require.NoError(t, err)
	requireNothing(t, old)

	// The client closing its side is swallowed too: the server's side stays open, as behind a middlebox
	// that forgot the connection.
	require.NoError(t, old.Close())
	roundTrip(t, fresh, "still")
	require.Zero(t, echo.ended.Load(), "the end of a swallowed connection reached the server")
	require.Equal(t, 2, p.Conns())
}

func TestSwallowNewThenHeal(t *testing.T) {
	t.Parallel()
	echo := startEcho(t)
	p := startProxy(t, echo.ln.Addr().String(), 500*time.Microsecond)
	before := dial(t, p)
	roundTrip(t, before, "before")

	p.SwallowNew(true)
	first := dial(t, p)
	_, err := first.Write([]byte("lost"))
	require.NoError(t, err)
	requireNothing(t, first)
	// A connection open before SwallowNew passes.
	roundTrip(t, before, "unaffected")

	// Turned off, new connections pass again; the swallowed one waits for Heal.
	p.SwallowNew(false)
	second := dial(t, p)
	roundTrip(t, second, "second")
	requireNothing(t, first)

	p.SwallowNew(true)
	third := dial(t, p)
	_, err = third.Write([]byte("lost too"))
	require.NoError(t, err)
	requireNothing(t, third)
	require.Equal(t, 4, p.Conns())

	// Heal lets bytes pass on the swallowed connections (what they sent before stays lost) and on new ones.
	p.Heal()
	roundTrip(t, first, "healed")
	roundTrip(t, third, "healed too")
	roundTrip(t, dial(t, p), "after")
}

func TestExchangesCountRoundTrips(t *testing.T) {
	t.Parallel()
	echo := startEcho(t)
	p := startProxy(t, echo.ln.Addr().String(), 0)
	a, b := dial(t, p), dial(t, p)
	for i := range 3 {
		roundTrip(t, a, "a"+strconv.Itoa(i))
	}
	for i := range 2 {
		roundTrip(t, b, "b"+strconv.Itoa(i))
	}
	require.EqualValues(t, 5, p.Exchanges())

	p.ResetExchanges()
	require.Zero(t, p.Exchanges())
	roundTrip(t, a, "again")
	require.EqualValues(t, 1, p.Exchanges())

	// Swallowed bytes are no exchange.
	p.Swallow()
	_, err := b.Write([]byte("gone"))
	require.NoError(t, err)
	requireNothing(t, b)
	require.EqualValues(t, 1, p.Exchanges())
}

func TestCloseEndsConnections(t *testing.T) {
	t.Parallel()
	echo := startEcho(t)
	p, err := Start(Config{Target: echo.ln.Addr().String(), Delay: time.Millisecond})
	require.NoError(t, err)
	c := dial(t, p)
	roundTrip(t, c, "hello")
	p.Swallow()
	require.NoError(t, p.Close())
	require.NoError(t, p.Close())
	require.Zero(t, p.Conns())
	require.NoError(t, c.SetReadDeadline(time.Now().Add(await)))
	_, err = c.Read(make([]byte, 1))
	require.ErrorIs(t, err, io.EOF)
	require.Eventually(t, func() bool { return echo.ended.Load() == 1 }, await, time.Millisecond)
}

func TestUnreachableTargetClosesTheClient(t *testing.T) {
	t.Parallel()
	p := startProxy(t, "127.0.0.1:1", 0) // tcpmux: nothing listens there
	c := dial(t, p)
	require.NoError(t, c.SetReadDeadline(time.Now().Add(await)))
	_, err := c.Read(make([]byte, 1))
	require.Error(t, err)
	require.Eventually(t, func() bool { return p.Conns() == 0 }, await, time.Millisecond)
}

func TestURL(t *testing.T) {
	t.Parallel()
	p := startProxy(t, "127.0.0.1:1", 0)
	addr := p.Addr()
	require.Equal(t, "127.0.0.1", p.Host())
	require.Equal(t, addr, p.Host()+":"+strconv.Itoa(int(p.Port())))
	for in, want := range map[string]string{
		"postgres://postgres@127.0.0.1:5432/db?sslmode=disable": "postgres://postgres@" + addr + "/db?sslmode=disable",
		"postgresql://u:p%40ss@db.example.com/app":              "postgresql://u:p%40ss@" + addr + "/app",
		"postgres://u@h1:5432,h2:5433/app?target_session_attrs=read-write": "postgres://u@" + addr +
			"/app?target_session_attrs=read-write",
		"postgres://db.example.com":                               "postgres://" + addr,
		"postgres:///app?host=/var/run/postgresql&sslmode=prefer": "postgres://" + addr + "/app?sslmode=prefer",
		"host=db.example.com port=5432 dbname=app": "host=db.example.com port=5432 dbname=app host=127.0.0.1 port=" +
			strconv.Itoa(int(p.Port())),
	} {
		require.Equal(t, want, p.URL(in), in)
	}
}

// startupMessage is a PostgreSQL start-up message naming application app.
func startupMessage(app string) string {
	body := "\x00\x03\x00\x00user\x00u\x00application_name\x00" + app + "\x00\x00"
	n := len(body) + 4
	return string([]byte{byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)}) + body
}

func TestExchangesOfCountsByTheStartupsApplication(t *testing.T) {
	t.Parallel()
	echo := startEcho(t)
	p := startProxy(t, echo.ln.Addr().String(), 0)
	a, b, c := dial(t, p), dial(t, p), dial(t, p)
	roundTrip(t, a, startupMessage("inorder:probe"))
	roundTrip(t, a, "query")
	// A client that asks for TLS first, declined, then starts up in the clear.
	roundTrip(t, b, "\x00\x00\x00\x08\x04\xd2\x16\x2f")
	roundTrip(t, b, startupMessage("app b"))
	for i := range 3 {
		roundTrip(t, b, "b"+strconv.Itoa(i))
	}
	roundTrip(t, c, "not a start-up message at all")
	require.EqualValues(t, 2, p.ExchangesOf("inorder:probe"))
	require.EqualValues(t, 4, p.ExchangesOf("app b"), "from its start-up message on")
	require.Zero(t, p.ExchangesOf("nobody"))
	require.EqualValues(t, 8, p.Exchanges())
}

// A real pgx ping through the proxy counts as an exchange and as a ping, by its connection's application,
// and a statement pgx prepares for its cache as a prepare, once; other queries count as exchanges only.
func TestPingsAndPreparesAreCountedApart(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	direct, err := pgx.ParseConfig(db.URL)
	require.NoError(t, err)
	p := startProxy(t, net.JoinHostPort(direct.Host, strconv.Itoa(int(direct.Port))), 0)
	cc, err := pgx.ParseConfig(p.URL(db.URL))
	require.NoError(t, err)
	cc.RuntimeParams["application_name"] = "pinger"
	conn, err := pgx.ConnectConfig(context.Background(), cc)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	before := p.ExchangesOf("pinger")
	require.NoError(t, conn.Ping(context.Background()))
	require.NoError(t, conn.Ping(context.Background()))
	_, err = conn.Exec(context.Background(), "-- not a ping")
	require.NoError(t, err)
	require.EqualValues(t, 3, p.ExchangesOf("pinger")-before)
	require.EqualValues(t, 2, p.PingsOf("pinger"))
	require.EqualValues(t, 2, p.Pings())
	require.Zero(t, p.PingsOf("nobody"))
	require.Zero(t, p.PreparesOf("pinger"))

	before = p.ExchangesOf("pinger")
	for i := range 3 {
		var n int
		require.NoError(t, conn.QueryRow(context.Background(), "SELECT $1::int", i).Scan(&n))
	}
	// The first use prepares (a round trip) and runs (another); the next two only run.
	require.EqualValues(t, 4, p.ExchangesOf("pinger")-before)
	require.EqualValues(t, 1, p.PreparesOf("pinger"))
	require.EqualValues(t, 1, p.Prepares())
	require.EqualValues(t, 2, p.PingsOf("pinger"))
	_, err = conn.Exec(context.Background(), "SELECT $1::int", pgx.QueryExecModeDescribeExec, 5)
	require.NoError(t, err)
	require.EqualValues(t, 1, p.PreparesOf("pinger"), "a description of the unnamed statement is not a prepare")
}
