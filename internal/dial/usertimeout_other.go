//go:build !linux

package dial

import (
	"syscall"
	"time"
)

// userTimeout does nothing where the system has no TCP_USER_TIMEOUT: the context deadlines and the
// keepalives bound a dead connection there.
func userTimeout(time.Duration) func(network, address string, c syscall.RawConn) error { return nil }
