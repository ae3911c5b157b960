package filelease

import (
	"context"
	"path/filepath"
	"testing"
)

// BenchmarkWrite times one write of the store (the two synced temporary
// files, the lock, the renames and the directory's sync), the unit a
// handover on the local store pays twice: `go test -bench Write
// ./filelease/`. docs/performance.md has the figures.
func BenchmarkWrite(b *testing.B) {
	s := newStore(filepath.Join(b.TempDir(), "lease.json"))
	ctx := context.Background()
	for b.Loop() {
		if _, err := s.update(ctx, func(*state, highWater) error { return nil }); err != nil {
			b.Fatal(err)
		}
	}
}
