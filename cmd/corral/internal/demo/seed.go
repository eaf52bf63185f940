package demo

import "github.com/corralhq/corral/internal/recipe"

// seedRecipe is the recipe everybody starts from (recipe.Seed, which lists
// its flaws): GET; SET lock:key NX EX 10; the holder loads, SETs and DELs
// the lock; the others sleep 100 ms and start again. The run's context
// bounds its polling, so the demo cannot hang.
type seedRecipe struct{}

func (seedRecipe) Name() string { return "seed" }
func (seedRecipe) Summary() string {
	return "the usual recipe: GET; SET lock:key NX EX 10; the holder loads, SETs and DELs the lock; others sleep 100ms and retry"
}

func (seedRecipe) NewInstance(env Env) (Instance, error) {
	return &seedInstance{recipe.Seed{Env: env.recipe()}}, nil
}

type seedInstance struct{ recipe.Seed }

func (s *seedInstance) UnhookedCommands() uint64 { return 0 }
func (s *seedInstance) Close() error             { return nil }
