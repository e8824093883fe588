package webhook

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestACloudEventsHeaderValueIsPercentEncoded: a space, a double quote, a percent sign and what is not
// printable ASCII are percent-encoded as UTF-8 in a ce- header, as the HTTP binding says (3.1.3.2).
func TestACloudEventsHeaderValueIsPercentEncoded(t *testing.T) {
	t.Parallel()
	require.Equal(t, "k%201%22%25%C3%A9", httpHeaderValue("k 1\"%é"))
	require.Equal(t, "orders:42", httpHeaderValue("orders:42"), "what a header carries as it is stays so")
}
