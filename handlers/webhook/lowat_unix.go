//go:build linux || darwin

package webhook

import (
	"syscall"

	"golang.org/x/sys/unix"
)

// notSentLowat sets TCP_NOTSENT_LOWAT on the socket of a connection the default client dials: the
// connection queues at most unsentBytes bytes that it has not sent yet, where without it the kernel takes up
// to megabytes of a body at once. So the transport reads a body as the network takes it, and its progress
// (see request) is the network's, not the time to fill a buffer. The bytes in flight, and those in the
// receiver's buffers, are still not seen: the timeout must leave them the time to drain. It bounds only
// what waits to be sent, not what is in flight, so throughput is what it was.
func notSentLowat(network, _ string, c syscall.RawConn) error {
	if network != "tcp" && network != "tcp4" && network != "tcp6" {
		return nil
	}
	var serr error
	if err := c.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_NOTSENT_LOWAT, unsentBytes)
	}); err != nil {
		return err
	}
	return serr
}
