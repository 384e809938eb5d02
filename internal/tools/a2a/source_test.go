package a2a_test

import (
	"testing"

	a2a "github.com/reinhq/rein/internal/tools/a2a"
)

// TestParseSource reads a source's URL and token, and refuses a bad one.
func TestParseSource(t *testing.T) {
	t.Setenv("A2A_TEST_TOKEN", "tok")
	src, err := a2a.ParseSource("https://agent.example/base/?token_env=A2A_TEST_TOKEN")
	if err != nil {
		t.Fatal(err)
	}
	if tok, err := src.Token(); src.URL != "https://agent.example/base" || tok != "tok" || err != nil {
		t.Errorf("ParseSource = %+v, token %q, %v", src, tok, err)
	}
	for _, bad := range []string{"ftp://x", "not a url", "http://x?token=secret", "http://x?token_env=A&token_file=B"} {
		if _, err := a2a.ParseSource(bad); err == nil {
			t.Errorf("ParseSource(%q) succeeded", bad)
		}
	}
	src, _ = a2a.ParseSource("http://x?token_env=A2A_TEST_UNSET")
	if _, err := src.Token(); err == nil {
		t.Error("an unset token_env gave a token")
	}
}
