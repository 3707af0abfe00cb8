// Package nfs is the NFSv3 server that gives a microVM its volumes
// (issue 27): one server per VM, on the host side of the VM's veth,
// exporting only that VM's volumes ("/volume-<i>"), MOUNT and NFS on one
// TCP port (github.com/willscott/go-nfs).
//
//   - Confinement: each export is a billy.Filesystem over an os.Root on the
//     volume's directory (rootfs_linux.go). The kernel resolves every path
//     relative to the root's descriptor; `..`, absolute and relative
//     symbolic links that lead out fail at the moment of use. Symbolic links
//     are text to the server: the guest's NFS client resolves them in the
//     guest. A guest's chown is ignored and what it creates belongs to
//     uid/gid 1000 (the sandboxes' user, as with the content API): the
//     server never trusts the guest's AUTH_UNIX identity.
//   - File handles are the kernel's (name_to_handle_at, as knfsd's), with
//     the export's index in front, so they outlive a server: a VM restored
//     from a checkpoint, a fork child and the VMs of a restarted daemon keep
//     the handles their client holds. A handle is only a way to find a path
//     (open_by_handle_at, then the descriptor's path), which must be the
//     export or below it; a forged handle naming another file of the same
//     file system is stale.
//   - A FUSE file system (a bucket volume's s3fs: its handles name node ids
//     that go stale once the host evicts the inode) or one without kernel
//     handles (EOPNOTSUPP, EOVERFLOW) gets a path table instead
//     (pathtable_linux.go): a random 16-byte id per path relative to the
//     export, resolved only through the export's os.Root (an id whose path
//     is gone, or unknown, is stale), followed through renames and removes
//     made by this server, and logged in Config.StateDir
//     ("nfs-handles-<index>", the VM's dir; a fork child gets a copy) so a
//     later server answers the handles the guest holds. The fileids it
//     reports are the ids too (the guest takes a changed fileid behind a
//     handle for a stale file).
//   - An export the server cannot open is an *ExportError with its index,
//     which the microVM runtime reports as a runtime.MountError (a 4xx
//     naming the volume).
//   - Errors: a write into a full volume (the loop backing's ext4) answers
//     NFS3ERR_NOSPC, which the guest sees as ENOSPC.
//   - Reachability: the listener is bound to the veth (SO_BINDTODEVICE) and
//     marked (SO_MARK); internal/network redirects the guest's
//     network.VolumeServerAddr:2049 to it and accepts only packets whose
//     socket carries the mark (internal/network/volumes_linux.go).
//
// The microVM runtime starts a VM's server before its VMM runs and stops it
// when the VMM ends (internal/runtime/microvm/volumes.go); the guest's init
// mounts the exports (internal/envd/vminit/volumes_linux.go).
package nfs
