package corral

import (
	"log/slog"
	"testing"
)

// TestOptionsDefaults checks that a nil *Options takes every documented
// default (the rules are internal/fill's; the defaults handed to it are
// the root's), and that NearCache's TTL is filled only when it is on.
func TestOptionsDefaults(t *testing.T) {
	o, err := (*Options)(nil).withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	want := defaults()
	want.NearCache.TTL = 0
	if o.Prefix != want.Prefix || o.LeaseTTL != DefaultLeaseTTL || o.LoadTimeout != DefaultLoadTimeout ||
		o.RedisTimeout != DefaultRedisTimeout || o.NegativeTTL != DefaultNegativeTTL || o.StaleTTL != 0 ||
		o.ErrorTTL != 0 || o.BreakerCooldown != DefaultBreakerCooldown || o.Beta != DefaultBeta ||
		o.Jitter != DefaultJitter || o.NoticeInlineLimit != DefaultNoticeInlineLimit ||
		o.MaxBackgroundRefreshes != DefaultMaxBackgroundRefreshes || o.BreakerThreshold != DefaultBreakerThreshold ||
		o.MaxValueBytes != DefaultMaxValueBytes || o.CompressMinBytes != DefaultCompressMinBytes ||
		o.MaxPendingInvalidations != DefaultMaxPendingInvalidations || o.FailSafe != want.FailSafe ||
		o.NearCache != want.NearCache || o.Codec != (JSONCodec{}) || o.Logger != slog.Default() || o.Rand == nil {
		t.Errorf("defaults: %+v", o)
	}
	if o.FailSafe != (FailSafeOptions{DefaultFailSafeTTL, DefaultFailSafeThrottle, DefaultFailSafeSize, DefaultFailSafeMaxBytes}) {
		t.Errorf("FailSafe defaults: %+v", o.FailSafe)
	}
	o, err = (&Options{NearCache: NearCacheOptions{Size: 1}, DisableJitter: true}).withDefaults()
	if err != nil || o.NearCache.TTL != DefaultNearCacheTTL || o.Jitter != 0 {
		t.Errorf("NearCache on, jitter off: %+v, %v", o, err)
	}
}
