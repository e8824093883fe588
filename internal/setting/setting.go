// Package setting holds the defaults of the processor's settings: what the zero value of each field of
// processor.Config and processor.ClientConfig takes, and what the CLI's flags default to. The fields'
// documentation says each value; the constants live here so that the library and the CLI read one
// number, without making them part of the library's API.
package setting

import (
	"time"

	"github.com/inorder-dev/inorder/internal/dial"
)

// The defaults of processor.Config and processor.ClientConfig.
const (
	DefaultBatchSize                = 100
	DefaultMaxBatchSize             = 4000
	DefaultBatchBytes               = 8 << 20
	DefaultDatabaseTimeout          = dial.DefaultTimeout
	DefaultPollInterval             = 200 * time.Millisecond
	DefaultProbeInterval            = 25 * time.Millisecond
	DefaultInsertLatency            = 5 * time.Millisecond
	DefaultRetryMin                 = time.Second
	DefaultRetryMax                 = time.Minute
	DefaultHaltAfter                = 5 * time.Minute
	DefaultIdleInTransactionTimeout = 60 * time.Second
	DefaultLease                    = 30 * time.Second
	DefaultShutdownTimeout          = 15 * time.Second
	DefaultHoldWarnAfter            = time.Minute
	DefaultReconnectMax             = 30 * time.Second
	// DefaultMaxConns is the ClientConfig.MaxConns that zero means: a session for the ownership locks and
	// three connections to work on, for any number of processes.
	DefaultMaxConns = 4
)

// DefaultHandlerTimeout is the HandlerTimeout that a zero value means for the given idle-in-transaction
// timeout and lease (their defaults when zero): the smaller of half the one and a third of the other.
func DefaultHandlerTimeout(idleInTransaction, lease time.Duration) time.Duration {
	if idleInTransaction <= 0 {
		idleInTransaction = DefaultIdleInTransactionTimeout
	}
	if lease <= 0 {
		lease = DefaultLease
	}
	return min(idleInTransaction/2, lease/3)
}
