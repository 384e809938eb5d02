package mcpface

import (
	"context"
	"fmt"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"google.golang.org/protobuf/encoding/protojson"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
)

// maxTranscriptBytes bounds a transcript resource.
const maxTranscriptBytes = 1 << 20

// addResources adds the run resources: rein://runs/{id}, the run's state
// as JSON, and rein://runs/{id}/transcript, its events as text.
func (s *session) addResources(srv *mcp.Server) {
	if !s.may("GetRun") {
		return
	}
	srv.AddResourceTemplate(&mcp.ResourceTemplate{Name: "run", URITemplate: "rein://runs/{id}", MIMEType: "application/json",
		Description: "A run's state: status, pending action, result, usage."}, s.readResource)
	srv.AddResourceTemplate(&mcp.ResourceTemplate{Name: "transcript", URITemplate: "rein://runs/{id}/transcript", MIMEType: "text/plain",
		Description: "A run's events, one a line."}, s.readResource)
}

// parseURI splits a run resource's URI into the run ID and whether it is
// the transcript.
func parseURI(uri string) (runID string, transcript bool, ok bool) {
	rest, ok := strings.CutPrefix(uri, "rein://runs/")
	if !ok || rest == "" {
		return "", false, false
	}
	if id, cut := strings.CutSuffix(rest, "/transcript"); cut {
		rest, transcript = id, true
	}
	if rest == "" || strings.Contains(rest, "/") {
		return "", false, false
	}
	return rest, transcript, true
}

func (s *session) readResource(ctx context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
	uri := req.Params.URI
	runID, transcript, ok := parseURI(uri)
	if !ok {
		return nil, mcp.ResourceNotFoundError(uri)
	}
	if !transcript {
		got, err := s.face.opts.Runs.GetRun(s.out(ctx), &reinv1.GetRunRequest{RunId: runID})
		if err != nil {
			return nil, mcp.ResourceNotFoundError(uri)
		}
		return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: uri, MIMEType: "application/json", Text: asJSON(got.GetRun())}}}, nil
	}
	var b strings.Builder
	var after uint64
	for b.Len() < maxTranscriptBytes {
		page, err := s.face.opts.Runs.ListEvents(s.out(ctx), &reinv1.ListEventsRequest{RunId: runID, AfterSequence: after, PageSize: 500})
		if err != nil {
			return nil, mcp.ResourceNotFoundError(uri)
		}
		for _, ev := range page.GetEvents() {
			b.WriteString(transcriptLine(ev))
			after = ev.GetSequence()
		}
		if page.GetNextPageToken() == "" || len(page.GetEvents()) == 0 {
			break
		}
	}
	text := b.String()
	if len(text) > maxTranscriptBytes {
		text = text[:maxTranscriptBytes] + "\n… (cut; get_events pages through the rest)\n"
	}
	return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: uri, MIMEType: "text/plain", Text: text}}}, nil
}

// transcriptLine is one event as a line: its sequence, its kind and its
// payload.
func transcriptLine(ev *reinv1.Event) string {
	m := ev.ProtoReflect()
	od := m.Descriptor().Oneofs().ByName("payload")
	if od == nil {
		return fmt.Sprintf("%d\n", ev.GetSequence())
	}
	fd := m.WhichOneof(od)
	if fd == nil {
		return fmt.Sprintf("%d (unknown event)\n", ev.GetSequence())
	}
	payload, _ := protojson.MarshalOptions{UseProtoNames: true}.Marshal(m.Get(fd).Message().Interface())
	return fmt.Sprintf("%d %s %s %s\n", ev.GetSequence(), ev.GetActor(), fd.Name(), payload)
}

// subscribe watches a run resource and notifies the session of each event
// of the run, until the session closes or unsubscribes.
func (s *session) subscribe(ctx context.Context, req *mcp.SubscribeRequest) error {
	uri := req.Params.URI
	runID, _, ok := parseURI(uri)
	if !ok {
		return mcp.ResourceNotFoundError(uri)
	}
	if _, err := s.face.opts.Runs.GetRun(s.out(ctx), &reinv1.GetRunRequest{RunId: runID}); err != nil {
		return mcp.ResourceNotFoundError(uri)
	}
	sessCtx := s.bind(req.Session)
	wctx, cancel := context.WithCancel(sessCtx)
	s.mu.Lock()
	if s.subscriptions == nil {
		s.subscriptions = map[string]context.CancelFunc{}
	}
	if old := s.subscriptions[uri]; old != nil {
		old()
	}
	s.subscriptions[uri] = cancel
	s.mu.Unlock()
	srv := s.server
	go func() {
		defer cancel()
		stream, err := s.face.opts.Runs.WatchRun(s.out(wctx), &reinv1.WatchRunRequest{RunId: runID})
		if err != nil {
			return
		}
		for {
			resp, err := stream.Recv()
			if err != nil {
				return
			}
			if resp.GetEvent() != nil {
				_ = srv.ResourceUpdated(wctx, &mcp.ResourceUpdatedNotificationParams{URI: uri})
			}
		}
	}()
	return nil
}

func (s *session) unsubscribe(_ context.Context, req *mcp.UnsubscribeRequest) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if cancel := s.subscriptions[req.Params.URI]; cancel != nil {
		cancel()
		delete(s.subscriptions, req.Params.URI)
	}
	return nil
}
