//go:build linux

package sudo

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/airlock-sandbox/airlock/internal/envd/identity"
)

// securePath is sudo's default secure_path on Debian.
const securePath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// Serve accepts sudo requests on path until ctx ends.
func Serve(ctx context.Context, path string, log *slog.Logger) error {
	if err := ensureDir(); err != nil && path == SocketPath {
		return fmt.Errorf("creating sudo socket dir: %w", err)
	}
	_ = os.Remove(path)
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return fmt.Errorf("listening on %s: %w", path, err)
	}
	if err := os.Chmod(path, 0o666); err != nil {
		ln.Close()
		return fmt.Errorf("chmod %s: %w", path, err)
	}
	go func() {
		<-ctx.Done()
		ln.Close()
	}()
	for {
		c, err := ln.AcceptUnix()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("accepting sudo connection: %w", err)
		}
		go handle(c, log)
	}
}

// allowed reports whether uid may use sudo.
func allowed(uid uint32) (*user.User, bool) {
	u, err := user.LookupId(strconv.FormatUint(uint64(uid), 10))
	if err != nil {
		return nil, uid == 0
	}
	if uid == 0 {
		return u, true
	}
	gids, err := u.GroupIds()
	if err != nil {
		return u, false
	}
	for _, gid := range gids {
		if g, err := user.LookupGroupId(gid); err == nil && slices.Contains(privilegedGroups, g.Name) {
			return u, true
		}
	}
	return u, false
}

func handle(c *net.UnixConn, log *slog.Logger) {
	defer c.Close()
	fail := func(msg string) { _, _ = c.Write(encode(message{Error: msg})) }

	raw, err := c.SyscallConn()
	if err != nil {
		return
	}
	var cred *syscall.Ucred
	_ = raw.Control(func(fd uintptr) {
		cred, err = syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED)
	})
	if err != nil || cred == nil {
		fail("cannot identify the caller")
		return
	}
	caller, ok := allowed(cred.Uid)
	if !ok {
		name := strconv.FormatUint(uint64(cred.Uid), 10)
		if caller != nil {
			name = caller.Username
		}
		log.Warn("sudo refused", "uid", cred.Uid)
		fail(name + " is not in the sudoers file (not a member of group sudo)")
		return
	}

	buf := make([]byte, 1<<20)
	oob := make([]byte, syscall.CmsgSpace(3*4))
	n, oobn, _, _, err := c.ReadMsgUnix(buf, oob)
	if err != nil {
		return
	}
	fds, err := parseRights(oob[:oobn])
	if err != nil || len(fds) != 3 {
		for _, fd := range fds {
			syscall.Close(fd)
		}
		fail("protocol error: expected stdin, stdout and stderr")
		return
	}
	files := []*os.File{os.NewFile(uintptr(fds[0]), "stdin"), os.NewFile(uintptr(fds[1]), "stdout"), os.NewFile(uintptr(fds[2]), "stderr")}
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	first, rest, _ := bytes.Cut(buf[:n], []byte("\n"))
	var req request
	if err := json.Unmarshal(first, &req); err != nil {
		fail("protocol error: " + err.Error())
		return
	}
	target, err := identity.Lookup(req.User)
	if err != nil {
		fail(fmt.Sprintf("unknown user %s", req.User))
		return
	}
	cmd, err := buildCommand(req, target, caller, cred)
	if err != nil {
		fail(err.Error())
		return
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = files[0], files[1], files[2]
	if err := cmd.Start(); err != nil {
		fail(err.Error())
		return
	}
	log.Info("sudo", "caller", cred.Uid, "user", target.Name, "args", req.Args)
	for _, f := range files {
		f.Close()
	}
	files = nil

	// Forward signals the client receives until the command ends.
	done := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(io2(rest, c))
		for sc.Scan() {
			var m message
			if json.Unmarshal(sc.Bytes(), &m) == nil && m.Signal > 0 {
				_ = syscall.Kill(-cmd.Process.Pid, syscall.Signal(m.Signal))
			}
		}
		// The client went away: end the command too.
		select {
		case <-done:
		default:
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGHUP)
		}
	}()
	err = cmd.Wait()
	close(done)
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			code = 128 + int(ws.Signal())
		} else {
			code = ee.ExitCode()
		}
	} else if err != nil {
		code = 1
	}
	_, _ = c.Write(encode(message{Exit: &code}))
}

// io2 replays bytes that arrived with the request before reading conn.
func io2(pre []byte, c *net.UnixConn) *bufio.Reader {
	return bufio.NewReader(&prefixReader{pre: pre, c: c})
}

type prefixReader struct {
	pre []byte
	c   *net.UnixConn
}

func (p *prefixReader) Read(b []byte) (int, error) {
	if len(p.pre) > 0 {
		n := copy(b, p.pre)
		p.pre = p.pre[n:]
		return n, nil
	}
	return p.c.Read(b)
}

func parseRights(oob []byte) ([]int, error) {
	msgs, err := syscall.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, err
	}
	var fds []int
	for _, m := range msgs {
		f, err := syscall.ParseUnixRights(&m)
		if err == nil {
			fds = append(fds, f...)
		}
	}
	return fds, nil
}

func envValue(env []string, key string) string {
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, key+"="); ok {
			return v
		}
	}
	return ""
}

// buildCommand prepares the command the way sudo would: target user's
// identity and home, a reset environment (unless -E) with SUDO_* variables,
// secure_path, and -i/-s shells.
func buildCommand(req request, target *identity.User, caller *user.User, cred *syscall.Ucred) (*exec.Cmd, error) {
	shell := "/bin/bash"
	if _, err := os.Stat(shell); err != nil {
		shell = "/bin/sh"
	}
	var argv []string
	switch {
	case req.Login && len(req.Args) == 0:
		argv = []string{shell, "-l"}
	case req.Login:
		argv = []string{shell, "-l", "-c", strings.Join(req.Args, " ")}
	case req.Shell && len(req.Args) == 0:
		argv = []string{shell}
	case req.Shell:
		argv = []string{shell, "-c", strings.Join(req.Args, " ")}
	default:
		argv = req.Args
	}
	env := map[string]string{}
	if req.PreserveEnv {
		for _, kv := range req.Env {
			if k, v, ok := strings.Cut(kv, "="); ok {
				env[k] = v
			}
		}
	} else {
		for _, k := range []string{"TERM", "LANG", "LC_ALL", "LANGUAGE", "COLORTERM", "DISPLAY"} {
			if v := envValue(req.Env, k); v != "" {
				env[k] = v
			}
		}
	}
	env["PATH"] = securePath
	env["HOME"] = target.Home
	env["USER"], env["LOGNAME"] = target.Name, target.Name
	env["SHELL"] = shell
	env["SUDO_UID"] = strconv.FormatUint(uint64(cred.Uid), 10)
	env["SUDO_GID"] = strconv.FormatUint(uint64(cred.Gid), 10)
	if caller != nil {
		env["SUDO_USER"] = caller.Username
	}
	env["SUDO_COMMAND"] = strings.Join(req.Args, " ")
	envList := make([]string, 0, len(env))
	for k, v := range env {
		envList = append(envList, k+"="+v)
	}
	slices.Sort(envList)

	path := argv[0]
	if !strings.Contains(path, "/") {
		found := ""
		for _, dir := range filepath.SplitList(securePath) {
			p := filepath.Join(dir, path)
			if fi, err := os.Stat(p); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
				found = p
				break
			}
		}
		if found == "" {
			return nil, fmt.Errorf("%s: command not found", path)
		}
		path = found
	}
	cmd := exec.Command(path, argv[1:]...)
	cmd.Args[0] = argv[0]
	cmd.Env = envList
	cmd.Dir = req.Cwd
	if req.Login {
		cmd.Dir = target.Home
	}
	if fi, err := os.Stat(cmd.Dir); err != nil || !fi.IsDir() {
		cmd.Dir = target.Home
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Setsid:     true,
		Credential: &syscall.Credential{Uid: target.UID, Gid: target.GID, Groups: target.Groups},
	}
	return cmd, nil
}
