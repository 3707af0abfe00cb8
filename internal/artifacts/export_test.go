package artifacts

// SetSplitMin sets the size from which Images.Put stores a file as a blob
// of its own, for a test; the returned func restores it.
func SetSplitMin(n int64) func() {
	old := splitMin
	splitMin = n
	return func() { splitMin = old }
}
