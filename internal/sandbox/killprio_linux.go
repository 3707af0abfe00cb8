//go:build linux

package sandbox

import (
	"runtime"

	"golang.org/x/sys/unix"
)

// killNice is the nice value of the threads that stop and cut a sandbox
// being killed.
const killNice = -10

// urgentThread runs the calling goroutine, until it returns, on an OS
// thread of its own at nice killNice (issue 24). The kill's stop and cut
// are a few dozen system calls and almost no CPU, but under a load of
// sandboxes (load average 50 on 2 cores) each call's return waited for a
// core behind the sandboxes' threads, which made them take 100–200 ms at
// the median. The thread is never unlocked: Go ends it when the goroutine
// returns, so no other goroutine inherits its priority. Lowering the nice
// value needs CAP_SYS_NICE (the daemon runs as root); without it the
// thread keeps the default.
func urgentThread() {
	runtime.LockOSThread()
	_ = unix.Setpriority(unix.PRIO_PROCESS, unix.Gettid(), killNice)
}
