package archive_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/archive"
	"github.com/reinhq/rein/internal/export"
	"github.com/reinhq/rein/internal/s3test"
)

var ended = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

// exportBytes is a small run's export, in the binary form.
func exportBytes(t *testing.T, runID string) []byte {
	t.Helper()
	x := &reinv1.RunExport{FormatVersion: export.Version, RunId: runID, ExportedBy: "rein", ExportedAt: timestamppb.New(ended),
		Events: []*reinv1.Event{{RunId: runID, Sequence: 1, RecordedAt: timestamppb.New(ended), Actor: "principal:alice",
			Payload: &reinv1.Event_RunStarted{RunStarted: &reinv1.RunStarted{
				Contract: &reinv1.TaskContract{Goal: "archive me"}, Principal: "alice", Tenant: "acme", RequestId: "r1",
			}}}}}
	var buf bytes.Buffer
	if err := export.Write(&buf, x); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestKeyLayout(t *testing.T) {
	if got, want := archive.Key("acme", ended, "run_01"), "acme/2030/01/02/run_01.rein"; got != want {
		t.Fatalf("Key = %q, want %q", got, want)
	}
	if got := archive.Key("", ended, "run_01"); got != "_/2030/01/02/run_01.rein" {
		t.Fatalf("Key of the empty tenant = %q", got)
	}
	// A tenant name cannot climb out of its own prefix.
	if got := archive.Key("../x/y", ended, "run_01"); strings.Count(got, "/") != 4 {
		t.Fatalf("Key of a tenant with slashes = %q", got)
	}
}

func TestOpenRefusesUnknownScheme(t *testing.T) {
	if _, err := archive.Open(context.Background(), "ftp://host/dir"); err == nil || !strings.Contains(err.Error(), "file:///DIR") {
		t.Fatalf("Open(ftp://…) = %v, want an error naming the schemes", err)
	}
}

func TestS3PutGetDelete(t *testing.T) {
	srv := s3test.Start(t)
	srv.Setenv(t)
	ctx := context.Background()
	a, err := archive.Open(ctx, srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if err := a.Check(ctx); err != nil {
		t.Fatalf("Check: %v", err)
	}
	data := exportBytes(t, "run_01")
	key := archive.Key("acme", ended, "run_01")
	rec, err := a.Put(ctx, key, data, ended)
	if err != nil {
		t.Fatal(err)
	}
	if rec.GetKey() != key || rec.GetSizeBytes() != uint64(len(data)) || len(rec.GetSha256()) != 64 {
		t.Fatalf("record %v", rec)
	}
	x, err := a.Get(ctx, rec)
	if err != nil || x.GetRunId() != "run_01" {
		t.Fatalf("Get: %v, %v", x, err)
	}
	// A record whose checksum is not the object's is refused.
	bad := &reinv1.RunArchive{Key: key, Sha256: strings.Repeat("0", 64)}
	if _, err := a.Get(ctx, bad); !errors.Is(err, archive.ErrMismatch) {
		t.Fatalf("Get with a wrong checksum: %v, want ErrMismatch", err)
	}
	if err := a.Delete(ctx, key); err != nil {
		t.Fatal(err)
	}
	if err := a.Delete(ctx, key); err != nil {
		t.Fatalf("a second Delete: %v, want none", err)
	}
	if _, err := a.Get(ctx, rec); !errors.Is(err, archive.ErrMissing) {
		t.Fatalf("Get after Delete: %v, want ErrMissing", err)
	}
}

func TestS3WrongCredentials(t *testing.T) {
	srv := s3test.Start(t)
	srv.Setenv(t)
	t.Setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	a, err := archive.Open(ctx, srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	_, err = a.Put(ctx, "acme/x.rein", exportBytes(t, "run_01"), ended)
	if !errors.Is(err, archive.ErrUnreachable) || !strings.Contains(err.Error(), "credentials") || !strings.Contains(err.Error(), "s3://"+s3test.Bucket) {
		t.Fatalf("Put with a wrong secret: %v; want ErrUnreachable naming the archive and its credentials", err)
	}
}

func TestS3KilledThenBack(t *testing.T) {
	srv := s3test.Start(t)
	srv.Setenv(t)
	ctx := context.Background()
	a, err := archive.Open(ctx, srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	data := exportBytes(t, "run_01")
	rec, err := a.Put(ctx, "acme/one.rein", data, ended)
	if err != nil {
		t.Fatal(err)
	}
	srv.Kill()
	kctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	if _, err := a.Put(kctx, "acme/two.rein", data, ended); !errors.Is(err, archive.ErrUnreachable) {
		t.Fatalf("Put to a killed server: %v, want ErrUnreachable", err)
	}
	srv.Restart(t)
	if _, err := a.Get(ctx, &reinv1.RunArchive{Key: rec.GetKey(), Sha256: rec.GetSha256()}); err != nil {
		t.Fatalf("Get after the restart: %v", err)
	}
	if _, err := a.Put(ctx, "acme/two.rein", data, ended); err != nil {
		t.Fatalf("Put after the restart: %v", err)
	}
}
