package kafka_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/inorder-dev/inorder/handlers/kafka"
	"github.com/inorder-dev/inorder/internal/harness/sinktest"
	"github.com/inorder-dev/inorder/processor/processortest"
)

// TestARetriableErrorResendsNothingAccepted: the broker answers every produce to one partition of four
// with a retriable error, in the middle of a stream of 300 records of 20 keys with a window of 16, until
// the stream has retried its first failing record. The records of the other partitions that the brokers
// acknowledged meanwhile, ahead of the failing one, are not produced again: once the partition accepts,
// every record is written exactly once, in order per key.
func TestARetriableErrorResendsNothingAccepted(t *testing.T) {
	t.Parallel()
	b := setup(t, []kgo.Opt{kgo.RecordDeliveryTimeout(time.Second)})
	ids := b.InsertOutbox(t, 0, 150, 20)
	b.Run(t, "resend", b.newHandler(t, kafka.Config{Topic: "bookings"}), sinktest.RunOpts{MaxInFlight: 16})
	processortest.WaitCaughtUp(t, b.DB, "resend", &processortest.WaitOpts{Timeout: 30 * time.Second})

	faults := b.cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: "bookings", Partitions: []int32{0},
		Err: kerr.NotEnoughReplicas, Count: -1})
	ids = append(ids, b.InsertOutbox(t, 150, 150, 20)...)
	require.Eventually(t, func() bool {
		return processortest.WaitFailing(t, b.DB, "resend", nil).Attempts >= 2
	}, 30*time.Second, 20*time.Millisecond)
	faults.Remove()
	processortest.WaitCaughtUp(t, b.DB, "resend", &processortest.WaitOpts{Timeout: 30 * time.Second})

	recs := newConsumer(t, b.cluster, "bookings").awaitIDs(t, ids)
	require.Zero(t, requireOrderedPerKey(t, recs, ids), "records the brokers acknowledged were produced again")
	require.Len(t, recs, len(ids))
}
