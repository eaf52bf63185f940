package corral_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/corralhq/corral"
	"github.com/redis/go-redis/v9"
)

// FetchMany reads many keys in one round trip per Redis node, and loads
// those not cached with one call of loadMany: one query for all the ids this
// process is the one to load. The README's "Many keys at once" shows this
// function's body (TestReadmeFetchMany keeps the two the same).
func ExampleCache_FetchMany() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr, ContextTimeoutEnabled: true})
	defer rdb.Close()
	cache := corral.Must(corral.New(rdb, nil))
	defer cache.Close()

	names := map[string]string{"example:user:1": "Ada", "example:user:2": "Grace"} // the origin
	queries := 0
	loadUsers := func(ctx context.Context, missing []string) (map[string][]byte, error) {
		queries++ // SELECT id, name FROM users WHERE id IN (missing)
		found := make(map[string][]byte, len(missing))
		for _, id := range missing {
			if name, ok := names[id]; ok {
				found[id] = []byte(name)
			}
		}
		return found, nil // ids left out are cached as not found (NegativeTTL)
	}
	ids := []string{"example:user:1", "example:user:2", "example:user:3"}
	for range 2 {
		users, err := cache.FetchMany(ctx, ids, 10*time.Minute, loadUsers)
		fmt.Println(len(users), string(users["example:user:1"]), string(users["example:user:2"]), err)
	}
	fmt.Println("queries:", queries)

	// Errors are per key: the other keys are still served.
	users, err := cache.FetchMany(ctx, []string{"example:user:1", ""}, 10*time.Minute, loadUsers)
	var batchErr *corral.BatchError
	if errors.As(err, &batchErr) {
		fmt.Println(len(users), batchErr.Errs[""])
	}

	for _, id := range ids { // after writes to the origin, as with Fetch
		cache.Delete(ctx, id)
	}
	// Output:
	// 2 Ada Grace <nil>
	// 2 Ada Grace <nil>
	// queries: 1
	// 1 corral: invalid key: empty key
}
