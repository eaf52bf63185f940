package corral_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/corralhq/corral"
	"github.com/redis/go-redis/v9"
)

// Fetch a value through the cache: the loader runs once per key across every
// process sharing the Redis, however many callers ask at the same time.
func Example() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr}) // e.g. "localhost:6379"
	defer rdb.Close()

	cache, err := corral.New(rdb, nil) // nil: all defaults
	if err != nil {
		panic(err)
	}
	defer cache.Close()

	loads := 0
	loadGreeting := func(ctx context.Context) ([]byte, error) {
		loads++ // your slow query goes here
		return []byte("hello from the origin"), nil
	}
	for range 3 {
		v, err := cache.Fetch(ctx, "example:greeting", time.Minute, loadGreeting)
		fmt.Println(string(v), err)
	}
	fmt.Println("loads:", loads)
	// Output:
	// hello from the origin <nil>
	// hello from the origin <nil>
	// hello from the origin <nil>
	// loads: 1
}

type Product struct {
	ID    int
	Name  string
	Price float64
}

// The typed Fetch encodes values with the Cache's Codec (JSON by default).
func ExampleFetch() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr})
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
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr})
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
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr})
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
