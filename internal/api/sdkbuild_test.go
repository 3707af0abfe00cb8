package api

import (
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

const hashA = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"

func uploadedA(h string) bool { return h == hashA }

func TestTranslateSDKBuild(t *testing.T) {
	spec := sdkBuildSpec{FromTemplate: "base", Steps: []sdkStep{
		{Type: "COPY", Args: []string{"app/", "/app/", "", "0755"}, FilesHash: hashA}, // 1
		{Type: "RUN", Args: []string{"apt-get update\necho $HOME", "root"}},           // 2
		{Type: "ENV", Args: []string{"A", `x "y" $z`, "B", "2"}},                      // 3
		{Type: "WORKDIR", Args: []string{"/app"}},                                     // 4
		{Type: "USER", Args: []string{"web"}},                                         // 5
		{Type: "RUN", Args: []string{"make", "web"}, Force: true},                     // 6
	}}
	d, err := translateSDKBuild(spec, "", "", uploadedA, "salt")
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Join([]string{
		"FROM base",
		"USER user",
		"WORKDIR /home/user",
		`COPY --chown=user --chmod=0755 [".e2b/files/` + hashA + `/app/","/app/"]`,
		"USER root",
		`RUN ["/bin/sh","-c","apt-get update\necho $HOME"]`,
		"USER user",
		`ENV A="x \"y\" \$z" B="2"`,
		"WORKDIR /app",
		"USER web",
		"ARG AIRLOCK_FORCE_STEP_6=salt",
		`RUN ["/bin/sh","-c","make"]`,
	}, "\n") + "\n"
	if d.text != want {
		t.Fatalf("Dockerfile:\n%s\nwant:\n%s", d.text, want)
	}
	wantSteps := []int{0, 0, 0, 0, 1, 2, 2, 2, 3, 4, 5, 6, 6}
	if len(d.lineStep) != len(wantSteps) {
		t.Fatalf("lineStep = %v, want %v", d.lineStep, wantSteps)
	}
	for i := range wantSteps {
		if d.lineStep[i] != wantSteps[i] {
			t.Fatalf("lineStep = %v, want %v", d.lineStep, wantSteps)
		}
	}
	if d.first[2] != 6 || d.first[6] != 12 {
		t.Fatalf("first lines: step 2 → %d (want the RUN, 6), step 6 → %d (want 12, the RUN after the ARG)", d.first[2], d.first[6])
	}
	msg, step := d.sdkError("Dockerfile line 6 (RUN [...]): the command returned a non-zero code: 3; last output:\nx")
	if step != "2" || !strings.HasPrefix(msg, "step 2 (RUN apt-get update\necho $HOME (as root)): the command returned a non-zero code: 3") {
		t.Fatalf("sdkError = %q, %q", msg, step)
	}
	if msg, step := d.sdkError("Dockerfile line 1: FROM base: boom"); step != "base" || msg != "base: FROM base: boom" {
		t.Fatalf("sdkError(FROM) = %q, %q", msg, step)
	}
}

func TestTranslateSDKBuildInherits(t *testing.T) {
	d, err := translateSDKBuild(sdkBuildSpec{FromImage: "e2bdev/base"}, "web", "/srv", uploadedA, "")
	if err != nil {
		t.Fatal(err)
	}
	if d.text != "FROM base\nUSER web\nWORKDIR /srv\n" {
		t.Fatalf("Dockerfile:\n%s", d.text)
	}
}

func TestTranslateSDKBuildErrors(t *testing.T) {
	for _, tc := range []struct {
		spec sdkBuildSpec
		want string
	}{
		{sdkBuildSpec{}, "fromImage or fromTemplate is required"},
		{sdkBuildSpec{FromImage: "a", FromTemplate: "b"}, "not both"},
		{sdkBuildSpec{FromImage: "a", FromImageRegistry: []byte(`{"type":"registry"}`)}, "fromImageRegistry: username and password are required"},
		{sdkBuildSpec{FromImage: "a", FromImageRegistry: []byte(`{"type":"aws"}`)}, `type "aws" is not supported`},
		{sdkBuildSpec{FromTemplate: "a", FromImageRegistry: []byte(`{"type":"registry","username":"u","password":"p"}`)}, "needs fromImage"},
		{sdkBuildSpec{FromImage: "a", Steps: []sdkStep{{Type: "RUN", Args: []string{"x"}}, {Type: "EXPOSE", Args: []string{"80"}}}}, "step 2 (EXPOSE): unknown step type"},
		{sdkBuildSpec{FromImage: "a", Steps: []sdkStep{{Type: "COPY", Args: []string{"a", "/b"}, FilesHash: strings.Repeat("b", 64)}}}, "step 1 (COPY): the files of \"a\" (hash bbbb"},
		{sdkBuildSpec{FromImage: "a", Steps: []sdkStep{{Type: "COPY", Args: []string{"a", "/b"}, FilesHash: "xyz"}}}, "step 1 (COPY): filesHash \"xyz\" is not a sha256"},
		{sdkBuildSpec{FromImage: "a", Steps: []sdkStep{{Type: "COPY", Args: []string{"../a", "/b"}, FilesHash: hashA}}}, "must be a relative path"},
		{sdkBuildSpec{FromImage: "a", Steps: []sdkStep{{Type: "ENV", Args: []string{"A"}}}}, "step 1 (ENV): want args"},
		{sdkBuildSpec{FromImage: "a", Steps: []sdkStep{{Type: "ENV", Args: []string{"1A", "x"}}}}, "invalid variable name"},
		{sdkBuildSpec{FromImage: "a", Steps: []sdkStep{{Type: "ENV", Args: []string{"A", "x\ny"}}}}, "line breaks"},
		{sdkBuildSpec{FromImage: "a", Steps: []sdkStep{{Type: "USER", Args: []string{"a b"}}}}, "step 1 (USER)"},
		{sdkBuildSpec{FromImage: "a", Steps: []sdkStep{{Type: "RUN", Args: []string{"x", "bad user"}}}}, "invalid user"},
		{sdkBuildSpec{FromImage: "a", Steps: []sdkStep{{Type: "COPY", Args: []string{"a", "/b", "", "9z"}, FilesHash: hashA}}}, "not octal"},
	} {
		_, err := translateSDKBuild(tc.spec, "", "", uploadedA, "")
		ue, ok := sandbox.AsUserError(err)
		if !ok || ue.Code != 400 || !strings.Contains(ue.Msg, tc.want) {
			t.Errorf("%+v: err = %v, want a 400 containing %q", tc.spec, err, tc.want)
		}
	}
}

func TestTranslateSDKBuildRegistry(t *testing.T) {
	d, err := translateSDKBuild(sdkBuildSpec{FromImage: "r.example/a:1", FromImageRegistry: []byte(`{"type":"registry","username":"u","password":"p"}`)}, "", "", uploadedA, "")
	if err != nil || d.registryUser != "u" || d.registryPassword != "p" || strings.Contains(d.text, "p\n") {
		t.Fatalf("translate with credentials: %+v, %v", d, err)
	}
}

func TestParseTemplateRef(t *testing.T) {
	for ref, want := range map[string][2]string{"app": {"app", ""}, "app:v1.2": {"app", "v1.2"}, "a-b:Prod_1": {"a-b", "Prod_1"}} {
		n, tag, err := parseTemplateRef(ref)
		if err != nil || n != want[0] || tag != want[1] {
			t.Errorf("parseTemplateRef(%q) = %q, %q, %v", ref, n, tag, err)
		}
	}
	for _, bad := range []string{"", "App", "app:", "app:-x", "app:a/b", "app:a:b", "app:" + strings.Repeat("x", 65)} {
		if _, _, err := parseTemplateRef(bad); err == nil {
			t.Errorf("parseTemplateRef(%q) accepted", bad)
		}
	}
}
