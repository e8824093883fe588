// Package setting holds the defaults of the library's settings: what the zero value of each field of
// processor.Config and processor.ClientConfig takes (and of the other settings the CLI has a flag for),
// and what the CLI's flags default to. The fields' documentation says each value; the constants live here
// so that the library and the CLI read one number, without making them part of the library's API.
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

// The defaults of handlers/pubsub.Config.
const (
	// DefaultPubSubMaxInFlight is the number of records published but not yet acknowledged that a handler
	// allows when Config.MaxInFlight is zero.
	DefaultPubSubMaxInFlight = 100
	// DefaultPubSubMaxMessageBytes is the largest message a handler publishes when Config.MaxMessageBytes
	// is zero: Pub/Sub's 10 MB request limit less 100 kB of headroom for the request's own framing.
	DefaultPubSubMaxMessageBytes = 10_000_000 - 100_000
)

// DefaultLockTimeout is how long a migration waits for a table lock at each attempt (lock_timeout),
// when migrations.Options.LockTimeout or migrations.ClockOpts.LockTimeout is zero. A migration that alters
// inorder.cursor needs its ACCESS EXCLUSIVE lock, and while it waits for one (a pg_dump holds ACCESS SHARE
// on every table it dumps, for the dump's whole length) every other statement on the table queues behind
// it: every running processor stalls. So a wait is cut short at this, well below a processor's default
// database timeout (5s), after which it would count its connection as dead.
const DefaultLockTimeout = 2 * time.Second

// DefaultPruneBatch is the number of rows a prune batch deletes when cursor.PruneOpts.BatchSize is zero.
const DefaultPruneBatch = 1000
