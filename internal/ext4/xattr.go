package ext4

import (
	"encoding/binary"
	"slices"
	"strings"
)

const xattrMagic = 0xEA020000

// Xattr is one extended attribute, named as listxattr(2) names it.
type Xattr struct {
	Name  string
	Value []byte
}

// xattrPrefixes maps an entry's name index to its prefix: the ones the
// kernel lists (fs/ext4/xattr.c ext4_xattr_handler_map). Others (system.data
// of inline data, richacl) are not visible through the VFS and are left out.
var xattrPrefixes = map[byte]string{
	1:  "user.",
	2:  "system.posix_acl_access",
	3:  "system.posix_acl_default",
	4:  "trusted.",
	6:  "security.",
	10: "gnu.",
}

// Xattrs returns the extended attributes of in, sorted by name: those in
// the inode's extra space, then those of its xattr block.
func (f *FS) Xattrs(in *Inode) ([]Xattr, error) {
	le := binary.LittleEndian
	var out []Xattr
	total := 0
	// parse reads the entries starting at entries[0]; values are at
	// valueBase+offset.
	parse := func(region []byte, start int, valueBase int) error {
		for off := start; ; {
			if off+4 > len(region) {
				return corrupt("inode %d: xattr entries run past their area", in.Ino)
			}
			if le.Uint32(region[off:]) == 0 {
				return nil // the end marker
			}
			if off+16 > len(region) {
				return corrupt("inode %d: truncated xattr entry", in.Ino)
			}
			e := region[off:]
			nameLen, index := int(e[0]), e[1]
			voff, vinum, vsize := int(le.Uint16(e[2:])), le.Uint32(e[4:]), int(le.Uint32(e[8:]))
			if off+16+nameLen > len(region) {
				return corrupt("inode %d: xattr name past its area", in.Ino)
			}
			name := string(e[16 : 16+nameLen])
			off += (16 + nameLen + 3) &^ 3
			if vinum != 0 {
				return corrupt("inode %d: xattr values in inodes (ea_inode) are not supported", in.Ino)
			}
			if vsize > len(region) || voff > len(region)-valueBase-vsize || valueBase+voff < 0 {
				return corrupt("inode %d: xattr value past its area", in.Ino)
			}
			prefix, ok := xattrPrefixes[index]
			if !ok {
				continue
			}
			value := slices.Clone(region[valueBase+voff : valueBase+voff+vsize])
			if index == 2 || index == 3 {
				if nameLen != 0 {
					return corrupt("inode %d: POSIX ACL entry with a name", in.Ino)
				}
				var err error
				if value, err = aclToXattr(value); err != nil {
					return corrupt("inode %d: %s: %v", in.Ino, prefix, err)
				}
			} else if nameLen == 0 || strings.ContainsRune(name, 0) {
				return corrupt("inode %d: xattr with a bad name %q", in.Ino, name)
			}
			total += len(prefix) + nameLen + len(value)
			if total > maxXattrBytes {
				return corrupt("inode %d: more than %d bytes of xattrs", in.Ino, maxXattrBytes)
			}
			out = append(out, Xattr{Name: prefix + name, Value: value})
		}
	}
	if in.extra != nil {
		// After the extra fields: a magic number, then entries whose
		// values are relative to the first entry.
		start := int(in.extraSize)
		if start+4 <= len(in.extra) && le.Uint32(in.extra[start:]) == xattrMagic {
			if err := parse(in.extra, start+4, start+4); err != nil {
				return nil, err
			}
		}
	}
	if in.fileACL != 0 {
		b, err := f.block(in.fileACL)
		if err != nil {
			return nil, corrupt("inode %d: xattr block: %v", in.Ino, err)
		}
		if le.Uint32(b[0:]) != xattrMagic || le.Uint32(b[8:]) != 1 {
			return nil, corrupt("inode %d: bad xattr block", in.Ino)
		}
		if err := parse(b, 32, 0); err != nil {
			return nil, err
		}
	}
	slices.SortFunc(out, func(a, b Xattr) int { return strings.Compare(a.Name, b.Name) })
	for i := 1; i < len(out); i++ {
		if out[i].Name == out[i-1].Name {
			return nil, corrupt("inode %d: xattr %s twice", in.Ino, out[i].Name)
		}
	}
	return out, nil
}

// POSIX ACL tags (include/uapi/linux/posix_acl.h).
const (
	aclUserObj  = 0x01
	aclUser     = 0x02
	aclGroupObj = 0x04
	aclGroup    = 0x08
	aclMask     = 0x10
	aclOther    = 0x20
)

// aclToXattr converts an ACL from ext4's disk format (version 1; short
// entries without an id) to the form getxattr returns (version 2, 8-byte
// entries, ACL_UNDEFINED_ID for entries without one), as
// fs/ext4/acl.c ext4_acl_from_disk and posix_acl_to_xattr do.
func aclToXattr(disk []byte) ([]byte, error) {
	le := binary.LittleEndian
	if len(disk) < 4 || le.Uint32(disk) != 1 {
		return nil, errString("bad ACL header")
	}
	out := le.AppendUint32(nil, 2)
	for p := disk[4:]; len(p) > 0; {
		if len(p) < 4 {
			return nil, errString("truncated ACL entry")
		}
		tag, perm := le.Uint16(p[0:]), le.Uint16(p[2:])
		id := uint32(0xFFFFFFFF)
		switch tag {
		case aclUserObj, aclGroupObj, aclMask, aclOther:
			p = p[4:]
		case aclUser, aclGroup:
			if len(p) < 8 {
				return nil, errString("truncated ACL entry")
			}
			id = le.Uint32(p[4:])
			p = p[8:]
		default:
			return nil, errString("unknown ACL tag")
		}
		out = le.AppendUint16(out, tag)
		out = le.AppendUint16(out, perm)
		out = le.AppendUint32(out, id)
	}
	return out, nil
}

type errString string

func (e errString) Error() string { return string(e) }
