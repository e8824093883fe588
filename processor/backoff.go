package processor

import (
	"math/rand/v2"
	"time"
)

// backoff returns the wait before attempt n+1 after n failures: min doubled per failure, capped at max,
// with up to 20% jitter subtracted so that instances retrying the same stream do not move in lockstep.
func backoff(failures int, min, max time.Duration) time.Duration {
	if failures < 1 {
		return 0
	}
	d := min
	for i := 1; i < failures && d < max; i++ {
		d *= 2
	}
	if d > max {
		d = max
	}
	return d - time.Duration(rand.Int64N(int64(d)/5+1))
}
