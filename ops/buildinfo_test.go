package ops

import (
	"runtime/debug"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestBuildInfoNamesInorderVersionWhereverItIs reads the version label of inorder_build_info from build
// information as the Go toolchain records it: inorder's own command installed at a version, a service
// embedding inorder (its version among the modules, replaced or not), and a build that recorded none.
func TestBuildInfoNamesInorderVersionWhereverItIs(t *testing.T) {
	t.Parallel()
	parse := func(text string) *debug.BuildInfo {
		info, err := debug.ParseBuildInfo(text)
		require.NoError(t, err)
		return info
	}
	for _, tc := range []struct {
		name, info, version, revision string
	}{
		{"go install ...@v0.1.0", "path\tgithub.com/inorder-dev/inorder/cmd/inorder\nmod\tgithub.com/inorder-dev/inorder\tv0.1.0\th1:x=\n",
			"v0.1.0", ""},
		{"a clone, with its commit", "path\tgithub.com/inorder-dev/inorder/cmd/inorder\nmod\tgithub.com/inorder-dev/inorder\t(devel)\t\n" +
			"build\tvcs.revision=0123abcd\n", "devel", "0123abcd"},
		{"a service embedding it", "path\texample.com/shop\nmod\texample.com/shop\tv2.0.0\t\n" +
			"dep\tgithub.com/inorder-dev/inorder\tv0.1.0\th1:x=\nbuild\tvcs.revision=feed\n", "v0.1.0", "feed"},
		{"a service embedding a fork", "path\texample.com/shop\nmod\texample.com/shop\t(devel)\t\n" +
			"dep\tgithub.com/inorder-dev/inorder\tv0.1.0\th1:x=\n=>\tgithub.com/inorder-dev/inorder\tv0.1.1-fix\th1:y=\n", "v0.1.1-fix", ""},
		{"a service whose version is not inorder's", "path\texample.com/shop\nmod\texample.com/shop\tv2.0.0\t\n", "devel", ""},
	} {
		version, revision := moduleVersion(parse(tc.info), true)
		require.Equal(t, tc.version, version, tc.name)
		require.Equal(t, tc.revision, revision, tc.name)
	}
	version, revision := moduleVersion(nil, false)
	require.Equal(t, "devel", version, "no build information")
	require.Empty(t, revision)
}
