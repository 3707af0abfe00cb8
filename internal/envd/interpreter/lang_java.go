package interpreter

import (
	"context"
	_ "embed"
	"encoding/base64"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// javaRunner is the Java context runner (a JShell in one JVM), launched as a
// single-file source program by the JDK's `java`.
//
//go:embed java_runner.java
var javaRunner []byte

// javaReadyWait bounds a Java runner's start: the JVM, compiling the runner
// and warming JShell's compiler take seconds under gVisor.
const javaReadyWait = 90 * time.Second

// writeJavaRunner puts the runner where the kernel user can read it.
func writeJavaRunner(dir string) (string, error) {
	p := filepath.Join(dir, "AirlockJavaRunner.java")
	if err := os.WriteFile(p, javaRunner, 0o644); err != nil {
		return "", fmt.Errorf("writing java runner: %w", err)
	}
	return p, nil
}

// javaFlags start the runner's JVM for a quick start and a small footprint
// (a context is an interactive session, not a server): the serial collector,
// the client compiler only, no perf-data file in /tmp, a heap that shrinks;
// and open the JDK's
// environment map so per-execution env vars reach System.getenv.
var javaFlags = []string{
	"-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-XX:-UsePerfData", "-Xshare:auto",
	// Give heap back after a collection and keep the code cache small: a
	// sandbox's memory (576 MiB by default) also holds the Python and
	// JavaScript kernels.
	"-XX:MinHeapFreeRatio=10", "-XX:MaxHeapFreeRatio=20", "-XX:ReservedCodeCacheSize=32m",
	"-Djava.awt.headless=true",
	"--add-opens", "java.base/java.lang=ALL-UNNAMED", "--add-opens", "java.base/java.util=ALL-UNNAMED",
}

// javaSpec runs a Java context. global names the sandbox env vars that also
// become system properties (E2B's Java kernel reads env vars with
// System.getProperty).
func javaSpec(runnerPath string, ra runAs, global map[string]string) procSpec {
	keys := make([]string, 0, len(global))
	for k := range global {
		if validEnvName(k) {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	return procSpec{
		language:  "java",
		readyWait: javaReadyWait,
		command: func() *exec.Cmd {
			java, err := lookPathIn("java", ra.env)
			if err != nil {
				java = "java"
			}
			cmd := exec.Command(java, append(append([]string{}, javaFlags...), runnerPath)...)
			ra.apply(cmd)
			cmd.Env = append(cmd.Env, "AIRLOCK_JAVA_PROPS="+strings.Join(keys, ","))
			return cmd
		},
		request: javaRequest,
		result:  javaResult,
	}
}

// javaRequest encodes one execution for the runner: "<id> <base64 code>"
// and " <base64 name>:<base64 value>" per env var, on one line.
func javaRequest(id int, code string, env map[string]string) ([]byte, error) {
	enc := base64.StdEncoding.EncodeToString
	var b strings.Builder
	fmt.Fprintf(&b, "%d %s", id, enc([]byte(code)))
	keys := make([]string, 0, len(env))
	for k := range env {
		if validEnvName(k) {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(&b, " %s:%s", enc([]byte(k)), enc([]byte(env[k])))
	}
	b.WriteByte('\n')
	return []byte(b.String()), nil
}

// javaResult turns a runner reply into the cell's error or main result.
func javaResult(r reply) []Output {
	if !r.OK {
		return []Output{{Type: "error", ErrName: r.Name, ErrValue: r.Value, Traceback: r.Traceback}}
	}
	if r.Text != nil {
		return []Output{{Type: "result", IsMain: true, Result: map[string]any{"text": *r.Text}}}
	}
	return nil
}

// javaGlobalEnvCode applies sandbox env vars that changed after the context
// started, as system properties (the process environment keeps what the JVM
// started with).
func javaGlobalEnvCode(env map[string]string) string {
	keys := make([]string, 0, len(env))
	for k := range env {
		if validEnvName(k) {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "System.setProperty(%s, %s);\n", javaString(k), javaString(env[k]))
	}
	return b.String()
}

// javaString quotes s as a Java string literal. Every character outside
// printable ASCII is written as a \uXXXX escape (UTF-16 units), which Java
// reads before it lexes, so none of them can end the literal or the line.
func javaString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r >= 0x20 && r < 0x7f:
			b.WriteRune(r)
		case r > 0xffff:
			r -= 0x10000
			fmt.Fprintf(&b, `\u%04x\u%04x`, 0xd800+(r>>10), 0xdc00+(r&0x3ff))
		default:
			fmt.Fprintf(&b, `\u%04x`, r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// langAvailable tells why a context of language (r or java) cannot start in
// this template: its runtime is not installed.
func langAvailable(language string, env []string) error {
	prog, pkg := "R", "r-cran-irkernel"
	if language == "java" {
		prog, pkg = "java", "openjdk-17-jdk-headless"
	}
	if _, err := lookPathIn(prog, env); err != nil {
		return fmt.Errorf("%w: %s needs %s (Debian %s), which this template does not have: %w", errUnsupported, language, prog, pkg, err)
	}
	return nil
}

// startLang starts the kernel of an R or Java context.
func (s *Server) startLang(ctx context.Context, e *entry, ra runAs) (Kernel, error) {
	if e.Language == "r" {
		k, err := newRKernel(ctx, s.log, ra, s.opts.StateDir)
		if err != nil {
			return nil, err
		}
		return k, nil
	}
	p, err := writeJavaRunner(s.opts.StateDir)
	if err != nil {
		return nil, err
	}
	k, err := newProcKernel(ctx, javaSpec(p, ra, e.envApplied), s.log)
	if err != nil {
		return nil, err
	}
	return k, nil
}
