package sandbox

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
)

func TestUndoRunsNewestFirstOnceOnALiveContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // a cancelled request must still be cleaned up after
	var u undo
	var got []int
	for i := range 3 {
		u.push(fmt.Sprint("step", i), func(ctx context.Context) error {
			if ctx.Err() != nil {
				t.Errorf("step %d ran on a done context: %v", i, ctx.Err())
			}
			got = append(got, i)
			return nil
		})
	}
	if err := u.run(ctx); err != nil {
		t.Fatalf("run = %v", err)
	}
	if err := u.run(ctx); err != nil { // a second run does nothing
		t.Fatalf("second run = %v", err)
	}
	if want := []int{2, 1, 0}; !slices.Equal(got, want) {
		t.Fatalf("steps ran %v, want %v", got, want)
	}
}

// A step of a sandbox's cleanup stack (giveBack) that failed keeps what
// the steps after it give back, so that the next start can retry: the slot
// while the network is there, the record while the runtime instance or the
// network is; the others still run, and each error comes back.
func TestGiveBackKeepsWhatAFailedStepNeeds(t *testing.T) {
	for _, tc := range []struct {
		fail []string
		want []string
	}{
		{nil, []string{stepRuntime, stepNetwork, stepSlot, stepRecord, stepObservers}},
		{[]string{stepRuntime}, []string{stepRuntime, stepNetwork, stepSlot, stepObservers}},
		{[]string{stepNetwork}, []string{stepRuntime, stepNetwork, stepObservers}},
		{[]string{stepRuntime, stepNetwork}, []string{stepRuntime, stepNetwork, stepObservers}},
	} {
		u := &undo{}
		giveBack{id: "iabc", slot: 3, dir: "/nonexistent"}.push(u)
		var ran []string
		for i := range u.steps { // the real names and order, recorded instead of done
			name := u.steps[i].name
			u.steps[i].do = func(context.Context) error {
				ran = append(ran, name)
				if slices.Contains(tc.fail, name) {
					return errors.New(name + " failed")
				}
				return nil
			}
		}
		err := u.run(context.Background())
		if !slices.Equal(ran, tc.want) {
			t.Errorf("failing %v: ran %v, want %v", tc.fail, ran, tc.want)
		}
		for _, f := range tc.fail {
			if err == nil || !strings.Contains(err.Error(), f+" failed") {
				t.Errorf("failing %v: error %v does not name %s", tc.fail, err, f)
			}
		}
		if len(tc.fail) == 0 && err != nil {
			t.Errorf("nothing failing: error %v", err)
		}
	}
}
