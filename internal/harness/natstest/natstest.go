// Package natstest starts a throwaway NATS server with JetStream, from the nats-server binary installed
// on the machine (Debian: apt-get install nats-server), for the tests of the JetStream sink. Nothing in it
// is meant for production.
//
// # Configuration
//
// The server runs with its defaults except what a test must set: JetStream on (-js) with its store in a
// directory of its own (-sd), listening on a free loopback port (-a 127.0.0.1 -p). It has no
// authentication and no streams: a test adds the streams it needs.
//
// # Exiting without Stop
//
// The server is started with a parent-death signal, as package pgcluster starts PostgreSQL, so it does
// not outlive the test binary that started it.
package natstest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/inorder-dev/inorder/internal/harness/pgcluster"
)

// ErrNotInstalled is returned by Start when no nats-server binary can be found.
var ErrNotInstalled = errors.New("no nats-server binary found (looked at PATH and /usr/sbin); install it " +
	"(Debian: apt-get install nats-server)")

// Binary returns the path of the nats-server binary, or ErrNotInstalled.
func Binary() (string, error) {
	if p, err := exec.LookPath("nats-server"); err == nil {
		return p, nil
	}
	for _, p := range []string{"/usr/sbin/nats-server", "/usr/local/sbin/nats-server", "/usr/local/bin/nats-server"} {
		if st, err := os.Stat(p); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", ErrNotInstalled
}

// Server is a running nats-server.
type Server struct {
	port int

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited <-chan struct{}
	out    bytes.Buffer
}

// readyLine is what nats-server logs once it accepts clients, JetStream included.
const readyLine = "Server is ready"

// Start starts nats-server with JetStream, its store in dir (which must exist), on a free loopback port,
// and waits until it is ready.
func Start(ctx context.Context, dir string) (*Server, error) {
	bin, err := Binary()
	if err != nil {
		return nil, err
	}
	port, err := pgcluster.FreePort()
	if err != nil {
		return nil, err
	}
	s := &Server{port: port}
	cmd := exec.Command(bin, "-js", "-sd", dir, "-a", "127.0.0.1", "-p", strconv.Itoa(port))
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = &lockedWriter{s: s}, &lockedWriter{s: s}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	exited, err := pgcluster.StartTied(cmd)
	if err != nil {
		return nil, fmt.Errorf("start nats-server: %w", err)
	}
	s.cmd, s.exited = cmd, exited
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(s.Output(), readyLine) {
		select {
		case <-exited:
			return nil, fmt.Errorf("nats-server exited during start-up: %s", strings.TrimSpace(s.Output()))
		case <-ctx.Done():
			_ = s.Stop()
			return nil, ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			_ = s.Stop()
			return nil, fmt.Errorf("nats-server was not ready within 20s: %s", strings.TrimSpace(s.Output()))
		}
	}
	return s, nil
}

// New starts a server for tb with its store under tb.TempDir() and stops it at cleanup. It skips the
// test when nats-server is not installed.
func New(tb testing.TB) *Server {
	tb.Helper()
	if _, err := Binary(); err != nil {
		tb.Skip(err.Error())
	}
	s, err := Start(context.Background(), tb.TempDir())
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = s.Stop() })
	return s
}

// Addr is the host:port the server listens on.
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// URL is the URL clients connect to.
func (s *Server) URL() string { return "nats://" + s.Addr() }

// Output returns what the server has logged so far.
func (s *Server) Output() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.out.String()
}

// Stop stops the server. It is safe to call more than once. The store is the caller's to remove.
func (s *Server) Stop() error {
	s.mu.Lock()
	cmd, exited := s.cmd, s.exited
	s.cmd = nil
	s.mu.Unlock()
	if cmd == nil {
		return nil
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		<-exited
	}
	return nil
}

type lockedWriter struct{ s *Server }

func (w *lockedWriter) Write(p []byte) (int, error) {
	w.s.mu.Lock()
	defer w.s.mu.Unlock()
	return w.s.out.Write(p)
}
