// Package files serves the agent's `/files` REST endpoint (spec §3.5, §7):
// streaming downloads (Range, gzip) and uploads (multipart or raw octet
// stream, atomic replace, file metadata in user.e2b.* xattrs), authorised by the access token header or an E2B URL
// signature. File operations run as the acting Unix user, so permissions are
// the security boundary.
//
// The rest of this comment is how the package works now (moved here from
// docs/ARCHITECTURE.md, which keeps the map).
//
// # File writes (POST /files, internal/envd/files/upload.go)
//
// A write streams into a temp file next to the destination and renames it over the destination.
// Missing parent directories are created by the agent with root rights and handed to the writing
// user (0755, owned by the user), as E2B's envd does, so `files.write('/new/dir/f')` works as `user`;
// directories that exist keep their owner and mode. The hand-over (mode 0755, owner) goes through a
// descriptor opened with `O_NOFOLLOW` and only while it is still an empty root-owned directory, so a
// sandbox process that swaps the new directory for a symlink gets a failed upload, not a chmod of
// the link's target. The file itself is written as the user (so a
// directory the user cannot write stays closed to them: 403).
// Metadata (`X-Metadata-*` headers) is exactly what the request carries: a write without metadata
// clears what an overwritten file had (E2B's behaviour), in the response and in `getInfo`/`list`.
// Watchers see what E2B's agent causes (it opens the destination, chowns it, writes): CREATE, CHMOD,
// WRITE for a new file and CHMOD, WRITE for an overwrite. The rename is the CREATE (a watcher drops it
// when the temp file's name, `.airlock-upload-replace-*`, says it replaced a file), a chown through the
// still-open descriptor the CHMOD, a same-size truncate the WRITE (`TestUploadWatchEventsMatchE2B`).
//
// # File reads (GET /files, internal/envd/files/files.go)
//
// A regular file of known length is served by `http.ServeContent` (Content-Length, Range, conditionals)
// or gzip-streamed when the client accepts gzip; a Range or conditional request is answered in identity,
// as E2B's agent does, and so is a file whose first 64 KiB gzip does not shrink by a tenth (archives,
// images, random bytes: compressing them would spend the sandbox's CPU for nothing; a 50 MB random file
// took 15–24 s gzipped against 0.4–0.5 s in identity under load ~20). Files whose length stat does not tell (pipes, devices, `/proc` and `/sys` by their
// filesystem type, or a size-0 file that reads non-empty) are streamed as read, without Content-Length and
// without seeking, gzip or not; a Range on them is ignored (200 with the whole file).
package files
