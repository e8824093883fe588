// Command image writes inorder's container image as an OCI image layout, with no Docker daemon:
//
//	go run ./cmd/image -binary ../bin/inorder-linux -version v1.2.3 -out ../bin/image
//
// `make image` builds the static binary and runs it. Push the layout with any registry client, for
// example `crane push bin/image ghcr.io/you/inorder:v1.2.3`.
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/inorder-dev/inorder/deploy/image"
)

func main() {
	binary := flag.String("binary", "", "the inorder binary, built for linux with CGO_ENABLED=0")
	version := flag.String("version", "devel", "the version the image is labelled and tagged with")
	out := flag.String("out", "", "the directory to write the OCI image layout in")
	flag.Parse()
	if *binary == "" || *out == "" {
		fmt.Fprintln(os.Stderr, "image: -binary and -out are required")
		os.Exit(2)
	}
	img, err := image.Build(*binary, *version)
	if err == nil {
		err = image.WriteLayout(*out, img, *version)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "image: %v\n", err)
		os.Exit(1)
	}
	d, _ := img.Digest()
	fmt.Printf("image %s written to %s (%s)\n", *version, *out, d)
}
