package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"

	bolt "go.etcd.io/bbolt"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/reinhq/rein/internal/tools"
)

// The tools this service provides.
const (
	toolInvoice = "invoices.get"
	toolRefund  = "refunds.create"
)

// amountArg reads an amount argument: a string ("40.00") or a number (40).
func amountArg(v *structpb.Value) (cents, error) {
	switch k := v.GetKind().(type) {
	case *structpb.Value_StringValue:
		return parseCents(strings.TrimSpace(k.StringValue))
	case *structpb.Value_NumberValue:
		f := k.NumberValue * 100
		if f < 0 || f > 1e14 || math.Abs(f-math.Round(f)) > 1e-6 {
			return 0, fmt.Errorf("%v is not an amount: a positive number with at most 2 decimals, such as \"40.00\"", k.NumberValue)
		}
		return cents(math.Round(f)), nil
	}
	return 0, errors.New("amount must be a string such as \"40.00\"")
}

func invalid(format string, args ...any) error {
	return status.Errorf(codes.InvalidArgument, format, args...)
}

func precondition(format string, args ...any) error {
	return status.Errorf(codes.FailedPrecondition, format, args...)
}

// checkArgs refuses arguments a tool does not take, and missing required
// ones; each reader checks its arguments' types.
func checkArgs(tool string, args *structpb.Struct, required, optional []string) (map[string]*structpb.Value, error) {
	fields := args.GetFields()
	for name := range fields {
		if !slices.Contains(required, name) && !slices.Contains(optional, name) {
			return nil, invalid("%s: unknown argument %q; give %s", tool, name, strings.Join(append(slices.Clone(required), optional...), ", "))
		}
	}
	for _, name := range required {
		if _, null := fields[name].GetKind().(*structpb.Value_NullValue); fields[name] == nil || null {
			return nil, invalid("%s: %s is required", tool, name)
		}
	}
	return fields, nil
}

// refundArgs are the arguments of refunds.create.
type refundArgs struct {
	invoiceID string
	amount    cents
	// currency is "" when the call does not name one.
	currency string
	reason   string
}

func parseRefund(args *structpb.Struct) (refundArgs, error) {
	fields, err := checkArgs(toolRefund, args, []string{"invoice_id", "amount", "reason"}, []string{"currency"})
	if err != nil {
		return refundArgs{}, err
	}
	a := refundArgs{
		invoiceID: fields["invoice_id"].GetStringValue(),
		currency:  fields["currency"].GetStringValue(),
		reason:    strings.TrimSpace(fields["reason"].GetStringValue()),
	}
	if a.invoiceID == "" {
		return a, invalid("%s: invoice_id must be a string, such as \"INV-1001\"", toolRefund)
	}
	if a.reason == "" || len(a.reason) > 500 {
		return a, invalid("%s: reason must be a string of 1 to 500 characters: why the customer gets the money back", toolRefund)
	}
	if a.amount, err = amountArg(fields["amount"]); err != nil {
		return a, invalid("%s: amount: %v", toolRefund, err)
	}
	if a.amount <= 0 {
		return a, invalid("%s: amount must be more than 0.00", toolRefund)
	}
	return a, nil
}

// List implements tools.Executor.
func (b *Billing) List(context.Context) ([]tools.Spec, error) {
	return []tools.Spec{
		{Name: toolInvoice, Description: "Read one invoice by its ID: customer, amount, currency, status, and how much is refunded and refundable.",
			InputSchema: schema(map[string]any{"invoice_id": map[string]any{"type": "string"}}, "invoice_id")},
		{Name: toolRefund, Description: "Refund an amount of a paid invoice to its customer, at most what is still refundable.",
			InputSchema: schema(map[string]any{
				"invoice_id": map[string]any{"type": "string"},
				"amount":     map[string]any{"type": "string", "description": "such as \"40.00\", in the invoice's currency"},
				"currency":   map[string]any{"type": "string", "description": "optional; must be the invoice's"},
				"reason":     map[string]any{"type": "string"},
			}, "invoice_id", "amount", "reason")},
	}, nil
}

func schema(props map[string]any, required ...string) *structpb.Struct {
	req := make([]any, len(required))
	for i, r := range required {
		req[i] = r
	}
	s, err := structpb.NewStruct(map[string]any{"type": "object", "properties": props, "required": req, "additionalProperties": false})
	if err != nil {
		panic(err) // the schemas above are literals
	}
	return s
}

// Read implements tools.Executor: invoices.get.
func (b *Billing) Read(ctx context.Context, call tools.Call) (*structpb.Value, error) {
	switch call.Tool {
	case toolInvoice:
	case toolRefund:
		return nil, precondition("%s writes: grant it with TOOL_TIER_WRITE, so that a person approves each refund", toolRefund)
	default:
		return nil, noTool(call.Tool)
	}
	fields, err := checkArgs(toolInvoice, call.Args, []string{"invoice_id"}, nil)
	if err != nil {
		return nil, err
	}
	id := fields["invoice_id"].GetStringValue()
	if id == "" {
		return nil, invalid("%s: invoice_id must be a string, such as \"INV-1001\"", toolInvoice)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var out *structpb.Value
	err = b.db.View(func(tx *bolt.Tx) error {
		inv, err := loadInvoice(tx, id)
		if err != nil {
			return err
		}
		out = invoiceValue(inv)
		return nil
	})
	return out, err
}

// Propose implements tools.Executor: refunds.create's preview, after the
// checks its commit will make.
func (b *Billing) Propose(ctx context.Context, call tools.Call) (*structpb.Value, error) {
	a, err := b.refundCall(call)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var preview *structpb.Value
	err = b.db.View(func(tx *bolt.Tx) error {
		inv, err := loadInvoice(tx, a.invoiceID)
		if err != nil {
			return err
		}
		if err := checkRefund(inv, a); err != nil {
			return err
		}
		preview = previewOf(inv, a)
		return nil
	})
	return preview, err
}

// Commit implements tools.Executor: it makes the refund, once per
// operationID. A repeat returns the first receipt; a refund whose approved
// preview no longer matches the invoice is refused (FailedPrecondition).
func (b *Billing) Commit(ctx context.Context, call tools.Call, operationID string) (*structpb.Value, error) {
	a, err := b.refundCall(call)
	if err != nil {
		return nil, err
	}
	if operationID == "" {
		return nil, invalid("%s: the commit has no operation ID", toolRefund)
	}
	if call.Preview.GetStructValue() == nil {
		return nil, invalid("%s: the commit carries no preview; commit with the preview the refund was approved with", toolRefund)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var receipt json.RawMessage
	err = b.db.Update(func(tx *bolt.Tx) error {
		ops := tx.Bucket(bucketOperations)
		if raw := ops.Get([]byte(operationID)); raw != nil {
			var op operation
			if err := json.Unmarshal(raw, &op); err != nil {
				return fmt.Errorf("operation %s: %w", operationID, err)
			}
			if op.InvoiceID != a.invoiceID || op.Amount != a.amount || op.Reason != a.reason {
				return precondition("%s: operation %s already refunded %s on %s; a key names one refund, so give this one its own",
					toolRefund, operationID, op.Amount, op.InvoiceID)
			}
			receipt = op.Receipt
			return nil
		}
		inv, err := loadInvoice(tx, a.invoiceID)
		if err != nil {
			return err
		}
		if diff := previewDiff(call.Preview, previewOf(inv, a)); diff != "" {
			return precondition("%s: %s changed since the refund was approved (%s); propose the refund again", toolRefund, inv.ID, diff)
		}
		if err := checkRefund(inv, a); err != nil {
			return err
		}
		refunds := tx.Bucket(bucketRefunds)
		seq, err := refunds.NextSequence()
		if err != nil {
			return err
		}
		r := refund{ID: fmt.Sprintf("re_%d", seq), InvoiceID: inv.ID, Amount: a.amount, Currency: inv.Currency,
			Reason: a.reason, OperationID: operationID}
		inv.Refunded += a.amount
		receipt, err = json.Marshal(map[string]any{
			"refund_id": r.ID, "invoice_id": inv.ID, "amount": r.Amount.String(), "currency": r.Currency,
			"status": "succeeded", "refundable_left": inv.refundable().String(),
		})
		if err != nil {
			return err
		}
		if err := putJSON(refunds, r.ID, r); err != nil {
			return err
		}
		if err := putJSON(tx.Bucket(bucketInvoices), inv.ID, inv); err != nil {
			return err
		}
		return putJSON(ops, operationID, operation{InvoiceID: inv.ID, Amount: a.amount, Reason: a.reason, Receipt: receipt})
	})
	if err != nil {
		return nil, err
	}
	return jsonValue(receipt)
}

// Lookup implements tools.Looker: the receipt of the refund made with
// operationID, if one was.
func (b *Billing) Lookup(ctx context.Context, call tools.Call, operationID string) (*structpb.Value, bool, error) {
	if call.Tool != toolInvoice && call.Tool != toolRefund {
		return nil, false, noTool(call.Tool)
	}
	if err := ctx.Err(); err != nil {
		return nil, false, err
	}
	var receipt json.RawMessage
	err := b.db.View(func(tx *bolt.Tx) error {
		raw := tx.Bucket(bucketOperations).Get([]byte(operationID))
		if raw == nil {
			return nil
		}
		var op operation
		if err := json.Unmarshal(raw, &op); err != nil {
			return fmt.Errorf("operation %s: %w", operationID, err)
		}
		receipt = op.Receipt // Unmarshal copied it out of the transaction
		return nil
	})
	if err != nil || receipt == nil {
		return nil, false, err
	}
	v, err := jsonValue(receipt)
	return v, err == nil, err
}

// refundCall reads the arguments of a call that must be refunds.create.
func (b *Billing) refundCall(call tools.Call) (refundArgs, error) {
	switch call.Tool {
	case toolRefund:
		return parseRefund(call.Args)
	case toolInvoice:
		return refundArgs{}, precondition("%s only reads: grant it with TOOL_TIER_READ", toolInvoice)
	}
	return refundArgs{}, noTool(call.Tool)
}

func noTool(tool string) error {
	return fmt.Errorf("%w: %q (this service has %s and %s)", tools.ErrNoTool, tool, toolInvoice, toolRefund)
}

// checkRefund refuses a refund the invoice does not allow.
func checkRefund(inv invoice, a refundArgs) error {
	switch {
	case a.currency != "" && a.currency != inv.Currency:
		return invalid("%s: %s is in %s, not %s; refund in %s", toolRefund, inv.ID, inv.Currency, a.currency, inv.Currency)
	case inv.Status != "paid":
		return invalid("%s: %s is %s, not paid: there is nothing to refund", toolRefund, inv.ID, inv.Status)
	case a.amount > inv.refundable():
		return invalid("%s: %s %s is more than the %s %s left to refund on %s (%s %s, %s refunded); refund at most %s",
			toolRefund, a.amount, inv.Currency, inv.refundable(), inv.Currency, inv.ID, inv.Amount, inv.Currency, inv.Refunded, inv.refundable())
	}
	return nil
}

// previewOf is what refunding a on inv would do.
func previewOf(inv invoice, a refundArgs) *structpb.Value {
	return structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{
		"invoice_id":       structpb.NewStringValue(inv.ID),
		"customer":         structpb.NewStringValue(inv.Customer),
		"amount":           structpb.NewStringValue(a.amount.String()),
		"currency":         structpb.NewStringValue(inv.Currency),
		"reason":           structpb.NewStringValue(a.reason),
		"refundable_left":  structpb.NewStringValue(inv.refundable().String()),
		"refundable_after": structpb.NewStringValue((inv.refundable() - a.amount).String()),
	}})
}

// previewDiff says how the approved preview differs from the one the
// invoice gives now, "" when it does not.
func previewDiff(approved, now *structpb.Value) string {
	was, is := approved.GetStructValue().GetFields(), now.GetStructValue().GetFields()
	var keys []string
	for k := range was {
		keys = append(keys, k)
	}
	for k := range is {
		if _, ok := was[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	var diffs []string
	for _, k := range keys {
		if !proto.Equal(was[k], is[k]) {
			diffs = append(diffs, fmt.Sprintf("%s was %s when approved, is %s now", k, valueText(was[k]), valueText(is[k])))
		}
	}
	return strings.Join(diffs, "; ")
}

func valueText(v *structpb.Value) string {
	if v == nil {
		return "absent"
	}
	b, err := v.MarshalJSON()
	if err != nil {
		return v.String()
	}
	return string(b)
}

func invoiceValue(inv invoice) *structpb.Value {
	return structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{
		"invoice_id": structpb.NewStringValue(inv.ID),
		"customer":   structpb.NewStringValue(inv.Customer),
		"amount":     structpb.NewStringValue(inv.Amount.String()),
		"currency":   structpb.NewStringValue(inv.Currency),
		"status":     structpb.NewStringValue(inv.Status),
		"refunded":   structpb.NewStringValue(inv.Refunded.String()),
		"refundable": structpb.NewStringValue(inv.refundable().String()),
	}})
}
