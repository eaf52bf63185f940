package demo

import "github.com/corralhq/corral/internal/recipe"

// naive is plain cache-aside (recipe.Naive): GET the key; on a miss, query
// the origin and SET the value with a TTL. Every caller that misses queries
// the origin.
type naive struct{}

func (naive) Name() string { return "naive" }
func (naive) Summary() string {
	return "plain cache-aside: GET; on a miss, query the origin and SET key value EX ttl"
}

func (naive) NewInstance(env Env) (Instance, error) {
	return &naiveInstance{recipe.Naive{Env: env.recipe()}}, nil
}

type naiveInstance struct{ recipe.Naive }

func (n *naiveInstance) UnhookedCommands() uint64 { return 0 }
func (n *naiveInstance) Close() error             { return nil }
