//go:build !linux

package metrics

import "errors"

func readHost(string) (HostSample, cpuTimes, error) {
	return HostSample{}, cpuTimes{}, errors.New("host stats are only read on Linux")
}
