package anthropic

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"

	sdk "github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"

	"github.com/reinhq/rein/internal/model"
)

// stream sends params as a streamed message (Request.Output): the text of
// each event is given to out as it arrives, and the events, added up, are
// mapped to a reply as Next maps a message.
func (m *Model) stream(ctx context.Context, params sdk.MessageNewParams, call []option.RequestOption, names *model.ToolNames, maxTokens uint64, out func(string)) (*model.Reply, error) {
	s := m.client.Messages.NewStreaming(ctx, params, call...)
	defer s.Close()
	var msg sdk.Message
	w := writer{out: out}
	stopped := false
	for s.Next() {
		ev := s.Current()
		if err := msg.Accumulate(ev); err != nil {
			return nil, fmt.Errorf("%s: the stream does not add up to a message: %w", Provider, err)
		}
		w.event(ev)
		stopped = stopped || ev.Type == "message_stop"
	}
	if err := s.Err(); err != nil {
		return nil, classifyStream(ctx, err)
	}
	if !stopped {
		return nil, fmt.Errorf("%s: the stream ended before the reply was complete: %w", Provider, io.ErrUnexpectedEOF)
	}
	return reply(&msg, names, maxTokens), nil
}

// writer gives a streamed message's text to out: each text delta, and each
// tool input's JSON as the model writes it. A text block after the first is
// preceded by the blank line reply joins text blocks with, so that a final
// answer's pieces add up to its decision's text.
type writer struct {
	out   func(string)
	texts int
}

func (w *writer) event(ev sdk.MessageStreamEventUnion) {
	switch ev.Type {
	case "content_block_start":
		if ev.ContentBlock.Type != "text" {
			return
		}
		if w.texts > 0 {
			w.say("\n\n")
		}
		w.texts++
		w.say(ev.ContentBlock.Text)
	case "content_block_delta":
		switch ev.Delta.Type {
		case "text_delta":
			w.say(ev.Delta.Text)
		case "input_json_delta":
			w.say(ev.Delta.PartialJSON)
		}
	}
}

func (w *writer) say(s string) {
	if s != "" {
		w.out(s)
	}
}

// classifyStream is classify for a streamed call, where an error can also
// come as an error event after the response began with 200 (the SDK gives
// it that status): it is reported as the HTTP error the API answers the same
// error type with before a stream starts.
func classifyStream(ctx context.Context, err error) error {
	var apiErr *sdk.Error
	if ctx.Err() != nil || !errors.As(err, &apiErr) || apiErr.StatusCode >= 300 {
		return classify(ctx, err)
	}
	return model.NewHTTPError(Provider, KeyEnv, eventStatus(apiErr.Type()), apiErr.Message, nil)
}

// eventStatus is the HTTP status Anthropic answers an error type with; an
// unknown type is a server error, since the server failed after it began to
// answer.
func eventStatus(typ sdk.ErrorType) int {
	switch typ {
	case sdk.ErrorTypeInvalidRequestError:
		return http.StatusBadRequest
	case sdk.ErrorTypeAuthenticationError:
		return http.StatusUnauthorized
	case sdk.ErrorTypeBillingError:
		return http.StatusPaymentRequired
	case sdk.ErrorTypePermissionError:
		return http.StatusForbidden
	case sdk.ErrorTypeNotFoundError:
		return http.StatusNotFound
	case sdk.ErrorTypeRateLimitError:
		return http.StatusTooManyRequests
	case sdk.ErrorTypeTimeoutError:
		return http.StatusGatewayTimeout
	case sdk.ErrorTypeOverloadedError:
		return 529
	}
	return http.StatusInternalServerError
}
