package tools_test

import (
	"strings"
	"testing"

	"github.com/reinhq/rein/internal/tools"
)

// TestCheckName: the tool-name rule is ToolGrant.name's protovalidate
// pattern, 1-64 letters, digits, '_', '.' or '-', and its refusal is the
// rule's message; a server name is what leaves NAME.TOOL a tool name.
func TestCheckName(t *testing.T) {
	const pattern = "does not match regex pattern `^[A-Za-z0-9_.-]{1,64}$`"
	for _, tc := range []struct {
		name         string
		tool, server bool
	}{
		{"billing", true, true},
		{"my_files-2", true, true},
		{"invoices.get", true, false},
		{strings.Repeat("n", 62), true, true},
		{strings.Repeat("n", 63), true, false},
		{strings.Repeat("n", 64), true, false},
		{strings.Repeat("n", 65), false, false},
		{"", false, false},
		{"bil ling", false, false},
		{"fs/x", false, false},
		{"ünï", false, false},
	} {
		err := tools.CheckName(tc.name)
		if (err == nil) != tc.tool || (err != nil && err.Error() != pattern) {
			t.Errorf("CheckName(%q) = %v, want accepted %v (refused with %q)", tc.name, err, tc.tool, pattern)
		}
		err = tools.CheckServerName(tc.name)
		if (err == nil) != tc.server {
			t.Errorf("CheckServerName(%q) = %v, want accepted %v", tc.name, err, tc.server)
		}
		if err != nil && !strings.Contains(err.Error(), "'.'") && !strings.HasSuffix(err.Error(), pattern) {
			t.Errorf("CheckServerName(%q) = %v, want the '.' or the rule's message", tc.name, err)
		}
	}
}
