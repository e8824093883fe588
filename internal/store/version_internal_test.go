package store

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The major version is read from the server_version a server reports at start-up, whatever its packager
// appends.
func TestServerMajor(t *testing.T) {
	t.Parallel()
	for v, want := range map[string]int{
		"14.23": 14, "15.18 (Debian 15.18-0+deb12u1)": 15, "17.10": 17, "18.4": 18, "18beta1": 18,
		"9.6.24": 9, "": 0, "devel": 0,
	} {
		require.Equal(t, want, serverMajor(v), v)
	}
}

// Every lock statement has a form for servers with transaction_timeout that turns it off for the
// transaction, beside the idle-in-transaction timeout; the form for older servers never names it.
func TestLockStatementTurnsTransactionTimeoutOff(t *testing.T) {
	t.Parallel()
	for _, cfg := range []Config{{}, {SynchronousCommit: true}, {Transactional: true}, {Shared: &Shared{}}} {
		sql, _ := lockStatement(cfg, "inorder:p@i")
		require.NotContains(t, sql, "transaction_timeout'")
		require.Equal(t, 1, strings.Count(withoutTransactionTimeout(sql), "set_config('transaction_timeout', '0', true)"), sql)
	}
}
