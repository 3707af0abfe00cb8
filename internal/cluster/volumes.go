package cluster

// LabelVolumes is the label a node adds to its heartbeat when it has the
// cluster's shared volume root (`airlock serve --volume-root`): a
// filesystem every such node mounts (NFS, CephFS, EFS, a ReadWriteMany
// volume), each volume a directory under it (internal/volume.DirBacking).
// The api tier sends the volume API (/volumes, /volumecontent) only to
// such nodes and places creates with volumeMounts only on them.
const LabelVolumes = "volumes"

// NoVolumeRoot is what a node without --volume-root answers a volume
// request or a create with volumeMounts (the api tier words its own refusal
// the same way).
const NoVolumeRoot = "in a cluster, volumes live on a filesystem the nodes share: this node has none (start it with --volume-root)"
