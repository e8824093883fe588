package processor

import (
	"context"
	"fmt"
	"github.com/inorder-dev/inorder/internal/setting"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inorder-dev/inorder/migrations"
)

// listener is a Client's one connection LISTENing for the insert trigger's notifications, for every
// processor of the client that listens: a notification names its table, and wakes the processors that
// read it.
type listener struct {
	mu     sync.Mutex
	subs   map[*subscription]struct{}
	up     bool // LISTENing now: a new subscription is told at once
	cancel context.CancelFunc
	done   chan struct{}
}

// subscription is one processor's interest: table's notifications call wake; connected is told each time
// the listener (re)connects, lost each time it fails.
type subscription struct {
	table     string
	wake      func()
	connected func()
	lost      func(error)
}

// listen subscribes s until ctx is done, starting the client's listener with the first subscription and
// stopping it after the last.
func (c *Client) listen(ctx context.Context, s *subscription) {
	l := &c.listener
	l.mu.Lock()
	if l.subs == nil {
		l.subs = map[*subscription]struct{}{}
	}
	l.subs[s] = struct{}{}
	if l.cancel == nil {
		lctx, cancel := context.WithCancel(context.Background())
		l.cancel, l.done = cancel, make(chan struct{})
		go c.runListener(lctx, l.done)
	} else if l.up {
		go s.connected() // already listening: rows may have come before this processor subscribed
	}
	l.mu.Unlock()
	<-ctx.Done()
	l.mu.Lock()
	delete(l.subs, s)
	var stop context.CancelFunc
	var done chan struct{}
	if len(l.subs) == 0 {
		stop, done = l.cancel, l.done
		l.cancel, l.done = nil, nil
	}
	l.mu.Unlock()
	if stop != nil {
		stop()
		<-done
	}
}

// each calls f for every subscription (for table, unless empty), after setting up to say whether the
// listener is up (unless nil), so that a subscription comes either before the change or after it.
func (l *listener) each(table string, up *bool, f func(*subscription)) {
	l.mu.Lock()
	if up != nil {
		l.up = *up
	}
	subs := make([]*subscription, 0, len(l.subs))
	for s := range l.subs {
		if table == "" || s.table == table {
			subs = append(subs, s)
		}
	}
	l.mu.Unlock()
	for _, s := range subs {
		f(s)
	}
}

func (c *Client) runListener(ctx context.Context, done chan struct{}) {
	defer close(done)
	for attempt := 1; ctx.Err() == nil; attempt++ {
		err := c.listenOnce(ctx, func() { attempt = 0 })
		if ctx.Err() != nil {
			return
		}
		down := false
		c.listener.each("", &down, func(s *subscription) { s.lost(err) })
		if !sleep(ctx, backoff(max(attempt, 1), 100*time.Millisecond, setting.DefaultReconnectMax)) {
			return
		}
	}
}

func (c *Client) listenOnce(ctx context.Context, connected func()) error {
	// A session of its own, which LISTEN needs (Session refuses a pooler in transaction mode), named so
	// that status does not count it as an instance of a process.
	conn, err := c.shared.Session(ctx, "inorder-listen:@"+c.Instance())
	if err != nil {
		return fmt.Errorf("connect listener: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{migrations.NotifyChannel}.Sanitize()); err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	connected()
	up := true
	c.listener.each("", &up, func(s *subscription) { s.connected() })
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		c.listener.each(n.Payload, nil, func(s *subscription) { s.wake() })
	}
}
