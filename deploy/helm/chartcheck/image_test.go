package chartcheck

import (
	"os/exec"
	"strings"
	"testing"
)

// The chart's default image is the one scripts/build-image.sh builds: both
// roles run exactly the REPO:TAG it names its output by.
func TestDefaultImageIsBuilt(t *testing.T) {
	out, err := exec.Command("bash", "../../../scripts/build-image.sh", "--print-ref").Output()
	if err != nil {
		t.Fatalf("scripts/build-image.sh --print-ref: %v", err)
	}
	built := strings.TrimSpace(string(out))
	if built == "" || !strings.Contains(built, ":") {
		t.Fatalf("scripts/build-image.sh --print-ref printed %q, want REPO:TAG", built)
	}
	r := render(t, chartDir)
	for _, w := range []string{"DaemonSet/airlock-node", "Deployment/airlock-api"} {
		p := pod(t, r, w)
		for _, c := range append(p.Template.Spec.InitContainers, p.Template.Spec.Containers...) {
			if strings.HasPrefix(c.Image, "postgres") {
				continue
			}
			if c.Image != built {
				t.Errorf("%s container %s runs %s by default; scripts/build-image.sh builds %s", w, c.Name, c.Image, built)
			}
		}
	}
}
