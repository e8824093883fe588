// Package redistest starts a throwaway Redis server for tests, from the redis-server binary installed on
// the machine (Debian: apt-get install redis-server). Nothing in it is meant for production.
//
// # Configuration
//
// The server runs with Redis's defaults except what a test must set: it listens on a free loopback port
// only, keeps nothing on disk (no RDB snapshots, no append-only file) in a directory of its own, and
// takes further directives from Config.Args, a password (requirepass) for instance.
//
// # Exiting without Stop
//
// The server is started with a parent-death signal, as package pgcluster starts PostgreSQL, so it does
// not outlive the test binary that started it.
package redistest

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

// ErrNotInstalled is returned by Start when no redis-server binary can be found.
var ErrNotInstalled = errors.New("no redis-server binary found (looked at PATH and /usr/bin); install it " +
	"(Debian: apt-get install redis-server)")

// Config configures Start.
type Config struct {
	// Args are further directives on the server's command line, each as redis-server takes them
	// ("--requirepass", "secret").
	Args []string
}

// Server is a running Redis server.
type Server struct {
	dir  string
	port int

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited <-chan struct{}
	out    bytes.Buffer
}

// Binary returns the path of the redis-server binary, or ErrNotInstalled.
func Binary() (string, error) {
	if p, err := exec.LookPath("redis-server"); err == nil {
		return p, nil
	}
	for _, p := range []string{"/usr/bin/redis-server", "/usr/local/bin/redis-server", "/usr/sbin/redis-server"} {
		if st, err := os.Stat(p); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", ErrNotInstalled
}

// Start starts a server on a free loopback port with its own directory and waits until it accepts
// connections.
func Start(ctx context.Context, cfg Config) (*Server, error) {
	bin, err := Binary()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "inorder-redis-")
	if err != nil {
		return nil, fmt.Errorf("redis: %w", err)
	}
	port, err := pgcluster.FreePort()
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	s := &Server{dir: dir, port: port}
	args := append([]string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--dir", dir, "--daemonize", "no", "--logfile", ""}, cfg.Args...)
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = &lockedWriter{s: s}, &lockedWriter{s: s}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	exited, err := pgcluster.StartTied(cmd)
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("start redis-server: %w", err)
	}
	s.cmd, s.exited = cmd, exited
	deadline := time.Now().Add(20 * time.Second)
	for {
		if s.ready() {
			return s, nil
		}
		select {
		case <-exited:
			os.RemoveAll(dir)
			return nil, fmt.Errorf("redis-server exited during start-up: %s", strings.TrimSpace(s.Output()))
		case <-ctx.Done():
			_ = s.Stop()
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			_ = s.Stop()
			return nil, fmt.Errorf("redis-server did not accept connections within 20s: %s", strings.TrimSpace(s.Output()))
		}
	}
}

// ready reports whether the server answers on its port (with PONG, or with NOAUTH when it wants a
// password: either way it serves).
func (s *Server) ready() bool {
	c, err := net.DialTimeout("tcp", s.Addr(), time.Second)
	if err != nil {
		return false
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return false
	}
	buf := make([]byte, 64)
	n, err := c.Read(buf)
	if err != nil {
		return false
	}
	reply := string(buf[:n])
	return strings.HasPrefix(reply, "+PONG") || strings.HasPrefix(reply, "-NOAUTH")
}

// StartT starts a server for t and stops it when t ends. It skips t when redis-server is not installed.
func StartT(t testing.TB, cfg Config) *Server {
	t.Helper()
	s, err := Start(context.Background(), cfg)
	if errors.Is(err, ErrNotInstalled) {
		t.Skip(err.Error())
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Stop() })
	return s
}

// Addr is the host:port the server listens on.
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// URL is a redis:// URL of the server, with no password.
func (s *Server) URL() string { return "redis://" + s.Addr() }

// Output returns what the server has logged so far.
func (s *Server) Output() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.out.String()
}

// Stop kills the server and removes its directory. It is safe to call more than once.
func (s *Server) Stop() error {
	s.mu.Lock()
	cmd, exited := s.cmd, s.exited
	s.cmd = nil
	s.mu.Unlock()
	if cmd != nil {
		_ = cmd.Process.Kill() // nothing on disk to keep
		<-exited
	}
	return os.RemoveAll(s.dir)
}

type lockedWriter struct{ s *Server }

func (w *lockedWriter) Write(p []byte) (int, error) {
	w.s.mu.Lock()
	defer w.s.mu.Unlock()
	return w.s.out.Write(p)
}
