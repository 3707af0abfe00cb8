//go:build !linux

package diskspace

import "errors"

// Stat is not supported off Linux; Check then never refuses.
func Stat(dir string) (Usage, error) {
	return Usage{}, errors.New("diskspace: statfs is only supported on Linux")
}
