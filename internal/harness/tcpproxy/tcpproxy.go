package tcpproxy

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Config configures Start.
type Config struct {
	// Target is the host:port to forward to. Required.
	Target string
	// Delay is added to each direction: every chunk read is written on this much later, in order. Zero
	// adds none.
	Delay time.Duration
}

// dialTimeout bounds the connection to the target that each accepted connection makes.
const dialTimeout = 10 * time.Second

// chunkSize is the most one read takes from a socket.
const chunkSize = 32 << 10

// coarse is the part of a wait for a chunk's due time slept in preciseSleep rather than on a timer.
const coarse = 2 * time.Millisecond

// queueLen is how many chunks a direction of a delayed connection holds before its reader waits.
const queueLen = 256

// trickleSteps is how many pieces a second of a trickle is written in: each piece goes on when the rate
// allows, so that a client sees bytes come every 1/trickleSteps of a second, not a chunk now and then.
const trickleSteps = 50

// The states of a connection.
const (
	passing   int32 = iota // bytes pass
	held                   // swallowed by SwallowNew: Heal lets bytes pass again
	swallowed              // swallowed by Swallow: dead for good
)

// The directions of a connection, for counting exchanges.
const (
	none int32 = iota
	toServer
	toClient
)

// Proxy is a running proxy. Its methods are safe for concurrent use.
type Proxy struct {
	cfg       Config
	ln        net.Listener
	dialCtx   context.Context
	stopDials context.CancelFunc
	exchanges atomic.Int64
	pings     atomic.Int64   // the exchanges that were a client's health check (see Pings)
	prepares  atomic.Int64   // the exchanges that began with a Parse message (see Prepares)
	toClients atomic.Int64   // bytes written to clients
	trickle   atomic.Int64   // the bytes per second toward each client under Trickle; 0 for no bound
	wg        sync.WaitGroup // the accept loop and every connection's goroutines

	appsMu sync.Mutex
	apps   map[string]*counters // the counts by the application_name of the connection's start-up

	mu         sync.Mutex
	conns      map[*conn]struct{}
	swallowNew bool
	closed     bool
}

// Start listens on 127.0.0.1 at a port of the system's choosing and forwards every connection it
// accepts to cfg.Target until Close.
func Start(cfg Config) (*Proxy, error) {
	if cfg.Target == "" {
		return nil, errors.New("tcpproxy: no target")
	}
	if cfg.Delay < 0 {
		return nil, errors.New("tcpproxy: negative delay")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &Proxy{cfg: cfg, ln: ln, dialCtx: ctx, stopDials: cancel, conns: map[*conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr returns the address the proxy listens on, "127.0.0.1:port".
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Host returns the host the proxy listens on.
func (p *Proxy) Host() string { return p.ln.Addr().(*net.TCPAddr).IP.String() }

// Port returns the port the proxy listens on.
func (p *Proxy) Port() uint16 { return uint16(p.ln.Addr().(*net.TCPAddr).Port) }

// URL returns databaseURL with its host and port replaced by the proxy's, everything else (user, password,
// database, parameters) kept. It takes both URL and keyword/value forms; a URL naming several hosts gets
// the proxy alone.
func (p *Proxy) URL(databaseURL string) string {
	i := strings.Index(databaseURL, "://")
	if i < 0 { // keyword/value form: later settings win
		return databaseURL + " host=" + p.Host() + " port=" + strconv.Itoa(int(p.Port()))
	}
	rest := databaseURL[i+3:]
	end := strings.IndexAny(rest, "/?")
	if end < 0 {
		end = len(rest)
	}
	authority, tail := rest[:end], rest[end:]
	userinfo := ""
	if at := strings.LastIndexByte(authority, '@'); at >= 0 {
		userinfo = authority[:at+1]
	}
	return databaseURL[:i+3] + userinfo + p.Addr() + dropHostParams(tail)
}

// dropHostParams removes the host, hostaddr and port parameters from the path and query of a URL, which
// would otherwise name the server instead of the proxy.
func dropHostParams(tail string) string {
	path, query, ok := strings.Cut(tail, "?")
	if !ok {
		return tail
	}
	var kept []string
	for kv := range strings.SplitSeq(query, "&") {
		k, _, _ := strings.Cut(kv, "=")
		if k != "host" && k != "hostaddr" && k != "port" {
			kept = append(kept, kv)
		}
	}
	if len(kept) == 0 {
		return path
	}
	return path + "?" + strings.Join(kept, "&")
}

// Swallow makes every connection open now dead for good: from now on the bytes of both directions are
// read and dropped, and the end of either side's stream is not passed on, while the sockets stay open
// (see the package documentation, "Faults"). Heal does not bring them back. New connections pass.
func (p *Proxy) Swallow() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		c.state.Store(swallowed)
		// Nothing is written on it any more: a write blocked on a side that does not read gives up.
		c.setWriteDeadline(time.Unix(1, 0))
	}
}

// SwallowNew, while on, swallows the connections the proxy accepts from their first byte, as Swallow
// does, until Heal. Turning it off lets new connections pass again; those already swallowed stay so
// until Heal.
func (p *Proxy) SwallowNew(on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.swallowNew = on
}

// Heal turns SwallowNew off and lets bytes pass again on the connections it swallowed; what they sent
// meanwhile stays lost. Connections swallowed by Swallow stay dead for good.
func (p *Proxy) Heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.swallowNew = false
	for c := range p.conns {
		c.state.CompareAndSwap(held, passing)
	}
}

// Trickle makes every connection, open now or accepted later, pass the bytes from the server to the client
// at bytesPerSecond at most, as a slow link does (a link of 8 Mbit/s passes 1,000,000 bytes a second): they
// come a piece at a time, every 1/50 of a second, rather than in bursts. The client's bytes to the server
// pass as before. Zero turns it off, for the bytes still to pass too. It adds to Delay.
func (p *Proxy) Trickle(bytesPerSecond int) {
	p.trickle.Store(int64(max(0, bytesPerSecond)))
}

// ToClients returns the bytes the proxy has written to clients since Start, summed over the connections:
// how far an answer has come, for a test that acts in the middle of one.
func (p *Proxy) ToClients() int64 { return p.toClients.Load() }

// Exchanges returns the round trips counted since Start or ResetExchanges: on each connection, every time
// bytes from the client pass after bytes from the server (or are its first), summed over the connections.
// Swallowed bytes do not count.
func (p *Proxy) Exchanges() int64 { return p.exchanges.Load() }

// ExchangesOf returns the Exchanges of the connections whose start-up message named application app, so
// that a test can tell a client's round trips from those of another connection through the same proxy.
// A connection that negotiated TLS names none.
func (p *Proxy) ExchangesOf(app string) int64 {
	return p.appCounters(app).exchanges.Load()
}

// Pings returns how many of the Exchanges were a client's health check of its connection: pgx's ping, the
// simple query "-- ping", which a pgxpool sends before it lends a connection that sat idle for a second.
// A test that counts the round trips of a client's work leaves them out: a loaded machine makes more of
// them, the work the same.
func (p *Proxy) Pings() int64 { return p.pings.Load() }

// PingsOf returns the Pings of the connections whose start-up message named application app.
func (p *Proxy) PingsOf(app string) int64 { return p.appCounters(app).pings.Load() }

// Prepares returns how many of the Exchanges began with a Parse message that names its statement: pgx
// preparing a statement for its cache, which it does once per statement and connection, in a round trip
// of its own before the statement's first use. A test of a client's round trips in steady state leaves
// them out, and bounds them apart. (A Parse of the unnamed statement, as a query sent with its
// description each time makes, is not one.)
func (p *Proxy) Prepares() int64 { return p.prepares.Load() }

// PreparesOf returns the Prepares of the connections whose start-up message named application app.
func (p *Proxy) PreparesOf(app string) int64 { return p.appCounters(app).prepares.Load() }

// counters are the counts of one application's connections.
type counters struct{ exchanges, pings, prepares atomic.Int64 }

// appCounters returns the counters of application app, making them on first use.
func (p *Proxy) appCounters(app string) *counters {
	p.appsMu.Lock()
	defer p.appsMu.Unlock()
	if p.apps == nil {
		p.apps = map[string]*counters{}
	}
	c, ok := p.apps[app]
	if !ok {
		c = &counters{}
		p.apps[app] = c
	}
	return c
}

// ResetExchanges sets the count of Exchanges back to zero.
func (p *Proxy) ResetExchanges() { p.exchanges.Store(0) }

// Conns returns how many connections are open through the proxy: accepted and not yet closed on both
// sides. A swallowed connection counts as long as either side keeps it open.
func (p *Proxy) Conns() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns)
}

// Close stops listening, closes every connection on both sides and waits for the proxy's goroutines. It
// is safe to call more than once.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	err := p.ln.Close()
	p.stopDials()
	for c := range p.conns {
		c.close()
	}
	p.mu.Unlock()
	p.wg.Wait()
	return err
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			// Out of file descriptors and the like: wait a little rather than spin.
			time.Sleep(10 * time.Millisecond)
			continue
		}
		c := &conn{p: p, client: client, done: make(chan struct{})}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			_ = client.Close()
			return
		}
		if p.swallowNew {
			c.state.Store(held)
		}
		// Registered before the target is dialled, so that Swallow reaches every connection accepted.
		p.conns[c] = struct{}{}
		p.wg.Add(1)
		p.mu.Unlock()
		go c.run()
	}
}

// conn is one connection through the proxy: the client's socket and the one to the target.
type conn struct {
	p         *Proxy
	client    net.Conn
	state     atomic.Int32
	last      atomic.Int32 // the direction bytes last passed in
	done      chan struct{}
	closeOnce sync.Once

	mu     sync.Mutex
	server net.Conn // nil until dialled

	// next is when the next piece toward the client may go under Trickle, used by that direction's one
	// writer only.
	next time.Time

	// The application the start-up message named (see learnApp), read by the client's direction only.
	startup []byte
	appDone bool
	app     atomic.Pointer[counters]
}

// run dials the target and copies both directions until both are over, then closes both sockets.
func (c *conn) run() {
	defer c.p.wg.Done()
	defer c.forget()
	var d net.Dialer
	ctx, cancel := context.WithTimeout(c.p.dialCtx, dialTimeout)
	server, err := d.DialContext(ctx, "tcp", c.p.cfg.Target)
	cancel()
	if err != nil {
		c.close()
		return
	}
	c.mu.Lock()
	c.server = server
	closed := c.isClosed()
	c.mu.Unlock()
	if closed { // Close came during the dial
		_ = server.Close()
		return
	}
	var wg sync.WaitGroup
	wg.Go(func() { c.pipe(c.client, server, toServer) })
	c.pipe(server, c.client, toClient)
	wg.Wait()
	c.close()
}

// forget removes c from the proxy's connections.
func (c *conn) forget() {
	c.p.mu.Lock()
	defer c.p.mu.Unlock()
	delete(c.p.conns, c)
}

func (c *conn) isClosed() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// close closes both sockets, which ends both directions.
func (c *conn) close() {
	c.closeOnce.Do(func() {
		close(c.done)
		_ = c.client.Close()
		c.mu.Lock()
		server := c.server
		c.mu.Unlock()
		if server != nil {
			_ = server.Close()
		}
	})
}

// setWriteDeadline sets the write deadline of both sockets.
func (c *conn) setWriteDeadline(t time.Time) {
	_ = c.client.SetWriteDeadline(t)
	c.mu.Lock()
	server := c.server
	c.mu.Unlock()
	if server != nil {
		_ = server.SetWriteDeadline(t)
	}
}

// failed ends the connection after a failed write, unless it is swallowed: then the write failed because
// Swallow gave up on it, and the connection stays open.
func (c *conn) failed() {
	if c.state.Load() == passing {
		c.close()
	}
}

// closeWrite passes the end of a stream on: a half-close where the socket has one, else a close.
func (c *conn) closeWrite(dst net.Conn) {
	if cw, ok := dst.(interface{ CloseWrite() error }); ok {
		if cw.CloseWrite() == nil {
			return
		}
	}
	c.close()
}

// ping is pgx's health check of a connection as it travels: a simple query of a comment.
var ping = append([]byte{'Q', 0, 0, 0, byte(4 + len("-- ping") + 1)}, "-- ping\x00"...)

// passing reports whether bytes b pass now in the direction dir, and counts an exchange when bytes toward
// the server follow bytes toward the client (or are the first), and a ping or a prepare when those bytes
// are one.
func (c *conn) passing(dir int32, b []byte) bool {
	if c.state.Load() != passing {
		return false
	}
	if prev := c.last.Swap(dir); dir == toServer && prev != toServer {
		app := c.app.Load()
		c.p.exchanges.Add(1)
		if app != nil {
			app.exchanges.Add(1)
		}
		switch {
		case bytes.Equal(b, ping):
			c.p.pings.Add(1)
			if app != nil {
				app.pings.Add(1)
			}
		case len(b) > 5 && b[0] == 'P' && b[5] != 0: // a Parse whose statement has a name
			c.p.prepares.Add(1)
			if app != nil {
				app.prepares.Add(1)
			}
		}
	}
	return true
}

// Codes of the requests a PostgreSQL client may send before its start-up message.
const (
	sslRequest    = 80877103
	gssencRequest = 80877104
)

// learnApp reads the application_name of the connection's start-up message from the first bytes the
// client sends (after an SSL or GSS request the server declined), so that its exchanges count for it too.
// It gives up after the start-up message, or once the bytes cannot be one (TLS).
func (c *conn) learnApp(b []byte) {
	if c.appDone {
		return
	}
	c.startup = append(c.startup, b...)
	for len(c.startup) >= 8 {
		n := int(binary.BigEndian.Uint32(c.startup))
		code := binary.BigEndian.Uint32(c.startup[4:])
		if n == 8 && (code == sslRequest || code == gssencRequest) {
			c.startup = c.startup[8:]
			continue
		}
		if n < 8 || n > 10000 {
			c.appDone, c.startup = true, nil // not a start-up message
			return
		}
		if len(c.startup) < n {
			return // the rest comes in the next read
		}
		fields := strings.Split(string(c.startup[8:n]), "\x00")
		app := ""
		for i := 0; i+1 < len(fields); i += 2 {
			if fields[i] == "application_name" {
				app = fields[i+1]
			}
		}
		c.app.Store(c.p.appCounters(app))
		c.appDone, c.startup = true, nil
		return
	}
}

// chunk is bytes read, due to be written at due; an empty chunk with eof set is the end of the stream.
type chunk struct {
	due time.Time
	buf *[]byte
	n   int
	eof bool
}

var buffers = sync.Pool{New: func() any {
	b := make([]byte, chunkSize)
	return &b
}}

// pipe copies src to dst in the direction dir until src ends or the connection is closed: at once
// without a delay, else through a queue to a writer that writes each chunk when it is due.
func (c *conn) pipe(src, dst net.Conn, dir int32) {
	delay := c.p.cfg.Delay
	var queue chan chunk
	var wg sync.WaitGroup
	if delay > 0 {
		queue = make(chan chunk, queueLen)
		wg.Go(func() { c.write(dst, queue, dir) })
		defer wg.Wait()
		defer close(queue)
	}
	for {
		buf := buffers.Get().(*[]byte)
		n, err := src.Read(*buf)
		if n > 0 && dir == toServer {
			c.learnApp((*buf)[:n])
		}
		if n > 0 && c.passing(dir, (*buf)[:n]) {
			if queue != nil {
				queue <- chunk{due: time.Now().Add(delay), buf: buf, n: n}
				buf = nil
			} else if werr := c.send(dst, (*buf)[:n], dir); werr != nil {
				c.failed()
			}
		}
		if buf != nil {
			buffers.Put(buf)
		}
		if err == nil {
			continue
		}
		switch {
		case c.state.Load() != passing:
			// A swallowed end is not passed on: the other side stays open, as behind a middlebox that
			// forgot the connection. Closing the proxy ends it.
		case errors.Is(err, io.EOF):
			if queue != nil {
				queue <- chunk{due: time.Now().Add(delay), eof: true}
			} else {
				c.closeWrite(dst)
			}
		default: // reset, or closed by the proxy
			c.close()
		}
		return
	}
}

// write writes the chunks of queue to dst, in the direction dir, each when it is due, until queue is
// closed. After a failed write or once the connection is closed it drops the rest, so that the reader
// never waits on it.
func (c *conn) write(dst net.Conn, queue <-chan chunk, dir int32) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	failed := false
	for ch := range queue {
		if wait := time.Until(ch.due); !failed && wait > coarse {
			// The runtime's timers may wake a millisecond late: most of a long wait on one, which Close
			// can cut short, the rest in preciseSleep.
			timer.Reset(wait - coarse)
			select {
			case <-timer.C:
			case <-c.done:
				failed = true
			}
		}
		if wait := time.Until(ch.due); !failed && wait > 0 {
			preciseSleep(wait)
		}
		// Bytes queued before a Swallow are dropped too: a forgotten connection delivers nothing more.
		if !failed && c.state.Load() == passing {
			if ch.eof {
				c.closeWrite(dst)
			} else if err := c.send(dst, (*ch.buf)[:ch.n], dir); err != nil {
				failed = true
				c.failed()
			}
		}
		if ch.buf != nil {
			buffers.Put(ch.buf)
		}
	}
}

// send writes b to dst, in the direction dir: at once, or toward the client under Trickle a piece at a
// time, each when the rate allows. What is left once the connection is swallowed or closed is dropped.
func (c *conn) send(dst net.Conn, b []byte, dir int32) error {
	for len(b) > 0 {
		piece := b
		if rate := c.p.trickle.Load(); rate > 0 && dir == toClient {
			piece = b[:min(int64(len(b)), max(1, rate/trickleSteps))]
			if !c.pace(len(piece), rate) {
				return nil
			}
		}
		if c.state.Load() != passing {
			return nil
		}
		n, err := dst.Write(piece)
		if dir == toClient {
			c.p.toClients.Add(int64(n))
		}
		if err != nil {
			return err
		}
		b = b[n:]
	}
	return nil
}

// pace waits until a piece of n bytes may go toward the client at rate bytes a second, and reports
// false when the connection was closed meanwhile. A link that stood idle saves no credit: the first
// piece after a pause goes at once, the next ones at the rate.
func (c *conn) pace(n int, rate int64) bool {
	now := time.Now()
	if c.next.Before(now) {
		c.next = now
	}
	wait := c.next.Sub(now)
	c.next = c.next.Add(time.Duration(int64(n) * int64(time.Second) / rate))
	if wait <= 0 {
		return true
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-c.done:
		return false
	}
}
