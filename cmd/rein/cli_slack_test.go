package main

import (
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/reinhq/rein/internal/slackapp"
)

// TestServeSlackActions: rein serve --http with the Slack flags serves
// Slack's action endpoint: a click not signed with the app's secret is
// 401, a signed interaction that is not a click of rein's buttons 200.
// The twins: without the flags the path takes no clicks, and the flags
// are refused without --http, without --tokens, one without the other,
// with a secret file others may read, and with a users file naming a
// principal the tokens file lacks.
func TestServeSlackActions(t *testing.T) {
	tokens := writeFile(t, "tokens.json", `{"principals": [{"id": "alice", "tenant": "acme", "roles": ["approver"], "token_sha256": "`+hashOf("alice-token")+`"}]}`)
	secret := writeFile(t, "slack-secret", "s3cr3t\n")
	users := writeFile(t, "slack-users.json", `{"contact": "#rein-admins", "users": [{"team_id": "T1", "user_id": "U1", "principal": "alice", "tenant": "acme"}]}`)
	web := freeAddr(t)
	serveInProcess(t, newDB(t), "--http", web, "--tokens", tokens, "--slack-signing-secret-file", secret, "--slack-users", users)

	body := url.Values{"payload": {`{"type": "view_submission", "user": {"id": "U1", "team_id": "T1"}}`}}.Encode()
	post := func(addr, signature string) int {
		req, _ := http.NewRequest(http.MethodPost, "http://"+addr+slackapp.Path, strings.NewReader(body))
		ts := strconv.FormatInt(time.Now().Unix(), 10)
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("X-Slack-Request-Timestamp", ts)
		if signature != "" {
			req.Header.Set("X-Slack-Signature", slackapp.Sign([]byte(signature), ts, []byte(body)))
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
		return resp.StatusCode
	}
	if code := post(web, ""); code != http.StatusUnauthorized {
		t.Errorf("an unsigned post: HTTP %d, want 401", code)
	}
	if code := post(web, "another secret"); code != http.StatusUnauthorized {
		t.Errorf("a post signed with another secret: HTTP %d, want 401", code)
	}
	if code := post(web, "s3cr3t"); code != http.StatusOK {
		t.Errorf("a signed post: HTTP %d, want 200", code)
	}

	plain := freeAddr(t)
	serveInProcess(t, newDB(t), "--http", plain, "--tokens", tokens)
	if code := post(plain, "s3cr3t"); code == http.StatusOK || code == http.StatusUnauthorized {
		t.Errorf("without the Slack flags a signed post got HTTP %d, as if the endpoint were served", code)
	}

	readable := filepath.Join(t.TempDir(), "slack-secret")
	if err := os.WriteFile(readable, []byte("s3cr3t"), 0o644); err != nil {
		t.Fatal(err)
	}
	stranger := writeFile(t, "strangers.json", `{"users": [{"team_id": "T1", "user_id": "U1", "principal": "mallory", "tenant": "acme"}]}`)
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"without --http", []string{"--tokens", tokens, "--slack-signing-secret-file", secret, "--slack-users", users}, "--slack-signing-secret-file is for the HTTP face"},
		{"without --tokens", []string{"--http", "127.0.0.1:0", "--slack-signing-secret-file", secret, "--slack-users", users}, "give --tokens too"},
		{"without --slack-users", []string{"--http", "127.0.0.1:0", "--tokens", tokens, "--slack-signing-secret-file", secret}, "needs both"},
		{"a secret others may read", []string{"--http", "127.0.0.1:0", "--tokens", tokens, "--slack-signing-secret-file", readable, "--slack-users", users}, "readable by others"},
		{"a principal the tokens file lacks", []string{"--http", "127.0.0.1:0", "--tokens", tokens, "--slack-signing-secret-file", secret, "--slack-users", stranger}, `principal "mallory" of tenant "acme" is not in the tokens file`},
		{"a response URL that is not a prefix", []string{"--http", "127.0.0.1:0", "--tokens", tokens, "--slack-signing-secret-file", secret, "--slack-users", users, "--slack-response-url", "hooks.slack.com"}, "--slack-response-url"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := cli(t, append([]string{"serve", "--db", newDB(t), "--listen", "127.0.0.1:0"}, tc.args...)...).mustExit(t, exitUsage)
			mustContain(t, tc.name, r.stderr, tc.want)
		})
	}
}
