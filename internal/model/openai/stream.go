package openai

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	oai "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/packages/ssestream"

	"github.com/reinhq/rein/internal/model"
)

// stream sends params as a streamed chat completion (Request.Output): the
// text of each chunk is given to out as it arrives, and the chunks, added up,
// are mapped to a reply as Next maps a completion.
func (m *Model) stream(ctx context.Context, params oai.ChatCompletionNewParams, names *model.ToolNames, out func(string)) (*model.Reply, error) {
	params.StreamOptions = oai.ChatCompletionStreamOptionsParam{IncludeUsage: oai.Bool(true)}
	s := m.client.Chat.Completions.NewStreaming(ctx, params)
	defer s.Close()
	var acc oai.ChatCompletionAccumulator
	var end streamEnd
	for s.Next() {
		c := s.Current()
		if !acc.AddChunk(c) {
			return nil, fmt.Errorf("%s: a streamed chunk (id %q) does not continue the reply", Provider, c.ID)
		}
		end.note(c)
		emit(c, out)
	}
	if err := s.Err(); err != nil {
		return nil, classifyStream(ctx, err)
	}
	if end.finish == "" {
		// No chunk said why the reply finished: the stream ended early.
		return nil, fmt.Errorf("%s: the stream ended before the reply was complete: %w", Provider, io.ErrUnexpectedEOF)
	}
	end.apply(&acc.ChatCompletion)
	rep := reply(&acc.ChatCompletion, names)
	if !end.counted {
		// A compatible server that ignores include_usage counts nothing:
		// the harness counts the call at its own estimate.
		rep.Usage = nil
	}
	return rep, nil
}

// streamEnd is what the last chunks say of the whole reply. The accumulator
// adds up the usage of every chunk and takes each chunk's finish reason, even
// an empty one; the reply's are the last that were sent (OpenAI sends usage
// once, in a last chunk with no choices, as include_usage asks).
type streamEnd struct {
	usage  oai.CompletionUsage
	finish string
	// counted: a chunk reported usage.
	counted bool
}

func (e *streamEnd) note(c oai.ChatCompletionChunk) {
	if c.JSON.Usage.Valid() {
		e.usage, e.counted = c.Usage, true
	}
	for _, ch := range c.Choices {
		if ch.Index == 0 && ch.FinishReason != "" {
			e.finish = ch.FinishReason
		}
	}
}

func (e *streamEnd) apply(cc *oai.ChatCompletion) {
	cc.Usage = e.usage
	if len(cc.Choices) > 0 {
		cc.Choices[0].FinishReason = e.finish
	}
}

// emit gives out the text of one chunk: the content the model writes, its
// refusal, and the arguments' JSON of its tool calls, in the order they came.
func emit(c oai.ChatCompletionChunk, out func(string)) {
	say := func(s string) {
		if s != "" {
			out(s)
		}
	}
	for _, ch := range c.Choices {
		say(ch.Delta.Content)
		say(ch.Delta.Refusal)
		for _, tc := range ch.Delta.ToolCalls {
			say(tc.Function.Arguments)
		}
	}
}

// classifyStream is classify for a streamed call, where an error can also
// come as an event after the response began with 200: it is reported as the
// HTTP error the API answers the same failure with before a stream starts.
func classifyStream(ctx context.Context, err error) error {
	var se *ssestream.StreamError
	if ctx.Err() != nil || !errors.As(err, &se) {
		return classify(ctx, err)
	}
	var body struct {
		Error struct {
			Message string `json:"message"`
			Type    string `json:"type"`
			Code    any    `json:"code"`
		} `json:"error"`
	}
	msg := se.Message
	if json.Unmarshal(se.Event.Data, &body) == nil && body.Error.Message != "" {
		msg = body.Error.Message
	}
	return model.NewHTTPError(Provider, KeyEnv, eventStatus(body.Error.Type, body.Error.Code), msg, nil)
}

// eventStatus is the HTTP status an error event stands for: the one it names
// (as compatible servers do in its code), a 400 or 429 its type names, else
// a server error, since the server failed after it began to answer.
func eventStatus(typ string, code any) int {
	if n, ok := code.(float64); ok && n >= 400 && n < 600 {
		return int(n)
	}
	switch {
	case typ == "invalid_request_error":
		return http.StatusBadRequest
	case typ == "rate_limit_exceeded" || code == "rate_limit_exceeded" || typ == "insufficient_quota":
		return http.StatusTooManyRequests
	}
	return http.StatusInternalServerError
}
