package workspace

import (
	"fmt"
	"strings"
)

// maxDiffCells bounds the LCS table; above it the diff replaces the whole
// file, which is correct but coarse.
const maxDiffCells = 4 << 20

// diffContext is how many unchanged lines surround a change in a hunk.
const diffContext = 3

// op is one line of an edit script: ' ' kept, '-' removed, '+' added.
type op struct {
	kind byte
	text string // the line, with its "\n" if it has one
}

// unifiedDiff returns the unified diff that turns old into new for path;
// created says the file is new ("--- /dev/null"). It is "" when nothing
// changes.
func unifiedDiff(path, old, new string, created bool) string {
	if old == new && !created {
		return ""
	}
	ops := editScript(splitLines(old), splitLines(new))
	var b strings.Builder
	if created {
		b.WriteString("--- /dev/null\n")
	} else {
		fmt.Fprintf(&b, "--- a/%s\n", path)
	}
	fmt.Fprintf(&b, "+++ b/%s\n", path)
	// oi and ni are the old and new line numbers (0-based) before each op.
	oi, ni := make([]int, len(ops)+1), make([]int, len(ops)+1)
	for i, o := range ops {
		oi[i+1], ni[i+1] = oi[i], ni[i]
		if o.kind != '+' {
			oi[i+1]++
		}
		if o.kind != '-' {
			ni[i+1]++
		}
	}
	for i := 0; i < len(ops); {
		if ops[i].kind == ' ' {
			i++
			continue
		}
		// A hunk: from diffContext lines before this change to
		// diffContext lines after the last change closer than
		// 2*diffContext unchanged lines to the one before it.
		start := max(0, i-diffContext)
		last := i
		for j := i + 1; j < len(ops); j++ {
			if ops[j].kind != ' ' {
				if j-last > 2*diffContext {
					break
				}
				last = j
			}
		}
		end := min(len(ops), last+diffContext+1)
		oldN, newN := oi[end]-oi[start], ni[end]-ni[start]
		oldS, newS := oi[start]+1, ni[start]+1
		if oldN == 0 {
			oldS--
		}
		if newN == 0 {
			newS--
		}
		fmt.Fprintf(&b, "@@ -%d,%d +%d,%d @@\n", oldS, oldN, newS, newN)
		for _, o := range ops[start:end] {
			b.WriteByte(o.kind)
			b.WriteString(o.text)
			if !strings.HasSuffix(o.text, "\n") {
				b.WriteString("\n\\ No newline at end of file\n")
			}
		}
		i = end
	}
	return b.String()
}

// splitLines splits s into lines, each with its "\n" (the last may lack it).
func splitLines(s string) []string {
	lines := strings.SplitAfter(s, "\n")
	if lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	return lines
}

// editScript is a shortest edit script from a to b, by longest common
// subsequence, after trimming the common prefix and suffix.
func editScript(a, b []string) []op {
	var pre, suf []op
	for len(a) > 0 && len(b) > 0 && a[0] == b[0] {
		pre = append(pre, op{' ', a[0]})
		a, b = a[1:], b[1:]
	}
	for len(a) > 0 && len(b) > 0 && a[len(a)-1] == b[len(b)-1] {
		suf = append([]op{{' ', a[len(a)-1]}}, suf...)
		a, b = a[:len(a)-1], b[:len(b)-1]
	}
	out := pre
	if (len(a)+1)*(len(b)+1) > maxDiffCells {
		for _, l := range a {
			out = append(out, op{'-', l})
		}
		for _, l := range b {
			out = append(out, op{'+', l})
		}
		return append(out, suf...)
	}
	// lcs[i][j] is the LCS length of a[i:] and b[j:].
	w := len(b) + 1
	lcs := make([]int, (len(a)+1)*w)
	for i := len(a) - 1; i >= 0; i-- {
		for j := len(b) - 1; j >= 0; j-- {
			if a[i] == b[j] {
				lcs[i*w+j] = lcs[(i+1)*w+j+1] + 1
			} else {
				lcs[i*w+j] = max(lcs[(i+1)*w+j], lcs[i*w+j+1])
			}
		}
	}
	i, j := 0, 0
	for i < len(a) && j < len(b) {
		switch {
		case a[i] == b[j]:
			out = append(out, op{' ', a[i]})
			i, j = i+1, j+1
		case lcs[(i+1)*w+j] >= lcs[i*w+j+1]:
			out = append(out, op{'-', a[i]})
			i++
		default:
			out = append(out, op{'+', b[j]})
			j++
		}
	}
	for ; i < len(a); i++ {
		out = append(out, op{'-', a[i]})
	}
	for ; j < len(b); j++ {
		out = append(out, op{'+', b[j]})
	}
	return append(out, suf...)
}
