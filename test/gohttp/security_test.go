//go:build e2e

package gohttp

// Escape and abuse attempts through the raw HTTP API (issue 7, scope 1).
// Every attack runs in an "attacker" sandbox; each subtest asserts that the
// attack failed and, at the end, that the host, the daemon and a "witness"
// sandbox are unharmed. Subtest names start with "attack/" so bench/report
// can count them.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/guest"
)

// hostCanary writes a file with random content in the host's /tmp and
// returns its path and content; it is removed when the test ends.
func hostCanary(t *testing.T) (string, string) {
	t.Helper()
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	content := "airlock-canary-" + hex.EncodeToString(b)
	p := filepath.Join(os.TempDir(), "airlock-canary-"+hex.EncodeToString(b[:6]))
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Remove(p) })
	return p, content
}

// sandboxIP returns the sandbox's eth0 IPv4 address.
func (e env) sandboxIP(t *testing.T, s sandboxInfo) string {
	t.Helper()
	r := e.runSteady(t, s, "", "ip -4 -o addr show dev eth0", time.Minute)
	m := regexp.MustCompile(`inet (\d+\.\d+\.\d+\.\d+)/`).FindStringSubmatch(r.stdout)
	if m == nil {
		t.Fatalf("no eth0 address in %q", r.stdout)
	}
	return m[1]
}

// getFile downloads path as user through /files with the sandbox's token.
func (e env) getFile(t *testing.T, s sandboxInfo, path, user string) (int, []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	q := url.Values{"path": {path}, "username": {user}}
	req := e.envdRequest(ctx, t, s, http.MethodGet, "/files?"+q.Encode(), nil)
	res, err := httpClient.Do(req)
	if err != nil {
		t.Fatalf("GET /files %s: %v", path, err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	return res.StatusCode, body
}

// unharmed asserts the daemon is healthy and the witness still runs commands.
func (e env) unharmed(t *testing.T, witness sandboxInfo, marker string) {
	t.Helper()
	if !healthy(e.apiURL) {
		t.Fatal("daemon /health is not ok")
	}
	r := e.runSteady(t, witness, "", "cat ~/witness-marker", time.Minute)
	if r.exitCode != 0 || r.stdout != marker {
		t.Fatalf("witness sandbox harmed: %+v", r)
	}
}

func TestEscapeAttempts(t *testing.T) {
	e := loadEnv(t)
	attacker := e.createV1(t, 600, nil)
	witness := e.createV1(t, 600, nil)
	marker := "witness-" + uniqueTag(t) + "\n"
	if r := e.runSteady(t, witness, "", "echo "+strings.TrimSpace(marker)+" > ~/witness-marker && cat ~/witness-marker", time.Minute); r.stdout != marker {
		t.Fatalf("writing witness marker: %+v", r)
	}
	// A process in the witness the attacker must not see.
	witnessSleep := "7" + strconv.Itoa(int(time.Now().UnixNano()%1000000))
	if r := e.runSteady(t, witness, "", "nohup sleep "+witnessSleep+" >/dev/null 2>&1 & echo ok", time.Minute); r.exitCode != 0 {
		t.Fatalf("witness sleep: %+v", r)
	}
	canaryPath, canary := hostCanary(t)
	hostStart := time.Now()

	t.Run("attack/host-fs-via-proc-1-root", func(t *testing.T) {
		cmd := fmt.Sprintf(`cat /proc/1/root%[1]s %[1]s 2>&1; grep -rs %[2]s /proc/1/root/tmp /tmp 2>&1 | head -3;
ls /proc/1/root%[3]s 2>&1; echo pwned > /proc/1/root%[1]s.w 2>&1; echo pwned > %[1]s.w 2>&1; true`,
			canaryPath, canary, os.Getenv("AIRLOCK_E2E_DATA_DIR"))
		r := e.runSteady(t, attacker, "root", cmd, 2*time.Minute)
		if strings.Contains(r.stdout+r.stderr, canary) {
			t.Fatalf("host canary readable from the sandbox: %q", r.stdout)
		}
		if strings.Contains(r.stdout, "airlock.db") {
			t.Fatalf("daemon data dir listed from the sandbox: %q", r.stdout)
		}
		if _, err := os.Stat(canaryPath + ".w"); err == nil {
			_ = os.Remove(canaryPath + ".w")
			t.Fatalf("sandbox root created %s.w on the host", canaryPath)
		}
		if b, _ := os.ReadFile(canaryPath); string(b) != canary {
			t.Fatalf("host canary changed: %q", b)
		}
	})

	t.Run("attack/device-nodes", func(t *testing.T) {
		r := e.runSteady(t, attacker, "root", `find /dev -type b 2>/dev/null; echo ---;
mknod /tmp/blk b 8 0 2>&1 && head -c 512 /tmp/blk | od -c | head -2; echo ---;
mknod /tmp/kmem c 1 2 2>&1 && head -c 16 /tmp/kmem | od -c | head -2; echo ---;
head -c 16 /dev/mem 2>&1; head -c 16 /dev/kmsg 2>&1; true`, time.Minute)
		parts := strings.Split(r.stdout, "---")
		if strings.TrimSpace(parts[0]) != "" {
			t.Errorf("block devices visible in /dev: %q", parts[0])
		}
		// Any od dump means a device node was readable.
		if strings.Contains(r.stdout, "0000000") {
			t.Errorf("a raw device was readable from the sandbox: %q", r.stdout)
		}
	})

	t.Run("attack/mount", func(t *testing.T) {
		dataDir := os.Getenv("AIRLOCK_E2E_DATA_DIR")
		before := len(mountsUnder(t, filepath.Join(dataDir, "sandboxes", attacker.SandboxID)))
		u := e.runSteady(t, attacker, "user", "mount -t tmpfs x /tmp 2>&1; echo rc=$?", time.Minute)
		if !strings.Contains(u.stdout, "rc=32") && !strings.Contains(u.stdout, "rc=1") {
			t.Errorf("mount as user did not fail: %q", u.stdout)
		}
		// Root in the sandbox: mounts of host block devices or filesystems must fail.
		r := e.runSteady(t, attacker, "root", `mkdir -p /mnt/x; for d in /dev/vda /dev/sda /dev/sda1 /dev/nvme0n1; do mount $d /mnt/x 2>/dev/null && echo MOUNTED $d; done;
mount -t ext4 /dev/vda /mnt/x 2>/dev/null && echo MOUNTED ext4; ls /mnt/x; true`, time.Minute)
		if strings.Contains(r.stdout, "MOUNTED") {
			t.Errorf("root in the sandbox mounted a host device: %q", r.stdout)
		}
		if after := len(mountsUnder(t, filepath.Join(dataDir, "sandboxes", attacker.SandboxID))); after != before {
			t.Errorf("host mounts under the sandbox dir changed: %d → %d", before, after)
		}
	})

	t.Run("attack/kernel-modules", func(t *testing.T) {
		// init_module(2) = 175, finit_module(2) = 313 on x86_64.
		py := `import ctypes; l=ctypes.CDLL(None, use_errno=True); ` +
			`print(l.syscall(175, b"\x7fELF" + b"\0"*60, 64, b""), ctypes.get_errno()); ` +
			`print(l.syscall(313, 0, b"", 0), ctypes.get_errno())`
		for _, user := range []string{"user", "root"} {
			r := e.runSteady(t, attacker, user, "python3 -c '"+py+"'", time.Minute)
			lines := strings.Fields(r.stdout)
			if r.exitCode != 0 || len(lines) != 4 || lines[0] != "-1" || lines[2] != "-1" {
				t.Errorf("module loading as %s did not fail: %+v", user, r)
			}
		}
		if _, err := os.Stat("/proc/modules"); err == nil {
			b, _ := os.ReadFile("/proc/modules")
			if strings.Contains(string(b), "airlock") {
				t.Errorf("unexpected host module: %s", b)
			}
		}
	})

	t.Run("attack/ptrace-agent", func(t *testing.T) {
		// PTRACE_ATTACH = 16, PTRACE_DETACH = 17.
		py := `import ctypes, time; l=ctypes.CDLL(None, use_errno=True); r=l.ptrace(16, 1, 0, 0); e=ctypes.get_errno(); ` +
			`time.sleep(0.2); l.ptrace(17, 1, 0, 0) if r == 0 else None; print(r, e)`
		u := e.runSteady(t, attacker, "user", "python3 -c '"+py+"'", time.Minute)
		if f := strings.Fields(u.stdout); u.exitCode != 0 || len(f) != 2 || f[0] != "-1" {
			t.Errorf("ptrace of the agent as user did not fail: %+v", u)
		}
		// Root in the sandbox owns the sandbox, agent included; whatever it
		// does there, the agent keeps serving and nothing outside is touched.
		root := e.runSteady(t, attacker, "root", "python3 -c '"+py+"'", time.Minute)
		t.Logf("ptrace of the agent as root in the sandbox: %q", root.stdout)
		if r := e.runSteady(t, attacker, "", "echo alive", time.Minute); r.stdout != "alive\n" {
			t.Fatalf("agent not serving after ptrace attempts: %+v", r)
		}
	})

	t.Run("attack/clock", func(t *testing.T) {
		for _, user := range []string{"user", "root"} {
			r := e.runSteady(t, attacker, user, "date -s '2001-01-01 00:00:00' >/dev/null 2>&1; echo rc=$?; date +%s", time.Minute)
			f := strings.Fields(r.stdout)
			if len(f) != 2 || f[0] == "rc=0" {
				t.Errorf("setting the clock as %s did not fail: %+v", user, r)
				continue
			}
			secs, _ := strconv.ParseInt(f[1], 10, 64)
			if d := time.Now().Unix() - secs; d > 60 || d < -60 {
				t.Errorf("sandbox clock off by %d s after the attempt as %s", d, user)
			}
		}
		if time.Since(hostStart) < 0 || time.Since(hostStart) > time.Hour {
			t.Fatalf("host clock moved: %v since the test started", time.Since(hostStart))
		}
	})

	t.Run("attack/see-other-processes", func(t *testing.T) {
		r := e.runSteady(t, attacker, "root", "for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline 2>/dev/null; echo; done", time.Minute)
		if strings.Contains(r.stdout, "sleep "+witnessSleep) {
			t.Errorf("attacker sees the witness's process: %q", r.stdout)
		}
		for _, host := range []string{"airlock serve", "runsc", "gofer", "systemd", "go test"} {
			if strings.Contains(r.stdout, host) {
				t.Errorf("attacker sees host process %q: %q", host, r.stdout)
			}
		}
	})

	t.Run("attack/network-reach", func(t *testing.T) {
		wIP := e.sandboxIP(t, witness)
		aIP := e.sandboxIP(t, attacker)
		u, _ := url.Parse(e.apiURL)
		port := u.Port()
		gw := strings.Join(strings.Split(aIP, ".")[:3], ".") + "." + strconv.Itoa(mustAtoi(strings.Split(aIP, ".")[3])-1)
		// Positive control: the agent answers on its own address.
		if r := e.runSteady(t, attacker, "", "curl -s -m 3 -o /dev/null -w '%{http_code}' http://"+aIP+":49983/health", time.Minute); r.stdout != "204" && r.stdout != "200" {
			t.Fatalf("positive control: own agent not reachable: %+v", r)
		}
		for _, target := range []string{
			"http://169.254.169.254/latest/meta-data/",
			"http://169.254.169.254/computeMetadata/v1/",
			"http://" + wIP + ":49983/health",
			"http://" + gw + ":" + port + "/health",
			"http://127.0.0.1:" + port + "/health",
			"http://10.0.2.2:" + port + "/health",
		} {
			r := e.runSteady(t, attacker, "root", "curl -s -m 3 -o /dev/null -w '%{http_code}' "+target+"; echo \" rc=$?\"", time.Minute)
			if !strings.HasPrefix(r.stdout, "000 ") {
				t.Errorf("attacker reached %s: %q", target, r.stdout)
			}
		}
	})

	t.Run("attack/agent-environ-has-no-secrets", func(t *testing.T) {
		r := e.runSteady(t, attacker, "user", "tr '\\0' '\\n' < /proc/1/environ 2>&1; cat /proc/1/cmdline 2>&1; true", time.Minute)
		for _, secret := range []string{attacker.EnvdAccessToken, witness.EnvdAccessToken, e.apiKey} {
			if secret != "" && strings.Contains(r.stdout, secret) {
				t.Fatalf("agent environment leaks a secret to user: %q", r.stdout)
			}
		}
	})

	t.Run("attack/other-sandbox-token", func(t *testing.T) {
		for name, tok := range map[string]string{"witness token": witness.EnvdAccessToken, "api key": e.apiKey, "none": "", "garbage": "x"} {
			forged := attacker
			forged.EnvdAccessToken = tok
			st, body := e.connectUnary(t, forged, "/filesystem.Filesystem/ListDir", "user", map[string]any{"path": "/home/user"})
			if st != http.StatusUnauthorized {
				t.Errorf("ListDir with %s: status %d %s, want 401", name, st, body)
			}
			code, body := e.getFile(t, forged, "/etc/hostname", "user")
			if code != http.StatusUnauthorized {
				t.Errorf("GET /files with %s: status %d %q, want 401", name, code, body)
			}
		}
	})

	t.Run("attack/forged-signed-url", func(t *testing.T) {
		exp := time.Now().Add(time.Hour).Unix()
		path := "/home/user/witness-marker"
		for name, sig := range map[string]string{
			"garbage":                 "v1_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
			"signed with other token": guest.Sign(path, "read", "user", witness.EnvdAccessToken, exp),
			"signed for other path":   guest.Sign("/etc/hostname", "read", "user", attacker.EnvdAccessToken, exp),
			"signed for write":        guest.Sign(path, "write", "user", attacker.EnvdAccessToken, exp),
		} {
			q := url.Values{"path": {path}, "username": {"user"}, "signature": {sig}, "signature_expiration": {strconv.FormatInt(exp, 10)}}
			noTok := attacker
			noTok.EnvdAccessToken = ""
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			req := e.envdRequest(ctx, t, noTok, http.MethodGet, "/files?"+q.Encode(), nil)
			res, err := httpClient.Do(req)
			if err != nil {
				cancel()
				t.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, res.Body)
			res.Body.Close()
			cancel()
			if res.StatusCode != http.StatusUnauthorized && res.StatusCode != http.StatusForbidden {
				t.Errorf("forged signature (%s): status %d, want 401/403", name, res.StatusCode)
			}
		}
		// Expired but otherwise valid.
		old := time.Now().Add(-time.Minute).Unix()
		q := url.Values{"path": {path}, "username": {"user"}, "signature": {guest.Sign(path, "read", "user", attacker.EnvdAccessToken, old)}, "signature_expiration": {strconv.FormatInt(old, 10)}}
		noTok := attacker
		noTok.EnvdAccessToken = ""
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		res, err := httpClient.Do(e.envdRequest(ctx, t, noTok, http.MethodGet, "/files?"+q.Encode(), nil))
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusUnauthorized {
			t.Errorf("expired signature: status %d, want 401", res.StatusCode)
		}
	})

	t.Run("attack/symlinks-in-files-paths", func(t *testing.T) {
		shadow := e.runSteady(t, attacker, "root", "cat /etc/shadow", time.Minute).stdout
		if !strings.Contains(shadow, "root:") {
			t.Fatalf("positive control: root cannot read /etc/shadow: %q", shadow)
		}
		if r := e.runSteady(t, attacker, "user", "cd ~ && ln -sf /etc/shadow sh && ln -sfn / rootlink && ln -sfn /proc/1/root p1 && ln -sfn /etc etclink && echo ok", time.Minute); r.stdout != "ok\n" {
			t.Fatalf("making symlinks: %+v", r)
		}
		for _, p := range []string{"/home/user/sh", "/home/user/rootlink/etc/shadow", "/home/user/p1/etc/shadow", "sh", "../user/sh"} {
			code, body := e.getFile(t, attacker, p, "user")
			if strings.Contains(string(body), "root:") || code == http.StatusOK {
				t.Errorf("GET /files?path=%s as user: status %d, %d bytes (leak of /etc/shadow)", p, code, len(body))
			}
		}
		name := "airlock-e2e-" + uniqueTag(t)
		st, _ := e.uploadOctet(t, attacker, "/home/user/etclink/"+name, "user", strings.NewReader("pwned"))
		chk := e.runSteady(t, attacker, "root", "test -e /etc/"+name+" && echo EXISTS; cat /etc/shadow", time.Minute)
		if strings.Contains(chk.stdout, "EXISTS") {
			t.Errorf("upload through a symlink created /etc/%s as user (status %d)", name, st)
		}
		st, _ = e.uploadOctet(t, attacker, "/home/user/sh", "user", strings.NewReader("pwned\n"))
		after := e.runSteady(t, attacker, "root", "cat /etc/shadow", time.Minute).stdout
		if after != shadow {
			t.Errorf("upload to a symlink as user overwrote /etc/shadow (status %d)", st)
		}
	})

	t.Run("attack/dotdot-paths", func(t *testing.T) {
		for _, p := range []string{"../../etc/shadow", "/home/user/../../etc/shadow", "~/../../etc/shadow", "/../../../../etc/shadow", "....//....//etc/shadow"} {
			code, body := e.getFile(t, attacker, p, "user")
			if code == http.StatusOK || strings.Contains(string(body), "root:") {
				t.Errorf("GET /files?path=%s as user: status %d (%d bytes)", p, code, len(body))
			}
		}
	})

	e.unharmed(t, witness, marker)
}

func mustAtoi(s string) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		panic(err)
	}
	return n
}
