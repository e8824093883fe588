// Command image writes inorder's container image, one OCI image index of a linux/amd64 and a linux/arm64
// image with an SPDX bill of materials for each, as an OCI image layout tagged with the version, with no
// Docker daemon:
//
//	go run ./cmd/image -version v1.2.3 -out ../bin/image \
//		-binary linux/amd64=../bin/inorder-linux-amd64 -binary linux/arm64=../bin/inorder-linux-arm64
//
// `make image` builds the static binaries and runs it. Push the layout with any registry client, for
// example `crane push bin/image ghcr.io/you/inorder:v1.2.3` or
// `skopeo copy --all oci:bin/image:v1.2.3 docker://ghcr.io/you/inorder:v1.2.3`.
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/inorder-dev/inorder/deploy/image"
)

// binaries is the repeated -binary flag: OS/ARCH=PATH.
type binaries []image.Binary

func (b *binaries) String() string { return "" }

func (b *binaries) Set(v string) error {
	platform, path, ok := strings.Cut(v, "=")
	osName, arch, ok2 := strings.Cut(platform, "/")
	if !ok || !ok2 || path == "" {
		return fmt.Errorf("want OS/ARCH=PATH, as linux/arm64=bin/inorder-linux-arm64")
	}
	*b = append(*b, image.Binary{Platform: v1.Platform{OS: osName, Architecture: arch}, Path: path})
	return nil
}

func main() {
	var bins binaries
	flag.Var(&bins, "binary", "`OS/ARCH=PATH`: the inorder binary built for that platform with CGO_ENABLED=0 (repeat it for each platform)")
	version := flag.String("version", "", "the version the image is labelled and tagged with")
	out := flag.String("out", "", "the directory to write the OCI image layout in")
	flag.Parse()
	if len(bins) == 0 || *out == "" || *version == "" {
		fmt.Fprintln(os.Stderr, "image: -binary, -version and -out are required")
		os.Exit(2)
	}
	idx, err := image.BuildIndex(*version, bins...)
	if err == nil {
		err = image.WriteLayout(*out, idx, *version)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "image: %v\n", err)
		os.Exit(1)
	}
	d, _ := idx.Digest()
	fmt.Printf("image %s (%d platforms, each with its SPDX document) written to %s (%s)\n", *version, len(bins), *out, d)
}
