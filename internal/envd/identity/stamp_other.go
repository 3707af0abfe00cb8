//go:build !linux

package identity

import "os"

func changeTime(os.FileInfo) int64 { return 0 }
