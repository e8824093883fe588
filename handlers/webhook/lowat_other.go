//go:build !linux && !darwin

package webhook

import "syscall"

// notSentLowat does nothing where the system has no TCP_NOTSENT_LOWAT: a body's progress is then seen as
// the kernel's buffers take it, and the end of a big body may be silent for as long as they take to drain.
func notSentLowat(string, string, syscall.RawConn) error { return nil }
