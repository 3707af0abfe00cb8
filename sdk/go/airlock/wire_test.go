package airlock

import (
	"reflect"
	"strings"
	"testing"
)

// The client's query encoding and the daemon's parsing of a Dockerfile
// build agree.
func TestDockerfileBuildQueryRoundTrip(t *testing.T) {
	in := DockerfileBuild{Dockerfile: "build/Dockerfile", BuildArgs: map[string]string{"A": "1", "B": "x=y"},
		CPUCount: 2, MemoryMB: 1024, StartCmd: "serve", ReadyCmd: "curl -f localhost", NoNetwork: true, NoCache: true}
	out, err := ParseDockerfileBuild(in.Query())
	if err != nil || !reflect.DeepEqual(out, in) {
		t.Fatalf("round trip = %+v (%v), want %+v", out, err, in)
	}
	zero, err := ParseDockerfileBuild(DockerfileBuild{}.Query())
	if err != nil || zero.Dockerfile != "Dockerfile" || len(zero.BuildArgs) != 0 || zero.CPUCount != 0 || zero.NoCache {
		t.Fatalf("zero options parsed as %+v (%v)", zero, err)
	}
	for _, bad := range []string{"cpuCount=65", "memoryMB=-1", "cpuCount=x", "buildArg=novalue", "buildArg==v"} {
		k, v, _ := strings.Cut(bad, "=")
		if _, err := ParseDockerfileBuild(map[string][]string{k: {v}}); err == nil || !strings.Contains(err.Error(), k) {
			t.Errorf("%s: err = %v, want one naming %s", bad, err, k)
		}
	}
}
