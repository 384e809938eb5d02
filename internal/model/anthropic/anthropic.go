// Package anthropic is rein's model provider for Anthropic's Messages API
// and any server that speaks it (set the spec's base_url). It maps a
// model.Request to one message with client tools, and the reply back to one
// typed Decision; CountTokens asks the count_tokens endpoint about the same
// request. The SDK's own retries are off and it reads nothing from the
// environment: rein is the only layer that retries, and the key and base URL
// come from the caller and the spec alone.
package anthropic

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	sdk "github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"
	"google.golang.org/protobuf/types/known/structpb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/model"
)

// Provider is the ModelSpec provider this package answers to.
const Provider = "anthropic"

// DefaultBaseURL is Anthropic's API, used when a spec names no base_url.
const DefaultBaseURL = "https://api.anthropic.com"

// KeyEnv is the environment variable (or --secrets entry) that holds the
// API key.
const KeyEnv = "ANTHROPIC_API_KEY"

// AskHumanTool is the tool the model calls to ask a person a question.
const AskHumanTool = "ask_human"

// DefaultMaxTokens is the output cap sent when neither the request nor the
// spec sets one: the Messages API requires max_tokens.
const DefaultMaxTokens = 4096

// Model is a Messages API model.
type Model struct {
	client      sdk.Client
	name        string
	maxOutput   uint64
	temperature *float64
}

var (
	_ model.Model        = (*Model)(nil)
	_ model.TokenCounter = (*Model)(nil)
)

// New builds a model for spec. The API key comes from the caller (never from
// the contract or the environment) and is sent in the x-api-key header; a
// missing one is refused here, when a run starts, not at its first call.
// opts are appended to the client's options (tests use them).
func New(spec *reinv1.ModelSpec, apiKey string, opts ...option.RequestOption) (*Model, error) {
	if spec.GetName() == "" {
		return nil, errors.New("anthropic: the model spec names no model; set model.name")
	}
	if apiKey == "" {
		return nil, fmt.Errorf("%s: %s is not configured on this server, so no call could be made: set it in the server's environment, or in a file given with rein serve --secrets FILE (the embedded server takes --secrets FILE on the command: run, approve, deny, input, fork)", Provider, KeyEnv)
	}
	o := []option.RequestOption{
		// Nothing from ANTHROPIC_* variables or profiles on disk: no second
		// credential, no base URL the spec did not name.
		option.WithoutEnvironmentDefaults(),
		option.WithHeader("X-Api-Key", apiKey),
		option.WithMaxRetries(0),
		// The run's deadline cuts a call, not the SDK's guess from
		// max_tokens (which refuses a non-streaming call it expects to take
		// over 10 minutes).
		option.WithRequestTimeout(time.Hour),
	}
	if u := spec.GetBaseUrl(); u != "" {
		o = append(o, option.WithBaseURL(u))
	}
	o = append(o, opts...)
	m := &Model{client: sdk.NewClient(o...), name: spec.GetName(), maxOutput: uint64(spec.GetMaxOutputTokens())}
	if spec.Temperature != nil {
		t := spec.GetTemperature()
		m.temperature = &t
	}
	return m, nil
}

// Next implements model.Model: one message, one decision; streamed when
// req.Output is set (see stream).
func (m *Model) Next(ctx context.Context, req *model.Request) (*model.Reply, error) {
	p, err := newPrompt(req)
	if err != nil {
		return nil, err
	}
	maxTokens := m.maxTokens(req)
	params := sdk.MessageNewParams{
		Model:      m.name,
		MaxTokens:  int64(maxTokens),
		System:     p.system,
		Messages:   p.messages,
		Tools:      p.tools,
		ToolChoice: toolChoice(),
	}
	var call []option.RequestOption
	if m.temperature != nil {
		// The SDK has no field for it: API version 2026-10-21, which it
		// speaks, dropped the sampling parameters, and Anthropic's own API
		// answers 400 to a request that sets one. A compatible server
		// (base_url) may still take it, so it is sent as the spec sets it.
		call = append(call, option.WithJSONSet("temperature", *m.temperature))
	}
	if req.Output != nil {
		return m.stream(ctx, params, call, p.names, maxTokens, req.Output)
	}
	msg, err := m.client.Messages.New(ctx, params, call...)
	if err != nil {
		return nil, classify(ctx, err)
	}
	return reply(msg, p.names, maxTokens), nil
}

// CountTokens implements model.TokenCounter with the count_tokens endpoint:
// the input tokens of the message Next would send for req.
func (m *Model) CountTokens(ctx context.Context, req *model.Request) (uint64, error) {
	p, err := newPrompt(req)
	if err != nil {
		return 0, err
	}
	tools := make([]sdk.MessageCountTokensToolUnionParam, len(p.tools))
	for i, t := range p.tools {
		tools[i] = sdk.MessageCountTokensToolUnionParam{OfTool: t.OfTool}
	}
	n, err := m.client.Messages.CountTokens(ctx, sdk.MessageCountTokensParams{
		Model:      m.name,
		System:     sdk.MessageCountTokensParamsSystemUnion{OfTextBlockArray: p.system},
		Messages:   p.messages,
		Tools:      tools,
		ToolChoice: toolChoice(),
	})
	if err != nil {
		return 0, classify(ctx, err)
	}
	return nonNeg(n.InputTokens), nil
}

// maxTokens is the output cap of one call: the smaller of the request's and
// the spec's caps where set (the spec's is an upper bound per call), else
// DefaultMaxTokens.
func (m *Model) maxTokens(req *model.Request) uint64 {
	max := m.maxOutput
	if req.MaxOutputTokens > 0 && (max == 0 || req.MaxOutputTokens < max) {
		max = req.MaxOutputTokens
	}
	if max == 0 {
		max = DefaultMaxTokens
	}
	return max
}

// toolChoice lets the model choose, one tool use at most: rein takes one
// action per step.
func toolChoice() sdk.ToolChoiceUnionParam {
	return sdk.ToolChoiceUnionParam{OfAuto: &sdk.ToolChoiceAutoParam{DisableParallelToolUse: sdk.Bool(true)}}
}

// reply maps a message to one decision. maxTokens is the cap the call was
// sent with, for the message of a reply cut by it.
func reply(msg *sdk.Message, names *model.ToolNames, maxTokens uint64) *model.Reply {
	u := msg.Usage
	out := &model.Reply{Usage: &reinv1.Usage{
		InputTokens:           nonNeg(u.InputTokens),
		CacheWriteInputTokens: nonNeg(u.CacheCreationInputTokens),
		CacheReadInputTokens:  nonNeg(u.CacheReadInputTokens),
		OutputTokens:          nonNeg(u.OutputTokens),
	}, ResponseID: msg.ID, FinishReason: string(msg.StopReason)}
	var uses []sdk.ContentBlockUnion
	var texts []string
	for _, b := range msg.Content {
		switch b.Type {
		case "tool_use":
			uses = append(uses, b)
		case "text":
			texts = append(texts, b.Text)
		}
	}
	text := strings.Join(texts, "\n\n")
	switch {
	case msg.StopReason == sdk.StopReasonMaxTokens:
		// A tool use cut short has partial input, a text cut short is not an
		// answer.
		out.Raw = fmt.Sprintf("the reply was cut off at the output limit (max_tokens %d) before it was complete", maxTokens)
		return out
	case msg.StopReason == sdk.StopReasonRefusal:
		out.Raw = "the model refused"
		if text != "" {
			out.Raw += ": " + text
		}
		return out
	case len(uses) > 1:
		out.Raw = fmt.Sprintf("the reply held %d tool calls; rein takes one action per step: reply with exactly one", len(uses))
		return out
	case len(uses) == 1:
		return toolUse(out, uses[0], names)
	case strings.TrimSpace(text) == "":
		out.Raw = "the reply held no text and no tool call"
		return out
	}
	out.Decision = &reinv1.Decision{Action: &reinv1.Decision_FinalAnswer{FinalAnswer: &reinv1.FinalAnswer{Text: text}}}
	return out
}

// toolUse maps the reply's one tool use to a decision; input that is not a
// JSON object leaves out.Raw set to it instead.
func toolUse(out *model.Reply, b sdk.ContentBlockUnion, names *model.ToolNames) *model.Reply {
	// The SDK drops an input of null; its raw text is kept aside.
	input := b.JSON.Input.Raw()
	if len(b.Input) > 0 {
		input = string(b.Input)
	}
	var args map[string]any
	if err := json.Unmarshal([]byte(input), &args); err != nil || args == nil {
		out.Raw = input
		if strings.TrimSpace(input) == "" {
			out.Raw = fmt.Sprintf("the tool call to %q held no input", b.Name)
		}
		return out
	}
	if b.Name == AskHumanTool && !names.Granted(AskHumanTool) {
		q, ok := args["question"].(string)
		if !ok || q == "" {
			out.Raw = input
			return out
		}
		out.Decision = &reinv1.Decision{Action: &reinv1.Decision_AskHuman{AskHuman: &reinv1.AskHuman{Question: q}}}
		return out
	}
	if b.Name == model.DelegateTool && !names.Granted(model.DelegateTool) {
		d, err := model.ParseDelegate(args)
		if err != nil {
			out.Raw = input
			return out
		}
		out.Decision = d
		return out
	}
	st, err := structpb.NewStruct(args)
	if err != nil {
		out.Raw = input
		return out
	}
	out.Decision = &reinv1.Decision{Action: &reinv1.Decision_ToolCall{ToolCall: &reinv1.ToolCall{
		Tool: names.Contract(b.Name), Arguments: st, CallId: b.ID,
	}}}
	return out
}

func nonNeg(v int64) uint64 {
	if v < 0 {
		return 0
	}
	return uint64(v)
}

// classify turns a client error into rein's terms: the context's own error
// when it cut the call, a *model.HTTPError for an HTTP status (classified by
// model.Classify, as every provider's is), else the error wrapped.
func classify(ctx context.Context, err error) error {
	if cerr := ctx.Err(); cerr != nil {
		return fmt.Errorf("anthropic: %w", cerr)
	}
	var apiErr *sdk.Error
	if errors.As(err, &apiErr) {
		return model.NewHTTPError(Provider, KeyEnv, apiErr.StatusCode, apiErr.Message, apiErr.Response)
	}
	return model.Transport(Provider, err)
}
