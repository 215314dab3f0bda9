// Package driver is the registry of WAF engine drivers: the data planes an
// Engine (spec.driver.type) can deploy. A driver is one type and one
// Register call from its package's init. The Engine controller provisions
// through the registered driver and tears down what every other driver
// owns; the RuleSet controller reports the rules each driver cannot run;
// the drift tests hold the Engine CRD's enum and the chart's RBAC to the
// registry. docs/contributing/adding-a-driver.md walks through one.
package driver

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	wafv1alpha1 "github.com/vilaca/portal/api/waf/v1alpha1"
	"github.com/vilaca/portal/internal/waf/ruleset"
)

// Default is the driver of an Engine whose spec.driver.type is empty.
const Default = wafv1alpha1.DriverIstioWASM

// Driver is one data plane.
type Driver interface {
	// Name is the driver's value of spec.driver.type.
	Name() wafv1alpha1.DriverType
	// Provision applies the Engine's data plane through h and says what
	// it did. It is called on every reconcile of an accepted Engine whose
	// RuleSet is cached and runs on this driver, so it must be idempotent
	// (server-side apply is). The host tears down what other drivers own
	// afterwards.
	Provision(ctx context.Context, h Host, eng *wafv1alpha1.Engine) (Result, error)
	// Owned lists every object Provision may write for eng that belongs
	// to this driver alone (not the host's ServiceAccount and cache
	// NetworkPolicy). The host deletes them when the Engine moves to
	// another driver, is refused or goes, and the chart must grant
	// Portal patch and delete on their kinds.
	Owned(s Settings, eng *wafv1alpha1.Engine) []Object
	// Limits are the rules this data plane cannot run; the zero value
	// when it runs everything the sandbox admits.
	Limits() ruleset.Limits
}

// Object names one object a driver owns.
type Object struct {
	GVK       schema.GroupVersionKind
	Namespace string
	Name      string
}

// Result is what Provision reports.
type Result struct {
	// Message is the Ready condition's message.
	Message string
	// Requeue, when positive, brings the Engine back sooner than the
	// resync (a token to renew).
	Requeue time.Duration
	// TokenExpiry is status.tokenExpiresAt: when the cache token the
	// driver handed its data plane expires; nil when it handed none, and
	// then the host forgets any token it minted for the Engine.
	TokenExpiry *metav1.Time
}

// Settings are Portal's flags a driver reads.
type Settings struct {
	// Namespace is Portal's: where the cache runs.
	Namespace string
	// CacheService and CachePort: https://<CacheService>.<Namespace>.svc:<CachePort>.
	CacheService string
	CachePort    int32
	// CABundle returns the PEM CA the cache's certificate chains to.
	CABundle func() []byte
	// Images are the default image of each driver that deploys one
	// (--waf-wasm-image, --waf-proxy-image).
	Images map[wafv1alpha1.DriverType]string
	// AllowedImages are the prefixes an Engine's own image must start
	// with (--waf-engine-allowed-images).
	AllowedImages []string
	// OperatorName is --operator-name: set, the istio-wasm driver also
	// writes mesh entries.
	OperatorName string
}

// Token is a cache token the host minted for an Engine.
type Token struct {
	Value   string
	Expires time.Time
	// RenewAt is when the host mints the next one.
	RenewAt time.Time
}

// Host is what the Engine controller lends a driver: Portal's settings,
// its clock and client, and the pieces every data plane shares.
type Host interface {
	Settings() Settings
	Clock() clock.PassiveClock
	// Reader reads without an informer.
	Reader() client.Reader
	// Apply server-side applies obj (TypeMeta set, or unstructured) with
	// Portal's field owner.
	Apply(ctx context.Context, obj runtime.Object) error
	// AllowCache applies the NetworkPolicy, in Portal's namespace, that
	// lets the pods matching from in the Engine's namespace reach the
	// cache. Apply it before the data plane starts.
	AllowCache(ctx context.Context, eng *wafv1alpha1.Engine, from map[string]string) error
	// ServiceAccount applies the Engine's ServiceAccount and returns it as
	// stored; the cache scopes its tokens to the Engine's namespace.
	ServiceAccount(ctx context.Context, eng *wafv1alpha1.Engine) (*corev1.ServiceAccount, error)
	// Token returns a cache token of sa for audience, minting one when
	// none is held or it is due for renewal.
	Token(ctx context.Context, eng *wafv1alpha1.Engine, sa *corev1.ServiceAccount, audience string) (Token, error)
}

// registry holds the drivers; Register fills it from init functions only,
// so it is read without a lock.
var registry = map[wafv1alpha1.DriverType]Driver{}

// Register adds a driver. Call it from an init function; a second driver
// with the same name, or one without a name, is a programming error.
func Register(d Driver) {
	name := d.Name()
	if name == "" {
		panic("driver: Register with an empty name")
	}
	if _, dup := registry[name]; dup {
		panic(fmt.Sprintf("driver: %q registered twice", name))
	}
	registry[name] = d
}

// Lookup returns the driver of this name.
func Lookup(name wafv1alpha1.DriverType) (Driver, bool) {
	d, ok := registry[name]
	return d, ok
}

// All returns the registered drivers ordered by name.
func All() []Driver {
	return slices.SortedFunc(maps.Values(registry), func(a, b Driver) int { return cmp.Compare(a.Name(), b.Name()) })
}

// Names returns the registered drivers' names, sorted.
func Names() []wafv1alpha1.DriverType { return slices.Sorted(maps.Keys(registry)) }

// Of is the Engine's driver name, Default when it names none.
func Of(eng *wafv1alpha1.Engine) wafv1alpha1.DriverType {
	if eng.Spec.Driver.Type == "" {
		return Default
	}
	return eng.Spec.Driver.Type
}
