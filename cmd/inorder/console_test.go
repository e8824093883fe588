package main

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestConsoleRefusesAnOpenAddressWithoutAToken(t *testing.T) {
	t.Parallel()
	b := setup(t)
	code, _, stderr := runBinary(t, b.env, "console", "--addr", ":0")
	require.Equal(t, 2, code)
	require.Equal(t, 1, strings.Count(stderr, "\n"), stderr)
	require.Contains(t, stderr, `inorder console: --addr: console: an address other than loopback needs a token: ":0" listens beyond this machine`)
}

// TestConsoleAddressesWithoutAToken: without a token, only a loopback address is served.
func TestConsoleAddressesWithoutAToken(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		addr string
		ok   bool
	}{{"127.0.0.1:8080", true}, {"localhost:8080", true}, {"[::1]:8080", true}, {":8080", false}, {"0.0.0.0:8080", false}, {"10.0.0.5:8080", false}} {
		err := checkAddr(tc.addr, "")
		require.Equal(t, tc.ok, err == nil, "%s: %v", tc.addr, err)
		require.NoError(t, checkAddr(tc.addr, "console-topsecret-0123456789abcdef"), "with a token, any address")
	}
	require.ErrorContains(t, checkAddr("8080", ""), `console: address "8080"`)
}

func TestConsoleServesWithItsToken(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const tok = "console-topsecret-0123456789abcdef"
	p := startBinary(t, append([]string{"INORDER_CONSOLE_TOKEN=" + tok}, b.env...), "console", "--addr", "127.0.0.1:0", "--log-level", "info")
	var addr string
	require.Eventually(t, func() bool {
		for _, l := range strings.Split(p.logs(), "\n") {
			var e struct {
				Addr, Message string
			}
			if json.Unmarshal([]byte(l), &e) == nil && e.Message == "serving the console" {
				addr = e.Addr
			}
		}
		return addr != ""
	}, 20*time.Second, 10*time.Millisecond, "the console starts; logs:\n%s", p.logs())
	require.NotContains(t, p.logs(), tok)

	get := func(auth string) (int, string) {
		req, err := http.NewRequest(http.MethodGet, "http://"+addr+"/", nil)
		require.NoError(t, err)
		if auth != "" {
			req.Header.Set("Authorization", "Bearer "+auth)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, string(body)
	}
	code, _ := get("")
	require.Equal(t, http.StatusUnauthorized, code)
	code, body := get(tok)
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, "Processes")
	require.NotContains(t, body, "<form", "read-only without --allow-actions")

	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	require.Equal(t, 0, p.wait(t), p.logs())
}
