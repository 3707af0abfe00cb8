//go:build linux

package procevents

import (
	"os"
	"os/exec"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// BenchmarkExec is the cost the feed adds to a process start and exit in
// the guest: fork+exec+wait of /bin/true with nobody subscribed ("off")
// and with a subscriber that does what the agent does per event (parse,
// read /proc/<pid>, keep the event: "on"). Run as root, both in one run:
//
//	go test -run '^$' -bench Exec -count 6 ./internal/envd/procevents/
func BenchmarkExec(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("the proc connector needs CAP_NET_ADMIN")
	}
	run := func(b *testing.B) {
		for b.Loop() {
			if err := exec.Command("/bin/true").Run(); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("off", run)
	b.Run("on", func(b *testing.B) {
		fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.NETLINK_CONNECTOR)
		if err != nil {
			b.Skip(err)
		}
		if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK, Groups: cnIdxProc}); err != nil {
			b.Skip(err)
		}
		if err := unix.Sendto(fd, listenMsg(), 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
			b.Skip(err)
		}
		s := New(nil)
		done := make(chan struct{})
		go func() {
			defer close(done)
			buf := make([]byte, 1<<16)
			for {
				n, _, err := unix.Recvfrom(fd, buf, 0)
				if err != nil {
					if err == unix.EINTR || err == unix.ENOBUFS {
						continue
					}
					return
				}
				for _, r := range Parse(buf[:n]) {
					s.Handle(r, time.Now())
				}
			}
		}()
		run(b)
		b.StopTimer()
		unix.Shutdown(fd, unix.SHUT_RDWR)
		unix.Close(fd)
		select {
		case <-done:
		case <-time.After(time.Second):
		}
	})
}
