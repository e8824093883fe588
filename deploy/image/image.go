// Package image builds inorder's container image without a Docker daemon: one layer holding the static
// inorder binary at /inorder, run as a user that is not root, written as an OCI image layout that any
// registry client (crane, skopeo, ko's push) can push.
//
// # The image
//
// There is no base image: the binary is built with CGO_ENABLED=0, needs no libc, and reaches Postgres,
// brokers and webhooks over TCP (a URL with sslmode=verify-full needs its CA given with sslrootcert, since
// the image carries no certificates of its own). It runs as 65532:65532, the "nonroot" user of the
// distroless images, with /inorder as its entrypoint, so that `docker run IMAGE run --config ...` and a
// Kubernetes container's args are the inorder command line.
package image

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"os"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// User is the user and group the image runs as: not root.
const User = "65532:65532"

// Entrypoint is where the binary stands in the image, and what it runs.
const Entrypoint = "/inorder"

// Build makes the image from the binary at binary (built for linux with CGO_ENABLED=0), labelled with
// version.
func Build(binary, version string) (v1.Image, error) {
	bin, err := os.ReadFile(binary)
	if err != nil {
		return nil, fmt.Errorf("read the binary: %w", err)
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	// A fixed time: the same binary makes the same layer, and the same image digest.
	epoch := time.Unix(0, 0).UTC()
	if err := tw.WriteHeader(&tar.Header{Name: Entrypoint[1:], Mode: 0o555, Size: int64(len(bin)), ModTime: epoch,
		Typeflag: tar.TypeReg, Uid: 0, Gid: 0}); err != nil {
		return nil, err
	}
	if _, err := tw.Write(bin); err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(buf.Bytes())), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, fmt.Errorf("make the layer: %w", err)
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	if img, err = mutate.AppendLayers(img, layer); err != nil {
		return nil, fmt.Errorf("add the layer: %w", err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture, cf.Created = "linux", "amd64", v1.Time{Time: epoch}
	cf.Config.Entrypoint = []string{Entrypoint}
	cf.Config.User = User
	cf.Config.Labels = map[string]string{
		"org.opencontainers.image.title":   "inorder",
		"org.opencontainers.image.version": version,
		"org.opencontainers.image.source":  "https://github.com/inorder-dev/inorder",
	}
	return mutate.ConfigFile(img, cf)
}

// WriteLayout writes img as an OCI image layout in dir, tagged with version.
func WriteLayout(dir string, img v1.Image, version string) error {
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return fmt.Errorf("write the layout: %w", err)
	}
	return p.AppendImage(img, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": version}))
}
