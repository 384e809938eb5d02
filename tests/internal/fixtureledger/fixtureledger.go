// Package fixtureledger reads the ledger a fixture tool server keeps
// (`rein serve --fixture-ledger FILE`): a line "OPERATION_ID\tTOOL\tapplied"
// for each write applied, "...\trepeat" for each sent again after it was.
// The process-level suites (tests/failover, tests/upgrade) count writes
// with it, outside rein's own store.
package fixtureledger

import (
	"errors"
	"os"
	"strings"
)

// Ledger is what a ledger file holds.
type Ledger struct {
	// Applied is how many times each operation was applied.
	Applied map[string]int
	// Repeats is how many writes were sent again after they were applied.
	Repeats int
}

// Read reads the ledger at path; a file not written yet is an empty
// ledger.
func Read(path string) (Ledger, error) {
	data, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return Ledger{}, err
	}
	l := Ledger{Applied: map[string]int{}}
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Split(line, "\t")
		switch {
		case len(f) == 3 && f[2] == "applied":
			l.Applied[f[0]]++
		case len(f) == 3 && f[2] == "repeat":
			l.Repeats++
		}
	}
	return l, nil
}
