// Package tools defines how rein runs tools, and the tools it ships. Every
// tool sits behind the same operations (list, read, propose, commit), and the
// harness, not the tool, decides which one a call may use: the contract's
// tier routes it, whatever the model was told.
package tools

import (
	"context"
	"errors"

	"google.golang.org/protobuf/types/known/structpb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
)

// Executor runs tools.
type Executor interface {
	// List returns the specs of the tools this executor provides.
	List(ctx context.Context) ([]Spec, error)
	// Read runs a side-effect-free call and returns its output.
	Read(ctx context.Context, call Call) (*structpb.Value, error)
	// Propose describes what a write would do, without doing it.
	Propose(ctx context.Context, call Call) (*structpb.Value, error)
	// Commit performs an approved write. operationID is its idempotency key:
	// a second Commit with the same key must not write twice.
	Commit(ctx context.Context, call Call, operationID string) (*structpb.Value, error)
}

// Looker is the optional fifth operation: it says whether a write with an
// idempotency key was applied, and its receipt if so. rein asks it when a
// commit's outcome is unknown (a timeout, a crash between dispatch and
// receipt) instead of dispatching blindly again.
type Looker interface {
	Lookup(ctx context.Context, call Call, operationID string) (receipt *structpb.Value, applied bool, err error)
}

// Spec describes one tool.
type Spec struct {
	Name        string
	Description string
	InputSchema *structpb.Struct
	// Tier is the tier the tool declares itself; unspecified when it
	// declares none. A call is routed by its grant's tier whatever this
	// says; it is part of the tool's definition (Digest).
	Tier reinv1.ToolTier
	// Server names the server or service that serves the tool, as the
	// server's flags name it (such as "tool-server refunds").
	Server string
}

// Call is one tool call of a run.
type Call struct {
	RunID  string
	CallID string
	Tool   string
	Args   *structpb.Struct
	// Index is how many calls to this tool the run made before this one.
	Index int
	// Preview, for Commit and Lookup, is the preview the write was proposed
	// (and approved) with, so that a tool can check the world has not moved
	// since; nil for Read and Propose.
	Preview *structpb.Value
}

// ErrNoTool is returned for a tool that no executor provides.
var ErrNoTool = errors.New("no executor provides this tool")

// ErrRefused marks a Commit that refused the write and wrote nothing (the
// world moved since the proposal, the approved preview no longer holds):
// its outcome is known, so rein tells the model instead of leaving it to a
// person.
var ErrRefused = errors.New("the tool refused the write; nothing was written")

// ErrNoLookup is returned by a Lookup that cannot look the tool's writes up
// (a Multi whose executor for the tool has no lookup, a remote service
// without LookupWrite): rein then treats the tool as having no lookup.
var ErrNoLookup = errors.New("the tool cannot look writes up")
