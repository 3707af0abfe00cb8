package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"

	"github.com/airlock-sandbox/airlock/sdk/go/airlock"
	"github.com/airlock-sandbox/airlock/sdk/go/airlock/proto/filesystempb"
	"github.com/airlock-sandbox/airlock/sdk/go/airlock/proto/filesystempb/filesystempbconnect"
)

func init() {
	register(func(root *cobra.Command) { root.AddCommand(newCpCmd()) })
}

// progressThreshold is the smallest transfer that gets a progress bar.
const progressThreshold = 1 << 20

// listDepth bounds recursive directory downloads.
const listDepth = 64

// remoteSpec matches "<sandbox id>:<path>"; ids are [a-z0-9]+ (spec §1.5).
var remoteSpec = regexp.MustCompile(`^([a-z0-9]+):(.*)$`)

func newCpCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "cp <src> <dst>",
		Short: "Copy files or directories between this machine and a sandbox",
		Long: `Copy files or directories between this machine and a sandbox.

Exactly one side is <sandbox-id>:<path>. Relative remote paths are relative to
the user's home. Directories are copied recursively (regular files and
directories; symlinks are skipped). "-" as the local side means stdin/stdout.
Prefix local paths containing ':' with ./`,
		Example: `  airlock cp ./data.csv i3kd9s0a:/home/user/data.csv
  airlock cp i3kd9s0a:/home/user/out ./out`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			srcRemote, dstRemote := remoteSpec.FindStringSubmatch(args[0]), remoteSpec.FindStringSubmatch(args[1])
			switch {
			case srcRemote != nil && dstRemote != nil:
				return errors.New("cp: copying between two sandboxes is not supported; copy through a local file")
			case srcRemote == nil && dstRemote == nil:
				return errors.New("cp: one of <src> and <dst> must be <sandbox-id>:<path>")
			case dstRemote != nil:
				t, err := newTransfer(cmd, dstRemote[1])
				if err != nil {
					return err
				}
				return t.upload(cmd.Context(), args[0], dstRemote[2])
			default:
				t, err := newTransfer(cmd, srcRemote[1])
				if err != nil {
					return err
				}
				return t.download(cmd.Context(), srcRemote[2], args[1])
			}
		},
	}
}

// transfer holds what one cp invocation needs to reach one sandbox.
type transfer struct {
	cmd   *cobra.Command
	c     *airlock.Client
	id    string
	token string
	fs    filesystempbconnect.FilesystemClient
}

func newTransfer(cmd *cobra.Command, id string) (*transfer, error) {
	c, token, err := connectAgent(cmd, id)
	if err != nil {
		return nil, err
	}
	return &transfer{cmd: cmd, c: c, id: id, token: token, fs: c.Filesystem(id, token)}, nil
}

// stat returns the remote entry, or nil if it does not exist.
func (t *transfer) stat(ctx context.Context, p string) (*filesystempb.EntryInfo, error) {
	res, err := t.fs.Stat(ctx, connect.NewRequest(&filesystempb.StatRequest{Path: p}))
	if connect.CodeOf(err) == connect.CodeNotFound {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("stat %s:%s: %w", t.id, p, err)
	}
	return res.Msg.GetEntry(), nil
}

// progress wraps w with a byte progress bar when stderr is a terminal and
// the transfer is large; the returned func finishes the bar.
func (t *transfer) progress(w io.Writer, size int64, desc string) (io.Writer, func()) {
	errw := t.cmd.ErrOrStderr()
	if size < progressThreshold || !isTerminal(errw) {
		return w, func() {}
	}
	bar := progressbar.NewOptions64(size,
		progressbar.OptionSetWriter(errw),
		progressbar.OptionSetDescription(desc),
		progressbar.OptionShowBytes(true),
		progressbar.OptionThrottle(100*time.Millisecond),
		progressbar.OptionClearOnFinish(),
	)
	return io.MultiWriter(w, bar), func() { bar.Finish() }
}

func (t *transfer) upload(ctx context.Context, local, remote string) error {
	if local == "-" {
		if remote == "" || strings.HasSuffix(remote, "/") {
			return errors.New("cp: uploading stdin needs a remote file path")
		}
		_, err := t.c.Upload(ctx, t.id, t.token, remote, t.cmd.InOrStdin())
		return err
	}
	st, err := os.Stat(local)
	if err != nil {
		return fmt.Errorf("cp: %w", err)
	}
	dst, err := t.stat(ctx, remote)
	if err != nil {
		return err
	}
	target := remote
	if dst != nil && dst.GetType() == filesystempb.FileType_FILE_TYPE_DIRECTORY {
		target = path.Join(dst.GetPath(), filepath.Base(local)) // like cp: copy into the directory
	} else if strings.HasSuffix(remote, "/") {
		target = path.Join(remote, filepath.Base(local))
	}
	if !st.IsDir() {
		return t.uploadFile(ctx, local, target, st.Size())
	}
	if dst != nil && dst.GetType() != filesystempb.FileType_FILE_TYPE_DIRECTORY {
		return fmt.Errorf("cp: %s:%s exists and is not a directory", t.id, remote)
	}
	return filepath.WalkDir(local, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return fmt.Errorf("cp: %w", err)
		}
		rel, err := filepath.Rel(local, p)
		if err != nil {
			return fmt.Errorf("cp: %w", err)
		}
		rp := path.Join(target, filepath.ToSlash(rel))
		switch {
		case d.IsDir():
			_, err := t.fs.MakeDir(ctx, connect.NewRequest(&filesystempb.MakeDirRequest{Path: rp}))
			if err != nil && connect.CodeOf(err) != connect.CodeAlreadyExists {
				return fmt.Errorf("cp: creating %s:%s: %w", t.id, rp, err)
			}
			return nil
		case d.Type().IsRegular():
			info, err := d.Info()
			if err != nil {
				return fmt.Errorf("cp: %w", err)
			}
			return t.uploadFile(ctx, p, rp, info.Size())
		default:
			fmt.Fprintf(t.cmd.ErrOrStderr(), "airlock: skipping %s (not a regular file or directory)\n", p)
			return nil
		}
	})
}

func (t *transfer) uploadFile(ctx context.Context, local, remote string, size int64) error {
	f, err := os.Open(local)
	if err != nil {
		return fmt.Errorf("cp: %w", err)
	}
	defer f.Close()
	pr, pw := io.Pipe()
	w, finish := t.progress(pw, size, filepath.Base(local))
	go func() {
		_, err := io.Copy(w, f)
		pw.CloseWithError(err)
	}()
	_, err = t.c.Upload(ctx, t.id, t.token, remote, pr)
	pr.CloseWithError(errors.New("upload finished")) // unblock the copier if the upload failed early
	finish()
	return err
}

func (t *transfer) download(ctx context.Context, remote, local string) error {
	src, err := t.stat(ctx, remote)
	if err != nil {
		return err
	}
	if src == nil {
		return fmt.Errorf("cp: %s:%s: no such file or directory", t.id, remote)
	}
	if local == "-" {
		if src.GetType() == filesystempb.FileType_FILE_TYPE_DIRECTORY {
			return errors.New("cp: cannot write a directory to stdout")
		}
		return t.downloadTo(ctx, src, t.cmd.OutOrStdout())
	}
	target := local
	if st, err := os.Stat(local); err == nil && st.IsDir() {
		target = filepath.Join(local, path.Base(src.GetPath()))
	} else if strings.HasSuffix(local, string(filepath.Separator)) {
		target = filepath.Join(local, path.Base(src.GetPath()))
	}
	if src.GetType() != filesystempb.FileType_FILE_TYPE_DIRECTORY {
		return t.downloadFile(ctx, src, target)
	}
	if err := os.MkdirAll(target, 0o755); err != nil {
		return fmt.Errorf("cp: %w", err)
	}
	res, err := t.fs.ListDir(ctx, connect.NewRequest(&filesystempb.ListDirRequest{Path: src.GetPath(), Depth: listDepth}))
	if err != nil {
		return fmt.Errorf("cp: listing %s:%s: %w", t.id, src.GetPath(), err)
	}
	prefix := strings.TrimSuffix(src.GetPath(), "/") + "/"
	for _, e := range res.Msg.GetEntries() {
		rel, ok := strings.CutPrefix(e.GetPath(), prefix)
		if !ok || rel == "" || !filepath.IsLocal(filepath.FromSlash(rel)) {
			return fmt.Errorf("cp: agent returned unexpected path %q under %s", e.GetPath(), src.GetPath())
		}
		lp := filepath.Join(target, filepath.FromSlash(rel))
		switch {
		case e.GetSymlinkTarget() != "":
			fmt.Fprintf(t.cmd.ErrOrStderr(), "airlock: skipping symlink %s\n", e.GetPath())
		case e.GetType() == filesystempb.FileType_FILE_TYPE_DIRECTORY:
			if err := os.MkdirAll(lp, 0o755); err != nil {
				return fmt.Errorf("cp: %w", err)
			}
		case e.GetType() == filesystempb.FileType_FILE_TYPE_FILE:
			if err := os.MkdirAll(filepath.Dir(lp), 0o755); err != nil {
				return fmt.Errorf("cp: %w", err)
			}
			if err := t.downloadFile(ctx, e, lp); err != nil {
				return err
			}
		}
	}
	return nil
}

// downloadFile writes a remote file to a temporary file next to local and
// renames it into place, so an interrupted copy never leaves a partial file.
func (t *transfer) downloadFile(ctx context.Context, e *filesystempb.EntryInfo, local string) error {
	perm := os.FileMode(e.GetMode()) & 0o777
	if perm == 0 {
		perm = 0o644
	}
	tmp, err := os.CreateTemp(filepath.Dir(local), "."+filepath.Base(local)+".airlock-*")
	if err != nil {
		return fmt.Errorf("cp: %w", err)
	}
	defer os.Remove(tmp.Name()) // no-op after the rename
	if err := t.downloadTo(ctx, e, tmp); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(perm); err != nil {
		tmp.Close()
		return fmt.Errorf("cp: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("cp: %w", err)
	}
	if err := os.Rename(tmp.Name(), local); err != nil {
		return fmt.Errorf("cp: %w", err)
	}
	return nil
}

func (t *transfer) downloadTo(ctx context.Context, e *filesystempb.EntryInfo, w io.Writer) error {
	rc, err := t.c.Download(ctx, t.id, t.token, e.GetPath())
	if err != nil {
		return err
	}
	defer rc.Close()
	pw, finish := t.progress(w, e.GetSize(), path.Base(e.GetPath()))
	defer finish()
	if _, err := io.Copy(pw, rc); err != nil {
		return fmt.Errorf("cp: downloading %s:%s: %w", t.id, e.GetPath(), err)
	}
	return nil
}
