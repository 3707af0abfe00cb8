//go:build linux

package filesystem

import (
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/airlock-sandbox/airlock/sdk/go/airlock/proto/filesystempb"
)

// MetadataXattrPrefix is the extended-attribute namespace holding the file
// metadata written through /files `X-Metadata-*` headers.
const MetadataXattrPrefix = "user.e2b."

// UploadTempPrefix starts the names of the temporary files /files uploads
// write before renaming them into place; watch events for them are hidden.
const UploadTempPrefix = ".airlock-upload-"

// UploadReplacePrefix starts the name of an upload's temporary file that
// replaces an existing file. A watcher drops the CREATE its rename into
// place causes, so the events match E2B's agent, which writes in place:
// CHMOD, WRITE for an overwrite, CREATE, CHMOD, WRITE for a new file.
const UploadReplacePrefix = UploadTempPrefix + "replace-"

// names caches uid/gid → name lookups (reading /etc/passwd per entry would
// make large listings slow). Entries never expire: accounts inside a sandbox
// are practically static.
type names struct {
	// meta supplies EntryInfo.metadata (the default store when nil).
	meta *MetadataStore

	// mu guards users and groups.
	mu     sync.Mutex
	users  map[uint32]string
	groups map[uint32]string
}

// store returns the metadata store entries are read from.
func (n *names) store() *MetadataStore {
	if n.meta == nil {
		return DefaultMetadataStore()
	}
	return n.meta
}

func (n *names) user(uid uint32) string {
	n.mu.Lock()
	defer n.mu.Unlock()
	if s, ok := n.users[uid]; ok {
		return s
	}
	s := strconv.FormatUint(uint64(uid), 10)
	if u, err := user.LookupId(s); err == nil {
		s = u.Username
	}
	if n.users == nil {
		n.users = map[uint32]string{}
	}
	n.users[uid] = s
	return s
}

func (n *names) group(gid uint32) string {
	n.mu.Lock()
	defer n.mu.Unlock()
	if s, ok := n.groups[gid]; ok {
		return s
	}
	s := strconv.FormatUint(uint64(gid), 10)
	if g, err := user.LookupGroupId(s); err == nil {
		s = g.Name
	}
	if n.groups == nil {
		n.groups = map[uint32]string{}
	}
	n.groups[gid] = s
	return s
}

// fileType maps a (non-symlink) mode to the wire enum.
func fileType(m fs.FileMode) filesystempb.FileType {
	switch {
	case m.IsRegular():
		return filesystempb.FileType_FILE_TYPE_FILE
	case m.IsDir():
		return filesystempb.FileType_FILE_TYPE_DIRECTORY
	case m&fs.ModeSymlink != 0:
		return filesystempb.FileType_FILE_TYPE_SYMLINK
	default:
		// Devices, sockets, fifos: E2B reports them as files.
		return filesystempb.FileType_FILE_TYPE_FILE
	}
}

// entryInfo describes path (reported verbatim as EntryInfo.path) from its
// lstat result. For a symlink, type/mode/metadata come from the target,
// symlink_target is the fully resolved target and an unresolvable link has
// type UNSPECIFIED.
func (n *names) entryInfo(path string, fi fs.FileInfo) *filesystempb.EntryInfo {
	e := &filesystempb.EntryInfo{
		Name:         filepath.Base(path),
		Path:         path,
		Size:         fi.Size(),
		Permissions:  fi.Mode().String(),
		ModifiedTime: timestamppb.New(fi.ModTime()),
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		e.Owner = n.user(st.Uid)
		e.Group = n.group(st.Gid)
	}
	metaPath, metaInfo := path, fi
	if fi.Mode()&fs.ModeSymlink != 0 {
		target, err := filepath.EvalSymlinks(path)
		var tfi fs.FileInfo
		if err == nil {
			tfi, err = os.Stat(target)
		}
		if err != nil {
			// Broken (or unreadable) link: report where it points, type unknown.
			if dst, rerr := os.Readlink(path); rerr == nil {
				if !filepath.IsAbs(dst) {
					dst = filepath.Join(filepath.Dir(path), dst)
				}
				e.SymlinkTarget = &dst
			}
			e.Type = filesystempb.FileType_FILE_TYPE_UNSPECIFIED
			e.Mode = uint32(fi.Mode().Perm())
			return e
		}
		e.SymlinkTarget = &target
		e.Type = fileType(tfi.Mode())
		e.Mode = uint32(tfi.Mode().Perm())
		metaPath, metaInfo = target, tfi
	} else {
		e.Type = fileType(fi.Mode())
		e.Mode = uint32(fi.Mode().Perm())
	}
	if md, err := n.store().read(metaPath, metaInfo); err == nil && len(md) > 0 {
		e.Metadata = md
	}
	return e
}
