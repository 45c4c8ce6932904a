package m

// Empty branches: SA9003 is excluded for this file (exclusions), as for the README's Redis snippet.
func Excluded(ok bool) {
	if ok {
	}
}
