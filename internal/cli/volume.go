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
	"text/tabwriter"

	"github.com/dustin/go-humanize"
	"github.com/spf13/cobra"

	"github.com/airlock-sandbox/airlock/sdk/go/airlock"
)

// `airlock volume ...`: E2B's volumes (named persistent directories that
// sandboxes mount) through the Go SDK's Volume.

func init() {
	register(func(root *cobra.Command) {
		vc := &cobra.Command{
			Use:     "volume",
			Aliases: []string{"volumes", "vol"},
			Short:   "Persistent volumes: create, list, delete, copy files in and out; mount with create --volume NAME:/path",
		}
		vc.AddCommand(newVolumeCreateCmd(), newVolumeListCmd(), newVolumeRmCmd(), newVolumeCpCmd(), newVolumeLsFilesCmd())
		root.AddCommand(vc)
	})
}

func newVolumeCreateCmd() *cobra.Command {
	var (
		sizeMB int64
		bucket airlock.BucketConfig
		secret string
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "create <name>",
		Short: "Create a volume and print its id",
		Long: `Create a volume (letters, digits, '_' and '-' in its name).

--size-mb sets its size limit (default: the daemon's --volume-size-default).
--bucket backs it with an S3-compatible bucket that the daemon mounts on its
host: the access key id comes from --bucket-access-key-id or
$AWS_ACCESS_KEY_ID, the secret from --bucket-secret-file or
$AWS_SECRET_ACCESS_KEY (never from the command line, where ps shows it).`,
		Example: `  airlock volume create data --size-mb 2048
  AWS_SECRET_ACCESS_KEY=... airlock volume create models --bucket ml --bucket-endpoint https://s3.example.com --bucket-access-key-id AKIA...`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if sizeMB < 0 {
				return fmt.Errorf("--size-mb must be positive, got %d", sizeMB)
			}
			body := airlock.NewVolume{Name: args[0], SizeMB: sizeMB}
			if bucket.Bucket != "" {
				b := bucket
				b.AccessKeyID = firstNonEmpty(b.AccessKeyID, os.Getenv("AWS_ACCESS_KEY_ID"))
				b.SecretAccessKey = os.Getenv("AWS_SECRET_ACCESS_KEY")
				if secret != "" {
					raw, err := os.ReadFile(secret)
					if err != nil {
						return fmt.Errorf("reading --bucket-secret-file: %w", err)
					}
					b.SecretAccessKey = strings.TrimSpace(string(raw))
				}
				body.Bucket = &b
			} else if cmd.Flags().Changed("bucket-endpoint") || cmd.Flags().Changed("bucket-prefix") || secret != "" {
				return errors.New("the --bucket-* flags need --bucket")
			}
			c, err := newClient(cmd)
			if err != nil {
				return err
			}
			v, err := c.CreateVolume(cmd.Context(), body)
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(cmd.OutOrStdout(), v.VolumeInfo)
			}
			fmt.Fprintln(cmd.OutOrStdout(), v.VolumeID)
			return nil
		},
	}
	f := cmd.Flags()
	f.Int64Var(&sizeMB, "size-mb", 0, "size limit in MiB (default: the daemon's)")
	f.StringVar(&bucket.Bucket, "bucket", "", "back the volume with this S3 bucket")
	f.StringVar(&bucket.Endpoint, "bucket-endpoint", "", "the bucket's S3 endpoint URL")
	f.StringVar(&bucket.Prefix, "bucket-prefix", "", "key prefix in the bucket (the volume's root)")
	f.StringVar(&bucket.Region, "bucket-region", "", "the bucket's region")
	f.StringVar(&bucket.AccessKeyID, "bucket-access-key-id", "", "access key id (default $AWS_ACCESS_KEY_ID)")
	f.StringVar(&secret, "bucket-secret-file", "", "file holding the secret access key (default $AWS_SECRET_ACCESS_KEY)")
	f.BoolVar(&bucket.PathStyle, "bucket-path-style", false, "path-style bucket URLs (most self-hosted S3 servers)")
	f.BoolVar(&bucket.ReadOnly, "bucket-read-only", false, "mount the bucket read-only")
	f.BoolVar(&asJSON, "json", false, "print the volume (with its content token) as JSON")
	return cmd
}

func newVolumeListCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List volumes: size limit, use, and the sandboxes that mount each",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := newClient(cmd)
			if err != nil {
				return err
			}
			vs, err := c.ListVolumes(cmd.Context())
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(cmd.OutOrStdout(), vs)
			}
			return printVolumeTable(cmd.OutOrStdout(), vs)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func printVolumeTable(w io.Writer, vs []airlock.VolumeInfo) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tID\tSIZE\tUSED\tMOUNTED BY")
	for _, v := range vs {
		used := "-"
		if v.UsedBytes != nil {
			used = humanize.IBytes(uint64(max(*v.UsedBytes, 0)))
		}
		size := "-"
		if v.SizeMB > 0 {
			size = humanize.IBytes(uint64(v.SizeMB) << 20)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", v.Name, v.VolumeID, size, used, firstNonEmpty(strings.Join(v.MountedBy, ","), "-"))
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("writing table: %w", err)
	}
	return nil
}

func newVolumeRmCmd() *cobra.Command {
	return &cobra.Command{
		Use:     "rm <name|id>...",
		Aliases: []string{"delete"},
		Short:   "Delete volumes and their data (sandboxes that mount one keep an empty mount)",
		Args:    cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := newClient(cmd)
			if err != nil {
				return err
			}
			var errs []error
			for _, ref := range args {
				id, err := c.ResolveVolume(cmd.Context(), ref)
				if err == nil {
					var ok bool
					if ok, err = c.DestroyVolume(cmd.Context(), id); err == nil && !ok {
						err = &airlock.APIError{Status: 404}
					}
				}
				if airlock.IsNotFound(err) {
					err = fmt.Errorf("volume %s not found", ref)
				}
				if err != nil {
					errs = append(errs, err)
					continue
				}
				fmt.Fprintln(cmd.OutOrStdout(), ref)
			}
			return errors.Join(errs...)
		},
	}
}

// volumeSpec matches "<volume name or id>:<path>".
var volumeSpec = regexp.MustCompile(`^([a-zA-Z0-9_-]+):(.*)$`)

// volumePath makes p absolute in the volume ("" is its root).
func volumePath(p string) string { return path.Clean("/" + p) }

// openVolume connects to the volume named by ref.
func openVolume(cmd *cobra.Command, ref string) (*airlock.Volume, error) {
	c, err := newClient(cmd)
	if err != nil {
		return nil, err
	}
	v, err := c.ConnectVolume(cmd.Context(), ref)
	if airlock.IsNotFound(err) {
		return nil, fmt.Errorf("volume %s not found", ref)
	}
	return v, err
}

func newVolumeLsFilesCmd() *cobra.Command {
	var (
		depth  int
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:     "ls-files <volume>[:<path>]",
		Short:   "List a directory of a volume",
		Example: "  airlock volume ls-files data:/results --depth 2",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ref, p := args[0], "/"
			if m := volumeSpec.FindStringSubmatch(args[0]); m != nil {
				ref, p = m[1], volumePath(m[2])
			}
			if depth < 1 {
				return fmt.Errorf("--depth must be at least 1, got %d", depth)
			}
			v, err := openVolume(cmd, ref)
			if err != nil {
				return err
			}
			es, err := v.List(cmd.Context(), p, depth)
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(cmd.OutOrStdout(), es)
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "MODE\tUID\tGID\tSIZE\tMODIFIED\tPATH")
			for _, e := range es {
				mode := fs.FileMode(e.Mode & 0o777)
				switch e.Type {
				case "directory":
					mode |= fs.ModeDir
				case "symlink":
					mode |= fs.ModeSymlink
				}
				name := e.Path
				if e.Target != "" {
					name += " -> " + e.Target
				}
				fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%s\t%s\n", mode, e.UID, e.GID, e.Size, e.Mtime.Local().Format("2006-01-02 15:04:05"), name)
			}
			if err := tw.Flush(); err != nil {
				return fmt.Errorf("writing table: %w", err)
			}
			return nil
		},
	}
	cmd.Flags().IntVar(&depth, "depth", 1, "levels of subdirectories to list")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func newVolumeCpCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "cp <src> <dst>",
		Short: "Copy files or directories between this machine and a volume",
		Long: `Copy files or directories between this machine and a volume.

Exactly one side is <volume>:<path> (the volume's name or id; paths are
absolute in the volume). Directories are copied recursively (regular files
and directories; symlinks are skipped); files are overwritten. A directory
destination that exists receives the source by its name, as cp -r does.
"-" as the local side means stdin/stdout. Prefix local paths containing ':'
with ./`,
		Example: `  airlock volume cp ./dataset data:/dataset
  airlock volume cp data:/results ./results`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			src, dst := volumeSpec.FindStringSubmatch(args[0]), volumeSpec.FindStringSubmatch(args[1])
			switch {
			case src != nil && dst != nil:
				return errors.New("volume cp: copying between two volumes is not supported; copy through a local directory")
			case src == nil && dst == nil:
				return errors.New("volume cp: one of <src> and <dst> must be <volume>:<path>")
			case dst != nil:
				v, err := openVolume(cmd, dst[1])
				if err != nil {
					return err
				}
				return volumeUpload(cmd.Context(), cmd, v, args[0], volumePath(dst[2]))
			default:
				v, err := openVolume(cmd, src[1])
				if err != nil {
					return err
				}
				return volumeDownload(cmd.Context(), cmd, v, volumePath(src[2]), args[1])
			}
		},
	}
}

var overwrite = airlock.VolumeWriteOptions{Force: true}

// volumeUpload copies local (a file, a directory, or "-") to remote.
func volumeUpload(ctx context.Context, cmd *cobra.Command, v *airlock.Volume, local, remote string) error {
	if local == "-" {
		_, err := v.WriteFile(ctx, remote, cmd.InOrStdin(), overwrite)
		return err
	}
	fi, err := os.Stat(local)
	if err != nil {
		return fmt.Errorf("volume cp: %w", err)
	}
	// An existing directory receives the source by its name.
	if e, err := v.GetInfo(ctx, remote); err == nil && e.IsDir() {
		remote = path.Join(remote, filepath.Base(filepath.Clean(local)))
	} else if err != nil && !airlock.IsNotFound(err) {
		return err
	}
	if !fi.IsDir() {
		return uploadVolumeFile(ctx, v, local, remote)
	}
	root := filepath.Clean(local)
	return filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		dst := path.Join(remote, filepath.ToSlash(rel))
		switch {
		case d.IsDir():
			_, err = v.MakeDir(ctx, dst, overwrite)
			return err
		case d.Type().IsRegular():
			return uploadVolumeFile(ctx, v, p, dst)
		default:
			fmt.Fprintf(cmd.ErrOrStderr(), "skipping %s (not a regular file or directory)\n", p)
			return nil
		}
	})
}

func uploadVolumeFile(ctx context.Context, v *airlock.Volume, local, remote string) error {
	f, err := os.Open(local)
	if err != nil {
		return fmt.Errorf("volume cp: %w", err)
	}
	defer f.Close()
	_, err = v.WriteFile(ctx, remote, f, overwrite)
	return err
}

// volumeDownload copies remote (a file or a directory) to local (or "-").
func volumeDownload(ctx context.Context, cmd *cobra.Command, v *airlock.Volume, remote, local string) error {
	e, err := v.GetInfo(ctx, remote)
	if airlock.IsNotFound(err) {
		return fmt.Errorf("volume cp: %s:%s does not exist", v.Name, remote)
	} else if err != nil {
		return err
	}
	if local == "-" {
		if e.IsDir() {
			return fmt.Errorf("volume cp: %s is a directory; give a local directory", remote)
		}
		return downloadVolumeFile(ctx, v, remote, cmd.OutOrStdout())
	}
	if fi, err := os.Stat(local); err == nil && fi.IsDir() && remote != "/" {
		local = filepath.Join(local, path.Base(remote))
	}
	if !e.IsDir() {
		return downloadVolumeFileTo(ctx, v, remote, local)
	}
	var walk func(remote, local string, depth int) error
	walk = func(remote, local string, depth int) error {
		if depth > listDepth {
			return fmt.Errorf("volume cp: %s is nested deeper than %d directories", remote, listDepth)
		}
		if err := os.MkdirAll(local, 0o755); err != nil {
			return fmt.Errorf("volume cp: %w", err)
		}
		es, err := v.List(ctx, remote, 1)
		if err != nil {
			return err
		}
		for _, e := range es {
			dst := filepath.Join(local, filepath.FromSlash(e.Name))
			switch e.Type {
			case "directory":
				err = walk(e.Path, dst, depth+1)
			case "file":
				err = downloadVolumeFileTo(ctx, v, e.Path, dst)
			default:
				fmt.Fprintf(cmd.ErrOrStderr(), "skipping %s (%s)\n", e.Path, e.Type)
			}
			if err != nil {
				return err
			}
		}
		return nil
	}
	return walk(remote, local, 0)
}

func downloadVolumeFileTo(ctx context.Context, v *airlock.Volume, remote, local string) error {
	f, err := os.Create(local)
	if err != nil {
		return fmt.Errorf("volume cp: %w", err)
	}
	if err := downloadVolumeFile(ctx, v, remote, f); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("volume cp: %w", err)
	}
	return nil
}

func downloadVolumeFile(ctx context.Context, v *airlock.Volume, remote string, w io.Writer) error {
	r, err := v.OpenFile(ctx, remote)
	if err != nil {
		return err
	}
	defer r.Close()
	if _, err := io.Copy(w, r); err != nil {
		return fmt.Errorf("volume cp: copying %s: %w", remote, err)
	}
	return nil
}

// parseVolumeFlags reads --volume NAME:/path[:ro] flags.
func parseVolumeFlags(flags []string) ([]airlock.VolumeMount, error) {
	var out []airlock.VolumeMount
	for _, f := range flags {
		name, p, ok := strings.Cut(f, ":")
		m := airlock.VolumeMount{Name: name, Path: p}
		if rest, isRO := strings.CutSuffix(p, ":ro"); isRO {
			m.Path, m.ReadOnly = rest, true
		} else if rest, isRW := strings.CutSuffix(p, ":rw"); isRW {
			m.Path = rest
		}
		if !ok || name == "" || !strings.HasPrefix(m.Path, "/") {
			return nil, fmt.Errorf("--volume %q: want NAME:/path or NAME:/path:ro", f)
		}
		out = append(out, m)
	}
	return out, nil
}
