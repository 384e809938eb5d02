package secret

import (
	"context"
	"fmt"
	"log/slog"
)

// Handler is h with the message and every attribute of every record
// redacted by r before h writes it: strings, errors, groups, and any other
// value whose printed form holds a secret (it is then written as that
// redacted text). It is h itself when r is nil.
//
// It redacts values before h formats them, not the lines h writes: a JSON
// or quoted text line escapes some characters, and a value escaped that
// way would no longer match.
func Handler(h slog.Handler, r *Redactor) slog.Handler {
	if r == nil {
		return h
	}
	return &handler{next: h, r: r}
}

type handler struct {
	next slog.Handler
	r    *Redactor
}

func (h *handler) Enabled(ctx context.Context, l slog.Level) bool { return h.next.Enabled(ctx, l) }

func (h *handler) Handle(ctx context.Context, rec slog.Record) error {
	out := slog.NewRecord(rec.Time, rec.Level, h.r.Redact(rec.Message), rec.PC)
	rec.Attrs(func(a slog.Attr) bool {
		out.AddAttrs(h.attr(a))
		return true
	})
	return h.next.Handle(ctx, out)
}

func (h *handler) WithAttrs(as []slog.Attr) slog.Handler {
	return &handler{next: h.next.WithAttrs(h.attrs(as)), r: h.r}
}

func (h *handler) WithGroup(name string) slog.Handler {
	return &handler{next: h.next.WithGroup(h.r.Redact(name)), r: h.r}
}

func (h *handler) attrs(as []slog.Attr) []slog.Attr {
	out := make([]slog.Attr, len(as))
	for i, a := range as {
		out[i] = h.attr(a)
	}
	return out
}

// attr is a redacted. A value that holds no secret is passed on as it
// was, so that h formats it as it would have.
func (h *handler) attr(a slog.Attr) slog.Attr {
	a.Key = h.r.Redact(a.Key)
	v := a.Value.Resolve()
	switch v.Kind() {
	case slog.KindString:
		v = slog.StringValue(h.r.Redact(v.String()))
	case slog.KindGroup:
		v = slog.GroupValue(h.attrs(v.Group())...)
	case slog.KindAny:
		// fmt calls an error's Error, and survives a nil one's panic.
		var s string
		if err, ok := v.Any().(error); ok {
			s = fmt.Sprint(err)
		} else {
			s = fmt.Sprintf("%+v", v.Any())
		}
		if h.r.Holds(s) {
			v = slog.StringValue(h.r.Redact(s))
		}
	}
	a.Value = v
	return a
}
