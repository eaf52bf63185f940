package corral_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/corralhq/corral"
	"github.com/redis/go-redis/v9"
)

// The README's Quick start: this function's body is the body of the
// README's main (with redisAddr for "localhost:6379"), and
// TestReadmeQuickStart keeps the two the same.
func Example() {
	ctx := context.Background()
	// ContextTimeoutEnabled lets corral read hits in the calling goroutine;
	// any go-redis client works, a Cluster or Sentinel one too.
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr, ContextTimeoutEnabled: true})
	defer rdb.Close()

	cache, err := corral.New(rdb, nil) // nil: all defaults
	if err != nil {
		log.Fatal(err)
	}
	defer cache.Close()

	// Bytes in, bytes out: the loader runs once per key across every process
	// sharing the Redis, however many callers ask at the same time.
	loads := 0
	loadUser := func(ctx context.Context) ([]byte, error) {
		loads++ // your slow query goes here
		return []byte(`{"id":42,"name":"Ada"}`), nil
	}
	for range 3 {
		v, err := cache.Fetch(ctx, "quickstart:user:42", 10*time.Minute, loadUser)
		fmt.Println(string(v), err)
	}
	fmt.Println("loads:", loads)

	// Typed, through Options.Codec (JSON by default). A loader returns
	// corral.ErrNotFound for "no such record": that is cached too.
	p, err := corral.Fetch(ctx, cache, "quickstart:product:7", 10*time.Minute,
		func(ctx context.Context) (Product, error) {
			return Product{ID: 7, Name: "Lamp", Price: 19.5}, nil
		})
	fmt.Printf("%+v %v\n", p, err)

	// After a write to the origin: invalidate, and stop any running load
	// from storing old data.
	fmt.Println(cache.Delete(ctx, "quickstart:user:42"), cache.Delete(ctx, "quickstart:product:7"))
	// Output:
	// {"id":42,"name":"Ada"} <nil>
	// {"id":42,"name":"Ada"} <nil>
	// {"id":42,"name":"Ada"} <nil>
	// loads: 1
	// {ID:7 Name:Lamp Price:19.5} <nil>
	// <nil> <nil>
}

type Product struct {
	ID    int
	Name  string
	Price float64
}

// The typed Fetch encodes values with the Cache's Codec (JSON by default).
func ExampleFetch() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr, ContextTimeoutEnabled: true})
	defer rdb.Close()
	cache := corral.Must(corral.New(rdb, nil))
	defer cache.Close()

	p, err := corral.Fetch(ctx, cache, "example:product:42", 10*time.Minute,
		func(ctx context.Context) (Product, error) {
			return Product{ID: 42, Name: "Lamp", Price: 19.5}, nil // from your database
		})
	fmt.Printf("%+v %v\n", p, err)
	// Output: {ID:42 Name:Lamp Price:19.5} <nil>
}

// A loader returns ErrNotFound for a record that does not exist: it is cached
// for NegativeTTL, so a missing id does not reach the database on every call.
func ExampleFetch_notFound() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr, ContextTimeoutEnabled: true})
	defer rdb.Close()
	cache := corral.Must(corral.New(rdb, &corral.Options{NegativeTTL: 30 * time.Second}))
	defer cache.Close()

	queries := 0
	for range 2 {
		_, err := corral.Fetch(ctx, cache, "example:product:999", 10*time.Minute,
			func(ctx context.Context) (Product, error) {
				queries++
				return Product{}, fmt.Errorf("product 999: %w", corral.ErrNotFound)
			})
		fmt.Println(errors.Is(err, corral.ErrNotFound))
	}
	fmt.Println("queries:", queries)
	// Output:
	// true
	// true
	// queries: 1
}

// Delete invalidates a key after a write to the origin: the next Fetch loads
// afresh, and a load that was running during the Delete cannot store its
// now-outdated result.
func ExampleCache_Delete() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr, ContextTimeoutEnabled: true})
	defer rdb.Close()
	cache := corral.Must(corral.New(rdb, nil))
	defer cache.Close()

	price := "19.50"
	load := func(ctx context.Context) ([]byte, error) { return []byte(price), nil }

	v, _ := cache.Fetch(ctx, "example:price:42", time.Hour, load)
	fmt.Println(string(v))

	price = "17.00" // the origin changes...
	if err := cache.Delete(ctx, "example:price:42"); err != nil {
		panic(err)
	}
	v, _ = cache.Fetch(ctx, "example:price:42", time.Hour, load)
	fmt.Println(string(v))
	// Output:
	// 19.50
	// 17.00
}
