package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inorder-dev/inorder/cursor"
)

// TestStatusAndTheLibraryAgreeOnAStream: `inorder status` and cursor.List, as a service's admin endpoint
// serves it, say the same state of one stream while a record is in flight (running), once it has caught
// up (idle: List used to say running there), and once it stopped (not running).
func TestStatusAndTheLibraryAgreeOnAStream(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.book(t, 3, "1")
	holding := make(chan struct{}) // closed once the receiver holds record 2
	release := make(chan struct{})
	var once sync.Once
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body struct{ ID string }
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		if body.ID == "2" {
			once.Do(func() { close(holding) })
			<-release
		}
	}))
	t.Cleanup(srv.Close)
	env := append(append([]string{}, b.env...), "INORDER_TEST_SECRET=s3cret")
	p := startBinary(t, env, runArgs("--handler", "webhook", "--webhook-url", srv.URL,
		"--webhook-secret-env", "INORDER_TEST_SECRET")...)

	states := func() (cli, library string) {
		t.Helper()
		code, stdout, stderr := runBinary(t, b.env, "status", "--json", "--process", "booking_sms")
		require.Zero(t, code, stderr)
		var rep statusDoc
		require.NoError(t, json.Unmarshal([]byte(stdout), &rep), stdout)
		require.Len(t, rep.Processes, 1)
		infos, err := cursor.List(context.Background(), b.db.Pool, "booking_sms")
		require.NoError(t, err)
		require.Len(t, infos, 1)
		enc, err := json.Marshal(infos[0])
		require.NoError(t, err)
		var served processDoc
		require.NoError(t, json.Unmarshal(enc, &served))
		require.Equal(t, string(infos[0].Status), served.State, "cursor.Info encodes its Status as the state")
		return rep.Processes[0].State, served.State
	}

	select {
	case <-holding:
	case <-p.done:
		t.Fatalf("inorder run exited: %s", p.logs())
	}
	cli, library := states()
	require.Equal(t, "running", cli, "record 2 in flight, record 3 behind")
	require.Equal(t, cli, library)

	close(release)
	require.Eventually(t, func() bool { return b.position(t) == "3" }, 20*time.Second, 5*time.Millisecond, p.logs())
	cli, library = states()
	require.Equal(t, "idle", cli, "caught up")
	require.Equal(t, cli, library, "a caught-up stream is idle to the library too")

	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	require.Zero(t, p.wait(t), p.logs())
	cli, library = states()
	require.Equal(t, "not running", cli)
	require.Equal(t, cli, library)
}
