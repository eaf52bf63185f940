package corral_test

import (
	"context"
	"fmt"
	"time"

	"github.com/corralhq/corral"
	"github.com/redis/go-redis/v9"
)

// FetchEntry lets the loader say how long what it loaded lives: here an
// OAuth access token, which expires expires_in seconds after it is issued
// and must never be served past that. Every process sharing the Redis uses
// the one token until it expires, and one of them fetches the next. The
// README's "Values that set their own TTL" shows this function's body
// (TestReadmeFetchEntry keeps the two the same).
func ExampleCache_FetchEntry() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr, ContextTimeoutEnabled: true})
	defer rdb.Close()
	cache := corral.Must(corral.New(rdb, nil))
	defer cache.Close()

	issued := 0
	newToken := func(ctx context.Context) (corral.Entry, error) {
		issued++ // POST /oauth/token: {"access_token": "...", "expires_in": 3600}
		token, expiresIn := fmt.Sprintf("token-%d", issued), 3600
		return corral.Entry{
			Value:    []byte(token),
			TTL:      time.Duration(expiresIn)*time.Second - 30*time.Second, // a margin for the request's time
			StaleTTL: -1,                                                    // never served stale, whatever Options.StaleTTL
		}, nil
	}
	for range 3 {
		token, err := cache.FetchEntry(ctx, "example:oauth:token", newToken)
		fmt.Println(string(token), err)
	}
	fmt.Println("issued:", issued)

	cache.Delete(ctx, "example:oauth:token")
	// Output:
	// token-1 <nil>
	// token-1 <nil>
	// token-1 <nil>
	// issued: 1
}
