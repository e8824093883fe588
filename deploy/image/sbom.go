package image

import (
	"encoding/json"
	"fmt"
	"runtime/debug"
	"sort"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// spdxDocument is the part of an SPDX 2.3 JSON document written here.
type spdxDocument struct {
	SPDXVersion       string             `json:"spdxVersion"`
	DataLicense       string             `json:"dataLicense"`
	SPDXID            string             `json:"SPDXID"`
	Name              string             `json:"name"`
	DocumentNamespace string             `json:"documentNamespace"`
	CreationInfo      spdxCreationInfo   `json:"creationInfo"`
	Packages          []spdxPackage      `json:"packages"`
	Relationships     []spdxRelationship `json:"relationships"`
}

type spdxCreationInfo struct {
	Created  string   `json:"created"`
	Creators []string `json:"creators"`
}

type spdxPackage struct {
	Name             string            `json:"name"`
	SPDXID           string            `json:"SPDXID"`
	VersionInfo      string            `json:"versionInfo"`
	DownloadLocation string            `json:"downloadLocation"`
	FilesAnalyzed    bool              `json:"filesAnalyzed"`
	PrimaryPurpose   string            `json:"primaryPackagePurpose,omitempty"`
	Comment          string            `json:"comment,omitempty"`
	ExternalRefs     []spdxExternalRef `json:"externalRefs,omitempty"`
}

type spdxExternalRef struct {
	Category string `json:"referenceCategory"`
	Type     string `json:"referenceType"`
	Locator  string `json:"referenceLocator"`
}

type spdxRelationship struct {
	Element string `json:"spdxElementId"`
	Type    string `json:"relationshipType"`
	Related string `json:"relatedSpdxElement"`
}

// SPDX returns the SPDX 2.3 JSON document of a Go binary built for platform from its build information
// (debug/buildinfo.ReadFile, or debug.ParseBuildInfo of `go version -m`'s output): the main module as
// version, every module compiled in (a replaced one as its replacement) and the Go standard library,
// each with its package URL. sha256 is the binary's digest, hex, which makes the document's namespace
// unique. The document is the same for the same binary: its creation time is the commit's, when the build
// recorded one, else the Unix epoch.
func SPDX(info *debug.BuildInfo, platform v1.Platform, version, sha256 string) ([]byte, error) {
	if info == nil || info.Main.Path == "" {
		return nil, fmt.Errorf("no build information: not a Go binary built in module mode")
	}
	created := epoch
	var settings []string
	for _, s := range info.Settings {
		switch {
		case s.Key == "vcs.time":
			if t, err := time.Parse(time.RFC3339, s.Value); err == nil {
				created = t.UTC()
			}
		case s.Key == "-trimpath" || s.Key == "CGO_ENABLED" || s.Key == "GOOS" || s.Key == "GOARCH" ||
			s.Key == "vcs.revision" || s.Key == "-tags":
			settings = append(settings, s.Key+"="+s.Value)
		}
	}
	mainID := "SPDXRef-Package-" + spdxID(info.Main.Path)
	comment := "the binary " + info.Path + " for " + platform.String() + ", sha256 " + sha256
	if len(settings) > 0 {
		comment += ", built with " + strings.Join(settings, " ")
	}
	doc := spdxDocument{
		SPDXVersion:       "SPDX-2.3",
		DataLicense:       "CC0-1.0",
		SPDXID:            "SPDXRef-DOCUMENT",
		Name:              info.Path + " " + version + " " + platform.String(),
		DocumentNamespace: "https://github.com/inorder-dev/inorder/sbom/" + version + "/" + platform.OS + "-" + platform.Architecture + "-" + sha256,
		CreationInfo: spdxCreationInfo{
			Created:  created.Format(time.RFC3339),
			Creators: []string{"Tool: github.com/inorder-dev/inorder/deploy/image"},
		},
		Packages: []spdxPackage{{
			Name: info.Main.Path, SPDXID: mainID, VersionInfo: version, DownloadLocation: "https://" + info.Main.Path,
			PrimaryPurpose: "APPLICATION", Comment: comment,
			ExternalRefs: []spdxExternalRef{purl(info.Main.Path, version)},
		}},
		Relationships: []spdxRelationship{{Element: "SPDXRef-DOCUMENT", Type: "DESCRIBES", Related: mainID}},
	}
	goVersion := strings.TrimPrefix(info.GoVersion, "go")
	deps := []*debug.Module{{Path: "stdlib", Version: goVersion}}
	for _, d := range info.Deps {
		if d.Replace != nil {
			d = d.Replace
		}
		deps = append(deps, d)
	}
	sort.SliceStable(deps[1:], func(i, j int) bool { return deps[1+i].Path < deps[1+j].Path })
	for _, d := range deps {
		id := "SPDXRef-Package-" + spdxID(d.Path)
		doc.Packages = append(doc.Packages, spdxPackage{
			Name: d.Path, SPDXID: id, VersionInfo: d.Version, DownloadLocation: "NOASSERTION",
			PrimaryPurpose: "LIBRARY", ExternalRefs: []spdxExternalRef{purl(d.Path, d.Version)},
		})
		doc.Relationships = append(doc.Relationships, spdxRelationship{Element: mainID, Type: "DEPENDS_ON", Related: id})
	}
	return json.MarshalIndent(doc, "", "  ")
}

// purl is a Go module's package URL (pkg:golang/<module path>@<version>).
func purl(path, version string) spdxExternalRef {
	return spdxExternalRef{Category: "PACKAGE-MANAGER", Type: "purl", Locator: "pkg:golang/" + path + "@" + version}
}

// spdxID turns a module path into the characters an SPDX identifier allows (letters, digits, '.' and '-').
func spdxID(path string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '-' {
			return r
		}
		return '-'
	}, path)
}
