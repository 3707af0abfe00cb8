package imagebuild

import (
	"bufio"
	"os"
	"path"
	"strconv"
	"strings"
)

// passwdEntry is one line of /etc/passwd.
type passwdEntry struct {
	name     string
	uid, gid int
}

// readIDFile parses name:x:id:... lines of a passwd or group file in rootfs.
func readIDFile(rootfs, file string) map[string][2]int {
	out := map[string][2]int{}
	root, err := os.OpenRoot(rootfs)
	if err != nil {
		return out
	}
	defer root.Close()
	f, err := root.Open(strings.TrimPrefix(path.Clean(file), "/"))
	if err != nil {
		return out
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Split(sc.Text(), ":")
		if len(fs) < 3 {
			continue
		}
		id, err := strconv.Atoi(fs[2])
		if err != nil {
			continue
		}
		gid := -1
		if len(fs) > 3 {
			if g, err := strconv.Atoi(fs[3]); err == nil {
				gid = g
			}
		}
		out[fs[0]] = [2]int{id, gid}
	}
	return out
}

// lookupUser resolves a user name or numeric id in rootfs.
func lookupUser(rootfs, u string) (passwdEntry, bool) {
	users := readIDFile(rootfs, "/etc/passwd")
	if e, ok := users[u]; ok {
		return passwdEntry{name: u, uid: e[0], gid: e[1]}, true
	}
	if id, err := strconv.Atoi(u); err == nil {
		for n, e := range users {
			if e[0] == id {
				return passwdEntry{name: n, uid: id, gid: e[1]}, true
			}
		}
		return passwdEntry{uid: id, gid: id}, true
	}
	return passwdEntry{}, false
}

// lookupGroup resolves a group name or numeric id in rootfs.
func lookupGroup(rootfs, g string) (int, bool) {
	if id, err := strconv.Atoi(g); err == nil {
		return id, true
	}
	if e, ok := readIDFile(rootfs, "/etc/group")[g]; ok {
		return e[0], true
	}
	return 0, false
}

// resolveOwner resolves "user[:group]" for COPY --chown.
func resolveOwner(rootfs, spec string) (*owner, error) {
	u, g, hasGroup := strings.Cut(spec, ":")
	pe, ok := lookupUser(rootfs, u)
	if !ok {
		return nil, userErr("--chown: unknown user %q", u)
	}
	o := &owner{uid: pe.uid, gid: pe.gid}
	if o.gid < 0 {
		o.gid = o.uid
	}
	if hasGroup {
		gid, ok := lookupGroup(rootfs, g)
		if !ok {
			return nil, userErr("--chown: unknown group %q", g)
		}
		o.gid = gid
	}
	return o, nil
}
