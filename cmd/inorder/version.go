package main

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
)

// version is the release this binary was built from: set by `make build` (-ldflags "-X main.version=..."),
// else the module's version in the build information (a `go install ...@v1.2.3` build), else "devel".
var version string

// versionLine is what `inorder version` and `inorder --version` print: the version, the commit it was
// built from where the build recorded one, and the Go version.
func versionLine() string {
	v, commit, modified := version, "", false
	if info, ok := debug.ReadBuildInfo(); ok {
		if v == "" && info.Main.Version != "" && info.Main.Version != "(devel)" {
			v = info.Main.Version
		}
		for _, s := range info.Settings {
			switch s.Key {
			case "vcs.revision":
				commit = s.Value
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
	}
	if v == "" {
		v = "devel"
	}
	line := "inorder " + v
	if commit != "" {
		if len(commit) > 12 {
			commit = commit[:12]
		}
		if modified {
			commit += ", modified"
		}
		line += " (commit " + commit + ")"
	}
	return line + " " + runtime.Version()
}

func versionCmd(args []string, stdout io.Writer) error {
	if len(args) > 0 {
		return usageErr("version takes no arguments")
	}
	fmt.Fprintln(stdout, versionLine())
	return nil
}
