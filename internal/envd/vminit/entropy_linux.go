//go:build linux

package vminit

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// A restored microVM resumes with its guest kernel's random number
// generator exactly as it was saved: every sandbox restored from one boot
// snapshot, every warm-pool sandbox and every fork child would read the
// same /dev/urandom and getrandom bytes (and Python's reseed on a new
// sandbox id would give them all the same random.random()). There is no
// VM generation ID device on QEMU's microvm machine (it needs ACPI), so the
// agent does what the kernel would do on a generation change: after every
// restore it mixes fresh bytes from the virtio-rng device (read by this VM's
// own QEMU from the host's kernel after the restore) into the input pool,
// credited, and forces the CRNG to reseed (RNDRESEEDCRNG also invalidates
// the per-CPU generators and batched entropy).

// hwrngPath is the virtio-rng device (CONFIG_HW_RANDOM_VIRTIO).
const hwrngPath = "/dev/hwrng"

// reseedBytes is how much fresh entropy is mixed in (512 bits).
const reseedBytes = 64

// Reseed gives the guest kernel's CRNG fresh host entropy. It fails when
// the virtio-rng device does not deliver within timeout: the caller must
// then not hand out the sandbox as one with its own randomness.
func Reseed(timeout time.Duration) error {
	seed, err := readHWRNG(timeout)
	if err != nil {
		return err
	}
	f, err := os.OpenFile("/dev/urandom", os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("opening /dev/urandom: %w", err)
	}
	defer f.Close()
	info := randPoolInfo(seed)
	if err := ioctlPtr(f.Fd(), unix.RNDADDENTROPY, &info[0]); err != nil {
		return fmt.Errorf("RNDADDENTROPY: %w", err)
	}
	if err := ioctlPtr(f.Fd(), unix.RNDRESEEDCRNG, nil); err != nil {
		return fmt.Errorf("RNDRESEEDCRNG: %w", err)
	}
	return nil
}

// readHWRNG reads reseedBytes from the virtio-rng device, giving up after
// timeout (a read of a character device cannot be given a deadline; a stuck
// reader is left behind and ends with the device's answer).
func readHWRNG(timeout time.Duration) ([]byte, error) {
	type result struct {
		b   []byte
		err error
	}
	ch := make(chan result, 1)
	go func() {
		f, err := os.Open(hwrngPath)
		if err != nil {
			ch <- result{err: fmt.Errorf("opening %s: %w", hwrngPath, err)}
			return
		}
		defer f.Close()
		b := make([]byte, reseedBytes)
		if _, err := io.ReadFull(f, b); err != nil {
			ch <- result{err: fmt.Errorf("reading %s: %w", hwrngPath, err)}
			return
		}
		ch <- result{b: b}
	}()
	select {
	case r := <-ch:
		return r.b, r.err
	case <-time.After(timeout):
		return nil, errors.New("reading " + hwrngPath + ": no answer within " + timeout.String())
	}
}

// randPoolInfo encodes struct rand_pool_info {int entropy_count; int
// buf_size; __u32 buf[];} for RNDADDENTROPY, crediting every bit of seed.
func randPoolInfo(seed []byte) []byte {
	b := make([]byte, 8+len(seed))
	binary.NativeEndian.PutUint32(b[0:4], uint32(len(seed)*8))
	binary.NativeEndian.PutUint32(b[4:8], uint32(len(seed)))
	copy(b[8:], seed)
	return b
}

// ioctlPtr runs ioctl(fd, req, arg) with arg a pointer (or nil).
func ioctlPtr(fd uintptr, req uint, arg *byte) error {
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, fd, uintptr(req), uintptr(unsafe.Pointer(arg))); errno != 0 {
		return errno
	}
	return nil
}
