// Package image builds inorder's container image without a Docker daemon: for each platform, one layer
// holding the static inorder binary at /inorder, run as a user that is not root; the platforms' images
// gathered in one OCI image index with an SPDX software bill of materials for each; written as an OCI
// image layout tagged with the version, which any registry client (crane, skopeo, oras) can push.
//
// # The image
//
// There is no base image: the binary is built with CGO_ENABLED=0, needs no libc, and reaches Postgres,
// brokers and webhooks over TCP. It carries the Mozilla root certificates itself
// (golang.org/x/crypto/x509roots/fallback, used when the system has none, as here), so an HTTPS sink whose
// certificate chains to a public CA verifies; a private CA is given as a file (SSL_CERT_FILE, or
// sslrootcert for Postgres). It runs as 65532:65532, the "nonroot" user of the distroless images, with
// /inorder as its entrypoint, so that `docker run IMAGE run --config ...` and a Kubernetes container's
// args are the inorder command line.
//
// # The bill of materials
//
// Each platform's image has an SPDX 2.3 JSON document (SPDX is ISO/IEC 5962, read by every scanner
// and registry that reads SBOMs) listing the Go modules compiled into its binary, with their versions
// and package URLs, read from the build information the Go toolchain records in the binary (what
// `go version -m` prints). It is attached the OCI 1.1 way: an artifact manifest of artifactType
// application/spdx+json whose subject is the image, listed in the index beside the images with the
// platform unknown/unknown (as Docker lists its attestations) so that no runtime ever picks it to run.
// Pushing the index pushes the documents with it, and a registry with the referrers API lists each under
// its image (`oras discover`).
package image

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"debug/buildinfo"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/partial"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// User is the user and group the image runs as: not root.
const User = "65532:65532"

// Entrypoint is where the binary stands in the image, and what it runs.
const Entrypoint = "/inorder"

// SBOMType is the media type of the bill of materials, the artifactType of the manifest holding it.
const SBOMType = "application/spdx+json"

// Labels are the image's labels (deploy/Dockerfile sets the same) for version.
func Labels(version string) map[string]string {
	return map[string]string{
		"org.opencontainers.image.title":   "inorder",
		"org.opencontainers.image.version": version,
		"org.opencontainers.image.source":  "https://github.com/inorder-dev/inorder",
	}
}

// epoch is the time stamped on files and configurations: the same binary makes the same image digest.
var epoch = time.Unix(0, 0).UTC()

// Binary is an inorder binary and the platform it was built for.
type Binary struct {
	Platform v1.Platform // OS and Architecture
	Path     string
}

// elfMachines are the architectures an image may be built for, and how an ELF binary names each.
var elfMachines = map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}

// Build makes the image of one platform from the binary at binary (built for that platform with
// CGO_ENABLED=0), labelled with version. It refuses a binary built for another platform.
func Build(binary string, platform v1.Platform, version string) (v1.Image, error) {
	if err := checkPlatform(binary, platform); err != nil {
		return nil, err
	}
	bin, err := os.ReadFile(binary)
	if err != nil {
		return nil, fmt.Errorf("read the binary: %w", err)
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
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
	cf.OS, cf.Architecture, cf.Variant, cf.Created = platform.OS, platform.Architecture, platform.Variant, v1.Time{Time: epoch}
	cf.Config.Entrypoint = []string{Entrypoint}
	cf.Config.User = User
	cf.Config.Labels = Labels(version)
	return mutate.ConfigFile(img, cf)
}

// checkPlatform refuses a binary that is not an ELF executable for platform's architecture.
func checkPlatform(binary string, platform v1.Platform) error {
	want, ok := elfMachines[platform.Architecture]
	if platform.OS != "linux" || !ok {
		return fmt.Errorf("platform %s: only linux/amd64 and linux/arm64 are built", platform.String())
	}
	f, err := elf.Open(binary)
	if err != nil {
		return fmt.Errorf("%s for %s: not a linux binary: %w", binary, platform.String(), err)
	}
	defer f.Close()
	if f.Machine != want {
		return fmt.Errorf("%s is built for %s, not for %s", binary, f.Machine, platform.String())
	}
	return nil
}

// BuildIndex makes the image of each binary and an SPDX document of each, gathered in one OCI image
// index labelled with version.
func BuildIndex(version string, binaries ...Binary) (v1.ImageIndex, error) {
	if len(binaries) == 0 {
		return nil, fmt.Errorf("no binary to build an image of")
	}
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, b := range binaries {
		img, err := Build(b.Path, b.Platform, version)
		if err != nil {
			return nil, err
		}
		info, err := buildinfo.ReadFile(b.Path)
		if err != nil {
			return nil, fmt.Errorf("%s: read its build information: %w", b.Path, err)
		}
		bin, err := os.ReadFile(b.Path)
		if err != nil {
			return nil, err
		}
		sum := sha256.Sum256(bin)
		doc, err := SPDX(info, b.Platform, version, hex.EncodeToString(sum[:]))
		if err != nil {
			return nil, err
		}
		p := b.Platform
		desc, err := partial.Descriptor(img)
		if err != nil {
			return nil, err
		}
		desc.Platform = &p
		sbom, err := newArtifact(SBOMType, doc, "inorder-"+p.OS+"-"+p.Architecture+".spdx.json", *desc)
		if err != nil {
			return nil, err
		}
		idx = mutate.AppendManifests(idx,
			mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: &p}},
			mutate.IndexAddendum{Add: sbom, Descriptor: v1.Descriptor{
				Platform: &v1.Platform{OS: "unknown", Architecture: "unknown"}, ArtifactType: SBOMType,
			}})
	}
	return mutate.Annotations(idx, Labels(version)).(v1.ImageIndex), nil
}

// WriteLayout writes idx as an OCI image layout in dir, tagged with version (and only with it).
func WriteLayout(dir string, idx v1.ImageIndex, version string) error {
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return fmt.Errorf("write the layout: %w", err)
	}
	return p.AppendIndex(idx, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": version}))
}

// artifact is an OCI 1.1 artifact: an image manifest with an artifactType, the empty configuration, one
// blob, and the manifest it refers to as its subject.
type artifact struct {
	manifest []byte
	blob     v1.Layer
}

// emptyJSON is the OCI empty descriptor's content.
var emptyJSON = []byte("{}")

func newArtifact(artifactType string, content []byte, title string, subject v1.Descriptor) (v1.Image, error) {
	blob := static.NewLayer(content, types.MediaType(artifactType))
	d, err := blob.Digest()
	if err != nil {
		return nil, err
	}
	cfg, _, err := v1.SHA256(bytes.NewReader(emptyJSON))
	if err != nil {
		return nil, err
	}
	subject.Platform = nil // a subject names a manifest, not where it runs
	m := v1.Manifest{
		SchemaVersion: 2,
		MediaType:     types.OCIManifestSchema1,
		ArtifactType:  artifactType,
		Config:        v1.Descriptor{MediaType: types.OCIEmptyJSON, Size: int64(len(emptyJSON)), Digest: cfg, Data: emptyJSON},
		Layers: []v1.Descriptor{{MediaType: types.MediaType(artifactType), Size: int64(len(content)), Digest: d,
			Annotations: map[string]string{"org.opencontainers.image.title": title}}},
		Subject: &subject,
	}
	raw, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	return partial.CompressedToImage(&artifact{manifest: raw, blob: blob})
}

func (a *artifact) RawConfigFile() ([]byte, error)      { return emptyJSON, nil }
func (a *artifact) MediaType() (types.MediaType, error) { return types.OCIManifestSchema1, nil }
func (a *artifact) RawManifest() ([]byte, error)        { return a.manifest, nil }

func (a *artifact) LayerByDigest(h v1.Hash) (partial.CompressedLayer, error) {
	if d, err := a.blob.Digest(); err == nil && d == h {
		return a.blob, nil
	}
	return nil, fmt.Errorf("artifact: no blob %s", h)
}
