package tcpproxy

import (
	"bytes"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// pattern is n bytes that tell their order.
func pattern(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i % 251)
	}
	return b
}

// echoBack writes msg to c on its own goroutine (the echo server sends it back through the proxy) and
// returns the error of the write.
func echoBack(c net.Conn, msg []byte) <-chan error {
	errc := make(chan error, 1)
	go func() {
		_, err := c.Write(msg)
		errc <- err
	}()
	return errc
}

func TestTrickleBoundsTheRateTowardTheClient(t *testing.T) {
	t.Parallel()
	const rate, size = 100_000, 60_000
	echo := startEcho(t)
	p := startProxy(t, echo.ln.Addr().String(), 0)
	p.Trickle(rate)
	c := dial(t, p)
	sent := pattern(size)
	start := time.Now()
	errc := echoBack(c, sent)
	require.NoError(t, c.SetReadDeadline(time.Now().Add(await)))
	got := make([]byte, size)
	_, err := io.ReadFull(c, got)
	took := time.Since(start)
	require.NoError(t, err)
	require.NoError(t, <-errc)
	require.True(t, bytes.Equal(sent, got), "bytes came back changed or out of order")
	// The first piece goes at once, the rest at the rate.
	require.GreaterOrEqual(t, took, time.Duration(size-rate/trickleSteps)*time.Second/rate, "the answer came faster than the rate")
	require.Eventually(t, func() bool { return p.ToClients() == size }, await, time.Millisecond)
}

func TestTrickleTurnedOffPassesTheRestAtOnce(t *testing.T) {
	t.Parallel()
	const size = 200_000 // 200s at the rate below
	echo := startEcho(t)
	p := startProxy(t, echo.ln.Addr().String(), 0)
	p.Trickle(1000)
	c := dial(t, p)
	sent := pattern(size)
	errc := echoBack(c, sent)
	require.NoError(t, c.SetReadDeadline(time.Now().Add(await)))
	got := make([]byte, size)
	_, err := io.ReadFull(c, got[:1])
	require.NoError(t, err)
	p.Trickle(0)
	_, err = io.ReadFull(c, got[1:])
	require.NoError(t, err, "the rest of the answer came once the trickle was off")
	require.NoError(t, <-errc)
	require.True(t, bytes.Equal(sent, got), "bytes came back changed or out of order")
}

func TestSwallowStopsATrickle(t *testing.T) {
	t.Parallel()
	const size = 200_000
	echo := startEcho(t)
	p := startProxy(t, echo.ln.Addr().String(), 0)
	p.Trickle(1000)
	c := dial(t, p)
	echoBack(c, pattern(size))
	require.NoError(t, c.SetReadDeadline(time.Now().Add(await)))
	_, err := io.ReadFull(c, make([]byte, 1))
	require.NoError(t, err)
	p.Swallow()
	// What was written before the Swallow may still come (a piece at most was under way); then nothing.
	got := 1
	buf := make([]byte, size)
	for {
		require.NoError(t, c.SetReadDeadline(time.Now().Add(quiet)))
		n, err := c.Read(buf)
		got += n
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			break
		}
		require.NoError(t, err, "a swallowed connection stays open")
	}
	require.Less(t, got, size/10, "the trickle went on after the Swallow")
	requireNothing(t, c)
}
