package cloudevent_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/inorder-dev/inorder/handlers/cloudevent"
)

func TestNew(t *testing.T) {
	t.Parallel()
	_, err := cloudevent.New(cloudevent.Config{Mode: "sideways"})
	require.EqualError(t, err, `cloudevent: Config.Mode "sideways" is neither binary nor structured`)
	_, err = cloudevent.New(cloudevent.Config{Source: "http://a b/%zz"})
	require.ErrorContains(t, err, `cloudevent: Config.Source "http://a b/%zz" is not a URI reference`)
}
