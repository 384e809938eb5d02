//go:build race

package harness

// raceEnabled says the tests run under the race detector.
const raceEnabled = true
