package startup

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/artifacts"
	"github.com/airlock-sandbox/airlock/internal/artifacts/s3test"
)

func TestOpenArtifacts(t *testing.T) {
	ctx := context.Background()
	log := slog.New(slog.DiscardHandler)
	noEnv := func(string) string { return "" }
	dataDir := t.TempDir()

	st, err := OpenArtifacts(ctx, "", dataDir, noEnv, log)
	if st != nil || err != nil {
		t.Fatalf("no --artifacts: %v, %v; want no store", st, err)
	}
	if _, err := os.Stat(filepath.Join(dataDir, "artifacts-cache")); err == nil {
		t.Fatal("no --artifacts made a cache dir in the data dir")
	}

	if st, err = OpenArtifacts(ctx, filepath.Join(t.TempDir(), "store"), dataDir, noEnv, log); err != nil || st == nil {
		t.Fatalf("local --artifacts: %v", err)
	}
	if st.CacheDir() != filepath.Join(dataDir, "artifacts-cache") {
		t.Fatalf("cache in %s", st.CacheDir())
	}

	if _, err := OpenArtifacts(ctx, "s3://bucket/p", dataDir, noEnv, log); err == nil || !strings.Contains(err.Error(), "--artifacts") || !strings.Contains(err.Error(), "AWS_ACCESS_KEY_ID") {
		t.Fatalf("s3 without credentials = %v", err)
	}

	srv := s3test.StartT(t)
	env := map[string]string{"AIRLOCK_S3_ENDPOINT": "http://" + srv.Endpoint, "AWS_ACCESS_KEY_ID": srv.AccessKey, "AWS_SECRET_ACCESS_KEY": srv.SecretKey}
	getenv := func(k string) string { return env[k] }
	if st, err = OpenArtifacts(ctx, "s3://"+srv.Bucket+"/cluster", dataDir, getenv, log); err != nil || st == nil {
		t.Fatalf("s3 --artifacts: %v", err)
	}
	if err := srv.Pause(); err != nil {
		t.Fatal(err)
	}
	_, err = OpenArtifacts(ctx, "s3://"+srv.Bucket+"/cluster", dataDir, getenv, log)
	if !errors.Is(err, artifacts.ErrUnavailable) || !strings.Contains(err.Error(), "--artifacts") {
		t.Fatalf("unreachable s3 --artifacts = %v; want ErrUnavailable naming the flag", err)
	}
}
