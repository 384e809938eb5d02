// Package version says what a rein binary was built from, as the Go
// toolchain recorded it (runtime/debug.ReadBuildInfo): the module version,
// the VCS revision and its time, whether the tree was modified, and the Go
// version. The API version is the Protobuf package rein serves.
package version

import (
	"fmt"
	"runtime/debug"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
)

// API is the API version: the Protobuf package of rein's services.
var API = string(reinv1.File_rein_v1_run_service_proto.Package())

// Get returns this binary's build.
func Get() *reinv1.BuildInfo {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return &reinv1.BuildInfo{Version: "(unknown)", ApiVersion: API}
	}
	return FromBuildInfo(info)
}

// FromBuildInfo reads a build from what the toolchain recorded.
func FromBuildInfo(info *debug.BuildInfo) *reinv1.BuildInfo {
	b := &reinv1.BuildInfo{Version: info.Main.Version, GoVersion: info.GoVersion, ApiVersion: API}
	if b.Version == "" {
		b.Version = "(devel)"
	}
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			b.Revision = s.Value
		case "vcs.time":
			if t, err := time.Parse(time.RFC3339, s.Value); err == nil {
				b.RevisionTime = timestamppb.New(t)
			}
		case "vcs.modified":
			b.Modified = s.Value == "true"
		}
	}
	return b
}

// String is the build in one line, as `rein --version` prints it:
// "rein (devel) 2742f29 2026-12-01T11:30:00Z modified, go1.26.8, API rein.v1".
func String(b *reinv1.BuildInfo) string {
	parts := []string{"rein " + b.GetVersion()}
	if r := b.GetRevision(); r != "" {
		if len(r) > 12 {
			r = r[:12]
		}
		parts = append(parts, r)
	}
	if t := b.GetRevisionTime(); t != nil {
		parts = append(parts, t.AsTime().UTC().Format(time.RFC3339))
	}
	if b.GetModified() {
		parts = append(parts, "modified")
	}
	s := strings.Join(parts, " ")
	if g := b.GetGoVersion(); g != "" {
		s += ", " + g
	}
	return fmt.Sprintf("%s, API %s", s, b.GetApiVersion())
}
