// Package filesystem implements the agent's `filesystem.Filesystem` Connect
// service (spec §3.4): Stat, MakeDir, Move, ListDir, Remove, the WatchDir
// stream and the polling watcher trio used by the Python sync SDK.
//
// Every operation runs with the acting user's credentials (identity.RunAs),
// so Unix permissions are the boundary and created files belong to the user.
//
// Watches come in two kinds:
//
//   - SDK watches (WatchDir without filefeed.Header, CreateWatcher) use
//     fsnotify, one watch per directory, and give E2B's exact event stream:
//     every event, CHMOD included; a recursive watch learns that a created
//     entry is a directory needing a watch with an lstat (fsnotify hides
//     inotify's IN_ISDIR).
//   - The activity feed's watch (WatchDir with filefeed.Header, opened by
//     the host's internal/activity) reads inotify directly (inoWatcher):
//     IN_ISDIR says a new directory needs a watch, so there is no lstat per
//     create; no IN_ATTRIB is asked for (the feed reports no CHMOD); an
//     IN_Q_OVERFLOW counts as one dropped event, reported with the feed's
//     next dropped count, and the tree is watched again; a directory moved
//     within the tree keeps its watches under the new path (IN_MOVED_FROM
//     and IN_MOVED_TO cookies), one moved out of it loses them. The reader
//     takes the kernel's events in batches 20 ms apart, and the response
//     is flushed once per batch (FeedFlushes), not once per event. While
//     filefeed's rate cap is used up (Limiter.Full), every event until its
//     second ends would be dropped: the reader holds off (holdFor) and
//     reads them all, to count them, when it ends, or earlier once 256 KiB
//     are queued (Linux drops events past fs.inotify.max_queued_events).
//     Entries already inside a directory created (not moved in) when its
//     watch is added (made within a batch, or during a hold) are listed
//     then and reported as created after it, through the same limits (one
//     made between the watch and the listing is reported twice). Entries
//     are fsnotify's (Name, Op) for the same events, through the same
//     translation and filefeed's limits; the one difference is a renamed
//     directory: one RENAME (fsnotify adds a second from IN_MOVE_SELF and,
//     depending on timing, drops the moved directory's watch).
package filesystem
