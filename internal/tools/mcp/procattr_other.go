//go:build !unix

package mcp

import "os/exec"

// detach does nothing where process groups are not Unix's.
func detach(*exec.Cmd) {}
