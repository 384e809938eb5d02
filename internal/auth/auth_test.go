package auth_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/reinhq/rein/internal/auth"
)

// hashAlice is HashToken("alice-token"); hashBob is HashToken("bob-token").
var (
	hashAlice = auth.HashToken("alice-token")
	hashBob   = auth.HashToken("bob-token")
)

func TestParseDirectory(t *testing.T) {
	data := `{"principals": [
		{"id": "alice", "tenant": "acme", "roles": ["operator"], "token_sha256": "` + hashAlice + `"},
		{"id": "bob", "tenant": "globex", "roles": ["viewer", "approver"], "token_sha256": "` + strings.ToUpper(hashBob) + `"},
		{"id": "billing", "tenant": "acme", "roles": ["viewer"], "cert_cn": "billing.internal"}
	]}`
	d, err := auth.ParseDirectory([]byte(data))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		lookup func() (auth.Principal, bool)
		want   auth.Principal
		found  bool
	}{
		{"token", func() (auth.Principal, bool) { return d.Token("alice-token") }, auth.Principal{ID: "alice", Tenant: "acme", Roles: []auth.Role{auth.Operator}}, true},
		{"token with an upper-case hash", func() (auth.Principal, bool) { return d.Token("bob-token") }, auth.Principal{ID: "bob", Tenant: "globex", Roles: []auth.Role{auth.Viewer, auth.Approver}}, true},
		{"cert", func() (auth.Principal, bool) { return d.Cert("billing.internal") }, auth.Principal{ID: "billing", Tenant: "acme", Roles: []auth.Role{auth.Viewer}}, true},
		// Failure twins.
		{"unknown token", func() (auth.Principal, bool) { return d.Token("mallory-token") }, auth.Principal{}, false},
		{"the hash is not the token", func() (auth.Principal, bool) { return d.Token(hashAlice) }, auth.Principal{}, false},
		{"a cert CN is not a token", func() (auth.Principal, bool) { return d.Token("billing.internal") }, auth.Principal{}, false},
		{"a token is not a cert CN", func() (auth.Principal, bool) { return d.Cert("alice-token") }, auth.Principal{}, false},
		{"unknown cert", func() (auth.Principal, bool) { return d.Cert("mallory.internal") }, auth.Principal{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := tc.lookup()
			if ok != tc.found || !samePrincipal(got, tc.want) {
				t.Fatalf("got %+v, %v; want %+v, %v", got, ok, tc.want, tc.found)
			}
		})
	}

	empty, err := auth.ParseDirectory([]byte(`{"principals": []}`))
	if err != nil {
		t.Fatalf("an empty tokens file: %v", err)
	}
	if _, ok := empty.Token(""); ok {
		t.Fatal("the empty token found a principal in an empty directory")
	}
}

func samePrincipal(a, b auth.Principal) bool {
	if a.ID != b.ID || a.Tenant != b.Tenant || len(a.Roles) != len(b.Roles) {
		return false
	}
	for i := range a.Roles {
		if a.Roles[i] != b.Roles[i] {
			return false
		}
	}
	return true
}

func TestParseDirectoryRefuses(t *testing.T) {
	good := func(extra string) string {
		return `{"id": "alice", "tenant": "acme", "roles": ["operator"], "token_sha256": "` + hashAlice + `"` + extra + `}`
	}
	file := func(entries ...string) string { return `{"principals": [` + strings.Join(entries, ",") + `]}` }
	for _, tc := range []struct {
		name string
		data string
		// want are the parts the message must name.
		want []string
	}{
		{"not JSON", `principals: []`, []string{"not a tokens file"}},
		{"unknown top-level field", `{"principals": [], "users": []}`, []string{"not a tokens file", `"users"`}},
		{"unknown entry field", file(good(`, "role": "admin"`)), []string{"not a tokens file", `"role"`}},
		{"unknown role", file(good(""), `{"id": "bob", "tenant": "acme", "roles": ["viewer", "root"], "token_sha256": "`+hashBob+`"}`),
			[]string{"principals[1].roles", `"root"`, "viewer, operator, approver or admin"}},
		{"no roles", file(`{"id": "alice", "tenant": "acme", "token_sha256": "` + hashAlice + `"}`), []string{"principals[0].roles", "at least one role"}},
		{"empty roles", file(`{"id": "alice", "tenant": "acme", "roles": [], "token_sha256": "` + hashAlice + `"}`), []string{"principals[0].roles", "at least one role"}},
		{"both token and cert", file(good(`, "cert_cn": "alice.internal"`)), []string{"principals[0]", "token_sha256", "cert_cn", "not both"}},
		{"neither token nor cert", file(`{"id": "alice", "tenant": "acme", "roles": ["operator"]}`), []string{"principals[0]", "token_sha256 or cert_cn"}},
		{"bad hex", file(`{"id": "alice", "tenant": "acme", "roles": ["operator"], "token_sha256": "` + strings.Repeat("zz", 32) + `"}`),
			[]string{"principals[0].token_sha256", "64 hex digits"}},
		{"short hex", file(`{"id": "alice", "tenant": "acme", "roles": ["operator"], "token_sha256": "` + hashAlice[:62] + `"}`),
			[]string{"principals[0].token_sha256", "64 hex digits"}},
		{"the token itself instead of its hash", file(`{"id": "alice", "tenant": "acme", "roles": ["operator"], "token_sha256": "alice-token"}`),
			[]string{"principals[0].token_sha256", "64 hex digits"}},
		{"duplicate token", file(good(""), `{"id": "alice2", "tenant": "globex", "roles": ["viewer"], "token_sha256": "`+hashAlice+`"}`),
			[]string{"principals[1].token_sha256", "twice"}},
		{"duplicate cert", file(good(""),
			`{"id": "b1", "tenant": "acme", "roles": ["viewer"], "cert_cn": "billing.internal"}`,
			`{"id": "b2", "tenant": "acme", "roles": ["viewer"], "cert_cn": "billing.internal"}`),
			[]string{"principals[2].cert_cn", `"billing.internal"`, "twice"}},
		{"missing id", file(good(""), `{"tenant": "acme", "roles": ["viewer"], "token_sha256": "`+hashBob+`"}`),
			[]string{"principals[1]", "id and tenant are required"}},
		{"missing tenant", file(`{"id": "alice", "roles": ["viewer"], "token_sha256": "` + hashAlice + `"}`),
			[]string{"principals[0]", "id and tenant are required"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := auth.ParseDirectory([]byte(tc.data))
			if err == nil {
				t.Fatalf("accepted %s: %+v", tc.data, d)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not name %q", err, w)
				}
			}
		})
	}
}

func TestLoadDirectory(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "tokens.json")
	if err := os.WriteFile(good, []byte(`{"principals": [{"id": "alice", "tenant": "acme", "roles": ["admin"], "token_sha256": "`+hashAlice+`"}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	d, err := auth.LoadDirectory(good)
	if err != nil {
		t.Fatal(err)
	}
	if p, ok := d.Token("alice-token"); !ok || p.ID != "alice" {
		t.Fatalf("Token(alice-token) = %+v, %v", p, ok)
	}

	bad := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(bad, []byte(`{"principals": [{"id": "alice", "tenant": "acme", "roles": ["boss"], "token_sha256": "`+hashAlice+`"}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := auth.LoadDirectory(bad); err == nil || !strings.Contains(err.Error(), bad) || !strings.Contains(err.Error(), "principals[0].roles") {
		t.Fatalf("error %v should name the file and the entry", err)
	}
	if _, err := auth.LoadDirectory(filepath.Join(dir, "missing.json")); err == nil || !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a missing file: %v, want a not-exist error", err)
	}
}

func TestPrincipalHas(t *testing.T) {
	all := []auth.Role{auth.Viewer, auth.Operator, auth.Approver, auth.Admin, auth.OperatorOrApprover}
	for _, tc := range []struct {
		roles []auth.Role
		has   []auth.Role
	}{
		{[]auth.Role{auth.Admin}, all},
		{[]auth.Role{auth.Operator}, []auth.Role{auth.Viewer, auth.Operator, auth.OperatorOrApprover}},
		{[]auth.Role{auth.Approver}, []auth.Role{auth.Viewer, auth.Approver, auth.OperatorOrApprover}},
		{[]auth.Role{auth.Viewer}, []auth.Role{auth.Viewer}},
		{[]auth.Role{auth.Operator, auth.Approver}, []auth.Role{auth.Viewer, auth.Operator, auth.Approver, auth.OperatorOrApprover}},
		{nil, nil},
	} {
		p := auth.Principal{ID: "p", Tenant: "t", Roles: tc.roles}
		for _, r := range all {
			want := false
			for _, h := range tc.has {
				want = want || h == r
			}
			if got := p.Has(r); got != want {
				t.Errorf("principal with %v: Has(%s) = %v, want %v", tc.roles, r, got, want)
			}
		}
	}
}

func TestHashTokenMatchesSha256sum(t *testing.T) {
	for token, want := range map[string]string{
		// printf '' | sha256sum; printf abc | sha256sum
		"":    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
		"abc": "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",
	} {
		if got := auth.HashToken(token); got != want {
			t.Errorf("HashToken(%q) = %s, want %s", token, got, want)
		}
	}
	// What HashToken prints, the tokens file accepts, and the token finds it.
	d, err := auth.ParseDirectory([]byte(`{"principals": [{"id": "a", "tenant": "t", "roles": ["viewer"], "token_sha256": "` + auth.HashToken("abc") + `"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := d.Token("abc"); !ok {
		t.Fatal("the token whose HashToken is listed is not found")
	}
}

func TestRequired(t *testing.T) {
	want := map[string]auth.Role{
		"/rein.v1.RunService/StartRun":                                   auth.Operator,
		"/rein.v1.RunService/GetRun":                                     auth.Viewer,
		"/rein.v1.RunService/ListRuns":                                   auth.Viewer,
		"/rein.v1.RunService/ListEvents":                                 auth.Viewer,
		"/rein.v1.RunService/GetBlobs":                                   auth.Viewer,
		"/rein.v1.RunService/WatchRun":                                   auth.Viewer,
		"/rein.v1.RunService/WatchRuns":                                  auth.Viewer,
		"/rein.v1.RunService/CancelRun":                                  auth.Operator,
		"/rein.v1.RunService/ForkRun":                                    auth.Operator,
		"/rein.v1.RunService/ProvideInput":                               auth.Operator,
		"/rein.v1.RunService/DecideApproval":                             auth.Approver,
		"/rein.v1.RunService/SteerRun":                                   auth.Operator,
		"/rein.v1.RunService/RaiseBudget":                                auth.OperatorOrApprover,
		"/rein.v1.RunService/ImportRun":                                  auth.Admin,
		"/rein.v1.RunService/DeleteRun":                                  auth.Admin,
		"/rein.v1.RunService/ListDeletions":                              auth.Admin,
		"/rein.v1.RunService/GetServerInfo":                              auth.Viewer,
		"/rein.v1.RunService/CreateSchedule":                             auth.Operator,
		"/rein.v1.RunService/ListSchedules":                              auth.Viewer,
		"/rein.v1.RunService/PauseSchedule":                              auth.Operator,
		"/rein.v1.RunService/ResumeSchedule":                             auth.Operator,
		"/rein.v1.RunService/DeleteSchedule":                             auth.Operator,
		"/rein.v1.RunService/TriggerSchedule":                            auth.Operator,
		"/rein.v1.RunService/ListTasks":                                  auth.Viewer,
		"/rein.v1.RunService/GetTask":                                    auth.Viewer,
		"/rein.v1.StorageService/Backup":                                 auth.Admin,
		"/rein.v1.ClusterService/GetClusterStatus":                       auth.Admin,
		"/rein.v1.ClusterService/FinalizeCluster":                        auth.Admin,
		"/rein.v1.WebhookService/CreateWebhook":                          auth.Operator,
		"/rein.v1.WebhookService/ListWebhooks":                           auth.Operator,
		"/rein.v1.WebhookService/GetWebhook":                             auth.Operator,
		"/rein.v1.WebhookService/PauseWebhook":                           auth.Operator,
		"/rein.v1.WebhookService/ResumeWebhook":                          auth.Operator,
		"/rein.v1.WebhookService/DeleteWebhook":                          auth.Operator,
		"/rein.v1.WebhookService/TestWebhook":                            auth.Operator,
		"/rein.v1.WebhookService/ListWebhookDeliveries":                  auth.Operator,
		"/rein.v1.WebhookService/RedeliverWebhook":                       auth.Operator,
		"/grpc.reflection.v1.ServerReflection/ServerReflectionInfo":      auth.Viewer,
		"/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo": auth.Viewer,
	}
	for method, role := range want {
		got, err := auth.Required(method)
		if err != nil || got != role {
			t.Errorf("Required(%s) = %q, %v; want %s", method, got, err, role)
		}
	}
	rules := auth.Rules()
	for method, role := range rules {
		got, err := auth.Required(method)
		if err != nil || got != role {
			t.Errorf("Rules() says %s needs %s, Required says %q, %v", method, role, got, err)
		}
		if _, ok := want[method]; !ok {
			t.Errorf("rule for %s (%s) is not checked here; add it to want", method, role)
		}
		if auth.Public[method] {
			t.Errorf("%s is both public and ruled", method)
		}
	}
	// Rules returns a copy: changing it changes no rule.
	rules["/rein.v1.RunService/DecideApproval"] = auth.Viewer
	rules["/rein.v1.RunService/Nope"] = auth.Viewer
	if r, _ := auth.Required("/rein.v1.RunService/DecideApproval"); r != auth.Approver {
		t.Fatalf("changing Rules()'s map changed a rule: DecideApproval needs %s", r)
	}
	if _, err := auth.Required("/rein.v1.RunService/Nope"); err == nil {
		t.Fatal("changing Rules()'s map added a rule")
	}
}

func TestRequiredNoRule(t *testing.T) {
	for _, method := range []string{
		"/rein.v1.RunService/Nope",
		"/rein.v1.RunService/getrun",
		"rein.v1.RunService/GetRun",
		"/grpc.health.v1.Health/Check", // public, so it needs no role either
		"",
	} {
		r, err := auth.Required(method)
		if !errors.Is(err, auth.ErrNoRule) || r != "" {
			t.Errorf("Required(%q) = %q, %v; want ErrNoRule", method, r, err)
			continue
		}
		if !strings.Contains(err.Error(), method) {
			t.Errorf("error %q does not name the method %q", err, method)
		}
	}
}

func TestPrincipalContext(t *testing.T) {
	if p, ok := auth.FromContext(context.Background()); ok {
		t.Fatalf("a bare context carries %+v", p)
	}
	want := auth.Principal{ID: "alice", Tenant: "acme", Roles: []auth.Role{auth.Viewer}}
	p, ok := auth.FromContext(auth.WithPrincipal(context.Background(), want))
	if !ok || !samePrincipal(p, want) {
		t.Fatalf("FromContext = %+v, %v; want %+v", p, ok, want)
	}
}

// TestDirectoryPrincipal: a principal is found by tenant and ID, also when
// it has a token for each device; one listed with different roles is not,
// nor one of another tenant.
func TestDirectoryPrincipal(t *testing.T) {
	data := `{"principals": [
		{"id": "alice", "tenant": "acme", "roles": ["approver"], "token_sha256": "` + hashAlice + `"},
		{"id": "alice", "tenant": "acme", "roles": ["approver"], "token_sha256": "` + auth.HashToken("alice-laptop") + `"},
		{"id": "bob", "tenant": "acme", "roles": ["viewer"], "token_sha256": "` + hashBob + `"},
		{"id": "bob", "tenant": "acme", "roles": ["admin"], "cert_cn": "bob.internal"},
		{"id": "billing", "tenant": "acme", "roles": ["viewer"], "cert_cn": "billing.internal"}
	]}`
	d, err := auth.ParseDirectory([]byte(data))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		tenant, id string
		want       auth.Principal
		found      bool
	}{
		{"acme", "alice", auth.Principal{ID: "alice", Tenant: "acme", Roles: []auth.Role{auth.Approver}}, true},
		{"acme", "billing", auth.Principal{ID: "billing", Tenant: "acme", Roles: []auth.Role{auth.Viewer}}, true},
		// Failure twins.
		{"acme", "bob", auth.Principal{}, false},
		{"globex", "alice", auth.Principal{}, false},
		{"acme", "mallory", auth.Principal{}, false},
	} {
		got, ok := d.Principal(tc.tenant, tc.id)
		if ok != tc.found || !samePrincipal(got, tc.want) {
			t.Errorf("Principal(%q, %q) = %+v, %v; want %+v, %v", tc.tenant, tc.id, got, ok, tc.want, tc.found)
		}
	}
}
