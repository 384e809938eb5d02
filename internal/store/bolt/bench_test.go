//go:build reinbench

package bolt

import (
	"testing"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
)

// ScanEvents, the bench's read of a log, in the blobs test (it skips the
// blobs kept with the events) and on a damaged run (it says what was lost,
// as Events does).
func init() {
	benchBlobChecks = append(benchBlobChecks, func(t *testing.T, s *Store) {
		n := 0
		if err := s.ScanEvents("run-a", 5, func(ev *reinv1.Event) error { n++; return nil }); err != nil || n != 16 {
			t.Errorf("ScanEvents(run-a after 5) saw %d events, %v; want 16", n, err)
		}
	})
	benchDamageChecks = append(benchDamageChecks, func(t *testing.T, s *Store, d damage) {
		err := s.ScanEvents("run-m", 0, func(*reinv1.Event) error { return nil })
		assertDataLoss(t, "ScanEvents(run-m)", err, d.seq)
	})
}
