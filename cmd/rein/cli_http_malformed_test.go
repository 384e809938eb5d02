package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/reflect/protoreflect"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
)

// malformed is one kind of request that is not the method's request
// message. json is its body in JSON, proto in protobuf's binary form ("" where
// the kind has no such form); frame, when set, is a whole enveloped body.
type malformed struct {
	name  string
	json  func(m protoreflect.MessageDescriptor) (string, bool)
	proto func(m protoreflect.MessageDescriptor) (string, bool)
	frame []byte
}

// always is a JSON body that does not depend on the method.
func always(body string) func(protoreflect.MessageDescriptor) (string, bool) {
	return func(protoreflect.MessageDescriptor) (string, bool) { return body, true }
}

// plainField is the first field of m that is not a well-known type (a
// google.protobuf.Value takes any JSON), or nil.
func plainField(m protoreflect.MessageDescriptor, kind protoreflect.Kind) protoreflect.FieldDescriptor {
	fs := m.Fields()
	for i := range fs.Len() {
		f := fs.Get(i)
		if f.Message() != nil && strings.HasPrefix(string(f.Message().FullName()), "google.protobuf.") {
			continue
		}
		if kind == 0 || (f.Kind() == kind && f.Cardinality() != protoreflect.Repeated) {
			return f
		}
	}
	return nil
}

// malformedKinds are the thirteen kinds of issue 26: every one is the
// caller's mistake, on every path.
var malformedKinds = []malformed{
	{name: "cut short", json: always(`{"runId":`)},
	{name: "not UTF-8", json: always("{\"zz\":\"\xff\xfe\"}"), proto: func(m protoreflect.MessageDescriptor) (string, bool) {
		f := plainField(m, protoreflect.StringKind)
		if f == nil {
			return "", false
		}
		return string(protowire.AppendString(protowire.AppendTag(nil, f.Number(), protowire.BytesType), "\xff\xfe")), true
	}},
	{name: "a wrong type", json: func(m protoreflect.MessageDescriptor) (string, bool) {
		f := plainField(m, 0)
		if f == nil {
			return "", false
		}
		return fmt.Sprintf(`{%q:[[{}]]}`, f.JSONName()), true
	}},
	{name: "a key twice", json: func(m protoreflect.MessageDescriptor) (string, bool) {
		f := plainField(m, protoreflect.StringKind)
		if f == nil {
			return "", false
		}
		return fmt.Sprintf(`{%q:"a",%q:"a"}`, f.JSONName(), f.JSONName()), true
	}},
	{name: "an array", json: always(`[{}]`)},
	{name: "nested past the limit", json: always(`{"zz":` + strings.Repeat(`{"a":`, 20000) + `1` + strings.Repeat(`}`, 20000) + `}`),
		// Groups of an unknown field, one in another.
		proto: always(strings.Repeat("\xc3\x3e", 20000) + strings.Repeat("\xc4\x3e", 20000))},
	{name: "empty", json: always(``)},
	{name: "data after the object", json: always(`{} {}`)},
	{name: "a string", json: always(`"run"`)},
	{name: "null", json: always(`null`)},
	{name: "not JSON", json: always(`<run id="1"/>`)},
	{name: "garbage bytes", proto: always("\xff\xff\xff\xff")},
	{name: "a frame longer than its body", frame: []byte{0, 0, 0, 0, 100, 1, 2, 3}},
}

// TestHTTPMalformedRequestsAreInvalidArgument: every kind of malformed
// request, on every RunService method, over Connect (JSON and protobuf,
// unary and streaming), gRPC-Web (both) and gRPC (on the gRPC port and on
// the HTTP one), is answered invalid_argument with a message saying what is
// wrong: never a server error. The twin: a well-formed request on each
// path is not.
func TestHTTPMalformedRequestsAreInvalidArgument(t *testing.T) {
	web := freeAddr(t)
	addr := serveInProcess(t, newDB(t), "--http", web, "--rate", "0")
	svc := reinv1.File_rein_v1_run_service_proto.Services().ByName("RunService")
	grpcPort := rawConn(t, addr)
	grpcHTTP := rawConn(t, web)
	methods := svc.Methods()
	for i := range methods.Len() {
		m := methods.Get(i)
		in := m.Input()
		for _, k := range malformedKinds {
			where := fmt.Sprintf("%s, %s", m.Name(), k.name)
			if k.json != nil {
				if body, ok := k.json(in); ok {
					if !m.IsStreamingServer() {
						expectInvalidConnect(t, where+", Connect JSON", web, m, "application/json", []byte(body), false)
					} else {
						expectInvalidConnect(t, where+", Connect streaming JSON", web, m, "application/connect+json", frame([]byte(body)), true)
					}
					expectInvalidConnect(t, where+", gRPC-Web JSON", web, m, "application/grpc-web+json", frame([]byte(body)), true)
				}
			}
			if k.proto != nil {
				if body, ok := k.proto(in); ok {
					if !m.IsStreamingServer() {
						expectInvalidConnect(t, where+", Connect protobuf", web, m, "application/proto", []byte(body), false)
					} else {
						expectInvalidConnect(t, where+", Connect streaming protobuf", web, m, "application/connect+proto", frame([]byte(body)), true)
					}
					expectInvalidConnect(t, where+", gRPC-Web protobuf", web, m, "application/grpc-web+proto", frame([]byte(body)), true)
					expectInvalidGRPC(t, where+", gRPC", grpcPort, m, []byte(body))
					expectInvalidGRPC(t, where+", gRPC on the HTTP port", grpcHTTP, m, []byte(body))
				}
			}
			if k.frame != nil {
				expectInvalidConnect(t, where+", gRPC-Web protobuf", web, m, "application/grpc-web+proto", k.frame, true)
				if m.IsStreamingServer() {
					expectInvalidConnect(t, where+", Connect streaming protobuf", web, m, "application/connect+proto", k.frame, true)
				}
			}
		}
	}
	// The twins: a well-formed GetServerInfo on each path.
	for _, ct := range []string{"application/json", "application/grpc-web+json"} {
		body := []byte(`{}`)
		if ct != "application/json" {
			body = frame(body)
		}
		code, hdr, answer := post(t, web, "GetServerInfo", ct, body)
		if code != http.StatusOK || (hdr.Get("Grpc-Status") != "" && hdr.Get("Grpc-Status") != "0") || !strings.Contains(answer, "local") {
			t.Errorf("a well-formed GetServerInfo (%s): %d %v %q", ct, code, hdr, answer)
		}
	}
	if err := grpcPort.Invoke(t.Context(), "/rein.v1.RunService/GetServerInfo", &[]byte{}, new([]byte), grpc.ForceCodecV2(rawCodec{})); err != nil {
		t.Errorf("a well-formed GetServerInfo over gRPC: %v", err)
	}
}

// frame is msg in one uncompressed envelope.
func frame(msg []byte) []byte {
	out := make([]byte, 5, 5+len(msg))
	binary.BigEndian.PutUint32(out[1:], uint32(len(msg)))
	return append(out, msg...)
}

func post(t *testing.T, web, method, contentType string, body []byte) (int, http.Header, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, "http://"+web+"/rein.v1.RunService/"+method, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", contentType)
	req.Header.Set("Connect-Protocol-Version", "1")
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	resp, err := http.DefaultClient.Do(req.WithContext(ctx))
	if err != nil {
		t.Fatalf("%s %s: %v", method, contentType, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for k, v := range resp.Trailer {
		resp.Header[k] = v
	}
	return resp.StatusCode, resp.Header, string(b)
}

// expectInvalidConnect posts body and checks the answer is invalid_argument
// in the protocol's form: HTTP 400 for a Connect unary call; in the
// headers, trailers or end of stream for the enveloped ones.
func expectInvalidConnect(t *testing.T, where, web string, m protoreflect.MethodDescriptor, contentType string, body []byte, enveloped bool) {
	t.Helper()
	code, hdr, answer := post(t, web, string(m.Name()), contentType, body)
	switch {
	case !enveloped:
		if code != http.StatusBadRequest || !strings.Contains(answer, `"code":"invalid_argument"`) {
			t.Errorf("%s: %d %.300s; want 400 invalid_argument", where, code, answer)
		}
	case strings.HasPrefix(contentType, "application/grpc-web"):
		got := hdr.Get("Grpc-Status")
		if got == "" { // in the trailers frame at the end of the body
			if i := strings.Index(answer, "grpc-status:"); i >= 0 {
				got = strings.TrimSpace(strings.SplitN(answer[i+len("grpc-status:"):], "\r\n", 2)[0])
			}
		}
		if (code != http.StatusOK && code/100 != 4) || got != "3" {
			t.Errorf("%s: %d grpc-status %q %v %.300q; want grpc-status 3 (invalid_argument)", where, code, got, hdr, answer)
		}
	default: // Connect streaming: the end-of-stream message
		if code != http.StatusOK || !strings.Contains(answer, `"code":"invalid_argument"`) {
			t.Errorf("%s: %d %.300q; want an end of stream with invalid_argument", where, code, answer)
		}
	}
	if strings.Contains(answer, "internal") || strings.Contains(answer, "unknown") {
		t.Errorf("%s: %.300q; the server calls the caller's mistake its own", where, answer)
	}
}

// rawCodec sends bytes as they are, to make a gRPC call of any bytes.
type rawCodec struct{}

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	return mem.BufferSlice{mem.SliceBuffer(*(v.(*[]byte)))}, nil
}

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	*(v.(*[]byte)) = data.Materialize()
	return nil
}

func (rawCodec) Name() string { return "proto" }

func rawConn(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	c, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// expectInvalidGRPC makes a gRPC call of body's bytes and checks it is
// refused InvalidArgument.
func expectInvalidGRPC(t *testing.T, where string, c *grpc.ClientConn, m protoreflect.MethodDescriptor, body []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	method := fmt.Sprintf("/%s/%s", m.Parent().FullName(), m.Name())
	var err error
	if m.IsStreamingServer() {
		var s grpc.ClientStream
		s, err = c.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true}, method, grpc.ForceCodecV2(rawCodec{}))
		if err == nil {
			if err = s.SendMsg(&body); err == nil {
				_ = s.CloseSend()
				var out []byte
				err = s.RecvMsg(&out)
			}
		}
	} else {
		var out []byte
		err = c.Invoke(ctx, method, &body, &out, grpc.ForceCodecV2(rawCodec{}))
	}
	if status.Code(err) != codes.InvalidArgument {
		t.Errorf("%s: %v; want InvalidArgument", where, err)
	}
}
