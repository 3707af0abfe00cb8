package artifacts

import (
	"fmt"
	"os"
	"path/filepath"
)

// MoveDir moves the cached tree of digest d (fetched by GetDir) to dst,
// out of the cache: the caller owns it from then on, and the next GetDir of
// that digest downloads it again. This is how a consumer that keeps a tree
// for good (a pulled template) takes it without a second copy on disk. A
// tree being downloaded is never moved; one the cache does not hold (taken
// by another caller meanwhile) fails with an error matching fs.ErrNotExist,
// so the caller can GetDir again. dst must be on the cache's file system
// (else the rename fails with EXDEV and the cache keeps the tree) and must
// not exist.
func (s *Store) MoveDir(d Digest, dst string) error {
	if err := d.Validate(); err != nil {
		return err
	}
	src := filepath.Join(s.cache, "trees", d.Hex())
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, busy := s.flights[src]; busy {
		return fmt.Errorf("artifacts: tree %s is being downloaded: %w", d, os.ErrNotExist)
	}
	if err := os.Rename(src, dst); err != nil {
		return fmt.Errorf("artifacts: moving tree %s out of the cache: %w", d, err)
	}
	syncDir(filepath.Dir(src))
	return nil
}

// dropTree removes the cached tree of digest d, unless it is being
// downloaded (a fetched image that will not be used).
func (s *Store) dropTree(d Digest) {
	tmp, err := os.MkdirTemp(s.cache, ".tmp-drop-*")
	if err != nil {
		return
	}
	if err := s.MoveDir(d, filepath.Join(tmp, "t")); err != nil {
		s.log.Debug("artifacts: not dropping a cached tree", "tree", d, "err", err)
	}
	if err := removeAll(tmp); err != nil {
		s.log.Warn("artifacts: removing a cached tree", "tree", d, "err", err)
	}
}
