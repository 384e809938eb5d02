package step

import (
	"strings"
	"testing"
)

// A text CutText cut stays as it is when cut again (a replay feeds
// recorded texts back), and fits.
func TestCutTextIsStable(t *testing.T) {
	long := strings.Repeat("é", 40<<10)
	once := CutText(long, MaxInlineText)
	if len(once) > MaxInlineText || CutText(once, MaxInlineText) != once {
		t.Fatalf("cut once: %d bytes; cut again it changed: want at most %d and stable", len(once), MaxInlineText)
	}
}
