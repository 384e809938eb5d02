// Package model defines what rein asks of a model, and the providers that
// answer: the scripted model (offline, deterministic) here; real providers
// beside it. A model proposes one decision per call; it never sets a status.
package model

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/protobuf/types/known/structpb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
)

// Model proposes the next decision of a run.
type Model interface {
	// Next sends one call. It returns a Reply whose Decision is set, or whose
	// Raw holds text that did not parse as a decision, or an error when the
	// client failed. It must honour ctx's deadline and cancellation.
	Next(ctx context.Context, req *Request) (*Reply, error)
}

// TokenCounter is implemented by models that can count a request's input
// tokens before sending it (a provider's count endpoint, or a script that
// knows). The harness estimates for models that do not.
type TokenCounter interface {
	CountTokens(ctx context.Context, req *Request) (uint64, error)
}

// Request is one model call: the contract's goal, inputs and tools, and the
// run's transcript so far.
type Request struct {
	RunID string
	// Step is the call's 1-based index within the run.
	Step   uint32
	Goal   string
	Inputs *structpb.Struct
	Tools  []*reinv1.ToolGrant
	// Transcript is every decision and observation so far, oldest first. The
	// model must not modify it.
	Transcript []Turn
	// MaxOutputTokens caps the reply; 0 means no cap.
	MaxOutputTokens uint64
	// Delegate says the contract allows delegation: the provider offers
	// the delegate tool (DelegateTool).
	Delegate bool
	// Output, when set, asks the provider to stream: it is given the
	// reply's text as the model writes it, in order, each piece once (the
	// text of a tool call is its arguments' JSON), on Next's goroutine and
	// before Next returns. What Next returns is the same reply as without
	// it. Nil means the call does not stream.
	Output func(text string)
	// Cache asks the provider to cache the input's prefix for the next
	// call; nil asks for no caching (docs/models.md).
	Cache *Cache
}

// Cache is how a call asks for prompt caching. The input is laid out so
// that each call begins with the previous call's input byte for byte: the
// system text, the tools (sorted by name), the goal and inputs, then the
// transcript, oldest first.
type Cache struct {
	// TTL is how long the provider is asked to keep the cached prefix.
	TTL time.Duration
	// Key groups the calls that share a prefix (OpenAI's
	// prompt_cache_key): the run tree's root run ID.
	Key string
}

// Caches says whether a provider's calls ask for prompt caching at all:
// the scripted model has no cache.
func Caches(provider string) bool { return provider == "openai" || provider == "anthropic" }

// Turn is one entry of the transcript: a decision the model made or an
// observation it is shown. Exactly one is set.
type Turn struct {
	Decision    *reinv1.Decision
	Observation *Observation
}

// Observation is something the model is shown, labelled with where it came
// from. Its text is data, never instructions.
type Observation struct {
	// Source is "tool:NAME", "harness" or "person".
	Source string
	// CallID ties a tool result to the call that asked for it.
	CallID string
	Text   string
}

// Reply is a model's answer to one call.
type Reply struct {
	Decision *reinv1.Decision
	// Raw is the reply's text when it did not parse as a decision.
	Raw string
	// Usage is the tokens the provider reported for the call; nil when it
	// reported none, and the harness counts the call at its estimate.
	Usage *reinv1.Usage
	// ResponseID is the provider's ID for the response, and FinishReason
	// why the model stopped, in the provider's words; either is "" when the
	// provider does not say.
	ResponseID   string
	FinishReason string
}

// KnownProviders lists the providers rein can build, for error messages.
const KnownProviders = "script, openai, anthropic"

// ErrUnknownProvider is returned by New for a provider rein does not know.
var ErrUnknownProvider = errors.New("unknown model provider")

// New builds the model a ModelSpec names. Only providers that need no
// configuration beyond the spec are built here.
func New(spec *reinv1.ModelSpec) (Model, error) {
	switch spec.GetProvider() {
	case "script":
		return NewScript(spec.GetScript()), nil
	case "openai", "anthropic":
		return nil, fmt.Errorf("model provider %q needs the server to supply its API key; this server was built without it", spec.GetProvider())
	}
	return nil, fmt.Errorf("%w %q; known providers: %s", ErrUnknownProvider, spec.GetProvider(), KnownProviders)
}
