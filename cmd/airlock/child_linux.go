//go:build linux

package main

import "github.com/airlock-sandbox/airlock/internal/imagebuild"

// runChild serves a re-exec of this binary as the unprivileged reader of a
// microVM's disk (internal/imagebuild DiskSource), which never reaches the
// CLI; any other start returns at once.
func runChild() { imagebuild.DiffDisksChild() }
