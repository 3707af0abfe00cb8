package airlock

import (
	"archive/tar"
	"context"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"time"
)

// TemplateDetail is GET /airlock/v1/templates/{name}.
type TemplateDetail struct {
	Template
	Config *TemplateConfig `json:"config,omitempty"`
}

// BuildDockerfile uploads the build context tar (read from contextTar) and
// builds template name from the Dockerfile in it
// (POST /airlock/v1/templates/{name}/build, Content-Type application/x-tar).
func (c *Client) BuildDockerfile(ctx context.Context, name string, contextTar io.Reader, o DockerfileBuild, onProgress func(Progress)) (*Template, error) {
	return c.build(ctx, name, o.Query(), "application/x-tar", contextTar, onProgress)
}

// TemplateInfo describes template name.
func (c *Client) TemplateInfo(ctx context.Context, name string) (*TemplateDetail, error) {
	var out TemplateDetail
	if _, err := c.doJSON(ctx, http.MethodGet, "/airlock/v1/templates/"+url.PathEscape(name), nil, nil, &out); err != nil {
		return nil, fmt.Errorf("template %s: %w", name, err)
	}
	return &out, nil
}

// RemoveTemplate deletes template name (refused while sandboxes use it).
func (c *Client) RemoveTemplate(ctx context.Context, name string) error {
	if _, err := c.doJSON(ctx, http.MethodDelete, "/airlock/v1/templates/"+url.PathEscape(name), nil, nil, nil); err != nil {
		return fmt.Errorf("removing template %s: %w", name, err)
	}
	return nil
}

// WriteContextTar writes dir as a tar stream to w. When extraName is set,
// the file extraPath is added under that name (a Dockerfile outside the
// context).
func WriteContextTar(w io.Writer, dir, extraPath, extraName string) error {
	tw := tar.NewWriter(w)
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil || rel == "." {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		link := ""
		if fi.Mode()&fs.ModeSymlink != 0 {
			if link, err = os.Readlink(p); err != nil {
				return err
			}
		} else if !fi.Mode().IsRegular() && !fi.IsDir() {
			return nil // sockets, devices: not part of a context
		}
		return addTarEntry(tw, p, filepath.ToSlash(rel), fi, link)
	})
	if err != nil {
		return fmt.Errorf("packing build context: %w", err)
	}
	if extraName != "" {
		fi, err := os.Stat(extraPath)
		if err != nil {
			return fmt.Errorf("reading Dockerfile: %w", err)
		}
		if err := addTarEntry(tw, extraPath, extraName, fi, ""); err != nil {
			return fmt.Errorf("packing Dockerfile: %w", err)
		}
	}
	return tw.Close()
}

func addTarEntry(tw *tar.Writer, p, name string, fi fs.FileInfo, link string) error {
	h, err := tar.FileInfoHeader(fi, link)
	if err != nil {
		return err
	}
	h.Name = name
	h.Uid, h.Gid, h.Uname, h.Gname = 0, 0, "", ""
	h.ModTime = fi.ModTime().Truncate(time.Second)
	if fi.IsDir() {
		h.Name += "/"
	}
	if err := tw.WriteHeader(h); err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return nil
	}
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.Copy(tw, f)
	return err
}
