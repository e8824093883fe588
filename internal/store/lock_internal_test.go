package store

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestLockStatementSetsSynchronousCommit: the cursor transactions of a plain handler commit without
// waiting for their flush unless SynchronousCommit; a transactional handler's always wait.
func TestLockStatementSetsSynchronousCommit(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		cfg  Config
		off  bool
	}{
		{name: "default", cfg: Config{}, off: true},
		{name: "SynchronousCommit", cfg: Config{SynchronousCommit: true}},
		{name: "Transactional", cfg: Config{Transactional: true}},
		{name: "both", cfg: Config{Transactional: true, SynchronousCommit: true}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			sql, _ := lockStatement(tt.cfg, "")
			require.Equal(t, tt.off, strings.Contains(sql, "set_config('synchronous_commit', 'off', true)"), sql)
		})
	}
}
