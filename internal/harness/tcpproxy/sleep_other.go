//go:build !linux

package tcpproxy

import "time"

// preciseSleep sleeps for d. Elsewhere than on Linux it is time.Sleep, whose timers may wake up to a
// millisecond late.
func preciseSleep(d time.Duration) { time.Sleep(d) }
