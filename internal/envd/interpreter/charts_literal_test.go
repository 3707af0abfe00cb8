//go:build linux

package interpreter

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
)

// runRaw returns the raw NDJSON lines of one execution.
func runRaw(t *testing.T, url, code string) []string {
	t.Helper()
	b, _ := json.Marshal(rec{"code": code})
	resp, err := http.Post(url+"/execute", "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSpace(string(raw)), "\n")
}

func chartLine(t *testing.T, lines []string) string {
	t.Helper()
	for _, l := range lines {
		if strings.Contains(l, `"chart":`) {
			return l
		}
	}
	t.Fatalf("no chart result in %q", lines)
	return ""
}

// Chart values keep their type on the wire (issue 26, item 4): a float tick
// or point that happens to be whole is a JSON float (-1.0, not -1), which
// E2B's Python chart classes check with isinstance(x, float); a pie wedge's
// angle is rounded as E2B's extractor rounds it (324.0, not 323.9999914).
func TestChartNumbersKeepTheirType(t *testing.T) {
	needTool(t, "/usr/bin/python3", "-c", "import ipykernel, matplotlib, matplotlib_inline")
	_, ts := newTestServer(t)

	l := chartLine(t, runRaw(t, ts.URL, "import matplotlib.pyplot as plt\nplt.scatter([-1, 1], [0, 2])\nplt.show()"))
	for _, key := range []string{"x_ticks", "y_ticks"} {
		m := regexp.MustCompile(`"` + key + `":\[([^\]]*)\]`).FindStringSubmatch(l)
		if m == nil {
			t.Fatalf("no %s in %s", key, l)
		}
		for _, v := range strings.Split(m[1], ",") {
			if !strings.ContainsAny(v, ".eE") {
				t.Fatalf("%s value %s is not a JSON float: %s", key, v, m[0])
			}
		}
	}
	if !strings.Contains(l, "-1.0") {
		t.Fatalf("no -1.0 tick: %s", l)
	}

	l = chartLine(t, runRaw(t, ts.URL, "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [4, 5, 6])\nplt.show()"))
	if !strings.Contains(l, `"points":[[1.0,4.0],[2.0,5.0],[3.0,6.0]]`) {
		t.Fatalf("line points are not floats: %s", l)
	}

	l = chartLine(t, runRaw(t, ts.URL, "import matplotlib.pyplot as plt\nfig, ax = plt.subplots()\n"+
		"ax.pie([90, 10], labels=['No', 'No, in blue'], autopct='%1.1f%%', startangle=90)\nplt.show()"))
	if !strings.Contains(l, `{"angle":324.0,"label":"No","radius":1.0}`) || !strings.Contains(l, `{"angle":36.0,"label":"No, in blue","radius":1.0}`) {
		t.Fatalf("pie elements: %s", l)
	}
}
