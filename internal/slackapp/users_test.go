package slackapp_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/reinhq/rein/internal/slackapp"
)

func writeUsers(t *testing.T, path, data string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestUsersFile: a users file is read whole or refused with what to fix,
// and a reload that is refused keeps the mapping as it was.
func TestUsersFile(t *testing.T) {
	known := func(tenant, id string) bool { return tenant == "acme" && (id == "alice" || id == "carol") }
	path := filepath.Join(t.TempDir(), "users.json")
	good := `{"contact": "#rein-admins", "users": [{"team_id": "T1", "user_id": "U1", "principal": "alice", "tenant": "acme"}]}`
	writeUsers(t, path, good)
	u, err := slackapp.LoadUsers(path, known)
	if err != nil || u.Len() != 1 {
		t.Fatalf("LoadUsers: %v users, %v; want 1, no error", u, err)
	}
	for _, tc := range []struct {
		name, data, want string
	}{
		{"an unknown field", `{"users": [], "admins": []}`, `unknown field "admins"`},
		{"a missing principal", `{"users": [{"team_id": "T1", "user_id": "U1", "tenant": "acme"}]}`, "users[0]: team_id, user_id, principal and tenant are required"},
		{"a user twice", `{"users": [{"team_id": "T1", "user_id": "U1", "principal": "alice", "tenant": "acme"}, {"team_id": "T1", "user_id": "U1", "principal": "carol", "tenant": "acme"}]}`, "users[1]: Slack user U1 of team T1 is listed twice"},
		{"a principal the tokens file lacks", `{"users": [{"team_id": "T1", "user_id": "U1", "principal": "mallory", "tenant": "acme"}]}`, `principal "mallory" of tenant "acme" is not in the tokens file`},
		{"not JSON", `users: []`, "not a Slack users file"},
		{"two objects", good + good, "data after the first JSON object"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bad := filepath.Join(t.TempDir(), "users.json")
			writeUsers(t, bad, tc.data)
			if _, err := slackapp.LoadUsers(bad, known); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("LoadUsers: %v, want an error saying %q", err, tc.want)
			}
			writeUsers(t, path, tc.data)
			if _, err := u.Reload(); err == nil || u.Len() != 1 {
				t.Errorf("Reload of a bad file: %v, %d users; want an error and the mapping kept", err, u.Len())
			}
		})
	}
	writeUsers(t, path, `{"users": [{"team_id": "T1", "user_id": "U1", "principal": "alice", "tenant": "acme"}, {"team_id": "T1", "user_id": "U2", "principal": "carol", "tenant": "acme"}]}`)
	if n, err := u.Reload(); err != nil || n != 2 {
		t.Fatalf("Reload of a good file: %d, %v; want 2 users", n, err)
	}
}
