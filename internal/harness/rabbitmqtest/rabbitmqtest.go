// Package rabbitmqtest starts a throwaway RabbitMQ node for tests, from the rabbitmq-server package
// installed on the machine (Debian: apt-get install rabbitmq-server). Nothing in it is meant for
// production.
//
// # The node
//
// A node takes several seconds to boot (Erlang, then the broker's own start-up), so tests share one node
// per test binary: Shared starts it the first time a test asks and hands the same node to every test
// after, which keeps apart by the names it gives its exchanges and queues. Start starts a node of one's
// own, for a test that must restart or stop it.
//
// Each node has its own directory under the system's temporary directory: its data (RABBITMQ_MNESIA_BASE),
// its logs, its configuration, and its HOME, where Erlang writes the node's own cookie. It listens for AMQP
// on a free loopback port, with a node name, a distribution port and an epmd port of its own, so nodes of
// tests running at once do not meet, and with no plugin enabled (no management interface). The default
// user guest/guest may connect, from loopback only, as in a fresh installation.
//
// # Exiting without Stop
//
// The node runs under a small shell that the test binary starts with a parent-death signal: when the
// binary exits, however it exits, the shell kills the node, stops its epmd and removes the directory.
// Stop does the same at once.
package rabbitmqtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/inorder-dev/inorder/internal/harness/pgcluster"
)

// ErrNotInstalled is returned by Start when the rabbitmq-server script cannot be found.
var ErrNotInstalled = errors.New("no rabbitmq-server found (looked at /usr/lib/rabbitmq/bin and PATH); install it " +
	"(Debian: apt-get install rabbitmq-server)")

// startTimeout bounds a node's boot.
const startTimeout = 60 * time.Second

// Config configures Start.
type Config struct {
	// MaxMessageSize is the node's max_message_size in bytes: a larger message closes the channel it was
	// published on. Zero means 1 MiB, small enough for a test to exceed it cheaply.
	MaxMessageSize int
}

// Node is a running RabbitMQ node.
type Node struct {
	dir  string
	port int

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited <-chan struct{}
	out    bytes.Buffer
}

// Binary returns the path of the rabbitmq-server script, or ErrNotInstalled.
func Binary() (string, error) {
	for _, p := range []string{"/usr/lib/rabbitmq/bin/rabbitmq-server", "/usr/local/lib/rabbitmq/bin/rabbitmq-server"} {
		if st, err := os.Stat(p); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	if p, err := exec.LookPath("rabbitmq-server"); err == nil {
		return p, nil
	}
	return "", ErrNotInstalled
}

// supervisor runs the node (the rabbitmq-server script execs erl, so $pid is the node itself) and, when
// it is told to stop or its parent dies (SIGTERM), kills it, stops its epmd and removes its directory.
const supervisor = `
detached=1 "$RMQ_SERVER" & pid=$!
cleanup() {
	kill -KILL "$pid" 2>/dev/null
	wait "$pid" 2>/dev/null
	epmd -port "$ERL_EPMD_PORT" -kill >/dev/null 2>&1
	rm -rf "$RMQ_DIR"
}
trap 'cleanup; exit 0' TERM INT
wait "$pid"
code=$?
cleanup
exit $code
`

// errPortTaken says that another process bound one of the node's ports between their choice and the
// node's start.
var errPortTaken = errors.New("a port of the node was taken meanwhile")

// Start starts a node in a new directory and waits until it accepts AMQP connections. Its ports are
// chosen free and bound by the node a moment later; when another process takes one in between (the
// tests of other packages run at the same time), the node is started again on others.
func Start(ctx context.Context, cfg Config) (*Node, error) {
	bin, err := Binary()
	if err != nil {
		return nil, err
	}
	if cfg.MaxMessageSize <= 0 {
		cfg.MaxMessageSize = 1 << 20
	}
	for attempt := 1; ; attempt++ {
		n, err := launch(bin, cfg)
		if err == nil {
			err = n.await(ctx)
		}
		if err == nil {
			return n, nil
		}
		if attempt == 3 || !errors.Is(err, errPortTaken) {
			return nil, err
		}
	}
}

// launch starts a node on free ports in a new directory, without waiting for it.
func launch(bin string, cfg Config) (*Node, error) {
	dir, err := os.MkdirTemp("", "inorder-rabbitmq-")
	if err != nil {
		return nil, fmt.Errorf("rabbitmqtest: %w", err)
	}
	var ports [3]int // AMQP, distribution, epmd
	for i := range ports {
		if ports[i], err = pgcluster.FreePort(); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
	}
	n := &Node{dir: dir, port: ports[0]}
	conf := fmt.Sprintf("listeners.tcp.default = 127.0.0.1:%d\nmax_message_size = %d\nloopback_users.guest = true\n",
		ports[0], cfg.MaxMessageSize)
	files := map[string]string{"rabbitmq.conf": conf, "enabled_plugins": "[].\n"}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
			os.RemoveAll(dir)
			return nil, fmt.Errorf("rabbitmqtest: %w", err)
		}
	}
	if err := os.Mkdir(filepath.Join(dir, "home"), 0o700); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("rabbitmqtest: %w", err)
	}
	name := fmt.Sprintf("inorder%d_%d@localhost", os.Getpid(), ports[0])
	cmd := exec.Command("/bin/sh", "-c", supervisor)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(),
		"RMQ_SERVER="+bin,
		"RMQ_DIR="+dir,
		"HOME="+filepath.Join(dir, "home"), // the node writes its own Erlang cookie there
		"RABBITMQ_CONF_ENV_FILE="+filepath.Join(dir, "rabbitmq-env.conf"), // absent: not the system's
		"RABBITMQ_CONFIG_FILE="+filepath.Join(dir, "rabbitmq.conf"),
		"RABBITMQ_ENABLED_PLUGINS_FILE="+filepath.Join(dir, "enabled_plugins"),
		"RABBITMQ_MNESIA_BASE="+filepath.Join(dir, "mnesia"),
		"RABBITMQ_LOG_BASE="+filepath.Join(dir, "log"),
		"RABBITMQ_PID_FILE="+filepath.Join(dir, "node.pid"),
		"RABBITMQ_NODENAME="+name,
		"RABBITMQ_NODE_IP_ADDRESS=127.0.0.1",
		"RABBITMQ_NODE_PORT="+strconv.Itoa(ports[0]),
		"RABBITMQ_DIST_PORT="+strconv.Itoa(ports[1]),
		"ERL_EPMD_PORT="+strconv.Itoa(ports[2]),
		"ERL_EPMD_ADDRESS=127.0.0.1",
		"RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS=-kernel inet_dist_use_interface {127,0,0,1}",
		"RABBITMQ_LOGS=-", // the log to standard output, kept in Output
	)
	cmd.Stdout, cmd.Stderr = &lockedWriter{n: n}, &lockedWriter{n: n}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	exited, err := pgcluster.StartTied(cmd)
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("start rabbitmq-server: %w", err)
	}
	n.cmd, n.exited = cmd, exited
	return n, nil
}

// await waits until the node accepts AMQP connections, and stops it when it does not.
func (n *Node) await(ctx context.Context) error {
	deadline := time.Now().Add(startTimeout)
	for {
		if n.ready() {
			return nil
		}
		select {
		case <-n.exited:
			out := strings.TrimSpace(n.Output())
			_ = n.Stop()
			if strings.Contains(out, "eaddrinuse") {
				return fmt.Errorf("rabbitmq-server: %w: %s", errPortTaken, out)
			}
			return fmt.Errorf("rabbitmq-server exited during start-up: %s", out)
		case <-ctx.Done():
			_ = n.Stop()
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			out := n.Output()
			_ = n.Stop()
			return fmt.Errorf("rabbitmq-server did not accept AMQP connections within %s: %s", startTimeout,
				strings.TrimSpace(out))
		}
	}
}

// ready reports whether the node answers the AMQP protocol header with its connection.start: the
// listener opens only once the broker has booted, but the answer is what tells.
func (n *Node) ready() bool {
	c, err := net.DialTimeout("tcp", n.Addr(), time.Second)
	if err != nil {
		return false
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Write([]byte("AMQP\x00\x00\x09\x01")); err != nil {
		return false
	}
	var frame [7]byte
	_, err = c.Read(frame[:])
	return err == nil && frame[0] == 1 // a method frame
}

// Addr is the host:port the node listens on for AMQP.
func (n *Node) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(n.port)) }

// URL is an AMQP URL that connects to the node's default virtual host as guest.
func (n *Node) URL() string {
	return (&url.URL{Scheme: "amqp", User: url.UserPassword("guest", "guest"), Host: n.Addr(), Path: "/"}).String()
}

// Output returns what the node has logged so far.
func (n *Node) Output() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.out.String()
}

// Stop kills the node, stops its epmd and removes its directory. It is safe to call more than once.
func (n *Node) Stop() error {
	n.mu.Lock()
	cmd, exited := n.cmd, n.exited
	n.cmd = nil
	n.mu.Unlock()
	if cmd == nil {
		return nil
	}
	_ = cmd.Process.Signal(syscall.SIGTERM) // the supervisor cleans up
	select {
	case <-exited:
	case <-time.After(20 * time.Second):
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-exited
	}
	return os.RemoveAll(n.dir)
}

var (
	sharedOnce sync.Once
	shared     *Node
	sharedErr  error
)

// Shared returns the test binary's node, starting it the first time. It skips the test when RabbitMQ
// is not installed and fails it when the node does not start. The node lives until the binary exits
// (or StopShared); tests keep apart by naming their exchanges and queues after themselves.
func Shared(t testing.TB) *Node {
	t.Helper()
	sharedOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
		defer cancel()
		shared, sharedErr = Start(ctx, Config{})
	})
	if errors.Is(sharedErr, ErrNotInstalled) {
		t.Skip(sharedErr.Error())
	}
	if sharedErr != nil {
		t.Fatalf("start the shared RabbitMQ node: %v", sharedErr)
	}
	return shared
}

// StopShared stops the shared node if one was started. A TestMain may call it after m.Run; without it,
// the node stops when the test binary exits.
func StopShared() {
	if shared != nil {
		_ = shared.Stop()
	}
}

type lockedWriter struct{ n *Node }

func (w *lockedWriter) Write(p []byte) (int, error) {
	w.n.mu.Lock()
	defer w.n.mu.Unlock()
	return w.n.out.Write(p)
}
