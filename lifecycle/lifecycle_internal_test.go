package lifecycle

import (
	"os"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestConfigDefaults(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name        string
		cfg         Config
		wantSignals []os.Signal
	}{
		{name: "zero", cfg: Config{}, wantSignals: []os.Signal{syscall.SIGINT, syscall.SIGTERM}},
		// signal.Notify relays every signal when given none: an empty list must not reach it.
		{name: "empty signals", cfg: Config{Signals: []os.Signal{}}, wantSignals: []os.Signal{syscall.SIGINT, syscall.SIGTERM}},
		{name: "given signals", cfg: Config{Signals: []os.Signal{syscall.SIGUSR1}}, wantSignals: []os.Signal{syscall.SIGUSR1}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.wantSignals, tt.cfg.signals())
			require.Equal(t, tt.wantSignals, New(tt.cfg).cfg.signals(), "New keeps cfg as given")
		})
	}
	t.Run("ExitFunc given", func(t *testing.T) {
		t.Parallel()
		var got []int
		cfg := Config{ExitFunc: func(code int) { got = append(got, code) }}
		cfg.exit(130)
		require.Equal(t, []int{130}, got)
	})
}
