package corral_test

import (
	"context"
	"fmt"
	"time"

	"github.com/corralhq/corral"
	"github.com/redis/go-redis/v9"
)

// A loader tags what it loads; InvalidateTags then invalidates every entry
// of a tag, here the page of product 42 and not that of product 43, in
// every process within Coherence. The README's "Invalidating groups" shows
// this function's body (TestReadmeInvalidateTags keeps the two the same).
func ExampleCache_InvalidateTags() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr, ContextTimeoutEnabled: true})
	defer rdb.Close()
	cache := corral.Must(corral.New(rdb, &corral.Options{Prefix: "example-tags"}))
	defer cache.Close()

	renders := 0
	page := func(id int) func(context.Context) (corral.Entry, error) {
		return func(ctx context.Context) (corral.Entry, error) {
			renders++ // the page of product id, from the database
			return corral.Entry{Value: []byte(fmt.Sprintf("page %d, render %d", id, renders)), TTL: time.Hour,
				Tags: []string{fmt.Sprintf("product:%d", id), "catalog"}}, nil
		}
	}
	for _, id := range []int{42, 43} {
		v, _ := cache.FetchEntry(ctx, fmt.Sprintf("product:%d:page", id), page(id))
		fmt.Println(string(v))
	}
	// After product 42 changed in the database:
	if err := cache.InvalidateTags(ctx, "product:42"); err != nil {
		fmt.Println(err)
	}
	for _, id := range []int{42, 43} {
		v, _ := cache.FetchEntry(ctx, fmt.Sprintf("product:%d:page", id), page(id))
		fmt.Println(string(v))
	}

	cache.Clear(ctx) // every entry of the prefix
	// Output:
	// page 42, render 1
	// page 43, render 2
	// page 42, render 3
	// page 43, render 2
}
