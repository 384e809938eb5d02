//go:build race

package step

// raceEnabled says the tests run under the race detector.
const raceEnabled = true
