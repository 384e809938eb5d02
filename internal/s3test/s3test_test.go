package s3test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"gocloud.dev/blob"
	"gocloud.dev/gcerrors"
)

// write writes key=value to b within d.
func write(b *blob.Bucket, d time.Duration, key, value string) error {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	return b.WriteAll(ctx, key, []byte(value), nil)
}

func read(t *testing.T, b *blob.Bucket, key string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	v, err := b.ReadAll(ctx, key)
	if err != nil {
		t.Fatalf("read %s: %v", key, err)
	}
	return string(v)
}

// An object written through gocloud.dev/blob reads back, lists, lands in
// the data directory, and is gone once deleted.
func TestBucketRoundTrip(t *testing.T) {
	srv := Start(t)
	b := srv.Open(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	const key, value = "runs/r1/export.json", `{"run":"r1"}`
	if err := b.WriteAll(ctx, key, []byte(value), &blob.WriterOptions{ContentType: "application/json"}); err != nil {
		t.Fatalf("write %s: %v", key, err)
	}
	if got := read(t, b, key); got != value {
		t.Fatalf("read %s = %q, want %q", key, got, value)
	}
	if _, err := os.Stat(filepath.Join(srv.Dir, srv.Bucket, key)); err != nil {
		t.Fatalf("the object is not a file in the data directory: %v", err)
	}

	var keys []string
	it := b.List(&blob.ListOptions{Prefix: "runs/"})
	for {
		obj, err := it.Next(ctx)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("list runs/: %v", err)
		}
		keys = append(keys, obj.Key)
	}
	if len(keys) != 1 || keys[0] != key {
		t.Fatalf("list runs/ = %q, want [%q]", keys, key)
	}

	if err := b.Delete(ctx, key); err != nil {
		t.Fatalf("delete %s: %v", key, err)
	}
	if ok, err := b.Exists(ctx, key); err != nil || ok {
		t.Fatalf("exists %s after delete = %v, %v; want false, nil", key, ok, err)
	}
	if _, err := b.ReadAll(ctx, key); gcerrors.Code(err) != gcerrors.NotFound {
		t.Fatalf("read %s after delete: %v, want NotFound", key, err)
	}
}

// Wrong credentials are refused at once with the server's reason, never
// answered by a hang; nothing is written.
func TestBucketWrongCredentials(t *testing.T) {
	srv := Start(t)
	for _, tc := range []struct {
		name, access, secret string
		status               int
		code                 string
	}{
		{"wrong secret", AccessKey, SecretKey + "x", http.StatusForbidden, "SignatureDoesNotMatch"},
		// AWS answers 403 InvalidAccessKeyId; versitygw without an IAM
		// service answers this.
		{"unknown access key", "rein-nobody", SecretKey, http.StatusNotFound, "XAdminUserNotFound"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := srv.Open(t)
			t.Setenv("AWS_ACCESS_KEY_ID", tc.access)
			t.Setenv("AWS_SECRET_ACCESS_KEY", tc.secret)
			wrong, err := blob.OpenBucket(context.Background(), srv.URL())
			if err != nil {
				t.Fatal(err)
			}
			defer wrong.Close()

			const within = 10 * time.Second
			start := time.Now()
			err = write(wrong, within, "k", "v")
			if err == nil {
				t.Fatal("write with wrong credentials succeeded")
			}
			if errors.Is(err, context.DeadlineExceeded) || time.Since(start) >= within {
				t.Fatalf("write with wrong credentials waited for its deadline (%v); want a refusal", err)
			}
			// The AWS SDK's errors, matched by their methods so that this
			// module does not import the SDK: smithy.APIError's code and
			// awshttp.ResponseError's status.
			var status interface{ HTTPStatusCode() int }
			if !errors.As(err, &status) || status.HTTPStatusCode() != tc.status {
				t.Fatalf("write with wrong credentials: %v, want HTTP status %d", err, tc.status)
			}
			var api interface{ ErrorCode() string }
			if !errors.As(err, &api) || api.ErrorCode() != tc.code {
				t.Fatalf("write with wrong credentials: %v, want the S3 error %s", err, tc.code)
			}
			if ok, err := b.Exists(context.Background(), "k"); err != nil || ok {
				t.Fatalf("exists k with the right credentials = %v, %v; want false, nil", ok, err)
			}
		})
	}
}

// A killed server fails a write within its deadline rather than hanging;
// restarted, it serves what it held before the kill and takes writes again.
func TestServerKillRestart(t *testing.T) {
	srv := Start(t)
	b := srv.Open(t)
	if err := write(b, 10*time.Second, "before", "1"); err != nil {
		t.Fatalf("write before the kill: %v", err)
	}

	srv.Kill()
	const within = 3 * time.Second
	start := time.Now()
	err := write(b, within, "during", "2")
	took := time.Since(start)
	if err == nil {
		t.Fatal("write to a killed server succeeded")
	}
	if took > within+2*time.Second {
		t.Fatalf("write to a killed server took %v, want an error within %v", took, within)
	}
	t.Logf("write to a killed server failed after %v: %v", took.Round(time.Millisecond), err)

	srv.Restart(t)
	if got := read(t, b, "before"); got != "1" {
		t.Fatalf("before = %q after the restart, want 1", got)
	}
	if err := write(b, 10*time.Second, "after", "3"); err != nil {
		t.Fatalf("write after the restart: %v", err)
	}
	if got := read(t, b, "after"); got != "3" {
		t.Fatalf("after = %q, want 3", got)
	}
}

// $REIN_VERSITYGW_BIN naming something that is not an executable is
// refused with a message naming the variable.
func TestFindBinaryBadEnv(t *testing.T) {
	notExec := filepath.Join(t.TempDir(), "versitygw")
	if err := os.WriteFile(notExec, []byte("not a program"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{notExec, filepath.Join(t.TempDir(), "missing")} {
		t.Setenv(BinEnv, p)
		_, err := FindBinary()
		if err == nil || !strings.Contains(err.Error(), BinEnv) {
			t.Errorf("FindBinary with $%s=%s: %v, want an error naming the variable", BinEnv, p, err)
		}
	}
}

// A server that cannot start (its address is not this machine's) fails the
// wait at once rather than at the deadline.
func TestWaitReadyServerExits(t *testing.T) {
	bin := Binary(t)
	log := &logBuffer{}
	p, err := launch(bin, "192.0.2.1:7070", t.TempDir(), log) // TEST-NET-1
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Kill() })
	ctx, cancel := context.WithTimeout(context.Background(), ReadyWithin)
	defer cancel()
	start := time.Now()
	err = waitReady(ctx, p, "http://192.0.2.1:7070")
	if !errors.Is(err, errExited) {
		t.Fatalf("waitReady on a server that cannot start: %v, want errExited; log:\n%s", err, log.tail(2048))
	}
	if time.Since(start) >= ReadyWithin {
		t.Fatal("waitReady took the whole deadline; want it to notice the exit")
	}
}
