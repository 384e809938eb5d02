package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
)

// The tool this policy decides, and the only currency it allows.
const (
	toolRefund = "refunds.create"
	currency   = "EUR"
	// botPrefix starts the name of a principal that is a program, not a
	// person: its refunds are never allowed automatically.
	botPrefix = "bot-"
	// maxQuoted is how much of a malformed argument a reason quotes, so
	// that a reason stays far below the 4,096 bytes rein takes.
	maxQuoted = 40
	// maxCents is the largest amount read (10 billion EUR); a larger one
	// is refused rather than risk an overflow.
	maxCents = 1e12
)

// cents is an amount of EUR in hundredths, never negative.
type cents int64

func (c cents) String() string { return fmt.Sprintf("%d.%02d", c/100, c%100) }

// Limits are one tenant's thresholds: a refund up to AutoApproveUpTo is
// allowed with no person, one above TwoPeopleAbove needs two approvals.
type Limits struct{ AutoApproveUpTo, TwoPeopleAbove cents }

// DefaultLimits are the limits of a tenant the limits file does not name.
var DefaultLimits = Limits{AutoApproveUpTo: 50_00, TwoPeopleAbove: 5_000_00}

// Finance decides calls to refunds.create by the run's tenant's limits. It
// is a reinv1.PolicyServiceServer: register it on a grpc.Server.
type Finance struct {
	reinv1.UnimplementedPolicyServiceServer
	tenants map[string]Limits
	log     *slog.Logger
}

var _ reinv1.PolicyServiceServer = (*Finance)(nil)

// NewFinance returns the policy with tenants' limits overriding
// DefaultLimits (nil: the defaults for all). It logs each decision to log
// (nil: nowhere).
func NewFinance(tenants map[string]Limits, log *slog.Logger) *Finance {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Finance{tenants: tenants, log: log}
}

// Check decides one call. A request with no tool name is refused with
// InvalidArgument (rein then fails closed); a tool other than
// refunds.create gets POLICY_EFFECT_UNSPECIFIED: this policy does not
// decide it, and the call goes on to its grant's tier.
func (f *Finance) Check(_ context.Context, req *reinv1.CheckRequest) (*reinv1.CheckResponse, error) {
	tool := req.GetTool().GetName()
	if tool == "" {
		return nil, status.Error(codes.InvalidArgument, "the request names no tool (tool.name is empty): give the tool the call is to, such as \"refunds.create\"")
	}
	resp := f.decide(req)
	f.log.Info("decided", "call_id", req.GetCallId(), "run", req.GetRun().GetId(), "tenant", req.GetRun().GetTenant(),
		"principal", req.GetRun().GetPrincipal(), "tool", tool, "effect", resp.GetEffect().String(),
		"approvals", resp.GetApprovals(), "reason", resp.GetReason())
	return resp, nil
}

func (f *Finance) decide(req *reinv1.CheckRequest) *reinv1.CheckResponse {
	if req.GetTool().GetName() != toolRefund {
		return &reinv1.CheckResponse{}
	}
	amount, cur, err := refundArgs(req.GetArgs())
	if err != nil {
		return deny(err.Error())
	}
	if cur != currency {
		return deny(fmt.Sprintf("refunds in %s are not made by an agent: this policy allows refunds in %s only; do not convert the amount to %s, tell the user that a person in finance must make this refund", cur, currency, currency))
	}
	tenant, principal := req.GetRun().GetTenant(), req.GetRun().GetPrincipal()
	lim, ok := f.tenants[tenant]
	if !ok {
		lim = DefaultLimits
	}
	what := fmt.Sprintf("a refund of %s %s for tenant %q", amount, currency, tenant)
	switch {
	case amount > lim.TwoPeopleAbove:
		return ask(2, fmt.Sprintf("%s is above %s %s: two people must approve it", what, lim.TwoPeopleAbove, currency))
	case strings.HasPrefix(principal, botPrefix):
		return ask(1, fmt.Sprintf("%s, in a run started by %s, a program: a person approves every refund such a run makes", what, principal))
	case amount <= lim.AutoApproveUpTo:
		return &reinv1.CheckResponse{Effect: reinv1.PolicyEffect_POLICY_EFFECT_ALLOW,
			Reason: fmt.Sprintf("%s is at most %s %s: allowed with no person", what, lim.AutoApproveUpTo, currency)}
	default:
		return ask(1, fmt.Sprintf("%s is above %s %s: a person must approve it", what, lim.AutoApproveUpTo, currency))
	}
}

func deny(reason string) *reinv1.CheckResponse {
	return &reinv1.CheckResponse{Effect: reinv1.PolicyEffect_POLICY_EFFECT_DENY, Reason: reason}
}

func ask(approvals uint32, reason string) *reinv1.CheckResponse {
	return &reinv1.CheckResponse{Effect: reinv1.PolicyEffect_POLICY_EFFECT_ASK, Reason: reason, Approvals: approvals}
}

// refundArgs reads a refund's amount and currency, or says, for the model,
// what is wrong with them.
func refundArgs(args *structpb.Struct) (cents, string, error) {
	fields := args.GetFields()
	amount, err := amountArg(fields["amount"])
	if err != nil {
		return 0, "", err
	}
	cur, err := currencyArg(fields["currency"])
	return amount, cur, err
}

// amountArg reads an amount: a string ("40.00") or a number (40), more
// than 0, with at most 2 decimals.
func amountArg(v *structpb.Value) (cents, error) {
	const want = `give the refund's amount in EUR as a string such as "40.00"`
	var c cents
	switch k := v.GetKind().(type) {
	case nil, *structpb.Value_NullValue:
		return 0, errors.New(`the arguments have no "amount": ` + want)
	case *structpb.Value_StringValue:
		s := strings.TrimSpace(k.StringValue)
		n, ok := parseCents(s)
		if !ok {
			return 0, fmt.Errorf(`"amount" is %s, not an amount: %s (a positive number with at most 2 decimals, no currency sign)`, quote(s), want)
		}
		c = n
	case *structpb.Value_NumberValue:
		x := k.NumberValue * 100
		if math.IsNaN(x) || math.Abs(x) >= maxCents || math.Abs(x-math.Round(x)) > 1e-6 {
			return 0, fmt.Errorf(`"amount" is %v, not an amount: %s (at most 2 decimals)`, k.NumberValue, want)
		}
		if x < 0 {
			return 0, fmt.Errorf(`"amount" is %v: a refund must be more than 0.00`, k.NumberValue)
		}
		c = cents(math.Round(x))
	default:
		return 0, fmt.Errorf(`"amount" is %s: %s`, kindName(v), want)
	}
	if c <= 0 {
		return 0, fmt.Errorf(`"amount" is %s: a refund must be more than 0.00`, c)
	}
	return c, nil
}

// parseCents reads "40", "40.5" or "40.50"; not "-1", "1e3", "40,00", ".5".
func parseCents(s string) (cents, bool) {
	whole, frac, dot := strings.Cut(s, ".")
	if !digits(whole) || len(whole) > 10 || (dot && (!digits(frac) || len(frac) > 2)) {
		return 0, false
	}
	n, err := strconv.ParseInt(whole+(frac + "00")[:2], 10, 64)
	return cents(n), err == nil
}

func digits(s string) bool {
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return s != ""
}

// currencyArg reads a currency: three capital letters, such as "EUR".
func currencyArg(v *structpb.Value) (string, error) {
	const want = `give the refund's currency as three capital letters, such as "EUR"`
	switch k := v.GetKind().(type) {
	case nil, *structpb.Value_NullValue:
		return "", errors.New(`the arguments have no "currency": ` + want)
	case *structpb.Value_StringValue:
		s := strings.TrimSpace(k.StringValue)
		if len(s) != 3 || strings.Trim(s, "ABCDEFGHIJKLMNOPQRSTUVWXYZ") != "" {
			return "", fmt.Errorf(`"currency" is %s, not a currency code: %s`, quote(s), want)
		}
		return s, nil
	default:
		return "", fmt.Errorf(`"currency" is %s: %s`, kindName(v), want)
	}
}

// kindName names the JSON type of a value that has the wrong one.
func kindName(v *structpb.Value) string {
	switch v.GetKind().(type) {
	case *structpb.Value_BoolValue:
		return "a boolean"
	case *structpb.Value_NumberValue:
		return "a number"
	case *structpb.Value_StructValue:
		return "an object"
	case *structpb.Value_ListValue:
		return "a list"
	}
	return "of another type"
}

// quote quotes s, cut to maxQuoted bytes.
func quote(s string) string {
	if len(s) > maxQuoted {
		return strconv.Quote(s[:maxQuoted]) + "…"
	}
	return strconv.Quote(s)
}

// limitsFile is the --limits file: {"tenants": {"NAME": {...}}}.
type limitsFile struct {
	Tenants map[string]*struct {
		AutoApproveUpTo *float64 `json:"auto_approve_up_to"`
		TwoPeopleAbove  *float64 `json:"two_people_above"`
	} `json:"tenants"`
}

// LoadLimits reads a limits file: each tenant it names, with the limits it
// sets; a limit it leaves out is DefaultLimits'. It refuses unknown
// fields, negative limits, more than 2 decimals, and an automatic limit
// above the two-person one.
func LoadLimits(path string) (map[string]Limits, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("limits file: %w", err)
	}
	tenants, err := ParseLimits(data)
	if err != nil {
		return nil, fmt.Errorf("limits file %s: %w", path, err)
	}
	return tenants, nil
}

// ParseLimits reads the text of a limits file; see LoadLimits.
func ParseLimits(data []byte) (map[string]Limits, error) {
	const shape = `write it as {"tenants": {"NAME": {"auto_approve_up_to": 100, "two_people_above": 10000}}}, amounts in EUR`
	var f limitsFile
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("%v; %s", err, shape)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("more than one JSON value; %s", shape)
	}
	if len(f.Tenants) == 0 {
		return nil, fmt.Errorf("no tenant is named; %s, or leave out --limits for the defaults", shape)
	}
	out := map[string]Limits{}
	for _, name := range slices.Sorted(maps.Keys(f.Tenants)) {
		t := f.Tenants[name]
		if name == "" || t == nil || (t.AutoApproveUpTo == nil && t.TwoPeopleAbove == nil) {
			return nil, fmt.Errorf("tenants[%q]: give a tenant's name and at least one of auto_approve_up_to and two_people_above", name)
		}
		lim := DefaultLimits
		for _, l := range []struct {
			field string
			v     *float64
			to    *cents
		}{{"auto_approve_up_to", t.AutoApproveUpTo, &lim.AutoApproveUpTo}, {"two_people_above", t.TwoPeopleAbove, &lim.TwoPeopleAbove}} {
			if l.v == nil {
				continue
			}
			x := *l.v * 100
			if x < 0 || x >= maxCents || math.Abs(x-math.Round(x)) > 1e-6 {
				return nil, fmt.Errorf("tenants[%q].%s is %v: give an amount in EUR, 0 or more, with at most 2 decimals", name, l.field, *l.v)
			}
			*l.to = cents(math.Round(x))
		}
		if lim.AutoApproveUpTo > lim.TwoPeopleAbove {
			return nil, fmt.Errorf("tenants[%q]: auto_approve_up_to (%s) is above two_people_above (%s): a refund allowed with no person would need two; lower the one or raise the other",
				name, lim.AutoApproveUpTo, lim.TwoPeopleAbove)
		}
		out[name] = lim
	}
	return out, nil
}
