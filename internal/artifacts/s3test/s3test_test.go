package s3test

import (
	"context"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestMissingBinaryNamesTheBuildScript(t *testing.T) {
	t.Setenv("AIRLOCK_S3_SERVER", "/nonexistent/versitygw")
	_, err := Start(context.Background(), "")
	if err == nil || !strings.Contains(err.Error(), BuildScript) {
		t.Fatalf("Start without the binary = %v, want an error naming %s", err, BuildScript)
	}
}

func TestStartServesAndStopLeavesNothing(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := Start(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	c, err := s.Client()
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := c.BucketExists(ctx, s.Bucket); !ok || err != nil {
		t.Fatalf("bucket %s: %v, %v", s.Bucket, ok, err)
	}
	pid, dir := s.cmd.Process.Pid, s.dir
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, 0); err == nil {
		t.Errorf("server pid %d still runs after Stop", pid)
	}
	if _, err := os.Stat(dir); err == nil {
		t.Errorf("data dir %s left after Stop", dir)
	}
	if ready(ctx, s.Endpoint) {
		t.Errorf("%s still answers after Stop", s.Endpoint)
	}
}
