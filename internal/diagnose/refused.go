package diagnose

import (
	"context"
	"crypto/tls"
	"net"
	"time"

	"github.com/corralhq/corral/internal/transport"
	"github.com/redis/go-redis/v9"
)

// NotChecked is Check's error when Redis could not be checked: err, from
// the first PING (ping) or a later step. A connection the server closed
// (a broken pipe, a reset) is looked into on a connection of Check's own,
// bounded by timeout: a server at maxclients says so before it closes
// each new connection, and the error then names that, and the fix.
func NotChecked(ctx context.Context, rdb redis.UniversalClient, timeout time.Duration, err error, ping bool) error {
	msg, full := transport.MaxClients(err.Error())
	if !full && !transport.Says(err, transport.Reply) && ctx.Err() == nil {
		msg, full = refusalOf(ctx, rdb, timeout)
	}
	switch {
	case full:
		return errorf("check: Redis refused the connection: %s: %s", msg, transport.MaxClientsFix)
	case ping && transport.Says(err, transport.Reply):
		return errorf("check: Redis refused the connection: %w", err)
	case ping:
		return errorf("check: Redis unreachable: %w", err)
	}
	return errorf("check: %w", err)
}

// refusalOf reads what a server of rdb says on a new connection, which
// Check opens itself (with the client's dialer, bounded by timeout) and
// writes a PING on: a server at maxclients refuses it with an error reply
// before it closes it, and refusalOf returns that reply. A server that
// answers the PING, or that cannot be reached, refuses nothing.
func refusalOf(ctx context.Context, rdb redis.UniversalClient, timeout time.Duration) (string, bool) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for _, dial := range dialersOf(rdb) {
		conn, err := dial(ctx)
		if err != nil {
			continue
		}
		deadline, _ := ctx.Deadline()
		conn.SetDeadline(deadline)
		conn.Write(transport.Ping) // a server at maxclients may have closed it already: its reply is read all the same
		var buf [512]byte
		n, _ := conn.Read(buf[:])
		conn.Close()
		if msg, ok := transport.RefusalReply(buf[:n]); ok {
			return msg, true
		}
	}
	return "", false
}

// dialersOf returns a way to connect to each server rdb is given: a single
// server's (or a failover client's master), or each seed of a Cluster.
func dialersOf(rdb redis.UniversalClient) []func(context.Context) (net.Conn, error) {
	switch c := rdb.(type) {
	case *redis.Client:
		o := c.Options()
		return []func(context.Context) (net.Conn, error){
			func(ctx context.Context) (net.Conn, error) { return o.Dialer(ctx, o.Network, o.Addr) },
		}
	case *redis.ClusterClient:
		o := c.Options()
		var dialers []func(context.Context) (net.Conn, error)
		for _, addr := range o.Addrs {
			dialers = append(dialers, func(ctx context.Context) (net.Conn, error) {
				if o.Dialer != nil {
					return o.Dialer(ctx, "tcp", addr)
				}
				if o.TLSConfig != nil {
					return (&tls.Dialer{Config: o.TLSConfig}).DialContext(ctx, "tcp", addr)
				}
				return (&net.Dialer{}).DialContext(ctx, "tcp", addr)
			})
		}
		return dialers
	}
	return nil
}
