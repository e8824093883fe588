package image_test

import (
	"archive/tar"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/stretchr/testify/require"

	"github.com/inorder-dev/inorder/deploy/image"
)

// TestTheImageRunsInorderAsNotRoot builds the static binary and the image from it with no Docker daemon,
// writes it as an OCI layout, reads it back as a registry client would: its entrypoint, its user, its
// labels, and the binary in its layer, which runs and says its version.
func TestTheImageRunsInorderAsNotRoot(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	bin := filepath.Join(dir, "inorder")
	build := exec.Command("go", "build", "-ldflags", "-X main.version=v0.0.0-imagetest", "-o", bin, "./cmd/inorder")
	build.Dir = ".." + string(filepath.Separator) + ".."
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "%s", out)

	img, err := image.Build(bin, "v0.0.0-imagetest")
	require.NoError(t, err)
	oci := filepath.Join(dir, "oci")
	require.NoError(t, image.WriteLayout(oci, img, "v0.0.0-imagetest"))

	p, err := layout.FromPath(oci)
	require.NoError(t, err)
	idx, err := p.ImageIndex()
	require.NoError(t, err)
	m, err := idx.IndexManifest()
	require.NoError(t, err)
	require.Len(t, m.Manifests, 1)
	require.Equal(t, "v0.0.0-imagetest", m.Manifests[0].Annotations["org.opencontainers.image.ref.name"])
	read, err := idx.Image(m.Manifests[0].Digest)
	require.NoError(t, err)
	cf, err := read.ConfigFile()
	require.NoError(t, err)
	require.Equal(t, []string{"/inorder"}, cf.Config.Entrypoint)
	require.Equal(t, "65532:65532", cf.Config.User, "not root")
	require.NotEqual(t, "0", strings.Split(cf.Config.User, ":")[0])
	require.Equal(t, "linux", cf.OS)
	require.Equal(t, "v0.0.0-imagetest", cf.Config.Labels["org.opencontainers.image.version"])

	layers, err := read.Layers()
	require.NoError(t, err)
	require.Len(t, layers, 1, "one layer: the binary, no base image")
	rc, err := layers[0].Uncompressed()
	require.NoError(t, err)
	defer rc.Close()
	tr := tar.NewReader(rc)
	hdr, err := tr.Next()
	require.NoError(t, err)
	require.Equal(t, "inorder", hdr.Name)
	require.Equal(t, int64(0o555), hdr.Mode)
	extracted := filepath.Join(dir, "from-image")
	f, err := os.OpenFile(extracted, os.O_CREATE|os.O_WRONLY, 0o755)
	require.NoError(t, err)
	_, err = io.Copy(f, tr)
	require.NoError(t, err)
	require.NoError(t, f.Close())
	_, err = tr.Next()
	require.ErrorIs(t, err, io.EOF, "nothing else in the image")

	version, err := exec.Command(extracted, "version").Output()
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(string(version), "inorder v0.0.0-imagetest "), "%s", version)
}
