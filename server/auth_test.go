package server

import (
	"context"
	"crypto/rand"
	"net"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/auth"
)

// The principals of the tokens file the auth tests serve with: one of each
// role in two tenants. A principal's token is its ID + "-token".
var testPrincipals = []auth.Principal{
	{ID: "a-viewer", Tenant: "acme", Roles: []auth.Role{auth.Viewer}},
	{ID: "a-operator", Tenant: "acme", Roles: []auth.Role{auth.Operator}},
	{ID: "a-approver", Tenant: "acme", Roles: []auth.Role{auth.Approver}},
	{ID: "a-admin", Tenant: "acme", Roles: []auth.Role{auth.Admin}},
	{ID: "b-viewer", Tenant: "globex", Roles: []auth.Role{auth.Viewer}},
	{ID: "b-operator", Tenant: "globex", Roles: []auth.Role{auth.Operator}},
	{ID: "b-admin", Tenant: "globex", Roles: []auth.Role{auth.Admin}},
}

// testDirectory is testPrincipals as a parsed tokens file.
func testDirectory(t *testing.T) *auth.Directory {
	t.Helper()
	var entries []string
	for _, p := range testPrincipals {
		var roles []string
		for _, r := range p.Roles {
			roles = append(roles, `"`+string(r)+`"`)
		}
		entries = append(entries, `{"id": "`+p.ID+`", "tenant": "`+p.Tenant+`", "roles": [`+strings.Join(roles, ",")+
			`], "token_sha256": "`+auth.HashToken(p.ID+"-token")+`"}`)
	}
	d, err := auth.ParseDirectory([]byte(`{"principals": [` + strings.Join(entries, ",") + `]}`))
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// bearerToken sends "authorization: Bearer TOKEN" with a call.
type bearerToken string

func (b bearerToken) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(b)}, nil
}

func (bearerToken) RequireTransportSecurity() bool { return false }

// as is the per-RPC credential of a test principal.
func as(id string) grpc.CallOption { return grpc.PerRPCCredentials(bearerToken(id + "-token")) }

// tcpServer is a real node served on 127.0.0.1:0, so that callers are real
// loopback TCP peers, reached through the generated client.
type tcpServer struct {
	node   *Node
	conn   *grpc.ClientConn
	client reinv1.RunServiceClient
}

func newTCPServer(t *testing.T, cfg Config) *tcpServer {
	t.Helper()
	cfg.Store = tempBolt(t)
	return serveTCP(t, cfg)
}

// serveTCP opens a node on cfg's store and serves it as newTCPServer does.
func serveTCP(t testing.TB, cfg Config) *tcpServer {
	t.Helper()
	if cfg.Tools == nil {
		cfg.Tools = fixtures() // the tool contract grants: a server refuses a grant it has no tool for
	}
	node, err := Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		node.Close()
		t.Fatal(err)
	}
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = node.GRPC.Serve(lis)
	}()
	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		node.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cc.Close()
		node.Close()
		<-served
	})
	return &tcpServer{node: node, conn: cc, client: reinv1.NewRunServiceClient(cc)}
}

// startAs starts a run as a principal and watches it to its first pause or
// end.
func (s *tcpServer) startAs(t *testing.T, who string, c *reinv1.TaskContract) *reinv1.Run {
	t.Helper()
	resp, err := s.client.StartRun(context.Background(), &reinv1.StartRunRequest{RequestId: rand.Text(), Contract: c}, as(who))
	if err != nil {
		t.Fatalf("StartRun as %s: %v", who, err)
	}
	return s.waitRest(t, who, resp.GetRun().GetRunId(), 0)
}

// rpcCall makes one valid call of an RPC about a run (ignored by RPCs that
// name none). A streaming call returns the error of the first Recv.
type rpcCall func(ctx context.Context, c reinv1.RunServiceClient, runID string, opts ...grpc.CallOption) error

// rpcCase is how the auth matrix calls an RPC.
type rpcCase struct {
	// names a run: the call is answered NotFound for another tenant's run.
	namesRun bool
	// ok is the code the right role in the right tenant gets, on a paused run.
	ok codes.Code
	// alsoOK is a second code that shows the call got past auth (input to a
	// run that another principal's input already resumed).
	alsoOK codes.Code
	call   rpcCall
}

// passed reports whether code shows the call got past auth as it should.
func (c rpcCase) passed(code codes.Code) bool {
	return code == c.ok || (c.alsoOK != codes.OK && code == c.alsoOK)
}

// rpcCases has a valid request for every RunService RPC. TestAuthMatrix fails
// for an RPC missing here: add it, and its rule in internal/auth.
var rpcCases = map[string]rpcCase{
	"ListTasks": {ok: codes.OK, call: func(ctx context.Context, c reinv1.RunServiceClient, _ string, opts ...grpc.CallOption) error {
		_, err := c.ListTasks(ctx, &reinv1.ListTasksRequest{}, opts...)
		return err
	}},
	// The test server has no catalog: NotFound is past auth.
	"GetTask": {ok: codes.NotFound, call: func(ctx context.Context, c reinv1.RunServiceClient, _ string, opts ...grpc.CallOption) error {
		_, err := c.GetTask(ctx, &reinv1.GetTaskRequest{Name: "none"}, opts...)
		return err
	}},
	"CreateSchedule": {ok: codes.OK, call: func(ctx context.Context, c reinv1.RunServiceClient, _ string, opts ...grpc.CallOption) error {
		_, err := c.CreateSchedule(ctx, &reinv1.CreateScheduleRequest{Schedule: &reinv1.Schedule{Name: rand.Text(), Cron: "@yearly", Contract: contract(nil, final("done"))}}, opts...)
		return err
	}},
	"ListSchedules": {ok: codes.OK, call: func(ctx context.Context, c reinv1.RunServiceClient, _ string, opts ...grpc.CallOption) error {
		_, err := c.ListSchedules(ctx, &reinv1.ListSchedulesRequest{}, opts...)
		return err
	}},
	// A schedule that does not exist: NotFound is past auth.
	"PauseSchedule": {ok: codes.NotFound, call: func(ctx context.Context, c reinv1.RunServiceClient, _ string, opts ...grpc.CallOption) error {
		_, err := c.PauseSchedule(ctx, &reinv1.PauseScheduleRequest{Name: "none"}, opts...)
		return err
	}},
	"ResumeSchedule": {ok: codes.NotFound, call: func(ctx context.Context, c reinv1.RunServiceClient, _ string, opts ...grpc.CallOption) error {
		_, err := c.ResumeSchedule(ctx, &reinv1.ResumeScheduleRequest{Name: "none"}, opts...)
		return err
	}},
	"DeleteSchedule": {ok: codes.NotFound, call: func(ctx context.Context, c reinv1.RunServiceClient, _ string, opts ...grpc.CallOption) error {
		_, err := c.DeleteSchedule(ctx, &reinv1.DeleteScheduleRequest{Name: "none"}, opts...)
		return err
	}},
	"TriggerSchedule": {ok: codes.NotFound, call: func(ctx context.Context, c reinv1.RunServiceClient, _ string, opts ...grpc.CallOption) error {
		_, err := c.TriggerSchedule(ctx, &reinv1.TriggerScheduleRequest{Name: "none", RequestId: "r"}, opts...)
		return err
	}},
	"StartRun": {ok: codes.OK, call: func(ctx context.Context, c reinv1.RunServiceClient, _ string, opts ...grpc.CallOption) error {
		_, err := c.StartRun(ctx, &reinv1.StartRunRequest{RequestId: rand.Text(), Contract: contract(nil, final("done"))}, opts...)
		return err
	}},
	"GetServerInfo": {ok: codes.OK, call: func(ctx context.Context, c reinv1.RunServiceClient, _ string, opts ...grpc.CallOption) error {
		_, err := c.GetServerInfo(ctx, &reinv1.GetServerInfoRequest{}, opts...)
		return err
	}},
	"GetRun": {namesRun: true, ok: codes.OK, call: func(ctx context.Context, c reinv1.RunServiceClient, runID string, opts ...grpc.CallOption) error {
		_, err := c.GetRun(ctx, &reinv1.GetRunRequest{RunId: runID}, opts...)
		return err
	}},
	"ListRuns": {ok: codes.OK, call: func(ctx context.Context, c reinv1.RunServiceClient, _ string, opts ...grpc.CallOption) error {
		_, err := c.ListRuns(ctx, &reinv1.ListRunsRequest{}, opts...)
		return err
	}},
	"ListEvents": {namesRun: true, ok: codes.OK, call: func(ctx context.Context, c reinv1.RunServiceClient, runID string, opts ...grpc.CallOption) error {
		_, err := c.ListEvents(ctx, &reinv1.ListEventsRequest{RunId: runID}, opts...)
		return err
	}},
	// The run references no such blob: authorized callers reach the check.
	"GetBlobs": {namesRun: true, ok: codes.InvalidArgument, call: func(ctx context.Context, c reinv1.RunServiceClient, runID string, opts ...grpc.CallOption) error {
		_, err := c.GetBlobs(ctx, &reinv1.GetBlobsRequest{RunId: runID, Hashes: []string{strings.Repeat("0", 64)}}, opts...)
		return err
	}},
	"WatchRun": {namesRun: true, ok: codes.OK, call: func(ctx context.Context, c reinv1.RunServiceClient, runID string, opts ...grpc.CallOption) error {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		stream, err := c.WatchRun(ctx, &reinv1.WatchRunRequest{RunId: runID}, opts...)
		if err != nil {
			return err
		}
		_, err = stream.Recv()
		return err
	}},
	// The tenant's first change is there to receive: every matrix case
	// starts a run first. TestWatchRunsTenantIsolation checks the tenants.
	"WatchRuns": {ok: codes.OK, call: func(ctx context.Context, c reinv1.RunServiceClient, _ string, opts ...grpc.CallOption) error {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		stream, err := c.WatchRuns(ctx, &reinv1.WatchRunsRequest{}, opts...)
		if err != nil {
			return err
		}
		_, err = stream.Recv()
		return err
	}},
	"CancelRun": {namesRun: true, ok: codes.OK, call: func(ctx context.Context, c reinv1.RunServiceClient, runID string, opts ...grpc.CallOption) error {
		_, err := c.CancelRun(ctx, &reinv1.CancelRunRequest{RunId: runID, Reason: "auth matrix"}, opts...)
		return err
	}},
	"ForkRun": {namesRun: true, ok: codes.OK, call: func(ctx context.Context, c reinv1.RunServiceClient, runID string, opts ...grpc.CallOption) error {
		_, err := c.ForkRun(ctx, &reinv1.ForkRunRequest{RunId: runID, AtSequence: 1, RequestId: "fork-" + runID}, opts...)
		return err
	}},
	"ProvideInput": {namesRun: true, ok: codes.OK, alsoOK: codes.FailedPrecondition, call: func(ctx context.Context, c reinv1.RunServiceClient, runID string, opts ...grpc.CallOption) error {
		_, err := c.ProvideInput(ctx, &reinv1.ProvideInputRequest{RunId: runID, Text: "the blue one"}, opts...)
		return err
	}},
	// A copy of the run under a new ID and request ID: an import of it is
	// taken. Another tenant's run is refused by tenant, not by run, so the
	// case names none.
	// The matrix's run must outlive every call: past the auth rule, the
	// deletion of a run that never was is NotFound.
	"DeleteRun": {ok: codes.NotFound, call: func(ctx context.Context, c reinv1.RunServiceClient, _ string, opts ...grpc.CallOption) error {
		_, err := c.DeleteRun(ctx, &reinv1.DeleteRunRequest{RunId: "run_never_was", Reason: "auth matrix"}, opts...)
		return err
	}},
	"ListDeletions": {ok: codes.OK, call: func(ctx context.Context, c reinv1.RunServiceClient, _ string, opts ...grpc.CallOption) error {
		_, err := c.ListDeletions(ctx, &reinv1.ListDeletionsRequest{}, opts...)
		return err
	}},
	"ImportRun": {ok: codes.OK, call: func(ctx context.Context, c reinv1.RunServiceClient, runID string, opts ...grpc.CallOption) error {
		x, err := copyExport(ctx, c, runID)
		if err != nil {
			return err
		}
		_, err = c.ImportRun(ctx, &reinv1.ImportRunRequest{Export: x}, opts...)
		return err
	}},
	// The run waits for input: a message is refused, naming rein input.
	"SteerRun": {namesRun: true, ok: codes.FailedPrecondition, call: func(ctx context.Context, c reinv1.RunServiceClient, runID string, opts ...grpc.CallOption) error {
		_, err := c.SteerRun(ctx, &reinv1.SteerRunRequest{RunId: runID, Text: "use staging", RequestId: rand.Text()}, opts...)
		return err
	}},
	// The run waits for input, not for budget.
	"RaiseBudget": {namesRun: true, ok: codes.FailedPrecondition, call: func(ctx context.Context, c reinv1.RunServiceClient, runID string, opts ...grpc.CallOption) error {
		_, err := c.RaiseBudget(ctx, &reinv1.RaiseBudgetRequest{RunId: runID, AddSteps: 5}, opts...)
		return err
	}},
	"DecideApproval": {namesRun: true, ok: codes.FailedPrecondition, call: func(ctx context.Context, c reinv1.RunServiceClient, runID string, opts ...grpc.CallOption) error {
		_, err := c.DecideApproval(ctx, &reinv1.DecideApprovalRequest{
			RunId: runID, ProposalId: "p1", ProposalHash: "h1", Verdict: reinv1.ApprovalVerdict_APPROVAL_VERDICT_APPROVE,
		}, opts...)
		return err
	}},
}

// runServiceMethods is every RPC of rein.v1.RunService, unary and streaming.
func runServiceMethods() []string {
	var names []string
	for _, m := range reinv1.RunService_ServiceDesc.Methods {
		names = append(names, m.MethodName)
	}
	for _, s := range reinv1.RunService_ServiceDesc.Streams {
		names = append(names, s.StreamName)
	}
	return names
}

// refusal is a call the auth matrix expects refused.
type refusal struct {
	name string
	ctx  context.Context
	opts []grpc.CallOption
	want codes.Code
}

func codeOf(err error) codes.Code { return status.Code(err) }

// TestAuthMatrix calls every RunService RPC without credentials, with bad
// ones, with each role, and across tenants (docs/design.md §10, §11).
func TestAuthMatrix(t *testing.T) {
	s := newTCPServer(t, Config{Directory: testDirectory(t)})
	ctx := context.Background()
	methods := runServiceMethods()
	for name := range rpcCases {
		if !slices.Contains(methods, name) {
			t.Errorf("rpcCases has %s, which RunService does not", name)
		}
	}
	for _, name := range methods {
		tc, ok := rpcCases[name]
		if !ok {
			t.Errorf("RunService/%s has no entry in rpcCases: add a valid request for it (and check its auth rule)", name)
			continue
		}
		fullMethod := "/" + reinv1.RunService_ServiceDesc.ServiceName + "/" + name
		role, err := auth.Required(fullMethod)
		if err != nil {
			t.Errorf("%s: %v", fullMethod, err)
			continue
		}
		t.Run(name, func(t *testing.T) {
			// A paused run in acme, the target of every refused call.
			run := s.startAs(t, "a-operator", contract(nil, ask("which one?")))
			if run.GetStatus() != reinv1.RunStatus_RUN_STATUS_NEEDS_INPUT || run.GetTenant() != "acme" || run.GetPrincipal() != "a-operator" {
				t.Fatalf("setup run: status %v tenant %q principal %q", run.GetStatus(), run.GetTenant(), run.GetPrincipal())
			}
			runCount := func() int {
				t.Helper()
				n := 0
				for _, who := range []string{"a-admin", "b-admin"} {
					resp, err := s.client.ListRuns(ctx, &reinv1.ListRunsRequest{PageSize: 1000}, as(who))
					if err != nil {
						t.Fatal(err)
					}
					n += len(resp.GetRuns())
				}
				return n
			}
			before := runCount()
			refused := []refusal{
				{"no token", ctx, nil, codes.Unauthenticated},
				{"unknown token", ctx, []grpc.CallOption{grpc.PerRPCCredentials(bearerToken("mallory-token"))}, codes.Unauthenticated},
				{"the token's hash as the token", ctx, []grpc.CallOption{grpc.PerRPCCredentials(bearerToken(auth.HashToken("a-admin-token")))}, codes.Unauthenticated},
				{"not a bearer header", metadata.AppendToOutgoingContext(ctx, "authorization", "Token a-admin-token"), nil, codes.Unauthenticated},
				{"empty bearer", metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "), nil, codes.Unauthenticated},
			}
			for _, p := range testPrincipals {
				if p.Tenant == "acme" && !p.Has(role) {
					refused = append(refused, refusal{p.ID + " lacks " + string(role), ctx, []grpc.CallOption{as(p.ID)}, codes.PermissionDenied})
				}
			}
			for _, r := range refused {
				err := tc.call(r.ctx, s.client, run.GetRunId(), r.opts...)
				if codeOf(err) != r.want {
					t.Errorf("%s: got %v, want %v", r.name, err, r.want)
				}
			}
			if role == auth.Operator || role == auth.Approver {
				if !slices.ContainsFunc(refused, func(r refusal) bool { return r.want == codes.PermissionDenied }) {
					t.Errorf("no principal lacks %s: the matrix checks no PermissionDenied", role)
				}
			}

			if tc.namesRun {
				// Another tenant's run is answered like a missing one, to
				// every principal of that tenant with the role.
				want := codes.NotFound
				const missingID = "run_01J0000000000000000MISSING"
				for _, p := range testPrincipals {
					if p.Tenant == "acme" || !p.Has(role) {
						continue
					}
					cross := tc.call(ctx, s.client, run.GetRunId(), as(p.ID))
					missing := tc.call(ctx, s.client, missingID, as(p.ID))
					if codeOf(cross) != want || codeOf(missing) != want {
						t.Errorf("%s: another tenant's run: %v; a missing run: %v; want both %v", p.ID, cross, missing, want)
					}
					crossMsg := strings.ReplaceAll(status.Convert(cross).Message(), run.GetRunId(), "ID")
					missingMsg := strings.ReplaceAll(status.Convert(missing).Message(), missingID, "ID")
					if crossMsg != missingMsg {
						t.Errorf("%s: another tenant's run is told apart from a missing one: %q vs %q", p.ID, crossMsg, missingMsg)
					}
				}
			}

			// Nothing refused changed the run, or started one.
			if n := runCount(); n != before {
				t.Errorf("refused calls stored %d runs", n-before)
			}
			after, err := s.client.GetRun(ctx, &reinv1.GetRunRequest{RunId: run.GetRunId()}, as("a-viewer"))
			if err != nil {
				t.Fatal(err)
			}
			if after.GetRun().GetVersion() != run.GetVersion() || after.GetRun().GetStatus() != run.GetStatus() {
				t.Errorf("refused calls changed the run: version %d → %d, status %v → %v",
					run.GetVersion(), after.GetRun().GetVersion(), run.GetStatus(), after.GetRun().GetStatus())
			}

			// The success twins: every principal with the role, on a
			// fresh paused run of its own tenant (its operator starts it).
			for _, p := range testPrincipals {
				if !p.Has(role) {
					continue
				}
				own := s.startAs(t, operatorOf(p.Tenant), contract(nil, ask("which one?")))
				if own.GetTenant() != p.Tenant {
					t.Fatalf("%s started a run in tenant %q", p.ID, own.GetTenant())
				}
				if err := tc.call(ctx, s.client, own.GetRunId(), as(p.ID)); !tc.passed(codeOf(err)) {
					t.Errorf("%s (%v) on its own tenant's run: got %v, want %v", p.ID, p.Roles, err, tc.ok)
				}
			}
		})
	}
}

// TestEveryRPCHasAnAuthRule: every method registered on a node's gRPC
// server, reflection included, is public or has a rule; a method without one
// would be refused to everyone.
func TestEveryRPCHasAnAuthRule(t *testing.T) {
	node, err := Open(context.Background(), Config{Store: tempBolt(t), Tools: fixtures(), Reflection: true})
	if err != nil {
		t.Fatal(err)
	}
	defer node.Close()
	services := node.GRPC.GetServiceInfo()
	for _, want := range []string{reinv1.RunService_ServiceDesc.ServiceName, "grpc.health.v1.Health", "grpc.reflection.v1.ServerReflection"} {
		if _, ok := services[want]; !ok {
			t.Errorf("service %s is not registered; registered: %v", want, services)
		}
	}
	checked := 0
	for svc, info := range services {
		for _, m := range info.Methods {
			fullMethod := "/" + svc + "/" + m.Name
			if auth.Public[fullMethod] {
				continue
			}
			if _, err := auth.Required(fullMethod); err != nil {
				t.Errorf("%s is neither public nor ruled: %v", fullMethod, err)
			}
			checked++
		}
	}
	if want := len(runServiceMethods()); checked < want {
		t.Fatalf("checked %d methods, want at least RunService's %d", checked, want)
	}
}

// TestLocalAdminWithoutTokens: with no tokens file, a loopback TCP caller is
// the local admin, with no credentials.
func TestLocalAdminWithoutTokens(t *testing.T) {
	s := newTCPServer(t, Config{})
	ctx := context.Background()
	resp, err := s.client.StartRun(ctx, &reinv1.StartRunRequest{RequestId: "r", Contract: contract(nil, ask("which?"))})
	if err != nil {
		t.Fatal(err)
	}
	run := resp.GetRun()
	if run.GetPrincipal() != LocalPrincipal().ID || run.GetTenant() != LocalPrincipal().Tenant {
		t.Fatalf("run started by %q in tenant %q, want the local admin %q in %q", run.GetPrincipal(), run.GetTenant(), LocalPrincipal().ID, LocalPrincipal().Tenant)
	}
	// Admin gets past every rule, approver's included.
	for _, name := range runServiceMethods() {
		if err := rpcCases[name].call(ctx, s.client, run.GetRunId()); !rpcCases[name].passed(codeOf(err)) {
			t.Errorf("%s as the local admin: got %v, want %v", name, err, rpcCases[name].ok)
		}
	}
}

// TestRemoteCallerWithoutTokens is the twin: with no tokens file, a caller
// from another machine is refused, whatever it sends; a local one (loopback,
// Unix socket, in-memory) is the local admin.
func TestRemoteCallerWithoutTokens(t *testing.T) {
	a := &authenticator{}
	for _, tc := range []struct {
		name string
		addr net.Addr
		want codes.Code
	}{
		{"remote IPv4", &net.TCPAddr{IP: net.ParseIP("192.0.2.7"), Port: 4000}, codes.Unauthenticated},
		{"remote IPv6", &net.TCPAddr{IP: net.ParseIP("2001:db8::7"), Port: 4000}, codes.Unauthenticated},
		{"unspecified", &net.TCPAddr{IP: net.IPv4zero, Port: 4000}, codes.Unauthenticated},
		{"loopback IPv4", &net.TCPAddr{IP: net.ParseIP("127.0.0.1"), Port: 4000}, codes.OK},
		{"loopback IPv6", &net.TCPAddr{IP: net.IPv6loopback, Port: 4000}, codes.OK},
		{"unix socket", &net.UnixAddr{Name: "/run/rein.sock", Net: "unix"}, codes.OK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := grpc.NewContextWithServerTransportStream(context.Background(), methodStream(reinv1.RunService_StartRun_FullMethodName))
			ctx = peer.NewContext(ctx, &peer.Peer{Addr: tc.addr})
			ctx = metadata.NewIncomingContext(ctx, metadata.Pairs("authorization", "Bearer anything"))
			got, err := a.authenticate(ctx)
			if codeOf(err) != tc.want {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
			if err != nil {
				if !strings.Contains(err.Error(), tc.addr.String()) {
					t.Errorf("error %q does not name the caller", err)
				}
				return
			}
			if p, ok := auth.FromContext(got); !ok || p.ID != LocalPrincipal().ID || !p.Has(auth.Admin) {
				t.Fatalf("principal %+v, %v; want the local admin", p, ok)
			}
		})
	}
}

// TestLocalPrincipalIsFresh: what a caller does to the LocalPrincipal it
// got changes neither the next one nor the server's local caller, who is
// still the admin "local" (the twin of a principal that could be
// overwritten, as a package variable could).
func TestLocalPrincipalIsFresh(t *testing.T) {
	p := LocalPrincipal()
	p.ID, p.Tenant, p.Roles[0] = "mallory", "other", auth.Viewer
	if again := LocalPrincipal(); again.ID != "local" || again.Tenant != "default" || !again.Has(auth.Admin) {
		t.Fatalf("LocalPrincipal after a caller changed its copy: %+v, want the admin local of tenant default", again)
	}
	ctx := grpc.NewContextWithServerTransportStream(context.Background(), methodStream(reinv1.RunService_StartRun_FullMethodName))
	ctx = peer.NewContext(ctx, &peer.Peer{Addr: &net.TCPAddr{IP: net.ParseIP("127.0.0.1"), Port: 4000}})
	got, err := (&authenticator{}).authenticate(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if q, ok := auth.FromContext(got); !ok || q.ID != "local" || q.Tenant != "default" || !q.Has(auth.Admin) {
		t.Fatalf("the local caller is %+v, %v; want the admin local of tenant default", q, ok)
	}
}

// methodStream is the server transport stream grpc.Method reads a call's
// method from.
type methodStream string

func (m methodStream) Method() string             { return string(m) }
func (methodStream) SetHeader(metadata.MD) error  { return nil }
func (methodStream) SendHeader(metadata.MD) error { return nil }
func (methodStream) SetTrailer(metadata.MD) error { return nil }

// TestHealthNeedsNoCredentials: the health check answers without a token on
// a server with a tokens file, where RunService refuses the same caller.
func TestHealthNeedsNoCredentials(t *testing.T) {
	s := newTCPServer(t, Config{Directory: testDirectory(t)})
	ctx := context.Background()
	health := healthpb.NewHealthClient(s.conn)
	for _, svc := range []string{"", reinv1.RunService_ServiceDesc.ServiceName} {
		resp, err := health.Check(ctx, &healthpb.HealthCheckRequest{Service: svc})
		if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Fatalf("Check(%q) without credentials: %v, %v; want SERVING", svc, resp, err)
		}
	}
	watchCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	w, err := health.Watch(watchCtx, &healthpb.HealthCheckRequest{Service: reinv1.RunService_ServiceDesc.ServiceName})
	if err != nil {
		t.Fatal(err)
	}
	if resp, err := w.Recv(); err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("Watch without credentials: %v, %v; want SERVING", resp, err)
	}
	_, err = s.client.ListRuns(ctx, &reinv1.ListRunsRequest{})
	wantCode(t, err, codes.Unauthenticated)
}

// operatorOf is a tenant's operator, who starts its runs.
func operatorOf(tenant string) string {
	return map[string]string{"acme": "a-operator", "globex": "b-operator"}[tenant]
}

// tenantOf is a test principal's tenant.
func tenantOf(id string) string {
	for _, p := range testPrincipals {
		if p.ID == id {
			return p.Tenant
		}
	}
	return ""
}
