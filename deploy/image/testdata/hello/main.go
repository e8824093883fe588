// Command hello stands in for inorder in the image's tests: a static Go binary, small enough to build for
// every platform in a second or two, that says which platform it was built for.
package main

import (
	"os"
	"runtime"
)

func main() { os.Stdout.WriteString("hello from " + runtime.GOOS + "/" + runtime.GOARCH + "\n") }
