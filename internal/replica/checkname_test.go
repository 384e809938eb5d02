package replica_test

import (
	"strings"
	"testing"

	"github.com/reinhq/rein/internal/replica"
)

// TestCheckName: names two operators would read as one ("r1 " beside
// "r1"), or that do not fit in a key or a log line, are refused with what
// is wrong; the twins, names of letters, digits and punctuation, pass.
func TestCheckName(t *testing.T) {
	for _, ok := range []string{"r1", "eu-west-1a.rein-2", "host_7-12345", "réplica", strings.Repeat("a", 128)} {
		if err := replica.CheckName(ok); err != nil {
			t.Errorf("CheckName(%q) = %v, want nil", ok, err)
		}
	}
	for _, tc := range []struct{ name, says string }{
		{"", "empty"},
		{"r1 ", "no space"},
		{" r1", "no space"},
		{"r 1", "no space"},
		{"r1\t", "no space"},
		{"r1\n", "no space"},
		{"r1\u00a0", "no space"},
		{"r1\x00", `'\x00'`},
		{"eu/r1", `'/'`},
		{"r1\xff", "not valid UTF-8"},
		{strings.Repeat("a", 129), "over 128"},
	} {
		err := replica.CheckName(tc.name)
		if err == nil || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("CheckName(%q) = %v, want an error saying %q", tc.name, err, tc.says)
		}
	}
}
