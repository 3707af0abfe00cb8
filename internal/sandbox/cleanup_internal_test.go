package sandbox

import (
	"context"
	"slices"
	"testing"
)

func TestUndoRunsNewestFirstOnceOnALiveContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // a cancelled request must still be cleaned up after
	var u undo
	var got []int
	for i := range 3 {
		u.push(func(ctx context.Context) {
			if ctx.Err() != nil {
				t.Errorf("step %d ran on a done context: %v", i, ctx.Err())
			}
			got = append(got, i)
		})
	}
	u.run(ctx)
	u.run(ctx) // a second run does nothing
	if want := []int{2, 1, 0}; !slices.Equal(got, want) {
		t.Fatalf("steps ran %v, want %v", got, want)
	}
}
