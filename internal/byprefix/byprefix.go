// Package byprefix keeps one value per Cache prefix, for the observers'
// adapters (corralprom, corralotel): an event finds its prefix's value
// without a lock or a map, in a short list that is replaced whole, never
// changed, when a prefix is added; the value is made once per prefix.
package byprefix

import (
	"slices"
	"sync"
	"sync/atomic"
)

// List is a value per prefix. The zero List is empty and ready to use.
type List[T any] struct {
	mu   sync.Mutex // serialises adding
	list atomic.Pointer[[]Entry[T]]
}

// Entry is one prefix and its value.
type Entry[T any] struct {
	Prefix string
	Value  T
}

// Get returns prefix's value, made by newValue the first time. The
// comparison usually ends at the string's pointer: a Cache passes the same
// Options.Prefix on every event.
func (l *List[T]) Get(prefix string, newValue func(prefix string) T) T {
	for _, e := range l.All() {
		if e.Prefix == prefix {
			return e.Value
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	list := l.All()
	for _, e := range list {
		if e.Prefix == prefix {
			return e.Value
		}
	}
	v := newValue(prefix)
	list = append(slices.Clip(list), Entry[T]{prefix, v})
	l.list.Store(&list)
	return v
}

// All returns every prefix and its value, in the order they were added.
// The slice is not to be changed.
func (l *List[T]) All() []Entry[T] {
	if p := l.list.Load(); p != nil {
		return *p
	}
	return nil
}
