package manager

import (
	"testing"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"
)

func TestClientRateLimit(t *testing.T) {
	limiter := flowcontrol.NewFakeAlwaysRateLimiter()
	cases := []struct {
		name      string
		in        rest.Config
		qps       float32
		burst     int
		wantQPS   float32
		wantBurst int
		keepLimit bool
	}{
		// A kubeconfig read by client-go has QPS 0, which client-go would
		// turn into 5 requests per second.
		{name: "kubeconfig default gets no client-side limit", in: rest.Config{}, wantQPS: -1},
		{name: "explicit qps, burst twice", in: rest.Config{QPS: 5, Burst: 10}, qps: 50, wantQPS: 50, wantBurst: 100},
		{name: "explicit qps and burst", in: rest.Config{}, qps: 20, burst: 30, wantQPS: 20, wantBurst: 30},
		{name: "fractional qps keeps a burst of one", in: rest.Config{}, qps: 0.2, wantQPS: 0.2, wantBurst: 1},
		{name: "a rate limiter in the config wins", in: rest.Config{QPS: 7, Burst: 9, RateLimiter: limiter}, qps: 50, wantQPS: 7, wantBurst: 9, keepLimit: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			in := c.in
			got := clientRateLimit(&in, c.qps, c.burst)
			if got.QPS != c.wantQPS || got.Burst != c.wantBurst {
				t.Errorf("QPS, Burst = %v, %v; want %v, %v", got.QPS, got.Burst, c.wantQPS, c.wantBurst)
			}
			if (got.RateLimiter != nil) != c.keepLimit {
				t.Errorf("RateLimiter = %v; want kept: %v", got.RateLimiter, c.keepLimit)
			}
			if in.QPS != c.in.QPS {
				t.Errorf("the caller's config was changed: QPS %v", in.QPS)
			}
		})
	}
}
