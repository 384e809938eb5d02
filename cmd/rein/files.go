package main

import (
	"bufio"
	"bytes"
	"errors"

	"os"
	"strings"

	"google.golang.org/protobuf/encoding/protojson"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/taskcontract"
	"github.com/reinhq/rein/internal/tools"
)

// loadTask reads a task file: the protojson form of a TaskContract, with
// unknown fields refused. Every error names the file and the field.
func loadTask(path string) (*reinv1.TaskContract, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, usageError("read task file: %v", err)
	}
	c := &reinv1.TaskContract{}
	if err := protojson.Unmarshal(data, c); err != nil {
		return nil, usageError("%s: %s", path, protoError(err))
	}
	return c, nil
}

// validateTask checks a task file's contract as the server will, so that a
// refused task is reported with its file and field before anything opens.
// Tool names go first, by the API's rule (tools.CheckName), so that the
// file gets the message StartRun would give.
func validateTask(path string, c *reinv1.TaskContract) error {
	for i, g := range c.GetTools() {
		if err := tools.CheckName(g.GetName()); err != nil {
			return usageError("%s: tools[%d].name: %q: %v", path, i, g.GetName(), err)
		}
	}
	if err := taskcontract.Validate(c); err != nil {
		var fe *taskcontract.FieldError
		if errors.As(err, &fe) {
			// The file is the contract: drop the "contract." prefix.
			return usageError("%s: %s: %s", path, strings.TrimPrefix(fe.Field, "contract."), fe.Description)
		}
		return usageError("%s: %v", path, err)
	}
	return nil
}

// protoError strips protojson's "proto: " prefix and its non-breaking spaces.
func protoError(err error) string {
	msg := strings.ReplaceAll(err.Error(), "\u00a0", " ")
	return strings.TrimPrefix(msg, "proto: ")
}

// flagFile splits a --model or --tools value "KIND:FILE".
func flagFile(flag, value, kind string) (string, error) {
	k, file, ok := strings.Cut(value, ":")
	if !ok || k != kind || file == "" {
		return "", usageError("--%s %q: expected %s:FILE", flag, value, kind)
	}
	return file, nil
}

// loadScript reads a model script: JSONL, one reply per line, each
// {"decision": {…}}, {"raw": "text"} or {"error": "message"}, with optional
// "usage" and "delay_ms". Blank lines are skipped.
func loadScript(path string) ([]*reinv1.ScriptedReply, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, usageError("read model script: %v", err)
	}
	var replies []*reinv1.ScriptedReply
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	for line := 1; sc.Scan(); line++ {
		text := bytes.TrimSpace(sc.Bytes())
		if len(text) == 0 {
			continue
		}
		r := &reinv1.ScriptedReply{}
		if err := protojson.Unmarshal(text, r); err != nil {
			return nil, usageError("%s:%d: %s", path, line, protoError(err))
		}
		if r.GetReply() == nil {
			return nil, usageError("%s:%d: a reply needs one of decision, raw or error", path, line)
		}
		replies = append(replies, r)
	}
	if err := sc.Err(); err != nil {
		return nil, usageError("%s: %v", path, err)
	}
	if len(replies) == 0 {
		return nil, usageError("%s: the script has no replies", path)
	}
	return replies, nil
}

// loadFixtures reads a fixture tools file.
func loadFixtures(path string) (*tools.Fixtures, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, usageError("read tool fixtures: %v", err)
	}
	f, err := tools.ParseFixtures(data)
	if err != nil {
		return nil, usageError("%s: %v", path, err)
	}
	return f, nil
}

// scriptSpec is the ModelSpec of a scripted model.
func scriptSpec(replies []*reinv1.ScriptedReply) *reinv1.ModelSpec {
	return &reinv1.ModelSpec{Provider: "script", Name: "script", Script: replies}
}
