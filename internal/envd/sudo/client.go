//go:build linux

package sudo

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/signal"
	"syscall"
)

// Main is `sudo` (the agent binary invoked under that name). It returns the
// process exit status.
func Main(args []string) int {
	req, action, err := parseArgs(args)
	if err != nil {
		fmt.Fprintln(os.Stderr, "sudo:", err)
		return 1
	}
	switch action {
	case "help":
		fmt.Println("usage: sudo [-u user] [-i|-s] [-E] [--] command [args...]  (Airlock sandbox sudo)")
		return 0
	case "version":
		fmt.Println("Airlock sandbox sudo (via airlock-envd)")
		return 0
	case "validate", "list":
		// Passwordless: nothing to validate; -l prints the policy.
		if action == "list" {
			fmt.Println("User may run the following commands on this sandbox:\n    (ALL : ALL) NOPASSWD: ALL")
		}
		return 0
	}
	req.Env = os.Environ()
	req.Cwd, _ = os.Getwd()
	path := SocketPath
	if p := os.Getenv("AIRLOCK_SUDO_SOCKET"); p != "" {
		path = p // tests
	}
	conn, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		fmt.Fprintln(os.Stderr, "sudo: the sandbox agent is not reachable:", err)
		return 1
	}
	defer conn.Close()
	rights := syscall.UnixRights(0, 1, 2)
	if _, _, err := conn.WriteMsgUnix(encode(req), rights, nil); err != nil {
		fmt.Fprintln(os.Stderr, "sudo:", err)
		return 1
	}
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGWINCH)
	go func() {
		for s := range sigs {
			_, _ = conn.Write(encode(message{Signal: int(s.(syscall.Signal))}))
		}
	}()
	sc := bufio.NewScanner(conn)
	for sc.Scan() {
		var m message
		if json.Unmarshal(sc.Bytes(), &m) != nil {
			continue
		}
		if m.Error != "" {
			fmt.Fprintln(os.Stderr, "sudo:", m.Error)
			return 1
		}
		if m.Exit != nil {
			return *m.Exit
		}
	}
	fmt.Fprintln(os.Stderr, "sudo: lost the connection to the sandbox agent")
	return 1
}
