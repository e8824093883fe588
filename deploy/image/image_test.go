package image_test

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/stretchr/testify/require"

	"github.com/inorder-dev/inorder/deploy/image"
)

var (
	amd64 = v1.Platform{OS: "linux", Architecture: "amd64"}
	arm64 = v1.Platform{OS: "linux", Architecture: "arm64"}
)

// binDir is where binaries builds, a temporary directory TestMain removes after the tests.
var binDir string

// TestMain makes binDir and removes it after the tests, when os.Exit would run no defer.
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "inorder-image-test-")
	if err != nil {
		panic(err)
	}
	binDir = dir
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// binaries builds, once for every test, a small static Go program for linux/amd64 and linux/arm64 at once:
// the image is the same whatever the binary, and inorder itself takes minutes to build for a platform
// whose packages are not in the build cache (its roots are tested in cmd/inorder).
var binaries = sync.OnceValues(func() (map[string]string, error) {
	dir := binDir
	out := map[string]string{}
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for i, p := range []v1.Platform{amd64, arm64} {
		path := filepath.Join(dir, "hello-"+p.Architecture)
		out[p.Architecture] = path
		wg.Go(func() {
			build := exec.Command("go", "build", "-trimpath", "-o", path, "./testdata/hello")
			build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+p.OS, "GOARCH="+p.Architecture)
			if b, err := build.CombinedOutput(); err != nil {
				errs[i] = &buildError{err: err, out: string(b)}
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return out, nil
})

type buildError struct {
	err error
	out string
}

func (e *buildError) Error() string { return "build: " + e.err.Error() + "\n" + e.out }

func built(t *testing.T) map[string]string {
	t.Helper()
	bins, err := binaries()
	require.NoError(t, err)
	return bins
}

// TestTheIndexHoldsAnImagePerPlatformEachWithItsSBOM builds the index of two platforms with no Docker
// daemon, writes it as an OCI layout and reads it back as a registry client would: one entry, tagged with
// the version; in it an image for linux/amd64 and one for linux/arm64, each running its own binary as
// /inorder as a user that is not root, with the labels; and for each an SPDX document whose subject is
// that image. The binary for this machine's platform, taken out of its image, runs.
func TestTheIndexHoldsAnImagePerPlatformEachWithItsSBOM(t *testing.T) {
	t.Parallel()
	bins := built(t)
	const version = "v0.0.0-imagetest"
	idx, err := image.BuildIndex(version,
		image.Binary{Platform: amd64, Path: bins["amd64"]}, image.Binary{Platform: arm64, Path: bins["arm64"]})
	require.NoError(t, err)
	oci := filepath.Join(t.TempDir(), "oci")
	require.NoError(t, image.WriteLayout(oci, idx, version))

	p, err := layout.FromPath(oci)
	require.NoError(t, err)
	top, err := p.ImageIndex()
	require.NoError(t, err)
	tm, err := top.IndexManifest()
	require.NoError(t, err)
	require.Len(t, tm.Manifests, 1, "one tag")
	require.Equal(t, types.OCIImageIndex, tm.Manifests[0].MediaType)
	require.Equal(t, version, tm.Manifests[0].Annotations["org.opencontainers.image.ref.name"], "tagged with the version, not latest")
	read, err := top.ImageIndex(tm.Manifests[0].Digest)
	require.NoError(t, err)
	im, err := read.IndexManifest()
	require.NoError(t, err)
	require.Equal(t, version, im.Annotations["org.opencontainers.image.version"])

	images := map[string]v1.Descriptor{}
	sboms := map[v1.Hash]v1.Descriptor{} // by subject
	for _, d := range im.Manifests {
		require.NotNil(t, d.Platform)
		if d.ArtifactType == image.SBOMType {
			require.Equal(t, "unknown/unknown", d.Platform.String(), "never picked to run")
			a, err := read.Image(d.Digest)
			require.NoError(t, err)
			m, err := a.Manifest()
			require.NoError(t, err)
			require.Equal(t, image.SBOMType, m.ArtifactType)
			require.Equal(t, types.OCIEmptyJSON, m.Config.MediaType)
			require.NotNil(t, m.Subject)
			sboms[m.Subject.Digest] = d
			continue
		}
		images[d.Platform.String()] = d
	}
	require.Len(t, images, 2)
	require.Len(t, sboms, 2)

	for _, p := range []v1.Platform{amd64, arm64} {
		d, ok := images[p.String()]
		require.True(t, ok, "an image for %s", p.String())
		require.Equal(t, types.OCIManifestSchema1, d.MediaType)
		img, err := read.Image(d.Digest)
		require.NoError(t, err)
		cf, err := img.ConfigFile()
		require.NoError(t, err)
		require.Equal(t, []string{"/inorder"}, cf.Config.Entrypoint)
		require.Equal(t, "65532:65532", cf.Config.User, "not root")
		require.Equal(t, p.OS, cf.OS)
		require.Equal(t, p.Architecture, cf.Architecture)
		require.Equal(t, image.Labels(version), cf.Config.Labels)

		bin := onlyFile(t, img)
		want, err := os.ReadFile(bins[p.Architecture])
		require.NoError(t, err)
		require.True(t, bytes.Equal(want, bin), "the layer holds the binary built for %s", p.String())
		if p.Architecture == runtime.GOARCH {
			extracted := filepath.Join(t.TempDir(), "inorder")
			require.NoError(t, os.WriteFile(extracted, bin, 0o755))
			said, err := exec.Command(extracted).Output()
			require.NoError(t, err)
			require.Equal(t, "hello from "+p.String()+"\n", string(said))
		}

		sd, ok := sboms[d.Digest]
		require.True(t, ok, "an SPDX document for the %s image", p.String())
		a, err := read.Image(sd.Digest)
		require.NoError(t, err)
		layers, err := a.Layers()
		require.NoError(t, err)
		require.Len(t, layers, 1)
		rc, err := layers[0].Compressed()
		require.NoError(t, err)
		var doc spdx
		require.NoError(t, json.NewDecoder(rc).Decode(&doc))
		require.NoError(t, rc.Close())
		require.Equal(t, "SPDX-2.3", doc.SPDXVersion)
		require.Contains(t, doc.Name, p.String())
		require.Equal(t, version, doc.Packages[0].VersionInfo, "the main module, as the version")
		require.Equal(t, "stdlib", doc.Packages[1].Name)
		require.Equal(t, strings.TrimPrefix(runtime.Version(), "go"), doc.Packages[1].VersionInfo)
	}
}

// onlyFile returns the one file of img's one layer, checking it is /inorder, mode 0555.
func onlyFile(t *testing.T, img v1.Image) []byte {
	t.Helper()
	layers, err := img.Layers()
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
	b, err := io.ReadAll(tr)
	require.NoError(t, err)
	_, err = tr.Next()
	require.ErrorIs(t, err, io.EOF, "nothing else in the image")
	return b
}

// TestABinaryOfAnotherPlatformIsRefused: an image labelled linux/amd64 holding an arm64 binary would fail
// only when a node pulled it.
func TestABinaryOfAnotherPlatformIsRefused(t *testing.T) {
	t.Parallel()
	bins := built(t)
	_, err := image.BuildIndex("v0.0.0-imagetest",
		image.Binary{Platform: amd64, Path: bins["arm64"]}, image.Binary{Platform: arm64, Path: bins["arm64"]})
	require.ErrorContains(t, err, "is built for EM_AARCH64, not for linux/amd64")
}

type spdx struct {
	SPDXVersion       string `json:"spdxVersion"`
	DataLicense       string `json:"dataLicense"`
	SPDXID            string `json:"SPDXID"`
	Name              string `json:"name"`
	DocumentNamespace string `json:"documentNamespace"`
	CreationInfo      struct {
		Created  string   `json:"created"`
		Creators []string `json:"creators"`
	} `json:"creationInfo"`
	Packages []struct {
		Name         string `json:"name"`
		SPDXID       string `json:"SPDXID"`
		VersionInfo  string `json:"versionInfo"`
		ExternalRefs []struct {
			Category string `json:"referenceCategory"`
			Type     string `json:"referenceType"`
			Locator  string `json:"referenceLocator"`
		} `json:"externalRefs"`
	} `json:"packages"`
	Relationships []struct {
		Element string `json:"spdxElementId"`
		Type    string `json:"relationshipType"`
		Related string `json:"relatedSpdxElement"`
	} `json:"relationships"`
}

// goVersionM is an inorder binary's build information, cut short, as debug.BuildInfo.String writes it
// (`go version -m` prints the same lines, indented).
const goVersionM = `go	go1.26.8
path	github.com/inorder-dev/inorder/cmd/inorder
mod	github.com/inorder-dev/inorder	(devel)	
dep	github.com/jackc/pgx/v5	v5.12.0	h1:abc=
dep	golang.org/x/crypto/x509roots/fallback	v0.0.0-20261030153154-30a33513ff6d	h1:5NBkmd8MXirajj6AAEpi4HFVJnVkBNPTL1ggYAKqaws=
dep	example.com/old	v1.0.0	h1:old=
=>	example.com/new	v1.1.0	h1:new=
build	-trimpath=true
build	CGO_ENABLED=0
build	GOARCH=arm64
build	GOOS=linux
build	vcs.revision=0123456789abcdef
build	vcs.time=2026-11-20T10:00:00Z
`

// TestTheSBOMListsEveryModuleCompiledIn reads a binary's build information as `go version -m` prints it:
// the document describes the binary as the version, depends on every module (a replaced one as what
// replaced it, so the scanner looks up the code that is in the binary) and on the standard library, each
// with its package URL, and is dated by the commit, so the same binary makes the same document.
func TestTheSBOMListsEveryModuleCompiledIn(t *testing.T) {
	t.Parallel()
	info, err := debug.ParseBuildInfo(goVersionM)
	require.NoError(t, err)
	info.GoVersion = "go1.26.8" // what debug/buildinfo.ReadFile reads from a binary; the text's line is not parsed
	raw, err := image.SPDX(info, arm64, "v0.1.0", "ab12")
	require.NoError(t, err)
	again, err := image.SPDX(info, arm64, "v0.1.0", "ab12")
	require.NoError(t, err)
	require.Equal(t, raw, again)
	var doc spdx
	require.NoError(t, json.Unmarshal(raw, &doc))
	require.Equal(t, "SPDX-2.3", doc.SPDXVersion)
	require.Equal(t, "CC0-1.0", doc.DataLicense)
	require.Equal(t, "SPDXRef-DOCUMENT", doc.SPDXID)
	require.Equal(t, "2026-11-20T10:00:00Z", doc.CreationInfo.Created)
	require.Equal(t, "https://github.com/inorder-dev/inorder/sbom/v0.1.0/linux-arm64-ab12", doc.DocumentNamespace)

	purls := map[string]string{}
	ids := map[string]string{}
	for _, p := range doc.Packages {
		require.Len(t, p.ExternalRefs, 1)
		require.Equal(t, "purl", p.ExternalRefs[0].Type)
		purls[p.Name] = p.ExternalRefs[0].Locator
		require.Regexp(t, `^SPDXRef-[A-Za-z0-9.-]+$`, p.SPDXID)
		ids[p.SPDXID] = p.Name
	}
	require.Equal(t, map[string]string{
		"github.com/inorder-dev/inorder":         "pkg:golang/github.com/inorder-dev/inorder@v0.1.0",
		"stdlib":                                 "pkg:golang/stdlib@1.26.8",
		"github.com/jackc/pgx/v5":                "pkg:golang/github.com/jackc/pgx/v5@v5.12.0",
		"golang.org/x/crypto/x509roots/fallback": "pkg:golang/golang.org/x/crypto/x509roots/fallback@v0.0.0-20261030153154-30a33513ff6d",
		"example.com/new":                        "pkg:golang/example.com/new@v1.1.0",
	}, purls)
	require.Len(t, ids, len(doc.Packages), "identifiers are unique")

	var describes, dependsOn []string
	for _, r := range doc.Relationships {
		switch r.Type {
		case "DESCRIBES":
			describes = append(describes, ids[r.Related])
		case "DEPENDS_ON":
			require.Equal(t, "github.com/inorder-dev/inorder", ids[r.Element])
			dependsOn = append(dependsOn, ids[r.Related])
		}
	}
	require.Equal(t, []string{"github.com/inorder-dev/inorder"}, describes)
	require.ElementsMatch(t, []string{"stdlib", "github.com/jackc/pgx/v5", "golang.org/x/crypto/x509roots/fallback",
		"example.com/new"}, dependsOn)
}
