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
	//go:embed trials.lua
	trialsSrc string // the rights' trials, which rights.lua and start.lua run
	//go:embed start.lua
	startSrc string
	//go:embed expire.lua
	expireSrc string
	//go:embed lease.lua
	leaseSrc string // what the scripts that read a lease know of group leases
)

// StartSrc defines start.lua's function start, and the refusals it calls
// (trials.lua), for the scripts that run it: Start, and a first peek's.
var StartSrc = trialsSrc + startSrc

// The scripts, each named after its file.
var (
	Fetch   = redis.NewScript(leaseSrc + fetchSrc)
	Commit  = redis.NewScript(leaseSrc + commitSrc)
	Renew   = redis.NewScript(renewSrc)
	Release = redis.NewScript(releaseSrc)
	Delete  = redis.NewScript(leaseSrc + deleteSrc)
	Read    = redis.NewScript(readSrc)
	Rights  = redis.NewScript(trialsSrc + rightsSrc)
	Start   = redis.NewScript(StartSrc + "return start(KEYS[1], ARGV[1], ARGV[2])\n")
	Expire  = redis.NewScript(leaseSrc + expireSrc)
)
