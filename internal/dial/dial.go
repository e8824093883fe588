// Package dial gives inorder's database connections deadlines of their own, so that a connection that a
// NAT or a load balancer forgot is noticed in seconds instead of the kernel's quarter of an hour.
//
// # Why a deadline is not enough alone
//
// A request that is sent on a dead path waits unanswered: TCP keepalives do not fire while sent data is
// unacknowledged, and the kernel gives up only after its retransmissions (about 15 minutes on Linux). So
// every exchange inorder makes carries a context deadline (see the packages that use Timeout), and the
// socket is told the same bound where the system allows (TCP_USER_TIMEOUT on Linux): unacknowledged data
// older than it ends the connection, and keepalives probe an idle one after a few seconds. A connection's
// start-up (TCP, TLS, authentication) is bounded by the same timeout, so a path that accepts TCP but never
// answers the server's start-up is given up too.
//
// # A deadline that measures progress
//
// A fixed deadline cannot tell a dead path from a slow answer: a read of a batch of big rows (a hundred
// rows of a megabyte, or one of 200 MB) that is still receiving bytes when the deadline passes would be cut
// off, counted as a dead connection, and read again, to be cut off again, forever on a slow link. So the
// bound of an exchange is a silence rather than a length: Bounded cuts an exchange off once the timeout
// has passed with no byte received since it began, which still notices a dead path within the timeout of
// its last byte, and lets an answer that keeps arriving, however slowly, finish.
package dial

import (
	"context"
	"net"
	"time"

	"github.com/jackc/pgx/v5"
)

// DefaultTimeout is the bound used when none is given: far above what inorder's own statements take (a
// read of one batch, a poll of pg_locks, a commit), and short enough that a dead connection is replaced
// within seconds.
const DefaultTimeout = 5 * time.Second

// Configure sets cc's dialer and connect timeout for timeout (zero means DefaultTimeout): the start-up
// must end within it, idle connections are probed by keepalives after a fraction of it, and, where the
// system has it, unacknowledged data older than it ends the connection. A ConnectTimeout already set on cc
// (connect_timeout in the URL) that is shorter stays. The connections dialled are Conns, which record when
// bytes last came, for Bounded.
func Configure(cc *pgx.ConnConfig, timeout time.Duration) {
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	if cc.ConnectTimeout == 0 || cc.ConnectTimeout > timeout {
		cc.ConnectTimeout = timeout
	}
	idle := max(time.Second, timeout)
	d := &net.Dialer{
		Timeout: cc.ConnectTimeout,
		KeepAliveConfig: net.KeepAliveConfig{
			Enable: true, Idle: idle, Interval: max(time.Second, idle/3), Count: 3,
		},
		Control: userTimeout(timeout),
	}
	cc.DialFunc = func(ctx context.Context, network, address string) (net.Conn, error) {
		c, err := d.DialContext(ctx, network, address)
		if err != nil {
			return nil, err
		}
		return &Conn{Conn: c}, nil
	}
}
