package tcpproxy

import (
	"runtime"
	"syscall"
	"time"
)

// preciseSleep sleeps for d in nanosleep(2), which keeps to the kernel's high-resolution timers, where the
// runtime's timers may wake a millisecond late. The thread's timer slack (50µs by default) is set to 1ns
// first: a slack is per thread, and a lower one only makes the thread's sleeps end closer to their due.
func preciseSleep(d time.Duration) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	_, _, _ = syscall.RawSyscall(syscall.SYS_PRCTL, 29 /* PR_SET_TIMERSLACK */, 1, 0)
	ts := syscall.NsecToTimespec(int64(d))
	for {
		var left syscall.Timespec
		if err := syscall.Nanosleep(&ts, &left); err != syscall.EINTR {
			return
		}
		ts = left
	}
}
