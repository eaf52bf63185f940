// Package scripts holds the protocol's Lua scripts, embedded: see each
// file's header for its KEYS, ARGV and reply, and docs/design.md, section
// 2.5. They are go-redis Scripts: sent by EVALSHA, and by EVAL when the
// server does not have them. Their arguments are built, and their replies
// parsed, by internal/wire; the root package runs them (scripts.go).
package scripts

import (
	_ "embed"

	"github.com/redis/go-redis/v9"
)

var (
	//go:embed fetch.lua
	fetchSrc string
	//go:embed commit.lua
	commitSrc string
	//go:embed renew.lua
	renewSrc string
	//go:embed release.lua
	releaseSrc string
	//go:embed delete.lua
	deleteSrc string
	//go:embed read.lua
	readSrc string
	//go:embed rights.lua
	rightsSrc string
	//go:embed expire.lua
	expireSrc string
	//go:embed lease.lua
	leaseSrc string // what the scripts that read a lease know of group leases
)

// The scripts, each named after its file.
var (
	Fetch   = redis.NewScript(leaseSrc + fetchSrc)
	Commit  = redis.NewScript(leaseSrc + commitSrc)
	Renew   = redis.NewScript(renewSrc)
	Release = redis.NewScript(releaseSrc)
	Delete  = redis.NewScript(leaseSrc + deleteSrc)
	Read    = redis.NewScript(readSrc)
	Rights  = redis.NewScript(rightsSrc)
	Expire  = redis.NewScript(leaseSrc + expireSrc)
)
