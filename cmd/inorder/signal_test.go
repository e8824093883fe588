package main

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestRunExitsWith130OnASecondSignalDuringTheStop: the first SIGTERM begins a clean stop, which waits for
// the record in flight (a webhook that does not answer); a second signal during that stop ends the program
// at once with exit code 130, saying so.
func TestRunExitsWith130OnASecondSignalDuringTheStop(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.book(t, 1, "1")
	arrived := make(chan struct{}, 1)
	release := make(chan struct{})
	sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case arrived <- struct{}{}:
		default:
		}
		select { // a sink that does not answer until the test is over
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer sink.Close()
	defer close(release)
	p := startBinary(t, b.env, runArgs("--handler", "webhook", "--webhook-url", sink.URL, "--webhook-signature", "none",
		"--handler-timeout", "10s", "--webhook-timeout", "8s", "--shutdown-timeout", "30s")...)
	select {
	case <-arrived:
	case <-p.done:
		t.Fatalf("inorder exited; logs:\n%s", p.logs())
	case <-time.After(30 * time.Second):
		t.Fatalf("the record did not reach the sink; logs:\n%s", p.logs())
	}

	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	require.Eventually(t, func() bool {
		return strings.Contains(logLine(p.logs(), "stopping: finishing the records in flight"), `"signal":"terminated"`)
	}, 20*time.Second, 5*time.Millisecond, "waiting for the stop to begin")
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGINT))
	require.Equal(t, 130, p.wait(t), p.logs())
	require.Contains(t, logLine(p.logs(), "second signal: exiting at once"), `"signal":"interrupt"`, p.logs())
	require.NotContains(t, p.logs(), "cursor released", "the program ended at once, not after the record in flight")
}

// logLine returns the first line of logs whose message is message, or "".
func logLine(logs, message string) string {
	for _, line := range strings.Split(logs, "\n") {
		if strings.Contains(line, `"message":"`+message+`"`) {
			return line
		}
	}
	return ""
}
