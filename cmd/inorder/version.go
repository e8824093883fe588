package main

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
)

// version is the release this binary was built from: set by `make build` (-ldflags "-X main.version=...",
// from the tag, else from the CHANGELOG's latest release), else the module's version in the build
// information (a `go install ...@v0.1.0` build), else "devel".
var version string

// buildVersion is the version this binary says it is (see version) and the commit it was built from, where
// the build recorded one, with whether the work tree had changes.
func buildVersion() (v, commit string, modified bool) {
	info, ok := debug.ReadBuildInfo()
	return versionOf(version, info, ok)
}

// versionOf is buildVersion for a stamped version (empty when none) and build information.
func versionOf(stamped string, info *debug.BuildInfo, ok bool) (v, commit string, modified bool) {
	v = stamped
	if ok {
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
	return v, commit, modified
}

// versionLine is what `inorder version` and `inorder --version` print: the version, the commit it was
// built from where the build recorded one, and the Go version.
func versionLine() string {
	v, commit, modified := buildVersion()
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
