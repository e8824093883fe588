package redisstream_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inorder-dev/inorder/handlers/redisstream"
	"github.com/inorder-dev/inorder/internal/harness/sinktest"
	"github.com/inorder-dev/inorder/processor/processortest"
)

// TestARefusalResendsNothingAccepted: with a stream per key and a window of 16 over 300 records of 20
// keys, Redis refuses the first key's records (its stream's name holds a string) until the key is
// deleted. The records of other keys Redis added meanwhile, ahead of the refused one, are not added
// again: once the key is fixed every record is in its stream exactly once, in order.
func TestARefusalResendsNothingAccepted(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	require.NoError(t, b.client.Set(ctx, "orders:k1", "not a stream", 0).Err())
	ids := b.InsertOutbox(t, 0, 300, 20) // k1 first at n=1
	b.Run(t, "resend", b.newHandler(t, redisstream.Config{Stream: "orders:{key}"}), sinktest.RunOpts{MaxInFlight: 16})

	halt := processortest.WaitHalted(t, b.DB, "resend", nil)
	require.Equal(t, ids[0], halt.RecordID)
	require.NoError(t, b.client.Del(ctx, "orders:k1").Err())
	processortest.WaitCaughtUp(t, b.DB, "resend", &processortest.WaitOpts{Timeout: 20 * time.Second})

	streams := b.entries(t, "orders:*")
	require.Zero(t, requireOrderedPerKey(t, streams, ids), "entries Redis had added were added again")
	require.Equal(t, len(ids), count(streams))
}
