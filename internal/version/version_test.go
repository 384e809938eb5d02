package version

import (
	"runtime/debug"
	"testing"
	"time"
)

func TestFromBuildInfo(t *testing.T) {
	info := &debug.BuildInfo{
		GoVersion: "go1.26.8",
		Main:      debug.Module{Path: "github.com/reinhq/rein", Version: "v0.4.0"},
		Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "2742f29a0b1c2d3e4f5a6b7c8d9e0f1a2b3c4d5e"},
			{Key: "vcs.time", Value: "2026-12-01T11:30:00Z"},
			{Key: "vcs.modified", Value: "true"},
		},
	}
	b := FromBuildInfo(info)
	if b.GetVersion() != "v0.4.0" || b.GetRevision() != "2742f29a0b1c2d3e4f5a6b7c8d9e0f1a2b3c4d5e" || !b.GetModified() ||
		b.GetGoVersion() != "go1.26.8" || b.GetApiVersion() != "rein.v1" {
		t.Fatalf("FromBuildInfo = %v", b)
	}
	if got := b.GetRevisionTime().AsTime(); !got.Equal(time.Date(2026, 12, 1, 11, 30, 0, 0, time.UTC)) {
		t.Fatalf("revision time %v", got)
	}
	want := "rein v0.4.0 2742f29a0b1c 2026-12-01T11:30:00Z modified, go1.26.8, API rein.v1"
	if got := String(b); got != want {
		t.Fatalf("String = %q, want %q", got, want)
	}
}

// A build from a checkout with no VCS stamp says so instead of guessing.
func TestFromBuildInfoWithoutVCS(t *testing.T) {
	b := FromBuildInfo(&debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "github.com/reinhq/rein"}})
	if b.GetVersion() != "(devel)" || b.GetRevision() != "" || b.GetModified() || b.GetRevisionTime() != nil {
		t.Fatalf("FromBuildInfo = %v", b)
	}
	if got, want := String(b), "rein (devel), go1.26.8, API rein.v1"; got != want {
		t.Fatalf("String = %q, want %q", got, want)
	}
}
