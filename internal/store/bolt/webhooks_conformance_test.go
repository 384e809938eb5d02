package bolt

import (
	"path/filepath"
	"testing"

	"github.com/reinhq/rein/internal/store"
	"github.com/reinhq/rein/internal/store/storetest"
)

func TestWebhookConformance(t *testing.T) {
	storetest.RunWebhooks(t, func(t *testing.T, dir string, outbox store.Outbox) storetest.WebhookStore {
		s, err := Open(filepath.Join(dir, "rein.db"), Options{Outbox: outbox})
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}
