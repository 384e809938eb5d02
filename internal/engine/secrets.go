package engine

import (
	"context"

	"google.golang.org/protobuf/types/known/structpb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/model"
	"github.com/reinhq/rein/internal/secret"
	"github.com/reinhq/rein/internal/tools"
)

// The server's secrets never reach an event: New puts the models and tools
// it is given behind these wrappers, which redact (Config.Secrets) every
// text they answer before the step loop reads it, and the step redacts the
// checks' output (step.Config.Secrets). A provider's refusal that echoes its key ("Incorrect API
// key provided: Bearer sk-…") fails the run with "[secret OPENAI_API_KEY]"
// in its place; a tool that reads a file holding a key records, and shows
// the model, the marker. The run's status, the server's lifecycle log and
// the spans take what they say of an error from these events, so it is
// redacted too. The contract, a person's input and a reviewer's reason are
// the caller's own text, stored as given.

// redactModels is models with every model it builds redacted by r, and
// its own errors too (they become a refused contract's description).
func redactModels(models func(*reinv1.ModelSpec) (model.Model, error), r *secret.Redactor) func(*reinv1.ModelSpec) (model.Model, error) {
	if r == nil {
		return models
	}
	return func(spec *reinv1.ModelSpec) (model.Model, error) {
		m, err := models(spec)
		if err != nil || m == nil {
			return m, r.Error(err)
		}
		rm := redactedModel{m: m, r: r}
		if _, ok := m.(model.TokenCounter); ok {
			return redactedCounter{rm}, nil
		}
		return rm, nil
	}
}

// redactedModel is a run's model whose errors and replies are redacted.
type redactedModel struct {
	m model.Model
	r *secret.Redactor
}

func (m redactedModel) Next(ctx context.Context, req *model.Request) (rep *model.Reply, err error) {
	if req.Output != nil {
		// The text streamed is redacted as the reply is: a value cut across
		// two pieces too.
		out := m.r.Stream(req.Output)
		c := *req
		c.Output = out.Write
		req = &c
		defer func() {
			if err == nil {
				out.Flush() // a call cut short may have held a key's start
			}
		}()
	}
	rep, err = m.m.Next(ctx, req)
	if rep != nil {
		c := *rep
		c.Decision = secret.Message(m.r, rep.Decision)
		c.Raw, c.ResponseID, c.FinishReason = m.r.Redact(rep.Raw), m.r.Redact(rep.ResponseID), m.r.Redact(rep.FinishReason)
		rep = &c
	}
	return rep, m.r.Error(err)
}

// redactedCounter is a redactedModel over a model.TokenCounter, which it
// stays, so that the harness still asks it for counts.
type redactedCounter struct{ redactedModel }

func (m redactedCounter) CountTokens(ctx context.Context, req *model.Request) (uint64, error) {
	n, err := m.m.(model.TokenCounter).CountTokens(ctx, req)
	return n, m.r.Error(err)
}

// redactTools is x with its answers redacted by r; nil stays nil (no
// tools).
func redactTools(x tools.Executor, r *secret.Redactor) tools.Executor {
	if x == nil || r == nil {
		return x
	}
	return redactedTools{x: x, r: r}
}

// redactedTools is an executor whose outputs, proposals, receipts, errors
// and tool descriptions are redacted. The calls it passes on are not: a
// tool gets the arguments the model gave.
type redactedTools struct {
	x tools.Executor
	r *secret.Redactor
}

var _ tools.Looker = redactedTools{}

// List redacts the tools' descriptions and input schemas, which a tool
// server writes and the model's recorded input holds; not their names,
// which route the calls.
func (t redactedTools) List(ctx context.Context) ([]tools.Spec, error) {
	specs, err := t.x.List(ctx)
	if specs == nil {
		return nil, t.r.Error(err)
	}
	out := make([]tools.Spec, len(specs)) // the executor's own slice is left as it is
	for i, s := range specs {
		s.Description, s.InputSchema = t.r.Redact(s.Description), secret.Message(t.r, s.InputSchema)
		out[i] = s
	}
	return out, t.r.Error(err)
}

func (t redactedTools) Read(ctx context.Context, c tools.Call) (*structpb.Value, error) {
	return t.value(t.x.Read(ctx, c))
}

func (t redactedTools) Propose(ctx context.Context, c tools.Call) (*structpb.Value, error) {
	return t.value(t.x.Propose(ctx, c))
}

func (t redactedTools) Commit(ctx context.Context, c tools.Call, operationID string) (*structpb.Value, error) {
	return t.value(t.x.Commit(ctx, c, operationID))
}

// Lookup implements tools.Looker for an executor that does; for one that
// does not it answers tools.ErrNoLookup, as the harness does itself.
func (t redactedTools) Lookup(ctx context.Context, c tools.Call, operationID string) (*structpb.Value, bool, error) {
	l, ok := t.x.(tools.Looker)
	if !ok {
		return nil, false, tools.ErrNoLookup
	}
	receipt, applied, err := l.Lookup(ctx, c, operationID)
	return secret.Message(t.r, receipt), applied, t.r.Error(err)
}

func (t redactedTools) value(v *structpb.Value, err error) (*structpb.Value, error) {
	return secret.Message(t.r, v), t.r.Error(err)
}
