// Command racecanary races on purpose. make build-race builds it into
// bin/race with the services' flags, and the e2e race pass runs it
// (TestRaceCanaryIsCaughtByTheLogScan): a race pass whose binaries lack the
// race detector, or whose log scan misses a report, fails there instead of
// passing in silence.
package main

import "fmt"

func main() {
	var hits int
	done := make(chan struct{})
	go func() {
		hits++ // unordered with main's write below: the race
		close(done)
	}()
	hits++
	<-done
	fmt.Println("racecanary: hits", hits)
}
