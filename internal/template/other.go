//go:build !linux

package template

import (
	"context"
	"errors"
	"io/fs"
	"os"
)

type fileID struct{}

func fileIDOf(fs.FileInfo) (fileID, bool) { return fileID{}, false }

func removeTree(dir string) error { return os.RemoveAll(dir) }

func mmdebstrapBuild(context.Context, *Recipe, string, func(Progress)) error {
	return errors.New("building templates is only supported on Linux")
}

func killBuilders(string) int { return 0 }
