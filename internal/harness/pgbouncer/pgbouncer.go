// Package pgbouncer starts a throwaway PgBouncer in front of a PostgreSQL server, from the pgbouncer
// binary installed on the machine (Debian: apt-get install pgbouncer), for the tests that check what
// inorder does behind a pooler. Nothing in it is meant for production.
//
// # Configuration
//
// The pooler runs with PgBouncer's defaults except what a test must set: the pool mode, the address it
// listens on and the server it forwards to, client authentication (trust, on loopback), and a pool small
// enough that clients share server connections. In particular ignore_startup_parameters is left empty, as
// it is in a fresh installation, so a client that sends a start-up parameter PgBouncer does not know is
// refused, as in production.
//
// # Exiting without Stop
//
// PgBouncer is started with a parent-death signal, as package pgcluster starts the server, so it does not
// outlive the test binary that started it.
package pgbouncer

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/inorder-dev/inorder/internal/harness/pgcluster"
)

// ErrNotInstalled is returned by Start when no pgbouncer binary can be found.
var ErrNotInstalled = errors.New("no pgbouncer binary found (looked at PATH and /usr/sbin); install it " +
	"(Debian: apt-get install pgbouncer)")

// Mode is PgBouncer's pool_mode.
type Mode string

// The pool modes inorder is tested in.
const (
	// Session pooling: a client keeps one server connection from connect to disconnect.
	Session Mode = "session"
	// Transaction pooling: a client has a server connection only for the length of a transaction, and
	// server connections go from client to client between transactions.
	Transaction Mode = "transaction"
)

// Config configures Start.
type Config struct {
	// Mode is the pool mode. Required.
	Mode Mode
	// Host and Port are the PostgreSQL server to forward to. Required.
	Host string
	Port int
	// User and Password log in to the server; empty User means "postgres".
	User, Password string
	// PoolSize is default_pool_size: server connections per database and user. Zero means 4, few enough
	// that clients share them.
	PoolSize int
	// Settings are further [pgbouncer] settings, written after the ones above.
	Settings map[string]string
}

// Bouncer is a running PgBouncer.
type Bouncer struct {
	dir  string
	port int
	cfg  Config

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited <-chan struct{}
	out    bytes.Buffer
}

// Binary returns the path of the pgbouncer binary, or ErrNotInstalled.
func Binary() (string, error) {
	if p, err := exec.LookPath("pgbouncer"); err == nil {
		return p, nil
	}
	for _, p := range []string{"/usr/sbin/pgbouncer", "/usr/local/sbin/pgbouncer", "/usr/local/bin/pgbouncer"} {
		if st, err := os.Stat(p); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", ErrNotInstalled
}

// Start writes a configuration into a temporary directory and starts PgBouncer on a free loopback port,
// waiting until it accepts connections. When running as root it runs as the `postgres` user, since
// PgBouncer refuses to run as root.
func Start(ctx context.Context, cfg Config) (*Bouncer, error) {
	bin, err := Binary()
	if err != nil {
		return nil, err
	}
	if cfg.Mode == "" || cfg.Host == "" || cfg.Port == 0 {
		return nil, errors.New("pgbouncer: Config.Mode, Host and Port are required")
	}
	if cfg.User == "" {
		cfg.User = "postgres"
	}
	if cfg.PoolSize <= 0 {
		cfg.PoolSize = 4
	}
	dir, err := os.MkdirTemp("", "inorder-pgbouncer-")
	if err != nil {
		return nil, fmt.Errorf("pgbouncer: %w", err)
	}
	cred, err := pgcluster.ServerCredential()
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("pgbouncer refuses to run as root: %w", err)
	}
	if cred != nil {
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			os.RemoveAll(dir)
			return nil, fmt.Errorf("pgbouncer: %w", err)
		}
	}
	port, err := pgcluster.FreePort()
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	b := &Bouncer{dir: dir, port: port, cfg: cfg}
	if err := b.writeConfig(cred); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	cmd := exec.Command(bin, filepath.Join(dir, "pgbouncer.ini"))
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = &lockedWriter{b: b}, &lockedWriter{b: b}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Setpgid: true, Pdeathsig: syscall.SIGKILL}
	exited, err := pgcluster.StartTied(cmd)
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("start pgbouncer: %w", err)
	}
	b.cmd, b.exited = cmd, exited
	deadline := time.Now().Add(20 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", b.Addr(), time.Second)
		if err == nil {
			c.Close()
			return b, nil
		}
		select {
		case <-exited:
			os.RemoveAll(dir)
			return nil, fmt.Errorf("pgbouncer exited during start-up: %s", strings.TrimSpace(b.Output()))
		case <-ctx.Done():
			_ = b.Stop()
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			_ = b.Stop()
			return nil, fmt.Errorf("pgbouncer did not accept connections within 20s: %s", strings.TrimSpace(b.Output()))
		}
	}
}

func (b *Bouncer) writeConfig(cred *syscall.Credential) error {
	target := fmt.Sprintf("host=%s port=%d user=%s", b.cfg.Host, b.cfg.Port, b.cfg.User)
	if b.cfg.Password != "" {
		target += " password=" + b.cfg.Password
	}
	settings := map[string]string{
		"listen_addr":       "127.0.0.1",
		"listen_port":       strconv.Itoa(b.port),
		"unix_socket_dir":   "",
		"auth_type":         "trust",
		"auth_file":         filepath.Join(b.dir, "users.txt"),
		"pool_mode":         string(b.cfg.Mode),
		"default_pool_size": strconv.Itoa(b.cfg.PoolSize),
		"max_client_conn":   "500",
		"pidfile":           filepath.Join(b.dir, "pgbouncer.pid"),
	}
	maps.Copy(settings, b.cfg.Settings)
	var ini strings.Builder
	fmt.Fprintf(&ini, "[databases]\n* = %s\n\n[pgbouncer]\n", target)
	for _, k := range slices.Sorted(maps.Keys(settings)) {
		fmt.Fprintf(&ini, "%s = %s\n", k, settings[k])
	}
	files := map[string]string{
		"pgbouncer.ini": ini.String(),
		"users.txt":     fmt.Sprintf("%q %q\n", b.cfg.User, ""),
	}
	for name, body := range files {
		p := filepath.Join(b.dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			return fmt.Errorf("pgbouncer: %w", err)
		}
		if cred != nil {
			if err := os.Chown(p, int(cred.Uid), int(cred.Gid)); err != nil {
				return fmt.Errorf("pgbouncer: %w", err)
			}
		}
	}
	return nil
}

// Addr is the host:port PgBouncer listens on.
func (b *Bouncer) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(b.port)) }

// URL returns a URL that connects to database db through the pooler as the configured user, with query
// (for example "default_query_exec_mode=exec") appended when not empty.
func (b *Bouncer) URL(db, query string) string {
	u := fmt.Sprintf("postgres://%s@%s/%s?sslmode=disable", b.cfg.User, b.Addr(), db)
	if query != "" {
		u += "&" + query
	}
	return u
}

// Output returns what PgBouncer has logged so far.
func (b *Bouncer) Output() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.out.String()
}

// Stop stops PgBouncer and removes its directory. It is safe to call more than once.
func (b *Bouncer) Stop() error {
	b.mu.Lock()
	cmd, exited := b.cmd, b.exited
	b.cmd = nil
	b.mu.Unlock()
	if cmd != nil {
		_ = cmd.Process.Signal(syscall.SIGINT) // shut down at once
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	}
	return os.RemoveAll(b.dir)
}

type lockedWriter struct{ b *Bouncer }

func (w *lockedWriter) Write(p []byte) (int, error) {
	w.b.mu.Lock()
	defer w.b.mu.Unlock()
	return w.b.out.Write(p)
}
