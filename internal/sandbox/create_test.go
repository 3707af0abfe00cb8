package sandbox_test

import (
	"context"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/sandbox/sandboxtest"
)

func TestCreateUnknownTemplate(t *testing.T) {
	t.Parallel()
	env := sandboxtest.NewEnv(t, nil)
	_, err := env.Manager.Create(context.Background(), sandbox.CreateRequest{TemplateID: "nope", Timeout: time.Minute})
	ue, ok := sandbox.AsUserError(err)
	if !ok || ue.Code != 404 || ue.Msg != "template 'nope' not found" {
		t.Fatalf("err = %v, want 404 template 'nope' not found", err)
	}
	if len(env.Runtime.Specs) != 0 {
		t.Fatal("runtime started for unknown template")
	}
}
