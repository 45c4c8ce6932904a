package client_test

import (
	"context"
	"fmt"
	"log"
	"net/http/httptest"
	"sort"
	"sync"
	"time"

	"github.com/elector-sidecar/elector-sidecar/pkg/client"
	"github.com/elector-sidecar/elector-sidecar/pkg/localapi"
)

// A shard worker next to a sidecar started with --shards=N: one goroutine
// per shard this pod owns, each fencing its partition's writes with the
// shard's own token (examples/go-shard-worker is a complete program).
func ExampleClient_RunShards() {
	// In a pod: the sidecar's local API; here one whose member owns shards 0 and 5.
	set := &fakeSet{status: setStatus(owned(0, 3, time.Minute, 0), owned(5, 9, time.Minute, 0))}
	sidecar := httptest.NewServer(localapi.NewHandler(nil, nil, localapi.WithShards(set)))
	defer sidecar.Close()

	c, err := client.New(sidecar.URL) // in a pod: client.FromEnv()
	if err != nil {
		log.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background()) // in a pod: signal.NotifyContext(..., SIGTERM)
	var (
		mu      sync.Mutex
		started []string
		both    sync.WaitGroup
	)
	both.Add(2)
	go func() { both.Wait(); stop() }() // here: stop once both shards' workers run

	err = c.RunShards(ctx, func(ctx context.Context, shard client.ShardToken) {
		mu.Lock()
		started = append(started, fmt.Sprintf("shard %d: token %d, resource partition-%d", shard.Index, shard.Token, shard.Index))
		mu.Unlock()
		both.Done()
		// Work on partition shard.Index until ctx ends (the shard moved,
		// its token changed, or RunShards's ctx ended), fencing every
		// write with shard.Fencing() (package fencing).
		<-ctx.Done()
	})
	sort.Strings(started)
	for _, s := range started {
		fmt.Println(s)
	}
	fmt.Println("RunShards:", err)
	// Output:
	// shard 0: token 3, resource partition-0
	// shard 5: token 9, resource partition-5
	// RunShards: context canceled
}
