package api

import (
	"context"
	"sort"
)

// addUse fills the Airlock extension fields of listed volumes that say how
// each is used: usedBytes, the space its files take on this node's backing
// (absent when the backing cannot tell), and mountedBy, the ids of this
// daemon's sandboxes that mount it (absent when none do). The CLI's
// `volume ls` and the console's volumes page show both.
func (a *api) addUse(ctx context.Context, vols []volumeJSON) {
	mounted := map[string][]string{}
	if a.m != nil {
		for _, sb := range a.m.List() {
			seen := map[string]bool{}
			for _, m := range sb.VolumeMounts {
				if !seen[m.VolumeID] {
					seen[m.VolumeID] = true
					mounted[m.VolumeID] = append(mounted[m.VolumeID], sb.ID)
				}
			}
		}
	}
	for i := range vols {
		v := &vols[i]
		if ids := mounted[v.VolumeID]; len(ids) > 0 {
			sort.Strings(ids)
			v.MountedBy = ids
		}
		if a.opts.Volumes == nil || a.opts.Volumes.Backing == nil || v.Bucket != nil {
			continue // a bucket's use is not measured (it would list the bucket)
		}
		used, _, err := a.opts.Volumes.Backing.Usage(ctx, v.VolumeID)
		if err != nil {
			a.log.Debug("volume usage unknown", "volume", v.VolumeID, "err", err)
			continue
		}
		v.UsedBytes = &used
	}
}
