/*
 * libairlock-compat: preloaded into every template (via /etc/ld.so.preload).
 *
 * Debian 12's gVisor (runsc 20221219) rejects statx(2) calls that carry
 * AT_NO_AUTOMOUNT with EINVAL, and coreutils 9.1 always passes that flag:
 * `ls -l`, `stat`, `cp -a` … fail inside sandboxes. Sandboxes have no
 * automount points, so the flag has no meaning there; drop it and retry.
 * On runtimes that accept the flag the first call succeeds unchanged.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

int statx(int dirfd, const char *path, int flags, unsigned int mask, struct statx *buf)
{
	long r = syscall(SYS_statx, dirfd, path, flags, mask, buf);
	if (r == -1 && errno == EINVAL && (flags & AT_NO_AUTOMOUNT)) {
		r = syscall(SYS_statx, dirfd, path, flags & ~AT_NO_AUTOMOUNT, mask, buf);
	}
	return (int)r;
}
