package tools

import (
	"errors"
	"fmt"
	"strings"

	"buf.build/go/protovalidate"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
)

// CheckName reports whether name may name a tool. The rule is the API's
// and is written once, as the protovalidate rule of ToolGrant.name in
// proto/rein/v1/contract.proto, which StartRun applies to every granted
// tool; CheckName applies that same rule, and its error is the rule's own
// message, the description StartRun's BadRequest gives.
func CheckName(name string) error {
	err := protovalidate.Validate(&reinv1.ToolGrant{Name: name, Tier: reinv1.ToolTier_TOOL_TIER_READ})
	if err == nil {
		return nil
	}
	var ve *protovalidate.ValidationError
	if errors.As(err, &ve) {
		for _, v := range ve.Violations {
			if protovalidate.FieldPathString(v.Proto.GetField()) == "name" {
				return errors.New(v.Proto.GetMessage())
			}
		}
	}
	return fmt.Errorf("check tool name %q: %w", name, err)
}

// CheckServerName reports whether name may register a tool server (the
// NAME of rein's --tool-server and --mcp NAME=…) whose tools are named
// NAME.TOOL: NAME has no '.', which separates it from TOOL, and both NAME
// and NAME.x, its shortest tool name, pass CheckName.
func CheckServerName(name string) error {
	if strings.Contains(name, ".") {
		return fmt.Errorf("%q has a '.', which separates NAME from TOOL in its tools' names NAME.TOOL", name)
	}
	for _, n := range []string{name, name + ".x"} {
		if err := CheckName(n); err != nil {
			return fmt.Errorf("%q does not fit in its tools' names NAME.TOOL: %w", name, err)
		}
	}
	return nil
}
