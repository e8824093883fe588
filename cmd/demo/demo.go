package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"syscall"
	"time"

	gpubsub "cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"cloud.google.com/go/pubsub/v2/pstest"
	"github.com/jackc/pgx/v5"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/inorder-dev/inorder/cursor"
	"github.com/inorder-dev/inorder/internal/harness/pgcluster"
	"github.com/inorder-dev/inorder/migrations"
)

const (
	project      = "inorder-demo"
	topic        = "bookings"
	subscription = "bookings-receiver"
	process      = "bookings_outbox"
)

type options struct {
	// Duration stops the bookings this long after the relay started; the demo then lets the relay catch
	// up and stops by itself. Zero runs until ctx is done.
	Duration    time.Duration
	InsertEvery time.Duration
	Out, Logs   io.Writer
}

// summary is what the demo saw.
type summary struct {
	Inserted, Received int
	InOrder            bool
}

const schema = `
	CREATE TABLE bookings (
		id           bigserial PRIMARY KEY,
		aggregate_id text NOT NULL,          -- the customer: the Pub/Sub ordering key
		type         text NOT NULL,
		payload      jsonb NOT NULL,
		created_at   timestamptz NOT NULL DEFAULT clock_timestamp()
	);
	CREATE INDEX bookings_created_at_id_idx ON bookings (created_at, id);`

var customers = []string{"ada", "grace", "linus", "barbara"}

func run(ctx context.Context, opts options) (summary, error) {
	sum := summary{InOrder: true}
	out := &syncWriter{w: opts.Out} // the subscriber prints from its own goroutines
	fmt.Fprintln(out, "inorder demo: starting a throwaway Postgres…")
	pg, err := pgcluster.Start(ctx, pgcluster.Config{})
	if err != nil {
		return sum, err
	}
	defer pg.Stop()
	dbURL := pg.URL("postgres")
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return sum, err
	}
	defer conn.Close(context.Background())
	if _, err := migrations.Migrate(ctx, conn); err != nil {
		return sum, err
	}
	if _, err := conn.Exec(ctx, schema); err != nil {
		return sum, fmt.Errorf("create bookings: %w", err)
	}
	// The insert clock, which orders the table for the relay: what `inorder migrate --table bookings` adds.
	if err := migrations.AddClock(ctx, conn, "bookings", migrations.ClockOpts{}); err != nil {
		return sum, fmt.Errorf("add the insert clock to bookings: %w", err)
	}

	// The client below and the inorder child both use the emulator. The fake's address goes to the child
	// in its environment only: setting it in this process's would outlive the fake.
	emulator := os.Getenv("PUBSUB_EMULATOR_HOST")
	var clientOpts []option.ClientOption
	if emulator == "" {
		srv := pstest.NewServer()
		defer srv.Close()
		emulator = srv.Addr
		clientOpts = append(clientOpts, option.WithEndpoint(emulator), option.WithoutAuthentication(),
			option.WithGRPCDialOption(grpc.WithTransportCredentials(insecure.NewCredentials())))
		fmt.Fprintf(out, "inorder demo: Pub/Sub fake (pstest) on %s; set PUBSUB_EMULATOR_HOST to use another\n", emulator)
	}
	client, err := gpubsub.NewClient(ctx, project, clientOpts...)
	if err != nil {
		return sum, err
	}
	defer client.Close()
	topicName := "projects/" + project + "/topics/" + topic
	subName := "projects/" + project + "/subscriptions/" + subscription
	if _, err := client.TopicAdminClient.CreateTopic(ctx, &pubsubpb.Topic{Name: topicName}); err != nil {
		return sum, fmt.Errorf("create topic: %w", err)
	}
	if _, err := client.SubscriptionAdminClient.CreateSubscription(ctx, &pubsubpb.Subscription{
		Name: subName, Topic: topicName, EnableMessageOrdering: true, AckDeadlineSeconds: 10,
	}); err != nil {
		return sum, fmt.Errorf("create subscription: %w", err)
	}

	// Sample rows before the relay starts: a backlog to catch up on.
	for i := 0; i < 12; i++ {
		if err := book(ctx, conn, customers[i%len(customers)]); err != nil {
			return sum, err
		}
		sum.Inserted++
	}

	bin, err := buildInorder(context.WithoutCancel(ctx))
	if err != nil {
		return sum, err
	}
	defer os.RemoveAll(filepath.Dir(bin))
	args := []string{"run", "--process", process, "--table", "bookings", "--start-from", "beginning", "--handler", "pubsub",
		"--pubsub-project", project, "--pubsub-topic", topic, "--checkpoint", "record", "--poll-interval", "100ms"}
	fmt.Fprintf(out, "inorder demo: running  inorder %s\n", join(args))
	fmt.Fprintln(out, "inorder demo: the order kept is per customer (Pub/Sub's ordering key): one customer's bookings "+
		"arrive in the order they were written, while different customers' may interleave, so booking #4 may "+
		"arrive before #3 when they belong to two customers.")
	fmt.Fprintln(out)
	child := exec.Command(bin, args...)
	child.Env = append(os.Environ(), "DATABASE_URL="+dbURL, "PUBSUB_EMULATOR_HOST="+emulator)
	child.Stdout, child.Stderr = opts.Logs, opts.Logs
	child.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // Ctrl-C reaches it through us, once
	if err := child.Start(); err != nil {
		return sum, err
	}
	childDone := make(chan error, 1)
	go func() { childDone <- child.Wait() }()
	var timeUp <-chan time.Time
	if opts.Duration > 0 {
		timer := time.NewTimer(opts.Duration)
		defer timer.Stop()
		timeUp = timer.C
	}

	var mu sync.Mutex
	last := map[string]int64{}
	received := 0
	recvCtx, stopRecv := context.WithCancel(context.Background())
	defer stopRecv()
	recvDone := make(chan error, 1)
	go func() {
		recvDone <- client.Subscriber(subName).Receive(recvCtx, func(_ context.Context, m *gpubsub.Message) {
			m.Ack()
			var id int64
			fmt.Sscan(m.Attributes["inorder_id"], &id)
			mu.Lock()
			defer mu.Unlock()
			mark := "in order"
			if id <= last[m.OrderingKey] {
				mark = "OUT OF ORDER"
				if id < last[m.OrderingKey] {
					sum.InOrder = false
				} else {
					mark = "redelivered"
				}
			}
			last[m.OrderingKey] = max(last[m.OrderingKey], id)
			received++
			fmt.Fprintf(out, "  ← %-8s booking #%-3d %-17s %s  (%s for %s)\n", m.OrderingKey, id,
				m.Attributes["event_type"], string(m.Data), mark, m.OrderingKey)
		})
	}()

	ticker := time.NewTicker(opts.InsertEvery)
	defer ticker.Stop()
	status := time.NewTicker(2 * time.Second)
	defer status.Stop()
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7))
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case <-timeUp:
			// Time is up: no more bookings; let the relay deliver the last ones before stopping it, so
			// that the summary shows what it left behind, not what it had no time to read.
			if !awaitCaughtUp(ctx, conn, 30*time.Second) && ctx.Err() == nil {
				fmt.Fprintln(out, "\ninorder demo: the relay did not catch up within 30s")
			}
			break loop
		case err := <-childDone:
			stopRecv()
			return sum, fmt.Errorf("inorder run exited early: %v", err)
		case <-ticker.C:
			if err := book(ctx, conn, customers[rng.IntN(len(customers))]); err != nil {
				if ctx.Err() != nil {
					break loop
				}
				return sum, err
			}
			sum.Inserted++
		case <-status.C:
			if behind, err := behind(ctx, conn); err == nil {
				fmt.Fprintf(out, "  · %d inserted, %d behind the position\n", sum.Inserted, behind)
			}
		}
	}

	fmt.Fprintln(out, "\ninorder demo: stopping inorder (SIGTERM: finish the record in flight, unlock)…")
	_ = child.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-childDone:
		if err != nil {
			return sum, fmt.Errorf("inorder run did not stop cleanly: %v", err)
		}
	case <-time.After(30 * time.Second):
		_ = child.Process.Kill()
		return sum, errors.New("inorder run did not stop within 30s")
	}
	// Let the subscriber drain what was published before the stop.
	deadline := time.Now().Add(30 * time.Second) // only a subscriber that lost messages waits it out
	for time.Now().Before(deadline) {
		mu.Lock()
		done := received >= sum.Inserted
		mu.Unlock()
		if done {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	stopRecv()
	<-recvDone
	mu.Lock()
	sum.Received = received
	mu.Unlock()
	left := "?" // not measured
	if b, err := behind(context.Background(), conn); err == nil {
		left = fmt.Sprint(b)
	}
	verdict := "every key in order"
	if !sum.InOrder {
		verdict = "ORDER BROKEN"
	}
	fmt.Fprintf(out, "inorder demo: %d bookings inserted, %d messages received, %s behind; %s\n",
		sum.Inserted, sum.Received, left, verdict)
	return sum, nil
}

func book(ctx context.Context, conn *pgx.Conn, customer string) error {
	kinds := []string{"booking.created", "booking.confirmed", "booking.charged"}
	payload, _ := json.Marshal(map[string]any{"customer": customer, "seats": 1 + rand.IntN(4)})
	_, err := conn.Exec(ctx, "INSERT INTO bookings (aggregate_id, type, payload) VALUES ($1, $2, $3)",
		customer, kinds[rand.IntN(len(kinds))], payload)
	if err != nil {
		return fmt.Errorf("insert booking: %w", err)
	}
	return nil
}

// awaitCaughtUp waits until nothing is behind the relay's position, at most timeout, and reports whether
// it got there.
func awaitCaughtUp(ctx context.Context, conn *pgx.Conn, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for {
		if n, err := behind(ctx, conn); err == nil && n == 0 {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// behind measures the rows after the relay's position, as `inorder status` does.
func behind(ctx context.Context, conn *pgx.Conn) (int64, error) {
	procs, err := cursor.Read(ctx, conn, cursor.ReadOpts{Process: process})
	if err != nil || len(procs) == 0 || procs[0].Info.Source.Table == "" {
		return 0, errors.New("no cursor yet")
	}
	in := procs[0].Info
	if err := in.Measure(ctx, conn); err != nil {
		return 0, err
	}
	return in.Lag.Rows, nil
}

// buildInorder builds the CLI, so the demo runs exactly what users run.
func buildInorder(ctx context.Context) (string, error) {
	dir, err := os.MkdirTemp("", "inorder-demo-")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "inorder")
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/inorder")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		return "", fmt.Errorf("build inorder: %v\n%s", err, out)
	}
	return bin, nil
}

func join(args []string) string {
	s := ""
	for i, a := range args {
		if i > 0 {
			s += " "
		}
		s += a
	}
	return s
}

type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}
