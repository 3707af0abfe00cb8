package sandbox

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"
)

type observed struct {
	op, kind, step string
	elapsed        time.Duration
}

func testSteps(buf *bytes.Buffer, got *[]observed) *steps {
	return &steps{op: opCreate, kind: kindCold, id: "isb1",
		log: slog.New(slog.NewTextHandler(buf, &slog.HandlerOptions{Level: slog.LevelDebug})),
		observe: func(op, kind, step string, d time.Duration) {
			*got = append(*got, observed{op, kind, step, d})
		}}
}

// The runner runs the steps in order, times each (log line and observer),
// and stops at the first failure, running the cleanup once and returning
// the step's own error.
func TestStepRunner(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	var got []observed
	r := testSteps(&buf, &got)
	var ran []string
	mk := func(name string, d time.Duration, err error) step {
		return step{name, func(context.Context) error {
			ran = append(ran, name)
			time.Sleep(d)
			return err
		}}
	}
	if err := r.run(context.Background(), func(context.Context) { t.Fatal("cleanup ran on success") },
		mk("a", 20*time.Millisecond, nil), mk("b", 0, nil), mk("c", 5*time.Millisecond, nil)); err != nil {
		t.Fatalf("run: %v", err)
	}
	if !slices.Equal(ran, []string{"a", "b", "c"}) {
		t.Fatalf("ran %v, want a b c", ran)
	}
	if len(got) != 3 || got[0].step != "a" || got[1].step != "b" || got[2].step != "c" {
		t.Fatalf("observed %+v, want a b c", got)
	}
	for _, o := range got {
		if o.op != opCreate || o.kind != kindCold {
			t.Fatalf("observed %+v, want op create kind cold", o)
		}
	}
	if got[0].elapsed < 20*time.Millisecond || got[2].elapsed < 5*time.Millisecond {
		t.Fatalf("elapsed a=%v c=%v, want ≥20ms and ≥5ms", got[0].elapsed, got[2].elapsed)
	}
	log := buf.String()
	for _, want := range []string{"sandbox=isb1 op=create kind=cold step=a elapsed=", "step=b", "step=c"} {
		if !strings.Contains(log, want) {
			t.Fatalf("debug log lacks %q:\n%s", want, log)
		}
	}

	// A failure stops the list and runs the cleanup once.
	buf.Reset()
	got, ran = nil, nil
	boom := errors.New("boom")
	cleanups := 0
	err := r.run(context.Background(), func(context.Context) { cleanups++ },
		mk("a", 0, nil), mk("b", 0, boom), mk("c", 0, nil))
	if err != boom {
		t.Fatalf("err = %v, want the step's own error", err)
	}
	if !slices.Equal(ran, []string{"a", "b"}) || cleanups != 1 {
		t.Fatalf("ran %v with %d cleanups, want a b and 1", ran, cleanups)
	}
	if len(got) != 1 || got[0].step != "a" {
		t.Fatalf("observed %+v, want only a (failed steps are not observed)", got)
	}
	if !strings.Contains(buf.String(), "step failed") || !strings.Contains(buf.String(), "step=b") {
		t.Fatalf("debug log lacks the failed step:\n%s", buf.String())
	}

	// Without a cleanup, a failure is just returned.
	if err := r.run(context.Background(), nil, mk("x", 0, boom)); err != boom {
		t.Fatalf("err = %v, want boom", err)
	}
}

// A nil runner runs its steps untimed.
func TestStepRunnerNil(t *testing.T) {
	t.Parallel()
	var r *steps
	n := 0
	err := r.run(context.Background(), nil, step{"a", func(context.Context) error { n++; return nil }},
		step{"b", func(context.Context) error { n++; return nil }})
	if err != nil || n != 2 {
		t.Fatalf("err %v, ran %d, want nil and 2", err, n)
	}
}
