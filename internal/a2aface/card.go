package a2aface

import (
	"context"
	"encoding/json"
	"net/http"

	"github.com/a2aproject/a2a-go/v2/a2a"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
)

// InputSchemaExtension is the URI of the card extension whose params map
// each skill's ID to the JSON Schema of its inputs (A2A's skill has no
// field for it).
const InputSchemaExtension = "https://github.com/reinhq/rein/blob/main/docs/a2a.md#input-schemas"

// serveCard serves the public agent card: the face's endpoints on the
// host the request named (the console's guard has checked it), and a
// skill per task every principal may start.
func (f *Face) serveCard(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "the agent card is read with GET", http.StatusMethodNotAllowed)
		return
	}
	card := f.card(baseURL(r), f.opts.PublicTasks())
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-cache")
	_ = json.NewEncoder(w).Encode(card)
}

// card is the agent card at base with a skill per task.
func (f *Face) card(base string, tasks []*reinv1.Task) *a2a.AgentCard {
	card := &a2a.AgentCard{
		Name:        "rein",
		Description: "Runs of rein's catalog tasks under a budget, with approvals for every write. A message starts a skill's run (metadata skill, a data part of its inputs); a reply answers its question or decides its proposal (a data part with decision approve, deny or revise and the proposal's hash).",
		Version:     f.opts.Version,
		SupportedInterfaces: []*a2a.AgentInterface{
			a2a.NewAgentInterface(base+RPCPath, a2a.TransportProtocolJSONRPC),
			a2a.NewAgentInterface(base+RESTPath[:len(RESTPath)-1], a2a.TransportProtocolHTTPJSON),
		},
		Capabilities:       a2a.AgentCapabilities{Streaming: true, ExtendedAgentCard: true},
		DefaultInputModes:  []string{"application/json", "text/plain"},
		DefaultOutputModes: []string{"application/json", "text/plain"},
		DocumentationURL:   "https://github.com/reinhq/rein/blob/main/docs/a2a.md",
		Skills:             []a2a.AgentSkill{},
	}
	if card.Version == "" {
		card.Version = "dev"
	}
	if f.opts.Bearer {
		card.SecuritySchemes = a2a.NamedSecuritySchemes{"bearer": a2a.HTTPAuthSecurityScheme{Scheme: "Bearer", Description: "a token of rein serve --tokens"}}
		card.SecurityRequirements = a2a.SecurityRequirementsOptions{{"bearer": {}}}
	}
	schemas := map[string]any{}
	for _, t := range tasks {
		card.Skills = append(card.Skills, a2a.AgentSkill{
			ID: t.GetName(), Name: t.GetName(), Description: t.GetDescription(), Tags: []string{"rein-task"},
			InputModes: []string{"application/json", "text/plain"}, OutputModes: []string{"application/json", "text/plain"},
		})
		schema := map[string]any{"type": "object"}
		if s := t.GetInputSchema(); s != nil {
			schema = s.AsMap()
		}
		schemas[t.GetName()] = schema
	}
	card.Capabilities.Extensions = []a2a.AgentExtension{{URI: InputSchemaExtension, Description: "the JSON Schema of each skill's inputs, by skill ID", Params: schemas}}
	return card
}

// GetExtendedAgentCard is the card with a skill per task the caller may
// start.
func (h *handler) GetExtendedAgentCard(ctx context.Context, _ *a2a.GetExtendedAgentCardRequest) (*a2a.AgentCard, error) {
	resp, err := h.face.opts.Runs.ListTasks(out(ctx), &reinv1.ListTasksRequest{})
	if err != nil {
		return nil, fromStatus(err)
	}
	base, _ := ctx.Value(baseKey{}).(string)
	return h.face.card(base, resp.GetTasks()), nil
}
