// Package auth holds rein's principals, their roles, and the rule that says
// which role each RPC needs. A principal belongs to one tenant and sees only
// that tenant's runs.
package auth

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
)

// Role is what a principal may do.
type Role string

// The roles. admin may do everything; operator and approver may also do
// what a viewer may.
const (
	Viewer   Role = "viewer"
	Operator Role = "operator"
	Approver Role = "approver"
	Admin    Role = "admin"
	// OperatorOrApprover is held by an operator and by an approver: a
	// raise of a run's budget is either's to give.
	OperatorOrApprover Role = "operator or approver"
)

// Principal is an authenticated caller.
type Principal struct {
	ID     string
	Tenant string
	Roles  []Role
}

// Has reports whether p holds role r, directly or through admin (all) or
// operator/approver (which include viewer).
func (p Principal) Has(r Role) bool {
	for _, have := range p.Roles {
		switch {
		case have == r, have == Admin:
			return true
		case (r == Viewer || r == OperatorOrApprover) && (have == Operator || have == Approver):
			return true
		}
	}
	return false
}

type ctxKey struct{}

// WithPrincipal returns ctx carrying p.
func WithPrincipal(ctx context.Context, p Principal) context.Context {
	return context.WithValue(ctx, ctxKey{}, p)
}

// FromContext returns the principal ctx carries.
func FromContext(ctx context.Context) (Principal, bool) {
	p, ok := ctx.Value(ctxKey{}).(Principal)
	return p, ok
}

// Directory maps credentials to principals: a bearer token by its SHA-256,
// or a client certificate by its subject's common name.
type Directory struct {
	byToken map[[sha256.Size]byte]Principal
	byCN    map[string]Principal
	// byID holds each principal by tenant and ID; an ID listed twice in a
	// tenant with different roles is in mixed, and Principal refuses it.
	byID  map[[2]string]Principal
	mixed map[[2]string]bool
}

// tokensFile is the tokens file's JSON form.
type tokensFile struct {
	Principals []struct {
		ID          string   `json:"id"`
		Tenant      string   `json:"tenant"`
		Roles       []string `json:"roles"`
		TokenSHA256 string   `json:"token_sha256"`
		CertCN      string   `json:"cert_cn"`
	} `json:"principals"`
}

// LoadDirectory reads a tokens file. Every problem names the entry and what
// to fix.
func LoadDirectory(path string) (*Directory, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read tokens file: %w", err)
	}
	d, err := ParseDirectory(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return d, nil
}

// ParseDirectory parses the tokens file format:
//
//	{"principals": [{"id": "alice", "tenant": "acme", "roles": ["operator"],
//	                 "token_sha256": "<hex SHA-256 of the token>"},
//	                {"id": "billing", "tenant": "acme", "roles": ["viewer"],
//	                 "cert_cn": "billing.internal"}]}
func ParseDirectory(data []byte) (*Directory, error) {
	var f tokensFile
	dec := json.NewDecoder(strings.NewReader(string(data)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("not a tokens file: %w", err)
	}
	if dec.More() {
		return nil, fmt.Errorf("not a tokens file: data after the first JSON object")
	}
	d := &Directory{byToken: map[[sha256.Size]byte]Principal{}, byCN: map[string]Principal{}, byID: map[[2]string]Principal{}, mixed: map[[2]string]bool{}}
	for i, e := range f.Principals {
		where := fmt.Sprintf("principals[%d]", i)
		if e.ID == "" || e.Tenant == "" {
			return nil, fmt.Errorf("%s: id and tenant are required", where)
		}
		p := Principal{ID: e.ID, Tenant: e.Tenant}
		for _, r := range e.Roles {
			role := Role(r)
			if !slices.Contains([]Role{Viewer, Operator, Approver, Admin}, role) {
				return nil, fmt.Errorf("%s.roles: unknown role %q; use viewer, operator, approver or admin", where, r)
			}
			p.Roles = append(p.Roles, role)
		}
		if len(p.Roles) == 0 {
			return nil, fmt.Errorf("%s.roles: give at least one role", where)
		}
		key := [2]string{p.Tenant, p.ID}
		if had, ok := d.byID[key]; ok && !slices.Equal(had.Roles, p.Roles) {
			d.mixed[key] = true
		}
		d.byID[key] = p
		switch {
		case e.TokenSHA256 != "" && e.CertCN != "":
			return nil, fmt.Errorf("%s: give token_sha256 or cert_cn, not both", where)
		case e.TokenSHA256 != "":
			sum, err := hex.DecodeString(e.TokenSHA256)
			if err != nil || len(sum) != sha256.Size {
				return nil, fmt.Errorf("%s.token_sha256: want 64 hex digits (sha256sum of the token)", where)
			}
			key := [sha256.Size]byte(sum)
			if _, dup := d.byToken[key]; dup {
				return nil, fmt.Errorf("%s.token_sha256: the same token is listed twice", where)
			}
			d.byToken[key] = p
		case e.CertCN != "":
			if _, dup := d.byCN[e.CertCN]; dup {
				return nil, fmt.Errorf("%s.cert_cn: %q is listed twice", where, e.CertCN)
			}
			d.byCN[e.CertCN] = p
		default:
			return nil, fmt.Errorf("%s: give token_sha256 or cert_cn", where)
		}
	}
	return d, nil
}

// HashToken is the hex SHA-256 of a token, as a tokens file lists it.
func HashToken(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

// Token returns the principal of a bearer token.
func (d *Directory) Token(token string) (Principal, bool) {
	p, ok := d.byToken[sha256.Sum256([]byte(token))]
	return p, ok
}

// Cert returns the principal of a client certificate's common name.
func (d *Directory) Cert(cn string) (Principal, bool) {
	p, ok := d.byCN[cn]
	return p, ok
}

// Principal returns the principal id of tenant, for a face that names its
// callers by its own proof (a chat tool's signed request mapped to a
// principal) rather than by a credential. An ID listed several times with
// the same roles (a token for each device, say) is found; one listed with
// different roles is not, as which of them applies would be a guess.
func (d *Directory) Principal(tenant, id string) (Principal, bool) {
	key := [2]string{tenant, id}
	p, ok := d.byID[key]
	if !ok || d.mixed[key] {
		return Principal{}, false
	}
	return p, true
}

// ErrNoRule is returned by Required for a method with no rule.
var ErrNoRule = errors.New("no auth rule for this method")

// Public methods need no credentials.
var Public = map[string]bool{
	"/grpc.health.v1.Health/Check": true,
	"/grpc.health.v1.Health/Watch": true,
	"/grpc.health.v1.Health/List":  true,
}

// rules is the role each RPC needs. A method missing here is refused, and a
// test fails when the API has a method this table lacks.
var rules = map[string]Role{
	"/rein.v1.RunService/StartRun":       Operator,
	"/rein.v1.RunService/GetRun":         Viewer,
	"/rein.v1.RunService/ListRuns":       Viewer,
	"/rein.v1.RunService/ListEvents":     Viewer,
	"/rein.v1.RunService/GetBlobs":       Viewer,
	"/rein.v1.RunService/WatchRun":       Viewer,
	"/rein.v1.RunService/WatchRuns":      Viewer,
	"/rein.v1.RunService/CancelRun":      Operator,
	"/rein.v1.RunService/ForkRun":        Operator,
	"/rein.v1.RunService/ProvideInput":   Operator,
	"/rein.v1.RunService/DecideApproval": Approver,
	// A message to a running run: the starter of a run needed operator.
	"/rein.v1.RunService/SteerRun": Operator,
	// More budget for a run paused on it.
	"/rein.v1.RunService/RaiseBudget": OperatorOrApprover,
	// An import writes a history the caller did not make, and the server
	// carries the run on with its tools (proto/rein/v1/run_service.proto).
	"/rein.v1.RunService/ImportRun": Admin,
	// Erasure destroys a run's record for good, and the deletion records
	// name who deleted what.
	"/rein.v1.RunService/DeleteRun":     Admin,
	"/rein.v1.RunService/ListDeletions": Admin,
	// Which rein answers, for `rein version --server`: any principal.
	"/rein.v1.RunService/GetServerInfo": Viewer,

	"/rein.v1.RunService/CreateSchedule":  Operator,
	"/rein.v1.RunService/ListSchedules":   Viewer,
	"/rein.v1.RunService/PauseSchedule":   Operator,
	"/rein.v1.RunService/ResumeSchedule":  Operator,
	"/rein.v1.RunService/DeleteSchedule":  Operator,
	"/rein.v1.RunService/TriggerSchedule": Operator,
	// The catalog lists only what the caller may start; reading it is any
	// principal's.
	"/rein.v1.RunService/ListTasks": Viewer,
	"/rein.v1.RunService/GetTask":   Viewer,
	// A backup is a copy of every tenant's runs.
	"/rein.v1.StorageService/Backup": Admin,
	// The store format of the servers sharing a store, and its
	// finalization, which a downgrade cannot undo (docs/upgrading.md).
	"/rein.v1.ClusterService/GetClusterStatus": Admin,
	"/rein.v1.ClusterService/FinalizeCluster":  Admin,
	// Webhook subscriptions call out with the tenant's runs: an operator's
	// (or admin's) to keep.
	"/rein.v1.WebhookService/CreateWebhook":         Operator,
	"/rein.v1.WebhookService/ListWebhooks":          Operator,
	"/rein.v1.WebhookService/GetWebhook":            Operator,
	"/rein.v1.WebhookService/PauseWebhook":          Operator,
	"/rein.v1.WebhookService/ResumeWebhook":         Operator,
	"/rein.v1.WebhookService/DeleteWebhook":         Operator,
	"/rein.v1.WebhookService/TestWebhook":           Operator,
	"/rein.v1.WebhookService/ListWebhookDeliveries": Operator,
	"/rein.v1.WebhookService/RedeliverWebhook":      Operator,
	// Server reflection, for grpcurl: any principal.
	"/grpc.reflection.v1.ServerReflection/ServerReflectionInfo":      Viewer,
	"/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo": Viewer,
}

// Required is the role a method needs.
func Required(fullMethod string) (Role, error) {
	r, ok := rules[fullMethod]
	if !ok {
		return "", fmt.Errorf("%w: %s", ErrNoRule, fullMethod)
	}
	return r, nil
}

// Rules returns a copy of the method → role table (for docs and tests).
func Rules() map[string]Role {
	out := make(map[string]Role, len(rules))
	for k, v := range rules {
		out[k] = v
	}
	return out
}
