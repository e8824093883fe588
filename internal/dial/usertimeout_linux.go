package dial

import (
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// userTimeout sets TCP_USER_TIMEOUT on the socket: data left unacknowledged for longer than d ends the
// connection, and so does a keepalive that goes unanswered past d.
func userTimeout(d time.Duration) func(network, address string, c syscall.RawConn) error {
	ms := int(d / time.Millisecond)
	return func(network, _ string, c syscall.RawConn) error {
		if network != "tcp" && network != "tcp4" && network != "tcp6" {
			return nil
		}
		var serr error
		if err := c.Control(func(fd uintptr) {
			serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT, ms)
		}); err != nil {
			return err
		}
		return serr
	}
}
