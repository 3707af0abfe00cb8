package api

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// SDK template builds (E2B's v3 build API) are translated into a
// Dockerfile plus a build context and run by the same engine as Dockerfile
// builds (TemplateAdmin.BuildDockerfile): one line of the generated
// Dockerfile per instruction, each line mapped back to the SDK's step
// number so logs and errors name the step the user wrote.

// sdkStep is E2B's TemplateStep.
type sdkStep struct {
	Type      string   `json:"type"`
	Args      []string `json:"args,omitempty"`
	FilesHash string   `json:"filesHash,omitempty"`
	Force     bool     `json:"force,omitempty"`
}

// sdkBuildSpec is E2B's TemplateBuildStartV2.
type sdkBuildSpec struct {
	Force             bool            `json:"force,omitempty"`
	FromImage         string          `json:"fromImage,omitempty"`
	FromTemplate      string          `json:"fromTemplate,omitempty"`
	FromImageRegistry json.RawMessage `json:"fromImageRegistry,omitempty"`
	StartCmd          string          `json:"startCmd,omitempty"`
	ReadyCmd          string          `json:"readyCmd,omitempty"`
	Steps             []sdkStep       `json:"steps,omitempty"`
}

// sdkDockerfile is the translation of one SDK build.
type sdkDockerfile struct {
	text     string
	lineStep []int             // Dockerfile line (1-based) → SDK step (0: base); index 0 unused
	desc     map[int]string    // SDK step → short description for logs
	first    map[int]int       // SDK step → its main Dockerfile line
	hashes   []string          // uploaded file sets the COPY steps use, in order
	copyDirs map[string]string // files hash → directory in the build context
	// registryUser and registryPassword authenticate the pull of fromImage.
	registryUser, registryPassword string
}

// e2bBaseImage is the SDK's default base image (Template().fromBaseImage()
// and templates that never call a from* method); Airlock's equivalent is
// the built-in template "base".
const e2bBaseImage = "e2bdev/base"

// sdkContextDir is where the generated Dockerfile and the uploaded files
// live inside the build context.
const sdkContextDir = ".e2b"

var envKeyRe = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// stepError is a bad SDK step (400, naming the step).
func stepError(step int, typ, format string, args ...any) error {
	return badRequest("step %d (%s): %s", step, typ, fmt.Sprintf(format, args...))
}

// translateSDKBuild turns spec into a Dockerfile. baseUser and baseWorkdir
// are the user and working directory the base starts with ("" for E2B's
// defaults, user and /home/user); uploaded reports whether the files of a
// COPY step were uploaded; salt makes forced steps miss the cache.
func translateSDKBuild(spec sdkBuildSpec, baseUser, baseWorkdir string, uploaded func(hash string) bool, salt string) (*sdkDockerfile, error) {
	d := &sdkDockerfile{lineStep: []int{0}, desc: map[int]string{}, first: map[int]int{}, copyDirs: map[string]string{}}
	var b strings.Builder
	line := func(step int, s string) {
		b.WriteString(s)
		b.WriteByte('\n')
		d.lineStep = append(d.lineStep, step)
	}
	// main marks the line just written as the one that stands for step n
	// in the log (its CACHED/DONE lines are the step's).
	main := func(n int) { d.first[n] = len(d.lineStep) - 1 }
	if len(spec.FromImageRegistry) > 0 && string(spec.FromImageRegistry) != "null" {
		var reg struct {
			Type     string `json:"type"`
			Username string `json:"username"`
			Password string `json:"password"`
		}
		if err := json.Unmarshal(spec.FromImageRegistry, &reg); err != nil {
			return nil, badRequest("fromImageRegistry: %v", err)
		}
		switch {
		case spec.FromImage == "":
			return nil, badRequest("fromImageRegistry needs fromImage")
		case reg.Type == "registry" && reg.Username != "" && reg.Password != "":
			d.registryUser, d.registryPassword = reg.Username, reg.Password
		case reg.Type == "registry":
			return nil, badRequest("fromImageRegistry: username and password are required")
		default:
			return nil, badRequest("fromImageRegistry type %q is not supported: use type \"registry\" with a username and password (for ECR: username AWS and the output of aws ecr get-login-password; for GCP: _json_key and the service account JSON)", reg.Type)
		}
	}
	switch {
	case spec.FromImage != "" && spec.FromTemplate != "":
		return nil, badRequest("give fromImage or fromTemplate, not both")
	case spec.FromTemplate != "":
		line(0, "FROM "+spec.FromTemplate)
		main(0)
		d.desc[0] = "FROM template " + spec.FromTemplate
	case spec.FromImage == e2bBaseImage || spec.FromImage == e2bBaseImage+":latest":
		line(0, "FROM base")
		main(0)
		d.desc[0] = "FROM " + spec.FromImage + " (Airlock's base template)"
	case spec.FromImage != "":
		if strings.ContainsAny(spec.FromImage, " \t\n") {
			return nil, badRequest("fromImage %q: not an image reference", spec.FromImage)
		}
		line(0, "FROM "+spec.FromImage)
		main(0)
		d.desc[0] = "FROM image " + spec.FromImage
	default:
		return nil, badRequest("fromImage or fromTemplate is required")
	}
	user := baseUser
	if user == "" {
		user = "user"
	}
	workdir := baseWorkdir
	if workdir == "" {
		workdir = "/home/user"
	}
	// E2B's steps run as "user" in /home/user unless the base or a step
	// says otherwise (Dockerfile builds start as root in /).
	line(0, "USER "+user)
	line(0, "WORKDIR "+workdir)
	for i, s := range spec.Steps {
		n := i + 1
		if s.Force && salt != "" {
			line(n, fmt.Sprintf("ARG AIRLOCK_FORCE_STEP_%d=%s", n, salt))
		}
		for _, a := range s.Args {
			if strings.ContainsAny(a, "\n\r") && s.Type != "RUN" {
				return nil, stepError(n, s.Type, "arguments may not contain line breaks")
			}
		}
		switch s.Type {
		case "RUN":
			if len(s.Args) < 1 || len(s.Args) > 2 || strings.TrimSpace(s.Args[0]) == "" {
				return nil, stepError(n, s.Type, "want args [command] or [command, user]")
			}
			run := "RUN " + jsonArray("/bin/sh", "-c", s.Args[0])
			d.desc[n] = "RUN " + s.Args[0]
			if len(s.Args) == 2 && s.Args[1] != "" && s.Args[1] != user {
				if !validUser(s.Args[1]) {
					return nil, stepError(n, s.Type, "invalid user %q", s.Args[1])
				}
				d.desc[n] += " (as " + s.Args[1] + ")"
				line(n, "USER "+s.Args[1])
				line(n, run)
				main(n)
				line(n, "USER "+user)
			} else {
				line(n, run)
				main(n)
			}
		case "ENV":
			if len(s.Args) == 0 || len(s.Args)%2 != 0 {
				return nil, stepError(n, s.Type, "want args [key, value, key, value, …]")
			}
			var kv []string
			for j := 0; j < len(s.Args); j += 2 {
				if !envKeyRe.MatchString(s.Args[j]) {
					return nil, stepError(n, s.Type, "invalid variable name %q", s.Args[j])
				}
				kv = append(kv, s.Args[j]+"="+dockerQuote(s.Args[j+1]))
			}
			line(n, "ENV "+strings.Join(kv, " "))
			main(n)
			d.desc[n] = "ENV " + strings.Join(s.Args, " ")
		case "WORKDIR":
			if len(s.Args) != 1 || strings.TrimSpace(s.Args[0]) == "" {
				return nil, stepError(n, s.Type, "want args [path]")
			}
			workdir = s.Args[0]
			line(n, "WORKDIR "+workdir)
			main(n)
			d.desc[n] = "WORKDIR " + workdir
		case "USER":
			if len(s.Args) != 1 || !validUser(s.Args[0]) {
				return nil, stepError(n, s.Type, "want args [user] with a valid user name")
			}
			user = s.Args[0]
			line(n, "USER "+user)
			main(n)
			d.desc[n] = "USER " + user
		case "COPY":
			if len(s.Args) < 2 || len(s.Args) > 4 || s.Args[0] == "" || s.Args[1] == "" {
				return nil, stepError(n, s.Type, "want args [src, dest, user, mode]")
			}
			if !isSHA256(s.FilesHash) {
				return nil, stepError(n, s.Type, "filesHash %q is not a sha256 hex digest", s.FilesHash)
			}
			if !uploaded(s.FilesHash) {
				return nil, stepError(n, s.Type, "the files of %q (hash %s) were not uploaded: GET /templates/{templateID}/files/%s gives the upload URL", s.Args[0], s.FilesHash, s.FilesHash)
			}
			src := strings.TrimPrefix(s.Args[0], "./")
			if strings.HasPrefix(src, "/") || strings.Contains("/"+src+"/", "/../") {
				return nil, stepError(n, s.Type, "source %q must be a relative path inside the context", s.Args[0])
			}
			dir := sdkContextDir + "/files/" + s.FilesHash
			d.copyDirs[s.FilesHash] = dir
			d.hashes = append(d.hashes, s.FilesHash)
			flags := ""
			if len(s.Args) > 2 && s.Args[2] != "" {
				if !validUser(s.Args[2]) {
					return nil, stepError(n, s.Type, "invalid user %q", s.Args[2])
				}
				flags += " --chown=" + s.Args[2]
			} else {
				flags += " --chown=" + user
			}
			if len(s.Args) > 3 && s.Args[3] != "" {
				if _, err := strconv.ParseUint(s.Args[3], 8, 32); err != nil {
					return nil, stepError(n, s.Type, "mode %q is not octal", s.Args[3])
				}
				flags += " --chmod=" + s.Args[3]
			}
			line(n, "COPY"+flags+" "+jsonArray(dir+"/"+src, s.Args[1]))
			main(n)
			d.desc[n] = "COPY " + s.Args[0] + " " + s.Args[1]
		default:
			return nil, stepError(n, s.Type, "unknown step type (supported: COPY, ENV, RUN, WORKDIR, USER)")
		}
	}
	d.text = b.String()
	return d, nil
}

// jsonArray is a Dockerfile exec-form (JSON) argument list.
func jsonArray(args ...string) string {
	b, _ := json.Marshal(args)
	return string(b)
}

// dockerQuote quotes an ENV value literally (no variable expansion).
func dockerQuote(v string) string {
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`, `$`, `\$`)
	return `"` + r.Replace(v) + `"`
}

func validUser(u string) bool {
	if u == "" || len(u) > 64 {
		return false
	}
	for _, c := range u {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("._-:", c)) {
			return false
		}
	}
	return true
}

func isSHA256(s string) bool { return len(s) == 64 && isHex(s) }

var dockerLineRe = regexp.MustCompile(`^(?:step at )?Dockerfile line (\d+) \((.*?)\): `)

// sdkError rewrites an engine error about a Dockerfile line into one
// naming the SDK step; it returns the step ("" when none).
func (d *sdkDockerfile) sdkError(msg string) (string, string) {
	m := dockerLineRe.FindStringSubmatch(msg)
	if m == nil {
		if strings.HasPrefix(msg, "Dockerfile line 1:") {
			return "base: " + strings.TrimSpace(strings.TrimPrefix(msg, "Dockerfile line 1:")), "base"
		}
		return msg, ""
	}
	n, _ := strconv.Atoi(m[1])
	step := d.stepOf(n)
	rest := msg[len(m[0]):]
	if step == 0 {
		return "base (" + d.desc[0] + "): " + rest, "base"
	}
	return fmt.Sprintf("step %d (%s): %s", step, d.desc[step], rest), strconv.Itoa(step)
}

func (d *sdkDockerfile) stepOf(line int) int {
	if line > 0 && line < len(d.lineStep) {
		return d.lineStep[line]
	}
	return 0
}
