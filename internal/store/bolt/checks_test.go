package bolt

import "testing"

// benchBlobChecks and benchDamageChecks are more checks of the blobs test's
// store and of a damaged run, on what only the bench binary's build has
// (bench_test.go, with the tag reinbench, adds them).
var (
	benchBlobChecks   []func(t *testing.T, s *Store)
	benchDamageChecks []func(t *testing.T, s *Store, d damage)
)
