package image_test

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/inorder-dev/inorder/deploy/image"
)

// TestTheDockerfileMakesTheSameImage reads deploy/Dockerfile, for those who build with Docker: its last
// stage has no base, holds the binary as the entrypoint, runs as the same user that is not root, carries
// the same labels, and builds the binary for the platform asked for, statically, with the version stamped.
func TestTheDockerfileMakesTheSameImage(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../Dockerfile")
	require.NoError(t, err)
	text := strings.ReplaceAll(string(b), "\\\n", " ")
	stages := regexp.MustCompile(`(?m)^FROM `).Split(text, -1)
	final := stages[len(stages)-1]
	require.True(t, strings.HasPrefix(final, "scratch\n"), "no base image: %q", final)
	require.Contains(t, final, "COPY --from=build /inorder "+image.Entrypoint+"\n")
	require.Contains(t, final, "USER "+image.User+"\n")
	require.Contains(t, final, `ENTRYPOINT ["`+image.Entrypoint+`"]`)
	labels := map[string]string{}
	for _, m := range regexp.MustCompile(`(org\.opencontainers\.image\.[a-z]+)="([^"]*)"`).FindAllStringSubmatch(final, -1) {
		labels[m[1]] = m[2]
	}
	require.Equal(t, image.Labels("${VERSION}"), labels)
	build := stages[len(stages)-2]
	require.Contains(t, build, "CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH go build -trimpath -ldflags \"-X main.version=${VERSION}\"")
}
